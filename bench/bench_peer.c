/* SPDX-License-Identifier: MIT */
/* bench_peer.c: load a peer implementation (a plugin .so of include/smattn_kernel.h) for
 * bench_opt. A few lines of dlopen rather than conform/plugin.c's loader, so that the bench
 * does not link the conformance checker; the ABI check is the same one. */
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bench/bench_peer.h"

int bench_peer_open(bench_peer *pr, const char *path, int threads, char *err, size_t errlen)
{
    memset(pr, 0, sizeof *pr);
    /* libgomp reads OMP_NUM_THREADS when it is loaded (with the plugin): the peer gets the
     * kernel's thread count; one thread per core, no spinning between calls */
    char n[16];
    snprintf(n, sizeof n, "%d", threads);
    setenv("OMP_NUM_THREADS", n, 1);
    setenv("OMP_PROC_BIND", "false", 0);
    pr->handle = dlopen(path, RTLD_NOW | RTLD_LOCAL);
    if (!pr->handle) {
        snprintf(err, errlen, "cannot load %s: %s", path, dlerror());
        return -1;
    }
    smattn_plugin_describe_fn describe;
    *(void **)&describe = dlsym(pr->handle, "smattn_plugin_describe");
    *(void **)&pr->attention = dlsym(pr->handle, "smattn_plugin_attention");
    pr->info = describe ? describe(SMATTN_PLUGIN_ABI_VERSION) : NULL;
    if (!pr->info || !pr->attention || pr->info->abi_version != SMATTN_PLUGIN_ABI_VERSION ||
        !pr->info->name) {
        snprintf(err, errlen, "%s: not a plugin of ABI version %u", path, SMATTN_PLUGIN_ABI_VERSION);
        bench_peer_close(pr);
        return -1;
    }
    return 0;
}

void bench_peer_close(bench_peer *pr)
{
    if (pr->handle)
        dlclose(pr->handle);
    memset(pr, 0, sizeof *pr);
}
