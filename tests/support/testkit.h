/* SPDX-License-Identifier: MIT */
/* testkit.h: what the random suites share: the test scale, a seeded generator, and output
 * buffers for the three outputs of a problem. */
#ifndef SMATTN_TESTS_TESTKIT_H
#define SMATTN_TESTS_TESTKIT_H

#include <stddef.h>
#include <stdint.h>

#include "smattn.h"

/* SMATTN_TEST_SCALE (default 1; `make check-long` sets 100) and n scaled by it (>= 1). */
double test_scale(void);
int test_scaled(int n);
/* Whether the k-th (from 0) of a fixed list of problems runs: all of them at a scale of 1 or
 * more; below 1 (the sanitizer half of `make check` runs at 0.25) a share of about the scale,
 * spread evenly over the list, the last one always (so that a list of one still runs). */
int test_keep(int k, int count);

/* splitmix64: every random problem is a function of its seed alone. */
typedef struct rng {
    uint64_t s;
} rng;

uint64_t rng_next(rng *r);
double rng_unif(rng *r);                          /* [0, 1) */
int64_t rng_pick(rng *r, int64_t n);              /* [0, n) */
int64_t rng_int(rng *r, int64_t lo, int64_t hi); /* [lo, hi] */
int rng_chance(rng *r, double p);
double rng_gauss(rng *r);

/* Contiguous O, LSE and P buffers of one dtype for a problem, zero-filled; O is NULL in
 * `out` for softmax. */
typedef struct outbuf {
    smattn_dtype t;
    void *o, *l, *p;
    smattn_outputs out;
    size_t no, nl, np;
} outbuf;

void outbuf_make(outbuf *x, const smattn_problem *p, smattn_dtype t);
void outbuf_free(outbuf *x);
/* Element k of 'o', 'l' (LSE) or 'p', as binary64; and a store of one. */
double outbuf_get(const outbuf *x, char which, int64_t k);
void outbuf_put(outbuf *x, char which, int64_t k, double v);

#endif
