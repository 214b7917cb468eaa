/* SPDX-License-Identifier: MIT */
/* bwcase.c: random backward problems and a plain binary32 backward with planted bugs. */
#include "tests/support/bwcase.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

const char *const bw_bug_names[BW_BUG_COUNT] = {
    "none", "group not summed", "masked keys given gradient", "softcap derivative missing",
    "scale applied twice", "scale not applied", "Delta from the wrong O", "empty row NaN"};

static float unif_f(rng *r, float lo, float hi)
{
    return (float)((double)lo + ((double)hi - (double)lo) * rng_unif(r));
}

static float *fill(rng *r, int64_t n, float lo, float hi)
{
    float *x = malloc((size_t)(n > 0 ? n : 1) * sizeof *x);
    for (int64_t k = 0; k < n; k++)
        x[k] = unif_f(r, lo, hi);
    return x;
}

int bwcase_make(bwcase *c, uint64_t seed, unsigned feat, smattn_dtype odt)
{
    return bwcase_make_shaped(c, seed, feat, odt, NULL);
}

int bwcase_make_shaped(bwcase *c, uint64_t seed, unsigned feat, smattn_dtype odt,
                       const bwshape *shape)
{
    memset(c, 0, sizeof *c);
    rng r = {seed * 0x9E3779B97F4A7C15u + 17};
    if (feat == ~0u) {
        feat = (unsigned)rng_next(&r) & (BW_WINDOW | BW_KVLENS | BW_MASK | BW_BIAS | BW_SINKS |
                                         BW_SOFTCAP | BW_DLSE | BW_GQA | BW_MEAN | BW_QLENS);
        int cz = (int)rng_pick(&r, 3);
        feat |= cz == 1 ? BW_CAUSAL_LR : cz == 2 ? BW_CAUSAL_UL : 0;
        if (rng_chance(&r, 0.2))
            feat |= BW_EMPTY;
    }
    if (feat & BW_EMPTY)
        feat |= BW_KVLENS;
    c->feat = feat;
    smattn_problem *p = &c->p;
    *p = smattn_problem_default();
    p->B = rng_int(&r, 1, 2) + ((feat & BW_EMPTY) ? 1 : 0);
    p->S = rng_int(&r, 1, 9);
    p->T = rng_int(&r, 1, 12);
    p->Hkv = rng_int(&r, 1, 2);
    p->Hq = p->Hkv * ((feat & BW_GQA) ? rng_int(&r, 2, 3) : 1);
    p->D = rng_int(&r, 1, 16);
    p->Dv = rng_int(&r, 1, 16);
    if (feat & BW_BIG) {
        p->S = rng_int(&r, 65, 140);
        p->T = rng_int(&r, 65, 140);
        p->D = rng_int(&r, 1, 40);
        p->Dv = rng_int(&r, 1, 40);
    }
    if (shape) {
        p->S = shape->S ? shape->S : p->S;
        p->T = shape->T ? shape->T : p->T;
        p->Hq = shape->Hq ? shape->Hq : p->Hq;
        p->Hkv = shape->Hkv ? shape->Hkv : p->Hkv;
        p->D = shape->D ? shape->D : p->D;
        p->Dv = shape->Dv ? shape->Dv : p->Dv;
    }
    p->scale = smattn_default_scale(p->D);
    p->causal = (feat & BW_CAUSAL_LR)   ? SMATTN_CAUSAL_LOWER_RIGHT
                : (feat & BW_CAUSAL_UL) ? SMATTN_CAUSAL_UPPER_LEFT
                                        : SMATTN_CAUSAL_NONE;
    if (feat & BW_WINDOW) {
        p->window_left = rng_int(&r, -1, 3);
        p->window_right = rng_int(&r, -1, 3);
    }
    if (feat & BW_KVLENS) {
        for (int64_t b = 0; b < p->B; b++)
            c->kv_lens[b] = rng_int(&r, 1, p->T);
        if (feat & BW_EMPTY)
            c->kv_lens[0] = 0;
        p->kv_lens = c->kv_lens;
    }
    if (feat & BW_QLENS) {
        for (int64_t b = 0; b < p->B; b++)
            c->q_lens[b] = rng_int(&r, 0, p->S);
        p->q_lens = c->q_lens;
    }
    if (feat & BW_SOFTCAP)
        p->softcap = 1 + 4 * rng_unif(&r);
    if (feat & BW_MEAN)
        p->empty_rows = SMATTN_EMPTY_MEAN;
    if (feat & BW_NANCONV)
        p->empty_rows = SMATTN_EMPTY_NAN;
    const int64_t nq = p->B * p->S * p->Hq * p->D, nk = p->B * p->T * p->Hkv * p->D,
                  nv = p->B * p->T * p->Hkv * p->Dv, no = p->B * p->S * p->Hq * p->Dv,
                  nl = p->B * p->Hq * p->S, nf = nl * p->T;
    c->q = fill(&r, nq, -2, 2);
    c->k = fill(&r, nk, -2, 2);
    c->v = fill(&r, nv, -2, 2);
    c->dout = fill(&r, no, -2, 2);
    smattn_inputs *in = &c->in;
    memset(in, 0, sizeof *in);
    in->q = (smattn_tensor){c->q, SMATTN_F32, {0}};
    in->k = (smattn_tensor){c->k, SMATTN_F32, {0}};
    in->v = (smattn_tensor){c->v, SMATTN_F32, {0}};
    if (smattn_contiguous_strides(p, 'q', in->q.stride) ||
        smattn_contiguous_strides(p, 'k', in->k.stride) ||
        smattn_contiguous_strides(p, 'v', in->v.stride))
        return 1;
    if (feat & BW_BIAS) {
        c->bias = fill(&r, nf, -2, 2);
        for (int64_t x = 0; x < nf; x++)
            if (rng_chance(&r, 0.1))
                c->bias[x] = -INFINITY;
        in->bias = (smattn_tensor){c->bias, SMATTN_F32, {0}};
        if (smattn_contiguous_strides(p, 'b', in->bias.stride))
            return 1;
    }
    if (feat & BW_MASK) {
        c->mask = malloc((size_t)nf);
        for (int64_t x = 0; x < nf; x++)
            c->mask[x] = (unsigned char)rng_chance(&r, 0.8);
        in->mask = (smattn_tensor){c->mask, SMATTN_BOOL, {0}};
        if (smattn_contiguous_strides(p, 'b', in->mask.stride))
            return 1;
    }
    if (feat & BW_SINKS) {
        c->sinks = fill(&r, p->Hq, -2, 2);
        if (p->Hq > 1 && rng_chance(&r, 0.3))
            c->sinks[0] = -INFINITY;
        in->sinks = (smattn_tensor){c->sinks, SMATTN_F32, {1, 0, 0, 0}};
    }
    memset(&c->gin, 0, sizeof c->gin);
    c->gin.dout = (smattn_tensor){c->dout, SMATTN_F32, {0}};
    if (smattn_contiguous_strides(p, 'o', c->gin.dout.stride))
        return 1;
    if (feat & BW_DLSE) {
        c->dlse = fill(&r, nl, -1, 1);
        c->gin.dlse = (smattn_tensor){c->dlse, SMATTN_F32, {0}};
        if (smattn_contiguous_strides(p, 'l', c->gin.dlse.stride))
            return 1;
    }
    if (feat & BW_ALIBI) { /* drawn last: the other draws keep their values */
        p->alibi_mode = (feat & BW_BIAS)        ? SMATTN_ALIBI_MASK
                        : rng_chance(&r, 0.5) ? SMATTN_ALIBI_SYMMETRIC
                                              : SMATTN_ALIBI_ONE_SIDED;
        for (int64_t h = 0; h < p->Hq; h++)
            c->slopes[h] = (float)rng_int(&r, -16, 16) / 16.0f;
        p->alibi_slopes = c->slopes;
    }
    c->odt = odt;
    c->o = calloc((size_t)no, smattn_dtype_size(odt));
    c->lse = calloc((size_t)nl, sizeof(float));
    return !c->o || !c->lse || bwcase_forward(c);
}

int bwcase_forward(bwcase *c)
{
    /* the forward, as a FlashAttention-2 training step stores it */
    smattn_outputs out;
    memset(&out, 0, sizeof out);
    out.o = (smattn_out_tensor){c->o, c->odt, {0}};
    out.lse = (smattn_out_tensor){c->lse, SMATTN_F32, {0}};
    if (smattn_contiguous_strides(&c->p, 'o', out.o.stride) ||
        smattn_contiguous_strides(&c->p, 'l', out.lse.stride))
        return 1;
    return smattn_attention(&c->p, &c->in, &out, NULL) != SMATTN_OK;
}

void bwcase_free(bwcase *c)
{
    free(c->q), free(c->k), free(c->v), free(c->bias), free(c->sinks), free(c->dout);
    free(c->dlse), free(c->mask), free(c->o), free(c->lse);
    memset(c, 0, sizeof *c);
}

const char *bwcase_name(const bwcase *c, char *buf, size_t cap)
{
    const smattn_problem *p = &c->p;
    snprintf(buf, cap,
             "B%lld S%lld T%lld Hq%lld Hkv%lld D%lld Dv%lld causal%d win(%lld,%lld) feat 0x%x "
             "O %s",
             (long long)p->B, (long long)p->S, (long long)p->T, (long long)p->Hq,
             (long long)p->Hkv, (long long)p->D, (long long)p->Dv, (int)p->causal,
             (long long)p->window_left, (long long)p->window_right, c->feat,
             smattn_dtype_name(c->odt));
    return buf;
}

void bwgrads_make(bwgrads *g, const smattn_problem *p, smattn_dtype t)
{
    memset(g, 0, sizeof *g);
    g->t = t;
    g->nq = p->B * p->S * p->Hq * p->D;
    g->nk = p->B * p->T * p->Hkv * p->D;
    g->nv = p->B * p->T * p->Hkv * p->Dv;
    size_t es = smattn_dtype_size(t);
    g->dq = calloc((size_t)g->nq, es);
    g->dk = calloc((size_t)g->nk, es);
    g->dv = calloc((size_t)g->nv, es);
    g->go.dq = (smattn_out_tensor){g->dq, t, {p->S * p->Hq * p->D, p->Hq * p->D, p->D, 1}};
    g->go.dk = (smattn_out_tensor){g->dk, t, {p->T * p->Hkv * p->D, p->Hkv * p->D, p->D, 1}};
    g->go.dv = (smattn_out_tensor){g->dv, t, {p->T * p->Hkv * p->Dv, p->Hkv * p->Dv, p->Dv, 1}};
}

void bwgrads_free(bwgrads *g)
{
    free(g->dq), free(g->dk), free(g->dv);
    memset(g, 0, sizeof *g);
}

/* ---- the plain backward --------------------------------------------------------------- */

void bw_plain(const bwcase *c, int bug, bwgrads *g)
{
    const smattn_problem *p = &c->p;
    const int64_t B = p->B, S = p->S, T = p->T, Hq = p->Hq, Hkv = p->Hkv, D = p->D,
                  Dv = p->Dv, G = Hq / Hkv;
    float *dq = calloc((size_t)(B * S * Hq * D), sizeof(float));
    float *dk = calloc((size_t)(B * T * Hkv * D), sizeof(float));
    float *dv = calloc((size_t)(B * T * Hkv * Dv), sizeof(float));
    float *P = malloc((size_t)T * sizeof(float)), *dU = malloc((size_t)T * sizeof(float));
    const float scale = (float)p->scale, cap = (float)p->softcap;
    const float sq = bug == BW_BUG_SCALE_TWICE ? scale * scale
                     : bug == BW_BUG_SCALE_NONE ? 1.0f
                                                : scale;
    for (int64_t b = 0; b < B; b++)
        for (int64_t h = 0; h < Hq; h++) {
            const int64_t gh = h / G;
            for (int64_t i = 0; i < S; i++) {
                const int64_t Tb = p->kv_lens ? p->kv_lens[b] : T;
                const float lse = c->lse[(b * Hq + h) * S + i];
                const float *q = c->q + ((b * S + i) * Hq + h) * D;
                const float *dO = c->dout + ((b * S + i) * Hq + h) * Dv;
                unsigned char vis[256]; /* T <= 140 */
                int nvis = 0;
                for (int64_t j = 0; j < T; j++) {
                    vis[j] = (unsigned char)(smattn_visible(p, &c->in, b, h, i, j) &&
                                             !(c->bias && c->bias[((b * Hq + h) * S + i) * T + j] ==
                                                              -INFINITY));
                    nvis += vis[j];
                }
                const int qpad = p->q_lens && i >= p->q_lens[b];
                const int sink = c->sinks && !qpad && c->sinks[h] != -INFINITY;
                if (nvis == 0 && !sink) {
                    if (p->empty_rows == SMATTN_EMPTY_MEAN && Tb > 0) {
                        const float w = 1.0f / (float)Tb;
                        for (int64_t j = 0; j < Tb; j++)
                            for (int64_t cc = 0; cc < Dv; cc++)
                                dv[((b * T + j) * Hkv + gh) * Dv + cc] += w * dO[cc];
                        continue;
                    }
                    if (bug != BW_BUG_EMPTY_NAN)
                        continue;
                    /* every key masked: s = -inf, and P = exp(-inf - LSE) with LSE = -inf */
                    for (int64_t j = 0; j < T; j++) {
                        float pj = expf(-INFINITY - lse);
                        for (int64_t d = 0; d < D; d++) {
                            dk[((b * T + j) * Hkv + gh) * D + d] += pj * q[d];
                            dq[((b * S + i) * Hq + h) * D + d] += pj;
                        }
                        for (int64_t cc = 0; cc < Dv; cc++)
                            dv[((b * T + j) * Hkv + gh) * Dv + cc] += pj * dO[cc];
                    }
                    continue;
                }
                if (nvis == 0)
                    continue; /* the sink alone */
                if (bug == BW_BUG_MASKED_KEYS)
                    for (int64_t j = 0; j < Tb && j < T; j++)
                        vis[j] = 1;
                /* Delta = dO . O, O as stored (or the next head's, planted) */
                const int64_t ho = bug == BW_BUG_DELTA_WRONG_O ? (h + 1) % Hq : h;
                float Delta = 0;
                for (int64_t cc = 0; cc < Dv; cc++)
                    Delta += dO[cc] * (float)smattn_load(c->o, c->odt,
                                                         ((b * S + i) * Hq + ho) * Dv + cc);
                const float dl = c->dlse ? c->dlse[(b * Hq + h) * S + i] : 0.0f;
                for (int64_t j = 0; j < T; j++) {
                    P[j] = dU[j] = 0;
                    if (!vis[j])
                        continue;
                    const float *k = c->k + ((b * T + j) * Hkv + gh) * D;
                    const float *v = c->v + ((b * T + j) * Hkv + gh) * Dv;
                    float dot = 0;
                    for (int64_t d = 0; d < D; d++)
                        dot += q[d] * k[d];
                    float s = dot * scale, t = 0;
                    if (cap > 0) {
                        t = tanhf(s / cap);
                        s = cap * t;
                    }
                    if (c->bias)
                        s += c->bias[((b * Hq + h) * S + i) * T + j];
                    float pj = expf(s - lse);
                    float dP = 0;
                    for (int64_t cc = 0; cc < Dv; cc++)
                        dP += dO[cc] * v[cc];
                    float dS = pj * (dP - Delta + dl);
                    if (cap > 0 && bug != BW_BUG_NO_SOFTCAP_DERIV)
                        dS = dS * (1.0f - t * t);
                    P[j] = pj;
                    dU[j] = dS;
                }
                for (int64_t d = 0; d < D; d++) {
                    float z = 0;
                    for (int64_t j = 0; j < T; j++)
                        if (vis[j])
                            z += dU[j] * c->k[((b * T + j) * Hkv + gh) * D + d];
                    dq[((b * S + i) * Hq + h) * D + d] = z * sq;
                }
                if (bug == BW_BUG_GROUP_NOT_SUMMED && h % G != 0)
                    continue;
                for (int64_t j = 0; j < T; j++) {
                    if (!vis[j])
                        continue;
                    for (int64_t d = 0; d < D; d++)
                        dk[((b * T + j) * Hkv + gh) * D + d] += dU[j] * q[d];
                    for (int64_t cc = 0; cc < Dv; cc++)
                        dv[((b * T + j) * Hkv + gh) * Dv + cc] += P[j] * dO[cc];
                }
            }
        }
    for (int64_t x = 0; x < g->nq; x++)
        smattn_store(g->dq, g->t, x, (double)dq[x]);
    for (int64_t x = 0; x < g->nk; x++)
        smattn_store(g->dk, g->t, x, (double)(dk[x] * sq));
    for (int64_t x = 0; x < g->nv; x++)
        smattn_store(g->dv, g->t, x, (double)dv[x]);
    free(dq), free(dk), free(dv), free(P), free(dU);
}
