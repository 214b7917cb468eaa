/* SPDX-License-Identifier: MIT */
/* bound.c: the a-posteriori error bound of SPEC 6 and the error metrics of SPEC 6.10. */
#include <float.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "core/internal.h"

#include "core/bound_math.h"

/* SPEC 6.9: the bound is evaluated in long double, then inflated. */
#define EVAL_REL 0x1p-20L   /* relative slack for B(x_tilde) vs B(x) and the formulas */
#define EVAL_E 8.0L         /* ulps allowed for expl, logl, tanhl, expm1l (SPEC 6.9) */

smattn_precision smattn_precision_of(smattn_dtype t)
{
    smattn_precision m;
    memset(&m, 0, sizeof m);
    int k = (t == SMATTN_F64 || t == SMATTN_F16 || t == SMATTN_BF16) ? (int)t : SMATTN_F32;
    const smattn_format *f = &smattn__formats[k];
    m.u_score = ldexp(1.0, -f->prec);
    m.u_acc = m.u_score;
    m.exp_ulps = 4.0;
    m.u_p = 0.0;
    m.blocks = 1;
    m.acc_len = 0;
    m.tiny = ldexp(1.0, f->emin - f->prec + 1); /* subnormal spacing (gradual underflow) */
    return m;
}

/* The model of SPEC 6.1 with its derived constants. */
typedef struct model {
    ld us, u, E, up, omega;
    ld nb, ka;      /* ka = 0: n */
    ld eps_f, l_f, phi_s, omega_s; /* 2Eu, -log(1-eps_f), phi_s, omega* */
    ld u_out, omega_out;           /* output rounding (0 for the evaluation model) */
    int check_range;
    int sink_in_max; /* SMATTN__BOUND_SINK_IN_MAX: no weight has a positive exponent */
    ld Omega_s, Omega_a;
    ld omega_p;      /* SPEC 6.11 Q3: subnormal spacing of the P format (0: none) */
    int q_rounded;   /* SPEC 6.11 Q4: the row's eq[] (Q's rounding) enters the scores */
} model;

static int model_init(model *m, const smattn_precision *pm)
{
    if (!(pm->u_score >= 0 && pm->u_score < 0.25) || !(pm->u_acc >= 0 && pm->u_acc < 0.25) ||
        !(pm->exp_ulps >= 0 && pm->exp_ulps < 1e6) || !(pm->u_p >= 0 && pm->u_p < 0.25) ||
        pm->blocks < 1 || pm->acc_len < 0 || !(pm->tiny >= 0 && pm->tiny < 1))
        return 0;
    memset(m, 0, sizeof *m);
    m->us = (ld)pm->u_score;
    m->u = (ld)pm->u_acc;
    m->E = (ld)pm->exp_ulps;
    m->up = (ld)pm->u_p;
    m->omega = (ld)pm->tiny;
    m->nb = (ld)pm->blocks;
    m->ka = (ld)pm->acc_len;
    m->check_range = 1;
    return 1;
}

static void model_derive(model *m)
{
    m->eps_f = 2 * m->E * m->u;
    m->l_f = m->eps_f < 1 ? -log1pl(-m->eps_f) : HUGE_VALL;
    m->phi_s = (1 + 2 * m->E * m->us) * (1 + m->us) - 1;
    m->omega_s = (1 + m->E) * m->omega;
    m->Omega_s = range_of(m->us);
    m->Omega_a = range_of(m->u);
}

/* The long double recomputation seen as a kernel of the model (SPEC 6.9). */
static void model_eval(model *m)
{
    memset(m, 0, sizeof *m);
    m->us = m->u = LDBL_EPSILON / 2;
    m->E = EVAL_E;
    m->nb = 1;
    m->ka = 0;
    m->omega = LDBL_TRUE_MIN;
    m->check_range = 0;
    model_derive(m);
}

/* One row's exact data, recomputed in long double (SPEC 6.9). Terms 0..n-1 are the
 * visible keys (key index in idx), then the sink if present. */
typedef struct rowdata {
    int64_t nk;        /* visible keys */
    int64_t n;         /* terms: nk + sink */
    int has_sink;
    int has_bias, softcap;
    int has_alibi;     /* an ALiBi addend after the bias (SPEC 2.8, 6.2.3) */
    ld c;              /* softcap */
    ld *al;            /* |ALiBi addend| per key: |m d|, or |m bias| in the mask mode */
    int64_t *idx;
    ld *s, *a, *abig;  /* score, a_j, max(1,|scale|) sum |q k| (overflow test) */
    ld *e, *p, *lp;    /* e^{s-M'}, p_j, log p_j = s_j - LSE */
    ld *eq;            /* SPEC 6.11 Q4: |scale| sum_d (u_q A_blk(d) + eta_q) |k_jd| */
    ld M, Mp, LM, lse; /* M, M', L relative to M', LSE */
    ld D;              /* D (0 for softmax) */
} rowdata;

/* Per-model row quantities (SPEC 6.2-6.5). */
typedef struct rowbound {
    ld *Delta, *Lam, *pR; /* per term: Delta_j, Lambda_j, p_j R_j (caller's scratch) */
    ld Dmax, Lbar, SR;
    ld cN, cL, tauO, tauL, kN;
    ld Lam_max;       /* max_j Lambda_j */
    ld UL, Lmin;      /* underflow of L; lower bound of the computed L */
    ld X, Wn;         /* overflow estimates of L (SPEC 6.8) */
    ld ElogL, Else, Blse;
    int out; /* out of contract (SPEC 6.8): everything +inf */
} rowbound;

/* SPEC 6.2-6.3 and the row-wide parts of 6.4-6.5 for model m. */
static void row_common(const rowdata *r, const model *m, rowbound *rb)
{
    ld *const Delta = rb->Delta, *const Lam = rb->Lam, *const pR = rb->pR;
    memset(rb, 0, sizeof *rb);
    rb->Delta = Delta;
    rb->Lam = Lam;
    rb->pR = pR;
    const ld n = (ld)r->n;
    /* SPEC 6.2: score errors. */
    const ld g2 = gam(r->D + 2, m->us), g4 = gam(r->D + 4, m->us);
    ld Dmax = 0;
    for (int64_t t = 0; t < r->n; t++) {
        ld Dl = 0;
        if (t < r->nk) {
            /* SPEC 6.11 Q4: Q's rounding perturbs the dot product by at most eq, then
             * passes through its roundings (1 + gamma) and softcap (1-Lipschitz) */
            const ld eq = m->q_rounded ? r->eq[t] : 0;
            if (r->softcap)
                Dl = g4 * r->a[t] + (1 + g4) * eq +
                     m->phi_s * fminl(r->c, (1 + g4) * (r->a[t] + eq)); /* 6.2.2 */
            else
                Dl = g2 * r->a[t] + (1 + g2) * eq; /* 6.2.1 */
            if (r->has_bias && r->has_alibi) /* 6.2.3: the bias, then the ALiBi addend */
                Dl = (1 + m->us) * ((1 + m->us) * Dl + m->us * (fabsl(r->s[t]) + r->al[t]) +
                                    gam(2, m->us) * r->al[t]) +
                     m->us * fabsl(r->s[t]);
            else if (r->has_alibi) /* 6.2.3: an addend computed with two roundings */
                Dl = (1 + m->us) * (Dl + gam(2, m->us) * r->al[t]) + m->us * fabsl(r->s[t]);
            else if (r->has_bias)
                Dl = (1 + m->us) * Dl + m->us * fabsl(r->s[t]); /* 6.2.3 */
        }
        rb->Delta[t] = Dl; /* the sink: 0 (6.2.4) */
        /* SPEC 6.2.5: the kernel's maximum lies in [M - Delta_m, M' + Delta_m], with
         * Delta_m = max_j (s_j + Delta_j - M); a far key (a -3.4e38 bias) has a huge
         * Delta_j but does not move the maximum. */
        if (t < r->nk && r->s[t] + Dl - r->M > Dmax)
            Dmax = r->s[t] + Dl - r->M;
    }
    rb->Dmax = Dmax;
    /* SPEC 6.3: weight errors Lambda_j, pR_j, Lbar, SR. */
    ld Lbar = 0, SR = 0, Lmax = 0;
    for (int64_t t = 0; t < r->n; t++) {
        ld d = (t < r->nk) ? (r->Mp - r->s[t]) + rb->Delta[t] + Dmax
                           : fabsl(r->s[t] - r->M) + Dmax;
        ld L = rb->Delta[t] + m->u * d + m->nb * m->l_f;
        rb->Lam[t] = L;
        rb->pR[t] = p_expm1(r->p[t], r->lp[t], L);
        Lbar += r->p[t] * fminl(L, 1);
        SR += rb->pR[t];
        if (L > Lmax)
            Lmax = L;
    }
    rb->Lbar = Lbar;
    rb->SR = SR;
    rb->Lam_max = Lmax;
    if (!(SR == SR) || !(Lmax == Lmax)) {
        rb->out = 1;
        return;
    }
    /* SPEC 6.4: accumulation constants. */
    const ld ka = m->ka > 0 ? m->ka : n;
    const ld kN = ka + m->nb - 1, kL = ka + m->nb - 2;
    const ld xi = (1 + m->up) * (1 + gam(kN + 2, m->u)) - 1;
    rb->kN = kN;
    rb->tauO = (1 + m->up) * (1 + gam(kL, m->u)) - 1;
    rb->tauL = gam(kL, m->u);
    rb->cN = xi / (1 - rb->tauO);
    rb->cL = (gam(2, m->u) + rb->tauO) / (1 - rb->tauO);
    /* SPEC 6.4: underflow. The computed row sum is at least the kernel's own top weight
     * exp(0) >= 1 - eps_f (sums of non-negative terms never decrease under rounding). */
    rb->UL = 8 * n * m->nb * m->omega_s;
    rb->Lmin = 1 - m->eps_f;
    if (!(rb->tauO < 1) || !(rb->Lmin > rb->UL) || !(m->nb * m->eps_f <= 0.5L)) {
        rb->out = 1;
        return;
    }
    /* SPEC 6.8: the kernel's arithmetic must not overflow. A weight is at most Wmax (2,
     * unless a sink above the keys is left out of the maximum); X bounds the weights via
     * the exact ones. Either bound may be used. */
    rb->X = expl(Dmax + (r->Mp - r->M)) * r->LM;
    rb->Wn = (r->has_sink && !m->sink_in_max && r->s[r->nk] > r->M
                  ? 2 * expl(r->s[r->nk] - r->M + Dmax)
                  : 2) *
             n;
    if (m->check_range) {
        const ld gs = 1 + g2;
        for (int64_t t = 0; t < r->nk; t++)
            if ((r->abig[t] + (m->q_rounded ? r->eq[t] : 0)) * gs >= m->Omega_s) {
                rb->out = 1;
                return;
            }
        if (fabsl(r->Mp) + Dmax >= m->Omega_s) {
            rb->out = 1;
            return;
        }
        ld Lk = fminl(rb->X * (1 + SR), rb->Wn) * (1 + gam(kL, m->u));
        if (!(Lk < m->Omega_a)) {
            rb->out = 1;
            return;
        }
    }
    /* SPEC 6.5: LSE. log(1 + rho_bar) lies in [log(sum p e^-Lambda), log(1 + SR)], and
     * LSE is 1-Lipschitz in the scores: |log(1 + rho_bar)| <= Lambda_max as well. */
    ld lo_side = Lbar < 1 ? -log1pl(-Lbar) : HUGE_VALL;
    ld lrho = fminl(fmaxl(log1pl(SR), lo_side), Lmax);
    ld ElogL = lrho + rb->tauL / (1 - rb->tauL) + rb->UL / (rb->Lmin - rb->UL);
    rb->ElogL = ElogL;
    ld E1 = ElogL + m->eps_f * ((r->lse - r->M) + Dmax + ElogL) + m->omega_s;
    rb->Else = E1 + gam(3, m->u) * (fabsl(r->lse) + E1);
    rb->Blse = (1 + m->u_out) * rb->Else + m->u_out * fabsl(r->lse) + m->omega_out / 2;
}

/* SPEC 6.4: the bound of O column c for model m; v[t] the column (v = 0 for the sink). */
static ld o_bound(const rowdata *r, const model *m, const rowbound *rb, const ld *v, ld o,
                  int *overflow)
{
    ld Ew = 0, Spv = 0, SpRv = 0, Vc = 0, spread = 0;
    for (int64_t t = 0; t < r->n; t++) {
        ld av = fabsl(v[t]), dv = fabsl(v[t] - o);
        Ew += rb->pR[t] * dv; /* perturbed-weights identity */
        Spv += r->p[t] * av;
        SpRv += rb->pR[t] * av;
        if (av > Vc)
            Vc = av;
        if (dv > spread)
            spread = dv;
    }
    /* The perturbed output is a convex combination of the v_j (and 0 for the sink): it
     * lies within `spread` of o, and sum p~|v| and |o~| are at most V_c. */
    ld Sv;
    if (rb->Lbar < 1) {
        Ew = fminl(Ew / (1 - rb->Lbar), spread);
        Sv = fminl((Spv + SpRv) / (1 - rb->Lbar), Vc);
    } else {
        Ew = spread;
        Sv = Vc;
    }
    ld Ot = fminl(fabsl(o) + Ew, Vc);
    ld Eacc = rb->cN * Sv + rb->cL * Ot;
    /* SPEC 6.11 Q3: P rounded to a format with subnormal spacing omega_p adds at most
     * omega_p / 2 per weight to N */
    ld UN = 8 * (ld)r->n * m->nb * m->omega_s * (1 + Vc) + (ld)r->n * (m->omega_p / 2) * Vc;
    ld UO = (1 + gam(2, m->u)) * (UN + (fabsl(o) + Ew + Eacc) * rb->UL) / (rb->Lmin - rb->UL);
    if (m->check_range) {
        ld X = fminl(rb->X * (Spv + SpRv), rb->Wn * Vc) * (1 + gam(rb->kN, m->u)) * (1 + m->up);
        if (!(X < m->Omega_a))
            *overflow = 1;
    }
    ld EO = Ew + Eacc + UO;
    return (1 + m->u_out) * EO + m->u_out * fabsl(o) + m->omega_out / 2;
}

/* SPEC 6.6: the bound of P for term t (a visible key) under model m. */
static ld p_bound(const rowdata *r, const model *m, const rowbound *rb, int64_t t)
{
    ld p = r->p[t], lp = r->lp[t];
    ld mu = rb->ElogL + 2 * m->u / (1 - m->u);
    ld E1 = p_expm1(p, lp, rb->Lam[t] + mu) +
            (1 + gam(2, m->u)) * 2 * m->omega_s / (rb->Lmin - rb->UL);
    ld x = rb->Delta[t] + rb->Else + m->u * (fabsl(r->s[t] - r->lse) + rb->Delta[t] + rb->Else);
    ld E2 = p_expm1(p, lp, x + m->l_f) + m->omega_s;
    ld EP = fmaxl(E1, E2);
    return (1 + m->u_out) * EP + m->u_out * p + m->omega_out / 2;
}

/* SPEC 6.9: combine the kernel's bound and the evaluation's own, at the recomputed x. */
static double publish(ld Bk, ld Bld, ld x, ld thr)
{
    if (!(Bk < HUGE_VALL) || !(Bld < HUGE_VALL))
        return HUGE_VAL;
    ld B = (Bk + 2 * Bld) * (1 + EVAL_REL) + 0x1p-53L * (fabsl(x) + Bld) + 0x1p-1074L;
    if (fabsl(x) + B >= thr) /* SPEC 6.8: the output may round to an infinity */
        return HUGE_VAL;
    if (B > (ld)DBL_MAX)
        return HUGE_VAL;
    double d = (double)B;
    if ((ld)d < B) /* round up */
        d = nextafter(d, HUGE_VAL);
    return d;
}

/* The dtype's output rounding: unit roundoff, subnormal spacing, overflow threshold. */
static void out_format(smattn_dtype t, ld *u, ld *w, ld *thr)
{
    const smattn_format *f = &smattn__formats[t];
    *u = ldexpl(1, -f->prec);
    *w = ldexpl(1, f->emin - f->prec + 1);
    *thr = ldexpl(2 - ldexpl(1, -f->prec), f->emax);
}

static void put(const smattn_out_tensor *t, int64_t off, double x)
{
    memcpy((unsigned char *)t->data + off * 8, &x, 8); /* any address */
}

/* Row by row: the visible set (SPEC 3), the exact scores, P, O and LSE recomputed in long
 * double, then the bound of SPEC 6.2-6.6 for the kernel's model and for the recomputation's
 * own model, combined by publish(). Long double is enough: the bound needs a few correct
 * digits, and the recomputation is itself a kernel of the model with u = 2^-64 whose own
 * bound is added (SPEC 6.9); binary64 would leave no margin for binary64 kernels. */
smattn_status smattn_bound(const smattn_problem *prob, const smattn_inputs *in,
                           const smattn_precision *pm, const smattn_outputs *fmt,
                           const smattn_outputs *bound)
{
    return smattn__bound_flags(prob, in, pm, fmt, bound, 0);
}

static smattn_status bound_run(const smattn_problem *prob, const smattn_inputs *in,
                               const smattn_precision *pm, const smattn_quant_model *qm,
                               const smattn_outputs *fmt, const smattn_outputs *bound,
                               unsigned flags, const int64_t *list, int64_t nlist);

smattn_quant_model smattn_quant_model_default(void)
{
    smattn_quant_model q;
    memset(&q, 0, sizeof q);
    q.q_block = 1;
    return q;
}

/* SPEC 6.11 Q4's two cases. q8_0 as ggml quantises: |q - x/d| <= 1/2 + 2^-15 and
 * |d_h - d| <= d 2^-11 (1 + 2^-12) + 2^-25 with d = amax / 127. */
smattn_quant_model smattn_quant_model_of(smattn_dtype t)
{
    smattn_quant_model q = smattn_quant_model_default();
    if (t == SMATTN_F16) {
        q.u_q = 0x1p-11;
        q.eta_q = 0x1p-25;
    } else if (t == SMATTN_Q8_0) {
        q.u_q = (0.5 + 0x1p-15 + 127 * 0x1p-11 * (1 + 0x1p-12)) / 127;
        q.eta_q = 127 * 0x1p-25;
        q.q_block = SMATTN_QBLOCK;
    }
    return q;
}

smattn_status smattn_bound_quant(const smattn_problem *prob, const smattn_inputs *in,
                                 const smattn_precision *pm, const smattn_quant_model *qm,
                                 const smattn_outputs *fmt, const smattn_outputs *bound)
{
    return bound_run(prob, in, pm, qm, fmt, bound, 0, NULL, 0);
}

smattn_status smattn__bound_flags(const smattn_problem *prob, const smattn_inputs *in,
                                  const smattn_precision *pm, const smattn_outputs *fmt,
                                  const smattn_outputs *bound, unsigned flags)
{
    return bound_run(prob, in, pm, NULL, fmt, bound, flags, NULL, 0);
}

smattn_status smattn__bound_rows(const smattn_problem *prob, const smattn_inputs *in,
                                 const smattn_precision *pm, const smattn_outputs *fmt,
                                 const smattn_outputs *bound, unsigned flags, const int64_t *rows,
                                 int64_t nrows)
{
    if (nrows < 0 || (nrows > 0 && !rows))
        return SMATTN_ERR_NULL;
    return bound_run(prob, in, pm, NULL, fmt, bound, flags, rows, nrows);
}

/* Every row (list NULL), or the nlist rows of list. */
static smattn_status bound_run(const smattn_problem *prob, const smattn_inputs *in,
                               const smattn_precision *pm, const smattn_quant_model *qm,
                               const smattn_outputs *fmt, const smattn_outputs *bound,
                               unsigned flags, const int64_t *list, int64_t nlist)
{
    if (!prob || !in || !pm || !fmt || !bound)
        return SMATTN_ERR_NULL;
    smattn_status st = smattn_validate(prob, in, bound);
    if (st)
        return st;
    const int64_t nrows = list ? nlist : prob->B * prob->Hq * prob->S;
    for (int64_t k = 0; list && k < nlist; k++)
        if (list[k] < 0 || list[k] >= prob->B * prob->Hq * prob->S ||
            (k > 0 && list[k] <= list[k - 1]))
            return SMATTN_ERR_SHAPE;
    const int att = prob->op == SMATTN_OP_ATTENTION;
    const smattn_out_tensor *bo = att ? &bound->o : NULL, *bl = &bound->lse, *bp = &bound->p;
    const int want_o = att && bo->data, want_l = bl->data != NULL, want_p = bp->data != NULL;
    if ((want_o && (bo->dtype != SMATTN_F64 || !is_float(fmt->o.dtype))) ||
        (want_l && (bl->dtype != SMATTN_F64 || !is_float(fmt->lse.dtype))) ||
        (want_p && (bp->dtype != SMATTN_F64 || !is_float(fmt->p.dtype))))
        return SMATTN_ERR_DTYPE;
    model mk, me;
    if (!model_init(&mk, pm))
        return SMATTN_ERR_OPTION;
    /* SPEC 6.11 Q2-Q4 (attention only; qm NULL: none) */
    const int64_t Dq = att ? prob->D : 1;
    if (qm && (!(qm->omega_p >= 0 && qm->omega_p < 1) || !(qm->u_q >= 0 && qm->u_q < 1) ||
               !(qm->eta_q >= 0 && qm->eta_q < 1) || qm->q_block < 1 || qm->q_block > Dq ||
               Dq % qm->q_block != 0))
        return SMATTN_ERR_OPTION;
    const int v_after = att && qm && qm->v_descale_after;
    if (v_after && want_o && fmt->o.dtype == SMATTN_F64)
        return SMATTN_ERR_DTYPE; /* Q2's rounding through binary32 */
    mk.omega_p = qm ? (ld)qm->omega_p : 0;
    mk.q_rounded = att && qm && (qm->u_q > 0 || qm->eta_q > 0);
    const ld u_q = qm ? (ld)qm->u_q : 0, eta_q = qm ? (ld)qm->eta_q : 0;
    const int64_t qblk = qm ? qm->q_block : 1;
    mk.sink_in_max = (flags & SMATTN__BOUND_SINK_IN_MAX) != 0;
    ld uo_o = 0, wo_o = 0, thr_o = HUGE_VALL, uo_l = 0, wo_l = 0, thr_l = HUGE_VALL, uo_p = 0,
       wo_p = 0, thr_p = HUGE_VALL;
    if (want_o)
        out_format(fmt->o.dtype, &uo_o, &wo_o, &thr_o);
    if (want_l)
        out_format(fmt->lse.dtype, &uo_l, &wo_l, &thr_l);
    if (want_p)
        out_format(fmt->p.dtype, &uo_p, &wo_p, &thr_p);
    model_derive(&mk);
    model_eval(&me); /* the recomputation reads the real inputs: no departure */

    const int64_t T = prob->T, D = att ? prob->D : 0, Dv = att ? prob->Dv : 0;
    const int64_t N = T + 1;
    rowdata r;
    memset(&r, 0, sizeof r);
    r.idx = malloc((size_t)N * sizeof *r.idx);
    ld *buf = malloc((size_t)N * 14 * sizeof *buf);
    ld *qd = malloc((size_t)(D > 0 ? D : 1) * 2 * sizeof *qd); /* q, then Q4's per-d error */
    ld *vcol = malloc((size_t)N * sizeof *vcol);
    ld *Vrow = malloc((size_t)N * (size_t)(Dv > 0 ? Dv : 1) * sizeof *Vrow);
    if (!r.idx || !buf || !qd || !vcol || !Vrow) {
        free(r.idx); free(buf); free(qd); free(vcol); free(Vrow);
        return SMATTN_ERR_NOMEM;
    }
    r.s = buf; r.a = buf + N; r.abig = buf + 2 * N; r.e = buf + 3 * N; r.p = buf + 4 * N;
    r.lp = buf + 5 * N;
    rowbound rk, re;
    rk.Delta = buf + 6 * N; rk.Lam = buf + 7 * N; rk.pR = buf + 8 * N;
    re.Delta = buf + 9 * N; re.Lam = buf + 10 * N; re.pR = buf + 11 * N;
    r.al = buf + 12 * N;
    r.eq = buf + 13 * N;
    r.D = (ld)D;
    r.softcap = prob->softcap > 0;
    r.c = (ld)prob->softcap;
    const ld scale = (ld)prob->scale, big = fmaxl(1, fabsl(scale));

    for (int64_t k = 0; k < nrows; k++) {
                const int64_t row = list ? list[k] : k; /* (b Hq + h) S + i */
                const int64_t b = row / (prob->Hq * prob->S), h = (row / prob->S) % prob->Hq,
                              i = row % prob->S;
                const int64_t g = att ? smattn__kv_head(prob, h) : 0;
                /* a packed batch's padding rows have no O or LSE (SPEC 2.7) */
                const int stored = smattn__row_stored(prob, b, i);
                const int row_o = want_o && stored, row_l = want_l && stored;
                int64_t lo, hi;
                smattn__key_range(prob, b, i, &lo, &hi);
                /* SPEC 3.4-3.6: the visible set; row-poisoning inputs (SPEC 4.2). */
                int nanrow = 0;
                r.nk = 0;
                /* the mask mode's bias is the ALiBi addend, slope x bias (SPEC 2.8) */
                r.has_bias = in->bias.data != NULL && prob->alibi_mode != SMATTN_ALIBI_MASK;
                r.has_alibi = prob->alibi_mode != SMATTN_ALIBI_NONE;
                const ld slope = (ld)smattn__alibi_slope(prob, b, h);
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
                    if (!att) {
                        double xv = smattn_load(in->x.data, in->x.dtype,
                                                smattn__off4(in->x.stride, b, h, i, j));
                        if (xv == -HUGE_VAL)
                            continue;
                        if (!isfinite(xv))
                            nanrow = 1;
                    }
                    r.idx[r.nk++] = j;
                }
                r.has_sink = 0;
                ld sink = 0;
                /* a padding query row is empty whatever the sink (SPEC 3.2, 3.4) */
                if (in->sinks.data && i < smattn__q_len(prob, b)) {
                    double sv = smattn_load(in->sinks.data, in->sinks.dtype,
                                            in->sinks.stride[0] * h);
                    if (sv != -HUGE_VAL) {
                        r.has_sink = 1;
                        sink = (ld)sv;
                        if (!isfinite(sv))
                            nanrow = 1;
                    }
                }
                r.n = r.nk + r.has_sink;
                int empty = r.n == 0, mean = 0;
                const int64_t lrow = row_l ? smattn__lse_off(prob, bl->stride, b, h, i) : 0;
                /* Scores (exact up to long double rounding: SPEC 6.9). */
                if (r.nk > 0 && att) { /* q enters only through visible scores (SPEC 4.2) */
                    for (int64_t d = 0; d < D; d++) {
                        double qv = smattn_load(in->q.data, in->q.dtype,
                                                smattn__row_off(prob, in->q.stride, b, i, h, d)) *
                                    smattn__descale(prob, 'q', b, g); /* exact, SPEC 2.9 */
                        if (!isfinite(qv))
                            nanrow = 1;
                        qd[d] = (ld)qv;
                    }
                    /* SPEC 6.11 Q4: the bound on |q^_d - q_d|, u_q times its block's largest
                     * |q| plus eta_q */
                    for (int64_t d0 = 0; mk.q_rounded && d0 < D; d0 += qblk) {
                        ld A = 0;
                        for (int64_t d = d0; d < d0 + qblk; d++)
                            A = fmaxl(A, fabsl(qd[d]));
                        for (int64_t d = d0; d < d0 + qblk; d++)
                            qd[D + d] = u_q * A + eta_q;
                    }
                }
                if (empty && prob->empty_rows == SMATTN_EMPTY_MEAN &&
                    smattn__kv_len(prob, b) > 0) {
                    /* SPEC 6.7: the mean convention as softmax over equal scores 0. */
                    mean = 1;
                    empty = 0;
                    r.nk = smattn__kv_len(prob, b);
                    r.n = r.nk;
                    for (int64_t t = 0; t < r.nk; t++) {
                        r.idx[t] = t;
                        r.s[t] = r.a[t] = r.abig[t] = r.eq[t] = 0;
                    }
                }
                if (empty || nanrow) {
                    /* SPEC 6.7 / 6.8: exact zeros get 0, non-finite exact values +inf. */
                    double vo = nanrow || prob->empty_rows == SMATTN_EMPTY_NAN ? HUGE_VAL : 0;
                    if (row_o)
                        for (int64_t c = 0; c < Dv; c++)
                            put(bo, smattn__row_off(prob, bo->stride, b, i, h, c), vo);
                    if (row_l) {
                        double vl = nanrow || prob->empty_lse != SMATTN_LSE_ZERO ? HUGE_VAL : 0;
                        put(bl, lrow, vl);
                    }
                    if (want_p) {
                        for (int64_t j = 0; j < T; j++)
                            put(bp, smattn__off4(bp->stride, b, h, i, j),
                                nanrow ? 0 : vo);
                        if (nanrow)
                            for (int64_t t = 0; t < r.nk; t++)
                                put(bp, smattn__off4(bp->stride, b, h, i, r.idx[t]), HUGE_VAL);
                    }
                    continue;
                }
                for (int64_t t = 0; !mean && t < r.nk; t++) {
                    const int64_t j = r.idx[t];
                    ld sig, a, abs_sum;
                    if (att) {
                        ld dot = 0, asum = 0, esum = 0;
                        int kbad = 0;
                        for (int64_t d = 0; d < D; d++) {
                            double kv = smattn_load(in->k.data, in->k.dtype,
                                                    smattn__key_off(prob, in->k.stride, b, j, g, d)) *
                                        smattn__descale(prob, 'k', b, g);
                            if (!isfinite(kv))
                                kbad = 1;
                            ld pr = qd[d] * (ld)kv;
                            dot += pr;
                            asum += fabsl(pr);
                            if (mk.q_rounded)
                                esum += qd[D + d] * fabsl((ld)kv);
                        }
                        r.eq[t] = fabsl(scale) * esum;
                        if (kbad) {
                            nanrow = 1;
                            break;
                        }
                        sig = scale * dot;
                        a = fabsl(scale) * asum;
                        abs_sum = big * asum;
                    } else {
                        ld xv = (ld)smattn_load(in->x.data, in->x.dtype,
                                            smattn__off4(in->x.stride, b, h, i, j));
                        r.eq[t] = 0;
                        sig = scale * xv;
                        a = fabsl(sig);
                        abs_sum = 0; /* only the maximum can overflow harmfully (SPEC 6.8) */
                    }
                    if (r.softcap) /* SPEC 2.4 */
                        sig = r.c * tanhl(sig / r.c);
                    r.al[t] = 0;
                    if (in->bias.data) { /* SPEC 2.5; the mask mode scales it (2.8) */
                        ld bv = (ld)smattn_load(in->bias.data, in->bias.dtype,
                                                smattn__off4(in->bias.stride, b, h, i, j));
                        if (prob->alibi_mode == SMATTN_ALIBI_MASK)
                            r.al[t] = fabsl(bv *= slope);
                        sig += bv;
                    }
                    if (prob->alibi_mode == SMATTN_ALIBI_SYMMETRIC ||
                        prob->alibi_mode == SMATTN_ALIBI_ONE_SIDED) { /* SPEC 2.8: exact */
                        ld av = (ld)smattn__alibi_term(prob, b, h, i, j);
                        r.al[t] = fabsl(av);
                        sig += av;
                    }
                    r.s[t] = sig;
                    r.a[t] = a;
                    r.abig[t] = abs_sum;
                }
                if (nanrow) { /* a non-finite K row found late: redo as a NaN row */
                    if (row_o)
                        for (int64_t c = 0; c < Dv; c++)
                            put(bo, smattn__row_off(prob, bo->stride, b, i, h, c), HUGE_VAL);
                    if (row_l)
                        put(bl, lrow, HUGE_VAL);
                    if (want_p) {
                        for (int64_t j = 0; j < T; j++)
                            put(bp, smattn__off4(bp->stride, b, h, i, j), 0);
                        for (int64_t t = 0; t < r.nk; t++)
                            put(bp, smattn__off4(bp->stride, b, h, i, r.idx[t]), HUGE_VAL);
                    }
                    continue;
                }
                if (r.has_sink) {
                    r.s[r.nk] = sink;
                    r.a[r.nk] = r.abig[r.nk] = 0;
                }
                const int saved_bias = r.has_bias, saved_cap = r.softcap;
                const int saved_alibi = r.has_alibi;
                if (mean)
                    r.has_bias = r.softcap = r.has_alibi = 0;
                /* SPEC 4.1 in long double: M, M', L, LSE, p_j (P = e/L, SPEC 6.9). */
                ld M = -HUGE_VALL;
                for (int64_t t = 0; t < r.nk; t++)
                    if (r.s[t] > M)
                        M = r.s[t];
                if (r.nk == 0)
                    M = sink;
                ld Mp = r.has_sink && sink > M ? sink : M;
                ld LM = 0;
                for (int64_t t = 0; t < r.n; t++) {
                    r.e[t] = expl(r.s[t] - Mp);
                    LM += r.e[t];
                }
                r.M = M;
                r.Mp = Mp;
                r.LM = LM;
                r.lse = Mp + logl(LM);
                for (int64_t t = 0; t < r.n; t++) {
                    r.p[t] = r.e[t] / LM;
                    r.lp[t] = r.s[t] - r.lse;
                }
                row_common(&r, &mk, &rk);
                row_common(&r, &me, &re);
                const int out = rk.out || re.out;
                if (row_l && mean) { /* SPEC 3.4: the sentinel, exact */
                    put(bl, lrow, prob->empty_lse == SMATTN_LSE_ZERO ? 0 : HUGE_VAL);
                } else if (row_l) {
                    ld Bk = rk.Blse;
                    if (out)
                        put(bl, lrow, HUGE_VAL);
                    else
                        put(bl, lrow, publish((1 + uo_l) * Bk + uo_l * fabsl(r.lse) + wo_l / 2,
                                              re.Blse, r.lse, thr_l));
                }
                if (want_p) {
                    for (int64_t j = 0; j < T; j++)
                        put(bp, smattn__off4(bp->stride, b, h, i, j), 0);
                    for (int64_t t = 0; t < r.nk; t++) {
                        ld Bk = p_bound(&r, &mk, &rk, t);
                        ld Be = p_bound(&r, &me, &re, t);
                        double v = out ? HUGE_VAL
                                       : publish((1 + uo_p) * Bk + uo_p * r.p[t] + wo_p / 2,
                                                 Be, r.p[t], thr_p);
                        put(bp, smattn__off4(bp->stride, b, h, i, r.idx[t]), v);
                    }
                }
                if (row_o) {
                    /* Load the visible V rows once; classify columns (SPEC 4.2). */
                    for (int64_t t = 0; t < r.nk; t++)
                        for (int64_t c = 0; c < Dv; c++)
                            Vrow[t * Dv + c] = (ld)(smattn_load(
                                in->v.data, in->v.dtype,
                                smattn__key_off(prob, in->v.stride, b, r.idx[t], g, c)) *
                                smattn__descale(prob, 'v', b, g));
                    for (int64_t c = 0; c < Dv; c++) {
                        const int64_t off = smattn__row_off(prob, bo->stride, b, i, h, c);
                        int bad = 0;
                        ld Nsum = 0;
                        for (int64_t t = 0; t < r.nk; t++) {
                            ld v = Vrow[t * Dv + c];
                            if (!isfinite(v))
                                bad = 1;
                            vcol[t] = v;
                            Nsum += r.e[t] * v;
                        }
                        if (r.has_sink)
                            vcol[r.nk] = 0;
                        if (bad || out) {
                            put(bo, off, HUGE_VAL);
                            continue;
                        }
                        ld o = Nsum / LM; /* O = N / L, the model's own form (SPEC 6.9) */
                        int ovf = 0;
                        ld Bk, Be = o_bound(&r, &me, &re, vcol, o, &ovf);
                        if (v_after) {
                            /* SPEC 6.11 Q2: B'_O of the problem with f_v = 1 (V / f_v, O / f_v,
                             * exact scalings), its rounding to the output (A6), then f_v
                             * applied with two more roundings. Bk then holds the whole
                             * kernel's bound, output rounding included. */
                            const ld fv = (ld)smattn__descale(prob, 'v', b, g);
                            for (int64_t t = 0; t < r.nk; t++)
                                vcol[t] /= fv;
                            const ld o1 = o / fv;
                            const ld B1 = o_bound(&r, &mk, &rk, vcol, o1, &ovf);
                            const ld B1o = (1 + uo_o) * B1 + uo_o * fabsl(o1) + wo_o / 2;
                            const ld g2o = gam(2, uo_o);
                            Bk = (1 + g2o) * fv * B1o + g2o * fabsl(o) + wo_o;
                        } else {
                            Bk = o_bound(&r, &mk, &rk, vcol, o, &ovf);
                        }
                        if (ovf || (r.nk == 0 && !mean)) {
                            /* sink only: O = +0 exactly (SPEC 6.7) */
                            put(bo, off, ovf ? HUGE_VAL : 0);
                            continue;
                        }
                        put(bo, off,
                            publish(v_after ? Bk : (1 + uo_o) * Bk + uo_o * fabsl(o) + wo_o / 2,
                                    Be, o, thr_o));
                    }
                }
                r.has_bias = saved_bias;
                r.has_alibi = saved_alibi;
                r.softcap = saved_cap;
            }
    free(r.idx);
    free(buf);
    free(qd);
    free(vcol);
    free(Vrow);
    return SMATTN_OK;
}

/* ---- metrics (SPEC 6.10) --------------------------------------------------------------- */

double smattn_ulp_error(double computed, double exact, smattn_dtype t)
{
    if (isnan(computed) || isnan(exact))
        return isnan(computed) && isnan(exact) ? 0.0 : HUGE_VAL;
    if (isinf(computed) || isinf(exact))
        return computed == exact ? 0.0 : HUGE_VAL;
    if (computed == exact)
        return 0.0;
    int k = is_float(t) ? (int)t : SMATTN_F64;
    const smattn_format *f = &smattn__formats[k];
    int e;
    if (exact == 0)
        e = f->emin;
    else {
        (void)frexp(exact, &e); /* |exact| in [2^(e-1), 2^e) */
        e -= 1;
        if (e < f->emin)
            e = f->emin;
    }
    /* ulp = 2^(e - prec + 1); the difference is computed in long double (exact for
     * binary64 operands whose exponents differ by less than 64 bits, close otherwise). */
    ld diff = fabsl((ld)computed - (ld)exact);
    return (double)ldexpl(diff, -(e - f->prec + 1));
}

double smattn_error_ratio(double computed, double exact, double bound)
{
    if (isnan(computed) || isnan(exact))
        return isnan(computed) && isnan(exact) ? 0.0 : HUGE_VAL;
    if (computed == exact)
        return 0.0;
    if (isinf(exact))
        return HUGE_VAL;
    if (isinf(computed) || isinf(bound))
        return isinf(bound) && bound > 0 ? 0.0 : HUGE_VAL;
    if (!(bound > 0))
        return HUGE_VAL;
    ld r = fabsl((ld)computed - (ld)exact) / (ld)bound;
    return r > (ld)DBL_MAX ? HUGE_VAL : (double)r;
}
