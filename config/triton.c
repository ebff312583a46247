/* triton.c -- a parsed config.pbtxt (config/pbtxt.cc) checked and applied
 * over a model's settings: what flatserve honours becomes cfg_model_t
 * fields, every other value is an error naming its field. The inputs and
 * outputs are checked against the ONNX model once it has loaded (the
 * server's verify callback, server/triton.c). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/error.h"
#include "config/config_impl.h"
#include "config/triton.h"

_Static_assert(CFG_TRITON_MAX_LIST <= CFG_MAX_PREFERRED, "preferred sizes fit cfg_model_t");
_Static_assert(CFG_TRITON_MAX_LIST <= CFG_MAX_VERSIONS, "versions fit cfg_model_t");

static const char *const dtype_names[] = {
    "TYPE_INVALID", "TYPE_BOOL", "TYPE_UINT8", "TYPE_UINT16", "TYPE_UINT32",
    "TYPE_UINT64", "TYPE_INT8", "TYPE_INT16", "TYPE_INT32", "TYPE_INT64",
    "TYPE_FP16", "TYPE_FP32", "TYPE_FP64", "TYPE_STRING", "TYPE_BF16",
};

const char *cfg_triton_dtype_name(int dtype)
{
    return dtype >= 0 && (size_t)dtype < CFG_N_OF(dtype_names) ? dtype_names[dtype]
                                                              : "TYPE_INVALID";
}

int cfg_triton_dtype_to_eng(int dtype)
{
    static const int map[] = {
        [CFG_TRITON_TYPE_BOOL] = ENG_DT_BOOL,     [CFG_TRITON_TYPE_UINT8] = ENG_DT_UINT8,
        [CFG_TRITON_TYPE_UINT16] = ENG_DT_UINT16, [CFG_TRITON_TYPE_UINT32] = ENG_DT_UINT32,
        [CFG_TRITON_TYPE_UINT64] = ENG_DT_UINT64, [CFG_TRITON_TYPE_INT8] = ENG_DT_INT8,
        [CFG_TRITON_TYPE_INT16] = ENG_DT_INT16,   [CFG_TRITON_TYPE_INT32] = ENG_DT_INT32,
        [CFG_TRITON_TYPE_INT64] = ENG_DT_INT64,   [CFG_TRITON_TYPE_FP16] = ENG_DT_FLOAT16,
        [CFG_TRITON_TYPE_FP32] = ENG_DT_FLOAT,    [CFG_TRITON_TYPE_FP64] = ENG_DT_DOUBLE,
        [CFG_TRITON_TYPE_BF16] = ENG_DT_BFLOAT16, [CFG_TRITON_TYPE_STRING] = ENG_DT_STRING,
    };
    if (dtype <= 0 || (size_t)dtype >= CFG_N_OF(map) || map[dtype] == 0)
        return -1;
    return map[dtype];
}

int cfg_triton_load_file(const char *path, cfg_triton_t *out, bool *found)
{
    char *text;
    size_t len;
    bool missing = false;
    int rc = cfg_file_read(path, &text, &len, found ? &missing : NULL);
    if (found)
        *found = rc == 0 && !missing;
    if (rc != 0 || missing)
        return rc;
    rc = cfg_triton_parse(text, len, path, out);
    free(text);
    return rc;
}

/* ---- applying ------------------------------------------------------------------ */

/* The inputs' and outputs' own fields: names unique and non-empty, a data
 * type flatserve has, dims -1 or positive, no reshape, no format. */
static int io_check(const cfg_triton_io_t *list, size_t n, const char *origin, const char *what)
{
    for (size_t i = 0; i < n; i++) {
        const cfg_triton_io_t *io = &list[i];
        if (!io->name[0])
            return fs_err(FS_EINVAL, "%s: %s[%zu] has no name", origin, what, i);
        for (size_t j = 0; j < i; j++)
            if (strcmp(list[j].name, io->name) == 0)
                return fs_err(FS_EINVAL, "%s: %s '%s' is listed twice", origin, what, io->name);
        if (cfg_triton_dtype_to_eng(io->data_type) < 0)
            return fs_err(FS_EINVAL, "%s: %s '%s': data_type %s is not served by flatserve", origin, what,
                          io->name, cfg_triton_dtype_name(io->data_type));
        for (size_t d = 0; d < io->n_dims; d++)
            if (io->dims[d] < -1 || io->dims[d] == 0)
                return fs_err(FS_EINVAL, "%s: %s '%s': dims[%zu] is %lld (expected -1 or a "
                              "positive size)", origin, what, io->name, d,
                              (long long)io->dims[d]);
        if (io->has_reshape)
            return fs_err(FS_ENOTSUP, "%s: %s '%s': reshape is not supported by flatserve (the "
                          "tensor is given to the model in the shape of its dims; remove "
                          "reshape and write the model's own shape in dims)", origin, what,
                          io->name);
        if (io->format != 0)
            return fs_err(FS_ENOTSUP, "%s: %s '%s': format %s is not supported by flatserve "
                          "(only FORMAT_NONE: the dims are the model's)", origin, what, io->name,
                          io->format == 1 ? "FORMAT_NHWC" : "FORMAT_NCHW");
    }
    return 0;
}

/* `field`.preferred_batch_size into m, ascending, each in 1..mbs, none
 * twice. */
static int preferred_set(const int32_t *list, size_t n, uint32_t mbs, const char *origin,
                         const char *field, cfg_model_t *m)
{
    for (size_t i = 0; i < n; i++) {
        int32_t p = list[i];
        if (p < 1 || (uint32_t)p > mbs)
            return fs_err(FS_EINVAL, "%s: %s.preferred_batch_size %d is outside "
                          "1..max_batch_size (%u)", origin, field, (int)p, mbs);
        /* Kept ascending: an insertion into the sorted prefix. */
        size_t j = m->n_preferred;
        while (j > 0 && m->preferred[j - 1] > (uint32_t)p)
            j--;
        if (j > 0 && m->preferred[j - 1] == (uint32_t)p)
            return fs_err(FS_EINVAL, "%s: %s.preferred_batch_size lists %d twice", origin,
                          field, (int)p);
        memmove(&m->preferred[j + 1], &m->preferred[j],
                (m->n_preferred - j) * sizeof m->preferred[0]);
        m->preferred[j] = (uint32_t)p;
        m->n_preferred++;
    }
    return 0;
}

static int apply_batching(const cfg_triton_t *t, const char *origin, cfg_model_t *m)
{
    if (t->max_batch_size < 0 || t->max_batch_size > 65536)
        return fs_err(FS_EINVAL, "%s: max_batch_size is %d (expected 0..65536)", origin,
                      (int)t->max_batch_size);
    uint32_t mbs = (uint32_t)t->max_batch_size;
    m->max_request_rows = mbs;
    /* Requests are combined only with dynamic_batching, as in Triton; each
     * may still carry up to max_batch_size rows. */
    m->batching.max_batch_size = t->dynamic_batching ? mbs : 0;
    m->batching.max_queue_delay_ns = 0;
    if (!t->dynamic_batching)
        return 0;
    if (mbs == 0)
        return fs_err(FS_EINVAL, "%s: dynamic_batching needs max_batch_size > 0", origin);
    if (t->max_queue_delay_us > UINT64_MAX / 1000)
        return fs_err(FS_EINVAL, "%s: dynamic_batching.max_queue_delay_microseconds %llu is too "
                      "large", origin, (unsigned long long)t->max_queue_delay_us);
    m->batching.max_queue_delay_ns = t->max_queue_delay_us * 1000;
    int rc = preferred_set(t->preferred, t->n_preferred, mbs, origin, "dynamic_batching", m);
    if (rc != 0)
        return rc;
    if (!t->has_queue_policy)
        return 0;
    if (t->timeout_action != 0)
        return fs_err(FS_ENOTSUP, "%s: dynamic_batching.default_queue_policy.timeout_action "
                      "DELAY is not supported (a request past its timeout fails: REJECT)", origin);
    if (t->allow_timeout_override)
        return fs_err(FS_ENOTSUP, "%s: dynamic_batching.default_queue_policy."
                      "allow_timeout_override is not supported (requests carry no timeout of "
                      "their own)", origin);
    if (t->default_timeout_us > UINT64_MAX / 1000)
        return fs_err(FS_EINVAL, "%s: dynamic_batching.default_queue_policy."
                      "default_timeout_microseconds %llu is too large", origin,
                      (unsigned long long)t->default_timeout_us);
    m->queue_timeout_ns = t->default_timeout_us * 1000;
    if (t->max_queue_size > 1048576)
        return fs_err(FS_EINVAL, "%s: dynamic_batching.default_queue_policy.max_queue_size %u "
                      "(expected 0..1048576)", origin, t->max_queue_size);
    m->batching.max_queue = t->max_queue_size; /* 0: unbounded, as in Triton */
    return 0;
}

/* One control input of sequence_batching into *c. */
static int sequence_control(const cfg_triton_control_t *in, const char *origin,
                            eng_seq_control_t *c)
{
    const char *kind = eng_seq_control_kind_name((eng_seq_control_kind_t)in->kind);
    if (!in->name[0])
        return fs_err(FS_EINVAL, "%s: sequence_batching.control_input has an entry with no name",
                      origin);
    if (in->n_controls != 1)
        return fs_err(FS_ENOTSUP, "%s: sequence_batching.control_input '%s' lists %zu controls; "
                      "flatserve takes exactly one per input", origin, in->name, in->n_controls);
    cfg_string_store(c->input, sizeof c->input, in->name);
    c->kind = (eng_seq_control_kind_t)in->kind;
    if (in->kind == ENG_SEQ_CORRID) {
        if (in->values_type != 0)
            return fs_err(FS_EINVAL, "%s: sequence_batching.control_input '%s': %s takes "
                          "data_type, not false/true values", origin, in->name, kind);
        switch (in->data_type) {
        case CFG_TRITON_TYPE_UINT64: c->dtype = ENG_DT_UINT64; return 0;
        case CFG_TRITON_TYPE_INT64: c->dtype = ENG_DT_INT64; return 0;
        case CFG_TRITON_TYPE_UINT32: c->dtype = ENG_DT_UINT32; return 0;
        case CFG_TRITON_TYPE_INT32: c->dtype = ENG_DT_INT32; return 0;
        case CFG_TRITON_TYPE_STRING:
            return fs_err(FS_ENOTSUP, "%s: sequence_batching.control_input '%s': a %s of "
                          "data_type TYPE_STRING is not supported by flatserve (the id as a "
                          "string tensor); string sequence ids are taken where no CORRID "
                          "control is given", origin, in->name, kind);
        default:
            return fs_err(FS_EINVAL, "%s: sequence_batching.control_input '%s': %s data_type "
                          "is %s (expected TYPE_UINT64, TYPE_INT64, TYPE_UINT32 or TYPE_INT32)",
                          origin, in->name, kind, cfg_triton_dtype_name(in->data_type));
        }
    }
    if (in->data_type != 0)
        return fs_err(FS_EINVAL, "%s: sequence_batching.control_input '%s': data_type is for "
                      "CONTROL_SEQUENCE_CORRID; %s takes int32_false_true, fp32_false_true or "
                      "bool_false_true", origin, in->name, kind);
    if (in->values_type <= 0)
        return fs_err(FS_EINVAL, "%s: sequence_batching.control_input '%s': %s needs exactly "
                      "one of int32_false_true, fp32_false_true, bool_false_true", origin,
                      in->name, kind);
    if (in->n_values != 2)
        return fs_err(FS_EINVAL, "%s: sequence_batching.control_input '%s': %zu false/true "
                      "values (expected 2: the false value, then the true one)", origin,
                      in->name, in->n_values);
    c->dtype = in->values_type == CFG_TRITON_TYPE_INT32  ? ENG_DT_INT32
               : in->values_type == CFG_TRITON_TYPE_FP32 ? ENG_DT_FLOAT
                                                         : ENG_DT_BOOL;
    c->false_true[0] = in->values[0];
    c->false_true[1] = in->values[1];
    return 0;
}

/* sequence_batching: the sequence batcher's options, and batching of
 * requests of different sequences where the model batches. */
static int apply_sequence(const cfg_triton_t *t, const char *origin, cfg_model_t *m)
{
    if (!t->sequence_batching)
        return 0;
    eng_seq_options_t *o = &m->sequence;
    memset(o, 0, sizeof *o);
    o->enabled = true;
    if (t->seq_idle_us > UINT64_MAX / 1000)
        return fs_err(FS_EINVAL, "%s: sequence_batching.max_sequence_idle_microseconds %llu is "
                      "too large", origin, (unsigned long long)t->seq_idle_us);
    o->idle_ns = t->seq_idle_us * 1000;
    for (size_t i = 0; i < t->n_seq_controls; i++) {
        int rc = sequence_control(&t->seq_controls[i], origin, &o->controls[i]);
        if (rc != 0)
            return rc;
        for (size_t j = 0; j < i; j++)
            if (o->controls[j].kind == o->controls[i].kind)
                return fs_err(FS_EINVAL, "%s: sequence_batching.control_input: %s is given "
                              "twice ('%s' and '%s')", origin,
                              eng_seq_control_kind_name(o->controls[i].kind),
                              o->controls[j].input, o->controls[i].input);
        o->n_controls++;
    }
    for (size_t i = 0; i < t->n_seq_states; i++) {
        const cfg_triton_state_t *in = &t->seq_states[i];
        eng_seq_state_t *st = &o->states[i];
        if (!in->input_name[0] || !in->output_name[0])
            return fs_err(FS_EINVAL, "%s: sequence_batching.state[%zu] needs input_name and "
                          "output_name", origin, i);
        int dt = cfg_triton_dtype_to_eng(in->data_type);
        if (dt < 0)
            return fs_err(in->data_type == CFG_TRITON_TYPE_STRING ? FS_ENOTSUP : FS_EINVAL,
                          "%s: sequence_batching.state '%s': data_type %s is not served by "
                          "flatserve", origin, in->input_name,
                          cfg_triton_dtype_name(in->data_type));
        for (size_t d = 0; d < in->n_dims; d++)
            if (in->dims[d] < 1)
                return fs_err(in->dims[d] == -1 ? FS_ENOTSUP : FS_EINVAL, "%s: "
                              "sequence_batching.state '%s': dims[%zu] is %lld (flatserve keeps "
                              "states of a fixed shape: each dim positive)", origin,
                              in->input_name, d, (long long)in->dims[d]);
        cfg_string_store(st->input, sizeof st->input, in->input_name);
        cfg_string_store(st->output, sizeof st->output, in->output_name);
        st->dtype = (eng_dtype_t)dt;
        st->rank = (uint32_t)in->n_dims;
        memcpy(st->dims, in->dims, in->n_dims * sizeof *in->dims);
        o->n_states++;
    }
    uint32_t mbs = (uint32_t)t->max_batch_size;
    /* Requests of different sequences batch together where the model batches. */
    m->batching.max_batch_size = mbs;
    m->batching.max_queue_delay_ns = 0;
    if (t->seq_strategy == CFG_TRITON_STRATEGY_DIRECT) {
        /* Triton's direct strategy waits max_queue_delay_microseconds only
         * with a minimum_slot_utilization, which flatserve does not have. */
        if (t->seq_min_slot_utilization != 0)
            return fs_err(FS_ENOTSUP, "%s: sequence_batching.direct.minimum_slot_utilization is "
                          "not supported by flatserve (a batch runs as soon as one request of "
                          "any sequence is ready: 0)", origin);
        return 0;
    }
    if (t->seq_strategy != CFG_TRITON_STRATEGY_OLDEST)
        return 0;
    o->oldest = true;
    if (t->seq_max_candidates < 0)
        return fs_err(FS_EINVAL, "%s: sequence_batching.oldest.max_candidate_sequences is %d",
                      origin, (int)t->seq_max_candidates);
    o->max_sequences = (uint32_t)t->seq_max_candidates;
    if (t->seq_delay_us > UINT64_MAX / 1000)
        return fs_err(FS_EINVAL, "%s: sequence_batching.oldest.max_queue_delay_microseconds %llu "
                      "is too large", origin, (unsigned long long)t->seq_delay_us);
    if (mbs > 0)
        m->batching.max_queue_delay_ns = t->seq_delay_us * 1000;
    return preferred_set(t->seq_preferred, t->n_seq_preferred, mbs, origin,
                         "sequence_batching.oldest", m);
}

static int apply_instances(const cfg_triton_t *t, const char *origin,
                           const eng_device_t *server, cfg_model_t *m)
{
    if (t->n_groups == 0)
        return 0;
    if (t->n_groups > 1)
        return fs_err(FS_ENOTSUP, "%s: instance_group has %zu groups; flatserve serves a model "
                      "from one group", origin, t->n_groups);
    if (t->count < 0 || t->count > 64)
        return fs_err(FS_EINVAL, "%s: instance_group.count is %d (expected 1..64)", origin,
                      (int)t->count);
    m->batching.instances = t->count ? (uint32_t)t->count : 1;
    if (t->n_gpus > CFG_MAX_DEVICES)
        return fs_err(FS_ENOTSUP, "%s: instance_group.gpus lists %zu GPUs; at most %d", origin,
                      t->n_gpus, CFG_MAX_DEVICES);
    cfg_device_t gpus = {.set = true};
    for (size_t i = 0; i < t->n_gpus; i++) {
        if (t->gpus[i] < 0 || t->gpus[i] >= 1024)
            return fs_err(FS_EINVAL, "%s: instance_group.gpus[%zu] is %d", origin, i,
                          (int)t->gpus[i]);
        eng_device_t d = {ENG_DEVICE_CUDA, t->gpus[i]};
        for (size_t j = 0; j < i; j++)
            if (t->gpus[j] == t->gpus[i])
                return fs_err(FS_EINVAL, "%s: instance_group.gpus lists GPU %d twice", origin,
                              (int)t->gpus[i]);
        if (i == 0)
            gpus.dev = d;
        else
            gpus.more[gpus.n_more++] = d;
    }
    bool server_gpu = server->kind == ENG_DEVICE_CUDA;
    switch (t->kind) {
    case CFG_TRITON_KIND_CPU:
        if (t->n_gpus)
            return fs_err(FS_EINVAL, "%s: instance_group: KIND_CPU with gpus", origin);
        m->device = (cfg_device_t){.set = true, .dev = {ENG_DEVICE_CPU, 0}};
        return 0;
    case CFG_TRITON_KIND_GPU:
        if (!t->n_gpus && !server_gpu)
            return fs_err(FS_ENOTSUP, "%s: instance_group: KIND_GPU, but the server runs on the "
                          "CPU", origin);
        /* No gpus: every GPU the server runs on, as Triton spreads it. */
        if (t->n_gpus)
            m->device = gpus;
        return 0;
    case CFG_TRITON_KIND_AUTO:
        /* Triton's meaning: the GPUs when one serves, else the CPU. */
        if (t->n_gpus && server_gpu)
            m->device = gpus;
        return 0;
    default:
        return fs_err(FS_ENOTSUP, "%s: instance_group.kind KIND_MODEL is not supported (use "
                      "KIND_AUTO, KIND_CPU or KIND_GPU)", origin);
    }
}

static int apply_versions(const cfg_triton_t *t, const char *origin, cfg_model_t *m)
{
    switch (t->versions) {
    case CFG_TRITON_VERSIONS_UNSET:
        return 0;
    case CFG_TRITON_VERSIONS_LATEST:
        if (t->latest_n == 0 || t->latest_n > CFG_MAX_VERSIONS)
            return fs_err(FS_EINVAL, "%s: version_policy.latest.num_versions is %u (expected "
                          "1..%d)", origin, t->latest_n, CFG_MAX_VERSIONS);
        m->versions_latest = t->latest_n;
        return 0;
    case CFG_TRITON_VERSIONS_SPECIFIC:
        if (t->n_versions == 0)
            return fs_err(FS_EINVAL, "%s: version_policy specific lists no version", origin);
        for (size_t i = 0; i < t->n_versions; i++) {
            if (t->specific[i] < 0)
                return fs_err(FS_EINVAL, "%s: version_policy.specific.versions[%zu] is %lld",
                              origin, i, (long long)t->specific[i]);
            for (size_t j = 0; j < i; j++)
                if (t->specific[j] == t->specific[i])
                    return fs_err(FS_EINVAL, "%s: version_policy specific lists version %lld "
                                  "twice", origin, (long long)t->specific[i]);
            m->versions[m->n_versions++] = t->specific[i];
        }
        return 0;
    default:
        m->versions_all = true;
        return 0;
    }
}

int cfg_triton_apply(const cfg_triton_t *t, const char *origin, const char *name,
                     const eng_device_t *server, cfg_model_t *m)
{
    if (t->name[0] && strcmp(t->name, name) != 0)
        return fs_err(FS_EINVAL, "%s: name is '%s', but the model's directory is '%s' (they "
                      "must match)", origin, t->name, name);
    if (t->platform[0] && strcmp(t->platform, "onnxruntime_onnx") != 0)
        return fs_err(FS_ENOTSUP, "%s: platform '%s' is not served by flatserve (it serves ONNX "
                      "models: onnxruntime_onnx)", origin, t->platform);
    if (t->backend[0] && strcmp(t->backend, "onnxruntime") != 0 &&
        strcmp(t->backend, "flatserve") != 0)
        return fs_err(FS_ENOTSUP, "%s: backend '%s' is not served by flatserve (onnxruntime or "
                      "flatserve)", origin, t->backend);
    int rc = io_check(t->inputs, t->n_inputs, origin, "input");
    if (rc == 0)
        rc = io_check(t->outputs, t->n_outputs, origin, "output");
    if (rc == 0)
        rc = apply_batching(t, origin, m);
    if (rc == 0)
        rc = apply_sequence(t, origin, m);
    if (rc == 0)
        rc = apply_instances(t, origin, server, m);
    if (rc == 0)
        rc = apply_versions(t, origin, m);
    if (rc != 0)
        return rc;
    if (t->default_model_filename[0]) {
        const char *f = t->default_model_filename;
        if (strchr(f, '/') || strcmp(f, ".") == 0 || strcmp(f, "..") == 0 ||
            strlen(f) >= sizeof m->model_file)
            return fs_err(FS_EINVAL, "%s: default_model_filename '%s' must be one file name of "
                          "the version directory (at most %zu bytes)", origin, f,
                          sizeof m->model_file - 1);
        cfg_string_store(m->model_file, sizeof m->model_file, f);
    }
    for (size_t i = 0; i < t->n_params; i++) {
        char path[CFG_TRITON_TEXT_MAX + 16];
        snprintf(path, sizeof path, "parameters.%s", t->params[i].key);
        if ((rc = cfg_model_param_set(m, t->params[i].key, t->params[i].value, origin, path)) != 0)
            return rc;
    }
    return 0;
}
