/* SPDX-License-Identifier: MIT */
/* builtin.c: the built-in optimised kernel (opt/, smattn_attention) as a plugin, so that
 * `smattn conform` judges it exactly as it judges any other kernel: one thread per case
 * (the checker runs cases in child processes), the precision model smattn_opt_precision. */
#include <stdio.h>

#include "conform/conform.h"

const smattn_plugin_info *conform_builtin_describe(uint32_t host_abi)
{
    (void)host_abi;
    static smattn_plugin_info info;
    static char version[48];
    snprintf(version, sizeof version, "%d.%d.%d %s", SMATTN_VERSION_MAJOR, SMATTN_VERSION_MINOR,
             SMATTN_VERSION_PATCH, smattn_opt_isa());
    smattn_problem one = smattn_problem_default();
    one.B = one.S = one.T = one.Hq = one.Hkv = one.D = one.Dv = 1;
    info.abi_version = SMATTN_PLUGIN_ABI_VERSION;
    info.struct_size = (uint32_t)sizeof info;
    info.name = "smattn-opt";
    info.version = version;
    /* smattn.h: every mask kind, softcap, sinks, any strides, O, LSE and P. */
    info.caps =
        SMATTN_CAP_CAUSAL_LOWER_RIGHT | SMATTN_CAP_CAUSAL_UPPER_LEFT | SMATTN_CAP_WINDOW |
        SMATTN_CAP_KV_LENS | SMATTN_CAP_Q_LENS | SMATTN_CAP_BOOL_MASK | SMATTN_CAP_BIAS |
        SMATTN_CAP_SINKS | SMATTN_CAP_SOFTCAP | SMATTN_CAP_GQA | SMATTN_CAP_STRIDES |
        SMATTN_CAP_LSE | SMATTN_CAP_P | SMATTN_CAP_DV |
        SMATTN_CAP_DETERMINISTIC | /* bitwise at any thread count (smattn.h) */
        /* ragged and paged batches, bit for bit the dense twin (SPEC 2.7) */
        SMATTN_CAP_PACKED_Q | SMATTN_CAP_PACKED_KV | SMATTN_CAP_PAGED_NHD | SMATTN_CAP_PAGED_HND |
        SMATTN_CAP_DESCALE_TENSOR | SMATTN_CAP_DESCALE_HEAD | /* SPEC 2.9 */
        /* ALiBi from slopes, every mode (SPEC 2.8) */
        SMATTN_CAP_ALIBI_SYMMETRIC | SMATTN_CAP_ALIBI_ONE_SIDED | SMATTN_CAP_ALIBI_MASK |
        /* smattn_attention_backward: bitwise at any thread count (SPEC 10.8), with
         * dBias (in a bias's own shape too) and dSinks */
        SMATTN_CAP_BACKWARD_DETERMINISTIC | SMATTN_CAP_BACKWARD_DBIAS | SMATTN_CAP_BACKWARD_DSINKS;
    /* every tensor in f32, f16 or bf16 (smattn.h) */
    const uint32_t floats =
        SMATTN_DTYPE_BIT(SMATTN_F32) | SMATTN_DTYPE_BIT(SMATTN_F16) | SMATTN_DTYPE_BIT(SMATTN_BF16);
    /* and fp8 Q, K and V, q8_0 and q4_0 K and V, read exactly (SPEC 6.11: smattn's kernel) */
    const uint32_t fp8 = SMATTN_DTYPE_BIT(SMATTN_F8E4M3) | SMATTN_DTYPE_BIT(SMATTN_F8E5M2);
    const uint32_t blocks = SMATTN_DTYPE_BIT(SMATTN_Q8_0) | SMATTN_DTYPE_BIT(SMATTN_Q4_0);
    info.q_dtypes = floats | fp8;
    info.kv_dtypes = floats | fp8 | blocks;
    info.out_dtypes = floats;
    info.max_head_dim = 0;
    info.empty_rows = SMATTN_EMPTY_ZERO;
    info.empty_lse = SMATTN_LSE_NEG_INF;
    info.precision = smattn_opt_precision(&one); /* used only without the precision hook */
    return &info;
}

/* Threads for the next calls: 1 unless the checker asks for more (its determinism rerun). */
static int builtin_threads = 1;

int conform_builtin_threads(int n)
{
    if (n < 1)
        return -1;
    builtin_threads = n;
    return 0;
}

int conform_builtin_attention(const smattn_problem *p, const smattn_inputs *in,
                              const smattn_outputs *out)
{
    smattn_opt_config cfg = {builtin_threads, NULL};
    return (int)smattn_attention(p, in, out, &cfg);
}

int conform_builtin_softmax(const smattn_problem *p, const smattn_inputs *in,
                            const smattn_outputs *out)
{
    smattn_opt_config cfg = {builtin_threads, NULL};
    return (int)smattn_softmax(p, in, out, &cfg);
}

int conform_builtin_merge(const smattn_merge_problem *p, const smattn_merge_inputs *in,
                          const smattn_outputs *out)
{
    smattn_opt_config cfg = {builtin_threads, NULL};
    return (int)smattn_merge(p, in, out, &cfg);
}

int conform_builtin_backward(const smattn_problem *p, const smattn_inputs *in,
                             const smattn_forward_saved *saved, const smattn_grad_inputs *gin,
                             const smattn_grad_outputs *out)
{
    smattn_opt_config cfg = {builtin_threads, NULL};
    return (int)smattn_attention_backward(p, in, saved, gin, out, &cfg);
}

smattn_precision conform_builtin_precision(const smattn_problem *p)
{
    return smattn_opt_precision(p);
}
