/* SPDX-License-Identifier: MIT */
/* case.h: a case directory (q/k/v.npy or x.npy, optional bias/mask/sinks.npy, case.json)
 * loaded into an owned problem and inputs, and the writer of its outputs (o/lse/p.npy).
 *
 * Layout: attention q [B,S,Hq,D], k [B,T,Hkv,D], v [B,T,Hkv,Dv]; softmax x [B,Hq,S,T].
 * 3-D arrays mean B = 1 (q/k/v [S,H,D], x [H,S,T]); q, k, v are all 3-D or all 4-D, and the
 * outputs follow the same convention. bias and mask are numpy-broadcastable to
 * [B,Hq,S,T] (right-aligned, each dim 1 or full); sinks.npy is [Hq]. Fortran-ordered
 * arrays are used in place through their strides. Every error is one line that names the
 * file and the problem.
 *
 * Ragged and paged layouts (SPEC 2.7, 7.1): case.json's "cu_seqlens_q" packs q.npy
 * [total_q,Hq,D] (and o.npy [total_q,Hq,Dv], lse.npy [Hq,total_q]); "cu_seqlens_k" (with
 * "seqused_k") packs k.npy/v.npy [total_k,Hkv,D]; block_table.npy [B,max_pages] (i4 or
 * i8; [B,bt_stride] with "max_pages" below bt_stride), or the FlashInfer keys "kv_indptr",
 * "kv_indices", "kv_last_page_len", make k.npy/v.npy page caches [num_pages,page_size,
 * Hkv,D] ("kv_layout": "NHD") or [num_pages,Hkv,page_size,D] ("HND"). The problem is the
 * dense, padded twin: S and T are the longest sequence's (at least 1), bias and mask
 * broadcast to [B,Hq,S,T], p.npy is [B,Hq,S,T].
 *
 * io/case_json.c parses case.json, io/case.c loads and checks the arrays, io/case_layout.c
 * the layouts, io/case_out.c allocates and writes the outputs.
 */
#ifndef SMATTN_IO_CASE_H
#define SMATTN_IO_CASE_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "io/npy.h"
#include "smattn.h"

/* Names in case.json's "bf16" list, as bits of smattn_case_json.bf16. */
enum {
    SMATTN_CASE_Q = 1 << 0,
    SMATTN_CASE_K = 1 << 1,
    SMATTN_CASE_V = 1 << 2,
    SMATTN_CASE_X = 1 << 3,
    SMATTN_CASE_BIAS = 1 << 4,
    SMATTN_CASE_SINKS = 1 << 5,
    SMATTN_CASE_DO = 1 << 6,  /* "do": do.npy, the backward's dO (SPEC 7.1, 10) */
    SMATTN_CASE_DLSE = 1 << 7 /* "dlse": dlse.npy */
};

/* case.json, parsed. Arrays are owned (free with smattn_case_json_free). */
typedef struct smattn_case_json {
    int has_scale; /* 0: the op's default scale */
    double scale;  /* the binary64 nearest the JSON number */
    double softcap;
    smattn_causal causal;
    int64_t window[2]; /* [left, right], -1 = unbounded */
    int64_t *kv_lens, *q_lens;
    size_t n_kv_lens, n_q_lens;
    double *sinks; /* NULL: none given */
    size_t n_sinks;
    smattn_empty empty_rows;
    smattn_empty_lse empty_lse;
    unsigned bf16; /* SMATTN_CASE_* bits */
    /* Layouts (SPEC 7.1); NULL: not given. */
    int64_t *cu_seqlens_q, *cu_seqlens_k, *seqused_k;
    size_t n_cu_seqlens_q, n_cu_seqlens_k, n_seqused_k;
    int64_t *kv_indptr, *kv_indices, *kv_last_page_len; /* FlashInfer's paged CSR form */
    size_t n_kv_indptr, n_kv_indices, n_kv_last_page_len;
    int has_kv_layout; /* "kv_layout" given */
    int kv_hnd;        /* "kv_layout": "HND" (1) or "NHD" (0, the default) */
    int64_t max_pages; /* "max_pages": block_table.npy's columns read (its row stride
                          bt_stride is its column count); 0: not given, all of them */
    /* ALiBi (SPEC 2.8): "alibi_mode" and "alibi_slopes" (flat: n_alibi_lists 0, else that
     * many lists of n_alibi_slopes / n_alibi_lists slopes each). */
    smattn_alibi_mode alibi_mode;
    float *alibi_slopes;
    size_t n_alibi_slopes, n_alibi_lists;
    /* Quantised inputs (SPEC 2.9, 7.1): SMATTN_CASE_Q/K/V bits of the arrays stored as
     * |u1 fp8 bit patterns or raw q8_0 / q4_0 blocks. */
    unsigned fp8_e4m3, fp8_e5m2, q8_0, q4_0;
    /* "q_descale", "k_descale", "v_descale": given (1), a number (descale_num) or B lists
     * of Hkv numbers (descale_arr, flattened, with the list counts in descale_n[k][0..1];
     * every inner list the same length, checked against the shapes later). */
    int has_descale[3];
    double descale_num[3];
    double *descale_arr[3];
    size_t descale_n[3][2];
} smattn_case_json;

/* Defaults: no key given (what an absent case.json means). */
void smattn_case_json_init(smattn_case_json *cj);
/* Parse case.json text text[0, len) (need not be NUL-terminated; a NUL inside is an
 * error). Checks types and ranges that need no shapes. Returns 0 or nonzero with one line
 * in err (without the file name). On failure *cj holds nothing to free. */
int smattn_case_json_parse(const char *text, size_t len, smattn_case_json *cj, char *err,
                           size_t errlen);
void smattn_case_json_free(smattn_case_json *cj);
/* Writes case.json's lists of quantised arrays ("fp8_e4m3", "fp8_e5m2", "q8_0", "q4_0") and
 * its descales ("q_descale", ...: a number or B lists of Hkv, each binary32 printed with 17
 * digits so that it reads back exactly) for p and in, each as ",\n  \"key\": value" (SPEC
 * 7.1, 2.9); nothing for the softmax op. The writers of `gen` and `fuzz_decode` share it. */
void smattn_case_json_put_quant(FILE *f, const smattn_problem *p, const smattn_inputs *in);
/* Writes case.json's "alibi_mode" and "alibi_slopes" (Hq numbers, or B lists of Hq) as
 * ",\n  \"key\": value", each slope with 17 digits (SPEC 7.1, 2.8); nothing without ALiBi.
 * The writers of `gen` and `fuzz_decode` share it. */
void smattn_case_json_put_alibi(FILE *f, const smattn_problem *p);

/* A loaded case. prob and in point into the owned arrays below, and prob.layout into the
 * case itself: a case is used where it was loaded, never copied. */
typedef struct smattn_case {
    smattn_problem prob;
    smattn_inputs in;
    int rank; /* 3 or 4: the rank convention of q/k/v (or x) and the outputs (for a packed
                 q, of p.npy: 4; o.npy and lse.npy are then packed) */
    smattn_case_json json;
    smattn_npy q, k, v, x, bias, mask, sinks; /* data NULL: absent */
    /* Layouts: prob.layout is &layout when the case has one (has_layout), else NULL. */
    smattn_npy block_table; /* block_table.npy; itemsize 0: absent */
    int has_layout, packed_q, packed_k, paged;
    int64_t total_q, total_k; /* rows of the packed q.npy / k.npy */
    smattn_layout layout;
    int32_t *table;    /* owned: the block table as int32 [B][max_pages] */
    int64_t *csr_lens; /* owned: kv_lens from the CSR keys [B] */
    /* The backward (SPEC 7.1, 10): do.npy [B,S,Hq,Dv] (3-D [S,Hq,Dv] with 3-D q/k/v) and
     * the optional dlse.npy [B,Hq,S] ([Hq,S]) make a backward case (backward nonzero);
     * gin points into them (dlse.data NULL: dLSE = 0). */
    smattn_npy dout, dlse;
    int backward;
    smattn_grad_inputs gin;
    smattn_descale descale; /* prob.descale points here when case.json gives one */
    int64_t kv_bytes_last[2]; /* q8_0 / q4_0 k.npy, v.npy: their last dim in bytes (0: not) */
} smattn_case;

/* Load and check a case directory. Returns 0, or nonzero with one line in err such as
 * "k.npy: shape [4,4,16] does not match q.npy's head dim 128". On failure *c holds nothing
 * to free. smattn_validate is run as part of smattn_case_outputs_alloc (it needs outputs). */
int smattn_case_load(const char *dir, smattn_case *c, char *err, size_t errlen);
/* smattn_case_load in two steps, so that a caller can refuse a case on its shapes and
 * dtypes before any data is read: smattn_case_open reads case.json and every header and
 * checks them (prob and the tensors' dtypes and strides are set, their data pointers NULL);
 * smattn_case_read then reads the data. Each frees *c on failure. */
int smattn_case_open(const char *dir, smattn_case *c, char *err, size_t errlen);
int smattn_case_read(const char *dir, smattn_case *c, char *err, size_t errlen);
void smattn_case_free(smattn_case *c);

/* The dense, padded twin of a layout case whose data is read (SPEC 2.7): q, k, v copied
 * into dense [B,S,Hq,D] / [B,T,Hkv,D] arrays of their dtypes (padding zero), q_lens and
 * kv_lens the sequences' lengths, no layout. The twin's prob and in point into *tw and c
 * (bias, mask, sinks): free tw before c. Returns 0, or -1 with one line in err. */
typedef struct smattn_case_twin {
    smattn_problem prob;
    smattn_inputs in;
    void *q, *k, *v;
    int64_t *q_lens, *kv_lens;
} smattn_case_twin;
int smattn_case_twin_make(const smattn_case *c, smattn_case_twin *tw, char *err, size_t errlen);
void smattn_case_twin_free(smattn_case_twin *tw);
/* Outputs of a layout case (got: as smattn_case_outputs_alloc lays them out, or as read
 * back from o.npy/lse.npy in the case's shapes) scattered into the twin's dense shapes:
 * O [B,S,Hq,Dv] and LSE [B,Hq,S] contiguous in binary64; P is shared (dense already). Rows
 * the layout does not have (i >= S_b of packed queries; a dense Q with q_lens has its
 * padding rows, judged as the twin's) take fill's values (fill: dense outputs of the twin,
 * or NULL: +0). dense->o and lse are owned, p is got's: free with
 * smattn_case_twin_outputs_free. 0, or -1 (out of memory). */
int smattn_case_twin_outputs(const smattn_case *c, const smattn_outputs *got,
                             const smattn_outputs *fill, smattn_outputs *dense);
void smattn_case_twin_outputs_free(smattn_outputs *dense);

/* Output which (0 o, 1 lse, 2 p) of the case: its shape in the files (rank returned: 3-D
 * without B or 4-D; with a packed q o [total_q,Hq,Dv] and lse [Hq,total_q]) and the
 * tensor strides of that array held contiguous. */
int smattn_case_out_layout(const smattn_case *c, int which, int64_t shape[4], int64_t stride[4]);

/* Which outputs to allocate. */
enum { SMATTN_CASE_OUT_O = 1, SMATTN_CASE_OUT_LSE = 2, SMATTN_CASE_OUT_P = 4 };

/* Allocate contiguous outputs of dtype t (O is skipped for softmax), then run
 * smattn_validate on the whole descriptor. Returns SMATTN_OK, or a status with one line in
 * err: SMATTN_ERR_NOMEM when memory ran out, SMATTN_ERR_OVERFLOW when the sizes do not
 * fit, or the validation failure. On failure nothing is left allocated. */
/* From the headers alone (smattn_case_open), before any data is read: -1 with a message if
 * an output of the run would not fit in size_t bytes or exceeds the physical memory. */
int smattn_case_outputs_check(const smattn_case *c, smattn_dtype t, unsigned which, char *err,
                              size_t errlen);
smattn_status smattn_case_outputs_alloc(const smattn_case *c, smattn_dtype t, unsigned which,
                                        smattn_outputs *out, char *err, size_t errlen);
void smattn_case_outputs_free(smattn_outputs *out);

/* The gradients of a backward case (c->backward) in dtype t, contiguous, in the case's
 * rank convention: dq [B,S,Hq,D], dk [B,T,Hkv,D], dv [B,T,Hkv,Dv], and dbias in bias.npy's
 * own shape (summed over the dimensions it broadcasts along, stride 0 there, SPEC 10.1)
 * when the case has a bias, dsinks [Hq] when it has sinks.
 * smattn_case_grads_check tells from the headers alone whether they fit (as
 * smattn_case_outputs_check); smattn_case_grads_alloc returns SMATTN_OK or a status with
 * one line in err, and leaves nothing allocated on failure. */
int smattn_case_grads_check(const smattn_case *c, smattn_dtype t, char *err, size_t errlen);
smattn_status smattn_case_grads_alloc(const smattn_case *c, smattn_dtype t, smattn_grad_outputs *g,
                                      char *err, size_t errlen);
void smattn_case_grads_free(smattn_grad_outputs *g);

/* Check OUT before any work: it is a directory that takes new files, or it does not exist
 * and can be created (its parent exists; made and removed at once); none of OUT/o.npy,
 * lse.npy, p.npy, .smattn-set is a directory; and, in a sticky OUT, none of them belongs
 * to another user (this run could not replace it). Nothing in OUT changes. 0, or nonzero
 * with one line. */
int smattn_case_out_check(const char *outdir, char *err, size_t errlen);

/* Write the outputs present in out (data != NULL; contiguous, as allocated above) to
 * OUT/o.npy, OUT/lse.npy, OUT/p.npy in the case's rank convention (3-D: o [S,Hq,Dv],
 * lse [Hq,S], p [Hq,S,T]), as one set (SPEC 7.2): OUT is checked (smattn_case_out_check)
 * and created if missing, then locked (flock: a concurrent run into the same OUT waits);
 * the temporaries an interrupted run left are removed; each file is written under a
 * temporary name in OUT and flushed (fsync); then, with every signal held back, the
 * marker OUT/.smattn-set is set to "writing", the files are renamed into place and those
 * of the three names this run does not produce (a p.npy without --weights, an o.npy of a
 * softmax) removed as stale, and the marker is set to "whole" with each output's size and
 * CRC-32; each step is flushed before the next. On a failure before the switch, the
 * temporaries (and OUT, if created here) are removed and OUT is as it was; a failure in
 * the switch (only a race with another program can cause one) leaves the "writing" marker
 * and says so. Other files in OUT are never touched. Returns 0 or nonzero with err. */
int smattn_case_write_outputs(const smattn_case *c, const smattn_outputs *out, const char *outdir,
                              char *err, size_t errlen);
/* smattn_case_write_outputs with the gradients of a backward case in the same set:
 * dq.npy, dk.npy, dv.npy, dbias.npy, dsinks.npy (those whose data is not NULL; g may be
 * NULL). Every name of the eight a run does not write is removed as stale. writer, "ref"
 * (the oracle) or "opt" (the built-in kernel), goes into the marker's "writer" (NULL: none),
 * so that `smattn check` can tell the oracle's own outputs from a kernel's. */
int smattn_case_write_set(const smattn_case *c, const smattn_outputs *out,
                          const smattn_grad_outputs *g, const char *outdir, const char *writer,
                          char *err, size_t errlen);
/* Unlink the temporaries smattn_case_write_outputs holds at this moment: async-signal-safe
 * (unlink only), for the handler of a signal that ends the process. */
void smattn_case_remove_temps(void);

/* Whether the outputs in a directory are a whole set, by its marker .smattn-set: 0 when the
 * marker says "whole" and every output it lists has its size and CRC-32 and no other of
 * o.npy, lse.npy, p.npy exists, or when there is no marker at all (outputs written by
 * another program, or by a smattn older than the marker: taken as they are). -1 with one
 * line in err when the marker says "writing" (a run was stopped while it replaced the
 * set), does not match the files, or is not a marker (a directory, a dangling link, bad
 * JSON). */
int smattn_case_outputs_verify(const char *outdir, char *err, size_t errlen);
/* smattn_case_outputs_verify, and the marker's "writer" ("ref" or "opt") into writer[cap]
 * ("" when the set is unmarked or its marker names none; a "writer" of another value is
 * the marker's error). */
int smattn_case_outputs_verify_writer(const char *outdir, char *writer, size_t cap, char *err,
                                      size_t errlen);

#endif
