/* trace.h -- Triton's trace extension at level TIMESTAMPS: the settings
 * (global, and per model over them) and the traces, written as Triton
 * writes them by a thread of their own.
 *
 * Threading: internally locked; every function may be called from any
 * thread. */
#ifndef FS_SERVER_TRACE_H
#define FS_SERVER_TRACE_H

#include <cjson/cJSON.h>
#include <stdint.h>

#include "config/config.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct srv_trace srv_trace_t;

/* What one traced request measured, fs_clock_now_ns() each (0: not
 * measured, left out of the trace). */
typedef struct srv_trace_times {
    uint64_t request_start_ns;    /* the request's arrival */
    uint64_t queue_start_ns;      /* its submit to the batcher */
    uint64_t compute_start_ns;    /* its batch's start */
    uint64_t compute_input_end_ns;   /* its batch's inputs concatenated (= start run alone) */
    uint64_t compute_output_start_ns; /* its batch's run done, the split begins (= end alone) */
    uint64_t compute_end_ns;      /* its batch's end */
    uint64_t request_end_ns;      /* its answer queued */
} srv_trace_times_t;

/* Counters, for /metrics. */
typedef struct srv_trace_stats {
    uint64_t written;             /* traces written to their file */
    uint64_t dropped;             /* traces dropped: the writer's queue was full */
    uint64_t write_errors;        /* files that could not be opened or written */
} srv_trace_stats_t;

/* Starts tracing with cfg's trace settings as the global ones, and the
 * writer thread. 0, or FS_EINVAL (level TIMESTAMPS without a file) /
 * FS_ENOMEM / FS_EIO (no thread); nothing made on error. Caller frees with
 * srv_trace_destroy. */
int srv_trace_create(const cfg_t *cfg, srv_trace_t **out);
/* Writes what is buffered, closes the files (each a complete JSON array)
 * and frees. NULL is a no-op. */
void srv_trace_destroy(srv_trace_t *t);

/* The settings of `model` (NULL or "": the global ones) as Triton answers
 * GET v2[/models/<m>]/trace/setting: every value a string, trace_level a
 * list. NULL on FS_ENOMEM. */
cJSON *srv_trace_settings_json(srv_trace_t *t, const char *model);
/* Applies a POST body's settings (`body`, an object; borrowed) to
 * `model` (NULL or "": the global ones). A key absent keeps its value; a
 * model's key set to null goes back to the global value (null on a global
 * one: FS_EINVAL). 0, or FS_EINVAL naming the key and what was wrong (an
 * unknown key, a bad value, TENSORS, TIMESTAMPS without a file) with
 * nothing changed, or FS_ENOMEM. */
int srv_trace_settings_update(srv_trace_t *t, const char *model, const cJSON *body);

/* One finished inference of `model` version `version`: counted for the
 * sampling of its settings, and, when sampled, its trace queued for the
 * writer (never waits on the disk). Cannot fail: a trace the queue has no
 * room for is counted as dropped. */
void srv_trace_request(srv_trace_t *t, const char *model, int64_t version,
                       const srv_trace_times_t *times);

/* Blocks until the writer has written everything queued before the call
 * (tests, and a settings change that closes a file). Cannot fail. */
void srv_trace_flush(srv_trace_t *t);
void srv_trace_stats(srv_trace_t *t, srv_trace_stats_t *out);

#ifdef __cplusplus
}
#endif
#endif
