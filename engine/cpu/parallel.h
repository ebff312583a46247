/* parallel.h -- the CPU kernels' `parallel for`: an index range split into
 * chunks that a process-wide pool of worker threads and the caller run
 * together.
 *
 * Every index in [0, n) is passed to fn exactly once, inside one [begin,
 * end) chunk; which thread runs which chunk varies from call to call, so a
 * kernel stays deterministic (and independent of the thread count) by
 * having each index write only its own output slots and by never combining
 * floating-point partial results across chunks.
 *
 * Threading: internally locked; any thread may call eng_parallel_for at any
 * time. The pool runs one range at a time: a call made while another
 * thread's range is running, or from inside fn (a nested call), runs its
 * whole range inline on the calling thread instead of waiting. */
#ifndef FS_ENGINE_CPU_PARALLEL_H
#define FS_ENGINE_CPU_PARALLEL_H

#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Work (in rough "simple float operations") below which a chunk is not worth
 * a thread handoff: a wake-up costs some microseconds. */
#define ENG_PARALLEL_MIN_WORK 32768

/* fn(ctx, begin, end) for chunks covering [0, n), using up to n_threads
 * threads (the caller included; capped at the online CPUs). Chunks hold at
 * least min_chunk indices (values < 1 count as 1), except the last. Runs
 * fn(ctx, 0, n) inline, with no handoff, when n_threads <= 1, when n <
 * 2 * min_chunk, when nested in another call's fn, or when the pool is busy
 * with another thread's range. Returns once every chunk has run. Cannot
 * fail: when worker threads cannot be started it runs with those it has
 * (inline at worst). n <= 0 calls nothing. `ctx` is borrowed for the call. */
void eng_parallel_for(int n_threads, int64_t n, int64_t min_chunk,
                      void (*fn)(void *ctx, int64_t begin, int64_t end), void *ctx);

/* The min_chunk for indices that each cost `work_per_index` (>= 0) units:
 * enough indices to make ENG_PARALLEL_MIN_WORK. Cannot fail. */
static inline int64_t eng_parallel_grain(int64_t work_per_index)
{
    return work_per_index >= ENG_PARALLEL_MIN_WORK ? 1
           : work_per_index <= 0                   ? ENG_PARALLEL_MIN_WORK
                                 : (ENG_PARALLEL_MIN_WORK + work_per_index - 1) / work_per_index;
}

#ifdef __cplusplus
}
#endif
#endif
