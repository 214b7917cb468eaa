/* SPDX-License-Identifier: MIT */
/* test_bound.c: the SPEC 6 bound holds for a plain binary32 kernel, is exceeded by the same
 * kernel with planted bugs, and the metrics of SPEC 6.10 classify NaN, inf, zero and
 * subnormal spacing as specified. Exact values come from the oracle (smattn_ref). */
#include <check.h>
#include <float.h>
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/internal.h"
#include "tests/support/testkit.h"

/* ---- problem families ------------------------------------------------------------------ */

typedef struct family {
    const char *name;
    int64_t B, S, T, Hq, Hkv, D, Dv;
    smattn_causal causal;
    int64_t wl, wr;
    int lens;          /* random kv_lens / q_lens */
    double mask;       /* density of a random bool mask (broadcast over heads); 0: none */
    int bias;          /* additive bias (broadcast over batch) with -inf and -3.4e38 entries */
    double softcap;
    int sinks;
    double score_std;  /* typical size of the scores */
    double voff;       /* V offset: V = voff + noise */
    int structured;    /* rank-one scores with V correlated to them */
    double vscale;     /* scale of V's random part (0: 1) */
} family;

static const family families[] = {
    {"mha_random", 2, 9, 17, 2, 2, 24, 8, SMATTN_CAUSAL_NONE, -1, -1, 0, 0, 0, 0, 0, 1.0, 0,
     0, 0},
    {"gqa_causal_v1000", 1, 24, 64, 6, 2, 40, 16, SMATTN_CAUSAL_LOWER_RIGHT, -1, -1, 0, 0, 0,
     0, 0, 2.0, 1000, 1, 0},
    {"t512_d128", 1, 4, 512, 2, 1, 128, 32, SMATTN_CAUSAL_LOWER_RIGHT, -1, -1, 0, 0, 0, 0, 0,
     4.0, 0, 1, 0},
    {"mask_bias_lens", 2, 16, 100, 2, 1, 64, 16, SMATTN_CAUSAL_UPPER_LEFT, -1, -1, 1, 0.7, 1,
     0, 0, 1.5, 1000, 1, 0},
    {"wide_scores_v1000", 1, 8, 256, 2, 2, 32, 16, SMATTN_CAUSAL_NONE, -1, -1, 0, 0, 0, 0, 0,
     30.0, 1000, 0, 0},
    {"softcap_sinks_window", 1, 32, 128, 4, 1, 64, 16, SMATTN_CAUSAL_LOWER_RIGHT, 40, -1, 0,
     0, 0, 20.0, 1, 8.0, -500, 1, 0},
    /* S > T lower-right (the first rows are empty), sinks of size 6, V near the binary32
     * underflow threshold (subnormal products and outputs). */
    {"empty_rows_sinks_tiny_v", 2, 12, 8, 2, 1, 8, 4, SMATTN_CAUSAL_LOWER_RIGHT, -1, -1, 0, 0,
     0, 0, 1, 6.0, 0, 0, 1e-39},
};
#define N_FAMILIES ((int)(sizeof families / sizeof families[0]))

typedef struct tcase {
    smattn_problem p;
    smattn_inputs in;
    float *q, *k, *v, *bias, *sinks;
    unsigned char *mask;
    int64_t *kvl, *ql;
    int64_t no, nl, np; /* element counts of O, LSE, P */
    double *ex[3];      /* exact (the oracle's binary64 results): O, LSE, P */
    double *bd[3];      /* bounds */
    float *out[3];      /* kernel outputs */
} tcase;

static float *falloc(int64_t n)
{
    float *x = calloc((size_t)n, sizeof *x);
    ck_assert_ptr_nonnull(x);
    return x;
}

static double *dalloc(int64_t n)
{
    double *x = calloc((size_t)(n > 0 ? n : 1), sizeof *x);
    ck_assert_ptr_nonnull(x);
    return x;
}

/* x rounded to dtype t (held in a float). */
static float rep(smattn_dtype t, double x)
{
    return (float)smattn__bits_to_double(smattn__round_bits(x, t), t);
}

/* The scale: a binary64 number 0.45 binary16-ulps away from a binary16 near 1/sqrt(D), so that
 * rounding it to binary16 (a planted bug) changes it by about 2^-12 relative. */
static double test_scale_of(int64_t D)
{
    double s0 = smattn__bits_to_double(smattn__round_bits(smattn_default_scale(D), SMATTN_F16),
                                       SMATTN_F16);
    int e;
    (void)frexp(s0, &e);
    return s0 + 0.45 * ldexp(1.0, e - 11);
}

static void make_case(tcase *c, const family *f, uint64_t seed, smattn_dtype repr)
{
    memset(c, 0, sizeof *c);
    rng r = {seed * 0x100000001b3ULL + 0x5bd1e995ULL};
    smattn_problem *p = &c->p;
    *p = smattn_problem_default();
    p->B = f->B; p->S = f->S; p->T = f->T; p->Hq = f->Hq; p->Hkv = f->Hkv;
    p->D = f->D; p->Dv = f->Dv;
    p->causal = f->causal;
    p->window_left = f->wl;
    p->window_right = f->wr;
    p->softcap = f->softcap;
    p->scale = test_scale_of(f->D);
    const int64_t B = p->B, S = p->S, T = p->T, Hq = p->Hq, Hkv = p->Hkv, D = p->D,
                  Dv = p->Dv;
    c->q = falloc(B * S * Hq * D);
    c->k = falloc(B * T * Hkv * D);
    c->v = falloc(B * T * Hkv * Dv);
    /* Scores: q.k has size about score_std / scale. */
    double *u = dalloc(D), *alpha = dalloc(Dv), *rj = dalloc(B * T * Hkv);
    for (int64_t d = 0; d < D; d++)
        u[d] = rng_gauss(&r);
    for (int64_t cc = 0; cc < Dv; cc++)
        alpha[cc] = rng_gauss(&r);
    for (int64_t t = 0; t < B * T * Hkv; t++)
        rj[t] = rng_gauss(&r);
    const double qs = f->structured ? f->score_std / (p->scale * (double)D)
                                    : f->score_std / (p->scale * sqrt((double)D));
    for (int64_t t = 0; t < B * S * Hq; t++)
        for (int64_t d = 0; d < D; d++)
            c->q[t * D + d] = rep(repr, f->structured ? qs * (u[d] + 0.3 * rng_gauss(&r))
                                                    : qs * rng_gauss(&r));
    for (int64_t t = 0; t < B * T * Hkv; t++) {
        for (int64_t d = 0; d < D; d++)
            c->k[t * D + d] = rep(repr, f->structured ? rj[t] * u[d] + 0.3 * rng_gauss(&r)
                                                    : rng_gauss(&r));
        for (int64_t cc = 0; cc < Dv; cc++)
            c->v[t * Dv + cc] = rep(repr, f->voff + (f->vscale > 0 ? f->vscale : 1) *
                                                        ((f->structured ? rj[t] * alpha[cc] : 0) +
                                                         0.5 * rng_gauss(&r)));
    }
    free(u);
    free(alpha);
    free(rj);
    c->in.q = (smattn_tensor){c->q, SMATTN_F32, {0}};
    c->in.k = (smattn_tensor){c->k, SMATTN_F32, {0}};
    c->in.v = (smattn_tensor){c->v, SMATTN_F32, {0}};
    smattn_contiguous_strides(p, 'q', c->in.q.stride);
    smattn_contiguous_strides(p, 'k', c->in.k.stride);
    smattn_contiguous_strides(p, 'v', c->in.v.stride);
    if (f->lens) {
        c->kvl = calloc((size_t)B, sizeof *c->kvl);
        c->ql = calloc((size_t)B, sizeof *c->ql);
        ck_assert(c->kvl && c->ql);
        for (int64_t b = 0; b < B; b++) {
            c->kvl[b] = T - (int64_t)(rng_unif(&r) * (double)T / 2);
            c->ql[b] = S - (int64_t)(rng_unif(&r) * (double)S / 3);
        }
        p->kv_lens = c->kvl;
        p->q_lens = c->ql;
    }
    if (f->mask > 0) { /* [B, 1, S, T]: stride 0 over heads */
        c->mask = calloc((size_t)(B * S * T), 1);
        ck_assert_ptr_nonnull(c->mask);
        for (int64_t t = 0; t < B * S * T; t++)
            c->mask[t] = rng_unif(&r) < f->mask;
        c->in.mask = (smattn_tensor){c->mask, SMATTN_BOOL, {S * T, 0, T, 1}};
    }
    if (f->bias) { /* [1, Hq, S, T]: stride 0 over the batch */
        c->bias = falloc(Hq * S * T);
        for (int64_t t = 0; t < Hq * S * T; t++) {
            double x = rng_unif(&r);
            c->bias[t] = x < 0.05 ? -INFINITY : x < 0.07 ? -3.4e38f : (float)(2 * rng_gauss(&r));
        }
        c->in.bias = (smattn_tensor){c->bias, SMATTN_F32, {0, S * T, T, 1}};
    }
    if (f->sinks) {
        c->sinks = falloc(Hq);
        for (int64_t h = 0; h < Hq; h++)
            c->sinks[h] = rep(repr, f->score_std * rng_gauss(&r));
        c->in.sinks = (smattn_tensor){c->sinks, SMATTN_F32, {1, 0, 0, 0}};
    }
    c->no = B * S * Hq * Dv;
    c->nl = B * Hq * S;
    c->np = B * Hq * S * T;
    const int64_t cnt[3] = {c->no, c->nl, c->np};
    for (int k = 0; k < 3; k++) {
        c->ex[k] = dalloc(cnt[k]);
        c->bd[k] = dalloc(cnt[k]);
        c->out[k] = falloc(cnt[k]);
    }
}

static void free_case(tcase *c)
{
    free(c->q); free(c->k); free(c->v); free(c->bias); free(c->sinks); free(c->mask);
    free(c->kvl); free(c->ql);
    for (int k = 0; k < 3; k++) {
        free(c->ex[k]);
        free(c->bd[k]);
        free(c->out[k]);
    }
}

static smattn_outputs outs_of(const tcase *c, double *const *x, smattn_dtype t)
{
    smattn_outputs o;
    memset(&o, 0, sizeof o);
    o.o = (smattn_out_tensor){x ? x[0] : NULL, t, {0}};
    o.lse = (smattn_out_tensor){x ? x[1] : NULL, t, {0}};
    o.p = (smattn_out_tensor){x ? x[2] : NULL, t, {0}};
    smattn_contiguous_strides(&c->p, 'o', o.o.stride);
    smattn_contiguous_strides(&c->p, 'l', o.lse.stride);
    smattn_contiguous_strides(&c->p, 'p', o.p.stride);
    return o;
}

/* ---- the kernel under test: plain attention, optionally with one planted bug ---------------
 *
 * Written the obvious way: scores in float (dot product, times the scale, softcap, plus the
 * bias), the maximum, expf, the row sum, P.V, one division, LSE = m + logf(l). A variant can
 * work in binary16 instead (every operation is done in float and rounded to binary16, which
 * is correctly rounded because 24 >= 2*11 + 2), run an online softmax over key blocks, and
 * round P to bfloat16 before P.V. */

enum { BUG_NONE, BUG_SCALE16, BUG_ACC16, BUG_CAUSAL, BUG_PBF16, N_BUGS };
static const char *const bug_names[N_BUGS] = {"clean", "scale_f16", "acc_f16", "causal_off_by_1",
                                              "p_bf16"};

typedef struct variant {
    const char *name;
    smattn_dtype work; /* F32, or F16 (inputs are then made representable in binary16) */
    int64_t block;     /* online softmax over blocks of this many keys; 0: two passes */
    int p_bf16;        /* P rounded to bfloat16 before P.V, and the model says so */
} variant;

static const variant variants[] = {
    {"f32", SMATTN_F32, 0, 0},
    {"f32_online32", SMATTN_F32, 32, 0},
    {"f32_online64_pbf16", SMATTN_F32, 64, 1},
    {"f16", SMATTN_F16, 0, 0},
};
#define N_VARIANTS ((int)(sizeof variants / sizeof variants[0]))

static float round_to(float x, smattn_dtype t)
{
    return (float)smattn__bits_to_double(smattn__round_bits((double)x, t), t);
}

/* The model a variant claims (SPEC 6.1). */
static smattn_precision claim_of(const variant *vr, const smattn_problem *p)
{
    smattn_precision pm = smattn_precision_of(vr->work);
    if (vr->block > 0)
        pm.blocks = (p->T + vr->block - 1) / vr->block;
    if (vr->p_bf16)
        pm.u_p = 0x1p-8;
    return pm;
}

static void kernel(tcase *c, const variant *vr, int bug)
{
    const smattn_problem *p = &c->p;
    const smattn_inputs *in = &c->in;
    const int64_t T = p->T, D = p->D, Dv = p->Dv;
    const smattn_dtype wt = vr->work;
#define W(x) (wt == SMATTN_F32 ? (float)(x) : round_to((float)(x), wt))
    float sc = W(p->scale);
    if (bug == BUG_SCALE16)
        sc = round_to(sc, SMATTN_F16);
    const float cap = W(p->softcap);
    const int64_t blk = vr->block > 0 ? vr->block : T;
    float *s = falloc(T), *acc = falloc(Dv);
    int64_t *vis = calloc((size_t)T, sizeof *vis);
    ck_assert_ptr_nonnull(vis);
    int64_t ost[4], lst[4], pst[4];
    smattn_contiguous_strides(p, 'o', ost);
    smattn_contiguous_strides(p, 'l', lst);
    smattn_contiguous_strides(p, 'p', pst);
    for (int64_t b = 0; b < p->B; b++)
        for (int64_t h = 0; h < p->Hq; h++)
            for (int64_t i = 0; i < p->S; i++) {
                const int64_t g = smattn__kv_head(p, h);
                int64_t lo, hi;
                smattn__key_range(p, b, i, &lo, &hi);
                const int64_t Sb = smattn__q_len(p, b), Tb = smattn__kv_len(p, b);
                if (bug == BUG_CAUSAL && p->causal != SMATTN_CAUSAL_NONE && i < Sb) {
                    int64_t d = p->causal == SMATTN_CAUSAL_UPPER_LEFT ? i : i + Tb - Sb;
                    if (hi == d + 1 && d + 1 < Tb) /* j <= d + 1 instead of j <= d */
                        hi = d + 2;
                }
                /* Scores of the visible keys. */
                int64_t n = 0;
                for (int64_t j = lo; j < hi; j++) {
                    if (!smattn__mask_allows(p, in, b, h, i, j))
                        continue;
                    float bv = 0;
                    if (c->bias) {
                        bv = c->bias[smattn__off4(in->bias.stride, b, h, i, j)];
                        if (bv == -INFINITY)
                            continue;
                    }
                    const float *qi = c->q + smattn__off4(in->q.stride, b, i, h, 0);
                    const float *kj = c->k + smattn__off4(in->k.stride, b, j, g, 0);
                    float dot = 0;
                    for (int64_t d = 0; d < D; d++) {
                        float pr = W(qi[d] * kj[d]);
                        dot = W(dot + pr);
                    }
                    float x = W(dot * sc);
                    if (cap > 0)
                        x = W(cap * W(tanhf(W(x / cap))));
                    if (c->bias)
                        x = W(x + bv);
                    s[n] = x;
                    vis[n++] = j;
                }
                const int has_sink = c->sinks != NULL;
                const float zeta = has_sink ? c->sinks[h] : 0;
                float *orow = c->out[0] + smattn__off4(ost, b, i, h, 0);
                float *lrow = c->out[1] + smattn__off4(lst, b, h, i, 0);
                float *prow = c->out[2] + smattn__off4(pst, b, h, i, 0);
                for (int64_t j = 0; j < T; j++)
                    prow[j] = 0;
                if (n == 0 && !has_sink) { /* empty row: zero / -inf (SPEC 3.4 defaults) */
                    for (int64_t cc = 0; cc < Dv; cc++)
                        orow[cc] = 0;
                    *lrow = -INFINITY;
                    continue;
                }
                /* Online softmax over blocks of visible keys (one block: two passes); the
                 * sink is part of the running maximum from the start (SPEC 6.1 A3). */
                float m = has_sink ? zeta : -INFINITY, l = 0;
                for (int64_t cc = 0; cc < Dv; cc++)
                    acc[cc] = 0;
                for (int64_t t0 = 0; t0 < n; t0 += blk) {
                    const int64_t t1 = t0 + blk < n ? t0 + blk : n;
                    float mb = m;
                    for (int64_t t = t0; t < t1; t++)
                        if (s[t] > mb)
                            mb = s[t];
                    if (mb > m && m > -INFINITY) { /* rescale by e^(m - mb) */
                        float r = W(expf(W(m - mb)));
                        l = W(l * r);
                        for (int64_t cc = 0; cc < Dv; cc++)
                            acc[cc] = W(acc[cc] * r);
                    }
                    m = mb;
                    for (int64_t t = t0; t < t1; t++) {
                        float e = W(expf(W(s[t] - m)));
                        l = W(l + e);
                        float w = e;
                        if (vr->p_bf16 || bug == BUG_PBF16)
                            w = round_to(w, SMATTN_BF16);
                        const float *vj = c->v + smattn__off4(in->v.stride, b, vis[t], g, 0);
                        for (int64_t cc = 0; cc < Dv; cc++) {
                            float pr = W(w * vj[cc]);
                            acc[cc] = W(acc[cc] + pr);
                            if (bug == BUG_ACC16)
                                acc[cc] = round_to(acc[cc], SMATTN_F16);
                        }
                    }
                }
                if (has_sink) /* the sink joins the denominator only */
                    l = W(l + W(expf(W(zeta - m))));
                for (int64_t cc = 0; cc < Dv; cc++)
                    orow[cc] = W(acc[cc] / l);
                *lrow = W(m + W(logf(l)));
                for (int64_t t = 0; t < n; t++) /* P = exp(s - m) / l with the final m */
                    prow[vis[t]] = W(W(expf(W(s[t] - m))) / l);
            }
#undef W
    free(s);
    free(acc);
    free(vis);
}

/* Largest error ratio over O, LSE and P (SPEC 6.10), and over O alone; counts elements out
 * of contract (finite exact value, bound +inf: SPEC 6.8). */
typedef struct verdict {
    double max_ratio, max_ratio_o;
    int which; /* 0 O, 1 LSE, 2 P */
    int64_t at;
    int64_t out_of_contract, compared;
} verdict;

static verdict judge(const tcase *c)
{
    verdict v = {0, 0, 0, 0, 0, 0};
    const int64_t cnt[3] = {c->no, c->nl, c->np};
    for (int k = 0; k < 3; k++)
        for (int64_t t = 0; t < cnt[k]; t++) {
            double ex = c->ex[k][t], bd = c->bd[k][t];
            if (isfinite(ex) && isinf(bd)) {
                v.out_of_contract++;
                continue;
            }
            v.compared++;
            double r = smattn_error_ratio((double)c->out[k][t], ex, bd);
            if (k == 0 && r > v.max_ratio_o)
                v.max_ratio_o = r;
            if (r > v.max_ratio) {
                v.max_ratio = r;
                v.which = k;
                v.at = t;
            }
        }
    return v;
}

static const char *const out_names[3] = {"O", "LSE", "P"};

static uint64_t family_seed(int fam, int k)
{
    const char *s = getenv("SMATTN_SEED"); /* replay one seed */
    if (s && *s)
        return strtoull(s, NULL, 0);
    return 1000u * (uint64_t)fam + (uint64_t)k;
}

static int n_seeds(void)
{
    if (getenv("SMATTN_SEED") && *getenv("SMATTN_SEED"))
        return 1;
    int n = (int)(4 * test_scale() + 0.5);
    return n < 1 ? 1 : n;
}

/* Every family at several seeds: each clean variant stays within the bound of the model it
 * claims, each planted bug in the binary32 kernel exceeds the bound wherever the bug changes
 * the computation. */
START_TEST(kernel_vs_bound)
{
    const family *f = &families[_i];
    double worst[N_VARIANTS], min_bug[N_BUGS], min_bug_o[N_BUGS];
    int64_t ooc[N_VARIANTS], cmp[N_VARIANTS];
    int ran[N_VARIANTS], tried[N_BUGS], caught[N_BUGS];
    for (int k = 0; k < N_VARIANTS; k++) {
        worst[k] = 0;
        ooc[k] = cmp[k] = 0;
        ran[k] = 0;
    }
    for (int k = 0; k < N_BUGS; k++) {
        min_bug[k] = min_bug_o[k] = INFINITY;
        tried[k] = caught[k] = 0;
    }
    for (int sd = 0; sd < n_seeds(); sd++) {
        const uint64_t seed = family_seed(_i, sd);
        for (int half = 0; half < 2; half++) { /* inputs in binary32, then in binary16 */
            if (half == 1 && f->bias)
                continue; /* a -3.4e38 bias is not a binary16 input (SPEC 6.1 A1) */
            tcase c;
            make_case(&c, f, seed, half ? SMATTN_F16 : SMATTN_F32);
            smattn_outputs ex = outs_of(&c, c.ex, SMATTN_F64);
            smattn_status st = smattn_ref(&c.p, &c.in, &ex, NULL, NULL);
            ck_assert_msg(st == SMATTN_OK, "%s seed %" PRIu64 ": smattn_ref: %s", f->name, seed,
                          smattn_status_name(st));
            for (int vi = 0; vi < N_VARIANTS; vi++) {
                const variant *vr = &variants[vi];
                if ((vr->work == SMATTN_F16) != (half == 1))
                    continue;
                smattn_precision pm = claim_of(vr, &c.p);
                smattn_outputs bd = outs_of(&c, c.bd, SMATTN_F64);
                smattn_outputs fmt = outs_of(&c, NULL, vr->work);
                st = smattn_bound(&c.p, &c.in, &pm, &fmt, &bd);
                ck_assert_msg(st == SMATTN_OK, "%s seed %" PRIu64 ": smattn_bound: %s",
                              f->name, seed, smattn_status_name(st));
                const int nbugs = vi == 0 ? N_BUGS : 1;
                for (int bug = 0; bug < nbugs; bug++) {
                    kernel(&c, vr, bug);
                    verdict v = judge(&c);
                    const int k = v.which;
                    const int64_t at = v.at;
                    if (bug == BUG_NONE) {
                        ck_assert_msg(v.max_ratio <= 1.0,
                                      "%s seed %" PRIu64 " %s: clean kernel exceeds the bound: "
                                      "ratio %g at %s[%" PRId64 "]: computed %a exact %a "
                                      "bound %a",
                                      f->name, seed, vr->name, v.max_ratio, out_names[k], at,
                                      (double)c.out[k][at], c.ex[k][at], c.bd[k][at]);
                        ck_assert_msg(vr->work == SMATTN_F16 || v.compared > 0,
                                      "%s: nothing compared", f->name);
                        ran[vi] = 1;
                        cmp[vi] += v.compared;
                        if (v.max_ratio > worst[vi])
                            worst[vi] = v.max_ratio;
                        ooc[vi] += v.out_of_contract;
                        continue;
                    }
                    /* Where the bug changes nothing it cannot be seen: the causal one needs
                     * a causal mask; the others always change the arithmetic. */
                    if (bug == BUG_CAUSAL && c.p.causal == SMATTN_CAUSAL_NONE)
                        continue;
                    /* With V near the underflow threshold the bound is dominated by the
                     * absolute underflow terms (SPEC 6.4), which hide relative errors of
                     * 2^-9: there the ratios are reported, not asserted. */
                    const int tiny_v = f->vscale > 0 && f->vscale < 1e-30;
                    tried[bug]++;
                    caught[bug] += v.max_ratio > 1.0;
                    /* Rounding P to bf16 perturbs each weight by a random 2^-9 or less; over
                     * hundreds of keys the errors average out and can fall below the
                     * worst-case n u summation term: that bug must be caught on most seeds,
                     * every other bug on every seed. */
                    ck_assert_msg(tiny_v || bug == BUG_PBF16 || v.max_ratio > 1.0,
                                  "%s seed %" PRIu64 ": planted bug %s not caught: max ratio "
                                  "%g at %s[%" PRId64 "]: computed %a exact %a bound %a",
                                  f->name, seed, bug_names[bug], v.max_ratio, out_names[k], at,
                                  (double)c.out[k][at], c.ex[k][at], c.bd[k][at]);
                    if (v.max_ratio < min_bug[bug])
                        min_bug[bug] = v.max_ratio;
                    if (v.max_ratio_o < min_bug_o[bug])
                        min_bug_o[bug] = v.max_ratio_o;
                }
            }
            free_case(&c);
        }
    }
    printf("bound %-21s clean max ratio:", f->name);
    for (int k = 0; k < N_VARIANTS; k++) {
        if (!ran[k])
            printf(" %s n/a", variants[k].name);
        else
            printf(" %s %.3g", variants[k].name, worst[k]);
        if (ooc[k])
            printf(" (%" PRId64 " of %" PRId64 " elements unbounded)", ooc[k],
                   ooc[k] + cmp[k]);
        printf("%s", k + 1 < N_VARIANTS ? "," : "");
    }
    printf("\n  planted bugs, min over seeds of the max ratio (all outputs / O only):");
    for (int k = 1; k < N_BUGS; k++)
        if (!tried[k])
            printf(" %s n/a", bug_names[k]);
        else
            printf(" %s %.3g / %.3g (caught %d/%d)", bug_names[k], min_bug[k], min_bug_o[k],
                   caught[k], tried[k]);
    printf("\n");
    if (!(f->vscale > 0 && f->vscale < 1e-30))
        ck_assert_msg(2 * caught[BUG_PBF16] > tried[BUG_PBF16],
                      "%s: planted bug p_bf16 caught on %d of %d seeds only", f->name,
                      caught[BUG_PBF16], tried[BUG_PBF16]);
}
END_TEST

/* ---- smaller properties of smattn_bound --------------------------------------------------- */

/* One query, keys with scores {2, 1, -1, 3}: a hand-sized problem for structural checks. */
typedef struct small {
    smattn_problem p;
    smattn_inputs in;
    double q[1], k[4], v[8], bias[4];
    unsigned char mask[4];
    double bo[2], bl[1], bp[4];
    smattn_outputs bnd, fmt;
} small;

static void small_init(small *s)
{
    memset(s, 0, sizeof *s);
    s->p = smattn_problem_default();
    s->p.B = s->p.S = s->p.Hq = s->p.Hkv = s->p.D = 1;
    s->p.T = 4;
    s->p.Dv = 2;
    s->q[0] = 1;
    const double kk[4] = {2, 1, -1, 3};
    memcpy(s->k, kk, sizeof kk);
    for (int j = 0; j < 8; j++)
        s->v[j] = 10.0 * (j + 1);
    s->in.q = (smattn_tensor){s->q, SMATTN_F64, {0}};
    s->in.k = (smattn_tensor){s->k, SMATTN_F64, {0}};
    s->in.v = (smattn_tensor){s->v, SMATTN_F64, {0}};
    smattn_contiguous_strides(&s->p, 'q', s->in.q.stride);
    smattn_contiguous_strides(&s->p, 'k', s->in.k.stride);
    smattn_contiguous_strides(&s->p, 'v', s->in.v.stride);
    s->bnd.o = (smattn_out_tensor){s->bo, SMATTN_F64, {0}};
    s->bnd.lse = (smattn_out_tensor){s->bl, SMATTN_F64, {0}};
    s->bnd.p = (smattn_out_tensor){s->bp, SMATTN_F64, {0}};
    smattn_contiguous_strides(&s->p, 'o', s->bnd.o.stride);
    smattn_contiguous_strides(&s->p, 'l', s->bnd.lse.stride);
    smattn_contiguous_strides(&s->p, 'p', s->bnd.p.stride);
    s->fmt = s->bnd;
    s->fmt.o.dtype = s->fmt.lse.dtype = s->fmt.p.dtype = SMATTN_F32;
}

static void small_run(small *s, const smattn_precision *pm)
{
    smattn_status st = smattn_bound(&s->p, &s->in, pm, &s->fmt, &s->bnd);
    ck_assert_msg(st == SMATTN_OK, "smattn_bound: %s", smattn_status_name(st));
}

START_TEST(bound_structure)
{
    small s;
    small_init(&s);
    smattn_precision pm = smattn_precision_of(SMATTN_F32);
    ck_assert(pm.u_score == 0x1p-24 && pm.u_acc == 0x1p-24 && pm.exp_ulps == 4);
    ck_assert(pm.blocks == 1 && pm.acc_len == 0 && pm.u_p == 0 && pm.tiny == 0x1p-149);
    small_run(&s, &pm);
    /* Finite, positive, and at least the output rounding, at most a few hundred u|O|. */
    for (int c = 0; c < 2; c++) {
        ck_assert_msg(s.bo[c] > 0x1p-24 * 20 && s.bo[c] < 0x1p-24 * 80 * 200,
                      "O bound %a", s.bo[c]);
    }
    ck_assert(s.bl[0] > 0x1p-24 * 3 && s.bl[0] < 1e-4);
    for (int j = 0; j < 4; j++)
        ck_assert(s.bp[j] > 0 && s.bp[j] < 1e-4);
    /* Monotone in the parameters (SPEC 6.1). */
    double b0 = s.bo[0], l0 = s.bl[0];
    smattn_precision pm2 = pm;
    pm2.blocks = 4;
    pm2.u_p = 0x1p-8;
    small_run(&s, &pm2);
    ck_assert(s.bo[0] > b0 && s.bl[0] >= l0);
    /* An invisible key's P is an exact +0: bound 0. A NaN there changes nothing (3.6). */
    s.mask[0] = s.mask[1] = s.mask[2] = 1;
    s.mask[3] = 0;
    s.k[3] = NAN;
    s.v[6] = INFINITY;
    s.in.mask = (smattn_tensor){s.mask, SMATTN_BOOL, {4, 4, 4, 1}};
    small_run(&s, &pm);
    ck_assert(s.bp[3] == 0 && isfinite(s.bo[0]) && isfinite(s.bo[1]) && isfinite(s.bl[0]));
    /* A non-finite visible V: that column's exact O is not finite, bound +inf; the other
     * column and LSE are unaffected. */
    s.v[5] = -INFINITY;
    small_run(&s, &pm);
    ck_assert(isinf(s.bo[1]) && isfinite(s.bo[0]) && isfinite(s.bl[0]));
    s.v[5] = 60;
    /* A NaN query: the row is NaN, bound +inf at visible positions, 0 elsewhere. */
    s.q[0] = NAN;
    small_run(&s, &pm);
    ck_assert(isinf(s.bo[0]) && isinf(s.bl[0]) && isinf(s.bp[0]) && s.bp[3] == 0);
    s.q[0] = 1;
    /* A fully masked row, zero convention: exact zeros, bound 0; the -inf LSE: +inf. */
    memset(s.mask, 0, sizeof s.mask);
    small_run(&s, &pm);
    ck_assert(s.bo[0] == 0 && s.bo[1] == 0 && isinf(s.bl[0]) && s.bp[0] == 0);
    s.p.empty_lse = SMATTN_LSE_ZERO;
    s.p.empty_rows = SMATTN_EMPTY_MEAN;
    s.v[6] = 70; /* the mean convention reads every key below T_b */
    small_run(&s, &pm);
    ck_assert(s.bl[0] == 0 && s.bo[0] > 0 && s.bo[0] < 1e-3 && s.bp[0] > 0 && s.bp[0] < 1e-6);
    /* A score beyond the binary32 range makes the row out of contract: +inf. */
    memset(s.mask, 1, sizeof s.mask);
    s.p.empty_rows = SMATTN_EMPTY_ZERO;
    s.k[3] = 3;
    s.q[0] = 1e39;
    small_run(&s, &pm);
    ck_assert(isinf(s.bo[0]) && isinf(s.bl[0]));
    /* But a finite -3.4e38 bias on one key is in contract (its weight underflows). */
    s.q[0] = 1;
    s.bias[0] = -3.4e38;
    s.in.bias = (smattn_tensor){s.bias, SMATTN_F64, {4, 4, 4, 1}};
    small_run(&s, &pm);
    ck_assert(isfinite(s.bo[0]) && isfinite(s.bl[0]) && isfinite(s.bp[0]) && s.bp[0] < 1e-30);
}
END_TEST

START_TEST(bound_rejects)
{
    small s;
    small_init(&s);
    smattn_precision pm = smattn_precision_of(SMATTN_F32);
    ck_assert_int_eq(smattn_bound(&s.p, &s.in, NULL, &s.fmt, &s.bnd), SMATTN_ERR_NULL);
    pm.blocks = 0;
    ck_assert_int_eq(smattn_bound(&s.p, &s.in, &pm, &s.fmt, &s.bnd), SMATTN_ERR_OPTION);
    pm = smattn_precision_of(SMATTN_F32);
    pm.u_acc = NAN;
    ck_assert_int_eq(smattn_bound(&s.p, &s.in, &pm, &s.fmt, &s.bnd), SMATTN_ERR_OPTION);
    pm = smattn_precision_of(SMATTN_F32);
    s.bnd.o.dtype = SMATTN_F32;
    ck_assert_int_eq(smattn_bound(&s.p, &s.in, &pm, &s.fmt, &s.bnd), SMATTN_ERR_DTYPE);
    s.bnd.o.dtype = SMATTN_F64;
    s.fmt.p.dtype = SMATTN_BOOL;
    ck_assert_int_eq(smattn_bound(&s.p, &s.in, &pm, &s.fmt, &s.bnd), SMATTN_ERR_DTYPE);
}
END_TEST

/* ---- metrics (SPEC 6.10) ------------------------------------------------------------------- */

START_TEST(ulp_error_classes)
{
    ck_assert(smattn_ulp_error(NAN, NAN, SMATTN_F32) == 0);
    ck_assert(smattn_ulp_error(-NAN, NAN, SMATTN_F16) == 0);
    ck_assert(isinf(smattn_ulp_error(1.0, NAN, SMATTN_F32)));
    ck_assert(isinf(smattn_ulp_error(NAN, 1.0, SMATTN_F32)));
    ck_assert(smattn_ulp_error(INFINITY, INFINITY, SMATTN_F32) == 0);
    ck_assert(isinf(smattn_ulp_error(-INFINITY, INFINITY, SMATTN_F32)));
    ck_assert(isinf(smattn_ulp_error(FLT_MAX, INFINITY, SMATTN_F32)));
    ck_assert(isinf(smattn_ulp_error(INFINITY, FLT_MAX, SMATTN_F32)));
    ck_assert(smattn_ulp_error(-0.0, 0.0, SMATTN_F32) == 0);
}
END_TEST

START_TEST(ulp_error_spacing)
{
    /* Normal range: ulp(1) = 2^-23 in binary32, but just below 1 it is 2^-24. */
    ck_assert(smattn_ulp_error(1 + 0x1p-23, 1.0, SMATTN_F32) == 1.0);
    ck_assert(smattn_ulp_error(1.0, 1 - 0x1p-24, SMATTN_F32) == 1.0);
    ck_assert(smattn_ulp_error(1.0, 1 + 0x1p-30, SMATTN_F32) == 0x1p-7);
    ck_assert(smattn_ulp_error(-3.0, -3.0 - 0x1p-22, SMATTN_F32) == 1.0);
    ck_assert(smattn_ulp_error(1 + 0x1p-52, 1.0, SMATTN_F64) == 1.0);
    ck_assert(smattn_ulp_error(1 + 0x1p-7, 1.0, SMATTN_BF16) == 1.0);
    ck_assert(smattn_ulp_error(65504.0 + 32, 65504.0, SMATTN_F16) == 1.0);
    /* Subnormal range: the spacing is fixed at 2^-149 (f32), 2^-24 (f16), 2^-1074 (f64). */
    ck_assert(smattn_ulp_error(0x1p-140 + 0x1p-149, 0x1p-140, SMATTN_F32) == 1.0);
    ck_assert(smattn_ulp_error(0x1p-126 + 0x1p-149, 0x1p-126, SMATTN_F32) == 1.0);
    ck_assert(smattn_ulp_error(3 * 0x1p-24, 0x1p-24, SMATTN_F16) == 2.0);
    ck_assert(smattn_ulp_error(0x1p-1074, 0.0, SMATTN_F64) == 1.0);
    /* Zero: ulp(0) is the subnormal spacing. */
    ck_assert(smattn_ulp_error(0x1p-149, 0.0, SMATTN_F32) == 1.0);
    ck_assert(smattn_ulp_error(-0x1p-148, 0.0, SMATTN_F32) == 2.0);
    ck_assert(smattn_ulp_error(0x1p-133, 0.0, SMATTN_BF16) == 1.0);
    /* The exact value may lie between floats: its own binade gives the spacing. */
    double r = smattn_ulp_error(0x1.000002p+0, 0x1.0000018p+0, SMATTN_F32);
    ck_assert_msg(fabs(r - 0.25) < 1e-12, "%a", r);
}
END_TEST

START_TEST(error_ratio_classes)
{
    ck_assert(smattn_error_ratio(1.0, 1.0, 0.0) == 0);
    ck_assert(smattn_error_ratio(-0.0, 0.0, 0.0) == 0);
    ck_assert(smattn_error_ratio(NAN, NAN, 1.0) == 0);
    ck_assert(isinf(smattn_error_ratio(NAN, 1.0, INFINITY)));
    ck_assert(isinf(smattn_error_ratio(1.0, NAN, INFINITY)));
    ck_assert(isinf(smattn_error_ratio(1.0, 1.5, 0.0)));
    ck_assert(smattn_error_ratio(1.0, 1.5, 1.0) == 0.5);
    ck_assert(smattn_error_ratio(1.0, 1.5, 0.25) == 2.0);
    ck_assert(smattn_error_ratio(INFINITY, INFINITY, 0.0) == 0);
    ck_assert(isinf(smattn_error_ratio(-INFINITY, INFINITY, INFINITY)));
    ck_assert(isinf(smattn_error_ratio(1.0, INFINITY, INFINITY)));
    /* An exact finite value and an infinite result: allowed only when the bound is +inf
     * (overflow of the output format, or out of contract: SPEC 6.8). */
    ck_assert(isinf(smattn_error_ratio(INFINITY, 70000.0, 100.0)));
    ck_assert(smattn_error_ratio(INFINITY, 70000.0, INFINITY) == 0);
    ck_assert(smattn_error_ratio(3.0, 70000.0, INFINITY) == 0);
    /* Subnormal differences are not lost. */
    ck_assert(smattn_error_ratio(0x1p-1074, 0.0, 0x1p-1074) == 1.0);
    ck_assert(smattn_error_ratio(0x1p-1073, 0x1p-1074, 0x1p-1073) == 0.5);
}
END_TEST

/* ---- SPEC 6.11: the quantised kernels' departures (smattn_bound_quant) ----------------------
 * A problem of one batch, Hq = 2 on one KV head, S = 2, T = 300, D = 64, Dv = 32, f32 inputs
 * from the seed; q_zero: Q = 0 and a bias that makes one key dominate (scores 0 and -8). */
typedef struct qcase {
    smattn_problem p;
    smattn_inputs in;
    float q[2 * 2 * 64], k[300 * 64], v[300 * 32], bias[300];
    smattn_descale ds;
} qcase;

static void qcase_make(qcase *c, uint64_t seed, int q_zero)
{
    memset(c, 0, sizeof *c);
    rng r = {seed * 0x9E3779B97F4A7C15u + 7};
    c->p = smattn_problem_default();
    c->p.B = 1, c->p.S = 2, c->p.T = 300, c->p.Hq = 2, c->p.Hkv = 1, c->p.D = 64, c->p.Dv = 32;
    c->p.scale = smattn_default_scale(64);
    for (size_t i = 0; i < sizeof c->q / sizeof c->q[0]; i++)
        c->q[i] = q_zero ? 0.0f : (float)(4 * rng_unif(&r) - 2);
    for (size_t i = 0; i < sizeof c->k / sizeof c->k[0]; i++)
        c->k[i] = (float)(4 * rng_unif(&r) - 2);
    for (size_t i = 0; i < sizeof c->v / sizeof c->v[0]; i++)
        c->v[i] = q_zero ? (i < 32 ? 0.0f : 1.0f) : (float)(2 * rng_unif(&r) - 1);
    for (int j = 0; j < 300; j++)
        c->bias[j] = j == 0 ? 0.0f : -8.0f;
    c->in.q = (smattn_tensor){c->q, SMATTN_F32, {0}};
    c->in.k = (smattn_tensor){c->k, SMATTN_F32, {0}};
    c->in.v = (smattn_tensor){c->v, SMATTN_F32, {0}};
    smattn_contiguous_strides(&c->p, 'q', c->in.q.stride);
    smattn_contiguous_strides(&c->p, 'k', c->in.k.stride);
    smattn_contiguous_strides(&c->p, 'v', c->in.v.stride);
    if (q_zero) /* one bias row for every (b, h, i): strides 0 */
        c->in.bias = (smattn_tensor){c->bias, SMATTN_F32, {0, 0, 0, 1}};
}

/* max over O's elements of |got - exact| / bound (got f32 or f16 at o, exact f64) */
static double qcase_ratio(const qcase *c, const outbuf *got, const outbuf *ex, const outbuf *bd)
{
    double worst = 0;
    for (size_t k = 0; k < ex->no; k++) {
        double r = smattn_error_ratio(outbuf_get(got, 'o', (int64_t)k), outbuf_get(ex, 'o', (int64_t)k),
                                      outbuf_get(bd, 'o', (int64_t)k));
        worst = r > worst ? r : worst;
    }
    (void)c;
    return worst;
}

/* Kernels with each departure of SPEC 6.11, simulated exactly except for it (the oracle on
 * the departed problem, or binary64 arithmetic): each is within smattn_bound_quant with its
 * term, and Q4's and Q3's exceed smattn_bound without it (Q4: Q rounded to q8_0 as ggml
 * does; Q3: P rounded to e4m3 before P.V, long rows of weights below its subnormals; Q2: O
 * rounded to f16, times f_v, rounded again). With no departure the two functions agree bit for bit. */
START_TEST(bound_quant_terms)
{
    qcase c;
    qcase_make(&c, 1, 0);
    outbuf ex, b0, b1, got;
    outbuf_make(&ex, &c.p, SMATTN_F64);
    ck_assert_int_eq(smattn_ref(&c.p, &c.in, &ex.out, NULL, NULL), SMATTN_OK);
    const smattn_precision pm = smattn_precision_of(SMATTN_F32);
    outbuf fmt;
    outbuf_make(&fmt, &c.p, SMATTN_F32);
    /* no departure: smattn_bound's bits */
    smattn_quant_model none = smattn_quant_model_default();
    outbuf_make(&b0, &c.p, SMATTN_F64);
    outbuf_make(&b1, &c.p, SMATTN_F64);
    ck_assert_int_eq(smattn_bound(&c.p, &c.in, &pm, &fmt.out, &b0.out), SMATTN_OK);
    ck_assert_int_eq(smattn_bound_quant(&c.p, &c.in, &pm, &none, &fmt.out, &b1.out), SMATTN_OK);
    ck_assert(memcmp(b0.o, b1.o, b0.no * 8) == 0 && memcmp(b0.l, b1.l, b0.nl * 8) == 0 &&
              memcmp(b0.p, b1.p, b0.np * 8) == 0);
    ck_assert_int_eq(smattn_bound_quant(&c.p, &c.in, &pm, NULL, &fmt.out, &b1.out), SMATTN_OK);
    ck_assert(memcmp(b0.o, b1.o, b0.no * 8) == 0);
    none.q_block = 3; /* does not divide D */
    ck_assert_int_eq(smattn_bound_quant(&c.p, &c.in, &pm, &none, &fmt.out, &b1.out),
                     SMATTN_ERR_OPTION);

    /* Q4: Q quantised to q8_0 as ggml does (d = amax / 127 in binary32, stored as binary16;
     * q = round(x / d) in binary32), the rest exact, O rounded once to f32 */
    qcase cq = c;
    cq.in.q.data = cq.q;
    for (int row = 0; row < 4; row++)
        for (int b0k = 0; b0k < 64; b0k += 32) {
            float *x = cq.q + row * 64 + b0k, amax = 0;
            for (int j = 0; j < 32; j++)
                amax = fabsf(x[j]) > amax ? fabsf(x[j]) : amax;
            const float d = amax / 127.0f, id = d > 0 ? 1.0f / d : 0.0f;
            unsigned char h[2];
            smattn_store(h, SMATTN_F16, 0, (double)d);
            const float dh = (float)smattn_load(h, SMATTN_F16, 0);
            for (int j = 0; j < 32; j++)
                x[j] = dh * roundf(x[j] * id);
        }
    cq.in.k.data = cq.k, cq.in.v.data = cq.v;
    outbuf_make(&got, &cq.p, SMATTN_F32);
    ck_assert_int_eq(smattn_ref(&cq.p, &cq.in, &got.out, NULL, NULL), SMATTN_OK);
    const smattn_quant_model q8 = smattn_quant_model_of(SMATTN_Q8_0);
    ck_assert_int_eq(smattn_bound_quant(&c.p, &c.in, &pm, &q8, &fmt.out, &b1.out), SMATTN_OK);
    double rq = qcase_ratio(&c, &got, &ex, &b1), r0 = qcase_ratio(&c, &got, &ex, &b0);
    printf("bound Q4 (Q as q8_0): error/bound %.3g with the term, %.3g without\n", rq, r0);
    ck_assert_msg(rq <= 1 && r0 > 1, "Q4: %g with the term, %g without", rq, r0);
    outbuf_free(&got);

    /* Q3: P rounded to e4m3 before P.V, in binary64 otherwise: scores 0 and -8 (weights
     * e^-8 < 2^-10, below half e4m3's smallest subnormal 2^-9: lost), V 0 and 1 */
    qcase cp;
    qcase_make(&cp, 2, 1);
    outbuf ex3, bq3, bp3;
    outbuf_make(&ex3, &cp.p, SMATTN_F64);
    ck_assert_int_eq(smattn_ref(&cp.p, &cp.in, &ex3.out, NULL, NULL), SMATTN_OK);
    outbuf_make(&got, &cp.p, SMATTN_F32);
    for (int row = 0; row < 4; row++) { /* [S][Hq]: O row (i, h) */
        double N[32] = {0}, L = 0;
        for (int j = 0; j < 300; j++) {
            const double w = exp((double)cp.bias[j]);
            unsigned char e8;
            smattn_store(&e8, SMATTN_F8E4M3, 0, w);
            const double wp = smattn_load(&e8, SMATTN_F8E4M3, 0);
            L += w;
            for (int cc = 0; cc < 32; cc++)
                N[cc] += wp * (double)cp.v[j * 32 + cc];
        }
        for (int cc = 0; cc < 32; cc++)
            outbuf_put(&got, 'o', row * 32 + cc, (double)(float)(N[cc] / L));
    }
    smattn_precision pm3 = pm;
    pm3.u_p = 0x1p-4;
    smattn_quant_model m3 = smattn_quant_model_default();
    m3.omega_p = 0x1p-9;
    outbuf_make(&bq3, &cp.p, SMATTN_F64);
    outbuf_make(&bp3, &cp.p, SMATTN_F64);
    ck_assert_int_eq(smattn_bound_quant(&cp.p, &cp.in, &pm3, &m3, &fmt.out, &bq3.out), SMATTN_OK);
    ck_assert_int_eq(smattn_bound(&cp.p, &cp.in, &pm3, &fmt.out, &bp3.out), SMATTN_OK);
    rq = qcase_ratio(&cp, &got, &ex3, &bq3), r0 = qcase_ratio(&cp, &got, &ex3, &bp3);
    printf("bound Q3 (P as e4m3): error/bound %.3g with the term, %.3g without\n", rq, r0);
    ck_assert_msg(rq <= 1 && r0 > 1, "Q3: %g with the term, %g without", rq, r0);
    outbuf_free(&got), outbuf_free(&ex3), outbuf_free(&bq3), outbuf_free(&bp3);

    /* Q2: V's descale after the output's rounding: O of the problem with f_v = 1 rounded to
     * f16, times f_v in binary32, rounded to f16 again */
    qcase cv = c;
    cv.in.q.data = cv.q, cv.in.k.data = cv.k, cv.in.v.data = cv.v;
    cv.ds = smattn_descale_default();
    const float fvv = 0.3f;
    cv.ds.v = (double)fvv;
    cv.p.descale = &cv.ds;
    outbuf ex2, o1, b2, bp2, fmt16;
    outbuf_make(&ex2, &cv.p, SMATTN_F64);
    ck_assert_int_eq(smattn_ref(&cv.p, &cv.in, &ex2.out, NULL, NULL), SMATTN_OK);
    outbuf_make(&o1, &c.p, SMATTN_F16);
    ck_assert_int_eq(smattn_ref(&c.p, &c.in, &o1.out, NULL, NULL), SMATTN_OK);
    outbuf_make(&got, &cv.p, SMATTN_F16);
    for (size_t k = 0; k < o1.no; k++)
        outbuf_put(&got, 'o', (int64_t)k, (double)((float)outbuf_get(&o1, 'o', (int64_t)k) * fvv));
    smattn_quant_model m2 = smattn_quant_model_default();
    m2.v_descale_after = 1;
    outbuf_make(&fmt16, &cv.p, SMATTN_F16);
    outbuf_make(&b2, &cv.p, SMATTN_F64);
    outbuf_make(&bp2, &cv.p, SMATTN_F64);
    ck_assert_int_eq(smattn_bound_quant(&cv.p, &cv.in, &pm, &m2, &fmt16.out, &b2.out), SMATTN_OK);
    ck_assert_int_eq(smattn_bound(&cv.p, &cv.in, &pm, &fmt16.out, &bp2.out), SMATTN_OK);
    rq = qcase_ratio(&cv, &got, &ex2, &b2), r0 = qcase_ratio(&cv, &got, &ex2, &bp2);
    printf("bound Q2 (V descale after f16 O): error/bound %.3g with the term, %.3g without\n", rq, r0);
    /* (the plain f16 bound happens to cover these 128 elements too, at 0.98: the two
     * roundings rarely both approach half an ulp; the check is that Q2's bound holds) */
    ck_assert_msg(rq <= 1, "Q2: %g with the term, %g without", rq, r0);
    outbuf_free(&got), outbuf_free(&ex2), outbuf_free(&o1), outbuf_free(&b2), outbuf_free(&bp2);
    outbuf_free(&fmt16);
    outbuf_free(&ex), outbuf_free(&b0), outbuf_free(&b1), outbuf_free(&fmt);
}
END_TEST

Suite *bound_suite(void);
Suite *bound_suite(void)
{
    Suite *s = suite_create("bound");
    TCase *tc = tcase_create("metrics");
    tcase_add_test(tc, ulp_error_classes);
    tcase_add_test(tc, ulp_error_spacing);
    tcase_add_test(tc, error_ratio_classes);
    suite_add_tcase(s, tc);
    tc = tcase_create("bound");
    tcase_add_test(tc, bound_structure);
    tcase_add_test(tc, bound_rejects);
    tcase_add_test(tc, bound_quant_terms);
    suite_add_tcase(s, tc);
    tc = tcase_create("kernel");
    tcase_set_timeout(tc, 600);
    tcase_add_loop_test(tc, kernel_vs_bound, 0, N_FAMILIES);
    suite_add_tcase(s, tc);
    return s;
}
