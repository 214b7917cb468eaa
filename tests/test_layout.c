/* SPDX-License-Identifier: MIT */
/* test_layout.c: ragged (cu_seqlens) and paged (block table) layouts (SPEC 2.7). A problem
 * with a layout is its dense padded twin: the oracle, the bound and the kernel (every ISA
 * the CPU has, threads 1 and 2) give the twin's bits; every slot the layout leaves unread
 * holds NaN, infinities or wild table entries; a bad layout is SMATTN_ERR_LAYOUT with the
 * outputs untouched, and smattn_validate_explain names the entry. */
#include <check.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "smattn.h"
#include "core/layout.h"
#include "tests/support/testkit.h"

static const char *const isas[] = {"scalar", "avx2", "avx512"};

/* A tensor buffer: n elements of dtype t. */
typedef struct tbuf {
    unsigned char *d;
    smattn_dtype t;
    int64_t n;
} tbuf;

/* What a layout must never read: NaN, infinities, huge values. */
static double garbage(rng *r)
{
    static const double g[] = {NAN, HUGE_VAL, -HUGE_VAL, 3e38, -1e30};
    return g[rng_pick(r, 5)];
}

static void tb_make(tbuf *b, smattn_dtype t, int64_t n, rng *r)
{
    b->t = t;
    b->n = n > 0 ? n : 1;
    b->d = malloc((size_t)b->n * smattn_dtype_size(t));
    for (int64_t k = 0; k < b->n; k++)
        smattn_store(b->d, t, k, r ? garbage(r) : 0.0);
}

/* The same bytes in every output before a run: an element not written stays the sentinel. */
static void tb_sentinel(tbuf *b)
{
    memset(b->d, 0x5a, (size_t)b->n * smattn_dtype_size(b->t));
}

static int elem_eq(const tbuf *a, int64_t ka, const tbuf *b, int64_t kb)
{
    size_t es = smattn_dtype_size(a->t);
    return memcmp(a->d + ka * (int64_t)es, b->d + kb * (int64_t)es, es) == 0;
}

/* One random problem with a layout, and its dense padded twin. */
typedef struct lcase {
    uint64_t seed;
    smattn_problem pl, pd; /* layout, dense twin */
    smattn_layout L;
    int64_t *Sb, *Tb, *cu_q, *cu_k, *used, *kvl, *kvd, *qld;
    int32_t *bt;
    float *slopes; /* ALiBi's (SPEC 2.8), or NULL */
    int64_t total_q;
    tbuf ql, kl, vl, qd, kd, vd, bias, sinks;
    unsigned char *mask;
    smattn_inputs inl, ind;
    smattn_dtype ot;
} lcase;

/* kind: 0 any, 1 decode (split-K chunks, keys outer, KV heads per item), 2 a mixed batch
 * with S >= 16 (keys in the lanes: decode 1 beside a prefill) */
static void make_case(lcase *c, uint64_t seed, int kind)
{
    memset(c, 0, sizeof *c);
    c->seed = seed;
    rng r = {seed};
    const smattn_dtype dts[3] = {SMATTN_F32, SMATTN_F16, SMATTN_BF16};
    smattn_problem p = smattn_problem_default();
    p.B = rng_int(&r, 1, 4);
    p.Hkv = rng_int(&r, 1, 2);
    p.Hq = p.Hkv * rng_int(&r, 1, 3);
    static const int64_t dims[] = {1, 4, 8, 13, 16, 32};
    p.D = dims[rng_pick(&r, 6)];
    p.Dv = rng_chance(&r, 0.5) ? p.D : dims[rng_pick(&r, 6)];
    p.S = rng_int(&r, 1, 9);
    p.T = rng_int(&r, 1, 200);
    if (kind == 1) {
        p.B = 2, p.S = rng_int(&r, 1, 2), p.Hkv = 2, p.Hq = 2 * rng_int(&r, 5, 8);
        p.D = p.Dv = 32, p.T = rng_int(&r, 1100, 1400);
    } else if (kind == 2) {
        p.B = 3, p.S = rng_int(&r, 40, 90), p.T = rng_int(&r, 60, 160); /* query tiles > 1 */
    }
    int page_kind = (int)rng_pick(&r, 3); /* 0 dense K/V, 1 packed, 2 paged */
    if (kind == 1)
        page_kind = 2;
    int packed_q = rng_chance(&r, 0.6) || page_kind == 0 || kind == 2;
    static const int64_t page_sizes[] = {1, 3, 16, 256};
    int64_t ps = rng_chance(&r, 0.8) ? page_sizes[rng_pick(&r, 4)] : rng_int(&r, 2, 70);
    if (kind == 1)
        ps = rng_chance(&r, 0.5) ? 16 : 3;
    int exact = page_kind == 2 && rng_chance(&r, 0.25); /* a cache filled to capacity */
    int64_t max_pages = (p.T + ps - 1) / ps + (exact ? 0 : rng_int(&r, 0, 2));
    if (exact)
        p.T = max_pages * ps;
    p.causal = (smattn_causal)rng_pick(&r, 3);
    p.window_left = rng_chance(&r, 0.3) ? rng_int(&r, 0, p.T) : -1;
    p.window_right = rng_chance(&r, 0.3) ? rng_int(&r, 0, p.T) : -1;
    p.softcap = rng_chance(&r, 0.3) ? 5.0 + 20.0 * rng_unif(&r) : 0.0;
    p.scale = smattn_default_scale(p.D);
    p.empty_rows = (smattn_empty)rng_pick(&r, 3);
    p.empty_lse = (smattn_empty_lse)rng_pick(&r, 3);
    smattn_dtype it = dts[rng_pick(&r, 3)];
    c->ot = dts[rng_pick(&r, 3)];
    const int64_t B = p.B, S = p.S, T = p.T, Hq = p.Hq, Hkv = p.Hkv, D = p.D, Dv = p.Dv;

    /* lengths: zero-length sequences, S_b > T_b, the whole T */
    c->Sb = calloc((size_t)B, 8), c->Tb = calloc((size_t)B, 8);
    for (int64_t b = 0; b < B; b++) {
        c->Sb[b] = rng_chance(&r, 0.15) ? 0 : rng_chance(&r, 0.3) ? S : rng_int(&r, 0, S);
        c->Tb[b] = rng_chance(&r, 0.15) ? 0 : rng_chance(&r, 0.3) ? T : rng_int(&r, 0, T);
    }
    if (kind == 2)
        c->Sb[0] = 1, c->Sb[1] = S;
    if (exact)
        c->Tb[0] = T;
    if (!packed_q && rng_chance(&r, 0.5))
        for (int64_t b = 0; b < B; b++)
            c->Sb[b] = S; /* q_lens NULL */
    int qlens_null = !packed_q;
    for (int64_t b = 0; b < B && !packed_q; b++)
        qlens_null &= c->Sb[b] == S;
    int kvlens_null = page_kind == 0 && rng_chance(&r, 0.5);
    if (kvlens_null)
        for (int64_t b = 0; b < B; b++)
            c->Tb[b] = T;

    /* paged: page ids (shared prefixes with sequence 0, the rest fresh), permuted */
    int64_t bt_stride = max_pages + rng_int(&r, 0, 2);
    c->bt = malloc((size_t)(B * bt_stride) * 4);
    static const int32_t wild[] = {-1, INT32_MAX, INT32_MIN, 1 << 30};
    for (int64_t k = 0; k < B * bt_stride; k++)
        c->bt[k] = wild[rng_pick(&r, 4)];
    int64_t *share = calloc((size_t)B, 8); /* pages shared with sequence 0 */
    int64_t fresh = 0;
    for (int64_t b = 0; b < B; b++) {
        int64_t usedp = (c->Tb[b] + ps - 1) / ps;
        if (b > 0 && page_kind == 2 && rng_chance(&r, 0.4)) {
            int64_t m0 = c->Tb[0] / ps, mb = c->Tb[b] / ps;
            share[b] = rng_int(&r, 0, m0 < mb ? m0 : mb);
        }
        fresh += usedp - share[b];
    }
    int64_t num_pages = fresh + (exact ? 0 : rng_int(&r, 0, 3));
    if (num_pages < 1)
        num_pages = 1;
    int64_t *perm = malloc((size_t)num_pages * 8);
    for (int64_t k = 0; k < num_pages; k++)
        perm[k] = k;
    for (int64_t k = num_pages - 1; k > 0; k--) {
        int64_t j = rng_pick(&r, k + 1), t = perm[k];
        perm[k] = perm[j], perm[j] = t;
    }
    int64_t next = 0;
    for (int64_t b = 0; b < B; b++) {
        int64_t usedp = (c->Tb[b] + ps - 1) / ps;
        for (int64_t k = 0; k < usedp; k++)
            c->bt[b * bt_stride + k] =
                k < share[b] ? c->bt[k] : (int32_t)perm[next++];
    }

    /* the logical values (shared pages hold sequence 0's keys) */
    double *qv = malloc((size_t)(B * S * Hq * D) * 8);
    double *kv = malloc((size_t)(B * T * Hkv * D) * 8);
    double *vv = malloc((size_t)(B * T * Hkv * Dv) * 8);
    for (int64_t k = 0; k < B * S * Hq * D; k++)
        qv[k] = rng_gauss(&r) * (rng_chance(&r, 0.02) ? 30 : 1);
    for (int64_t k = 0; k < B * T * Hkv * D; k++)
        kv[k] = rng_gauss(&r);
    for (int64_t k = 0; k < B * T * Hkv * Dv; k++)
        vv[k] = rng_gauss(&r);
    for (int64_t b = 1; b < B; b++) {
        int64_t n = share[b] * ps;
        memcpy(kv + b * T * Hkv * D, kv, (size_t)(n * Hkv * D) * 8);
        memcpy(vv + b * T * Hkv * Dv, vv, (size_t)(n * Hkv * Dv) * 8);
    }

    /* the dense twin: padding rows and keys hold garbage too (SPEC 3.6) */
    tb_make(&c->qd, it, B * S * Hq * D, &r);
    tb_make(&c->kd, it, B * T * Hkv * D, &r);
    tb_make(&c->vd, it, B * T * Hkv * Dv, &r);
    for (int64_t b = 0; b < B; b++) {
        for (int64_t i = 0; i < c->Sb[b]; i++)
            for (int64_t k = 0; k < Hq * D; k++)
                smattn_store(c->qd.d, it, (b * S + i) * Hq * D + k, qv[(b * S + i) * Hq * D + k]);
        for (int64_t t = 0; t < c->Tb[b]; t++) {
            for (int64_t k = 0; k < Hkv * D; k++)
                smattn_store(c->kd.d, it, (b * T + t) * Hkv * D + k, kv[(b * T + t) * Hkv * D + k]);
            for (int64_t k = 0; k < Hkv * Dv; k++)
                smattn_store(c->vd.d, it, (b * T + t) * Hkv * Dv + k,
                             vv[(b * T + t) * Hkv * Dv + k]);
        }
    }
    smattn_inputs in;
    memset(&in, 0, sizeof in);
    in.q = (smattn_tensor){c->qd.d, it, {0}};
    in.k = (smattn_tensor){c->kd.d, it, {0}};
    in.v = (smattn_tensor){c->vd.d, it, {0}};
    smattn_contiguous_strides(&p, 'q', in.q.stride);
    smattn_contiguous_strides(&p, 'k', in.k.stride);
    smattn_contiguous_strides(&p, 'v', in.v.stride);
    if (rng_chance(&r, 0.4)) { /* additive bias with some -inf */
        tb_make(&c->bias, SMATTN_F32, B * Hq * S * T, NULL);
        for (int64_t k = 0; k < c->bias.n; k++)
            smattn_store(c->bias.d, SMATTN_F32, k, rng_chance(&r, 0.1) ? -HUGE_VAL : rng_gauss(&r));
        in.bias = (smattn_tensor){c->bias.d, SMATTN_F32, {0}};
        smattn_contiguous_strides(&p, 'b', in.bias.stride);
    }
    if (rng_chance(&r, 0.3)) {
        c->mask = malloc((size_t)(B * Hq * S * T));
        for (int64_t k = 0; k < B * Hq * S * T; k++)
            c->mask[k] = (unsigned char)rng_chance(&r, 0.8);
        in.mask = (smattn_tensor){c->mask, SMATTN_BOOL, {0}};
        smattn_contiguous_strides(&p, 'b', in.mask.stride);
    }
    if (rng_chance(&r, 0.3)) {
        tb_make(&c->sinks, SMATTN_F32, Hq, NULL);
        for (int64_t h = 0; h < Hq; h++)
            smattn_store(c->sinks.d, SMATTN_F32, h, rng_gauss(&r));
        in.sinks = (smattn_tensor){c->sinks.d, SMATTN_F32, {1, 0, 0, 0}};
    }
    c->ind = in;
    c->pd = p;
    c->qld = calloc((size_t)B, 8), c->kvd = calloc((size_t)B, 8), c->kvl = calloc((size_t)B, 8);
    memcpy(c->qld, c->Sb, (size_t)B * 8);
    memcpy(c->kvd, c->Tb, (size_t)B * 8);
    memcpy(c->kvl, c->Tb, (size_t)B * 8);
    c->pd.q_lens = qlens_null ? NULL : c->qld;
    c->pd.kv_lens = kvlens_null ? NULL : c->kvd;

    /* the layout problem */
    c->pl = c->pd;
    c->inl = in;
    c->pl.layout = &c->L;
    if (packed_q) {
        c->cu_q = calloc((size_t)B + 1, 8);
        for (int64_t b = 0; b < B; b++)
            c->cu_q[b + 1] = c->cu_q[b] + c->Sb[b];
        c->total_q = c->cu_q[B];
        c->L.cu_seqlens_q = c->cu_q;
        c->pl.q_lens = NULL;
        tb_make(&c->ql, it, (c->total_q > 0 ? c->total_q : 1) * Hq * D, &r); /* >= 1 row */
        for (int64_t b = 0; b < B; b++)
            for (int64_t i = 0; i < c->Sb[b]; i++)
                for (int64_t k = 0; k < Hq * D; k++)
                    smattn_store(c->ql.d, it, (c->cu_q[b] + i) * Hq * D + k,
                                 qv[(b * S + i) * Hq * D + k]);
        /* stride[0] is unused (extent 1): any value */
        c->inl.q = (smattn_tensor){c->ql.d, it, {rng_int(&r, 0, 1 << 20), Hq * D, D, 1}};
    }
    if (page_kind == 1) { /* packed keys, with seqused_k and dead keys behind it */
        int use = rng_chance(&r, 0.5);
        c->cu_k = calloc((size_t)B + 1, 8);
        c->used = calloc((size_t)B, 8);
        for (int64_t b = 0; b < B; b++)
            c->cu_k[b + 1] = c->cu_k[b] + c->Tb[b] + (use ? rng_int(&r, 0, 3) : 0);
        int64_t tk = c->cu_k[B] > 0 ? c->cu_k[B] : 1; /* an empty tensor still has a row */
        tb_make(&c->kl, it, tk * Hkv * D, &r);
        tb_make(&c->vl, it, tk * Hkv * Dv, &r);
        for (int64_t b = 0; b < B; b++)
            for (int64_t t = 0; t < c->Tb[b]; t++) {
                for (int64_t k = 0; k < Hkv * D; k++)
                    smattn_store(c->kl.d, it, (c->cu_k[b] + t) * Hkv * D + k,
                                 kv[(b * T + t) * Hkv * D + k]);
                for (int64_t k = 0; k < Hkv * Dv; k++)
                    smattn_store(c->vl.d, it, (c->cu_k[b] + t) * Hkv * Dv + k,
                                 vv[(b * T + t) * Hkv * Dv + k]);
            }
        memcpy(c->used, c->Tb, (size_t)B * 8);
        c->L.cu_seqlens_k = c->cu_k;
        c->L.seqused_k = use ? c->used : NULL;
        c->pl.kv_lens = NULL;
        c->inl.k = (smattn_tensor){c->kl.d, it, {rng_int(&r, 0, 99), Hkv * D, D, 1}};
        c->inl.v = (smattn_tensor){c->vl.d, it, {0, Hkv * Dv, Dv, 1}};
    } else if (page_kind == 2) { /* paged, NHD or HND */
        int hnd = rng_chance(&r, 0.4);
        tb_make(&c->kl, it, num_pages * ps * Hkv * D, &r);
        tb_make(&c->vl, it, num_pages * ps * Hkv * Dv, &r);
        int64_t ks[4], vs[4];
        if (hnd) {
            ks[0] = Hkv * ps * D, ks[1] = D, ks[2] = ps * D, ks[3] = 1;
            vs[0] = Hkv * ps * Dv, vs[1] = Dv, vs[2] = ps * Dv, vs[3] = 1;
        } else {
            ks[0] = ps * Hkv * D, ks[1] = Hkv * D, ks[2] = D, ks[3] = 1;
            vs[0] = ps * Hkv * Dv, vs[1] = Hkv * Dv, vs[2] = Dv, vs[3] = 1;
        }
        for (int64_t b = 0; b < B; b++)
            for (int64_t t = 0; t < c->Tb[b]; t++) {
                int64_t pg = c->bt[b * bt_stride + t / ps], sl = t % ps;
                for (int64_t g = 0; g < Hkv; g++) {
                    for (int64_t d = 0; d < D; d++)
                        smattn_store(c->kl.d, it, pg * ks[0] + sl * ks[1] + g * ks[2] + d,
                                     kv[((b * T + t) * Hkv + g) * D + d]);
                    for (int64_t d = 0; d < Dv; d++)
                        smattn_store(c->vl.d, it, pg * vs[0] + sl * vs[1] + g * vs[2] + d,
                                     vv[((b * T + t) * Hkv + g) * Dv + d]);
                }
            }
        c->L.block_table = c->bt;
        c->L.bt_stride = bt_stride;
        c->L.max_pages = max_pages;
        c->L.num_pages = num_pages;
        c->L.page_size = ps;
        c->pl.kv_lens = c->kvl;
        c->inl.k = (smattn_tensor){c->kl.d, it, {ks[0], ks[1], ks[2], ks[3]}};
        c->inl.v = (smattn_tensor){c->vl.d, it, {vs[0], vs[1], vs[2], vs[3]}};
    }
    /* ALiBi on a third of the cases (drawn last: the other draws keep their cases): its
     * distances read S_b and T_b, which the layout gives (SPEC 2.7, 2.8) */
    if (rng_chance(&r, 0.35)) {
        smattn_alibi_mode mode = in.bias.data && rng_chance(&r, 0.3) ? SMATTN_ALIBI_MASK
                                 : rng_chance(&r, 0.5)               ? SMATTN_ALIBI_SYMMETRIC
                                                                     : SMATTN_ALIBI_ONE_SIDED;
        int per = rng_chance(&r, 0.5);
        int64_t n = (per ? B : 1) * Hq;
        c->slopes = malloc((size_t)n * sizeof *c->slopes);
        for (int64_t k = 0; k < n; k++)
            c->slopes[k] = (float)(rng_int(&r, -64, 64) / 32.0);
        c->pd.alibi_mode = c->pl.alibi_mode = mode;
        c->pd.alibi_slopes = c->pl.alibi_slopes = c->slopes;
        c->pd.alibi_slopes_per_batch = c->pl.alibi_slopes_per_batch = per;
    }
    free(share), free(perm), free(qv), free(kv), free(vv);
}

static void free_case(lcase *c)
{
    free(c->Sb), free(c->Tb), free(c->cu_q), free(c->cu_k), free(c->used), free(c->kvl);
    free(c->kvd), free(c->qld), free(c->bt), free(c->mask), free(c->slopes);
    tbuf *t[8] = {&c->ql, &c->kl, &c->vl, &c->qd, &c->kd, &c->vd, &c->bias, &c->sinks};
    for (int k = 0; k < 8; k++)
        free(t[k]->d);
}

/* Outputs of one problem: O, LSE, P (dense, or O and LSE packed). */
typedef struct obufs {
    tbuf o, l, p;
    smattn_outputs out;
} obufs;

static void out_make(obufs *x, const lcase *c, int packed, smattn_dtype t)
{
    const smattn_problem *p = &c->pd;
    int64_t rows = packed ? c->total_q : p->B * p->S, r1 = rows > 0 ? rows : 1;
    tb_make(&x->o, t, r1 * p->Hq * p->Dv, NULL);
    tb_make(&x->l, t, p->Hq * r1, NULL);
    tb_make(&x->p, t, p->B * p->Hq * p->S * p->T, NULL);
    memset(&x->out, 0, sizeof x->out);
    x->out.o = (smattn_out_tensor){x->o.d, t, {packed ? 3 : p->S * p->Hq * p->Dv, p->Hq * p->Dv, p->Dv, 1}};
    x->out.lse = (smattn_out_tensor){x->l.d, t, {packed ? 5 : p->Hq * p->S, packed ? r1 : p->S, 1, 0}};
    x->out.p = (smattn_out_tensor){x->p.d, t, {0}};
    smattn_contiguous_strides(p, 'p', x->out.p.stride);
}

static void out_sentinel(obufs *x)
{
    tb_sentinel(&x->o), tb_sentinel(&x->l), tb_sentinel(&x->p);
}

static void out_free(obufs *x)
{
    free(x->o.d), free(x->l.d), free(x->p.d);
}

/* Every output of the layout problem equals its dense twin's, bit for bit. */
static int same_as_twin(const lcase *c, const obufs *lay, const obufs *den, const char *what,
                        int with_p)
{
    const smattn_problem *p = &c->pd;
    const int packed = c->cu_q != NULL;
    for (int64_t b = 0; b < p->B; b++)
        for (int64_t i = 0; i < p->S; i++) {
            if (packed && i >= c->Sb[b])
                continue; /* no storage: nothing to compare */
            int64_t row = packed ? c->cu_q[b] + i : b * p->S + i;
            int64_t nrow = packed ? (c->total_q > 0 ? c->total_q : 1) : p->S;
            for (int64_t h = 0; h < p->Hq; h++) {
                for (int64_t d = 0; d < p->Dv; d++)
                    if (!elem_eq(&lay->o, (row * p->Hq + h) * p->Dv + d, &den->o,
                                 ((b * p->S + i) * p->Hq + h) * p->Dv + d)) {
                        fprintf(stderr, "seed %llu %s: O[%lld,%lld,%lld,%lld] differs\n",
                                (unsigned long long)c->seed, what, (long long)b, (long long)i,
                                (long long)h, (long long)d);
                        return 0;
                    }
                int64_t lk = packed ? h * nrow + row : (b * p->Hq + h) * p->S + i;
                if (!elem_eq(&lay->l, lk, &den->l, (b * p->Hq + h) * p->S + i)) {
                    fprintf(stderr, "seed %llu %s: LSE[%lld,%lld,%lld] differs\n",
                            (unsigned long long)c->seed, what, (long long)b, (long long)h,
                            (long long)i);
                    return 0;
                }
            }
        }
    for (int64_t k = 0; with_p && k < den->p.n; k++)
        if (!elem_eq(&lay->p, k, &den->p, k)) {
            fprintf(stderr, "seed %llu %s: P[%lld] differs\n", (unsigned long long)c->seed, what,
                    (long long)k);
            return 0;
        }
    return 1;
}

static void check_case(uint64_t seed, int kind, int with_ref)
{
    lcase c;
    make_case(&c, seed, kind);
    obufs den, lay;
    out_make(&den, &c, 0, c.ot);
    out_make(&lay, &c, c.cu_q != NULL, c.ot);
    char msg[256];
    ck_assert_msg(smattn_validate_explain(&c.pl, &c.inl, &lay.out, msg, sizeof msg) == SMATTN_OK,
                  "seed %llu: %s", (unsigned long long)seed, msg);
    ck_assert_msg(smattn_validate(&c.pd, &c.ind, &den.out) == SMATTN_OK, "seed %llu",
                  (unsigned long long)seed);
    ck_assert_str_eq(msg, "");

    /* visibility is the twin's */
    for (int64_t b = 0; b < c.pd.B; b++)
        for (int64_t i = 0; i < c.pd.S; i++)
            for (int64_t j = 0; j < c.pd.T; j += 7)
                ck_assert_int_eq(smattn_visible(&c.pl, &c.inl, b, 0, i, j),
                                 smattn_visible(&c.pd, &c.ind, b, 0, i, j));

    if (with_ref) { /* the oracle, threads 1 and 2 */
        out_sentinel(&den);
        smattn_ref_config cfg = {2, 0, 0, 0};
        smattn_ref_stats sd, sl;
        ck_assert_int_eq(smattn_ref(&c.pd, &c.ind, &den.out, &cfg, &sd), SMATTN_OK);
        /* without P (the padding rows of a packed batch are skipped): O and LSE, and the
         * row counts, are the twin's */
        smattn_outputs ln = lay.out;
        ln.p.data = NULL;
        out_sentinel(&lay);
        ck_assert_int_eq(smattn_ref(&c.pl, &c.inl, &ln, &cfg, &sl), SMATTN_OK);
        ck_assert_msg(same_as_twin(&c, &lay, &den, "ref without P", 0), "ref without P");
        ck_assert_int_eq(sl.rows, sd.rows);
        ck_assert_int_eq(sl.rows_empty, sd.rows_empty);
        for (int th = 1; th <= 2; th++) {
            out_sentinel(&lay);
            cfg.threads = th;
            ck_assert_int_eq(smattn_ref(&c.pl, &c.inl, &lay.out, &cfg, NULL), SMATTN_OK);
            ck_assert_msg(same_as_twin(&c, &lay, &den, th == 1 ? "ref threads 1" : "ref threads 2", 1),
                          "ref");
        }
        /* the bound: the same numbers per element */
        obufs bd, bl;
        out_make(&bd, &c, 0, SMATTN_F64);
        out_make(&bl, &c, c.cu_q != NULL, SMATTN_F64);
        out_sentinel(&bd), out_sentinel(&bl);
        smattn_precision pm = smattn_opt_precision(&c.pd);
        ck_assert_int_eq(smattn_bound(&c.pd, &c.ind, &pm, &den.out, &bd.out), SMATTN_OK);
        ck_assert_int_eq(smattn_bound(&c.pl, &c.inl, &pm, &lay.out, &bl.out), SMATTN_OK);
        ck_assert_msg(same_as_twin(&c, &bl, &bd, "bound", 1), "bound");
        out_free(&bd), out_free(&bl);
    }
    for (int k = 0; k < 3; k++) { /* the kernel: every ISA, threads 1 and 2 */
        if (!smattn_opt_isa_available(isas[k]))
            continue;
        smattn_opt_config cfg = {1, isas[k]};
        out_sentinel(&den);
        ck_assert_int_eq(smattn_attention(&c.pd, &c.ind, &den.out, &cfg), SMATTN_OK);
        for (int th = 1; th <= 2; th++) {
            char what[64];
            snprintf(what, sizeof what, "opt %s threads %d", isas[k], th);
            cfg.threads = th;
            out_sentinel(&lay);
            ck_assert_int_eq(smattn_attention(&c.pl, &c.inl, &lay.out, &cfg), SMATTN_OK);
            ck_assert_msg(same_as_twin(&c, &lay, &den, what, 1), "%s", what);
        }
        /* without P: the kernel skips a packed batch's padding rows (they have no O) */
        smattn_outputs dn = den.out, ln = lay.out;
        dn.p.data = NULL, ln.p.data = NULL;
        out_sentinel(&den), out_sentinel(&lay);
        ck_assert_int_eq(smattn_attention(&c.pd, &c.ind, &dn, &cfg), SMATTN_OK);
        ck_assert_int_eq(smattn_attention(&c.pl, &c.inl, &ln, &cfg), SMATTN_OK);
        ck_assert_msg(same_as_twin(&c, &lay, &den, "opt without P", 0), "%s without P", isas[k]);
    }
    out_free(&den), out_free(&lay);
    free_case(&c);
}

START_TEST(random_layouts_are_their_dense_twins)
{
    int n = test_scaled(40);
    for (int k = 0; k < n; k++)
        check_case(0x1a70u + (uint64_t)k, 0, 1);
}
END_TEST

START_TEST(paged_decode_split_k)
{
    int n = test_scaled(4);
    for (int k = 0; k < n; k++)
        check_case(0xdec0u + (uint64_t)k, 1, k < 2);
}
END_TEST

START_TEST(mixed_batch_prefill_beside_decode)
{
    int n = test_scaled(4);
    for (int k = 0; k < n; k++)
        check_case(0x9f11u + (uint64_t)k, 2, 1);
}
END_TEST

/* ---- the backward (SPEC 10.1 with 2.7) ------------------------------------------------- */

static int64_t off4(const int64_t s[4], int64_t a, int64_t b, int64_t c, int64_t d)
{
    return a * s[0] + b * s[1] + c * s[2] + d * s[3];
}

/* Gradient buffers: dQ, dK, dV with the strides of Q, K, V (the layout's storage, or dense). */
typedef struct gbufs {
    tbuf q, k, v, bi; /* bi: dBias, [B,Hq,S,T] of p (the twin's shape) unless ALiBi's mask mode */
    smattn_grad_outputs go;
} gbufs;

static void grad_make(gbufs *g, const smattn_problem *p, const smattn_inputs *in, const tbuf *qb,
                      const tbuf *kb, const tbuf *vb, smattn_dtype t)
{
    memset(g, 0, sizeof *g);
    tb_make(&g->q, t, qb->n, NULL), tb_make(&g->k, t, kb->n, NULL), tb_make(&g->v, t, vb->n, NULL);
    g->go.dq = (smattn_out_tensor){g->q.d, t, {in->q.stride[0], in->q.stride[1], in->q.stride[2], in->q.stride[3]}};
    g->go.dk = (smattn_out_tensor){g->k.d, t, {in->k.stride[0], in->k.stride[1], in->k.stride[2], in->k.stride[3]}};
    g->go.dv = (smattn_out_tensor){g->v.d, t, {in->v.stride[0], in->v.stride[1], in->v.stride[2], in->v.stride[3]}};
    if (p->alibi_mode != SMATTN_ALIBI_MASK) { /* the mask mode has no dBias (SPEC 10.1) */
        tb_make(&g->bi, t, p->B * p->Hq * p->S * p->T, NULL);
        g->go.dbias = (smattn_out_tensor){g->bi.d, t, {p->Hq * p->S * p->T, p->S * p->T, p->T, 1}};
    }
}

static void grad_sentinel(gbufs *g)
{
    tb_sentinel(&g->q), tb_sentinel(&g->k), tb_sentinel(&g->v);
    if (g->bi.d)
        tb_sentinel(&g->bi);
}

static void grad_free(gbufs *g)
{
    free(g->q.d), free(g->k.d), free(g->v.d), free(g->bi.d);
}

/* The layout's gradients are the twin's at every stored row and key t < T_b, and +0 in the
 * rest of their storage (SPEC 10.1). */
static int grads_as_twin(const lcase *c, const gbufs *lay, const gbufs *den, const char *what)
{
    const smattn_problem *pl = &c->pl, *p = &c->pd;
    unsigned char *seen[3] = {calloc((size_t)lay->q.n, 1), calloc((size_t)lay->k.n, 1),
                              calloc((size_t)lay->v.n, 1)};
    int ok = 1;
    for (int64_t b = 0; b < p->B && ok; b++) {
        for (int64_t i = 0; i < p->S && ok; i++)
            for (int64_t h = 0; h < p->Hq && smattn__row_stored(pl, b, i) && ok; h++)
                for (int64_t d = 0; d < p->D && ok; d++) {
                    int64_t kl = smattn__row_off(pl, lay->go.dq.stride, b, i, h, d);
                    seen[0][kl] = 1;
                    ok = elem_eq(&lay->q, kl, &den->q, off4(den->go.dq.stride, b, i, h, d));
                    if (!ok)
                        fprintf(stderr, "seed %llu %s: dQ[%lld,%lld,%lld,%lld] differs\n",
                                (unsigned long long)c->seed, what, (long long)b, (long long)i,
                                (long long)h, (long long)d);
                }
        int64_t Tb = c->Tb[b];
        for (int64_t t = 0; t < Tb && ok; t++)
            for (int64_t g = 0; g < p->Hkv && ok; g++)
                for (int w = 1; w <= 2 && ok; w++) {
                    const tbuf *lb = w == 1 ? &lay->k : &lay->v, *db = w == 1 ? &den->k : &den->v;
                    const smattn_out_tensor *lo = w == 1 ? &lay->go.dk : &lay->go.dv,
                                            *dn = w == 1 ? &den->go.dk : &den->go.dv;
                    for (int64_t d = 0; d < (w == 1 ? p->D : p->Dv) && ok; d++) {
                        int64_t kl = smattn__key_off(pl, lo->stride, b, t, g, d);
                        seen[w][kl] = 1;
                        ok = elem_eq(lb, kl, db, off4(dn->stride, b, t, g, d));
                        if (!ok)
                            fprintf(stderr, "seed %llu %s: d%c[%lld,%lld,%lld,%lld] differs\n",
                                    (unsigned long long)c->seed, what, w == 1 ? 'K' : 'V',
                                    (long long)b, (long long)t, (long long)g, (long long)d);
                    }
                }
    }
    const tbuf *lb[3] = {&lay->q, &lay->k, &lay->v};
    for (int w = 0; w < 3 && ok; w++) /* the storage nothing reaches: +0 */
        for (int64_t k = 0; k < lb[w]->n && ok; k++)
            if (!seen[w][k]) {
                size_t es = smattn_dtype_size(lb[w]->t);
                for (size_t x = 0; x < es && ok; x++)
                    ok = lb[w]->d[(size_t)k * es + x] == 0;
                if (!ok)
                    fprintf(stderr, "seed %llu %s: gradient %d element %lld reached by no key "
                                    "or row is not +0\n",
                            (unsigned long long)c->seed, what, w, (long long)k);
            }
    free(seen[0]), free(seen[1]), free(seen[2]);
    /* dBias in the twin's shape: every element the twin's (a packed batch's padding rows
     * are +0 in both: no loss term in the layout, dO = dLSE = 0 in the twin) */
    for (int64_t k = 0; lay->bi.d && k < lay->bi.n && ok; k++) {
        ok = elem_eq(&lay->bi, k, &den->bi, k);
        if (!ok)
            fprintf(
                stderr,
                "seed %llu %s: dBias element %lld differs: %a against %a (S %lld T %lld Hq %lld)\n",
                (unsigned long long)c->seed, what, (long long)k,
                smattn_load(lay->bi.d, lay->bi.t, k), smattn_load(den->bi.d, den->bi.t, k),
                (long long)p->S, (long long)p->T, (long long)p->Hq);
    }
    return ok;
}

/* Does the case's block table name one page twice among its used entries? */
static int pages_shared(const lcase *c)
{
    const smattn_layout *L = &c->L;
    if (!L->block_table)
        return 0;
    unsigned char *hit = calloc((size_t)L->num_pages, 1);
    int shared = 0;
    for (int64_t b = 0; b < c->pl.B; b++)
        for (int64_t k = 0; k < (c->Tb[b] + L->page_size - 1) / L->page_size; k++)
            shared |= hit[L->block_table[b * L->bt_stride + k]]++ != 0;
    free(hit);
    return shared;
}

/* The backward of a layout problem is its dense twin's (SPEC 10.1): the oracle, the bound
 * and the fast backward (every ISA, threads 1 and 2), bit for bit. The twin's padding rows
 * of a packed batch hold dO = 0 (they have no loss term in the layout problem) and the
 * `nan` convention is replaced there (its padding rows would poison the twin only). A table
 * that shares a page is SMATTN_ERR_LAYOUT. */
static void check_backward_case(uint64_t seed, int kind, int with_ref)
{
    lcase c;
    make_case(&c, seed, kind);
    const smattn_problem *p = &c.pd;
    const int64_t B = p->B, S = p->S, T = p->T, Hq = p->Hq, Hkv = p->Hkv, D = p->D, Dv = p->Dv;
    rng r = {seed ^ 0xbacc};
    int padded = 0;
    for (int64_t b = 0; b < B; b++)
        padded |= c.Sb[b] < S;
    if (c.cu_q && padded && p->empty_rows == SMATTN_EMPTY_NAN)
        c.pd.empty_rows = c.pl.empty_rows = SMATTN_EMPTY_ZERO;
    /* the twin's unread rows and keys: 0, so that the fast backward (finite inputs only)
     * takes it; the oracle never reads them */
    for (int64_t b = 0; b < B; b++) {
        for (int64_t i = c.Sb[b]; i < S; i++)
            for (int64_t k = 0; k < Hq * D; k++)
                smattn_store(c.qd.d, c.qd.t, (b * S + i) * Hq * D + k, 0.0);
        for (int64_t t = c.Tb[b]; t < T; t++) {
            for (int64_t k = 0; k < Hkv * D; k++)
                smattn_store(c.kd.d, c.kd.t, (b * T + t) * Hkv * D + k, 0.0);
            for (int64_t k = 0; k < Hkv * Dv; k++)
                smattn_store(c.vd.d, c.vd.t, (b * T + t) * Hkv * Dv + k, 0.0);
        }
    }
    /* dO and dLSE: dense, and in Q's layout */
    const int64_t rows = c.cu_q ? (c.total_q > 0 ? c.total_q : 1) : B * S;
    tbuf dod, dol, dld, dll;
    tb_make(&dod, SMATTN_F32, B * S * Hq * Dv, NULL), tb_make(&dol, SMATTN_F32, rows * Hq * Dv, NULL);
    tb_make(&dld, SMATTN_F32, B * Hq * S, NULL), tb_make(&dll, SMATTN_F32, Hq * rows, NULL);
    const int with_dlse = rng_chance(&r, 0.5);
    for (int64_t b = 0; b < B; b++)
        for (int64_t i = 0; i < S; i++) {
            const int stored = !c.cu_q || i < c.Sb[b];
            const int64_t row = c.cu_q ? c.cu_q[b] + i : b * S + i;
            for (int64_t h = 0; h < Hq; h++) {
                for (int64_t d = 0; d < Dv; d++) {
                    double x = stored ? rng_gauss(&r) : 0.0;
                    smattn_store(dod.d, SMATTN_F32, ((b * S + i) * Hq + h) * Dv + d, x);
                    if (stored)
                        smattn_store(dol.d, SMATTN_F32, (row * Hq + h) * Dv + d, x);
                }
                double x = stored ? rng_gauss(&r) : 0.0;
                smattn_store(dld.d, SMATTN_F32, (b * Hq + h) * S + i, x);
                if (stored)
                    smattn_store(dll.d, SMATTN_F32, c.cu_q ? h * rows + row : (b * Hq + h) * S + i, x);
            }
        }
    smattn_grad_inputs gd, gl;
    memset(&gd, 0, sizeof gd), memset(&gl, 0, sizeof gl);
    gd.dout = (smattn_tensor){dod.d, SMATTN_F32, {S * Hq * Dv, Hq * Dv, Dv, 1}};
    gl.dout = (smattn_tensor){dol.d, SMATTN_F32, {c.cu_q ? 7 : S * Hq * Dv, Hq * Dv, Dv, 1}};
    if (with_dlse) {
        gd.dlse = (smattn_tensor){dld.d, SMATTN_F32, {Hq * S, S, 1, 0}};
        gl.dlse = (smattn_tensor){dll.d, SMATTN_F32,
                                  {c.cu_q ? 3 : Hq * S, c.cu_q ? rows : S, 1, 0}};
    }
    gbufs den, lay;
    const tbuf *lq = c.cu_q ? &c.ql : &c.qd, *lk = c.kl.d ? &c.kl : &c.kd,
               *lv = c.vl.d ? &c.vl : &c.vd;
    grad_make(&den, &c.pd, &c.ind, &c.qd, &c.kd, &c.vd, c.ot);
    grad_make(&lay, &c.pl, &c.inl, lq, lk, lv, c.ot);
    if (pages_shared(&c)) { /* SPEC 10.4: refused, nothing written */
        grad_sentinel(&lay);
        char msg[256];
        ck_assert_int_eq(smattn_ref_backward(&c.pl, &c.inl, &gl, &lay.go, NULL, NULL),
                         SMATTN_ERR_LAYOUT);
        ck_assert_int_eq(smattn_attention_backward(&c.pl, &c.inl, NULL, &gl, &lay.go, NULL),
                         SMATTN_ERR_LAYOUT);
        (void)msg;
        for (int64_t k = 0; k < lay.k.n * (int64_t)smattn_dtype_size(lay.k.t); k++)
            ck_assert_int_eq(lay.k.d[k], 0x5a);
        goto out;
    }
    if (with_ref) {
        smattn_ref_config cfg = {1, 0, 0, 0};
        grad_sentinel(&den);
        ck_assert_int_eq(smattn_ref_backward(&c.pd, &c.ind, &gd, &den.go, &cfg, NULL), SMATTN_OK);
        for (int th = 1; th <= 2; th++) {
            cfg.threads = th;
            grad_sentinel(&lay);
            ck_assert_int_eq(smattn_ref_backward(&c.pl, &c.inl, &gl, &lay.go, &cfg, NULL),
                             SMATTN_OK);
            ck_assert_msg(grads_as_twin(&c, &lay, &den, "ref backward"), "ref backward");
        }
        /* the bound: the same numbers per element */
        gbufs bd, bl;
        grad_make(&bd, &c.pd, &c.ind, &c.qd, &c.kd, &c.vd, SMATTN_F64);
        grad_make(&bl, &c.pl, &c.inl, lq, lk, lv, SMATTN_F64);
        grad_sentinel(&bd), grad_sentinel(&bl);
        smattn_backward_precision pm = smattn_opt_backward_precision(&c.pd);
        ck_assert_int_eq(smattn_backward_bound(&c.pd, &c.ind, &gd, &pm, &den.go, &bd.go), SMATTN_OK);
        ck_assert_int_eq(smattn_backward_bound(&c.pl, &c.inl, &gl, &pm, &lay.go, &bl.go), SMATTN_OK);
        /* a `mean` padding row of the twin counts among its keys' rows (N_j of B9) though
         * its dO is 0: the twin's bound is then larger, not equal */
        if (!(c.cu_q && padded && p->empty_rows == SMATTN_EMPTY_MEAN))
            ck_assert_msg(grads_as_twin(&c, &bl, &bd, "backward bound"), "backward bound");
        grad_free(&bd), grad_free(&bl);
    }
    for (int k = 0; k < 3; k++) {
        if (!smattn_opt_isa_available(isas[k]))
            continue;
        smattn_opt_config cfg = {1, isas[k]};
        grad_sentinel(&den);
        smattn_status sd = smattn_attention_backward(&c.pd, &c.ind, NULL, &gd, &den.go, &cfg);
        ck_assert_msg(sd == SMATTN_OK || sd == SMATTN_ERR_UNSUPPORTED, "seed %llu: %d",
                      (unsigned long long)seed, (int)sd);
        for (int th = 1; th <= 2; th++) {
            char what[64];
            snprintf(what, sizeof what, "opt backward %s threads %d", isas[k], th);
            cfg.threads = th;
            grad_sentinel(&lay);
            ck_assert_int_eq(smattn_attention_backward(&c.pl, &c.inl, NULL, &gl, &lay.go, &cfg),
                             sd);
            if (sd == SMATTN_OK)
                ck_assert_msg(grads_as_twin(&c, &lay, &den, what), "%s", what);
        }
    }
out:
    grad_free(&den), grad_free(&lay);
    free(dod.d), free(dol.d), free(dld.d), free(dll.d);
    free_case(&c);
}

START_TEST(backward_layouts_are_their_dense_twins)
{
    int n = test_scaled(24);
    for (int k = 0; k < n; k++)
        check_backward_case(0xb1a7u + (uint64_t)k, 0, 1);
    n = test_scaled(2);
    for (int k = 0; k < n; k++)
        check_backward_case(0x9f11u + (uint64_t)k, 2, 0);
}
END_TEST

/* ---- bad layouts ----------------------------------------------------------------------- */

/* A small paged + packed problem to corrupt: B = 3, S = 4, T = 12, page 4, 8 pages. */
typedef struct small {
    smattn_problem p;
    smattn_layout L;
    int64_t cu_q[4], kv[3], cu_k[4], used[3];
    int32_t bt[3 * 4];
    float q[9 * 2 * 4], k[8 * 4 * 4], v[8 * 4 * 4], o[9 * 2 * 4], l[2 * 9], pp[3 * 2 * 4 * 12];
    smattn_inputs in;
    smattn_outputs out;
} small;

static void small_make(small *s)
{
    memset(s, 0, sizeof *s);
    s->p = smattn_problem_default();
    s->p.B = 3, s->p.S = 4, s->p.T = 12, s->p.Hq = 2, s->p.Hkv = 1, s->p.D = s->p.Dv = 4;
    int64_t cu[4] = {0, 4, 5, 9}, kv[3] = {12, 0, 7};
    memcpy(s->cu_q, cu, sizeof cu);
    memcpy(s->kv, kv, sizeof kv);
    int32_t bt[12] = {5, 2, 7, -1, /* unused */ 99, -7, 3, 0, 4, 1, -1, 1000};
    /* sequence 1 uses no page; sequence 2 uses 2 pages (row 2 = entries 8..11) */
    memcpy(s->bt, bt, sizeof bt);
    s->bt[4] = 99, s->bt[5] = -7;
    s->L = (smattn_layout){s->cu_q, NULL, NULL, s->bt, 4, 3, 8, 4};
    s->p.layout = &s->L;
    s->p.kv_lens = s->kv;
    for (size_t k = 0; k < sizeof s->q / 4; k++)
        s->q[k] = (float)k * 0.01f;
    for (size_t k = 0; k < sizeof s->k / 4; k++)
        s->k[k] = (float)k * 0.02f, s->v[k] = (float)k;
    s->in.q = (smattn_tensor){s->q, SMATTN_F32, {0, 8, 4, 1}};
    s->in.k = (smattn_tensor){s->k, SMATTN_F32, {16, 4, 4, 1}};
    s->in.v = (smattn_tensor){s->v, SMATTN_F32, {16, 4, 4, 1}};
    s->out.o = (smattn_out_tensor){s->o, SMATTN_F32, {0, 8, 4, 1}};
    s->out.lse = (smattn_out_tensor){s->l, SMATTN_F32, {0, 9, 1, 0}};
    s->out.p = (smattn_out_tensor){s->pp, SMATTN_F32, {2 * 4 * 12, 4 * 12, 12, 1}};
}

/* Every entry point gives `want` and leaves the outputs as they were; the explanation
 * holds `text`. */
static void expect_bad(small *s, smattn_status want, const char *text)
{
    memset(s->o, 0x5a, sizeof s->o), memset(s->l, 0x5a, sizeof s->l);
    memset(s->pp, 0x5a, sizeof s->pp);
    char msg[160];
    ck_assert_int_eq(smattn_validate_explain(&s->p, &s->in, &s->out, msg, sizeof msg), want);
    ck_assert_msg(strstr(msg, text) != NULL, "explanation \"%s\" lacks \"%s\"", msg, text);
    ck_assert_int_eq(smattn_validate(&s->p, &s->in, &s->out), want);
    ck_assert_int_eq(smattn_ref(&s->p, &s->in, &s->out, NULL, NULL), want);
    ck_assert_int_eq(smattn_attention(&s->p, &s->in, &s->out, NULL), want);
    double bo[9 * 2 * 4], bl[18], bp[3 * 2 * 4 * 12];
    smattn_outputs bnd = s->out;
    bnd.o.data = bo, bnd.o.dtype = SMATTN_F64;
    bnd.lse.data = bl, bnd.lse.dtype = SMATTN_F64;
    bnd.p.data = bp, bnd.p.dtype = SMATTN_F64;
    smattn_precision pm = smattn_precision_of(SMATTN_F32);
    ck_assert_int_eq(smattn_bound(&s->p, &s->in, &pm, &s->out, &bnd), want);
    const unsigned char *bufs[3] = {(const unsigned char *)s->o, (const unsigned char *)s->l,
                                    (const unsigned char *)s->pp};
    size_t sizes[3] = {sizeof s->o, sizeof s->l, sizeof s->pp};
    for (int k = 0; k < 3; k++)
        for (size_t j = 0; j < sizes[k]; j++)
            ck_assert_msg(bufs[k][j] == 0x5a, "output %d byte %zu written", k, j);
}

START_TEST(bad_layouts_are_refused_untouched)
{
    small s;
    small_make(&s);
    char msg[160];
    ck_assert_int_eq(smattn_validate_explain(&s.p, &s.in, &s.out, msg, sizeof msg), SMATTN_OK);
    ck_assert_str_eq(msg, "");
    /* and it runs: the entries past each sequence's pages (-1, 99, -7, 1000) are not read */
    ck_assert_int_eq(smattn_attention(&s.p, &s.in, &s.out, NULL), SMATTN_OK);
    ck_assert_int_eq(smattn_ref(&s.p, &s.in, &s.out, NULL, NULL), SMATTN_OK);

    small_make(&s), s.bt[2] = 8;
    expect_bad(&s, SMATTN_ERR_LAYOUT, "block_table[0][2] = 8 is outside [0, 8)");
    small_make(&s), s.bt[9] = -1;
    expect_bad(&s, SMATTN_ERR_LAYOUT, "block_table[2][1] = -1 is outside [0, 8)");
    small_make(&s), s.kv[1] = 1; /* sequence 1 now uses entry [1][0] = 99 */
    expect_bad(&s, SMATTN_ERR_LAYOUT, "block_table[1][0] = 99");
    small_make(&s), s.kv[2] = 13;
    expect_bad(&s, SMATTN_ERR_LENGTHS, "kv_lens[2] = 13");
    small_make(&s), s.p.T = 13; /* past max_pages x page_size = 12 */
    expect_bad(&s, SMATTN_ERR_LAYOUT, "max_pages x page_size");
    small_make(&s), s.p.kv_lens = NULL;
    expect_bad(&s, SMATTN_ERR_LAYOUT, "kv_lens");
    small_make(&s), s.L.bt_stride = 2;
    expect_bad(&s, SMATTN_ERR_LAYOUT, "bt_stride = 2");
    small_make(&s), s.L.page_size = 0;
    expect_bad(&s, SMATTN_ERR_LAYOUT, "page_size = 0");
    small_make(&s), s.cu_q[0] = 1;
    expect_bad(&s, SMATTN_ERR_LAYOUT, "cu_seqlens_q[0] = 1");
    small_make(&s), s.cu_q[2] = 3;
    expect_bad(&s, SMATTN_ERR_LAYOUT, "cu_seqlens_q[2] = 3 is below cu_seqlens_q[1] = 4");
    small_make(&s), s.cu_q[1] = 5, s.cu_q[2] = 5; /* S_0 = 5 > S */
    expect_bad(&s, SMATTN_ERR_LAYOUT, "sequence 0");
    small_make(&s), s.p.q_lens = s.kv;
    expect_bad(&s, SMATTN_ERR_LAYOUT, "q_lens");
    /* packed keys: both kinds at once, seqused_k past its slice, a slice past T */
    small_make(&s);
    int64_t cu_k[4] = {0, 12, 12, 20};
    memcpy(s.cu_k, cu_k, sizeof cu_k);
    s.L.cu_seqlens_k = s.cu_k;
    expect_bad(&s, SMATTN_ERR_LAYOUT, "exclusive");
    s.L.block_table = NULL, s.p.kv_lens = NULL;
    s.in.k.stride[0] = 0, s.in.v.stride[0] = 0;
    memset(s.o, 0, sizeof s.o);
    ck_assert_int_eq(smattn_validate(&s.p, &s.in, &s.out), SMATTN_OK);
    s.used[0] = 12, s.used[1] = 0, s.used[2] = 9;
    s.L.seqused_k = s.used;
    expect_bad(&s, SMATTN_ERR_LAYOUT, "seqused_k[2] = 9");
    s.L.seqused_k = NULL;
    s.cu_k[3] = 25; /* slice of 13 keys, T = 12 */
    expect_bad(&s, SMATTN_ERR_LAYOUT, "sequence 2");
    s.cu_k[3] = 20, s.p.kv_lens = s.kv;
    expect_bad(&s, SMATTN_ERR_LAYOUT, "kv_lens must be NULL");
    s.p.kv_lens = NULL, s.L.seqused_k = s.used, s.L.cu_seqlens_k = NULL;
    expect_bad(&s, SMATTN_ERR_LAYOUT, "seqused_k without cu_seqlens_k");
}
END_TEST

START_TEST(explain_names_the_entry)
{
    /* the line of smattn.h: 64 pages, a used entry 97 at [2][5] */
    int64_t kv[3] = {4, 4, 6 * 16};
    int32_t bt[3 * 8];
    for (int k = 0; k < 24; k++)
        bt[k] = k;
    bt[2 * 8 + 5] = 97;
    smattn_layout L = {NULL, NULL, NULL, bt, 8, 8, 64, 16};
    smattn_problem p = smattn_problem_default();
    p.B = 3, p.S = 1, p.T = 128, p.Hq = p.Hkv = 1, p.D = p.Dv = 2;
    p.kv_lens = kv;
    p.layout = &L;
    static float k[64 * 16 * 2], q[6], o[6];
    smattn_inputs in;
    memset(&in, 0, sizeof in);
    in.q = (smattn_tensor){q, SMATTN_F32, {2, 2, 2, 1}};
    in.k = (smattn_tensor){k, SMATTN_F32, {32, 2, 2, 1}};
    in.v = in.k;
    smattn_outputs out;
    memset(&out, 0, sizeof out);
    out.o = (smattn_out_tensor){o, SMATTN_F32, {2, 2, 2, 1}};
    char msg[128];
    ck_assert_int_eq(smattn_validate_explain(&p, &in, &out, msg, sizeof msg), SMATTN_ERR_LAYOUT);
    ck_assert_str_eq(msg, "block_table[2][5] = 97 is outside [0, 64)");
    /* cut to cap - 1 bytes; NULL with cap 0 */
    char small_msg[8];
    ck_assert_int_eq(smattn_validate_explain(&p, &in, &out, small_msg, sizeof small_msg),
                     SMATTN_ERR_LAYOUT);
    ck_assert_str_eq(small_msg, "block_t");
    ck_assert_int_eq(smattn_validate_explain(&p, &in, &out, NULL, 0), SMATTN_ERR_LAYOUT);
    /* an entry past the sequence's pages is never read: 97 at [1][5] with T_1 = 4 */
    bt[2 * 8 + 5] = 5, bt[1 * 8 + 5] = 97;
    ck_assert_int_eq(smattn_validate_explain(&p, &in, &out, msg, sizeof msg), SMATTN_OK);
    /* other fields are named too */
    p.Hkv = 3;
    ck_assert_int_eq(smattn_validate_explain(&p, &in, &out, msg, sizeof msg), SMATTN_ERR_HEADS);
    ck_assert_msg(strstr(msg, "Hkv = 3") != NULL, "%s", msg);
    /* softmax does not read a layout */
    p.Hkv = 1;
    p.op = SMATTN_OP_SOFTMAX;
    ck_assert_int_eq(smattn_validate_explain(&p, &in, &out, msg, sizeof msg),
                     SMATTN_ERR_UNSUPPORTED);
    ck_assert_msg(strstr(msg, "layout") != NULL, "%s", msg);
}
END_TEST

START_TEST(layout_arrays_are_inputs_for_aliasing)
{
    small s;
    small_make(&s);
    /* LSE written over the block table would change what the kernel reads */
    s.out.lse.data = s.bt;
    ck_assert_int_eq(smattn_validate(&s.p, &s.in, &s.out), SMATTN_ERR_ALIAS);
    s.out.lse.data = s.cu_q;
    ck_assert_int_eq(smattn_validate(&s.p, &s.in, &s.out), SMATTN_ERR_ALIAS);
}
END_TEST

/* smattn_contiguous_strides of a layout problem gives the layout's own tensors (SPEC 2.7):
 * packed [1, total, H, D] and LSE [1, Hq, total_q], pages [num_pages, page_size, Hkv, D];
 * those strides pass validation on buffers of exactly that size, and the dense twin's stay
 * dense. */
START_TEST(contiguous_strides_of_layouts)
{
    const int64_t B = 3, S = 5, T = 11, Hq = 4, Hkv = 2, D = 3, Dv = 2, ps = 3, np = 9;
    int64_t cuq[4] = {0, 2, 2, 7}, cuk[4] = {0, 11, 14, 20}, kvl[3] = {7, 0, 11};
    int32_t bt[3 * 4] = {4, 8, 0, -1, -1, -1, -1, -1, 1, 2, 3, 5};
    smattn_layout L = {cuq, cuk, NULL, NULL, 0, 0, 0, 0};
    smattn_problem p = smattn_problem_default();
    p.B = B, p.S = S, p.T = T, p.Hq = Hq, p.Hkv = Hkv, p.D = D, p.Dv = Dv;
    p.layout = &L;
    int64_t st[4];
    struct {
        char role;
        int64_t want[4];
    } packed[] = {{'q', {7 * Hq * D, Hq * D, D, 1}},     {'o', {7 * Hq * Dv, Hq * Dv, Dv, 1}},
                  {'l', {Hq * 7, 7, 1, 0}},              {'k', {20 * Hkv * D, Hkv * D, D, 1}},
                  {'v', {20 * Hkv * Dv, Hkv * Dv, Dv, 1}}, {'p', {Hq * S * T, S * T, T, 1}}};
    for (size_t k = 0; k < sizeof packed / sizeof packed[0]; k++) {
        ck_assert_int_eq(smattn_contiguous_strides(&p, packed[k].role, st), SMATTN_OK);
        for (int r = 0; r < 4; r++)
            ck_assert_msg(st[r] == packed[k].want[r], "packed '%c' stride[%d] = %lld, want %lld",
                          packed[k].role, r, (long long)st[r], (long long)packed[k].want[r]);
    }
    /* validation takes them on buffers of exactly the packed sizes */
    float *q = calloc(7 * Hq * D, sizeof *q), *k = calloc(20 * Hkv * D, sizeof *k),
          *v = calloc(20 * Hkv * Dv, sizeof *v), *o = calloc(7 * Hq * Dv, sizeof *o),
          *l = calloc(Hq * 7, sizeof *l);
    smattn_inputs in;
    smattn_outputs out;
    memset(&in, 0, sizeof in);
    memset(&out, 0, sizeof out);
    in.q = (smattn_tensor){q, SMATTN_F32, {0}};
    in.k = (smattn_tensor){k, SMATTN_F32, {0}};
    in.v = (smattn_tensor){v, SMATTN_F32, {0}};
    out.o = (smattn_out_tensor){o, SMATTN_F32, {0}};
    out.lse = (smattn_out_tensor){l, SMATTN_F32, {0}};
    smattn_contiguous_strides(&p, 'q', in.q.stride);
    smattn_contiguous_strides(&p, 'k', in.k.stride);
    smattn_contiguous_strides(&p, 'v', in.v.stride);
    smattn_contiguous_strides(&p, 'o', out.o.stride);
    smattn_contiguous_strides(&p, 'l', out.lse.stride);
    ck_assert_int_eq(smattn_validate(&p, &in, &out), SMATTN_OK);
    ck_assert_int_eq(smattn_attention(&p, &in, &out, NULL), SMATTN_OK);
    /* paged keys: one page per stride[0] */
    L = (smattn_layout){cuq, NULL, NULL, bt, 4, 4, np, ps};
    p.kv_lens = kvl;
    ck_assert_int_eq(smattn_contiguous_strides(&p, 'k', st), SMATTN_OK);
    ck_assert(st[0] == ps * Hkv * D && st[1] == Hkv * D && st[2] == D && st[3] == 1);
    ck_assert_int_eq(smattn_contiguous_strides(&p, 'v', st), SMATTN_OK);
    ck_assert(st[0] == ps * Hkv * Dv && st[1] == Hkv * Dv && st[2] == Dv && st[3] == 1);
    float *kp = calloc(np * ps * Hkv * D, sizeof *kp), *vp = calloc(np * ps * Hkv * Dv, sizeof *vp);
    in.k = (smattn_tensor){kp, SMATTN_F32, {0}};
    in.v = (smattn_tensor){vp, SMATTN_F32, {0}};
    smattn_contiguous_strides(&p, 'k', in.k.stride);
    smattn_contiguous_strides(&p, 'v', in.v.stride);
    ck_assert_int_eq(smattn_validate(&p, &in, &out), SMATTN_OK);
    ck_assert_int_eq(smattn_attention(&p, &in, &out, NULL), SMATTN_OK);
    /* the dense twin keeps the dense strides */
    p.layout = NULL;
    ck_assert_int_eq(smattn_contiguous_strides(&p, 'q', st), SMATTN_OK);
    ck_assert(st[0] == S * Hq * D && st[1] == Hq * D);
    ck_assert_int_eq(smattn_contiguous_strides(&p, 'k', st), SMATTN_OK);
    ck_assert(st[0] == T * Hkv * D && st[1] == Hkv * D);
    free(q), free(k), free(v), free(o), free(l), free(kp), free(vp);
}
END_TEST

/* A packed batch whose every sequence is empty (total 0) is one row of storage, as
 * validation checks it: its contiguous strides pass validation and the kernel and the
 * oracle run (LSE [1, Hq, 0] once had stride 0 between heads: SMATTN_ERR_ALIAS). */
START_TEST(contiguous_strides_of_empty_batches)
{
    const int64_t Hq = 3, D = 4;
    int64_t cuq[3] = {0, 0, 0}, cuk[3] = {0, 0, 0};
    smattn_layout L = {cuq, cuk, NULL, NULL, 0, 0, 0, 0};
    smattn_problem p = smattn_problem_default();
    p.B = 2, p.S = 3, p.T = 5, p.Hq = Hq, p.Hkv = 1, p.D = p.Dv = D;
    p.layout = &L;
    float q[3 * 4] = {0}, k[4] = {0}, v[4] = {0}, o[3 * 4], l[3];
    double od[3 * 4], ld[3];
    smattn_inputs in;
    smattn_outputs out, outd;
    memset(&in, 0, sizeof in);
    memset(&out, 0, sizeof out);
    in.q = (smattn_tensor){q, SMATTN_F32, {0}};
    in.k = (smattn_tensor){k, SMATTN_F32, {0}};
    in.v = (smattn_tensor){v, SMATTN_F32, {0}};
    out.o = (smattn_out_tensor){o, SMATTN_F32, {0}};
    out.lse = (smattn_out_tensor){l, SMATTN_F32, {0}};
    const char roles[] = "qkvol";
    int64_t *st[5] = {in.q.stride, in.k.stride, in.v.stride, out.o.stride, out.lse.stride};
    for (int r = 0; r < 5; r++)
        ck_assert_int_eq(smattn_contiguous_strides(&p, roles[r], st[r]), SMATTN_OK);
    ck_assert(out.lse.stride[1] == 1 && out.lse.stride[2] == 1); /* [1, Hq, one row] */
    ck_assert(in.q.stride[1] == Hq * D);
    ck_assert_int_eq(smattn_validate(&p, &in, &out), SMATTN_OK);
    ck_assert_int_eq(smattn_attention(&p, &in, &out, NULL), SMATTN_OK);
    outd = out;
    outd.o.data = od, outd.o.dtype = SMATTN_F64;
    outd.lse.data = ld, outd.lse.dtype = SMATTN_F64;
    ck_assert_int_eq(smattn_ref(&p, &in, &outd, NULL, NULL), SMATTN_OK);
}
END_TEST

Suite *layout_suite(void);
Suite *layout_suite(void)
{
    Suite *s = suite_create("layout");
    TCase *tc = tcase_create("core");
    tcase_set_timeout(tc, 600);
    tcase_add_test(tc, random_layouts_are_their_dense_twins);
    tcase_add_test(tc, paged_decode_split_k);
    tcase_add_test(tc, mixed_batch_prefill_beside_decode);
    tcase_add_test(tc, backward_layouts_are_their_dense_twins);
    tcase_add_test(tc, bad_layouts_are_refused_untouched);
    tcase_add_test(tc, explain_names_the_entry);
    tcase_add_test(tc, layout_arrays_are_inputs_for_aliasing);
    tcase_add_test(tc, contiguous_strides_of_layouts);
    tcase_add_test(tc, contiguous_strides_of_empty_batches);
    suite_add_tcase(s, tc);
    return s;
}
