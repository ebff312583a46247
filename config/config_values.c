/* config_values.c -- how one value of the configuration is checked and
 * stored: the cfg_set_fn of every kind of key (integers, sizes, durations,
 * fractions, booleans, strings, devices, names from a list), and the
 * messages that name the key path, say what was expected and quote what
 * was there.
 *
 * A value is always a JSON item: a flag's text is turned into the item the
 * file would hold before it gets here (cfg_flag_apply), so the file and the
 * command line accept the same values with the same words. */
#include <assert.h>
#include <errno.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "common/error.h"
#include "common/parse.h"
#include "config/config_impl.h"
#include "engine/engine.h"

/* The most of a value or an unknown key quoted in a message. */
#define QUOTE_MAX 64

/* --- messages ------------------------------------------------------------- */

/* FS_EINVAL with `origin: "path": detail`, or `--flag: detail`. */
int cfg_src_fail(const cfg_src_t *src, const char *fmt, ...)
{
    char detail[FS_ERRMSG_MAX];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(detail, sizeof detail, fmt, ap);
    va_end(ap);
    if (src->origin)
        return fs_err(FS_EINVAL, "%s: \"%s\": %s", src->origin, src->path, detail);
    return fs_err(FS_EINVAL, "%s: %s", src->path, detail);
}

/* `text` in double quotes, at most QUOTE_MAX bytes of it, with bytes that
 * are not printable ASCII shown as '?' so a message stays one clean line. */
const char *cfg_quote_text(const char *text, char *buf, size_t len)
{
    size_t n = strlen(text), o = 0;
    if (len < 8)
        return "";
    buf[o++] = '"';
    for (size_t i = 0; i < n && i < QUOTE_MAX && o + 5 < len; i++) {
        unsigned char c = (unsigned char)text[i];
        buf[o++] = c >= 0x20 && c < 0x7f ? (char)c : '?';
    }
    if (n > QUOTE_MAX || o + 5 >= len) {
        memcpy(buf + o, "...", 3);
        o += 3;
    }
    buf[o++] = '"';
    buf[o] = '\0';
    return buf;
}

const char *cfg_double_text(double v, char *buf, size_t len)
{
    /* The range first: converting a double outside int64's range (or NaN)
     * is undefined. */
    if (v > -1e15 && v < 1e15 && v == (double)(int64_t)v) {
        snprintf(buf, len, "%lld", (long long)v);
        return buf;
    }
    for (int precision = 1; precision <= 17; precision++) {
        snprintf(buf, len, "%.*g", precision, v);
        if (strtod(buf, NULL) == v)
            break;
    }
    return buf;
}

/* A JSON value as a message quotes it: "80x", 12, true, null, an array. */
const char *cfg_json_describe(const cJSON *v, char *buf, size_t len)
{
    if (cJSON_IsString(v))
        return cfg_quote_text(v->valuestring, buf, len);
    if (cJSON_IsNumber(v)) {
        return cfg_double_text(v->valuedouble, buf, len);
    }
    if (cJSON_IsTrue(v))
        return "true";
    if (cJSON_IsFalse(v))
        return "false";
    if (cJSON_IsNull(v))
        return "null";
    if (cJSON_IsArray(v))
        return "an array";
    if (cJSON_IsObject(v))
        return "an object";
    return "an unreadable value";
}

/* `parent.name` (or `name` at the top), the name cut at QUOTE_MAX bytes. */
void cfg_path_join(char *buf, size_t len, const char *parent, const char *name)
{
    size_t n = strlen(name);
    int w = snprintf(buf, len, "%s%s%.*s%s", parent, parent[0] ? "." : "", QUOTE_MAX, name,
                     n > QUOTE_MAX ? "..." : "");
    if (w < 0 || (size_t)w >= len) /* a parent path is short; cannot happen for real keys */
        snprintf(buf, len, "%s", "(key path too long)");
}

/* The path of item i of the array at src: "models[2]"; a flag's list
 * items are named by the flag alone ("--model"). */
void cfg_path_index(char *buf, size_t len, const cfg_src_t *src, size_t i)
{
    if (src->origin)
        snprintf(buf, len, "%s[%zu]", src->path, i);
    else
        snprintf(buf, len, "%s", src->path);
}

/* --- exact sizes and durations --------------------------------------------- */

typedef struct cfg_unit {
    const char *name;
    uint64_t mult;
} cfg_unit_t;

/* The largest of `units` (descending) that divides value exactly. */
static char *unit_text(const cfg_unit_t *units, size_t n, uint64_t value, const char *zero,
                       char *buf, size_t len)
{
    if (value == 0) {
        snprintf(buf, len, "%s", zero);
        return buf;
    }
    for (size_t i = 0; i < n; i++) {
        if (value % units[i].mult == 0) {
            snprintf(buf, len, "%llu%s", (unsigned long long)(value / units[i].mult),
                     units[i].name);
            return buf;
        }
    }
    snprintf(buf, len, "%llu", (unsigned long long)value);
    return buf;
}

char *cfg_size_text(uint64_t bytes, char *buf, size_t len)
{
    static const cfg_unit_t units[] = {
        {"TiB", 1ull << 40}, {"GiB", 1ull << 30}, {"MiB", 1ull << 20}, {"KiB", 1ull << 10}};
    return unit_text(units, CFG_N_OF(units), bytes, "0", buf, len);
}

char *cfg_duration_text(uint64_t ns, char *buf, size_t len)
{
    /* Minutes and hours would read back too, but "1m" reads like a
     * millisecond to many people: seconds are the largest unit written. */
    static const cfg_unit_t units[] = {
        {"s", 1000000000ull}, {"ms", 1000000ull}, {"us", 1000ull}, {"ns", 1ull}};
    return unit_text(units, CFG_N_OF(units), ns, "0s", buf, len);
}

/* --- scalar validators ------------------------------------------------------ */

/* A JSON number that is a whole number in 0..CFG_JSON_INT_MAX. */
static bool json_uint(const cJSON *v, uint64_t *out)
{
    if (!cJSON_IsNumber(v))
        return false;
    double d = v->valuedouble;
    if (!(d >= 0.0 && d <= (double)CFG_JSON_INT_MAX) || (double)(uint64_t)d != d)
        return false;
    *out = (uint64_t)d;
    return true;
}

/* Stores v in an unsigned field of `width` bytes (the key's range keeps it
 * in bounds). */
static void field_store(void *field, size_t width, uint64_t v)
{
    if (width == sizeof(uint16_t)) {
        uint16_t x = (uint16_t)v;
        memcpy(field, &x, sizeof x);
    } else if (width == sizeof(uint32_t)) {
        uint32_t x = (uint32_t)v;
        memcpy(field, &x, sizeof x);
    } else {
        assert(width == sizeof(uint64_t));
        memcpy(field, &v, sizeof v);
    }
}

static void *field_of(const cfg_key_t *key, void *root)
{
    return (char *)root + key->offset;
}

/* The unsigned field of `key` in root, of width 2, 4 or 8 bytes. */
static uint64_t field_load(const cfg_key_t *key, const void *root)
{
    const char *field = (const char *)root + key->offset;
    if (key->width == sizeof(uint16_t)) {
        uint16_t x;
        memcpy(&x, field, sizeof x);
        return x;
    }
    if (key->width == sizeof(uint32_t)) {
        uint32_t x;
        memcpy(&x, field, sizeof x);
        return x;
    }
    assert(key->width == sizeof(uint64_t));
    uint64_t x;
    memcpy(&x, field, sizeof x);
    return x;
}

int cfg_set_uint(const cfg_key_t *key, const cfg_src_t *src, void *root)
{
    uint64_t v;
    char got[96];
    if (!json_uint(src->json, &v) || v < key->min || v > key->max)
        return cfg_src_fail(src, "expected an integer %llu..%llu, got %s",
                            (unsigned long long)key->min, (unsigned long long)key->max,
                            CFG_GOT(src));
    field_store(field_of(key, root), key->width, v);
    return 0;
}

/* A size: a JSON integer (bytes) or a size string. */
static int src_size(const cfg_src_t *src, uint64_t *out)
{
    char got[96];
    if (cJSON_IsString(src->json)) {
        if (fs_parse_size(src->json->valuestring, out) != 0)
            return cfg_src_fail(src, "%s", fs_errmsg());
        return 0;
    }
    if (!json_uint(src->json, out))
        return cfg_src_fail(src, "expected a size such as \"64MiB\" or a byte count, got %s",
                            CFG_GOT(src));
    return 0;
}

int cfg_set_size(const cfg_key_t *key, const cfg_src_t *src, void *root)
{
    uint64_t v;
    char got[96], limit[32];
    int rc = src_size(src, &v);
    if (rc != 0)
        return rc;
    if (v < key->min)
        return cfg_src_fail(src, "must be at least %s, got %s",
                            cfg_size_text(key->min, limit, sizeof limit), CFG_GOT(src));
    if (v > key->max)
        return cfg_src_fail(src, "must be at most %s, got %s",
                            cfg_size_text(key->max, limit, sizeof limit), CFG_GOT(src));
    field_store(field_of(key, root), key->width, v);
    return 0;
}

/* memory.max_split: the cache never splits blocks of this size or more;
 * it must leave the small pool (<= ALLOC_SMALL_BYTES) alone. */
int cfg_set_split(const cfg_key_t *key, const cfg_src_t *src, void *root)
{
    uint64_t v;
    char got[96];
    int rc = src_size(src, &v);
    if (rc != 0)
        return rc;
    if (v != 0 && v <= ALLOC_SMALL_BYTES)
        return cfg_src_fail(src, "expected 0 (unlimited) or a size above 1MiB, got %s",
                            CFG_GOT(src));
    field_store(field_of(key, root), key->width, v);
    return 0;
}

int cfg_set_duration(const cfg_key_t *key, const cfg_src_t *src, void *root)
{
    uint64_t v;
    char got[96];
    if (!cJSON_IsString(src->json))
        return cfg_src_fail(src, "expected a duration such as \"30s\", got %s", CFG_GOT(src));
    if (fs_parse_duration(src->json->valuestring, &v) != 0)
        return cfg_src_fail(src, "%s", fs_errmsg());
    if (v < key->min)
        return cfg_src_fail(src, "must be more than 0, got %s", CFG_GOT(src));
    field_store(field_of(key, root), key->width, v);
    return 0;
}

/* A fraction in (0, 1]; with key->min 0, also 0 for "unset". */
int cfg_set_fraction(const cfg_key_t *key, const cfg_src_t *src, void *root)
{
    char got[96];
    double d = cJSON_IsNumber(src->json) ? src->json->valuedouble : -1.0;
    if (!((d > 0.0 && d <= 1.0) || (d == 0.0 && key->min == 0)))
        return cfg_src_fail(src, "expected a number in (0, 1]%s, got %s",
                            key->min == 0 ? " or 0 (unset)" : "", CFG_GOT(src));
    /* -0 is "unset" too, stored as 0: values compare byte for byte
     * (cfg_value_differs), and -0.0 would differ from the 0 it reads back
     * as, so a SIGHUP would see a change that is none. */
    if (d == 0.0)
        d = 0.0;
    memcpy(field_of(key, root), &d, sizeof d);
    return 0;
}

int cfg_set_bool(const cfg_key_t *key, const cfg_src_t *src, void *root)
{
    char got[96];
    if (!cJSON_IsBool(src->json))
        return cfg_src_fail(src, "expected true or false, got %s", CFG_GOT(src));
    bool b = cJSON_IsTrue(src->json);
    memcpy(field_of(key, root), &b, sizeof b);
    return 0;
}

/* Copies s into a char field of `width` bytes, zero-filling the rest so
 * equal configs compare equal byte for byte. */
void cfg_string_store(void *field, size_t width, const char *s)
{
    size_t n = strlen(s);
    assert(n < width);
    memset(field, 0, width);
    memcpy(field, s, n);
}

static bool char_visible(unsigned char c)
{
    return c > 0x20 && c < 0x7f;
}

static bool char_not_control(unsigned char c)
{
    return c >= 0x20 && c != 0x7f;
}

/* A string field: 1 (or 0 with allow_empty) .. width - 1 bytes, each
 * passing char_ok; `what` says what is expected. */
static int set_string_checked(const cfg_key_t *key, const cfg_src_t *src, void *root,
                              bool allow_empty, bool (*char_ok)(unsigned char), const char *what)
{
    char got[96];
    if (!cJSON_IsString(src->json))
        return cfg_src_fail(src, "expected %s, got %s", what, CFG_GOT(src));
    const char *s = src->json->valuestring;
    size_t n = strlen(s);
    if (n == 0 && !allow_empty)
        return cfg_src_fail(src, "expected %s, got \"\"", what);
    if (n >= key->width)
        return cfg_src_fail(src, "too long: %zu bytes, the most is %zu", n, key->width - 1);
    for (size_t i = 0; i < n; i++)
        if (!char_ok((unsigned char)s[i]))
            return cfg_src_fail(src, "expected %s, got %s (byte %zu is not allowed)", what,
                                CFG_GOT(src), i);
    cfg_string_store(field_of(key, root), key->width, s);
    return 0;
}

int cfg_set_host(const cfg_key_t *key, const cfg_src_t *src, void *root)
{
    return set_string_checked(key, src, root, false, char_visible,
                              "a host name or address such as \"0.0.0.0\" (no spaces)");
}

/* The token travels in an Authorization header: visible ASCII only. */
int cfg_set_token(const cfg_key_t *key, const cfg_src_t *src, void *root)
{
    return set_string_checked(key, src, root, true, char_visible,
                              "a token of visible ASCII characters (no spaces), or \"\"");
}

int cfg_set_path(const cfg_key_t *key, const cfg_src_t *src, void *root)
{
    return set_string_checked(key, src, root, false, char_not_control, "a directory path");
}

/* Index of src's string in names[n], or FS_EINVAL listing them. */
static int src_choice(const cfg_src_t *src, const char *const *names, size_t n, size_t *out)
{
    char got[96], list[128] = "";
    for (size_t i = 0; cJSON_IsString(src->json) && i < n; i++) {
        if (strcmp(src->json->valuestring, names[i]) == 0) {
            *out = i;
            return 0;
        }
    }
    for (size_t i = 0, o = 0; i < n && o < sizeof list; i++)
        o += (size_t)snprintf(list + o, sizeof list - o, "%s\"%s\"", i ? ", " : "", names[i]);
    return cfg_src_fail(src, "expected one of %s, got %s", list, CFG_GOT(src));
}

int cfg_set_precision(const cfg_key_t *key, const cfg_src_t *src, void *root)
{
    static const char *const names[] = {"fp32", "tf32", "fp16", "bf16"};
    size_t i;
    eng_precision_t p;
    int rc = src_choice(src, names, CFG_N_OF(names), &i);
    /* The engine's parser decides the value; the list above only words the
     * error like every other choice's. */
    if (rc == 0 && (rc = eng_precision_parse(names[i], &p)) == 0)
        memcpy(field_of(key, root), &p, sizeof p);
    return rc;
}

static const char *const log_format_names[] = {[FS_LOG_TEXT] = "text", [FS_LOG_JSON] = "json"};

int cfg_set_log_format(const cfg_key_t *key, const cfg_src_t *src, void *root)
{
    size_t i;
    int rc = src_choice(src, log_format_names, CFG_N_OF(log_format_names), &i);
    if (rc == 0) {
        fs_log_format_t f = (fs_log_format_t)i;
        memcpy(field_of(key, root), &f, sizeof f);
    }
    return rc;
}

int cfg_trace_level_parse(const char *s, bool *timestamps)
{
    if (strcasecmp(s, "OFF") == 0 || strcasecmp(s, "TIMESTAMPS") == 0) {
        *timestamps = s[0] == 'T' || s[0] == 't';
        return 0;
    }
    if (strcasecmp(s, "TENSORS") == 0)
        return fs_err(FS_EINVAL, "trace level TENSORS is not supported: flatserve traces "
                      "TIMESTAMPS only");
    char q[80];
    return fs_err(FS_EINVAL, "expected trace level \"OFF\" or \"TIMESTAMPS\", got %s",
                  cfg_quote_text(s, q, sizeof q));
}

int cfg_set_trace_level(const cfg_key_t *key, const cfg_src_t *src, void *root)
{
    char got[96];
    const cJSON *v = src->json;
    /* Triton's list form: every level named is traced, so OFF with
     * TIMESTAMPS is TIMESTAMPS. */
    bool on = false, one;
    if (cJSON_IsString(v)) {
        if (cfg_trace_level_parse(v->valuestring, &on) != 0)
            return cfg_src_fail(src, "%s", fs_errmsg());
    } else if (cJSON_IsArray(v) && cJSON_GetArraySize(v) > 0) {
        const cJSON *e;
        cJSON_ArrayForEach(e, v) {
            if (!cJSON_IsString(e))
                return cfg_src_fail(src, "expected a list of trace levels, got %s",
                                    CFG_GOT(src));
            if (cfg_trace_level_parse(e->valuestring, &one) != 0)
                return cfg_src_fail(src, "%s", fs_errmsg());
            on = on || one;
        }
    } else {
        return cfg_src_fail(src, "expected \"OFF\" or \"TIMESTAMPS\", got %s", CFG_GOT(src));
    }
    memcpy(field_of(key, root), &on, sizeof on);
    return 0;
}

int cfg_trace_count_parse(const char *s, int64_t *out)
{
    char *end = NULL;
    errno = 0;
    long long v = strtoll(s, &end, 10);
    if (!s[0] || *end || errno == ERANGE || v < -1 || (s[0] != '-' && (s[0] < '0' || s[0] > '9'))) {
        char q[80];
        return fs_err(FS_EINVAL, "expected a trace count, -1 (no bound) or more, got %s",
                      cfg_quote_text(s, q, sizeof q));
    }
    *out = v;
    return 0;
}

int cfg_set_trace_count(const cfg_key_t *key, const cfg_src_t *src, void *root)
{
    char got[96];
    const cJSON *v = src->json;
    int64_t n;
    if (cJSON_IsNumber(v) && v->valuedouble >= -1 && v->valuedouble <= (double)CFG_JSON_INT_MAX &&
        v->valuedouble == (double)(int64_t)v->valuedouble)
        n = (int64_t)v->valuedouble;
    else if (!cJSON_IsString(v) || cfg_trace_count_parse(v->valuestring, &n) != 0)
        return cfg_src_fail(src, "expected an integer -1 (no bound) or more, got %s",
                            CFG_GOT(src));
    memcpy(field_of(key, root), &n, sizeof n);
    return 0;
}

int cfg_set_trace_file(const cfg_key_t *key, const cfg_src_t *src, void *root)
{
    return set_string_checked(key, src, root, true, char_not_control, "a file path or \"\"");
}

static const char *const control_names[] = {
    [CFG_CONTROL_EXPLICIT] = "explicit", [CFG_CONTROL_NONE] = "none", [CFG_CONTROL_POLL] = "poll"};

const char *cfg_control_name(cfg_control_t c)
{
    return (size_t)c < CFG_N_OF(control_names) ? control_names[c] : "explicit";
}

int cfg_set_control(const cfg_key_t *key, const cfg_src_t *src, void *root)
{
    size_t i;
    int rc = src_choice(src, control_names, CFG_N_OF(control_names), &i);
    if (rc == 0) {
        cfg_control_t c = (cfg_control_t)i;
        memcpy(field_of(key, root), &c, sizeof c);
    }
    return rc;
}

int cfg_set_log_level(const cfg_key_t *key, const cfg_src_t *src, void *root)
{
    char got[96];
    fs_log_level_t level;
    if (!cJSON_IsString(src->json) || fs_log_level_parse(src->json->valuestring, &level) != 0)
        return cfg_src_fail(src,
                            "expected one of \"error\", \"warn\", \"info\", \"debug\", "
                            "\"trace\", got %s",
                            CFG_GOT(src));
    memcpy(field_of(key, root), &level, sizeof level);
    return 0;
}

int cfg_device_parse(const char *s, bool server, cfg_device_t *out)
{
    memset(out, 0, sizeof *out); /* compared byte for byte (cfg_value_differs) */
    out->set = true;
    if (server && strcmp(s, "auto") == 0) {
        out->is_auto = true;
        return 0;
    }
    if (server && strcmp(s, "cuda:all") == 0) {
        out->all_gpus = true;
        return 0;
    }
    /* A list: each item a device the engine's own parser takes, or after a
     * GPU a bare index ("cuda:0,1"). */
    size_t n = 0;
    for (const char *at = s;; n++) {
        const char *end = strchr(at, ',');
        size_t len = end ? (size_t)(end - at) : strlen(at);
        char item[32];
        if (len == 0 || len >= sizeof item)
            return fs_err(FS_EINVAL, "device list item %zu is %s", n + 1,
                          len ? "too long" : "empty");
        memcpy(item, at, len);
        item[len] = '\0';
        eng_device_t d;
        char full[40];
        snprintf(full, sizeof full, "cuda:%s", item);
        bool bare = n > 0 && item[0] >= '0' && item[0] <= '9';
        if (eng_device_parse(bare ? full : item, &d) != 0)
            return fs_err(FS_EINVAL, "'%s' is not a device", item);
        if (n >= CFG_MAX_DEVICES)
            return fs_err(FS_EINVAL, "more than %d devices listed", CFG_MAX_DEVICES);
        if (n > 0 && (d.kind != ENG_DEVICE_CUDA || out->dev.kind != ENG_DEVICE_CUDA))
            return fs_err(FS_EINVAL, "only GPUs make a list (the CPU stands alone)");
        for (size_t j = 0; j < n; j++)
            if (eng_device_equal(j ? &out->more[j - 1] : &out->dev, &d))
                return fs_err(FS_EINVAL, "cuda:%d is listed twice", d.index);
        if (n == 0)
            out->dev = d;
        else
            out->more[out->n_more++] = d;
        if (!end)
            return 0;
        at = end + 1;
    }
}

/* The server's devices (key->min 1: "auto" and "cuda:all" allowed) or a
 * model's. */
int cfg_set_device(const cfg_key_t *key, const cfg_src_t *src, void *root)
{
    char got[96], why[FS_ERRMSG_MAX / 2] = "";
    bool server = key->min == 1;
    cfg_device_t d;
    bool str = cJSON_IsString(src->json);
    if (str && cfg_device_parse(src->json->valuestring, server, &d) != 0)
        snprintf(why, sizeof why, " (%s)", fs_errmsg());
    if (!str || why[0])
        return cfg_src_fail(src, "expected %s%s%s, got %s%s",
                            server ? "\"auto\", \"cuda:all\", " : "",
                            "\"cpu\", \"cuda\", \"cuda:N\" (N below 1024) or a list of GPUs "
                            "(\"cuda:0,1\")",
                            server ? "" : " (leave the key out for the server's devices)",
                            CFG_GOT(src), why);
    memcpy(field_of(key, root), &d, sizeof d);
    return 0;
}

const char *cfg_device_text(const cfg_device_t *d, char *buf, size_t len)
{
    if (!d->set || d->is_auto || d->all_gpus) {
        snprintf(buf, len, "%s", d->is_auto ? "auto" : d->all_gpus ? "cuda:all" : "");
        return buf;
    }
    eng_device_name(&d->dev, buf, len);
    for (uint32_t k = 0; k < d->n_more; k++) {
        size_t at = strlen(buf);
        snprintf(buf + at, len - at, ",%d", d->more[k].index);
    }
    return buf;
}

/* --- values written back (cfg_to_json, cfg_diff) ---------------------------- */

cJSON *cfg_value_json(const cfg_key_t *key, const void *root)
{
    const char *field = (const char *)root + key->offset;
    char text[32];
    if (key->set == cfg_set_uint) {
        /* Raw text: cJSON prints doubles with 15 digits and accepts a near
         * miss, which would not read back exactly. */
        snprintf(text, sizeof text, "%llu", (unsigned long long)field_load(key, root));
        return cJSON_CreateRaw(text);
    }
    if (key->set == cfg_set_size || key->set == cfg_set_split)
        return cJSON_CreateString(cfg_size_text(field_load(key, root), text, sizeof text));
    if (key->set == cfg_set_duration)
        return cJSON_CreateString(cfg_duration_text(field_load(key, root), text, sizeof text));
    if (key->set == cfg_set_fraction) {
        double d;
        memcpy(&d, field, sizeof d);
        return cJSON_CreateRaw(cfg_double_text(d, text, sizeof text));
    }
    if (key->set == cfg_set_bool) {
        bool b;
        memcpy(&b, field, sizeof b);
        return cJSON_CreateBool(b);
    }
    if (key->set == cfg_set_token)
        return cJSON_CreateString(field[0] ? "***" : "");
    if (key->set == cfg_set_log_level || key->set == cfg_set_log_format ||
        key->set == cfg_set_precision || key->set == cfg_set_control) {
        /* An enum (a log level or format, a precision), by name. */
        int e;
        assert(key->width == sizeof e);
        memcpy(&e, field, sizeof e);
        if (key->set == cfg_set_log_level)
            return cJSON_CreateString(fs_log_level_name((fs_log_level_t)e));
        if (key->set == cfg_set_precision)
            return cJSON_CreateString(eng_precision_name((eng_precision_t)e));
        if (key->set == cfg_set_control)
            return cJSON_CreateString(cfg_control_name((cfg_control_t)e));
        return cJSON_CreateString(log_format_names[e == FS_LOG_JSON ? FS_LOG_JSON : FS_LOG_TEXT]);
    }
    if (key->set == cfg_set_trace_level) {
        bool on;
        memcpy(&on, field, sizeof on);
        return cJSON_CreateString(on ? "TIMESTAMPS" : "OFF");
    }
    if (key->set == cfg_set_trace_count) {
        int64_t n;
        memcpy(&n, field, sizeof n);
        snprintf(text, sizeof text, "%lld", (long long)n);
        return cJSON_CreateRaw(text);
    }
    if (key->set == cfg_set_device) {
        cfg_device_t d;
        memcpy(&d, field, sizeof d);
        return cJSON_CreateString(cfg_device_text(&d, text, sizeof text));
    }
    /* host, path: a string stored as written. */
    assert(key->set == cfg_set_host || key->set == cfg_set_path || key->set == cfg_set_trace_file);
    return cJSON_CreateString(field);
}

bool cfg_value_differs(const cfg_key_t *key, const void *a, const void *b)
{
    /* Every stored form compares byte for byte: strings are zero-filled
     * (cfg_string_store), numbers, booleans and enums have no padding. */
    return memcmp((const char *)a + key->offset, (const char *)b + key->offset, key->width) != 0;
}
