/* SPDX-License-Identifier: MIT */
/* bench_layout.c: what a ragged or paged layout (SPEC 2.7) costs the kernel, timed in one
 * run, each pair interleaved (layout, then dense), medians of the per-pair ratios:
 *   - paged decode: S = 1, T = 32768, pages of 16 keys in a random order, against the same
 *     decode dense (28 query heads on 4 KV heads, D = 128, f32 K/V as in `make bench`);
 *   - packed prefill: sequences of 1024, 512, 384 and 128 tokens (causal) in one call,
 *     against four dense calls, one per sequence.
 * Also says whether the outputs are the same bits (they must be: the dense twin's rows
 * have the same arithmetic). The K/V of the decode (128 MiB) do not fit any cache, and the
 * prefill is compute-bound: no cache flush between runs.
 * Usage: bench_layout [--threads N] [--isa NAME] [--runs N] */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "bench/bench_machine.h"
#include "smattn.h"

#define HQ 28
#define HKV 4
#define HD 128

static uint64_t rng_state = 0x243F6A8885A308D3ull;
static double uniform(void)
{
    rng_state ^= rng_state << 13;
    rng_state ^= rng_state >> 7;
    rng_state ^= rng_state << 17;
    return (double)(rng_state >> 11) * 0x1p-53;
}

static float *randf(size_t n, double lo, double hi)
{
    float *x = malloc(n * sizeof *x);
    for (size_t i = 0; x && i < n; i++)
        x[i] = (float)(lo + (hi - lo) * uniform());
    return x;
}

static double median(double *x, int n)
{
    bench_sort(x, (size_t)n);
    return n % 2 ? x[n / 2] : 0.5 * (x[n / 2 - 1] + x[n / 2]);
}

static smattn_problem base_problem(int64_t B, int64_t S, int64_t T)
{
    smattn_problem p = smattn_problem_default();
    p.B = B, p.S = S, p.T = T, p.Hq = HQ, p.Hkv = HKV, p.D = p.Dv = HD;
    p.scale = smattn_default_scale(HD);
    p.causal = SMATTN_CAUSAL_LOWER_RIGHT;
    return p;
}

static void dense_io(const smattn_problem *p, smattn_inputs *in, smattn_outputs *out,
                     const float *q, const float *k, const float *v, float *o)
{
    memset(in, 0, sizeof *in);
    memset(out, 0, sizeof *out);
    in->q = (smattn_tensor){q, SMATTN_F32, {0}};
    in->k = (smattn_tensor){k, SMATTN_F32, {0}};
    in->v = (smattn_tensor){v, SMATTN_F32, {0}};
    out->o = (smattn_out_tensor){o, SMATTN_F32, {0}};
    smattn_contiguous_strides(p, 'q', in->q.stride);
    smattn_contiguous_strides(p, 'k', in->k.stride);
    smattn_contiguous_strides(p, 'v', in->v.stride);
    smattn_contiguous_strides(p, 'o', out->o.stride);
}

/* CPU seconds of the process (every thread): on a shared, loaded machine the wall time
 * mostly measures the neighbours; the CPU time of the same work moves far less. */
static double cpu_now(void)
{
    struct timespec t;
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

static double last_cpu; /* the CPU time of the last timed() call */

static double timed(const smattn_problem *p, const smattn_inputs *in, const smattn_outputs *out,
                    const smattn_opt_config *cfg, int *bad)
{
    double c0 = cpu_now(), t0 = bench_now();
    if (smattn_attention(p, in, out, cfg) != SMATTN_OK)
        *bad = 1;
    double t = bench_now() - t0;
    last_cpu = cpu_now() - c0;
    return t;
}

/* Paged decode against dense decode. */
static int bench_decode(const smattn_opt_config *cfg, int runs)
{
    const int64_t T = 32768, ps = 16, np = T / ps, row = HKV * HD;
    smattn_problem pd = base_problem(1, 1, T);
    float *q = randf(HQ * HD, -2, 2), *k = randf((size_t)(T * row), -2, 2);
    float *v = randf((size_t)(T * row), -1, 1);
    float *kc = malloc((size_t)(T * row) * sizeof(float)), *vc = malloc((size_t)(T * row) * sizeof(float));
    float *od = malloc(HQ * HD * sizeof(float)), *ol = malloc(HQ * HD * sizeof(float));
    int32_t *bt = malloc((size_t)np * sizeof *bt);
    if (!q || !k || !v || !kc || !vc || !od || !ol || !bt)
        return 1;
    for (int64_t j = 0; j < np; j++)
        bt[j] = (int32_t)j;
    for (int64_t j = np - 1; j > 0; j--) { /* pages in a random order */
        int64_t r = (int64_t)(uniform() * (double)(j + 1));
        int32_t t = bt[j];
        bt[j] = bt[r], bt[r] = t;
    }
    for (int64_t t = 0; t < T; t++) {
        size_t to = (size_t)((bt[t / ps] * ps + t % ps) * row);
        memcpy(kc + to, k + t * row, (size_t)row * sizeof(float));
        memcpy(vc + to, v + t * row, (size_t)row * sizeof(float));
    }
    smattn_inputs in, inl;
    smattn_outputs out, outl;
    dense_io(&pd, &in, &out, q, k, v, od);
    int64_t kv_lens[1] = {T};
    smattn_layout L = {NULL, NULL, NULL, bt, np, np, np, ps};
    smattn_problem pl = pd;
    pl.layout = &L;
    pl.kv_lens = kv_lens;
    dense_io(&pd, &inl, &outl, q, kc, vc, ol);
    int64_t cs[4] = {ps * row, row, HD, 1}; /* [num_pages, page_size, Hkv, D] */
    memcpy(inl.k.stride, cs, sizeof cs);
    memcpy(inl.v.stride, cs, sizeof cs);
    double *ratio = malloc((size_t)runs * sizeof *ratio), *tl = malloc((size_t)runs * sizeof *tl);
    double *td = malloc((size_t)runs * sizeof *td);
    double *cratio = malloc((size_t)runs * sizeof *cratio);
    int bad = 0;
    timed(&pl, &inl, &outl, cfg, &bad), timed(&pd, &in, &out, cfg, &bad); /* warm-up */
    for (int r = 0; r < runs; r++) {
        tl[r] = timed(&pl, &inl, &outl, cfg, &bad);
        double cl = last_cpu;
        td[r] = timed(&pd, &in, &out, cfg, &bad);
        ratio[r] = tl[r] / td[r];
        cratio[r] = cl / last_cpu;
    }
    int same = memcmp(od, ol, HQ * HD * sizeof(float)) == 0;
    printf("paged decode T=32768 page 16, random order: %8.3f ms  dense %8.3f ms  "
           "paged/dense %.3f (CPU time %.3f)  same bits: %s\n",
           1e3 * median(tl, runs), 1e3 * median(td, runs), median(ratio, runs),
           median(cratio, runs), same ? "yes" : "NO");
    free(q), free(k), free(v), free(kc), free(vc), free(od), free(ol), free(bt);
    free(ratio), free(tl), free(td), free(cratio);
    return bad || !same;
}

/* One packed prefill of four sequences against four dense calls. */
static int bench_prefill(const smattn_opt_config *cfg, int runs)
{
    const int64_t len[4] = {1024, 512, 384, 128}, qrow = HQ * HD, krow = HKV * HD;
    int64_t cu[5] = {0};
    for (int b = 0; b < 4; b++)
        cu[b + 1] = cu[b] + len[b];
    const int64_t total = cu[4];
    float *q = randf((size_t)(total * qrow), -2, 2), *k = randf((size_t)(total * krow), -2, 2);
    float *v = randf((size_t)(total * krow), -1, 1);
    float *ol = malloc((size_t)(total * qrow) * sizeof(float));
    float *od = malloc((size_t)(total * qrow) * sizeof(float));
    if (!q || !k || !v || !ol || !od)
        return 1;
    smattn_problem pl = base_problem(4, len[0], len[0]);
    smattn_layout L = {cu, cu, NULL, NULL, 0, 0, 0, 0};
    pl.layout = &L;
    smattn_inputs inl;
    smattn_outputs outl;
    dense_io(&pl, &inl, &outl, q, k, v, ol); /* dims 1-3 as dense; dim 0 is unused */
    smattn_problem pd[4];
    smattn_inputs in[4];
    smattn_outputs out[4];
    for (int b = 0; b < 4; b++) {
        pd[b] = base_problem(1, len[b], len[b]);
        dense_io(&pd[b], &in[b], &out[b], q + cu[b] * qrow, k + cu[b] * krow, v + cu[b] * krow,
                 od + cu[b] * qrow);
    }
    double *ratio = malloc((size_t)runs * sizeof *ratio), *tl = malloc((size_t)runs * sizeof *tl);
    double *td = malloc((size_t)runs * sizeof *td);
    double *cratio = malloc((size_t)runs * sizeof *cratio);
    int bad = 0;
    timed(&pl, &inl, &outl, cfg, &bad);
    for (int b = 0; b < 4; b++)
        timed(&pd[b], &in[b], &out[b], cfg, &bad);
    for (int r = 0; r < runs; r++) {
        tl[r] = timed(&pl, &inl, &outl, cfg, &bad);
        double cl = last_cpu, cd = 0;
        td[r] = 0;
        for (int b = 0; b < 4; b++)
            td[r] += timed(&pd[b], &in[b], &out[b], cfg, &bad), cd += last_cpu;
        ratio[r] = tl[r] / td[r];
        cratio[r] = cl / cd;
    }
    int same = memcmp(od, ol, (size_t)(total * qrow) * sizeof(float)) == 0;
    printf("packed prefill 1024,512,384,128:            %8.3f ms  4 dense %7.3f ms  "
           "packed/dense %.3f (CPU time %.3f)  same bits: %s\n",
           1e3 * median(tl, runs), 1e3 * median(td, runs), median(ratio, runs),
           median(cratio, runs), same ? "yes" : "NO");
    free(q), free(k), free(v), free(ol), free(od), free(ratio), free(tl), free(td), free(cratio);
    return bad || !same;
}

int main(int argc, char **argv)
{
    smattn_opt_config cfg = {0, NULL};
    int runs = 9;
    for (int a = 1; a < argc; a++) {
        if (!strcmp(argv[a], "--threads") && a + 1 < argc)
            cfg.threads = atoi(argv[++a]);
        else if (!strcmp(argv[a], "--isa") && a + 1 < argc)
            cfg.isa = argv[++a];
        else if (!strcmp(argv[a], "--runs") && a + 1 < argc)
            runs = atoi(argv[++a]);
        else {
            fprintf(stderr, "usage: bench_layout [--threads N] [--isa NAME] [--runs N]\n");
            return 2;
        }
    }
    if (runs < 1)
        runs = 1;
    char la0[64], la1[64];
    bench_loadavg(la0, sizeof la0);
    printf("layouts (SPEC 2.7), isa %s, threads %d, median of %d interleaved pairs:\n",
           cfg.isa ? cfg.isa : smattn_opt_isa(), cfg.threads, runs);
    int rc = bench_decode(&cfg, runs);
    rc |= bench_prefill(&cfg, runs);
    bench_loadavg(la1, sizeof la1);
    printf("  load average before: %s; after: %s (ratios from a loaded machine are not final)\n",
           la0, la1);
    return rc;
}
