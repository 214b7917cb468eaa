/* SPDX-License-Identifier: MIT */
/* peak_fma_avx512.c: an AVX-512 FMA-throughput loop (built with -mavx512f only; called only
 * after a run-time check). 16 independent accumulators, each its own named variable so
 * that they live in registers (32 zmm), cover the FMA latency times the FMA pipes of
 * current x86 cores. */
#include <immintrin.h>

#include "bench/bench_machine.h"

#define ACCS(X)                                                                                    \
    X(0) X(1) X(2) X(3) X(4) X(5) X(6) X(7) X(8) X(9) X(10) X(11) X(12) X(13) X(14) X(15)
#define NACC 16

double smattn_bench_fma_avx512(int64_t iters)
{
#define INIT(k) __m512 acc##k = _mm512_set1_ps(1.0f + (float)(k)*0x1p-10f);
    ACCS(INIT)
    /* the fixed point of acc <- acc * (1 - 2^-20) + 2^-20 is 1: values stay normal */
    const __m512 a = _mm512_set1_ps(1.0f - 0x1p-20f), b = _mm512_set1_ps(0x1p-20f);
    for (int64_t i = 0; i < iters; i++) {
#define STEP(k) acc##k = _mm512_fmadd_ps(acc##k, a, b);
        ACCS(STEP)
    }
    __m512 s = _mm512_setzero_ps();
#define SUM(k) s = _mm512_add_ps(s, acc##k);
    ACCS(SUM)
    return (double)_mm512_reduce_add_ps(s);
}

int smattn_bench_fma_avx512_flops_per_iter(void)
{
    return NACC * 16 * 2;
}
