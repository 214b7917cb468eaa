/* SPDX-License-Identifier: MIT */
/* layout.h: the one locator of ragged and paged layouts (SPEC 2.7): where a logical key
 * (b, t) and a logical query row (b, i) of the dense padded twin live in the tensors. The
 * oracle, the bound, the kernel and smattn_visible all go through it; nothing else knows a
 * layout. Static inline: the kernel calls it per key tile and, gathering, per key. */
#ifndef SMATTN_CORE_LAYOUT_H
#define SMATTN_CORE_LAYOUT_H

#include <stdint.h>

#include "smattn.h"

/* K/V index (dim0, dim1) of key t of sequence b, for a key the problem may read
 * (t < T_b after validation): dense (b, t); packed (0, cu_seqlens_k[b] + t); paged
 * (block_table[b][t / page_size], t % page_size). */
static inline void smattn__key_at(const smattn_problem *p, int64_t b, int64_t t, int64_t *d0,
                                  int64_t *d1)
{
    const smattn_layout *L = p->layout;
    if (!L || (!L->cu_seqlens_k && !L->block_table)) {
        *d0 = b;
        *d1 = t;
    } else if (L->cu_seqlens_k) {
        *d0 = 0;
        *d1 = L->cu_seqlens_k[b] + t;
    } else {
        *d0 = L->block_table[b * L->bt_stride + t / L->page_size];
        *d1 = t % L->page_size;
    }
}

/* Q/O index (dim0, dim1) of query row i of sequence b, for a stored row
 * (smattn__row_stored): dense (b, i); packed (0, cu_seqlens_q[b] + i). LSE's (dim0, dim2)
 * are the same pair. */
static inline void smattn__row_at(const smattn_problem *p, int64_t b, int64_t i, int64_t *d0,
                                  int64_t *d1)
{
    const smattn_layout *L = p->layout;
    if (!L || !L->cu_seqlens_q) {
        *d0 = b;
        *d1 = i;
    } else {
        *d0 = 0;
        *d1 = L->cu_seqlens_q[b] + i;
    }
}

/* Nonzero when query row i < S of sequence b has storage in Q, O and LSE: always when
 * dense; i < S_b when packed (the twin's padding rows [S_b, S) have none: nothing is
 * written for them but their row of P). */
static inline int smattn__row_stored(const smattn_problem *p, int64_t b, int64_t i)
{
    const smattn_layout *L = p->layout;
    return !L || !L->cu_seqlens_q || i < L->cu_seqlens_q[b + 1] - L->cu_seqlens_q[b];
}

/* Element offsets through the locator: K/V [.., key, g, d], Q/O [.., row, h, d], LSE. */
static inline int64_t smattn__key_off(const smattn_problem *p, const int64_t s[4], int64_t b,
                                      int64_t t, int64_t g, int64_t d)
{
    int64_t d0, d1;
    smattn__key_at(p, b, t, &d0, &d1);
    return d0 * s[0] + d1 * s[1] + g * s[2] + d * s[3];
}

static inline int64_t smattn__row_off(const smattn_problem *p, const int64_t s[4], int64_t b,
                                      int64_t i, int64_t h, int64_t d)
{
    int64_t d0, d1;
    smattn__row_at(p, b, i, &d0, &d1);
    return d0 * s[0] + d1 * s[1] + h * s[2] + d * s[3];
}

static inline int64_t smattn__lse_off(const smattn_problem *p, const int64_t s[4], int64_t b,
                                      int64_t h, int64_t i)
{
    int64_t d0, d1;
    smattn__row_at(p, b, i, &d0, &d1);
    return d0 * s[0] + h * s[1] + d1 * s[2];
}

/* How many of the keys [t, t + n) of sequence b follow key t at K/V's key stride (one run
 * in memory, as in a dense tensor): n unless a page ends first. */
static inline int64_t smattn__key_run(const smattn_problem *p, int64_t t, int64_t n)
{
    const smattn_layout *L = p->layout;
    if (!L || !L->block_table)
        return n;
    int64_t left = L->page_size - t % L->page_size;
    return left < n ? left : n;
}

/* The keys a run holds at most: a page, or all of a sequence (INT64_MAX). */
static inline int64_t smattn__run_max(const smattn_problem *p)
{
    const smattn_layout *L = p->layout;
    return L && L->block_table ? L->page_size : INT64_MAX;
}

#endif
