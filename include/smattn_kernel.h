/* SPDX-License-Identifier: MIT */
/* smattn_kernel.h: the plugin ABI of `smattn conform`, for attention kernels under test.
 *
 * A kernel under test is a shared library (built with -fPIC -shared) exporting
 *
 *   const smattn_plugin_info *smattn_plugin_describe(uint32_t host_abi);   required
 *   int smattn_plugin_attention(const smattn_problem *, const smattn_inputs *,
 *                               const smattn_outputs *);                   required
 *   int smattn_plugin_softmax(const smattn_problem *, const smattn_inputs *,
 *                             const smattn_outputs *);                     optional
 *   smattn_precision smattn_plugin_precision(const smattn_problem *);        optional
 *
 * The checker calls smattn_plugin_describe once with SMATTN_PLUGIN_ABI_VERSION; a plugin
 * built against another ABI version returns its own version in `abi_version` and the
 * checker refuses it with a clear message. The info says what the kernel claims: which
 * dtypes, mask kinds and layouts it takes, which fully-masked-row convention it follows,
 * and its precision model (SPEC 6.1), so the checker applies the matching bound and skips
 * the cases the kernel does not claim (reported as skipped, never as passed).
 *
 * The problem, inputs and outputs are those of smattn.h (SPEC 2): shapes, strides in
 * elements, dtypes. The checker only hands the kernel problems its info claims, with
 * `empty_rows` and `empty_lse` set to the conventions the kernel claims. An entry point
 * returns 0 (SMATTN_OK) when it wrote every requested output, SMATTN_ERR_UNSUPPORTED to
 * decline a case (counted as skipped), or any other nonzero status to report a failure.
 *
 * The checker runs each case in a child process with a time limit and guard pages around
 * the outputs: a crash, a hang, or a write outside the outputs fails that case and the run
 * goes on. The outputs are prefilled with a signalling-NaN pattern: every element of every
 * output asked for must be written (an element left as it was fails the case). Invisible
 * slots of the inputs (padded cache slots, masked keys) hold NaN and infinities on purpose
 * (SPEC 3.6). A plugin must not rely on state kept between calls.
 *
 * Versioning: the layout below is ABI version 1. Fields are only ever appended; a host
 * reads `struct_size` to know which fields a plugin filled. Capability bits are appended
 * too (bits 16-19, the layouts, came with smattn.h's smattn_layout): a plugin built before
 * them claims none of them and keeps working; a host older than a bit a plugin claims
 * refuses the plugin (an unknown capability) rather than hand it cases it cannot judge.
 */
#ifndef SMATTN_KERNEL_H
#define SMATTN_KERNEL_H

#include "smattn.h"

#ifdef __cplusplus
extern "C" {
#endif

#define SMATTN_PLUGIN_ABI_VERSION 1u

/* Exported symbol names, for dlsym. */
#define SMATTN_PLUGIN_DESCRIBE_SYMBOL "smattn_plugin_describe"
#define SMATTN_PLUGIN_ATTENTION_SYMBOL "smattn_plugin_attention"
#define SMATTN_PLUGIN_SOFTMAX_SYMBOL "smattn_plugin_softmax"
/* Optional: the precision model for one problem, when it depends on the shape (an online
 * softmax over key tiles rescales ceil(T / tile) times). Absent: info->precision. */
#define SMATTN_PLUGIN_PRECISION_SYMBOL "smattn_plugin_precision"
/* Optional: int smattn_plugin_threads(int n) sets the number of threads the later calls
 * use (n >= 1) and returns 0, or nonzero if it does not take n. With it, the checker runs
 * each case once on 1 thread and once on 2 and compares the bits. */
#define SMATTN_PLUGIN_THREADS_SYMBOL "smattn_plugin_threads"

/* What a kernel supports beyond the plain case (one batch or more, Hq == Hkv, no mask,
 * contiguous row-major tensors, O only). A case using a feature whose bit is clear is
 * skipped. */
enum smattn_plugin_caps {
    SMATTN_CAP_CAUSAL_LOWER_RIGHT = 1u << 0, /* SMATTN_CAUSAL_LOWER_RIGHT (KV-cache alignment) */
    SMATTN_CAP_CAUSAL_UPPER_LEFT = 1u << 1,  /* SMATTN_CAUSAL_UPPER_LEFT (PyTorch is_causal) */
    SMATTN_CAP_WINDOW = 1u << 2,      /* window_left / window_right other than -1 */
    SMATTN_CAP_KV_LENS = 1u << 3,     /* per-batch kv_lens (padding keys) */
    SMATTN_CAP_Q_LENS = 1u << 4,      /* per-batch q_lens (padding queries) */
    SMATTN_CAP_BOOL_MASK = 1u << 5,   /* the boolean mask input */
    SMATTN_CAP_BIAS = 1u << 6,        /* the additive bias input (may hold -inf) */
    SMATTN_CAP_SINKS = 1u << 7,       /* attention sinks */
    SMATTN_CAP_SOFTCAP = 1u << 8,     /* softcap > 0 */
    SMATTN_CAP_GQA = 1u << 9,         /* Hq a multiple of Hkv, Hq > Hkv */
    SMATTN_CAP_STRIDES = 1u << 10,    /* any strides allowed by SPEC 2.1 (else row-major) */
    SMATTN_CAP_LSE = 1u << 11,        /* writes LSE when asked */
    SMATTN_CAP_P = 1u << 12,          /* writes P when asked */
    SMATTN_CAP_DV = 1u << 13,         /* Dv != D */
    /* Not a feature but a property of the arithmetic: the kernel keeps the sink inside its
     * running maximum from the start (SPEC 6.1 A3), so no weight, not even a sink's far
     * above the keys, is computed with a positive exponent. The bound then covers rows
     * with large sinks too (SPEC 6.8: W = 2); without this bit such rows may be out of
     * contract and are only counted. */
    SMATTN_CAP_SINK_IN_MAX = 1u << 14,
    /* A property too: the same inputs give the same bits on every call, and at every thread
     * count the plugin takes (smattn_plugin_threads). The checker runs every case twice and
     * fails a kernel claiming this whose bits change; one that does not claim it is only
     * marked in the reports. */
    SMATTN_CAP_DETERMINISTIC = 1u << 15,
    /* Ragged and paged layouts (SPEC 2.7). A kernel claiming one is handed the layout
     * problem itself: prob->layout set, Q/O/LSE and K/V laid out as smattn.h's
     * smattn_layout says (contiguous in that layout, unread slots and unused block-table
     * entries holding NaN, infinities and garbage), judged as the dense twin. A case using
     * a layout the kernel does not claim is skipped. */
    SMATTN_CAP_PACKED_Q = 1u << 16,  /* cu_seqlens_q: Q [1,total_q,Hq,D], O, LSE [1,Hq,total_q] */
    SMATTN_CAP_PACKED_KV = 1u << 17, /* cu_seqlens_k (and seqused_k): K, V [1,total_k,Hkv,.] */
    SMATTN_CAP_PAGED_NHD = 1u << 18, /* block_table, K, V [num_pages,page_size,Hkv,.] */
    SMATTN_CAP_PAGED_HND = 1u << 19, /* block_table, K, V [num_pages,Hkv,page_size,.] */
    /* Descales of quantised inputs (SPEC 2.9): smattn_problem.descale with per-tensor
     * factors (vLLM's k_scale, v_scale), and with per-(batch, KV head) arrays (FlashAttention
     * 3's q/k/v_descale). The 8-bit and block dtypes themselves are claimed in q_dtypes and
     * kv_dtypes (SMATTN_F8E4M3, SMATTN_F8E5M2; SMATTN_Q8_0, SMATTN_Q4_0 for K and V only).
     * The checker judges a quantised case as its binary64 twin holding the real values
     * (decoded element times factor), with the kernel's declared model (SPEC 6.11: a
     * descale folded into the scale is a larger u_score). A plugin built before these bits
     * does not read prob->descale: the checker gives it no case with one. */
    SMATTN_CAP_DESCALE_TENSOR = 1u << 20,
    SMATTN_CAP_DESCALE_HEAD = 1u << 21,
    /* ALiBi from slopes and distances (SPEC 2.8), one bit per mode: alibi_mode
     * SMATTN_ALIBI_SYMMETRIC, SMATTN_ALIBI_ONE_SIDED, SMATTN_ALIBI_MASK (the last with the
     * bias input, which it multiplies by the slope). A plugin built before these fields
     * existed does not read them: the checker gives it no ALiBi case. */
    SMATTN_CAP_ALIBI_SYMMETRIC = 1u << 22,
    SMATTN_CAP_ALIBI_ONE_SIDED = 1u << 23,
    SMATTN_CAP_ALIBI_MASK = 1u << 24
};

/* A set of dtypes: bit (1u << smattn_dtype). */
#define SMATTN_DTYPE_BIT(t) (1u << (unsigned)(t))

typedef struct smattn_plugin_info {
    uint32_t abi_version;      /* SMATTN_PLUGIN_ABI_VERSION the plugin was built against */
    uint32_t struct_size;      /* sizeof(smattn_plugin_info) of that version */
    const char *name;          /* short name, e.g. "example-f32" */
    const char *version;       /* free text */
    uint32_t caps;             /* smattn_plugin_caps */
    uint32_t q_dtypes;         /* accepted dtypes of Q (and X for softmax) */
    uint32_t kv_dtypes;        /* accepted dtypes of K and V */
    uint32_t out_dtypes;       /* dtypes it writes O, LSE and P in */
    int64_t max_head_dim;      /* largest D and Dv it takes; 0: no limit */
    smattn_empty empty_rows;   /* the fully-masked-row convention it claims (SPEC 3.4) */
    smattn_empty_lse empty_lse;
    /* its arithmetic (SPEC 6.1): the bound it is judged by; with smattn_plugin_precision,
     * the model the reports show, --require-precision and --baseline compare (it must be
     * in range either way) */
    smattn_precision precision;
} smattn_plugin_info;

typedef const smattn_plugin_info *(*smattn_plugin_describe_fn)(uint32_t host_abi);
typedef int (*smattn_plugin_run_fn)(const smattn_problem *prob, const smattn_inputs *in,
                                    const smattn_outputs *out);
typedef smattn_precision (*smattn_plugin_precision_fn)(const smattn_problem *prob);
typedef int (*smattn_plugin_threads_fn)(int n);

/* Optional: merging partial attention states (SPEC 9), exported as
 *   int smattn_plugin_merge(const smattn_merge_problem *prob, const smattn_merge_inputs *in,
 *                           const smattn_outputs *out);
 * with smattn_merge's contract (out->o and out->lse in the dtypes of info.out_dtypes, the
 * partials in those of info.q_dtypes; SMATTN_ERR_UNSUPPORTED declines a case). The checker
 * runs its merge battery on it and judges it with smattn_merge_bound for info.precision (the
 * fields a merge reads: u_acc, exp_ulps, acc_len, tiny). Added after SMATTN_PLUGIN_ABI
 * version 1's other entries: a plugin without it is judged as before. */
#define SMATTN_PLUGIN_MERGE_SYMBOL "smattn_plugin_merge"
typedef int (*smattn_plugin_merge_fn)(const smattn_merge_problem *prob,
                                      const smattn_merge_inputs *in, const smattn_outputs *out);

/* Optional: the backward (SPEC 10), exported as
 *   int smattn_plugin_backward(const smattn_problem *prob, const smattn_inputs *in,
 *                              const smattn_forward_saved *saved,
 *                              const smattn_grad_inputs *gin, const smattn_grad_outputs *out);
 * with smattn_attention_backward's contract: saved holds the O and LSE the kernel's own
 * smattn_plugin_attention wrote for the same problem and inputs (in a dtype of
 * info.out_dtypes, contiguous; an empty row's LSE as info.empty_lse says), gin the
 * gradients dO and dLSE (dlse.data NULL: dLSE = 0) in a dtype of info.q_dtypes, out->dq,
 * dk and dv in a dtype of info.out_dtypes (contiguous, prefilled with a signalling-NaN
 * pattern: every element must be written, +0 where nothing flows back), out->dbias and
 * out->dsinks absent (data NULL) unless the plugin claims bits 26 and 27 below. dK and dV
 * hold the sums over each KV head's group of query heads (SPEC 2.2). SMATTN_ERR_UNSUPPORTED
 * declines a case. The checker runs its backward battery on it in a child, the forward
 * first, and judges dQ, dK, dV (and dBias, dSinks when asked) against smattn_ref_backward
 * under smattn_backward_bound (SPEC 10.7, B12 and B13 for the sums), the model having the
 * forward's precision (smattn_plugin_precision or info.precision) for both passes and O,
 * LSE stored in the dtype handed back. Added after SMATTN_PLUGIN_ABI version 1's other
 * entries: a plugin without it is judged as before (the backward cases skipped). */
#define SMATTN_PLUGIN_BACKWARD_SYMBOL "smattn_plugin_backward"
typedef int (*smattn_plugin_backward_fn)(const smattn_problem *prob, const smattn_inputs *in,
                                         const smattn_forward_saved *saved,
                                         const smattn_grad_inputs *gin,
                                         const smattn_grad_outputs *out);
/* A property of a backward, capability bit 25: the same inputs give the same gradient bits
 * on every call, and at every thread count the plugin takes (smattn_plugin_threads). The
 * checker runs each backward case twice (on 1 thread and on 2 when the plugin takes a
 * thread count) and fails a kernel claiming this whose bits change. */
/* The optional gradients, bits 26 and 27, as SMATTN_CAP_LSE is for the forward's LSE: a
 * plugin claiming SMATTN_CAP_BACKWARD_DBIAS is handed out->dbias (data not NULL) in the
 * cases that ask for it, [B,Hq,S,T] in a dtype of info.out_dtypes, with a stride 0 on each
 * dimension a broadcast bias has extent 1 in (the tensor has extent 1 there and each
 * element is the sum of dS over it, SPEC 10.1; otherwise contiguous), also in a case
 * without a bias input (the gradient of an additive bias: dS, +0 at keys a row does not
 * see); one claiming SMATTN_CAP_BACKWARD_DSINKS is handed out->dsinks [Hq] (contiguous)
 * in the cases with sinks that ask for it: the sum over batches and queries of
 * P_sink (dLSE - Delta), +0 for a -inf sink. Both prefilled like dQ: every element must
 * be written. A plugin without a bit never gets the output (those cases are skipped as not
 * claimed); one with it may still decline a case (SMATTN_ERR_UNSUPPORTED). */
enum smattn_plugin_caps_backward {
    SMATTN_CAP_BACKWARD_DETERMINISTIC = 1u << 25,
    SMATTN_CAP_BACKWARD_DBIAS = 1u << 26,
    SMATTN_CAP_BACKWARD_DSINKS = 1u << 27
};

#ifdef __cplusplus
}
#endif
#endif /* SMATTN_KERNEL_H */
