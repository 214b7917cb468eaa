/* SPDX-License-Identifier: MIT */
/* internal.h: helpers shared by ref/, opt/, io/ and the tests; not part of the public API. */
#ifndef SMATTN_CORE_INTERNAL_H
#define SMATTN_CORE_INTERNAL_H

#include <stdint.h>

#include "core/layout.h" /* the locator of ragged and paged layouts (SPEC 2.7) */
#include "core/mask.h" /* SMATTN_MAX_DIM, smattn__off4 and the proved integer logic */
#include "smattn.h"

typedef struct smattn_format {
    int prec;  /* significand bits including the implicit one */
    int emin;  /* exponent of the smallest normal, as in 2^emin */
    int emax;  /* exponent of the largest finite, as in 1.x * 2^emax */
    int bits;  /* storage width */
} smattn_format;

/* Entries for the float dtypes: F64, F32, F16, BF16 and the two fp8 (index = dtype). */
#define SMATTN__NFORMATS 7
extern const smattn_format smattn__formats[SMATTN__NFORMATS];

/* Bytes of one q8_0 block (f16 scale, 32 int8) and one q4_0 block (f16 scale, 16 bytes of
 * nibbles): llama.cpp's block_q8_0 and block_q4_0 (SPEC 2.9). */
#define SMATTN__Q8_0_BYTES 34
#define SMATTN__Q4_0_BYTES 18

double smattn__f16_to_double(uint16_t h);
double smattn__f8e4m3_to_double(uint8_t b);
double smattn__f8e5m2_to_double(uint8_t b);
double smattn__bf16_to_double(uint16_t h);
/* binary64 -> bits of t, nearest-even, one rounding. */
uint64_t smattn__round_bits(double x, smattn_dtype t);
double smattn__bits_to_double(uint64_t bits, smattn_dtype t);
/* Bits of (-1)^sign * m * 2^q in dtype t, for an integer m <= 2^prec with q >= the
 * smallest quantum (emin - prec + 1); m >= 2^prec carries into the exponent; overflow
 * gives infinity. */
uint64_t smattn__encode(int sign, uint64_t m, int q, smattn_dtype t);
void smattn__store_bits(void *base, smattn_dtype t, int64_t offset, uint64_t bits);
/* One block of SMATTN_QBLOCK values x quantised to t (SMATTN_Q8_0 or SMATTN_Q4_0) at dst as
 * llama.cpp's reference quantisers do, in binary32 (ggml quantize_row_q8_0_ref: d = amax /
 * 127, q = round(x / d); quantize_row_q4_0_ref: d = max / -8 for the value of largest
 * magnitude, nibble min(15, trunc(x / d + 8.5))), the scale stored as binary16. A block
 * holding a NaN or an infinity gets a NaN scale (every element decodes as NaN). The checker's
 * battery and the fuzzers' inputs both quantise through it. */
void smattn__quantise_block(const double *x, smattn_dtype t, unsigned char *dst);

/* smattn_bound with flags. SMATTN__BOUND_SINK_IN_MAX: the kernel keeps the sink inside its
 * running maximum from the start (SPEC 6.1 A3), so no weight has a positive exponent and
 * the row-sum overflow estimate W of SPEC 6.8 is 2 even for a sink far above the keys
 * (the conformance checker passes it for a plugin claiming SMATTN_CAP_SINK_IN_MAX). */
#define SMATTN__BOUND_SINK_IN_MAX 1u
smattn_status smattn__bound_flags(const smattn_problem *prob, const smattn_inputs *in,
                                  const smattn_precision *pm, const smattn_outputs *fmt,
                                  const smattn_outputs *bound, unsigned flags);
/* The same on listed rows only (the others' bound elements are not written): rows are
 * indices (b Hq + h) S + i, strictly ascending (else SMATTN_ERR_SHAPE). For judging a
 * sample of the rows of a large problem (smattn check --rows); the cost is the rows'. */
smattn_status smattn__bound_rows(const smattn_problem *prob, const smattn_inputs *in,
                                 const smattn_precision *pm, const smattn_outputs *fmt,
                                 const smattn_outputs *bound, unsigned flags, const int64_t *rows,
                                 int64_t nrows);
/* ref/rows.c: smattn_ref on listed rows only, the same rule for rows (the others' output
 * elements are not written), each row evaluated as smattn_ref evaluates it. */
smattn_status smattn__ref_rows(const smattn_problem *p, const smattn_inputs *in,
                               const smattn_outputs *out, const smattn_ref_config *cfg,
                               smattn_ref_stats *stats, const int64_t *rows, int64_t nrows);

/* The extents of dims 0-1 of Q/O/LSE's storage (qn) and of K/V's (kn) (SPEC 2.7): [B, S]
 * and [B, T] dense, [1, total] packed (a total of 0 is one row), [num_pages, page_size]
 * paged. For a validated problem. */
void smattn__storage_rows(const smattn_problem *p, int64_t qn[2], int64_t kn[2]);

/* smattn_validate for the backward (SPEC 10.4): the problem and inputs as smattn_validate
 * checks them, then dO, dLSE and the gradients (shapes and strides in the layout's storage,
 * dtypes, overflow, aliasing); the softmax op, quantised inputs and dBias under ALiBi's
 * mask mode: SMATTN_ERR_UNSUPPORTED; a page two block-table entries name:
 * SMATTN_ERR_LAYOUT. The _explain form writes why in one line, as smattn_validate_explain. */
/* The first page that two used entries of a paged layout's block table name (sequence b
 * uses ceil(lens[b] / page_size) entries): 1 with at = {b, column, b', column', page}, 0
 * if none, -1 out of memory. The backward refuses such a table (SPEC 10.4), and so do case
 * files of a backward (io/case.c). */
int smattn__shared_page(const smattn_layout *L, int64_t B, const int64_t *lens, int64_t at[5]);
/* The bytes each input of a valid problem spans (Q, K, V, the mask, bias, sinks, the
 * layout's arrays, the descales...): [lo[k], hi[k]) named names[k], for k below the count
 * returned (at most max); -1 if the inputs do not validate. The checker hashes them around
 * a kernel's call: a kernel must leave its inputs as they came. */
int smattn__input_spans(const smattn_problem *p, const smattn_inputs *in, const void **lo,
                        const void **hi, const char **names, int max);
smattn_status smattn__validate_backward(const smattn_problem *p, const smattn_inputs *in,
                                        const smattn_grad_inputs *gin,
                                        const smattn_grad_outputs *gout);
smattn_status smattn__validate_backward_explain(const smattn_problem *p,
                                                const smattn_inputs *in,
                                                const smattn_grad_inputs *gin,
                                                const smattn_grad_outputs *gout, char *msg,
                                                size_t cap);

/* The descale factor (SPEC 2.9) of tensor 'q', 'k' or 'v' for batch b and KV head g: 1
 * without descales. The real input is the loaded element times it, exact in binary64 for a
 * validated problem. */
static inline double smattn__descale(const smattn_problem *p, char which, int64_t b, int64_t g)
{
    const smattn_descale *d = p->descale;
    if (!d)
        return 1.0;
    const double *a = which == 'q' ? d->q_head : which == 'k' ? d->k_head : d->v_head;
    if (a)
        return a[b * p->Hkv + g];
    return which == 'q' ? d->q : which == 'k' ? d->k : d->v;
}

/* The query length S_b and key length T_b of batch b (SPEC 3.2). */
int64_t smattn__q_len(const smattn_problem *p, int64_t b);
int64_t smattn__kv_len(const smattn_problem *p, int64_t b);

/* KV head read by query head h (SPEC 2.2): h / (Hq / Hkv), proved in core/mask.h. */
static inline int64_t smattn__kv_head(const smattn_problem *p, int64_t h)
{
    return smattn__head_group(p->Hq, p->Hkv, h);
}

/* Keys [*lo, *hi) of row (b, i) allowed by lengths, causality and the window (SPEC 3.1-3.3),
 * before the boolean mask and bias: smattn__key_interval (proved) on batch b's lengths.
 * Empty (lo == hi) for a padded query. */
void smattn__key_range(const smattn_problem *p, int64_t b, int64_t i, int64_t *lo, int64_t *hi);

/* The boolean mask entry (true when there is no mask). */
int smattn__mask_allows(const smattn_problem *p, const smattn_inputs *in, int64_t b, int64_t h,
                        int64_t i, int64_t j);

/* ALiBi (SPEC 2.8). S and T at most 2^29 with ALiBi, so that slope x distance (24 + 29
 * bits) is exact in binary64. */
#define SMATTN_ALIBI_MAX_LEN (INT64_C(1) << 29)

/* The slope of (batch b, query head h); 0 without ALiBi. */
static inline float smattn__alibi_slope(const smattn_problem *p, int64_t b, int64_t h)
{
    if (p->alibi_mode == SMATTN_ALIBI_NONE)
        return 0.0f;
    return p->alibi_slopes[(p->alibi_slopes_per_batch ? b * p->Hq : 0) + h];
}

/* The signed distance whose product with the slope is the ALiBi term of key j for query i
 * of batch b (SPEC 2.8): -|i + T_b - S_b - j| (symmetric) or j - T_b + 1 (one-sided); 0 for
 * the other modes. |distance| < 2^29 with ALiBi. */
static inline int64_t smattn__alibi_dist(const smattn_problem *p, int64_t b, int64_t i,
                                         int64_t j)
{
    if (p->alibi_mode == SMATTN_ALIBI_SYMMETRIC) {
        int64_t d = i + smattn__kv_len(p, b) - smattn__q_len(p, b) - j;
        return d < 0 ? d : -d;
    }
    if (p->alibi_mode == SMATTN_ALIBI_ONE_SIDED)
        return j - smattn__kv_len(p, b) + 1;
    return 0;
}

/* The ALiBi term added after the bias in the symmetric and one-sided modes, exact (24-bit
 * slope x 29-bit distance); 0 in the others (the mask mode scales the bias instead). */
static inline double smattn__alibi_term(const smattn_problem *p, int64_t b, int64_t h,
                                        int64_t i, int64_t j)
{
    if (p->alibi_mode != SMATTN_ALIBI_SYMMETRIC && p->alibi_mode != SMATTN_ALIBI_ONE_SIDED)
        return 0.0;
    return (double)smattn__alibi_slope(p, b, h) * (double)smattn__alibi_dist(p, b, i, j);
}

/* Number of CPUs online, at least 1. */
int smattn__ncpu(void);

#endif
