/* SPDX-License-Identifier: MIT */
/* probe_exp.c: the accuracy of the exp inside oneDNN's softmax, measured through the adapter.
 *
 * A row with two keys of scores 0 and x (x < -17) has P_1 = e^x / (1 + e^x); 1 + e^x rounds
 * to 1 in binary32 and the softmax's 1/sum is then exactly 1, so P_1 is oneDNN's exp(x)
 * itself. 2^19 values of x evenly spread over [-90, -17]; the error of each is taken against
 * the binary64 exp (accurate far beyond binary32's ulp) and reported per interval of 10.
 * Run: make onednn-probe-exp */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "smattn_kernel.h"

int smattn_plugin_attention(const smattn_problem *p, const smattn_inputs *in,
                            const smattn_outputs *out);

#define ROWS (1 << 16)
#define REPS 8
#define X_HI -17.0
#define X_LO -90.0

int main(void)
{
    float *q = malloc(ROWS * sizeof *q), *o = malloc(ROWS * sizeof *o);
    float *P = malloc(2 * ROWS * sizeof *P), k[2] = {0.0f, 1.0f}, v[2] = {0.0f, 0.0f};
    if (!q || !o || !P)
        return 1;
    double worst[8] = {0};
    long zero = 0, zero_normal = 0;
    double zero_normal_max = -INFINITY;
    for (int rep = 0; rep < REPS; rep++) {
        for (int i = 0; i < ROWS; i++)
            q[i] = (float)(X_HI - (rep * ROWS + i) * (X_HI - X_LO) / (REPS * ROWS));
        smattn_problem p;
        memset(&p, 0, sizeof p);
        p.B = 1, p.S = ROWS, p.T = 2, p.Hq = p.Hkv = 1, p.D = p.Dv = 1, p.scale = 1.0;
        p.window_left = p.window_right = -1, p.empty_rows = SMATTN_EMPTY_NAN;
        smattn_inputs in;
        memset(&in, 0, sizeof in);
        in.q = (smattn_tensor){q, SMATTN_F32, {ROWS, 1, 1, 1}};
        in.k = (smattn_tensor){k, SMATTN_F32, {2, 1, 1, 1}};
        in.v = (smattn_tensor){v, SMATTN_F32, {2, 1, 1, 1}};
        smattn_outputs out;
        memset(&out, 0, sizeof out);
        out.o = (smattn_out_tensor){o, SMATTN_F32, {ROWS, 1, 1, 1}};
        out.p = (smattn_out_tensor){P, SMATTN_F32, {2 * ROWS, 2 * ROWS, 2, 1}};
        if (smattn_plugin_attention(&p, &in, &out)) {
            fprintf(stderr, "probe_exp: the adapter failed\n");
            return 1;
        }
        for (int i = 0; i < ROWS; i++) {
            double x = q[i], e = exp(x), c = P[2 * i + 1];
            if (c == 0) {
                zero++;
                if (e >= 0x1p-126) {
                    zero_normal++;
                    zero_normal_max = fmax(zero_normal_max, x);
                }
                continue;
            }
            if (e < 0x1p-126)
                continue; /* subnormal results: none seen (they are flushed) */
            int ex;
            frexp(e, &ex);
            int b = (int)((X_HI - x) / 10);
            worst[b > 7 ? 7 : b] = fmax(worst[b > 7 ? 7 : b], fabs(c - e) / ldexp(1.0, ex - 24));
        }
    }
    printf("oneDNN 2.6 softmax exp, binary32, %d points in [%g, %g]:\n", REPS * ROWS, X_LO, X_HI);
    for (int b = 0; b < 7; b++)
        printf("  x in [%3.0f, %3.0f]: max error %.2f ulp\n", X_HI - 10 * (b + 1), X_HI - 10 * b,
               worst[b]);
    printf("  results flushed to 0: %ld, of which %ld have a normal exact value (x up to %a = %.4f)\n",
           zero, zero_normal, zero_normal_max, zero_normal_max);
    free(q), free(o), free(P);
    return 0;
}
