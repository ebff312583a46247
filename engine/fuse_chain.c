/* fuse_chain.c -- load-time fusion of chains of element-wise ops into one
 * FusedElementwise node each (engine/ew_program.h), so that a chain such as
 * an attention's scale and mask, a swish or a gelu's leftovers, with the
 * casts between them, reads its inputs once and writes one output instead
 * of one full tensor per op, in one launch.
 *
 * Where it runs: last, after the pattern fusions (GELU, RMSNorm,
 * attention, GEMM epilogues), the fp16/bf16 lowering and the channels-last
 * layout, so that the patterns keep the ops they match (a Gelu node, an
 * Attention's scale, a GEMM's bias and activation: each is better fused
 * there than here), the lowering's Casts and dtypes are the ones that run,
 * and no other pass has to understand the program. Subgraphs are left as
 * they are, as the other passes leave them.
 *
 * The ops (a node of them is a chain op): live default-domain nodes of one
 * output and no subgraph, every value they read and write float32, float16
 * or bfloat16 (the dtype the load knows: below), of
 *  - the unary ops Relu, Neg, Abs, Sign, Gelu (either approximation) and
 *    those of engine/ops/unary_impl.h's lists (Sigmoid, Tanh, Erf, Exp,
 *    Log, Sqrt, Reciprocal, LeakyRelu, HardSigmoid, Softplus, ...), with
 *    their attributes;
 *  - Cast between float32 and float16 or bfloat16 either way, or to its
 *    input's dtype (a Cast rounds to the half dtype on either side, which
 *    the unfused graph had rounded to);
 *  - Add, Sub, Mul, Div (opset >= 7, numpy broadcasting), Max and Min of
 *    two inputs (opset >= 8), Pow of a one-element constant exponent of
 *    the base's dtype (opset >= 7), Where (opset >= 9, a bool condition),
 *    Clip with constant bounds (attributes before opset 11, one-element
 *    constants or absent from it).
 * An input that is a one-element constant is folded into the program as
 * an immediate (the output's rank still counts it: out_rank_min).
 *
 * Groups. Walking the nodes from the last, a chain op joins the group of
 * the nodes that read its output when every live node reading it is in
 * that one group and it is no graph output; else it starts a group of its
 * own, whose last node (its sink) is the one whose output leaves. So every
 * value a group computes but the sink's is read only inside the group; a
 * value read outside (a fan-out, a graph output) ends a group there, and
 * an op of another kind between two chain ops splits them. A group never
 * passes ENG_EW_MAX_INPUTS distinct external inputs (values it reads that
 * no member computes and that are not folded), ENG_EW_MAX_INSTRS ops,
 * ENG_EW_MAX_IMMS immediates or ENG_EW_MAX_REGS registers: a node that
 * would is left to start another group.
 *
 * The rewrite, for each group of two or more ops: its program is built
 * (registers 0..n-1 the external inputs in the order the group first reads
 * them, then each op's result in a register freed after its last read),
 * the sink node becomes the FusedElementwise node reading the external
 * inputs and writing the sink's output (new arrays from the graph's pool),
 * and the other members are marked done like folded nodes (a done node
 * still counts as a reader); their outputs are left with no producer, so
 * the planner never allocates them. Every external input is ready at the
 * sink: members come before it, and what they read before them.
 *
 * Dtypes. Exporters often declare no intermediate value (torch.onnx's
 * TorchScript exporter writes no value_info), so the load derives them:
 * a constant's and a graph input's, a declared one, a Cast's `to`, bool
 * for comparisons and logic, int64 for Shape-like ops, and input 0's (X's
 * for Where) for the ops ONNX types T -> T (element-wise, shape and GEMM
 * ops, norms, pools, reductions). A value it cannot derive is unknown, and
 * an op reading or writing one is no chain op. The node's definition
 * checks at plan time that each input has the dtype the program was built
 * for (FS_EINVAL naming it otherwise), so a wrong guess fails loudly.
 *
 * Guarantee: the fused node computes each output element from the same
 * input elements through the same float formulas in the same order
 * (engine/ew_program.h); on the CPU a float32 group gives the unfused
 * graph's bits. A float16 or bfloat16 group rounds once at the end (and
 * at each Cast to a half dtype) where the unfused graph rounded after
 * every op: closer to the exact result, not bitwise the unfused one. The
 * output's shape is the broadcast of the inputs', which is what the chain
 * of broadcasts computed (broadcasting is associative), and a chain whose
 * shapes do not broadcast fails at plan time as the unfused one did. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/error.h"
#include "common/log.h"
#include "engine/ew_program.h"
#include "engine/graph.h"
#include "engine/onnx_impl.h"
#include "engine/op.h"
#include "engine/plan.h"

/* ---- dtypes -------------------------------------------------------------------------- */

/* Ops whose every output has input 0's dtype (ONNX: T -> T). */
static const char *const same_type_ops[] = {
    "Identity", "Reshape", "Flatten", "Squeeze", "Unsqueeze", "Transpose", "Concat", "Split",
    "Slice", "Gather", "GatherElements", "GatherND", "Expand", "Tile", "Pad", "DepthToSpace",
    "SpaceToDepth", "Conv", "ConvTranspose", "AveragePool", "GlobalAveragePool",
    "GlobalMaxPool", "LpPool", "GlobalLpPool", "InstanceNormalization", "RMSNormalization",
    "LRN", "LpNormalization", "MeanVarianceNormalization", "GroupNormalization", "MatMul",
    "Gemm", "Einsum", "Softmax", "LogSoftmax", "Hardmax", "CumSum", "ReduceL1", "ReduceL2",
    "ReduceLogSum", "ReduceLogSumExp", "ReduceMax", "ReduceMean", "ReduceMin", "ReduceProd",
    "ReduceSum", "ReduceSumSquare", "Trilu", "Resize", "Upsample", "RotaryEmbedding", "SwiGLU",
    "Add", "Sub", "Mul", "Div", "Pow", "Mod", "Max", "Min", "Mean", "Sum", "PRelu", "Relu",
    "Neg", "Abs", "Sign", "Gelu", "Clip", "Shrink", "Ceil", "Floor", "Round",
};
/* Ops whose output 0 (only) has input 0's dtype. */
static const char *const first_type_ops[] = {
    "Dropout", "MaxPool", "BatchNormalization", "LayerNormalization", "TopK", "Attention",
};
static const char *const bool_ops[] = {
    "Equal", "Greater", "GreaterOrEqual", "Less", "LessOrEqual", "And", "Or", "Xor", "Not",
    "IsNaN", "IsInf",
};
static const char *const int64_ops[] = {"Shape", "Size", "NonZero", "ArgMax", "ArgMin"};

static bool name_in(const char *op, const char *const *list, size_t n)
{
    for (size_t i = 0; i < n; i++)
        if (strcmp(op, list[i]) == 0)
            return true;
    return false;
}
#define NAME_IN(op, list) name_in(op, list, sizeof list / sizeof list[0])

/* The unary ops of engine/ops/unary_impl.h's lists, with their codes and
 * attribute defaults, and the base ones of one input. */
typedef struct unary_op {
    const char *name;
    int code;
    float alpha, beta, gamma;
} unary_op_t;

static const unary_op_t unary_ops[] = {
#define UROW_(op, A, B, G, expr) {#op, ENG_EW_##op, A, B, G},
    ENG_UNARY_FLOAT_OPS(UROW_) ENG_UNARY_REAL_OPS(UROW_)
#undef UROW_
    {"Relu", ENG_EW_Relu, 0, 0, 0},
    {"Neg", ENG_EW_Neg, 0, 0, 0},
    {"Abs", ENG_EW_Abs, 0, 0, 0},
    {"Sign", ENG_EW_Sign, 0, 0, 0},
};

static const unary_op_t *unary_find(const char *op)
{
    for (size_t i = 0; i < sizeof unary_ops / sizeof unary_ops[0]; i++)
        if (strcmp(op, unary_ops[i].name) == 0)
            return &unary_ops[i];
    return NULL;
}

static bool float_dt(eng_dtype_t t)
{
    return t == ENG_DT_FLOAT || t == ENG_DT_FLOAT16 || t == ENG_DT_BFLOAT16;
}

/* dt[v] for every value of g: what the load knows (see the file header),
 * ENG_DT_UNDEFINED where it knows nothing. Cannot fail. */
static void value_dtypes(const eng_graph_t *g, const bool *done, eng_dtype_t *dt)
{
    for (size_t v = 0; v < g->n_values; v++) {
        const eng_value_t *val = &g->values[v];
        dt[v] = val->kind == ENG_VALUE_CONST ? val->constant.dtype : val->dtype;
    }
    for (size_t i = 0; i < g->n_nodes; i++) {
        const eng_node_t *n = &g->nodes[i];
        if (done[i] || n->domain[0] || n->n_inputs - n->n_implicit < 1)
            continue;
        const char *op = n->op_type;
        eng_dtype_t in0 = n->inputs[0] >= 0 ? dt[n->inputs[0]] : ENG_DT_UNDEFINED;
        /* Binary ops share T between their inputs: either tells it. */
        if (in0 == ENG_DT_UNDEFINED && n->n_inputs > 1 && n->inputs[1] >= 0 &&
            (strcmp(op, "Add") == 0 || strcmp(op, "Sub") == 0 || strcmp(op, "Mul") == 0 ||
             strcmp(op, "Div") == 0 || strcmp(op, "Max") == 0 || strcmp(op, "Min") == 0))
            in0 = dt[n->inputs[1]];
        eng_dtype_t all = ENG_DT_UNDEFINED, first = ENG_DT_UNDEFINED;
        if (strcmp(op, "Cast") == 0)
            first = (eng_dtype_t)eng_attr_i(n, "to", ENG_DT_UNDEFINED);
        else if (strcmp(op, "CastLike") == 0 && n->n_inputs > 1 && n->inputs[1] >= 0)
            first = dt[n->inputs[1]];
        else if (strcmp(op, "Where") == 0 && n->n_inputs > 2)
            first = n->inputs[1] >= 0 && dt[n->inputs[1]] != ENG_DT_UNDEFINED ? dt[n->inputs[1]]
                    : n->inputs[2] >= 0                   ? dt[n->inputs[2]]
                                                          : ENG_DT_UNDEFINED;
        else if (NAME_IN(op, same_type_ops) || unary_find(op))
            all = in0;
        else if (NAME_IN(op, first_type_ops))
            first = in0;
        else if (NAME_IN(op, bool_ops))
            first = ENG_DT_BOOL;
        else if (NAME_IN(op, int64_ops))
            first = ENG_DT_INT64;
        for (int o = 0; o < n->n_outputs; o++) {
            int v = n->outputs[o];
            if (v >= 0 && dt[v] == ENG_DT_UNDEFINED)
                dt[v] = o == 0 && first != ENG_DT_UNDEFINED ? first : all;
        }
    }
}

/* ---- chain ops ----------------------------------------------------------------------- */

/* A node as one instruction: operand s reads value `val[s]`, or, with
 * val[s] -1, the immediate imm[s]. */
typedef struct chain_op {
    int code;                 /* eng_ew_op_t */
    int n_src;
    int val[3];
    float imm[3];
    float alpha, beta, gamma;
} chain_op_t;

/* Whether value v may be folded into an immediate: a one-element constant
 * with data, of dtype `want` (bool: a Where's condition). */
static bool foldable(const eng_graph_t *g, int v, eng_dtype_t want)
{
    const eng_value_t *val = v >= 0 ? &g->values[v] : NULL;
    return val && val->kind == ENG_VALUE_CONST && val->constant.data &&
           val->constant.dtype == want && eng_shape_numel(&val->constant.shape) == 1;
}

/* A one-element constant's value as a float. */
static float const_value(const eng_value_t *v)
{
    switch (v->constant.dtype) {
    case ENG_DT_FLOAT:
        return *(const float *)v->constant.data;
    case ENG_DT_BOOL:
        return *(const uint8_t *)v->constant.data != 0;
    default:
        return eng_half_dt_to_float(v->constant.dtype, *(const uint16_t *)v->constant.data);
    }
}

/* Operand s of op reads input value v, which must have dtype want (an
 * immediate when foldable). */
static bool operand(const eng_graph_t *g, const eng_dtype_t *dt, chain_op_t *op, int s, int v,
                    eng_dtype_t want)
{
    if (v < 0 || dt[v] != want)
        return false;
    op->val[s] = v;
    return true;
}

/* Node n's Clip bounds as operands 1 and 2 (see the file header). */
static bool clip_bounds(const eng_graph_t *g, const eng_dtype_t *dt, const eng_node_t *n,
                        chain_op_t *op, eng_dtype_t t)
{
    op->n_src = 3;
    op->val[1] = op->val[2] = -1;
    if (g->opset < 11) {
        op->imm[1] = eng_attr_f(n, "min", -INFINITY);
        op->imm[2] = eng_attr_f(n, "max", INFINITY);
        return true;
    }
    op->imm[1] = -INFINITY;
    op->imm[2] = INFINITY;
    for (int s = 1; s < 3; s++) {
        int v = n->n_inputs > s ? n->inputs[s] : -1;
        if (v < 0)
            continue;
        if (!foldable(g, v, t))
            return false;
        op->val[s] = v;
    }
    return true;
}

/* Whether node i is a chain op (see the file header); fills *op when so. */
static bool chain_op_of(const eng_graph_t *g, const bool *done, const eng_dtype_t *dt, int i,
                        chain_op_t *op)
{
    const eng_node_t *n = &g->nodes[i];
    if (done[i] || n->domain[0] || !n->op || n->n_outputs != 1 || n->outputs[0] < 0 ||
        n->n_implicit || n->n_inputs < 1 || n->inputs[0] < 0)
        return false;
    const eng_dtype_t t = dt[n->outputs[0]];
    if (!float_dt(t))
        return false;
    *op = (chain_op_t){.val = {-1, -1, -1}};
    const char *type = n->op_type;
    const unary_op_t *u = unary_find(type);
    int ni = n->n_inputs;
    if (u || strcmp(type, "Gelu") == 0) {
        op->code = u ? u->code : ENG_EW_Gelu;
        if (!u) {
            const char *approx = eng_attr_s(n, "approximate", "none");
            if (strcmp(approx, "none") != 0 && strcmp(approx, "tanh") != 0)
                return false;
            op->code = approx[0] == 't' ? ENG_EW_GeluTanh : ENG_EW_Gelu;
        } else {
            op->alpha = eng_attr_f(n, "alpha", u->alpha);
            op->beta = eng_attr_f(n, "beta", u->beta);
            op->gamma = eng_attr_f(n, "gamma", u->gamma);
        }
        op->n_src = 1;
        return ni == 1 && operand(g, dt, op, 0, n->inputs[0], t);
    }
    if (strcmp(type, "Cast") == 0) {
        /* A half value leaving for float32 is rounded to its dtype first:
         * the program keeps intermediates unrounded, the graph had it
         * rounded. Half to the other half is left alone. */
        eng_dtype_t from = dt[n->inputs[0]], half = from == t ? ENG_DT_UNDEFINED
                                                    : from == ENG_DT_FLOAT ? t : from;
        if (half != ENG_DT_UNDEFINED && t != ENG_DT_FLOAT && from != ENG_DT_FLOAT)
            return false;
        op->code = half == ENG_DT_FLOAT16    ? ENG_EW_CastF16
                   : half == ENG_DT_BFLOAT16 ? ENG_EW_CastBF16
                                             : ENG_EW_Copy;
        op->n_src = 1;
        return ni == 1 && float_dt(from) && operand(g, dt, op, 0, n->inputs[0], from);
    }
    static const struct {
        const char *name;
        int code, opset;
    } binary[] = {{"Add", ENG_EW_Add, 7}, {"Sub", ENG_EW_Sub, 7}, {"Mul", ENG_EW_Mul, 7},
                  {"Div", ENG_EW_Div, 7}, {"Max", ENG_EW_Max, 8}, {"Min", ENG_EW_Min, 8}};
    for (size_t k = 0; k < sizeof binary / sizeof binary[0]; k++)
        if (strcmp(type, binary[k].name) == 0) {
            op->code = binary[k].code;
            op->n_src = 2;
            return g->opset >= binary[k].opset && ni == 2 &&
                   operand(g, dt, op, 0, n->inputs[0], t) && operand(g, dt, op, 1, n->inputs[1], t);
        }
    if (strcmp(type, "Pow") == 0) {
        op->code = ENG_EW_Pow;
        op->n_src = 2;
        return g->opset >= 7 && ni == 2 && operand(g, dt, op, 0, n->inputs[0], t) &&
               foldable(g, n->inputs[1], t) && operand(g, dt, op, 1, n->inputs[1], t);
    }
    if (strcmp(type, "Where") == 0) {
        op->code = ENG_EW_Where;
        op->n_src = 3;
        return g->opset >= 9 && ni == 3 && operand(g, dt, op, 0, n->inputs[0], ENG_DT_BOOL) &&
               operand(g, dt, op, 1, n->inputs[1], t) && operand(g, dt, op, 2, n->inputs[2], t);
    }
    if (strcmp(type, "Clip") == 0) {
        op->code = ENG_EW_Clip;
        return operand(g, dt, op, 0, n->inputs[0], t) && clip_bounds(g, dt, n, op, t);
    }
    return false;
}

/* ---- groups -------------------------------------------------------------------------- */

typedef struct group {
    int sink;                 /* node index */
    int n_ops, n_imms;
    int n_ext;
    int ext[ENG_EW_MAX_INPUTS]; /* external inputs so far (growing backwards: any order) */
} group_t;

/* Whether operand s of op is an immediate in the program: implied (a
 * Clip's absent bound) or a one-element constant, folded. */
static bool is_imm(const eng_graph_t *g, const chain_op_t *op, int s)
{
    int v = op->val[s];
    if (v < 0)
        return true;
    eng_dtype_t t = g->values[v].kind == ENG_VALUE_CONST ? g->values[v].constant.dtype
                                                          : ENG_DT_UNDEFINED;
    return (float_dt(t) || t == ENG_DT_BOOL) && foldable(g, v, t);
}

/* Tries to add op (writing value `out`, read by the group) to gr: the
 * external inputs without `out` and with op's, within the limits. Adds it
 * and returns true, or returns false with gr as it was. */
static bool group_take(const eng_graph_t *g, group_t *gr, const chain_op_t *op, int out)
{
    group_t t = *gr;
    t.n_ext = 0;
    for (int k = 0; k < gr->n_ext; k++)
        if (gr->ext[k] != out)
            t.ext[t.n_ext++] = gr->ext[k];
    for (int s = 0; s < op->n_src; s++) {
        if (is_imm(g, op, s)) {
            t.n_imms++;
            continue;
        }
        bool have = false;
        for (int k = 0; k < t.n_ext && !have; k++)
            have = t.ext[k] == op->val[s];
        if (have)
            continue;
        if (t.n_ext == ENG_EW_MAX_INPUTS)
            return false;
        t.ext[t.n_ext++] = op->val[s];
    }
    t.n_ops++;
    if (t.n_ops > ENG_EW_MAX_INSTRS || t.n_imms > ENG_EW_MAX_IMMS)
        return false;
    *gr = t;
    return true;
}

/* ---- programs ------------------------------------------------------------------------ */

/* The register allocator's view of one value: its register and the last
 * member (by position) that reads it. */
typedef struct reg_slot {
    int value, reg, last;
} reg_slot_t;

static reg_slot_t *slot_of(reg_slot_t *s, int n, int v)
{
    for (int k = 0; k < n; k++)
        if (s[k].value == v)
            return &s[k];
    return NULL;
}

/* Builds the program of the group whose members (ascending node indices)
 * are mem[0..n) with ops ops[]: true and *p, or false when it needs more
 * registers than ENG_EW_MAX_REGS (the group is then left alone). *ins
 * receives the external inputs in register order. */
static bool program_build(const eng_graph_t *g, const eng_dtype_t *dt, const int *mem,
                          const chain_op_t *ops, int n, eng_ew_program_t *p, int *ins)
{
    reg_slot_t slots[ENG_EW_MAX_INPUTS + ENG_EW_MAX_INSTRS];
    int n_slots = 0;
    memset(p, 0, sizeof *p);
    /* The members' results, then the external inputs in first-read order;
     * each value's last read. */
    for (int m = 0; m < n; m++)
        slots[n_slots++] = (reg_slot_t){.value = g->nodes[mem[m]].outputs[0], .reg = -1,
                                        .last = m};
    for (int m = 0; m < n; m++)
        for (int s = 0; s < ops[m].n_src; s++) {
            if (is_imm(g, &ops[m], s))
                continue;
            int v = ops[m].val[s];
            reg_slot_t *sl = slot_of(slots, n_slots, v);
            if (!sl) {
                if (p->n_inputs == ENG_EW_MAX_INPUTS)
                    return false;
                sl = &slots[n_slots++];
                *sl = (reg_slot_t){.value = v, .reg = p->n_inputs};
                ins[p->n_inputs] = v;
                p->in_dtype[p->n_inputs++] = dt[v];
            }
            sl->last = m;
        }
    bool busy[ENG_EW_MAX_REGS] = {false};
    for (int k = 0; k < p->n_inputs; k++)
        busy[k] = true;
    p->n_regs = p->n_inputs;
    for (int m = 0; m < n; m++) {
        const chain_op_t *op = &ops[m];
        eng_ew_instr_t *in = &p->code[m];
        *in = (eng_ew_instr_t){.op = (uint8_t)op->code, .alpha = op->alpha, .beta = op->beta,
                               .gamma = op->gamma};
        for (int s = 0; s < op->n_src; s++) {
            int v = op->val[s];
            if (is_imm(g, op, s)) {
                float x = v < 0 ? op->imm[s] : const_value(&g->values[v]);
                if (v >= 0 && g->values[v].constant.shape.rank > p->out_rank_min)
                    p->out_rank_min = g->values[v].constant.shape.rank;
                in->src[s] = (uint8_t)(ENG_EW_IMM + p->n_imms);
                p->imm[p->n_imms++] = x;
                continue;
            }
            in->src[s] = (uint8_t)slot_of(slots, n_slots, v)->reg;
        }
        /* Registers whose value is read for the last time here are free
         * for this op's result (an element is read before it is written). */
        for (int s = 0; s < op->n_src; s++) {
            reg_slot_t *sl = is_imm(g, op, s) ? NULL : slot_of(slots, n_slots, op->val[s]);
            if (sl && sl->last == m)
                busy[sl->reg] = false;
        }
        int r = 0;
        while (r < ENG_EW_MAX_REGS && busy[r])
            r++;
        if (r == ENG_EW_MAX_REGS)
            return false;
        busy[r] = true;
        slot_of(slots, n_slots, g->nodes[mem[m]].outputs[0])->reg = r;
        in->dst = (uint8_t)r;
        if (r + 1 > p->n_regs)
            p->n_regs = r + 1;
    }
    p->n_instrs = n;
    p->out = p->code[n - 1].dst;
    p->out_dtype = dt[g->nodes[mem[n - 1]].outputs[0]];
    p->n_fused = n;
    return true;
}

/* Rewrites the group's sink into its FusedElementwise node and marks the
 * other members done. 0, or FS_ENOMEM with the graph as it was. */
static int group_apply(eng_graph_t *g, bool *done, const int *mem, int n,
                       const eng_ew_program_t *prog, const int *ins)
{
    eng_node_t *s = &g->nodes[mem[n - 1]];
    eng_ew_program_t *p = onnx_pool_alloc(g->pool, sizeof *p);
    int *in = onnx_pool_alloc(g->pool, (size_t)prog->n_inputs * sizeof *in);
    if (!p || !in)
        return fs_err(FS_ENOMEM, "out of memory fusing the element-wise chain ending at %s '%s'",
                      s->op_type, s->name);
    *p = *prog;
    memcpy(in, ins, (size_t)prog->n_inputs * sizeof *in);
    for (int k = 0; k < s->n_inputs; k++)
        if (s->inputs[k] >= 0)
            g->values[s->inputs[k]].n_consumers--;
    for (int k = 0; k < p->n_inputs; k++)
        g->values[in[k]].n_consumers++;
    const eng_op_def_t *def = eng_op_defs[ENG_OP_FusedElementwise];
    s->op_type = eng_op_type(def->id);
    s->domain = "";
    s->op = def;
    s->inputs = in;
    s->n_inputs = p->n_inputs;
    s->n_implicit = 0;
    s->attrs = NULL;
    s->n_attrs = 0;
    s->ew = p;
    for (int m = 0; m + 1 < n; m++) {
        done[mem[m]] = true;
        g->values[g->nodes[mem[m]].outputs[0]].producer = -1;
    }
    return 0;
}

/* ---- the pass ------------------------------------------------------------------------ */

/* The per-value and per-node tables of one pass. */
typedef struct chain_state {
    eng_dtype_t *dt;          /* per value */
    int *live_reads;          /* per value: input slots of live nodes reading it */
    int *read_group;          /* per value: the group of the members read it so far; -1 none, -2 several */
    int *group_reads;         /* per value: how many slots of that group read it */
    int *group_of;            /* per node: its group, or -1 */
    chain_op_t *ops;          /* per node */
    group_t *groups;          /* up to one per node */
} chain_state_t;

static void state_free(chain_state_t *st)
{
    free(st->dt);
    free(st->live_reads);
    free(st->read_group);
    free(st->group_reads);
    free(st->group_of);
    free(st->ops);
    free(st->groups);
}

/* Forms the groups, from the last node back (see the file header).
 * Returns their count. */
static int groups_form(const eng_graph_t *g, const bool *done, chain_state_t *st)
{
    int n_groups = 0;
    for (size_t v = 0; v < g->n_values; v++)
        st->read_group[v] = -1;
    for (size_t i = 0; i < g->n_nodes; i++)
        for (int k = 0; !done[i] && k < g->nodes[i].n_inputs; k++)
            if (g->nodes[i].inputs[k] >= 0)
                st->live_reads[g->nodes[i].inputs[k]]++;
    for (size_t ii = g->n_nodes; ii-- > 0;) {
        int i = (int)ii;
        st->group_of[i] = -1;
        chain_op_t *op = &st->ops[i];
        if (!chain_op_of(g, done, st->dt, i, op))
            continue;
        int out = g->nodes[i].outputs[0], grp = st->read_group[out];
        if (grp >= 0 && (g->values[out].is_output || st->group_reads[out] != st->live_reads[out] ||
                         !group_take(g, &st->groups[grp], op, out)))
            grp = -1;
        if (grp < 0) {
            group_t fresh = {.sink = i};
            if (!group_take(g, &fresh, op, -1))
                continue; /* more immediates than a program holds */
            grp = n_groups++;
            st->groups[grp] = fresh;
        }
        st->group_of[i] = grp;
        const eng_node_t *n = &g->nodes[i];
        for (int k = 0; k < n->n_inputs; k++) {
            int v = n->inputs[k];
            if (v < 0)
                continue;
            if (st->read_group[v] == -1) {
                st->read_group[v] = grp;
                st->group_reads[v] = 1;
            } else if (st->read_group[v] == grp) {
                st->group_reads[v]++;
            } else {
                st->read_group[v] = -2;
            }
        }
    }
    return n_groups;
}

int eng_fuse_elementwise_chains(eng_graph_t *g, bool *done)
{
    chain_state_t st = {
        .dt = calloc(g->n_values + 1, sizeof *st.dt),
        .live_reads = calloc(g->n_values + 1, sizeof *st.live_reads),
        .read_group = calloc(g->n_values + 1, sizeof *st.read_group),
        .group_reads = calloc(g->n_values + 1, sizeof *st.group_reads),
        .group_of = calloc(g->n_nodes + 1, sizeof *st.group_of),
        .ops = calloc(g->n_nodes + 1, sizeof *st.ops),
        .groups = calloc(g->n_nodes + 1, sizeof *st.groups),
    };
    int *mem = calloc(ENG_EW_MAX_INSTRS, sizeof *mem);
    chain_op_t *mops = calloc(ENG_EW_MAX_INSTRS, sizeof *mops);
    int rc = 0;
    if (!st.dt || !st.live_reads || !st.read_group || !st.group_reads || !st.group_of ||
        !st.ops || !st.groups || !mem || !mops) {
        rc = fs_err(FS_ENOMEM, "out of memory fusing element-wise chains");
        goto out;
    }
    value_dtypes(g, done, st.dt);
    int n_groups = groups_form(g, done, &st), fused = 0, removed = 0;
    for (int grp = 0; grp < n_groups && rc == 0; grp++) {
        const group_t *gr = &st.groups[grp];
        if (gr->n_ops < 2)
            continue;
        int n = 0;
        for (int i = 0; i <= gr->sink; i++)
            if (st.group_of[i] == grp) {
                mem[n] = i;
                mops[n++] = st.ops[i];
            }
        eng_ew_program_t prog;
        int ins[ENG_EW_MAX_INPUTS];
        if (n != gr->n_ops || !program_build(g, st.dt, mem, mops, n, &prog, ins) ||
            prog.n_inputs < 1) {
            FS_LOG_D("engine", "element-wise chain ending at '%s' (%d ops) left unfused: no "
                     "program fits", g->nodes[gr->sink].name, gr->n_ops);
            continue;
        }
        if (fs_log_level_current >= FS_LOG_DEBUG) {
            char ops[256];
            size_t w = 0;
            for (int m = 0; m < n && w < sizeof ops; m++)
                w += (size_t)snprintf(ops + w, sizeof ops - w, " %s", g->nodes[mem[m]].op_type);
            FS_LOG_D("engine", "element-wise chain fused at '%s': %d inputs,%s",
                     g->nodes[gr->sink].name, prog.n_inputs, ops);
        }
        rc = group_apply(g, done, mem, n, &prog, ins);
        fused++;
        removed += n - 1;
    }
    if (rc == 0 && fused)
        FS_LOG_I("engine", "element-wise chains: %d groups fused, %d ops removed", fused, removed);
out:
    free(mem);
    free(mops);
    state_free(&st);
    return rc;
}
