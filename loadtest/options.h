/* options.h -- loadgen's settings: the flags, the scenario file that holds
 * the same keys, and the value forms they share (ranges and lists of sizes,
 * per-input dynamic dims, weighted models).
 *
 * A scenario file is `key = value` lines whose keys are the long flag names
 * without the dashes; `#` starts a comment. Flags on the command line win
 * over the file: a scalar flag replaces the file's value, and the first
 * command-line use of a repeatable flag (--model, --dim) replaces the file's
 * whole list.
 *
 * Threading: plain data; the functions are pure (no I/O except
 * lg_opts_load_scenario reading its file) and touch only what they are given. */
#ifndef FS_LOADTEST_OPTIONS_H
#define FS_LOADTEST_OPTIONS_H

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

#ifdef __cplusplus
extern "C" {
#endif

#define LG_PICK_MAX 64      /* values in a list such as "1,8,64" */
#define LG_MODELS_MAX 16    /* --model entries */
#define LG_DIMS_MAX 32      /* --dim entries */
#define LG_NAME_MAX 128     /* model and input names (the server's own bound) */
#define LG_PATH_MAX 1024
#define LG_DIM_LIMIT (1u << 20) /* largest batch or dim a range may ask for */

/* A batch size or a dim: uniform over lo..hi, or uniform over a list. */
typedef struct lg_pick {
    int is_range;
    uint32_t lo, hi;                /* is_range: inclusive bounds, 1 <= lo <= hi */
    uint32_t n;                     /* !is_range: how many values */
    uint32_t values[LG_PICK_MAX];   /* !is_range: the values, each >= 1 */
} lg_pick_t;

/* --dim INPUT:AXIS:PICK: the values of one dynamic axis of an input. */
typedef struct lg_dim {
    char input[LG_NAME_MAX];
    uint32_t axis;
    lg_pick_t pick;
} lg_dim_t;

/* --model NAME[:WEIGHT]. */
typedef struct lg_model_ref {
    char name[LG_NAME_MAX];
    double weight;                  /* > 0; requests go to models in proportion */
} lg_model_ref_t;

typedef enum lg_encoding {
    LG_ENC_JSON = 0,
    LG_ENC_BINARY = 1,
    LG_ENC_MIXED = 2,               /* each request JSON or binary, half and half */
} lg_encoding_t;

typedef enum lg_arrival {
    LG_ARRIVAL_POISSON = 0,         /* exponential gaps: independent arrivals */
    LG_ARRIVAL_FIXED = 1,           /* exactly 1/rate apart */
} lg_arrival_t;

/* Every setting. Durations in ns, sizes in bytes; 0 means "not set" where
 * the field's comment says so. */
typedef struct lg_opts {
    char url[256];                  /* http://HOST:PORT of the server */
    int allow_remote;               /* 0: the host must be loopback */
    uint32_t concurrency;           /* closed loop: requests in flight; open: the cap */
    int concurrency_set;
    double rate;                    /* > 0: open loop at this many requests/s */
    lg_arrival_t arrival;
    uint64_t duration_ns;           /* 0: not bounded by time */
    uint64_t requests;              /* 0: not bounded by count */
    lg_model_ref_t models[LG_MODELS_MAX];
    uint32_t n_models;
    lg_pick_t batch;
    lg_dim_t dims[LG_DIMS_MAX];
    uint32_t n_dims;
    lg_encoding_t encoding;
    double bad_fraction;            /* 0..1 of requests deliberately bad */
    uint64_t seed;
    /* When set: batch and dims come from their own splitmix64 stream seeded
     * with trace_seed, one draw each (batch first, then each --dim in order)
     * per request sent, so the shapes replay loadtest/torch_baseline.py's
     * trace for the same seed. */
    bool has_trace_seed;
    uint64_t trace_seed;
    uint64_t reload_every;          /* 0: no reloads by request count */
    uint64_t reload_every_ns;       /* 0: no reloads by time */
    uint32_t cycles;                /* 0: no load/unload cycles */
    uint64_t cycle_requests;        /* requests of traffic between two cycles */
    uint64_t idle_ns;               /* idle sampling after the traffic */
    /* The server's idle_trim `after` and `keep`: when after is set (with
     * idle_ns), the verdict checks that reserved fell to what live blocks
     * pin plus keep within after + 100 ms of the last answer. 0: unchecked. */
    uint64_t idle_trim_after_ns;
    uint64_t idle_trim_keep;
    char admin_token[256];
    uint64_t sample_interval_ns;
    uint64_t timeout_ns;            /* per request */
    char csv[LG_PATH_MAX];          /* "" : no CSV */
    char summary[LG_PATH_MAX];      /* "" : no JSON summary */
    char plot[LG_PATH_MAX];         /* "" : no plots */
    double warmup_fraction;         /* the flatness mark, as a fraction of the traffic */
    double max_reserved_ratio;
    double max_rss_drift;
    uint64_t max_cycle_drift_bytes;
    uint64_t max_rss_cycle_drift;
    int rss_cycle_bound_set;        /* max_rss_cycle_drift was given */
    uint64_t max_errors;            /* unexpected answers and failed admin calls allowed */
    char scenario[LG_PATH_MAX];     /* the file read, "" for none */
    int help;
    unsigned cli_lists;             /* internal: lists a command-line flag replaced */
    int model_is_default;           /* internal: the mix is still the default mlp */
} lg_opts_t;

/* Where a value came from: the file's values are replaced by the command
 * line's, never the other way round. */
typedef enum lg_source {
    LG_SRC_FILE = 0,
    LG_SRC_CLI = 1,
} lg_source_t;

/* The defaults (closed loop, concurrency 4, 10 s, model "mlp", batch 1,
 * JSON, 1 s samples, ratio bound 1.02, RSS bound 0.01 ...). Cannot fail. */
void lg_opts_defaults(lg_opts_t *o);

/* Sets one key ("concurrency", "model", ...) from its text. `where` names
 * the source in messages ("--batch", "steady.conf:3"). Returns 0, or
 * FS_EINVAL for an unknown key or a bad value with a message naming `where`
 * and quoting the value; on error `o` keeps its earlier value. */
int lg_opts_set(lg_opts_t *o, const char *key, const char *value, const char *where,
                lg_source_t src);

/* Applies a scenario file's text; `name` is its path for messages. Returns
 * 0, or FS_EINVAL naming the line (unknown key, a line that is not
 * `key = value`, a scalar key given twice, a "scenario" key, a bad value);
 * keys before the bad line stay applied. */
int lg_opts_parse_scenario(lg_opts_t *o, const char *text, const char *name);

/* Reads `path` and applies it as above; FS_EIO when it cannot be read. */
int lg_opts_load_scenario(lg_opts_t *o, const char *path);

/* Defaults, then the --scenario file wherever the flag stands, then every
 * other flag in order; then lg_opts_validate. `--flag value` and
 * `--flag=value` both work. Returns 0 or FS_EINVAL with the message. */
int lg_opts_parse_args(lg_opts_t *o, int argc, char **argv);

/* Checks the settings together (a bound on the run, a loopback target
 * unless allowed, what --plot needs). Returns 0 or FS_EINVAL. */
int lg_opts_validate(const lg_opts_t *o);

/* Every flag, its value form, default and meaning. */
void lg_opts_print_help(FILE *out);

/* "1..64" (uniform range), "1,8,64" (list) or "8". Returns 0 or FS_EINVAL
 * quoting the text; *out untouched on error. */
int lg_pick_parse(const char *text, lg_pick_t *out);

/* "INPUT:AXIS:PICK", as "embeddings:1:16..512". 0 or FS_EINVAL. */
int lg_dim_parse(const char *text, lg_dim_t *out);

/* "NAME" or "NAME:WEIGHT". 0 or FS_EINVAL. */
int lg_model_ref_parse(const char *text, lg_model_ref_t *out);

/* The host of an http:// URL into host (bracketless for IPv6) and whether
 * it is loopback (127.0.0.0/8, ::1, localhost). 0 or FS_EINVAL. */
int lg_url_host(const char *url, char *host, size_t host_len, int *is_loopback);

/* A value drawn from `p` with the random 64-bit `r`. */
uint32_t lg_pick_draw(const lg_pick_t *p, uint64_t r);

/* The largest value `p` can give. */
uint32_t lg_pick_max(const lg_pick_t *p);

#ifdef __cplusplus
}
#endif
#endif
