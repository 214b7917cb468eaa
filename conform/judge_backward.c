/* SPDX-License-Identifier: MIT */
/* judge_backward.c: a backward kernel's gradients against the exact oracle under the bound
 * of SPEC 10.7, element by element with smattn_error_ratio (SPEC 6.10). */
#include <math.h>
#include <stdlib.h>
#include <string.h>

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
        goto done;
    smattn_out_tensor *e3[3] = {&eo.dq, &eo.dk, &eo.dv}, *b3[3] = {&bo.dq, &bo.dk, &bo.dv};
    const smattn_out_tensor *g3[3] = {&got->dq, &got->dk, &got->dv};
    smattn_out_tensor *f3[3] = {&fmt.dq, &fmt.dk, &fmt.dv};
    for (int t = 0; t < 3; t++) {
        *e3[t] = (smattn_out_tensor){ex[t], SMATTN_F64, {st[t][0], st[t][1], st[t][2], st[t][3]}};
        *b3[t] = (smattn_out_tensor){bd[t], SMATTN_F64, {st[t][0], st[t][1], st[t][2], st[t][3]}};
        f3[t]->dtype = g3[t]->dtype;
    }
    if ((s = smattn_ref_backward(p, in, gin, &eo, cfg, NULL)) ||
        (s = smattn_backward_bound(p, in, gin, pm, &fmt, &bo)))
        goto done;
    for (int t = 0; t < 3; t++) {
        v->worst[t] = -1;
        for (int64_t x = 0; x < cnt[t]; x++) {
            int64_t i0 = x / st[t][0], i1 = x / st[t][1] % n[t][1], i2 = x / st[t][2] % n[t][2],
                    i3 = x % n[t][3];
            const int64_t *gs = g3[t]->stride;
            double c = smattn_load(g3[t]->data, g3[t]->dtype,
                                   i0 * gs[0] + i1 * gs[1] + i2 * gs[2] + i3 * gs[3]);
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
