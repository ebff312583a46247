/* config.h -- flatserve's configuration: the server file (flatserve.json),
 * the per-model config.json of the repository, and command-line flags.
 *
 * Only this module reads the outside world's configuration JSON (cJSON); the
 * rest of the server gets the plain, validated structs below. Every key is
 * optional with the default documented in config/README.md; sizes are "512MiB"
 * or a byte count, durations "5s" / "500us" (common/parse.h). An unknown key
 * or a bad value is FS_EINVAL with a message naming the key path
 * ("memory.policies[1].after": expected a duration such as \"30s\", got 12)
 * and what was expected.
 *
 * Threading: plain data; functions are reentrant. */
#ifndef FS_CONFIG_CONFIG_H
#define FS_CONFIG_CONFIG_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "alloc/policy.h"
#include "common/log.h"
#include "engine/engine.h" /* eng_device_t, eng_precision_t */
#include "engine/sequence.h" /* eng_seq_options_t */

#ifdef __cplusplus
extern "C" {
#endif

#define CFG_VERSION "0.5.0"
#define CFG_NAME_MAX 128     /* model names, device strings, hosts */
#define CFG_PATH_MAX 1024
#define CFG_TOKEN_MAX 256
#define CFG_MAX_MODELS 64
#define CFG_MAX_POLICIES 8
#define CFG_MAX_PREFERRED 16 /* preferred batch sizes of a config.pbtxt */
#define CFG_MAX_VERSIONS 16  /* versions of a model serving at once */

#define CFG_MAX_DEVICES 8     /* GPUs one server (or one model) spreads over */

/* The devices as the config holds them: parsed once, each by the engine's
 * parser, when read. "cpu", "cuda", "cuda:N", or a list of GPUs
 * ("cuda:0,1" or "cuda:0,cuda:1", each once). The server's may also be
 * "auto" (chosen at start) or "cuda:all" (every GPU found at start); a
 * model's may be unset (the server's devices, all of them). */
typedef struct cfg_device {
    bool set;                     /* false: a model's devices are the server's */
    bool is_auto;                 /* the server's: "auto" */
    bool all_gpus;                /* the server's: "cuda:all" */
    eng_device_t dev;             /* when set and neither: the first device */
    uint32_t n_more;              /* the GPUs listed after it, more[0..n_more) */
    eng_device_t more[CFG_MAX_DEVICES - 1];
} cfg_device_t;

/* Parses `s` as above into *out (zeroed first; set true); `server`: "auto"
 * and "cuda:all" allowed. 0, or FS_EINVAL with a message saying what was
 * wrong (no key named: the caller adds it). */
int cfg_device_parse(const char *s, bool server, cfg_device_t *out);

/* "auto", "cuda:all", "" (unset) or the devices ("cpu", "cuda:N",
 * "cuda:0,1") into buf; returns buf. Cannot fail. */
const char *cfg_device_text(const cfg_device_t *d, char *buf, size_t len);

/* Dynamic batching of one model (defaults in the server file's "batching",
 * overridden by the model's config.json). */
typedef struct cfg_batching {
    uint32_t max_batch_size;      /* rows per batch; 0 or 1: no batching. Default 64 */
    uint64_t max_queue_delay_ns;  /* wait for more requests after the first. Default 500us */
    uint32_t max_queue;           /* queued requests before 503. Default 1024 */
    uint32_t instances;           /* worker threads sharing the queue; 0: auto (server/app.c). Default 0 */
} cfg_batching_t;

/* How a model is built: the server file's "engine" section, overridden by
 * the model's config.json. */
typedef struct cfg_engine {
    eng_precision_t precision;    /* fp32 (default), tf32, fp16, bf16 */
    uint32_t threads;             /* CPU kernel threads per run; 0: the machine's cores / instances. Default 0 */
    uint32_t max_plans;           /* plan cache bound per model. Default 16 */
    bool cuda_graphs;             /* replay captured CUDA graphs. Default true */
} cfg_engine_t;

/* Triton's --model-control-mode: which models load at start, whether the
 * repository API may load and unload, and whether the repository is
 * watched (config/README.md, "Model control"). */
typedef enum cfg_control {
    CFG_CONTROL_EXPLICIT = 0,     /* `models` at start; the API loads and unloads (default) */
    CFG_CONTROL_NONE,             /* every model at start; the API refuses */
    CFG_CONTROL_POLL,             /* every model at start, the repository re-read every
                                   * repository_poll_secs; the API refuses */
} cfg_control_t;
/* "explicit", "none", "poll". Cannot fail. */
const char *cfg_control_name(cfg_control_t c);

/* One release policy; `params` holds every kind's parameters, the kind
 * reads its own (alloc/policy.h). */
typedef struct cfg_policy {
    alloc_policy_kind_t kind;
    alloc_policy_params_t params;
} cfg_policy_t;

typedef struct cfg {
    struct {
        char host[CFG_NAME_MAX];          /* listen address. Default "0.0.0.0" */
        uint16_t port;                    /* 0: an ephemeral port. Default 8000 */
        uint32_t threads;                 /* HTTP threads. Default 4 */
        uint64_t max_body_bytes;          /* larger bodies get 413. Default 64MiB */
        char admin_token[CFG_TOKEN_MAX];  /* "" (default): admin endpoints are open */
        uint64_t connection_timeout_ns;   /* idle keep-alive connections close. Default 30s */
        uint64_t request_timeout_ns;      /* a request waiting longer fails with 503. Default 30s */
        uint64_t shutdown_timeout_ns;     /* SIGTERM drain bound. Default 30s */
        /* true (default, Triton's --exit-on-error): start-up fails when the
         * repository cannot be read or a start-up model does not load, and
         * /v2/health/ready is 503 while a model that should be loaded is not
         * READY. false: the failures are logged, the server serves what
         * loaded and is ready once start-up is done. */
        bool exit_on_error;
        /* true (default, as Triton): Triton's system shared memory extension
         * (/v2/systemsharedmemory, the "shared_memory_region" parameters)
         * is served; false: refused with 400 naming this key. */
        bool shared_memory;
    } server;
    cfg_device_t device;                  /* "auto" (default: cuda:0 if a GPU answers, else cpu), "cpu",
                                           * "cuda", "cuda:N", "cuda:all", "cuda:0,1" */
    char repository[CFG_PATH_MAX];        /* Default "models" */
    /* Models loaded at start: with models_all (the default, or "models": "*")
     * every model directory of the repository; otherwise the listed names
     * (possibly none). */
    bool models_all;
    size_t n_models;
    char models[CFG_MAX_MODELS][CFG_NAME_MAX];
    cfg_control_t model_control_mode;     /* Default explicit */
    uint32_t repository_poll_secs;        /* poll mode's period, 1..86400. Default 15 */
    cfg_batching_t batching;
    cfg_engine_t engine;
    struct {
        size_t n_policies;                /* Default 2: "arena", "idle_trim" */
        cfg_policy_t policies[CFG_MAX_POLICIES];
        double limit_fraction;            /* of device memory, (0,1]; 0: unset (default: the
                                           * server applies ENG_MEMORY_*_FRACTION) */
        uint64_t limit_bytes;             /* 0: unset (default) */
        uint64_t max_split_bytes;         /* 0: unlimited (default); else > 1MiB */
        uint64_t pinned_limit_bytes;      /* pinned staging cache bound. Default 256MiB */
        uint64_t tick_ns;                 /* timer thread period for policies. Default 50ms */
    } memory;
    struct {
        fs_log_level_t level;             /* Default info */
        fs_log_format_t format;           /* Default text */
    } log;
    /* Triton's trace extension (server/trace.c): the global settings at
     * start, which /v2/trace/setting then changes. */
    struct {
        bool timestamps;                  /* level TIMESTAMPS; false (default): OFF */
        uint32_t rate;                    /* 1 of every `rate` requests, >= 1. Default 1000 */
        int64_t count;                    /* traces left to collect; -1 (default): no bound */
        uint32_t log_frequency;           /* traces per file.<k>; 0 (default): all in `file` */
        char file[CFG_PATH_MAX];          /* "" (default): none; TIMESTAMPS needs one */
    } trace;
} cfg_t;

/* A model's config.json: batching and engine settings over the server's
 * defaults, and the device. */
typedef struct cfg_model {
    cfg_device_t device;         /* unset (default): the server's device */
    cfg_batching_t batching;
    cfg_engine_t engine;
    /* Only a config.pbtxt sets these (config/triton.h); the defaults change
     * nothing. */
    char model_file[CFG_NAME_MAX];  /* default_model_filename; "": model.onnx */
    /* version_policy: the versions listed (n_versions > 0), or all, or the
     * newest versions_latest (0, the default: 1). */
    uint32_t versions_latest;
    bool versions_all;
    uint32_t n_versions;
    int64_t versions[CFG_MAX_VERSIONS];
    uint32_t max_request_rows;   /* max_batch_size > 0: bound on a request's rows; 0: none of its own */
    uint64_t queue_timeout_ns;   /* default_timeout_microseconds; 0: none */
    uint32_t n_preferred;        /* preferred_batch_size, ascending, each 1..max_batch_size */
    uint32_t preferred[CFG_MAX_PREFERRED];
    eng_seq_options_t sequence;  /* sequence_batching; zeroed: none */
} cfg_model_t;

/* A trace level as Triton spells it, any case: "OFF" or "TIMESTAMPS"
 * (*timestamps). FS_EINVAL naming it otherwise ("TENSORS": not
 * supported). */
int cfg_trace_level_parse(const char *s, bool *timestamps);
/* A trace count's text: an integer >= -1 (-1: no bound). FS_EINVAL
 * quoting it otherwise. */
int cfg_trace_count_parse(const char *s, int64_t *out);
/* Fills *out with every default. Cannot fail. */
void cfg_defaults(cfg_t *out);

/* Applies a flatserve.json document (text of `len` bytes) onto *cfg: keys
 * present replace the values in *cfg, others are left. `origin` names the
 * source in messages (a path). 0, or FS_EPARSE (not JSON: the message gives
 * the place) / FS_EINVAL (unknown key, wrong type, bad value: the message
 * gives the key path and what was expected); *cfg is unchanged on error. */
int cfg_parse(const char *text, size_t len, const char *origin, cfg_t *cfg);

/* cfg_parse of a file. FS_ENOENT / FS_EIO naming the path as well. */
int cfg_load_file(const char *path, cfg_t *cfg);

/* A model's config.json over the server's defaults: *out starts as
 * `defaults`' batching, engine and "" device, then the document's keys
 * ("max_batch_size", "max_queue_delay", "max_queue", "instances",
 * "device", "precision", "threads", "max_plans", "cuda_graphs") apply.
 * Errors as cfg_parse, naming origin and key. */
void cfg_model_defaults(const cfg_t *defaults, cfg_model_t *out);
int cfg_model_parse(const char *text, size_t len, const char *origin, cfg_model_t *out);
/* Sets the engine key `key` ("precision", "threads", "max_plans",
 * "cuda_graphs") of *m from its text, checked as config.json checks it
 * (a config.pbtxt's parameters). `origin` and `path` name it in messages.
 * 0, or FS_EINVAL naming it (an unknown key lists the known ones) or
 * FS_ENOMEM; *m is unchanged on error. */
int cfg_model_param_set(cfg_model_t *m, const char *key, const char *text, const char *origin,
                        const char *path);
/* cfg_model_defaults, then the file when it exists (a missing file is not
 * an error). On error *out holds the defaults. */
int cfg_model_load_file(const char *path, const cfg_t *defaults, cfg_model_t *out);

/* What the command line asks for. */
typedef enum cfg_action {
    CFG_ACTION_SERVE = 0,
    CFG_ACTION_HELP,          /* --help: print cfg_usage and exit 0 */
    CFG_ACTION_VERSION,       /* --version */
    CFG_ACTION_CHECK,         /* --check-config: validate, print the effective config, exit 0 */
} cfg_action_t;

/* Parses argv: --config FILE is read first (cfg_load_file onto the
 * defaults), then every other flag overrides it: --host, --port,
 * --threads, --device, --repository (also --model-repository), --model
 * NAME (repeatable; replaces the model list), --policy LIST (comma
 * separated kinds with default parameters, replacing the list),
 * --precision, --max-batch-size, --max-queue-delay, --admin-token,
 * --log-level, --log-format, --exit-on-error (true|false), --help,
 * --version, --check-config.
 * `--flag=value` and `--flag value` both work. *config_path receives the
 * --config path (borrowed from argv) or NULL. --help and --version read no
 * file (*out gets the defaults). 0, or FS_EINVAL naming the flag and what
 * was wrong; errors of the file as cfg_load_file. On error *out, *action
 * and *config_path are unchanged. */
int cfg_from_args(int argc, char **argv, cfg_t *out, cfg_action_t *action,
                  const char **config_path);

/* The flags and their meaning, for --help. */
void cfg_usage(FILE *out);

/* The effective configuration as a JSON document in the file's own
 * syntax (so it parses back to the same cfg_t), sizes and durations
 * written with units. A set server.admin_token is written as "***", so
 * the output can be shown (--check-config) without the secret; only that
 * field does not round-trip. Caller frees with free(); NULL on FS_ENOMEM. */
char *cfg_to_json(const cfg_t *cfg);

/* What changed between two configs, for SIGHUP. *live gets whether
 * anything that applies live differs: memory.policies, memory.tick,
 * batching, log. `restart` (buf of `len`, always terminated; "" when none)
 * lists, comma-separated, the key paths that differ but only take effect
 * after a restart: server.*, device, repository, models, engine.*,
 * memory.limit_fraction / limit_bytes / max_split / pinned_limit.
 * Cannot fail. */
void cfg_diff(const cfg_t *old_cfg, const cfg_t *new_cfg, bool *live, char *restart, size_t len);

#ifdef __cplusplus
}
#endif
#endif
