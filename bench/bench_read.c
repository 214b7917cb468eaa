/* SPDX-License-Identifier: MIT */
/* bench_read.c: how fast can the decode step's K and V be read at all on this machine?
 *
 * A decode step (S = 1) reads every byte of K and V once, so reading them without any
 * arithmetic is a floor for its time. This program reads the bytes of the benchmark's
 * decode shapes (Hkv = 4, D = Dv = 128, f32, K and V of [T, Hkv, D]) with the caches
 * flushed first, on persistent threads that split the keys into the kernel's chunks
 * (OPT_CHUNK = 512 keys, all KV heads of a chunk on one thread), in four orders:
 *   per-head: per 64-key tile, KV head by KV head, that head's 64 K rows (512 bytes each,
 *             2 KiB apart), then its V rows (the kernel's order before b545e71);
 *   kernel:   the split-K decode's order now (opt/kernel_body.h, attention_item): per
 *             64-key tile, the K rows of every head in address order with the same keys'
 *             V rows requested (prefetch into L2) alongside, then V head by head;
 *   V-blocks: K in address order, then V in blocks of 16 keys, head by head within a
 *             block (what a P.V of all heads with per-block accumulators would read);
 *   address:  per 64-key tile, the K rows of every head in address order, then V.
 * It prints the median time and GB/s of each, beside the STREAM triad of the same run.
 * Integer XOR reduction (no float arithmetic to vectorise or not); `make bench-read`.
 *
 * Usage: bench_read [--threads N] [--runs N] */
#define _POSIX_C_SOURCE 200809L
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bench/bench_machine.h"

enum { HKV = 4, HD = 128, BK = 64, CHUNK = 512, MAXT = 16, NORDERS = 4 };

typedef struct shared {
    const uint64_t *k, *v; /* [T][HKV][HD] floats, read as 64-bit words */
    int64_t T;
    int order; /* NORDERS orders, as named in names[] */
    int nt;
    pthread_barrier_t start, done;
    int quit;
    uint64_t sink[MAXT];
} shared;

typedef struct worker {
    shared *sh;
    int id;
} worker;

static uint64_t read_rows(const uint64_t *base, int64_t j0, int64_t j1, int head, uint64_t x)
{
    const int64_t w = HD / 2; /* 64-bit words in a row */
    for (int64_t j = j0; j < j1; j++) {
        const uint64_t *r = base + (j * HKV + head) * w;
        uint64_t a = 0, b = 0, c = 0, d = 0; /* four chains: bandwidth, not latency */
        for (int64_t i = 0; i < w; i += 4)
            a ^= r[i], b ^= r[i + 1], c ^= r[i + 2], d ^= r[i + 3];
        x ^= a ^ b ^ c ^ d;
    }
    return x;
}

static uint64_t read_block(const uint64_t *base, int64_t j0, int64_t j1, uint64_t x)
{
    const uint64_t *r = base + j0 * HKV * (HD / 2), *e = base + j1 * HKV * (HD / 2);
    uint64_t a = 0, b = 0, c = 0, d = 0;
    for (; r < e; r += 4)
        a ^= r[0], b ^= r[1], c ^= r[2], d ^= r[3];
    return x ^ a ^ b ^ c ^ d;
}

static void *work(void *arg)
{
    worker *wk = arg;
    shared *sh = wk->sh;
    for (;;) {
        pthread_barrier_wait(&sh->start);
        if (sh->quit)
            return NULL;
        uint64_t x = 0;
        const int64_t chunks = (sh->T + CHUNK - 1) / CHUNK;
        for (int64_t c = wk->id; c < chunks; c += sh->nt)
            for (int64_t kt = c * CHUNK; kt < (c + 1) * CHUNK && kt < sh->T; kt += BK) {
                int64_t ke = kt + BK < sh->T ? kt + BK : sh->T;
                if (sh->order == 0) { /* per-head */
                    for (int u = 0; u < HKV; u++) {
                        x = read_rows(sh->k, kt, ke, u, x);
                        x = read_rows(sh->v, kt, ke, u, x);
                    }
                } else if (sh->order == 1) { /* kernel */
                    const size_t row = HKV * HD * sizeof(float); /* one key, every head */
                    for (int64_t j = kt; j < ke; j++) {
                        const char *pv = (const char *)sh->v + (size_t)j * row;
                        for (size_t o = 0; o < row; o += 64)
                            __builtin_prefetch(pv + o, 0, 2);
                        x = read_block(sh->k, j, j + 1, x);
                    }
                    for (int u = 0; u < HKV; u++)
                        x = read_rows(sh->v, kt, ke, u, x);
                } else if (sh->order == 2) { /* V-blocks */
                    x = read_block(sh->k, kt, ke, x);
                    for (int64_t j0 = kt; j0 < ke; j0 += 16)
                        for (int u = 0; u < HKV; u++)
                            x = read_rows(sh->v, j0, j0 + 16 < ke ? j0 + 16 : ke, u, x);
                } else { /* address */
                    x = read_block(sh->k, kt, ke, x);
                    x = read_block(sh->v, kt, ke, x);
                }
            }
        sh->sink[wk->id] = x;
        pthread_barrier_wait(&sh->done);
    }
}

int main(int argc, char **argv)
{
    int nt = 2, runs = 15;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--threads") && i + 1 < argc)
            nt = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--runs") && i + 1 < argc)
            runs = atoi(argv[++i]);
        else {
            fprintf(stderr, "usage: bench_read [--threads N] [--runs N]\n");
            return 2;
        }
    }
    if (nt < 1 || nt > MAXT || runs < 1 || runs > 1000) {
        fprintf(stderr, "bench_read: --threads in [1, %d], --runs in [1, 1000]\n", MAXT);
        return 2;
    }
    double triad = bench_stream_triad(nt, (size_t)32 << 20, 5); /* 3 x 256 MiB */
    if (triad <= 0) {
        fprintf(stderr, "bench_read: out of memory for the triad arrays\n");
        return 1;
    }
    printf("bench_read: decode K and V (Hkv=%d D=Dv=%d f32), caches flushed, %d thread%s, "
           "median of %d runs, orders interleaved\n",
           HKV, HD, nt, nt > 1 ? "s" : "", runs);
    printf("STREAM triad in the same run: %.1f GB/s\n\n", triad);
    printf("%-8s %-9s %10s %8s %7s\n", "T", "order", "median ms", "GB/s", "%triad");
    const int64_t Ts[] = {4096, 32768};
    shared sh;
    memset(&sh, 0, sizeof sh);
    sh.nt = nt;
    pthread_barrier_init(&sh.start, NULL, (unsigned)nt + 1);
    pthread_barrier_init(&sh.done, NULL, (unsigned)nt + 1);
    pthread_t th[MAXT];
    worker wk[MAXT];
    for (int i = 0; i < nt; i++) {
        wk[i].sh = &sh, wk[i].id = i;
        if (pthread_create(&th[i], NULL, work, &wk[i])) {
            fprintf(stderr, "bench_read: pthread_create failed\n");
            return 1;
        }
    }
    int rc = 0;
    for (size_t s = 0; s < sizeof Ts / sizeof Ts[0]; s++) {
        const int64_t T = Ts[s];
        const size_t bytes = (size_t)T * HKV * HD * sizeof(float);
        uint64_t *k = malloc(bytes), *v = malloc(bytes);
        double *t[NORDERS];
        int ok = k && v;
        for (int o = 0; o < NORDERS; o++)
            ok &= (t[o] = malloc((size_t)runs * sizeof(double))) != NULL;
        if (!ok) {
            fprintf(stderr, "bench_read: out of memory\n");
            rc = 1;
            free(k), free(v);
            for (int o = 0; o < NORDERS; o++)
                free(t[o]);
            break;
        }
        for (size_t i = 0; i < bytes / 8; i++)
            k[i] = i * 0x9E3779B97F4A7C15u, v[i] = k[i] >> 7;
        sh.k = k, sh.v = v, sh.T = T;
        for (int r = 0; r < runs + 1; r++)
            for (int o = 0; o < NORDERS; o++) { /* interleaved; run 0 is a warm-up */
                sh.order = (o + r) % NORDERS;
                bench_flush_caches();
                double t0 = bench_now();
                pthread_barrier_wait(&sh.start);
                pthread_barrier_wait(&sh.done);
                double dt = bench_now() - t0;
                if (r > 0)
                    t[sh.order][r - 1] = dt;
            }
        static const char *const names[NORDERS] = {"per-head", "kernel", "V-blocks", "address"};
        for (int o = 0; o < NORDERS; o++) {
            bench_sort(t[o], (size_t)runs);
            double med = t[o][runs / 2], gbs = 2.0 * (double)bytes / med / 1e9;
            printf("%-8lld %-9s %10.3f %8.1f %6.1f%%\n", (long long)T, names[o],
                   med * 1e3, gbs, 100 * gbs / triad);
        }
        free(k), free(v);
        for (int o = 0; o < NORDERS; o++)
            free(t[o]);
    }
    sh.quit = 1;
    pthread_barrier_wait(&sh.start);
    for (int i = 0; i < nt; i++)
        pthread_join(th[i], NULL);
    uint64_t x = 0;
    for (int i = 0; i < nt; i++)
        x ^= sh.sink[i];
    printf("\n(checksum %016llx)\n", (unsigned long long)x);
    bench_machine_free();
    return rc;
}
