/* SPDX-License-Identifier: MIT */
/* bench_peer.h: another attention implementation timed in the same run as the kernel
 * (`make bench`: oneDNN through the adapter plugin of plugins/onednn), loaded from a plugin
 * .so of include/smattn_kernel.h. */
#ifndef SMATTN_BENCH_PEER_H
#define SMATTN_BENCH_PEER_H

#include <stddef.h>

#include "smattn_kernel.h"

typedef struct bench_peer {
    void *handle;
    const smattn_plugin_info *info;
    smattn_plugin_run_fn attention;
} bench_peer;

/* Load the plugin at path; its OpenMP threads (oneDNN's) are set to `threads` first. 0, or
 * -1 with one line in err. */
int bench_peer_open(bench_peer *pr, const char *path, int threads, char *err, size_t errlen);
void bench_peer_close(bench_peer *pr);

#endif
