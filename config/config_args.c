/* config_args.c -- the command line: flags over the config file.
 *
 * Two passes over argv. The first checks every argument (known flag, value
 * present) and finds --config and the actions, so the file is read first
 * wherever --config stands, and --help works whatever else is wrong with
 * the configuration. The second applies the other flags in order onto the
 * file's result, each through the validator of the key it stands for
 * (cfg_flag_apply), so a flag accepts exactly what the file accepts. */
#include <stdlib.h>
#include <string.h>

#include "common/error.h"
#include "config/config.h"
#include "config/config_impl.h"

typedef enum flag_kind {
    FLAG_KEY,      /* sets the key at `path` */
    FLAG_LIST,     /* a list key; repeats and commas add items (--model, --policy) */
    FLAG_CONFIG,   /* --config FILE */
    FLAG_ACTION,   /* --help, --version, --check-config: no value */
    FLAG_TRACE,    /* --trace-config [triton,]SETTING=VALUE: a key of "trace" */
} flag_kind_t;

typedef struct cfg_flag {
    const char *name;      /* "--port" */
    flag_kind_t kind;
    const char *path;      /* FLAG_KEY, FLAG_LIST: the key of the file */
    cfg_action_t action;   /* FLAG_ACTION */
    const char *arg;       /* the value's name in --help; NULL for actions */
    const char *help;
} cfg_flag_t;

static const cfg_flag_t flags[] = {
    {"--config", FLAG_CONFIG, NULL, CFG_ACTION_SERVE, "FILE",
     "read FILE (flatserve.json) first; the other flags override it"},
    {"--host", FLAG_KEY, "server.host", CFG_ACTION_SERVE, "ADDR",
     "listen address (default 0.0.0.0)"},
    {"--port", FLAG_KEY, "server.port", CFG_ACTION_SERVE, "N",
     "listen port, 0 for an ephemeral one (default 8000)"},
    {"--threads", FLAG_KEY, "server.threads", CFG_ACTION_SERVE, "N", "HTTP threads (default 4)"},
    {"--device", FLAG_KEY, "device", CFG_ACTION_SERVE, "DEV",
     "auto, cpu, cuda or cuda:N (default auto: cuda:0 if a GPU answers, else cpu)"},
    {"--repository", FLAG_KEY, "repository", CFG_ACTION_SERVE, "DIR",
     "the model repository (default models)"},
    {"--model-repository", FLAG_KEY, "repository", CFG_ACTION_SERVE, "DIR",
     "the same as --repository"},
    {"--model", FLAG_LIST, "models", CFG_ACTION_SERVE, "NAME",
     "load only this model; repeat (or separate with commas) for more (default: all)"},
    {"--load-model", FLAG_LIST, "models", CFG_ACTION_SERVE, "NAME",
     "the same as --model (Triton's name); '*' loads every model"},
    {"--model-control-mode", FLAG_KEY, "model_control_mode", CFG_ACTION_SERVE, "MODE",
     "explicit (default: --model's models at start, the repository API loads and unloads), "
     "none (every model, API refused) or poll (every model, the repository re-read)"},
    {"--repository-poll-secs", FLAG_KEY, "repository_poll_secs", CFG_ACTION_SERVE, "N",
     "poll mode: seconds between looks at the repository (default 15)"},
    {"--policy", FLAG_LIST, "memory.policies", CFG_ACTION_SERVE, "LIST",
     "memory release policies with default parameters, comma separated: cache, periodic, "
     "arena, idle_trim, watermark (default cache)"},
    {"--precision", FLAG_KEY, "engine.precision", CFG_ACTION_SERVE, "P",
     "fp32, tf32, fp16 or bf16 (default fp32)"},
    {"--max-batch-size", FLAG_KEY, "batching.max_batch_size", CFG_ACTION_SERVE, "N",
     "rows per batch, 0 or 1 for no batching (default 64)"},
    {"--max-queue-delay", FLAG_KEY, "batching.max_queue_delay", CFG_ACTION_SERVE, "DURATION",
     "wait for more requests after the first, such as 500us (default 0s: batch what queued while the last batch ran)"},
    {"--admin-token", FLAG_KEY, "server.admin_token", CFG_ACTION_SERVE, "TOKEN",
     "bearer token the admin endpoints require (default none: open)"},
    {"--exit-on-error", FLAG_KEY, "server.exit_on_error", CFG_ACTION_SERVE, "BOOL",
     "true (default): a repository that cannot be read or a start-up model that does not load "
     "fails start-up, and readiness needs every model; false: serve what loaded"},
    {"--log-level", FLAG_KEY, "log.level", CFG_ACTION_SERVE, "LEVEL",
     "error, warn, info, debug or trace (default info)"},
    {"--log-format", FLAG_KEY, "log.format", CFG_ACTION_SERVE, "FORMAT",
     "text or json (default text)"},
    {"--trace-config", FLAG_TRACE, "trace", CFG_ACTION_SERVE, "[triton,]SETTING=VALUE",
     "Triton's trace settings, repeatable: level=OFF|TIMESTAMPS, rate=N, count=N (-1: no "
     "bound), mode=triton, triton,file=PATH, triton,log-frequency=N"},
    {"--trace-file", FLAG_KEY, "trace.file", CFG_ACTION_SERVE, "PATH",
     "the same as --trace-config triton,file=PATH (Triton's older flag)"},
    {"--trace-level", FLAG_KEY, "trace.level", CFG_ACTION_SERVE, "LEVEL",
     "the same as --trace-config level=LEVEL"},
    {"--trace-rate", FLAG_KEY, "trace.rate", CFG_ACTION_SERVE, "N",
     "the same as --trace-config rate=N"},
    {"--trace-count", FLAG_KEY, "trace.count", CFG_ACTION_SERVE, "N",
     "the same as --trace-config count=N"},
    {"--trace-log-frequency", FLAG_KEY, "trace.log_frequency", CFG_ACTION_SERVE, "N",
     "the same as --trace-config triton,log-frequency=N"},
    {"--check-config", FLAG_ACTION, NULL, CFG_ACTION_CHECK, NULL,
     "validate the configuration, print it as JSON and exit (the admin token shows as ***)"},
    {"--help", FLAG_ACTION, NULL, CFG_ACTION_HELP, NULL, "print this help and exit"},
    {"--version", FLAG_ACTION, NULL, CFG_ACTION_VERSION, NULL, "print the version and exit"},
};

#define N_FLAGS (sizeof flags / sizeof flags[0])

/* One argument after the first pass: its flag and its value. */
typedef struct flag_use {
    const cfg_flag_t *flag;
    const char *value;     /* borrowed from argv; NULL for actions */
} flag_use_t;

static const cfg_flag_t *flag_find(const char *name, size_t len)
{
    for (size_t i = 0; i < N_FLAGS; i++)
        if (strlen(flags[i].name) == len && strncmp(flags[i].name, name, len) == 0)
            return &flags[i];
    return NULL;
}

/* First pass: fills uses[0..*n_uses). FS_EINVAL naming the argument. */
static int args_scan(int argc, char **argv, flag_use_t *uses, size_t *n_uses)
{
    size_t n = 0;
    for (int i = 1; i < argc; i++) {
        const char *arg = argv[i];
        if (strcmp(arg, "-h") == 0)
            arg = "--help";
        if (strncmp(arg, "--", 2) != 0 || arg[2] == '\0')
            return fs_err(FS_EINVAL, "unexpected argument '%s': flags start with -- (see --help)",
                          arg);
        const char *eq = strchr(arg, '=');
        size_t name_len = eq ? (size_t)(eq - arg) : strlen(arg);
        const cfg_flag_t *flag = flag_find(arg, name_len);
        if (!flag)
            return fs_err(FS_EINVAL, "unknown flag '%.*s' (see --help)", (int)name_len, arg);
        const char *value = NULL;
        if (flag->kind == FLAG_ACTION) {
            if (eq)
                return fs_err(FS_EINVAL, "flag '%s' takes no value", flag->name);
        } else if (eq) {
            value = eq + 1;
        } else if (i + 1 < argc && strncmp(argv[i + 1], "--", 2) != 0) {
            value = argv[++i];
        } else {
            /* A value that starts with "--" is taken as the next flag; such
             * a value can still be given as --flag=--value. */
            return fs_err(FS_EINVAL, "flag '%s' needs a value (%s %s)%s%s", flag->name,
                          flag->name, flag->arg, i + 1 < argc ? "; the next argument is " : "",
                          i + 1 < argc ? argv[i + 1] : "");
        }
        uses[n].flag = flag;
        uses[n].value = value;
        n++;
    }
    *n_uses = n;
    return 0;
}

/* One --trace-config value: "<setting>=<value>" for the global settings
 * (level, rate, count, mode), "triton,<setting>=<value>" for the file ones
 * (file, log-frequency; log_frequency also taken), as Triton's flag; the
 * prefix is optional, as people write both. Mode
 * "opentelemetry" and its settings are refused as not supported. */
static int trace_flag_apply(cfg_t *cfg, const char *flag, const char *text)
{
    /* Each taken with or without the prefix: both forms are in use. */
    static const struct {
        const char *name, *path;
    } settings[] = {
        {"level", "trace.level"}, {"rate", "trace.rate"}, {"count", "trace.count"},
        {"file", "trace.file"},   {"log-frequency", "trace.log_frequency"},
        {"log_frequency", "trace.log_frequency"},
    };
    const char *s = text;
    bool triton = false;
    if (strncmp(s, "opentelemetry,", 14) == 0)
        return fs_err(FS_EINVAL, "%s %s: OpenTelemetry tracing is not supported (mode triton "
                      "only)", flag, text);
    if (strncmp(s, "triton,", 7) == 0) {
        triton = true;
        s += 7;
    }
    const char *eq = strchr(s, '=');
    if (!eq)
        return fs_err(FS_EINVAL, "%s %s: expected [triton,]SETTING=VALUE", flag, text);
    size_t n = (size_t)(eq - s);
    if (!triton && n == 4 && strncmp(s, "mode", 4) == 0) {
        if (strcmp(eq + 1, "triton") == 0)
            return 0; /* the one mode, already in force */
        return fs_err(FS_EINVAL, "%s %s: trace mode '%s' is not supported (triton only)", flag,
                      text, eq + 1);
    }
    for (size_t i = 0; i < sizeof settings / sizeof settings[0]; i++)
        if (strlen(settings[i].name) == n && strncmp(settings[i].name, s, n) == 0)
            return cfg_flag_apply(cfg, settings[i].path, flag, eq + 1);
    return fs_err(FS_EINVAL, "%s %s: unknown trace setting '%.*s' (level, rate, count, mode, "
                  "file, log-frequency)", flag, text, (int)n, s);
}

/* Second pass onto *cfg (a copy: it may be partly written on error). The
 * values of a list flag are applied together where it first appears. */
static int args_apply(const flag_use_t *uses, size_t n, cfg_t *cfg, const char **list)
{
    for (size_t i = 0; i < n; i++) {
        const cfg_flag_t *flag = uses[i].flag;
        int rc = 0;
        if (flag->kind == FLAG_KEY) {
            rc = cfg_flag_apply(cfg, flag->path, flag->name, uses[i].value);
        } else if (flag->kind == FLAG_TRACE) {
            rc = trace_flag_apply(cfg, flag->name, uses[i].value);
        } else if (flag->kind == FLAG_LIST) {
            bool first = true;
            for (size_t j = 0; j < i && first; j++)
                first = uses[j].flag != flag;
            if (!first)
                continue;
            size_t n_list = 0;
            for (size_t j = i; j < n; j++)
                if (uses[j].flag == flag)
                    list[n_list++] = uses[j].value;
            rc = cfg_flag_apply_list(cfg, flag->path, flag->name, list, n_list);
        }
        if (rc != 0)
            return rc;
    }
    return 0;
}

int cfg_from_args(int argc, char **argv, cfg_t *out, cfg_action_t *action,
                  const char **config_path)
{
    size_t max = argc > 1 ? (size_t)argc : 1;
    flag_use_t *uses = malloc(max * sizeof *uses);
    const char **list = malloc(max * sizeof *list);
    cfg_t *cfg = malloc(sizeof *cfg);
    size_t n = 0;
    int rc = uses && list && cfg ? args_scan(argc, argv, uses, &n)
                                 : fs_err(FS_ENOMEM, "out of memory for the command line");
    const char *path = NULL;
    cfg_action_t act = CFG_ACTION_SERVE;
    for (size_t i = 0; rc == 0 && i < n; i++) {
        const cfg_flag_t *flag = uses[i].flag;
        if (flag->kind == FLAG_CONFIG && path)
            rc = fs_err(FS_EINVAL, "flag '--config' given twice ('%s' and '%s')", path,
                        uses[i].value);
        else if (flag->kind == FLAG_CONFIG)
            path = uses[i].value;
        /* --help wins over --version, which wins over --check-config. */
        else if (flag->kind == FLAG_ACTION &&
                 (act == CFG_ACTION_SERVE || flag->action == CFG_ACTION_HELP ||
                  (flag->action == CFG_ACTION_VERSION && act == CFG_ACTION_CHECK)))
            act = flag->action;
    }
    if (rc == 0)
        cfg_defaults(cfg);
    /* Help and version need no configuration, so a bad file cannot stop them. */
    bool serve = act == CFG_ACTION_SERVE || act == CFG_ACTION_CHECK;
    if (rc == 0 && serve && path)
        rc = cfg_load_file(path, cfg);
    if (rc == 0 && serve)
        rc = args_apply(uses, n, cfg, list);
    if (rc == 0) {
        memcpy(out, cfg, sizeof *out);
        *action = act;
        *config_path = path;
    }
    free(cfg);
    free(list);
    free(uses);
    return rc;
}

void cfg_usage(FILE *out)
{
    fprintf(out, "usage: flatserve [--config FILE] [FLAG VALUE | FLAG=VALUE]...\n"
                 "Serves the ONNX models of a repository over HTTP (KServe v2).\n\n");
    for (size_t i = 0; i < N_FLAGS; i++) {
        char left[48];
        snprintf(left, sizeof left, "%s%s%s", flags[i].name, flags[i].arg ? " " : "",
                 flags[i].arg ? flags[i].arg : "");
        fprintf(out, "  %-28s %s\n", left, flags[i].help);
    }
    fprintf(out, "\nEvery setting, with its default, is a key of the config file; see\n"
                 "config/README.md. Flags override the file.\n");
}
