/* SPDX-License-Identifier: MIT */
/* judge_backward.h: a backward kernel's dQ, dK, dV against the exact oracle
 * (smattn_ref_backward) under the bound of SPEC 10.7 (smattn_backward_bound), and dBias and
 * dSinks when the kernel was handed them (B12, B13). */
#ifndef SMATTN_CONFORM_JUDGE_BACKWARD_H
#define SMATTN_CONFORM_JUDGE_BACKWARD_H

#include <stdint.h>

#include "smattn.h"

typedef struct conform_backward_verdict {
    /* dQ, dK, dV, dBias, dSinks (the last two when got holds them, else worst -1): the
     * largest |computed - exact| / bound (SPEC 6.10) */
    double max_ratio[5];
    int64_t worst[5];     /* where: the element's index in the contiguous layout of SPEC 10.1 */
    double worst_got[5], worst_exact[5], worst_bound[5];
    int64_t mismatched;   /* elements beyond their bound (ratio > 1) */
    int64_t unbounded;    /* finite exact value with bound +inf: judged only for NaN */
} conform_backward_verdict;

/* Judge got (the kernel's dq, dk, dv in any float dtype and strides, and dbias, dsinks when
 * their data is set: dbias summed over its stride-0 dimensions) for the problem, its
 * inputs and gin: the oracle's binary64 result (cfg may be NULL) and the bound for model
 * pm with got's dtypes. The kernel meets the bound iff v->mismatched == 0. Status: the
 * oracle's or the bound's failure; the verdict is then unspecified. */
smattn_status conform_judge_backward(const smattn_problem *p, const smattn_inputs *in,
                                     const smattn_grad_inputs *gin,
                                     const smattn_grad_outputs *got,
                                     const smattn_backward_precision *pm,
                                     const smattn_ref_config *cfg,
                                     conform_backward_verdict *v);

#endif
