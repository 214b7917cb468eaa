/* SPDX-License-Identifier: MIT */
/* bench_machine.h: what the machine can do, measured in the benchmark's own run: FMA
 * throughput per ISA and STREAM-triad memory bandwidth, both on a given thread count. */
#ifndef SMATTN_BENCH_MACHINE_H
#define SMATTN_BENCH_MACHINE_H

#include <stddef.h>
#include <stdint.h>

/* The FMA loops (one file per ISA, built with that ISA's flags only). Each runs `iters`
 * rounds of independent FMAs and returns a checksum; the *_flops_per_iter say how many
 * flops (2 per lane per FMA) one round does. Call only when the CPU has the ISA. */
double smattn_bench_fma_avx2(int64_t iters);
int smattn_bench_fma_avx2_flops_per_iter(void);
double smattn_bench_fma_avx512(int64_t iters);
int smattn_bench_fma_avx512_flops_per_iter(void);

/* Nonzero if the CPU (and OS) can run the named FMA loop: "avx2" (AVX2+FMA) or "avx512". */
int bench_fma_available(const char *isa);

/* Peak single-precision FMA throughput in GFLOP/s of the named loop on `threads` threads:
 * the best of `reps` timed runs of about `seconds` each (a peak is a best case). 0 when
 * the ISA is not available. */
double bench_fma_peak(const char *isa, int threads, int reps, double seconds);

/* STREAM-triad bandwidth a[i] = b[i] + s c[i] over three arrays of `n` doubles, each
 * thread first-touching and then sweeping its own contiguous part. Counted as STREAM
 * does: 24 bytes per element (the write-allocate read of a is not counted). Best of
 * `reps` sweeps, in GB/s (10^9 B/s). The arrays stay allocated for bench_flush_caches.
 * Returns 0 if the memory could not be allocated. */
double bench_stream_triad(int threads, size_t n, int reps);

/* The memory bench_stream_triad and bench_kv_alloc take from here on: malloc's (huge 0,
 * 4 KiB pages) or 2 MiB-aligned and advised onto 2 MiB pages (madvise MADV_HUGEPAGE: the
 * kernel's transparent huge pages in their `madvise` mode; it may decline). */
void bench_huge_pages(int huge);
/* n bytes as bench_huge_pages says (free them with free). */
void *bench_alloc(size_t n);
/* The kB of the process's anonymous memory on huge pages (AnonHugePages of
 * /proc/self/smaps_rollup), -1 where it cannot be read: whether the advice was taken. */
long bench_anon_huge_kb(void);

/* Evict the caches by reading one triad array (no-op before bench_stream_triad). */
void bench_flush_caches(void);
void bench_machine_free(void);

/* n values of src stored in dtype t at dst (bench_kv_bytes(t, n) bytes): rounded once
 * (smattn_store), or for q8_0 / q4_0 quantised by blocks of 32 as llama.cpp does (d =
 * amax / 127, resp. amax / 8, in binary16; each quant the nearest integer of x / d,
 * clamped; n a multiple of 32). */
void bench_store_kv(void *dst, int t, const float *src, size_t n);
size_t bench_kv_bytes(int t, size_t n);

/* Wall-clock seconds (CLOCK_MONOTONIC). */
double bench_now(void);

/* The three load averages of /proc/loadavg ("1.02 0.87 0.55"; "" where there is none):
 * printed beside times measured on a shared machine. */
void bench_loadavg(char *buf, size_t cap);

/* Sort n run times in increasing order (for medians and best times). */
void bench_sort(double *x, size_t n);

#endif
