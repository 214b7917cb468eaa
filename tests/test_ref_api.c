/* SPDX-License-Identifier: MIT */
/* test_ref_api.c: smattn_ref rejects bad descriptors with the documented status and writes
 * nothing (every output and input byte keeps its value). */
#include <check.h>
#include <inttypes.h>
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "smattn.h"

#define CANARY 0xA5

/* Every buffer a descriptor may point at, in one object so that one memcmp proves that
 * nothing was written anywhere. */
typedef struct arena {
    float q[64], k[64], v[64], x[64], bias[64];
    unsigned char mask[64];
    float sinks[8];
    float o[256], lse[256], p[256];
} arena;

typedef struct fixture {
    arena a;
    smattn_problem prob;
    smattn_inputs in;
    smattn_outputs out;
    int64_t kv_lens[2], q_lens[2];
    const smattn_problem *pp; /* what is passed: may be NULL */
    const smattn_inputs *pi;
    const smattn_outputs *po;
} fixture;

/* A valid attention problem using every input and output: B=2 S=2 T=3 Hq=2 Hkv=1 D=2 Dv=3. */
static void fixture_attention(fixture *f)
{
    memset(f, 0, sizeof *f);
    memset(&f->a, CANARY, sizeof f->a);
    for (int k = 0; k < 64; k++) {
        f->a.q[k] = (float)(k % 5) * 0.25f;
        f->a.k[k] = (float)(k % 3) - 1.0f;
        f->a.v[k] = (float)k;
        f->a.x[k] = (float)(k % 7);
        f->a.bias[k] = -0.5f;
        f->a.mask[k] = (unsigned char)(k % 4 != 0);
    }
    for (int k = 0; k < 8; k++)
        f->a.sinks[k] = 0.5f;
    smattn_problem *p = &f->prob;
    *p = smattn_problem_default();
    p->B = 2;
    p->S = 2;
    p->T = 3;
    p->Hq = 2;
    p->Hkv = 1;
    p->D = 2;
    p->Dv = 3;
    p->scale = smattn_default_scale(2);
    f->kv_lens[0] = 3;
    f->kv_lens[1] = 1;
    f->q_lens[0] = 2;
    f->q_lens[1] = 1;
    p->kv_lens = f->kv_lens;
    p->q_lens = f->q_lens;
    smattn_inputs *in = &f->in;
    in->q = (smattn_tensor){f->a.q, SMATTN_F32, {0}};
    in->k = (smattn_tensor){f->a.k, SMATTN_F32, {0}};
    in->v = (smattn_tensor){f->a.v, SMATTN_F32, {0}};
    in->bias = (smattn_tensor){f->a.bias, SMATTN_F32, {0}};
    in->mask = (smattn_tensor){f->a.mask, SMATTN_BOOL, {0}};
    in->sinks = (smattn_tensor){f->a.sinks, SMATTN_F32, {0}};
    smattn_contiguous_strides(p, 'q', in->q.stride);
    smattn_contiguous_strides(p, 'k', in->k.stride);
    smattn_contiguous_strides(p, 'v', in->v.stride);
    smattn_contiguous_strides(p, 'b', in->bias.stride);
    smattn_contiguous_strides(p, 'b', in->mask.stride);
    smattn_contiguous_strides(p, 's', in->sinks.stride);
    smattn_outputs *out = &f->out;
    out->o = (smattn_out_tensor){f->a.o, SMATTN_F32, {0}};
    out->lse = (smattn_out_tensor){f->a.lse, SMATTN_F32, {0}};
    out->p = (smattn_out_tensor){f->a.p, SMATTN_F32, {0}};
    smattn_contiguous_strides(p, 'o', out->o.stride);
    smattn_contiguous_strides(p, 'l', out->lse.stride);
    smattn_contiguous_strides(p, 'p', out->p.stride);
    f->pp = &f->prob;
    f->pi = &f->in;
    f->po = &f->out;
}

/* The same arena as a softmax problem: X [2,2,2,3] -> P, LSE. */
static void fixture_softmax(fixture *f)
{
    fixture_attention(f);
    f->prob.op = SMATTN_OP_SOFTMAX;
    f->prob.scale = 1;
    memset(&f->in.q, 0, sizeof f->in.q);
    memset(&f->in.k, 0, sizeof f->in.k);
    memset(&f->in.v, 0, sizeof f->in.v);
    memset(&f->out.o, 0, sizeof f->out.o);
    f->in.x = (smattn_tensor){f->a.x, SMATTN_F32, {0}};
    smattn_contiguous_strides(&f->prob, 'x', f->in.x.stride);
}

/* Run ref on the (mutated) fixture: the status must be `want`, smattn_validate must agree,
 * and on failure not one byte of the arena may change. */
static void expect(fixture *f, smattn_status want, const char *what)
{
    arena before = f->a;
    smattn_ref_stats stats;
    smattn_status st = smattn_ref(f->pp, f->pi, f->po, NULL, &stats);
    ck_assert_msg(st == want, "%s: smattn_ref returned %s, expected %s", what,
                  smattn_status_name(st), smattn_status_name(want));
    smattn_status sv = smattn_validate(f->pp, f->pi, f->po);
    ck_assert_msg(sv == want, "%s: smattn_validate returned %s, expected %s", what,
                  smattn_status_name(sv), smattn_status_name(want));
    if (want != SMATTN_OK)
        ck_assert_msg(memcmp(&before, &f->a, sizeof f->a) == 0,
                      "%s: a rejected call wrote to memory", what);
}

START_TEST(valid_fixtures_pass)
{
    fixture f;
    fixture_attention(&f);
    expect(&f, SMATTN_OK, "attention fixture");
    fixture_softmax(&f);
    expect(&f, SMATTN_OK, "softmax fixture");
    /* Softmax ignores Hkv, D and Dv, however bad. */
    f.prob.Hkv = 0;
    f.prob.D = -1;
    f.prob.Dv = INT64_MAX;
    expect(&f, SMATTN_OK, "softmax ignores Hkv/D/Dv");
    /* Optional outputs may be absent: attention needs only O, softmax P or LSE. */
    fixture_attention(&f);
    f.out.lse.data = NULL;
    f.out.p.data = NULL;
    expect(&f, SMATTN_OK, "attention with O only");
    fixture_softmax(&f);
    f.out.p.data = NULL;
    expect(&f, SMATTN_OK, "softmax with LSE only");
}
END_TEST

START_TEST(null_pointers)
{
    fixture f;
    fixture_attention(&f);
    f.pp = NULL;
    expect(&f, SMATTN_ERR_NULL, "prob NULL");
    fixture_attention(&f);
    f.pi = NULL;
    expect(&f, SMATTN_ERR_NULL, "inputs NULL");
    fixture_attention(&f);
    f.po = NULL;
    expect(&f, SMATTN_ERR_NULL, "outputs NULL");
    fixture_attention(&f);
    f.in.q.data = NULL;
    expect(&f, SMATTN_ERR_NULL, "q NULL");
    fixture_attention(&f);
    f.in.k.data = NULL;
    expect(&f, SMATTN_ERR_NULL, "k NULL");
    fixture_attention(&f);
    f.in.v.data = NULL;
    expect(&f, SMATTN_ERR_NULL, "v NULL");
    fixture_attention(&f);
    f.out.o.data = NULL;
    expect(&f, SMATTN_ERR_NULL, "attention without O");
    fixture_softmax(&f);
    f.in.x.data = NULL;
    expect(&f, SMATTN_ERR_NULL, "x NULL");
    fixture_softmax(&f);
    f.out.p.data = NULL;
    f.out.lse.data = NULL;
    expect(&f, SMATTN_ERR_NULL, "softmax without P and LSE");
}
END_TEST

START_TEST(bad_dims)
{
    static const int64_t bad[4] = {0, -1, ((int64_t)1 << 32) + 1, INT64_MAX};
    for (int d = 0; d < 7; d++)
        for (int k = 0; k < 4; k++) {
            fixture f;
            fixture_attention(&f);
            int64_t *dims[7] = {&f.prob.B,   &f.prob.S, &f.prob.T, &f.prob.Hq,
                                &f.prob.Hkv, &f.prob.D, &f.prob.Dv};
            *dims[d] = bad[k];
            char what[64];
            snprintf(what, sizeof what, "dim %d = %" PRId64, d, bad[k]);
            expect(&f, SMATTN_ERR_SHAPE, what);
        }
    fixture f;
    fixture_softmax(&f);
    f.prob.T = 0;
    expect(&f, SMATTN_ERR_SHAPE, "softmax T = 0");
}
END_TEST

START_TEST(bad_heads_and_scalars)
{
    fixture f;
    fixture_attention(&f);
    f.prob.Hq = 3;
    f.prob.Hkv = 2;
    expect(&f, SMATTN_ERR_HEADS, "Hq 3 Hkv 2");
    fixture_attention(&f);
    f.prob.Hkv = 4;
    expect(&f, SMATTN_ERR_HEADS, "Hkv > Hq");

    static const double scales[3] = {NAN, INFINITY, -INFINITY};
    for (int k = 0; k < 3; k++) {
        fixture_attention(&f);
        f.prob.scale = scales[k];
        expect(&f, SMATTN_ERR_SCALE, "non-finite scale");
        fixture_softmax(&f);
        f.prob.scale = scales[k];
        expect(&f, SMATTN_ERR_SCALE, "softmax non-finite scale");
    }
    static const double caps[4] = {-1, -0x1p-1074, NAN, INFINITY};
    for (int k = 0; k < 4; k++) {
        fixture_attention(&f);
        f.prob.softcap = caps[k];
        expect(&f, SMATTN_ERR_SOFTCAP, "bad softcap");
    }
    static const int64_t wins[3] = {-2, -1000, INT64_MIN};
    for (int k = 0; k < 3; k++) {
        fixture_attention(&f);
        f.prob.window_left = wins[k];
        expect(&f, SMATTN_ERR_WINDOW, "bad window_left");
        fixture_attention(&f);
        f.prob.window_right = wins[k];
        expect(&f, SMATTN_ERR_WINDOW, "bad window_right");
    }
}
END_TEST

START_TEST(bad_lengths)
{
    fixture f;
    fixture_attention(&f);
    f.kv_lens[1] = -1;
    expect(&f, SMATTN_ERR_LENGTHS, "kv_len -1");
    fixture_attention(&f);
    f.kv_lens[0] = 4; /* T = 3 */
    expect(&f, SMATTN_ERR_LENGTHS, "kv_len T+1");
    fixture_attention(&f);
    f.q_lens[1] = -1;
    expect(&f, SMATTN_ERR_LENGTHS, "q_len -1");
    fixture_attention(&f);
    f.q_lens[0] = 3; /* S = 2 */
    expect(&f, SMATTN_ERR_LENGTHS, "q_len S+1");
    fixture_softmax(&f);
    f.kv_lens[0] = INT64_MAX;
    expect(&f, SMATTN_ERR_LENGTHS, "softmax kv_len huge");
    /* The bounds themselves are valid. */
    fixture_attention(&f);
    f.kv_lens[0] = 0;
    f.q_lens[1] = 0;
    expect(&f, SMATTN_OK, "lengths 0");
}
END_TEST

START_TEST(bad_options)
{
    static const int vals[2] = {-1, 99};
    for (int k = 0; k < 2; k++) {
        fixture f;
        fixture_attention(&f);
        f.prob.op = (smattn_op)(vals[k] < 0 ? 2 : vals[k]);
        expect(&f, SMATTN_ERR_OPTION, "op");
        fixture_attention(&f);
        f.prob.causal = (smattn_causal)(vals[k] < 0 ? 3 : vals[k]);
        expect(&f, SMATTN_ERR_OPTION, "causal");
        fixture_attention(&f);
        f.prob.empty_rows = (smattn_empty)(vals[k] < 0 ? 3 : vals[k]);
        expect(&f, SMATTN_ERR_OPTION, "empty_rows");
        fixture_attention(&f);
        f.prob.empty_lse = (smattn_empty_lse)(vals[k] < 0 ? 3 : vals[k]);
        expect(&f, SMATTN_ERR_OPTION, "empty_lse");
    }
}
END_TEST

START_TEST(bad_dtypes)
{
    fixture f;
    /* Inputs: float tensors reject BOOL and unknown values; the mask accepts only BOOL. */
    static const smattn_dtype notfloat[2] = {SMATTN_BOOL, (smattn_dtype)99};
    for (int k = 0; k < 2; k++) {
        for (int t = 0; t < 5; t++) {
            fixture_attention(&f);
            smattn_tensor *ts[5] = {&f.in.q, &f.in.k, &f.in.v, &f.in.bias, &f.in.sinks};
            ts[t]->dtype = notfloat[k];
            expect(&f, SMATTN_ERR_DTYPE, "input dtype");
        }
        fixture_softmax(&f);
        f.in.x.dtype = notfloat[k];
        expect(&f, SMATTN_ERR_DTYPE, "x dtype");
        for (int t = 0; t < 3; t++) {
            fixture_attention(&f);
            smattn_out_tensor *os[3] = {&f.out.o, &f.out.lse, &f.out.p};
            os[t]->dtype = notfloat[k];
            expect(&f, SMATTN_ERR_DTYPE, "output dtype");
        }
    }
    static const smattn_dtype floats[2] = {SMATTN_F32, SMATTN_F16};
    for (int k = 0; k < 2; k++) {
        fixture_attention(&f);
        f.in.mask.dtype = floats[k];
        expect(&f, SMATTN_ERR_DTYPE, "mask not BOOL");
    }
}
END_TEST

START_TEST(bad_strides)
{
    for (int t = 0; t < 9; t++)
        for (int d = 0; d < 4; d++) {
            fixture f;
            fixture_attention(&f);
            int64_t *st[9] = {f.in.q.stride,    f.in.k.stride,    f.in.v.stride,
                              f.in.bias.stride, f.in.mask.stride, f.in.sinks.stride,
                              f.out.o.stride,   f.out.lse.stride, f.out.p.stride};
            int rank = t == 5 ? 1 : t == 7 ? 3 : 4;
            if (d >= rank)
                continue; /* unused trailing strides are ignored */
            st[t][d] = -1;
            char what[64];
            snprintf(what, sizeof what, "tensor %d stride %d = -1", t, d);
            expect(&f, SMATTN_ERR_STRIDE, what);
        }
    fixture f;
    fixture_softmax(&f);
    f.in.x.stride[3] = INT64_MIN;
    expect(&f, SMATTN_ERR_STRIDE, "x stride INT64_MIN");
}
END_TEST

START_TEST(offsets_overflow)
{
    fixture f;
    fixture_attention(&f);
    f.in.k.stride[1] = INT64_MAX / 2; /* (T-1) * stride overflows */
    expect(&f, SMATTN_ERR_OVERFLOW, "k stride");
    fixture_attention(&f);
    f.in.q.stride[0] = INT64_MAX; /* B = 2 */
    expect(&f, SMATTN_ERR_OVERFLOW, "q stride INT64_MAX");
    fixture_attention(&f);
    f.out.p.stride[3] = INT64_MAX / 3 + 1; /* T = 3 */
    expect(&f, SMATTN_ERR_OVERFLOW, "p stride");
    fixture_attention(&f);
    f.in.bias.stride[0] = f.in.bias.stride[1] = INT64_MAX / 3; /* sum of offsets overflows */
    expect(&f, SMATTN_ERR_OVERFLOW, "bias strides sum");
    /* Valid dims whose byte size does not fit: T = Hkv-strided 2^32 keys of 2^31 elements. */
    fixture_attention(&f);
    f.prob.T = (int64_t)1 << 32;
    f.kv_lens[0] = f.kv_lens[1] = 1;
    f.in.k.stride[1] = (int64_t)1 << 31;
    expect(&f, SMATTN_ERR_OVERFLOW, "K of 2^63 elements");
}
END_TEST

/* Every smattn_ref_config field out of range is SMATTN_ERR_OPTION before any work (issue
 * 15: max_prec = LONG_MAX with fixed_prec = LONG_MAX / 2 made GMP abort). */
START_TEST(bad_ref_config)
{
    static const smattn_ref_config bad[] = {
        {.threads = -1},
        {.threads = INT32_MIN},
        {.max_prec = -1},
        {.max_prec = LONG_MAX, .fixed_prec = LONG_MAX / 2},
        {.max_prec = LONG_MAX},
        {.fixed_prec = LONG_MAX / 2},
        {.fixed_prec = LONG_MIN},
        {.max_prec = SMATTN_REF_PREC_MAX + 1},
        {.fixed_prec = SMATTN_REF_PREC_MAX + 1},
        {.max_prec = SMATTN_REF_PREC_MIN - 1},
        {.fixed_prec = 1},
        {.fixed_prec = SMATTN_REF_PREC_MIN - 1, .max_prec = 4096},
    };
    fixture f;
    fixture_attention(&f);
    for (size_t k = 0; k < sizeof bad / sizeof bad[0]; k++) {
        arena before = f.a;
        smattn_status st = smattn_ref(f.pp, f.pi, f.po, &bad[k], NULL);
        ck_assert_msg(st == SMATTN_ERR_OPTION, "config %zu: %s", k, smattn_status_name(st));
        ck_assert_msg(memcmp(&before, &f.a, sizeof f.a) == 0, "config %zu wrote", k);
    }
    /* the ends of the ranges are accepted */
    static const smattn_ref_config good[] = {
        {.threads = 1, .max_prec = SMATTN_REF_PREC_MIN, .fixed_prec = SMATTN_REF_PREC_MIN},
        {.threads = 1, .max_prec = SMATTN_REF_PREC_MAX, .fixed_prec = 4096, .no_fast_phase = 1},
        {.threads = 1 << 30},
    };
    for (size_t k = 0; k < sizeof good / sizeof good[0]; k++) {
        smattn_status st = smattn_ref(f.pp, f.pi, f.po, &good[k], NULL);
        ck_assert_msg(st == SMATTN_OK || (k == 0 && st == SMATTN_ERR_PRECISION), "good config %zu: %s", k,
                      smattn_status_name(st));
    }
}
END_TEST

START_TEST(outputs_alias)
{
    fixture f;
    fixture_attention(&f);
    f.out.o.stride[2] = 0; /* two heads to one place */
    expect(&f, SMATTN_ERR_ALIAS, "O overlaps itself");
    fixture_attention(&f);
    f.out.p.stride[3] = 0;
    expect(&f, SMATTN_ERR_ALIAS, "P overlaps itself");
    fixture_attention(&f);
    f.out.lse.stride[0] = 1; /* [B,Hq,S] = [2,2,2] with strides 1,2,1 */
    expect(&f, SMATTN_ERR_ALIAS, "LSE overlaps itself");
    fixture_attention(&f);
    f.out.lse.data = f.a.o + 5;
    expect(&f, SMATTN_ERR_ALIAS, "LSE inside O");
    fixture_attention(&f);
    f.out.p.data = f.a.o + 20; /* O has 24 elements */
    expect(&f, SMATTN_ERR_ALIAS, "P overlaps the end of O");
    fixture_attention(&f);
    f.out.o.data = f.a.q;
    expect(&f, SMATTN_ERR_ALIAS, "O over q");
    fixture_attention(&f);
    f.out.o.data = f.a.v + 10;
    expect(&f, SMATTN_ERR_ALIAS, "O over v");
    fixture_attention(&f);
    f.out.p.data = f.a.mask; /* 24 floats from the mask's first byte */
    expect(&f, SMATTN_ERR_ALIAS, "P over the mask");
    fixture_attention(&f);
    f.out.lse.data = f.a.sinks;
    expect(&f, SMATTN_ERR_ALIAS, "LSE over the sinks");
    fixture_softmax(&f);
    f.out.p.data = f.a.x + 1;
    expect(&f, SMATTN_ERR_ALIAS, "P over x");
    /* Disjoint neighbours are fine: LSE right after O's last element. */
    fixture_attention(&f);
    f.out.lse.data = f.a.o + 2 * 2 * 2 * 3;
    expect(&f, SMATTN_OK, "LSE just after O");
}
END_TEST

Suite *ref_api_suite(void);
Suite *ref_api_suite(void)
{
    Suite *s = suite_create("ref_api");
    TCase *tc = tcase_create("ref_api");
    tcase_set_timeout(tc, 60);
    tcase_add_test(tc, valid_fixtures_pass);
    tcase_add_test(tc, null_pointers);
    tcase_add_test(tc, bad_dims);
    tcase_add_test(tc, bad_heads_and_scalars);
    tcase_add_test(tc, bad_lengths);
    tcase_add_test(tc, bad_options);
    tcase_add_test(tc, bad_dtypes);
    tcase_add_test(tc, bad_strides);
    tcase_add_test(tc, offsets_overflow);
    tcase_add_test(tc, outputs_alias);
    tcase_add_test(tc, bad_ref_config);
    suite_add_tcase(s, tc);
    return s;
}
