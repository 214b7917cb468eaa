/* SPDX-License-Identifier: MIT */
/* cli_run.c: running the smattn tool from a test and reading what it wrote. */
#define _DEFAULT_SOURCE 1 /* setgroups */
#include "tests/support/cli_run.h"

#include <check.h>
#include <dirent.h>
#include <fcntl.h>
#include <grp.h>
#include <pwd.h>
#include <spawn.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

extern char **environ;

char *test_slurp(const char *path)
{
    FILE *f = fopen(path, "rb");
    if (!f)
        return calloc(1, 1);
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    char *s = calloc(1, (size_t)(n > 0 ? n : 0) + 1);
    if (n > 0 && fread(s, 1, (size_t)n, f) != (size_t)n)
        s[0] = '\0';
    fclose(f);
    return s;
}

const char *test_built(const char *rel)
{
    static char buf[4][600];
    static int k;
    k = (k + 1) % 4;
    const char *cli = getenv("SMATTN_CLI");
    ck_assert_msg(cli != NULL, "SMATTN_CLI is not set");
    const char *slash = strrchr(cli, '/');
    int n = slash ? (int)(slash - cli) : 1;
    snprintf(buf[k], sizeof buf[k], "%.*s/%s", n, slash ? cli : ".", rel);
    ck_assert_msg(access(buf[k], R_OK) == 0, "%s is missing (make tests builds it)", buf[k]);
    return buf[k];
}

const char *test_fixture(const char *mode)
{
    static char rel[4][96];
    static int k;
    k = (k + 1) % 4;
    snprintf(rel[k], sizeof rel[k], "tests/fixtures/fixture_%s.so", mode);
    return test_built(rel[k]);
}

void test_outcome_free(test_outcome *o)
{
    free(o->out);
    free(o->err);
}

test_outcome test_cli_runl(const char *dir, const char *a0, ...)
{
    const char *args[40];
    int n = 0;
    va_list ap;
    va_start(ap, a0);
    for (const char *a = a0; a && n < 39; a = va_arg(ap, const char *))
        args[n++] = a;
    va_end(ap);
    args[n] = NULL;
    return test_cli_run(dir, args);
}

test_outcome test_cli_run(const char *dir, const char *const *args)
{
    const char *argv[40];
    int n = 0;
    argv[n++] = getenv("SMATTN_CLI");
    for (; args[n - 1] && n < 39; n++)
        argv[n] = args[n - 1];
    argv[n] = NULL;
    char out[600], err[600];
    snprintf(out, sizeof out, "%s/stdout.txt", dir);
    snprintf(err, sizeof err, "%s/stderr.txt", dir);
    posix_spawn_file_actions_t fa;
    posix_spawn_file_actions_init(&fa);
    posix_spawn_file_actions_addopen(&fa, 1, out, O_WRONLY | O_CREAT | O_TRUNC, 0600);
    posix_spawn_file_actions_addopen(&fa, 2, err, O_WRONLY | O_CREAT | O_TRUNC, 0600);
    struct timespec t0, t1;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    pid_t pid;
    int rc = posix_spawn(&pid, argv[0], &fa, NULL, (char *const *)(uintptr_t)argv, environ);
    posix_spawn_file_actions_destroy(&fa);
    ck_assert_msg(rc == 0, "cannot run %s", argv[0]);
    int ws;
    ck_assert_int_eq(waitpid(pid, &ws, 0), pid);
    clock_gettime(CLOCK_MONOTONIC, &t1);
    test_outcome o = {WIFEXITED(ws) ? WEXITSTATUS(ws) : -1,
                      (double)(t1.tv_sec - t0.tv_sec) + 1e-9 * (double)(t1.tv_nsec - t0.tv_nsec),
                      test_slurp(out), test_slurp(err)};
    return o;
}

test_outcome test_cli_run_as(const char *dir, const char *prog, const char *const *args,
                             unsigned uid, long nproc)
{
    const char *argv[40];
    int n = 0;
    argv[n++] = prog ? prog : getenv("SMATTN_CLI");
    for (; args[n - 1] && n < 39; n++)
        argv[n] = args[n - 1];
    argv[n] = NULL;
    char out[600], err[600];
    snprintf(out, sizeof out, "%s/stdout.txt", dir);
    snprintf(err, sizeof err, "%s/stderr.txt", dir);
    struct timespec t0, t1;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    pid_t pid = fork();
    ck_assert_int_ge(pid, 0);
    if (pid == 0) {
        int o = open(out, O_WRONLY | O_CREAT | O_TRUNC, 0600);
        int e = open(err, O_WRONLY | O_CREAT | O_TRUNC, 0600);
        if (o < 0 || e < 0 || dup2(o, 1) < 0 || dup2(e, 2) < 0)
            _exit(127);
        if (getuid() == 0 &&
            (setgroups(0, NULL) != 0 || setgid((gid_t)uid) != 0 || setuid((uid_t)uid) != 0))
            _exit(127);
        struct rlimit rl = {(rlim_t)nproc, (rlim_t)nproc};
        if (nproc > 0 && setrlimit(RLIMIT_NPROC, &rl) != 0)
            _exit(127);
        alarm(60); /* a backstop: a run that blocks (on a FIFO, say) dies of SIGALRM */
        execv(argv[0], (char *const *)(uintptr_t)argv);
        _exit(127);
    }
    int ws;
    ck_assert_int_eq(waitpid(pid, &ws, 0), pid);
    clock_gettime(CLOCK_MONOTONIC, &t1);
    test_outcome o = {WIFEXITED(ws) ? WEXITSTATUS(ws) : -1,
                      (double)(t1.tv_sec - t0.tv_sec) + 1e-9 * (double)(t1.tv_nsec - t0.tv_nsec),
                      test_slurp(out), test_slurp(err)};
    return o;
}

const char *test_copy_public(const char *dir, const char *src)
{
    static char buf[4][600];
    static int k;
    k = (k + 1) % 4;
    const char *base = strrchr(src, '/');
    snprintf(buf[k], sizeof buf[k], "%s/%s", dir, base ? base + 1 : src);
    FILE *in = fopen(src, "rb"), *out = in ? fopen(buf[k], "wb") : NULL;
    ck_assert_msg(in && out, "cannot copy %s to %s", src, buf[k]);
    char chunk[1 << 16];
    size_t n;
    int ok = 1;
    while (ok && (n = fread(chunk, 1, sizeof chunk, in)) > 0)
        ok = fwrite(chunk, 1, n, out) == n;
    ok = !ferror(in) && ok;
    fclose(in);
    ck_assert_msg(fclose(out) == 0 && ok, "cannot copy %s to %s", src, buf[k]);
    ck_assert_int_eq(chmod(buf[k], 0755), 0);
    return buf[k];
}

/* 1 if a process of uid runs now (/proc/N/status's Uid line). */
static int uid_in_use(unsigned uid)
{
    DIR *d = opendir("/proc");
    struct dirent *de;
    int used = 0;
    while (d && !used && (de = readdir(d))) {
        if (de->d_name[0] < '1' || de->d_name[0] > '9')
            continue;
        char path[300], line[256];
        snprintf(path, sizeof path, "/proc/%s/status", de->d_name);
        FILE *f = fopen(path, "r");
        while (f && fgets(line, sizeof line, f)) {
            unsigned r;
            if (sscanf(line, "Uid: %u", &r) == 1) {
                used = r == uid;
                break;
            }
        }
        if (f)
            fclose(f);
    }
    if (d)
        closedir(d);
    return used;
}

unsigned test_spare_uid(void)
{
    /* Among 61000-64999 (above the usual ranges of accounts, below nobody's 65534), one
     * that depends on the pid: suites run in parallel take different ones. */
    for (unsigned k = 0; k < 4000; k++) {
        unsigned uid = 61000 + ((unsigned)getpid() + 7 * k) % 4000;
        if (!getpwuid((uid_t)uid) && !uid_in_use(uid))
            return uid;
    }
    ck_abort_msg("no spare uid in 61000-64999");
    return 0;
}

json_object *test_report_case(json_object *root, const char *name)
{
    json_object *cases, *v;
    if (!json_object_object_get_ex(root, "cases", &cases))
        return NULL;
    for (size_t i = 0; i < json_object_array_length(cases); i++) {
        json_object *c = json_object_array_get_idx(cases, i);
        if (json_object_object_get_ex(c, "name", &v) && !strcmp(json_object_get_string(v), name))
            return c;
    }
    return NULL;
}

const char *test_report_field(json_object *c, const char *key)
{
    json_object *v;
    ck_assert_msg(c && json_object_object_get_ex(c, key, &v), "no \"%s\"", key);
    return json_object_get_string(v);
}

void test_unmark_ref_set(const char *dir)
{
    char path[1024];
    snprintf(path, sizeof path, "%s/.smattn-set", dir);
    char *text = test_slurp(path);
    ck_assert_msg(strstr(text, "\"writer\": \"ref\""), "%s: %s", path, text);
    free(text);
    ck_assert_msg(unlink(path) == 0, "%s: cannot remove", path);
}
