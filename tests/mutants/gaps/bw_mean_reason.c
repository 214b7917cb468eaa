/* SPDX-License-Identifier: MIT */
/* bw_mean_reason.c: the backward judge on the oracle's own gradients for a problem under
 * the mean convention (row 1 masked whole, key 1 seen by no row), with the empty row's
 * share dO / T left out of dV at key 1: the reason says the key must be +0, while its
 * exact dV is 0.125. Built as bw_large_scores_judge.c (no plugin). */
#include <math.h>
#include <stdio.h>
#include <string.h>
#include "smattn.h"
#include "conform/conform.h"
int main(void)
{
    enum { S = 2, T = 4, D = 2 };
    float q[S * D] = {0.5f, -0.25f, 1, 0.75f}, k[T * D] = {1, 0, 0, 1, -0.5f, 0.5f, 0.25f, 1};
    float v[T * D] = {1, 2, -1, 0, 0.5f, 3, 2, -2}, dO[S * D] = {1, -1, 0.5f, 2};
    unsigned char m[S * T] = {1, 0, 1, 0, 0, 0, 0, 0}; /* row 1 sees nothing */
    float dq[S * D], dk[T * D], dv[T * D];
    smattn_problem p = smattn_problem_default();
    p.op = SMATTN_OP_ATTENTION, p.B = 1, p.S = S, p.T = T, p.Hq = p.Hkv = 1, p.D = p.Dv = D;
    p.scale = 0.5, p.empty_rows = SMATTN_EMPTY_MEAN;
    smattn_inputs in;
    memset(&in, 0, sizeof in);
    in.q = (smattn_tensor){q, SMATTN_F32, {S * D, D, D, 1}};
    in.k = (smattn_tensor){k, SMATTN_F32, {T * D, D, D, 1}};
    in.v = (smattn_tensor){v, SMATTN_F32, {T * D, D, D, 1}};
    in.mask = (smattn_tensor){m, SMATTN_BOOL, {S * T, S * T, T, 1}};
    smattn_grad_inputs gi;
    memset(&gi, 0, sizeof gi);
    gi.dout = (smattn_tensor){dO, SMATTN_F32, {S * D, D, D, 1}};
    smattn_grad_outputs go;
    memset(&go, 0, sizeof go);
    go.dq = (smattn_out_tensor){dq, SMATTN_F32, {S * D, D, D, 1}};
    go.dk = (smattn_out_tensor){dk, SMATTN_F32, {T * D, D, D, 1}};
    go.dv = (smattn_out_tensor){dv, SMATTN_F32, {T * D, D, D, 1}};
    int s = smattn_ref_backward(&p, &in, &gi, &go, NULL, NULL);
    printf("oracle %d: dV[j=1] = %g %g (the empty row's dO / T = %g %g)\n", s, dv[2], dv[3], 0.5 / 4, 2.0 / 4);
    dv[2] = dv[3] = 0.0f; /* the mean row's share to key 1, which no regular row sees, left out */
    smattn_backward_precision bpm;
    memset(&bpm, 0, sizeof bpm);
    bpm.fwd = bpm.bwd = smattn_precision_of(SMATTN_F32);
    bpm.o_dtype = bpm.lse_dtype = SMATTN_F32;
    conform_result r;
    memset(&r, 0, sizeof r);
    conform_judge_backward_result(&p, &in, &gi, &go, &bpm, &r);
    printf("%s: %s\n", r.status == CONFORM_PASS ? "pass" : "FAIL", r.reason);
    return 0;
}
