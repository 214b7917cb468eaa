/* SPDX-License-Identifier: MIT */
/* merge_case.h: a merge case directory (SPEC 7.1, SPEC 9): o_parts.npy [N,B,S,Hq,Dv] (or
 * [N,S,Hq,Dv], B = 1), lse_parts.npy [N,B,Hq,S] (or [N,Hq,S]) and an optional case.json
 * with the merge's keys, loaded into an owned problem and inputs. Every error is one line
 * naming the file and the problem. */
#ifndef SMATTN_IO_MERGE_CASE_H
#define SMATTN_IO_MERGE_CASE_H

#include <stddef.h>

#include "io/case.h"
#include "io/npy.h"
#include "smattn.h"

typedef struct smattn_merge_case {
    smattn_merge_problem prob;
    smattn_merge_inputs in;
    int rank; /* 4 with B ([B,S,Hq,Dv] outputs), 3 without (the 4-D o_parts) */
    smattn_npy o_parts, lse_parts;
} smattn_merge_case;

/* 1 if dir holds o_parts.npy or lse_parts.npy (a merge case), else 0. */
int smattn_merge_case_is(const char *dir);
/* Load and check a merge case (shapes, dtypes, case.json's keys). 0, or nonzero with one
 * line in err; on failure *mc holds nothing to free. */
int smattn_merge_case_load(const char *dir, smattn_merge_case *mc, char *err, size_t errlen);
void smattn_merge_case_free(smattn_merge_case *mc);
/* The smattn_case whose outputs (O [B,S,Hq,Dv], LSE [B,Hq,S], in mc's rank convention)
 * smattn_case_outputs_check and smattn_case_write_outputs size and write. */
void smattn_merge_case_as_case(const smattn_merge_case *mc, smattn_case *c);

#endif
