/* SPDX-License-Identifier: MIT */
/* opt_internal.h: the optimised kernel's plan, work items, workspace and ISA table. */
#ifndef SMATTN_OPT_INTERNAL_H
#define SMATTN_OPT_INTERNAL_H

#include <math.h>
#include <stdatomic.h>
#include <stdint.h>
#include <string.h>

#include "core/internal.h"

/* Tensor elements at any address (smattn.h states no alignment): bytes are copied, which
 * compilers turn into one plain load or store. Element offset off, in elements. */
static inline float opt_ld_f32(const void *base, int64_t off)
{
    float x;
    memcpy(&x, (const unsigned char *)base + off * (int64_t)sizeof(float), sizeof x);
    return x;
}
static inline void opt_st_f32(void *base, int64_t off, float x)
{
    memcpy((unsigned char *)base + off * (int64_t)sizeof(float), &x, sizeof x);
}

/* Inlined at each call, so that a constant argument (a row count) is folded into a copy of
 * the loop rather than tested in it. */
#if defined(__GNUC__)
#define OPT_INLINE __attribute__((always_inline))
#else
#define OPT_INLINE
#endif

/* One element of an f32, f16 or bf16 tensor (bias, X) as f32: exact, both are subsets of
 * binary32 (SPEC 2.6); the f32 case stays a plain load. */
static inline float opt_load1(const smattn_tensor *t, int64_t off)
{
    return t->dtype == SMATTN_F32 ? opt_ld_f32(t->data, off) /* any address */
                                  : (float)smattn_load(t->data, t->dtype, off);
}

/* The softcap c tanh(x / c) of SPEC 2.4 in binary32, cap = (float)c, for c > 0. A c below
 * binary32's range (cap = 0: c <= 2^-150) still caps: |c tanh(x / c)| < c <= 2^-150 rounds
 * to 0, so a finite x becomes +-0 (correctly rounded) and a NaN or an infinity NaN (x * 0;
 * the callers send an infinite x to the binary64 path before). */
static inline float opt_softcap(float x, float cap)
{
    return cap > 0 ? cap * tanhf(x / cap) : x * 0.0f;
}

/* The symmetric or one-sided ALiBi addend of key j in binary32 (SPEC 2.8; the model of
 * 6.2.3): the distance rounded to binary32 (exact below 2^24), times the slope, rounded. */
static inline float opt_alibi(const smattn_problem *p, float slope, int64_t b, int64_t i,
                              int64_t j)
{
    return slope * (float)smattn__alibi_dist(p, b, i, j);
}

/* Does head h have a sink that joins the denominator? A sink of -inf is no sink (SPEC 2.5:
 * its weight e^-inf is 0), so such a head keeps the float32 path and its bits; a NaN or
 * +inf one does (the binary64 path applies SPEC 4.2 to it). */
static inline int opt_has_sink(const smattn_inputs *in, int64_t h)
{
    return in->sinks.data &&
           smattn_load(in->sinks.data, in->sinks.dtype, h * in->sinks.stride[0]) != -HUGE_VAL;
}

/* Key tile: a multiple of every VLEN (1, 8, 16) and of the 2-vector micro-tile. */
#define OPT_BK 64
/* Keys per split-K chunk for decode-like shapes, the least (SPEC-free: a performance
 * choice that must depend on the shape only, so results do not depend on the thread count;
 * opt.c takes T / 16 past 16 chunks, up to 4 OPT_CHUNK). */
#define OPT_CHUNK 512

typedef void (*opt_pool_fn)(void *ctx, int64_t item, int worker);
/* Run fn(ctx, item, worker) for item in [0, nitems) on up to nthreads threads; returns the
 * number of threads used. worker < nthreads indexes per-thread workspaces. */
int smattn__pool_run(int nthreads, int64_t nitems, opt_pool_fn fn, void *ctx);

/* Per-thread scratch, sized by the plan; the row arrays hold hg units of Rp = R rounded
 * up to 4 rows each. */
typedef struct opt_ws {
    float *q;     /* [R][D] query rows of the item */
    float *qp;    /* the same, blocks of 8 rows packed [D / VLEN][8][VLEN] (QK micro-kernel) */
    float *kt;    /* [OPT_BK][Dp] the key tile as f32, when K is not usable in place */
    float *ktt;   /* [Dp][OPT_BK] the key tile transposed (job->qkt) */
    float *v;     /* [OPT_BK][Dvp] the value tile as f32, when V is not usable in place */
    float *s;     /* [R][OPT_BK] scores, then weights */
    unsigned char *vis; /* [R][OPT_BK] 1 = visible */
    float *acc;   /* [R][Dvp] running numerators */
    float *m, *l; /* [R] running max and denominators */
    int64_t *lo, *hi; /* [R] each row's key range */
    unsigned char *slow; /* [R] the row needs the exact-enough path */
    unsigned char *full; /* [R] every key of the current tile is visible to the row */
    float *mt, *sm;      /* [R] the current tile's new running max (-inf: no weights from
                          * this tile), its weights' sum */
    float *dm;           /* [R + 16] m_old - m_new, then the correction (zero padded) */
    const char **krows, **vrows; /* [hg][OPT_BK] a tile's K and V rows (opt_tile_rows) */
    const char **pfk, **pfv;     /* [OPT_BK] the K and V rows to prefetch (opt_tile_rows) */
    float *kq;    /* [hg][OPT_BK][Dp] a block-quantised K tile dequantised (the decode's
                   * keys-outer scores), NULL for other dtypes */
    float *qp8;   /* qp times 2^8 (e4m3 K of the decode's keys-outer scores), else NULL */
    float *pb;    /* [7][OPT_BK][16] a decode group's weights broadcast (AVX2's pv_group) */
} opt_ws;

/* The block formats q8_0 and q4_0 (SPEC 2.9): a row's elements are not at off * size, and
 * they are dequantised into binary32 once per tile (kernel_body.h's load_row) for the
 * binary32 micro-kernels, never read in place. */
static inline int opt_is_block(smattn_dtype t)
{
    return t == SMATTN_Q8_0 || t == SMATTN_Q4_0;
}

/* The byte offset of element offset off of a tensor of dtype t: off * size, or for a block
 * format its block's (off a multiple of SMATTN_QBLOCK: a row's start, SPEC 2.9). */
static inline size_t opt_byte_off(smattn_dtype t, int64_t off)
{
    return (size_t)(off / smattn_dtype_block(t)) * smattn_dtype_size(t);
}

/* rows[jj] = the address of the row of key kt + jj (jj < nk) of KV head g in sequence b of
 * K or V (t), found through the layout's locator (core/layout.h: dense, packed or paged):
 * where the decode's keys-outer loop (kernel_body.h) finds every K and V row it reads, a
 * tile's rows in one place. Keys that follow one another in memory (all of a dense tile, a
 * page's run) step by the key stride. Strides are >= 0 (validated). */
static inline void opt_tile_rows(const smattn_problem *p, const smattn_tensor *t, int64_t b,
                                 int64_t kt, int64_t nk, int64_t g, const char **rows)
{
    const size_t step = opt_byte_off(t->dtype, t->stride[1]);
    for (int64_t jj = 0; jj < nk;) {
        const int64_t run = smattn__key_run(p, kt + jj, nk - jj);
        const char *r0 = (const char *)t->data +
                         opt_byte_off(t->dtype, smattn__key_off(p, t->stride, b, kt + jj, g, 0));
        for (int64_t u = 0; u < run; u++)
            rows[jj + u] = r0 + (size_t)u * step;
        jj += run;
    }
}

struct opt_isa;

typedef struct opt_job {
    const struct opt_isa *isa;
    const smattn_problem *p;
    const smattn_inputs *in;
    const smattn_outputs *out;
    float scale_hi, scale_lo; /* scale = hi + lo, so scale*s rounds once (fma) */
    /* With descales (SPEC 2.9, NULL without): per (b, KV head g) at b * Hkv + g, the
     * score multiplier scale f_q f_k as hi, lo (NaN hi: out of binary32's safe range, the
     * rows take the binary64 path), and f_v, which divides the row's denominator for O
     * (opt_scale, smattn__opt_finish_row) */
    float *qk_scale;    /* [B * Hkv][2] */
    float *v_scale;     /* [B * Hkv] */
    int64_t G;          /* query heads per KV head */
    int64_t nq;         /* queries per work item */
    int64_t R;          /* rows per work item = G * nq */
    int64_t Dvp;        /* Dv rounded up to the vector length */
    int64_t qtiles;     /* ceil(S / nq) */
    int64_t nchunks;    /* split-K chunks (1: no split) */
    int64_t chunk;      /* keys per chunk (a multiple of OPT_BK, at least OPT_CHUNK) */
    int64_t hg;         /* units (KV heads) per work item: a divisor of Hkv */
    int64_t cg;         /* key chunks per work item (1, or a divisor of nchunks with hg = Hkv) */
    int qkt;            /* scores with the keys in the lanes (kernel_body.h, S >= 16) */
    int64_t items;
    opt_ws *ws;         /* [threads] */
    float *part;        /* split-K partials [units][R][Dvp + 2] */
    /* V's key tiles staged as f32 column panels once per call, shared by the work items
     * (kernel_body.h's unit_tile, AVX2 with many rows; NULL: each unit stages its own):
     * tile t of (b, KV head g) at vstage + ((b Hkv + g) vtiles + t) OPT_BK Dvp, its state
     * in vstate (0: not staged, 1: being staged, 2: ready) */
    float *vstage;
    _Atomic unsigned char *vstate;
    int64_t vtiles;
    unsigned char *slow_rows; /* [B*Hq*S] */
} opt_job;

/* The score multiplier of batch b, KV head g as hi + lo: the scale, or with descales
 * scale f_q f_k (SPEC 6.11 Q1, folded as exactly as the plain scale's split). */
static inline void opt_scale(const opt_job *job, int64_t b, int64_t g, float *hi, float *lo)
{
    if (job->qk_scale) {
        const float *c = job->qk_scale + 2 * (b * job->p->Hkv + g);
        *hi = c[0], *lo = c[1];
    } else {
        *hi = job->scale_hi, *lo = job->scale_lo;
    }
}

/* Work units: (b, query tile, key chunk, KV head), the KV head fastest; a work item is hg
 * consecutive units (the KV heads side by side), so that an item, and items running at
 * the same time, read neighbouring rows of K and V (the heads of one key are adjacent in
 * memory). hg changes only which rows share an item, never a row's arithmetic. */
static inline void opt_unit_coords(const opt_job *job, int64_t unit, int64_t *b, int64_t *g,
                                   int64_t *qt, int64_t *c)
{
    int64_t Hkv = job->p->Hkv;
    *g = unit % Hkv;
    unit /= Hkv;
    *c = unit % job->nchunks;
    unit /= job->nchunks;
    *qt = unit % job->qtiles;
    *b = unit / job->qtiles;
}

/* The item the pool's k-th hand-out runs (smattn__pool_run hands out k = 0, 1, ... to
 * whichever thread asks next). With one key chunk (a prefill) the items run last to first:
 * under a causal mask a query tile's keys grow with its index, and a hand-out in index order
 * ends on the largest items, one thread working alone on the last while the other waits;
 * largest first, the last items are the smallest. Which thread runs an item, and when,
 * changes no bit. */
static inline int64_t opt_item_order(const opt_job *job, int64_t k)
{
    return job->nchunks == 1 ? job->items - 1 - k : k;
}

static inline int64_t opt_unit_index(const opt_job *job, int64_t b, int64_t g, int64_t qt,
                                     int64_t c)
{
    return ((b * job->qtiles + qt) * job->nchunks + c) * job->p->Hkv + g;
}

/* Where the kernel's time goes, for `make bench-phases` only: built with -DSMATTN_PHASES,
 * each thread adds the wall time of each phase of its work items (clock_gettime, about
 * 20 ns per mark, a few marks per unit and tile); otherwise the marks are empty. */
enum { OPT_PH_SETUP, OPT_PH_SCORES, OPT_PH_SOFTMAX, OPT_PH_PV, OPT_PH_FINISH, OPT_PH_MERGE,
       OPT_NPH };
#ifdef SMATTN_PHASES
int64_t smattn__phase_now(void);
void smattn__phase_add(int phase, int64_t ns);
void smattn__phase_flush(void); /* this thread's sums into the totals */
/* The totals in seconds since the last take, then zeroed. */
void smattn__phases_take(double sec[OPT_NPH]);
#define OPT_PH_BEGIN(v) const int64_t v = smattn__phase_now()
#define OPT_PH_END(ph, v) smattn__phase_add(ph, smattn__phase_now() - (v))
#else
#define OPT_PH_BEGIN(v) ((void)0)
#define OPT_PH_END(ph, v) ((void)0)
#endif

/* One ISA's entry points (kernel_<isa>.c). */
typedef struct opt_isa {
    const char *name;
    void (*attention_item)(const opt_job *job, int64_t item, opt_ws *ws);
    void (*softmax_row)(const opt_job *job, int64_t b, int64_t h, int64_t i, opt_ws *ws);
    float (*expf)(float x); /* the kernel's exp, for the exhaustive accuracy check */
    float (*expf_le0)(float x); /* its x <= 0 variant (the softmax's): the same bits there */
    /* o[c] = acc[c] / l + 0 for c < n (correctly rounded, as the scalar division); returns
     * nonzero if some o[c] is not finite */
    int (*write_o)(float *o, const float *acc, float l, int64_t n);
    /* acc[k] = fma(x[k], w, acc[k]) for k < n: the split-K merge (in opt.c, built without
     * ISA flags, fmaf is a call into libm: 0.7 ms of a 32768-key decode step) */
    void (*axpy)(float *acc, const float *x, float w, int64_t n);
    /* src[c], c < n, as f16 / bf16 (dt) at element offset off + c of base: put()'s bits */
    void (*store_half)(void *base, smattn_dtype dt, int64_t off, const float *src, int64_t n);
} opt_isa;

extern const opt_isa smattn__isa_scalar;
extern const opt_isa smattn__isa_avx2;
extern const opt_isa smattn__isa_avx512;

/* The ISA in use (chosen once; SMATTN_ISA=scalar|avx2|avx512 forces one the CPU has). */
const opt_isa *smattn__opt_isa(void);
/* nonzero for "scalar", "avx2", "avx512" (known, whether or not the CPU has it) */
int smattn__isa_known(const char *name);
/* the ISA an SMATTN_ISA value selects; *state as smattn_opt_isa_env() (after first use) */
const opt_isa *smattn__isa_from_env(const char *e, int *state);

/* The exact-enough path for one row (opt/slow.c): binary64 arithmetic, every rule of
 * SPEC 3-4; used for rows whose float32 evaluation met a non-finite value. */
void smattn__opt_slow_row(const opt_job *job, int64_t b, int64_t h, int64_t i);
/* Rows the binary64 path has taken since the process started (all threads): tests read it
 * to see which path a problem takes, without timing anything. */
long long smattn__opt_slow_rows(void);

/* Helpers shared by the kernels and the slow path (opt.c, slow.c). */
void smattn__opt_write_empty(const opt_job *job, int64_t b, int64_t h, int64_t i);
/* Finish an attention row from its running max m, denominator l and numerators acc
 * (sinks, empty rows, O, LSE, P); slow != 0 sends it to the binary64 path. */
void smattn__opt_finish_row(const opt_job *job, int64_t b, int64_t h, int64_t i, float m, float l,
                            float *acc, int slow);
void smattn__opt_finish_softmax_row(const opt_job *job, int64_t b, int64_t h, int64_t i, float m,
                                    float l, const float *e, const unsigned char *vis);

#endif
