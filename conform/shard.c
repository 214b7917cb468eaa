/* SPDX-License-Identifier: MIT */
/* shard.c: which shard a case belongs to (--shard I/N): a stable hash of its name, so that
 * the N shards partition the suite whatever N, and a case stays in its shard when others
 * are added or removed (README "At scale"). */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "conform/conform.h"

uint64_t conform_fnv1a(const void *data, size_t n, uint64_t h)
{
    for (const unsigned char *p = data, *e = p + n; p < e; p++)
        h = (h ^ *p) * 0x100000001b3ULL;
    return h;
}

/* FNV-1a, 64 bits, over the name's bytes: fixed here for good (a changed hash would move
 * cases between shards of runs that are merged together, which the merge refuses only
 * through the smattn version). */
uint64_t conform_shard_hash(const char *name)
{
    return conform_fnv1a(name, strlen(name), CONFORM_FNV_BASIS);
}

int conform_shard_of(const char *name, unsigned n)
{
    return n <= 1 ? 0 : (int)(conform_shard_hash(name) % n);
}

int conform_shard_parse(const char *s, conform_shard *sh, char *err, size_t errlen)
{
    sh->index = 0;
    sh->count = 1;
    const char *slash = s ? strchr(s, '/') : NULL;
    char *end1 = NULL, *end2 = NULL;
    unsigned long i = 0, n = 0;
    int ok = slash && slash > s && s[0] >= '0' && s[0] <= '9' && slash[1] >= '0' &&
             slash[1] <= '9';
    if (ok) {
        errno = 0;
        i = strtoul(s, &end1, 10);
        n = strtoul(slash + 1, &end2, 10);
        ok = errno == 0 && end1 == slash && *end2 == '\0' && n >= 1 &&
             n <= CONFORM_SHARD_MAX && i < n;
    }
    if (!ok) {
        snprintf(err, errlen, "--shard '%.40s': want I/N with 0 <= I < N <= %u (for instance 0/3)",
                 s ? s : "", (unsigned)CONFORM_SHARD_MAX);
        return -1;
    }
    sh->index = (unsigned)i;
    sh->count = (unsigned)n;
    return 0;
}

int conform_shard_has(const conform_shard *sh, const char *name)
{
    return !sh || sh->count <= 1 || conform_shard_of(name, sh->count) == (int)sh->index;
}
