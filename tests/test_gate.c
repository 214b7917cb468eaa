/* SPDX-License-Identifier: MIT */
/* test_gate.c: `smattn conform` and `check` as a gate no kernel slips through:
 * no plugin code runs in the checker's process (each misbehaving fixture of
 * tests/fixtures/plugin_fixture.c gets its exit status and message, and none of its
 * processes outlives the run), the plugin's output is captured per case, the baseline
 * tracks what was checked and under which precision model, the golden vectors are found
 * or their absence is an error, and the file route's skip marker, shapes and gen --force.
 * The test_conform.c helpers are repeated here in small (cli, slurp, report access). */
#define _DEFAULT_SOURCE 1 /* kill, setenv */
#define _XOPEN_SOURCE 700 /* posix_openpt */
#include <check.h>
#include <errno.h>
#include <fcntl.h>
#include <json.h>
#include <signal.h>
#include <spawn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <dirent.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <poll.h>
#include <time.h>
#include <unistd.h>

#include "io/npy.h"
#include "io/util.h"
#include "tests/support/cli_run.h"
#include "tests/support/fs.h"

/* the shared helpers under this suite's short names */
typedef test_outcome outcome;
#define built test_built
#define slurp test_slurp
#define outcome_free test_outcome_free
#define find_case test_report_case
#define field test_report_field
#define fixture test_fixture

extern char **environ;

static char dir[64];
/* the tool run in dir with a NULL-terminated argument list */
#define cli(...) test_cli_runl(dir, __VA_ARGS__)

static void setup(void)
{
    ck_assert_int_eq(test_mkdtemp(dir, sizeof dir, "gate"), 0);
}

static void teardown(void)
{
    test_rm_tree(dir);
}

/* dir/name (test_path's rotating buffers) */
static const char *tmp(const char *name)
{
    return test_path(dir, name);
}

static json_object *load_json(const char *path)
{
    json_object *root = json_object_from_file(path);
    ck_assert_msg(root != NULL, "%s is not JSON", path);
    return root;
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
        /* Not slurp(): a /proc file has size 0 to fseek/ftell, so read it as a stream. */
        char path[64], st[512] = "";
        snprintf(path, sizeof path, "/proc/%ld/stat", pid);
        FILE *f = fopen(path, "r");
        if (f) {
            size_t got = fread(st, 1, sizeof st - 1, f);
            st[got] = '\0';
            fclose(f);
        }
        const char *rp = strrchr(st, ')');
        if (rp && rp[1] == ' ' && rp[2] != 'Z' && rp[2] != 'X') {
            alive++;
            snprintf(survivors + strlen(survivors), sizeof survivors - strlen(survivors), " %ld",
                     pid);
            kill((pid_t)pid, SIGKILL);
        }
    }
    free(text);
    ck_assert_msg(seen > 0, "the fixture recorded no process (SMATTN_FIXTURE_PIDS)");
    ck_assert_msg(alive == 0, "%d process(es) of the plugin outlived the run:%s", alive, survivors);
}

static void record_pids(void)
{
    unlink(tmp("pids.txt"));
    setenv("SMATTN_FIXTURE_PIDS", tmp("pids.txt"), 1);
}

static int clean_utf8(const char *s, char *bad, size_t cap);

/* A plugin that cannot be loaded: exit 2 at once, one line naming it, no report; what it
 * printed (here a C1 control and a byte that is not UTF-8) shown escaped. */
static void expect_unloadable(const char *mode, const char *needle)
{
    record_pids();
    /* --describe-timeout for the fixture that blocks only (the others fail at once). */
    int hang = !strcmp(mode, "describe_hang");
    outcome o = cli("conform", "--kernel", fixture(mode), "--json", tmp("r.json"),
                    hang ? "--describe-timeout" : NULL, "0.3", NULL);
    ck_assert_msg(o.code == 2, "%s: exit %d; stdout %.300s stderr %s", mode, o.code, o.out, o.err);
    ck_assert_msg(strstr(o.err, "cannot be loaded: "), "%s: stderr '%s'", mode, o.err);
    ck_assert_msg(strstr(o.err, needle), "%s: stderr '%s' lacks '%s'", mode, o.err, needle);
    ck_assert_msg(strchr(o.err, '\n') == o.err + strlen(o.err) - 1, "not one line: %s", o.err);
    char bad[200];
    ck_assert_msg(clean_utf8(o.err, bad, sizeof bad), "%s: stderr: %s", mode, bad);
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
    expect_unloadable("ctor_abort", "died with signal 6 (Aborted) loading it (dlopen runs its "
                                    "constructors); it printed: fixture: no licence found "
                                    "\\xc2\\x9b\\xff");
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
    ck_assert_msg(o.code == 1, "%s: exit %d; stdout %.400s stderr %s", mode, o.code, o.out, o.err);
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
    /* "died with signal 11", or under ASan (its own SIGSEGV handler) "exited with status 1" */
    expect_case_failure("prec_segv", "crash: smattn_plugin_precision ");
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

/* A precision hook that blocks on every problem: unloadable under the describe limit,
 * not a case time limit per case. A kernel that hangs on every case: the run stops after
 * 3 hangs in a row, the rest not run, exit 1, in seconds. */
START_TEST(blocking_everywhere_stops_early)
{
    record_pids();
    outcome o = cli("conform", "--kernel", fixture("prec_hang_all"), "--describe-timeout", "0.3",
                    "--case-timeout", "0.3", NULL);
    ck_assert_msg(o.code == 2, "prec_hang_all: exit %d; stdout %.300s stderr %s", o.code, o.out,
                  o.err);
    ck_assert_msg(strstr(o.err, "cannot be loaded: ") &&
                      strstr(o.err, "no answer within 0.3 s in smattn_plugin_precision"),
                  "stderr '%s'", o.err);
    ck_assert_msg(o.seconds < 10, "took %.1f s", o.seconds);
    expect_no_survivors();
    outcome_free(&o);
    record_pids();
    o = cli("conform", "--kernel", fixture("hang_all"), "--case-timeout", "0.2", "--json",
            tmp("r.json"), NULL);
    ck_assert_msg(o.code == 1, "hang_all: exit %d; stdout %.300s stderr %s", o.code, o.out, o.err);
    ck_assert_msg(strstr(o.out, "stopped: 3 cases in a row hung; the rest were not run and the "
                                "kernel is reported not conforming"),
                  "%s", o.out);
    ck_assert_ptr_nonnull(strstr(o.out, "verdict: NOT CONFORMING"));
    ck_assert_msg(o.seconds < 10, "took %.1f s", o.seconds);
    json_object *r = load_json(tmp("r.json")), *s, *v;
    ck_assert(json_object_object_get_ex(r, "summary", &s));
    ck_assert(json_object_object_get_ex(s, "failed", &v));
    ck_assert_int_eq(json_object_get_int64(v), 3);
    ck_assert(json_object_object_get_ex(s, "passed", &v));
    ck_assert_int_eq(json_object_get_int64(v), 0);
    json_object_put(r);
    expect_no_survivors();
    outcome_free(&o);
}
END_TEST

/* The checker itself killed (a CI job's timeout, Ctrl-C) while a case blocks with every
 * catchable signal ignored and two grandchildren (one in its own session): it takes the
 * case's processes with it and dies of that signal. */
static void killed_mid_case(int sig)
{
    record_pids();
    const char *argv[] = {getenv("SMATTN_CLI"), "conform", "--kernel", fixture("stubborn"),
                          "--only", "shapes/s3_t7_d3", "--case-timeout", "60", NULL};
    posix_spawn_file_actions_t fa;
    posix_spawn_file_actions_init(&fa);
    posix_spawn_file_actions_addopen(&fa, 1, tmp("stdout.txt"), O_WRONLY | O_CREAT | O_TRUNC, 0600);
    posix_spawn_file_actions_addopen(&fa, 2, tmp("stderr.txt"), O_WRONLY | O_CREAT | O_TRUNC, 0600);
    /* the checker keeps a signal its parent ignored (nohup): the test wants the defaults
     * whatever the suite inherited (a CI runner under nohup ignores SIGHUP) */
    posix_spawnattr_t at;
    posix_spawnattr_init(&at);
    sigset_t def;
    sigemptyset(&def);
    sigaddset(&def, SIGHUP), sigaddset(&def, SIGINT), sigaddset(&def, SIGTERM);
    posix_spawnattr_setsigdefault(&at, &def);
    posix_spawnattr_setflags(&at, POSIX_SPAWN_SETSIGDEF);
    pid_t pid;
    ck_assert_int_eq(posix_spawn(&pid, argv[0], &fa, &at, (char *const *)(uintptr_t)argv, environ),
                     0);
    posix_spawnattr_destroy(&at);
    posix_spawn_file_actions_destroy(&fa);
    /* The describe child, the case's process and its two grandchildren: 4 pids. */
    int lines = 0;
    for (int k = 0; k < 200 && lines < 4; k++) {
        struct timespec ms50 = {0, 50000000};
        nanosleep(&ms50, NULL);
        char *text = slurp(tmp("pids.txt"));
        lines = count(text, "\n");
        free(text);
    }
    ck_assert_msg(lines >= 4, "the case did not start (%d pids recorded)", lines);
    struct timespec ms300 = {0, 300000000};
    nanosleep(&ms300, NULL);
    struct timespec t0, t1;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    ck_assert_int_eq(kill(pid, sig), 0);
    int ws;
    ck_assert_int_eq(waitpid(pid, &ws, 0), pid);
    clock_gettime(CLOCK_MONOTONIC, &t1);
    expect_no_survivors(); /* first: it kills what survived */
    ck_assert_msg(WIFSIGNALED(ws) && WTERMSIG(ws) == sig, "status 0x%x, want death by signal %d",
                  ws, sig);
    ck_assert_msg(t1.tv_sec - t0.tv_sec < 5, "took %lld s to die", (long long)(t1.tv_sec - t0.tv_sec));
}

START_TEST(checker_killed_takes_the_case_along)
{
    killed_mid_case(SIGTERM);
    killed_mid_case(SIGINT);
    killed_mid_case(SIGHUP);
    /* The case's time limit does not lean on the plugin's SIGALRM: the parent kills. */
    expect_case_failure("stubborn", "hang: the kernel did not return within 0.3 s (killed)");
}
END_TEST

/* Text from the plugin (its name, its output) reaches the text report escaped: no forged
 * line of a CI log, no terminal escape. */
START_TEST(plugin_text_escaped)
{
    outcome o = cli("conform", "--kernel", fixture("evilname"), "--only", "shapes/", NULL);
    ck_assert_msg(o.code == 1, "exit %d: %s", o.code, o.out);
    ck_assert_msg(!strchr(o.out, '\x1b'), "an escape character reached stdout: %s", o.out);
    ck_assert_msg(!strstr(o.out, "\n::error::"), "a forged line: %s", o.out);
    ck_assert_msg(strstr(o.out, "kernel evil\\n::error::forged\\x1b[31m 1 ("), "%s", o.out);
    ck_assert_msg(strstr(o.out, "| \\x1b[32mverdict: CONFORMING\\x1b[0m") ||
                      strstr(o.out, "| ?[32mverdict: CONFORMING?[0m"),
                  "%s", o.out);
    ck_assert_int_eq(count(o.out, "verdict: "), 2); /* the real one and the escaped output */
    outcome_free(&o);
}
END_TEST

/* 1 if s is valid UTF-8 (RFC 3629: no overlong form, no surrogate, nothing past
 * U+10FFFF) holding no control character but newline, tab and carriage return. */
static int clean_utf8(const char *s, char *bad, size_t cap)
{
    const unsigned char *p = (const unsigned char *)s;
    while (*p) {
        unsigned c = *p, n = c < 0x80             ? 1
                             : (c & 0xe0) == 0xc0 ? 2
                             : (c & 0xf0) == 0xe0 ? 3
                             : (c & 0xf8) == 0xf0 ? 4
                                                  : 0;
        unsigned v = n == 1 ? c : n ? c & (0x7fu >> n) : 0;
        for (unsigned k = 1; k < n; k++) {
            if ((p[k] & 0xc0) != 0x80) {
                n = 0;
                break;
            }
            v = v << 6 | (p[k] & 0x3fu);
        }
        static const unsigned least[5] = {0, 0, 0x80, 0x800, 0x10000};
        int ok = n && v >= least[n] && v <= 0x10ffff && !(v >= 0xd800 && v <= 0xdfff) &&
                 (v >= 0x20 || v == '\n' || v == '\t' || v == '\r') && v != 0x7f &&
                 !(v >= 0x80 && v < 0xa0);
        if (!ok) {
            snprintf(bad, cap, "byte %ld (0x%02x) in ...%.40s",
                     (long)(p - (const unsigned char *)s), *p,
                     p > (const unsigned char *)s + 20 ? (const char *)p - 20 : s);
            return 0;
        }
        p += n;
    }
    return 1;
}

/* The reports of a run, each valid UTF-8 without stray control characters; the JSON one
 * parses with the strict reader (json-c alone takes bytes that are not UTF-8), the XML
 * one with xmllint where it is installed. */
static void expect_reports_valid(const char *out)
{
    char bad[200];
    ck_assert_msg(clean_utf8(out, bad, sizeof bad), "stdout: %s", bad);
    static const char *const files[3] = {"r.json", "r.xml", "r.html"};
    for (int k = 0; k < 3; k++) {
        char *text = slurp(tmp(files[k]));
        ck_assert_msg(text[0], "%s is empty", files[k]);
        ck_assert_msg(clean_utf8(text, bad, sizeof bad), "%s: %s", files[k], bad);
        if (k == 0) {
            char err[300];
            json_object *j = smattn_io_parse_json(text, strlen(text), err, sizeof err);
            ck_assert_msg(j != NULL, "r.json: %s", err);
            json_object_put(j);
        }
        free(text);
    }
    if (access("/usr/bin/xmllint", X_OK) == 0) {
        char cmd[800];
        snprintf(cmd, sizeof cmd, "/usr/bin/xmllint --noout '%s' 2>/dev/null", tmp("r.xml"));
        ck_assert_msg(system(cmd) == 0, "xmllint: r.xml is not well-formed XML");
    }
}

/* A plugin whose name and version are not UTF-8 and whose output holds bytes that are not
 * UTF-8, control characters and "]]>": every report stays valid (the JSON report was not
 * JSON, the JUnit file not XML), the bytes shown as \xHH. */
START_TEST(reports_valid_whatever_the_plugin_says)
{
    outcome o = cli("conform", "--kernel", fixture("badutf8"), "--no-vectors", "--only", "shapes/",
                    "--json", tmp("r.json"), "--junit", tmp("r.xml"), "--html", tmp("r.html"),
                    NULL);
    ck_assert_msg(o.code == 1, "exit %d: %s %s", o.code, o.out, o.err);
    expect_reports_valid(o.out);
    ck_assert_msg(strstr(o.out, "kernel bad\\xff\\xfe<name>\\xc3 1\\x80 ("), "%s", o.out);
    char *json = slurp(tmp("r.json"));
    ck_assert_msg(strstr(json, "\"name\":\"bad\\\\xff\\\\xfe<name>\\\\xc3\""), "%.600s", json);
    free(json);
    outcome_free(&o);
}
END_TEST

/* ---- 1b. a fork bomb, a full process table --------------------------------------------- */

/* Processes (not zombies) whose name (/proc/N/stat's comm) is tag, found by one pass over
 * /proc: killed (the fixture named them so: they are the test's own), and counted. */
static int kill_named(const char *tag)
{
    int found = 0;
    DIR *d = opendir("/proc");
    struct dirent *de;
    while (d && (de = readdir(d))) {
        if (de->d_name[0] < '1' || de->d_name[0] > '9')
            continue;
        char path[300], st[512] = "";
        snprintf(path, sizeof path, "/proc/%s/stat", de->d_name);
        FILE *f = fopen(path, "r");
        if (!f)
            continue;
        size_t got = fread(st, 1, sizeof st - 1, f);
        st[got] = '\0';
        fclose(f);
        const char *lp = strchr(st, '('), *rp = strrchr(st, ')');
        if (!lp || !rp || rp[1] != ' ' || rp[2] == 'Z' || rp[2] == 'X' ||
            (size_t)(rp - lp - 1) != strlen(tag) || strncmp(lp + 1, tag, strlen(tag)))
            continue;
        found++;
        kill((pid_t)atol(de->d_name), SIGKILL);
    }
    if (d)
        closedir(d);
    return found;
}

/* The processes named tag that outlived the run, all killed: passes over /proc until 100
 * in a row (and a quarter of a second) find none, for at most 20 s. One pass can miss a
 * chain whose processes fork their successor and exit; a chain left here would load the
 * host for the rest of its life. */
static int reap_named(const char *tag)
{
    int alive = 0, quiet = 0;
    struct timespec t0, now;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    for (;;) {
        int n = kill_named(tag);
        alive += n;
        quiet = n ? 0 : quiet + 1;
        clock_gettime(CLOCK_MONOTONIC, &now);
        double dt = (double)(now.tv_sec - t0.tv_sec) + 1e-9 * (double)(now.tv_nsec - t0.tv_nsec);
        if ((quiet >= 100 && dt > 0.25) || dt > 20)
            break;
    }
    return alive;
}

/* A kernel that starts a fork bomb on D == 3 (a line of 100 processes, each the child of
 * the one before and in a session of its own, and chains that fork their successor and
 * exit): none of them outlives the case (killing one generation of orphans per round left
 * 36 of the line alive), the case fails on its own error, the run ends in seconds. */
START_TEST(fork_bomb_does_not_outlive_its_case)
{
    char tag[16];
    snprintf(tag, sizeof tag, "sbomb%d", (int)(getpid() % 1000000));
    setenv("SMATTN_FIXTURE_TAG", tag, 1);
    outcome o = cli("conform", "--kernel", fixture("bomb"), "--no-vectors", "--only",
                    "shapes/s3_t7_d3", "--json", tmp("r.json"), NULL);
    unsetenv("SMATTN_FIXTURE_TAG");
    int left = reap_named(tag);
    ck_assert_msg(left == 0, "%d processes of the plugin outlived the run", left);
    ck_assert_msg(o.code == 1, "exit %d: %s %s", o.code, o.out, o.err);
    ck_assert_msg(o.seconds < 15, "took %.1f s", o.seconds);
    json_object *r = load_json(tmp("r.json"));
    ck_assert_str_eq(field(find_case(r, "shapes/s3_t7_d3"), "status"), "fail");
    ck_assert_msg(strstr(field(find_case(r, "shapes/s3_t7_d3"), "reason"), "status 17"), "%s",
                  field(find_case(r, "shapes/s3_t7_d3"), "reason"));
    json_object_put(r);
    outcome_free(&o);
}
END_TEST

/* A directory everyone can reach, for a run as another user (test_cli_run_as): the suite's
 * own directory is private to it. */
static const char *public_dir(void)
{
    const char *pub = tmp("pub");
    if (access(pub, F_OK) != 0)
        ck_assert_int_eq(mkdir(pub, 0777), 0);
    ck_assert_int_eq(chmod(dir, 0711), 0);
    ck_assert_int_eq(chmod(pub, 01777), 0);
    return pub;
}

/* A case the checker cannot start (fork fails: the process table is full for the user,
 * as a plugin's leftovers would make it) fails: before, every such case was a skip "not
 * claimed by the kernel", and a run could end CONFORMING on what ran before. */
START_TEST(case_that_cannot_fork_fails)
{
    const char *pub = public_dir();
    const char *prog = test_copy_public(pub, getenv("SMATTN_CLI"));
    char json[600];
    snprintf(json, sizeof json, "%s/r.json", pub);
    const char *args[] = {"conform", "--no-vectors", "--only", "shapes/", "--json", json, NULL};
    outcome o = test_cli_run_as(dir, prog, args, test_spare_uid(), 1);
    ck_assert_msg(o.code == 1, "exit %d: %s %s", o.code, o.out, o.err);
    json_object *r = load_json(json), *s, *v, *cases;
    ck_assert(json_object_object_get_ex(r, "summary", &s));
    ck_assert(json_object_object_get_ex(s, "skipped", &v));
    ck_assert_msg(json_object_get_int64(v) == 0, "%lld skipped: %s",
                  (long long)json_object_get_int64(v), o.out);
    ck_assert(json_object_object_get_ex(s, "failed", &v));
    ck_assert_int_eq(json_object_get_int64(v), 8);
    ck_assert(json_object_object_get_ex(r, "cases", &cases));
    for (size_t k = 0; k < json_object_array_length(cases); k++) {
        const char *why = field(json_object_array_get_idx(cases, k), "reason");
        ck_assert_msg(strstr(why, "could not run: the checker cannot start the case's process "
                                  "(fork: "),
                      "%s", why);
    }
    ck_assert_ptr_nonnull(strstr(o.out, "verdict: NOT CONFORMING (8 of 8 cases failed"));
    json_object_put(r);
    outcome_free(&o);
}
END_TEST

/* Processes of uid (not zombies) into pids (up to cap), with how many of them are not
 * stopped; the count. */
static int list_uid(unsigned uid, pid_t *pids, int cap, int *running)
{
    int n = 0;
    *running = 0;
    DIR *d = opendir("/proc");
    struct dirent *de;
    while (d && n < cap && (de = readdir(d))) {
        if (de->d_name[0] < '1' || de->d_name[0] > '9')
            continue;
        char path[300], line[256];
        snprintf(path, sizeof path, "/proc/%s/status", de->d_name);
        FILE *f = fopen(path, "r");
        unsigned u = (unsigned)-1;
        char state = 0;
        while (f && fgets(line, sizeof line, f)) {
            if (!strncmp(line, "State:", 6))
                sscanf(line + 6, " %c", &state);
            if (sscanf(line, "Uid: %u", &u) == 1)
                break;
        }
        if (f)
            fclose(f);
        if (u != uid || state == 'Z' || state == 'X' || !state)
            continue;
        *running += state != 'T' && state != 't';
        pids[n++] = (pid_t)atol(de->d_name);
    }
    if (d)
        closedir(d);
    return n;
}

/* Processes of uid (the test's spare user): counted, then stopped until all are (they may
 * be forking), killed, and so on until none is left. */
static int reap_uid(unsigned uid)
{
    static pid_t pids[5000];
    int running, alive = list_uid(uid, pids, 5000, &running);
    for (int round = 0; round < 50; round++) {
        int n = list_uid(uid, pids, 5000, &running);
        if (n == 0)
            break;
        for (int k = 0; k < n; k++)
            kill(pids[k], running ? SIGSTOP : SIGKILL);
        struct timespec ms20 = {0, 20000000};
        nanosleep(&ms20, NULL);
    }
    return alive;
}

/* A real fork bomb (every process forks as fast as it can, each child in a session of its
 * own) under RLIMIT_NPROC 200 for a user of its own: before, it left 200 processes behind,
 * every later case's fork failed and counted as a skip. Now none is left and every other
 * case runs. Needs root (a user held to RLIMIT_NPROC whose processes the test can tell from
 * its own); as another user the fixture refuses to bomb and this only runs the cases. */
START_TEST(fork_bomb_under_a_process_limit)
{
    if (getuid() != 0)
        return;
    const char *pub = public_dir();
    const char *prog = test_copy_public(pub, getenv("SMATTN_CLI"));
    const char *plugin = test_copy_public(pub, fixture("bomb_nproc"));
    char json[600];
    snprintf(json, sizeof json, "%s/r.json", pub);
    unsigned uid = test_spare_uid();
    const char *args[] = {"conform", "--kernel", plugin, "--no-vectors", "--only", "shapes/",
                          "--json", json, NULL};
    outcome o = test_cli_run_as(dir, prog, args, uid, 200);
    int left = reap_uid(uid);
    ck_assert_msg(left == 0, "%d processes of the plugin outlived the run", left);
    ck_assert_msg(o.code == 1, "exit %d: %s %s", o.code, o.out, o.err);
    ck_assert_msg(o.seconds < 20, "took %.1f s", o.seconds);
    json_object *r = load_json(json), *s, *v;
    ck_assert(json_object_object_get_ex(r, "summary", &s));
    ck_assert(json_object_object_get_ex(s, "failed", &v));
    ck_assert_msg(json_object_get_int64(v) == 1, "%s", o.out); /* the bomb's own case */
    ck_assert(json_object_object_get_ex(s, "passed", &v));
    ck_assert_msg(json_object_get_int64(v) >= 6, "%s", o.out);
    ck_assert_ptr_null(strstr(o.out, "could not run"));
    json_object_put(r);
    outcome_free(&o);
}
END_TEST

/* ---- 4. a baseline that tracks what was checked ---------------------------------------- */

static const char *const ONLY = "shapes/,causal/"; /* 14 small cases */

START_TEST(baseline_coverage)
{
    outcome o = cli("conform", "--only", ONLY, "--json", tmp("base.json"), NULL);
    ck_assert_msg(o.code == 0, "builtin: exit %d: %s", o.code, o.out);
    outcome_free(&o);
    /* Half the cases not in the run: each is named, the gate fails. */
    o = cli("conform", "--only", "shapes/", "--baseline", tmp("base.json"), NULL);
    ck_assert_msg(o.code == 1, "cases missing: exit %d: %s", o.code, o.out);
    ck_assert_ptr_nonnull(strstr(
        o.out, "REGRESSION causal/lower_right_s16_t16: passed in the baseline, missing now"));
    outcome_free(&o);
    /* Cut by --time: not run is not a pass. */
    o = cli("conform", "--only", ONLY, "--time", "0.000001", "--baseline", tmp("base.json"), NULL);
    ck_assert_msg(o.code == 1, "not run: exit %d: %s", o.code, o.out);
    ck_assert_ptr_nonnull(strstr(o.out, "passed in the baseline, is skipped now: not run"));
    outcome_free(&o);
    /* A kernel that stopped claiming causal masks: its skips are regressions. */
    o = cli("conform", "--kernel", fixture("good"), "--only", ONLY, "--baseline", tmp("base.json"),
            NULL);
    ck_assert_msg(o.code == 1, "skipped: exit %d: %s", o.code, o.out);
    ck_assert_ptr_nonnull(strstr(o.out, "REGRESSION causal/lower_right_s16_t16: passed in the "
                                        "baseline, is skipped now: uses causal_lower_right, "
                                        "not claimed"));
    /* Every case that ran passed, but exit 1: the verdict says why, not CONFORMING. */
    ck_assert_ptr_nonnull(strstr(o.out, "verdict: NOT CONFORMING (baseline regression; every case "
                                        "passed"));
    ck_assert_ptr_null(strstr(o.out, "verdict: CONFORMING"));
    /* At most 20 REGRESSION lines, then how many more. */
    ck_assert_int_le(count(o.out, "  REGRESSION "), 20);
    ck_assert_msg(count(o.out, "  REGRESSION ") < 20 || strstr(o.out, "  ... and "), "%s", o.out);
    outcome_free(&o);
}
END_TEST

START_TEST(baseline_precision)
{
    outcome o = cli("conform", "--kernel", fixture("good"), "--only", "shapes/", "--json",
                    tmp("base.json"), NULL);
    ck_assert_msg(o.code == 0, "good: exit %d: %s", o.code, o.out);
    outcome_free(&o);
    /* The same kernel declaring u_score = u_acc = 2^-10 passes more, and regresses. */
    o = cli("conform", "--kernel", fixture("loose"), "--only", "shapes/", "--baseline",
            tmp("base.json"), NULL);
    ck_assert_msg(o.code == 1, "looser model: exit %d: %s", o.code, o.out);
    ck_assert_ptr_nonnull(strstr(o.out, "REGRESSION precision model: looser than the baseline's "
                                        "in u_score 0.000977 > 5.96e-08, u_acc 0.000977 > "
                                        "5.96e-08"));
    outcome_free(&o);
    /* A case's own model (smattn_plugin_precision) tighter in the baseline: that case. */
    o = cli("conform", "--only", "shapes/", "--json", tmp("b2.json"), NULL);
    ck_assert_int_eq(o.code, 0);
    outcome_free(&o);
    json_object *r = load_json(tmp("b2.json")), *c = find_case(r, "shapes/s3_t7_d3"), *pm;
    ck_assert_ptr_nonnull(c);
    ck_assert(json_object_object_get_ex(c, "precision", &pm));
    json_object_object_add(pm, "u_acc", json_object_new_double(0x1p-40));
    ck_assert_int_eq(json_object_to_file(tmp("b3.json"), r), 0);
    json_object_put(r);
    o = cli("conform", "--only", "shapes/", "--baseline", tmp("b3.json"), NULL);
    ck_assert_msg(o.code == 1, "a case's model: exit %d: %s", o.code, o.out);
    ck_assert_msg(strstr(o.out, "REGRESSION shapes/s3_t7_d3: precision model looser than the "
                                "baseline's in u_acc"),
                  "%s", o.out);
    outcome_free(&o);
    /* A baseline without the declared model (older, or edited): refused, not a gate off. */
    r = load_json(tmp("b2.json"));
    json_object_object_del(r, "precision");
    ck_assert_int_eq(json_object_to_file(tmp("b4.json"), r), 0);
    json_object_put(r);
    o = cli("conform", "--kernel", fixture("loose"), "--only", "shapes/", "--baseline",
            tmp("b4.json"), NULL);
    ck_assert_msg(o.code == 2, "no model: exit %d: %s", o.code, o.out);
    ck_assert_msg(strstr(o.err, "b4.json has no valid precision model (written by an older "
                                "smattn, or edited?): regenerate it"),
                  "%s", o.err);
    ck_assert_str_eq(o.out, ""); /* refused before the run */
    outcome_free(&o);
}
END_TEST

START_TEST(require_precision)
{
    outcome o = cli("conform", "--only", "shapes/", "--require-precision", "f32", NULL);
    ck_assert_msg(o.code == 0, "builtin under f32: exit %d: %s", o.code, o.out);
    ck_assert_ptr_nonnull(strstr(o.out, "--require-precision f32: the model is within it"));
    outcome_free(&o);
    static const struct {
        const char *fmt;
        int code;
    } want[3] = {{"f32", 1}, {"f16", 1}, {"bf16", 0}}; /* 2^-10 against 2^-24, 2^-11, 2^-8 */
    for (int k = 0; k < 3; k++) {
        o = cli("conform", "--kernel", fixture("loose"), "--only", "shapes/", "--require-precision",
                want[k].fmt, NULL);
        ck_assert_msg(o.code == want[k].code, "%s: exit %d: %s", want[k].fmt, o.code, o.out);
        if (want[k].code)
            ck_assert_ptr_nonnull(strstr(o.out, "PRECISION the declared model is looser than f"));
        outcome_free(&o);
    }
    /* Every field of the arithmetic: exp_ulps and tiny too (flushing to zero allowed). */
    static const struct {
        const char *mode, *needle;
    } field_of[5] = {{"wide_exp", "exp_ulps 1e+05 > 4"},
                     {"big_tiny", "tiny 1e-30 > 1.18e-38 (the format's smallest normal)"},
                     {"ftz", NULL},
                     {"huge_blocks", "blocks 1000000 > T + 3"},
                     {"huge_acc", "acc_len 1000000 > 2 (T + 2)"}};
    for (int k = 0; k < 5; k++) {
        o = cli("conform", "--kernel", fixture(field_of[k].mode), "--only", "shapes/",
                "--require-precision", "f32", NULL);
        ck_assert_msg(o.code == (field_of[k].needle ? 1 : 0), "%s: exit %d: %s", field_of[k].mode,
                      o.code, o.out);
        if (field_of[k].needle)
            ck_assert_msg(strstr(o.out, field_of[k].needle), "%s: %s", field_of[k].mode, o.out);
        outcome_free(&o);
    }
    o = cli("conform", "--require-precision", "f64", NULL);
    ck_assert_int_eq(o.code, 2);
    outcome_free(&o);
}
END_TEST

START_TEST(reports_state_the_model)
{
    outcome o = cli("conform", "--kernel", fixture("good"), "--only", ONLY, "--json", tmp("r.json"),
                    "--junit", tmp("r.xml"), "--html", tmp("r.html"), NULL);
    ck_assert_msg(o.code == 0, "exit %d: %s", o.code, o.out);
    ck_assert_ptr_nonnull(strstr(o.out, "precision model: u_score 5.96e-08, u_acc 5.96e-08"));
    ck_assert_ptr_nonnull(strstr(o.out, "conventions: empty rows zero, empty LSE neg_inf; claims "
                                        "lse, p"));
    /* Nothing of causal ran: "-", not a perfect 0. */
    ck_assert_msg(strstr(o.out, "  causal            6      0      0      6               -"
                                "            -"),
                  "%s", o.out);
    json_object *r = load_json(tmp("r.json")), *v, *cats, *cat;
    ck_assert(json_object_object_get_ex(r, "precision", &v));
    ck_assert(json_object_object_get_ex(v, "u_score", &v));
    ck_assert(json_object_get_double(v) == 0x1p-24);
    ck_assert_ptr_nonnull(strstr(field(r, "conventions"), "empty rows zero"));
    ck_assert(json_object_object_get_ex(r, "categories", &cats));
    ck_assert(json_object_object_get_ex(cats, "causal", &cat));
    ck_assert(json_object_object_get_ex(cat, "max_ratio", &v) && v == NULL);
    json_object_put(r);
    char *xml = slurp(tmp("r.xml"));
    ck_assert_ptr_nonnull(strstr(xml, "<property name=\"precision\" value=\"u_score 5.96e-08"));
    ck_assert_ptr_nonnull(strstr(xml, "<property name=\"conventions\" value=\"empty rows zero"));
    free(xml);
    char *html = slurp(tmp("r.html"));
    ck_assert_ptr_nonnull(strstr(html, "precision model: u_score 5.96e-08"));
    ck_assert_ptr_nonnull(strstr(html, "conventions: empty rows zero"));
    ck_assert_ptr_nonnull(strstr(html, "<td>6</td><td>-</td><td>-</td>"));
    free(html);
    outcome_free(&o);
}
END_TEST

/* The text report's smaller facts: every capability named (unknown bits refused at load),
 * "-" for a category none of whose cases was judged, rows out of contract per case, at most
 * 20 REGRESSION lines. */
START_TEST(report_details)
{
    outcome o = cli("conform", "--kernel", fixture("sinkmax"), "--only", "shapes/", NULL);
    ck_assert_msg(o.code == 0, "sinkmax: exit %d: %s %s", o.code, o.out, o.err);
    ck_assert_msg(strstr(o.out, "claims lse, p, sink_in_max\n"), "%s", o.out);
    outcome_free(&o);
    o = cli("conform", "--kernel", fixture("unknown_cap"), "--only", "shapes/", NULL);
    ck_assert_msg(o.code == 2, "unknown_cap: exit %d: %s", o.code, o.out);
    ck_assert_msg(strstr(o.err, "cannot be loaded: ") &&
                      strstr(o.err, "unknown capability bits 0x80000000"),
                  "%s", o.err);
    outcome_free(&o);
    /* Every case of shapes hung or was not run: nothing judged, "-" not 0. */
    o = cli("conform", "--kernel", fixture("hang_all"), "--only", "shapes/", "--case-timeout",
            "0.1", "--json", tmp("h.json"), NULL);
    ck_assert_int_eq(o.code, 1);
    ck_assert_msg(strstr(o.out, "  shapes            8      0      3      5               -"
                                "            -"),
                  "%s", o.out);
    ck_assert_msg(strstr(o.out, "5 not run (the --time budget ran out, or the run stopped)"), "%s",
                  o.out);
    outcome_free(&o);
    json_object *r = load_json(tmp("h.json")), *cats, *cat, *v;
    ck_assert(json_object_object_get_ex(r, "categories", &cats));
    ck_assert(json_object_object_get_ex(cats, "shapes", &cat));
    ck_assert(json_object_object_get_ex(cat, "max_ratio", &v) && v == NULL);
    json_object_put(r);
    o = cli("conform", "--only", "sinks/large_sink_decode", NULL);
    ck_assert_int_eq(o.code, 0);
    ck_assert_msg(strstr(o.out, "out of contract (SPEC 6.8, not judged by size; O in the hull of "
                                "V, LSE not NaN, P in [0, 1]): 4 rows in 1 cases: "
                                "sinks/large_sink_decode (4)"),
                  "%s", o.out);
    outcome_free(&o);
    /* 100+ regressions: 20 lines, then how many more. */
    o = cli("conform", "--json", tmp("q.json"), NULL);
    ck_assert_int_eq(o.code, 0);
    outcome_free(&o);
    o = cli("conform", "--kernel", fixture("good"), "--baseline", tmp("q.json"), NULL);
    ck_assert_int_eq(o.code, 1);
    ck_assert_int_eq(count(o.out, "  REGRESSION "), 20);
    ck_assert_msg(strstr(o.out, "  ... and ") && strstr(o.out, " more (the JSON report lists them "
                                                               "all)"),
                  "%s", o.out);
    outcome_free(&o);
}
END_TEST

/* The baseline is read once, before any plugin code runs: a plugin that puts another
 * baseline in its place (here one written with its own looser model) does not pass. */
START_TEST(baseline_read_once_before_plugin_code)
{
    outcome o = cli("conform", "--kernel", fixture("good"), "--only", "shapes/", "--json",
                    tmp("base.json"), NULL);
    ck_assert_msg(o.code == 0, "good: exit %d: %s", o.code, o.out);
    outcome_free(&o);
    o = cli("conform", "--kernel", fixture("loose"), "--only", "shapes/", "--json",
            tmp("forged.json"), NULL);
    ck_assert_msg(o.code == 0, "loose: exit %d: %s", o.code, o.out);
    outcome_free(&o);
    setenv("SMATTN_FIXTURE_RENAME_FROM", tmp("forged.json"), 1);
    setenv("SMATTN_FIXTURE_RENAME_TO", tmp("base.json"), 1);
    o = cli("conform", "--kernel", fixture("loose"), "--only", "shapes/", "--baseline",
            tmp("base.json"), NULL);
    unsetenv("SMATTN_FIXTURE_RENAME_FROM");
    unsetenv("SMATTN_FIXTURE_RENAME_TO");
    ck_assert_msg(access(tmp("forged.json"), F_OK) != 0, "the plugin did not rename");
    ck_assert_msg(o.code == 1, "exit %d: %s", o.code, o.out);
    ck_assert_msg(strstr(o.out, "REGRESSION precision model: looser than the baseline's"), "%s",
                  o.out);
    outcome_free(&o);
}
END_TEST

/* Exit 2 within seconds, one stderr line holding needle, nothing run. */
static void expect_refused(const char *const *args, const char *needle)
{
    const char *full[20];
    int n = 0;
    for (; args[n] && n < 19; n++)
        full[n] = args[n];
    full[n] = NULL;
    outcome o = test_cli_run_as(dir, NULL, full, (unsigned)getuid(), 0); /* alarm backstop */
    ck_assert_msg(o.code == 2, "%s: exit %d: %.300s %s", needle, o.code, o.out, o.err);
    ck_assert_msg(strstr(o.err, needle), "stderr '%s' lacks '%s'", o.err, needle);
    ck_assert_msg(count(o.err, "\n") == 1, "not one line: %s", o.err);
    ck_assert_str_eq(o.out, "");
    ck_assert_msg(o.seconds < 10, "%s: took %.1f s", needle, o.seconds);
    outcome_free(&o);
}

/* Every input of the gate where a regular file is meant: a FIFO (the run waited for a
 * writer or a reader forever), a device (/dev/zero as a baseline grew without bound), a
 * directory; a baseline in lenient JSON (NaN as a ratio turned the ratio gate off), one
 * whose ratio is not a number; two reports in one file (one overwrote the other). */
START_TEST(gate_inputs_are_regular_files)
{
    ck_assert_int_eq(mkfifo(tmp("fifo"), 0600), 0);
    const char *sh = "shapes/s1_t1_d1";
    expect_refused((const char *[]){"conform", "--only", sh, "--baseline", tmp("fifo"), NULL},
                   "baseline");
    expect_refused((const char *[]){"conform", "--only", sh, "--baseline", tmp("fifo"), NULL},
                   "not a regular file");
    expect_refused((const char *[]){"conform", "--only", sh, "--json", tmp("fifo"), NULL},
                   "--json");
    expect_refused((const char *[]){"conform", "--only", sh, "--junit", tmp("fifo"), NULL},
                   "not a regular file");
    expect_refused((const char *[]){"conform", "--only", sh, "--html", "/dev/null", NULL},
                   "not a regular file");
    expect_refused((const char *[]){"conform", "--only", sh, "--baseline", "/dev/zero", NULL},
                   "not a regular file");
    expect_refused((const char *[]){"conform", "--only", sh, "--baseline", dir, NULL},
                   "not a regular file");
    /* A report of ours, then the same with NaN, Infinity and a string as a ratio. */
    outcome o = cli("conform", "--only", "shapes/", "--json", tmp("base.json"), NULL);
    ck_assert_int_eq(o.code, 0);
    outcome_free(&o);
    char *text = slurp(tmp("base.json"));
    static const char *const bad[3] = {"NaN", "Infinity", "\"0.5\""};
    for (int k = 0; k < 3; k++) {
        char *at = strstr(text, "\"cases\":["); /* a case's ratio, not a category's */
        ck_assert_ptr_nonnull(at);
        at = strstr(at, "\"max_ratio\":");
        ck_assert_ptr_nonnull(at);
        at += strlen("\"max_ratio\":");
        size_t keep = strcspn(at, ",\n");
        FILE *f = fopen(tmp("bad.json"), "w");
        ck_assert_ptr_nonnull(f);
        fprintf(f, "%.*s%s%s", (int)(at - text), text, bad[k], at + keep);
        fclose(f);
        expect_refused((const char *[]){"conform", "--only", "shapes/", "--baseline",
                                        tmp("bad.json"), NULL},
                       k < 2 ? "baseline" : "max_ratio");
    }
    free(text);
    /* Two reports, one file (also spelled two ways, and one that does not exist yet). */
    char other[600];
    snprintf(other, sizeof other, "%s/./r.xml", dir);
    expect_refused((const char *[]){"conform", "--only", sh, "--json", tmp("r.xml"), "--junit",
                                    other, NULL},
                   "--json and --junit name the same file");
    ck_assert_msg(access(tmp("r.xml"), F_OK) != 0, "the check left r.xml");
    expect_refused((const char *[]){"check", tmp("."), "--junit", tmp("base.json"), "--html",
                                    tmp("base.json"), NULL},
                   "--junit and --html name the same file");
}
END_TEST

/* A declared model with NaN (beside a precision hook, which is what each case is judged
 * by) is refused at load: it passed --require-precision, every comparison with NaN false. */
START_TEST(declared_model_with_nan_refused)
{
    outcome o = cli("conform", "--kernel", fixture("nan_model"), "--only", "shapes/",
                    "--require-precision", "f32", NULL);
    ck_assert_msg(o.code == 2, "exit %d: %s", o.code, o.out);
    ck_assert_msg(strstr(o.err, "cannot be loaded: ") &&
                      strstr(o.err, "info->precision: precision model out of range"),
                  "%s", o.err);
    ck_assert_ptr_null(strstr(o.out, "the model is within it"));
    outcome_free(&o);
}
END_TEST

/* Time limits: any finite number of seconds > 0 (1e308 was refused as "want > 0"). */
START_TEST(huge_time_limits_accepted)
{
    outcome o = cli("conform", "--only", "shapes/s1_t1_d1", "--case-timeout", "1e308", "--time",
                    "1e300", "--describe-timeout", "1e10", NULL);
    ck_assert_msg(o.code == 0, "exit %d: %s %s", o.code, o.out, o.err);
    outcome_free(&o);
    o = cli("conform", "--only", "shapes/s1_t1_d1", "--case-timeout", "inf", NULL);
    ck_assert_int_eq(o.code, 2);
    ck_assert_ptr_nonnull(strstr(o.err, "want a finite number of seconds > 0"));
    outcome_free(&o);
    o = cli("conform", "--only", "shapes/s1_t1_d1", "--case-timeout", "1e-400", NULL);
    ck_assert_int_eq(o.code, 2);
    outcome_free(&o);
}
END_TEST

START_TEST(paths_checked_before_the_run)
{
    outcome o = cli("conform", "--baseline", tmp("no_such.json"), NULL);
    ck_assert_msg(o.code == 2, "exit %d", o.code);
    ck_assert_ptr_nonnull(strstr(o.err, "no_such.json: no such file"));
    ck_assert_str_eq(o.out, ""); /* nothing ran */
    outcome_free(&o);
    o = cli("conform", "--json", tmp("no_dir/r.json"), NULL);
    ck_assert_msg(o.code == 2, "exit %d", o.code);
    ck_assert_ptr_nonnull(strstr(o.err, "--json"));
    ck_assert_ptr_nonnull(strstr(o.err, "cannot write"));
    ck_assert_str_eq(o.out, "");
    outcome_free(&o);
    o = cli("check", tmp("."), "--baseline", tmp("no_such.json"), NULL);
    ck_assert_int_eq(o.code, 2);
    ck_assert_ptr_nonnull(strstr(o.err, "no such file"));
    outcome_free(&o);
}
END_TEST

/* A report path names a file that is replaced only when it is a report (or empty): a case's
 * q.npy given as --json by mistake is kept, and refused before the run. A report is written
 * beside its file and renamed over it: a write that fails (here a file-size limit, as a
 * full disk) leaves the file as it was, with no temporary beside it; `report merge` may
 * name one of its inputs as OUT. A symbolic link stays a link to the new report. */
START_TEST(reports_replace_only_reports_and_whole)
{
    static const char npy[] = "\x93NUMPY\x01\x00v\x00{'descr': '<f4', 'fortran_order': False, "
                              "'shape': (1,), }";
    FILE *f = fopen(tmp("q.npy"), "wb");
    ck_assert_ptr_nonnull(f);
    fwrite(npy, 1, sizeof npy - 1, f);
    fclose(f);
    outcome o = cli("conform", "--only", "shapes/s1_t1_d1", "--json", tmp("q.npy"), NULL);
    ck_assert_msg(o.code == 2, "exit %d: %s %s", o.code, o.out, o.err);
    ck_assert_msg(strstr(o.err, "not a report of smattn"), "%s", o.err);
    ck_assert_str_eq(o.out, ""); /* refused before the run */
    outcome_free(&o);
    char *kept = slurp(tmp("q.npy"));
    ck_assert_msg(!memcmp(kept, npy, sizeof npy - 1), "q.npy was overwritten");
    free(kept);
    /* a report of many cases, larger than the limit below */
    o = cli("conform", "--only", "shapes/,causal/", "--json", tmp("r.json"), NULL);
    ck_assert_msg(o.code == 0, "exit %d: %s", o.code, o.out);
    outcome_free(&o);
    char *before = slurp(tmp("r.json"));
    ck_assert_uint_gt(strlen(before), 8192);
    struct rlimit lim = {4096, 4096};
    ck_assert_int_eq(setrlimit(RLIMIT_FSIZE, &lim), 0);
    o = cli("report", "merge", tmp("r.json"), tmp("r.json"), NULL);
    ck_assert_msg(o.code == 2, "exit %d: %s %s", o.code, o.out, o.err);
    ck_assert_msg(strstr(o.err, "r.json: cannot write"), "%s", o.err);
    outcome_free(&o);
    char *after = slurp(tmp("r.json"));
    ck_assert_msg(!strcmp(before, after), "r.json lost: %zu bytes left of %zu", strlen(after),
                  strlen(before));
    free(after);
    DIR *d = opendir(dir);
    ck_assert_ptr_nonnull(d);
    for (struct dirent *e; (e = readdir(d));)
        ck_assert_msg(strncmp(e->d_name, ".r.json.", 8), "temporary %s left", e->d_name);
    closedir(d);
    lim.rlim_cur = lim.rlim_max = RLIM_INFINITY;
    setrlimit(RLIMIT_FSIZE, &lim); /* raising it back may be refused: the test ends here */
    free(before);
}
END_TEST

/* A report written through a symbolic link replaces the link's target; the link stays. */
START_TEST(report_through_a_link_keeps_the_link)
{
    outcome o = cli("conform", "--only", "shapes/s1_t1_d1", "--json", tmp("t.json"), NULL);
    ck_assert_int_eq(o.code, 0);
    outcome_free(&o);
    ck_assert_int_eq(symlink("t.json", tmp("l.json")), 0);
    o = cli("conform", "--only", "shapes/s3_t7_d3", "--json", tmp("l.json"), NULL);
    ck_assert_msg(o.code == 0, "exit %d: %s %s", o.code, o.out, o.err);
    outcome_free(&o);
    struct stat st;
    ck_assert_int_eq(lstat(tmp("l.json"), &st), 0);
    ck_assert(S_ISLNK(st.st_mode));
    char *t = slurp(tmp("t.json"));
    ck_assert_msg(strstr(t, "s3_t7_d3"), "the target is not the new report");
    free(t);
}
END_TEST

START_TEST(html_failures_first_and_marked)
{
    outcome o = cli("conform", "--kernel", built("mutants/causal_off_by_one.so"), "--only",
                    "golden/causal,golden/s", "--html", tmp("r.html"), NULL);
    ck_assert_int_eq(o.code, 1);
    char *html = slurp(tmp("r.html"));
    const char *cases = strstr(html, "<h2>Cases</h2>");
    ck_assert_ptr_nonnull(cases);
    const char *fail = strstr(cases, "class=\"fail\""), *pass = strstr(cases, "class=\"pass\"");
    ck_assert_msg(fail && pass && fail < pass, "failures are not listed first");
    ck_assert_ptr_nonnull(strstr(html, "class=\"capped\""));   /* a finite ratio above the plot */
    ck_assert_ptr_nonnull(strstr(html, "class=\"infinite\"")); /* and an infinite one */
    free(html);
    outcome_free(&o);
}
END_TEST

/* ---- 5. the golden vectors and the file route ------------------------------------------ */

/* "golden vectors: N ran from DIR": the vectors were found and most of them ran (a kernel
 * may skip a vector whose values its dtypes cannot hold, e.g. subnormal_out in binary32). */
static void assert_vectors_ran(const char *out)
{
    const char *g = strstr(out, "golden vectors: ");
    ck_assert_msg(g != NULL, "no 'golden vectors:' line in: %s", out);
    long nv = strtol(g + strlen("golden vectors: "), NULL, 10);
    ck_assert_msg(nv >= 45 && nv <= 50, "golden vectors: %ld ran", nv); /* of 50 (and 5 merges) */
    ck_assert_msg(strncmp(strchr(g + strlen("golden vectors: "), ' '), " ran from", 9) == 0,
                  "%.80s", g);
}

START_TEST(vectors_found_or_an_error)
{
    /* The CLI moved out of the source tree, SMATTN_ROOT unset: exit 2 unless --no-vectors. */
    const char *root = getenv("SMATTN_ROOT");
    ck_assert_msg(root != NULL, "SMATTN_ROOT is not set");
    char vectors[600];
    snprintf(vectors, sizeof vectors, "%s/spec/vectors", root);
    ck_assert_int_eq(mkdir(tmp("bin"), 0700), 0);
    char cmd[1400];
    snprintf(cmd, sizeof cmd, "cp '%s' '%s'", getenv("SMATTN_CLI"), tmp("bin/smattn"));
    ck_assert_int_eq(system(cmd), 0);
    char real_cli[600];
    snprintf(real_cli, sizeof real_cli, "%s", getenv("SMATTN_CLI"));
    setenv("SMATTN_CLI", tmp("bin/smattn"), 1);
    unsetenv("SMATTN_ROOT");
    outcome o = cli("conform", "--only", "golden/", NULL);
    ck_assert_msg(o.code == 2, "exit %d: %s", o.code, o.out);
    ck_assert_ptr_nonnull(strstr(o.err, "golden vectors (spec/vectors) are not found"));
    outcome_free(&o);
    o = cli("conform", "--only", "golden/,causal/", "--no-vectors", NULL);
    ck_assert_msg(o.code == 0, "--no-vectors: exit %d: %s %s", o.code, o.out, o.err);
    ck_assert_ptr_nonnull(strstr(o.out, "golden vectors: 0 ran (none: --no-vectors)"));
    outcome_free(&o);
    o = cli("conform", "--only", "golden/", "--vectors", vectors, NULL);
    ck_assert_msg(o.code == 0, "--vectors: exit %d: %s %s", o.code, o.out, o.err);
    assert_vectors_ran(o.out);
    outcome_free(&o);
    /* An installed tree: bin/smattn finds share/smattn/vectors. */
    ck_assert_int_eq(mkdir(tmp("share"), 0700), 0);
    ck_assert_int_eq(mkdir(tmp("share/smattn"), 0700), 0);
    ck_assert_int_eq(symlink(vectors, tmp("share/smattn/vectors")), 0);
    o = cli("conform", "--only", "golden/", "--json", tmp("r.json"), NULL);
    ck_assert_msg(o.code == 0, "installed: exit %d: %s %s", o.code, o.out, o.err);
    assert_vectors_ran(o.out);
    json_object *r = load_json(tmp("r.json")), *v, *n;
    ck_assert(json_object_object_get_ex(r, "vectors", &v));
    ck_assert(json_object_object_get_ex(v, "ran", &n));
    ck_assert_msg(json_object_get_int64(n) >= 45 && json_object_get_int64(n) <= 50, "ran %lld",
                  (long long)json_object_get_int64(n));
    json_object_put(r);
    outcome_free(&o);
    setenv("SMATTN_CLI", real_cli, 1);
    setenv("SMATTN_ROOT", root, 1);
}
END_TEST

/* tmp/sub holding two case directories of a gen run, answered by the oracle. */
static void two_cases(void)
{
    outcome o = cli("gen", tmp("g"), NULL);
    ck_assert_msg(o.code == 0, "gen: exit %d: %s", o.code, o.err);
    outcome_free(&o);
    ck_assert_int_eq(mkdir(tmp("sub"), 0700), 0);
    const char *names[2] = {"causal-lower_right_s16_t16", "shapes-s1_t1_d1"};
    for (int k = 0; k < 2; k++) {
        char from[600], to[600];
        snprintf(from, sizeof from, "%s/g/%s", dir, names[k]);
        snprintf(to, sizeof to, "%s/sub/%s", dir, names[k]);
        ck_assert_int_eq(rename(from, to), 0);
        o = cli("ref", to, to, "--dtype", "f32", NULL);
        ck_assert_msg(o.code == 0, "ref: exit %d: %s", o.code, o.err);
        outcome_free(&o);
        /* the oracle stands for a kernel whose outputs the tests then change: like a
         * kernel's own writer, it leaves no set marker (SPEC 7.2) */
        char marker[700];
        snprintf(marker, sizeof marker, "%s/.smattn-set", to);
        ck_assert_int_eq(unlink(marker), 0);
    }
}

/* A float32 .npy of any rank (smattn_npy_write stops at rank 4), zeros. */
static int write_f32_npy(const char *path, int rank, const int64_t *shape, size_t n)
{
    char hdr[128];
    int len = snprintf(hdr, sizeof hdr, "{'descr': '<f4', 'fortran_order': False, 'shape': (");
    for (int r = 0; r < rank; r++)
        len += snprintf(hdr + len, sizeof hdr - (size_t)len, "%lld, ", (long long)shape[r]);
    len += snprintf(hdr + len, sizeof hdr - (size_t)len, "), }");
    while ((10 + len + 1) % 64)
        hdr[len++] = ' ';
    hdr[len++] = '\n';
    FILE *f = fopen(path, "wb");
    if (!f)
        return -1;
    unsigned char magic[10] = {0x93, 'N', 'U', 'M', 'P', 'Y', 1, 0, (unsigned char)(len & 0xff),
                               (unsigned char)(len >> 8)};
    float zero = 0;
    int ok = fwrite(magic, 1, 10, f) == 10 && fwrite(hdr, 1, (size_t)len, f) == (size_t)len;
    for (size_t k = 0; ok && k < n; k++)
        ok = fwrite(&zero, 4, 1, f) == 1;
    return fclose(f) == 0 && ok ? 0 : -1;
}

START_TEST(check_skip_marker_and_shapes)
{
    two_cases();
    outcome o = cli("check", tmp("sub"), NULL);
    ck_assert_msg(o.code == 0, "answered: exit %d: %s", o.code, o.out);
    ck_assert_msg(!strncmp(o.out, "smattn check: judging the outputs saved in ", 43), "%s", o.out);
    outcome_free(&o);
    /* A skip file (its line the reason), no o.npy: skipped, not failed. */
    ck_assert_int_eq(unlink(tmp("sub/shapes-s1_t1_d1/o.npy")), 0);
    FILE *f = fopen(tmp("sub/shapes-s1_t1_d1/skip"), "w");
    ck_assert_ptr_nonnull(f);
    fputs("head dim 1 is not supported\n", f);
    fclose(f);
    o = cli("check", tmp("sub"), "--json", tmp("c.json"), NULL);
    ck_assert_msg(o.code == 0, "skip marker: exit %d: %s", o.code, o.out);
    ck_assert_msg(strstr(o.out, "skipped: 1 by the kernel's skip file\n"), "%s", o.out);
    json_object *r = load_json(tmp("c.json"));
    json_object *c = find_case(r, "shapes-s1_t1_d1");
    ck_assert_str_eq(field(c, "status"), "skip");
    ck_assert_ptr_nonnull(strstr(field(c, "reason"), "head dim 1 is not supported"));
    json_object_put(r);
    outcome_free(&o);
    /* --skip PREFIXES. */
    o = cli("check", tmp("sub"), "--skip", "causal-", "--json", tmp("c.json"), NULL);
    ck_assert_int_eq(o.code, 1); /* nothing ran */
    ck_assert_msg(strstr(o.out, "skipped: 1 by the kernel's skip file, 1 by --skip\n"), "%s",
                  o.out);
    r = load_json(tmp("c.json"));
    ck_assert_str_eq(field(find_case(r, "causal-lower_right_s16_t16"), "reason"),
                     "skipped by --skip");
    json_object_put(r);
    outcome_free(&o);
    /* A wrong shape names the one it got and the one it wants. */
    int64_t shape[3] = {1, 2, 3};
    float zeros[6] = {0};
    char err[200];
    ck_assert_int_eq(smattn_npy_write(tmp("sub/causal-lower_right_s16_t16/o.npy"), SMATTN_NPY_F32,
                                      3, shape, zeros, err, sizeof err),
                     0);
    o = cli("check", tmp("sub"), "--json", tmp("c.json"), NULL);
    ck_assert_int_eq(o.code, 1);
    r = load_json(tmp("c.json"));
    const char *why = field(find_case(r, "causal-lower_right_s16_t16"), "reason");
    ck_assert_msg(strstr(why, "o.npy: got shape [1,2,3] (f32), want [B,S,Hq,Dv] = ["), "%s", why);
    json_object_put(r);
    outcome_free(&o);
    /* A rank the reader refuses (5) names the wanted shape too. */
    int64_t shape5[5] = {1, 1, 1, 2, 3};
    ck_assert_int_eq(write_f32_npy(tmp("sub/causal-lower_right_s16_t16/o.npy"), 5, shape5, 6), 0);
    o = cli("check", tmp("sub"), "--json", tmp("c.json"), NULL);
    ck_assert_int_eq(o.code, 1);
    r = load_json(tmp("c.json"));
    why = field(find_case(r, "causal-lower_right_s16_t16"), "reason");
    ck_assert_msg(strstr(why, "o.npy: ") && strstr(why, "want [B,S,Hq,Dv] = ["), "%s", why);
    json_object_put(r);
    outcome_free(&o);
}
END_TEST

/* `smattn check DIR` with stderr on a pseudo-terminal: what it wrote there. */
static char *check_on_a_terminal(const char *path)
{
    int m = posix_openpt(O_RDWR | O_NOCTTY);
    ck_assert_int_ge(m, 0);
    ck_assert_int_eq(grantpt(m), 0);
    ck_assert_int_eq(unlockpt(m), 0);
    const char *slave = ptsname(m);
    ck_assert_ptr_nonnull(slave);
    const char *argv[] = {getenv("SMATTN_CLI"), "check", path, NULL};
    posix_spawn_file_actions_t fa;
    posix_spawn_file_actions_init(&fa);
    posix_spawn_file_actions_addopen(&fa, 1, tmp("stdout.txt"), O_WRONLY | O_CREAT | O_TRUNC, 0600);
    posix_spawn_file_actions_addopen(&fa, 2, slave, O_RDWR | O_NOCTTY, 0);
    pid_t pid;
    ck_assert_int_eq(posix_spawn(&pid, argv[0], &fa, NULL, (char *const *)(uintptr_t)argv, environ),
                     0);
    posix_spawn_file_actions_destroy(&fa);
    size_t cap = 1 << 16, n = 0;
    char *text = calloc(1, cap + 1);
    for (;;) { /* until the last holder of the terminal's other end has gone (EIO) */
        struct pollfd pf = {m, POLLIN, 0};
        if (poll(&pf, 1, 20000) <= 0)
            break;
        ssize_t r = read(m, text + n, cap - n);
        if (r <= 0)
            break;
        n += (size_t)r;
    }
    int ws;
    ck_assert_int_eq(waitpid(pid, &ws, 0), pid);
    close(m);
    return text;
}

START_TEST(check_progress_bar_on_a_terminal)
{
    two_cases();
    char *term = check_on_a_terminal(tmp("sub"));
    ck_assert_msg(strstr(term, "] 1/2 causal-lower_right_s16_t16") ||
                      strstr(term, "] 1/2 shapes-s1_t1_d1"),
                  "no progress bar on the terminal: '%s'", term);
    /* with the time left once a case has finished */
    ck_assert_msg(strstr(term, " s left)"), "no time left on the terminal: '%s'", term);
    free(term);
    outcome o = cli("check", tmp("sub"), NULL); /* stderr a file: no bar */
    ck_assert_ptr_null(strstr(o.err, "1/2"));
    outcome_free(&o);
}
END_TEST

START_TEST(gen_refuses_a_used_directory)
{
    outcome o = cli("gen", "--no-vectors", tmp("g"), NULL);
    ck_assert_int_eq(o.code, 0);
    outcome_free(&o);
    o = cli("gen", "--no-vectors", tmp("g"), NULL);
    ck_assert_msg(o.code == 2, "exit %d", o.code);
    ck_assert_ptr_nonnull(strstr(o.err, "is not empty"));
    ck_assert_ptr_nonnull(strstr(o.err, "--force"));
    outcome_free(&o);
    /* Stale files of an earlier run are cleared by --force. */
    FILE *f = fopen(tmp("g/shapes-s1_t1_d1/skip"), "w");
    ck_assert_ptr_nonnull(f);
    fclose(f);
    f = fopen(tmp("g/shapes-s1_t1_d1/o.npy"), "w");
    ck_assert_ptr_nonnull(f);
    fclose(f);
    o = cli("gen", "--no-vectors", "--force", tmp("g"), NULL);
    ck_assert_msg(o.code == 0, "--force: exit %d: %s", o.code, o.err);
    ck_assert_int_ne(access(tmp("g/shapes-s1_t1_d1/skip"), F_OK), 0);
    ck_assert_int_ne(access(tmp("g/shapes-s1_t1_d1/o.npy"), F_OK), 0);
    ck_assert_int_eq(access(tmp("g/shapes-s1_t1_d1/q.npy"), F_OK), 0);
    outcome_free(&o);
}
END_TEST

/* Absent means no directory entry at all: an lse.npy or a skip marker that is a dangling
 * link, a FIFO or a directory fails the case (an lse.npy like that went unjudged and the
 * run said CONFORMING; a FIFO skip marker was taken as absent). */
START_TEST(check_unreadable_files_fail)
{
    two_cases();
    const char *c = "sub/causal-lower_right_s16_t16";
    char lse[600], skip[600];
    snprintf(lse, sizeof lse, "%s/%s/lse.npy", dir, c);
    snprintf(skip, sizeof skip, "%s/%s/skip", dir, c);
    ck_assert_int_eq(unlink(lse), 0);
    for (int kind = 0; kind < 6; kind++) {
        const char *path = kind < 3 ? lse : skip;
        if (kind % 3 == 0)
            ck_assert_int_eq(symlink(tmp("nowhere"), path), 0);
        else if (kind % 3 == 1)
            ck_assert_int_eq(mkfifo(path, 0600), 0);
        else
            ck_assert_int_eq(mkdir(path, 0700), 0);
        outcome o = test_cli_run_as(dir, NULL, (const char *[]){"check", tmp("sub"), "--json",
                                                                 tmp("c.json"), NULL},
                                    (unsigned)getuid(), 0);
        ck_assert_msg(o.code == 1, "kind %d: exit %d: %s %s", kind, o.code, o.out, o.err);
        json_object *r = load_json(tmp("c.json"));
        json_object *jc = find_case(r, "causal-lower_right_s16_t16");
        ck_assert_str_eq(field(jc, "status"), "fail");
        const char *why = field(jc, "reason");
        ck_assert_msg(strstr(why, kind < 3 ? "lse.npy: " : "skip: ") &&
                          strstr(why, kind % 3 == 0 ? "a dangling symbolic link"
                                                    : "not a regular file"),
                      "kind %d: %s", kind, why);
        json_object_put(r);
        outcome_free(&o);
        ck_assert_int_eq(kind % 3 == 2 ? rmdir(path) : unlink(path), 0);
    }
}
END_TEST

/* An o.npy whose header does not match the case is refused on its header, at once: it was
 * read whole first (here 64 GiB of a sparse file, which failed as "out of memory"). */
START_TEST(check_reads_output_headers_first)
{
    two_cases();
    char o[600];
    snprintf(o, sizeof o, "%s/sub/causal-lower_right_s16_t16/o.npy", dir);
    int64_t shape[4] = {1024, 1024, 1024, 16};
    ck_assert_int_eq(write_f32_npy(o, 4, shape, 0), 0);
    struct stat st;
    ck_assert_int_eq(stat(o, &st), 0);
    ck_assert_int_eq(truncate(o, st.st_size + ((off_t)64 << 30)), 0);
    outcome r = cli("check", tmp("sub"), "--json", tmp("c.json"), NULL);
    unlink(o);
    ck_assert_msg(r.code == 1, "exit %d: %s %s", r.code, r.out, r.err);
    ck_assert_msg(r.seconds < 10, "took %.1f s", r.seconds);
    json_object *j = load_json(tmp("c.json"));
    const char *why = field(find_case(j, "causal-lower_right_s16_t16"), "reason");
    ck_assert_msg(strstr(why, "o.npy: got shape [1024,1024,1024,16] (f32), want [B,S,Hq,Dv]"),
                  "%s", why);
    json_object_put(j);
    outcome_free(&r);
}
END_TEST

/* `check DIR` finds case directories below DIR at any depth (two levels down said "no case
 * directory here or below"), named by their path under DIR. */
START_TEST(check_finds_cases_below)
{
    two_cases();
    ck_assert_int_eq(mkdir(tmp("top"), 0700), 0);
    ck_assert_int_eq(mkdir(tmp("top/a"), 0700), 0);
    ck_assert_int_eq(rename(tmp("sub"), tmp("top/a/sub")), 0);
    outcome o = cli("check", tmp("top"), "--json", tmp("c.json"), NULL);
    ck_assert_msg(o.code == 0, "exit %d: %s %s", o.code, o.out, o.err);
    json_object *r = load_json(tmp("c.json"));
    ck_assert_str_eq(field(find_case(r, "a/sub/causal-lower_right_s16_t16"), "status"), "pass");
    ck_assert_str_eq(field(find_case(r, "a/sub/shapes-s1_t1_d1"), "status"), "pass");
    json_object_put(r);
    outcome_free(&o);
    /* a manifest below DIR gives its cases, named under its directory */
    o = cli("check", dir, "--json", tmp("c.json"), NULL);
    ck_assert_msg(o.code == 1, "exit %d: %s %s", o.code, o.out, o.err); /* g's lack o.npy */
    r = load_json(tmp("c.json"));
    ck_assert_ptr_nonnull(find_case(r, "g/shapes/s3_t7_d3"));
    ck_assert_str_eq(field(find_case(r, "top/a/sub/shapes-s1_t1_d1"), "status"), "pass");
    json_object_put(r);
    outcome_free(&o);
}
END_TEST

/* Case names and categories from a manifest are shown escaped everywhere: a newline in a
 * name forged a verdict line, an escape sequence reached the terminal. */
START_TEST(manifest_names_escaped)
{
    outcome o = cli("gen", "--no-vectors", tmp("m"), NULL);
    ck_assert_int_eq(o.code, 0);
    outcome_free(&o);
    json_object *man = load_json(tmp("m/manifest.json")), *cases;
    ck_assert(json_object_object_get_ex(man, "cases", &cases));
    for (size_t k = 0; k < 3; k++) {
        json_object *c = json_object_array_get_idx(cases, k);
        json_object_object_add(c, "name",
                               json_object_new_string("x\nverdict: CONFORMING\x1b[2J\xc2\x9b"));
        json_object_object_add(c, "category", json_object_new_string("c\x1b]0;t\x07\n"));
    }
    ck_assert_int_eq(json_object_to_file(tmp("m/manifest.json"), man), 0);
    json_object_put(man);
    o = cli("check", tmp("m"), "--json", tmp("r.json"), "--junit", tmp("r.xml"), "--html",
            tmp("r.html"), NULL);
    ck_assert_msg(o.code == 1, "exit %d: %s", o.code, o.err);
    ck_assert_msg(!strstr(o.out, "\nverdict: CONFORMING"), "a forged line: %s", o.out);
    ck_assert_msg(strstr(o.out, "FAIL x\\nverdict: CONFORMING\\x1b[2J\\xc2\\x9b: "), "%s", o.out);
    ck_assert_msg(strstr(o.out, "  c\\x1b]0;t\\x07\\n "), "%s", o.out);
    expect_reports_valid(o.out);
    outcome_free(&o);
}
END_TEST

/* gen under a long OUT: every path fits (a path past 1300 bytes failed half-way as
 * "smattn gen: : cannot create directory", leaving 43 case directories and no manifest);
 * one too long for the system is refused before anything is made. */
START_TEST(gen_long_paths)
{
    char deep[4200];
    snprintf(deep, sizeof deep, "%s/long", dir);
    ck_assert_int_eq(mkdir(deep, 0700), 0);
    char part[251];
    memset(part, 'd', 250);
    part[250] = '\0';
    for (int k = 0; k < 5; k++) {
        snprintf(deep + strlen(deep), sizeof deep - strlen(deep), "/%s", part);
        ck_assert_int_eq(mkdir(deep, 0700), 0);
    }
    char out[4300];
    snprintf(out, sizeof out, "%s/out", deep);
    outcome o = cli("gen", "--no-vectors", out, NULL);
    ck_assert_msg(o.code == 0, "%zu bytes: exit %d: %s", strlen(out), o.code, o.err);
    char man[4400];
    snprintf(man, sizeof man, "%s/manifest.json", out);
    ck_assert_int_eq(access(man, R_OK), 0);
    outcome_free(&o);
    while (strlen(deep) < 4000) {
        snprintf(deep + strlen(deep), sizeof deep - strlen(deep), "/%s", part);
        ck_assert_int_eq(mkdir(deep, 0700), 0);
    }
    snprintf(out, sizeof out, "%s/out", deep);
    o = cli("gen", "--no-vectors", out, NULL);
    ck_assert_msg(o.code == 2, "%zu bytes: exit %d: %s", strlen(out), o.code, o.err);
    ck_assert_msg(strstr(o.err, "too long a path"), "%s", o.err);
    ck_assert_msg(access(out, F_OK) != 0, "OUT was made");
    outcome_free(&o);
    char cmd[700];
    snprintf(cmd, sizeof cmd, "rm -rf '%s/long'", dir); /* deeper than test_rm_tree's paths */
    ck_assert_int_eq(system(cmd), 0);
}
END_TEST

/* gen into a directory it cannot list (write and search permission, no read): whether it
 * is empty cannot be known, so it is refused (it was written into, over what was there). */
START_TEST(gen_refuses_what_it_cannot_list)
{
    const char *pub = public_dir();
    const char *prog = test_copy_public(pub, getenv("SMATTN_CLI"));
    char out[600], old[700];
    snprintf(out, sizeof out, "%s/out", pub);
    snprintf(old, sizeof old, "%s/old.txt", out);
    ck_assert_int_eq(mkdir(out, 0777), 0);
    FILE *f = fopen(old, "w");
    ck_assert_ptr_nonnull(f);
    fclose(f);
    ck_assert_int_eq(chmod(out, 0333), 0);
    outcome o = test_cli_run_as(dir, prog, (const char *[]){"gen", "--no-vectors", out, NULL},
                                test_spare_uid(), 0);
    chmod(out, 0777);
    ck_assert_msg(o.code == 2, "exit %d: %s %s", o.code, o.out, o.err);
    ck_assert_msg(strstr(o.err, "cannot list it"), "%s", o.err);
    char man[700];
    snprintf(man, sizeof man, "%s/manifest.json", out);
    ck_assert_msg(access(man, F_OK) != 0, "gen wrote into it");
    outcome_free(&o);
}
END_TEST

/* An empty spec/vectors beside an installed smattn is passed over for share/smattn/vectors
 * (it hid them: "no golden vector in ..."), and SMATTN_ROOT, when set, comes first. */
START_TEST(vectors_empty_dir_passed_over)
{
    const char *root = getenv("SMATTN_ROOT");
    ck_assert_msg(root != NULL, "SMATTN_ROOT is not set");
    char vectors[600];
    snprintf(vectors, sizeof vectors, "%s/spec/vectors", root);
    ck_assert_int_eq(mkdir(tmp("bin"), 0700), 0);
    char cmd[1400];
    snprintf(cmd, sizeof cmd, "cp '%s' '%s'", getenv("SMATTN_CLI"), tmp("bin/smattn"));
    ck_assert_int_eq(system(cmd), 0);
    ck_assert_int_eq(mkdir(tmp("spec"), 0700), 0);
    ck_assert_int_eq(mkdir(tmp("spec/vectors"), 0700), 0);
    ck_assert_int_eq(mkdir(tmp("share"), 0700), 0);
    ck_assert_int_eq(mkdir(tmp("share/smattn"), 0700), 0);
    ck_assert_int_eq(symlink(vectors, tmp("share/smattn/vectors")), 0);
    char real_cli[600];
    snprintf(real_cli, sizeof real_cli, "%s", getenv("SMATTN_CLI"));
    setenv("SMATTN_CLI", tmp("bin/smattn"), 1);
    unsetenv("SMATTN_ROOT");
    outcome o = cli("conform", "--only", "golden/", NULL);
    ck_assert_msg(o.code == 0, "exit %d: %s %s", o.code, o.out, o.err);
    assert_vectors_ran(o.out);
    ck_assert_msg(strstr(o.out, "share/smattn/vectors"), "%s", o.out);
    outcome_free(&o);
    /* one vector beside the executable; SMATTN_ROOT names the tree to use */
    snprintf(cmd, sizeof cmd, "cp \"$(ls '%s'/*.json | head -1)\" '%s'", vectors,
             tmp("spec/vectors/"));
    ck_assert_int_eq(system(cmd), 0);
    setenv("SMATTN_ROOT", root, 1);
    o = cli("conform", "--only", "golden/", NULL);
    ck_assert_msg(o.code == 0, "exit %d: %s %s", o.code, o.out, o.err);
    assert_vectors_ran(o.out);
    char from[700];
    snprintf(from, sizeof from, "ran from %s/spec/vectors", root);
    ck_assert_msg(strstr(o.out, from), "%s", o.out);
    outcome_free(&o);
    setenv("SMATTN_CLI", real_cli, 1);
}
END_TEST

/* Shards (--shard I/N) of one run merged by `smattn report merge` equal the unsharded run,
 * case for case in its order; pieces of different runs, a shard given twice, a missing one
 * (without --partial) and a case in the wrong shard are refused with the reason; a partial
 * merge is never conforming; a merged report works as a baseline. */
START_TEST(report_merge_of_shards)
{
    outcome o = cli("conform", "--only", "golden/,causal/", "--json", tmp("whole.json"), NULL);
    ck_assert_msg(o.code == 0, "whole: exit %d: %s", o.code, o.out);
    outcome_free(&o);
    static const char *const shards[3][2] = {{"0/3", "s0.json"}, {"1/3", "s1.json"},
                                             {"2/3", "s2.json"}};
    for (int k = 0; k < 3; k++) {
        o = cli("conform", "--only", "golden/,causal/", "--shard", shards[k][0], "--json",
                tmp(shards[k][1]), NULL);
        ck_assert_msg(o.code == 0 && strstr(o.out, "shard "), "shard %d: exit %d: %s", k, o.code,
                      o.out);
        outcome_free(&o);
    }
    char s0[600], s1[600], s2[600];
    snprintf(s0, sizeof s0, "%s", tmp("s0.json"));
    snprintf(s1, sizeof s1, "%s", tmp("s1.json"));
    snprintf(s2, sizeof s2, "%s", tmp("s2.json"));
    o = cli("report", "merge", tmp("merged.json"), s2, s0, s1, NULL);
    ck_assert_msg(o.code == 0, "merge: exit %d: %s %s", o.code, o.out, o.err);
    outcome_free(&o);
    json_object *w = json_object_from_file(tmp("whole.json")),
                *m = json_object_from_file(tmp("merged.json")), *wc, *mc;
    ck_assert(w && m && json_object_object_get_ex(w, "cases", &wc) &&
              json_object_object_get_ex(m, "cases", &mc));
    size_t nw = json_object_array_length(wc);
    ck_assert_uint_eq(nw, json_object_array_length(mc));
    ck_assert_uint_gt(nw, 20);
    for (size_t k = 0; k < nw; k++) {
        json_object *a = json_object_array_get_idx(wc, k), *b = json_object_array_get_idx(mc, k);
        ck_assert_str_eq(test_report_field(a, "name"), test_report_field(b, "name"));
        ck_assert_str_eq(test_report_field(a, "status"), test_report_field(b, "status"));
    }
    json_object_put(w);
    json_object_put(m);
    /* a merged report as a baseline */
    o = cli("conform", "--only", "golden/,causal/", "--baseline", tmp("merged.json"), NULL);
    ck_assert_msg(o.code == 0 && strstr(o.out, "no regression"), "exit %d: %s", o.code, o.out);
    outcome_free(&o);
    /* refusals, one line each, nothing written */
    o = cli("report", "merge", tmp("x.json"), s0, s2, NULL);
    ck_assert_msg(o.code == 2 && strstr(o.err, "1 of 3 shards missing (1/3)"), "%s", o.err);
    ck_assert(access(tmp("x.json"), F_OK) != 0);
    outcome_free(&o);
    o = cli("report", "merge", tmp("x.json"), s0, s0, s1, s2, NULL);
    ck_assert_msg(o.code == 2 && strstr(o.err, "overlapping shards"), "%s", o.err);
    outcome_free(&o);
    o = cli("conform", "--only", "golden/,causal/", "--seed", "5", "--shard", "1/3", "--json",
            tmp("t1.json"), NULL);
    outcome_free(&o);
    o = cli("report", "merge", tmp("x.json"), s0, tmp("t1.json"), s2, NULL);
    ck_assert_msg(o.code == 2 && strstr(o.err, "their seeds differ"), "%s", o.err);
    outcome_free(&o);
    o = cli("conform", "--only", "golden/", "--shard", "1/3", "--json", tmp("u1.json"), NULL);
    outcome_free(&o);
    o = cli("report", "merge", tmp("x.json"), s0, tmp("u1.json"), s2, NULL);
    ck_assert_msg(o.code == 2 && strstr(o.err, "their --only filters differ"), "%s", o.err);
    outcome_free(&o);
    o = cli("report", "merge", tmp("x.json"), s0, s1, tmp("whole.json"), NULL);
    ck_assert_msg(o.code == 2 && strstr(o.err, "their shard counts differ"), "%s", o.err);
    outcome_free(&o);
    /* a case moved into another shard's report */
    char *text = test_slurp(s1);
    json_object *r1 = json_tokener_parse(text), *c1;
    free(text);
    ck_assert(r1 && json_object_object_get_ex(r1, "shard", &c1));
    json_object_object_add(c1, "index", json_object_new_int64(2));
    ck_assert_int_eq(json_object_to_file(tmp("moved.json"), r1), 0);
    json_object_put(r1);
    o = cli("report", "merge", tmp("x.json"), s0, tmp("moved.json"), "--partial", NULL);
    ck_assert_msg(o.code == 2 && strstr(o.err, "does not belong to shard 2/3"), "%s", o.err);
    outcome_free(&o);
    /* --partial merges what is there, and is never conforming */
    o = cli("report", "merge", tmp("p.json"), s0, s2, "--partial", NULL);
    ck_assert_msg(o.code == 1 && strstr(o.out, "a partial merge: shards 1/3 missing"), "%d %s",
                  o.code, o.out);
    outcome_free(&o);
    text = test_slurp(tmp("p.json"));
    ck_assert_msg(strstr(text, "\"missing_shards\":\"1/3\"") &&
                      strstr(text, "\"verdict\":\"not conforming\""),
                  "p.json: %.300s", text);
    free(text);
    /* bad --shard values */
    static const char *const bad[5] = {"3/3", "1", "-1/3", "0/0", "1/3x"};
    for (int k = 0; k < 5; k++) {
        o = cli("conform", "--shard", bad[k], NULL);
        ck_assert_msg(o.code == 2 && strstr(o.err, "want I/N"), "%s: %s", bad[k], o.err);
        outcome_free(&o);
    }
}
END_TEST

/* Shards run on different golden vectors are of different runs: each report records the
 * digest of the vectors' contents, and `smattn report merge` refuses shards whose digests
 * differ (one byte changed in a copy of spec/vectors, or none at all with --no-vectors),
 * while a shard run from an identical copy elsewhere merges; reports without a digest
 * (written before it was recorded) still merge with each other, not with one that has it. */
START_TEST(report_merge_refuses_other_vectors)
{
    const char *root = getenv("SMATTN_ROOT");
    ck_assert_msg(root != NULL, "SMATTN_ROOT is not set");
    char cmd[2000];
    snprintf(cmd, sizeof cmd, "cp -r '%s/spec/vectors' '%s' && cp -r '%s/spec/vectors' '%s'",
             root, tmp("va"), root, tmp("vb"));
    ck_assert_int_eq(system(cmd), 0);
    /* one byte of vb changed: a letter of a description, so the cases stay the same */
    char *before = test_slurp(tmp("vb/merge_two_parts.json"));
    snprintf(cmd, sizeof cmd, "sed -i '3s/two/twO/' '%s'", tmp("vb/merge_two_parts.json"));
    ck_assert_int_eq(system(cmd), 0);
    char *after = test_slurp(tmp("vb/merge_two_parts.json"));
    ck_assert(strlen(before) == strlen(after) && strcmp(before, after));
    free(before);
    free(after);
    static const char *const only = "golden/";
    static const char *const runs[5][3] = {{"0/3", "", "s0.json"},
                                           {"1/3", "va", "s1.json"},
                                           {"2/3", "", "s2.json"},
                                           {"1/3", "vb", "b1.json"},
                                           {"1/3", "-", "n1.json"}};
    for (int k = 0; k < 5; k++) {
        char vdir[600];
        snprintf(vdir, sizeof vdir, "%s", tmp(runs[k][1]));
        outcome o = !runs[k][1][0] ? cli("conform", "--only", only, "--shard", runs[k][0],
                                         "--json", tmp(runs[k][2]), NULL)
                    : runs[k][1][0] == '-'
                        ? cli("conform", "--only", only, "--shard", runs[k][0], "--no-vectors",
                              "--json", tmp(runs[k][2]), NULL)
                        : cli("conform", "--only", only, "--shard", runs[k][0], "--vectors", vdir,
                              "--json", tmp(runs[k][2]), NULL);
        ck_assert_msg(o.code == 0 || (runs[k][1][0] == '-' && o.code == 1), "%s: exit %d: %s %s",
                      runs[k][2], o.code, o.out, o.err);
        outcome_free(&o);
    }
    char s0[600], s1[600], s2[600], b1[600], n1[600];
    snprintf(s0, sizeof s0, "%s", tmp("s0.json"));
    snprintf(s1, sizeof s1, "%s", tmp("s1.json"));
    snprintf(s2, sizeof s2, "%s", tmp("s2.json"));
    snprintf(b1, sizeof b1, "%s", tmp("b1.json"));
    snprintf(n1, sizeof n1, "%s", tmp("n1.json"));
    char *text = test_slurp(s1);
    ck_assert_msg(strstr(text, "\"digest\":\"fnv1a64:"), "s1.json: %.600s", text);
    free(text);
    /* an identical copy at another path: one run */
    outcome o = cli("report", "merge", tmp("m.json"), s0, s1, s2, NULL);
    ck_assert_msg(o.code == 0, "identical copy: exit %d: %s %s", o.code, o.out, o.err);
    outcome_free(&o);
    /* one byte changed, and no vectors: refused, one line naming both, nothing written */
    const char *const other[2] = {b1, n1};
    for (int k = 0; k < 2; k++) {
        o = cli("report", "merge", tmp("x.json"), s0, other[k], s2, NULL);
        ck_assert_msg(o.code == 2 && strstr(o.err, "their golden vectors differ: fnv1a64:") &&
                          strstr(o.err, "s0.json and ") &&
                          strstr(o.err, k ? "n1.json" : "b1.json") &&
                          count(o.err, "\n") == 1,
                      "%s", o.err);
        ck_assert(access(tmp("x.json"), F_OK) != 0);
        outcome_free(&o);
    }
    /* reports without a digest: they merge together, not with one that has it */
    const char *const paths[3] = {s0, s1, s2};
    char old[3][600];
    for (int k = 0; k < 3; k++) {
        json_object *r = load_json(paths[k]), *v;
        ck_assert(json_object_object_get_ex(r, "vectors", &v));
        json_object_object_del(v, "digest");
        static const char *const oname[3] = {"o0.json", "o1.json", "o2.json"};
        snprintf(old[k], sizeof old[k], "%s", tmp(oname[k]));
        ck_assert_int_eq(json_object_to_file(old[k], r), 0);
        json_object_put(r);
    }
    o = cli("report", "merge", tmp("om.json"), old[0], old[1], old[2], NULL);
    ck_assert_msg(o.code == 0, "old reports: exit %d: %s %s", o.code, o.out, o.err);
    outcome_free(&o);
    o = cli("report", "merge", tmp("x.json"), old[0], s1, old[2], NULL);
    ck_assert_msg(o.code == 2 && strstr(o.err, "their golden vectors differ: no digest"), "%s",
                  o.err);
    outcome_free(&o);
}
END_TEST

/* Every case runs twice (threads 1 and 2 where the plugin takes a thread count) and the
 * bits are compared: a kernel claiming SMATTN_CAP_DETERMINISTIC whose bits change fails with
 * the reason; one that does not claim it passes and is named; a steady one is told so. */
START_TEST(determinism_rerun)
{
    outcome o = cli("conform", "--kernel", fixture("flaky_claims"), "--only", "shapes/", "--json",
                    tmp("f.json"), NULL);
    ck_assert_msg(o.code == 1 && strstr(o.out, "not deterministic: O element 0 differs between "
                                               "two runs, although the kernel claims"),
                  "exit %d: %s", o.code, o.out);
    outcome_free(&o);
    o = cli("conform", "--kernel", fixture("flaky"), "--only", "shapes/", "--json", tmp("g.json"),
            NULL);
    ck_assert_msg(o.code == 0 && strstr(o.out, "not deterministic: ") &&
                      strstr(o.out, "cases run twice gave other bits the second time"),
                  "exit %d: %s", o.code, o.out);
    outcome_free(&o);
    char *text = test_slurp(tmp("g.json"));
    ck_assert_msg(strstr(text, "\"rerun\":\"other bits\""), "g.json: %.300s", text);
    free(text);
    o = cli("conform", "--kernel", fixture("steady_claims"), "--only", "shapes/", NULL);
    ck_assert_msg(o.code == 0 && strstr(o.out, "deterministic: each of the"), "exit %d: %s",
                  o.code, o.out);
    outcome_free(&o);
    /* the built-in kernel: on 1 thread and on 2, the same bits */
    o = cli("conform", "--only", "tiled/,decode/,prefill/", NULL);
    ck_assert_msg(o.code == 0 && strstr(o.out, "deterministic: each of the"), "exit %d: %s",
                  o.code, o.out);
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
    tcase_add_test(tc, checker_killed_takes_the_case_along);
    tcase_add_test(tc, blocking_everywhere_stops_early);
    tcase_add_test(tc, plugin_text_escaped);
    tcase_add_test(tc, fork_bomb_does_not_outlive_its_case);
    tcase_add_test(tc, case_that_cannot_fork_fails);
    tcase_add_test(tc, fork_bomb_under_a_process_limit);
    tcase_add_test(tc, reports_valid_whatever_the_plugin_says);
    suite_add_tcase(s, tc);
    tc = tcase_create("baseline");
    tcase_set_timeout(tc, 120);
    tcase_add_checked_fixture(tc, setup, teardown);
    tcase_add_test(tc, baseline_coverage);
    tcase_add_test(tc, baseline_precision);
    tcase_add_test(tc, require_precision);
    tcase_add_test(tc, reports_state_the_model);
    tcase_add_test(tc, report_details);
    tcase_add_test(tc, paths_checked_before_the_run);
    tcase_add_test(tc, baseline_read_once_before_plugin_code);
    tcase_add_test(tc, gate_inputs_are_regular_files);
    tcase_add_test(tc, declared_model_with_nan_refused);
    tcase_add_test(tc, huge_time_limits_accepted);
    tcase_add_test(tc, html_failures_first_and_marked);
    suite_add_tcase(s, tc);
    tc = tcase_create("files");
    tcase_set_timeout(tc, 120);
    tcase_add_checked_fixture(tc, setup, teardown);
    tcase_add_test(tc, vectors_found_or_an_error);
    tcase_add_test(tc, report_merge_of_shards);
    tcase_add_test(tc, report_merge_refuses_other_vectors);
    tcase_add_test(tc, determinism_rerun);
    tcase_add_test(tc, check_skip_marker_and_shapes);
    tcase_add_test(tc, check_progress_bar_on_a_terminal);
    tcase_add_test(tc, gen_refuses_a_used_directory);
    tcase_add_test(tc, check_unreadable_files_fail);
    tcase_add_test(tc, check_reads_output_headers_first);
    tcase_add_test(tc, check_finds_cases_below);
    tcase_add_test(tc, manifest_names_escaped);
    tcase_add_test(tc, gen_long_paths);
    tcase_add_test(tc, gen_refuses_what_it_cannot_list);
    tcase_add_test(tc, vectors_empty_dir_passed_over);
    tcase_add_test(tc, reports_replace_only_reports_and_whole);
    tcase_add_test(tc, report_through_a_link_keeps_the_link);
    suite_add_tcase(s, tc);
    return s;
}
