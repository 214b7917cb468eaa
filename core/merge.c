/* SPDX-License-Identifier: MIT */
/* merge.c: the merge descriptor: defaults and validation (SPEC 9.1), shared by the exact
 * merge (ref/merge.c), the fast one (opt/merge.c) and the bound (core/merge_bound.c). */
#include <string.h>

#include "core/merge_internal.h"

smattn_merge_problem smattn_merge_problem_default(void)
{
    smattn_merge_problem p;
    memset(&p, 0, sizeof p);
    p.lse_base = SMATTN_LSE_BASE_E;
    p.empty_parts = SMATTN_LSE_NEG_INF;
    p.empty_rows = SMATTN_EMPTY_ZERO;
    p.empty_lse = SMATTN_LSE_NEG_INF;
    return p;
}

typedef struct span {
    const unsigned char *lo, *hi; /* [lo, hi) bytes; lo == NULL: none */
} span;

static int is_float(smattn_dtype t)
{
    return t == SMATTN_F64 || t == SMATTN_F32 || t == SMATTN_F16 || t == SMATTN_BF16;
}

/* The largest offset of a tensor of rank <= 4 (extents n, strides s) repeated N times
 * `part` elements apart; the status of a negative stride or an int64 overflow. */
static smattn_status extent(int rank, const int64_t *n, const int64_t *s, int64_t N,
                            int64_t part, smattn_dtype t, const void *data, span *sp)
{
    int64_t m = smattn__max_offset(rank, n, s), pm;
    if (m == -2 || part < 0)
        return SMATTN_ERR_STRIDE;
    if (m < 0 || __builtin_mul_overflow(N - 1, part, &pm) || __builtin_add_overflow(m, pm, &m))
        return SMATTN_ERR_OVERFLOW;
    size_t es = smattn_dtype_size(t);
    if (m >= INT64_MAX / 16)
        return SMATTN_ERR_OVERFLOW;
    sp->lo = data;
    sp->hi = (const unsigned char *)data + (size_t)(m + 1) * es;
    return SMATTN_OK;
}

/* Sufficient condition for an output not to overlap itself (as core/problem.c's): sorted
 * by stride, each stride of a dimension of extent > 1 exceeds the span of the smaller. */
static int self_disjoint(int rank, const int64_t *n, const int64_t *s)
{
    int idx[4], k = 0;
    for (int r = 0; r < rank; r++)
        if (n[r] > 1)
            idx[k++] = r;
    for (int a = 1; a < k; a++)
        for (int c = a; c > 0 && s[idx[c]] < s[idx[c - 1]]; c--) {
            int t = idx[c];
            idx[c] = idx[c - 1];
            idx[c - 1] = t;
        }
    int64_t below = 0;
    for (int a = 0; a < k; a++) {
        int r = idx[a];
        if (s[r] <= below)
            return 0;
        below += (n[r] - 1) * s[r]; /* no overflow: smattn__max_offset checked it */
    }
    return 1;
}

smattn_status smattn_merge_validate(const smattn_merge_problem *p, const smattn_merge_inputs *in,
                                    const smattn_outputs *out)
{
    if (!p || !in || !out)
        return SMATTN_ERR_NULL;
    if ((unsigned)p->lse_base > SMATTN_LSE_BASE_2 ||
        (p->empty_parts != SMATTN_LSE_NEG_INF && p->empty_parts != SMATTN_LSE_POS_INF) ||
        (p->empty_rows != SMATTN_EMPTY_ZERO && p->empty_rows != SMATTN_EMPTY_NAN) ||
        (unsigned)p->empty_lse > SMATTN_LSE_ZERO || out->p.data)
        return SMATTN_ERR_OPTION;
    int64_t dims[5] = {p->N, p->B, p->S, p->Hq, p->Dv};
    for (int k = 0; k < 5; k++)
        if (dims[k] < 1 || dims[k] > SMATTN_MAX_DIM)
            return SMATTN_ERR_SHAPE;
    if (!in->o_parts.data || !in->lse_parts.data || (!out->o.data && !out->lse.data))
        return SMATTN_ERR_NULL;
    if (!is_float(in->o_parts.dtype) || !is_float(in->lse_parts.dtype))
        return SMATTN_ERR_DTYPE;
    const int64_t no[4] = {p->B, p->S, p->Hq, p->Dv}, nl[3] = {p->B, p->Hq, p->S};
    span sp[4];
    memset(sp, 0, sizeof sp);
    smattn_status st;
    if ((st = extent(4, no, in->o_parts.stride, p->N, in->o_part_stride, in->o_parts.dtype,
                     in->o_parts.data, &sp[0])))
        return st;
    if ((st = extent(3, nl, in->lse_parts.stride, p->N, in->lse_part_stride,
                     in->lse_parts.dtype, in->lse_parts.data, &sp[1])))
        return st;
    int nsp = 2;
    const smattn_out_tensor *ot[2] = {&out->o, &out->lse};
    const int64_t *on[2] = {no, nl};
    for (int k = 0; k < 2; k++) {
        if (!ot[k]->data)
            continue;
        if (!is_float(ot[k]->dtype))
            return SMATTN_ERR_DTYPE;
        if ((st = extent(4 - k, on[k], ot[k]->stride, 1, 0, ot[k]->dtype, ot[k]->data, &sp[nsp])))
            return st;
        if (!self_disjoint(4 - k, on[k], ot[k]->stride))
            return SMATTN_ERR_ALIAS;
        for (int j = 0; j < nsp; j++)
            if (sp[nsp].lo < sp[j].hi && sp[j].lo < sp[nsp].hi)
                return SMATTN_ERR_ALIAS;
        nsp++;
    }
    return SMATTN_OK;
}

/* The class of partial n's LSE under the problem's convention (SPEC 9.2). */
int smattn__merge_lse_class(const smattn_merge_problem *p, double t)
{
    if (t != t)
        return MERGE_POISON;
    if (t == -HUGE_VAL)
        return MERGE_EMPTY;
    if (t == HUGE_VAL)
        return p->empty_parts == SMATTN_LSE_POS_INF ? MERGE_EMPTY : MERGE_POISON;
    return MERGE_FINITE;
}
