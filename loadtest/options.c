/* options.c -- loadgen's flags and scenario files: one table of keys, each
 * with its value form, help text and setter, so the command line, the file
 * and --help can never disagree about what a key is. */
#include "loadtest/options.h"

#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "common/error.h"
#include "common/parse.h"
#include "engine/registry.h"

#define NS_PER_S 1000000000ull

/* Bits of lg_opts_t.cli_lists: the repeatable keys. */
#define LIST_MODEL 1u
#define LIST_DIM 2u

typedef int (*opt_set_fn)(lg_opts_t *o, const char *v, const char *where);

/* One key: what --help says about it and how its text becomes a setting. */
typedef struct lg_opt {
    const char *name;      /* the long flag without "--", and the file's key */
    const char *arg;       /* the value form for --help; NULL: a switch */
    const char *help;      /* one line or more, defaults included */
    opt_set_fn set;
    unsigned list_bit;     /* repeatable: its LIST_* bit; 0: one value */
} lg_opt_t;

/* --- value forms ------------------------------------------------------------ */

static int parse_u64(const char *v, uint64_t min, uint64_t max, const char *where,
                     uint64_t *out)
{
    const char *p = v;
    uint64_t x = 0;
    if (*p < '0' || *p > '9')
        goto bad;
    for (; *p >= '0' && *p <= '9'; p++) {
        if (x > (UINT64_MAX - (uint64_t)(*p - '0')) / 10)
            goto bad;
        x = x * 10 + (uint64_t)(*p - '0');
    }
    if (*p != '\0' || x < min || x > max)
        goto bad;
    *out = x;
    return 0;
bad:
    return fs_err(FS_EINVAL, "%s: expected an integer %llu..%llu, got \"%s\"", where,
                  (unsigned long long)min, (unsigned long long)max, v);
}

static int parse_double(const char *v, double min, double max, const char *where, double *out)
{
    char *end = NULL;
    errno = 0;
    double x = strtod(v, &end);
    if (end == v || *end != '\0' || errno != 0 || !isfinite(x) || x < min || x > max)
        return fs_err(FS_EINVAL, "%s: expected a number %g..%g, got \"%s\"", where, min, max, v);
    *out = x;
    return 0;
}

/* A duration with a unit ("20s", "500ms"), or a bare number of seconds: the
 * flags are written as seconds often enough ("--idle 45") that refusing a
 * bare number would only annoy. */
static int parse_dur(const char *v, const char *where, uint64_t *out)
{
    double secs;
    char *end = NULL;
    errno = 0;
    secs = strtod(v, &end);
    if (end != v && *end == '\0' && errno == 0 && isfinite(secs) && secs >= 0 && secs < 1e9) {
        *out = (uint64_t)llround(secs * (double)NS_PER_S);
        return 0;
    }
    if (fs_parse_duration(v, out) != 0)
        return fs_err(FS_EINVAL, "%s: expected a duration such as \"20s\" or \"500ms\", got \"%s\"",
                      where, v);
    return 0;
}

static int parse_bool(const char *v, const char *where, int *out)
{
    if (!strcmp(v, "true") || !strcmp(v, "1") || !strcmp(v, "yes")) {
        *out = 1;
        return 0;
    }
    if (!strcmp(v, "false") || !strcmp(v, "0") || !strcmp(v, "no")) {
        *out = 0;
        return 0;
    }
    return fs_err(FS_EINVAL, "%s: expected true or false, got \"%s\"", where, v);
}

static int copy_text(char *dst, size_t cap, const char *v, const char *where)
{
    size_t n = strlen(v);
    if (n >= cap)
        return fs_err(FS_EINVAL, "%s: longer than %zu bytes", where, cap - 1);
    memcpy(dst, v, n + 1);
    return 0;
}

static int parse_u32_strict(const char *s, size_t len, uint32_t *out)
{
    uint64_t x = 0;
    if (len == 0 || len > 8)
        return -1;
    for (size_t i = 0; i < len; i++) {
        if (s[i] < '0' || s[i] > '9')
            return -1;
        x = x * 10 + (uint64_t)(s[i] - '0');
    }
    if (x < 1 || x > LG_DIM_LIMIT)
        return -1;
    *out = (uint32_t)x;
    return 0;
}

int lg_pick_parse(const char *text, lg_pick_t *out)
{
    lg_pick_t p;
    memset(&p, 0, sizeof p);
    const char *dots = strstr(text, "..");
    if (dots) {
        p.is_range = 1;
        if (parse_u32_strict(text, (size_t)(dots - text), &p.lo) ||
            parse_u32_strict(dots + 2, strlen(dots + 2), &p.hi) || p.lo > p.hi)
            return fs_err(FS_EINVAL,
                          "\"%s\": expected a range LO..HI with 1 <= LO <= HI <= %u", text,
                          LG_DIM_LIMIT);
        *out = p;
        return 0;
    }
    const char *s = text;
    for (;;) {
        const char *comma = strchr(s, ',');
        size_t len = comma ? (size_t)(comma - s) : strlen(s);
        if (p.n == LG_PICK_MAX)
            return fs_err(FS_EINVAL, "\"%s\": more than %d values", text, LG_PICK_MAX);
        if (parse_u32_strict(s, len, &p.values[p.n]))
            return fs_err(FS_EINVAL,
                          "\"%s\": expected LO..HI, or a list of integers 1..%u such as 1,8,64",
                          text, LG_DIM_LIMIT);
        p.n++;
        if (!comma)
            break;
        s = comma + 1;
    }
    *out = p;
    return 0;
}

uint32_t lg_pick_draw(const lg_pick_t *p, uint64_t r)
{
    if (p->is_range)
        return p->lo + (uint32_t)(r % ((uint64_t)p->hi - p->lo + 1));
    return p->values[r % p->n];
}

uint32_t lg_pick_max(const lg_pick_t *p)
{
    if (p->is_range)
        return p->hi;
    uint32_t m = 0;
    for (uint32_t i = 0; i < p->n; i++)
        m = p->values[i] > m ? p->values[i] : m;
    return m;
}

/* Input names may hold ':' (TensorFlow's "x:0"), so the two separators are
 * the last two colons. */
int lg_dim_parse(const char *text, lg_dim_t *out)
{
    lg_dim_t d;
    memset(&d, 0, sizeof d);
    const char *c2 = strrchr(text, ':');
    const char *c1 = NULL;
    for (const char *p = text; c2 && p < c2; p++)
        if (*p == ':')
            c1 = p;
    uint32_t axis = 0;
    if (!c1 || c1 == text || (size_t)(c1 - text) >= LG_NAME_MAX)
        goto bad;
    if (c2 - c1 - 1 < 1 || c2 - c1 - 1 > 3)
        goto bad;
    for (const char *p = c1 + 1; p < c2; p++) {
        if (*p < '0' || *p > '9')
            goto bad;
        axis = axis * 10 + (uint32_t)(*p - '0');
    }
    memcpy(d.input, text, (size_t)(c1 - text));
    d.axis = axis;
    if (lg_pick_parse(c2 + 1, &d.pick) != 0)
        return fs_err(FS_EINVAL, "dim \"%s\": %s", text, fs_errmsg());
    *out = d;
    return 0;
bad:
    return fs_err(FS_EINVAL, "dim \"%s\": expected INPUT:AXIS:LO..HI such as embeddings:1:16..512",
                  text);
}

int lg_model_ref_parse(const char *text, lg_model_ref_t *out)
{
    lg_model_ref_t m = {.weight = 1.0};
    const char *colon = strrchr(text, ':');
    size_t len = colon ? (size_t)(colon - text) : strlen(text), at;
    if (len >= LG_NAME_MAX)
        return fs_err(FS_EINVAL, "model \"%s\": expected NAME[:WEIGHT], NAME of at most %d bytes",
                      text, LG_NAME_MAX - 1);
    memcpy(m.name, text, len);
    const char *why = eng_registry_name_problem(m.name, &at);
    if (why)
        return fs_err(FS_EINVAL, "model \"%s\": expected NAME[:WEIGHT], but NAME %s", text, why);
    if (colon) {
        char *end = NULL;
        errno = 0;
        m.weight = strtod(colon + 1, &end);
        if (end == colon + 1 || *end != '\0' || errno || !isfinite(m.weight) || m.weight <= 0)
            return fs_err(FS_EINVAL, "model \"%s\": the weight after ':' must be a number > 0",
                          text);
    }
    *out = m;
    return 0;
}

int lg_url_host(const char *url, char *host, size_t host_len, int *is_loopback)
{
    const char *p;
    size_t n;
    if (strncmp(url, "http://", 7) != 0)
        return fs_err(FS_EINVAL,
                      "url \"%s\": expected http://HOST:PORT (the server speaks plain HTTP)", url);
    p = url + 7;
    if (*p == '[') {
        const char *close = strchr(p, ']');
        if (!close)
            return fs_err(FS_EINVAL, "url \"%s\": unclosed '[' in the host", url);
        p++;
        n = (size_t)(close - p);
    } else {
        n = strcspn(p, ":/");
    }
    if (n == 0 || n >= host_len)
        return fs_err(FS_EINVAL, "url \"%s\": no host, or a host too long", url);
    memcpy(host, p, n);
    host[n] = '\0';
    *is_loopback = !strcmp(host, "localhost") || !strcmp(host, "::1") ||
                   (!strncmp(host, "127.", 4) && strspn(host, "0123456789.") == n);
    return 0;
}

/* --- setters ---------------------------------------------------------------- */

#define SET_U64(fn, field, min, max)                                                         \
    static int fn(lg_opts_t *o, const char *v, const char *where)                            \
    {                                                                                        \
        uint64_t x;                                                                          \
        int rc = parse_u64(v, min, max, where, &x);                                          \
        if (rc == 0)                                                                         \
            o->field = x;                                                                    \
        return rc;                                                                           \
    }
#define SET_DUR(fn, field)                                                                   \
    static int fn(lg_opts_t *o, const char *v, const char *where)                            \
    {                                                                                        \
        return parse_dur(v, where, &o->field);                                               \
    }
#define SET_DOUBLE(fn, field, min, max)                                                      \
    static int fn(lg_opts_t *o, const char *v, const char *where)                            \
    {                                                                                        \
        return parse_double(v, min, max, where, &o->field);                                  \
    }
#define SET_SIZE(fn, field)                                                                  \
    static int fn(lg_opts_t *o, const char *v, const char *where)                            \
    {                                                                                        \
        uint64_t x;                                                                          \
        if (fs_parse_size(v, &x) != 0)                                                       \
            return fs_err(FS_EINVAL, "%s: %s", where, fs_errmsg());                          \
        o->field = x;                                                                        \
        return 0;                                                                            \
    }
#define SET_TEXT(fn, field)                                                                  \
    static int fn(lg_opts_t *o, const char *v, const char *where)                            \
    {                                                                                        \
        return copy_text(o->field, sizeof o->field, v, where);                               \
    }

SET_U64(set_requests, requests, 0, UINT64_MAX / 2)
SET_U64(set_seed, seed, 0, UINT64_MAX)

static int set_trace_seed(lg_opts_t *o, const char *v, const char *where)
{
    int rc = parse_u64(v, 0, UINT64_MAX, where, &o->trace_seed);
    if (rc == 0)
        o->has_trace_seed = true;
    return rc;
}
SET_U64(set_reload_every, reload_every, 0, UINT64_MAX / 2)
SET_U64(set_cycle_requests, cycle_requests, 1, UINT64_MAX / 2)
SET_U64(set_max_errors, max_errors, 0, UINT64_MAX / 2)
SET_DUR(set_duration, duration_ns)
SET_DUR(set_reload_every_s, reload_every_ns)
SET_DUR(set_idle, idle_ns)
SET_DUR(set_idle_trim_after, idle_trim_after_ns)
SET_DUR(set_sample_interval, sample_interval_ns)
SET_DUR(set_timeout, timeout_ns)
SET_DOUBLE(set_rate, rate, 0, 1e7)
SET_DOUBLE(set_bad_fraction, bad_fraction, 0, 1)
SET_DOUBLE(set_warmup, warmup_fraction, 0, 0.9)
SET_DOUBLE(set_max_reserved_ratio, max_reserved_ratio, 0, 1e9)
SET_DOUBLE(set_max_rss_drift, max_rss_drift, 0, 1e9)
SET_TEXT(set_url, url)
SET_TEXT(set_admin_token, admin_token)
SET_TEXT(set_csv, csv)
SET_TEXT(set_summary, summary)
SET_TEXT(set_plot, plot)
SET_TEXT(set_scenario, scenario)

static int set_concurrency(lg_opts_t *o, const char *v, const char *where)
{
    uint64_t x;
    int rc = parse_u64(v, 1, 4096, where, &x);
    if (rc == 0) {
        o->concurrency = (uint32_t)x;
        o->concurrency_set = 1;
    }
    return rc;
}

static int set_cycles(lg_opts_t *o, const char *v, const char *where)
{
    uint64_t x;
    int rc = parse_u64(v, 0, 1000000, where, &x);
    if (rc == 0)
        o->cycles = (uint32_t)x;
    return rc;
}

static int set_allow_remote(lg_opts_t *o, const char *v, const char *where)
{
    return parse_bool(v, where, &o->allow_remote);
}

static int set_help(lg_opts_t *o, const char *v, const char *where)
{
    return parse_bool(v, where, &o->help);
}

static int set_arrival(lg_opts_t *o, const char *v, const char *where)
{
    if (!strcmp(v, "poisson"))
        o->arrival = LG_ARRIVAL_POISSON;
    else if (!strcmp(v, "fixed"))
        o->arrival = LG_ARRIVAL_FIXED;
    else
        return fs_err(FS_EINVAL, "%s: expected poisson or fixed, got \"%s\"", where, v);
    return 0;
}

static int set_encoding(lg_opts_t *o, const char *v, const char *where)
{
    if (!strcmp(v, "json"))
        o->encoding = LG_ENC_JSON;
    else if (!strcmp(v, "binary"))
        o->encoding = LG_ENC_BINARY;
    else if (!strcmp(v, "mixed"))
        o->encoding = LG_ENC_MIXED;
    else
        return fs_err(FS_EINVAL, "%s: expected json, binary or mixed, got \"%s\"", where, v);
    return 0;
}

static int set_batch(lg_opts_t *o, const char *v, const char *where)
{
    if (lg_pick_parse(v, &o->batch) != 0)
        return fs_err(FS_EINVAL, "%s: %s", where, fs_errmsg());
    return 0;
}

static int set_model(lg_opts_t *o, const char *v, const char *where)
{
    lg_model_ref_t m;
    if (lg_model_ref_parse(v, &m) != 0)
        return fs_err(FS_EINVAL, "%s: %s", where, fs_errmsg());
    if (o->model_is_default) {
        o->n_models = 0;
        o->model_is_default = 0;
    }
    for (uint32_t i = 0; i < o->n_models; i++)
        if (!strcmp(o->models[i].name, m.name))
            return fs_err(FS_EINVAL, "%s: model \"%s\" is already in the mix", where, m.name);
    if (o->n_models == LG_MODELS_MAX)
        return fs_err(FS_EINVAL, "%s: more than %d models", where, LG_MODELS_MAX);
    o->models[o->n_models++] = m;
    return 0;
}

/* "none" empties the list, so a command line can drop a scenario's dims
 * (run_scenario.sh does when it swaps in a model without those inputs). */
static int set_dim(lg_opts_t *o, const char *v, const char *where)
{
    lg_dim_t d;
    if (!strcmp(v, "none")) {
        o->n_dims = 0;
        return 0;
    }
    if (lg_dim_parse(v, &d) != 0)
        return fs_err(FS_EINVAL, "%s: %s", where, fs_errmsg());
    for (uint32_t i = 0; i < o->n_dims; i++)
        if (!strcmp(o->dims[i].input, d.input) && o->dims[i].axis == d.axis)
            return fs_err(FS_EINVAL, "%s: input \"%s\" axis %u already has a --dim", where,
                          d.input, d.axis);
    if (o->n_dims == LG_DIMS_MAX)
        return fs_err(FS_EINVAL, "%s: more than %d dims", where, LG_DIMS_MAX);
    o->dims[o->n_dims++] = d;
    return 0;
}

SET_SIZE(set_max_cycle_drift, max_cycle_drift_bytes)
SET_SIZE(set_idle_trim_keep, idle_trim_keep)

static int set_max_rss_cycle_drift(lg_opts_t *o, const char *v, const char *where)
{
    if (fs_parse_size(v, &o->max_rss_cycle_drift) != 0)
        return fs_err(FS_EINVAL, "%s: %s", where, fs_errmsg());
    o->rss_cycle_bound_set = 1;
    return 0;
}

static const lg_opt_t lg_opt_table[] = {
    {"scenario", "FILE",
     "read `key = value` lines (keys: these flag names) first; flags override them",
     set_scenario, 0},
    {"url", "URL",
     "the server, http://HOST:PORT (default http://127.0.0.1:8000)",
     set_url, 0},
    {"allow-remote", NULL,
     "allow a host that is not loopback (127.0.0.0/8, ::1, localhost)",
     set_allow_remote, 0},
    {"concurrency", "N",
     "closed loop: N requests always in flight (default 4); with --rate: at most N in flight "
     "(default 64)",
     set_concurrency, 0},
    {"rate", "R",
     "open loop: R requests/s whatever the answers do (default 0: closed loop)",
     set_rate, 0},
    {"arrival", "KIND",
     "open loop spacing: poisson (exponential gaps) or fixed (default poisson)",
     set_arrival, 0},
    {"duration", "DURATION",
     "stop sending after this long, such as 20s or 5m (default 10s; 0: no time bound)",
     set_duration, 0},
    {"requests", "N",
     "stop after sending N requests (default 0: no count bound); with --duration, whichever "
     "comes first",
     set_requests, 0},
    {"model", "NAME[:WEIGHT]",
     "a model of the mix; repeat for more, requests split by weight (default mlp:1)",
     set_model, LIST_MODEL},
    {"batch", "PICK",
     "batch sizes: a range 1..64 (uniform), a list 1,8,64, or one size (default 1); used when "
     "the model's axis 0 is -1",
     set_batch, 0},
    {"dim", "INPUT:AXIS:PICK",
     "values of another dynamic axis, such as embeddings:1:16..512; repeat for more; `none` "
     "clears the list. Inputs whose --dim have the same AXIS and PICK get one value per "
     "request",
     set_dim, LIST_DIM},
    {"encoding", "ENC",
     "json, binary (Triton's binary tensor extension) or mixed (default json)",
     set_encoding, 0},
    {"bad-fraction", "F",
     "fraction of requests sent deliberately bad (wrong shape, wrong datatype, malformed JSON,"
     " in turn); each must get a 4xx (default 0)",
     set_bad_fraction, 0},
    {"seed", "N",
     "seed of the request mix and the input data (default 1)",
     set_seed, 0},
    {"trace-seed", "N",
     "draw batch and dims from torch_baseline.py's splitmix64 trace seeded with N (batch, then "
     "each --dim, per request sent), so the shapes are the PyTorch baseline's (default: off)",
     set_trace_seed, 0},
    {"reload-every", "N",
     "POST /v2/repository/models/M/load for every model of the mix every N requests (default "
     "0: never)",
     set_reload_every, 0},
    {"reload-every-s", "DURATION",
     "the same every DURATION (default 0: never)",
     set_reload_every_s, 0},
    {"cycles", "N",
     "N load/unload cycles: unload, empty_cache, read the device bytes and RSS, load (default 0)",
     set_cycles, 0},
    {"cycle-requests", "K",
     "requests of traffic before each cycle (default 100)",
     set_cycle_requests, 0},
    {"idle", "DURATION",
     "after the traffic, sample this long with no requests, to watch idle_trim (default 0)",
     set_idle, 0},
    {"idle-trim-after", "DURATION",
     "bound: the server trims after this long idle (its idle_trim `after`): within it + 100 ms "
     "of the last answer, reserved must fall to what live blocks pin + --idle-trim-keep "
     "(needs --idle and --admin-token; default: not checked)",
     set_idle_trim_after, 0},
    {"idle-trim-keep", "SIZE",
     "the server's idle_trim `keep`, for --idle-trim-after (default 0)",
     set_idle_trim_keep, 0},
    {"admin-token", "TOKEN",
     "bearer token for the admin routes (reload, unload, empty_cache, /v1/memory)",
     set_admin_token, 0},
    {"sample-interval", "DURATION",
     "how often GET /metrics is sampled (default 1s)",
     set_sample_interval, 0},
    {"timeout", "DURATION",
     "per request; a request not answered in time is lost (default 60s)",
     set_timeout, 0},
    {"csv", "FILE",
     "write the samples as CSV: header row, then one row per sample",
     set_csv, 0},
    {"summary", "FILE",
     "write the summary and the verdict as JSON",
     set_summary, 0},
    {"plot", "PREFIX",
     "write PREFIX.gp and, with gnuplot on PATH, PREFIX-memory.png and PREFIX-latency.png",
     set_plot, 0},
    {"warmup-fraction", "F",
     "where the flatness mark sits, as a fraction of the traffic time (default 0.1)",
     set_warmup, 0},
    {"max-reserved-ratio", "X",
     "bound: reserved bytes at the end / at the mark (default 1.02)",
     set_max_reserved_ratio, 0},
    {"max-rss-drift", "F",
     "bound: (RSS at the end - at the mark) / at the mark (default 0.01)",
     set_max_rss_drift, 0},
    {"max-cycle-drift-bytes", "SIZE",
     "bound: device allocated or reserved bytes after unload+empty_cache above the baseline "
     "(default 0)",
     set_max_cycle_drift, 0},
    {"max-rss-cycle-drift", "SIZE",
     "bound: RSS after the last cycle minus after the cycle at --warmup-fraction of them "
     "(default: reported, not bounded)",
     set_max_rss_cycle_drift, 0},
    {"max-errors", "N",
     "bound: unexpected answers and failed admin or /metrics calls (default 0); a lost request"
     " always fails the run",
     set_max_errors, 0},
    {"help", NULL,
     "print this help and exit",
     set_help, 0},
};

#define N_OPTS (sizeof lg_opt_table / sizeof lg_opt_table[0])

static const lg_opt_t *opt_find(const char *name, size_t len)
{
    for (size_t i = 0; i < N_OPTS; i++)
        if (strlen(lg_opt_table[i].name) == len && !strncmp(lg_opt_table[i].name, name, len))
            return &lg_opt_table[i];
    return NULL;
}

void lg_opts_defaults(lg_opts_t *o)
{
    memset(o, 0, sizeof *o);
    strcpy(o->url, "http://127.0.0.1:8000");
    o->concurrency = 4;
    o->duration_ns = 10 * NS_PER_S;
    strcpy(o->models[0].name, "mlp");
    o->models[0].weight = 1.0;
    o->n_models = 1;
    o->model_is_default = 1;
    o->batch.n = 1;
    o->batch.values[0] = 1;
    o->seed = 1;
    o->cycle_requests = 100;
    o->sample_interval_ns = NS_PER_S;
    o->timeout_ns = 60 * NS_PER_S;
    o->warmup_fraction = 0.1;
    o->max_reserved_ratio = 1.02;
    o->max_rss_drift = 0.01;
}

int lg_opts_set(lg_opts_t *o, const char *key, const char *value, const char *where,
                lg_source_t src)
{
    const lg_opt_t *opt = opt_find(key, strlen(key));
    if (!opt)
        return fs_err(FS_EINVAL, "%s: unknown key \"%s\" (see loadgen --help)", where, key);
    if (opt->list_bit && src == LG_SRC_CLI && !(o->cli_lists & opt->list_bit)) {
        /* The first command-line value replaces the file's list. */
        if (opt->list_bit == LIST_MODEL)
            o->n_models = 0;
        else
            o->n_dims = 0;
        o->cli_lists |= opt->list_bit;
    }
    return opt->set(o, value, where);
}

static char *trim(char *s)
{
    while (*s == ' ' || *s == '\t')
        s++;
    size_t n = strlen(s);
    while (n > 0 && (s[n - 1] == ' ' || s[n - 1] == '\t' || s[n - 1] == '\r'))
        s[--n] = '\0';
    return s;
}

int lg_opts_parse_scenario(lg_opts_t *o, const char *text, const char *name)
{
    int seen_line[N_OPTS] = {0};
    char line[2048], where[LG_PATH_MAX + 32];
    int lineno = 0;
    const char *p = text;
    while (*p) {
        size_t len = strcspn(p, "\n");
        lineno++;
        snprintf(where, sizeof where, "%s:%d", name, lineno);
        if (len >= sizeof line)
            return fs_err(FS_EINVAL, "%s: line longer than %zu bytes", where, sizeof line - 1);
        memcpy(line, p, len);
        line[len] = '\0';
        p += len + (p[len] == '\n');
        char *hash = strchr(line, '#');
        if (hash)
            *hash = '\0';
        char *s = trim(line);
        if (*s == '\0')
            continue;
        char *eq = strchr(s, '=');
        if (!eq)
            return fs_err(FS_EINVAL, "%s: expected `key = value`, got \"%s\"", where, s);
        *eq = '\0';
        char *key = trim(s), *value = trim(eq + 1);
        const lg_opt_t *opt = opt_find(key, strlen(key));
        if (!opt)
            return fs_err(FS_EINVAL, "%s: unknown key \"%s\" (see loadgen --help)", where, key);
        if (opt->set == set_scenario)
            return fs_err(FS_EINVAL, "%s: a scenario file cannot name another one", where);
        size_t idx = (size_t)(opt - lg_opt_table);
        if (!opt->list_bit && seen_line[idx])
            return fs_err(FS_EINVAL, "%s: \"%s\" given twice (first at line %d)", where, key,
                          seen_line[idx]);
        seen_line[idx] = lineno;
        int rc = lg_opts_set(o, key, value, where, LG_SRC_FILE);
        if (rc != 0)
            return rc;
    }
    return 0;
}

int lg_opts_load_scenario(lg_opts_t *o, const char *path)
{
    FILE *f = fopen(path, "rb");
    if (!f)
        return fs_err(FS_EIO, "--scenario: cannot read \"%s\": %s", path, strerror(errno));
    char *text = NULL;
    size_t len = 0, cap = 0;
    int rc = 0;
    for (;;) {
        if (len + 4096 + 1 > cap) {
            cap = cap ? 2 * cap : 8192;
            char *grown = realloc(text, cap);
            if (!grown) {
                rc = fs_err(FS_ENOMEM, "--scenario: out of memory reading \"%s\"", path);
                goto done;
            }
            text = grown;
        }
        size_t got = fread(text + len, 1, 4096, f);
        len += got;
        if (got < 4096)
            break;
    }
    if (ferror(f)) {
        rc = fs_err(FS_EIO, "--scenario: error reading \"%s\"", path);
        goto done;
    }
    text[len] = '\0';
    rc = lg_opts_parse_scenario(o, text, path);
done:
    free(text);
    fclose(f);
    return rc;
}

/* Splits argv[*i] into name and value (from "=" or the next argument). */
static int arg_split(int argc, char **argv, int *i, const lg_opt_t **opt, const char **value)
{
    const char *a = argv[*i];
    if (!strcmp(a, "-h")) {
        *opt = opt_find("help", 4);
        *value = "true";
        return 0;
    }
    if (strncmp(a, "--", 2) != 0)
        return fs_err(FS_EINVAL, "unexpected argument \"%s\" (flags start with --; see --help)", a);
    const char *name = a + 2, *eq = strchr(name, '=');
    size_t len = eq ? (size_t)(eq - name) : strlen(name);
    *opt = opt_find(name, len);
    if (!*opt)
        return fs_err(FS_EINVAL, "unknown flag '--%.*s' (see --help)", (int)len, name);
    if (eq)
        *value = eq + 1;
    else if (!(*opt)->arg)
        *value = "true";
    else if (*i + 1 < argc)
        *value = argv[++*i];
    else
        return fs_err(FS_EINVAL, "--%s needs a value (%s)", (*opt)->name, (*opt)->arg);
    return 0;
}

int lg_opts_parse_args(lg_opts_t *o, int argc, char **argv)
{
    const lg_opt_t *opt;
    const char *value;
    char where[160];
    int rc;
    lg_opts_defaults(o);
    /* The file first, wherever --scenario stands, so every flag wins. */
    for (int i = 1; i < argc; i++) {
        if ((rc = arg_split(argc, argv, &i, &opt, &value)) != 0)
            return rc;
        if (opt->set == set_help && strcmp(value, "false") != 0) {
            o->help = 1;
            return 0;
        }
        if (opt->set != set_scenario)
            continue;
        if (o->scenario[0])
            return fs_err(FS_EINVAL, "--scenario given twice");
        if ((rc = set_scenario(o, value, "--scenario")) != 0 ||
            (rc = lg_opts_load_scenario(o, o->scenario)) != 0)
            return rc;
    }
    for (int i = 1; i < argc; i++) {
        if ((rc = arg_split(argc, argv, &i, &opt, &value)) != 0)
            return rc;
        if (opt->set == set_scenario)
            continue;
        snprintf(where, sizeof where, "--%s", opt->name);
        if ((rc = lg_opts_set(o, opt->name, value, where, LG_SRC_CLI)) != 0)
            return rc;
    }
    return lg_opts_validate(o);
}

int lg_opts_validate(const lg_opts_t *o)
{
    char host[256];
    int loopback = 0;
    int rc = lg_url_host(o->url, host, sizeof host, &loopback);
    if (rc != 0)
        return fs_err(FS_EINVAL, "--url: %s", fs_errmsg());
    if (!loopback && !o->allow_remote)
        return fs_err(FS_EINVAL,
                      "--url: \"%s\" is not a loopback host (127.0.0.1, ::1, localhost); "
                      "pass --allow-remote to load another machine",
                      host);
    if (o->duration_ns == 0 && o->requests == 0 && o->cycles == 0)
        return fs_err(FS_EINVAL, "the run needs a bound: --duration, --requests or --cycles");
    if (o->n_models == 0)
        return fs_err(FS_EINVAL, "no --model given");
    if (o->sample_interval_ns < 10000000ull)
        return fs_err(FS_EINVAL, "--sample-interval: at least 10ms");
    if (o->timeout_ns < 1000000ull)
        return fs_err(FS_EINVAL, "--timeout: at least 1ms");
    if (o->idle_trim_after_ns && o->idle_ns <= o->idle_trim_after_ns + 100000000ull)
        return fs_err(FS_EINVAL, "--idle-trim-after: --idle must be longer than it + 100ms, "
                                 "for a sample after the trim's deadline");
    if (o->bad_fraction >= 1.0 && (o->reload_every || o->cycles))
        return fs_err(FS_EINVAL,
                      "--bad-fraction 1 leaves no good traffic between reloads or cycles");
    return 0;
}

void lg_opts_print_help(FILE *out)
{
    fputs("usage: loadgen [--scenario FILE] [--flag VALUE | --flag=VALUE]...\n"
          "Drives a flatserve server with inference traffic, samples its /metrics, and\n"
          "judges whether memory stays flat. Exit status: 0 every bound held; 1 a bound\n"
          "failed or a request was lost; 2 bad usage, or the run could not start.\n\n",
          out);
    for (size_t i = 0; i < N_OPTS; i++) {
        const lg_opt_t *o = &lg_opt_table[i];
        char head[64];
        snprintf(head, sizeof head, "--%s%s%s", o->name, o->arg ? " " : "", o->arg ? o->arg : "");
        fprintf(out, "  %-30s %s\n", head, o->help);
    }
    fputs("\nDURATION: a number with ns, us, ms, s, m or h, or a bare number of seconds.\n"
          "SIZE: bytes, or with B, KiB, MiB, GiB (or KB, MB, GB). PICK: LO..HI or a list.\n"
          "See loadtest/README.md for the scenarios and how to read the verdict.\n",
          out);
}
