/* policy.h -- release policies: when cached memory goes back to the device.
 *
 * A policy is created by name with its parameters and attached to a cache
 * (alloc_cache_policy_add), which then calls its hooks. Several may be
 * attached at once; each counts what it released in the cache's stats.
 *   cache      keeps everything cached (PyTorch's default); does nothing.
 *   periodic   empty every `every_n_requests` requests and/or every
 *              `every_ns` (checked at request end and on ticks).
 *   arena      each batch's activations in one arena of the planned size,
 *              handed back at batch end; before the cache grows for an
 *              arena, the pool's free segments are released, so varying
 *              batch shapes do not pile up segments.
 *   idle_trim  after `after_ns` with no request in flight, trim the cache
 *              to `keep_bytes` of free cache (once per idle period).
 *   watermark  when reserved would exceed `fraction` of the limit, release
 *              free segments oldest first until it does not (checked before
 *              the cache grows, and on ticks).
 * Time comes from fs_clock_now_ns(), so tests drive it exactly.
 *
 * Threading: hooks may run on several threads at once; each policy locks
 * its own state. */
#ifndef FS_ALLOC_POLICY_H
#define FS_ALLOC_POLICY_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "alloc/cache.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef enum alloc_policy_kind {
    ALLOC_POLICY_CACHE = 0,
    ALLOC_POLICY_PERIODIC,
    ALLOC_POLICY_ARENA,
    ALLOC_POLICY_IDLE_TRIM,
    ALLOC_POLICY_WATERMARK,
    ALLOC_POLICY_N
} alloc_policy_kind_t;

/* Every kind's parameters; a kind reads only its own. */
typedef struct alloc_policy_params {
    struct {
        uint64_t every_n_requests; /* 0: not by count */
        uint64_t every_ns;         /* 0: not by time */
    } periodic;
    struct {
        size_t min_block_bytes;    /* an arena's first block is at least this; 0: none */
    } arena;
    struct {
        uint64_t after_ns;         /* idle time before trimming; > 0 */
        size_t keep_bytes;         /* free cache to keep */
    } idle_trim;
    struct {
        double fraction;           /* of the cache's limit, (0, 1] */
    } watermark;
} alloc_policy_params_t;

/* Defaults: periodic every 1000 requests and 60 s; arena no minimum;
 * idle_trim after 30 s keeping 0; watermark 0.8. */
void alloc_policy_params_default(alloc_policy_params_t *out);

/* Parses a kind name ("cache", "periodic", "arena", "idle_trim",
 * "watermark"). 0, or FS_EINVAL with a message listing the names. */
int alloc_policy_kind_parse(const char *name, alloc_policy_kind_t *out);
const char *alloc_policy_kind_name(alloc_policy_kind_t kind);

/* Creates a policy. `params` (borrowed, copied) may be NULL for the
 * defaults. 0 and *out (caller frees with alloc_policy_destroy unless
 * attached to a cache, which then owns it), or FS_EINVAL naming the bad
 * parameter or kind, or FS_ENOMEM; nothing is created on error. Timers
 * (periodic, idle_trim) start at creation. */
int alloc_policy_create(alloc_policy_kind_t kind, const alloc_policy_params_t *params,
                        alloc_policy_t **out);
int alloc_policy_create_by_name(const char *name, const alloc_policy_params_t *params,
                                alloc_policy_t **out);
void alloc_policy_destroy(alloc_policy_t *p);

alloc_policy_kind_t alloc_policy_kind(const alloc_policy_t *p);

/* Times this policy released memory (releases of 0 bytes are not
 * counted), and the bytes it released: the same bytes the cache counts
 * under the policy's reason. The arena policy releases nothing itself; the
 * free segments the cache drops before growing for its arenas are in the
 * cache's released_bytes[ALLOC_RELEASE_ARENA]. Cannot fail. */
typedef struct alloc_policy_stats {
    uint64_t n_releases;
    uint64_t released_bytes;
    uint64_t n_batches;        /* arena: batches served */
} alloc_policy_stats_t;
void alloc_policy_stats(alloc_policy_t *p, alloc_policy_stats_t *out);

#ifdef __cplusplus
}
#endif
#endif
