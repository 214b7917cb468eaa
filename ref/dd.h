/* SPDX-License-Identifier: MIT */
/* dd.h: double-double primitives for the oracle's fast phase (SPEC 5.2).
 *
 * Every function states its error. u = 2^-53. All operands are assumed far from overflow
 * and, for two_prod, products are assumed >= 2^-968 in magnitude or exactly zero, so the
 * error-free transformations are exact; the fast phase checks its inputs' exponent range
 * before it uses them (ref/fast.c). The file must be compiled with -ffp-contract=off. */
#ifndef SMATTN_REF_DD_H
#define SMATTN_REF_DD_H

#include <math.h>

typedef struct dd {
    double hi, lo;
} dd;

/* s + e == a + b exactly (Knuth). */
static inline dd dd_two_sum(double a, double b)
{
    double s = a + b;
    double bb = s - a;
    double e = (a - (s - bb)) + (b - bb);
    return (dd){s, e};
}

/* s + e == a + b exactly, given |a| >= |b| or a == 0 (Dekker). */
static inline dd dd_fast_two_sum(double a, double b)
{
    double s = a + b;
    return (dd){s, b - (s - a)};
}

/* p + e == a * b exactly (fma). */
static inline dd dd_two_prod(double a, double b)
{
    double p = a * b;
    return (dd){p, fma(a, b, -p)};
}

/* A double-double times a double: |result - x*c| <= 4u^2 |x*c| (+ underflow). */
static inline dd dd_mul_d(dd x, double c)
{
    dd p = dd_two_prod(x.hi, c);
    double t = p.lo + x.lo * c;
    return dd_fast_two_sum(p.hi, t);
}

/* Sum of two double-doubles (the accurate "sloppy-free" version):
 * |result - (a+b)| <= 4u^2 |a+b| when a and b have the same sign; with cancellation the
 * error is <= 4u^2 (|a|+|b|). */
static inline dd dd_add(dd a, dd b)
{
    dd s = dd_two_sum(a.hi, b.hi);
    dd t = dd_two_sum(a.lo, b.lo);
    s.lo += t.hi;
    s = dd_fast_two_sum(s.hi, s.lo);
    s.lo += t.lo;
    return dd_fast_two_sum(s.hi, s.lo);
}

/* a / b for b > 0: |result - a/b| <= 8u^2 |a/b|. */
static inline dd dd_div(dd a, dd b)
{
    double q1 = a.hi / b.hi;
    dd r = dd_add(a, dd_mul_d((dd){-b.hi, -b.lo}, q1)); /* a - q1 b */
    double q2 = r.hi / b.hi;
    r = dd_add(r, dd_mul_d((dd){-b.hi, -b.lo}, q2));
    double q3 = r.hi / b.hi;
    dd q = dd_fast_two_sum(q1, q2);
    return dd_add(q, (dd){q3, 0.0});
}

#endif
