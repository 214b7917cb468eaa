/* SPDX-License-Identifier: MIT */
/* mask.h: the integer logic of SPEC 2-3 (visibility, GQA heads, offsets, tiling) as pure
 * functions whose ACSL contracts restate the spec; proved by `make prove` (proof/README.md). */
#ifndef SMATTN_CORE_MASK_H
#define SMATTN_CORE_MASK_H

#include <stdint.h>

#include "smattn.h"

/* Largest accepted dimension (SPEC 2.1): keeps every index difference far from overflow. */
#define SMATTN_MAX_DIM ((int64_t)1 << 32)

/* ---- the spec's definitions, in ACSL ------------------------------------------------------
 * MAXD is SMATTN_MAX_DIM; the C macro is not visible to the logic. */
/*@ logic integer MAXD = 4294967296;

    // SPEC 3.1: the diagonal of row i (lower-right also when causal is none).
    logic integer spec_diag(integer causal, integer i, integer Sb, integer Tb) =
      causal == SMATTN_CAUSAL_UPPER_LEFT ? i : i + Tb - Sb;

    // SPEC 3.1-3.3: key j is allowed to row i by lengths, causality and the window.
    predicate spec_allows(integer causal, integer wl, integer wr, integer Sb, integer Tb,
                          integer i, integer j) =
      0 <= i < Sb && 0 <= j < Tb &&
      (causal != SMATTN_CAUSAL_NONE ==> j <= spec_diag(causal, i, Sb, Tb)) &&
      (wl >= 0 ==> j >= spec_diag(causal, i, Sb, Tb) - wl) &&
      (wr >= 0 ==> j <= spec_diag(causal, i, Sb, Tb) + wr);

    // SPEC 2.1: the largest offset of a strided tensor of rank <= 4 with extents n_r >= 1
    // and strides s_r >= 0 is the sum of (n_r - 1) * s_r.
    logic integer span_term(integer n, integer s) = (n - 1) * s;
    logic integer span4{L}(int64_t *n, int64_t *s, integer rank) =
      (rank > 0 ? span_term(n[0], s[0]) : 0) + (rank > 1 ? span_term(n[1], s[1]) : 0) +
      (rank > 2 ? span_term(n[2], s[2]) : 0) + (rank > 3 ? span_term(n[3], s[3]) : 0);

    // SPEC 2.1: element (i0,i1,i2,i3) is at i0*s0 + i1*s1 + i2*s2 + i3*s3.
    logic integer spec_off4{L}(int64_t *s, integer i0, integer i1, integer i2, integer i3) =
      i0 * s[0] + i1 * s[1] + i2 * s[2] + i3 * s[3];

*/

/* ---- visibility (SPEC 3.1-3.3) ------------------------------------------------------------ */

/* Keys [*lo, *hi) that row i may see under lengths Sb, Tb, causality and window [wl, wr]
 * (SPEC 3.1-3.3): the interval is exactly the set spec_allows describes. Empty, with
 * *lo == *hi, for a padded query (i >= Sb) and for rows that see nothing (S_b > T_b). */
/*@ requires 0 <= Sb <= MAXD && 0 <= Tb <= MAXD && 0 <= i <= MAXD;
    requires causal == SMATTN_CAUSAL_NONE || causal == SMATTN_CAUSAL_LOWER_RIGHT ||
             causal == SMATTN_CAUSAL_UPPER_LEFT;
    requires wl >= -1 && wr >= -1;
    requires \valid(lo) && \valid(hi) && \separated(lo, hi);
    assigns *lo, *hi;
    ensures bounds: 0 <= *lo <= *hi <= Tb;
    ensures spec: \forall integer j; spec_allows(causal, wl, wr, Sb, Tb, i, j) <==> *lo <= j < *hi;
    behavior padding_row:
      assumes i >= Sb;
      ensures *lo == 0 && *hi == 0;
    behavior causal_none:
      assumes i < Sb && causal == SMATTN_CAUSAL_NONE;
      ensures \forall integer j; *lo <= j < *hi <==>
        0 <= j < Tb && (wl >= 0 ==> j >= i + Tb - Sb - wl) && (wr >= 0 ==> j <= i + Tb - Sb + wr);
    behavior causal_lower_right:
      assumes i < Sb && causal == SMATTN_CAUSAL_LOWER_RIGHT;
      ensures \forall integer j; *lo <= j < *hi <==>
        0 <= j < Tb && j <= i + Tb - Sb &&
        (wl >= 0 ==> j >= i + Tb - Sb - wl) && (wr >= 0 ==> j <= i + Tb - Sb + wr);
    behavior causal_upper_left:
      assumes i < Sb && causal == SMATTN_CAUSAL_UPPER_LEFT;
      ensures \forall integer j; *lo <= j < *hi <==>
        0 <= j < Tb && j <= i && (wl >= 0 ==> j >= i - wl) && (wr >= 0 ==> j <= i + wr);
    complete behaviors;
    disjoint behaviors;
*/
void smattn__key_interval(int causal, int64_t wl, int64_t wr, int64_t Sb, int64_t Tb, int64_t i,
                          int64_t *lo, int64_t *hi);

/* ---- GQA head mapping (SPEC 2.2) ------------------------------------------------------------ */

/* KV head read by query head h: h / (Hq / Hkv). In range, and the query heads of KV head g
 * are exactly the contiguous block [g*G, (g+1)*G) with G = Hq / Hkv. */
/*@ requires 1 <= Hkv <= Hq <= MAXD && Hq % Hkv == 0 && 0 <= h < Hq;
    assigns \nothing;
    ensures spec: \result == h / (Hq / Hkv);
    ensures range: 0 <= \result < Hkv;
    ensures group: \result * (Hq / Hkv) <= h < \result * (Hq / Hkv) + Hq / Hkv;
*/
static inline int64_t smattn__head_group(int64_t Hq, int64_t Hkv, int64_t h)
{
    int64_t G = Hq / Hkv;
    /*@ assert Hq == Hkv * G; */
    return h / G;
}

/* ---- offsets (SPEC 2.1) ----------------------------------------------------------------------
 * proof/lemmas.c proves offset_within_span: an index inside the extents of a tensor with
 * strides >= 0 has an offset in [0, span4], so for a tensor the validation accepts
 * (smattn__max_offset >= 0) the precondition of smattn__off4 holds. */

/* The largest element offset of a tensor of rank <= 4 with extents n and strides s:
 * -2 if a stride is negative (SMATTN_ERR_STRIDE), -1 if the offset overflows int64
 * (SMATTN_ERR_OVERFLOW), else the offset, which then bounds every element's (see
 * offset_within_span and smattn__off4). */
/*@ requires 1 <= rank <= 4;
    requires \valid_read(n + (0 .. rank - 1)) && \valid_read(s + (0 .. rank - 1));
    requires \forall integer r; 0 <= r < rank ==> 1 <= n[r] <= MAXD;
    assigns \nothing;
    ensures \result >= -2;
    behavior negative_stride:
      assumes \exists integer r; 0 <= r < rank && s[r] < 0;
      ensures \result == -2;
    behavior strides_ok:
      assumes \forall integer r; 0 <= r < rank ==> s[r] >= 0;
      ensures \result == -1 <==> span4(n, s, rank) > INT64_MAX;
      ensures \result >= 0 ==> \result == span4(n, s, rank);
    complete behaviors;
    disjoint behaviors;
*/
int64_t smattn__max_offset(int rank, const int64_t *n, const int64_t *s);

/* Element offset of index (i0,i1,i2,i3) under strides s (SPEC 2.1). The precondition holds
 * for an index inside the extents of any tensor the validation accepts (offset_within_span). */
/*@ requires \valid_read(s + (0 .. 3));
    requires 0 <= i0 * s[0] && 0 <= i1 * s[1] && 0 <= i2 * s[2] && 0 <= i3 * s[3];
    requires spec_off4(s, i0, i1, i2, i3) <= INT64_MAX;
    assigns \nothing;
    ensures \result == spec_off4(s, i0, i1, i2, i3) && \result >= 0;
*/
static inline int64_t smattn__off4(const int64_t s[4], int64_t i0, int64_t i1, int64_t i2,
                                   int64_t i3)
{
    return i0 * s[0] + i1 * s[1] + i2 * s[2] + i3 * s[3];
}

/* ---- the kernel's tiling (opt/kernel_body.h, opt/opt.c) -------------------------------------
 * Static inline: the kernel calls them per row and per tile. WP proves the bodies here. */

/* Keys [*k0, *k1) of split-K chunk c: [c*chunk, (c+1)*chunk) clipped to T, or all of [0, T)
 * when there is one chunk. nchunks is 1 or ceil(T / chunk), which (T + chunk - 1) / chunk
 * is (ceil_div, proof/lemmas.c). */
/*@ requires 1 <= T <= MAXD && 1 <= chunk <= MAXD;
    requires nchunks == 1 || (nchunks - 1) * chunk < T <= nchunks * chunk; // ceil(T / chunk)
    requires 0 <= c < nchunks;
    requires \valid(k0) && \valid(k1) && \separated(k0, k1);
    assigns *k0, *k1;
    ensures 0 <= *k0 < *k1 <= T;
    ensures nchunks == 1 ==> *k0 == 0 && *k1 == T;
    ensures nchunks > 1 ==> *k0 == c * chunk && *k1 == (T - *k0 > chunk ? *k0 + chunk : T);
*/
static inline void smattn__chunk_keys(int64_t T, int64_t nchunks, int64_t chunk, int64_t c,
                                      int64_t *k0, int64_t *k1)
{
    if (nchunks <= 1) {
        *k0 = 0;
        *k1 = T;
        return;
    }
    /*@ assert c * chunk <= (nchunks - 1) * chunk; */
    *k0 = c * chunk;
    *k1 = T - *k0 > chunk ? *k0 + chunk : T;
}

/* Clip a row's keys [*lo, *hi) to a chunk [k0, k1); an empty result is [0, 0). */
/*@ requires 0 <= k0 <= k1 <= MAXD && 0 <= *lo && *hi <= MAXD;
    requires \valid(lo) && \valid(hi) && \separated(lo, hi);
    assigns *lo, *hi;
    ensures 0 <= *lo <= *hi;
    ensures *lo == *hi ==> *lo == 0;
    ensures \forall integer j; *lo <= j < *hi <==> \old(*lo) <= j < \old(*hi) && k0 <= j < k1;
*/
static inline void smattn__clip_keys(int64_t k0, int64_t k1, int64_t *lo, int64_t *hi)
{
    int64_t l = *lo > k0 ? *lo : k0, h = *hi < k1 ? *hi : k1;
    if (h <= l)
        l = h = 0;
    *lo = l;
    *hi = h;
}

/* Grow the hull [*kmin, *kmax) of an item's rows by a row's keys [lo, hi) (nothing if empty). */
/*@ requires \valid(kmin) && \valid(kmax) && \separated(kmin, kmax);
    assigns *kmin, *kmax;
    ensures *kmin <= \old(*kmin) && *kmax >= \old(*kmax);
    ensures lo < hi ==> *kmin <= lo && hi <= *kmax;
    ensures lo < hi ==> *kmin == \old(*kmin) || *kmin == lo;
    ensures lo < hi ==> *kmax == \old(*kmax) || *kmax == hi;
    ensures lo >= hi ==> *kmin == \old(*kmin) && *kmax == \old(*kmax);
*/
static inline void smattn__hull_add(int64_t lo, int64_t hi, int64_t *kmin, int64_t *kmax)
{
    if (hi <= lo)
        return;
    if (lo < *kmin)
        *kmin = lo;
    if (hi > *kmax)
        *kmax = hi;
}

/* First key tile of the hull [kmin, kmax) on the grid of bk keys (kmin itself when the hull
 * is empty, so that the tile loop does not run). */
/*@ requires 1 <= bk <= MAXD;
    requires kmax > kmin ==> 0 <= kmin;
    assigns \nothing;
    ensures kmax > kmin ==> \result % bk == 0 && \result <= kmin < \result + bk && \result >= 0;
    ensures kmax <= kmin ==> \result == kmin;
*/
static inline int64_t smattn__tile_first(int64_t kmin, int64_t kmax, int64_t bk)
{
    return kmax > kmin ? kmin / bk * bk : kmin;
}

/* Keys in the tile starting at kt: min(bk, kmax - kt). */
/*@ requires 1 <= bk <= MAXD && kt < kmax && kmax - kt <= INT64_MAX;
    assigns \nothing;
    ensures 1 <= \result <= bk && kt + \result <= kmax;
    ensures \result == bk || kt + \result == kmax;
*/
static inline int64_t smattn__tile_keys(int64_t kt, int64_t kmax, int64_t bk)
{
    return kmax - kt < bk ? kmax - kt : bk;
}

/* Nonzero when a row with keys [lo, hi) has no visible key in the tile [kt, kt + nk): the
 * kernel then skips the row for that tile. The converse: a nonempty row is skipped only
 * when the tile holds none of its keys. */
/*@ requires 0 <= kt && 1 <= nk && kt + nk <= INT64_MAX;
    assigns \nothing;
    ensures no_visible_pair:
      \result != 0 ==> \forall integer j; kt <= j < kt + nk ==> !(lo <= j < hi);
    ensures only_empty:
      lo < hi && \result == 0 ==> \exists integer j; kt <= j < kt + nk && lo <= j < hi;
*/
static inline int smattn__tile_skips(int64_t lo, int64_t hi, int64_t kt, int64_t nk)
{
    return hi <= kt || lo >= kt + nk;
}

/* The kernel's walks, counting how often they meet one element: the key tiles of an item
 * (for kt = tile_first; kt < kmax; kt += bk, nk = tile_keys), the split-K chunks, the query
 * tiles and the heads of the KV groups. Each returns 1 exactly for the elements of the
 * range it must cover: the walks cover it exactly once. */
/*@ requires 1 <= bk <= MAXD && 0 <= kmin && kmax <= MAXD;
    assigns \nothing;
    ensures kmin <= j < kmax ==> \result == 1;
    ensures j >= kmax ==> \result == 0;
    ensures \result == 0 || \result == 1;
*/
int smattn__tile_walk_hits(int64_t kmin, int64_t kmax, int64_t bk, int64_t j);

/*@ requires 1 <= T <= MAXD && 1 <= chunk <= MAXD;
    requires nchunks == 1 || (nchunks - 1) * chunk < T <= nchunks * chunk; // ceil(T / chunk)
    assigns \nothing;
    ensures 0 <= j < T ==> \result == 1;
    ensures j < 0 || j >= T ==> \result == 0;
*/
int smattn__chunk_walk_hits(int64_t T, int64_t nchunks, int64_t chunk, int64_t j);

/* Query tiles: rows qt*nq + k (k < nq) below S, for qt < ceil(S / nq). */
/*@ requires 1 <= S <= MAXD && 1 <= nq <= MAXD;
    assigns \nothing;
    ensures 0 <= i < S ==> \result == 1;
    ensures i < 0 || i >= S ==> \result == 0;
*/
int smattn__qtile_walk_hits(int64_t S, int64_t nq, int64_t i);

/* Heads: the query heads g*G + hh (hh < G) of KV heads g < Hkv meet each query head once. */
/*@ requires 1 <= Hkv <= Hq <= MAXD && Hq % Hkv == 0;
    assigns \nothing;
    ensures 0 <= h < Hq ==> \result == 1;
    ensures h < 0 || h >= Hq ==> \result == 0;
*/
int smattn__head_walk_hits(int64_t Hq, int64_t Hkv, int64_t h);

#endif
