/* SPDX-License-Identifier: MIT */
/* backward_bound.c: the error bound of SPEC 10.7 for backward kernels (FlashAttention-2's
 * model: P recomputed from the stored LSE, Delta from the stored O, sums in any order). */
#include <float.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "core/internal.h"
#include "core/layout.h"

#include "core/bound_math.h"

/* SPEC 10.7 B11: the long double recomputation's own error, relative to an element's
 * majorant, per unit of the row's size and score range (a first-order estimate taken with
 * a margin of 16). */
#define EVAL_UNIT 0x1p-60L
#define EVAL_REL 0x1p-20L

smattn_backward_precision smattn_backward_precision_of(smattn_dtype t)
{
    smattn_backward_precision m;
    memset(&m, 0, sizeof m);
    int k = (t == SMATTN_F64 || t == SMATTN_F16 || t == SMATTN_BF16) ? (int)t : SMATTN_F32;
    m.fwd = smattn_precision_of((smattn_dtype)k);
    m.bwd = m.fwd;
    m.o_dtype = (smattn_dtype)k;
    m.lse_dtype = (smattn_dtype)k;
    return m;
}

static int pm_ok(const smattn_precision *pm)
{
    return pm->u_score >= 0 && pm->u_score < 0.25 && pm->u_acc >= 0 && pm->u_acc < 0.25 &&
           pm->exp_ulps >= 0 && pm->exp_ulps < 1e6 && pm->u_p >= 0 && pm->u_p < 0.25 &&
           pm->blocks >= 1 && pm->acc_len >= 0 && pm->tiny >= 0 && pm->tiny < 1;
}

/* An output format: unit roundoff, subnormal spacing, overflow threshold. */
typedef struct ofmt {
    ld u, w, thr;
} ofmt;

static ofmt out_format(smattn_dtype t)
{
    const smattn_format *f = &smattn__formats[t];
    ofmt o = {ldexpl(1, -f->prec), ldexpl(1, f->emin - f->prec + 1),
              ldexpl(2 - ldexpl(1, -f->prec), f->emax)};
    return o;
}

static void put(const smattn_out_tensor *t, int64_t off, double x)
{
    memcpy((unsigned char *)t->data + off * 8, &x, 8); /* any address */
}

/* SPEC 10.7 B10-B11: the kernel's error E of an element of exact value x, its output
 * rounding, the evaluation's own error ev, the comparison against binary64; rounded up. */
static double publish(ld E, ld x, ld ev, const ofmt *f)
{
    if (!(E < HUGE_VALL) || !(ev < HUGE_VALL))
        return HUGE_VAL;
    ld B = (1 + f->u) * E + f->u * fabsl(x) + f->w / 2;
    B = B * (1 + EVAL_REL) + ev + 0x1p-53L * fabsl(x) + 0x1p-1074L;
    if (fabsl(x) + B >= f->thr || B > (ld)DBL_MAX)
        return HUGE_VAL;
    double d = (double)B;
    if ((ld)d < B)
        d = nextafter(d, HUGE_VAL);
    return d;
}

static ld ldload(const smattn_tensor *t, int64_t off)
{
    return (ld)smattn_load(t->data, t->dtype, off);
}

/* The backward's arithmetic (SPEC 10.7): u, u_s, eps_f, l_f, u_p, omega, the scale's phi. */
typedef struct bmodel {
    ld u, us, up, om, eps_f, l_f, phi, Omega;
} bmodel;

/* Sums of terms over rows (dBias over a broadcast bias's dimensions, dSinks over a head's
 * batches and queries): the exact sum, the terms' errors and majorants, the evaluation's
 * slack (its largest relative rs times the sum of majorants), the count, a term with no
 * finite bound. */
typedef struct tsum {
    ld *x, *e, *m, *em, *rs;
    int64_t *cnt;
    unsigned char *bad;
} tsum;

static int tsum_alloc(tsum *t, size_t n)
{
    t->x = calloc(n ? n * 5 : 1, sizeof(ld));
    t->cnt = calloc(n ? n : 1, sizeof(int64_t));
    t->bad = calloc(n ? n : 1, 1);
    if (!t->x || !t->cnt || !t->bad)
        return -1;
    t->e = t->x + n, t->m = t->e + n, t->em = t->m + n, t->rs = t->em + n;
    return 0;
}

static void tsum_free(tsum *t)
{
    free(t->x), free(t->cnt), free(t->bad);
}

/* Add a term of exact value x, error e, evaluation majorant em (times rs). */
static void tsum_add(tsum *t, size_t k, ld x, ld e, ld em, ld rs)
{
    t->x[k] += x;
    t->e[k] += e;
    t->m[k] += fabsl(x) + e;
    t->em[k] += em;
    t->rs[k] = fmaxl(t->rs[k], rs);
    t->cnt[k]++;
}

/* SPEC 10.7 B12: a sum of N terms in any order (each through at most N - 1 additions),
 * rounded once to f. */
static double tsum_bound(const tsum *t, size_t k, const bmodel *m, const ofmt *f)
{
    if (t->bad[k])
        return HUGE_VAL;
    if (!t->cnt[k])
        return 0; /* no term: an exact +0 */
    const ld N = (ld)t->cnt[k], gN = gam(N, m->u);
    if (!(t->m[k] * (1 + gN) < m->Omega))
        return HUGE_VAL;
    ld E = t->e[k] + gN * t->m[k] + 2 * N * m->om;
    return publish(E, t->x[k], t->rs[k] * t->em[k], f);
}

/* Per (b, key, KV head) accumulators of dK (D columns) and dV (Dv columns). */
typedef struct acc {
    ld *kx, *ke, *km, *vx, *ve, *vm, *ev; /* exact, error, majorant; ev: evaluation slack */
    int64_t *cnt;                         /* rows summed */
    unsigned char *bad;                   /* a contribution with no finite bound */
} acc;

smattn_status smattn_backward_bound(const smattn_problem *prob, const smattn_inputs *in,
                                    const smattn_grad_inputs *gin,
                                    const smattn_backward_precision *pm,
                                    const smattn_grad_outputs *fmt,
                                    const smattn_grad_outputs *bound)
{
    if (!prob || !in || !gin || !pm || !fmt || !bound)
        return SMATTN_ERR_NULL;
    smattn_status st = smattn__validate_backward(prob, in, gin, bound);
    if (st)
        return st;
    const int want_db = bound->dbias.data != NULL, want_ds = bound->dsinks.data != NULL;
    if (bound->dq.dtype != SMATTN_F64 || bound->dk.dtype != SMATTN_F64 ||
        bound->dv.dtype != SMATTN_F64 || (want_db && bound->dbias.dtype != SMATTN_F64) ||
        !is_float(fmt->dq.dtype) || !is_float(fmt->dk.dtype) || !is_float(fmt->dv.dtype) ||
        (want_db && !is_float(fmt->dbias.dtype)) ||
        (want_ds && (bound->dsinks.dtype != SMATTN_F64 || !is_float(fmt->dsinks.dtype))) ||
        !is_float(pm->o_dtype) ||
        !is_float(pm->lse_dtype))
        return SMATTN_ERR_DTYPE;
    if (!pm_ok(&pm->fwd) || !pm_ok(&pm->bwd))
        return SMATTN_ERR_OPTION;
    const ofmt fq = out_format(fmt->dq.dtype), fk = out_format(fmt->dk.dtype),
               fv = out_format(fmt->dv.dtype),
               fb = out_format(want_db ? fmt->dbias.dtype : SMATTN_F64),
               fs = out_format(want_ds ? fmt->dsinks.dtype : SMATTN_F64);
    bmodel m;
    m.u = (ld)pm->bwd.u_acc;
    m.us = (ld)pm->bwd.u_score;
    m.up = (ld)pm->bwd.u_p;
    m.om = (1 + (ld)pm->bwd.exp_ulps) * (ld)pm->bwd.tiny;
    m.eps_f = 2 * (ld)pm->bwd.exp_ulps * m.u;
    m.l_f = m.eps_f < 1 ? -log1pl(-m.eps_f) : HUGE_VALL;
    m.phi = (1 + m.us) * (1 + m.u) - 1;
    m.Omega = range_of(m.u);
    const ld E = (ld)pm->bwd.exp_ulps;

    const int64_t B = prob->B, S = prob->S, T = prob->T, Hq = prob->Hq, Hkv = prob->Hkv,
                  D = prob->D, Dv = prob->Dv;
    /* SPEC 10.7 B1, B3: the stored LSE's and O's bounds are the forward's (SPEC 6). */
    smattn_outputs ff, fbnd;
    memset(&ff, 0, sizeof ff);
    memset(&fbnd, 0, sizeof fbnd);
    double *bo = malloc((size_t)(B * S * Hq * Dv) * sizeof *bo); /* packed: fewer rows */
    double *bl = malloc((size_t)(B * Hq * S) * sizeof *bl);
    acc a;
    memset(&a, 0, sizeof a);
    /* dBias summed over the dimensions of stride 0 (its extents 1 there), and dSinks */
    int64_t bx[4] = {B, Hq, S, T};
    int db_sum = 0;
    for (int k = 0; want_db && k < 4; k++)
        if (bound->dbias.stride[k] == 0) {
            db_sum |= bx[k] > 1;
            bx[k] = 1;
        }
    tsum tb, ts;
    memset(&tb, 0, sizeof tb);
    memset(&ts, 0, sizeof ts);
    const size_t nkv = (size_t)(B * T * Hkv);
    a.kx = calloc(nkv * (size_t)D * 3, sizeof(ld));
    a.vx = calloc(nkv * (size_t)Dv * 3, sizeof(ld));
    a.ev = calloc(nkv, sizeof(ld));
    a.cnt = calloc(nkv, sizeof(int64_t));
    a.bad = calloc(nkv, 1);
    const size_t nT = (size_t)T + 1;
    int64_t *idx = malloc(nT * sizeof *idx);
    ld *buf = malloc(nT * 16 * sizeof *buf);
    ld *al = malloc(nT * sizeof *al); /* |the ALiBi addend| of each visible key (6.2.3) */
    /* ALiBi (SPEC 2.8, 6.2.3): an addend after the bias (has_bias: the bias as is) */
    const int alibi = prob->alibi_mode != SMATTN_ALIBI_NONE,
              alibi_dist = prob->alibi_mode == SMATTN_ALIBI_SYMMETRIC ||
                           prob->alibi_mode == SMATTN_ALIBI_ONE_SIDED,
              has_bias = in->bias.data != NULL && prob->alibi_mode != SMATTN_ALIBI_MASK;
    ld *qd = malloc((size_t)D * sizeof *qd);
    ld *dov = malloc((size_t)Dv * sizeof *dov);
    ld *ov = malloc((size_t)Dv * sizeof *ov);
    ld *krow = malloc(nT * (size_t)D * sizeof *krow);
    ld *vrow = malloc(nT * (size_t)Dv * sizeof *vrow);
    const size_t nbx = db_sum ? (size_t)(bx[0] * bx[1] * bx[2] * bx[3]) : 0;
    if (!bo || !bl || !a.kx || !a.vx || !a.ev || !a.cnt || !a.bad || !idx || !buf || !al || !qd ||
        !dov || !ov || !krow || !vrow || tsum_alloc(&tb, nbx) ||
        tsum_alloc(&ts, want_ds ? (size_t)Hq : 0)) {
        st = SMATTN_ERR_NOMEM;
        goto done;
    }
    a.ke = a.kx + nkv * (size_t)D;
    a.km = a.ke + nkv * (size_t)D;
    a.ve = a.vx + nkv * (size_t)Dv;
    a.vm = a.ve + nkv * (size_t)Dv;
    ff.o.dtype = pm->o_dtype;
    ff.lse.dtype = pm->lse_dtype;
    fbnd.o = (smattn_out_tensor){bo, SMATTN_F64, {0}};
    fbnd.lse = (smattn_out_tensor){bl, SMATTN_F64, {0}};
    if ((st = smattn_contiguous_strides(prob, 'o', fbnd.o.stride)) ||
        (st = smattn_contiguous_strides(prob, 'l', fbnd.lse.stride)) ||
        (st = smattn_bound(prob, in, &pm->fwd, &ff, &fbnd)))
        goto done;

    if (prob->layout) { /* SPEC 10.1: storage no key or stored row reaches is exactly +0 */
        int64_t qn[2], kn[2];
        smattn__storage_rows(prob, qn, kn);
        const smattn_out_tensor *zt[3] = {&bound->dq, &bound->dk, &bound->dv};
        const int64_t zn[3][4] = {{qn[0], qn[1], Hq, D}, {kn[0], kn[1], Hkv, D},
                                  {kn[0], kn[1], Hkv, Dv}};
        for (int k = 0; k < 3; k++)
            for (int64_t x0 = 0; x0 < zn[k][0]; x0++)
                for (int64_t x1 = 0; x1 < zn[k][1]; x1++)
                    for (int64_t x2 = 0; x2 < zn[k][2]; x2++)
                        for (int64_t x3 = 0; x3 < zn[k][3]; x3++)
                            put(zt[k], smattn__off4(zt[k]->stride, x0, x1, x2, x3), 0);
    }
    ld *s = buf, *aj = buf + nT, *sig = buf + 2 * nT, *p = buf + 3 * nT, *lp = buf + 4 * nT,
       *dP = buf + 5 * nT, *Aj = buf + 6 * nT, *eP = buf + 7 * nT, *eW = buf + 8 * nT,
       *dU = buf + 9 * nT, *eS = buf + 10 * nT, *dS = buf + 11 * nT, *Dl = buf + 12 * nT,
       *ePv = buf + 13 * nT;
    const ld scale = (ld)prob->scale, asc = fabsl(scale);
    const int cap = prob->softcap > 0;
    const ld c = (ld)prob->softcap;
    const ld g2 = gam((ld)D + 2, m.us), g4 = gam((ld)D + 4, m.us);
    const ld phi_s = (1 + 2 * E * m.us) * (1 + m.us) - 1;
    const ld gDv = gam((ld)Dv, m.u);
    const int has_dlse = gin->dlse.data != NULL;

/* the summed dBias element of (b, h, i, j) */
#define DBK(b_, h_, i_, j_)                                                                    \
    ((size_t)((((bx[0] > 1 ? (b_) : 0) * bx[1] + (bx[1] > 1 ? (h_) : 0)) * bx[2] +             \
               (bx[2] > 1 ? (i_) : 0)) * bx[3] + (bx[3] > 1 ? (j_) : 0)))
    for (int64_t b = 0; b < B; b++)
        for (int64_t h = 0; h < Hq; h++) {
            const int64_t g = smattn__kv_head(prob, h);
            const ld slope = (ld)smattn__alibi_slope(prob, b, h);
            for (int64_t i = 0; i < S; i++) {
                if (!smattn__row_stored(prob, b, i)) { /* a packed batch's padding row: no
                                                        * loss term, dBias +0 (SPEC 10.1) */
                    for (int64_t j = 0; want_db && !db_sum && j < T; j++)
                        put(&bound->dbias, smattn__off4(bound->dbias.stride, b, h, i, j), 0);
                    continue;
                }
                int64_t lo, hi;
                smattn__key_range(prob, b, i, &lo, &hi);
                int nanrow = 0, badrow = 0;
                int64_t nk = 0;
                for (int64_t j = lo; j < hi; j++) {
                    if (!smattn__mask_allows(prob, in, b, h, i, j))
                        continue;
                    if (in->bias.data) {
                        double bv = smattn_load(in->bias.data, in->bias.dtype,
                                                smattn__off4(in->bias.stride, b, h, i, j));
                        if (bv == -HUGE_VAL)
                            continue;
                        if (!isfinite(bv))
                            nanrow = 1;
                    }
                    idx[nk++] = j;
                }
                int has_sink = 0;
                ld zeta = 0;
                if (in->sinks.data && i < smattn__q_len(prob, b)) {
                    double sv = smattn_load(in->sinks.data, in->sinks.dtype,
                                            in->sinks.stride[0] * h);
                    if (sv != -HUGE_VAL) {
                        has_sink = 1;
                        zeta = (ld)sv;
                        if (!isfinite(sv))
                            nanrow = 1;
                    }
                }
                /* the row's dQ and dBias: exact zeros unless set below (SPEC 10.2) */
                double vq = 0;
                for (int64_t d = 0; d < D; d++)
                    put(&bound->dq, smattn__row_off(prob, bound->dq.stride, b, i, h, d), 0);
                if (want_db && !db_sum)
                    for (int64_t j = 0; j < T; j++)
                        put(&bound->dbias, smattn__off4(bound->dbias.stride, b, h, i, j), 0);
                if (want_ds && in->sinks.data && i < smattn__q_len(prob, b)) {
                    double sv = smattn_load(in->sinks.data, in->sinks.dtype,
                                            in->sinks.stride[0] * h);
                    if (isnan(sv) || sv == HUGE_VAL)
                        ts.bad[h] = 1; /* a NaN sink: dsink_h NaN (SPEC 10.1) */
                }
                if (nk + has_sink == 0) { /* empty (SPEC 10.2) */
                    const int64_t Tb = smattn__kv_len(prob, b);
                    if (prob->empty_rows == SMATTN_EMPTY_NAN) {
                        for (int64_t d = 0; d < D; d++)
                            put(&bound->dq, smattn__row_off(prob, bound->dq.stride, b, i, h, d),
                                HUGE_VAL);
                        for (int64_t j = 0; j < T; j++) {
                            a.bad[(b * T + j) * Hkv + g] = 1;
                            if (db_sum)
                                tb.bad[DBK(b, h, i, j)] = 1;
                            else if (want_db)
                                put(&bound->dbias,
                                    smattn__off4(bound->dbias.stride, b, h, i, j), HUGE_VAL);
                        }
                    } else if (prob->empty_rows == SMATTN_EMPTY_MEAN && Tb > 0) {
                        /* B9 with P = fl(1 / fl(T_b)) */
                        const ld pm_ = 1.0L / (ld)Tb;
                        const ld e = (gam(2, m.u) + m.up * (1 + m.u)) * pm_ + m.om; /* T_b, 1/T_b */
                        for (int64_t cc = 0; cc < Dv; cc++)
                            dov[cc] = ldload(&gin->dout,
                                             smattn__row_off(prob, gin->dout.stride, b, i, h, cc));
                        for (int64_t j = 0; j < Tb; j++) {
                            const size_t kv = (size_t)((b * T + j) * Hkv + g);
                            a.cnt[kv]++;
                            for (int64_t cc = 0; cc < Dv; cc++) {
                                if (!isfinite(dov[cc]))
                                    a.bad[kv] = 1;
                                const size_t o = kv * (size_t)Dv + (size_t)cc;
                                a.vx[o] += pm_ * dov[cc];
                                a.ve[o] += e * fabsl(dov[cc]);
                                a.vm[o] += (pm_ + e) * fabsl(dov[cc]);
                            }
                        }
                    }
                    continue;
                }
                if (nk == 0) { /* the sink alone: dQ = +0, nothing to dK, dV */
                    if (nanrow)
                        for (int64_t d = 0; d < D; d++)
                            put(&bound->dq, smattn__row_off(prob, bound->dq.stride, b, i, h, d),
                                HUGE_VAL);
                    if (want_ds && !nanrow) { /* B13: dLSE_i times P_sink = exp(zeta - LSE) */
                        const ld BL = (ld)bl[smattn__lse_off(prob, fbnd.lse.stride, b, h, i)];
                        ld dl = has_dlse ? ldload(&gin->dlse,
                                                  smattn__lse_off(prob, gin->dlse.stride, b, h, i))
                                         : 0;
                        if (!(BL < HUGE_VALL) || !isfinite(dl)) {
                            ts.bad[h] = 1;
                        } else {
                            /* P_sink = 1 exactly; the kernel's from the stored LSE, Delta
                             * = dO . O_hat with O = +0 within B_O */
                            ld xs = BL + m.u * BL;
                            ld eP1 = p_expm1(1, 0, xs + m.l_f) + m.om;
                            const double *BO = bo + smattn__row_off(prob, fbnd.o.stride, b, i, h, 0);
                            ld eD = 0, dOO = 0;
                            for (int64_t cc = 0; cc < Dv; cc++) {
                                ld dv_ = ldload(&gin->dout,
                                                smattn__row_off(prob, gin->dout.stride, b, i, h, cc));
                                if (!isfinite(dv_) || !(BO[cc] < HUGE_VAL))
                                    ts.bad[h] = 1;
                                eD += fabsl(dv_) * (ld)BO[cc];
                                dOO += fabsl(dv_) * (ld)BO[cc];
                            }
                            eD += gDv * dOO + (ld)Dv * m.om;
                            ld ey = eD + m.u * (fabsl(dl) + eD) + m.om, ay = fabsl(dl) + ey;
                            ld et = eP1 * ay + ey + m.u * (1 + eP1) * ay + m.om;
                            tsum_add(&ts, (size_t)h, dl, et, ay + et, EVAL_UNIT * 64);
                        }
                    }
                    continue;
                }
                /* Load the row's data; non-finite data makes the row's gradients NaN
                 * (SPEC 10.2): bound +inf. */
                for (int64_t d = 0; d < D; d++) {
                    qd[d] = ldload(&in->q, smattn__row_off(prob, in->q.stride, b, i, h, d));
                    if (!isfinite(qd[d]))
                        nanrow = 1;
                }
                for (int64_t t = 0; t < nk; t++) {
                    for (int64_t d = 0; d < D; d++) {
                        ld kv = ldload(&in->k, smattn__key_off(prob, in->k.stride, b, idx[t], g, d));
                        krow[t * D + d] = kv;
                        if (!isfinite(kv))
                            nanrow = 1;
                    }
                    for (int64_t cc = 0; cc < Dv; cc++) {
                        ld vv = ldload(&in->v, smattn__key_off(prob, in->v.stride, b, idx[t], g, cc));
                        vrow[t * Dv + cc] = vv;
                        if (!isfinite(vv))
                            badrow = 1;
                    }
                }
                for (int64_t cc = 0; cc < Dv; cc++) {
                    dov[cc] = ldload(&gin->dout, smattn__row_off(prob, gin->dout.stride, b, i, h, cc));
                    if (!isfinite(dov[cc]))
                        badrow = 1;
                }
                ld dlse = 0;
                if (has_dlse) {
                    dlse = ldload(&gin->dlse, smattn__lse_off(prob, gin->dlse.stride, b, h, i));
                    if (!isfinite(dlse))
                        badrow = 1;
                }
                /* the forward's bounds on the stored LSE and O (SPEC 6; +inf: out of
                 * contract) */
                const ld BL = (ld)bl[smattn__lse_off(prob, fbnd.lse.stride, b, h, i)];
                const double *BO = bo + smattn__row_off(prob, fbnd.o.stride, b, i, h, 0);
                int fwd_out = !(BL < HUGE_VALL);
                for (int64_t cc = 0; cc < Dv; cc++)
                    if (!(BO[cc] < HUGE_VAL))
                        fwd_out = 1;
                if (nanrow || badrow || fwd_out) {
                    for (int64_t d = 0; d < D; d++)
                        put(&bound->dq, smattn__row_off(prob, bound->dq.stride, b, i, h, d), HUGE_VAL);
                    for (int64_t t = 0; t < nk; t++) {
                        a.bad[(b * T + idx[t]) * Hkv + g] = 1;
                        if (db_sum)
                            tb.bad[DBK(b, h, i, idx[t])] = 1;
                        else if (want_db)
                            put(&bound->dbias,
                                smattn__off4(bound->dbias.stride, b, h, i, idx[t]), HUGE_VAL);
                    }
                    if (want_ds && has_sink)
                        ts.bad[h] = 1;
                    continue;
                }
                /* Exact scores, P, LSE, O, dP and Delta in long double (SPEC 10.7 B11). */
                ld M = -HUGE_VALL, smax = 0, amax = 0;
                for (int64_t t = 0; t < nk; t++) {
                    ld dot = 0, asum = 0;
                    for (int64_t d = 0; d < D; d++) {
                        ld pr = qd[d] * krow[t * D + d];
                        dot += pr;
                        asum += fabsl(pr);
                    }
                    sig[t] = scale * dot;
                    aj[t] = asc * asum;
                    ld sc = cap ? c * tanhl(sig[t] / c) : sig[t];
                    al[t] = 0;
                    if (in->bias.data) { /* SPEC 2.5; ALiBi's mask mode scales it (2.8) */
                        ld bv = ldload(&in->bias, smattn__off4(in->bias.stride, b, h, i, idx[t]));
                        if (prob->alibi_mode == SMATTN_ALIBI_MASK)
                            al[t] = fabsl(bv *= slope);
                        sc += bv;
                    }
                    if (alibi_dist) { /* SPEC 2.8: exact */
                        ld av = (ld)smattn__alibi_term(prob, b, h, i, idx[t]);
                        al[t] = fabsl(av);
                        sc += av;
                    }
                    s[t] = sc;
                    if (sc > M)
                        M = sc;
                    smax = fmaxl(smax, fabsl(sc));
                    amax = fmaxl(amax, aj[t]);
                }
                const ld Mp = has_sink && zeta > M ? zeta : M;
                ld L = 0;
                for (int64_t t = 0; t < nk; t++)
                    L += expl(s[t] - Mp);
                if (has_sink)
                    L += expl(zeta - Mp);
                const ld lse = Mp + logl(L);
                ld Delta = 0, sumA = 0;
                for (int64_t cc = 0; cc < Dv; cc++)
                    ov[cc] = 0;
                for (int64_t t = 0; t < nk; t++) {
                    p[t] = expl(s[t] - Mp) / L;
                    lp[t] = s[t] - lse;
                    ld dp = 0, A = 0;
                    for (int64_t cc = 0; cc < Dv; cc++) {
                        ld x = dov[cc] * vrow[t * Dv + cc];
                        dp += x;
                        A += fabsl(x);
                        ov[cc] += p[t] * vrow[t * Dv + cc];
                    }
                    dP[t] = dp;
                    Aj[t] = A;
                    Delta += p[t] * dp;
                    sumA = fmaxl(sumA, A);
                }
                /* the evaluation's relative slack for this row (B11) */
                const ld rs = EVAL_UNIT * ((ld)(D + Dv + nk + 16) +
                                           16 * (smax + fabsl(lse) + amax + fabsl(Delta) + 1));
                int row_ovf = !(sumA < m.Omega) || !(fabsl(M) + amax < m.Omega);
                /* B3: Delta from the stored O: |dO| B_O (which holds u_o |O| |dO|) and the
                 * dot product's rounding. */
                ld eDelta = 0, dOO = 0;
                for (int64_t cc = 0; cc < Dv; cc++) {
                    eDelta += fabsl(dov[cc]) * (ld)BO[cc];
                    dOO += fabsl(dov[cc]) * (fabsl(ov[cc]) + (ld)BO[cc]);
                }
                eDelta += gDv * dOO + (ld)Dv * m.om;
                const ld gx = has_dlse ? gam(2, m.u) : m.u;
                for (int64_t t = 0; t < nk; t++) {
                    /* B1: the score error (SPEC 6.2) and P = exp(fl(s_hat - LSE_hat)) */
                    ld Dj = cap ? g4 * aj[t] + phi_s * fminl(c, (1 + g4) * aj[t]) : g2 * aj[t];
                    if (has_bias && alibi) /* 6.2.3: the bias, then the ALiBi addend */
                        Dj = (1 + m.us) * ((1 + m.us) * Dj + m.us * (fabsl(s[t]) + al[t]) +
                                           gam(2, m.us) * al[t]) +
                             m.us * fabsl(s[t]);
                    else if (alibi) /* 6.2.3: an addend computed with two roundings */
                        Dj = (1 + m.us) * (Dj + gam(2, m.us) * al[t]) + m.us * fabsl(s[t]);
                    else if (has_bias)
                        Dj = (1 + m.us) * Dj + m.us * fabsl(s[t]);
                    Dl[t] = Dj;
                    ld xj = Dj + BL + m.u * (fabsl(s[t] - lse) + Dj + BL);
                    eP[t] = p_expm1(p[t], lp[t], xj + m.l_f) + m.om;
                    ePv[t] = eP[t] + m.up * (p[t] + eP[t]) + m.om; /* B1: P rounded to u_p */
                    /* B2, B4: dP and x = dP - Delta + dLSE, relative to |dP| + |Delta| */
                    ld edP = gDv * Aj[t] + (ld)Dv * m.om;
                    ld x = dP[t] - Delta + dlse;
                    ld ex = edP + eDelta +
                            gx * (fabsl(dP[t]) + edP + fabsl(Delta) + eDelta + fabsl(dlse)) +
                            m.om;
                    /* B5: dS = P x */
                    dS[t] = p[t] * x;
                    ld ax = fabsl(x) + ex;
                    eS[t] = eP[t] * ax + p[t] * ex + m.u * (p[t] + eP[t]) * ax + m.om;
                    /* B6: softcap's derivative 1 - tanh^2 recomputed from the kernel's score */
                    ld eU = eS[t];
                    dU[t] = dS[t];
                    if (cap) {
                        ld tt = tanhl(sig[t] / c), at = fabsl(tt);
                        ld et = g4 * aj[t] / c + 2 * E * m.us * (at + g4 * aj[t] / c);
                        ld gg = 1 - tt * tt;
                        ld eg = fminl(et * (2 * at + et), 1) +
                                gam(3, m.u) * (1 + (at + et) * (at + et));
                        ld aS = fabsl(dS[t]) + eS[t];
                        dU[t] = dS[t] * gg;
                        eU = eS[t] * gg + aS * eg + m.u * aS * (gg + eg) + m.om;
                    }
                    eW[t] = eU + m.up * (fabsl(dU[t]) + eU) + m.om; /* rounded to u_p */
                    if (want_db) {
                        ld eb = eS[t] + m.up * (fabsl(dS[t]) + eS[t]);
                        if (db_sum) { /* B12: a term of the sum */
                            size_t k = DBK(b, h, i, idx[t]);
                            tsum_add(&tb, k, dS[t], eb, fabsl(p[t]) * ax + eb, rs);
                            if (row_ovf)
                                tb.bad[k] = 1;
                        } else {
                            double vb = row_ovf ? HUGE_VAL
                                                : publish(eb, dS[t],
                                                          rs * (fabsl(p[t]) * ax + eb), &fb);
                            put(&bound->dbias,
                                smattn__off4(bound->dbias.stride, b, h, i, idx[t]), vb);
                        }
                    }
                }
                /* B13: the row's term of dsink_h, P_sink (dLSE - Delta), P_sink from the
                 * stored LSE as B1 with an exact score, Delta from the stored O (B3) */
                if (want_ds && has_sink) {
                    ld ps = expl(zeta - Mp) / L, lps = zeta - lse;
                    ld xs = BL + m.u * (fabsl(lps) + BL);
                    ld ePs = p_expm1(ps, lps, xs + m.l_f) + m.om;
                    ld y = dlse - Delta;
                    ld ey = eDelta + m.u * (fabsl(dlse) + fabsl(Delta) + eDelta) + m.om;
                    ld ay = fabsl(y) + ey;
                    ld et = ePs * ay + ps * ey + m.u * (ps + ePs) * ay + m.om;
                    tsum_add(&ts, (size_t)h, ps * y, et, ps * ay + et, rs);
                    if (row_ovf)
                        ts.bad[h] = 1;
                }
                /* B7: dQ = scale sum_j dU_j k_j, n terms in any order */
                const ld gn = gam((ld)nk, m.u);
                for (int64_t d = 0; d < D; d++) {
                    ld Z = 0, EZ = 0, Mz = 0;
                    for (int64_t t = 0; t < nk; t++) {
                        ld ak = fabsl(krow[t * D + d]);
                        Z += dU[t] * krow[t * D + d];
                        EZ += eW[t] * ak;
                        Mz += (fabsl(dU[t]) + eW[t]) * ak;
                    }
                    EZ += gn * Mz + 2 * (ld)nk * m.om;
                    ld Eq = asc * (EZ + m.phi * (Mz + EZ)) + m.om;
                    vq = row_ovf || !(asc * Mz * (1 + m.phi) * (1 + gn) < m.Omega)
                             ? HUGE_VAL
                             : publish(Eq, scale * Z, rs * asc * Mz, &fq);
                    put(&bound->dq, smattn__row_off(prob, bound->dq.stride, b, i, h, d), vq);
                }
                /* B8, B9: the row's terms of dK and dV */
                for (int64_t t = 0; t < nk; t++) {
                    const size_t kv = (size_t)((b * T + idx[t]) * Hkv + g);
                    a.cnt[kv]++;
                    if (row_ovf)
                        a.bad[kv] = 1;
                    ld evk = 0;
                    for (int64_t d = 0; d < D; d++) {
                        const size_t o = kv * (size_t)D + (size_t)d;
                        ld aq = fabsl(qd[d]);
                        a.kx[o] += dU[t] * qd[d];
                        a.ke[o] += eW[t] * aq;
                        a.km[o] += (fabsl(dU[t]) + eW[t]) * aq;
                        evk = fmaxl(evk, (fabsl(dU[t]) + eW[t]) * aq);
                    }
                    for (int64_t cc = 0; cc < Dv; cc++) {
                        const size_t o = kv * (size_t)Dv + (size_t)cc;
                        ld ad = fabsl(dov[cc]);
                        a.vx[o] += p[t] * dov[cc];
                        a.ve[o] += ePv[t] * ad;
                        a.vm[o] += (p[t] + ePv[t]) * ad;
                    }
                    a.ev[kv] = fmaxl(a.ev[kv], rs); /* times the element's majorant below */
                }
            }
        }
    /* B8-B10: dK and dV over the rows that see each key, in any order; with a layout
     * only the keys t < T_b have storage (the rest of it was given bound 0 above) */
    for (int64_t b = 0; b < B; b++)
        for (int64_t j = 0; j < (prob->layout ? smattn__kv_len(prob, b) : T); j++)
            for (int64_t g = 0; g < Hkv; g++) {
                const size_t kv = (size_t)((b * T + j) * Hkv + g);
                const ld N = (ld)a.cnt[kv], gN = gam(N, m.u);
                const ld rs = a.ev[kv];
                for (int64_t d = 0; d < D; d++) {
                    const size_t o = kv * (size_t)D + (size_t)d;
                    double v = 0;
                    if (a.bad[kv])
                        v = HUGE_VAL;
                    else if (a.cnt[kv]) {
                        ld EZ = a.ke[o] + gN * a.km[o] + 2 * N * m.om;
                        ld Ek = asc * (EZ + m.phi * (a.km[o] + EZ)) + m.om;
                        v = !(asc * a.km[o] * (1 + m.phi) * (1 + gN) < m.Omega)
                                ? HUGE_VAL
                                : publish(Ek, scale * a.kx[o], rs * asc * a.km[o], &fk);
                    }
                    put(&bound->dk, smattn__key_off(prob, bound->dk.stride, b, j, g, d), v);
                }
                for (int64_t cc = 0; cc < Dv; cc++) {
                    const size_t o = kv * (size_t)Dv + (size_t)cc;
                    double v = 0;
                    if (a.bad[kv])
                        v = HUGE_VAL;
                    else if (a.cnt[kv]) {
                        ld Ev = a.ve[o] + gN * a.vm[o] + 2 * N * m.om;
                        v = !(a.vm[o] * (1 + gN) < m.Omega)
                                ? HUGE_VAL
                                : publish(Ev, a.vx[o], rs * a.vm[o], &fv);
                    }
                    put(&bound->dv, smattn__key_off(prob, bound->dv.stride, b, j, g, cc), v);
                }
            }
#undef DBK
    /* B12, B13: the sums */
    for (int64_t k = 0; k < (int64_t)nbx; k++) {
        int64_t j = k % bx[3], i = k / bx[3] % bx[2], h = k / bx[3] / bx[2] % bx[1],
                b = k / bx[3] / bx[2] / bx[1];
        put(&bound->dbias, smattn__off4(bound->dbias.stride, b, h, i, j),
            tsum_bound(&tb, (size_t)k, &m, &fb));
    }
    for (int64_t h = 0; want_ds && h < Hq; h++)
        put(&bound->dsinks, h * bound->dsinks.stride[0], tsum_bound(&ts, (size_t)h, &m, &fs));
    st = SMATTN_OK;
done:
    tsum_free(&tb), tsum_free(&ts);
    free(bo), free(bl), free(a.kx), free(a.vx), free(a.ev), free(a.cnt), free(a.bad);
    free(idx), free(buf), free(al), free(qd), free(dov), free(ov), free(krow), free(vrow);
    return st;
}
