/* SPDX-License-Identifier: MIT */
/* inputs.c: a kernel must leave the tensors it is handed as they came (smattn.h's inputs
 * are const): the bytes of each, hashed in the case's process before a call and again
 * after it, name the first one the call changed. A Q scaled in place, or K converted in
 * place, gives right outputs once and wrong ones on the caller's next use, and would
 * otherwise surface, if at all, as a split-KV or determinism failure naming another bug.
 * Used by run.c (the forward) and backward_check.c (the backward, with the saved O and LSE
 * and the incoming gradients). */
#include <stdio.h>
#include <string.h>

#include "conform/conform.h"
#include "core/internal.h"

static uint64_t hash_bytes(const void *lo, const void *hi)
{
    return conform_fnv1a(lo, (size_t)((const char *)hi - (const char *)lo), CONFORM_FNV_BASIS);
}

static int hashed(const conform_hashes *ch, int k)
{
    return (size_t)((const char *)ch->hi[k] - (const char *)ch->lo[k]) <= CONFORM_MAX_HASHED;
}

void conform_hashes_inputs(conform_hashes *ch, const smattn_problem *p, const smattn_inputs *in)
{
    memset(ch, 0, sizeof *ch);
    int n = smattn__input_spans(p, in, ch->lo, ch->hi, ch->name, CONFORM_MAX_HASH_SPANS);
    ch->n = n > 0 ? n : 0;
    for (int k = 0; k < ch->n; k++)
        ch->h[k] = hashed(ch, k) ? hash_bytes(ch->lo[k], ch->hi[k]) : 0;
}

void conform_hashes_add(conform_hashes *ch, const void *data, size_t bytes, const char *name)
{
    if (!data || !bytes || ch->n >= CONFORM_MAX_HASH_SPANS)
        return;
    const int k = ch->n++;
    ch->lo[k] = data;
    ch->hi[k] = (const char *)data + bytes;
    ch->name[k] = name;
    ch->h[k] = hashed(ch, k) ? hash_bytes(ch->lo[k], ch->hi[k]) : 0;
}

const char *conform_hashes_changed(const conform_hashes *ch)
{
    for (int k = 0; k < ch->n; k++)
        if (hashed(ch, k) && hash_bytes(ch->lo[k], ch->hi[k]) != ch->h[k])
            return ch->name[k];
    return NULL;
}

void conform_inputs_reason(char *reason, size_t cap, const char *what)
{
    snprintf(reason, cap,
             "wrote into its inputs: %s (the inputs are read-only: a tensor scaled or converted in "
             "place is wrong for the caller's next use)",
             what);
}
