/* trace.c -- Triton's trace extension, level TIMESTAMPS.
 *
 * Settings: the global ones (from the config's "trace" section, then
 * POST v2/trace/setting), and a model's own over them, key by key: a key a
 * model has not set (or set back to null) is the global one. A model with
 * any key of its own samples with its own counter; its trace_count is its
 * own only when it set that key. As Triton, the rate-th request of each
 * `rate` is traced (rate 1: every one) while level is TIMESTAMPS and the
 * count left is not 0; each trace taken lowers a positive count by one.
 *
 * Traces: formatted on the request's thread (small, no disk) and queued
 * for one writer thread, at most TRACE_QUEUE_MAX waiting (more are counted
 * as dropped). The writer writes each file as Triton does, one JSON array
 * of objects {"id", "model_name", "model_version"} and {"id",
 * "timestamps": [{"name", "ns"}]}: with log_frequency N > 0 every N traces
 * close file.<k> and the next go to file.<k+1> (k from 0); with 0 they go
 * to the file itself, written as they come and closed (its array ended)
 * at shutdown or when the settings move it elsewhere. A changed trace_file
 * or log_frequency closes the old file and starts the index at 0 again. A
 * file that cannot be opened or written is logged once and counted, its
 * traces lost; never fatal. */
#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/error.h"
#include "common/log.h"
#include "server/buf.h"
#include "server/trace.h"

#define TRACE_QUEUE_MAX 4096
#define TRACE_MODEL_NAME_MAX 128

/* One set of settings, as a model's or the global ones. */
typedef struct trace_setting {
    bool timestamps;
    uint32_t rate;
    int64_t count;                /* traces left; -1: no bound */
    uint32_t log_frequency;
    char file[CFG_PATH_MAX];
} trace_setting_t;

/* Which keys a model set itself. */
enum { SET_LEVEL = 1, SET_RATE = 2, SET_COUNT = 4, SET_FREQ = 8, SET_FILE = 16 };

/* A model with settings of its own. */
typedef struct trace_model {
    struct trace_model *next;
    char name[TRACE_MODEL_NAME_MAX];
    unsigned set;                 /* SET_* */
    trace_setting_t own;          /* the keys in `set` */
    uint64_t n_seen;              /* its requests since it got settings of its own */
} trace_model_t;

/* A queued trace, or a marker that closes `path`'s file. */
typedef struct trace_item {
    struct trace_item *next;
    bool close;
    uint32_t log_frequency;
    char *text;                   /* the trace's objects, comma separated; NULL for a marker */
    char path[];                  /* the file */
} trace_item_t;

/* A file the writer has open (or between two of its .k files). Writer
 * thread only. */
typedef struct trace_out {
    struct trace_out *next;
    uint32_t log_frequency;       /* as when it was first written */
    FILE *fp;                     /* NULL: none open now */
    uint64_t n_in_file;
    unsigned index;               /* the next .k */
    bool failed;                  /* an error was logged for it */
    char path[];
} trace_out_t;

struct srv_trace {
    pthread_mutex_t lock;         /* everything below but the writer's own and the counters */
    pthread_cond_t wake;          /* the writer: items queued, or stop */
    pthread_cond_t caught_up;     /* flushers: n_done moved */
    trace_setting_t global;
    uint64_t n_seen;              /* requests sampled with the global settings */
    trace_model_t *models;
    atomic_bool any_on;           /* some setting is at TIMESTAMPS: the request path's check */
    uint64_t next_id;
    trace_item_t *head, *tail;
    size_t n_queued;              /* traces queued, markers not counted */
    uint64_t n_pushed, n_done;    /* items queued and items the writer is done with */
    bool stop;
    pthread_t writer;
    trace_out_t *outs;            /* the writer thread's */
    atomic_uint_fast64_t written, dropped, write_errors;
};

/* ---- settings ------------------------------------------------------------ */

static trace_model_t *model_find_locked(srv_trace_t *t, const char *name)
{
    for (trace_model_t *m = t->models; m; m = m->next)
        if (strcmp(m->name, name) == 0)
            return m;
    return NULL;
}

/* The effective settings of m (NULL: the global ones). */
static trace_setting_t effective_locked(const srv_trace_t *t, const trace_model_t *m)
{
    trace_setting_t s = t->global;
    if (!m)
        return s;
    if (m->set & SET_LEVEL)
        s.timestamps = m->own.timestamps;
    if (m->set & SET_RATE)
        s.rate = m->own.rate;
    if (m->set & SET_COUNT)
        s.count = m->own.count;
    if (m->set & SET_FREQ)
        s.log_frequency = m->own.log_frequency;
    if (m->set & SET_FILE)
        memcpy(s.file, m->own.file, sizeof s.file);
    return s;
}

static void any_on_update_locked(srv_trace_t *t)
{
    bool on = t->global.timestamps;
    for (trace_model_t *m = t->models; m && !on; m = m->next)
        on = (m->set & SET_LEVEL) && m->own.timestamps;
    atomic_store_explicit(&t->any_on, on, memory_order_relaxed);
}

static cJSON *settings_json(const trace_setting_t *s)
{
    char text[32];
    cJSON *o = cJSON_CreateObject(), *lv = cJSON_AddArrayToObject(o, "trace_level");
    if (lv)
        cJSON_AddItemToArray(lv, cJSON_CreateString(s->timestamps ? "TIMESTAMPS" : "OFF"));
    snprintf(text, sizeof text, "%u", s->rate);
    cJSON_AddStringToObject(o, "trace_rate", text);
    snprintf(text, sizeof text, "%lld", (long long)s->count);
    cJSON_AddStringToObject(o, "trace_count", text);
    snprintf(text, sizeof text, "%u", s->log_frequency);
    cJSON_AddStringToObject(o, "log_frequency", text);
    cJSON_AddStringToObject(o, "trace_file", s->file);
    /* Any add that ran out of memory left its key out. */
    if (o && cJSON_GetArraySize(o) != 5) {
        cJSON_Delete(o);
        return NULL;
    }
    return o;
}

cJSON *srv_trace_settings_json(srv_trace_t *t, const char *model)
{
    pthread_mutex_lock(&t->lock);
    trace_setting_t s = effective_locked(t, model && model[0] ? model_find_locked(t, model) : NULL);
    pthread_mutex_unlock(&t->lock);
    return settings_json(&s);
}

/* An unsigned setting's value: a string of digits (Triton's form) or a
 * JSON number, in lo..UINT32_MAX. */
static int parse_u32(const cJSON *v, const char *key, uint32_t lo, uint32_t *out)
{
    char *end = NULL;
    double d = -1;
    if (cJSON_IsString(v) && v->valuestring[0] >= '0' && v->valuestring[0] <= '9')
        d = strtod(v->valuestring, &end), d = *end ? -1 : d;
    else if (cJSON_IsNumber(v))
        d = v->valuedouble;
    if (!(d >= lo && d <= UINT32_MAX) || d != (double)(uint32_t)d)
        return fs_err(FS_EINVAL, "trace setting '%s': expected an integer %u..%u as a string",
                      key, lo, UINT32_MAX);
    *out = (uint32_t)d;
    return 0;
}

/* The level: a string or a list of strings (Triton's), at least one. */
static int parse_level(const cJSON *v, bool *on)
{
    bool one;
    *on = false;
    if (cJSON_IsString(v)) {
        if (cfg_trace_level_parse(v->valuestring, on) != 0)
            return fs_err(FS_EINVAL, "trace setting 'trace_level': %s", fs_errmsg());
        return 0;
    }
    if (!cJSON_IsArray(v) || cJSON_GetArraySize(v) == 0)
        return fs_err(FS_EINVAL, "trace setting 'trace_level': expected a list of levels "
                      "(\"OFF\", \"TIMESTAMPS\")");
    const cJSON *e;
    cJSON_ArrayForEach(e, v) {
        if (!cJSON_IsString(e))
            return fs_err(FS_EINVAL, "trace setting 'trace_level': expected a list of strings");
        if (cfg_trace_level_parse(e->valuestring, &one) != 0)
            return fs_err(FS_EINVAL, "trace setting 'trace_level': %s", fs_errmsg());
        *on = *on || one;
    }
    return 0;
}

/* One key of a POST body onto *s and *set (a copy). null clears a model's
 * key (`model`), and is refused on the global settings. */
static int apply_key(const cJSON *v, bool model, trace_setting_t *s, unsigned *set)
{
    static const struct {
        const char *name;
        unsigned bit;
    } keys[] = {{"trace_level", SET_LEVEL}, {"trace_rate", SET_RATE}, {"trace_count", SET_COUNT},
                {"log_frequency", SET_FREQ}, {"trace_file", SET_FILE}};
    const char *key = v->string;
    unsigned bit = 0;
    for (size_t i = 0; i < sizeof keys / sizeof keys[0]; i++)
        if (strcmp(key, keys[i].name) == 0)
            bit = keys[i].bit;
    if (!bit)
        return fs_err(FS_EINVAL, "unknown trace setting '%.64s' (trace_level, trace_rate, "
                      "trace_count, log_frequency, trace_file)", key);
    if (cJSON_IsNull(v)) {
        if (!model)
            return fs_err(FS_EINVAL, "trace setting '%s': null clears a model's own setting; "
                          "the global one needs a value", key);
        *set &= ~bit;
        return 0;
    }
    int rc = 0;
    switch (bit) {
    case SET_LEVEL:
        rc = parse_level(v, &s->timestamps);
        break;
    case SET_RATE:
        rc = parse_u32(v, key, 1, &s->rate);
        break;
    case SET_FREQ:
        rc = parse_u32(v, key, 0, &s->log_frequency);
        break;
    case SET_COUNT:
        if (cJSON_IsNumber(v) && v->valuedouble >= -1 && v->valuedouble < 9e15 &&
            v->valuedouble == (double)(int64_t)v->valuedouble)
            s->count = (int64_t)v->valuedouble;
        else if (!cJSON_IsString(v) || cfg_trace_count_parse(v->valuestring, &s->count) != 0)
            rc = fs_err(FS_EINVAL, "trace setting 'trace_count': expected an integer -1 (no "
                        "bound) or more as a string");
        break;
    default: /* SET_FILE */
        if (!cJSON_IsString(v) || strlen(v->valuestring) >= sizeof s->file)
            rc = fs_err(FS_EINVAL, "trace setting 'trace_file': expected a path shorter than "
                        "%zu bytes", sizeof s->file);
        else
            snprintf(s->file, sizeof s->file, "%s", v->valuestring);
        break;
    }
    if (rc == 0)
        *set |= bit;
    return rc;
}

/* Appends `it` to the writer's queue and wakes the writer; lock held. */
static void queue_push_locked(srv_trace_t *t, trace_item_t *it)
{
    if (t->tail)
        t->tail->next = it;
    else
        t->head = it;
    t->tail = it;
    t->n_pushed++;
    pthread_cond_signal(&t->wake);
}

/* Queues a marker closing `path`'s file (its index starts again at 0).
 * Out of memory: logged; the file then stays open until shutdown. */
static void push_close_locked(srv_trace_t *t, const char *path)
{
    size_t n = strlen(path) + 1;
    trace_item_t *it = calloc(1, sizeof *it + n);
    if (!it) {
        FS_LOG_W("trace", "out of memory closing trace file '%s'; it closes at shutdown", path);
        return;
    }
    it->close = true;
    memcpy(it->path, path, n);
    queue_push_locked(t, it);
}

int srv_trace_settings_update(srv_trace_t *t, const char *model, const cJSON *body)
{
    if (!cJSON_IsObject(body))
        return fs_err(FS_EINVAL, "trace settings: expected a JSON object");
    bool is_model = model && model[0];
    if (is_model && strlen(model) >= TRACE_MODEL_NAME_MAX)
        return fs_err(FS_EINVAL, "model name too long for trace settings");
    trace_model_t *fresh = NULL;
    if (is_model && !(fresh = calloc(1, sizeof *fresh)))
        return fs_err(FS_ENOMEM, "out of memory for model '%s''s trace settings", model);
    pthread_mutex_lock(&t->lock);
    trace_model_t *m = is_model ? model_find_locked(t, model) : NULL;
    trace_setting_t before = effective_locked(t, m);
    trace_setting_t s = is_model ? (m ? m->own : before) : t->global;
    unsigned set = m ? m->set : is_model ? 0 : ~0u;
    int rc = 0;
    const cJSON *v;
    cJSON_ArrayForEach(v, body) {
        if ((rc = apply_key(v, is_model, &s, &set)) != 0)
            break;
    }
    /* What it would be: TIMESTAMPS needs a file to write to. */
    trace_setting_t after = t->global;
    if (rc == 0) {
        if (is_model) {
            trace_model_t probe = {.set = set, .own = s};
            after = effective_locked(t, &probe);
        } else {
            after = s;
        }
        if (after.timestamps && !after.file[0])
            rc = fs_err(FS_EINVAL, "trace setting 'trace_level': TIMESTAMPS needs a "
                        "trace_file to write to");
    }
    if (rc == 0) {
        if (!is_model) {
            t->global = s;
        } else if (!m && set) {
            m = fresh;
            fresh = NULL;
            snprintf(m->name, sizeof m->name, "%s", model);
            m->next = t->models;
            t->models = m;
        }
        if (m) {
            m->set = set;
            m->own = s;
            if (!set) { /* nothing of its own left: the global settings again */
                trace_model_t **pp = &t->models;
                while (*pp != m)
                    pp = &(*pp)->next;
                *pp = m->next;
                free(m);
            }
        }
        if (before.file[0] && (strcmp(before.file, after.file) != 0 ||
                               before.log_frequency != after.log_frequency))
            push_close_locked(t, before.file);
        any_on_update_locked(t);
    }
    pthread_mutex_unlock(&t->lock);
    free(fresh);
    return rc;
}

/* ---- traces --------------------------------------------------------------- */

/* The trace's objects as Triton writes them; NULL on FS_ENOMEM. */
static char *trace_text(uint64_t id, const char *model, int64_t version,
                        const srv_trace_times_t *tm)
{
    const struct {
        const char *name;
        uint64_t ns;
    } stamps[] = {{"REQUEST_START", tm->request_start_ns}, {"QUEUE_START", tm->queue_start_ns},
                  {"COMPUTE_START", tm->compute_start_ns},
                  {"COMPUTE_INPUT_END", tm->compute_input_end_ns},
                  {"COMPUTE_OUTPUT_START", tm->compute_output_start_ns},
                  {"COMPUTE_END", tm->compute_end_ns},
                  {"REQUEST_END", tm->request_end_ns}};
    srv_buf_t b = {0};
    srv_buf_printf(&b, "{\"id\":%llu,\"model_name\":", (unsigned long long)id);
    srv_buf_json_string(&b, model);
    srv_buf_printf(&b, ",\"model_version\":%lld}", (long long)version);
    for (size_t i = 0; i < sizeof stamps / sizeof stamps[0]; i++)
        if (stamps[i].ns)
            srv_buf_printf(&b, ",\n{\"id\":%llu,\"timestamps\":[{\"name\":\"%s\",\"ns\":%llu}]}",
                           (unsigned long long)id, stamps[i].name,
                           (unsigned long long)stamps[i].ns);
    srv_buf_append(&b, "", 1); /* its NUL */
    if (b.failed) {
        srv_buf_free(&b);
        return NULL;
    }
    return b.data;
}

void srv_trace_request(srv_trace_t *t, const char *model, int64_t version,
                       const srv_trace_times_t *times)
{
    if (!t || !atomic_load_explicit(&t->any_on, memory_order_relaxed))
        return;
    pthread_mutex_lock(&t->lock);
    trace_model_t *m = model_find_locked(t, model);
    trace_setting_t s = effective_locked(t, m);
    uint64_t *seen = m ? &m->n_seen : &t->n_seen;
    int64_t *count = m && (m->set & SET_COUNT) ? &m->own.count : &t->global.count;
    bool take = s.timestamps && s.count != 0 && ++*seen % s.rate == 0;
    uint64_t id = 0;
    if (take) {
        if (*count > 0)
            --*count;
        id = ++t->next_id;
    }
    bool full = take && t->n_queued >= TRACE_QUEUE_MAX;
    pthread_mutex_unlock(&t->lock);
    if (!take)
        return;
    size_t n = strlen(s.file) + 1;
    trace_item_t *it = full ? NULL : calloc(1, sizeof *it + n);
    char *text = it ? trace_text(id, model, version, times) : NULL;
    if (!text) {
        free(it);
        atomic_fetch_add_explicit(&t->dropped, 1, memory_order_relaxed);
        return;
    }
    it->text = text;
    it->log_frequency = s.log_frequency;
    memcpy(it->path, s.file, n);
    pthread_mutex_lock(&t->lock);
    if (t->n_queued >= TRACE_QUEUE_MAX) {
        pthread_mutex_unlock(&t->lock);
        free(text);
        free(it);
        atomic_fetch_add_explicit(&t->dropped, 1, memory_order_relaxed);
        return;
    }
    t->n_queued++;
    queue_push_locked(t, it);
    pthread_mutex_unlock(&t->lock);
}

/* ---- the writer ----------------------------------------------------------- */

static void out_error(srv_trace_t *t, trace_out_t *o, const char *what, const char *name)
{
    atomic_fetch_add_explicit(&t->write_errors, 1, memory_order_relaxed);
    if (!o->failed)
        FS_LOG_W("trace", "cannot %s trace file '%s': %s; its traces are lost (counted in "
                 "flatserve_trace_write_errors_total)", what, name, strerror(errno));
    o->failed = true;
}

/* Ends the open file's array and closes it. */
static void out_close(srv_trace_t *t, trace_out_t *o)
{
    if (!o->fp)
        return;
    bool ok = fputs("\n]\n", o->fp) >= 0;
    ok = fclose(o->fp) == 0 && ok;
    o->fp = NULL;
    if (!ok)
        out_error(t, o, "write", o->path);
    if (o->log_frequency)
        o->index++;
    o->n_in_file = 0;
}

static void out_write(srv_trace_t *t, trace_item_t *it)
{
    trace_out_t **pp = &t->outs;
    while (*pp && strcmp((*pp)->path, it->path) != 0)
        pp = &(*pp)->next;
    trace_out_t *o = *pp;
    if (it->close) {
        if (o) {
            out_close(t, o);
            *pp = o->next;
            free(o);
        }
        return;
    }
    if (!o) {
        size_t n = strlen(it->path) + 1;
        if (!(o = calloc(1, sizeof *o + n))) {
            atomic_fetch_add_explicit(&t->dropped, 1, memory_order_relaxed);
            return;
        }
        memcpy(o->path, it->path, n);
        o->log_frequency = it->log_frequency;
        o->next = t->outs;
        t->outs = o;
    }
    char name[CFG_PATH_MAX + 16];
    if (o->log_frequency)
        snprintf(name, sizeof name, "%s.%u", o->path, o->index);
    else
        snprintf(name, sizeof name, "%s", o->path);
    if (!o->fp && !(o->fp = fopen(name, "w"))) {
        out_error(t, o, "open", name);
        return;
    }
    if (fprintf(o->fp, "%s%s", o->n_in_file ? ",\n" : "[\n", it->text) < 0) {
        out_error(t, o, "write", name);
        return;
    }
    atomic_fetch_add_explicit(&t->written, 1, memory_order_relaxed);
    if (o->log_frequency && ++o->n_in_file == o->log_frequency)
        out_close(t, o);
    else if (!o->log_frequency)
        o->n_in_file++;
}

static void *writer_main(void *arg)
{
    srv_trace_t *t = arg;
    pthread_mutex_lock(&t->lock);
    for (;;) {
        while (!t->head && !t->stop)
            pthread_cond_wait(&t->wake, &t->lock);
        trace_item_t *list = t->head;
        if (!list && t->stop)
            break;
        t->head = t->tail = NULL;
        size_t k = 0, n_traces = 0;
        pthread_mutex_unlock(&t->lock);
        while (list) {
            trace_item_t *it = list;
            list = it->next;
            out_write(t, it);
            n_traces += !it->close;
            k++;
            free(it->text);
            free(it);
        }
        /* What stays open shows its traces so far. */
        for (trace_out_t *o = t->outs; o; o = o->next)
            if (o->fp && fflush(o->fp) != 0)
                out_error(t, o, "write", o->path);
        pthread_mutex_lock(&t->lock);
        t->n_queued -= n_traces;
        t->n_done += k;
        pthread_cond_broadcast(&t->caught_up);
    }
    pthread_mutex_unlock(&t->lock);
    while (t->outs) {
        trace_out_t *o = t->outs;
        t->outs = o->next;
        out_close(t, o);
        free(o);
    }
    return NULL;
}

void srv_trace_flush(srv_trace_t *t)
{
    pthread_mutex_lock(&t->lock);
    uint64_t want = t->n_pushed;
    while (t->n_done < want)
        pthread_cond_wait(&t->caught_up, &t->lock);
    pthread_mutex_unlock(&t->lock);
}

void srv_trace_stats(srv_trace_t *t, srv_trace_stats_t *out)
{
    out->written = atomic_load(&t->written);
    out->dropped = atomic_load(&t->dropped);
    out->write_errors = atomic_load(&t->write_errors);
}

int srv_trace_create(const cfg_t *cfg, srv_trace_t **out)
{
    *out = NULL;
    if (cfg->trace.timestamps && !cfg->trace.file[0])
        return fs_err(FS_EINVAL, "trace.level TIMESTAMPS needs trace.file (--trace-config "
                      "triton,file=PATH) to write to");
    srv_trace_t *t = calloc(1, sizeof *t);
    if (!t)
        return fs_err(FS_ENOMEM, "out of memory for tracing");
    t->global = (trace_setting_t){.timestamps = cfg->trace.timestamps, .rate = cfg->trace.rate,
                                  .count = cfg->trace.count,
                                  .log_frequency = cfg->trace.log_frequency};
    memcpy(t->global.file, cfg->trace.file, sizeof t->global.file);
    pthread_mutex_init(&t->lock, NULL);
    pthread_cond_init(&t->wake, NULL);
    pthread_cond_init(&t->caught_up, NULL);
    any_on_update_locked(t);
    if (pthread_create(&t->writer, NULL, writer_main, t) != 0) {
        pthread_mutex_destroy(&t->lock);
        pthread_cond_destroy(&t->wake);
        pthread_cond_destroy(&t->caught_up);
        free(t);
        return fs_err(FS_EIO, "cannot start the trace writer thread");
    }
    *out = t;
    return 0;
}

void srv_trace_destroy(srv_trace_t *t)
{
    if (!t)
        return;
    pthread_mutex_lock(&t->lock);
    t->stop = true;
    pthread_cond_signal(&t->wake);
    pthread_mutex_unlock(&t->lock);
    pthread_join(t->writer, NULL);
    while (t->models) {
        trace_model_t *m = t->models;
        t->models = m->next;
        free(m);
    }
    pthread_mutex_destroy(&t->lock);
    pthread_cond_destroy(&t->wake);
    pthread_cond_destroy(&t->caught_up);
    free(t);
}
