/* op_case.h -- building one node and running it the way the planner
 * does (check, infer, outputs and scratch allocated, the CPU kernel), with
 * the result checks the op-family suites share. Header-only: each suite
 * includes it. */
#ifndef FS_TESTS_ENGINE_OP_CASE_H
#define FS_TESTS_ENGINE_OP_CASE_H

#include <criterion/criterion.h>
#include <math.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "common/error.h"
#include "engine/backend.h"
#include "engine/op.h"

#define N_OF(a) (sizeof(a) / sizeof((a)[0]))
#define MAX_IO 10 /* QLinearConv has 9 inputs */

/* --- building nodes and tensors ----------------------------------------------------------- */

static inline eng_shape_t shp(int rank, ...)
{
    eng_shape_t s = {.rank = rank};
    va_list ap;
    va_start(ap, rank);
    for (int d = 0; d < rank; d++)
        s.dims[d] = va_arg(ap, int);
    va_end(ap);
    return s;
}

static inline eng_tensor_t ten(eng_dtype_t dt, eng_shape_t s, const void *data)
{
    return (eng_tensor_t){.dtype = dt, .shape = s, .data = (void *)data};
}

static inline eng_attr_t a_int(const char *name, int64_t v)
{
    return (eng_attr_t){.name = name, .type = ENG_ATTR_INT, .i = v};
}

static inline eng_attr_t a_ints(const char *name, const int64_t *v, size_t n)
{
    return (eng_attr_t){.name = name, .type = ENG_ATTR_INTS, .ints = v, .n = n};
}

static inline eng_attr_t a_float(const char *name, float v)
{
    return (eng_attr_t){.name = name, .type = ENG_ATTR_FLOAT, .f = v};
}

static inline eng_attr_t a_floats(const char *name, const float *v, size_t n)
{
    return (eng_attr_t){.name = name, .type = ENG_ATTR_FLOATS, .floats = v, .n = n};
}

static inline eng_attr_t a_tensor(const char *name, eng_tensor_t t)
{
    return (eng_attr_t){.name = name, .type = ENG_ATTR_TENSOR, .t = t};
}

static inline eng_attr_t a_str(const char *name, const char *s)
{
    return (eng_attr_t){.name = name, .type = ENG_ATTR_STRING, .s = s, .s_len = strlen(s)};
}

/* One node with its inputs and outputs, run the way the planner runs it. */
typedef struct op_case {
    eng_node_t node;
    eng_attr_t attrs[MAX_IO];
    const eng_tensor_t *in[MAX_IO];
    eng_tensor_t out_v[MAX_IO];
    eng_tensor_t *out[MAX_IO];
    eng_op_ctx_t ctx;
    const eng_op_def_t *def;
    const eng_kernel_t *kernel;
} op_case_t;

/* A case for op at opset with n_out outputs; add inputs with case_in
 * (NULL: an absent optional input) and attributes with case_attr. */
static inline op_case_t *case_new(const char *op, int opset, int n_out)
{
    op_case_t *c = calloc(1, sizeof *c);
    cr_assert(c);
    c->def = eng_op_find(op);
    c->kernel = eng_backend_kernel_find(eng_backend_get(ENG_DEVICE_CPU), op);
    cr_assert(c->def && c->kernel, "%s is not registered", op);
    c->node = (eng_node_t){.name = "n0", .op_type = op, .domain = "", .attrs = c->attrs,
                           .n_outputs = n_out, .op = c->def};
    for (int o = 0; o < n_out; o++)
        c->out[o] = &c->out_v[o];
    c->ctx = (eng_op_ctx_t){.node = &c->node, .opset = opset, .inputs = c->in,
                            .n_outputs = n_out, .outputs = c->out, .n_threads = 1};
    return c;
}

static inline void case_in(op_case_t *c, const eng_tensor_t *t)
{
    cr_assert_lt(c->ctx.n_inputs, MAX_IO, "more than %d inputs", MAX_IO);
    c->in[c->ctx.n_inputs++] = t;
    c->node.n_inputs = c->ctx.n_inputs;
}

static inline void case_attr(op_case_t *c, eng_attr_t a)
{
    c->attrs[c->node.n_attrs++] = a;
}

/* The load-time check, then infer. */
static inline int case_infer(op_case_t *c)
{
    fs_err_clear();
    int rc = c->def->check ? c->def->check(&c->node, c->ctx.opset) : 0;
    return rc != 0 ? rc : c->def->infer(&c->ctx);
}

/* Infers, allocates the outputs and the scratch the kernel asks for, and
 * runs the kernel; asserts success. */
static inline void case_run(op_case_t *c)
{
    int rc = case_infer(c);
    cr_assert_eq(rc, 0, "%s infer: %s", c->node.op_type, fs_errmsg());
    for (int o = 0; o < c->ctx.n_outputs; o++) {
        if (!c->out[o])
            continue;
        size_t bytes = eng_tensor_bytes(c->out[o]);
        c->out[o]->data = calloc(1, bytes ? bytes : 1);
        cr_assert(c->out[o]->data);
    }
    c->ctx.scratch_bytes = eng_op_scratch_bytes(c->kernel, &c->ctx);
    c->ctx.scratch = c->ctx.scratch_bytes ? malloc(c->ctx.scratch_bytes) : NULL;
    rc = c->kernel->run(&c->ctx);
    cr_assert_eq(rc, 0, "%s run: %s", c->node.op_type, fs_errmsg());
}

static inline void case_free(op_case_t *c)
{
    for (int o = 0; o < c->ctx.n_outputs; o++)
        if (c->out[o])
            free(c->out[o]->data);
    free(c->ctx.scratch);
    free(c);
}

/* --- checking results ------------------------------------------------------------------------ */

static inline void expect_shape(const eng_tensor_t *t, eng_shape_t want)
{
    char b1[200], b2[200];
    cr_expect(eng_shape_equal(&t->shape, &want), "shape %s, want %s",
              eng_shape_format(&t->shape, b1, sizeof b1), eng_shape_format(&want, b2, sizeof b2));
}

/* Float results exactly equal (what the kernels copy or compute exactly). */
static inline void expect_f32(const eng_tensor_t *t, const float *want, int64_t n)
{
    cr_assert_eq(t->dtype, ENG_DT_FLOAT);
    cr_assert_eq(eng_shape_numel(&t->shape), n, "numel %lld, want %lld",
                 (long long)eng_shape_numel(&t->shape), (long long)n);
    for (int64_t i = 0; i < n; i++)
        cr_expect_eq(((const float *)t->data)[i], want[i], "element %lld: %g, want %g",
                     (long long)i, ((const float *)t->data)[i], want[i]);
}

/* Float results within 1e-5 relative, NaN matching NaN (arithmetic). */
static inline void expect_f32_near(const eng_tensor_t *t, const float *want, int64_t n)
{
    cr_assert_eq(t->dtype, ENG_DT_FLOAT);
    cr_assert_eq(eng_shape_numel(&t->shape), n, "numel %lld, want %lld",
                 (long long)eng_shape_numel(&t->shape), (long long)n);
    for (int64_t i = 0; i < n; i++) {
        float got = ((const float *)t->data)[i];
        bool same = got == want[i] || (isnan(got) && isnan(want[i])) ||
                    fabsf(got - want[i]) <= 1e-5f * fmaxf(1.0f, fabsf(want[i]));
        cr_expect(same, "element %lld: %.7g, want %.7g", (long long)i, got, want[i]);
    }
}

static inline void expect_i64(const eng_tensor_t *t, const int64_t *want, int64_t n)
{
    cr_assert_eq(t->dtype, ENG_DT_INT64);
    cr_assert_eq(eng_shape_numel(&t->shape), n, "numel %lld, want %lld",
                 (long long)eng_shape_numel(&t->shape), (long long)n);
    for (int64_t i = 0; i < n; i++)
        cr_expect_eq(((const int64_t *)t->data)[i], want[i], "element %lld: %lld, want %lld",
                     (long long)i, (long long)((const int64_t *)t->data)[i], (long long)want[i]);
}

static inline void expect_i32(const eng_tensor_t *t, const int32_t *want, int64_t n)
{
    cr_assert_eq(t->dtype, ENG_DT_INT32);
    cr_assert_eq(eng_shape_numel(&t->shape), n);
    for (int64_t i = 0; i < n; i++)
        cr_expect_eq(((const int32_t *)t->data)[i], want[i], "element %lld: %d, want %d",
                     (long long)i, ((const int32_t *)t->data)[i], want[i]);
}

/* rc is `want` and the message names the node and contains `part`. */
static inline void expect_err(int rc, int want, const char *part)
{
    cr_expect_eq(rc, want, "rc %s, want %s (%s)", fs_errname(rc), fs_errname(want), fs_errmsg());
    cr_expect(strstr(fs_errmsg(), "n0") != NULL, "message does not name the node: %s",
              fs_errmsg());
    if (part)
        cr_expect(strstr(fs_errmsg(), part) != NULL, "message lacks \"%s\": %s", part,
                  fs_errmsg());
}

#endif
