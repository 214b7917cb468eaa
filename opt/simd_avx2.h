/* SPDX-License-Identifier: MIT */
/* simd_avx2.h: the vector vocabulary on AVX2 + FMA + F16C, 8 lanes. Compiled only into
 * kernel_avx2.c, which gets -mavx2 -mfma -mf16c; chosen at run time (opt/dispatch.c). */
#ifndef SMATTN_SIMD_AVX2_H
#define SMATTN_SIMD_AVX2_H
#include <immintrin.h>
#include <stdint.h>

#define VLEN 8
#define ISA_SUFFIX(name) name##_avx2
typedef __m256 vf;

static inline vf vf_load(const float *p) { return _mm256_loadu_ps(p); }
static inline void vf_store(float *p, vf x) { _mm256_storeu_ps(p, x); }
static inline vf vf_set1(float x) { return _mm256_set1_ps(x); }
static inline vf vf_zero(void) { return _mm256_setzero_ps(); }
static inline vf vf_fmadd(vf a, vf b, vf c) { return _mm256_fmadd_ps(a, b, c); }
/* a * p[0 .. VLEN) + c with the vector at p (any address) as the fma's memory operand:
 * the same operation as vf_fmadd(a, vf_load(p), c), but a loop whose accumulators fill the
 * registers cannot hoist the load into a register of its own and spill an accumulator for
 * it (the decode's P.V, kernel_body.h's pv_group_pass, where every row reads the same
 * vector) */
static inline vf vf_fmadd_mem(vf a, const float *p, vf c)
{
    __asm__("vfmadd231ps %[m], %[a], %[c]"
            : [c] "+x"(c)
            : [a] "x"(a), [m] "m"(*(const struct { float f[8]; } *)(const void *)p));
    return c;
}
static inline vf vf_mul(vf a, vf b) { return _mm256_mul_ps(a, b); }
static inline vf vf_add(vf a, vf b) { return _mm256_add_ps(a, b); }
static inline vf vf_sub(vf a, vf b) { return _mm256_sub_ps(a, b); }
static inline vf vf_div(vf a, vf b) { return _mm256_div_ps(a, b); }
/* NaN-propagating max: maxps returns its second operand when either is NaN, so put a NaN
 * of a back explicitly. */
static inline vf vf_max(vf a, vf b)
{
    vf m = _mm256_max_ps(a, b);
    return _mm256_blendv_ps(m, a, _mm256_cmp_ps(a, a, _CMP_UNORD_Q));
}
/* ((a0+a1)+(a2+a3)) + ((a4+a5)+(a6+a7)): the same order as one lane of vf_hsum8, so a
 * dot product's value does not depend on which reduction computed it */
static inline float vf_hsum(vf a)
{
    __m256 t = _mm256_hadd_ps(a, a);
    t = _mm256_hadd_ps(t, t);
    return _mm_cvtss_f32(_mm_add_ss(_mm256_castps256_ps128(t), _mm256_extractf128_ps(t, 1)));
}
/* out[k] = horizontal sum of a[k], k < 8, by a tree of hadds (7 adds, 2 extracts) */
static inline void vf_hsum8(const vf a[8], float *out)
{
    __m256 t0 = _mm256_hadd_ps(a[0], a[1]), t1 = _mm256_hadd_ps(a[2], a[3]);
    __m256 t2 = _mm256_hadd_ps(a[4], a[5]), t3 = _mm256_hadd_ps(a[6], a[7]);
    __m256 u0 = _mm256_hadd_ps(t0, t1), u1 = _mm256_hadd_ps(t2, t3);
    _mm_storeu_ps(out, _mm_add_ps(_mm256_castps256_ps128(u0), _mm256_extractf128_ps(u0, 1)));
    _mm_storeu_ps(out + 4, _mm_add_ps(_mm256_castps256_ps128(u1), _mm256_extractf128_ps(u1, 1)));
}
/* NaN-aware horizontal max: NaN if any lane is NaN */
static inline float vf_hmax(vf a)
{
    if (_mm256_movemask_ps(_mm256_cmp_ps(a, a, _CMP_UNORD_Q)))
        return __builtin_nanf("");
    __m128 m = _mm_max_ps(_mm256_castps256_ps128(a), _mm256_extractf128_ps(a, 1));
    m = _mm_max_ps(m, _mm_movehl_ps(m, m));
    m = _mm_max_ss(m, _mm_movehdup_ps(m));
    return _mm_cvtss_f32(m);
}
static inline vf vf_pow2i(vf n)
{
    __m256i e = _mm256_add_epi32(_mm256_cvtps_epi32(n), _mm256_set1_epi32(127));
    return _mm256_castsi256_ps(_mm256_slli_epi32(e, 23));
}
static inline vf vf_round(vf x) { return _mm256_round_ps(x, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC); }
static inline vf vf_select_lt(vf x, float t, vf if_lt, vf other)
{
    return _mm256_blendv_ps(other, if_lt, _mm256_cmp_ps(x, _mm256_set1_ps(t), _CMP_LT_OQ));
}
static inline vf vf_load_f16(const uint16_t *p)
{
    return _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(const void *)p));
}
static inline vf vf_load_bf16(const uint16_t *p)
{
    __m256i w = _mm256_cvtepu16_epi32(_mm_loadu_si128((const __m128i *)(const void *)p));
    return _mm256_castsi256_ps(_mm256_slli_epi32(w, 16));
}
/* VLEN fp8 (SPEC 2.9) at p as binary32, exact. e4m3fn as binary16 bits: the byte sign-
 * extended and shifted left by 7 puts the sign at bit 15 (and 14, cleared) and the 7 low
 * bits at binary16's exponent (bias 15) and mantissa; vcvtph2ps then times 2^8 (bias 7;
 * subnormals land on binary16 subnormals, exactly); S.1111.111 made NaN (0xffff). Four
 * 128-bit operations and two 256-bit ones per 8 elements, against nine 256-bit ones for the
 * same in binary32 bits. e5m2: binary16's top byte. */
static inline vf vf_load_f8e4m3(const uint8_t *p)
{
    __m128i b = _mm_cvtepi8_epi16(_mm_loadl_epi64((const __m128i *)(const void *)p));
    __m128i h = _mm_and_si128(_mm_slli_epi16(b, 7), _mm_set1_epi16((short)0xbf80));
    __m128i em = _mm_and_si128(h, _mm_set1_epi16(0x3f80));
    h = _mm_or_si128(h, _mm_cmpeq_epi16(em, _mm_set1_epi16(0x3f80)));
    return _mm256_mul_ps(_mm256_cvtph_ps(h), _mm256_set1_ps(256.0f));
}
/* VLEN e4m3fn at p, none of them NaN (S.1111.111), as binary32 times 2^-8, exactly: the
 * binary16 bits of vf_load_f8e4m3 without its NaN select and its scaling (4 instructions
 * per vector instead of 8). The decode multiplies the other factor by 2^8 instead (Q's
 * packed rows, the weights), so every product, and so every fma, is the same. */
static inline vf vf_load_f8e4m3_s8(const uint8_t *p)
{
    __m128i b = _mm_cvtepi8_epi16(_mm_loadl_epi64((const __m128i *)(const void *)p));
    return _mm256_cvtph_ps(_mm_and_si128(_mm_slli_epi16(b, 7), _mm_set1_epi16((short)0xbf80)));
}
/* Nonzero if one of the n bytes at p is an e4m3fn NaN (S.1111.111): where none is, the
 * decode reads the tile with vf_load_f8e4m3_s8 */
static inline int vf_f8e4m3_any_nan(const uint8_t *p, int64_t n)
{
    const __m256i m = _mm256_set1_epi8(0x7f);
    __m256i acc = _mm256_setzero_si256();
    int64_t i = 0;
#pragma GCC unroll 4
    for (; i + 32 <= n; i += 32) {
        __m256i b = _mm256_loadu_si256((const __m256i *)(const void *)(p + i));
        acc = _mm256_or_si256(acc, _mm256_cmpeq_epi8(_mm256_and_si256(b, m), m));
    }
    int any = !_mm256_testz_si256(acc, acc);
    for (; i < n; i++)
        any |= (p[i] & 0x7f) == 0x7f;
    return any;
}
static inline vf vf_load_f8e5m2(const uint8_t *p)
{
    __m128i h = _mm_slli_epi16(_mm_cvtepu8_epi16(_mm_loadl_epi64((const __m128i *)(const void *)p)), 8);
    return _mm256_cvtph_ps(h);
}
/* VLEN int8 (uint8) at p as binary32 (exact), and one binary16 as binary32 (exact): the q8_0 and
 * q4_0 blocks' quants and scales (SPEC 2.9). */
static inline vf vf_load_i8(const int8_t *p)
{
    return _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_loadl_epi64((const __m128i *)(const void *)p)));
}
static inline vf vf_load_u8(const uint8_t *p)
{
    return _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(_mm_loadl_epi64((const __m128i *)(const void *)p)));
}
static inline float vf_f16_to_f32(uint16_t h) { return _cvtsh_ss(h); }
/* Nonzero if some lane is NaN. */
static inline int vf_has_nan(vf x) { return _mm256_movemask_ps(_mm256_cmp_ps(x, x, _CMP_UNORD_Q)) != 0; }
/* VLEN binary32 to binary16 / bfloat16 at p (any address), as simd_avx512.h's */
static inline void vf_store_f16(uint16_t *p, vf x)
{
    _mm_storeu_si128((__m128i *)(void *)p,
                     _mm256_cvtps_ph(x, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
}
static inline void vf_store_bf16(uint16_t *p, vf x)
{
    __m256i u = _mm256_castps_si256(x);
    __m256i odd = _mm256_and_si256(_mm256_srli_epi32(u, 16), _mm256_set1_epi32(1));
    __m256i r = _mm256_srli_epi32(_mm256_add_epi32(u, _mm256_add_epi32(odd, _mm256_set1_epi32(0x7fff))), 16);
    _mm_storeu_si128((__m128i *)(void *)p,
                     _mm_packus_epi32(_mm256_castsi256_si128(r), _mm256_extracti128_si256(r, 1)));
}
/* Transpose an 8 x 8 block: r[i] holds row i; column c (a vector over the rows) is stored
 * at dst + c * ldd. Moves only: exact. */
static inline void vf_transpose_store(const vf r[8], float *dst, int64_t ldd)
{
    __m256 t0 = _mm256_unpacklo_ps(r[0], r[1]), t1 = _mm256_unpackhi_ps(r[0], r[1]);
    __m256 t2 = _mm256_unpacklo_ps(r[2], r[3]), t3 = _mm256_unpackhi_ps(r[2], r[3]);
    __m256 t4 = _mm256_unpacklo_ps(r[4], r[5]), t5 = _mm256_unpackhi_ps(r[4], r[5]);
    __m256 t6 = _mm256_unpacklo_ps(r[6], r[7]), t7 = _mm256_unpackhi_ps(r[6], r[7]);
    /* u0: columns 0 (low lane) and 4 (high lane) of rows 0-3, u4 the same of rows 4-7 */
    __m256 u0 = _mm256_shuffle_ps(t0, t2, 0x44), u1 = _mm256_shuffle_ps(t0, t2, 0xEE);
    __m256 u2 = _mm256_shuffle_ps(t1, t3, 0x44), u3 = _mm256_shuffle_ps(t1, t3, 0xEE);
    __m256 u4 = _mm256_shuffle_ps(t4, t6, 0x44), u5 = _mm256_shuffle_ps(t4, t6, 0xEE);
    __m256 u6 = _mm256_shuffle_ps(t5, t7, 0x44), u7 = _mm256_shuffle_ps(t5, t7, 0xEE);
    _mm256_storeu_ps(dst + 0 * ldd, _mm256_permute2f128_ps(u0, u4, 0x20));
    _mm256_storeu_ps(dst + 1 * ldd, _mm256_permute2f128_ps(u1, u5, 0x20));
    _mm256_storeu_ps(dst + 2 * ldd, _mm256_permute2f128_ps(u2, u6, 0x20));
    _mm256_storeu_ps(dst + 3 * ldd, _mm256_permute2f128_ps(u3, u7, 0x20));
    _mm256_storeu_ps(dst + 4 * ldd, _mm256_permute2f128_ps(u0, u4, 0x31));
    _mm256_storeu_ps(dst + 5 * ldd, _mm256_permute2f128_ps(u1, u5, 0x31));
    _mm256_storeu_ps(dst + 6 * ldd, _mm256_permute2f128_ps(u2, u6, 0x31));
    _mm256_storeu_ps(dst + 7 * ldd, _mm256_permute2f128_ps(u3, u7, 0x31));
}
#endif
