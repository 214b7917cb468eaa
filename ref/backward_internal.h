/* SPDX-License-Identifier: MIT */
/* backward_internal.h: the exact backward's expansions (SPEC 9.3): sparse exponential
 * polynomials sum_k c_k e^{tau_k} with exact dyadic exponents and coefficients, and the
 * exact decision of the rounding of a ratio of two of them. */
#ifndef SMATTN_REF_BACKWARD_INTERNAL_H
#define SMATTN_REF_BACKWARD_INTERNAL_H

#include <stdint.h>

#include <mpfr.h>

#include "core/internal.h"

/* One term c e^tau; both exact (MPFR numbers whose precision holds every bit). */
typedef struct bw_term {
    mpfr_t tau, c;
} bw_term;

/* sum_k t[k].c e^{t[k].tau}. Normalised: tau strictly decreasing, no zero coefficient. */
typedef struct bw_poly {
    bw_term *t;
    int64_t n, cap;
} bw_poly;

void smattn__bwp_init(bw_poly *p);
void smattn__bwp_clear(bw_poly *p);
void smattn__bwp_reset(bw_poly *p);
/* Append c e^tau exactly. 0, or -1 on allocation failure. */
int smattn__bwp_push(bw_poly *p, mpfr_srcptr tau, mpfr_srcptr c);
/* Sort by tau (decreasing), merge equal tau exactly, drop zero coefficients. 0 or -1. */
int smattn__bwp_normalize(bw_poly *p);
/* r = r + s * a (s exact; a normalised or not; r is left unnormalised). 0 or -1. */
int smattn__bwp_add_scaled(bw_poly *r, const bw_poly *a, mpfr_srcptr s);
/* r = a * b, normalised, exactly; -1 on allocation failure, -2 when the product would
 * hold more than `cap` terms before merging (r is then empty). r must differ from a, b. */
int smattn__bwp_mul(bw_poly *r, const bw_poly *a, const bw_poly *b, int64_t cap);
/* Exact equality of two normalised polynomials. */
int smattn__bwp_equal(const bw_poly *a, const bw_poly *b);

/* The correct rounding to t of X = num / den, exactly: den must be normalised with only
 * positive coefficients (so den > 0), num normalised. An exact zero gives +0; a rational X
 * (num = B den, SPEC 9.3) is rounded exactly; otherwise X is irrational (Lindemann-
 * Weierstrass), never a rounding boundary, and an interval Ziv loop from start_prec
 * decides it, with the sign of num - B den deciding a boundary B the interval cannot
 * leave. Returns 1 with *bits set, 0 when max_prec was reached, -1 on allocation failure.
 * *prec_used receives the highest precision used. *rational is set when the value was
 * rounded as a rational. */
int smattn__bwp_decide(const bw_poly *num, const bw_poly *den, smattn_dtype t, long start_prec,
                       long max_prec, uint64_t *bits, long *prec_used, int *rational);

/* Exact helpers (the precision of rop is set to hold the exact result). 0 on success. */
int smattn__bw_exact_add(mpfr_ptr rop, mpfr_srcptr a, mpfr_srcptr b);
int smattn__bw_exact_mul(mpfr_ptr rop, mpfr_srcptr a, mpfr_srcptr b);
/* rop = sum of x[0..n) exactly (n >= 0; zero terms allowed). */
int smattn__bw_exact_sum(mpfr_ptr rop, mpfr_ptr *x, long n);

#endif
