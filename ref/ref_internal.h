/* SPDX-License-Identifier: MIT */
/* ref_internal.h: the oracle's row context, shared by its driver and its two phases. */
#ifndef SMATTN_REF_INTERNAL_H
#define SMATTN_REF_INTERNAL_H

#include <pthread.h>
#include <stdint.h>

#include <mpfr.h>

#include "core/internal.h"

/* Column classes of V over the visible keys (SPEC 4.2). */
enum { VCLASS_FINITE = 0, VCLASS_NAN = 1, VCLASS_POS_INF = 2, VCLASS_NEG_INF = 3 };

/* Working precision of the fast phase's transcendental steps (exp, log). */
#define REF_FAST_PREC 128

/* One row (b, h, i): what both phases read and what they decide. */
typedef struct ref_row {
    const smattn_problem *p;
    const smattn_inputs *in;
    const smattn_outputs *out;
    int att;                /* attention (1) or softmax (0) */
    int64_t b, h, i, g;     /* batch, query head, query, KV head */
    double dq, dk, dv;      /* descale factors of (b, g) (SPEC 2.9); 1 without */
    int64_t D, Dv;          /* Dv = 0 for softmax */
    int64_t n;              /* visible keys */
    int64_t *idx;           /* their indices, ascending [n] */
    int has_sink;
    double sink;
    int was_empty;          /* the row took an empty-row convention (SPEC 3.4) */
    unsigned char *vclass;  /* [Dv] */
    double *qd;             /* q_i as binary64 [D] */
    /* decisions: bits per output element, and whether decided */
    uint64_t *o_bits;       /* [Dv] */
    unsigned char *o_done;  /* [Dv] */
    uint64_t lse_bits;
    int lse_done;
    uint64_t *p_bits;       /* [n], visible keys only */
    unsigned char *p_done;  /* [n] */
    /* fast-phase workspace */
    double *s_hi, *s_lo, *s_err; /* scores as double-double with absolute error [n] */
    double *e_hi, *e_lo, *e_rel; /* exp(s - m) as double-double with relative error [n] */
    double *acc;                 /* [4 Dv] scratch: per-column sums in the fast phase */
    double *buf;                 /* [max(D, Dv)] one K or V row as binary64 */
    mpfr_t fx, fe, ft;           /* fast-phase MPFR scratch, REF_FAST_PREC bits */
    /* statistics */
    int used_rational, sign_tests;
    long prec_used;
    /* progress within a long row (a decode has one): passes over keys add to work; when it
     * reaches work_next, tick (set on the calling thread's row only, when there is a
     * progress callback) reports and moves work_next on. A counter, not a clock per key. */
    int64_t work, work_next;
    void (*tick)(struct ref_row *r);
    void *tick_arg;
} ref_row;

/* One key of work in a pass over a row's keys. */
static inline void smattn__ref_work(ref_row *r)
{
    if (++r->work >= r->work_next && r->tick)
        r->tick(r);
}

/* round.c */
uint64_t smattn__ref_nan_bits(smattn_dtype t);
uint64_t smattn__ref_inf_bits(smattn_dtype t, int negative);
uint64_t smattn__ref_round_mpfr(mpfr_srcptr x, smattn_dtype t, mpfr_ptr tmp);
int smattn__ref_decide_dd(double yh, double yl, double err, smattn_dtype t, uint64_t *bits);

/* fast.c: the double-double phase (SPEC 5.2). Returns 1 if it ran (possibly leaving some
 * elements undecided), 0 if the row is outside its range (then nothing is decided). */
int smattn__ref_fast_row(ref_row *r);

/* exact.c: exact sums and products of MPFR numbers, rop's precision set to hold the exact
 * result (a zero result keeps MPFR's sign; the backward's wrappers make it +0). 0 on
 * success. smattn__exact_sum: x[0..n), n >= 0, zero terms allowed. */
int smattn__exact_add(mpfr_ptr rop, mpfr_srcptr a, mpfr_srcptr b);
int smattn__exact_mul(mpfr_ptr rop, mpfr_srcptr a, mpfr_srcptr b);
int smattn__exact_sum(mpfr_ptr rop, mpfr_ptr *x, long n);

/* exact.c: the MPFR phase (SPEC 5.3-5.5); decides every element not yet decided. */
smattn_status smattn__ref_exact_row(ref_row *r, long start_prec, long max_prec);
/* The mean convention of an empty row over keys r->idx[0..n) (SPEC 3.4). */
smattn_status smattn__ref_mean_row(ref_row *r);

/* ref.c: the driver after validation, over every row (list NULL) or the nlist rows of list
 * (indices (b Hq + h) S + i, each once; ref/rows.c checks them). */
smattn_status smattn__ref_run(const smattn_problem *p, const smattn_inputs *in,
                              const smattn_outputs *out, const smattn_ref_config *cfg,
                              smattn_ref_stats *stats, smattn_progress_fn progress,
                              void *progress_arg, const int64_t *list, int64_t nlist);

/* pool.c: the oracles' threads. The lowest failing unit and its status (lock also guards
 * what workers merge at their end); MPFR's exponent range widened on a worker and restored
 * (its cache freed); the worker run on the configured thread count (0: the online cores,
 * one without MPFR's TLS build, at most `most`), the calling thread one of them. */
typedef struct ref_fail {
    pthread_mutex_t lock;
    int64_t unit; /* -1: none */
    smattn_status status;
} ref_fail;
int smattn__ref_fail_init(ref_fail *f); /* 0, or -1 (SMATTN_ERR_THREADS) */
void smattn__ref_fail_record(ref_fail *f, int64_t unit, smattn_status st);
smattn_status smattn__ref_fail_done(ref_fail *f); /* the lowest unit's status, or OK */
void smattn__ref_mpfr_widen(mpfr_exp_t saved[2]);
void smattn__ref_mpfr_restore(const mpfr_exp_t saved[2]);
void smattn__ref_threads(int requested, int64_t most, void *(*worker)(void *), void *arg);

/* Loading helpers. */
double smattn__ref_k(const ref_row *r, int64_t j, int64_t d);
double smattn__ref_v(const ref_row *r, int64_t j, int64_t c);
double smattn__ref_x(const ref_row *r, int64_t j);    /* softmax input x[b,h,i,j] */
/* The bias input as stored (0 when there is none): visibility and NaN rows read it. */
double smattn__ref_bias_raw(const ref_row *r, int64_t j);
/* The addend of a visible key's score after softcap (SPEC 2.5, 2.8): the bias, or in the
 * ALiBi mask mode slope x bias (exact: a binary32 slope times an f32/f16/bf16 value). */
double smattn__ref_bias(const ref_row *r, int64_t j);
/* The symmetric or one-sided ALiBi term, added after that (exact; 0 otherwise). */
double smattn__ref_alibi(const ref_row *r, int64_t j);
/* n elements of a tensor from `offset` with stride `stride`, as binary64 (exact). */
void smattn__ref_load_vec(double *dst, const smattn_tensor *t, int64_t offset, int64_t stride,
                  int64_t n);

#endif
