/* test_parallel.c -- tests for engine/cpu/parallel.c: the kernels' parallel for. */
#include <criterion/criterion.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <unistd.h>

#include "engine/cpu/parallel.h"

/* Counts visits per index; flags a chunk that is empty, out of range, or
 * smaller than min_chunk without being the last. */
typedef struct visits {
    int64_t n, min_chunk;
    atomic_int *count;
    atomic_int bad_chunks;
    atomic_int n_chunks;
} visits_t;

static void visits_init(visits_t *v, int64_t n, int64_t min_chunk)
{
    v->n = n;
    v->min_chunk = min_chunk < 1 ? 1 : min_chunk;
    v->count = calloc((size_t)(n > 0 ? n : 1), sizeof *v->count);
    cr_assert_not_null(v->count);
    atomic_init(&v->bad_chunks, 0);
    atomic_init(&v->n_chunks, 0);
}

static void visit(void *ctx, int64_t begin, int64_t end)
{
    visits_t *v = ctx;
    atomic_fetch_add(&v->n_chunks, 1);
    if (begin < 0 || end > v->n || begin >= end || (end < v->n && end - begin < v->min_chunk)) {
        atomic_fetch_add(&v->bad_chunks, 1);
        return;
    }
    for (int64_t i = begin; i < end; i++)
        atomic_fetch_add(&v->count[i], 1);
}

/* Runs one range and checks every index was visited once; frees v. */
static void check_once(int threads, int64_t n, int64_t min_chunk)
{
    visits_t v;
    visits_init(&v, n, min_chunk);
    eng_parallel_for(threads, n, min_chunk, visit, &v);
    cr_expect_eq(atomic_load(&v.bad_chunks), 0, "threads %d n %lld chunk %lld: bad chunk",
                 threads, (long long)n, (long long)min_chunk);
    int64_t wrong = 0;
    for (int64_t i = 0; i < n; i++)
        wrong += atomic_load(&v.count[i]) != 1;
    cr_expect_eq(wrong, 0, "threads %d n %lld chunk %lld: %lld indices not visited once",
                 threads, (long long)n, (long long)min_chunk, (long long)wrong);
    free(v.count);
}

TestSuite(engine_parallel);

Test(engine_parallel, visits_every_index_exactly_once)
{
    static const int threads[] = {1, 2, 3, 4, 8, 64};
    static const int64_t ns[] = {1, 2, 3, 7, 16, 100, 1000, 4097, 100003};
    static const int64_t chunks[] = {0, 1, 3, 16, 1000, 200000};
    for (size_t t = 0; t < sizeof threads / sizeof *threads; t++)
        for (size_t i = 0; i < sizeof ns / sizeof *ns; i++)
            for (size_t c = 0; c < sizeof chunks / sizeof *chunks; c++)
                check_once(threads[t], ns[i], chunks[c]);
}

Test(engine_parallel, empty_range_calls_nothing)
{
    visits_t v;
    visits_init(&v, 0, 1);
    eng_parallel_for(4, 0, 1, visit, &v);
    eng_parallel_for(4, -5, 1, visit, &v);
    cr_expect_eq(atomic_load(&v.n_chunks), 0);
    free(v.count);
}

/* Records the threads that ran chunks. */
typedef struct who {
    pthread_t caller;
    atomic_int other_thread;
    atomic_int n_chunks;
} who_t;

static void record_thread(void *ctx, int64_t begin, int64_t end)
{
    who_t *w = ctx;
    atomic_fetch_add(&w->n_chunks, 1);
    if (!pthread_equal(pthread_self(), w->caller))
        atomic_fetch_add(&w->other_thread, 1);
}

Test(engine_parallel, one_thread_runs_the_whole_range_inline)
{
    who_t w = {.caller = pthread_self()};
    eng_parallel_for(1, 1000000, 1, record_thread, &w);
    cr_expect_eq(atomic_load(&w.n_chunks), 1);
    cr_expect_eq(atomic_load(&w.other_thread), 0);
}

Test(engine_parallel, range_under_two_chunks_runs_inline)
{
    who_t w = {.caller = pthread_self()};
    eng_parallel_for(8, 199, 100, record_thread, &w);
    cr_expect_eq(atomic_load(&w.n_chunks), 1);
    cr_expect_eq(atomic_load(&w.other_thread), 0);
}

/* Each outer index runs an inner parallel for over its own row. */
typedef struct nested {
    int64_t rows, cols;
    atomic_int *count;
    atomic_int inner_chunks;
} nested_t;

static void nested_row(void *ctx, int64_t begin, int64_t end)
{
    int64_t *base = ctx; /* [0]: the nested_t address as an integer, [1]: the row */
    nested_t *nt = (nested_t *)(intptr_t)base[0];
    atomic_fetch_add(&nt->inner_chunks, 1);
    for (int64_t j = begin; j < end; j++)
        atomic_fetch_add(&nt->count[base[1] * nt->cols + j], 1);
}

static void nested_outer(void *ctx, int64_t begin, int64_t end)
{
    nested_t *nt = ctx;
    for (int64_t r = begin; r < end; r++) {
        int64_t arg[2] = {(int64_t)(intptr_t)nt, r};
        eng_parallel_for(4, nt->cols, 1, nested_row, arg);
    }
}

Test(engine_parallel, nested_call_runs_inline_without_deadlock)
{
    nested_t nt = {.rows = 64, .cols = 257};
    nt.count = calloc((size_t)(nt.rows * nt.cols), sizeof *nt.count);
    cr_assert_not_null(nt.count);
    atomic_init(&nt.inner_chunks, 0);
    eng_parallel_for(4, nt.rows, 1, nested_outer, &nt);
    /* Inline inner calls: one chunk per row. */
    cr_expect_eq(atomic_load(&nt.inner_chunks), nt.rows);
    for (int64_t i = 0; i < nt.rows * nt.cols; i++)
        cr_expect_eq(atomic_load(&nt.count[i]), 1, "element %lld", (long long)i);
    free(nt.count);
}

static void *concurrent_caller(void *arg)
{
    int64_t seed = (int64_t)(intptr_t)arg;
    for (int round = 0; round < 200; round++)
        check_once(1 + (int)((seed + round) % 4), 1000 + (seed * 7919 + round * 31) % 5000,
                   1 + round % 64);
    return NULL;
}

Test(engine_parallel, concurrent_callers_each_get_every_index_once)
{
    pthread_t t[4];
    for (int i = 0; i < 4; i++)
        cr_assert_eq(pthread_create(&t[i], NULL, concurrent_caller, (void *)(intptr_t)i), 0);
    for (int i = 0; i < 4; i++)
        pthread_join(t[i], NULL);
}

Test(engine_parallel, grain_makes_the_minimum_work)
{
    cr_expect_eq(eng_parallel_grain(0), ENG_PARALLEL_MIN_WORK);
    cr_expect_eq(eng_parallel_grain(1), ENG_PARALLEL_MIN_WORK);
    cr_expect_eq(eng_parallel_grain(ENG_PARALLEL_MIN_WORK), 1);
    cr_expect_eq(eng_parallel_grain(10 * ENG_PARALLEL_MIN_WORK), 1);
    cr_expect_eq(eng_parallel_grain(ENG_PARALLEL_MIN_WORK / 2 + 1), 2);
}

Test(engine_parallel, forked_child_starts_its_own_workers)
{
    check_once(2, 100000, 1); /* the parent has its workers */
    pid_t pid = fork();
    cr_assert_geq(pid, 0);
    if (pid == 0) {
        visits_t v;
        visits_init(&v, 100000, 1);
        eng_parallel_for(2, v.n, 1, visit, &v);
        int wrong = atomic_load(&v.bad_chunks) != 0;
        for (int64_t i = 0; i < v.n; i++)
            wrong |= atomic_load(&v.count[i]) != 1;
        free(v.count);
        _exit(wrong);
    }
    int status = 0;
    cr_assert_eq(waitpid(pid, &status, 0), pid);
    cr_expect(WIFEXITED(status) && WEXITSTATUS(status) == 0, "child status %d", status);
}
