/* SPDX-License-Identifier: MIT */
/* judge_backward.h: a backward kernel's dQ, dK, dV against the exact oracle
 * (smattn_ref_backward) under the bound of SPEC 10.7 (smattn_backward_bound). */
#ifndef SMATTN_CONFORM_JUDGE_BACKWARD_H
#define SMATTN_CONFORM_JUDGE_BACKWARD_H

#include <stdint.h>

#include "smattn.h"

typedef struct conform_backward_verdict {
    double max_ratio[3];  /* dQ, dK, dV: the largest |computed - exact| / bound (SPEC 6.10) */
    int64_t worst[3];     /* where: the element's index in the contiguous layout of SPEC 10.1 */
    double worst_got[3], worst_exact[3], worst_bound[3];
    int64_t mismatched;   /* elements beyond their bound (ratio > 1) */
    int64_t unbounded;    /* finite exact value with bound +inf: judged only for NaN */
} conform_backward_verdict;

/* Judge got (the kernel's dq, dk, dv in any float dtype and strides) for the problem, its
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
