/* SPDX-License-Identifier: MIT */
/* backward.c: the exact backward oracle (SPEC 10): the rows of each KV head's group, exact
 * scores and dP, the structural exact zeros, an interval Ziv loop over every gradient, and
 * the exact expansion (bw_poly.c) for whatever the intervals leave undecided. */
#include <math.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include "ref/backward_internal.h"
#include "ref/dd.h"
#include "ref/ref_internal.h"

#define BW_DEFAULT_MAX_PREC 16384L
#define BW_START_PREC 128L
/* Interval levels (each doubling the precision) before an undecided element goes to the
 * exact expansion: an exact zero or midpoint is never decided by intervals, anything else
 * almost always is by then. */
#define BW_EXACT_AFTER 2
/* The most terms an exact expansion may hold before merging (memory: two exact MPFR
 * numbers per term); beyond it the element stays with the Ziv loop (SPEC 10.3). */
#define BW_TERM_CAP ((int64_t)1 << 18)

/* ---- loading ----------------------------------------------------------------------------- */

static double ld(const smattn_tensor *t, int64_t i0, int64_t i1, int64_t i2, int64_t i3)
{
    return smattn_load(t->data, t->dtype, smattn__off4(t->stride, i0, i1, i2, i3));
}

static int cls_of(double v)
{
    return isnan(v) ? CL_NAN : v == HUGE_VAL ? CL_POS : v == -HUGE_VAL ? CL_NEG : 0;
}

static uint64_t cls_bits(int cl, smattn_dtype t)
{
    if ((cl & CL_NAN) || ((cl & CL_POS) && (cl & CL_NEG)))
        return smattn__ref_nan_bits(t);
    return smattn__ref_inf_bits(t, (cl & CL_NEG) != 0);
}

/* ---- rows -------------------------------------------------------------------------------- */

static void row_free(bw_row *r)
{
    int64_t n = r->alloc;
    if (n) {
        for (int64_t k = 0; k < n; k++)
            mpfr_clears(r->s[k], r->dp[k], r->x[k], r->Plo[k], r->Phi[k], r->Ulo[k], r->Uhi[k],
                        (mpfr_ptr)0);
        for (int64_t k = 0; k < n + 1; k++)
            mpfr_clears(r->C[k], r->texp[k], (mpfr_ptr)0);
        mpfr_clears(r->top, r->PSlo, r->PShi, r->Dlo, r->Dhi, (mpfr_ptr)0);
        for (int64_t k = 0; r->Slo && k < n; k++)
            mpfr_clears(r->Slo[k], r->Shi[k], (mpfr_ptr)0);
    }
    free(r->idx), free(r->q), free(r->dout), free(r->dcls), free(r->s), free(r->dp);
    free(r->x), free(r->bias), free(r->order), free(r->gfirst), free(r->gkeys), free(r->gcnt);
    free(r->gid), free(r->C), free(r->texp), free(r->Plo), free(r->Phi), free(r->Ulo);
    free(r->Uhi), free(r->Uzero), free(r->fP), free(r->fPr), free(r->fS), free(r->fSr);
    free(r->g6), free(r->Slo), free(r->Shi), free(r->alibi);
    memset(r, 0, sizeof *r);
}

/* What every row needs: its visible keys (up to T) and its q, dO. */
static int row_alloc(bw_row *r, int64_t n, int64_t D, int64_t Dv)
{
    size_t N = (size_t)(n ? n : 1);
    r->idx = malloc(N * sizeof *r->idx);
    r->q = malloc((size_t)D * sizeof *r->q);
    r->dout = malloc((size_t)Dv * sizeof *r->dout);
    r->dcls = malloc((size_t)Dv);
    if (!r->idx || !r->q || !r->dout || !r->dcls) {
        row_free(r);
        return -1;
    }
    return 0;
}

/* The binary64 tier's P and dS of a normal row's n visible keys. */
static int row_alloc_fast(bw_row *r)
{
    size_t N = (size_t)(r->n ? r->n : 1);
    r->fP = malloc(N * sizeof(double));
    r->fPr = malloc(N * sizeof(double));
    r->fS = malloc(N * sizeof(double));
    r->fSr = malloc(N * sizeof(double));
    return !r->fP || !r->fPr || !r->fS || !r->fSr ? -1 : 0;
}

/* The MPFR phase's data, only for the rows it evaluates (SPEC 10.3 items 3-5); dS apart
 * from dU only under softcap. */
static int row_alloc_exact(bw_row *r, int softcap)
{
    size_t N = (size_t)(r->n ? r->n : 1), N1 = N + 1;
    r->s = malloc(N * sizeof *r->s);
    r->dp = malloc(N * sizeof *r->dp);
    r->x = malloc(N * sizeof *r->x);
    r->bias = calloc(N, sizeof *r->bias);
    r->alibi = calloc(N, sizeof *r->alibi);
    r->order = malloc(N * sizeof *r->order);
    r->gfirst = malloc(N1 * sizeof *r->gfirst);
    r->gkeys = malloc(N1 * sizeof *r->gkeys);
    r->gcnt = malloc(N1 * sizeof *r->gcnt);
    r->gid = malloc(N * sizeof *r->gid);
    r->C = malloc(N1 * sizeof *r->C);
    r->texp = malloc(N1 * sizeof *r->texp);
    r->Plo = malloc(N * sizeof *r->Plo);
    r->Phi = malloc(N * sizeof *r->Phi);
    r->Ulo = malloc(N * sizeof *r->Ulo);
    r->Uhi = malloc(N * sizeof *r->Uhi);
    r->Uzero = calloc(N, 1);
    if (!r->s || !r->dp || !r->x || !r->bias || !r->alibi || !r->order || !r->gfirst || !r->gkeys || !r->gcnt ||
        !r->gid || !r->C || !r->texp || !r->Plo || !r->Phi || !r->Ulo || !r->Uhi || !r->Uzero)
        return -1; /* row_free releases what was allocated */
    for (size_t k = 0; k < N; k++)
        mpfr_inits2(64, r->s[k], r->dp[k], r->x[k], r->Plo[k], r->Phi[k], r->Ulo[k], r->Uhi[k],
                    (mpfr_ptr)0);
    for (size_t k = 0; k < N1; k++)
        mpfr_inits2(64, r->C[k], r->texp[k], (mpfr_ptr)0);
    mpfr_inits2(64, r->top, r->PSlo, r->PShi, r->Dlo, r->Dhi, (mpfr_ptr)0);
    r->alloc = (int64_t)N;
    if (softcap) {
        r->Slo = malloc(N * sizeof *r->Slo);
        r->Shi = malloc(N * sizeof *r->Shi);
        if (!r->Slo || !r->Shi) {
            free(r->Slo), free(r->Shi);
            r->Slo = r->Shi = NULL;
            return -1;
        }
        for (size_t k = 0; k < N; k++)
            mpfr_inits2(64, r->Slo[k], r->Shi[k], (mpfr_ptr)0);
    }
    return 0;
}

/* Exact dot product of a[0..n) and b[0..n) (binary64 values) into rop. */
static int exact_dot(bw_unit *u, mpfr_ptr rop, const double *a, const double *b, int64_t n)
{
    for (int64_t d = 0; d < n; d++) {
        mpfr_set_prec(u->prod[d], 106);
        mpfr_set_d(u->prod[d], a[d], MPFR_RNDN);
        mpfr_mul_d(u->prod[d], u->prod[d], b[d], MPFR_RNDN); /* exact: 53 + 53 bits */
        u->pp[d] = u->prod[d];
    }
    return smattn__bw_exact_sum(rop, u->pp, (long)n);
}

static int cmp_keys(const bw_row *r, int softcap, int64_t x, int64_t y)
{
    int c = mpfr_cmp(r->s[y], r->s[x]); /* decreasing score */
    if (c || !softcap)
        return c;
    c = (r->bias[y] > r->bias[x]) - (r->bias[y] < r->bias[x]);
    return c ? c : (r->alibi[y] > r->alibi[x]) - (r->alibi[y] < r->alibi[x]);
}

static int sort_keys(bw_row *r, int softcap)
{
    int64_t n = r->n;
    int64_t *tmp = malloc((size_t)(n ? n : 1) * sizeof *tmp);
    if (!tmp)
        return -1;
    for (int64_t k = 0; k < n; k++)
        r->order[k] = k;
    for (int64_t w = 1; w < n; w *= 2) {
        for (int64_t lo = 0; lo < n; lo += 2 * w) {
            int64_t mid = lo + w < n ? lo + w : n, hi = lo + 2 * w < n ? lo + 2 * w : n;
            int64_t i = lo, j = mid, k = lo;
            while (i < mid && j < hi)
                tmp[k++] = cmp_keys(r, softcap, r->order[i], r->order[j]) <= 0 ? r->order[i++]
                                                                               : r->order[j++];
            while (i < mid)
                tmp[k++] = r->order[i++];
            while (j < hi)
                tmp[k++] = r->order[j++];
        }
        memcpy(r->order, tmp, (size_t)n * sizeof *tmp);
    }
    free(tmp);
    return 0;
}

/* Visibility and the row's kind (SPEC 10.2): the conventions, the NaN rows, and whether dS
 * is defined (finite dO, dLSE and visible V). Returns a status. */
static smattn_status row_prepare(bw_unit *u, bw_row *r)
{
    const bw_job *job = u->job;
    const smattn_problem *p = u->p;
    const smattn_inputs *in = job->in;
    const int64_t b = r->b, h = r->h, i = r->i;
    r->kind = RK_SKIP;
    r->dsnan = 0;
    r->n = 0;
    r->has_sink = 0;
    r->sink_bad = 0;
    r->lam = 0;
    int empty = 0, nan = 0;
    if (!smattn__row_stored(p, b, i))
        return SMATTN_OK; /* a packed batch's padding row: no O, no loss term (SPEC 10.1) */
    if (i >= smattn__q_len(p, b)) {
        empty = 1;
    } else {
        int64_t lo, hi;
        smattn__key_range(p, b, i, &lo, &hi);
        for (int64_t j = lo; j < hi; j++) {
            if (!smattn__mask_allows(p, in, b, h, i, j))
                continue;
            if (in->bias.data && ld(&in->bias, b, h, i, j) == -HUGE_VAL)
                continue;
            r->idx[r->n++] = j;
        }
        if (in->sinks.data) {
            double s = smattn_load(in->sinks.data, in->sinks.dtype, h * in->sinks.stride[0]);
            if (isnan(s) || s == HUGE_VAL)
                nan = r->sink_bad = 1;
            else if (s != -HUGE_VAL)
                r->has_sink = 1, r->sink = s;
        }
        empty = !nan && r->n == 0 && !r->has_sink;
    }
    if (empty) {
        u->empty_rows++;
        r->n = 0;
        if (p->empty_rows == SMATTN_EMPTY_NAN) {
            r->kind = RK_EMPTY_NAN;
        } else if (p->empty_rows == SMATTN_EMPTY_MEAN) {
            r->kind = RK_MEAN;
            r->n = smattn__kv_len(p, b);
            for (int64_t c = 0; c < u->Dv; c++) {
                r->dout[c] = smattn__bw_ld_row(p, &job->gin->dout, b, i, h, c);
                r->dcls[c] = (unsigned char)cls_of(r->dout[c]);
            }
        }
        return SMATTN_OK;
    }
    for (int64_t d = 0; d < u->D && !nan && r->n > 0; d++) {
        r->q[d] = smattn__bw_ld_row(p, &in->q, b, i, h, d);
        nan |= !isfinite(r->q[d]);
    }
    for (int64_t jj = 0; jj < r->n && !nan; jj++) {
        int64_t j = r->idx[jj];
        if (in->bias.data) {
            double bj = ld(&in->bias, b, h, i, j); /* as stored: before ALiBi's slope */
            nan |= isnan(bj) || bj == HUGE_VAL;
        }
        for (int64_t d = 0; d < u->D && !nan; d++)
            nan |= !isfinite(smattn__bw_ld_key(p, &in->k, b, j, u->g, d));
    }
    if (nan) {
        r->kind = RK_POISON;
        return SMATTN_OK;
    }
    if (r->n == 0) { /* the sink alone: O = +0 whatever q is; no gradient but dsinks */
        const smattn_tensor *t = &job->gin->dlse;
        if (t->data)
            r->lam = smattn__bw_ld_lse(p, t, b, h, i);
        return SMATTN_OK;
    }
    r->kind = RK_NORMAL;
    /* dO, dLSE and V at the visible keys: a non-finite one leaves dS undefined */
    double lam = 0;
    if (job->gin->dlse.data) {
        lam = smattn__bw_ld_lse(p, &job->gin->dlse, b, h, i);
        r->dsnan |= !isfinite(lam);
    }
    for (int64_t c = 0; c < u->Dv; c++) {
        r->dout[c] = smattn__bw_ld_row(p, &job->gin->dout, b, i, h, c);
        r->dcls[c] = (unsigned char)cls_of(r->dout[c]);
        r->dsnan |= r->dcls[c] != 0;
    }
    r->lam = lam;
    for (int64_t jj = 0; jj < r->n && !r->dsnan; jj++)
        for (int64_t c = 0; c < u->Dv; c++)
            r->dsnan |= !isfinite(smattn__bw_ld_key(p, &in->v, b, r->idx[jj], u->g, c));
    return SMATTN_OK;
}

/* Exact scores and dP, groups of equal scores, the rational-Delta test (SPEC 10.3). */
static smattn_status row_exact(bw_unit *u, bw_row *r)
{
    const bw_job *job = u->job;
    const smattn_problem *p = u->p;
    const smattn_inputs *in = job->in;
    const int64_t b = r->b, h = r->h, i = r->i;
    const double lam = r->lam;
    if (row_alloc_exact(r, u->softcap))
        return SMATTN_ERR_NOMEM;
    r->exact_ready = 1;
    double *buf = malloc((size_t)(u->D > u->Dv ? u->D : u->Dv) * sizeof *buf);
    if (!buf)
        return SMATTN_ERR_NOMEM;
    mpfr_set_prec(u->a, 53);
    mpfr_set_d(u->a, p->scale, MPFR_RNDN);
    for (int64_t jj = 0; jj < r->n; jj++) {
        int64_t j = r->idx[jj];
        for (int64_t d = 0; d < u->D; d++)
            buf[d] = smattn__bw_ld_key(p, &in->k, b, j, u->g, d);
        if (exact_dot(u, u->tmp, r->q, buf, u->D) || smattn__bw_exact_mul(r->s[jj], u->tmp, u->a)) {
            free(buf);
            return SMATTN_ERR_INTERNAL;
        }
        /* the bias, then ALiBi's term (SPEC 2.8): each exact, added exactly */
        const double add[2] = {smattn__bw_bias(p, in, b, h, i, j),
                               smattn__alibi_term(p, b, h, i, j)};
        if (u->softcap) {
            r->bias[jj] = add[0];
            r->alibi[jj] = add[1];
        } else {
            for (int k = 0; k < 2; k++) {
                if (add[k] == 0)
                    continue;
                mpfr_set_prec(u->b2, 53);
                mpfr_set_d(u->b2, add[k], MPFR_RNDN);
                if (smattn__bw_exact_add(u->tmp, r->s[jj], u->b2)) {
                    free(buf);
                    return SMATTN_ERR_INTERNAL;
                }
                mpfr_swap(u->tmp, r->s[jj]);
            }
        }
        for (int64_t c = 0; c < u->Dv; c++)
            buf[c] = smattn__bw_ld_key(p, &in->v, b, j, u->g, c);
        if (!r->dsnan) {
            if (exact_dot(u, r->dp[jj], r->dout, buf, u->Dv)) {
                free(buf);
                return SMATTN_ERR_INTERNAL;
            }
            mpfr_set_prec(u->b2, 53);
            mpfr_set_d(u->b2, lam, MPFR_RNDN);
            if (smattn__bw_exact_add(r->x[jj], r->dp[jj], u->b2)) {
                free(buf);
                return SMATTN_ERR_INTERNAL;
            }
        }
    }
    free(buf);
    /* groups of equal scores (softcap: equal inputs), decreasing */
    if (sort_keys(r, u->softcap))
        return SMATTN_ERR_NOMEM;
    r->G = 0;
    for (int64_t k = 0; k < r->n; k++) {
        if (k == 0 || cmp_keys(r, u->softcap, r->order[k], r->order[k - 1]) != 0) {
            r->gfirst[r->G] = k;
            r->gkeys[r->G] = 0;
            r->G++;
        }
        r->gkeys[r->G - 1]++;
        r->gid[r->order[k]] = r->G - 1;
    }
    for (int64_t a = 0; a < r->G; a++)
        r->gcnt[a] = r->gkeys[a];
    r->sink_group = -1;
    if (r->has_sink) {
        mpfr_set_prec(u->b2, 53);
        mpfr_set_d(u->b2, r->sink, MPFR_RNDN);
        if (!u->softcap)
            for (int64_t a = 0; a < r->G; a++)
                if (mpfr_equal_p(r->s[r->order[r->gfirst[a]]], u->b2))
                    r->sink_group = a;
        if (r->sink_group < 0) {
            r->sink_group = r->G;
            r->gfirst[r->G] = r->n;
            r->gkeys[r->G] = 0;
            r->gcnt[r->G] = 0;
            r->G++;
        }
        r->gcnt[r->sink_group]++;
    }
    /* exact exponents relative to the top (no softcap) */
    if (!u->softcap) {
        mpfr_srcptr t0 = r->s[r->order[0]];
        if (r->has_sink && mpfr_cmp(u->b2, t0) > 0)
            t0 = u->b2;
        mpfr_set_prec(r->top, mpfr_get_prec(t0));
        mpfr_set(r->top, t0, MPFR_RNDN);
        for (int64_t a = 0; a < r->G; a++) {
            mpfr_srcptr v = r->gkeys[a] ? r->s[r->order[r->gfirst[a]]] : u->b2;
            mpfr_set_prec(u->c, mpfr_get_prec(r->top));
            mpfr_neg(u->c, r->top, MPFR_RNDN);
            if (smattn__bw_exact_add(r->texp[a], v, u->c))
                return SMATTN_ERR_INTERNAL;
        }
    }
    /* C_a and the rational-Delta test (SPEC 10.3) */
    r->delta_rat = 0;
    if (!r->dsnan) {
        for (int64_t a = 0; a < r->G; a++) {
            for (int64_t m = 0; m < r->gkeys[a]; m++)
                u->pp[m] = r->dp[r->order[r->gfirst[a] + m]];
            if (smattn__bw_exact_sum(r->C[a], u->pp, (long)r->gkeys[a]))
                return SMATTN_ERR_INTERNAL;
        }
        r->delta_rat = 1;
        for (int64_t a = 1; a < r->G && r->delta_rat; a++) {
            mpfr_set_prec(u->c, mpfr_get_prec(r->C[a]) + 64);
            mpfr_set_prec(u->d, mpfr_get_prec(r->C[0]) + 64);
            mpfr_mul_si(u->c, r->C[a], (long)r->gcnt[0], MPFR_RNDN); /* exact */
            mpfr_mul_si(u->d, r->C[0], (long)r->gcnt[a], MPFR_RNDN);
            r->delta_rat = mpfr_equal_p(u->c, u->d);
        }
    }
    return SMATTN_OK;
}

/* ---- intervals --------------------------------------------------------------------------- */

/* [lo, hi] = [xl, xh] * y for an exact binary64 y, outward. */
static void mul_d_iv(mpfr_ptr lo, mpfr_ptr hi, mpfr_srcptr xl, mpfr_srcptr xh, double y)
{
    if (y >= 0) {
        mpfr_mul_d(lo, xl, y, MPFR_RNDD);
        mpfr_mul_d(hi, xh, y, MPFR_RNDU);
    } else {
        mpfr_mul_d(lo, xh, y, MPFR_RNDD);
        mpfr_mul_d(hi, xl, y, MPFR_RNDU);
    }
}

/* [xl, xh] *= [yl, yh] with yl > 0, outward (in place on x). */
static void mul_pos_iv(mpfr_ptr xl, mpfr_ptr xh, mpfr_srcptr yl, mpfr_srcptr yh)
{
    mpfr_mul(xl, xl, mpfr_sgn(xl) >= 0 ? yl : yh, MPFR_RNDD);
    mpfr_mul(xh, xh, mpfr_sgn(xh) >= 0 ? yh : yl, MPFR_RNDU);
}

/* P_j and dU_j of a normal row as intervals at precision prec (SPEC 10.3). */
static void row_level(bw_unit *u, bw_row *r, mpfr_prec_t prec)
{
    const int64_t G = r->G;
    mpfr_ptr a = u->a, t = u->tmp;
    mpfr_set_prec(a, prec);
    mpfr_set_prec(t, prec);
    if (!u->softcap) {
        for (int64_t k = 0; k < G; k++) {
            mpfr_set_prec(u->El[k], prec);
            mpfr_set_prec(u->Eh[k], prec);
            mpfr_set(a, r->texp[k], MPFR_RNDD);
            mpfr_exp(u->El[k], a, MPFR_RNDD);
            mpfr_set(a, r->texp[k], MPFR_RNDU);
            mpfr_exp(u->Eh[k], a, MPFR_RNDU);
        }
    } else {
        /* values c tanh(s/c) + bias as intervals into tl/th, shifted by the largest upper end */
        double cap = u->p->softcap;
        for (int64_t k = 0; k < G; k++) {
            mpfr_set_prec(u->tl[k], prec);
            mpfr_set_prec(u->th[k], prec);
            if (r->gkeys[k] == 0) {
                mpfr_set_d(u->tl[k], r->sink, MPFR_RNDD);
                mpfr_set_d(u->th[k], r->sink, MPFR_RNDU);
                continue;
            }
            int64_t jj = r->order[r->gfirst[k]];
            mpfr_set_prec(a, prec + 16);
            mpfr_div_d(a, r->s[jj], cap, MPFR_RNDD);
            mpfr_tanh(a, a, MPFR_RNDD);
            mpfr_mul_d(a, a, cap, MPFR_RNDD);
            mpfr_add_d(u->tl[k], a, r->bias[jj], MPFR_RNDD);
            mpfr_add_d(u->tl[k], u->tl[k], r->alibi[jj], MPFR_RNDD);
            mpfr_div_d(a, r->s[jj], cap, MPFR_RNDU);
            mpfr_tanh(a, a, MPFR_RNDU);
            mpfr_mul_d(a, a, cap, MPFR_RNDU);
            mpfr_add_d(u->th[k], a, r->bias[jj], MPFR_RNDU);
            mpfr_add_d(u->th[k], u->th[k], r->alibi[jj], MPFR_RNDU);
        }
        int64_t top = 0;
        for (int64_t k = 1; k < G; k++)
            if (mpfr_cmp(u->th[k], u->th[top]) > 0)
                top = k;
        mpfr_set_prec(u->c, prec);
        mpfr_set(u->c, u->th[top], MPFR_RNDN); /* exact: same precision */
        mpfr_set_prec(a, prec);
        for (int64_t k = 0; k < G; k++) {
            mpfr_set_prec(u->El[k], prec);
            mpfr_set_prec(u->Eh[k], prec);
            mpfr_sub(a, u->tl[k], u->c, MPFR_RNDD);
            mpfr_exp(u->El[k], a, MPFR_RNDD);
            mpfr_sub(a, u->th[k], u->c, MPFR_RNDU);
            mpfr_exp(u->Eh[k], a, MPFR_RNDU);
        }
    }
    /* L and, unless Delta is rational, N = sum C_a E_a, both as intervals */
    mpfr_ptr Ll = u->lo, Lh = u->hi;
    mpfr_set_prec(Ll, prec);
    mpfr_set_prec(Lh, prec);
    for (int pass = 0; pass < 2; pass++) {
        for (int64_t k = 0; k < G; k++) {
            mpfr_set_prec(u->tl[k], prec);
            mpfr_mul_si(u->tl[k], pass ? u->Eh[k] : u->El[k], (long)r->gcnt[k],
                        pass ? MPFR_RNDU : MPFR_RNDD);
            u->pl[k] = u->tl[k];
        }
        mpfr_sum(pass ? Lh : Ll, u->pl, (unsigned long)G, pass ? MPFR_RNDU : MPFR_RNDD);
    }
    mpfr_ptr Dl = u->c, Dh = u->d;
    mpfr_set_prec(Dl, prec);
    mpfr_set_prec(Dh, prec);
    if (!r->dsnan && !r->delta_rat) {
        for (int64_t k = 0; k < G; k++) {
            mpfr_set_prec(u->tl[k], prec);
            mpfr_set_prec(u->th[k], prec);
            if (mpfr_sgn(r->C[k]) >= 0) {
                mpfr_mul(u->tl[k], r->C[k], u->El[k], MPFR_RNDD);
                mpfr_mul(u->th[k], r->C[k], u->Eh[k], MPFR_RNDU);
            } else {
                mpfr_mul(u->tl[k], r->C[k], u->Eh[k], MPFR_RNDD);
                mpfr_mul(u->th[k], r->C[k], u->El[k], MPFR_RNDU);
            }
            u->pl[k] = u->tl[k];
            u->ph[k] = u->th[k];
        }
        mpfr_sum(Dl, u->pl, (unsigned long)G, MPFR_RNDD);
        mpfr_sum(Dh, u->ph, (unsigned long)G, MPFR_RNDU);
        /* Delta = N / L, outward */
        mpfr_div(Dl, Dl, mpfr_sgn(Dl) >= 0 ? Lh : Ll, MPFR_RNDD);
        mpfr_div(Dh, Dh, mpfr_sgn(Dh) >= 0 ? Ll : Lh, MPFR_RNDU);
    }
    /* P per group, then per key; dS = P (x - Delta); dU = dS sech^2(sigma/c) */
    for (int64_t k = 0; k < G; k++) {
        mpfr_div(u->El[k], u->El[k], Lh, MPFR_RNDD);
        mpfr_div(u->Eh[k], u->Eh[k], Ll, MPFR_RNDU);
    }
    if (r->has_sink && !r->dsnan) { /* for dsinks: P of the sink and Delta */
        mpfr_set_prec(r->PSlo, prec);
        mpfr_set_prec(r->PShi, prec);
        mpfr_set(r->PSlo, u->El[r->sink_group], MPFR_RNDD);
        mpfr_set(r->PShi, u->Eh[r->sink_group], MPFR_RNDU);
        mpfr_set_prec(r->Dlo, prec);
        mpfr_set_prec(r->Dhi, prec);
        if (r->delta_rat) {
            mpfr_div_si(r->Dlo, r->C[0], (long)r->gcnt[0], MPFR_RNDD);
            mpfr_div_si(r->Dhi, r->C[0], (long)r->gcnt[0], MPFR_RNDU);
        } else {
            mpfr_set(r->Dlo, Dl, MPFR_RNDD);
            mpfr_set(r->Dhi, Dh, MPFR_RNDU);
        }
    }
    for (int64_t jj = 0; jj < r->n; jj++) {
        int64_t k = r->gid[jj];
        mpfr_set_prec(r->Plo[jj], prec);
        mpfr_set_prec(r->Phi[jj], prec);
        mpfr_set(r->Plo[jj], u->El[k], MPFR_RNDD);
        mpfr_set(r->Phi[jj], u->Eh[k], MPFR_RNDU);
        if (r->dsnan)
            continue;
        mpfr_ptr yl = r->Ulo[jj], yh = r->Uhi[jj];
        mpfr_set_prec(yl, prec);
        mpfr_set_prec(yh, prec);
        r->Uzero[jj] = 0;
        if (r->delta_rat) { /* y = (x gcnt_0 - C_0) / gcnt_0, numerator exact */
            mpfr_set_prec(u->b2, mpfr_get_prec(r->x[jj]) + 64);
            mpfr_mul_si(u->b2, r->x[jj], (long)r->gcnt[0], MPFR_RNDN);
            mpfr_set_prec(t, mpfr_get_prec(r->C[0]));
            mpfr_neg(t, r->C[0], MPFR_RNDN);
            smattn__bw_exact_add(a, u->b2, t); /* a's precision changes: reset below */
            if (mpfr_zero_p(a)) {
                r->Uzero[jj] = 1;
                mpfr_set_zero(yl, 1);
                mpfr_set_zero(yh, 1);
            } else {
                mpfr_div_si(yl, a, (long)r->gcnt[0], MPFR_RNDD);
                mpfr_div_si(yh, a, (long)r->gcnt[0], MPFR_RNDU);
            }
            mpfr_set_prec(a, prec);
            mpfr_set_prec(t, prec);
        } else {
            mpfr_sub(yl, r->x[jj], Dh, MPFR_RNDD);
            mpfr_sub(yh, r->x[jj], Dl, MPFR_RNDU);
        }
        if (r->Uzero[jj])
            continue;
        /* dS = P * y with P in [Plo, Phi], Plo >= 0 */
        mpfr_mul(yl, yl, mpfr_sgn(yl) >= 0 ? r->Plo[jj] : r->Phi[jj], MPFR_RNDD);
        mpfr_mul(yh, yh, mpfr_sgn(yh) >= 0 ? r->Phi[jj] : r->Plo[jj], MPFR_RNDU);
        if (u->softcap) { /* sech^2 is even and decreasing in |sigma/c| */
            mpfr_set_prec(r->Slo[jj], prec);
            mpfr_set_prec(r->Shi[jj], prec);
            mpfr_set(r->Slo[jj], yl, MPFR_RNDN); /* exact: same precision */
            mpfr_set(r->Shi[jj], yh, MPFR_RNDN);
            double cap = u->p->softcap;
            mpfr_ptr hl = u->b2;
            mpfr_set_prec(hl, prec);
            mpfr_set_prec(t, mpfr_get_prec(r->s[jj]));
            mpfr_abs(t, r->s[jj], MPFR_RNDN); /* exact */
            mpfr_set_prec(a, prec);
            mpfr_div_d(a, t, cap, MPFR_RNDU); /* |sigma/c| from above */
            mpfr_sech(hl, a, MPFR_RNDD);
            mpfr_sqr(hl, hl, MPFR_RNDD);
            mpfr_div_d(a, t, cap, MPFR_RNDD);
            mpfr_sech(a, a, MPFR_RNDU);
            mpfr_sqr(a, a, MPFR_RNDU);
            mul_pos_iv(yl, yh, hl, a);
        }
    }
}

/* ---- deciding from an interval ----------------------------------------------------------- */

/* 1 with *bits when every value of [lo, hi] rounds alike and an exact 0 is excluded or
 * known: [0, 0] is an exact zero (+0); hi == 0 < lo could still be an exact zero. */
static int decide_iv(mpfr_srcptr lo, mpfr_srcptr hi, smattn_dtype t, uint64_t *bits, mpfr_ptr tmp)
{
    if (mpfr_zero_p(hi) || mpfr_zero_p(lo)) {
        if (mpfr_zero_p(hi) && mpfr_zero_p(lo)) {
            *bits = 0;
            return 1;
        }
        if (mpfr_zero_p(hi))
            return 0;
    }
    uint64_t x = smattn__ref_round_mpfr(lo, t, tmp);
    if (mpfr_zero_p(lo))
        x = 0; /* [0, hi]: an exact zero and a tiny positive both give +0 */
    uint64_t y = smattn__ref_round_mpfr(hi, t, tmp);
    if (x != y)
        return 0;
    *bits = x;
    return 1;
}

/* [lo, hi] of sum of n term intervals already in tl/th (pl/ph set), times s (exact). */
static void sum_terms(bw_unit *u, int64_t n, double s, mpfr_prec_t prec)
{
    mpfr_set_prec(u->lo, prec);
    mpfr_set_prec(u->hi, prec);
    mpfr_sum(u->lo, u->pl, (unsigned long)n, MPFR_RNDD);
    mpfr_sum(u->hi, u->ph, (unsigned long)n, MPFR_RNDU);
    if (s != 1) {
        mpfr_set_prec(u->a, prec);
        mpfr_set(u->a, u->lo, MPFR_RNDN);
        mul_d_iv(u->lo, u->hi, u->a, u->hi, s);
    }
}

/* ---- the exact path ---------------------------------------------------------------------- */

typedef struct bw_ex {
    bw_poly A, Dn, num, den, t1, t2, t3;
    mpfr_t one, c1, c2;
} bw_ex;

static void ex_init(bw_ex *e)
{
    smattn__bwp_init(&e->A), smattn__bwp_init(&e->Dn), smattn__bwp_init(&e->num);
    smattn__bwp_init(&e->den), smattn__bwp_init(&e->t1), smattn__bwp_init(&e->t2);
    smattn__bwp_init(&e->t3);
    mpfr_inits2(64, e->one, e->c1, e->c2, (mpfr_ptr)0);
    mpfr_set_ui(e->one, 1, MPFR_RNDN);
}

static void ex_clear(bw_ex *e)
{
    smattn__bwp_clear(&e->A), smattn__bwp_clear(&e->Dn), smattn__bwp_clear(&e->num);
    smattn__bwp_clear(&e->den), smattn__bwp_clear(&e->t1), smattn__bwp_clear(&e->t2);
    smattn__bwp_clear(&e->t3);
    mpfr_clears(e->one, e->c1, e->c2, (mpfr_ptr)0);
}

/* out = sum_a w_a e^{texp_a} with w_a = sum over the group's keys of f(key) (or, with
 * counts, gcnt_a). kind: 0 L (counts), 1 N (dP), 2 sum x k_d, 3 sum k_d. */
static int row_poly(bw_unit *u, const bw_row *r, int kind, int64_t d, bw_poly *out, mpfr_ptr w,
                    mpfr_ptr tmp)
{
    smattn__bwp_reset(out);
    for (int64_t a = 0; a < r->G; a++) {
        mpfr_set_prec(w, MPFR_PREC_MIN);
        mpfr_set_zero(w, 1);
        if (kind == 0) {
            mpfr_set_prec(w, 64);
            mpfr_set_si(w, (long)r->gcnt[a], MPFR_RNDN);
        } else if (kind == 1) {
            mpfr_set_prec(w, mpfr_get_prec(r->C[a]));
            mpfr_set(w, r->C[a], MPFR_RNDN);
        } else {
            for (int64_t m = 0; m < r->gkeys[a]; m++) {
                int64_t jj = r->order[r->gfirst[a] + m];
                double k = smattn__bw_ld_key(u->p, &u->job->in->k, r->b, r->idx[jj], u->g, d);
                mpfr_set_prec(u->b2, 53);
                mpfr_set_d(u->b2, k, MPFR_RNDN);
                if (kind == 2) {
                    smattn__bw_exact_mul(u->c, r->x[jj], u->b2);
                    smattn__bw_exact_add(tmp, w, u->c);
                } else {
                    smattn__bw_exact_add(tmp, w, u->b2);
                }
                mpfr_swap(tmp, w);
            }
        }
        if (!mpfr_zero_p(w) && smattn__bwp_push(out, r->texp[a], w))
            return -1;
    }
    return smattn__bwp_normalize(out);
}

/* Accumulated contributions A_k / D_k with distinct D_k (rows of equal denominators share
 * one entry). */
typedef struct bw_acc {
    bw_poly *A, *D;
    int64_t n, cap;
} bw_acc;

static void acc_free(bw_acc *c)
{
    for (int64_t k = 0; k < c->cap; k++)
        smattn__bwp_clear(&c->A[k]), smattn__bwp_clear(&c->D[k]);
    free(c->A), free(c->D);
    memset(c, 0, sizeof *c);
}

/* Add A / D: to the entry with the same D, or a new one. 0 or -1. */
static int acc_add(bw_acc *c, const bw_poly *A, const bw_poly *D, mpfr_srcptr one)
{
    for (int64_t k = 0; k < c->n; k++)
        if (smattn__bwp_equal(&c->D[k], D))
            return smattn__bwp_add_scaled(&c->A[k], A, one) || smattn__bwp_normalize(&c->A[k]);
    if (c->n == c->cap) {
        int64_t cap = c->cap ? 2 * c->cap : 4;
        bw_poly *nA = realloc(c->A, (size_t)cap * sizeof *nA);
        if (!nA)
            return -1;
        c->A = nA;
        bw_poly *nD = realloc(c->D, (size_t)cap * sizeof *nD);
        if (!nD)
            return -1;
        c->D = nD;
        for (int64_t k = c->cap; k < cap; k++)
            smattn__bwp_init(&c->A[k]), smattn__bwp_init(&c->D[k]);
        c->cap = cap;
    }
    smattn__bwp_reset(&c->A[c->n]);
    smattn__bwp_reset(&c->D[c->n]);
    if (smattn__bwp_add_scaled(&c->A[c->n], A, one) || smattn__bwp_add_scaled(&c->D[c->n], D, one))
        return -1;
    c->n++;
    return 0;
}

/* num / den = sum_k A_k / D_k over a common denominator. 0, -1 (memory), -2 (too big). */
static int acc_combine(bw_acc *c, bw_ex *e)
{
    smattn__bwp_reset(&e->num);
    smattn__bwp_reset(&e->den);
    if (c->n == 0) {
        mpfr_set_prec(e->c1, 2);
        mpfr_set_ui(e->c1, 1, MPFR_RNDN);
        mpfr_set_zero(e->c2, 1);
        return smattn__bwp_push(&e->den, e->c2, e->c1);
    }
    if (smattn__bwp_add_scaled(&e->num, &c->A[0], e->one) ||
        smattn__bwp_add_scaled(&e->den, &c->D[0], e->one))
        return -1;
    for (int64_t k = 1; k < c->n; k++) {
        int rc;
        if ((rc = smattn__bwp_mul(&e->t1, &e->num, &c->D[k], BW_TERM_CAP)) ||
            (rc = smattn__bwp_mul(&e->t2, &c->A[k], &e->den, BW_TERM_CAP)) ||
            (rc = smattn__bwp_mul(&e->t3, &e->den, &c->D[k], BW_TERM_CAP)))
            return rc;
        smattn__bwp_reset(&e->num);
        smattn__bwp_reset(&e->den);
        if (smattn__bwp_add_scaled(&e->num, &e->t1, e->one) ||
            smattn__bwp_add_scaled(&e->num, &e->t2, e->one) ||
            smattn__bwp_add_scaled(&e->den, &e->t3, e->one))
            return -1;
    }
    return smattn__bwp_normalize(&e->num) || smattn__bwp_normalize(&e->den) ? -1 : 0;
}

/* The rows' sum sum_k A_k / D_k decided without a common denominator when it has rows of
 * distinct denominators (smattn__bwp_decide_sum): its verdict (1 decided, -1 memory), or 0
 * to go on over one denominator (acc_combine, ex_decide). */
static int acc_decide_sum(bw_unit *u, const bw_acc *c, smattn_dtype t, long maxp, uint64_t *bits)
{
    if (c->n <= 1)
        return 0;
    long pu = 0;
    const int sr = smattn__bwp_decide_sum(c->A, c->D, c->n, t, BW_START_PREC, maxp, bits, &pu);
    if (pu > u->prec_used)
        u->prec_used = pu;
    return sr;
}

/* e->num / e->den decided into *bits after the status rc of building them: 1 decided, 0 not
 * (rc -2, too big: the Ziv loop goes on), -1 memory. */
static int ex_decide(bw_unit *u, bw_ex *e, int rc, smattn_dtype t, long maxp, uint64_t *bits)
{
    if (rc == -2)
        return 0;
    if (rc)
        return -1;
    long pu = 0;
    int rational = 0;
    const int ret =
        smattn__bwp_decide(&e->num, &e->den, t, BW_START_PREC, maxp, bits, &pu, &rational);
    if (pu > u->prec_used)
        u->prec_used = pu;
    return ret;
}

/* The exact path for one element (SPEC 10.3). which: 0 dQ (row, d), 1 dK (key, d), 2 dV (key,
 * c), 3 dBias (row, key position). Returns 1 decided, 0 not (too big: the Ziv loop goes on),
 * -1 memory. */
static int exact_elem(bw_unit *u, int which, int64_t idx, int64_t d, smattn_dtype t, long maxp,
                      uint64_t *bits)
{
    bw_ex e;
    ex_init(&e);
    bw_acc acc;
    memset(&acc, 0, sizeof acc);
    int ret = -1, rc = 0;
    mpfr_t w, tmp, sc;
    mpfr_inits2(64, w, tmp, sc, (mpfr_ptr)0);
    mpfr_set_prec(sc, 53);
    mpfr_set_d(sc, u->p->scale, MPFR_RNDN);
    if (which == 0) {
        const bw_row *r = &u->rows[idx];
        /* dQ_d = scale (Wx L - N Bk) / L^2 */
        bw_poly L, N, Wx, Bk;
        smattn__bwp_init(&L), smattn__bwp_init(&N), smattn__bwp_init(&Wx), smattn__bwp_init(&Bk);
        if (row_poly(u, r, 0, d, &L, w, tmp) || row_poly(u, r, 1, d, &N, w, tmp) ||
            row_poly(u, r, 2, d, &Wx, w, tmp) || row_poly(u, r, 3, d, &Bk, w, tmp))
            rc = -1;
        if (!rc && !(rc = smattn__bwp_mul(&e.t1, &Wx, &L, BW_TERM_CAP)) &&
            !(rc = smattn__bwp_mul(&e.t2, &N, &Bk, BW_TERM_CAP)) &&
            !(rc = smattn__bwp_mul(&e.den, &L, &L, BW_TERM_CAP))) {
            mpfr_set_prec(tmp, 53);
            mpfr_neg(tmp, sc, MPFR_RNDN);
            smattn__bwp_reset(&e.num);
            if (smattn__bwp_add_scaled(&e.num, &e.t1, sc) ||
                smattn__bwp_add_scaled(&e.num, &e.t2, tmp) || smattn__bwp_normalize(&e.num))
                rc = -1;
        }
        smattn__bwp_clear(&L), smattn__bwp_clear(&N), smattn__bwp_clear(&Wx),
            smattn__bwp_clear(&Bk);
    } else {
        bw_poly L, N;
        smattn__bwp_init(&L), smattn__bwp_init(&N);
        /* dK, dV: the rows that see key idx; dBias (which 3): row idx, key position d */
        int64_t m0 = which == 3 ? 0 : u->kstart[idx], m1 = which == 3 ? 1 : u->kstart[idx + 1];
        for (int64_t m = m0; m < m1 && !rc; m++) {
            const bw_row *r = which == 3 ? &u->rows[idx] : &u->rows[u->krow[m]];
            int64_t jj = which == 3 ? d : u->kpos[m];
            smattn__bwp_reset(&e.A);
            smattn__bwp_reset(&e.Dn);
            if (r->kind == RK_MEAN) { /* dV += dO / T_b */
                if (which != 2 || r->dout[d] == 0)
                    continue;
                mpfr_set_zero(w, 1);
                mpfr_set_prec(tmp, 53);
                mpfr_set_d(tmp, r->dout[d], MPFR_RNDN);
                mpfr_set_prec(sc, 64);
                if (smattn__bwp_push(&e.A, w, tmp))
                    rc = -1;
                mpfr_set_si(sc, (long)r->n, MPFR_RNDN);
                if (!rc && smattn__bwp_push(&e.Dn, w, sc))
                    rc = -1;
                mpfr_set_prec(sc, 53);
                mpfr_set_d(sc, u->p->scale, MPFR_RNDN);
            } else {
                double f = which == 1 ? r->q[d] : which == 2 ? r->dout[d] : 1.0;
                if (f == 0 || (which != 2 && r->Uzero[jj]))
                    continue;
                if (row_poly(u, r, 0, 0, &L, w, tmp)) {
                    rc = -1;
                    break;
                }
                int64_t ga = r->gid[jj];
                mpfr_set_prec(tmp, 53);
                mpfr_set_d(tmp, f, MPFR_RNDN);
                if (which == 2) { /* P_j dO_c = dO_c e^{t_a} / L */
                    if (smattn__bwp_push(&e.A, r->texp[ga], tmp) ||
                        smattn__bwp_add_scaled(&e.Dn, &L, e.one))
                        rc = -1;
                } else { /* scale q_d dS_j = scale q_d e^{t_a} (x_j L - N) / L^2; dBias: dS_j */
                    if (which == 3)
                        mpfr_set(w, tmp, MPFR_RNDN); /* 1, exact */
                    else
                        smattn__bw_exact_mul(w, tmp, sc);
                    if (row_poly(u, r, 1, 0, &N, e.c1, e.c2)) {
                        rc = -1;
                        break;
                    }
                    smattn__bwp_reset(&e.t1);
                    mpfr_set_prec(e.c1, mpfr_get_prec(r->x[jj]));
                    mpfr_set(e.c1, r->x[jj], MPFR_RNDN);
                    mpfr_set_prec(e.c2, 2);
                    mpfr_set_si(e.c2, -1, MPFR_RNDN);
                    if (smattn__bwp_add_scaled(&e.t1, &L, e.c1) ||
                        smattn__bwp_add_scaled(&e.t1, &N, e.c2) || smattn__bwp_normalize(&e.t1)) {
                        rc = -1;
                        break;
                    }
                    smattn__bwp_reset(&e.t2);
                    if (smattn__bwp_push(&e.t2, r->texp[ga], w)) {
                        rc = -1;
                        break;
                    }
                    if ((rc = smattn__bwp_mul(&e.A, &e.t2, &e.t1, BW_TERM_CAP)) ||
                        (rc = smattn__bwp_mul(&e.Dn, &L, &L, BW_TERM_CAP)))
                        break;
                }
            }
            if (!rc && (smattn__bwp_normalize(&e.A) || smattn__bwp_normalize(&e.Dn) ||
                        acc_add(&acc, &e.A, &e.Dn, e.one)))
                rc = -1;
        }
        smattn__bwp_clear(&L), smattn__bwp_clear(&N);
        if (!rc && (ret = acc_decide_sum(u, &acc, t, maxp, bits)) != 0)
            goto out;
        if (!rc)
            rc = acc_combine(&acc, &e);
    }
    ret = ex_decide(u, &e, rc, t, maxp, bits);
out:
    mpfr_clears(w, tmp, sc, (mpfr_ptr)0);
    acc_free(&acc);
    ex_clear(&e);
    return ret;
}

/* ---- a unit: one KV head of one batch ---------------------------------------------------- */

static void unit_free(bw_unit *u)
{
    if (u->rows)
        for (int64_t r = 0; r < u->R; r++)
            row_free(&u->rows[r]);
    free(u->rows);
    free(u->kstart), free(u->krow), free(u->kpos), free(u->kpoison), free(u->knan);
    free(u->vcls), free(u->qbits), free(u->kbits), free(u->vbits), free(u->qdone);
    free(u->kdone), free(u->vdone), free(u->tried), free(u->bbits), free(u->bdone);
    if (u->tl)
        for (int64_t k = 0; k < u->ncap; k++)
            mpfr_clears(u->tl[k], u->th[k], (mpfr_ptr)0);
    if (u->El)
        for (int64_t k = 0; k < u->T + 1; k++)
            mpfr_clears(u->El[k], u->Eh[k], (mpfr_ptr)0);
    if (u->prod)
        for (int64_t k = 0; k < (u->D > u->Dv ? u->D : u->Dv); k++)
            mpfr_clear(u->prod[k]);
    free(u->tl), free(u->th), free(u->pl), free(u->ph), free(u->El), free(u->Eh);
    free(u->prod), free(u->pp);
    mpfr_clears(u->a, u->b2, u->c, u->d, u->lo, u->hi, u->tmp, (mpfr_ptr)0);
}

/* The rows the later phases must evaluate: an undecided dQ, or a key with an undecided
 * gradient (then every row that sees the key). */
static void mark_needed(bw_unit *u)
{
    const int64_t D = u->D, Dv = u->Dv;
    for (int64_t r = 0; r < u->R; r++) {
        bw_row *row = &u->rows[r];
        row->needed = 0;
        if (row->kind != RK_NORMAL)
            continue;
        for (int64_t d = 0; d < D && !row->needed; d++)
            row->needed = !u->qdone[r * D + d];
        for (int64_t jj = 0; jj < row->n && !row->needed; jj++) {
            int64_t j = row->idx[jj];
            for (int64_t d = 0; d < D && !row->needed; d++)
                row->needed = !u->kdone[j * D + d];
            for (int64_t c = 0; c < Dv && !row->needed; c++)
                row->needed = !u->vdone[j * Dv + c];
            if (u->want_bias && !row->needed)
                row->needed = !u->bdone[r * u->T + j];
        }
    }
}

static smattn_status unit_run(bw_unit *u, long max_prec)
{
    const bw_job *job = u->job;
    const smattn_problem *p = u->p;
    const smattn_grad_outputs *go = job->gout;
    const int64_t R = u->R, T = u->T, D = u->D, Dv = u->Dv;
    smattn_status st = SMATTN_OK;
    u->rows = calloc((size_t)R, sizeof *u->rows);
    if (!u->rows)
        return SMATTN_ERR_NOMEM;
    for (int64_t r = 0; r < R; r++) {
        bw_row *row = &u->rows[r];
        if (row_alloc(row, T, D, Dv))
            return SMATTN_ERR_NOMEM;
        row->b = u->b;
        row->h = u->g * u->gs + r / p->S;
        row->i = r % p->S;
        if ((st = row_prepare(u, row)))
            return st;
        if (row->kind == RK_NORMAL && row_alloc_fast(row))
            return SMATTN_ERR_NOMEM;
    }
    /* contributions per key */
    u->kstart = calloc((size_t)T + 1, sizeof *u->kstart);
    u->kpoison = calloc((size_t)T, 1);
    u->knan = calloc((size_t)T, 1);
    u->vcls = calloc((size_t)(T * Dv), 1);
    u->qbits = calloc((size_t)(R * D), sizeof *u->qbits);
    u->qdone = calloc((size_t)(R * D), 1);
    u->kbits = calloc((size_t)(T * D), sizeof *u->kbits);
    u->kdone = calloc((size_t)(T * D), 1);
    u->vbits = calloc((size_t)(T * Dv), sizeof *u->vbits);
    u->vdone = calloc((size_t)(T * Dv), 1);
    u->tried = calloc((size_t)(R * D + T * D + T * Dv + (u->want_bias ? R * T : 0)), 1);
    if (u->want_bias) {
        u->bbits = calloc((size_t)(R * T), sizeof *u->bbits);
        u->bdone = malloc((size_t)(R * T));
        if (!u->bbits || !u->bdone)
            return SMATTN_ERR_NOMEM;
        memset(u->bdone, 1, (size_t)(R * T)); /* +0 unless a rule below says otherwise */
    }
    if (!u->kstart || !u->kpoison || !u->knan || !u->vcls || !u->qbits || !u->qdone || !u->kbits ||
        !u->kdone || !u->vbits || !u->vdone || !u->tried)
        return SMATTN_ERR_NOMEM;
    int64_t total = 0;
    for (int64_t r = 0; r < R; r++) {
        bw_row *row = &u->rows[r];
        if (row->kind == RK_NORMAL)
            for (int64_t jj = 0; jj < row->n; jj++)
                u->kstart[row->idx[jj] + 1]++, total++;
        else if (row->kind == RK_MEAN)
            for (int64_t j = 0; j < row->n; j++)
                u->kstart[j + 1]++, total++;
    }
    for (int64_t j = 0; j < T; j++)
        u->kstart[j + 1] += u->kstart[j];
    u->krow = malloc((size_t)(total ? total : 1) * sizeof *u->krow);
    u->kpos = malloc((size_t)(total ? total : 1) * sizeof *u->kpos);
    int64_t *fill = malloc((size_t)(T ? T : 1) * sizeof *fill);
    if (!u->krow || !u->kpos || !fill) {
        free(fill);
        return SMATTN_ERR_NOMEM;
    }
    memcpy(fill, u->kstart, (size_t)T * sizeof *fill);
    int64_t maxk = 0;
    for (int64_t r = 0; r < R; r++) {
        bw_row *row = &u->rows[r];
        int64_t nn = row->kind == RK_NORMAL || row->kind == RK_MEAN ? row->n : 0;
        for (int64_t jj = 0; jj < nn; jj++) {
            int64_t j = row->kind == RK_NORMAL ? row->idx[jj] : jj;
            u->krow[fill[j]] = r;
            u->kpos[fill[j]++] = row->kind == RK_NORMAL ? jj : -1;
            for (int64_t c = 0; c < Dv; c++)
                u->vcls[j * Dv + c] |= row->dcls[c];
            if (row->kind == RK_NORMAL && row->dsnan)
                u->knan[j] = 1;
        }
        if (row->kind == RK_POISON)
            for (int64_t jj = 0; jj < row->n; jj++)
                u->kpoison[row->idx[jj]] = 1;
        if (row->kind == RK_EMPTY_NAN)
            for (int64_t j = 0; j < T; j++)
                u->kpoison[j] = 1;
        /* dQ of rows that are not computed */
        int qnan = row->kind == RK_POISON || row->kind == RK_EMPTY_NAN ||
                   (row->kind == RK_NORMAL && row->dsnan);
        if (row->kind != RK_NORMAL || row->dsnan)
            for (int64_t d = 0; d < D; d++) {
                u->qdone[r * D + d] = 1;
                u->qbits[r * D + d] = qnan ? smattn__ref_nan_bits(go->dq.dtype) : 0;
            }
    }
    free(fill);
    for (int64_t r = 0; r < R && u->want_bias; r++) { /* dBias (SPEC 10.2) */
        const bw_row *row = &u->rows[r];
        uint64_t nanb = smattn__ref_nan_bits(go->dbias.dtype);
        if (row->kind == RK_EMPTY_NAN)
            for (int64_t j = 0; j < T; j++)
                u->bbits[r * T + j] = nanb;
        if (row->kind == RK_POISON || (row->kind == RK_NORMAL && row->dsnan))
            for (int64_t jj = 0; jj < row->n; jj++)
                u->bbits[r * T + row->idx[jj]] = nanb;
        if (row->kind == RK_NORMAL && !row->dsnan)
            for (int64_t jj = 0; jj < row->n; jj++)
                u->bdone[r * T + row->idx[jj]] = 0;
    }
    for (int64_t j = 0; j < T; j++) {
        if (u->kstart[j + 1] - u->kstart[j] > maxk)
            maxk = u->kstart[j + 1] - u->kstart[j];
        for (int64_t d = 0; d < D; d++)
            if (u->kpoison[j] || u->knan[j]) {
                u->kdone[j * D + d] = 1;
                u->kbits[j * D + d] = smattn__ref_nan_bits(go->dk.dtype);
            }
        for (int64_t c = 0; c < Dv; c++)
            if (u->kpoison[j] || u->vcls[j * Dv + c]) {
                u->vdone[j * Dv + c] = 1;
                u->vbits[j * Dv + c] = u->kpoison[j] ? smattn__ref_nan_bits(go->dv.dtype)
                                                     : cls_bits(u->vcls[j * Dv + c], go->dv.dtype);
            }
    }
    /* term scratch: a row's keys or a key's rows */
    u->ncap = (T > maxk ? T : maxk) + 1;
    u->tl = malloc((size_t)u->ncap * sizeof *u->tl);
    u->th = malloc((size_t)u->ncap * sizeof *u->th);
    u->pl = malloc((size_t)u->ncap * sizeof *u->pl);
    u->ph = malloc((size_t)u->ncap * sizeof *u->ph);
    if (!u->tl || !u->th || !u->pl || !u->ph) {
        free(u->tl), free(u->th);
        u->tl = u->th = NULL;
        return SMATTN_ERR_NOMEM;
    }
    for (int64_t k = 0; k < u->ncap; k++)
        mpfr_inits2(64, u->tl[k], u->th[k], (mpfr_ptr)0);

    /* the binary64 phase, then the rows the MPFR phase needs: an undecided dQ, or a key
     * with an undecided gradient (every row that sees such a key) */
    if (!job->cfg->no_fast_phase && !u->softcap && smattn__bw_fast_unit(u))
        return SMATTN_ERR_NOMEM;
    mark_needed(u);
    if (!job->cfg->no_fast_phase && !u->softcap) {
        if (smattn__bw_dd_unit(u))
            return SMATTN_ERR_NOMEM;
        mark_needed(u);
    }
    for (int64_t r = 0; r < R; r++)
        if (u->rows[r].needed && (st = row_exact(u, &u->rows[r])))
            return st;
    /* the Ziv loop (SPEC 10.3), over what the fast tiers left */
    int all = 1, level = 0;
    for (int64_t e = 0; e < R * D && all; e++)
        all = u->qdone[e];
    for (int64_t e = 0; e < T * D && all; e++)
        all = u->kdone[e];
    for (int64_t e = 0; e < T * Dv && all; e++)
        all = u->vdone[e];
    for (int64_t e = 0; u->want_bias && e < R * T && all; e++)
        all = u->bdone[e];
    for (mpfr_prec_t prec = job->cfg->fixed_prec > 0 ? job->cfg->fixed_prec : BW_START_PREC;
         !all && prec <= max_prec; prec *= 2, level++) {
        if (u->prec_used < prec)
            u->prec_used = prec;
        for (int64_t r = 0; r < R; r++)
            if (u->rows[r].kind == RK_NORMAL && u->rows[r].needed)
                row_level(u, &u->rows[r], prec);
        all = 1;
        int exact_now = level >= BW_EXACT_AFTER && !u->softcap;
        /* dQ */
        for (int64_t r = 0; r < R; r++) {
            bw_row *row = &u->rows[r];
            for (int64_t d = 0; d < D; d++) {
                int64_t e = r * D + d;
                if (u->qdone[e])
                    continue;
                for (int64_t jj = 0; jj < row->n; jj++) {
                    double k = smattn__bw_ld_key(p, &job->in->k, u->b, row->idx[jj], u->g, d);
                    mpfr_set_prec(u->tl[jj], prec);
                    mpfr_set_prec(u->th[jj], prec);
                    if (row->Uzero[jj])
                        mpfr_set_zero(u->tl[jj], 1), mpfr_set_zero(u->th[jj], 1);
                    else
                        mul_d_iv(u->tl[jj], u->th[jj], row->Ulo[jj], row->Uhi[jj], k);
                    u->pl[jj] = u->tl[jj];
                    u->ph[jj] = u->th[jj];
                }
                sum_terms(u, row->n, p->scale, prec);
                u->qdone[e] =
                    (unsigned char)decide_iv(u->lo, u->hi, go->dq.dtype, &u->qbits[e], u->tmp);
                if (!u->qdone[e] && exact_now && !u->tried[e]) {
                    u->tried[e] = 1;
                    int rc = exact_elem(u, 0, r, d, go->dq.dtype, max_prec, &u->qbits[e]);
                    if (rc < 0)
                        return SMATTN_ERR_NOMEM;
                    u->qdone[e] = (unsigned char)rc;
                    u->exact_elems += rc;
                }
                all &= u->qdone[e];
            }
        }
        /* dK and dV */
        for (int which = 1; which <= 2; which++) {
            int64_t W = which == 1 ? D : Dv;
            unsigned char *done = which == 1 ? u->kdone : u->vdone;
            uint64_t *bits = which == 1 ? u->kbits : u->vbits;
            smattn_dtype dt = which == 1 ? go->dk.dtype : go->dv.dtype;
            for (int64_t j = 0; j < T; j++)
                for (int64_t d = 0; d < W; d++) {
                    int64_t e = j * W + d;
                    if (done[e])
                        continue;
                    int64_t nt = 0;
                    for (int64_t m = u->kstart[j]; m < u->kstart[j + 1]; m++) {
                        const bw_row *row = &u->rows[u->krow[m]];
                        int64_t jj = u->kpos[m];
                        mpfr_set_prec(u->tl[nt], prec);
                        mpfr_set_prec(u->th[nt], prec);
                        if (row->kind == RK_MEAN) {
                            if (which == 1)
                                continue;
                            mpfr_set_d(u->tl[nt], row->dout[d], MPFR_RNDN);
                            mpfr_set_d(u->th[nt], row->dout[d], MPFR_RNDN);
                            mpfr_div_si(u->tl[nt], u->tl[nt], (long)row->n, MPFR_RNDD);
                            mpfr_div_si(u->th[nt], u->th[nt], (long)row->n, MPFR_RNDU);
                        } else if (which == 1) {
                            if (row->Uzero[jj])
                                continue;
                            mul_d_iv(u->tl[nt], u->th[nt], row->Ulo[jj], row->Uhi[jj], row->q[d]);
                        } else {
                            mul_d_iv(u->tl[nt], u->th[nt], row->Plo[jj], row->Phi[jj],
                                     row->dout[d]);
                        }
                        u->pl[nt] = u->tl[nt];
                        u->ph[nt] = u->th[nt];
                        nt++;
                    }
                    sum_terms(u, nt, which == 1 ? p->scale : 1.0, prec);
                    done[e] = (unsigned char)decide_iv(u->lo, u->hi, dt, &bits[e], u->tmp);
                    int64_t te = R * D + (which == 1 ? 0 : T * D) + e;
                    if (!done[e] && exact_now && !u->tried[te]) {
                        u->tried[te] = 1;
                        int rc = exact_elem(u, which, j, d, dt, max_prec, &bits[e]);
                        if (rc < 0)
                            return SMATTN_ERR_NOMEM;
                        done[e] = (unsigned char)rc;
                        u->exact_elems += rc;
                    }
                    all &= done[e];
                }
        }
        /* dBias: dS_j of each row and visible key */
        for (int64_t r = 0; r < R && u->want_bias; r++) {
            bw_row *row = &u->rows[r];
            if (row->kind != RK_NORMAL || !row->needed || row->dsnan)
                continue;
            for (int64_t jj = 0; jj < row->n; jj++) {
                int64_t e = r * T + row->idx[jj];
                if (u->bdone[e])
                    continue;
                if (row->Uzero[jj]) {
                    u->bbits[e] = 0;
                    u->bdone[e] = 1;
                    continue;
                }
                mpfr_srcptr lo = u->softcap ? row->Slo[jj] : row->Ulo[jj];
                mpfr_srcptr hi = u->softcap ? row->Shi[jj] : row->Uhi[jj];
                u->bdone[e] =
                    (unsigned char)decide_iv(lo, hi, go->dbias.dtype, &u->bbits[e], u->tmp);
                int64_t te = R * D + T * D + T * Dv + e;
                if (!u->bdone[e] && exact_now && !u->tried[te]) {
                    u->tried[te] = 1;
                    int rc = exact_elem(u, 3, r, jj, go->dbias.dtype, max_prec, &u->bbits[e]);
                    if (rc < 0)
                        return SMATTN_ERR_NOMEM;
                    u->bdone[e] = (unsigned char)rc;
                    u->exact_elems += rc;
                }
                all &= u->bdone[e];
            }
        }
        if (all)
            break;
    }
    if (!all)
        return SMATTN_ERR_PRECISION;
    /* write: every element of the unit that has storage (SPEC 10.1: dQ through Q's rows,
     * dK and dV through K's and V's keys t < T_b; a layout's other storage was zeroed) */
    for (int64_t r = 0; r < R; r++) {
        const bw_row *row = &u->rows[r];
        if (!smattn__row_stored(p, u->b, row->i))
            continue;
        for (int64_t d = 0; d < D; d++)
            smattn__store_bits(go->dq.data, go->dq.dtype,
                               smattn__row_off(p, go->dq.stride, u->b, row->i, row->h, d),
                               u->qbits[r * D + d]);
    }
    for (int64_t r = 0; r < R && u->want_bias; r++) {
        const bw_row *row = &u->rows[r];
        for (int64_t j = 0; j < T; j++)
            smattn__store_bits(go->dbias.data, go->dbias.dtype,
                               smattn__off4(go->dbias.stride, u->b, row->h, row->i, j),
                               u->bbits[r * T + j]);
    }
    const int64_t Tw = p->layout ? smattn__kv_len(p, u->b) : T; /* keys with storage */
    for (int64_t j = 0; j < Tw; j++) {
        for (int64_t d = 0; d < D; d++)
            smattn__store_bits(go->dk.data, go->dk.dtype,
                               smattn__key_off(p, go->dk.stride, u->b, j, u->g, d),
                               u->kbits[j * D + d]);
        for (int64_t c = 0; c < Dv; c++)
            smattn__store_bits(go->dv.data, go->dv.dtype,
                               smattn__key_off(p, go->dv.stride, u->b, j, u->g, c),
                               u->vbits[j * Dv + c]);
    }
    return SMATTN_OK;
}

/* ---- dsinks: one unit per query head, its rows over every batch (SPEC 10.1) -------------- */

enum { SK_NONE, SK_NAN, SK_LAMBDA, SK_ROW };

/* What row r adds to dsink_h (SPEC 10.2): nothing, NaN, its dLSE (the sink alone), or
 * P_sink (dLSE - Delta). */
static int sink_term(const bw_row *r)
{
    if (r->sink_bad)
        return SK_NAN;
    if (!r->has_sink)
        return SK_NONE;
    if (r->kind == RK_POISON || (r->kind == RK_NORMAL && r->dsnan))
        return SK_NAN;
    return r->kind == RK_NORMAL ? SK_ROW : SK_LAMBDA;
}

/* The exact expansion of dsink_h (SPEC 10.3 item 5): the sink alone adds lambda / 1, a row
 * e^{t_sink} (lambda L - N) / L^2. 1 decided, 0 not, -1 memory. */
static int exact_sink(bw_unit *u, const unsigned char *kind, smattn_dtype t, long maxp,
                      uint64_t *bits)
{
    bw_ex e;
    ex_init(&e);
    bw_acc acc;
    memset(&acc, 0, sizeof acc);
    bw_poly L, N;
    smattn__bwp_init(&L), smattn__bwp_init(&N);
    mpfr_t w, tmp, zero;
    mpfr_inits2(64, w, tmp, zero, (mpfr_ptr)0);
    mpfr_set_zero(zero, 1);
    int rc = 0, ret = -1;
    for (int64_t r = 0; r < u->R && !rc; r++) {
        const bw_row *row = &u->rows[r];
        if (kind[r] != SK_LAMBDA && kind[r] != SK_ROW)
            continue;
        if (row->lam == 0 && kind[r] == SK_LAMBDA)
            continue;
        smattn__bwp_reset(&e.A);
        smattn__bwp_reset(&e.Dn);
        mpfr_set_prec(tmp, 53);
        mpfr_set_d(tmp, row->lam, MPFR_RNDN);
        if (kind[r] == SK_LAMBDA) {
            if (smattn__bwp_push(&e.A, zero, tmp) || smattn__bwp_push(&e.Dn, zero, e.one))
                rc = -1;
        } else {
            if (row_poly(u, row, 0, 0, &L, w, e.c2) || row_poly(u, row, 1, 0, &N, w, e.c2)) {
                rc = -1;
                break;
            }
            smattn__bwp_reset(&e.t1);
            mpfr_set_prec(e.c2, 2);
            mpfr_set_si(e.c2, -1, MPFR_RNDN);
            if (smattn__bwp_add_scaled(&e.t1, &L, tmp) || smattn__bwp_add_scaled(&e.t1, &N, e.c2) ||
                smattn__bwp_normalize(&e.t1)) {
                rc = -1;
                break;
            }
            smattn__bwp_reset(&e.t2);
            if (smattn__bwp_push(&e.t2, row->texp[row->sink_group], e.one)) {
                rc = -1;
                break;
            }
            if ((rc = smattn__bwp_mul(&e.A, &e.t2, &e.t1, BW_TERM_CAP)) ||
                (rc = smattn__bwp_mul(&e.Dn, &L, &L, BW_TERM_CAP)))
                break;
        }
        if (!rc && (smattn__bwp_normalize(&e.A) || smattn__bwp_normalize(&e.Dn) ||
                    acc_add(&acc, &e.A, &e.Dn, e.one)))
            rc = -1;
    }
    if (!rc && (ret = acc_decide_sum(u, &acc, t, maxp, bits)) != 0)
        goto out;
    if (!rc)
        rc = acc_combine(&acc, &e);
    ret = ex_decide(u, &e, rc, t, maxp, bits);
out:
    smattn__bwp_clear(&L), smattn__bwp_clear(&N);
    mpfr_clears(w, tmp, zero, (mpfr_ptr)0);
    acc_free(&acc);
    ex_clear(&e);
    return ret;
}

static smattn_status sink_run(bw_unit *u, int64_t h, long max_prec)
{
    const bw_job *job = u->job;
    const smattn_problem *p = u->p;
    const smattn_out_tensor *out = &job->gout->dsinks;
    const int64_t R = u->R, S = p->S;
    const int fast = !job->cfg->no_fast_phase && !u->softcap;
    smattn_status st = SMATTN_OK;
    unsigned char *kind = calloc((size_t)R, 1);
    u->rows = calloc((size_t)R, sizeof *u->rows);
    if (!kind || !u->rows) {
        free(kind);
        return SMATTN_ERR_NOMEM;
    }
    int cls = 0, any = 0;
    for (int64_t r = 0; r < R; r++) {
        bw_row *row = &u->rows[r];
        if (row_alloc(row, u->T, u->D, u->Dv)) {
            free(kind);
            return SMATTN_ERR_NOMEM;
        }
        row->b = r / S;
        row->h = h;
        row->i = r % S;
        if ((st = row_prepare(u, row)) || (row->kind == RK_NORMAL && row_alloc_fast(row))) {
            free(kind);
            return st ? st : SMATTN_ERR_NOMEM;
        }
        kind[r] = (unsigned char)sink_term(row);
        if (kind[r] == SK_NAN)
            cls |= CL_NAN;
        if (kind[r] == SK_LAMBDA && !isfinite(row->lam))
            cls |= isnan(row->lam) ? CL_NAN : row->lam > 0 ? CL_POS : CL_NEG;
        any |= kind[r] == SK_ROW || (kind[r] == SK_LAMBDA && row->lam != 0);
    }
    uint64_t bits = 0;
    int done = cls || !any; /* a class, or nothing but exact zeros: +0 */
    if (cls)
        bits = cls_bits(cls, out->dtype);
    /* binary64 tier */
    for (int64_t b = 0; fast && !done && b < p->B; b++)
        if (smattn__bw_fast_rows(u, b, &u->rows[b * S], S)) {
            free(kind);
            return SMATTN_ERR_NOMEM;
        }
    if (fast && !done) {
        double v = 0, Rr = 0, A = 0;
        int ok = 1;
        for (int64_t r = 0; r < R && ok; r++) {
            const bw_row *row = &u->rows[r];
            double t, rt;
            if (kind[r] == SK_LAMBDA) {
                t = row->lam, rt = 0;
            } else if (kind[r] == SK_ROW) {
                ok = !row->fast_bad;
                double y = row->lam - row->fD;
                double ry = (row->fDr + 0x1p-52 * fabs(y) + 0x1p-1074) * (1 + 0x1p-40);
                t = row->fPs * y;
                rt = row->fPs * ry + fabs(y) * row->fPsr + row->fPsr * ry + 0x1p-52 * fabs(t) +
                     0x1p-1074;
            } else {
                continue;
            }
            v += t, A += fabs(t), Rr += rt;
        }
        if (ok) {
            double g = (double)(R + 1) * 0x1p-53 / (1 - (double)(R + 1) * 0x1p-53);
            double bound = (Rr * (1 + 0x1p-40) + g * A) * (1 + 2 * g) * (1 + 0x1p-40) + 0x1p-1074;
            double lo = nextafter(v - bound, -HUGE_VAL), hi = nextafter(v + bound, HUGE_VAL);
            if (isfinite(v) && isfinite(bound) && (lo > 0 || hi < 0)) {
                uint64_t x = smattn__round_bits(lo, out->dtype),
                         y = smattn__round_bits(hi, out->dtype);
                if (x == y)
                    bits = x, done = 1, u->fast_elems++;
            }
        }
    }
    /* double-double tier */
    if (fast && !done) {
        for (int64_t r = 0; r < R; r++)
            u->rows[r].needed = kind[r] == SK_ROW;
        if (smattn__bw_dd_rows(u, u->rows, R)) {
            free(kind);
            return SMATTN_ERR_NOMEM;
        }
        dd v = {0, 0};
        double Rr = 0, A = 0;
        int ok = 1;
        for (int64_t r = 0; r < R && ok; r++) {
            const bw_row *row = &u->rows[r];
            dd t;
            double rt;
            if (kind[r] == SK_LAMBDA) {
                t = (dd){row->lam, 0}, rt = 0;
            } else if (kind[r] == SK_ROW) {
                ok = row->dd_ok;
                if (!ok)
                    break;
                dd y = dd_add((dd){row->lam, 0}, (dd){-row->gD[0], -row->gD[1]});
                double ry =
                    (row->gD[2] + 8 * 0x1p-106 * (fabs(row->lam) + fabs(row->gD[0])) + 0x1p-1000) *
                    1.01;
                dd P = {row->gPs[0], row->gPs[1]};
                double pd = fabs(P.hi) * 1.01, yd = fabs(y.hi) * 1.01;
                /* the product of two double-doubles: 16 u^2 (ref/backward_fast.c) */
                dd pr = dd_two_prod(P.hi, y.hi);
                t = dd_fast_two_sum(pr.hi, pr.lo + (P.hi * y.lo + P.lo * y.hi + P.lo * y.lo));
                rt = (pd * ry + yd * row->gPs[2] + row->gPs[2] * ry + 16 * 0x1p-106 * fabs(t.hi) +
                      0x1p-1000) *
                     1.01;
            } else {
                continue;
            }
            v = dd_add(v, t);
            Rr += rt, A += fabs(t.hi);
        }
        if (ok) {
            double bound = (Rr + (double)(R + 1) * 8 * 0x1p-106 * A) * 1.01 * (1 + 0x1p-40);
            done = smattn__ref_decide_dd(v.hi, v.lo, bound, out->dtype, &bits);
            u->fast_elems += done;
        }
    }
    /* MPFR: intervals, then the exact expansion */
    for (int64_t r = 0; r < R && !done; r++)
        if (kind[r] == SK_ROW && (st = row_exact(u, &u->rows[r]))) {
            free(kind);
            return st;
        }
    int level = 0;
    for (mpfr_prec_t prec = job->cfg->fixed_prec > 0 ? job->cfg->fixed_prec : BW_START_PREC;
         !done && prec <= max_prec; prec *= 2, level++) {
        if (u->prec_used < prec)
            u->prec_used = prec;
        for (int64_t r = 0; r < R; r++) /* row_level borrows tl, th: all rows first */
            if (kind[r] == SK_ROW)
                row_level(u, &u->rows[r], prec);
        int64_t nt = 0;
        for (int64_t r = 0; r < R; r++) {
            bw_row *row = &u->rows[r];
            if (kind[r] != SK_LAMBDA && kind[r] != SK_ROW)
                continue;
            mpfr_set_prec(u->tl[nt], prec);
            mpfr_set_prec(u->th[nt], prec);
            if (kind[r] == SK_LAMBDA) {
                mpfr_set_d(u->tl[nt], row->lam, MPFR_RNDD);
                mpfr_set_d(u->th[nt], row->lam, MPFR_RNDU);
            } else {
                mpfr_d_sub(u->tl[nt], row->lam, row->Dhi, MPFR_RNDD);
                mpfr_d_sub(u->th[nt], row->lam, row->Dlo, MPFR_RNDU);
                mul_pos_iv(u->tl[nt], u->th[nt], row->PSlo, row->PShi);
            }
            u->pl[nt] = u->tl[nt];
            u->ph[nt] = u->th[nt];
            nt++;
        }
        sum_terms(u, nt, 1.0, prec);
        done = decide_iv(u->lo, u->hi, out->dtype, &bits, u->tmp);
        if (!done && level >= BW_EXACT_AFTER && !u->softcap) {
            int rc = exact_sink(u, kind, out->dtype, max_prec, &bits);
            if (rc < 0) {
                free(kind);
                return SMATTN_ERR_NOMEM;
            }
            done = rc;
            u->exact_elems += rc;
            if (!done) /* too big for an expansion: the intervals go on */
                continue;
        }
    }
    free(kind);
    if (!done)
        return SMATTN_ERR_PRECISION;
    smattn__store_bits(out->data, out->dtype, h * out->stride[0], bits);
    return SMATTN_OK;
}

/* ---- dBias summed over a broadcast bias's dimensions (SPEC 10.1) ------------------------ */

/* The exact expansion of one summed dBias element: each row's terms over its keys of the
 * element, sum_j e^{t_a(j)} (x_j L - N), over the row's L^2; the rows' ratios by
 * smattn__bwp_decide_sum, else over one denominator. 1 decided, 0 not, -1 memory. */
static int exact_bias_sum(bw_unit *u, const int64_t *tr, const int64_t *tj, int64_t nt,
                          smattn_dtype t, long maxp, uint64_t *bits)
{
    bw_ex e;
    ex_init(&e);
    bw_acc acc;
    memset(&acc, 0, sizeof acc);
    bw_poly L, N, Ar;
    smattn__bwp_init(&L), smattn__bwp_init(&N), smattn__bwp_init(&Ar);
    mpfr_t w, tmp;
    mpfr_inits2(64, w, tmp, (mpfr_ptr)0);
    int rc = 0, ret = -1;
    for (int64_t m = 0; m < nt && !rc;) {
        const bw_row *row = &u->rows[tr[m]];
        if (row_poly(u, row, 0, 0, &L, w, tmp) || row_poly(u, row, 1, 0, &N, w, tmp)) {
            rc = -1;
            break;
        }
        smattn__bwp_reset(&Ar);
        int64_t m1 = m;
        for (; m1 < nt && tr[m1] == tr[m] && !rc; m1++) { /* the row's keys of the element */
            int64_t jj = tj[m1];
            if (row->Uzero[jj])
                continue;
            smattn__bwp_reset(&e.t1);
            mpfr_set_prec(e.c1, mpfr_get_prec(row->x[jj]));
            mpfr_set(e.c1, row->x[jj], MPFR_RNDN);
            mpfr_set_prec(e.c2, 2);
            mpfr_set_si(e.c2, -1, MPFR_RNDN);
            smattn__bwp_reset(&e.t2);
            if (smattn__bwp_add_scaled(&e.t1, &L, e.c1) ||
                smattn__bwp_add_scaled(&e.t1, &N, e.c2) || smattn__bwp_normalize(&e.t1) ||
                smattn__bwp_push(&e.t2, row->texp[row->gid[jj]], e.one))
                rc = -1;
            else if (!(rc = smattn__bwp_mul(&e.A, &e.t2, &e.t1, BW_TERM_CAP)) &&
                     smattn__bwp_add_scaled(&Ar, &e.A, e.one))
                rc = -1;
        }
        m = m1;
        if (!rc &&
            (smattn__bwp_normalize(&Ar) || (rc = smattn__bwp_mul(&e.Dn, &L, &L, BW_TERM_CAP))))
            break;
        if (!rc && Ar.n && acc_add(&acc, &Ar, &e.Dn, e.one))
            rc = -1;
    }
    if (!rc && (ret = acc_decide_sum(u, &acc, t, maxp, bits)) != 0)
        goto out;
    if (!rc)
        rc = acc_combine(&acc, &e);
    ret = ex_decide(u, &e, rc, t, maxp, bits);
out:
    smattn__bwp_clear(&L), smattn__bwp_clear(&N), smattn__bwp_clear(&Ar);
    mpfr_clears(w, tmp, (mpfr_ptr)0);
    acc_free(&acc);
    ex_clear(&e);
    return ret;
}

/* One (b, h, i) of the summed dBias's extents: its rows (every b, h, i summed into it, by
 * batch and head so that each KV head's rows are contiguous), then each of its keys' sums
 * of dS (SPEC 10.2: NaN if any term is, +0 with none) through the tiers of sink_run. */
static smattn_status bias_run(bw_unit *u, int64_t idx, long max_prec)
{
    const bw_job *job = u->job;
    const smattn_problem *p = u->p;
    const smattn_out_tensor *out = &job->gout->dbias;
    const int64_t *ext = job->bext, R = u->R, T = u->T;
    const int fast = !job->cfg->no_fast_phase && !u->softcap;
    const int64_t i0 = idx % ext[2], h0 = idx / ext[2] % ext[1], b0 = idx / ext[2] / ext[1];
    const int64_t nb = ext[0] == 1 ? p->B : 1, nh = ext[1] == 1 ? p->Hq : 1,
                  ni = ext[2] == 1 ? p->S : 1, nj = ext[3] == 1 ? T : 1;
    smattn_status st = SMATTN_OK;
    mpfr_t ksum; /* the element's exact sum of dLSE (below) */
    mpfr_init2(ksum, 2240);
    u->rows = calloc((size_t)R, sizeof *u->rows);
    int64_t *tr = malloc((size_t)(R * nj + 1) * sizeof *tr);
    int64_t *tj = malloc((size_t)(R * nj + 1) * sizeof *tj);
    unsigned char *jnan = calloc((size_t)T, 1);
    if (!u->rows || !tr || !tj || !jnan) {
        st = SMATTN_ERR_NOMEM;
        goto out;
    }
    for (int64_t r = 0; r < R; r++) {
        bw_row *row = &u->rows[r];
        if (row_alloc(row, T, u->D, u->Dv)) {
            st = SMATTN_ERR_NOMEM;
            goto out;
        }
        row->b = nb > 1 ? r / (nh * ni) : b0;
        row->h = nh > 1 ? r / ni % nh : h0;
        row->i = ni > 1 ? r % ni : i0;
        row->needed = 0;
        u->g = row->h / u->gs;
        if ((st = row_prepare(u, row)) || (row->kind == RK_NORMAL && row_alloc_fast(row))) {
            st = st ? st : SMATTN_ERR_NOMEM;
            goto out;
        }
        /* NaN at the keys the conventions say (SPEC 10.2) */
        if (row->kind == RK_EMPTY_NAN)
            memset(jnan, 1, (size_t)T);
        if (row->kind == RK_POISON || (row->kind == RK_NORMAL && row->dsnan))
            for (int64_t jj = 0; jj < row->n; jj++)
                jnan[row->idx[jj]] = 1;
        row->needed = row->kind == RK_NORMAL && !row->dsnan;
    }
    /* the tiers run on every row with terms: binary64, then double-double, by (b, KV head) */
    for (int64_t r0 = 0; fast && r0 < R;) {
        int64_t r1 = r0;
        while (r1 < R && u->rows[r1].b == u->rows[r0].b &&
               u->rows[r1].h / u->gs == u->rows[r0].h / u->gs)
            r1++;
        u->g = u->rows[r0].h / u->gs;
        if (smattn__bw_fast_rows(u, u->rows[r0].b, &u->rows[r0], r1 - r0) ||
            smattn__bw_dd_rows(u, &u->rows[r0], r1 - r0)) {
            st = SMATTN_ERR_NOMEM;
            goto out;
        }
        r0 = r1;
    }
    /* An element that takes every key of each of its rows (summed over the keys) is, by
     * sum_j P_j (dP_j - Delta) = 0 and sum_j P_j = 1, exactly the sum of its regular rows'
     * dLSE (SPEC 10.3 item 3), unless a row has a finite sink (sum_j P_j = 1 - P_sink): a
     * dyadic rational, summed exactly (doubles' exponents span under 2^11 bits), that
     * decides the element once the enclosure holds it. Neither softcap (no expansion) nor
     * the expansions' limit (item 6) then leaves an exact zero undecided. */
    int ksum_ok = nj > 1;
    mpfr_set_zero(ksum, 1);
    for (int64_t r = 0; r < R && ksum_ok; r++)
        if (u->rows[r].needed) {
            ksum_ok = !u->rows[r].has_sink;
            mpfr_add_d(ksum, ksum, u->rows[r].lam, MPFR_RNDN); /* exact */
        }
    int exact_ready = 0;
    for (int64_t j0 = 0; j0 < ext[3]; j0++) {
        /* the terms: (row, key position) with the key in the element's keys */
        int64_t nt = 0;
        int nan = 0;
        for (int64_t jk = 0; jk < nj; jk++)
            nan |= jnan[nj > 1 ? jk : j0];
        for (int64_t r = 0; r < R && !nan; r++) {
            const bw_row *row = &u->rows[r];
            if (!row->needed)
                continue;
            for (int64_t jj = 0; jj < row->n; jj++)
                if (nj > 1 || row->idx[jj] == j0)
                    tr[nt] = r, tj[nt++] = jj;
        }
        uint64_t bits = 0;
        int done = nan || nt == 0;
        if (nan)
            bits = smattn__ref_nan_bits(out->dtype);
        if (fast && !done) { /* binary64 tier: the sum of the rows' dS with their bounds */
            double v = 0, Rr = 0, A = 0;
            int ok = 1;
            for (int64_t m = 0; m < nt && ok; m++) {
                const bw_row *row = &u->rows[tr[m]];
                ok = !row->fast_bad;
                v += row->fS[tj[m]], A += fabs(row->fS[tj[m]]), Rr += row->fSr[tj[m]];
            }
            if (ok) {
                double g = (double)(nt + 1) * 0x1p-53 / (1 - (double)(nt + 1) * 0x1p-53);
                double bound =
                    (Rr * (1 + 0x1p-40) + g * A) * (1 + 2 * g) * (1 + 0x1p-40) + 0x1p-1074;
                double lo = nextafter(v - bound, -HUGE_VAL), hi = nextafter(v + bound, HUGE_VAL);
                if (isfinite(v) && isfinite(bound) && (lo > 0 || hi < 0)) {
                    uint64_t x = smattn__round_bits(lo, out->dtype),
                             y = smattn__round_bits(hi, out->dtype);
                    if (x == y)
                        bits = x, done = 1, u->fast_elems++;
                }
            }
        }
        if (fast && !done) { /* double-double tier */
            dd v = {0, 0};
            double Rr = 0, A = 0;
            int ok = 1;
            for (int64_t m = 0; m < nt && ok; m++) {
                const bw_row *row = &u->rows[tr[m]];
                ok = row->dd_ok;
                if (!ok)
                    break;
                const double *g6 = &row->g6[6 * tj[m]];
                v = dd_add(v, (dd){g6[3], g6[4]});
                Rr += g6[5], A += fabs(g6[3]);
            }
            if (ok) {
                double bound =
                    (Rr * 1.01 + (double)(nt + 1) * 8 * 0x1p-106 * A) * 1.01 * (1 + 0x1p-40);
                done = smattn__ref_decide_dd(v.hi, v.lo, bound, out->dtype, &bits);
                u->fast_elems += done;
            }
        }
        for (int64_t r = 0; r < R && !done && !exact_ready; r++) {
            u->g = u->rows[r].h / u->gs; /* row_exact reads the row's K and V */
            if (u->rows[r].needed && (st = row_exact(u, &u->rows[r])))
                goto out;
        }
        exact_ready |= !done;
        int level = 0;
        for (mpfr_prec_t prec = job->cfg->fixed_prec > 0 ? job->cfg->fixed_prec : BW_START_PREC;
             !done && prec <= max_prec; prec *= 2, level++) {
            if (u->prec_used < prec)
                u->prec_used = prec;
            for (int64_t r = 0; r < R; r++) /* row_level borrows tl, th: all rows first */
                if (u->rows[r].needed)
                    row_level(u, &u->rows[r], prec);
            for (int64_t m = 0; m < nt; m++) {
                const bw_row *row = &u->rows[tr[m]];
                int64_t jj = tj[m];
                mpfr_set_prec(u->tl[m], prec);
                mpfr_set_prec(u->th[m], prec);
                if (row->Uzero[jj]) {
                    mpfr_set_zero(u->tl[m], 1), mpfr_set_zero(u->th[m], 1);
                } else {
                    mpfr_set(u->tl[m], u->softcap ? row->Slo[jj] : row->Ulo[jj], MPFR_RNDD);
                    mpfr_set(u->th[m], u->softcap ? row->Shi[jj] : row->Uhi[jj], MPFR_RNDU);
                }
                u->pl[m] = u->tl[m];
                u->ph[m] = u->th[m];
            }
            sum_terms(u, nt, 1.0, prec);
            done = decide_iv(u->lo, u->hi, out->dtype, &bits, u->tmp);
            if (!done && ksum_ok && mpfr_lessequal_p(u->lo, ksum) &&
                mpfr_lessequal_p(ksum, u->hi)) {
                done = decide_iv(ksum, ksum, out->dtype, &bits, u->tmp);
                u->exact_elems += done;
            }
            if (!done && level >= BW_EXACT_AFTER && !u->softcap) {
                int rc = exact_bias_sum(u, tr, tj, nt, out->dtype, max_prec, &bits);
                if (rc < 0) {
                    st = SMATTN_ERR_NOMEM;
                    goto out;
                }
                done = rc;
                u->exact_elems += rc;
            }
        }
        if (!done) {
            st = SMATTN_ERR_PRECISION;
            goto out;
        }
        smattn__store_bits(out->data, out->dtype, smattn__off4(out->stride, b0, h0, i0, j0), bits);
    }
out:
    mpfr_clear(ksum);
    free(tr), free(tj), free(jnan);
    return st;
}

static smattn_status unit_eval(bw_job *job, int64_t unit, smattn_ref_stats *stats)
{
    const smattn_problem *p = job->p;
    bw_unit u;
    memset(&u, 0, sizeof u);
    u.job = job;
    u.p = p;
    int64_t bias_unit = job->bias_sum && unit >= job->bias_first ? unit - job->bias_first : -1;
    int64_t sink_head = unit >= p->B * p->Hkv && bias_unit < 0 ? unit - p->B * p->Hkv : -1;
    u.b = sink_head < 0 ? unit / p->Hkv : 0;
    u.gs = p->Hq / p->Hkv;
    u.g = sink_head < 0 ? unit % p->Hkv : sink_head / u.gs;
    u.R = sink_head < 0 ? u.gs * p->S : p->B * p->S;
    if (bias_unit >= 0) { /* rows: every (b, h, i) the element's sum runs over */
        u.b = 0;
        u.R = (job->bext[0] == 1 ? p->B : 1) * (job->bext[1] == 1 ? p->Hq : 1) *
              (job->bext[2] == 1 ? p->S : 1);
    }
    u.T = p->T;
    u.D = p->D;
    u.Dv = p->Dv;
    u.softcap = p->softcap > 0;
    u.want_bias = job->gout->dbias.data != NULL && !job->bias_sum;
    mpfr_inits2(64, u.a, u.b2, u.c, u.d, u.lo, u.hi, u.tmp, (mpfr_ptr)0);
    int64_t W = u.D > u.Dv ? u.D : u.Dv;
    u.El = malloc((size_t)(u.T + 1) * sizeof *u.El);
    u.Eh = malloc((size_t)(u.T + 1) * sizeof *u.Eh);
    u.prod = malloc((size_t)W * sizeof *u.prod);
    u.pp = malloc((size_t)(W > u.T ? W : u.T) * sizeof *u.pp);
    smattn_status st;
    if (!u.El || !u.Eh || !u.prod || !u.pp) {
        free(u.El), free(u.Eh), free(u.prod);
        u.El = u.Eh = u.prod = NULL;
        st = SMATTN_ERR_NOMEM;
    } else {
        for (int64_t k = 0; k < u.T + 1; k++)
            mpfr_inits2(64, u.El[k], u.Eh[k], (mpfr_ptr)0);
        for (int64_t k = 0; k < W; k++)
            mpfr_init2(u.prod[k], 106);
        long maxp = job->cfg->max_prec > 0 ? job->cfg->max_prec : BW_DEFAULT_MAX_PREC;
        if (sink_head < 0 && bias_unit < 0) {
            st = unit_run(&u, maxp);
        } else { /* term scratch: a head's rows, a dBias sum's (row, key) terms, or
                  * row_level's groups */
            int64_t tb = job->bext[3] == 1 ? p->T : 1;
            u.ncap = bias_unit >= 0 ? (u.R * tb > u.T ? u.R * tb : u.T) + 1
                                    : (u.R > u.T ? u.R : u.T) + 1;
            u.tl = malloc((size_t)u.ncap * sizeof *u.tl);
            u.th = malloc((size_t)u.ncap * sizeof *u.th);
            u.pl = malloc((size_t)u.ncap * sizeof *u.pl);
            u.ph = malloc((size_t)u.ncap * sizeof *u.ph);
            if (!u.tl || !u.th || !u.pl || !u.ph) {
                free(u.tl), free(u.th);
                u.tl = u.th = NULL;
                st = SMATTN_ERR_NOMEM;
            } else {
                for (int64_t k = 0; k < u.ncap; k++)
                    mpfr_inits2(64, u.tl[k], u.th[k], (mpfr_ptr)0);
                st = bias_unit >= 0 ? bias_run(&u, bias_unit, maxp) : sink_run(&u, sink_head, maxp);
            }
        }
    }
    if (sink_head < 0 && bias_unit < 0) { /* dsinks and dBias-sum units evaluate rows
                                           * counted by their own units */
        stats->rows += u.R;
        stats->rows_empty += u.empty_rows;
    }
    stats->rows_rational += u.exact_elems;
    stats->rows_fast += u.fast_elems;
    if (u.prec_used > stats->max_prec_used)
        stats->max_prec_used = u.prec_used;
    unit_free(&u);
    return st;
}

/* +0 in every element of an [n0, n1, n2, n3] output */
void smattn__bw_zero(const smattn_out_tensor *t, int64_t n0, int64_t n1, int64_t n2, int64_t n3)
{
    for (int64_t a = 0; a < n0; a++)
        for (int64_t b = 0; b < n1; b++)
            for (int64_t c = 0; c < n2; c++)
                for (int64_t d = 0; d < n3; d++)
                    smattn__store_bits(t->data, t->dtype, smattn__off4(t->stride, a, b, c, d), 0);
}

/* ---- threads ----------------------------------------------------------------------------- */

static void *bw_worker(void *arg)
{
    bw_job *job = arg;
    mpfr_exp_t range[2];
    smattn__ref_mpfr_widen(range);
    smattn_ref_stats stats;
    memset(&stats, 0, sizeof stats);
    for (;;) {
        int64_t unit = (int64_t)atomic_fetch_add(&job->next, 1);
        if (unit >= job->units)
            break;
        smattn_status st = unit_eval(job, unit, &stats);
        if (st)
            smattn__ref_fail_record(&job->fail, unit, st);
    }
    pthread_mutex_lock(&job->fail.lock);
    job->stats.rows += stats.rows;
    job->stats.rows_empty += stats.rows_empty;
    job->stats.rows_rational += stats.rows_rational;
    job->stats.rows_fast += stats.rows_fast;
    if (stats.max_prec_used > job->stats.max_prec_used)
        job->stats.max_prec_used = stats.max_prec_used;
    pthread_mutex_unlock(&job->fail.lock);
    smattn__ref_mpfr_restore(range);
    return NULL;
}

smattn_status smattn_ref_backward(const smattn_problem *p, const smattn_inputs *in,
                                  const smattn_grad_inputs *gin, const smattn_grad_outputs *gout,
                                  const smattn_ref_config *cfg, smattn_ref_stats *stats)
{
    smattn_status st = smattn__validate_backward(p, in, gin, gout);
    if (st)
        return st;
    smattn_ref_config defcfg;
    memset(&defcfg, 0, sizeof defcfg);
    if (!cfg)
        cfg = &defcfg;
    if (cfg->threads < 0 ||
        (cfg->max_prec != 0 &&
         (cfg->max_prec < SMATTN_REF_PREC_MIN || cfg->max_prec > SMATTN_REF_PREC_MAX)) ||
        (cfg->fixed_prec != 0 &&
         (cfg->fixed_prec < SMATTN_REF_PREC_MIN || cfg->fixed_prec > SMATTN_REF_PREC_MAX)))
        return SMATTN_ERR_OPTION;
    if (p->layout) {
        /* SPEC 10.1: storage no (b, t) or stored row reaches (pages no sequence uses, slots
         * past T_b, packed keys past seqused_k) has gradient +0; the units write the rest */
        int64_t qn[2], kn[2];
        smattn__storage_rows(p, qn, kn);
        smattn__bw_zero(&gout->dq, qn[0], qn[1], p->Hq, p->D);
        smattn__bw_zero(&gout->dk, kn[0], kn[1], p->Hkv, p->D);
        smattn__bw_zero(&gout->dv, kn[0], kn[1], p->Hkv, p->Dv);
    }
    bw_job job;
    memset(&job, 0, sizeof job);
    job.p = p;
    job.in = in;
    job.gin = gin;
    job.gout = gout;
    job.cfg = cfg;
    job.units = p->B * p->Hkv + (gout->dsinks.data ? p->Hq : 0);
    job.bias_first = job.units;
    if (gout->dbias.data) {
        const int64_t nb[4] = {p->B, p->Hq, p->S, p->T};
        for (int k = 0; k < 4; k++) {
            job.bext[k] = gout->dbias.stride[k] == 0 ? 1 : nb[k];
            job.bias_sum |= gout->dbias.stride[k] == 0 && nb[k] > 1;
        }
        if (job.bias_sum)
            job.units += job.bext[0] * job.bext[1] * job.bext[2];
    }
    atomic_init(&job.next, 0);
    if (smattn__ref_fail_init(&job.fail))
        return SMATTN_ERR_THREADS;
    smattn__ref_threads(cfg->threads, job.units, bw_worker, &job);
    st = smattn__ref_fail_done(&job.fail);
    if (stats)
        *stats = job.stats;
    return st;
}
