/* test_triton.c -- tests for config.pbtxt: the reader (config/pbtxt.cc:
 * protobuf's text format into cfg_triton_t) and its application over a
 * model's settings (config/triton.c), every field and every error. */
#include <criterion/criterion.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "common/error.h"
#include "config/config.h"
#include "config/triton.h"

static const eng_device_t cpu_dev = {ENG_DEVICE_CPU, 0};
static const eng_device_t gpu_dev = {ENG_DEVICE_CUDA, 1};

/* `text` parsed; the test fails if it does not parse. Caller frees. */
static cfg_triton_t *parse_ok(const char *text)
{
    cfg_triton_t *t = malloc(sizeof *t);
    cr_assert_not_null(t);
    int rc = cfg_triton_parse(text, strlen(text), "m/config.pbtxt", t);
    cr_assert_eq(rc, 0, "%s: %s", text, fs_errmsg());
    return t;
}

/* The message holds every one of the NULL-terminated substrings. */
static void msg_has(const char *what, va_list ap)
{
    for (const char *s; (s = va_arg(ap, const char *));)
        cr_expect(strstr(fs_errmsg(), s), "%s: message lacks [%s]: %s", what, s, fs_errmsg());
}

static void parse_fails(const char *text, int want_rc, ...)
{
    cfg_triton_t *t = malloc(sizeof *t);
    cr_assert_not_null(t);
    int rc = cfg_triton_parse(text, strlen(text), "m/config.pbtxt", t);
    cr_expect_eq(rc, want_rc, "%s: rc %s (%s)", text, fs_errname(rc), fs_errmsg());
    va_list ap;
    va_start(ap, want_rc);
    msg_has(text, ap);
    va_end(ap);
    free(t);
}
#define PARSE_FAILS(text, rc, ...) parse_fails(text, rc, __VA_ARGS__, (const char *)NULL)

/* The defaults with `text` applied for model "m" on `dev`. */
static cfg_model_t apply_ok_on(const char *text, const eng_device_t *dev)
{
    cfg_t d;
    cfg_defaults(&d);
    cfg_model_t m;
    cfg_model_defaults(&d, &m);
    cfg_triton_t *t = parse_ok(text);
    int rc = cfg_triton_apply(t, "m/config.pbtxt", "m", dev, &m);
    free(t);
    cr_assert_eq(rc, 0, "%s: %s", text, fs_errmsg());
    return m;
}

static cfg_model_t apply_ok(const char *text)
{
    return apply_ok_on(text, &cpu_dev);
}

static void apply_fails(const char *text, const eng_device_t *dev, int want_rc, ...)
{
    cfg_t d;
    cfg_defaults(&d);
    cfg_model_t m;
    cfg_model_defaults(&d, &m);
    cfg_triton_t *t = parse_ok(text);
    int rc = cfg_triton_apply(t, "m/config.pbtxt", "m", dev, &m);
    free(t);
    cr_expect_eq(rc, want_rc, "%s: rc %s (%s)", text, fs_errname(rc), fs_errmsg());
    va_list ap;
    va_start(ap, want_rc);
    msg_has(text, ap);
    va_end(ap);
}
#define APPLY_FAILS(text, rc, ...) apply_fails(text, &cpu_dev, rc, __VA_ARGS__, (const char *)NULL)
#define APPLY_FAILS_ON(dev, text, rc, ...) apply_fails(text, dev, rc, __VA_ARGS__, (const char *)NULL)

/* ---- the reader ------------------------------------------------------------------- */

Test(triton_parse, reads_every_field_of_the_subset)
{
    cfg_triton_t *t = parse_ok(
        "# Triton's own syntax: comments, lists, optional colons and commas\n"
        "name: \"resnet\"\n"
        "platform: \"onnxruntime_onnx\"\n"
        "backend: \"onnxruntime\"\n"
        "max_batch_size: 8\n"
        "input [ { name: \"x\", data_type: TYPE_FP32, dims: [ 3, -1 ] },\n"
        "        { name: \"ids\" data_type: TYPE_INT64 dims: 4 dims: 5 } ]\n"
        "output { name: \"y\" data_type: TYPE_FP16 dims: [ 10 ] }\n"
        "dynamic_batching {\n"
        "  preferred_batch_size: [ 4, 8 ]\n"
        "  max_queue_delay_microseconds: 250\n"
        "  default_queue_policy { timeout_action: REJECT default_timeout_microseconds: 9000\n"
        "                         max_queue_size: 32 }\n"
        "}\n"
        "instance_group [ { name: \"g\" count: 3 kind: KIND_GPU gpus: [ 1 ] } ]\n"
        "version_policy: { specific: { versions: [ 2 ] } }\n"
        "default_model_filename: \"net.onnx\"\n"
        "parameters { key: \"threads\" value: { string_value: \"2\" } }\n"
        "parameters [ { key: \"precision\" value: { string_value: \"fp16\" } } ]\n");
    cr_expect_str_eq(t->name, "resnet");
    cr_expect_str_eq(t->platform, "onnxruntime_onnx");
    cr_expect_str_eq(t->backend, "onnxruntime");
    cr_expect_eq(t->max_batch_size, 8);
    cr_assert_eq(t->n_inputs, 2);
    cr_expect_str_eq(t->inputs[0].name, "x");
    cr_expect_eq(t->inputs[0].data_type, CFG_TRITON_TYPE_FP32);
    cr_expect_eq(t->inputs[0].n_dims, 2);
    cr_expect_eq(t->inputs[0].dims[0], 3);
    cr_expect_eq(t->inputs[0].dims[1], -1);
    cr_expect_eq(t->inputs[1].data_type, CFG_TRITON_TYPE_INT64);
    cr_expect_eq(t->inputs[1].n_dims, 2);
    cr_expect_eq(t->inputs[1].dims[1], 5);
    cr_assert_eq(t->n_outputs, 1);
    cr_expect_eq(t->outputs[0].data_type, CFG_TRITON_TYPE_FP16);
    cr_expect(t->dynamic_batching);
    cr_expect_eq(t->n_preferred, 2);
    cr_expect_eq(t->preferred[1], 8);
    cr_expect_eq(t->max_queue_delay_us, 250);
    cr_expect(t->has_queue_policy);
    cr_expect_eq(t->default_timeout_us, 9000);
    cr_expect_eq(t->max_queue_size, 32);
    cr_expect_eq(t->n_groups, 1);
    cr_expect_eq(t->count, 3);
    cr_expect_eq(t->kind, CFG_TRITON_KIND_GPU);
    cr_expect_eq(t->n_gpus, 1);
    cr_expect_eq(t->gpus[0], 1);
    cr_expect_eq(t->versions, CFG_TRITON_VERSIONS_SPECIFIC);
    cr_expect_eq(t->n_versions, 1);
    cr_expect_eq(t->specific[0], 2);
    cr_expect_str_eq(t->default_model_filename, "net.onnx");
    cr_assert_eq(t->n_params, 2);
    /* Sorted by key, whatever order the map holds them in. */
    cr_expect_str_eq(t->params[0].key, "precision");
    cr_expect_str_eq(t->params[0].value, "fp16");
    cr_expect_str_eq(t->params[1].key, "threads");
    free(t);
}

Test(triton_parse, an_empty_file_is_every_default)
{
    cfg_triton_t *t = parse_ok("");
    cr_expect_eq(t->max_batch_size, 0);
    cr_expect_eq(t->n_inputs, 0);
    cr_expect(!t->dynamic_batching);
    cr_expect_eq(t->versions, CFG_TRITON_VERSIONS_UNSET);
    free(t);
}

Test(triton_parse, a_field_outside_the_subset_is_named_with_file_line_and_column)
{
    PARSE_FAILS("name: \"m\"\noptimization { graph { level: 1 } }\n", FS_EPARSE,
                "m/config.pbtxt: line 2, column 1", "no field named \"optimization\"",
                "config/README.md");
    PARSE_FAILS("input [ { name: \"x\" optional: true } ]", FS_EPARSE, "\"optional\"");
    PARSE_FAILS("ensemble_scheduling { }", FS_EPARSE, "ensemble_scheduling");
    PARSE_FAILS("output [ { name: \"y\" label_filename: \"l.txt\" } ]", FS_EPARSE,
                "label_filename");
}

Test(triton_parse, bad_text_is_a_parse_error_at_its_place)
{
    PARSE_FAILS("max_batch_size: \"eight\"", FS_EPARSE, "line 1", "max_batch_size");
    PARSE_FAILS("max_batch_size: 8\nmax_batch_size: 9\n", FS_EPARSE, "line 2",
                "specified multiple times");
    PARSE_FAILS("input [ { data_type: TYPE_FLOAT } ]", FS_EPARSE, "TYPE_FLOAT");
    PARSE_FAILS("instance_group [ { kind: KIND_TPU } ]", FS_EPARSE, "KIND_TPU");
    PARSE_FAILS("name: \"m", FS_EPARSE, "line 1");
    PARSE_FAILS("max_batch_size: 99999999999", FS_EPARSE, "max_batch_size");
}

Test(triton_parse, lists_and_texts_longer_than_held_are_refused_naming_the_field)
{
    char text[4096] = "input [";
    for (int i = 0; i < CFG_TRITON_MAX_IO + 1; i++)
        snprintf(text + strlen(text), sizeof text - strlen(text), "%s{ name: \"i%d\" }",
                 i ? "," : "", i);
    strcat(text, "]");
    PARSE_FAILS(text, FS_EINVAL, "input has 65 entries");
    PARSE_FAILS("input [ { name: \"x\" dims: [1,1,1,1,1,1,1,1,1] } ]", FS_EINVAL,
                "input \"x\": dims has 9 entries");
    char longname[400] = "name: \"";
    memset(longname + 7, 'a', 300);
    strcpy(longname + 307, "\"");
    PARSE_FAILS(longname, FS_EINVAL, "name: 300 bytes");
}

Test(triton_parse, load_file_reports_a_missing_file)
{
    cfg_triton_t *t = malloc(sizeof *t);
    bool found = true;
    cr_expect_eq(cfg_triton_load_file("/nonexistent/config.pbtxt", t, &found), 0);
    cr_expect(!found);
    cr_expect_eq(cfg_triton_load_file("/nonexistent/config.pbtxt", t, NULL), FS_ENOENT);
    free(t);
}

Test(triton_parse, dtype_names_and_the_engines_types)
{
    cr_expect_str_eq(cfg_triton_dtype_name(CFG_TRITON_TYPE_BF16), "TYPE_BF16");
    cr_expect_str_eq(cfg_triton_dtype_name(99), "TYPE_INVALID");
    cr_expect_eq(cfg_triton_dtype_to_eng(CFG_TRITON_TYPE_FP32), ENG_DT_FLOAT);
    cr_expect_eq(cfg_triton_dtype_to_eng(CFG_TRITON_TYPE_BOOL), ENG_DT_BOOL);
    cr_expect_eq(cfg_triton_dtype_to_eng(CFG_TRITON_TYPE_STRING), ENG_DT_STRING);
    cr_expect_eq(cfg_triton_dtype_to_eng(CFG_TRITON_TYPE_INVALID), -1);
}

/* ---- applying ---------------------------------------------------------------------- */

Test(triton_apply, max_batch_size_bounds_requests_and_batches_only_with_dynamic_batching)
{
    cfg_model_t m = apply_ok("max_batch_size: 8");
    cr_expect_eq(m.max_request_rows, 8);
    cr_expect_eq(m.batching.max_batch_size, 0, "no dynamic_batching: each request alone");
    m = apply_ok("max_batch_size: 8 dynamic_batching { max_queue_delay_microseconds: 100 }");
    cr_expect_eq(m.max_request_rows, 8);
    cr_expect_eq(m.batching.max_batch_size, 8);
    cr_expect_eq(m.batching.max_queue_delay_ns, 100000);
    cr_expect_eq(m.batching.max_queue, 1024, "the server's bound without a queue policy");
    m = apply_ok("");
    cr_expect_eq(m.max_request_rows, 0);
    cr_expect_eq(m.batching.max_batch_size, 0, "Triton's default max_batch_size is 0");
    cr_expect_eq(m.n_versions, 0);
    cr_expect_eq(m.versions_latest, 0, "0: the newest one");
    cr_expect(!m.versions_all);
    cr_expect_str_eq(m.model_file, "");
    APPLY_FAILS("max_batch_size: -1", FS_EINVAL, "max_batch_size is -1");
    APPLY_FAILS("dynamic_batching { }", FS_EINVAL, "dynamic_batching needs max_batch_size > 0");
}

Test(triton_apply, queue_policy_sets_timeout_and_size)
{
    cfg_model_t m = apply_ok("max_batch_size: 4 dynamic_batching { default_queue_policy { "
                             "default_timeout_microseconds: 2500 max_queue_size: 7 } }");
    cr_expect_eq(m.queue_timeout_ns, 2500000);
    cr_expect_eq(m.batching.max_queue, 7);
    m = apply_ok("max_batch_size: 4 dynamic_batching { default_queue_policy { } }");
    cr_expect_eq(m.batching.max_queue, 0, "0: unbounded, as in Triton");
    APPLY_FAILS("max_batch_size: 4 dynamic_batching { default_queue_policy { timeout_action: DELAY "
                "} }", FS_ENOTSUP, "timeout_action DELAY");
    APPLY_FAILS("max_batch_size: 4 dynamic_batching { default_queue_policy { "
                "allow_timeout_override: true } }", FS_ENOTSUP, "allow_timeout_override");
    APPLY_FAILS("max_batch_size: 4 dynamic_batching { default_queue_policy { max_queue_size: "
                "2000000 } }", FS_EINVAL, "max_queue_size 2000000");
    m = apply_ok("max_batch_size: 8 dynamic_batching { preferred_batch_size: [ 8, 2, 4 ] }");
    cr_expect_eq(m.n_preferred, 3);
    cr_expect_eq(m.preferred[0], 2, "kept ascending");
    cr_expect_eq(m.preferred[2], 8);
    APPLY_FAILS("max_batch_size: 4 dynamic_batching { preferred_batch_size: [ 8 ] }", FS_EINVAL,
                "preferred_batch_size 8 is outside 1..max_batch_size (4)");
    APPLY_FAILS("max_batch_size: 4 dynamic_batching { preferred_batch_size: [ 0 ] }", FS_EINVAL,
                "preferred_batch_size 0");
    APPLY_FAILS("max_batch_size: 4 dynamic_batching { preferred_batch_size: [ 2, 2 ] }", FS_EINVAL,
                "lists 2 twice");
}

Test(triton_apply, name_platform_and_backend)
{
    apply_ok("name: \"m\" platform: \"onnxruntime_onnx\"");
    apply_ok("backend: \"onnxruntime\"");
    apply_ok("backend: \"flatserve\"");
    APPLY_FAILS("name: \"other\"", FS_EINVAL, "name is 'other'", "directory is 'm'");
    APPLY_FAILS("platform: \"tensorrt_plan\"", FS_ENOTSUP, "platform 'tensorrt_plan'");
    APPLY_FAILS("backend: \"python\"", FS_ENOTSUP, "backend 'python'");
}

Test(triton_apply, inputs_and_outputs_are_checked_on_their_own)
{
    apply_ok("input [ { name: \"x\" data_type: TYPE_FP32 dims: [ -1, 4 ] } ]");
    APPLY_FAILS("input [ { data_type: TYPE_FP32 } ]", FS_EINVAL, "input[0] has no name");
    APPLY_FAILS("input [ { name: \"x\" data_type: TYPE_FP32 }, { name: \"x\" data_type: TYPE_FP32 "
                "} ]", FS_EINVAL, "input 'x' is listed twice");
    apply_ok("output [ { name: \"y\" data_type: TYPE_STRING dims: [ -1 ] } ]");
    APPLY_FAILS("input [ { name: \"x\" } ]", FS_EINVAL, "TYPE_INVALID");
    APPLY_FAILS("input [ { name: \"x\" data_type: TYPE_FP32 dims: [ 0 ] } ]", FS_EINVAL,
                "dims[0] is 0");
    APPLY_FAILS("input [ { name: \"x\" data_type: TYPE_FP32 dims: [ -2 ] } ]", FS_EINVAL,
                "dims[0] is -2");
    APPLY_FAILS("input [ { name: \"x\" data_type: TYPE_FP32 dims: [ 4 ] reshape { shape: [ 2, 2 ] "
                "} } ]", FS_ENOTSUP, "input 'x': reshape is not supported");
    APPLY_FAILS("output [ { name: \"y\" data_type: TYPE_FP32 reshape { } } ]", FS_ENOTSUP,
                "output 'y': reshape");
    APPLY_FAILS("input [ { name: \"x\" data_type: TYPE_FP32 format: FORMAT_NCHW } ]", FS_ENOTSUP,
                "format FORMAT_NCHW");
}

Test(triton_apply, instance_group_kind_count_and_gpus)
{
    cfg_model_t m = apply_ok("instance_group [ { count: 3 kind: KIND_CPU } ]");
    cr_expect_eq(m.batching.instances, 3);
    cr_expect(m.device.set);
    cr_expect_eq(m.device.dev.kind, ENG_DEVICE_CPU);
    m = apply_ok("instance_group [ { kind: KIND_AUTO } ]");
    cr_expect_eq(m.batching.instances, 1, "count 0 means 1");
    cr_expect(!m.device.set, "auto: the server's device");
    m = apply_ok_on("instance_group [ { kind: KIND_GPU } ]", &gpu_dev);
    cr_expect(!m.device.set, "no gpus: every GPU the server runs on");
    m = apply_ok_on("instance_group [ { kind: KIND_GPU gpus: [ 0 ] } ]", &gpu_dev);
    cr_expect(m.device.set);
    cr_expect_eq(m.device.dev.index, 0);
    cr_expect_eq(m.device.n_more, 0);
    m = apply_ok_on("instance_group [ { count: 2 kind: KIND_GPU gpus: [ 1, 0 ] } ]", &gpu_dev);
    cr_expect_eq(m.batching.instances, 2, "count is per GPU");
    cr_expect_eq(m.device.dev.index, 1);
    cr_expect_eq(m.device.n_more, 1);
    cr_expect_eq(m.device.more[0].kind, ENG_DEVICE_CUDA);
    cr_expect_eq(m.device.more[0].index, 0);
    m = apply_ok("instance_group [ { kind: KIND_AUTO gpus: [ 0 ] } ]");
    cr_expect(!m.device.set, "auto on a CPU server: the CPU");
    APPLY_FAILS("instance_group [ { kind: KIND_GPU } ]", FS_ENOTSUP, "the server runs on the CPU");
    APPLY_FAILS_ON(&gpu_dev, "instance_group [ { kind: KIND_GPU gpus: [ 0, 1, 0 ] } ]", FS_EINVAL,
                   "lists GPU 0 twice");
    APPLY_FAILS_ON(&gpu_dev, "instance_group [ { kind: KIND_GPU gpus: [ 0, 1, 2, 3, 4, 5, 6, 7, 8 ] } ]",
                   FS_ENOTSUP, "at most 8");
    APPLY_FAILS("instance_group [ { kind: KIND_CPU gpus: [ 0 ] } ]", FS_EINVAL, "KIND_CPU with gpus");
    APPLY_FAILS("instance_group [ { kind: KIND_MODEL } ]", FS_ENOTSUP, "KIND_MODEL");
    APPLY_FAILS("instance_group [ { count: -1 } ]", FS_EINVAL, "count is -1");
    APPLY_FAILS("instance_group [ { count: 65 } ]", FS_EINVAL, "count is 65");
    APPLY_FAILS("instance_group [ { kind: KIND_CPU }, { kind: KIND_CPU } ]", FS_ENOTSUP,
                "2 groups");
    APPLY_FAILS_ON(&gpu_dev, "instance_group [ { kind: KIND_GPU gpus: [ -3 ] } ]", FS_EINVAL,
                   "gpus[0] is -3");
}

Test(triton_apply, version_policy)
{
    cfg_model_t m = apply_ok("version_policy: { latest: { num_versions: 1 } }");
    cr_expect_eq(m.versions_latest, 1);
    m = apply_ok("version_policy: { latest: { num_versions: 3 } }");
    cr_expect_eq(m.versions_latest, 3);
    m = apply_ok("version_policy: { all: { } }");
    cr_expect(m.versions_all);
    m = apply_ok("version_policy: { specific: { versions: [ 7, 2 ] } }");
    cr_expect_eq(m.n_versions, 2);
    cr_expect_eq(m.versions[0], 7);
    cr_expect_eq(m.versions[1], 2);
    APPLY_FAILS("version_policy: { latest: { } }", FS_EINVAL, "num_versions is 0");
    APPLY_FAILS("version_policy: { latest: { num_versions: 17 } }", FS_EINVAL,
                "num_versions is 17 (expected 1..16)");
    APPLY_FAILS("version_policy: { specific: { } }", FS_EINVAL, "lists no version");
    APPLY_FAILS("version_policy: { specific: { versions: [ 1, 1 ] } }", FS_EINVAL,
                "lists version 1 twice");
    APPLY_FAILS("version_policy: { specific: { versions: [ -1 ] } }", FS_EINVAL,
                "versions[0] is -1");
}

Test(triton_apply, default_model_filename)
{
    cfg_model_t m = apply_ok("default_model_filename: \"model_fp16.onnx\"");
    cr_expect_str_eq(m.model_file, "model_fp16.onnx");
    APPLY_FAILS("default_model_filename: \"../x.onnx\"", FS_EINVAL, "default_model_filename");
    APPLY_FAILS("default_model_filename: \"..\"", FS_EINVAL, "one file name");
}

Test(triton_apply, parameters_set_flatserves_engine_keys_and_refuse_others)
{
    cfg_model_t m = apply_ok(
        "parameters { key: \"precision\" value: { string_value: \"bf16\" } }\n"
        "parameters { key: \"threads\" value: { string_value: \"3\" } }\n"
        "parameters { key: \"max_plans\" value: { string_value: \"5\" } }\n"
        "parameters { key: \"cuda_graphs\" value: { string_value: \"false\" } }\n");
    cr_expect_eq(m.engine.precision, ENG_PREC_BF16);
    cr_expect_eq(m.engine.threads, 3);
    cr_expect_eq(m.engine.max_plans, 5);
    cr_expect(!m.engine.cuda_graphs);
    APPLY_FAILS("parameters { key: \"gpu_mem_limit\" value: { string_value: \"1\" } }", FS_EINVAL,
                "unknown parameter \"gpu_mem_limit\"", "precision, threads, max_plans, cuda_graphs");
    APPLY_FAILS("parameters { key: \"threads\" value: { string_value: \"many\" } }", FS_EINVAL,
                "parameters.threads", "many");
    APPLY_FAILS("parameters { key: \"cuda_graphs\" value: { string_value: \"yes\" } }", FS_EINVAL,
                "parameters.cuda_graphs");
    APPLY_FAILS("parameters { key: \"precision\" value: { string_value: \"fp8\" } }", FS_EINVAL,
                "parameters.precision");
}

/* ---- sequence_batching ------------------------------------------------------------ */

#define SEQ_IO "input [ { name: \"INPUT\" data_type: TYPE_INT32 dims: [ 1 ] } ]\n" \
               "output [ { name: \"OUTPUT\" data_type: TYPE_INT32 dims: [ 1 ] } ]\n"
#define SEQ_CTL(name, kind, body) \
    "{ name: \"" name "\" control [ { kind: " kind " " body " } ] }"

Test(triton_sequence, reads_controls_states_and_the_oldest_strategy)
{
    cfg_model_t m = apply_ok(
        "max_batch_size: 8\n" SEQ_IO
        "sequence_batching {\n"
        "  max_sequence_idle_microseconds: 5000000\n"
        "  oldest { max_candidate_sequences: 16 preferred_batch_size: [ 4 ]\n"
        "           max_queue_delay_microseconds: 100 }\n"
        "  control_input [\n"
        "    " SEQ_CTL("START", "CONTROL_SEQUENCE_START", "int32_false_true: [ 0, 1 ]") ",\n"
        "    " SEQ_CTL("END", "CONTROL_SEQUENCE_END", "fp32_false_true: [ 0, 2.5 ]") ",\n"
        "    " SEQ_CTL("READY", "CONTROL_SEQUENCE_READY", "bool_false_true: [ false, true ]") ",\n"
        "    " SEQ_CTL("CORRID", "CONTROL_SEQUENCE_CORRID", "data_type: TYPE_UINT32") "\n"
        "  ]\n"
        "  state [ { input_name: \"S_IN\" output_name: \"S_OUT\" data_type: TYPE_FP32\n"
        "            dims: [ 2, 3 ] } ]\n"
        "}\n");
    const eng_seq_options_t *o = &m.sequence;
    cr_assert(o->enabled);
    cr_expect_eq(o->idle_ns, 5000000000ull);
    cr_expect_eq(o->max_sequences, 16);
    cr_assert_eq(o->n_controls, 4);
    cr_expect_str_eq(o->controls[0].input, "START");
    cr_expect_eq(o->controls[0].kind, ENG_SEQ_START);
    cr_expect_eq(o->controls[0].dtype, ENG_DT_INT32);
    cr_expect_eq(o->controls[0].false_true[1], 1.0);
    cr_expect_eq(o->controls[1].kind, ENG_SEQ_END);
    cr_expect_eq(o->controls[1].dtype, ENG_DT_FLOAT);
    cr_expect_eq(o->controls[1].false_true[1], 2.5);
    cr_expect_eq(o->controls[2].dtype, ENG_DT_BOOL);
    cr_expect_eq(o->controls[3].kind, ENG_SEQ_CORRID);
    cr_expect_eq(o->controls[3].dtype, ENG_DT_UINT32);
    cr_assert_eq(o->n_states, 1);
    cr_expect_str_eq(o->states[0].input, "S_IN");
    cr_expect_str_eq(o->states[0].output, "S_OUT");
    cr_expect_eq(o->states[0].dtype, ENG_DT_FLOAT);
    cr_expect_eq(o->states[0].rank, 2);
    cr_expect_eq(o->states[0].dims[1], 3);
    /* Sequences batch together under the oldest strategy's settings. */
    cr_expect_eq(m.batching.max_batch_size, 8);
    cr_expect_eq(m.batching.max_queue_delay_ns, 100000);
    cr_expect_eq(m.n_preferred, 1);
    cr_expect_eq(m.preferred[0], 4);
}

Test(triton_sequence, direct_is_the_default_and_no_message_means_no_sequences)
{
    cfg_model_t m = apply_ok("max_batch_size: 4\n" SEQ_IO "sequence_batching { }\n");
    cr_expect(m.sequence.enabled);
    cr_expect_eq(m.sequence.idle_ns, 0, "0: the engine's 1 s default");
    cr_expect_eq(m.sequence.max_sequences, 0);
    cr_expect_eq(m.batching.max_batch_size, 4);
    cr_expect_eq(m.batching.max_queue_delay_ns, 0);
    cfg_model_t n = apply_ok("max_batch_size: 4\n" SEQ_IO);
    cr_expect(!n.sequence.enabled);
}

Test(triton_sequence, refuses_what_it_cannot_honour)
{
    PARSE_FAILS("sequence_batching { state [ { input_name: \"a\" output_name: \"b\" "
                "data_type: TYPE_FP32 dims: [ 1 ] initial_state [ { zero_data: true } ] } ] }",
                FS_EPARSE, "initial_state");
    PARSE_FAILS("sequence_batching { iterative_sequence: true }", FS_EPARSE,
                "iterative_sequence");
    PARSE_FAILS("dynamic_batching { }\nsequence_batching { }", FS_EPARSE, "sequence_batching");
    APPLY_FAILS("max_batch_size: 1\nsequence_batching { direct { minimum_slot_utilization: 0.5 } }",
                FS_ENOTSUP, "minimum_slot_utilization");
    APPLY_FAILS("sequence_batching { control_input [ " SEQ_CTL("C", "CONTROL_SEQUENCE_CORRID",
                "data_type: TYPE_STRING") " ] }", FS_ENOTSUP, "'C'", "TYPE_STRING");
    APPLY_FAILS("sequence_batching { control_input [ " SEQ_CTL("C", "CONTROL_SEQUENCE_CORRID",
                "data_type: TYPE_FP32") " ] }", FS_EINVAL, "'C'", "TYPE_FP32");
    APPLY_FAILS("sequence_batching { control_input [ " SEQ_CTL("S", "CONTROL_SEQUENCE_START",
                "int32_false_true: [ 0, 1 ] fp32_false_true: [ 0, 1 ]") " ] }", FS_EINVAL,
                "'S'", "exactly one of");
    APPLY_FAILS("sequence_batching { control_input [ " SEQ_CTL("S", "CONTROL_SEQUENCE_START",
                "") " ] }", FS_EINVAL, "'S'", "exactly one of");
    APPLY_FAILS("sequence_batching { control_input [ " SEQ_CTL("S", "CONTROL_SEQUENCE_START",
                "int32_false_true: [ 1 ]") " ] }", FS_EINVAL, "'S'", "1 false/true values");
    APPLY_FAILS("sequence_batching { control_input [ " SEQ_CTL("S", "CONTROL_SEQUENCE_START",
                "int32_false_true: [ 0, 1 ]") ", " SEQ_CTL("T", "CONTROL_SEQUENCE_START",
                "int32_false_true: [ 0, 1 ]") " ] }", FS_EINVAL, "CONTROL_SEQUENCE_START",
                "twice");
    APPLY_FAILS("sequence_batching { control_input [ { name: \"S\" control [ "
                "{ kind: CONTROL_SEQUENCE_START int32_false_true: [ 0, 1 ] }, "
                "{ kind: CONTROL_SEQUENCE_END int32_false_true: [ 0, 1 ] } ] } ] }",
                FS_ENOTSUP, "'S'", "2 controls");
    APPLY_FAILS("sequence_batching { state [ { input_name: \"a\" output_name: \"b\" "
                "data_type: TYPE_FP32 dims: [ -1 ] } ] }", FS_ENOTSUP, "'a'", "dims[0]");
    APPLY_FAILS("sequence_batching { state [ { input_name: \"a\" data_type: TYPE_FP32 } ] }",
                FS_EINVAL, "output_name");
    APPLY_FAILS("max_batch_size: 2\nsequence_batching { oldest { preferred_batch_size: [ 3 ] } }",
                FS_EINVAL, "sequence_batching.oldest.preferred_batch_size 3");
}
