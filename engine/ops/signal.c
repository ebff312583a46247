/* signal.c -- definitions (validation, dtype and shape inference) of the
 * signal ops: DFT, STFT, the windows (Hann, Hamming, Blackman) and
 * MelWeightMatrix, and their parameters (signal_impl.h), which infer and
 * both devices' kernels share.
 *
 * Every output shape here depends on a scalar input's value (a length, a
 * step, a size): infer returns FS_EDYNAMIC while it is unknown. On error
 * no output is touched and the message names the node and the input. */
#include <string.h>

#include "common/error.h"
#include "engine/ops/shape_impl.h"
#include "engine/ops/signal_impl.h"

static const eng_dtype_t dt_real[] = {ENG_DT_FLOAT, ENG_DT_DOUBLE, ENG_DT_FLOAT16,
                                      ENG_DT_BFLOAT16, ENG_DT_UNDEFINED};

#define SHAPE_BUF 200

/* Scalar (or one-element) integer input i, known before running: FS_EINVAL
 * when required and absent (else *present false), or when it holds more
 * than one value; FS_EDYNAMIC while unknown. */
static int known_int(const eng_op_ctx_t *c, int i, const char *what, bool required,
                     bool *present, int64_t *v)
{
    const eng_tensor_t *t;
    int64_t n;
    int rc = eng_shapeops_in_ints(c, i, what, required, &t, &n);
    *present = false;
    if (rc || !t)
        return rc;
    if (n != 1)
        return eng_op_err(c, FS_EINVAL, "input %d (%s) must hold one value, not %lld", i, what,
                          (long long)n);
    *present = true;
    *v = eng_tensor_get_i64(t, 0);
    return 0;
}

/* The output_datatype attribute (default float): a numeric dtype. 0 or
 * FS_ENOTSUP naming it. */
static int output_datatype(const eng_op_ctx_t *c, eng_dtype_t *dt)
{
    static const eng_dtype_t ok[] = {ENG_DT_FLOAT,  ENG_DT_DOUBLE, ENG_DT_FLOAT16, ENG_DT_BFLOAT16,
                                     ENG_DT_INT8,   ENG_DT_INT16,  ENG_DT_INT32,   ENG_DT_INT64,
                                     ENG_DT_UINT8,  ENG_DT_UINT16, ENG_DT_UINT32,  ENG_DT_UINT64};
    int64_t v = eng_attr_i(c->node, "output_datatype", ENG_DT_FLOAT);
    for (size_t i = 0; i < sizeof ok / sizeof ok[0]; i++)
        if (v == (int64_t)ok[i]) {
            *dt = ok[i];
            return 0;
        }
    return eng_op_err(c, FS_ENOTSUP, "output_datatype %lld (%s) is not supported (a float or "
                      "integer dtype)", (long long)v, eng_dtype_name((eng_dtype_t)v));
}

/* ---- DFT ----------------------------------------------------------------- */

int eng_dft_params(const eng_op_ctx_t *c, eng_dft_t *p)
{
    const eng_tensor_t *x = eng_ctx_in(c, 0);
    if (!x)
        return eng_op_err(c, FS_EINVAL, "required input 0 (input) is missing");
    int rc = eng_op_require_dtype(c, 0, dt_real);
    if (rc)
        return rc;
    const eng_shape_t *xs = &x->shape;
    int rank = xs->rank;
    char b[SHAPE_BUF];
    if (rank < 2 || (xs->dims[rank - 1] != 1 && xs->dims[rank - 1] != 2))
        return eng_op_err(c, FS_EINVAL, "input %s must be [..., signal..., 1 or 2]",
                          eng_shape_format(xs, b, sizeof b));
    bool has_len, has_axis = false;
    int64_t len = 0, axis = c->opset >= 20 ? -2 : eng_attr_i(c->node, "axis", 1);
    if ((rc = known_int(c, 1, "dft_length", false, &has_len, &len)))
        return rc;
    if (c->opset >= 20 && (rc = known_int(c, 2, "axis", false, &has_axis, &axis)))
        return rc;
    int64_t a = axis < 0 ? axis + rank : axis;
    if (a < 0 || a > rank - 2)
        return eng_op_err(c, FS_EINVAL, "axis %lld is out of range for input %s (the last dim "
                          "holds the complex parts)", (long long)axis,
                          eng_shape_format(xs, b, sizeof b));
    p->inverse = eng_attr_i(c->node, "inverse", 0) != 0;
    bool onesided = eng_attr_i(c->node, "onesided", 0) != 0;
    p->irfft = p->inverse && onesided;
    p->comp_in = (int)xs->dims[rank - 1];
    p->comp_out = p->irfft ? 1 : 2;
    p->len_in = xs->dims[a];
    p->inner = 1;
    for (int d = (int)a + 1; d < rank - 1; d++)
        p->inner *= xs->dims[d];
    p->n = has_len ? len : p->irfft ? 2 * (p->len_in - 1) : p->len_in;
    if (p->n < 1 || p->n > ENG_DFT_MAX_LENGTH)
        return eng_op_err(c, has_len ? FS_EINVAL : FS_ENOTSUP, "the transform's length is %lld, "
                          "must be 1..%lld", (long long)p->n, (long long)ENG_DFT_MAX_LENGTH);
    p->n_out = onesided && !p->inverse ? p->n / 2 + 1 : p->n;
    p->dt = x->dtype;
    p->y = *xs;
    p->y.dims[a] = p->n_out;
    p->y.dims[rank - 1] = p->comp_out;
    return 0;
}

static int dft_infer(eng_op_ctx_t *c)
{
    eng_dft_t p;
    int rc = eng_dft_params(c, &p);
    if (rc)
        return rc;
    eng_ctx_out_set(c, 0, p.dt, &p.y);
    return 0;
}

/* ---- STFT ---------------------------------------------------------------- */

int eng_stft_params(const eng_op_ctx_t *c, eng_stft_t *p)
{
    const eng_tensor_t *x = eng_ctx_in(c, 0), *w = eng_ctx_in(c, 2);
    if (!x)
        return eng_op_err(c, FS_EINVAL, "required input 0 (signal) is missing");
    int rc = eng_op_require_dtype(c, 0, dt_real);
    if (rc || (w && (rc = eng_op_require_dtype(c, 2, dt_real))))
        return rc;
    const eng_shape_t *xs = &x->shape;
    char b[SHAPE_BUF];
    if (xs->rank != 3 || (xs->dims[2] != 1 && xs->dims[2] != 2))
        return eng_op_err(c, FS_EINVAL, "signal %s must be [batch, length, 1 or 2]",
                          eng_shape_format(xs, b, sizeof b));
    if (w && w->shape.rank != 1)
        return eng_op_err(c, FS_EINVAL, "window %s must be 1-D",
                          eng_shape_format(&w->shape, b, sizeof b));
    bool has_step, has_len;
    int64_t step = 0, len = 0;
    if ((rc = known_int(c, 1, "frame_step", true, &has_step, &step)) ||
        (rc = known_int(c, 3, "frame_length", false, &has_len, &len)))
        return rc;
    p->sig_len = xs->dims[1];
    p->n = has_len ? len : w ? w->shape.dims[0] : p->sig_len;
    if (w && w->shape.dims[0] != p->n)
        return eng_op_err(c, FS_EINVAL, "window has %lld values, frame_length is %lld",
                          (long long)w->shape.dims[0], (long long)p->n);
    if (step < 1 || p->n < 1 || p->n > p->sig_len || p->n > ENG_DFT_MAX_LENGTH)
        return eng_op_err(c, FS_EINVAL, "frame_step %lld must be >= 1 and frame_length %lld in "
                          "1..%lld (the signal's length)", (long long)step, (long long)p->n,
                          (long long)p->sig_len);
    p->step = step;
    p->has_window = w != NULL;
    p->comp_in = (int)xs->dims[2];
    p->frames = 1 + (p->sig_len - p->n) / step;
    p->bins = eng_attr_i(c->node, "onesided", 1) != 0 ? p->n / 2 + 1 : p->n;
    p->dt = x->dtype;
    p->win_dt = w ? w->dtype : x->dtype;
    p->y = (eng_shape_t){.rank = 4, .dims = {xs->dims[0], p->frames, p->bins, 2}};
    return 0;
}

static int stft_infer(eng_op_ctx_t *c)
{
    eng_stft_t p;
    int rc = eng_stft_params(c, &p);
    if (rc)
        return rc;
    eng_ctx_out_set(c, 0, p.dt, &p.y);
    return 0;
}

/* ---- windows ------------------------------------------------------------- */

int eng_window_params(const eng_op_ctx_t *c, eng_window_t *p)
{
    const char *op = c->node->op_type;
    p->kind = strcmp(op, "HannWindow") == 0      ? ENG_WIN_HANN
              : strcmp(op, "HammingWindow") == 0 ? ENG_WIN_HAMMING
                                                 : ENG_WIN_BLACKMAN;
    bool has;
    int rc = output_datatype(c, &p->dt);
    if (rc || (rc = known_int(c, 0, "size", true, &has, &p->size)))
        return rc;
    if (p->size < 0 || p->size > ENG_NUMEL_MAX)
        return eng_op_err(c, FS_EINVAL, "size is %lld, must be 0..%lld", (long long)p->size,
                          (long long)ENG_NUMEL_MAX);
    p->periodic = eng_attr_i(c->node, "periodic", 1) != 0;
    return 0;
}

static int window_infer(eng_op_ctx_t *c)
{
    eng_window_t p;
    int rc = eng_window_params(c, &p);
    if (rc)
        return rc;
    eng_shape_t y = {.rank = 1, .dims = {p.size}};
    eng_ctx_out_set(c, 0, p.dt, &y);
    return 0;
}

static int window_check(const eng_node_t *n, int opset)
{
    eng_op_ctx_t c = {.node = n, .opset = opset};
    eng_dtype_t dt;
    return output_datatype(&c, &dt);
}

/* ---- MelWeightMatrix ----------------------------------------------------- */

int eng_mel_params(const eng_op_ctx_t *c, eng_mel_t *p)
{
    bool has;
    int rc = output_datatype(c, &p->dt);
    if (rc || (rc = known_int(c, 0, "num_mel_bins", true, &has, &p->mel_bins)) ||
        (rc = known_int(c, 1, "dft_length", true, &has, &p->dft_length)) ||
        (rc = known_int(c, 2, "sample_rate", true, &has, &p->sample_rate)))
        return rc;
    for (int i = 3; i <= 4; i++) {
        const eng_tensor_t *t = eng_ctx_in(c, i);
        if (!t)
            return eng_op_err(c, FS_EINVAL, "required input %d (%s) is missing", i,
                              i == 3 ? "lower_edge_hertz" : "upper_edge_hertz");
        if ((rc = eng_op_require_dtype(c, i, dt_real)))
            return rc;
        if (eng_shape_numel(&t->shape) != 1 || t->shape.rank > 1)
            return eng_op_err(c, FS_EINVAL, "input %d must hold one value, not %lld", i,
                              (long long)eng_shape_numel(&t->shape));
    }
    if (c->inputs[3]->dtype != c->inputs[4]->dtype)
        return eng_op_err(c, FS_EINVAL, "lower_edge_hertz (%s) and upper_edge_hertz (%s) differ "
                          "in dtype", eng_dtype_name(c->inputs[3]->dtype),
                          eng_dtype_name(c->inputs[4]->dtype));
    if (p->mel_bins < 1 || p->dft_length < 1 || p->sample_rate < 1 ||
        p->mel_bins > ENG_NUMEL_MAX || p->dft_length > ENG_NUMEL_MAX)
        return eng_op_err(c, FS_EINVAL, "num_mel_bins %lld, dft_length %lld and sample_rate %lld "
                          "must each be >= 1", (long long)p->mel_bins, (long long)p->dft_length,
                          (long long)p->sample_rate);
    p->edge_dt = c->inputs[3]->dtype;
    p->y = (eng_shape_t){.rank = 2, .dims = {p->dft_length / 2 + 1, p->mel_bins}};
    return 0;
}

static int mel_infer(eng_op_ctx_t *c)
{
    eng_mel_t p;
    int rc = eng_mel_params(c, &p);
    if (rc)
        return rc;
    eng_ctx_out_set(c, 0, p.dt, &p.y);
    return 0;
}

ENG_OP_DEF(DFT, NULL, dft_infer, -1);
ENG_OP_DEF(STFT, NULL, stft_infer, -1);
ENG_OP_DEF(HannWindow, window_check, window_infer, -1);
ENG_OP_DEF(HammingWindow, window_check, window_infer, -1);
ENG_OP_DEF(BlackmanWindow, window_check, window_infer, -1);
ENG_OP_DEF(MelWeightMatrix, window_check, mel_infer, -1);
