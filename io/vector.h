/* SPDX-License-Identifier: MIT */
/* vector.h: golden vector files (spec/vectors/<name>.json, format in SPEC 8) loaded into a
 * problem, its inputs and the expected, correctly rounded outputs. */
#ifndef SMATTN_IO_VECTOR_H
#define SMATTN_IO_VECTOR_H

#include <stddef.h>
#include <stdint.h>

#include "smattn.h"

enum { SMATTN_VEC_O = 0, SMATTN_VEC_LSE = 1, SMATTN_VEC_P = 2 };

typedef struct smattn_vector {
    char name[128];
    char description[512];
    char spec[32];               /* SPEC section it illustrates */
    smattn_problem prob;         /* kv_lens / q_lens point into owned memory */
    smattn_inputs in;            /* data point into owned memory, contiguous strides */
    int64_t n[3];                /* element counts of O, LSE, P (0 for O in softmax) */
    /* expected[t][k]: the expected outputs for dtype t (SMATTN_F64..SMATTN_BF16) and
     * output k (SMATTN_VEC_O..P) as binary64 values (exact conversions), row-major in the
     * output shapes; NULL when the file gives none. */
    double *expected[4][3];
    char **exact[3];             /* 40-digit decimal strings, NULL when absent */
    void *owned;                 /* everything above is freed by smattn_vector_free */
    /* A merge vector ("op": "merge", SPEC 9): merge != 0, the problem and partial states in
     * mprob and min, and prob holds B, S, Hq and Dv only (T = Hkv = D = 1), so that O and LSE
     * keep their shapes and contiguous strides; n[P] is 0. */
    int merge;
    smattn_merge_problem mprob;
    smattn_merge_inputs min;
} smattn_vector;

/* Load a vector file. Returns 0 on success; otherwise nonzero with one line in err. */
int smattn_vector_load(const char *path, smattn_vector *v, char *err, size_t errlen);
void smattn_vector_free(smattn_vector *v);

/* The oracle on a loaded vector: smattn_ref (no P for a merge) or smattn_ref_merge (out->p
 * must be empty), default configuration. */
smattn_status smattn_vector_run(const smattn_vector *v, const smattn_outputs *out);

#endif
