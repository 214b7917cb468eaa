/* SPDX-License-Identifier: MIT */
/* test_ref_fast.c: the oracle's fast phase (SPEC 5.2) against its MPFR-only path, bit for
 * bit, on values built to sit just beside rounding boundaries, where an error bound that
 * is too small would show as a wrong decision. */
#include <check.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "smattn.h"

typedef struct row2 {
    smattn_problem p;
    smattn_inputs in;
    double q[4], k[8], v[8], bias[4];
} row2;

/* One query, keys with scores q.k = k_j (D = 1, scale 1), V values as given. */
static void make(row2 *r, int T, const double *k, const double *v, int Dv)
{
    memset(r, 0, sizeof *r);
    r->p = smattn_problem_default();
    r->p.B = r->p.S = r->p.Hq = r->p.Hkv = r->p.D = 1;
    r->p.T = T;
    r->p.Dv = Dv;
    r->q[0] = 1;
    memcpy(r->k, k, (size_t)T * sizeof(double));
    memcpy(r->v, v, (size_t)(T * Dv) * sizeof(double));
    r->in.q = (smattn_tensor){r->q, SMATTN_F64, {0}};
    r->in.k = (smattn_tensor){r->k, SMATTN_F64, {0}};
    r->in.v = (smattn_tensor){r->v, SMATTN_F64, {0}};
    smattn_contiguous_strides(&r->p, 'q', r->in.q.stride);
    smattn_contiguous_strides(&r->p, 'k', r->in.k.stride);
    smattn_contiguous_strides(&r->p, 'v', r->in.v.stride);
}

/* Run with and without the fast phase in dtype t; returns 1 if the bits agree. */
static int agree(const row2 *r, smattn_dtype t, double *o_out)
{
    unsigned char o[2][64], l[2][8], pp[2][64];
    for (int f = 0; f < 2; f++) {
        smattn_outputs out;
        memset(&out, 0, sizeof out);
        out.o = (smattn_out_tensor){o[f], t, {0}};
        out.lse = (smattn_out_tensor){l[f], t, {0}};
        out.p = (smattn_out_tensor){pp[f], t, {0}};
        smattn_contiguous_strides(&r->p, 'o', out.o.stride);
        smattn_contiguous_strides(&r->p, 'l', out.lse.stride);
        smattn_contiguous_strides(&r->p, 'p', out.p.stride);
        smattn_ref_config cfg = {1, 0, f, 0};
        smattn_status st = smattn_ref(&r->p, &r->in, &out, &cfg, NULL);
        if (st) {
            fprintf(stderr, "smattn_ref: %s\n", smattn_status_name(st));
            return 0;
        }
    }
    size_t es = smattn_dtype_size(t);
    if (o_out)
        *o_out = smattn_load(o[0], t, 0);
    return memcmp(o[0], o[1], (size_t)r->p.Dv * es) == 0 && memcmp(l[0], l[1], es) == 0 &&
           memcmp(pp[0], pp[1], (size_t)r->p.T * es) == 0;
}

/* O = m + (v1 - m) e^-g / (1 + e^-g) with m a midpoint of t: as g grows the distance to
 * the midpoint shrinks from 1e-9 to far below the fast phase's error bound, crossing it. */
START_TEST(fast_phase_near_midpoints)
{
    const smattn_dtype ts[4] = {SMATTN_F32, SMATTN_F16, SMATTN_BF16, SMATTN_F64};
    const double mids[4] = {1 + 0x1p-24, 1 + 0x1p-11, 1 + 0x1p-8, 0};
    int bad = 0, tried = 0;
    for (int a = 0; a < 4; a++) {
        for (double g = 15; g < 95; g += 0.173) {
            for (int side = -1; side <= 1; side += 2) {
                double m = a == 3 ? 1 + 0x1p-40 : mids[a];
                double k[2] = {0, -g};
                double v[2] = {m, m + side * 3.0};
                if (a == 3) /* binary64: a value just beside 1 + 2^-40 + half an ulp */
                    v[0] = nextafter(1.0, 2.0), v[1] = 1.0 + side * 0x1p-30;
                row2 r;
                make(&r, 2, k, v, 1);
                tried++;
                double o;
                if (!agree(&r, ts[a], &o)) {
                    if (bad++ < 5)
                        fprintf(stderr, "fast vs MPFR differ: dtype %s gap %.17g side %d\n",
                                smattn_dtype_name(ts[a]), g, side);
                }
            }
        }
    }
    ck_assert_msg(bad == 0, "%d of %d near-midpoint rows differ", bad, tried);
}
END_TEST

/* Large, close scores (|s| ~ 2^40 apart by O(1)) stress the u^2 |s| terms of the shift. */
START_TEST(fast_phase_large_close_scores)
{
    int bad = 0, tried = 0;
    for (int e = 10; e <= 60; e += 5)
        for (int n = 0; n < 40; n++) {
            double base = ldexp(1.0, e);
            double k[4] = {base, base - 0.5 - n * 0.01, base - 1.25, base - 3};
            double v[4] = {1 + 0x1p-24, 1, 2, -1};
            row2 r;
            make(&r, 4, k, v, 1);
            for (int t = 0; t < 4; t++) {
                tried++;
                if (!agree(&r, (smattn_dtype)t, NULL) && bad++ < 5)
                    fprintf(stderr, "fast vs MPFR differ: 2^%d n %d dtype %d\n", e, n, t);
            }
        }
    ck_assert_msg(bad == 0, "%d of %d rows differ", bad, tried);
}
END_TEST

/* Outputs in the subnormal range and at the overflow edge of each dtype. */
START_TEST(fast_phase_subnormal_and_overflow)
{
    int bad = 0, tried = 0;
    for (int t = 0; t < 4; t++)
        for (int n = 0; n < 60; n++) {
            double scale_v = t == 0 ? 0x1p-1070 : t == 1 ? 0x1p-147 : t == 2 ? 0x1p-23 : 0x1p-131;
            double big = t == 1 ? 0x1.fffffep127 : t == 2 ? 65504.0 * (1 + n % 3 * 0x1p-12)
                                                           : t == 3 ? 0x1.fep127 : 0x1p1000;
            double k[3] = {0, -0.3 * n, -1};
            double v1[3] = {scale_v * (1 + n), scale_v * 3, -scale_v};
            double v2[3] = {big, big * 0.999, big};
            row2 r;
            make(&r, 3, k, v1, 1);
            tried++;
            bad += !agree(&r, (smattn_dtype)t, NULL);
            make(&r, 3, k, v2, 1);
            tried++;
            bad += !agree(&r, (smattn_dtype)t, NULL);
        }
    ck_assert_msg(bad == 0, "%d of %d rows differ", bad, tried);
}
END_TEST

Suite *ref_fast_suite(void);
Suite *ref_fast_suite(void)
{
    Suite *s = suite_create("ref_fast");
    TCase *tc = tcase_create("fast");
    tcase_set_timeout(tc, 300);
    tcase_add_test(tc, fast_phase_near_midpoints);
    tcase_add_test(tc, fast_phase_large_close_scores);
    tcase_add_test(tc, fast_phase_subnormal_and_overflow);
    suite_add_tcase(s, tc);
    return s;
}
