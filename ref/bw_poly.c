/* SPDX-License-Identifier: MIT */
/* bw_poly.c: exact sparse exponential polynomials and the exact rounding of their ratios,
 * the backward oracle's exact path (SPEC 10.3). */
#include <limits.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "ref/backward_internal.h"
#include "ref/ref_internal.h"

/* ---- exact arithmetic -------------------------------------------------------------------- */

static long lsb_bound(mpfr_srcptr x)
{
    return (long)mpfr_get_exp(x) - (long)mpfr_get_prec(x);
}

int smattn__bw_exact_add(mpfr_ptr rop, mpfr_srcptr a, mpfr_srcptr b)
{
    if (mpfr_zero_p(a) && mpfr_zero_p(b)) {
        mpfr_set_prec(rop, MPFR_PREC_MIN);
        mpfr_set_zero(rop, 1);
        return 0;
    }
    if (mpfr_zero_p(a))
        return mpfr_set_prec(rop, mpfr_get_prec(b)), mpfr_set(rop, b, MPFR_RNDN);
    if (mpfr_zero_p(b))
        return mpfr_set_prec(rop, mpfr_get_prec(a)), mpfr_set(rop, a, MPFR_RNDN);
    long hi = (long)(mpfr_get_exp(a) > mpfr_get_exp(b) ? mpfr_get_exp(a) : mpfr_get_exp(b));
    long lo = lsb_bound(a) < lsb_bound(b) ? lsb_bound(a) : lsb_bound(b);
    mpfr_prec_t prec = (mpfr_prec_t)(hi - lo + 2);
    if (prec < MPFR_PREC_MIN)
        prec = MPFR_PREC_MIN;
    mpfr_set_prec(rop, prec);
    int t = mpfr_add(rop, a, b, MPFR_RNDN);
    if (mpfr_zero_p(rop))
        mpfr_set_zero(rop, 1); /* an exact zero is +0 */
    return t;
}

int smattn__bw_exact_mul(mpfr_ptr rop, mpfr_srcptr a, mpfr_srcptr b)
{
    mpfr_set_prec(rop, mpfr_get_prec(a) + mpfr_get_prec(b));
    int t = mpfr_mul(rop, a, b, MPFR_RNDN);
    if (mpfr_zero_p(rop))
        mpfr_set_zero(rop, 1);
    return t;
}

int smattn__bw_exact_sum(mpfr_ptr rop, mpfr_ptr *x, long n)
{
    long hi = LONG_MIN, lo = LONG_MAX, nz = 0;
    for (long k = 0; k < n; k++) {
        if (mpfr_zero_p(x[k]))
            continue;
        nz++;
        if ((long)mpfr_get_exp(x[k]) > hi)
            hi = (long)mpfr_get_exp(x[k]);
        if (lsb_bound(x[k]) < lo)
            lo = lsb_bound(x[k]);
    }
    if (nz == 0) {
        mpfr_set_prec(rop, MPFR_PREC_MIN);
        mpfr_set_zero(rop, 1);
        return 0;
    }
    long lg = 1;
    while ((1L << lg) < n + 1)
        lg++;
    mpfr_set_prec(rop, (mpfr_prec_t)(hi - lo + lg + 2));
    int t = mpfr_sum(rop, x, (unsigned long)n, MPFR_RNDN);
    if (mpfr_zero_p(rop))
        mpfr_set_zero(rop, 1);
    return t;
}

/* ---- polynomials ------------------------------------------------------------------------- */

void smattn__bwp_init(bw_poly *p)
{
    p->t = NULL;
    p->n = p->cap = 0;
}

void smattn__bwp_clear(bw_poly *p)
{
    for (int64_t k = 0; k < p->cap; k++)
        mpfr_clears(p->t[k].tau, p->t[k].c, (mpfr_ptr)0);
    free(p->t);
    smattn__bwp_init(p);
}

void smattn__bwp_reset(bw_poly *p)
{
    p->n = 0;
}

static int reserve(bw_poly *p, int64_t need)
{
    if (need <= p->cap)
        return 0;
    int64_t cap = p->cap ? p->cap : 8;
    while (cap < need)
        cap *= 2;
    /* moving an mpfr_t moves the handle of its limbs, which stay where they are */
    bw_term *t = realloc(p->t, (size_t)cap * sizeof *t);
    if (!t)
        return -1;
    for (int64_t k = p->cap; k < cap; k++)
        mpfr_inits2(MPFR_PREC_MIN, t[k].tau, t[k].c, (mpfr_ptr)0);
    p->t = t;
    p->cap = cap;
    return 0;
}

int smattn__bwp_push(bw_poly *p, mpfr_srcptr tau, mpfr_srcptr c)
{
    if (reserve(p, p->n + 1))
        return -1;
    bw_term *t = &p->t[p->n++];
    mpfr_set_prec(t->tau, mpfr_get_prec(tau));
    mpfr_set(t->tau, tau, MPFR_RNDN);
    mpfr_set_prec(t->c, mpfr_get_prec(c));
    mpfr_set(t->c, c, MPFR_RNDN);
    return 0;
}

static int term_cmp(const void *x, const void *y)
{
    const bw_term *a = x, *b = y;
    return mpfr_cmp(b->tau, a->tau); /* decreasing tau */
}

int smattn__bwp_normalize(bw_poly *p)
{
    if (p->n > 1)
        qsort(p->t, (size_t)p->n, sizeof *p->t, term_cmp);
    mpfr_t s;
    mpfr_init2(s, MPFR_PREC_MIN);
    int64_t m = 0;
    for (int64_t k = 0; k < p->n; k++) {
        if (m > 0 && mpfr_equal_p(p->t[m - 1].tau, p->t[k].tau)) {
            smattn__bw_exact_add(s, p->t[m - 1].c, p->t[k].c);
            mpfr_swap(s, p->t[m - 1].c);
            continue;
        }
        if (m > 0 && mpfr_zero_p(p->t[m - 1].c))
            m--;      /* the previous exponent's coefficients cancelled */
        if (m != k) { /* swap the handles: term k's storage moves to m and back */
            mpfr_swap(p->t[m].tau, p->t[k].tau);
            mpfr_swap(p->t[m].c, p->t[k].c);
        }
        m++;
    }
    if (m > 0 && mpfr_zero_p(p->t[m - 1].c))
        m--;
    p->n = m;
    mpfr_clear(s);
    return 0;
}

int smattn__bwp_add_scaled(bw_poly *r, const bw_poly *a, mpfr_srcptr s)
{
    if (mpfr_zero_p(s))
        return 0;
    if (reserve(r, r->n + a->n))
        return -1;
    for (int64_t k = 0; k < a->n; k++) {
        bw_term *t = &r->t[r->n++];
        mpfr_set_prec(t->tau, mpfr_get_prec(a->t[k].tau));
        mpfr_set(t->tau, a->t[k].tau, MPFR_RNDN);
        smattn__bw_exact_mul(t->c, a->t[k].c, s);
    }
    return 0;
}

int smattn__bwp_mul(bw_poly *r, const bw_poly *a, const bw_poly *b, int64_t cap)
{
    r->n = 0;
    if (a->n && b->n > cap / a->n)
        return -2;
    if (reserve(r, a->n * b->n))
        return -1;
    for (int64_t i = 0; i < a->n; i++)
        for (int64_t j = 0; j < b->n; j++) {
            bw_term *t = &r->t[r->n++];
            smattn__bw_exact_add(t->tau, a->t[i].tau, b->t[j].tau);
            smattn__bw_exact_mul(t->c, a->t[i].c, b->t[j].c);
        }
    return smattn__bwp_normalize(r);
}

int smattn__bwp_equal(const bw_poly *a, const bw_poly *b)
{
    if (a->n != b->n)
        return 0;
    for (int64_t k = 0; k < a->n; k++)
        if (!mpfr_equal_p(a->t[k].tau, b->t[k].tau) || !mpfr_equal_p(a->t[k].c, b->t[k].c))
            return 0;
    return 1;
}

/* ---- deciding a ratio -------------------------------------------------------------------- */

/* [lo, hi] encloses sum_k c_k e^{tau_k - shift}, at precision prec (outward roundings). */
static void eval_poly(const bw_poly *p, mpfr_srcptr shift, mpfr_prec_t prec, mpfr_ptr lo,
                      mpfr_ptr hi, mpfr_ptr a, mpfr_ptr b, mpfr_ptr x)
{
    mpfr_set_prec(lo, prec);
    mpfr_set_prec(hi, prec);
    mpfr_set_zero(lo, 1);
    mpfr_set_zero(hi, 1);
    mpfr_set_prec(a, prec);
    mpfr_set_prec(b, prec);
    mpfr_set_prec(x, prec);
    for (int64_t k = 0; k < p->n; k++) {
        mpfr_sub(x, p->t[k].tau, shift, MPFR_RNDD);
        mpfr_exp(a, x, MPFR_RNDD);
        mpfr_sub(x, p->t[k].tau, shift, MPFR_RNDU);
        mpfr_exp(b, x, MPFR_RNDU);
        mpfr_srcptr c = p->t[k].c;
        if (mpfr_sgn(c) >= 0) {
            mpfr_mul(x, c, a, MPFR_RNDD);
            mpfr_add(lo, lo, x, MPFR_RNDD);
            mpfr_mul(x, c, b, MPFR_RNDU);
            mpfr_add(hi, hi, x, MPFR_RNDU);
        } else {
            mpfr_mul(x, c, b, MPFR_RNDD);
            mpfr_add(lo, lo, x, MPFR_RNDD);
            mpfr_mul(x, c, a, MPFR_RNDU);
            mpfr_add(hi, hi, x, MPFR_RNDU);
        }
    }
}

/* Correct rounding of the rational a / b (b != 0) to t. Terminates: a non-dyadic ratio is
 * never a boundary, a dyadic one is exact at some finite precision. */
static uint64_t round_ratio(mpfr_srcptr a, mpfr_srcptr b, smattn_dtype t, mpfr_ptr c, mpfr_ptr d,
                            mpfr_ptr tmp)
{
    mpfr_prec_t p = mpfr_get_prec(a) + mpfr_get_prec(b) + 64;
    for (;; p *= 2) {
        mpfr_set_prec(c, p);
        mpfr_set_prec(d, p);
        if (mpfr_div(c, a, b, MPFR_RNDD) == 0)
            return smattn__ref_round_mpfr(c, t, tmp);
        mpfr_div(d, a, b, MPFR_RNDU);
        uint64_t x = smattn__ref_round_mpfr(c, t, tmp), y = smattn__ref_round_mpfr(d, t, tmp);
        if (x == y)
            return x;
    }
}

static int64_t ord_of(uint64_t bits, smattn_dtype t)
{
    int sh = smattn__formats[t].bits - 1;
    uint64_t mag = bits & (((uint64_t)1 << sh) - 1);
    return (bits >> sh) & 1 ? -(int64_t)mag - 1 : (int64_t)mag;
}

/* The boundary between adjacent values blo < bhi of t, exactly (64 bits suffice). */
static void boundary(mpfr_ptr B, mpfr_ptr tmp, uint64_t blo, uint64_t bhi, smattn_dtype t)
{
    double vlo = smattn__bits_to_double(blo, t), vhi = smattn__bits_to_double(bhi, t);
    mpfr_set_prec(B, 64);
    mpfr_set_prec(tmp, 64);
    if (vlo == 0 && vhi == 0) {
        mpfr_set_zero(B, 1);
    } else if (isinf(vhi) || isinf(vlo)) { /* an infinity: the overflow edge */
        double mx = isinf(vhi) ? vlo : vhi;
        const smattn_format *f = &smattn__formats[t];
        mpfr_set_d(B, mx < 0 ? -mx : mx, MPFR_RNDN);
        mpfr_set_ui_2exp(tmp, 1, f->emax - f->prec, MPFR_RNDN);
        mpfr_add(B, B, tmp, MPFR_RNDN);
        if (mx < 0)
            mpfr_neg(B, B, MPFR_RNDN);
    } else {
        mpfr_set_d(B, vlo, MPFR_RNDN);
        mpfr_add_d(B, B, vhi, MPFR_RNDN);
        mpfr_div_2ui(B, B, 1, MPFR_RNDN);
    }
}

typedef struct dec_ws {
    mpfr_t nlo, nhi, dlo, dhi, lo, hi, a, b, x, c, d, tmp, B, shift, shd, f;
} dec_ws;

/* Sign of num - B den (nonzero when X is irrational), evaluated at precision prec: +1, -1,
 * or 0 when not yet known. diff is scratch. */
static int sign_diff(const bw_poly *num, const bw_poly *den, dec_ws *w, bw_poly *diff,
                     mpfr_prec_t prec, int *err)
{
    smattn__bwp_reset(diff);
    mpfr_set_prec(w->c, 64);
    mpfr_neg(w->c, w->B, MPFR_RNDN);
    mpfr_set_prec(w->d, 2);
    mpfr_set_ui(w->d, 1, MPFR_RNDN);
    if (smattn__bwp_add_scaled(diff, num, w->d) || smattn__bwp_add_scaled(diff, den, w->c) ||
        smattn__bwp_normalize(diff)) {
        *err = 1;
        return 0;
    }
    if (diff->n == 0)
        return 0; /* cannot happen for an irrational X */
    eval_poly(diff, diff->t[0].tau, prec, w->lo, w->hi, w->a, w->b, w->x);
    if (mpfr_sgn(w->lo) > 0)
        return 1;
    if (mpfr_sgn(w->hi) < 0)
        return -1;
    return 0;
}

int smattn__bwp_decide(const bw_poly *num, const bw_poly *den, smattn_dtype t, long start_prec,
                       long max_prec, uint64_t *bits, long *prec_used, int *rational)
{
    *rational = 0;
    if (num->n == 0) { /* an exact zero is +0 (SPEC 4.3) */
        *bits = 0;
        *rational = 1;
        return 1;
    }
    dec_ws w;
    mpfr_inits2(64, w.nlo, w.nhi, w.dlo, w.dhi, w.lo, w.hi, w.a, w.b, w.x, w.c, w.d, w.tmp, w.B,
                w.shift, w.shd, w.f, (mpfr_ptr)0);
    int ret = 0;
    /* Rational iff num = B den for a rational B (the e^tau being linearly independent over
     * the rationals): same exponents, proportional coefficients. */
    int rat = num->n == den->n;
    for (int64_t k = 0; rat && k < num->n; k++) {
        if (!mpfr_equal_p(num->t[k].tau, den->t[k].tau)) {
            rat = 0;
            break;
        }
        smattn__bw_exact_mul(w.c, num->t[k].c, den->t[0].c);
        smattn__bw_exact_mul(w.d, den->t[k].c, num->t[0].c);
        rat = mpfr_equal_p(w.c, w.d);
    }
    if (rat) {
        *bits = round_ratio(num->t[0].c, den->t[0].c, t, w.c, w.d, w.tmp);
        *rational = 1;
        ret = 1;
        goto done;
    }
    /* Irrational: X = e^{tn - td} (num e^{-tn}) / (den e^{-td}). */
    bw_poly diff;
    smattn__bwp_init(&diff);
    for (mpfr_prec_t prec = start_prec; prec <= max_prec && ret == 0; prec *= 2) {
        if (*prec_used < prec)
            *prec_used = prec;
        eval_poly(num, num->t[0].tau, prec, w.nlo, w.nhi, w.a, w.b, w.x);
        eval_poly(den, den->t[0].tau, prec, w.dlo, w.dhi, w.a, w.b, w.x);
        mpfr_set_prec(w.lo, prec);
        mpfr_set_prec(w.hi, prec);
        /* den's top term is exactly its coefficient (> 0), so dlo > 0 */
        mpfr_div(w.lo, w.nlo, mpfr_sgn(w.nlo) >= 0 ? w.dhi : w.dlo, MPFR_RNDD);
        mpfr_div(w.hi, w.nhi, mpfr_sgn(w.nhi) >= 0 ? w.dlo : w.dhi, MPFR_RNDU);
        mpfr_set_prec(w.f, prec);
        mpfr_set_prec(w.x, prec);
        mpfr_sub(w.x, num->t[0].tau, den->t[0].tau, MPFR_RNDD);
        mpfr_exp(w.a, w.x, MPFR_RNDD);
        mpfr_sub(w.x, num->t[0].tau, den->t[0].tau, MPFR_RNDU);
        mpfr_exp(w.b, w.x, MPFR_RNDU);
        mpfr_set_prec(w.c, prec);
        mpfr_set_prec(w.d, prec);
        mpfr_mul(w.c, w.lo, mpfr_sgn(w.lo) >= 0 ? w.a : w.b, MPFR_RNDD);
        mpfr_mul(w.d, w.hi, mpfr_sgn(w.hi) >= 0 ? w.b : w.a, MPFR_RNDU);
        uint64_t x = smattn__ref_round_mpfr(w.c, t, w.tmp),
                 y = smattn__ref_round_mpfr(w.d, t, w.tmp);
        if (x == y) {
            *bits = x;
            ret = 1;
            break;
        }
        int64_t ox = ord_of(x, t), oy = ord_of(y, t);
        if (ox == INT64_MAX || oy != ox + 1)
            continue;
        boundary(w.B, w.tmp, x, y, t);
        int err = 0;
        int sg = sign_diff(num, den, &w, &diff, prec, &err);
        if (err) {
            ret = -1;
            break;
        }
        if (sg) {
            *bits = sg > 0 ? y : x;
            ret = 1;
        }
    }
    smattn__bwp_clear(&diff);
done:
    mpfr_clears(w.nlo, w.nhi, w.dlo, w.dhi, w.lo, w.hi, w.a, w.b, w.x, w.c, w.d, w.tmp, w.B,
                w.shift, w.shd, w.f, (mpfr_ptr)0);
    return ret;
}
