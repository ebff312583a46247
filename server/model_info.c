/* model_info.c -- the documents that describe the server and its models:
 * health (live, ready), server metadata, model metadata and readiness,
 * Triton's model config and its statistics extension. Each is built as a
 * cJSON tree and answered whole; none changes anything.
 *
 * A model document holds a reference to the version it describes while it
 * is written (one acquire, one release in model_doc), so a version being
 * replaced meanwhile is described as it was, never half-freed. */
#include <cjson/cJSON.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/error.h"
#include "server/app_impl.h"

/* The platform metadata and config name: Triton's for an ONNX model, which
 * Triton's clients and KServe's tooling expect (config.pbtxt may also say
 * "onnxruntime_onnx"; "flatserve" as the backend). */
#define SRV_PLATFORM "onnxruntime_onnx"

eng_served_t *srv_info_acquire(srv_req_t *r, const srv_route_args_t *a)
{
    eng_served_t *s = NULL;
    int rc = eng_registry_acquire(r->app->registry, a->model, a->version, &s);
    if (rc != 0) {
        srv_respond_fs_error(r, rc);
        return NULL;
    }
    return s;
}

/* ---- health and the server ------------------------------------------------------ */

void srv_info_live(srv_req_t *r, const srv_route_args_t *a)
{
    cJSON *doc = cJSON_CreateObject();
    cJSON_AddBoolToObject(doc, "live", true);
    srv_respond_json(r, 200, doc);
}

void srv_info_ready(srv_req_t *r, const srv_route_args_t *a)
{
    char why[FS_ERRMSG_MAX + 256];
    if (!srv_ready_check(r->app, why, sizeof why)) {
        srv_respond_error(r, 503, "%s", why);
        return;
    }
    cJSON *doc = cJSON_CreateObject();
    cJSON_AddBoolToObject(doc, "ready", true);
    srv_respond_json(r, 200, doc);
}

void srv_info_server(srv_req_t *r, const srv_route_args_t *a)
{
    cJSON *doc = cJSON_CreateObject();
    cJSON_AddStringToObject(doc, "name", "flatserve");
    cJSON_AddStringToObject(doc, "version", CFG_VERSION);
    cJSON *ext = cJSON_AddArrayToObject(doc, "extensions");
    const char *names[] = {"binary_tensor_data", "model_repository", "statistics", "memory",
                           "trace"};
    for (size_t i = 0; ext && i < sizeof names / sizeof names[0]; i++)
        cJSON_AddItemToArray(ext, cJSON_CreateString(names[i]));
    if (ext && r->app->shm)
        cJSON_AddItemToArray(ext, cJSON_CreateString("system_shared_memory"));
    if (ext && r->app->shm && FS_HAVE_CUDA) /* a build without CUDA answers as Triton's does */
        cJSON_AddItemToArray(ext, cJSON_CreateString("cuda_shared_memory"));
    cJSON_AddStringToObject(doc, "device", r->app->device);
    srv_respond_json(r, 200, doc);
}

/* ---- one model ------------------------------------------------------------------ */

/* The dims of a model input or output as the protocol shows them (-1 for
 * symbolic ones). */
static cJSON *dims_json(const eng_io_info_t *io, int from)
{
    cJSON *a = cJSON_CreateArray();
    for (int d = from; a && d < io->rank; d++)
        cJSON_AddItemToArray(a, cJSON_CreateNumber((double)io->dims[d]));
    return a;
}

/* A model's inputs (as requests are checked: a config.pbtxt may narrow
 * them) or outputs: as model metadata shows them ({name,
 * datatype, shape}), or as Triton's model config does ({name, data_type
 * "TYPE_FP32", dims}, without the batch dim when the model batches). */
/* Triton's config name of dtype dt: "TYPE_FP32", ..., "TYPE_STRING" for
 * BYTES. */
static void triton_type(eng_dtype_t dt, char *out, size_t len)
{
    const char *name = dt == ENG_DT_STRING ? "STRING" : srv_datatype_name(dt);
    snprintf(out, len, "TYPE_%s", name ? name : "INVALID");
}

static cJSON *io_list_json(const eng_served_t *s, bool outputs, bool config, bool batched)
{
    const eng_model_t *m = eng_served_model(s);
    cJSON *list = cJSON_CreateArray();
    size_t n = outputs ? eng_model_n_outputs(m) : eng_model_n_inputs(m);
    for (size_t i = 0; list && i < n; i++) {
        eng_io_info_t io;
        if ((outputs ? eng_model_output(m, i, &io) : eng_served_input(s, i, &io)) != 0)
            continue;
        /* The sequence batcher's controls and states are not the client's
         * (Triton lists them under sequence_batching only). */
        if (outputs ? eng_served_output_state(s, i) : eng_served_input_filled(s, i))
            continue;
        cJSON *o = cJSON_CreateObject();
        const char *dt = srv_datatype_name(io.dtype);
        cJSON_AddStringToObject(o, "name", io.name);
        if (config) {
            char type[32];
            triton_type(io.dtype, type, sizeof type);
            cJSON_AddStringToObject(o, "data_type", type);
            cJSON_AddItemToObject(o, "dims", dims_json(&io, batched ? 1 : 0));
        } else {
            cJSON_AddStringToObject(o, "datatype", dt ? dt : eng_dtype_name(io.dtype));
            cJSON_AddItemToObject(o, "shape", dims_json(&io, 0));
        }
        cJSON_AddItemToArray(list, o);
    }
    return list;
}

/* Answers {"name": ..., what `fill` adds} about the route's model version,
 * or the error when it does not serve. */
static void model_doc(srv_req_t *r, const srv_route_args_t *a,
                      void (*fill)(cJSON *doc, eng_served_t *s, eng_registry_t *reg))
{
    eng_served_t *s = srv_info_acquire(r, a);
    if (!s)
        return;
    cJSON *doc = cJSON_CreateObject();
    cJSON_AddStringToObject(doc, "name", eng_served_name(s));
    fill(doc, s, r->app->registry);
    eng_served_release(s);
    srv_respond_json(r, 200, doc);
}

/* "versions": every version serving (several with a config.pbtxt's
 * version_policy), newest first. */
static void model_fill(cJSON *doc, eng_served_t *s, eng_registry_t *reg)
{
    const eng_model_t *m = eng_served_model(s);
    cJSON *versions = cJSON_AddArrayToObject(doc, "versions");
    int64_t list[ENG_VERSIONS_MAX];
    size_t n = 0;
    if (eng_registry_versions(reg, eng_served_name(s), list, &n) != 0 || n == 0) {
        list[0] = eng_served_version(s); /* unloaded meanwhile: the one described */
        n = 1;
    }
    for (size_t i = 0; i < n; i++) {
        char v[32];
        snprintf(v, sizeof v, "%" PRId64, list[i]);
        cJSON_AddItemToArray(versions, cJSON_CreateString(v));
    }
    cJSON_AddStringToObject(doc, "platform", SRV_PLATFORM);
    cJSON_AddStringToObject(doc, "device", eng_model_device(m));
    cJSON_AddItemToObject(doc, "inputs", io_list_json(s, false, false, false));
    cJSON_AddItemToObject(doc, "outputs", io_list_json(s, true, false, false));
}

static void model_ready_fill(cJSON *doc, eng_served_t *s, eng_registry_t *reg)
{
    cJSON_AddBoolToObject(doc, "ready", true);
}

/* sequence_batching as the configuration set it (config/triton.c): the
 * controls grouped by input as Triton writes them, the states (zeros at
 * START: no initial_state), the strategy. */
static void sequence_json(cJSON *doc, const eng_serve_options_t *o, bool batched)
{
    const eng_seq_options_t *q = &o->sequence;
    cJSON *sb = cJSON_AddObjectToObject(doc, "sequence_batching");
    cJSON_AddNumberToObject(sb, "max_sequence_idle_microseconds",
                            (double)((q->idle_ns ? q->idle_ns : ENG_SEQ_DEFAULT_IDLE_NS) / 1000));
    cJSON *inputs = cJSON_AddArrayToObject(sb, "control_input");
    for (uint32_t k = 0; inputs && k < q->n_controls; k++) {
        const eng_seq_control_t *c = &q->controls[k];
        cJSON *in = NULL, *it;
        cJSON_ArrayForEach(it, inputs)
        {
            if (strcmp(cJSON_GetStringValue(cJSON_GetObjectItem(it, "name")), c->input) == 0)
                in = it;
        }
        if (!in) {
            in = cJSON_CreateObject();
            cJSON_AddStringToObject(in, "name", c->input);
            cJSON_AddArrayToObject(in, "control");
            cJSON_AddItemToArray(inputs, in);
        }
        cJSON *ctl = cJSON_CreateObject();
        cJSON_AddStringToObject(ctl, "kind", eng_seq_control_kind_name(c->kind));
        char type[32];
        if (c->kind == ENG_SEQ_CORRID) {
            triton_type(c->dtype, type, sizeof type);
            cJSON_AddStringToObject(ctl, "data_type", type);
        } else if (c->dtype == ENG_DT_BOOL) {
            cJSON *ft = cJSON_AddArrayToObject(ctl, "bool_false_true");
            for (int v = 0; ft && v < 2; v++)
                cJSON_AddItemToArray(ft, cJSON_CreateBool(c->false_true[v] != 0));
        } else {
            cJSON *ft = cJSON_AddArrayToObject(ctl, c->dtype == ENG_DT_INT32 ? "int32_false_true"
                                                                              : "fp32_false_true");
            for (int v = 0; ft && v < 2; v++)
                cJSON_AddItemToArray(ft, cJSON_CreateNumber(c->false_true[v]));
        }
        cJSON_AddItemToArray(cJSON_GetObjectItem(in, "control"), ctl);
    }
    cJSON *states = cJSON_AddArrayToObject(sb, "state");
    for (uint32_t k = 0; states && k < q->n_states; k++) {
        const eng_seq_state_t *st = &q->states[k];
        cJSON *j = cJSON_CreateObject();
        char type[32];
        triton_type(st->dtype, type, sizeof type);
        cJSON_AddStringToObject(j, "input_name", st->input);
        cJSON_AddStringToObject(j, "output_name", st->output);
        cJSON_AddStringToObject(j, "data_type", type);
        cJSON *dims = cJSON_AddArrayToObject(j, "dims");
        for (uint32_t d = 0; dims && d < st->rank; d++)
            cJSON_AddItemToArray(dims, cJSON_CreateNumber((double)st->dims[d]));
        cJSON_AddItemToArray(states, j);
    }
    if (!q->oldest) {
        cJSON_AddObjectToObject(sb, "direct");
        return;
    }
    cJSON *old = cJSON_AddObjectToObject(sb, "oldest");
    cJSON_AddNumberToObject(old, "max_candidate_sequences",
                            q->max_sequences ? q->max_sequences : ENG_SEQ_DEFAULT_MAX);
    cJSON_AddNumberToObject(old, "max_queue_delay_microseconds",
                            batched ? (double)(o->max_queue_delay_ns / 1000) : 0);
    cJSON *pref = cJSON_AddArrayToObject(old, "preferred_batch_size");
    for (uint32_t i = 0; pref && batched && i < o->n_preferred; i++)
        cJSON_AddItemToArray(pref, cJSON_CreateNumber(o->preferred[i]));
}

/* Triton's model config, from what the model's configuration file set
 * (config.pbtxt's fields, or config.json's over the defaults). */
static void model_config_fill(cJSON *doc, eng_served_t *s, eng_registry_t *reg)
{
    const eng_model_t *m = eng_served_model(s);
    eng_serve_options_t o;
    eng_served_options(s, &o);
    bool batched = eng_served_batches(s);
    /* A config.pbtxt's max_batch_size bounds requests with or without
     * dynamic batching; its dims then leave out the batch dim. */
    uint32_t mbs = o.max_request_rows ? o.max_request_rows : batched ? o.max_batch_size : 0;
    bool gpu = strncmp(eng_model_device(m), "cuda", 4) == 0;
    cJSON_AddStringToObject(doc, "platform", SRV_PLATFORM);
    cJSON_AddStringToObject(doc, "backend", "flatserve");
    cJSON_AddNumberToObject(doc, "max_batch_size", mbs);
    cJSON_AddItemToObject(doc, "input", io_list_json(s, false, true, mbs > 0));
    cJSON_AddItemToObject(doc, "output", io_list_json(s, true, true, mbs > 0));
    if (o.sequence.enabled) {
        sequence_json(doc, &o, batched);
    } else if (batched) {
        cJSON *db = cJSON_AddObjectToObject(doc, "dynamic_batching");
        cJSON_AddNumberToObject(db, "max_queue_delay_microseconds",
                                (double)(o.max_queue_delay_ns / 1000));
        cJSON_AddNumberToObject(db, "max_queue_size", o.max_queue);
        cJSON *pref = cJSON_AddArrayToObject(db, "preferred_batch_size");
        for (uint32_t i = 0; pref && i < o.n_preferred; i++)
            cJSON_AddItemToArray(pref, cJSON_CreateNumber(o.preferred[i]));
        cJSON *qp = cJSON_AddObjectToObject(db, "default_queue_policy");
        cJSON_AddNumberToObject(qp, "max_queue_size", o.max_queue);
        cJSON_AddNumberToObject(qp, "default_timeout_microseconds",
                                (double)(o.queue_timeout_ns / 1000));
    }
    cJSON *vp = cJSON_AddObjectToObject(doc, "version_policy");
    if (o.n_versions) {
        cJSON *versions = cJSON_AddArrayToObject(cJSON_AddObjectToObject(vp, "specific"),
                                                 "versions");
        for (uint32_t i = 0; versions && i < o.n_versions; i++)
            cJSON_AddItemToArray(versions, cJSON_CreateNumber((double)o.versions[i]));
    } else if (o.versions_all) {
        cJSON_AddObjectToObject(vp, "all");
    } else {
        cJSON_AddNumberToObject(cJSON_AddObjectToObject(vp, "latest"), "num_versions",
                                o.versions_latest ? o.versions_latest : 1);
    }
    cJSON_AddStringToObject(doc, "default_model_filename",
                            o.model_file[0] ? o.model_file : "model.onnx");
    cJSON *groups = cJSON_AddArrayToObject(doc, "instance_group");
    cJSON *g = cJSON_CreateObject();
    cJSON_AddNumberToObject(g, "count", o.instances ? o.instances : 1);
    cJSON_AddStringToObject(g, "kind", gpu ? "KIND_GPU" : "KIND_CPU");
    if (gpu) {
        cJSON *gpus = cJSON_AddArrayToObject(g, "gpus");
        for (uint32_t k = 0; k < o.n_devices; k++)
            if (o.devices[k].kind == ENG_DEVICE_CUDA)
                cJSON_AddItemToArray(gpus, cJSON_CreateNumber(o.devices[k].index));
    }
    cJSON_AddItemToArray(groups, g);
    cJSON *params = cJSON_AddObjectToObject(doc, "parameters");
    char where[64];
    eng_devices_text(o.devices, o.n_devices, where, sizeof where);
    cJSON_AddStringToObject(params, "device", where);
    cJSON_AddStringToObject(params, "precision", eng_precision_name(o.precision));
    cJSON_AddBoolToObject(params, "cuda_graphs", o.cuda_graphs);
    cJSON_AddNumberToObject(params, "threads", o.threads);
}

void srv_info_model(srv_req_t *r, const srv_route_args_t *a)
{
    model_doc(r, a, model_fill);
}

void srv_info_model_ready(srv_req_t *r, const srv_route_args_t *a)
{
    model_doc(r, a, model_ready_fill);
}

void srv_info_model_config(srv_req_t *r, const srv_route_args_t *a)
{
    model_doc(r, a, model_config_fill);
}

/* ---- statistics ----------------------------------------------------------------- */

/* Triton's statistics extension (docs/protocol/extension_statistics.md),
 * exactly its fields: the spec lists them and Triton's own gRPC message
 * has no room for more, so flatserve adds none (its queue depth is
 * nv_inference_pending_request_count on /metrics). Durations are kept in
 * microseconds per request and shown in ns; batch_stats in ns. flatserve
 * has no response cache: cache_hit and cache_miss are zero, as Triton's
 * with the cache off, and response_stats is empty, as Triton's for a
 * model that is not decoupled. */

static cJSON *duration_json(uint64_t count, uint64_t ns)
{
    cJSON *o = cJSON_CreateObject();
    cJSON_AddNumberToObject(o, "count", (double)count);
    cJSON_AddNumberToObject(o, "ns", (double)ns);
    return o;
}

/* batch_stats: one object per batch size executed. */
static void batch_stats_json(cJSON *o, const eng_batch_stat_t *bs, size_t n)
{
    cJSON *list = cJSON_AddArrayToObject(o, "batch_stats");
    for (size_t i = 0; i < n; i++) {
        cJSON *e = cJSON_CreateObject();
        cJSON_AddNumberToObject(e, "batch_size", (double)bs[i].batch_size);
        cJSON_AddItemToObject(e, "compute_input", duration_json(bs[i].count, bs[i].compute_input_ns));
        cJSON_AddItemToObject(e, "compute_infer", duration_json(bs[i].count, bs[i].compute_infer_ns));
        cJSON_AddItemToObject(e, "compute_output", duration_json(bs[i].count, bs[i].compute_output_ns));
        cJSON_AddItemToArray(list, e);
    }
}

/* memory_usage: the bytes the served version holds now, its weights' and
 * activations' owners' allocated bytes (what /v1/memory shows per owner),
 * on its device: GPU with the CUDA ordinal, or CPU 0. Empty when the
 * version does not serve. */
static void memory_usage_json(cJSON *o, const eng_model_entry_t *e, int64_t version)
{
    cJSON *list = cJSON_AddArrayToObject(o, "memory_usage");
    if (e->state != ENG_MODEL_READY || e->version != version)
        return;
    int id = 0;
    bool gpu = sscanf(e->device, "cuda:%d", &id) == 1;
    cJSON *m = cJSON_CreateObject();
    cJSON_AddStringToObject(m, "type", gpu ? "GPU" : "CPU");
    cJSON_AddNumberToObject(m, "id", gpu ? id : 0);
    cJSON_AddNumberToObject(m, "byte_size", (double)(e->weights_bytes + e->activations_bytes));
    cJSON_AddItemToArray(list, m);
}

/* One $model_stat; bs (n) are its batch sizes. */
static cJSON *stats_json(const eng_model_entry_t *e, int64_t version, const eng_model_stats_t *st,
                         const eng_batch_stat_t *bs, size_t n)
{
    cJSON *o = cJSON_CreateObject();
    cJSON_AddStringToObject(o, "name", e->name);
    srv_json_add_version(o, "version", version);
    cJSON_AddNumberToObject(o, "last_inference", (double)st->last_inference_ms);
    cJSON_AddNumberToObject(o, "inference_count", (double)st->inference_count);
    cJSON_AddNumberToObject(o, "execution_count", (double)st->exec_count);
    cJSON *is = cJSON_AddObjectToObject(o, "inference_stats");
    uint64_t ok = st->request_success;
    cJSON_AddItemToObject(is, "success", duration_json(ok, st->request_duration_us * 1000));
    cJSON_AddItemToObject(is, "fail", duration_json(st->request_failure, st->failure_duration_us * 1000));
    cJSON_AddItemToObject(is, "queue", duration_json(ok, st->queue_duration_us * 1000));
    cJSON_AddItemToObject(is, "compute_input", duration_json(ok, st->compute_input_us * 1000));
    cJSON_AddItemToObject(is, "compute_infer", duration_json(ok, st->compute_infer_us * 1000));
    cJSON_AddItemToObject(is, "compute_output", duration_json(ok, st->compute_output_us * 1000));
    cJSON_AddItemToObject(is, "cache_hit", duration_json(0, 0));
    cJSON_AddItemToObject(is, "cache_miss", duration_json(0, 0));
    cJSON_AddObjectToObject(o, "response_stats");
    batch_stats_json(o, bs, n);
    memory_usage_json(o, e, version);
    return o;
}

/* Adds the $model_stat of (e, version) to list: 0, or the error of reading
 * its stats (FS_ENOENT: none recorded for that version; FS_ENOMEM). */
static int stats_add(srv_req_t *r, cJSON *list, const eng_model_entry_t *e, int64_t version,
                     bool exact)
{
    eng_model_stats_t st = e->stats;
    int rc = exact ? eng_registry_stats(r->app->registry, e->name, version, &st) : 0;
    eng_batch_stat_t *bs = NULL;
    size_t n = 0;
    if (rc == 0)
        rc = eng_registry_batch_stats(r->app->registry, e->name, version, &bs, &n);
    if (rc == FS_ENOENT && !exact)
        rc = 0; /* the version serves but has run nothing: no record yet */
    if (rc == 0)
        cJSON_AddItemToArray(list, stats_json(e, version, &st, bs, n));
    free(bs);
    return rc;
}

/* Every model's statistics (no model in the path), or one model's (every
 * version it has, or the one in the path). */
void srv_info_stats(srv_req_t *r, const srv_route_args_t *a)
{
    const srv_route_args_t *want = a->model[0] ? a : NULL;
    eng_model_entry_t *entries;
    size_t n;
    if (!srv_registry_index(r, &entries, &n))
        return;
    cJSON *doc = cJSON_CreateObject();
    cJSON *list = cJSON_AddArrayToObject(doc, "model_stats");
    bool found = !want;
    for (size_t i = 0; i < n; i++) {
        const eng_model_entry_t *e = &entries[i];
        if (want && strcmp(e->name, want->model) != 0)
            continue;
        found = true;
        bool exact = want && want->version >= 0;
        int64_t version = exact ? want->version : e->version;
        int rc = version >= 0 ? stats_add(r, list, e, version, exact) : 0;
        if (rc != 0) {
            cJSON_Delete(doc);
            free(entries);
            if (rc == FS_ENOENT)
                srv_respond_error(r, 404, "model '%s' has no statistics for version %" PRId64,
                                  want->model, want->version);
            else
                srv_respond_fs_error(r, rc);
            return;
        }
    }
    free(entries);
    if (!found) {
        cJSON_Delete(doc);
        srv_respond_error(r, 404, "model '%s' is not in the repository", want->model);
        return;
    }
    srv_respond_json(r, 200, doc);
}
