/* SPDX-License-Identifier: MIT */
/* opt.c: the optimised kernel's entry points: validation, the plan (work items that depend
 * on the shape only), the thread pool run, the split-K merge in a fixed order, and the
 * finishing of rows (sinks, empty rows, LSE, P). */
#include <float.h>
#include <math.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "opt/opt_internal.h"

static const opt_isa *isa_by_name(const char *name)
{
    if (!name)
        return smattn__opt_isa();
    if (!smattn__isa_known(name) || !smattn_opt_isa_available(name))
        return NULL;
    if (strcmp(name, "scalar") == 0)
        return &smattn__isa_scalar;
    if (strcmp(name, "avx2") == 0)
        return &smattn__isa_avx2;
    return &smattn__isa_avx512;
}

/* ---- finishing rows ----------------------------------------------------------------------- */

/* Store one output element: f32 as computed; f16 and bf16 rounded once from the f32 value,
 * nearest-even, overflowing to +-inf (smattn_store, SPEC 2.6), a NaN as the positive quiet
 * NaN of SPEC 4.3. An exact zero is +0 (SPEC 4.3). */
static void put(const smattn_out_tensor *t, int64_t off, float x)
{
    if (t->dtype == SMATTN_F32)
        opt_st_f32(t->data, off, x + 0.0f); /* an exact zero is +0 (SPEC 4.3); any address */
    else
        smattn_store(t->data, t->dtype, off, isnan(x) ? (double)NAN : (double)(x + 0.0f));
}

/* O and LSE through the layout's locator (SPEC 2.7) */
static int64_t o_off(const opt_job *job, int64_t b, int64_t i, int64_t h, int64_t c)
{
    return smattn__row_off(job->p, job->out->o.stride, b, i, h, c);
}

static int64_t lse_off(const opt_job *job, int64_t b, int64_t h, int64_t i)
{
    return smattn__lse_off(job->p, job->out->lse.stride, b, h, i);
}

static float opt_exp(const opt_job *job, float x)
{
    return job->isa->expf(x);
}

/* P_ij = exp(s_ij - M) / L for a finished attention row: the scores are computed again
 * (single-precision fma dot, as in the kernel; any score rounding is within SPEC 6.1). */
static void write_p_attention(const opt_job *job, int64_t b, int64_t h, int64_t i, float M,
                              float L)
{
    const smattn_problem *p = job->p;
    const smattn_inputs *in = job->in;
    const smattn_out_tensor *pt = &job->out->p;
    int64_t lo, hi, g = smattn__kv_head(p, h);
    smattn__key_range(p, b, i, &lo, &hi);
    int bad = 0;
    /* the query row in binary32 once, each key's row before its dot (both exact: every
     * input dtype's values are binary32 numbers); element by element past the buffers */
    enum { RBUF = 512 };
    float qbuf[RBUF], kbuf[RBUF];
    const int held = p->D <= RBUF;
    for (int64_t d = 0; held && d < p->D; d++)
        qbuf[d] = opt_load1(&in->q, smattn__row_off(p, in->q.stride, b, i, h, d));
    float sh, sl;
    opt_scale(job, b, g, &sh, &sl);
    for (int64_t j = 0; j < p->T; j++) {
        float val = 0.0f;
        if (j >= lo && j < hi && smattn__mask_allows(p, in, b, h, i, j)) {
            float dot = 0.0f;
            const int64_t k0 = smattn__key_off(p, in->k.stride, b, j, g, 0), ks = in->k.stride[3];
            for (int64_t d = 0; held && d < p->D; d++)
                kbuf[d] = opt_load1(&in->k, k0 + d * ks);
            for (int64_t d = 0; d < p->D; d++) {
                float q = held ? qbuf[d]
                               : opt_load1(&in->q, smattn__row_off(p, in->q.stride, b, i, h, d));
                float k = held ? kbuf[d] : opt_load1(&in->k, k0 + d * ks);
                dot = fmaf(q, k, dot);
            }
            float x = fmaf(dot, sh, dot * sl);
            if (p->softcap > 0)
                x = opt_softcap(x, (float)p->softcap);
            int vis = 1;
            if (in->bias.data) {
                float bj = opt_load1(&in->bias, smattn__off4(in->bias.stride, b, h, i, j));
                vis = bj != -HUGE_VALF;
                if (vis && p->alibi_mode == SMATTN_ALIBI_MASK) /* SPEC 2.8 */
                    bj *= smattn__alibi_slope(p, b, h);
                x += bj;
            }
            if (p->alibi_mode == SMATTN_ALIBI_SYMMETRIC || p->alibi_mode == SMATTN_ALIBI_ONE_SIDED)
                x += opt_alibi(p, smattn__alibi_slope(p, b, h), b, i, j);
            if (vis) {
                val = opt_exp(job, x - M) / L;
                bad |= !isfinite(x) || !isfinite(val);
            }
        }
        put(pt, smattn__off4(pt->stride, b, h, i, j), val);
    }
    /* this scalar recomputation can overflow where the kernel's blocked dot did not: the
     * row then goes to the binary64 path, which rewrites all of it */
    if (bad)
        smattn__opt_slow_row(job, b, h, i);
}

void smattn__opt_finish_row(const opt_job *job, int64_t b, int64_t h, int64_t i, float m, float l,
                            float *acc, int slow)
{
    const smattn_problem *p = job->p;
    const smattn_inputs *in = job->in;
    const smattn_outputs *out = job->out;
    if (!out->p.data && !smattn__row_stored(p, b, i))
        return; /* a packed batch's padding row, no P: nothing to write (SPEC 2.7) */
    if (slow) {
        smattn__opt_slow_row(job, b, h, i);
        return;
    }
    float M = m;
    if (opt_has_sink(in, h) && i < smattn__q_len(p, b)) {
        double sd = smattn_load(in->sinks.data, in->sinks.dtype, h * in->sinks.stride[0]);
        float sk = (float)sd;
        if (isnan(sd) || sd == HUGE_VAL || !isfinite(sk)) {
            smattn__opt_slow_row(job, b, h, i);
            return;
        }
        if (sk > M)
            M = sk;
        float cm = m == -HUGE_VALF ? 0.0f : opt_exp(job, m - M);
        l = l * cm + opt_exp(job, sk - M);
        for (int64_t c = 0; c < p->Dv; c++)
            acc[c] *= cm;
    }
    if (!(l > 0)) { /* no visible key and no sink: an empty row (SPEC 3.4) */
        if (l == 0 && p->empty_rows != SMATTN_EMPTY_MEAN) {
            smattn__opt_write_empty(job, b, h, i);
            return;
        }
        smattn__opt_slow_row(job, b, h, i); /* the mean convention, or a NaN */
        return;
    }
    if (!smattn__row_stored(p, b, i)) /* a packed padding row: only P (SPEC 2.7) */
        goto p_only;
    /* V's descale f_v (SPEC 2.9): O = f_v N / L, computed as N / fl(L / f_v), two roundings
     * as N fl(1 / L) (SPEC 6.1 A4; the numerators N are those of the decoded V). A
     * quotient outside binary32's normal range takes the binary64 path. */
    float lv = l;
    if (job->v_scale) {
        lv = l / job->v_scale[b * p->Hkv + smattn__kv_head(p, h)];
        if (!(lv >= FLT_MIN && lv <= FLT_MAX)) {
            smattn__opt_slow_row(job, b, h, i);
            return;
        }
    }
    /* write, then send the row to the binary64 path if anything was not finite (it
     * rewrites the whole row): one pass, no dependency chain */
    int bad = !isfinite(l);
    const int64_t os = out->o.stride[3];
    if (out->o.dtype != SMATTN_F32) {
        /* f16 / bf16: O in f32 in place of the numerators (the same bits as an f32 O),
         * then rounded once per element */
        bad |= job->isa->write_o(acc, acc, lv, p->Dv);
        if (!bad && os == 1)
            job->isa->store_half(out->o.data, out->o.dtype, o_off(job, b, i, h, 0), acc, p->Dv);
        else if (!bad)
            for (int64_t c = 0; c < p->Dv; c++)
                put(&out->o, o_off(job, b, i, h, c), acc[c]);
    } else if (os == 1) {
        bad |= job->isa->write_o((float *)out->o.data + o_off(job, b, i, h, 0), acc, lv, p->Dv);
    } else {
        float *o = (float *)out->o.data + o_off(job, b, i, h, 0);
        for (int64_t c = 0; c < p->Dv; c++) {
            float x = acc[c] / lv + 0.0f;
            bad |= !isfinite(x);
            opt_st_f32(o, c * os, x);
        }
    }
    if (bad) {
        smattn__opt_slow_row(job, b, h, i);
        return;
    }
    if (out->lse.data)
        put(&out->lse, lse_off(job, b, h, i), M + logf(l));
p_only:
    if (out->p.data)
        write_p_attention(job, b, h, i, M, l);
}

void smattn__opt_finish_softmax_row(const opt_job *job, int64_t b, int64_t h, int64_t i, float m,
                                    float l, const float *e, const unsigned char *vis)
{
    const smattn_outputs *out = job->out;
    if (!isfinite(l) || !(l > 0)) {
        smattn__opt_slow_row(job, b, h, i);
        return;
    }
    if (out->lse.data)
        put(&out->lse, lse_off(job, b, h, i), m + logf(l));
    if (out->p.data)
        for (int64_t j = 0; j < job->p->T; j++)
            put(&out->p, smattn__off4(out->p.stride, b, h, i, j), vis[j] ? e[j] / l : 0.0f);
}

/* ---- validation and plan ------------------------------------------------------------------ */

/* The kernel's formats: every input read exactly into binary32 (SPEC 6.1 A1), so f64
 * inputs (sinks too) are declined; outputs f32, or rounded once from f32 to f16 / bf16. */
static int dtype_ok(smattn_dtype t)
{
    return t == SMATTN_F32 || t == SMATTN_F16 || t == SMATTN_BF16;
}

/* Q, K and V may also be fp8, K and V q8_0 or q4_0 (SPEC 2.9; validation refuses the block
 * formats for Q): every value read exactly into binary32 as well. */
static int qkv_dtype_ok(smattn_dtype t)
{
    return dtype_ok(t) || t == SMATTN_F8E4M3 || t == SMATTN_F8E5M2 || opt_is_block(t);
}

static smattn_status supported(const smattn_problem *p, const smattn_inputs *in,
                               const smattn_outputs *out)
{
    if (p->op == SMATTN_OP_ATTENTION) {
        if (!qkv_dtype_ok(in->q.dtype) || !qkv_dtype_ok(in->k.dtype) || !qkv_dtype_ok(in->v.dtype) ||
            !dtype_ok(out->o.dtype))
            return SMATTN_ERR_UNSUPPORTED;
    } else if (!dtype_ok(in->x.dtype)) {
        return SMATTN_ERR_UNSUPPORTED;
    }
    if ((in->bias.data && !dtype_ok(in->bias.dtype)) || (in->sinks.data && !dtype_ok(in->sinks.dtype)))
        return SMATTN_ERR_UNSUPPORTED;
    if ((out->lse.data && !dtype_ok(out->lse.dtype)) || (out->p.data && !dtype_ok(out->p.dtype)))
        return SMATTN_ERR_UNSUPPORTED;
    return SMATTN_OK;
}

static int env_threads(void)
{
    const char *e = getenv("SMATTN_NUM_THREADS");
    if (!e || !*e)
        return 0;
    char *end;
    long n = strtol(e, &end, 10);
    return *end == 0 && n > 0 && n <= 1024 ? (int)n : 0;
}

/* ---- the call's scratch: every workspace and the split-K partials in one block, kept for
 * the next call ---------------------------------------------------------------------------- */

/* A decode step at T = 4096 spent about 60 of its 1000 us in the fifty mallocs and frees of
 * its workspaces (caches cold, as after `make bench`'s flush: the allocator's lists and a
 * trimmed heap's pages). One block per call instead, the last call's kept for the next
 * (atomically: a call that finds none, another thread's call holding it, allocates its
 * own; a fork's child inherits the kept block with the rest of the heap). A block over
 * SCRATCH_KEEP bytes (a split-K decode of millions of keys, V staged for tens of thousands)
 * is not kept: AVX2's chunked prefill S = 128, T = 4096 stages 8 MiB of V, whose pages,
 * faulted in again at every call, cost it 4 of its 52 ms. Buffers are carved
 * 64-byte aligned with a 64-byte gap after each, which AddressSanitizer builds poison, so an
 * overrun is caught as it was with a malloc per buffer. */
#define SCRATCH_KEEP ((size_t)32 << 20)
#define SCRATCH_HEAD 64 /* the block's capacity is stored before its first buffer */
#if defined(__SANITIZE_ADDRESS__)
#define SCRATCH_ASAN 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define SCRATCH_ASAN 1
#endif
#endif
#ifdef SCRATCH_ASAN
#include <sanitizer/asan_interface.h>
#define SCRATCH_POISON(a, n) ASAN_POISON_MEMORY_REGION(a, n)
#define SCRATCH_UNPOISON(a, n) ASAN_UNPOISON_MEMORY_REGION(a, n)
#else
#define SCRATCH_POISON(a, n) ((void)(a), (void)(n))
#define SCRATCH_UNPOISON(a, n) ((void)(a), (void)(n))
#endif

static _Atomic(unsigned char *) scratch_kept;

static size_t scratch_cap(const unsigned char *block)
{
    size_t cap;
    memcpy(&cap, block, sizeof cap);
    return cap;
}

/* A block of at least need bytes after its head (the kept one when it is large enough) */
static unsigned char *scratch_take(size_t need)
{
    unsigned char *b = atomic_exchange(&scratch_kept, NULL);
    if (b && scratch_cap(b) >= need)
        return b;
    free(b);
    if (need > SIZE_MAX - 2 * SCRATCH_HEAD)
        return NULL;
    const size_t cap = (need + SCRATCH_HEAD - 1) / SCRATCH_HEAD * SCRATCH_HEAD;
    b = aligned_alloc(SCRATCH_HEAD, SCRATCH_HEAD + cap);
    if (b)
        memcpy(b, &cap, sizeof cap);
    return b;
}

/* The block back, kept for the next call (the one kept before it freed) */
static void scratch_give(unsigned char *b)
{
    if (!b)
        return;
    SCRATCH_UNPOISON(b + SCRATCH_HEAD, scratch_cap(b));
    if (scratch_cap(b) > SCRATCH_KEEP) {
        free(b);
        return;
    }
    free(atomic_exchange(&scratch_kept, b));
}

/* Buffers from a block (base NULL: only the size is counted) */
typedef struct carver {
    unsigned char *base;
    size_t off;
} carver;

static void *carve(carver *c, size_t bytes)
{
    unsigned char *at = c->base ? c->base + c->off : NULL;
    const size_t span = (bytes + 63) / 64 * 64 + 64; /* the buffer, then its gap */
    if (at)
        SCRATCH_POISON(at + bytes, span - bytes);
    c->off += span;
    return at;
}

static void ws_carve(opt_ws *w, const opt_job *job, carver *c)
{
    const smattn_problem *p = job->p;
    memset(w, 0, sizeof *w);
    size_t R = (size_t)((job->R + 3) / 4 * 4 * job->hg), Dp = (size_t)(p->op == SMATTN_OP_ATTENTION ? (p->D + 15) / 16 * 16 : 16);
    size_t Dvp = (size_t)job->Dvp, T = (size_t)p->T;
    size_t srow = p->op == SMATTN_OP_ATTENTION ? R * OPT_BK : T + OPT_BK;
    w->q = carve(c, R * Dp * sizeof(float));
    w->qp = carve(c, R * Dp * sizeof(float));
    w->kt = carve(c, (size_t)OPT_BK * Dp * sizeof(float));
    w->ktt = job->qkt ? carve(c, (size_t)OPT_BK * Dp * sizeof(float)) : NULL;
    w->v = carve(c, (size_t)OPT_BK * Dvp * sizeof(float));
    w->s = carve(c, srow * sizeof(float));
    w->vis = carve(c, srow);
    w->acc = carve(c, R * Dvp * sizeof(float));
    w->m = carve(c, R * sizeof(float));
    w->l = carve(c, R * sizeof(float));
    w->lo = carve(c, R * sizeof(int64_t));
    w->hi = carve(c, R * sizeof(int64_t));
    w->slow = carve(c, R);
    w->full = carve(c, R);
    w->mt = carve(c, R * sizeof(float));
    w->sm = carve(c, R * sizeof(float));
    w->dm = carve(c, (R + 16) * sizeof(float)); /* zeroed below: the padding read by whole
                                                 * vectors stays 0 */
    w->krows = carve(c, (size_t)(job->hg * OPT_BK) * sizeof *w->krows);
    w->vrows = carve(c, (size_t)(job->hg * OPT_BK) * sizeof *w->vrows);
    w->pfk = carve(c, (size_t)OPT_BK * sizeof *w->pfk);
    w->pfv = carve(c, (size_t)OPT_BK * sizeof *w->pfv);
    const int kq = p->op == SMATTN_OP_ATTENTION && opt_is_block(job->in->k.dtype);
    w->kq = kq ? carve(c, (size_t)job->hg * OPT_BK * Dp * sizeof(float)) : NULL;
    const int qp8 = p->op == SMATTN_OP_ATTENTION && job->in->k.dtype == SMATTN_F8E4M3;
    w->qp8 = qp8 ? carve(c, R * Dp * sizeof(float)) : NULL;
    w->pb = carve(c, (size_t)7 * OPT_BK * 16 * sizeof(float));
    if (w->dm)
        memset(w->dm, 0, (R + 16) * sizeof(float));
}

/* The nt workspaces and, with split-K, the partials ([units][R][Dvp + 2]) in one block;
 * NULL if out of memory */
static unsigned char *job_scratch(opt_job *job, int nt, int64_t units)
{
    carver c = {NULL, 0};
    opt_ws sizing;
    for (int k = 0; k < nt; k++)
        ws_carve(&sizing, job, &c);
    const size_t part =
        job->nchunks > 1 ? (size_t)(units * job->R * (job->Dvp + 2)) * sizeof(float) : 0;
    if (part)
        carve(&c, part);
    const size_t ntiles = (size_t)(job->p->B * job->p->Hkv * job->vtiles);
    const size_t vbytes = ntiles * OPT_BK * (size_t)job->Dvp * sizeof(float);
    if (ntiles) {
        carve(&c, vbytes);
        carve(&c, ntiles);
    }
    unsigned char *block = scratch_take(c.off);
    if (!block)
        return NULL;
    c = (carver){block + SCRATCH_HEAD, 0};
    for (int k = 0; k < nt; k++)
        ws_carve(&job->ws[k], job, &c);
    job->part = part ? carve(&c, part) : NULL;
    if (ntiles) {
        job->vstage = carve(&c, vbytes);
        job->vstate = carve(&c, ntiles);
        for (size_t x = 0; x < ntiles; x++)
            atomic_init(&job->vstate[x], 0);
    }
    return block;
}

#ifdef SMATTN_PHASES
#include <stdatomic.h>
#include <time.h>
static _Thread_local int64_t phase_mine[OPT_NPH];
static atomic_llong phase_total[OPT_NPH];
int64_t smattn__phase_now(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (int64_t)t.tv_sec * 1000000000 + t.tv_nsec;
}
void smattn__phase_add(int phase, int64_t ns) { phase_mine[phase] += ns; }
void smattn__phase_flush(void)
{
    for (int k = 0; k < OPT_NPH; k++) {
        atomic_fetch_add(&phase_total[k], (long long)phase_mine[k]);
        phase_mine[k] = 0;
    }
}
void smattn__phases_take(double sec[OPT_NPH])
{
    for (int k = 0; k < OPT_NPH; k++)
        sec[k] = 1e-9 * (double)atomic_exchange(&phase_total[k], 0);
}
#define OPT_PH_FLUSH() smattn__phase_flush()
#else
#define OPT_PH_FLUSH() ((void)0)
#endif

static void run_attention_item(void *ctx, int64_t item, int worker)
{
    const opt_job *job = ctx;
    job->isa->attention_item(job, opt_item_order(job, item), &job->ws[worker]);
    OPT_PH_FLUSH();
}

static void run_softmax_item(void *ctx, int64_t item, int worker)
{
    const opt_job *job = ctx;
    const smattn_problem *p = job->p;
    int64_t b = item / (p->Hq * p->S), h = (item / p->S) % p->Hq, i = item % p->S;
    if (i >= smattn__q_len(p, b)) {
        smattn__opt_slow_row(job, b, h, i); /* padding rows: the conventions */
        return;
    }
    job->isa->softmax_row(job, b, h, i, &job->ws[worker]);
}

/* Merge the split-K partials of each row in chunk order, then finish the row. */
static void merge_chunks(opt_job *job)
{
    const smattn_problem *p = job->p;
    const int64_t R = job->R, Dvp = job->Dvp, nc = job->nchunks;
    float *acc = job->ws[0].acc; /* R * Dvp floats: one row is enough */
    for (int64_t bq = 0; bq < p->B * job->qtiles; bq++)
    for (int64_t g = 0; g < p->Hkv; g++) {
        int64_t b = bq / job->qtiles, qt = bq % job->qtiles;
        for (int64_t r = 0; r < R; r++) {
            int64_t hh = r / job->nq, i = qt * job->nq + r % job->nq, h = g * job->G + hh;
            if (i >= p->S)
                continue;
            float M = -HUGE_VALF, L = 0.0f;
            int slow = 0;
            for (int64_t c = 0; c < nc; c++) {
                const float *pr = job->part + (opt_unit_index(job, b, g, qt, c) * R + r) * (Dvp + 2);
                if (isnan(pr[0]))
                    slow = 1;
                else if (pr[0] > M)
                    M = pr[0];
            }
            memset(acc, 0, (size_t)Dvp * sizeof(float));
            for (int64_t c = 0; c < nc && !slow; c++) {
                const float *pr = job->part + (opt_unit_index(job, b, g, qt, c) * R + r) * (Dvp + 2);
                if (pr[0] == -HUGE_VALF)
                    continue;
                float w = opt_exp(job, pr[0] - M);
                L = fmaf(pr[1], w, L);
                job->isa->axpy(acc, pr + 2, w, p->Dv);
            }
            smattn__opt_finish_row(job, b, h, i, M, L, acc, slow);
        }
    }
}

/* Descales (SPEC 2.9), per (b, KV head): the score multiplier c = scale f_q f_k in binary64
 * (two roundings, relative error below 2^-52) split as hi + lo (|c - hi - lo| <= 2^-48 |c|
 * for c in the normal range), so that fma(s, hi, s lo) is within (1 + 2^-24)(1 + 2^-46) of
 * s c: inside SPEC 6.1 A2's two roundings (the scale's and the product's), the model of Q1
 * with r = 0. A c whose hi or lo would leave binary32's normal range (|c| outside
 * [2^-100, 2^100]) marks its rows for the binary64 path (hi = NaN). f_v as binary32 (it is
 * one, SPEC 2.9). NULL arrays when every factor is 1, so such a problem keeps the bits of
 * the problem without descales. */
static smattn_status descale_plan(opt_job *job)
{
    const smattn_problem *p = job->p;
    const int64_t n = p->B * p->Hkv;
    int qk_one = 1, v_one = 1;
    for (int64_t x = 0; x < n; x++) {
        const int64_t b = x / p->Hkv, g = x % p->Hkv;
        qk_one &= smattn__descale(p, 'q', b, g) == 1.0 && smattn__descale(p, 'k', b, g) == 1.0;
        v_one &= smattn__descale(p, 'v', b, g) == 1.0;
    }
    if (!qk_one && !(job->qk_scale = malloc((size_t)n * 2 * sizeof(float))))
        return SMATTN_ERR_NOMEM;
    if (!v_one && !(job->v_scale = malloc((size_t)n * sizeof(float)))) {
        free(job->qk_scale);
        job->qk_scale = NULL;
        return SMATTN_ERR_NOMEM;
    }
    for (int64_t x = 0; !qk_one && x < n; x++) {
        const int64_t b = x / p->Hkv, g = x % p->Hkv;
        const double c = p->scale * smattn__descale(p, 'q', b, g) * smattn__descale(p, 'k', b, g);
        const float hi = (float)c;
        job->qk_scale[2 * x] = fabs(c) >= 0x1p-100 && fabs(c) <= 0x1p100 ? hi : (float)NAN;
        job->qk_scale[2 * x + 1] = (float)(c - (double)hi);
        if (c == 0) /* a zero scale (valid, SPEC 2.3): every score 0, as without descales */
            job->qk_scale[2 * x] = 0.0f;
    }
    for (int64_t x = 0; !v_one && x < n; x++)
        job->v_scale[x] = (float)smattn__descale(p, 'v', x / p->Hkv, x % p->Hkv);
    return SMATTN_OK;
}

/* The descriptor has passed smattn_validate (the entry points below, once). */
static smattn_status run(const smattn_problem *p, const smattn_inputs *in,
                         const smattn_outputs *out, const smattn_opt_config *cfg)
{
    if (cfg && ((cfg->isa && !smattn__isa_known(cfg->isa)) || cfg->threads < 0))
        return SMATTN_ERR_OPTION;
    smattn_status st = supported(p, in, out);
    if (st)
        return st;
    opt_job job;
    memset(&job, 0, sizeof job);
    job.p = p;
    job.in = in;
    job.out = out;
    job.isa = isa_by_name(cfg ? cfg->isa : NULL);
    if (!job.isa)
        return SMATTN_ERR_UNSUPPORTED; /* a known ISA this CPU lacks */
    int nt = cfg && cfg->threads > 0 ? cfg->threads : env_threads();
    /* never more threads than cores can run them (each holds a workspace): the results
     * do not depend on the count, so the cap changes no bit */
    if (nt <= 0 || nt > smattn__ncpu())
        nt = smattn__ncpu();
    job.scale_hi = (float)p->scale;
    job.scale_lo = (float)(p->scale - (double)job.scale_hi);
    if (p->descale && (st = descale_plan(&job)))
        return st;
    const int att = p->op == SMATTN_OP_ATTENTION;
    job.G = att ? p->Hq / p->Hkv : 1;
    /* about 64 rows per item, 128 with vectors where the scores take the keys in the lanes
     * (the key tile's transposition then serves twice the rows: AVX-512's prefill 512 and
     * chunked prefill 3-8% faster; AVX2's prefill 2048 5-10% slower while each unit staged
     * its own V tiles, about 3% faster (178-185 against 182-192 ms) since they are staged
     * once per call); a row's arithmetic does not depend on its item's rows */
    const int64_t rows = att && p->S >= 16 && job.isa != &smattn__isa_scalar ? 128 : 64;
    job.nq = att ? (job.G >= rows ? 1 : rows / job.G) : 1;
    if (job.nq > p->S)
        job.nq = p->S;
    job.R = job.G * job.nq;
    job.Dvp = att ? (p->Dv + 15) / 16 * 16 : 16;
    job.qtiles = (p->S + job.nq - 1) / job.nq;
    /* many query rows per KV head: transpose each key tile once (kernel_body.h); a rule on
     * S alone, so a GQA problem and its MHA expansion get the same arithmetic */
    job.qkt = att && p->S >= 16;
    /* split the keys only when rows are too few to share out: a shape rule, so the same
     * problem always gets the same chunks, whatever the thread count */
    job.nchunks = 1;
    /* The rule reads B, Hq, S and T only (not Hkv, not the thread count), so that a GQA
     * problem and its MHA expansion get the same chunks and the same bits. */
    /* Chunks of OPT_CHUNK keys, longer past 16 of them (T / 16, a multiple of the tile, at
     * most 4 OPT_CHUNK): each chunk costs its rows' setup, its partials and their share of
     * the serial merge. With the items above, decode T = 32768 on 2 threads took 0.93-0.95x
     * the time with f32 K/V, 0.92x with f16 and e4m3, T = 16384 0.91x (medians of 6-10
     * interleaved pairs). A shape rule (T only), so GQA and its MHA expansion, and every
     * thread count, keep the same chunks; T below 9216 keeps chunks of OPT_CHUNK. */
    job.chunk = OPT_CHUNK;
    if (att && p->B * p->Hq * p->S <= 256 && p->T > 2 * OPT_CHUNK) {
        const int64_t ch = p->T / 16 / OPT_BK * OPT_BK;
        job.chunk = ch < OPT_CHUNK ? OPT_CHUNK : ch > 4 * OPT_CHUNK ? 4 * OPT_CHUNK : ch;
        job.nchunks = (p->T + job.chunk - 1) / job.chunk;
    }
    const int64_t units = att ? p->B * p->Hkv * job.qtiles * job.nchunks : p->B * p->Hq * p->S;
    /* A split-K item takes as many KV heads as keep every thread busy (at least four items
     * per thread), so that it reads K and V in address order. Rows do not depend on hg. */
    job.hg = 1;
    if (att && job.nchunks > 1)
        for (int64_t d = p->Hkv; d > 1; d--)
            if (p->Hkv % d == 0 && units / d >= 4 * (int64_t)nt) {
                job.hg = d;
                break;
            }
    /* and, with every KV head in it, as many consecutive key chunks as still keep every
     * thread busy: an item's next chunk is requested during its chunk's last tile, so that
     * only its first tile waits for memory (decode T = 32768 f32 on 2 threads, alone: 0.97x
     * the time, medians of 8 interleaved pairs; no bit changes: each chunk is its own
     * partial state, merged as before) */
    job.cg = 1;
    if (att && job.nchunks > 1 && job.hg == p->Hkv)
        for (int64_t d = job.nchunks; d > 1; d--)
            if (job.nchunks % d == 0 && units / (job.hg * d) >= 4 * (int64_t)nt) {
                job.cg = d;
                break;
            }
    job.items = units / (job.hg * job.cg);
    /* V's tiles staged once per call (kernel_body.h, AVX2's many-row P.V) where several
     * query tiles read them: a dense V (its T rows all in memory) of unit-stride rows,
     * whole panels, at most 64 MiB of copies */
    const smattn_tensor *vt = &in->v;
    if (att && job.qkt && job.isa == &smattn__isa_avx2 && !p->layout && job.qtiles >= 2 &&
        vt->stride[3] == 1 && p->Dv % 16 == 0 && !opt_is_block(vt->dtype) &&
        (double)(p->B * p->Hkv) * (double)((p->T + OPT_BK - 1) / OPT_BK) * OPT_BK *
                (double)job.Dvp <=
            (double)(16 << 20))
        job.vtiles = (p->T + OPT_BK - 1) / OPT_BK;
    if (nt > job.items)
        nt = (int)job.items;
    job.ws = calloc((size_t)nt, sizeof *job.ws);
    if (!job.ws) {
        free(job.qk_scale), free(job.v_scale);
        return SMATTN_ERR_NOMEM;
    }
    unsigned char *scratch = job_scratch(&job, nt, units);
    if (!scratch) {
        free(job.ws);
        free(job.qk_scale), free(job.v_scale);
        return SMATTN_ERR_NOMEM;
    }
    smattn__pool_run(nt, job.items, att ? run_attention_item : run_softmax_item, &job);
    if (job.nchunks > 1) {
        OPT_PH_BEGIN(t_merge);
        merge_chunks(&job);
        OPT_PH_END(OPT_PH_MERGE, t_merge);
        OPT_PH_FLUSH();
    }
    scratch_give(scratch);
    free(job.ws);
    free(job.qk_scale);
    free(job.v_scale);
    return st;
}

/* Validation first, so that every entry point reports the same status as smattn_validate
 * for the same descriptor; then the operation check. */
smattn_status smattn_attention(const smattn_problem *p, const smattn_inputs *in,
                               const smattn_outputs *out, const smattn_opt_config *cfg)
{
    smattn_status st = smattn_validate(p, in, out);
    if (st)
        return st;
    if (p->op != SMATTN_OP_ATTENTION)
        return SMATTN_ERR_OPTION;
    return run(p, in, out, cfg);
}

smattn_status smattn_softmax(const smattn_problem *p, const smattn_inputs *in,
                             const smattn_outputs *out, const smattn_opt_config *cfg)
{
    smattn_status st = smattn_validate(p, in, out);
    if (st)
        return st;
    if (p->op != SMATTN_OP_SOFTMAX)
        return SMATTN_ERR_OPTION;
    return run(p, in, out, cfg);
}

smattn_precision smattn_opt_precision(const smattn_problem *p)
{
    smattn_precision m = smattn_precision_of(SMATTN_F32);
    m.exp_ulps = SMATTN_OPT_EXP_ULPS > 2.0 ? SMATTN_OPT_EXP_ULPS : 2.0;
    int64_t T = p ? p->T : 1; /* any descriptor: T clamped to the valid range first */
    T = T < 1 ? 1 : T > SMATTN_MAX_DIM ? SMATTN_MAX_DIM : T;
    int64_t tiles = (T + OPT_BK - 1) / OPT_BK;
    int64_t chunks = (T + OPT_CHUNK - 1) / OPT_CHUNK; /* at least run()'s split-K chunks */
    m.blocks = tiles + chunks + 1;
    m.acc_len = T + chunks + 2;
    m.tiny = 0x1p-126; /* exp flushes results below FLT_MIN */
    /* V's descale multiplies the P.V of the decoded values, whose gradual underflow is at
     * most 2^-150 per operation, by f_v (smattn__opt_finish_row): at most tiny unless
     * f_v > 2^24, then f_v 2^-150 (SPEC 2.9; read only for a plausible descriptor) */
    const smattn_descale *ds = p ? p->descale : NULL;
    if (ds && p->B >= 1 && p->Hkv >= 1 && p->B <= SMATTN_MAX_DIM && p->Hkv <= SMATTN_MAX_DIM) {
        double fv = ds->v_head ? 0 : ds->v;
        for (int64_t x = 0; ds->v_head && x < p->B * p->Hkv; x++)
            fv = ds->v_head[x] > fv ? ds->v_head[x] : fv;
        if (fv * 0x1p-150 > m.tiny) /* false for a NaN */
            m.tiny = fv * 0x1p-150;
    }
    return m;
}
