/* metrics.c -- Prometheus text and /v1/memory JSON, reduced to the figures
 * of lg_metrics_t and lg_memory_t. */
#include "loadtest/metrics.h"

#include <cjson/cJSON.h>
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "common/error.h"

static int name_char(char c, int first)
{
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_' || c == ':' ||
           (!first && c >= '0' && c <= '9');
}

/* Moves *p past a quoted label value (opening quote already passed),
 * unescaping into out when out is not NULL. 0 or -1 (unterminated). */
static int label_value(const char **p, const char *end, char *out, size_t cap)
{
    size_t n = 0;
    const char *s = *p;
    while (s < end && *s != '"') {
        char c = *s++;
        if (c == '\\') {
            if (s == end)
                return -1;
            c = *s++;
            c = c == 'n' ? '\n' : c;
        }
        if (out && n + 1 < cap)
            out[n++] = c;
    }
    if (s == end)
        return -1;
    if (out && cap)
        out[n] = '\0';
    *p = s + 1;
    return 0;
}

int lg_prom_line(const char *line, size_t len, char *name, size_t name_cap, const char **labels,
                 size_t *labels_len, double *value)
{
    const char *p = line, *end = line + len;
    if (p == end || !name_char(*p, 1))
        goto bad;
    const char *n0 = p;
    while (p < end && name_char(*p, 0))
        p++;
    size_t nl = (size_t)(p - n0);
    if (name_cap) {
        size_t c = nl < name_cap - 1 ? nl : name_cap - 1;
        memcpy(name, n0, c);
        name[c] = '\0';
    }
    *labels = p;
    *labels_len = 0;
    if (p < end && *p == '{') {
        const char *l0 = ++p;
        /* Skips quoted values so that a '}' inside one does not end the set. */
        while (p < end && *p != '}') {
            if (*p++ == '"' && label_value(&p, end, NULL, 0) != 0)
                goto bad;
        }
        if (p == end)
            goto bad;
        *labels = l0;
        *labels_len = (size_t)(p - l0);
        p++;
    }
    if (p == end || (*p != ' ' && *p != '\t'))
        goto bad;
    while (p < end && (*p == ' ' || *p == '\t'))
        p++;
    char num[64];
    size_t vl = 0;
    while (p + vl < end && p[vl] != ' ' && p[vl] != '\t')
        vl++;
    if (vl == 0 || vl >= sizeof num)
        goto bad;
    memcpy(num, p, vl);
    num[vl] = '\0';
    char *stop = NULL;
    errno = 0;
    double v = strtod(num, &stop);
    if (stop == num || *stop != '\0')
        goto bad;
    *value = v;
    return 0;
bad:
    return fs_err(FS_EPARSE, "not a Prometheus sample line: \"%.*s\"", (int)(len > 120 ? 120 : len),
                  line);
}

int lg_prom_label(const char *labels, size_t len, const char *key, char *out, size_t cap)
{
    const char *p = labels, *end = labels + len;
    size_t kl = strlen(key);
    while (p < end) {
        while (p < end && (*p == ' ' || *p == ','))
            p++;
        if (p == end)
            break;
        const char *k0 = p;
        while (p < end && *p != '=')
            p++;
        if (p + 1 >= end || p[1] != '"')
            return fs_err(FS_EPARSE, "label set \"%.*s\": expected key=\"value\"", (int)len,
                          labels);
        int match = (size_t)(p - k0) == kl && !strncmp(k0, key, kl);
        p += 2;
        if (label_value(&p, end, match ? out : NULL, cap) != 0)
            return fs_err(FS_EPARSE, "label set \"%.*s\": unterminated value", (int)len, labels);
        if (match)
            return 0;
    }
    return FS_ENOENT;
}

static int label_is(const char *labels, size_t len, const char *key, const char *want)
{
    char v[64];
    return lg_prom_label(labels, len, key, v, sizeof v) == 0 && !strcmp(v, want);
}

/* Adds one sample line's value to the figure it belongs to, if any. */
static void metrics_take(lg_metrics_t *m, const char *name, const char *lb, size_t ll, double v)
{
    int dev_all = label_is(lb, ll, "cache", "device") && label_is(lb, ll, "pool", "all");
    if (!strcmp(name, "flatserve_memory_allocated_bytes") && dev_all) {
        m->allocated += v;
    } else if (!strcmp(name, "flatserve_memory_reserved_bytes") && dev_all) {
        m->reserved += v;
        m->have_memory = 1;
    } else if (!strcmp(name, "flatserve_memory_peak_allocated_bytes") && dev_all) {
        m->peak_allocated += v;
    } else if (!strcmp(name, "flatserve_memory_peak_reserved_bytes") && dev_all) {
        m->peak_reserved += v;
    } else if (!strcmp(name, "flatserve_model_memory_bytes")) {
        if (label_is(lb, ll, "kind", "weights"))
            m->weights += v;
        else if (label_is(lb, ll, "kind", "activations"))
            m->activations += v;
    } else if (!strcmp(name, "process_resident_memory_bytes")) {
        m->rss = v;
        m->have_rss = 1;
    } else if (!strcmp(name, "flatserve_memory_device_allocs_total") &&
               label_is(lb, ll, "cache", "device")) {
        m->device_allocs += v;
    } else if (!strcmp(name, "flatserve_memory_device_frees_total") &&
               label_is(lb, ll, "cache", "device")) {
        m->device_frees += v;
    } else if (!strcmp(name, "flatserve_memory_released_bytes_total") &&
               label_is(lb, ll, "cache", "device") && label_is(lb, ll, "policy", "idle_trim")) {
        m->released_idle_trim += v;
    } else if (!strcmp(name, "nv_inference_request_success")) {
        m->inferences += v;
    }
}

int lg_metrics_parse(const char *text, lg_metrics_t *out)
{
    lg_metrics_t m;
    memset(&m, 0, sizeof m);
    const char *p = text;
    while (*p) {
        size_t len = strcspn(p, "\n");
        const char *line = p;
        p += len + (p[len] == '\n');
        while (len > 0 && (line[len - 1] == '\r' || line[len - 1] == ' '))
            len--;
        size_t lead = 0;
        while (lead < len && (line[lead] == ' ' || line[lead] == '\t'))
            lead++;
        if (lead == len || line[lead] == '#')
            continue;
        char name[128];
        const char *labels;
        size_t ll;
        double v;
        int rc = lg_prom_line(line + lead, len - lead, name, sizeof name, &labels, &ll, &v);
        if (rc != 0)
            return rc;
        metrics_take(&m, name, labels, ll, v);
    }
    *out = m;
    return 0;
}

static double json_current(const cJSON *cache, const char *key)
{
    const cJSON *o = cJSON_GetObjectItemCaseSensitive(cache, key);
    const cJSON *cur = cJSON_GetObjectItemCaseSensitive(o, "current");
    return cJSON_IsNumber(cur) ? cur->valuedouble : -1;
}

int lg_memory_parse(const char *json, lg_memory_t *out)
{
    lg_memory_t m;
    memset(&m, 0, sizeof m);
    cJSON *root = cJSON_Parse(json);
    int rc = 0;
    const cJSON *caches = cJSON_GetObjectItemCaseSensitive(root, "caches");
    if (!cJSON_IsArray(caches)) {
        rc = fs_err(FS_EPARSE, "/v1/memory: no \"caches\" array in \"%.80s\"", json);
        goto done;
    }
    const cJSON *c;
    cJSON_ArrayForEach(c, caches)
    {
        const cJSON *kind = cJSON_GetObjectItemCaseSensitive(c, "kind");
        if (!cJSON_IsString(kind) || strcmp(kind->valuestring, "device") != 0)
            continue;
        double a = json_current(c, "allocated_bytes"), r = json_current(c, "reserved_bytes");
        if (a < 0 || r < 0) {
            rc = fs_err(FS_EPARSE, "/v1/memory: a device cache without allocated_bytes.current "
                                   "or reserved_bytes.current");
            goto done;
        }
        m.allocated += a;
        m.reserved += r;
        m.n_caches++;
        const cJSON *segs = cJSON_GetObjectItemCaseSensitive(c, "segment_list"), *s;
        if (!cJSON_IsArray(segs))
            continue;
        m.have_segments = 1;
        cJSON_ArrayForEach(s, segs)
        {
            const cJSON *size = cJSON_GetObjectItemCaseSensitive(s, "size");
            const cJSON *used = cJSON_GetObjectItemCaseSensitive(s, "allocated");
            if (!cJSON_IsNumber(size) || !cJSON_IsNumber(used)) {
                rc = fs_err(FS_EPARSE, "/v1/memory: a segment without size or allocated");
                goto done;
            }
            if (used->valuedouble > 0)
                m.pinned += size->valuedouble;
        }
    }
    m.n_models = cJSON_GetArraySize(cJSON_GetObjectItemCaseSensitive(root, "models"));
    *out = m;
done:
    cJSON_Delete(root);
    return rc;
}
