/* plot.c -- the run's plots: a gnuplot script next to the PNGs it draws
 * (PREFIX.gp, so a user can re-run or edit it), run when gnuplot is on
 * PATH. The script reads the CSV by absolute path, so it runs from any
 * directory; the flatness mark and the end of the traffic are drawn as
 * dashed lines, which is what the verdict compares. */
#include <errno.h>
#include <spawn.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "common/error.h"
#include "loadtest/report_impl.h"

extern char **environ;

/* path made absolute against the working directory (the file need not
 * exist yet, so not realpath). */
static void abs_path(const char *path, char *out, size_t cap)
{
    char cwd[LG_PATH_MAX];
    if (path[0] == '/' || !getcwd(cwd, sizeof cwd))
        snprintf(out, cap, "%s", path);
    else
        snprintf(out, cap, "%s/%s", cwd, path);
}

/* A gnuplot single-quoted string: a quote is doubled. */
static void gp_string(FILE *f, const char *s)
{
    fputc('\'', f);
    for (; *s; s++) {
        if (*s == '\'')
            fputc('\'', f);
        fputc(*s, f);
    }
    fputc('\'', f);
}

static void gp_marks(FILE *f, const lg_run_t *run, const lg_result_t *r)
{
    fputs("unset arrow\nunset label\n", f);
    if (r->flat.valid)
        fprintf(f,
                "set arrow from %.3f, graph 0 to %.3f, graph 1 nohead dashtype 2 lc rgb 'gray40'\n"
                "set label 'mark (%.0f%%)' at %.3f, graph 0.97 offset 0.5,0 tc rgb 'gray40'\n",
                r->flat.mark_t_s, r->flat.mark_t_s, run->o->warmup_fraction * 100,
                r->flat.mark_t_s);
    if (run->n_samples > r->n_traffic && r->n_traffic) {
        double t = run->samples[r->n_traffic - 1].t_s;
        fprintf(f,
                "set arrow from %.3f, graph 0 to %.3f, graph 1 nohead dashtype 2 lc rgb 'gray40'\n"
                "set label 'idle' at %.3f, graph 0.97 offset 0.5,0 tc rgb 'gray40'\n",
                t, t, t);
    }
}

static int script_write(const lg_run_t *run, const lg_result_t *r, const char *gp,
                        const char *prefix)
{
    char csv[LG_PATH_MAX + 16], png[LG_PATH_MAX + 32];
    FILE *f = fopen(gp, "w");
    if (!f)
        return fs_err(FS_EIO, "--plot: cannot write \"%s\": %s", gp, strerror(errno));
    abs_path(run->csv_path, csv, sizeof csv);
    fputs("# loadgen's plots of one run: re-run with `gnuplot FILE`.\n"
          "# Columns of the CSV: 1 time_s, 4 allocated_bytes, 5 reserved_bytes, 10 rss_bytes,\n"
          "# 13 p50_ms, 14 p99_ms (see loadtest/README.md for all).\n"
          "set datafile separator ','\n"
          "set terminal pngcairo size 1200,600 noenhanced\n"
          "set grid\nset key outside right top vertical\nset xlabel 'time (s)'\n",
          f);
    fputs("csv = ", f);
    gp_string(f, csv);
    fputc('\n', f);
    gp_marks(f, run, r);
    snprintf(png, sizeof png, "%s-memory.png", prefix);
    abs_path(png, csv, sizeof csv);
    fputs("set output ", f);
    gp_string(f, csv);
    fputs("\nset title 'flatserve memory: device caches and process RSS'\n"
          "set ylabel 'MiB'\nset yrange [0:*]\n"
          "plot csv every ::1 using 1:($4/1048576) with lines lw 2 title 'allocated', \\\n"
          "     csv every ::1 using 1:($5/1048576) with lines lw 2 title 'reserved', \\\n"
          "     csv every ::1 using 1:($10/1048576) with lines lw 2 title 'RSS'\n",
          f);
    snprintf(png, sizeof png, "%s-latency.png", prefix);
    abs_path(png, csv, sizeof csv);
    fputs("set output ", f);
    gp_string(f, csv);
    fputs("\nset title 'latency per sample interval (answered 200)'\n"
          "set ylabel 'ms'\nset yrange [0:*]\n"
          "plot csv every ::1 using 1:13 with linespoints pt 7 ps 0.5 title 'p50', \\\n"
          "     csv every ::1 using 1:14 with linespoints pt 7 ps 0.5 title 'p99'\n",
          f);
    if (fclose(f) != 0)
        return fs_err(FS_EIO, "--plot: cannot write \"%s\": %s", gp, strerror(errno));
    return 0;
}

static int on_path(const char *prog)
{
    const char *path = getenv("PATH");
    char full[LG_PATH_MAX];
    while (path && *path) {
        size_t n = strcspn(path, ":");
        snprintf(full, sizeof full, "%.*s/%s", (int)n, n ? path : ".", prog);
        if (access(full, X_OK) == 0)
            return 1;
        path += n + (path[n] == ':');
    }
    return 0;
}

int lg_plot_write(const lg_run_t *run, const lg_result_t *r, const char *prefix)
{
    char gp[LG_PATH_MAX + 8];
    snprintf(gp, sizeof gp, "%s.gp", prefix);
    int rc = script_write(run, r, gp, prefix);
    if (rc != 0)
        return rc;
    /* gnuplot-nox's own name: Debian's package installs only that, and
     * the "gnuplot" alternative is made by its maintainer scripts, which an
     * unpacked bundle (the GPU machine's) never runs. */
    const char *prog = on_path("gnuplot") ? "gnuplot" : on_path("gnuplot-nox") ? "gnuplot-nox" : NULL;
    if (!prog) {
        fprintf(stderr, "loadgen: gnuplot is not on PATH: wrote %s and %s; no PNGs "
                        "(install gnuplot, e.g. apt-get install gnuplot-nox, and run "
                        "`gnuplot %s`)\n",
                gp, run->csv_path, gp);
        return 0;
    }
    /* The script and the CSV are the plots' data; a gnuplot that cannot
     * run here (an unpacked bundle without its libraries) is said, and the
     * run's status stays the verdict's: the PNGs can be drawn elsewhere. */
    char *argv[] = {(char *)prog, gp, NULL};
    pid_t pid;
    int err = posix_spawnp(&pid, prog, NULL, NULL, argv, environ);
    int status = 0;
    if (err == 0)
        while (waitpid(pid, &status, 0) < 0 && errno == EINTR)
            ;
    if (err != 0 || !WIFEXITED(status) || WEXITSTATUS(status) != 0) {
        fprintf(stderr, "loadgen: %s %s failed (%s %d): wrote %s and %s; no PNGs (run `gnuplot %s` "
                        "where gnuplot works)\n",
                prog, gp, err ? "spawn error" : "status", err ? err : status, gp, run->csv_path, gp);
        return 0;
    }
    fprintf(stderr, "loadgen: wrote %s-memory.png and %s-latency.png (script %s)\n", prefix,
            prefix, gp);
    return 0;
}
