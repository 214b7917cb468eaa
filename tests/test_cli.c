/* test_cli.c: the smattn tool as a user runs it (SMATTN_CLI): bad input gives exit 2, one
 * stderr line and no output; good runs write .npy files the reader accepts; opt agrees
 * with ref on every ISA the CPU has; demo replays golden vectors bit for bit. */
#include <check.h>
#include <dirent.h>
#include <fcntl.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

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
} run_result;

/* Run SMATTN_CLI with args (NULL-terminated), capturing stdout and stderr. */
static run_result run(const char *const *args)
{
    char *op = strdup(path_in(tmp, ".stdout")), *ep = strdup(path_in(tmp, ".stderr"));
    const char *argv[16];
    int n = 0;
    argv[n++] = cli();
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
        execv(argv[0], (char *const *)(uintptr_t)argv);
        _exit(127);
    }
    int ws;
    ck_assert_int_eq(waitpid(pid, &ws, 0), pid);
    run_result r;
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
    tcase_add_test(tc, good_runs_write_npy);
    tcase_add_test(tc, opt_matches_ref);
    tcase_add_test(tc, opt_bad_input);
    tcase_add_test(tc, opt_half_dtypes);
    tcase_add_test(tc, version_and_help);
    tcase_add_test(tc, demo_replays_vectors);
    tcase_add_test(tc, demo_golden_vectors);
    suite_add_tcase(s, tc);
    return s;
}
