/* SPDX-License-Identifier: MIT */
/* bench_backward.c: the fast backward against the forward in the same run, on a prefill
 * step (S = T = 512, Hq = 28, Hkv = 4, D = Dv = 128, lower-right causal; bf16 Q, K, V and
 * dO, binary32 O, LSE and gradients), with the load average beside the times, since a
 * loaded machine moves both. Usage: bench_backward [--threads N] [--isa NAME] [--reps R]
 * [--S n] [--T n]. The target: backward within 3x of the forward. */
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

/* n bf16 values uniform in [-amp, amp] (round-to-nearest of the float's top 16 bits) */
static uint16_t *rand_bf16(size_t n, double amp)
{
    uint16_t *x = malloc(n * sizeof *x);
    for (size_t k = 0; x && k < n; k++) {
        double d = (2 * uniform() - 1) * amp;
        smattn_store(x, SMATTN_BF16, (int64_t)k, d);
    }
    return x;
}

static void loadavg(char *buf, size_t cap)
{
    FILE *f = fopen("/proc/loadavg", "r");
    buf[0] = 0;
    if (f) {
        if (!fgets(buf, (int)cap, f))
            buf[0] = 0;
        fclose(f);
    }
    size_t n = strlen(buf);
    if (n && buf[n - 1] == '\n')
        buf[n - 1] = 0;
}

int main(int argc, char **argv)
{
    int threads = 0, reps = 5;
    int64_t S = 512, T = 512;
    const char *isa = NULL;
    for (int a = 1; a + 1 < argc; a += 2) {
        if (!strcmp(argv[a], "--threads"))
            threads = atoi(argv[a + 1]);
        else if (!strcmp(argv[a], "--isa"))
            isa = argv[a + 1];
        else if (!strcmp(argv[a], "--reps"))
            reps = atoi(argv[a + 1]);
        else if (!strcmp(argv[a], "--S"))
            S = atoll(argv[a + 1]);
        else if (!strcmp(argv[a], "--T"))
            T = atoll(argv[a + 1]);
    }
    if (reps < 1 || reps > 100)
        reps = 5;
    smattn_problem p = smattn_problem_default();
    p.B = 1, p.S = S, p.T = T, p.Hq = 28, p.Hkv = 4, p.D = 128, p.Dv = 128;
    p.scale = smattn_default_scale(p.D);
    p.causal = SMATTN_CAUSAL_LOWER_RIGHT;
    const size_t nq = (size_t)(S * 28 * 128), nk = (size_t)(T * 4 * 128);
    uint16_t *q = rand_bf16(nq, 2), *k = rand_bf16(nk, 2), *v = rand_bf16(nk, 2),
             *dout = rand_bf16(nq, 1);
    float *o = malloc(nq * sizeof *o), *lse = malloc((size_t)(28 * S) * sizeof *lse);
    float *dq = malloc(nq * sizeof *dq), *dk = malloc(nk * sizeof *dk),
          *dv = malloc(nk * sizeof *dv);
    if (!q || !k || !v || !dout || !o || !lse || !dq || !dk || !dv) {
        fprintf(stderr, "bench_backward: out of memory\n");
        return 1;
    }
    smattn_inputs in;
    memset(&in, 0, sizeof in);
    in.q = (smattn_tensor){q, SMATTN_BF16, {0}};
    in.k = (smattn_tensor){k, SMATTN_BF16, {0}};
    in.v = (smattn_tensor){v, SMATTN_BF16, {0}};
    smattn_outputs out;
    memset(&out, 0, sizeof out);
    out.o = (smattn_out_tensor){o, SMATTN_F32, {0}};
    out.lse = (smattn_out_tensor){lse, SMATTN_F32, {0}};
    smattn_grad_inputs gin;
    memset(&gin, 0, sizeof gin);
    gin.dout = (smattn_tensor){dout, SMATTN_BF16, {0}};
    smattn_grad_outputs go;
    memset(&go, 0, sizeof go);
    go.dq = (smattn_out_tensor){dq, SMATTN_F32, {0}};
    go.dk = (smattn_out_tensor){dk, SMATTN_F32, {0}};
    go.dv = (smattn_out_tensor){dv, SMATTN_F32, {0}};
    smattn_forward_saved sv;
    memset(&sv, 0, sizeof sv);
    sv.o = (smattn_tensor){o, SMATTN_F32, {0}};
    sv.lse = (smattn_tensor){lse, SMATTN_F32, {0}};
    if (smattn_contiguous_strides(&p, 'q', in.q.stride) ||
        smattn_contiguous_strides(&p, 'k', in.k.stride) ||
        smattn_contiguous_strides(&p, 'v', in.v.stride) ||
        smattn_contiguous_strides(&p, 'o', out.o.stride) ||
        smattn_contiguous_strides(&p, 'l', out.lse.stride) ||
        smattn_contiguous_strides(&p, 'o', gin.dout.stride) ||
        smattn_contiguous_strides(&p, 'q', go.dq.stride) ||
        smattn_contiguous_strides(&p, 'k', go.dk.stride) ||
        smattn_contiguous_strides(&p, 'v', go.dv.stride) ||
        smattn_contiguous_strides(&p, 'o', sv.o.stride) ||
        smattn_contiguous_strides(&p, 'l', sv.lse.stride))
        return 1;
    smattn_opt_config cfg = {threads, isa};
    double tf[100], tb[100];
    char la0[128], la1[128];
    loadavg(la0, sizeof la0);
    /* alternate forward and backward so that both see the same load */
    for (int r = 0; r <= reps; r++) {
        double t0 = bench_now();
        smattn_status s1 = smattn_attention(&p, &in, &out, &cfg);
        double t1 = bench_now();
        smattn_status s2 = smattn_attention_backward(&p, &in, &sv, &gin, &go, &cfg);
        double t2 = bench_now();
        if (s1 || s2) {
            fprintf(stderr, "bench_backward: %s / %s\n", smattn_status_name(s1),
                    smattn_status_name(s2));
            return 1;
        }
        if (r > 0) { /* the first round warms the pool and the caches */
            tf[r - 1] = t1 - t0;
            tb[r - 1] = t2 - t1;
        }
    }
    loadavg(la1, sizeof la1);
    bench_sort(tf, (size_t)reps);
    bench_sort(tb, (size_t)reps);
    const double mf = tf[reps / 2], mb = tb[reps / 2];
    printf("backward vs forward: prefill S=%lld T=%lld Hq 28 Hkv 4 D 128 causal, bf16 in, isa "
           "%s, threads %d\n",
           (long long)S, (long long)T, isa ? isa : smattn_opt_isa(), threads);
    printf("  forward  median %.1f ms (best %.1f) over %d runs\n", mf * 1e3, tf[0] * 1e3, reps);
    printf("  backward median %.1f ms (best %.1f), %.2fx the forward (best/best %.2fx; "
           "target <= 3x)\n",
           mb * 1e3, tb[0] * 1e3, mb / mf, tb[0] / tf[0]);
    printf("  load average before: %s; after: %s\n", la0, la1);
    free(q), free(k), free(v), free(dout), free(o), free(lse), free(dq), free(dk), free(dv);
    return 0;
}
