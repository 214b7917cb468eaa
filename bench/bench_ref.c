/* SPDX-License-Identifier: MIT */
/* bench_ref.c: speed of the exact oracle on its two reference shapes (SPEC 5.2):
 * small rows (T = 8, D = Dv = 16) on one thread, and one full Qwen2.5-7B decode step
 * (Hq = 28, Hkv = 4, D = Dv = 128, T = 4096) on every core. Medians of repeated runs. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bench/bench_machine.h"
#include "smattn.h"

static uint64_t rng = 0x2545F4914F6CDD1Dull;
static double uniform(void)
{
    rng ^= rng << 13;
    rng ^= rng >> 7;
    rng ^= rng << 17;
    return (double)(rng >> 11) * 0x1p-53;
}


typedef struct bench_case {
    smattn_problem p;
    smattn_inputs in;
    smattn_outputs out;
    float *q, *k, *v;
    double *o, *lse;
} bench_case;

/* Random f32 inputs with scores of a realistic spread (|s| up to ~10). */
static void make_case(bench_case *c, int64_t B, int64_t S, int64_t T, int64_t Hq, int64_t Hkv,
                      int64_t D, smattn_dtype odt)
{
    memset(c, 0, sizeof *c);
    c->p = smattn_problem_default();
    smattn_problem *p = &c->p;
    p->B = B, p->S = S, p->T = T, p->Hq = Hq, p->Hkv = Hkv, p->D = D, p->Dv = D;
    p->scale = smattn_default_scale(D);
    size_t nq = (size_t)(B * S * Hq * D), nk = (size_t)(B * T * Hkv * D);
    c->q = malloc(nq * sizeof *c->q);
    c->k = malloc(nk * sizeof *c->k);
    c->v = malloc(nk * sizeof *c->v);
    c->o = malloc(nq * sizeof *c->o);
    c->lse = malloc((size_t)(B * Hq * S) * sizeof *c->lse);
    for (size_t i = 0; i < nq; i++)
        c->q[i] = (float)(uniform() * 4 - 2);
    for (size_t i = 0; i < nk; i++) {
        c->k[i] = (float)(uniform() * 4 - 2);
        c->v[i] = (float)(uniform() * 2 - 1);
    }
    c->in.q = (smattn_tensor){c->q, SMATTN_F32, {0}};
    c->in.k = (smattn_tensor){c->k, SMATTN_F32, {0}};
    c->in.v = (smattn_tensor){c->v, SMATTN_F32, {0}};
    smattn_contiguous_strides(p, 'q', c->in.q.stride);
    smattn_contiguous_strides(p, 'k', c->in.k.stride);
    smattn_contiguous_strides(p, 'v', c->in.v.stride);
    c->out.o = (smattn_out_tensor){c->o, odt, {0}};
    c->out.lse = (smattn_out_tensor){c->lse, odt, {0}};
    smattn_contiguous_strides(p, 'o', c->out.o.stride);
    smattn_contiguous_strides(p, 'l', c->out.lse.stride);
}

static void free_case(bench_case *c)
{
    free(c->q), free(c->k), free(c->v), free(c->o), free(c->lse);
}

/* Median seconds of `reps` calls; also the stats of the last call. */
static double time_ref(bench_case *c, int threads, int reps, smattn_ref_stats *st)
{
    double *t = malloc((size_t)reps * sizeof *t);
    smattn_ref_config cfg;
    memset(&cfg, 0, sizeof cfg);
    cfg.threads = threads;
    for (int r = 0; r < reps; r++) {
        double t0 = bench_now();
        smattn_status s = smattn_ref(&c->p, &c->in, &c->out, &cfg, st);
        t[r] = bench_now() - t0;
        if (s) {
            fprintf(stderr, "bench_ref: smattn_ref failed: %s\n", smattn_status_str(s));
            exit(1);
        }
    }
    bench_sort(t, (size_t)reps);
    double med = t[reps / 2];
    free(t);
    return med;
}

int main(int argc, char **argv)
{
    int reps = argc > 1 ? atoi(argv[1]) : 5;
    if (reps < 1)
        reps = 1;
    const smattn_dtype dts[2] = {SMATTN_F64, SMATTN_F32};
    printf("smattn oracle speed (median of %d runs; f32 inputs; O and LSE)\n", reps);
    printf("%-44s %-5s %12s %14s %10s\n", "shape", "out", "median", "rate", "fast rows");
    for (int d = 0; d < 2; d++) {
        bench_case c;
        smattn_ref_stats st;
        /* 1: small rows, one thread. 4096 rows: B = 1, S = 512, Hq = 8. */
        make_case(&c, 1, 512, 8, 8, 8, 16, dts[d]);
        c.p.causal = SMATTN_CAUSAL_NONE;
        double t = time_ref(&c, 1, reps, &st);
        double rows = (double)(c.p.B * c.p.Hq * c.p.S);
        printf("%-44s %-5s %10.1f ms %10.0f rows/s %9.4f%%\n",
               "T=8 D=Dv=16, 4096 rows, 1 thread", smattn_dtype_name(dts[d]), t * 1e3,
               rows / t, 100.0 * (double)st.rows_fast / (double)st.rows);
        free_case(&c);
        /* 2: one decode step of Qwen2.5-7B, all cores. */
        make_case(&c, 1, 1, 4096, 28, 4, 128, dts[d]);
        t = time_ref(&c, 0, reps, &st);
        printf("%-44s %-5s %10.1f ms %10.2f steps/s %8.4f%%\n",
               "decode Hq=28 Hkv=4 D=128 T=4096, all cores", smattn_dtype_name(dts[d]), t * 1e3,
               1.0 / t, 100.0 * (double)st.rows_fast / (double)st.rows);
        free_case(&c);
    }
    return 0;
}
