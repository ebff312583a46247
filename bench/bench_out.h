/* bench_out.h -- what every benchmark prints: a header naming the machine and
 * the command, sections, notes, and tables, as plain text or as Markdown ready
 * for bench/RESULTS.md.
 *
 * Header-only (static inline), because the build links each bench/NAME_bench.c
 * on its own with libflatserve.a. Output goes to stdout; nothing here can
 * fail except by a full table, which is a bug in the benchmark (assert).
 *
 * Threading: one thread (the benchmark's main thread) prints. */
#ifndef FS_BENCH_OUT_H
#define FS_BENCH_OUT_H

#include <assert.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <string.h>
#include <sys/utsname.h>
#include <time.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Markdown instead of plain text; set once, before anything is printed. */
static bool bench_out_markdown;

static inline void bench_section(const char *title)
{
    if (bench_out_markdown)
        printf("\n#### %s\n\n", title);
    else
        printf("\n== %s\n", title);
}

/* A line of prose (a paragraph in Markdown). */
static inline void bench_note(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static inline void bench_note(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vprintf(fmt, ap);
    va_end(ap);
    fputs(bench_out_markdown ? "\n\n" : "\n", stdout);
}

#define BENCH_TABLE_COLS_MAX 12
#define BENCH_TABLE_ROWS_MAX 64
#define BENCH_TABLE_CELL_MAX 32

/* Cells are filled row by row; the first column is a label (left-aligned),
 * the others are figures (right-aligned). */
typedef struct bench_table {
    size_t n_cols;
    size_t n_cells;
    const char *heads[BENCH_TABLE_COLS_MAX]; /* borrowed; must outlive the table */
    char cells[BENCH_TABLE_ROWS_MAX * BENCH_TABLE_COLS_MAX][BENCH_TABLE_CELL_MAX];
} bench_table_t;

static inline void bench_table_init(bench_table_t *t, size_t n_cols, const char *const *heads)
{
    assert(n_cols >= 1 && n_cols <= BENCH_TABLE_COLS_MAX);
    t->n_cols = n_cols;
    t->n_cells = 0;
    for (size_t i = 0; i < n_cols; i++)
        t->heads[i] = heads[i];
}

/* The next cell, formatted; truncated to BENCH_TABLE_CELL_MAX - 1 bytes. */
static inline void bench_table_add(bench_table_t *t, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));
static inline void bench_table_add(bench_table_t *t, const char *fmt, ...)
{
    assert(t->n_cells < BENCH_TABLE_ROWS_MAX * t->n_cols);
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(t->cells[t->n_cells++], BENCH_TABLE_CELL_MAX, fmt, ap);
    va_end(ap);
}

static inline void bench_table_print(const bench_table_t *t)
{
    size_t width[BENCH_TABLE_COLS_MAX];
    for (size_t c = 0; c < t->n_cols; c++)
        width[c] = strlen(t->heads[c]);
    for (size_t i = 0; i < t->n_cells; i++) {
        size_t len = strlen(t->cells[i]);
        if (len > width[i % t->n_cols])
            width[i % t->n_cols] = len;
    }
    const char *sep = bench_out_markdown ? " | " : "  ";
    const char *lead = bench_out_markdown ? "| " : "";
    const char *tail = bench_out_markdown ? " |" : "";
    printf("%s", lead);
    for (size_t c = 0; c < t->n_cols; c++)
        printf("%s%-*s", c ? sep : "", (int)width[c], t->heads[c]);
    printf("%s\n", tail);
    if (bench_out_markdown) {
        fputs("|", stdout);
        for (size_t c = 0; c < t->n_cols; c++)
            fputs(c ? "---:|" : "---|", stdout);
        fputs("\n", stdout);
    }
    for (size_t i = 0; i < t->n_cells; i++) {
        size_t c = i % t->n_cols;
        if (c == 0)
            printf("%s%-*s", lead, (int)width[c], t->cells[i]);
        else
            printf("%s%*s", sep, (int)width[c], t->cells[i]);
        if (c == t->n_cols - 1 || i == t->n_cells - 1)
            printf("%s\n", tail);
    }
    if (bench_out_markdown)
        printf("\n"); /* a table ends at a blank line; prose after it is not a row */
}

/* The CPU model from /proc/cpuinfo, or "unknown CPU". */
static inline void bench_cpu_model(char *buf, size_t len)
{
    snprintf(buf, len, "unknown CPU");
    FILE *f = fopen("/proc/cpuinfo", "r");
    if (!f)
        return;
    char line[256];
    while (fgets(line, sizeof line, f)) {
        char *colon = strchr(line, ':');
        if (strncmp(line, "model name", 10) == 0 && colon) {
            colon += 1 + (colon[1] == ' ');
            colon[strcspn(colon, "\n")] = '\0';
            snprintf(buf, len, "%s", colon);
            break;
        }
    }
    fclose(f);
}

/* The run's header: `bench` and what it measures (`subject`, e.g. "provider
 * cuda:0"), the host name, the CPU model, the date in UTC and the command
 * line. Benchmarks cannot include CUDA headers, so with `on_gpu` the Markdown
 * header leaves a GPU line for the model from nvidia-smi, added by hand. */
static inline void bench_header_print(const char *bench, const char *subject, bool on_gpu,
                                      int argc, char **argv)
{
    struct utsname un;
    const char *host = uname(&un) == 0 ? un.nodename : "unknown host";
    char cpu[128], date[32], cmd[512] = "";
    bench_cpu_model(cpu, sizeof cpu);
    time_t now = time(NULL);
    struct tm tm;
    strftime(date, sizeof date, "%Y-%m-%d %H:%M UTC", gmtime_r(&now, &tm));
    for (int i = 0; i < argc; i++) {
        size_t used = strlen(cmd);
        snprintf(cmd + used, sizeof cmd - used, "%s%s", i ? " " : "", argv[i]);
    }
    if (bench_out_markdown) {
        printf("### %s: %s on %s, %s\n\n", bench, subject, host, date);
        printf("- Command: `%s`\n- CPU: %s\n", cmd, cpu);
        if (on_gpu)
            printf("- GPU: (model from nvidia-smi)\n");
    } else {
        printf("%s: %s on %s (%s), %s\n", bench, subject, host, cpu, date);
        printf("command: %s\n", cmd);
    }
}

#ifdef __cplusplus
}
#endif
#endif
