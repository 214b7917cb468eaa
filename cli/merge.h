/* SPDX-License-Identifier: MIT */
/* merge.h: `smattn ref` and `smattn opt` on a merge case (cli/cmd_merge.c, SPEC 7.1, 9). */
#ifndef SMATTN_CLI_MERGE_H
#define SMATTN_CLI_MERGE_H

#include "smattn.h"

/* Load the merge case CASE, run smattn_ref_merge (kernel == 0) or smattn_merge, write
 * OUT/o.npy and OUT/lse.npy as one set; returns the exit code (cli.h), one line on stderr
 * on failure. OUT has been checked (smattn_case_out_check). */
int cli_run_merge(int kernel, const char *case_dir, const char *out_dir, smattn_dtype dtype,
                  int weights, int threads, const char *isa);

#endif
