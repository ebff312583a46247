/* nms.c -- NonMaxSuppression: its definition and its selection, which runs
 * on the host for every device (spatial_impl.h).
 *
 * The output's length is the number of boxes kept, so it needs the values
 * of boxes and scores: infer runs the selection to count them and returns
 * FS_EDYNAMIC while they are unknown (the plan then runs node by node, and
 * the kernel runs the same selection again to write the triples). The
 * arithmetic is the reference's, in float: a box is [y1, x1, y2, x2] (any
 * corner order) or, with center_point_box, [x_center, y_center, width,
 * height]; a candidate is dropped when its IoU with a box already kept for
 * its class passes iou_threshold (strictly); with score_threshold only
 * boxes scoring above it are candidates. */
#include <math.h>
#include <stdlib.h>

#include "common/error.h"
#include "engine/ops/spatial_impl.h"

static const eng_dtype_t dt_float[] = {ENG_DT_FLOAT, ENG_DT_UNDEFINED};
static const eng_dtype_t dt_int64[] = {ENG_DT_INT64, ENG_DT_UNDEFINED};

/* Optional scalar input i (`what`): *present says whether it holds a
 * value; FS_EDYNAMIC when it does but that is not known on the host. */
static int scalar_in(const eng_op_ctx_t *c, int i, const char *what, const eng_dtype_t *allowed,
                     bool *present, double *v)
{
    const eng_tensor_t *t = eng_ctx_in(c, i);
    *present = false;
    if (!t || eng_shape_numel(&t->shape) == 0)
        return 0;
    int rc = eng_op_require_dtype(c, i, allowed);
    if (rc)
        return rc;
    if (t->shape.rank > 1 || eng_shape_numel(&t->shape) != 1)
        return eng_op_err(c, FS_EINVAL, "%s (input %d) must hold one value, not %lld", what, i,
                          (long long)eng_shape_numel(&t->shape));
    const eng_tensor_t *h = eng_ctx_host_in(c, i);
    if (!h || !h->data)
        return eng_op_err(c, FS_EDYNAMIC, "the output shape needs the value of %s (input %d), "
                          "which is not known before running", what, i);
    *present = true;
    *v = eng_hd_load(h->data, h->dtype, 0);
    return 0;
}

int eng_nms_params(const eng_op_ctx_t *c, eng_nms_t *p)
{
    const eng_tensor_t *boxes = eng_ctx_in(c, 0), *scores = eng_ctx_in(c, 1);
    if (!boxes || !scores)
        return eng_op_err(c, FS_EINVAL, "required input %s is missing", boxes ? "scores" : "boxes");
    int rc;
    if ((rc = eng_op_require_dtype(c, 0, dt_float)) || (rc = eng_op_require_dtype(c, 1, dt_float)))
        return rc;
    const eng_shape_t *bs = &boxes->shape, *ss = &scores->shape;
    if (bs->rank != 3 || bs->dims[2] != 4 || ss->rank != 3 || ss->dims[0] != bs->dims[0] ||
        ss->dims[2] != bs->dims[1]) {
        char b1[200], b2[200];
        return eng_op_err(c, FS_EINVAL, "boxes %s and scores %s must be [B, N, 4] and "
                          "[B, C, N]", eng_shape_format(bs, b1, sizeof b1),
                          eng_shape_format(ss, b2, sizeof b2));
    }
    int64_t cpb = eng_attr_i(c->node, "center_point_box", 0);
    if (cpb != 0 && cpb != 1)
        return eng_op_err(c, FS_EINVAL, "center_point_box is %lld, must be 0 or 1",
                          (long long)cpb);
    p->center = cpb == 1;
    p->batches = bs->dims[0];
    p->boxes = bs->dims[1];
    p->classes = ss->dims[1];
    bool has_max, has_iou;
    double max = 0, iou = 0, score = 0;
    if ((rc = scalar_in(c, 2, "max_output_boxes_per_class", dt_int64, &has_max, &max)) ||
        (rc = scalar_in(c, 3, "iou_threshold", dt_float, &has_iou, &iou)) ||
        (rc = scalar_in(c, 4, "score_threshold", dt_float, &p->has_score, &score)))
        return rc;
    if (has_max) {
        /* The value itself, not its double (which rounds past 2^53). */
        const eng_tensor_t *h = eng_ctx_host_in(c, 2);
        int64_t m = ((const int64_t *)h->data)[0];
        p->max_per_class = m < 0 ? 0 : m;
    } else {
        p->max_per_class = 0;
    }
    p->iou = (float)iou;
    p->score = (float)score;
    return 0;
}

typedef struct nms_cand {
    float score;
    int64_t idx;
} nms_cand_t;

/* Higher scores first, then lower indices; a NaN score sorts last. */
static int cand_cmp(const void *pa, const void *pb)
{
    const nms_cand_t *a = pa, *b = pb;
    bool an = isnan(a->score), bn = isnan(b->score);
    if (an != bn)
        return an ? 1 : -1;
    if (!an && a->score != b->score)
        return a->score > b->score ? -1 : 1;
    return a->idx < b->idx ? -1 : a->idx > b->idx;
}

/* A box's extent along one axis, as (min, max). */
static void span(float a, float b, float *lo, float *hi)
{
    *lo = a < b ? a : b;
    *hi = a < b ? b : a;
}

/* Whether box b suppresses box a: their IoU passes the threshold. */
static bool suppresses(const eng_nms_t *p, const float *a, const float *b)
{
    float ax0, ax1, ay0, ay1, bx0, bx1, by0, by1;
    if (p->center) {
        ax0 = a[0] - a[2] / 2;
        ax1 = a[0] + a[2] / 2;
        ay0 = a[1] - a[3] / 2;
        ay1 = a[1] + a[3] / 2;
        bx0 = b[0] - b[2] / 2;
        bx1 = b[0] + b[2] / 2;
        by0 = b[1] - b[3] / 2;
        by1 = b[1] + b[3] / 2;
    } else {
        span(a[1], a[3], &ax0, &ax1);
        span(a[0], a[2], &ay0, &ay1);
        span(b[1], b[3], &bx0, &bx1);
        span(b[0], b[2], &by0, &by1);
    }
    float ix0 = ax0 > bx0 ? ax0 : bx0, ix1 = ax1 < bx1 ? ax1 : bx1;
    float iy0 = ay0 > by0 ? ay0 : by0, iy1 = ay1 < by1 ? ay1 : by1;
    if (ix1 <= ix0 || iy1 <= iy0)
        return false;
    float inter = (ix1 - ix0) * (iy1 - iy0);
    float area_a = (ax1 - ax0) * (ay1 - ay0), area_b = (bx1 - bx0) * (by1 - by0);
    float uni = area_a + area_b - inter;
    if (inter <= 0 || area_a <= 0 || area_b <= 0 || uni <= 0)
        return false;
    return inter / uni > p->iou;
}

int eng_nms_select(const eng_nms_t *p, const float *boxes, const float *scores, int64_t *out,
                   int64_t *n_out)
{
    int64_t room = out ? *n_out : 0, n = 0;
    *n_out = 0;
    if (p->boxes == 0 || p->max_per_class == 0)
        return 0;
    nms_cand_t *cand = malloc((size_t)p->boxes * sizeof *cand);
    int64_t *kept = malloc((size_t)p->boxes * sizeof *kept);
    if (!cand || !kept) {
        free(cand);
        free(kept);
        return fs_err(FS_ENOMEM, "out of host memory for NonMaxSuppression's %lld boxes",
                      (long long)p->boxes);
    }
    for (int64_t b = 0; b < p->batches; b++) {
        const float *bb = boxes + b * p->boxes * 4;
        for (int64_t k = 0; k < p->classes; k++) {
            const float *sc = scores + (b * p->classes + k) * p->boxes;
            int64_t n_cand = 0, n_kept = 0;
            for (int64_t i = 0; i < p->boxes; i++)
                if (!p->has_score || sc[i] > p->score)
                    cand[n_cand++] = (nms_cand_t){sc[i], i};
            qsort(cand, (size_t)n_cand, sizeof *cand, cand_cmp);
            for (int64_t j = 0; j < n_cand && n_kept < p->max_per_class; j++) {
                bool keep = true;
                for (int64_t s = 0; s < n_kept && keep; s++)
                    keep = !suppresses(p, bb + cand[j].idx * 4, bb + kept[s] * 4);
                if (!keep)
                    continue;
                kept[n_kept++] = cand[j].idx;
                if (out && n < room) {
                    out[3 * n] = b;
                    out[3 * n + 1] = k;
                    out[3 * n + 2] = cand[j].idx;
                }
                n++;
            }
        }
    }
    free(cand);
    free(kept);
    *n_out = out && n > room ? room : n;
    return 0;
}

static int nms_check(const eng_node_t *n, int opset)
{
    int64_t cpb = eng_attr_i(n, "center_point_box", 0);
    if (cpb != 0 && cpb != 1)
        return eng_op_err(&(eng_op_ctx_t){.node = n, .opset = opset}, FS_EINVAL,
                          "center_point_box is %lld, must be 0 or 1", (long long)cpb);
    return 0;
}

/* Runs the selection to count the kept boxes: FS_EDYNAMIC until boxes and
 * scores are known. */
static int nms_infer(eng_op_ctx_t *c)
{
    eng_nms_t p;
    int rc = eng_nms_params(c, &p);
    if (rc)
        return rc;
    const eng_tensor_t *boxes = eng_ctx_host_in(c, 0), *scores = eng_ctx_host_in(c, 1);
    bool empty = p.boxes == 0 || p.batches == 0 || p.classes == 0 || p.max_per_class == 0;
    int64_t n = 0;
    if (!empty) {
        if (!boxes || !boxes->data || !scores || !scores->data)
            return eng_op_err(c, FS_EDYNAMIC, "the output shape needs the values of boxes and "
                              "scores, which are not known before running");
        if ((rc = eng_nms_select(&p, boxes->data, scores->data, NULL, &n)))
            return rc;
    }
    eng_shape_t y = {.rank = 2, .dims = {n, 3}};
    eng_ctx_out_set(c, 0, ENG_DT_INT64, &y);
    return 0;
}

ENG_OP_DEF(NonMaxSuppression, nms_check, nms_infer, -1);
