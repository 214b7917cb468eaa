/* SPDX-License-Identifier: MIT */
/* bw_large_scores_judge.c: a plugin's forward and backward on one causal problem with
 * scores scaled by AMP (q, k uniform in [-AMP, AMP), D = 8, scale 1, dLSE), judged by
 * conform_judge_backward_result as the backward battery judges: shows that the judge kills
 * bw_p_unshifted once the LSE passes 88 and that a correct backward (the example, or P in
 * base 2 as FlashAttention evaluates it) stays far inside the bound up to LSE 4347.
 *   gcc -std=c11 -D_POSIX_C_SOURCE=200809L -Iinclude -I. -o /tmp/j bw_large_scores_judge.c \
 *     build/libsmattn_conform.a build/libsmattn_io.a build/libsmattn.a -lmpfr -lgmp -lm \
 *     -ldl -pthread -ljson-c -lz
 *   /tmp/j PLUGIN.so AMP */
#include <dlfcn.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "smattn.h"
#include "smattn_kernel.h"
#include "conform/conform.h"
typedef int (*att_fn)(const smattn_problem *, const smattn_inputs *, const smattn_outputs *);
static uint64_t st = 88172645463325252u;
static double rnd(void) { st ^= st << 13; st ^= st >> 7; st ^= st << 17; return (double)(st >> 11) * 0x1p-52 - 1.0; }
int main(int argc, char **argv)
{
    if (argc != 3)
        return 2;
    double amp = atof(argv[2]);
    void *h = dlopen(argv[1], RTLD_NOW);
    if (!h) return 2;
    att_fn att;
    void *sym = dlsym(h, "smattn_plugin_attention");
    memcpy(&att, &sym, sizeof att); /* dlsym's object pointer as a function pointer (POSIX) */
    smattn_plugin_backward_fn bw;
    sym = dlsym(h, "smattn_plugin_backward");
    memcpy(&bw, &sym, sizeof bw);
    const smattn_plugin_info *(*desc)(uint32_t);
    sym = dlsym(h, "smattn_plugin_describe");
    memcpy(&desc, &sym, sizeof desc);
    enum { B = 1, S = 6, T = 16, H = 2, D = 8 };
    static float q[B * S * H * D], k[B * T * H * D], v[B * T * H * D], dO[B * S * H * D], dl[B * H * S];
    static float o[B * S * H * D], lse[B * H * S], dq[B * S * H * D], dk[B * T * H * D], dv[B * T * H * D];
    for (int e = 0; e < B * S * H * D; e++) q[e] = (float)(amp * rnd()), dO[e] = (float)rnd();
    for (int e = 0; e < B * T * H * D; e++) k[e] = (float)(amp * rnd()), v[e] = (float)rnd();
    for (int e = 0; e < B * H * S; e++) dl[e] = (float)rnd();
    smattn_problem p = smattn_problem_default();
    p.op = SMATTN_OP_ATTENTION, p.B = B, p.S = S, p.T = T, p.Hq = p.Hkv = H, p.D = p.Dv = D;
    p.scale = 1.0;
    p.causal = SMATTN_CAUSAL_LOWER_RIGHT;
    smattn_inputs in;
    memset(&in, 0, sizeof in);
    in.q = (smattn_tensor){q, SMATTN_F32, {S * H * D, H * D, D, 1}};
    in.k = (smattn_tensor){k, SMATTN_F32, {T * H * D, H * D, D, 1}};
    in.v = (smattn_tensor){v, SMATTN_F32, {T * H * D, H * D, D, 1}};
    smattn_outputs out;
    memset(&out, 0, sizeof out);
    out.o = (smattn_out_tensor){o, SMATTN_F32, {S * H * D, H * D, D, 1}};
    out.lse = (smattn_out_tensor){lse, SMATTN_F32, {H * S, S, 1, 1}};
    int s1 = att(&p, &in, &out);
    smattn_forward_saved sv = {{o, SMATTN_F32, {S * H * D, H * D, D, 1}}, {lse, SMATTN_F32, {H * S, S, 1, 1}}};
    smattn_grad_inputs gi;
    memset(&gi, 0, sizeof gi);
    gi.dout = (smattn_tensor){dO, SMATTN_F32, {S * H * D, H * D, D, 1}};
    gi.dlse = (smattn_tensor){dl, SMATTN_F32, {H * S, S, 1, 1}};
    smattn_grad_outputs go;
    memset(&go, 0, sizeof go);
    go.dq = (smattn_out_tensor){dq, SMATTN_F32, {S * H * D, H * D, D, 1}};
    go.dk = (smattn_out_tensor){dk, SMATTN_F32, {T * H * D, H * D, D, 1}};
    go.dv = (smattn_out_tensor){dv, SMATTN_F32, {T * H * D, H * D, D, 1}};
    int s2 = bw(&p, &in, &sv, &gi, &go);
    float mx = -INFINITY;
    for (int e = 0; e < H * S; e++) mx = fmaxf(mx, lse[e]);
    smattn_backward_precision bpm;
    memset(&bpm, 0, sizeof bpm);
    bpm.fwd = bpm.bwd = desc(0)->precision;
    bpm.o_dtype = bpm.lse_dtype = SMATTN_F32;
    conform_result r;
    memset(&r, 0, sizeof r);
    conform_judge_backward_result(&p, &in, &gi, &go, &bpm, &r);
    printf("amp %g: max LSE %.4g; forward %d backward %d; %s, max err/bound %.4g%s%.300s\n", amp, mx, s1, s2,
           r.status == CONFORM_PASS ? "pass" : "FAIL", r.max_ratio, r.reason[0] ? ": " : "", r.reason);
    return 0;
}
