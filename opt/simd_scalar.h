/* SPDX-License-Identifier: MIT */
/* simd_scalar.h: the vector vocabulary with one lane: the portable instance of the kernel. */
#ifndef SMATTN_SIMD_SCALAR_H
#define SMATTN_SIMD_SCALAR_H
#include <math.h>
#include <stdint.h>
#include <string.h>

#define VLEN 1
#define ISA_SUFFIX(name) name##_scalar
typedef float vf;

/* memcpy: defined at any address (a tensor may start anywhere; one movss either way) */
static inline vf vf_load(const float *p) { vf x; memcpy(&x, (const void *)p, sizeof x); return x; }
static inline void vf_store(float *p, vf x) { memcpy((void *)p, &x, sizeof x); }
static inline vf vf_set1(float x) { return x; }
static inline vf vf_zero(void) { return 0.0f; }
static inline vf vf_fmadd(vf a, vf b, vf c) { return fmaf(a, b, c); }
static inline vf vf_mul(vf a, vf b) { return a * b; }
static inline vf vf_add(vf a, vf b) { return a + b; }
static inline vf vf_sub(vf a, vf b) { return a - b; }
static inline vf vf_div(vf a, vf b) { return a / b; }
/* max that ignores no NaN: (a > b || a != a) ? a : b, and b's NaN passes through too */
static inline vf vf_max(vf a, vf b) { return (a > b || a != a) ? a : b; }
static inline float vf_hsum(vf a) { return a; }
static inline float vf_hmax(vf a) { return a; }
/* out[k] = horizontal sum of a[k], k < 8 */
static inline void vf_hsum8(const vf a[8], float *out)
{
    for (int k = 0; k < 8; k++)
        out[k] = a[k];
}
static inline vf vf_from_bits(uint32_t u) { float f; memcpy(&f, &u, 4); return f; }
static inline uint32_t vf_bits(float f) { uint32_t u; memcpy(&u, &f, 4); return u; }

/* 2^n for an integer-valued float n in [-126, 127]. */
static inline vf vf_pow2i(vf n)
{
    if (!(n >= -126.0f && n <= 127.0f)) /* NaN lanes: any value (the result is NaN) */
        return 1.0f;
    return vf_from_bits((uint32_t)((int32_t)n + 127) << 23);
}
static inline vf vf_round(vf x) { return nearbyintf(x); }
/* lanes where x < t get 0 (flush), where x is NaN stay NaN. */
static inline vf vf_select_lt(vf x, float t, vf if_lt, vf other) { return x < t ? if_lt : other; }

static inline vf vf_load_f16(const uint16_t *p)
{
    uint16_t h;
    memcpy(&h, (const void *)p, sizeof h);
    uint32_t sign = (uint32_t)(h >> 15) << 31, e = (h >> 10) & 0x1f, m = h & 0x3ff;
    float v;
    if (e == 0x1f)
        return vf_from_bits(sign | 0x7f800000u | (m << 13));
    if (e == 0)
        v = ldexpf((float)m, -24);
    else
        v = ldexpf((float)(m | 0x400), (int)e - 25);
    return sign ? -v : v;
}
static inline vf vf_load_bf16(const uint16_t *p)
{
    uint16_t h;
    memcpy(&h, (const void *)p, sizeof h);
    return vf_from_bits((uint32_t)h << 16);
}
/* One fp8 (SPEC 2.9) as binary32, exact: e4m3fn bias 7, no infinity, S.1111.111 NaN;
 * e5m2 binary16's top byte. */
static inline vf vf_load_f8e4m3(const uint8_t *p)
{
    uint32_t b = *p, sign = (b & 0x80) << 24, e = (b >> 3) & 0xf, m = b & 7;
    if (e == 0xf && m == 7)
        return vf_from_bits(sign | 0x7fc00000u);
    float v = e == 0 ? ldexpf((float)m, -9) : ldexpf((float)(8 | m), (int)e - 10);
    return sign ? -v : v;
}
static inline vf vf_load_f8e5m2(const uint8_t *p)
{
    uint16_t h = (uint16_t)(*p << 8);
    return vf_load_f16(&h);
}
/* One int8 (uint8) as binary32 (exact), and one binary16 as binary32: the q8_0 and q4_0 blocks'
 * quants and scales (SPEC 2.9). */
static inline vf vf_load_i8(const int8_t *p) { return (float)*p; }
static inline vf vf_load_u8(const uint8_t *p) { return (float)*p; }
static inline float vf_f16_to_f32(uint16_t h) { return vf_load_f16(&h); }
#endif
