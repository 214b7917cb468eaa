/* SPDX-License-Identifier: MIT */
/* backward_fast.c: the backward oracle's binary64 phase (SPEC 9.3). Every quantity is a
 * binary64 value with a rigorous bound on its distance to the exact real (mid-radius
 * arithmetic, Rump's style); an element is decided only when its whole enclosure rounds to
 * one value of the output dtype and excludes 0. Everything else goes to the MPFR phase. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "ref/backward_internal.h"
#include "ref/ref_internal.h"

#define U 0x1p-53      /* binary64 unit roundoff */
#define ETA 0x1p-1074  /* absolute error of a rounding below the normal range */
/* Each bound below is evaluated in binary64 with a handful of roundings (each a factor at
 * most 1 + u); multiplying by INFL covers them many times over. */
#define INFL (1 + 0x1p-40)

static double up(double x)
{
    return x * INFL;
}

/* gamma_n(u) = n u / (1 - n u) (ASNA 3.1), from above; +inf if n u >= 1/2. */
static double gam(int64_t n)
{
    double nu = (double)n * U;
    return nu >= 0.5 ? HUGE_VAL : up(nu / (1 - nu));
}

/* The bound on |fl(sum t_i) - sum of the exact terms|, given R = fl(sum r_i) (the terms'
 * own bounds) and A = fl(sum |t_i|) over n terms: the terms' errors plus gamma_{n-1} of the
 * computed terms (ASNA 4.2); the computed R and A are low by at most a factor 1 + gamma_n. */
static double sum_bound(double R, double A, int64_t n)
{
    double g = gam(n);
    return up((R + g * A) * (1 + 2 * g) + ETA);
}

/* Decide the rounding to t of a value known to lie within r of v. */
static int fast_decide(double v, double r, smattn_dtype t, uint64_t *bits)
{
    if (!isfinite(v) || !isfinite(r))
        return 0;
    double lo = nextafter(v - r, -HUGE_VAL), hi = nextafter(v + r, HUGE_VAL);
    if (!(lo > 0) && !(hi < 0))
        return 0; /* 0 is in the enclosure: the exact phase decides zeros */
    uint64_t a = smattn__round_bits(lo, t), b = smattn__round_bits(hi, t);
    if (a != b)
        return 0;
    *bits = a; /* rounding is monotone: every real in [lo, hi] rounds to a */
    return 1;
}

/* Dot product of exact binary64 vectors: value and bound. Each product is rounded once
 * (u |p| + eta), the sum adds gamma_{n-1} sum |p^|. */
static double dot(const double *a, const double *b, int64_t n, double *err)
{
    double s = 0, A = 0;
    for (int64_t d = 0; d < n; d++) {
        double p = a[d] * b[d];
        s += p;
        A += fabs(p);
    }
    *err = sum_bound(2 * U * A + (double)n * ETA, A, n);
    return s;
}

/* P_j (every row) and dS_j (rows where it is defined) with bounds, into the row's fP, fPr,
 * fS, fSr. Returns 0, or 1 when a bound is not finite or too wide to be useful. */
static int fast_row(bw_unit *u, bw_row *r, const double *K, const double *V, double *sh,
                    double *sr, double *eh, double *er, mpfr_ptr x53)
{
    const smattn_inputs *in = u->job->in;
    const int64_t n = r->n, D = u->D, Dv = u->Dv;
    const double scale = u->p->scale;
    double m = -HUGE_VAL;
    for (int64_t jj = 0; jj < n; jj++) {
        int64_t j = r->idx[jj];
        double rs, s = dot(r->q, &K[j * D], D, &rs);
        double s2 = s * scale;
        rs = up(fabs(scale) * rs + 2 * U * fabs(s2) + ETA);
        if (in->bias.data) {
            double bj = smattn_load(in->bias.data, in->bias.dtype,
                                    smattn__off4(in->bias.stride, u->b, r->h, r->i, j));
            s2 += bj;
            rs = up(rs + 2 * U * fabs(s2) + ETA);
        }
        if (!isfinite(s2) || !isfinite(rs))
            return 1;
        sh[jj] = s2;
        sr[jj] = rs;
        if (s2 > m)
            m = s2;
    }
    if (r->has_sink && r->sink > m)
        m = r->sink;
    /* e_j = exp(s_j - m): MPFR rounds the exponential once to 53 bits (SPEC 5.2) */
    double L = 0, RL = 0;
    for (int64_t jj = 0; jj <= n; jj++) {
        double x, rx;
        if (jj == n) {
            if (!r->has_sink)
                break;
            x = r->sink - m;
            rx = up(2 * U * fabs(x) + ETA);
        } else {
            x = sh[jj] - m;
            rx = up(sr[jj] + 2 * U * fabs(x) + ETA);
        }
        if (!(rx <= 0.25) || !isfinite(x))
            return 1;
        mpfr_set_d(x53, x, MPFR_RNDN);
        mpfr_exp(x53, x53, MPFR_RNDN);
        double e = mpfr_get_d(x53, MPFR_RNDN);
        /* |e^{x_exact} - e| <= e^x (e^rx - 1) + 2u e + eta, e^rx - 1 <= rx (1 + rx) */
        double re = up((e + ETA) * (1 + 4 * U) * rx * (1 + rx) + 2 * U * e + ETA);
        if (jj < n)
            eh[jj] = e, er[jj] = re;
        L += e;
        RL += re;
    }
    RL = sum_bound(RL, L, n + 1);
    if (!(L - RL > 0) || !isfinite(L))
        return 1;
    double Lmin = L - RL;
    /* Delta = N / L with N = sum e_j dP_j */
    double N = 0, RN = 0, AN = 0, q = 0, rq = 0;
    double *dp = r->fS, *rdp = r->fSr; /* dP_j with its bound, overwritten by dS_j below */
    if (!r->dsnan) {
        for (int64_t jj = 0; jj < n; jj++) {
            dp[jj] = dot(r->dout, &V[r->idx[jj] * Dv], Dv, &rdp[jj]);
            double t = eh[jj] * dp[jj];
            N += t;
            AN += fabs(t);
            RN += eh[jj] * rdp[jj] + fabs(dp[jj]) * er[jj] + er[jj] * rdp[jj] + 2 * U * fabs(t) + ETA;
        }
        RN = sum_bound(up(RN), AN, n);
        q = N / L;
        rq = up((RN + fabs(q) * RL) / Lmin + 2 * U * fabs(q) + ETA);
        if (!isfinite(q) || !isfinite(rq))
            return 1;
    }
    for (int64_t jj = 0; jj < n; jj++) {
        double P = eh[jj] / L;
        double rP = up((er[jj] + P * RL) / Lmin + 2 * U * P + ETA);
        r->fP[jj] = P;
        r->fPr[jj] = rP;
        if (r->dsnan)
            continue;
        double x = dp[jj] + r->lam;
        double rx = up(rdp[jj] + 2 * U * fabs(x) + ETA);
        double y = x - q; /* the cancellation: bounded relative to |dP| + |Delta| */
        double ry = up(rx + rq + 2 * U * fabs(y) + ETA);
        double S = P * y;
        r->fS[jj] = S;
        r->fSr[jj] = up(P * ry + fabs(y) * rP + rP * ry + 2 * U * fabs(S) + ETA);
        if (!isfinite(S) || !isfinite(r->fSr[jj]))
            return 1;
    }
    return 0;
}

int smattn__bw_fast_unit(bw_unit *u)
{
    const bw_job *job = u->job;
    const smattn_inputs *in = job->in;
    const smattn_grad_outputs *go = job->gout;
    const int64_t T = u->T, D = u->D, Dv = u->Dv, R = u->R;
    const double scale = u->p->scale;
    int ret = -1;
    double *K = malloc((size_t)(T * D) * sizeof *K), *V = malloc((size_t)(T * Dv) * sizeof *V);
    double *sh = malloc((size_t)T * sizeof *sh), *sr = malloc((size_t)T * sizeof *sr);
    double *eh = malloc((size_t)T * sizeof *eh), *er = malloc((size_t)T * sizeof *er);
    double *acc = calloc((size_t)(3 * T * (D > Dv ? D : Dv)), sizeof *acc);
    double *qa = malloc((size_t)(3 * D) * sizeof *qa);
    unsigned char *kbad = calloc((size_t)T, 1);
    mpfr_t x53;
    mpfr_init2(x53, 53);
    if (!K || !V || !sh || !sr || !eh || !er || !acc || !qa || !kbad)
        goto out;
    for (int64_t j = 0; j < T; j++) { /* any garbage at invisible keys is loaded, never used */
        smattn__ref_load_vec(&K[j * D], &in->k, smattn__off4(in->k.stride, u->b, j, u->g, 0),
                             in->k.stride[3], D);
        smattn__ref_load_vec(&V[j * Dv], &in->v, smattn__off4(in->v.stride, u->b, j, u->g, 0),
                             in->v.stride[3], Dv);
    }
    /* rows: P and dS, then dQ */
    for (int64_t r = 0; r < R; r++) {
        bw_row *row = &u->rows[r];
        if (row->kind != RK_NORMAL)
            continue;
        row->fast_bad = fast_row(u, row, K, V, sh, sr, eh, er, x53);
        if (row->fast_bad) {
            for (int64_t jj = 0; jj < row->n; jj++)
                kbad[row->idx[jj]] = 1;
            continue;
        }
        if (row->dsnan)
            continue;
        double *qv = qa, *qr = qa + D, *qs = qa + 2 * D;
        memset(qa, 0, (size_t)(3 * D) * sizeof *qa);
        for (int64_t jj = 0; jj < row->n; jj++) {
            const double *k = &K[row->idx[jj] * D];
            double S = row->fS[jj], rS = row->fSr[jj];
            for (int64_t d = 0; d < D; d++) {
                double t = S * k[d];
                qv[d] += t;
                qs[d] += fabs(t);
                qr[d] += fabs(k[d]) * rS + 2 * U * fabs(t) + ETA;
            }
        }
        for (int64_t d = 0; d < D; d++) {
            int64_t e = r * D + d;
            if (u->qdone[e])
                continue;
            double rr = sum_bound(up(qr[d]), qs[d], row->n);
            double v = qv[d] * scale;
            rr = up(fabs(scale) * rr + 2 * U * fabs(v) + ETA);
            u->qdone[e] = (unsigned char)fast_decide(v, rr, go->dq.dtype, &u->qbits[e]);
            u->fast_elems += u->qdone[e];
        }
    }
    /* dK and dV: sums over the rows that see each key, in row order */
    for (int which = 1; which <= 2; which++) {
        int64_t W = which == 1 ? D : Dv;
        double *av = acc, *ar = acc + T * W, *as = acc + 2 * T * W;
        memset(acc, 0, (size_t)(3 * T * W) * sizeof *acc);
        for (int64_t r = 0; r < R; r++) {
            const bw_row *row = &u->rows[r];
            if (row->kind == RK_MEAN && which == 2) {
                for (int64_t j = 0; j < row->n; j++)
                    for (int64_t c = 0; c < Dv; c++) {
                        double t = row->dout[c] / (double)row->n;
                        av[j * W + c] += t;
                        as[j * W + c] += fabs(t);
                        ar[j * W + c] += 2 * U * fabs(t) + ETA;
                    }
                continue;
            }
            if (row->kind != RK_NORMAL || row->fast_bad || (which == 1 && row->dsnan))
                continue;
            const double *f = which == 1 ? row->q : row->dout;
            for (int64_t jj = 0; jj < row->n; jj++) {
                int64_t j = row->idx[jj];
                double w = which == 1 ? row->fS[jj] : row->fP[jj];
                double rw = which == 1 ? row->fSr[jj] : row->fPr[jj];
                double *pv = &av[j * W], *pr = &ar[j * W], *ps = &as[j * W];
                for (int64_t d = 0; d < W; d++) {
                    double t = w * f[d];
                    pv[d] += t;
                    ps[d] += fabs(t);
                    pr[d] += fabs(f[d]) * rw + 2 * U * fabs(t) + ETA;
                }
            }
        }
        unsigned char *done = which == 1 ? u->kdone : u->vdone;
        uint64_t *bits = which == 1 ? u->kbits : u->vbits;
        smattn_dtype dt = which == 1 ? go->dk.dtype : go->dv.dtype;
        for (int64_t j = 0; j < T; j++) {
            if (kbad[j])
                continue;
            int64_t nt = u->kstart[j + 1] - u->kstart[j];
            for (int64_t d = 0; d < W; d++) {
                int64_t e = j * W + d;
                if (done[e])
                    continue;
                double v = av[e], rr = sum_bound(up(ar[e]), as[e], nt);
                if (which == 1) {
                    v *= scale;
                    rr = up(fabs(scale) * rr + 2 * U * fabs(v) + ETA);
                }
                done[e] = (unsigned char)fast_decide(v, rr, dt, &bits[e]);
                u->fast_elems += done[e];
            }
        }
    }
    ret = 0;
out:
    mpfr_clear(x53);
    free(K), free(V), free(sh), free(sr), free(eh), free(er), free(acc), free(qa), free(kbad);
    return ret;
}
