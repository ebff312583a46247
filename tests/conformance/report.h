/* report.h -- the conformance runner's results table and what it prints:
 * per-case lines, skip reasons grouped, plan ratios, the expected-pass
 * check and its update, and the final `N passed, N failed, N skipped`.
 *
 * Threading: one thread. */
#ifndef FS_TESTS_CONFORMANCE_REPORT_H
#define FS_TESTS_CONFORMANCE_REPORT_H

#include <stdbool.h>
#include <stddef.h>

#include "tests/conformance/conformance.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct conf_report conf_report_t;

/* A table for n cases (borrowed; sorted by name; must outlive the report),
 * every result FAIL "not run" until set. NULL when out of memory. Caller
 * frees with conf_report_destroy. */
conf_report_t *conf_report_create(const conf_case_t *cases, size_t n);
/* NULL is a no-op. */
void conf_report_destroy(conf_report_t *r);

/* Records case i's result (copied). */
void conf_report_set(conf_report_t *r, size_t i, const conf_result_t *res);
/* Records case i as FAIL with a formatted message. */
void conf_report_fail(conf_report_t *r, size_t i, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
/* Attaches what case i's process wrote to stdout/stderr (taken; may be
 * NULL), shown with its FAIL line under --verbose, or `always` (for a
 * process that crashed or exited abnormally). */
void conf_report_attach(conf_report_t *r, size_t i, char *output, bool always);

/* "PASS", "FAIL", "SKIP". Never NULL. */
const char *conf_status_name(int status);

/* Prints the report to stdout. `filter` (may be NULL) limits the expect
 * check to listed cases containing it; `expect_path` (may be NULL): every
 * case listed there must have passed; `update_path` (may be NULL): the
 * passing cases are written there. Returns the exit status: 0; 1 when an
 * expected case did not pass, or, without an expect list, when any case
 * failed; 2 when a file could not be read or written (said on stderr). */
int conf_report_print(conf_report_t *r, bool verbose, const char *filter, const char *expect_path,
                      const char *update_path, int jobs, double seconds);

/* Writes one CSV row per case to path: case, status, rule (node or model),
 * the worst output, its max |error|, its max |expected|, their ratio, the
 * relative tolerance it was held to (empty when no float output was
 * compared), and the FAIL or SKIP detail. 0, or 2 with a message on
 * stderr. */
int conf_report_write_csv(const conf_report_t *r, const char *path);

#ifdef __cplusplus
}
#endif
#endif
