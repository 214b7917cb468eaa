/* SPDX-License-Identifier: MIT */
/* test_merge.c: merging partial attention states (SPEC 9): the exact merge against an
 * independent MPFR evaluation and hand-derived exact cases, the conventions, validation,
 * the kernel within its bound and bitwise across thread counts and ISAs, and the property
 * that merging the oracle's partials over a split of the keys gives the full attention. */
#include <check.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <mpfr.h>

#include "smattn.h"
#include "tests/support/testkit.h"

#define LN2 0.69314718055994530942
#define DNAN ((double)NAN)
/* expect_row: the LSE is not checked */
#define SKIP 0x1.23p+999

/* ---- a merge case: contiguous partials and outputs --------------------------------------- */

typedef struct mcase {
    smattn_merge_problem p;
    smattn_merge_inputs in;
    smattn_dtype tin_o, tin_l;
    unsigned char *o_parts, *lse_parts; /* stored in tin_* */
    int64_t no, nl;                     /* elements of one partial */
} mcase;

static void mcase_make(mcase *m, int64_t N, int64_t B, int64_t S, int64_t Hq, int64_t Dv,
                       smattn_dtype to, smattn_dtype tl)
{
    memset(m, 0, sizeof *m);
    m->p = smattn_merge_problem_default();
    m->p.N = N, m->p.B = B, m->p.S = S, m->p.Hq = Hq, m->p.Dv = Dv;
    m->tin_o = to, m->tin_l = tl;
    m->no = B * S * Hq * Dv;
    m->nl = B * Hq * S;
    m->o_parts = calloc((size_t)(N * m->no), smattn_dtype_size(to));
    m->lse_parts = calloc((size_t)(N * m->nl), smattn_dtype_size(tl));
    m->in.o_parts = (smattn_tensor){m->o_parts, to, {S * Hq * Dv, Hq * Dv, Dv, 1}};
    m->in.o_part_stride = m->no;
    m->in.lse_parts = (smattn_tensor){m->lse_parts, tl, {Hq * S, S, 1, 0}};
    m->in.lse_part_stride = m->nl;
}

static void mcase_free(mcase *m)
{
    free(m->o_parts);
    free(m->lse_parts);
}

static int64_t o_idx(const mcase *m, int64_t n, int64_t b, int64_t i, int64_t h, int64_t c)
{
    const smattn_merge_problem *p = &m->p;
    return n * m->no + ((b * p->S + i) * p->Hq + h) * p->Dv + c;
}

static int64_t l_idx(const mcase *m, int64_t n, int64_t b, int64_t h, int64_t i)
{
    const smattn_merge_problem *p = &m->p;
    return n * m->nl + (b * p->Hq + h) * p->S + i;
}

/* set an input (rounded to its dtype) and return the value as stored */
static double set_o(mcase *m, int64_t n, int64_t b, int64_t i, int64_t h, int64_t c, double x)
{
    int64_t k = o_idx(m, n, b, i, h, c);
    smattn_store(m->o_parts, m->tin_o, k, x);
    return smattn_load(m->o_parts, m->tin_o, k);
}

static double set_l(mcase *m, int64_t n, int64_t b, int64_t h, int64_t i, double x)
{
    int64_t k = l_idx(m, n, b, h, i);
    smattn_store(m->lse_parts, m->tin_l, k, x);
    return smattn_load(m->lse_parts, m->tin_l, k);
}

typedef struct mout {
    void *o, *l;
    smattn_outputs out;
    smattn_dtype t;
    int64_t no, nl;
} mout;

static void mout_make(mout *x, const mcase *m, smattn_dtype t)
{
    const smattn_merge_problem *p = &m->p;
    memset(x, 0, sizeof *x);
    x->t = t;
    x->no = p->B * p->S * p->Hq * p->Dv;
    x->nl = p->B * p->Hq * p->S;
    x->o = calloc((size_t)x->no, smattn_dtype_size(t));
    x->l = calloc((size_t)x->nl, smattn_dtype_size(t));
    x->out.o = (smattn_out_tensor){x->o, t, {p->S * p->Hq * p->Dv, p->Hq * p->Dv, p->Dv, 1}};
    x->out.lse = (smattn_out_tensor){x->l, t, {p->Hq * p->S, p->S, 1, 0}};
}

static void mout_free(mout *x)
{
    free(x->o);
    free(x->l);
}

static double get_o(const mout *x, const mcase *m, int64_t b, int64_t i, int64_t h, int64_t c)
{
    return smattn_load(x->o, x->t, o_idx(m, 0, b, i, h, c));
}

static double get_l(const mout *x, const mcase *m, int64_t b, int64_t h, int64_t i)
{
    return smattn_load(x->l, x->t, l_idx(m, 0, b, h, i));
}

/* the same value and class: NaN = NaN, and the sign of a zero counts */
static int same(double a, double b)
{
    if (a != a || b != b)
        return a != a && b != b;
    return a == b && signbit(a) == signbit(b);
}

/* ---- an independent evaluation: high precision, one IEEE rounding ------------------------ */

#define HP 6000

/* round x (exact, or within 2^-HP relative) once to t with IEEE subnormals and overflow:
 * MPFR's documented idiom (mpfr_check_range, then mpfr_subnormalize). */
static double round_to(mpfr_srcptr x, smattn_dtype t)
{
    static const int prec[4] = {53, 24, 11, 8}, emin[4] = {-1073, -148, -23, -132},
                     emax[4] = {1024, 128, 16, 128};
    mpfr_exp_t e0 = mpfr_get_emin(), e1 = mpfr_get_emax();
    mpfr_t y;
    mpfr_init2(y, prec[t]);
    int inex = mpfr_set(y, x, MPFR_RNDN);
    mpfr_set_emin(emin[t]);
    mpfr_set_emax(emax[t]);
    inex = mpfr_check_range(y, inex, MPFR_RNDN);
    mpfr_subnormalize(y, inex, MPFR_RNDN);
    double d = mpfr_get_d(y, MPFR_RNDN);
    mpfr_set_emin(e0);
    mpfr_set_emax(e1);
    mpfr_clear(y);
    return d;
}

/* the expected merged LSE and O[0..Dv) of one row, from the loaded inputs (SPEC 9.2-9.3) */
static void indep_row(const mcase *m, int64_t b, int64_t h, int64_t i, smattn_dtype t,
                      double *lse, double *o)
{
    const smattn_merge_problem *p = &m->p;
    int base2 = p->lse_base == SMATTN_LSE_BASE_2, poison = 0;
    int64_t k = 0, idx[1024];
    double tv[1024];
    for (int64_t n = 0; n < p->N; n++) {
        double x = smattn_load(m->lse_parts, m->tin_l, l_idx(m, n, b, h, i));
        if (isnan(x) || (x == HUGE_VAL && p->empty_parts == SMATTN_LSE_NEG_INF))
            poison = 1;
        else if (isfinite(x))
            idx[k] = n, tv[k++] = x;
    }
    if (poison) {
        *lse = DNAN;
        for (int64_t c = 0; c < p->Dv; c++)
            o[c] = DNAN;
        return;
    }
    if (k == 0) {
        *lse = p->empty_lse == SMATTN_LSE_ZERO ? 0.0
               : p->empty_lse == SMATTN_LSE_POS_INF ? HUGE_VAL : -HUGE_VAL;
        for (int64_t c = 0; c < p->Dv; c++)
            o[c] = p->empty_rows == SMATTN_EMPTY_NAN ? DNAN : 0.0;
        return;
    }
    mpfr_exp_t e0 = mpfr_get_emin(), e1 = mpfr_get_emax();
    mpfr_set_emin(mpfr_get_emin_min());
    mpfr_set_emax(mpfr_get_emax_max());
    double M = tv[0];
    for (int64_t n = 1; n < k; n++)
        M = fmax(M, tv[n]);
    mpfr_t w[1024], L, num, x;
    mpfr_inits2(HP, L, num, x, (mpfr_ptr)0);
    mpfr_set_zero(L, 1);
    for (int64_t n = 0; n < k; n++) {
        mpfr_init2(w[n], HP);
        mpfr_set_d(x, tv[n], MPFR_RNDN);
        mpfr_sub_d(x, x, M, MPFR_RNDN);
        if (base2)
            mpfr_exp2(w[n], x, MPFR_RNDN);
        else
            mpfr_exp(w[n], x, MPFR_RNDN);
        mpfr_add(L, L, w[n], MPFR_RNDN);
    }
    if (base2)
        mpfr_log2(x, L, MPFR_RNDN);
    else
        mpfr_log(x, L, MPFR_RNDN);
    mpfr_add_d(x, x, M, MPFR_RNDN);
    *lse = round_to(x, t);
    for (int64_t c = 0; c < p->Dv; c++) {
        int nan = 0, pi = 0, ni = 0;
        mpfr_set_zero(num, 1);
        for (int64_t n = 0; n < k; n++) {
            double v = smattn_load(m->o_parts, m->tin_o, o_idx(m, idx[n], b, i, h, c));
            nan |= isnan(v), pi |= v == HUGE_VAL, ni |= v == -HUGE_VAL;
            if (isfinite(v)) {
                mpfr_mul_d(x, w[n], v, MPFR_RNDN);
                mpfr_add(num, num, x, MPFR_RNDN);
            }
        }
        if (nan || (pi && ni))
            o[c] = DNAN;
        else if (pi || ni)
            o[c] = ni ? -HUGE_VAL : HUGE_VAL;
        else {
            mpfr_div(x, num, L, MPFR_RNDN);
            o[c] = mpfr_zero_p(x) ? 0.0 : round_to(x, t);
        }
    }
    for (int64_t n = 0; n < k; n++)
        mpfr_clear(w[n]);
    mpfr_clears(L, num, x, (mpfr_ptr)0);
    mpfr_set_emin(e0);
    mpfr_set_emax(e1);
}

/* every element of the oracle's output equals the independent evaluation */
static void check_oracle(const mcase *m, smattn_dtype t, const char *what, uint64_t seed)
{
    mout r;
    mout_make(&r, m, t);
    smattn_ref_config cfg = {0};
    smattn_status st = smattn_ref_merge(&m->p, &m->in, &r.out, &cfg);
    ck_assert_msg(st == SMATTN_OK, "%s seed %llu: status %s", what, (unsigned long long)seed,
                  smattn_status_name(st));
    const smattn_merge_problem *p = &m->p;
    double o[64], lse;
    for (int64_t b = 0; b < p->B; b++)
        for (int64_t h = 0; h < p->Hq; h++)
            for (int64_t i = 0; i < p->S; i++) {
                indep_row(m, b, h, i, t, &lse, o);
                double got = get_l(&r, m, b, h, i);
                ck_assert_msg(same(got, lse), "%s seed %llu %s: LSE (%lld,%lld,%lld) %a, expected %a",
                              what, (unsigned long long)seed, smattn_dtype_name(t), (long long)b,
                              (long long)h, (long long)i, got, lse);
                for (int64_t c = 0; c < p->Dv; c++) {
                    got = get_o(&r, m, b, i, h, c);
                    ck_assert_msg(same(got, o[c]),
                                  "%s seed %llu %s: O (%lld,%lld,%lld,%lld) %a, expected %a", what,
                                  (unsigned long long)seed, smattn_dtype_name(t), (long long)b,
                                  (long long)h, (long long)i, (long long)c, got, o[c]);
                }
            }
    /* the same bits with one thread as with every core */
    mout r1;
    mout_make(&r1, m, t);
    cfg.threads = 1;
    ck_assert_int_eq(smattn_ref_merge(&m->p, &m->in, &r1.out, &cfg), SMATTN_OK);
    ck_assert_msg(memcmp(r.o, r1.o, (size_t)r.no * smattn_dtype_size(t)) == 0 &&
                      memcmp(r.l, r1.l, (size_t)r.nl * smattn_dtype_size(t)) == 0,
                  "%s seed %llu: one thread differs", what, (unsigned long long)seed);
    mout_free(&r1);
    mout_free(&r);
}

/* ---- random cases ------------------------------------------------------------------------- */

static const smattn_dtype dts[4] = {SMATTN_F64, SMATTN_F32, SMATTN_F16, SMATTN_BF16};

/* a random case; `special` injects empty, +inf, NaN partials and non-finite O values */
static void random_case(mcase *m, rng *r, int64_t N, int special)
{
    smattn_dtype to = dts[rng_pick(r, 4)], tl = dts[rng_pick(r, 2)];
    mcase_make(m, N, rng_int(r, 1, 2), rng_int(r, 1, 2), rng_int(r, 1, 2), rng_int(r, 1, 3), to, tl);
    smattn_merge_problem *p = &m->p;
    p->lse_base = rng_chance(r, 0.5) ? SMATTN_LSE_BASE_2 : SMATTN_LSE_BASE_E;
    p->empty_parts = rng_chance(r, 0.5) ? SMATTN_LSE_POS_INF : SMATTN_LSE_NEG_INF;
    p->empty_rows = rng_chance(r, 0.5) ? SMATTN_EMPTY_NAN : SMATTN_EMPTY_ZERO;
    p->empty_lse = (smattn_empty_lse)rng_pick(r, 3);
    int mode = (int)rng_pick(r, 5);
    double base = rng_gauss(r) * 4;
    for (int64_t b = 0; b < p->B; b++)
        for (int64_t h = 0; h < p->Hq; h++)
            for (int64_t i = 0; i < p->S; i++)
                for (int64_t n = 0; n < N; n++) {
                    double t = mode == 0   ? base                              /* all equal */
                               : mode == 1 ? floor(base) + (double)rng_int(r, -3, 3) /* integers */
                               : mode == 2 ? base + rng_gauss(r) * 1e3         /* spread */
                                           : base + rng_gauss(r) * 3;
                    if (special && rng_chance(r, 0.15))
                        t = -HUGE_VAL;
                    else if (special && rng_chance(r, 0.05))
                        t = p->empty_parts == SMATTN_LSE_POS_INF ? HUGE_VAL
                                                                 : (rng_chance(r, 0.5) ? HUGE_VAL : DNAN);
                    set_l(m, n, b, h, i, t);
                    for (int64_t c = 0; c < p->Dv; c++) {
                        double v = mode == 4 && n > 0 ? smattn_load(m->o_parts, m->tin_o, o_idx(m, 0, b, i, h, c))
                                                      : rng_gauss(r);
                        if (special && rng_chance(r, 0.03))
                            v = rng_chance(r, 0.5) ? DNAN : (rng_chance(r, 0.5) ? HUGE_VAL : -HUGE_VAL);
                        set_o(m, n, b, i, h, c, v);
                    }
                }
}

START_TEST(test_oracle_random)
{
    static const int64_t Ns[] = {1, 2, 3, 5, 8, 64};
    int cases = test_scaled(36);
    for (int k = 0; k < cases; k++) {
        uint64_t seed = 0x6d65726765ull + (uint64_t)k;
        rng r = {seed};
        mcase m;
        random_case(&m, &r, Ns[k % 6], k % 3 == 2);
        check_oracle(&m, dts[rng_pick(&r, 4)], "random", seed);
        mcase_free(&m);
    }
}
END_TEST

/* ---- hand-derived exact cases (SPEC 9.3) --------------------------------------------------- */

/* One row, N partials, Dv = 1, f64 inputs; merged into f32. */
static void row_case(mcase *m, int64_t N, smattn_lse_base base, const double *t, const double *o)
{
    mcase_make(m, N, 1, 1, 1, 1, SMATTN_F64, SMATTN_F64);
    m->p.lse_base = base;
    for (int64_t n = 0; n < N; n++) {
        set_l(m, n, 0, 0, 0, t[n]);
        set_o(m, n, 0, 0, 0, 0, o[n]);
    }
}

static void expect_row(const mcase *m, smattn_dtype t, double lse, double o, const char *what)
{
    mout r;
    mout_make(&r, m, t);
    smattn_status st = smattn_ref_merge(&m->p, &m->in, &r.out, NULL);
    ck_assert_msg(st == SMATTN_OK, "%s: %s", what, smattn_status_name(st));
    double gl = get_l(&r, m, 0, 0, 0), go = get_o(&r, m, 0, 0, 0, 0);
    ck_assert_msg(lse == SKIP || same(gl, lse), "%s: LSE %a, expected %a", what, gl, lse);
    ck_assert_msg(same(go, o), "%s: O %a, expected %a", what, go, o);
    mout_free(&r);
}

START_TEST(test_oracle_exact)
{
    mcase m;
    const double mid = 1 + 0x1p-24, mid3 = 1 + 3 * 0x1p-24, d = 0x1p-30;
    /* equal LSEs: the mean, a binary32 midpoint, ties to even (down, then up) */
    row_case(&m, 2, SMATTN_LSE_BASE_E, (double[]){0.5, 0.5}, (double[]){1, 1 + 0x1p-23});
    expect_row(&m, SMATTN_F32, SKIP, 1.0, "equal LSE, tie down");
    mcase_free(&m);
    row_case(&m, 2, SMATTN_LSE_BASE_E, (double[]){0.5, 0.5}, (double[]){1 + 0x1p-23, 1 + 0x1p-22});
    expect_row(&m, SMATTN_F32, SKIP, 1 + 0x1p-22, "equal LSE, tie up");
    mcase_free(&m);
    /* base 2, weights 1 and 2: O = (B + 2d + 2(B - d)) / 3 = B exactly */
    row_case(&m, 2, SMATTN_LSE_BASE_2, (double[]){0, 1}, (double[]){mid + 2 * d, mid - d});
    expect_row(&m, SMATTN_F32, SKIP, 1.0, "base 2, rational midpoint");
    mcase_free(&m);
    /* inexact weights around an exact midpoint (e is irrational, the classes cancel): the
     * enclosure straddles B, the sign test finds 0, ties to even; and an exact zero */
    row_case(&m, 3, SMATTN_LSE_BASE_E, (double[]){0, 0, 1}, (double[]){mid + d, mid - d, mid});
    expect_row(&m, SMATTN_F32, SKIP, 1.0, "irrational weights, midpoint, tie down");
    mcase_free(&m);
    row_case(&m, 3, SMATTN_LSE_BASE_E, (double[]){0, 0, 1}, (double[]){mid3 + d, mid3 - d, mid3});
    expect_row(&m, SMATTN_F32, SKIP, 1 + 0x1p-22, "irrational weights, midpoint, tie up");
    mcase_free(&m);
    row_case(&m, 3, SMATTN_LSE_BASE_2, (double[]){0.5, 0.5, 0}, (double[]){1, -1, 0});
    expect_row(&m, SMATTN_F64, SKIP, 0.0, "irrational weights, exact zero");
    mcase_free(&m);
    row_case(&m, 3, SMATTN_LSE_BASE_2, (double[]){0.5, 0.5, 0}, (double[]){1, -1, 0x1p-1074});
    expect_row(&m, SMATTN_F64, SKIP, 0.0, "0.26 of the least subnormal: +0");
    mcase_free(&m);
    row_case(&m, 3, SMATTN_LSE_BASE_2, (double[]){0.5, 0.5, 0}, (double[]){1, -1, 0x1p-1072});
    expect_row(&m, SMATTN_F64, SKIP, 0x1p-1074, "1.04 of the least subnormal");
    mcase_free(&m);
    /* two classes that nearly cancel at the midpoint (2^-52 against 1151235 e^-50 = 0.89
     * e^-50 above it; 1151236: 0.11 e^-50 below): the sign test's Ziv loop over classes */
    row_case(&m, 2, SMATTN_LSE_BASE_E, (double[]){0, -50}, (double[]){mid + 0x1p-52, mid - 1151235});
    expect_row(&m, SMATTN_F32, SKIP, 1 + 0x1p-23, "two classes, just above a midpoint");
    mcase_free(&m);
    row_case(&m, 2, SMATTN_LSE_BASE_E, (double[]){0, -50}, (double[]){mid3 + 0x1p-52, mid3 - 1151236});
    expect_row(&m, SMATTN_F32, SKIP, 1 + 0x1p-23, "two classes, just below a midpoint");
    mcase_free(&m);
    /* exact LSEs in base 2: log2(1 + 1) = 1, log2(2^-1 + 2^-1) = 0 (+0), 2^5+2^5+2^6 = 2^7 */
    row_case(&m, 2, SMATTN_LSE_BASE_2, (double[]){0, 0}, (double[]){1, 1});
    expect_row(&m, SMATTN_F32, 1.0, 1.0, "base 2 LSE 1");
    mcase_free(&m);
    row_case(&m, 2, SMATTN_LSE_BASE_2, (double[]){-1, -1}, (double[]){1, -1});
    expect_row(&m, SMATTN_F16, 0.0, 0.0, "base 2 LSE 0, O 0");
    mcase_free(&m);
    row_case(&m, 3, SMATTN_LSE_BASE_2, (double[]){5, 5, 6}, (double[]){-0.0, -0.0, -0.0});
    expect_row(&m, SMATTN_BF16, 7.0, 0.0, "base 2 LSE 7, O of -0 is +0");
    mcase_free(&m);
    /* a partial far beyond exp's range decides a midpoint by its side (SPEC 9.3) */
    row_case(&m, 2, SMATTN_LSE_BASE_E, (double[]){0, -1e300}, (double[]){mid, 2});
    expect_row(&m, SMATTN_F32, 0.0, 1 + 0x1p-23, "e^-1e300 above a midpoint");
    mcase_free(&m);
    row_case(&m, 2, SMATTN_LSE_BASE_E, (double[]){0, -1e300}, (double[]){mid3, 0});
    expect_row(&m, SMATTN_F32, 0.0, 1 + 0x1p-23, "e^-1e300 below a midpoint");
    mcase_free(&m);
    row_case(&m, 2, SMATTN_LSE_BASE_2, (double[]){0, -0x1p70}, (double[]){mid, 2});
    expect_row(&m, SMATTN_F32, 0.0, 1 + 0x1p-23, "2^-2^70 above a midpoint");
    mcase_free(&m);
    /* base 2: the two upper partials cancel exactly at the midpoint; the far one decides */
    row_case(&m, 3, SMATTN_LSE_BASE_2, (double[]){0, 1, -0x1p70}, (double[]){mid3 + 2 * d, mid3 - d, 0});
    expect_row(&m, SMATTN_F32, SKIP, 1 + 0x1p-23, "cancelling cluster, far partial below");
    mcase_free(&m);
    row_case(&m, 3, SMATTN_LSE_BASE_2, (double[]){0, 1, -0x1p70}, (double[]){mid + 2 * d, mid - d, 2});
    expect_row(&m, SMATTN_F32, SKIP, 1 + 0x1p-23, "cancelling cluster, far partial above");
    mcase_free(&m);
    /* the LSE just above a binary32 midpoint: LSE = B + log(1 + e^-1e300) */
    row_case(&m, 2, SMATTN_LSE_BASE_E, (double[]){mid, -1e300}, (double[]){1, 1});
    expect_row(&m, SMATTN_F32, 1 + 0x1p-23, 1.0, "LSE above a midpoint, base e");
    mcase_free(&m);
    row_case(&m, 2, SMATTN_LSE_BASE_2, (double[]){mid, mid - 0x1p70}, (double[]){1, 1});
    expect_row(&m, SMATTN_F32, 1 + 0x1p-23, 1.0, "LSE above a midpoint, base 2");
    mcase_free(&m);
    /* the overflow threshold of binary16 (65520) as an exact mean: infinity; and reached
     * with irrational weights (the boundary is the threshold) */
    row_case(&m, 2, SMATTN_LSE_BASE_E, (double[]){0, 0}, (double[]){65504, 65536});
    expect_row(&m, SMATTN_F16, SKIP, HUGE_VAL, "binary16 threshold, exact mean");
    mcase_free(&m);
    row_case(&m, 3, SMATTN_LSE_BASE_E, (double[]){0, 0, 1}, (double[]){65520 + d, 65520 - d, 65520});
    expect_row(&m, SMATTN_F16, SKIP, HUGE_VAL, "binary16 threshold, irrational weights");
    mcase_free(&m);
    row_case(&m, 3, SMATTN_LSE_BASE_E, (double[]){0, 0, 1}, (double[]){-65520 - d, -65520 + 2 * d, -65520});
    expect_row(&m, SMATTN_F16, SKIP, -65504, "just inside binary16's negative threshold");
    mcase_free(&m);
    /* one partial: its state exactly, also rounded to a narrower dtype */
    row_case(&m, 1, SMATTN_LSE_BASE_E, (double[]){mid3}, (double[]){mid});
    expect_row(&m, SMATTN_F32, 1 + 0x1p-22, 1.0, "N = 1");
    mcase_free(&m);
}
END_TEST

/* ---- conventions (SPEC 9.2) ----------------------------------------------------------------- */

static double check_kernel(const mcase *m, smattn_dtype t, uint64_t seed);
static void to_kernel_dtypes(mcase *m);

/* the oracle's expected row, then the kernel on the binary32 copy of the case (its class
 * and bound against the oracle on that copy) */
static void expect_both(mcase *m, double lse, double o, const char *what)
{
    expect_row(m, SMATTN_F32, lse, o, what);
    to_kernel_dtypes(m);
    check_kernel(m, SMATTN_F32, 0);
    mcase_free(m);
}

START_TEST(test_conventions)
{
    mcase m;
    const double inf = HUGE_VAL;
    /* all parts empty: each empty-row convention and sentinel */
    for (int parts = 0; parts < 2; parts++)
        for (int rows = 0; rows < 2; rows++)
            for (int lse = 0; lse < 3; lse++) {
                double e = parts ? inf : -inf;
                row_case(&m, 3, SMATTN_LSE_BASE_E, (double[]){e, -inf, e}, (double[]){DNAN, 5, inf});
                m.p.empty_parts = parts ? SMATTN_LSE_POS_INF : SMATTN_LSE_NEG_INF;
                m.p.empty_rows = rows ? SMATTN_EMPTY_NAN : SMATTN_EMPTY_ZERO;
                m.p.empty_lse = (smattn_empty_lse)lse;
                expect_row(&m, SMATTN_F32, lse == 0 ? -inf : lse == 1 ? inf : 0.0, rows ? DNAN : 0.0,
                           "all empty");
                check_oracle(&m, SMATTN_F64, "all empty", 0);
                to_kernel_dtypes(&m);
                check_kernel(&m, SMATTN_F16, 0);
                mcase_free(&m);
            }
    /* an empty partial's O is never read (NaN there changes nothing) */
    row_case(&m, 2, SMATTN_LSE_BASE_E, (double[]){-inf, 2}, (double[]){DNAN, 3});
    expect_both(&m, 2.0, 3.0, "empty partial not read");
    row_case(&m, 2, SMATTN_LSE_BASE_2, (double[]){inf, 2}, (double[]){DNAN, 3});
    m.p.empty_parts = SMATTN_LSE_POS_INF;
    expect_both(&m, 2.0, 3.0, "+inf empty partial not read");
    /* +inf under the -inf convention, and a NaN LSE: the row is NaN */
    row_case(&m, 2, SMATTN_LSE_BASE_E, (double[]){inf, 2}, (double[]){1, 3});
    expect_both(&m, DNAN, DNAN, "+inf LSE poisons");
    row_case(&m, 2, SMATTN_LSE_BASE_E, (double[]){DNAN, 2}, (double[]){1, 3});
    expect_both(&m, DNAN, DNAN, "NaN LSE poisons");
    /* O's non-finite values act per column, whatever the weight (even one below exp's range) */
    row_case(&m, 2, SMATTN_LSE_BASE_E, (double[]){0, -1e300}, (double[]){1, inf});
    expect_both(&m, 0.0, inf, "+inf O with a tiny weight");
    row_case(&m, 2, SMATTN_LSE_BASE_E, (double[]){0, -200}, (double[]){1, -inf});
    expect_both(&m, 0.0, -inf, "-inf O with a weight below binary32's range");
    row_case(&m, 2, SMATTN_LSE_BASE_E, (double[]){0, 0}, (double[]){-inf, inf});
    expect_both(&m, SKIP, DNAN, "+inf and -inf O");
    row_case(&m, 2, SMATTN_LSE_BASE_E, (double[]){0, -1e300}, (double[]){1, DNAN});
    expect_both(&m, 0.0, DNAN, "NaN O");
    /* the merged LSE rounds to infinity past the output's range */
    row_case(&m, 2, SMATTN_LSE_BASE_E, (double[]){1e300, 1e300}, (double[]){1, 1});
    expect_both(&m, inf, 1.0, "LSE overflows binary32");
}
END_TEST

/* ---- validation ----------------------------------------------------------------------------- */

START_TEST(test_validate)
{
    mcase m;
    mcase_make(&m, 2, 1, 2, 2, 3, SMATTN_F32, SMATTN_F32);
    mout r;
    mout_make(&r, &m, SMATTN_F32);
    smattn_merge_problem p = m.p;
    smattn_merge_inputs in = m.in;
    smattn_outputs out = r.out;
#define EXPECT(code)                                                                           \
    do {                                                                                       \
        smattn_status s1 = smattn_merge_validate(&p, &in, &out);                               \
        smattn_status s2 = smattn_ref_merge(&p, &in, &out, NULL);                              \
        smattn_status s3 = smattn_merge(&p, &in, &out, NULL);                                  \
        ck_assert_msg(s1 == (code) && s2 == (code) && s3 == (code), "line %d: %s %s %s",       \
                      __LINE__, smattn_status_name(s1), smattn_status_name(s2),                \
                      smattn_status_name(s3));                                                 \
        p = m.p, in = m.in, out = r.out;                                                       \
    } while (0)
    EXPECT(SMATTN_OK);
    ck_assert_int_eq(smattn_merge_validate(NULL, &in, &out), SMATTN_ERR_NULL);
    in.o_parts.data = NULL;
    EXPECT(SMATTN_ERR_NULL);
    out.o.data = NULL, out.lse.data = NULL;
    EXPECT(SMATTN_ERR_NULL);
    p.N = 0;
    EXPECT(SMATTN_ERR_SHAPE);
    p.Dv = (int64_t)1 << 33;
    EXPECT(SMATTN_ERR_SHAPE);
    p.empty_rows = SMATTN_EMPTY_MEAN;
    EXPECT(SMATTN_ERR_OPTION);
    p.empty_parts = SMATTN_LSE_ZERO;
    EXPECT(SMATTN_ERR_OPTION);
    p.lse_base = (smattn_lse_base)2;
    EXPECT(SMATTN_ERR_OPTION);
    p.empty_lse = (smattn_empty_lse)3;
    EXPECT(SMATTN_ERR_OPTION);
    out.p = out.o;
    EXPECT(SMATTN_ERR_OPTION);
    in.o_part_stride = -1;
    EXPECT(SMATTN_ERR_STRIDE);
    in.lse_parts.stride[1] = -2;
    EXPECT(SMATTN_ERR_STRIDE);
    in.o_part_stride = INT64_MAX / 2;
    EXPECT(SMATTN_ERR_OVERFLOW);
    in.lse_parts.dtype = SMATTN_BOOL;
    EXPECT(SMATTN_ERR_DTYPE);
    out.o.dtype = SMATTN_BOOL;
    EXPECT(SMATTN_ERR_DTYPE);
    out.lse.data = m.lse_parts; /* an output over an input */
    EXPECT(SMATTN_ERR_ALIAS);
    out.lse.data = (char *)r.o + 4; /* over the other output */
    EXPECT(SMATTN_ERR_ALIAS);
    out.o.stride[3] = 0; /* O over itself */
    EXPECT(SMATTN_ERR_ALIAS);
    /* the kernel: binary64 and unknown ISAs */
    mcase m64;
    mcase_make(&m64, 2, 1, 2, 2, 3, SMATTN_F64, SMATTN_F32);
    ck_assert_int_eq(smattn_merge(&m64.p, &m64.in, &out, NULL), SMATTN_ERR_UNSUPPORTED);
    ck_assert_int_eq(smattn_ref_merge(&m64.p, &m64.in, &out, NULL), SMATTN_OK);
    mcase_free(&m64);
    smattn_opt_config cfg = {0, "sse9"};
    ck_assert_int_eq(smattn_merge(&p, &in, &out, &cfg), SMATTN_ERR_OPTION);
    smattn_ref_config rc = {0};
    rc.max_prec = 1;
    ck_assert_int_eq(smattn_ref_merge(&p, &in, &out, &rc), SMATTN_ERR_OPTION);
#undef EXPECT
    mout_free(&r);
    mcase_free(&m);
}
END_TEST

/* ---- the kernel ------------------------------------------------------------------------------ */

/* The kernel's outputs in dtype t against the oracle's binary64 within smattn_merge_bound;
 * the same bits for 1, 2 and all threads and every ISA the CPU has. Returns the largest ratio. */
static double check_kernel(const mcase *m, smattn_dtype t, uint64_t seed)
{
    mout ex, bd, k1;
    mout_make(&ex, m, SMATTN_F64);
    mout_make(&bd, m, SMATTN_F64);
    mout_make(&k1, m, t);
    ck_assert_int_eq(smattn_ref_merge(&m->p, &m->in, &ex.out, NULL), SMATTN_OK);
    smattn_precision pm = smattn_merge_opt_precision();
    ck_assert_int_eq(smattn_merge_bound(&m->p, &m->in, &pm, &k1.out, &bd.out), SMATTN_OK);
    smattn_opt_config cfg = {1, NULL};
    ck_assert_int_eq(smattn_merge(&m->p, &m->in, &k1.out, &cfg), SMATTN_OK);
    double worst = 0;
    for (int64_t k = 0; k < ex.no + ex.nl; k++) {
        int lse = k >= ex.no;
        int64_t e = lse ? k - ex.no : k;
        double c = smattn_load(lse ? k1.l : k1.o, t, e);
        double x = smattn_load(lse ? ex.l : ex.o, SMATTN_F64, e);
        double B = smattn_load(lse ? bd.l : bd.o, SMATTN_F64, e);
        double ratio = smattn_error_ratio(c, x, B);
        ck_assert_msg(ratio <= 1, "seed %llu %s %s[%lld]: kernel %a, exact %a, bound %a",
                      (unsigned long long)seed, smattn_dtype_name(t), lse ? "LSE" : "O",
                      (long long)e, c, x, B);
        worst = fmax(worst, isfinite(B) ? ratio : 0);
    }
    static const char *isas[] = {"scalar", "avx2", "avx512", NULL};
    size_t bytes_o = (size_t)k1.no * smattn_dtype_size(t), bytes_l = (size_t)k1.nl * smattn_dtype_size(t);
    for (int a = 0; a < 4; a++)
        for (int th = 0; th <= 2; th++) {
            if (isas[a] && !smattn_opt_isa_available(isas[a]))
                continue;
            mout k2;
            mout_make(&k2, m, t);
            smattn_opt_config c2 = {th, isas[a]};
            ck_assert_int_eq(smattn_merge(&m->p, &m->in, &k2.out, &c2), SMATTN_OK);
            ck_assert_msg(memcmp(k1.o, k2.o, bytes_o) == 0 && memcmp(k1.l, k2.l, bytes_l) == 0,
                          "seed %llu: isa %s threads %d differs from scalar, 1 thread",
                          (unsigned long long)seed, isas[a] ? isas[a] : "(default)", th);
            mout_free(&k2);
        }
    mout_free(&ex);
    mout_free(&bd);
    mout_free(&k1);
    return worst;
}

/* replace binary64 inputs by binary32 (rounded), which the kernel reads */
static void to_kernel_dtypes(mcase *m)
{
    mcase m2;
    mcase_make(&m2, m->p.N, m->p.B, m->p.S, m->p.Hq, m->p.Dv,
               m->tin_o == SMATTN_F64 ? SMATTN_F32 : m->tin_o,
               m->tin_l == SMATTN_F64 ? SMATTN_F32 : m->tin_l);
    m2.p = m->p;
    for (int64_t e = 0; e < m->p.N * m->no; e++)
        smattn_store(m2.o_parts, m2.tin_o, e, smattn_load(m->o_parts, m->tin_o, e));
    for (int64_t e = 0; e < m->p.N * m->nl; e++)
        smattn_store(m2.lse_parts, m2.tin_l, e, smattn_load(m->lse_parts, m->tin_l, e));
    mcase_free(m);
    *m = m2;
}

START_TEST(test_kernel)
{
    static const int64_t Ns[] = {1, 2, 7, 64, 65};
    static const smattn_dtype kd[3] = {SMATTN_F32, SMATTN_F16, SMATTN_BF16};
    double worst = 0;
    int cases = test_scaled(25);
    for (int k = 0; k < cases; k++) {
        uint64_t seed = 0x6b65726eull + (uint64_t)k;
        rng r = {seed};
        mcase m;
        random_case(&m, &r, Ns[k % 5], k % 4 == 3);
        if (m.tin_o == SMATTN_F64 || m.tin_l == SMATTN_F64)
            to_kernel_dtypes(&m);
        worst = fmax(worst, check_kernel(&m, kd[k % 3], seed));
        mcase_free(&m);
    }
    /* a wide row: the vector body and its tail */
    mcase m;
    mcase_make(&m, 9, 1, 3, 2, 37, SMATTN_F32, SMATTN_BF16);
    rng r = {77};
    for (int64_t e = 0; e < 9 * m.no; e++)
        smattn_store(m.o_parts, SMATTN_F32, e, rng_gauss(&r));
    for (int64_t e = 0; e < 9 * m.nl; e++)
        smattn_store(m.lse_parts, SMATTN_BF16, e, rng_gauss(&r) * 2);
    for (int k = 0; k < 3; k++) /* the vector stores of each output dtype */
        worst = fmax(worst, check_kernel(&m, kd[k], 77));
    mcase_free(&m);
    ck_assert_msg(worst > 0x1p-12, "the bound is never approached (%g): a vacuous test", worst);
}
END_TEST

/* ---- the split property ---------------------------------------------------------------------- */

/* Full attention by the oracle against the merge of the oracle's partials over a random split
 * of the keys (each part a bool mask; some parts empty). With binary64 partials (LSE in base
 * e, or base 2 via the exact change of base below) the merged value moves from the full one by
 * the partials' roundings (SPEC 9.6): |dO| <= 2 u (sum p|O_n| + sum p |O_n - o| |LSE_n| ln b
 * (1 + ...)) to first order; the test allows four times that plus the outputs' half ulps. */
START_TEST(test_split_property)
{
    int cases = test_scaled(12);
    for (int k = 0; k < cases; k++) {
        uint64_t seed = 0x73706c6974ull + (uint64_t)k;
        rng r = {seed};
        const int64_t B = 1, S = rng_int(&r, 1, 3), T = rng_int(&r, 1, 12), Hq = 2, D = 3,
                      Dv = rng_int(&r, 1, 4), N = rng_int(&r, 1, 5);
        smattn_problem ap = smattn_problem_default();
        ap.B = B, ap.S = S, ap.T = T, ap.Hq = Hq, ap.Hkv = 1, ap.D = D, ap.Dv = Dv;
        ap.scale = smattn_default_scale(D);
        if (rng_chance(&r, 0.3))
            ap.causal = SMATTN_CAUSAL_LOWER_RIGHT;
        float q[3 * 2 * 3], kk[12 * 3], v[12 * 4];
        for (size_t e = 0; e < sizeof q / sizeof q[0]; e++)
            q[e] = (float)(rng_gauss(&r) * 2);
        for (size_t e = 0; e < sizeof kk / sizeof kk[0]; e++)
            kk[e] = (float)(rng_gauss(&r) * 2);
        for (size_t e = 0; e < sizeof v / sizeof v[0]; e++)
            v[e] = (float)rng_gauss(&r);
        smattn_inputs ain;
        memset(&ain, 0, sizeof ain);
        ain.q = (smattn_tensor){q, SMATTN_F32, {0}};
        ain.k = (smattn_tensor){kk, SMATTN_F32, {0}};
        ain.v = (smattn_tensor){v, SMATTN_F32, {0}};
        ck_assert_int_eq(smattn_contiguous_strides(&ap, 'q', ain.q.stride), SMATTN_OK);
        ck_assert_int_eq(smattn_contiguous_strides(&ap, 'k', ain.k.stride), SMATTN_OK);
        ck_assert_int_eq(smattn_contiguous_strides(&ap, 'v', ain.v.stride), SMATTN_OK);
        /* the full attention, binary64 */
        outbuf full;
        outbuf_make(&full, &ap, SMATTN_F64);
        full.out.p.data = NULL;
        ck_assert_int_eq(smattn_ref(&ap, &ain, &full.out, NULL, NULL), SMATTN_OK);
        /* the split: key j goes to part owner[j] */
        int64_t owner[12];
        for (int64_t j = 0; j < T; j++)
            owner[j] = rng_pick(&r, N);
        int base2 = rng_chance(&r, 0.5);
        mcase m;
        mcase_make(&m, N, B, S, Hq, Dv, SMATTN_F64, SMATTN_F64);
        m.p.lse_base = base2 ? SMATTN_LSE_BASE_2 : SMATTN_LSE_BASE_E;
        unsigned char mask[2 * 3 * 12];
        ap.empty_lse = SMATTN_LSE_NEG_INF;
        for (int64_t n = 0; n < N; n++) {
            for (int64_t h = 0; h < Hq; h++)
                for (int64_t i = 0; i < S; i++)
                    for (int64_t j = 0; j < T; j++)
                        mask[(h * S + i) * T + j] = owner[j] == n;
            ain.mask = (smattn_tensor){mask, SMATTN_BOOL, {0}};
            ck_assert_int_eq(smattn_contiguous_strides(&ap, 'b', ain.mask.stride), SMATTN_OK);
            outbuf part;
            outbuf_make(&part, &ap, SMATTN_F64);
            part.out.p.data = NULL;
            ck_assert_int_eq(smattn_ref(&ap, &ain, &part.out, NULL, NULL), SMATTN_OK);
            for (int64_t e = 0; e < m.no; e++)
                smattn_store(m.o_parts, SMATTN_F64, n * m.no + e, outbuf_get(&part, 'o', e));
            for (int64_t e = 0; e < m.nl; e++) {
                double l = outbuf_get(&part, 'l', e);
                /* base 2: LSE / ln 2 rounded, a further binary64 rounding the bound counts */
                smattn_store(m.lse_parts, SMATTN_F64, n * m.nl + e, base2 ? l / LN2 : l);
            }
            outbuf_free(&part);
        }
        ain.mask.data = NULL;
        for (int kernel = 0; kernel < 2; kernel++) {
            smattn_dtype t = kernel ? SMATTN_F32 : SMATTN_F64;
            mcase mk = m;
            if (kernel) { /* the kernel reads binary32 partials */
                mcase_make(&mk, N, B, S, Hq, Dv, SMATTN_F32, SMATTN_F32);
                mk.p = m.p;
                for (int64_t e = 0; e < N * m.no; e++)
                    smattn_store(mk.o_parts, SMATTN_F32, e, smattn_load(m.o_parts, SMATTN_F64, e));
                for (int64_t e = 0; e < N * m.nl; e++)
                    smattn_store(mk.lse_parts, SMATTN_F32, e, smattn_load(m.lse_parts, SMATTN_F64, e));
            }
            mout mo, bd;
            mout_make(&mo, &mk, t);
            mout_make(&bd, &mk, SMATTN_F64);
            if (kernel) {
                smattn_precision pm = smattn_merge_opt_precision();
                ck_assert_int_eq(smattn_merge(&mk.p, &mk.in, &mo.out, NULL), SMATTN_OK);
                ck_assert_int_eq(smattn_merge_bound(&mk.p, &mk.in, &pm, &mo.out, &bd.out), SMATTN_OK);
            } else {
                ck_assert_int_eq(smattn_ref_merge(&mk.p, &mk.in, &mo.out, NULL), SMATTN_OK);
            }
            const double u = kernel ? 0x1p-24 : 0x1p-53, lnb = base2 ? LN2 : 1;
            for (int64_t h = 0; h < Hq; h++)
                for (int64_t i = 0; i < S; i++) {
                    /* the exact weights of the parts, from the full LSE */
                    double lse = outbuf_get(&full, 'l', h * S + i), sl = 0, w[8];
                    for (int64_t n = 0; n < N; n++) {
                        double t_n = smattn_load(mk.lse_parts, mk.tin_l, l_idx(&mk, n, 0, h, i));
                        w[n] = isfinite(t_n) ? exp(t_n * lnb - lse) : 0;
                        sl += isfinite(t_n) ? fabs(t_n * lnb) : 0;
                    }
                    double gl = get_l(&mo, &mk, 0, h, i);
                    if (isinf(lse)) { /* an empty row: every part empty */
                        ck_assert_msg(gl == lse, "seed %llu: empty row LSE %a", (unsigned long long)seed, gl);
                    } else {
                        double tol = 4 * u * (sl + fabs(lse) + 4) + 4 * 0x1p-53 * fabs(lse);
                        if (kernel)
                            tol += smattn_load(bd.l, SMATTN_F64, l_idx(&mk, 0, 0, h, i));
                        ck_assert_msg(fabs(gl * lnb - lse) <= tol * (base2 ? 2 : 1),
                                      "seed %llu kernel %d: LSE %a vs full %a (tol %g)",
                                      (unsigned long long)seed, kernel, gl * lnb, lse, tol);
                    }
                    for (int64_t c = 0; c < Dv; c++) {
                        double of = outbuf_get(&full, 'o', (i * Hq + h) * Dv + c);
                        double go = get_o(&mo, &mk, 0, i, h, c), spo = 0, sd = 0;
                        for (int64_t n = 0; n < N; n++) {
                            if (w[n] == 0)
                                continue;
                            double on = smattn_load(mk.o_parts, mk.tin_o, o_idx(&mk, n, 0, i, h, c));
                            double t_n = smattn_load(mk.lse_parts, mk.tin_l, l_idx(&mk, n, 0, h, i));
                            spo += w[n] * fabs(on);
                            sd += w[n] * fabs(on - of) * (fabs(t_n * lnb) + 2);
                        }
                        double tol = 4 * u * (spo + sd + fabs(of)) + 0x1p-1070;
                        if (kernel)
                            tol += smattn_load(bd.o, SMATTN_F64, o_idx(&mk, 0, 0, i, h, c));
                        ck_assert_msg(fabs(go - of) <= tol,
                                      "seed %llu kernel %d: O %a vs full %a (tol %g)",
                                      (unsigned long long)seed, kernel, go, of, tol);
                    }
                }
            mout_free(&mo);
            mout_free(&bd);
            if (kernel)
                mcase_free(&mk);
        }
        mcase_free(&m);
        outbuf_free(&full);
    }
}
END_TEST

Suite *merge_suite(void);
Suite *merge_suite(void)
{
    Suite *s = suite_create("merge");
    TCase *tc = tcase_create("merge");
    tcase_add_test(tc, test_oracle_exact);
    tcase_add_test(tc, test_conventions);
    tcase_add_test(tc, test_validate);
    tcase_add_test(tc, test_oracle_random);
    tcase_add_test(tc, test_kernel);
    tcase_add_test(tc, test_split_property);
    tcase_set_timeout(tc, 120);
    suite_add_tcase(s, tc);
    return s;
}
