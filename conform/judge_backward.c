/* SPDX-License-Identifier: MIT */
/* judge_backward.c: a backward kernel's gradients against the exact oracle under the bound
 * of SPEC 10.7, element by element with smattn_error_ratio (SPEC 6.10). */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "conform/conform.h"
#include "conform/judge_backward.h"

/* Contiguous strides of dQ [B,S,Hq,D], dK [B,T,Hkv,D], dV [B,T,Hkv,Dv] and the extents. */
static void shape_of(const smattn_problem *p, int t, int64_t n[4], int64_t st[4])
{
    if (t == 0)
        n[0] = p->B, n[1] = p->S, n[2] = p->Hq, n[3] = p->D;
    else
        n[0] = p->B, n[1] = p->T, n[2] = p->Hkv, n[3] = t == 1 ? p->D : p->Dv;
    st[3] = 1;
    for (int k = 2; k >= 0; k--)
        st[k] = st[k + 1] * n[k + 1];
}

/* The oracle's binary64 gradients ex[t] and their bounds bd[t] for model pm with got's
 * dtypes (t: dQ, dK, dV, contiguous; n, st the extents and strides, cnt the counts). The
 * arrays are malloc'd (freed by the caller, also on failure). */
static smattn_status exact_and_bound(const smattn_problem *p, const smattn_inputs *in,
                                     const smattn_grad_inputs *gin, const smattn_grad_outputs *got,
                                     const smattn_backward_precision *pm,
                                     const smattn_ref_config *cfg, int64_t n[3][4],
                                     int64_t st[3][4], int64_t cnt[3], double *ex[3], double *bd[3])
{
    smattn_grad_outputs eo, bo, fmt;
    memset(&eo, 0, sizeof eo);
    memset(&bo, 0, sizeof bo);
    memset(&fmt, 0, sizeof fmt);
    smattn_status s = SMATTN_OK;
    for (int t = 0; t < 3; t++) {
        shape_of(p, t, n[t], st[t]);
        cnt[t] = n[t][0] * st[t][0];
        ex[t] = malloc((size_t)(cnt[t] > 0 ? cnt[t] : 1) * sizeof(double));
        bd[t] = malloc((size_t)(cnt[t] > 0 ? cnt[t] : 1) * sizeof(double));
        if (!ex[t] || !bd[t])
            s = SMATTN_ERR_NOMEM;
    }
    if (s)
        return s;
    smattn_out_tensor *e3[3] = {&eo.dq, &eo.dk, &eo.dv}, *b3[3] = {&bo.dq, &bo.dk, &bo.dv};
    const smattn_out_tensor *g3[3] = {&got->dq, &got->dk, &got->dv};
    smattn_out_tensor *f3[3] = {&fmt.dq, &fmt.dk, &fmt.dv};
    for (int t = 0; t < 3; t++) {
        *e3[t] = (smattn_out_tensor){ex[t], SMATTN_F64, {st[t][0], st[t][1], st[t][2], st[t][3]}};
        *b3[t] = (smattn_out_tensor){bd[t], SMATTN_F64, {st[t][0], st[t][1], st[t][2], st[t][3]}};
        f3[t]->dtype = g3[t]->dtype;
    }
    if ((s = smattn_ref_backward(p, in, gin, &eo, cfg, NULL)))
        return s;
    return smattn_backward_bound(p, in, gin, pm, &fmt, &bo);
}

/* Element x (contiguous index) of got's tensor t. */
static double got_at(const smattn_grad_outputs *got, int t, const int64_t n[4], const int64_t st[4],
                     int64_t x)
{
    const smattn_out_tensor *g = t == 0 ? &got->dq : t == 1 ? &got->dk : &got->dv;
    int64_t i0 = x / st[0], i1 = x / st[1] % n[1], i2 = x / st[2] % n[2], i3 = x % n[3];
    const int64_t *gs = g->stride;
    return smattn_load(g->data, g->dtype, i0 * gs[0] + i1 * gs[1] + i2 * gs[2] + i3 * gs[3]);
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
    int64_t n[3][4], st[3][4], cnt[3];
    double *ex[3] = {NULL, NULL, NULL}, *bd[3] = {NULL, NULL, NULL};
    smattn_status s = exact_and_bound(p, in, gin, got, pm, cfg, n, st, cnt, ex, bd);
    if (s)
        goto done;
    for (int t = 0; t < 3; t++) {
        v->worst[t] = -1;
        for (int64_t x = 0; x < cnt[t]; x++) {
            double c = got_at(got, t, n[t], st[t], x);
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
done:
    for (int t = 0; t < 3; t++)
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

/* "dK[b=0,j=3,g=1,d=2]" for element x of tensor t. */
static void name_elem(const smattn_problem *p, int t, int64_t x, char *buf, size_t cap)
{
    int64_t n[4], st[4];
    shape_of(p, t, n, st);
    static const char *const nm[3] = {"dQ", "dK", "dV"};
    snprintf(buf, cap, "%s[b=%lld,%s=%lld,%s=%lld,%s=%lld]", nm[t], (long long)(x / st[0]),
             t ? "j" : "i", (long long)(x / st[1] % n[1]), t ? "g" : "h",
             (long long)(x / st[2] % n[2]), t == 2 ? "c" : "d", (long long)(x % n[3]));
}

/* The bug classes a failure is put in, in the order they are looked for. */
enum { CL_NONE, CL_EMPTY_NAN, CL_HIDDEN, CL_GQA, CL_SOFTCAP, CL_DELTA, CL_DV, CL_DK, CL_P,
       CL_OTHER };

void conform_judge_backward_result(const smattn_problem *p, const smattn_inputs *in,
                                   const smattn_grad_inputs *gin, const smattn_grad_outputs *got,
                                   const smattn_backward_precision *pm, conform_result *r)
{
    int64_t n[3][4], st[3][4], cnt[3];
    double *ex[3] = {NULL, NULL, NULL}, *bd[3] = {NULL, NULL, NULL};
    unsigned char *row_sees = NULL, *key_seen = NULL;
    smattn_ref_config cfg = {1, 0, 0, 0};
    r->status = CONFORM_FAIL;
    r->worst_out = -1;
    smattn_status s = exact_and_bound(p, in, gin, got, pm, &cfg, n, st, cnt, ex, bd);
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
    int64_t fails[3] = {0, 0, 0}, at[CL_OTHER + 1];
    int att[CL_OTHER + 1];
    for (int k = 0; k <= CL_OTHER; k++)
        att[k] = -1, at[k] = -1;
    double maxr = 0, worst_fail = 0;
    for (int t = 0; t < 3; t++)
        for (int64_t x = 0; x < cnt[t]; x++) {
            double c = got_at(got, t, n[t], st[t], x), e = ex[t][x], b = bd[t][x];
            double ratio = smattn_error_ratio(c, e, b);
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
            int cl = CL_NONE;
            if (t == 0 && !row_sees[x / p->D] && isnan(c))
                cl = CL_EMPTY_NAN;
            else if (t == 0 && !row_sees[x / p->D])
                cl = CL_HIDDEN;
            else if (t > 0 && !key_seen[x / n[t][3]])
                cl = CL_HIDDEN;
            if (cl != CL_NONE && at[cl] < 0)
                at[cl] = x, att[cl] = t;
            if (at[CL_OTHER] < 0 || ratio > worst_fail)
                at[CL_OTHER] = x, att[CL_OTHER] = t, worst_fail = ratio;
        }
    r->max_ratio = maxr;
    if (!r->mismatched) {
        r->status = CONFORM_PASS;
        goto done;
    }
    /* the class: an element that names it, else the pattern of the failing gradients */
    int cl = at[CL_EMPTY_NAN] >= 0 ? CL_EMPTY_NAN
             : at[CL_HIDDEN] >= 0  ? CL_HIDDEN
             : Hq > Hkv && !fails[0] && fails[2] ? CL_GQA
             : p->softcap > 0 && !fails[2] && (fails[0] || fails[1]) ? CL_SOFTCAP
             : !fails[2] && fails[0] && fails[1] ? CL_DELTA
             : fails[2] && !fails[0] && !fails[1] ? CL_DV
             : fails[1] && !fails[0] && !fails[2] ? CL_DK
             : fails[0] && fails[1] && fails[2] ? CL_P
                                                : CL_OTHER;
    int t = cl == CL_EMPTY_NAN || cl == CL_HIDDEN ? att[cl] : att[CL_OTHER];
    int64_t x = cl == CL_EMPTY_NAN || cl == CL_HIDDEN ? at[cl] : at[CL_OTHER];
    double c = got_at(got, t, n[t], st[t], x), e = ex[t][x], b = bd[t][x];
    r->worst_got = c, r->worst_exact = e, r->worst_bound = b;
    char el[96];
    name_elem(p, t, x, el, sizeof el);
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
                 el, c, t ? "no row of its KV head sees that key" : "the row sees no key",
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
            "gradients beyond their bounds (SPEC 10.7)"};
        char head[400];
        if (cl == CL_GQA)
            snprintf(head, sizeof head,
                     "GQA group not summed: dV (and dK) are off while dQ is within its bound; a KV "
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
done:
    free(row_sees);
    free(key_seen);
    for (int k = 0; k < 3; k++)
        free(ex[k]), free(bd[k]);
}
