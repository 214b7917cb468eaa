/* SPDX-License-Identifier: MIT */
/* bench_ref_backward.c: speed of the exact backward oracle (SPEC 10) on a decode step
 * (S = 1, Hq = 28, Hkv = 4, D = Dv = 128, T keys; f32 inputs, dO and outputs) on every core,
 * or on the threads given. Usage: bench_ref_backward [T] [threads] [f64|f32|bf16] [orth].
 * "orth": dO is orthogonal to the differences of V's rows (column 0 of V constant, dO = e_0),
 * so every dQ and dK is an exact zero that only the MPFR phase decides (SPEC 10.3 item 3). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "smattn.h"

static uint64_t rng = 0x2545F4914F6CDD1Dull;
static double uniform(void)
{
    rng ^= rng << 13;
    rng ^= rng >> 7;
    rng ^= rng << 17;
    return (double)(rng >> 11) * 0x1p-53;
}

static float *randf(size_t n, double amp)
{
    float *x = malloc(n * sizeof *x);
    for (size_t k = 0; x && k < n; k++)
        x[k] = (float)((2 * uniform() - 1) * amp);
    return x;
}

int main(int argc, char **argv)
{
    int64_t T = argc > 1 ? atoll(argv[1]) : 4096;
    int threads = argc > 2 ? atoi(argv[2]) : 0;
    smattn_dtype odt = SMATTN_F32;
    if (argc > 3)
        odt = !strcmp(argv[3], "f64")    ? SMATTN_F64
              : !strcmp(argv[3], "bf16") ? SMATTN_BF16
                                         : SMATTN_F32;
    smattn_problem p = smattn_problem_default();
    p.B = 1, p.S = 1, p.T = T, p.Hq = 28, p.Hkv = 4, p.D = 128, p.Dv = 128;
    p.scale = smattn_default_scale(128);
    size_t nq = (size_t)(p.Hq * p.D), nk = (size_t)(T * p.Hkv * p.D);
    float *q = randf(nq, 1.0), *k = randf(nk, 1.0), *v = randf(nk, 1.0), *dout = randf(nq, 1.0);
    if (argc > 4 && !strcmp(argv[4], "orth")) {
        for (size_t x = 0; x < nq; x++)
            dout[x] = x % (size_t)p.Dv == 0 ? 1.0f : 0.0f;
        for (size_t x = 0; x < nk; x += (size_t)p.Dv)
            v[x] = 0.5f; /* column 0 of every key's V */
    }
    size_t es = smattn_dtype_size(odt);
    void *dq = malloc(nq * es), *dk = malloc(nk * es), *dv = malloc(nk * es);
    if (!q || !k || !v || !dout || !dq || !dk || !dv)
        return 1;
    smattn_inputs in;
    memset(&in, 0, sizeof in);
    in.q = (smattn_tensor){q, SMATTN_F32, {0}};
    in.k = (smattn_tensor){k, SMATTN_F32, {0}};
    in.v = (smattn_tensor){v, SMATTN_F32, {0}};
    smattn_grad_inputs gin;
    memset(&gin, 0, sizeof gin);
    gin.dout = (smattn_tensor){dout, SMATTN_F32, {0}};
    smattn_grad_outputs go;
    memset(&go, 0, sizeof go);
    go.dq = (smattn_out_tensor){dq, odt, {0}};
    go.dk = (smattn_out_tensor){dk, odt, {0}};
    go.dv = (smattn_out_tensor){dv, odt, {0}};
    if (smattn_contiguous_strides(&p, 'q', in.q.stride) ||
        smattn_contiguous_strides(&p, 'k', in.k.stride) ||
        smattn_contiguous_strides(&p, 'v', in.v.stride) ||
        smattn_contiguous_strides(&p, 'o', gin.dout.stride) ||
        smattn_contiguous_strides(&p, 'q', go.dq.stride) ||
        smattn_contiguous_strides(&p, 'k', go.dk.stride) ||
        smattn_contiguous_strides(&p, 'v', go.dv.stride))
        return 1;
    smattn_ref_config cfg;
    memset(&cfg, 0, sizeof cfg);
    cfg.threads = threads;
    smattn_ref_stats st;
    struct timespec t0, t1;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    smattn_status s = smattn_ref_backward(&p, &in, &gin, &go, &cfg, &st);
    clock_gettime(CLOCK_MONOTONIC, &t1);
    double secs = (double)(t1.tv_sec - t0.tv_sec) + 1e-9 * (double)(t1.tv_nsec - t0.tv_nsec);
    printf("backward decode T=%lld Hq=28 Hkv=4 D=128 out=%s threads=%d: %.3f s, status %d, "
           "fast-phase elements %lld, exact-path elements %lld, max precision %ld\n",
           (long long)T, smattn_dtype_name(odt), threads, secs, (int)s, (long long)st.rows_fast,
           (long long)st.rows_rational, st.max_prec_used);
    free(q), free(k), free(v), free(dout), free(dq), free(dk), free(dv);
    return s != SMATTN_OK;
}
