/* SPDX-License-Identifier: MIT */
/* test_quant.c: 8-bit and block-quantised inputs with descales (SPEC 2.9): exact decoding
 * worked by hand, validation, and the oracle and the bound on a quantised problem equal to
 * those of its binary64 twin holding the decoded values times the descales. */
#include <check.h>
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/internal.h"
#include "smattn.h"
#include "support/testkit.h"

static double ld8(smattn_dtype t, uint8_t b)
{
    return smattn_load(&b, t, 0);
}

START_TEST(dtype_sizes_names_blocks)
{
    ck_assert_uint_eq(smattn_dtype_size(SMATTN_F8E4M3), 1);
    ck_assert_uint_eq(smattn_dtype_size(SMATTN_F8E5M2), 1);
    ck_assert_uint_eq(smattn_dtype_size(SMATTN_Q8_0), 34);
    ck_assert_uint_eq(smattn_dtype_size(SMATTN_Q4_0), 18);
    ck_assert_int_eq(smattn_dtype_block(SMATTN_Q8_0), SMATTN_QBLOCK);
    ck_assert_int_eq(smattn_dtype_block(SMATTN_Q4_0), 32);
    ck_assert_int_eq(smattn_dtype_block(SMATTN_F8E4M3), 1);
    ck_assert_int_eq(smattn_dtype_block(SMATTN_F32), 1);
    ck_assert_int_eq(smattn_dtype_block((smattn_dtype)9), 0);
    ck_assert_uint_eq(smattn_dtype_size((smattn_dtype)9), 0);
    ck_assert_str_eq(smattn_dtype_name(SMATTN_F8E4M3), "f8e4m3");
    ck_assert_str_eq(smattn_dtype_name(SMATTN_F8E5M2), "f8e5m2");
    ck_assert_str_eq(smattn_dtype_name(SMATTN_Q8_0), "q8_0");
    ck_assert_str_eq(smattn_dtype_name(SMATTN_Q4_0), "q4_0");
    smattn_descale d = smattn_descale_default();
    ck_assert(d.q == 1 && d.k == 1 && d.v == 1 && !d.q_head && !d.k_head && !d.v_head);
}
END_TEST

/* e4m3fn by hand: bias 7, no infinity, only S.1111.111 is NaN, max 448, subnormals m 2^-9. */
START_TEST(e4m3_by_hand)
{
    const smattn_dtype t = SMATTN_F8E4M3;
    ck_assert(ld8(t, 0x00) == 0 && !signbit(ld8(t, 0x00)));
    ck_assert(ld8(t, 0x80) == 0 && signbit(ld8(t, 0x80)));
    ck_assert(ld8(t, 0x01) == 0x1p-9);      /* smallest subnormal */
    ck_assert(ld8(t, 0x07) == 0x7p-9);      /* largest subnormal */
    ck_assert(ld8(t, 0x08) == 0x1p-6);      /* smallest normal */
    ck_assert(ld8(t, 0x38) == 1.0);         /* e = 7, m = 0 */
    ck_assert(ld8(t, 0x3c) == 1.5);
    ck_assert(ld8(t, 0x78) == 256.0);       /* exponent field 15 is a number */
    ck_assert(ld8(t, 0x7e) == 448.0);       /* the largest */
    ck_assert(ld8(t, 0xfe) == -448.0);
    ck_assert(isnan(ld8(t, 0x7f)) && isnan(ld8(t, 0xff)));
    int nans = 0;
    for (int b = 0; b < 256; b++) {
        double x = ld8(t, (uint8_t)b);
        ck_assert(!isinf(x));
        ck_assert(x == smattn__bits_to_double((uint64_t)b, t) || (isnan(x) && b % 128 == 127));
        if (isnan(x)) {
            nans++;
            continue;
        }
        ck_assert_msg(smattn__round_bits(x, t) == (uint64_t)b, "byte 0x%02x (%a)", b, x);
    }
    ck_assert_int_eq(nans, 2);
    /* rounding: nearest-even; past 464 (halfway to 480, which is NaN's place) is NaN */
    ck_assert_uint_eq(smattn__round_bits(449.0, t), 0x7e);
    ck_assert_uint_eq(smattn__round_bits(464.0, t), 0x7e); /* tie to even (1.110b) */
    ck_assert_uint_eq(smattn__round_bits(465.0, t), 0x7f);
    ck_assert_uint_eq(smattn__round_bits(-HUGE_VAL, t), 0xff);
    ck_assert_uint_eq(smattn__round_bits(0x1p-10, t), 0x00); /* tie to even zero */
    ck_assert_uint_eq(smattn__round_bits(0x3p-10, t), 0x02); /* 1.5 subnormal quanta: 2 */
    ck_assert_uint_eq(smattn__round_bits(0xfp-10, t), 0x08); /* 7.5 quanta: the smallest normal */
    ck_assert_uint_eq(smattn__round_bits(1.0 + 0x1p-4, t), 0x38); /* tie to even */
    uint8_t byte = 0;
    smattn_store(&byte, t, 0, -1.5);
    ck_assert_uint_eq(byte, 0xbc);
}
END_TEST

/* e5m2 by hand: binary16's top byte, with infinities and three NaN mantissas per sign. */
START_TEST(e5m2_by_hand)
{
    const smattn_dtype t = SMATTN_F8E5M2;
    ck_assert(ld8(t, 0x3c) == 1.0);
    ck_assert(ld8(t, 0x01) == 0x1p-16);
    ck_assert(ld8(t, 0x04) == 0x1p-14);
    ck_assert(ld8(t, 0x7b) == 57344.0);
    ck_assert(ld8(t, 0x7c) == HUGE_VAL && ld8(t, 0xfc) == -HUGE_VAL);
    int nans = 0;
    for (int b = 0; b < 256; b++) {
        double x = ld8(t, (uint8_t)b);
        if (isnan(x)) {
            nans++;
            continue;
        }
        ck_assert_msg(smattn__round_bits(x, t) == (uint64_t)b, "byte 0x%02x (%a)", b, x);
    }
    ck_assert_int_eq(nans, 6);
    ck_assert_uint_eq(smattn__round_bits(61440.0, t), 0x7c); /* the midpoint overflows */
    ck_assert_uint_eq(smattn__round_bits(61439.0, t), 0x7b);
}
END_TEST

static void put_half(unsigned char *p, double x)
{
    uint16_t h = (uint16_t)smattn__round_bits(x, SMATTN_F16);
    memcpy(p, &h, 2);
}

/* q8_0: each block an f16 scale then 32 int8; element offset o is in block o / 32. */
START_TEST(q8_0_by_hand)
{
    unsigned char blk[2 * 34];
    memset(blk, 0, sizeof blk);
    put_half(blk, 0.5);
    put_half(blk + 34, -0x1p-20); /* a negative subnormal-range scale */
    const signed char q[5] = {-128, -1, 0, 1, 127};
    for (int k = 0; k < 5; k++) {
        blk[2 + k] = (unsigned char)q[k];
        blk[34 + 2 + 31 - k] = (unsigned char)q[k];
    }
    for (int k = 0; k < 5; k++) {
        ck_assert(smattn_load(blk, SMATTN_Q8_0, k) == 0.5 * q[k]);
        ck_assert(smattn_load(blk, SMATTN_Q8_0, 63 - k) == -0x1p-20 * q[k]);
    }
    ck_assert(smattn_load(blk, SMATTN_Q8_0, 31) == 0);
    put_half(blk, HUGE_VAL); /* IEEE product: inf * 0 is NaN */
    ck_assert(isnan(smattn_load(blk, SMATTN_Q8_0, 2)) &&
              smattn_load(blk, SMATTN_Q8_0, 3) == HUGE_VAL);
}
END_TEST

/* q4_0: byte j holds element j in its low nibble and element j + 16 in its high one; the
 * value is (nibble - 8) times the scale. */
START_TEST(q4_0_nibble_order)
{
    unsigned char blk[2 * 18];
    memset(blk, 0x88, sizeof blk); /* every nibble 8: zeros */
    put_half(blk, 0.25);
    put_half(blk + 18, 3.0);
    blk[2 + 0] = 0xf0;  /* element 0: 0 - 8, element 16: 15 - 8 */
    blk[2 + 15] = 0x19; /* element 15: 9 - 8, element 31: 1 - 8 */
    blk[18 + 2 + 3] = 0x8c; /* block 1, element 3: 12 - 8 */
    ck_assert(smattn_load(blk, SMATTN_Q4_0, 0) == -8 * 0.25);
    ck_assert(smattn_load(blk, SMATTN_Q4_0, 16) == 7 * 0.25);
    ck_assert(smattn_load(blk, SMATTN_Q4_0, 15) == 1 * 0.25);
    ck_assert(smattn_load(blk, SMATTN_Q4_0, 31) == -7 * 0.25);
    ck_assert(smattn_load(blk, SMATTN_Q4_0, 1) == 0);
    ck_assert(smattn_load(blk, SMATTN_Q4_0, 32 + 3) == 12.0);
    ck_assert(smattn_load(blk, SMATTN_Q4_0, 32 + 19) == 0);
    /* a store of a block dtype writes nothing */
    unsigned char keep[sizeof blk];
    memcpy(keep, blk, sizeof blk);
    smattn_store(blk, SMATTN_Q4_0, 0, 1.0);
    ck_assert(memcmp(keep, blk, sizeof blk) == 0);
}
END_TEST

/* The quantiser the battery and the fuzzers share (ggml's reference quantisers), worked by
 * hand: q8_0 of 0, 1, ..., 31 has d = 31 / 127 and q_j = round(j * 127 / 31); q4_0's scale
 * is the largest-magnitude value over -8 (here -31 / -8), nibble trunc(x / d + 8.5) capped at
 * 15; a block of subnormal binary32 values (1/d overflows) still quantises by x / d; a NaN
 * in a block gives a NaN scale. */
START_TEST(quantise_block_by_hand)
{
    double x[SMATTN_QBLOCK];
    unsigned char b8[34], b4[18];
    for (int j = 0; j < SMATTN_QBLOCK; j++)
        x[j] = j;
    smattn__quantise_block(x, SMATTN_Q8_0, b8);
    const float d8 = 31.0f / 127.0f;
    uint16_t h8 = (uint16_t)(b8[0] | b8[1] << 8); /* the scale: d in binary16 */
    ck_assert(smattn__f16_to_double(h8) ==
              smattn__bits_to_double(smattn__round_bits((double)d8, SMATTN_F16), SMATTN_F16));
    for (int j = 0; j < SMATTN_QBLOCK; j++) /* j * 127 / 31 is never within 1/62 of a tie */
        ck_assert_int_eq((signed char)b8[2 + j], (int)lround(j * 127.0 / 31.0));
    ck_assert_int_eq((signed char)b8[2 + 31], 127);
    x[31] = -31; /* largest magnitude negative: q4_0's d = -31 / -8 > 0 */
    smattn__quantise_block(x, SMATTN_Q4_0, b4);
    for (int j = 0; j < SMATTN_QBLOCK; j++) { /* x / d + 8.5 = 8 j / 31 + 8.5: no ties */
        int nib = j < 16 ? b4[2 + j] & 15 : b4[2 + j - 16] >> 4;
        double v = x[j] * 8.0 / 31.0 + 8.5;
        ck_assert_int_eq(nib, v >= 15.0 ? 15 : (int)floor(v));
        ck_assert(smattn_load(b4, SMATTN_Q4_0, j) == 3.875 * (nib - 8));
    }
    ck_assert_int_eq(b4[2 + 15] >> 4, 0); /* -31 / d = -8: nibble 0 */
    for (int j = 0; j < SMATTN_QBLOCK; j++)
        x[j] = j % 2 ? 0x1p-140 : -0x1p-141; /* 1/d overflows binary32 */
    smattn__quantise_block(x, SMATTN_Q8_0, b8);
    ck_assert_int_eq((signed char)b8[2 + 1], 127);
    ck_assert_int_eq((signed char)b8[2 + 0], -64);
    x[5] = NAN;
    smattn__quantise_block(x, SMATTN_Q4_0, b4);
    ck_assert(isnan(smattn_load(b4, SMATTN_Q4_0, 0)) && isnan(smattn_load(b4, SMATTN_Q4_0, 31)));
}
END_TEST

/* ---- problems ------------------------------------------------------------------------ */

enum { QB = 2, QS = 3, QT = 37, QHQ = 4, QHKV = 2, QD = 32, QDV = 64 };

typedef struct qcase {
    smattn_problem p;
    smattn_descale ds;
    double dq[QB * QHKV], dk[QB * QHKV], dv[QB * QHKV];
    smattn_inputs in;   /* quantised */
    smattn_inputs twin; /* binary64: decoded times descale */
    unsigned char *q, *k, *v;
    double *q64, *k64, *v64;
} qcase;

static size_t bytes_of(smattn_dtype t, int64_t n)
{
    return (size_t)(n / smattn_dtype_block(t)) * smattn_dtype_size(t);
}

/* Random bytes for a dtype: fp8 any pattern but NaN (unless nan_ok), blocks with a random
 * finite f16 scale. */
static void fill(rng *r, unsigned char *buf, smattn_dtype t, int64_t n, int nan_ok)
{
    size_t nb = bytes_of(t, n);
    for (size_t k = 0; k < nb; k++)
        buf[k] = (unsigned char)rng_next(r);
    if (t == SMATTN_F8E4M3 || t == SMATTN_F8E5M2) {
        for (size_t k = 0; k < nb; k++) {
            double x = ld8(t, buf[k]);
            if ((!nan_ok && isnan(x)) || isinf(x) || fabs(x) > 64)
                buf[k] = (unsigned char)(buf[k] & 0x83); /* small */
        }
    } else {
        for (size_t blk = 0; blk < nb / smattn_dtype_size(t); blk++)
            put_half(buf + blk * smattn_dtype_size(t),
                     ldexp(rng_unif(r) + 0.5, (int)rng_int(r, -9, -3)) * (rng_chance(r, 0.5) ? -1 : 1));
    }
}

static void qcase_make(qcase *c, rng *r, smattn_dtype tq, smattn_dtype tk, smattn_dtype tv,
                       int per_head, int nan_ok)
{
    memset(c, 0, sizeof *c);
    smattn_problem *p = &c->p;
    *p = smattn_problem_default();
    p->B = QB, p->S = QS, p->T = QT, p->Hq = QHQ, p->Hkv = QHKV, p->D = QD, p->Dv = QDV;
    p->scale = smattn_default_scale(QD);
    p->causal = rng_chance(r, 0.5) ? SMATTN_CAUSAL_LOWER_RIGHT : SMATTN_CAUSAL_NONE;
    c->ds = smattn_descale_default();
    c->ds.q = ldexp(1.0 + (double)rng_int(r, 0, 255) / 256, (int)rng_int(r, -3, 3));
    c->ds.k = (double)(float)(0.1 + rng_unif(r));
    c->ds.v = (double)(float)(0.01 + rng_unif(r));
    for (int k = 0; k < QB * QHKV; k++) {
        c->dq[k] = (double)(float)(0.25 + rng_unif(r));
        c->dk[k] = (double)(float)(0.5 + rng_unif(r));
        c->dv[k] = (double)(float)(0.125 + rng_unif(r));
    }
    if (per_head)
        c->ds.q_head = c->dq, c->ds.k_head = c->dk, c->ds.v_head = c->dv;
    if (tq == SMATTN_F32)
        c->ds.q = 1.0, c->ds.q_head = NULL; /* a descale on an f32 Q works too: see below */
    p->descale = &c->ds;
    const int64_t nq = QB * QS * QHQ * QD, nk = QB * QT * QHKV * QD, nv = QB * QT * QHKV * QDV;
    c->q = malloc(nq * 4), c->k = malloc(nk * 4), c->v = malloc(nv * 4);
    c->q64 = malloc(nq * 8), c->k64 = malloc(nk * 8), c->v64 = malloc(nv * 8);
    ck_assert(c->q && c->k && c->v && c->q64 && c->k64 && c->v64);
    if (tq == SMATTN_F32)
        for (int64_t e = 0; e < nq; e++) {
            float f = (float)rng_gauss(r);
            memcpy(c->q + 4 * e, &f, 4);
        }
    else
        fill(r, c->q, tq, nq, 0);
    fill(r, c->k, tk, nk, nan_ok);
    fill(r, c->v, tv, nv, nan_ok);
    smattn_tensor *t[3] = {&c->in.q, &c->in.k, &c->in.v};
    smattn_tensor *w[3] = {&c->twin.q, &c->twin.k, &c->twin.v};
    const smattn_dtype dt[3] = {tq, tk, tv};
    const void *data[3] = {c->q, c->k, c->v};
    double *d64[3] = {c->q64, c->k64, c->v64};
    const char role[3] = {'q', 'k', 'v'};
    for (int k = 0; k < 3; k++) {
        t[k]->data = data[k], t[k]->dtype = dt[k];
        ck_assert_int_eq(smattn_contiguous_strides(p, role[k], t[k]->stride), SMATTN_OK);
        w[k]->data = d64[k], w[k]->dtype = SMATTN_F64;
        memcpy(w[k]->stride, t[k]->stride, sizeof w[k]->stride);
    }
    /* the twin: every element decoded and multiplied by its factor (exact: binary32 times
     * at most 24 bits) */
    for (int64_t b = 0; b < QB; b++)
        for (int64_t h = 0; h < QHQ; h++) {
            int64_t g = h / (QHQ / QHKV);
            for (int64_t i = 0; i < QS; i++)
                for (int64_t d = 0; d < QD; d++) {
                    int64_t o = ((b * QS + i) * QHQ + h) * QD + d;
                    c->q64[o] = smattn_load(c->q, tq, o) * smattn__descale(p, 'q', b, g);
                }
        }
    for (int64_t b = 0; b < QB; b++)
        for (int64_t j = 0; j < QT; j++)
            for (int64_t g = 0; g < QHKV; g++) {
                for (int64_t d = 0; d < QD; d++) {
                    int64_t o = ((b * QT + j) * QHKV + g) * QD + d;
                    c->k64[o] = smattn_load(c->k, tk, o) * smattn__descale(p, 'k', b, g);
                }
                for (int64_t d = 0; d < QDV; d++) {
                    int64_t o = ((b * QT + j) * QHKV + g) * QDV + d;
                    c->v64[o] = smattn_load(c->v, tv, o) * smattn__descale(p, 'v', b, g);
                }
            }
}

static void qcase_free(qcase *c)
{
    free(c->q), free(c->k), free(c->v), free(c->q64), free(c->k64), free(c->v64);
}

static void expect_same(const outbuf *a, const outbuf *b, const char *what, uint64_t seed)
{
    ck_assert_msg(memcmp(a->o, b->o, a->no * smattn_dtype_size(a->t)) == 0, "%s O seed %" PRIu64,
                  what, seed);
    ck_assert_msg(memcmp(a->l, b->l, a->nl * smattn_dtype_size(a->t)) == 0,
                  "%s LSE seed %" PRIu64, what, seed);
    ck_assert_msg(memcmp(a->p, b->p, a->np * smattn_dtype_size(a->t)) == 0, "%s P seed %" PRIu64,
                  what, seed);
}

/* The oracle on quantised inputs with descales is the oracle on the binary64 twin, bit for
 * bit (SPEC 2.9: the real input is the decoded value times its factor); so is the bound. */
START_TEST(quantised_equals_its_twin)
{
    static const smattn_dtype kinds[][3] = {
        {SMATTN_F8E4M3, SMATTN_F8E4M3, SMATTN_F8E4M3}, {SMATTN_F8E5M2, SMATTN_F8E5M2, SMATTN_F8E5M2},
        {SMATTN_F32, SMATTN_Q8_0, SMATTN_Q8_0},       {SMATTN_F8E4M3, SMATTN_Q4_0, SMATTN_Q8_0},
        {SMATTN_F32, SMATTN_F8E5M2, SMATTN_Q4_0},
    };
    const int nk = (int)(sizeof kinds / sizeof kinds[0]);
    for (int round = 0; round < 2 * nk; round++) {
        const uint64_t seed = 0x9a0700 + (uint64_t)round;
        rng r = {seed};
        const smattn_dtype *kd = kinds[round % nk];
        qcase c;
        qcase_make(&c, &r, kd[0], kd[1], kd[2], round >= nk, round == 1);
        const smattn_dtype ot = round % 2 ? SMATTN_F32 : SMATTN_F64;
        outbuf a, b;
        outbuf_make(&a, &c.p, ot);
        outbuf_make(&b, &c.p, ot);
        ck_assert_int_eq(smattn_ref(&c.p, &c.in, &a.out, NULL, NULL), SMATTN_OK);
        smattn_problem twin = c.p;
        twin.descale = NULL;
        ck_assert_int_eq(smattn_ref(&twin, &c.twin, &b.out, NULL, NULL), SMATTN_OK);
        expect_same(&a, &b, "ref", seed);
        /* the bound reads the same real inputs */
        outbuf ba, bb;
        outbuf_make(&ba, &c.p, SMATTN_F64);
        outbuf_make(&bb, &c.p, SMATTN_F64);
        smattn_precision pm = smattn_precision_of(SMATTN_F32);
        ck_assert_int_eq(smattn_bound(&c.p, &c.in, &pm, &a.out, &ba.out), SMATTN_OK);
        ck_assert_int_eq(smattn_bound(&twin, &c.twin, &pm, &a.out, &bb.out), SMATTN_OK);
        expect_same(&ba, &bb, "bound", seed);
        /* and the descale matters: without it the outputs differ */
        outbuf z;
        outbuf_make(&z, &c.p, ot);
        smattn_problem plain = c.p;
        plain.descale = NULL;
        ck_assert_int_eq(smattn_ref(&plain, &c.in, &z.out, NULL, NULL), SMATTN_OK);
        ck_assert_msg(round == 1 || memcmp(z.o, a.o, z.no * smattn_dtype_size(ot)) != 0,
                      "seed %" PRIu64, seed); /* round 1 has NaN keys: NaN rows either way */
        outbuf_free(&a), outbuf_free(&b), outbuf_free(&ba), outbuf_free(&bb), outbuf_free(&z);
        qcase_free(&c);
    }
}
END_TEST

/* An e4m3 NaN in a visible key makes the row NaN (SPEC 4.2), as the twin's NaN does. */
START_TEST(e4m3_nan_is_nan)
{
    rng r = {0x9a07aa};
    qcase c;
    qcase_make(&c, &r, SMATTN_F8E4M3, SMATTN_F8E4M3, SMATTN_F8E4M3, 0, 0);
    c.p.causal = SMATTN_CAUSAL_NONE;
    c.k[5] = 0x7f; /* b 0, key 0, head 0, d 5: every query head of group 0 sees it */
    c.k64[5] = smattn_load(c.k, SMATTN_F8E4M3, 5) * c.ds.k;
    ck_assert(isnan(c.k64[5]));
    outbuf a;
    outbuf_make(&a, &c.p, SMATTN_F32);
    ck_assert_int_eq(smattn_ref(&c.p, &c.in, &a.out, NULL, NULL), SMATTN_OK);
    ck_assert(isnan(outbuf_get(&a, 'o', 0)) && isnan(outbuf_get(&a, 'l', 0)));
    c.k[5] = 0x7e; /* 448: a number */
    ck_assert_int_eq(smattn_ref(&c.p, &c.in, &a.out, NULL, NULL), SMATTN_OK);
    ck_assert(!isnan(outbuf_get(&a, 'o', 0)) && !isnan(outbuf_get(&a, 'l', 0)));
    outbuf_free(&a);
    qcase_free(&c);
}
END_TEST

static smattn_status explain(const qcase *c, const smattn_problem *p, const smattn_outputs *out,
                             char *msg, size_t cap)
{
    return smattn_validate_explain(p, &c->in, out, msg, cap);
}

START_TEST(validation_names_the_field)
{
    rng r = {0x9a07bb};
    qcase c;
    qcase_make(&c, &r, SMATTN_F8E4M3, SMATTN_Q8_0, SMATTN_Q4_0, 1, 0);
    outbuf a;
    outbuf_make(&a, &c.p, SMATTN_F32);
    char msg[160];
    ck_assert_int_eq(explain(&c, &c.p, &a.out, msg, sizeof msg), SMATTN_OK);
    /* descales: NaN, zero, negative, not binary32, on a binary64 tensor */
    const double bad[4] = {(double)NAN, 0.0, -1.0, 0.1};
    for (int k = 0; k < 4; k++) {
        c.dk[2] = bad[k];
        ck_assert_int_eq(explain(&c, &c.p, &a.out, msg, sizeof msg), SMATTN_ERR_SCALE);
        ck_assert_msg(strstr(msg, "k_descale[1][0]") != NULL, "%s", msg);
    }
    c.dk[2] = 0.5;
    c.ds.v_head = NULL;
    c.ds.v = HUGE_VAL;
    ck_assert_int_eq(explain(&c, &c.p, &a.out, msg, sizeof msg), SMATTN_ERR_SCALE);
    ck_assert_msg(strncmp(msg, "v_descale = ", 12) == 0, "%s", msg);
    c.ds.v = 1.0;
    smattn_inputs keep = c.in;
    c.in.q = c.twin.q; /* f64 Q with q_descale per head != 1 */
    ck_assert_int_eq(explain(&c, &c.p, &a.out, msg, sizeof msg), SMATTN_ERR_DTYPE);
    ck_assert_msg(strstr(msg, "q_descale") != NULL, "%s", msg);
    c.in = keep;
    /* block formats: K and V only, D a multiple of 32, rows of whole blocks */
    c.in.q.dtype = SMATTN_Q8_0;
    ck_assert_int_eq(explain(&c, &c.p, &a.out, msg, sizeof msg), SMATTN_ERR_DTYPE);
    ck_assert_msg(strstr(msg, "K and V only") != NULL, "%s", msg);
    c.in = keep;
    c.in.k.stride[2] = 16, c.in.k.stride[1] = 32;
    ck_assert_int_eq(explain(&c, &c.p, &a.out, msg, sizeof msg), SMATTN_ERR_STRIDE);
    c.in = keep;
    c.in.v.stride[3] = 2;
    ck_assert_int_eq(explain(&c, &c.p, &a.out, msg, sizeof msg), SMATTN_ERR_STRIDE);
    c.in = keep;
    smattn_problem p = c.p;
    p.D = 16;
    ck_assert_int_eq(explain(&c, &p, &a.out, msg, sizeof msg), SMATTN_ERR_SHAPE);
    ck_assert_msg(strstr(msg, "multiple of 32") != NULL, "%s", msg);
    /* an output over a descale array is an alias */
    smattn_outputs out = a.out;
    out.lse.data = c.dq;
    out.lse.dtype = SMATTN_F64;
    ck_assert_int_eq(explain(&c, &c.p, &out, msg, sizeof msg), SMATTN_ERR_ALIAS);
    ck_assert_msg(strstr(msg, "q_descale") != NULL, "%s", msg);
    /* the kernel takes quantised inputs with descales (test_opt's quant case judges its
     * values against the bound) */
    ck_assert_int_eq(smattn_attention(&c.p, &c.in, &a.out, NULL), SMATTN_OK);
    /* softmax takes no descale */
    smattn_problem sm = c.p;
    sm.op = SMATTN_OP_SOFTMAX;
    smattn_inputs xin;
    memset(&xin, 0, sizeof xin);
    xin.x.data = c.k64, xin.x.dtype = SMATTN_F64;
    ck_assert_int_eq(smattn_contiguous_strides(&sm, 'x', xin.x.stride), SMATTN_OK);
    ck_assert_int_eq(smattn_validate_explain(&sm, &xin, &a.out, msg, sizeof msg),
                     SMATTN_ERR_UNSUPPORTED);
    ck_assert_msg(strstr(msg, "descale") != NULL, "%s", msg);
    outbuf_free(&a);
    qcase_free(&c);
}
END_TEST

Suite *quant_suite(void);
Suite *quant_suite(void)
{
    Suite *s = suite_create("quant");
    TCase *tc = tcase_create("core");
    tcase_set_timeout(tc, 120);
    tcase_add_test(tc, dtype_sizes_names_blocks);
    tcase_add_test(tc, e4m3_by_hand);
    tcase_add_test(tc, e5m2_by_hand);
    tcase_add_test(tc, q8_0_by_hand);
    tcase_add_test(tc, q4_0_nibble_order);
    tcase_add_test(tc, quantise_block_by_hand);
    tcase_add_test(tc, quantised_equals_its_twin);
    tcase_add_test(tc, e4m3_nan_is_nan);
    tcase_add_test(tc, validation_names_the_field);
    suite_add_tcase(s, tc);
    return s;
}
