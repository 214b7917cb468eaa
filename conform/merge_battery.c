/* SPDX-License-Identifier: MIT */
/* merge_battery.c: the merge battery (SPEC 9) for a kernel exporting smattn_plugin_merge:
 * LSEs spread past exp's range, -inf and +inf empty partials injected (FlashInfer's and
 * vLLM's identity, FlashAttention-2's +inf), every part empty (also under FlashAttention-2's
 * +inf parts and LSE), one part alone per row, N = 1 and N = 64, base 2 spread past exp2's
 * range, three batches, poisoned rows and non-finite O under either convention, partials
 * with padded rows and heads and an LSE stored token-major; and the merge golden vectors
 * (spec/vectors, "op": "merge"). Apart from merge_check.c (which runs them in a child) so
 * that the Python package's checker builds the same cases without the plugin machinery. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "conform/conform.h"
#include "io/vector.h"

static uint64_t mrng(uint64_t *s)
{
    *s += 0x9e3779b97f4a7c15u;
    uint64_t z = *s;
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9u;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebu;
    return z ^ (z >> 31);
}

static double munif(uint64_t *s)
{
    return (double)(mrng(s) >> 11) * 0x1p-53;
}

/* kind: 0 plain, 1 spread past exp's range, 2 -inf injected, 3 +inf injected (FA2's empty
 * parts), 4 all empty, 5 one part per row, 6 base 2 spread past exp2's range (2^1000: a
 * base-2 path without the maximum overflows), 7 all empty under FlashAttention-2's +inf
 * parts and +inf empty_lse (a kernel that writes -inf whatever empty_lse asks shows), 8
 * poisoned rows (poison_row) under the -inf convention, 9 the same rows under
 * FlashAttention-2's +inf parts and +inf empty_lse (+inf empty there, not poison) */
static conform_merge_case *new_case(conform_merge_battery *mb)
{
    if (mb->n == mb->cap) {
        size_t cap = mb->cap ? 2 * mb->cap : 16;
        conform_merge_case *nc = realloc(mb->cases, cap * sizeof *nc);
        if (!nc)
            return NULL;
        mb->cases = nc, mb->cap = cap;
    }
    conform_merge_case *c = &mb->cases[mb->n];
    memset(c, 0, sizeof *c);
    return c;
}

/* Row r of a poisoned case (kinds 8 and 9; N >= 3, Dv >= 4), by r % 8, every empty part's
 * O NaN (never read, SPEC 9.2): 0 one part empty (under +inf parts also one -inf: empty
 * in either convention); 1 one part's LSE NaN (the row NaN); 2 one part's LSE +inf (the
 * row NaN under -inf parts, an empty part under +inf ones); 3 part 0 NaN and the others
 * empty (NaN, not an empty row); 4 a NaN in one part's O (that column NaN); 5 +inf and
 * -inf in one column (NaN), +inf alone in another, -inf alone in a third; 6 the last part
 * 1000 below the others (its weight underflows every format) with NaN, +inf and -inf in
 * its O (NaN, +inf and -inf columns all the same); 7 every part empty. */
static void poison_row(conform_merge_case *c, int64_t r, int64_t b, int64_t h, int64_t i,
                       int pos_inf)
{
    const smattn_merge_problem *p = &c->prob;
    const int64_t N = p->N, no = p->B * p->S * p->Hq * p->Dv, nl = p->B * p->Hq * p->S;
    double *l = c->l + (b * p->Hq + h) * p->S + i;
    double *o = c->o + ((b * p->S + i) * p->Hq + h) * p->Dv;
    const double empty = pos_inf ? HUGE_VAL : -HUGE_VAL;
    const int64_t k = r % N;
    switch (r % 8) {
    case 0:
        l[k * nl] = empty;
        if (pos_inf)
            l[(k + 1) % N * nl] = -HUGE_VAL;
        break;
    case 1:
        l[k * nl] = (double)NAN;
        break;
    case 2:
        l[k * nl] = HUGE_VAL;
        break;
    case 3:
        l[0] = (double)NAN;
        for (int64_t n = 1; n < N; n++)
            l[n * nl] = n % 2 && pos_inf ? -HUGE_VAL : empty;
        break;
    case 4:
        o[k * no + 1] = (double)NAN;
        break;
    case 5:
        o[0] = HUGE_VAL, o[no] = -HUGE_VAL, o[2] = HUGE_VAL, o[no + 3] = -HUGE_VAL;
        break;
    case 6:
        l[(N - 1) * nl] -= 1000;
        o[(N - 1) * no] = (double)NAN;
        o[(N - 1) * no + 1] = HUGE_VAL, o[(N - 1) * no + 2] = -HUGE_VAL;
        break;
    default:
        for (int64_t n = 0; n < N; n++)
            l[n * nl] = n % 2 && pos_inf ? -HUGE_VAL : empty;
    }
    for (int64_t n = 0; n < N; n++)
        if (l[n * nl] == -HUGE_VAL || (pos_inf && l[n * nl] == HUGE_VAL))
            for (int64_t d = 0; d < p->Dv; d++)
                o[n * no + d] = (double)NAN;
}

static int add_case(conform_merge_battery *mb, const char *name, int64_t N, int64_t B, int64_t S,
                    int64_t Hq, int64_t Dv, int kind, uint64_t seed)
{
    conform_merge_case *c = new_case(mb);
    if (!c)
        return -1;
    snprintf(c->name, sizeof c->name, "merge/%s", name);
    smattn_merge_problem *p = &c->prob;
    *p = smattn_merge_problem_default();
    p->N = N, p->B = B, p->S = S, p->Hq = Hq, p->Dv = Dv;
    if (kind == 3 || kind == 7 || kind == 9)
        p->empty_parts = SMATTN_LSE_POS_INF;
    if (kind == 7 || kind == 9)
        p->empty_lse = SMATTN_LSE_POS_INF;
    if (kind == 6)
        p->lse_base = SMATTN_LSE_BASE_2;
    const int64_t no = B * S * Hq * Dv, nl = B * Hq * S;
    c->o = malloc((size_t)(N * no) * sizeof *c->o);
    c->l = malloc((size_t)(N * nl) * sizeof *c->l);
    if (!c->o || !c->l) {
        free(c->o), free(c->l);
        return -1;
    }
    uint64_t s = seed ^ (uint64_t)kind * 0x51ed27u;
    const double empty = kind == 3 || kind == 7 ? HUGE_VAL : -HUGE_VAL;
    for (int64_t n = 0; n < N; n++)
        for (int64_t b = 0; b < B; b++)
            for (int64_t h = 0; h < Hq; h++)
                for (int64_t i = 0; i < S; i++) {
                    double l = kind == 1 || kind == 6 ? 2000 * munif(&s) - 1000 : 6 * munif(&s) - 3;
                    int is_empty = ((kind == 2 || kind == 3) && munif(&s) < 0.25) || kind == 4 ||
                                   kind == 7 || (kind == 5 && n != (h + i) % N);
                    c->l[n * nl + (b * Hq + h) * S + i] = is_empty ? empty : l;
                    for (int64_t d = 0; d < Dv; d++)
                        c->o[n * no + ((b * S + i) * Hq + h) * Dv + d] =
                            is_empty ? 0.0 : 2 * munif(&s) - 1;
                }
    if (kind == 8 || kind == 9)
        for (int64_t b = 0; b < B; b++)
            for (int64_t h = 0; h < Hq; h++)
                for (int64_t i = 0; i < S; i++)
                    poison_row(c, (b * Hq + h) * S + i, b, h, i, kind == 9);
    mb->n++;
    return 0;
}

/* A case whose partials the checker hands over in strided layout `layout` (merge_check.c
 * fills every slot between their rows and heads with NaN). */
static int add_strided(conform_merge_battery *mb, const char *name, int64_t N, int64_t B,
                       int64_t S, int64_t Hq, int64_t Dv, int kind, int layout, uint64_t seed)
{
    if (add_case(mb, name, N, B, S, Hq, Dv, kind, seed))
        return -1;
    mb->cases[mb->n - 1].layout = layout;
    return 0;
}

int conform_merge_battery_build(conform_merge_battery *mb, uint64_t seed)
{
    memset(mb, 0, sizeof *mb);
    int rc = add_case(mb, "n1", 1, 1, 3, 2, 8, 0, seed) ||
             add_case(mb, "n2_plain", 2, 1, 4, 2, 16, 0, seed) ||
             add_case(mb, "n64", 64, 1, 2, 2, 8, 0, seed) ||
             add_case(mb, "lse_spread_pm1000", 8, 1, 3, 2, 8, 1, seed) ||
             add_case(mb, "neg_inf_parts", 8, 1, 4, 2, 8, 2, seed) ||
             add_case(mb, "pos_inf_parts_fa2", 8, 1, 4, 2, 8, 3, seed) ||
             add_case(mb, "all_parts_empty", 4, 1, 2, 2, 8, 4, seed) ||
             add_case(mb, "all_parts_empty_fa2", 3, 1, 2, 2, 8, 7, seed) ||
             add_case(mb, "one_part_per_row", 6, 1, 4, 3, 8, 5, seed) ||
             add_case(mb, "base2_spread_pm1000", 5, 1, 3, 2, 8, 6, seed) ||
             add_case(mb, "batch_b3", 3, 3, 2, 2, 8, 0, seed) ||
             add_case(mb, "poison_rows_neg_inf", 4, 2, 4, 2, 8, 8, seed) ||
             add_case(mb, "poison_rows_fa2", 4, 2, 4, 2, 8, 9, seed) ||
             add_strided(mb, "row_strides_padded", 3, 2, 3, 2, 8, 0, CONFORM_MERGE_PADDED, seed) ||
             add_strided(mb, "lse_token_major", 3, 2, 3, 3, 8, 8, CONFORM_MERGE_LSE_TOKEN_MAJOR,
                         seed);
    if (rc)
        conform_merge_battery_free(mb);
    return rc ? -1 : 0;
}

void conform_merge_battery_free(conform_merge_battery *mb)
{
    for (size_t k = 0; k < mb->n; k++)
        free(mb->cases[k].o), free(mb->cases[k].l);
    free(mb->cases);
    memset(mb, 0, sizeof *mb);
}

/* One merge vector as the case "merge/golden_<name>", its partials in binary64. A file that
 * does not load or is not a merge is passed over (the vectors suite and the demo report
 * broken vectors; the attention battery takes the others). */
static int add_vector(conform_merge_battery *mb, const char *path)
{
    smattn_vector v;
    char err[256];
    if (smattn_vector_load(path, &v, err, sizeof err))
        return 0;
    int rc = 0;
    if (v.merge) {
        const smattn_merge_problem *p = &v.mprob;
        const int64_t no = p->B * p->S * p->Hq * p->Dv, nl = p->B * p->Hq * p->S;
        conform_merge_case *c = new_case(mb);
        double *o = c ? malloc((size_t)(p->N * no) * sizeof *o) : NULL;
        double *l = o ? malloc((size_t)(p->N * nl) * sizeof *l) : NULL;
        if (!l) {
            free(o);
            rc = -1;
        } else {
            /* the loader's tensors are row-major [N,B,S,Hq,Dv] and [N,B,Hq,S] */
            for (int64_t e = 0; e < p->N * no; e++)
                o[e] = smattn_load(v.min.o_parts.data, v.min.o_parts.dtype, e);
            for (int64_t e = 0; e < p->N * nl; e++)
                l[e] = smattn_load(v.min.lse_parts.data, v.min.lse_parts.dtype, e);
            snprintf(c->name, sizeof c->name, "merge/golden_%.80s", v.name);
            c->prob = *p;
            c->o = o, c->l = l;
            mb->n++;
        }
    }
    smattn_vector_free(&v);
    return rc;
}

int conform_merge_battery_add_vectors(conform_merge_battery *mb, const char *dir)
{
    if (!dir || !dir[0])
        return 0;
    char *names[CONFORM_MAX_VECTORS];
    size_t n;
    int rc = conform_vector_files(dir, 1, names, &n);
    if (rc == -2)
        return 0;
    for (size_t k = 0; k < n; k++) {
        if (!rc)
            rc = add_vector(mb, names[k]);
        free(names[k]);
    }
    return rc;
}
