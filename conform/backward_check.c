/* SPDX-License-Identifier: MIT */
/* backward_check.c: the backward battery (SPEC 10) for a kernel exporting
 * smattn_plugin_backward: small problems from the forward's categories (masks, GQA,
 * softcap, bias, sinks, empty rows, padding, decode and prefill, dLSE, ragged and paged
 * layouts for a kernel claiming their bits, ALiBi's modes), each run in a
 * child like the attention cases (the kernel's forward first, its O and LSE handed to its
 * backward), the gradients judged against smattn_ref_backward under smattn_backward_bound
 * (conform/judge_backward.c), and run twice for a kernel claiming
 * SMATTN_CAP_BACKWARD_DETERMINISTIC. */
#define _DEFAULT_SOURCE 1
#include <errno.h>
#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "conform/battery_impl.h"
#include "conform/conform.h"
#include "core/internal.h"
#include "core/layout.h"

/* ---- the cases ---------------------------------------------------------------------------- */

/* What a case gets beyond its forward problem: a dLSE; in a strided case, dQ, dK, dV
 * head-major ([B,H,rows,D] order, as a transposed tensor), not row-major; the optional
 * outputs dBias (in the bias's own shape: stride 0 where it is broadcast, [B,Hq,S,T]
 * without a bias) and dSinks, asked of a kernel claiming SMATTN_CAP_BACKWARD_DBIAS and
 * SMATTN_CAP_BACKWARD_DSINKS (the case's caps hold the bits, so that one without them
 * skips it as not claimed). */
enum { BW_DLSE = 1, BW_HEAD_MAJOR = 2, BW_DBIAS = 4, BW_DSINKS = 8 };
/* A strided case's padding of the rows of dO, dLSE, dQ, dK and dV (Q's, K's and V's is the
 * case's own), and the value in the inputs' padding: finite, since a backward may decline
 * the non-finite inputs it reads (smattn.h), so NaN there would let one that reads the
 * padding decline instead of fail; 1024, far outside the inputs' [-2, 2), exact in
 * binary32, binary16 and bfloat16 (the dtypes a backward case hands over). */
enum { BW_PAD = 3 };
#define BW_PAD_VALUE 1024.0

static int bw_grads(conform_backward_battery *bb, builder *bd, conform_case *c, unsigned flags)
{
    /* room for every case made so far (a case made before an allocation failed too, so
     * that conform_backward_battery_free finds NULL there) */
    while (bb->cases.n > bb->cap) {
        size_t cap = bb->cap ? 2 * bb->cap : 32;
        double **d = realloc(bb->dout, cap * sizeof *d);
        if (d)
            bb->dout = d;
        double **l = d ? realloc(bb->dlse, cap * sizeof *l) : NULL;
        if (l)
            bb->dlse = l;
        unsigned *f = l ? realloc(bb->flags, cap * sizeof *f) : NULL;
        if (!d || !l || !f)
            return bd->oom = 1, -1;
        bb->flags = f;
        for (size_t k = bb->cap; k < cap; k++)
            bb->dout[k] = bb->dlse[k] = NULL, bb->flags[k] = 0;
        bb->cap = cap;
    }
    if (!c || bd->oom)
        return -1;
    if (!c->has_layout) { /* a layout case is finished, clean, by bat_lay_case */
        c->garbage = 0; /* clean inputs: a backward may decline non-finite ones (smattn.h) */
        for (int t = T_Q; t <= T_V && c->strided; t++) { /* the padding: BW_PAD_VALUE */
            const smattn_tensor *ts = t == T_Q ? &c->in64.q : t == T_K ? &c->in64.k : &c->in64.v;
            const int64_t dim = t == T_V ? c->prob.Dv : c->prob.D;
            for (int64_t e = 0; e < c->count[t]; e++)
                if (e % ts->stride[2] >= dim)
                    MUT(ts->data)[e] = BW_PAD_VALUE;
        }
        bat_finish(bd, c);
    }
    if (flags & BW_DBIAS)
        c->caps |= SMATTN_CAP_BACKWARD_DBIAS;
    if (flags & BW_DSINKS)
        c->caps |= SMATTN_CAP_BACKWARD_DSINKS;
    size_t k = bb->cases.n - 1;
    const smattn_problem *p = &c->prob;
    /* dO and dLSE uniform in [-1, 1), from a stream of their own */
    rng r = {bat_hash_name(c->name, bd->seed ^ 0x6261636b77617264u)};
    bb->flags[k] = flags;
    int64_t no = p->B * p->S * p->Hq * p->Dv, nl = p->B * p->Hq * p->S;
    bb->dout[k] = malloc((size_t)no * sizeof(double));
    bb->dlse[k] = (flags & BW_DLSE) ? malloc((size_t)nl * sizeof(double)) : NULL;
    if (!bb->dout[k] || ((flags & BW_DLSE) && !bb->dlse[k]))
        return bd->oom = 1, -1;
    for (int64_t e = 0; e < no; e++)
        bb->dout[k][e] = (double)(bat_rng_next(&r) >> 11) * 0x1p-52 - 1.0;
    for (int64_t e = 0; bb->dlse[k] && e < nl; e++)
        bb->dlse[k][e] = (double)(bat_rng_next(&r) >> 11) * 0x1p-52 - 1.0;
    return 0;
}

static conform_case *att(builder *bd, const char *name, int64_t B, int64_t S, int64_t T,
                         int64_t Hq, int64_t Hkv, int64_t D, int64_t Dv)
{
    return bat_case_new(bd, "backward", name, SMATTN_OP_ATTENTION, B, S, T, Hq, Hkv, D, Dv, 2.0, 0);
}

/* A bias uniform in [-1, 1) broadcast over the dimensions whose bit is set in over (1 the
 * batches, 2 the heads, 4 the queries, 8 the keys): extent 1 and stride 0 there, contiguous
 * in its own shape (SPEC 2.1), as PyTorch passes a [1,1,S,T] or [B,1,1,T] one. */
static double *bw_bias_broadcast(builder *bd, conform_case *c, unsigned over)
{
    const smattn_problem *p = &c->prob;
    const int64_t full[4] = {p->B, p->Hq, p->S, p->T};
    int64_t ext[4], st[4], next = 1;
    for (int a = 3; a >= 0; a--) {
        ext[a] = (over >> a) & 1u ? 1 : full[a];
        st[a] = ext[a] == 1 && full[a] > 1 ? 0 : next;
        next *= ext[a];
    }
    double *d = bat_alloc_f64(bd, c, T_BIAS, next, st);
    for (int64_t e = 0; d && e < next; e++)
        d[e] = (double)(bat_rng_next(&bd->r) >> 11) * 0x1p-52 - 1.0;
    return d;
}

static void build(conform_backward_battery *bb, builder *bd, int full)
{
    conform_case *c;
    bw_grads(bb, bd, att(bd, "plain", 2, 5, 7, 2, 2, 8, 8), 0);
    bw_grads(bb, bd, att(bd, "dlse", 1, 4, 6, 2, 2, 8, 8), BW_DLSE);
    bw_grads(bb, bd, att(bd, "dv_ne_d", 1, 4, 6, 2, 2, 8, 12), 0);
    if ((c = att(bd, "causal_lower_right", 1, 6, 9, 2, 2, 8, 8)))
        c->prob.causal = SMATTN_CAUSAL_LOWER_RIGHT;
    bw_grads(bb, bd, c, 0);
    if ((c = att(bd, "causal_upper_left", 1, 7, 5, 2, 2, 8, 8)))
        c->prob.causal = SMATTN_CAUSAL_UPPER_LEFT;
    bw_grads(bb, bd, c, 0);
    if ((c = att(bd, "window", 1, 8, 8, 2, 2, 8, 8)))
        c->prob.window_left = 2, c->prob.window_right = 1;
    bw_grads(bb, bd, c, 0);
    /* kv_lens and q_lens: padding keys no row sees, padding query rows (empty) */
    if ((c = att(bd, "padding", 2, 4, 8, 2, 2, 8, 8))) {
        bat_case_lens(bd, c, 0, (int64_t[]){3, 8});
        bat_case_lens(bd, c, 1, (int64_t[]){4, 2});
    }
    bw_grads(bb, bd, c, 0);
    /* a bool mask hiding key 2 from every row, and scattered entries (no row emptied) */
    unsigned char *m = (c = att(bd, "mask", 1, 5, 8, 2, 2, 8, 8)) ? bat_case_mask(bd, c) : NULL;
    for (int64_t e = 0; m && e < c->count[T_MASK]; e++)
        m[e] = e % 8 != 2 && e % 8 != 0 && (e % 5 != 3 || e % 8 == 7);
    bw_grads(bb, bd, c, 0);
    /* a bias with a -inf column (key 5 hidden from every row) */
    double *bias = (c = att(bd, "bias", 1, 4, 7, 2, 2, 8, 8)) ? bat_case_bias(bd, c, 1.0) : NULL;
    for (int64_t e = 0; bias && e < c->count[T_BIAS]; e++)
        if (e % 7 == 5)
            bias[e] = -HUGE_VAL;
    bw_grads(bb, bd, c, 0);
    if ((c = att(bd, "sinks", 1, 4, 6, 2, 2, 8, 8)))
        bat_case_sinks(bd, c, -1.0, 1.0);
    bw_grads(bb, bd, c, BW_DLSE);
    if ((c = att(bd, "softcap", 1, 5, 7, 2, 2, 16, 16)))
        c->prob.softcap = 2.0;
    bw_grads(bb, bd, c, 0);
    bw_grads(bb, bd, att(bd, "gqa_hq4_hkv2", 1, 4, 6, 4, 2, 8, 8), 0);
    bw_grads(bb, bd, att(bd, "mqa_hq3_hkv1", 1, 3, 5, 3, 1, 8, 8), 0);
    /* lower-right with S > T: rows 0..2 see no key (SPEC 3.4); with a sink, the sink alone */
    if ((c = att(bd, "empty_rows", 1, 6, 3, 2, 2, 8, 8)))
        c->prob.causal = SMATTN_CAUSAL_LOWER_RIGHT;
    bw_grads(bb, bd, c, 0);
    if ((c = att(bd, "empty_rows_sinks_dlse", 1, 5, 3, 2, 1, 8, 8))) {
        c->prob.causal = SMATTN_CAUSAL_LOWER_RIGHT;
        bat_case_sinks(bd, c, -1.0, 1.0);
    }
    bw_grads(bb, bd, c, BW_DLSE);
    if ((c = att(bd, "decode", 2, 1, 96, 4, 2, 16, 16)))
        bat_case_lens(bd, c, 0, (int64_t[]){96, 37});
    bw_grads(bb, bd, c, 0);
    if ((c = att(bd, "prefill_causal", 1, 40, 40, 2, 1, 16, 16)))
        c->prob.causal = SMATTN_CAUSAL_LOWER_RIGHT;
    bw_grads(bb, bd, c, 0);
    /* bfloat16 inputs, O, LSE and gradients (a training step's dtypes): Delta reads the
     * rounded O (SPEC 10.7 B3); a kernel without bfloat16 takes binary32 */
    if ((c = att(bd, "bf16", 1, 6, 10, 4, 2, 16, 16))) {
        c->prob.causal = SMATTN_CAUSAL_LOWER_RIGHT;
        c->q_dtype = c->kv_dtype = c->out_dtype = SMATTN_BF16;
    }
    bw_grads(bb, bd, c, BW_DLSE);
    /* everything at once */
    if ((c = att(bd, "mixed", 2, 5, 9, 4, 2, 8, 8))) {
        c->prob.causal = SMATTN_CAUSAL_LOWER_RIGHT;
        c->prob.softcap = 3.0;
        bat_case_bias(bd, c, 1.0);
        bat_case_sinks(bd, c, -1.0, 1.0);
        bat_case_lens(bd, c, 0, (int64_t[]){9, 6});
    }
    bw_grads(bb, bd, c, BW_DLSE);
    /* strided (SPEC 2.1), for a kernel claiming SMATTN_CAP_STRIDES: Q, K, V, dO, dLSE, dQ,
     * dK and dV with padded rows (BW_PAD_VALUE in the inputs' padding; the gradients' must
     * stay unwritten), the gradients row-major and then head-major */
    if ((c = bat_case_new(bd, "backward", "strides_padded", SMATTN_OP_ATTENTION, 2, 6, 7, 2, 2, 8,
                          8, 2.0, 3)))
        c->prob.causal = SMATTN_CAUSAL_LOWER_RIGHT;
    bw_grads(bb, bd, c, BW_DLSE);
    if ((c = bat_case_new(bd, "backward", "strides_gqa_head_major", SMATTN_OP_ATTENTION, 2, 4, 9, 4,
                          2, 8, 12, 2.0, 5)))
        bat_case_lens(bd, c, 0, (int64_t[]){9, 5});
    bw_grads(bb, bd, c, BW_HEAD_MAJOR);
    /* scores far from 0 (the forward's extreme and regimes): q and k in [2, 6) with scale 1,
     * every score in [32, 288), 128 on average, so that the LSEs pass 88, where e^s and
     * e^LSE overflow binary32, whatever the seed; and a bias near -200, where they
     * underflow. P = exp(s - LSE) stays exact, e^s / e^LSE gives inf / inf or 0 / 0 */
    if ((c = bat_case_new(bd, "backward", "scores_above88", SMATTN_OP_ATTENTION, 1, 6, 16, 2, 2, 8,
                          8, 4.0, 0))) {
        c->prob.scale = 1.0;
        c->prob.causal = SMATTN_CAUSAL_LOWER_RIGHT;
        for (int64_t e = 0; e < c->count[T_Q]; e++)
            MUT(c->in64.q.data)[e] = fabs(MUT(c->in64.q.data)[e]) + 2.0;
        for (int64_t e = 0; e < c->count[T_K]; e++)
            MUT(c->in64.k.data)[e] = fabs(MUT(c->in64.k.data)[e]) + 2.0;
    }
    bw_grads(bb, bd, c, BW_DLSE);
    double *low = (c = att(bd, "scores_below_minus88", 1, 4, 10, 2, 2, 8, 8))
                      ? bat_case_bias(bd, c, 1.0)
                      : NULL;
    for (int64_t e = 0; low && e < c->count[T_BIAS]; e++)
        low[e] -= 200.0;
    bw_grads(bb, bd, c, BW_DLSE);
    /* ragged and paged (SPEC 2.7, 10.1), for a kernel claiming the layout's bits: dO and dLSE
     * in O's and LSE's storage, dQ, dK, dV in Q's, K's and V's, +0 where no key reaches */
    {
        int64_t sq[3] = {2, 1, 3}, tk[3] = {9, 4, 6};
        bat_lay_spec ls = {1, BAT_KV_PACKED, 0, 0, 0, 0, 3, 1, SMATTN_ALIBI_NONE};
        bw_grads(bb, bd,
                 bat_lay_case(bd, "backward", "layout_packed_seqused_k", 3, sq, tk, 3, 9, 2, 1,
                              8, SMATTN_CAUSAL_NONE, -1, -1, &ls),
                 BW_DLSE);
    }
    {
        int64_t sq[3] = {5, 2, 1}, tk[3] = {7, 11, 3};
        bat_lay_spec ls = {1, BAT_KV_PAGED, 0, 3, 2, 0, 0, 1, SMATTN_ALIBI_NONE};
        bw_grads(bb, bd,
                 bat_lay_case(bd, "backward", "layout_paged_p3_gqa_causal", 3, sq, tk, 5, 12, 4, 2,
                              8, SMATTN_CAUSAL_LOWER_RIGHT, -1, -1, &ls),
                 0);
    }
    {
        int64_t sq[2] = {1, 1}, tk[2] = {37, 50};
        bat_lay_spec ls = {0, BAT_KV_PAGED, 1, 16, 1, 0, 0, 1, SMATTN_ALIBI_NONE};
        bw_grads(bb, bd,
                 bat_lay_case(bd, "backward", "layout_paged_hnd_decode", 2, sq, tk, 1, 64, 2, 2,
                              16, SMATTN_CAUSAL_NONE, -1, -1, &ls),
                 0);
    }
    {
        int64_t sq[4] = {0, 3, 2, 0}, tk[4] = {5, 0, 6, 0};
        bat_lay_spec ls = {1, BAT_KV_PACKED, 0, 0, 0, 0, 0, 1, SMATTN_ALIBI_NONE};
        bw_grads(bb, bd,
                 bat_lay_case(bd, "backward", "layout_packed_zero_length", 4, sq, tk, 3, 6, 2, 1,
                              8, SMATTN_CAUSAL_LOWER_RIGHT, -1, -1, &ls),
                 BW_DLSE);
    }
    /* dSinks over a packed batch, for a kernel claiming bit 27 beside the layout's: the
     * rows of sequence 1 (3 queries, no key) see the sink alone, each adding dLSE_i */
    {
        int64_t sq[3] = {2, 3, 4}, tk[3] = {5, 0, 6};
        bat_lay_spec ls = {1, BAT_KV_PACKED, 0, 0, 0, 0, 0, 1, SMATTN_ALIBI_NONE};
        if ((c = bat_lay_case(bd, "backward", "layout_packed_dsinks", 3, sq, tk, 4, 6, 4, 2, 8,
                              SMATTN_CAUSAL_LOWER_RIGHT, -1, -1, &ls)))
            bat_case_sinks(bd, c, -1.0, 1.0);
        bw_grads(bb, bd, c, BW_DLSE | BW_DSINKS);
    }
    /* ALiBi (SPEC 2.8): each mode, one of them paged */
    {
        int64_t sq[2] = {4, 3}, tk[2] = {10, 7};
        bat_lay_spec ls = {1, BAT_KV_PAGED, 0, 4, 1, 0, 0, 1, SMATTN_ALIBI_SYMMETRIC};
        bw_grads(bb, bd,
                 bat_lay_case(bd, "backward", "alibi_symmetric_paged_causal", 2, sq, tk, 4, 10, 4,
                              2, 8, SMATTN_CAUSAL_LOWER_RIGHT, -1, -1, &ls),
                 BW_DLSE);
    }
    if ((c = att(bd, "alibi_one_sided_decode", 2, 1, 40, 4, 1, 16, 16))) {
        bat_case_alibi(bd, c, SMATTN_ALIBI_ONE_SIDED, 1, NULL);
        bat_case_lens(bd, c, 0, (int64_t[]){40, 17});
    }
    bw_grads(bb, bd, c, 0);
    if ((c = att(bd, "alibi_mask_bias", 1, 5, 8, 2, 1, 8, 8))) {
        bat_case_bias(bd, c, 1.0);
        bat_case_alibi(bd, c, SMATTN_ALIBI_MASK, 0, NULL);
        c->prob.causal = SMATTN_CAUSAL_LOWER_RIGHT;
    }
    bw_grads(bb, bd, c, 0);
    /* dBias and dSinks (SPEC 10.1), for a kernel claiming bits 26 and 27: a full bias with
     * a -inf column and a -inf entry (+0 where the row does not see the key); broadcast
     * over batches and heads (PyTorch's [1,1,S,T]: each element the sum over B Hq rows),
     * and over the queries ([B,Hq,1,T]: over a head's rows); no bias at all (dBias = dS,
     * not the dU of softcap); sinks over two batches and a GQA group, one of them -inf
     * (+0), with rows that see the sink alone (each adds dLSE_i) */
    double *fb = (c = att(bd, "dbias", 2, 4, 7, 4, 2, 8, 8)) ? bat_case_bias(bd, c, 1.0) : NULL;
    for (int64_t e = 0; fb && e < c->count[T_BIAS]; e++)
        if (e % 7 == 5 || e == 9)
            fb[e] = -HUGE_VAL;
    bw_grads(bb, bd, c, BW_DLSE | BW_DBIAS);
    if ((c = att(bd, "dbias_broadcast_batch_heads", 2, 5, 8, 4, 2, 8, 8))) {
        c->prob.causal = SMATTN_CAUSAL_LOWER_RIGHT;
        bw_bias_broadcast(bd, c, 1u | 2u);
    }
    bw_grads(bb, bd, c, BW_DBIAS);
    if ((c = att(bd, "dbias_broadcast_queries", 2, 4, 9, 2, 1, 8, 8))) {
        bw_bias_broadcast(bd, c, 4u);
        bat_case_lens(bd, c, 0, (int64_t[]){9, 5});
    }
    bw_grads(bb, bd, c, BW_DLSE | BW_DBIAS);
    if ((c = att(bd, "dbias_without_bias", 1, 5, 8, 2, 2, 8, 8))) {
        c->prob.softcap = 2.0;
        c->prob.window_left = 3, c->prob.window_right = 1;
    }
    bw_grads(bb, bd, c, BW_DBIAS);
    if ((c = att(bd, "dsinks", 2, 4, 6, 4, 2, 8, 8)))
        bat_case_sinks(bd, c, -1.0, 1.0);
    bw_grads(bb, bd, c, BW_DLSE | BW_DSINKS);
    double *sk = NULL;
    if ((c = att(bd, "dsinks_empty_rows", 2, 6, 4, 4, 2, 8, 8))) {
        c->prob.causal = SMATTN_CAUSAL_LOWER_RIGHT;
        sk = bat_case_sinks(bd, c, -1.0, 1.0);
    }
    if (sk)
        sk[2] = -HUGE_VAL;
    bw_grads(bb, bd, c, BW_DLSE | BW_DSINKS);
    if ((c = att(bd, "dbias_dsinks_mixed", 2, 5, 9, 4, 2, 8, 8))) {
        c->prob.causal = SMATTN_CAUSAL_LOWER_RIGHT;
        c->prob.softcap = 3.0;
        bw_bias_broadcast(bd, c, 2u);
        bat_case_sinks(bd, c, -1.0, 1.0);
        bat_case_lens(bd, c, 0, (int64_t[]){9, 6});
    }
    bw_grads(bb, bd, c, BW_DLSE | BW_DBIAS | BW_DSINKS);
    if (!full)
        return;
    /* a decode step's bias over the keys only ([B,Hq,S,1]: the sum of a row's dS, dLSE_i
     * (1 - P_sink) exactly, which dLSE keeps from 0), and bfloat16 gradients */
    if ((c = att(bd, "dbias_broadcast_keys_decode", 2, 1, 50, 4, 1, 16, 16))) {
        bw_bias_broadcast(bd, c, 8u);
        bat_case_sinks(bd, c, -1.0, 1.0);
        bat_case_lens(bd, c, 0, (int64_t[]){50, 21});
    }
    bw_grads(bb, bd, c, BW_DLSE | BW_DBIAS | BW_DSINKS);
    if ((c = att(bd, "dbias_dsinks_bf16", 2, 6, 10, 4, 2, 16, 16))) {
        c->prob.causal = SMATTN_CAUSAL_LOWER_RIGHT;
        c->q_dtype = c->kv_dtype = c->out_dtype = SMATTN_BF16;
        bw_bias_broadcast(bd, c, 1u);
        bat_case_sinks(bd, c, -1.0, 1.0);
    }
    bw_grads(bb, bd, c, BW_DLSE | BW_DBIAS | BW_DSINKS);
    /* a bias added as is beside the symmetric ALiBi term: dBias is dS of the scores with it
     * (SPEC 10.1; the mask mode's dBias is not defined, never asked) */
    if ((c = att(bd, "dbias_alibi_symmetric", 1, 5, 8, 4, 2, 8, 8))) {
        c->prob.causal = SMATTN_CAUSAL_LOWER_RIGHT;
        bw_bias_broadcast(bd, c, 2u);
        bat_case_alibi(bd, c, SMATTN_ALIBI_SYMMETRIC, 0, NULL);
    }
    bw_grads(bb, bd, c, BW_DLSE | BW_DBIAS);
    {
        int64_t sq[3] = {7, 1, 4}, tk[3] = {12, 9, 4};
        bat_lay_spec ls = {1, BAT_KV_PAGED, 1, 3, 2, 0, 0, 1, SMATTN_ALIBI_NONE};
        bw_grads(bb, bd,
                 bat_lay_case(bd, "backward", "layout_paged_hnd_window", 3, sq, tk, 7, 12, 6, 3,
                              8, SMATTN_CAUSAL_NONE, 2, 1, &ls),
                 BW_DLSE);
    }
    if ((c = att(bd, "alibi_one_sided_softcap_gqa", 1, 6, 9, 4, 2, 8, 8))) {
        c->prob.softcap = 3.0;
        c->prob.causal = SMATTN_CAUSAL_LOWER_RIGHT;
        bat_case_alibi(bd, c, SMATTN_ALIBI_ONE_SIDED, 0, NULL);
    }
    bw_grads(bb, bd, c, BW_DLSE);
    if ((c = att(bd, "prefill_causal_d64", 1, 96, 96, 4, 2, 64, 64)))
        c->prob.causal = SMATTN_CAUSAL_LOWER_RIGHT;
    bw_grads(bb, bd, c, BW_DLSE);
    if ((c = att(bd, "decode_t700", 1, 1, 700, 8, 1, 32, 32)))
        bat_case_sinks(bd, c, -1.0, 1.0);
    bw_grads(bb, bd, c, 0);
    if ((c = att(bd, "chunked_prefill", 1, 16, 80, 2, 2, 32, 32)))
        c->prob.causal = SMATTN_CAUSAL_LOWER_RIGHT;
    bw_grads(bb, bd, c, 0);
    if ((c = att(bd, "softcap_large", 1, 8, 12, 2, 1, 32, 32)))
        c->prob.softcap = 30.0;
    bw_grads(bb, bd, c, BW_DLSE);
    /* random shapes and features */
    rng r = {bat_hash_name("backward/random", bd->seed)};
    for (int k = 0; k < 8 && !bd->oom; k++) {
        char name[32];
        snprintf(name, sizeof name, "random_%03d", k);
        int64_t Hkv = bat_rng_int(&r, 1, 2), G = bat_rng_int(&r, 1, 3);
        c = att(bd, name, bat_rng_int(&r, 1, 2), bat_rng_int(&r, 1, 24), bat_rng_int(&r, 1, 40),
                Hkv * G, Hkv, 8 * bat_rng_int(&r, 1, 4), 8 * bat_rng_int(&r, 1, 4));
        if (!c)
            break;
        uint64_t f = bat_rng_next(&r);
        c->prob.causal = (smattn_causal)(f % 3);
        if (f & 8)
            c->prob.softcap = 5.0;
        if (f & 16)
            bat_case_bias(bd, c, 1.0);
        if (f & 32)
            bat_case_sinks(bd, c, -1.0, 1.0);
        bw_grads(bb, bd, c, (f & 64) ? BW_DLSE : 0);
    }
}

int conform_backward_battery_build(conform_backward_battery *bb, const char *suite, uint64_t seed)
{
    memset(bb, 0, sizeof *bb);
    builder bd = {&bb->cases, seed, {0}, 0};
    build(bb, &bd, suite && !strcmp(suite, "full"));
    if (bd.oom) {
        conform_backward_battery_free(bb);
        return -1;
    }
    return 0;
}

void conform_backward_battery_free(conform_backward_battery *bb)
{
    for (size_t k = 0; k < bb->cases.n && k < bb->cap; k++)
        free(bb->dout[k]), free(bb->dlse[k]);
    free(bb->dout);
    free(bb->dlse);
    free(bb->flags);
    conform_battery_free(&bb->cases);
    memset(bb, 0, sizeof *bb);
}

/* ---- running a case ----------------------------------------------------------------------- */

static int pick(unsigned accepted, smattn_dtype want)
{
    if (accepted & SMATTN_DTYPE_BIT(want))
        return (int)want;
    static const smattn_dtype pref[3] = {SMATTN_F32, SMATTN_F16, SMATTN_BF16};
    for (int k = 0; k < 3; k++)
        if (accepted & SMATTN_DTYPE_BIT(pref[k]))
            return (int)pref[k];
    return -1;
}

/* The child's answer, on a shared page. */
typedef struct bw_report {
    volatile int stage;    /* 1 loading, 2 precision, 3 forward, 4 backward */
    volatile int fwd_returned, fwd_status, returned, status;
    volatile int rerun;    /* the second backward returned 0 */
    volatile int threads;  /* the two runs were on 1 and 2 threads */
    smattn_precision pm;
    char err[256];
    char changed[96]; /* the first input a call changed, and which call ("": none) */
} bw_report;

/* A shared mapping for one output, as run.c lays out the forward's: [guard page][CANARY_BYTES
 * of canary][the data][canary to the page's end, at least CANARY_BYTES][guard page], the
 * guard pages PROT_NONE, so that a write just outside the data changes a canary and one
 * further out crashes. */
#define CANARY_BYTES 64
#define CANARY 0xA5

static size_t page(void)
{
    long p = sysconf(_SC_PAGESIZE);
    return p > 0 ? (size_t)p : 4096;
}

static size_t body_len(size_t bytes)
{
    return (bytes + 2 * CANARY_BYTES + page() - 1) / page() * page();
}

static void *shared(size_t bytes)
{
    const size_t ps = page(), body = body_len(bytes);
    unsigned char *m = mmap(NULL, body + 2 * ps, PROT_READ | PROT_WRITE,
                            MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    if (m == MAP_FAILED)
        return NULL;
    if (mprotect(m, ps, PROT_NONE) || mprotect(m + ps + body, ps, PROT_NONE)) {
        munmap(m, body + 2 * ps);
        return NULL;
    }
    memset(m + ps, CANARY, body);
    return m + ps + CANARY_BYTES;
}

static void release(void *data, size_t bytes)
{
    if (data)
        munmap((unsigned char *)data - CANARY_BYTES - page(), body_len(bytes) + 2 * page());
}

/* The prefill: a signalling NaN of the dtype in every element, canaries after. */
static void prefill(void *data, smattn_dtype t, int64_t n)
{
    size_t es = smattn_dtype_size(t);
    unsigned char pat[8];
    uint64_t b64 = 0x7ff4a5a5a5a5a5a5u;
    uint32_t b32 = 0x7fa5a5a5u;
    uint16_t b16 = t == SMATTN_F16 ? 0x7d5a : 0x7fa5;
    memcpy(pat, t == SMATTN_F64 ? (void *)&b64 : t == SMATTN_F32 ? (void *)&b32 : (void *)&b16, es);
    for (int64_t e = 0; e < n; e++)
        memcpy((unsigned char *)data + (size_t)e * es, pat, es);
}

static int is_prefill(const void *data, smattn_dtype t, int64_t e)
{
    unsigned char want[8];
    prefill(want, t, 1);
    size_t es = smattn_dtype_size(t);
    return memcmp((const unsigned char *)data + (size_t)e * es, want, es) == 0;
}

/* A canary changed: -1 before the data, 1 after it, 0 none. */
static int canary_broken(const void *data, smattn_dtype t, int64_t n)
{
    const size_t bytes = (size_t)n * smattn_dtype_size(t);
    const unsigned char *d = data, *end = d - CANARY_BYTES + body_len(bytes);
    for (const unsigned char *c = d - CANARY_BYTES; c < d; c++)
        if (*c != CANARY)
            return -1;
    for (const unsigned char *c = d + bytes; c < end; c++)
        if (*c != CANARY)
            return 1;
    return 0;
}

void conform_run_backward_case(const conform_kernel *k, const conform_backward_battery *bb,
                               size_t idx, double timeout, int capture_fd, conform_result *r)
{
    const conform_case *c = &bb->cases.cases[idx];
    const smattn_problem *cp = &c->prob;
    memset(r, 0, sizeof *r);
    snprintf(r->name, sizeof r->name, "%s", c->name);
    snprintf(r->category, sizeof r->category, "backward");
    r->caps = c->caps;
    int64_t sh[7] = {cp->B, cp->S, cp->T, cp->Hq, cp->Hkv, cp->D, cp->Dv};
    memcpy(r->shape, sh, sizeof sh);
    r->worst_out = -1;
    r->status = CONFORM_SKIP;
    uint32_t missing = c->caps & ~k->info.caps;
    if (!k->has_backward) {
        snprintf(r->reason, sizeof r->reason, "not claimed: the kernel exports no %s",
                 SMATTN_PLUGIN_BACKWARD_SYMBOL);
        return;
    }
    if (missing) {
        char names[256];
        conform_caps_str(missing, names, sizeof names);
        snprintf(r->reason, sizeof r->reason, "uses %s, not claimed", names);
        return;
    }
    if (!(k->info.caps & SMATTN_CAP_LSE)) {
        snprintf(r->reason, sizeof r->reason,
                 "not claimed: the backward reads the forward's LSE, and the kernel does not "
                 "claim SMATTN_CAP_LSE");
        return;
    }
    if (k->info.max_head_dim && (cp->D > k->info.max_head_dim || cp->Dv > k->info.max_head_dim)) {
        snprintf(r->reason, sizeof r->reason, "head dim over the kernel's max_head_dim %lld",
                 (long long)k->info.max_head_dim);
        return;
    }
    int qdt = pick(k->info.q_dtypes, c->q_dtype), kvdt = pick(k->info.kv_dtypes, c->kv_dtype),
        odt = pick(k->info.out_dtypes, c->out_dtype);
    if (qdt < 0 || kvdt < 0 || odt < 0) {
        snprintf(r->reason, sizeof r->reason, "not claimed: no float dtype for an input or output");
        return;
    }
    r->status = CONFORM_FAIL;
    conform_inst m, lm;
    memset(&lm, 0, sizeof lm);
    if (conform_case_materialise(c, (smattn_dtype)qdt, (smattn_dtype)kvdt, k->info.empty_rows,
                                 k->info.empty_lse, &m)) {
        snprintf(r->reason, sizeof r->reason, "could not run: out of memory");
        return;
    }
    /* a layout case: the kernel gets it laid out, and dO, dLSE and the gradients live in
     * the layout's storage (SPEC 2.7, 10.1) */
    if (c->has_layout && conform_case_lay_out(c, &m, &lm)) {
        snprintf(r->reason, sizeof r->reason, "could not run: out of memory");
        conform_inst_free(&m);
        return;
    }
    const smattn_problem *p = c->has_layout ? &lm.prob : &m.prob;
    const smattn_inputs *pin = c->has_layout ? &lm.in : &m.in;
    int64_t qn[2], kn[2];
    smattn__storage_rows(p, qn, kn);
    /* dO [B,S,Hq,Dv] and dLSE [B,Hq,S]: contiguous (a layout's: O's and LSE's storage), or
     * in a strided case with padded rows holding BW_PAD_VALUE (a kernel reading them
     * contiguous takes the padding in) */
    const int64_t pad = c->strided ? BW_PAD : 0;
    int64_t so[4], sl[4];
    smattn_contiguous_strides(p, 'o', so);
    smattn_contiguous_strides(p, 'l', sl);
    if (pad) {
        so[2] = p->Dv + pad, so[1] = p->Hq * so[2], so[0] = qn[1] * so[1];
        sl[1] = qn[1] + pad, sl[0] = p->Hq * sl[1];
    }
    const int64_t no = qn[0] * qn[1] * p->Hq * p->Dv, nl = qn[0] * p->Hq * qn[1];
    const int64_t nob = qn[0] * so[0], nlb = qn[0] * sl[0];
    const int64_t ng[3] = {qn[0] * qn[1] * p->Hq * p->D, kn[0] * kn[1] * p->Hkv * p->D,
                           kn[0] * kn[1] * p->Hkv * p->Dv};
    const size_t qes = smattn_dtype_size((smattn_dtype)qdt), oes = smattn_dtype_size((smattn_dtype)odt);
    /* The gradients: view t (dQ, dK, dV) holds ng[t] elements of a buffer of nb[t], of
     * strides gst[t]: contiguous, a layout's Q, K, V storage (one buffer each), or in a
     * strided case with padded rows, row-major or head-major. No two share a buffer: the
     * overlap check of SPEC 2.1 is on spans, so interleaved views (one packed dQKV buffer)
     * are SMATTN_ERR_ALIAS to a kernel that validates its arguments as smattn does. */
    int64_t gst[5][4], nb[5] = {0, 0, 0, 0, 0};
    {
        const smattn_tensor *src[3] = {&pin->q, &pin->k, &pin->v};
        const int64_t n4[3][4] = {{qn[0], qn[1], p->Hq, p->D}, {kn[0], kn[1], p->Hkv, p->D},
                                  {kn[0], kn[1], p->Hkv, p->Dv}};
        const int hm = pad && (bb->flags[idx] & BW_HEAD_MAJOR);
        for (int t = 0; t < 3; t++) {
            const int64_t pitch = n4[t][3] + pad;
            gst[t][3] = 1;
            gst[t][2] = hm ? n4[t][1] * pitch : pitch;
            gst[t][1] = hm ? pitch : n4[t][2] * pitch;
            gst[t][0] = n4[t][1] * n4[t][2] * pitch;
            /* a layout's: the strides of Q, K and V (HND pages included) */
            if (c->has_layout && (t == 0 ? p->layout->cu_seqlens_q != NULL
                                         : p->layout->cu_seqlens_k || p->layout->block_table))
                memcpy(gst[t], src[t]->stride, sizeof gst[t]);
            nb[t] = pad ? n4[t][0] * gst[t][0] : ng[t];
        }
    }
    /* dBias [B,Hq,S,T] in the bias's own shape (stride 0 where the bias has one: summed
     * there, SPEC 10.1), contiguous; dSinks [Hq] */
    const int want_db = (bb->flags[idx] & BW_DBIAS) != 0, want_ds = (bb->flags[idx] & BW_DSINKS) != 0;
    if (want_db) {
        const int64_t full[4] = {p->B, p->Hq, p->S, p->T};
        int64_t next = 1;
        for (int a = 3; a >= 0; a--) {
            const int bc = pin->bias.data && pin->bias.stride[a] == 0 && full[a] > 1;
            gst[3][a] = bc ? 0 : next;
            next *= bc ? 1 : full[a];
        }
        nb[3] = next;
    }
    if (want_ds) {
        gst[4][0] = 1, gst[4][1] = gst[4][2] = gst[4][3] = 0;
        nb[4] = p->Hq;
    }
    /* dO and dLSE in the dtype of Q (the oracle reads the same values) */
    void *dob = malloc((size_t)nob * qes), *dlb = bb->dlse[idx] ? malloc((size_t)nlb * qes) : NULL;
    void *fo = shared((size_t)no * oes), *fl = shared((size_t)nl * oes);
    void *gb[2][5] = {{NULL, NULL, NULL, NULL, NULL}, {NULL, NULL, NULL, NULL, NULL}};
    unsigned char *cov[5] = {NULL, NULL, NULL, NULL, NULL};
    bw_report *rep = shared(sizeof *rep);
    int ok = dob && (dlb || !bb->dlse[idx]) && fo && fl && rep;
    const int nt = want_db || want_ds ? 5 : 3; /* the gradients asked for: t < nt, nb[t] > 0 */
    for (int t = 0; t < nt && ok; t++) {
        if (t > 2 && !(t == 3 ? want_db : want_ds))
            continue;
        for (int u = 0; u < 2 && ok; u++)
            ok = (gb[u][t] = shared((size_t)nb[t] * oes)) != NULL;
        /* which elements of the buffer the view holds: all but a padded buffer's padding */
        ok = ok && (cov[t] = calloc((size_t)(nb[t] ? nb[t] : 1), 1)) != NULL;
        if (ok && (!pad || t > 2))
            memset(cov[t], 1, (size_t)nb[t]);
    }
    if (!ok) {
        snprintf(r->reason, sizeof r->reason, "could not run: out of memory");
        goto done;
    }
    for (int t = 0; t < 3 && pad; t++)
        for (int64_t e = 0; e < ng[t]; e++) {
            const int64_t d3 = t == 2 ? p->Dv : p->D, h3 = t ? p->Hkv : p->Hq;
            const int64_t r1 = t ? kn[1] : qn[1];
            cov[t][e / (r1 * h3 * d3) * gst[t][0] + e / (h3 * d3) % r1 * gst[t][1] +
                   e / d3 % h3 * gst[t][2] + e % d3] = 1;
        }
    /* the battery's dense dO [B,S,Hq,Dv] and dLSE [B,Hq,S], each stored row where O's and
     * LSE's storage holds it; 0 in the rows a layout does not store, BW_PAD_VALUE in the
     * padding */
    {
        const double fill = pad ? BW_PAD_VALUE : 0.0;
        for (int64_t e = 0; e < nob; e++)
            smattn_store(dob, (smattn_dtype)qdt, e, fill);
        for (int64_t e = 0; dlb && e < nlb; e++)
            smattn_store(dlb, (smattn_dtype)qdt, e, fill);
        for (int64_t b = 0; b < p->B; b++)
            for (int64_t i = 0; i < p->S; i++)
                for (int64_t h = 0; smattn__row_stored(p, b, i) && h < p->Hq; h++) {
                    for (int64_t d = 0; d < p->Dv; d++)
                        smattn_store(dob, (smattn_dtype)qdt, smattn__row_off(p, so, b, i, h, d),
                                     bb->dout[idx][((b * p->S + i) * p->Hq + h) * p->Dv + d]);
                    if (dlb)
                        smattn_store(dlb, (smattn_dtype)qdt, smattn__lse_off(p, sl, b, h, i),
                                     bb->dlse[idx][(b * p->Hq + h) * p->S + i]);
                }
    }
    prefill(fo, (smattn_dtype)odt, no);
    prefill(fl, (smattn_dtype)odt, nl);
    for (int u = 0; u < 2; u++)
        for (int t = 0; t < nt; t++)
            if (gb[u][t])
                prefill(gb[u][t], (smattn_dtype)odt, nb[t]);
    smattn_outputs fwd;
    memset(&fwd, 0, sizeof fwd);
    fwd.o.data = fo, fwd.o.dtype = (smattn_dtype)odt;
    fwd.lse.data = fl, fwd.lse.dtype = (smattn_dtype)odt;
    smattn_contiguous_strides(p, 'o', fwd.o.stride);
    smattn_contiguous_strides(p, 'l', fwd.lse.stride);
    smattn_forward_saved saved;
    saved.o = (smattn_tensor){fo, (smattn_dtype)odt, {0, 0, 0, 0}};
    saved.lse = (smattn_tensor){fl, (smattn_dtype)odt, {0, 0, 0, 0}};
    memcpy(saved.o.stride, fwd.o.stride, sizeof saved.o.stride);
    memcpy(saved.lse.stride, fwd.lse.stride, sizeof saved.lse.stride);
    smattn_grad_inputs gin;
    memset(&gin, 0, sizeof gin);
    gin.dout.data = dob, gin.dout.dtype = (smattn_dtype)qdt;
    memcpy(gin.dout.stride, so, sizeof so);
    if (dlb) {
        gin.dlse.data = dlb, gin.dlse.dtype = (smattn_dtype)qdt;
        memcpy(gin.dlse.stride, sl, sizeof sl);
    }
    smattn_grad_outputs go[2];
    memset(go, 0, sizeof go);
    for (int u = 0; u < 2; u++) {
        smattn_out_tensor *ts[5] = {&go[u].dq, &go[u].dk, &go[u].dv, &go[u].dbias, &go[u].dsinks};
        for (int t = 0; t < nt; t++) {
            if (!gb[u][t])
                continue;
            ts[t]->data = gb[u][t];
            ts[t]->dtype = (smattn_dtype)odt;
            memcpy(ts[t]->stride, gst[t], sizeof gst[t]);
        }
    }
    const int twice = (k->info.caps & SMATTN_CAP_BACKWARD_DETERMINISTIC) != 0;
    memset(rep, 0, sizeof *rep);
    conform_capture_reset(capture_fd);
    struct timespec t0, t1;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    sigset_t old;
    pid_t pid = conform_child_fork(capture_fd, &old);
    if (pid < 0) {
        snprintf(r->reason, sizeof r->reason, "could not run: fork: %s", strerror(errno));
        goto done;
    }
    if (pid == 0) {
        alarm((unsigned)ceil(timeout) + 2);
        rep->stage = 1;
        conform_entry e;
        if (conform_kernel_bind(k, &e, rep->err, sizeof rep->err) || !e.backward)
            _exit(0);
        rep->stage = 2;
        rep->pm = e.precision ? e.precision(p) : k->info.precision;
        rep->stage = 3;
        int th = e.threads && e.threads(1) == 0;
        conform_hashes ih; /* what each call must leave as it is (conform/inputs.c) */
        conform_hashes_inputs(&ih, p, pin);
        rep->fwd_status = e.attention(p, pin, &fwd);
        rep->fwd_returned = 1;
        const char *chg = conform_hashes_changed(&ih);
        if (chg)
            snprintf(rep->changed, sizeof rep->changed, "%s changed during the forward", chg);
        if (rep->fwd_status != 0 || chg)
            _exit(0);
        /* the backward's inputs: the forward's, its saved O and LSE, dO and dLSE */
        conform_hashes_add(&ih, fo, (size_t)no * oes, "the saved O");
        conform_hashes_add(&ih, fl, (size_t)nl * oes, "the saved LSE");
        conform_hashes_add(&ih, dob, (size_t)nob * qes, "dO");
        conform_hashes_add(&ih, dlb, (size_t)nlb * qes, "dLSE");
        rep->stage = 4;
        rep->status = e.backward(p, pin, &saved, &gin, &go[0]);
        rep->returned = 1;
        if ((chg = conform_hashes_changed(&ih)))
            snprintf(rep->changed, sizeof rep->changed, "%s changed during the backward", chg);
        if (rep->status == 0 && twice) {
            rep->threads = th && e.threads(2) == 0;
            rep->rerun = e.backward(p, pin, &saved, &gin, &go[1]) == 0 ? 1 : -1;
        }
        _exit(0);
    }
    int ws = 0;
    int hung = conform_child_finish(pid, timeout, &old, &ws);
    clock_gettime(CLOCK_MONOTONIC, &t1);
    r->seconds = (double)(t1.tv_sec - t0.tv_sec) + 1e-9 * (double)(t1.tv_nsec - t0.tv_nsec);
    conform_capture_read(capture_fd, r->output, sizeof r->output);
    static const char *const where[5] = {"loading the plugin", "loading the plugin",
                                         "smattn_plugin_precision", "the forward",
                                         "the backward"};
    const char *in_what = where[rep->stage >= 1 && rep->stage <= 4 ? rep->stage : 0];
    if (hung) {
        snprintf(r->reason, sizeof r->reason, "hang: %s did not return within %.3g s (killed)",
                 in_what, timeout);
        goto done;
    }
    if (WIFSIGNALED(ws)) {
        snprintf(r->reason, sizeof r->reason, "crash: %s died with signal %d (%s)", in_what,
                 WTERMSIG(ws), strsignal(WTERMSIG(ws)));
        goto done;
    }
    if (rep->stage == 1) {
        rep->err[sizeof rep->err - 1] = '\0';
        snprintf(r->reason, sizeof r->reason, "crash: the plugin could not be loaded: %s",
                 rep->err[0] ? rep->err : "no backward entry");
        goto done;
    }
    /* every output's canaries before a decline is taken as a skip (run.c does the same for
     * the forward): a kernel that writes out of bounds and then declines fails */
    static const char *const bname[5] = {"dQ", "dK", "dV", "dBias", "dSinks"};
    int side = 0;
    const char *broken = NULL;
    int64_t bn = 0;
    if (rep->fwd_returned && (side = canary_broken(fo, (smattn_dtype)odt, no)))
        broken = "the forward's O", bn = no;
    else if (rep->fwd_returned && (side = canary_broken(fl, (smattn_dtype)odt, nl)))
        broken = "the forward's LSE", bn = nl;
    for (int u = 0; u < 1 + (rep->rerun != 0) && rep->returned && !broken; u++)
        for (int a = 0; a < nt && !broken; a++)
            if (gb[u][a] && (side = canary_broken(gb[u][a], (smattn_dtype)odt, nb[a])))
                broken = bname[a], bn = nb[a];
    if (broken) {
        snprintf(r->reason, sizeof r->reason,
                 "wrote outside its outputs: %s %s (a %lld-element buffer)%s",
                 side < 0 ? "before the start of" : "past the end of", broken, (long long)bn,
                 !rep->returned     ? ", then declined the forward or failed"
                 : rep->status != 0 ? ", then declined the backward or failed"
                                    : "");
        goto done;
    }
    if (rep->changed[0]) { /* whatever the call returned: the caller's tensors are not its */
        rep->changed[sizeof rep->changed - 1] = '\0';
        conform_inputs_reason(r->reason, sizeof r->reason, rep->changed);
        goto done;
    }
    if (!rep->returned) {
        if (rep->fwd_returned && rep->fwd_status == SMATTN_ERR_UNSUPPORTED) {
            r->status = CONFORM_SKIP;
            snprintf(r->reason, sizeof r->reason, "the kernel declined the forward "
                                                  "(SMATTN_ERR_UNSUPPORTED)");
        } else if (rep->fwd_returned && rep->fwd_status != 0) {
            snprintf(r->reason, sizeof r->reason, "the forward returned status %d (%s)",
                     rep->fwd_status, smattn_status_name((smattn_status)rep->fwd_status));
        } else {
            snprintf(r->reason, sizeof r->reason,
                     "crash: %s's process exited with status %d without returning", in_what,
                     WIFEXITED(ws) ? WEXITSTATUS(ws) : -1);
        }
        goto done;
    }
    if (rep->status == SMATTN_ERR_UNSUPPORTED) {
        r->status = CONFORM_SKIP;
        snprintf(r->reason, sizeof r->reason, "the kernel declined the backward "
                                              "(SMATTN_ERR_UNSUPPORTED)");
        goto done;
    }
    if (rep->status != 0) {
        snprintf(r->reason, sizeof r->reason, "the backward returned status %d (%s)", rep->status,
                 smattn_status_name((smattn_status)rep->status));
        goto done;
    }
    /* each element of a view written, the padding between a strided view's rows not */
    for (int a = 0; a < nt; a++)
        for (int64_t e = 0; gb[0][a] && e < nb[a]; e++)
            if (cov[a][e] && is_prefill(gb[0][a], (smattn_dtype)odt, e)) {
                snprintf(r->reason, sizeof r->reason,
                         "%s element %lld was never written (it still holds the prefill "
                         "pattern; SPEC 10.1: +0 where nothing flows back)%s",
                         bname[a], (long long)e,
                         a > 2 ? "; a kernel claiming the bit that does not compute it for "
                                 "a case declines it (SMATTN_ERR_UNSUPPORTED)"
                               : "");
                goto done;
            } else if (!cov[a][e] && !is_prefill(gb[0][a], (smattn_dtype)odt, e)) {
                snprintf(r->reason, sizeof r->reason,
                         "wrote outside its outputs: element %lld of %s's buffer is row padding "
                         "(strides %lld, %lld, %lld, %lld), no element of the tensor",
                         (long long)e, bname[a], (long long)gst[a][0], (long long)gst[a][1],
                         (long long)gst[a][2], (long long)gst[a][3]);
                goto done;
            }
    char perr[400];
    if (conform_precision_check(&rep->pm, "smattn_plugin_precision", perr, sizeof perr)) {
        snprintf(r->reason, sizeof r->reason, "%s", perr);
        goto done;
    }
    /* the model: the built-in's own; a plugin's forward precision for both passes */
    smattn_backward_precision bpm;
    if (k->builtin) {
        bpm = smattn_opt_backward_precision(p);
    } else {
        bpm.fwd = rep->pm;
        bpm.bwd = rep->pm;
    }
    bpm.o_dtype = bpm.lse_dtype = (smattn_dtype)odt;
    r->pm = bpm.bwd;
    r->has_pm = 1;
    double secs = r->seconds;
    conform_judge_backward_result(p, pin, &gin, &go[0], &bpm, r);
    if (pad && r->status == CONFORM_FAIL)
        conform_reason_append(r, "strided case: Q, K, V, dO and dLSE have padded rows (1024 in "
                                 "the padding), dQ, dK and dV too: are their strides read?");
    r->seconds = secs;
    if (twice && r->status == CONFORM_PASS) {
        r->rerun = rep->rerun == 1 ? 1 : -1;
        for (int t = 0; t < nt && r->rerun == 1; t++)
            for (int64_t e = 0; gb[0][t] && e < nb[t]; e++)
                if (memcmp((const char *)gb[0][t] + (size_t)e * oes,
                           (const char *)gb[1][t] + (size_t)e * oes, oes)) {
                    r->rerun = -1;
                    r->status = CONFORM_FAIL;
                    snprintf(r->reason, sizeof r->reason,
                             "not deterministic: %s element %lld differs between two runs%s, "
                             "although the kernel claims SMATTN_CAP_BACKWARD_DETERMINISTIC",
                             bname[t], (long long)e, rep->threads ? " (on 1 thread and on 2)" : "");
                    break;
                }
        if (rep->rerun != 1 && r->status == CONFORM_PASS) {
            r->status = CONFORM_FAIL;
            snprintf(r->reason, sizeof r->reason,
                     "not deterministic: the second run of the backward did not return 0, "
                     "although the kernel claims SMATTN_CAP_BACKWARD_DETERMINISTIC");
        }
    }
done:
    free(dob);
    free(dlb);
    release(fo, (size_t)no * oes);
    release(fl, (size_t)nl * oes);
    for (int a = 0; a < 5; a++) {
        for (int u = 0; u < 2; u++)
            release(gb[u][a], (size_t)nb[a] * oes);
        free(cov[a]);
    }
    release(rep, sizeof *rep);
    conform_inst_free(&lm);
    conform_inst_free(&m);
}
