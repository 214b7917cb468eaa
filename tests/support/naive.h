/* SPDX-License-Identifier: MIT */
/* naive.h: a second, deliberately plain MPFR evaluation of the conventions, to check smattn_ref. */
#ifndef SMATTN_TESTS_NAIVE_H
#define SMATTN_TESTS_NAIVE_H

#include <stdint.h>

#include <mpfr.h>

#include "smattn.h"

/* Working precision in bits when the caller passes prec <= 0. */
#define SMATTN_NAIVE_PREC 2000L

/* Per-row flags (row index (b*Hq + h)*S + i), for the tests to decide what to compare. */
enum {
    SMATTN_NAIVE_ROW_EMPTY = 1,      /* no visible key and no finite sink (incl. padding) */
    SMATTN_NAIVE_ROW_PADDING = 2,    /* i >= q_lens[b] */
    SMATTN_NAIVE_ROW_NAN = 4,        /* the non-finite-input rule made the whole row NaN */
    SMATTN_NAIVE_ROW_UNDERFLOW = 16, /* a term underflowed even MPFR's widest exponent range:
                                      * a zero O may have lost its sign */
    SMATTN_NAIVE_ROW_RATIONAL = 32,  /* some O column took the exact rational path */
    SMATTN_NAIVE_ROW_NEAR = 64       /* an inexact output lies within 2^(k - prec/2) of a
                                      * rounding boundary (k bounds the error growth): naive
                                      * cannot decide its rounding */
};

typedef struct smattn_naive_stats {
    int64_t rows, rows_empty, rows_nan, rows_underflow, rows_rational, rows_near;
} smattn_naive_stats;

/* Evaluate the problem: scores exactly, then LSE, P and O at `prec` bits (SMATTN_NAIVE_PREC if
 * prec <= 0) in round-to-nearest, then one rounding per output with MPFR's own conversions.
 * Returns smattn_validate's status, SMATTN_ERR_NOMEM, SMATTN_ERR_INTERNAL (an "exact" step was
 * inexact) or SMATTN_OK. Not thread-safe beyond MPFR's own (it changes the exponent range of
 * the calling thread and restores it). */
smattn_status smattn_naive(const smattn_problem *prob, const smattn_inputs *in,
                           const smattn_outputs *out, long prec);

/* The same, with per-row flags (NULL or B*Hq*S bytes) and counters (NULL or filled). */
smattn_status smattn_naive_ex(const smattn_problem *prob, const smattn_inputs *in,
                              const smattn_outputs *out, long prec, unsigned char *row_flags,
                              smattn_naive_stats *stats);

/* The bits of x rounded to nearest-even in dtype t (F64, F32, F16, BF16): mpfr_get_d,
 * mpfr_get_flt, or an emulated format for F16 / BF16. NaN gives the canonical quiet NaN. */
uint64_t smattn_naive_round_bits(mpfr_srcptr x, smattn_dtype t);

#endif
