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
 *   5. The same placement runs again in three other orders, and the
 *      smallest block wins: greedy by breadth (Pisarchyk & Lee's other
 *      strategy: the tensors of the steps with the most live bytes first),
 *      by area (size x lifetime) and by lifetime. No order dominates: by
 *      size suits chains; breadth, area and lifetime suit graphs where
 *      short-lived workspaces sit among long-lived activations (residual
 *      nets, attention).
 *   6. While the block is still above the lower bound, a bounded seeded
 *      local search tries the size order with a few nearby swaps.
 *   0. With a hint (alloc_plan_build_hinted: the order the previous plan of
 *      the same graph won with), that order is placed first; if it comes
 *      as close to the bound as it did then, or within 5% of it
 *      (PLAN_GOOD_ENOUGH), it is the plan and 1-6 are skipped, else it
 *      competes with them. The tensors of one graph keep
 *      their relative sizes across input shapes, so an order good for one
 *      shape is good for the next: on BERT-base it both cuts planning per
 *      new shape and carries orders that reach the bound to shapes where
 *      the fixed orders stop 20% above it (bench/RESULTS.md).
 * Guarantee: two tensors whose step ranges intersect occupy disjoint byte
 * ranges [offset, offset + aligned size), because step 3 only places a
 * tensor in space that no intersecting placed tensor covers. Hence the
 * tensors live at any one step are pairwise disjoint inside the block, and
 * the block size is at least alloc_plan_peak_live_bytes. The plan is not
 * optimal in general (the problem is NP-hard); that function gives the
 * lower bound to compare against.
 * Cost: O(n^2) per placement (O(n) scan and insertion per tensor), four
 * fixed orders, then at most about 2e7 steps of search (stopping after
 * PLAN_SEARCH_PATIENCE tries in a row without a smaller block); O(n) scratch. */
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

/* Places items in `order` (item indices), each at its best fit among the
 * items placed before it. Writes offsets into items and *total. `placed` is
 * scratch of n entries. false if the block size overflows. */
static bool plan_place(plan_item_t *items, const size_t *order, size_t n, size_t *placed,
                       size_t *total)
{
    size_t n_placed = 0, end = 0;
    for (size_t k = 0; k < n; k++) {
        plan_item_t *it = &items[order[k]];
        it->offset = 0;
        if (it->size == 0)
            continue; /* occupies nothing: offset 0, never in anyone's way */
        if (!plan_item_fit(items, placed, n_placed, it, &it->offset))
            return false;
        plan_placed_insert(items, placed, n_placed++, order[k]);
        if (it->offset + it->size > end)
            end = it->offset + it->size;
    }
    *total = end;
    return true;
}

/* Greedy by breadth: steps by the bytes live at them, widest first; at each,
 * its not yet ordered items by size (the sorted item order). Puts the
 * tensors of the most crowded steps first, where packing matters most. */
static bool plan_order_by_breadth(const plan_item_t *items, size_t n, size_t *order)
{
    uint32_t max_step = 0;
    for (size_t i = 0; i < n; i++)
        if (items[i].last > max_step)
            max_step = items[i].last;
    size_t n_steps = (size_t)max_step + 1;
    size_t *breadth = calloc(n_steps, sizeof *breadth);
    uint32_t *steps = malloc(n_steps * sizeof *steps);
    bool *taken = calloc(n, sizeof *taken);
    if (!breadth || !steps || !taken) {
        free(breadth);
        free(steps);
        free(taken);
        return false;
    }
    for (size_t i = 0; i < n; i++)
        for (uint32_t s = items[i].first; s <= items[i].last; s++)
            breadth[s] = breadth[s] > SIZE_MAX - items[i].size ? SIZE_MAX : breadth[s] + items[i].size;
    for (size_t s = 0; s < n_steps; s++)
        steps[s] = (uint32_t)s;
    /* Insertion sort, widest first, earlier step on ties: steps are few. */
    for (size_t a = 1; a < n_steps; a++) {
        uint32_t s = steps[a];
        size_t b = a;
        while (b > 0 && breadth[steps[b - 1]] < breadth[s]) {
            steps[b] = steps[b - 1];
            b--;
        }
        steps[b] = s;
    }
    size_t k = 0;
    for (size_t si = 0; si < n_steps; si++)
        for (size_t i = 0; i < n; i++)
            if (!taken[i] && items[i].first <= steps[si] && steps[si] <= items[i].last) {
                taken[i] = true;
                order[k++] = i;
            }
    free(breadth);
    free(steps);
    free(taken);
    return true;
}

/* Orders tried after greedy by size: by breadth (0), by area (1: size x
 * lifetime, largest first), by lifetime (2: longest first, then size). */
#define PLAN_N_ALT_ORDERS 3

/* The sort key of item i for strategy 1 or 2 (larger first). */
static double plan_order_key(const plan_item_t *it, int strategy)
{
    double life = (double)(it->last - it->first + 1);
    return strategy == 1 ? (double)it->size * life : life * 1e18 + (double)it->size;
}

/* Fills `order` by key, largest first; ties keep the size order (a stable
 * insertion sort over the size-sorted items). */
static void plan_order_by_key(const plan_item_t *items, size_t n, size_t *order, int strategy)
{
    for (size_t a = 0; a < n; a++) {
        double key = plan_order_key(&items[a], strategy);
        size_t b = a;
        while (b > 0 && plan_order_key(&items[order[b - 1]], strategy) < key) {
            order[b] = order[b - 1];
            b--;
        }
        order[b] = a;
    }
}

/* The most bytes live at one step, over aligned sizes: the lower bound. */
static size_t plan_items_peak(const plan_item_t *items, size_t n)
{
    size_t peak = 0;
    for (size_t i = 0; i < n; i++) {
        size_t live = 0;
        for (size_t j = 0; j < n; j++)
            if (items[j].first <= items[i].first && items[i].first <= items[j].last)
                live += items[j].size;
        if (live > peak)
            peak = live;
    }
    return peak;
}

/* Keeps the placement just made as the best: each item's offset, and the
 * order that made it. */
static void plan_keep(const plan_item_t *items, const size_t *order, size_t n, size_t *best,
                      size_t *win)
{
    for (size_t i = 0; i < n; i++) {
        best[i] = items[i].offset;
        win[i] = order[i];
    }
}

/* A hinted placement this close to the lower bound is taken without the
 * fixed orders and the search. On BERT-base (200 new shapes, seq 16) the
 * hint's order alone takes 0.1-0.2 ms and comes within 5% of the bound
 * for 88% of shapes; the full path, run to shave the last few percent,
 * takes 2-5 ms. The kept ratio is the plan's own, so accepted plans do
 * not drift upward from one shape to the next. */
#define PLAN_GOOD_ENOUGH 1.05

/* Tries of the local search in a row without a smaller block, after
 * which it stops: on graphs whose best order sits well above the bound
 * (BERT-base at some batch and sequence sizes: 1.2x), the full budget
 * found nothing and cost 15 ms of every new shape's plan. */
#define PLAN_SEARCH_PATIENCE 12

/* Local search, while the block is above the lower bound: the size order
 * with a few random swaps of nearby items, placed again, the best kept.
 * Seeded, so plans are reproducible; bounded to about 2e7 placement steps
 * (n^2 per try), and stops as soon as it meets the bound. On residual nets
 * whose workspaces interleave with long-lived activations, the fixed orders
 * leave 20% over the bound where a swap or two finds it. */
static void plan_search(plan_item_t *items, size_t n, size_t align, size_t bound, size_t *order,
                        size_t *placed, size_t *best, size_t *win, size_t *total)
{
    if (n < 2 || *total <= bound)
        return;
    size_t tries = n > 4472 ? 8 : (size_t)(20000000.0 / ((double)n * (double)n));
    if (tries > 512)
        tries = 512;
    if (tries < 8)
        tries = 8;
    uint64_t rng = 0x9E3779B97F4A7C15ull ^ (uint64_t)n ^ (uint64_t)align;
    size_t since_better = 0;
    for (size_t t = 0; t < tries && *total > bound && since_better < PLAN_SEARCH_PATIENCE; t++) {
        since_better++;
        for (size_t i = 0; i < n; i++)
            order[i] = i;
        /* xorshift64 */
        rng ^= rng << 13, rng ^= rng >> 7, rng ^= rng << 17;
        size_t swaps = 1 + (size_t)(rng % 20);
        for (size_t k = 0; k < swaps; k++) {
            rng ^= rng << 13, rng ^= rng >> 7, rng ^= rng << 17;
            size_t a = (size_t)(rng % (n - 1));
            size_t b = a + 1 + (size_t)((rng >> 32) % 8);
            if (b >= n)
                b = n - 1;
            size_t tmp = order[a];
            order[a] = order[b];
            order[b] = tmp;
        }
        size_t alt = 0;
        if (plan_place(items, order, n, placed, &alt) && alt < *total) {
            *total = alt;
            since_better = 0;
            plan_keep(items, order, n, best, win);
        }
    }
}

/* The hint's order as item indices in `order` (pos: scratch of n); false
 * when the hint is empty, of another size, or not a permutation. */
static bool plan_hint_order(const plan_item_t *items, size_t n, const alloc_plan_hint_t *hint,
                            size_t *order, size_t *pos)
{
    if (!hint || hint->n != n || !hint->order || !(hint->ratio >= 1.0))
        return false;
    for (size_t k = 0; k < n; k++)
        pos[k] = SIZE_MAX;
    for (size_t k = 0; k < n; k++)
        pos[items[k].index] = k;
    for (size_t i = 0; i < n; i++) {
        size_t c = hint->order[i];
        if (c >= n || pos[c] == SIZE_MAX)
            return false; /* out of range, or seen twice */
        order[i] = pos[c];
        pos[c] = SIZE_MAX;
    }
    return true;
}

/* Writes the winning order (item indices in win) into the hint as caller
 * indices, with its ratio; empties the hint when no memory is had. */
static void plan_hint_keep(alloc_plan_hint_t *hint, const plan_item_t *items, const size_t *win,
                           size_t n, size_t total, size_t bound)
{
    if (hint->n != n || !hint->order) {
        alloc_plan_hint_fini(hint);
        if (!(hint->order = malloc(n * sizeof *hint->order)))
            return;
        hint->n = n;
    }
    for (size_t i = 0; i < n; i++)
        hint->order[i] = items[win[i]].index;
    hint->ratio = bound ? (double)total / (double)bound : 1.0;
    if (hint->ratio < 1.0)
        hint->ratio = 1.0;
}

void alloc_plan_hint_fini(alloc_plan_hint_t *hint)
{
    if (!hint)
        return;
    free(hint->order);
    *hint = (alloc_plan_hint_t){0};
}

int alloc_plan_build(alloc_plan_tensor_t *tensors, size_t n, size_t align, size_t *total_bytes)
{
    return alloc_plan_build_hinted(tensors, n, align, NULL, total_bytes);
}

int alloc_plan_build_hinted(alloc_plan_tensor_t *tensors, size_t n, size_t align,
                            alloc_plan_hint_t *hint, size_t *total_bytes)
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
    plan_item_t *items = malloc(n * sizeof *items);
    size_t *placed = malloc(n * sizeof *placed);
    size_t *order = malloc(n * sizeof *order);
    size_t *best = malloc(n * sizeof *best);
    size_t *win = malloc(n * sizeof *win);
    if (!items || !placed || !order || !best || !win) {
        rc = fs_err(FS_ENOMEM, "plan: no memory for %zu tensors", n);
        goto fail;
    }
    rc = plan_items_load(tensors, n, align, items);
    if (rc)
        goto fail;
    qsort(items, n, sizeof *items, plan_item_cmp);
    size_t bound = plan_items_peak(items, n);

    size_t total = SIZE_MAX, alt = 0;
    /* The hint's order first: as tight as last time, or within
     * PLAN_GOOD_ENOUGH of the bound, and it is the plan. */
    if (plan_hint_order(items, n, hint, order, placed) && plan_place(items, order, n, placed, &alt)) {
        total = alt;
        plan_keep(items, order, n, best, win);
        double ratio = hint->ratio > PLAN_GOOD_ENOUGH ? hint->ratio : PLAN_GOOD_ENOUGH;
        if ((double)total <= ratio * (double)bound * (1.0 + 1e-12))
            goto done;
    }
    /* Strategy 1, greedy by size: the sorted order itself. */
    for (size_t i = 0; i < n; i++)
        order[i] = i;
    if (!plan_place(items, order, n, placed, &alt)) {
        rc = fs_err(FS_ERANGE, "plan: the block size overflows size_t");
        goto fail;
    }
    if (alt < total) {
        total = alt;
        plan_keep(items, order, n, best, win);
    }
    /* The other strategies; each kept only if strictly smaller, so the
     * result stays deterministic. */
    for (int strategy = 0; strategy < PLAN_N_ALT_ORDERS; strategy++) {
        bool ok = strategy == 0 ? plan_order_by_breadth(items, n, order)
                                : (plan_order_by_key(items, n, order, strategy), true);
        if (ok && plan_place(items, order, n, placed, &alt) && alt < total) {
            total = alt;
            plan_keep(items, order, n, best, win);
        }
    }
    plan_search(items, n, align, bound, order, placed, best, win, &total);
done:
    for (size_t i = 0; i < n; i++)
        tensors[items[i].index].offset = best[i];
    *total_bytes = total;
    if (hint)
        plan_hint_keep(hint, items, win, n, total, bound);
fail:
    free(win);
    free(best);
    free(order);
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
