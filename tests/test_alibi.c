/* SPDX-License-Identifier: MIT */
/* test_alibi.c: ALiBi without a dense bias (SPEC 2.8). Each mode is its dense-bias twin:
 * the oracle gives the bits of the problem whose bias holds the exact ALiBi term, the
 * kernel (every ISA the CPU has) the bits of the problem whose binary32 bias holds the
 * term it computes; the kernel meets the bound with a dense bias and softcap too; under a
 * lower-right causal mask the symmetric and one-sided modes give the same O and P and
 * different LSE; bad slopes, modes and extents are refused with their status. */
#include <check.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "smattn.h"
#include "tests/support/cli_run.h"
#include "tests/support/fs.h"
#include "tests/support/testkit.h"

static const char *const isas[] = {"scalar", "avx2", "avx512"};

/* A random attention problem with ALiBi and everything its twin needs. */
typedef struct acase {
    uint64_t seed;
    smattn_problem p;
    smattn_inputs in;
    float *slopes;
    int64_t *kvl, *qll;
    void *q, *k, *v, *bias, *sinks;
    int64_t nb;          /* bias elements, [B,Hq,S,T] contiguous */
    int bias_kind;       /* 0 none, 1 values in {0, -inf}, 2 any finite or -inf */
} acase;

static void make_case(acase *c, uint64_t seed, smattn_alibi_mode mode, int allow_dense_values)
{
    memset(c, 0, sizeof *c);
    c->seed = seed;
    rng r = {seed};
    const smattn_dtype dts[3] = {SMATTN_F32, SMATTN_F16, SMATTN_BF16};
    smattn_problem p = smattn_problem_default();
    p.B = rng_int(&r, 1, 3);
    p.Hkv = rng_int(&r, 1, 2);
    p.Hq = p.Hkv * rng_int(&r, 1, 3);
    static const int64_t dims[] = {1, 4, 8, 13, 16, 32};
    p.D = dims[rng_pick(&r, 6)];
    p.Dv = rng_chance(&r, 0.5) ? p.D : dims[rng_pick(&r, 6)];
    p.S = rng_int(&r, 1, 9);
    p.T = rng_chance(&r, 0.3) ? rng_int(&r, 100, 300) : rng_int(&r, 1, 40);
    p.causal = (smattn_causal)rng_pick(&r, 3);
    p.window_left = rng_chance(&r, 0.2) ? rng_int(&r, 0, p.T) : -1;
    p.window_right = rng_chance(&r, 0.2) ? rng_int(&r, 0, p.T) : -1;
    p.scale = smattn_default_scale(p.D);
    p.alibi_mode = mode;
    p.alibi_slopes_per_batch = rng_chance(&r, 0.4);
    const int64_t B = p.B, S = p.S, T = p.T, Hq = p.Hq, Hkv = p.Hkv, D = p.D, Dv = p.Dv;
    int64_t ns = (p.alibi_slopes_per_batch ? B : 1) * Hq;
    c->slopes = malloc((size_t)ns * sizeof *c->slopes);
    for (int64_t k = 0; k < ns; k++) {
        int64_t h = k % Hq;
        switch (rng_pick(&r, 4)) {
        case 0: /* FlashAttention's and FlashInfer's 2^(-8(h+1)/n) */
            c->slopes[k] = (float)exp2(-8.0 * (double)(h + 1) / (double)Hq);
            break;
        case 1: /* vLLM's tests: randn */
            c->slopes[k] = (float)rng_gauss(&r);
            break;
        case 2: /* a slope whose products round in binary32 */
            c->slopes[k] = 1.0f + 0x1p-23f * (float)rng_int(&r, 1, 1000);
            break;
        default:
            c->slopes[k] = 0.0f;
        }
    }
    p.alibi_slopes = c->slopes;
    if (rng_chance(&r, 0.4)) {
        c->kvl = malloc((size_t)B * 8);
        for (int64_t b = 0; b < B; b++)
            c->kvl[b] = rng_chance(&r, 0.2) ? 0 : rng_int(&r, 0, T);
        p.kv_lens = c->kvl;
    }
    if (rng_chance(&r, 0.3)) {
        c->qll = malloc((size_t)B * 8);
        for (int64_t b = 0; b < B; b++)
            c->qll[b] = rng_int(&r, 0, S);
        p.q_lens = c->qll;
    }
    smattn_dtype it = dts[rng_pick(&r, 3)];
    c->q = malloc((size_t)(B * S * Hq * D) * 4);
    c->k = malloc((size_t)(B * T * Hkv * D) * 4);
    c->v = malloc((size_t)(B * T * Hkv * Dv) * 4);
    for (int64_t k = 0; k < B * S * Hq * D; k++)
        smattn_store(c->q, it, k, rng_gauss(&r));
    for (int64_t k = 0; k < B * T * Hkv * D; k++)
        smattn_store(c->k, it, k, rng_gauss(&r));
    for (int64_t k = 0; k < B * T * Hkv * Dv; k++)
        smattn_store(c->v, it, k, rng_gauss(&r));
    smattn_inputs in;
    memset(&in, 0, sizeof in);
    in.q.data = c->q, in.k.data = c->k, in.v.data = c->v;
    in.q.dtype = in.k.dtype = in.v.dtype = it;
    smattn_contiguous_strides(&p, 'q', in.q.stride);
    smattn_contiguous_strides(&p, 'k', in.k.stride);
    smattn_contiguous_strides(&p, 'v', in.v.stride);
    c->nb = B * Hq * S * T;
    c->bias_kind = mode == SMATTN_ALIBI_MASK ? 2 : (int)rng_pick(&r, allow_dense_values ? 3 : 2);
    if (c->bias_kind) {
        /* the mask mode's bias is llama.cpp's f16 mask (-|distance| or -inf), sometimes any
         * f16/f32 value; the others' a dense bias added before the ALiBi term */
        smattn_dtype bt = mode == SMATTN_ALIBI_MASK && rng_chance(&r, 0.7) ? SMATTN_F16
                                                                         : dts[rng_pick(&r, 3)];
        c->bias = malloc((size_t)c->nb * 4);
        for (int64_t b = 0; b < B; b++)
            for (int64_t h = 0; h < Hq; h++)
                for (int64_t i = 0; i < S; i++)
                    for (int64_t j = 0; j < T; j++) {
                        int64_t off = ((b * Hq + h) * S + i) * T + j;
                        double x;
                        if (rng_chance(&r, 0.1))
                            x = -HUGE_VAL;
                        else if (c->bias_kind == 1)
                            x = 0.0;
                        else if (mode == SMATTN_ALIBI_MASK && rng_chance(&r, 0.8))
                            x = -fabs((double)(i + T - S - j));
                        else
                            x = rng_gauss(&r) * 3;
                        smattn_store(c->bias, bt, off, x);
                    }
        in.bias.data = c->bias;
        in.bias.dtype = bt;
        smattn_contiguous_strides(&p, 'b', in.bias.stride);
    }
    if (rng_chance(&r, 0.2)) {
        c->sinks = malloc((size_t)Hq * 4);
        for (int64_t h = 0; h < Hq; h++)
            smattn_store(c->sinks, SMATTN_F32, h, rng_gauss(&r));
        in.sinks.data = c->sinks;
        in.sinks.dtype = SMATTN_F32;
        in.sinks.stride[0] = 1;
    }
    c->p = p;
    c->in = in;
}

static void free_case(acase *c)
{
    free(c->slopes), free(c->kvl), free(c->qll);
    free(c->q), free(c->k), free(c->v), free(c->bias), free(c->sinks);
}

/* The dense twin's bias: [B,Hq,S,T] of dtype t holding, at every visible-or-not position,
 * bias' + term, where term(b,h,i,j) is what `term` returns (the bias value given). */
typedef double (*term_fn)(const smattn_problem *p, double bias, int64_t b, int64_t h,
                          int64_t i, int64_t j);

static void *twin_bias(const acase *c, smattn_dtype t, term_fn term)
{
    const smattn_problem *p = &c->p;
    void *tb = malloc((size_t)c->nb * 8);
    for (int64_t b = 0; b < p->B; b++)
        for (int64_t h = 0; h < p->Hq; h++)
            for (int64_t i = 0; i < p->S; i++)
                for (int64_t j = 0; j < p->T; j++) {
                    int64_t off = ((b * p->Hq + h) * p->S + i) * p->T + j;
                    double x = c->bias ? smattn_load(c->bias, c->in.bias.dtype, off) : 0.0;
                    smattn_store(tb, t, off, x == -HUGE_VAL ? x : term(p, x, b, h, i, j));
                }
    return tb;
}

static float slope_of(const smattn_problem *p, int64_t b, int64_t h)
{
    return p->alibi_slopes[(p->alibi_slopes_per_batch ? b * p->Hq : 0) + h];
}

static int64_t dist_of(const smattn_problem *p, int64_t b, int64_t i, int64_t j)
{
    int64_t Tb = p->kv_lens ? p->kv_lens[b] : p->T, Sb = p->q_lens ? p->q_lens[b] : p->S;
    if (p->alibi_mode == SMATTN_ALIBI_SYMMETRIC)
        return -llabs(i + Tb - Sb - j);
    return j - Tb + 1;
}

/* SPEC 2.8 exactly (the twin of the oracle): bias (0 or -inf here) + m d, or m x bias. */
static double exact_term(const smattn_problem *p, double bias, int64_t b, int64_t h, int64_t i,
                         int64_t j)
{
    double m = (double)slope_of(p, b, h);
    if (p->alibi_mode == SMATTN_ALIBI_MASK)
        return m * bias;
    return bias + m * (double)dist_of(p, b, i, j);
}

/* The kernel's binary32 term (SPEC 6.2.3's model): fl(m fl(d)), or fl(m x bias). */
static double kernel_term(const smattn_problem *p, double bias, int64_t b, int64_t h, int64_t i,
                          int64_t j)
{
    float m = slope_of(p, b, h);
    if (p->alibi_mode == SMATTN_ALIBI_MASK)
        return (double)(m * (float)bias);
    return (double)(m * (float)dist_of(p, b, i, j));
}

static void expect_same_bits(const outbuf *a, const outbuf *b, const char *what, uint64_t seed)
{
    size_t es = smattn_dtype_size(a->t);
    ck_assert_msg(memcmp(a->o, b->o, a->no * es) == 0, "%s: O differs (seed %llu)", what,
                  (unsigned long long)seed);
    ck_assert_msg(memcmp(a->l, b->l, a->nl * es) == 0, "%s: LSE differs (seed %llu)", what,
                  (unsigned long long)seed);
    ck_assert_msg(memcmp(a->p, b->p, a->np * es) == 0, "%s: P differs (seed %llu)", what,
                  (unsigned long long)seed);
}

static const smattn_alibi_mode modes[3] = {SMATTN_ALIBI_SYMMETRIC, SMATTN_ALIBI_ONE_SIDED,
                                           SMATTN_ALIBI_MASK};

START_TEST(oracle_is_its_dense_twin)
{
    for (int n = 0; n < test_scaled(30); n++) {
        acase c;
        uint64_t seed = 0xa11b1000u + (uint64_t)n;
        make_case(&c, seed, modes[n % 3], 0);
        outbuf x, y;
        outbuf_make(&x, &c.p, SMATTN_F32);
        outbuf_make(&y, &c.p, SMATTN_F32);
        smattn_status st = smattn_ref(&c.p, &c.in, &x.out, NULL, NULL);
        ck_assert_msg(st == SMATTN_OK, "ref: %s (seed %llu)", smattn_status_name(st),
                      (unsigned long long)seed);
        smattn_problem tp = c.p;
        tp.alibi_mode = SMATTN_ALIBI_NONE;
        smattn_inputs ti = c.in;
        void *tb = twin_bias(&c, SMATTN_F64, exact_term);
        ti.bias.data = tb;
        ti.bias.dtype = SMATTN_F64;
        smattn_contiguous_strides(&tp, 'b', ti.bias.stride);
        st = smattn_ref(&tp, &ti, &y.out, NULL, NULL);
        ck_assert_int_eq(st, SMATTN_OK);
        expect_same_bits(&x, &y, "oracle vs its twin", seed);
        free(tb);
        outbuf_free(&x), outbuf_free(&y);
        free_case(&c);
    }
}
END_TEST

START_TEST(kernel_is_its_float_twin_on_every_isa)
{
    for (int a = 0; a < 3; a++) {
        if (!smattn_opt_isa_available(isas[a]))
            continue;
        for (int n = 0; n < test_scaled(30); n++) {
            acase c;
            uint64_t seed = 0xa11b2000u + (uint64_t)n;
            make_case(&c, seed, modes[n % 3], 0);
            smattn_opt_config cfg = {1 + n % 2, isas[a]};
            outbuf x, y;
            outbuf_make(&x, &c.p, SMATTN_F32);
            outbuf_make(&y, &c.p, SMATTN_F32);
            smattn_status st = smattn_attention(&c.p, &c.in, &x.out, &cfg);
            ck_assert_msg(st == SMATTN_OK, "opt: %s (seed %llu)", smattn_status_name(st),
                          (unsigned long long)seed);
            smattn_problem tp = c.p;
            tp.alibi_mode = SMATTN_ALIBI_NONE;
            smattn_inputs ti = c.in;
            void *tb = twin_bias(&c, SMATTN_F32, kernel_term);
            ti.bias.data = tb;
            ti.bias.dtype = SMATTN_F32;
            smattn_contiguous_strides(&tp, 'b', ti.bias.stride);
            st = smattn_attention(&tp, &ti, &y.out, &cfg);
            ck_assert_int_eq(st, SMATTN_OK);
            char what[64];
            snprintf(what, sizeof what, "kernel (%s) vs its twin", isas[a]);
            expect_same_bits(&x, &y, what, seed);
            free(tb);
            outbuf_free(&x), outbuf_free(&y);
            free_case(&c);
        }
    }
}
END_TEST

/* The kernel against the oracle, with a dense bias before the ALiBi term and softcap. */
START_TEST(kernel_meets_the_bound)
{
    for (int a = 0; a < 3; a++) {
        if (!smattn_opt_isa_available(isas[a]))
            continue;
        for (int n = 0; n < test_scaled(30); n++) {
            acase c;
            uint64_t seed = 0xa11b3000u + (uint64_t)n;
            make_case(&c, seed, modes[n % 3], 1);
            if (n % 4 == 1)
                c.p.softcap = 3.0 + n % 5;
            smattn_opt_config cfg = {1 + n % 2, isas[a]};
            outbuf x, e, bd;
            outbuf_make(&x, &c.p, SMATTN_F32);
            outbuf_make(&e, &c.p, SMATTN_F64);
            outbuf_make(&bd, &c.p, SMATTN_F64);
            ck_assert_int_eq(smattn_attention(&c.p, &c.in, &x.out, &cfg), SMATTN_OK);
            ck_assert_int_eq(smattn_ref(&c.p, &c.in, &e.out, NULL, NULL), SMATTN_OK);
            smattn_precision pm = smattn_opt_precision(&c.p);
            ck_assert_int_eq(smattn_bound(&c.p, &c.in, &pm, &x.out, &bd.out), SMATTN_OK);
            const char w[3] = {'o', 'l', 'p'};
            const size_t nn[3] = {x.no, x.nl, x.np};
            for (int k = 0; k < 3; k++)
                for (size_t m = 0; m < nn[k]; m++) {
                    double r = smattn_error_ratio(outbuf_get(&x, w[k], (int64_t)m),
                                                  outbuf_get(&e, w[k], (int64_t)m),
                                                  outbuf_get(&bd, w[k], (int64_t)m));
                    ck_assert_msg(r <= 1, "%s %c[%zu]: %a vs %a, bound %a (seed %llu)",
                                  isas[a], w[k], m, outbuf_get(&x, w[k], (int64_t)m),
                                  outbuf_get(&e, w[k], (int64_t)m),
                                  outbuf_get(&bd, w[k], (int64_t)m), (unsigned long long)seed);
                }
            outbuf_free(&x), outbuf_free(&e), outbuf_free(&bd);
            free_case(&c);
        }
    }
}
END_TEST

/* SPEC 2.8: under a lower-right causal mask the symmetric and one-sided terms differ by
 * m (S_b - 1 - i) per row: O and P agree bit for bit, the LSE of every row above the last
 * differs by that much. */
START_TEST(causal_modes_agree_on_o_and_p_not_lse)
{
    smattn_problem p = smattn_problem_default();
    p.B = 1, p.S = 4, p.T = 9, p.Hq = 2, p.Hkv = 1, p.D = 3, p.Dv = 2;
    p.scale = smattn_default_scale(p.D);
    p.causal = SMATTN_CAUSAL_LOWER_RIGHT;
    float slopes[2] = {0.25f, 0.0625f};
    p.alibi_slopes = slopes;
    float q[24], k[27], v[18];
    rng r = {77};
    for (int n = 0; n < 24; n++)
        q[n] = (float)rng_gauss(&r);
    for (int n = 0; n < 27; n++)
        k[n] = (float)rng_gauss(&r);
    for (int n = 0; n < 18; n++)
        v[n] = (float)rng_gauss(&r);
    smattn_inputs in;
    memset(&in, 0, sizeof in);
    in.q.data = q, in.k.data = k, in.v.data = v;
    in.q.dtype = in.k.dtype = in.v.dtype = SMATTN_F32;
    smattn_contiguous_strides(&p, 'q', in.q.stride);
    smattn_contiguous_strides(&p, 'k', in.k.stride);
    smattn_contiguous_strides(&p, 'v', in.v.stride);
    outbuf x[2][2]; /* [oracle, kernel][symmetric, one-sided] */
    for (int m = 0; m < 2; m++) {
        p.alibi_mode = m ? SMATTN_ALIBI_ONE_SIDED : SMATTN_ALIBI_SYMMETRIC;
        outbuf_make(&x[0][m], &p, SMATTN_F64);
        outbuf_make(&x[1][m], &p, SMATTN_F32);
        ck_assert_int_eq(smattn_ref(&p, &in, &x[0][m].out, NULL, NULL), SMATTN_OK);
        ck_assert_int_eq(smattn_attention(&p, &in, &x[1][m].out, NULL), SMATTN_OK);
    }
    ck_assert(memcmp(x[0][0].o, x[0][1].o, x[0][0].no * 8) == 0);
    ck_assert(memcmp(x[0][0].p, x[0][1].p, x[0][0].np * 8) == 0);
    for (int64_t h = 0; h < 2; h++)
        for (int64_t i = 0; i < 4; i++) {
            double d = outbuf_get(&x[0][0], 'l', h * 4 + i) - outbuf_get(&x[0][1], 'l', h * 4 + i);
            double want = (double)slopes[h] * (double)(3 - i); /* m (S_b - 1 - i) */
            ck_assert_msg(fabs(d - want) <= 1e-12, "h %lld i %lld: LSE difference %a, not %a",
                          (long long)h, (long long)i, d, want);
            double dk = outbuf_get(&x[1][0], 'l', h * 4 + i) - outbuf_get(&x[1][1], 'l', h * 4 + i);
            ck_assert_msg(fabs(dk - want) <= 1e-5, "kernel: LSE difference %a, not %a", dk, want);
        }
    for (int a = 0; a < 2; a++)
        for (int m = 0; m < 2; m++)
            outbuf_free(&x[a][m]);
}
END_TEST

/* Distances of 2^24 and more: the kernel rounds the distance to binary32 (SPEC 6.2.3),
 * on its scalar path; one visible key per row, so LSE is the score itself. */
START_TEST(far_distances_round_as_the_model_says)
{
    smattn_problem p = smattn_problem_default();
    const int64_t T = (INT64_C(1) << 24) + 101;
    p.B = 1, p.S = 2, p.T = T, p.Hq = 1, p.Hkv = 1, p.D = 1, p.Dv = 1;
    p.causal = SMATTN_CAUSAL_UPPER_LEFT; /* row i sees keys 0..i, i + T - 2 - j away */
    p.window_left = 0; /* the diagonal key only */
    float slope = 1.0f + 0x1p-20f;
    p.alibi_slopes = &slope;
    float q[2] = {0, 0}, k[1] = {1}, v[1] = {2};
    smattn_inputs in;
    memset(&in, 0, sizeof in);
    in.q.data = q, in.k.data = k, in.v.data = v;
    in.q.dtype = in.k.dtype = in.v.dtype = SMATTN_F32;
    smattn_contiguous_strides(&p, 'q', in.q.stride);
    in.k.stride[1] = in.v.stride[1] = 0; /* every key the same */
    for (int m = 0; m < 2; m++) {
        p.alibi_mode = m ? SMATTN_ALIBI_ONE_SIDED : SMATTN_ALIBI_SYMMETRIC;
        for (int a = 0; a < 3; a++) {
            if (!smattn_opt_isa_available(isas[a]))
                continue;
            smattn_opt_config cfg = {1, isas[a]};
            float o[2], l[2];
            smattn_outputs out;
            memset(&out, 0, sizeof out);
            out.o.data = o, out.lse.data = l;
            out.o.dtype = out.lse.dtype = SMATTN_F32;
            smattn_contiguous_strides(&p, 'o', out.o.stride);
            smattn_contiguous_strides(&p, 'l', out.lse.stride);
            ck_assert_int_eq(smattn_attention(&p, &in, &out, &cfg), SMATTN_OK);
            for (int64_t i = 0; i < 2; i++) {
                int64_t d = m ? i - T + 1 : -(T - 2); /* key j = i */
                float want = slope * (float)d;
                ck_assert_msg(l[i] == want, "%s mode %d row %lld: LSE %a, not %a", isas[a], m,
                              (long long)i, (double)l[i], (double)want);
                ck_assert(o[i] == 2.0f);
            }
        }
    }
}
END_TEST

START_TEST(bad_alibi_is_refused)
{
    smattn_problem p = smattn_problem_default();
    p.B = 2, p.S = 2, p.T = 3, p.Hq = 2, p.Hkv = 1, p.D = 1, p.Dv = 1;
    float slopes[4] = {0.5f, 0.25f, 1.0f, 2.0f};
    float q[8] = {0}, k[6] = {0}, v[6] = {0}, o[8];
    uint16_t bias16[24] = {0};
    double bias64[24] = {0};
    smattn_inputs in;
    memset(&in, 0, sizeof in);
    in.q.data = q, in.k.data = k, in.v.data = v;
    in.q.dtype = in.k.dtype = in.v.dtype = SMATTN_F32;
    smattn_contiguous_strides(&p, 'q', in.q.stride);
    smattn_contiguous_strides(&p, 'k', in.k.stride);
    smattn_contiguous_strides(&p, 'v', in.v.stride);
    smattn_outputs out;
    memset(&out, 0, sizeof out);
    out.o.data = o;
    out.o.dtype = SMATTN_F32;
    smattn_contiguous_strides(&p, 'o', out.o.stride);
    char msg[200];
    p.alibi_mode = SMATTN_ALIBI_SYMMETRIC;
    ck_assert_int_eq(smattn_validate(&p, &in, &out), SMATTN_ERR_NULL);
    p.alibi_slopes = slopes;
    ck_assert_int_eq(smattn_validate(&p, &in, &out), SMATTN_OK);
    p.alibi_mode = (smattn_alibi_mode)4;
    ck_assert_int_eq(smattn_validate(&p, &in, &out), SMATTN_ERR_OPTION);
    p.alibi_mode = SMATTN_ALIBI_ONE_SIDED;
    p.alibi_slopes_per_batch = 1;
    slopes[3] = NAN;
    ck_assert_int_eq(smattn_validate_explain(&p, &in, &out, msg, sizeof msg), SMATTN_ERR_ALIBI);
    ck_assert_msg(strstr(msg, "alibi_slopes[3]"), "%s", msg);
    p.alibi_slopes_per_batch = 0; /* only [Hq] is read */
    ck_assert_int_eq(smattn_validate(&p, &in, &out), SMATTN_OK);
    slopes[1] = INFINITY;
    ck_assert_int_eq(smattn_validate(&p, &in, &out), SMATTN_ERR_ALIBI);
    slopes[1] = 0.25f;
    p.alibi_mode = SMATTN_ALIBI_MASK;
    ck_assert_int_eq(smattn_validate_explain(&p, &in, &out, msg, sizeof msg), SMATTN_ERR_ALIBI);
    ck_assert_msg(strstr(msg, "bias"), "%s", msg);
    in.bias.data = bias64, in.bias.dtype = SMATTN_F64;
    smattn_contiguous_strides(&p, 'b', in.bias.stride);
    ck_assert_int_eq(smattn_validate(&p, &in, &out), SMATTN_ERR_DTYPE);
    in.bias.data = bias16, in.bias.dtype = SMATTN_F16;
    ck_assert_int_eq(smattn_validate(&p, &in, &out), SMATTN_OK);
    p.T = (INT64_C(1) << 29) + 1;
    in.k.stride[1] = in.v.stride[1] = 0;
    memset(in.bias.stride, 0, sizeof in.bias.stride);
    ck_assert_int_eq(smattn_validate_explain(&p, &in, &out, msg, sizeof msg), SMATTN_ERR_ALIBI);
    ck_assert_msg(strstr(msg, "T = "), "%s", msg);
    p.T = 3;
    smattn_contiguous_strides(&p, 'k', in.k.stride);
    smattn_contiguous_strides(&p, 'v', in.v.stride);
    /* the slopes are an input: an output over them is an alias */
    out.o.data = slopes;
    ck_assert_int_eq(smattn_validate(&p, &in, &out), SMATTN_ERR_ALIAS);
    out.o.data = o;
    /* softmax: ALiBi applies to attention only */
    smattn_problem ps = p;
    ps.op = SMATTN_OP_SOFTMAX;
    smattn_inputs is;
    memset(&is, 0, sizeof is);
    float x[24] = {0}, pp[24];
    is.x.data = x;
    is.x.dtype = SMATTN_F32;
    smattn_contiguous_strides(&ps, 'x', is.x.stride);
    is.bias = in.bias;
    smattn_outputs os;
    memset(&os, 0, sizeof os);
    os.p.data = pp;
    os.p.dtype = SMATTN_F32;
    smattn_contiguous_strides(&ps, 'p', os.p.stride);
    ck_assert_int_eq(smattn_validate(&ps, &is, &os), SMATTN_ERR_OPTION);
    /* the backward takes ALiBi as the forward does (SPEC 10.1), and refuses a bad one alike */
    float dout[8] = {0}, dq[8], dk[6], dv[6];
    smattn_grad_inputs gi;
    smattn_grad_outputs go;
    memset(&gi, 0, sizeof gi);
    memset(&go, 0, sizeof go);
    gi.dout.data = dout;
    gi.dout.dtype = SMATTN_F32;
    smattn_contiguous_strides(&p, 'o', gi.dout.stride);
    go.dq.data = dq, go.dk.data = dk, go.dv.data = dv;
    go.dq.dtype = go.dk.dtype = go.dv.dtype = SMATTN_F32;
    smattn_contiguous_strides(&p, 'q', go.dq.stride);
    smattn_contiguous_strides(&p, 'k', go.dk.stride);
    smattn_contiguous_strides(&p, 'v', go.dv.stride);
    const smattn_alibi_mode mode = p.alibi_mode;
    const float *sl = p.alibi_slopes;
    p.alibi_mode = SMATTN_ALIBI_SYMMETRIC, p.alibi_slopes = slopes, p.alibi_slopes_per_batch = 0;
    slopes[0] = 0.5f, slopes[1] = 0.25f;
    ck_assert_int_eq(smattn_ref_backward(&p, &in, &gi, &go, NULL, NULL), SMATTN_OK);
    slopes[1] = NAN;
    ck_assert_int_eq(smattn_ref_backward(&p, &in, &gi, &go, NULL, NULL), SMATTN_ERR_ALIBI);
    slopes[1] = 0.25f;
    p.alibi_mode = mode, p.alibi_slopes = sl;
    ck_assert_str_eq(smattn_status_name(SMATTN_ERR_ALIBI), "SMATTN_ERR_ALIBI");
}
END_TEST

/* The CLI end to end: `gen` writes the alibi cases with their keys, `ref` computes one,
 * `check` accepts it, and names the mode the outputs follow when case.json is edited to
 * claim the other one (under a causal mask, through the LSE alone). */
START_TEST(gen_ref_check_round_trip)
{
    char dir[256];
    ck_assert_int_eq(test_mkdtemp(dir, sizeof dir, "alibi"), 0);
    char out[300], cs[400];
    snprintf(out, sizeof out, "%s/cases", dir);
    const char *gen[] = {"gen", "--suite", "quick", "--no-vectors", out, NULL};
    test_outcome o = test_cli_run(dir, gen);
    ck_assert_msg(o.code == 0, "gen: %s", o.err);
    test_outcome_free(&o);
    snprintf(cs, sizeof cs, "%s/alibi-one_sided_causal_prefill", out);
    char *js = test_slurp(test_path(cs, "case.json"));
    ck_assert_msg(strstr(js, "\"alibi_mode\": \"one_sided\"") &&
                      strstr(js, "\"alibi_slopes\": [0.25, 0.0625, 0.015625, 0.00390625]"),
                  "%s", js);
    const char *ref[] = {"ref", cs, cs, "--dtype", "f32", "--weights", NULL};
    o = test_cli_run(dir, ref);
    ck_assert_msg(o.code == 0, "ref: %s", o.err);
    test_outcome_free(&o);
    test_unmark_ref_set(cs);
    const char *check[] = {"check", cs, NULL};
    o = test_cli_run(dir, check);
    ck_assert_msg(o.code == 0, "check: %s%s", o.out, o.err);
    test_outcome_free(&o);
    char *p = strstr(js, "one_sided");
    memcpy(p, "symmetric", 9);
    FILE *f = fopen(test_path(cs, "case.json"), "w");
    ck_assert_ptr_nonnull(f);
    fputs(js, f);
    fclose(f);
    o = test_cli_run(dir, check);
    ck_assert_msg(o.code == 1 && strstr(o.out, "ALiBi: the outputs follow the one-sided mode"),
                  "check: exit %d: %s%s", o.code, o.out, o.err);
    test_outcome_free(&o);
    free(js);
    test_rm_tree(dir);
}
END_TEST

Suite *alibi_suite(void);
Suite *alibi_suite(void)
{
    Suite *s = suite_create("alibi");
    TCase *tc = tcase_create("alibi");
    tcase_set_timeout(tc, 600);
    tcase_add_test(tc, oracle_is_its_dense_twin);
    tcase_add_test(tc, kernel_is_its_float_twin_on_every_isa);
    tcase_add_test(tc, kernel_meets_the_bound);
    tcase_add_test(tc, causal_modes_agree_on_o_and_p_not_lse);
    tcase_add_test(tc, far_distances_round_as_the_model_says);
    tcase_add_test(tc, bad_alibi_is_refused);
    tcase_add_test(tc, gen_ref_check_round_trip);
    suite_add_tcase(s, tc);
    return s;
}
