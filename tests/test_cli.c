/* SPDX-License-Identifier: MIT */
/* test_cli.c: the smattn tool as a user runs it (SMATTN_CLI): bad input gives exit 2, one
 * stderr line and no output; good runs write .npy files the reader accepts; opt agrees
 * with ref on every ISA the CPU has; demo replays golden vectors bit for bit. */
#define _DEFAULT_SOURCE   /* wait4: the child's peak memory */
#define _XOPEN_SOURCE 700 /* posix_openpt: a terminal for the progress bar */
#include <check.h>
#include <dirent.h>
#include <fcntl.h>
#include <grp.h>
#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/time.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "tests/support/cli_run.h"
#include "tests/support/fs.h"
#include "io/npy.h"
#include "smattn.h"

/* `smattn opt` against `smattn ref` (f64): a loose absolute tolerance for O, LSE and P of
 * the f32 cases below (|V| <= 1, scores of a few units), a few hundred f32 ulps; the
 * kernel's real bound is checked by the opt suite. */
#define CLI_OPT_TOL 1e-4

/* ---- fixtures -------------------------------------------------------------------------- */

static char tmp[64];

static void setup(void)
{
    snprintf(tmp, sizeof tmp, "/tmp/smattn_cli_XXXXXX");
    ck_assert_ptr_nonnull(mkdtemp(tmp));
}

static void teardown(void)
{
    test_rm_tree(tmp);
}

static const char *cli(void)
{
    return getenv("SMATTN_CLI");
}

static char *path_in(const char *a, const char *b)
{
    static char p[4][512];
    static int k;
    k = (k + 1) % 4;
    snprintf(p[k], sizeof p[k], "%s/%s", a, b);
    return p[k];
}

static char *read_all(const char *path)
{
    FILE *f = fopen(path, "rb");
    ck_assert_ptr_nonnull(f);
    size_t cap = 1 << 20;
    char *buf = calloc(1, cap + 1);
    size_t n = fread(buf, 1, cap, f);
    buf[n] = '\0';
    fclose(f);
    return buf;
}

typedef struct run_result {
    int status; /* exit code, or -1 if killed by a signal */
    char *out, *err;
    long maxrss_kib; /* the child's peak resident memory */
} run_result;

/* A file size limit for the next runs' child (RLIMIT_FSIZE, SIGXFSZ ignored: a write beyond
 * it fails with EFBIG), 0 for none: a full disk on demand. */
static long run_fsize_limit;
static int run_xfsz_default; /* leave SIGXFSZ at its default (kill) under run_fsize_limit */
/* Run the next children as user and group 65534 (nobody) when the tests run as root, so
 * that permissions apply to them. nobody may not be able to reach the checkout (a clone
 * under /root or a 0700 folder), so such a child runs a copy of the CLI that
 * copy_cli_for_nobody() put in a world-readable folder of the test's own. */
static int run_as_nobody;
static char *nobody_cli; /* that copy (malloc'd), or NULL */
/* Run the next children in this directory when set (NULL: the runner's). */
static const char *run_cwd;

/* Run SMATTN_CLI with args (NULL-terminated), capturing stdout and stderr. */
static run_result run(const char *const *args)
{
    char *op = strdup(path_in(tmp, ".stdout")), *ep = strdup(path_in(tmp, ".stderr"));
    const char *argv[16];
    int n = 0;
    argv[n++] = run_as_nobody && nobody_cli ? nobody_cli : cli();
    while (*args && n < 15)
        argv[n++] = *args++;
    argv[n] = NULL;
    pid_t pid = fork();
    ck_assert_int_ge(pid, 0);
    if (pid == 0) {
        int o = open(op, O_WRONLY | O_CREAT | O_TRUNC, 0600);
        int e = open(ep, O_WRONLY | O_CREAT | O_TRUNC, 0600);
        if (o < 0 || e < 0 || dup2(o, 1) < 0 || dup2(e, 2) < 0)
            _exit(127);
        if (run_cwd && chdir(run_cwd) != 0)
            _exit(127);
        if (run_as_nobody && getuid() == 0 &&
            (setgroups(0, NULL) != 0 || setgid(65534) != 0 || setuid(65534) != 0))
            _exit(127);
        if (run_fsize_limit) {
            struct rlimit rl = {(rlim_t)run_fsize_limit, (rlim_t)run_fsize_limit};
            signal(SIGXFSZ, run_xfsz_default ? SIG_DFL : SIG_IGN);
            if (setrlimit(RLIMIT_FSIZE, &rl) != 0)
                _exit(127);
        }
        execv(argv[0], (char *const *)(uintptr_t)argv);
        _exit(127);
    }
    int ws;
    struct rusage ru;
    ck_assert_int_eq(wait4(pid, &ws, 0, &ru), pid);
    run_result r;
    r.maxrss_kib = ru.ru_maxrss;
    r.status = WIFEXITED(ws) ? WEXITSTATUS(ws) : -1;
    r.out = read_all(op);
    r.err = read_all(ep);
    unlink(op);
    unlink(ep);
    free(op);
    free(ep);
    return r;
}

static void free_result(run_result *r)
{
    free(r->out);
    free(r->err);
}

/* Make the next run_as_nobody children run a copy of the CLI in dir (which the caller
 * made reachable by everyone): the checkout's own binary may lie below a folder that
 * nobody cannot enter. Undone by forget_cli_copy(). */
static void copy_cli_for_nobody(const char *dir)
{
    free(nobody_cli);
    nobody_cli = strdup(test_copy_public(dir, cli()));
}

static void forget_cli_copy(void)
{
    free(nobody_cli);
    nobody_cli = NULL;
}

static double now_seconds(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

static int count_lines(const char *s)
{
    int n = 0;
    for (; *s; s++)
        n += *s == '\n';
    return n;
}

/* Bad input: exit 2, exactly one stderr line naming `needle`, and no OUT directory. */
static void expect_bad(const char *const *args, const char *needle, const char *out)
{
    run_result r = run(args);
    ck_assert_msg(r.status == 2, "exit %d for %s; stderr: %s", r.status, needle, r.err);
    ck_assert_msg(count_lines(r.err) == 1, "stderr not one line: '%s'", r.err);
    ck_assert_msg(strstr(r.err, needle) != NULL, "stderr '%s' lacks '%s'", r.err, needle);
    struct stat st;
    if (out)
        ck_assert_msg(stat(out, &st) != 0, "output %s was created", out);
    free_result(&r);
}

static void put(const char *dir, const char *name, smattn_npy_type t, int rank,
                const int64_t *shape, const void *data)
{
    char err[256];
    ck_assert_msg(smattn_npy_write(path_in(dir, name), t, rank, shape, data, err, sizeof err) == 0,
                  "%s", err);
}

static void put_text(const char *dir, const char *name, const char *text)
{
    FILE *f = fopen(path_in(dir, name), "wb");
    ck_assert_ptr_nonnull(f);
    fputs(text, f);
    fclose(f);
}

/* The seed example of SPEC: q = 1, keys [2,1,-1,3] with key 3 masked, V = [10,20,100,nan]. */
static char *make_case(const char *name)
{
    static char dir[512];
    snprintf(dir, sizeof dir, "%s/%s", tmp, name);
    ck_assert_int_eq(mkdir(dir, 0700), 0);
    double q[1] = {1}, k[4] = {2, 1, -1, 3}, v[4] = {10, 20, 100, 0};
    unsigned char m[4] = {1, 1, 1, 0};
    put(dir, "q.npy", SMATTN_NPY_F64, 3, (int64_t[]){1, 1, 1}, q);
    put(dir, "k.npy", SMATTN_NPY_F64, 3, (int64_t[]){4, 1, 1}, k);
    put(dir, "v.npy", SMATTN_NPY_F64, 3, (int64_t[]){4, 1, 1}, v);
    put(dir, "mask.npy", SMATTN_NPY_BOOL, 1, (int64_t[]){4}, m);
    put_text(dir, "case.json", "{\"scale\": 1}");
    return dir;
}

#define NEED_CLI()                                                                                 \
    do {                                                                                           \
        if (!cli()) {                                                                              \
            fprintf(stderr, "test_cli: SMATTN_CLI not set (run via make check-unit)\n");           \
            return;                                                                                \
        }                                                                                          \
    } while (0)

/* ---- tests ----------------------------------------------------------------------------- */

START_TEST(usage_errors)
{
    NEED_CLI();
    char *c = strdup(make_case("c"));
    char *out = strdup(path_in(tmp, "out"));
    expect_bad((const char *[]){NULL}, "missing command", NULL);
    expect_bad((const char *[]){"frobnicate", NULL}, "unknown command 'frobnicate'", NULL);
    expect_bad((const char *[]){"ref", NULL}, "missing CASE and OUT", NULL);
    expect_bad((const char *[]){"ref", c, NULL}, "missing OUT", NULL);
    expect_bad((const char *[]){"ref", c, out, "extra", NULL}, "unexpected argument", out);
    expect_bad((const char *[]){"ref", c, out, "--dtype", "f8", NULL}, "--dtype 'f8'", out);
    expect_bad((const char *[]){"ref", c, out, "--dtype", NULL}, "--dtype needs a value", out);
    expect_bad((const char *[]){"ref", c, out, "--threads", "-1", NULL}, "--threads", out);
    expect_bad((const char *[]){"ref", c, out, "--threads=x", NULL}, "--threads", out);
    expect_bad((const char *[]){"ref", c, out, "--wieghts", NULL}, "unknown option", out);
    expect_bad((const char *[]){"demo", "a", "b", NULL}, "too many arguments", NULL);
    expect_bad((const char *[]){"demo", path_in(tmp, "nodir"), NULL}, "demo:", NULL);
    ck_assert_int_eq(mkdir(path_in(tmp, "empty"), 0700), 0);
    expect_bad((const char *[]){"demo", path_in(tmp, "empty"), NULL}, "no *.json vectors", NULL);
    free(c);
    free(out);
}
END_TEST

START_TEST(bad_cases_give_one_line_and_no_output)
{
    NEED_CLI();
    char *c = strdup(make_case("c"));
    char *out = strdup(path_in(tmp, "out"));
    expect_bad((const char *[]){"ref", path_in(tmp, "nocase"), out, NULL}, "no such case directory",
               out);
    put_text(c, "case.json", "{\"scale\": 1, \"casual\": \"none\"}");
    expect_bad((const char *[]){"ref", c, out, NULL}, "case.json: unknown key \"casual\"", out);
    put_text(c, "case.json", "{\"scale\": ");
    expect_bad((const char *[]){"ref", c, out, NULL}, "case.json: malformed JSON", out);
    put_text(c, "case.json", "{}");
    double k[8] = {0};
    put(c, "k.npy", SMATTN_NPY_F64, 3, (int64_t[]){4, 1, 2}, k);
    expect_bad((const char *[]){"ref", c, out, NULL},
               "k.npy: shape [4,1,2] does not match q.npy's head dim 1", out);
    put_text(c, "k.npy", "\x93NUMPY\x01\x00\xff\xff{'descr'");
    expect_bad((const char *[]){"ref", c, out, NULL}, "k.npy: truncated", out);
    put(c, "k.npy", SMATTN_NPY_F64, 3, (int64_t[]){4, 1, 1}, k);
    put(c, "bias.npy", SMATTN_NPY_F64, 1, (int64_t[]){3}, k);
    expect_bad((const char *[]){"ref", c, out, NULL}, "bias.npy: shape [3] does not broadcast",
               out);
    /* OUT exists as a file. */
    put_text(tmp, "afile", "x");
    expect_bad((const char *[]){"ref", c, path_in(tmp, "afile"), NULL}, "not a directory", NULL);
    free(c);
    free(out);
}
END_TEST

/* A .npy file whose header claims `bytes` of data that are a hole (sparse): costs nothing
 * on disk, but reading it would fill that much memory. */
static void put_sparse(const char *dir, const char *name, const char *descr, const char *shape,
                       long long bytes)
{
    char dict[128], hdr[192];
    int n = snprintf(dict, sizeof dict, "{'descr': '%s', 'fortran_order': False, 'shape': %s, }",
                     descr, shape);
    int total = (10 + n + 1 + 63) / 64 * 64; /* magic, version, length, dict, '\n' */
    memcpy(hdr, "\x93NUMPY\x01\x00", 8);
    hdr[8] = (char)((total - 10) & 0xff), hdr[9] = (char)((total - 10) >> 8);
    memset(hdr + 10, ' ', (size_t)(total - 10));
    memcpy(hdr + 10, dict, (size_t)n);
    hdr[total - 1] = '\n';
    int fd = open(path_in(dir, name), O_WRONLY | O_CREAT | O_TRUNC, 0600);
    ck_assert_int_ge(fd, 0);
    ck_assert_int_eq(write(fd, hdr, (size_t)total), total);
    ck_assert_int_eq(ftruncate(fd, (off_t)(total + bytes)), 0);
    close(fd);
}

/* Every header and case.json are checked against each other before any data is
 * read. A 2 GiB v.npy (a hole) whose KV head count differs from k.npy's, a 2 GiB mask.npy
 * that does not broadcast, and (opt) a 1 GiB f64 q.npy beside a 2 GiB k.npy are reported
 * by a child that never grew past 256 MiB (reading them first fills GiBs). */
START_TEST(headers_checked_before_data)
{
    NEED_CLI();
    char *c = strdup(make_case("c"));
    char *out = strdup(path_in(tmp, "out"));
    put_sparse(c, "v.npy", "<f4", "(4, 2, 67108864)", 4LL * 2 * 67108864 * 4);
    run_result r = run((const char *[]){"ref", c, out, NULL});
    ck_assert_msg(r.status == 2, "exit %d: %s", r.status, r.err);
    ck_assert_msg(strstr(r.err, "v.npy: shape [4,2,67108864] does not match k.npy's KV head count"),
                  "%s", r.err);
    ck_assert_msg(r.maxrss_kib < 256 * 1024, "peak %ld KiB: the data were read", r.maxrss_kib);
    free_result(&r);
    double v[4] = {10, 20, 100, 0};
    put(c, "v.npy", SMATTN_NPY_F64, 3, (int64_t[]){4, 1, 1}, v);
    put_sparse(c, "mask.npy", "|b1", "(2147483648,)", 2147483648LL);
    r = run((const char *[]){"ref", c, out, NULL});
    ck_assert_msg(r.status == 2, "exit %d: %s", r.status, r.err);
    ck_assert_msg(strstr(r.err, "mask.npy: shape [2147483648] does not broadcast"), "%s", r.err);
    ck_assert_msg(r.maxrss_kib < 256 * 1024, "peak %ld KiB: the data were read", r.maxrss_kib);
    free_result(&r);
    /* opt refuses f64 inputs from the headers too: the 2 GiB k.npy is not read */
    unlink(path_in(c, "mask.npy"));
    put_sparse(c, "k.npy", "<f4", "(4, 1, 134217728)", 4LL * 134217728 * 4);
    put_sparse(c, "q.npy", "<f8", "(1, 1, 134217728)", 134217728LL * 8);
    r = run((const char *[]){"opt", c, out, NULL});
    ck_assert_msg(r.status == 2, "exit %d: %s", r.status, r.err);
    ck_assert_msg(strstr(r.err, "opt: q.npy is f64"), "%s", r.err);
    ck_assert_msg(r.maxrss_kib < 256 * 1024, "peak %ld KiB: the data were read", r.maxrss_kib);
    free_result(&r);
    /* An output too large to hold (p.npy of [1, 2^26, 2^26] f64: 4.5e15
     * elements) is found from the headers, not after reading 768 MiB of q, k, v */
    char *big = strdup(path_in(tmp, "bigp"));
    ck_assert_int_eq(mkdir(big, 0700), 0);
    put_sparse(big, "q.npy", "<f4", "(67108864, 1, 1)", 67108864LL * 4);
    put_sparse(big, "k.npy", "<f4", "(67108864, 1, 1)", 67108864LL * 4);
    put_sparse(big, "v.npy", "<f4", "(67108864, 1, 1)", 67108864LL * 4);
    r = run((const char *[]){"ref", big, out, "--weights", NULL});
    ck_assert_msg(r.status == 2, "exit %d: %s", r.status, r.err);
    ck_assert_msg(strstr(r.err, "p.npy would need 4.504e+15 elements") &&
                      strstr(r.err, "too large"), "%s", r.err);
    ck_assert_msg(r.maxrss_kib < 256 * 1024, "peak %ld KiB: the data were read", r.maxrss_kib);
    free_result(&r);
    free(big);
    struct stat st;
    ck_assert(stat(out, &st) != 0);
    free(c), free(out);
}
END_TEST

static void check_npy(const char *path, smattn_npy_type t, int rank, const int64_t *shape)
{
    smattn_npy a;
    char err[256];
    ck_assert_msg(smattn_npy_read(path, &a, err, sizeof err) == 0, "%s: %s", path, err);
    ck_assert_int_eq(a.type, t);
    ck_assert_int_eq(a.rank, rank);
    for (int r = 0; r < rank; r++)
        ck_assert_int_eq(a.shape[r], shape[r]);
    smattn_npy_free(&a);
}

/* Every entry of dir (names sorted, each file's bytes hashed) as one string, to compare
 * a directory before and after a run. */
static char *dir_state(const char *dir)
{
    struct dirent **ents;
    int n = scandir(dir, &ents, NULL, alphasort);
    ck_assert_int_ge(n, 0);
    size_t cap = 64 + (size_t)n * 300;
    char *s = calloc(1, cap);
    for (int k = 0; k < n; k++) {
        const char *name = ents[k]->d_name;
        unsigned long long h = 1469598103934665603ull;
        struct stat st;
        ck_assert_int_eq(lstat(path_in(dir, name), &st), 0);
        if (S_ISREG(st.st_mode)) {
            FILE *f = fopen(path_in(dir, name), "rb");
            int ch;
            while (f && (ch = fgetc(f)) != EOF)
                h = (h ^ (unsigned)ch) * 1099511628211ull;
            if (f)
                fclose(f);
        }
        snprintf(s + strlen(s), cap - strlen(s), "%s:%c:%llx\n", name,
                 S_ISDIR(st.st_mode) ? 'd' : 'f', h);
        free(ents[k]);
    }
    free(ents);
    return s;
}

/* A run that fails leaves OUT exactly as it was (here: state), one line on stderr. */
static void expect_bad_keeps(const char *const *args, const char *needle, const char *out,
                             const char *state)
{
    expect_bad(args, needle, NULL);
    char *now = dir_state(out);
    ck_assert_msg(strcmp(now, state) == 0, "OUT changed:\nbefore\n%safter\n%s", state, now);
    free(now);
}

/* OUT's outputs are a set written whole or not at all. A target that is a
 * directory (lse.npy), a full disk while p.npy is written: exit 2, OUT as it was (the old
 * o.npy not replaced, no temporaries). A run without --weights removes the p.npy of an
 * earlier run, a softmax removes o.npy; other files in OUT stay. */
START_TEST(outputs_committed_as_a_set)
{
    NEED_CLI();
    char *c = strdup(make_case("c"));
    char *out = strdup(path_in(tmp, "out"));
    run_result r = run((const char *[]){"ref", c, out, "--weights", NULL});
    ck_assert_msg(r.status == 0, "exit %d: %s", r.status, r.err);
    free_result(&r);
    put_text(out, "notes.txt", "mine");
    ck_assert_int_eq(unlink(path_in(out, "lse.npy")), 0);
    ck_assert_int_eq(mkdir(path_in(out, "lse.npy"), 0700), 0);
    char *state = dir_state(out);
    expect_bad_keeps((const char *[]){"ref", c, out, "--dtype", "f32", NULL},
                     "/lse.npy: is a directory where a run writes an output or removes a stale one",
                     out, state);
    free(state);
    ck_assert_int_eq(rmdir(path_in(out, "lse.npy")), 0);
    /* no --weights: the earlier p.npy goes */
    r = run((const char *[]){"ref", c, out, "--dtype", "f32", NULL});
    ck_assert_msg(r.status == 0, "exit %d: %s", r.status, r.err);
    free_result(&r);
    struct stat st;
    ck_assert_msg(stat(path_in(out, "p.npy"), &st) != 0, "stale p.npy kept");
    check_npy(path_in(out, "o.npy"), SMATTN_NPY_F32, 3, (int64_t[]){1, 1, 1});
    check_npy(path_in(out, "lse.npy"), SMATTN_NPY_F32, 2, (int64_t[]){1, 1});
    /* a softmax into the same OUT: o.npy goes, p.npy and lse.npy come */
    char *s = strdup(path_in(tmp, "sm"));
    ck_assert_int_eq(mkdir(s, 0700), 0);
    double x[3] = {2, 1, -1};
    put(s, "x.npy", SMATTN_NPY_F64, 3, (int64_t[]){1, 1, 3}, x);
    r = run((const char *[]){"ref", s, out, NULL});
    ck_assert_msg(r.status == 0, "exit %d: %s", r.status, r.err);
    free_result(&r);
    ck_assert_msg(stat(path_in(out, "o.npy"), &st) != 0, "stale o.npy kept");
    check_npy(path_in(out, "p.npy"), SMATTN_NPY_F64, 3, (int64_t[]){1, 1, 3});
    ck_assert_int_eq(stat(path_in(out, "notes.txt"), &st), 0);
    /* a full disk while the 600-key p.npy is written (o and lse fit): nothing changes */
    char *big = strdup(path_in(tmp, "big"));
    ck_assert_int_eq(mkdir(big, 0700), 0);
    static double kv[600];
    put(big, "q.npy", SMATTN_NPY_F64, 3, (int64_t[]){1, 1, 1}, kv);
    put(big, "k.npy", SMATTN_NPY_F64, 3, (int64_t[]){600, 1, 1}, kv);
    put(big, "v.npy", SMATTN_NPY_F64, 3, (int64_t[]){600, 1, 1}, kv);
    r = run((const char *[]){"ref", big, out, NULL});
    ck_assert_msg(r.status == 0, "exit %d: %s", r.status, r.err);
    free_result(&r);
    state = dir_state(out);
    run_fsize_limit = 4096;
    expect_bad_keeps((const char *[]){"ref", big, out, "--weights", NULL}, "p.npy: write error",
                     out, state);
    /* the same with SIGXFSZ at its default disposition, as in a shell under ulimit -f: it
     * killed the CLI (exit 153) and left .p.npy.XXXXXX in OUT; now the CLI ignores it */
    run_xfsz_default = 1;
    expect_bad_keeps((const char *[]){"ref", big, out, "--weights", NULL}, "p.npy: write error",
                     out, state);
    run_xfsz_default = 0;
    run_fsize_limit = 0;
    free(state);
    free(big), free(s), free(c), free(out);
}
END_TEST

/* OUT is checked before any work: before the case is even read (the case here
 * is bad too, and OUT is what is reported), a missing parent, a path through a file, a
 * directory that takes no files (/proc/self, even for root), a file. Nothing is created. */
START_TEST(out_checked_before_work)
{
    NEED_CLI();
    char *c = strdup(make_case("c"));
    put_text(c, "case.json", "{\"scale\": }");
    put_text(tmp, "afile", "x");
    expect_bad((const char *[]){"ref", c, path_in(tmp, "nope/out"), NULL},
               "nope/out: cannot be created: its parent", path_in(tmp, "nope"));
    expect_bad((const char *[]){"opt", c, path_in(tmp, "afile/out"), NULL},
               "afile/out: Not a directory", NULL);
    expect_bad((const char *[]){"ref", c, "/proc/self", NULL}, "/proc/self: cannot write into it",
               NULL);
    expect_bad((const char *[]){"ref", c, path_in(tmp, "afile"), NULL},
               "afile: exists and is not a directory", NULL);
    /* the review: a dangling symlink said "cannot create directory: File exists" */
    ck_assert_int_eq(symlink(path_in(tmp, "gone"), path_in(tmp, "dangling")), 0);
    expect_bad((const char *[]){"ref", c, path_in(tmp, "dangling"), NULL},
               "dangling: is a dangling symbolic link", NULL);
    free(c);
}
END_TEST

/* A path holding a newline (or another control character) gives one line,
 * the path quoted with the newline escaped: CASE, OUT, check's and demo's paths. */
START_TEST(paths_with_newlines_one_line)
{
    NEED_CLI();
    char *c = strdup(make_case("c"));
    char *nl = strdup(path_in(tmp, "no\ncase"));
    expect_bad((const char *[]){"ref", nl, path_in(tmp, "out"), NULL}, "no\\ncase'", NULL);
    expect_bad((const char *[]){"opt", c, path_in(nl, "out"), NULL}, "no\\ncase", NULL);
    expect_bad((const char *[]){"check", nl, NULL}, "no\\ncase", NULL);
    /* the review: its header went to stdout with the raw newline before the error */
    run_result r = run((const char *[]){"check", nl, NULL});
    ck_assert_msg(r.status == 2 && !strstr(r.out, "no\ncase"), "stdout '%s'", r.out);
    free_result(&r);
    expect_bad((const char *[]){"demo", nl, NULL}, "no\\ncase'", NULL);
    expect_bad((const char *[]){"ref", c, path_in(tmp, "out"), "--threads", "1\n2", NULL},
               "--threads '1\\n2'", NULL);
    /* a case directory whose name holds a tab and a newline: its errors quote it too */
    char *odd = strdup(path_in(tmp, "c\t\nd"));
    ck_assert_int_eq(rename(c, odd), 0);
    put_text(odd, "case.json", "{\"scale\": 1, \"x\": 1}");
    expect_bad((const char *[]){"ref", odd, path_in(tmp, "out"), NULL}, "unknown key", NULL);
    unlink(path_in(odd, "q.npy"));
    put_text(odd, "case.json", "{}");
    expect_bad((const char *[]){"ref", odd, path_in(tmp, "out"), NULL}, "c\\t\\nd': no q.npy",
               NULL);
    free(odd), free(nl), free(c);
}
END_TEST

/* A case directory that cannot be read is named as such (not "case.json: Permission
 * denied"). Root ignores permissions, so then the child runs as nobody, from a copy of the
 * CLI that nobody can reach wherever the checkout lies. */
START_TEST(unreadable_case_dir_named)
{
    NEED_CLI();
    char *c = strdup(make_case("c"));
    char *pub = strdup(path_in(tmp, "pub"));
    ck_assert_int_eq(mkdir(pub, 0777), 0);
    ck_assert_int_eq(chmod(pub, 0777), 0);
    ck_assert_int_eq(chmod(tmp, 0755), 0);
    ck_assert_int_eq(chmod(c, 0), 0);
    copy_cli_for_nobody(pub);
    run_as_nobody = 1;
    expect_bad((const char *[]){"ref", c, path_in(pub, "out"), NULL},
               "/c: cannot read the case directory (case.json: Permission denied)",
               path_in(pub, "out"));
    /* the review: an unreadable input file named only "k.npy"; its directory is named too */
    ck_assert_int_eq(chmod(c, 0755), 0);
    const char *files[5] = {"q.npy", "k.npy", "v.npy", "mask.npy", "case.json"};
    for (int k = 0; k < 5; k++)
        ck_assert_int_eq(chmod(path_in(c, files[k]), k == 1 ? 0 : 0644), 0);
    expect_bad((const char *[]){"ref", c, path_in(pub, "out"), NULL},
               "/c/k.npy: cannot open: Permission denied", path_in(pub, "out"));
    ck_assert_int_eq(chmod(path_in(c, "k.npy"), 0644), 0);
    run_as_nobody = 0;
    forget_cli_copy();
    ck_assert_int_eq(chmod(c, 0700), 0);
    /* a path through a file: not "no such case directory" */
    put_text(tmp, "afile", "x");
    expect_bad((const char *[]){"ref", path_in(tmp, "afile/c"), path_in(pub, "out"), NULL},
               "afile/c: cannot read the case directory: Not a directory", path_in(pub, "out"));
    free(pub), free(c);
}
END_TEST

START_TEST(good_runs_write_npy)
{
    NEED_CLI();
    char *c = strdup(make_case("c"));
    char *out = strdup(path_in(tmp, "out"));
    run_result r = run((const char *[]){"ref", c, out, NULL});
    ck_assert_msg(r.status == 0, "exit %d: %s", r.status, r.err);
    ck_assert_str_eq(r.err, "");
    free_result(&r);
    check_npy(path_in(out, "o.npy"), SMATTN_NPY_F64, 3, (int64_t[]){1, 1, 1});
    check_npy(path_in(out, "lse.npy"), SMATTN_NPY_F64, 2, (int64_t[]){1, 1});
    struct stat st;
    ck_assert(stat(path_in(out, "p.npy"), &st) != 0);
    /* The masked row of the seeds: O = 15.75... in f64 (key 3 never read). */
    smattn_npy a;
    char err[256];
    ck_assert(smattn_npy_read(path_in(out, "o.npy"), &a, err, sizeof err) == 0);
    double o = *(double *)a.data;
    ck_assert_msg(o > 15.7 && o < 15.8, "o = %a", o);
    smattn_npy_free(&a);
    /* bf16 with weights, into the same OUT: '<u2' files. */
    r = run((const char *[]){"ref", c, out, "--dtype=bf16", "--weights", "--threads", "2", NULL});
    ck_assert_msg(r.status == 0, "exit %d: %s", r.status, r.err);
    free_result(&r);
    check_npy(path_in(out, "p.npy"), SMATTN_NPY_U16, 3, (int64_t[]){1, 1, 4});
    check_npy(path_in(out, "o.npy"), SMATTN_NPY_U16, 3, (int64_t[]){1, 1, 1});
    /* Softmax: p and lse always. */
    char *s = strdup(path_in(tmp, "sm"));
    ck_assert_int_eq(mkdir(s, 0700), 0);
    double x[6] = {2, 1, -1, 0, 0, 0};
    put(s, "x.npy", SMATTN_NPY_F64, 4, (int64_t[]){1, 1, 2, 3}, x);
    char *so = strdup(path_in(tmp, "smout"));
    r = run((const char *[]){"ref", s, so, "--dtype", "f32", NULL});
    ck_assert_msg(r.status == 0, "exit %d: %s", r.status, r.err);
    free_result(&r);
    check_npy(path_in(so, "p.npy"), SMATTN_NPY_F32, 4, (int64_t[]){1, 1, 2, 3});
    check_npy(path_in(so, "lse.npy"), SMATTN_NPY_F32, 3, (int64_t[]){1, 1, 2});
    free(so);
    free(s);
    free(c);
    free(out);
}
END_TEST

/* An attention case the kernel takes (3-D arrays, B = 1; q, k f32, v f16) with GQA and
 * lower_right causality, and an f32 softmax case; deterministic values in [-1, 1]. */
static void put_rand(const char *dir, const char *name, smattn_dtype t, int rank,
                     const int64_t *shape, unsigned *seed)
{
    int64_t n = 1;
    for (int r = 0; r < rank; r++)
        n *= shape[r];
    void *x = malloc((size_t)n * smattn_dtype_size(t));
    for (int64_t i = 0; i < n; i++) {
        *seed = *seed * 1103515245u + 12345u;
        smattn_store(x, t, i, (double)((*seed >> 8) & 0xffff) / 32768.0 - 1.0);
    }
    put(dir, name, t == SMATTN_F16 ? SMATTN_NPY_F16 : SMATTN_NPY_F32, rank, shape, x);
    free(x);
}

static char *make_f32_cases(void)
{
    static char dir[512];
    snprintf(dir, sizeof dir, "%s/f32", tmp);
    ck_assert_int_eq(mkdir(dir, 0700), 0);
    unsigned seed = 7;
    put_rand(dir, "q.npy", SMATTN_F32, 3, (int64_t[]){5, 4, 8}, &seed);
    put_rand(dir, "k.npy", SMATTN_F32, 3, (int64_t[]){7, 2, 8}, &seed);
    put_rand(dir, "v.npy", SMATTN_F16, 3, (int64_t[]){7, 2, 6}, &seed);
    put_text(dir, "case.json", "{\"causal\": \"lower_right\"}");
    char *sm = path_in(tmp, "f32sm");
    ck_assert_int_eq(mkdir(sm, 0700), 0);
    put_rand(sm, "x.npy", SMATTN_F32, 4, (int64_t[]){1, 3, 2, 9}, &seed);
    return dir;
}

/* Every element of OUT_A/name and OUT_B/name (same shape; any float dtype, '<u2' read as
 * the bfloat16 bits smattn writes) within tol. */
static void expect_close(const char *a_dir, const char *b_dir, const char *name, double tol)
{
    smattn_npy a, b;
    char err[256];
    ck_assert_msg(smattn_npy_read(path_in(a_dir, name), &a, err, sizeof err) == 0, "%s", err);
    ck_assert_msg(smattn_npy_read(path_in(b_dir, name), &b, err, sizeof err) == 0, "%s", err);
    ck_assert_int_eq(a.rank, b.rank);
    for (int r = 0; r < a.rank; r++)
        ck_assert_int_eq(a.shape[r], b.shape[r]);
    static const smattn_dtype dt[] = {[SMATTN_NPY_F64] = SMATTN_F64,
                                      [SMATTN_NPY_F32] = SMATTN_F32,
                                      [SMATTN_NPY_F16] = SMATTN_F16,
                                      [SMATTN_NPY_U16] = SMATTN_BF16};
    ck_assert(a.type <= SMATTN_NPY_U16 && b.type <= SMATTN_NPY_U16);
    for (int64_t e = 0; e < a.count; e++) {
        double x = smattn_load(a.data, dt[a.type], e), y = smattn_load(b.data, dt[b.type], e);
        ck_assert_msg(fabs(x - y) <= tol, "%s[%lld]: %a vs %a", name, (long long)e, x, y);
    }
    smattn_npy_free(&a);
    smattn_npy_free(&b);
}

START_TEST(opt_matches_ref)
{
    NEED_CLI();
    char *c = strdup(make_f32_cases());
    char *sm = strdup(path_in(tmp, "f32sm"));
    char *ref = strdup(path_in(tmp, "ref")), *refsm = strdup(path_in(tmp, "refsm"));
    run_result r = run((const char *[]){"ref", c, ref, "--weights", NULL});
    ck_assert_msg(r.status == 0, "ref: exit %d: %s", r.status, r.err);
    free_result(&r);
    r = run((const char *[]){"ref", sm, refsm, NULL});
    ck_assert_msg(r.status == 0, "ref: exit %d: %s", r.status, r.err);
    free_result(&r);
    static const char *const isas[] = {"scalar", "avx2", "avx512"};
    for (int k = 0; k < 3; k++) {
        if (!smattn_opt_isa_available(isas[k]))
            continue;
        char *out = strdup(path_in(tmp, isas[k]));
        r = run(
            (const char *[]){"opt", c, out, "--isa", isas[k], "--threads", "2", "--weights", NULL});
        ck_assert_msg(r.status == 0, "opt --isa %s: exit %d: %s", isas[k], r.status, r.err);
        ck_assert_str_eq(r.err, "");
        free_result(&r);
        check_npy(path_in(out, "o.npy"), SMATTN_NPY_F32, 3, (int64_t[]){5, 4, 6});
        check_npy(path_in(out, "lse.npy"), SMATTN_NPY_F32, 2, (int64_t[]){4, 5});
        check_npy(path_in(out, "p.npy"), SMATTN_NPY_F32, 3, (int64_t[]){4, 5, 7});
        expect_close(out, ref, "o.npy", CLI_OPT_TOL);
        expect_close(out, ref, "lse.npy", CLI_OPT_TOL);
        expect_close(out, ref, "p.npy", CLI_OPT_TOL);
        /* softmax, into a fresh OUT */
        char *sout = strdup(path_in(out, "sm"));
        r = run((const char *[]){"opt", sm, sout, "--isa", isas[k], NULL});
        ck_assert_msg(r.status == 0, "opt softmax --isa %s: exit %d: %s", isas[k], r.status, r.err);
        free_result(&r);
        check_npy(path_in(sout, "p.npy"), SMATTN_NPY_F32, 4, (int64_t[]){1, 3, 2, 9});
        expect_close(sout, refsm, "p.npy", CLI_OPT_TOL);
        expect_close(sout, refsm, "lse.npy", CLI_OPT_TOL);
        free(sout);
        free(out);
    }
    /* without --isa: the active ISA, no P unless asked */
    char *out = strdup(path_in(tmp, "active"));
    r = run((const char *[]){"opt", c, out, NULL});
    ck_assert_msg(r.status == 0, "opt: exit %d: %s", r.status, r.err);
    free_result(&r);
    expect_close(out, ref, "o.npy", CLI_OPT_TOL);
    struct stat st;
    ck_assert(stat(path_in(out, "p.npy"), &st) != 0);
    free(out);
    free(c), free(sm), free(ref), free(refsm);
}
END_TEST

/* SMATTN_ISA naming no ISA is said once on stderr (one line), and the run goes
 * on with the default; a valid one says nothing. */
START_TEST(bogus_isa_env_said_once)
{
    NEED_CLI();
    char *c = strdup(make_f32_cases());
    char *out = strdup(path_in(tmp, "out"));
    setenv("SMATTN_ISA", "bogus", 1);
    run_result r = run((const char *[]){"opt", c, out, NULL});
    unsetenv("SMATTN_ISA");
    ck_assert_msg(r.status == 0, "exit %d: %s", r.status, r.err);
    ck_assert_msg(count_lines(r.err) == 1 && strstr(r.err, "SMATTN_ISA='bogus' is not an ISA"),
                  "stderr '%s'", r.err);
    free_result(&r);
    check_npy(path_in(out, "o.npy"), SMATTN_NPY_F32, 3, (int64_t[]){5, 4, 6});
    /* Not when --isa overrides it (it said "using avx512" while scalar ran),
     * not for --help, and bad input is the only line */
    setenv("SMATTN_ISA", "bogus", 1);
    r = run((const char *[]){"opt", c, out, "--isa", "scalar", NULL});
    ck_assert_msg(r.status == 0 && r.err[0] == '\0', "--isa: exit %d: '%s'", r.status, r.err);
    free_result(&r);
    r = run((const char *[]){"opt", "--help", NULL});
    ck_assert_msg(r.status == 0 && r.err[0] == '\0', "--help: exit %d: '%s'", r.status, r.err);
    free_result(&r);
    r = run((const char *[]){"opt", c, out, "--threads", "x", NULL});
    ck_assert_msg(r.status == 2 && count_lines(r.err) == 1 && !strstr(r.err, "SMATTN_ISA"),
                  "bad input: exit %d: '%s'", r.status, r.err);
    free_result(&r);
    r = run((const char *[]){"opt", path_in(tmp, "nocase"), out, NULL});
    ck_assert_msg(r.status == 2 && count_lines(r.err) == 1 && !strstr(r.err, "SMATTN_ISA"),
                  "bad case: exit %d: '%s'", r.status, r.err);
    free_result(&r);
    unsetenv("SMATTN_ISA");
    setenv("SMATTN_ISA", "scalar", 1);
    r = run((const char *[]){"opt", c, out, NULL});
    unsetenv("SMATTN_ISA");
    ck_assert_msg(r.status == 0 && r.err[0] == '\0', "exit %d: '%s'", r.status, r.err);
    free_result(&r);
    free(c), free(out);
}
END_TEST

/* Run SMATTN_CLI with args and its stderr on a pseudo-terminal (stdout to /dev/null): the
 * exit code, and what the terminal received in *term (malloc'd). */
static int run_on_terminal(const char *const *args, char **term)
{
    int m = posix_openpt(O_RDWR | O_NOCTTY);
    ck_assert_int_ge(m, 0);
    ck_assert(grantpt(m) == 0 && unlockpt(m) == 0);
    char *slave = strdup(ptsname(m));
    const char *argv[16];
    int n = 0;
    argv[n++] = cli();
    while (*args && n < 15)
        argv[n++] = *args++;
    argv[n] = NULL;
    pid_t pid = fork();
    ck_assert_int_ge(pid, 0);
    if (pid == 0) {
        int s = open(slave, O_RDWR | O_NOCTTY), nul = open("/dev/null", O_WRONLY);
        if (s < 0 || nul < 0 || dup2(nul, 1) < 0 || dup2(s, 2) < 0)
            _exit(127);
        close(m);
        execv(argv[0], (char *const *)(uintptr_t)argv);
        _exit(127);
    }
    free(slave);
    size_t cap = 1 << 16, len = 0;
    char *buf = calloc(1, cap + 1);
    ssize_t r;
    while ((r = read(m, buf + len, cap - len)) > 0) /* EIO once the child is gone */
        len += (size_t)r;
    close(m);
    buf[len] = '\0';
    int ws;
    ck_assert_int_eq(waitpid(pid, &ws, 0), pid);
    *term = buf;
    return WIFEXITED(ws) ? WEXITSTATUS(ws) : -1;
}

/* The bar's erase covers the longest line written: the last '\r'-separated segment is
 * blank and at least as long as every bar before it (six-digit counts made a 74-character
 * bar that a fixed 72-space erase left a tail of). */
static void expect_erased(const char *term)
{
    size_t longest = 0, last = 0, blank = 1;
    const char *s = term;
    while (*s) {
        const char *e = strchr(s, '\r');
        size_t n = e ? (size_t)(e - s) : strlen(s);
        if (n) {
            blank = strspn(s, " ") >= n;
            if (!blank && n > longest)
                longest = n;
            last = n;
        }
        s += n + (e ? 1 : 0);
    }
    ck_assert_msg(longest == 0 || (blank && last >= longest), "bar not fully erased: '%s'",
                  term);
}

/* Long oracle work shows a progress bar when stderr is a terminal (here a
 * decode of 32 rows against 16,000 keys on one thread, about 1.2 s: the bar shows from
 * 0.5 s, after each 4 rows), erased at the end; nothing when stderr is not a terminal. */
START_TEST(ref_progress_on_a_terminal)
{
    NEED_CLI();
    char *c = strdup(path_in(tmp, "long"));
    ck_assert_int_eq(mkdir(c, 0700), 0);
    unsigned seed = 11;
    put_rand(c, "q.npy", SMATTN_F32, 3, (int64_t[]){1, 32, 8}, &seed);
    put_rand(c, "k.npy", SMATTN_F32, 3, (int64_t[]){16000, 1, 8}, &seed);
    put_rand(c, "v.npy", SMATTN_F32, 3, (int64_t[]){16000, 1, 8}, &seed);
    char *term;
    double t0 = now_seconds();
    int st = run_on_terminal(
        (const char *[]){"ref", c, path_in(tmp, "out"), "--threads", "1", NULL}, &term);
    double secs = now_seconds() - t0;
    ck_assert_msg(st == 0, "exit %d: %s", st, term);
    ck_assert_msg(secs < 0.8 || (strstr(term, "smattn ref: [") && strstr(term, "rows")),
                  "%.2f s and no progress bar: '%s'", secs, term);
    ck_assert_msg(strlen(term) == 0 || term[strlen(term) - 1] == '\r', "bar not erased: '%s'",
                  term);
    expect_erased(term);
    free(term);
    run_result r = run((const char *[]){"ref", c, path_in(tmp, "out"), "--threads", "1", NULL});
    ck_assert_msg(r.status == 0 && r.err[0] == '\0', "exit %d, stderr '%s'", r.status, r.err);
    free_result(&r);
    free(c);
}
END_TEST

/* A decode (one row) against many keys showed no bar, progress being
 * counted in rows; the oracle now reports within a row. About 1.4 s on one thread. */
START_TEST(ref_progress_within_a_row)
{
    NEED_CLI();
    char *c = strdup(path_in(tmp, "decode"));
    ck_assert_int_eq(mkdir(c, 0700), 0);
    unsigned seed = 12;
    const int64_t T = 500000;
    put_rand(c, "q.npy", SMATTN_F32, 3, (int64_t[]){1, 1, 4}, &seed);
    put_rand(c, "k.npy", SMATTN_F32, 3, (int64_t[]){T, 1, 4}, &seed);
    put_rand(c, "v.npy", SMATTN_F32, 3, (int64_t[]){T, 1, 4}, &seed);
    char *term;
    double t0 = now_seconds();
    int st = run_on_terminal(
        (const char *[]){"ref", c, path_in(tmp, "out"), "--threads", "1", NULL}, &term);
    double secs = now_seconds() - t0;
    ck_assert_msg(st == 0, "exit %d: %s", st, term);
    ck_assert_msg(secs < 0.8 || strstr(term, "smattn ref: [") != NULL,
                  "%.2f s and no progress bar: '%s'", secs, term);
    expect_erased(term);
    free(term);
    free(c);
}
END_TEST

/* f16 inputs (q, v; x for a softmax) and f16 / bf16 outputs: `smattn opt --dtype` against
 * the oracle in f64, within an output ulp (|O| <= 1, |LSE| < 8: an ulp of f16 is 2^-8 at
 * most there, of bf16 2^-5), on every ISA. The opt suite checks the real bound. */
START_TEST(opt_half_dtypes)
{
    NEED_CLI();
    char *c = path_in(tmp, "half"), *sm = NULL;
    ck_assert_int_eq(mkdir(c, 0700), 0);
    c = strdup(c);
    unsigned seed = 11;
    put_rand(c, "q.npy", SMATTN_F16, 3, (int64_t[]){5, 4, 8}, &seed);
    put_rand(c, "k.npy", SMATTN_F32, 3, (int64_t[]){7, 2, 8}, &seed);
    put_rand(c, "v.npy", SMATTN_F16, 3, (int64_t[]){7, 2, 6}, &seed);
    put_text(c, "case.json", "{\"causal\": \"lower_right\"}");
    sm = strdup(path_in(tmp, "halfsm"));
    ck_assert_int_eq(mkdir(sm, 0700), 0);
    put_rand(sm, "x.npy", SMATTN_F16, 4, (int64_t[]){1, 3, 2, 9}, &seed);
    char *ref = strdup(path_in(tmp, "halfref")), *refsm = strdup(path_in(tmp, "halfrefsm"));
    run_result r = run((const char *[]){"ref", c, ref, "--weights", NULL});
    ck_assert_msg(r.status == 0, "ref: exit %d: %s", r.status, r.err);
    free_result(&r);
    r = run((const char *[]){"ref", sm, refsm, NULL});
    ck_assert_msg(r.status == 0, "ref: exit %d: %s", r.status, r.err);
    free_result(&r);
    static const char *const isas[] = {"scalar", "avx2", "avx512"};
    static const char *const dts[] = {"f16", "bf16"};
    for (int k = 0; k < 3; k++)
        for (int d = 0; d < 2; d++) {
            if (!smattn_opt_isa_available(isas[k]))
                continue;
            char name[64];
            snprintf(name, sizeof name, "half_%s_%s", isas[k], dts[d]);
            char *out = strdup(path_in(tmp, name));
            r = run((const char *[]){"opt", c, out, "--isa", isas[k], "--dtype", dts[d], "--weights", NULL});
            ck_assert_msg(r.status == 0, "opt --dtype %s: exit %d: %s", dts[d], r.status, r.err);
            free_result(&r);
            smattn_npy_type t = d ? SMATTN_NPY_U16 : SMATTN_NPY_F16;
            double tol = d ? 0x1p-5 : 0x1p-8;
            check_npy(path_in(out, "o.npy"), t, 3, (int64_t[]){5, 4, 6});
            check_npy(path_in(out, "lse.npy"), t, 2, (int64_t[]){4, 5});
            expect_close(out, ref, "o.npy", tol);
            expect_close(out, ref, "lse.npy", tol);
            expect_close(out, ref, "p.npy", tol);
            char *sout = strdup(path_in(out, "sm"));
            r = run((const char *[]){"opt", sm, sout, "--isa", isas[k], "--dtype", dts[d], NULL});
            ck_assert_msg(r.status == 0, "opt softmax --dtype %s: exit %d: %s", dts[d], r.status, r.err);
            free_result(&r);
            check_npy(path_in(sout, "p.npy"), t, 4, (int64_t[]){1, 3, 2, 9});
            expect_close(sout, refsm, "p.npy", tol);
            expect_close(sout, refsm, "lse.npy", tol);
            free(sout), free(out);
        }
    free(c), free(sm), free(ref), free(refsm);
}
END_TEST

START_TEST(opt_bad_input)
{
    NEED_CLI();
    char *c = strdup(make_case("c")); /* f64 inputs: the kernel does not take them */
    char *f = strdup(make_f32_cases());
    char *out = strdup(path_in(tmp, "out"));
    expect_bad((const char *[]){"opt", c, out, NULL}, "opt: q.npy is f64", out);
    expect_bad((const char *[]){"opt", NULL}, "opt: missing CASE and OUT", NULL);
    expect_bad((const char *[]){"opt", f, NULL}, "opt: missing OUT", NULL);
    expect_bad((const char *[]){"opt", f, out, "--isa", "neon", NULL}, "--isa 'neon'", out);
    expect_bad((const char *[]){"opt", f, out, "--isa", NULL}, "--isa needs a value", out);
    expect_bad((const char *[]){"opt", f, out, "--dtype", "f64", NULL},
               "opt: --dtype 'f64': want f32, f16 or bf16", out);
    expect_bad((const char *[]){"opt", f, out, "--wieghts", NULL}, "unknown option", out);
    expect_bad((const char *[]){"opt", f, out, "--threads", "x", NULL}, "opt: --threads", out);
    expect_bad((const char *[]){"opt", path_in(tmp, "nocase"), out, NULL}, "no such case directory",
               out);
    double k[7 * 2 * 8] = {0};
    put(f, "k.npy", SMATTN_NPY_F64, 3, (int64_t[]){7, 2, 8}, k);
    expect_bad((const char *[]){"opt", f, out, NULL}, "opt: k.npy is f64", out);
    run_result r = run((const char *[]){"help", NULL});
    ck_assert(strstr(r.out, "opt CASE OUT") != NULL);
    free_result(&r);
    free(c), free(f), free(out);
}
END_TEST

START_TEST(version_and_help)
{
    NEED_CLI();
    const char *cmds[] = {"version", "help", "-h", "--help"};
    for (int k = 0; k < 4; k++) {
        run_result r = run((const char *[]){cmds[k], NULL});
        ck_assert_int_eq(r.status, 0);
        ck_assert(strstr(r.out, "smattn") != NULL);
        ck_assert_str_eq(r.err, "");
        free_result(&r);
    }
}
END_TEST

/* Every command takes --help (and -h): exit 0, its usage and options on stdout,
 * nothing on stderr; demo does not read "--help" as its DIR. */
START_TEST(every_command_takes_help)
{
    NEED_CLI();
    static const char *const cmds[] = {"ref", "opt", "demo", "conform", "gen", "check", "version"};
    static const char *const opts[] = {"--threads", "--isa",       "--vectors-only", "--kernel",
                                       "--suite",   "--precision", "--help"};
    for (int k = 0; k < 7; k++)
        for (int h = 0; h < 2; h++) {
            run_result r = run((const char *[]){cmds[k], h ? "-h" : "--help", NULL});
            char want[64];
            snprintf(want, sizeof want, "usage: smattn %s", cmds[k]);
            ck_assert_msg(r.status == 0, "%s --help: exit %d: %s", cmds[k], r.status, r.err);
            ck_assert_msg(strstr(r.out, want) && strstr(r.out, opts[k]), "%s --help: '%s'", cmds[k],
                          r.out);
            ck_assert_str_eq(r.err, "");
            free_result(&r);
        }
    run_result r = run((const char *[]){"help", "--help", NULL});
    ck_assert(r.status == 0 && strstr(r.out, "usage: smattn COMMAND"));
    free_result(&r);
    r = run((const char *[]){"help", "opt", NULL});
    ck_assert(r.status == 0 && strstr(r.out, "usage: smattn opt") && strstr(r.out, "--isa"));
    free_result(&r);
    /* options after the positional arguments too */
    r = run((const char *[]){"ref", "a", "b", "--help", NULL});
    ck_assert(r.status == 0 && strstr(r.out, "usage: smattn ref"));
    free_result(&r);
    expect_bad((const char *[]){"demo", "--bogus", NULL}, "demo: unknown option '--bogus'", NULL);
    expect_bad((const char *[]){"version", "x", NULL}, "version: unexpected argument 'x'", NULL);
}
END_TEST

/* `smattn ref --help` and `smattn opt --help` name, in their usage line, exactly the
 * --dtype values the command takes: each listed one writes o.npy in that dtype, each other
 * one is refused (opt's help once had no --dtype although opt takes f32, f16 and bf16). */
START_TEST(help_names_the_dtypes_taken)
{
    NEED_CLI();
    char *c = strdup(make_f32_cases());
    static const char *const cmds[] = {"ref", "opt"};
    static const char *const dts[] = {"f64", "f32", "f16", "bf16"};
    static const smattn_npy_type types[] = {SMATTN_NPY_F64, SMATTN_NPY_F32, SMATTN_NPY_F16,
                                            SMATTN_NPY_U16};
    for (int k = 0; k < 2; k++) {
        run_result r = run((const char *[]){cmds[k], "--help", NULL});
        ck_assert_int_eq(r.status, 0);
        const char *u = strstr(r.out, "[--dtype ");
        const char *opts_at = strstr(r.out, "\noptions:");
        ck_assert_msg(u && opts_at && u < opts_at, "%s --help: no [--dtype ...] in its usage: '%s'",
                      cmds[k], r.out);
        char list[64];
        ck_assert(sscanf(u, "[--dtype %63[^]]]", list) == 1);
        int listed_default = 0;
        for (int d = 0; d < 4; d++) {
            char bar[70];
            snprintf(bar, sizeof bar, "|%s|", list);
            char want[16];
            snprintf(want, sizeof want, "|%s|", dts[d]);
            int listed = strstr(bar, want) != NULL;
            char name[16];
            snprintf(name, sizeof name, "out_%s", dts[d]);
            char *out = strdup(path_in(tmp, name));
            run_result o = run((const char *[]){cmds[k], c, out, "--dtype", dts[d], NULL});
            ck_assert_msg((o.status == 0) == listed, "%s --dtype %s: exit %d (help lists '%s'): %s",
                          cmds[k], dts[d], o.status, list, o.err);
            if (listed)
                check_npy(path_in(out, "o.npy"), types[d], 3, (int64_t[]){5, 4, 6});
            else
                ck_assert_msg(strstr(o.err, "--dtype"), "%s --dtype %s: '%s'", cmds[k], dts[d], o.err);
            listed_default += listed;
            free_result(&o);
            test_rm_tree(out);
            free(out);
        }
        ck_assert_int_ge(listed_default, 1);
        /* the options part describes --dtype too */
        ck_assert_msg(strstr(r.out, "\n  --dtype "), "%s --help: --dtype not described", cmds[k]);
        free_result(&r);
    }
    free(c);
}
END_TEST

/* A one-element softmax: P = 1 and LSE = 0 exactly in every dtype. */
static void put_vector(const char *dir, const char *name, const char *p_f16)
{
    char text[2048], file[256];
    snprintf(text, sizeof text,
             "{\"name\": \"%s\", \"description\": \"softmax of one element\", \"spec\": \"3\",\n"
             " \"problem\": {\"op\": \"softmax\", \"B\": 1, \"S\": 1, \"T\": 1, \"Hq\": 1,"
             " \"scale\": \"0x1p+0\", \"softcap\": \"0x0p+0\", \"causal\": \"none\","
             " \"window\": [-1, -1], \"kv_lens\": null, \"q_lens\": null,"
             " \"empty_rows\": \"zero\", \"empty_lse\": \"neg_inf\"},\n"
             " \"inputs\": {\"x\": {\"dtype\": \"f32\", \"shape\": [1,1,1,1], \"data\": "
             "[\"0x1.8p+1\"]}},\n"
             " \"expected\": {\"f64\": {\"lse\": [\"0x0p+0\"], \"p\": [\"0x1p+0\"]},"
             " \"f32\": {\"lse\": [\"0x0p+0\"], \"p\": [\"0x1p+0\"]},"
             " \"f16\": {\"lse\": [\"0x0p+0\"], \"p\": [\"%s\"]},"
             " \"bf16\": {\"lse\": [\"0x0p+0\"], \"p\": [\"0x1p+0\"]}},\n"
             " \"exact\": {\"lse\": [\"3.000000000000000000000000000000000000000\"],"
             " \"p\": [\"1.000000000000000000000000000000000000000\"]}}\n",
             name, p_f16);
    snprintf(file, sizeof file, "%s.json", name);
    put_text(dir, file, text);
}

START_TEST(demo_replays_vectors)
{
    NEED_CLI();
    char *vd = strdup(path_in(tmp, "vectors"));
    ck_assert_int_eq(mkdir(vd, 0700), 0);
    put_vector(vd, "one", "0x1p+0");
    run_result r = run((const char *[]){"demo", vd, "--vectors-only", NULL});
    /* LSE of one element is its score, 3: the vector above says 0, so it must fail... */
    ck_assert_msg(r.status == 1, "exit %d\n%s%s", r.status, r.out, r.err);
    ck_assert(strstr(r.out, "verdict: FAIL") != NULL);
    free_result(&r);
    /* ...and pass once the expected LSE is right. */
    char text[4096];
    char *path = path_in(vd, "one.json");
    char *t = read_all(path);
    snprintf(text, sizeof text, "%s", t);
    free(t);
    for (char *q = strstr(text, "\"lse\": [\"0x0p+0\"]"); q; q = strstr(q, "\"lse\": [\"0x0p+0\"]"))
        memcpy(q, "\"lse\": [\"0x3p+0\"]", 17);
    put_text(vd, "one.json", text);
    r = run((const char *[]){"demo", vd, "--vectors-only", NULL});
    ck_assert_msg(r.status == 0, "exit %d\n%s%s", r.status, r.out, r.err);
    ck_assert(strstr(r.out, "  one ") && strstr(r.out, "verdict: PASS"));
    free_result(&r);
    /* A vector that does not load is reported, and the demo fails with 2. */
    put_text(vd, "two.json", "{\"name\": \"two\"");
    r = run((const char *[]){"demo", vd, "--vectors-only", NULL});
    ck_assert_int_eq(r.status, 2);
    ck_assert(strstr(r.out, "verdict: PASS") && strstr(r.out, "cannot load"));
    free_result(&r);
    free(vd);
}
END_TEST

/* demo without DIR, from a directory that holds no spec/: it finds the golden vectors the
 * way conform does (next to the executable; SMATTN_ROOT is not needed). */
START_TEST(demo_finds_vectors)
{
    NEED_CLI();
    char *cwd = strdup(path_in(tmp, "elsewhere"));
    ck_assert_int_eq(mkdir(cwd, 0700), 0);
    run_cwd = cwd;
    run_result r = run((const char *[]){"demo", "--vectors-only", NULL});
    run_cwd = NULL;
    ck_assert_msg(r.status == 0, "exit %d\n%.300s", r.status, r.err);
    ck_assert_msg(strstr(r.out, "vectors bit-exact in all four dtypes") != NULL, "%.300s", r.out);
    free_result(&r);
    rmdir(cwd);
    free(cwd);
}
END_TEST

/* The committed golden vectors, when there are any, all replay bit for bit. */
START_TEST(demo_golden_vectors)
{
    NEED_CLI();
    const char *root = getenv("SMATTN_ROOT");
    if (!root)
        return;
    char vd[512];
    snprintf(vd, sizeof vd, "%s/spec/vectors", root);
    DIR *d = opendir(vd);
    int any = 0;
    struct dirent *e;
    while (d && (e = readdir(d)))
        any |= strstr(e->d_name, ".json") != NULL;
    if (d)
        closedir(d);
    if (!any)
        return;
    run_result r = run((const char *[]){"demo", vd, NULL});
    if (r.status != 0) /* the full report is long: it goes to stderr, the verdict to Check */
        fprintf(stderr, "%s%s", r.out, r.err);
    const char *f = strstr(r.out, "verdict: FAIL");
    ck_assert_msg(r.status == 0, "smattn demo %s: exit %d; first failure: %.200s", vd, r.status,
                  f ? f : r.err);
    free_result(&r);
}
END_TEST

Suite *cli_suite(void);
Suite *cli_suite(void)
{
    Suite *s = suite_create("cli");
    TCase *tc = tcase_create("cli");
    tcase_set_timeout(tc, 300);
    tcase_add_checked_fixture(tc, setup, teardown);
    tcase_add_test(tc, usage_errors);
    tcase_add_test(tc, bad_cases_give_one_line_and_no_output);
    tcase_add_test(tc, headers_checked_before_data);
    tcase_add_test(tc, good_runs_write_npy);
    tcase_add_test(tc, outputs_committed_as_a_set);
    tcase_add_test(tc, out_checked_before_work);
    tcase_add_test(tc, paths_with_newlines_one_line);
    tcase_add_test(tc, unreadable_case_dir_named);
    tcase_add_test(tc, opt_matches_ref);
    tcase_add_test(tc, opt_bad_input);
    tcase_add_test(tc, opt_half_dtypes);
    tcase_add_test(tc, bogus_isa_env_said_once);
    tcase_add_test(tc, ref_progress_on_a_terminal);
    tcase_add_test(tc, ref_progress_within_a_row);
    tcase_add_test(tc, version_and_help);
    tcase_add_test(tc, every_command_takes_help);
    tcase_add_test(tc, help_names_the_dtypes_taken);
    tcase_add_test(tc, demo_replays_vectors);
    tcase_add_test(tc, demo_golden_vectors);
    tcase_add_test(tc, demo_finds_vectors);
    suite_add_tcase(s, tc);
    return s;
}
