/* SPDX-License-Identifier: MIT */
/* smattn.h: the public contract of smattn, scaled masked softmax attention made checkable.
 *
 * Everything here restates spec/SPEC.md (version SMATTN_SPEC_VERSION); section numbers
 * like "SPEC 4.2" point there. One problem descriptor serves every implementation: the
 * exact oracle (smattn_ref), the error bound (smattn_bound) and, later, the optimised
 * kernel and plugins under test.
 *
 * Thread safety: every function is reentrant and may be called from several threads at
 * once on distinct outputs. The library never aborts, prints, or touches errno; every
 * failure is a status code. Every function is defined for every input: an overflow is
 * reported (SMATTN_ERR_OVERFLOW), not computed.
 *
 * Alignment: a tensor's data may be at any address (elements are copied bytewise or read
 * by unaligned vector loads); an odd address gives the aligned copy's bits (SPEC 7.3).
 * Threads: never more than the online cores, whatever is requested; memory O(threads x T).
 * fork(): the library works in a child, also after threaded calls in the parent or a fork
 * during one in another thread (the kernel's pool is rebuilt in the child, SPEC 7.3).
 */
#ifndef SMATTN_H
#define SMATTN_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define SMATTN_VERSION_MAJOR 0
#define SMATTN_VERSION_MINOR 1
#define SMATTN_VERSION_PATCH 0
#define SMATTN_SPEC_VERSION "1.2"

#if defined(__GNUC__) || defined(__clang__)
#define SMATTN_NODISCARD __attribute__((warn_unused_result))
#else
#define SMATTN_NODISCARD
#endif

/* ---------------------------------------------------------------------------------------
 * Status codes. Pinned: a value is never renumbered or reused.
 * ------------------------------------------------------------------------------------- */
typedef enum smattn_status {
    SMATTN_OK = 0,
    SMATTN_ERR_NULL = 1,       /* a required pointer is NULL */
    SMATTN_ERR_SHAPE = 2,      /* a dimension is < 1 (or out of range), or shapes disagree */
    SMATTN_ERR_HEADS = 3,      /* Hq is not a multiple of Hkv */
    SMATTN_ERR_STRIDE = 4,     /* a stride is negative */
    SMATTN_ERR_OVERFLOW = 5,   /* a size or an element offset does not fit in int64 */
    SMATTN_ERR_DTYPE = 6,      /* a dtype is unknown or not allowed for that tensor */
    SMATTN_ERR_SCALE = 7,      /* scale is NaN or infinite, or a descale (SPEC 2.9) is not a
                                  positive finite binary32 value */
    SMATTN_ERR_SOFTCAP = 8,    /* softcap is negative, NaN or infinite */
    SMATTN_ERR_WINDOW = 9,     /* a window bound is < -1 */
    SMATTN_ERR_LENGTHS = 10,   /* a kv_lens / q_lens entry is outside [0, T] / [0, S] */
    SMATTN_ERR_OPTION = 11,    /* an enum field holds an unknown value */
    SMATTN_ERR_NOMEM = 12,     /* memory allocation failed */
    SMATTN_ERR_PRECISION = 13, /* oracle: rounding not decided within the precision limit */
    SMATTN_ERR_THREADS = 14,   /* a thread could not be started */
    SMATTN_ERR_UNSUPPORTED = 15, /* valid per the spec, but not supported by this entry point */
    SMATTN_ERR_ALIAS = 16,     /* an output overlaps itself, another output or an input */
    SMATTN_ERR_INTERNAL = 17,  /* an internal consistency check failed (a bug: report it) */
    SMATTN_ERR_LAYOUT = 18,    /* a ragged or paged layout is inconsistent (SPEC 2.7): a
                                  cu_seqlens that decreases or does not end where it must, a
                                  used block-table entry outside [0, num_pages), a length
                                  past a sequence's slice or its table's capacity */
    SMATTN_ERR_ALIBI = 20      /* ALiBi (SPEC 2.8): a slope NaN or infinite, the mask mode
                                  without a bias, or S or T above 2^29 */
} smattn_status;

/* A sentence describing a status; never NULL (unknown codes get a generic sentence). */
const char *smattn_status_str(smattn_status s);
/* The enum's name, e.g. "SMATTN_ERR_SHAPE"; never NULL. */
const char *smattn_status_name(smattn_status s);

/* ---------------------------------------------------------------------------------------
 * Element types (SPEC 2.6, 2.9). IEEE binary64/32/16 and bfloat16 (binary32's top 16 bits).
 * SMATTN_BOOL is one byte per element, 0 = false, anything else = true (masks only).
 * Appended in 0.3, inputs only (SPEC 2.9): the 8-bit floats fp8 e4m3fn (no infinity, NaN
 * S.1111.111, max 448) and e5m2 (IEEE-like) for Q, K and V; llama.cpp's block formats
 * q8_0 and q4_0 for K and V, SMATTN_QBLOCK elements per block along D (resp. Dv).
 * ------------------------------------------------------------------------------------- */
typedef enum smattn_dtype {
    SMATTN_F64 = 0,
    SMATTN_F32 = 1,
    SMATTN_F16 = 2,
    SMATTN_BF16 = 3,
    SMATTN_BOOL = 4,
    SMATTN_F8E4M3 = 5, /* OCP float8 e4m3fn: bias 7, no infinity, NaN = S.1111.111 */
    SMATTN_F8E5M2 = 6, /* OCP float8 e5m2: bias 15, IEEE infinities and NaNs */
    SMATTN_Q8_0 = 7,   /* block of 32: f16 scale d, then 32 int8 q; x_j = d q_j */
    SMATTN_Q4_0 = 8    /* block of 32: f16 scale d, then 16 bytes; x_j = d (n_j - 8), n_j the
                          low nibble of byte j (j < 16) or the high nibble of byte j - 16 */
} smattn_dtype;

/* Elements per block of the block formats (q8_0, q4_0). */
#define SMATTN_QBLOCK 32

/* Bytes per storage unit (0 for an unknown dtype): one element, or for q8_0 (34) and q4_0
 * (18) one block of smattn_dtype_block(t) elements. A short name ("f64", "bf16", "bool",
 * "f8e4m3", "f8e5m2", "q8_0", "q4_0"). */
size_t smattn_dtype_size(smattn_dtype t);
const char *smattn_dtype_name(smattn_dtype t);
/* Elements per storage unit: SMATTN_QBLOCK for q8_0 and q4_0, 1 for the other dtypes, 0 for
 * an unknown one. A tensor of n elements (n a multiple of it) takes n / block * size bytes.
 * Appended in 0.3. */
int64_t smattn_dtype_block(smattn_dtype t);

/* ---------------------------------------------------------------------------------------
 * Tensors: a base pointer, an element type and strides in elements. The logical shape
 * comes from the problem (SPEC 2.1). Strides may be 0 (broadcast) for inputs; outputs
 * must not overlap themselves or each other. Unused trailing strides are ignored.
 * ------------------------------------------------------------------------------------- */
typedef struct smattn_tensor {
    const void *data;       /* NULL: absent (for optional inputs) */
    smattn_dtype dtype;
    int64_t stride[4];
} smattn_tensor;

typedef struct smattn_out_tensor {
    void *data;             /* NULL: not wanted (O is required for attention) */
    smattn_dtype dtype;     /* F64, F32, F16 or BF16 */
    int64_t stride[4];
} smattn_out_tensor;

typedef enum smattn_op {
    SMATTN_OP_ATTENTION = 0, /* Q, K, V -> O, LSE, P */
    SMATTN_OP_SOFTMAX = 1    /* X -> P, LSE */
} smattn_op;

typedef enum smattn_causal {
    SMATTN_CAUSAL_NONE = 0,
    SMATTN_CAUSAL_LOWER_RIGHT = 1, /* query i sees key j iff j <= i + T_b - S_b (KV cache) */
    SMATTN_CAUSAL_UPPER_LEFT = 2   /* query i sees key j iff j <= i (PyTorch is_causal) */
} smattn_causal;

/* What a row with no visible key and no sink gives (SPEC 3.4). */
typedef enum smattn_empty {
    SMATTN_EMPTY_ZERO = 0, /* P = +0, O = +0 (PyTorch >= 2.5, FlashAttention, ONNX errata) */
    SMATTN_EMPTY_NAN = 1,  /* P = NaN, O = NaN (plain softmax of all -inf) */
    SMATTN_EMPTY_MEAN = 2  /* P = 1/T_b over keys [0, T_b), O = their mean of V (finite mask) */
} smattn_empty;

/* The LSE of such a row (SPEC 3.4). */
typedef enum smattn_empty_lse {
    SMATTN_LSE_NEG_INF = 0, /* -inf: log of an empty sum (default) */
    SMATTN_LSE_POS_INF = 1, /* +inf: FlashAttention-2 */
    SMATTN_LSE_ZERO = 2     /* 0: PyTorch CPU flash kernel */
} smattn_empty_lse;

/* ALiBi without a dense bias (SPEC 2.8): a bias computed from each key's distance, times
 * the head's slope m, added to the score after softcap and after the bias input.
 *   SYMMETRIC: -m |i + T_b - S_b - j|, aligned lower-right (FlashAttention's alibi_slopes)
 *   ONE_SIDED: m (j - T_b + 1), to the last key (vLLM's paged attention)
 *   MASK:      m * bias_ij: the bias input holds -|distance| or -inf (llama.cpp's f16 mask),
 *              scaled by the slope instead of added as is */
typedef enum smattn_alibi_mode {
    SMATTN_ALIBI_NONE = 0,
    SMATTN_ALIBI_SYMMETRIC = 1,
    SMATTN_ALIBI_ONE_SIDED = 2,
    SMATTN_ALIBI_MASK = 3
} smattn_alibi_mode;

/* The problem (SPEC 2). Shapes:
 *   Q [B,S,Hq,D]   K [B,T,Hkv,D]   V [B,T,Hkv,Dv]   X [B,Hq,S,T] (softmax)
 *   O [B,S,Hq,Dv]  LSE [B,Hq,S]    P [B,Hq,S,T]
 *   bias, mask: [B,Hq,S,T] with stride 0 on broadcast dims;  sinks: [Hq]
 * Query head h reads KV head h / (Hq / Hkv). For softmax, Hkv, D and Dv are ignored. */
typedef struct smattn_problem {
    smattn_op op;
    int64_t B, S, T, Hq, Hkv, D, Dv;
    double scale;           /* exact multiplier of q.k (softmax: of x); see smattn_default_scale */
    double softcap;         /* 0: none; c > 0: s -> c*tanh(s/c), before bias and masks */
    smattn_causal causal;
    int64_t window_left;    /* -1: unbounded; else key j >= diag - left is required */
    int64_t window_right;   /* -1: unbounded; else key j <= diag + right is required */
    const int64_t *kv_lens; /* [B] keys [kv_lens[b], T) are padding; NULL: all T */
    const int64_t *q_lens;  /* [B] queries [q_lens[b], S) are padding; NULL: all S */
    smattn_empty empty_rows;
    smattn_empty_lse empty_lse;
    /* Appended in 0.2: where each query and key lives (SPEC 2.7). NULL: dense and padded,
     * as above. smattn_problem_default() sets it NULL, so callers that start from it (or
     * zero the struct) keep their meaning. */
    const struct smattn_layout *layout;
    /* Appended in 0.3: ALiBi (SPEC 2.8). smattn_problem_default() sets NONE and NULL. */
    smattn_alibi_mode alibi_mode;
    const float *alibi_slopes;  /* [Hq] binary32 slopes, or [B][Hq] with the flag below;
                                   required (SMATTN_ERR_NULL) unless alibi_mode is NONE */
    int alibi_slopes_per_batch; /* nonzero: B lists of Hq slopes, batch b at b * Hq */
    /* Appended in 0.3: descales of quantised inputs (SPEC 2.9). NULL: none (every factor 1).
     * The real input is the decoded element times its factor, exactly. */
    const struct smattn_descale *descale;
} smattn_problem;

/* Descales (SPEC 2.9): Q, K and V's real values are their decoded elements times a
 * factor, one per tensor (vLLM's k_scale, v_scale) or one per (batch, KV head)
 * (FlashAttention 3's q/k/v_descale; query head h takes the factor of its KV head
 * h / (Hq / Hkv)). Each factor is taken from the per-head array when it is not NULL, else
 * from the number. Every factor used must be a binary32 value, finite and > 0
 * (SMATTN_ERR_SCALE), and 1 on a binary64 tensor (SMATTN_ERR_DTYPE): the products are then
 * exact in binary64. Attention only (softmax with a descale: SMATTN_ERR_UNSUPPORTED). */
typedef struct smattn_descale {
    double q, k, v;            /* per-tensor factors (1: none) */
    const double *q_head;      /* [B][Hkv] (row-major) or NULL */
    const double *k_head;      /* [B][Hkv] or NULL */
    const double *v_head;      /* [B][Hkv] or NULL */
} smattn_descale;

/* Every factor 1, no per-head arrays (a zeroed struct is invalid: factors must be > 0).
 * Appended in 0.3. */
smattn_descale smattn_descale_default(void);

/* Ragged (packed) and paged layouts (SPEC 2.7). A problem with a layout IS its dense,
 * padded twin: B, S, T, the masks, q_lens/kv_lens, bias, sinks and P keep their dense
 * meaning and shapes; only where Q/O/LSE rows and K/V keys are read and written changes.
 *   cu_seqlens_q [B+1]: packed queries. Sequence b owns rows [cu[b], cu[b+1]) of
 *     Q [1, total_q, Hq, D] and O [1, total_q, Hq, Dv] (stride[0] unused); LSE is
 *     [1, Hq, total_q]. S_b = cu[b+1] - cu[b] <= S; prob->q_lens must be NULL.
 *   cu_seqlens_k [B+1]: packed keys, K [1, total_k, Hkv, D], V [1, total_k, Hkv, Dv];
 *     T_b = seqused_k ? seqused_k[b] : cu[b+1] - cu[b], <= T; prob->kv_lens must be NULL.
 *   block_table [B x bt_stride] int32: paged keys. K [num_pages, page_size, Hkv, D] and
 *     V [num_pages, page_size, Hkv, Dv] (NHD; HND is the same with other strides): key t
 *     of sequence b is slot t % page_size of page block_table[b * bt_stride + t / page_size].
 *     prob->kv_lens is required (T_b); T <= max_pages * page_size. Entries past the pages a
 *     sequence uses are never read (they may hold -1), nor are unused slots or pages.
 * cu_seqlens_k and block_table are exclusive; either may be combined with cu_seqlens_q.
 * A packed batch's padding rows [S_b, S) have no O or LSE (their row of P is the twin's).
 * The softmax op reads no layout: a problem with one is SMATTN_ERR_UNSUPPORTED. */
typedef struct smattn_layout {
    const int64_t *cu_seqlens_q; /* [B+1] or NULL: Q, O, LSE dense */
    const int64_t *cu_seqlens_k; /* [B+1] or NULL */
    const int64_t *seqused_k;    /* [B] or NULL; only with cu_seqlens_k */
    const int32_t *block_table;  /* [B][bt_stride] or NULL */
    int64_t bt_stride;           /* elements between rows of block_table, >= max_pages */
    int64_t max_pages;           /* table columns, >= 1 with a block table */
    int64_t num_pages;           /* pages in the K and V caches, >= 1 with a block table */
    int64_t page_size;           /* slots per page, >= 1 (any size, not only powers of 2) */
} smattn_layout;

typedef struct smattn_inputs {
    smattn_tensor q, k, v;  /* attention */
    smattn_tensor x;        /* softmax */
    smattn_tensor bias;     /* optional, additive, may hold -inf (masks the key) */
    smattn_tensor mask;     /* optional, SMATTN_BOOL, true = may attend */
    smattn_tensor sinks;    /* optional, [Hq] logits that join only the denominator */
} smattn_inputs;

typedef struct smattn_outputs {
    smattn_out_tensor o, lse, p;
} smattn_outputs;

/* A problem with every optional feature off: no mask, softcap 0, windows -1, the zero
 * convention, scale 1. Shapes are zero: the caller sets them. */
smattn_problem smattn_problem_default(void);

/* The default scale: the binary64 number nearest 1/sqrt(D) (SPEC 2.3). 0 if D < 1 or
 * D > 2^32 (the largest dimension a problem may have). */
double smattn_default_scale(int64_t D);

/* Contiguous (row-major) strides for a tensor role, so callers need not compute them.
 * role: 'q','k','v','x','o','l' (LSE),'p','b' (bias/mask, full shape), 's' (sinks).
 * With a layout (SPEC 2.7): Q, O packed [1, total_q, H, D] and LSE [1, Hq, total_q] with
 * cu_seqlens_q (total_q = cu_seqlens_q[B], read when B >= 1); K, V packed [1, total_k,
 * Hkv, D] with cu_seqlens_k, or pages [num_pages, page_size, Hkv, D] with a block table
 * (NHD: for HND swap strides 1 and 2); stride[0] spans the packed tensor (one page). The
 * layout's arrays must be readable; P, bias and mask keep the dense shapes.
 * Defined for any input: the strides are all 0 unless it returns SMATTN_OK; an unknown
 * role is SMATTN_ERR_OPTION, a negative extent SMATTN_ERR_SHAPE, a stride that does not
 * fit in int64 SMATTN_ERR_OVERFLOW, NULL SMATTN_ERR_NULL. */
smattn_status smattn_contiguous_strides(const smattn_problem *prob, char role, int64_t stride[4]);

/* Check the whole descriptor against SPEC 2 (shapes, heads, strides, overflow of every
 * element offset, dtypes, options). Returns SMATTN_OK or the first problem found. */
SMATTN_NODISCARD smattn_status smattn_validate(const smattn_problem *prob,
                                               const smattn_inputs *in,
                                               const smattn_outputs *out);

/* smattn_validate that also says why, in one line naming the field and, for a layout,
 * the sequence and the entry ("block_table[2][5] = 97 is outside [0, 64)"); "" on
 * SMATTN_OK. msg may be NULL when cap is 0; the line is cut to cap - 1 bytes. */
SMATTN_NODISCARD smattn_status smattn_validate_explain(const smattn_problem *prob,
                                                       const smattn_inputs *in,
                                                       const smattn_outputs *out, char *msg,
                                                       size_t cap);

/* Visibility (SPEC 3.1-3.3): nonzero iff key j is visible to query i of batch b, head h,
 * before bias and data-dependent masking (causal, window, kv_lens, q_lens, bool mask).
 * The descriptor must have passed smattn_validate; indices outside [0,B) x [0,Hq) x [0,S)
 * x [0,T) (or NULL) give 0. */
int smattn_visible(const smattn_problem *prob, const smattn_inputs *in, int64_t b, int64_t h,
                   int64_t i, int64_t j);

/* ---------------------------------------------------------------------------------------
 * The exact oracle (ref/, SPEC 5). Every output is the exact value of SPEC 3-4 rounded to
 * nearest-even in its dtype. A row is either fully written or the call fails; on failure
 * the outputs hold unspecified values.
 * ------------------------------------------------------------------------------------- */
/* Precision limits of smattn_ref_config, in bits. The upper one is far below MPFR_PREC_MAX
 * on purpose: a row's MPFR phase holds O(T + Dv) numbers of up to max_prec bits per thread
 * (2^20 bits = 128 KiB each), and GMP aborts when an allocation fails. */
#define SMATTN_REF_PREC_MIN 64L
#define SMATTN_REF_PREC_MAX (1L << 20)

/* Every field is range-checked before any work: out of range is SMATTN_ERR_OPTION. */
typedef struct smattn_ref_config {
    int threads;          /* >= 0; 0: all online cores; more than the online cores are
                             capped to them; rows are split, results do not depend on it */
    long max_prec;        /* Ziv loop limit in bits: 0 (default, 16384) or in
                             [SMATTN_REF_PREC_MIN, SMATTN_REF_PREC_MAX] */
    int no_fast_phase;    /* nonzero: skip the double-double phase (testing) */
    long fixed_prec;      /* 0, or start the MPFR phase at this precision (testing), in
                             [SMATTN_REF_PREC_MIN, SMATTN_REF_PREC_MAX] */
} smattn_ref_config;

typedef struct smattn_ref_stats {
    int64_t rows;            /* rows evaluated */
    int64_t rows_empty;      /* rows with no visible key and no sink */
    int64_t rows_fast;       /* rows decided entirely in the fast phase */
    int64_t rows_rational;   /* rows with an element on the exact rational path */
    int64_t elems_sign_test; /* elements decided by the sign of the shifted sum */
    long max_prec_used;      /* highest MPFR precision any row needed */
} smattn_ref_stats;

/* The oracle. cfg and stats may be NULL. */
SMATTN_NODISCARD smattn_status smattn_ref(const smattn_problem *prob, const smattn_inputs *in,
                                          const smattn_outputs *out,
                                          const smattn_ref_config *cfg,
                                          smattn_ref_stats *stats);

/* smattn_ref with a progress report, for a display (the library itself never prints):
 * progress (may be NULL) is called with the work done so far and the work in all, only
 * from the calling thread (so it needs no locking), as that thread finishes rows and
 * within a long row (every few thousand keys of work: a decode has a single row), and once
 * at the end with done == total (not after a validation failure). done never decreases.
 * The unit is a key slot: each row counts T (total = B Hq S T), or 1 when B Hq S T would
 * overflow int64 (then total = B Hq S and there is no report within a row); within a row
 * done is an estimate that stays short of the row's end until the row is finished. It
 * must not call back into the library. Results are those of smattn_ref. */
typedef void (*smattn_progress_fn)(int64_t done, int64_t total, void *arg);
SMATTN_NODISCARD smattn_status smattn_ref_progress(const smattn_problem *prob,
                                                   const smattn_inputs *in,
                                                   const smattn_outputs *out,
                                                   const smattn_ref_config *cfg,
                                                   smattn_ref_stats *stats,
                                                   smattn_progress_fn progress, void *arg);

/* The exact backward (SPEC 10), appended in 0.2. Gradients of a loss with respect to the
 * attention inputs, given the gradient dO of its output O (and optionally dLSE of its LSE),
 * shapes of a dense problem (a layout's: smattn_ref_backward below):
 *   dout [B,S,Hq,Dv] (required), dlse [B,Hq,S] (optional: data NULL means dLSE = 0), any
 *   float dtype, strides >= 0 as for the inputs of SPEC 2.1.
 *   dq [B,S,Hq,D], dk [B,T,Hkv,D], dv [B,T,Hkv,Dv] (required), any float dtype; dk and dv
 *   hold the sums over each KV head's group of query heads (SPEC 2.2).
 *   dbias [B,Hq,S,T] (optional, with or without a bias input): dS, +0 where the key is not
 *   visible; a stride 0 on a dimension sums over it (a broadcast bias's own shape: the
 *   tensor has extent 1 there, SPEC 10.1). dsinks [Hq] (optional): the sum over batches
 *   and queries
 *   of P_sink (dLSE - Delta); +0 for a head without a sink (absent or -inf).
 * No output may overlap itself, another output, or any input (SMATTN_ERR_ALIAS). */
typedef struct smattn_grad_inputs {
    smattn_tensor dout; /* dO */
    smattn_tensor dlse; /* dLSE, optional */
} smattn_grad_inputs;

typedef struct smattn_grad_outputs {
    smattn_out_tensor dq, dk, dv;
    smattn_out_tensor dbias;  /* optional, [B,Hq,S,T]; stride 0: summed there (SPEC 10.1) */
    smattn_out_tensor dsinks; /* optional, [Hq] (SPEC 10.1) */
} smattn_grad_outputs;

/* Every element of dq, dk, dv (and dbias, dsinks) is the exact value of SPEC 10.1 (with the
 * conventions of 10.2) rounded to nearest-even in its dtype (SPEC 10.3). Attention problems
 * only (softmax: SMATTN_ERR_UNSUPPORTED). A layout (SPEC 2.7, 10.1): dout, dlse and dq in
 * O's, LSE's and Q's storage (a packed batch's padding rows have none and add nothing), dk
 * and dv in K's and V's (packed rows or the page pool, written through the block table;
 * storage no key t < T_b or stored row reaches gets +0); a page two used block-table entries
 * name is SMATTN_ERR_LAYOUT. ALiBi enters as in the forward (no slope gradient; dbias with
 * SMATTN_ALIBI_MASK is SMATTN_ERR_UNSUPPORTED). cfg and stats as for smattn_ref (stats: rows and rows_empty
 * count query rows, rows_fast the elements decided by the binary64 and double-double tiers,
 * rows_rational those decided by an exact expansion; no_fast_phase skips both tiers).
 * Statuses: validation's, NOMEM, THREADS, OPTION, and SMATTN_ERR_PRECISION only where
 * SPEC 10.3 allows it (softcap, or an exact expansion larger than the oracle's limit); never
 * a wrong rounding. Deterministic, independent of the thread count. */
SMATTN_NODISCARD smattn_status smattn_ref_backward(const smattn_problem *prob,
                                                   const smattn_inputs *in,
                                                   const smattn_grad_inputs *gin,
                                                   const smattn_grad_outputs *gout,
                                                   const smattn_ref_config *cfg,
                                                   smattn_ref_stats *stats);


/* ---------------------------------------------------------------------------------------
 * The error bound (SPEC 6) and the error metrics shared by tests, fuzzers and the checker.
 * ------------------------------------------------------------------------------------- */
/* The kernel model of SPEC 6.1. Every bound term is non-decreasing in every field, so a
 * kernel doing more operations than the model counts is covered by raising u_* or
 * exp_ulps. The overflow range of each arithmetic is deduced from its unit roundoff
 * (2^-11: binary16; <= 2^-53: binary64; otherwise binary32), SPEC 6.8. */
typedef struct smattn_precision {
    double u_score;   /* unit roundoff of the score arithmetic (q.k, the scale rounded once
                         and applied once, softcap, bias), e.g. 2^-24 */
    double u_acc;     /* unit roundoff of the softmax and P.V arithmetic */
    double exp_ulps;  /* max error of the kernel's exp, log (in the u_acc format) and tanh
                         (in the u_score format), in ulps of the result */
    double u_p;       /* P rounded to this before P.V (e.g. 2^-8 for bf16); 0 if not. The
                         row sum is assumed taken before that rounding (SPEC 6.1 A4) */
    int64_t blocks;   /* online-softmax key blocks (rescalings), >= 1; 1 for two passes */
    int64_t acc_len;  /* every term passes through at most acc_len - 1 additions; 0 means
                         n = visible keys (+ sink), a serial sum */
    double tiny;      /* absolute underflow per exp/product: subnormal spacing, or the
                         smallest normal if the kernel flushes to zero */
} smattn_precision;

/* The model of a plain kernel computing in dtype t (F32: u = 2^-24, exp within 4 ulps,
 * one block, serial sums). */
smattn_precision smattn_precision_of(smattn_dtype t);

/* Per-element bounds on |computed - exact| for a kernel obeying `pm` whose outputs are
 * rounded to the dtypes in `fmt` (only the dtypes of fmt are read). Bounds are written as
 * binary64 into `bound` (the tensors wanted: O, LSE and/or P; their dtype must be F64; O
 * is required for attention, as in smattn_ref). The bound also covers comparing against
 * the oracle's binary64 result instead of the real exact value (SPEC 6.9). Elements whose
 * exact value is not finite (SPEC 4.2) get +inf: they are compared by class, not by size.
 * A finite exact value with bound +inf means the row (or O column) is out of contract or
 * unbounded (SPEC 6.3, 6.8): report it separately. Exact zeros (invisible P, empty rows)
 * get 0. Status: validation's, SMATTN_ERR_DTYPE, SMATTN_ERR_OPTION (pm out of range),
 * SMATTN_ERR_NOMEM. */
SMATTN_NODISCARD smattn_status smattn_bound(const smattn_problem *prob,
                                            const smattn_inputs *in,
                                            const smattn_precision *pm,
                                            const smattn_outputs *fmt,
                                            const smattn_outputs *bound);

/* SPEC 6.11's departures of a quantised kernel from the real inputs (Q2-Q4), beside its
 * smattn_precision (Q1, descales folded into the scale, is a larger u_score). A struct of
 * its own, so smattn_precision keeps its size. Appended in 0.3.
 *   v_descale_after (Q2): the kernel computes O of the problem with f_v = 1, rounds it to
 *     the output's dtype, multiplies by f_v and rounds again (FlashInfer);
 *   omega_p (Q3): the subnormal spacing of the format P is rounded to before P.V (with
 *     pm->u_p its unit roundoff): 2^-9 for e4m3, 2^-16 for e5m2; 0: no such underflow;
 *   u_q, eta_q, q_block (Q4): Q rounded before the dot product, |q^_d - q_d| <= u_q A + eta_q
 *     with A the largest |q| of d's block of q_block elements along D (1: each element
 *     alone; 32: q8_0); u_q = 0: Q read exactly. */
typedef struct smattn_quant_model {
    int v_descale_after;
    double omega_p;
    double u_q, eta_q;
    int64_t q_block;
} smattn_quant_model;

/* Every departure off (v_descale_after 0, omega_p 0, u_q 0, eta_q 0, q_block 1): the model of
 * smattn_precision alone. Appended in 0.3. */
smattn_quant_model smattn_quant_model_default(void);
/* Q rounded as ggml rounds it before its dot product with K (SPEC 6.11 Q4): SMATTN_F16
 * (u_q 2^-11, eta_q 2^-25, blocks of 1) or SMATTN_Q8_0 (u_q (1/2 + 2^-15 + 127 2^-11
 * (1 + 2^-12)) / 127, eta_q 127 2^-25, blocks of 32); any other dtype: the default. */
smattn_quant_model smattn_quant_model_of(smattn_dtype q_rounded_to);

/* smattn_bound for a kernel obeying pm with the departures of qm (NULL: none, the bound of
 * smattn_bound bit for bit). Status: smattn_bound's; SMATTN_ERR_OPTION also for qm out of
 * range (omega_p, u_q, eta_q not in [0, 1), q_block not in [1, D] or not dividing D);
 * v_descale_after needs O's dtype in fmt to be f16, bf16 or f32 (SMATTN_ERR_DTYPE). */
SMATTN_NODISCARD smattn_status smattn_bound_quant(const smattn_problem *prob,
                                                  const smattn_inputs *in,
                                                  const smattn_precision *pm,
                                                  const smattn_quant_model *qm,
                                                  const smattn_outputs *fmt,
                                                  const smattn_outputs *bound);

/* Distance in units in the last place of dtype t between a computed value and the exact
 * value (given as the oracle's binary64 result, or any closer value): |c - e| / ulp(e),
 * with ulp(e) the spacing of t at e (subnormal spacing below the normal range). NaN
 * against NaN and equal infinities give 0; a class mismatch gives +inf. */
double smattn_ulp_error(double computed, double exact, smattn_dtype t);

/* Error ratio |c - e| / bound (SPEC 6.10): 0 when c == e (-0 == +0) or both are NaN; +inf
 * for NaN against non-NaN, for an infinite e with c != e, and for bound 0 with c != e. A
 * bound of +inf accepts any non-NaN c against a finite e (ratio 0): an output that may
 * overflow, or a row out of contract. A kernel meets the bound iff the ratio is <= 1. */
double smattn_error_ratio(double computed, double exact, double bound);

/* ---------------------------------------------------------------------------------------
 * The optimised kernel (opt/): flash-attention tiles, SIMD (AVX-512, AVX2+FMA, or a
 * portable scalar instance, chosen at run time), a persistent thread pool, and one
 * scratch block per call of smattn_attention and smattn_softmax, the last one (up to
 * 32 MiB) kept for the next call until the process ends.
 * Supported: Q, K, V, X, bias and sinks in float32, binary16 or bfloat16, in any
 * combination, Q, K, V also fp8 e4m3fn / e5m2 and K, V q8_0 / q4_0 (SPEC 2.9; read exactly
 * into binary32, a block format dequantised once per key tile), with descales per tensor
 * or per (batch, KV head): Q's and K's folded into the scale, V's into the denominator of O
 * (SPEC 6.11, within the same model); O, LSE and P in float32, binary16 or bfloat16
 * (each its own); every mask kind, softcap, sinks and empty-row convention. binary64
 * tensors give SMATTN_ERR_UNSUPPORTED. A binary16 or bfloat16 output is the float32 result
 * rounded once, nearest-even (overflow to +-inf, NaN as in SPEC 4.3): its bits are those
 * of the float32 output rounded, except on rows of the binary64 path (NaN, overflow, the
 * mean convention), rounded once from binary64. Outputs are within the bound of SPEC 6 for
 * the model smattn_opt_precision(); they are bitwise identical for any thread count, across
 * repeated calls, and between a GQA problem and its MHA expansion (but not across ISAs).
 * Safe to call from several threads.
 * ------------------------------------------------------------------------------------- */
typedef struct smattn_opt_config {
    int threads;     /* >= 0; 0: SMATTN_NUM_THREADS, else all online cores; capped at the
                        online cores (results do not depend on the count) */
    const char *isa; /* NULL: the active ISA; else "scalar", "avx2" or "avx512" (any other
                        name: SMATTN_ERR_OPTION; one this CPU lacks: SMATTN_ERR_UNSUPPORTED) */
} smattn_opt_config;

/* Max error of the kernel's binary32 exp in ulps, measured over every binary32 input by
 * `make check-exp` (inputs whose result is below FLT_MIN are flushed to +0). */
#define SMATTN_OPT_EXP_ULPS 2.0

/* op must be SMATTN_OP_ATTENTION (resp. SMATTN_OP_SOFTMAX). cfg may be NULL. */
SMATTN_NODISCARD smattn_status smattn_attention(const smattn_problem *prob,
                                                const smattn_inputs *in,
                                                const smattn_outputs *out,
                                                const smattn_opt_config *cfg);
SMATTN_NODISCARD smattn_status smattn_softmax(const smattn_problem *prob,
                                              const smattn_inputs *in,
                                              const smattn_outputs *out,
                                              const smattn_opt_config *cfg);
/* The precision model (SPEC 6.1) the kernel claims for a problem: binary32 scores and
 * accumulation, exp within SMATTN_OPT_EXP_ULPS (tanh and log within 2 ulps, glibc), one
 * rescaling per key tile plus the split-K merge, serial accumulation over the keys,
 * results below FLT_MIN flushed (tiny 2^-126, or f_v 2^-150 for a V descale f_v above
 * 2^24: the descale scales the P.V's underflow). The same model for every output dtype,
 * with or without descales and quantised inputs (SPEC 6.11): the binary32
 * result (its last rounding counted in A4) is rounded once more to the output's dtype
 * (A6), whose unit roundoff smattn_bound takes from the dtypes of `fmt` (binary16 2^-11,
 * bfloat16 2^-8, binary32 2^-24, as for any kernel): pass the kernel's output dtypes
 * there. Tests and the checker judge the kernel against it. */
smattn_precision smattn_opt_precision(const smattn_problem *prob);
/* The ISA in use ("avx512", "avx2" or "scalar"); SMATTN_ISA forces one the CPU has. */
const char *smattn_opt_isa(void);
/* What became of the environment variable SMATTN_ISA (read once, with smattn_opt_isa):
 * 0 unset or empty, 1 honoured, -1 not an ISA name (ignored), -2 an ISA this CPU lacks
 * (ignored). An ignored value leaves smattn_opt_isa() at the best ISA the CPU has. The
 * library never prints: a tool that wants to say so calls this. */
int smattn_opt_isa_env(void);
/* Nonzero if the named ISA can run on this CPU. */
int smattn_opt_isa_available(const char *name);

/* ---------------------------------------------------------------------------------------
 * Element conversion (SPEC 2.6): load any dtype as binary64 (exact), and round a binary64
 * to a dtype with nearest-even (one rounding, IEEE subnormals and overflow).
 * ------------------------------------------------------------------------------------- */
/* base + offset must address an element (any alignment: bytes are copied); an unknown
 * dtype loads NaN and stores nothing. For q8_0 and q4_0 the offset counts elements (its
 * block is offset / 32, SPEC 2.9) and a store writes nothing; a store to e4m3 gives NaN
 * for what rounds past 448 (no infinity). */
double smattn_load(const void *base, smattn_dtype t, int64_t offset);
void smattn_store(void *base, smattn_dtype t, int64_t offset, double x);

/* ---------------------------------------------------------------------------------------
 * Merging partial attention states (SPEC 9). Split-KV, cascade and context-parallel
 * attention compute N partial states (O_n, LSE_n), each over a disjoint set of keys of the
 * same row, and merge them: LSE = log_b sum_n b^LSE_n, O = sum_n b^(LSE_n - LSE) O_n.
 * Shapes: o_parts [N,B,S,Hq,Dv], lse_parts [N,B,Hq,S]; outputs O [B,S,Hq,Dv] and LSE
 * [B,Hq,S] (the forward's). Appended in 0.2.
 * ------------------------------------------------------------------------------------- */
/* The base of every LSE of a merge: e (FlashAttention, vLLM, xformers, smattn_ref) or 2
 * (FlashInfer's cascade states). */
typedef enum smattn_lse_base {
    SMATTN_LSE_BASE_E = 0,
    SMATTN_LSE_BASE_2 = 1
} smattn_lse_base;

typedef struct smattn_merge_problem {
    int64_t N, B, S, Hq, Dv;        /* each in [1, 2^32] (SMATTN_ERR_SHAPE) */
    smattn_lse_base lse_base;       /* base of lse_parts and of the merged LSE */
    smattn_empty_lse empty_parts;   /* how an empty partial's LSE is written: NEG_INF (the
                                       identity (0, -inf); FlashInfer, vLLM) or POS_INF
                                       (FlashAttention-2's kernels); ZERO: SMATTN_ERR_OPTION */
    smattn_empty empty_rows;        /* O of a row whose partials are all empty: ZERO or NAN;
                                       MEAN: SMATTN_ERR_OPTION (partials carry no keys) */
    smattn_empty_lse empty_lse;     /* the merged LSE of such a row (SPEC 3.4's sentinels) */
} smattn_merge_problem;

/* Partial n's O is o_parts at element offset n * o_part_stride plus the [B,S,Hq,Dv]
 * offset of o_parts.stride; its LSE likewise with lse_parts.stride[0..2] over [B,Hq,S]
 * (stride[3] unused). Strides >= 0; 0 broadcasts. */
typedef struct smattn_merge_inputs {
    smattn_tensor o_parts;
    int64_t o_part_stride;
    smattn_tensor lse_parts;
    int64_t lse_part_stride;
} smattn_merge_inputs;

/* A merge problem with lse_base e, empty partials -inf, empty rows zero with LSE -inf.
 * Shapes are zero: the caller sets them. */
smattn_merge_problem smattn_merge_problem_default(void);

/* Check a merge descriptor (SPEC 9.1): NULL pointers (SMATTN_ERR_NULL; o_parts, lse_parts,
 * and at least one of out->o and out->lse), shapes, strides, int64 overflow of every
 * offset, dtypes (float; SMATTN_ERR_DTYPE), options (SMATTN_ERR_OPTION, also out->p given),
 * outputs overlapping themselves, each other or an input (SMATTN_ERR_ALIAS). */
SMATTN_NODISCARD smattn_status smattn_merge_validate(const smattn_merge_problem *prob,
                                                     const smattn_merge_inputs *in,
                                                     const smattn_outputs *out);

/* The exact merge (ref/, SPEC 9.3): every output element correctly rounded to nearest-even
 * in its dtype (f64, f32, f16, bf16), deterministic, independent of the thread count. cfg
 * (threads, max_prec; the other fields are ignored) may be NULL. Fails only with a
 * validation status, SMATTN_ERR_NOMEM, SMATTN_ERR_THREADS or SMATTN_ERR_PRECISION (a
 * decision the precision limit did not reach; never a wrong rounding). */
SMATTN_NODISCARD smattn_status smattn_ref_merge(const smattn_merge_problem *prob,
                                                const smattn_merge_inputs *in,
                                                const smattn_outputs *out,
                                                const smattn_ref_config *cfg);

/* The fast merge (opt/, SPEC 9.4): binary32 arithmetic, the partials' maximum subtracted
 * first, rows over threads, the columns by the active ISA's vectors. Inputs and outputs
 * f32, f16 or bf16 (f64: SMATTN_ERR_UNSUPPORTED). Within smattn_merge_bound for the model
 * smattn_merge_opt_precision(); bitwise identical for every thread count and every ISA. */
SMATTN_NODISCARD smattn_status smattn_merge(const smattn_merge_problem *prob,
                                            const smattn_merge_inputs *in,
                                            const smattn_outputs *out,
                                            const smattn_opt_config *cfg);

/* The merge kernel model (SPEC 9.4) of smattn_merge: u_acc = 2^-24, exp_ulps 2, acc_len
 * 0 (serial), tiny 2^-126. Only u_acc, exp_ulps, acc_len and tiny mean anything to a merge. */
smattn_precision smattn_merge_opt_precision(void);

/* Per-element bounds (binary64, into bound->o / bound->lse, dtype F64, shapes as out) on
 * |computed - exact| for a merge kernel obeying pm whose outputs have the dtypes of fmt
 * (SPEC 9.5), covering comparison against the oracle's binary64 result. +inf for elements
 * whose exact value is not finite or whose column is out of contract; 0 for exact zeros of
 * empty rows. Status: validation's (fmt as the outputs), SMATTN_ERR_DTYPE, SMATTN_ERR_OPTION
 * (pm out of range). */
SMATTN_NODISCARD smattn_status smattn_merge_bound(const smattn_merge_problem *prob,
                                                  const smattn_merge_inputs *in,
                                                  const smattn_precision *pm,
                                                  const smattn_outputs *fmt,
                                                  const smattn_outputs *bound);

/* ---------------------------------------------------------------------------------------
 * The bound for backward kernels (SPEC 10.7), appended in 0.3. The model is
 * FlashAttention-2's backward: P recomputed as exp(s - LSE) from the forward's STORED LSE,
 * Delta = dO . O from the STORED (rounded) O, dS = P (dP - Delta + dLSE), softcap's
 * derivative from the recomputed score, dQ summed over the keys and dK, dV over the
 * group's heads and queries in any order.
 * ------------------------------------------------------------------------------------- */
typedef struct smattn_backward_precision {
    smattn_precision fwd;   /* the forward kernel that wrote O and LSE (SPEC 6.1) */
    smattn_dtype o_dtype;   /* the dtype O was stored in (Delta reads it: its rounding,
                               u_o |O| |dO|, is a term of the bound) */
    smattn_dtype lse_dtype; /* the dtype LSE was stored in */
    smattn_precision bwd;   /* the backward's own arithmetic: u_score (scores, the scale,
                               tanh), u_acc (exp, dP, Delta, dS, softcap's derivative, the
                               sums), exp_ulps, u_p (P and dS rounded to this before the
                               products, e.g. 2^-8 for bf16; 0 if not), tiny (covering the
                               u_p format's too); blocks and acc_len are not read: any order */
} smattn_backward_precision;

/* A plain kernel in dtype t: forward and backward smattn_precision_of(t), O and LSE
 * stored in t. */
smattn_backward_precision smattn_backward_precision_of(smattn_dtype t);

/* Per-element bounds on |computed - exact| for the gradients of a backward kernel obeying
 * pm whose outputs are rounded to the dtypes of fmt (dq, dk, dv, and dbias if bound->dbias
 * is wanted; only dtypes are read), written as binary64 into bound->dq, dk, dv (required,
 * dtype F64, shapes of SPEC 10.1) and bound->dbias, bound->dsinks (optional; a dbias
 * stride 0 bounds the sum over that dimension, SPEC 10.7 B12, B13; the output dtype of
 * dsinks is fmt->dsinks's). The bound covers comparing against smattn_ref_backward's
 * binary64 result. Exact zeros (empty rows, keys no row sees) get 0; elements whose exact
 * value is not finite, or that a row out of the forward's contract (SPEC 6.8) touches, get
 * +inf. Status: smattn_ref_backward's validation, SMATTN_ERR_DTYPE, SMATTN_ERR_OPTION (pm
 * out of range), SMATTN_ERR_NOMEM. */
SMATTN_NODISCARD smattn_status smattn_backward_bound(const smattn_problem *prob,
                                                     const smattn_inputs *in,
                                                     const smattn_grad_inputs *gin,
                                                     const smattn_backward_precision *pm,
                                                     const smattn_grad_outputs *fmt,
                                                     const smattn_grad_outputs *bound);

/* ---------------------------------------------------------------------------------------
 * The fast backward (opt/), appended in 0.3: FlashAttention-2's algorithm in binary32, the
 * model of SPEC 10.7. dK and dV by key blocks (each block's sums over the group's heads and
 * the query blocks in a fixed order), dQ by query blocks, each recomputing P = exp(s - LSE)
 * from the stored LSE; SIMD (the ISA of smattn_opt_isa, or cfg->isa), the thread pool. Its
 * gradients are bitwise identical for every thread count, across repeated calls, and across
 * ISAs for the same saved O and LSE (lanes run over independent outputs, every sum is one
 * fma chain in a fixed order; with saved NULL each ISA runs its own forward first, whose O
 * and LSE may differ by ISA).
 * Supported: every mask kind, GQA, softcap, bias, sinks, dLSE, the three empty-row
 * conventions, the layouts (a layout problem gives its dense twin's bits, SPEC 10.8),
 * ALiBi (folded into a binary32 bias; beside a bias, the symmetric or one-sided term added
 * after it, as the forward adds it); Q, K, V, bias, sinks, dO, dLSE and the saved O, LSE in
 * float32, binary16 or bfloat16; dq, dk, dv in float32, binary16 or bfloat16 (rounded once from
 * binary32). dsinks (optional) as the sum over batches and queries, in that order, of each row's
 * binary32 term (SPEC 10.1, B13), rounded once to its dtype; the same bits at any count.
 * dbias (optional; float32, binary16 or bfloat16, full or summed over the
 * dimensions of stride 0) from SPEC 10.1's dS in binary32: per element of dbias, the
 * (b, head, query block, key block) blocks it sums in that order, then rows, then keys,
 * ascending; rounded once; the same bits at any count and ISA (as above).
 * SMATTN_ERR_UNSUPPORTED: binary64 tensors, inputs so large that a dP =
 * dO . v, a Delta or a gradient's sum could pass 2^126 (Dv max|dO| max|V|, T |scale| max|dS|
 * max|K|, or a summed dBias's terms times max|dS|: binary32 would give inf - inf), scores
 * that could (D max|Q| max|K|, times |scale| without softcap), a non-finite input (other than a
 * -inf bias or sink: smattn_ref_backward applies SPEC 10.2 there) or a non-finite saved
 * LSE of a row that sees keys.
 * Safe to call from several threads.
 * ------------------------------------------------------------------------------------- */
/* What the forward stored: O [B,S,Hq,Dv] and LSE [B,Hq,S] (natural log; empty rows' LSE is
 * not read), each in its own dtype and strides. */
typedef struct smattn_forward_saved {
    smattn_tensor o;
    smattn_tensor lse;
} smattn_forward_saved;

/* saved NULL: the forward (smattn_attention, binary32 O and LSE) is run first, with cfg.
 * Shapes, strides and aliasing as smattn_ref_backward; saved as the forward's outputs.
 * Within smattn_backward_bound for smattn_opt_backward_precision(prob) with o_dtype and
 * lse_dtype set to the saved tensors' dtypes (the forward's model: smattn_opt_precision for
 * O and LSE written by smattn_attention). */
SMATTN_NODISCARD smattn_status smattn_attention_backward(const smattn_problem *prob,
                                                         const smattn_inputs *in,
                                                         const smattn_forward_saved *saved,
                                                         const smattn_grad_inputs *gin,
                                                         const smattn_grad_outputs *gout,
                                                         const smattn_opt_config *cfg);
/* The model of smattn_attention_backward (SPEC 10.7): forward smattn_opt_precision(prob),
 * O and LSE binary32, backward binary32 with exp and tanh within 4 ulps, results below
 * FLT_MIN flushed, no u_p rounding. */
smattn_backward_precision smattn_opt_backward_precision(const smattn_problem *prob);

#ifdef __cplusplus
}
#endif
#endif /* SMATTN_H */
