/* SPDX-License-Identifier: MIT */
/* battery_layout.c: the ragged and paged cases (SPEC 2.7), how a kernel claiming a layout is
 * handed one, and how its outputs are judged as the dense twin's. A case is built dense
 * and padded (the problem judged: the oracle never sees the layout), with the layout's
 * arrays beside it; conform_case_lay_out packs its queries and packs or pages its keys for
 * the kernel, with NaN and infinities in every slot the layout never reads and garbage in
 * the block table's unused entries (and past max_pages in a row longer than that), so
 * that the page and offset arithmetic where these kernels' bugs are is what the case
 * exercises. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "conform/battery_impl.h"
#include "core/internal.h"

/* ---- building the cases ---------------------------------------------------------------- */

enum { KV_DENSE = BAT_KV_DENSE, KV_PACKED = BAT_KV_PACKED, KV_PAGED = BAT_KV_PAGED };
typedef bat_lay_spec lay_spec;

/* What unused block-table entries hold: never read (SPEC 2.7), so anything at all. */
static int32_t table_junk(int64_t k, int64_t num_pages)
{
    static const int32_t junk[4] = {-1, INT32_MAX, INT32_MIN, 0};
    return k % 4 == 3 ? (int32_t)num_pages : junk[k % 4];
}

/* What the columns past max_pages hold (a row stride above max_pages): never read
 * either, so numbers no page has, that a kernel taking max_pages for the row stride reads
 * as pages of another row. */
static int32_t stride_junk(int64_t k, int64_t num_pages)
{
    static const int32_t junk[3] = {-1, INT32_MAX, INT32_MIN};
    return k % 4 == 3 ? (int32_t)num_pages : junk[k % 4];
}

/* A layout case named name: B sequences of S_b queries (Sb) and T_b keys (Tb), in a dense
 * twin of S x T, laid out as ls says. causal and the window apply per sequence. Paged: the
 * table's row stride is max_pages + bt_pad, the columns past max_pages holding page numbers
 * no page has. */
static conform_case *lay_case_pad(builder *bd, const char *cat, const char *name, int64_t B,
                                  const int64_t *Sb, const int64_t *Tb, int64_t S, int64_t T,
                                  int64_t Hq, int64_t Hkv, int64_t D, smattn_causal causal,
                                  int64_t wl, int64_t wr, const bat_lay_spec *ls, int64_t bt_pad)
{
    conform_case *c = bat_att(bd, cat, name, B, S, T, Hq, Hkv, D);
    if (!c)
        return NULL;
    if (ls->clean)
        c->garbage = 0;
    if (ls->alibi != SMATTN_ALIBI_NONE) { /* a bias first for the mask mode (SPEC 2.8) */
        if (ls->alibi == SMATTN_ALIBI_MASK && !bat_case_bias(bd, c, 1.0))
            return NULL;
        float *sl = bat_case_alibi(bd, c, ls->alibi, 1, NULL);
        for (int64_t k = 0; sl && k < B * Hq; k++) /* both signs, as vLLM's tests draw */
            sl[k] = (float)((double)bat_rng_int(&bd->r, -1000, 1000) / 997.0);
        if (!sl)
            return NULL;
    }
    smattn_problem *p = &c->prob;
    p->causal = causal;
    p->window_left = wl, p->window_right = wr;
    bat_case_lens(bd, c, 0, Tb);
    if (ls->packed_q)
        bat_case_lens(bd, c, 1, Sb);
    c->has_layout = 1;
    smattn_layout *L = &c->layout;
    int64_t *cu = NULL;
    if (ls->packed_q) {
        cu = c->lay_arrays[0] = bat_zalloc(bd, (size_t)(B + 1), sizeof *cu);
        for (int64_t b = 0; cu && b < B; b++)
            cu[b + 1] = cu[b] + Sb[b];
        L->cu_seqlens_q = cu;
    }
    if (ls->kv == KV_PACKED) {
        int64_t *ck = c->lay_arrays[1] = bat_zalloc(bd, (size_t)(B + 1), sizeof *ck);
        for (int64_t b = 0; ck && b < B; b++)
            ck[b + 1] = ck[b] + Tb[b] + (ls->extra ? ls->extra + b : 0);
        L->cu_seqlens_k = ck;
        if (ls->extra) {
            int64_t *used = c->lay_arrays[2] = bat_zalloc(bd, (size_t)B, sizeof *used);
            if (used)
                memcpy(used, Tb, (size_t)B * sizeof *used);
            L->seqused_k = used;
        }
    }
    if (ls->kv == KV_PAGED) {
        const int64_t ps = ls->page;
        int64_t maxp = (T + ps - 1) / ps, need = 0;
        for (int64_t b = 0; b < B; b++)
            need += (Tb[b] + ps - 1) / ps;
        need -= ls->shared;
        if (ls->spare)
            maxp += 1; /* a column no sequence reaches: garbage in every row */
        const int64_t np = need + ls->spare, stride = maxp + bt_pad;
        int32_t *bt = c->lay_table = bat_zalloc(bd, (size_t)(B * stride), sizeof *bt);
        int32_t *perm = bat_zalloc(bd, (size_t)np, sizeof *perm);
        if (bt && perm) {
            /* pages handed out in a random order (Fisher-Yates on the case's stream) */
            for (int64_t k = 0; k < np; k++)
                perm[k] = (int32_t)k;
            for (int64_t k = np - 1; k > 0; k--) {
                int64_t j = bat_rng_int(&bd->r, 0, k);
                int32_t t = perm[k];
                perm[k] = perm[j], perm[j] = t;
            }
            int64_t next = 0;
            for (int64_t b = 0; b < B; b++) {
                int64_t used = (Tb[b] + ps - 1) / ps;
                for (int64_t col = 0; col < stride; col++) {
                    int32_t *e = &bt[b * stride + col];
                    if (col >= maxp) /* past the row: no page at all */
                        *e = stride_junk(b + col, np);
                    else if (col >= used)
                        *e = table_junk(b + col, np);
                    else if (b == 1 && col < ls->shared)
                        *e = bt[col]; /* sequence 0's page: a shared prefix */
                    else
                        *e = perm[next++];
                }
            }
        }
        free(perm);
        L->block_table = bt;
        L->max_pages = maxp;
        L->bt_stride = stride;
        L->num_pages = np;
        L->page_size = ps;
        c->kv_hnd = ls->hnd;
        if (ls->shared && bt) {
            /* the shared pages hold one set of keys: sequence 1's twin reads sequence 0's */
            smattn_tensor *ts[2] = {&c->in64.k, &c->in64.v};
            int64_t dims[2] = {D, p->Dv};
            for (int t = 0; t < 2; t++)
                for (int64_t j = 0; j < ls->shared * ps; j++)
                    for (int64_t g = 0; g < Hkv; g++)
                        for (int64_t d = 0; d < dims[t]; d++) {
                            const int64_t *st = ts[t]->stride;
                            double *x = MUT(ts[t]->data);
                            x[st[0] + j * st[1] + g * st[2] + d * st[3]] =
                                x[j * st[1] + g * st[2] + d * st[3]];
                        }
        }
    }
    bat_finish(bd, c);
    if (bd->oom)
        return NULL;
    /* the features of the problem the kernel is handed: the layout's slices stand for
     * q_lens (packed queries) and kv_lens (packed or paged keys: their lengths are the
     * layout's own, SPEC 2.7) */
    if (ls->packed_q)
        c->caps &= ~(uint32_t)SMATTN_CAP_Q_LENS;
    if (ls->kv != KV_DENSE)
        c->caps &= ~(uint32_t)SMATTN_CAP_KV_LENS;
    c->caps |= (ls->packed_q ? SMATTN_CAP_PACKED_Q : 0u) |
               (ls->kv == KV_PACKED ? SMATTN_CAP_PACKED_KV : 0u) |
               (ls->kv == KV_PAGED ? (ls->hnd ? SMATTN_CAP_PAGED_HND : SMATTN_CAP_PAGED_NHD) : 0u);
    return c;
}

conform_case *bat_lay_case(builder *bd, const char *cat, const char *name, int64_t B,
                           const int64_t *Sb, const int64_t *Tb, int64_t S, int64_t T, int64_t Hq,
                           int64_t Hkv, int64_t D, smattn_causal causal, int64_t wl, int64_t wr,
                           const bat_lay_spec *ls)
{
    /* the backward's: a paged table's rows one column past max_pages */
    return lay_case_pad(bd, cat, name, B, Sb, Tb, S, T, Hq, Hkv, D, causal, wl, wr, ls, 1);
}

static conform_case *lay_case(builder *bd, const char *name, int64_t B, const int64_t *Sb,
                              const int64_t *Tb, int64_t S, int64_t T, int64_t Hq, int64_t Hkv,
                              int64_t D, smattn_causal causal, int64_t wl, int64_t wr,
                              const lay_spec *ls)
{
    return lay_case_pad(bd, "layout", name, B, Sb, Tb, S, T, Hq, Hkv, D, causal, wl, wr, ls, 0);
}

/* lay_case with a table row bt_pad columns longer than max_pages (paged). */
static conform_case *lay_case_strided(builder *bd, const char *name, int64_t B, const int64_t *Sb,
                                      const int64_t *Tb, int64_t S, int64_t T, int64_t Hq,
                                      int64_t Hkv, int64_t D, smattn_causal causal, int64_t wl,
                                      int64_t wr, const lay_spec *ls, int64_t bt_pad)
{
    return lay_case_pad(bd, "layout", name, B, Sb, Tb, S, T, Hq, Hkv, D, causal, wl, wr, ls,
                        bt_pad);
}

void battery_layouts(builder *bd, int full)
{
    const smattn_causal LR = SMATTN_CAUSAL_LOWER_RIGHT, UL = SMATTN_CAUSAL_UPPER_LEFT,
                        NONE = SMATTN_CAUSAL_NONE;
    /* page sizes 1, 3 (not a power of two), 16 and 256, pages in a random order, spare
     * pages and table columns full of garbage, table rows longer than max_pages (bt_stride
     * above it: paged_p16_decode, paged_split_decode_*, paged_mixed_decode_prefill,
     * paged_hnd_window_gqa); GQA and packed queries beside */
    {
        int64_t sq[3] = {3, 1, 4}, tk[3] = {6, 0, 9};
        lay_spec ls = {1, KV_PAGED, 0, 1, 3, 0, 0, 0, SMATTN_ALIBI_NONE};
        lay_case(bd, "paged_p1_gqa", 3, sq, tk, 4, 9, 4, 2, 8, LR, -1, -1, &ls);
    }
    {
        int64_t sq[3] = {5, 2, 1}, tk[3] = {7, 11, 3};
        lay_spec ls = {1, KV_PAGED, 0, 3, 2, 0, 0, 0, SMATTN_ALIBI_NONE};
        lay_case(bd, "paged_p3_nopow2", 3, sq, tk, 5, 12, 2, 1, 8, NONE, -1, -1, &ls);
        lay_spec hn = {1, KV_PAGED, 1, 3, 2, 0, 0, 0, SMATTN_ALIBI_NONE};
        lay_case(bd, "paged_p3_hnd_causal", 3, sq, tk, 5, 12, 4, 2, 8, LR, -1, -1, &hn);
    }
    {
        int64_t sq[2] = {1, 1}, tk[2] = {37, 50};
        /* dense Q: the kvcache call's; a table row 3 columns longer than max_pages */
        lay_spec ls = {0, KV_PAGED, 0, 16, 2, 0, 0, 0, SMATTN_ALIBI_NONE};
        lay_case_strided(bd, "paged_p16_decode", 2, sq, tk, 1, 64, 4, 1, 16, NONE, -1, -1, &ls, 3);
        lay_spec hn = {0, KV_PAGED, 1, 16, 1, 0, 0, 0, SMATTN_ALIBI_NONE};
        lay_case(bd, "paged_p16_hnd_decode", 2, sq, tk, 1, 64, 2, 2, 16, NONE, -1, -1, &hn);
    }
    {
        int64_t sq[2] = {2, 1}, tk[2] = {300, 17};
        lay_spec ls = {1, KV_PAGED, 0, 256, 1, 0, 0, 0, SMATTN_ALIBI_NONE};
        lay_case(bd, "paged_p256", 2, sq, tk, 2, 512, 2, 1, 8, NONE, -1, -1, &ls);
    }
    /* a shared prefix: sequence 1's first two pages are sequence 0's */
    {
        int64_t sq[3] = {2, 3, 1}, tk[3] = {13, 10, 5};
        lay_spec ls = {1, KV_PAGED, 0, 4, 1, 2, 0, 0, SMATTN_ALIBI_NONE};
        lay_case(bd, "paged_shared_pages", 3, sq, tk, 3, 16, 2, 1, 8, LR, -1, -1, &ls);
    }
    /* a cache filled exactly to capacity: T_b = max_pages x page_size, no spare page */
    {
        int64_t sq[2] = {3, 1}, tk[2] = {15, 15};
        lay_spec ls = {1, KV_PAGED, 0, 5, 0, 0, 0, 0, SMATTN_ALIBI_NONE};
        lay_case(bd, "paged_full_capacity", 2, sq, tk, 3, 15, 2, 2, 8, LR, -1, -1, &ls);
    }
    /* zero-length sequences: no queries, no keys, and both */
    {
        int64_t sq[4] = {0, 3, 2, 0}, tk[4] = {5, 0, 6, 0};
        lay_spec pk = {1, KV_PACKED, 0, 0, 0, 0, 0, 0, SMATTN_ALIBI_NONE};
        lay_case(bd, "packed_zero_length", 4, sq, tk, 3, 6, 2, 1, 8, NONE, -1, -1, &pk);
        lay_spec pg = {1, KV_PAGED, 0, 3, 1, 0, 0, 0, SMATTN_ALIBI_NONE};
        lay_case(bd, "paged_zero_length", 4, sq, tk, 3, 6, 2, 1, 8, LR, -1, -1, &pg);
    }
    /* S_b > T_b with lower-right alignment: the first S_b - T_b rows see no key (empty) */
    {
        int64_t sq[2] = {6, 4}, tk[2] = {2, 5};
        lay_spec pg = {1, KV_PAGED, 0, 3, 1, 0, 0, 0, SMATTN_ALIBI_NONE};
        lay_case(bd, "paged_s_above_t_lower_right", 2, sq, tk, 6, 6, 2, 1, 8, LR, -1, -1, &pg);
        lay_spec pk = {1, KV_PACKED, 0, 0, 0, 0, 0, 0, SMATTN_ALIBI_NONE};
        lay_case(bd, "packed_s_above_t_upper_left", 2, sq, tk, 6, 6, 2, 1, 8, UL, -1, -1, &pk);
    }
    /* keys past seqused_k (FlashAttention 3): in the slice, never read */
    {
        int64_t sq[3] = {2, 1, 3}, tk[3] = {9, 4, 6};
        lay_spec pk = {1, KV_PACKED, 0, 0, 0, 0, 3, 0, SMATTN_ALIBI_NONE};
        lay_case(bd, "packed_seqused_k", 3, sq, tk, 3, 9, 2, 1, 8, NONE, -1, -1, &pk);
    }
    /* decodes long enough to be split over the keys, over many pages of 16 and of 3 */
    {
        int64_t T = full ? 4100 : 600;
        int64_t sq[2] = {1, 1}, tk[2] = {T, T / 2 + 7};
        lay_spec p16 = {0, KV_PAGED, 0, 16, 2, 0, 0, 0, SMATTN_ALIBI_NONE};
        lay_case_strided(bd, full ? "paged_split_decode_t4100" : "paged_split_decode_t600", 2, sq,
                         tk, 1, T, 2, 1, 16, NONE, -1, -1, &p16, 1);
        lay_spec p3 = {1, KV_PAGED, 0, 3, 1, 0, 0, 0, SMATTN_ALIBI_NONE};
        lay_case(bd, full ? "paged_split_decode_p3_t4100" : "paged_split_decode_p3_t600", 2, sq, tk,
                 1, T, 2, 2, 8, LR, -1, -1, &p3);
    }
    /* a chunked-prefill batch: decodes (S_b = 1) beside prefills, one packed call */
    {
        int64_t sq[4] = {1, 24, 1, 9}, tk[4] = {40, 24, 7, 30};
        lay_spec pg = {1, KV_PAGED, 0, 16, 1, 0, 0, 0, SMATTN_ALIBI_NONE};
        lay_case_strided(bd, "paged_mixed_decode_prefill", 4, sq, tk, 24, 40, 4, 2, 8, LR, -1, -1,
                         &pg, 2);
        lay_spec pk = {1, KV_PACKED, 0, 0, 0, 0, 0, 0, SMATTN_ALIBI_NONE};
        lay_case(bd, "packed_mixed_decode_prefill", 4, sq, tk, 24, 40, 2, 1, 8, LR, -1, -1, &pk);
    }
    /* windows and GQA per sequence (the window counts from each sequence's diagonal) */
    {
        int64_t sq[3] = {7, 1, 4}, tk[3] = {12, 9, 4};
        lay_spec pk = {1, KV_PACKED, 0, 0, 0, 0, 0, 0, SMATTN_ALIBI_NONE};
        lay_case(bd, "packed_window_gqa", 3, sq, tk, 7, 12, 6, 2, 8, LR, 3, 0, &pk);
        lay_spec pg = {1, KV_PAGED, 1, 3, 2, 0, 0, 0, SMATTN_ALIBI_NONE};
        lay_case_strided(bd, "paged_hnd_window_gqa", 3, sq, tk, 7, 12, 6, 3, 8, NONE, 2, 1, &pg, 1);
    }
    if (full) {
        int64_t sq[3] = {64, 1, 33}, tk[3] = {700, 1025, 64};
        lay_spec pg = {1, KV_PAGED, 0, 256, 3, 0, 0, 0, SMATTN_ALIBI_NONE};
        lay_case(bd, "paged_p256_prefill", 3, sq, tk, 64, 1100, 4, 2, 32, LR, -1, -1, &pg);
        lay_spec p1 = {1, KV_PAGED, 1, 1, 5, 0, 0, 0, SMATTN_ALIBI_NONE};
        lay_case(bd, "paged_p1_hnd_prefill", 3, sq, tk, 64, 1100, 2, 1, 16, LR, 100, -1, &p1);
    }
}

/* ---- laying a case out for a kernel ------------------------------------------------------ */

int conform_case_lay_out(const conform_case *c, const conform_inst *dense, conform_inst *lay)
{
    memset(lay, 0, sizeof *lay);
    lay->prob = dense->prob;
    lay->in = dense->in;
    const smattn_layout *L = &c->layout;
    smattn_problem *p = &lay->prob;
    p->layout = L;
    if (L->cu_seqlens_q)
        p->q_lens = NULL;
    if (L->cu_seqlens_k)
        p->kv_lens = NULL;
    static const double junk[3] = {((double)NAN), HUGE_VAL, -HUGE_VAL};
    const smattn_tensor *src[3] = {&dense->in.q, &dense->in.k, &dense->in.v};
    smattn_tensor *dst[3] = {&lay->in.q, &lay->in.k, &lay->in.v};
    const char roles[3] = {'q', 'k', 'v'};
    for (int t = 0; t < 3; t++) {
        if (t == 0 && !L->cu_seqlens_q)
            continue;
        if (t > 0 && !L->cu_seqlens_k && !L->block_table)
            continue;
        int64_t st[4], n;
        smattn_contiguous_strides(p, roles[t], st);
        n = t > 0 && L->block_table ? st[0] * L->num_pages : st[0];
        const int64_t H = t ? p->Hkv : p->Hq, dim = t == 2 ? p->Dv : p->D;
        if (t > 0 && L->block_table && c->kv_hnd) { /* [num_pages, Hkv, page_size, D] */
            st[2] = L->page_size * dim;
            st[1] = dim;
        }
        smattn_dtype dt = src[t]->dtype;
        void *buf = malloc((size_t)(n > 0 ? n : 1) * smattn_dtype_size(dt));
        if (!buf) {
            conform_inst_free(lay);
            return -1;
        }
        lay->owned[t] = buf;
        for (int64_t e = 0; e < n; e++) /* every slot left unread holds NaN or an infinity */
            smattn_store(buf, dt, e, junk[e % 3]);
        for (int64_t b = 0; b < p->B; b++) {
            int64_t len = t ? smattn__kv_len(p, b) : smattn__q_len(p, b);
            for (int64_t i = 0; i < len; i++)
                for (int64_t h = 0; h < H; h++)
                    for (int64_t d = 0; d < dim; d++) {
                        const int64_t *s = src[t]->stride;
                        double x = smattn_load(src[t]->data, dt,
                                               b * s[0] + i * s[1] + h * s[2] + d * s[3]);
                        int64_t off = t ? smattn__key_off(p, st, b, i, h, d)
                                        : smattn__row_off(p, st, b, i, h, d);
                        smattn_store(buf, dt, off, x);
                    }
        }
        dst[t]->data = buf;
        memcpy(dst[t]->stride, st, sizeof st);
    }
    return 0;
}

/* ---- judging as the dense twin ------------------------------------------------------------ */

void conform_reason_append(conform_result *r, const char *what)
{
    size_t cap = sizeof r->reason, w = strlen(what), n = strlen(r->reason);
    if (w + 3 >= cap)
        w = cap - 4;
    if (n + 2 + w >= cap) { /* cut the reason, keep the layout's words whole */
        n = cap - 2 - w - 4;
        memcpy(r->reason + n, "...", 3);
        n += 3;
    }
    snprintf(r->reason + n, cap - n, "; %.*s", (int)w, what);
}

void conform_layout_describe(const smattn_problem *lp, int64_t b, int64_t j, char *out, size_t cap)
{
    const smattn_layout *L = lp->layout;
    size_t n = 0;
    out[0] = '\0';
    if (!L || b < 0 || b >= lp->B)
        return;
#define PUT(...)                                                                                   \
    do {                                                                                           \
        if (n < cap)                                                                               \
            n += (size_t)snprintf(out + n, cap - n, __VA_ARGS__);                                  \
    } while (0)
    const char *kind = L->block_table    ? (L->cu_seqlens_q ? "packed, paged" : "paged")
                       : L->cu_seqlens_k ? "packed"
                                         : "packed-query";
    PUT("sequence %lld of the %s batch", (long long)b, kind);
    int64_t Sb = smattn__q_len(lp, b), Tb = smattn__kv_len(lp, b);
    if (L->cu_seqlens_q)
        PUT(": S_b %lld (packed rows [%lld, %lld))", (long long)Sb, (long long)L->cu_seqlens_q[b],
            (long long)L->cu_seqlens_q[b + 1]);
    else
        PUT(": S_b %lld", (long long)Sb);
    if (L->cu_seqlens_k) {
        PUT(", T_b %lld (packed keys [%lld, %lld)", (long long)Tb, (long long)L->cu_seqlens_k[b],
            (long long)L->cu_seqlens_k[b + 1]);
        if (L->seqused_k)
            PUT(", seqused_k %lld: keys past it never read", (long long)L->seqused_k[b]);
        PUT(")");
    } else if (L->block_table) {
        const int64_t ps = L->page_size, used = (Tb + ps - 1) / ps;
        const int32_t *row = L->block_table + b * L->bt_stride;
        PUT(", T_b %lld in %lld page%s of %lld slot%s", (long long)Tb, (long long)used,
            used == 1 ? "" : "s", (long long)ps, ps == 1 ? "" : "s");
        for (int64_t k = 0; k < used && k < 6; k++)
            PUT("%s%d", k ? " " : " (table row: ", row[k]);
        if (used > 6)
            PUT(" ...");
        if (used)
            PUT("; the last holds %lld of %lld)", (long long)(Tb - (used - 1) * ps), (long long)ps);
        if (j >= 0 && j < Tb)
            PUT(", key %lld is slot %lld of page %d", (long long)j, (long long)(j % ps),
                row[j / ps]);
    } else {
        PUT(", T_b %lld", (long long)Tb);
    }
#undef PUT
}

void conform_judge_layout(const smattn_problem *tp, const smattn_inputs *tin,
                          const smattn_problem *lp, const smattn_outputs *got,
                          const smattn_precision *pm, unsigned flags, int strided,
                          const conform_sample *sample, conform_result *r)
{
    smattn_outputs dense;
    memset(&dense, 0, sizeof dense);
    dense.p = got->p; /* P keeps the dense shape in every layout */
    smattn_out_tensor *dt[2] = {&dense.o, &dense.lse};
    const smattn_out_tensor *gt[2] = {&got->o, &got->lse};
    const int64_t cnt[2] = {tp->B * tp->S * tp->Hq * tp->Dv, tp->B * tp->Hq * tp->S};
    int ok = 1;
    for (int t = 0; t < 2 && ok; t++) {
        if (!gt[t]->data)
            continue;
        dt[t]->dtype = gt[t]->dtype;
        dt[t]->data = calloc((size_t)(cnt[t] ? cnt[t] : 1), smattn_dtype_size(gt[t]->dtype));
        ok = dt[t]->data != NULL;
        smattn_contiguous_strides(tp, t ? 'l' : 'o', dt[t]->stride);
    }
    /* each batch's stored rows [0, S_b): the others (packed queries) are not the kernel's */
    int64_t *stored = NULL;
    if (ok && lp->layout && lp->layout->cu_seqlens_q) {
        stored = calloc((size_t)(tp->B ? tp->B : 1), sizeof *stored);
        ok = stored != NULL;
        for (int64_t b = 0; ok && b < tp->B; b++)
            while (stored[b] < tp->S && smattn__row_stored(lp, b, stored[b]))
                stored[b]++;
    }
    if (!ok) {
        r->status = CONFORM_FAIL;
        snprintf(r->reason, sizeof r->reason, "could not judge: out of memory");
    } else {
        for (int t = 0; t < 2; t++) {
            if (!gt[t]->data)
                continue;
            size_t es = smattn_dtype_size(gt[t]->dtype);
            for (int64_t b = 0; b < tp->B; b++)
                for (int64_t h = 0; h < tp->Hq; h++)
                    for (int64_t i = 0; i < tp->S; i++) {
                        if (!smattn__row_stored(lp, b, i))
                            continue;
                        const int64_t *ds = dt[t]->stride;
                        for (int64_t col = 0; col < (t ? 1 : tp->Dv); col++) {
                            int64_t from = t ? smattn__lse_off(lp, gt[t]->stride, b, h, i)
                                             : smattn__row_off(lp, gt[t]->stride, b, i, h, col);
                            int64_t to = t ? b * ds[0] + h * ds[1] + i * ds[2]
                                           : b * ds[0] + i * ds[1] + h * ds[2] + col * ds[3];
                            memcpy((char *)dt[t]->data + (size_t)to * es,
                                   (const char *)gt[t]->data + (size_t)from * es, es);
                        }
                    }
        }
        conform_judge_twin(tp, tin, &dense, pm, flags, strided, sample, stored, r);
        if (r->status == CONFORM_FAIL && r->worst_out >= 0) {
            char what[320];
            conform_layout_describe(lp, r->worst_ix[0], r->worst_out == 2 ? r->worst_ix[3] : -1,
                                    what, sizeof what);
            conform_reason_append(r, what);
        }
    }
    free(stored);
    free(dense.o.data);
    free(dense.lse.data);
}
