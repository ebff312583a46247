/* triton.h -- a Triton model configuration (REPO/<model>/config.pbtxt, the
 * protobuf text format of inference.ModelConfig) as flatserve reads it, and
 * how it becomes a model's settings.
 *
 * The text is parsed by protobuf's own TextFormat parser over
 * config/model_config.proto (the subset of Triton's schema flatserve
 * honours, with Triton's names and field numbers) behind a small C++ shim,
 * config/pbtxt.cc; a field outside that subset is refused by the parser,
 * naming it, the file, the line and the column. cfg_triton_apply then
 * checks what the subset holds and refuses, naming the field, every value
 * flatserve cannot honour: nothing in the file is silently dropped.
 *
 * Precedence (config/README.md): a model directory holds config.pbtxt or
 * config.json, not both (both is a load error naming the two files). A
 * config.pbtxt starts from the server file's "batching" and "engine"
 * defaults, as a config.json does, and its fields replace them.
 *
 * This header includes no other of flatserve's (the C++ shim includes it):
 * cfg_triton_apply names config.h's and engine.h's structs by tag.
 *
 * Threading: plain data; functions are reentrant. */
#ifndef FS_CONFIG_TRITON_H
#define FS_CONFIG_TRITON_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>


#ifdef __cplusplus
extern "C" {
#endif

#define CFG_TRITON_MAX_IO 64       /* inputs, and outputs, listed in one file */
#define CFG_TRITON_MAX_DIMS 8      /* ENG_MAX_RANK */
#define CFG_TRITON_MAX_LIST 16     /* preferred sizes, gpus, versions, parameters */
#define CFG_TRITON_TEXT_MAX 256    /* names, platform, file names, parameter values */

/* Triton's DataType numbers (model_config.proto). */
typedef enum cfg_triton_dtype {
    CFG_TRITON_TYPE_INVALID = 0, CFG_TRITON_TYPE_BOOL, CFG_TRITON_TYPE_UINT8,
    CFG_TRITON_TYPE_UINT16, CFG_TRITON_TYPE_UINT32, CFG_TRITON_TYPE_UINT64,
    CFG_TRITON_TYPE_INT8, CFG_TRITON_TYPE_INT16, CFG_TRITON_TYPE_INT32, CFG_TRITON_TYPE_INT64,
    CFG_TRITON_TYPE_FP16, CFG_TRITON_TYPE_FP32, CFG_TRITON_TYPE_FP64, CFG_TRITON_TYPE_STRING,
    CFG_TRITON_TYPE_BF16,
} cfg_triton_dtype_t;

/* "TYPE_FP32" for a DataType number, "TYPE_INVALID" for any other. */
const char *cfg_triton_dtype_name(int dtype);
/* The engine's dtype of a DataType, or -1 when flatserve has none
 * (TYPE_INVALID). TYPE_STRING is the engine's string (BYTES). */
int cfg_triton_dtype_to_eng(int dtype);

typedef struct cfg_triton_io {
    char name[CFG_TRITON_TEXT_MAX];
    int data_type;                 /* cfg_triton_dtype_t */
    int format;                    /* inputs: 0 FORMAT_NONE, 1 NHWC, 2 NCHW */
    bool has_reshape;
    size_t n_dims;
    int64_t dims[CFG_TRITON_MAX_DIMS];
} cfg_triton_io_t;

typedef enum cfg_triton_kind {
    CFG_TRITON_KIND_AUTO = 0, CFG_TRITON_KIND_GPU = 1, CFG_TRITON_KIND_CPU = 2,
    CFG_TRITON_KIND_MODEL = 3,
} cfg_triton_kind_t;

typedef enum cfg_triton_versions {
    CFG_TRITON_VERSIONS_UNSET = 0, CFG_TRITON_VERSIONS_LATEST, CFG_TRITON_VERSIONS_ALL,
    CFG_TRITON_VERSIONS_SPECIFIC,
} cfg_triton_versions_t;

/* sequence_batching's controls and states, as written. */
typedef struct cfg_triton_control {
    char name[CFG_TRITON_TEXT_MAX];
    size_t n_controls;             /* entries of its `control` list (one is taken) */
    int kind;                      /* eng_seq_control_kind_t: Triton's numbers */
    int values_type;               /* CFG_TRITON_TYPE_INT32 / FP32 / BOOL: the list given;
                                    * 0: none; -1: more than one */
    size_t n_values;
    double values[2];              /* false, true */
    int data_type;                 /* CORRID's */
} cfg_triton_control_t;

typedef struct cfg_triton_state {
    char input_name[CFG_TRITON_TEXT_MAX];
    char output_name[CFG_TRITON_TEXT_MAX];
    int data_type;
    size_t n_dims;
    int64_t dims[CFG_TRITON_MAX_DIMS];
} cfg_triton_state_t;

#define CFG_TRITON_MAX_CONTROLS 4
#define CFG_TRITON_MAX_STATES 8

typedef enum cfg_triton_strategy {
    CFG_TRITON_STRATEGY_NONE = 0, CFG_TRITON_STRATEGY_DIRECT, CFG_TRITON_STRATEGY_OLDEST,
} cfg_triton_strategy_t;

/* What a config.pbtxt holds, field by field (proto3: a scalar left out
 * reads as 0 or ""). Lists longer than their arrays are refused by the
 * parser, naming the field. */
typedef struct cfg_triton {
    char name[CFG_TRITON_TEXT_MAX];
    char platform[CFG_TRITON_TEXT_MAX];
    char backend[CFG_TRITON_TEXT_MAX];
    int32_t max_batch_size;
    size_t n_inputs, n_outputs;
    cfg_triton_io_t inputs[CFG_TRITON_MAX_IO];
    cfg_triton_io_t outputs[CFG_TRITON_MAX_IO];
    bool dynamic_batching;         /* the message is present */
    uint64_t max_queue_delay_us;
    size_t n_preferred;
    int32_t preferred[CFG_TRITON_MAX_LIST];
    bool has_queue_policy;
    int timeout_action;            /* 0 REJECT, 1 DELAY */
    uint64_t default_timeout_us;
    bool allow_timeout_override;
    uint32_t max_queue_size;       /* 0: unbounded */
    bool sequence_batching;        /* the message is present */
    uint64_t seq_idle_us;
    size_t n_seq_controls;
    cfg_triton_control_t seq_controls[CFG_TRITON_MAX_CONTROLS];
    size_t n_seq_states;
    cfg_triton_state_t seq_states[CFG_TRITON_MAX_STATES];
    int seq_strategy;              /* cfg_triton_strategy_t */
    uint64_t seq_delay_us;         /* the strategy's max_queue_delay_microseconds */
    float seq_min_slot_utilization;
    int32_t seq_max_candidates;
    size_t n_seq_preferred;
    int32_t seq_preferred[CFG_TRITON_MAX_LIST];
    size_t n_groups;               /* instance_group entries; only the first is kept */
    int32_t count;
    int kind;                      /* cfg_triton_kind_t */
    size_t n_gpus;
    int32_t gpus[CFG_TRITON_MAX_LIST];
    int versions;                  /* cfg_triton_versions_t */
    uint32_t latest_n;
    size_t n_versions;
    int64_t specific[CFG_TRITON_MAX_LIST];
    char default_model_filename[CFG_TRITON_TEXT_MAX];
    size_t n_params;               /* sorted by key (protobuf's map order is not) */
    struct {
        char key[CFG_TRITON_TEXT_MAX];
        char value[CFG_TRITON_TEXT_MAX];
    } params[CFG_TRITON_MAX_LIST];
} cfg_triton_t;

/* Parses `len` bytes of protobuf text format into *out (zeroed first).
 * `origin` names the file in messages. 0, or FS_EPARSE (not text format,
 * or a field outside flatserve's subset: "models/m/config.pbtxt: line 4,
 * column 3: Message type \"inference.ModelConfig\" has no field named
 * \"optimization\"") or FS_EINVAL (a list or a text longer than flatserve
 * holds, naming the field). Never throws; *out may be partly written on
 * error. (config/pbtxt.cc) */
int cfg_triton_parse(const char *text, size_t len, const char *origin, cfg_triton_t *out);

/* Parses `len` bytes of the protobuf JSON form of a ModelConfig (Triton's
 * load parameter "config": {"max_batch_size": 16}, field names as in the
 * .proto or in lowerCamelCase, 64-bit and other integers as numbers or
 * strings) into *out (zeroed first), over the same subset: a field outside
 * it is refused. 0, or FS_EPARSE ("ORIGIN: not a ModelConfig in JSON:
 * <protobuf's reason>") or FS_EINVAL as cfg_triton_parse. Never throws.
 * (config/pbtxt.cc) */
int cfg_triton_parse_json(const char *text, size_t len, const char *origin, cfg_triton_t *out);

/* Reads and parses a file. *found (when not NULL) says whether it exists:
 * a missing file is then 0 with *found false; with found NULL it is
 * FS_ENOENT. Errors as cfg_triton_parse, or FS_EIO naming the path. */
int cfg_triton_load_file(const char *path, cfg_triton_t *out, bool *found);

/* Checks *t for model `name` (its directory's name) and applies it over
 * *m, which holds the server's defaults (cfg_model_defaults). `server`,
 * the device the server runs on, resolves the instance group's kind.
 * 0, or FS_EINVAL (FS_ENOTSUP for what flatserve does not do yet) with
 * `origin: field: what was wrong`; *m may be partly written on error. */
struct cfg_model;
struct eng_device;
int cfg_triton_apply(const cfg_triton_t *t, const char *origin, const char *name,
                     const struct eng_device *server, struct cfg_model *m);

#ifdef __cplusplus
}
#endif
#endif
