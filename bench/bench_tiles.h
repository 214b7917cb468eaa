/* SPDX-License-Identifier: MIT */
/* bench_tiles.h: the kernel's micro-kernels alone on one tile that stays in L1/L2
 * (`make bench-tiles`): bench/tiles_body.h, built once per ISA (tiles_<isa>.c). */
#ifndef SMATTN_BENCH_TILES_H
#define SMATTN_BENCH_TILES_H

typedef struct bench_tiles_result {
    double qk;           /* GFLOP/s: the 8-row kernel with horizontal sums (qk_tile) */
    double qkt;          /* GFLOP/s: keys in the lanes on a transposed tile (qkt_tile) */
    double transpose_ns; /* one 64-key tile transposed */
    double pv;           /* GFLOP/s: P.V of a fully visible tile (pv_tile) */
    /* the decode's: ns per (key, query head) for 4 KV heads of 7-head groups against one
     * 64-key tile, K/V f32 and f16 (index 0, 1) */
    double dec_qk[2];    /* scores, keys outer (qk_keys: horizontal sums) */
    double dec_pv[2];    /* the group P.V (pv_group) */
} bench_tiles_result;

void bench_tiles_avx2(bench_tiles_result *r);
void bench_tiles_avx512(bench_tiles_result *r);

#endif
