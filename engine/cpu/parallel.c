/* parallel.c -- a persistent worker pool behind eng_parallel_for.
 *
 * Algorithm: the range [0, n) is cut into n_chunks chunks of `chunk`
 * indices (about four per thread, never fewer than min_chunk indices). The
 * caller publishes the job -- fn, ctx, the chunking and an atomic
 * next-chunk counter -- under the pool mutex, bumps the job generation and
 * broadcasts on a condition variable; the first `n_wanted` workers (by id)
 * wake, and they and the caller claim chunks with an atomic fetch-add until
 * none is left. Each wanted worker then decrements `pending`, and the caller
 * waits on a second condition variable until it reaches 0, so no worker
 * still touches the job (or the caller's ctx) when the call returns.
 *
 * Guarantees: every index is passed to fn exactly once (a chunk number is
 * handed out once by the fetch-add, and chunks do not overlap); idle
 * workers sleep on the condition variable (no spinning that would take CPU
 * from the server's other threads); the pool runs one job at a time, held by
 * run_lock, which a caller only try-locks -- a second thread's call, and a
 * call from inside fn (flagged thread-locally), run inline, so nothing
 * waits on the pool while holding it and no call can deadlock. The workers
 * are started lazily, up to the largest n_threads asked for (capped at the
 * online CPUs), and live until the process exits; they own no heap memory.
 * A child forked from a process with workers starts with none (a fork
 * handler resets the pool) and starts its own when it first needs them. */
#include "engine/cpu/parallel.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <unistd.h>

/* Hard cap on worker threads, whatever the CPU count. */
#define POOL_MAX_WORKERS 255
/* Chunks per thread: some slack for chunks of uneven cost. */
#define POOL_CHUNKS_PER_THREAD 4

typedef void (*pool_fn_t)(void *ctx, int64_t begin, int64_t end);

typedef struct pool_job {
    pool_fn_t fn;
    void *ctx;
    int64_t n;                  /* indices in all */
    int64_t chunk;              /* indices per chunk (the last may hold fewer) */
    int64_t n_chunks;
    atomic_int_fast64_t next;   /* the next chunk number to hand out */
} pool_job_t;

typedef struct pool_worker {
    pthread_t thread;
    int id;                     /* index in pool.workers */
    uint64_t start_generation;  /* the generation when it was started: it joins later ones */
} pool_worker_t;

/* The process-wide pool. Fields marked (lock) are read and written with
 * `lock` held; (run) only by the thread holding run_lock. */
static struct {
    pthread_mutex_t run_lock;   /* held by the caller whose job the pool runs */
    pthread_mutex_t lock;       /* guards the job hand-over fields below */
    pthread_cond_t work_cv;     /* workers wait here for a new generation */
    pthread_cond_t done_cv;     /* the caller waits here for pending == 0 */
    uint64_t generation;        /* (lock) bumped once per published job */
    int n_wanted;               /* (lock) workers with id < n_wanted join the current job */
    int pending;                /* (lock) wanted workers not yet done with it */
    pool_job_t job;             /* (lock) to publish; read by the joined workers until
                                 * they decrement pending */
    int n_workers;              /* (run) workers started */
    int n_cpus;                 /* (run) online CPUs, 0 until first read */
    pool_worker_t workers[POOL_MAX_WORKERS]; /* (run) the first n_workers are running */
} pool = {
    .run_lock = PTHREAD_MUTEX_INITIALIZER,
    .lock = PTHREAD_MUTEX_INITIALIZER,
    .work_cv = PTHREAD_COND_INITIALIZER,
    .done_cv = PTHREAD_COND_INITIALIZER,
};

/* Set on a thread while it runs chunks: a nested call runs inline. */
static _Thread_local bool in_parallel;

/* Claims and runs chunks of `job` until none is left. Cannot fail. */
static void pool_job_drain(pool_job_t *job)
{
    for (;;) {
        int64_t k = atomic_fetch_add_explicit(&job->next, 1, memory_order_relaxed);
        if (k >= job->n_chunks)
            return;
        int64_t begin = k * job->chunk;
        int64_t end = job->n - begin < job->chunk ? job->n : begin + job->chunk;
        job->fn(job->ctx, begin, end);
    }
}

/* A worker: sleeps until a job generation it has not seen, joins it when its
 * id is wanted, reports done; forever (it never returns). */
static void *pool_worker_main(void *arg)
{
    pool_worker_t *w = arg;
    in_parallel = true;
    uint64_t seen = w->start_generation;
    pthread_mutex_lock(&pool.lock);
    for (;;) {
        while (pool.generation == seen)
            pthread_cond_wait(&pool.work_cv, &pool.lock);
        seen = pool.generation;
        if (w->id >= pool.n_wanted)
            continue;
        pthread_mutex_unlock(&pool.lock);
        pool_job_drain(&pool.job);
        pthread_mutex_lock(&pool.lock);
        if (--pool.pending == 0)
            pthread_cond_signal(&pool.done_cv);
    }
    return NULL; /* unreachable; GCC's -Wreturn-type asks for it */
}

/* In a forked child only the forking thread exists: forget the workers and
 * re-create the locks, which another thread may have held at the fork. */
static void pool_atfork_child(void)
{
    pthread_mutex_init(&pool.run_lock, NULL);
    pthread_mutex_init(&pool.lock, NULL);
    pthread_cond_init(&pool.work_cv, NULL);
    pthread_cond_init(&pool.done_cv, NULL);
    pool.n_wanted = 0;
    pool.pending = 0;
    pool.n_workers = 0;
    in_parallel = false;
}

static void pool_atfork_register(void)
{
    pthread_atfork(NULL, NULL, pool_atfork_child);
}

/* Starts workers until there are `want` (capped); run_lock must be held.
 * Returns how many are running: fewer than asked when a thread could not be
 * started (those that did start stay). */
static int pool_grow_locked(int want)
{
    static pthread_once_t atfork_once = PTHREAD_ONCE_INIT;
    if (want > POOL_MAX_WORKERS)
        want = POOL_MAX_WORKERS;
    if (want > pool.n_workers)
        pthread_once(&atfork_once, pool_atfork_register);
    while (pool.n_workers < want) {
        pool_worker_t *w = &pool.workers[pool.n_workers];
        w->id = pool.n_workers;
        /* No job is in flight (run_lock is held), so generation is stable. */
        pthread_mutex_lock(&pool.lock);
        w->start_generation = pool.generation;
        pthread_mutex_unlock(&pool.lock);
        if (pthread_create(&w->thread, NULL, pool_worker_main, w) != 0)
            break;
        pool.n_workers++;
    }
    return pool.n_workers;
}

void eng_parallel_for(int n_threads, int64_t n, int64_t min_chunk,
                      void (*fn)(void *ctx, int64_t begin, int64_t end), void *ctx)
{
    if (n <= 0)
        return;
    if (min_chunk < 1)
        min_chunk = 1;
    if (n_threads <= 1 || n < 2 * min_chunk || in_parallel ||
        pthread_mutex_trylock(&pool.run_lock) != 0) {
        fn(ctx, 0, n);
        return;
    }
    if (pool.n_cpus == 0) {
        long cpus = sysconf(_SC_NPROCESSORS_ONLN);
        pool.n_cpus = cpus < 1 ? 1 : cpus > POOL_MAX_WORKERS + 1 ? POOL_MAX_WORKERS + 1 : (int)cpus;
    }
    int threads = n_threads < pool.n_cpus ? n_threads : pool.n_cpus;
    int workers = pool_grow_locked(threads - 1);
    if (workers > threads - 1)
        workers = threads - 1;
    int64_t target = (int64_t)(workers + 1) * POOL_CHUNKS_PER_THREAD;
    int64_t chunk = (n + target - 1) / target;
    if (chunk < min_chunk)
        chunk = min_chunk;
    int64_t n_chunks = (n + chunk - 1) / chunk;
    if (workers == 0 || n_chunks < 2) {
        pthread_mutex_unlock(&pool.run_lock);
        fn(ctx, 0, n);
        return;
    }
    int wanted = n_chunks - 1 < workers ? (int)(n_chunks - 1) : workers;

    pthread_mutex_lock(&pool.lock);
    pool.job.fn = fn;
    pool.job.ctx = ctx;
    pool.job.n = n;
    pool.job.chunk = chunk;
    pool.job.n_chunks = n_chunks;
    atomic_store_explicit(&pool.job.next, 0, memory_order_relaxed);
    pool.n_wanted = wanted;
    pool.pending = wanted;
    pool.generation++;
    pthread_cond_broadcast(&pool.work_cv);
    pthread_mutex_unlock(&pool.lock);

    in_parallel = true;
    pool_job_drain(&pool.job);
    in_parallel = false;

    pthread_mutex_lock(&pool.lock);
    while (pool.pending > 0)
        pthread_cond_wait(&pool.done_cv, &pool.lock);
    pthread_mutex_unlock(&pool.lock);
    pthread_mutex_unlock(&pool.run_lock);
}
