/* SPDX-License-Identifier: MIT */
/* battery_quant.c: quantised inputs (SPEC 2.9): Q, K and V in the 8-bit floats, K and V in
 * llama.cpp's q8_0 and q4_0 blocks, and descales per tensor (vLLM's k_scale, v_scale) and
 * per (batch, KV head) (FlashAttention 3's q/k/v_descale), each aimed at a way kernels get
 * them wrong: a factor forgotten or taken from the wrong head, a block's scale from another
 * block, q4_0's nibbles in the wrong order, e4m3's only NaN read as 480. The case holds the
 * values before the factors; a run stores them in the case's dtypes (fp8 elementwise,
 * blocks as llama.cpp's reference quantisers do) and the judge reads the real values of
 * what was stored (conform_inst_real). A kernel that does not claim the dtype (q_dtypes,
 * kv_dtypes) or the descale (SMATTN_CAP_DESCALE_TENSOR, _HEAD) skips the case, named. */
#include <math.h>
#include <stdlib.h>

#include "conform/battery_impl.h"

/* The fp8 format's smallest normal: what a nonzero value that would flush to zero becomes,
 * so that the case keeps its meaning in that format (conform_case_dtype_fits). */
static double fp8_min_normal(smattn_dtype t)
{
    return t == SMATTN_F8E4M3 ? 0x1p-6 : 0x1p-14;
}

/* Q (which 0), or K and V (1) of c rounded to fp8 format t, as they will be stored. */
static void fit_fp8(conform_case *c, int which, smattn_dtype t)
{
    static const int tens[2][2] = {{T_Q, -1}, {T_K, T_V}};
    for (int k = 0; k < 2; k++) {
        int ti = tens[which][k];
        if (ti < 0)
            continue;
        double *d = MUT(bat_tensor_of(c, ti)->data);
        for (int64_t e = 0; d && e < c->count[ti]; e++) {
            if (!isfinite(d[e]) || d[e] == 0)
                continue;
            unsigned char b = 0;
            smattn_store(&b, t, 0, d[e]);
            double r = smattn_load(&b, t, 0);
            d[e] = r == 0 ? copysign(fp8_min_normal(t), d[e]) : r;
        }
    }
}

/* A quantised attention case: Q in qdt (F32 or an fp8), K and V in kvdt. */
static conform_case *quant_case(builder *bd, const char *name, int64_t B, int64_t S, int64_t T,
                                int64_t Hq, int64_t Hkv, int64_t D, smattn_dtype qdt,
                                smattn_dtype kvdt)
{
    conform_case *c = bat_att(bd, "quant", name, B, S, T, Hq, Hkv, D);
    if (!c)
        return NULL;
    c->q_dtype = qdt, c->kv_dtype = kvdt;
    if (qdt != SMATTN_F32)
        fit_fp8(c, 0, qdt);
    if (kvdt == SMATTN_F8E4M3 || kvdt == SMATTN_F8E5M2)
        fit_fp8(c, 1, kvdt);
    return c;
}

/* Descales for c: per-tensor factors q, k, v (1: none), or with per_head, arrays [B][Hkv]
 * of binary32 factors in [lo, 2 lo) for the tensors whose factor is not 1. */
static void quant_descale(builder *bd, conform_case *c, double q, double k, double v, int per_head)
{
    if (!c)
        return;
    c->descale = bat_zalloc(bd, 1, sizeof *c->descale);
    if (!c->descale)
        return;
    *c->descale = smattn_descale_default();
    const double f[3] = {q, k, v};
    const int64_t n = c->prob.B * c->prob.Hkv;
    for (int t = 0; t < 3; t++) {
        if (f[t] == 1.0)
            continue;
        if (!per_head) {
            double *slot = t == 0 ? &c->descale->q : t == 1 ? &c->descale->k : &c->descale->v;
            *slot = f[t];
            continue;
        }
        double *a = bat_zalloc(bd, (size_t)n, sizeof *a);
        if (!a)
            return;
        for (int64_t e = 0; e < n; e++) /* distinct per head: a head mix-up shows */
            a[e] = (double)(float)(f[t] * (1.0 + (double)bat_rng_int(&bd->r, 0, 1000) / 1000.0));
        c->descale_heads[t] = a;
        if (t == 0)
            c->descale->q_head = a;
        else if (t == 1)
            c->descale->k_head = a;
        else
            c->descale->v_head = a;
    }
    c->prob.descale = c->descale;
}

void battery_quant(builder *bd, int full)
{
    /* the 8-bit floats: every input e4m3 under a causal prefill with GQA; e5m2 K and V in a
     * padded decode (its infinities and NaNs in the padding) */
    conform_case *c = quant_case(bd, "e4m3_qkv_causal_gqa", 1, 8, 40, 4, 2, 32, SMATTN_F8E4M3,
                                 SMATTN_F8E4M3);
    if (c)
        c->prob.causal = SMATTN_CAUSAL_LOWER_RIGHT;
    bat_finish(bd, c);
    c = quant_case(bd, "e5m2_kv_decode_kv_lens", 2, 1, 300, 4, 1, 64, SMATTN_F32, SMATTN_F8E5M2);
    if (c)
        bat_case_lens(bd, c, 0, (int64_t[]){300, 77});
    bat_finish(bd, c);
    /* e4m3's only NaN (S.1111.111) in a visible key: its rows are NaN rows (SPEC 4.2), not
     * rows of a key holding 480 */
    c = quant_case(bd, "e4m3_nan_key", 1, 4, 12, 2, 1, 32, SMATTN_F8E4M3, SMATTN_F8E4M3);
    if (c) {
        MUT(c->in64.k.data)[5 * c->in64.k.stride[1] + 7] = (double)NAN;
        c->garbage = 0;
    }
    bat_finish(bd, c);
    /* e5m2's infinities (S.11111.00, binary16's top byte) in a visible V element: its
     * column is +inf in every row (SPEC 4.2), not NaN as e4m3fn's all-ones byte would be */
    c = quant_case(bd, "e5m2_inf_value", 1, 4, 12, 2, 1, 32, SMATTN_F32, SMATTN_F8E5M2);
    if (c) {
        MUT(c->in64.v.data)[5 * c->in64.v.stride[1] + 7] = (double)INFINITY;
        c->garbage = 0;
    }
    bat_finish(bd, c);
    /* the blocks: two per row (a scale from the other block shows), prefill and decode */
    c = quant_case(bd, "q8_0_kv_causal_prefill", 1, 16, 48, 2, 2, 64, SMATTN_F32, SMATTN_Q8_0);
    if (c)
        c->prob.causal = SMATTN_CAUSAL_LOWER_RIGHT;
    bat_finish(bd, c);
    c = quant_case(bd, "q4_0_kv_decode_gqa", 2, 1, 130, 8, 2, 64, SMATTN_F32, SMATTN_Q4_0);
    if (c)
        bat_case_lens(bd, c, 0, (int64_t[]){130, 45});
    bat_finish(bd, c);
    c = quant_case(bd, "q4_0_kv_prefill", 1, 6, 37, 2, 1, 32, SMATTN_F32, SMATTN_Q4_0);
    bat_finish(bd, c);
    /* descales: per tensor on fp8 (and vLLM's k_scale, v_scale on a q8_0 cache), per
     * (batch, KV head) with GQA (a factor from the wrong head shows) */
    c = quant_case(bd, "e4m3_descale_tensor", 1, 6, 33, 2, 2, 32, SMATTN_F8E4M3, SMATTN_F8E4M3);
    quant_descale(bd, c, 0.75, (double)1.3f, (double)0.05f, 0);
    bat_finish(bd, c);
    c = quant_case(bd, "e4m3_descale_head_gqa", 2, 5, 29, 4, 2, 32, SMATTN_F8E4M3, SMATTN_F8E4M3);
    if (c)
        c->prob.causal = SMATTN_CAUSAL_LOWER_RIGHT;
    quant_descale(bd, c, 0.5, 2.0, 0.25, 1);
    bat_finish(bd, c);
    c = quant_case(bd, "q8_0_k_scale_v_scale", 1, 3, 70, 2, 1, 32, SMATTN_F32, SMATTN_Q8_0);
    quant_descale(bd, c, 1.0, (double)0.37f, (double)3.1f, 0);
    bat_finish(bd, c);
    c = quant_case(bd, "q4_0_descale_head_decode", 3, 1, 90, 4, 2, 64, SMATTN_F32, SMATTN_Q4_0);
    if (c)
        bat_case_lens(bd, c, 0, (int64_t[]){90, 31, 64});
    quant_descale(bd, c, 1.0, 1.5, 0.125, 1);
    bat_finish(bd, c);
    if (!full)
        return;
    c = quant_case(bd, "q8_0_decode_t2100", 1, 1, 2100, 4, 1, 128, SMATTN_F32, SMATTN_Q8_0);
    quant_descale(bd, c, 1.0, (double)0.9f, (double)1.7f, 0);
    bat_finish(bd, c);
    c = quant_case(bd, "q4_0_causal_tiled_d128", 1, 70, 130, 2, 1, 128, SMATTN_F32, SMATTN_Q4_0);
    if (c)
        c->prob.causal = SMATTN_CAUSAL_LOWER_RIGHT;
    bat_finish(bd, c);
    c = quant_case(bd, "e5m2_qkv_descale_head_window", 2, 20, 64, 4, 4, 64, SMATTN_F8E5M2,
                   SMATTN_F8E5M2);
    if (c)
        c->prob.causal = SMATTN_CAUSAL_LOWER_RIGHT, c->prob.window_left = 17;
    quant_descale(bd, c, 3.0, 0.0625, 0.5, 1);
    bat_finish(bd, c);
    c = quant_case(bd, "e4m3_sinks_softcap", 1, 9, 50, 2, 1, 32, SMATTN_F8E4M3, SMATTN_F8E4M3);
    if (c && bat_case_sinks(bd, c, -1.0, 2.0))
        c->prob.softcap = 15.0;
    bat_finish(bd, c);
}
