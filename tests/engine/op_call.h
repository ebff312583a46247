/* op_call.h -- one node built from an array of inputs and attributes, run
 * the way the planner runs it: check and infer (which must write no output
 * data), then the CPU kernel with its outputs and scratch allocated. Shared
 * by the element-wise and the linalg/nn suites. Header-only. */
#ifndef FS_TESTS_ENGINE_OP_CALL_H
#define FS_TESTS_ENGINE_OP_CALL_H

#include <criterion/criterion.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "common/error.h"
#include "engine/backend.h"
#include "engine/op.h"

#define CALL_MAX_IO 8

static inline eng_tensor_t tensor(eng_dtype_t dt, const void *data, int rank,
                                  const int64_t *dims)
{
    eng_tensor_t t = {.dtype = dt, .data = (void *)data};
    t.shape.rank = rank;
    for (int i = 0; i < rank; i++)
        t.shape.dims[i] = dims[i];
    return t;
}

static inline eng_attr_t attr_i(const char *name, int64_t v)
{
    return (eng_attr_t){.name = name, .type = ENG_ATTR_INT, .i = v};
}

static inline eng_attr_t attr_f(const char *name, float v)
{
    return (eng_attr_t){.name = name, .type = ENG_ATTR_FLOAT, .f = v};
}

static inline eng_attr_t attr_s(const char *name, const char *v)
{
    return (eng_attr_t){.name = name, .type = ENG_ATTR_STRING, .s = v, .s_len = strlen(v)};
}

static inline eng_attr_t attr_ints(const char *name, const int64_t *v, size_t n)
{
    return (eng_attr_t){.name = name, .type = ENG_ATTR_INTS, .ints = v, .n = n};
}

typedef struct call {
    eng_node_t node;
    int in_idx[CALL_MAX_IO], out_idx[CALL_MAX_IO];
    const eng_tensor_t *inputs[CALL_MAX_IO];
    eng_tensor_t outs[CALL_MAX_IO];
    eng_tensor_t *outputs[CALL_MAX_IO];
    eng_op_ctx_t ctx;
    bool owned[CALL_MAX_IO];
} call_t;

/* Builds the node (in[i] NULL: absent input) at `opset` and runs check and
 * infer; asserts infer wrote no output data. */
static inline int call_infer_at(call_t *c, const char *op, int opset, const eng_attr_t *attrs,
                                int n_attrs, const eng_tensor_t *const *in, int n_in, int n_out)
{
    memset(c, 0, sizeof *c);
    for (int i = 0; i < n_in; i++) {
        c->in_idx[i] = in[i] ? i : -1;
        c->inputs[i] = in[i];
    }
    for (int i = 0; i < n_out; i++) {
        c->out_idx[i] = CALL_MAX_IO + i;
        c->outputs[i] = &c->outs[i];
    }
    const eng_op_def_t *def = eng_op_find(op);
    cr_assert(def != NULL, "no definition for %s", op);
    c->node = (eng_node_t){.name = "n0", .op_type = op, .domain = "", .n_inputs = n_in,
                           .inputs = c->in_idx, .n_outputs = n_out, .outputs = c->out_idx,
                           .n_attrs = n_attrs, .attrs = attrs, .op = def};
    c->ctx = (eng_op_ctx_t){.node = &c->node, .opset = opset, .n_inputs = n_in,
                            .inputs = c->inputs, .n_outputs = n_out, .outputs = c->outputs,
                            .n_threads = 1};
    fs_err_clear();
    int rc = def->check ? def->check(&c->node, opset) : 0;
    if (rc)
        return rc;
    rc = def->infer(&c->ctx);
    for (int i = 0; rc == 0 && i < n_out; i++)
        cr_assert_null(c->outs[i].data, "%s: infer wrote output data", op);
    return rc;
}

/* Allocates the outputs that have no data yet and the scratch the kernel
 * asks for, and runs the CPU kernel. */
static inline int call_run(call_t *c)
{
    const eng_kernel_t *k = eng_backend_kernel_find(eng_backend_get(ENG_DEVICE_CPU), c->node.op_type);
    cr_assert(k != NULL, "no CPU kernel for %s", c->node.op_type);
    for (int i = 0; i < c->ctx.n_outputs; i++)
        if (!c->outs[i].data) {
            size_t bytes = eng_tensor_bytes(&c->outs[i]);
            c->outs[i].data = calloc(1, bytes ? bytes : 1);
            c->owned[i] = true;
        }
    c->ctx.scratch_bytes = eng_op_scratch_bytes(k, &c->ctx);
    c->ctx.scratch = c->ctx.scratch_bytes ? malloc(c->ctx.scratch_bytes) : NULL;
    fs_err_clear();
    int rc = k->run(&c->ctx);
    free(c->ctx.scratch);
    c->ctx.scratch = NULL;
    return rc;
}

static inline void call_free(call_t *c)
{
    for (int i = 0; i < CALL_MAX_IO; i++)
        if (c->owned[i])
            free(c->outs[i].data);
}

#endif
