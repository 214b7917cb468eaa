/* SPDX-License-Identifier: MIT */
/* battery_impl.h: the battery's builder, shared by conform/battery.c (the builder, the
 * garbage fill, the categories up to issue 6) and conform/battery_sizes.c (the categories
 * at the sizes and values where kernels change path, issue 14). Not installed. */
#ifndef SMATTN_CONFORM_BATTERY_IMPL_H
#define SMATTN_CONFORM_BATTERY_IMPL_H

#include <stdint.h>

#include "conform/conform.h"

/* The battery owns its binary64 inputs; smattn_tensor holds them as const. */
#define MUT(p) ((double *)(uintptr_t)(p))

enum { T_Q, T_K, T_V, T_X, T_BIAS, T_MASK, T_SINKS };

typedef struct rng {
    uint64_t s;
} rng;

typedef struct builder {
    conform_battery *b;
    uint64_t seed;
    rng r; /* the current case's stream */
    int oom;
} builder;

/* battery.c's helpers (see there): the next random number of a stream; a new case with
 * random Q, K, V (or X) in [-amp, amp), V in [-1, 1); the plain attention case (amp 2); an
 * all-true bool mask; a random bias; sinks in [lo, hi); kv_lens (which 0) or q_lens (1);
 * closing a case (garbage fill, features). All return NULL / do nothing once out of
 * memory (bd->oom). */
uint64_t bat_rng_next(rng *r);
conform_case *bat_case_new(builder *bd, const char *cat, const char *name, smattn_op op, int64_t B,
                           int64_t S, int64_t T, int64_t Hq, int64_t Hkv, int64_t D, int64_t Dv,
                           double amp, int64_t pad);
conform_case *bat_att(builder *bd, const char *cat, const char *name, int64_t B, int64_t S,
                      int64_t T, int64_t Hq, int64_t Hkv, int64_t D);
unsigned char *bat_case_mask(builder *bd, conform_case *c);
double *bat_case_bias(builder *bd, conform_case *c, double amp);
double *bat_case_sinks(builder *bd, conform_case *c, double lo, double hi);
void bat_case_lens(builder *bd, conform_case *c, int which, const int64_t *vals);
void bat_finish(builder *bd, conform_case *c);

/* battery_sizes.c's categories. */
void battery_nonfinite(builder *bd);
void battery_tiled(builder *bd, int full);
void battery_long_rows(builder *bd, int full);
void battery_regimes(builder *bd);
void battery_empty_rows_clean(builder *bd);
void battery_sinks_large(builder *bd);
void battery_head_dims(builder *bd);
void battery_regimes_masked(builder *bd);

#endif
