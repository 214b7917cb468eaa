/* SPDX-License-Identifier: MIT */
/* backward_fast.c: the backward oracle's binary64 phase (SPEC 10.3). Every quantity is a
 * binary64 value with a rigorous bound on its distance to the exact real (mid-radius
 * arithmetic, Rump's style); an element is decided only when its whole enclosure rounds to
 * one value of the output dtype and excludes 0. Everything else goes to the MPFR phase. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "ref/backward_internal.h"
#include "ref/dd.h"
#include "ref/ref_internal.h"

#define U 0x1p-53     /* binary64 unit roundoff */
#define ETA 0x1p-1074 /* absolute error of a rounding below the normal range */
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
static int fast_row(bw_unit *u, bw_row *r, const double *K, const double *V, double *sh, double *sr,
                    double *eh, double *er, mpfr_ptr x53)
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
        /* the bias, then ALiBi's term (SPEC 2.8; both exact), each added with one rounding */
        const double add[2] = {smattn__bw_bias(u->p, in, r->b, r->h, r->i, j),
                               smattn__alibi_term(u->p, r->b, r->h, r->i, j)};
        for (int k = 0; k < 2; k++)
            if (add[k] != 0 || (k == 0 && in->bias.data)) {
                s2 += add[k];
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
    double L = 0, RL = 0, es = 0, res = 0;
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
        else
            es = e, res = re;
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
            RN +=
                eh[jj] * rdp[jj] + fabs(dp[jj]) * er[jj] + er[jj] * rdp[jj] + 2 * U * fabs(t) + ETA;
        }
        RN = sum_bound(up(RN), AN, n);
        q = N / L;
        rq = up((RN + fabs(q) * RL) / Lmin + 2 * U * fabs(q) + ETA);
        if (!isfinite(q) || !isfinite(rq))
            return 1;
    }
    r->fD = q, r->fDr = rq;
    r->fPs = es / L;
    r->fPsr = up((res + r->fPs * RL) / Lmin + 2 * U * r->fPs + ETA);
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

/* K and V of the keys some normal row of rows[0..nrows) sees, into K [T x D] and V [T x Dv];
 * the other keys are never read (SPEC 3.6). seen [T] is zeroed scratch, zeroed again. */
static void load_seen(bw_unit *u, int64_t b, const bw_row *rows, int64_t nrows, double *K,
                      double *V, unsigned char *seen)
{
    const smattn_inputs *in = u->job->in;
    const int64_t T = u->T, D = u->D, Dv = u->Dv;
    for (int64_t r = 0; r < nrows; r++)
        if (rows[r].kind == RK_NORMAL)
            for (int64_t jj = 0; jj < rows[r].n; jj++)
                seen[rows[r].idx[jj]] = 1;
    for (int64_t j = 0; j < T; j++) {
        if (!seen[j])
            continue;
        seen[j] = 0;
        smattn__ref_load_vec(&K[j * D], &in->k, smattn__key_off(u->p, in->k.stride, b, j, u->g, 0),
                             in->k.stride[3], D);
        smattn__ref_load_vec(&V[j * Dv], &in->v, smattn__key_off(u->p, in->v.stride, b, j, u->g, 0),
                             in->v.stride[3], Dv);
    }
}

int smattn__bw_fast_unit(bw_unit *u)
{
    const bw_job *job = u->job;
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
    load_seen(u, u->b, u->rows, R, K, V, kbad);
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
        for (int64_t jj = 0; jj < row->n && u->want_bias; jj++) { /* dBias = dS */
            int64_t e = r * T + row->idx[jj];
            if (!u->bdone[e]) {
                u->bdone[e] = (unsigned char)fast_decide(row->fS[jj], row->fSr[jj], go->dbias.dtype,
                                                         &u->bbits[e]);
                u->fast_elems += u->bdone[e];
            }
        }
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

/* ---- the double-double tier -------------------------------------------------------------- */

#define U2 0x1p-106
/* Absolute slack per operation: covers an error-free product whose low part underflows
 * (products below 2^-968, dd.h) and subnormal roundings. */
#define SLACK 0x1p-1000

/* a * b for double-doubles: |result - ab| <= 10 u^2 |ab| (+ SLACK), charged as 16 u^2. */
static dd dd_mul(dd a, dd b)
{
    dd p = dd_two_prod(a.hi, b.hi);
    double t = a.hi * b.lo + a.lo * b.hi + a.lo * b.lo;
    return dd_fast_two_sum(p.hi, p.lo + t);
}

static dd dd_norm(double hi, double lo)
{
    return fabs(lo) > fabs(hi) ? dd_two_sum(hi, lo) : dd_fast_two_sum(hi, lo);
}

/* Dot2 (Ogita, Rump, Oishi 2005) of exact binary64 vectors: the high parts summed by
 * two_sum, every low part into a second double; error <= (2n+4)(n+2) u^2 sum|a b|. */
static dd dot2(const double *a, const double *b, int64_t n, double *err)
{
    double hi = 0, lo = 0, A = 0;
    for (int64_t d = 0; d < n; d++) {
        dd pr = dd_two_prod(a[d], b[d]);
        dd t = dd_two_sum(hi, pr.hi);
        hi = t.hi;
        lo += t.lo + pr.lo;
        A += fabs(pr.hi);
    }
    double N = (double)n;
    *err = (2 * N + 4) * (N + 2) * U2 * A * 1.01 + (N + 1) * SLACK;
    return dd_norm(hi, lo);
}

/* P_j and dS_j of a row as double-doubles with bounds into r->g6. 0, or 1 (out of range). */
static int dd_row(bw_unit *u, bw_row *r, double *buf, double *sh, double *sl, double *se,
                  mpfr_ptr fx, mpfr_ptr fe)
{
    const smattn_inputs *in = u->job->in;
    const int64_t n = r->n, D = u->D, Dv = u->Dv;
    const double scale = u->p->scale;
    double m = -HUGE_VAL;
    for (int64_t jj = 0; jj < n; jj++) {
        int64_t j = r->idx[jj];
        smattn__ref_load_vec(buf, &in->k, smattn__key_off(u->p, in->k.stride, r->b, j, u->g, 0),
                             in->k.stride[3], D);
        double err;
        dd s = dot2(r->q, buf, D, &err);
        s = dd_mul_d(s, scale);
        err = err * fabs(scale) + 4 * U2 * fabs(s.hi) + SLACK;
        const double add[2] = {smattn__bw_bias(u->p, in, r->b, r->h, r->i, j),
                               smattn__alibi_term(u->p, r->b, r->h, r->i, j)};
        for (int k = 0; k < 2; k++)
            if (add[k] != 0 || (k == 0 && in->bias.data)) {
                s = dd_add(s, (dd){add[k], 0.0});
                err += 8 * U2 * (fabs(s.hi) + fabs(add[k])) + SLACK;
            }
        if (!isfinite(s.hi) || !isfinite(err) || fabs(s.hi) > 0x1p900)
            return 1;
        sh[jj] = s.hi, sl[jj] = s.lo, se[jj] = err * 1.01;
        m = fmax(m, s.hi);
    }
    if (r->has_sink)
        m = fmax(m, r->sink);
    /* e_j = exp(s_j - m) (MPFR at 128 bits, split), into the P slots of g6 for now */
    dd L = {0, 0}, es = {0, 0};
    double RL = 0, res = 0;
    for (int64_t jj = 0; jj <= n; jj++) {
        dd x;
        double ex;
        if (jj == n) {
            if (!r->has_sink)
                break;
            x = dd_two_sum(r->sink, -m);
            ex = 0;
        } else {
            x = dd_add(dd_two_sum(sh[jj], -m), (dd){sl[jj], 0.0});
            ex = se[jj] + 4 * U2 * (fabs(x.hi) + fabs(sh[jj])) + SLACK;
        }
        if (!(ex <= 0x1p-20))
            return 1;
        double eh = 0, el = 0, er;
        if (x.hi < -600) {
            er = 0x1p-865; /* e^-600 < 2^-865: dropped, bounded */
        } else {
            mpfr_set_d(fx, x.hi, MPFR_RNDN);
            mpfr_add_d(fx, fx, x.lo, MPFR_RNDN);
            mpfr_exp(fe, fx, MPFR_RNDN);
            eh = mpfr_get_d(fe, MPFR_RNDN);
            mpfr_sub_d(fe, fe, eh, MPFR_RNDN);
            el = mpfr_get_d(fe, MPFR_RNDN);
            double e1 = ex + 0x1p-126 * fabs(x.hi);
            er = (e1 * (1 + e1) * 1.01 + 0x1p-104) * eh * 1.01 + SLACK;
        }
        if (jj < n)
            r->g6[6 * jj] = eh, r->g6[6 * jj + 1] = el, r->g6[6 * jj + 2] = er;
        else
            es = (dd){eh, el}, res = er;
        L = dd_add(L, (dd){eh, el});
        RL += er;
    }
    RL = (RL + (double)(n + 2) * 8 * U2 * L.hi) * 1.01 + SLACK;
    double Lmin = L.hi * (1 - 0x1p-50) - RL;
    if (!(Lmin > 0.5))
        return 1;
    /* dP_j (into sh/sl/se) and N = sum e_j dP_j */
    dd N = {0, 0}, q = {0, 0};
    double RN = 0, AN = 0, rq = 0;
    if (!r->dsnan) {
        for (int64_t jj = 0; jj < n; jj++) {
            smattn__ref_load_vec(buf, &in->v,
                                 smattn__key_off(u->p, in->v.stride, r->b, r->idx[jj], u->g, 0),
                                 in->v.stride[3], Dv);
            double rdp;
            dd dp = dot2(r->dout, buf, Dv, &rdp);
            if (!isfinite(dp.hi) || fabs(dp.hi) > 0x1p900)
                return 1;
            sh[jj] = dp.hi, sl[jj] = dp.lo, se[jj] = rdp;
            dd e = {r->g6[6 * jj], r->g6[6 * jj + 1]};
            double er = r->g6[6 * jj + 2];
            dd t = dd_mul(e, dp);
            N = dd_add(N, t);
            AN += fabs(t.hi);
            RN += e.hi * 1.01 * rdp + fabs(dp.hi) * 1.01 * er + er * rdp + 16 * U2 * fabs(t.hi) +
                  SLACK;
        }
        RN = (RN + (double)(n + 1) * 8 * U2 * AN) * 1.01;
        q = dd_div(N, L);
        rq = ((RN + fabs(q.hi) * 1.01 * RL) / Lmin + 8 * U2 * fabs(q.hi) + SLACK) * 1.01;
        if (!isfinite(q.hi) || !isfinite(rq))
            return 1;
    }
    r->gD[0] = q.hi, r->gD[1] = q.lo, r->gD[2] = rq;
    dd Ps = dd_div(es, L);
    r->gPs[0] = Ps.hi, r->gPs[1] = Ps.lo;
    r->gPs[2] = ((res + fabs(Ps.hi) * 1.01 * RL) / Lmin + 8 * U2 * fabs(Ps.hi) + SLACK) * 1.01;
    for (int64_t jj = 0; jj < n; jj++) {
        double *g = &r->g6[6 * jj];
        dd e = {g[0], g[1]};
        double er = g[2];
        dd P = dd_div(e, L);
        double rP = ((er + fabs(P.hi) * 1.01 * RL) / Lmin + 8 * U2 * fabs(P.hi) + SLACK) * 1.01;
        g[0] = P.hi, g[1] = P.lo, g[2] = rP;
        if (r->dsnan)
            continue;
        dd dp = {sh[jj], sl[jj]};
        dd x = dd_add(dp, (dd){r->lam, 0.0});
        double rx = se[jj] + 8 * U2 * (fabs(dp.hi) + fabs(r->lam)) + SLACK;
        dd y = dd_add(x, (dd){-q.hi, -q.lo}); /* bounded relative to |dP| + |Delta| */
        double ry = (rx + rq + 8 * U2 * (fabs(x.hi) + fabs(q.hi)) + SLACK) * 1.01;
        dd S = dd_mul(P, y);
        double aP = fabs(P.hi) * 1.01, ay = fabs(y.hi) * 1.01;
        double rS = (aP * ry + ay * rP + rP * ry + 16 * U2 * fabs(S.hi) + SLACK) * 1.01;
        if (!isfinite(S.hi) || !isfinite(rS))
            return 1;
        g[3] = S.hi, g[4] = S.lo, g[5] = rS;
    }
    return 0;
}

/* Sum of w_m f_m over terms (w double-double with bound, f exact), times s; decide. */
typedef struct dd_acc {
    dd v;
    double R, A;
    int64_t n;
} dd_acc;

static void acc_term(dd_acc *a, double wh, double wl, double rw, double f)
{
    dd t = dd_mul_d((dd){wh, wl}, f);
    a->v = dd_add(a->v, t);
    a->R += fabs(f) * rw + 4 * U2 * fabs(t.hi) + SLACK;
    a->A += fabs(t.hi);
    a->n++;
}

static int acc_decide(dd_acc *a, double s, smattn_dtype t, uint64_t *bits)
{
    double R = (a->R + (double)(a->n + 1) * 8 * U2 * a->A) * 1.01;
    dd v = a->v;
    if (s != 1) {
        v = dd_mul_d(v, s);
        R = (fabs(s) * R + 4 * U2 * fabs(v.hi) + SLACK) * 1.01;
    }
    return smattn__ref_decide_dd(v.hi, v.lo, R * (1 + 0x1p-40), t, bits);
}

int smattn__bw_dd_unit(bw_unit *u)
{
    const bw_job *job = u->job;
    const smattn_inputs *in = job->in;
    const smattn_grad_outputs *go = job->gout;
    const int64_t T = u->T, D = u->D, Dv = u->Dv, R = u->R;
    const double scale = u->p->scale;
    int64_t W = D > Dv ? D : Dv;
    double *buf = malloc((size_t)W * sizeof *buf);
    double *sh = malloc((size_t)T * sizeof *sh), *sl = malloc((size_t)T * sizeof *sl);
    double *se = malloc((size_t)T * sizeof *se);
    mpfr_t fx, fe;
    mpfr_inits2(128, fx, fe, (mpfr_ptr)0);
    int ret = -1;
    if (!buf || !sh || !sl || !se)
        goto out;
    for (int64_t r = 0; r < R; r++) {
        bw_row *row = &u->rows[r];
        row->dd_ok = 0;
        if (row->kind != RK_NORMAL || !row->needed)
            continue;
        if (!row->g6 && !(row->g6 = malloc((size_t)(6 * (row->n ? row->n : 1)) * sizeof(double))))
            goto out;
        row->dd_ok = !dd_row(u, row, buf, sh, sl, se, fx, fe);
        if (!row->dd_ok || row->dsnan)
            continue;
        for (int64_t jj = 0; jj < row->n && u->want_bias; jj++) { /* dBias = dS */
            int64_t e = r * T + row->idx[jj];
            const double *g = &row->g6[6 * jj];
            if (!u->bdone[e]) {
                u->bdone[e] = (unsigned char)smattn__ref_decide_dd(g[3], g[4], g[5] * (1 + 0x1p-40),
                                                                   go->dbias.dtype, &u->bbits[e]);
                u->fast_elems += u->bdone[e];
            }
        }
        for (int64_t d = 0; d < D; d++) {
            int64_t e = r * D + d;
            if (u->qdone[e])
                continue;
            dd_acc a = {{0, 0}, 0, 0, 0};
            for (int64_t jj = 0; jj < row->n; jj++) {
                const double *g = &row->g6[6 * jj];
                double k = smattn__bw_ld_key(u->p, &in->k, u->b, row->idx[jj], u->g, d);
                acc_term(&a, g[3], g[4], g[5], k);
            }
            u->qdone[e] = (unsigned char)acc_decide(&a, scale, go->dq.dtype, &u->qbits[e]);
            u->fast_elems += u->qdone[e];
        }
    }
    for (int which = 1; which <= 2; which++) {
        int64_t Wd = which == 1 ? D : Dv;
        unsigned char *done = which == 1 ? u->kdone : u->vdone;
        uint64_t *bits = which == 1 ? u->kbits : u->vbits;
        smattn_dtype dt = which == 1 ? go->dk.dtype : go->dv.dtype;
        for (int64_t j = 0; j < T; j++)
            for (int64_t d = 0; d < Wd; d++) {
                int64_t e = j * Wd + d;
                if (done[e])
                    continue;
                dd_acc a = {{0, 0}, 0, 0, 0};
                int ok = 1;
                for (int64_t m = u->kstart[j]; m < u->kstart[j + 1] && ok; m++) {
                    const bw_row *row = &u->rows[u->krow[m]];
                    if (row->kind == RK_MEAN) {
                        if (which == 2) {
                            dd t = dd_div((dd){row->dout[d], 0.0}, (dd){(double)row->n, 0.0});
                            a.v = dd_add(a.v, t);
                            a.R += 8 * U2 * fabs(t.hi) + SLACK;
                            a.A += fabs(t.hi);
                            a.n++;
                        }
                        continue;
                    }
                    ok = row->dd_ok;
                    if (!ok)
                        break;
                    const double *g = &row->g6[6 * u->kpos[m]];
                    if (which == 1)
                        acc_term(&a, g[3], g[4], g[5], row->q[d]);
                    else
                        acc_term(&a, g[0], g[1], g[2], row->dout[d]);
                }
                if (!ok)
                    continue;
                done[e] = (unsigned char)acc_decide(&a, which == 1 ? scale : 1.0, dt, &bits[e]);
                u->fast_elems += done[e];
            }
    }
    ret = 0;
out:
    mpfr_clears(fx, fe, (mpfr_ptr)0);
    free(buf), free(sh), free(sl), free(se);
    return ret;
}

/* ---- the tiers for a set of rows of one batch (a dsinks unit) --------------------------- */

int smattn__bw_fast_rows(bw_unit *u, int64_t b, bw_row *rows, int64_t nrows)
{
    const int64_t T = u->T, D = u->D, Dv = u->Dv;
    int ret = -1;
    double *K = malloc((size_t)(T * D) * sizeof *K), *V = malloc((size_t)(T * Dv) * sizeof *V);
    double *sh = malloc((size_t)T * sizeof *sh), *sr = malloc((size_t)T * sizeof *sr);
    double *eh = malloc((size_t)T * sizeof *eh), *er = malloc((size_t)T * sizeof *er);
    mpfr_t x53;
    mpfr_init2(x53, 53);
    if (!K || !V || !sh || !sr || !eh || !er)
        goto out;
    unsigned char *seen = calloc((size_t)T, 1);
    if (!seen)
        goto out;
    load_seen(u, b, rows, nrows, K, V, seen);
    free(seen);
    for (int64_t r = 0; r < nrows; r++)
        if (rows[r].kind == RK_NORMAL)
            rows[r].fast_bad = fast_row(u, &rows[r], K, V, sh, sr, eh, er, x53);
    ret = 0;
out:
    mpfr_clear(x53);
    free(K), free(V), free(sh), free(sr), free(eh), free(er);
    return ret;
}

int smattn__bw_dd_rows(bw_unit *u, bw_row *rows, int64_t nrows)
{
    const int64_t T = u->T, W = u->D > u->Dv ? u->D : u->Dv;
    double *buf = malloc((size_t)W * sizeof *buf);
    double *sh = malloc((size_t)T * sizeof *sh), *sl = malloc((size_t)T * sizeof *sl);
    double *se = malloc((size_t)T * sizeof *se);
    mpfr_t fx, fe;
    mpfr_inits2(128, fx, fe, (mpfr_ptr)0);
    int ret = -1;
    if (!buf || !sh || !sl || !se)
        goto out;
    for (int64_t r = 0; r < nrows; r++) {
        bw_row *row = &rows[r];
        row->dd_ok = 0;
        if (row->kind != RK_NORMAL || !row->needed)
            continue;
        if (!row->g6 && !(row->g6 = malloc((size_t)(6 * (row->n ? row->n : 1)) * sizeof(double))))
            goto out;
        row->dd_ok = !dd_row(u, row, buf, sh, sl, se, fx, fe);
    }
    ret = 0;
out:
    mpfr_clears(fx, fe, (mpfr_ptr)0);
    free(buf), free(sh), free(sl), free(se);
    return ret;
}
