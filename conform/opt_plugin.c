/* SPDX-License-Identifier: MIT */
/* opt_plugin.c: the exported entry points of build/plugins/smattn_opt.so, the built-in
 * kernel as a loadable plugin (the same functions `--kernel builtin` calls in process). */
#include "conform/conform.h"

/* Exported (conform/smattn_opt.map keeps every other symbol local). */
const smattn_plugin_info *smattn_plugin_describe(uint32_t host_abi);
int smattn_plugin_attention(const smattn_problem *p, const smattn_inputs *in,
                            const smattn_outputs *out);
int smattn_plugin_softmax(const smattn_problem *p, const smattn_inputs *in,
                          const smattn_outputs *out);
smattn_precision smattn_plugin_precision(const smattn_problem *p);
int smattn_plugin_threads(int n);

int smattn_plugin_threads(int n)
{
    return conform_builtin_threads(n);
}

const smattn_plugin_info *smattn_plugin_describe(uint32_t host_abi)
{
    return conform_builtin_describe(host_abi);
}

int smattn_plugin_attention(const smattn_problem *p, const smattn_inputs *in,
                            const smattn_outputs *out)
{
    return conform_builtin_attention(p, in, out);
}

int smattn_plugin_softmax(const smattn_problem *p, const smattn_inputs *in,
                          const smattn_outputs *out)
{
    return conform_builtin_softmax(p, in, out);
}

smattn_precision smattn_plugin_precision(const smattn_problem *p)
{
    return conform_builtin_precision(p);
}

/* The merge of partial states (SPEC 9): smattn_merge. */
int smattn_plugin_merge(const smattn_merge_problem *p, const smattn_merge_inputs *in,
                        const smattn_outputs *out);
int smattn_plugin_merge(const smattn_merge_problem *p, const smattn_merge_inputs *in,
                        const smattn_outputs *out)
{
    return conform_builtin_merge(p, in, out);
}

/* The backward (SPEC 10): smattn_attention_backward from the forward's saved O and LSE. */
int smattn_plugin_backward(const smattn_problem *p, const smattn_inputs *in,
                           const smattn_forward_saved *saved, const smattn_grad_inputs *gin,
                           const smattn_grad_outputs *out);
int smattn_plugin_backward(const smattn_problem *p, const smattn_inputs *in,
                           const smattn_forward_saved *saved, const smattn_grad_inputs *gin,
                           const smattn_grad_outputs *out)
{
    return conform_builtin_backward(p, in, saved, gin, out);
}
