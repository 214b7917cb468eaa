/* plugin.c: load a kernel under test: dlopen a .so speaking include/smattn_kernel.h, or
 * take the built-in optimised kernel through the same table, and check what it claims. */
#include <dlfcn.h>
#include <math.h>
#include <stddef.h>
#include <stdio.h>
#include <string.h>

#include "conform/conform.h"

/* The smallest info a version-1 plugin may fill: every field up to the precision model. */
#define INFO_V1_SIZE (offsetof(smattn_plugin_info, precision) + sizeof(smattn_precision))

/* A data pointer from dlsym as a function pointer (POSIX guarantees this works). */
#define SYM_AS(type, h, name, out)                                                                 \
    do {                                                                                           \
        void *sym_ = dlsym((h), (name));                                                           \
        memcpy(&(out), &sym_, sizeof(out));                                                        \
    } while (0)

static int check_precision(const smattn_precision *pm, const char *who, char *err, size_t errlen)
{
    if (!(pm->u_score > 0 && pm->u_score < 1) || !(pm->u_acc > 0 && pm->u_acc < 1) ||
        !(pm->exp_ulps >= 0) || !isfinite(pm->exp_ulps) || !(pm->u_p >= 0 && pm->u_p < 1) ||
        pm->blocks < 1 || pm->acc_len < 0 || !(pm->tiny >= 0) || !isfinite(pm->tiny)) {
        snprintf(err, errlen,
                 "%s: precision model out of range (u_score %g, u_acc %g, exp_ulps %g, u_p %g, "
                 "blocks %lld, acc_len %lld, tiny %g; SPEC 6.1)",
                 who, pm->u_score, pm->u_acc, pm->exp_ulps, pm->u_p, (long long)pm->blocks,
                 (long long)pm->acc_len, pm->tiny);
        return -1;
    }
    return 0;
}

/* Copy and check the info a plugin described. */
static int take_info(conform_kernel *k, const smattn_plugin_info *info, const char *who, char *err,
                     size_t errlen)
{
    if (!info) {
        snprintf(err, errlen, "%s: smattn_plugin_describe returned NULL", who);
        return -1;
    }
    if (info->abi_version != SMATTN_PLUGIN_ABI_VERSION) {
        snprintf(err, errlen,
                 "%s: built against plugin ABI version %u; this smattn speaks version %u "
                 "(rebuild it against include/smattn_kernel.h)",
                 who, info->abi_version, SMATTN_PLUGIN_ABI_VERSION);
        return -1;
    }
    if (info->struct_size < INFO_V1_SIZE) {
        snprintf(err, errlen, "%s: info struct_size %u is smaller than ABI version 1's %zu", who,
                 info->struct_size, (size_t)INFO_V1_SIZE);
        return -1;
    }
    memset(&k->info, 0, sizeof k->info);
    memcpy(&k->info, info, info->struct_size < sizeof k->info ? info->struct_size : sizeof k->info);
    snprintf(k->name, sizeof k->name, "%s", info->name ? info->name : "(unnamed)");
    snprintf(k->version, sizeof k->version, "%s", info->version ? info->version : "");
    k->info.name = k->name;
    k->info.version = k->version;
    if ((unsigned)info->empty_rows > SMATTN_EMPTY_MEAN ||
        (unsigned)info->empty_lse > SMATTN_LSE_ZERO) {
        snprintf(err, errlen, "%s: unknown empty-row convention (empty_rows %d, empty_lse %d)", who,
                 (int)info->empty_rows, (int)info->empty_lse);
        return -1;
    }
    unsigned floats = SMATTN_DTYPE_BIT(SMATTN_F64) | SMATTN_DTYPE_BIT(SMATTN_F32) |
                      SMATTN_DTYPE_BIT(SMATTN_F16) | SMATTN_DTYPE_BIT(SMATTN_BF16);
    if (!(info->q_dtypes & floats) || !(info->kv_dtypes & floats) || !(info->out_dtypes & floats)) {
        snprintf(err, errlen,
                 "%s: claims no float dtype for Q, K/V or the outputs "
                 "(q_dtypes 0x%x, kv_dtypes 0x%x, out_dtypes 0x%x)",
                 who, info->q_dtypes, info->kv_dtypes, info->out_dtypes);
        return -1;
    }
    if (info->max_head_dim < 0) {
        snprintf(err, errlen, "%s: max_head_dim %lld is negative", who,
                 (long long)info->max_head_dim);
        return -1;
    }
    if (!k->precision)
        return check_precision(&k->info.precision, who, err, errlen);
    return 0;
}

int conform_kernel_open(const char *spec, conform_kernel *k, char *err, size_t errlen)
{
    memset(k, 0, sizeof *k);
    if (!spec || strcmp(spec, "builtin") == 0) {
        snprintf(k->path, sizeof k->path, "builtin");
        k->attention = conform_builtin_attention;
        k->softmax = conform_builtin_softmax;
        k->precision = conform_builtin_precision;
        return take_info(k, conform_builtin_describe(SMATTN_PLUGIN_ABI_VERSION), "builtin", err,
                         errlen);
    }
    snprintf(k->path, sizeof k->path, "%s", spec);
    /* dlopen searches the library path for a bare name: make a file name explicit. */
    char path[1100];
    snprintf(path, sizeof path, "%s%s", strchr(spec, '/') ? "" : "./", spec);
    dlerror();
    k->handle = dlopen(path, RTLD_NOW | RTLD_LOCAL);
    if (!k->handle) {
        const char *e = dlerror();
        snprintf(err, errlen, "cannot load kernel %s: %s", spec, e ? e : "dlopen failed");
        return -1;
    }
    smattn_plugin_describe_fn describe;
    SYM_AS(smattn_plugin_describe_fn, k->handle, SMATTN_PLUGIN_DESCRIBE_SYMBOL, describe);
    SYM_AS(smattn_plugin_run_fn, k->handle, SMATTN_PLUGIN_ATTENTION_SYMBOL, k->attention);
    SYM_AS(smattn_plugin_run_fn, k->handle, SMATTN_PLUGIN_SOFTMAX_SYMBOL, k->softmax);
    SYM_AS(smattn_plugin_precision_fn, k->handle, SMATTN_PLUGIN_PRECISION_SYMBOL, k->precision);
    const char *missing = !describe       ? SMATTN_PLUGIN_DESCRIBE_SYMBOL
                          : !k->attention ? SMATTN_PLUGIN_ATTENTION_SYMBOL
                                          : NULL;
    if (missing) {
        snprintf(err, errlen,
                 "kernel %s: missing symbol %s (required by the plugin ABI, smattn_kernel.h)", spec,
                 missing);
        conform_kernel_close(k);
        return -1;
    }
    char who[1100];
    snprintf(who, sizeof who, "kernel %s", spec);
    if (take_info(k, describe(SMATTN_PLUGIN_ABI_VERSION), who, err, errlen)) {
        conform_kernel_close(k);
        return -1;
    }
    return 0;
}

void conform_kernel_close(conform_kernel *k)
{
    if (k->handle)
        dlclose(k->handle);
    k->handle = NULL;
}

smattn_precision conform_kernel_precision(const conform_kernel *k, const smattn_problem *p)
{
    return k->precision ? k->precision(p) : k->info.precision;
}
