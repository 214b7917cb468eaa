/* SPDX-License-Identifier: MIT */
/* simd_avx512.h: the vector vocabulary on AVX-512F (+BW, VL for the converts), 16 lanes.
 * Compiled only into kernel_avx512.c; chosen at run time where the CPU has it. */
#ifndef SMATTN_SIMD_AVX512_H
#define SMATTN_SIMD_AVX512_H
#include <immintrin.h>
#include <stdint.h>

#define VLEN 16
#define ISA_SUFFIX(name) name##_avx512
typedef __m512 vf;

static inline vf vf_load(const float *p) { return _mm512_loadu_ps(p); }
static inline void vf_store(float *p, vf x) { _mm512_storeu_ps(p, x); }
static inline vf vf_set1(float x) { return _mm512_set1_ps(x); }
static inline vf vf_zero(void) { return _mm512_setzero_ps(); }
static inline vf vf_fmadd(vf a, vf b, vf c) { return _mm512_fmadd_ps(a, b, c); }
/* a * p[0] + c, the scalar at p broadcast by the fma itself (an embedded broadcast: no
 * register and no instruction of its own): the decode's group P.V (kernel_tile.h's
 * pv_group_pass), whose 14 accumulators and 2 V vectors then need no register for the
 * weight (GCC broadcasts a weight used twice into a register of its own) */
static inline vf vf_fmadd_bcast(vf a, const float *p, vf c)
{
    __asm__("vfmadd231ps %[m]%{1to16%}, %[a], %[c]" : [c] "+v"(c) : [a] "v"(a), [m] "m"(*p));
    return c;
}
static inline vf vf_mul(vf a, vf b) { return _mm512_mul_ps(a, b); }
static inline vf vf_add(vf a, vf b) { return _mm512_add_ps(a, b); }
static inline vf vf_sub(vf a, vf b) { return _mm512_sub_ps(a, b); }
static inline vf vf_div(vf a, vf b) { return _mm512_div_ps(a, b); }
static inline vf vf_max(vf a, vf b)
{
    vf m = _mm512_max_ps(a, b);
    return _mm512_mask_blend_ps(_mm512_cmp_ps_mask(a, a, _CMP_UNORD_Q), m, a);
}
/* fold 512 to 256 bits, then the tree of vf_hsum8 (the same order as one of its lanes) */
static inline float vf_hsum(vf a)
{
    __m256 h = _mm256_add_ps(_mm512_castps512_ps256(a),
                              _mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(a), 1)));
    __m256 t = _mm256_hadd_ps(h, h);
    t = _mm256_hadd_ps(t, t);
    return _mm_cvtss_f32(_mm_add_ss(_mm256_castps256_ps128(t), _mm256_extractf128_ps(t, 1)));
}
/* out[k] = horizontal sum of a[k], k < 8: fold 512 to 256 bits, then a tree of hadds */
static inline void vf_hsum8(const vf a[8], float *out)
{
    /* written out: as a loop over h[], gcc 12 kept the vectors in memory (a store and a
     * reload of each of the 8 per call, in the decode score loop) */
#define HSUM8_FOLD(k)                                                                              \
    _mm256_add_ps(_mm512_castps512_ps256(a[k]),                                                \
                  _mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(a[k]), 1)))
    const __m256 h0 = HSUM8_FOLD(0), h1 = HSUM8_FOLD(1), h2 = HSUM8_FOLD(2), h3 = HSUM8_FOLD(3);
    const __m256 h4 = HSUM8_FOLD(4), h5 = HSUM8_FOLD(5), h6 = HSUM8_FOLD(6), h7 = HSUM8_FOLD(7);
#undef HSUM8_FOLD
    __m256 t0 = _mm256_hadd_ps(h0, h1), t1 = _mm256_hadd_ps(h2, h3);
    __m256 t2 = _mm256_hadd_ps(h4, h5), t3 = _mm256_hadd_ps(h6, h7);
    __m256 u0 = _mm256_hadd_ps(t0, t1), u1 = _mm256_hadd_ps(t2, t3);
    _mm_storeu_ps(out, _mm_add_ps(_mm256_castps256_ps128(u0), _mm256_extractf128_ps(u0, 1)));
    _mm_storeu_ps(out + 4, _mm_add_ps(_mm256_castps256_ps128(u1), _mm256_extractf128_ps(u1, 1)));
}
/* r[p] = vf_hsum(a[p]) for p < 16, as one vector: each sum by vf_hsum's tree (lanes l and
 * l + 8, then adjacent pairs twice, then the two halves; a + b = b + a exactly, so only the
 * tree counts), so a dot product's bits do not depend on which reduction computed it.
 * 30 shuffles and 15 adds for 16 sums, where vf_hsum8 takes about 40 instructions for 8:
 * the decode's scores (8 rows x 2 keys per call) reduce through it. The pairs below are
 * chosen so that the sums come out in order: lane p of the last step holds the tree of
 * a[p] (the fold puts a[p] and a[p + 4] side by side, p % 8 < 4). */
static inline vf vf_hsum16(const vf a[16])
{
#define HSUM16_FOLD(x, y) /* [x_l + x_l+8 | y_l + y_l+8], l < 8 */                            \
    _mm512_add_ps(_mm512_shuffle_f32x4(x, y, 0x44), _mm512_shuffle_f32x4(x, y, 0xEE))
#define HSUM16_PAIRS(x, y) /* per 128 bits: x0 + x1, x2 + x3, y0 + y1, y2 + y3 (hadd) */     \
    _mm512_add_ps(_mm512_shuffle_ps(x, y, 0x88), _mm512_shuffle_ps(x, y, 0xDD))
    const vf f0 = HSUM16_FOLD(a[0], a[4]), f1 = HSUM16_FOLD(a[1], a[5]);
    const vf f2 = HSUM16_FOLD(a[2], a[6]), f3 = HSUM16_FOLD(a[3], a[7]);
    const vf f4 = HSUM16_FOLD(a[8], a[12]), f5 = HSUM16_FOLD(a[9], a[13]);
    const vf f6 = HSUM16_FOLD(a[10], a[14]), f7 = HSUM16_FOLD(a[11], a[15]);
    const vf g0 = HSUM16_PAIRS(f0, f1), g1 = HSUM16_PAIRS(f2, f3);
    const vf g2 = HSUM16_PAIRS(f4, f5), g3 = HSUM16_PAIRS(f6, f7);
    const vf k0 = HSUM16_PAIRS(g0, g1), k1 = HSUM16_PAIRS(g2, g3);
#undef HSUM16_FOLD
#undef HSUM16_PAIRS
    /* 128-bit lanes of k0: sums of a0-3 (first half of each tree), a0-3 (second half),
     * a4-7, a4-7; k1 the same for a8-15 */
    return _mm512_add_ps(_mm512_shuffle_f32x4(k0, k1, 0x88), _mm512_shuffle_f32x4(k0, k1, 0xDD));
}
/* s[r * lds + c] = t[2 r + c] for c < 2 and r < n (7 or 8): a pair of sums per row */
static inline void vf_store_pairs(float *s, int64_t lds, vf t, int n)
{
    const __m128 x0 = _mm512_castps512_ps128(t), x1 = _mm512_extractf32x4_ps(t, 1);
    const __m128 x2 = _mm512_extractf32x4_ps(t, 2), x3 = _mm512_extractf32x4_ps(t, 3);
    _mm_storel_pi((__m64 *)(void *)s, x0);
    _mm_storeh_pi((__m64 *)(void *)(s + lds), x0);
    _mm_storel_pi((__m64 *)(void *)(s + 2 * lds), x1);
    _mm_storeh_pi((__m64 *)(void *)(s + 3 * lds), x1);
    _mm_storel_pi((__m64 *)(void *)(s + 4 * lds), x2);
    _mm_storeh_pi((__m64 *)(void *)(s + 5 * lds), x2);
    _mm_storel_pi((__m64 *)(void *)(s + 6 * lds), x3);
    if (n > 7)
        _mm_storeh_pi((__m64 *)(void *)(s + 7 * lds), x3);
}
/* NaN-aware horizontal max: NaN if any lane is NaN */
static inline float vf_hmax(vf a)
{
    if (_mm512_cmp_ps_mask(a, a, _CMP_UNORD_Q))
        return __builtin_nanf("");
    return _mm512_reduce_max_ps(a);
}
static inline vf vf_pow2i(vf n)
{
    __m512i e = _mm512_add_epi32(_mm512_cvtps_epi32(n), _mm512_set1_epi32(127));
    return _mm512_castsi512_ps(_mm512_slli_epi32(e, 23));
}
static inline vf vf_round(vf x) { return _mm512_roundscale_ps(x, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC); }
static inline vf vf_select_lt(vf x, float t, vf if_lt, vf other)
{
    return _mm512_mask_blend_ps(_mm512_cmp_ps_mask(x, _mm512_set1_ps(t), _CMP_LT_OQ), other, if_lt);
}
static inline vf vf_load_f16(const uint16_t *p)
{
    return _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)(const void *)p));
}
static inline vf vf_load_bf16(const uint16_t *p)
{
    __m512i w = _mm512_cvtepu16_epi32(_mm256_loadu_si256((const __m256i *)(const void *)p));
    return _mm512_castsi512_ps(_mm512_slli_epi32(w, 16));
}
/* VLEN fp8 (SPEC 2.9) at p as binary32, exact: as simd_avx2.h's (binary16 bits, then
 * vcvtph2ps and times 2^8). */
static inline vf vf_load_f8e4m3(const uint8_t *p)
{
    __m256i b = _mm256_cvtepi8_epi16(_mm_loadu_si128((const __m128i *)(const void *)p));
    __m256i h = _mm256_and_si256(_mm256_slli_epi16(b, 7), _mm256_set1_epi16((short)0xbf80));
    __m256i em = _mm256_and_si256(h, _mm256_set1_epi16(0x3f80));
    h = _mm256_or_si256(h, _mm256_cmpeq_epi16(em, _mm256_set1_epi16(0x3f80)));
    return _mm512_mul_ps(_mm512_cvtph_ps(h), _mm512_set1_ps(256.0f));
}
/* VLEN e4m3fn at p, none of them NaN (S.1111.111), as binary32 times 2^-8, exactly: the
 * binary16 bits of vf_load_f8e4m3 without its NaN select and its scaling (4 instructions
 * per vector instead of 8). The decode multiplies the other factor by 2^8 instead (Q's
 * packed rows, the weights), so every product, and so every fma, is the same. */
static inline vf vf_load_f8e4m3_s8(const uint8_t *p)
{
    __m256i b = _mm256_cvtepi8_epi16(_mm_loadu_si128((const __m128i *)(const void *)p));
    return _mm512_cvtph_ps(_mm256_and_si256(_mm256_slli_epi16(b, 7), _mm256_set1_epi16((short)0xbf80)));
}
/* Nonzero if one of the n bytes at p is an e4m3fn NaN (S.1111.111): where none is, the
 * decode reads the tile with vf_load_f8e4m3_s8 */
static inline int vf_f8e4m3_any_nan(const uint8_t *p, int64_t n)
{
    const __m512i m = _mm512_set1_epi8(0x7f);
    __mmask64 acc = 0;
    int64_t i = 0;
#pragma GCC unroll 4
    for (; i + 64 <= n; i += 64)
        acc |= _mm512_cmpeq_epi8_mask(_mm512_and_si512(_mm512_loadu_si512(p + i), m), m);
    int any = acc != 0;
    for (; i < n; i++)
        any |= (p[i] & 0x7f) == 0x7f;
    return any;
}
static inline vf vf_load_f8e5m2(const uint8_t *p)
{
    __m256i h = _mm256_slli_epi16(_mm256_cvtepu8_epi16(_mm_loadu_si128((const __m128i *)(const void *)p)), 8);
    return _mm512_cvtph_ps(h);
}
/* VLEN int8 (uint8) at p as binary32 (exact), and one binary16 as binary32 (exact): the q8_0 and
 * q4_0 blocks' quants and scales (SPEC 2.9). */
static inline vf vf_load_i8(const int8_t *p)
{
    return _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm_loadu_si128((const __m128i *)(const void *)p)));
}
static inline vf vf_load_u8(const uint8_t *p)
{
    return _mm512_cvtepi32_ps(_mm512_cvtepu8_epi32(_mm_loadu_si128((const __m128i *)(const void *)p)));
}
static inline float vf_f16_to_f32(uint16_t h) { return _cvtsh_ss(h); }
/* Nonzero if some lane is NaN. */
static inline int vf_has_nan(vf x) { return _mm512_cmp_ps_mask(x, x, _CMP_UNORD_Q) != 0; }
/* VLEN binary32 to binary16 / bfloat16 at p (any address), each rounded once to nearest
 * even, overflowing to +-inf: smattn_store's result for every value but NaN (whose sign
 * and payload these keep; callers test vf_has_nan). bf16 rounds on the bits: adding
 * 0x7fff plus the kept lsb carries into the kept half exactly when the dropped half is
 * above the halfway point, or at it with an odd lsb; a finite value's carry stops at
 * +-inf. */
static inline void vf_store_f16(uint16_t *p, vf x)
{
    _mm256_storeu_si256((__m256i *)(void *)p,
                        _mm512_cvtps_ph(x, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
}
static inline void vf_store_bf16(uint16_t *p, vf x)
{
    __m512i u = _mm512_castps_si512(x);
    __m512i odd = _mm512_and_si512(_mm512_srli_epi32(u, 16), _mm512_set1_epi32(1));
    __m512i r = _mm512_srli_epi32(_mm512_add_epi32(u, _mm512_add_epi32(odd, _mm512_set1_epi32(0x7fff))), 16);
    _mm256_storeu_si256((__m256i *)(void *)p, _mm512_cvtepi32_epi16(r));
}
/* Transpose a 16 x 16 block: r[i] holds row i; column c (a vector over the rows) is
 * stored at dst + c * ldd. Moves only: exact. */
static inline void vf_transpose_store(const vf r[16], float *dst, int64_t ldd)
{
    vf t[16], u[16];
    for (int i = 0; i < 16; i += 2) {
        t[i] = _mm512_unpacklo_ps(r[i], r[i + 1]);     /* lane L: r_i[4L], r_i+1[4L], ..[4L+1] */
        t[i + 1] = _mm512_unpackhi_ps(r[i], r[i + 1]); /* the same for 4L+2, 4L+3 */
    }
    for (int i = 0; i < 16; i += 4) { /* u[i + c]: column 4L + c of rows i .. i+3 in lane L */
        u[i] = _mm512_shuffle_ps(t[i], t[i + 2], 0x44);
        u[i + 1] = _mm512_shuffle_ps(t[i], t[i + 2], 0xEE);
        u[i + 2] = _mm512_shuffle_ps(t[i + 1], t[i + 3], 0x44);
        u[i + 3] = _mm512_shuffle_ps(t[i + 1], t[i + 3], 0xEE);
    }
    for (int c = 0; c < 4; c++) {
        vf v0 = _mm512_shuffle_f32x4(u[c], u[4 + c], 0x88);  /* lanes 0, 2 of rows 0-3, 4-7 */
        vf v1 = _mm512_shuffle_f32x4(u[c], u[4 + c], 0xDD);  /* lanes 1, 3 */
        vf v2 = _mm512_shuffle_f32x4(u[8 + c], u[12 + c], 0x88);
        vf v3 = _mm512_shuffle_f32x4(u[8 + c], u[12 + c], 0xDD);
        _mm512_storeu_ps(dst + c * ldd, _mm512_shuffle_f32x4(v0, v2, 0x88));       /* col c */
        _mm512_storeu_ps(dst + (c + 8) * ldd, _mm512_shuffle_f32x4(v0, v2, 0xDD)); /* c + 8 */
        _mm512_storeu_ps(dst + (c + 4) * ldd, _mm512_shuffle_f32x4(v1, v3, 0x88)); /* c + 4 */
        _mm512_storeu_ps(dst + (c + 12) * ldd, _mm512_shuffle_f32x4(v1, v3, 0xDD));
    }
}
#endif
