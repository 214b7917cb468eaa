/* SPDX-License-Identifier: MIT */
/* kernel_tile.h: the QK and P.V micro-kernels of opt/kernel_body.h for one storage type of
 * K and V, included once per type with TILE_T (the element type), TILE_LOAD (VLEN elements
 * to a vf, exactly) and TILE_SUFFIX (f32, f16, bf16) defined. f16 and bf16 rows are
 * converted in registers (F16C where present), so a tile of them is read from memory at
 * half the bytes of f32, with no conversion pass. Every conversion is exact, so a row's
 * results do not depend on the type the same values were stored in. */
#define TN(name) KTN(name, TILE_SUFFIX)

/* s[r][j] = q_r . k_j for rb <= 4 rows and kb <= QK_KB keys; vectors run along D (padded
 * to Dp with zeros on both sides, so the padding adds exact zeros). Every dot product is
 * reduced by the tree of vf_hsum8 (the same as vf_hsum), whichever block computes it. */
static inline void TN(qk_block)(const float *q, int64_t ldq, int rb, const TILE_T *k, int64_t ldk,
                                int kb, int64_t Dp, float *s, int64_t lds)
{
#if VLEN == 16 /* 32 vector registers: a 4 x 4 block, 16 named accumulators (an array
                 * would live in memory) */
    if (rb == 4 && kb == 4) {
        vf a00 = vf_zero(), a01 = vf_zero(), a02 = vf_zero(), a03 = vf_zero();
        vf a10 = vf_zero(), a11 = vf_zero(), a12 = vf_zero(), a13 = vf_zero();
        vf a20 = vf_zero(), a21 = vf_zero(), a22 = vf_zero(), a23 = vf_zero();
        vf a30 = vf_zero(), a31 = vf_zero(), a32 = vf_zero(), a33 = vf_zero();
        for (int64_t d = 0; d < Dp; d += VLEN) {
            vf k0 = TILE_LOAD(k + d), k1 = TILE_LOAD(k + ldk + d);
            vf k2 = TILE_LOAD(k + 2 * ldk + d), k3 = TILE_LOAD(k + 3 * ldk + d);
            vf q0 = vf_load(q + d), q1 = vf_load(q + ldq + d);
            vf q2 = vf_load(q + 2 * ldq + d), q3 = vf_load(q + 3 * ldq + d);
            a00 = vf_fmadd(q0, k0, a00), a01 = vf_fmadd(q0, k1, a01);
            a02 = vf_fmadd(q0, k2, a02), a03 = vf_fmadd(q0, k3, a03);
            a10 = vf_fmadd(q1, k0, a10), a11 = vf_fmadd(q1, k1, a11);
            a12 = vf_fmadd(q1, k2, a12), a13 = vf_fmadd(q1, k3, a13);
            a20 = vf_fmadd(q2, k0, a20), a21 = vf_fmadd(q2, k1, a21);
            a22 = vf_fmadd(q2, k2, a22), a23 = vf_fmadd(q2, k3, a23);
            a30 = vf_fmadd(q3, k0, a30), a31 = vf_fmadd(q3, k1, a31);
            a32 = vf_fmadd(q3, k2, a32), a33 = vf_fmadd(q3, k3, a33);
        }
        const vf lo8[8] = {a00, a01, a02, a03, a10, a11, a12, a13};
        const vf hi8[8] = {a20, a21, a22, a23, a30, a31, a32, a33};
        float t[16];
        vf_hsum8(lo8, t);
        vf_hsum8(hi8, t + 8);
        for (int rr = 0; rr < 4; rr++)
            for (int kk = 0; kk < 4; kk++)
                s[rr * lds + kk] = t[4 * rr + kk];
        return;
    }
#endif
    if (rb == 4 && kb >= 2) {
        vf a00 = vf_zero(), a01 = vf_zero(), a10 = vf_zero(), a11 = vf_zero();
        vf a20 = vf_zero(), a21 = vf_zero(), a30 = vf_zero(), a31 = vf_zero();
        for (int64_t d = 0; d < Dp; d += VLEN) {
            vf k0 = TILE_LOAD(k + d), k1 = TILE_LOAD(k + ldk + d);
            vf q0 = vf_load(q + d), q1 = vf_load(q + ldq + d);
            a00 = vf_fmadd(q0, k0, a00);
            a01 = vf_fmadd(q0, k1, a01);
            a10 = vf_fmadd(q1, k0, a10);
            a11 = vf_fmadd(q1, k1, a11);
            vf q2 = vf_load(q + 2 * ldq + d), q3 = vf_load(q + 3 * ldq + d);
            a20 = vf_fmadd(q2, k0, a20);
            a21 = vf_fmadd(q2, k1, a21);
            a30 = vf_fmadd(q3, k0, a30);
            a31 = vf_fmadd(q3, k1, a31);
        }
        const vf a[8] = {a00, a01, a10, a11, a20, a21, a30, a31};
        float t[8];
        vf_hsum8(a, t);
        s[0] = t[0], s[1] = t[1], s[lds] = t[2], s[lds + 1] = t[3];
        s[2 * lds] = t[4], s[2 * lds + 1] = t[5], s[3 * lds] = t[6], s[3 * lds + 1] = t[7];
        return;
    }
    for (int rr = 0; rr < rb; rr++)
        for (int kk = 0; kk < kb; kk++) {
            vf a = vf_zero();
            for (int64_t d = 0; d < Dp; d += VLEN)
                a = vf_fmadd(vf_load(q + rr * ldq + d), TILE_LOAD(k + kk * ldk + d), a);
            s[rr * lds + kk] = vf_hsum(a);
        }
}

#if VLEN > 1
/* s[r][0] = q_r . k for nr = 7 or 8 rows and one key: each K vector is loaded (and
 * converted) once for nr fma, the q vectors come from L1 as memory operands. qp holds the
 * 8 rows packed (opt_pack_q8), so every q vector is one pointer plus a constant. nr = 7: a
 * GQA group of 7 heads, whose 8th row is padding: not computed (an eighth of the fma). */
static inline OPT_INLINE void TN(qk_8x1)(const float *qp, const TILE_T *k, int64_t Dp, float *s,
                                         int64_t lds, const int nr)
{
    vf a0 = vf_zero(), a1 = vf_zero(), a2 = vf_zero(), a3 = vf_zero();
    vf a4 = vf_zero(), a5 = vf_zero(), a6 = vf_zero(), a7 = vf_zero();
#define QK_8X1_STEP(d)                                                                     \
    do {                                                                                   \
        vf kv = TILE_LOAD(k + (d));                                                        \
        a0 = vf_fmadd(vf_load(qp + 8 * (d) + 0 * VLEN), kv, a0);                                           \
        a1 = vf_fmadd(vf_load(qp + 8 * (d) + 1 * VLEN), kv, a1);                                     \
        a2 = vf_fmadd(vf_load(qp + 8 * (d) + 2 * VLEN), kv, a2);                                 \
        a3 = vf_fmadd(vf_load(qp + 8 * (d) + 3 * VLEN), kv, a3);                                 \
        a4 = vf_fmadd(vf_load(qp + 8 * (d) + 4 * VLEN), kv, a4);                                 \
        a5 = vf_fmadd(vf_load(qp + 8 * (d) + 5 * VLEN), kv, a5);                                 \
        a6 = vf_fmadd(vf_load(qp + 8 * (d) + 6 * VLEN), kv, a6);                                 \
        if (nr == 8)                                                                       \
            a7 = vf_fmadd(vf_load(qp + 8 * (d) + 7 * VLEN), kv, a7);                             \
    } while (0)
    int64_t d = 0;
    for (; d + 4 * VLEN <= Dp; d += 4 * VLEN) { /* four steps per trip: the loop's own
                                                  * instructions were a sixth of the body's */
        QK_8X1_STEP(d);
        QK_8X1_STEP(d + VLEN);
        QK_8X1_STEP(d + 2 * VLEN);
        QK_8X1_STEP(d + 3 * VLEN);
    }
    for (; d < Dp; d += VLEN)
        QK_8X1_STEP(d);
#undef QK_8X1_STEP
    const vf a[8] = {a0, a1, a2, a3, a4, a5, a6, a7};
    float t[8];
    vf_hsum8(a, t);
#pragma GCC unroll 8
    for (int r = 0; r < nr; r++)
        s[r * lds] = t[r];
}
#endif

#if VLEN == 16
/* s[r][0..1] = q_r . k_0, q_r . k_1 for nr = 7 or 8 rows (16 accumulators of the 32
 * registers), the keys' rows at k0 and k1; the 16 dot products reduced together by
 * vf_hsum16 (vf_hsum's tree for each: the bits of qk_8x1 and qk_block) */
static inline OPT_INLINE void TN(qk_8x2)(const float *qp, const TILE_T *k0p, const TILE_T *k1p,
                                         int64_t Dp, float *s, int64_t lds, const int nr)
{
    vf a0 = vf_zero(), a1 = vf_zero(), a2 = vf_zero(), a3 = vf_zero();
    vf a4 = vf_zero(), a5 = vf_zero(), a6 = vf_zero(), a7 = vf_zero();
    vf b0 = vf_zero(), b1 = vf_zero(), b2 = vf_zero(), b3 = vf_zero();
    vf b4 = vf_zero(), b5 = vf_zero(), b6 = vf_zero(), b7 = vf_zero();
#define QK_8X2_STEP(d)                                                                     \
    do {                                                                                   \
        vf k0 = TILE_LOAD(k0p + (d)), k1 = TILE_LOAD(k1p + (d));                           \
        const float *q = qp + 8 * (d);                                                     \
        vf q0 = vf_load(q), q1 = vf_load(q + VLEN);                                        \
        a0 = vf_fmadd(q0, k0, a0), b0 = vf_fmadd(q0, k1, b0);                              \
        a1 = vf_fmadd(q1, k0, a1), b1 = vf_fmadd(q1, k1, b1);                              \
        vf q2 = vf_load(q + 2 * VLEN), q3 = vf_load(q + 3 * VLEN);                         \
        a2 = vf_fmadd(q2, k0, a2), b2 = vf_fmadd(q2, k1, b2);                              \
        a3 = vf_fmadd(q3, k0, a3), b3 = vf_fmadd(q3, k1, b3);                              \
        vf q4 = vf_load(q + 4 * VLEN), q5 = vf_load(q + 5 * VLEN);                         \
        a4 = vf_fmadd(q4, k0, a4), b4 = vf_fmadd(q4, k1, b4);                              \
        a5 = vf_fmadd(q5, k0, a5), b5 = vf_fmadd(q5, k1, b5);                              \
        vf q6 = vf_load(q + 6 * VLEN);                                                     \
        a6 = vf_fmadd(q6, k0, a6), b6 = vf_fmadd(q6, k1, b6);                              \
        if (nr == 8) { /* nr = 7: a GQA group of 7 heads, the 8th row is padding */        \
            vf q7 = vf_load(q + 7 * VLEN);                                                 \
            a7 = vf_fmadd(q7, k0, a7), b7 = vf_fmadd(q7, k1, b7);                          \
        }                                                                                  \
    } while (0)
    int64_t d = 0;
    for (; d + 2 * VLEN <= Dp; d += 2 * VLEN) { /* two steps (32 fma) per trip */
        QK_8X2_STEP(d);
        QK_8X2_STEP(d + VLEN);
    }
    if (d < Dp)
        QK_8X2_STEP(d);
#undef QK_8X2_STEP
    const vf ab[16] = {a0, b0, a1, b1, a2, b2, a3, b3, a4, b4, a5, b5, a6, b6, a7, b7};
    vf_store_pairs(s, lds, vf_hsum16(ab), nr);
}
#endif

#if VLEN > 1
/* The decode's scores of an item of hg units of nr = 7 or 8 rows each (unit u's rows packed
 * at QP + u qs, its scores at S + u ss, stride OPT_BK) against the nk keys of a tile, keys
 * outer and heads inner, so that K is read in address order (each key's rows of all the
 * item's heads; `make bench-read`-style reads of K that way took 8.6 ms instead of 10.4 at
 * T = 32768). Unit u's K row of key jj is at KR[u OPT_BK + jj] (opt_tile_rows); with VR,
 * its V row (vbytes) is requested along the way, in address order with K, so that it is in
 * L2 when the per-head P.V reads it. Every dot product has qk_tile's tree. */
static inline OPT_INLINE void TN(qk_keys)(const float *QP, int64_t qs, const char *const *KR,
                                          const char *const *VR, size_t vbytes, int64_t hg,
                                          int64_t nk, int64_t D, float *S, int64_t ss,
                                          const int nr)
{
    for (int64_t jj = 0; jj < nk; jj += KO_KB) {
        const int64_t kb = nk - jj < KO_KB ? nk - jj : KO_KB;
        for (int64_t j = jj; VR && j < jj + kb; j++)
            for (int64_t u = 0; u < hg; u++) {
                const char *v = VR[u * OPT_BK + j];
                for (size_t o = 0; o < vbytes; o += 128) { /* may hint a line past the row */
                    __builtin_prefetch(v + o, 0, 2);
                    __builtin_prefetch(v + o + 64, 0, 2);
                }
            }
        for (int64_t u = 0; u < hg; u++) {
            const TILE_T *k0 = (const TILE_T *)(const void *)KR[u * OPT_BK + jj];
#if VLEN == 16
            if (kb == 2) {
                const TILE_T *k1 = (const TILE_T *)(const void *)KR[u * OPT_BK + jj + 1];
                TN(qk_8x2)(QP + u * qs, k0, k1, D, S + u * ss + jj, OPT_BK, nr);
                continue;
            }
#endif
            TN(qk_8x1)(QP + u * qs, k0, D, S + u * ss + jj, OPT_BK, nr);
        }
    }
}
#endif

/* Scores of rows [0, Rp) (q rows at stride Dp, Rp a multiple of 4; QP: the same packed by
 * blocks of 8 rows) against the nk keys of
 * a tile (rows of K at stride ldk) into S (stride OPT_BK); rows at or past R are padding
 * (with AVX-512 a 7-row group skips the 8th). The K and V rows named by pf (the next
 * unit's) are requested a few at a time during the first row block, so that the loads
 * overlap the arithmetic instead of arriving in a burst. */
static void TN(qk_tile)(const float *Q, const float *QP, int64_t R, int64_t Rp, int64_t Dp,
                        const TILE_T *K, int64_t ldk, int64_t nk, float *S, const opt_prefetch *pf)
{
    (void)R;
    int64_t r0 = 0;
    (void)QP; /* the scalar instance has no 8-row blocks */
#if VLEN > 1
    const int kb8 = VLEN == 16 ? 2 : 1;
    for (; r0 + 8 <= Rp; r0 += 8)
        for (int64_t j0 = 0; j0 < nk; j0 += kb8) {
            if (r0 == 0)
                opt_prefetch_rows(pf, j0, j0 + kb8);
#if VLEN == 16
            if (nk - j0 >= 2 && R - r0 == 7) { /* rows past R are not read: skip the 8th */
                TN(qk_8x2)(QP + r0 * Dp, K + j0 * ldk, K + (j0 + 1) * ldk, Dp,
                           S + r0 * OPT_BK + j0, OPT_BK, 7);
                continue;
            }
            if (nk - j0 >= 2) {
                TN(qk_8x2)(QP + r0 * Dp, K + j0 * ldk, K + (j0 + 1) * ldk, Dp,
                           S + r0 * OPT_BK + j0, OPT_BK, 8);
                continue;
            }
#endif
            if (R - r0 == 7)
                TN(qk_8x1)(QP + r0 * Dp, K + j0 * ldk, Dp, S + r0 * OPT_BK + j0, OPT_BK, 7);
            else
                TN(qk_8x1)(QP + r0 * Dp, K + j0 * ldk, Dp, S + r0 * OPT_BK + j0, OPT_BK, 8);
        }
#endif
    for (; r0 < Rp; r0 += 4) {
        for (int64_t j0 = 0; j0 < nk; j0 += QK_KB) {
            int kb = nk - j0 < QK_KB ? (int)(nk - j0) : QK_KB;
            if (r0 == 0)
                opt_prefetch_rows(pf, j0, j0 + QK_KB);
            if (kb >= 2 && kb < QK_KB) { /* a pair, then the rest */
                TN(qk_block)(Q + r0 * Dp, Dp, 4, K + j0 * ldk, ldk, 2, Dp, S + r0 * OPT_BK + j0,
                             OPT_BK);
                j0 += 2 - QK_KB;
                continue;
            }
            TN(qk_block)(Q + r0 * Dp, Dp, 4, K + j0 * ldk, ldk, kb, Dp, S + r0 * OPT_BK + j0,
                         OPT_BK);
        }
    }
}

#if VLEN >= 8
/* KT[d][j] = k_j[d] for d < Dp and j < nk rounded up to a whole vector (the columns
 * KN(qkt_tile) reads), keys past nk as zeros: the tile transposed for the many-row QK
 * kernel. Exact: moves and exact conversions. The next unit's rows named by pf are
 * requested along the way. */
static void TN(transpose_tile)(const TILE_T *K, int64_t ldk, int64_t nk, int64_t Dp, float *KT,
                               const opt_prefetch *pf)
{
    int64_t j0 = 0;
    for (; j0 < nk; j0 += VLEN) {
        opt_prefetch_rows(pf, j0, j0 + VLEN);
        for (int64_t d0 = 0; d0 < Dp; d0 += VLEN) {
            vf r[VLEN];
#pragma GCC unroll 16
            for (int jj = 0; jj < VLEN; jj++)
                r[jj] = j0 + jj < nk ? TILE_LOAD(K + (j0 + jj) * ldk + d0) : vf_zero();
            vf_transpose_store(r, KT + j0 / QKT_W * (Dp * QKT_W) + d0 * QKT_W + j0 % QKT_W, QKT_W);
        }
    }
    opt_prefetch_rows(pf, j0, OPT_BK); /* the rest of the next unit's rows */
}
#endif

/* acc[r][c..] += sum_j p[r][j] v[j][c..] over visible (r, j), for rb <= 4 rows and a
 * column block of cb <= 2 vectors. Row r's sequence of fma is the same whether or not
 * its neighbours see key j, and whether or not the tile is full. nr = 3: the 4th row of a
 * 4 x 2 block is padding (a 7-head group's last block), never read: not computed. */
static inline OPT_INLINE void TN(pv_block)(float *acc, int64_t lda, const float *p, int64_t ldp,
                                           const unsigned char *vis, int rb, const TILE_T *v,
                                           int64_t ldv, int64_t nk, int cb, int full,
                                           opt_pfcur *pfc, const int nr)
{
    if (rb == 4 && cb == 2) {
        vf a00 = vf_load(acc), a01 = vf_load(acc + VLEN);
        vf a10 = vf_load(acc + lda), a11 = vf_load(acc + lda + VLEN);
        vf a20 = vf_load(acc + 2 * lda), a21 = vf_load(acc + 2 * lda + VLEN);
        vf a30 = vf_load(acc + 3 * lda), a31 = vf_load(acc + 3 * lda + VLEN);
        if (full) { /* every (row, key) of the tile visible: no need to look; several keys
                     * per trip (below) */
#define PV_FULL_KEY(j)                                                                     \
    do {                                                                                   \
        vf v0 = TILE_LOAD(v + (j) * ldv), v1 = TILE_LOAD(v + (j) * ldv + VLEN);            \
        vf p0 = vf_set1(p[j]), p1 = vf_set1(p[ldp + (j)]);                                 \
        a00 = vf_fmadd(p0, v0, a00), a01 = vf_fmadd(p0, v1, a01);                          \
        a10 = vf_fmadd(p1, v0, a10), a11 = vf_fmadd(p1, v1, a11);                          \
        vf p2 = vf_set1(p[2 * ldp + (j)]);                                                 \
        a20 = vf_fmadd(p2, v0, a20), a21 = vf_fmadd(p2, v1, a21);                          \
        if (nr == 4) {                                                                     \
            vf p3 = vf_set1(p[3 * ldp + (j)]);                                             \
            a30 = vf_fmadd(p3, v0, a30), a31 = vf_fmadd(p3, v1, a31);                      \
        }                                                                                  \
    } while (0)
            int64_t j = 0;
            for (; j + 4 <= nk; j += 4) { /* four keys per trip: with one, the loop's own
                                           * instructions were a fifth of the body's */
                if (pfc) /* one line per key */
                    opt_pf_lines4(pfc);
                PV_FULL_KEY(j);
                PV_FULL_KEY(j + 1);
                PV_FULL_KEY(j + 2);
                PV_FULL_KEY(j + 3);
            }
            for (; j < nk; j++)
                PV_FULL_KEY(j);
#undef PV_FULL_KEY
        } else {
            for (int64_t j = 0; j < nk; j++) {
                if (pfc)
                    opt_pf_line(pfc);
                vf v0 = TILE_LOAD(v + j * ldv), v1 = TILE_LOAD(v + j * ldv + VLEN);
                if (vis[j]) {
                    a00 = vf_fmadd(vf_set1(p[j]), v0, a00);
                    a01 = vf_fmadd(vf_set1(p[j]), v1, a01);
                }
                if (vis[ldp + j]) {
                    a10 = vf_fmadd(vf_set1(p[ldp + j]), v0, a10);
                    a11 = vf_fmadd(vf_set1(p[ldp + j]), v1, a11);
                }
                if (vis[2 * ldp + j]) {
                    a20 = vf_fmadd(vf_set1(p[2 * ldp + j]), v0, a20);
                    a21 = vf_fmadd(vf_set1(p[2 * ldp + j]), v1, a21);
                }
                if (nr == 4 && vis[3 * ldp + j]) {
                    a30 = vf_fmadd(vf_set1(p[3 * ldp + j]), v0, a30);
                    a31 = vf_fmadd(vf_set1(p[3 * ldp + j]), v1, a31);
                }
            }
        }
        vf_store(acc, a00), vf_store(acc + VLEN, a01);
        vf_store(acc + lda, a10), vf_store(acc + lda + VLEN, a11);
        vf_store(acc + 2 * lda, a20), vf_store(acc + 2 * lda + VLEN, a21);
        vf_store(acc + 3 * lda, a30), vf_store(acc + 3 * lda + VLEN, a31);
        return;
    }
    for (int rr = 0; rr < rb; rr++)
        for (int cc = 0; cc < cb; cc++) {
            vf a = vf_load(acc + rr * lda + cc * VLEN);
            for (int64_t j = 0; j < nk; j++)
                if (full || vis[rr * ldp + j]) /* full: the flags are not written */
                    a = vf_fmadd(vf_set1(p[rr * ldp + j]), TILE_LOAD(v + j * ldv + cc * VLEN), a);
            vf_store(acc + rr * lda + cc * VLEN, a);
        }
}

#if VLEN == 16
/* pv_block for 4 rows and 4 column vectors (16 accumulators of the 32 registers: half the
 * loads per fma of the 4 x 2 block); the same fma sequence per (row, column) */
static inline OPT_INLINE void TN(pv_block4x4)(float *acc, int64_t lda, const float *p, int64_t ldp,
                                   const unsigned char *vis, const TILE_T *v, int64_t ldv,
                                   int64_t nk, int full, const int nr, opt_pfcur *pfc)
{
#define PV4_ROW_LOAD(r)                                                                        \
    vf a##r##0 = vf_load(acc + (r) * lda), a##r##1 = vf_load(acc + (r) * lda + VLEN);          \
    vf a##r##2 = vf_load(acc + (r) * lda + 2 * VLEN), a##r##3 = vf_load(acc + (r) * lda + 3 * VLEN)
#define PV4_ROW_FMA(r, j)                                                                      \
    do {                                                                                       \
        vf pp = vf_set1(p[(r) * ldp + (j)]);                                                   \
        a##r##0 = vf_fmadd(pp, v0, a##r##0), a##r##1 = vf_fmadd(pp, v1, a##r##1);              \
        a##r##2 = vf_fmadd(pp, v2, a##r##2), a##r##3 = vf_fmadd(pp, v3, a##r##3);              \
    } while (0)
#define PV4_ROW_STORE(r)                                                                       \
    vf_store(acc + (r) * lda, a##r##0), vf_store(acc + (r) * lda + VLEN, a##r##1);             \
    vf_store(acc + (r) * lda + 2 * VLEN, a##r##2), vf_store(acc + (r) * lda + 3 * VLEN, a##r##3)
    PV4_ROW_LOAD(0);
    PV4_ROW_LOAD(1);
    PV4_ROW_LOAD(2);
    PV4_ROW_LOAD(3);
    if (full) {
        for (int64_t j = 0; j < nk; j++) {
            const TILE_T *vj = v + j * ldv;
            vf v0 = TILE_LOAD(vj), v1 = TILE_LOAD(vj + VLEN);
            vf v2 = TILE_LOAD(vj + 2 * VLEN), v3 = TILE_LOAD(vj + 3 * VLEN);
            if (pfc && (j & 1)) /* two lines per key */
                opt_pf_lines4(pfc);
            PV4_ROW_FMA(0, j);
            PV4_ROW_FMA(1, j);
            PV4_ROW_FMA(2, j);
            if (nr == 4) /* nr = 3: the 4th row is padding, never read */
                PV4_ROW_FMA(3, j);
        }
    } else {
        for (int64_t j = 0; j < nk; j++) {
            if (pfc)
                opt_pf_line(pfc), opt_pf_line(pfc);
            if (!(vis[j] | vis[ldp + j] | vis[2 * ldp + j] | vis[3 * ldp + j]))
                continue;
            const TILE_T *vj = v + j * ldv;
            vf v0 = TILE_LOAD(vj), v1 = TILE_LOAD(vj + VLEN);
            vf v2 = TILE_LOAD(vj + 2 * VLEN), v3 = TILE_LOAD(vj + 3 * VLEN);
            if (vis[j])
                PV4_ROW_FMA(0, j);
            if (vis[ldp + j])
                PV4_ROW_FMA(1, j);
            if (vis[2 * ldp + j])
                PV4_ROW_FMA(2, j);
            if (nr == 4 && vis[3 * ldp + j])
                PV4_ROW_FMA(3, j);
        }
    }
    PV4_ROW_STORE(0);
    PV4_ROW_STORE(1);
    PV4_ROW_STORE(2);
    PV4_ROW_STORE(3);
#undef PV4_ROW_LOAD
#undef PV4_ROW_FMA
#undef PV4_ROW_STORE
}
#endif

/* ACC[r] += P[r] V over the tile for rows [0, Rp) (ACC at stride Dvp, P and VIS at stride
 * OPT_BK, full[r]: the row sees every key of the tile, and its VIS row is not written),
 * columns [0, Dvk). Rows at or past R are padding: their accumulators are never read.
 * V is row-major (row j at V + j ldv, pstride = 0) or in column panels of PV_PANEL floats
 * (pstride > 0: columns [c, c + PV_PANEL) of row j at V + (c / PV_PANEL) pstride + j ldv,
 * ldv = PV_PANEL; kernel_body.h's stage_v), which each column pass reads contiguously.
 * The K rows named by pf (n = 0: none) are requested along the way, a line or two per
 * key, each row block taking its share. */
static void TN(pv_tile)(float *ACC, int64_t Dvp, const float *P, unsigned char *VIS,
                        const unsigned char *full, int64_t R, int64_t Rp, const TILE_T *V,
                        int64_t ldv, int64_t nk, int64_t Dvk, const opt_prefetch *pf,
                        int64_t pstride)
{
#define PV_COLS(c) (pstride ? V + (c) / PV_PANEL * pstride : V + (c))
    (void)R;
    /* staged panels (AVX2): panels outer, row blocks inner, so that a panel (64 keys x
     * PV_PANEL floats, 4 KiB) stays in L1 through every row block; in place, a column pass
     * maps onto 2 sets of L1 anyway, and row blocks outer keep each block's P rows */
    const int64_t cstep = pstride ? PV_PANEL : Dvk;
    if (pstride) /* a row that sees the whole tile has not written its flags */
        for (int64_t r0 = 0; r0 < Rp; r0 += 4) {
            const unsigned char *f = full + r0;
            if (!(f[0] && f[1] && f[2] && f[3]))
                for (int rr = 0; rr < 4; rr++)
                    if (f[rr])
                        memset(VIS + (r0 + rr) * OPT_BK, 1, (size_t)nk);
        }
    for (int64_t cs = 0; cs < Dvk; cs += cstep)
    for (int64_t r0 = 0; r0 < Rp; r0 += 4) {
        /* this row block's share of the rows to prefetch, a line or two per key */
        opt_pfcur cur = {NULL, 0, 0, 0}, *pc = NULL;
        if (pf->n > 0 && cs == 0) {
            const int64_t ra = r0 * pf->n / Rp, rz = (r0 + 4) * pf->n / Rp;
            cur = (opt_pfcur){pf->k + ra, 0, pf->kbytes, rz - ra};
            pc = &cur;
        }
        const unsigned char *f = full + r0;
        int all = f[0] && f[1] && f[2] && f[3];
        if (!all && !pstride)
            for (int rr = 0; rr < 4; rr++)
                if (f[rr])
                    memset(VIS + (r0 + rr) * OPT_BK, 1, (size_t)nk);
        int64_t c0 = cs;
        const int64_t ce = cs + cstep;
#if VLEN == 16
        for (; c0 + 4 * VLEN <= ce; c0 += 4 * VLEN) {
            if (pc && pc->rows <= 0) /* every row requested: no more tests per key */
                pc = NULL;
            if (R - r0 == 3)
                TN(pv_block4x4)(ACC + r0 * Dvp + c0, Dvp, P + r0 * OPT_BK, OPT_BK,
                                VIS + r0 * OPT_BK, PV_COLS(c0), ldv, nk, all, 3, pc);
            else
                TN(pv_block4x4)(ACC + r0 * Dvp + c0, Dvp, P + r0 * OPT_BK, OPT_BK,
                                VIS + r0 * OPT_BK, PV_COLS(c0), ldv, nk, all, 4, pc);
        }
#endif
        for (; c0 < ce; c0 += 2 * VLEN) {
            int cb = ce - c0 < 2 * VLEN ? 1 : 2;
            if (pc && pc->rows <= 0) /* every row requested: no more tests per key (they
                                      * were a sixth of a decode's P.V instructions) */
                pc = NULL;
            if (R - r0 == 3)
                TN(pv_block)(ACC + r0 * Dvp + c0, Dvp, P + r0 * OPT_BK, OPT_BK, VIS + r0 * OPT_BK,
                             4, PV_COLS(c0), ldv, nk, cb, all, pc, 3);
            else
                TN(pv_block)(ACC + r0 * Dvp + c0, Dvp, P + r0 * OPT_BK, OPT_BK, VIS + r0 * OPT_BK,
                             4, PV_COLS(c0), ldv, nk, cb, all, pc, 4);
        }
    }
#undef PV_COLS
}


#if VLEN == 8
/* The decode's group P.V with AVX2: acc[r][c] += sum_j p[r][j] v[j][c] for the nr (5 to 7)
 * rows of a decode unit that all see every key of the tile, two column vectors at a time,
 * each V vector read once for the group (pv_block's two row blocks read and converted it
 * twice, the 8th row of a 7-head group as padding). AVX2 has no embedded broadcast and 16
 * registers, and 14 accumulators leave two: binary32 V is the fma's memory operand
 * (vf_fmadd_mem) and each weight is broadcast into the one left; f16 and bf16 V are
 * converted into the two, and the weights, broadcast once per tile into pb
 * ([r][j][VLEN], pv_group), are the fma's memory operand, read by every column pass.
 * Each (row, column) is pv_block's fma chain over the keys in order: the same bits
 * whichever block computes it. */
static inline OPT_INLINE void TN(pv_group_pass)(float *acc, int64_t lda, const float *pb,
                                                const TILE_T *v, int64_t ldv,
                                                int64_t nk, const int nr, const opt_pfrows *pr)
{
#define PVGA_DECL(r) vf a##r##0 = vf_zero(), a##r##1 = vf_zero()
#define PVGA_LOAD(r)                                                                           \
    do {                                                                                       \
        if (nr > (r))                                                                          \
            a##r##0 = vf_load(acc + (r) * lda), a##r##1 = vf_load(acc + (r) * lda + VLEN);     \
    } while (0)
#define PVGA_FMA_TAB(r, j)                                                                     \
    do {                                                                                       \
        if (nr > (r)) {                                                                        \
            a##r##0 = vf_fmadd_mem(v0, pb + ((r) * OPT_BK + (j)) * VLEN, a##r##0);             \
            a##r##1 = vf_fmadd_mem(v1, pb + ((r) * OPT_BK + (j)) * VLEN, a##r##1);             \
        }                                                                                      \
    } while (0)
#define PVGA_KEY(j)                                                                            \
    do {                                                                                       \
        const vf v0 = TILE_LOAD(v + (j) * ldv), v1 = TILE_LOAD(v + (j) * ldv + VLEN);          \
        PVGA_FMA_TAB(0, j);                                                                    \
        PVGA_FMA_TAB(1, j);                                                                    \
        PVGA_FMA_TAB(2, j);                                                                    \
        PVGA_FMA_TAB(3, j);                                                                    \
        PVGA_FMA_TAB(4, j);                                                                    \
        PVGA_FMA_TAB(5, j);                                                                    \
        PVGA_FMA_TAB(6, j);                                                                    \
    } while (0)
#define PVGA_STORE(r)                                                                          \
    do {                                                                                       \
        if (nr > (r))                                                                          \
            vf_store(acc + (r) * lda, a##r##0), vf_store(acc + (r) * lda + VLEN, a##r##1);     \
    } while (0)
    PVGA_DECL(0);
    PVGA_DECL(1);
    PVGA_DECL(2);
    PVGA_DECL(3);
    PVGA_DECL(4);
    PVGA_DECL(5);
    PVGA_DECL(6);
    PVGA_LOAD(0);
    PVGA_LOAD(1);
    PVGA_LOAD(2);
    PVGA_LOAD(3);
    PVGA_LOAD(4);
    PVGA_LOAD(5);
    PVGA_LOAD(6);
    int64_t j = 0;
    for (; j + 4 <= nk; j += 4) { /* four keys per trip, a K row requested per trip */
        opt_pf_row(pr, j / 4);
        PVGA_KEY(j);
        PVGA_KEY(j + 1);
        PVGA_KEY(j + 2);
        PVGA_KEY(j + 3);
    }
    for (; j < nk; j++)
        PVGA_KEY(j);
    PVGA_STORE(0);
    PVGA_STORE(1);
    PVGA_STORE(2);
    PVGA_STORE(3);
    PVGA_STORE(4);
    PVGA_STORE(5);
    PVGA_STORE(6);
#undef PVGA_DECL
#undef PVGA_LOAD
#undef PVGA_FMA_TAB
#undef PVGA_KEY
#undef PVGA_STORE
}

/* ACC[r] += P[r] V over the tile for the R (5 to 7) rows of a decode unit (pv_group_pass),
 * V rows at stride ldv, columns [0, Dvk) (a multiple of 2 vectors), pb room for the
 * weights' broadcast table (R x OPT_BK x VLEN floats); the K rows named by pf (n = 0:
 * none) are requested along the way. */
static inline void TN(pv_group)(float *ACC, int64_t Dvp, const float *P, int64_t R,
                                const TILE_T *V, int64_t ldv, int64_t nk, int64_t Dvk,
                                const opt_prefetch *pf, float *pb)
{
    for (int64_t r = 0; r < R; r++)
        for (int64_t j = 0; j < nk; j++)
            vf_store(pb + (r * OPT_BK + j) * VLEN, vf_set1(P[r * OPT_BK + j]));
    const int64_t np = Dvk / (2 * VLEN);
    for (int64_t c = 0; c < np; c++) {
        const opt_pfrows pr = opt_pf_share(pf, c, np);
        const int64_t c0 = c * 2 * VLEN;
        if (R == 7)
            TN(pv_group_pass)(ACC + c0, Dvp, pb, V + c0, ldv, nk, 7, &pr);
        else if (R == 6)
            TN(pv_group_pass)(ACC + c0, Dvp, pb, V + c0, ldv, nk, 6, &pr);
        else
            TN(pv_group_pass)(ACC + c0, Dvp, pb, V + c0, ldv, nk, 5, &pr);
    }
}
#endif

#if VLEN == 16
/* The decode's group P.V with AVX-512: acc[r][c] +=
 * sum_j p[r][j] v[j][c] for the nr (5 to 7) rows of a decode unit that all see every key of
 * the tile, two column vectors at a time: each V vector loaded and converted once for the
 * group (pv_block4x4's two row blocks converted it twice, the 8th row of a 7-head group as
 * padding), each weight an embedded broadcast of its fma (vf_fmadd_bcast). 14 accumulators
 * and 2 V vectors: 16 of the 32 registers. Each (row, column) is pv_block's fma chain over
 * the keys in order: the same bits whichever block computes it. */
static inline OPT_INLINE void TN(pv_group_pass)(float *acc, int64_t lda, const float *p,
                                                const TILE_T *v, int64_t ldv, int64_t nk,
                                                const int nr, const opt_pfrows *pr)
{
#define PVGB_DECL(r) vf a##r##0 = vf_zero(), a##r##1 = vf_zero()
#define PVGB_LOAD(r)                                                                           \
    do {                                                                                       \
        if (nr > (r))                                                                          \
            a##r##0 = vf_load(acc + (r) * lda), a##r##1 = vf_load(acc + (r) * lda + VLEN);     \
    } while (0)
#define PVGB_FMA(r, j)                                                                         \
    do {                                                                                       \
        if (nr > (r)) {                                                                        \
            a##r##0 = vf_fmadd_bcast(v0, p + (r) * OPT_BK + (j), a##r##0);                     \
            a##r##1 = vf_fmadd_bcast(v1, p + (r) * OPT_BK + (j), a##r##1);                     \
        }                                                                                      \
    } while (0)
#define PVGB_KEY(j)                                                                            \
    do {                                                                                       \
        const vf v0 = TILE_LOAD(v + (j) * ldv), v1 = TILE_LOAD(v + (j) * ldv + VLEN);          \
        PVGB_FMA(0, j);                                                                        \
        PVGB_FMA(1, j);                                                                        \
        PVGB_FMA(2, j);                                                                        \
        PVGB_FMA(3, j);                                                                        \
        PVGB_FMA(4, j);                                                                        \
        PVGB_FMA(5, j);                                                                        \
        PVGB_FMA(6, j);                                                                        \
    } while (0)
#define PVGB_STORE(r)                                                                          \
    do {                                                                                       \
        if (nr > (r))                                                                          \
            vf_store(acc + (r) * lda, a##r##0), vf_store(acc + (r) * lda + VLEN, a##r##1);     \
    } while (0)
    PVGB_DECL(0);
    PVGB_DECL(1);
    PVGB_DECL(2);
    PVGB_DECL(3);
    PVGB_DECL(4);
    PVGB_DECL(5);
    PVGB_DECL(6);
    PVGB_LOAD(0);
    PVGB_LOAD(1);
    PVGB_LOAD(2);
    PVGB_LOAD(3);
    PVGB_LOAD(4);
    PVGB_LOAD(5);
    PVGB_LOAD(6);
    int64_t j = 0;
    for (; j + 4 <= nk; j += 4) { /* four keys per trip, a K row requested per trip */
        opt_pf_row(pr, j / 4);
        PVGB_KEY(j);
        PVGB_KEY(j + 1);
        PVGB_KEY(j + 2);
        PVGB_KEY(j + 3);
    }
    for (; j < nk; j++)
        PVGB_KEY(j);
    PVGB_STORE(0);
    PVGB_STORE(1);
    PVGB_STORE(2);
    PVGB_STORE(3);
    PVGB_STORE(4);
    PVGB_STORE(5);
    PVGB_STORE(6);
#undef PVGB_DECL
#undef PVGB_LOAD
#undef PVGB_FMA
#undef PVGB_KEY
#undef PVGB_STORE
}

/* ACC[r] += P[r] V over the tile for the R (5 to 7) rows of a decode unit (pv_group_pass),
 * V rows at stride ldv, columns [0, Dvk) (a multiple of 2 vectors); the K rows named by pf
 * (n = 0: none) are requested along the way. */
static inline void TN(pv_group)(float *ACC, int64_t Dvp, const float *P, int64_t R, const TILE_T *V,
                         int64_t ldv, int64_t nk, int64_t Dvk, const opt_prefetch *pf, float *pb)
{
    (void)pb; /* the weights are embedded broadcasts */
    const int64_t np = Dvk / (2 * VLEN);
    for (int64_t c = 0; c < np; c++) {
        const opt_pfrows pr = opt_pf_share(pf, c, np);
        const int64_t c0 = c * 2 * VLEN;
        if (R == 7)
            TN(pv_group_pass)(ACC + c0, Dvp, P, V + c0, ldv, nk, 7, &pr);
        else if (R == 6)
            TN(pv_group_pass)(ACC + c0, Dvp, P, V + c0, ldv, nk, 6, &pr);
        else
            TN(pv_group_pass)(ACC + c0, Dvp, P, V + c0, ldv, nk, 5, &pr);
    }
}
#endif

#undef TN
#undef TILE_T
#undef TILE_LOAD
#undef TILE_SUFFIX
