/* SPDX-License-Identifier: MIT */
/* exact.c: the oracle's MPFR phase: exact scores, grouping of equal scores, the rational
 * rows rounded exactly, an interval Ziv loop, and the sign test that decides near-midpoints
 * with widely spread scores (SPEC 5.1, 5.3-5.5). */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "ref/ref_internal.h"

/* ---- exact arithmetic helpers ------------------------------------------------------------ */

/* The lowest set bit's exponent of a nonzero MPFR number is >= exp - prec. */
static long lsb_bound(mpfr_srcptr x)
{
    return (long)mpfr_get_exp(x) - (long)mpfr_get_prec(x);
}

int smattn__exact_add(mpfr_ptr rop, mpfr_srcptr a, mpfr_srcptr b)
{
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
    return mpfr_add(rop, a, b, MPFR_RNDN);
}

int smattn__exact_mul(mpfr_ptr rop, mpfr_srcptr a, mpfr_srcptr b)
{
    mpfr_set_prec(rop, mpfr_get_prec(a) + mpfr_get_prec(b));
    return mpfr_mul(rop, a, b, MPFR_RNDN);
}

int smattn__exact_sum(mpfr_ptr rop, mpfr_ptr *x, long n)
{
    long hi = LONG_MIN, lo = LONG_MAX;
    long nz = 0;
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
    return mpfr_sum(rop, x, (unsigned long)n, MPFR_RNDN);
}

/* ---- row state --------------------------------------------------------------------------- */

typedef struct group {
    int64_t first, count; /* a slice of the key order */
    int is_sink;
} group;

typedef struct exact_state {
    ref_row *r;
    int64_t n;          /* visible keys */
    int64_t *order;     /* key positions (0..n) sorted by score, descending */
    int64_t *gid;       /* group of each key position */
    mpfr_t *s;          /* exact scores [n]; with softcap: scale q.k before cap and bias */
    double *bias;       /* [n] with softcap: the bias of each key, added after the cap */
    double *alibi;      /* [n] with softcap: the ALiBi term of each key, added after that */
    mpfr_t sink;        /* exact sink (53 bits) */
    group *g;           /* [G] (the sink, if any, is a group of its own or merged) */
    int64_t G;
    int sink_merged;    /* the sink equals group sink_group's score */
    int64_t sink_group;
    int softcap;
    /* per precision level */
    mpfr_t *tlo, *thi;  /* group values (after softcap) as an interval [G] */
    mpfr_t *elo, *ehi;  /* exp(t - shift) as an interval [G] */
    mpfr_t shift;       /* exact: the top group's value (no softcap) or its upper bound */
    mpfr_t Llo, Lhi;    /* the denominator */
    /* per column */
    mpfr_t *vcol;       /* [n] V of one column, in key order */
    mpfr_ptr *ptrs;     /* [n + G + 2] */
    mpfr_t *W;          /* [G] exact V sums */
    mpfr_t a, b, c, d, tmp, B; /* scratch */
    mpfr_t *coef;       /* [G + 2] */
} exact_state;

/* Keys with equal scores (and, under softcap, equal bias) have equal final scores. */
static int cmp_desc(exact_state *st, int64_t x, int64_t y)
{
    int c = mpfr_cmp(st->s[y], st->s[x]);
    if (c || !st->softcap)
        return c;
    if (st->bias[y] != st->bias[x])
        return (st->bias[y] > st->bias[x]) - (st->bias[y] < st->bias[x]);
    return (st->alibi[y] > st->alibi[x]) - (st->alibi[y] < st->alibi[x]);
}

static int same_score(exact_state *st, int64_t x, int64_t y)
{
    return cmp_desc(st, x, y) == 0;
}

/* Insertion-merge sort of key positions by score (descending), stable. */
static void sort_keys(exact_state *st)
{
    int64_t n = st->n;
    int64_t *tmp = st->gid; /* borrowed as scratch before groups exist */
    for (int64_t k = 0; k < n; k++)
        st->order[k] = k;
    for (int64_t w = 1; w < n; w *= 2) {
        for (int64_t lo = 0; lo < n; lo += 2 * w) {
            int64_t mid = lo + w < n ? lo + w : n, hi = lo + 2 * w < n ? lo + 2 * w : n;
            int64_t i = lo, j = mid, k = lo;
            while (i < mid && j < hi)
                tmp[k++] = cmp_desc(st, st->order[i], st->order[j]) <= 0 ? st->order[i++]
                                                                          : st->order[j++];
            while (i < mid)
                tmp[k++] = st->order[i++];
            while (j < hi)
                tmp[k++] = st->order[j++];
        }
        memcpy(st->order, tmp, (size_t)n * sizeof *tmp);
    }
}

/* Exact score of key position jj into st->s[jj] (SPEC 5.1). */
static int exact_score(exact_state *st, int64_t jj, mpfr_t *prod, mpfr_ptr *ptrs)
{
    ref_row *r = st->r;
    int64_t j = r->idx[jj];
    mpfr_ptr s = st->s[jj];
    if (r->att) {
        for (int64_t d = 0; d < r->D; d++) {
            mpfr_set_prec(prod[d], 106);
            mpfr_set_d(prod[d], r->qd[d], MPFR_RNDN);
            mpfr_mul_d(prod[d], prod[d], smattn__ref_k(r, j, d), MPFR_RNDN); /* exact: 53+53 bits */
            ptrs[d] = prod[d];
        }
        if (smattn__exact_sum(st->tmp, ptrs, (long)r->D))
            return -1;
    } else {
        mpfr_set_prec(st->tmp, 53);
        mpfr_set_d(st->tmp, smattn__ref_x(r, j), MPFR_RNDN);
    }
    mpfr_set_prec(st->a, 53);
    mpfr_set_d(st->a, r->p->scale, MPFR_RNDN);
    if (smattn__exact_mul(st->b, st->tmp, st->a))
        return -1;
    if (st->softcap) { /* the bias is added after the cap (SPEC 2.4): keep them apart */
        mpfr_set_prec(s, mpfr_get_prec(st->b));
        mpfr_set(s, st->b, MPFR_RNDN);
        st->bias[jj] = smattn__ref_bias(r, j);
        st->alibi[jj] = smattn__ref_alibi(r, j);
        return 0;
    }
    mpfr_set_prec(st->a, 53);
    mpfr_set_d(st->a, smattn__ref_bias(r, j), MPFR_RNDN);
    double alibi = smattn__ref_alibi(r, j);
    if (alibi == 0)
        return smattn__exact_add(s, st->b, st->a) ? -1 : 0;
    if (smattn__exact_add(st->c, st->b, st->a)) /* the bias, then the ALiBi term (SPEC 2.8) */
        return -1;
    mpfr_set_prec(st->a, 53);
    mpfr_set_d(st->a, alibi, MPFR_RNDN);
    if (smattn__exact_add(s, st->c, st->a))
        return -1;
    return 0;
}

/* Group value k as an interval at precision prec: exact score, or softcap c*tanh(s/c). */
static void group_value(exact_state *st, int64_t k, mpfr_prec_t prec)
{
    mpfr_set_prec(st->tlo[k], prec);
    mpfr_set_prec(st->thi[k], prec);
    if (st->g[k].is_sink) {
        mpfr_set(st->tlo[k], st->sink, MPFR_RNDD);
        mpfr_set(st->thi[k], st->sink, MPFR_RNDU);
        return;
    }
    mpfr_srcptr s = st->s[st->order[st->g[k].first]];
    if (!st->softcap) {
        mpfr_set(st->tlo[k], s, MPFR_RNDD);
        mpfr_set(st->thi[k], s, MPFR_RNDU);
        return;
    }
    /* c tanh(s/c) is increasing in s: evaluate the lower end with downward roundings and
     * the upper end with upward roundings (c > 0). */
    double c = st->r->p->softcap, bias = st->bias[st->order[st->g[k].first]];
    double alibi = st->alibi[st->order[st->g[k].first]];
    mpfr_set_prec(st->a, prec + 16);
    mpfr_div_d(st->a, s, c, MPFR_RNDD);
    mpfr_tanh(st->a, st->a, MPFR_RNDD);
    mpfr_mul_d(st->a, st->a, c, MPFR_RNDD);
    mpfr_add_d(st->a, st->a, bias, MPFR_RNDD);
    mpfr_add_d(st->tlo[k], st->a, alibi, MPFR_RNDD);
    mpfr_div_d(st->a, s, c, MPFR_RNDU);
    mpfr_tanh(st->a, st->a, MPFR_RNDU);
    mpfr_mul_d(st->a, st->a, c, MPFR_RNDU);
    mpfr_add_d(st->a, st->a, bias, MPFR_RNDU);
    mpfr_add_d(st->thi[k], st->a, alibi, MPFR_RNDU);
}

/* [lo, hi] = x * [elo, ehi] for an exact x, with outward rounding. */
static void mul_interval(mpfr_ptr lo, mpfr_ptr hi, mpfr_srcptr x, mpfr_srcptr elo,
                         mpfr_srcptr ehi)
{
    if (mpfr_sgn(x) >= 0) {
        mpfr_mul(lo, x, elo, MPFR_RNDD);
        mpfr_mul(hi, x, ehi, MPFR_RNDU);
    } else {
        mpfr_mul(lo, x, ehi, MPFR_RNDD);
        mpfr_mul(hi, x, elo, MPFR_RNDU);
    }
}

/* [lo, hi] = [nlo, nhi] / [dlo, dhi] for dlo > 0, outward. */
static void div_interval(mpfr_ptr lo, mpfr_ptr hi, mpfr_srcptr nlo, mpfr_srcptr nhi,
                         mpfr_srcptr dlo, mpfr_srcptr dhi)
{
    mpfr_div(lo, nlo, mpfr_sgn(nlo) >= 0 ? dhi : dlo, MPFR_RNDD);
    mpfr_div(hi, nhi, mpfr_sgn(nhi) >= 0 ? dlo : dhi, MPFR_RNDU);
}

/* The exp intervals and the denominator at precision prec (SPEC 5.3). */
static void level(exact_state *st, mpfr_prec_t prec)
{
    for (int64_t k = 0; k < st->G; k++) {
        group_value(st, k, prec);
        smattn__ref_work(st->r);
    }
    /* shift: the largest upper end; exact as an MPFR number, so any choice is valid */
    int64_t top = 0;
    for (int64_t k = 1; k < st->G; k++)
        if (mpfr_cmp(st->thi[k], st->thi[top]) > 0)
            top = k;
    mpfr_set_prec(st->shift, mpfr_get_prec(st->thi[top]));
    mpfr_set(st->shift, st->thi[top], MPFR_RNDN);
    for (int64_t k = 0; k < st->G; k++) {
        mpfr_set_prec(st->elo[k], prec);
        mpfr_set_prec(st->ehi[k], prec);
        mpfr_set_prec(st->a, prec);
        mpfr_sub(st->a, st->tlo[k], st->shift, MPFR_RNDD);
        mpfr_exp(st->elo[k], st->a, MPFR_RNDD);
        mpfr_sub(st->a, st->thi[k], st->shift, MPFR_RNDU);
        mpfr_exp(st->ehi[k], st->a, MPFR_RNDU);
        smattn__ref_work(st->r);
    }
    mpfr_set_prec(st->Llo, prec);
    mpfr_set_prec(st->Lhi, prec);
    for (int pass = 0; pass < 2; pass++) {
        mpfr_rnd_t rnd = pass ? MPFR_RNDU : MPFR_RNDD;
        for (int64_t k = 0; k < st->G; k++) {
            mpfr_set_prec(st->coef[k], prec);
            mpfr_mul_ui(st->coef[k], pass ? st->ehi[k] : st->elo[k],
                        (unsigned long)(st->g[k].count + (st->sink_merged && k == st->sink_group)),
                        rnd);
            st->ptrs[k] = st->coef[k];
        }
        mpfr_sum(pass ? st->Lhi : st->Llo, st->ptrs, (unsigned long)st->G, rnd);
    }
}

/* ---- deciding one element -------------------------------------------------------------- */

/* ord: the format's values in increasing order; adjacent values differ by 1. */
static int64_t ord_of(uint64_t bits, smattn_dtype t)
{
    int sh = smattn__formats[t].bits - 1;
    uint64_t mag = bits & (((uint64_t)1 << sh) - 1);
    return (bits >> sh) & 1 ? -(int64_t)mag - 1 : (int64_t)mag;
}

/* The boundary between two adjacent values lo < hi of t, exactly, into B. */
static void boundary(exact_state *st, uint64_t blo, uint64_t bhi, smattn_dtype t)
{
    double vlo = smattn__bits_to_double(blo, t), vhi = smattn__bits_to_double(bhi, t);
    mpfr_set_prec(st->B, 64);
    if (vlo == 0 && vhi == 0) {
        mpfr_set_zero(st->B, 1);
    } else if (isinf(vhi) || isinf(vlo)) { /* the overflow edge: MAX + ulp(MAX)/2 */
        double mx = isinf(vhi) ? vlo : vhi;
        const smattn_format *f = &smattn__formats[t];
        mpfr_set_d(st->B, fabs(mx), MPFR_RNDN);
        mpfr_set_ui_2exp(st->tmp, 1, f->emax - f->prec, MPFR_RNDN);
        mpfr_add(st->B, st->B, st->tmp, MPFR_RNDN); /* exact at 64 bits */
        if (mx < 0)
            mpfr_neg(st->B, st->B, MPFR_RNDN);
    } else {
        mpfr_set_d(st->B, vlo, MPFR_RNDN);
        mpfr_add_d(st->B, st->B, vhi, MPFR_RNDN); /* exact: both have <= 53 bits, close */
        mpfr_div_2ui(st->B, st->B, 1, MPFR_RNDN);
    }
}

/* Sign of sum_k coef_k e^{val_k} for exact values and exact coefficients (SPEC 5.5): merge
 * equal values, drop zero coefficients, shift by the largest remaining value, evaluate with
 * outward rounding at precision prec. +1 / -1, or 0 when the interval still holds 0. */
typedef struct term {
    mpfr_ptr val, coef;
} term;

static int term_cmp_desc(const void *x, const void *y)
{
    const term *a = x, *b = y;
    return mpfr_cmp(b->val, a->val);
}

static int sign_exp_sum(exact_state *st, term *tm, int64_t nt, mpfr_prec_t prec)
{
    qsort(tm, (size_t)nt, sizeof *tm, term_cmp_desc);
    int64_t m = 0;
    for (int64_t k = 0; k < nt; k++) {
        if (m > 0 && mpfr_equal_p(tm[m - 1].val, tm[k].val)) {
            smattn__exact_add(st->tmp, tm[m - 1].coef, tm[k].coef);
            mpfr_set_prec(tm[m - 1].coef, mpfr_get_prec(st->tmp));
            mpfr_set(tm[m - 1].coef, st->tmp, MPFR_RNDN);
        } else {
            tm[m++] = tm[k];
        }
    }
    int64_t top = -1;
    for (int64_t k = 0; k < m; k++)
        if (!mpfr_zero_p(tm[k].coef)) {
            top = k;
            break;
        }
    if (top < 0)
        return 0;
    mpfr_set_prec(st->c, prec);
    mpfr_set_prec(st->d, prec);
    mpfr_set_zero(st->c, 1);
    mpfr_set_zero(st->d, 1);
    mpfr_set_prec(st->a, prec);
    mpfr_set_prec(st->b, prec);
    for (int64_t k = top; k < m; k++) {
        if (mpfr_zero_p(tm[k].coef))
            continue;
        mpfr_set_prec(st->tmp, prec);
        mpfr_sub(st->tmp, tm[k].val, tm[top].val, MPFR_RNDD);
        mpfr_exp(st->a, st->tmp, MPFR_RNDD);
        mpfr_sub(st->tmp, tm[k].val, tm[top].val, MPFR_RNDU);
        mpfr_exp(st->b, st->tmp, MPFR_RNDU);
        mpfr_set_prec(st->tmp, prec);
        mpfr_t lo;
        mpfr_init2(lo, prec);
        mul_interval(lo, st->tmp, tm[k].coef, st->a, st->b);
        mpfr_add(st->c, st->c, lo, MPFR_RNDD);
        mpfr_add(st->d, st->d, st->tmp, MPFR_RNDU);
        mpfr_clear(lo);
    }
    if (mpfr_sgn(st->c) > 0)
        return 1;
    if (mpfr_sgn(st->d) < 0)
        return -1;
    return 0;
}

/* Try to decide an element from its enclosure [lo, hi]; when the two ends round to
 * adjacent values, the caller-supplied sign test picks the side of the boundary. */
typedef int (*sign_fn)(exact_state *st, void *ctx, mpfr_prec_t prec);

static int decide(exact_state *st, mpfr_srcptr lo, mpfr_srcptr hi, smattn_dtype t,
                  uint64_t *bits, sign_fn sf, void *ctx, mpfr_prec_t prec)
{
    uint64_t a = smattn__ref_round_mpfr(lo, t, st->tmp), b = smattn__ref_round_mpfr(hi, t, st->tmp);
    if (a == b) {
        *bits = a;
        return 1;
    }
    /* adjacent: ord(b) == ord(a) + 1, written so that far-apart ends cannot overflow */
    int64_t oa = ord_of(a, t), ob = ord_of(b, t);
    if (!sf || oa == INT64_MAX || ob != oa + 1)
        return 0;
    boundary(st, a, b, t);
    int sg = sf(st, ctx, prec);
    if (sg == 0)
        return 0;
    st->r->sign_tests++;
    *bits = sg > 0 ? b : a;
    return 1;
}

/* O_c - B has the sign of sum_k e^{t_k} (W_k - B n_k); the sink is a group with W = 0. */
static int sign_o(exact_state *st, void *ctx, mpfr_prec_t prec)
{
    (void)ctx;
    term *tm = malloc((size_t)(st->G + 1) * sizeof *tm);
    if (!tm)
        return 0;
    for (int64_t k = 0; k < st->G; k++) {
        int64_t cnt = st->g[k].count + (st->sink_merged && k == st->sink_group);
        mpfr_set_prec(st->a, mpfr_get_prec(st->B) + 64);
        mpfr_mul_ui(st->a, st->B, (unsigned long)cnt, MPFR_RNDN); /* exact */
        mpfr_neg(st->a, st->a, MPFR_RNDN);
        smattn__exact_add(st->coef[k], st->W[k], st->a);
        tm[k].val = st->g[k].is_sink ? st->sink : st->s[st->order[st->g[k].first]];
        tm[k].coef = st->coef[k];
    }
    int sg = sign_exp_sum(st, tm, st->G, prec);
    free(tm);
    return sg;
}

/* LSE - B has the sign of sum_k n_k e^{t_k} - e^B. */
static int sign_lse(exact_state *st, void *ctx, mpfr_prec_t prec)
{
    (void)ctx;
    term *tm = malloc((size_t)(st->G + 1) * sizeof *tm);
    if (!tm)
        return 0;
    for (int64_t k = 0; k < st->G; k++) {
        int64_t cnt = st->g[k].count + (st->sink_merged && k == st->sink_group);
        mpfr_set_prec(st->coef[k], 64);
        mpfr_set_ui(st->coef[k], (unsigned long)cnt, MPFR_RNDN);
        tm[k].val = st->g[k].is_sink ? st->sink : st->s[st->order[st->g[k].first]];
        tm[k].coef = st->coef[k];
    }
    mpfr_set_prec(st->coef[st->G], 64);
    mpfr_set_si(st->coef[st->G], -1, MPFR_RNDN);
    tm[st->G].val = st->B;
    tm[st->G].coef = st->coef[st->G];
    int sg = sign_exp_sum(st, tm, st->G + 1, prec);
    free(tm);
    return sg;
}

/* P_j - B has the sign of e^{t_j} - B sum_k n_k e^{t_k}. ctx: the group of j. */
static int sign_p(exact_state *st, void *ctx, mpfr_prec_t prec)
{
    int64_t gj = *(const int64_t *)ctx;
    term *tm = malloc((size_t)(st->G + 1) * sizeof *tm);
    if (!tm)
        return 0;
    for (int64_t k = 0; k < st->G; k++) {
        int64_t cnt = st->g[k].count + (st->sink_merged && k == st->sink_group);
        mpfr_set_prec(st->coef[k], mpfr_get_prec(st->B) + 64);
        mpfr_mul_si(st->coef[k], st->B, -(long)cnt, MPFR_RNDN); /* exact */
        if (k == gj) {
            mpfr_set_prec(st->a, 2);
            mpfr_set_ui(st->a, 1, MPFR_RNDN);
            smattn__exact_add(st->tmp, st->coef[k], st->a);
            mpfr_set_prec(st->coef[k], mpfr_get_prec(st->tmp));
            mpfr_set(st->coef[k], st->tmp, MPFR_RNDN);
        }
        tm[k].val = st->g[k].is_sink ? st->sink : st->s[st->order[st->g[k].first]];
        tm[k].coef = st->coef[k];
    }
    int sg = sign_exp_sum(st, tm, st->G, prec);
    free(tm);
    return sg;
}

/* Round the rational W / n exactly (SPEC 5.4). */
static int round_rational(exact_state *st, mpfr_srcptr W, int64_t n, smattn_dtype t,
                          uint64_t *bits)
{
    if (mpfr_zero_p(W)) {
        *bits = 0; /* an exact zero is +0 (SPEC 4.3) */
        return 1;
    }
    for (mpfr_prec_t p = mpfr_get_prec(W) + 64; p < (1 << 20); p *= 2) {
        mpfr_set_prec(st->c, p);
        mpfr_set_prec(st->d, p);
        int tern = mpfr_div_ui(st->c, W, (unsigned long)n, MPFR_RNDD);
        if (tern == 0) {
            *bits = smattn__ref_round_mpfr(st->c, t, st->tmp);
            return 1;
        }
        mpfr_div_ui(st->d, W, (unsigned long)n, MPFR_RNDU);
        uint64_t a = smattn__ref_round_mpfr(st->c, t, st->tmp), b = smattn__ref_round_mpfr(st->d, t, st->tmp);
        if (a == b) { /* W/n is not dyadic, so it is no boundary: a finite p decides */
            *bits = a;
            return 1;
        }
    }
    return 0;
}

/* ---- the row ----------------------------------------------------------------------------- */

static int column_sums(exact_state *st, int64_t c)
{
    ref_row *r = st->r;
    for (int64_t k = 0; k < st->n; k++) {
        mpfr_set_prec(st->vcol[k], 53);
        mpfr_set_d(st->vcol[k], smattn__ref_v(r, r->idx[st->order[k]], c), MPFR_RNDN);
        smattn__ref_work(r);
    }
    for (int64_t k = 0; k < st->G; k++) {
        if (st->g[k].is_sink) {
            mpfr_set_prec(st->W[k], MPFR_PREC_MIN);
            mpfr_set_zero(st->W[k], 1);
            continue;
        }
        for (int64_t m = 0; m < st->g[k].count; m++)
            st->ptrs[m] = st->vcol[st->g[k].first + m];
        if (smattn__exact_sum(st->W[k], st->ptrs, (long)st->g[k].count))
            return -1;
    }
    return 0;
}

/* All group means equal: O_c = W_0 / n_0 is rational (SPEC 5.4). */
static int column_rational(exact_state *st)
{
    int64_t c0 = st->g[0].count + (st->sink_merged && st->sink_group == 0);
    for (int64_t k = 1; k < st->G; k++) {
        int64_t ck = st->g[k].count + (st->sink_merged && st->sink_group == k);
        mpfr_set_prec(st->a, mpfr_get_prec(st->W[k]) + 64);
        mpfr_set_prec(st->b, mpfr_get_prec(st->W[0]) + 64);
        mpfr_mul_ui(st->a, st->W[k], (unsigned long)c0, MPFR_RNDN); /* exact */
        mpfr_mul_ui(st->b, st->W[0], (unsigned long)ck, MPFR_RNDN);
        if (!mpfr_equal_p(st->a, st->b))
            return 0;
    }
    return 1;
}

static void state_free(exact_state *st)
{
    int64_t n = st->n, G = n + 1;
    if (st->s)
        for (int64_t k = 0; k < n; k++)
            mpfr_clear(st->s[k]);
    if (st->vcol)
        for (int64_t k = 0; k < n; k++)
            mpfr_clear(st->vcol[k]);
    if (st->tlo)
        for (int64_t k = 0; k < G; k++) {
            mpfr_clears(st->tlo[k], st->thi[k], st->elo[k], st->ehi[k], st->W[k], (mpfr_ptr)0);
        }
    if (st->coef)
        for (int64_t k = 0; k < G + 1; k++)
            mpfr_clear(st->coef[k]);
    free(st->s);
    free(st->bias);
    free(st->alibi);
    free(st->vcol);
    free(st->tlo);
    free(st->thi);
    free(st->elo);
    free(st->ehi);
    free(st->W);
    free(st->coef);
    free(st->order);
    free(st->gid);
    free(st->g);
    free(st->ptrs);
    mpfr_clears(st->sink, st->shift, st->Llo, st->Lhi, st->a, st->b, st->c, st->d, st->tmp,
                st->B, (mpfr_ptr)0);
}

static int state_init(exact_state *st, ref_row *r)
{
    memset(st, 0, sizeof *st);
    st->r = r;
    int64_t n = r->n, G = n + 1;
    st->n = n;
    mpfr_inits2(64, st->sink, st->shift, st->Llo, st->Lhi, st->a, st->b, st->c, st->d, st->tmp,
                st->B, (mpfr_ptr)0);
    size_t np = (size_t)(n > r->D ? n : r->D) + (size_t)G + 2;
    st->s = malloc((size_t)(n ? n : 1) * sizeof *st->s);
    st->vcol = malloc((size_t)(n ? n : 1) * sizeof *st->vcol);
    st->bias = calloc((size_t)(n ? n : 1), sizeof *st->bias);
    st->alibi = calloc((size_t)(n ? n : 1), sizeof *st->alibi);
    st->tlo = malloc((size_t)G * sizeof *st->tlo);
    st->thi = malloc((size_t)G * sizeof *st->thi);
    st->elo = malloc((size_t)G * sizeof *st->elo);
    st->ehi = malloc((size_t)G * sizeof *st->ehi);
    st->W = malloc((size_t)G * sizeof *st->W);
    st->coef = malloc((size_t)(G + 1) * sizeof *st->coef);
    st->order = malloc((size_t)(n ? n : 1) * sizeof *st->order);
    st->gid = malloc((size_t)(n ? n : 1) * sizeof *st->gid);
    st->g = malloc((size_t)G * sizeof *st->g);
    st->ptrs = malloc(np * sizeof *st->ptrs);
    if (!st->s || !st->bias || !st->alibi || !st->vcol || !st->tlo || !st->thi || !st->elo || !st->ehi || !st->W ||
        !st->coef || !st->order || !st->gid || !st->g || !st->ptrs) {
        free(st->s), free(st->bias), free(st->vcol), free(st->tlo), free(st->thi), free(st->elo);
        free(st->ehi), free(st->W), free(st->coef), free(st->order), free(st->gid);
        free(st->g), free(st->ptrs), free(st->alibi);
        st->s = NULL, st->bias = NULL, st->alibi = NULL, st->vcol = NULL, st->tlo = NULL, st->coef = NULL;
        st->thi = st->elo = st->ehi = st->W = NULL;
        st->order = st->gid = NULL, st->g = NULL, st->ptrs = NULL;
        mpfr_clears(st->sink, st->shift, st->Llo, st->Lhi, st->a, st->b, st->c, st->d,
                    st->tmp, st->B, (mpfr_ptr)0);
        return -1;
    }
    for (int64_t k = 0; k < n; k++) {
        mpfr_init2(st->s[k], 64);
        mpfr_init2(st->vcol[k], 53);
    }
    for (int64_t k = 0; k < G; k++)
        mpfr_inits2(64, st->tlo[k], st->thi[k], st->elo[k], st->ehi[k], st->W[k], (mpfr_ptr)0);
    for (int64_t k = 0; k < G + 1; k++)
        mpfr_init2(st->coef[k], 64);
    return 0;
}

/* Exact scores, sorted and grouped; the sink joins an equal group or stands alone. */
static smattn_status build_groups(exact_state *st)
{
    ref_row *r = st->r;
    int64_t n = st->n;
    mpfr_t *prod = NULL;
    if (r->att) {
        prod = malloc((size_t)r->D * sizeof *prod);
        if (!prod)
            return SMATTN_ERR_NOMEM;
        for (int64_t d = 0; d < r->D; d++)
            mpfr_init2(prod[d], 106);
    }
    smattn_status status = SMATTN_OK;
    st->softcap = r->p->softcap > 0;
    for (int64_t jj = 0; jj < n && status == SMATTN_OK; jj++) {
        if (exact_score(st, jj, prod, st->ptrs))
            status = SMATTN_ERR_INTERNAL; /* an exact operation reported rounding */
        smattn__ref_work(r);
    }
    if (prod) {
        for (int64_t d = 0; d < r->D; d++)
            mpfr_clear(prod[d]);
        free(prod);
    }
    if (status)
        return status;
    sort_keys(st);
    st->G = 0;
    for (int64_t k = 0; k < n; k++) {
        if (k == 0 || !same_score(st, st->order[k], st->order[k - 1])) {
            st->g[st->G].first = k;
            st->g[st->G].count = 0;
            st->g[st->G].is_sink = 0;
            st->G++;
        }
        st->g[st->G - 1].count++;
        st->gid[st->order[k]] = st->G - 1;
    }
    if (r->has_sink) {
        mpfr_set_prec(st->sink, 53);
        mpfr_set_d(st->sink, r->sink, MPFR_RNDN);
        st->sink_merged = 0;
        if (!st->softcap)
            for (int64_t k = 0; k < st->G; k++)
                if (mpfr_equal_p(st->s[st->order[st->g[k].first]], st->sink)) {
                    st->sink_merged = 1;
                    st->sink_group = k;
                }
        if (!st->sink_merged) {
            st->g[st->G].first = n;
            st->g[st->G].count = 1;
            st->g[st->G].is_sink = 1;
            st->G++;
        }
    }
    return SMATTN_OK;
}

smattn_status smattn__ref_exact_row(ref_row *r, long start_prec, long max_prec)
{
    exact_state st;
    if (state_init(&st, r))
        return SMATTN_ERR_NOMEM;
    smattn_status status = build_groups(&st);
    if (status) {
        state_free(&st);
        return status;
    }
    const smattn_outputs *out = r->out;
    int64_t n = r->n;
    /* count of terms with the sink merged in: the denominator's size */
    int64_t terms = n + (r->has_sink ? 1 : 0);
    int single_group = st.G == 1;

    /* Rational elements first (SPEC 5.4). */
    if (out->lse.data && !r->lse_done && terms == 1 && !st.softcap) {
        mpfr_srcptr v = n == 1 ? st.s[0] : st.sink;
        r->lse_bits = smattn__ref_round_mpfr(v, out->lse.dtype, st.tmp);
        r->lse_done = 1;
        r->used_rational = 1;
    }
    if (out->p.data && single_group) {
        /* every weight is 1/(n + sink) exactly */
        mpfr_set_prec(st.a, 64);
        mpfr_set_ui(st.a, 1, MPFR_RNDN);
        for (int64_t jj = 0; jj < n; jj++)
            if (!r->p_done[jj]) {
                if (!round_rational(&st, st.a, terms, out->p.dtype, &r->p_bits[jj])) {
                    state_free(&st);
                    return SMATTN_ERR_PRECISION;
                }
                r->p_done[jj] = 1;
                r->used_rational = 1;
            }
    }
    unsigned char *rational_col = NULL;
    if (r->att) {
        rational_col = calloc((size_t)r->Dv, 1);
        if (!rational_col) {
            state_free(&st);
            return SMATTN_ERR_NOMEM;
        }
        for (int64_t c = 0; c < r->Dv; c++) {
            if (r->o_done[c] || r->vclass[c] != VCLASS_FINITE)
                continue;
            if (column_sums(&st, c)) {
                free(rational_col);
                state_free(&st);
                return SMATTN_ERR_INTERNAL;
            }
            if (column_rational(&st)) {
                int64_t c0 = st.g[0].count + (st.sink_merged && st.sink_group == 0);
                if (!round_rational(&st, st.W[0], c0, out->o.dtype, &r->o_bits[c])) {
                    free(rational_col);
                    state_free(&st);
                    return SMATTN_ERR_PRECISION;
                }
                r->o_done[c] = 1;
                rational_col[c] = 1;
                r->used_rational = 1;
            }
        }
    }

    /* The Ziv loop over the rest (SPEC 5.3), with the sign test (SPEC 5.5). */
    int all = 0;
    mpfr_prec_t prec = start_prec > 0 ? start_prec : 128;
    for (; prec <= max_prec; prec *= 2) {
        if (r->prec_used < prec)
            r->prec_used = prec;
        level(&st, prec);
        all = 1;
        sign_fn sfl = st.softcap ? NULL : sign_lse, sfo = st.softcap ? NULL : sign_o;
        sign_fn sfp = st.softcap ? NULL : sign_p;
        if (out->lse.data && !r->lse_done) {
            mpfr_set_prec(st.c, prec);
            mpfr_set_prec(st.d, prec);
            mpfr_log(st.c, st.Llo, MPFR_RNDD);
            mpfr_add(st.c, st.c, st.shift, MPFR_RNDD);
            mpfr_log(st.d, st.Lhi, MPFR_RNDU);
            mpfr_add(st.d, st.d, st.shift, MPFR_RNDU);
            mpfr_t lo, hi;
            mpfr_init2(lo, prec);
            mpfr_init2(hi, prec);
            mpfr_set(lo, st.c, MPFR_RNDN);
            mpfr_set(hi, st.d, MPFR_RNDN);
            r->lse_done = decide(&st, lo, hi, out->lse.dtype, &r->lse_bits, sfl, NULL, prec);
            mpfr_clears(lo, hi, (mpfr_ptr)0);
            all &= r->lse_done;
        }
        if (out->p.data) {
            mpfr_t lo, hi;
            mpfr_inits2(prec, lo, hi, (mpfr_ptr)0);
            for (int64_t jj = 0; jj < n; jj++) {
                if (r->p_done[jj])
                    continue;
                int64_t gj = st.gid[jj];
                div_interval(lo, hi, st.elo[gj], st.ehi[gj], st.Llo, st.Lhi);
                r->p_done[jj] = decide(&st, lo, hi, out->p.dtype, &r->p_bits[jj], sfp, &gj, prec);
                all &= r->p_done[jj];
            }
            mpfr_clears(lo, hi, (mpfr_ptr)0);
        }
        if (r->att) {
            mpfr_t nlo, nhi, lo, hi;
            mpfr_inits2(prec, nlo, nhi, lo, hi, (mpfr_ptr)0);
            for (int64_t c = 0; c < r->Dv; c++) {
                if (r->o_done[c] || r->vclass[c] != VCLASS_FINITE)
                    continue;
                (void)column_sums(&st, c); /* exact: checked on the first pass above */
                for (int pass = 0; pass < 2; pass++) {
                    for (int64_t k = 0; k < st.G; k++) {
                        mpfr_set_prec(st.coef[k], prec);
                        mpfr_set_prec(st.a, prec);
                        mul_interval(pass ? st.a : st.coef[k], pass ? st.coef[k] : st.a, st.W[k],
                                     st.elo[k], st.ehi[k]);
                        st.ptrs[k] = st.coef[k];
                    }
                    mpfr_sum(pass ? nhi : nlo, st.ptrs, (unsigned long)st.G,
                             pass ? MPFR_RNDU : MPFR_RNDD);
                }
                div_interval(lo, hi, nlo, nhi, st.Llo, st.Lhi);
                r->o_done[c] = decide(&st, lo, hi, out->o.dtype, &r->o_bits[c], sfo, NULL, prec);
                all &= r->o_done[c];
            }
            mpfr_clears(nlo, nhi, lo, hi, (mpfr_ptr)0);
        }
        if (all)
            break;
    }
    free(rational_col);
    state_free(&st);
    return all ? SMATTN_OK : SMATTN_ERR_PRECISION;
}

/* The mean convention for an empty row (SPEC 3.4): P = 1/T_b and O = the mean of V over
 * keys [0, T_b) (r->idx, r->n), each rounded exactly; non-finite V by column class. */
smattn_status smattn__ref_mean_row(ref_row *r)
{
    exact_state st;
    if (state_init(&st, r))
        return SMATTN_ERR_NOMEM;
    smattn_status status = SMATTN_OK;
    int64_t n = r->n;
    if (r->out->p.data) {
        mpfr_set_prec(st.a, 2);
        mpfr_set_ui(st.a, 1, MPFR_RNDN);
        uint64_t bits;
        if (!round_rational(&st, st.a, n, r->out->p.dtype, &bits))
            status = SMATTN_ERR_PRECISION;
        for (int64_t jj = 0; jj < n; jj++)
            r->p_bits[jj] = bits;
    }
    for (int64_t c = 0; c < r->Dv && status == SMATTN_OK; c++) {
        int has_nan = 0, pos = 0, neg = 0;
        for (int64_t jj = 0; jj < n; jj++) {
            double v = smattn__ref_v(r, r->idx[jj], c);
            has_nan |= isnan(v);
            pos |= v == HUGE_VAL;
            neg |= v == -HUGE_VAL;
            mpfr_set_prec(st.vcol[jj], 53);
            mpfr_set_d(st.vcol[jj], isfinite(v) ? v : 0.0, MPFR_RNDN);
            st.ptrs[jj] = st.vcol[jj];
        }
        smattn_dtype t = r->out->o.dtype;
        if (has_nan || (pos && neg))
            r->o_bits[c] = smattn__ref_nan_bits(t);
        else if (pos || neg)
            r->o_bits[c] = smattn__ref_inf_bits(t, neg);
        else if (smattn__exact_sum(st.W[0], st.ptrs, (long)n))
            status = SMATTN_ERR_INTERNAL;
        else if (!round_rational(&st, st.W[0], n, t, &r->o_bits[c]))
            status = SMATTN_ERR_PRECISION;
    }
    state_free(&st);
    return status;
}
