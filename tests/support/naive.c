/* SPDX-License-Identifier: MIT */
/* naive.c: a second, deliberately plain MPFR evaluation of the conventions, to check smattn_ref.
 *
 * Independent of ref/ by construction: it includes only the public header and uses only
 * smattn_validate, smattn_visible and smattn_load from the library. No Ziv loop, no error
 * analysis: scores are exact, everything after them is evaluated once at a fixed precision
 * in round-to-nearest, and each output is rounded once with MPFR's own conversions. A value
 * within about 2^-prec (relative) of a rounding boundary may therefore be rounded wrongly;
 * the tests detect those by evaluating at two precisions. The one exception is the rational
 * case of O (every group of equal scores has the same mean of V, SPEC "Rational cases"),
 * which is evaluated exactly from the group sums so that exact midpoints are decided. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "tests/support/naive.h"

#define RNDN MPFR_RNDN

/* ---- rounding to the output formats ------------------------------------------------------ */

/* Pack |d| (already a value of the format: p significand bits, w exponent bits) by hand. */
static uint64_t pack_small(double d, int p, int w)
{
    uint64_t sign = signbit(d) ? 1 : 0;
    double a = fabs(d);
    int bias = (1 << (w - 1)) - 1, emin = 1 - bias;
    uint64_t field, m;
    if (isinf(a)) {
        field = ((uint64_t)1 << w) - 1;
        m = 0;
    } else if (a < ldexp(1.0, emin)) { /* subnormal or zero: field 0, m = a / 2^(emin-p+1) */
        field = 0;
        m = (uint64_t)ldexp(a, p - 1 - emin);
    } else {
        int e = ilogb(a);
        field = (uint64_t)(e + bias);
        m = (uint64_t)ldexp(a, p - 1 - e) - ((uint64_t)1 << (p - 1));
    }
    return sign << (p - 1 + w) | field << (p - 1) | m;
}

/* Round x to a format with p bits and MPFR exponents [emin, emax] (x = 0.1b... * 2^e), with
 * subnormals emulated by mpfr_subnormalize, and return it as a (exact) double. */
static double round_emulated(mpfr_srcptr x, int p, mpfr_exp_t emin, mpfr_exp_t emax)
{
    mpfr_exp_t old_emin = mpfr_get_emin(), old_emax = mpfr_get_emax();
    mpfr_t y;
    mpfr_init2(y, p);
    mpfr_set_emin(emin);
    mpfr_set_emax(emax);
    int inex = mpfr_set(y, x, RNDN);
    inex = mpfr_check_range(y, inex, RNDN);
    mpfr_subnormalize(y, inex, RNDN);
    mpfr_set_emin(old_emin);
    mpfr_set_emax(old_emax);
    double d = mpfr_get_d(y, RNDN); /* exact: the format is a subset of binary64 */
    mpfr_clear(y);
    return d;
}

static uint64_t round_bits(mpfr_srcptr x, smattn_dtype t);

/* The final roundings may raise underflow; the row evaluation uses that flag for its own
 * terms, so the flags are left as they were. */
uint64_t smattn_naive_round_bits(mpfr_srcptr x, smattn_dtype t)
{
    mpfr_flags_t f = mpfr_flags_save();
    uint64_t u = round_bits(x, t);
    mpfr_flags_restore(f, MPFR_FLAGS_ALL);
    return u;
}

static uint64_t round_bits(mpfr_srcptr x, smattn_dtype t)
{
    if (mpfr_nan_p(x)) {
        static const uint64_t qnan[4] = {0x7ff8000000000000u, 0x7fc00000u, 0x7e00u, 0x7fc0u};
        return (unsigned)t < 4 ? qnan[t] : 0;
    }
    if (mpfr_zero_p(x)) /* an exact zero is +0 */
        return 0;
    switch (t) {
    case SMATTN_F64: {
        double d = mpfr_get_d(x, RNDN);
        uint64_t u;
        memcpy(&u, &d, 8);
        return u;
    }
    case SMATTN_F32: {
        float f = mpfr_get_flt(x, RNDN);
        uint32_t u;
        memcpy(&u, &f, 4);
        return u;
    }
    case SMATTN_F16: /* smallest subnormal 2^-24 = 0.1b * 2^-23; largest 0.11..1b * 2^16 */
        return pack_small(round_emulated(x, 11, -23, 16), 11, 5);
    case SMATTN_BF16: /* smallest subnormal 2^-133; largest 0.11111111b * 2^128 */
        return pack_small(round_emulated(x, 8, -132, 128), 8, 8);
    case SMATTN_BOOL:
    case SMATTN_F8E4M3:
    case SMATTN_F8E5M2:
    case SMATTN_Q8_0:
    case SMATTN_Q4_0: break; /* not output dtypes */
    }
    return 0;
}

static void put_bits(const smattn_out_tensor *o, int64_t off, uint64_t bits)
{
    unsigned char *p = (unsigned char *)o->data + (size_t)off * smattn_dtype_size(o->dtype);
    switch (o->dtype) {
    case SMATTN_F64: memcpy(p, &bits, 8); break;
    case SMATTN_F32: {
        uint32_t u = (uint32_t)bits;
        memcpy(p, &u, 4);
        break;
    }
    default: {
        uint16_t u = (uint16_t)bits;
        memcpy(p, &u, 2);
        break;
    }
    }
}

static void put(const smattn_out_tensor *o, int64_t off, mpfr_srcptr x)
{
    if (o->data)
        put_bits(o, off, smattn_naive_round_bits(x, o->dtype));
}

/* ---- exact arithmetic helpers -------------------------------------------------------------- */

static int64_t off4(const int64_t s[4], int64_t a, int64_t b, int64_t c, int64_t d)
{
    return a * s[0] + b * s[1] + c * s[2] + d * s[3];
}

static double load(const smattn_tensor *t, int64_t off)
{
    return smattn_load(t->data, t->dtype, off);
}

static void set_exact_d(mpfr_ptr r, double d)
{
    mpfr_set_prec(r, 53);
    mpfr_set_d(r, d, RNDN); /* exact: 53 bits hold any double */
}

/* r = a * b exactly (r must not be a or b). Returns the ternary value: 0. */
static int mul_exact(mpfr_ptr r, mpfr_srcptr a, mpfr_srcptr b)
{
    mpfr_set_prec(r, mpfr_get_prec(a) + mpfr_get_prec(b));
    return mpfr_mul(r, a, b, RNDN);
}

/* r = sum of tab[0..n) exactly: the precision spans from the lowest bit of any term to the top
 * exponent plus room for carries. r must not be a term. Returns mpfr_sum's ternary value,
 * which is 0 when the sum is exact (the caller checks it). */
static int sum_exact(mpfr_ptr r, mpfr_ptr *tab, unsigned long n)
{
    mpfr_exp_t hi = 0, lo = 0;
    int any = 0;
    for (unsigned long k = 0; k < n; k++) {
        if (!mpfr_regular_p(tab[k]))
            continue;
        mpfr_exp_t e = mpfr_get_exp(tab[k]), l = e - (mpfr_exp_t)mpfr_get_prec(tab[k]);
        if (!any || e > hi)
            hi = e;
        if (!any || l < lo)
            lo = l;
        any = 1;
    }
    long carry = 2;
    for (unsigned long m = n; m > 0; m >>= 1)
        carry++;
    mpfr_set_prec(r, any ? (mpfr_prec_t)(hi - lo) + carry : 2);
    return mpfr_sum(r, (const mpfr_ptr *)tab, n, RNDN);
}

/* ---- one call -------------------------------------------------------------------------------- */

typedef struct naive {
    const smattn_problem *p;
    const smattn_inputs *in;
    const smattn_outputs *out;
    long prec;
    int att;
    int64_t nt;          /* scratch length: max(T, D) + 2 */
    mpfr_t *s0;          /* [T] exact scale * q.k (or scale * x) */
    mpfr_t *s;           /* [T] final score: exact without softcap */
    mpfr_t *e;           /* [T+1] e^{s_j - M}; [T] is the sink */
    mpfr_t *tmp;         /* [nt] products */
    mpfr_ptr *tab;       /* [nt] */
    double *bias;        /* [T] bias at visible keys (0 without bias) */
    char *vis;           /* [T] */
    int64_t *grp;        /* [T+1] group of each visible key and of the sink */
    mpfr_t *gw;          /* [T+1] per-group sums of V */
    int64_t *gn;         /* [T+1] per-group counts */
    char *ex;            /* [T+1] e_j is exact (e^0 = 1) */
    long kap_s;          /* log2 bound on the magnification of score errors (softcap) */
    unsigned char *flag; /* the current row's flags */
    mpfr_t sc, cap, sg, M, negM, L, lg, x, y, z, w1, w2;
} naive;

static mpfr_exp_t ex_of(mpfr_srcptr x)
{
    return mpfr_regular_p(x) ? mpfr_get_exp(x) : 0;
}

/* Round x into element off of o. A value that is not exact carries an error below about
 * 2^(kappa - prec) relative; if x is within 2^(kappa - prec/2) of a rounding boundary (a huge
 * margin), naive cannot decide it and the row is flagged SMATTN_NAIVE_ROW_NEAR. */
static void put_x(naive *n, const smattn_out_tensor *o, int64_t off, mpfr_srcptr x, int exact,
                  long kappa)
{
    if (!o->data)
        return;
    uint64_t u = smattn_naive_round_bits(x, o->dtype);
    put_bits(o, off, u);
    if (exact || mpfr_nan_p(x) || mpfr_inf_p(x))
        return;
    if (mpfr_zero_p(x)) { /* a computed zero that may not be exact: sign and size unknown */
        *n->flag |= SMATTN_NAIVE_ROW_NEAR;
        return;
    }
    long sh = n->prec / 2 - kappa;
    if (sh < 8)
        sh = 8;
    for (int k = 0; k < 2; k++) {
        mpfr_set_prec(n->w1, mpfr_get_prec(x));
        mpfr_mul_2si(n->w1, x, -sh, RNDN); /* exact */
        mpfr_set_prec(n->w2, mpfr_get_prec(x) + sh + 8);
        if (k)
            mpfr_add(n->w2, x, n->w1, RNDN);
        else
            mpfr_sub(n->w2, x, n->w1, RNDN);
        if (smattn_naive_round_bits(n->w2, o->dtype) != u)
            *n->flag |= SMATTN_NAIVE_ROW_NEAR;
    }
}

static mpfr_t *alloc_mp(int64_t n)
{
    mpfr_t *a = malloc(sizeof(mpfr_t) * (size_t)n);
    if (a)
        for (int64_t k = 0; k < n; k++)
            mpfr_init2(a[k], 2);
    return a;
}

static void free_mp(mpfr_t *a, int64_t n)
{
    if (!a)
        return;
    for (int64_t k = 0; k < n; k++)
        mpfr_clear(a[k]);
    free(a);
}

static void set_nan(mpfr_ptr r)
{
    mpfr_set_prec(r, 2);
    mpfr_set_nan(r);
}

static void set_zero(mpfr_ptr r)
{
    mpfr_set_prec(r, 2);
    mpfr_set_zero(r, 1);
}

/* Column rule for non-finite V over the keys with sel[j] (SPEC "Non-finite inputs"):
 * returns 1 and sets r to NaN or +-inf if it applies, else 0. */
static int v_column_nonfinite(naive *n, int64_t b, int64_t hk, int64_t c, const char *sel,
                              int64_t upto, mpfr_ptr r)
{
    int nan = 0, pinf = 0, ninf = 0;
    for (int64_t j = 0; j < upto; j++) {
        if (sel && !sel[j])
            continue;
        double v = load(&n->in->v, off4(n->in->v.stride, b, j, hk, c));
        nan |= isnan(v);
        pinf |= v == HUGE_VAL;
        ninf |= v == -HUGE_VAL;
    }
    if (nan || (pinf && ninf)) {
        set_nan(r);
        return 1;
    }
    if (pinf || ninf) {
        mpfr_set_prec(r, 2);
        mpfr_set_inf(r, pinf ? 1 : -1);
        return 1;
    }
    return 0;
}

static smattn_status empty_row(naive *n, int64_t b, int64_t h, int64_t i)
{
    const smattn_problem *p = n->p;
    const smattn_outputs *out = n->out;
    int64_t Tb = p->kv_lens ? p->kv_lens[b] : p->T;
    int64_t hk = n->att ? h / (p->Hq / p->Hkv) : 0;
    switch (p->empty_lse) {
    case SMATTN_LSE_NEG_INF: mpfr_set_inf(n->x, -1); break;
    case SMATTN_LSE_POS_INF: mpfr_set_inf(n->x, 1); break;
    default: mpfr_set_zero(n->x, 1); break;
    }
    put(&out->lse, off4(out->lse.stride, b, h, i, 0), n->x);
    for (int64_t j = 0; j < p->T; j++) {
        if (p->empty_rows == SMATTN_EMPTY_NAN)
            set_nan(n->y);
        else if (p->empty_rows == SMATTN_EMPTY_MEAN && j < Tb) {
            mpfr_set_prec(n->y, n->prec);
            mpfr_set_ui(n->y, 1, RNDN);
            int t = mpfr_div_ui(n->y, n->y, (unsigned long)Tb, RNDN);
            put_x(n, &out->p, off4(out->p.stride, b, h, i, j), n->y, t == 0, 2);
            continue;
        } else
            set_zero(n->y);
        put(&out->p, off4(out->p.stride, b, h, i, j), n->y);
    }
    if (!n->att)
        return SMATTN_OK;
    for (int64_t c = 0; c < p->Dv; c++) {
        if (p->empty_rows == SMATTN_EMPTY_NAN)
            set_nan(n->y);
        else if (p->empty_rows == SMATTN_EMPTY_MEAN && Tb > 0) {
            if (!v_column_nonfinite(n, b, hk, c, NULL, Tb, n->y)) {
                /* Exact sum of the column, then one division wide enough to be exact
                 * whenever the mean is a dyadic (a midpoint included). */
                for (int64_t j = 0; j < Tb; j++) {
                    set_exact_d(n->tmp[j], load(&n->in->v, off4(n->in->v.stride, b, j, hk, c)));
                    n->tab[j] = n->tmp[j];
                }
                if (sum_exact(n->z, n->tab, (unsigned long)Tb))
                    return SMATTN_ERR_INTERNAL;
                mpfr_set_prec(n->y, n->prec + mpfr_get_prec(n->z));
                int t = mpfr_div_ui(n->y, n->z, (unsigned long)Tb, RNDN);
                put_x(n, &out->o, off4(out->o.stride, b, i, h, c), n->y, t == 0, 2);
                continue;
            }
        } else
            set_zero(n->y);
        put(&out->o, off4(out->o.stride, b, i, h, c), n->y);
    }
    return SMATTN_OK;
}

static void nan_row(naive *n, int64_t b, int64_t h, int64_t i)
{
    const smattn_outputs *out = n->out;
    set_nan(n->x);
    set_zero(n->y);
    put(&out->lse, off4(out->lse.stride, b, h, i, 0), n->x);
    for (int64_t j = 0; j < n->p->T; j++)
        put(&out->p, off4(out->p.stride, b, h, i, j), n->vis[j] ? n->x : n->y);
    if (n->att)
        for (int64_t c = 0; c < n->p->Dv; c++)
            put(&out->o, off4(out->o.stride, b, i, h, c), n->x);
}

/* Are the group keys of a and b equal (index T is the sink)? Without softcap the key is the
 * exact final score. With softcap c*tanh(s0/c) + bias it is the pair (s0, bias): by
 * Lindemann-Weierstrass, c*tanh(r/c) - c*tanh(r'/c) is irrational for rationals r != r', so
 * two capped scores are equal exactly when the pairs are (the sink is the pair (0, sigma)). */
static int same_key(naive *n, int64_t a, int64_t b)
{
    int64_t T = n->p->T;
    if (n->p->softcap > 0) {
        double ba = a == T ? mpfr_get_d(n->sg, RNDN) : n->bias[a];
        double bb = b == T ? mpfr_get_d(n->sg, RNDN) : n->bias[b];
        int za = a == T, zb = b == T;
        int s_eq = za && zb ? 1
                   : za     ? mpfr_zero_p(n->s0[b])
                   : zb     ? mpfr_zero_p(n->s0[a])
                            : mpfr_equal_p(n->s0[a], n->s0[b]);
        return s_eq && ba == bb;
    }
    mpfr_srcptr sa = a == T ? n->sg : n->s[a], sb = b == T ? n->sg : n->s[b];
    return mpfr_equal_p(sa, sb);
}

static smattn_status full_row(naive *n, int64_t b, int64_t h, int64_t i, int sink,
                              unsigned char *flag)
{
    const smattn_problem *p = n->p;
    const smattn_inputs *in = n->in;
    const smattn_outputs *out = n->out;
    const int64_t T = p->T;
    const int64_t hk = n->att ? h / (p->Hq / p->Hkv) : 0;
    const int capped = p->softcap > 0;
    const mpfr_prec_t wp = n->prec + 64; /* capped scores: not exact, kept a little wider */
    n->kap_s = 0;

    /* Exact scores s0 = scale * q.k (or scale * x), then softcap and bias. */
    for (int64_t j = 0; j < T; j++) {
        if (!n->vis[j])
            continue;
        if (n->att) {
            for (int64_t d = 0; d < p->D; d++) {
                set_exact_d(n->x, load(&in->q, off4(in->q.stride, b, i, h, d)));
                set_exact_d(n->y, load(&in->k, off4(in->k.stride, b, j, hk, d)));
                mul_exact(n->tmp[d], n->x, n->y);
                n->tab[d] = n->tmp[d];
            }
            if (sum_exact(n->z, n->tab, (unsigned long)p->D))
                return SMATTN_ERR_INTERNAL;
        } else {
            set_exact_d(n->z, load(&in->x, off4(in->x.stride, b, h, i, j)));
        }
        mul_exact(n->s0[j], n->z, n->sc);
        if (capped) {
            mpfr_set_prec(n->s[j], wp);
            mpfr_div(n->s[j], n->s0[j], n->cap, RNDN);
            mpfr_tanh(n->s[j], n->s[j], RNDN);
            mpfr_mul(n->s[j], n->s[j], n->cap, RNDN);
            mpfr_add_d(n->s[j], n->s[j], n->bias[j], RNDN);
            /* An error of 2^-wp |s| in a score is one of 2^-wp (|s| + |M|) in e^{s-M}. */
            if (ex_of(n->s[j]) + 2 > n->kap_s)
                n->kap_s = ex_of(n->s[j]) + 2;
        } else {
            set_exact_d(n->x, n->bias[j]);
            mpfr_ptr pair[2] = {n->s0[j], n->x};
            if (sum_exact(n->s[j], pair, 2))
                return SMATTN_ERR_INTERNAL;
        }
    }

    /* M = the largest score (sink included), copied exactly. */
    int64_t arg = -1;
    for (int64_t j = 0; j < T; j++)
        if (n->vis[j] && (arg < 0 || mpfr_cmp(n->s[j], n->s[arg]) > 0))
            arg = j;
    if (sink && (arg < 0 || mpfr_cmp(n->sg, n->s[arg]) > 0))
        arg = T;
    mpfr_srcptr mx = arg == T ? n->sg : n->s[arg];
    mpfr_set_prec(n->M, mpfr_get_prec(mx));
    mpfr_set(n->M, mx, RNDN);
    mpfr_set_prec(n->negM, mpfr_get_prec(mx));
    mpfr_neg(n->negM, n->M, RNDN);

    /* e_j = e^{s_j - M}: the difference is exact without softcap, so equal scores give
     * exactly e^0 = 1. */
    int64_t ne = 0;
    for (int64_t j = 0; j <= T; j++) {
        if (j < T ? !n->vis[j] : !sink)
            continue;
        mpfr_srcptr sj = j == T ? n->sg : n->s[j];
        if (capped) {
            mpfr_set_prec(n->z, wp);
            mpfr_sub(n->z, sj, n->M, RNDN);
            if (j == T && ex_of(n->sg) + 2 > n->kap_s)
                n->kap_s = ex_of(n->sg) + 2;
        } else {
            mpfr_ptr pair[2] = {j == T ? n->sg : n->s[j], n->negM};
            if (sum_exact(n->z, pair, 2))
                return SMATTN_ERR_INTERNAL;
        }
        mpfr_set_prec(n->e[j], n->prec);
        /* Only e^0 is exact; for a capped score, only when s_j and M are the same value. */
        n->ex[j] = mpfr_exp(n->e[j], n->z, RNDN) == 0 && mpfr_zero_p(n->z) && (!capped || j == arg);
        n->tab[ne++] = n->e[j];
    }
    mpfr_set_prec(n->L, n->prec);
    int lx = mpfr_sum(n->L, (const mpfr_ptr *)n->tab, (unsigned long)ne, RNDN) == 0;
    for (int64_t j = 0; j <= T; j++)
        if (j < T ? n->vis[j] : sink)
            lx &= n->ex[j];

    /* LSE = M + log L, at least as wide as M so that a single term gives M exactly. */
    mpfr_set_prec(n->lg, n->prec);
    int lsex = mpfr_log(n->lg, n->L, RNDN) == 0; /* evaluated unconditionally */
    lsex &= lx && (!capped || arg == T || mpfr_zero_p(n->s0[arg]));
    mpfr_prec_t lp = mpfr_get_prec(n->M) > n->prec ? mpfr_get_prec(n->M) : n->prec;
    mpfr_set_prec(n->x, lp + 2);
    lsex &= mpfr_add(n->x, n->M, n->lg, RNDN) == 0;
    /* Cancellation between M and log L magnifies their errors by (|M| + |log L|) / |LSE|. */
    {
        mpfr_exp_t top = ex_of(n->M) > ex_of(n->lg) ? ex_of(n->M) : ex_of(n->lg);
        long kap = (long)(top - ex_of(n->x)) + 4 + n->kap_s;
        put_x(n, &out->lse, off4(out->lse.stride, b, h, i, 0), n->x, lsex, kap);
    }

    /* P_j = e_j / L. */
    if (out->p.data)
        for (int64_t j = 0; j < T; j++) {
            if (n->vis[j]) {
                mpfr_set_prec(n->x, n->prec);
                int t = mpfr_div(n->x, n->e[j], n->L, RNDN);
                put_x(n, &out->p, off4(out->p.stride, b, h, i, j), n->x, t == 0 && n->ex[j] && lx,
                      4 + n->kap_s);
            } else {
                set_zero(n->x);
                put(&out->p, off4(out->p.stride, b, h, i, j), n->x);
            }
        }
    if (!n->att)
        return SMATTN_OK;

    /* Groups of equal scores, for the rational case of O. */
    int64_t ng = 0;
    for (int64_t j = 0; j <= T; j++) {
        if (j < T ? !n->vis[j] : !sink)
            continue;
        n->grp[j] = -1;
        for (int64_t k = 0; k < j && n->grp[j] < 0; k++)
            if ((k < T ? n->vis[k] : 0) && same_key(n, j, k))
                n->grp[j] = n->grp[k];
        if (n->grp[j] < 0)
            n->grp[j] = ng++;
    }

    for (int64_t c = 0; c < p->Dv; c++) {
        if (v_column_nonfinite(n, b, hk, c, n->vis, T, n->x)) {
            put(&out->o, off4(out->o.stride, b, i, h, c), n->x);
            continue;
        }
        /* Exact per-group sums W_g and counts n_g (the sink adds 1 to its group's count). */
        int rational = 1;
        for (int64_t g = 0; g < ng; g++) {
            int64_t cnt = 0, nt = 0;
            for (int64_t j = 0; j <= T; j++) {
                if ((j < T ? !n->vis[j] : !sink) || n->grp[j] != g)
                    continue;
                cnt++;
                if (j < T) {
                    set_exact_d(n->tmp[nt], load(&in->v, off4(in->v.stride, b, j, hk, c)));
                    n->tab[nt] = n->tmp[nt];
                    nt++;
                }
            }
            if (sum_exact(n->gw[g], n->tab, (unsigned long)nt))
                return SMATTN_ERR_INTERNAL;
            n->gn[g] = cnt;
        }
        for (int64_t g = 1; g < ng && rational; g++) { /* W_g * n_0 == W_0 * n_g ? */
            mpfr_set_prec(n->y, mpfr_get_prec(n->gw[g]) + 64);
            mpfr_mul_ui(n->y, n->gw[g], (unsigned long)n->gn[0], RNDN);
            mpfr_set_prec(n->z, mpfr_get_prec(n->gw[0]) + 64);
            mpfr_mul_ui(n->z, n->gw[0], (unsigned long)n->gn[g], RNDN);
            rational = mpfr_equal_p(n->y, n->z);
        }
        if (rational) {
            *flag |= SMATTN_NAIVE_ROW_RATIONAL;
            mpfr_set_prec(n->x, n->prec + mpfr_get_prec(n->gw[0]));
            int t = mpfr_div_ui(n->x, n->gw[0], (unsigned long)n->gn[0], RNDN);
            put_x(n, &out->o, off4(out->o.stride, b, i, h, c), n->x, t == 0, 2);
        } else {
            int64_t nt = 0;
            int ox = lx;
            mpfr_exp_t top = 0;
            for (int64_t j = 0; j < T; j++) {
                if (!n->vis[j])
                    continue;
                set_exact_d(n->y, load(&in->v, off4(in->v.stride, b, j, hk, c)));
                mul_exact(n->tmp[nt], n->e[j], n->y);
                ox &= n->ex[j];
                if (nt == 0 || ex_of(n->tmp[nt]) > top)
                    top = ex_of(n->tmp[nt]);
                n->tab[nt] = n->tmp[nt];
                nt++;
            }
            mpfr_set_prec(n->z, n->prec);
            ox &= mpfr_sum(n->z, (const mpfr_ptr *)n->tab, (unsigned long)nt, RNDN) == 0;
            mpfr_set_prec(n->x, n->prec);
            ox &= mpfr_div(n->x, n->z, n->L, RNDN) == 0;
            /* Cancellation in N = sum e_j v_j magnifies the errors of the e_j by
             * sum |e_j v_j| / |N| <= nt 2^(top - EXP(N) + 1). */
            long kap = (long)(top - ex_of(n->z)) + 8 + n->kap_s;
            if (mpfr_underflow_p())
                *flag |= SMATTN_NAIVE_ROW_UNDERFLOW;
            put_x(n, &out->o, off4(out->o.stride, b, i, h, c), n->x, ox, kap);
        }
        if (mpfr_underflow_p()) /* checked before the output rounding, which may set it */
            *flag |= SMATTN_NAIVE_ROW_UNDERFLOW;
    }
    return SMATTN_OK;
}

static int finite_q(naive *n, int64_t b, int64_t h, int64_t i)
{
    if (!n->att)
        return 1;
    for (int64_t d = 0; d < n->p->D; d++)
        if (!isfinite(load(&n->in->q, off4(n->in->q.stride, b, i, h, d))))
            return 0;
    return 1;
}

static smattn_status row(naive *n, int64_t b, int64_t h, int64_t i, unsigned char *flag)
{
    const smattn_problem *p = n->p;
    const smattn_inputs *in = n->in;
    const int64_t T = p->T;
    const int64_t Sb = p->q_lens ? p->q_lens[b] : p->S;
    const int64_t hk = n->att ? h / (p->Hq / p->Hkv) : 0;
    const int padding = i >= Sb;
    *flag = 0;

    /* Visible keys: the public visibility test, then the bias / x = -inf rule. A key that
     * fails the public test is not read at all. */
    int64_t nvis = 0;
    int bad = 0; /* the non-finite-input rule (SPEC "Non-finite inputs") */
    for (int64_t j = 0; j < T; j++) {
        n->vis[j] = 0;
        n->bias[j] = 0;
        if (padding || !smattn_visible(p, in, b, h, i, j))
            continue;
        double bj = in->bias.data ? load(&in->bias, off4(in->bias.stride, b, h, i, j)) : 0;
        double xj = n->att ? 0 : load(&in->x, off4(in->x.stride, b, h, i, j));
        if (bj == -HUGE_VAL || xj == -HUGE_VAL)
            continue;
        bad |= !(bj < HUGE_VAL) || !(xj < HUGE_VAL); /* NaN or +inf */
        n->bias[j] = bj;
        if (n->att)
            for (int64_t d = 0; d < p->D; d++)
                bad |= !isfinite(load(&in->k, off4(in->k.stride, b, j, hk, d)));
        n->vis[j] = 1;
        nvis++;
    }
    int sink = 0;
    if (in->sinks.data && !padding) {
        double sg = load(&in->sinks, h * in->sinks.stride[0]);
        if (sg != -HUGE_VAL) {
            sink = 1;
            bad |= !(sg < HUGE_VAL);
            set_exact_d(n->sg, sg);
        }
    }
    /* A padding row is empty whatever the other options (SPEC 3.2); an empty row reads no
     * q, k or bias (SPEC 4.2). q enters only through visible scores: a non-finite q poisons
     * a row with a visible key, not a row whose only term is a finite sink. */
    if (padding)
        *flag |= SMATTN_NAIVE_ROW_PADDING;
    if (padding || (nvis == 0 && !sink)) {
        *flag |= SMATTN_NAIVE_ROW_EMPTY;
        return empty_row(n, b, h, i);
    }
    if (bad || (nvis > 0 && !finite_q(n, b, h, i))) {
        *flag |= SMATTN_NAIVE_ROW_NAN;
        nan_row(n, b, h, i);
        return SMATTN_OK;
    }
    mpfr_clear_underflow();
    return full_row(n, b, h, i, sink, flag);
}

smattn_status smattn_naive_ex(const smattn_problem *prob, const smattn_inputs *in,
                              const smattn_outputs *out, long prec, unsigned char *row_flags,
                              smattn_naive_stats *stats)
{
    smattn_status st = smattn_validate(prob, in, out);
    if (st != SMATTN_OK)
        return st;
    naive n;
    memset(&n, 0, sizeof n);
    n.p = prob;
    n.in = in;
    n.out = out;
    n.prec = prec > 0 ? prec : SMATTN_NAIVE_PREC;
    n.att = prob->op == SMATTN_OP_ATTENTION;
    const int64_t T = prob->T;
    n.nt = (n.att && prob->D > T ? prob->D : T) + 2;
    n.s0 = alloc_mp(T);
    n.s = alloc_mp(T);
    n.e = alloc_mp(T + 1);
    n.tmp = alloc_mp(n.nt);
    n.gw = alloc_mp(T + 1);
    n.tab = malloc(sizeof(mpfr_ptr) * (size_t)n.nt);
    n.bias = malloc(sizeof(double) * (size_t)T);
    n.vis = malloc((size_t)T);
    n.grp = malloc(sizeof(int64_t) * (size_t)(T + 1));
    n.gn = malloc(sizeof(int64_t) * (size_t)(T + 1));
    n.ex = malloc((size_t)(T + 1));
    mpfr_inits2(64, n.sc, n.cap, n.sg, n.M, n.negM, n.L, n.lg, n.x, n.y, n.z, n.w1, n.w2,
                (mpfr_ptr)0);
    set_exact_d(n.sc, prob->scale);
    set_exact_d(n.cap, prob->softcap);

    /* The widest exponent range: exact scores reach 2^2100 and e^{s-M} far below 2^-2^30. */
    mpfr_exp_t old_emin = mpfr_get_emin(), old_emax = mpfr_get_emax();
    mpfr_set_emin(mpfr_get_emin_min());
    mpfr_set_emax(mpfr_get_emax_max());

    smattn_naive_stats z = {0};
    st = (n.s0 && n.s && n.e && n.tmp && n.gw && n.tab && n.bias && n.vis && n.grp && n.gn && n.ex)
             ? SMATTN_OK
             : SMATTN_ERR_NOMEM;
    for (int64_t b = 0; b < prob->B && st == SMATTN_OK; b++)
        for (int64_t h = 0; h < prob->Hq && st == SMATTN_OK; h++)
            for (int64_t i = 0; i < prob->S && st == SMATTN_OK; i++) {
                unsigned char f = 0;
                n.flag = &f;
                st = row(&n, b, h, i, &f);
                if (row_flags)
                    row_flags[(b * prob->Hq + h) * prob->S + i] = f;
                z.rows++;
                z.rows_empty += (f & SMATTN_NAIVE_ROW_EMPTY) != 0;
                z.rows_nan += (f & SMATTN_NAIVE_ROW_NAN) != 0;
                z.rows_underflow += (f & SMATTN_NAIVE_ROW_UNDERFLOW) != 0;
                z.rows_rational += (f & SMATTN_NAIVE_ROW_RATIONAL) != 0;
                z.rows_near += (f & SMATTN_NAIVE_ROW_NEAR) != 0;
            }
    if (stats)
        *stats = z;

    mpfr_set_emin(old_emin);
    mpfr_set_emax(old_emax);
    mpfr_clears(n.sc, n.cap, n.sg, n.M, n.negM, n.L, n.lg, n.x, n.y, n.z, n.w1, n.w2, (mpfr_ptr)0);
    free(n.ex);
    free_mp(n.s0, T);
    free_mp(n.s, T);
    free_mp(n.e, T + 1);
    free_mp(n.tmp, n.nt);
    free_mp(n.gw, T + 1);
    free(n.tab);
    free(n.bias);
    free(n.vis);
    free(n.grp);
    free(n.gn);
    return st;
}

smattn_status smattn_naive(const smattn_problem *prob, const smattn_inputs *in,
                           const smattn_outputs *out, long prec)
{
    return smattn_naive_ex(prob, in, out, prec, NULL, NULL);
}
