/* SPDX-License-Identifier: MIT */
/* test_case_out.c: OUT's outputs are one set, whole or not at all (SPEC 7.2): runs killed
 * at random moments by every signal that ends a process and by SIGKILL, two runs racing
 * into one OUT, a sticky shared OUT holding another user's files, what a later run removes,
 * and how `smattn check` and smattn_case_outputs_verify read a set and its marker. */
#define _DEFAULT_SOURCE /* setgroups, usleep */
#include <check.h>
#include <dirent.h>
#include <fcntl.h>
#include <grp.h>
#include <math.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "io/case.h"
#include "io/npy.h"
#include "tests/support/cli_run.h"
#include "tests/support/fs.h"

#define MARKER ".smattn-set"

static char tmp[64];

static void setup(void)
{
    ck_assert_int_eq(test_mkdtemp(tmp, sizeof tmp, "outset"), 0);
}

static void teardown(void)
{
    test_rm_tree(tmp);
}

#define NEED_CLI()                                                                                 \
    do {                                                                                           \
        if (!getenv("SMATTN_CLI")) {                                                               \
            fprintf(stderr, "test_case_out: SMATTN_CLI not set (run via make check-unit)\n");      \
            return;                                                                                \
        }                                                                                          \
    } while (0)

static double now_seconds(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

/* A reproducible stream for the kill moments (the seed is printed on failure). */
static uint64_t rng_state;
static uint64_t rng_next(void)
{
    rng_state = rng_state * 6364136223846793005ull + 1442695040888963407ull;
    return rng_state >> 33;
}

static void put_f32(const char *dir, const char *name, int rank, const int64_t *shape, float v0)
{
    int64_t n = 1;
    for (int r = 0; r < rank; r++)
        n *= shape[r];
    float *d = malloc((size_t)n * sizeof *d);
    for (int64_t i = 0; i < n; i++)
        d[i] = v0 + (float)((i * 7919) % 113) / 64.0f;
    char err[256];
    ck_assert_msg(smattn_npy_write(test_path(dir, name), SMATTN_NPY_F32, rank, shape, d, err,
                                   sizeof err) == 0,
                  "%s", err);
    free(d);
}

/* Case A: attention (run with --weights: o, lse, p). Case B: a softmax (p and lse, no o).
 * Their sets differ in every file and in which names exist, so that any mix shows. */
static void make_cases(char *a, char *b, size_t n)
{
    snprintf(a, n, "%s/a", tmp);
    snprintf(b, n, "%s/b", tmp);
    ck_assert_int_eq(mkdir(a, 0755), 0);
    ck_assert_int_eq(mkdir(b, 0755), 0);
    put_f32(a, "q.npy", 3, (int64_t[]){32, 2, 16}, 0.5f);
    put_f32(a, "k.npy", 3, (int64_t[]){64, 2, 16}, -0.25f);
    put_f32(a, "v.npy", 3, (int64_t[]){64, 2, 16}, 1.0f);
    put_f32(b, "x.npy", 3, (int64_t[]){2, 24, 48}, -1.0f);
}

/* The bytes of OUT's three outputs (NULL: absent), to compare sets exactly. */
typedef struct out_set {
    char *data[3];
    long len[3];
} out_set;

static const char *const out_names[3] = {"o.npy", "lse.npy", "p.npy"};

static out_set read_set(const char *dir)
{
    out_set s;
    for (int k = 0; k < 3; k++) {
        s.data[k] = NULL;
        s.len[k] = -1;
        FILE *f = fopen(test_path(dir, out_names[k]), "rb");
        if (!f)
            continue;
        fseek(f, 0, SEEK_END);
        s.len[k] = ftell(f);
        fseek(f, 0, SEEK_SET);
        s.data[k] = malloc((size_t)s.len[k] + 1);
        ck_assert_int_eq(fread(s.data[k], 1, (size_t)s.len[k], f), (size_t)s.len[k]);
        fclose(f);
    }
    return s;
}

static void free_set(out_set *s)
{
    for (int k = 0; k < 3; k++)
        free(s->data[k]);
}

static int same_set(const out_set *x, const out_set *y)
{
    for (int k = 0; k < 3; k++)
        if (x->len[k] != y->len[k] ||
            (x->len[k] >= 0 && memcmp(x->data[k], y->data[k], (size_t)x->len[k])))
            return 0;
    return 1;
}

/* Entries of dir other than the outputs and the marker (temporaries, probes), as a list. */
static void extra_entries(const char *dir, char *buf, size_t n)
{
    buf[0] = '\0';
    DIR *d = opendir(dir);
    ck_assert_ptr_nonnull(d);
    struct dirent *e;
    while ((e = readdir(d))) {
        const char *nm = e->d_name;
        if (!strcmp(nm, ".") || !strcmp(nm, "..") || !strcmp(nm, MARKER) || !strcmp(nm, "o.npy") ||
            !strcmp(nm, "lse.npy") || !strcmp(nm, "p.npy"))
            continue;
        snprintf(buf + strlen(buf), n - strlen(buf), "%s ", nm);
    }
    closedir(d);
}

/* Start the CLI (smattn opt CASE OUT [--weights]) with its output thrown away and no core
 * file (SIGQUIT and SIGXCPU would dump one); uid 65534 when nobody is set and we are
 * root. */
static const char *start_threads = "1";
static pid_t start(const char *cli, const char *cs, const char *out, int weights, int nobody)
{
    /* Signals held over the fork: one sent at once must not reach the child while it still
     * has Check's handlers (its SIGALRM handler kills the whole process group). */
    sigset_t all, was;
    sigfillset(&all);
    sigprocmask(SIG_BLOCK, &all, &was);
    pid_t pid = fork();
    if (pid != 0)
        sigprocmask(SIG_SETMASK, &was, NULL);
    ck_assert_int_ge(pid, 0);
    if (pid == 0) {
        int null = open("/dev/null", O_RDWR);
        struct rlimit nocore = {0, 0};
        if (null < 0 || dup2(null, 1) < 0 || dup2(null, 2) < 0 ||
            setrlimit(RLIMIT_CORE, &nocore) != 0)
            _exit(127);
        if (nobody && getuid() == 0 &&
            (setgroups(0, NULL) != 0 || setgid(65534) != 0 || setuid(65534) != 0))
            _exit(127);
        /* the signals Check or the runner may have set: the defaults a shell gives */
        for (int s = 1; s < 32; s++)
            signal(s, SIG_DFL);
        sigset_t none;
        sigemptyset(&none);
        sigprocmask(SIG_SETMASK, &none, NULL);
        execl(cli, cli, "opt", cs, out, "--threads", start_threads, weights ? "--weights" : NULL,
              (char *)NULL);
        _exit(127);
    }
    return pid;
}

static int wait_status(pid_t pid)
{
    int ws;
    ck_assert_int_eq(waitpid(pid, &ws, 0), pid);
    return ws;
}

/* One run to its end: its exit status (-signal if killed). */
static int run_to_end(const char *cli, const char *cs, const char *out, int weights, int nobody)
{
    int ws = wait_status(start(cli, cs, out, weights, nobody));
    return WIFEXITED(ws) ? WEXITSTATUS(ws) : -WTERMSIG(ws);
}

/* OUT after a run that may have been killed: a whole set (the marker matches) that is
 * exactly A's or B's, and nothing else; or, only where the run could not hold the signal
 * back (SIGKILL), a set whose marker says it is not whole, maybe with temporaries. */
static void expect_whole_or_marked(const char *out, const out_set *ra, const out_set *rb,
                                   int may_be_partial, const char *what)
{
    char err[600], extra[1024];
    int v = smattn_case_outputs_verify(out, err, sizeof err);
    struct stat st;
    int marked = lstat(test_path(out, MARKER), &st) == 0;
    out_set now = read_set(out);
    extra_entries(out, extra, sizeof extra);
    if (v == 0) {
        ck_assert_msg(same_set(&now, ra) || same_set(&now, rb),
                      "%s: taken as whole (%s), but the set is neither A's nor B's", what,
                      marked ? "its marker says so" : "no marker");
        ck_assert_msg(may_be_partial || !extra[0], "%s: left behind: %s", what, extra);
    } else {
        ck_assert_msg(may_be_partial, "%s: not a whole set: %s", what, err);
        ck_assert_msg(strstr(err, "did not finish") != NULL, "%s: %s", what, err);
    }
    free_set(&now);
}

/* Each signal that ends a process by default, and SIGKILL, sent at a random moment of a
 * run that replaces A's set by B's or B's by A's. Every caught signal leaves the old or
 * the new whole set and no temporary (during the switch it waits until the new set is
 * whole); SIGKILL may leave a set marked as not whole, which the next run replaces, also
 * removing the temporaries. Before the marker, SIGHUP between two renames left a new
 * o.npy beside an old lse.npy, and every signal but SIGINT and SIGTERM left temporaries. */
START_TEST(killed_runs_leave_a_whole_set)
{
    NEED_CLI();
    const char *cli = getenv("SMATTN_CLI");
    char a[128], b[128];
    make_cases(a, b, sizeof a);
    char ra_dir[128], rb_dir[128], out[128];
    snprintf(ra_dir, sizeof ra_dir, "%s/ra", tmp);
    snprintf(rb_dir, sizeof rb_dir, "%s/rb", tmp);
    snprintf(out, sizeof out, "%s/out", tmp);
    ck_assert_int_eq(run_to_end(cli, a, ra_dir, 1, 0), 0);
    ck_assert_int_eq(run_to_end(cli, b, rb_dir, 0, 0), 0);
    double t_run = 1e9; /* a warm run's length: the kill moments spread over it */
    for (int k = 0; k < 3; k++) {
        double t0 = now_seconds();
        ck_assert_int_eq(run_to_end(cli, a, ra_dir, 1, 0), 0);
        t_run = fmin(t_run, now_seconds() - t0);
    }
    out_set ra = read_set(ra_dir), rb = read_set(rb_dir);
    ck_assert(ra.len[0] > 0 && rb.len[0] < 0 && ra.len[2] != rb.len[2]);
    ck_assert_int_eq(run_to_end(cli, a, out, 1, 0), 0);
    static const int sigs[] = {SIGTERM, SIGINT,  SIGHUP,  SIGALRM, SIGXCPU, SIGPIPE,
                               SIGXFSZ, SIGQUIT, SIGUSR1, SIGUSR2, SIGKILL};
    const int nsig = (int)(sizeof sigs / sizeof sigs[0]);
    rng_state = (uint64_t)time(NULL);
    uint64_t seed = rng_state;
    /* about 4 s in all on an idle machine, whatever a run costs here */
    int tries = (int)(4.0 / (nsig * (t_run + 0.002)));
    tries = tries < 4 ? 4 : tries > 40 ? 40 : tries;
    int next_b = 1, killed = 0, partial = 0;
    for (int s = 0; s < nsig; s++)
        for (int t = 0; t < tries; t++) {
            start_threads = t % 2 ? "1" : "2"; /* the kernel's workers outlive the call */
            pid_t pid = start(cli, next_b ? b : a, out, !next_b, 0);
            /* a moment in the run (start-up, reading, computing, writing, switching) */
            usleep((useconds_t)(rng_next() % (uint64_t)(1e6 * t_run + 1)));
            kill(pid, sigs[s]);
            int ws = wait_status(pid);
            killed += WIFSIGNALED(ws);
            char what[128];
            snprintf(what, sizeof what, "signal %d (%s), try %d, seed %llu", sigs[s],
                     strsignal(sigs[s]), t, (unsigned long long)seed);
            ck_assert_msg(WIFSIGNALED(ws) || (WIFEXITED(ws) && WEXITSTATUS(ws) == 0),
                          "%s: exit status %d", what, ws);
            char err[600];
            partial += smattn_case_outputs_verify(out, err, sizeof err) != 0;
            expect_whole_or_marked(out, &ra, &rb, sigs[s] == SIGKILL, what);
            out_set now = read_set(out);
            if (same_set(&now, &rb))
                next_b = 0;
            else if (same_set(&now, &ra))
                next_b = 1;
            free_set(&now);
        }
    /* whatever SIGKILL left: the next run replaces it with a whole set and removes the
     * temporaries */
    ck_assert_int_eq(run_to_end(cli, a, out, 1, 0), 0);
    char err[600], extra[1024];
    ck_assert_msg(smattn_case_outputs_verify(out, err, sizeof err) == 0, "%s", err);
    extra_entries(out, extra, sizeof extra);
    ck_assert_msg(!extra[0], "left behind after a whole run: %s", extra);
    out_set now = read_set(out);
    ck_assert(same_set(&now, &ra));
    free_set(&now);
    /* the moments must have reached the runs: most were killed */
    start_threads = "1";
    ck_assert_msg(killed > nsig * tries / 3, "only %d of %d runs were killed", killed,
                  nsig * tries);
    fprintf(stderr,
            "case_out: %d kills of %d runs (%.1f ms each), %d left a set marked not "
            "whole (SIGKILL)\n",
            killed, nsig * tries, 1e3 * t_run, partial);
    free_set(&ra), free_set(&rb);
}
END_TEST

/* Two runs into one OUT at the same moment (A and B), many times, sometimes into an OUT
 * that neither has made yet: both succeed, and OUT holds one of the two whole sets, never
 * the outputs of both; nothing is left behind. Before the lock, a few percent of races
 * ended with a mix. */
START_TEST(racing_runs_leave_one_set)
{
    NEED_CLI();
    const char *cli = getenv("SMATTN_CLI");
    char a[128], b[128], ra_dir[128], rb_dir[128], out[128];
    make_cases(a, b, sizeof a);
    snprintf(ra_dir, sizeof ra_dir, "%s/ra", tmp);
    snprintf(rb_dir, sizeof rb_dir, "%s/rb", tmp);
    snprintf(out, sizeof out, "%s/out", tmp);
    ck_assert_int_eq(run_to_end(cli, a, ra_dir, 1, 0), 0);
    ck_assert_int_eq(run_to_end(cli, b, rb_dir, 0, 0), 0);
    out_set ra = read_set(ra_dir), rb = read_set(rb_dir);
    double t_end = now_seconds() + 2.5;
    int rounds = 0;
    for (; rounds < 200 && (rounds < 12 || now_seconds() < t_end); rounds++) {
        if (rounds % 8 == 0)
            test_rm_tree(out);
        pid_t pa = start(cli, a, out, 1, 0), pb = start(cli, b, out, 0, 0);
        int wa = wait_status(pa), wb = wait_status(pb);
        ck_assert_msg(WIFEXITED(wa) && WEXITSTATUS(wa) == 0 && WIFEXITED(wb) &&
                          WEXITSTATUS(wb) == 0,
                      "round %d: exit statuses %d and %d", rounds, wa, wb);
        char what[64];
        snprintf(what, sizeof what, "round %d", rounds);
        expect_whole_or_marked(out, &ra, &rb, 0, what);
    }
    free_set(&ra), free_set(&rb);
}
END_TEST

/* What a later run removes: the temporaries of an interrupted run (.o.npy.XXXXXX,
 * .smattn-set.XXXXXX, a probe), and only those: a name of another shape, a directory of
 * that name and the user's own files stay. */
START_TEST(stale_temporaries_removed_by_the_next_run)
{
    NEED_CLI();
    const char *cli = getenv("SMATTN_CLI");
    char a[128], b[128], out[128];
    make_cases(a, b, sizeof a);
    snprintf(out, sizeof out, "%s/out", tmp);
    ck_assert_int_eq(mkdir(out, 0755), 0);
    static const char *const stale[] = {".o.npy.Ab3xY9", ".lse.npy.000000", ".p.npy.zzzzzz",
                                        MARKER ".q1W2e3", ".smattn_probe.AAAAAA"};
    static const char *const kept[] = {".o.npy.keep", ".o.npy.Ab3xY9z", "o.npy.Ab3xY9",
                                       "notes.txt"};
    for (size_t k = 0; k < sizeof stale / sizeof stale[0]; k++)
        fclose(fopen(test_path(out, stale[k]), "w"));
    for (size_t k = 0; k < sizeof kept / sizeof kept[0]; k++)
        fclose(fopen(test_path(out, kept[k]), "w"));
    ck_assert_int_eq(mkdir(test_path(out, ".p.npy.dir123"), 0755), 0);
    ck_assert_int_eq(run_to_end(cli, a, out, 1, 0), 0);
    struct stat st;
    for (size_t k = 0; k < sizeof stale / sizeof stale[0]; k++)
        ck_assert_msg(lstat(test_path(out, stale[k]), &st) != 0, "%s stayed", stale[k]);
    for (size_t k = 0; k < sizeof kept / sizeof kept[0]; k++)
        ck_assert_msg(lstat(test_path(out, kept[k]), &st) == 0, "%s was removed", kept[k]);
    ck_assert(lstat(test_path(out, ".p.npy.dir123"), &st) == 0 && S_ISDIR(st.st_mode));
    char err[600];
    ck_assert_msg(smattn_case_outputs_verify(out, err, sizeof err) == 0, "%s", err);
}
END_TEST

/* OUT's entries (name, owner, size, mtime) as one string, to see that nothing changed. */
static char *dir_state(const char *dir)
{
    struct dirent **ents;
    int n = scandir(dir, &ents, NULL, alphasort);
    ck_assert_int_ge(n, 0);
    size_t cap = 64 + (size_t)n * 200;
    char *s = calloc(1, cap);
    for (int k = 0; k < n; k++) {
        struct stat st;
        if (!strcmp(ents[k]->d_name, "..")) {
            free(ents[k]);
            continue;
        }
        ck_assert_int_eq(lstat(test_path(dir, ents[k]->d_name), &st), 0);
        snprintf(s + strlen(s), cap - strlen(s), "%s:%lu:%lld:%lld.%09ld:%lu\n", ents[k]->d_name,
                 (unsigned long)st.st_uid, (long long)st.st_size, (long long)st.st_mtim.tv_sec,
                 st.st_mtim.tv_nsec, (unsigned long)st.st_ino);
        free(ents[k]);
    }
    free(ents);
    return s;
}

/* A sticky shared OUT (mode 1777, as /tmp) holding a set root wrote, run into by another
 * user (65534): a file of that user can be replaced, one of root's cannot. The run refuses
 * before any change, naming the file, exit 2, one line: an lse.npy that would be replaced,
 * then a p.npy that would be removed as stale. Before, o.npy was replaced and then the
 * rename of lse.npy failed, leaving a new o.npy beside the old lse.npy. Needs root. */
START_TEST(sticky_out_refused_before_any_change)
{
    NEED_CLI();
    if (getuid() != 0) {
        fprintf(stderr, "case_out: not root: the sticky-directory case is not run\n");
        return;
    }
    char a[128], b[128], bin[128], cli[160], out[128];
    ck_assert_int_eq(chmod(tmp, 0755), 0);
    make_cases(a, b, sizeof a);
    static const char *const inputs[3] = {"q.npy", "k.npy", "v.npy"};
    for (int k = 0; k < 3; k++) /* readable by 65534 whatever the umask */
        ck_assert_int_eq(chmod(test_path(a, inputs[k]), 0644), 0);
    snprintf(bin, sizeof bin, "%s/bin", tmp);
    ck_assert_int_eq(mkdir(bin, 0755), 0);
    /* a copy uid 65534 can run: the checkout may be out of its reach */
    snprintf(cli, sizeof cli, "%s", test_copy_public(bin, getenv("SMATTN_CLI")));
    snprintf(out, sizeof out, "%s/shared", tmp);
    ck_assert_int_eq(mkdir(out, 0755), 0);
    ck_assert_int_eq(chmod(out, 01777), 0);
    ck_assert_int_eq(run_to_end(cli, a, out, 1, 0), 0); /* root's o, lse, p and marker */
    ck_assert_int_eq(chown(test_path(out, "o.npy"), 65534, 65534), 0);
    struct stat st;
    if (lstat(test_path(out, MARKER), &st) == 0) /* (a smattn without the marker) */
        ck_assert_int_eq(chown(test_path(out, MARKER), 65534, 65534), 0);
    const char *steps[2] = {"lse.npy", "p.npy"};
    for (int k = 0; k < 2; k++) {
        char *before = dir_state(out);
        char errp[160];
        snprintf(errp, sizeof errp, "%s/err", tmp);
        pid_t pid = fork();
        ck_assert_int_ge(pid, 0);
        if (pid == 0) {
            int e = open(errp, O_WRONLY | O_CREAT | O_TRUNC, 0644);
            if (e < 0 || dup2(e, 2) < 0 || setgroups(0, NULL) || setgid(65534) || setuid(65534))
                _exit(127);
            execl(cli, cli, "opt", a, out, (char *)NULL); /* no --weights: p.npy is stale */
            _exit(127);
        }
        int ws = wait_status(pid);
        char *msg = test_slurp(errp), *after = dir_state(out);
        ck_assert_msg(WIFEXITED(ws) && WEXITSTATUS(ws) == 2, "%s: status %d: %s", steps[k], ws,
                      msg);
        ck_assert_msg(strstr(msg, steps[k]) && strstr(msg, "belongs to another user (uid 0) in "
                                                           "a sticky directory"),
                      "%s: %s", steps[k], msg);
        ck_assert_msg(strchr(msg, '\n') == msg + strlen(msg) - 1, "not one line: %s", msg);
        ck_assert_msg(strcmp(before, after) == 0, "OUT changed:\n%s---\n%s", before, after);
        free(msg), free(before), free(after);
        ck_assert_int_eq(chown(test_path(out, steps[k]), 65534, 65534), 0);
    }
    /* every file is the user's now: the run replaces the set, and p.npy goes */
    ck_assert_int_eq(run_to_end(cli, a, out, 0, 1), 0);
    ck_assert(stat(test_path(out, "p.npy"), &st) != 0);
    char err[600];
    ck_assert_msg(smattn_case_outputs_verify(out, err, sizeof err) == 0, "%s", err);
}
END_TEST

/* `smattn check` judges a set only when it is whole: the marker saying "writing", an
 * output changed after the set was written (same size), one the set does not list, a
 * marker that is a directory: the case fails with the reason. A set without a marker (an
 * older smattn, another program) is judged as before. */
START_TEST(check_judges_whole_sets_only)
{
    NEED_CLI();
    const char *cli = getenv("SMATTN_CLI");
    char a[128], b[128];
    make_cases(a, b, sizeof a);
    ck_assert_int_eq(run_to_end(cli, a, a, 0, 0), 0);
    test_outcome o = test_cli_run(tmp, (const char *[]){"check", a, "--precision", "f32", NULL});
    ck_assert_msg(o.code == 0, "a whole set: exit %d: %s%s", o.code, o.out, o.err);
    test_outcome_free(&o);
    char *marker = test_slurp(test_path(a, MARKER));
    ck_assert_ptr_nonnull(strstr(marker, "\"state\": \"whole\""));
    struct {
        const char *how, *reason;
    } bad[] = {{"writing", "did not finish"},
               {"changed", "lse.npy differs from the one .smattn-set records"},
               {"extra", "p.npy is not in the set"},
               {"dir", ".smattn-set: is not a regular file"}};
    for (size_t k = 0; k < sizeof bad / sizeof bad[0]; k++) {
        char saved[160];
        snprintf(saved, sizeof saved, "%s/lse.saved", tmp);
        if (!strcmp(bad[k].how, "writing")) {
            FILE *f = fopen(test_path(a, MARKER), "w");
            fputs("{\"smattn_set\": 1, \"state\": \"writing\"}\n", f);
            fclose(f);
        } else if (!strcmp(bad[k].how, "changed")) {
            ck_assert_int_eq(rename(test_path(a, "lse.npy"), saved), 0);
            put_f32(a, "lse.npy", 2, (int64_t[]){2, 32}, 0.0f); /* same size, other values */
        } else if (!strcmp(bad[k].how, "extra")) {
            put_f32(a, "p.npy", 3, (int64_t[]){2, 32, 64}, 0.0f);
        } else {
            ck_assert_int_eq(unlink(test_path(a, MARKER)), 0);
            ck_assert_int_eq(mkdir(test_path(a, MARKER), 0755), 0);
        }
        o = test_cli_run(tmp, (const char *[]){"check", a, "--precision", "f32", NULL});
        ck_assert_msg(o.code == 1 && strstr(o.out, bad[k].reason), "%s: exit %d: %s%s", bad[k].how,
                      o.code, o.out, o.err);
        test_outcome_free(&o);
        /* back to the whole set */
        if (!strcmp(bad[k].how, "changed"))
            ck_assert_int_eq(rename(saved, test_path(a, "lse.npy")), 0);
        else if (!strcmp(bad[k].how, "extra"))
            ck_assert_int_eq(unlink(test_path(a, "p.npy")), 0);
        else if (!strcmp(bad[k].how, "dir"))
            ck_assert_int_eq(rmdir(test_path(a, MARKER)), 0);
        if (strcmp(bad[k].how, "dir")) {
            FILE *f = fopen(test_path(a, MARKER), "w");
            fputs(marker, f);
            fclose(f);
        }
    }
    /* without a marker: judged as it is */
    o = test_cli_run(tmp, (const char *[]){"check", a, "--precision", "f32", NULL});
    ck_assert_msg(o.code == 0, "unmarked set: exit %d: %s%s", o.code, o.out, o.err);
    test_outcome_free(&o);
    free(marker);
}
END_TEST

/* The marker names the run that wrote the set ("writer": "ref" or "opt"), and `smattn
 * check` skips the oracle's own outputs with a reason that says so (they would pass, telling
 * nothing of a kernel: say one that wrote nothing over them); the built-in kernel's are
 * judged; a marker naming another writer is the marker's error. */
START_TEST(check_skips_the_oracles_own_outputs)
{
    NEED_CLI();
    char a[128], b[128];
    make_cases(a, b, sizeof a);
    test_outcome o = test_cli_run(tmp, (const char *[]){"ref", a, a, "--dtype", "f32", NULL});
    ck_assert_msg(o.code == 0, "ref: %s", o.err);
    test_outcome_free(&o);
    char *marker = test_slurp(test_path(a, MARKER));
    ck_assert_msg(strstr(marker, "\"writer\": \"ref\""), "%s", marker);
    free(marker);
    char err[600], writer[8];
    ck_assert_msg(smattn_case_outputs_verify_writer(a, writer, sizeof writer, err, sizeof err) == 0,
                  "%s", err);
    ck_assert_str_eq(writer, "ref");
    o = test_cli_run(tmp, (const char *[]){"check", a, "--precision", "f32", NULL});
    ck_assert_msg(o.code == 1 &&
                      strstr(o.out, "1 holding the oracle's own outputs (smattn ref wrote them)") &&
                      strstr(o.out, "NOT CONFORMING"),
                  "ref's set: exit %d: %s%s", o.code, o.out, o.err);
    test_outcome_free(&o);
    o = test_cli_run(tmp, (const char *[]){"opt", a, a, NULL});
    ck_assert_msg(o.code == 0, "opt: %s", o.err);
    test_outcome_free(&o);
    marker = test_slurp(test_path(a, MARKER));
    ck_assert_msg(strstr(marker, "\"writer\": \"opt\""), "%s", marker);
    o = test_cli_run(tmp, (const char *[]){"check", a, "--precision", "f32", NULL});
    ck_assert_msg(o.code == 0, "opt's set: exit %d: %s%s", o.code, o.out, o.err);
    test_outcome_free(&o);
    char *w = strstr(marker, "\"opt\"");
    memcpy(w, "\"me!\"", 5);
    FILE *f = fopen(test_path(a, MARKER), "w");
    fputs(marker, f);
    fclose(f);
    free(marker);
    o = test_cli_run(tmp, (const char *[]){"check", a, "--precision", "f32", NULL});
    ck_assert_msg(o.code == 1 && strstr(o.out, ".smattn-set: \"writer\" is not"),
                  "another writer: exit %d: %s%s", o.code, o.out, o.err);
    test_outcome_free(&o);
}
END_TEST

Suite *case_out_suite(void);
Suite *case_out_suite(void)
{
    Suite *s = suite_create("case_out");
    TCase *tc = tcase_create("case_out");
    tcase_set_timeout(tc, 120);
    tcase_add_checked_fixture(tc, setup, teardown);
    tcase_add_test(tc, killed_runs_leave_a_whole_set);
    tcase_add_test(tc, racing_runs_leave_one_set);
    tcase_add_test(tc, stale_temporaries_removed_by_the_next_run);
    tcase_add_test(tc, sticky_out_refused_before_any_change);
    tcase_add_test(tc, check_judges_whole_sets_only);
    tcase_add_test(tc, check_skips_the_oracles_own_outputs);
    suite_add_tcase(s, tc);
    return s;
}
