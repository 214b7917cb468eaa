/* SPDX-License-Identifier: MIT */
/* example_kernel.c: a plain, readable float32 attention plugin that conforms to the spec.
 *
 * Build:  cc -std=c11 -O2 -fPIC -shared -Iinclude examples/example_kernel.c -o example.so -lm
 * Check:  smattn conform --kernel example.so
 *
 * One row (b, h, i) at a time, two passes over its keys (SPEC 4.1):
 *   1. the scores s_j of the visible keys, -inf for the invisible ones, and their maximum m;
 *   2. w_j = exp(s_j - m), the row sum L = sum w_j and the numerator N = sum w_j v_j,
 *      skipping the invisible keys; then O = N / L, LSE = m + log L, P_j = w_j / L.
 * Everything is binary32 with glibc's expf, logf and tanhf: the precision model below.
 * Conventions (SPEC 3-4): lower-right and upper-left causal, windows, kv_lens and q_lens,
 * the bool mask, an additive bias (-inf hides a key), sinks, softcap before the bias,
 * GQA as h / (Hq / Hkv), any strides, the zero convention for empty rows, the three LSE
 * sentinels, and the NaN rules of SPEC 4.2. The softmax op is the same row with s = x.
 * Quantised inputs (SPEC 2.9): Q, K and V may be fp8 (e4m3fn, e5m2), K and V llama.cpp's
 * q8_0 or q4_0 blocks, each decoded exactly to binary32; their descales are folded into
 * the scale (Q, K) and into the output's division (V) in binary64 (SPEC 6.11).
 */
#include <float.h>
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "smattn_kernel.h"

/* A binary16 value from its bits (the scale of a block, and e5m2 as its top byte). */
static float half_value(unsigned h)
{
    unsigned e = (h >> 10) & 31u, m = h & 1023u;
    float v = e == 0 ? ldexpf((float)m, -24)
              : e == 31 ? (m ? NAN : INFINITY)
                        : ldexpf((float)(1024u + m), (int)e - 25);
    return (h & 0x8000u) ? -v : v;
}

/* An fp8 byte (SPEC 2.9): e5m2 is binary16's top byte; e4m3fn has bias 7, subnormals
 * m 2^-9, no infinity, and S.1111.111 its only NaN. Exact in binary32. */
static float fp8_value(unsigned char b, smattn_dtype t)
{
    if (t == SMATTN_F8E5M2)
        return half_value((unsigned)b << 8);
    unsigned e = (b >> 3) & 15u, m = b & 7u;
    float v = e == 15 && m == 7 ? NAN : e == 0 ? ldexpf((float)m, -9)
                                               : ldexpf((float)(8u + m), (int)e - 10);
    return (b & 0x80u) ? -v : v;
}

/* Element o of a q8_0 or q4_0 tensor (SPEC 2.9): block o / 32, a little-endian binary16
 * scale d then the quants; q8_0's element j is d q_j (int8), q4_0's d (n_j - 8) with n_j the
 * low nibble of byte j (j < 16) or the high nibble of byte j - 16. Exact in binary32 (11
 * significant bits times at most 8); an infinite scale times 0 is NaN, as the spec says. */
static float block_value(const unsigned char *base, smattn_dtype t, int64_t o)
{
    const int64_t size = t == SMATTN_Q8_0 ? 34 : 18, j = o % 32;
    const unsigned char *blk = base + (o / 32) * size;
    const float d = half_value((unsigned)blk[0] | (unsigned)blk[1] << 8);
    if (t == SMATTN_Q8_0)
        return d * (float)(int8_t)blk[2 + j];
    unsigned n = j < 16 ? blk[2 + j] & 15u : blk[2 + j - 16] >> 4;
    return d * (float)((int)n - 8);
}

/* Element (i0, i1, i2, i3) of a float32 tensor. */
static float at4(const smattn_tensor *t, int64_t i0, int64_t i1, int64_t i2, int64_t i3)
{
    const int64_t o = i0 * t->stride[0] + i1 * t->stride[1] + i2 * t->stride[2] + i3 * t->stride[3];
    switch (t->dtype) { /* or of a quantised one, decoded */
    case SMATTN_F8E4M3:
    case SMATTN_F8E5M2:
        return fp8_value(((const unsigned char *)t->data)[o], t->dtype);
    case SMATTN_Q8_0:
    case SMATTN_Q4_0:
        return block_value(t->data, t->dtype, o);
    default:
        return ((const float *)t->data)[o];
    }
}

/* The descale (SPEC 2.9) of tensor 'q', 'k' or 'v' for batch b and KV head g: 1 without. */
static double descale(const smattn_problem *p, char which, int64_t b, int64_t g)
{
    const smattn_descale *d = p->descale;
    if (!d)
        return 1.0;
    const double *a = which == 'q' ? d->q_head : which == 'k' ? d->k_head : d->v_head;
    return a ? a[b * p->Hkv + g] : which == 'q' ? d->q : which == 'k' ? d->k : d->v;
}

static float *out4(const smattn_out_tensor *t, int64_t i0, int64_t i1, int64_t i2, int64_t i3)
{
    float *f = t->data;
    return &f[i0 * t->stride[0] + i1 * t->stride[1] + i2 * t->stride[2] + i3 * t->stride[3]];
}

/* The KV head of query head h: contiguous groups (SPEC 2.2), Hq / Hkv heads per group. */
static int64_t kv_head(const smattn_problem *p, int64_t h)
{
    return h / (p->Hq / p->Hkv);
}

/* Is key j visible to row (b, h, i)? SPEC 3.1-3.3 and 3.5, in the spec's order; K, V, X
 * and the bias are read only at keys that the earlier rules allow (SPEC 3.6). */
static int key_visible(const smattn_problem *p, const smattn_inputs *in, int64_t b, int64_t h,
                       int64_t i, int64_t j)
{
    int64_t Sb = p->q_lens ? p->q_lens[b] : p->S;
    int64_t Tb = p->kv_lens ? p->kv_lens[b] : p->T;
    if (i >= Sb)
        return 0; /* a padding query: an empty row (SPEC 3.2) */
    if (j >= Tb)
        return 0; /* a padding key */
    /* the diagonal (SPEC 3.1): lower-right also centres the window when causal is none */
    int64_t d = p->causal == SMATTN_CAUSAL_UPPER_LEFT ? i : i + Tb - Sb;
    if (p->causal != SMATTN_CAUSAL_NONE && j > d)
        return 0;
    if (p->window_left >= 0 && j < d - p->window_left)
        return 0;
    if (p->window_right >= 0 && j > d + p->window_right)
        return 0;
    if (in->mask.data) {
        const unsigned char *m = in->mask.data;
        const int64_t *st = in->mask.stride;
        if (!m[b * st[0] + h * st[1] + i * st[2] + j * st[3]])
            return 0;
    }
    if (in->bias.data && at4(&in->bias, b, h, i, j) == -INFINITY)
        return 0; /* a -inf bias hides the key, exactly like a false mask entry */
    if (p->op == SMATTN_OP_SOFTMAX && at4(&in->x, b, h, i, j) == -INFINITY)
        return 0;
    return 1;
}

/* A score computed from finite inputs that overflowed (q.k or x * scale beyond FLT_MAX,
 * or +inf - inf inside the dot product): its exact value is a finite real, so the row is
 * out of contract (SPEC 6.8) but not NaN. It is kept finite: +-FLT_MAX for an infinity,
 * 0 for a NaN, so that no weight is NaN (a NaN output always fails) and an infinite V
 * still gives an infinite column. */
static float finite_score(float sigma)
{
    return isnan(sigma) ? 0.0f : fminf(fmaxf(sigma, -FLT_MAX), FLT_MAX);
}

/* ALiBi (SPEC 2.8): the slope of row (b, h), and the distance it multiplies in the
 * symmetric mode (-|i + T_b - S_b - j|, FlashAttention's) or the one-sided mode (j - T_b + 1,
 * vLLM's). The mask mode multiplies the bias instead. */
static float alibi_slope(const smattn_problem *p, int64_t b, int64_t h)
{
    return p->alibi_slopes[(p->alibi_slopes_per_batch ? b * p->Hq : 0) + h];
}

static int64_t alibi_distance(const smattn_problem *p, int64_t b, int64_t i, int64_t j)
{
    int64_t Sb = p->q_lens ? p->q_lens[b] : p->S;
    int64_t Tb = p->kv_lens ? p->kv_lens[b] : p->T;
    if (p->alibi_mode == SMATTN_ALIBI_SYMMETRIC) {
        int64_t d = i + Tb - Sb - j;
        return d < 0 ? d : -d;
    }
    return j - Tb + 1;
}

/* The score of a visible key: the scaled dot product (or scaled x), softcap, then bias.
 * Whether the row is poisoned (SPEC 4.2) is decided from the inputs, never from the
 * computed score: a NaN or infinite q or k, a NaN or +inf x or bias set *bad; a score
 * that overflows from finite inputs does not. */
static float key_score(const smattn_problem *p, const smattn_inputs *in, int64_t b, int64_t h,
                       int64_t i, int64_t j, int *bad)
{
    const float scale = (float)p->scale; /* rounded once, applied once (SPEC 6.1, A2) */
    float sigma;
    if (p->op == SMATTN_OP_ATTENTION) {
        int64_t g = kv_head(p, h);
        float dot = 0.0f;
        for (int64_t d = 0; d < p->D; d++) {
            float q = at4(&in->q, b, i, h, d), k = at4(&in->k, b, j, g, d);
            if (!isfinite(q) || !isfinite(k))
                *bad = 1;
            dot += q * k;
        }
        /* the Q and K descales fold into the scale (SPEC 6.11, Q1): q.k of the decoded
         * values times scale f_q f_k, the factors' products in binary64 (within 2^-52 of
         * exact), then one rounding to binary32 as without them */
        sigma = p->descale ? (float)((double)dot * ((double)scale * descale(p, 'q', b, g) *
                                                    descale(p, 'k', b, g)))
                           : dot * scale;
    } else {
        float x = at4(&in->x, b, h, i, j); /* -inf hid the key already */
        if (isnan(x) || x == INFINITY)
            *bad = 1;
        sigma = x * scale;
    }
    sigma = finite_score(sigma);
    if (p->softcap > 0) { /* before the bias, so that a -inf bias stays -inf (SPEC 2.4) */
        const float c = (float)p->softcap;
        sigma = c * tanhf(sigma / c);
    }
    if (in->bias.data) {
        float bias = at4(&in->bias, b, h, i, j); /* -inf hid the key already */
        if (isnan(bias) || bias == INFINITY)
            *bad = 1;
        if (p->alibi_mode == SMATTN_ALIBI_MASK) /* llama.cpp: slope times the mask */
            bias *= alibi_slope(p, b, h);
        sigma = finite_score(sigma + bias);
    }
    if (p->alibi_mode == SMATTN_ALIBI_SYMMETRIC || p->alibi_mode == SMATTN_ALIBI_ONE_SIDED)
        sigma = finite_score(sigma + alibi_slope(p, b, h) * (float)alibi_distance(p, b, i, j));
    return sigma;
}

/* The LSE of an empty row: the sentinel the problem asks for (SPEC 3.4). */
static float empty_lse(const smattn_problem *p)
{
    switch (p->empty_lse) {
    case SMATTN_LSE_POS_INF:
        return INFINITY;
    case SMATTN_LSE_ZERO:
        return 0.0f;
    default:
        return -INFINITY;
    }
}

/* Write a whole row of constants: O = o in every column, LSE = lse, and P = +0, or for a
 * NaN row (SPEC 4.2) P = NaN at the visible keys and +0 elsewhere. */
static void write_row(const smattn_problem *p, const smattn_inputs *in, const smattn_outputs *out,
                      int64_t b, int64_t h, int64_t i, float o, float lse, int nan_row)
{
    if (p->op == SMATTN_OP_ATTENTION && out->o.data)
        for (int64_t c = 0; c < p->Dv; c++)
            *out4(&out->o, b, i, h, c) = o;
    if (out->lse.data)
        *out4(&out->lse, b, h, i, 0) = lse;
    if (out->p.data)
        for (int64_t j = 0; j < p->T; j++)
            *out4(&out->p, b, h, i, j) = nan_row && key_visible(p, in, b, h, i, j) ? NAN : 0.0f;
}

/* One row (b, h, i). s has room for T scores, acc for Dv sums. */
static void attend_row(const smattn_problem *p, const smattn_inputs *in, const smattn_outputs *out,
                       int64_t b, int64_t h, int64_t i, float *s, float *acc)
{
    int64_t Sb = p->q_lens ? p->q_lens[b] : p->S;
    if (i >= Sb) { /* a padding query row is empty whatever the sink (SPEC 3.2) */
        write_row(p, in, out, b, h, i, 0.0f, empty_lse(p), 0);
        return;
    }
    /* The sink (SPEC 2.5): one more term of the denominator, with value 0. */
    int bad = 0, has_sink = 0;
    float zeta = 0.0f;
    if (in->sinks.data) {
        zeta = ((const float *)in->sinks.data)[h * in->sinks.stride[0]];
        if (isnan(zeta) || zeta == INFINITY)
            bad = 1;
        else if (zeta != -INFINITY)
            has_sink = 1;
    }

    /* Pass 1: the scores, -inf for invisible keys, and their maximum. */
    float m = has_sink ? zeta : -INFINITY;
    for (int64_t j = 0; j < p->T; j++) {
        if (!key_visible(p, in, b, h, i, j)) {
            s[j] = -INFINITY;
            continue;
        }
        s[j] = key_score(p, in, b, h, i, j, &bad);
        m = fmaxf(m, s[j]);
    }
    if (bad) { /* SPEC 4.2: O, LSE NaN; P NaN at the visible keys */
        write_row(p, in, out, b, h, i, NAN, NAN, 1);
        return;
    }
    if (m == -INFINITY) { /* no visible key and no sink: the zero convention (SPEC 3.4) */
        write_row(p, in, out, b, h, i, 0.0f, empty_lse(p), 0);
        return;
    }

    /* Pass 2: weights, row sum and P.V. Invisible keys are skipped, never multiplied by
     * a zero weight: their V may hold NaN (SPEC 3.6). */
    const int64_t dv = p->op == SMATTN_OP_ATTENTION ? p->Dv : 0; /* softmax: no O */
    float L = has_sink ? expf(zeta - m) : 0.0f;
    for (int64_t c = 0; c < dv; c++)
        acc[c] = 0.0f;
    for (int64_t j = 0; j < p->T; j++) {
        if (s[j] == -INFINITY)
            continue;
        float w = expf(s[j] - m);
        L += w;
        for (int64_t c = 0; c < dv; c++) {
            float v = at4(&in->v, b, j, kv_head(p, h), c);
            /* a visible key's exact weight is positive however small: an infinite v stays
             * infinite even when w underflows to 0 (SPEC 4.2) */
            acc[c] += (w == 0.0f && isinf(v)) ? v : w * v;
        }
    }

    /* V's descale: O is linear in V, so f_v N / L, with N f_v exact in binary64 */
    const double fv = dv ? descale(p, 'v', b, kv_head(p, h)) : 1.0;
    if (out->o.data)
        for (int64_t c = 0; c < dv; c++)
            *out4(&out->o, b, i, h, c) = (float)((double)acc[c] * fv / (double)L);
    if (out->lse.data)
        *out4(&out->lse, b, h, i, 0) = m + logf(L);
    if (out->p.data)
        for (int64_t j = 0; j < p->T; j++)
            *out4(&out->p, b, h, i, j) = s[j] == -INFINITY ? 0.0f : expf(s[j] - m) / L;
}

/* Q, K or V in t: float32 or fp8; K and V (kv) also q8_0 or q4_0. */
static int qkv_dtype_ok(smattn_dtype t, int kv)
{
    return t == SMATTN_F32 || t == SMATTN_F8E4M3 || t == SMATTN_F8E5M2 ||
           (kv && (t == SMATTN_Q8_0 || t == SMATTN_Q4_0));
}

/* What this kernel takes: float32 everywhere (bias and sinks too) but the quantised Q, K
 * and V above, the zero convention. */
static int supported(const smattn_problem *p, const smattn_inputs *in, const smattn_outputs *out)
{
    if ((in->q.data && !qkv_dtype_ok(in->q.dtype, 0)) ||
        (in->k.data && !qkv_dtype_ok(in->k.dtype, 1)) ||
        (in->v.data && !qkv_dtype_ok(in->v.dtype, 1)))
        return 0;
    const smattn_tensor *f32_in[] = {&in->x, &in->bias, &in->sinks};
    for (size_t t = 0; t < sizeof f32_in / sizeof f32_in[0]; t++)
        if (f32_in[t]->data && f32_in[t]->dtype != SMATTN_F32)
            return 0;
    if (in->mask.data && in->mask.dtype != SMATTN_BOOL)
        return 0;
    const smattn_out_tensor *outs[] = {&out->o, &out->lse, &out->p};
    for (size_t t = 0; t < 3; t++)
        if (outs[t]->data && outs[t]->dtype != SMATTN_F32)
            return 0;
    return p->empty_rows == SMATTN_EMPTY_ZERO;
}

static int run(const smattn_problem *p, const smattn_inputs *in, const smattn_outputs *out,
               smattn_op op)
{
    if (!p || !in || !out || p->op != op)
        return SMATTN_ERR_NULL;
    if (!supported(p, in, out))
        return SMATTN_ERR_UNSUPPORTED;
    int64_t dv = op == SMATTN_OP_ATTENTION ? p->Dv : 1;
    float *s = malloc((size_t)p->T * sizeof *s);
    float *acc = malloc((size_t)dv * sizeof *acc);
    if (!s || !acc) {
        free(s), free(acc);
        return SMATTN_ERR_NOMEM;
    }
    for (int64_t b = 0; b < p->B; b++)
        for (int64_t h = 0; h < p->Hq; h++)
            for (int64_t i = 0; i < p->S; i++)
                attend_row(p, in, out, b, h, i, s, acc);
    free(s), free(acc);
    return SMATTN_OK;
}

/* ---- the plugin ABI (include/smattn_kernel.h) ------------------------------------------ */

const smattn_plugin_info *smattn_plugin_describe(uint32_t host_abi);
int smattn_plugin_attention(const smattn_problem *p, const smattn_inputs *in,
                            const smattn_outputs *out);
int smattn_plugin_softmax(const smattn_problem *p, const smattn_inputs *in,
                          const smattn_outputs *out);

static const smattn_plugin_info info = {
    .abi_version = SMATTN_PLUGIN_ABI_VERSION,
    .struct_size = sizeof(smattn_plugin_info),
    .name = "example-f32",
    .version = "1",
    .caps = SMATTN_CAP_CAUSAL_LOWER_RIGHT | SMATTN_CAP_CAUSAL_UPPER_LEFT | SMATTN_CAP_WINDOW |
            SMATTN_CAP_KV_LENS | SMATTN_CAP_Q_LENS | SMATTN_CAP_BOOL_MASK | SMATTN_CAP_BIAS |
            SMATTN_CAP_SINKS | SMATTN_CAP_SOFTCAP | SMATTN_CAP_GQA | SMATTN_CAP_STRIDES |
            SMATTN_CAP_LSE | SMATTN_CAP_P | SMATTN_CAP_DV |
            SMATTN_CAP_SINK_IN_MAX | /* m starts at the sink (attend_row) */
            SMATTN_CAP_ALIBI_SYMMETRIC | SMATTN_CAP_ALIBI_ONE_SIDED | SMATTN_CAP_ALIBI_MASK |
            SMATTN_CAP_DESCALE_TENSOR | SMATTN_CAP_DESCALE_HEAD |
            SMATTN_CAP_BACKWARD_DBIAS | SMATTN_CAP_BACKWARD_DSINKS,
    .q_dtypes = SMATTN_DTYPE_BIT(SMATTN_F32) | SMATTN_DTYPE_BIT(SMATTN_F8E4M3) |
                SMATTN_DTYPE_BIT(SMATTN_F8E5M2),
    .kv_dtypes = SMATTN_DTYPE_BIT(SMATTN_F32) | SMATTN_DTYPE_BIT(SMATTN_F8E4M3) |
                 SMATTN_DTYPE_BIT(SMATTN_F8E5M2) | SMATTN_DTYPE_BIT(SMATTN_Q8_0) |
                 SMATTN_DTYPE_BIT(SMATTN_Q4_0),
    .out_dtypes = SMATTN_DTYPE_BIT(SMATTN_F32),
    .max_head_dim = 0,
    .empty_rows = SMATTN_EMPTY_ZERO,
    .empty_lse = SMATTN_LSE_NEG_INF,
    /* smattn_precision_of(SMATTN_F32), spelled out so that the plugin needs no libsmattn:
     * binary32 scores and sums (u = 2^-24); exp_ulps 4 covers glibc's expf and logf (< 1
     * ulp), tanhf (2 ulps) and the rounding of softcap to binary32; two passes (one
     * block); serial sums; gradual underflow (binary32 subnormal spacing 2^-149). */
    .precision = {.u_score = 0x1p-24, .u_acc = 0x1p-24, .exp_ulps = 4.0, .u_p = 0.0,
                  .blocks = 1, .acc_len = 0, .tiny = 0x1p-149},
};

const smattn_plugin_info *smattn_plugin_describe(uint32_t host_abi)
{
    (void)host_abi; /* the checker compares info.abi_version with its own */
    return &info;
}

int smattn_plugin_attention(const smattn_problem *p, const smattn_inputs *in,
                            const smattn_outputs *out)
{
    return run(p, in, out, SMATTN_OP_ATTENTION);
}

int smattn_plugin_softmax(const smattn_problem *p, const smattn_inputs *in,
                          const smattn_outputs *out)
{
    return run(p, in, out, SMATTN_OP_SOFTMAX);
}

/* Merging partial states (SPEC 9; the optional entry smattn_plugin_merge): per row, the
 * parts' largest LSE is subtracted before the exponential (in the LSE's base), the weights
 * and the weighted O summed in binary32; an empty part (LSE -inf, or +inf under
 * FlashAttention-2's convention) adds nothing and its O is never read; a row of empty parts
 * only gets O = 0 and the problem's empty-row LSE. A NaN LSE (or +inf under the -inf
 * convention) poisons the row: O and LSE NaN. Non-finite O of the other parts act per
 * column whatever their weight (SPEC 9.2): a NaN, or +inf with -inf, gives NaN, +inf
 * alone +inf, even from a part whose weight underflows binary32. */
int smattn_plugin_merge(const smattn_merge_problem *p, const smattn_merge_inputs *in,
                        const smattn_outputs *out);
int smattn_plugin_merge(const smattn_merge_problem *p, const smattn_merge_inputs *in,
                        const smattn_outputs *out)
{
    if (p->empty_rows != SMATTN_EMPTY_ZERO || in->o_parts.dtype != SMATTN_F32 ||
        in->lse_parts.dtype != SMATTN_F32 || (out->o.data && out->o.dtype != SMATTN_F32) ||
        (out->lse.data && out->lse.dtype != SMATTN_F32))
        return SMATTN_ERR_UNSUPPORTED;
    const int base2 = p->lse_base == SMATTN_LSE_BASE_2;
    const int pos_inf_empty = p->empty_parts == SMATTN_LSE_POS_INF;
    const float *O = in->o_parts.data, *L = in->lse_parts.data;
    const int64_t *so = in->o_parts.stride, *sl = in->lse_parts.stride;
    for (int64_t b = 0; b < p->B; b++)
        for (int64_t h = 0; h < p->Hq; h++)
            for (int64_t i = 0; i < p->S; i++) {
                const float *l = L + b * sl[0] + h * sl[1] + i * sl[2];
                float m = -INFINITY;
                int poison = 0;
                for (int64_t n = 0; n < p->N; n++) {
                    float x = l[n * in->lse_part_stride];
                    if (x != x || (x == INFINITY && !pos_inf_empty))
                        poison = 1;
                    else if (x != -INFINITY && x != INFINITY && x > m)
                        m = x;
                }
                float sum = 0.0f;
                for (int64_t n = 0; n < p->N && !poison; n++) {
                    float x = l[n * in->lse_part_stride];
                    if (x != -INFINITY && x != INFINITY)
                        sum += base2 ? exp2f(x - m) : expf(x - m);
                }
                float lse = poison          ? NAN
                            : m == -INFINITY ? (p->empty_lse == SMATTN_LSE_POS_INF ? INFINITY
                                                : p->empty_lse == SMATTN_LSE_ZERO  ? 0.0f
                                                                                    : -INFINITY)
                                            : m + (base2 ? log2f(sum) : logf(sum));
                if (out->lse.data)
                    *out4(&out->lse, b, h, i, 0) = lse;
                for (int64_t c = 0; out->o.data && c < p->Dv; c++) {
                    float acc = 0.0f;
                    int nan = 0, pinf = 0, ninf = 0;
                    for (int64_t n = 0; n < p->N && m != -INFINITY && !poison; n++) {
                        float x = l[n * in->lse_part_stride];
                        if (x == -INFINITY || x == INFINITY)
                            continue;
                        float v = O[n * in->o_part_stride + b * so[0] + i * so[1] + h * so[2] +
                                    c * so[3]];
                        nan |= v != v, pinf |= v == INFINITY, ninf |= v == -INFINITY;
                        float w = (base2 ? exp2f(x - m) : expf(x - m)) / sum;
                        acc += w * v;
                    }
                    *out4(&out->o, b, i, h, c) = poison || nan || (pinf && ninf) ? NAN
                                                 : pinf                        ? INFINITY
                                                 : ninf                        ? -INFINITY
                                                                               : acc;
                }
            }
    return 0;
}

/* The backward (SPEC 10; the optional entry smattn_plugin_backward): FlashAttention-2's,
 * in binary32 from the O and LSE the forward saved. Per (b, h), row by row: the scores
 * again, P_j = exp(s_j - LSE), dP_j = dO . v_j, Delta = dO . O, dS_j = P_j (dP_j - Delta
 * + dLSE), under softcap dU_j = dS_j (1 - t_j^2) with t_j = tanh(sigma_j / c) (the bias
 * comes after the cap: its gradient is dS, not dU); dQ_i = scale sum_j dU_j k_j, and the
 * head's dK_j += dU_j q_i, dV_j += P_j dO_i, added into its KV head's dK, dV (the group's
 * sum, SPEC 2.2) once the head is done; dQ and dK times the scale at the end. Invisible
 * keys are skipped (their score is -inf): they get no gradient, and an empty row none at
 * all (the zero convention). dBias (bit 26) is dS added into its element, so that a
 * broadcast bias's (stride 0) sums over the rows that share it; dSinks (bit 27) adds
 * P_sink (dLSE - Delta), P_sink = exp(sink - LSE), for every row of the head (a row that
 * sees the sink alone: O = 0, LSE = sink, so dLSE). Declines non-finite inputs at visible
 * positions (SPEC 10.2's rules are not written here) and dbias under ALiBi's mask mode
 * (SPEC 10.1: not defined). */
int smattn_plugin_backward(const smattn_problem *p, const smattn_inputs *in,
                           const smattn_forward_saved *saved, const smattn_grad_inputs *gin,
                           const smattn_grad_outputs *out);

/* The pre-cap score sigma_j (the scaled dot product), for softcap's derivative. */
static float pre_cap_score(const smattn_problem *p, const smattn_inputs *in, int64_t b, int64_t h,
                           int64_t i, int64_t j)
{
    float dot = 0.0f;
    for (int64_t d = 0; d < p->D; d++)
        dot += at4(&in->q, b, i, h, d) * at4(&in->k, b, j, kv_head(p, h), d);
    return finite_score(dot * (float)p->scale);
}

static int backward_supported(const smattn_problem *p, const smattn_inputs *in,
                              const smattn_forward_saved *saved, const smattn_grad_inputs *gin,
                              const smattn_grad_outputs *out)
{
    smattn_outputs fwd;
    memset(&fwd, 0, sizeof fwd);
    /* ALiBi: key_score adds its term as the forward does (SPEC 10.1) */
    if (p->op != SMATTN_OP_ATTENTION || p->layout || !supported(p, in, &fwd) ||
        (out->dbias.data && p->alibi_mode == SMATTN_ALIBI_MASK))
        return 0;
    const smattn_tensor *f32[] = {&saved->o, &saved->lse, &gin->dout, &gin->dlse};
    for (size_t t = 0; t < sizeof f32 / sizeof f32[0]; t++)
        if (f32[t]->data && f32[t]->dtype != SMATTN_F32)
            return 0;
    const smattn_out_tensor *g[] = {&out->dq, &out->dk, &out->dv, &out->dbias, &out->dsinks};
    for (size_t t = 0; t < sizeof g / sizeof g[0]; t++)
        if ((t < 3 || g[t]->data) && g[t]->dtype != SMATTN_F32)
            return 0;
    return 1;
}

int smattn_plugin_backward(const smattn_problem *p, const smattn_inputs *in,
                           const smattn_forward_saved *saved, const smattn_grad_inputs *gin,
                           const smattn_grad_outputs *out)
{
    if (!p || !in || !saved || !gin || !out)
        return SMATTN_ERR_NULL;
    if (!backward_supported(p, in, saved, gin, out))
        return SMATTN_ERR_UNSUPPORTED;
    const float scale = (float)p->scale;
    float *s = malloc((size_t)p->T * sizeof *s);
    float *dk = malloc((size_t)(p->T * p->D) * sizeof *dk);   /* this head's dK [T][D] */
    float *dv = malloc((size_t)(p->T * p->Dv) * sizeof *dv);  /* and dV [T][Dv] */
    if (!s || !dk || !dv) {
        free(s), free(dk), free(dv);
        return SMATTN_ERR_NOMEM;
    }
    for (int64_t b = 0; b < p->B; b++)
        for (int64_t j = 0; j < p->T; j++)
            for (int64_t g = 0; g < p->Hkv; g++) {
                for (int64_t d = 0; d < p->D; d++)
                    *out4(&out->dk, b, j, g, d) = 0.0f;
                for (int64_t c = 0; c < p->Dv; c++)
                    *out4(&out->dv, b, j, g, c) = 0.0f;
            }
    /* dBias through its strides (a stride 0 reaches one element from many rows) and dSinks:
     * +0 first, the terms added in */
    for (int64_t b = 0; out->dbias.data && b < p->B; b++)
        for (int64_t h = 0; h < p->Hq; h++)
            for (int64_t i = 0; i < p->S; i++)
                for (int64_t j = 0; j < p->T; j++)
                    *out4(&out->dbias, b, h, i, j) = 0.0f;
    for (int64_t h = 0; out->dsinks.data && h < p->Hq; h++)
        ((float *)out->dsinks.data)[h * out->dsinks.stride[0]] = 0.0f;
    int bad = 0;
    for (int64_t b = 0; b < p->B; b++)
        for (int64_t h = 0; h < p->Hq; h++) {
            const int64_t g = kv_head(p, h);
            for (int64_t e = 0; e < p->T * p->D; e++)
                dk[e] = 0.0f;
            for (int64_t e = 0; e < p->T * p->Dv; e++)
                dv[e] = 0.0f;
            for (int64_t i = 0; i < p->S; i++) {
                for (int64_t d = 0; d < p->D; d++)
                    *out4(&out->dq, b, i, h, d) = 0.0f;
                int any = 0;
                for (int64_t j = 0; j < p->T; j++) {
                    s[j] = key_visible(p, in, b, h, i, j) ? key_score(p, in, b, h, i, j, &bad)
                                                          : -INFINITY;
                    any |= s[j] != -INFINITY;
                }
                /* the sink (none when absent or -inf), a key of value 0 that enters the LSE */
                const float sink = in->sinks.data
                                       ? ((const float *)in->sinks.data)[h * in->sinks.stride[0]]
                                       : -INFINITY;
                if (!any && sink == -INFINITY)
                    continue; /* an empty row (zero convention): nothing flows back */
                const float lse = at4(&saved->lse, b, h, i, 0);
                float delta = 0.0f; /* dO . O, from the O the forward stored */
                for (int64_t c = 0; c < p->Dv; c++) {
                    float o = at4(&saved->o, b, i, h, c), d_o = at4(&gin->dout, b, i, h, c);
                    if (!isfinite(d_o))
                        bad = 1;
                    delta += d_o * o;
                }
                const float dlse = gin->dlse.data ? at4(&gin->dlse, b, h, i, 0) : 0.0f;
                if (!isfinite(dlse))
                    bad = 1;
                if (out->dsinks.data && sink != -INFINITY)
                    ((float *)out->dsinks.data)[h * out->dsinks.stride[0]] +=
                        expf(sink - lse) * (dlse - delta);
                for (int64_t j = 0; j < p->T; j++) {
                    if (s[j] == -INFINITY)
                        continue;
                    const float P = expf(s[j] - lse);
                    float dP = 0.0f;
                    for (int64_t c = 0; c < p->Dv; c++) {
                        float v = at4(&in->v, b, j, g, c);
                        if (!isfinite(v))
                            bad = 1;
                        dP += at4(&gin->dout, b, i, h, c) * v;
                    }
                    float dU = P * (dP - delta + dlse);
                    if (out->dbias.data) /* the bias comes after the cap: dS, not dU */
                        *out4(&out->dbias, b, h, i, j) += dU;
                    if (p->softcap > 0) {
                        const float t = tanhf(pre_cap_score(p, in, b, h, i, j) / (float)p->softcap);
                        dU *= 1.0f - t * t;
                    }
                    for (int64_t d = 0; d < p->D; d++) {
                        *out4(&out->dq, b, i, h, d) += dU * at4(&in->k, b, j, g, d);
                        dk[j * p->D + d] += dU * at4(&in->q, b, i, h, d);
                    }
                    for (int64_t c = 0; c < p->Dv; c++)
                        dv[j * p->Dv + c] += P * at4(&gin->dout, b, i, h, c);
                }
                for (int64_t d = 0; d < p->D; d++)
                    *out4(&out->dq, b, i, h, d) *= scale;
            }
            /* the head's part of its KV head's gradients: the group's sum (SPEC 2.2) */
            for (int64_t j = 0; j < p->T; j++) {
                for (int64_t d = 0; d < p->D; d++)
                    *out4(&out->dk, b, j, g, d) += dk[j * p->D + d];
                for (int64_t c = 0; c < p->Dv; c++)
                    *out4(&out->dv, b, j, g, c) += dv[j * p->Dv + c];
            }
        }
    for (int64_t b = 0; b < p->B; b++)
        for (int64_t j = 0; j < p->T; j++)
            for (int64_t g = 0; g < p->Hkv; g++)
                for (int64_t d = 0; d < p->D; d++)
                    *out4(&out->dk, b, j, g, d) *= scale;
    free(s), free(dk), free(dv);
    return bad ? SMATTN_ERR_UNSUPPORTED : SMATTN_OK;
}
