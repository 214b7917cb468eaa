/* SPDX-License-Identifier: MIT */
/* cmd_demo.c: `smattn demo`: the seeds' worked examples beside their exact values, every
 * golden vector replayed bit for bit in four dtypes, and the fast kernel checked against
 * the oracle on Qwen2.5-7B-shaped problems. */
#include <dirent.h>
#include <errno.h>
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "cli/cli.h"
#include "io/util.h"
#include "io/vector.h"
#include "smattn.h"

/* Most elements printed per output of one vector; all are compared. */
#define DEMO_PRINT_MAX 12

typedef struct name_list {
    char **names;
    size_t n;
} name_list;

static int cmp_names(const void *a, const void *b)
{
    return strcmp(*(char *const *)a, *(char *const *)b);
}

static void free_names(name_list *l)
{
    for (size_t k = 0; k < l->n; k++)
        free(l->names[k]);
    free(l->names);
}

/* The *.json files of dir, sorted by name. */
static int list_vectors(const char *dir, name_list *l, char *msg, size_t len)
{
    memset(l, 0, sizeof *l);
    DIR *d = opendir(dir);
    if (!d) {
        char q[SMATTN_IO_PATH_MAX];
        snprintf(msg, len, "demo: %s: %s", smattn_io_path(dir, q), strerror(errno));
        return -1;
    }
    struct dirent *e;
    size_t cap = 0;
    int rc = 0;
    while (rc == 0 && (e = readdir(d))) {
        size_t n = strlen(e->d_name);
        if (n <= 5 || strcmp(e->d_name + n - 5, ".json") != 0 || e->d_name[0] == '.')
            continue;
        if (l->n == cap) {
            cap = cap ? 2 * cap : 32;
            char **nn = realloc(l->names, cap * sizeof *nn);
            if (!nn) {
                rc = -1;
                break;
            }
            l->names = nn;
        }
        if (!(l->names[l->n] = malloc(strlen(dir) + n + 2)))
            rc = -1;
        else
            sprintf(l->names[l->n++], "%s/%s", dir, e->d_name);
    }
    closedir(d);
    if (rc) {
        snprintf(msg, len, "demo: out of memory");
        free_names(l);
        return -1;
    }
    if (l->n)
        qsort(l->names, l->n, sizeof *l->names, cmp_names);
    return 0;
}

/* Bit equality of two binary64 values, with NaN equal to NaN (+0 and -0 differ). */
static int same_bits(double a, double b)
{
    if (isnan(a) || isnan(b))
        return isnan(a) && isnan(b);
    return memcmp(&a, &b, sizeof a) == 0;
}

/* "[b,h,i,j]" of element e of output k in its row-major shape. */
static void index_str(const smattn_problem *p, int k, int64_t e, char *out, size_t cap)
{
    int64_t shape[3][4] = {
        {p->B, p->S, p->Hq, p->Dv}, {p->B, p->Hq, p->S, 1}, {p->B, p->Hq, p->S, p->T}};
    int rank = k == SMATTN_VEC_LSE ? 3 : 4;
    int64_t idx[4];
    for (int r = rank - 1; r >= 0; r--) {
        idx[r] = e % shape[k][r];
        e /= shape[k][r];
    }
    size_t n = (size_t)snprintf(out, cap, "[");
    for (int r = 0; r < rank && n < cap; r++)
        n += (size_t)snprintf(out + n, cap - n, "%s%lld", r ? "," : "", (long long)idx[r]);
    if (n < cap)
        snprintf(out + n, cap - n, "]");
}

static const char *const out_names[3] = {"o", "lse", "p"};

/* The oracle's outputs of one vector in every dtype, as binary64 (exact conversions). */
typedef struct demo_run {
    double *val[4][3];
    smattn_status st[4];
} demo_run;

static void free_run(demo_run *r)
{
    for (int t = 0; t < 4; t++)
        for (int k = 0; k < 3; k++)
            free(r->val[t][k]);
}

static smattn_status run_dtype(const smattn_vector *v, smattn_dtype t, double *val[3])
{
    static const char roles[3] = {'o', 'l', 'p'};
    smattn_outputs out;
    memset(&out, 0, sizeof out);
    smattn_out_tensor *ot[3] = {&out.o, &out.lse, &out.p};
    size_t es = smattn_dtype_size(t);
    smattn_status st = SMATTN_OK;
    for (int k = 0; k < 3 && st == SMATTN_OK; k++) {
        if (v->n[k] == 0)
            continue;
        ot[k]->data = calloc((size_t)v->n[k], es);
        val[k] = calloc((size_t)v->n[k], sizeof(double));
        if (!ot[k]->data || !val[k])
            st = SMATTN_ERR_NOMEM;
        ot[k]->dtype = t;
        smattn_contiguous_strides(&v->prob, roles[k], ot[k]->stride);
    }
    if (st == SMATTN_OK)
        st = smattn_vector_run(v, &out);
    for (int k = 0; k < 3; k++) {
        if (st == SMATTN_OK && val[k])
            for (int64_t e = 0; e < v->n[k]; e++)
                val[k][e] = smattn_load(ot[k]->data, t, e);
        free(ot[k]->data);
    }
    return st;
}

static void print_problem(const smattn_vector *v)
{
    const smattn_problem *p = &v->prob;
    const smattn_merge_problem *m = &v->mprob;
    if (v->merge)
        printf("  problem: merge N=%lld B=%lld S=%lld Hq=%lld Dv=%lld, LSE base %s\n",
               (long long)m->N, (long long)m->B, (long long)m->S, (long long)m->Hq,
               (long long)m->Dv, m->lse_base == SMATTN_LSE_BASE_2 ? "2" : "e");
    else if (p->op == SMATTN_OP_ATTENTION)
        printf("  problem: attention B=%lld S=%lld T=%lld Hq=%lld Hkv=%lld D=%lld Dv=%lld, "
               "scale %a\n",
               (long long)p->B, (long long)p->S, (long long)p->T, (long long)p->Hq,
               (long long)p->Hkv, (long long)p->D, (long long)p->Dv, p->scale);
    else
        printf("  problem: softmax B=%lld Hq=%lld S=%lld T=%lld, scale %a\n", (long long)p->B,
               (long long)p->Hq, (long long)p->S, (long long)p->T, p->scale);
}

static void print_values(const smattn_vector *v, const demo_run *r)
{
    for (int k = 0; k < 3; k++) {
        int64_t n = v->n[k];
        for (int64_t e = 0; e < n && e < DEMO_PRINT_MAX; e++) {
            char idx[96];
            index_str(&v->prob, k, e, idx, sizeof idx);
            printf("  %s%s", out_names[k], idx);
            printf("   exact %s\n", v->exact[k] ? v->exact[k][e] : "(not given)");
            for (int t = 0; t < 2; t++) {
                if (r->st[t] != SMATTN_OK)
                    continue;
                double x = r->val[t][k][e];
                printf("      %s  %-24.17g %a\n", t == 0 ? "f64" : "f32", x, x);
            }
        }
        if (n > DEMO_PRINT_MAX)
            printf("  ... and %lld more %s values (all compared)\n",
                   (long long)(n - DEMO_PRINT_MAX), out_names[k]);
    }
}

/* Compare one vector's runs with "expected"; print the verdict; return an exit code. */
static int verdict(const smattn_vector *v, const demo_run *r)
{
    for (int t = 0; t < 4; t++) {
        if (r->st[t] != SMATTN_OK) {
            printf("  verdict: FAIL, the oracle failed in %s: %s\n",
                   smattn_dtype_name((smattn_dtype)t), smattn_status_str(r->st[t]));
            return cli_exit_code_of(r->st[t]);
        }
        for (int k = 0; k < 3; k++) {
            const double *want = v->expected[t][k];
            for (int64_t e = 0; want && e < v->n[k]; e++)
                if (!same_bits(r->val[t][k][e], want[e])) {
                    char idx[96];
                    index_str(&v->prob, k, e, idx, sizeof idx);
                    printf("  verdict: FAIL, %s %s%s: oracle %a, expected %a\n",
                           smattn_dtype_name((smattn_dtype)t), out_names[k], idx, r->val[t][k][e],
                           want[e]);
                    return EXIT_MISMATCH;
                }
        }
    }
    char missing[64] = "";
    for (int t = 0; t < 4; t++)
        for (int k = 0; k < 3; k++)
            if (v->n[k] && !v->expected[t][k]) {
                snprintf(missing, sizeof missing, " (no expected %s %s given)",
                         smattn_dtype_name((smattn_dtype)t), out_names[k]);
                t = 4;
                break;
            }
    printf("  verdict: PASS, bit-exact in f64, f32, f16 and bf16%s\n", missing);
    return EXIT_OK;
}

/* One vector: in full (description, problem, values beside the exact ones, verdict), or
 * as one line (name, SPEC section, verdict). */
static int demo_one(const char *path, int full)
{
    char msg[1024];
    smattn_vector v;
    if (smattn_vector_load(path, &v, msg, sizeof msg)) {
        char q[SMATTN_IO_PATH_MAX];
        printf("== %s\n  verdict: FAIL, cannot load: %s\n\n", smattn_io_path(path, q), msg);
        return EXIT_INPUT;
    }
    if (full) {
        printf("== %s%s%s%s\n", v.name, v.spec[0] ? "  (SPEC " : "", v.spec, v.spec[0] ? ")" : "");
        if (v.description[0])
            printf("  %s\n", v.description);
        print_problem(&v);
    } else {
        printf("  %-26s SPEC %-4s", v.name, v.spec);
    }
    demo_run r;
    memset(&r, 0, sizeof r);
    for (int t = 0; t < 4; t++)
        r.st[t] = run_dtype(&v, (smattn_dtype)t, r.val[t]);
    if (full)
        print_values(&v, &r);
    int rc = verdict(&v, &r);
    if (full)
        printf("\n");
    free_run(&r);
    smattn_vector_free(&v);
    return rc;
}

static int is_seed_example(const char *path);
static int demo_kernel(void);

static const char demo_help[] =
    "usage: smattn demo [DIR] [--vectors-only]\n"
    "  Show the seeds' worked examples beside their exact values, replay every golden\n"
    "  vector DIR/*.json through the oracle in all four dtypes bit\n"
    "  for bit, then check the fast kernel against the oracle on three Qwen2.5-7B-shaped\n"
    "  problems under the SPEC 6 bound.\n"
    "  DIR defaults to the golden vectors `smattn conform` finds: $SMATTN_ROOT/spec/\n"
    "  vectors, spec/vectors or share/smattn/vectors next to the executable, or the\n"
    "  installed data directory.\n"
    "options:\n"
    "  --vectors-only   skip the kernel check\n"
    "  -h, --help       print this text\n"
    "exit status: 0 all passed, 1 a vector or the kernel check failed, 2 bad usage or a\n"
    "vector that cannot be loaded.\n";

int cmd_demo(int argc, char **argv)
{
    char msg[1024], q[SMATTN_IO_PATH_MAX];
    int kernel = 1, npos = 0;
    const char *dir = NULL;
    char found[1100];
    for (int i = 0; i < argc; i++) {
        const char *a = argv[i];
        if (!strcmp(a, "--help") || !strcmp(a, "-h")) {
            fputs(demo_help, stdout);
            return EXIT_OK;
        }
        if (!strcmp(a, "--vectors-only"))
            kernel = 0;
        else if (!strcmp(a, "--")) { /* what follows is DIR, even "--help" */
            for (i++; i < argc; i++)
                dir = argv[i], npos++;
        } else if (a[0] == '-' && a[1] != '\0') {
            snprintf(msg, sizeof msg, "demo: unknown option '%.40s' (try 'smattn demo --help')", a);
            return cli_fail(EXIT_INPUT, msg);
        } else
            dir = a, npos++;
    }
    if (npos > 1)
        return cli_fail(EXIT_INPUT,
                        "demo: too many arguments (usage: smattn demo [DIR] [--vectors-only])");
    if (!dir) { /* the lookup `smattn conform` uses (cli/options.c) */
        char looked[1200];
        if (cli_find_vectors(found, sizeof found, looked, sizeof looked)) {
            snprintf(msg, sizeof msg,
                     "demo: the golden vectors (spec/vectors) are not found (looked in %.900s); "
                     "give their directory: smattn demo DIR",
                     looked);
            return cli_fail(EXIT_INPUT, msg);
        }
        dir = found;
    }
    name_list l;
    if (list_vectors(dir, &l, msg, sizeof msg))
        return cli_fail(EXIT_INPUT, msg);
    if (l.n == 0) {
        free_names(&l);
        snprintf(msg, sizeof msg, "demo: no *.json vectors in %s", smattn_io_path(dir, q));
        return cli_fail(EXIT_INPUT, msg);
    }
    printf("smattn %d.%d.%d demo\n\n"
           "1. The seeds' worked examples through the exact oracle: each output as the\n"
           "   40-digit exact value beside the oracle's f64 and f32 roundings (%%.17g, %%a).\n\n",
           SMATTN_VERSION_MAJOR, SMATTN_VERSION_MINOR, SMATTN_VERSION_PATCH);
    int worst = EXIT_OK;
    size_t failed = 0;
    for (size_t k = 0; k < l.n; k++)
        if (is_seed_example(l.names[k])) {
            int rc = demo_one(l.names[k], 1);
            failed += rc != EXIT_OK;
            worst = rc > worst ? rc : worst;
        }
    printf("2. Every golden vector in %s (%zu), replayed in f64, f32, f16 and bf16 and\n"
           "   compared bit for bit with its independently computed values:\n\n",
           smattn_io_path(dir, q), l.n);
    for (size_t k = 0; k < l.n; k++) {
        int rc = demo_one(l.names[k], 0);
        failed += rc != EXIT_OK;
        worst = rc > worst ? rc : worst;
    }
    if (failed)
        printf("\n   %zu vector runs FAILED\n\n", failed);
    else
        printf("\n   all %zu vectors bit-exact in all four dtypes\n\n", l.n);
    free_names(&l);
    if (!kernel)
        return worst;
    int krc = demo_kernel();
    return krc > worst ? krc : worst;
}

/* ---- the kernel, checked in the demo ----------------------------------------------------- */

static int is_seed_example(const char *path)
{
    static const char *const seeds[] = {"seed_", "causal4_table", "temp_sharp", "temp_flat"};
    const char *base = strrchr(path, '/');
    base = base ? base + 1 : path;
    for (size_t k = 0; k < sizeof seeds / sizeof seeds[0]; k++)
        if (strncmp(base, seeds[k], strlen(seeds[k])) == 0)
            return 1;
    return 0;
}

/* One Qwen2.5-7B-shaped problem through the fast kernel and the oracle, judged by the
 * SPEC 6 bound for the kernel's own precision model. */
static int demo_kernel_case(const char *what, int64_t S, int64_t T, smattn_causal causal,
                            uint64_t seed)
{
    smattn_problem p = smattn_problem_default();
    p.B = 1, p.S = S, p.T = T, p.Hq = 28, p.Hkv = 4, p.D = p.Dv = 128;
    p.scale = smattn_default_scale(p.D);
    p.causal = causal;
    size_t nq = (size_t)(S * 28 * 128), nk = (size_t)(T * 4 * 128), nl = (size_t)(28 * S);
    float *q = malloc(nq * 4), *k = malloc(nk * 4), *v = malloc(nk * 4), *o = malloc(nq * 4);
    float *l = malloc(nl * 4);
    double *ro = malloc(nq * 8), *rl = malloc(nl * 8), *bo = malloc(nq * 8), *bl = malloc(nl * 8);
    int rc = EXIT_OK;
    if (!q || !k || !v || !o || !l || !ro || !rl || !bo || !bl) {
        printf("   %s: out of memory\n", what);
        rc = EXIT_ORACLE;
        goto done;
    }
    uint64_t x = seed;
    for (size_t i = 0; i < nq + 2 * nk; i++) {
        x ^= x << 13, x ^= x >> 7, x ^= x << 17;
        float u = (float)((double)(x >> 40) * 0x1p-24 * 4 - 2);
        if (i < nq)
            q[i] = u;
        else if (i < nq + nk)
            k[i - nq] = u;
        else
            v[i - nq - nk] = u;
    }
    smattn_inputs in;
    memset(&in, 0, sizeof in);
    in.q = (smattn_tensor){q, SMATTN_F32, {0}};
    in.k = (smattn_tensor){k, SMATTN_F32, {0}};
    in.v = (smattn_tensor){v, SMATTN_F32, {0}};
    smattn_contiguous_strides(&p, 'q', in.q.stride);
    smattn_contiguous_strides(&p, 'k', in.k.stride);
    smattn_contiguous_strides(&p, 'v', in.v.stride);
    smattn_outputs ko, ro_, bo_;
    memset(&ko, 0, sizeof ko);
    ko.o = (smattn_out_tensor){o, SMATTN_F32, {0}};
    ko.lse = (smattn_out_tensor){l, SMATTN_F32, {0}};
    smattn_contiguous_strides(&p, 'o', ko.o.stride);
    smattn_contiguous_strides(&p, 'l', ko.lse.stride);
    ro_ = ko, bo_ = ko;
    ro_.o.data = ro, ro_.o.dtype = SMATTN_F64, ro_.lse.data = rl, ro_.lse.dtype = SMATTN_F64;
    bo_.o.data = bo, bo_.o.dtype = SMATTN_F64, bo_.lse.data = bl, bo_.lse.dtype = SMATTN_F64;
    smattn_status st = smattn_attention(&p, &in, &ko, NULL); /* warm-up: pool, pages */
    double t0 = cli_now_seconds();
    if (st == SMATTN_OK)
        st = smattn_attention(&p, &in, &ko, NULL);
    double t1 = cli_now_seconds();
    if (st == SMATTN_OK)
        st = smattn_ref(&p, &in, &ro_, NULL, NULL);
    double t2 = cli_now_seconds();
    smattn_precision pm = smattn_opt_precision(&p);
    if (st == SMATTN_OK)
        st = smattn_bound(&p, &in, &pm, &ko, &bo_);
    if (st) {
        printf("   %s: %s\n", what, smattn_status_str(st));
        rc = EXIT_ORACLE;
        goto done;
    }
    double worst = 0;
    for (size_t e = 0; e < nq; e++) {
        double r = smattn_error_ratio((double)o[e], ro[e], bo[e]);
        worst = r > worst ? r : worst;
    }
    for (size_t e = 0; e < nl; e++) {
        double r = smattn_error_ratio((double)l[e], rl[e], bl[e]);
        worst = r > worst ? r : worst;
    }
    printf("   %-38s kernel %7.2f ms  oracle %7.1f ms  max error/bound %.4f  %s\n", what,
           (t1 - t0) * 1e3, (t2 - t1) * 1e3, worst, worst <= 1 ? "PASS" : "FAIL");
    rc = worst <= 1 ? EXIT_OK : EXIT_MISMATCH;
done:
    free(q), free(k), free(v), free(o), free(l), free(ro), free(rl), free(bo), free(bl);
    return rc;
}

static int demo_kernel(void)
{
    cli_check_isa_env();
    printf("3. The fast kernel (smattn_attention, ISA %s, all cores) against the exact oracle,\n"
           "   judged by the SPEC 6 bound for its own precision model (conforming: <= 1):\n\n",
           smattn_opt_isa());
    int a = demo_kernel_case("decode, Hq=28 Hkv=4 D=128, T=2048", 1, 2048,
                             SMATTN_CAUSAL_LOWER_RIGHT, 0x5eed1);
    int b = demo_kernel_case("causal prefill, S = T = 128", 128, 128, SMATTN_CAUSAL_LOWER_RIGHT,
                             0x5eed2);
    int c = demo_kernel_case("chunked prefill, S = 16 onto T = 512", 16, 512,
                             SMATTN_CAUSAL_LOWER_RIGHT, 0x5eed3);
    int worst = a > b ? a : b;
    worst = c > worst ? c : worst;
    printf("\n%s\n", worst == EXIT_OK ? "demo: everything passed" : "demo: FAILED (see above)");
    return worst;
}
