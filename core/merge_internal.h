/* SPDX-License-Identifier: MIT */
/* merge_internal.h: offsets and conventions shared by the merge's oracle, kernel and bound
 * (SPEC 9); not part of the public API. */
#ifndef SMATTN_CORE_MERGE_INTERNAL_H
#define SMATTN_CORE_MERGE_INTERNAL_H

#include <math.h>
#include <stdint.h>

#include "core/internal.h"

/* Offsets of a validated descriptor (every one fits in int64: smattn_merge_validate). */
static inline int64_t smattn__merge_o_off(const smattn_merge_inputs *in, int64_t n, int64_t b,
                                          int64_t i, int64_t h, int64_t c)
{
    return n * in->o_part_stride + smattn__off4(in->o_parts.stride, b, i, h, c);
}
static inline int64_t smattn__merge_lse_off(const smattn_merge_inputs *in, int64_t n, int64_t b,
                                            int64_t h, int64_t i)
{
    const int64_t *s = in->lse_parts.stride;
    return n * in->lse_part_stride + b * s[0] + h * s[1] + i * s[2];
}
static inline int64_t smattn__merge_out_lse_off(const smattn_outputs *out, int64_t b, int64_t h,
                                                int64_t i)
{
    const int64_t *s = out->lse.stride;
    return b * s[0] + h * s[1] + i * s[2];
}

/* What a partial's LSE says (SPEC 9.2): a finite state, an empty one (never read), or a
 * value that makes the whole row NaN (NaN; +inf unless +inf is the empty convention). */
enum { MERGE_FINITE = 0, MERGE_EMPTY = 1, MERGE_POISON = 2 };
int smattn__merge_lse_class(const smattn_merge_problem *p, double t);

#endif
