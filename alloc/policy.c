/* policy.c -- the release policies: cache, periodic, arena, idle_trim,
 * watermark, each a static const function table over one shared struct.
 *
 * Each policy decides under its own mutex and acts on the cache after
 * dropping it. The one lock order is cache lock -> policy mutex: only
 * before_grow_locked runs with the cache lock held, and it may take the
 * policy mutex; every other hook releases the policy mutex before it calls
 * into the cache. So a thread holding a policy mutex never waits for the
 * cache lock, and no cycle can form.
 *
 * Guarantees, with `now` read from fs_clock_now_ns() by the cache:
 *   periodic   empties the cache at exactly every every_n_requests-th request
 *              end (counted since creation), and at the first request end or
 *              tick at least every_ns after its last empty (or its creation).
 *              An empty by count restarts the timer too: the timer bounds the
 *              time between empties, whatever caused the last one.
 *   idle_trim  trims once per idle period: at the first tick with no request
 *              in flight at least after_ns after the last request begin/end
 *              (or creation). The next trim needs new activity first. It
 *              then also returns the C heap's free memory to the system
 *              (glibc's malloc_trim), where request buffers went.
 *   watermark  before the cache grows by g while reserved + g > mark
 *              (mark = fraction * limit), releases free segments oldest first
 *              until reserved <= mark - g; on ticks, while reserved > mark,
 *              trims so that reserved drops to the mark. Without a limit it
 *              does nothing. It never refuses a grow: the cache's limit is the
 *              hard bound, the mark a soft one.
 *   arena      gives each batch an arena of max(plan, min_block_bytes),
 *              allocated with ALLOC_F_RELEASE_BEFORE_GROW, and destroys it at
 *              batch end.
 * Stats: n_releases counts the releases that gave back at least one byte;
 * released_bytes are the bytes this policy's own calls released (the same
 * bytes the cache counts under the policy's reason). The arena policy
 * releases nothing itself: the cache releases free segments on its behalf
 * while growing and counts them in its own stats under ALLOC_RELEASE_ARENA
 * (concurrent batches make a per-call delta of those stats unattributable),
 * so its policy stats count batches only. */
#include "alloc/policy.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#ifdef __GLIBC__ /* defined by the libc headers above */
#include <malloc.h>
#endif

#include "alloc/arena.h"
#include "alloc/policy_impl.h"
#include "common/clock.h"
#include "common/error.h"

struct alloc_policy {
    const struct alloc_policy_i *iface; /* static const table of the kind */
    alloc_policy_params_t params;       /* copied at creation; read-only after */
    pthread_mutex_t lock;               /* guards `state` and `stats` */
    union {
        struct {
            uint64_t n_request_ends;  /* request ends since creation */
            uint64_t last_release_ns; /* creation or the last empty */
        } periodic;
        struct {
            uint64_t n_in_flight;      /* begun and not yet ended */
            uint64_t last_activity_ns; /* creation or the last begin/end */
            bool trimmed;              /* trimmed since that activity */
        } idle_trim;
    } state;
    alloc_policy_stats_t stats;
};

static const char *const policy_kind_names[ALLOC_POLICY_N] = {
    [ALLOC_POLICY_CACHE] = "cache",
    [ALLOC_POLICY_PERIODIC] = "periodic",
    [ALLOC_POLICY_ARENA] = "arena",
    [ALLOC_POLICY_IDLE_TRIM] = "idle_trim",
    [ALLOC_POLICY_WATERMARK] = "watermark",
};

/* --- shared helpers ------------------------------------------------------ */

/* Nanoseconds from *since_ns to now_ns. A clock a test replaced may read
 * earlier than a time recorded before the replacement; the timer then
 * restarts at now_ns instead of waiting for the old clock's time to come
 * back. Policy lock held. */
static uint64_t policy_elapsed_ns(uint64_t *since_ns, uint64_t now_ns)
{
    if (now_ns < *since_ns)
        *since_ns = now_ns;
    return now_ns - *since_ns;
}

/* Counts a release of `bytes` (0: nothing was released, nothing counted).
 * Takes the policy lock; callable with the cache lock held. */
static void policy_stats_add_release(alloc_policy_t *p, size_t bytes)
{
    if (bytes == 0)
        return;
    pthread_mutex_lock(&p->lock);
    p->stats.n_releases++;
    p->stats.released_bytes += bytes;
    pthread_mutex_unlock(&p->lock);
}

/* --- periodic ------------------------------------------------------------ */

/* Whether an empty is due at `now_ns`, restarting the timer if so. One
 * caller wins each due empty, since the decision is made under the lock. */
static bool periodic_due(alloc_policy_t *p, uint64_t now_ns, bool request_ended)
{
    const uint64_t every_n = p->params.periodic.every_n_requests;
    const uint64_t every_ns = p->params.periodic.every_ns;
    bool due = false;
    pthread_mutex_lock(&p->lock);
    if (request_ended) {
        p->state.periodic.n_request_ends++;
        if (every_n > 0 && p->state.periodic.n_request_ends % every_n == 0)
            due = true;
    }
    if (every_ns > 0 && policy_elapsed_ns(&p->state.periodic.last_release_ns, now_ns) >= every_ns)
        due = true;
    if (due)
        p->state.periodic.last_release_ns = now_ns;
    pthread_mutex_unlock(&p->lock);
    return due;
}

static void periodic_request_end(alloc_policy_t *p, alloc_cache_t *c, uint64_t now_ns)
{
    if (periodic_due(p, now_ns, true))
        policy_stats_add_release(p, alloc_cache_empty(c, ALLOC_RELEASE_PERIODIC));
}

static void periodic_tick(alloc_policy_t *p, alloc_cache_t *c, uint64_t now_ns)
{
    if (periodic_due(p, now_ns, false))
        policy_stats_add_release(p, alloc_cache_empty(c, ALLOC_RELEASE_PERIODIC));
}

/* --- arena --------------------------------------------------------------- */

/* The arena is made with ALLOC_F_RELEASE_BEFORE_GROW: a batch takes one big
 * block, so free segments left by batches of other shapes are only waste
 * once the cache has to grow anyway. On error *arena is NULL and nothing is
 * counted. */
static int arena_batch_begin(alloc_policy_t *p, alloc_cache_t *c, size_t plan_bytes,
                             alloc_stream_t stream, alloc_owner_t owner, alloc_arena_t **arena)
{
    size_t first_bytes = plan_bytes;
    if (first_bytes < p->params.arena.min_block_bytes)
        first_bytes = p->params.arena.min_block_bytes;
    /* A batch with no activations still gets a usable (minimum) block. */
    if (first_bytes < ALLOC_MIN_BLOCK_BYTES)
        first_bytes = ALLOC_MIN_BLOCK_BYTES;
    *arena = NULL;
    int rc = alloc_arena_create(c, first_bytes, stream, owner, ALLOC_F_RELEASE_BEFORE_GROW, arena);
    if (rc < 0)
        return rc;
    pthread_mutex_lock(&p->lock);
    p->stats.n_batches++;
    pthread_mutex_unlock(&p->lock);
    return 0;
}

static void arena_batch_end(alloc_policy_t *p, alloc_cache_t *c, alloc_arena_t *arena)
{
    alloc_arena_destroy(arena);
}

/* --- idle_trim ----------------------------------------------------------- */

static void idle_trim_request_begin(alloc_policy_t *p, alloc_cache_t *c, uint64_t now_ns)
{
    pthread_mutex_lock(&p->lock);
    p->state.idle_trim.n_in_flight++;
    p->state.idle_trim.last_activity_ns = now_ns;
    p->state.idle_trim.trimmed = false;
    pthread_mutex_unlock(&p->lock);
}

static void idle_trim_request_end(alloc_policy_t *p, alloc_cache_t *c, uint64_t now_ns)
{
    pthread_mutex_lock(&p->lock);
    /* An end without a begin is the caller's bug; saturating keeps one
     * stray end from making the server look busy forever. */
    if (p->state.idle_trim.n_in_flight > 0)
        p->state.idle_trim.n_in_flight--;
    p->state.idle_trim.last_activity_ns = now_ns;
    p->state.idle_trim.trimmed = false;
    pthread_mutex_unlock(&p->lock);
}

static void idle_trim_tick(alloc_policy_t *p, alloc_cache_t *c, uint64_t now_ns)
{
    bool due = false;
    pthread_mutex_lock(&p->lock);
    if (p->state.idle_trim.n_in_flight == 0 && !p->state.idle_trim.trimmed &&
        policy_elapsed_ns(&p->state.idle_trim.last_activity_ns, now_ns) >=
            p->params.idle_trim.after_ns) {
        p->state.idle_trim.trimmed = true;
        due = true;
    }
    pthread_mutex_unlock(&p->lock);
    if (!due)
        return;
    policy_stats_add_release(
        p, alloc_cache_trim(c, p->params.idle_trim.keep_bytes, ALLOC_RELEASE_IDLE_TRIM));
#ifdef __GLIBC__
    /* The request and response buffers of the burst just ended live on the C
     * heap: glibc keeps freed memory in its arenas (and raises its mmap
     * threshold past the largest buffer freed), so without this the process
     * would hold its largest burst's buffers while idle. */
    malloc_trim(0);
#endif
}

/* --- watermark ----------------------------------------------------------- */

/* fraction * limit, never above the limit (double rounding could put it
 * there for limits near SIZE_MAX). */
static size_t watermark_mark_bytes(const alloc_policy_t *p, size_t limit_bytes)
{
    double mark = p->params.watermark.fraction * (double)limit_bytes;
    if (mark >= (double)limit_bytes)
        return limit_bytes;
    return (size_t)mark;
}

static void watermark_before_grow_locked(alloc_policy_t *p, alloc_cache_t *c, size_t grow_bytes)
{
    size_t limit = alloc_cache_limit_locked(c);
    if (limit == SIZE_MAX)
        return;
    size_t mark = watermark_mark_bytes(p, limit);
    size_t reserved = alloc_cache_reserved_locked(c);
    if (grow_bytes <= mark && reserved <= mark - grow_bytes)
        return;
    size_t target = grow_bytes < mark ? mark - grow_bytes : 0;
    policy_stats_add_release(
        p, alloc_cache_release_until_locked(c, target, ALLOC_RELEASE_WATERMARK));
}

/* The cache offers no unlocked "release until reserved <= target", so the
 * tick asks trim for the same thing: trim releases until
 * reserved <= active + keep, so keep = mark - active. alloc_cache_tick has
 * just polled fences, so active counts no block whose stream is done. The
 * stats and the trim are two lock holds, so allocations in between can
 * leave reserved a little off the mark; the next tick or grow corrects it. */
static void watermark_tick(alloc_policy_t *p, alloc_cache_t *c, uint64_t now_ns)
{
    alloc_cache_stats_t st;
    alloc_cache_stats(c, &st);
    if (st.limit_bytes >= SIZE_MAX)
        return;
    size_t mark = watermark_mark_bytes(p, (size_t)st.limit_bytes);
    size_t reserved = (size_t)st.reserved.current;
    size_t active = (size_t)st.active.current;
    if (reserved <= mark)
        return;
    size_t keep = active < mark ? mark - active : 0;
    policy_stats_add_release(p, alloc_cache_trim(c, keep, ALLOC_RELEASE_WATERMARK));
}

/* --- the tables ---------------------------------------------------------- */

static const struct alloc_policy_i policy_cache_iface = {
    .kind = ALLOC_POLICY_CACHE,
};

static const struct alloc_policy_i policy_periodic_iface = {
    .kind = ALLOC_POLICY_PERIODIC,
    .request_end = periodic_request_end,
    .tick = periodic_tick,
};

static const struct alloc_policy_i policy_arena_iface = {
    .kind = ALLOC_POLICY_ARENA,
    .batch_begin = arena_batch_begin,
    .batch_end = arena_batch_end,
};

static const struct alloc_policy_i policy_idle_trim_iface = {
    .kind = ALLOC_POLICY_IDLE_TRIM,
    .request_begin = idle_trim_request_begin,
    .request_end = idle_trim_request_end,
    .tick = idle_trim_tick,
};

static const struct alloc_policy_i policy_watermark_iface = {
    .kind = ALLOC_POLICY_WATERMARK,
    .tick = watermark_tick,
    .before_grow_locked = watermark_before_grow_locked,
};

/* The table of `kind`, or NULL for a value outside the enum. */
static const struct alloc_policy_i *policy_iface_get(alloc_policy_kind_t kind)
{
    static const struct alloc_policy_i *const ifaces[ALLOC_POLICY_N] = {
        [ALLOC_POLICY_CACHE] = &policy_cache_iface,
        [ALLOC_POLICY_PERIODIC] = &policy_periodic_iface,
        [ALLOC_POLICY_ARENA] = &policy_arena_iface,
        [ALLOC_POLICY_IDLE_TRIM] = &policy_idle_trim_iface,
        [ALLOC_POLICY_WATERMARK] = &policy_watermark_iface,
    };
    if ((unsigned)kind >= ALLOC_POLICY_N)
        return NULL;
    return ifaces[kind];
}

/* --- public API ---------------------------------------------------------- */

void alloc_policy_params_default(alloc_policy_params_t *out)
{
    memset(out, 0, sizeof *out);
    out->periodic.every_n_requests = 1000;
    out->periodic.every_ns = 60ull * 1000000000ull;
    out->arena.min_block_bytes = 0;
    out->idle_trim.after_ns = 30ull * 1000000000ull;
    out->idle_trim.keep_bytes = 0;
    out->watermark.fraction = 0.8;
}

int alloc_policy_kind_parse(const char *name, alloc_policy_kind_t *out)
{
    for (int k = 0; name && k < ALLOC_POLICY_N; k++) {
        if (strcmp(name, policy_kind_names[k]) == 0) {
            *out = (alloc_policy_kind_t)k;
            return 0;
        }
    }
    return fs_err(FS_EINVAL,
                  "policy '%s' is unknown: expected one of cache, periodic, arena, idle_trim, "
                  "watermark",
                  name ? name : "(null)");
}

const char *alloc_policy_kind_name(alloc_policy_kind_t kind)
{
    if ((unsigned)kind >= ALLOC_POLICY_N)
        return "unknown";
    return policy_kind_names[kind];
}

/* `v` in the fewest digits that read back as `v`, so a message quotes what
 * the user wrote (1.0000001, not %g's "1"). Returns buf. */
static const char *policy_double_text(double v, char *buf, size_t len)
{
    for (int precision = 6; precision < 17; precision++) {
        snprintf(buf, len, "%.*g", precision, v);
        if (strtod(buf, NULL) == v)
            return buf;
    }
    snprintf(buf, len, "%.17g", v);
    return buf;
}

/* FS_EINVAL naming the first bad parameter of `kind`, or 0. */
static int policy_params_check(alloc_policy_kind_t kind, const alloc_policy_params_t *params)
{
    switch (kind) {
    case ALLOC_POLICY_PERIODIC:
        if (params->periodic.every_n_requests == 0 && params->periodic.every_ns == 0)
            return fs_err(FS_EINVAL, "policy periodic: every_n_requests and every_ns are both 0; "
                                     "set at least one");
        return 0;
    case ALLOC_POLICY_IDLE_TRIM:
        if (params->idle_trim.after_ns == 0)
            return fs_err(FS_EINVAL, "policy idle_trim: after_ns is 0; it must be > 0");
        return 0;
    case ALLOC_POLICY_WATERMARK: {
        double f = params->watermark.fraction;
        char text[32];
        if (!(f > 0.0 && f <= 1.0)) /* NaN fails too */
            return fs_err(FS_EINVAL, "policy watermark: fraction %s is out of range (0, 1]",
                          policy_double_text(f, text, sizeof text));
        return 0;
    }
    case ALLOC_POLICY_CACHE:
    case ALLOC_POLICY_ARENA:
    case ALLOC_POLICY_N:
        break;
    }
    return 0;
}

int alloc_policy_create(alloc_policy_kind_t kind, const alloc_policy_params_t *params,
                        alloc_policy_t **out)
{
    const struct alloc_policy_i *iface = policy_iface_get(kind);
    if (!iface)
        return fs_err(FS_EINVAL, "policy kind %d is unknown", (int)kind);
    alloc_policy_params_t defaults;
    if (!params) {
        alloc_policy_params_default(&defaults);
        params = &defaults;
    }
    int rc = policy_params_check(kind, params);
    if (rc < 0)
        return rc;
    alloc_policy_t *p = calloc(1, sizeof *p);
    if (!p)
        return fs_err(FS_ENOMEM, "policy %s: out of memory for its state", policy_kind_names[kind]);
    p->iface = iface;
    p->params = *params;
    if (pthread_mutex_init(&p->lock, NULL) != 0) {
        free(p);
        return fs_err(FS_ENOMEM, "policy %s: cannot create its mutex", policy_kind_names[kind]);
    }
    uint64_t now_ns = fs_clock_now_ns();
    if (kind == ALLOC_POLICY_PERIODIC)
        p->state.periodic.last_release_ns = now_ns;
    else if (kind == ALLOC_POLICY_IDLE_TRIM)
        p->state.idle_trim.last_activity_ns = now_ns;
    *out = p;
    return 0;
}

int alloc_policy_create_by_name(const char *name, const alloc_policy_params_t *params,
                                alloc_policy_t **out)
{
    alloc_policy_kind_t kind;
    int rc = alloc_policy_kind_parse(name, &kind);
    if (rc < 0)
        return rc;
    return alloc_policy_create(kind, params, out);
}

void alloc_policy_destroy(alloc_policy_t *p)
{
    if (!p)
        return;
    if (p->iface->destroy)
        p->iface->destroy(p);
    pthread_mutex_destroy(&p->lock);
    free(p);
}

alloc_policy_kind_t alloc_policy_kind(const alloc_policy_t *p)
{
    return p->iface->kind;
}

void alloc_policy_stats(alloc_policy_t *p, alloc_policy_stats_t *out)
{
    pthread_mutex_lock(&p->lock);
    *out = p->stats;
    pthread_mutex_unlock(&p->lock);
}

/* --- wrappers the cache calls --------------------------------------------- */

void alloc_policy_on_timed(alloc_policy_t *p, alloc_policy_timed_t hook, alloc_cache_t *c,
                           uint64_t now_ns)
{
    void (*fn)(alloc_policy_t *, alloc_cache_t *, uint64_t) =
        hook == ALLOC_POLICY_ON_REQUEST_BEGIN ? p->iface->request_begin
        : hook == ALLOC_POLICY_ON_REQUEST_END ? p->iface->request_end
                                              : p->iface->tick;
    if (fn)
        fn(p, c, now_ns);
}

bool alloc_policy_provides_batch_memory(const alloc_policy_t *p)
{
    return p->iface->batch_begin != NULL;
}

/* A policy without batch memory gives none: *arena is NULL and the call
 * succeeds (the host asks only a policy that provides it). */
int alloc_policy_on_batch_begin(alloc_policy_t *p, alloc_cache_t *c, size_t plan_bytes,
                                alloc_stream_t stream, alloc_owner_t owner,
                                alloc_arena_t **arena)
{
    if (!p->iface->batch_begin) {
        *arena = NULL;
        return 0;
    }
    return p->iface->batch_begin(p, c, plan_bytes, stream, owner, arena);
}

void alloc_policy_on_batch_end(alloc_policy_t *p, alloc_cache_t *c, alloc_arena_t *arena)
{
    if (p->iface->batch_end)
        p->iface->batch_end(p, c, arena);
}

void alloc_policy_on_oom(alloc_policy_t *p, alloc_cache_t *c, size_t requested_bytes)
{
    if (p->iface->oom)
        p->iface->oom(p, c, requested_bytes);
}

void alloc_policy_on_before_grow_locked(alloc_policy_t *p, alloc_cache_t *c, size_t grow_bytes)
{
    alloc_cache_assert_locked(c);
    if (p->iface->before_grow_locked)
        p->iface->before_grow_locked(p, c, grow_bytes);
}
