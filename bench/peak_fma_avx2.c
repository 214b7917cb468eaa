/* SPDX-License-Identifier: MIT */
/* peak_fma_avx2.c: an AVX2 FMA-throughput loop (built with -mavx2 -mfma only; called only
 * after a run-time check). 12 independent accumulators, each its own named variable so
 * that they live in registers (an array would be kept in memory at -O2), cover the FMA
 * latency times the number of FMA pipes of current x86 cores (4-5 cycles x 2 pipes). */
#include <immintrin.h>

#include "bench/bench_machine.h"

#define ACCS(X) X(0) X(1) X(2) X(3) X(4) X(5) X(6) X(7) X(8) X(9) X(10) X(11)
#define NACC 12

double smattn_bench_fma_avx2(int64_t iters)
{
#define INIT(k) __m256 acc##k = _mm256_set1_ps(1.0f + (float)(k)*0x1p-10f);
    ACCS(INIT)
    /* acc <- acc * (1 - 2^-20) + 2^-20 has the fixed point 1: values stay normal however
     * many iterations run */
    const __m256 a = _mm256_set1_ps(1.0f - 0x1p-20f), b = _mm256_set1_ps(0x1p-20f);
    for (int64_t i = 0; i < iters; i++) {
#define STEP(k) acc##k = _mm256_fmadd_ps(acc##k, a, b);
        ACCS(STEP)
    }
    __m256 s = _mm256_setzero_ps();
#define SUM(k) s = _mm256_add_ps(s, acc##k);
    ACCS(SUM)
    float out[8];
    _mm256_storeu_ps(out, s);
    return (double)(out[0] + out[7]);
}

int smattn_bench_fma_avx2_flops_per_iter(void)
{
    return NACC * 8 * 2;
}
