/* SPDX-License-Identifier: MIT */
/* battery_sizes.c: the battery's cases at the sizes and values where real kernels change
 * path: garbage at tile sizes (tiled), decode and long rows past the split-KV
 * chunk lengths (long), visible non-finite inputs (nonfinite), and value regimes at the ends
 * of exp's range and of the K/V dtypes (regimes); empty rows with clean inputs and sinks far
 * above the keys. conform/README.md has the matrix they
 * fill. The builder is battery.c's (conform/battery_impl.h). */
#include <math.h>
#include <stdio.h>

#include "conform/battery_impl.h"

/* Empty rows with clean inputs (no garbage anywhere): a NaN here is the empty-row rule
 * broken, not a leak, so the judge names the convention (in the garbage cases above it
 * names the leak first). */
void battery_empty_rows_clean(builder *bd)
{
    conform_case *c = bat_att(bd, "empty_rows", "clean_mask_rows_false", 1, 4, 8, 2, 2, 8);
    unsigned char *m = c ? bat_case_mask(bd, c) : NULL;
    for (int64_t j = 0; m && j < 8; j++)
        m[1 * 8 + j] = m[(4 + 2) * 8 + j] = 0;
    if (c)
        c->garbage = 0;
    bat_finish(bd, c);
    c = bat_att(bd, "empty_rows", "clean_causal_lr_s6_t3", 1, 6, 3, 1, 1, 8);
    if (c)
        c->prob.causal = SMATTN_CAUSAL_LOWER_RIGHT, c->garbage = 0;
    bat_finish(bd, c);
}

/* A sink far above the keys (e^100 against scores near 0): a kernel that leaves the sink
 * out of its running max computes e^{zeta - m} and overflows binary32, so such rows are out
 * of contract (SPEC 6.8: counted, not judged) unless the kernel claims
 * SMATTN_CAP_SINK_IN_MAX, which makes them judged. */
void battery_sinks_large(builder *bd)
{
    conform_case *c = bat_att(bd, "sinks", "large_sink_decode", 2, 1, 40, 2, 1, 16);
    double *s = c ? bat_case_sinks(bd, c, 95.0, 100.0) : NULL;
    if (s)
        bat_case_lens(bd, c, 0, (int64_t[]){40, 17});
    bat_finish(bd, c);
}

/* SPEC 4.2: one non-finite input at a visible position, each alone. K: the row NaN (a
 * -inf in K with a positive q gives the score -inf, which is not a masked key); Q: its row
 * NaN; V: its column NaN or +-inf. Q's column 1 is made positive, so the infinite K
 * element gives an infinite score of a known sign in every row. */
void battery_nonfinite(builder *bd)
{
    static const char *const what[3] = {"nan", "pos_inf", "neg_inf"};
    static const double val[3] = {((double)NAN), HUGE_VAL, -HUGE_VAL};
    for (int t = 0; t < 3; t++)
        for (int k = 0; k < 3; k++) {
            char name[48];
            snprintf(name, sizeof name, "%c_%s", "kqv"[t], what[k]);
            conform_case *c = bat_att(bd, "nonfinite", name, 1, 4, 9, 2, 1, 8);
            if (!c)
                return;
            double *q = MUT(c->in64.q.data), *kk = MUT(c->in64.k.data), *v = MUT(c->in64.v.data);
            for (int64_t e = 1; e < c->count[T_Q]; e += 8)
                q[e] = fabs(q[e]) + 0.5;
            if (t == 0)
                kk[5 * 8 + 1] = val[k]; /* key 5, dim 1 */
            else if (t == 1)
                q[2 * 16 + 1 * 8 + 3] = val[k]; /* row 2, head 1, dim 3 */
            else
                v[3 * 8 + 6] = val[k]; /* key 3, column 6 */
            if (k == 2 && t == 0)      /* causal: rows 0-2 do not see key 5 (diagonal i + 5) */
                c->prob.causal = SMATTN_CAUSAL_LOWER_RIGHT;
            bat_finish(bd, c);
        }
    /* At a tile size: a -inf in K at key 100 poisons the rows that see it (i + 2 >= 100)
     * and no other row of their tiles; a NaN in V at key 40 poisons column 3 from row 38. */
    conform_case *c =
        bat_att(bd, "nonfinite", "tile_s128_t130_k_neg_inf_v_nan", 1, 128, 130, 1, 1, 16);
    if (c) {
        double *q = MUT(c->in64.q.data), *kk = MUT(c->in64.k.data), *v = MUT(c->in64.v.data);
        for (int64_t i = 0; i < 128; i++)
            q[i * 16 + 1] = fabs(q[i * 16 + 1]) + 0.5;
        kk[100 * 16 + 1] = -HUGE_VAL;
        v[40 * 16 + 3] = (double)NAN;
        c->prob.causal = SMATTN_CAUSAL_LOWER_RIGHT;
    }
    bat_finish(bd, c);
}

/* Garbage at the sizes where kernels tile: S and T in {64, 65, 128, 200, 256},
 * D and Dv in {16, 64, 128}, for every kind of invisibility; NaN/inf fill every invisible
 * slot (fill_garbage): K and V of keys no row sees, Q of empty and padding rows, and, in
 * the cases with a bias, the bias at every hidden (row, key), so that a partly visible
 * tile holds garbage right next to the keys it must read. Quick takes the first two
 * shapes of each kind, the first with a bias, the second with neither a bias nor Dv != D. */
void battery_tiled(builder *bd, int full)
{
    static const int64_t sh[][4] = {/* S, T, D, Dv */
                                    {64, 65, 16, 16},
                                    {65, 64, 64, 16},
                                    {128, 200, 128, 64},
                                    {200, 128, 16, 128},
                                    {256, 256, 64, 64}};
    static const char *const kinds[] = {"causal_lr", "causal_ul", "kv_lens",
                                        "q_lens",    "window",    "mask"};
    size_t nsh = full ? sizeof sh / sizeof sh[0] : 2;
    for (size_t k = 0; k < sizeof kinds / sizeof kinds[0]; k++)
        for (size_t z = 0; z < nsh; z++) {
            int64_t S = sh[z][0], T = sh[z][1], B = k == 2 || k == 3 ? 2 : 1;
            /* quick's second shape plain: Dv = D, no bias (a kernel without either runs it) */
            int64_t dv = full || z == 0 ? sh[z][3] : sh[z][2];
            char name[64];
            snprintf(name, sizeof name, "%s_s%lld_t%lld_d%lld_dv%lld", kinds[k], (long long)S,
                     (long long)T, (long long)sh[z][2], (long long)dv);
            int64_t H = z == 0 ? 2 : 1; /* GQA on the smallest shape; the oracle's time */
            conform_case *c = bat_case_new(bd, "tiled", name, SMATTN_OP_ATTENTION, B, S, T, H, 1,
                                           sh[z][2], dv, 2.0, 0);
            if (!c)
                return;
            smattn_problem *p = &c->prob;
            if (k == 0)
                p->causal = SMATTN_CAUSAL_LOWER_RIGHT;
            else if (k == 1)
                p->causal = SMATTN_CAUSAL_UPPER_LEFT;
            else if (k == 2) /* padding keys from the middle of a tile, and an empty batch */
                bat_case_lens(bd, c, 0, (int64_t[]){T - 1 - (T / 3), z % 2 ? 0 : 1});
            else if (k == 3)
                bat_case_lens(bd, c, 1, (int64_t[]){S / 2 + 1, S - 1});
            else if (k == 4) /* a window whose edges cut tiles, behind and ahead */
                p->window_left = 40, p->window_right = 7;
            else {
                unsigned char *m = bat_case_mask(bd, c);
                for (int64_t e = 0; m && e < c->count[T_MASK]; e++)
                    m[e] = (bat_rng_next(&bd->r) % 4) != 0;
                for (int64_t r = 0; m && r < p->B * p->Hq * S; r++) /* two keys no row sees */
                    m[r * T + T / 2] = m[r * T + T - 1] = 0;
            }
            /* half of them with a bias, garbage where hidden; quick has each kind with and
             * without one, so that a kernel without a bias (llama.cpp's f16 mask is a bool
             * mask here) still runs every kind */
            if (full ? z % 2 == 1 : z == 0)
                bat_case_bias(bd, c, 1.0);
            bat_finish(bd, c);
        }
    /* One key masked for every row of a 64-row tile holds NaN in V, next to keys those
     * rows see: a P.V that multiplies it by its zero weight gets NaN. */
    conform_case *c = bat_att(bd, "tiled", "masked_key_nan_v_64_rows", 1, 64, 128, 1, 1, 16);
    unsigned char *m = c ? bat_case_mask(bd, c) : NULL;
    for (int64_t i = 0; m && i < 64; i++)
        m[i * 128 + 70] = 0;
    bat_finish(bd, c);
}

/* Decode (S = 1) over long caches with garbage beyond kv_lens, and long rows past the
 * split lengths of split-KV kernels (256, 512, 1024, 4096): B > 1 with different kv_lens
 * per batch, windows, sinks, and bias and masks that differ per batch and per head. */
void battery_long_rows(builder *bd, int full)
{
    static const int64_t dec[][4] = {/* T, kv_lens[0], kv_lens[1], D */
                                     {512, 512, 257, 64},
                                     {1024, 1000, 513, 128},
                                     {4097, 4097, 1025, 64}};
    /* no feature at all but length: a kernel that claims nothing runs the split path */
    bat_finish(bd, bat_att(bd, "long", "decode_t600_d128_plain", 1, 1, 600, 1, 1, 128));
    size_t n = full ? 3 : 1;
    for (size_t k = 0; k < n; k++) {
        char name[64];
        snprintf(name, sizeof name, "decode_t%lld_kv%lld_%lld", (long long)dec[k][0],
                 (long long)dec[k][1], (long long)dec[k][2]);
        conform_case *c = bat_att(bd, "long", name, 2, 1, dec[k][0], 4, 2, dec[k][3]);
        if (c)
            bat_case_lens(bd, c, 0, (int64_t[]){dec[k][1], dec[k][2]});
        bat_finish(bd, c);
    }
    if (!full) {
        conform_case *c = bat_att(bd, "long", "decode_t600_window_sinks_bias", 2, 1, 600, 4, 2, 32);
        if (c) {
            bat_case_lens(bd, c, 0, (int64_t[]){600, 290});
            c->prob.window_left = 270;
            bat_case_sinks(bd, c, -1.0, 3.0);
            bat_case_bias(bd, c, 2.0);
        }
        bat_finish(bd, c);
        return;
    }
    conform_case *c = bat_att(bd, "long", "decode_t4100_window_sinks_bias", 3, 1, 4100, 4, 2, 64);
    if (c) { /* windows that start and end inside different 256/512/1024 chunks */
        bat_case_lens(bd, c, 0, (int64_t[]){4100, 1030, 513});
        c->prob.window_left = 700;
        bat_case_sinks(bd, c, -1.0, 3.0);
        bat_case_bias(bd, c, 2.0);
    }
    bat_finish(bd, c);
    c = bat_att(bd, "long", "decode_t1030_mask_per_batch_head", 2, 1, 1030, 4, 1, 64);
    unsigned char *m = c ? bat_case_mask(bd, c) : NULL;
    for (int64_t e = 0; m && e < c->count[T_MASK]; e++)
        m[e] = (bat_rng_next(&bd->r) % 3) != 0;
    bat_finish(bd, c);
    c = bat_att(bd, "long", "chunked_s16_t1100_upper_left", 1, 16, 1100, 2, 1, 32);
    if (c) /* upper-left: keys past 15 are seen by no row and hold garbage */
        c->prob.causal = SMATTN_CAUSAL_UPPER_LEFT;
    bat_finish(bd, c);
    c = bat_att(bd, "long", "prefill_s128_t200_softcap_sinks_bias", 1, 128, 200, 2, 1, 64);
    if (c) { /* softcap and sinks with garbage at a tile size */
        c->prob.causal = SMATTN_CAUSAL_LOWER_RIGHT;
        c->prob.window_left = 90;
        c->prob.softcap = 30.0;
        bat_case_sinks(bd, c, -2.0, 4.0);
        bat_case_bias(bd, c, 3.0);
    }
    bat_finish(bd, c);
    c = bat_att(bd, "long", "chunked_s16_t1100_causal_bias", 2, 16, 1100, 2, 2, 32);
    if (c) {
        bat_case_lens(bd, c, 0, (int64_t[]){1100, 530});
        c->prob.causal = SMATTN_CAUSAL_LOWER_RIGHT;
        bat_case_bias(bd, c, 1.0);
    }
    bat_finish(bd, c);
}

/* Value regimes near the ends of exp's range and of the dtypes (the matrix in
 * conform/README.md): weights that underflow into binary32 subnormals and below, scores at
 * the edge of expf's overflow, K and V at the ends of binary16 and bfloat16. */
void battery_regimes(builder *bd)
{
    /* q = e_0, k_j = -gap_j e_0 / scale: scores -gap_j, gaps 0 and 80..119 (e^-103.3 is
     * binary32's smallest subnormal): the weights of a row span every underflow regime. */
    conform_case *c = bat_att(bd, "regimes", "exp_underflow_weights", 1, 2, 41, 1, 1, 8);
    if (c) {
        double *q = MUT(c->in64.q.data), *k = MUT(c->in64.k.data);
        for (int64_t d = 0; d < 8; d++)
            q[d] = q[8 + d] = d == 0;
        for (int64_t j = 0; j < 41; j++)
            k[j * 8] = j == 0 ? 0.0 : -(79.0 + (double)j) / c->prob.scale;
    }
    bat_finish(bd, c);
    /* scores in [84, 90]: e^s alone overflows binary32 above 88.72 */
    c = bat_att(bd, "regimes", "scores_at_expf_overflow", 1, 3, 24, 1, 1, 8);
    if (c) {
        double *q = MUT(c->in64.q.data), *k = MUT(c->in64.k.data);
        for (int64_t e = 0; e < 24; e++)
            q[e] = e % 8 == 0;
        for (int64_t j = 0; j < 24; j++)
            k[j * 8] = (84.0 + 6.0 * (double)j / 23) / c->prob.scale;
    }
    bat_finish(bd, c);
    /* binary16 ends: |K| up to 6e4 (with a scale that keeps scores moderate), V in its
     * subnormals and near 65504; bfloat16: |K| to 1e30, V down to 1e-35 */
    static const struct {
        const char *name;
        smattn_dtype t;
        double kamp, vsmall, vbig, scale;
    } ends[2] = {{"kv_f16_range_ends", SMATTN_F16, 6e4, 3e-7, 6e4, 1e-5},
                 {"kv_bf16_range_ends", SMATTN_BF16, 1e30, 1e-35, 1e35, 1e-31}};
    for (int t = 0; t < 2; t++) {
        c = bat_att(bd, "regimes", ends[t].name, 1, 3, 70, 2, 1, 16);
        if (!c)
            return;
        double *k = MUT(c->in64.k.data), *v = MUT(c->in64.v.data), *q = MUT(c->in64.q.data);
        for (int64_t e = 0; e < c->count[T_K]; e++)
            k[e] *= ends[t].kamp / 2;
        for (int64_t e = 0; e < c->count[T_V]; e++) /* tiny ones within [vsmall, 2 vsmall) */
            v[e] = e % 2 ? copysign(ends[t].vsmall * (1 + fabs(v[e])), v[e]) : v[e] * ends[t].vbig;
        for (int64_t e = 0; e < c->count[T_Q]; e++)
            q[e] *= 0.5;
        c->prob.scale = ends[t].scale;
        c->kv_dtype = ends[t].t;
        c->prob.causal = SMATTN_CAUSAL_LOWER_RIGHT;
        bat_finish(bd, c);
    }
}

/* The head dims kernels specialise on (64, 128, 256, and 80, which is none of the powers of
 * two), each on the two main paths: a causal prefill across a 64-row tile and a GQA (4 : 1)
 * decode over 300 keys. A kernel that mishandles one head dim only (drops the scale on its
 * D >= 128 path, say) fails here in quick. */
void battery_head_dims(builder *bd)
{
    static const int64_t dims[] = {64, 128, 256, 80};
    for (size_t k = 0; k < sizeof dims / sizeof dims[0]; k++) {
        char name[48];
        snprintf(name, sizeof name, "prefill_causal_d%lld", (long long)dims[k]);
        conform_case *c = bat_att(bd, "head_dim", name, 1, 70, 70, 1, 1, dims[k]);
        if (c)
            c->prob.causal = SMATTN_CAUSAL_LOWER_RIGHT;
        bat_finish(bd, c);
        snprintf(name, sizeof name, "decode_gqa_d%lld", (long long)dims[k]);
        bat_finish(bd, bat_att(bd, "head_dim", name, 1, 1, 300, 4, 1, dims[k]));
    }
}

/* Value regimes crossed with masks: every visible score of a row in [v, v + 2] for v far
 * below 0 (-95: weights through binary32's subnormals, e^-87.3 being its smallest normal;
 * -110: below e^-103.3, its smallest subnormal; -1000) or far above (+1000), with whole key
 * tiles hidden before, between and after the visible keys (keys [0, 128) and [200, 384) of
 * 420 for a bool mask; a window of 200 behind with kv_lens 450 and 300 in decode; causal
 * prefill, tiles past the diagonal). A kernel whose running max starts again from 0 after a
 * fully masked tile, or that loses the max across tiles, gets weights that underflow to 0
 * (0/0) or overflow here; with scores near 0 it passes. */
void battery_regimes_masked(builder *bd)
{
    static const struct {
        const char *tag;
        double v;
        int causal; /* also as a causal prefill */
    } reg[] = {{"below95", -95.0, 0}, {"below110", -110.0, 1}, {"below1000", -1000.0, 0},
               {"above1000", 1000.0, 1}};
    for (size_t r = 0; r < sizeof reg / sizeof reg[0]; r++)
        for (int kind = 0; kind < 3; kind++) {
            if (kind == 2 && !reg[r].causal)
                continue;
            static const char *const kinds[3] = {"mask_prefill", "window_kv_lens_decode",
                                                 "causal_prefill"};
            static const int64_t shape[3][4] = {/* B, S, T, kv_lens */
                                                {1, 66, 420, 0},
                                                {2, 1, 520, 450},
                                                {1, 130, 130, 0}};
            char name[64];
            snprintf(name, sizeof name, "masked_tiles_%s_%s", kinds[kind], reg[r].tag);
            const int64_t *sh = shape[kind];
            conform_case *c = bat_att(bd, "regimes", name, sh[0], sh[1], sh[2], 1, 1, 16);
            if (!c)
                return;
            double *q = MUT(c->in64.q.data), *k = MUT(c->in64.k.data);
            for (int64_t e = 0; e < c->count[T_Q]; e++) /* q = e_0: the score is k[0] scale */
                q[e] = e % 16 == 0;
            for (int64_t j = 0; j < sh[0] * sh[2]; j++)
                k[j * 16] = (reg[r].v + (k[j * 16 + 1] + 2.0) / 2) / c->prob.scale;
            if (kind == 0) {
                unsigned char *m = bat_case_mask(bd, c);
                for (int64_t e = 0; m && e < c->count[T_MASK]; e++) {
                    int64_t j = e % sh[2];
                    m[e] = !(j < 128 || (j >= 200 && j < 384));
                }
            } else if (kind == 1) {
                bat_case_lens(bd, c, 0, (int64_t[]){sh[3], 300});
                c->prob.window_left = 200;
            } else {
                c->prob.causal = SMATTN_CAUSAL_LOWER_RIGHT;
            }
            bat_finish(bd, c);
        }
}
