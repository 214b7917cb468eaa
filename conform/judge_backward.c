/* SPDX-License-Identifier: MIT */
/* judge_backward.c: a backward kernel's gradients against the exact oracle under the bound
 * of SPEC 10.7, element by element with smattn_error_ratio (SPEC 6.10): dQ, dK, dV, and
 * dBias (in a broadcast bias's own shape: B12) and dSinks (B13) when the kernel was handed
 * them. Gradient t: 0 dQ, 1 dK, 2 dV, 3 dBias, 4 dSinks. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "conform/conform.h"
#include "conform/judge_backward.h"
#include "core/internal.h"
#include "core/layout.h"

/* The extents of dBias as got holds it: [B,Hq,S,T], 1 on each dimension of stride 0 (a
 * broadcast bias's own shape, SPEC 10.1). */
static void dbias_extents(const smattn_problem *p, const smattn_out_tensor *db, int64_t n[4])
{
    const int64_t full[4] = {p->B, p->Hq, p->S, p->T};
    for (int k = 0; k < 4; k++)
        n[k] = db->stride[k] == 0 ? 1 : full[k];
}

/* Contiguous strides of dQ [B,S,Hq,D], dK [B,T,Hkv,D], dV [B,T,Hkv,Dv], dBias (got's
 * extents) and dSinks [Hq], and the extents. */
static void shape_of(const smattn_problem *p, const smattn_grad_outputs *got, int t, int64_t n[4],
                     int64_t st[4])
{
    if (t == 0)
        n[0] = p->B, n[1] = p->S, n[2] = p->Hq, n[3] = p->D;
    else if (t == 3)
        dbias_extents(p, &got->dbias, n);
    else if (t == 4)
        n[0] = p->Hq, n[1] = n[2] = n[3] = 1;
    else
        n[0] = p->B, n[1] = p->T, n[2] = p->Hkv, n[3] = t == 1 ? p->D : p->Dv;
    st[3] = 1;
    for (int k = 2; k >= 0; k--)
        st[k] = st[k + 1] * n[k + 1];
}

/* Whether logical element (i0, i1) of gradient t has storage (SPEC 10.1): every one when
 * dense; with a layout a stored row (dQ), a key t < T_b (dK, dV). */
static int has_storage(const smattn_problem *p, int t, int64_t i0, int64_t i1)
{
    if (!p->layout || t > 2)
        return 1;
    return t == 0 ? smattn__row_stored(p, i0, i1) : i1 < smattn__kv_len(p, i0);
}

/* Offset of logical element (i0..i3) of gradient t in a tensor of strides gs: through the
 * layout's locator. */
static int64_t elem_off(const smattn_problem *p, int t, const int64_t gs[4], int64_t i0,
                        int64_t i1, int64_t i2, int64_t i3)
{
    return t == 0 ? smattn__row_off(p, gs, i0, i1, i2, i3) : smattn__key_off(p, gs, i0, i1, i2, i3);
}

/* A layout's gradient storage (SPEC 2.7): C-contiguous strides s of its extents e, and the
 * element count. */
static int64_t storage_of(const smattn_problem *p, int t, int64_t e[4], int64_t s[4])
{
    int64_t qn[2], kn[2];
    smattn__storage_rows(p, qn, kn);
    e[0] = t ? kn[0] : qn[0], e[1] = t ? kn[1] : qn[1], e[2] = t ? p->Hkv : p->Hq;
    e[3] = t == 2 ? p->Dv : p->D;
    s[3] = 1;
    for (int k = 2; k >= 0; k--)
        s[k] = s[k + 1] * e[k + 1];
    return e[0] * s[0];
}

/* With a layout: the elements of got's storage that no stored row and no key t < T_b
 * reaches must be +0 (SPEC 10.1). The count of those that are not, and the first. */
static smattn_status unreached_nonzero(const smattn_problem *p, const smattn_grad_outputs *got,
                                       int64_t bad[3], int64_t first[3], double val[3])
{
    const smattn_out_tensor *g3[3] = {&got->dq, &got->dk, &got->dv};
    for (int t = 0; t < 3; t++) {
        int64_t e[4], s[4];
        const int64_t cnt = storage_of(p, t, e, s);
        unsigned char *seen = calloc((size_t)(cnt > 0 ? cnt : 1), 1);
        if (!seen)
            return SMATTN_ERR_NOMEM;
        const int64_t n1 = t ? p->T : p->S, n2 = t ? p->Hkv : p->Hq;
        for (int64_t b = 0; b < p->B; b++)
            for (int64_t i = 0; i < n1 && has_storage(p, t, b, i); i++)
                for (int64_t h = 0; h < n2; h++)
                    for (int64_t d = 0; d < e[3]; d++)
                        seen[elem_off(p, t, s, b, i, h, d)] = 1;
        bad[t] = 0, first[t] = -1;
        for (int64_t x = 0; x < cnt; x++) {
            if (seen[x])
                continue;
            const int64_t *gs = g3[t]->stride;
            double v = smattn_load(g3[t]->data, g3[t]->dtype,
                                   x / s[0] * gs[0] + x / s[1] % e[1] * gs[1] +
                                       x / s[2] % e[2] * gs[2] + x % e[3] * gs[3]);
            if (v != 0 || signbit(v)) {
                if (!bad[t]++)
                    first[t] = x, val[t] = v;
            }
        }
        free(seen);
    }
    return SMATTN_OK;
}

/* The gradients got holds: dQ, dK, dV, and dBias, dSinks when their data is set. */
static int wanted(const smattn_grad_outputs *got, int t)
{
    return t < 3 || (t == 3 ? got->dbias.data != NULL : got->dsinks.data != NULL);
}

/* The dense twin's extents n[t], strides st[t] and count cnt[t] of dQ, dK, dV, dBias and
 * dSinks (t = 0..4; cnt 0 for one got does not hold), and ex[t], bd[t] malloc'd to hold
 * them (freed by the caller, also on failure). */
static smattn_status alloc_dense(const smattn_problem *p, const smattn_grad_outputs *got,
                                 int64_t n[5][4], int64_t st[5][4], int64_t cnt[5], double *ex[5],
                                 double *bd[5])
{
    smattn_status s = SMATTN_OK;
    for (int t = 0; t < 5; t++) {
        shape_of(p, got, t, n[t], st[t]);
        cnt[t] = wanted(got, t) ? n[t][0] * st[t][0] : 0;
        ex[t] = malloc((size_t)(cnt[t] > 0 ? cnt[t] : 1) * sizeof(double));
        bd[t] = malloc((size_t)(cnt[t] > 0 ? cnt[t] : 1) * sizeof(double));
        if (!ex[t] || !bd[t])
            s = SMATTN_ERR_NOMEM;
    }
    return s;
}

static smattn_status
exact_and_bound_dense(const smattn_problem *p, const smattn_inputs *in,
                      const smattn_grad_inputs *gin, const smattn_grad_outputs *got,
                      const smattn_backward_precision *pm, const smattn_ref_config *cfg,
                      int64_t st[5][4], int64_t cnt[5], double *ex[5], double *bd[5], double *wid);

/* exact_and_bound of a layout problem: the oracle and the bound in the layout's storage,
 * gathered into the dense twin's logical shape. */
static smattn_status exact_and_bound_layout(const smattn_problem *p, const smattn_inputs *in,
                                            const smattn_grad_inputs *gin,
                                            const smattn_grad_outputs *got,
                                            const smattn_backward_precision *pm,
                                            const smattn_ref_config *cfg, int64_t n[5][4],
                                            int64_t st[5][4], int64_t cnt[5], double *ex[5],
                                            double *bd[5], double *wid)
{
    /* dQ, dK, dV in the storage; dBias and dSinks have no layout: the dense arrays */
    int64_t le[3][4], ls[5][4], lc[5];
    double *lx[5] = {NULL, NULL, NULL, NULL, NULL}, *lb[5] = {NULL, NULL, NULL, NULL, NULL};
    smattn_status s = alloc_dense(p, got, n, st, cnt, ex, bd);
    for (int t = 3; t < 5; t++) {
        memcpy(ls[t], st[t], sizeof ls[t]);
        lc[t] = cnt[t], lx[t] = ex[t], lb[t] = bd[t];
    }
    for (int t = 0; t < 3; t++) {
        lc[t] = storage_of(p, t, le[t], ls[t]);
        lx[t] = malloc((size_t)(lc[t] > 0 ? lc[t] : 1) * sizeof(double));
        lb[t] = malloc((size_t)(lc[t] > 0 ? lc[t] : 1) * sizeof(double));
        if (!lx[t] || !lb[t])
            s = SMATTN_ERR_NOMEM;
    }
    if (!s)
        s = exact_and_bound_dense(p, in, gin, got, pm, cfg, ls, lc, lx, lb, wid);
    for (int t = 0; t < 3 && !s; t++)
        for (int64_t x = 0; x < cnt[t]; x++) {
            const int64_t i0 = x / st[t][0], i1 = x / st[t][1] % n[t][1],
                          i2 = x / st[t][2] % n[t][2], i3 = x % n[t][3];
            if (!has_storage(p, t, i0, i1)) {
                ex[t][x] = bd[t][x] = 0;
                continue;
            }
            const int64_t o = elem_off(p, t, ls[t], i0, i1, i2, i3);
            ex[t][x] = lx[t][o], bd[t][x] = lb[t][o];
        }
    for (int t = 0; t < 3; t++)
        free(lx[t]), free(lb[t]);
    return s;
}

/* The oracle's binary64 gradients ex[t] and their bounds bd[t] for model pm with got's
 * dtypes (t: dQ, dK, dV, contiguous in the dense twin's logical shape; n, st the extents
 * and strides, cnt the counts; with a layout, computed in its storage and gathered, an
 * element without storage exact 0 with bound 0). The arrays are malloc'd (freed by the
 * caller, also on failure). */
static smattn_status exact_and_bound(const smattn_problem *p, const smattn_inputs *in,
                                     const smattn_grad_inputs *gin, const smattn_grad_outputs *got,
                                     const smattn_backward_precision *pm,
                                     const smattn_ref_config *cfg, int64_t n[5][4],
                                     int64_t st[5][4], int64_t cnt[5], double *ex[5], double *bd[5],
                                     double **wid)
{
    if (wid) { /* a summed dBias's widths, +0 until the oracle leaves the sums undecided */
        int64_t nb[4], sb[4];
        shape_of(p, got, 3, nb, sb);
        const int64_t c3 = got->dbias.data ? nb[0] * sb[0] : 0;
        if (!(*wid = calloc((size_t)(c3 > 0 ? c3 : 1), sizeof **wid)))
            return SMATTN_ERR_NOMEM;
    }
    if (p->layout)
        return exact_and_bound_layout(p, in, gin, got, pm, cfg, n, st, cnt, ex, bd,
                                      wid ? *wid : NULL);
    smattn_status s = alloc_dense(p, got, n, st, cnt, ex, bd);
    if (s)
        return s;
    return exact_and_bound_dense(p, in, gin, got, pm, cfg, st, cnt, ex, bd, wid ? *wid : NULL);
}

/* A dBias summed over broadcast dimensions whose sums the oracle could not decide (SPEC 10.3
 * item 6: an exact zero no rule or expansion reaches): each sum of the full-shape oracle's
 * terms instead (each dS_ij correctly rounded to binary64, decidable where the sum is not),
 * in ex3, with wid3 a bound on its distance from the exact sum: each term's half ulp and
 * the binary64 summation's error, gamma_(m+1) sum |terms| over m terms, plus 2^-1074 per
 * term for gradual underflow. A NaN term gives NaN and width 0 (the class is exact). The
 * other gradients in eo (binary64, dBias's pointer replaced) are written again. */
static smattn_status dbias_from_terms(const smattn_problem *p, const smattn_inputs *in,
                                      const smattn_grad_inputs *gin, const smattn_grad_outputs *eo,
                                      const smattn_ref_config *cfg, const int64_t sd[4], int64_t c3,
                                      double *ex3, double *wid3)
{
    const int64_t B = p->B, H = p->Hq, S = p->S, T = p->T;
    double *full = malloc((size_t)(B * H * S * T) * sizeof *full);
    double *abs3 = calloc((size_t)(c3 > 0 ? c3 : 1), sizeof *abs3);
    int64_t *m3 = calloc((size_t)(c3 > 0 ? c3 : 1), sizeof *m3);
    smattn_status s = SMATTN_ERR_NOMEM;
    if (full && abs3 && m3) {
        smattn_grad_outputs fo = *eo;
        fo.dbias = (smattn_out_tensor){full, SMATTN_F64, {H * S * T, S * T, T, 1}};
        s = smattn_ref_backward(p, in, gin, &fo, cfg, NULL);
    }
    if (!s) {
        for (int64_t x = 0; x < c3; x++)
            ex3[x] = 0;
        for (int64_t b = 0; b < B; b++)
            for (int64_t h = 0; h < H; h++)
                for (int64_t i = 0; i < S; i++)
                    for (int64_t j = 0; j < T; j++) {
                        const double v = full[((b * H + h) * S + i) * T + j];
                        const int64_t x = b * sd[0] + h * sd[1] + i * sd[2] + j * sd[3];
                        ex3[x] += v, abs3[x] += fabs(v), m3[x]++;
                    }
        for (int64_t x = 0; x < c3; x++) {
            const double g = (double)(m3[x] + 1) * 0x1p-53;
            wid3[x] = isnan(ex3[x])
                          ? 0
                          : (g / (1 - g) * abs3[x] + (double)m3[x] * 0x1p-1074) * (1 + 0x1p-40);
        }
    }
    free(full), free(abs3), free(m3);
    return s;
}

/* The oracle and the bound into ex[t], bd[t] of strides st[t] (allocated, cnt[t] each). */
static smattn_status
exact_and_bound_dense(const smattn_problem *p, const smattn_inputs *in,
                      const smattn_grad_inputs *gin, const smattn_grad_outputs *got,
                      const smattn_backward_precision *pm, const smattn_ref_config *cfg,
                      int64_t st[5][4], int64_t cnt[5], double *ex[5], double *bd[5], double *wid)
{
    smattn_grad_outputs eo, bo, fmt;
    memset(&eo, 0, sizeof eo);
    memset(&bo, 0, sizeof bo);
    memset(&fmt, 0, sizeof fmt);
    smattn_status s;
    smattn_out_tensor *e5[5] = {&eo.dq, &eo.dk, &eo.dv, &eo.dbias, &eo.dsinks},
                      *b5[5] = {&bo.dq, &bo.dk, &bo.dv, &bo.dbias, &bo.dsinks},
                      *f5[5] = {&fmt.dq, &fmt.dk, &fmt.dv, &fmt.dbias, &fmt.dsinks};
    const smattn_out_tensor *g5[5] = {&got->dq, &got->dk, &got->dv, &got->dbias, &got->dsinks};
    for (int t = 0; t < 5; t++) {
        if (!cnt[t] && t > 2)
            continue; /* not asked for */
        int64_t sd[4] = {st[t][0], st[t][1], st[t][2], st[t][3]};
        for (int k = 0; k < 4; k++) /* dBias: the sums over got's stride-0 dimensions */
            if ((t == 3 && g5[t]->stride[k] == 0) || (t == 4 && k > 0))
                sd[k] = 0;
        *e5[t] = (smattn_out_tensor){ex[t], SMATTN_F64, {sd[0], sd[1], sd[2], sd[3]}};
        *b5[t] = (smattn_out_tensor){bd[t], SMATTN_F64, {sd[0], sd[1], sd[2], sd[3]}};
        f5[t]->dtype = g5[t]->dtype;
    }
    if ((s = smattn_ref_backward(p, in, gin, &eo, cfg, NULL))) {
        /* undecided: a summed dBias from its terms, when that is what the oracle could not
         * decide (else the status stands) */
        const int summed = cnt[3] && (got->dbias.stride[0] == 0 || got->dbias.stride[1] == 0 ||
                                      got->dbias.stride[2] == 0 || got->dbias.stride[3] == 0);
        if (s != SMATTN_ERR_PRECISION || !wid || !summed)
            return s;
        int64_t sd[4];
        for (int k = 0; k < 4; k++)
            sd[k] = got->dbias.stride[k] ? st[3][k] : 0;
        if ((s = dbias_from_terms(p, in, gin, &eo, cfg, sd, cnt[3], ex[3], wid)))
            return s;
    }
    return smattn_backward_bound(p, in, gin, pm, &fmt, &bo);
}

/* Element x (contiguous index in the dense twin's shape) of got's tensor t, through the
 * layout's locator; +0 where the layout has no storage (nothing to judge there). */
static double got_at(const smattn_problem *p, const smattn_grad_outputs *got, int t,
                     const int64_t n[4], const int64_t st[4], int64_t x)
{
    const smattn_out_tensor *g5[5] = {&got->dq, &got->dk, &got->dv, &got->dbias, &got->dsinks};
    const smattn_out_tensor *g = g5[t];
    int64_t i0 = x / st[0], i1 = x / st[1] % n[1], i2 = x / st[2] % n[2], i3 = x % n[3];
    if (t > 2) /* no layout: dBias of strides 0 where broadcast, dSinks [Hq] */
        return smattn_load(g->data, g->dtype,
                           i0 * g->stride[0] + (t == 3 ? i1 * g->stride[1] + i2 * g->stride[2] +
                                                             i3 * g->stride[3]
                                                       : 0));
    if (!has_storage(p, t, i0, i1))
        return 0.0;
    return smattn_load(g->data, g->dtype, elem_off(p, t, g->stride, i0, i1, i2, i3));
}

smattn_status conform_judge_backward(const smattn_problem *p, const smattn_inputs *in,
                                     const smattn_grad_inputs *gin,
                                     const smattn_grad_outputs *got,
                                     const smattn_backward_precision *pm,
                                     const smattn_ref_config *cfg,
                                     conform_backward_verdict *v)
{
    if (!p || !in || !gin || !got || !pm || !v)
        return SMATTN_ERR_NULL;
    memset(v, 0, sizeof *v);
    int64_t n[5][4], st[5][4], cnt[5];
    double *ex[5] = {NULL, NULL, NULL, NULL, NULL}, *bd[5] = {NULL, NULL, NULL, NULL, NULL};
    smattn_status s = exact_and_bound(p, in, gin, got, pm, cfg, n, st, cnt, ex, bd, NULL);
    if (s)
        goto done;
    for (int t = 0; t < 5; t++) {
        v->worst[t] = -1;
        for (int64_t x = 0; x < cnt[t]; x++) {
            double c = got_at(p, got, t, n[t], st[t], x);
            double e = ex[t][x], b = bd[t][x];
            double r = smattn_error_ratio(c, e, b);
            if (isfinite(e) && isinf(b))
                v->unbounded++;
            if (r > 1)
                v->mismatched++;
            if (v->worst[t] < 0 || r > v->max_ratio[t]) {
                v->max_ratio[t] = r;
                v->worst[t] = x;
                v->worst_got[t] = c;
                v->worst_exact[t] = e;
                v->worst_bound[t] = b;
            }
        }
    }
    if (p->layout) { /* the storage no key reaches: +0 (SPEC 10.1) */
        int64_t bad[3], first[3];
        double val[3];
        if ((s = unreached_nonzero(p, got, bad, first, val)))
            goto done;
        v->mismatched += bad[0] + bad[1] + bad[2];
    }
done:
    for (int t = 0; t < 5; t++)
        free(ex[t]), free(bd[t]);
    return s;
}

/* Key j visible to row (b, h, i): SPEC 3.1-3.3, the mask, and no -inf bias. */
static int sees(const smattn_problem *p, const smattn_inputs *in, int64_t b, int64_t h, int64_t i,
                int64_t j)
{
    if (!smattn_visible(p, in, b, h, i, j))
        return 0;
    if (in->bias.data) {
        const int64_t *s = in->bias.stride;
        if (smattn_load(in->bias.data, in->bias.dtype,
                        b * s[0] + h * s[1] + i * s[2] + j * s[3]) == -HUGE_VAL)
            return 0;
    }
    return 1;
}

/* "dK[b=0,j=3,g=1,d=2]" for element x of tensor t; "dBias[b=*,h=*,i=2,j=5]" (* a dimension
 * summed over), "dSinks[h=1]". */
static void name_elem(const smattn_problem *p, const smattn_grad_outputs *got, int t, int64_t x,
                      char *buf, size_t cap)
{
    int64_t n[4], st[4];
    shape_of(p, got, t, n, st);
    if (t == 4) {
        snprintf(buf, cap, "dSinks[h=%lld]", (long long)x);
        return;
    }
    if (t == 3) {
        static const char *const ax[4] = {"b", "h", "i", "j"};
        size_t k = (size_t)snprintf(buf, cap, "dBias[");
        for (int a = 0; a < 4 && k < cap; a++) {
            const int64_t i = a == 3 ? x % n[3] : x / st[a] % n[a];
            if (got->dbias.stride[a] == 0)
                k += (size_t)snprintf(buf + k, cap - k, "%s%s=*", a ? "," : "", ax[a]);
            else
                k += (size_t)snprintf(buf + k, cap - k, "%s%s=%lld", a ? "," : "", ax[a],
                                      (long long)i);
        }
        if (k < cap)
            snprintf(buf + k, cap - k, "]");
        return;
    }
    static const char *const nm[3] = {"dQ", "dK", "dV"};
    snprintf(buf, cap, "%s[b=%lld,%s=%lld,%s=%lld,%s=%lld]", nm[t], (long long)(x / st[0]),
             t ? "j" : "i", (long long)(x / st[1] % n[1]), t ? "g" : "h",
             (long long)(x / st[2] % n[2]), t == 2 ? "c" : "d", (long long)(x % n[3]));
}

/* How many elements of got lie beyond their bound against the oracle run with dLSE = 0
 * (no dLSE), -1 if the oracle or the bound failed: 0 says the kernel left dLSE out. */
static int64_t beyond_without_dlse(const smattn_problem *p, const smattn_inputs *in,
                                   const smattn_grad_inputs *gin, const smattn_grad_outputs *got,
                                   const smattn_backward_precision *pm,
                                   const smattn_ref_config *cfg)
{
    smattn_grad_inputs g0 = *gin;
    memset(&g0.dlse, 0, sizeof g0.dlse);
    int64_t n[5][4], st[5][4], cnt[5], bad = -1;
    double *ex[5] = {NULL, NULL, NULL, NULL, NULL}, *bd[5] = {NULL, NULL, NULL, NULL, NULL};
    if (exact_and_bound(p, in, &g0, got, pm, cfg, n, st, cnt, ex, bd, NULL) == SMATTN_OK) {
        bad = 0;
        for (int t = 0; t < 5; t++)
            for (int64_t x = 0; x < cnt[t]; x++)
                bad += smattn_error_ratio(got_at(p, got, t, n[t], st[t], x), ex[t][x],
                                          bd[t][x]) > 1;
    }
    for (int t = 0; t < 5; t++)
        free(ex[t]), free(bd[t]);
    return bad;
}

/* The bug classes a failure is put in, in the order they are looked for. */
enum { CL_NONE, CL_EMPTY_NAN, CL_HIDDEN, CL_GQA, CL_SOFTCAP, CL_DELTA, CL_DV, CL_DK, CL_P,
       CL_DBIAS, CL_DSINKS, CL_OTHER };

/* Every element of got's dSinks within its bound once negated (and one beyond it as it is):
 * the sign of P_sink (dLSE - Delta) turned. */
static int dsinks_negated(const smattn_problem *p, const smattn_grad_outputs *got,
                          const int64_t n[4], const int64_t st[4], int64_t cnt, const double *ex,
                          const double *bd)
{
    for (int64_t x = 0; x < cnt; x++)
        if (smattn_error_ratio(-got_at(p, got, 4, n, st, x), ex[x], bd[x]) > 1)
            return 0;
    return cnt > 0;
}

void conform_judge_backward_result(const smattn_problem *p, const smattn_inputs *in,
                                   const smattn_grad_inputs *gin, const smattn_grad_outputs *got,
                                   const smattn_backward_precision *pm, conform_result *r)
{
    int64_t n[5][4], st[5][4], cnt[5];
    double *ex[5] = {NULL, NULL, NULL, NULL, NULL}, *bd[5] = {NULL, NULL, NULL, NULL, NULL};
    unsigned char *row_sees = NULL, *key_seen = NULL;
    smattn_ref_config cfg = {1, 0, 0, 0};
    double *wid = NULL; /* a summed dBias taken from its terms: their sum's distance bound */
    int64_t undecided = 0, undecided_at = -1;
    r->status = CONFORM_FAIL;
    r->worst_out = -1;
    smattn_status s = exact_and_bound(p, in, gin, got, pm, &cfg, n, st, cnt, ex, bd, &wid);
    if (s == SMATTN_ERR_PRECISION) {
        /* the oracle could not decide some element: the gradients it can still decide are
         * judged (dQ, dK and dV alone, when dBias or dSinks were given), and the case is
         * left unjudged, saying so, unless those fail */
        if (got->dbias.data || got->dsinks.data) {
            /* without dBias first (its sums are where exact zeros hide), then without
             * dSinks too */
            smattn_grad_outputs less = *got;
            memset(&less.dbias, 0, sizeof less.dbias);
            const char *what = got->dbias.data ? "dBias" : "dSinks";
            int judged = 0;
            if (got->dbias.data && got->dsinks.data) {
                conform_judge_backward_result(p, in, gin, &less, pm, r);
                judged =
                    r->status != CONFORM_SKIP || strncmp(r->reason, CONFORM_SKIP_ORACLE_UNDECIDED,
                                                         strlen(CONFORM_SKIP_ORACLE_UNDECIDED));
                what = judged ? "dBias" : "dBias and dSinks";
            }
            if (!judged) {
                memset(&less.dsinks, 0, sizeof less.dsinks);
                conform_judge_backward_result(p, in, gin, &less, pm, r);
            }
            if (r->status == CONFORM_PASS) {
                r->status = CONFORM_SKIP;
                snprintf(r->reason, sizeof r->reason,
                         CONFORM_SKIP_ORACLE_UNDECIDED
                         " %s within its precision limit "
                         "(SMATTN_ERR_PRECISION: an exact zero or a rounding midpoint no "
                         "expansion reaches, SPEC 10.3 item 6), so nothing proves it right; "
                         "the other gradients are within their bounds (worst error/bound "
                         "ratio %.4g)",
                         what, r->max_ratio);
            }
            goto done;
        }
        r->status = CONFORM_SKIP;
        snprintf(r->reason, sizeof r->reason,
                 CONFORM_SKIP_ORACLE_UNDECIDED
                 " the exact gradients within its precision "
                 "limit (SMATTN_ERR_PRECISION: an exact zero or a rounding midpoint no expansion "
                 "reaches, SPEC 10.3 item 6)");
        goto done;
    }
    if (s) {
        snprintf(r->reason, sizeof r->reason, "could not judge: the oracle or the bound failed: %s (%s)",
                 smattn_status_str(s), smattn_status_name(s));
        goto done;
    }
    /* which rows see a key, which keys a row of their KV head sees */
    const int64_t B = p->B, S = p->S, T = p->T, Hq = p->Hq, Hkv = p->Hkv;
    row_sees = calloc((size_t)(B * S * Hq) + 1, 1);
    key_seen = calloc((size_t)(B * T * Hkv) + 1, 1);
    if (!row_sees || !key_seen) {
        snprintf(r->reason, sizeof r->reason, "could not judge: out of memory");
        goto done;
    }
    for (int64_t b = 0; b < B; b++)
        for (int64_t h = 0; h < Hq; h++)
            for (int64_t i = 0; i < S; i++)
                for (int64_t j = 0; j < T; j++)
                    if (sees(p, in, b, h, i, j)) {
                        row_sees[(b * S + i) * Hq + h] = 1;
                        key_seen[(b * T + j) * Hkv + h / (Hq / Hkv)] = 1;
                    }
    /* fails: per gradient; at, att: the element (and gradient) that names a class, at
     * CL_OTHER the worst of dQ, dK, dV, at CL_DBIAS and CL_DSINKS their own worst */
    int64_t fails[5] = {0, 0, 0, 0, 0}, at[CL_OTHER + 1];
    int att[CL_OTHER + 1];
    for (int k = 0; k <= CL_OTHER; k++)
        att[k] = -1, at[k] = -1;
    double maxr = 0, worst_fail[3] = {0, 0, 0}; /* dQ-dV, dBias, dSinks */
    const int full_dbias = got->dbias.data && got->dbias.stride[0] && got->dbias.stride[1] &&
                           got->dbias.stride[2] && got->dbias.stride[3];
    for (int t = 0; t < 5; t++)
        for (int64_t x = 0; x < cnt[t]; x++) {
            double c = got_at(p, got, t, n[t], st[t], x), e = ex[t][x], b = bd[t][x];
            double ratio = smattn_error_ratio(c, e, b);
            if (t == 3 && wid && wid[x] > 0 && b == 0 && e == 0) {
                ratio = smattn_error_ratio(c, 0.0, 0.0); /* no term but zeros, bound 0: +0 */
            } else if (t == 3 && wid && wid[x] > 0 && isfinite(c)) {
                /* e is within wid of the exact sum: a pass or a failure only where that
                 * holds for every value within it, else undecided (and not a failure) */
                const double d = fabs(c - e);
                if (!(d + wid[x] <= b) && !(d - wid[x] > b)) {
                    undecided_at = undecided++ ? undecided_at : x;
                    ratio = 1;
                } else {
                    ratio = d > b ? (d - wid[x]) / b : d / b;
                }
            }
            r->elements++;
            if (isfinite(e) && isinf(b))
                r->unbounded++;
            if (r->elements == 1 || ratio > maxr) {
                maxr = ratio;
                r->worst_got = c, r->worst_exact = e, r->worst_bound = b;
            }
            if (!(ratio > 1))
                continue;
            r->mismatched++;
            fails[t]++;
            if (isnan(c) && !isnan(e))
                r->nonfinite++;
            /* an empty row's dQ and an unseen key's dK and dV are classed by visibility
             * only where their exact value is +0: under the mean convention an empty row
             * gives dO / T_b to every key's dV, under nan its dQ and every dK, dV are NaN
             * (SPEC 10.2) */
            const int exact_zero = e == 0 && !signbit(e);
            int cl = CL_NONE;
            if (t == 0 && !row_sees[x / p->D] && exact_zero && isnan(c))
                cl = CL_EMPTY_NAN;
            else if (t == 0 && !row_sees[x / p->D] && exact_zero)
                cl = CL_HIDDEN;
            else if ((t == 1 || t == 2) && !key_seen[x / n[t][3]] && exact_zero)
                cl = CL_HIDDEN;
            else if (t == 3 && full_dbias && exact_zero && /* dBias [B,Hq,S,T]: dS at j */
                     !sees(p, in, x / st[3][0], x / st[3][1] % n[3][1], x / st[3][2] % n[3][2],
                           x % n[3][3]))
                cl = CL_HIDDEN;
            if (cl != CL_NONE && at[cl] < 0)
                at[cl] = x, att[cl] = t;
            const int w = t < 3 ? CL_OTHER : t == 3 ? CL_DBIAS : CL_DSINKS, wi = t < 3 ? 0 : t - 2;
            if (at[w] < 0 || ratio > worst_fail[wi])
                at[w] = x, att[w] = t, worst_fail[wi] = ratio;
        }
    r->max_ratio = maxr;
    if (p->layout) { /* the storage no key or stored row reaches: +0 (SPEC 10.1) */
        int64_t bad[3], first[3];
        double val[3];
        if (unreached_nonzero(p, got, bad, first, val)) {
            snprintf(r->reason, sizeof r->reason, "could not judge: out of memory");
            goto done;
        }
        for (int t = 0; t < 3; t++)
            if (bad[t]) {
                static const char *const nm[3] = {"dQ", "dK", "dV"};
                r->mismatched += bad[0] + bad[1] + bad[2];
                r->worst_got = val[t], r->worst_exact = 0, r->worst_bound = 0;
                snprintf(r->reason, sizeof r->reason,
                         "storage no key reaches given gradient: %s storage element %lld = %.9g, "
                         "but no stored row or key t < T_b uses it (a page no sequence names, a "
                         "slot past T_b, a key past seqused_k), so it is +0 (SPEC 10.1; %lld "
                         "such elements)",
                         nm[t], (long long)first[t], val[t], (long long)(bad[0] + bad[1] + bad[2]));
                goto done;
            }
    }
    if (!r->mismatched && undecided) {
        char el[96];
        name_elem(p, got, 3, undecided_at, el, sizeof el);
        r->status = CONFORM_SKIP;
        snprintf(r->reason, sizeof r->reason,
                 CONFORM_SKIP_ORACLE_UNDECIDED
                 " dBias within its precision limit, and %.60s "
                 "(%lld elements) lies so near its bound that the sum of its exact terms cannot "
                 "tell (SPEC 10.3 item 6)",
                 el, (long long)undecided);
        goto done;
    }
    if (!r->mismatched) {
        r->status = CONFORM_PASS;
        goto done;
    }
    /* a dLSE given, and gradients that are the oracle's for dLSE = 0: dLSE left out */
    if (gin->dlse.data && at[CL_EMPTY_NAN] < 0 && at[CL_HIDDEN] < 0 &&
        beyond_without_dlse(p, in, gin, got, pm, &cfg) == 0) {
        const int w = at[CL_OTHER] >= 0 ? CL_OTHER : at[CL_DBIAS] >= 0 ? CL_DBIAS : CL_DSINKS;
        const int t = att[w];
        const int64_t x = at[w];
        double c = got_at(p, got, t, n[t], st[t], x), e = ex[t][x], b = bd[t][x];
        r->worst_got = c, r->worst_exact = e, r->worst_bound = b;
        char el[96];
        name_elem(p, got, t, x, el, sizeof el);
        snprintf(r->reason, sizeof r->reason,
                 "dLSE ignored: the gradients are the oracle's for dLSE = 0 (every element within "
                 "its bound there), not for the case's dLSE; dS = P (dP - Delta + dLSE) (SPEC "
                 "10.1); error/bound ratio %.4g at %.60s: got %.9g, exact %.9g, bound %.3g (%lld "
                 "elements beyond)",
                 smattn_error_ratio(c, e, b), el, c, e, b, (long long)r->mismatched);
        goto done;
    }
    /* the class: an element that names it, else the pattern of the failing gradients */
    const int qkv = fails[0] || fails[1] || fails[2];
    int cl = at[CL_EMPTY_NAN] >= 0 ? CL_EMPTY_NAN
             : at[CL_HIDDEN] >= 0  ? CL_HIDDEN
             : !qkv && fails[3]    ? CL_DBIAS
             : !qkv && fails[4]    ? CL_DSINKS
             : Hq > Hkv && !fails[0] && fails[1] && fails[2] ? CL_GQA
             : p->softcap > 0 && !fails[2] && (fails[0] || fails[1]) ? CL_SOFTCAP
             : !fails[2] && fails[0] && fails[1] ? CL_DELTA
             : fails[2] && !fails[0] && !fails[1] ? CL_DV
             : fails[1] && !fails[0] && !fails[2] ? CL_DK
             : fails[0] && fails[1] && fails[2] ? CL_P
                                                : CL_OTHER;
    const int named = cl == CL_EMPTY_NAN || cl == CL_HIDDEN || cl == CL_DBIAS || cl == CL_DSINKS;
    int t = named ? att[cl] : att[CL_OTHER];
    int64_t x = named ? at[cl] : at[CL_OTHER];
    double c = got_at(p, got, t, n[t], st[t], x), e = ex[t][x], b = bd[t][x];
    r->worst_got = c, r->worst_exact = e, r->worst_bound = b;
    char el[96];
    name_elem(p, got, t, x, el, sizeof el);
    int G = (int)(Hq / Hkv);
    switch (cl) {
    case CL_EMPTY_NAN:
        snprintf(r->reason, sizeof r->reason,
                 "empty row turned NaN: %.60s = NaN, but the row sees no key, so nothing flows back "
                 "and its dQ is +0 (SPEC 10.2; %lld elements beyond their bound)",
                 el, (long long)r->mismatched);
        break;
    case CL_HIDDEN:
        snprintf(r->reason, sizeof r->reason,
                 "masked key given gradient: %.60s = %.9g, but %s (masked, padding, outside the "
                 "window or a -inf bias), so it is +0 (SPEC 10.1, 10.2; %lld elements beyond "
                 "their bound)",
                 el, c,
                 t == 3   ? "the row does not see that key"
                 : t != 0 ? "no row of its KV head sees that key"
                          : "the row sees no key",
                 (long long)r->mismatched);
        break;
    default: {
        static const char *const what[CL_OTHER + 1] = {
            "", "", "", "",
            "softcap's derivative: dQ and dK are off while dV (which softcap does not touch) is "
            "within its bound; dU = dS (1 - tanh^2(sigma/c)) is missing or wrong, or dS = P (dP "
            "- Delta + dLSE) itself (SPEC 10.1)",
            "Delta or dP: dQ and dK are off while dV = P^T dO is within its bound, so dS = P (dP "
            "- Delta + dLSE) is wrong: Delta = dO . O from a wrong O (another row's or head's)? "
            "(SPEC 10.1, 10.7 B3)",
            "dV = sum P dO is off while dQ and dK are within their bounds (SPEC 10.1)",
            "dK = scale sum dU q is off while dQ and dV are within their bounds: the scale on "
            "dK, or the rows it sums (SPEC 10.1)",
            "P = exp(s - LSE) is off: dQ, dK and dV all beyond their bounds (the scores, the "
            "scale, the mask or the saved LSE; SPEC 10.7 B1)",
            "", "", "gradients beyond their bounds (SPEC 10.7)"};
        char head[400];
        if (cl == CL_DBIAS && full_dbias)
            snprintf(head, sizeof head,
                     "dBias off while dQ, dK and dV are within their bounds: dBias_ij = dS_ij = "
                     "P_ij (dP_ij - Delta_i + dLSE_i), the bias added after softcap so not dU "
                     "(SPEC 10.1, 10.7 B9)");
        else if (cl == CL_DBIAS) {
            static const char *const dim[4] = {"batches", "heads", "queries", "keys"};
            char over[64] = "";
            size_t k = 0;
            int nd = 0, left = 0;
            for (int a = 0; a < 4; a++)
                left += got->dbias.stride[a] == 0;
            for (int a = 0; a < 4 && k < sizeof over; a++)
                if (got->dbias.stride[a] == 0) {
                    nd++;
                    k += (size_t)snprintf(over + k, sizeof over - k, "%s%s",
                                          nd == 1 ? "" : nd == left ? " and " : ", ", dim[a]);
                }
            snprintf(head, sizeof head,
                     "dBias of a broadcast bias off while dQ, dK and dV are within their bounds: "
                     "each element (* in its index) is the sum of dS over all the %s the bias "
                     "is broadcast along (SPEC 10.1, 10.7 B12)",
                     over);
        } else if (cl == CL_DSINKS && dsinks_negated(p, got, n[4], st[4], cnt[4], ex[4], bd[4]))
            snprintf(head, sizeof head,
                     "dSinks has the wrong sign: every element is within its bound once negated; "
                     "dsink_h = sum over b, i of P_sink (dLSE_i - Delta_i) (SPEC 10.1, 10.7 B13)");
        else if (cl == CL_DSINKS)
            snprintf(head, sizeof head,
                     "dSinks off while dQ, dK and dV are within their bounds: dsink_h = sum over "
                     "every batch and query of P_sink (dLSE_i - Delta_i), P_sink = exp(sink - "
                     "LSE) (SPEC 10.1, 10.7 B13)");
        else if (cl == CL_GQA)
            snprintf(head, sizeof head,
                     "GQA group not summed: dK and dV are off while dQ is within its bound; a KV "
                     "head's dK and dV are the sums over the %d query heads that read it (SPEC "
                     "2.2, 10.1)",
                     G);
        else
            snprintf(head, sizeof head, "%s", what[cl]);
        snprintf(r->reason, sizeof r->reason,
                 "%.260s; error/bound ratio %.4g at %.60s: got %.9g, exact %.9g, bound %.3g (%lld "
                 "elements beyond)",
                 head, smattn_error_ratio(c, e, b), el, c, e, b, (long long)r->mismatched);
        break;
    }
    }
    /* the optional gradients beyond their bounds too, when the reason names another */
    if (cl != CL_DBIAS && fails[3])
        conform_reason_append(r, "dBias beyond its bound too");
    if (cl != CL_DSINKS && fails[4])
        conform_reason_append(r, "dSinks beyond its bound too");
    if (fails[3] && wid)
        for (int64_t y = 0; y < cnt[3]; y++)
            if (wid[y] > 0) {
                conform_reason_append(r, "the oracle could not decide the summed dBias (SPEC "
                                         "10.3 item 6): judged against the sum of its exact "
                                         "terms, beyond its bound by more than that sum's "
                                         "rounding");
                break;
            }
done:
    free(wid);
    free(row_sees);
    free(key_seen);
    for (int k = 0; k < 5; k++)
        free(ex[k]), free(bd[k]);
}
