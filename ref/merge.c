/* SPDX-License-Identifier: MIT */
/* merge.c: the exact merge of partial attention states (SPEC 9.3): per row, a Ziv loop on
 * interval enclosures of the merged LSE and O, and an exact sign test at a rounding
 * boundary, so that exact values (equal LSEs, a merged O of 0, midpoints) round correctly. */
#include <math.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include <mpfr.h>

#include "core/merge_internal.h"
#include "ref/ref_internal.h"

#define MREF_DEFAULT_MAX_PREC 16384L
/* Exact differences of two binary64 numbers (or of one and a 64-bit midpoint): their
 * exponents lie in [-1076, 1025], so 2240 bits hold every difference, and 64 more every
 * sum of up to 2^32 of them (SPEC 9.3). */
#define MREF_XPREC 2240
#define MREF_CPREC (MREF_XPREC + 64)
/* The largest exact cluster sum of the base-2 sign test, in bits (beyond: PRECISION). */
#define MREF_CLUSTER_MAX (1L << 24)

typedef struct mref_ws {
    const smattn_merge_problem *p;
    const smattn_merge_inputs *in;
    const smattn_outputs *out;
    long max_prec;
    int64_t k;            /* finite partials of the row */
    int64_t *idx;         /* their indices [N] */
    double *t;            /* their LSEs [N] */
    double *o;            /* one column of their O [N] */
    mpfr_t *d;            /* t_n - M exactly [N] */
    mpfr_t *wlo, *whi;    /* b^(t_n - M) rounded down and up [N] */
    /* sign test */
    mpfr_t *sc, *se;      /* coefficients and exponents of the terms [N + 1] */
    int64_t *ord;         /* [N + 1] */
    mpfr_t *rv, *ra;      /* per class: value and anchor [N + 1] */
    long *rrel;           /* per class: relative error 2^-rrel of the value, 0: exact [N + 1] */
    long wprec;           /* precision of wlo, whi (0: not computed for this row) */
    mpfr_t lo, hi, x, y, z, B, tmp;
    mpfr_t slo, shi, sx, sy, sz, stmp; /* the sign test's own */
} mref_ws;

/* ---- rounding decisions --------------------------------------------------------------- */

/* The order of bits of dtype t along the reals: -0 just below +0. */
static int64_t bits_key(uint64_t bits, smattn_dtype t)
{
    int w = smattn__formats[t].bits;
    uint64_t sign = (uint64_t)1 << (w - 1);
    int64_t mag = (int64_t)(bits & (sign - 1));
    return bits & sign ? -mag - 1 : mag;
}

/* When the roundings a < b of the two ends of an enclosure are adjacent, the one boundary
 * between them, into B (64 bits); returns 0 when they are not adjacent. */
static int boundary(uint64_t a, uint64_t b, smattn_dtype t, mpfr_ptr B)
{
    if (bits_key(b, t) != bits_key(a, t) + 1)
        return 0;
    const smattn_format *f = &smattn__formats[t];
    double va = smattn__bits_to_double(a, t), vb = smattn__bits_to_double(b, t);
    mpfr_set_prec(B, 64);
    if (isinf(va) || isinf(vb)) { /* the overflow threshold: the largest finite + ulp/2 */
        double m = isinf(va) ? vb : va;
        mpfr_set_ui_2exp(B, 1, f->emax - f->prec, MPFR_RNDN);
        mpfr_add_d(B, B, fabs(m), MPFR_RNDN); /* exact in 64 bits (prec <= 53) */
        if (m < 0)
            mpfr_neg(B, B, MPFR_RNDN);
        return 1;
    }
    mpfr_set_d(B, va, MPFR_RNDN);
    mpfr_add_d(B, B, vb, MPFR_RNDN); /* exact: two adjacent values of t, prec <= 53 */
    mpfr_div_2ui(B, B, 1, MPFR_RNDN);
    return 1;
}

/* ---- the exact sign test (SPEC 9.3) ---------------------------------------------------- */

static int cmp_exp_desc(mref_ws *w, int64_t a, int64_t b)
{
    return mpfr_cmp(w->se[b], w->se[a]);
}

/* Sort ord[0..n) by exponent, largest first (insertion sort: n <= N + 1, small). */
static void sort_terms(mref_ws *w, int64_t n)
{
    for (int64_t a = 1; a < n; a++)
        for (int64_t c = a; c > 0 && cmp_exp_desc(w, w->ord[c - 1], w->ord[c]) > 0; c--) {
            int64_t tt = w->ord[c];
            w->ord[c] = w->ord[c - 1];
            w->ord[c - 1] = tt;
        }
}

/* 2^(x - y) is rational iff x - y is an integer. */
static int same_class2(mref_ws *w, mpfr_srcptr x, mpfr_srcptr y)
{
    mpfr_set_prec(w->stmp, MREF_XPREC);
    mpfr_sub(w->stmp, x, y, MPFR_RNDN); /* exact */
    return mpfr_integer_p(w->stmp);
}

/* The sign of sum_k sc[k] b^se[k], k < n, exactly: -1, 0 or 1 in *sign. The coefficients
 * are exact (MREF_XPREC bits), the exponents exact.
 * Terms with equal exponents are merged first. The classes are the sets of terms whose
 * exponents differ by integers in base 2, single exponents in base e: the numbers b^a of
 * distinct classes are linearly independent over the rationals (base e: Lindemann-
 * Weierstrass; base 2: 2^(1/2^m) has degree 2^m, so 2^f for distinct dyadic f in [0, 1)
 * are a basis), so the sum is 0 iff every class's rational value is 0, and otherwise a
 * Ziv loop on the classes' values terminates. A base-2 class's value is summed exactly in
 * clusters of exponents less than G apart; a nonzero cluster sum dominates the clusters
 * below it to a relative 2^-(max_prec + 64). */
static smattn_status sign_test(mref_ws *w, int64_t n, int *sign)
{
    const int base2 = w->p->lse_base == SMATTN_LSE_BASE_2;
    for (int64_t k = 0; k < n; k++)
        w->ord[k] = k;
    sort_terms(w, n);
    /* merge equal exponents into the first of each run (exact sums) */
    int64_t m = 0;
    for (int64_t a = 0; a < n;) {
        int64_t e = a + 1, first = w->ord[a];
        mpfr_set_prec(w->sx, MREF_CPREC);
        mpfr_set(w->sx, w->sc[first], MPFR_RNDN);
        while (e < n && mpfr_equal_p(w->se[w->ord[e]], w->se[first])) {
            if (mpfr_add(w->sx, w->sx, w->sc[w->ord[e]], MPFR_RNDN))
                return SMATTN_ERR_INTERNAL; /* not exact: cannot happen (MREF_CPREC) */
            e++;
        }
        if (!mpfr_zero_p(w->sx)) {
            mpfr_set_prec(w->sc[first], MREF_CPREC);
            mpfr_set(w->sc[first], w->sx, MPFR_RNDN);
            w->ord[m++] = first;
        }
        a = e;
    }
    if (m == 0)
        return *sign = 0, SMATTN_OK;
    /* classes: value rv (a nonzero dyadic), anchor ra (its exponent), relative error rrel */
    int64_t ncl = 0;
    const long G = w->max_prec + 2 * MREF_CPREC;
    for (int64_t a = 0; a < m; a++) {
        int64_t ta = w->ord[a];
        if (mpfr_nan_p(w->sc[ta])) /* taken by an earlier class */
            continue;
        if (!base2) {
            mpfr_set_prec(w->rv[ncl], MREF_CPREC);
            mpfr_set(w->rv[ncl], w->sc[ta], MPFR_RNDN);
            mpfr_set_prec(w->ra[ncl], mpfr_get_prec(w->se[ta]));
            mpfr_set(w->ra[ncl], w->se[ta], MPFR_RNDN);
            w->rrel[ncl++] = 0;
            continue;
        }
        /* this class's members in descending order: ta first, then later ones */
        int decided = 0;
        int64_t anchor = ta;
        long span = 0;
        mpfr_set_prec(w->sy, MREF_CPREC);
        mpfr_set(w->sy, w->sc[ta], MPFR_RNDN);
        mpfr_set_nan(w->sc[ta]);
        for (int64_t c = a + 1; c <= m; c++) {
            int64_t tc = c < m ? w->ord[c] : -1;
            if (tc >= 0 && (mpfr_nan_p(w->sc[tc]) || !same_class2(w, w->se[tc], w->se[ta])))
                continue;
            long gap = 0;
            if (tc >= 0) {
                mpfr_sub(w->stmp, w->se[anchor], w->se[tc], MPFR_RNDN); /* exact integer */
                gap = mpfr_cmp_si(w->stmp, span + G) > 0 ? -1 : mpfr_get_si(w->stmp, MPFR_RNDN);
            }
            if (tc >= 0 && gap >= 0) { /* same cluster: add sc * 2^-gap exactly */
                if ((long)MREF_CPREC + gap + 64 > MREF_CLUSTER_MAX)
                    return SMATTN_ERR_PRECISION;
                mpfr_prec_round(w->sy, MREF_CPREC + gap + 64, MPFR_RNDN);
                mpfr_set_prec(w->sz, MREF_CPREC);
                mpfr_set(w->sz, w->sc[tc], MPFR_RNDN);
                mpfr_div_2si(w->sz, w->sz, gap, MPFR_RNDN);
                if (mpfr_add(w->sy, w->sy, w->sz, MPFR_RNDN))
                    return SMATTN_ERR_INTERNAL;
                span = gap;
                mpfr_set_nan(w->sc[tc]);
                continue;
            }
            /* the cluster ends here (tc < 0: the class ends) */
            if (!decided && !mpfr_zero_p(w->sy)) {
                mpfr_set_prec(w->rv[ncl], mpfr_get_prec(w->sy));
                mpfr_set(w->rv[ncl], w->sy, MPFR_RNDN);
                mpfr_set_prec(w->ra[ncl], mpfr_get_prec(w->se[anchor]));
                mpfr_set(w->ra[ncl], w->se[anchor], MPFR_RNDN);
                /* clusters below: > span + G under the anchor */
                w->rrel[ncl++] = tc >= 0 ? w->max_prec + 64 : 0;
                decided = 1;
            }
            if (tc < 0)
                break;
            if (!decided) { /* a zero cluster: the next one anchors the class */
                anchor = tc;
                span = 0;
                mpfr_set_prec(w->sy, MREF_CPREC);
                mpfr_set(w->sy, w->sc[tc], MPFR_RNDN);
            }
            mpfr_set_nan(w->sc[tc]);
        }
    }
    if (ncl == 0)
        return *sign = 0, SMATTN_OK;
    if (ncl == 1)
        return *sign = mpfr_sgn(w->rv[0]), SMATTN_OK;
    /* Ziv loop on sum_k rv_k (1 +- rrel_k) b^(ra_k - top) */
    mpfr_srcptr top = w->ra[0];
    for (int64_t k = 1; k < ncl; k++)
        if (mpfr_cmp(w->ra[k], top) > 0)
            top = w->ra[k];
    for (long prec = 64;; prec *= 2) {
        if (prec > w->max_prec)
            return SMATTN_ERR_PRECISION;
        mpfr_set_prec(w->slo, prec);
        mpfr_set_prec(w->shi, prec);
        mpfr_set_zero(w->slo, 1);
        mpfr_set_zero(w->shi, 1);
        for (int64_t k = 0; k < ncl; k++) {
            mpfr_set_prec(w->stmp, MREF_XPREC);
            mpfr_sub(w->stmp, w->ra[k], top, MPFR_RNDN); /* exact */
            mpfr_set_prec(w->sx, prec);
            mpfr_set_prec(w->sy, prec);
            if (base2) {
                mpfr_exp2(w->sx, w->stmp, MPFR_RNDD);
                mpfr_exp2(w->sy, w->stmp, MPFR_RNDU);
            } else {
                mpfr_exp(w->sx, w->stmp, MPFR_RNDD);
                mpfr_exp(w->sy, w->stmp, MPFR_RNDU);
            }
            /* [x, y] * (1 -+ 2^-rrel) with directed roundings, then times rv (sign-split) */
            mpfr_set_prec(w->sz, prec);
            if (w->rrel[k]) {
                mpfr_div_2ui(w->sz, w->sx, (unsigned long)w->rrel[k], MPFR_RNDU);
                mpfr_sub(w->sx, w->sx, w->sz, MPFR_RNDD);
                mpfr_div_2ui(w->sz, w->sy, (unsigned long)w->rrel[k], MPFR_RNDU);
                mpfr_add(w->sy, w->sy, w->sz, MPFR_RNDU);
            }
            if (mpfr_sgn(w->rv[k]) > 0) {
                mpfr_mul(w->sz, w->sx, w->rv[k], MPFR_RNDD);
                mpfr_add(w->slo, w->slo, w->sz, MPFR_RNDD);
                mpfr_mul(w->sz, w->sy, w->rv[k], MPFR_RNDU);
                mpfr_add(w->shi, w->shi, w->sz, MPFR_RNDU);
            } else {
                mpfr_mul(w->sz, w->sy, w->rv[k], MPFR_RNDD);
                mpfr_add(w->slo, w->slo, w->sz, MPFR_RNDD);
                mpfr_mul(w->sz, w->sx, w->rv[k], MPFR_RNDU);
                mpfr_add(w->shi, w->shi, w->sz, MPFR_RNDU);
            }
        }
        if (mpfr_sgn(w->slo) > 0)
            return *sign = 1, SMATTN_OK;
        if (mpfr_sgn(w->shi) < 0)
            return *sign = -1, SMATTN_OK;
    }
}

/* ---- one row ----------------------------------------------------------------------------- */

static void put_lse(const mref_ws *w, int64_t b, int64_t h, int64_t i, uint64_t bits)
{
    const smattn_out_tensor *t = &w->out->lse;
    if (t->data)
        smattn__store_bits(t->data, t->dtype, smattn__merge_out_lse_off(w->out, b, h, i), bits);
}

static void put_o(const mref_ws *w, int64_t b, int64_t h, int64_t i, int64_t c, uint64_t bits)
{
    const smattn_out_tensor *t = &w->out->o;
    if (t->data)
        smattn__store_bits(t->data, t->dtype, smattn__off4(t->stride, b, i, h, c), bits);
}

/* Weights b^(t_n - M) at precision prec, rounded down and up. */
static void weights(mref_ws *w, long prec)
{
    if (w->wprec == prec)
        return;
    w->wprec = prec;
    const int base2 = w->p->lse_base == SMATTN_LSE_BASE_2;
    for (int64_t n = 0; n < w->k; n++) {
        mpfr_set_prec(w->wlo[n], prec);
        mpfr_set_prec(w->whi[n], prec);
        if (base2) {
            mpfr_exp2(w->wlo[n], w->d[n], MPFR_RNDD);
            mpfr_exp2(w->whi[n], w->d[n], MPFR_RNDU);
        } else {
            mpfr_exp(w->wlo[n], w->d[n], MPFR_RNDD);
            mpfr_exp(w->whi[n], w->d[n], MPFR_RNDU);
        }
    }
}

/* Decide an element from its enclosure [lo, hi] (w->lo, w->hi): 1 with *bits when decided,
 * 0 to raise the precision. sign0(w, B) gives the exact sign of (value - B). */
typedef smattn_status (*sign_fn)(mref_ws *w, int64_t c, mpfr_srcptr B, int *sign);

static smattn_status decide(mref_ws *w, smattn_dtype t, sign_fn sgn, int64_t c, int *done,
                            uint64_t *bits)
{
    smattn_status st;
    int s;
    *done = 0;
    if (mpfr_sgn(w->lo) <= 0 && mpfr_sgn(w->hi) >= 0) { /* zero inside: is it the value? */
        mpfr_set_prec(w->B, 64);
        mpfr_set_zero(w->B, 1);
        if ((st = sgn(w, c, w->B, &s)))
            return st;
        if (s == 0)
            return *bits = 0, *done = 1, SMATTN_OK; /* exact zero: +0 (SPEC 4.3) */
        if (s > 0)
            mpfr_set_zero(w->lo, 1);
        else
            mpfr_set_zero(w->hi, -1);
    }
    uint64_t a = smattn__ref_round_mpfr(w->lo, t, w->tmp);
    uint64_t b = smattn__ref_round_mpfr(w->hi, t, w->tmp);
    if (a == b)
        return *bits = a, *done = 1, SMATTN_OK;
    if (!boundary(a, b, t, w->B))
        return SMATTN_OK;
    if ((st = sgn(w, c, w->B, &s)))
        return st;
    if (s == 0) /* the value is the boundary: nearest-even (ties) */
        *bits = smattn__ref_round_mpfr(w->B, t, w->tmp);
    else
        *bits = s > 0 ? b : a;
    *done = 1;
    return SMATTN_OK;
}

/* sign(LSE - B) = sign(sum_n b^t_n - b^B) */
static smattn_status lse_sign(mref_ws *w, int64_t c, mpfr_srcptr B, int *sign)
{
    (void)c;
    for (int64_t n = 0; n < w->k; n++) {
        mpfr_set_prec(w->sc[n], MREF_CPREC);
        mpfr_set_ui(w->sc[n], 1, MPFR_RNDN);
        mpfr_set_prec(w->se[n], 64);
        mpfr_set_d(w->se[n], w->t[n], MPFR_RNDN);
    }
    mpfr_set_prec(w->sc[w->k], MREF_CPREC);
    mpfr_set_si(w->sc[w->k], -1, MPFR_RNDN);
    mpfr_set_prec(w->se[w->k], mpfr_get_prec(B));
    mpfr_set(w->se[w->k], B, MPFR_RNDN);
    return sign_test(w, w->k + 1, sign);
}

/* sign(O_c - B) = sign(sum_n b^t_n (O_nc - B)); w->o holds the column */
static smattn_status o_sign(mref_ws *w, int64_t c, mpfr_srcptr B, int *sign)
{
    (void)c;
    for (int64_t n = 0; n < w->k; n++) {
        mpfr_set_prec(w->sc[n], MREF_CPREC);
        mpfr_set_d(w->sc[n], w->o[n], MPFR_RNDN);
        if (mpfr_sub(w->sc[n], w->sc[n], B, MPFR_RNDN))
            return SMATTN_ERR_INTERNAL; /* exact by MREF_CPREC */
        mpfr_set_prec(w->se[n], 64);
        mpfr_set_d(w->se[n], w->t[n], MPFR_RNDN);
    }
    return sign_test(w, w->k, sign);
}

static long start_prec(smattn_dtype t)
{
    return t == SMATTN_F64 ? 128 : 64;
}

static smattn_status merged_lse(mref_ws *w, int64_t b, int64_t h, int64_t i)
{
    const smattn_out_tensor *t = &w->out->lse;
    if (!t->data)
        return SMATTN_OK;
    if (w->k == 1) { /* the one partial's LSE, exactly */
        put_lse(w, b, h, i, smattn__round_bits(w->t[0], t->dtype));
        return SMATTN_OK;
    }
    const int base2 = w->p->lse_base == SMATTN_LSE_BASE_2;
    double M = w->t[0];
    for (int64_t n = 1; n < w->k; n++)
        M = w->t[n] > M ? w->t[n] : M;
    for (long prec = start_prec(t->dtype);; prec *= 2) {
        if (prec > w->max_prec)
            return SMATTN_ERR_PRECISION;
        weights(w, prec);
        mpfr_set_prec(w->lo, prec);
        mpfr_set_prec(w->hi, prec);
        mpfr_set_zero(w->lo, 1);
        mpfr_set_zero(w->hi, 1);
        for (int64_t n = 0; n < w->k; n++) {
            mpfr_add(w->lo, w->lo, w->wlo[n], MPFR_RNDD);
            mpfr_add(w->hi, w->hi, w->whi[n], MPFR_RNDU);
        }
        if (base2) {
            mpfr_log2(w->lo, w->lo, MPFR_RNDD);
            mpfr_log2(w->hi, w->hi, MPFR_RNDU);
        } else {
            mpfr_log(w->lo, w->lo, MPFR_RNDD);
            mpfr_log(w->hi, w->hi, MPFR_RNDU);
        }
        mpfr_add_d(w->lo, w->lo, M, MPFR_RNDD);
        mpfr_add_d(w->hi, w->hi, M, MPFR_RNDU);
        int done;
        uint64_t bits;
        smattn_status st = decide(w, t->dtype, lse_sign, 0, &done, &bits);
        if (st)
            return st;
        if (done) {
            put_lse(w, b, h, i, bits);
            return SMATTN_OK;
        }
    }
}

static smattn_status merged_o(mref_ws *w, int64_t b, int64_t h, int64_t i, int64_t c)
{
    const smattn_out_tensor *t = &w->out->o;
    const smattn_tensor *ot = &w->in->o_parts;
    int nan = 0, pinf = 0, ninf = 0;
    for (int64_t n = 0; n < w->k; n++) {
        double v = smattn_load(ot->data, ot->dtype, smattn__merge_o_off(w->in, w->idx[n], b, i, h, c));
        w->o[n] = v;
        nan |= v != v;
        pinf |= v == HUGE_VAL;
        ninf |= v == -HUGE_VAL;
    }
    if (nan || (pinf && ninf)) /* SPEC 9.2: per column, as V in SPEC 4.2 */
        return put_o(w, b, h, i, c, smattn__ref_nan_bits(t->dtype)), SMATTN_OK;
    if (pinf || ninf)
        return put_o(w, b, h, i, c, smattn__ref_inf_bits(t->dtype, ninf)), SMATTN_OK;
    int same = 1;
    for (int64_t n = 1; n < w->k; n++)
        same &= w->o[n] == w->o[0];
    if (same) /* a convex combination of one value (also k = 1): that value, exactly */
        return put_o(w, b, h, i, c, w->o[0] == 0 ? 0 : smattn__round_bits(w->o[0], t->dtype)),
               SMATTN_OK;
    for (long prec = start_prec(t->dtype);; prec *= 2) {
        if (prec > w->max_prec)
            return SMATTN_ERR_PRECISION;
        weights(w, prec); /* once per row and precision, shared by LSE and the columns */
        mpfr_set_prec(w->x, prec); /* L down */
        mpfr_set_prec(w->y, prec); /* L up */
        mpfr_set_prec(w->lo, prec);
        mpfr_set_prec(w->hi, prec);
        mpfr_set_prec(w->z, prec);
        mpfr_set_zero(w->x, 1);
        mpfr_set_zero(w->y, 1);
        mpfr_set_zero(w->lo, 1);
        mpfr_set_zero(w->hi, 1);
        for (int64_t n = 0; n < w->k; n++) {
            mpfr_add(w->x, w->x, w->wlo[n], MPFR_RNDD);
            mpfr_add(w->y, w->y, w->whi[n], MPFR_RNDU);
            double v = w->o[n];
            mpfr_mul_d(w->z, v >= 0 ? w->wlo[n] : w->whi[n], v, MPFR_RNDD);
            mpfr_add(w->lo, w->lo, w->z, MPFR_RNDD);
            mpfr_mul_d(w->z, v >= 0 ? w->whi[n] : w->wlo[n], v, MPFR_RNDU);
            mpfr_add(w->hi, w->hi, w->z, MPFR_RNDU);
        }
        /* O = N / L with N in [lo, hi], L in [x, y], L > 0 */
        if (mpfr_sgn(w->lo) >= 0) {
            mpfr_div(w->lo, w->lo, w->y, MPFR_RNDD);
            mpfr_div(w->hi, w->hi, w->x, MPFR_RNDU);
        } else if (mpfr_sgn(w->hi) <= 0) {
            mpfr_div(w->lo, w->lo, w->x, MPFR_RNDD);
            mpfr_div(w->hi, w->hi, w->y, MPFR_RNDU);
        } else {
            mpfr_div(w->lo, w->lo, w->x, MPFR_RNDD);
            mpfr_div(w->hi, w->hi, w->x, MPFR_RNDU);
        }
        int done;
        uint64_t bits;
        smattn_status st = decide(w, t->dtype, o_sign, c, &done, &bits);
        if (st)
            return st;
        if (done) {
            put_o(w, b, h, i, c, bits);
            return SMATTN_OK;
        }
    }
}

static smattn_status merge_row(mref_ws *w, int64_t b, int64_t h, int64_t i)
{
    const smattn_merge_problem *p = w->p;
    const smattn_outputs *out = w->out;
    const smattn_tensor *lt = &w->in->lse_parts;
    int poison = 0;
    w->k = 0;
    for (int64_t n = 0; n < p->N; n++) {
        double t = smattn_load(lt->data, lt->dtype, smattn__merge_lse_off(w->in, n, b, h, i));
        int cl = smattn__merge_lse_class(p, t);
        poison |= cl == MERGE_POISON;
        if (cl == MERGE_FINITE) {
            w->idx[w->k] = n;
            w->t[w->k++] = t;
        }
    }
    if (poison) { /* SPEC 9.2: the whole row NaN */
        if (out->lse.data)
            put_lse(w, b, h, i, smattn__ref_nan_bits(out->lse.dtype));
        for (int64_t c = 0; out->o.data && c < p->Dv; c++)
            put_o(w, b, h, i, c, smattn__ref_nan_bits(out->o.dtype));
        return SMATTN_OK;
    }
    if (w->k == 0) { /* every partial empty: the empty row of SPEC 3.4 */
        if (out->lse.data)
            put_lse(w, b, h, i,
                    p->empty_lse == SMATTN_LSE_ZERO ? 0
                    : smattn__ref_inf_bits(out->lse.dtype, p->empty_lse == SMATTN_LSE_NEG_INF));
        for (int64_t c = 0; out->o.data && c < p->Dv; c++)
            put_o(w, b, h, i, c,
                  p->empty_rows == SMATTN_EMPTY_NAN ? smattn__ref_nan_bits(out->o.dtype) : 0);
        return SMATTN_OK;
    }
    double M = w->t[0];
    for (int64_t n = 1; n < w->k; n++)
        M = w->t[n] > M ? w->t[n] : M;
    w->wprec = 0;
    for (int64_t n = 0; n < w->k; n++) {
        mpfr_set_prec(w->d[n], MREF_XPREC);
        mpfr_set_d(w->d[n], w->t[n], MPFR_RNDN);
        if (mpfr_sub_d(w->d[n], w->d[n], M, MPFR_RNDN))
            return SMATTN_ERR_INTERNAL; /* exact by MREF_XPREC */
    }
    smattn_status st = merged_lse(w, b, h, i);
    for (int64_t c = 0; !st && out->o.data && c < p->Dv; c++)
        st = merged_o(w, b, h, i, c);
    return st;
}

/* ---- threads ----------------------------------------------------------------------------- */

typedef struct mref_job {
    const smattn_merge_problem *p;
    const smattn_merge_inputs *in;
    const smattn_outputs *out;
    long max_prec;
    int64_t rows;
    atomic_llong next;
    ref_fail fail; /* the lowest failing row */
} mref_job;

static void record(mref_job *job, int64_t row, smattn_status st)
{
    smattn__ref_fail_record(&job->fail, row, st);
}

static void mpfr_array_free(mpfr_t *a, int64_t n)
{
    for (int64_t k = 0; a && k < n; k++)
        mpfr_clear(a[k]);
    free(a);
}

static mpfr_t *mpfr_array(int64_t n)
{
    mpfr_t *a = malloc((size_t)n * sizeof *a);
    for (int64_t k = 0; a && k < n; k++)
        mpfr_init2(a[k], 64);
    return a;
}

static void ws_free(mref_ws *w, int64_t N)
{
    free(w->idx), free(w->t), free(w->o), free(w->ord), free(w->rrel);
    mpfr_array_free(w->d, N), mpfr_array_free(w->wlo, N), mpfr_array_free(w->whi, N);
    mpfr_array_free(w->sc, N + 1), mpfr_array_free(w->se, N + 1);
    mpfr_array_free(w->rv, N + 1), mpfr_array_free(w->ra, N + 1);
    mpfr_clears(w->lo, w->hi, w->x, w->y, w->z, w->B, w->tmp, w->slo, w->shi, w->sx, w->sy,
                w->sz, w->stmp, (mpfr_ptr)0);
}

static int ws_alloc(mref_ws *w, const mref_job *job)
{
    int64_t N = job->p->N;
    memset(w, 0, sizeof *w);
    mpfr_inits2(64, w->lo, w->hi, w->x, w->y, w->z, w->B, w->tmp, w->slo, w->shi, w->sx, w->sy,
                w->sz, w->stmp, (mpfr_ptr)0);
    w->p = job->p, w->in = job->in, w->out = job->out, w->max_prec = job->max_prec;
    w->idx = malloc((size_t)N * sizeof *w->idx);
    w->t = malloc((size_t)N * sizeof *w->t);
    w->o = malloc((size_t)(N + 1) * sizeof *w->o);
    w->ord = malloc((size_t)(N + 1) * sizeof *w->ord);
    w->rrel = malloc((size_t)(N + 1) * sizeof *w->rrel);
    w->d = mpfr_array(N), w->wlo = mpfr_array(N), w->whi = mpfr_array(N);
    w->sc = mpfr_array(N + 1), w->se = mpfr_array(N + 1);
    w->rv = mpfr_array(N + 1), w->ra = mpfr_array(N + 1);
    return !w->idx || !w->t || !w->o || !w->ord || !w->rrel || !w->d || !w->wlo || !w->whi ||
           !w->sc || !w->se || !w->rv || !w->ra;
}

static void *worker(void *arg)
{
    mref_job *job = arg;
    mpfr_exp_t range[2];
    smattn__ref_mpfr_widen(range);
    mref_ws w;
    if (ws_alloc(&w, job)) {
        record(job, 0, SMATTN_ERR_NOMEM);
    } else {
        const smattn_merge_problem *p = job->p;
        for (;;) {
            int64_t row = (int64_t)atomic_fetch_add(&job->next, 1);
            if (row >= job->rows)
                break;
            smattn_status st = merge_row(&w, row / (p->Hq * p->S), (row / p->S) % p->Hq,
                                         row % p->S);
            if (st)
                record(job, row, st);
        }
    }
    ws_free(&w, job->p->N);
    smattn__ref_mpfr_restore(range);
    return NULL;
}

smattn_status smattn_ref_merge(const smattn_merge_problem *p, const smattn_merge_inputs *in,
                               const smattn_outputs *out, const smattn_ref_config *cfg)
{
    smattn_status st = smattn_merge_validate(p, in, out);
    if (st)
        return st;
    if (cfg && (cfg->threads < 0 || (cfg->max_prec != 0 && (cfg->max_prec < SMATTN_REF_PREC_MIN ||
                                                             cfg->max_prec > SMATTN_REF_PREC_MAX))))
        return SMATTN_ERR_OPTION;
    mref_job job;
    memset(&job, 0, sizeof job);
    job.p = p, job.in = in, job.out = out;
    job.max_prec = cfg && cfg->max_prec ? cfg->max_prec : MREF_DEFAULT_MAX_PREC;
    job.rows = p->B * p->Hq * p->S; /* fits: validation bounded every offset */
    atomic_init(&job.next, 0);
    if (smattn__ref_fail_init(&job.fail))
        return SMATTN_ERR_THREADS;
    smattn__ref_threads(cfg ? cfg->threads : 0, job.rows, worker, &job);
    return smattn__ref_fail_done(&job.fail);
}
