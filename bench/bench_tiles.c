/* SPDX-License-Identifier: MIT */
/* bench_tiles.c: `make bench-tiles`: the kernel's micro-kernels alone, one thread, on a
 * tile that stays in cache, beside one core's measured FMA peak: what the scores and the
 * P.V could reach if memory and the surrounding work cost nothing (`make bench-phases`
 * gives what they reach inside the kernel). */
#include <stdio.h>

#include "bench/bench_machine.h"
#include "bench/bench_tiles.h"
#include "smattn.h"

int main(void)
{
    printf("bench-tiles: micro-kernels on one 64-row x 64-key tile, D = Dv = 128, f32, one "
           "thread, best of 5 rounds of 2000 calls\n\n");
    static const char *const isas[] = {"avx2", "avx512"};
    bench_tiles_result res[2];
    double peak[2];
    int ran[2] = {0, 0};
    for (int k = 0; k < 2; k++) { /* each ISA measured once, for both tables */
        if (!smattn_opt_isa_available(isas[k]) || !bench_fma_available(isas[k]))
            continue;
        if (k == 0)
            bench_tiles_avx2(&res[k]);
        else
            bench_tiles_avx512(&res[k]);
        peak[k] = bench_fma_peak(isas[k], 1, 5, 0.15);
        ran[k] = 1;
    }
    printf("%-7s %10s %14s %14s %14s %16s\n", "ISA", "FMA peak", "qk (hsum)", "qkt (lanes)",
           "p.v (full)", "transposition");
    for (int k = 0; k < 2; k++) {
        const bench_tiles_result *r = &res[k];
        if (ran[k])
            printf("%-7s %10.1f %7.1f (%3.0f%%) %7.1f (%3.0f%%) %7.1f (%3.0f%%) %10.0f ns\n",
                   isas[k], peak[k], r->qk, 100 * r->qk / peak[k], r->qkt, 100 * r->qkt / peak[k],
                   r->pv, 100 * r->pv / peak[k], r->transpose_ns);
    }
    printf("\nGFLOP/s: 2 * 64 * 64 * 128 flops per call; in parentheses, of one core's FMA peak "
           "(the same ISA's loop).\ntransposition: one 64-key tile of K into the lanes layout "
           "(qkt's input).\n");
    printf("\nThe decode's micro-kernels: 4 KV heads of 7-head groups (S = 1, Hq = 28, Hkv = 4) "
           "against one 64-key tile,\nns per (key, query head); FMA bound: its 2 D flops "
           "at the peak above;\nkeys in the lanes would add the "
           "tile's transposition, shared by the 7 heads of a group (transposition / 448).\n\n");
    printf("%-7s %9s %10s %10s %10s %10s %14s\n", "ISA", "FMA bound", "qk f32", "qk f16",
           "p.v f32", "p.v f16", "transposition");
    for (int k = 0; k < 2; k++) {
        const bench_tiles_result *r = &res[k];
        if (ran[k])
            printf("%-7s %9.2f %10.2f %10.2f %10.2f %10.2f %14.2f\n", isas[k],
                   2.0 * 128 / peak[k] /* ns: 2 D flops per (key, head) */, r->dec_qk[0],
                   r->dec_qk[1], r->dec_pv[0], r->dec_pv[1], r->transpose_ns / (64.0 * 7));
    }
    return 0;
}
