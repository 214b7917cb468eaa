/* SPDX-License-Identifier: MIT */
/* test_backward_bound.c: the bound for backward kernels (SPEC 10.7) and its judge: a plain
 * binary32 FlashAttention-2 backward stays within it on random problems of every mask kind;
 * planted bugs exceed it; the stored O's rounding is a term it cannot do without. */
#include <check.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "conform/judge_backward.h"
#include "smattn.h"
#include "tests/support/bwcase.h"
#include "tests/support/testkit.h"

/* The plain kernel's model: the forward is smattn_attention (its O stored in odt), the
 * backward plain binary32 (glibc's expf and tanhf within 4 ulps). */
static smattn_backward_precision plain_model(const bwcase *c)
{
    smattn_backward_precision m = smattn_backward_precision_of(SMATTN_F32);
    m.fwd = smattn_opt_precision(&c->p);
    m.o_dtype = c->odt;
    m.lse_dtype = SMATTN_F32;
    return m;
}

static conform_backward_verdict judge(const bwcase *c, const bwgrads *g,
                                      const smattn_backward_precision *m)
{
    conform_backward_verdict v;
    smattn_ref_config cfg = {1, 0, 0, 0};
    smattn_status s = conform_judge_backward(&c->p, &c->in, &c->gin, &g->go, m, &cfg, &v);
    ck_assert_msg(s == SMATTN_OK, "judge: %s", smattn_status_name(s));
    return v;
}

static void report(const char *what, uint64_t seed, const bwcase *c,
                   const conform_backward_verdict *v)
{
    char nm[200];
    static const char *const names[3] = {"dQ", "dK", "dV"};
    for (int t = 0; t < 3; t++)
        fprintf(stderr, "%s seed %llu (%s): %s max ratio %g at %lld: got %a exact %a bound %a\n",
                what, (unsigned long long)seed, bwcase_name(c, nm, sizeof nm), names[t],
                v->max_ratio[t], (long long)v->worst[t], v->worst_got[t], v->worst_exact[t],
                v->worst_bound[t]);
}

/* Random problems of every mask kind, O stored in f32 or bf16, outputs f32 and bf16. */
START_TEST(plain_within_bound)
{
    const int n = test_scaled(60);
    double worst[2] = {0, 0};
    int fails = 0;
    for (int k = 0; k < n; k++) {
        const uint64_t seed = 1000 + (uint64_t)k;
        bwcase c;
        smattn_dtype odt = k % 3 == 2 ? SMATTN_BF16 : SMATTN_F32;
        ck_assert_int_eq(bwcase_make(&c, seed, ~0u, odt), 0);
        smattn_backward_precision m = plain_model(&c);
        smattn_dtype gt = k % 4 == 3 ? SMATTN_BF16 : SMATTN_F32;
        bwgrads g;
        bwgrads_make(&g, &c.p, gt);
        bw_plain(&c, BW_BUG_NONE, &g);
        conform_backward_verdict v = judge(&c, &g, &m);
        for (int t = 0; t < 3; t++)
            worst[gt == SMATTN_BF16] = fmax(worst[gt == SMATTN_BF16], v.max_ratio[t]);
        if (v.mismatched) {
            report("plain", seed, &c, &v);
            fails++;
        }
        bwgrads_free(&g);
        bwcase_free(&c);
    }
    fprintf(stderr,
            "backward_bound: plain binary32 backward, %d problems, worst ratio %g (f32 "
            "gradients), %g (bf16: their rounding is most of the bound)\n",
            n, worst[0], worst[1]);
    ck_assert_int_eq(fails, 0);
}
END_TEST

/* Each planted bug, on problems that exercise it, exceeds the bound somewhere. */
START_TEST(planted_bugs_exceed)
{
    static const unsigned feat[BW_BUG_COUNT] = {
        0,
        BW_GQA,
        BW_MASK | BW_CAUSAL_LR,
        BW_SOFTCAP,
        0,
        0,
        BW_GQA,
        BW_EMPTY,
    };
    for (int bug = 1; bug < BW_BUG_COUNT; bug++) {
        int caught = 0, tried = 0;
        for (uint64_t seed = 1; seed <= 8; seed++) {
            bwcase c;
            ck_assert_int_eq(bwcase_make(&c, 7000 + seed, feat[bug], SMATTN_F32), 0);
            if (bug == BW_BUG_DELTA_WRONG_O && c.p.Hq < 2) {
                bwcase_free(&c);
                continue;
            }
            smattn_backward_precision m = plain_model(&c);
            bwgrads g;
            bwgrads_make(&g, &c.p, SMATTN_F32);
            bw_plain(&c, BW_BUG_NONE, &g);
            conform_backward_verdict ok = judge(&c, &g, &m);
            if (ok.mismatched)
                report("plain (bug problem)", seed, &c, &ok);
            ck_assert_int_eq(ok.mismatched, 0);
            bw_plain(&c, bug, &g);
            conform_backward_verdict v = judge(&c, &g, &m);
            caught += v.mismatched > 0;
            tried++;
            bwgrads_free(&g);
            bwcase_free(&c);
        }
        fprintf(stderr, "backward_bound: %s caught on %d of %d problems\n", bw_bug_names[bug],
                caught, tried);
        /* a problem may not exercise a bug (a single visible key, no masked key): most do */
        ck_assert_msg(tried > 0 && caught * 4 >= tried * 3, "%s caught on %d of %d",
                      bw_bug_names[bug], caught, tried);
    }
}
END_TEST

/* B3: Delta reads the stored O. A kernel reading a bfloat16 O is within the bound that
 * says so and beyond the one that claims a binary32 O: the u_o |O| |dO| term is needed. */
START_TEST(stored_o_term)
{
    int beyond = 0;
    for (uint64_t seed = 1; seed <= 6; seed++) {
        bwcase c;
        ck_assert_int_eq(bwcase_make(&c, 9000 + seed, BW_GQA, SMATTN_BF16), 0);
        smattn_backward_precision m = plain_model(&c);
        bwgrads g;
        bwgrads_make(&g, &c.p, SMATTN_F32);
        bw_plain(&c, BW_BUG_NONE, &g);
        conform_backward_verdict v = judge(&c, &g, &m);
        ck_assert_int_eq(v.mismatched, 0);
        m.o_dtype = SMATTN_F32; /* a false claim */
        v = judge(&c, &g, &m);
        beyond += v.mismatched > 0;
        bwgrads_free(&g);
        bwcase_free(&c);
    }
    ck_assert_int_ge(beyond, 4);
}
END_TEST

/* Exact zeros get bound 0, NaN rows +inf; statuses. */
START_TEST(zeros_and_statuses)
{
    bwcase c;
    ck_assert_int_eq(bwcase_make(&c, 42, BW_EMPTY | BW_CAUSAL_UL, SMATTN_F32), 0);
    smattn_backward_precision m = plain_model(&c);
    const smattn_problem *p = &c.p;
    bwgrads b, f;
    bwgrads_make(&b, p, SMATTN_F64);
    bwgrads_make(&f, p, SMATTN_F32);
    ck_assert_int_eq(smattn_backward_bound(p, &c.in, &c.gin, &m, &f.go, &b.go), SMATTN_OK);
    /* batch 0 has kv_lens 0: its rows are empty (dQ bound 0), its keys unseen (0) */
    for (int64_t x = 0; x < p->S * p->Hq * p->D; x++)
        ck_assert(((double *)b.dq)[x] == 0);
    for (int64_t x = 0; x < p->T * p->Hkv * p->D; x++)
        ck_assert(((double *)b.dk)[x] == 0);
    /* upper-left causal: key T-1 > S-1 is seen by no row when T > S */
    if (p->T > p->S)
        for (int64_t d = 0; d < p->D; d++)
            ck_assert(((double *)b.dk)[((1 * p->T + p->T - 1) * p->Hkv) * p->D + d] == 0);
    /* statuses */
    smattn_backward_precision bad = m;
    bad.bwd.u_acc = 0.5;
    ck_assert_int_eq(smattn_backward_bound(p, &c.in, &c.gin, &bad, &f.go, &b.go),
                     SMATTN_ERR_OPTION);
    ck_assert_int_eq(smattn_backward_bound(p, &c.in, &c.gin, &m, &f.go, &f.go), SMATTN_ERR_DTYPE);
    ck_assert_int_eq(smattn_backward_bound(p, &c.in, &c.gin, NULL, &f.go, &b.go),
                     SMATTN_ERR_NULL);
    smattn_grad_outputs withs = b.go, fs = f.go;
    double ds[8];
    float dsf[8];
    withs.dsinks = (smattn_out_tensor){ds, SMATTN_F64, {1, 0, 0, 0}};
    ck_assert_int_eq(smattn_backward_bound(p, &c.in, &c.gin, &m, &f.go, &withs),
                     SMATTN_OK); /* fmt->dsinks absent: its dtype read as binary64 */
    fs.dsinks = (smattn_out_tensor){dsf, SMATTN_F32, {1, 0, 0, 0}};
    withs.dsinks.dtype = SMATTN_F32;
    ck_assert_int_eq(smattn_backward_bound(p, &c.in, &c.gin, &m, &fs, &withs), SMATTN_ERR_DTYPE);
    withs.dsinks.dtype = SMATTN_F64;
    ck_assert_int_eq(smattn_backward_bound(p, &c.in, &c.gin, &m, &fs, &withs), SMATTN_OK);
    for (int64_t h = 0; h < p->Hq; h++) /* no sinks: every dsink_h an exact +0 */
        ck_assert(ds[h] == 0);
    /* a NaN in q makes its row's dQ (and the dK of the keys it sees) +inf */
    c.q[0] = NAN;
    ck_assert_int_eq(smattn_backward_bound(p, &c.in, &c.gin, &m, &f.go, &b.go), SMATTN_OK);
    ck_assert(((double *)b.dq)[0] == 0); /* row (0, 0, 0) is empty: its q is never read */
    const int64_t r1 = (1 * p->S + 0) * p->Hq * p->D; /* row (1, 0, h 0) sees key 0 */
    c.q[r1] = NAN;
    ck_assert_int_eq(smattn_backward_bound(p, &c.in, &c.gin, &m, &f.go, &b.go), SMATTN_OK);
    ck_assert(isinf(((double *)b.dq)[r1]) && isinf(((double *)b.dk)[(1 * p->T) * p->Hkv * p->D]));
    bwgrads_free(&b);
    bwgrads_free(&f);
    bwcase_free(&c);
}
END_TEST

/* B12, B13: dSinks and dBias summed over batches and heads ([1, 1, S, T]) of a plain binary32
 * kernel (P_sink = exp(zeta - LSE) from the stored LSE, Delta from the stored O, serial
 * binary32 sums over b and i, and over b and h) are within the bound; a dsink without its
 * dLSE, or a dBias sum of batch 0 only, is beyond it. bug: 0 none, 1 dLSE dropped from
 * dsinks, 2 dBias over batch 0 only. */
static void plain_sums(const bwcase *c, int bug, float *dsinks, float *dbias)
{
    const smattn_problem *p = &c->p;
    const int64_t B = p->B, S = p->S, T = p->T, Hq = p->Hq, Hkv = p->Hkv, D = p->D,
                  Dv = p->Dv, G = Hq / Hkv;
    const float scale = (float)p->scale, cap = (float)p->softcap;
    memset(dsinks, 0, (size_t)Hq * sizeof(float));
    memset(dbias, 0, (size_t)(S * T) * sizeof(float));
    for (int64_t b = 0; b < B; b++)
        for (int64_t h = 0; h < Hq; h++)
            for (int64_t i = 0; i < S; i++) {
                const int64_t gh = h / G;
                const float lse = c->lse[(b * Hq + h) * S + i];
                const float *q = c->q + ((b * S + i) * Hq + h) * D;
                const float *dO = c->dout + ((b * S + i) * Hq + h) * Dv;
                const int qpad = p->q_lens && i >= p->q_lens[b];
                const int sink = c->sinks && !qpad && c->sinks[h] != -INFINITY;
                int nvis = 0;
                for (int64_t j = 0; j < T; j++)
                    nvis += smattn_visible(p, &c->in, b, h, i, j) &&
                            !(c->bias && c->bias[((b * Hq + h) * S + i) * T + j] == -INFINITY);
                if (nvis == 0 && !sink)
                    continue;
                float Delta = 0;
                for (int64_t cc = 0; cc < Dv; cc++)
                    Delta += dO[cc] * (float)smattn_load(c->o, c->odt,
                                                         ((b * S + i) * Hq + h) * Dv + cc);
                const float dl = c->dlse ? c->dlse[(b * Hq + h) * S + i] : 0.0f;
                if (sink)
                    dsinks[h] += expf(c->sinks[h] - lse) * ((bug == 1 ? 0.0f : dl) - Delta);
                for (int64_t j = 0; j < T && !(bug == 2 && b > 0); j++) {
                    if (!smattn_visible(p, &c->in, b, h, i, j) ||
                        (c->bias && c->bias[((b * Hq + h) * S + i) * T + j] == -INFINITY))
                        continue;
                    const float *k = c->k + ((b * T + j) * Hkv + gh) * D;
                    const float *v = c->v + ((b * T + j) * Hkv + gh) * Dv;
                    float dot = 0, dP = 0;
                    for (int64_t d = 0; d < D; d++)
                        dot += q[d] * k[d];
                    float sc = dot * scale;
                    if (cap > 0)
                        sc = cap * tanhf(sc / cap);
                    if (c->bias)
                        sc += c->bias[((b * Hq + h) * S + i) * T + j];
                    for (int64_t cc = 0; cc < Dv; cc++)
                        dP += dO[cc] * v[cc];
                    dbias[i * T + j] += expf(sc - lse) * (dP - Delta + dl);
                }
            }
}

/* The oracle's dsinks and [1, 1, S, T] dBias, their bounds, and the largest ratio of the
 * plain sums (bug as plain_sums). */
static double sums_ratio(const bwcase *c, const smattn_backward_precision *m, int bug)
{
    const smattn_problem *p = &c->p;
    const int64_t S = p->S, T = p->T, Hq = p->Hq;
    const size_t nh = (size_t)Hq, nst = (size_t)(S * T);
    float *ps = malloc(nh * sizeof(float)), *pb = malloc(nst * sizeof(float));
    double *es = malloc(nh * sizeof(double)), *eb = malloc(nst * sizeof(double));
    double *bs = malloc(nh * sizeof(double)), *bb = malloc(nst * sizeof(double));
    plain_sums(c, bug, ps, pb);
    bwgrads ex, bd, fm;
    bwgrads_make(&ex, p, SMATTN_F64);
    bwgrads_make(&bd, p, SMATTN_F64);
    bwgrads_make(&fm, p, SMATTN_F32);
    ex.go.dsinks = (smattn_out_tensor){es, SMATTN_F64, {1, 0, 0, 0}};
    ex.go.dbias = (smattn_out_tensor){eb, SMATTN_F64, {0, 0, T, 1}};
    bd.go.dsinks = (smattn_out_tensor){bs, SMATTN_F64, {1, 0, 0, 0}};
    bd.go.dbias = (smattn_out_tensor){bb, SMATTN_F64, {0, 0, T, 1}};
    fm.go.dsinks = (smattn_out_tensor){ps, SMATTN_F32, {1, 0, 0, 0}};
    fm.go.dbias = (smattn_out_tensor){pb, SMATTN_F32, {0, 0, T, 1}};
    smattn_ref_config cfg = {1, 0, 0, 0};
    ck_assert_int_eq(smattn_ref_backward(p, &c->in, &c->gin, &ex.go, &cfg, NULL), SMATTN_OK);
    ck_assert_int_eq(smattn_backward_bound(p, &c->in, &c->gin, m, &fm.go, &bd.go), SMATTN_OK);
    double worst = 0;
    for (int64_t h = 0; h < Hq; h++)
        worst = fmax(worst, smattn_error_ratio((double)ps[h], es[h], bs[h]));
    for (int64_t x = 0; x < S * T; x++)
        worst = fmax(worst, smattn_error_ratio((double)pb[x], eb[x], bb[x]));
    bwgrads_free(&ex), bwgrads_free(&bd), bwgrads_free(&fm);
    free(ps), free(pb), free(es), free(eb), free(bs), free(bb);
    return worst;
}

START_TEST(sums_within_bound)
{
    const int n = test_scaled(30);
    double worst = 0;
    int caught[3] = {0, 0, 0}, tried = 0;
    for (int k = 0; k < n; k++) {
        const uint64_t seed = 5000 + (uint64_t)k;
        bwcase c;
        unsigned feat = BW_SINKS | BW_BIAS | BW_DLSE | (k % 2 ? BW_GQA : 0) |
                        (k % 3 == 0 ? BW_CAUSAL_LR : 0) | (k % 5 == 1 ? BW_SOFTCAP : 0) |
                        (k % 4 == 2 ? BW_MASK : 0);
        ck_assert_int_eq(bwcase_make(&c, seed, feat, k % 3 == 2 ? SMATTN_BF16 : SMATTN_F32), 0);
        smattn_backward_precision m = plain_model(&c);
        double r = sums_ratio(&c, &m, 0);
        worst = fmax(worst, r);
        ck_assert_msg(r <= 1, "seed %llu: plain sums at ratio %g", (unsigned long long)seed, r);
        if (c.p.B > 1) {
            tried++;
            for (int bug = 1; bug <= 2; bug++)
                caught[bug] += sums_ratio(&c, &m, bug) > 1;
        }
        bwcase_free(&c);
    }
    fprintf(stderr, "backward_bound: dSinks and dBias over batches and heads, %d problems, worst "
            "ratio %g; dLSE dropped caught on %d of %d, one batch's dBias on %d of %d\n", n,
            worst, caught[1], tried, caught[2], tried);
    ck_assert(tried > 0 && caught[1] * 4 >= tried * 3 && caught[2] * 4 >= tried * 3);
}
END_TEST

Suite *backward_bound_suite(void);
Suite *backward_bound_suite(void)
{
    Suite *s = suite_create("backward_bound");
    TCase *t = tcase_create("bound");
    tcase_set_timeout(t, 300);
    tcase_add_test(t, plain_within_bound);
    tcase_add_test(t, planted_bugs_exceed);
    tcase_add_test(t, stored_o_term);
    tcase_add_test(t, zeros_and_statuses);
    tcase_add_test(t, sums_within_bound);
    suite_add_tcase(s, t);
    return s;
}
