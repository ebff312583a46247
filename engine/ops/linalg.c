/* linalg.c -- definitions (validation, dtype and shape inference) of the
 * linalg ops (MatMul, Gemm, Einsum) and the shape analysis their kernels
 * share. */
#include <ctype.h>
#include <string.h>

#include "common/error.h"
#include "engine/ops/linalg_impl.h"

static const eng_dtype_t dt_float_double[] = {ENG_DT_FLOAT, ENG_DT_DOUBLE, ENG_DT_UNDEFINED};
/* MatMul and Gemm take half and bfloat16 as they are: a GPU multiplies them
 * on tensor cores with float accumulation, the CPU through float. */
static const eng_dtype_t dt_gemm[] = {ENG_DT_FLOAT, ENG_DT_FLOAT16, ENG_DT_BFLOAT16,
                                      ENG_DT_UNDEFINED};
static const eng_dtype_t dt_matmul[] = {ENG_DT_FLOAT, ENG_DT_DOUBLE, ENG_DT_FLOAT16,
                                        ENG_DT_BFLOAT16, ENG_DT_UNDEFINED};

/* MatMul's, Gemm's and Einsum's operand dtypes: inputs [0, n) each in
 * `allowed` (FS_ENOTSUP naming the first other, which lets a half input of
 * Einsum widen), and all the same, absent optional inputs aside (FS_EINVAL
 * naming the two that differ). */
static int linalg_same_dtype(const eng_op_ctx_t *c, int n, const eng_dtype_t *allowed)
{
    int rc;
    for (int i = 0; i < n; i++)
        if (eng_ctx_in(c, i) && (rc = eng_op_require_dtype(c, i, allowed)))
            return rc;
    for (int i = 1; i < n; i++)
        if (eng_ctx_in(c, i) && c->inputs[i]->dtype != c->inputs[0]->dtype)
            return eng_op_err(c, FS_EINVAL, "input 0 has dtype %s and input %d dtype %s; the "
                              "operands must share one dtype",
                              eng_dtype_name(c->inputs[0]->dtype), i,
                              eng_dtype_name(c->inputs[i]->dtype));
    return 0;
}

int eng_matmul_dims(const eng_op_ctx_t *c, eng_matmul_dims_t *d)
{
    const eng_shape_t *as = &c->inputs[0]->shape, *bs = &c->inputs[1]->shape;
    char sa[96], sb[96];
    if (as->rank < 1 || bs->rank < 1)
        return eng_op_err(c, FS_EINVAL, "A %s and B %s: operands must have rank >= 1",
                          eng_shape_format(as, sa, sizeof sa), eng_shape_format(bs, sb, sizeof sb));
    memset(d, 0, sizeof *d);
    d->trans_b = c->node && c->node->trans_b;
    if (d->trans_b && bs->rank < 2)
        return eng_op_err(c, FS_EINVAL, "B %s is stored transposed but has rank 1",
                          eng_shape_format(bs, sb, sizeof sb));
    d->m = as->rank == 1 ? 1 : as->dims[as->rank - 2];
    d->k = as->dims[as->rank - 1];
    /* B's K and N axes: the last two, swapped when B is stored transposed. */
    int kx = d->trans_b ? bs->rank - 1 : bs->rank - 2, nx = d->trans_b ? bs->rank - 2 : bs->rank - 1;
    int64_t bk = bs->rank == 1 ? bs->dims[0] : bs->dims[kx];
    d->n = bs->rank == 1 ? 1 : bs->dims[nx];
    if (bk != d->k)
        return eng_op_err(c, FS_EINVAL, "A %s and B %s%s: inner dims %lld and %lld differ",
                          eng_shape_format(as, sa, sizeof sa), eng_shape_format(bs, sb, sizeof sb),
                          d->trans_b ? " (stored transposed)" : "", (long long)d->k,
                          (long long)bk);
    int ab = as->rank > 2 ? as->rank - 2 : 0, bb = bs->rank > 2 ? bs->rank - 2 : 0;
    d->batch_rank = ab > bb ? ab : bb;
    int64_t a_acc = d->m * d->k, b_acc = d->k * d->n;
    for (int i = d->batch_rank - 1; i >= 0; i--) {
        int ia = i - (d->batch_rank - ab), ib = i - (d->batch_rank - bb);
        int64_t da = ia >= 0 ? as->dims[ia] : 1, db = ib >= 0 ? bs->dims[ib] : 1;
        if (da != db && da != 1 && db != 1)
            return eng_op_err(c, FS_EINVAL, "A %s and B %s: batch dims do not broadcast",
                              eng_shape_format(as, sa, sizeof sa),
                              eng_shape_format(bs, sb, sizeof sb));
        d->batch[i] = da == 1 ? db : da;
        d->a_stride[i] = da == 1 ? 0 : a_acc;
        d->b_stride[i] = db == 1 ? 0 : b_acc;
        a_acc *= da;
        b_acc *= db;
    }
    d->out.rank = d->batch_rank;
    memcpy(d->out.dims, d->batch, sizeof(int64_t) * (size_t)d->batch_rank);
    if (as->rank > 1)
        d->out.dims[d->out.rank++] = d->m;
    if (bs->rank > 1)
        d->out.dims[d->out.rank++] = d->n;
    return 0;
}

int eng_matmul_bias_check(const eng_op_ctx_t *c, const eng_matmul_dims_t *d)
{
    if (!c->node || !c->node->bias)
        return 0;
    const eng_tensor_t *bt = eng_ctx_in(c, 2);
    if (!bt)
        return eng_op_err(c, FS_EINVAL, "the fused bias (input 2) is missing");
    char sb[96];
    const eng_shape_t *bs = &bt->shape;
    bool ok = bs->rank >= 1 && bs->rank <= (d->out.rank > 1 ? d->out.rank : 1) &&
              bs->dims[bs->rank - 1] == d->n;
    for (int i = 0; ok && i < bs->rank - 1; i++)
        ok = bs->dims[i] == 1;
    if (!ok)
        return eng_op_err(c, FS_EINVAL, "the fused bias %s is not a vector of N = %lld elements "
                          "along Y's last axis", eng_shape_format(bs, sb, sizeof sb),
                          (long long)d->n);
    if (bt->dtype != c->inputs[0]->dtype)
        return eng_op_err(c, FS_EINVAL, "the fused bias has dtype %s, the operands %s",
                          eng_dtype_name(bt->dtype), eng_dtype_name(c->inputs[0]->dtype));
    if (!c->node->residual)
        return 0;
    const eng_tensor_t *rt = eng_ctx_in(c, 3);
    if (!rt)
        return eng_op_err(c, FS_EINVAL, "the fused residual (input 3) is missing");
    char sr[96], sy[96];
    if (!eng_shape_equal(&rt->shape, &d->out))
        return eng_op_err(c, FS_EINVAL, "the fused residual %s differs from the product %s",
                          eng_shape_format(&rt->shape, sr, sizeof sr),
                          eng_shape_format(&d->out, sy, sizeof sy));
    if (rt->dtype != c->inputs[0]->dtype)
        return eng_op_err(c, FS_EINVAL, "the fused residual has dtype %s, the operands %s",
                          eng_dtype_name(rt->dtype), eng_dtype_name(c->inputs[0]->dtype));
    return 0;
}

static int matmul_infer(eng_op_ctx_t *c)
{
    eng_matmul_dims_t d;
    int rc;
    if ((rc = linalg_same_dtype(c, 2, dt_matmul)) || (rc = eng_matmul_dims(c, &d)) ||
        (rc = eng_matmul_bias_check(c, &d)))
        return rc;
    c->outputs[0]->dtype = c->inputs[0]->dtype;
    c->outputs[0]->shape = d.out;
    return 0;
}

static int gemm_infer(eng_op_ctx_t *c)
{
    int rc;
    if ((rc = linalg_same_dtype(c, 3, dt_gemm)))
        return rc;
    const eng_shape_t *as = &c->inputs[0]->shape, *bs = &c->inputs[1]->shape;
    const eng_tensor_t *ct = eng_ctx_in(c, 2);
    char sa[96], sb[96], sc[96];
    if (as->rank != 2 || bs->rank != 2)
        return eng_op_err(c, FS_EINVAL, "A %s and B %s must both have rank 2",
                          eng_shape_format(as, sa, sizeof sa), eng_shape_format(bs, sb, sizeof sb));
    bool ta = eng_attr_i(c->node, "transA", 0) != 0, tb = eng_attr_i(c->node, "transB", 0) != 0;
    int64_t m = as->dims[ta ? 1 : 0], k = as->dims[ta ? 0 : 1];
    int64_t kb = bs->dims[tb ? 1 : 0], n = bs->dims[tb ? 0 : 1];
    if (k != kb)
        return eng_op_err(c, FS_EINVAL, "A %s (transA=%d) and B %s (transB=%d): inner dims "
                          "%lld and %lld differ", eng_shape_format(as, sa, sizeof sa), ta,
                          eng_shape_format(bs, sb, sizeof sb), tb, (long long)k, (long long)kb);
    if (!ct && c->opset < 11)
        return eng_op_err(c, FS_EINVAL, "input C is required before opset 11");
    if (ct) {
        const eng_shape_t *cs = &ct->shape;
        bool ok = cs->rank <= 2;
        for (int i = 0; ok && i < cs->rank; i++) {
            int64_t want = i == cs->rank - 1 ? n : m;
            ok = cs->dims[i] == want || cs->dims[i] == 1;
        }
        if (!ok)
            return eng_op_err(c, FS_EINVAL, "C %s does not broadcast to [%lld,%lld]",
                              eng_shape_format(cs, sc, sizeof sc), (long long)m, (long long)n);
    }
    eng_tensor_t *y = c->outputs[0];
    y->dtype = c->inputs[0]->dtype;
    y->shape.rank = 2;
    y->shape.dims[0] = m;
    y->shape.dims[1] = n;
    return 0;
}

/* Label id of an equation letter, or -1. */
static int einsum_letter(char ch)
{
    if (ch >= 'A' && ch <= 'Z')
        return ch - 'A';
    if (ch >= 'a' && ch <= 'z')
        return 26 + ch - 'a';
    return -1;
}

/* One term of the equation ("ij", "...k"): its letters' labels in order,
 * and where the ellipsis stands (-1: none). */
typedef struct einsum_term {
    int n;                     /* letters */
    int letter[ENG_MAX_RANK + 1];
    int ellipsis_at;           /* letters before the "..." */
} einsum_term_t;

/* Parses the term at *p up to ',' / '-' / end. 0, or FS_EINVAL. */
static int einsum_term(const eng_op_ctx_t *c, const char *eq, const char **p, einsum_term_t *t)
{
    t->n = 0;
    t->ellipsis_at = -1;
    const char *s = *p;
    for (; *s && *s != ',' && *s != '-'; s++) {
        if (isspace((unsigned char)*s))
            continue;
        if (strncmp(s, "...", 3) == 0 && t->ellipsis_at < 0) {
            t->ellipsis_at = t->n;
            s += 2;
            continue;
        }
        int l = einsum_letter(*s);
        if (l < 0 || t->n > ENG_MAX_RANK)
            return eng_op_err(c, FS_EINVAL, "equation '%s': unexpected '%c' or too many "
                              "letters in a term", eq, *s);
        t->letter[t->n++] = l;
    }
    *p = s;
    return 0;
}

/* Binds one operand's term to its shape: labels per axis and label sizes.
 * 0, or FS_EINVAL. */
static int einsum_bind(const eng_op_ctx_t *c, const char *eq, int op, const einsum_term_t *t,
                       int ell_rank, eng_einsum_t *e)
{
    const eng_shape_t *s = &c->inputs[op]->shape;
    int own = s->rank - t->n;
    if (own < 0 || (t->ellipsis_at < 0 && own != 0))
        return eng_op_err(c, FS_EINVAL, "equation '%s': term %d has %d letters for input "
                          "rank %d", eq, op, t->n, s->rank);
    e->rank[op] = s->rank;
    for (int ax = 0, li = 0; ax < s->rank; ax++) {
        int l;
        if (t->ellipsis_at >= 0 && ax >= t->ellipsis_at && ax < t->ellipsis_at + own)
            l = 52 + ell_rank - own + (ax - t->ellipsis_at);
        else
            l = t->letter[li++];
        e->label[op][ax] = l;
        int64_t dim = s->dims[ax], *size = &e->size[l];
        if (*size < 0 || (l >= 52 && *size == 1))
            *size = dim;
        else if (dim != *size && !(l >= 52 && dim == 1))
            return eng_op_err(c, FS_EINVAL, "equation '%s': input %d axis %d has size %lld, "
                              "another use of its label has %lld", eq, op, ax, (long long)dim,
                              (long long)*size);
    }
    return 0;
}

int eng_einsum_parse(const eng_op_ctx_t *c, eng_einsum_t *e)
{
    const char *eq = eng_attr_s(c->node, "equation", NULL);
    if (!eq)
        return eng_op_err(c, FS_EINVAL, "attribute equation is missing");
    if (c->n_inputs > ENG_EINSUM_MAX_OPERANDS)
        return eng_op_err(c, FS_ENOTSUP, "%d operands; at most %d are supported", c->n_inputs,
                          ENG_EINSUM_MAX_OPERANDS);
    memset(e, 0, sizeof *e);
    for (int l = 0; l < ENG_EINSUM_MAX_LABELS; l++)
        e->size[l] = -1;
    einsum_term_t terms[ENG_EINSUM_MAX_OPERANDS];
    const char *p = eq;
    int n = 0, ell_rank = 0, rc;
    for (;;) {
        if (n == c->n_inputs)
            return eng_op_err(c, FS_EINVAL, "equation '%s' has more terms than the %d inputs",
                              eq, c->n_inputs);
        if ((rc = einsum_term(c, eq, &p, &terms[n])))
            return rc;
        if (!c->inputs[n])
            return eng_op_err(c, FS_EINVAL, "input %d is missing", n);
        int own = c->inputs[n]->shape.rank - terms[n].n;
        if (terms[n].ellipsis_at >= 0 && own > ell_rank)
            ell_rank = own;
        n++;
        if (*p != ',')
            break;
        p++;
    }
    if (n != c->n_inputs)
        return eng_op_err(c, FS_EINVAL, "equation '%s' has %d terms for %d inputs", eq, n,
                          c->n_inputs);
    e->n_operands = n;
    for (int i = 0; i < n; i++)
        if ((rc = einsum_bind(c, eq, i, &terms[i], ell_rank, e)))
            return rc;
    if (*p == '-') {
        if (p[1] != '>')
            return eng_op_err(c, FS_EINVAL, "equation '%s': expected '->'", eq);
        p += 2;
        einsum_term_t out;
        if ((rc = einsum_term(c, eq, &p, &out)))
            return rc;
        if (*p)
            return eng_op_err(c, FS_EINVAL, "equation '%s': unexpected '%c' in the output", eq,
                              *p);
        for (int i = 0, li = 0; i < out.n + (out.ellipsis_at >= 0 ? ell_rank : 0); i++) {
            int l;
            if (out.ellipsis_at >= 0 && i >= out.ellipsis_at && i < out.ellipsis_at + ell_rank)
                l = 52 + i - out.ellipsis_at;
            else
                l = out.letter[li++];
            for (int j = 0; j < e->n_out; j++)
                if (e->out[j] == l)
                    return eng_op_err(c, FS_EINVAL, "equation '%s': an output label repeats", eq);
            if (e->size[l] < 0)
                return eng_op_err(c, FS_EINVAL, "equation '%s': an output label is not in any "
                                  "input", eq);
            if (e->n_out == ENG_MAX_RANK)
                return eng_op_err(c, FS_EINVAL, "equation '%s': output rank over %d", eq,
                                  ENG_MAX_RANK);
            e->out[e->n_out++] = l;
        }
    } else {
        int uses[ENG_EINSUM_MAX_LABELS] = {0};
        for (int i = 0; i < n; i++)
            for (int ax = 0; ax < e->rank[i]; ax++)
                uses[e->label[i][ax]]++;
        for (int l = 52; l < 52 + ell_rank; l++)
            e->out[e->n_out++] = l;
        for (int l = 0; l < 52; l++)
            if (uses[l] == 1) {
                if (e->n_out == ENG_MAX_RANK)
                    return eng_op_err(c, FS_EINVAL, "equation '%s': output rank over %d", eq,
                                      ENG_MAX_RANK);
                e->out[e->n_out++] = l;
            }
    }
    return 0;
}

static int einsum_infer(eng_op_ctx_t *c)
{
    eng_einsum_t e;
    int rc;
    if ((rc = linalg_same_dtype(c, c->n_inputs, dt_float_double)) || (rc = eng_einsum_parse(c, &e)))
        return rc;
    eng_tensor_t *y = c->outputs[0];
    y->dtype = c->inputs[0]->dtype;
    y->shape.rank = e.n_out;
    for (int i = 0; i < e.n_out; i++)
        y->shape.dims[i] = e.size[e.out[i]];
    return 0;
}

/* ---- Det ------------------------------------------------------------------------ */

int eng_det_params(const eng_op_ctx_t *c, eng_det_t *p)
{
    const eng_shape_t *s = &c->inputs[0]->shape;
    int r = s->rank;
    if (r < 2 || s->dims[r - 1] != s->dims[r - 2]) {
        char got[96];
        eng_shape_format(s, got, sizeof got);
        return eng_op_err(c, FS_EINVAL, "input 0 has shape %s; it must be [..., n, n]", got);
    }
    p->n = s->dims[r - 1];
    p->batch = 1;
    for (int d = 0; d < r - 2; d++)
        p->batch *= s->dims[d];
    return 0;
}

static int det_infer(eng_op_ctx_t *c)
{
    eng_det_t p;
    int rc = eng_op_require_dtype(c, 0, dt_float_double);
    if (rc || (rc = eng_det_params(c, &p)))
        return rc;
    eng_shape_t ys = c->inputs[0]->shape;
    ys.rank -= 2;
    eng_ctx_out_set(c, 0, c->inputs[0]->dtype, &ys);
    return 0;
}

ENG_OP_DEF(MatMul, NULL, matmul_infer, -1);
ENG_OP_DEF(Gemm, NULL, gemm_infer, -1);
static int einsum_check(const eng_node_t *n, int opset)
{
    eng_op_ctx_t c = {.node = n, .opset = opset};
    if (!eng_attr_s(n, "equation", NULL))
        return eng_op_err(&c, FS_EINVAL, "attribute equation is missing");
    if (n->n_inputs > ENG_EINSUM_MAX_OPERANDS)
        return eng_op_err(&c, FS_ENOTSUP, "%d operands; at most %d are supported", n->n_inputs,
                          ENG_EINSUM_MAX_OPERANDS);
    return 0;
}

ENG_OP_DEF(Einsum, einsum_check, einsum_infer, -1);
ENG_OP_DEF(Det, NULL, det_infer, -1);

void eng_einsum_strides(const eng_op_ctx_t *c, const eng_einsum_t *e,
                        int64_t stride[ENG_EINSUM_MAX_OPERANDS][ENG_EINSUM_MAX_LABELS])
{
    memset(stride, 0, sizeof(int64_t) * ENG_EINSUM_MAX_OPERANDS * ENG_EINSUM_MAX_LABELS);
    for (int op = 0; op < e->n_operands; op++) {
        const eng_shape_t *s = &c->inputs[op]->shape;
        int64_t st = 1;
        for (int ax = s->rank - 1; ax >= 0; ax--) {
            int l = e->label[op][ax];
            if (s->dims[ax] == e->size[l])
                stride[op][l] += st;
            st *= s->dims[ax];
        }
    }
}

bool eng_einsum_as_gemm(const eng_op_ctx_t *c, const eng_einsum_t *e, eng_einsum_gemm_t *p)
{
    if (e->n_operands != 2)
        return false;
    int in[ENG_EINSUM_MAX_LABELS] = {0}; /* bit 0: A, bit 1: B, bit 2: Y */
    for (int op = 0; op < 2; op++)
        for (int ax = 0; ax < e->rank[op]; ax++) {
            int l = e->label[op][ax];
            if (in[l] & (1 << op) || c->inputs[op]->shape.dims[ax] != e->size[l])
                return false;
            in[l] |= 1 << op;
        }
    for (int i = 0; i < e->n_out; i++)
        in[e->out[i]] |= 4;
    memset(p, 0, sizeof *p);
    for (int r = 0; r < 4; r++)
        p->len[r] = 1;
    static const int role_of[8] = {-1, -1, -1, ENG_EINSUM_K, -1, ENG_EINSUM_M, ENG_EINSUM_N,
                                   ENG_EINSUM_BATCH};
    for (int i = 0; i < e->n_out; i++) {
        int l = e->out[i], r = role_of[in[l]];
        p->lab[r][p->n[r]++] = l;
        p->len[r] *= e->size[l];
    }
    for (int l = 0; l < ENG_EINSUM_MAX_LABELS; l++) {
        if (!in[l] || in[l] & 4)
            continue;
        if (role_of[in[l]] != ENG_EINSUM_K)
            return false;
        p->lab[ENG_EINSUM_K][p->n[ENG_EINSUM_K]++] = l;
        p->len[ENG_EINSUM_K] *= e->size[l];
    }
    return true;
}
