/* SPDX-License-Identifier: MIT */
/* merge_bound.c: the per-element error bound of a working-precision merge (SPEC 9.5), the
 * bound of SPEC 6.4-6.5 for scores known exactly (the partials' LSEs), one block, no sink,
 * evaluated in long double with the margins of SPEC 6.9. */
#include <float.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "core/merge_internal.h"

#include "core/bound_math.h"

/* The output rounding of dtype t: unit roundoff, subnormal spacing, overflow threshold. */
static void out_format(smattn_dtype t, ld *u, ld *omega, ld *ovf)
{
    const smattn_format *f = &smattn__formats[t];
    *u = ldexpl(1, -f->prec);
    *omega = ldexpl(1, f->emin - f->prec + 1);
    *ovf = ldexpl(2 - ldexpl(1, -f->prec), f->emax);
}

typedef struct mb_ws {
    ld *x, *p, *pR, *lam; /* per finite partial [N] */
    int64_t *idx;
} mb_ws;

static void bound_row(const smattn_merge_problem *P, const smattn_merge_inputs *in,
                      const smattn_precision *pm, const smattn_outputs *fmt,
                      const smattn_outputs *bd, mb_ws *w, int64_t b, int64_t h, int64_t i)
{
    const int base2 = P->lse_base == SMATTN_LSE_BASE_2;
    const ld lnb = base2 ? 0.693147180559945309417232121458176568L : 1.0L;
    const smattn_tensor *lt = &in->lse_parts, *ot = &in->o_parts;
    const int64_t lse_off = bd->lse.data ? smattn__merge_out_lse_off(bd, b, h, i) : 0;
    int64_t k = 0;
    int poison = 0;
    ld tmax = -HUGE_VALL;
    for (int64_t n = 0; n < P->N; n++) {
        double t = smattn_load(lt->data, lt->dtype, smattn__merge_lse_off(in, n, b, h, i));
        int cl = smattn__merge_lse_class(P, t);
        poison |= cl == MERGE_POISON;
        if (cl == MERGE_FINITE) {
            w->idx[k] = n;
            w->x[k++] = (ld)t;
            tmax = (ld)t > tmax ? (ld)t : tmax;
        }
    }
    if (poison || k == 0) { /* NaN row: by class; empty row: 0 for exact zeros (SPEC 9.5) */
        if (bd->lse.data)
            smattn_store(bd->lse.data, SMATTN_F64, lse_off,
                         !poison && P->empty_lse == SMATTN_LSE_ZERO ? 0.0 : HUGE_VAL);
        for (int64_t c = 0; bd->o.data && c < P->Dv; c++)
            smattn_store(bd->o.data, SMATTN_F64, smattn__off4(bd->o.stride, b, i, h, c),
                         !poison && P->empty_rows == SMATTN_EMPTY_ZERO ? 0.0 : HUGE_VAL);
        return;
    }
    const ld u = (ld)pm->u_acc, E = (ld)pm->exp_ulps;
    const ld eps_f = 2 * E * u, l_f = eps_f < 1 ? -log1pl(-eps_f) : HUGE_VALL;
    const ld om = (1 + E) * (ld)pm->tiny; /* omega* */
    const ld ka = pm->acc_len > 0 ? (ld)pm->acc_len : (ld)k;
    /* exact weights relative to the maximum (natural units): x_n = s_n - M <= 0 */
    ld Ls = 0;
    for (int64_t n = 0; n < k; n++) {
        w->x[n] = (w->x[n] - tmax) * lnb;
        Ls += expl(w->x[n]);
    }
    const ld logLs = logl(Ls);
    ld Lbar = 0, SR = 0, lmax = 0;
    for (int64_t n = 0; n < k; n++) {
        ld lp = w->x[n] - logLs; /* log p_n */
        w->p[n] = expl(lp);
        w->lam[n] = u * -w->x[n] + l_f; /* Lambda_n = u (M - s_n) + l_f, SPEC 9.5 */
        ld lam = w->lam[n];
        w->pR[n] = lam <= 1 ? w->p[n] * expm1l(lam) : expl(lp + lam);
        Lbar += w->p[n] * (lam < 1 ? lam : 1);
        SR += w->pR[n];
        lmax = lam > lmax ? lam : lmax;
    }
    const ld L_min = 1 - eps_f, U_L = 8 * (ld)k * om;
    if (bd->lse.data) {
        ld uo, wo, ovf;
        out_format(fmt->lse.dtype, &uo, &wo, &ovf);
        const ld tauL = gam(ka - 1, u);
        ld a = log1pl(SR), c = Lbar < 1 ? -log1pl(-Lbar) : HUGE_VALL;
        ld ElogL = (a > c ? a : c);
        ElogL = (ElogL < lmax ? ElogL : lmax) + tauL / (1 - tauL) + U_L / (L_min - U_L);
        ld lse = tmax + logLs / lnb, rel = logLs / lnb; /* LSE and LSE - M in base b */
        ld E1 = ElogL / lnb + eps_f * (rel + ElogL / lnb) + om;
        ld Else = E1 + gam(3, u) * (fabsl(lse) + E1);
        ld B = (1 + uo) * Else + uo * fabsl(lse) + wo / 2;
        /* SPEC 6.9's margins: the long double recomputation and the binary64 oracle */
        B = B * (1 + 0x1p-20L) + 0x1p-40L * (fabsl(lse) + 1) + 0x1p-53L * fabsl(lse) + 0x1p-1074L;
        if (!(B < HUGE_VALL) || fabsl(lse) + B >= ovf)
            B = HUGE_VALL;
        smattn_store(bd->lse.data, SMATTN_F64, lse_off, (double)B);
    }
    if (!bd->o.data)
        return;
    ld uo, wo, ovf;
    out_format(fmt->o.dtype, &uo, &wo, &ovf);
    const ld xi = gam(ka + 2, u), tauO = gam(ka - 1, u);
    const ld cN = xi / (1 - tauO), cL = (gam(2, u) + tauO) / (1 - tauO);
    const ld Omega = range_of(u);
    for (int64_t c = 0; c < P->Dv; c++) {
        ld o = 0, Vc = 0, spo = 0, sro = 0;
        int finite = 1;
        for (int64_t n = 0; n < k; n++) {
            double v = smattn_load(ot->data, ot->dtype, smattn__merge_o_off(in, w->idx[n], b, i, h, c));
            finite &= isfinite(v) != 0;
            o += w->p[n] * (ld)v;
            Vc = fabsl((ld)v) > Vc ? fabsl((ld)v) : Vc;
            spo += w->p[n] * fabsl((ld)v);
            sro += w->pR[n] * fabsl((ld)v);
        }
        ld B = HUGE_VALL;
        if (finite && 2 * (ld)k * Vc * (1 + gam(ka, u)) < Omega) { /* else out of contract */
            ld ew = 0, dmax = 0;
            for (int64_t n = 0; n < k; n++) {
                double v = smattn_load(ot->data, ot->dtype, smattn__merge_o_off(in, w->idx[n], b, i, h, c));
                ld dv = fabsl((ld)v - o);
                ew += w->pR[n] * dv;
                dmax = dv > dmax ? dv : dmax;
            }
            ld Ew = Lbar < 1 ? ew / (1 - Lbar) : HUGE_VALL;
            Ew = Ew < dmax ? Ew : dmax;
            ld Sv = Lbar < 1 ? (spo + sro) / (1 - Lbar) : HUGE_VALL;
            Sv = Sv < Vc ? Sv : Vc;
            ld Ot = fabsl(o) + Ew < Vc ? fabsl(o) + Ew : Vc;
            ld U_N = 8 * (ld)k * om * (1 + Vc);
            ld U_O = (1 + gam(2, u)) * (U_N + (fabsl(o) + Ew + cN * Sv + cL * Ot) * U_L) / (L_min - U_L);
            ld EO = Ew + cN * Sv + cL * Ot + U_O;
            B = (1 + uo) * EO + uo * fabsl(o) + wo / 2;
            B = B * (1 + 0x1p-20L) + 0x1p-40L * Vc + 0x1p-53L * fabsl(o) + 0x1p-1074L;
            if (!(B < HUGE_VALL) || fabsl(o) + B >= ovf)
                B = HUGE_VALL;
        }
        smattn_store(bd->o.data, SMATTN_F64, smattn__off4(bd->o.stride, b, i, h, c), (double)B);
    }
}

smattn_status smattn_merge_bound(const smattn_merge_problem *p, const smattn_merge_inputs *in,
                                 const smattn_precision *pm, const smattn_outputs *fmt,
                                 const smattn_outputs *bound)
{
    if (!pm || !fmt)
        return SMATTN_ERR_NULL;
    smattn_status st = smattn_merge_validate(p, in, bound);
    if (st)
        return st;
    if ((bound->o.data && (bound->o.dtype != SMATTN_F64 || !is_float(fmt->o.dtype))) ||
        (bound->lse.data && (bound->lse.dtype != SMATTN_F64 || !is_float(fmt->lse.dtype))))
        return SMATTN_ERR_DTYPE;
    if (!(pm->u_acc >= 0 && pm->u_acc <= 0.25) || !(pm->exp_ulps >= 0 && pm->exp_ulps < 1e6) ||
        !(pm->tiny >= 0 && pm->tiny < 1) || pm->acc_len < 0)
        return SMATTN_ERR_OPTION;
    mb_ws w;
    size_t N = (size_t)p->N;
    w.x = malloc(N * sizeof *w.x), w.p = malloc(N * sizeof *w.p);
    w.pR = malloc(N * sizeof *w.pR), w.lam = malloc(N * sizeof *w.lam);
    w.idx = malloc(N * sizeof *w.idx);
    st = w.x && w.p && w.pR && w.lam && w.idx ? SMATTN_OK : SMATTN_ERR_NOMEM;
    for (int64_t b = 0; !st && b < p->B; b++)
        for (int64_t h = 0; h < p->Hq; h++)
            for (int64_t i = 0; i < p->S; i++)
                bound_row(p, in, pm, fmt, bound, &w, b, h, i);
    free(w.x), free(w.p), free(w.pR), free(w.lam), free(w.idx);
    return st;
}
