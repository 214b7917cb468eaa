/* SPDX-License-Identifier: MIT */
/* cmd_merge.c: `smattn ref` / `smattn opt` on a merge case (o_parts.npy, lse_parts.npy):
 * the exact merge or the kernel, the outputs written as one set (SPEC 7.1, 7.2, 9). */
#include <stdio.h>
#include <stdlib.h>

#include "cli/cli.h"
#include "cli/merge.h"
#include "io/merge_case.h"

int cli_run_merge(int kernel, const char *case_dir, const char *out_dir, smattn_dtype dtype,
                  int weights, int threads, const char *isa)
{
    char msg[1024];
    const char *cmd = kernel ? "opt" : "ref";
    if (weights) {
        snprintf(msg, sizeof msg, "%s: --weights: a merge case has no attention weights", cmd);
        return cli_fail(EXIT_INPUT, msg);
    }
    smattn_merge_case mc;
    if (smattn_merge_case_load(case_dir, &mc, msg, sizeof msg))
        return cli_fail(EXIT_INPUT, msg);
    smattn_case wc; /* the outputs' shapes, for the writer */
    smattn_merge_case_as_case(&mc, &wc);
    int rc = EXIT_OK;
    if (smattn_case_outputs_check(&wc, dtype, SMATTN_CASE_OUT_O | SMATTN_CASE_OUT_LSE, msg,
                                  sizeof msg)) {
        smattn_merge_case_free(&mc);
        return cli_fail(EXIT_INPUT, msg);
    }
    const smattn_merge_problem *p = &mc.prob;
    size_t es = smattn_dtype_size(dtype);
    int64_t no = p->B * p->S * p->Hq * p->Dv, nl = p->B * p->Hq * p->S; /* checked above */
    smattn_outputs out = {{calloc((size_t)no, es), dtype, {p->S * p->Hq * p->Dv, p->Hq * p->Dv, p->Dv, 1}},
                          {calloc((size_t)nl, es), dtype, {p->Hq * p->S, p->S, 1, 0}},
                          {NULL, dtype, {0}}};
    smattn_status st;
    if (!out.o.data || !out.lse.data) {
        st = SMATTN_ERR_NOMEM;
    } else if (kernel) {
        if (!isa)
            cli_check_isa_env();
        smattn_opt_config cfg = {threads, isa};
        st = smattn_merge(p, &mc.in, &out, &cfg);
    } else {
        smattn_ref_config cfg = {0};
        cfg.threads = threads;
        st = smattn_ref_merge(p, &mc.in, &out, &cfg);
    }
    if (st != SMATTN_OK) {
        snprintf(msg, sizeof msg, "%s: %s (%s)", kernel ? "opt: merge kernel" : "merge oracle",
                 smattn_status_str(st), smattn_status_name(st));
        /* an invalid descriptor, or an input the kernel does not take: bad input */
        rc = cli_fail(st == SMATTN_ERR_UNSUPPORTED ? EXIT_INPUT : cli_exit_code_of(st), msg);
    } else if (smattn_case_write_set(&wc, &out, NULL, out_dir, kernel ? "opt" : "ref", msg,
                                     sizeof msg)) {
        rc = cli_fail(EXIT_INPUT, msg);
    }
    free(out.o.data);
    free(out.lse.data);
    smattn_merge_case_free(&mc);
    return rc;
}
