/* nn.c -- definitions (validation, dtype and shape inference) of the nn ops:
 * convolutions, pools and normalisations, and their shared window geometry. */
#include <limits.h>
#include <string.h>

#include "common/error.h"
#include "engine/ops/nn_impl.h"

static const eng_dtype_t dt_float[] = {ENG_DT_FLOAT, ENG_DT_UNDEFINED};
/* The ops that take float16 and bfloat16 as they are (a GPU computes on them
 * with float arithmetic, the CPU through float): X, its parameters and Y in
 * one of these. */
static const eng_dtype_t dt_half[] = {ENG_DT_FLOAT, ENG_DT_FLOAT16, ENG_DT_BFLOAT16,
                                      ENG_DT_UNDEFINED};
static const eng_dtype_t dt_half_u8[] = {ENG_DT_FLOAT, ENG_DT_FLOAT16, ENG_DT_BFLOAT16,
                                         ENG_DT_UINT8, ENG_DT_UNDEFINED};
static const eng_dtype_t dt_real[] = {ENG_DT_FLOAT, ENG_DT_DOUBLE, ENG_DT_FLOAT16, ENG_DT_BFLOAT16,
                                      ENG_DT_UNDEFINED};

typedef enum auto_pad { PAD_NOTSET, PAD_VALID, PAD_SAME_UPPER, PAD_SAME_LOWER } auto_pad_t;

/* Reads auto_pad. 0, or FS_ENOTSUP naming the value; *out untouched then. */
static int read_auto_pad(const eng_op_ctx_t *c, auto_pad_t *out)
{
    const char *s = eng_attr_s(c->node, "auto_pad", "NOTSET");
    static const struct { const char *name; auto_pad_t v; } names[] = {
        {"NOTSET", PAD_NOTSET}, {"", PAD_NOTSET}, {"VALID", PAD_VALID},
        {"SAME_UPPER", PAD_SAME_UPPER}, {"SAME_LOWER", PAD_SAME_LOWER},
    };
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++)
        if (strcmp(s, names[i].name) == 0) {
            *out = names[i].v;
            return 0;
        }
    return eng_op_err(c, FS_ENOTSUP, "auto_pad '%s' is not supported (NOTSET, VALID, "
                      "SAME_UPPER, SAME_LOWER)", s);
}

/* Reads an INTS attribute of `want` values, each in min..ENG_NUMEL_MAX,
 * into the normalised slots of `dst` (left as they are when the attribute
 * is absent). 0, or FS_EINVAL naming the attribute. (The bound keeps the
 * window arithmetic here and in the kernels inside int64.) */
static int read_spatial_ints(const eng_op_ctx_t *c, const char *name, int want, int64_t min,
                             int64_t dst[ENG_NN_DIMS])
{
    size_t n;
    const int64_t *v = eng_attr_ints(c->node, name, &n);
    if (!v)
        return 0;
    if (n != (size_t)want)
        return eng_op_err(c, FS_EINVAL, "attribute %s has %zu values, expected %d", name, n, want);
    for (int i = 0; i < want; i++) {
        if (v[i] < min || v[i] > ENG_NUMEL_MAX)
            return eng_op_err(c, FS_EINVAL, "attribute %s[%d] is %lld, must be %lld..%lld", name,
                              i, (long long)v[i], (long long)min, (long long)ENG_NUMEL_MAX);
        dst[ENG_NN_DIMS - want + i] = v[i];
    }
    return 0;
}

/* Channel counts from X and W for the convolutions. 0 or FS_EINVAL. */
static int conv_channels(const eng_op_ctx_t *c, eng_nn_kind_t kind, const eng_tensor_t *x,
                         const eng_tensor_t *w, eng_nn_geom_t *g)
{
    char xs[96], ws[96];
    g->group = eng_attr_i(c->node, "group", 1);
    if (g->group < 1 || g->group > ENG_NUMEL_MAX)
        return eng_op_err(c, FS_EINVAL, "group is %lld, must be 1..%lld", (long long)g->group,
                          (long long)ENG_NUMEL_MAX);
    if (w->shape.rank != x->shape.rank)
        return eng_op_err(c, FS_EINVAL, "W %s and X %s differ in rank",
                          eng_shape_format(&w->shape, ws, sizeof ws),
                          eng_shape_format(&x->shape, xs, sizeof xs));
    const int64_t *wd = w->shape.dims;
    /* Channels-last W is [M, k..., C/group]. */
    int64_t w_in = c->node->channels_last ? wd[w->shape.rank - 1] : wd[1];
    bool ok;
    if (kind == ENG_NN_CONV) {
        ok = eng_dim_mul(w_in, g->group) == g->in_channels && wd[0] % g->group == 0;
        g->out_channels = wd[0];
    } else {
        ok = wd[0] == g->in_channels && g->in_channels % g->group == 0;
        g->out_channels = eng_dim_mul(wd[1], g->group);
    }
    if (!ok)
        return eng_op_err(c, FS_EINVAL, "W %s does not fit X %s with group %lld",
                          eng_shape_format(&w->shape, ws, sizeof ws),
                          eng_shape_format(&x->shape, xs, sizeof xs), (long long)g->group);
    return 0;
}

/* Splits a total padding between begin and end as auto_pad says: the
 * odd pixel goes to the end for SAME_UPPER, else to the begin. The half is
 * floored (as ONNX's reference does), so a negative total (ConvTranspose's
 * output_shape larger than the natural size) extends the end. */
static void split_pad(auto_pad_t ap, int64_t total, int64_t *begin, int64_t *end)
{
    int64_t half = total >= 0 ? total / 2 : -((-total + 1) / 2);
    if (ap == PAD_SAME_UPPER) {
        *begin = half;
        *end = total - half;
    } else {
        *begin = total - half;
        *end = half;
    }
}

/* The span of slot i's window with its dilation, (kernel - 1) * dilation
 * + 1, saturating (each factor is at most ENG_NUMEL_MAX, the product may
 * not be); callers refuse a span past ENG_NUMEL_MAX. */
static int64_t window_extent(const eng_nn_geom_t *g, int i)
{
    return eng_dim_add(eng_dim_mul(g->kernel[i] - 1, g->dilation[i]), 1);
}

/* Output dims of Conv and the pools (slot i of g). 0 or FS_EINVAL. */
static int window_out(const eng_op_ctx_t *c, auto_pad_t ap, bool ceil_mode, int i,
                      eng_nn_geom_t *g)
{
    int64_t ek = window_extent(g, i), s = g->stride[i];
    if (ek > ENG_NUMEL_MAX)
        return eng_op_err(c, FS_EINVAL, "spatial dim %d: the window (kernel %lld, dilation %lld) "
                          "spans more than %lld", i - (ENG_NN_DIMS - g->n_spatial),
                          (long long)g->kernel[i], (long long)g->dilation[i],
                          (long long)ENG_NUMEL_MAX);
    if (ap == PAD_SAME_UPPER || ap == PAD_SAME_LOWER) {
        g->out[i] = (g->in[i] + s - 1) / s;
        int64_t total = (g->out[i] - 1) * s + ek - g->in[i];
        split_pad(ap, total > 0 ? total : 0, &g->pad_begin[i], &g->pad_end[i]);
        return 0;
    }
    if (ap == PAD_VALID)
        g->pad_begin[i] = g->pad_end[i] = 0;
    int64_t span = g->in[i] + g->pad_begin[i] + g->pad_end[i] - ek;
    if (span < 0)
        return eng_op_err(c, FS_EINVAL, "spatial dim %d: the window (%lld with dilation) is "
                          "larger than the padded input (%lld)", i - (ENG_NN_DIMS - g->n_spatial),
                          (long long)ek, (long long)(g->in[i] + g->pad_begin[i] + g->pad_end[i]));
    g->out[i] = (ceil_mode ? (span + s - 1) / s : span / s) + 1;
    /* A last window that would start inside the end padding is dropped. */
    if (ceil_mode && (g->out[i] - 1) * s >= g->in[i] + g->pad_begin[i])
        g->out[i]--;
    return 0;
}

/* Output dims of ConvTranspose (every slot of g). 0 or FS_EINVAL. */
static int transpose_out(const eng_op_ctx_t *c, auto_pad_t ap, eng_nn_geom_t *g)
{
    int ns = g->n_spatial, base = ENG_NN_DIMS - ns;
    int64_t opad[ENG_NN_DIMS] = {0, 0, 0};
    int rc = read_spatial_ints(c, "output_padding", ns, 0, opad);
    if (rc)
        return rc;
    size_t n_os;
    const int64_t *os = eng_attr_ints(c->node, "output_shape", &n_os);
    if (os && n_os != (size_t)ns && n_os != (size_t)ns + 2)
        return eng_op_err(c, FS_EINVAL, "attribute output_shape has %zu values, expected %d",
                          n_os, ns);
    for (int i = base; i < ENG_NN_DIMS; i++) {
        /* Every term is at most ENG_NUMEL_MAX but the stride's product;
         * a size past the bound is refused before it is used. */
        int64_t ek = window_extent(g, i);
        int64_t full = eng_dim_add(eng_dim_add(eng_dim_mul(g->stride[i], g->in[i] - 1), opad[i]),
                                   ek);
        int64_t want = os ? os[n_os - (size_t)ns + (size_t)(i - base)]
                          : eng_dim_mul(g->in[i], g->stride[i]);
        bool fixed = os || ap == PAD_SAME_UPPER || ap == PAD_SAME_LOWER;
        if (full > ENG_NUMEL_MAX || (fixed && (want < 1 || want > ENG_NUMEL_MAX)))
            return eng_op_err(c, FS_EINVAL, "spatial dim %d of the output would be %lld, not "
                              "1..%lld", i - base, (long long)(fixed ? want : full),
                              (long long)ENG_NUMEL_MAX);
        if (fixed) {
            g->out[i] = want;
            split_pad(ap, full - g->out[i], &g->pad_begin[i], &g->pad_end[i]);
        } else {
            if (ap == PAD_VALID)
                g->pad_begin[i] = g->pad_end[i] = 0;
            g->out[i] = full - g->pad_begin[i] - g->pad_end[i];
        }
        if (g->out[i] < 1)
            return eng_op_err(c, FS_EINVAL, "spatial dim %d of the output would be %lld",
                              i - base, (long long)g->out[i]);
    }
    return 0;
}

int eng_nn_geom(const eng_op_ctx_t *c, eng_nn_kind_t kind, eng_nn_geom_t *g)
{
    const eng_tensor_t *x = eng_ctx_in(c, 0);
    const eng_tensor_t *w = kind == ENG_NN_POOL ? NULL : eng_ctx_in(c, 1);
    char xs[96];
    if (!x || (kind != ENG_NN_POOL && !w))
        return eng_op_err(c, FS_EINVAL, "input %s is missing", x ? "W" : "X");
    int rank = x->shape.rank, ns = rank - 2, base = ENG_NN_DIMS - ns;
    /* NCHW: [N, C, spatial...]; channels-last (graph.h): [N, spatial..., C],
     * and W's kernel dims start at 1 too. */
    bool cl = c->node->channels_last;
    int ch_at = cl ? rank - 1 : 1, sp_at = cl ? 1 : 2;
    if (cl && kind == ENG_NN_CONV_TRANSPOSE)
        return eng_op_err(c, FS_ENOTSUP, "ConvTranspose has no channels-last form");
    if (rank < 3)
        return eng_op_err(c, FS_EINVAL, "X %s must have rank >= 3 ([N, C, spatial...])",
                          eng_shape_format(&x->shape, xs, sizeof xs));
    if (ns > ENG_NN_DIMS)
        return eng_op_err(c, FS_ENOTSUP, "X %s has %d spatial dims; at most %d are supported",
                          eng_shape_format(&x->shape, xs, sizeof xs), ns, ENG_NN_DIMS);
    memset(g, 0, sizeof *g);
    g->n_spatial = ns;
    g->batch = x->shape.dims[0];
    g->in_channels = g->out_channels = x->shape.dims[ch_at];
    g->group = 1;
    for (int i = 0; i < ENG_NN_DIMS; i++) {
        g->in[i] = i < base ? 1 : x->shape.dims[sp_at + i - base];
        g->out[i] = g->kernel[i] = g->stride[i] = g->dilation[i] = 1;
    }
    int rc = w ? conv_channels(c, kind, x, w, g) : 0;
    if (rc)
        return rc;
    size_t nk;
    const int64_t *ks = eng_attr_ints(c->node, "kernel_shape", &nk);
    if (!ks && !w)
        return eng_op_err(c, FS_EINVAL, "attribute kernel_shape is missing");
    if (ks && nk != (size_t)ns)
        return eng_op_err(c, FS_EINVAL, "attribute kernel_shape has %zu values, expected %d",
                          nk, ns);
    for (int i = 0; i < ns; i++) {
        int64_t wk = w ? w->shape.dims[(cl ? 1 : 2) + i] : -1;
        int64_t k = ks ? ks[i] : wk;
        if (k < 1 || k > ENG_NUMEL_MAX || (ks && w && ks[i] != wk))
            return eng_op_err(c, FS_EINVAL, "kernel dim %d is %lld (W dim %lld)", i,
                              (long long)k, (long long)wk);
        g->kernel[base + i] = k;
    }
    auto_pad_t ap = PAD_NOTSET;
    int64_t pads[2 * ENG_NN_DIMS] = {0};
    size_t np;
    const int64_t *pv = eng_attr_ints(c->node, "pads", &np);
    if ((rc = read_auto_pad(c, &ap)) || (rc = read_spatial_ints(c, "strides", ns, 1, g->stride)) ||
        (rc = read_spatial_ints(c, "dilations", ns, 1, g->dilation)))
        return rc;
    if (pv && np != (size_t)(2 * ns))
        return eng_op_err(c, FS_EINVAL, "attribute pads has %zu values, expected %d", np, 2 * ns);
    for (int i = 0; pv && i < 2 * ns; i++) {
        if (pv[i] < 0 || pv[i] > ENG_NUMEL_MAX)
            return eng_op_err(c, FS_EINVAL, "attribute pads[%d] is %lld, must be 0..%lld", i,
                              (long long)pv[i], (long long)ENG_NUMEL_MAX);
        pads[i] = pv[i];
    }
    for (int i = 0; i < ns; i++) {
        g->pad_begin[base + i] = pads[i];
        g->pad_end[base + i] = pads[ns + i];
    }
    if (kind == ENG_NN_CONV_TRANSPOSE)
        return transpose_out(c, ap, g);
    bool ceil_mode = kind == ENG_NN_POOL && eng_attr_i(c->node, "ceil_mode", 0) != 0;
    for (int i = base; i < ENG_NN_DIMS; i++)
        if ((rc = window_out(c, ap, ceil_mode, i, g)))
            return rc;
    return 0;
}

/* Sets output `i` (when requested) to dtype dt and shape [N, M, out...],
 * or [N, out..., M] for a channels-last node. */
static void set_window_output(eng_op_ctx_t *c, int i, eng_dtype_t dt, const eng_nn_geom_t *g)
{
    if (i >= c->n_outputs || !c->outputs[i])
        return;
    bool cl = c->node->channels_last;
    eng_tensor_t *y = c->outputs[i];
    y->dtype = dt;
    y->shape.rank = g->n_spatial + 2;
    y->shape.dims[0] = g->batch;
    y->shape.dims[cl ? g->n_spatial + 1 : 1] = g->out_channels;
    for (int d = 0; d < g->n_spatial; d++)
        y->shape.dims[(cl ? 1 : 2) + d] = g->out[ENG_NN_DIMS - g->n_spatial + d];
}

/* A channels-last Conv's fused residual (graph.h: input 3, of Y's dtype and
 * shape). 0, or FS_EINVAL naming what does not fit: the fields without
 * channels_last, a missing R, or R's shape. */
static int check_conv_fused(eng_op_ctx_t *c)
{
    const eng_node_t *n = c->node;
    if ((n->conv_relu || n->conv_residual) && !n->channels_last)
        return eng_op_err(c, FS_EINVAL, "a fused ReLU or residual needs the channels-last form");
    if (!n->conv_residual)
        return c->n_inputs > 3 && c->inputs[3]
                   ? eng_op_err(c, FS_EINVAL, "input 3 without a fused residual")
                   : 0;
    const eng_tensor_t *r = eng_ctx_in(c, 3), *y = c->outputs[0];
    if (!r)
        return eng_op_err(c, FS_EINVAL, "the fused residual (input 3) is missing");
    const eng_dtype_t x_dtype[] = {c->inputs[0]->dtype, ENG_DT_UNDEFINED};
    int rc = eng_op_require_dtype(c, 3, x_dtype);
    char rs[96], ys[96];
    if (rc == 0 && y && !eng_shape_equal(&r->shape, &y->shape))
        rc = eng_op_err(c, FS_EINVAL, "the fused residual %s differs from Y %s",
                        eng_shape_format(&r->shape, rs, sizeof rs),
                        eng_shape_format(&y->shape, ys, sizeof ys));
    return rc;
}

/* Checks that optional input i, when present, is a vector of `len` in X's
 * dtype (input 0's, which the caller checked). 0, FS_ENOTSUP (dtype) or
 * FS_EINVAL naming the input and its shape. */
static int check_vector(const eng_op_ctx_t *c, int i, const char *what, int64_t len)
{
    const eng_tensor_t *t = eng_ctx_in(c, i);
    if (!t)
        return 0;
    const eng_dtype_t x_dtype[] = {c->inputs[0]->dtype, ENG_DT_UNDEFINED};
    int rc = eng_op_require_dtype(c, i, x_dtype);
    if (rc)
        return rc;
    char ts[96];
    if (t->shape.rank != 1 || t->shape.dims[0] != len)
        return eng_op_err(c, FS_EINVAL, "%s (input %d) has shape %s, expected [%lld]", what, i,
                          eng_shape_format(&t->shape, ts, sizeof ts), (long long)len);
    return 0;
}

static int conv_infer(eng_op_ctx_t *c)
{
    eng_nn_geom_t g;
    int rc;
    bool transpose = strcmp(c->node->op_type, "ConvTranspose") == 0;
    const eng_dtype_t x_dtype[] = {c->inputs[0]->dtype, ENG_DT_UNDEFINED};
    if ((rc = eng_op_require_dtype(c, 0, dt_half)) || (rc = eng_op_require_dtype(c, 1, x_dtype)) ||
        (rc = eng_nn_geom(c, transpose ? ENG_NN_CONV_TRANSPOSE : ENG_NN_CONV, &g)) ||
        (rc = check_vector(c, 2, "B", g.out_channels)))
        return rc;
    set_window_output(c, 0, c->inputs[0]->dtype, &g);
    return c->n_outputs > 0 && c->outputs[0] ? check_conv_fused(c) : 0;
}

static int pool_infer(eng_op_ctx_t *c)
{
    eng_nn_geom_t g;
    bool max = strcmp(c->node->op_type, "MaxPool") == 0;
    int rc = eng_op_require_dtype(c, 0, max ? dt_half_u8 : dt_half);
    if (rc || (rc = eng_nn_geom(c, ENG_NN_POOL, &g)))
        return rc;
    if (c->node->channels_last && c->n_outputs > 1 && c->outputs[1])
        return eng_op_err(c, FS_ENOTSUP, "MaxPool's Indices have no channels-last form");
    set_window_output(c, 0, c->inputs[0]->dtype, &g);
    set_window_output(c, 1, ENG_DT_INT64, &g);
    return 0;
}

int eng_nn_lp_p(const eng_op_ctx_t *c, double *p)
{
    /* An int from opset 2 (a float before it, below the opsets loaded). */
    *p = (double)eng_attr_i(c->node, "p", 2);
    if (!(*p > 0))
        return eng_op_err(c, FS_EINVAL, "p is %g, must be positive", *p);
    return 0;
}

/* LpPool: float, double or half X (computed in double); Y of X's dtype. */
static int lp_pool_infer(eng_op_ctx_t *c)
{
    eng_nn_geom_t g;
    double p;
    int rc = eng_op_require_dtype(c, 0, dt_real);
    if (rc || (rc = eng_nn_lp_p(c, &p)) || (rc = eng_nn_geom(c, ENG_NN_POOL, &g)))
        return rc;
    set_window_output(c, 0, c->inputs[0]->dtype, &g);
    return 0;
}

/* GlobalLpPool: X [N, C, spatial...] of a float dtype; Y [N, C, 1...]. */
static int global_lp_pool_infer(eng_op_ctx_t *c)
{
    double p;
    int rc = eng_op_require_dtype(c, 0, dt_real);
    if (rc || (rc = eng_nn_lp_p(c, &p)))
        return rc;
    const eng_tensor_t *x = c->inputs[0];
    char xs[96];
    if (x->shape.rank < 3)
        return eng_op_err(c, FS_EINVAL, "X %s must have rank >= 3 ([N, C, spatial...])",
                          eng_shape_format(&x->shape, xs, sizeof xs));
    eng_shape_t ys = x->shape;
    for (int d = 2; d < ys.rank; d++)
        ys.dims[d] = 1;
    eng_ctx_out_set(c, 0, x->dtype, &ys);
    return 0;
}

/* Load-time check of Conv, ConvTranspose and the pools: attribute values
 * this implementation does not support fail the load, not the first run. */
static int window_check(const eng_node_t *n, int opset)
{
    eng_op_ctx_t c = {.node = n, .opset = opset};
    auto_pad_t ap;
    int rc = read_auto_pad(&c, &ap);
    if (rc)
        return rc;
    size_t nk;
    if (eng_attr_ints(n, "kernel_shape", &nk) && nk > ENG_NN_DIMS)
        return eng_op_err(&c, FS_ENOTSUP, "kernel_shape has %zu dims; at most %d spatial dims "
                          "are supported", nk, ENG_NN_DIMS);
    int64_t so = eng_attr_i(n, "storage_order", 0);
    if (strcmp(n->op_type, "MaxPool") == 0 && so != 0 && so != 1)
        return eng_op_err(&c, FS_EINVAL, "storage_order is %lld, must be 0 or 1", (long long)so);
    return 0;
}

/* X [N, C, ...] of a dtype in `allowed`, rank >= min_rank; the output
 * takes its type. */
static int channel_input(eng_op_ctx_t *c, int min_rank, const eng_dtype_t *allowed)
{
    int rc = eng_op_require_dtype(c, 0, allowed);
    if (rc)
        return rc;
    const eng_tensor_t *x = c->inputs[0];
    char xs[96];
    if (x->shape.rank < min_rank)
        return eng_op_err(c, FS_EINVAL, "X %s must have rank >= %d ([N, C, ...])",
                          eng_shape_format(&x->shape, xs, sizeof xs), min_rank);
    eng_ctx_out_set(c, 0, x->dtype, &x->shape);
    return 0;
}

/* X [N, C, spatial...]; the output keeps N and C, each spatial dim 1
 * (overwriting the X-shaped output channel_input set). */
static int global_pool_infer(eng_op_ctx_t *c)
{
    int rc = channel_input(c, 3, dt_half);
    if (rc)
        return rc;
    /* Channels-last X is [N, spatial..., C]. */
    bool cl = c->node->channels_last;
    eng_shape_t ys = c->inputs[0]->shape;
    for (int d = cl ? 1 : 2; d < (cl ? ys.rank - 1 : ys.rank); d++)
        ys.dims[d] = 1;
    eng_ctx_out_set(c, 0, c->inputs[0]->dtype, &ys);
    return 0;
}

static int batchnorm_check(const eng_node_t *n, int opset)
{
    eng_op_ctx_t c = {.node = n, .opset = opset};
    if (eng_attr_i(n, "training_mode", 0) != 0)
        return eng_op_err(&c, FS_ENOTSUP, "training_mode=1 is not supported (inference only)");
    /* Before opset 7, is_test=0 (the default) meant training. */
    if (opset < 7 && eng_attr_i(n, "is_test", 0) == 0)
        return eng_op_err(&c, FS_ENOTSUP, "is_test=0 at opset %d means training, which is not "
                          "supported (inference only)", opset);
    if (eng_attr_i(n, "spatial", 1) != 1)
        return eng_op_err(&c, FS_ENOTSUP, "spatial=0 is not supported");
    for (int i = 1; i < n->n_outputs; i++)
        if (n->outputs[i] >= 0)
            return eng_op_err(&c, FS_ENOTSUP, "output %d (training statistics) is not "
                              "supported (inference only)", i);
    return 0;
}

static int batchnorm_infer(eng_op_ctx_t *c)
{
    static const char *const names[] = {"scale", "B", "mean", "var"};
    int rc = channel_input(c, 2, dt_half);
    if (rc)
        return rc;
    for (int i = 1; i <= 4; i++) {
        if (!eng_ctx_in(c, i))
            return eng_op_err(c, FS_EINVAL, "input %s is missing", names[i - 1]);
        if ((rc = check_vector(c, i, names[i - 1], c->inputs[0]->shape.dims[1])))
            return rc;
    }
    return 0;
}

static int instancenorm_infer(eng_op_ctx_t *c)
{
    int rc = channel_input(c, 3, dt_half);
    if (rc)
        return rc;
    for (int i = 1; i <= 2; i++) {
        if (!eng_ctx_in(c, i))
            return eng_op_err(c, FS_EINVAL, "input %s is missing", i == 1 ? "scale" : "B");
        if ((rc = check_vector(c, i, i == 1 ? "scale" : "B", c->inputs[0]->shape.dims[1])))
            return rc;
    }
    return 0;
}

/* Whether `p` broadcasts unidirectionally to X's dims from `axis` on. */
static bool broadcasts_to_tail(const eng_shape_t *p, const eng_shape_t *x, int axis)
{
    if (p->rank > x->rank - axis)
        return false;
    for (int i = 0; i < p->rank; i++) {
        int64_t pd = p->dims[p->rank - 1 - i], xd = x->dims[x->rank - 1 - i];
        if (pd != xd && pd != 1)
            return false;
    }
    return true;
}

/* Y takes X's dtype; Mean and InvStdDev are float (stash_type 1, the
 * statistics' type) whatever X's. */
static int layernorm_infer(eng_op_ctx_t *c)
{
    int rc = eng_op_require_dtype(c, 0, dt_half), axis;
    if (rc || (rc = eng_op_axis(c, eng_attr_i(c->node, "axis", -1), c->inputs[0]->shape.rank,
                                &axis)))
        return rc;
    const eng_tensor_t *x = c->inputs[0];
    if (!eng_ctx_in(c, 1))
        return eng_op_err(c, FS_EINVAL, "input Scale is missing");
    for (int i = 1; i <= 2; i++) {
        const eng_tensor_t *p = eng_ctx_in(c, i);
        char ps[96], xs[96];
        if (!p)
            continue;
        const eng_dtype_t x_dtype[] = {x->dtype, ENG_DT_UNDEFINED};
        if ((rc = eng_op_require_dtype(c, i, x_dtype)))
            return rc;
        if (!broadcasts_to_tail(&p->shape, &x->shape, axis))
            return eng_op_err(c, FS_EINVAL, "%s %s does not broadcast to X %s from axis %d",
                              i == 1 ? "Scale" : "B", eng_shape_format(&p->shape, ps, sizeof ps),
                              eng_shape_format(&x->shape, xs, sizeof xs), axis);
    }
    c->outputs[0]->dtype = x->dtype;
    c->outputs[0]->shape = x->shape;
    for (int i = 1; i <= 2 && i < c->n_outputs; i++) {
        eng_tensor_t *s = c->outputs[i];
        if (!s)
            continue;
        s->dtype = ENG_DT_FLOAT;
        s->shape = x->shape;
        for (int d = axis; d < x->shape.rank; d++)
            s->shape.dims[d] = 1;
    }
    return 0;
}

/* The statistics run in double on every device: at least the precision
 * any stash_type asks for. */
static int rmsnorm_check(const eng_node_t *n, int opset)
{
    eng_op_ctx_t c = {.node = n, .opset = opset};
    int64_t st = eng_attr_i(n, "stash_type", ENG_DT_FLOAT);
    if (st != ENG_DT_FLOAT && st != ENG_DT_DOUBLE && st != ENG_DT_FLOAT16 && st != ENG_DT_BFLOAT16)
        return eng_op_err(&c, FS_EINVAL, "stash_type is %lld, must be a float dtype (1, 10, 11 "
                          "or 16)", (long long)st);
    return 0;
}

static int rmsnorm_infer(eng_op_ctx_t *c)
{
    int rc = eng_op_require_dtype(c, 0, dt_half), axis;
    const eng_dtype_t x_dtype[] = {c->inputs[0]->dtype, ENG_DT_UNDEFINED};
    if (rc || (rc = eng_op_require_dtype(c, 1, x_dtype)) ||
        (rc = eng_op_axis(c, eng_attr_i(c->node, "axis", -1), c->inputs[0]->shape.rank, &axis)))
        return rc;
    const eng_tensor_t *x = c->inputs[0], *p = c->inputs[1];
    char ps[96], xs[96];
    if (!broadcasts_to_tail(&p->shape, &x->shape, axis))
        return eng_op_err(c, FS_EINVAL, "scale %s does not broadcast to X %s from axis %d",
                          eng_shape_format(&p->shape, ps, sizeof ps),
                          eng_shape_format(&x->shape, xs, sizeof xs), axis);
    eng_ctx_out_set(c, 0, x->dtype, &x->shape);
    return 0;
}

static int lrn_infer(eng_op_ctx_t *c)
{
    int64_t size = eng_attr_i(c->node, "size", 0);
    if (size < 1)
        return eng_op_err(c, FS_EINVAL, "attribute size is %lld (missing or < 1)",
                          (long long)size);
    return channel_input(c, 2, dt_float);
}

ENG_OP_DEF(Conv, window_check, conv_infer, -1);
ENG_OP_DEF(ConvTranspose, window_check, conv_infer, -1);
ENG_OP_DEF(AveragePool, window_check, pool_infer, -1);
ENG_OP_DEF(MaxPool, window_check, pool_infer, -1);
ENG_OP_DEF(GlobalAveragePool, NULL, global_pool_infer, -1);
ENG_OP_DEF(GlobalMaxPool, NULL, global_pool_infer, -1);
ENG_OP_DEF(LpPool, window_check, lp_pool_infer, -1);
ENG_OP_DEF(GlobalLpPool, NULL, global_lp_pool_infer, -1);
/* The normalisations read each row's (or channel's) statistics before they
 * write it, so Y may take X's buffer. */
ENG_OP_DEF(BatchNormalization, batchnorm_check, batchnorm_infer, 0);
ENG_OP_DEF(InstanceNormalization, NULL, instancenorm_infer, 0);
ENG_OP_DEF(LayerNormalization, NULL, layernorm_infer, 0);
ENG_OP_DEF(RMSNormalization, rmsnorm_check, rmsnorm_infer, 0);
ENG_OP_DEF(LRN, NULL, lrn_infer, -1);

bool eng_nn_conv_is_pointwise(const eng_nn_geom_t *g)
{
    for (int i = 0; i < ENG_NN_DIMS; i++)
        if (g->kernel[i] != 1 || g->stride[i] != 1 || g->pad_begin[i] != 0 ||
            g->out[i] != g->in[i])
            return false;
    return true;
}

bool eng_nn_conv_is_depthwise(const eng_nn_geom_t *g)
{
    return g->group > 1 && g->group == g->in_channels && g->group == g->out_channels;
}

bool eng_nn_conv_implicit_gemm_fits(const eng_nn_geom_t *g, eng_dtype_t dt)
{
    /* Room for a tile's overhang past P, M and K. */
    const int64_t lim = INT32_MAX - 256, half = (int64_t)1 << 30;
    int64_t c = g->in_channels, m = g->out_channels;
    if ((dt != ENG_DT_FLOAT16 && dt != ENG_DT_BFLOAT16) || g->group != 1 ||
        g->kernel[0] != 1 || g->in[0] != 1 || g->out[0] != 1 || g->pad_begin[0] != 0 ||
        c <= 0 || c % 8 != 0 || c > lim || m <= 0 || m % 8 != 0 || m > lim ||
        g->batch <= 0 || g->batch > lim || eng_nn_conv_is_pointwise(g))
        return false;
    /* Every factor below 2^30 first, so that no product below overflows. */
    for (int i = 1; i < ENG_NN_DIMS; i++) {
        const int64_t f[] = {g->in[i], g->out[i], g->kernel[i], g->stride[i], g->dilation[i]};
        for (size_t j = 0; j < sizeof f / sizeof f[0]; j++)
            if (f[j] <= 0 || f[j] >= half)
                return false;
        if (g->pad_begin[i] < 0 || g->pad_begin[i] >= half ||
            (g->out[i] - 1) * g->stride[i] >= half ||
            (g->kernel[i] - 1) * g->dilation[i] >= half)
            return false;
    }
    int64_t hw = g->in[1] * g->in[2], ohw = g->out[1] * g->out[2];
    int64_t taps = g->kernel[1] * g->kernel[2];
    return hw <= lim / c && ohw <= lim / g->batch && taps <= lim / c;
}
