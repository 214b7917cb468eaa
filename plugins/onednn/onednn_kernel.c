/* SPDX-License-Identifier: MIT */
/* onednn_kernel.c: oneDNN (Debian libdnnl-dev, 2.6) composed into attention, as a plugin of
 * include/smattn_kernel.h, so that `smattn conform` can judge a real third-party library.
 *
 * Per batch b and query head h, four oneDNN primitives on the CPU engine, float32:
 *   scores = scale * Q_bh K_g^T      matmul with an output scale     [S, T]
 *   scores = scores + A_bh           binary add                       [S, T]
 *   P      = softmax(scores, axis 1) softmax v2, "accurate"            [S, T]
 *   O_bh   = P V_g                   matmul                           [S, Dv]
 * with g = h / (Hq / Hkv). A_bh is the additive mask that frameworks build from the
 * structural rules (causal, window, kv_lens, q_lens, the bool mask): -inf where they hide a
 * key, else the bias (0 without one). This is the plain padded-batch composition: the
 * matmuls run over all T keys, padding included, as PyTorch's math path does. Q, K and V are
 * gathered into contiguous buffers first, so any strides work; O and P are scattered back.
 *
 * What it claims is what the composition does (plugins/onednn/README.md has the run):
 * float32 only, no LSE (the softmax primitive does not return it), no sinks, no softcap,
 * and the NaN convention for fully masked rows (softmax of a row of -inf).
 */
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <oneapi/dnnl/dnnl.h>

#include "smattn_kernel.h"

#define CHECK(call)                                                                          \
    do {                                                                                     \
        if ((call) != dnnl_success)                                                          \
            goto fail;                                                                       \
    } while (0)

static float load4(const smattn_tensor *t, int64_t a, int64_t b, int64_t c, int64_t d)
{
    const float *f = t->data;
    return f[a * t->stride[0] + b * t->stride[1] + c * t->stride[2] + d * t->stride[3]];
}

/* The additive mask of row (b, h, i), key j: the visibility rules of SPEC 3.1-3.3 and the
 * bool mask give -inf; otherwise the bias (read only there, SPEC 3.6), or 0. */
static float additive_mask(const smattn_problem *p, const smattn_inputs *in, int64_t b,
                           int64_t h, int64_t i, int64_t j)
{
    int64_t Sb = p->q_lens ? p->q_lens[b] : p->S;
    int64_t Tb = p->kv_lens ? p->kv_lens[b] : p->T;
    int64_t d = p->causal == SMATTN_CAUSAL_UPPER_LEFT ? i : i + Tb - Sb;
    int hidden = i >= Sb || j >= Tb || (p->causal != SMATTN_CAUSAL_NONE && j > d) ||
                 (p->window_left >= 0 && j < d - p->window_left) ||
                 (p->window_right >= 0 && j > d + p->window_right);
    if (!hidden && in->mask.data) {
        const unsigned char *m = in->mask.data;
        const int64_t *st = in->mask.stride;
        hidden = !m[b * st[0] + h * st[1] + i * st[2] + j * st[3]];
    }
    if (hidden)
        return -INFINITY;
    return in->bias.data ? load4(&in->bias, b, h, i, j) : 0.0f;
}

/* A plain row-major [rows, cols] float32 memory over buf. */
static dnnl_status_t make_mem(dnnl_memory_t *mem, dnnl_memory_desc_t *md, int64_t rows,
                              int64_t cols, int transposed, dnnl_engine_t eng, void *buf)
{
    dnnl_dims_t dims = {rows, cols};
    dnnl_status_t s = dnnl_memory_desc_init_by_tag(md, 2, dims, dnnl_f32,
                                                   transposed ? dnnl_ba : dnnl_ab);
    return s != dnnl_success ? s : dnnl_memory_create(mem, md, eng, buf);
}

static int supported(const smattn_problem *p, const smattn_inputs *in, const smattn_outputs *out)
{
    if (p->op != SMATTN_OP_ATTENTION || p->softcap > 0 || in->sinks.data || out->lse.data)
        return 0;
    if (p->empty_rows != SMATTN_EMPTY_NAN)
        return 0;
    const smattn_tensor *f32_in[] = {&in->q, &in->k, &in->v, &in->bias};
    for (size_t t = 0; t < 4; t++)
        if (f32_in[t]->data && f32_in[t]->dtype != SMATTN_F32)
            return 0;
    if (in->mask.data && in->mask.dtype != SMATTN_BOOL)
        return 0;
    if (out->o.dtype != SMATTN_F32 || (out->p.data && out->p.dtype != SMATTN_F32))
        return 0;
    return 1;
}

const smattn_plugin_info *smattn_plugin_describe(uint32_t host_abi);
int smattn_plugin_attention(const smattn_problem *p, const smattn_inputs *in,
                            const smattn_outputs *out);

int smattn_plugin_attention(const smattn_problem *p, const smattn_inputs *in,
                            const smattn_outputs *out)
{
    if (!p || !in || !out || !out->o.data)
        return SMATTN_ERR_NULL;
    if (!supported(p, in, out))
        return SMATTN_ERR_UNSUPPORTED;
    const int64_t S = p->S, T = p->T, D = p->D, Dv = p->Dv;
    int status = SMATTN_ERR_INTERNAL;
    float *q = malloc(sizeof(float) * (size_t)(S * D)), *k = malloc(sizeof(float) * (size_t)(T * D));
    float *v = malloc(sizeof(float) * (size_t)(T * Dv)), *a = malloc(sizeof(float) * (size_t)(S * T));
    float *sc = malloc(sizeof(float) * (size_t)(S * T)), *pr = malloc(sizeof(float) * (size_t)(S * T));
    float *o = malloc(sizeof(float) * (size_t)(S * Dv));
    dnnl_engine_t eng = NULL;
    dnnl_stream_t stream = NULL;
    dnnl_primitive_attr_t attr = NULL;
    dnnl_memory_t mq = NULL, mk = NULL, mv = NULL, ma = NULL, ms = NULL, mp = NULL, mo = NULL;
    dnnl_primitive_desc_t pd[4] = {NULL, NULL, NULL, NULL};
    dnnl_primitive_t prim[4] = {NULL, NULL, NULL, NULL};
    if (!q || !k || !v || !a || !sc || !pr || !o) {
        status = SMATTN_ERR_NOMEM;
        goto fail;
    }
    CHECK(dnnl_engine_create(&eng, dnnl_cpu, 0));
    CHECK(dnnl_stream_create(&stream, eng, dnnl_stream_default_flags));
    dnnl_memory_desc_t dq, dk, dv, da, ds, dp, dout;
    CHECK(make_mem(&mq, &dq, S, D, 0, eng, q));
    CHECK(make_mem(&mk, &dk, D, T, 1, eng, k)); /* K^T: a [D, T] view of row-major [T, D] */
    CHECK(make_mem(&mv, &dv, T, Dv, 0, eng, v));
    CHECK(make_mem(&ma, &da, S, T, 0, eng, a));
    CHECK(make_mem(&ms, &ds, S, T, 0, eng, sc));
    CHECK(make_mem(&mp, &dp, S, T, 0, eng, pr));
    CHECK(make_mem(&mo, &dout, S, Dv, 0, eng, o));

    /* scores = scale * Q K^T: the scale rounded to binary32 once, applied once */
    const float scale = (float)p->scale;
    CHECK(dnnl_primitive_attr_create(&attr));
    CHECK(dnnl_primitive_attr_set_output_scales(attr, 1, 0, &scale));
    dnnl_matmul_desc_t mm1, mm2;
    dnnl_binary_desc_t add;
    dnnl_softmax_v2_desc_t smx;
    CHECK(dnnl_matmul_desc_init(&mm1, &dq, &dk, NULL, &ds));
    CHECK(dnnl_primitive_desc_create(&pd[0], &mm1, attr, eng, NULL));
    CHECK(dnnl_binary_desc_init(&add, dnnl_binary_add, &ds, &da, &ds));
    CHECK(dnnl_primitive_desc_create(&pd[1], &add, NULL, eng, NULL));
    CHECK(dnnl_softmax_v2_forward_desc_init(&smx, dnnl_forward_inference, dnnl_softmax_accurate,
                                            &ds, &dp, 1));
    CHECK(dnnl_primitive_desc_create(&pd[2], &smx, NULL, eng, NULL));
    CHECK(dnnl_matmul_desc_init(&mm2, &dp, &dv, NULL, &dout));
    CHECK(dnnl_primitive_desc_create(&pd[3], &mm2, NULL, eng, NULL));
    for (int n = 0; n < 4; n++)
        CHECK(dnnl_primitive_create(&prim[n], pd[n]));

    dnnl_exec_arg_t a_mm1[] = {{DNNL_ARG_SRC, mq}, {DNNL_ARG_WEIGHTS, mk}, {DNNL_ARG_DST, ms}};
    dnnl_exec_arg_t a_add[] = {{DNNL_ARG_SRC_0, ms}, {DNNL_ARG_SRC_1, ma}, {DNNL_ARG_DST, ms}};
    dnnl_exec_arg_t a_smx[] = {{DNNL_ARG_SRC, ms}, {DNNL_ARG_DST, mp}};
    dnnl_exec_arg_t a_mm2[] = {{DNNL_ARG_SRC, mp}, {DNNL_ARG_WEIGHTS, mv}, {DNNL_ARG_DST, mo}};
    for (int64_t b = 0; b < p->B; b++)
        for (int64_t h = 0; h < p->Hq; h++) {
            int64_t g = h / (p->Hq / p->Hkv);
            for (int64_t i = 0; i < S; i++)
                for (int64_t d = 0; d < D; d++)
                    q[i * D + d] = load4(&in->q, b, i, h, d);
            for (int64_t j = 0; j < T; j++) {
                for (int64_t d = 0; d < D; d++)
                    k[j * D + d] = load4(&in->k, b, j, g, d);
                for (int64_t c = 0; c < Dv; c++)
                    v[j * Dv + c] = load4(&in->v, b, j, g, c);
            }
            for (int64_t i = 0; i < S; i++)
                for (int64_t j = 0; j < T; j++)
                    a[i * T + j] = additive_mask(p, in, b, h, i, j);
            CHECK(dnnl_primitive_execute(prim[0], stream, 3, a_mm1));
            CHECK(dnnl_primitive_execute(prim[1], stream, 3, a_add));
            CHECK(dnnl_primitive_execute(prim[2], stream, 2, a_smx));
            CHECK(dnnl_primitive_execute(prim[3], stream, 3, a_mm2));
            CHECK(dnnl_stream_wait(stream));
            float *O = out->o.data;
            const int64_t *so = out->o.stride;
            for (int64_t i = 0; i < S; i++)
                for (int64_t c = 0; c < Dv; c++)
                    O[b * so[0] + i * so[1] + h * so[2] + c * so[3]] = o[i * Dv + c];
            if (out->p.data) {
                float *P = out->p.data;
                const int64_t *sp = out->p.stride;
                for (int64_t i = 0; i < S; i++)
                    for (int64_t j = 0; j < T; j++)
                        P[b * sp[0] + h * sp[1] + i * sp[2] + j * sp[3]] = pr[i * T + j];
            }
        }
    status = SMATTN_OK;
fail:
    for (int n = 0; n < 4; n++) {
        if (prim[n])
            dnnl_primitive_destroy(prim[n]);
        if (pd[n])
            dnnl_primitive_desc_destroy(pd[n]);
    }
    dnnl_memory_t mems[] = {mq, mk, mv, ma, ms, mp, mo};
    for (size_t n = 0; n < sizeof mems / sizeof mems[0]; n++)
        if (mems[n])
            dnnl_memory_destroy(mems[n]);
    if (attr)
        dnnl_primitive_attr_destroy(attr);
    if (stream)
        dnnl_stream_destroy(stream);
    if (eng)
        dnnl_engine_destroy(eng);
    free(q), free(k), free(v), free(a), free(sc), free(pr), free(o);
    return status;
}

static const smattn_plugin_info info = {
    .abi_version = SMATTN_PLUGIN_ABI_VERSION,
    .struct_size = sizeof(smattn_plugin_info),
    .name = "onednn-2.6",
    .version = "oneDNN " "2.6 matmul + binary add + softmax v2 (accurate) + matmul",
    .caps = SMATTN_CAP_CAUSAL_LOWER_RIGHT | SMATTN_CAP_CAUSAL_UPPER_LEFT | SMATTN_CAP_WINDOW |
            SMATTN_CAP_KV_LENS | SMATTN_CAP_Q_LENS | SMATTN_CAP_BOOL_MASK | SMATTN_CAP_BIAS |
            SMATTN_CAP_GQA | SMATTN_CAP_STRIDES | SMATTN_CAP_P | SMATTN_CAP_DV,
    .q_dtypes = SMATTN_DTYPE_BIT(SMATTN_F32),
    .kv_dtypes = SMATTN_DTYPE_BIT(SMATTN_F32),
    .out_dtypes = SMATTN_DTYPE_BIT(SMATTN_F32),
    .max_head_dim = 0,
    .empty_rows = SMATTN_EMPTY_NAN, /* softmax of a row of -inf */
    .empty_lse = SMATTN_LSE_NEG_INF,
    /* binary32 matmuls in any order (SPEC 6.1 R2), the scale applied once as an output
     * scale; softmax: max, exp(x - max), sum, then P = exp * (1/sum) rounded to binary32
     * before the second matmul (u_p = 2^-24); oneDNN's own vectorised exp, whose error
     * grows with |x| (measured through the softmax: 2.7 ulps at x = -20, 4.3 at -77, 5.7
     * near -87; README.md), hence 6 ulps; tiny = FLT_MIN: it flushes every result below
     * 2^-125.5 (x < -86.99) to zero, some of them normal. */
    .precision = {.u_score = 0x1p-24, .u_acc = 0x1p-24, .exp_ulps = 6.0, .u_p = 0x1p-24,
                  .blocks = 1, .acc_len = 0, .tiny = 0x1p-126},
};

const smattn_plugin_info *smattn_plugin_describe(uint32_t host_abi)
{
    (void)host_abi;
    return &info;
}
