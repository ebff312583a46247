/* alloc_test.h -- shared fixtures for the alloc/ suites: a host provider
 * wrapped in the fault provider, a cache over it, and the end-of-test check
 * that every counter is back to zero. Header-only: each suite includes it. */
#ifndef FS_TESTS_ALLOC_TEST_H
#define FS_TESTS_ALLOC_TEST_H

#include <criterion/criterion.h>

#include "alloc/cache.h"
#include "alloc/provider.h"
#include "common/error.h"

/* A cache over fault(host). Fields are public to the test. */
typedef struct alloc_fixture {
    alloc_provider_t *host;
    alloc_provider_t *fault;
    alloc_cache_t *cache;
} alloc_fixture_t;

/* Builds the fixture; `fault_cfg` and `cache_cfg` may be NULL. */
static inline void alloc_fixture_init(alloc_fixture_t *f, const alloc_fault_config_t *fault_cfg,
                                      const alloc_cache_config_t *cache_cfg)
{
    alloc_fault_config_t none = {0};
    cr_assert_eq(alloc_provider_host_create(&f->host), 0, "host provider: %s", fs_errmsg());
    cr_assert_eq(alloc_provider_fault_create(f->host, fault_cfg ? fault_cfg : &none, &f->fault), 0,
                 "fault provider: %s", fs_errmsg());
    cr_assert_eq(alloc_cache_create(f->fault, cache_cfg, &f->cache), 0, "cache: %s", fs_errmsg());
}

/* Asserts the invariants hold and nothing is allocated, empties the cache,
 * asserts nothing is reserved and the provider holds nothing, then destroys
 * the fixture. */
static inline void alloc_fixture_fini(alloc_fixture_t *f)
{
    cr_expect_eq(alloc_cache_check(f->cache), 0, "invariants at end: %s", fs_errmsg());
    alloc_cache_stats_t st;
    alloc_cache_stats(f->cache, &st);
    cr_expect_eq(st.allocated.current, 0, "allocated at end: %lld", (long long)st.allocated.current);
    cr_expect_eq(st.requested.current, 0, "requested at end: %lld", (long long)st.requested.current);
    cr_expect_eq(st.active.current, 0, "active at end: %lld", (long long)st.active.current);
    cr_expect_eq(st.blocks.current, 0, "blocks at end: %lld", (long long)st.blocks.current);
    alloc_cache_empty(f->cache, ALLOC_RELEASE_EMPTY);
    cr_expect_eq(alloc_cache_check(f->cache), 0, "invariants after empty: %s", fs_errmsg());
    alloc_cache_stats(f->cache, &st);
    cr_expect_eq(st.reserved.current, 0, "reserved after empty: %lld",
                 (long long)st.reserved.current);
    cr_expect_eq(st.segments.current, 0, "segments after empty: %lld",
                 (long long)st.segments.current);
    alloc_cache_destroy(f->cache);
    alloc_fault_counts_t fc;
    cr_assert_eq(alloc_fault_counts(f->fault, &fc), 0);
    cr_expect_eq(fc.live_bytes, 0, "provider live bytes at end: %llu",
                 (unsigned long long)fc.live_bytes);
    cr_expect_eq(fc.live_allocs, 0, "provider live allocs at end: %llu",
                 (unsigned long long)fc.live_allocs);
    alloc_provider_destroy(f->fault);
    alloc_provider_destroy(f->host);
    f->cache = NULL;
    f->fault = f->host = NULL;
}

/* ---- helpers added for the cache, arena and stress suites ---------------- */

#include <stdio.h>
#include <string.h>

#define ALLOC_TEST_KiB ((size_t)1 << 10)
#define ALLOC_TEST_MiB ((size_t)1 << 20)

/* The cache's stats, by value. */
static inline alloc_cache_stats_t alloc_test_stats(alloc_cache_t *c)
{
    alloc_cache_stats_t st;
    memset(&st, 0, sizeof(st));
    alloc_cache_stats(c, &st);
    return st;
}

/* The fault provider's counters, by value. */
static inline alloc_fault_counts_t alloc_test_fault_counts(alloc_provider_t *fault)
{
    alloc_fault_counts_t fc;
    memset(&fc, 0, sizeof(fc));
    cr_assert_eq(alloc_fault_counts(fault, &fc), 0, "fault counts: %s", fs_errmsg());
    return fc;
}

/* A snapshot the caller frees with alloc_snapshot_free. */
static inline alloc_snapshot_t *alloc_test_snapshot(alloc_cache_t *c)
{
    alloc_snapshot_t *s = NULL;
    cr_assert_eq(alloc_cache_snapshot(c, &s), 0, "snapshot: %s", fs_errmsg());
    cr_assert_not_null(s);
    return s;
}

/* Finds the block starting at `ptr` in a snapshot; false if none. */
static inline bool alloc_test_find_block(const alloc_snapshot_t *s, const void *ptr,
                                         const alloc_segment_info_t **seg,
                                         const alloc_block_info_t **blk)
{
    uintptr_t p = (uintptr_t)ptr;
    for (size_t i = 0; i < s->n_segments; i++) {
        const alloc_segment_info_t *sg = &s->segments[i];
        if (p < sg->address || p >= sg->address + sg->size)
            continue;
        for (size_t j = 0; j < sg->n_blocks; j++) {
            if (sg->address + sg->blocks[j].offset == p) {
                if (seg)
                    *seg = sg;
                if (blk)
                    *blk = &sg->blocks[j];
                return true;
            }
        }
        return false;
    }
    return false;
}

/* The segment holding `ptr`, or NULL. */
static inline const alloc_segment_info_t *alloc_test_find_segment(const alloc_snapshot_t *s,
                                                                  const void *ptr)
{
    uintptr_t p = (uintptr_t)ptr;
    for (size_t i = 0; i < s->n_segments; i++)
        if (p >= s->segments[i].address && p < s->segments[i].address + s->segments[i].size)
            return &s->segments[i];
    return NULL;
}

/* Allocates for the server owner, asserting success. */
static inline void *alloc_test_alloc(alloc_cache_t *c, size_t bytes, alloc_stream_t stream)
{
    void *p = NULL;
    int rc = alloc_cache_alloc(c, bytes, stream, ALLOC_OWNER_SERVER, &p);
    cr_assert_eq(rc, 0, "alloc %zu: %s", bytes, fs_errmsg());
    cr_assert_not_null(p);
    return p;
}

/* Frees, asserting success. */
static inline void alloc_test_free(alloc_cache_t *c, void *p)
{
    cr_assert_eq(alloc_cache_free(c, p), 0, "free %p: %s", p, fs_errmsg());
}

/* The rounded size of the block at `p`, asserting it is known. */
static inline size_t alloc_test_block_size(alloc_cache_t *c, const void *p)
{
    size_t n = 0;
    cr_assert_eq(alloc_cache_block_size(c, p, &n), 0, "block_size %p: %s", p, fs_errmsg());
    return n;
}

/* The state of the block starting at `p`, asserting it is in the snapshot. */
static inline alloc_block_info_t alloc_test_block_info(alloc_cache_t *c, const void *p)
{
    alloc_snapshot_t *s = alloc_test_snapshot(c);
    const alloc_block_info_t *b = NULL;
    cr_assert(alloc_test_find_block(s, p, NULL, &b), "no block at %p in the snapshot", p);
    alloc_block_info_t copy = *b;
    alloc_snapshot_free(s);
    return copy;
}

/* Checks what every snapshot must satisfy, whatever else runs at the same
 * time: segments disjoint (their order is tested on its own); blocks in address order
 * tiling their segment exactly, in 512-byte multiples; a segment's
 * allocated_bytes is the sum of its allocated blocks; small-pool segments
 * are ALLOC_SMALL_SEGMENT_BYTES; no two adjacent free blocks of the same
 * stream (they must have coalesced). Returns 0, or -1 with a description in
 * `why`. Thread-safe (no Criterion assertion inside). */
static inline int alloc_test_snapshot_problem(const alloc_snapshot_t *s, char *why, size_t n)
{
    for (size_t i = 0; i < s->n_segments; i++) {
        const alloc_segment_info_t *sg = &s->segments[i];
        for (size_t k = 0; k < i; k++) {
            const alloc_segment_info_t *o = &s->segments[k];
            if (o->address < sg->address + sg->size && sg->address < o->address + o->size) {
                snprintf(why, n, "segments %zu and %zu overlap", k, i);
                return -1;
            }
        }
        if (sg->n_blocks == 0 || sg->blocks == NULL) {
            snprintf(why, n, "segment %zu has no blocks", i);
            return -1;
        }
        if ((sg->pool == ALLOC_POOL_SMALL) != (sg->size == ALLOC_SMALL_SEGMENT_BYTES)) {
            snprintf(why, n, "segment %zu: pool %d with size %zu", i, (int)sg->pool, sg->size);
            return -1;
        }
        size_t off = 0, allocated = 0;
        for (size_t j = 0; j < sg->n_blocks; j++) {
            const alloc_block_info_t *b = &sg->blocks[j];
            if (b->offset != off) {
                snprintf(why, n, "segment %zu block %zu: offset %zu, expected %zu", i, j,
                         b->offset, off);
                return -1;
            }
            if (b->size == 0 || b->size % ALLOC_MIN_BLOCK_BYTES != 0) {
                snprintf(why, n, "segment %zu block %zu: size %zu", i, j, b->size);
                return -1;
            }
            if (b->state != ALLOC_BLOCK_FREE && b->state != ALLOC_BLOCK_ALLOCATED &&
                b->state != ALLOC_BLOCK_PENDING) {
                snprintf(why, n, "segment %zu block %zu: state %d", i, j, (int)b->state);
                return -1;
            }
            if (b->state == ALLOC_BLOCK_ALLOCATED) {
                allocated += b->size;
                if (b->requested > b->size) {
                    snprintf(why, n, "segment %zu block %zu: requested %zu > size %zu", i, j,
                             b->requested, b->size);
                    return -1;
                }
            }
            if (j > 0 && b->state == ALLOC_BLOCK_FREE &&
                sg->blocks[j - 1].state == ALLOC_BLOCK_FREE &&
                sg->blocks[j - 1].stream == b->stream) {
                snprintf(why, n,
                         "segment %zu blocks %zu and %zu: adjacent free blocks of stream %lu "
                         "not coalesced",
                         i, j - 1, j, (unsigned long)b->stream);
                return -1;
            }
            off += b->size;
        }
        if (off != sg->size) {
            snprintf(why, n, "segment %zu: blocks cover %zu of %zu bytes", i, off, sg->size);
            return -1;
        }
        if (allocated != sg->allocated_bytes) {
            snprintf(why, n, "segment %zu: allocated_bytes %zu, blocks say %zu", i,
                     sg->allocated_bytes, allocated);
            return -1;
        }
    }
    return 0;
}

/* Asserts the cache's own invariant walk passes, that
 * alloc_test_snapshot_problem finds nothing, and that the snapshot
 * agrees with the stats (call only while no other thread uses the cache):
 * reserved, allocated, active, blocks, segments, per-pool reserved and
 * allocated, largest_free_bytes, free_cached_bytes. */
static inline void alloc_test_check_consistent(alloc_cache_t *c)
{
    cr_expect_eq(alloc_cache_check(c), 0, "invariants: %s", fs_errmsg());
    alloc_snapshot_t *s = alloc_test_snapshot(c);
    alloc_cache_stats_t st = alloc_test_stats(c);
    char why[256];
    cr_expect_eq(alloc_test_snapshot_problem(s, why, sizeof(why)), 0, "snapshot: %s", why);
    size_t reserved = 0, allocated = 0, active = 0, n_blocks = 0, largest_free = 0;
    size_t pool_reserved[ALLOC_POOL_N] = {0}, pool_allocated[ALLOC_POOL_N] = {0};
    for (size_t i = 0; i < s->n_segments; i++) {
        const alloc_segment_info_t *sg = &s->segments[i];
        reserved += sg->size;
        pool_reserved[sg->pool] += sg->size;
        for (size_t j = 0; j < sg->n_blocks; j++) {
            const alloc_block_info_t *b = &sg->blocks[j];
            if (b->state == ALLOC_BLOCK_ALLOCATED) {
                allocated += b->size;
                pool_allocated[sg->pool] += b->size;
                n_blocks++;
            }
            if (b->state != ALLOC_BLOCK_FREE)
                active += b->size;
            if (b->state == ALLOC_BLOCK_FREE && b->size > largest_free)
                largest_free = b->size;
        }
    }
    cr_expect_eq((size_t)st.reserved.current, reserved, "reserved %lld, snapshot %zu",
                 (long long)st.reserved.current, reserved);
    cr_expect_eq((size_t)st.allocated.current, allocated, "allocated %lld, snapshot %zu",
                 (long long)st.allocated.current, allocated);
    cr_expect_eq((size_t)st.active.current, active, "active %lld, snapshot %zu",
                 (long long)st.active.current, active);
    cr_expect_eq((size_t)st.blocks.current, n_blocks, "blocks %lld, snapshot %zu",
                 (long long)st.blocks.current, n_blocks);
    cr_expect_eq((size_t)st.segments.current, s->n_segments, "segments %lld, snapshot %zu",
                 (long long)st.segments.current, s->n_segments);
    for (int p = 0; p < ALLOC_POOL_N; p++) {
        cr_expect_eq((size_t)st.pool_reserved[p].current, pool_reserved[p],
                     "pool %d reserved %lld, snapshot %zu", p,
                     (long long)st.pool_reserved[p].current, pool_reserved[p]);
        cr_expect_eq((size_t)st.pool_allocated[p].current, pool_allocated[p],
                     "pool %d allocated %lld, snapshot %zu", p,
                     (long long)st.pool_allocated[p].current, pool_allocated[p]);
    }
    cr_expect_eq((size_t)st.largest_free_bytes, largest_free, "largest_free %llu, snapshot %zu",
                 (unsigned long long)st.largest_free_bytes, largest_free);
    cr_expect_eq((size_t)st.free_cached_bytes, reserved - active,
                 "free_cached %llu, snapshot reserved - active %zu",
                 (unsigned long long)st.free_cached_bytes, reserved - active);
    alloc_snapshot_free(s);
}

#endif
