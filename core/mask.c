/* SPDX-License-Identifier: MIT */
/* mask.c: visibility intervals, offsets and the kernel's walks (SPEC 2-3); contracts and the
 * static inline steps in core/mask.h, proved with Frama-C WP by `make prove`. Integers only. */
#include "core/mask.h"

void smattn__key_interval(int causal, int64_t wl, int64_t wr, int64_t Sb, int64_t Tb, int64_t i,
                          int64_t *lo, int64_t *hi)
{
    if (i >= Sb) { /* a padded query sees nothing (SPEC 3.2) */
        *lo = 0;
        *hi = 0;
        return;
    }
    /* d = i + offset is the query's own position (SPEC 3.1); |d| <= 2^33, so d +- 1 and the
     * differences below cannot overflow. A window without causality is lower-right. */
    int64_t d = causal == SMATTN_CAUSAL_UPPER_LEFT ? i : i + Tb - Sb;
    int64_t l = 0, h = Tb;
    if (causal != SMATTN_CAUSAL_NONE && d + 1 < h) /* j <= d */
        h = d + 1 > 0 ? d + 1 : 0;
    /* j <= d + wr; tested as wr < h - d - 1 so that d + wr + 1 is formed only when small */
    if (wr >= 0 && wr < h - d - 1)
        h = d + wr + 1 > 0 ? d + wr + 1 : 0;
    if (wl >= 0 && wl < d - l) /* j >= d - wl */
        l = d - wl;
    if (l > h)
        l = h;
    *lo = l;
    *hi = h;
}

int64_t smattn__max_offset(int rank, const int64_t *n, const int64_t *s)
{
    /*@ loop invariant 0 <= r <= rank;
        loop invariant \forall integer k; 0 <= k < r ==> s[k] >= 0;
        loop assigns r;
        loop variant rank - r; */
    for (int r = 0; r < rank; r++)
        if (s[r] < 0)
            return -2;
    int64_t acc = 0;
    /*@ loop invariant 0 <= r <= rank;
        loop invariant 0 <= acc && acc == span4(n, s, r);
        loop assigns r, acc;
        loop variant rank - r; */
    for (int r = 0; r < rank; r++) {
        /*@ assert span4(n, s, r + 1) == span4(n, s, r) + span_term(n[r], s[r]); */
        if (n[r] == 1)
            continue;
        /* acc + m*s > INT64_MAX  <=>  s > (INT64_MAX - acc) / m (floor division) */
        const int64_t m = n[r] - 1, q = (INT64_MAX - acc) / m;
        /*@ assert m * q <= INT64_MAX - acc < m * q + m; */
        if (s[r] > q) {
            /*@ assert s[r] >= q + 1; */
            /*@ assert m * s[r] >= m * q + m; */
            /*@ assert span4(n, s, rank) >= span4(n, s, r + 1); */
            return -1;
        }
        /*@ assert m * s[r] <= m * q; */
        acc += m * s[r];
    }
    return acc;
}

int smattn__tile_walk_hits(int64_t kmin, int64_t kmax, int64_t bk, int64_t j)
{
    int hits = 0;
    const int64_t first = smattn__tile_first(kmin, kmax, bk);
    /*@ loop invariant first <= kt;
        loop invariant hits == (first <= j < kt && j < kmax ? 1 : 0);
        loop assigns kt, hits;
        loop variant kmax - kt; */
    for (int64_t kt = first; kt < kmax; kt += bk) {
        int64_t nk = smattn__tile_keys(kt, kmax, bk);
        if (kt <= j && j < kt + nk)
            hits++;
    }
    return hits;
}

int smattn__chunk_walk_hits(int64_t T, int64_t nchunks, int64_t chunk, int64_t j)
{
    int hits = 0;
    /*@ loop invariant 0 <= c <= nchunks;
        loop invariant nchunks > 1 ==> hits == (0 <= j < c * chunk && j < T ? 1 : 0);
        loop invariant nchunks == 1 ==> hits == (c == 1 && 0 <= j < T ? 1 : 0);
        loop assigns c, hits;
        loop variant nchunks - c; */
    for (int64_t c = 0; c < nchunks; c++) {
        int64_t k0, k1;
        smattn__chunk_keys(T, nchunks, chunk, c, &k0, &k1);
        if (k0 <= j && j < k1)
            hits++;
    }
    return hits;
}

int smattn__qtile_walk_hits(int64_t S, int64_t nq, int64_t i)
{
    int hits = 0;
    const int64_t qtiles = (S + nq - 1) / nq;
    /*@ assert qtiles * nq >= S; */
    /*@ loop invariant 0 <= qt <= qtiles;
        loop invariant hits == (0 <= i < qt * nq && i < S ? 1 : 0);
        loop assigns qt, hits;
        loop variant qtiles - qt; */
    for (int64_t qt = 0; qt < qtiles; qt++) {
        /*@ loop invariant 0 <= k <= nq;
            loop invariant hits == (0 <= i < qt * nq + k && i < S ? 1 : 0);
            loop assigns k, hits;
            loop variant nq - k; */
        for (int64_t k = 0; k < nq; k++)
            if (qt * nq + k < S && qt * nq + k == i)
                hits++;
    }
    return hits;
}

int smattn__head_walk_hits(int64_t Hq, int64_t Hkv, int64_t h)
{
    int hits = 0;
    const int64_t G = Hq / Hkv;
    /*@ assert Hq == Hkv * G; */
    /*@ loop invariant 0 <= g <= Hkv;
        loop invariant hits == (0 <= h < g * G ? 1 : 0);
        loop assigns g, hits;
        loop variant Hkv - g; */
    for (int64_t g = 0; g < Hkv; g++) {
        /*@ loop invariant 0 <= hh <= G;
            loop invariant hits == (0 <= h < g * G + hh ? 1 : 0);
            loop assigns hh, hits;
            loop variant G - hh; */
        for (int64_t hh = 0; hh < G; hh++)
            if (g * G + hh == h)
                hits++;
    }
    return hits;
}
