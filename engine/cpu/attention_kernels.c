/* attention_kernels.c -- CPU kernels of the transformer-block ops
 * (engine/ops/attention.c): Attention, RotaryEmbedding, SwiGLU.
 *
 * Every value is computed in double, whatever the tensors' float dtype
 * (float, double, float16, bfloat16): each dtype only brings its loads and
 * stores (attn_io_t), so one loop serves them all and the softmax runs at
 * least at any softmax_precision's precision.
 *
 * Attention goes one query row at a time, as attention_impl.h's formula
 * reads: the row's scores over every key of the present cache, the softmax,
 * then the weighted sum of the values. The rows are split into at most
 * n_threads slices, each with its own scratch (the query row, the scores,
 * the output row), so results do not depend on the thread count. A
 * kernel fails only where its op's parameters do (before anything is
 * written) or on a bad position id (RotaryEmbedding, also before anything
 * is written). */
#include <math.h>
#include <string.h>

#include "common/error.h"
#include "engine/cpu/parallel.h"
#include "engine/half.h"
#include "engine/kernels.h"
#include "engine/ops/attention_impl.h"

/* --- loads and stores per dtype ------------------------------------------------------------ */

typedef struct attn_io {
    /* q . k over n elements, q already loaded, k's `stride` elements apart. */
    double (*dot)(const double *q, const void *k, int64_t n, int64_t stride);
    /* acc[d] += p * v[d]. */
    void (*axpy)(double *acc, double p, const void *v, int64_t n);
    void (*load)(double *dst, const void *src, int64_t n);
    void (*store)(void *dst, const double *src, int64_t n);
} attn_io_t;

#define IO_F32_IN(v) ((double)(v))
#define IO_F32_OUT(v) ((float)(v))
#define IO_F64_IN(v) (v)
#define IO_F64_OUT(v) (v)
#define IO_F16_IN(v) ((double)eng_half_to_float(v))
#define IO_F16_OUT(v) eng_float_to_half((float)(v))
#define IO_BF16_IN(v) ((double)eng_bf16_to_float(v))
#define IO_BF16_OUT(v) eng_float_to_bf16((float)(v))

#define ATTN_IO(T, sfx, IN, OUT)                                                        \
    static double dot_##sfx(const double *q, const void *k_, int64_t n, int64_t stride) \
    {                                                                                   \
        const T *k = k_;                                                                \
        double s = 0;                                                                   \
        for (int64_t d = 0; d < n; d++)                                                 \
            s += q[d] * IN(k[d * stride]);                                              \
        return s;                                                                       \
    }                                                                                   \
    static void axpy_##sfx(double *acc, double p, const void *v_, int64_t n)            \
    {                                                                                   \
        const T *v = v_;                                                                \
        for (int64_t d = 0; d < n; d++)                                                 \
            acc[d] += p * IN(v[d]);                                                     \
    }                                                                                   \
    static void load_##sfx(double *dst, const void *src_, int64_t n)                    \
    {                                                                                   \
        const T *src = src_;                                                            \
        for (int64_t d = 0; d < n; d++)                                                 \
            dst[d] = IN(src[d]);                                                        \
    }                                                                                   \
    static void store_##sfx(void *dst_, const double *src, int64_t n)                   \
    {                                                                                   \
        T *dst = dst_;                                                                  \
        for (int64_t d = 0; d < n; d++)                                                 \
            dst[d] = OUT(src[d]);                                                       \
    }                                                                                   \
    static const attn_io_t io_##sfx = {dot_##sfx, axpy_##sfx, load_##sfx, store_##sfx};

ATTN_IO(float, f32, IO_F32_IN, IO_F32_OUT)
ATTN_IO(double, f64, IO_F64_IN, IO_F64_OUT)
ATTN_IO(uint16_t, f16, IO_F16_IN, IO_F16_OUT)
ATTN_IO(uint16_t, bf16, IO_BF16_IN, IO_BF16_OUT)

/* The loads and stores of a float dtype (infer admitted only these). */
static const attn_io_t *io_of(eng_dtype_t dt)
{
    switch (dt) {
    case ENG_DT_DOUBLE:
        return &io_f64;
    case ENG_DT_FLOAT16:
        return &io_f16;
    case ENG_DT_BFLOAT16:
        return &io_bf16;
    default:
        return &io_f32;
    }
}

/* Element i of a float tensor's data, as double. */
static double load_one(const attn_io_t *io, const void *p, int64_t i, size_t es)
{
    double v;
    io->load(&v, (const char *)p + (size_t)i * es, 1);
    return v;
}

/* --- Attention ----------------------------------------------------------------------------- */

typedef struct attn_job {
    const eng_attention_t *a;
    const attn_io_t *io;
    size_t es;                          /* bytes per element of Q, K, V, ... */
    const char *q, *k, *v, *past_k, *past_v, *mask;
    const int64_t *nonpad;
    char *y, *qk;                       /* qk: NULL when not requested */
    int64_t rows, slices;
    double *scratch;                    /* slices x slice_doubles */
    int64_t slice_doubles;
} attn_job_t;

/* Per slice: the query row, the output row, the scores x_j and the
 * qk_matmul_output row (modes 0 to 2). */
static int64_t slice_doubles(const eng_attention_t *a)
{
    return a->head + a->v_head + 2 * a->total_len;
}

/* Slices: at most one per thread, never more than the rows. */
static int64_t attn_slices(const eng_attention_t *a, int n_threads)
{
    int64_t rows = a->batch * a->q_heads * a->q_len;
    int64_t s = n_threads > 1 ? n_threads : 1;
    return rows < s ? (rows > 0 ? rows : 1) : s;
}

/* Key (value) j of kv head g in batch b: past row j, else K's (V's) row j -
 * past_len. */
static const char *kv_row(const attn_job_t *j, bool value, int64_t b, int64_t g, int64_t key)
{
    const eng_attention_t *a = j->a;
    int64_t size = value ? a->v_head : a->head;
    if (key < a->past_len)
        return (value ? j->past_v : j->past_k) +
               (size_t)(((b * a->kv_heads + g) * a->past_len + key) * size) * j->es;
    return (value ? j->v : j->k) +
           (size_t)eng_attention_row(value ? a->v_stride : a->k_stride, b, g, key - a->past_len) *
               j->es;
}

/* Query row r (batch, q head, query) with the slice's scratch `s`. */
static void attn_row(const attn_job_t *j, int64_t r, double *s)
{
    const eng_attention_t *a = j->a;
    const attn_io_t *io = j->io;
    const int64_t n = a->total_len;
    int64_t i = r % a->q_len, bh = r / a->q_len, h = bh % a->q_heads, b = bh / a->q_heads;
    int64_t g = h / a->group, nonpad = a->has_nonpad ? j->nonpad[b] : 0;
    double *q = s, *y = q + a->head, *x = y + a->v_head, *out = x + n;
    io->load(q, j->q + (size_t)eng_attention_row(a->q_stride, b, h, i) * j->es, a->head);
    int64_t mask_at = b * a->mask_stride[0] + h * a->mask_stride[1] + i * a->mask_stride[2];
    bool open = false;
    double m = -INFINITY;
    for (int64_t key = 0; key < n; key++) {
        double sc = a->head > 0 ? io->dot(q, kv_row(j, false, b, g, key), a->head, a->k_dstride) * a->scale : 0;
        double cap = eng_attention_softcap(a, sc), mv = 0;
        if (a->mask == ENG_ATTN_MASK_BOOL && key < a->mask_len)
            mv = ((const uint8_t *)j->mask)[mask_at + key] != 0;
        else if (a->mask == ENG_ATTN_MASK_ADD && key < a->mask_len)
            mv = load_one(io, j->mask, mask_at + key, j->es);
        double bias = eng_attention_bias(a, eng_attention_mask_term(a, key, mv), i, key, nonpad);
        x[key] = cap + bias;
        out[key] = a->mode == 0 ? sc : a->mode == 1 ? cap : x[key];
        open = open || bias != -INFINITY;
        /* NumPy's max: a NaN anywhere makes the row's max NaN. */
        if (isnan(x[key]) || x[key] > m)
            m = isnan(m) ? m : x[key];
    }
    /* The softmax as ONNX's reference takes it: an all -inf row softmaxes
     * to zeros; a fully masked row (every bias -inf) is zeros whatever its
     * scores. */
    double safe = m == -INFINITY ? 0 : m, sum = 0;
    for (int64_t key = 0; key < n; key++)
        sum += (x[key] = exp(x[key] - safe));
    sum = sum == 0 ? 1 : sum;
    for (int64_t key = 0; key < n; key++)
        x[key] = open ? x[key] / sum : 0;
    memset(y, 0, (size_t)a->v_head * sizeof *y);
    for (int64_t key = 0; key < n; key++)
        io->axpy(y, x[key], kv_row(j, true, b, g, key), a->v_head);
    io->store(j->y + (size_t)eng_attention_row(a->y_stride, b, h, i) * j->es, y, a->v_head);
    if (j->qk)
        io->store(j->qk + (size_t)(r * n) * j->es, a->mode == 3 ? x : out, n);
}

static void attn_slices_run(void *arg, int64_t begin, int64_t end)
{
    const attn_job_t *j = arg;
    for (int64_t sl = begin; sl < end; sl++) {
        double *s = j->scratch + sl * j->slice_doubles;
        for (int64_t r = sl * j->rows / j->slices; r < (sl + 1) * j->rows / j->slices; r++)
            attn_row(j, r, s);
    }
}

/* present_key or present_value: the past rows, then K's (V's) rows, per
 * (batch, kv head), in the 4-D layout. Cannot fail. */
static void write_present(const attn_job_t *j, bool value, char *dst)
{
    const eng_attention_t *a = j->a;
    const int64_t size = value ? a->v_head : a->head, stride = value ? 1 : a->k_dstride;
    size_t row = (size_t)size * j->es;
    for (int64_t b = 0; b < a->batch; b++)
        for (int64_t g = 0; g < a->kv_heads; g++)
            for (int64_t key = 0; key < a->total_len; key++, dst += row) {
                const char *src = kv_row(j, value, b, g, key);
                if (stride == 1)
                    memcpy(dst, src, row);
                for (int64_t d = 0; stride != 1 && d < size; d++)
                    memcpy(dst + (size_t)d * j->es, src + (size_t)(d * stride) * j->es, j->es);
            }
}

static size_t attention_scratch_bytes(const eng_op_ctx_t *c)
{
    eng_attention_t a;
    if (eng_attention_params(c, &a) != 0)
        return 0;
    return (size_t)(attn_slices(&a, c->n_threads) * slice_doubles(&a)) * sizeof(double);
}

/* Attention with its optional present_key, present_value and
 * qk_matmul_output. On error (parameters, scratch) nothing is written. */
static int attention_run(eng_op_ctx_t *c)
{
    eng_attention_t a;
    int rc = eng_attention_params(c, &a);
    if (rc)
        return rc;
    attn_job_t j = {.a = &a, .io = io_of(c->inputs[ENG_ATTN_Q]->dtype),
                    .es = eng_dtype_size(c->inputs[ENG_ATTN_Q]->dtype),
                    .q = c->inputs[ENG_ATTN_Q]->data, .k = c->inputs[ENG_ATTN_K]->data,
                    .v = c->inputs[ENG_ATTN_V]->data,
                    .rows = a.batch * a.q_heads * a.q_len, .slices = attn_slices(&a, c->n_threads),
                    .slice_doubles = slice_doubles(&a)};
    size_t need = (size_t)(j.slices * j.slice_doubles) * sizeof(double);
    if (c->scratch_bytes < need)
        return eng_op_scratch_err(c, need);
    j.scratch = c->scratch;
    if (a.has_past) {
        j.past_k = c->inputs[ENG_ATTN_PAST_KEY]->data;
        j.past_v = c->inputs[ENG_ATTN_PAST_VALUE]->data;
    }
    if (a.mask != ENG_ATTN_MASK_NONE)
        j.mask = c->inputs[ENG_ATTN_MASK]->data;
    if (a.has_nonpad)
        j.nonpad = c->inputs[ENG_ATTN_NONPAD]->data;
    j.y = c->outputs[ENG_ATTN_Y]->data;
    if (c->n_outputs > ENG_ATTN_QK && c->outputs[ENG_ATTN_QK])
        j.qk = c->outputs[ENG_ATTN_QK]->data;
    if (c->n_outputs > ENG_ATTN_PRESENT_KEY && c->outputs[ENG_ATTN_PRESENT_KEY])
        write_present(&j, false, c->outputs[ENG_ATTN_PRESENT_KEY]->data);
    if (c->n_outputs > ENG_ATTN_PRESENT_VALUE && c->outputs[ENG_ATTN_PRESENT_VALUE])
        write_present(&j, true, c->outputs[ENG_ATTN_PRESENT_VALUE]->data);
    if (j.rows > 0)
        eng_parallel_for(c->n_threads, j.slices, 1, attn_slices_run, &j);
    return 0;
}

/* --- RotaryEmbedding ----------------------------------------------------------------------- */

typedef struct rotary_job {
    const eng_rotary_t *r;
    const attn_io_t *io;
    size_t es;
    const char *x, *cos, *sin;
    const int64_t *ids;
    char *y;
} rotary_job_t;

/* The rows (batch, head, position) [begin, end); each converts its row
 * through a stack buffer of at most ROTARY_CHUNK elements at a time. */
#define ROTARY_CHUNK 256

static void rotary_rows(void *arg, int64_t begin, int64_t end)
{
    const rotary_job_t *j = arg;
    const eng_rotary_t *r = j->r;
    const int64_t half = r->rot / 2;
    double a[ROTARY_CHUNK], b[ROTARY_CHUNK], cs[ROTARY_CHUNK], sn[ROTARY_CHUNK];
    for (int64_t row = begin; row < end; row++) {
        int64_t s = row % r->seq, bh = row / r->seq, h = bh % r->heads, bt = bh / r->heads;
        int64_t at = eng_attention_row(r->x_stride, bt, h, s);
        const char *x = j->x + (size_t)at * j->es;
        char *y = j->y + (size_t)at * j->es;
        int64_t cache_row = r->has_ids ? j->ids[bt * r->seq + s] : bt * r->seq + s;
        const char *crow = j->cos + (size_t)(cache_row * half) * j->es,
                   *srow = j->sin + (size_t)(cache_row * half) * j->es;
        /* Pairs (lo + t, hi + t) or, interleaved, (2t, 2t + 1). */
        for (int64_t d0 = 0; d0 < half; d0 += ROTARY_CHUNK) {
            int64_t n = half - d0 < ROTARY_CHUNK ? half - d0 : ROTARY_CHUNK;
            j->io->load(cs, crow + (size_t)d0 * j->es, n);
            j->io->load(sn, srow + (size_t)d0 * j->es, n);
            for (int64_t t = 0; t < n; t++) {
                int64_t p1 = r->interleaved ? 2 * (d0 + t) : d0 + t;
                int64_t p2 = r->interleaved ? p1 + 1 : p1 + half;
                a[t] = load_one(j->io, x, p1, j->es);
                b[t] = load_one(j->io, x, p2, j->es);
            }
            for (int64_t t = 0; t < n; t++) {
                int64_t p1 = r->interleaved ? 2 * (d0 + t) : d0 + t;
                int64_t p2 = r->interleaved ? p1 + 1 : p1 + half;
                double re = cs[t] * a[t] - sn[t] * b[t], im = sn[t] * a[t] + cs[t] * b[t];
                j->io->store(y + (size_t)p1 * j->es, &re, 1);
                j->io->store(y + (size_t)p2 * j->es, &im, 1);
            }
        }
        if (y != x && r->head > r->rot)
            memmove(y + (size_t)r->rot * j->es, x + (size_t)r->rot * j->es,
                    (size_t)(r->head - r->rot) * j->es);
    }
}

/* RotaryEmbedding. Y may alias X (each pair is read before it is written).
 * A position id outside [0, max_pos) fails the run naming it, before
 * anything is written. */
static int rotary_run(eng_op_ctx_t *c)
{
    eng_rotary_t r;
    int rc = eng_rotary_params(c, &r);
    if (rc)
        return rc;
    rotary_job_t j = {.r = &r, .io = io_of(c->inputs[0]->dtype),
                      .es = eng_dtype_size(c->inputs[0]->dtype), .x = c->inputs[0]->data,
                      .cos = c->inputs[1]->data, .sin = c->inputs[2]->data,
                      .y = c->outputs[0]->data};
    if (r.has_ids) {
        j.ids = c->inputs[3]->data;
        for (int64_t i = 0; i < r.batch * r.seq; i++)
            if (j.ids[i] < 0 || j.ids[i] >= r.max_pos)
                return eng_op_err(c, FS_EINVAL, "position_ids[%lld] is %lld, outside the %lld "
                                  "rows of cos_cache", (long long)i, (long long)j.ids[i],
                                  (long long)r.max_pos);
    }
    int64_t rows = r.batch * r.heads * r.seq;
    eng_parallel_for(c->n_threads, rows, eng_parallel_grain(8 * r.head), rotary_rows, &j);
    return 0;
}

/* --- SwiGLU -------------------------------------------------------------------------------- */

typedef struct swiglu_job {
    const attn_io_t *io;
    size_t es;
    const char *a, *b;
    char *y;
    double alpha;
} swiglu_job_t;

#define SWIGLU_CHUNK 256

static void swiglu_chunks(void *arg, int64_t begin, int64_t end)
{
    const swiglu_job_t *j = arg;
    double a[SWIGLU_CHUNK], b[SWIGLU_CHUNK];
    for (int64_t i0 = begin; i0 < end; i0 += SWIGLU_CHUNK) {
        int64_t n = end - i0 < SWIGLU_CHUNK ? end - i0 : SWIGLU_CHUNK;
        j->io->load(a, j->a + (size_t)i0 * j->es, n);
        j->io->load(b, j->b + (size_t)i0 * j->es, n);
        for (int64_t i = 0; i < n; i++)
            a[i] = a[i] / (1.0 + exp(-j->alpha * a[i])) * b[i];
        j->io->store(j->y + (size_t)i0 * j->es, a, n);
    }
}

/* SwiGLU: y = a * sigmoid(alpha * a) * b. Y may alias A. Cannot fail. */
static int swiglu_run(eng_op_ctx_t *c)
{
    eng_dtype_t dt = c->inputs[0]->dtype;
    swiglu_job_t j = {.io = io_of(dt), .es = eng_dtype_size(dt), .a = c->inputs[0]->data,
                      .b = c->inputs[1]->data, .y = c->outputs[0]->data,
                      .alpha = eng_attr_f(c->node, "alpha", 1.0f)};
    eng_parallel_for(c->n_threads, eng_shape_numel(&c->inputs[0]->shape),
                     eng_parallel_grain(30), swiglu_chunks, &j);
    return 0;
}

const eng_kernel_t eng_cpu_Attention = {.run = attention_run,
                                        .scratch_bytes = attention_scratch_bytes};
const eng_kernel_t eng_cpu_RotaryEmbedding = {.run = rotary_run};
const eng_kernel_t eng_cpu_SwiGLU = {.run = swiglu_run};
