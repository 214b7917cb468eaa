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

/* The decode's micro-kernels as kernel_body.h's attention_item calls them at S = 1 with
 * Hq = 28, Hkv = 4: one item of BT_HKV KV heads, each a unit of 7 rows (a GQA group),
 * against one 64-key tile of K and V stored [key][head][D] (the rows of one head
 * BT_HKV * D apart), f32 (t = 0) and f16 (t = 1): ns per (key, query head). */
#define BT_HKV 4
#define BT_G 7
#define BT_DREPS 4000
static void bt_decode(bench_tiles_result *r)
{
    float *QP = aligned_alloc(64, sizeof(float) * BT_HKV * 8 * BT_D);
    float *S = aligned_alloc(64, sizeof(float) * BT_HKV * 8 * OPT_BK);
    float *ACC = aligned_alloc(64, sizeof(float) * BT_HKV * 8 * BT_D);
    float *PB = aligned_alloc(64, sizeof(float) * 8 * OPT_BK * VLEN);
    float *Kf = aligned_alloc(64, sizeof(float) * OPT_BK * BT_HKV * BT_D);
    uint16_t *Kh = aligned_alloc(64, sizeof(uint16_t) * OPT_BK * BT_HKV * BT_D);
    const char **KR = malloc(sizeof(char *) * 2 * BT_HKV * OPT_BK);
    if (!QP || !S || !ACC || !PB || !Kf || !Kh || !KR)
        goto out;
    for (int i = 0; i < BT_HKV * 8 * BT_D; i++)
        QP[i] = 0.001f * (float)(i % 7), ACC[i] = 0.0f;
    for (int i = 0; i < BT_HKV * 8 * OPT_BK; i++)
        S[i] = 0.001f;
    for (int i = 0; i < OPT_BK * BT_HKV * BT_D; i++)
        Kf[i] = 0.01f * (float)(i % 5), Kh[i] = 0x3c00; /* binary16 1.0 */
    for (int u = 0; u < BT_HKV; u++)
        for (int j = 0; j < OPT_BK; j++) {
            KR[u * OPT_BK + j] = (const char *)(Kf + (j * BT_HKV + u) * BT_D);
            KR[(BT_HKV + u) * OPT_BK + j] = (const char *)(Kh + (j * BT_HKV + u) * BT_D);
        }
    opt_prefetch pf;
    memset(&pf, 0, sizeof pf);
    volatile int64_t nk_v = OPT_BK; /* the kernel's tile size is not a constant there either */
    const int64_t nk = nk_v;
    double best[4] = {1e30, 1e30, 1e30, 1e30};
    for (int round = 0; round < BT_ROUNDS; round++) {
        double t[5];
        t[0] = bench_now();
        for (int k = 0; k < BT_DREPS; k++)
            KTN(qk_keys, f32)(QP, 8 * BT_D, KR, NULL, 0, BT_HKV, nk, BT_D, S, 8 * OPT_BK, BT_G);
        t[1] = bench_now();
        for (int k = 0; k < BT_DREPS; k++)
            KTN(qk_keys, f16)(QP, 8 * BT_D, KR + BT_HKV * OPT_BK, NULL, 0, BT_HKV, nk, BT_D, S,
                              8 * OPT_BK, BT_G);
        t[2] = bench_now();
        for (int k = 0; k < BT_DREPS; k++)
            for (int u = 0; u < BT_HKV; u++)
                KTN(pv_group, f32)(ACC + u * 8 * BT_D, BT_D, S + u * 8 * OPT_BK, BT_G,
                                   Kf + u * BT_D, BT_HKV * BT_D, nk, BT_D, &pf, PB);
        t[3] = bench_now();
        for (int k = 0; k < BT_DREPS; k++)
            for (int u = 0; u < BT_HKV; u++)
                KTN(pv_group, f16)(ACC + u * 8 * BT_D, BT_D, S + u * 8 * OPT_BK, BT_G,
                                   Kh + u * BT_D, BT_HKV * BT_D, nk, BT_D, &pf, PB);
        t[4] = bench_now();
        for (int k = 0; k < 4; k++)
            best[k] = t[k + 1] - t[k] < best[k] ? t[k + 1] - t[k] : best[k];
    }
    const double kh = (double)BT_DREPS * OPT_BK * BT_HKV * BT_G; /* (key, query head) pairs */
    r->dec_qk[0] = best[0] / kh * 1e9, r->dec_qk[1] = best[1] / kh * 1e9;
    r->dec_pv[0] = best[2] / kh * 1e9, r->dec_pv[1] = best[3] / kh * 1e9;
out:
    free(QP), free(S), free(ACC), free(PB), free(Kf), free(Kh), free(KR);
}

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
    bt_decode(r);
out:
    free(Q), free(QP), free(K), free(KT), free(S), free(ACC), free(VIS), free(F);
}
