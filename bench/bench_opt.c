/* SPDX-License-Identifier: MIT */
/* bench_opt.c: speed of the optimised kernel on canonical Qwen2.5-7B attention
 * shapes (Hq = 28, Hkv = 4, D = Dv = 128, B = 1, causal lower_right), with f32 and f16
 * K/V, against the machine's FMA peak and STREAM bandwidth measured in the same run and
 * a plain scalar baseline timed interleaved with the kernel. Readable table on stdout,
 * JSON to --json PATH. `make bench` runs it; see the Makefile for THREADS, ISA and
 * BENCH_JSON.
 *
 * Conventions (also printed):
 * - flops count only unmasked work: 4 D per visible (query, key, query head), i.e. 2 D
 *   for q.k and 2 Dv for p v (D = Dv); exp, max and the division are not counted;
 * - bytes for the decode shapes (S = 1): K and V as stored (every element read once),
 *   plus Q and O in f32;
 * - every timed run starts with cold caches (the STREAM arrays are read in between), so
 *   a decode's K/V really come from memory, as they do in a model with many layers;
 * - times are medians of `runs` runs after one warm-up (9, fewer for a slow kernel; a
 *   warm-up over WARM_SELF seconds counts as a run); the baseline ratio is the median of
 *   the per-pair ratios (baseline run, kernel run, alternating which goes first);
 * - inputs on malloc's 4 KiB pages; a last section times the long decode with K and V on
 *   2 MiB pages too (and the triad on them), alternately with 4 KiB: what the page size
 *   costs a decode that streams its cache.
 *
 * The baseline: per (query, head), s_j = scale q.k_j, m = max, p_j = expf(s_j - m),
 * o = sum p_j v_j / sum p_j, in float32 with three plain loops (no intrinsics, built with
 * the library's flags), rows dealt cyclically to pthreads. It reads f32 K/V (for the f16
 * shapes: f32 copies of the same values). When a shape's work exceeds BASE_FLOP_BUDGET the
 * baseline runs every k-th query row only (all heads) and its time is scaled by the
 * ratio of unmasked flops (exact for the sample); the table says so.
 *
 * The peer (`--peer PLUGIN.so`; `make bench` passes oneDNN's adapter, plugins/onednn, when
 * Debian's libdnnl-dev is installed): another implementation on the same shapes and f32
 * values (f32 copies of f16 K/V: the adapter takes f32 only), on the same thread count,
 * timed in the same loop as the kernel (alternating which goes first); its ratio is the
 * median of the per-run ratios (peer time / kernel time).
 *
 * `bench_opt --rss-child S T KV_DTYPE` (used internally, in a fresh exec) runs one shape
 * alone and prints its VmHWM, so that the peak memory belongs to that shape only. */
#include <errno.h>
#include <math.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <unistd.h>

#include "bench/bench_machine.h"
#include "bench/bench_peer.h"
#include "smattn.h"
#ifdef SMATTN_PHASES
#include "opt/opt_internal.h"
#endif

#define HQ 28
#define HKV 4
#define HD 128
/* Baseline work per run above which it runs on a sample of query rows (flops). */
#define BASE_FLOP_BUDGET 4e8
/* Timed runs per shape after one warm-up: RUNS_MAX, or fewer so that a shape's runs take
 * about SHAPE_SECONDS (slow kernels: ISA=scalar); a warm-up run longer than WARM_SELF
 * seconds (start-up costs are then negligible) counts as the first timed run. */
#define RUNS_MAX 9
#define SHAPE_SECONDS 12.0
#define WARM_SELF 1.0
/* STREAM arrays: 3 x 2^25 doubles = 768 MiB, far above the 32 MiB L3 a core of this
 * machine reaches (sysconf reports the whole socket's). */
#define TRIAD_N ((size_t)1 << 25)
/* Relative difference between kernel and baseline O above which the row is flagged. */
#define SANE_REL 1e-3

typedef struct shape {
    const char *name; /* e.g. "prefill S=T=512" */
    int64_t S, T;
    int decode;
} shape;

static const shape shapes[] = {
    {"prefill S=T=512", 512, 512, 0},     {"prefill S=T=2048", 2048, 2048, 0},
    {"decode S=1 T=4096", 1, 4096, 1},    {"decode S=1 T=32768", 1, 32768, 1},
    {"chunk S=128 T=4096", 128, 4096, 0},
};
#define NSHAPES ((int)(sizeof shapes / sizeof shapes[0]))

/* ---- data ------------------------------------------------------------------------------ */

static uint64_t rng_state = 0x9E3779B97F4A7C15ull;
static double uniform(void)
{
    rng_state ^= rng_state << 13;
    rng_state ^= rng_state >> 7;
    rng_state ^= rng_state << 17;
    return (double)(rng_state >> 11) * 0x1p-53;
}

typedef struct bcase {
    smattn_problem p;
    smattn_inputs in;
    smattn_outputs out;
    smattn_dtype kv;
    float *q, *o;
    void *k, *v;    /* as the kernel reads them (f32 or f16) */
    float *kf, *vf; /* f32 values of the same (the baseline's; == k, v for f32) */
    float *ob;      /* the baseline's O */
    float *op;      /* the peer's O */
    size_t nq, nk;  /* elements of Q (= O) and of K (= V) */
} bcase;

static size_t kv_bytes(const bcase *c)
{
    return 2 * bench_kv_bytes(c->kv, c->nk);
}

/* Q, K in [-2, 2], V in [-1, 1]: with scale 1/sqrt(128) the scores spread over a few
 * units, as in trained models; f16 K/V hold the f16 rounding of such values. */
static int make_case(bcase *c, int64_t S, int64_t T, smattn_dtype kv, int baseline)
{
    memset(c, 0, sizeof *c);
    c->p = smattn_problem_default();
    smattn_problem *p = &c->p;
    p->op = SMATTN_OP_ATTENTION;
    p->B = 1, p->S = S, p->T = T, p->Hq = HQ, p->Hkv = HKV, p->D = HD, p->Dv = HD;
    p->scale = smattn_default_scale(HD);
    p->causal = SMATTN_CAUSAL_LOWER_RIGHT;
    c->kv = kv;
    c->nq = (size_t)(S * HQ * HD);
    c->nk = (size_t)(T * HKV * HD);
    c->q = malloc(c->nq * sizeof(float));
    c->o = malloc(c->nq * sizeof(float));
    c->k = bench_alloc(bench_kv_bytes(kv, c->nk)); /* malloc's unless bench_huge_pages */
    c->v = bench_alloc(bench_kv_bytes(kv, c->nk));
    if (!c->q || !c->o || !c->k || !c->v)
        return -1;
    for (size_t i = 0; i < c->nq; i++)
        c->q[i] = (float)(uniform() * 4 - 2);
    for (size_t i = 0; i < c->nq; i++) /* not 0: malloc + memset may become a lazy calloc */
        c->o[i] = -1.0f;
    if (kv == SMATTN_F32) {
        float *k = c->k, *v = c->v;
        for (size_t i = 0; i < c->nk; i++) {
            k[i] = (float)(uniform() * 4 - 2);
            v[i] = (float)(uniform() * 2 - 1);
        }
        c->kf = k, c->vf = v;
    } else {
        float *x = malloc(2 * c->nk * sizeof(float));
        if (!x)
            return -1;
        for (size_t i = 0; i < c->nk; i++) {
            x[i] = (float)(uniform() * 4 - 2);
            x[c->nk + i] = (float)(uniform() * 2 - 1);
        }
        bench_store_kv(c->k, kv, x, c->nk); /* rounded, or quantised by blocks */
        bench_store_kv(c->v, kv, x + c->nk, c->nk);
        free(x);
        if (baseline) {
            c->kf = malloc(c->nk * sizeof(float));
            c->vf = malloc(c->nk * sizeof(float));
            if (!c->kf || !c->vf)
                return -1;
            for (size_t i = 0; i < c->nk; i++) {
                c->kf[i] = (float)smattn_load(c->k, kv, (int64_t)i);
                c->vf[i] = (float)smattn_load(c->v, kv, (int64_t)i);
            }
        }
    }
    if (baseline && (!(c->ob = calloc(c->nq, sizeof(float))) || !(c->op = calloc(c->nq, sizeof(float)))))
        return -1;
    c->in.q = (smattn_tensor){c->q, SMATTN_F32, {0}};
    c->in.k = (smattn_tensor){c->k, kv, {0}};
    c->in.v = (smattn_tensor){c->v, kv, {0}};
    smattn_contiguous_strides(p, 'q', c->in.q.stride);
    smattn_contiguous_strides(p, 'k', c->in.k.stride);
    smattn_contiguous_strides(p, 'v', c->in.v.stride);
    c->out.o = (smattn_out_tensor){c->o, SMATTN_F32, {0}};
    smattn_contiguous_strides(p, 'o', c->out.o.stride);
    return 0;
}

static void free_case(bcase *c)
{
    if (c->kf != c->k)
        free(c->kf);
    if (c->vf != c->v)
        free(c->vf);
    free(c->q), free(c->o), free(c->k), free(c->v), free(c->ob), free(c->op);
    memset(c, 0, sizeof *c);
}

/* Keys query i sees under lower_right causality (B = 1, no padding). */
static int64_t visible_keys(const smattn_problem *p, int64_t i)
{
    int64_t n = i + p->T - p->S + 1;
    return n < 0 ? 0 : n > p->T ? p->T : n;
}

/* Unmasked flops of query rows first, first + step, ... (all heads). */
static double row_flops(const smattn_problem *p, int64_t first, int64_t step)
{
    double keys = 0;
    for (int64_t i = first; i < p->S; i += step)
        keys += (double)visible_keys(p, i);
    return keys * (double)p->Hq * (double)(2 * p->D + 2 * p->Dv);
}

/* ---- the scalar baseline ---------------------------------------------------------------- */

typedef struct base_job {
    const bcase *c;
    int64_t first, step; /* query rows first, first + step, ... */
    int threads;
} base_job;

typedef struct base_arg {
    const base_job *job;
    int tid;
    int ok;
} base_arg;

static void *base_thread(void *arg)
{
    base_arg *a = arg;
    const bcase *c = a->job->c;
    const smattn_problem *p = &c->p;
    const int64_t D = p->D, Dv = p->Dv, G = p->Hq / p->Hkv;
    const float scale = (float)p->scale;
    float *s = malloc((size_t)p->T * sizeof *s);
    if (!s)
        return NULL;
    int64_t unit = 0; /* (row, head) pairs dealt cyclically to the threads */
    for (int64_t i = a->job->first; i < p->S; i += a->job->step)
        for (int64_t h = 0; h < p->Hq; h++, unit++) {
            if (unit % a->job->threads != a->tid)
                continue;
            const float *q = c->q + (i * p->Hq + h) * D;
            const int64_t g = h / G, n = visible_keys(p, i);
            float m = -HUGE_VALF, l = 0;
            for (int64_t j = 0; j < n; j++) {
                const float *k = c->kf + (j * p->Hkv + g) * D;
                float dot = 0;
                for (int64_t d = 0; d < D; d++)
                    dot += q[d] * k[d];
                s[j] = dot * scale;
                m = s[j] > m ? s[j] : m;
            }
            for (int64_t j = 0; j < n; j++) {
                s[j] = expf(s[j] - m);
                l += s[j];
            }
            float *o = c->ob + (i * p->Hq + h) * Dv;
            for (int64_t d = 0; d < Dv; d++)
                o[d] = 0;
            for (int64_t j = 0; j < n; j++) {
                const float *v = c->vf + (j * p->Hkv + g) * Dv;
                for (int64_t d = 0; d < Dv; d++)
                    o[d] += s[j] * v[d];
            }
            for (int64_t d = 0; d < Dv; d++)
                o[d] /= l;
        }
    free(s);
    a->ok = 1;
    return NULL;
}

static int run_baseline(const base_job *job)
{
    pthread_t tid[64];
    base_arg arg[64];
    int started = 0, ok = 1;
    for (int t = 0; t < job->threads; t++) {
        arg[t] = (base_arg){job, t, 0};
        if (pthread_create(&tid[t], NULL, base_thread, &arg[t]) == 0)
            started++;
    }
    for (int t = 0; t < started; t++) {
        pthread_join(tid[t], NULL);
        ok &= arg[t].ok;
    }
    return started == job->threads && ok ? 0 : -1;
}

/* Largest |O_kernel - O_baseline| / max |O_baseline| over the baseline's rows. */
static double compare_rows(const bcase *c, const base_job *job)
{
    double diff = 0, mag = 0;
    for (int64_t i = job->first; i < c->p.S; i += job->step)
        for (size_t e = (size_t)(i * HQ * HD); e < (size_t)((i + 1) * HQ * HD); e++) {
            double d = fabs((double)c->o[e] - (double)c->ob[e]);
            diff = d > diff || isnan(d) ? d : diff;
            mag = fabs((double)c->ob[e]) > mag ? fabs((double)c->ob[e]) : mag;
        }
    return mag > 0 ? diff / mag : diff;
}

/* ---- timing ---------------------------------------------------------------------------- */

static double median(double *x, int n)
{
    bench_sort(x, (size_t)n);
    return n % 2 ? x[n / 2] : 0.5 * (x[n / 2 - 1] + x[n / 2]);
}

typedef struct result {
    const shape *sh;
    smattn_dtype kv;
    int runs;
    double t_med, t_min; /* kernel seconds */
    double flops, gflops, frac_peak;
    double bytes, gbs, frac_bw; /* decode only */
    int64_t base_step;          /* 1: the baseline ran every row */
    double base_frac;           /* sampled flops / all flops */
    double base_med;            /* baseline seconds, scaled to the whole shape */
    double ratio;               /* median of baseline / kernel per pair */
    double base_rel_diff;
    int peer_ok;                /* the peer ran this shape */
    double peer_med, peer_ratio, peer_rel_diff; /* seconds; median of peer / kernel; O */
} result;

static bench_peer peer; /* peer.attention NULL: no peer */

/* The peer on the same problem: f32 K/V values, O only, the NaN convention for empty rows
 * (the adapter's; these causal shapes have none). */
static int time_peer(bcase *c, double *t)
{
    smattn_problem p = c->p;
    p.empty_rows = SMATTN_EMPTY_NAN;
    smattn_inputs in = c->in;
    in.k = (smattn_tensor){c->kf, SMATTN_F32, {0}};
    in.v = (smattn_tensor){c->vf, SMATTN_F32, {0}};
    memcpy(in.k.stride, c->in.k.stride, sizeof in.k.stride);
    memcpy(in.v.stride, c->in.v.stride, sizeof in.v.stride);
    smattn_outputs out;
    memset(&out, 0, sizeof out);
    out.o = c->out.o;
    out.o.data = c->op;
    bench_flush_caches();
    double t0 = bench_now();
    int st = peer.attention(&p, &in, &out);
    *t = bench_now() - t0;
    return st;
}

/* Largest |O_kernel - O_peer| / max |O_kernel|. */
static double compare_peer(const bcase *c)
{
    double diff = 0, mag = 0;
    for (size_t e = 0; e < c->nq; e++) {
        double d = fabs((double)c->o[e] - (double)c->op[e]);
        diff = d > diff || isnan(d) ? d : diff;
        mag = fabs((double)c->o[e]) > mag ? fabs((double)c->o[e]) : mag;
    }
    return mag > 0 ? diff / mag : diff;
}

static smattn_status time_kernel(bcase *c, const smattn_opt_config *cfg, double *t)
{
    bench_flush_caches();
    double t0 = bench_now();
    smattn_status st = smattn_attention(&c->p, &c->in, &c->out, cfg);
    *t = bench_now() - t0;
    return st;
}

static int time_baseline(const base_job *job, double *t)
{
    bench_flush_caches();
    double t0 = bench_now();
    int rc = run_baseline(job);
    *t = bench_now() - t0;
    return rc;
}

/* ALiBi computed on the fly (SPEC 2.8): the decode S=1 T=32768 (f32 K/V) with
 * FlashAttention's symmetric ALiBi against the same decode without, run alternately with
 * the caches flushed; the median over runs of (time with / time without), the target
 * being <= 1.10. 0, or -1 if the kernel fails. */
/* The decode S=1 T=32768 with K and V on 2 MiB pages (bench_huge_pages) against the same
 * on malloc's 4 KiB pages, for each dtype of kvs, run alternately with the caches flushed;
 * the triad measured again on 2 MiB pages first (its arrays are then the flush's). Medians
 * into t4[k], th[k]; the triad into *triad_h; the kB of anonymous memory on huge pages with
 * both cases allocated into *huge_kb. 0, or -1 if the kernel or an allocation fails. */
static int bench_pages(const smattn_opt_config *cfg, const smattn_dtype *kvs, int nkv, double *t4,
                       double *th, double *triad_h, long *huge_kb)
{
    bench_huge_pages(1);
    *triad_h = bench_stream_triad(cfg->threads, TRIAD_N, 5);
    int rc = *triad_h <= 0;
    for (int k = 0; k < nkv && !rc; k++) {
        bcase c4, ch;
        bench_huge_pages(0);
        rc |= make_case(&c4, 1, 32768, kvs[k], 0);
        bench_huge_pages(1);
        rc |= make_case(&ch, 1, 32768, kvs[k], 0);
        *huge_kb = bench_anon_huge_kb();
        double a[RUNS_MAX], b[RUNS_MAX];
        for (int r = -1; r < RUNS_MAX && !rc; r++) { /* r = -1: the warm-up pair */
            double x, y;
            rc |= time_kernel(&c4, cfg, &x) != SMATTN_OK;
            rc |= time_kernel(&ch, cfg, &y) != SMATTN_OK;
            if (r >= 0)
                a[r] = x, b[r] = y;
        }
        if (!rc)
            t4[k] = median(a, RUNS_MAX), th[k] = median(b, RUNS_MAX);
        free_case(&c4), free_case(&ch);
    }
    bench_huge_pages(0);
    return rc ? -1 : 0;
}

static int bench_alibi(const smattn_opt_config *cfg, double *ratio, double *t_with,
                       double *t_without)
{
    bcase c;
    float slopes[HQ];
    for (int h = 0; h < HQ; h++)
        slopes[h] = (float)exp2(-8.0 * (h + 1) / HQ);
    if (make_case(&c, 1, 32768, SMATTN_F32, 0)) {
        free_case(&c);
        return -1;
    }
    double r[RUNS_MAX], tw[RUNS_MAX], to[RUNS_MAX], t;
    int n = 0, rc = 0;
    for (int k = -1; k < RUNS_MAX && !rc; k++) { /* k = -1: the warm-up pair */
        c.p.alibi_mode = SMATTN_ALIBI_NONE;
        c.p.alibi_slopes = NULL;
        rc |= time_kernel(&c, cfg, &to[n]) != SMATTN_OK;
        c.p.alibi_mode = SMATTN_ALIBI_SYMMETRIC;
        c.p.alibi_slopes = slopes;
        rc |= time_kernel(&c, cfg, &t) != SMATTN_OK;
        if (k >= 0 && !rc) {
            tw[n] = t;
            r[n] = t / to[n];
            n++;
        }
    }
    free_case(&c);
    if (rc)
        return -1;
    *ratio = median(r, n);
    *t_with = median(tw, n);
    *t_without = median(to, n);
    return 0;
}

static int bench_shape(const shape *sh, smattn_dtype kv, const smattn_opt_config *cfg, double peak,
                       double bw, result *r)
{
    bcase c;
    memset(r, 0, sizeof *r);
    r->sh = sh, r->kv = kv;
    if (make_case(&c, sh->S, sh->T, kv, 1)) {
        fprintf(stderr, "bench_opt: out of memory for %s\n", sh->name);
        free_case(&c);
        return -1;
    }
    r->flops = row_flops(&c.p, 0, 1);
    base_job job = {&c, 0, 1, cfg->threads};
    if (r->flops > BASE_FLOP_BUDGET && c.p.S > 1) {
        job.step = (int64_t)ceil(r->flops / BASE_FLOP_BUDGET);
        job.step = job.step > c.p.S ? c.p.S : job.step;
        job.first = job.step / 2; /* a spread sample: rows step/2, step/2 + step, ... */
    }
    r->base_step = job.step;
    r->base_frac = row_flops(&c.p, job.first, job.step) / r->flops;

    /* warm-up: the pool starts, pages are touched; its time sets the number of runs */
    double tk, tb;
    smattn_status st = time_kernel(&c, cfg, &tk);
    if (st != SMATTN_OK) {
        fprintf(stderr, "bench_opt: %s: smattn_attention: %s\n", sh->name, smattn_status_str(st));
        free_case(&c);
        return -1;
    }
    if (time_baseline(&job, &tb)) {
        fprintf(stderr, "bench_opt: %s: the baseline could not start its threads\n", sh->name);
        free_case(&c);
        return -1;
    }
    r->base_rel_diff = compare_rows(&c, &job);
    double tp = 0;
    if (peer.attention) {
        int ps = time_peer(&c, &tp);
        r->peer_ok = ps == 0;
        if (ps)
            fprintf(stderr, "bench_opt: %s: the peer returned status %d: no peer for it\n",
                    sh->name, ps);
        else
            r->peer_rel_diff = compare_peer(&c);
    }
    int runs = (int)(SHAPE_SECONDS / (tk + tb + tp));
    runs = runs > RUNS_MAX ? RUNS_MAX : runs < 1 ? 1 : runs;
    double tks[RUNS_MAX], tbs[RUNS_MAX], ratio[RUNS_MAX], tps[RUNS_MAX], pratio[RUNS_MAX];
    int k0 = 0;
    if (tk > WARM_SELF) { /* the warm-up pair is the first timed pair */
        tks[0] = tk, tbs[0] = tb / r->base_frac, tps[0] = tp;
        ratio[0] = tbs[0] / tks[0];
        pratio[0] = tp / tk;
        k0 = 1;
    }
    for (int k = k0; k < runs; k++) {
        int rc = 0;
        if (k % 2 == 0) { /* peer, baseline, kernel; then kernel, baseline, peer */
            rc |= r->peer_ok && time_peer(&c, &tps[k]);
            rc |= time_baseline(&job, &tbs[k]);
            rc |= time_kernel(&c, cfg, &tks[k]) != SMATTN_OK;
        } else {
            rc |= time_kernel(&c, cfg, &tks[k]) != SMATTN_OK;
            rc |= time_baseline(&job, &tbs[k]);
            rc |= r->peer_ok && time_peer(&c, &tps[k]);
        }
        pratio[k] = r->peer_ok ? tps[k] / tks[k] : 0;
        if (rc) {
            fprintf(stderr, "bench_opt: %s: a run failed\n", sh->name);
            free_case(&c);
            return -1;
        }
        tbs[k] /= r->base_frac;
        ratio[k] = tbs[k] / tks[k];
    }
    r->runs = runs;
    r->t_med = median(tks, runs);
    r->t_min = tks[0]; /* median() sorted tks */
    r->base_med = median(tbs, runs);
    r->ratio = median(ratio, runs);
    if (r->peer_ok) {
        r->peer_med = median(tps, runs);
        r->peer_ratio = median(pratio, runs);
    }
    r->gflops = r->flops / r->t_med * 1e-9;
    r->frac_peak = peak > 0 ? r->gflops / peak : 0;
    if (sh->decode) {
        r->bytes = (double)kv_bytes(&c) + 2.0 * (double)c.nq * sizeof(float);
        r->gbs = r->bytes / r->t_med * 1e-9;
        r->frac_bw = bw > 0 ? r->gbs / bw : 0;
    }
    free_case(&c);
    return 0;
}

/* ---- peak memory, in a fresh process ---------------------------------------------------- */

/* A field of /proc/self/status in kB ("VmHWM", "VmRSS"); -1 if absent. */
static long status_kb(const char *field)
{
    FILE *f = fopen("/proc/self/status", "r");
    if (!f)
        return -1;
    char line[256];
    long kb = -1;
    size_t n = strlen(field);
    while (fgets(line, sizeof line, f))
        if (!strncmp(line, field, n) && line[n] == ':') {
            kb = strtol(line + n + 1, NULL, 10);
            break;
        }
    fclose(f);
    return kb;
}

/* The child: build one shape, run it twice, print "io_bytes start_kb before_kb hwm_kb"
 * (VmRSS at start and just before the calls, VmHWM after them). */
static int rss_child(int64_t S, int64_t T, smattn_dtype kv, const smattn_opt_config *cfg)
{
    long start = status_kb("VmRSS");
    bcase c;
    if (make_case(&c, S, T, kv, 0))
        return 3;
    long before = status_kb("VmRSS");
    for (int k = 0; k < 2; k++)
        if (smattn_attention(&c.p, &c.in, &c.out, cfg) != SMATTN_OK)
            return 3;
    long hwm = status_kb("VmHWM");
    printf("%zu %ld %ld %ld\n", c.nq * 2 * sizeof(float) + kv_bytes(&c), start, before, hwm);
    free_case(&c);
    return 0;
}

typedef struct rss_result {
    smattn_dtype kv;
    double io_mib, start_mib, before_mib, hwm_mib, extra_mib;
    int ok;
} rss_result;

static void rss_measure(int64_t S, int64_t T, smattn_dtype kv, const smattn_opt_config *cfg,
                        rss_result *r)
{
    memset(r, 0, sizeof *r);
    r->kv = kv;
    char self[4096], s_arg[32], t_arg[32], th_arg[16];
    ssize_t n = readlink("/proc/self/exe", self, sizeof self - 1);
    int fd[2];
    if (n <= 0 || pipe(fd))
        return;
    self[n] = '\0';
    snprintf(s_arg, sizeof s_arg, "%lld", (long long)S);
    snprintf(t_arg, sizeof t_arg, "%lld", (long long)T);
    snprintf(th_arg, sizeof th_arg, "%d", cfg->threads);
    const char *argv[] = {self,
                          "--rss-child",
                          s_arg,
                          t_arg,
                          smattn_dtype_name(kv),
                          "--threads",
                          th_arg,
                          cfg->isa ? "--isa" : NULL,
                          cfg->isa,
                          NULL};
    fflush(stdout);
    pid_t pid = fork();
    if (pid < 0)
        return;
    if (pid == 0) {
        close(fd[0]);
        if (dup2(fd[1], 1) < 0)
            _exit(127);
        execv(self, (char *const *)(uintptr_t)argv);
        _exit(127);
    }
    close(fd[1]);
    FILE *f = fdopen(fd[0], "r");
    unsigned long long io = 0;
    long start = 0, before = 0, hwm = 0;
    int got = f ? fscanf(f, "%llu %ld %ld %ld", &io, &start, &before, &hwm) : 0;
    if (f)
        fclose(f);
    int ws;
    if (waitpid(pid, &ws, 0) != pid || !WIFEXITED(ws) || WEXITSTATUS(ws) != 0 || got != 4)
        return;
    r->io_mib = (double)io / 1048576.0;
    r->start_mib = (double)start / 1024.0;
    r->before_mib = (double)before / 1024.0;
    r->hwm_mib = (double)hwm / 1024.0;
    r->extra_mib = (double)(hwm - before) / 1024.0;
    r->ok = 1;
}

/* ---- output ---------------------------------------------------------------------------- */

static void cpu_model(char *out, size_t len)
{
    snprintf(out, len, "unknown");
    FILE *f = fopen("/proc/cpuinfo", "r");
    if (!f)
        return;
    char line[512];
    while (fgets(line, sizeof line, f))
        if (!strncmp(line, "model name", 10)) {
            char *v = strchr(line, ':');
            if (v) {
                v += 1 + (v[1] == ' ');
                v[strcspn(v, "\n")] = '\0';
                snprintf(out, len, "%s", v);
            }
            break;
        }
    fclose(f);
}

static void json_str(FILE *f, const char *s)
{
    fputc('"', f);
    for (; *s; s++)
        if (*s == '"' || *s == '\\')
            fprintf(f, "\\%c", *s);
        else if ((unsigned char)*s >= 0x20)
            fputc(*s, f);
    fputc('"', f);
}

typedef struct machine {
    char cpu[256];
    int threads;
    const char *isa;
    double peak_avx2, peak_avx512, peak, triad;
} machine;

static int write_json(const char *path, const machine *m, const result *res, int nres,
                      const rss_result *rss, int nrss)
{
    FILE *f = fopen(path, "w");
    if (!f)
        return -1;
    fprintf(f, "{\n  \"benchmark\": \"smattn_attention\",\n  \"cpu\": ");
    json_str(f, m->cpu);
    fprintf(f, ",\n  \"threads\": %d,\n  \"isa\": \"%s\",\n", m->threads, m->isa);
    fprintf(f, "  \"flop_count\": \"4*D per visible (query, key, query head): 2*D for q.k, "
               "2*Dv for p.v; masked work not counted\",\n");
    fprintf(f, "  \"bytes_count\": \"decode: K and V as stored, read once, plus Q and O in "
               "f32\",\n");
    fprintf(f, "  \"caches\": \"cold: flushed before every timed run\",\n");
    fprintf(f,
            "  \"machine\": {\"fma_peak_gflops\": {\"avx2\": %.1f, \"avx512\": %.1f, "
            "\"best\": %.1f}, \"stream_triad_gbs\": %.2f, \"triad_array_bytes\": %zu, "
            "\"measured_threads\": %d},\n",
            m->peak_avx2, m->peak_avx512, m->peak, m->triad, TRIAD_N * sizeof(double), m->threads);
    fprintf(f, "  \"results\": [\n");
    for (int k = 0; k < nres; k++) {
        const result *r = &res[k];
        fprintf(f,
                "    {\"shape\": \"%s\", \"B\": 1, \"S\": %lld, \"T\": %lld, \"Hq\": %d, "
                "\"Hkv\": %d, \"D\": %d, \"Dv\": %d, \"causal\": \"lower_right\", "
                "\"q_dtype\": \"f32\", \"kv_dtype\": \"%s\", \"o_dtype\": \"f32\",\n"
                "     \"runs\": %d, \"median_s\": %.6g, \"min_s\": %.6g, \"unmasked_flops\": "
                "%.6g, \"gflops\": %.2f, \"fraction_of_fma_peak\": %.4f,\n",
                r->sh->name, (long long)r->sh->S, (long long)r->sh->T, HQ, HKV, HD, HD,
                smattn_dtype_name(r->kv), r->runs, r->t_med, r->t_min, r->flops, r->gflops,
                r->frac_peak);
        if (r->sh->decode)
            fprintf(f, "     \"bytes\": %.6g, \"gbs\": %.2f, \"fraction_of_bandwidth\": %.4f,\n",
                    r->bytes, r->gbs, r->frac_bw);
        else
            fprintf(f, "     \"bytes\": null, \"gbs\": null, \"fraction_of_bandwidth\": null,\n");
        fprintf(f,
                "     \"baseline\": {\"row_step\": %lld, \"sampled_flop_fraction\": %.6f, "
                "\"median_s_scaled\": %.6g, \"speedup_median\": %.2f, "
                "\"max_rel_diff_o\": %.3g},\n",
                (long long)r->base_step, r->base_frac, r->base_med, r->ratio, r->base_rel_diff);
        if (r->peer_ok) {
            fprintf(f, "     \"peer\": {\"name\": ");
            json_str(f, peer.info->version ? peer.info->version : peer.info->name);
            fprintf(f,
                    ", \"kv_dtype\": \"f32\", \"median_s\": %.6g, \"speedup_median\": %.2f, "
                    "\"max_rel_diff_o\": %.3g}}%s\n",
                    r->peer_med, r->peer_ratio, r->peer_rel_diff, k + 1 < nres ? "," : "");
        } else {
            fprintf(f, "     \"peer\": null}%s\n", k + 1 < nres ? "," : "");
        }
    }
    fprintf(f, "  ],\n  \"peak_memory\": [\n");
    for (int k = 0; k < nrss; k++) {
        const rss_result *r = &rss[k];
        fprintf(f,
                "    {\"shape\": \"prefill S=T=2048\", \"kv_dtype\": \"%s\", \"ok\": %s, "
                "\"vmhwm_mib\": %.2f, \"rss_at_start_mib\": %.2f, \"rss_before_call_mib\": %.2f, "
                "\"inputs_outputs_mib\": %.2f, \"extra_mib\": %.2f}%s\n",
                smattn_dtype_name(r->kv), r->ok ? "true" : "false", r->hwm_mib, r->start_mib,
                r->before_mib, r->io_mib, r->extra_mib, k + 1 < nrss ? "," : "");
    }
    fprintf(f, "  ]\n}\n");
    return fclose(f) ? -1 : 0;
}

/* ---- where the time goes (`make bench-phases`) -------------------------------------------- */

#ifdef SMATTN_PHASES
#define PHASE_RUNS 5
/* Each shape: one warm-up, then PHASE_RUNS runs with the caches flushed; the library (built
 * with -DSMATTN_PHASES) sums each phase's wall time over its threads. */
static int report_phases(const smattn_opt_config *cfg)
{
    const char *isa = cfg->isa ? cfg->isa : smattn_opt_isa();
    const char *fma = !strcmp(isa, "avx512") ? "avx512" : "avx2";
    double peak1 = bench_fma_available(fma) ? bench_fma_peak(fma, 1, 5, 0.15) : 0;
    if (bench_stream_triad(cfg->threads, TRIAD_N, 1) <= 0) /* the arrays the flush reads */
        return 3;
    printf("smattn bench-phases: kernel ISA %s, %d threads; FMA peak of one core (%s loop) "
           "%.1f GFLOP/s\n\n",
           isa, cfg->threads, fma, peak1);
    printf("%-20s %-4s %8s | %7s %7s %7s %7s %7s %7s %7s | %14s %14s\n", "shape", "K/V", "wall ms",
           "setup", "scores", "softmax", "p.v", "finish", "merge", "idle", "scores GF/s", "p.v GF/s");
    for (int sh = 0; sh < NSHAPES; sh++)
        for (int d = 0; d < 2; d++) {
            bcase c;
            if (make_case(&c, shapes[sh].S, shapes[sh].T, d ? SMATTN_F16 : SMATTN_F32, 0)) {
                free_case(&c);
                return 3;
            }
            double t, wall[PHASE_RUNS], sum[OPT_NPH] = {0}, one[OPT_NPH], wsum = 0;
            if (time_kernel(&c, cfg, &t) != SMATTN_OK) {
                free_case(&c);
                return 3;
            }
            smattn__phases_take(one); /* the warm-up's, discarded */
            for (int r = 0; r < PHASE_RUNS; r++) {
                if (time_kernel(&c, cfg, &wall[r]) != SMATTN_OK) {
                    free_case(&c);
                    return 3;
                }
                smattn__phases_take(one);
                for (int k = 0; k < OPT_NPH; k++)
                    sum[k] += one[k] / PHASE_RUNS;
                wsum += wall[r] / PHASE_RUNS;
            }
            double busy = 0, flops = row_flops(&c.p, 0, 1) / 2; /* each of q.k and p.v */
            for (int k = 0; k < OPT_NPH; k++)
                busy += sum[k];
            int nt = cfg->threads;
            printf("%-20s %-4s %8.3f |", shapes[sh].name, smattn_dtype_name(c.kv),
                   1e3 * median(wall, PHASE_RUNS));
            for (int k = 0; k < OPT_NPH; k++)
                printf(" %7.3f", 1e3 * sum[k]);
            printf(" %7.3f |", 1e3 * (nt * wsum - busy));
            for (int k = OPT_PH_SCORES; k <= OPT_PH_PV; k += OPT_PH_PV - OPT_PH_SCORES) {
                double g = flops / sum[k] * 1e-9;
                printf(" %6.1f (%3.0f%%)", g, peak1 > 0 ? 100 * g / peak1 : 0.0);
            }
            printf("\n");
            fflush(stdout);
            free_case(&c);
        }
    printf("\nms: mean per call of each phase's wall time summed over the threads (setup: rows "
           "loaded; scores: q.k,\nwith the key tile's transposition or conversion; softmax: "
           "scaling, masking, the online max, exp\nand rescaling; p.v; finish: O and LSE written "
           "or split-K partials; merge: the split-K merge);\nidle: threads x mean wall - "
           "their sum (waiting, waking, imbalance, the marks' own cost);\nGF/s: the visible "
           "work of q.k or p.v (2D per visible query, key and query head) over that phase's\n"
           "thread-seconds, against one core's FMA peak. Caches flushed before each of %d runs "
           "after a warm-up.\n",
           PHASE_RUNS);
    bench_machine_free();
    return 0;
}
#endif

/* ---- main ------------------------------------------------------------------------------ */

static int usage(void)
{
    fprintf(stderr, "usage: bench_opt [--threads N] [--isa scalar|avx2|avx512] [--json PATH] "
                    "[--peer PLUGIN.so] [--shape \"decode S=1 T=32768\"]\n");
    return 2;
}

int main(int argc, char **argv)
{
    smattn_opt_config cfg = {2, NULL};
    const char *json = "build/bench_opt.json", *peer_path = NULL, *only_shape = NULL;
    int child = 0;
    int64_t cS = 0, cT = 0;
    smattn_dtype ckv = SMATTN_F32;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--threads") && i + 1 < argc)
            cfg.threads = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--isa") && i + 1 < argc)
            cfg.isa = argv[++i][0] ? argv[i] : NULL;
        else if (!strcmp(argv[i], "--json") && i + 1 < argc)
            json = argv[++i];
        else if (!strcmp(argv[i], "--peer") && i + 1 < argc)
            peer_path = argv[++i];
        else if (!strcmp(argv[i], "--shape") && i + 1 < argc)
            only_shape = argv[++i];
        else if (!strcmp(argv[i], "--rss-child") && i + 3 < argc) {
            child = 1;
            cS = atoll(argv[i + 1]);
            cT = atoll(argv[i + 2]);
            ckv = !strcmp(argv[i + 3], "f16") ? SMATTN_F16 : SMATTN_F32;
            i += 3;
        } else
            return usage();
    }
    if (cfg.threads < 1 || cfg.threads > 64) {
        fprintf(stderr, "bench_opt: --threads must be in [1, 64]\n");
        return 2;
    }
    if (cfg.isa && !smattn_opt_isa_available(cfg.isa)) {
        fprintf(stderr,
                "bench_opt: ISA '%s' is unknown or not available on this CPU "
                "(scalar, avx2, avx512)\n",
                cfg.isa);
        return 2;
    }
    if (child)
        return rss_child(cS, cT, ckv, &cfg);
#ifdef SMATTN_PHASES
    return report_phases(&cfg);
#endif

    double t_start = bench_now();
    char perr[1200];
    if (peer_path && bench_peer_open(&peer, peer_path, cfg.threads, perr, sizeof perr)) {
        fprintf(stderr, "bench_opt: %s\n", perr);
        return 2;
    }
    machine m;
    memset(&m, 0, sizeof m);
    cpu_model(m.cpu, sizeof m.cpu);
    m.threads = cfg.threads;
    m.isa = cfg.isa ? cfg.isa : smattn_opt_isa();
    printf("smattn %d.%d.%d bench: smattn_attention, Qwen2.5-7B heads (Hq=%d Hkv=%d D=Dv=%d), "
           "B=1, causal lower_right\n",
           SMATTN_VERSION_MAJOR, SMATTN_VERSION_MINOR, SMATTN_VERSION_PATCH, HQ, HKV, HD);
    printf("cpu: %s; threads: %d; kernel ISA: %s (available:%s%s%s)\n", m.cpu, m.threads, m.isa,
           smattn_opt_isa_available("avx512") ? " avx512" : "",
           smattn_opt_isa_available("avx2") ? " avx2" : "", " scalar");
    if (peer.attention)
        printf("peer: %s (%s), %d OpenMP threads, on the same shapes with f32 K/V\n",
               peer.info->name, peer.info->version ? peer.info->version : "", cfg.threads);
    fflush(stdout);

    m.peak_avx2 = bench_fma_peak("avx2", cfg.threads, 5, 0.15);
    m.peak_avx512 = bench_fma_peak("avx512", cfg.threads, 5, 0.15);
    m.peak = m.peak_avx512 > m.peak_avx2 ? m.peak_avx512 : m.peak_avx2;
    m.triad = bench_stream_triad(cfg.threads, TRIAD_N, 5);
    if (m.triad <= 0) {
        fprintf(stderr, "bench_opt: cannot allocate the STREAM arrays\n");
        return 3;
    }
    printf("machine, measured now on %d threads: FMA peak (f32) avx2 %.1f GFLOP/s", cfg.threads,
           m.peak_avx2);
    if (m.peak_avx512 > 0)
        printf(", avx512 %.1f GFLOP/s", m.peak_avx512);
    printf(" (best of 5); STREAM triad %.1f GB/s (3 x %zu MiB arrays, best of 5)\n\n", m.triad,
           TRIAD_N * sizeof(double) >> 20);
    fflush(stdout);

    result res[2 * NSHAPES + 2];
    int nres = 0, r16 = -1, r8 = -1, rq8 = -1;
    printf("%-20s %-4s %4s %10s %8s %6s %7s %6s %9s %10s %8s  %s\n", "shape", "K/V", "runs",
           "median ms", "GFLOP/s", "%peak", "GB/s", "%bw", "x scalar", "peer ms", "x peer",
           "baseline");
    for (int s = 0; s < NSHAPES; s++) {
        /* the long decode also with fp8 e4m3 and q8_0 K/V (SPEC 2.9), half f16's bytes
         * (q8_0: 34 bytes per 32 elements), measured in this run beside the f16 one */
        const int fp8 = shapes[s].decode && shapes[s].T == 32768 ? 2 : 0;
        if (only_shape && strcmp(only_shape, shapes[s].name) != 0)
            continue;
        for (int d = 0; d < 2 + fp8; d++) {
            result *r = &res[nres];
            const smattn_dtype kv = d == 3   ? SMATTN_Q8_0
                                    : d == 2 ? SMATTN_F8E4M3
                                    : d      ? SMATTN_F16
                                             : SMATTN_F32;
            if (bench_shape(&shapes[s], kv, &cfg, m.peak, m.triad, r))
                return 3;
            if (fp8 && d)
                *(d == 1 ? &r16 : d == 2 ? &r8 : &rq8) = nres;
            nres++;
            char gb[16] = "-", fb[16] = "-", base[64], pms[24] = "-", px[24] = "-";
            if (r->peer_ok) {
                snprintf(pms, sizeof pms, "%.3f", 1e3 * r->peer_med);
                snprintf(px, sizeof px, "%.1fx", r->peer_ratio);
            }
            if (r->sh->decode) {
                snprintf(gb, sizeof gb, "%.1f", r->gbs);
                snprintf(fb, sizeof fb, "%.1f%%", 100 * r->frac_bw);
            }
            if (r->base_step == 1)
                snprintf(base, sizeof base, "all rows");
            else
                snprintf(base, sizeof base, "1 row in %lld (%.1f%% of flops)",
                         (long long)r->base_step, 100 * r->base_frac);
            printf("%-20s %-4s %4d %10.3f %8.1f %5.1f%% %7s %6s %8.1fx %10s %8s  %s%s%s\n",
                   r->sh->name, smattn_dtype_name(r->kv), r->runs, 1e3 * r->t_med, r->gflops,
                   100 * r->frac_peak, gb, fb, r->ratio, pms, px, base,
                   r->base_rel_diff > SANE_REL ? "  O DIFFERS FROM THE BASELINE" : "",
                   r->peer_ok && !(r->peer_rel_diff <= SANE_REL) ? "  O DIFFERS FROM THE PEER" : "");
            fflush(stdout);
        }
    }
    if (r16 >= 0 && r8 >= 0)
        printf("\nfp8 e4m3 K/V against f16 K/V, %s, this run: %.2fx faster (median %.3f ms "
               "against %.3f ms; %.1f against %.1f GB/s)\n",
               res[r8].sh->name, res[r16].t_med / res[r8].t_med, 1e3 * res[r8].t_med,
               1e3 * res[r16].t_med, res[r8].gbs, res[r16].gbs);
    if (r16 >= 0 && rq8 >= 0)
        printf("q8_0 K/V against f16 K/V, %s, this run: %.2fx faster (median %.3f ms "
               "against %.3f ms; %.1f against %.1f GB/s)\n",
               res[rq8].sh->name, res[r16].t_med / res[rq8].t_med, 1e3 * res[rq8].t_med,
               1e3 * res[r16].t_med, res[rq8].gbs, res[r16].gbs);
    double al_ratio, al_with, al_without;
    if (bench_alibi(&cfg, &al_ratio, &al_with, &al_without))
        printf("\nALiBi: the kernel failed on the decode\n");
    else
        printf("\nALiBi (symmetric, slopes 2^(-8(h+1)/Hq), computed on the fly), decode S=1 "
               "T=32768 f32 K/V, %d runs alternately:\n  with %.3f ms, without %.3f ms (medians); "
               "median of (with / without) %.3fx (target <= 1.10x)\n",
               RUNS_MAX, 1e3 * al_with, 1e3 * al_without, al_ratio);
    fflush(stdout);
    if (!only_shape) {
        static const smattn_dtype kvs[3] = {SMATTN_F32, SMATTN_F16, SMATTN_F8E4M3};
        double t4[3], th[3], triad_h;
        long huge_kb = -1;
        if (bench_pages(&cfg, kvs, 3, t4, th, &triad_h, &huge_kb))
            printf("\n2 MiB pages: the kernel or an allocation failed\n");
        else {
            printf("\nK and V on 2 MiB pages (madvise MADV_HUGEPAGE; %ld kB of anonymous memory "
                   "on huge pages with both copies allocated), decode S=1 T=32768, %d runs "
                   "alternately with the same on 4 KiB pages; STREAM triad on 2 MiB pages %.1f "
                   "GB/s (on 4 KiB pages above: %.1f):\n",
                   huge_kb, RUNS_MAX, triad_h, m.triad);
            for (int k = 0; k < 3; k++) {
                const double by = 2.0 * (double)bench_kv_bytes(kvs[k], (size_t)32768 * HKV * HD) +
                                  2.0 * HQ * HD * sizeof(float);
                printf("  %-6s 4 KiB %.3f ms (%.1f GB/s, %.1f%% of its triad), 2 MiB %.3f ms "
                       "(%.1f GB/s, %.1f%% of its triad): %.2fx\n",
                       smattn_dtype_name(kvs[k]), 1e3 * t4[k], by / t4[k] * 1e-9,
                       100 * by / t4[k] * 1e-9 / m.triad, 1e3 * th[k], by / th[k] * 1e-9,
                       100 * by / th[k] * 1e-9 / triad_h, t4[k] / th[k]);
            }
            printf("  f16 against f32: %.2fx on 4 KiB pages, %.2fx on 2 MiB; e4m3 against f16: "
                   "%.2fx, %.2fx\n",
                   t4[0] / t4[1], th[0] / th[1], t4[1] / t4[2], th[1] / th[2]);
        }
        fflush(stdout);
    }
    bench_machine_free();

    rss_result rss[2];
    printf("\npeak memory, prefill S=T=2048 alone in a fresh process (VmHWM; extra = VmHWM - "
           "VmRSS just before the calls):\n");
    for (int d = 0; d < 2; d++) {
        rss_measure(2048, 2048, d ? SMATTN_F16 : SMATTN_F32, &cfg, &rss[d]);
        if (rss[d].ok)
            printf("  K/V %s: VmHWM %.1f MiB; VmRSS at start %.1f, before the calls %.1f (inputs "
                   "and outputs: %.1f); extra %.1f MiB\n",
                   smattn_dtype_name(rss[d].kv), rss[d].hwm_mib, rss[d].start_mib,
                   rss[d].before_mib, rss[d].io_mib, rss[d].extra_mib);
        else
            printf("  K/V %s: the child process failed\n", smattn_dtype_name(rss[d].kv));
    }

    printf("\nflops: 4*D per visible (query, key, query head) (2D for q.k, 2Dv for p.v), masked "
           "work not counted; %%peak: of the best FMA peak above.\n"
           "GB/s (decode only): K and V as stored + Q and O (f32), over the median time; %%bw: "
           "of the STREAM triad above.\n"
           "caches flushed before every timed run; median of the runs after one warm-up (a "
           "warm-up over %.0f s counts as a run).\n"
           "x scalar: median over runs of (baseline time / kernel time), run alternately; the "
           "baseline is three plain float32\n"
           "loops per row (q.k, softmax, p.v; f32 copies of f16 K/V) on %d pthreads; when "
           "sampled, its time is scaled by the\nflop fraction.\n"
           "x peer: median over runs of (peer time / kernel time), run alternately, the peer "
           "on f32 K/V (copies of f16 ones)\nand the same thread count; '-': no peer (make "
           "bench installs Debian's libdnnl-dev for oneDNN's, plugins/onednn).\n",
           WARM_SELF, cfg.threads);
    if (write_json(json, &m, res, nres, rss, 2))
        fprintf(stderr, "bench_opt: cannot write %s: %s\n", json, strerror(errno));
    else
        printf("JSON: %s; total %.0f s\n", json, bench_now() - t_start);
    bench_peer_close(&peer);
    return 0;
}
