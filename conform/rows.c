/* SPDX-License-Identifier: MIT */
/* rows.c: which query rows a sampled check judges (--rows K). Per (batch, head): the first
 * and last rows, the rows on each side of every power-of-two boundary (2^k - 1 and 2^k for
 * k >= 1, below S), where 32-bit index arithmetic and tile or split edges of kernels
 * change, and the rest up to K drawn without replacement from a splitmix64 stream seeded
 * by (seed, b, h). The choice depends on nothing else (not the case, kernel, thread count
 * or machine): a report's K and seed say exactly which rows were judged. */
#include <stdlib.h>

#include "conform/conform.h"

static uint64_t mix(uint64_t *s)
{
    uint64_t z = (*s += 0x9e3779b97f4a7c15u);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9u;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebu;
    return z ^ (z >> 31);
}

/* Is row i of S one the rule always judges? */
static int always(int64_t S, int64_t i)
{
    if (i == 0 || i == S - 1)
        return 1;
    /* i = 2^k or i + 1 = 2^k, k >= 1 */
    return (i > 1 && (i & (i - 1)) == 0) || (i >= 1 && ((i + 1) & i) == 0);
}

int64_t conform_rows_pick(int64_t S, int64_t K, uint64_t seed, int64_t b, int64_t h,
                          int64_t *out)
{
    if (S <= 0)
        return 0;
    int64_t fixed = 0;
    for (int64_t i = 0; i < S; i++)
        fixed += always(S, i);
    int64_t want = K < S ? K : S;
    int64_t need = want > fixed ? want - fixed : 0; /* drawn rows */
    int64_t rest = S - fixed;                      /* rows that may be drawn */
    uint64_t s = seed ^ 0x243f6a8885a308d3u;
    s = mix(&s) ^ (uint64_t)b;
    s = mix(&s) ^ (uint64_t)h;
    (void)mix(&s);
    int64_t n = 0;
    /* Selection sampling (Knuth, TAOCP 3.4.2, algorithm S): each row of the rest is taken
     * with probability need / rest at its turn, so exactly `need` rows, in order. */
    for (int64_t i = 0; i < S; i++) {
        if (always(S, i)) {
            out[n++] = i;
            continue;
        }
        if (need > 0 && (int64_t)(mix(&s) % (uint64_t)rest) < need) {
            out[n++] = i;
            need--;
        }
        rest--;
    }
    return n;
}

int64_t *conform_rows_list(const smattn_problem *p, int64_t K, uint64_t seed, int64_t *n)
{
    return conform_rows_list_of(p, K, seed, NULL, n);
}

int64_t *conform_rows_list_of(const smattn_problem *p, int64_t K, uint64_t seed,
                              const int64_t *rows_of, int64_t *n)
{
    int64_t total = p->B * p->Hq * p->S, cnt = 0;
    int64_t *list = malloc((size_t)(total > 0 ? total : 1) * sizeof *list);
    if (!list)
        return NULL;
    for (int64_t b = 0; b < p->B; b++)
        for (int64_t h = 0; h < p->Hq; h++) {
            int64_t base = (b * p->Hq + h) * p->S;
            int64_t Sb = rows_of && rows_of[b] < p->S ? rows_of[b] : p->S;
            int64_t m = conform_rows_pick(Sb, K, seed, b, h, list + cnt);
            for (int64_t k = 0; k < m; k++)
                list[cnt + k] += base;
            cnt += m;
        }
    *n = cnt;
    return list;
}
