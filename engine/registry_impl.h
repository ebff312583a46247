/* registry_impl.h -- the structs that registry.c (entries, load, swap,
 * unload, index) and batcher.c (queue, workers, concatenation and split)
 * share. Not a public header: the server sees registry.h only.
 *
 * The main types and their invariants:
 * - eng_registry_t: entries by name. `lock` guards the entry list and every
 *   entry's fields; `stats_lock` guards every stats record (counters are
 *   written by workers without the registry lock).
 * - reg_entry_t: one model name, from its first load (or failed load) to the
 *   registry's destroy. At most one load or unload of a name runs at a time
 *   (`busy`); `current` and each of `older`, when set, hold one reference
 *   of their served version.
 * - eng_served_t: one loaded version. Immutable after creation but for its
 *   queue, phase, batching options, running batches and reference count,
 *   which `lock` guards. At most max_running batches run on it at once,
 *   workers' and submitters' (eng_served_submit_run) together. It is freed
 *   only by the thread that took it out of service, after its workers have
 *   been joined, its last reference released and its last batch ended.
 *
 * Lock order: registry lock, then a served version's lock, then the stats
 * lock. Nothing takes the registry lock while holding a served lock, and no
 * request's `done` runs under any of them. */
#ifndef FS_ENGINE_REGISTRY_IMPL_H
#define FS_ENGINE_REGISTRY_IMPL_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "engine/registry.h"

/* The stats of one (model, version); lives as long as the registry. */
typedef struct reg_stats {
    int64_t version;
    eng_model_stats_t s;             /* under the registry's stats_lock */
    /* One record per batch size executed, sorted by size; under stats_lock.
     * Grown on a new size; an execution whose record cannot be grown (out of
     * host memory) is logged and left out of these alone. */
    eng_batch_stat_t *batch;
    size_t n_batch, cap_batch;
    struct reg_stats *next;
} reg_stats_t;

/* Where a served version is in its life; guarded by eng_served_t.lock. */
typedef enum served_phase {
    SERVED_SERVING = 0,              /* accepts submits */
    SERVED_RETIRING,                 /* replaced: refuses submits, drains its queue */
    SERVED_UNLOADING,                /* unloaded: refuses submits, queue failed */
} served_phase_t;

struct eng_served {
    eng_registry_t *registry;        /* borrowed: outlives every version */
    char name[ENG_MODEL_NAME_MAX];
    int64_t version;
    eng_serve_options_t options;
    /* One instance per device, owned (destroyed when the version is
     * freed), each in its device's cache (model_caches[k]: the request
     * hooks run on every one). model is models[0]. */
    size_t n_models;
    eng_model_t *models[ENG_DEVICES_MAX];
    alloc_cache_t *model_caches[ENG_DEVICES_MAX];
    eng_model_t *model;
    alloc_cache_t *cache;            /* model_caches[0] */
    size_t n_inputs, n_outputs;
    eng_io_info_t *inputs;           /* n_inputs; strings borrowed from the model */
    /* Every input and output leads with one symbolic dim of one name: a
     * request's rows are its first dim. Otherwise a request counts as one row. */
    bool batch_dim;
    bool batches;                    /* batch_dim and max_batch_size > 1 */
    uint32_t max_rows;               /* max_batch_size when batching, else 1 */
    reg_stats_t *stats;              /* borrowed from the entry; under stats_lock */

    /* Created and destroyed by registry.c (served_new, served_free). */
    pthread_mutex_t lock;            /* guards everything below */
    /* Workers: a request arrived, a batch ended (a slot is free), or stop
     * (CLOCK_MONOTONIC). */
    pthread_cond_t work;
    /* The retiring thread: the last reference went, or, out of service,
     * the last running batch ended. */
    pthread_cond_t idle;
    served_phase_t phase;
    bool stop;                       /* workers exit once the queue is empty */
    unsigned refs;                   /* the registry's own (while current) + acquires */
    /* Batches running now, taken by workers or by callers of
     * eng_served_submit_run; at most max_running (instances, at least 1,
     * fixed at start). */
    unsigned n_running, max_running;
    unsigned model_running[ENG_DEVICES_MAX]; /* of n_running, the batches on models[k] */
    unsigned next_model;             /* where the search for the least busy model starts */
    eng_request_t *head, *tail;      /* waiting requests, oldest first */
    size_t n_queued;
    unsigned n_workers;
    pthread_t *workers;
    /* The sequence batcher (sequence.c), or NULL: made at load after the
     * model, freed after the batcher stopped (served_seq_destroy). */
    struct eng_seq *seq;
};

typedef struct reg_entry {
    char name[ENG_MODEL_NAME_MAX];
    eng_model_state_t state;
    char reason[FS_ERRMSG_MAX];      /* see eng_model_entry_t.reason */
    eng_served_t *current;           /* the newest version serving; NULL when nothing serves */
    eng_served_t *older[ENG_VERSIONS_MAX - 1]; /* the other versions serving, newest first */
    size_t n_older;                  /* 0 when current is NULL */
    int64_t last_version;            /* the version served last, -1: never */
    bool busy;                       /* a load or unload of this name runs */
    reg_stats_t *stats;              /* one record per version ever served */
    struct reg_entry *next;
} reg_entry_t;

struct eng_registry {
    char *repository;
    size_t n_devices;                /* the server's devices, at least 1 */
    eng_device_t devices[ENG_DEVICES_MAX];
    char devices_name[ENG_DEVICES_MAX * ENG_DEVICE_NAME_MAX]; /* "cuda:0", "cuda:0 and cuda:1" */
    eng_memory_t *device_memory[ENG_DEVICES_MAX], *cpu_memory; /* borrowed */
    eng_serve_options_fn options;
    eng_serve_verify_fn verify;
    void *options_user;

    pthread_mutex_t lock;            /* guards the entries */
    pthread_cond_t changed;          /* an entry stopped being busy */
    reg_entry_t *entries;
    pthread_mutex_t stats_lock;      /* guards every reg_stats_t.s */
    atomic_bool flushing;            /* eng_registry_flush was called */
};

/* batcher.c */

/* Fills s->n_inputs, n_outputs and inputs (the requests' checks) from
 * s->model. 0, or FS_ENOMEM (served_free frees what was made). */
int served_inputs_init(eng_served_t *s);

/* Fills s->batch_dim, batches and max_rows from s->inputs, s->model and
 * s->options and starts the workers (s->lock and the conds are ready). 0,
 * or FS_ENOMEM with nothing left running (served_free frees the rest). */
int served_batcher_start(eng_served_t *s);

/* Recomputes s->batches and s->max_rows from s->options (s->lock held, or
 * before the workers start). */
void served_batching_update_locked(eng_served_t *s);

/* Stops taking submits and stops the workers, and joins them. With
 * `fail_queued` (unload) the requests still queued fail with FS_ESTATE at
 * once, on this thread; else (retire) the workers first run everything
 * queued. Either way a batch already running finishes; one run by a caller
 * of eng_served_submit_run may still be running on return (n_running > 0):
 * served_finish waits for it. Cannot fail. */
void served_batcher_stop(eng_served_t *s, bool fail_queued);

/* The batcher's own submit (eng_served_submit, or with `run`
 * eng_served_submit_run), which does not look at sequences: the sequence
 * batcher hands its requests to it. */
int served_submit(eng_served_t *s, eng_request_t *req, bool run);

/* sequence.c */

typedef struct eng_seq eng_seq_t;
/* s->seq for s->options.sequence (enabled), its controls and states
 * checked against s->model, the state owner made in `host_cache`. 0, or
 * FS_EINVAL / FS_ENOTSUP naming what does not fit, FS_ENOMEM; nothing made
 * on error. */
int served_seq_create(eng_served_t *s, alloc_cache_t *host_cache);
/* Routes a sequence request (eng_served_submit's contract, registry.h). */
int served_seq_submit(eng_served_t *s, eng_request_t *req, bool run);
/* Frees every sequence and its state, once the batcher has stopped and
 * every batch has ended; NULL s->seq is a no-op. 0, or FS_EBUSY naming
 * the state owner when bytes are left (logged). */
int served_seq_destroy(eng_served_t *s);

#endif
