/* test_gate.c: `smattn conform` and `check` as a gate no kernel slips through (issue 14):
 * no plugin code runs in the checker's process (each misbehaving fixture of
 * tests/fixtures/plugin_fixture.c gets its exit status and message, and none of its
 * processes outlives the run), the plugin's output is captured per case, the baseline
 * tracks what was checked and under which precision model, the golden vectors are found
 * or their absence is an error, and the file route's skip marker, shapes and gen --force.
 * The test_conform.c helpers are repeated here in small (cli, slurp, report access). */
#define _DEFAULT_SOURCE 1 /* kill, setenv */
#include <check.h>
#include <errno.h>
#include <fcntl.h>
#include <json.h>
#include <signal.h>
#include <spawn.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "tests/support/fs.h"

extern char **environ;

static char dir[64];

static void setup(void)
{
    snprintf(dir, sizeof dir, "/tmp/smattn_gate_XXXXXX");
    ck_assert_ptr_nonnull(mkdtemp(dir));
}

static void teardown(void)
{
    test_rm_tree(dir);
}

static const char *tmp(const char *name)
{
    static char buf[8][600];
    static int k;
    k = (k + 1) % 8;
    snprintf(buf[k], sizeof buf[k], "%s/%s", dir, name);
    return buf[k];
}

/* A file next to the CLI: build/<rel>. */
static const char *built(const char *rel)
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

static const char *fixture(const char *mode)
{
    static char rel[4][96];
    static int k;
    k = (k + 1) % 4;
    snprintf(rel[k], sizeof rel[k], "tests/fixtures/fixture_%s.so", mode);
    return built(rel[k]);
}

static char *slurp(const char *path)
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

typedef struct outcome {
    int code; /* exit status; -1 if killed by a signal */
    double seconds;
    char *out, *err;
} outcome;

static void outcome_free(outcome *o)
{
    free(o->out);
    free(o->err);
}

/* SMATTN_CLI with the arguments of the NULL-terminated array. */
static outcome cli_v(const char *const *args)
{
    const char *argv[40];
    int n = 0;
    argv[n++] = getenv("SMATTN_CLI");
    for (; args[n - 1] && n < 39; n++)
        argv[n] = args[n - 1];
    argv[n] = NULL;
    posix_spawn_file_actions_t fa;
    posix_spawn_file_actions_init(&fa);
    posix_spawn_file_actions_addopen(&fa, 1, tmp("stdout.txt"), O_WRONLY | O_CREAT | O_TRUNC, 0600);
    posix_spawn_file_actions_addopen(&fa, 2, tmp("stderr.txt"), O_WRONLY | O_CREAT | O_TRUNC, 0600);
    struct timespec t0, t1;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    pid_t pid;
    int rc = posix_spawn(&pid, argv[0], &fa, NULL, (char *const *)(uintptr_t)argv, environ);
    posix_spawn_file_actions_destroy(&fa);
    ck_assert_msg(rc == 0, "cannot run %s", argv[0]);
    int ws;
    ck_assert_int_eq(waitpid(pid, &ws, 0), pid);
    clock_gettime(CLOCK_MONOTONIC, &t1);
    outcome o = {WIFEXITED(ws) ? WEXITSTATUS(ws) : -1,
                 (double)(t1.tv_sec - t0.tv_sec) + 1e-9 * (double)(t1.tv_nsec - t0.tv_nsec),
                 slurp(tmp("stdout.txt")), slurp(tmp("stderr.txt"))};
    return o;
}

static outcome cli(const char *a0, ...)
{
    const char *args[40];
    int n = 0;
    va_list ap;
    va_start(ap, a0);
    for (const char *a = a0; a && n < 39; a = va_arg(ap, const char *))
        args[n++] = a;
    va_end(ap);
    args[n] = NULL;
    return cli_v(args);
}

static json_object *load_json(const char *path)
{
    json_object *root = json_object_from_file(path);
    ck_assert_msg(root != NULL, "%s is not JSON", path);
    return root;
}

static json_object *find_case(json_object *root, const char *name)
{
    json_object *cases, *v;
    ck_assert(json_object_object_get_ex(root, "cases", &cases));
    for (size_t i = 0; i < json_object_array_length(cases); i++) {
        json_object *c = json_object_array_get_idx(cases, i);
        if (json_object_object_get_ex(c, "name", &v) && !strcmp(json_object_get_string(v), name))
            return c;
    }
    return NULL;
}

static const char *field(json_object *c, const char *key)
{
    json_object *v;
    ck_assert_msg(c && json_object_object_get_ex(c, key, &v), "no \"%s\"", key);
    return json_object_get_string(v);
}

static int count(const char *hay, const char *needle)
{
    int n = 0;
    for (const char *s = hay; (s = strstr(s, needle)); s += strlen(needle))
        n++;
    return n;
}

/* ---- 1. no plugin code in the checker's process ---------------------------------------- */

/* Every process that loaded the fixture (and every grandchild it made) recorded its pid in
 * tmp/pids.txt: none may be alive (a zombie is dead). Kills any survivor, then fails. */
static void expect_no_survivors(void)
{
    char *text = slurp(tmp("pids.txt"));
    int seen = 0, alive = 0;
    char survivors[200] = "";
    for (char *s = text; *s;) {
        char *end;
        long pid = strtol(s, &end, 10);
        if (end == s)
            break;
        s = end + (*end == '\n');
        seen++;
        char path[64];
        snprintf(path, sizeof path, "/proc/%ld/stat", pid);
        char *st = slurp(path);
        const char *rp = strrchr(st, ')');
        if (rp && rp[1] == ' ' && rp[2] != 'Z' && rp[2] != 'X') {
            alive++;
            snprintf(survivors + strlen(survivors), sizeof survivors - strlen(survivors), " %ld",
                     pid);
            kill((pid_t)pid, SIGKILL);
        }
        free(st);
    }
    free(text);
    ck_assert_msg(seen > 0, "the fixture recorded no process (SMATTN_FIXTURE_PIDS)");
    ck_assert_msg(alive == 0, "%d process(es) of the plugin outlived the run:%s", alive,
                  survivors);
}

static void record_pids(void)
{
    unlink(tmp("pids.txt"));
    setenv("SMATTN_FIXTURE_PIDS", tmp("pids.txt"), 1);
}

/* A plugin that cannot be loaded: exit 2 at once, one line naming it, no report. */
static void expect_unloadable(const char *mode, const char *needle)
{
    record_pids();
    outcome o = cli("conform", "--kernel", fixture(mode), "--describe-timeout", "0.3", "--json",
                    tmp("r.json"), NULL);
    ck_assert_msg(o.code == 2, "%s: exit %d; stdout %.300s stderr %s", mode, o.code, o.out, o.err);
    ck_assert_msg(strstr(o.err, "cannot be loaded: "), "%s: stderr '%s'", mode, o.err);
    ck_assert_msg(strstr(o.err, needle), "%s: stderr '%s' lacks '%s'", mode, o.err, needle);
    ck_assert_msg(strchr(o.err, '\n') == o.err + strlen(o.err) - 1, "not one line: %s", o.err);
    ck_assert_msg(access(tmp("r.json"), F_OK) != 0, "a report was written");
    ck_assert_msg(o.seconds < 10, "%s: took %.1f s", mode, o.seconds);
    expect_no_survivors();
    outcome_free(&o);
}

START_TEST(describe_returns_bad_pointer)
{
    expect_unloadable("badinfo", "smattn_plugin_describe returned 0x10, which is not a readable");
}
END_TEST

START_TEST(describe_name_bad_pointer)
{
    expect_unloadable("badname", "info->name (0x10) is not a readable string");
}
END_TEST

START_TEST(constructor_aborts)
{
    expect_unloadable("ctor_abort", "died with signal 6");
}
END_TEST

START_TEST(describe_blocks)
{
    expect_unloadable("describe_hang", "no answer within 0.3 s in smattn_plugin_describe");
}
END_TEST

START_TEST(destructor_crashes)
{
    record_pids();
    outcome o = cli("conform", "--kernel", fixture("dtor_segv"), NULL);
    ck_assert_msg(o.code == 0, "exit %d; stderr %s", o.code, o.err);
    ck_assert_ptr_nonnull(strstr(o.out, "verdict: CONFORMING"));
    ck_assert_str_eq(o.err, "");
    expect_no_survivors();
    outcome_free(&o);
}
END_TEST

/* A fixture that misbehaves on D == 3: that case (shapes/s3_t7_d3) fails with the reason,
 * the run goes on and ends with a report. */
static void expect_case_failure(const char *mode, const char *needle)
{
    record_pids();
    outcome o = cli("conform", "--kernel", fixture(mode), "--case-timeout", "0.3", "--json",
                    tmp("r.json"), NULL);
    ck_assert_msg(o.code == 1, "%s: exit %d; stdout %.400s stderr %s", mode, o.code, o.out,
                  o.err);
    ck_assert_ptr_nonnull(strstr(o.out, "verdict: NOT CONFORMING"));
    json_object *r = load_json(tmp("r.json"));
    json_object *c = find_case(r, "shapes/s3_t7_d3");
    ck_assert_str_eq(field(c, "status"), "fail");
    ck_assert_msg(strstr(field(c, "reason"), needle), "%s: reason '%s' lacks '%s'", mode,
                  field(c, "reason"), needle);
    json_object *s, *v;
    ck_assert(json_object_object_get_ex(r, "summary", &s));
    ck_assert(json_object_object_get_ex(s, "failed", &v));
    ck_assert_int_eq(json_object_get_int64(v), 1);
    ck_assert(json_object_object_get_ex(s, "passed", &v));
    ck_assert_int_ge(json_object_get_int64(v), 8);
    json_object_put(r);
    expect_no_survivors();
    outcome_free(&o);
}

START_TEST(precision_crashes)
{
    expect_case_failure("prec_segv", "crash: smattn_plugin_precision died with signal 11");
}
END_TEST

START_TEST(precision_blocks)
{
    expect_case_failure("prec_hang", "hang: smattn_plugin_precision did not finish within 0.3 s");
}
END_TEST

START_TEST(grandchildren_and_kill_zero)
{
    /* kill(0, SIGTERM) reaches the case's process group only; the grandchildren that ignore
     * it (one in its own session) are killed at the end of the case. */
    expect_case_failure("forker", "crash: the kernel died with signal 15");
}
END_TEST

START_TEST(output_captured_per_case)
{
    record_pids();
    outcome o = cli("conform", "--kernel", fixture("chatty"), "--json", tmp("r.json"), NULL);
    ck_assert_msg(o.code == 1, "exit %d; stderr %s", o.code, o.err);
    /* Not mixed into the table: only under the failed case, marked as its output. */
    ck_assert_int_eq(count(o.out, "fixture says hello"), 1);
    ck_assert_ptr_nonnull(strstr(o.out, "| fixture says hello on stdout"));
    ck_assert_ptr_nonnull(strstr(o.out, "| fixture complains on stderr"));
    ck_assert_ptr_null(strstr(o.err, "fixture"));
    json_object *r = load_json(tmp("r.json"));
    const char *out = field(find_case(r, "shapes/s3_t7_d3"), "output");
    ck_assert_msg(strstr(out, "fixture says hello on stdout") &&
                      strstr(out, "fixture complains on stderr"),
                  "output '%s'", out);
    json_object_put(r);
    expect_no_survivors();
    outcome_free(&o);
}
END_TEST

Suite *gate_suite(void);
Suite *gate_suite(void)
{
    Suite *s = suite_create("gate");
    TCase *tc = tcase_create("isolation");
    tcase_set_timeout(tc, 120);
    tcase_add_checked_fixture(tc, setup, teardown);
    tcase_add_test(tc, describe_returns_bad_pointer);
    tcase_add_test(tc, describe_name_bad_pointer);
    tcase_add_test(tc, constructor_aborts);
    tcase_add_test(tc, describe_blocks);
    tcase_add_test(tc, destructor_crashes);
    tcase_add_test(tc, precision_crashes);
    tcase_add_test(tc, precision_blocks);
    tcase_add_test(tc, grandchildren_and_kill_zero);
    tcase_add_test(tc, output_captured_per_case);
    suite_add_tcase(s, tc);
    return s;
}
