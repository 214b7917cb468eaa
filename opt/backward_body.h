/* SPDX-License-Identifier: MIT */
/* backward_body.h: the fast backward's work items, written once over the vector vocabulary
 * (simd_<isa>.h) and included by each kernel_<isa>.c after kernel_body.h (its exp).
 *
 * Every output element is one chain of binary32 fma in a fixed order: lanes run over
 * independent outputs (keys of a score row, columns of a gradient row), never over a
 * reduction, so a chain is the same whatever the vector length: the bits are identical
 * for every ISA and thread count. dK, dV: one item per (b, KV head, key block), its chains
 * over the group's heads, then query blocks, then rows, in that order; dQ: one item per
 * (b, head, query block), its chains over key blocks, then keys. Both recompute P as
 * exp(s - LSE) from the stored LSE (SPEC 10.7's model). No atomics. A product takes only
 * the keys and rows of a block that a row's range reaches (bw_spans): the causal
 * triangle's masked half of a diagonal block costs nothing. */
#include "opt/backward_internal.h"

/* C[r][n] (+)= sum_k A[r lda + k ak] B[k ldb + n] (ak = 1: A row-major; lda = 1, ak = its
 * row length: A transposed, read in place), in register tiles of up to BW_RB rows by BW_VB
 * vectors. An element's chain is the same whatever its tile: it starts from C (acc) or +0
 * and takes its terms k ascending, one fma each. */
#if VLEN == 16
#define BW_RB 4 /* 16 accumulators: Zen 4 double-pumps 512-bit fma, so 4 x 4 already keeps
                 * the fma pipes busy; 6 x 4 (24) measured 2-5% slower (70 against 72-83 ms) */
#define BW_VB 4
#elif VLEN == 8
#define BW_RB 6 /* 12 accumulators of AVX2's 16, 2 B vectors, a broadcast (as qkt_tile; the
                 * 4 x 2 tile before it, 8 accumulators, ran 2.25 instructions per fma) */
#define BW_VB 2
#else
#define BW_RB 4
#define BW_VB 2
#endif

/* Fully unrolled (the pragmas), so that the accumulators live in registers. */
#define BW_UNROLL _Pragma("GCC unroll 8")
#define BW_TILE(RB, VB)                                                                        \
    do {                                                                                       \
        vf c[RB][VB];                                                                          \
        BW_UNROLL for (int rr = 0; rr < RB; rr++)                                              \
            BW_UNROLL for (int vv = 0; vv < VB; vv++)                                          \
                c[rr][vv] = acc ? vf_load(C + (r + rr) * ldc + (v + vv) * VLEN) : vf_zero();   \
        _Pragma("GCC unroll 2") for (int64_t k = k0; k < k1; k++) {                            \
            vf bb[VB];                                                                         \
            BW_UNROLL for (int vv = 0; vv < VB; vv++)                                          \
                bb[vv] = vf_load(B + k * ldb + (v + vv) * VLEN);                               \
            BW_UNROLL for (int rr = 0; rr < RB; rr++) {                                        \
                vf a = vf_set1(A[(r + rr) * lda + k * ak]);                                    \
                BW_UNROLL for (int vv = 0; vv < VB; vv++)                                      \
                    c[rr][vv] = vf_fmadd(a, bb[vv], c[rr][vv]);                                \
            }                                                                                  \
        }                                                                                      \
        BW_UNROLL for (int rr = 0; rr < RB; rr++)                                              \
            BW_UNROLL for (int vv = 0; vv < VB; vv++)                                          \
                vf_store(C + (r + rr) * ldc + (v + vv) * VLEN, c[rr][vv]);                     \
    } while (0)

/* Rows [r, r + RB) of C, vectors [v0, v1), terms [k0, k1). */
#if BW_VB > 2
#define BW_ROWS_PAIRS(RB)                                                                      \
    for (; v + 2 <= v1; v += 2)                                                                \
        BW_TILE(RB, 2);
#else
#define BW_ROWS_PAIRS(RB)
#endif
#define BW_ROWS_DEFINE(RB)                                                                     \
    static void KN(bw_rows_##RB)(float *C, int64_t ldc, const float *A, int64_t lda,           \
                                 int64_t ak, const float *B, int64_t ldb, int64_t r,           \
                                 int64_t v0, int64_t v1, int64_t k0, int64_t k1, int acc)      \
    {                                                                                          \
        int64_t v = v0;                                                                        \
        for (; v + BW_VB <= v1; v += BW_VB)                                                    \
            BW_TILE(RB, BW_VB);                                                                \
        BW_ROWS_PAIRS(RB)                                                                      \
        for (; v < v1; v++)                                                                    \
            BW_TILE(RB, 1);                                                                    \
    }
#if BW_RB == 6
BW_ROWS_DEFINE(6)
#endif
BW_ROWS_DEFINE(4)
BW_ROWS_DEFINE(2)
BW_ROWS_DEFINE(1)
#undef BW_ROWS_DEFINE
#undef BW_ROWS_PAIRS
#undef BW_TILE
#undef BW_UNROLL

/* The tile height for the rows left: BW_RB, then 4, 2, 1 (64 = 10 x 6 + 4). */
static inline int64_t bw_rb(int64_t left)
{
    return left >= BW_RB ? BW_RB : left >= 4 ? 4 : left >= 2 ? 2 : 1;
}

static void KN(bw_rows)(int64_t rb, float *C, int64_t ldc, const float *A, int64_t lda,
                        int64_t ak, const float *B, int64_t ldb, int64_t r, int64_t v0,
                        int64_t v1, int64_t k0, int64_t k1, int acc)
{
    switch (rb) {
#if BW_RB == 6
    case 6:
        KN(bw_rows_6)(C, ldc, A, lda, ak, B, ldb, r, v0, v1, k0, k1, acc);
        break;
#endif
    case 4:
        KN(bw_rows_4)(C, ldc, A, lda, ak, B, ldb, r, v0, v1, k0, k1, acc);
        break;
    case 2:
        KN(bw_rows_2)(C, ldc, A, lda, ak, B, ldb, r, v0, v1, k0, k1, acc);
        break;
    default:
        KN(bw_rows_1)(C, ldc, A, lda, ak, B, ldb, r, v0, v1, k0, k1, acc);
    }
}

/* The three shapes of product, each over the spans of a block's rows (bw_span): the terms
 * outside a span are exact zeros (masked P or dS) and are left out, which changes at most
 * the sign of a zero sum; every output is written as x + 0 (bw_put), so the bits are
 * those of the full products. */

/* Scores (S = Q K^T, dP = dO V^T): C[r][0, BW_BK) = sum_d A[r][d] B[d][.] for rows r < nr
 * (A at row stride lda, B a transposed key block), over the key vectors that cover the
 * spans of the row's tile; the other vectors are left as they are (bw_block writes +0
 * outside each row's span without reading them). */
static void KN(bw_mm_scores)(float *C, const float *A, int64_t lda, const float *B, int64_t K,
                             int64_t nr, const bw_span *sp)
{
    for (int64_t r = 0; r < nr;) {
        const int64_t rb = bw_rb(nr - r);
        int64_t lo = BW_BK, hi = 0;
        for (int64_t i = r; i < r + rb; i++)
            if (sp[i].lo < sp[i].hi) {
                lo = sp[i].lo < lo ? sp[i].lo : lo;
                hi = sp[i].hi > hi ? sp[i].hi : hi;
            }
        int64_t v0 = lo / VLEN, v1 = (hi + VLEN - 1) / VLEN;
        if (v0 < v1)
            KN(bw_rows)(rb, C, BW_BK, A, lda, 1, B, BW_BK, r, v0, v1, 0, K, 0);
        r += rb;
    }
}

/* Keys by columns (dV += P^T dO, dK += dS^T Q): C[j][.] += sum_r A[r][j] B[r][.] for keys
 * j < nk (A a [BW_BQ][BW_BK] block read transposed), r over the rows whose span meets the
 * tile's keys (from the first such row to the last). */
static void KN(bw_mm_keys)(float *C, int64_t ldc, const float *A, const float *B, int64_t ldb,
                           int64_t nk, int64_t NV, int64_t nr, const bw_span *sp)
{
    for (int64_t j = 0; j < nk;) {
        const int64_t rb = bw_rb(nk - j);
        int64_t k0 = 0, k1 = nr; /* the first and the last row that meet the tile */
        while (k0 < nr && !(sp[k0].lo < sp[k0].hi && sp[k0].lo < j + rb && sp[k0].hi > j))
            k0++;
        while (k1 > k0 && !(sp[k1 - 1].lo < sp[k1 - 1].hi && sp[k1 - 1].lo < j + rb &&
                            sp[k1 - 1].hi > j))
            k1--;
        if (k0 < k1)
            KN(bw_rows)(rb, C, ldc, A, 1, BW_BK, B, ldb, j, 0, NV, k0, k1, 1);
        j += rb;
    }
}

/* Rows by columns (dQ += dS K): C[r][.] += sum_j A[r][j] B[j][.] for rows r < nr, j over
 * the union of the spans of the row's tile. */
static void KN(bw_mm_rows)(float *C, int64_t ldc, const float *A, const float *B, int64_t ldb,
                           int64_t nr, int64_t NV, const bw_span *sp)
{
    for (int64_t r = 0; r < nr;) {
        const int64_t rb = bw_rb(nr - r);
        int64_t k0 = BW_BK, k1 = 0;
        for (int64_t i = r; i < r + rb; i++)
            if (sp[i].lo < sp[i].hi) {
                k0 = sp[i].lo < k0 ? sp[i].lo : k0;
                k1 = sp[i].hi > k1 ? sp[i].hi : k1;
            }
        if (k0 < k1)
            KN(bw_rows)(rb, C, ldc, A, BW_BK, 1, B, ldb, r, 0, NV, k0, k1, 1);
        r += rb;
    }
}

_Static_assert(BW_BK == 64, "bw_iota lists BW_BK indices");
/* 0, 1, ..., BW_BK - 1: a key's index in its block, compared in lanes (exact floats) */
static const float bw_iota[BW_BK] = {
    0,  1,  2,  3,  4,  5,  6,  7,  8,  9,  10, 11, 12, 13, 14, 15, 16, 17, 18, 19, 20, 21,
    22, 23, 24, 25, 26, 27, 28, 29, 30, 31, 32, 33, 34, 35, 36, 37, 38, 39, 40, 41, 42, 43,
    44, 45, 46, 47, 48, 49, 50, 51, 52, 53, 54, 55, 56, 57, 58, 59, 60, 61, 62, 63};

/* The spans of query block qb of (b, h) against key block kb, keys relative to the block:
 * pr where P can be nonzero (a regular row's key range, a mean row's keys below T_b), sr
 * where dS can (the regular rows'); rows past S and the other rows empty. Returns whether
 * some row's pr is not (the block is live). */
static int KN(bw_spans)(const bw_job *job, int64_t b, int64_t h, int64_t qb, int64_t kb,
                        bw_span *pr, bw_span *sr)
{
    const smattn_problem *p = job->p;
    const int64_t i0 = qb * BW_BQ, nr = p->S - i0 < BW_BQ ? p->S - i0 : BW_BQ;
    const int64_t k0 = kb * BW_BK, nk = p->T - k0 < BW_BK ? p->T - k0 : BW_BK;
    int live = 0;
    for (int64_t r = 0; r < BW_BQ; r++) {
        const int64_t row = (b * p->Hq + h) * p->S + i0 + r;
        const unsigned char c = r < nr ? job->cls[row] : BW_ROW_SKIP;
        int64_t lo = 0, hi = 0;
        if (c == BW_ROW_REGULAR) {
            lo = job->lo[row] - k0 > 0 ? job->lo[row] - k0 : 0;
            hi = job->hi[row] - k0 < nk ? job->hi[row] - k0 : nk;
        } else if (c == BW_ROW_MEAN) {
            const int64_t Tb = smattn__kv_len(p, b);
            hi = Tb - k0 < nk ? Tb - k0 : nk;
        }
        if (lo >= hi)
            lo = hi = 0;
        pr[r] = (bw_span){(int32_t)lo, (int32_t)hi};
        sr[r] = c == BW_ROW_REGULAR ? pr[r] : (bw_span){0, 0};
        live |= lo < hi;
    }
    return live;
}

/* P and dS of query block qb of (b, h) against key block kb, [BW_BQ][BW_BK] row-major
 * (+0 outside the problem and where the key is not visible), given the block's spans.
 * Under softcap, dS here is SPEC 10.1's dU = dS (1 - t^2); with Gs, SPEC 10.1's dS itself
 * (the bias's gradient: the bias comes after the cap) is stored there too, the same
 * values as dS without softcap. */
static void KN(bw_block)(const bw_job *job, int64_t b, int64_t h, int64_t qb, int64_t kb,
                         const bw_span *sr, float *P, float *dS, float *Tt, float *Gs)
{
    const smattn_problem *p = job->p;
    const smattn_inputs *in = job->in;
    const int64_t S = p->S, T = p->T, Hq = p->Hq, g = h / job->G;
    const int64_t i0 = qb * BW_BQ, nr = S - i0 < BW_BQ ? S - i0 : BW_BQ;
    const int64_t k0 = kb * BW_BK, nk = T - k0 < BW_BK ? T - k0 : BW_BK;
    const float *Q = job->q + ((b * Hq + h) * S + i0) * job->Dp;
    const float *dO = job->dO + ((b * Hq + h) * S + i0) * job->Dvp;
    const float *KT = job->kt + ((b * p->Hkv + g) * job->nkb + kb) * job->Dp * BW_BK;
    const float *VT = job->vt + ((b * p->Hkv + g) * job->nkb + kb) * job->Dvp * BW_BK;
    KN(bw_mm_scores)(P, Q, job->Dp, KT, p->D, nr, sr);
    KN(bw_mm_scores)(dS, dO, job->Dvp, VT, p->Dv, nr, sr);
    const int plain = !in->mask.data && !in->bias.data && !(job->cap > 0) && !job->term;
    for (int64_t r = 0; r < BW_BQ; r++) {
        float *Pr = P + r * BW_BK, *dSr = dS + r * BW_BK, *Tr = Tt + r * BW_BK;
        const int64_t i = i0 + r, row = (b * Hq + h) * S + i;
        const unsigned char cls = r < nr ? job->cls[row] : BW_ROW_SKIP;
        if (cls == BW_ROW_MEAN) {
            const int64_t Tb = smattn__kv_len(p, b);
            const float w = 1.0f / (float)Tb;
            for (int64_t c = 0; c < BW_BK; c++) {
                Pr[c] = c < nk && k0 + c < Tb ? w : 0.0f;
                dSr[c] = 0.0f;
                if (Gs)
                    Gs[r * BW_BK + c] = 0.0f;
            }
            continue;
        }
        /* the vectors [c0, c1) cover the row's span; P and dS are +0 outside it */
        const int64_t c0 = sr[r].lo / VLEN * VLEN, c1 = (sr[r].hi + VLEN - 1) / VLEN * VLEN;
        for (int64_t c = 0; c < c0; c += VLEN) {
            vf_store(Pr + c, vf_zero());
            vf_store(dSr + c, vf_zero());
            if (Gs)
                vf_store(Gs + r * BW_BK + c, vf_zero());
        }
        for (int64_t c = c1; c < BW_BK; c += VLEN) {
            vf_store(Pr + c, vf_zero());
            vf_store(dSr + c, vf_zero());
            if (Gs)
                vf_store(Gs + r * BW_BK + c, vf_zero());
        }
        if (c0 >= c1)
            continue; /* not regular, or no key of the block in its range */
        const float lse = job->lse[row], delta = job->delta[row];
        const int64_t lo = job->lo[row] - k0, hi = job->hi[row] - k0;
        /* the scores as the forward computes them (SPEC 6.2), minus the stored LSE */
        if (plain) { /* the scalar loop below, by vectors: the same operations */
            const vf vhi = vf_set1(job->scale_hi), vlo = vf_set1(job->scale_lo),
                     vl = vf_set1(lse), ninf = vf_set1(-HUGE_VALF);
            const float flo = (float)lo, fhi = (float)(hi < nk ? hi : nk);
            for (int64_t c = c0; c < c1; c += VLEN) {
                const vf sv = vf_load(Pr + c), idx = vf_load(bw_iota + c);
                vf x = vf_sub(vf_fmadd(sv, vhi, vf_mul(sv, vlo)), vl);
                x = vf_select_lt(idx, flo, ninf, x);
                vf_store(Pr + c, vf_select_lt(idx, fhi, x, ninf));
            }
        } else {
            for (int64_t c = c0; c < c1; c++) {
                const int64_t j = k0 + c;
                int vis = c >= lo && c < hi && c < nk && smattn__mask_allows(p, in, b, h, i, j);
                float x = -HUGE_VALF, t = 0.0f;
                if (vis) {
                    const float s = Pr[c];
                    x = fmaf(s, job->scale_hi, s * job->scale_lo);
                    if (job->cap > 0) {
                        t = tanhf(x / job->cap);
                        x = job->cap * t;
                    }
                    if (in->bias.data) {
                        const float bj =
                            opt_load1(&in->bias, smattn__off4(in->bias.stride, b, h, i, j));
                        if (bj == -HUGE_VALF)
                            vis = 0;
                        x += bj;
                    }
                    if (job->term) /* after the bias, as the forward adds it */
                        x += job->term[((b * Hq + h) * S + i) * T + j];
                }
                Pr[c] = vis ? x - lse : -HUGE_VALF;
                Tr[c] = t;
            }
        }
        /* P = exp(s - LSE); dS = P (dP - (Delta - dLSE)) (1 - t^2) */
        const vf vd = vf_set1(delta), one = vf_set1(1.0f);
        for (int64_t c = c0; c < c1; c += VLEN) {
            const vf pv = KN(vexp)(vf_load(Pr + c));
            vf ds = vf_mul(pv, vf_sub(vf_load(dSr + c), vd));
            if (Gs)
                vf_store(Gs + r * BW_BK + c, ds);
            if (job->cap > 0) {
                const vf t = vf_load(Tr + c);
                ds = vf_mul(ds, vf_sub(one, vf_mul(t, t)));
            }
            vf_store(Pr + c, pv);
            vf_store(dSr + c, ds);
        }
    }
}

/* One output element: binary32 as computed (+0 for an exact zero), f16 / bf16 rounded once
 * from it. */
static void KN(bw_put)(const smattn_out_tensor *t, int64_t off, float x)
{
    if (t->dtype == SMATTN_F32)
        opt_st_f32(t->data, off, x + 0.0f);
    else
        smattn_store(t->data, t->dtype, off, isnan(x) ? (double)NAN : (double)(x + 0.0f));
}

/* A row of n elements at element offset off, unit stride when stride is 1: x[c] written
 * as bw_put writes it (f32 rows by one copy; an exact zero +0 either way). */
static void KN(bw_put_row)(const smattn_out_tensor *t, int64_t off, int64_t stride, float *x,
                           int64_t n)
{
    for (int64_t c = 0; c < n; c++)
        x[c] += 0.0f; /* -0 to +0, as bw_put */
    if (t->dtype == SMATTN_F32 && stride == 1)
        memcpy((unsigned char *)t->data + off * 4, x, (size_t)n * sizeof *x); /* any address */
    else
        for (int64_t c = 0; c < n; c++)
            KN(bw_put)(t, off + c * stride, x[c]);
}

static void KN(bw_dkdv_item)(const bw_job *job, int64_t item, int worker)
{
    const smattn_problem *p = job->p;
    const int64_t Hkv = p->Hkv, Dp = job->Dp, Dvp = job->Dvp;
    const int64_t g = item % Hkv, kb = item / Hkv % job->nkb, b = item / Hkv / job->nkb;
    const int64_t k0 = kb * BW_BK, nk = p->T - k0 < BW_BK ? p->T - k0 : BW_BK;
    float *ws = job->scratch + (int64_t)worker * job->scratch_len;
    float *P = ws, *dS = P + BW_BQ * BW_BK, *Tt = dS + BW_BQ * BW_BK;
    float *dK = Tt + 3 * BW_BQ * BW_BK, *dV = dK + BW_BK * Dp;
    const smattn_grad_outputs *o = job->out;
    if (job->nan_group[b * Hkv + g]) { /* SPEC 10.2: a `nan` empty row */
        for (int64_t c = 0; c < nk; c++) {
            for (int64_t d = 0; d < p->D; d++)
                KN(bw_put)(&o->dk, smattn__off4(o->dk.stride, b, k0 + c, g, d), NAN);
            for (int64_t d = 0; d < p->Dv; d++)
                KN(bw_put)(&o->dv, smattn__off4(o->dv.stride, b, k0 + c, g, d), NAN);
        }
        return;
    }
    memset(dK, 0, (size_t)(BW_BK * Dp) * sizeof *dK);
    memset(dV, 0, (size_t)(BW_BK * Dvp) * sizeof *dV);
    bw_span pr[BW_BQ], sr[BW_BQ];
    for (int64_t hh = 0; hh < job->G; hh++) {
        const int64_t h = g * job->G + hh;
        for (int64_t qb = 0; qb < job->nqb; qb++) {
            if (!KN(bw_spans)(job, b, h, qb, kb, pr, sr))
                continue;
            const int64_t i0 = qb * BW_BQ, nr = p->S - i0 < BW_BQ ? p->S - i0 : BW_BQ;
            /* dS straight into its place in the store, when there is one */
            float *dSb = job->ds ? job->ds + (((b * p->Hq + h) * job->nqb + qb) * job->nkb + kb) *
                                                 BW_BQ * BW_BK
                                 : dS;
            KN(bw_block)(job, b, h, qb, kb, sr, P, dSb, Tt, NULL);
            const float *Q = job->q + ((b * p->Hq + h) * p->S + i0) * Dp;
            const float *dO = job->dO + ((b * p->Hq + h) * p->S + i0) * Dvp;
            KN(bw_mm_keys)(dV, Dvp, P, dO, Dvp, nk, Dvp / VLEN, nr, pr);
            KN(bw_mm_keys)(dK, Dp, dSb, Q, Dp, nk, Dp / VLEN, nr, sr);
        }
    }
    for (int64_t c = 0; c < nk; c++) {
        float *kr = dK + c * Dp;
        for (int64_t d = 0; d < p->D; d++)
            kr[d] = fmaf(kr[d], job->scale_hi, kr[d] * job->scale_lo);
        KN(bw_put_row)(&o->dk, smattn__off4(o->dk.stride, b, k0 + c, g, 0), o->dk.stride[3],
                       kr, p->D);
        KN(bw_put_row)(&o->dv, smattn__off4(o->dv.stride, b, k0 + c, g, 0), o->dv.stride[3],
                       dV + c * Dvp, p->Dv);
    }
}

static void KN(bw_dq_item)(const bw_job *job, int64_t item, int worker)
{
    const smattn_problem *p = job->p;
    const int64_t Hq = p->Hq, Dp = job->Dp;
    /* the query blocks last to first: under a causal mask the last see the most key
     * blocks, and the pool hands items out in order (the longest first balances the
     * threads; the bits do not depend on it) */
    const int64_t h = item % Hq, qb = job->nqb - 1 - item / Hq % job->nqb,
                  b = item / Hq / job->nqb;
    const int64_t g = h / job->G;
    const int64_t i0 = qb * BW_BQ, nr = p->S - i0 < BW_BQ ? p->S - i0 : BW_BQ;
    float *ws = job->scratch + (int64_t)worker * job->scratch_len;
    float *P = ws, *dS = P + BW_BQ * BW_BK, *Tt = dS + BW_BQ * BW_BK;
    float *dQ = Tt + 3 * BW_BQ * BW_BK + BW_BK * Dp + BW_BK * job->Dvp;
    memset(dQ, 0, (size_t)(BW_BQ * Dp) * sizeof *dQ);
    const int64_t Tp = job->nkb * BW_BK;
    /* the dK/dV pass stored dS for its live blocks, except in a group it left to NaN */
    const int stored = job->ds && !job->nan_group[b * p->Hkv + g];
    bw_span pr[BW_BQ], sr[BW_BQ];
    for (int64_t kb = 0; kb < job->nkb; kb++) {
        if (!KN(bw_spans)(job, b, h, qb, kb, pr, sr))
            continue;
        const int64_t k0 = kb * BW_BK;
        const float *dSb = dS;
        if (stored)
            dSb = job->ds + (((b * Hq + h) * job->nqb + qb) * job->nkb + kb) * BW_BQ * BW_BK;
        else
            KN(bw_block)(job, b, h, qb, kb, sr, P, dS, Tt, NULL);
        const float *K = job->k + ((b * p->Hkv + g) * Tp + k0) * Dp;
        KN(bw_mm_rows)(dQ, Dp, dSb, K, Dp, nr, Dp / VLEN, sr);
    }
    const smattn_grad_outputs *o = job->out;
    for (int64_t r = 0; r < nr; r++) {
        const int64_t row = (b * Hq + h) * p->S + i0 + r;
        const int nanrow = job->cls[row] == BW_ROW_NAN;
        float *qr = dQ + r * Dp;
        for (int64_t d = 0; d < p->D; d++)
            qr[d] = nanrow ? NAN : fmaf(qr[d], job->scale_hi, qr[d] * job->scale_lo);
        KN(bw_put_row)(&o->dq, smattn__off4(o->dq.stride, b, i0 + r, h, 0), o->dq.stride[3], qr,
                       p->D);
    }
}

/* dBias (SPEC 10.1, 10.2): one item per block of the output's own extents, [nb][nh][nq][nk]
 * with a dimension the output sums over (stride 0) counted once (job->dbx). The item takes
 * SPEC 10.1's dS of every (b, h, query block, key block) it sums, in that order (the kept
 * store when it holds dS itself: no softcap; else computed again, the same bits), adds
 * them block by block into acc (each element one chain of additions in that order), then
 * sums acc over rows (queries summed) and over keys (keys summed), in ascending order,
 * and writes each element rounded once (+0 for an exact zero). A `nan` empty row is NaN at
 * every key below T; rows without a term (empty, padding, the sink alone, no storage) and
 * keys a row does not see are +0. The same bits on every ISA and thread count. */
static void KN(bw_db_item)(const bw_job *job, int64_t item, int worker)
{
    const smattn_problem *p = job->p;
    const smattn_out_tensor *o = &job->out->dbias;
    const int64_t *x = job->dbx, Hq = p->Hq;
    const int64_t kb1 = item % x[3], qb1 = item / x[3] % x[2], h1 = item / x[3] / x[2] % x[1],
                  b1 = item / x[3] / x[2] / x[1];
    const int sb = o->stride[0] == 0, sh = o->stride[1] == 0, si = o->stride[2] == 0,
              sj = o->stride[3] == 0;
    float *ws = job->scratch + (int64_t)worker * job->scratch_len;
    float *P = ws, *dS = P + BW_BQ * BW_BK, *Tt = dS + BW_BQ * BW_BK;
    float *Gs = Tt + 3 * BW_BQ * BW_BK + BW_BK * job->Dp + BW_BK * job->Dvp + BW_BQ * job->Dp;
    float *acc = Gs + BW_BQ * BW_BK;
    memset(acc, 0, (size_t)(BW_BQ * BW_BK) * sizeof *acc);
    bw_span pr[BW_BQ], sr[BW_BQ];
    for (int64_t b = sb ? 0 : b1; b < (sb ? p->B : b1 + 1); b++)
        for (int64_t h = sh ? 0 : h1; h < (sh ? Hq : h1 + 1); h++)
            for (int64_t qb = si ? 0 : qb1; qb < (si ? job->nqb : qb1 + 1); qb++)
                for (int64_t kb = sj ? 0 : kb1; kb < (sj ? job->nkb : kb1 + 1); kb++) {
                    const int64_t k0 = kb * BW_BK, nk = p->T - k0 < BW_BK ? p->T - k0 : BW_BK;
                    const int64_t i0 = qb * BW_BQ, nr = p->S - i0 < BW_BQ ? p->S - i0 : BW_BQ;
                    const float *g = NULL;
                    if (KN(bw_spans)(job, b, h, qb, kb, pr, sr)) {
                        if (job->ds && !(job->cap > 0) && !job->nan_group[b * p->Hkv + h / job->G])
                            g = job->ds +
                                (((b * Hq + h) * job->nqb + qb) * job->nkb + kb) * BW_BQ * BW_BK;
                        else {
                            KN(bw_block)(job, b, h, qb, kb, sr, P, dS, Tt, Gs);
                            g = Gs;
                        }
                    }
                    for (int64_t r = 0; r < nr; r++) {
                        float *ar = acc + r * BW_BK;
                        if (job->cls[(b * Hq + h) * p->S + i0 + r] == BW_ROW_NAN)
                            for (int64_t c = 0; c < nk; c++)
                                ar[c] += NAN;
                        else if (g)
                            for (int64_t c = 0; c < nk; c++)
                                ar[c] += g[r * BW_BK + c];
                    }
                }
    const int64_t i0 = qb1 * BW_BQ, k0 = kb1 * BW_BK;
    const int64_t nr = si ? 1 : p->S - i0 < BW_BQ ? p->S - i0 : BW_BQ;
    const int64_t nkeys = sj ? 1 : p->T - k0 < BW_BK ? p->T - k0 : BW_BK;
    if (si) /* the rows' sums into row 0, rows ascending */
        for (int64_t r = 1; r < BW_BQ; r++)
            for (int64_t c = 0; c < BW_BK; c++)
                acc[c] += acc[r * BW_BK + c];
    for (int64_t r = 0; r < nr; r++) {
        float *ar = acc + r * BW_BK;
        if (sj) { /* the keys' sums into column 0, keys ascending */
            for (int64_t c = 1; c < BW_BK; c++)
                ar[0] += ar[c];
        }
        for (int64_t c = 0; c < nkeys; c++)
            KN(bw_put)(o, smattn__off4(o->stride, b1, h1, i0 + r, k0 + c), ar[c]);
    }
}

const bw_isa KN(smattn__bw_isa) = {
    .name = ISA_NAME,
    .dkdv_item = KN(bw_dkdv_item),
    .dq_item = KN(bw_dq_item),
    .db_item = KN(bw_db_item),
};
#undef BW_RB
#undef BW_VB
