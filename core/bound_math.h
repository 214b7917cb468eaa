/* SPDX-License-Identifier: MIT */
/* bound_math.h: the long-double helpers every error bound evaluates with (core/bound.c,
 * core/backward_bound.c, core/merge_bound.c): gamma_k(u), p (e^x - 1) in the log domain,
 * a format's range by its unit roundoff, and which dtypes are floats. */
#ifndef SMATTN_CORE_BOUND_MATH_H
#define SMATTN_CORE_BOUND_MATH_H

#include <float.h>
#include <math.h>

#include "smattn.h"

typedef long double ld;

/* gamma_k(u) = k u / (1 - k u), +inf when k u >= 1 (SPEC 1). */
static inline ld gam(ld k, ld u)
{
    if (k <= 0)
        return 0;
    ld ku = k * u;
    return ku < 1 ? ku / (1 - ku) : HUGE_VALL;
}

/* p (e^x - 1) for p = e^{lp} (SPEC 6.3, 6.6): in the log domain when x is large, so that a
 * far key's underflowing weight times a huge factor stays 0 instead of 0 * inf. */
static inline ld p_expm1(ld p, ld lp, ld x)
{
    if (!(x == x))
        return HUGE_VALL;
    if (x <= 1)
        return p * expm1l(x);
    if (isinf(x))
        return p > 0 ? HUGE_VALL : 0;
    return expl(lp + x);
}

/* Largest finite value of the format whose unit roundoff is u (SPEC 6.8). */
static inline ld range_of(ld u)
{
    if (u == 0x1p-11L)
        return 65504.0L;
    if (u <= 0x1p-53L)
        return (ld)DBL_MAX;
    return (ld)FLT_MAX;
}

static inline int is_float(smattn_dtype t)
{
    return t == SMATTN_F64 || t == SMATTN_F32 || t == SMATTN_F16 || t == SMATTN_BF16;
}

#endif
