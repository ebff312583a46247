/* plan.c -- greedy-by-size offset assignment for tensors with known lifetimes.
 *
 * Algorithm (the "greedy by size" offset planner of TFLite and of Pisarchyk
 * & Lee, "Efficient Memory Management for Deep Neural Net Inference", 2020):
 *   1. Round every size up to the alignment.
 *   2. Visit tensors by size, largest first (ties: earlier first_step, then
 *      lower index, so the order is total and the result deterministic).
 *   3. For each, look only at the tensors already placed whose step ranges
 *      intersect its own, in offset order, and collect the gaps between
 *      them. Take the smallest gap that fits (best fit, lowest offset among
 *      equal gaps); if none fits, place it right after the highest end of
 *      those tensors (0 if there are none).
 *   4. The block size is the highest end over all tensors.
 * Guarantee: two tensors whose step ranges intersect occupy disjoint byte
 * ranges [offset, offset + aligned size), because step 3 only places a
 * tensor in space that no intersecting placed tensor covers. Hence the
 * tensors live at any one step are pairwise disjoint inside the block, and
 * the block size is at least alloc_plan_peak_live_bytes. The plan is not
 * optimal in general (the problem is NP-hard); that function gives the
 * lower bound to compare against.
 * Cost: O(n log n) for the sort, O(n) per tensor for the scan and the
 * insertion into the offset-ordered list: O(n^2) in all, O(n) scratch. */
#include "alloc/plan.h"

#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include "common/error.h"

/* One tensor as the planner sees it. */
typedef struct plan_item {
    size_t size;    /* aligned size */
    uint32_t first; /* inclusive step range */
    uint32_t last;
    size_t index;   /* position in the caller's array */
    size_t offset;  /* assigned offset, valid once placed */
} plan_item_t;

static bool plan_align_valid(size_t align)
{
    return align != 0 && (align & (align - 1)) == 0;
}

/* Rounds `bytes` up to `align` (a power of two); false on overflow. */
static bool plan_round_up(size_t bytes, size_t align, size_t *out)
{
    if (bytes > SIZE_MAX - (align - 1))
        return false;
    *out = (bytes + align - 1) & ~(align - 1);
    return true;
}

/* Largest first; ties by earlier first step, then by lower index. */
static int plan_item_cmp(const void *a, const void *b)
{
    const plan_item_t *x = a, *y = b;
    if (x->size != y->size)
        return x->size > y->size ? -1 : 1;
    if (x->first != y->first)
        return x->first < y->first ? -1 : 1;
    return x->index < y->index ? -1 : (x->index > y->index);
}

static bool plan_items_intersect(const plan_item_t *a, const plan_item_t *b)
{
    return a->first <= b->last && b->first <= a->last;
}

/* Best-fit offset for `it` among the placed items (`placed`, `n_placed`
 * entries indexing `items`, sorted by offset). False if the end would
 * overflow size_t. */
static bool plan_item_fit(const plan_item_t *items, const size_t *placed, size_t n_placed,
                          const plan_item_t *it, size_t *offset)
{
    size_t prev_end = 0;
    size_t best_offset = 0, best_gap = SIZE_MAX;
    bool found = false;
    for (size_t k = 0; k < n_placed; k++) {
        const plan_item_t *p = &items[placed[k]];
        if (!plan_items_intersect(p, it))
            continue;
        if (p->offset > prev_end) {
            size_t gap = p->offset - prev_end;
            if (gap >= it->size && (!found || gap < best_gap)) {
                best_gap = gap;
                best_offset = prev_end;
                found = true;
            }
        }
        if (p->offset + p->size > prev_end)
            prev_end = p->offset + p->size;
    }
    if (!found) {
        if (it->size > SIZE_MAX - prev_end)
            return false;
        best_offset = prev_end;
    }
    *offset = best_offset;
    return true;
}

/* Inserts item `idx` into the offset-ordered list, after any equal offset. */
static void plan_placed_insert(const plan_item_t *items, size_t *placed, size_t n_placed,
                               size_t idx)
{
    size_t lo = 0, hi = n_placed;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        if (items[placed[mid]].offset <= items[idx].offset)
            lo = mid + 1;
        else
            hi = mid;
    }
    memmove(&placed[lo + 1], &placed[lo], (n_placed - lo) * sizeof *placed);
    placed[lo] = idx;
}

/* Reads and checks the caller's tensors into `items`. */
static int plan_items_load(const alloc_plan_tensor_t *tensors, size_t n, size_t align,
                           plan_item_t *items)
{
    for (size_t i = 0; i < n; i++) {
        const alloc_plan_tensor_t *t = &tensors[i];
        if (t->first_step > t->last_step)
            return fs_err(FS_EINVAL, "plan: tensor %zu has first_step %u after last_step %u", i,
                          (unsigned)t->first_step, (unsigned)t->last_step);
        if (!plan_round_up(t->size_bytes, align, &items[i].size))
            return fs_err(FS_ERANGE, "plan: tensor %zu size %zu overflows when aligned to %zu", i,
                          t->size_bytes, align);
        items[i].first = t->first_step;
        items[i].last = t->last_step;
        items[i].index = i;
        items[i].offset = 0;
    }
    return 0;
}

int alloc_plan_build(alloc_plan_tensor_t *tensors, size_t n, size_t align, size_t *total_bytes)
{
    if (align == 0)
        align = ALLOC_PLAN_DEFAULT_ALIGN;
    if (!plan_align_valid(align))
        return fs_err(FS_EINVAL, "plan: alignment %zu is not a power of two", align);
    if (n == 0) {
        *total_bytes = 0;
        return 0;
    }
    if (!tensors)
        return fs_err(FS_EINVAL, "plan: NULL tensor array with %zu tensors", n);
    if (n > SIZE_MAX / sizeof(plan_item_t))
        return fs_err(FS_ENOMEM, "plan: %zu tensors exceed the address space", n);

    int rc = 0;
    size_t *placed = NULL;
    size_t n_placed = 0, total = 0;
    plan_item_t *items = malloc(n * sizeof *items);
    if (!items) {
        rc = fs_err(FS_ENOMEM, "plan: no memory for %zu tensors", n);
        goto fail;
    }
    placed = malloc(n * sizeof *placed);
    if (!placed) {
        rc = fs_err(FS_ENOMEM, "plan: no memory for %zu tensors", n);
        goto fail;
    }
    rc = plan_items_load(tensors, n, align, items);
    if (rc)
        goto fail;
    qsort(items, n, sizeof *items, plan_item_cmp);

    for (size_t i = 0; i < n; i++) {
        plan_item_t *it = &items[i];
        if (it->size == 0)
            continue; /* occupies nothing: offset 0, never in anyone's way */
        if (!plan_item_fit(items, placed, n_placed, it, &it->offset)) {
            rc = fs_err(FS_ERANGE, "plan: block size overflows placing tensor %zu (%zu bytes)",
                        it->index, it->size);
            goto fail;
        }
        plan_placed_insert(items, placed, n_placed++, i);
        if (it->offset + it->size > total)
            total = it->offset + it->size;
    }

    for (size_t i = 0; i < n; i++)
        tensors[items[i].index].offset = items[i].offset;
    *total_bytes = total;
fail:
    free(placed);
    free(items);
    return rc;
}

/* Saturating add. */
static size_t plan_add_sat(size_t a, size_t b)
{
    return a > SIZE_MAX - b ? SIZE_MAX : a + b;
}

size_t alloc_plan_peak_live_bytes(const alloc_plan_tensor_t *tensors, size_t n, size_t align)
{
    if (!plan_align_valid(align))
        align = ALLOC_PLAN_DEFAULT_ALIGN;
    /* The live sum only rises at a first_step, so the peak is at one. */
    size_t peak = 0;
    for (size_t i = 0; i < n; i++) {
        uint32_t step = tensors[i].first_step;
        if (step > tensors[i].last_step)
            continue;
        size_t live = 0;
        for (size_t j = 0; j < n; j++) {
            const alloc_plan_tensor_t *t = &tensors[j];
            if (t->first_step > step || t->last_step < step)
                continue;
            size_t sz;
            live = plan_add_sat(live, plan_round_up(t->size_bytes, align, &sz) ? sz : SIZE_MAX);
        }
        if (live > peak)
            peak = live;
    }
    return peak;
}
