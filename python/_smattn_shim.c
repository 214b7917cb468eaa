/* SPDX-License-Identifier: MIT */
/* _smattn_shim.c: the Python package's private C side (_smattn_conform.so): the checker's
 * judge (conform/judge.c) and battery (conform/battery.c) behind a few flat functions that
 * ctypes can call. Not a public API: the public library (libsmattn.so.0) exports smattn.h
 * only, and the checker is internal, so the package ships its own copy of it. Every struct
 * here is mirrored in python/smattn/_lib.py, which checks the sizes smattn_py_abi reports
 * before any other call. */
#include <stddef.h>
#include <stdlib.h>
#include <string.h>

#include "conform/conform.h"

#define SMATTN_PY_ABI 4 /* 4: the merge battery */

/* conform_result's figures and the element its reason names (conform.h). */
typedef struct smattn_py_result {
    int status; /* conform_status: 0 pass, 1 fail, 2 skip (the oracle or bound failed) */
    int worst_out;
    double max_ratio, max_ulp;
    int64_t unbounded, nonfinite, elements, mismatched;
    int64_t worst_ix[4];
    double worst_got, worst_exact, worst_bound;
    char reason[512];
    int64_t rows_judged, rows_total; /* of a sampled check (rows_k > 0): fewer judged */
} smattn_py_result;

/* One battery case as the package reads it: the binary64 inputs (mask: bool) in the
 * layout in's strides give, count[t] elements allocated per tensor. Pointers are owned by
 * the battery. */
typedef struct smattn_py_case {
    const char *name, *category;
    smattn_problem prob;
    smattn_inputs in;
    int64_t count[7]; /* q, k, v, x, bias, mask, sinks */
    int kv_dtype;     /* the K/V dtype the case is about (F32, or F16 / BF16) */
    int q_dtype;      /* the same for Q (X), bias and sinks */
    int out_dtype;    /* the same for O, LSE and P */
    int garbage;      /* invisible slots hold NaN or infinity on purpose */
    int strided;      /* rows padded (pitch > D), padding holds NaN */
    uint32_t caps;
    /* a ragged or paged case (SPEC 2.7): prob and in are its dense twin, laid out by this
     * (NULL: a dense case); kv_hnd: its pages are [num_pages, Hkv, page_size, D] */
    const smattn_layout *layout;
    int kv_hnd;
} smattn_py_case;

int smattn_py_abi(int64_t sizes[8]);
void smattn_py_layout_abi(int64_t out[9]);
void smattn_py_judge(const smattn_problem *p, const smattn_inputs *in, const smattn_outputs *got,
                     const smattn_precision *pm, int garbage, smattn_py_result *out);
void smattn_py_judge_rows(const smattn_problem *p, const smattn_inputs *in,
                          const smattn_outputs *got, const smattn_precision *pm, int garbage,
                          int64_t rows_k, uint64_t seed, smattn_py_result *out);
void smattn_py_judge_stored(const smattn_problem *p, const smattn_inputs *in,
                            const smattn_outputs *got, const smattn_precision *pm, int garbage,
                            int64_t rows_k, uint64_t seed, const int64_t *stored,
                            smattn_py_result *out);
void *smattn_py_battery_new(const char *suite, uint64_t seed, const char *vectors,
                            const char *regressions, char *err, size_t errlen);
int64_t smattn_py_battery_size(const void *b);
int smattn_py_battery_case(const void *b, int64_t k, smattn_py_case *out);
int64_t smattn_py_battery_case_quant(const void *b, int64_t k, int which, void *dst, size_t cap);
void smattn_py_battery_free(void *b);
void *smattn_py_merge_battery_new(uint64_t seed, const char *vectors);
int64_t smattn_py_merge_battery_size(const void *b);
int smattn_py_merge_battery_case(const void *b, int64_t k, const char **name,
                                 smattn_merge_problem *prob, const double **o, const double **l);
void smattn_py_merge_battery_free(void *b);

/* The layout version and the sizes of the structs Python mirrors, for _lib.py's check. */
int smattn_py_abi(int64_t sizes[8])
{
    sizes[0] = (int64_t)sizeof(smattn_problem);
    sizes[1] = (int64_t)sizeof(smattn_inputs);
    sizes[2] = (int64_t)sizeof(smattn_outputs);
    sizes[3] = (int64_t)sizeof(smattn_precision);
    sizes[4] = (int64_t)sizeof(smattn_py_result);
    sizes[5] = (int64_t)sizeof(smattn_py_case);
    sizes[6] = (int64_t)sizeof(smattn_tensor);
    sizes[7] = (int64_t)sizeof(smattn_out_tensor);
    return SMATTN_PY_ABI;
}

/* sizeof(smattn_layout) and the offsets of its eight fields, for the test that
 * smattn._lib.Layout mirrors the header. */
void smattn_py_layout_abi(int64_t out[9])
{
    out[0] = (int64_t)sizeof(smattn_layout);
    out[1] = (int64_t)offsetof(smattn_layout, cu_seqlens_q);
    out[2] = (int64_t)offsetof(smattn_layout, cu_seqlens_k);
    out[3] = (int64_t)offsetof(smattn_layout, seqused_k);
    out[4] = (int64_t)offsetof(smattn_layout, block_table);
    out[5] = (int64_t)offsetof(smattn_layout, bt_stride);
    out[6] = (int64_t)offsetof(smattn_layout, max_pages);
    out[7] = (int64_t)offsetof(smattn_layout, num_pages);
    out[8] = (int64_t)offsetof(smattn_layout, page_size);
}

/* conform_judge on outputs `got` (contiguous, SPEC 2.1 layouts). The caller has validated
 * the problem. */
void smattn_py_judge(const smattn_problem *p, const smattn_inputs *in, const smattn_outputs *got,
                     const smattn_precision *pm, int garbage, smattn_py_result *out)
{
    smattn_py_judge_rows(p, in, got, pm, garbage, 0, 0, out);
}

/* The same on rows_k query rows per (batch, head) chosen by seed (conform/rows.c; 0: every
 * row): the oracle's cost is that of the rows judged. */
void smattn_py_judge_rows(const smattn_problem *p, const smattn_inputs *in,
                          const smattn_outputs *got, const smattn_precision *pm, int garbage,
                          int64_t rows_k, uint64_t seed, smattn_py_result *out)
{
    smattn_py_judge_stored(p, in, got, pm, garbage, rows_k, seed, NULL, out);
}

/* The same for a packed layout's dense twin whose batch b stores rows [0, stored[b]) only
 * (conform_judge_twin: the other rows' O and LSE neither judged nor counted, a sample drawn
 * over the stored rows; NULL: every row). */
void smattn_py_judge_stored(const smattn_problem *p, const smattn_inputs *in,
                            const smattn_outputs *got, const smattn_precision *pm, int garbage,
                            int64_t rows_k, uint64_t seed, const int64_t *stored,
                            smattn_py_result *out)
{
    conform_result *r = calloc(1, sizeof *r);
    memset(out, 0, sizeof *out);
    if (!r) {
        out->status = CONFORM_SKIP;
        out->worst_out = -1;
        snprintf(out->reason, sizeof out->reason, "out of memory");
        return;
    }
    /* The judge looks for NaN/inf in the slots a row must not read itself; `garbage` (any
     * non-finite input) is no evidence of padding outside the arrays' views. */
    (void)garbage;
    conform_sample sample = {rows_k, seed};
    /* quantised inputs (SPEC 2.9): judged as the binary64 twin of the real values */
    conform_inst qi, tw;
    memset(&qi, 0, sizeof qi);
    memset(&tw, 0, sizeof tw);
    qi.prob = *p, qi.in = *in;
    if (!conform_inst_quantised(&qi)) {
        conform_judge_twin(p, in, got, pm, 0, 0, &sample, stored, r);
    } else if (conform_inst_real(&qi, &tw)) {
        r->status = CONFORM_SKIP;
        r->worst_out = -1;
        snprintf(r->reason, sizeof r->reason, "out of memory");
    } else {
        conform_judge_twin(&tw.prob, &tw.in, got, pm, 0, 0, &sample, stored, r);
        conform_inst_free(&tw);
    }
    out->rows_judged = r->rows_judged, out->rows_total = r->rows_total;
    out->status = (int)r->status;
    out->worst_out = r->worst_out;
    out->max_ratio = r->max_ratio, out->max_ulp = r->max_ulp;
    out->unbounded = r->unbounded, out->nonfinite = r->nonfinite, out->elements = r->elements;
    out->mismatched = r->mismatched;
    memcpy(out->worst_ix, r->worst_ix, sizeof out->worst_ix);
    out->worst_got = r->worst_got, out->worst_exact = r->worst_exact;
    out->worst_bound = r->worst_bound;
    snprintf(out->reason, sizeof out->reason, "%s", r->reason);
    free(r);
}

/* The battery "quick" or "full" for a seed; vectors, regressions: the golden vectors' and
 * the fuzzer finds' directories ("": none), or NULL (battery.c's search, which looks beside
 * the executable: python3's, so the package names them). NULL with one line in err on
 * failure. */
void *smattn_py_battery_new(const char *suite, uint64_t seed, const char *vectors,
                            const char *regressions, char *err, size_t errlen)
{
    conform_battery *b = calloc(1, sizeof *b);
    if (!b) {
        snprintf(err, errlen, "out of memory building the battery");
        return NULL;
    }
    if (conform_battery_build_dirs(b, suite, seed, vectors, regressions, err, errlen)) {
        free(b);
        return NULL;
    }
    return b;
}

int64_t smattn_py_battery_size(const void *b)
{
    return (int64_t)((const conform_battery *)b)->n;
}

/* Case k of b into *out: 0, or -1 when k is out of range. */
int smattn_py_battery_case(const void *b, int64_t k, smattn_py_case *out)
{
    const conform_battery *bt = b;
    if (k < 0 || (size_t)k >= bt->n)
        return -1;
    const conform_case *c = &bt->cases[k];
    memset(out, 0, sizeof *out);
    out->name = c->name;
    out->category = c->category;
    out->prob = c->prob;
    out->in = c->in64;
    memcpy(out->count, c->count, sizeof out->count);
    out->kv_dtype = (int)c->kv_dtype;
    out->q_dtype = (int)c->q_dtype;
    out->out_dtype = (int)c->out_dtype;
    out->garbage = c->garbage;
    out->strided = c->strided;
    out->caps = c->caps;
    out->layout = c->has_layout ? &c->layout : NULL;
    out->kv_hnd = c->kv_hnd;
    return 0;
}

/* A quantised case's Q (which 0), K (1) or V (2) as `smattn conform` hands it to a kernel
 * (conform_case_materialise in the case's own dtypes: fp8 bytes, q8_0 / q4_0 blocks), copied
 * into dst (cap bytes). Returns the bytes, or -1 (no such case or tensor, out of memory, or
 * cap too small). */
int64_t smattn_py_battery_case_quant(const void *b, int64_t k, int which, void *dst, size_t cap)
{
    const conform_battery *bt = b;
    if (k < 0 || (size_t)k >= bt->n || which < 0 || which > 2)
        return -1;
    const conform_case *c = &bt->cases[k];
    conform_inst m;
    if (conform_case_materialise(c, c->q_dtype, c->kv_dtype, c->prob.empty_rows,
                                 c->prob.empty_lse, &m))
        return -1;
    const smattn_tensor *t = which == 0 ? &m.in.q : which == 1 ? &m.in.k : &m.in.v;
    const int64_t n = c->count[which], blk = smattn_dtype_block(t->dtype);
    const size_t bytes = (size_t)(n / (blk ? blk : 1)) * smattn_dtype_size(t->dtype);
    int64_t rc = -1;
    if (t->data && bytes <= cap) {
        memcpy(dst, t->data, bytes);
        rc = (int64_t)bytes;
    }
    conform_inst_free(&m);
    return rc;
}

void smattn_py_battery_free(void *b)
{
    if (!b)
        return;
    conform_battery_free(b);
    free(b);
}

/* The merge battery of `smattn conform` (conform/merge_battery.c, category "merge") for a
 * seed, with the merge golden vectors of the directory vectors (NULL or "": none): its
 * cases' problems and binary64 partials, o [N,B,S,Hq,Dv] and l [N,B,Hq,S] contiguous. NULL
 * when out of memory. */
void *smattn_py_merge_battery_new(uint64_t seed, const char *vectors)
{
    conform_merge_battery *b = calloc(1, sizeof *b);
    if (b && conform_merge_battery_build(b, seed)) {
        free(b);
        return NULL;
    }
    if (b && conform_merge_battery_add_vectors(b, vectors)) {
        conform_merge_battery_free(b);
        free(b);
        return NULL;
    }
    return b;
}

int64_t smattn_py_merge_battery_size(const void *b)
{
    return (int64_t)((const conform_merge_battery *)b)->n;
}

/* Case k of b: 0, or -1 when k is out of range. The pointers are owned by the battery. */
int smattn_py_merge_battery_case(const void *b, int64_t k, const char **name,
                                 smattn_merge_problem *prob, const double **o, const double **l)
{
    const conform_merge_battery *mb = b;
    if (k < 0 || (size_t)k >= mb->n)
        return -1;
    const conform_merge_case *c = &mb->cases[k];
    *name = c->name;
    *prob = c->prob;
    *o = c->o;
    *l = c->l;
    return 0;
}

void smattn_py_merge_battery_free(void *b)
{
    if (!b)
        return;
    conform_merge_battery_free(b);
    free(b);
}
