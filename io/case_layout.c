/* SPDX-License-Identifier: MIT */
/* case_layout.c: the dense, padded twin of a ragged or paged case (SPEC 2.7): its inputs
 * gathered into dense arrays and its outputs scattered into dense shapes, so that a layout
 * case can be judged by the dense rules (smattn check). */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "io/case.h"

/* Sequence b's query and key counts and where its rows start in the packed arrays. */
static int64_t seq_q_len(const smattn_case *c, int64_t b)
{
    const smattn_layout *l = &c->layout;
    return c->packed_q      ? l->cu_seqlens_q[b + 1] - l->cu_seqlens_q[b]
           : c->prob.q_lens ? c->prob.q_lens[b]
                            : c->prob.S;
}

static int64_t seq_k_len(const smattn_case *c, int64_t b)
{
    const smattn_layout *l = &c->layout;
    if (c->packed_k)
        return l->seqused_k ? l->seqused_k[b] : l->cu_seqlens_k[b + 1] - l->cu_seqlens_k[b];
    return c->prob.kv_lens ? c->prob.kv_lens[b] : c->prob.T;
}

/* The element offset of key t of sequence b, head g, column d in the case's K or V. */
static int64_t key_offset(const smattn_case *c, const smattn_tensor *t, int64_t b, int64_t j,
                          int64_t g, int64_t d)
{
    const smattn_layout *l = &c->layout;
    if (c->packed_k)
        return (l->cu_seqlens_k[b] + j) * t->stride[1] + g * t->stride[2] + d * t->stride[3];
    if (c->paged) {
        int64_t page = l->block_table[b * l->bt_stride + j / l->page_size];
        return page * t->stride[0] + (j % l->page_size) * t->stride[1] + g * t->stride[2] +
               d * t->stride[3];
    }
    return b * t->stride[0] + j * t->stride[1] + g * t->stride[2] + d * t->stride[3];
}

static int64_t query_offset(const smattn_case *c, const smattn_tensor *t, int64_t b, int64_t i,
                            int64_t h, int64_t d)
{
    if (c->packed_q)
        return (c->layout.cu_seqlens_q[b] + i) * t->stride[1] + h * t->stride[2] + d * t->stride[3];
    return b * t->stride[0] + i * t->stride[1] + h * t->stride[2] + d * t->stride[3];
}

/* a * b * c * d as a count of elements of es bytes, or -1 if it does not fit in int64 or
 * in size_t bytes (a crafted case can ask for any shape). */
static int64_t count4(int64_t a, int64_t b, int64_t c, int64_t d, size_t es)
{
    int64_t n;
    if (__builtin_mul_overflow(a, b, &n) || __builtin_mul_overflow(n, c, &n) ||
        __builtin_mul_overflow(n, d, &n) || n < 0 || (uint64_t)n > SIZE_MAX / (es ? es : 1))
        return -1;
    return n;
}

/* A dense copy [B, n1, H, D] of t (rows past each sequence's length zero), and its tensor. */
static void *gather(const smattn_case *c, const smattn_tensor *t, int keys, int64_t n1, int64_t H,
                    int64_t D, smattn_tensor *out)
{
    const smattn_problem *p = &c->prob;
    size_t es = smattn_dtype_size(t->dtype);
    int64_t n = count4(p->B, n1, H, D, es);
    unsigned char *d = n < 0 ? NULL : calloc((size_t)(n ? n : 1), es);
    if (!d)
        return NULL;
    for (int64_t b = 0; b < p->B; b++) {
        int64_t len = keys ? seq_k_len(c, b) : seq_q_len(c, b);
        for (int64_t i = 0; i < len; i++)
            for (int64_t h = 0; h < H; h++)
                for (int64_t e = 0; e < D; e++) {
                    int64_t src =
                        keys ? key_offset(c, t, b, i, h, e) : query_offset(c, t, b, i, h, e);
                    memcpy(d + (size_t)(((b * n1 + i) * H + h) * D + e) * es,
                           (const unsigned char *)t->data + (size_t)src * es, es);
                }
    }
    out->data = d;
    out->dtype = t->dtype;
    out->stride[0] = n1 * H * D, out->stride[1] = H * D, out->stride[2] = D, out->stride[3] = 1;
    return d;
}

void smattn_case_twin_free(smattn_case_twin *tw)
{
    if (!tw)
        return;
    free(tw->q);
    free(tw->k);
    free(tw->v);
    free(tw->q_lens);
    free(tw->kv_lens);
    memset(tw, 0, sizeof *tw);
}

int smattn_case_twin_make(const smattn_case *c, smattn_case_twin *tw, char *err, size_t errlen)
{
    memset(tw, 0, sizeof *tw);
    const smattn_problem *p = &c->prob;
    tw->prob = *p;
    tw->in = c->in;
    tw->prob.layout = NULL;
    if (!c->has_layout)
        return 0;
    tw->q_lens = malloc((size_t)p->B * sizeof *tw->q_lens);
    tw->kv_lens = malloc((size_t)p->B * sizeof *tw->kv_lens);
    if (tw->q_lens && tw->kv_lens) {
        for (int64_t b = 0; b < p->B; b++)
            tw->q_lens[b] = seq_q_len(c, b), tw->kv_lens[b] = seq_k_len(c, b);
        tw->q = gather(c, &c->in.q, 0, p->S, p->Hq, p->D, &tw->in.q);
        tw->k = tw->q ? gather(c, &c->in.k, 1, p->T, p->Hkv, p->D, &tw->in.k) : NULL;
        tw->v = tw->k ? gather(c, &c->in.v, 1, p->T, p->Hkv, p->Dv, &tw->in.v) : NULL;
    }
    if (!tw->v) {
        smattn_case_twin_free(tw);
        snprintf(err, errlen, "out of memory for the case's dense twin");
        return -1;
    }
    tw->prob.q_lens = tw->q_lens;
    tw->prob.kv_lens = tw->kv_lens;
    return 0;
}

void smattn_case_twin_outputs_free(smattn_outputs *dense)
{
    if (!dense)
        return;
    free(dense->o.data);
    free(dense->lse.data);
    memset(dense, 0, sizeof *dense);
}

/* Element (b, i, h, col) of O, or (b, h, i) of LSE, in got's layout. */
static double got_at(const smattn_case *c, const smattn_out_tensor *t, int lse, int64_t b,
                     int64_t i, int64_t h, int64_t col)
{
    int64_t row = c->packed_q ? c->layout.cu_seqlens_q[b] + i : i;
    int64_t bo = c->packed_q ? 0 : b * t->stride[0];
    int64_t off = lse ? bo + h * t->stride[1] + row * t->stride[2]
                      : bo + row * t->stride[1] + h * t->stride[2] + col * t->stride[3];
    return smattn_load(t->data, t->dtype, off);
}

int smattn_case_twin_outputs(const smattn_case *c, const smattn_outputs *got,
                             const smattn_outputs *fill, smattn_outputs *dense)
{
    const smattn_problem *p = &c->prob;
    memset(dense, 0, sizeof *dense);
    dense->p = got->p;
    const size_t eo = smattn_dtype_size(got->o.dtype), el = smattn_dtype_size(got->lse.dtype);
    const int64_t nO = count4(p->B, p->S, p->Hq, p->Dv, eo), nL = count4(p->B, p->Hq, p->S, 1, el);
    if (got->o.data && (nO < 0 || !(dense->o.data = calloc((size_t)(nO ? nO : 1), eo))))
        goto nomem;
    if (got->lse.data && (nL < 0 || !(dense->lse.data = calloc((size_t)(nL ? nL : 1), el))))
        goto nomem;
    for (int t = 0; t < 2; t++) {
        smattn_out_tensor *d = t ? &dense->lse : &dense->o;
        const smattn_out_tensor *g = t ? &got->lse : &got->o;
        const smattn_out_tensor *f = fill ? (t ? &fill->lse : &fill->o) : NULL;
        if (!d->data)
            continue;
        d->dtype = g->dtype;
        smattn_problem twin = *p; /* the twin's dense strides, not the layout's */
        twin.layout = NULL;
        smattn_contiguous_strides(&twin, t ? 'l' : 'o', d->stride);
        void *out = d->data;
        for (int64_t b = 0; b < p->B; b++) {
            int64_t Sb = seq_q_len(c, b);
            for (int64_t i = 0; i < p->S; i++)
                for (int64_t h = 0; h < p->Hq; h++)
                    for (int64_t col = 0; col < (t ? 1 : p->Dv); col++) {
                        int64_t e = t ? (b * p->Hq + h) * p->S + i
                                      : ((b * p->S + i) * p->Hq + h) * p->Dv + col;
                        double x = 0;
                        if (i < Sb || !c->packed_q) /* a dense Q's padding rows are stored */
                            x = got_at(c, g, t, b, i, h, col);
                        else if (f && f->data)
                            x = smattn_load(f->data, f->dtype,
                                            t ? b * f->stride[0] + h * f->stride[1] +
                                                    i * f->stride[2]
                                              : b * f->stride[0] + i * f->stride[1] +
                                                    h * f->stride[2] + col * f->stride[3]);
                        smattn_store(out, d->dtype, e, x); /* exact: x has d's dtype */
                    }
        }
    }
    return 0;
nomem:
    smattn_case_twin_outputs_free(dense);
    return -1;
}
