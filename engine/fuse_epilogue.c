/* fuse_epilogue.c -- load-time fusion of a GEMM's bias and activation into
 * the GEMM node: MatMul(X, W) + b, then Relu or Gelu, becomes one MatMul
 * that a GPU runs as one cuBLASLt call with a bias/activation epilogue
 * (engine/cuda/gemm.cu) instead of three passes over the product.
 *
 * The pattern. A live default-domain MatMul whose B is a rank-2 constant
 * (a linear layer's weight, [K, N], or [N, K] under the node's trans_b), or
 * a Gemm; then, optionally, an Add of its output and a constant bias of
 * the same dtype holding N values along the last axis ([N], or
 * [1, ..., 1, N] with no more dims than the product is known to have, so
 * the broadcast leaves the product's shape); then, optionally, a Relu or a
 * Gelu (either approximation: eng_fuse_gelu has already turned exported
 * GELU chains into Gelu nodes). At least one of the two follows. Each
 * intermediate must be read by the next node alone (among the nodes not
 * done: a fused GELU chain's dead nodes still read its x) and be no graph
 * output; a Gemm takes the bias only
 * when it has no C of its own. Either order of the Add's operands.
 *
 * The rewrite. A MatMul gets the bias as a third input with the node's
 * `bias` set (graph.h: outside MatMul's ONNX schema, as implicit inputs
 * are); a Gemm gets it as its C with beta 1 (alpha * A'B' + b is what Gemm
 * then Add computed) and `bias` set, which tells its kernels to add C to
 * the finished product as the Add did rather than accumulate onto it. The activation goes in the node's `act`. The GEMM
 * node writes the last node's output; the Add and the activation are
 * marked done like folded nodes, and the intermediates are left with no
 * producer. New input, output and attribute arrays come from the graph's
 * pool.
 *
 * Guarantee: the fused node computes what the nodes it replaced computed.
 * The CPU kernels (engine/cpu/linalg_kernels.c) add the bias and apply the
 * activation in float with the Add, Relu and Gelu kernels' own
 * expressions (eng_act_f32), so on the CPU the fused graph gives the
 * unfused graph's bits (a half graph aside: it rounds once instead of
 * after each node). The planner sees one node fewer per fused op, so the
 * intermediates take no memory.
 *
 * Through a Reshape. A Reshape of the (biased) product read by nothing but
 * a Relu or Gelu (GPT-2's dynamo export: Gemm, Reshape to [B, S, 3072],
 * then the tanh GELU) takes the activation too: act(Reshape(P)) is
 * Reshape(act(P)), so the GEMM applies it and the Reshape writes the
 * activation's output value.
 *
 * The residual. After a MatMul's fused bias and no activation, an Add of
 * the biased product and a value R becomes the MatMul's input 3 (graph.h
 * `residual`; cuBLASLt's C with beta 1, the CPU's epilogue adding it after
 * the bias as the Add did, so again the unfused bits): a transformer's
 * dense + bias + skip connection in one pass instead of two. Only when R
 * is a graph input or computed by an earlier node (the fused node reads
 * it) and its declared shape is provably the product's -- A's dims but the
 * last, the same sizes or the same symbols, then N -- so the Add
 * broadcast nothing. An Add after an activation stays: cuBLASLt applies
 * the activation after C.
 *
 * Subgraphs are left as they are, as engine/fuse.c leaves them. */
#include <string.h>

#include "common/error.h"
#include "common/log.h"
#include "engine/graph.h"
#include "engine/onnx_impl.h"
#include "engine/op.h"
#include "engine/plan.h"


/* Whether dt is a dtype a fused GEMM epilogue computes in. */
static bool epilogue_dtype(eng_dtype_t dt)
{
    return dt == ENG_DT_FLOAT || dt == ENG_DT_FLOAT16 || dt == ENG_DT_BFLOAT16;
}

/* One GEMM with what may fuse into it. */
typedef struct epilogue_match {
    int gemm;                 /* node index */
    int add, bias;            /* the Add node and its bias constant; -1: none */
    int act_node;             /* the Relu / Gelu node; -1: none */
    eng_act_t act;
    int res_add, res;         /* the residual Add and its other operand; -1: none */
    int reshape;              /* a Reshape between the product and act_node; -1: none */
    int out;                  /* the value the fused node writes */
} epilogue_match_t;

/* N of GEMM node `i` and the rank its product is known to have at least
 * (*rank), or -1 when N is not known at load. */
static int64_t gemm_n(const eng_graph_t *g, int i, int *rank)
{
    const eng_node_t *n = &g->nodes[i];
    const eng_value_t *b = &g->values[n->inputs[1]];
    bool mm = strcmp(n->op_type, "MatMul") == 0;
    bool tb = mm ? n->trans_b : eng_attr_i(n, "transB", 0) != 0;
    int64_t dims[2];
    if (b->kind == ENG_VALUE_CONST && b->constant.shape.rank == 2) {
        dims[0] = b->constant.shape.dims[0];
        dims[1] = b->constant.shape.dims[1];
    } else if (!mm && b->rank == 2) {
        dims[0] = b->dims[0].value;
        dims[1] = b->dims[1].value;
    } else {
        return -1;
    }
    /* Gemm's Y has rank 2; MatMul's with a rank-2 B has A's rank (rank 1
     * for a vector A). */
    const eng_value_t *a = &g->values[n->inputs[0]];
    *rank = !mm ? 2 : a->rank > 1 ? a->rank : 1;
    return dims[tb ? 0 : 1];
}

/* Whether constant v may be the bias of a product with N columns and at
 * least `rank` dims, in dtype `dt` (ENG_DT_UNDEFINED: any the epilogue
 * computes in). */
static bool is_bias(const eng_graph_t *g, int v, int64_t n, int rank, eng_dtype_t dt)
{
    if (v < 0 || g->values[v].kind != ENG_VALUE_CONST || !g->values[v].constant.data)
        return false;
    const eng_tensor_t *t = &g->values[v].constant;
    if (!epilogue_dtype(t->dtype) || (dt != ENG_DT_UNDEFINED && t->dtype != dt) ||
        t->shape.rank < 1 || t->shape.rank > rank ||
        t->shape.dims[t->shape.rank - 1] != n)
        return false;
    for (int d = 0; d < t->shape.rank - 1; d++)
        if (t->shape.dims[d] != 1)
            return false;
    return true;
}

/* The activation node `i` is (a live Relu or Gelu of one input and one
 * output), or ENG_ACT_NONE. */
static eng_act_t act_of(const eng_graph_t *g, const bool *done, int i)
{
    if (i < 0)
        return ENG_ACT_NONE;
    const eng_node_t *n = &g->nodes[i];
    if (n->n_inputs != 1 || n->n_outputs != 1 || n->outputs[0] < 0)
        return ENG_ACT_NONE;
    if (eng_graph_live_op(g, done, i, "Relu"))
        return ENG_ACT_RELU;
    if (!eng_graph_live_op(g, done, i, "Gelu"))
        return ENG_ACT_NONE;
    const char *approx = eng_attr_s(n, "approximate", "none");
    return strcmp(approx, "none") == 0   ? ENG_ACT_GELU
           : strcmp(approx, "tanh") == 0 ? ENG_ACT_GELU_TANH
                                         : ENG_ACT_NONE;
}

/* Whether value v's declared shape is provably MatMul node i's product's:
 * A's dims but the last, then N (known), as the product of A with a
 * rank-2 B is. */
static bool shaped_as_product(const eng_graph_t *g, int i, int v, int64_t cols)
{
    const eng_value_t *a = &g->values[g->nodes[i].inputs[0]], *r = &g->values[v];
    if (a->rank < 2 || r->rank != a->rank || cols < 0)
        return false;
    for (int d = 0; d < a->rank - 1; d++)
        if (!eng_dim_same(&a->dims[d], &r->dims[d]))
            return false;
    return r->dims[a->rank - 1].value == cols;
}

/* The residual Add after a MatMul's bias Add (node `add`, the sole reader
 * of m->out): Add(Q, R) or Add(R, Q) with R computed before the MatMul
 * runs (a graph input, or a node earlier in the graph's order, since the
 * fused node reads it) and declared with the product's shape, so the Add
 * broadcasts nothing and the fused node's Y is the Add's; `cols` is the
 * product's N (gemm_n, -1 unknown). Fills m->res_add, m->res and m->out
 * when found. Cannot fail. */
static void residual_find(const eng_graph_t *g, const bool *done, epilogue_match_t *m, int add,
                          int64_t cols)
{
    if (add < 0 || !eng_graph_live_op(g, done, add, "Add"))
        return;
    const eng_node_t *n = &g->nodes[add];
    if (n->n_inputs != 2 || n->n_outputs != 1 || n->outputs[0] < 0)
        return;
    for (int k = 0; k < 2; k++) {
        int r = n->inputs[1 - k];
        if (n->inputs[k] != m->out || r < 0 || r == m->out)
            continue;
        const eng_value_t *rv = &g->values[r];
        if (rv->kind == ENG_VALUE_CONST || rv->kind == ENG_VALUE_OUTER ||
            (rv->producer >= 0 && rv->producer >= m->gemm) ||
            !shaped_as_product(g, m->gemm, r, cols))
            continue;
        m->res_add = add;
        m->res = r;
        m->out = n->outputs[0];
        return;
    }
}

/* Whether node i is a GEMM with a bias and/or an activation to take in
 * (see the file header); fills *m when so. Cannot fail. */
static bool epilogue_find(const eng_graph_t *g, const bool *done, int i, epilogue_match_t *m)
{
    const eng_node_t *n = &g->nodes[i];
    bool mm = eng_graph_live_op(g, done, i, "MatMul");
    if ((!mm && !eng_graph_live_op(g, done, i, "Gemm")) || n->bias || n->act != ENG_ACT_NONE ||
        n->n_outputs != 1 || n->outputs[0] < 0 || n->n_inputs < 2 || n->inputs[0] < 0 ||
        n->inputs[1] < 0)
        return false;
    const eng_value_t *b = &g->values[n->inputs[1]];
    if (mm && (n->n_inputs != 2 || b->kind != ENG_VALUE_CONST || !b->constant.data ||
               b->constant.shape.rank != 2 || !epilogue_dtype(b->constant.dtype)))
        return false;
    bool has_c = !mm && n->n_inputs > 2 && n->inputs[2] >= 0;
    *m = (epilogue_match_t){.gemm = i, .add = -1, .bias = -1, .act_node = -1,
                            .res_add = -1, .res = -1, .reshape = -1, .out = n->outputs[0]};
    int rank = 0;
    int64_t cols = gemm_n(g, i, &rank);
    int next = eng_graph_sole_live_reader(g, done, m->out);
    if (!has_c && cols >= 0 && next >= 0 && eng_graph_live_op(g, done, next, "Add")) {
        const eng_node_t *add = &g->nodes[next];
        /* The operands' dtype where the load knows it (a Gemm's B may be
         * a graph input); a Gemm's infer checks C against it later. */
        eng_dtype_t dt = b->kind == ENG_VALUE_CONST ? b->constant.dtype
                                                    : g->values[n->inputs[0]].dtype;
        for (int k = 0; k < 2 && m->add < 0 && add->n_inputs == 2 && add->n_outputs == 1 &&
                        add->outputs[0] >= 0;
             k++)
            if (add->inputs[k] == m->out && add->inputs[1 - k] != m->out &&
                is_bias(g, add->inputs[1 - k], cols, rank, dt)) {
                m->add = next;
                m->bias = add->inputs[1 - k];
                m->out = add->outputs[0];
            }
    }
    int a = m->add >= 0 ? eng_graph_sole_live_reader(g, done, m->out) : next;
    if ((m->act = act_of(g, done, a)) != ENG_ACT_NONE) {
        m->act_node = a;
        m->out = g->nodes[a].outputs[0];
    } else if (eng_graph_live_op(g, done, a, "Reshape") && g->nodes[a].inputs[0] == m->out &&
               g->nodes[a].n_outputs == 1 && g->nodes[a].outputs[0] >= 0) {
        /* act(Reshape(P)) is Reshape(act(P)): the activation moves into
         * the GEMM and the Reshape writes its output. */
        int r = eng_graph_sole_live_reader(g, done, g->nodes[a].outputs[0]);
        if ((m->act = act_of(g, done, r)) != ENG_ACT_NONE) {
            m->reshape = a;
            m->act_node = r;
        }
    } else if (mm && m->add >= 0) {
        residual_find(g, done, m, a, cols);
    }
    return m->add >= 0 || m->act_node >= 0;
}

/* Gemm's attributes with beta set to 1, in the pool; NULL when out of
 * memory. *n_out: their count. */
static const eng_attr_t *beta_one(eng_graph_t *g, const eng_node_t *n, int *n_out)
{
    bool has = eng_node_attr(n, "beta") != NULL;
    int count = n->n_attrs + !has;
    eng_attr_t *attrs = onnx_pool_alloc(g->pool, (size_t)count * sizeof *attrs);
    if (!attrs)
        return NULL;
    if (n->n_attrs)
        memcpy(attrs, n->attrs, (size_t)n->n_attrs * sizeof *attrs);
    eng_attr_t *beta = &attrs[count - 1];
    for (int a = 0; a < n->n_attrs && has; a++)
        if (strcmp(attrs[a].name, "beta") == 0)
            beta = &attrs[a];
    *beta = (eng_attr_t){.name = "beta", .type = ENG_ATTR_FLOAT, .f = 1.0f};
    *n_out = count;
    return attrs;
}

/* Rewrites match m into its GEMM node. 0, or FS_ENOMEM with the graph as
 * it was. */
static int epilogue_apply(eng_graph_t *g, bool *done, const epilogue_match_t *m)
{
    eng_node_t *n = &g->nodes[m->gemm];
    bool mm = strcmp(n->op_type, "MatMul") == 0;
    int *ins = NULL, *outs = onnx_pool_alloc(g->pool, sizeof *outs);
    int *r_outs = m->reshape >= 0 ? onnx_pool_alloc(g->pool, sizeof *r_outs) : NULL;
    const eng_attr_t *attrs = n->attrs;
    int n_attrs = n->n_attrs;
    if (m->bias >= 0) {
        ins = onnx_pool_alloc(g->pool, (m->res >= 0 ? 4 : 3) * sizeof *ins);
        if (!mm && ins)
            attrs = beta_one(g, n, &n_attrs);
    }
    if (!outs || (m->reshape >= 0 && !r_outs) || (m->bias >= 0 && (!ins || !attrs)))
        return fs_err(FS_ENOMEM, "out of memory fusing the epilogue of %s '%s'", n->op_type,
                      n->name);
    if (m->bias >= 0) {
        ins[0] = n->inputs[0];
        ins[1] = n->inputs[1];
        ins[2] = m->bias;
        /* The done Add still counts as a reader (graph.h's convention). */
        g->values[m->bias].n_consumers++;
        n->inputs = ins;
        n->n_inputs = 3;
        n->bias = true;
        if (m->res >= 0) {
            ins[3] = m->res;
            g->values[m->res].n_consumers++;
            n->n_inputs = 4;
            n->residual = true;
            done[m->res_add] = true;
            g->values[g->nodes[m->res_add].outputs[0]].producer = -1;
        }
        n->attrs = attrs;
        n->n_attrs = n_attrs;
        done[m->add] = true;
        g->values[g->nodes[m->add].outputs[0]].producer = -1;
    }
    if (m->act_node >= 0) {
        n->act = m->act;
        done[m->act_node] = true;
        g->values[g->nodes[m->act_node].outputs[0]].producer = -1;
    }
    if (m->reshape >= 0) {
        eng_node_t *rs = &g->nodes[m->reshape];
        g->values[rs->outputs[0]].producer = -1;
        r_outs[0] = g->nodes[m->act_node].outputs[0];
        rs->outputs = r_outs;
        g->values[r_outs[0]].producer = m->reshape;
    }
    g->values[n->outputs[0]].producer = -1;
    outs[0] = m->out;
    n->outputs = outs;
    g->values[m->out].producer = m->gemm;
    return 0;
}

int eng_fuse_gemm_epilogue(eng_graph_t *g, bool *done)
{
    epilogue_match_t m;
    int biases = 0, acts = 0, residuals = 0;
    for (size_t i = 0; i < g->n_nodes; i++) {
        if (!epilogue_find(g, done, (int)i, &m))
            continue;
        int rc = epilogue_apply(g, done, &m);
        if (rc)
            return rc;
        biases += m.bias >= 0;
        acts += m.act_node >= 0;
        residuals += m.res >= 0;
    }
    if (biases || acts)
        FS_LOG_I("engine", "gemm epilogues: %d biases, %d activations and %d residual adds fused",
                 biases, acts, residuals);
    return 0;
}
