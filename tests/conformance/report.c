/* report.c -- the conformance results table and its printout. */
#include <ctype.h>
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tests/conformance/report.h"

struct conf_report {
    const conf_case_t *cases;  /* borrowed, sorted by name */
    size_t n;
    conf_result_t *res;        /* one per case */
    char **output;             /* captured process output per case, or NULL */
    bool *output_always;       /* show it without --verbose (a crash's only evidence) */
};

/* A skip reason and how many cases gave it. */
typedef struct reason_count {
    char *key;
    size_t count;
    size_t last_case;  /* the case counted last, so a case counts once */
} reason_count_t;

#define PLAN_RATIO_BOUND 1.10
#define LIST_MAX 20

conf_report_t *conf_report_create(const conf_case_t *cases, size_t n)
{
    conf_report_t *r = calloc(1, sizeof *r);
    if (!r)
        return NULL;
    r->cases = cases;
    r->n = n;
    r->res = calloc(n ? n : 1, sizeof *r->res);
    r->output = calloc(n ? n : 1, sizeof *r->output);
    r->output_always = calloc(n ? n : 1, sizeof *r->output_always);
    if (!r->res || !r->output || !r->output_always) {
        conf_report_destroy(r);
        return NULL;
    }
    for (size_t i = 0; i < n; i++) {
        r->res[i].status = CONF_FAIL;
        snprintf(r->res[i].detail, sizeof r->res[i].detail, "not run");
    }
    return r;
}

void conf_report_destroy(conf_report_t *r)
{
    if (!r)
        return;
    for (size_t i = 0; r->output && i < r->n; i++)
        free(r->output[i]);
    free(r->output);
    free(r->output_always);
    free(r->res);
    free(r);
}

void conf_report_set(conf_report_t *r, size_t i, const conf_result_t *res)
{
    r->res[i] = *res;
}

void conf_report_fail(conf_report_t *r, size_t i, const char *fmt, ...)
{
    conf_result_t *res = &r->res[i];
    memset(res, 0, sizeof *res);
    res->status = CONF_FAIL;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(res->detail, sizeof res->detail, fmt, ap);
    va_end(ap);
}

void conf_report_attach(conf_report_t *r, size_t i, char *output, bool always)
{
    free(r->output[i]);
    r->output[i] = output;
    r->output_always[i] = always;
}

const char *conf_status_name(int status)
{
    switch (status) {
    case CONF_PASS: return "PASS";
    case CONF_SKIP: return "SKIP";
    default: return "FAIL";
    }
}

/* The index of the case named `name`, or -1 (cases are sorted). */
static long case_find(const conf_report_t *r, const char *name)
{
    size_t lo = 0, hi = r->n;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        int c = strcmp(r->cases[mid].name, name);
        if (c == 0)
            return (long)mid;
        if (c < 0)
            lo = mid + 1;
        else
            hi = mid;
    }
    return -1;
}

static void output_print(const char *out)
{
    if (!out || !out[0])
        return;
    printf("    --- engine output (tail) ---\n    ");
    for (const char *p = out; *p; p++) {
        putchar(*p);
        if (*p == '\n' && p[1])
            fputs("    ", stdout);
    }
    if (out[strlen(out) - 1] != '\n')
        putchar('\n');
}

/* Counts `key` (copied) for case `ci`, once per case. Out of memory drops
 * the count: the summary is informational. */
static void reason_add(reason_count_t **rc, size_t *n, size_t *cap, const char *key, size_t ci)
{
    for (size_t i = 0; i < *n; i++)
        if (strcmp((*rc)[i].key, key) == 0) {
            if ((*rc)[i].last_case != ci)
                (*rc)[i].count++;
            (*rc)[i].last_case = ci;
            return;
        }
    if (*n == *cap) {
        size_t ncap = *cap ? *cap * 2 : 64;
        reason_count_t *nr = realloc(*rc, ncap * sizeof *nr);
        if (!nr)
            return;
        *rc = nr;
        *cap = ncap;
    }
    char *k = strdup(key);
    if (!k)
        return;
    (*rc)[(*n)++] = (reason_count_t){k, 1, ci};
}

static int reason_cmp(const void *a, const void *b)
{
    const reason_count_t *x = a, *y = b;
    if (x->count != y->count)
        return x->count < y->count ? 1 : -1;
    return strcmp(x->key, y->key);
}

/* The grouping key of one skip reason: the message with what is particular
 * to one model taken out -- quoted names ('...'), node numbers ("#12") and
 * opsets inside parentheses ("(Foo, opset 13)") -- so the same missing op,
 * attribute or dtype counts together; version numbers outside parentheses
 * ("IR version 13") stay, as they are the reason. */
static void reason_key(const char *msg, size_t len, char *key, size_t key_len)
{
    size_t k = 0;
    int depth = 0;
    for (size_t i = 0; i < len && k + 1 < key_len; i++) {
        char c = msg[i];
        if (c == '\'') {
            const char *close = memchr(msg + i + 1, '\'', len - i - 1);
            if (close) {
                i = (size_t)(close - msg);
                continue;
            }
        }
        depth += (c == '(') - (c == ')');
        bool numbered = (k > 0 && key[k - 1] == '#') ||
                        (depth > 0 && k >= 6 && memcmp(key + k - 6, "opset ", 6) == 0);
        if (isdigit((unsigned char)c) && numbered) {
            while (i + 1 < len && isdigit((unsigned char)msg[i + 1]))
                i++;
            c = 'N';
        }
        if (isspace((unsigned char)c) && (k == 0 || key[k - 1] == ' '))
            continue;
        key[k++] = isspace((unsigned char)c) ? ' ' : c;
    }
    while (k > 0 && key[k - 1] == ' ')
        k--;
    key[k] = '\0';
}

/* Counts every distinct reason of every skipped case and prints them, most
 * frequent first. The loader's message lists every offending node and
 * value, separated by "; ", after a summary ("model uses 2 unsupported
 * nodes: ..."), and may end in "... and N more": each listed reason counts
 * once per case; the summary and the ellipsis are not reasons. */
static void skips_print(const conf_report_t *r, size_t n_skip)
{
    if (n_skip == 0)
        return;
    reason_count_t *rc = NULL;
    size_t n = 0, cap = 0;
    for (size_t i = 0; i < r->n; i++) {
        if (r->res[i].status != CONF_SKIP)
            continue;
        const char *p = r->res[i].detail;
        const char *colon = strstr(p, ": ");
        if (colon && strncmp(p, "model ", 6) == 0) {
            const char *u = strstr(p, " unsupported ");
            if (u && u < colon)
                p = colon + 2;
        }
        while (*p) {
            size_t len = strcspn(p, ";\n");
            char key[CONF_TEXT_MAX];
            reason_key(p, len, key, sizeof key);
            if (key[0] && strncmp(key, "...", 3) != 0)
                reason_add(&rc, &n, &cap, key, i);
            p += len;
            while (*p == ';' || *p == '\n')
                p++;
        }
    }
    if (n)
        qsort(rc, n, sizeof *rc, reason_cmp);
    printf("\nskip reasons (%zu cases skipped; a case may give several):\n", n_skip);
    for (size_t i = 0; i < n; i++) {
        printf("  %5zu  %s\n", rc[i].count, rc[i].key);
        free(rc[i].key);
    }
    free(rc);
}

/* Activation bytes against the lower bound, for every case that ran a
 * static plan. */
static void plans_print(const conf_report_t *r)
{
    size_t n = 0, n_over = 0;
    long worst = -1;
    for (size_t i = 0; i < r->n; i++) {
        double ratio = r->res[i].plan_ratio;
        if (ratio <= 0)
            continue;
        n++;
        if (ratio > PLAN_RATIO_BOUND)
            n_over++;
        if (worst < 0 || ratio > r->res[worst].plan_ratio)
            worst = (long)i;
    }
    if (n == 0)
        return;
    printf("\nplans: %zu models; plan bytes / lower bound: worst %.3f (%s), %zu above %.2f\n", n,
           r->res[worst].plan_ratio, r->cases[worst].name, n_over, PLAN_RATIO_BOUND);
    size_t shown = 0;
    for (size_t i = 0; i < r->n && shown < LIST_MAX; i++)
        if (r->res[i].plan_ratio > PLAN_RATIO_BOUND) {
            printf("  %.3f  %s (%llu bytes)\n", r->res[i].plan_ratio, r->cases[i].name,
                   r->res[i].plan_bytes);
            shown++;
        }
}

/* "max |error| E = R of max|expected| M in 'OUT' (tolerance T)" */
static void error_format(const conf_error_t *e, char *buf, size_t len)
{
    snprintf(buf, len, "max |error| %.3g = %.3g of max|expected| %.4g in '%s' (tolerance %g)",
             e->max_abs, e->rel, e->max_expected, e->output, e->tol_rel);
}

/* The model cases' worst errors: how many passed, and the one closest to
 * its tolerance, so a drift shows before it fails. */
static void errors_print(const conf_report_t *r)
{
    size_t n = 0;
    long worst = -1;
    for (size_t i = 0; i < r->n; i++) {
        const conf_result_t *res = &r->res[i];
        if (r->cases[i].rule != CONF_RULE_MODEL || res->status != CONF_PASS ||
            !res->error.n_outputs)
            continue;
        n++;
        double f = res->error.tol_rel > 0 ? res->error.rel / res->error.tol_rel : 0;
        const conf_error_t *w = worst >= 0 ? &r->res[worst].error : NULL;
        if (!w || f > (w->tol_rel > 0 ? w->rel / w->tol_rel : 0))
            worst = (long)i;
    }
    if (n == 0)
        return;
    char err[256];
    error_format(&r->res[worst].error, err, sizeof err);
    printf("\nmodel cases: %zu passed with float outputs; closest to its tolerance: %s, %s\n", n,
           r->cases[worst].name, err);
}

/* Writes s as one CSV field: quoted, quotes doubled, line breaks as spaces. */
static void csv_field(FILE *f, const char *s)
{
    fputc('"', f);
    for (; *s; s++) {
        if (*s == '"')
            fputs("\"\"", f);
        else
            fputc(*s == '\n' || *s == '\r' ? ' ' : *s, f);
    }
    fputc('"', f);
}

int conf_report_write_csv(const conf_report_t *r, const char *path)
{
    FILE *f = fopen(path, "w");
    if (!f) {
        fprintf(stderr, "conformance: cannot write %s: %s\n", path, strerror(errno));
        return 2;
    }
    fprintf(f, "case,status,rule,output,max_abs_error,max_abs_expected,relative_error,"
               "tolerance,detail\n");
    for (size_t i = 0; i < r->n; i++) {
        const conf_result_t *res = &r->res[i];
        const conf_error_t *e = &res->error;
        csv_field(f, r->cases[i].name);
        fprintf(f, ",%s,%s,", conf_status_name(res->status),
                r->cases[i].rule == CONF_RULE_MODEL ? "model" : "node");
        if (e->n_outputs) {
            csv_field(f, e->output);
            fprintf(f, ",%.6g,%.6g,%.6g,%g,", e->max_abs, e->max_expected, e->rel, e->tol_rel);
        } else {
            fputs(",,,,,", f);
        }
        csv_field(f, res->status == CONF_PASS ? "" : res->detail);
        fputc('\n', f);
    }
    bool ok = fflush(f) == 0 && !ferror(f);
    ok = (fclose(f) == 0) && ok;
    if (!ok) {
        fprintf(stderr, "conformance: cannot write %s: %s\n", path, strerror(errno));
        return 2;
    }
    return 0;
}

/* Strips a '#' comment and surrounding blanks from line, in place;
 * returns the case name ("" for none). */
static char *line_name(char *line)
{
    char *hash = strchr(line, '#');
    if (hash)
        *hash = '\0';
    while (isspace((unsigned char)*line))
        line++;
    size_t len = strlen(line);
    while (len && isspace((unsigned char)line[len - 1]))
        line[--len] = '\0';
    return line;
}

/* Checks every case listed in path passed. Returns 0 when they all did, 1
 * when some did not (listed), 2 when the file cannot be read. */
static int expect_check(const conf_report_t *r, const char *path, const char *filter)
{
    FILE *f = fopen(path, "r");
    if (!f) {
        fprintf(stderr, "conformance: cannot read %s: %s\n", path, strerror(errno));
        return 2;
    }
    char line[4096];
    size_t n_listed = 0, n_bad = 0;
    while (fgets(line, sizeof line, f)) {
        char *name = line_name(line);
        if (!name[0] || (filter && !strstr(name, filter)))
            continue;
        n_listed++;
        long i = case_find(r, name);
        if (i >= 0 && r->res[i].status == CONF_PASS)
            continue;
        if (n_bad++ == 0)
            printf("\nexpected to pass but did not (%s):\n", path);
        if (i < 0)
            printf("  %s: not found\n", name);
        else
            printf("  %s: %s: %s\n", name, conf_status_name(r->res[i].status), r->res[i].detail);
    }
    fclose(f);
    printf("\nexpected passes: %zu of %zu listed passed\n", n_listed - n_bad, n_listed);
    return n_bad ? 1 : 0;
}

/* Writes the sorted passing cases to path (through a temporary file, so a
 * failed write leaves the old list). 0, or 2 with a message. */
static int expect_update(const conf_report_t *r, const char *path)
{
    size_t len = strlen(path);
    char *tmp = malloc(len + sizeof ".tmp");
    if (!tmp) {
        fprintf(stderr, "conformance: out of memory\n");
        return 2;
    }
    memcpy(tmp, path, len);
    memcpy(tmp + len, ".tmp", sizeof ".tmp");
    FILE *f = fopen(tmp, "w");
    if (!f) {
        fprintf(stderr, "conformance: cannot write %s: %s\n", tmp, strerror(errno));
        free(tmp);
        return 2;
    }
    size_t n = 0;
    fprintf(f, "# Conformance cases that must pass: CI fails when one of them does not.\n"
               "# Written by `conformance --update-expect FILE DIR` over the whole ONNX test\n"
               "# data; review the diff before committing (tests/conformance/README.md).\n");
    for (size_t i = 0; i < r->n; i++)
        if (r->res[i].status == CONF_PASS) {
            fprintf(f, "%s\n", r->cases[i].name);
            n++;
        }
    bool ok = fflush(f) == 0 && !ferror(f);
    ok = (fclose(f) == 0) && ok;
    if (!ok || rename(tmp, path) < 0) {
        fprintf(stderr, "conformance: cannot write %s: %s\n", path, strerror(errno));
        remove(tmp);
        free(tmp);
        return 2;
    }
    free(tmp);
    printf("wrote %zu passing cases to %s\n", n, path);
    return 0;
}

int conf_report_print(conf_report_t *r, bool verbose, const char *filter, const char *expect_path,
                      const char *update_path, int jobs, double seconds)
{
    size_t counts[3] = {0, 0, 0};
    for (size_t i = 0; i < r->n; i++) {
        const conf_result_t *res = &r->res[i];
        int s = res->status == CONF_PASS || res->status == CONF_SKIP ? res->status : CONF_FAIL;
        counts[s]++;
        if (s == CONF_FAIL) {
            printf("FAIL %s: %s\n", r->cases[i].name, res->detail);
            if (verbose || r->output_always[i])
                output_print(r->output[i]);
        } else if (verbose && s == CONF_SKIP) {
            printf("SKIP %s: %s\n", r->cases[i].name, res->detail);
        } else if (verbose) {
            char err[256] = "", plan[96] = "";
            if (r->cases[i].rule == CONF_RULE_MODEL && res->error.n_outputs)
                error_format(&res->error, err, sizeof err);
            if (res->plan_ratio > 0)
                snprintf(plan, sizeof plan, "plan %llu bytes, %.3fx the lower bound",
                         res->plan_bytes, res->plan_ratio);
            if (err[0] || plan[0])
                printf("PASS %s (%s%s%s)\n", r->cases[i].name, err, err[0] && plan[0] ? "; " : "",
                       plan);
            else
                printf("PASS %s\n", r->cases[i].name);
        }
    }
    skips_print(r, counts[CONF_SKIP]);
    plans_print(r);
    errors_print(r);
    int status = 0;
    if (expect_path)
        status = expect_check(r, expect_path, filter);
    else if (counts[CONF_FAIL])
        status = 1;
    if (update_path) {
        int us = expect_update(r, update_path);
        if (us)
            status = us;
    }
    printf("\n%zu cases in %.1f s with %d jobs\n", r->n, seconds, jobs);
    printf("%zu passed, %zu failed, %zu skipped\n", counts[CONF_PASS], counts[CONF_FAIL],
           counts[CONF_SKIP]);
    return status;
}
