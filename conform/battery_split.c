/* SPDX-License-Identifier: MIT */
/* battery_split.c: split-KV consistency (SPEC 9.6). Each case is also run as two problems
 * of its own, over the keys [0, t) and [t, T) (the second with K and V from key t on), and
 * the kernel's two partial states merged by the oracle must agree with its attention over
 * all keys: what a serving engine relies on when it splits a long row across workers and
 * merges the parts by their LSE. Plain non-causal problems without sinks (a sink would join
 * both parts' denominators); the split points fall inside, at and past the kernel's tiles
 * and its split-K chunks. The cases need the LSE. */
#include <stdint.h>

#include "conform/battery_impl.h"

static void split_case(builder *bd, const char *name, int64_t B, int64_t S, int64_t T, int64_t Hq,
                       int64_t Hkv, int64_t D, int64_t at, double softcap)
{
    conform_case *c = bat_att(bd, "split", name, B, S, T, Hq, Hkv, D);
    if (c) {
        c->split_at = at;
        c->prob.softcap = softcap;
    }
    bat_finish(bd, c);
    if (c)
        c->caps |= SMATTN_CAP_LSE; /* the parts are merged by their LSE */
}

void battery_split(builder *bd, int full)
{
    split_case(bd, "prefill_t20_at3", 1, 5, 20, 2, 2, 8, 3, 0.0);
    split_case(bd, "decode_t130_at64", 2, 1, 130, 4, 1, 16, 64, 0.0);
    split_case(bd, "gqa_softcap_t40_at17", 1, 7, 40, 4, 2, 8, 17, 10.0);
    split_case(bd, "decode_t1100_at1025", 1, 1, 1100, 2, 1, 32, 1025, 0.0);
    if (full)
        split_case(bd, "prefill_t300_at150", 1, 33, 300, 2, 1, 64, 150, 0.0);
}
