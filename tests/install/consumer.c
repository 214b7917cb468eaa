/* SPDX-License-Identifier: MIT */
/* consumer.c: a program written as a user of the installed smattn would write it, built by
 * tests/install/test_install.sh with `pkg-config --cflags --libs smattn` and nothing else:
 * the fast kernel on a small causal GQA problem, judged against the oracle under the bound. */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "smattn.h"

enum { B = 1, S = 5, T = 7, HQ = 4, HKV = 2, D = 8 };

int main(void)
{
    static float q[B * S * HQ * D], k[B * T * HKV * D], v[B * T * HKV * D], o[B * S * HQ * D];
    static double exact[B * S * HQ * D], bound[B * S * HQ * D];
    unsigned x = 12345u;
    for (size_t i = 0; i < sizeof q / sizeof q[0]; i++)
        q[i] = (float)((x = x * 1103515245u + 12345u) >> 16 & 1023) / 512.0f - 1.0f;
    for (size_t i = 0; i < sizeof k / sizeof k[0]; i++) {
        k[i] = (float)((x = x * 1103515245u + 12345u) >> 16 & 1023) / 512.0f - 1.0f;
        v[i] = (float)((x = x * 1103515245u + 12345u) >> 16 & 1023) / 256.0f - 2.0f;
    }

    smattn_problem p = smattn_problem_default();
    p.B = B, p.S = S, p.T = T, p.Hq = HQ, p.Hkv = HKV, p.D = p.Dv = D;
    p.scale = smattn_default_scale(D);
    p.causal = SMATTN_CAUSAL_LOWER_RIGHT;
    smattn_inputs in;
    memset(&in, 0, sizeof in);
    in.q = (smattn_tensor){q, SMATTN_F32, {0}};
    in.k = (smattn_tensor){k, SMATTN_F32, {0}};
    in.v = (smattn_tensor){v, SMATTN_F32, {0}};
    smattn_contiguous_strides(&p, 'q', in.q.stride);
    smattn_contiguous_strides(&p, 'k', in.k.stride);
    smattn_contiguous_strides(&p, 'v', in.v.stride);
    smattn_outputs fast, ref, fmt, bnd;
    memset(&fast, 0, sizeof fast);
    fast.o = (smattn_out_tensor){o, SMATTN_F32, {0}};
    smattn_contiguous_strides(&p, 'o', fast.o.stride);
    ref = fmt = bnd = fast;
    ref.o.data = exact, ref.o.dtype = SMATTN_F64;
    bnd.o.data = bound, bnd.o.dtype = SMATTN_F64;

    smattn_status st = smattn_attention(&p, &in, &fast, NULL);
    if (st == SMATTN_OK)
        st = smattn_ref(&p, &in, &ref, NULL, NULL);
    smattn_precision pm = smattn_opt_precision(&p);
    if (st == SMATTN_OK)
        st = smattn_bound(&p, &in, &pm, &fmt, &bnd);
    if (st != SMATTN_OK) {
        fprintf(stderr, "consumer: %s: %s\n", smattn_status_name(st), smattn_status_str(st));
        return 1;
    }
    double worst = 0;
    for (size_t i = 0; i < sizeof o / sizeof o[0]; i++) {
        double r = smattn_error_ratio(o[i], exact[i], bound[i]);
        worst = r > worst || isnan(r) ? r : worst;
    }
    printf("consumer: smattn %d.%d.%d, kernel %s, max error/bound %.3g\n", SMATTN_VERSION_MAJOR,
           SMATTN_VERSION_MINOR, SMATTN_VERSION_PATCH, smattn_opt_isa(), worst);
    return worst <= 1 ? 0 : 1;
}
