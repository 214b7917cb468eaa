/* SPDX-License-Identifier: MIT */
/* bench_machine.c: the machine's FMA peak and memory bandwidth, measured on the benchmark's
 * own thread count so that the kernel's fractions of them compare like with like. */
#define _DEFAULT_SOURCE /* madvise */
#include "bench/bench_machine.h"
#include "smattn.h"

#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>

double bench_now(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

void bench_loadavg(char *buf, size_t cap)
{
    double l[3];
    FILE *f = fopen("/proc/loadavg", "r");
    buf[0] = 0;
    if (f && fscanf(f, "%lf %lf %lf", &l[0], &l[1], &l[2]) == 3)
        snprintf(buf, cap, "%.2f %.2f %.2f", l[0], l[1], l[2]);
    if (f)
        fclose(f);
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

void bench_sort(double *x, size_t n)
{
    qsort(x, n, sizeof *x, cmp_double);
}

int bench_fma_available(const char *isa)
{
#if defined(__x86_64__) || defined(__i386__)
    __builtin_cpu_init();
    if (!strcmp(isa, "avx2"))
        return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
    if (!strcmp(isa, "avx512"))
        return __builtin_cpu_supports("avx512f");
#else
    (void)isa;
#endif
    return 0;
}

/* ---- FMA peak ------------------------------------------------------------------------- */

typedef struct fma_arg {
    double (*fn)(int64_t);
    int64_t iters;
    double sink;
} fma_arg;

static void *fma_thread(void *p)
{
    fma_arg *a = p;
    a->sink = a->fn(a->iters);
    return NULL;
}

/* Wall time of `threads` threads each running fn(iters), from the first start to the
 * last join (thread start-up, ~0.1 ms, is negligible against the ~0.2 s runs). */
static double time_fma(double (*fn)(int64_t), int64_t iters, int threads)
{
    pthread_t tid[64];
    fma_arg arg[64];
    double t0 = bench_now();
    int started = 0;
    for (int t = 0; t < threads && t < 64; t++) {
        arg[t] = (fma_arg){fn, iters, 0};
        if (pthread_create(&tid[t], NULL, fma_thread, &arg[t]) == 0)
            started++;
    }
    for (int t = 0; t < started; t++)
        pthread_join(tid[t], NULL);
    return started == threads ? bench_now() - t0 : -1;
}

double bench_fma_peak(const char *isa, int threads, int reps, double seconds)
{
    if (!bench_fma_available(isa) || threads < 1 || threads > 64)
        return 0;
    int avx512 = !strcmp(isa, "avx512");
    double (*fn)(int64_t) = avx512 ? smattn_bench_fma_avx512 : smattn_bench_fma_avx2;
    double per_iter =
        avx512 ? smattn_bench_fma_avx512_flops_per_iter() : smattn_bench_fma_avx2_flops_per_iter();
    /* calibrate the iteration count on one thread: ~seconds per run */
    int64_t iters = 1 << 16;
    double t;
    while ((t = time_fma(fn, iters, 1)) >= 0 && t < 0.02)
        iters *= 4;
    if (t < 0)
        return 0;
    iters = (int64_t)((double)iters * seconds / t) + 1;
    double best = 0;
    for (int r = 0; r < reps; r++) {
        t = time_fma(fn, iters, threads);
        if (t <= 0)
            return 0;
        double g = per_iter * (double)iters * threads / t * 1e-9;
        best = g > best ? g : best;
    }
    return best;
}

/* ---- STREAM triad ---------------------------------------------------------------------- */

static double *arr_a, *arr_b, *arr_c;
static size_t arr_n;

typedef struct triad_arg {
    size_t lo, hi;
    int init;
} triad_arg;

static void *triad_thread(void *p)
{
    triad_arg *a = p;
    if (a->init)
        for (size_t i = a->lo; i < a->hi; i++) {
            arr_a[i] = 0.0;
            arr_b[i] = 1.0;
            arr_c[i] = 2.0;
        }
    else {
        const double s = 3.0;
        for (size_t i = a->lo; i < a->hi; i++)
            arr_a[i] = arr_b[i] + s * arr_c[i];
    }
    return NULL;
}

static double triad_pass(int threads, int init)
{
    pthread_t tid[64];
    triad_arg arg[64];
    double t0 = bench_now();
    int started = 0;
    for (int t = 0; t < threads; t++) {
        arg[t] = (triad_arg){arr_n * (size_t)t / (size_t)threads,
                             arr_n * (size_t)(t + 1) / (size_t)threads, init};
        if (pthread_create(&tid[t], NULL, triad_thread, &arg[t]) == 0)
            started++;
    }
    for (int t = 0; t < started; t++)
        pthread_join(tid[t], NULL);
    return started == threads ? bench_now() - t0 : -1;
}

static int huge_pages;

void bench_huge_pages(int huge)
{
    huge_pages = huge;
}

void *bench_alloc(size_t n)
{
    if (!huge_pages)
        return malloc(n);
    const size_t hp = (size_t)2 << 20, m = (n + hp - 1) / hp * hp;
    void *x = aligned_alloc(hp, m ? m : hp);
    if (x)
        (void)madvise(x, m ? m : hp, MADV_HUGEPAGE); /* advice: declined means 4 KiB pages */
    return x;
}

long bench_anon_huge_kb(void)
{
    FILE *f = fopen("/proc/self/smaps_rollup", "r");
    if (!f)
        return -1;
    char line[256];
    long kb = -1;
    while (fgets(line, sizeof line, f))
        if (sscanf(line, "AnonHugePages: %ld kB", &kb) == 1)
            break;
    fclose(f);
    return kb;
}

double bench_stream_triad(int threads, size_t n, int reps)
{
    if (threads < 1 || threads > 64)
        return 0;
    bench_machine_free();
    arr_a = bench_alloc(n * sizeof *arr_a);
    arr_b = bench_alloc(n * sizeof *arr_b);
    arr_c = bench_alloc(n * sizeof *arr_c);
    if (!arr_a || !arr_b || !arr_c) {
        bench_machine_free();
        return 0;
    }
    arr_n = n;
    if (triad_pass(threads, 1) < 0) /* first touch: each thread's pages on its node */
        return 0;
    double best = 0;
    for (int r = 0; r < reps; r++) {
        double t = triad_pass(threads, 0);
        if (t <= 0)
            return 0;
        double g = 24.0 * (double)n / t * 1e-9;
        best = g > best ? g : best;
    }
    return best;
}

static volatile double flush_sink;

void bench_flush_caches(void)
{
    double s = 0;
    for (size_t i = 0; i < arr_n; i += 8) /* one load per 64-byte line of b: 256 MiB */
        s += arr_b[i];
    flush_sink = s;
}

void bench_machine_free(void)
{
    free(arr_a);
    free(arr_b);
    free(arr_c);
    arr_a = arr_b = arr_c = NULL;
    arr_n = 0;
}

size_t bench_kv_bytes(int t, size_t n)
{
    const smattn_dtype dt = (smattn_dtype)t;
    return n / (size_t)smattn_dtype_block(dt) * smattn_dtype_size(dt);
}

void bench_store_kv(void *dst, int t, const float *src, size_t n)
{
    const smattn_dtype dt = (smattn_dtype)t;
    if (dt != SMATTN_Q8_0 && dt != SMATTN_Q4_0) {
        for (size_t i = 0; i < n; i++)
            smattn_store(dst, dt, (int64_t)i, (double)src[i]);
        return;
    }
    const size_t bs = smattn_dtype_size(dt);
    unsigned char *o = dst;
    memset(o, 0, n / SMATTN_QBLOCK * bs);
    for (size_t blk = 0; blk < n / SMATTN_QBLOCK; blk++, o += bs) {
        const float *x = src + blk * SMATTN_QBLOCK;
        double amax = 0;
        for (int j = 0; j < SMATTN_QBLOCK; j++)
            amax = fabs((double)x[j]) > amax ? fabs((double)x[j]) : amax;
        smattn_store(o, SMATTN_F16, 0, amax / (dt == SMATTN_Q8_0 ? 127.0 : 8.0));
        const double d = smattn_load(o, SMATTN_F16, 0);
        for (int j = 0; j < SMATTN_QBLOCK; j++) {
            double q = d > 0 ? nearbyint((double)x[j] / d) : 0;
            if (dt == SMATTN_Q8_0) {
                q = q > 127 ? 127 : q < -127 ? -127 : q;
                o[2 + j] = (unsigned char)(int8_t)q;
            } else {
                const int nib = (int)(q + 8 > 15 ? 15 : q + 8 < 0 ? 0 : q + 8);
                o[2 + j % 16] |= (unsigned char)(j < 16 ? nib : nib << 4);
            }
        }
    }
}
