/* control.c -- definitions of the control-flow ops, If, Loop and Scan: the
 * load-time check of each node against its subgraphs' signatures, and an
 * infer that answers FS_EDYNAMIC (their output shapes are known only once
 * a subgraph has run). The dynamic executor runs them
 * (engine/exec_control.c says how); no device has a kernel for them.
 *
 * What is checked at load, so that a run never meets it: the subgraphs'
 * input and output counts against the node's (If: both branches take no
 * input and give one output per node output; Loop: the body takes the
 * iteration number, the condition and the N carried values, and gives the
 * condition, the N carried values and the K scan outputs; Scan: the body
 * takes the N states and one slice of each of the M scan inputs, and
 * gives the N states and the K scan outputs), and Scan's list attributes
 * (one entry per scan input or output, directions 0 or 1). Values (If's
 * condition, Loop's trip count, axes against ranks, lengths along the scan
 * axes) are checked when the node runs. Scan-8 (opset 8: a batch axis and
 * sequence_lens) is refused: only Scan from opset 9 runs. */
#include <stdio.h>
#include <string.h>

#include "common/error.h"
#include "engine/op.h"

/* The node's inputs within its schema: its implicit ones follow them. */
static int explicit_inputs(const eng_node_t *n)
{
    return n->n_inputs - n->n_implicit;
}

/* FS_EINVAL naming `attr` of node n unless its subgraph has n_in inputs
 * and n_out outputs (-1: any). */
static int check_signature(const eng_node_t *n, const char *attr, int64_t n_in, int64_t n_out,
                           const char *why)
{
    const eng_graph_t *g = eng_attr_graph(n, attr);
    if (!g)
        return fs_err(FS_EINVAL, "node '%s' (%s): attribute '%s' is required", n->name,
                      n->op_type, attr);
    if ((n_in >= 0 && (int64_t)g->n_inputs != n_in) ||
        (n_out >= 0 && (int64_t)g->n_outputs != n_out))
        return fs_err(FS_EINVAL, "node '%s' (%s): %s has %zu inputs and %zu outputs; %s", n->name,
                      n->op_type, attr, g->n_inputs, g->n_outputs, why);
    return 0;
}

static int if_check(const eng_node_t *n, int opset)
{
    char why[160];
    snprintf(why, sizeof why, "a branch takes no input and gives one output per output of the "
             "node (%d)", n->n_outputs);
    int rc = check_signature(n, "then_branch", 0, n->n_outputs, why);
    return rc ? rc : check_signature(n, "else_branch", 0, n->n_outputs, why);
}

static int loop_check(const eng_node_t *n, int opset)
{
    int carried = explicit_inputs(n) - 2;
    if (n->n_outputs < carried)
        return fs_err(FS_EINVAL, "node '%s' (Loop): %d loop-carried inputs but only %d outputs "
                      "(the final carried values come first)", n->name, carried, n->n_outputs);
    char why[320];
    snprintf(why, sizeof why, "with %d carried values and %d scan outputs the body takes %d "
             "inputs (iteration number, condition, carried values) and gives %d outputs "
             "(condition, carried values, scan outputs)", carried, n->n_outputs - carried,
             carried + 2, n->n_outputs + 1);
    return check_signature(n, "body", carried + 2, n->n_outputs + 1, why);
}

/* FS_EINVAL unless list attribute `name`, when present, has `count`
 * entries, each in [0, 1] when `binary`. */
static int check_list(const eng_node_t *n, const char *name, int64_t count, bool binary)
{
    size_t len;
    const int64_t *v = eng_attr_ints(n, name, &len);
    if (!v)
        return 0;
    if ((int64_t)len != count)
        return fs_err(FS_EINVAL, "node '%s' (Scan): %s has %zu entries, not one per %s (%lld)",
                      n->name, name, len, strstr(name, "input") ? "scan input" : "scan output",
                      (long long)count);
    for (size_t i = 0; binary && i < len; i++)
        if (v[i] != 0 && v[i] != 1)
            return fs_err(FS_EINVAL, "node '%s' (Scan): %s[%zu] is %lld; a direction is 0 "
                          "(forward) or 1 (reverse)", n->name, name, i, (long long)v[i]);
    return 0;
}

static int scan_check(const eng_node_t *n, int opset)
{
    if (opset < 9)
        return fs_err(FS_ENOTSUP, "node '%s' (Scan): Scan-8 (a batch axis and sequence_lens) is "
                      "not supported, only Scan from opset 9 on is", n->name);
    int64_t m = eng_attr_i(n, "num_scan_inputs", 0), states = explicit_inputs(n) - m;
    if (m < 1 || states < 0)
        return fs_err(FS_EINVAL, "node '%s' (Scan): num_scan_inputs is %lld; it must be 1 to the "
                      "number of inputs (%d)", n->name, (long long)m, explicit_inputs(n));
    if (n->n_outputs < states)
        return fs_err(FS_EINVAL, "node '%s' (Scan): %lld state inputs but only %d outputs (the "
                      "final states come first)", n->name, (long long)states, n->n_outputs);
    int64_t k = n->n_outputs - states;
    char why[320];
    snprintf(why, sizeof why, "with %lld states, %lld scan inputs and %lld scan outputs the body "
             "takes %lld inputs and gives %d outputs", (long long)states, (long long)m,
             (long long)k, (long long)(states + m), n->n_outputs);
    int rc = check_signature(n, "body", states + m, n->n_outputs, why);
    if (rc == 0)
        rc = check_list(n, "scan_input_axes", m, false);
    if (rc == 0)
        rc = check_list(n, "scan_input_directions", m, true);
    if (rc == 0)
        rc = check_list(n, "scan_output_axes", k, false);
    if (rc == 0)
        rc = check_list(n, "scan_output_directions", k, true);
    return rc;
}

static int control_infer(eng_op_ctx_t *c)
{
    return eng_op_err(c, FS_EDYNAMIC, "runs a subgraph: its output shapes are known only when "
                      "it runs");
}

ENG_OP_DEF(If, if_check, control_infer, -1);
ENG_OP_DEF(Loop, loop_check, control_infer, -1);
ENG_OP_DEF(Scan, scan_check, control_infer, -1);
