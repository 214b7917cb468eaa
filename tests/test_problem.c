/* test_problem.c: descriptor defaults, validation and visibility (SPEC 2-3). */
#include <check.h>
#include <math.h>
#include <string.h>

#include "core/internal.h"

START_TEST(default_scale_is_nearest)
{
    ck_assert(smattn_default_scale(4) == 0.5);
    ck_assert(smattn_default_scale(1) == 1.0);
    /* 1/sqrt(128) = 2^-3.5; its binary64 rounding per MPFR is 0x1.6a09e667f3bcdp-4. */
    ck_assert(smattn_default_scale(128) == 0x1.6a09e667f3bcdp-4);
    ck_assert(smattn_default_scale(0) == 0.0);
}
END_TEST

START_TEST(key_range_alignments)
{
    smattn_problem p = smattn_problem_default();
    p.B = 1; p.S = 2; p.T = 5; p.Hq = p.Hkv = 1; p.D = p.Dv = 1;
    int64_t lo, hi;
    p.causal = SMATTN_CAUSAL_LOWER_RIGHT; /* j <= i + 3 */
    smattn__key_range(&p, 0, 0, &lo, &hi);
    ck_assert_int_eq(lo, 0); ck_assert_int_eq(hi, 4);
    smattn__key_range(&p, 0, 1, &lo, &hi);
    ck_assert_int_eq(hi, 5);
    p.causal = SMATTN_CAUSAL_UPPER_LEFT; /* j <= i */
    smattn__key_range(&p, 0, 0, &lo, &hi);
    ck_assert_int_eq(hi, 1);
    /* S > T lower-right: the first rows see nothing. */
    p.S = 5; p.T = 2; p.causal = SMATTN_CAUSAL_LOWER_RIGHT;
    smattn__key_range(&p, 0, 2, &lo, &hi);
    ck_assert_int_ge(lo, hi);
    smattn__key_range(&p, 0, 3, &lo, &hi);
    ck_assert_int_eq(lo, 0); ck_assert_int_eq(hi, 1);
    /* Window [2, 0] around the lower-right diagonal, and huge bounds do not overflow. */
    p.S = 1; p.T = 10; p.window_left = 2; p.window_right = 0;
    smattn__key_range(&p, 0, 0, &lo, &hi);
    ck_assert_int_eq(lo, 7); ck_assert_int_eq(hi, 10);
    p.window_left = INT64_MAX; p.window_right = INT64_MAX; p.causal = SMATTN_CAUSAL_NONE;
    smattn__key_range(&p, 0, 0, &lo, &hi);
    ck_assert_int_eq(lo, 0); ck_assert_int_eq(hi, 10);
}
END_TEST

START_TEST(validate_rejects)
{
    float q[4] = {0}, k[4] = {0}, v[4] = {0}, o[4];
    smattn_problem p = smattn_problem_default();
    p.B = 1; p.S = 1; p.T = 2; p.Hq = 2; p.Hkv = 1; p.D = 1; p.Dv = 1;
    smattn_inputs in = {0};
    smattn_outputs out = {0};
    in.q = (smattn_tensor){q, SMATTN_F32, {0}};
    in.k = (smattn_tensor){k, SMATTN_F32, {0}};
    in.v = (smattn_tensor){v, SMATTN_F32, {0}};
    out.o = (smattn_out_tensor){o, SMATTN_F32, {0}};
    smattn_contiguous_strides(&p, 'q', in.q.stride);
    smattn_contiguous_strides(&p, 'k', in.k.stride);
    smattn_contiguous_strides(&p, 'v', in.v.stride);
    smattn_contiguous_strides(&p, 'o', out.o.stride);
    ck_assert_int_eq(smattn_validate(&p, &in, &out), SMATTN_OK);
    ck_assert_int_eq(smattn_validate(NULL, &in, &out), SMATTN_ERR_NULL);
    p.Hkv = 3;
    ck_assert_int_eq(smattn_validate(&p, &in, &out), SMATTN_ERR_HEADS);
    p.Hkv = 1; p.scale = NAN;
    ck_assert_int_eq(smattn_validate(&p, &in, &out), SMATTN_ERR_SCALE);
    p.scale = 1; p.T = 0;
    ck_assert_int_eq(smattn_validate(&p, &in, &out), SMATTN_ERR_SHAPE);
    p.T = 2; p.window_left = -2;
    ck_assert_int_eq(smattn_validate(&p, &in, &out), SMATTN_ERR_WINDOW);
    p.window_left = -1; out.o.stride[2] = 0; /* two heads written to one place */
    ck_assert_int_eq(smattn_validate(&p, &in, &out), SMATTN_ERR_ALIAS);
    smattn_contiguous_strides(&p, 'o', out.o.stride);
    out.o.data = q; /* output over an input */
    ck_assert_int_eq(smattn_validate(&p, &in, &out), SMATTN_ERR_ALIAS);
    out.o.data = o; in.k.stride[1] = INT64_MAX / 2;
    ck_assert_int_eq(smattn_validate(&p, &in, &out), SMATTN_ERR_OVERFLOW);
    smattn_contiguous_strides(&p, 'k', in.k.stride);
    in.v.stride[3] = -1;
    ck_assert_int_eq(smattn_validate(&p, &in, &out), SMATTN_ERR_STRIDE);
    smattn_contiguous_strides(&p, 'v', in.v.stride);
    p.causal = (smattn_causal)7;
    ck_assert_int_eq(smattn_validate(&p, &in, &out), SMATTN_ERR_OPTION);
    ck_assert_str_eq(smattn_status_name(SMATTN_ERR_HEADS), "SMATTN_ERR_HEADS");
    ck_assert_str_eq(smattn_status_str((smattn_status)999), "unknown status code");
}
END_TEST

START_TEST(round_bits_matches_hardware)
{
    /* binary64 -> binary32 rounding by integer arithmetic agrees with the FPU's cast. */
    uint64_t s = 0x9E3779B97F4A7C15u;
    for (int n = 0; n < 200000; n++) {
        s ^= s << 13; s ^= s >> 7; s ^= s << 17;
        double x;
        uint64_t bits = s;
        if (n % 3 == 0) /* force the binary32 subnormal and overflow neighbourhoods */
            bits = (bits & 0x800FFFFFFFFFFFFFu) | ((uint64_t)(0x380 - 30 + (int)(s >> 60) * 4) << 52);
        if (n % 3 == 1)
            bits = (bits & 0x800FFFFFFFFFFFFFu) | ((uint64_t)(0x47E + (int)(s >> 61)) << 52);
        memcpy(&x, &bits, 8);
        float f = (float)x;
        uint32_t fb;
        memcpy(&fb, &f, 4);
        if (isnan(x))
            continue;
        ck_assert_msg(smattn__round_bits(x, SMATTN_F32) == fb, "x=%a", x);
    }
    ck_assert(smattn__round_bits(65520.0, SMATTN_F16) == 0x7c00);       /* overflow at the midpoint */
    ck_assert(smattn__round_bits(65519.99, SMATTN_F16) == 0x7bff);
    ck_assert(smattn__round_bits(0x1p-25, SMATTN_F16) == 0);            /* tie to even zero */
    ck_assert(smattn__round_bits(0x1.8p-25, SMATTN_F16) == 1);
    ck_assert(smattn__round_bits(1.0 + 0x1p-8, SMATTN_BF16) == 0x3f80); /* tie to even */
    ck_assert(smattn__round_bits(1.0 + 0x3p-8, SMATTN_BF16) == 0x3f82);
    ck_assert(smattn__f16_to_double(0x0001) == 0x1p-24);
    ck_assert(smattn__bf16_to_double(0x3f80) == 1.0);
}
END_TEST

Suite *problem_suite(void);
Suite *problem_suite(void)
{
    Suite *s = suite_create("problem");
    TCase *tc = tcase_create("core");
    tcase_add_test(tc, default_scale_is_nearest);
    tcase_add_test(tc, key_range_alignments);
    tcase_add_test(tc, validate_rejects);
    tcase_add_test(tc, round_bits_matches_hardware);
    suite_add_tcase(s, tc);
    return s;
}
