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
    }
    return 0;
}

const char *smattn_dtype_name(smattn_dtype t)
{
    switch (t) {
    case SMATTN_F64: return "f64";
    case SMATTN_F32: return "f32";
    case SMATTN_F16: return "f16";
    case SMATTN_BF16: return "bf16";
    case SMATTN_BOOL: return "bool";
    }
    return "unknown";
}

const smattn_format smattn__formats[4] = {
    /* prec, emin (of the normal range), emax, total bits */
    [SMATTN_F64] = {53, -1022, 1023, 64},
    [SMATTN_F32] = {24, -126, 127, 32},
    [SMATTN_F16] = {11, -14, 15, 16},
    [SMATTN_BF16] = {8, -126, 127, 16},
};

double smattn__f16_to_double(uint16_t h)
{
    int sign = h >> 15, e = (h >> 10) & 0x1f, m = h & 0x3ff;
    double v;
    if (e == 0x1f)
        v = m ? (double)NAN : HUGE_VAL;
    else if (e == 0)
        v = ldexp((double)m, -24);
    else
        v = ldexp((double)(m | 0x400), e - 25);
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
    }
}

void smattn_store(void *base, smattn_dtype t, int64_t offset, double x)
{
    if (smattn_dtype_size(t) == 0)
        return; /* an unknown dtype: nothing to store (smattn__formats has no entry) */
    smattn__store_bits(base, t, offset, t == SMATTN_BOOL ? (x != 0) : smattn__round_bits(x, t));
}
