/* SPDX-License-Identifier: MIT */
/* battery_huge.c: the suite "huge": shapes where a kernel's 32-bit index arithmetic
 * overflows (T >= 65536, a decode at T = 2^20, S T >= 2^31 scores, K and V broadcast over
 * the batch by stride 0 with T = 1 mod 32, offsets past 2^31 elements in K and V), with
 * the element counts large and the bytes small: small D and Hq, stride-0 broadcasts, and
 * strides over memory that is reserved but never touched (conform_map_zero: pages cost
 * only when written, and only the elements the views reach are written). Each case's
 * buffers stay within a few hundred MiB. The oracle's cost is O(B Hq S T D): these cases
 * are judged on sampled rows (--rows, conform/rows.c), O(B Hq K T D). */
/* MAP_ANONYMOUS and MAP_NORESERVE are not POSIX (the build sets _POSIX_C_SOURCE). */
#define _DEFAULT_SOURCE 1
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#include "conform/battery_impl.h"

void *conform_map_zero(size_t bytes)
{
    void *p = mmap(NULL, bytes ? bytes : 1, PROT_READ | PROT_WRITE,
                   MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    return p == MAP_FAILED ? NULL : p;
}

void conform_unmap(void *p, size_t bytes)
{
    if (p)
        munmap(p, bytes ? bytes : 1);
}

/* Uniform in [-a, a). */
static double sym(rng *r, double a)
{
    return ((double)(bat_rng_next(r) >> 11) * 0x1p-52 - 1.0) * a;
}

/* Tensor t of c ([B, rows, heads, dim]) with strides st, n elements reserved (zero,
 * conform_map_zero), random in [-a, a) at every element its view reaches. */
static void view_fill(builder *bd, conform_case *c, int t, int64_t rows, int64_t heads,
                      int64_t dim, const int64_t st[4], int64_t n, double a)
{
    smattn_tensor *ts = bat_tensor_of(c, t);
    double *d = conform_map_zero((size_t)n * sizeof(double));
    if (!d) {
        bd->oom = 1;
        return;
    }
    ts->data = d;
    ts->dtype = SMATTN_F64;
    memcpy(ts->stride, st, sizeof ts->stride);
    c->count[t] = n;
    c->mapped[t] = (size_t)n * sizeof(double);
    for (int64_t b = 0; b < c->prob.B; b++)
        for (int64_t i = 0; i < rows; i++)
            for (int64_t h = 0; h < heads; h++)
                for (int64_t e = 0; e < dim; e++)
                    d[b * st[0] + i * st[1] + h * st[2] + e * st[3]] = sym(&bd->r, a);
}

/* A case whose Q, K, V are filled through their views: K and V with batch stride kv0
 * (0: broadcast over the batch; -1: contiguous; else that stride, in elements). */
static conform_case *huge_case(builder *bd, const char *name, int64_t B, int64_t S, int64_t T,
                               int64_t Hq, int64_t Hkv, int64_t D, int64_t kv0)
{
    /* a 1x1 case to start from: its small tensors are replaced */
    conform_case *c = bat_case_new(bd, "huge", name, SMATTN_OP_ATTENTION, 1, 1, 1, 1, 1, 1, 1,
                                   1.0, 0);
    if (!c)
        return NULL;
    for (int t = 0; t < 7; t++) {
        free((void *)(uintptr_t)bat_tensor_of(c, t)->data);
        bat_tensor_of(c, t)->data = NULL;
        c->count[t] = 0;
    }
    smattn_problem *p = &c->prob;
    p->B = B, p->S = S, p->T = T, p->Hq = Hq, p->Hkv = Hkv, p->D = p->Dv = D;
    p->scale = smattn_default_scale(D);
    c->sparse = 1;
    c->garbage = 0; /* the views share or skip storage: no slot is "unseen" by all */
    int64_t qs[4] = {S * Hq * D, Hq * D, D, 1};
    view_fill(bd, c, T_Q, S, Hq, D, qs, B * qs[0], 2.0);
    int64_t ks[4] = {T * Hkv * D, Hkv * D, D, 1};
    int64_t n = B * ks[0];
    if (kv0 >= 0) {
        ks[0] = kv0;
        n = (B - 1) * kv0 + T * Hkv * D;
    }
    view_fill(bd, c, T_K, T, Hkv, D, ks, n, 2.0);
    view_fill(bd, c, T_V, T, Hkv, D, ks, n, 1.0);
    return bd->oom ? NULL : c;
}

void battery_huge(builder *bd)
{
    conform_case *c;
    /* a decode step against 2^20 keys but the last 17 (which hold garbage); two heads only:
     * the oracle's exact phase decides these rows, at tens of seconds a row */
    const int64_t T20 = (int64_t)1 << 20;
    if ((c = huge_case(bd, "decode_t1048576", 1, 1, T20, 2, 1, 4, -1))) {
        int64_t lens[1] = {T20 - 17};
        bat_case_lens(bd, c, 0, lens);
        c->garbage = 1;
        bat_finish(bd, c);
    }
    /* chunked prefill over 65536 keys: the causal diagonal at j = i + 65024 */
    if ((c = huge_case(bd, "chunked_t65536", 1, 512, 65536, 2, 1, 16, -1))) {
        c->prob.causal = SMATTN_CAUSAL_LOWER_RIGHT;
        bat_finish(bd, c);
    }
    /* S T = 46341^2 > 2^31 scores in one head: a flat score index overflows int32 */
    if ((c = huge_case(bd, "scores_46341x46341", 1, 46341, 46341, 1, 1, 4, -1)))
        bat_finish(bd, c);
    /* K and V broadcast over 8 batches by stride 0, T = 65537 = 1 mod 32 (a partial last
     * tile of one key) */
    if ((c = huge_case(bd, "kv_broadcast_t65537", 8, 2, 65537, 4, 1, 8, 0))) {
        c->prob.causal = SMATTN_CAUSAL_LOWER_RIGHT;
        bat_finish(bd, c);
    }
    /* the second batch of K and V starts 2^31 + 64 elements in (8 GiB of f32 reserved, a few
     * MiB touched): a 32-bit element offset wraps */
    if ((c = huge_case(bd, "kv_offset_2g", 2, 4, 65537, 2, 1, 8, ((int64_t)1 << 31) + 64))) {
        c->prob.causal = SMATTN_CAUSAL_LOWER_RIGHT;
        bat_finish(bd, c);
    }
}
