/* SPDX-License-Identifier: MIT */
/* battery_alibi.c: ALiBi's cases (SPEC 2.8), one per convention and per way kernels get it
 * wrong: the symmetric mode (FlashAttention) and the one-sided mode (vLLM) under a causal
 * prefill, where they differ only in the LSE; without a mask, where O differs too; decodes
 * with kv_lens and per-batch slopes of both signs (T_b, not T, is the reference); q_lens and
 * GQA (S_b); an upper-left mask (the term keeps its lower-right diagonal); a dense bias, softcap and a window before the term; and llama.cpp's mask mode
 * with its f16 distances, past 2048 where f16 rounds them. */
#include <math.h>
#include <stdint.h>

#include "conform/battery_impl.h"
#include "core/internal.h"

/* FlashAttention's slopes 2^(-8(h+1)/Hq) (the default), or vLLM's randn-like ones of both
 * signs, binary32, per batch when asked. */
static void slopes_mixed(builder *bd, conform_case *c, smattn_alibi_mode mode)
{
    float *s = bat_case_alibi(bd, c, mode, 1, NULL);
    for (int64_t k = 0; s && k < c->prob.B * c->prob.Hq; k++)
        s[k] = (float)((double)bat_rng_int(&bd->r, -1000, 1000) / 997.0);
}

static void causal_prefill(builder *bd, const char *name, smattn_alibi_mode mode)
{
    conform_case *c = bat_att(bd, "alibi", name, 1, 8, 24, 4, 2, 16);
    if (c && bat_case_alibi(bd, c, mode, 0, NULL))
        c->prob.causal = SMATTN_CAUSAL_LOWER_RIGHT;
    bat_finish(bd, c);
}

static void decode(builder *bd, const char *name, smattn_alibi_mode mode, int64_t T)
{
    conform_case *c = bat_att(bd, "alibi", name, 2, 1, T, 4, 1, 32);
    if (c) {
        slopes_mixed(bd, c, mode);
        bat_case_lens(bd, c, 0, (int64_t[]){T, T / 3 + 7});
    }
    bat_finish(bd, c);
}

/* llama.cpp's KQ mask: -|p0 - p1| rounded to binary16 (exact up to 2048) where the key is
 * visible under the causal rule, -inf elsewhere; the slope multiplies it. */
static void mask_f16(builder *bd, const char *name, int64_t S, int64_t T)
{
    conform_case *c = bat_att(bd, "alibi", name, 1, S, T, 2, 1, 16);
    double *b = c ? bat_case_bias(bd, c, 1.0) : NULL;
    if (!b || !bat_case_alibi(bd, c, SMATTN_ALIBI_MASK, 0, NULL)) {
        bat_finish(bd, c);
        return;
    }
    c->slopes[0] = 0.5f, c->slopes[1] = 0.0625f;
    for (int64_t h = 0; h < 2; h++)
        for (int64_t i = 0; i < S; i++)
            for (int64_t j = 0; j < T; j++) {
                int64_t p0 = i + T - S; /* the query's position in the cache */
                double d = -(double)(p0 > j ? p0 - j : j - p0);
                uint64_t bits = smattn__round_bits(d, SMATTN_F16);
                b[(h * S + i) * T + j] = j > p0 ? -HUGE_VAL : smattn__bits_to_double(bits, SMATTN_F16);
            }
    c->garbage = 0; /* the -inf entries hide keys; their K and V stay ordinary */
    bat_finish(bd, c);
}

void battery_alibi(builder *bd, int full)
{
    causal_prefill(bd, "symmetric_causal_prefill", SMATTN_ALIBI_SYMMETRIC);
    causal_prefill(bd, "one_sided_causal_prefill", SMATTN_ALIBI_ONE_SIDED);
    conform_case *c = bat_att(bd, "alibi", "symmetric_no_mask", 1, 5, 20, 2, 1, 8);
    if (c)
        bat_case_alibi(bd, c, SMATTN_ALIBI_SYMMETRIC, 0, NULL);
    bat_finish(bd, c);
    c = bat_att(bd, "alibi", "one_sided_no_mask", 1, 5, 20, 2, 1, 8);
    if (c)
        slopes_mixed(bd, c, SMATTN_ALIBI_ONE_SIDED);
    bat_finish(bd, c);
    decode(bd, "one_sided_decode_kv_lens", SMATTN_ALIBI_ONE_SIDED, 300);
    decode(bd, "symmetric_decode_kv_lens", SMATTN_ALIBI_SYMMETRIC, 300);
    c = bat_att(bd, "alibi", "one_sided_q_lens_gqa", 2, 7, 15, 4, 2, 8);
    if (c && bat_case_alibi(bd, c, SMATTN_ALIBI_ONE_SIDED, 0, NULL)) {
        c->prob.causal = SMATTN_CAUSAL_LOWER_RIGHT;
        bat_case_lens(bd, c, 0, (int64_t[]){15, 9});
        bat_case_lens(bd, c, 1, (int64_t[]){7, 3});
    }
    bat_finish(bd, c);
    c = bat_att(bd, "alibi", "symmetric_q_lens_gqa", 2, 7, 15, 4, 2, 8);
    if (c && bat_case_alibi(bd, c, SMATTN_ALIBI_SYMMETRIC, 1, NULL)) {
        c->prob.causal = SMATTN_CAUSAL_LOWER_RIGHT;
        bat_case_lens(bd, c, 0, (int64_t[]){15, 9});
        bat_case_lens(bd, c, 1, (int64_t[]){7, 3});
    }
    bat_finish(bd, c);
    /* an upper-left mask keeps the symmetric term's lower-right diagonal i + T_b - S_b (SPEC
     * 2.8): a kernel that takes the distance from its mask's diagonal (i - j) moves the LSE */
    c = bat_att(bd, "alibi", "symmetric_upper_left_prefill", 1, 6, 20, 2, 1, 16);
    if (c && bat_case_alibi(bd, c, SMATTN_ALIBI_SYMMETRIC, 0, NULL))
        c->prob.causal = SMATTN_CAUSAL_UPPER_LEFT;
    bat_finish(bd, c);
    c = bat_att(bd, "alibi", "symmetric_bias_softcap_window", 1, 6, 30, 2, 2, 16);
    if (c && bat_case_bias(bd, c, 1.0) && bat_case_alibi(bd, c, SMATTN_ALIBI_SYMMETRIC, 0, NULL)) {
        c->prob.causal = SMATTN_CAUSAL_LOWER_RIGHT;
        c->prob.softcap = 20.0;
        c->prob.window_left = 9;
    }
    bat_finish(bd, c);
    mask_f16(bd, "mask_f16_distances", 4, 40);
    mask_f16(bd, "mask_f16_past_2048", 2, 2600);
    if (full) {
        decode(bd, "one_sided_decode_t4100", SMATTN_ALIBI_ONE_SIDED, 4100);
        decode(bd, "symmetric_decode_t4100", SMATTN_ALIBI_SYMMETRIC, 4100);
        c = bat_att(bd, "alibi", "symmetric_causal_tiled", 1, 70, 130, 2, 1, 32);
        if (c && bat_case_alibi(bd, c, SMATTN_ALIBI_SYMMETRIC, 0, NULL))
            c->prob.causal = SMATTN_CAUSAL_LOWER_RIGHT;
        bat_finish(bd, c);
    }
}
