/* SPDX-License-Identifier: MIT */
/* test_opt_backward.c: the fast backward (smattn_attention_backward) against the exact
 * oracle under the bound of SPEC 10.7 on random problems of every mask kind and on every
 * ISA the CPU has; bitwise identical across thread counts and ISAs; empty rows +0; what
 * it refuses. */
#include <check.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "conform/judge_backward.h"
#include "opt/backward_internal.h"
#include "smattn.h"
#include "tests/support/bwcase.h"
#include "tests/support/testkit.h"

static const char *const isas[] = {"scalar", "avx2", "avx512"};

static smattn_forward_saved saved_of(const bwcase *c)
{
    smattn_forward_saved s;
    memset(&s, 0, sizeof s);
    s.o = (smattn_tensor){c->o, c->odt, {0}};
    s.lse = (smattn_tensor){c->lse, SMATTN_F32, {0}};
    ck_assert_int_eq(smattn_contiguous_strides(&c->p, 'o', s.o.stride), SMATTN_OK);
    ck_assert_int_eq(smattn_contiguous_strides(&c->p, 'l', s.lse.stride), SMATTN_OK);
    return s;
}

static smattn_status run_bw(const bwcase *c, const char *isa, int threads, bwgrads *g)
{
    smattn_forward_saved s = saved_of(c);
    smattn_opt_config cfg = {threads, isa};
    return smattn_attention_backward(&c->p, &c->in, &s, &c->gin, &g->go, &cfg);
}

/* run_bw on the active ISA with no room to store dS: the kernel computes it again. */
static smattn_status run_bw_ds_again(const bwcase *c, int threads, bwgrads *g)
{
    const size_t was = smattn__bw_set_ds_budget(0);
    const smattn_status s = run_bw(c, NULL, threads, g);
    smattn__bw_set_ds_budget(was);
    return s;
}

/* Judge the kernel on one problem and ISA; returns the number of elements beyond the
 * bound (printing the worst of each gradient then). */
static int64_t judge_one(const bwcase *c, const char *isa, smattn_dtype gt, uint64_t seed,
                         double *worst)
{
    bwgrads g;
    bwgrads_make(&g, &c->p, gt);
    smattn_status s = run_bw(c, isa, 2, &g);
    ck_assert_msg(s == SMATTN_OK, "backward (%s): %s", isa, smattn_status_name(s));
    smattn_backward_precision m = smattn_opt_backward_precision(&c->p);
    m.o_dtype = c->odt;
    conform_backward_verdict v;
    smattn_ref_config rc = {2, 0, 0, 0};
    s = conform_judge_backward(&c->p, &c->in, &c->gin, &g.go, &m, &rc, &v);
    ck_assert_msg(s == SMATTN_OK, "judge: %s", smattn_status_name(s));
    for (int t = 0; t < 3; t++)
        if (v.max_ratio[t] > *worst)
            *worst = v.max_ratio[t];
    if (v.mismatched) {
        char nm[200];
        static const char *const names[3] = {"dQ", "dK", "dV"};
        for (int t = 0; t < 3; t++)
            fprintf(stderr,
                    "opt_backward %s seed %llu (%s, %s out): %s ratio %g at %lld: got %a exact "
                    "%a bound %a\n",
                    isa, (unsigned long long)seed, bwcase_name(c, nm, sizeof nm),
                    smattn_dtype_name(gt), names[t], v.max_ratio[t], (long long)v.worst[t],
                    v.worst_got[t], v.worst_exact[t], v.worst_bound[t]);
    }
    bwgrads_free(&g);
    return v.mismatched;
}

/* Judge one output t (3 dBias, 4 dSinks) of gradients go of the kernel on c (every output
 * must be within the bound); returns its largest error/bound. */
static double judged_ratio(const bwcase *c, const smattn_grad_outputs *go, int t, const char *what)
{
    static const char *const names[5] = {"dQ", "dK", "dV", "dBias", "dSinks"};
    smattn_backward_precision m = smattn_opt_backward_precision(&c->p);
    m.o_dtype = c->odt;
    conform_backward_verdict v;
    smattn_ref_config rc = {2, 0, 0, 0};
    ck_assert_int_eq(conform_judge_backward(&c->p, &c->in, &c->gin, go, &m, &rc, &v), SMATTN_OK);
    ck_assert_msg(v.mismatched == 0 && v.worst[t] >= 0,
                  "%s: %lld beyond the bound; %s ratio %g at %lld: got %a exact %a bound %a", what,
                  (long long)v.mismatched, names[t], v.max_ratio[t], (long long)v.worst[t],
                  v.worst_got[t], v.worst_exact[t], v.worst_bound[t]);
    return v.max_ratio[t];
}

/* Every mask kind alone, then random mixtures; every ISA; f32, bf16 and f16 gradients. */
START_TEST(within_bound)
{
    static const unsigned kinds[] = {
        0,         BW_CAUSAL_LR, BW_CAUSAL_UL, BW_WINDOW, BW_KVLENS, BW_QLENS, BW_MASK,
        BW_BIAS,   BW_SINKS,     BW_SOFTCAP,   BW_DLSE,   BW_GQA,    BW_MEAN | BW_EMPTY,
        BW_EMPTY,  BW_NANCONV | BW_EMPTY,      BW_BIG | BW_CAUSAL_LR | BW_GQA,
        BW_BIG | BW_MASK | BW_BIAS | BW_SOFTCAP | BW_SINKS | BW_DLSE,
        BW_BIG | BW_WINDOW | BW_KVLENS | BW_QLENS | BW_MEAN};
    const int nk = (int)(sizeof kinds / sizeof kinds[0]);
    const int n = nk + test_scaled(24);
    double worst = 0;
    int64_t bad = 0;
    for (int k = 0; k < n; k++) {
        const uint64_t seed = 500 + (uint64_t)k;
        bwcase c;
        smattn_dtype odt = k % 3 == 1 ? SMATTN_BF16 : SMATTN_F32;
        ck_assert_int_eq(bwcase_make(&c, seed, k < nk ? kinds[k] : ~0u, odt), 0);
        smattn_dtype gt = k % 4 == 2 ? SMATTN_BF16 : k % 4 == 3 ? SMATTN_F16 : SMATTN_F32;
        for (int a = 0; a < 3; a++)
            if (smattn_opt_isa_available(isas[a]))
                bad += judge_one(&c, isas[a], gt, seed, &worst);
        bwcase_free(&c);
    }
    fprintf(stderr, "opt_backward: %d problems, worst ratio %g\n", n, worst);
    ck_assert_int_eq(bad, 0);
}
END_TEST

/* ALiBi (SPEC 2.8) folded into the kernel's bias: within the bound in each mode, with the
 * mask kinds, softcap and several blocks; a bias added as is beside the symmetric or
 * one-sided term (the term then added after the bias, SPEC 10.8), dBias included. */
START_TEST(alibi_within_bound)
{
    static const unsigned kinds[] = {
        BW_ALIBI, BW_ALIBI | BW_BIAS, BW_ALIBI | BW_CAUSAL_LR | BW_GQA,
        BW_ALIBI | BW_SOFTCAP | BW_QLENS | BW_KVLENS, BW_ALIBI | BW_BIAS | BW_SOFTCAP | BW_DLSE,
        BW_ALIBI | BW_BIG | BW_CAUSAL_LR | BW_GQA | BW_SINKS,
        BW_ALIBI | BW_BIG | BW_BIAS | BW_WINDOW | BW_MASK};
    const int n = (int)(sizeof kinds / sizeof kinds[0]) * 2;
    double worst = 0;
    int64_t bad = 0;
    for (int k = 0; k < n; k++) {
        const uint64_t seed = 900 + (uint64_t)k;
        bwcase c;
        ck_assert_int_eq(bwcase_make(&c, seed, kinds[k / 2], k % 2 ? SMATTN_BF16 : SMATTN_F32), 0);
        ck_assert(c.p.alibi_mode != SMATTN_ALIBI_NONE);
        for (int a = 0; a < 3; a++)
            if (smattn_opt_isa_available(isas[a]))
                bad += judge_one(&c, isas[a], k % 3 == 1 ? SMATTN_BF16 : SMATTN_F32, seed, &worst);
        /* the symmetric and one-sided terms beside the bias, added after it (SPEC 10.8):
         * dQ, dK, dV on every ISA, and dBias */
        const int was_mask = c.p.alibi_mode == SMATTN_ALIBI_MASK;
        for (int md = 0; was_mask && md < 2; md++) {
            c.p.alibi_mode = md ? SMATTN_ALIBI_ONE_SIDED : SMATTN_ALIBI_SYMMETRIC;
            ck_assert_int_eq(bwcase_forward(&c), 0);
            for (int a = 0; a < 3; a++)
                if (smattn_opt_isa_available(isas[a]))
                    bad +=
                        judge_one(&c, isas[a], k % 3 == 1 ? SMATTN_BF16 : SMATTN_F32, seed, &worst);
            bwgrads g;
            bwgrads_make(&g, &c.p, SMATTN_F32);
            float *db = malloc((size_t)(c.p.B * c.p.Hq * c.p.S * c.p.T) * sizeof *db);
            ck_assert(db != NULL);
            g.go.dbias = (smattn_out_tensor){db, SMATTN_F32, {0}};
            ck_assert_int_eq(smattn_contiguous_strides(&c.p, 'b', g.go.dbias.stride), SMATTN_OK);
            ck_assert_int_eq(run_bw(&c, NULL, 2, &g), SMATTN_OK);
            char nm[200], what[260];
            snprintf(what, sizeof what, "%s, bias beside ALiBi mode %d",
                     bwcase_name(&c, nm, sizeof nm), (int)c.p.alibi_mode);
            const double rt = judged_ratio(&c, &g.go, 3, what);
            worst = rt > worst ? rt : worst;
            free(db);
            bwgrads_free(&g);
        }
        bwcase_free(&c);
    }
    fprintf(stderr, "opt_backward alibi: %d problems, worst ratio %g\n", n, worst);
    ck_assert_int_eq(bad, 0);
}
END_TEST

static int same_bits(const bwgrads *a, const bwgrads *b)
{
    size_t es = smattn_dtype_size(a->t);
    return memcmp(a->dq, b->dq, (size_t)a->nq * es) == 0 &&
           memcmp(a->dk, b->dk, (size_t)a->nk * es) == 0 &&
           memcmp(a->dv, b->dv, (size_t)a->nv * es) == 0;
}

/* ref = c's gradients from the scalar kernel on 1 thread (made here, freed by the caller);
 * every ISA the CPU has, at 1, 2 and 3 threads, must give the same bits. what names the
 * problem in a failure. */
static void same_on_every_isa(const bwcase *c, bwgrads *ref, const char *what)
{
    bwgrads_make(ref, &c->p, SMATTN_F32);
    ck_assert_int_eq(run_bw(c, "scalar", 1, ref), SMATTN_OK);
    for (int a = 0; a < 3; a++) {
        if (!smattn_opt_isa_available(isas[a]))
            continue;
        for (int th = 1; th <= 3; th++) {
            bwgrads g;
            bwgrads_make(&g, &c->p, SMATTN_F32);
            ck_assert_int_eq(run_bw(c, isas[a], th, &g), SMATTN_OK);
            ck_assert_msg(same_bits(ref, &g), "%s: %s with %d threads differs from scalar with 1",
                          what, isas[a], th);
            bwgrads_free(&g);
        }
    }
}

/* Threads 1, 2, 3 and every ISA give the same bits; and twice the same call. */
START_TEST(bitwise_threads_isas)
{
    static const unsigned kinds[] = {BW_BIG | BW_CAUSAL_LR | BW_GQA | BW_DLSE,
                                     BW_BIG | BW_MASK | BW_BIAS | BW_SOFTCAP | BW_SINKS,
                                     BW_BIG | BW_WINDOW | BW_KVLENS | BW_MEAN | BW_EMPTY,
                                     /* `nan` empty rows beside regular ones in a group
                                      * (lower-right, S > T_b): no dS is stored there */
                                     BW_BIG | BW_NANCONV | BW_KVLENS | BW_CAUSAL_LR | BW_GQA};
    for (int k = 0; k < 4; k++) {
        bwcase c;
        ck_assert_int_eq(bwcase_make(&c, 77 + (uint64_t)k, kinds[k], SMATTN_BF16), 0);
        char what[24];
        snprintf(what, sizeof what, "kind %d", k);
        bwgrads ref;
        same_on_every_isa(&c, &ref, what);
        bwgrads_free(&ref);
        bwcase_free(&c);
    }
}
END_TEST

/* Empty rows (kv_lens 0) give +0 in dQ and nothing to dK, dV: every bit zero. */
START_TEST(empty_rows_pos_zero)
{
    bwcase c;
    ck_assert_int_eq(bwcase_make(&c, 3, BW_EMPTY | BW_GQA | BW_SINKS, SMATTN_F32), 0);
    bwgrads g;
    bwgrads_make(&g, &c.p, SMATTN_F32);
    memset(g.dq, 0xff, (size_t)g.nq * 4);
    memset(g.dk, 0xff, (size_t)g.nk * 4);
    memset(g.dv, 0xff, (size_t)g.nv * 4);
    ck_assert_int_eq(run_bw(&c, NULL, 2, &g), SMATTN_OK);
    const smattn_problem *p = &c.p;
    const uint32_t *dq = g.dq, *dk = g.dk, *dv = g.dv;
    for (int64_t x = 0; x < p->S * p->Hq * p->D; x++) /* batch 0: kv_lens 0 */
        ck_assert_uint_eq(dq[x], 0);
    for (int64_t x = 0; x < p->T * p->Hkv * p->D; x++)
        ck_assert_uint_eq(dk[x], 0);
    for (int64_t x = 0; x < p->T * p->Hkv * p->Dv; x++)
        ck_assert_uint_eq(dv[x], 0);
    bwgrads_free(&g);
    bwcase_free(&c);
}
END_TEST

/* saved NULL runs the forward itself: the same bits as a binary32 saved O and LSE. */
START_TEST(saved_null_runs_forward)
{
    bwcase c;
    ck_assert_int_eq(bwcase_make(&c, 11, BW_BIG | BW_CAUSAL_UL | BW_GQA, SMATTN_F32), 0);
    bwgrads a, b;
    bwgrads_make(&a, &c.p, SMATTN_F32);
    bwgrads_make(&b, &c.p, SMATTN_F32);
    ck_assert_int_eq(run_bw(&c, NULL, 2, &a), SMATTN_OK);
    smattn_opt_config cfg = {2, NULL};
    ck_assert_int_eq(smattn_attention_backward(&c.p, &c.in, NULL, &c.gin, &b.go, &cfg),
                     SMATTN_OK);
    ck_assert(same_bits(&a, &b));
    bwgrads_free(&a);
    bwgrads_free(&b);
    bwcase_free(&c);
}
END_TEST

/* The dQ pass reads the dS the dK/dV pass kept, or computes it again when it would not
 * fit: the same bits either way. */
START_TEST(ds_store_same_bits)
{
    bwcase c;
    ck_assert_int_eq(bwcase_make(&c, 21, BW_BIG | BW_CAUSAL_LR | BW_GQA | BW_SOFTCAP | BW_BIAS,
                                 SMATTN_F32),
                     0);
    bwgrads a, b;
    bwgrads_make(&a, &c.p, SMATTN_F32);
    bwgrads_make(&b, &c.p, SMATTN_F32);
    ck_assert_int_eq(run_bw(&c, NULL, 2, &a), SMATTN_OK);
    ck_assert_int_eq(run_bw_ds_again(&c, 2, &b), SMATTN_OK);
    ck_assert(same_bits(&a, &b));
    bwgrads_free(&a);
    bwgrads_free(&b);
    bwcase_free(&c);
}
END_TEST

/* Half-precision inputs are read exactly: bf16 and f16 Q, K, V, dO give the bits of the
 * binary32 inputs holding the same values. */
START_TEST(half_inputs_exact)
{
    for (int k = 0; k < 2; k++) {
        const smattn_dtype ht = k ? SMATTN_F16 : SMATTN_BF16;
        bwcase c;
        ck_assert_int_eq(bwcase_make(&c, 31 + (uint64_t)k, BW_BIG | BW_CAUSAL_LR | BW_GQA,
                                     SMATTN_F32),
                         0);
        const smattn_problem *p = &c.p;
        float *arr[4] = {c.q, c.k, c.v, c.dout};
        const int64_t n[4] = {p->B * p->S * p->Hq * p->D, p->B * p->T * p->Hkv * p->D,
                              p->B * p->T * p->Hkv * p->Dv, p->B * p->S * p->Hq * p->Dv};
        uint16_t *h[4];
        for (int t = 0; t < 4; t++) {
            h[t] = malloc((size_t)n[t] * 2);
            for (int64_t x = 0; x < n[t]; x++) {
                smattn_store(h[t], ht, x, (double)arr[t][x]);
                arr[t][x] = (float)smattn_load(h[t], ht, x);
            }
        }
        bwgrads a, b;
        bwgrads_make(&a, p, SMATTN_F32);
        bwgrads_make(&b, p, SMATTN_F32);
        ck_assert_int_eq(run_bw(&c, NULL, 2, &a), SMATTN_OK);
        bwcase hc = c;
        hc.in.q.data = h[0], hc.in.q.dtype = ht;
        hc.in.k.data = h[1], hc.in.k.dtype = ht;
        hc.in.v.data = h[2], hc.in.v.dtype = ht;
        hc.gin.dout.data = h[3], hc.gin.dout.dtype = ht;
        ck_assert_int_eq(run_bw(&hc, NULL, 2, &b), SMATTN_OK);
        ck_assert_msg(same_bits(&a, &b), "%s inputs", smattn_dtype_name(ht));
        for (int t = 0; t < 4; t++)
            free(h[t]);
        bwgrads_free(&a);
        bwgrads_free(&b);
        bwcase_free(&c);
    }
}
END_TEST

/* Shapes at the edges of the kernel's blocks (64 queries, 64 keys) and register tiles (6
 * or 4 rows): S, T of 1, 63, 64, 65, 129, 130; no mask and both causal kinds (the diagonal
 * blocks' spans); groups of 1, 7 and 8 heads; D, Dv off the padding of 16. Each within the
 * bound (on one ISA a problem, in turn), and the same bits on every ISA at 1, 2 and 3
 * threads and with dS computed again in the dQ pass. */
START_TEST(edge_shapes)
{
    static const bwshape shapes[] = {
        {1, 129, 7, 1, 24, 40},   {129, 1, 8, 1, 17, 9},   {63, 65, 8, 8, 16, 16},
        {64, 64, 7, 1, 33, 31},   {65, 63, 8, 1, 40, 8},   {129, 130, 2, 2, 5, 48},
        {130, 64, 7, 7, 3, 1},    {70, 129, 1, 1, 128, 128}};
    static const unsigned causal[] = {0, BW_CAUSAL_LR, BW_CAUSAL_UL};
    const int ns = (int)(sizeof shapes / sizeof shapes[0]);
    double worst = 0;
    int64_t bad = 0;
    for (int k = 0; k < 3 * ns; k++) {
        const uint64_t seed = 900 + (uint64_t)k;
        bwcase c;
        const unsigned feat = causal[k % 3] | (k % 4 == 3 ? BW_DLSE : 0);
        ck_assert_int_eq(bwcase_make_shaped(&c, seed, feat, SMATTN_F32, &shapes[k / 3]), 0);
        char nm[200];
        bwcase_name(&c, nm, sizeof nm);
        /* the bound on one ISA a problem, in turn (the bits below tie the others to it) */
        const char *isa = isas[(k + k / 3) % 3];
        bad += judge_one(&c, smattn_opt_isa_available(isa) ? isa : "scalar", SMATTN_F32, seed,
                         &worst);
        bwgrads ref, g;
        same_on_every_isa(&c, &ref, nm);
        bwgrads_make(&g, &c.p, SMATTN_F32);
        ck_assert_int_eq(run_bw_ds_again(&c, 2, &g), SMATTN_OK);
        ck_assert_msg(same_bits(&ref, &g), "%s: dS computed again differs", nm);
        bwgrads_free(&g);
        bwgrads_free(&ref);
        bwcase_free(&c);
    }
    fprintf(stderr, "opt_backward edge shapes: %d problems, worst ratio %g\n", 3 * ns, worst);
    ck_assert_int_eq(bad, 0);
}
END_TEST

/* A `nan` empty row (every key masked) among regular rows of its group: dK and dV of the
 * group are NaN, the other rows' dQ are not touched by it: the bits with the dS store are
 * those with dS computed again, and those rows' dQ are finite. (The dQ pass once read
 * the store there, which the dK/dV pass had left unwritten for the NaN group.) */
START_TEST(nan_row_beside_regular_rows)
{
    bwcase c;
    const bwshape sh = {130, 100, 6, 2, 20, 20};
    ck_assert_int_eq(
        bwcase_make_shaped(&c, 41, BW_MASK | BW_GQA | BW_NANCONV, SMATTN_F32,
                           &sh),
        0);
    const smattn_problem *p = &c.p;
    const int64_t h0 = 1, i0 = 70; /* head 1 (group 0), query 70: every key masked */
    for (int64_t j = 0; j < p->T; j++)
        c.mask[smattn__off4(c.in.mask.stride, 0, h0, i0, j)] = 0;
    smattn_outputs out;
    memset(&out, 0, sizeof out);
    out.o = (smattn_out_tensor){c.o, c.odt, {0}};
    out.lse = (smattn_out_tensor){c.lse, SMATTN_F32, {0}};
    ck_assert_int_eq(smattn_contiguous_strides(p, 'o', out.o.stride), SMATTN_OK);
    ck_assert_int_eq(smattn_contiguous_strides(p, 'l', out.lse.stride), SMATTN_OK);
    ck_assert_int_eq(smattn_attention(p, &c.in, &out, NULL), SMATTN_OK);
    bwgrads a, b;
    bwgrads_make(&a, p, SMATTN_F32);
    bwgrads_make(&b, p, SMATTN_F32);
    ck_assert_int_eq(run_bw(&c, NULL, 2, &a), SMATTN_OK);
    ck_assert_int_eq(run_bw_ds_again(&c, 2, &b), SMATTN_OK);
    ck_assert(same_bits(&a, &b));
    const float *dq = a.dq, *dk = a.dk;
    int64_t nonzero = 0;
    for (int64_t i = 0; i < p->S; i++)
        for (int64_t h = 0; h < p->Hq; h++)
            for (int64_t d = 0; d < p->D; d++) {
                const float x = dq[(i * p->Hq + h) * p->D + d];
                if (i == i0 && h == h0)
                    ck_assert(isnan(x));
                else
                    ck_assert_msg(isfinite(x), "dQ row %lld head %lld", (long long)i,
                                  (long long)h);
                nonzero += x != 0 && h < p->Hq / p->Hkv;
            }
    ck_assert(nonzero > 0);
    ck_assert(isnan(dk[0])); /* key 0, KV head 0 */
    ck_assert(isfinite(dk[p->D])); /* key 0, KV head 1 */
    bwgrads_free(&a);
    bwgrads_free(&b);
    bwcase_free(&c);
}
END_TEST

/* dSinks (SPEC 10.1, B13): within its bound beside dQ, dK, dV on problems with sinks, dLSE,
 * empty rows (a row seeing the sink alone), q_lens, GQA and several blocks, in each
 * gradient dtype and on every ISA; the same bits at 1, 2 and 3 threads; +0 for every head
 * of a problem without sinks. */
START_TEST(dsinks_within_bound)
{
    static const unsigned kinds[] = {BW_SINKS,
                                     BW_SINKS | BW_DLSE,
                                     BW_SINKS | BW_EMPTY | BW_DLSE | BW_GQA,
                                     BW_SINKS | BW_QLENS | BW_KVLENS | BW_CAUSAL_UL,
                                     BW_BIG | BW_SINKS | BW_DLSE | BW_CAUSAL_LR | BW_GQA,
                                     BW_BIG | BW_SINKS | BW_MASK | BW_BIAS | BW_SOFTCAP | BW_QLENS,
                                     BW_DLSE | BW_GQA};
    const int nk = (int)(sizeof kinds / sizeof kinds[0]);
    double worst = 0;
    int64_t judged = 0;
    for (int k = 0; k < nk; k++) {
        bwcase c;
        ck_assert_int_eq(
            bwcase_make(&c, 900 + (uint64_t)k, kinds[k], k % 2 ? SMATTN_BF16 : SMATTN_F32), 0);
        const smattn_dtype gt = k % 3 == 1 ? SMATTN_BF16 : k % 3 == 2 ? SMATTN_F16 : SMATTN_F32;
        const size_t es = smattn_dtype_size(gt);
        unsigned char first[64 * 4];
        ck_assert(c.p.Hq * (int64_t)es <= (int64_t)sizeof first);
        bwgrads ref; /* the scalar kernel's on 1 thread */
        memset(&ref, 0, sizeof ref);
        for (int a = 0; a < 3; a++) {
            if (!smattn_opt_isa_available(isas[a]))
                continue;
            for (int th = 1; th <= 3; th++) {
                bwgrads g;
                bwgrads_make(&g, &c.p, gt);
                unsigned char ds[64 * 4];
                memset(ds, 0xa5, sizeof ds); /* every element must be written */
                g.go.dsinks = (smattn_out_tensor){ds, gt, {1, 0, 0, 0}};
                ck_assert_int_eq(run_bw(&c, isas[a], th, &g), SMATTN_OK);
                if (a == 0 && th == 1)
                    memcpy(first, ds, (size_t)c.p.Hq * es);
                char nm[200];
                ck_assert_msg(memcmp(first, ds, (size_t)c.p.Hq * es) == 0,
                              "%s: dSinks on %s with %d threads differs from scalar with 1",
                              bwcase_name(&c, nm, sizeof nm), isas[a], th);
                if (a || th > 1)
                    ck_assert_msg(same_bits(&ref, &g),
                                  "%s: dQ, dK or dV on %s with %d threads differs from scalar "
                                  "with 1",
                                  bwcase_name(&c, nm, sizeof nm), isas[a], th);
                if (!c.sinks)
                    for (int64_t h = 0; h < c.p.Hq; h++)
                        ck_assert_msg(smattn_load(ds, gt, h) == 0 &&
                                          !signbit(smattn_load(ds, gt, h)),
                                      "no sinks: dSinks[%lld] not +0", (long long)h);
                if (a == 0 && th == 2) { /* judged once: every other run gives these bits */
                    char what[240];
                    snprintf(what, sizeof what, "%s on %s", bwcase_name(&c, nm, sizeof nm),
                             isas[a]);
                    const double rt = judged_ratio(&c, &g.go, 4, what);
                    worst = rt > worst ? rt : worst;
                    judged++;
                }
                if (a == 0 && th == 1)
                    ref = g;
                else
                    bwgrads_free(&g);
            }
        }
        bwgrads_free(&ref);
        bwcase_free(&c);
    }
    fprintf(stderr, "opt_backward: dSinks judged %lld times, worst ratio %g\n", (long long)judged,
            worst);
    ck_assert(worst > 0); /* the sums are not all exact: the bound was reached for */
}
END_TEST

/* dBias (SPEC 10.1, 10.2) in its full shape and summed over each broadcast dimension and
 * over all four: within the bound of B9 / B12 against the oracle, every element written,
 * bitwise the same on every ISA, at 1 to 3 threads and with the dS store or without. */
START_TEST(dbias_within_bound)
{
    static const unsigned kinds[] = {BW_BIAS,
                                     BW_BIAS | BW_SOFTCAP | BW_CAUSAL_LR,
                                     BW_MASK | BW_GQA | BW_DLSE,
                                     BW_BIAS | BW_EMPTY | BW_MEAN | BW_KVLENS,
                                     BW_NANCONV | BW_EMPTY | BW_GQA,
                                     BW_BIG | BW_BIAS | BW_CAUSAL_UL | BW_SINKS | BW_QLENS,
                                     BW_BIG | BW_SOFTCAP | BW_WINDOW | BW_GQA | BW_DLSE,
                                     BW_BIG | BW_MASK | BW_BIAS | BW_SOFTCAP | BW_SINKS};
    /* which dimensions the output sums over: bit k for dimension k (B, Hq, S, T) */
    static const unsigned sums[] = {0, 1, 2, 3, 4, 8, 12, 15};
    const int nk = (int)(sizeof kinds / sizeof kinds[0]);
    double worst = 0;
    int64_t judged = 0;
    for (int k = 0; k < nk; k++) {
        bwcase c;
        ck_assert_int_eq(
            bwcase_make(&c, 700 + (uint64_t)k, kinds[k], k % 2 ? SMATTN_BF16 : SMATTN_F32), 0);
        const smattn_problem *p = &c.p;
        const unsigned sum = sums[k % 8], sum2 = sums[(k + 3) % 8];
        for (int v = 0; v < 2; v++) {
            const unsigned sm = v ? sum2 : sum;
            const smattn_dtype gt = (k + v) % 3 == 1   ? SMATTN_BF16
                                    : (k + v) % 3 == 2 ? SMATTN_F16
                                                       : SMATTN_F32;
            const size_t es = smattn_dtype_size(gt);
            const int64_t ext[4] = {p->B, p->Hq, p->S, p->T};
            int64_t e[4], st[4], n = 1;
            for (int d = 3; d >= 0; d--) {
                e[d] = sm >> d & 1 ? 1 : ext[d];
                st[d] = sm >> d & 1 ? 0 : n;
                n *= e[d];
            }
            unsigned char *first = malloc((size_t)n * es), *db = malloc((size_t)n * es);
            ck_assert(first && db);
            char nm[200];
            bwcase_name(&c, nm, sizeof nm);
            bwgrads ref; /* the scalar kernel's on 1 thread: every other run gives its bits */
            memset(&ref, 0, sizeof ref);
            for (int a = 0; a < 3; a++) {
                if (!smattn_opt_isa_available(isas[a]))
                    continue;
                for (int th = 1; th <= 3; th++) {
                    bwgrads g;
                    bwgrads_make(&g, p, gt);
                    memset(db, 0xa5, (size_t)n * es); /* every element must be written */
                    g.go.dbias = (smattn_out_tensor){db, gt, {st[0], st[1], st[2], st[3]}};
                    ck_assert_int_eq(th == 3 && a == 0 ? run_bw_ds_again(&c, th, &g)
                                                       : run_bw(&c, isas[a], th, &g),
                                     SMATTN_OK);
                    if (a == 0 && th == 1)
                        memcpy(first, db, (size_t)n * es);
                    ck_assert_msg(memcmp(first, db, (size_t)n * es) == 0,
                                  "%s, sums %u: dBias on %s with %d threads differs from scalar "
                                  "with 1",
                                  nm, sm, isas[a], th);
                    /* judged once (the oracle is most of this test's time): every other
                     * run's dQ, dK, dV and dBias are these bits */
                    if (a == 0 && th == 2) {
                        char what[300];
                        snprintf(what, sizeof what, "%s, sums %u, %s out, on %s", nm, sm,
                                 smattn_dtype_name(gt), isas[a]);
                        const double rt = judged_ratio(&c, &g.go, 3, what);
                        worst = rt > worst ? rt : worst;
                        judged++;
                    }
                    if (a == 0 && th == 1) {
                        ref = g;
                        continue;
                    }
                    ck_assert_msg(same_bits(&ref, &g),
                                  "%s, sums %u: dQ, dK or dV on %s with %d threads differs from "
                                  "scalar with 1",
                                  nm, sm, isas[a], th);
                    bwgrads_free(&g);
                }
            }
            bwgrads_free(&ref);
            free(first), free(db);
        }
        bwcase_free(&c);
    }
    fprintf(stderr, "opt_backward: dBias judged %lld times, worst ratio %g\n", (long long)judged,
            worst);
    ck_assert(worst > 0); /* not every element exact: the bound was reached for */
}
END_TEST

/* What it refuses: a binary64 dbias or dsinks, binary64, non-finite inputs, bad options. */
START_TEST(refusals)
{
    bwcase c;
    ck_assert_int_eq(bwcase_make(&c, 5, BW_SINKS, SMATTN_F32), 0);
    const smattn_problem *p = &c.p;
    smattn_forward_saved s = saved_of(&c);
    bwgrads g;
    bwgrads_make(&g, p, SMATTN_F32);
    smattn_grad_outputs go = g.go;
    double db[4096];
    ck_assert(p->B * p->Hq * p->S * p->T <= 4096);
    go.dbias = (smattn_out_tensor){db, SMATTN_F64, {0}};
    ck_assert_int_eq(smattn_contiguous_strides(p, 'b', go.dbias.stride), SMATTN_OK);
    ck_assert_int_eq(smattn_attention_backward(p, &c.in, &s, &c.gin, &go, NULL),
                     SMATTN_ERR_UNSUPPORTED);
    go = g.go;
    go.dsinks = (smattn_out_tensor){db, SMATTN_F64, {1, 0, 0, 0}}; /* dSinks: not in binary64 */
    ck_assert_int_eq(smattn_attention_backward(p, &c.in, &s, &c.gin, &go, NULL),
                     SMATTN_ERR_UNSUPPORTED);
    bwgrads g64;
    bwgrads_make(&g64, p, SMATTN_F64);
    ck_assert_int_eq(smattn_attention_backward(p, &c.in, &s, &c.gin, &g64.go, NULL),
                     SMATTN_ERR_UNSUPPORTED);
    bwgrads_free(&g64);
    smattn_opt_config bad = {-1, NULL};
    ck_assert_int_eq(smattn_attention_backward(p, &c.in, &s, &c.gin, &g.go, &bad),
                     SMATTN_ERR_OPTION);
    bad = (smattn_opt_config){1, "neon"};
    ck_assert_int_eq(smattn_attention_backward(p, &c.in, &s, &c.gin, &g.go, &bad),
                     SMATTN_ERR_OPTION);
    smattn_forward_saved s0 = s;
    s0.lse.data = NULL;
    ck_assert_int_eq(smattn_attention_backward(p, &c.in, &s0, &c.gin, &g.go, NULL),
                     SMATTN_ERR_NULL);
    const float was = c.dout[0];
    c.dout[0] = NAN;
    ck_assert_int_eq(smattn_attention_backward(p, &c.in, &s, &c.gin, &g.go, NULL),
                     SMATTN_ERR_UNSUPPORTED);
    /* finite magnitudes whose sums could leave binary32 (dP = dO . v past 2^126: inf - inf
     * in dP - Delta, 0 * NaN at keys no row sees) are the oracle's */
    c.dout[0] = 0x1p126f;
    ck_assert_int_eq(smattn_attention_backward(p, &c.in, &s, &c.gin, &g.go, NULL),
                     SMATTN_ERR_UNSUPPORTED);
    c.dout[0] = 1.0f;
    c.v[0] = 0x1p126f;
    ck_assert_int_eq(smattn_attention_backward(p, &c.in, &s, &c.gin, &g.go, NULL),
                     SMATTN_ERR_UNSUPPORTED);
    c.v[0] = 1.0f;
    c.dout[0] = 0x1p100f; /* within: |dO| |V| Dv and the sums stay below 2^126 */
    ck_assert_int_eq(smattn_attention_backward(p, &c.in, &s, &c.gin, &g.go, NULL), SMATTN_OK);
    c.dout[0] = was;
    /* scores past binary32 (|scale| D max|Q| max|K| >= 2^126) with every sum far inside it
     * (dO tiny): s = inf would give P = exp(inf - LSE) = inf and NaN gradients */
    const int64_t ndo = p->B * p->S * p->Hq * p->Dv;
    float *keep = malloc((size_t)ndo * sizeof *keep);
    ck_assert(keep);
    memcpy(keep, c.dout, (size_t)ndo * sizeof *keep);
    for (int64_t x = 0; x < ndo; x++)
        c.dout[x] = 0x1p-60f;
    const double scale = c.p.scale;
    c.p.scale = 1e38;
    ck_assert_int_eq(smattn_attention_backward(p, &c.in, &s, &c.gin, &g.go, NULL),
                     SMATTN_ERR_UNSUPPORTED);
    c.p.scale = scale;
    ck_assert_int_eq(smattn_attention_backward(p, &c.in, &s, &c.gin, &g.go, NULL), SMATTN_OK);
    memcpy(c.dout, keep, (size_t)ndo * sizeof *keep);
    free(keep);
    /* under softcap too: q . k is formed in binary32 before the cap (2^64 x 2^64 = inf, and
     * inf times the scale's low part 0 is NaN) */
    const float q0 = c.q[0], k0 = c.k[0];
    c.p.softcap = 30;
    c.q[0] = c.k[0] = 0x1p64f;
    ck_assert_int_eq(smattn_attention_backward(p, &c.in, &s, &c.gin, &g.go, NULL),
                     SMATTN_ERR_UNSUPPORTED);
    c.p.softcap = 0;
    c.q[0] = q0, c.k[0] = k0;
    /* a saved LSE of +inf (a forward whose LSE overflowed) in a row that sees keys */
    const float lse0 = c.lse[0];
    c.lse[0] = HUGE_VALF;
    ck_assert_int_eq(smattn_attention_backward(p, &c.in, &s, &c.gin, &g.go, NULL),
                     SMATTN_ERR_UNSUPPORTED);
    c.lse[0] = lse0;
    bwgrads_free(&g);
    bwcase_free(&c);
}
END_TEST

/* A non-finite element of Q, K, V or dO in any staging item (the first batch's first rows
 * and keys, the last batch's last ones) is refused at 1, 2 and 3 threads, and the problem
 * runs again once it is restored: the items' verdicts are combined after the pool run. */
START_TEST(nonfinite_any_item)
{
    const bwshape sh = {130, 129, 4, 2, 20, 24}; /* 3 query blocks, 3 key blocks */
    bwcase c;
    uint64_t seed = 60;
    for (;; seed++) { /* a problem of several batches */
        ck_assert_int_eq(bwcase_make_shaped(&c, seed, BW_GQA, SMATTN_F32, &sh), 0);
        if (c.p.B >= 2)
            break;
        bwcase_free(&c);
        ck_assert(seed < 100);
    }
    const smattn_problem *p = &c.p;
    const int64_t B = p->B;
    float *const data[4] = {c.q, c.k, c.v, c.dout};
    const smattn_tensor *const ts[4] = {&c.in.q, &c.in.k, &c.in.v, &c.gin.dout};
    const int64_t n1[4] = {p->S, p->T, p->T, p->S}, n2[4] = {p->Hq, p->Hkv, p->Hkv, p->Hq},
                  n3[4] = {p->D, p->D, p->Dv, p->Dv};
    bwgrads ref, g;
    bwgrads_make(&ref, p, SMATTN_F32);
    ck_assert_int_eq(run_bw(&c, NULL, 1, &ref), SMATTN_OK);
    for (int t = 0; t < 4; t++)
        for (int at = 0; at < 2; at++) {
            ck_assert(ts[t]->data == data[t]);
            const int64_t off =
                at ? smattn__off4(ts[t]->stride, B - 1, n1[t] - 1, n2[t] - 1, n3[t] - 1)
                   : smattn__off4(ts[t]->stride, 0, 1, 0, n3[t] / 2);
            const float was = data[t][off];
            data[t][off] = at ? INFINITY : NAN;
            for (int th = 1; th <= 3; th++) {
                bwgrads_make(&g, p, SMATTN_F32);
                ck_assert_msg(run_bw(&c, NULL, th, &g) == SMATTN_ERR_UNSUPPORTED,
                              "tensor %d, element %lld, %d threads: not refused", t,
                              (long long)off, th);
                bwgrads_free(&g);
            }
            data[t][off] = was;
            bwgrads_make(&g, p, SMATTN_F32);
            ck_assert_int_eq(run_bw(&c, NULL, 3, &g), SMATTN_OK);
            ck_assert(same_bits(&ref, &g));
            bwgrads_free(&g);
        }
    bwgrads_free(&ref);
    bwcase_free(&c);
}
END_TEST

Suite *opt_backward_suite(void);
Suite *opt_backward_suite(void)
{
    Suite *s = suite_create("opt_backward");
    TCase *t = tcase_create("kernel");
    tcase_set_timeout(t, 600);
    tcase_add_test(t, within_bound);
    tcase_add_test(t, alibi_within_bound);
    tcase_add_test(t, bitwise_threads_isas);
    tcase_add_test(t, empty_rows_pos_zero);
    tcase_add_test(t, saved_null_runs_forward);
    tcase_add_test(t, ds_store_same_bits);
    tcase_add_test(t, half_inputs_exact);
    tcase_add_test(t, dsinks_within_bound);
    tcase_add_test(t, dbias_within_bound);
    tcase_add_test(t, refusals);
    tcase_add_test(t, edge_shapes);
    tcase_add_test(t, nonfinite_any_item);
    tcase_add_test(t, nan_row_beside_regular_rows);
    suite_add_tcase(s, t);
    return s;
}
