/* SPDX-License-Identifier: MIT */
/* tiles_body.h: times the micro-kernels of one kernel_body.h instance (included after it,
 * with its KN/KTN names) on a 64-row x 64-key tile, D = Dv = 128, f32, one thread: the
 * best of 5 rounds of 2000 calls. The data are the same every call, so the tile stays in
 * L1/L2: the micro-kernels' ceiling, not the kernel's speed. */
#include <stdlib.h>
#include <string.h>

#include "bench/bench_machine.h"
#include "bench/bench_tiles.h"

#define BT_ROWS 64
#define BT_D 128
#define BT_REPS 2000
#define BT_ROUNDS 5

void BT_ENTRY(bench_tiles_result *r)
{
    memset(r, 0, sizeof *r);
    float *Q = aligned_alloc(64, sizeof(float) * BT_ROWS * BT_D);
    float *QP = aligned_alloc(64, sizeof(float) * BT_ROWS * BT_D);
    float *K = aligned_alloc(64, sizeof(float) * OPT_BK * BT_D);
    float *KT = aligned_alloc(64, sizeof(float) * OPT_BK * BT_D);
    float *S = aligned_alloc(64, sizeof(float) * BT_ROWS * OPT_BK);
    float *ACC = aligned_alloc(64, sizeof(float) * BT_ROWS * BT_D);
    unsigned char *VIS = calloc(BT_ROWS * OPT_BK, 1), *F = malloc(BT_ROWS);
    if (!Q || !QP || !K || !KT || !S || !ACC || !VIS || !F)
        goto out;
    for (int i = 0; i < BT_ROWS * BT_D; i++)
        Q[i] = QP[i] = 0.001f * (float)(i % 7), ACC[i] = 0.0f;
    for (int i = 0; i < OPT_BK * BT_D; i++)
        K[i] = KT[i] = 0.01f * (float)(i % 5);
    for (int i = 0; i < BT_ROWS * OPT_BK; i++)
        S[i] = 0.001f;
    memset(F, 1, BT_ROWS);
    opt_prefetch pf;
    memset(&pf, 0, sizeof pf);
    const double flops = 2.0 * BT_ROWS * OPT_BK * BT_D * BT_REPS;
    double best[4] = {1e30, 1e30, 1e30, 1e30};
    for (int round = 0; round < BT_ROUNDS; round++) {
        double t0 = bench_now();
        for (int k = 0; k < BT_REPS; k++)
            KTN(qk_tile, f32)(Q, QP, BT_ROWS, BT_ROWS, BT_D, K, BT_D, OPT_BK, S, &pf);
        double t1 = bench_now();
        for (int k = 0; k < BT_REPS; k++)
            KN(qkt_tile)(Q, BT_ROWS, BT_D, BT_D, KT, S, OPT_BK, NULL, 0, NULL);
        double t2 = bench_now();
        for (int k = 0; k < BT_REPS; k++)
            KTN(transpose_tile, f32)(K, BT_D, OPT_BK, BT_D, KT, &pf);
        double t3 = bench_now();
        for (int k = 0; k < BT_REPS; k++)
            KTN(pv_tile, f32)(ACC, BT_D, S, VIS, F, BT_ROWS, BT_ROWS, K, BT_D, OPT_BK, BT_D, &pf, 0);
        double t4 = bench_now();
        const double t[4] = {t1 - t0, t2 - t1, t3 - t2, t4 - t3};
        for (int k = 0; k < 4; k++)
            best[k] = t[k] < best[k] ? t[k] : best[k];
    }
    r->qk = flops / best[0] * 1e-9;
    r->qkt = flops / best[1] * 1e-9;
    r->transpose_ns = best[2] / BT_REPS * 1e9;
    r->pv = flops / best[3] * 1e-9;
out:
    free(Q), free(QP), free(K), free(KT), free(S), free(ACC), free(VIS), free(F);
}
