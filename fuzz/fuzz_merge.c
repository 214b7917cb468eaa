/* SPDX-License-Identifier: MIT */
/* fuzz_merge.c: merging partial states (SPEC 9). Any bytes decode to a small merge problem
 * (N <= 9 partials, B, S, Hq <= 2, Dv <= 9; LSEs equal, an integer apart, spread past exp's
 * range or random; O random, equal, near binary32 midpoints or tiny; special-value patches;
 * raw front bytes over O then the LSEs). Checks: the kernel (binary32, f16 or bf16 out, as
 * drawn) within smattn_merge_bound of the oracle, with the same bits for 1 and the drawn
 * thread count and for every ISA; the oracle's bits with 1 and 4 threads, with the partials
 * reversed, with an empty partial (NaN garbage in its O) appended, and O's bits with every
 * partial taken twice (the weights double, O does not move); O inside the finite partials'
 * range; one partial merged is that partial rounded. A failure prints MISMATCH fuzz_merge
 * <check> with the problem in %a, then aborts. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fuzz/common/fuzz_input.h"

#define MAXN 9
#define MAXE (MAXN * 2 * 2 * 2 * 9) /* o_parts elements */
#define MAXL (MAXN * 2 * 2 * 2)     /* lse_parts elements */

typedef struct mprob {
    smattn_merge_problem p;
    smattn_dtype to, tl, tout;
    int threads;
    double o[MAXE], l[MAXL]; /* the values as stored (rounded to to, tl) */
} mprob;

static uint32_t prng_next(uint32_t *s)
{
    *s = *s * 1664525u + 1013904223u;
    return *s >> 8;
}

static double unif(uint32_t *s)
{
    return (double)prng_next(s) / 16777216.0 * 2 - 1; /* [-1, 1) */
}

static int64_t n_o(const smattn_merge_problem *p)
{
    return p->N * p->B * p->S * p->Hq * p->Dv;
}

static int64_t n_l(const smattn_merge_problem *p)
{
    return p->N * p->B * p->Hq * p->S;
}

static void decode(const uint8_t *data, size_t size, mprob *m)
{
    static const smattn_dtype kd[3] = {SMATTN_F32, SMATTN_F16, SMATTN_BF16};
    fuzz_provider dp;
    fuzz_provider_init(&dp, data, size);
    memset(m, 0, sizeof *m);
    smattn_merge_problem *p = &m->p;
    *p = smattn_merge_problem_default();
    p->N = 1 + fuzz_take(&dp, MAXN);
    p->B = 1 + fuzz_take(&dp, 2), p->S = 1 + fuzz_take(&dp, 2), p->Hq = 1 + fuzz_take(&dp, 2);
    p->Dv = 1 + fuzz_take(&dp, 9);
    p->lse_base = fuzz_take(&dp, 2) ? SMATTN_LSE_BASE_2 : SMATTN_LSE_BASE_E;
    p->empty_parts = fuzz_take(&dp, 2) ? SMATTN_LSE_POS_INF : SMATTN_LSE_NEG_INF;
    p->empty_rows = fuzz_take(&dp, 2) ? SMATTN_EMPTY_NAN : SMATTN_EMPTY_ZERO;
    p->empty_lse = (smattn_empty_lse)fuzz_take(&dp, 3);
    m->to = kd[fuzz_take(&dp, 3)], m->tl = kd[fuzz_take(&dp, 3)], m->tout = kd[fuzz_take(&dp, 3)];
    m->threads = 1 + (int)fuzz_take(&dp, 4);
    int lmode = (int)fuzz_take(&dp, 5), omode = (int)fuzz_take(&dp, 4);
    uint32_t seed = fuzz_take_u32(&dp);
    double base = 8 * unif(&seed);
    for (int64_t e = 0; e < n_l(p); e++) {
        double u = unif(&seed);
        m->l[e] = lmode == 0   ? base                                  /* all equal */
                  : lmode == 1 ? floor(base) + floor(4 * u)            /* integers apart */
                  : lmode == 2 ? base + 1e30 * u * u * u               /* past exp's range */
                  : lmode == 3 ? base + ldexp(u, -20)                  /* nearly equal */
                               : base + 6 * u;
    }
    int64_t per = n_o(p) / p->N;
    for (int64_t e = 0; e < n_o(p); e++) {
        double u = unif(&seed);
        m->o[e] = omode == 0   ? u
                  : omode == 1 ? (e >= per ? m->o[e - per] : u)        /* equal across parts */
                  : omode == 2 ? 1 + ldexp(floor(8 * u), -24)          /* near midpoints */
                               : ldexp(u, -140);                       /* subnormal */
    }
    int npatch = (int)fuzz_take(&dp, 9);
    for (int k = 0; k < npatch; k++) {
        int lse = (int)fuzz_take(&dp, 2);
        uint32_t idx = fuzz_take(&dp, 1024);
        double v = (double)fuzz_special_value((int)fuzz_take(&dp, FUZZ_NSPECIAL));
        if (lse)
            m->l[idx % n_l(p)] = v;
        else
            m->o[idx % n_o(p)] = v;
    }
    /* raw front bytes over O, then the LSEs (binary32 each) */
    for (int64_t e = 0; e < n_o(p) + n_l(p) && fuzz_remaining(&dp) >= 4; e++) {
        float f;
        memcpy(&f, dp.data + dp.lo, 4);
        dp.lo += 4;
        if (e < n_o(p))
            m->o[e] = (double)f;
        else
            m->l[e - n_o(p)] = (double)f;
    }
    /* round to the drawn input dtypes: the problem is that of the stored values */
    for (int64_t e = 0; e < n_o(p); e++) {
        unsigned char b[8];
        smattn_store(b, m->to, 0, m->o[e]);
        m->o[e] = smattn_load(b, m->to, 0);
    }
    for (int64_t e = 0; e < n_l(p); e++) {
        unsigned char b[8];
        smattn_store(b, m->tl, 0, m->l[e]);
        m->l[e] = smattn_load(b, m->tl, 0);
    }
}

static const mprob *cur;

static void print_problem(const mprob *m)
{
    const smattn_merge_problem *p = &m->p;
    fprintf(stderr, "N=%lld B=%lld S=%lld Hq=%lld Dv=%lld base=%s empty_parts=%d empty_rows=%d "
                    "empty_lse=%d o:%s lse:%s out:%s threads=%d\nlse_parts:",
            (long long)p->N, (long long)p->B, (long long)p->S, (long long)p->Hq, (long long)p->Dv,
            p->lse_base ? "2" : "e", (int)p->empty_parts, (int)p->empty_rows, (int)p->empty_lse,
            smattn_dtype_name(m->to), smattn_dtype_name(m->tl), smattn_dtype_name(m->tout),
            m->threads);
    for (int64_t e = 0; e < n_l(p); e++)
        fprintf(stderr, " %a", m->l[e]);
    fprintf(stderr, "\no_parts:");
    for (int64_t e = 0; e < n_o(p); e++)
        fprintf(stderr, " %a", m->o[e]);
    fprintf(stderr, "\n");
}

static void fail(const char *check, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
#include <stdarg.h>
static void fail(const char *check, const char *fmt, ...)
{
    fprintf(stderr, "MISMATCH fuzz_merge %s\n", check);
    va_list ap;
    va_start(ap, fmt);
    vfprintf(stderr, fmt, ap);
    va_end(ap);
    fprintf(stderr, "\n");
    print_problem(cur);
    abort();
}

/* Buffers of one merge: partials in their dtypes (N up to 2 MAXN + 1), outputs. */
typedef struct mrun {
    smattn_merge_problem p;
    smattn_merge_inputs in;
    unsigned char o_parts[(2 * MAXN + 1) * MAXE / MAXN * 8], l_parts[(2 * MAXN + 1) * MAXL / MAXN * 8];
    unsigned char o[MAXE / MAXN * 8], l[MAXL / MAXN * 8];
    smattn_outputs out;
} mrun;

/* the partials in order src[0..n) (indices into m's partials; -1: an empty one with garbage) */
static void build(mrun *r, const mprob *m, const int *src, int64_t n, smattn_dtype tout)
{
    memset(r, 0, sizeof *r);
    const smattn_merge_problem *p = &m->p;
    r->p = *p;
    r->p.N = n;
    int64_t po = n_o(p) / p->N, pl = n_l(p) / p->N;
    for (int64_t k = 0; k < n; k++)
        for (int64_t e = 0; e < po; e++)
            smattn_store(r->o_parts, m->to, k * po + e, src[k] < 0 ? (double)NAN : m->o[src[k] * po + e]);
    for (int64_t k = 0; k < n; k++)
        for (int64_t e = 0; e < pl; e++)
            smattn_store(r->l_parts, m->tl, k * pl + e, src[k] < 0 ? -HUGE_VAL : m->l[src[k] * pl + e]);
    const int64_t S = p->S, Hq = p->Hq, Dv = p->Dv;
    r->in.o_parts = (smattn_tensor){r->o_parts, m->to, {S * Hq * Dv, Hq * Dv, Dv, 1}};
    r->in.o_part_stride = po;
    r->in.lse_parts = (smattn_tensor){r->l_parts, m->tl, {Hq * S, S, 1, 0}};
    r->in.lse_part_stride = pl;
    r->out.o = (smattn_out_tensor){r->o, tout, {S * Hq * Dv, Hq * Dv, Dv, 1}};
    r->out.lse = (smattn_out_tensor){r->l, tout, {Hq * S, S, 1, 0}};
}

static void oracle(mrun *r, int threads, const char *what)
{
    smattn_ref_config cfg = {0};
    cfg.threads = threads;
    smattn_status st = smattn_ref_merge(&r->p, &r->in, &r->out, &cfg);
    if (st != SMATTN_OK)
        fail(what, "smattn_ref_merge: %s", smattn_status_name(st));
}

static void same_bits(const mrun *a, const mrun *b, int lse_too, const char *what)
{
    size_t es = smattn_dtype_size(a->out.o.dtype);
    int64_t no = n_o(&a->p) / a->p.N, nl = n_l(&a->p) / a->p.N;
    for (int64_t e = 0; e < no + (lse_too ? nl : 0); e++) {
        const unsigned char *x = e < no ? a->o + e * es : a->l + (e - no) * es;
        const unsigned char *y = e < no ? b->o + e * es : b->l + (e - no) * es;
        double vx = smattn_load(x, a->out.o.dtype, 0), vy = smattn_load(y, a->out.o.dtype, 0);
        if (memcmp(x, y, es) != 0 && !(isnan(vx) && isnan(vy)))
            fail(what, "%s[%lld]: %a vs %a", e < no ? "O" : "LSE", (long long)(e < no ? e : e - no),
                 vx, vy);
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    static mprob m;
    static mrun a, b, k1, k2;
    decode(data, size, &m);
    cur = &m;
    const smattn_merge_problem *p = &m.p;
    int64_t N = p->N, no = n_o(p) / N, nl = n_l(p) / N;
    int idx[2 * MAXN + 1];
    for (int64_t n = 0; n < N; n++)
        idx[n] = (int)n;

    /* the oracle in binary64, 1 thread; and with 4 */
    build(&a, &m, idx, N, SMATTN_F64);
    oracle(&a, 1, "oracle");
    build(&b, &m, idx, N, SMATTN_F64);
    oracle(&b, 4, "oracle threads");
    same_bits(&a, &b, 1, "oracle threads 1 vs 4");
    /* reversed partials */
    int rev[2 * MAXN + 1];
    for (int64_t n = 0; n < N; n++)
        rev[n] = (int)(N - 1 - n);
    build(&b, &m, rev, N, SMATTN_F64);
    oracle(&b, 1, "oracle reversed");
    same_bits(&a, &b, 1, "partials reversed");
    /* an empty partial appended (its O is NaN, never read) */
    int app[2 * MAXN + 1];
    memcpy(app, idx, sizeof idx);
    app[N] = -1;
    build(&b, &m, app, N + 1, SMATTN_F64);
    oracle(&b, 1, "oracle empty appended");
    same_bits(&a, &b, 1, "an empty partial appended");
    /* every partial twice: O does not move (LSE moves by log_b 2) */
    int dup[2 * MAXN + 1];
    for (int64_t n = 0; n < 2 * N; n++)
        dup[n] = (int)(n % N);
    build(&b, &m, dup, 2 * N, SMATTN_F64);
    oracle(&b, 1, "oracle doubled");
    same_bits(&a, &b, 0, "every partial twice");
    /* O within the finite partials' range; one partial merged is that partial */
    const double *ao = (const double *)(const void *)a.o, *al = (const double *)(const void *)a.l;
    for (int64_t b_ = 0; b_ < p->B; b_++)
        for (int64_t h = 0; h < p->Hq; h++)
            for (int64_t i = 0; i < p->S; i++) {
                int64_t li = (b_ * p->Hq + h) * p->S + i;
                int poison = 0, any = 0;
                for (int64_t n = 0; n < N; n++) {
                    double t = m.l[n * nl + li];
                    poison |= isnan(t) || (t == HUGE_VAL && p->empty_parts == SMATTN_LSE_NEG_INF);
                    any |= isfinite(t);
                }
                if (poison || !any)
                    continue;
                if (N == 1 && al[li] != m.l[li])
                    fail("one partial", "LSE %a, partial %a", al[li], m.l[li]);
                for (int64_t c = 0; c < p->Dv; c++) {
                    int64_t oi = ((b_ * p->S + i) * p->Hq + h) * p->Dv + c;
                    double lo = HUGE_VAL, hi = -HUGE_VAL;
                    int fin = 1; /* every finite partial's O_nc finite (else SPEC 9.2's classes) */
                    for (int64_t n = 0; n < N; n++)
                        if (isfinite(m.l[n * nl + li])) {
                            fin &= isfinite(m.o[n * no + oi]) != 0;
                            lo = fmin(lo, m.o[n * no + oi]);
                            hi = fmax(hi, m.o[n * no + oi]);
                        }
                    if (fin && !(ao[oi] >= lo && ao[oi] <= hi))
                        fail("convex hull", "O[%lld] %a outside [%a, %a]", (long long)oi, ao[oi], lo, hi);
                    if (N == 1 && fin && !(ao[oi] == m.o[oi]))
                        fail("one partial", "O[%lld] %a, partial %a", (long long)oi, ao[oi], m.o[oi]);
                }
            }

    /* the kernel: within the bound of its output dtype, the same bits for every thread count
     * and ISA */
    build(&k1, &m, idx, N, m.tout);
    smattn_opt_config cfg = {1, "scalar"};
    smattn_status st = smattn_merge(&k1.p, &k1.in, &k1.out, &cfg);
    if (st != SMATTN_OK)
        fail("kernel", "smattn_merge: %s", smattn_status_name(st));
    static double bo[MAXE], bl[MAXL];
    smattn_outputs bd = {{bo, SMATTN_F64, {p->S * p->Hq * p->Dv, p->Hq * p->Dv, p->Dv, 1}},
                         {bl, SMATTN_F64, {p->Hq * p->S, p->S, 1, 0}},
                         {NULL, SMATTN_F64, {0}}};
    smattn_precision pm = smattn_merge_opt_precision();
    st = smattn_merge_bound(&k1.p, &k1.in, &pm, &k1.out, &bd);
    if (st != SMATTN_OK)
        fail("bound", "smattn_merge_bound: %s", smattn_status_name(st));
    for (int64_t e = 0; e < no + nl; e++) {
        int lse = e >= no;
        int64_t j = lse ? e - no : e;
        double c = smattn_load(lse ? k1.l : k1.o, m.tout, j);
        double x = lse ? al[j] : ao[j], B = lse ? bl[j] : bo[j];
        if (!(smattn_error_ratio(c, x, B) <= 1))
            fail("kernel bound", "%s[%lld]: kernel %a, exact %a, bound %a", lse ? "LSE" : "O",
                 (long long)j, c, x, B);
    }
    static const char *const isas[] = {"scalar", "avx2", "avx512"};
    for (int k = 0; k < 3; k++) {
        if (!smattn_opt_isa_available(isas[k]))
            continue;
        build(&k2, &m, idx, N, m.tout);
        smattn_opt_config c2 = {m.threads, isas[k]};
        if (smattn_merge(&k2.p, &k2.in, &k2.out, &c2) != SMATTN_OK)
            fail("kernel", "smattn_merge failed with %s", isas[k]);
        same_bits(&k1, &k2, 1, isas[k]);
    }
    return 0;
}
