/* replay_main.c: a plain main for any fuzz target (no libFuzzer; built with gcc by make
 * check). Runs LLVMFuzzerTestOneInput over every file named on the command line and every
 * regular file under the directories named, each in its own child process so that one
 * crash is counted and the rest still run, then prints "N passed, N failed".
 * Exit status: 0 iff every input passed. */
#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <unistd.h>

#include "fuzz/common/fuzz_input.h"

#pragma weak LLVMFuzzerInitialize

static long passed, failed;

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

int main(int argc, char **argv)
{
    if (LLVMFuzzerInitialize)
        LLVMFuzzerInitialize(&argc, &argv);
    if (argc < 2) {
        fprintf(stderr, "usage: %s FILE|DIR...\n", argv[0]);
        return 2;
    }
    for (int i = 1; i < argc; i++)
        run_path(argv[i]);
    printf("%s: %ld passed, %ld failed\n", argv[0], passed, failed);
    return failed != 0;
}
