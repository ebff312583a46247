/* runner.c -- the ONNX conformance runner: finds cases under the given
 * directories, runs each in a forked child (a crash or a hang costs one
 * case, not the run) from a pool of -j workers, and reports PASS / FAIL /
 * SKIP per case, skip reasons grouped, plan ratios, the expected-pass
 * check, and last the line `N passed, N failed, N skipped`.
 *
 * Usage: conformance [options] DIR...   (see usage() and README.md) */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "alloc/provider.h"
#include "common/error.h"
#include "engine/engine.h"
#include "tests/conformance/conformance.h"
#include "tests/conformance/report.h"

/* The case list, growing while directories are walked. */
typedef struct case_list {
    conf_case_t *items;
    size_t n, cap;
} case_list_t;

typedef struct options {
    const char *expect_path;
    const char *update_path;
    const char *report_path;
    const char *filter;
    bool verbose;
    conf_tolerance_t tol;
    int jobs;
    int timeout_s;
    const char *device;
    eng_precision_t precision;  /* --precision; fp32 unless asked */
} options_t;

/* One worker slot of the pool. */
typedef struct worker {
    pid_t pid;               /* 0: idle */
    int fd;                  /* read end of the child's result pipe */
    int err_fd;              /* unlinked temp file the child's stdout/stderr go to */
    size_t case_i;
    double deadline_s;
    conf_result_t res;
    size_t got;              /* bytes of res received */
} worker_t;

#define WALK_MAX_DEPTH 32
#define STDERR_TAIL_BYTES 1500

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static char *xstrdup(const char *s)
{
    char *d = strdup(s);
    if (!d) {
        fprintf(stderr, "conformance: out of memory\n");
        exit(2);
    }
    return d;
}

static char *path_join(const char *a, const char *b)
{
    size_t la = strlen(a), lb = strlen(b);
    char *p = malloc(la + lb + 2);
    if (!p) {
        fprintf(stderr, "conformance: out of memory\n");
        exit(2);
    }
    memcpy(p, a, la);
    size_t n = la;
    if (la && b[0] && a[la - 1] != '/')
        p[n++] = '/';
    memcpy(p + n, b, lb + 1);
    return p;
}

static bool is_file(const char *path)
{
    struct stat st;
    return stat(path, &st) == 0 && S_ISREG(st.st_mode);
}

static bool is_dir(const char *path)
{
    struct stat st;
    return stat(path, &st) == 0 && S_ISDIR(st.st_mode);
}

/* Appends a case; the list takes its strings. Exits on out of memory (the
 * runner cannot do anything useful without its list). */
static void cases_push(case_list_t *l, conf_case_t c)
{
    if (l->n == l->cap) {
        size_t ncap = l->cap ? l->cap * 2 : 256;
        conf_case_t *ni = realloc(l->items, ncap * sizeof *ni);
        if (!ni) {
            fprintf(stderr, "conformance: out of memory\n");
            exit(2);
        }
        l->items = ni;
        l->cap = ncap;
    }
    l->items[l->n++] = c;
}

/* Appends a case found on disk, with the rule its path gives it; the list
 * takes the strings. */
static void cases_add(case_list_t *l, char *name, char *model, char *data_dir, char *light_out)
{
    cases_push(l, (conf_case_t){name, model, data_dir, light_out, conf_case_rule(model)});
}

static int str_ptr_cmp(const void *a, const void *b)
{
    return strcmp(*(char *const *)a, *(char *const *)b);
}

/* Walks dir (rel is its path below the root, "" for the root itself, and
 * root_name names a case that is the root): a directory holding model.onnx
 * is one node-test case and is not searched further; elsewhere NAME.onnx
 * with NAME_output_0.pb beside it is a light case; subdirectories are
 * searched. Unreadable directories are reported and skipped. */
static void walk(case_list_t *l, const char *dir, const char *rel, const char *root_name,
                 int depth)
{
    char *model = path_join(dir, "model.onnx");
    if (is_file(model)) {
        cases_add(l, xstrdup(rel[0] ? rel : root_name), model, xstrdup(dir), NULL);
        return;
    }
    free(model);
    if (depth > WALK_MAX_DEPTH)
        return;
    DIR *d = opendir(dir);
    if (!d) {
        fprintf(stderr, "conformance: cannot read directory %s: %s\n", dir, strerror(errno));
        return;
    }
    char **names = NULL;
    size_t n = 0, cap = 0;
    struct dirent *e;
    while ((e = readdir(d)) != NULL) {
        if (e->d_name[0] == '.')
            continue;
        if (n == cap) {
            cap = cap ? cap * 2 : 64;
            char **nn = realloc(names, cap * sizeof *nn);
            if (!nn) {
                fprintf(stderr, "conformance: out of memory\n");
                exit(2);
            }
            names = nn;
        }
        names[n++] = xstrdup(e->d_name);
    }
    closedir(d);
    if (n)
        qsort(names, n, sizeof *names, str_ptr_cmp);
    for (size_t i = 0; i < n; i++) {
        char *path = path_join(dir, names[i]);
        char *sub = path_join(rel, names[i]);
        size_t len = strlen(names[i]);
        if (is_dir(path)) {
            walk(l, path, sub, root_name, depth + 1);
        } else if (len > 5 && strcmp(names[i] + len - 5, ".onnx") == 0) {
            sub[strlen(sub) - 5] = '\0';
            char *out = malloc(strlen(path) + sizeof "_output_0.pb");
            if (!out) {
                fprintf(stderr, "conformance: out of memory\n");
                exit(2);
            }
            memcpy(out, path, strlen(path) - 5);
            strcpy(out + strlen(path) - 5, "_output_0.pb");
            if (is_file(out)) {
                cases_add(l, sub, path, NULL, out);
                free(names[i]);
                continue;
            }
            free(out);
        }
        free(path);
        free(sub);
        free(names[i]);
    }
    free(names);
}

static int case_cmp(const void *a, const void *b)
{
    return strcmp(((const conf_case_t *)a)->name, ((const conf_case_t *)b)->name);
}

static void cases_free(case_list_t *l)
{
    for (size_t i = 0; i < l->n; i++) {
        free(l->items[i].name);
        free(l->items[i].model_path);
        free(l->items[i].data_dir);
        free(l->items[i].light_output);
    }
    free(l->items);
}

/* Writes all of buf to fd; false on error. */
static bool write_all(int fd, const void *buf, size_t len)
{
    const char *p = buf;
    while (len) {
        ssize_t w = write(fd, p, len);
        if (w < 0 && errno == EINTR)
            continue;
        if (w <= 0)
            return false;
        p += w;
        len -= (size_t)w;
    }
    return true;
}

/* In the child: run the case, send the result, exit (through exit(), so
 * sanitizers' leak checks run and report in the exit status). */
static void child_main(const conf_case_t *c, const options_t *o, int fd, int err_fd)
{
    dup2(err_fd, STDOUT_FILENO);
    dup2(err_fd, STDERR_FILENO);
    conf_result_t r;
    conf_case_run(c, o->device, o->precision, &o->tol, &r);
    exit(write_all(fd, &r, sizeof r) ? 0 : 3);
}

/* The last STDERR_TAIL_BYTES of the worker's captured output, or NULL when
 * there is none. Caller frees. */
static char *stderr_tail(int fd)
{
    struct stat st;
    if (fstat(fd, &st) < 0 || st.st_size <= 0)
        return NULL;
    off_t from = st.st_size > STDERR_TAIL_BYTES ? st.st_size - STDERR_TAIL_BYTES : 0;
    size_t len = (size_t)(st.st_size - from);
    char *buf = malloc(len + 1);
    if (!buf)
        return NULL;
    ssize_t got = pread(fd, buf, len, from);
    if (got <= 0) {
        free(buf);
        return NULL;
    }
    buf[got] = '\0';
    return buf;
}

/* Starts case i in worker w. False (with the case recorded as FAIL) when
 * the process could not be started. */
static bool worker_start(worker_t *w, const case_list_t *l, size_t i, const options_t *o,
                         conf_report_t *rep)
{
    int p[2];
    if (pipe(p) < 0) {
        conf_report_fail(rep, i, "runner: pipe: %s", strerror(errno));
        return false;
    }
    if (ftruncate(w->err_fd, 0) < 0 || lseek(w->err_fd, 0, SEEK_SET) < 0) {
        close(p[0]);
        close(p[1]);
        conf_report_fail(rep, i, "runner: temp file: %s", strerror(errno));
        return false;
    }
    fflush(stdout);
    fflush(stderr);
    pid_t pid = fork();
    if (pid < 0) {
        close(p[0]);
        close(p[1]);
        conf_report_fail(rep, i, "runner: fork: %s", strerror(errno));
        return false;
    }
    if (pid == 0) {
        close(p[0]);
        child_main(&l->items[i], o, p[1], w->err_fd);
    }
    close(p[1]);
    w->pid = pid;
    w->fd = p[0];
    w->case_i = i;
    w->deadline_s = now_s() + o->timeout_s;
    w->got = 0;
    return true;
}

/* Reaps the worker's child and records the case's result. */
static void worker_finish(worker_t *w, bool timed_out, const options_t *o, conf_report_t *rep)
{
    if (timed_out)
        kill(w->pid, SIGKILL);
    int st = 0;
    while (waitpid(w->pid, &st, 0) < 0 && errno == EINTR)
        ;
    close(w->fd);
    size_t i = w->case_i;
    bool complete = w->got == sizeof w->res;
    if (timed_out) {
        conf_report_fail(rep, i, "timed out after %d s (killed)", o->timeout_s);
    } else if (WIFSIGNALED(st)) {
        conf_report_fail(rep, i, "crashed: signal %d (%s)", WTERMSIG(st), strsignal(WTERMSIG(st)));
    } else if (!complete) {
        conf_report_fail(rep, i, "the case process exited with status %d without a result",
                         WIFEXITED(st) ? WEXITSTATUS(st) : -1);
    } else if (WEXITSTATUS(st) != 0) {
        conf_report_fail(rep, i, "the case process exited with status %d (%s: %s)",
                         WEXITSTATUS(st), conf_status_name(w->res.status), w->res.detail);
    } else {
        conf_report_set(rep, i, &w->res);
    }
    bool abnormal = timed_out || !complete || !WIFEXITED(st) || WEXITSTATUS(st) != 0;
    if (abnormal || w->res.status == CONF_FAIL)
        conf_report_attach(rep, i, stderr_tail(w->err_fd), abnormal && !timed_out);
    w->pid = 0;
}

/* The pool's arrays, held where a forked child's leak check finds them: in
 * the child they are still allocated, and a pointer only the parent's
 * registers held would read as a leak at its exit. */
static struct {
    worker_t *ws;
    struct pollfd *pfds;
    int *map;
} pool;

/* Runs every case through the worker pool. Returns false when the pool
 * could not be set up (the reason is printed). */
static bool run_all(const case_list_t *l, const options_t *o, conf_report_t *rep)
{
    int jobs = o->jobs;
    worker_t *ws = pool.ws = calloc((size_t)jobs, sizeof *ws);
    struct pollfd *pfds = pool.pfds = calloc((size_t)jobs, sizeof *pfds);
    int *map = pool.map = calloc((size_t)jobs, sizeof *map);
    bool ok = ws && pfds && map;
    for (int k = 0; ok && k < jobs; k++) {
        char tmpl[] = "/tmp/flatserve-conformance-XXXXXX";
        ws[k].err_fd = mkstemp(tmpl);
        if (ws[k].err_fd < 0) {
            fprintf(stderr, "conformance: cannot create a temp file: %s\n", strerror(errno));
            for (int j = 0; j < k; j++)
                close(ws[j].err_fd);
            ok = false;
            break;
        }
        unlink(tmpl);
    }
    if (!ok) {
        if (!ws || !pfds || !map)
            fprintf(stderr, "conformance: out of memory\n");
        free(ws);
        free(pfds);
        free(map);
        return false;
    }
    size_t next = 0, active = 0;
    while (next < l->n || active > 0) {
        for (int k = 0; k < jobs && next < l->n; k++)
            if (ws[k].pid == 0 && worker_start(&ws[k], l, next++, o, rep))
                active++;
        if (active == 0)
            continue;
        int np = 0;
        double t = now_s(), soonest = t + 3600;
        for (int k = 0; k < jobs; k++) {
            if (ws[k].pid == 0)
                continue;
            if (ws[k].deadline_s < soonest)
                soonest = ws[k].deadline_s;
            pfds[np] = (struct pollfd){.fd = ws[k].fd, .events = POLLIN};
            map[np++] = k;
        }
        int wait_ms = soonest > t ? (int)((soonest - t) * 1000) + 1 : 0;
        if (poll(pfds, (nfds_t)np, wait_ms) < 0 && errno != EINTR) {
            fprintf(stderr, "conformance: poll: %s\n", strerror(errno));
            break;
        }
        t = now_s();
        for (int q = 0; q < np; q++) {
            worker_t *w = &ws[map[q]];
            if (pfds[q].revents) {
                /* The child writes one result and exits; EOF comes when it
                 * has exited, so the wait in worker_finish is short. */
                char buf[sizeof w->res];
                ssize_t r = read(w->fd, buf, sizeof buf);
                if (r < 0 && errno == EINTR)
                    continue;
                if (r > 0) {
                    size_t take = (size_t)r < sizeof w->res - w->got ? (size_t)r
                                                                      : sizeof w->res - w->got;
                    memcpy((char *)&w->res + w->got, buf, take);
                    w->got += take;
                    continue;
                }
                worker_finish(w, false, o, rep);
                active--;
            } else if (t >= w->deadline_s) {
                worker_finish(w, true, o, rep);
                active--;
            }
        }
    }
    for (int k = 0; k < jobs; k++)
        close(ws[k].err_fd);
    free(ws);
    free(pfds);
    free(map);
    return true;
}

static void usage(FILE *f)
{
    fprintf(f,
            "usage: conformance [options] DIR...\n"
            "Runs every ONNX test case under each DIR (node-test layout CASE/model.onnx +\n"
            "CASE/test_data_set_K/, or light models NAME.onnx + NAME_output_0.pb).\n"
            "  --expect FILE         every case listed in FILE must pass, else exit 1\n"
            "  --update-expect FILE  write the sorted list of passing cases to FILE\n"
            "  --filter SUBSTR       run only cases whose name contains SUBSTR\n"
            "  --verbose, -v         one line per case (and captured engine output on FAIL)\n"
            "  --rtol X, --atol Y    node tests (a directory named node on the path):\n"
            "                        |actual-expected| <= atol + rtol*|expected| per element\n"
            "                        (default %g and %g)\n"
            "  --atol-rel X          model cases (every other case): |actual-expected| <=\n"
            "                        atol + X*max|expected| per output, float32/float64\n"
            "                        (default %g; a case's tolerance.txt overrides it)\n"
            "  --atol-rel-half X     the same for float16/bfloat16 outputs (default %g)\n"
            "  --report FILE         write every case's result and worst error as CSV\n"
            "  --jobs N, -j N        cases run at once (default: the number of CPUs)\n"
            "  --timeout S           seconds per case before it is killed (default 60)\n"
            "  --device D            cpu (default), cuda or cuda:N\n"
            "  --precision P         fp32 (default), tf32, fp16 or bf16: the models'\n"
            "                        GEMM precision (a GPU's); with fp16/bf16 a model\n"
            "                        case's float32 outputs are held to --atol-rel-half\n"
            "                        unless --atol-rel is given (node tests keep their\n"
            "                        rule: run this on model directories)\n",
            CONF_DEFAULT_RTOL, CONF_DEFAULT_ATOL, CONF_DEFAULT_ATOL_REL,
            CONF_DEFAULT_ATOL_REL_HALF);
}

/* Parses a number option; exits with usage on a bad value. */
static double number_arg(const char *opt, const char *s, double min)
{
    char *end;
    errno = 0;
    double v = strtod(s, &end);
    if (errno || end == s || *end || !(v >= min)) {
        fprintf(stderr, "conformance: %s: bad value '%s'\n", opt, s);
        exit(2);
    }
    return v;
}

static void options_parse(int argc, char **argv, options_t *o)
{
    static const struct option longs[] = {
        {"expect", required_argument, NULL, 'e'}, {"update-expect", required_argument, NULL, 'u'},
        {"filter", required_argument, NULL, 'f'}, {"verbose", no_argument, NULL, 'v'},
        {"rtol", required_argument, NULL, 'r'},   {"atol", required_argument, NULL, 'a'},
        {"jobs", required_argument, NULL, 'j'},   {"timeout", required_argument, NULL, 't'},
        {"device", required_argument, NULL, 'd'}, {"help", no_argument, NULL, 'h'},
        {"atol-rel", required_argument, NULL, 'R'},
        {"atol-rel-half", required_argument, NULL, 'H'},
        {"report", required_argument, NULL, 'p'},
        {"precision", required_argument, NULL, 'P'},
        {NULL, 0, NULL, 0},
    };
    long ncpu = sysconf(_SC_NPROCESSORS_ONLN);
    *o = (options_t){.tol = {.rtol = CONF_DEFAULT_RTOL,
                             .atol = CONF_DEFAULT_ATOL,
                             .atol_rel = CONF_DEFAULT_ATOL_REL,
                             .atol_rel_half = CONF_DEFAULT_ATOL_REL_HALF},
                     .jobs = ncpu > 0 ? (int)ncpu : 1,
                     .timeout_s = 60};
    int ch;
    bool atol_rel_given = false;
    while ((ch = getopt_long(argc, argv, "vj:h", longs, NULL)) != -1) {
        switch (ch) {
        case 'e': o->expect_path = optarg; break;
        case 'u': o->update_path = optarg; break;
        case 'f': o->filter = optarg; break;
        case 'v': o->verbose = true; break;
        case 'r': o->tol.rtol = number_arg("--rtol", optarg, 0); break;
        case 'a': o->tol.atol = number_arg("--atol", optarg, 0); break;
        case 'R':
            o->tol.atol_rel = number_arg("--atol-rel", optarg, 0);
            atol_rel_given = true;
            break;
        case 'H': o->tol.atol_rel_half = number_arg("--atol-rel-half", optarg, 0); break;
        case 'p': o->report_path = optarg; break;
        case 'j': o->jobs = (int)number_arg("--jobs", optarg, 1); break;
        case 't': o->timeout_s = (int)number_arg("--timeout", optarg, 1); break;
        case 'd': o->device = optarg; break;
        case 'P':
            if (eng_precision_parse(optarg, &o->precision) != 0) {
                fprintf(stderr, "conformance: --precision: %s\n", fs_errmsg());
                exit(2);
            }
            break;
        case 'h': usage(stdout); exit(0);
        default: usage(stderr); exit(2);
        }
    }
    if (optind >= argc) {
        usage(stderr);
        exit(2);
    }
    /* Under fp16/bf16 GEMM weights a float32 output carries half-precision
     * error: it is judged as a half output is. */
    if ((o->precision == ENG_PREC_FP16 || o->precision == ENG_PREC_BF16) && !atol_rel_given)
        o->tol.atol_rel = o->tol.atol_rel_half;
}

/* Whether --device can run at all, asked in a child: CUDA must not be
 * initialised in this process, since every case runs in a forked child.
 * Prints why not. */
static bool device_usable(const char *device)
{
    eng_device_t dev;
    if (eng_device_parse(device, &dev) != 0) {
        fprintf(stderr, "conformance: --device: %s\n", fs_errmsg());
        return false;
    }
    if (dev.kind == ENG_DEVICE_CPU)
        return true;
    int want = dev.index;
    fflush(NULL);
    pid_t pid = fork();
    if (pid < 0) {
        fprintf(stderr, "conformance: fork: %s\n", strerror(errno));
        return false;
    }
    if (pid == 0) {
        int n = 0;
        int rc = alloc_cuda_probe(&n);
        if (rc == 0 && want >= n)
            rc = fs_err(FS_ENODEV, "device %d does not exist (%d CUDA device%s)", want, n,
                        n == 1 ? "" : "s");
        if (rc != 0)
            fprintf(stderr, "conformance: --device %s: %s\n", device, fs_errmsg());
        _exit(rc == 0 ? 0 : 1);
    }
    int status = 0;
    while (waitpid(pid, &status, 0) < 0 && errno == EINTR)
        ;
    return WIFEXITED(status) && WEXITSTATUS(status) == 0;
}

int main(int argc, char **argv)
{
    options_t o;
    options_parse(argc, argv, &o);
    if (!device_usable(o.device))
        return 2;
    case_list_t all = {0};
    for (int a = optind; a < argc; a++) {
        if (!is_dir(argv[a])) {
            fprintf(stderr, "conformance: %s is not a directory\n", argv[a]);
            cases_free(&all);
            return 2;
        }
        char *copy = xstrdup(argv[a]);
        size_t len = strlen(copy);
        while (len > 1 && copy[len - 1] == '/')
            copy[--len] = '\0';
        const char *base = strrchr(copy, '/');
        walk(&all, copy, "", base ? base + 1 : copy, 0);
        free(copy);
    }
    case_list_t run = {0};
    for (size_t i = 0; i < all.n; i++) {
        if (o.filter && !strstr(all.items[i].name, o.filter)) {
            free(all.items[i].name);
            free(all.items[i].model_path);
            free(all.items[i].data_dir);
            free(all.items[i].light_output);
            continue;
        }
        cases_push(&run, all.items[i]);
    }
    free(all.items);
    if (run.n)
        qsort(run.items, run.n, sizeof *run.items, case_cmp);
    if (o.jobs > (int)run.n && run.n > 0)
        o.jobs = (int)run.n;

    conf_report_t *rep = conf_report_create(run.items, run.n);
    if (!rep) {
        fprintf(stderr, "conformance: out of memory\n");
        cases_free(&run);
        return 2;
    }
    double t0 = now_s();
    int status = run_all(&run, &o, rep) ? 0 : 2;
    if (status == 0)
        status = conf_report_print(rep, o.verbose, o.filter, o.expect_path, o.update_path,
                                   o.jobs, now_s() - t0);
    if (status != 2 && o.report_path && conf_report_write_csv(rep, o.report_path) != 0)
        status = 2;
    conf_report_destroy(rep);
    cases_free(&run);
    return status;
}
