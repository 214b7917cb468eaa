/* SPDX-License-Identifier: MIT */
/* kernel_body.h: the flash-attention kernel, written once over the vector vocabulary of a
 * simd_<isa>.h included before it (VLEN, vf, vf_*; ISA_SUFFIX names the instance).
 *
 * One work item = one batch, one KV head, a block of queries for all Hq/Hkv query heads
 * that share that KV head (so each K/V tile is loaded once for the whole group), and a
 * key range (all keys, or one split-K chunk). Keys are visited in tiles of OPT_BK in
 * increasing order with an online softmax (running max m, denominator l, numerators acc);
 * tiles that no row can see are skipped, and masked keys' V rows are never multiplied.
 * Every row is computed by one item in a fixed order, so results do not depend on the
 * thread count. Rows that meet a non-finite score, denominator or numerator go to the
 * binary64 path (opt/slow.c). */
#include <math.h>
#include <string.h>

#include "opt/opt_internal.h"

#define KN(name) ISA_SUFFIX(name)
#if VLEN == 16
#define QK_KB 4 /* keys per QK micro-tile */
#else
#define QK_KB 2
#endif

/* ---- exp ---------------------------------------------------------------------------------
 * e^x for binary32 x: n = round(x log2 e), r = x - n ln2 (two fma steps, Cody-Waite),
 * e^r by its degree-7 Taylor polynomial (|r| <= 0.347: truncation < 2^-29 relative),
 * times 2^n. Inputs below ln(FLT_MIN) = -87.3365 give +0 (the kernel flushes results below
 * the normal range: SPEC 6's "tiny" is FLT_MIN for it), above 88.72 give +inf, NaN gives
 * NaN. Maximum error over every binary32 input, measured by `make check-exp` against a
 * correctly rounded reference: see OPT_EXP_ULPS in smattn.h. */
/* The shared core: n = round(xc log2 e) and e^r for r = xc - n ln2, for |xc| <= 100 */
static inline vf KN(vexp_core)(vf xc, vf *n_out)
{
    vf n = vf_round(vf_mul(xc, vf_set1(0x1.715476p+0f)));
    vf r = vf_fmadd(n, vf_set1(-0x1.62e4p-1f), xc);   /* exact: ln2_hi has 16 bits */
    r = vf_fmadd(n, vf_set1(-0x1.7f7d1cp-20f), r);
    vf p = vf_set1(0x1.a01a02p-13f);               /* 1/7! */
    p = vf_fmadd(p, r, vf_set1(0x1.6c16c2p-10f));  /* 1/6! */
    p = vf_fmadd(p, r, vf_set1(0x1.111112p-7f));   /* 1/5! */
    p = vf_fmadd(p, r, vf_set1(0x1.555556p-5f));   /* 1/4! */
    p = vf_fmadd(p, r, vf_set1(0x1.555556p-3f));   /* 1/3! */
    p = vf_fmadd(p, r, vf_set1(0x1p-1f));
    p = vf_fmadd(p, r, vf_set1(1.0f));
    p = vf_fmadd(p, r, vf_set1(1.0f));
    *n_out = n;
    return p;
}

static inline vf KN(vexp)(vf x)
{
    /* work on x clamped to [-100, 100] so every integer below is small; the ends are
     * fixed by the selects at the bottom, a NaN x stays NaN through r and p */
    vf xc = vf_select_lt(x, -100.0f, vf_set1(-100.0f), x);
    xc = vf_select_lt(vf_sub(vf_set1(100.0f), xc), 0.0f, vf_set1(100.0f), xc);
    vf n, p = KN(vexp_core)(xc, &n);
    /* 2^n as 2^nc * 2^(n - nc) with nc in the normal exponent range */
    vf nc = vf_select_lt(n, -126.0f, vf_set1(-126.0f), n);
    nc = vf_select_lt(nc, 127.0f, nc, vf_set1(127.0f));
    vf y = vf_mul(vf_mul(p, vf_pow2i(nc)), vf_pow2i(vf_sub(n, nc)));
    y = vf_select_lt(x, -87.33654f, vf_zero(), y);                          /* flush */
    y = vf_select_lt(vf_sub(vf_set1(88.72283f), x), 0.0f, vf_set1(HUGE_VALF), y); /* +inf */
    return y;
}

/* vexp for x <= 0 or -inf only (the softmax's s - max and m_old - m_new), with the same
 * result bits: there the upper clamps and the +inf select are no-ops, and 2^n needs no
 * split, since n < -126 only where x < -87.3365 and the result is flushed to +0 anyway
 * (the garbage 2^n of such lanes is discarded by the flush). `make check-exp` and
 * test_opt compare the two over binary32 inputs in [-104, 0]. */
static inline vf KN(vexp_le0)(vf x)
{
    vf n, p = KN(vexp_core)(vf_select_lt(x, -100.0f, vf_set1(-100.0f), x), &n);
    return vf_select_lt(x, -87.33654f, vf_zero(), vf_mul(p, vf_pow2i(n))); /* flush */
}

static float KN(expf_le0)(float x)
{
    float t[VLEN];
    vf_store(t, KN(vexp_le0)(vf_set1(x)));
    return t[0];
}

static float KN(expf1)(float x)
{
    float t[VLEN];
    vf_store(t, KN(vexp)(vf_set1(x)));
    return t[0];
}

/* ---- loads -------------------------------------------------------------------------------- */

/* n / 32 blocks of q8_0 or q4_0 (dt, SPEC 2.9) at src as binary32 into dst: each element
 * d * q, the scale and the quant exact in binary32 and their product too (11 + 8
 * significant bits, within the exponent range), so the tile holds the real values (an
 * infinite or NaN scale gives the IEEE products, inf * 0 = NaN, as smattn_load). q4_0's
 * nibbles are split eight bytes at a time (low nibbles: elements 0-15, high: 16-31) and
 * read as unsigned bytes; n - 8 is exact in binary32. */
static void KN(dequant_blocks)(float *dst, const unsigned char *src, smattn_dtype dt, int64_t n)
{
    if (dt == SMATTN_Q8_0) {
        for (int64_t c = 0; c < n; c += SMATTN_QBLOCK, src += 34) {
            const uint16_t h = (uint16_t)(src[0] | src[1] << 8); /* little-endian */
            const vf vd = vf_set1(vf_f16_to_f32(h));
            const int8_t *q = (const int8_t *)(const void *)(src + 2);
#pragma GCC unroll 32
            for (int j = 0; j < SMATTN_QBLOCK; j += VLEN)
                vf_store(dst + c + j, vf_mul(vf_load_i8(q + j), vd));
        }
        return;
    }
    const vf v8 = vf_set1(8.0f);
    for (int64_t c = 0; c < n; c += SMATTN_QBLOCK, src += 18) {
        const uint16_t h = (uint16_t)(src[0] | src[1] << 8);
        const vf vd = vf_set1(vf_f16_to_f32(h));
        uint64_t x[2], nib[4];
        memcpy(x, src + 2, 16);
        const uint64_t m = UINT64_C(0x0f0f0f0f0f0f0f0f);
        nib[0] = x[0] & m, nib[1] = x[1] & m, nib[2] = (x[0] >> 4) & m, nib[3] = (x[1] >> 4) & m;
        const uint8_t *u = (const uint8_t *)nib; /* byte k: nibble k (the masks and shifts
                                                   * act within each byte, any endianness) */
#pragma GCC unroll 32
        for (int j = 0; j < SMATTN_QBLOCK; j += VLEN)
            vf_store(dst + c + j, vf_mul(vf_sub(vf_load_u8(u + j), v8), vd));
    }
}

/* n elements of a K/V/Q row (any input dtype but f64, unit or general stride) as f32 into
 * dst, zero padded up to np. A block format has unit stride and n, off multiples of 32
 * (SPEC 2.9, validated). */
static void KN(load_row)(float *dst, const smattn_tensor *t, int64_t off, int64_t stride,
                         int64_t n, int64_t np)
{
    int64_t d = 0;
    if (opt_is_block(t->dtype)) {
        KN(dequant_blocks)(dst, (const unsigned char *)t->data + opt_byte_off(t->dtype, off),
                           t->dtype, n);
        d = n;
    } else if (stride == 1 && t->dtype == SMATTN_F32) {
        memcpy(dst, (const unsigned char *)t->data + off * 4, (size_t)n * sizeof(float));
        d = n;
    } else if (stride == 1 && (t->dtype == SMATTN_F16 || t->dtype == SMATTN_BF16)) {
        const uint16_t *src = (const uint16_t *)t->data + off;
        for (; d + VLEN <= n; d += VLEN)
            vf_store(dst + d, t->dtype == SMATTN_F16 ? vf_load_f16(src + d) : vf_load_bf16(src + d));
        for (; d < n; d++)
            dst[d] = (float)smattn_load(t->data, t->dtype, off + d);
    } else if (stride == 1 && (t->dtype == SMATTN_F8E4M3 || t->dtype == SMATTN_F8E5M2)) {
        const uint8_t *src = (const uint8_t *)t->data + off;
        for (; d + VLEN <= n; d += VLEN)
            vf_store(dst + d, t->dtype == SMATTN_F8E4M3 ? vf_load_f8e4m3(src + d)
                                                        : vf_load_f8e5m2(src + d));
        for (; d < n; d++)
            dst[d] = (float)smattn_load(t->data, t->dtype, off + d);
    } else {
        for (; d < n; d++) /* exact for fp8/f16/bf16/f32; f64 inputs are not accepted */
            dst[d] = (float)smattn_load(t->data, t->dtype, off + d * stride);
    }
    for (; d < np; d++)
        dst[d] = 0.0f;
}

/* ---- micro-kernels ------------------------------------------------------------------------ */

/* The next tile's K and V rows, to be requested during this tile's QK (n = 0: none). The
 * rows are named by their addresses (opt_tile_rows, through the layout's locator), so
 * that a tile across pages is requested whole, not only its first page's run. */
typedef struct opt_prefetch {
    const char *const *k, *const *v; /* row j's address at k[j], v[j] (v NULL: K only) */
    size_t kbytes, vbytes;           /* bytes of a row */
    int64_t n;                       /* rows */
} opt_prefetch;

static inline void opt_prefetch_rows(const opt_prefetch *pf, int64_t j0, int64_t j1)
{
    /* K and V rows together, two lines of each per trip (the loop's own instructions
     * were a third of it); may hint a line past a row's end: a hint never faults */
    const size_t n = pf->kbytes > pf->vbytes ? pf->kbytes : pf->vbytes;
    for (int64_t j = j0; j < j1 && j < pf->n; j++) {
        const char *k = pf->k[j], *v = pf->v ? pf->v[j] : k;
        for (size_t off = 0; off < n; off += 128) {
            __builtin_prefetch(k + off, 0, 3);
            __builtin_prefetch(k + off + 64, 0, 3);
            __builtin_prefetch(v + off, 0, 3);
            __builtin_prefetch(v + off + 64, 0, 3);
        }
    }
}

/* A cursor over rows (their addresses at row[0 .. rows)) to prefetch one line at a time,
 * spread over a loop's trips. */
typedef struct opt_pfcur {
    const char *const *row;
    size_t col, rowbytes;
    int64_t rows;
} opt_pfcur;

static inline void opt_pf_line(opt_pfcur *c)
{
    if (c->rows <= 0)
        return;
    __builtin_prefetch(*c->row + c->col, 0, 2);
    c->col += 64;
    if (c->col >= c->rowbytes) {
        c->col = 0;
        c->row++;
        c->rows--;
    }
}

/* Four lines of the cursor's row at once (the same rate per call as four opt_pf_line, a
 * quarter of the tests: in the decode's P.V those were 56 instructions per key and head
 * with AVX2); may hint up to three lines past a row's end: a hint never faults */
static inline void opt_pf_lines4(opt_pfcur *c)
{
    if (c->rows <= 0)
        return;
    const char *a = *c->row + c->col;
    __builtin_prefetch(a, 0, 2);
    __builtin_prefetch(a + 64, 0, 2);
    __builtin_prefetch(a + 128, 0, 2);
    __builtin_prefetch(a + 192, 0, 2);
    c->col += 256;
    if (c->col >= c->rowbytes) {
        c->col = 0;
        c->row++;
        c->rows--;
    }
}

/* The K rows of pf that column pass c of np passes over the tile requests (rows [ra, rz)
 * of the pf->n, all their lines, one row per four keys): the same rows and lines as
 * pv_tile's cursor, at a few instructions per row instead of a cursor kept in memory and
 * tested per trip (a quarter of the AVX2 group P.V's instructions) */
typedef struct opt_pfrows {
    const char *const *row;
    int64_t n;
    size_t bytes;
} opt_pfrows;
static inline opt_pfrows opt_pf_share(const opt_prefetch *pf, int64_t c, int64_t np)
{
    const int64_t ra = c * pf->n / np, rz = (c + 1) * pf->n / np;
    return (opt_pfrows){pf->k ? pf->k + ra : NULL, rz - ra, pf->kbytes};
}
static inline void opt_pf_row(const opt_pfrows *pr, int64_t t)
{
    if (t < pr->n) /* four lines per step: may hint up to three past the row's end */
        for (size_t off = 0; off < pr->bytes; off += 256) {
            const char *a = pr->row[t] + off;
            __builtin_prefetch(a, 0, 2);
            __builtin_prefetch(a + 64, 0, 2);
            __builtin_prefetch(a + 128, 0, 2);
            __builtin_prefetch(a + 192, 0, 2);
        }
}

/* The keys of one block of the keys-in-lanes scores (qkt_tile: QKT_KB vectors), and the
 * panel width of the transposed key tile: KT[j / QKT_W][d][j % QKT_W], so that a block's
 * columns over every d are contiguous (8 KiB with AVX2) and stay in L1 through the unit's
 * row blocks; with AVX-512 a block is the whole tile (the plain [d][j] layout). */
#define QKT_W (VLEN == 16 ? 4 * VLEN : 2 * VLEN)

/* The column panel of a staged V tile (stage_v): the columns of one pv_tile column pass,
 * pv_block4x4's with AVX-512, pv_block's two vectors otherwise. */
#define PV_PANEL (VLEN == 16 ? 4 * VLEN : 2 * VLEN)

/* Keys per step of the decode's keys-outer scores (kernel_tile.h's qk_keys): two with
 * AVX-512 (qk_8x2: 16 dot products reduced together by vf_hsum16), one otherwise (AVX2's
 * 16 registers hold 8 accumulators, and vf_hsum8 already reduces 8 dot products at once). */
#define KO_KB (VLEN == 16 ? 2 : 1)

/* KTN(qk_tile, f16): the instance of a micro-kernel for one storage type of K/V */
#define KTN_CAT2(a, b) a##_##b
#define KTN_CAT(a, b) KTN_CAT2(a, b)
#define KTN(name, type) KTN_CAT(KN(name), type)
#define TILE_T float
#define TILE_LOAD vf_load
#define TILE_SUFFIX f32
#include "opt/kernel_tile.h"
#define TILE_T uint16_t
#define TILE_LOAD vf_load_f16
#define TILE_SUFFIX f16
#include "opt/kernel_tile.h"
#define TILE_T uint16_t
#define TILE_LOAD vf_load_bf16
#define TILE_SUFFIX bf16
#include "opt/kernel_tile.h"
#define TILE_T uint8_t
#define TILE_LOAD vf_load_f8e4m3
#define TILE_SUFFIX f8e4m3
#include "opt/kernel_tile.h"
#define TILE_T uint8_t
#define TILE_LOAD vf_load_f8e5m2
#define TILE_SUFFIX f8e5m2
#include "opt/kernel_tile.h"
#if VLEN > 1
/* e4m3 K and V of a decode tile with no NaN byte: read as 2^-8 times their values
 * (vf_load_f8e4m3_s8, half the instructions of vf_load_f8e4m3), the other factor of each
 * product taken times 2^8 (Q's packed rows, the weights), which is exact, so every product
 * and every fma is the one of the f8e4m3 instance: the same bits. Only its qk_keys is used. */
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wunused-function"
#define TILE_T uint8_t
#define TILE_LOAD vf_load_f8e4m3_s8
#define TILE_SUFFIX f8e4m3s8
#include "opt/kernel_tile.h"
#pragma GCC diagnostic pop
#endif

/* ---- scores of many rows: keys in the lanes ----------------------------------------------
 * With vectors and S >= 16 (job->qkt), the tile is transposed once per unit (KT[d][j]) and
 * S[r][j] = sum_d q_r[d] KT[d][j] accumulates along d in one fma chain per (row, key), the
 * keys in the lanes: no horizontal sums, and the transposition is shared by every row of
 * the unit. Each (row, key) gets the same serial sum whichever block computes it (SPEC 6.1
 * A2 allows any order). The choice reads S and the ISA only, so a GQA problem and its MHA
 * expansion (and every thread count) take the same path. */
#if VLEN >= 8 /* blocks of 6 rows x QKT_KB vectors: 24 of AVX-512's 32 registers, 12 of
                * AVX2's 16 (+ 2 key vectors and a broadcast): `make bench-tiles` gives
                * 84-93 GFLOP/s on one AVX2 core against 59-74 for the 8-row hsum kernel
                * (an earlier 2 x 4
                * block, 8 accumulators, was slower than it) */
#define QKT_KB (VLEN == 16 ? 4 : 2) /* key vectors per block */
_Static_assert(QKT_KB * VLEN == QKT_W, "a block of qkt_tile is one panel of the key tile");
#define QKT_ROW(r)                                                                             \
    do {                                                                                       \
        if (RB > (r)) {                                                                        \
            vf qq = vf_set1(q[(r) * ldq + d]);                                                 \
            a##r##0 = vf_fmadd(qq, k0, a##r##0);                                               \
            if (KV > 1)                                                                        \
                a##r##1 = vf_fmadd(qq, k1, a##r##1);                                           \
            if (KV > 2)                                                                        \
                a##r##2 = vf_fmadd(qq, k2, a##r##2);                                           \
            if (KV > 3)                                                                        \
                a##r##3 = vf_fmadd(qq, k3, a##r##3);                                           \
        }                                                                                      \
    } while (0)
#define QKT_STORE(r)                                                                           \
    do {                                                                                       \
        if (RB > (r)) {                                                                        \
            vf_store(s + (r) * OPT_BK, a##r##0);                                               \
            if (KV > 1)                                                                        \
                vf_store(s + (r) * OPT_BK + VLEN, a##r##1);                                    \
            if (KV > 2)                                                                        \
                vf_store(s + (r) * OPT_BK + 2 * VLEN, a##r##2);                                \
            if (KV > 3)                                                                        \
                vf_store(s + (r) * OPT_BK + 3 * VLEN, a##r##3);                                \
        }                                                                                      \
    } while (0)
/* s[r][0 .. KV VLEN) = q_r . KT[.][0 .. KV VLEN) for RB rows (q at stride ldq, s at OPT_BK):
 * a tile that ends early (the causal diagonal) takes fewer key vectors */
#define QKT_DEFINE(N, K)                                                                       \
    static void KN(qkt_##N##_##K)(const float *q, int64_t ldq, const float *kt, int64_t D,     \
                                  float *s)                                                    \
    {                                                                                          \
        const int RB = N, KV = K;                                                              \
        vf a00 = vf_zero(), a01 = vf_zero(), a02 = vf_zero(), a03 = vf_zero();                 \
        vf a10 = vf_zero(), a11 = vf_zero(), a12 = vf_zero(), a13 = vf_zero();                 \
        vf a20 = vf_zero(), a21 = vf_zero(), a22 = vf_zero(), a23 = vf_zero();                 \
        vf a30 = vf_zero(), a31 = vf_zero(), a32 = vf_zero(), a33 = vf_zero();                 \
        vf a40 = vf_zero(), a41 = vf_zero(), a42 = vf_zero(), a43 = vf_zero();                 \
        vf a50 = vf_zero(), a51 = vf_zero(), a52 = vf_zero(), a53 = vf_zero();                 \
        for (int64_t d = 0; d < D; d++) {                                                      \
            const float *k = kt + d * QKT_W;                                                   \
            vf k0 = vf_load(k);                                                                \
            vf k1 = KV > 1 ? vf_load(k + VLEN) : vf_zero();                                    \
            vf k2 = KV > 2 ? vf_load(k + 2 * VLEN) : vf_zero();                                \
            vf k3 = KV > 3 ? vf_load(k + 3 * VLEN) : vf_zero();                                \
            QKT_ROW(0);                                                                        \
            QKT_ROW(1);                                                                        \
            QKT_ROW(2);                                                                        \
            QKT_ROW(3);                                                                        \
            QKT_ROW(4);                                                                        \
            QKT_ROW(5);                                                                        \
        }                                                                                      \
        QKT_STORE(0);                                                                          \
        QKT_STORE(1);                                                                          \
        QKT_STORE(2);                                                                          \
        QKT_STORE(3);                                                                          \
        QKT_STORE(4);                                                                          \
        QKT_STORE(5);                                                                          \
    }
QKT_DEFINE(2, 1)
QKT_DEFINE(4, 1)
QKT_DEFINE(6, 1)
QKT_DEFINE(2, 2)
QKT_DEFINE(4, 2)
QKT_DEFINE(6, 2)
#if VLEN == 16
QKT_DEFINE(2, 3)
QKT_DEFINE(4, 3)
QKT_DEFINE(6, 3)
QKT_DEFINE(2, 4)
QKT_DEFINE(4, 4)
QKT_DEFINE(6, 4)
/* qkt_N_4 whose rows each see the whole tile (64 keys, 4 vectors) of a problem with no mask,
 * bias, softcap or ALiBi: the epilogue does finish_scores's work on the accumulators, the
 * same operations in the same order (y = x sh + x sl rounded once, stored; the max of -y
 * and of y over the vectors in order, then vf_hmax), and leaves the row's tile max in
 * tm[r] (NaN for a visible -inf score: the binary64 path), so that the softmax does not
 * read the scores back and call finish_scores for the row. */
#define QKTS_ROW(r)                                                                            \
    do {                                                                                       \
        if (RB > (r)) {                                                                        \
            vf y0 = vf_fmadd(a##r##0, vh, vf_mul(a##r##0, vl));                                \
            vf y1 = vf_fmadd(a##r##1, vh, vf_mul(a##r##1, vl));                                \
            vf y2 = vf_fmadd(a##r##2, vh, vf_mul(a##r##2, vl));                                \
            vf y3 = vf_fmadd(a##r##3, vh, vf_mul(a##r##3, vl));                                \
            vf_store(s + (r) * OPT_BK, y0), vf_store(s + (r) * OPT_BK + VLEN, y1);             \
            vf_store(s + (r) * OPT_BK + 2 * VLEN, y2), vf_store(s + (r) * OPT_BK + 3 * VLEN, y3); \
            vf vneg = vf_max(vf_set1(-HUGE_VALF), vf_sub(vf_zero(), y0));                     \
            vf vmax = vf_max(y0, vf_set1(-HUGE_VALF));                                         \
            vneg = vf_max(vneg, vf_sub(vf_zero(), y1)), vmax = vf_max(y1, vmax);               \
            vneg = vf_max(vneg, vf_sub(vf_zero(), y2)), vmax = vf_max(y2, vmax);               \
            vneg = vf_max(vneg, vf_sub(vf_zero(), y3)), vmax = vf_max(y3, vmax);               \
            tm[r] = vf_hmax(vneg) == HUGE_VALF ? (float)NAN : vf_hmax(vmax);                   \
        }                                                                                      \
    } while (0)
#define QKTS_DEFINE(N)                                                                         \
    static void KN(qkts_##N)(const float *q, int64_t ldq, const float *kt, int64_t D,          \
                             float *s, float sh, float sl, float *tm)                          \
    {                                                                                          \
        const int RB = N, KV = 4;                                                              \
        const vf vh = vf_set1(sh), vl = vf_set1(sl);                                           \
        vf a00 = vf_zero(), a01 = vf_zero(), a02 = vf_zero(), a03 = vf_zero();                 \
        vf a10 = vf_zero(), a11 = vf_zero(), a12 = vf_zero(), a13 = vf_zero();                 \
        vf a20 = vf_zero(), a21 = vf_zero(), a22 = vf_zero(), a23 = vf_zero();                 \
        vf a30 = vf_zero(), a31 = vf_zero(), a32 = vf_zero(), a33 = vf_zero();                 \
        vf a40 = vf_zero(), a41 = vf_zero(), a42 = vf_zero(), a43 = vf_zero();                 \
        vf a50 = vf_zero(), a51 = vf_zero(), a52 = vf_zero(), a53 = vf_zero();                 \
        for (int64_t d = 0; d < D; d++) {                                                      \
            const float *k = kt + d * QKT_W;                                                   \
            vf k0 = vf_load(k), k1 = vf_load(k + VLEN);                                        \
            vf k2 = vf_load(k + 2 * VLEN), k3 = vf_load(k + 3 * VLEN);                         \
            QKT_ROW(0);                                                                        \
            QKT_ROW(1);                                                                        \
            QKT_ROW(2);                                                                        \
            QKT_ROW(3);                                                                        \
            QKT_ROW(4);                                                                        \
            QKT_ROW(5);                                                                        \
        }                                                                                      \
        QKTS_ROW(0);                                                                           \
        QKTS_ROW(1);                                                                           \
        QKTS_ROW(2);                                                                           \
        QKTS_ROW(3);                                                                           \
        QKTS_ROW(4);                                                                           \
        QKTS_ROW(5);                                                                           \
    }
QKTS_DEFINE(2)
QKTS_DEFINE(4)
QKTS_DEFINE(6)
#undef QKTS_DEFINE
#undef QKTS_ROW
#endif
#undef QKT_DEFINE
#undef QKT_STORE
#undef QKT_ROW

_Static_assert(OPT_BK % (QKT_KB * VLEN) == 0, "qkt_tile covers a tile in whole blocks");

/* One block of qkt_tile: rb = 2, 4 or 6 rows, nv key vectors (1 .. QKT_KB) */
static inline void KN(qkt_block)(int rb, int64_t nv, const float *q, int64_t ldq,
                                 const float *kt, int64_t D, float *s)
{
#define QKT_NV(N)                                                                              \
    do {                                                                                       \
        if (nv == 1)                                                                           \
            KN(qkt_##N##_1)(q, ldq, kt, D, s);                                                 \
        else if (nv == 2 || VLEN != 16)                                                        \
            KN(qkt_##N##_2)(q, ldq, kt, D, s);                                                 \
        else                                                                                   \
            QKT_NV_WIDE(N);                                                                    \
    } while (0)
#if VLEN == 16
#define QKT_NV_WIDE(N)                                                                         \
    do {                                                                                       \
        if (nv == 3)                                                                           \
            KN(qkt_##N##_3)(q, ldq, kt, D, s);                                                 \
        else                                                                                   \
            KN(qkt_##N##_4)(q, ldq, kt, D, s);                                                 \
    } while (0)
#else
#define QKT_NV_WIDE(N) ((void)0)
#endif
    if (rb == 6)
        QKT_NV(6);
    else if (rb == 4)
        QKT_NV(4);
    else
        QKT_NV(2);
#undef QKT_NV_WIDE
#undef QKT_NV
}

/* S[r][j] for the rows [0, R) (q rows at stride Dp; rows [R, R rounded up to 2) are
 * padding, computed, not read) and the keys j < nk rounded up to whole vectors (KT: the
 * tile transposed, keys past nk zeros), where row r sees no key at or past hi[r] (its key
 * range's end, ws->hi; NULL: every key of the tile): each row block scores the key vectors
 * up to the last that one of its rows can see, and none past it. On a causal diagonal tile
 * the blocks of the earlier queries stop early. Every score a row can see has the same fma
 * chain whichever block computes it, so the same bits; the scores left unwritten are of keys
 * past the row's range, which finish_scores sets to -inf (flag 0) without using them. */
/* The scaled epilogue of qkt_tile (AVX-512; NULL: none): rows r with lo[r] <= kt,
 * hi[r] >= kt + OPT_BK and !slow[r] see the whole tile; a block of such rows is scored by
 * qkts_N, which leaves its rows' tile max in tm[r] and sets pre[r] = 2 (0 for the other
 * rows < R), for the softmax (unit_tile) */
typedef struct KN(qkt_fuse) {
    const int64_t *lo;
    const unsigned char *slow;
    float sh, sl;
    float *tm;
    unsigned char *pre;
} KN(qkt_fuse);

static void KN(qkt_tile)(const float *Q, int64_t R, int64_t D, int64_t Dp, const float *KT,
                         float *S, int64_t nk, const int64_t *hi, int64_t kt,
                         const KN(qkt_fuse) *fz)
{
    const int64_t Rq = (R + 1) / 2 * 2;
    /* every row sees every key of the tile (and, for the epilogue, from its first key, on
     * the float32 path): most tiles; then no block looks at its rows */
    int every = 1;
    for (int64_t r = 0; hi && r < R; r++)
        every &= hi[r] >= kt + nk && (!fz || (fz->lo[r] <= kt && !fz->slow[r]));
#if VLEN == 16
    if (fz && hi && nk == OPT_BK) {
        if (every)
            memset(fz->pre, 2, (size_t)R);
        for (int64_t r0 = 0; r0 < Rq;) {
            const int rb = Rq - r0 >= 6 ? 6 : (int)(Rq - r0); /* sixes, then a 4 or a 2 */
            int all = every;
            if (!every) {
                all = 1;
                for (int64_t r = r0; r < r0 + rb && r < R; r++)
                    all &= fz->lo[r] <= kt && hi[r] >= kt + OPT_BK && !fz->slow[r];
                for (int64_t r = r0; r < r0 + rb && r < R; r++)
                    fz->pre[r] = (unsigned char)(all ? 2 : 0);
            }
            float *s = S + r0 * OPT_BK;
            const float *q = Q + r0 * Dp;
            if (all && rb == 6)
                KN(qkts_6)(q, Dp, KT, D, s, fz->sh, fz->sl, fz->tm + r0);
            else if (all && rb == 4)
                KN(qkts_4)(q, Dp, KT, D, s, fz->sh, fz->sl, fz->tm + r0);
            else if (all)
                KN(qkts_2)(q, Dp, KT, D, s, fz->sh, fz->sl, fz->tm + r0);
            else {
                int64_t e = 0; /* keys of the tile the block's rows can see */
                for (int64_t r = r0; r < r0 + rb && r < R; r++)
                    e = hi[r] - kt > e ? hi[r] - kt : e;
                const int64_t nv = (e + VLEN - 1) / VLEN < 4 ? (e + VLEN - 1) / VLEN : 4;
                if (nv > 0)
                    KN(qkt_block)(rb, nv, q, Dp, KT, D, s);
            }
            r0 += rb;
        }
        return;
    }
#endif
    (void)fz;
    for (int64_t j0 = 0; j0 < nk; j0 += QKT_KB * VLEN) {
        const float *kp = KT + j0 / QKT_W * (Dp * QKT_W); /* the block's panel */
        int64_t nvt = (nk - j0 + VLEN - 1) / VLEN;
        nvt = nvt < QKT_KB ? nvt : QKT_KB;
        for (int64_t r0 = 0; r0 < Rq;) {
            const int rb = Rq - r0 >= 6 ? 6 : (int)(Rq - r0); /* sixes, then a 4 or a 2 */
            int64_t nv = nvt;
            if (!every) {
                int64_t e = 0; /* keys of the panel the block's rows can see */
                for (int64_t r = r0; r < r0 + rb && r < R; r++)
                    e = hi[r] - kt - j0 > e ? hi[r] - kt - j0 : e;
                nv = (e + VLEN - 1) / VLEN < nvt ? (e + VLEN - 1) / VLEN : nvt;
            }
            if (nv > 0)
                KN(qkt_block)(rb, nv, Q + r0 * Dp, Dp, kp, D, S + r0 * OPT_BK + j0);
            r0 += rb;
        }
    }
}
#undef QKT_KB
#endif

/* ---- scores of one tile -------------------------------------------------------------------- */

/* al[0 .. nk) = the symmetric or one-sided ALiBi addends of keys kt .. kt + nk for query i
 * (SPEC 2.8), as opt_alibi computes each: with vectors when every distance of the tile is
 * below 2^24 (then base + lane is the distance exactly, and the bits are opt_alibi's). */
static void KN(alibi_tile)(const smattn_problem *p, int64_t b, int64_t h, int64_t i, int64_t kt,
                           int64_t nk, float *al)
{
    static const float lane[16] = {0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15};
    const float m = smattn__alibi_slope(p, b, h);
    const int sym = p->alibi_mode == SMATTN_ALIBI_SYMMETRIC;
    /* the signed key offset from the reference key: c = i + T_b - S_b (symmetric, distance
     * -|j - c|) or T_b - 1 (one-sided, distance j - c) */
    const int64_t c = sym ? i + smattn__kv_len(p, b) - smattn__q_len(p, b)
                          : smattn__kv_len(p, b) - 1;
    const int64_t base = kt - c;
    int64_t jj = 0;
    if (base > -(INT64_C(1) << 24) && base + nk < (INT64_C(1) << 24)) {
        const vf vm = vf_set1(m), vz = vf_zero();
        for (; jj + VLEN <= nk; jj += VLEN) {
            vf f = vf_add(vf_set1((float)(base + jj)), vf_load(lane)); /* exact */
            if (sym)
                f = vf_sub(vz, vf_max(f, vf_sub(vz, f))); /* -|f| */
            vf_store(al + jj, vf_mul(vm, f));
        }
    }
    for (; jj < nk; jj++)
        al[jj] = opt_alibi(p, m, b, i, kt + jj);
}

/* Scale (split in two floats so that scale*dot rounds once), softcap, bias, visibility;
 * masked entries become -inf. Returns the tile max over visible entries (NaN-aware). When
 * *all_visible is set, vis[] is left unwritten. */
static float KN(finish_scores)(const opt_job *job, int64_t b, int64_t h, int64_t i, int64_t lo,
                               int64_t hi, int64_t kt, int64_t nk, float *s, unsigned char *vis,
                               int *all_visible)
{
    *all_visible = 0;
    const smattn_problem *p = job->p;
    const smattn_inputs *in = job->in;
    float sh, sl; /* the scale, with descales folded in (opt_scale) */
    opt_scale(job, b, job->qk_scale ? smattn__kv_head(p, h) : 0, &sh, &sl);
    const float cap = (float)p->softcap;
    float tmax = -HUGE_VALF;
    /* the symmetric or one-sided ALiBi addends, after the bias (SPEC 2.8) */
    const int alibi = p->alibi_mode == SMATTN_ALIBI_SYMMETRIC ||
                      p->alibi_mode == SMATTN_ALIBI_ONE_SIDED;
    float al[OPT_BK];
    if (alibi)
        KN(alibi_tile)(p, b, h, i, kt, nk, al);
    if (!in->mask.data && !in->bias.data && !(p->softcap > 0)) {
        /* visibility is the range [a, e) of the tile: scale everything with vectors, then
         * mask the ends (a tile on the causal diagonal or a window edge) */
        int64_t a = lo - kt > 0 ? lo - kt : 0, e = hi - kt < nk ? hi - kt : nk;
        if (e < a)
            e = a;
        vf vh = vf_set1(sh), vl = vf_set1(sl), vmax = vf_set1(-HUGE_VALF);
        if (a == 0 && e == nk && nk % VLEN == 0) {
            /* the whole tile visible (most tiles): the passes below in one, the same
             * operations in the same order */
            vf vneg = vf_set1(-HUGE_VALF);
            for (int64_t jj = 0; jj < nk; jj += VLEN) {
                vf x = vf_load(s + jj);
                vf y = vf_fmadd(x, vh, vf_mul(x, vl));
                if (alibi)
                    y = vf_add(y, vf_load(al + jj));
                vf_store(s + jj, y);
                vneg = vf_max(vneg, vf_sub(vf_zero(), y));
                vmax = vf_max(y, vmax);
            }
            *all_visible = 1;
            if (vf_hmax(vneg) == HUGE_VALF)
                return (float)NAN; /* a visible -inf: the binary64 path */
            return vf_hmax(vmax);
        }
        int64_t jj = 0;
        for (; jj + VLEN <= nk; jj += VLEN) {
            vf x = vf_load(s + jj);
            vf_store(s + jj, vf_fmadd(x, vh, vf_mul(x, vl)));
        }
        for (; jj < nk; jj++)
            s[jj] = fmaf(s[jj], sh, s[jj] * sl);
        if (alibi) {
            for (jj = 0; jj + VLEN <= nk; jj += VLEN)
                vf_store(s + jj, vf_add(vf_load(s + jj), vf_load(al + jj)));
            for (; jj < nk; jj++)
                s[jj] = s[jj] + al[jj];
        }
        /* a visible score of -inf (a -inf in K or an overflow, SPEC 4.2): max(-s) = +inf; a
         * NaN makes the max NaN, and the row's tmax NaN below */
        vf vneg = vf_set1(-HUGE_VALF);
        for (jj = a; jj + VLEN <= e; jj += VLEN)
            vneg = vf_max(vneg, vf_sub(vf_zero(), vf_load(s + jj)));
        int neg_inf = vf_hmax(vneg) == HUGE_VALF;
        for (; jj < e; jj++)
            neg_inf |= s[jj] == -HUGE_VALF;
        for (jj = 0; jj < a; jj++)
            s[jj] = -HUGE_VALF;
        for (jj = e; jj < nk; jj++)
            s[jj] = -HUGE_VALF;
        for (jj = 0; jj + VLEN <= nk; jj += VLEN)
            vmax = vf_max(vf_load(s + jj), vmax);
        tmax = vf_hmax(vmax);
        for (; jj < nk; jj++)
            if (s[jj] > tmax || s[jj] != s[jj])
                tmax = s[jj];
        *all_visible = a == 0 && e == nk;
        if (!*all_visible) { /* all visible: the flags are not written (the caller knows) */
            memset(vis, 0, (size_t)nk);
            memset(vis + a, 1, (size_t)(e - a));
        }
        if (neg_inf)
            return (float)NAN; /* the row goes to the binary64 path */
        return e > a ? tmax : -HUGE_VALF;
    }
    int neg_inf = 0;
    for (int64_t jj = 0; jj < nk; jj++) {
        int64_t j = kt + jj;
        /* visibility first (range, bool mask, a -inf bias), before any value of the score
         * is tested: a hidden key's K may hold anything (SPEC 3.6) */
        int ok = j >= lo && j < hi && smattn__mask_allows(p, in, b, h, i, j);
        float bj = 0.0f;
        if (ok && in->bias.data) {
            bj = opt_load1(&in->bias, smattn__off4(in->bias.stride, b, h, i, j));
            ok = bj != -HUGE_VALF;
        }
        float x = fmaf(s[jj], sh, s[jj] * sl);
        if (ok && p->softcap > 0) { /* cap may be 0: opt_softcap */
            /* softcap maps +-inf to +-cap: an infinite score (a non-finite k, or q.k beyond
             * FLT_MAX) cannot be told apart after it, so the binary64 path takes the row */
            if (isinf(x))
                neg_inf = 1;
            x = opt_softcap(x, cap);
        }
        if (ok && in->bias.data)
            x = x + (p->alibi_mode == SMATTN_ALIBI_MASK ? bj * smattn__alibi_slope(p, b, h) : bj);
        if (ok && alibi)
            x = x + al[jj];
        vis[jj] = (unsigned char)ok;
        s[jj] = ok ? x : -HUGE_VALF;
        if (ok && (x > tmax || x != x))
            tmax = x;
        if (ok && x == -HUGE_VALF)
            neg_inf = 1;
    }
    return neg_inf ? (float)NAN : tmax;
}

/* ---- one work item ------------------------------------------------------------------------
 * An item is job->hg units; a unit is the rows of one KV head (its G query heads x a block
 * of queries) against one key range. The units of an item are KV heads side by side, and
 * they visit the key tiles together (the head loop inside the tile loop), so that an item
 * reads K and V in address order; each row's arithmetic is the same whichever item or
 * neighbours it has. The workspace holds the units one after another, Rp rows each. */

/* Set up the rows of one unit; widens [*kmin, *kmax) to the keys they see. */
static void KN(unit_setup)(const opt_job *job, opt_ws *ws, int64_t base, int64_t b, int64_t g,
                           int64_t i0, int64_t k0, int64_t k1, int64_t *kmin, int64_t *kmax)
{
    const smattn_problem *p = job->p;
    const smattn_inputs *in = job->in;
    const int64_t D = p->D, Dvp = job->Dvp, R = job->R, nq = job->nq;
    const int64_t Rp = (R + 3) / 4 * 4; /* padding rows: zero q, weight 0, never written */
    const int64_t Dp = (D + VLEN - 1) / VLEN * VLEN;
    /* rows in the order of Q's addresses (query outer, its G heads inner: one run of G * D
     * elements per query) rather than row order (a query head's rows are Hq * D apart):
     * with the caches cold, the loads stream instead of waiting one by one */
    for (int64_t n = 0; n < R; n++) {
        int64_t hh = n % job->G, qq = n / job->G, r = hh * nq + qq;
        int64_t i = i0 + qq, h = g * job->G + hh, x = base + r;
        ws->m[x] = -HUGE_VALF;
        ws->l[x] = 0.0f;
        ws->slow[x] = 0;
        memset(ws->acc + x * Dvp, 0, (size_t)Dvp * sizeof(float));
        int64_t lo = 0, hi = 0;
        if (i < p->S) {
            smattn__key_range(p, b, i, &lo, &hi);
            smattn__clip_keys(k0, k1, &lo, &hi); /* proved: row keys in the chunk, [0,0) if none */
            if (hi > lo) {
                const smattn_tensor *qt_ = &in->q;
                KN(load_row)(ws->q + x * Dp, qt_, smattn__row_off(p, qt_->stride, b, i, h, 0),
                             qt_->stride[3], D, Dp);
                /* q - q is 0, or NaN for an infinite or NaN element (the padding is 0) */
                vf z = vf_zero();
                for (int64_t d = 0; d < Dp; d += VLEN) {
                    vf e = vf_load(ws->q + x * Dp + d);
                    z = vf_add(z, vf_sub(e, e));
                }
                if (vf_hsum(z) != 0.0f)
                    ws->slow[x] = 1; /* the row is NaN (SPEC 4.2): binary64 path */
                if (job->qk_scale && isnan(job->qk_scale[2 * (b * p->Hkv + g)]))
                    ws->slow[x] = 1; /* descales beyond binary32's safe range (opt.c) */
            }
        }
        ws->lo[x] = lo;
        ws->hi[x] = hi;
        smattn__hull_add(lo, hi, kmin, kmax); /* proved: [*kmin, *kmax) holds every row's keys */
        if (hi <= lo)
            memset(ws->q + x * Dp, 0, (size_t)Dp * sizeof(float));
    }
    for (int64_t r = R; r < Rp; r++) { /* padding rows: zero q and accumulators (their
                                        * results are never read; no stale bit patterns) */
        memset(ws->q + (base + r) * Dp, 0, (size_t)Dp * sizeof(float));
        memset(ws->acc + (base + r) * Dvp, 0, (size_t)Dvp * sizeof(float));
    }
    /* blocks of 8 rows packed for the QK micro-kernel: [d / VLEN][8 rows][VLEN] (not
     * used when the scores take the keys in the lanes: job->qkt with vectors) */
    const int packed = VLEN > 1 && !(VLEN >= 8 && job->qkt);
    for (int64_t r0 = 0; packed && r0 + 8 <= Rp; r0 += 8) {
        const float *q = ws->q + (base + r0) * Dp;
        float *qp = ws->qp + (base + r0) * Dp;
        for (int64_t d = 0; d < Dp; d += VLEN)
            for (int64_t r = 0; r < 8; r++)
                memcpy(qp + 8 * d + r * VLEN, q + r * Dp + d, VLEN * sizeof(float));
    }
}

#if VLEN > 1
/* The V tile (nk unit-stride rows of Dvk elements at stride ldv, f32, f16 or bf16) as f32
 * column panels: dst[c / PV_PANEL][j][c % PV_PANEL], panels OPT_BK * PV_PANEL floats apart.
 * Exact (moves and exact conversions). In place, a P.V column pass over a tile of many
 * rows reads one line from each of 64 rows 2 KiB apart (K/V [T, Hkv, D] with Hkv = 4,
 * D = 128), which the L1 holds in 2 of its 64 sets: each of the unit's row blocks read the
 * tile from L2 again. A panel is 64 consecutive lines. */
static void KN(stage_v)(float *dst, const smattn_tensor *vt, const void *row0, int64_t ldv,
                        int64_t nk, int64_t Dvk)
{
    const size_t es = smattn_dtype_size(vt->dtype);
    if (vt->dtype == SMATTN_F32 && Dvk % PV_PANEL == 0) {
        /* f32: whole panels, the type and the panel arithmetic out of the loop (a test per
         * vector and a division were most of the staging's instructions: callgrind, AVX2
         * prefill S = T = 512) */
        const float *src = (const float *)row0;
        for (int64_t j = 0; j < nk; j++, src += ldv) { /* V's rows in address order */
            float *d = dst + j * PV_PANEL;
            for (int64_t c = 0; c < Dvk; c += PV_PANEL, d += OPT_BK * PV_PANEL)
                for (int k = 0; k < PV_PANEL; k += VLEN)
                    vf_store(d + k, vf_load(src + c + k));
        }
        return;
    }
    for (int64_t j = 0; j < nk; j++) {
        const unsigned char *src = (const unsigned char *)row0 + (size_t)(j * ldv) * es;
        for (int64_t c = 0; c < Dvk; c += VLEN) {
            float *d = dst + c / PV_PANEL * (OPT_BK * PV_PANEL) + j * PV_PANEL + c % PV_PANEL;
            if (vt->dtype == SMATTN_F32)
                vf_store(d, vf_load((const float *)(const void *)(src + (size_t)c * 4)));
            else if (vt->dtype == SMATTN_F16)
                vf_store(d, vf_load_f16((const uint16_t *)(const void *)(src + (size_t)c * 2)));
            else if (vt->dtype == SMATTN_F8E4M3)
                vf_store(d, vf_load_f8e4m3(src + c));
            else if (vt->dtype == SMATTN_F8E5M2)
                vf_store(d, vf_load_f8e5m2(src + c));
            else
                vf_store(d, vf_load_bf16((const uint16_t *)(const void *)(src + (size_t)c * 2)));
        }
    }
}
#endif

#if VLEN == 8
/* ---- the decode's group P.V (kernel_tile.h's pv_group): its fp8 V staged ------------------ */

/* The nk fp8 rows of Dvk elements at v0 (stride lb bytes) as binary32 at dst (stride ldd),
 * mode 0: e5m2, 1: e4m3, 2: e4m3 without NaN bytes, times 2^-8 (vf_load_f8e4m3_s8) */
static inline OPT_INLINE void KN(stage_f8)(float *dst, int64_t ldd, const unsigned char *v0,
                                           size_t lb, int64_t nk, int64_t Dvk, const int mode)
{
    for (int64_t jj = 0; jj < nk; jj++) {
        const unsigned char *src = v0 + (size_t)jj * lb;
        float *d = dst + jj * ldd;
        int64_t c = 0;
#define STAGE_F8(c)                                                                            \
    vf_store(d + (c), mode == 2   ? vf_load_f8e4m3_s8(src + (c))                               \
                      : mode == 1 ? vf_load_f8e4m3(src + (c))                                  \
                                  : vf_load_f8e5m2(src + (c)))
        for (; c + 4 * VLEN <= Dvk; c += 4 * VLEN) {
            STAGE_F8(c);
            STAGE_F8(c + VLEN);
            STAGE_F8(c + 2 * VLEN);
            STAGE_F8(c + 3 * VLEN);
        }
        for (; c < Dvk; c += VLEN)
            STAGE_F8(c);
#undef STAGE_F8
    }
}

#endif

/* One unit (rows base .. base + Rp) against the key tile [kt, kt + nk): scores, online
 * softmax, P.V. Keys at or past kmax are not read. */
static void KN(unit_tile)(const opt_job *job, opt_ws *ws, int64_t base, int64_t b, int64_t g,
                          int64_t i0, int64_t kt, int64_t nk, int64_t pkt, int64_t pg, int64_t pn,
                          int scored)
{
    const smattn_problem *p = job->p;
    const smattn_inputs *in = job->in;
    const int64_t D = p->D, Dv = p->Dv, Dvp = job->Dvp, R = job->R, nq = job->nq;
    const int64_t Rp = (R + 3) / 4 * 4;
    const int64_t Dp = (D + VLEN - 1) / VLEN * VLEN;
    const int64_t Dvk = (Dv + VLEN - 1) / VLEN * VLEN; /* columns the P.V loop touches */
    const smattn_tensor *kt_ = &in->k, *vt_ = &in->v;
    /* in place: unit-stride rows of whole vectors; f16/bf16 only with vectors (the scalar
     * instance converts a tile once rather than once per row block). A tile is in place
     * only as one run of rows (dense, packed, or within one page, SPEC 2.7); a tile that
     * crosses pages is gathered key by key through the locator into f32, which the same
     * micro-kernels then read: the same values in the same order, so the same bits. */
    /* Block formats (q8_0, q4_0) are never in place: a tile is dequantised into f32 once
     * (load_row), for every row of the unit (the group's query heads) */
    const int run = smattn__key_run(p, kt, nk) == nk;
    const int v_direct = run && vt_->stride[3] == 1 && Dv % VLEN == 0 && (VLEN > 1 || vt_->dtype == SMATTN_F32) && !opt_is_block(vt_->dtype);
    const int k_direct = run && kt_->stride[3] == 1 && D % VLEN == 0 && (VLEN > 1 || kt_->dtype == SMATTN_F32) && !opt_is_block(kt_->dtype);
    /* V of a tile across pages: each page's run of rows in place, one after the other,
     * when runs are long enough; shorter (pages under 8 keys) gathered. Paged decode
     * T = 32768, one thread, CPU time of 60 calls: pages of 16 0.95 s in place, 1.04 s
     * gathered; pages of 8 1.21 / 1.27 s; pages of 1 2.89 / 2.07 s (dense 0.91-0.96 s) */
    const int v_runs = !run && smattn__run_max(p) >= 8 && vt_->stride[3] == 1 && Dv % VLEN == 0 && (VLEN > 1 || vt_->dtype == SMATTN_F32) && !opt_is_block(vt_->dtype);
    const size_t krow = opt_byte_off(kt_->dtype, D);
    const size_t vrow = opt_byte_off(vt_->dtype, Dv);
    float *const S_ = ws->s + base * OPT_BK;
    unsigned char *const VIS = ws->vis + base * OPT_BK;
    float *const Q = ws->q + base * Dp, *const QP = ws->qp + base * Dp;
    float *const ACC = ws->acc + base * Dvp;
    /* the rows the next unit will read (pn rows from key pkt of KV head pg) are requested
     * while this one's scores are computed: decode is bound by memory latency, and the
     * loads must overlap the arithmetic; one unit ahead, not one tile of all the item's
     * heads, so that what arrives is not evicted before its use */
    /* (the rows found through the locator, opt_tile_rows: a next tile across pages is
     * requested whole; with only its first page's run, a paged decode read 3 of each 4
     * K rows of a tile on demand, 1.2-1.27x the dense decode's time) */
    opt_prefetch pf = {NULL, NULL, krow, vrow, 0};
    if (pn > 0 && !scored && kt_->stride[3] == 1 && vt_->stride[3] == 1) { /* used by QK */
        opt_tile_rows(p, kt_, b, pkt, pn, pg, ws->pfk);
        opt_tile_rows(p, vt_, b, pkt, pn, pg, ws->pfv);
        pf.k = ws->pfk, pf.v = ws->pfv, pf.n = pn;
    }
    /* keys outer (decode): the next tile's K rows of this head (pn rows from key pkt of
     * KV head pg), requested during this unit's P.V, a line or two per key, so that
     * memory keeps working while the arithmetic runs from L2 (`make bench`, NOTES.md) */
    opt_prefetch pvpf = {NULL, NULL, krow, 0, 0};
    if (pn > 0 && scored && kt_->stride[3] == 1) {
        opt_tile_rows(p, kt_, b, pkt, pn, pg, ws->pfk);
        pvpf.k = ws->pfk, pvpf.n = pn;
    }
    OPT_PH_BEGIN(t_scores);
    int fused = 0; /* qkt_tile's epilogue took the max of some rows (full[x] = 2 marks them) */
    if (!scored) { /* else the item computed them, keys outer (attention_item) */
        /* scores for every row of the unit against the tile: K in place (converted in
         * registers) when its rows are unit-stride whole vectors, else converted to f32 */
        const int64_t koff = k_direct ? smattn__key_off(p, kt_->stride, b, kt, g, 0) : 0;
        const int64_t ldk = kt_->stride[1];
#if VLEN >= 8
        if (job->qkt) { /* many rows: the tile transposed once, keys in the lanes */
            if (k_direct && kt_->dtype == SMATTN_F32) {
                KTN(transpose_tile, f32)((const float *)kt_->data + koff, ldk, nk, Dp, ws->ktt, &pf);
            } else if (k_direct && kt_->dtype == SMATTN_F16) {
                KTN(transpose_tile, f16)((const uint16_t *)kt_->data + koff, ldk, nk, Dp, ws->ktt, &pf);
            } else if (k_direct && kt_->dtype == SMATTN_BF16) {
                KTN(transpose_tile, bf16)((const uint16_t *)kt_->data + koff, ldk, nk, Dp, ws->ktt, &pf);
            } else if (k_direct && kt_->dtype == SMATTN_F8E4M3) {
                KTN(transpose_tile, f8e4m3)((const uint8_t *)kt_->data + koff, ldk, nk, Dp, ws->ktt, &pf);
            } else if (k_direct && kt_->dtype == SMATTN_F8E5M2) {
                KTN(transpose_tile, f8e5m2)((const uint8_t *)kt_->data + koff, ldk, nk, Dp, ws->ktt, &pf);
            } else {
                for (int64_t jj = 0; jj < nk; jj++)
                    KN(load_row)(ws->kt + jj * Dp, kt_, smattn__key_off(p, kt_->stride, b, kt + jj, g, 0),
                                 kt_->stride[3], D, Dp);
                KTN(transpose_tile, f32)(ws->kt, Dp, nk, Dp, ws->ktt, &pf);
            }
            /* rows past R rounded to 2 are padding (their weights are set to 0 below):
             * not scored (126 rows of 128 with AVX-512 and a 7-head group) */
            /* a problem with no mask, bias, softcap or ALiBi: the rows that see the whole
             * tile are scaled and their max taken as the scores are stored (AVX-512) */
            KN(qkt_fuse) fz = {ws->lo + base, ws->slow + base, 0.0f, 0.0f, ws->sm + base,
                               ws->full + base};
            const int plain = VLEN == 16 && !in->mask.data && !in->bias.data &&
                              !(p->softcap > 0) && p->alibi_mode != SMATTN_ALIBI_SYMMETRIC &&
                              p->alibi_mode != SMATTN_ALIBI_ONE_SIDED;
            fused = plain && nk == OPT_BK;
            if (plain)
                opt_scale(job, b, job->qk_scale ? g : 0, &fz.sh, &fz.sl);
            KN(qkt_tile)(Q, R, D, Dp, ws->ktt, S_, nk, ws->hi + base, kt, fused ? &fz : NULL);
        } else
#endif
        if (k_direct && kt_->dtype == SMATTN_F32) {
            KTN(qk_tile, f32)(Q, QP, R, Rp, Dp, (const float *)kt_->data + koff, ldk, nk, S_, &pf);
        } else if (k_direct && kt_->dtype == SMATTN_F16) {
            KTN(qk_tile, f16)(Q, QP, R, Rp, Dp, (const uint16_t *)kt_->data + koff, ldk, nk, S_, &pf);
        } else if (k_direct && kt_->dtype == SMATTN_BF16) {
            KTN(qk_tile, bf16)(Q, QP, R, Rp, Dp, (const uint16_t *)kt_->data + koff, ldk, nk, S_, &pf);
        } else if (k_direct && kt_->dtype == SMATTN_F8E4M3) {
            KTN(qk_tile, f8e4m3)(Q, QP, R, Rp, Dp, (const uint8_t *)kt_->data + koff, ldk, nk, S_, &pf);
        } else if (k_direct && kt_->dtype == SMATTN_F8E5M2) {
            KTN(qk_tile, f8e5m2)(Q, QP, R, Rp, Dp, (const uint8_t *)kt_->data + koff, ldk, nk, S_, &pf);
        } else {
            for (int64_t jj = 0; jj < nk; jj++)
                KN(load_row)(ws->kt + jj * Dp, kt_, smattn__key_off(p, kt_->stride, b, kt + jj, g, 0),
                             kt_->stride[3], D, Dp);
            KTN(qk_tile, f32)(Q, QP, R, Rp, Dp, ws->kt, Dp, nk, S_, &pf);
        }
    }
    OPT_PH_END(OPT_PH_SCORES, t_scores);
    OPT_PH_BEGIN(t_softmax);
    /* online softmax, in three passes over the rows so that each pass's work per row is
     * short and independent of the other rows' (one row's chain of max, exp and sums,
     * latency-bound, left the vector units idle): (1) each row's tile max and new running
     * max, (2) its weights and their sum, (3) the corrections e^(m_old - m_new) of VLEN
     * rows at a time (e^-inf = 0 for a row's first tile, e^0 = 1 when the max does not
     * move: the values a row-by-row evaluation gives), then l and acc */
    float *const MT = ws->mt + base, *const DM = ws->dm + base, *const SM = ws->sm + base;
    /* rows whose tile max the scores' epilogue took (qkt_tile wrote full[x] = 2 for them,
     * 0 for the other rows < R, and their max in SM) */
    for (int64_t r = 0; r < R; r++) {
        const int64_t x = base + r;
        unsigned char *vis = VIS + r * OPT_BK;
        float *s = S_ + r * OPT_BK;
        const int pre = fused && ws->full[x] == 2;
        ws->full[x] = 0;
        MT[r] = -HUGE_VALF; /* no weights from this tile (a visible row's max is finite) */
        DM[r] = 0.0f;
        /* proved: a skipped row has no visible key in the tile */
        if (smattn__tile_skips(ws->lo[x], ws->hi[x], kt, nk) || ws->slow[x]) {
            memset(vis, 0, (size_t)nk);
            continue;
        }
        int64_t hh = r / nq, i = i0 + r % nq, h = g * job->G + hh;
        int all = 1;
        float tmax = pre ? SM[r]
                         : KN(finish_scores)(job, b, h, i, ws->lo[x], ws->hi[x], kt, nk, s, vis, &all);
        ws->full[x] = (unsigned char)all;
        if (tmax == -HUGE_VALF)
            continue; /* nothing visible in this tile */
        if (!isfinite(tmax)) {
            ws->slow[x] = 1; /* a NaN or an overflowing score */
            ws->full[x] = 0;
            memset(vis, 0, (size_t)nk);
            continue;
        }
        float mold = ws->m[x], mnew = mold > tmax ? mold : tmax;
        MT[r] = mnew;
        DM[r] = mold - mnew; /* -inf for the first tile, 0 when the max stays */
    }
    /* whole vectors only, the lanes past the tile set to -inf (weight 0): the sum's order
     * then does not depend on the tile's length */
    const int64_t nkv = (nk + VLEN - 1) / VLEN * VLEN;
    for (int64_t r = 0; r < R; r++) {
        if (MT[r] == -HUGE_VALF)
            continue;
        float *s = S_ + r * OPT_BK;
        vf vsum = vf_zero();
        vf vm = vf_set1(MT[r]);
        for (int64_t jj = nk; jj < nkv; jj++)
            s[jj] = -HUGE_VALF;
        for (int64_t jj = 0; jj < nkv; jj += VLEN) {
            vf e = KN(vexp_le0)(vf_sub(vf_load(s + jj), vm));
            vf_store(s + jj, e);
            vsum = vf_add(vsum, e);
        }
        SM[r] = vf_hsum(vsum);
    }
    for (int64_t r0 = 0; r0 < R; r0 += VLEN) /* DM has VLEN - 1 rows of zero padding */
        vf_store(DM + r0, KN(vexp_le0)(vf_load(DM + r0)));
    for (int64_t r = 0; r < R; r++) {
        const int64_t x = base + r;
        if (MT[r] == -HUGE_VALF)
            continue;
        const float corr = DM[r];
        ws->l[x] = ws->l[x] * corr + SM[r];
        ws->m[x] = MT[r];
        if (corr != 1.0f) {
            float *a = ACC + r * Dvp;
            vf vc = vf_set1(corr);
            for (int64_t cc = 0; cc < Dvp; cc += VLEN)
                vf_store(a + cc, vf_mul(vf_load(a + cc), vc));
        }
    }
    OPT_PH_END(OPT_PH_SOFTMAX, t_softmax);
    OPT_PH_BEGIN(t_pv);
    /* the P.V update, V in place (converted in registers) or converted to f32 */
    for (int64_t r = R; r < Rp; r++) { /* padding rows take part with weight 0 */
        memset(S_ + r * OPT_BK, 0, (size_t)nk * sizeof(float));
        ws->full[base + r] = 1;
    }
    const int64_t voff = v_direct ? smattn__key_off(p, vt_->stride, b, kt, g, 0) : 0;
    const int64_t ldv = vt_->stride[1];
    const unsigned char *F = ws->full + base;
#if VLEN > 1
    /* many rows (the scores' keys-in-lanes rule, S >= 16) with AVX2: the tile staged as
     * f32 column panels, once per unit, for the unit's Rp / 4 row blocks (the same values,
     * the same fma sequence per row and column, so the same bits). Prefill S = T = 512 on
     * one thread, best of 9, three interleaved rounds: AVX2 30.0-30.6 -> 27.2 ms; with
     * AVX-512 (pv_block4x4 reads 4 lines per key) it was 1-3% slower, and its chunked
     * prefill's P.V 70-76% -> 55-65% of the peak in `make bench-phases`: not staged. */
    /* With job->vstage (a dense V, opt.c), the tile is staged once per call for every unit
     * that reads it: the first unit to want it stages the whole tile (the keys to min(T,
     * kt + OPT_BK), which a dense V holds) into the shared copy and marks it ready; a unit
     * that finds it being staged stages its own, as without. The same values either way.
     * AVX2 prefill S = T = 2048: the staging was 32 of 194 thread-ms of the P.V. */
    if (VLEN == 8 && job->qkt && v_direct && Dvk % PV_PANEL == 0) {
        const size_t ev = smattn_dtype_size(vt_->dtype);
        const unsigned char *v0 = (const unsigned char *)vt_->data + (size_t)voff * ev;
        const float *vs = ws->v;
        if (job->vstage) {
            const int64_t x = (b * p->Hkv + g) * job->vtiles + kt / OPT_BK;
            float *shared = job->vstage + x * OPT_BK * Dvp;
            unsigned char st = atomic_load_explicit(&job->vstate[x], memory_order_acquire);
            if (st == 0 && atomic_compare_exchange_strong_explicit(&job->vstate[x], &st, 1,
                                                                   memory_order_acquire,
                                                                   memory_order_acquire)) {
                const int64_t nt = p->T - kt < OPT_BK ? p->T - kt : OPT_BK;
                KN(stage_v)(shared, vt_, v0, ldv, nt, Dvk);
                atomic_store_explicit(&job->vstate[x], 2, memory_order_release);
                st = 2;
            }
            if (st == 2)
                vs = shared;
        }
        if (vs == ws->v)
            KN(stage_v)(ws->v, vt_, v0, ldv, nk, Dvk);
        KTN(pv_tile, f32)
        (ACC, Dvp, S_, VIS, F, R, Rp, vs, PV_PANEL, nk, Dvk, &pvpf, OPT_BK * PV_PANEL);
        OPT_PH_END(OPT_PH_PV, t_pv);
        return;
    }
#endif
#if VLEN > 1
#define PV_GROUP(SUF, V, LD) KTN(pv_group, SUF)(ACC, Dvp, S_, R, V, LD, nk, Dvk, &pvpf, ws->pb)
    /* a decode unit of 5 to 7 rows that all see the whole tile: one pass over V for the
     * group (kernel_tile.h's pv_group). f32 in place, the block formats dequantised once
     * per tile; f16 and bf16 keep the 4-row blocks (their group pass, converting each V
     * vector once for the group, measured 2-20% slower at T = 32768 on the double-pumped
     * host, AVX2 and AVX-512, load 3: NOTES.md); fp8 in
     * place with AVX-512, staged into binary32 once per tile with AVX2 (staging f16 instead
     * cost more than it saved: callgrind, AVX2, decode T = 4096 f16, 10.10M -> 10.91M
     * instructions per call with a weight broadcast per row and key; the weights' table
     * that pv_group now reads made room for V in registers). e4m3 without NaN bytes in the tile's V rows: read
     * as 2^-8 times its values, the weights times 2^8 (exact: a weight is 0 or in
     * [2^-126, 1], vexp_le0 flushes below), so every product is the same. */
    int v_group = R >= 5 && R <= 7 && Dvk % (2 * VLEN) == 0 &&
                  (v_direct || opt_is_block(vt_->dtype)) && vt_->dtype != SMATTN_F16 &&
                  vt_->dtype != SMATTN_BF16;
    for (int64_t r = 0; v_group && r < R; r++)
        v_group = F[r];
    if (v_group) {
        int s8 = 0;
        if (v_direct && vt_->dtype == SMATTN_F8E4M3) { /* no NaN in the tile's V rows */
            const uint8_t *v0 = (const uint8_t *)vt_->data + voff;
            s8 = 1;
            for (int64_t jj = 0; s8 && jj < nk; jj++)
                s8 = !vf_f8e4m3_any_nan(v0 + jj * ldv, Dvk);
            for (int64_t r = 0; s8 && r < R; r++) /* the lanes past nk are not read */
                for (int64_t jj = 0; jj < nk; jj += VLEN)
                    vf_store(S_ + r * OPT_BK + jj,
                             vf_mul(vf_load(S_ + r * OPT_BK + jj), vf_set1(256.0f)));
        }
        if (opt_is_block(vt_->dtype)) {
            const char *rows[OPT_BK];
            opt_tile_rows(p, vt_, b, kt, nk, g, rows);
            for (int64_t jj = 0; jj < nk; jj++) {
                KN(dequant_blocks)(ws->v + jj * Dvp, (const unsigned char *)rows[jj], vt_->dtype, Dv);
                memset(ws->v + jj * Dvp + Dv, 0, (size_t)(Dvp - Dv) * sizeof(float));
            }
            PV_GROUP(f32, ws->v, Dvp);
        } else if (vt_->dtype == SMATTN_F32) {
            PV_GROUP(f32, (const float *)vt_->data + voff, ldv);
#if VLEN == 8
        } else { /* fp8 staged: its conversion needs registers the 14 accumulators hold */
            const uint8_t *v0 = (const uint8_t *)vt_->data + voff;
            if (s8) /* a constant mode each: the loop is specialised */
                KN(stage_f8)(ws->v, Dvp, v0, (size_t)ldv, nk, Dvk, 2);
            else if (vt_->dtype == SMATTN_F8E4M3)
                KN(stage_f8)(ws->v, Dvp, v0, (size_t)ldv, nk, Dvk, 1);
            else
                KN(stage_f8)(ws->v, Dvp, v0, (size_t)ldv, nk, Dvk, 0);
            PV_GROUP(f32, ws->v, Dvp);
        }
#else
        } else if (s8) {
            PV_GROUP(f8e4m3s8, (const uint8_t *)vt_->data + voff, ldv);
        } else if (vt_->dtype == SMATTN_F8E4M3) {
            PV_GROUP(f8e4m3, (const uint8_t *)vt_->data + voff, ldv);
        } else {
            PV_GROUP(f8e5m2, (const uint8_t *)vt_->data + voff, ldv);
        }
#endif
        OPT_PH_END(OPT_PH_PV, t_pv);
        return;
    }
#undef PV_GROUP
#endif
    /* fp8 V of a decode group (8 rows padded, two row blocks of 4 with AVX-512's 4 x 4 P.V
     * block): the tile converted once into f32 for both, instead of once per block in
     * registers (e4m3's conversion is 8 instructions a vector). The same values and fma
     * sequence: the same bits (bench_shape's output hash unchanged). Decode T = 32768, 2
     * threads, 4 interleaved rounds of 15 calls at load 5-8: best 9.28-11.9 ms in
     * registers, 8.32-9.27 ms staged. */
    const int v_stage8 = VLEN == 16 && v_direct && Rp == 8 &&
                         (vt_->dtype == SMATTN_F8E4M3 || vt_->dtype == SMATTN_F8E5M2);
    if (v_stage8) {
        const uint8_t *v0 = (const uint8_t *)vt_->data + voff;
        for (int64_t jj = 0; jj < nk; jj++)
            for (int64_t c = 0; c < Dvk; c += VLEN)
                vf_store(ws->v + jj * Dvp + c, vt_->dtype == SMATTN_F8E4M3
                                                   ? vf_load_f8e4m3(v0 + jj * ldv + c)
                                                   : vf_load_f8e5m2(v0 + jj * ldv + c));
        KTN(pv_tile, f32)(ACC, Dvp, S_, VIS, F, R, Rp, ws->v, Dvp, nk, Dvk, &pvpf, 0);
    } else if (v_runs) {
        /* a paged tile: P.V over each page's rows in key order. Each (row, column) of
         * pv_tile is one fma chain over the keys, resumed from ACC: the bits of one call
         * over the tile (gathering V instead cost a paged decode 10-25% more) */
        for (int64_t j0 = 0, n; j0 < nk; j0 += n) {
            n = smattn__key_run(p, kt + j0, nk - j0);
            const int64_t o = smattn__key_off(p, vt_->stride, b, kt + j0, g, 0);
            /* each run its share of the rows to prefetch, as many lines per key as one
             * call over the tile requests */
            const int64_t pa = j0 * pvpf.n / nk, pz = (j0 + n) * pvpf.n / nk;
            const opt_prefetch share = {pvpf.k ? pvpf.k + pa : NULL, NULL, krow, 0, pz - pa};
            const opt_prefetch *pp = &share;
            if (vt_->dtype == SMATTN_F32)
                KTN(pv_tile, f32)(ACC, Dvp, S_ + j0, VIS + j0, F, R, Rp, (const float *)vt_->data + o, ldv, n, Dvk, pp, 0);
            else if (vt_->dtype == SMATTN_F16)
                KTN(pv_tile, f16)(ACC, Dvp, S_ + j0, VIS + j0, F, R, Rp, (const uint16_t *)vt_->data + o, ldv, n, Dvk, pp, 0);
            else if (vt_->dtype == SMATTN_F8E4M3)
                KTN(pv_tile, f8e4m3)(ACC, Dvp, S_ + j0, VIS + j0, F, R, Rp, (const uint8_t *)vt_->data + o, ldv, n, Dvk, pp, 0);
            else if (vt_->dtype == SMATTN_F8E5M2)
                KTN(pv_tile, f8e5m2)(ACC, Dvp, S_ + j0, VIS + j0, F, R, Rp, (const uint8_t *)vt_->data + o, ldv, n, Dvk, pp, 0);
            else
                KTN(pv_tile, bf16)(ACC, Dvp, S_ + j0, VIS + j0, F, R, Rp, (const uint16_t *)vt_->data + o, ldv, n, Dvk, pp, 0);
        }
    } else if (v_direct && vt_->dtype == SMATTN_F32) {
        KTN(pv_tile, f32)(ACC, Dvp, S_, VIS, F, R, Rp, (const float *)vt_->data + voff, ldv, nk, Dvk, &pvpf, 0);
    } else if (v_direct && vt_->dtype == SMATTN_F16) {
        KTN(pv_tile, f16)(ACC, Dvp, S_, VIS, F, R, Rp, (const uint16_t *)vt_->data + voff, ldv, nk, Dvk, &pvpf, 0);
    } else if (v_direct && vt_->dtype == SMATTN_BF16) {
        KTN(pv_tile, bf16)(ACC, Dvp, S_, VIS, F, R, Rp, (const uint16_t *)vt_->data + voff, ldv, nk, Dvk, &pvpf, 0);
    } else if (v_direct && vt_->dtype == SMATTN_F8E4M3) {
        KTN(pv_tile, f8e4m3)(ACC, Dvp, S_, VIS, F, R, Rp, (const uint8_t *)vt_->data + voff, ldv, nk, Dvk, &pvpf, 0);
    } else if (v_direct && vt_->dtype == SMATTN_F8E5M2) {
        KTN(pv_tile, f8e5m2)(ACC, Dvp, S_, VIS, F, R, Rp, (const uint8_t *)vt_->data + voff, ldv, nk, Dvk, &pvpf, 0);
    } else if (opt_is_block(vt_->dtype)) { /* dequantised once for the unit's rows */
        const char *rows[OPT_BK];
        opt_tile_rows(p, vt_, b, kt, nk, g, rows);
        for (int64_t jj = 0; jj < nk; jj++) {
            KN(dequant_blocks)(ws->v + jj * Dvp, (const unsigned char *)rows[jj], vt_->dtype, Dv);
            memset(ws->v + jj * Dvp + Dv, 0, (size_t)(Dvp - Dv) * sizeof(float));
        }
        KTN(pv_tile, f32)(ACC, Dvp, S_, VIS, F, R, Rp, ws->v, Dvp, nk, Dvk, &pvpf, 0);
    } else {
        for (int64_t jj = 0; jj < nk; jj++)
            KN(load_row)(ws->v + jj * Dvp, vt_, smattn__key_off(p, vt_->stride, b, kt + jj, g, 0),
                         vt_->stride[3], Dv, Dvp);
        KTN(pv_tile, f32)(ACC, Dvp, S_, VIS, F, R, Rp, ws->v, Dvp, nk, Dvk, &pvpf, 0);
    }
    OPT_PH_END(OPT_PH_PV, t_pv);
}

/* The hg units from unit u0 (one key chunk of hg KV heads). The next tile's rows are
 * requested up to key kpf, past the chunk's own keys when the item's next chunk follows
 * (attention_item). */
static void KN(attention_chunk)(const opt_job *job, int64_t u0, int64_t kpf, opt_ws *ws)
{
    const smattn_problem *p = job->p;
    const int64_t Dvp = job->Dvp, R = job->R, nq = job->nq, hg = job->hg;
    const int64_t Rp = (R + 3) / 4 * 4;
    int64_t b, g0, qt, c;
    opt_unit_coords(job, u0, &b, &g0, &qt, &c);
    int64_t i0 = qt * nq;
    /* rows i0 and up of a packed batch's sequence past S_b have no storage: with no P
     * wanted (and no split-K partials to fill), such an item has nothing to do */
    if (p->layout && !job->out->p.data && job->nchunks == 1 && !smattn__row_stored(p, b, i0))
        return;
    int64_t k0, k1;
    smattn__chunk_keys(p->T, job->nchunks, job->chunk, c, &k0, &k1);
    int64_t kmin = INT64_MAX, kmax = 0;
    OPT_PH_BEGIN(t_setup);
    for (int64_t u = 0; u < hg; u++)
        KN(unit_setup)(job, ws, u * Rp, b, g0 + u, i0, k0, k1, &kmin, &kmax);
    OPT_PH_END(OPT_PH_SETUP, t_setup);
    /* Tiles sit on a fixed grid of OPT_BK keys (chunk starts are multiples of it), so a
     * row sees the same tiles, rescalings and summation order whichever rows share its
     * item: a GQA problem and its MHA expansion give the same bits. The walk is
     * smattn__tile_walk_hits's, proved to meet each key of [kmin, kmax) once. */
    /* An item of several KV heads with one 8-row block each (decode) computes the scores
     * keys outer, heads inner, so that K is read in address order (each key's rows of all
     * the item's heads): `make bench-read`-style reads of K that way took 8.6 ms instead of
     * 10.4 at T = 32768 (NOTES.md). Each dot product has the same tree as in qk_tile. */
#if VLEN > 1
    const smattn_tensor *kt_ = &job->in->k;
    const int keys_outer = hg > 1 && !job->qkt && Rp == 8 && kt_->stride[3] == 1 &&
                           p->D % VLEN == 0;
    /* e4m3 K: Q's packed rows times 2^8 for vf_load_f8e4m3_s8, where that is exact (no
     * finite |q| >= 2^119; an infinite or NaN q gives the same products either way) */
    int q_s8 = keys_outer && kt_->dtype == SMATTN_F8E4M3;
    for (int64_t x = 0; q_s8 && x < hg * Rp * p->D; x++) {
        const float qv = ws->qp[x];
        q_s8 = !(fabsf(qv) >= 0x1p119f && isfinite(qv));
        ws->qp8[x] = qv * 256.0f;
    }
#else
    const int keys_outer = 0;
#endif
    if (kpf < kmax)
        kpf = kmax;
    for (int64_t kt = smattn__tile_first(kmin, kmax, OPT_BK); kt < kmax; kt += OPT_BK) {
        int64_t nk = smattn__tile_keys(kt, kmax, OPT_BK);
        const int64_t kend = kt + OPT_BK < kmax ? kmax : kpf; /* the next tile's keys end */
#if VLEN > 1
        if (keys_outer) {
            OPT_PH_BEGIN(t_scores);
            const smattn_tensor *vt_ = &job->in->v;
            const size_t vbytes = opt_byte_off(vt_->dtype, p->Dv);
            const int vpf = vt_->stride[3] == 1;
            const char **const KR = ws->krows, **const VR = ws->vrows;
            for (int64_t u = 0; u < hg; u++) {
                opt_tile_rows(p, kt_, b, kt, nk, g0 + u, KR + u * OPT_BK);
                opt_tile_rows(p, vt_, b, kt, nk, g0 + u, VR + u * OPT_BK);
            }
            const int64_t qs = Rp * p->D, ss = Rp * OPT_BK;
            const char *const *vr = vpf ? VR : NULL;
            if (opt_is_block(kt_->dtype)) /* the tile's K rows of the item's heads dequantised
                                            * once, for the group's query heads */
                for (int64_t u = 0; u < hg; u++)
                    for (int64_t jj = 0; jj < nk; jj++) {
                        float *row = ws->kq + (u * OPT_BK + jj) * p->D;
                        KN(dequant_blocks)(row, (const unsigned char *)KR[u * OPT_BK + jj],
                                           kt_->dtype, p->D);
                        KR[u * OPT_BK + jj] = (const char *)row;
                    }
#define QK_KEYS(SUF, NR) KTN(qk_keys, SUF)(ws->qp, qs, KR, vr, vbytes, hg, nk, p->D, ws->s, ss, NR)
            int k_s8 = q_s8; /* e4m3 K: no NaN in the tile's rows */
            for (int64_t x = 0; k_s8 && x < hg * OPT_BK; x++)
                if (x % OPT_BK < nk)
                    k_s8 = !vf_f8e4m3_any_nan((const uint8_t *)KR[x], p->D);
            if (kt_->dtype == SMATTN_F32 || opt_is_block(kt_->dtype)) {
                if (R == 7)
                    QK_KEYS(f32, 7);
                else
                    QK_KEYS(f32, 8);
            } else if (kt_->dtype == SMATTN_F16) {
                if (R == 7)
                    QK_KEYS(f16, 7);
                else
                    QK_KEYS(f16, 8);
            } else if (kt_->dtype == SMATTN_BF16) {
                if (R == 7)
                    QK_KEYS(bf16, 7);
                else
                    QK_KEYS(bf16, 8);
            } else if (k_s8) { /* Q's packed rows times 2^8 in ws->qp8 */
                if (R == 7)
                    KTN(qk_keys, f8e4m3s8)(ws->qp8, qs, KR, vr, vbytes, hg, nk, p->D, ws->s, ss, 7);
                else
                    KTN(qk_keys, f8e4m3s8)(ws->qp8, qs, KR, vr, vbytes, hg, nk, p->D, ws->s, ss, 8);
            } else if (kt_->dtype == SMATTN_F8E4M3) {
                if (R == 7)
                    QK_KEYS(f8e4m3, 7);
                else
                    QK_KEYS(f8e4m3, 8);
            } else {
                if (R == 7)
                    QK_KEYS(f8e5m2, 7);
                else
                    QK_KEYS(f8e5m2, 8);
            }
#undef QK_KEYS
            OPT_PH_END(OPT_PH_SCORES, t_scores);
        }
#endif
        for (int64_t u = 0; u < hg; u++) {
            int64_t pkt = kt, pg = g0 + u + 1, pn = nk; /* the next unit's rows */
            if (keys_outer) { /* the next tile's rows of the same head, for the P.V */
                pkt = kt + OPT_BK, pg = g0 + u;
                pn = kend - pkt < OPT_BK ? kend - pkt : OPT_BK;
            } else if (u + 1 == hg) {
                pkt = kt + OPT_BK, pg = g0;
                pn = kend - pkt < OPT_BK ? kend - pkt : OPT_BK;
            }
            KN(unit_tile)(job, ws, u * Rp, b, g0 + u, i0, kt, nk, pkt, pg, pn, keys_outer);
        }
    }

    OPT_PH_BEGIN(t_finish);
    /* results: split-K partials, or the finished rows */
    for (int64_t u = 0; u < hg; u++) {
        const int64_t base = u * Rp, g = g0 + u;
        if (job->nchunks > 1) {
            float *part = job->part + (u0 + u) * R * (Dvp + 2);
            for (int64_t r = 0; r < R; r++) {
                float *pr = part + r * (Dvp + 2);
                pr[0] = ws->slow[base + r] ? (float)NAN : ws->m[base + r];
                pr[1] = ws->l[base + r];
                memcpy(pr + 2, ws->acc + (base + r) * Dvp, (size_t)Dvp * sizeof(float));
            }
            continue;
        }
        for (int64_t n = 0; n < R; n++) { /* O's address order, as unit_setup's */
            int64_t hh = n % job->G, qq = n / job->G, r = hh * nq + qq;
            int64_t i = i0 + qq, h = g * job->G + hh;
            if (i >= p->S)
                continue;
            smattn__opt_finish_row(job, b, h, i, ws->m[base + r], ws->l[base + r],
                                   ws->acc + (base + r) * Dvp, ws->slow[base + r]);
        }
    }
    OPT_PH_END(OPT_PH_FINISH, t_finish);
}

/* A work item: cg consecutive key chunks of hg KV heads (cg > 1 only with hg = Hkv, so
 * that they are consecutive units of one batch and query tile), one after the other, each
 * computed and stored as its own partial state (the same bits as one chunk per item);
 * during a chunk's last tile the next chunk's first rows are requested, so that only the
 * item's first tile waits for memory. */
static void KN(attention_item)(const opt_job *job, int64_t item, opt_ws *ws)
{
    const int64_t cg = job->cg, hg = job->hg;
    for (int64_t cc = 0; cc < cg; cc++) {
        const int64_t u0 = (item * cg + cc) * hg;
        int64_t kpf = 0; /* the next chunk's keys, up to the batch's last stored key */
        if (cc + 1 < cg) {
            int64_t b, g, qt, c, k0, k1;
            opt_unit_coords(job, u0 + hg, &b, &g, &qt, &c);
            smattn__chunk_keys(job->p->T, job->nchunks, job->chunk, c, &k0, &k1);
            const int64_t kl = smattn__kv_len(job->p, b);
            kpf = k1 < kl ? k1 : kl;
        }
        KN(attention_chunk)(job, u0, kpf, ws);
    }
}

/* ---- the softmax operation: one row ------------------------------------------------------- */

static void KN(softmax_row)(const opt_job *job, int64_t b, int64_t h, int64_t i, opt_ws *ws)
{
    const smattn_problem *p = job->p;
    const smattn_inputs *in = job->in;
    int64_t lo, hi, T = p->T;
    smattn__key_range(p, b, i, &lo, &hi);
    float *s = ws->s;
    unsigned char *vis = ws->vis;
    float m = -HUGE_VALF;
    const smattn_tensor *xt = &in->x;
    int bad = 0;
    for (int64_t j0 = 0; j0 < T; j0 += OPT_BK) {
        int64_t nk = smattn__tile_keys(j0, T, OPT_BK);
        for (int64_t jj = 0; jj < nk; jj++) {
            float x = opt_load1(xt, smattn__off4(xt->stride, b, h, i, j0 + jj));
            s[j0 + jj] = x;
        }
        int all;
        float t = KN(finish_scores)(job, b, h, i, lo, hi, j0, nk, s + j0, vis + j0, &all);
        if (all)
            memset(vis + j0, 1, (size_t)nk);
        for (int64_t jj = 0; jj < nk; jj++) /* x = -inf masks the key (SPEC 3.5) */
            if (vis[j0 + jj] && opt_load1(xt, smattn__off4(xt->stride, b, h, i, j0 + jj)) == -HUGE_VALF) {
                vis[j0 + jj] = 0;
                s[j0 + jj] = -HUGE_VALF;
            }
        /* NaN: a visible x was infinite before the softcap (c tanh(+-inf / c) = +-c hides
         * it) or NaN: the binary64 path applies SPEC 4.2 (fuzz_plugin found the softcap
         * case: x = +inf gave a finite row where the spec has NaN) */
        if (t != t)
            bad = 1;
    }
    int any = 0;
    for (int64_t j = 0; j < T; j++)
        if (vis[j]) {
            any = 1;
            if (!isfinite(s[j]))
                bad = 1;
            else if (s[j] > m)
                m = s[j];
        }
    if (bad || !any || opt_has_sink(in, h)) { /* NaN rules, empty rows, sinks: binary64 */
        smattn__opt_slow_row(job, b, h, i);
        return;
    }
    vf vm = vf_set1(m), vsum = vf_zero();
    int64_t j = 0;
    for (; j + VLEN <= T; j += VLEN) {
        vf e = KN(vexp)(vf_sub(vf_load(s + j), vm));
        vf_store(s + j, e);
        vsum = vf_add(vsum, e);
    }
    float l = vf_hsum(vsum);
    for (; j < T; j++) {
        s[j] = KN(expf1)(s[j] - m);
        l += s[j];
    }
    smattn__opt_finish_softmax_row(job, b, h, i, m, l, s, vis);
}

static int KN(write_o)(float *o, const float *acc, float l, int64_t n)
{
    vf vl = vf_set1(l), z = vf_zero();
    int64_t c = 0;
    int bad = 0;
    for (; c + VLEN <= n; c += VLEN) {
        vf x = vf_add(vf_div(vf_load(acc + c), vl), vf_zero()); /* -0 + 0 = +0 */
        vf_store(o + c, x);
        z = vf_add(z, vf_sub(x, x)); /* 0, or NaN once an element is not finite */
    }
    for (; c < n; c++) {
        float x = acc[c] / l + 0.0f;
        opt_st_f32(o, c, x); /* O may be at any address */
        bad |= !isfinite(x);
    }
    return bad || vf_hsum(z) != 0.0f;
}

/* src[c] for c < n stored as f16 or bf16 (dt) at element offset off + c of base (any
 * address): the bits of opt.c's put() (smattn_store of x + 0: nearest even, +-inf on
 * overflow, +0 for a zero, the quiet NaN of SPEC 4.3), by vectors where no lane is NaN.
 * Per element, smattn_store made an f16 O cost more than the attention itself (prefill
 * S = T = 512: 34 ms against 13.5 with an f32 O). */
static void KN(store_half)(void *base, smattn_dtype dt, int64_t off, const float *src, int64_t n)
{
    int64_t c = 0;
#if VLEN > 1
    unsigned char *d = (unsigned char *)base + off * 2;
    for (; c + VLEN <= n; c += VLEN) {
        vf x = vf_add(vf_load(src + c), vf_zero()); /* -0 + 0 = +0 */
        if (vf_has_nan(x))
            break;
        if (dt == SMATTN_F16)
            vf_store_f16((uint16_t *)(void *)(d + 2 * c), x);
        else
            vf_store_bf16((uint16_t *)(void *)(d + 2 * c), x);
    }
#endif
    for (; c < n; c++) {
        float x = src[c];
        smattn_store(base, dt, off + c, isnan(x) ? (double)NAN : (double)(x + 0.0f));
    }
}

static void KN(axpy)(float *acc, const float *x, float w, int64_t n)
{
    vf vw = vf_set1(w);
    int64_t k = 0;
    for (; k + VLEN <= n; k += VLEN)
        vf_store(acc + k, vf_fmadd(vf_load(x + k), vw, vf_load(acc + k)));
    for (; k < n; k++)
        acc[k] = fmaf(x[k], w, acc[k]);
}

const opt_isa KN(smattn__isa) = {
    .name = ISA_NAME,
    .attention_item = KN(attention_item),
    .softmax_row = KN(softmax_row),
    .expf = KN(expf1),
    .expf_le0 = KN(expf_le0),
    .write_o = KN(write_o),
    .axpy = KN(axpy),
    .store_half = KN(store_half),
};
