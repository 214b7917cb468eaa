/* SPDX-License-Identifier: MIT */
/* bench_shape.c: one attention shape timed alone, for A/B comparisons of two builds.
 *
 * `make bench` times the canonical shapes with the machine's limits beside them; this
 * program times one shape the options name (Qwen2.5-7B heads: Hq = 28, Hkv = 4,
 * D = Dv = 128, B = 1, causal lower_right) with the dtypes, layout, ISA and thread count
 * given, and prints the median and the best time and a hash of the output bits. Build it
 * in two trees (`make build/bench_shape`) and run the two binaries alternately: the
 * times compare the builds, the hashes say whether they compute the same bits. Caches are
 * flushed (64 MiB written) before every timed run unless --warm, where the calls run back
 * to back as in a decode loop.
 *
 * Usage: bench_shape [--S N] [--T N] [--q f32|f16|bf16|f8e4m3]
 *                    [--kv f32|f16|bf16|f8e4m3|q8_0|q4_0]
 *                    [--o f32|f16|bf16] [--layout bthd|bhtd] [--isa NAME] [--threads N]
 *                    [--runs N] [--warm] [--pages 4k|huge]
 * --layout bhtd stores K and V as [B, Hkv, T, D] (through the strides), the layout many
 * decode kernels keep; the default is smattn's [B, T, Hkv, D]. --pages huge puts K and V
 * on 2 MiB pages (2 MiB aligned, madvise MADV_HUGEPAGE: transparent huge pages in their
 * `madvise` mode) instead of malloc's 4 KiB ones, as a serving engine may allocate its KV
 * cache (the line then says how much of the process's memory the kernel put on huge
 * pages). `make bench-shape ARGS='...'` builds and runs it. */
#define _POSIX_C_SOURCE 200809L
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bench/bench_machine.h"
#include "smattn.h"

enum { HQ = 28, HKV = 4, HD = 128 };


static uint64_t rng = 0x9E3779B97F4A7C15u;
static double uniform(void) /* xorshift64: [0, 1) */
{
    rng ^= rng << 13, rng ^= rng >> 7, rng ^= rng << 17;
    return (double)(rng >> 11) * 0x1p-53;
}

static int parse_dtype(const char *s, smattn_dtype *t)
{
    if (!strcmp(s, "f32"))
        *t = SMATTN_F32;
    else if (!strcmp(s, "f16"))
        *t = SMATTN_F16;
    else if (!strcmp(s, "bf16"))
        *t = SMATTN_BF16;
    else if (!strcmp(s, "f8e4m3"))
        *t = SMATTN_F8E4M3;
    else if (!strcmp(s, "q8_0"))
        *t = SMATTN_Q8_0;
    else if (!strcmp(s, "q4_0"))
        *t = SMATTN_Q4_0;
    else
        return -1;
    return 0;
}

/* FNV-1a over bytes */
static uint64_t hash_bytes(uint64_t h, const void *p, size_t n)
{
    const unsigned char *b = p;
    for (size_t i = 0; i < n; i++)
        h = (h ^ b[i]) * 1099511628211u;
    return h;
}

static void usage(void)
{
    fprintf(stderr, "usage: bench_shape [--S N] [--T N] [--q f32|f16|bf16|f8e4m3] "
                    "[--kv f32|f16|bf16|f8e4m3|q8_0|q4_0] [--o f32|f16|bf16] [--layout bthd|bhtd] "
                    "[--isa NAME] [--threads N] "
                    "[--runs N] [--warm] [--pages 4k|huge]\n");
}

int main(int argc, char **argv)
{
    int64_t S = 1, T = 4096;
    smattn_dtype qt = SMATTN_F32, kvt = SMATTN_F32, ot = SMATTN_F32;
    int bhtd = 0, threads = 2, runs = 9, warm = 0, huge = 0;
    const char *isa = NULL;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        int bad = 0;
        if (!strcmp(a, "--warm")) {
            warm = 1;
            continue;
        }
        if (!v) {
            usage();
            return 2;
        }
        if (!strcmp(a, "--S"))
            S = atoll(v);
        else if (!strcmp(a, "--T"))
            T = atoll(v);
        else if (!strcmp(a, "--q"))
            bad = parse_dtype(v, &qt);
        else if (!strcmp(a, "--kv"))
            bad = parse_dtype(v, &kvt);
        else if (!strcmp(a, "--o"))
            bad = parse_dtype(v, &ot);
        else if (!strcmp(a, "--layout"))
            bad = strcmp(v, "bhtd") == 0 ? (bhtd = 1, 0) : strcmp(v, "bthd") != 0;
        else if (!strcmp(a, "--isa"))
            isa = v;
        else if (!strcmp(a, "--threads"))
            threads = atoi(v);
        else if (!strcmp(a, "--runs"))
            runs = atoi(v);
        else if (!strcmp(a, "--pages"))
            bad = strcmp(v, "huge") == 0 ? (huge = 1, 0) : strcmp(v, "4k") != 0;
        else
            bad = 1;
        if (bad) {
            usage();
            return 2;
        }
        i++;
    }
    if (S < 1 || T < 1 || S > 65536 || T > (1 << 22) || threads < 0 || runs < 1 || runs > 10000) {
        fprintf(stderr, "bench_shape: --S in [1, 65536], --T in [1, 2^22], --threads >= 0, "
                        "--runs in [1, 10000]\n");
        return 2;
    }
    smattn_problem p = smattn_problem_default();
    p.B = 1, p.S = S, p.T = T, p.Hq = HQ, p.Hkv = HKV, p.D = HD, p.Dv = HD;
    p.scale = smattn_default_scale(HD);
    p.causal = SMATTN_CAUSAL_LOWER_RIGHT;
    const size_t nq = (size_t)(S * HQ * HD), nkv = (size_t)T * HKV * HD, nl = (size_t)(S * HQ);
    void *q = malloc(nq * smattn_dtype_size(qt)), *o = malloc(nq * smattn_dtype_size(ot));
    bench_huge_pages(huge); /* K and V alone: bench_machine's allocator */
    void *k = bench_alloc(bench_kv_bytes(kvt, nkv)), *v = bench_alloc(bench_kv_bytes(kvt, nkv));
    bench_huge_pages(0);
    float *kvf = malloc(2 * nkv * sizeof(float));
    void *lse = malloc(nl * smattn_dtype_size(ot));
    const size_t flush_bytes = (size_t)64 << 20;
    unsigned char *flush = warm ? NULL : calloc(flush_bytes, 1);
    double *t = malloc((size_t)runs * sizeof(double));
    if (!q || !o || !k || !v || !kvf || !lse || (!warm && !flush) || !t) {
        fprintf(stderr, "bench_shape: out of memory\n");
        return 3;
    }
    /* Q, K in [-2, 2], V in [-1, 1], as bench_opt's (stored rounded to their dtype) */
    for (size_t i = 0; i < nq; i++)
        smattn_store(q, qt, (int64_t)i, uniform() * 4 - 2);
    for (size_t i = 0; i < nkv; i++) {
        kvf[i] = (float)(uniform() * 4 - 2);
        kvf[nkv + i] = (float)(uniform() * 2 - 1);
    }
    bench_store_kv(k, kvt, kvf, nkv);
    bench_store_kv(v, kvt, kvf + nkv, nkv);
    free(kvf);
    smattn_inputs in;
    smattn_outputs out;
    memset(&in, 0, sizeof in);
    memset(&out, 0, sizeof out);
    in.q = (smattn_tensor){q, qt, {0}};
    in.k = (smattn_tensor){k, kvt, {0}};
    in.v = (smattn_tensor){v, kvt, {0}};
    out.o = (smattn_out_tensor){o, ot, {0}};
    out.lse = (smattn_out_tensor){lse, ot, {0}};
    if (smattn_contiguous_strides(&p, 'q', in.q.stride) || smattn_contiguous_strides(&p, 'o', out.o.stride) ||
        smattn_contiguous_strides(&p, 'l', out.lse.stride) || smattn_contiguous_strides(&p, 'k', in.k.stride) ||
        smattn_contiguous_strides(&p, 'v', in.v.stride))
        return 3;
    if (bhtd) { /* [B, Hkv, T, D]: a head's keys adjacent, the heads T * D apart */
        const int64_t st[4] = {HKV * T * HD, HD, T * HD, 1};
        memcpy(in.k.stride, st, sizeof st);
        memcpy(in.v.stride, st, sizeof st);
    }
    smattn_opt_config cfg = {threads, isa};
    for (int r = -1; r < runs; r++) { /* run -1: the warm-up */
        if (flush)
            for (size_t i = 0; i < flush_bytes; i += 64)
                flush[i]++;
        double t0 = bench_now();
        smattn_status st = smattn_attention(&p, &in, &out, &cfg);
        double dt = bench_now() - t0;
        if (st != SMATTN_OK) {
            fprintf(stderr, "bench_shape: smattn_attention: %s\n", smattn_status_name(st));
            return 1;
        }
        if (r >= 0)
            t[r] = dt;
    }
    bench_sort(t, (size_t)runs);
    uint64_t h = 1469598103934665603u;
    h = hash_bytes(h, o, nq * smattn_dtype_size(ot));
    h = hash_bytes(h, lse, nl * smattn_dtype_size(ot));
    char pages[48] = ""; /* whether the advice was taken: the process's memory on huge pages */
    if (huge)
        snprintf(pages, sizeof pages, " pages=huge (%ld kB on huge pages)", bench_anon_huge_kb());
    printf("S=%lld T=%lld q=%s kv=%s o=%s layout=%s%s isa=%s threads=%d %s: median %.3f ms, "
           "best %.3f ms (%d runs); output hash %016llx\n",
           (long long)S, (long long)T, smattn_dtype_name(qt), smattn_dtype_name(kvt),
           smattn_dtype_name(ot), bhtd ? "bhtd" : "bthd", pages, isa ? isa : "default", threads,
           warm ? "warm" : "caches flushed", 1e3 * t[runs / 2], 1e3 * t[0], runs,
           (unsigned long long)h);
    free(q), free(o), free(k), free(v), free(lse), free(flush), free(t);
    return 0;
}
