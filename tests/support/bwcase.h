/* SPDX-License-Identifier: MIT */
/* bwcase.h: random backward problems with binary32 inputs, the forward's stored O and LSE
 * (from smattn_attention), and a plain binary32 FlashAttention-2 backward with planted
 * bugs, for the tests of the backward bound and of the fast backward kernel. */
#ifndef SMATTN_TESTS_BWCASE_H
#define SMATTN_TESTS_BWCASE_H

#include <stdint.h>

#include "smattn.h"
#include "tests/support/testkit.h"

/* What a random problem may hold (bits). */
enum {
    BW_CAUSAL_LR = 1, BW_CAUSAL_UL = 2, BW_WINDOW = 4, BW_KVLENS = 8, BW_MASK = 16,
    BW_BIAS = 32, BW_SINKS = 64, BW_SOFTCAP = 128, BW_DLSE = 256, BW_GQA = 512,
    BW_MEAN = 1024, BW_EMPTY = 2048, /* a batch with kv_lens 0: empty rows */
    BW_QLENS = 4096,
    BW_BIG = 8192,   /* S, T in [65, 140], D, Dv up to 40: several blocks of the kernel */
    BW_NANCONV = 16384, /* the `nan` empty-row convention */
    BW_ALIBI = 32768    /* ALiBi (SPEC 2.8): the mask mode with BW_BIAS, else symmetric or
                           one-sided; never in a random subset (~0u) */
};

typedef struct bwcase {
    smattn_problem p;
    unsigned feat;
    int64_t kv_lens[4], q_lens[4];
    float slopes[8]; /* ALiBi's, one per query head */
    float *q, *k, *v, *bias, *sinks, *dout, *dlse;
    unsigned char *mask;
    smattn_inputs in;
    smattn_grad_inputs gin;
    smattn_dtype odt;   /* the dtype O is stored in */
    void *o;            /* the forward's O, stored in odt */
    float *lse;         /* the forward's LSE (binary32) */
} bwcase;

/* A random problem from the seed with the features of `feat` (a random subset when feat is
 * ~0u), O stored in odt; the forward run by smattn_attention. Returns 0 on success. */
int bwcase_make(bwcase *c, uint64_t seed, unsigned feat, smattn_dtype odt);
/* The same with the shape given (fields 0: drawn as bwcase_make draws them). */
typedef struct bwshape {
    int64_t S, T, Hq, Hkv, D, Dv;
} bwshape;
int bwcase_make_shaped(bwcase *c, uint64_t seed, unsigned feat, smattn_dtype odt,
                       const bwshape *shape);
void bwcase_free(bwcase *c);
/* The forward's O and LSE of c->p again (after a change to the problem); 0 on success. */
int bwcase_forward(bwcase *c);
/* A short description for failure messages. */
const char *bwcase_name(const bwcase *c, char *buf, size_t cap);

/* Gradients in one dtype, contiguous, zero-filled. */
typedef struct bwgrads {
    smattn_dtype t;
    void *dq, *dk, *dv;
    smattn_grad_outputs go;
    int64_t nq, nk, nv;
} bwgrads;
void bwgrads_make(bwgrads *g, const smattn_problem *p, smattn_dtype t);
void bwgrads_free(bwgrads *g);

/* Planted bugs of the plain backward. */
enum {
    BW_BUG_NONE = 0,
    BW_BUG_GROUP_NOT_SUMMED, /* dK, dV from the group's first head only */
    BW_BUG_MASKED_KEYS,      /* keys the mask hides (within T_b) given P and gradient */
    BW_BUG_NO_SOFTCAP_DERIV, /* dU = dS under softcap */
    BW_BUG_SCALE_TWICE,      /* dQ and dK multiplied by scale twice */
    BW_BUG_SCALE_NONE,       /* ... or not at all */
    BW_BUG_DELTA_WRONG_O,    /* Delta from the next head's O */
    BW_BUG_EMPTY_NAN,        /* an empty row computed anyway: exp(-inf - -inf) = NaN */
    BW_BUG_COUNT
};
extern const char *const bw_bug_names[BW_BUG_COUNT];

/* The plain binary32 backward of the FlashAttention-2 model: P = exp(s - LSE) from the
 * stored LSE, Delta = dO . O from the stored O, serial binary32 sums; writes g (any dtype,
 * rounded once from binary32). */
void bw_plain(const bwcase *c, int bug, bwgrads *g);

#endif
