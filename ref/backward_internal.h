/* SPDX-License-Identifier: MIT */
/* backward_internal.h: the exact backward's expansions (SPEC 10.3): sparse exponential
 * polynomials sum_k c_k e^{tau_k} with exact dyadic exponents and coefficients, and the
 * exact decision of the rounding of a ratio of two of them. */
#ifndef SMATTN_REF_BACKWARD_INTERNAL_H
#define SMATTN_REF_BACKWARD_INTERNAL_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>

#include <mpfr.h>

#include "core/internal.h"
#include "core/layout.h"
#include "ref/ref_internal.h"

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
 * (num = B den, SPEC 10.3) is rounded exactly; otherwise X is irrational (Lindemann-
 * Weierstrass), never a rounding boundary, and an interval Ziv loop from start_prec
 * decides it, with the sign of num - B den deciding a boundary B the interval cannot
 * leave. Returns 1 with *bits set, 0 when max_prec was reached, -1 on allocation failure.
 * *prec_used receives the highest precision used. *rational is set when the value was
 * rounded as a rational. */
int smattn__bwp_decide(const bw_poly *num, const bw_poly *den, smattn_dtype t, long start_prec,
                       long max_prec, uint64_t *bits, long *prec_used, int *rational);

/* The correct rounding to t of sum_k A[k] / D[k] (each D[k] normalised with positive
 * coefficients, each A[k] normalised) without their common denominator: each ratio enclosed
 * on its own, a boundary B inside the enclosure passed only once the sum is proven to differ
 * from it (an exact test modulo a prime, bw_poly.c). Returns 1 with *bits set, 0 when the
 * sum may equal B or max_prec was reached (the caller then puts the terms over one
 * denominator), -1 on allocation failure. */
int smattn__bwp_decide_sum(const bw_poly *A, const bw_poly *D, int64_t n, smattn_dtype t,
                           long start_prec, long max_prec, uint64_t *bits, long *prec_used);

/* Loads through the layout's locator (core/layout.h, SPEC 2.7): element d of query row
 * (b, i) and head h of Q or dO (a stored row), of key (b, t) and KV head g of K or V (t < T_b),
 * and dLSE (b, h, i). */
static inline double smattn__bw_ld_row(const smattn_problem *p, const smattn_tensor *t,
                                       int64_t b, int64_t i, int64_t h, int64_t d)
{
    return smattn_load(t->data, t->dtype, smattn__row_off(p, t->stride, b, i, h, d));
}

static inline double smattn__bw_ld_key(const smattn_problem *p, const smattn_tensor *t,
                                       int64_t b, int64_t j, int64_t g, int64_t d)
{
    return smattn_load(t->data, t->dtype, smattn__key_off(p, t->stride, b, j, g, d));
}

static inline double smattn__bw_ld_lse(const smattn_problem *p, const smattn_tensor *t,
                                       int64_t b, int64_t h, int64_t i)
{
    return smattn_load(t->data, t->dtype, smattn__lse_off(p, t->stride, b, h, i));
}

/* The bias term of a visible key's score (SPEC 2.8): the bias as is, or times the slope in
 * ALiBi's mask mode (exact: 24 + 24 bits); 0 without a bias. The ALiBi term of the other
 * modes is smattn__alibi_term, added after it. */
static inline double smattn__bw_bias(const smattn_problem *p, const smattn_inputs *in,
                                     int64_t b, int64_t h, int64_t i, int64_t j)
{
    if (!in->bias.data)
        return 0.0;
    double x = smattn_load(in->bias.data, in->bias.dtype,
                           smattn__off4(in->bias.stride, b, h, i, j));
    if (p->alibi_mode == SMATTN_ALIBI_MASK)
        x *= (double)smattn__alibi_slope(p, b, h);
    return x;
}

/* +0 in every element of an [n0, n1, n2, n3] output (a layout's unreached storage). */
void smattn__bw_zero(const smattn_out_tensor *t, int64_t n0, int64_t n1, int64_t n2, int64_t n3);

/* What a row adds (SPEC 10.2): SKIP nothing (dQ +0); NORMAL its gradients; POISON NaN at
 * its visible keys and in dQ; EMPTY_NAN NaN at every key and in dQ; MEAN dO / T_b to dV. */
enum { RK_SKIP, RK_NORMAL, RK_POISON, RK_EMPTY_NAN, RK_MEAN };
enum { CL_NAN = 1, CL_POS = 2, CL_NEG = 4 };

typedef struct bw_row {
    int64_t b, h, i; /* the row; b is the unit's batch except in a dsinks unit */
    int kind;
    int dsnan;    /* RK_NORMAL: dS undefined (non-finite dO, dLSE or visible V) */
    int64_t n;    /* visible keys (RK_MEAN: T_b) */
    int64_t *idx; /* [n] ascending */
    int has_sink;
    double sink;
    double *q, *dout;               /* [D], [Dv] */
    unsigned char *dcls;            /* [Dv] class of dO_c */
    mpfr_t *s, *dp, *x;             /* [n] exact score (softcap: scale q.k), dP, dP + dLSE */
    double *bias;                   /* [n] softcap: the bias added after the cap (ALiBi's
                                       mask mode: times the slope, exact) */
    double *alibi;                  /* [n] softcap: the ALiBi term added after the bias */
    int64_t G;                      /* groups of equal scores; the sink is one, or merged in one */
    int64_t *order;                 /* [n] key positions, group by group */
    int64_t *gfirst, *gkeys, *gcnt; /* [n + 1] */
    int64_t *gid;                   /* [n] group of each key position */
    int64_t sink_group;             /* group holding the sink, or -1 */
    mpfr_t *C;                      /* [n + 1] group sums of dP */
    mpfr_t *texp;                   /* [n + 1] exact group exponent minus top (no softcap) */
    int delta_rat;                  /* all C_a / gcnt_a equal: Delta = C_0 / gcnt_0 exactly */
    mpfr_t top;                     /* the largest score or sink, exact (no softcap) */
    mpfr_t *Plo, *Phi, *Ulo, *Uhi;  /* [n] intervals of P_j and dU_j at the current level */
    unsigned char *Uzero;           /* [n] dU_j is exactly 0 */
    mpfr_t *Slo, *Shi;              /* [n] softcap only: dS_j before the cap's derivative */
    int alloc;                      /* arrays allocated for this many keys */
    double lam;                     /* dLSE of the row (0 without one) */
    int needed;                     /* the MPFR phase must evaluate the row */
    int exact_ready;                /* row_exact has run */
    int fast_bad;                   /* the fast phase could not bound the row */
    double *fP, *fPr, *fS, *fSr;    /* [n] fast phase: P_j and dS_j with absolute error bounds */
    double *g6; /* [6n] double-double tier: P_j (hi, lo, bound), dS_j (hi, lo, bound) */
    int dd_ok;  /* the double-double tier bounded the row */
    /* dsinks (SPEC 10.1): P of the sink and Delta, per tier */
    int sink_bad;                /* the sink is NaN or +inf (a NaN row) */
    double fPs, fPsr, fD, fDr;   /* binary64 tier: values and bounds */
    double gPs[3], gD[3];        /* double-double tier: hi, lo, bound */
    mpfr_t PSlo, PShi, Dlo, Dhi; /* MPFR phase: intervals (Delta exact when rational) */
} bw_row;

typedef struct bw_job bw_job;

typedef struct bw_unit {
    const bw_job *job;
    const smattn_problem *p;
    int64_t b, g, gs, R, T, D, Dv;
    int softcap;
    bw_row *rows;
    int64_t *kstart, *krow, *kpos; /* contributions per key: rows and key positions (-1 mean) */
    unsigned char *kpoison;        /* [T] dK_j and dV_j NaN */
    unsigned char *knan;           /* [T] dK_j NaN */
    unsigned char *vcls;           /* [T * Dv] */
    uint64_t *qbits, *kbits, *vbits;
    unsigned char *qdone, *kdone, *vdone, *tried;
    int64_t ncap;
    mpfr_t *tl, *th; /* [ncap] term intervals */
    mpfr_ptr *pl, *ph;
    mpfr_t *El, *Eh; /* [T + 1] group exponentials */
    mpfr_t a, b2, c, d, lo, hi, tmp;
    long prec_used;
    int64_t exact_elems, empty_rows;
    mpfr_t *prod; /* [max(D, Dv)] exact products */
    mpfr_ptr *pp;
    int64_t fast_elems; /* elements decided by the fast phase */
    int want_bias;      /* dBias is asked for */
    uint64_t *bbits;    /* [R * T] dBias of each row and key */
    unsigned char *bdone;
} bw_unit;

struct bw_job {
    const smattn_problem *p;
    const smattn_inputs *in;
    const smattn_grad_inputs *gin;
    const smattn_grad_outputs *gout;
    const smattn_ref_config *cfg;
    int64_t units;
    atomic_llong next;
    ref_fail fail; /* the lowest failing unit; its lock guards stats */
    smattn_ref_stats stats;
    /* dBias summed over the broadcast dimensions (a stride 0, SPEC 10.1): its extents
     * (1 where summed) and one unit per (b, h, i) of them after the others */
    int bias_sum;
    int64_t bext[4];
    int64_t bias_first;
};

/* backward_fast.c: the binary64 phase (SPEC 10.3): decides every element whose enclosure
 * rounds one way, marks the rows the MPFR phase still needs. 0, or -1 on allocation failure. */
int smattn__bw_fast_unit(bw_unit *u);
/* The double-double tier, for the rows marked needed: decides most of what the binary64
 * phase left (cancellation, near-boundaries, binary64 outputs). 0, or -1 (memory). */
int smattn__bw_dd_unit(bw_unit *u);
/* The two tiers on rows of batch b only (a dsinks unit): fast_row on every normal row, and
 * dd_row on the normal rows marked needed. 0, or -1 (memory). */
int smattn__bw_fast_rows(bw_unit *u, int64_t b, bw_row *rows, int64_t nrows);
int smattn__bw_dd_rows(bw_unit *u, bw_row *rows, int64_t nrows);

/* Exact helpers (the precision of rop is set to hold the exact result). 0 on success. */
int smattn__bw_exact_add(mpfr_ptr rop, mpfr_srcptr a, mpfr_srcptr b);
int smattn__bw_exact_mul(mpfr_ptr rop, mpfr_srcptr a, mpfr_srcptr b);
/* rop = sum of x[0..n) exactly (n >= 0; zero terms allowed). */
int smattn__bw_exact_sum(mpfr_ptr rop, mpfr_ptr *x, long n);

#endif
