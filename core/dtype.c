/* SPDX-License-Identifier: MIT */
/* dtype.c: exact loads of every element type into binary64 and single roundings back. */
#include <math.h>
#include <string.h>

#include "core/internal.h"

size_t smattn_dtype_size(smattn_dtype t)
{
    switch (t) {
    case SMATTN_F64: return 8;
    case SMATTN_F32: return 4;
    case SMATTN_F16: return 2;
    case SMATTN_BF16: return 2;
    case SMATTN_BOOL: return 1;
    case SMATTN_F8E4M3: return 1;
    case SMATTN_F8E5M2: return 1;
    case SMATTN_Q8_0: return SMATTN__Q8_0_BYTES;
    case SMATTN_Q4_0: return SMATTN__Q4_0_BYTES;
    }
    return 0;
}

int64_t smattn_dtype_block(smattn_dtype t)
{
    if (t == SMATTN_Q8_0 || t == SMATTN_Q4_0)
        return SMATTN_QBLOCK;
    return smattn_dtype_size(t) ? 1 : 0;
}

const char *smattn_dtype_name(smattn_dtype t)
{
    switch (t) {
    case SMATTN_F64: return "f64";
    case SMATTN_F32: return "f32";
    case SMATTN_F16: return "f16";
    case SMATTN_BF16: return "bf16";
    case SMATTN_BOOL: return "bool";
    case SMATTN_F8E4M3: return "f8e4m3";
    case SMATTN_F8E5M2: return "f8e5m2";
    case SMATTN_Q8_0: return "q8_0";
    case SMATTN_Q4_0: return "q4_0";
    }
    return "unknown";
}

const smattn_format smattn__formats[SMATTN__NFORMATS] = {
    /* prec, emin (of the normal range), emax, total bits */
    [SMATTN_F64] = {53, -1022, 1023, 64},
    [SMATTN_F32] = {24, -126, 127, 32},
    [SMATTN_F16] = {11, -14, 15, 16},
    [SMATTN_BF16] = {8, -126, 127, 16},
    [SMATTN_F8E4M3] = {4, -6, 8, 8}, /* emax 8: 1.75 * 2^8 = 448 (S.1111.111 is NaN) */
    [SMATTN_F8E5M2] = {3, -14, 15, 8},
};

/* OCP 8-bit floats (SPEC 2.9). e4m3fn: bias 7, exponent field 15 holds normals except
 * mantissa 7 (NaN), no infinity; subnormals m 2^-9. e5m2: binary16's top byte. */
double smattn__f8e4m3_to_double(uint8_t b)
{
    int e = (b >> 3) & 0xf, m = b & 7;
    double v;
    if (e == 0xf && m == 7)
        v = (double)NAN;
    else if (e == 0)
        v = ldexp((double)m, -9);
    else
        v = ldexp((double)(8 | m), e - 10);
    return (b & 0x80) ? -v : v;
}

double smattn__f8e5m2_to_double(uint8_t b)
{
    return smattn__f16_to_double((uint16_t)(b << 8));
}

/* One element of a q8_0 / q4_0 tensor (SPEC 2.9): element offset o lies in block o / 32 at
 * index o % 32. The product d * q is exact in binary64 (11 + 8 bits); an infinite or NaN
 * scale gives the IEEE product (inf * 0 = NaN). */
static double load_block(const unsigned char *base, smattn_dtype t, int64_t offset)
{
    const int64_t blk = offset / SMATTN_QBLOCK, j = offset % SMATTN_QBLOCK;
    const unsigned char *p = base + (size_t)blk * smattn_dtype_size(t);
    uint16_t h;
    memcpy(&h, p, 2);
    double d = smattn__f16_to_double(h);
    int q;
    if (t == SMATTN_Q8_0)
        q = (int)(signed char)p[2 + j];
    else
        q = (j < 16 ? (p[2 + j] & 0xf) : (p[2 + j - 16] >> 4)) - 8;
    return d * (double)q;
}

/* Round to e4m3fn, nearest-even; what rounds above 448 (and +-inf, NaN) is NaN, as the
 * non-saturating conversions of PyTorch and the OCP specification do. */
static uint64_t round_f8e4m3(double x)
{
    uint64_t sign = signbit(x) ? 0x80 : 0;
    if (isnan(x) || isinf(x))
        return sign | 0x7f;
    /* as an IEEE-like format with one more exponent: e5m3 bits, then repacked */
    int e2;
    if (x == 0)
        return sign;
    double fr = frexp(fabs(x), &e2);
    int q = e2 - 4, qmin = -6 - 3;
    if (q < qmin)
        q = qmin;
    double scaled = ldexp(fr, e2 - q), ip = floor(scaled), rem = scaled - ip;
    uint64_t m = (uint64_t)ip;
    if (rem > 0.5 || (rem == 0.5 && (m & 1)))
        m++;
    if (m == 16)
        m = 8, q++;
    if (ldexp((double)m, q) > 448.0)
        return sign | 0x7f;
    if (m < 8) /* subnormal */
        return sign | m;
    return sign | ((uint64_t)(q + 3 + 7) << 3) | (m & 7);
}

double smattn__f16_to_double(uint16_t h)
{
    int sign = h >> 15, e = (h >> 10) & 0x1f, m = h & 0x3ff;
    double v;
    if (e == 0x1f) {
        v = m ? (double)NAN : HUGE_VAL;
    } else if (e == 0) {
        v = (double)m * 0x1p-24; /* exact: m < 2^10 */
    } else { /* a normal number's binary64 bits: the exponent rebiased, m in the top bits */
        uint64_t u = (uint64_t)(e - 15 + 1023) << 52 | (uint64_t)m << 42;
        memcpy(&v, &u, 8);
    }
    return sign ? -v : v;
}

double smattn__bf16_to_double(uint16_t h)
{
    uint32_t u = (uint32_t)h << 16;
    float f;
    memcpy(&f, &u, 4);
    return (double)f;
}

/* Round a binary64 to the format's bits, nearest-even, one rounding (SPEC 2.6). Works by
 * integer arithmetic on the binary64 significand, so no double rounding can occur. */
uint64_t smattn__round_bits(double x, smattn_dtype t)
{
    if (t == SMATTN_F8E4M3)
        return round_f8e4m3(x);
    const smattn_format *f = &smattn__formats[t];
    uint64_t u;
    memcpy(&u, &x, 8);
    if (t == SMATTN_F64)
        return u;
    uint64_t sign = u >> 63;
    int sh = f->bits - 1; /* position of the sign bit */
    int ebits = f->bits - f->prec;
    uint64_t expmask = ((uint64_t)1 << ebits) - 1;
    if (isnan(x))
        return (sign << sh) | (expmask << (f->prec - 1)) | ((uint64_t)1 << (f->prec - 2));
    if (isinf(x))
        return (sign << sh) | (expmask << (f->prec - 1));
    if (x == 0)
        return sign << sh;
    int e2;
    double fr = frexp(fabs(x), &e2); /* |x| = fr * 2^e2, fr in [0.5, 1) */
    int q = e2 - f->prec;            /* quantum exponent in the normal range */
    int qmin = f->emin - (f->prec - 1);
    if (q < qmin)
        q = qmin;
    if (e2 - q > 60) /* cannot happen for q >= e2 - prec; keeps the shift below safe */
        return sign << sh;
    /* |x| / 2^q = ip + rem exactly: a power-of-two scaling of a 53-bit number. */
    double scaled = ldexp(fr, e2 - q);
    double ip = floor(scaled);
    double rem = scaled - ip; /* exact */
    uint64_t m = (uint64_t)ip;
    if (rem > 0.5 || (rem == 0.5 && (m & 1)))
        m++;
    return smattn__encode((int)sign, m, q, t);
}

uint64_t smattn__encode(int sign, uint64_t m, int q, smattn_dtype t)
{
    const smattn_format *f = &smattn__formats[t];
    int sh = f->bits - 1;
    uint64_t sgn = (uint64_t)(sign != 0) << sh;
    uint64_t expmask = ((uint64_t)1 << (f->bits - f->prec)) - 1;
    uint64_t inf = sgn | (expmask << (f->prec - 1));
    if (m == 0)
        return sgn;
    while (m >= ((uint64_t)1 << f->prec)) { /* a carry out of the significand */
        if (m & 1)
            return inf; /* not produced by callers: m is at most 2^prec */
        m >>= 1;
        q++;
    }
    int64_t biased;
    if (m < ((uint64_t)1 << (f->prec - 1))) {
        biased = 0; /* subnormal: the caller used the smallest quantum */
    } else {
        biased = (int64_t)q + (f->prec - 1) + (int64_t)(expmask >> 1);
        if (biased >= (int64_t)expmask)
            return inf; /* overflow */
        if (biased < 1)
            return inf; /* not produced by callers: q below the normal range with m normal */
        m &= ((uint64_t)1 << (f->prec - 1)) - 1;
    }
    return sgn | ((uint64_t)biased << (f->prec - 1)) | m;
}

double smattn__bits_to_double(uint64_t bits, smattn_dtype t)
{
    switch (t) {
    case SMATTN_F64: {
        double d;
        memcpy(&d, &bits, 8);
        return d;
    }
    case SMATTN_F32: {
        uint32_t u = (uint32_t)bits;
        float f;
        memcpy(&f, &u, 4);
        return (double)f;
    }
    case SMATTN_F16: return smattn__f16_to_double((uint16_t)bits);
    case SMATTN_BF16: return smattn__bf16_to_double((uint16_t)bits);
    case SMATTN_BOOL: return bits ? 1.0 : 0.0;
    case SMATTN_F8E4M3: return smattn__f8e4m3_to_double((uint8_t)bits);
    case SMATTN_F8E5M2: return smattn__f8e5m2_to_double((uint8_t)bits);
    case SMATTN_Q8_0:
    case SMATTN_Q4_0: break; /* no per-element bits */
    }
    return (double)NAN;
}

double smattn_load(const void *base, smattn_dtype t, int64_t offset)
{
    const unsigned char *p = (const unsigned char *)base + (size_t)offset * smattn_dtype_size(t);
    switch (t) {
    case SMATTN_F64: {
        double d;
        memcpy(&d, p, 8);
        return d;
    }
    case SMATTN_F32: {
        float f;
        memcpy(&f, p, 4);
        return (double)f;
    }
    case SMATTN_F16:
    case SMATTN_BF16: {
        uint16_t h;
        memcpy(&h, p, 2);
        return t == SMATTN_F16 ? smattn__f16_to_double(h) : smattn__bf16_to_double(h);
    }
    case SMATTN_BOOL: return *p ? 1.0 : 0.0;
    case SMATTN_F8E4M3: return smattn__f8e4m3_to_double(*p);
    case SMATTN_F8E5M2: return smattn__f8e5m2_to_double(*p);
    case SMATTN_Q8_0:
    case SMATTN_Q4_0: return load_block((const unsigned char *)base, t, offset);
    }
    return (double)NAN;
}

void smattn__store_bits(void *base, smattn_dtype t, int64_t offset, uint64_t bits)
{
    unsigned char *p = (unsigned char *)base + (size_t)offset * smattn_dtype_size(t);
    switch (t) {
    case SMATTN_F64: memcpy(p, &bits, 8); break;
    case SMATTN_F32: {
        uint32_t u = (uint32_t)bits;
        memcpy(p, &u, 4);
        break;
    }
    case SMATTN_F16:
    case SMATTN_BF16: {
        uint16_t h = (uint16_t)bits;
        memcpy(p, &h, 2);
        break;
    }
    case SMATTN_BOOL: *p = bits != 0; break;
    case SMATTN_F8E4M3:
    case SMATTN_F8E5M2: *p = (unsigned char)bits; break;
    case SMATTN_Q8_0:
    case SMATTN_Q4_0: break; /* blocks are not stored element by element */
    }
}

void smattn_store(void *base, smattn_dtype t, int64_t offset, double x)
{
    if (smattn_dtype_size(t) == 0 || smattn_dtype_block(t) != 1)
        return; /* an unknown or block dtype: nothing to store (smattn__formats has no entry) */
    smattn__store_bits(base, t, offset, t == SMATTN_BOOL ? (x != 0) : smattn__round_bits(x, t));
}

/* v in [lo, hi] as an integer (NaN: lo), never an out-of-range conversion. */
static int clamp_int(float v, int lo, int hi)
{
    return v >= (float)hi ? hi : v >= (float)lo ? (int)v : lo;
}

/* x / d as the quantisers take it, x times 1/d in binary32; x / d where 1/d overflows (a
 * block of subnormal binary32 values): ggml would convert that infinity to int8, which C
 * leaves undefined (fuzz_ref_props found it). */
static float quant_scaled(double x, float d, float id)
{
    return isfinite(id) ? (float)x * id : (float)x / d;
}

void smattn__quantise_block(const double *x, smattn_dtype t, unsigned char *dst)
{
    float amax = 0.0f, max = 0.0f;
    int finite = 1;
    for (int j = 0; j < SMATTN_QBLOCK; j++) {
        float v = (float)x[j];
        finite &= isfinite(v) != 0;
        if (fabsf(v) > amax)
            amax = fabsf(v), max = v;
    }
    memset(dst, 0, smattn_dtype_size(t));
    const float d = t == SMATTN_Q8_0 ? amax / 127.0f : max / -8.0f;
    const float id = d != 0.0f ? 1.0f / d : 0.0f;
    /* binary16 little-endian: the scale, or a quiet NaN for a block that is not finite */
    uint16_t h = 0x7e00;
    if (finite)
        h = (uint16_t)smattn__round_bits((double)d, SMATTN_F16);
    dst[0] = (unsigned char)(h & 0xff), dst[1] = (unsigned char)(h >> 8);
    if (!finite)
        return;
    for (int j = 0; j < SMATTN_QBLOCK; j++) {
        if (t == SMATTN_Q8_0)
            dst[2 + j] = (unsigned char)(int8_t)clamp_int(roundf(quant_scaled(x[j], d, id)),
                                                          -128, 127);
        else if (j < SMATTN_QBLOCK / 2)
            dst[2 + j] = (unsigned char)(clamp_int(quant_scaled(x[j], d, id) + 8.5f, 0, 15) |
                                         clamp_int(quant_scaled(x[j + 16], d, id) + 8.5f, 0,
                                                   15) << 4);
    }
}
