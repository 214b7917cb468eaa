/* SPDX-License-Identifier: MIT */
/* bw_poly.c: exact sparse exponential polynomials and the exact rounding of their ratios,
 * the backward oracle's exact path (SPEC 10.3). */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "ref/backward_internal.h"
#include "ref/ref_internal.h"

/* ---- exact arithmetic: the forward's (exact.c), an exact zero made +0 ------------------- */

static long lsb_bound(mpfr_srcptr x)
{
    return (long)mpfr_get_exp(x) - (long)mpfr_get_prec(x);
}

static int plus_zero(mpfr_ptr rop, int t)
{
    if (mpfr_zero_p(rop))
        mpfr_set_zero(rop, 1);
    return t;
}

int smattn__bw_exact_add(mpfr_ptr rop, mpfr_srcptr a, mpfr_srcptr b)
{
    return plus_zero(rop, smattn__exact_add(rop, a, b));
}

int smattn__bw_exact_mul(mpfr_ptr rop, mpfr_srcptr a, mpfr_srcptr b)
{
    return plus_zero(rop, smattn__exact_mul(rop, a, b));
}

int smattn__bw_exact_sum(mpfr_ptr rop, mpfr_ptr *x, long n)
{
    return plus_zero(rop, smattn__exact_sum(rop, x, n));
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

/* ---- a sum of ratios --------------------------------------------------------------------- */

/* The rows of a GQA unit (or the queries of one head) that see a key have distinct
 * denominators; putting their terms over one (SPEC 10.3 item 5) multiplies the
 * denominators' sizes, which for a few rows of a dozen keys passes 2^18 terms. Their sum is
 * decided here without that product: each ratio is enclosed on its own (shifted by its
 * largest exponents, so scores spread over 2^70 cost nothing), and the one question an
 * enclosure cannot settle, whether the sum equals the boundary B it holds, is answered by
 * an exact proof of inequality:
 *
 *   every exponent is a multiple of 2^-m, so each e^tau is w^n for w = e^{2^-m}, which is
 *   transcendental (Lindemann); sum_k A_k / D_k = B iff the Laurent polynomial
 *   N(X) = sum_k A_k(X) prod_{k' != k} D_k'(X) - B prod_k D_k(X) (dyadic coefficients) is
 *   the zero polynomial. Its image under X -> z, 1/2 -> 2^126 in Z / p (p = 2^127 - 1
 *   prime) is computed from the D_k(z) and A_k(z) alone; a nonzero image proves N != 0,
 *   hence the sum != B.
 *
 * A zero image (an exact B, or a coincidence modulo p) sends the element back to the common
 * denominator, as does an enclosure still holding B at max_prec. */

typedef struct modp {
    mpz_t p, pm1, z, e, t, u;
    long m; /* exponents are multiples of 2^-m */
} modp;

static void modp_init(modp *q)
{
    mpz_inits(q->p, q->pm1, q->z, q->e, q->t, q->u, (mpz_ptr)0);
    mpz_ui_pow_ui(q->p, 2, 127);
    mpz_sub_ui(q->p, q->p, 1);
    mpz_sub_ui(q->pm1, q->p, 1);
    /* a fixed point (determinism); any nonzero residue is sound, this one of large order */
    mpz_set_str(q->z, "5a2d1f0c3b8e7d9a6f4c2b1e0d3f5a7", 16);
    q->m = 0;
}

static void modp_clear(modp *q)
{
    mpz_clears(q->p, q->pm1, q->z, q->e, q->t, q->u, (mpz_ptr)0);
}

/* r = x mod p for a dyadic x (2^-1 = 2^126 since 2^127 = 1). */
static void modp_dyadic(modp *q, mpz_ptr r, mpfr_srcptr x)
{
    if (mpfr_zero_p(x)) {
        mpz_set_ui(r, 0);
        return;
    }
    long e = (long)mpfr_get_z_2exp(r, x);
    long s = e % 127;
    if (s < 0)
        s += 127;
    mpz_mul_2exp(r, r, (mp_bitcnt_t)s);
    mpz_mod(r, r, q->p);
}

/* r = P(z) mod p, the exponents scaled by 2^m to integers. */
static void modp_eval(modp *q, mpz_ptr r, const bw_poly *P)
{
    mpz_set_ui(r, 0);
    for (int64_t k = 0; k < P->n; k++) {
        const bw_term *t = &P->t[k];
        if (mpfr_zero_p(t->tau)) {
            mpz_set_ui(q->e, 0);
        } else {
            long e = (long)mpfr_get_z_2exp(q->e, t->tau);
            mpz_mul_2exp(q->e, q->e, (mp_bitcnt_t)(e + q->m)); /* e + m >= 0 by m's choice */
        }
        mpz_mod(q->e, q->e, q->pm1); /* z^(p-1) = 1 */
        mpz_powm(q->t, q->z, q->e, q->p);
        modp_dyadic(q, q->u, t->c);
        mpz_mul(q->t, q->t, q->u);
        mpz_add(r, r, q->t);
    }
    mpz_mod(r, r, q->p);
}

static void modp_scale(modp *q, const bw_poly *P)
{
    for (int64_t k = 0; k < P->n; k++)
        if (!mpfr_zero_p(P->t[k].tau) && -lsb_bound(P->t[k].tau) > q->m)
            q->m = -lsb_bound(P->t[k].tau);
}

/* 1 when sum_k A_k / D_k != B is proven, 0 when not. */
static int modp_differs(const bw_poly *A, const bw_poly *D, int64_t n, mpfr_srcptr B)
{
    modp q;
    modp_init(&q);
    for (int64_t k = 0; k < n; k++)
        modp_scale(&q, &A[k]), modp_scale(&q, &D[k]);
    mpz_t s, a, d;
    mpz_inits(s, a, d, (mpz_ptr)0);
    int ok = 1;
    modp_dyadic(&q, s, B);
    mpz_neg(s, s);
    for (int64_t k = 0; k < n && ok; k++) {
        if (A[k].n == 0)
            continue;
        modp_eval(&q, d, &D[k]);
        if (!mpz_invert(d, d, q.p)) { /* D_k(z) = 0 mod p: no conclusion */
            ok = 0;
            break;
        }
        modp_eval(&q, a, &A[k]);
        mpz_mul(a, a, d);
        mpz_add(s, s, a);
        mpz_mod(s, s, q.p);
    }
    int differs = ok && mpz_sgn(s) != 0;
    mpz_clears(s, a, d, (mpz_ptr)0);
    modp_clear(&q);
    return differs;
}

/* Scratch of a sum's enclosure: E_k = (A_k's top exponent) - (D_k's), exact; top the
 * index of the largest. */
typedef struct sum_ws {
    dec_ws w;
    mpfr_t *E, slo, shi;
    int64_t n, top;
} sum_ws;

static int sum_ws_init(sum_ws *s, const bw_poly *A, const bw_poly *D, int64_t n)
{
    dec_ws *w = &s->w;
    mpfr_inits2(64, w->nlo, w->nhi, w->dlo, w->dhi, w->lo, w->hi, w->a, w->b, w->x, w->c, w->d,
                w->tmp, w->B, w->shift, w->shd, w->f, s->slo, s->shi, (mpfr_ptr)0);
    s->n = n;
    s->top = -1;
    s->E = malloc((size_t)(n ? n : 1) * sizeof *s->E);
    if (!s->E)
        return -1;
    for (int64_t k = 0; k < n; k++) {
        mpfr_init2(s->E[k], MPFR_PREC_MIN);
        if (A[k].n == 0)
            continue;
        mpfr_set_prec(w->c, mpfr_get_prec(D[k].t[0].tau));
        mpfr_neg(w->c, D[k].t[0].tau, MPFR_RNDN);
        smattn__bw_exact_add(s->E[k], A[k].t[0].tau, w->c);
        if (s->top < 0 || mpfr_cmp(s->E[k], s->E[s->top]) > 0)
            s->top = k;
    }
    return 0;
}

static void sum_ws_clear(sum_ws *s)
{
    dec_ws *w = &s->w;
    if (s->E)
        for (int64_t k = 0; k < s->n; k++)
            mpfr_clear(s->E[k]);
    free(s->E);
    mpfr_clears(w->nlo, w->nhi, w->dlo, w->dhi, w->lo, w->hi, w->a, w->b, w->x, w->c, w->d, w->tmp,
                w->B, w->shift, w->shd, w->f, s->slo, s->shi, (mpfr_ptr)0);
}

/* [slo, shi] encloses e^{-E_top} sum_k A_k / D_k at precision prec. */
static void sum_enclose(sum_ws *s, const bw_poly *A, const bw_poly *D, mpfr_prec_t prec)
{
    dec_ws *w = &s->w;
    mpfr_set_prec(s->slo, prec);
    mpfr_set_prec(s->shi, prec);
    mpfr_set_zero(s->slo, 1);
    mpfr_set_zero(s->shi, 1);
    for (int64_t k = 0; k < s->n; k++) {
        if (A[k].n == 0)
            continue;
        /* [lo, hi] encloses A_k / D_k e^{-E_k}; den's top term is its coefficient > 0 */
        eval_poly(&A[k], A[k].t[0].tau, prec, w->nlo, w->nhi, w->a, w->b, w->x);
        eval_poly(&D[k], D[k].t[0].tau, prec, w->dlo, w->dhi, w->a, w->b, w->x);
        mpfr_set_prec(w->lo, prec);
        mpfr_set_prec(w->hi, prec);
        mpfr_div(w->lo, w->nlo, mpfr_sgn(w->nlo) >= 0 ? w->dhi : w->dlo, MPFR_RNDD);
        mpfr_div(w->hi, w->nhi, mpfr_sgn(w->nhi) >= 0 ? w->dlo : w->dhi, MPFR_RNDU);
        /* times e^{E_k - E_top} in [a, b] (0 <= a <= b <= 1; a may underflow to 0) */
        mpfr_set_prec(w->x, prec);
        mpfr_sub(w->x, s->E[k], s->E[s->top], MPFR_RNDD);
        mpfr_exp(w->a, w->x, MPFR_RNDD);
        mpfr_sub(w->x, s->E[k], s->E[s->top], MPFR_RNDU);
        mpfr_exp(w->b, w->x, MPFR_RNDU);
        mpfr_set_prec(w->c, prec);
        mpfr_set_prec(w->d, prec);
        mpfr_mul(w->c, w->lo, mpfr_sgn(w->lo) >= 0 ? w->a : w->b, MPFR_RNDD);
        mpfr_mul(w->d, w->hi, mpfr_sgn(w->hi) >= 0 ? w->b : w->a, MPFR_RNDU);
        mpfr_add(s->slo, s->slo, w->c, MPFR_RNDD);
        mpfr_add(s->shi, s->shi, w->d, MPFR_RNDU);
    }
}

#define BW_SUM_DEPTH 8

static int sum_sign(const bw_poly *A, const bw_poly *D, int64_t n, long max_prec, int depth,
                    long *prec_used, int *sg);

/* sum_sign's split (below): each term A_k / D_k = (a_k / d_k) e^{E_k} +
 * (d_k A_k - a_k e^{E_k} D_k) / (d_k D_k), a_k and d_k the top coefficients of A_k and D_k
 * and E_k the difference of their top exponents, so that e^{E_k} D_k's top cancels A_k's;
 * the rational parts of equal E_k gather in one term (n / d) e^{E} over 1. Then the sign
 * of that sum. 1 decided, 0 not, -1 memory. */
static int sum_split(const bw_poly *A, const bw_poly *D, int64_t n, long max_prec, int depth,
                     long *prec_used, int *sg)
{
    const int64_t cap = 2 * n;
    bw_poly *A2 = calloc((size_t)cap, sizeof *A2), *D2 = calloc((size_t)cap, sizeof *D2);
    mpfr_t *En = calloc((size_t)n, sizeof *En), *Nn = calloc((size_t)n, sizeof *Nn),
           *Dn = calloc((size_t)n, sizeof *Dn);
    mpfr_t E, t1, t2, tau, zero;
    mpfr_inits2(MPFR_PREC_MIN, E, t1, t2, tau, zero, (mpfr_ptr)0);
    mpfr_set_zero(zero, 1);
    int64_t ng = 0, m = n;
    int any = 0, ret = -1;
    if (!A2 || !D2 || !En || !Nn || !Dn)
        goto done;
    for (int64_t k = 0; k < cap; k++)
        smattn__bwp_init(&A2[k]), smattn__bwp_init(&D2[k]);
    for (int64_t k = 0; k < n; k++)
        mpfr_inits2(MPFR_PREC_MIN, En[k], Nn[k], Dn[k], (mpfr_ptr)0);
    for (int64_t k = 0; k < n; k++) {
        if (A[k].n == 0)
            continue;
        any = 1;
        mpfr_srcptr a = A[k].t[0].c, d = D[k].t[0].c;
        mpfr_set_prec(t1, mpfr_get_prec(D[k].t[0].tau));
        mpfr_neg(t1, D[k].t[0].tau, MPFR_RNDN);
        smattn__bw_exact_add(E, A[k].t[0].tau, t1);
        /* A2 = d A - a e^E D, D2 = d D */
        if (smattn__bwp_add_scaled(&A2[k], &A[k], d) || smattn__bwp_add_scaled(&D2[k], &D[k], d))
            goto done;
        for (int64_t x = 0; x < D[k].n; x++) {
            smattn__bw_exact_add(tau, D[k].t[x].tau, E);
            smattn__bw_exact_mul(t1, D[k].t[x].c, a);
            mpfr_set_prec(t2, mpfr_get_prec(t1));
            mpfr_neg(t2, t1, MPFR_RNDN);
            if (smattn__bwp_push(&A2[k], tau, t2))
                goto done;
        }
        if (smattn__bwp_normalize(&A2[k]))
            goto done;
        /* (a / d) e^E into its group: n / d += a / d_k */
        int64_t g = 0;
        while (g < ng && !mpfr_equal_p(En[g], E))
            g++;
        if (g == ng) {
            mpfr_set_prec(En[g], mpfr_get_prec(E));
            mpfr_set(En[g], E, MPFR_RNDN);
            mpfr_set_zero(Nn[g], 1);
            mpfr_set_prec(Dn[g], 2);
            mpfr_set_ui(Dn[g], 1, MPFR_RNDN);
            ng++;
        }
        smattn__bw_exact_mul(t1, Nn[g], d);
        smattn__bw_exact_mul(t2, a, Dn[g]);
        smattn__bw_exact_add(Nn[g], t1, t2);
        smattn__bw_exact_mul(t1, Dn[g], d);
        mpfr_swap(t1, Dn[g]);
    }
    if (!any) {
        ret = 0;
        goto done;
    }
    for (int64_t g = 0; g < ng; g++) {
        if (mpfr_zero_p(Nn[g]))
            continue;
        if (smattn__bwp_push(&A2[m], En[g], Nn[g]) || smattn__bwp_push(&D2[m], zero, Dn[g]))
            goto done;
        m++;
    }
    ret = sum_sign(A2, D2, m, max_prec, depth + 1, prec_used, sg);
done:
    if (A2 && D2)
        for (int64_t k = 0; k < cap; k++)
            smattn__bwp_clear(&A2[k]), smattn__bwp_clear(&D2[k]);
    if (En && Nn && Dn)
        for (int64_t k = 0; k < n; k++)
            mpfr_clears(En[k], Nn[k], Dn[k], (mpfr_ptr)0);
    free(A2), free(D2), free(En), free(Nn), free(Dn);
    mpfr_clears(E, t1, t2, tau, zero, (mpfr_ptr)0);
    return ret;
}

/* The sign of sum_k A_k / D_k, known to be nonzero, into *sg. An enclosure that keeps
 * holding 0 is mostly a sum whose leading parts cancel exactly while the rest lies far below
 * them (scores spread over 2^70: e^{-2^70} is below MPFR's range, so no precision sees it).
 * Then each term is split (sum_split) into its leading part, a rational times e^{E_k}, and
 * the rest, which starts below it: the leading parts of equal E_k gather (and cancel, if
 * they do), so the next level's enclosure is scaled by the largest remaining exponent. The
 * split is an exact identity, so trying it early costs time, never correctness. 1 decided,
 * 0 not, -1 memory. */
static int sum_sign(const bw_poly *A, const bw_poly *D, int64_t n, long max_prec, int depth,
                    long *prec_used, int *sg)
{
    sum_ws s;
    memset(&s, 0, sizeof s);
    if (sum_ws_init(&s, A, D, n)) {
        sum_ws_clear(&s);
        return -1;
    }
    int ret = 0, tried = depth >= BW_SUM_DEPTH;
    for (mpfr_prec_t prec = 128; s.top >= 0 && prec <= max_prec && ret == 0; prec *= 2) {
        if (*prec_used < prec)
            *prec_used = prec;
        sum_enclose(&s, A, D, prec);
        if (mpfr_sgn(s.slo) > 0 || mpfr_sgn(s.shi) < 0) {
            *sg = mpfr_sgn(s.slo) > 0 ? 1 : -1;
            ret = 1;
        } else if (prec >= 256 && !tried) {
            tried = 1;
            ret = sum_split(A, D, n, max_prec, depth, prec_used, sg);
        }
    }
    sum_ws_clear(&s);
    return ret;
}

int smattn__bwp_decide_sum(const bw_poly *A, const bw_poly *D, int64_t n, smattn_dtype t,
                           long start_prec, long max_prec, uint64_t *bits, long *prec_used)
{
    sum_ws s;
    memset(&s, 0, sizeof s);
    if (sum_ws_init(&s, A, D, n)) {
        sum_ws_clear(&s);
        return -1;
    }
    if (s.top < 0) { /* every term an exact zero: +0 (SPEC 4.3) */
        sum_ws_clear(&s);
        *bits = 0;
        return 1;
    }
    dec_ws *w = &s.w;
    mpfr_t proven;
    mpfr_init2(proven, 64);
    int have_proven = 0, ret = 0;
    for (mpfr_prec_t prec = start_prec; prec <= max_prec && ret == 0; prec *= 2) {
        if (*prec_used < prec)
            *prec_used = prec;
        sum_enclose(&s, A, D, prec);
        /* the sum, times e^{E_top} */
        mpfr_set_prec(w->x, prec);
        mpfr_set_prec(w->a, prec);
        mpfr_set_prec(w->b, prec);
        mpfr_set_prec(w->c, prec);
        mpfr_set_prec(w->d, prec);
        mpfr_set(w->x, s.E[s.top], MPFR_RNDD);
        mpfr_exp(w->a, w->x, MPFR_RNDD);
        mpfr_set(w->x, s.E[s.top], MPFR_RNDU);
        mpfr_exp(w->b, w->x, MPFR_RNDU);
        mpfr_mul(w->c, s.slo, mpfr_sgn(s.slo) >= 0 ? w->a : w->b, MPFR_RNDD);
        mpfr_mul(w->d, s.shi, mpfr_sgn(s.shi) >= 0 ? w->b : w->a, MPFR_RNDU);
        uint64_t x = smattn__ref_round_mpfr(w->c, t, w->tmp),
                 y = smattn__ref_round_mpfr(w->d, t, w->tmp);
        /* (both ends 0 cannot occur: the upper end of a nonzero term never underflows to 0,
         * and a sum whose ends are all <= 0 is of nonzero negative terms, so -0 is right) */
        if (x == y && !(mpfr_zero_p(w->c) && mpfr_zero_p(w->d))) {
            *bits = x;
            ret = 1;
            break;
        }
        if (ord_of(y, t) != ord_of(x, t) + 1)
            continue;
        /* one boundary B inside: go on only once the sum is proven to differ from it */
        boundary(w->B, w->tmp, x, y, t);
        if (!have_proven || !mpfr_equal_p(proven, w->B)) {
            if (!modp_differs(A, D, n, w->B))
                break; /* maybe exactly B: the common denominator decides */
            mpfr_set_prec(proven, mpfr_get_prec(w->B));
            mpfr_set(proven, w->B, MPFR_RNDN);
            have_proven = 1;
            continue;
        }
        /* still on B one level later: the sign of sum_k A_k / D_k - B, with -B / 1 as one
         * more term, by sum_sign (which splits off cancelling rational parts) */
        bw_poly *A2 = calloc((size_t)n + 1, sizeof *A2), *D2 = calloc((size_t)n + 1, sizeof *D2);
        if (!A2 || !D2) {
            free(A2), free(D2);
            ret = -1;
            break;
        }
        mpfr_set_prec(w->c, 2);
        mpfr_set_ui(w->c, 1, MPFR_RNDN);
        mpfr_set_prec(w->d, 64);
        mpfr_neg(w->d, w->B, MPFR_RNDN);
        mpfr_set_prec(w->x, MPFR_PREC_MIN);
        mpfr_set_zero(w->x, 1);
        int bad = 0;
        for (int64_t k = 0; k <= n; k++)
            smattn__bwp_init(&A2[k]), smattn__bwp_init(&D2[k]);
        for (int64_t k = 0; k < n && !bad; k++)
            bad = smattn__bwp_add_scaled(&A2[k], &A[k], w->c) ||
                  smattn__bwp_add_scaled(&D2[k], &D[k], w->c);
        if (!bad && !mpfr_zero_p(w->d))
            bad = smattn__bwp_push(&A2[n], w->x, w->d);
        if (!bad)
            bad = smattn__bwp_push(&D2[n], w->x, w->c);
        int sg = 0;
        int r = bad ? -1 : sum_sign(A2, D2, n + 1, max_prec, 0, prec_used, &sg);
        for (int64_t k = 0; k <= n; k++)
            smattn__bwp_clear(&A2[k]), smattn__bwp_clear(&D2[k]);
        free(A2), free(D2);
        if (r < 0)
            ret = -1;
        else if (r > 0)
            *bits = sg > 0 ? y : x, ret = 1;
        break;
    }
    mpfr_clear(proven);
    sum_ws_clear(&s);
    return ret;
}
