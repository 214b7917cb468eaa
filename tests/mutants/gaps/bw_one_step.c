/* SPDX-License-Identifier: MIT */
/* bw_one_step.c: one forward and backward of a plugin on scores 100 and 95 (B = S = 1,
 * T = 2, D = 1), its dQ, dK, dV printed; shows bw_p_unshifted.patch failing where the
 * backward battery never looks. gcc -std=c11 -Iinclude -o /tmp/s bw_one_step.c -ldl;
 * /tmp/s PLUGIN.so */
#include <dlfcn.h>
#include <stdio.h>
#include <string.h>
#include "smattn.h"
#include "smattn_kernel.h"
int main(int argc, char **argv)
{
    (void)argc;
    void *h = dlopen(argv[1], RTLD_NOW);
    if (!h) return 2;
    typedef int (*att_fn)(const smattn_problem *, const smattn_inputs *, const smattn_outputs *);
    att_fn att;
    void *sym = dlsym(h, "smattn_plugin_attention");
    memcpy(&att, &sym, sizeof att); /* dlsym's object pointer as a function pointer (POSIX) */
    smattn_plugin_backward_fn bw;
    sym = dlsym(h, "smattn_plugin_backward");
    memcpy(&bw, &sym, sizeof bw);
    float q[1] = {10}, k[2] = {10, 9.5f}, v[2] = {1, -1}, dO[1] = {1};
    float o[1], lse[1], dq[1], dk[2], dv[2];
    smattn_problem p;
    memset(&p, 0, sizeof p);
    p.op = SMATTN_OP_ATTENTION, p.B = p.S = p.Hq = p.Hkv = p.D = p.Dv = 1, p.T = 2, p.scale = 1;
    p.window_left = p.window_right = -1, p.empty_rows = SMATTN_EMPTY_ZERO, p.empty_lse = SMATTN_LSE_NEG_INF;
    smattn_inputs in;
    memset(&in, 0, sizeof in);
    in.q = (smattn_tensor){q, SMATTN_F32, {1, 1, 1, 1}};
    in.k = (smattn_tensor){k, SMATTN_F32, {2, 1, 1, 1}};
    in.v = (smattn_tensor){v, SMATTN_F32, {2, 1, 1, 1}};
    smattn_outputs out;
    memset(&out, 0, sizeof out);
    out.o = (smattn_out_tensor){o, SMATTN_F32, {1, 1, 1, 1}};
    out.lse = (smattn_out_tensor){lse, SMATTN_F32, {1, 1, 1, 1}};
    int st = att(&p, &in, &out);
    smattn_forward_saved sv = {{o, SMATTN_F32, {1, 1, 1, 1}}, {lse, SMATTN_F32, {1, 1, 1, 1}}};
    smattn_grad_inputs gi;
    memset(&gi, 0, sizeof gi);
    gi.dout = (smattn_tensor){dO, SMATTN_F32, {1, 1, 1, 1}};
    smattn_grad_outputs go;
    memset(&go, 0, sizeof go);
    go.dq = (smattn_out_tensor){dq, SMATTN_F32, {1, 1, 1, 1}};
    go.dk = (smattn_out_tensor){dk, SMATTN_F32, {2, 1, 1, 1}};
    go.dv = (smattn_out_tensor){dv, SMATTN_F32, {2, 1, 1, 1}};
    int st2 = bw(&p, &in, &sv, &gi, &go);
    printf("scores 100, 95: forward %d (LSE %.9g), backward %d: dQ %.9g, dK %.9g %.9g, dV %.9g %.9g\n",
           st, lse[0], st2, dq[0], dk[0], dk[1], dv[0], dv[1]);
    return 0;
}
