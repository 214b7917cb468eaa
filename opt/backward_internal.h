/* SPDX-License-Identifier: MIT */
/* backward_internal.h: the fast backward's job (operands staged as binary32 in blocks) and
 * its per-ISA entry points (opt/backward_body.h, included by each kernel_<isa>.c). */
#ifndef SMATTN_OPT_BACKWARD_INTERNAL_H
#define SMATTN_OPT_BACKWARD_INTERNAL_H

#include <stdint.h>

#include "opt/opt_internal.h"

/* Query rows and keys per block; multiples of every VLEN. Shape-only choices: the work
 * items, and so the bits, do not depend on the thread count or the ISA. */
#define BW_BQ 64
#define BW_BK 64
/* Columns (D, Dv) padded to this, a multiple of every VLEN, with zeros. */
#define BW_PAD 16

/* Keys [lo, hi) of a block (relative to its first key) where a row's P or dS can be
 * nonzero; empty when lo >= hi. */
typedef struct bw_span {
    int32_t lo, hi;
} bw_span;

/* What a row contributes (SPEC 10.2). */
enum { BW_ROW_SKIP = 0, BW_ROW_REGULAR = 1, BW_ROW_MEAN = 2, BW_ROW_NAN = 3 };

typedef struct bw_job {
    const smattn_problem *p;
    const smattn_inputs *in;
    const smattn_grad_outputs *out;
    float scale_hi, scale_lo, cap;
    const float *term; /* ALiBi's terms beside a bias, [B][Hq][S][T], added after it; or NULL */
    int64_t G, Dp, Dvp, nqb, nkb;
    /* staged operands, binary32, zero padded */
    float *q;   /* [B][Hq][S][Dp] */
    float *dO;  /* [B][Hq][S][Dvp] */
    float *k;   /* [B][Hkv][T'][Dp], T' = nkb * BW_BK */
    float *kt;  /* [B][Hkv][nkb][Dp][BW_BK] key blocks transposed */
    float *vt;  /* [B][Hkv][nkb][Dvp][BW_BK] */
    /* per row (b, h, i) at (b Hq + h) S + i */
    float *lse, *delta; /* the stored LSE; Delta = dO . O_stored - dLSE */
    int64_t *lo, *hi;   /* the key range of SPEC 3.1-3.3 */
    unsigned char *cls; /* BW_ROW_* */
    unsigned char *nan_group; /* [B][Hkv]: a `nan` empty row poisons the group's dK, dV */
    /* dS of every live block, [B][Hq][nqb][nkb][BW_BQ][BW_BK], written by the dK/dV pass and
     * read by the dQ pass; NULL: the dQ pass computes it again (the same bits either way) */
    float *ds;
    /* the dBias pass's items: [B or 1][Hq or 1][nqb or 1][nkb or 1], 1 where dbias sums */
    int64_t dbx[4];
    /* per worker scratch */
    float *scratch;
    int64_t scratch_len;
} bw_job;

typedef struct bw_isa {
    const char *name;
    void (*dkdv_item)(const bw_job *job, int64_t item, int worker);
    void (*dq_item)(const bw_job *job, int64_t item, int worker);
    void (*db_item)(const bw_job *job, int64_t item, int worker);
} bw_isa;

extern const bw_isa smattn__bw_isa_scalar;
extern const bw_isa smattn__bw_isa_avx2;
extern const bw_isa smattn__bw_isa_avx512;

/* The most bytes the dS store may take; above it dQ recomputes P and dS. Tests set it to
 * 0 to compare the two ways (smattn__bw_set_ds_budget returns the previous value). */
size_t smattn__bw_set_ds_budget(size_t bytes);

/* Floats of per-worker scratch the items need: P, dS, a block of tanh values and two spare
 * blocks, dK, dV, dQ, then the dBias pass's dS and sums (two blocks). */
static inline int64_t bw_scratch_len(int64_t Dp, int64_t Dvp)
{
    return 7 * BW_BQ * BW_BK + BW_BK * Dp + BW_BK * Dvp + BW_BQ * Dp + 64;
}

#endif
