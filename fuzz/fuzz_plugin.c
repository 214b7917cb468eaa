/* SPDX-License-Identifier: MIT */
/* fuzz_plugin.c: a kernel under test (a plugin of include/smattn_kernel.h, loaded from the
 * path in SMATTN_KERNEL) against the oracle under the SPEC 6 bound of the precision model
 * it claims; then again with NaN/inf garbage in every K/V slot beyond kv_lens, which no
 * query sees, judged against the same oracle. The decoded problem is adapted to the claims:
 * empty_rows/empty_lse set to the claimed conventions, K/V converted to float32 (exactly)
 * if their dtype is not claimed, LSE and P asked only if claimed; problems using a feature
 * the kernel does not claim are skipped. Any failure is a MISMATCH report (fuzz_check.h,
 * with the kernel named on the check: line), then abort(). */
#include <dlfcn.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fuzz/common/fuzz_check.h"
#include "fuzz/common/fuzz_input.h"
#include "smattn_kernel.h"

static struct {
    const char *path;
    const smattn_plugin_info *info;
    smattn_plugin_run_fn attention, softmax;
    smattn_plugin_precision_fn precision;
} kernel;

/* dlopen the plugin once; a missing or wrong plugin stops the campaign at once (exit 2). */
int LLVMFuzzerInitialize(int *argc, char ***argv)
{
    (void)argc, (void)argv;
    kernel.path = getenv("SMATTN_KERNEL");
    if (!kernel.path || !*kernel.path) {
        fprintf(stderr, "fuzz_plugin: set SMATTN_KERNEL to the plugin (.so) to fuzz\n");
        exit(2);
    }
    void *h = dlopen(kernel.path, RTLD_NOW | RTLD_LOCAL);
    if (!h) {
        fprintf(stderr, "fuzz_plugin: %s\n", dlerror());
        exit(2);
    }
    smattn_plugin_describe_fn describe;
    *(void **)&describe = dlsym(h, SMATTN_PLUGIN_DESCRIBE_SYMBOL);
    *(void **)&kernel.attention = dlsym(h, SMATTN_PLUGIN_ATTENTION_SYMBOL);
    *(void **)&kernel.softmax = dlsym(h, SMATTN_PLUGIN_SOFTMAX_SYMBOL);
    *(void **)&kernel.precision = dlsym(h, SMATTN_PLUGIN_PRECISION_SYMBOL);
    if (!describe || !kernel.attention) {
        fprintf(stderr, "fuzz_plugin: %s: no %s or %s\n", kernel.path,
                SMATTN_PLUGIN_DESCRIBE_SYMBOL, SMATTN_PLUGIN_ATTENTION_SYMBOL);
        exit(2);
    }
    kernel.info = describe(SMATTN_PLUGIN_ABI_VERSION);
    if (!kernel.info || kernel.info->abi_version != SMATTN_PLUGIN_ABI_VERSION) {
        fprintf(stderr, "fuzz_plugin: %s: plugin ABI %u, this build speaks %u\n", kernel.path,
                kernel.info ? kernel.info->abi_version : 0u, SMATTN_PLUGIN_ABI_VERSION);
        exit(2);
    }
    return 0;
}

/* Does the kernel claim every feature the problem uses? */
static int claimed(const fuzz_problem *fp)
{
    const smattn_problem *p = &fp->p;
    const smattn_plugin_info *k = kernel.info;
    uint32_t need = 0;
    if (p->causal == SMATTN_CAUSAL_LOWER_RIGHT)
        need |= SMATTN_CAP_CAUSAL_LOWER_RIGHT;
    if (p->causal == SMATTN_CAUSAL_UPPER_LEFT)
        need |= SMATTN_CAP_CAUSAL_UPPER_LEFT;
    if (p->window_left != -1 || p->window_right != -1)
        need |= SMATTN_CAP_WINDOW;
    if (p->kv_lens)
        need |= SMATTN_CAP_KV_LENS;
    if (p->q_lens)
        need |= SMATTN_CAP_Q_LENS;
    if (fp->in.mask.data)
        need |= SMATTN_CAP_BOOL_MASK;
    if (fp->in.bias.data)
        need |= SMATTN_CAP_BIAS;
    if (fp->in.sinks.data)
        need |= SMATTN_CAP_SINKS;
    if (p->softcap > 0)
        need |= SMATTN_CAP_SOFTCAP;
    if (p->op == SMATTN_OP_ATTENTION && p->Hq != p->Hkv)
        need |= SMATTN_CAP_GQA;
    if (p->op == SMATTN_OP_ATTENTION && p->Dv != p->D)
        need |= SMATTN_CAP_DV;
    if ((k->caps & need) != need)
        return 0;
    if (p->op == SMATTN_OP_SOFTMAX && !kernel.softmax)
        return 0;
    if (k->max_head_dim > 0 && p->op == SMATTN_OP_ATTENTION &&
        (p->D > k->max_head_dim || p->Dv > k->max_head_dim))
        return 0;
    const uint32_t f32 = SMATTN_DTYPE_BIT(SMATTN_F32); /* Q, outputs; K/V converted to it */
    return (k->q_dtypes & f32) && (k->out_dtypes & f32) &&
           (p->op == SMATTN_OP_SOFTMAX || (k->kv_dtypes & f32));
}

/* K or V of the decoded problem replaced by a float32 copy (exact: f16 and bf16 values are
 * binary32 numbers), so that the oracle, the kernel and the report all see the same. */
static void kv_to_f32(void **buf, smattn_tensor *t, size_t n)
{
    float *c = malloc((n ? n : 1) * sizeof *c);
    if (!c)
        abort();
    for (size_t i = 0; i < n; i++)
        c[i] = (float)smattn_load(t->data, t->dtype, (int64_t)i);
    free(*buf);
    *buf = c;
    t->data = c;
    t->dtype = SMATTN_F32;
}

/* The check: line of a report names the kernel too. */
static const char *what_for(const char *check)
{
    static char what[1200];
    snprintf(what, sizeof what, "%s; kernel %s (%s)", check, kernel.info->name, kernel.path);
    return what;
}

/* Run the kernel on `in` into float32 outputs and judge them against the oracle and the
 * bound (fuzz_check_bound); outputs it does not claim are neither asked nor judged. */
static void run_and_judge(const fuzz_problem *fp, const smattn_inputs *in, const fuzz_outputs *ref,
                          const fuzz_outputs *bnd, const char *check)
{
    const smattn_problem *p = &fp->p;
    fuzz_outputs o;
    if (fuzz_outputs_alloc(&o, p, SMATTN_F32))
        abort();
    for (int k = 0; k < 3; k++) /* NaN-filled, so that an element left unwritten is seen */
        for (size_t i = 0; i < o.n[k]; i++)
            ((float *)o.buf[k])[i] = NAN;
    if (!(kernel.info->caps & SMATTN_CAP_LSE))
        o.out.lse.data = NULL;
    if (!(kernel.info->caps & SMATTN_CAP_P))
        o.out.p.data = NULL;
    smattn_plugin_run_fn run = p->op == SMATTN_OP_ATTENTION ? kernel.attention : kernel.softmax;
    int s = run(p, in, &o.out);
    if (s != SMATTN_ERR_UNSUPPORTED) { /* declined: not a finding */
        if (s) {
            fuzz_mismatch_head("fuzz_plugin", fp, what_for(check));
            fprintf(stderr, "status: %d (%s) on a claimed problem\n", s,
                    smattn_status_name((smattn_status)s));
            abort();
        }
        fuzz_outputs judged = o;
        judged.n[1] = o.out.lse.data ? o.n[1] : 0;
        judged.n[2] = o.out.p.data ? o.n[2] : 0;
        fuzz_check_bound("fuzz_plugin", fp, &judged, ref, bnd, what_for(check));
    }
    fuzz_outputs_free(&o);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (!kernel.info)
        LLVMFuzzerInitialize(NULL, NULL);
    fuzz_provider dp;
    fuzz_provider_init(&dp, data, size);
    fuzz_problem fp;
    if (fuzz_problem_decode(&fp, &dp) || !claimed(&fp) || fuzz_problem_shrink(&fp, FUZZ_DIFF_MAX_P)) {
        fuzz_problem_free(&fp);
        return 0;
    }
    smattn_problem *p = &fp.p;
    p->empty_rows = kernel.info->empty_rows;
    p->empty_lse = kernel.info->empty_lse;
    if (p->op == SMATTN_OP_ATTENTION && !(kernel.info->kv_dtypes & SMATTN_DTYPE_BIT(fp.in.k.dtype))) {
        kv_to_f32(&fp.k, &fp.in.k, fp.nk);
        kv_to_f32(&fp.v, &fp.in.v, fp.nv);
    }
    fuzz_outputs ref, bnd;
    smattn_precision pm = kernel.precision ? kernel.precision(&fp.p) : kernel.info->precision;
    if (fuzz_oracle_and_bound_pm("fuzz_plugin", &fp, &pm, &ref, &bnd)) {
        fuzz_problem_free(&fp);
        return 0;
    }
    run_and_judge(&fp, &fp.in, &ref, &bnd, "bound");
    if (p->op == SMATTN_OP_ATTENTION && p->kv_lens) {
        smattn_inputs dirty = fp.in;
        void *k2 = fuzz_garbage_beyond_kv_lens(&fp, &fp.in.k, fp.nk, p->D, 0);
        void *v2 = fuzz_garbage_beyond_kv_lens(&fp, &fp.in.v, fp.nv, p->Dv, 1);
        dirty.k.data = k2;
        dirty.v.data = v2;
        run_and_judge(&fp, &dirty, &ref, &bnd, "bound, NaN/inf garbage beyond kv_lens");
        free(k2), free(v2);
    }
    fuzz_outputs_free(&ref), fuzz_outputs_free(&bnd);
    fuzz_problem_free(&fp);
    return 0;
}
