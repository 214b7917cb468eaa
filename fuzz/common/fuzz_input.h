/* SPDX-License-Identifier: MIT */
/* fuzz_input.h: the one input decoder shared by every fuzz target. Any byte string decodes
 * to a valid, small attention or softmax problem (T <= 64, D, Dv <= 64, B*S*Hq <= 64 rows).
 *
 * Convention (FuzzedDataProvider, as in zstd's fuzz_data_producer.c): integers are taken
 * from the tail of the input, one byte per choice below 256 and two above, each reduced
 * modulo its range; a missing byte reads as 0, so short inputs decode to the simplest
 * problem. Whatever the tail left at the front is copied raw into Q (or X), K, V, bias and
 * sinks, in that order, after the PRNG values and special-value patches are in place.
 */
#ifndef SMATTN_FUZZ_INPUT_H
#define SMATTN_FUZZ_INPUT_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "smattn.h"

/* libFuzzer's entry points, declared once for every target and the replay driver. */
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
int LLVMFuzzerInitialize(int *argc, char ***argv);

/* Limits of a decoded problem: small enough that the oracle answers in microseconds. */
#define FUZZ_MAX_T 64
#define FUZZ_MAX_D 64
#define FUZZ_MAX_ROWS 64

/* A byte source: bytes from the front, integers from the tail. */
typedef struct fuzz_provider {
    const uint8_t *data;
    size_t lo, hi; /* unread bytes are data[lo, hi) */
} fuzz_provider;

void fuzz_provider_init(fuzz_provider *dp, const uint8_t *data, size_t size);
/* An integer in [0, n) (n >= 1) from the tail: one byte if n <= 256, else two. */
uint32_t fuzz_take(fuzz_provider *dp, uint32_t n);
/* A 32-bit integer from the tail (four bytes). */
uint32_t fuzz_take_u32(fuzz_provider *dp);
/* Bytes left between front and tail. */
size_t fuzz_remaining(const fuzz_provider *dp);

/* Shape classes (the second word of a MISMATCH line). */
typedef enum fuzz_shape_class {
    FUZZ_PREFILL = 0, /* S = T */
    FUZZ_CHUNKED = 1, /* chunked prefill, S < T */
    FUZZ_DECODE = 2,  /* S = 1 */
    FUZZ_SMALL_S = 3, /* 1 <= S <= 4 */
    FUZZ_S_GT_T = 4,  /* more queries than keys */
    FUZZ_NCLASSES = 5
} fuzz_shape_class;

const char *fuzz_shape_class_name(int cls);

/* How values are drawn before the patches and the raw bytes. */
enum {
    FUZZ_VAL_UNIFORM = 0, /* uniform in [-2, 2] */
    FUZZ_VAL_WIDE,        /* uniform in [-80, 80]: scores near exp's range ends */
    FUZZ_VAL_EQUAL,       /* every element of a tensor equal: equal scores */
    FUZZ_VAL_DOMINANT,    /* small values, one large key per row */
    FUZZ_VAL_TINY,        /* subnormal and near-FLT_MIN magnitudes */
    FUZZ_VAL_EXPONENT,    /* random sign and exponent in [-40, 40] */
    FUZZ_NVALMODES
};

/* Special values a patch writes (float bit patterns; see fuzz_special_value). */
#define FUZZ_NSPECIAL 20
float fuzz_special_value(int code);

/* fuzz_backward's cut of a problem (fuzz_problem_shrink) and the gradients it feeds the
 * backward, here so that tools/fuzz_decode reads an input as the target does: dO
 * [B,S,Hq,Dv] and, with dl, dLSE [B,Hq,S], uniform in [-2, 6) from seed, then with special
 * three elements (of dO, or the third of dLSE when there is one) set to fuzz_special_value's,
 * every element then rounded to vt (binary32, binary16 or bfloat16: a special value past
 * its range becomes an infinity; SMATTN_F64: left as drawn, 53 bits). The arrays are the
 * caller's to free; 0, or -1 when out of memory. */
#define FUZZ_BACKWARD_MAX_P 48
int fuzz_grad_values(const smattn_problem *p, uint32_t seed, int special, smattn_dtype vt,
                     double **dout, double **dl);
/* The type of the values fuzz_backward draws for dO and dLSE (fuzz_grad_values' vt) from
 * its choice byte c0 and its seed: bit 3 of c0 set, binary64 (53 bits, the oracle alone);
 * else binary32, or binary16 or bfloat16 in a quarter of the seeds each (the two top bits
 * of the seed 2 or 3), the tensors the fast backward then reads in that dtype. */
smattn_dtype fuzz_grad_dtype(uint32_t c0, uint32_t seed);

/* A decoded problem with its owned buffers. */
typedef struct fuzz_problem {
    smattn_problem p;
    smattn_inputs in;
    int shape_class;
    int gqa;     /* Hq / Hkv as drawn: 1, 2, 4, 7, or 0 for MQA */
    int threads; /* 1..4 for the kernel's self-differential run */
    uint32_t seed;
    int value_mode;
    int npatches;
    int bias_kind, mask_kind; /* 0 none; 1 broadcast over heads/queries; 2 full */
    size_t raw_bytes;         /* front bytes copied raw into the tensors */
    int64_t kv_lens[2], q_lens[2];
    float *q, *x, *bias, *sinks;
    void *k, *v;
    unsigned char *mask;
    size_t nq, nx, nk, nv, nbias, nmask; /* element counts (bias/mask: as stored) */
    int64_t full_p; /* B*Hq*S*T as decoded if fuzz_problem_shrink cut it, else 0 */
    float *alibi_slopes; /* fuzz_problem_alibi's slopes (owned), or NULL */
    smattn_descale *descale; /* fuzz_problem_quant's descales and their arrays (owned), or NULL */
} fuzz_problem;

/* ALiBi (SPEC 2.8) drawn from the decoded seed, so that the bytes decode as before: an
 * attention problem gets, with probability 3/8, the symmetric, one-sided or mask mode (the
 * mask mode only with a bias, else symmetric), with FlashAttention's slopes, slopes of both
 * signs, or zero, one list or B lists. Call after fuzz_problem_shrink (it reads B and Hq).
 * Returns nonzero if memory runs out (the problem is then freed). */
int fuzz_problem_alibi(fuzz_problem *fp);

/* Quantised inputs (SPEC 2.9) drawn from the decoded seed, so that the bytes decode as
 * before: an attention problem gets, with probability in8 / 8, Q in e4m3 or e5m2 (or kept),
 * K and V in e4m3, e5m2, q8_0 or q4_0, and descales per tensor or per (batch, KV head)
 * (binary32 factors in [2^-4, 2^4]) or none. Q, K and V are re-encoded from their values:
 * fp8 by nearest-even (e4m3: NaN past 448), blocks as llama.cpp's reference quantisers do
 * (a block holding a NaN or an infinity gets a NaN scale); for the blocks, D and Dv are
 * rounded up to multiples of 32, the new columns of Q, K and V drawn from the seed. Call
 * after fuzz_problem_shrink, _stretch_keys, _convert and _alibi. Returns nonzero if memory
 * runs out (the problem is then freed). */
int fuzz_problem_quant(fuzz_problem *fp, int in8);
/* The descale factor of tensor 'q', 'k' or 'v' for batch b and KV head g (1: none). */
double fuzz_descale(const fuzz_problem *fp, char which, int64_t b, int64_t g);

/* A ragged or paged twin of a decoded attention problem (SPEC 2.7), drawn from the decoded
 * seed, so that the bytes decode as before: 3 attention inputs in 8 get packed queries
 * (cu_seqlens_q from q_lens), packed keys (cu_seqlens_k from kv_lens, half of them with
 * seqused_k and up to 3 dead keys per sequence), pages (of 1-64 keys in a random order,
 * NHD or HND, spare table columns and pages, wild entries past the used ones), or packed
 * queries with either. Q, K and V are copied to their places, every slot the layout leaves
 * unread holds NaN or infinities; B, S, T, the masks, bias, sinks and ALiBi stay the
 * decoded problem's, whose outputs the twin's must equal bit for bit. Call after
 * fuzz_problem_shrink, fuzz_problem_stretch_keys and fuzz_problem_alibi; fl->p points into
 * *fl (do not copy it). Returns 1 if a layout was drawn, 0 if none (fl zeroed), -1 if
 * memory ran out (free fl). */
typedef struct fuzz_layout {
    smattn_problem p; /* the decoded problem with the layout */
    smattn_inputs in; /* Q, K, V in their layout; the rest as decoded */
    smattn_layout L;
    int64_t cu_q[3], cu_k[3], used[2], kv_lens[2];
    int32_t *bt;
    void *q, *k, *v;
    int packed_q, keys; /* keys: 0 dense, 1 packed, 2 paged */
    int hnd;            /* pages stored [num_pages, Hkv, page_size, D] */
} fuzz_layout;
int fuzz_layout_draw(const fuzz_problem *fp, fuzz_layout *fl);
void fuzz_layout_free(fuzz_layout *fl);
/* One line: the layout's arrays. */
void fuzz_layout_print(FILE *f, const fuzz_layout *fl);

/* Decode data[0, size) into *fp (always succeeds unless memory runs out: returns nonzero).
 * The provider is left where decoding stopped, so that a target may read more from it. */
int fuzz_problem_decode(fuzz_problem *fp, fuzz_provider *dp);
void fuzz_problem_free(fuzz_problem *fp);
/* A provider over data[0, size) and fuzz_problem_decode; on failure the problem is freed and
 * nonzero returned. */
int fuzz_problem_decode_bytes(fuzz_problem *fp, const uint8_t *data, size_t size);
/* Cut a decoded problem to at most about max_p elements of P (B*Hq*S*T): B to 1, then the
 * KV heads to 1 (Hq to the GQA ratio), then Hq, then S and T keeping the shape class;
 * kv_lens and q_lens are clamped, and the tensors' leading blocks copied to contiguous
 * buffers, so the result is an ordinary decoded problem. A problem within the budget is
 * left as it is. Deterministic: a target that shrinks shrinks the same way on replay.
 * Returns nonzero if memory runs out (the problem is then freed). */
int fuzz_problem_shrink(fuzz_problem *fp, int64_t max_p);
/* Repeat the keys of an attention problem to T keys (T >= the decoded T): K, V, bias and
 * mask columns j read the decoded column j mod T; kv_lens keep their count of padding keys.
 * For the kernel's long-context paths (split keys), beyond FUZZ_MAX_T. Returns nonzero if
 * memory runs out (the problem is then freed). */
int fuzz_problem_stretch_keys(fuzz_problem *fp, int64_t T);
/* fuzz_dtypes' choices, read from the provider's tail after fuzz_problem_decode: the dtype
 * of Q (attention) or X (softmax), of the bias (read whether or not there is one, so that
 * the byte positions do not depend on it) and of the outputs, each among f16, bf16, f32 in
 * that order, so that a missing byte (0) gives f16. */
typedef struct fuzz_dtype_choice {
    smattn_dtype qx, bias, out;
} fuzz_dtype_choice;
fuzz_dtype_choice fuzz_take_dtypes(fuzz_provider *dp);
/* Q (or X) and the bias, if present, replaced by copies rounded to qx and bias
 * (smattn_store, nearest-even): the problem is then that of the rounded values. fp->q, x
 * and bias then hold elements of in.q/x/bias.dtype (the printer reads them so); strides are
 * in elements and stay. Call it after fuzz_problem_shrink and fuzz_problem_stretch_keys,
 * which copy these tensors as float32. Returns nonzero if memory runs out (the problem is
 * then freed). */
int fuzz_problem_convert(fuzz_problem *fp, smattn_dtype qx, smattn_dtype bias);
/* Print the problem: one line of shape and options, then every input tensor as %a. */
void fuzz_problem_print(FILE *f, const fuzz_problem *fp);

/* Contiguous outputs of dtype t for a problem (O only for attention; O, LSE and P). */
typedef struct fuzz_outputs {
    smattn_outputs out;
    size_t n[3]; /* elements of O, LSE, P */
    void *buf[3];
    smattn_dtype dtype;
} fuzz_outputs;

int fuzz_outputs_alloc(fuzz_outputs *o, const smattn_problem *p, smattn_dtype t);
void fuzz_outputs_free(fuzz_outputs *o);

#endif
