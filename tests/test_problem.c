/* SPDX-License-Identifier: MIT */
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
    /* every binary16 pattern against the definition (-1)^s 2^(e-15) (1 + m/2^10), 2^-14 m/2^10
     * below (IEEE 754 3.4), signed zeros and NaN's sign aside; and back to the same bits */
    int bad = 0;
    for (uint32_t h = 0; h < 65536; h++) {
        int e = (int)(h >> 10 & 31), m = (int)(h & 1023);
        double x = smattn__f16_to_double((uint16_t)h);
        double want = e == 31 ? (m ? (double)NAN : HUGE_VAL)
                              : e ? ldexp(1024 + m, e - 25) : ldexp(m, -24);
        if (h >> 15)
            want = -want;
        bad += e == 31 && m ? !isnan(x)
                            : x != want || !!signbit(x) != (int)(h >> 15) ||
                                  smattn__round_bits(x, SMATTN_F16) != h;
    }
    ck_assert_int_eq(bad, 0);
}
END_TEST


/* ---- core/mask.c against brute-force restatements of the spec (the proofs' twin) ------- */
/* Check's ck_assert reports every call to the parent process: the exhaustive loops below
 * count their failures and assert once. */
#define EXPECT(c) (bad += !(c))

/* SPEC 3.1-3.3 word for word: the formula the contract of smattn__key_interval restates. */
static int spec_allows(int causal, int64_t wl, int64_t wr, int64_t Sb, int64_t Tb, int64_t i,
                       int64_t j)
{
    int64_t d = causal == SMATTN_CAUSAL_UPPER_LEFT ? i : i + Tb - Sb;
    if (i < 0 || i >= Sb || j < 0 || j >= Tb)
        return 0;
    if (causal != SMATTN_CAUSAL_NONE && j > d)
        return 0;
    if (wl >= 0 && d - j > wl) /* j >= d - wl, without forming d - wl */
        return 0;
    if (wr >= 0 && j - d > wr) /* j <= d + wr */
        return 0;
    return 1;
}

START_TEST(key_interval_is_the_spec)
{
    /* every kind, window and length pair on small shapes, S > T included */
    const int64_t wins[] = {-1, 0, 1, 2, 5, INT64_MAX};
    long n = 0;
    for (int causal = 0; causal <= 2; causal++)
        for (int a = 0; a < 6; a++)
            for (int c = 0; c < 6; c++)
                for (int64_t Sb = 0; Sb <= 7; Sb++)
                    for (int64_t Tb = 0; Tb <= 7; Tb++)
                        for (int64_t i = 0; i <= 8; i++) {
                            int64_t lo, hi;
                            smattn__key_interval(causal, wins[a], wins[c], Sb, Tb, i, &lo, &hi);
                            int ok = 0 <= lo && lo <= hi && hi <= Tb;
                            for (int64_t j = -2; j <= 9; j++)
                                ok &= (lo <= j && j < hi) ==
                                      spec_allows(causal, wins[a], wins[c], Sb, Tb, i, j);
                            if (!ok)
                                ck_abort_msg("causal=%d wl=%lld wr=%lld Sb=%lld Tb=%lld i=%lld",
                                          causal, (long long)wins[a], (long long)wins[c],
                                             (long long)Sb, (long long)Tb, (long long)i);
                            n++;
                        }
    ck_assert_int_eq(n, 3 * 6 * 6 * 8 * 8 * 9);
    /* the largest shapes: no overflow, the same answers at the far end */
    int64_t lo, hi, M = SMATTN_MAX_DIM;
    smattn__key_interval(SMATTN_CAUSAL_LOWER_RIGHT, INT64_MAX, INT64_MAX, M, M, M - 1, &lo, &hi);
    ck_assert(lo == 0 && hi == M);
    smattn__key_interval(SMATTN_CAUSAL_LOWER_RIGHT, 0, 0, M, 1, 0, &lo, &hi);
    ck_assert(lo == hi);
    smattn__key_interval(SMATTN_CAUSAL_UPPER_LEFT, 3, INT64_MAX, 1, M, 0, &lo, &hi);
    ck_assert(lo == 0 && hi == 1);
}
END_TEST

START_TEST(head_group_is_contiguous)
{
    for (int64_t Hkv = 1; Hkv <= 8; Hkv++)
        for (int64_t G = 1; G <= 8; G++) {
            int64_t Hq = Hkv * G;
            for (int64_t h = 0; h < Hq; h++) {
                int64_t g = smattn__head_group(Hq, Hkv, h);
                ck_assert(g == h / G && g * G <= h && h < g * G + G);
            }
            ck_assert_int_eq(smattn__head_walk_hits(Hq, Hkv, Hq - 1), 1);
            ck_assert_int_eq(smattn__head_walk_hits(Hq, Hkv, Hq), 0);
        }
    ck_assert_int_eq(smattn__head_group(28, 4, 6), 0); /* SPEC 2.2's example */
    ck_assert_int_eq(smattn__head_group(28, 4, 7), 1);
}
END_TEST

START_TEST(max_offset_is_the_span)
{
    /* brute force: the largest offset over every index of small tensors */
    uint64_t x = 0x2545F4914F6CDD1Du;
    for (int t = 0; t < 2000; t++) {
        int64_t n[4], s[4];
        int rank = 1 + t % 4;
        for (int r = 0; r < 4; r++) {
            x ^= x << 13; x ^= x >> 7; x ^= x << 17;
            n[r] = 1 + (int64_t)(x % 4);
            s[r] = (int64_t)((x >> 8) % 9) - (t % 7 == 0 ? 1 : 0);
        }
        int64_t want = 0, neg = 0;
        for (int r = 0; r < rank; r++)
            neg |= s[r] < 0;
        for (int64_t a = 0; a < (rank > 0 ? n[0] : 1); a++)
            for (int64_t b = 0; b < (rank > 1 ? n[1] : 1); b++)
                for (int64_t c = 0; c < (rank > 2 ? n[2] : 1); c++)
                    for (int64_t d = 0; d < (rank > 3 ? n[3] : 1); d++) {
                        int64_t ss[4] = {s[0], rank > 1 ? s[1] : 0, rank > 2 ? s[2] : 0,
                                         rank > 3 ? s[3] : 0};
                        int64_t o = smattn__off4(ss, a, b, c, d);
                        want = o > want ? o : want;
                    }
        ck_assert_int_eq(smattn__max_offset(rank, n, s), neg ? -2 : want);
    }
    /* the overflow edge: a span of exactly INT64_MAX is accepted, one more is not */
    int64_t n2[2] = {2, 2}, s2[2] = {INT64_MAX - 5, 5};
    ck_assert_int_eq(smattn__max_offset(2, n2, s2), INT64_MAX);
    s2[1] = 6;
    ck_assert_int_eq(smattn__max_offset(2, n2, s2), -1);
    int64_t n3[1] = {((int64_t)1 << 32)}, s3[1] = {(int64_t)1 << 31};
    ck_assert_int_eq(smattn__max_offset(1, n3, s3), (((int64_t)1 << 32) - 1) << 31);
    s3[0] = (int64_t)1 << 32;
    ck_assert_int_eq(smattn__max_offset(1, n3, s3), -1);
}
END_TEST

START_TEST(tiles_cover_once_and_skip_only_empty)
{
    long bad = 0;
    /* the kernel's tiling as the proofs state it, by brute force on small grids */
    for (int64_t T = 1; T <= 40; T++)
        for (int64_t chunk = 1; chunk <= 9; chunk++) {
            int64_t nc = (T + chunk - 1) / chunk;
            for (int64_t j = -1; j <= T; j++) {
                EXPECT(smattn__chunk_walk_hits(T, nc, chunk, j) == (j >= 0 && j < T));
                EXPECT(smattn__chunk_walk_hits(T, 1, chunk, j) == (j >= 0 && j < T));
            }
            EXPECT(smattn__qtile_walk_hits(T, chunk, T - 1) == 1);
            EXPECT(smattn__qtile_walk_hits(T, chunk, T) == 0);
        }
    for (int64_t bk = 1; bk <= 5; bk++)
        for (int64_t kmin = 0; kmin <= 12; kmin++)
            for (int64_t kmax = 0; kmax <= 12; kmax++) {
                int64_t f = smattn__tile_first(kmin, kmax, bk);
                if (kmax > kmin)
                    EXPECT(f % bk == 0 && f <= kmin && kmin < f + bk);
                for (int64_t j = 0; j <= 13; j++) {
                    int hits = smattn__tile_walk_hits(kmin, kmax, bk, j);
                    if (j >= kmin && j < kmax)
                        EXPECT(hits == 1);
                    if (j >= kmax)
                        EXPECT(hits == 0);
                }
                for (int64_t lo = 0; lo <= 12; lo++)
                    for (int64_t hi = lo; hi <= 12; hi++) {
                        int64_t a = lo, b = hi, mn = 99, mx = 0;
                        smattn__clip_keys(kmin, kmax < kmin ? kmin : kmax, &a, &b);
                        for (int64_t j = 0; j <= 13; j++)
                            EXPECT((a <= j && j < b) ==
                                   (lo <= j && j < hi && kmin <= j && j < kmax));
                        smattn__hull_add(lo, hi, &mn, &mx);
                        EXPECT(lo == hi ? mn == 99 && mx == 0 : mn == lo && mx == hi);
                        if (kmax <= kmin || lo == hi) /* the kernel skips empty rows first */
                            continue;
                        int64_t nk = smattn__tile_keys(kmin, kmax, bk), seen = 0;
                        for (int64_t j = kmin; j < kmin + nk; j++)
                            seen |= lo <= j && j < hi;
                        EXPECT((smattn__tile_skips(lo, hi, kmin, nk) != 0) == !seen);
                    }
            }
    ck_assert_int_eq(bad, 0);
}
END_TEST

/* Public helpers are defined for every input: overflow is reported, not
 * computed (the sanitizer build turns a signed overflow into a failure). */
START_TEST(public_helpers_any_input)
{
    smattn_problem p = smattn_problem_default();
    p.B = 2, p.S = 3, p.T = 5, p.Hq = 4, p.Hkv = 2, p.D = 6, p.Dv = 7;
    int64_t s[4];
    ck_assert_int_eq(smattn_contiguous_strides(&p, 'q', s), SMATTN_OK);
    ck_assert(s[0] == 72 && s[1] == 24 && s[2] == 6 && s[3] == 1);
    ck_assert_int_eq(smattn_contiguous_strides(&p, 'l', s), SMATTN_OK);
    ck_assert(s[0] == 12 && s[1] == 3 && s[2] == 1 && s[3] == 0);
    ck_assert_int_eq(smattn_contiguous_strides(&p, 'z', s), SMATTN_ERR_OPTION);
    ck_assert(s[0] == 0 && s[1] == 0 && s[2] == 0 && s[3] == 0);
    ck_assert_int_eq(smattn_contiguous_strides(NULL, 'q', s), SMATTN_ERR_NULL);
    ck_assert_int_eq(smattn_contiguous_strides(&p, 'q', NULL), SMATTN_ERR_NULL);
    static const int64_t huge[] = {INT64_MAX, INT64_MIN, (int64_t)1 << 62, (int64_t)1 << 32, -1, 0};
    static const char roles[] = "qkvolxpbs";
    for (size_t a = 0; a < sizeof huge / sizeof huge[0]; a++)
        for (int f = 0; f < 7; f++)
            for (int r = 0; roles[r]; r++) {
                smattn_problem q = p;
                int64_t *dims[] = {&q.B, &q.S, &q.T, &q.Hq, &q.Hkv, &q.D, &q.Dv};
                *dims[f] = huge[a];
                smattn_status st = smattn_contiguous_strides(&q, roles[r], s);
                ck_assert(st == SMATTN_OK || st == SMATTN_ERR_OVERFLOW || st == SMATTN_ERR_SHAPE);
                if (st != SMATTN_OK)
                    ck_assert(s[0] == 0 && s[1] == 0 && s[2] == 0 && s[3] == 0);
            }
    p.T = INT64_MAX; /* the fuzz_api finding: 9223372036854775807 * 6 */
    ck_assert_int_eq(smattn_contiguous_strides(&p, 'k', s), SMATTN_ERR_OVERFLOW);
    /* visibility outside the shape: 0, no offset computed */
    p.T = 5;
    unsigned char mask[2 * 4 * 3 * 5];
    memset(mask, 1, sizeof mask);
    smattn_inputs in;
    memset(&in, 0, sizeof in);
    in.mask = (smattn_tensor){mask, SMATTN_BOOL, {0}};
    smattn_contiguous_strides(&p, 'b', in.mask.stride);
    ck_assert_int_eq(smattn_visible(&p, &in, 1, 3, 2, 4), 1);
    ck_assert_int_eq(smattn_visible(&p, &in, INT64_MAX, 0, 0, 0), 0);
    ck_assert_int_eq(smattn_visible(&p, &in, 0, INT64_MIN, 0, 0), 0);
    ck_assert_int_eq(smattn_visible(&p, &in, 0, 0, 3, 0), 0);
    ck_assert_int_eq(smattn_visible(&p, &in, 0, 0, 0, -1), 0);
    ck_assert_int_eq(smattn_visible(NULL, &in, 0, 0, 0, 0), 0);
    /* an unknown dtype stores nothing and loads NaN */
    unsigned char buf[16];
    memset(buf, 0x5a, sizeof buf);
    smattn_store(buf, (smattn_dtype)99, 0, 1.0);
    smattn_store(buf, (smattn_dtype)-1, 0, 1.0);
    for (size_t k = 0; k < sizeof buf; k++)
        ck_assert_int_eq(buf[k], 0x5a);
    ck_assert(isnan(smattn_load(buf, (smattn_dtype)99, 0)));
    /* the kernel's model for any T */
    p.T = INT64_MAX;
    smattn_precision m = smattn_opt_precision(&p);
    ck_assert(m.blocks >= 1 && m.acc_len >= 1);
    p.T = INT64_MIN;
    m = smattn_opt_precision(&p);
    ck_assert(m.blocks >= 1);
    ck_assert_str_eq(smattn_status_name((smattn_status)-5), "SMATTN_ERR_UNKNOWN");
    ck_assert(smattn_default_scale(INT64_MIN) == 0 && smattn_default_scale(INT64_MAX) == 0);
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
    tcase_add_test(tc, key_interval_is_the_spec);
    tcase_add_test(tc, head_group_is_contiguous);
    tcase_add_test(tc, max_offset_is_the_span);
    tcase_add_test(tc, tiles_cover_once_and_skip_only_empty);
    tcase_add_test(tc, public_helpers_any_input);
    suite_add_tcase(s, tc);
    return s;
}
