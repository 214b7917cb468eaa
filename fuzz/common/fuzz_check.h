/* SPDX-License-Identifier: MIT */
/* fuzz_check.h: what the targets that compare implementations share: the MISMATCH report,
 * a kernel run, the oracle and bound of a problem, the bound check and the bitwise check.
 * Every check that fails prints a report to stderr and calls abort(). */
#ifndef SMATTN_FUZZ_CHECK_H
#define SMATTN_FUZZ_CHECK_H

#include "fuzz/common/fuzz_input.h"

/* How far each target cuts a decoded problem (fuzz_problem_shrink: elements of P), kept
 * here so that tools/fuzz_decode.c shows an input as the target saw it. fuzz_diff's
 * figure sets its speed (fuzz/README.md). */
#ifndef FUZZ_DIFF_MAX_P
#define FUZZ_DIFF_MAX_P 192
#endif
/* fuzz_diff_long's rows: the kernel splits the keys of few rows (B*Hq*S <= 256) when
 * T > 1024, beyond the decoder's T <= 64. Every attention decode input with B*Hq <= 2 after
 * the cut to FUZZ_DIFF_MAX_P gets its keys repeated (fuzz_problem_stretch_keys) to
 * 1025 + (0..63) by its seed, so that the split and its merge are fuzzed. The T to stretch
 * to, or 0 (fuzz_diff_long does not take the input). Such a row costs the oracle 5-50 ms,
 * so they have their own target (fuzz/README.md, "Speed"); fuzz_diff runs them unstretched. */
static inline int64_t fuzz_diff_long_T(const fuzz_problem *fp)
{
    if (fp->p.op != SMATTN_OP_ATTENTION || fp->shape_class != FUZZ_DECODE || fp->p.B * fp->p.Hq > 2)
        return 0;
    return 1025 + (int64_t)(fp->seed >> 26);
}
#define FUZZ_REF_PROPS_MAX_P 64
/* Eighths of the attention inputs fuzz_problem_quant makes quantised (SPEC 2.9), by target:
 * fuzz_dtypes' half, fuzz_diff's and fuzz_ref_props' quarter. */
#define FUZZ_DTYPES_QUANT_IN8 4
#define FUZZ_DIFF_QUANT_IN8 2
#define FUZZ_REF_PROPS_QUANT_IN8 2
#define FUZZ_DP_MAX_P 256 /* fuzz_decode_prefill: before its prefill is cut to T^2 <= it */

/* First lines of a report: "MISMATCH <target> <shape class>", "check: <what>", then the
 * decoded problem. */
void fuzz_mismatch_head(const char *target, const fuzz_problem *fp, const char *what);

/* SMATTN_FUZZ_FULL as an integer (0 when unset): the replay's 1 (every ISA) or 2 (also
 * uncut), read once by a comparing target's LLVMFuzzerInitialize. */
int fuzz_full_mode(void);

/* The ISAs this CPU runs, in the order scalar, avx2, avx512; returns how many (>= 1). */
int fuzz_isa_list(const char *isas[3]);
/* One of them, chosen by a value drawn from the input (e.g. the decoded seed). */
const char *fuzz_pick_isa(uint32_t pick);

/* The kernel (attention or softmax by p->op) on `in` into freshly allocated F32 outputs
 * (fuzz_run_opt) or outputs of dtype out_t (fuzz_run_opt_as: O, LSE and P all of it). */
smattn_status fuzz_run_opt(const smattn_problem *p, const smattn_inputs *in, const char *isa,
                           int threads, fuzz_outputs *o);
smattn_status fuzz_run_opt_as(const smattn_problem *p, const smattn_inputs *in, const char *isa,
                              int threads, smattn_dtype out_t, fuzz_outputs *o);
/* Abort with a report unless the kernel returned SMATTN_OK. */
void fuzz_require_ok(const char *target, const fuzz_problem *fp, smattn_status s,
                     const char *what);

/* The oracle's F64 outputs (`ref`) and the SPEC 6 bound for F32 outputs of the kernel's
 * precision model (`bnd`), both allocated here. Returns 1 when the oracle gave up within
 * its precision limit on a softcap problem (allowed by SPEC 5.5; nothing is allocated),
 * else 0; any other failure is a MISMATCH. */
int fuzz_oracle_and_bound(const char *target, const fuzz_problem *fp, fuzz_outputs *ref,
                          fuzz_outputs *bnd);
/* The same for another kernel's precision model (fuzz_plugin). */
int fuzz_oracle_and_bound_pm(const char *target, const fuzz_problem *fp,
                             const smattn_precision *pm, fuzz_outputs *ref, fuzz_outputs *bnd);
/* The same for outputs of dtype out_t (O, LSE and P): the bound's final rounding (SPEC 6.1
 * A6, u_out) is that dtype's. The two above are this with F32. */
int fuzz_oracle_and_bound_as(const char *target, const fuzz_problem *fp,
                             const smattn_precision *pm, smattn_dtype out_t, fuzz_outputs *ref,
                             fuzz_outputs *bnd);

/* Every element of `kernel` (read by its dtype, smattn_load) within `bnd` of `ref`
 * (smattn_error_ratio <= 1); elements with
 * a finite exact value and bound +inf are out of contract (SPEC 6.8) and not judged. */
void fuzz_check_bound(const char *target, const fuzz_problem *fp, const fuzz_outputs *kernel,
                      const fuzz_outputs *ref, const fuzz_outputs *bnd, const char *what);

/* A copy of K or V (t, n elements, head dim `dim`) with NaN and infinities in every slot
 * j >= kv_lens[b], which no query sees (SPEC 3.6); `which` varies the pattern. */
void *fuzz_garbage_beyond_kv_lens(const fuzz_problem *fp, const smattn_tensor *t, size_t n,
                                  int64_t dim, int which);

/* fuzz_diff's and fuzz_diff_long's checks of one problem: the oracle and the bound, then on
 * every ISA (all_isas) or on the one fuzz_pick_isa(seed) names: the kernel within the bound,
 * and bit for bit: the decoded thread count against one thread, a repeated call, NaN/inf
 * garbage beyond kv_lens. */
void fuzz_diff_check(const char *target, const fuzz_problem *fp, int all_isas);
/* The same with the kernel's outputs (O, LSE, P) in dtype out_t and the bound of that dtype
 * (fuzz_dtypes); a kernel status other than SMATTN_OK is a MISMATCH, as above. */
void fuzz_diff_check_as(const char *target, const fuzz_problem *fp, int all_isas,
                        smattn_dtype out_t);

/* fuzz_diff_check with the problem's layout twin (fuzz_layout_draw; NULL: none) checked
 * too: the oracle's outputs on it the dense problem's bits, and on each ISA checked, the
 * kernel's on it (the decoded thread count) the dense run's bits. */
void fuzz_diff_check_layout(const char *target, const fuzz_problem *fp, const fuzz_layout *fl,
                            int all_isas);

/* The same bits in every element of two outputs of one dtype. */
void fuzz_check_same_bits(const char *target, const fuzz_problem *fp, const fuzz_outputs *a,
                          const fuzz_outputs *b, const char *what);

#endif
