/* SPDX-License-Identifier: MIT */
/* rows.c: the oracle on listed rows only, for checks that judge a sample of the rows of a
 * problem too large to evaluate whole (smattn check --rows): the cost is that of the rows
 * listed, each evaluated exactly as smattn_ref evaluates it (the same driver, ref.c). */
#include "ref/ref_internal.h"

smattn_status smattn__ref_rows(const smattn_problem *p, const smattn_inputs *in,
                               const smattn_outputs *out, const smattn_ref_config *cfg,
                               smattn_ref_stats *stats, const int64_t *rows, int64_t nrows)
{
    smattn_status st = smattn_validate(p, in, out);
    if (st)
        return st;
    if (nrows < 0 || (nrows > 0 && !rows))
        return SMATTN_ERR_NULL;
    /* strictly ascending within [0, B Hq S): every row once, so that no two workers write
     * one row's outputs */
    const int64_t total = p->B * p->Hq * p->S; /* fits: validation bounded every offset */
    for (int64_t k = 0; k < nrows; k++)
        if (rows[k] < 0 || rows[k] >= total || (k > 0 && rows[k] <= rows[k - 1]))
            return SMATTN_ERR_SHAPE;
    return smattn__ref_run(p, in, out, cfg, stats, NULL, NULL, rows, nrows);
}
