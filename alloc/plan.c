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
 *      the same graph, with as many tensors, won with), that order is
 *      placed first; if it comes
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
 * Cost: O(n^2) per placement (an O(n) scan of the placed tensors, kept in
 * one array in offset order, and an insertion per tensor); the bound and
 * the breadth order come from one O(n) sweep over radix-sorted steps. A
 * hinted plan is one placement; without a hint that comes close enough,
 * four fixed orders, then at most about 2e7 steps of search (stopping
 * after PLAN_SEARCH_PATIENCE tries in a row without a smaller block).
 * O(n) scratch. */
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

/* A placed item as the fit scans it: the placed items are kept in one
 * array in offset order, scanned front to back (one cache line holds more
 * than two), instead of item indices leading all over the items. */
typedef struct plan_slot {
    size_t offset, end;   /* [offset, end) in the block */
    uint32_t first, last; /* inclusive step range */
} plan_slot_t;

/* Best-fit offset for `it` among the `n_placed` placed slots (sorted by
 * offset). False if the end would overflow size_t. A gap of exactly the
 * item's size ends the scan: no later gap can be smaller, nor lower. */
static bool plan_item_fit(const plan_slot_t *placed, size_t n_placed, const plan_item_t *it,
                          size_t *offset)
{
    size_t prev_end = 0;
    size_t best_offset = 0, best_gap = SIZE_MAX;
    bool found = false;
    for (size_t k = 0; k < n_placed; k++) {
        const plan_slot_t *p = &placed[k];
        if (p->first > it->last || it->first > p->last)
            continue;
        if (p->offset > prev_end) {
            size_t gap = p->offset - prev_end;
            if (gap >= it->size && (!found || gap < best_gap)) {
                best_gap = gap;
                best_offset = prev_end;
                found = true;
                if (gap == it->size)
                    break;
            }
        }
        if (p->end > prev_end)
            prev_end = p->end;
    }
    if (!found) {
        if (it->size > SIZE_MAX - prev_end)
            return false;
        best_offset = prev_end;
    }
    *offset = best_offset;
    return true;
}

/* Inserts placed item `it` into the offset-ordered slots, after any equal
 * offset. */
static void plan_placed_insert(plan_slot_t *placed, size_t n_placed, const plan_item_t *it)
{
    size_t lo = 0, hi = n_placed;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        if (placed[mid].offset <= it->offset)
            lo = mid + 1;
        else
            hi = mid;
    }
    memmove(&placed[lo + 1], &placed[lo], (n_placed - lo) * sizeof *placed);
    placed[lo] = (plan_slot_t){.offset = it->offset, .end = it->offset + it->size,
                               .first = it->first, .last = it->last};
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
 * scratch of n slots. false if the block size overflows. */
static bool plan_place(plan_item_t *items, const size_t *order, size_t n, plan_slot_t *placed,
                       size_t *total)
{
    size_t n_placed = 0, end = 0;
    for (size_t k = 0; k < n; k++) {
        plan_item_t *it = &items[order[k]];
        it->offset = 0;
        if (it->size == 0)
            continue; /* occupies nothing: offset 0, never in anyone's way */
        if (!plan_item_fit(placed, n_placed, it, &it->offset))
            return false;
        plan_placed_insert(placed, n_placed++, it);
        if (it->offset + it->size > end)
            end = it->offset + it->size;
    }
    *total = end;
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

/* The step key the sweep sorts by: an item's first step, or its last. */
static uint32_t plan_step_key(const plan_item_t *it, bool last)
{
    return last ? it->last : it->first;
}

/* Fills idx with 0..n-1 sorted by each item's first (or last) step,
 * stably: LSD radix sort over 8-bit digits, as many as the largest key
 * has, so O(n) whatever the steps. tmp: scratch of n entries. */
static void plan_sort_by_step(const plan_item_t *items, size_t n, bool last, size_t *idx,
                              size_t *tmp)
{
    uint32_t all = 0;
    for (size_t i = 0; i < n; i++) {
        idx[i] = i;
        all |= plan_step_key(&items[i], last);
    }
    size_t *src = idx, *dst = tmp;
    for (unsigned shift = 0; shift < 32 && (all >> shift) != 0; shift += 8) {
        size_t start[257] = {0};
        for (size_t k = 0; k < n; k++)
            start[((plan_step_key(&items[src[k]], last) >> shift) & 255) + 1]++;
        for (int d = 0; d < 256; d++)
            start[d + 1] += start[d];
        for (size_t k = 0; k < n; k++)
            dst[start[(plan_step_key(&items[src[k]], last) >> shift) & 255]++] = src[k];
        size_t *t = src;
        src = dst;
        dst = t;
    }
    if (src != idx)
        memcpy(idx, src, n * sizeof *idx);
}

/* A step where an item starts, and the bytes live there. */
typedef struct plan_step_width {
    uint32_t step;
    size_t live;
} plan_step_width_t;

/* The one sweep over the steps where items start, dropping the items that
 * ended before: O(n) after the two sorts into by_first and by_last (tmp:
 * scratch; each n entries). Returns the most bytes live at one step, over
 * aligned sizes: the lower bound, SIZE_MAX when a sum overflows. With
 * `steps` (n entries), also each start step and the bytes live there, into
 * steps[0..*n_steps); those sums wrap past SIZE_MAX (plan_order_by_breadth
 * says why that is harmless). */
static size_t plan_sweep(const plan_item_t *items, size_t n, size_t *by_first, size_t *by_last,
                         size_t *tmp, plan_step_width_t *steps, size_t *n_steps)
{
    plan_sort_by_step(items, n, false, by_first, tmp);
    plan_sort_by_step(items, n, true, by_last, tmp);
    size_t live = 0, peak = 0, e = 0, ns = 0;
    bool overflow = false;
    for (size_t k = 0; k < n;) {
        uint32_t step = items[by_first[k]].first;
        /* Every item ending before `step` started before it: it was added. */
        while (e < n && items[by_last[e]].last < step)
            live -= items[by_last[e++]].size;
        for (; k < n && items[by_first[k]].first == step; k++) {
            size_t size = items[by_first[k]].size;
            overflow |= live > SIZE_MAX - size;
            live += size;
        }
        if (live > peak)
            peak = live;
        if (steps)
            steps[ns++] = (plan_step_width_t){.step = step, .live = live};
    }
    if (n_steps)
        *n_steps = ns;
    return overflow ? SIZE_MAX : peak;
}

/* Widest first; ties by the earlier step. */
static int plan_step_width_cmp(const void *a, const void *b)
{
    const plan_step_width_t *x = a, *y = b;
    if (x->live != y->live)
        return x->live > y->live ? -1 : 1;
    return x->step < y->step ? -1 : (x->step > y->step);
}

/* Greedy by breadth: steps by the bytes live at them, widest first; at each,
 * its not yet ordered items by size (the sorted item order). Puts the
 * tensors of the most crowded steps first, where packing matters most.
 * Only the steps where an item starts are visited: the items live at any
 * other step are live at the last start before it, a step at least as
 * wide and earlier, so visiting it would take nothing new. The widths come
 * from plan_sweep (a sum past SIZE_MAX wraps: then every order overflows
 * the block and the plan fails with FS_ERANGE, and this one is still a
 * permutation). O(n) to sort the steps' widths, O(n) per
 * step visited. false when no scratch memory was had. */
static bool plan_order_by_breadth(const plan_item_t *items, size_t n, size_t *order)
{
    size_t *by_first = malloc(3 * n * sizeof *by_first);
    plan_step_width_t *steps = malloc(n * sizeof *steps);
    bool *taken = calloc(n, sizeof *taken);
    if (!by_first || !steps || !taken) {
        free(by_first);
        free(steps);
        free(taken);
        return false;
    }
    size_t n_steps = 0;
    (void)plan_sweep(items, n, by_first, by_first + n, by_first + 2 * n, steps, &n_steps);
    qsort(steps, n_steps, sizeof *steps, plan_step_width_cmp);
    size_t k = 0;
    for (size_t si = 0; si < n_steps; si++)
        for (size_t i = 0; i < n; i++)
            if (!taken[i] && items[i].first <= steps[si].step && steps[si].step <= items[i].last) {
                taken[i] = true;
                order[k++] = i;
            }
    free(by_first);
    free(steps);
    free(taken);
    return true;
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
                        plan_slot_t *placed, size_t *best, size_t *win, size_t *total)
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

/* The hint's slot for problems of n tensors, or NULL. */
static alloc_plan_hint_slot_t *plan_hint_slot(alloc_plan_hint_t *hint, size_t n)
{
    for (int k = 0; hint && k < ALLOC_PLAN_HINT_SLOTS; k++)
        if (hint->slot[k].n == n && hint->slot[k].order)
            return &hint->slot[k];
    return NULL;
}

/* The slot's order as item indices in `order` (pos: scratch of n); false
 * when there is no slot, or its order is not a permutation or its ratio
 * below 1. */
static bool plan_hint_order(const plan_item_t *items, size_t n, const alloc_plan_hint_slot_t *slot,
                            size_t *order, size_t *pos)
{
    if (!slot || !(slot->ratio >= 1.0))
        return false;
    for (size_t k = 0; k < n; k++)
        pos[k] = SIZE_MAX;
    for (size_t k = 0; k < n; k++)
        pos[items[k].index] = k;
    for (size_t i = 0; i < n; i++) {
        size_t c = slot->order[i];
        if (c >= n || pos[c] == SIZE_MAX)
            return false; /* out of range, or seen twice */
        order[i] = pos[c];
        pos[c] = SIZE_MAX;
    }
    return true;
}

/* Writes the winning order (item indices in win) into the hint's slot for
 * n as caller indices, with its ratio: the slot it has for n, else an empty
 * one, else the least recently used. Leaves that slot empty when no memory
 * is had. */
static void plan_hint_keep(alloc_plan_hint_t *hint, const plan_item_t *items, const size_t *win,
                           size_t n, size_t total, size_t bound)
{
    alloc_plan_hint_slot_t *slot = plan_hint_slot(hint, n);
    if (!slot) {
        slot = &hint->slot[0];
        for (int k = 1; k < ALLOC_PLAN_HINT_SLOTS && slot->order; k++)
            if (!hint->slot[k].order || hint->slot[k].used < slot->used)
                slot = &hint->slot[k];
        free(slot->order);
        *slot = (alloc_plan_hint_slot_t){0};
        if (!(slot->order = malloc(n * sizeof *slot->order)))
            return;
        slot->n = n;
    }
    for (size_t i = 0; i < n; i++)
        slot->order[i] = items[win[i]].index;
    slot->ratio = bound ? (double)total / (double)bound : 1.0;
    if (slot->ratio < 1.0)
        slot->ratio = 1.0;
    slot->used = ++hint->clock;
}

void alloc_plan_hint_fini(alloc_plan_hint_t *hint)
{
    if (!hint)
        return;
    for (int k = 0; k < ALLOC_PLAN_HINT_SLOTS; k++)
        free(hint->slot[k].order);
    *hint = (alloc_plan_hint_t){0};
}

int alloc_plan_build(alloc_plan_tensor_t *tensors, size_t n, size_t align, size_t *total_bytes)
{
    return alloc_plan_build_hinted(tensors, n, align, NULL, total_bytes, NULL);
}

int alloc_plan_build_hinted(alloc_plan_tensor_t *tensors, size_t n, size_t align,
                            alloc_plan_hint_t *hint, size_t *total_bytes, size_t *bound_bytes)
{
    if (align == 0)
        align = ALLOC_PLAN_DEFAULT_ALIGN;
    if (!plan_align_valid(align))
        return fs_err(FS_EINVAL, "plan: alignment %zu is not a power of two", align);
    if (n == 0) {
        *total_bytes = 0;
        if (bound_bytes)
            *bound_bytes = 0;
        return 0;
    }
    if (!tensors)
        return fs_err(FS_EINVAL, "plan: NULL tensor array with %zu tensors", n);
    if (n > SIZE_MAX / sizeof(plan_item_t))
        return fs_err(FS_ENOMEM, "plan: %zu tensors exceed the address space", n);

    int rc = 0;
    plan_item_t *items = malloc(n * sizeof *items);
    plan_slot_t *placed = malloc(n * sizeof *placed);
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
    size_t bound = plan_sweep(items, n, order, best, win, NULL, NULL);

    size_t total = SIZE_MAX, alt = 0;
    /* The hint's order first: as tight as last time, or within
     * PLAN_GOOD_ENOUGH of the bound, and it is the plan. */
    alloc_plan_hint_slot_t *slot = plan_hint_slot(hint, n);
    if (plan_hint_order(items, n, slot, order, best) && plan_place(items, order, n, placed, &alt)) {
        total = alt;
        plan_keep(items, order, n, best, win);
        double ratio = slot->ratio > PLAN_GOOD_ENOUGH ? slot->ratio : PLAN_GOOD_ENOUGH;
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
    if (bound_bytes)
        *bound_bytes = bound;
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
