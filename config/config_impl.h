/* config_impl.h -- what the files of config/ share: a value and where it
 * came from (cfg_src_t), a key of the schema (cfg_key_t), the validators
 * that check and store each kind of value (config_values.c), and applying
 * a command-line flag through the file's keys (config.c, used by
 * config_args.c).
 *
 * Threading: as config.h; everything here is reentrant. */
#ifndef FS_CONFIG_CONFIG_IMPL_H
#define FS_CONFIG_CONFIG_IMPL_H

#include <cjson/cJSON.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "config/config.h"

#ifdef __cplusplus
extern "C" {
#endif

#define CFG_N_OF(a) (sizeof(a) / sizeof((a)[0]))
/* The largest integer a JSON number (an IEEE double) holds exactly; larger
 * values are written as strings (a size string, for sizes). */
#define CFG_JSON_INT_MAX ((uint64_t)1 << 53)
/* A key path buffer: "memory.policies[7].every_n_requests" and an unknown
 * key quoted up to 64 bytes fit. */
#define CFG_KEYPATH_MAX 192

/* A value and where it comes from, for messages. */
typedef struct cfg_src {
    const cJSON *json;   /* the value; borrowed */
    const char *origin;  /* the document's name; NULL: the value came from a flag */
    const char *path;    /* the key path ("memory.policies[1].after"), or the flag ("--port") */
} cfg_src_t;

typedef struct cfg_key cfg_key_t;

/* Checks src->json and stores it in `root` (the struct the key's table
 * describes). 0, or FS_EINVAL with a message naming src->path; the field
 * may be partly written on error (callers work on a copy). */
typedef int (*cfg_set_fn)(const cfg_key_t *key, const cfg_src_t *src, void *root);

/* One key of the schema. Tables of keys are static const. */
struct cfg_key {
    const char *name;       /* as the file spells it */
    cfg_set_fn set;         /* NULL: read by the caller before the walk ("kind") */
    size_t offset;          /* of the field in `root` */
    size_t width;           /* sizeof the field */
    uint64_t min, max;      /* integers and sizes: the range; durations: min 1 means > 0;
                             * fractions: min 0 allows 0 (unset); devices: min 1 allows "auto" */
    const cfg_key_t *sub;   /* objects: their keys, offsets from the same root */
    size_t n_sub;
};

/* --- messages (config_values.c); none can fail ------------------------------ */

/* Returns FS_EINVAL with the message `origin: "path": detail`, or
 * `--flag: detail` for a flag. */
int cfg_src_fail(const cfg_src_t *src, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* A JSON value as a message quotes it ("80x" in quotes, 12, true, null,
 * an array); returns buf or a constant string. */
const char *cfg_json_describe(const cJSON *v, char *buf, size_t len);
#define CFG_GOT(src) cfg_json_describe((src)->json, got, sizeof got)

/* `v` in the fewest digits that read back as exactly `v` ("0.3", "12",
 * "1e+30"): what the user wrote, and what cfg_to_json writes. Returns buf
 * (32 bytes always suffice). */
const char *cfg_double_text(double v, char *buf, size_t len);

/* `text` in double quotes, cut at 64 bytes ("..." then), bytes that are
 * not printable ASCII shown as '?'. Returns buf ("" when len < 8). */
const char *cfg_quote_text(const char *text, char *buf, size_t len);

/* `parent.name` (`name` at the top), the name cut at 64 bytes. */
void cfg_path_join(char *buf, size_t len, const char *parent, const char *name);

/* The path of item i of the array at src ("models[2]"); a flag's list
 * items are named by the flag alone ("--model"). */
void cfg_path_index(char *buf, size_t len, const cfg_src_t *src, size_t i);

/* Copies s (shorter than width) into a char field of `width` bytes,
 * zero-filling the rest so equal configs compare equal byte for byte. */
void cfg_string_store(void *field, size_t width, const char *s);

/* Exact texts that fs_parse_size / fs_parse_duration read back as the same
 * number: the largest unit that divides the value ("64MiB", "1536KiB",
 * "500us", "30s"), else the plain count ("1000" bytes, "1500ns"); zero is
 * "0" and "0s". Unlike fs_format_size, nothing is rounded. Returns buf
 * (always terminated; 32 bytes always suffice). */
char *cfg_size_text(uint64_t bytes, char *buf, size_t len);
char *cfg_duration_text(uint64_t ns, char *buf, size_t len);

/* --- validators (config_values.c), each a cfg_set_fn ----------------------- */

/* integers in min..max, stored in a field of `width` 2, 4 or 8 bytes */
int cfg_set_uint(const cfg_key_t *key, const cfg_src_t *src, void *root);
/* a size: a byte count or a size string, in min..max */
int cfg_set_size(const cfg_key_t *key, const cfg_src_t *src, void *root);
/* memory.max_split: a size, 0 (unlimited) or above ALLOC_SMALL_BYTES */
int cfg_set_split(const cfg_key_t *key, const cfg_src_t *src, void *root);
/* a duration string (a number is refused: it has no unit); min 1: > 0 */
int cfg_set_duration(const cfg_key_t *key, const cfg_src_t *src, void *root);
/* a number in (0, 1]; min 0: also 0 for "unset" */
int cfg_set_fraction(const cfg_key_t *key, const cfg_src_t *src, void *root);
int cfg_set_bool(const cfg_key_t *key, const cfg_src_t *src, void *root);
/* strings: a host (non-empty, visible ASCII), a token (visible ASCII, may
 * be ""), a path (non-empty, no control bytes); shorter than the field */
int cfg_set_host(const cfg_key_t *key, const cfg_src_t *src, void *root);
int cfg_set_token(const cfg_key_t *key, const cfg_src_t *src, void *root);
int cfg_set_path(const cfg_key_t *key, const cfg_src_t *src, void *root);
/* names from a list: fp32 tf32 fp16 bf16; a log level (any case); text or json */
int cfg_set_precision(const cfg_key_t *key, const cfg_src_t *src, void *root);
int cfg_set_log_level(const cfg_key_t *key, const cfg_src_t *src, void *root);
int cfg_set_log_format(const cfg_key_t *key, const cfg_src_t *src, void *root);
/* model_control_mode: explicit, none, poll */
int cfg_set_control(const cfg_key_t *key, const cfg_src_t *src, void *root);
/* trace.level: "OFF" or "TIMESTAMPS" (any case), or a list of them as
 * Triton's trace_level; "TENSORS" refused as not supported. trace.count:
 * an integer >= -1, as a number or a string. trace.file: a path or "" (no
 * control bytes). */
int cfg_set_trace_level(const cfg_key_t *key, const cfg_src_t *src, void *root);
int cfg_set_trace_count(const cfg_key_t *key, const cfg_src_t *src, void *root);
int cfg_set_trace_file(const cfg_key_t *key, const cfg_src_t *src, void *root);
/* cpu, cuda, cuda:N (N < 1024), and with min 1 also auto */
int cfg_set_device(const cfg_key_t *key, const cfg_src_t *src, void *root);

/* The value of `key` in `root` as the file writes it, for every validator
 * above: integers and fractions as numbers, sizes and durations as exact
 * unit strings, a set token as "***" (the one value that does not read
 * back). NULL on FS_ENOMEM. */
cJSON *cfg_value_json(const cfg_key_t *key, const void *root);
/* Whether the field of `key` differs between roots a and b. Cannot fail. */
bool cfg_value_differs(const cfg_key_t *key, const void *a, const void *b);

/* --- the schema (config.c) -------------------------------------------------- */

/* The keys of flatserve.json in document order, offsets from a cfg_t; a
 * section's keys are its `sub`. Lets cfg_to_json and cfg_diff walk the
 * same tables the parser applies. Cannot fail. */
const cfg_key_t *cfg_schema(size_t *n);
/* The keys of one policy kind's object form, offsets from a cfg_policy_t;
 * the first is "kind" (no setter). Cannot fail. */
const cfg_key_t *cfg_policy_keys(alloc_policy_kind_t kind, size_t *n);
/* The two list keys, which the walkers treat by name of their setter:
 * "models" ("*" or names) and "memory.policies" (kinds or objects). */
int cfg_set_models(const cfg_key_t *key, const cfg_src_t *src, void *root);
int cfg_set_policies(const cfg_key_t *key, const cfg_src_t *src, void *root);

/* Reads the whole file into *out (caller frees with free()) and *len.
 * FS_ENOENT when it does not exist (with missing non-NULL: 0, *missing
 * set and no message instead), FS_EIO, FS_EINVAL when larger than 16 MiB,
 * FS_ENOMEM; nothing is allocated on error. (config.c) */
int cfg_file_read(const char *path, char **out, size_t *len, bool *missing);

/* --- flags (config.c) ------------------------------------------------------ */

/* Applies `text` to the key at `path` ("server.port", "log.level") of *cfg
 * as if the file had that value: a key that holds an integer takes the
 * text as a JSON number when it is all digits (anything else fails its
 * check, quoted), a boolean key "true" and "false" as the JSON literals,
 * other keys take it as a JSON string. Messages name `flag`
 * ("--port: expected an integer 0..65535, got \"80x\""). 0, or FS_EINVAL /
 * FS_ENOMEM; on error the key may be partly written (the caller works on a
 * copy). */
int cfg_flag_apply(cfg_t *cfg, const char *path, const char *flag, const char *text);

/* Applies the `n` texts to the list key at `path` ("models",
 * "memory.policies") as one JSON array of strings: each text is split at
 * commas, so "--policy arena,idle_trim" and "--model a --model b" both
 * work. Errors as cfg_flag_apply. */
int cfg_flag_apply_list(cfg_t *cfg, const char *path, const char *flag, const char *const *texts,
                        size_t n);

#ifdef __cplusplus
}
#endif
#endif
