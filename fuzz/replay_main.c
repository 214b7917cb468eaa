/* SPDX-License-Identifier: MIT */
/* replay_main.c: a plain main for any fuzz target (no libFuzzer; built with gcc by make
 * check). Runs LLVMFuzzerTestOneInput over every file named on the command line and every
 * regular file under the directories named, each in its own child process so that one
 * crash is counted and the rest still run, then prints "N passed, N failed".
 * Exit status: 0 iff every input passed.
 *   --speed SECONDS FILE|DIR...: instead, load every input and run them all in this process,
 *   round after round, for about SECONDS; print executions per second (one core). */
#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "fuzz/common/fuzz_input.h"

#pragma weak LLVMFuzzerInitialize

static long passed, failed;

/* --speed: the inputs loaded in memory (exact-size buffers) */
static int speed_mode;
static unsigned char **sp_buf;
static size_t *sp_len, sp_n, sp_cap;

/* Read the whole file into a buffer of exactly its size (so that ASan sees any overread). */
static int run_file(const char *path)
{
    FILE *f = fopen(path, "rb");
    if (!f) {
        fprintf(stderr, "%s: cannot open\n", path);
        return 1;
    }
    size_t cap = 4096, n = 0;
    unsigned char *buf = malloc(cap);
    size_t got;
    while (buf && (got = fread(buf + n, 1, cap - n, f)) > 0) {
        n += got;
        if (n == cap) {
            unsigned char *b2 = realloc(buf, cap *= 2);
            if (!b2)
                free(buf);
            buf = b2;
        }
    }
    fclose(f);
    if (!buf) {
        fprintf(stderr, "%s: out of memory\n", path);
        return 1;
    }
    unsigned char *exact = malloc(n ? n : 1);
    if (!exact) {
        free(buf);
        return 1;
    }
    memcpy(exact, buf, n);
    free(buf);
    if (speed_mode) {
        if (sp_n == sp_cap) {
            sp_cap = sp_cap ? 2 * sp_cap : 256;
            unsigned char **nb = realloc(sp_buf, sp_cap * sizeof *sp_buf);
            size_t *nl = nb ? realloc(sp_len, sp_cap * sizeof *sp_len) : NULL;
            if (nb)
                sp_buf = nb;
            if (!nb || !nl) {
                free(exact);
                return 1;
            }
            sp_len = nl;
        }
        sp_buf[sp_n] = exact, sp_len[sp_n++] = n;
        return 0;
    }
    fflush(NULL);
    pid_t pid = fork();
    if (pid < 0) {
        free(exact);
        perror("fork");
        return 1;
    }
    if (pid == 0) {
        LLVMFuzzerTestOneInput(exact, n);
        free(exact);
        exit(0);
    }
    free(exact);
    int st = 0;
    if (waitpid(pid, &st, 0) < 0 || !WIFEXITED(st) || WEXITSTATUS(st) != 0) {
        fprintf(stderr, "FAILED: %s (%s %d)\n", path, WIFSIGNALED(st) ? "signal" : "exit",
                WIFSIGNALED(st) ? WTERMSIG(st) : WEXITSTATUS(st));
        return 1;
    }
    return 0;
}

static int cmp_str(const void *a, const void *b)
{
    return strcmp(*(char *const *)a, *(char *const *)b);
}

static void run_path(const char *path)
{
    struct stat sb;
    if (stat(path, &sb) != 0) {
        fprintf(stderr, "FAILED: %s (missing)\n", path);
        failed++;
        return;
    }
    if (!S_ISDIR(sb.st_mode)) {
        if (run_file(path))
            failed++;
        else
            passed++;
        return;
    }
    DIR *d = opendir(path);
    if (!d) {
        fprintf(stderr, "FAILED: %s (cannot list)\n", path);
        failed++;
        return;
    }
    char **names = NULL;
    size_t n = 0, cap = 0;
    struct dirent *e;
    while ((e = readdir(d)) != NULL) {
        if (e->d_name[0] == '.') /* ., .., .gitkeep */
            continue;
        if (n == cap) {
            cap = cap ? 2 * cap : 64;
            char **nn = realloc(names, cap * sizeof *names);
            if (!nn)
                break;
            names = nn;
        }
        size_t len = strlen(path) + strlen(e->d_name) + 2;
        if (!(names[n] = malloc(len)))
            break;
        snprintf(names[n], len, "%s/%s", path, e->d_name);
        n++;
    }
    closedir(d);
    if (n)
        qsort(names, n, sizeof *names, cmp_str); /* a stable order for the log */
    for (size_t i = 0; i < n; i++) {
        run_path(names[i]);
        free(names[i]);
    }
    free(names);
}

static double now_clock(clockid_t c)
{
    struct timespec ts;
    clock_gettime(c, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* Run every loaded input in turn until `seconds` have passed (at least one round). */
static void speed_run(const char *prog, double seconds)
{
    if (!sp_n) {
        fprintf(stderr, "%s: no inputs\n", prog);
        return;
    }
    double t0 = now_clock(CLOCK_MONOTONIC), t = t0, c0 = now_clock(CLOCK_PROCESS_CPUTIME_ID);
    long runs = 0, rounds = 0;
    do {
        for (size_t i = 0; i < sp_n; i++)
            LLVMFuzzerTestOneInput(sp_buf[i], sp_len[i]);
        runs += (long)sp_n, rounds++;
        t = now_clock(CLOCK_MONOTONIC);
    } while (t - t0 < seconds);
    /* CPU time of every thread of the process (the kernel's pool included): the figure for
     * "one core" on a machine shared with other jobs */
    double c = now_clock(CLOCK_PROCESS_CPUTIME_ID) - c0;
    printf("%s: %zu inputs, %ld rounds, %ld runs in %.2f s wall, %.2f s CPU: %.0f exec/s wall, "
           "%.0f exec/s per CPU second\n",
           prog, sp_n, rounds, runs, t - t0, c, (double)runs / (t - t0), (double)runs / c);
    for (size_t i = 0; i < sp_n; i++)
        free(sp_buf[i]);
    free(sp_buf), free(sp_len);
}

int main(int argc, char **argv)
{
    if (LLVMFuzzerInitialize)
        LLVMFuzzerInitialize(&argc, &argv);
    double seconds = 0;
    int first = 1;
    if (argc > 2 && !strcmp(argv[1], "--speed")) {
        speed_mode = 1, seconds = atof(argv[2]), first = 3;
    }
    if (argc <= first) {
        fprintf(stderr, "usage: %s [--speed SECONDS] FILE|DIR...\n", argv[0]);
        return 2;
    }
    for (int i = first; i < argc; i++)
        run_path(argv[i]);
    if (speed_mode) {
        speed_run(argv[0], seconds);
        return failed != 0;
    }
    printf("%s: %ld passed, %ld failed\n", argv[0], passed, failed);
    return failed != 0;
}
