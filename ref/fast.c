/* SPDX-License-Identifier: MIT */
/* fast.c: the oracle's fast phase: double-double scores, sums and quotients with rigorous
 * absolute error bounds, MPFR only for exp and log; decides almost every element
 * (SPEC 5.2). An element it cannot decide is left to the MPFR phase, never guessed. */
#include <math.h>

#include "ref/dd.h"
#include "ref/ref_internal.h"

#define U2 0x1p-106 /* u^2 for u = 2^-53 */

/* Values the error-free transformations can take without overflow or loss to underflow. */
static int in_range(double x, double lo, double hi)
{
    double a = fabs(x);
    return a == 0 || (a >= lo && a <= hi);
}

/* The row's inputs lie where every bound below holds (SPEC 5.2, "range"). */
static int row_in_range(const ref_row *r)
{
    const smattn_problem *p = r->p;
    if (p->softcap > 0)
        return 0; /* tanh scores: the MPFR phase */
    if (!in_range(p->scale, 0x1p-100, 0x1p100))
        return 0;
    if (r->has_sink && !(fabs(r->sink) <= 0x1p900))
        return 0;
    for (int64_t jj = 0; jj < r->n; jj++) {
        int64_t j = r->idx[jj];
        if (!(fabs(smattn__ref_bias(r, j)) <= 0x1p900))
            return 0;
        if (!r->att) {
            if (!in_range(smattn__ref_x(r, j), 0x1p-450, 0x1p450))
                return 0;
            continue;
        }
        /* binary32, binary16 and bfloat16 values always lie in [2^-149, 2^128] */
        if (r->in->k.dtype == SMATTN_F64)
            for (int64_t d = 0; d < r->D; d++)
                if (!in_range(smattn__ref_k(r, j, d), 0x1p-450, 0x1p450))
                    return 0;
        if (r->in->v.dtype == SMATTN_F64)
            for (int64_t c = 0; c < r->Dv; c++)
                if (r->vclass[c] == VCLASS_FINITE && !in_range(smattn__ref_v(r, j, c), 0, 0x1p900))
                    return 0;
    }
    if (r->att && r->in->q.dtype == SMATTN_F64)
        for (int64_t d = 0; d < r->D; d++)
            if (!in_range(r->qd[d], 0x1p-450, 0x1p450))
                return 0;
    return 1;
}

/* Score j as a double-double with an absolute error bound. Dot2-style accumulation
 * (Ogita, Rump, Oishi 2005): products split exactly by fma, their high parts summed with
 * two_sum, every low part into a second double. The only rounding errors are in that
 * second sum: at most gamma_{2D} times the sum of 2D terms each <= u (D+1) A, so the
 * error is <= (2D)(D+2) u^2 A (1 + small), A = sum |q_d k_d| (SPEC 5.2). */
static void score(ref_row *r, int64_t jj)
{
    int64_t j = r->idx[jj];
    dd s;
    double err;
    if (r->att) {
        double hi = 0, lo = 0, A = 0;
        const smattn_tensor *kt = &r->in->k;
        smattn__ref_load_vec(r->buf, kt, smattn__key_off(r->p, kt->stride, r->b, j, r->g, 0),
                             kt->stride[3], r->D);
        for (int64_t d = 0; r->dk != 1.0 && d < r->D; d++)
            r->buf[d] *= r->dk; /* exact (SPEC 2.9) */
        for (int64_t d = 0; d < r->D; d++) {
            dd pr = dd_two_prod(r->qd[d], r->buf[d]);
            dd t = dd_two_sum(hi, pr.hi);
            hi = t.hi;
            lo += t.lo + pr.lo;
            A += fabs(pr.hi);
        }
        double D = (double)r->D;
        err = (2 * D + 4) * (D + 2) * U2 * A * 1.01 + (4 * D + 4) * 0x1p-1074;
        s = dd_fast_two_sum(hi, lo); /* |lo| <= ... : fast_two_sum needs |hi| >= |lo| */
        if (fabs(lo) > fabs(hi))
            s = dd_two_sum(hi, lo);
    } else {
        s = (dd){smattn__ref_x(r, j), 0.0};
        err = 0;
    }
    /* times the scale (|error| <= 4u^2|s|), plus the bias (<= 4u^2 (|s|+|b|)) */
    double sc = r->p->scale;
    s = dd_mul_d(s, sc);
    err = err * fabs(sc) + 4 * U2 * fabs(s.hi) + 0x1p-1020;
    double bias = smattn__ref_bias(r, j);
    if (bias != 0) {
        s = dd_add(s, (dd){bias, 0.0});
        err += 4 * U2 * (fabs(s.hi) + fabs(bias) + 2 * fabs(s.hi - bias));
    }
    double alibi = smattn__ref_alibi(r, j); /* |alibi| < 2^157: in range (SPEC 2.8) */
    if (alibi != 0) {
        s = dd_add(s, (dd){alibi, 0.0});
        err += 4 * U2 * (fabs(s.hi) + fabs(alibi) + 2 * fabs(s.hi - alibi));
    }
    r->s_hi[jj] = s.hi;
    r->s_lo[jj] = s.lo;
    r->s_err[jj] = err;
}

/* e^(x) for a double-double x <= ~0 with |x - exact| <= err: a double-double with relative
 * error <= expm1(err') + 2^-104, err' = err + 2^-126 |x| (MPFR at 128 bits, then split). */
static void exp_dd(ref_row *r, dd x, double err, double *eh, double *el, double *rel)
{
    mpfr_set_d(r->fx, x.hi, MPFR_RNDN);
    mpfr_add_d(r->fx, r->fx, x.lo, MPFR_RNDN);
    mpfr_exp(r->fe, r->fx, MPFR_RNDN);
    *eh = mpfr_get_d(r->fe, MPFR_RNDN);
    mpfr_sub_d(r->fe, r->fe, *eh, MPFR_RNDN);
    *el = mpfr_get_d(r->fe, MPFR_RNDN);
    double e1 = err + 0x1p-126 * fabs(x.hi);
    *rel = e1 * (1 + e1) * 1.01 + 0x1p-104;
}

int smattn__ref_fast_row(ref_row *r)
{
    if (!row_in_range(r))
        return 0;
    const int64_t n = r->n;
    for (int64_t jj = 0; jj < n; jj++) {
        score(r, jj);
        smattn__ref_work(r);
    }

    /* The shift m: any double works (the results are shift invariant); the largest score
     * (or sink) keeps every exp argument <= ~0, so nothing overflows. */
    double m = -HUGE_VAL;
    for (int64_t jj = 0; jj < n; jj++)
        m = fmax(m, r->s_hi[jj]);
    if (r->has_sink)
        m = fmax(m, r->sink);

    /* Weights e_j = exp(s_j - m). Below e^-600 a weight is dropped from the double-double
     * sums (it is still bounded: the mass bound below) and its own P is left undecided. */
    const double cut = -600;
    double dropped = 0, rho = 0;
    dd L = {0, 0};
    for (int64_t jj = 0; jj < n; jj++) {
        /* s - m: the high parts subtract exactly; adding the low part rounds once, by at
         * most u (|t.lo| + |s_lo|) <= u^2 (|x| + |s|): the |s| term matters when scores
         * are large and close together. */
        dd t = dd_two_sum(r->s_hi[jj], -m);
        dd x = dd_add(t, (dd){r->s_lo[jj], 0.0});
        double ex = r->s_err[jj] + 4 * U2 * (fabs(x.hi) + fabs(r->s_hi[jj]));
        if (!(ex <= 0x1p-20))
            return 1; /* scores too uncertain: nothing decided here */
        if (x.hi < cut) {
            r->e_hi[jj] = r->e_lo[jj] = 0;
            r->e_rel[jj] = 0;
            dropped += 0x1p-865; /* e^-600 < 2^-865 */
            continue;
        }
        exp_dd(r, x, ex, &r->e_hi[jj], &r->e_lo[jj], &r->e_rel[jj]);
        smattn__ref_work(r);
        rho = fmax(rho, r->e_rel[jj]);
        L = dd_add(L, (dd){r->e_hi[jj], r->e_lo[jj]});
    }
    double sink_e_hi = 0, sink_e_lo = 0, sink_rel = 0;
    if (r->has_sink) {
        dd x = dd_two_sum(r->sink, -m);
        if (x.hi < cut) {
            dropped += 0x1p-865;
        } else {
            exp_dd(r, x, 0, &sink_e_hi, &sink_e_lo, &sink_rel);
            rho = fmax(rho, sink_rel);
            L = dd_add(L, (dd){sink_e_hi, sink_e_lo});
        }
    }
    /* |L - exact| <= rho L + (n+1) 4u^2 L (the dd additions) + dropped mass. L >= ~1. */
    double errL = (rho + (double)(n + 2) * 4 * U2) * L.hi * 1.01 + dropped;
    double Llow = L.hi * (1 - 0x1p-50) - errL;
    if (!(Llow > 0.5))
        return 1;

    /* LSE = m + log L (SPEC 4.1). */
    {
        smattn_dtype t = r->out->lse.dtype;
        mpfr_set_d(r->fx, L.hi, MPFR_RNDN);
        mpfr_add_d(r->fx, r->fx, L.lo, MPFR_RNDN);
        mpfr_log(r->fe, r->fx, MPFR_RNDN);
        double lg = fabs(mpfr_get_d(r->fe, MPFR_RNDN));
        mpfr_add_d(r->fe, r->fe, m, MPFR_RNDN);
        double yh = mpfr_get_d(r->fe, MPFR_RNDN);
        mpfr_sub_d(r->fe, r->fe, yh, MPFR_RNDN);
        double yl = mpfr_get_d(r->fe, MPFR_RNDN);
        double rl = errL / Llow;
        /* log of a perturbed L; MPFR's roundings of L (relative 2^-128, so absolute 2^-128
         * in log), of log and of the addition; the split of the sum into (yh, yl). */
        double err = rl * (1 + rl) * 1.01 + 0x1p-125 * (lg + fabs(yh) + 1) + 0x1p-104 * fabs(yh);
        if (!r->lse_done && r->out->lse.data)
            r->lse_done = smattn__ref_decide_dd(yh, yl, err, t, &r->lse_bits);
    }

    /* P_j = e_j / L. */
    if (r->out->p.data) {
        smattn_dtype t = r->out->p.dtype;
        for (int64_t jj = 0; jj < n; jj++) {
            if (r->p_done[jj] || r->e_hi[jj] == 0)
                continue;
            dd q = dd_div((dd){r->e_hi[jj], r->e_lo[jj]}, L);
            double err = fabs(q.hi) * ((r->e_rel[jj] + errL / Llow) * 1.02 + 16 * U2);
            r->p_done[jj] = smattn__ref_decide_dd(q.hi, q.lo, err, t, &r->p_bits[jj]);
        }
    }

    /* O_c = sum_j e_j v_jc / L, Dot2-style again: e_j v_jc split exactly (e_hi part),
     * e_lo v_jc rounded (<= u^2 e|v|); error of the low sum <= (4n+4)(n+2) u^2 sum e|v|;
     * the weights' own error <= rho sum e|v|; dropped weights add <= dropped max|v|. */
    if (r->att) {
        smattn_dtype t = r->out->o.dtype;
        double nn = (double)n;
        int64_t Dv = r->Dv;
        double *hi = r->acc, *lo = r->acc + Dv, *A = r->acc + 2 * Dv, *vmax = r->acc + 3 * Dv;
        for (int64_t c = 0; c < 4 * Dv; c++)
            r->acc[c] = 0;
        const smattn_tensor *vt = &r->in->v;
        for (int64_t jj = 0; jj < n; jj++) {
            smattn__ref_load_vec(r->buf, vt, smattn__key_off(r->p, vt->stride, r->b, r->idx[jj], r->g, 0),
                         vt->stride[3], Dv);
            for (int64_t c = 0; r->dv != 1.0 && c < Dv; c++)
                r->buf[c] *= r->dv; /* exact (SPEC 2.9) */
            double eh = r->e_hi[jj], el = r->e_lo[jj];
            for (int64_t c = 0; c < Dv; c++) {
                double v = r->vclass[c] == VCLASS_FINITE ? r->buf[c] : 0.0;
                vmax[c] = fmax(vmax[c], fabs(v));
                dd pr = dd_two_prod(eh, v);
                dd s2 = dd_two_sum(hi[c], pr.hi);
                hi[c] = s2.hi;
                lo[c] += s2.lo + pr.lo + el * v;
                A[c] += fabs(pr.hi);
            }
        }
        for (int64_t c = 0; c < Dv; c++) {
            if (r->o_done[c] || r->vclass[c] != VCLASS_FINITE)
                continue;
            dd N = fabs(lo[c]) > fabs(hi[c]) ? dd_two_sum(hi[c], lo[c])
                                             : dd_fast_two_sum(hi[c], lo[c]);
            double errN = A[c] * 1.01 * (rho + ((4 * nn + 4) * (nn + 2) + 2) * U2) +
                          dropped * vmax[c] + (6 * nn + 6) * 0x1p-1074;
            dd o = dd_div(N, L);
            double err = (errN + vmax[c] * errL) / Llow + 16 * U2 * fabs(o.hi);
            r->o_done[c] = smattn__ref_decide_dd(o.hi, o.lo, err * 1.01, t, &r->o_bits[c]);
        }
    }
    return 1;
}
