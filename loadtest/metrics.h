/* metrics.h -- what loadgen reads of the server's own account of itself:
 * the Prometheus text of GET /metrics and the JSON of GET /v1/memory,
 * reduced to the figures a flatness run follows.
 *
 * Threading: pure functions over the text they are given. */
#ifndef FS_LOADTEST_METRICS_H
#define FS_LOADTEST_METRICS_H

#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

/* One sample of /metrics. Memory figures are of the device caches
 * (cache="device", pool="all"), summed over devices: the pinned staging
 * cache of a GPU server is not the memory whose flatness is in question. */
typedef struct lg_metrics {
    double allocated, reserved;            /* flatserve_memory_{allocated,reserved}_bytes */
    double peak_allocated, peak_reserved;  /* flatserve_memory_peak_*_bytes */
    double weights, activations;           /* flatserve_model_memory_bytes by kind, summed */
    double rss;                            /* process_resident_memory_bytes */
    double device_allocs, device_frees;    /* flatserve_memory_device_{allocs,frees}_total */
    double released_idle_trim;             /* ..._released_bytes_total{policy="idle_trim"} */
    double inferences;                     /* nv_inference_request_success, summed */
    int have_memory;                       /* a device cache's reserved bytes were seen */
    int have_rss;
} lg_metrics_t;

/* Parses Prometheus text format 0.0.4 (comments, labels with escaped
 * quotes, optional timestamps). Returns 0, or FS_EPARSE naming the first
 * line that is not a sample; a text without the memory or RSS series parses
 * (have_memory / have_rss say so). */
int lg_metrics_parse(const char *text, lg_metrics_t *out);

/* One sample line: the metric name (NUL-terminated into name, truncated to
 * name_cap), the label text between the braces (*labels, *labels_len; empty
 * when none) and the value. Returns 0, or FS_EPARSE. */
int lg_prom_line(const char *line, size_t len, char *name, size_t name_cap, const char **labels,
                 size_t *labels_len, double *value);

/* The value of label `key` in a label text, unescaped into out. Returns 0,
 * FS_ENOENT when the label is absent, or FS_EPARSE. */
int lg_prom_label(const char *labels, size_t len, const char *key, char *out, size_t cap);

/* The device caches of GET /v1/memory (kind "device"), summed. */
typedef struct lg_memory {
    double allocated, reserved;  /* current bytes */
    /* With segments (GET /v1/memory without segments=0): the bytes of the
     * segments holding a live block, which no trim can give back. */
    double pinned;
    int have_segments;
    int n_caches;                /* device caches seen */
    int n_models;                /* entries of "models": what is still loaded */
} lg_memory_t;

/* Returns 0, or FS_EPARSE when the text is not that JSON. */
int lg_memory_parse(const char *json, lg_memory_t *out);

#ifdef __cplusplus
}
#endif
#endif
