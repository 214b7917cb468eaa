/* SPDX-License-Identifier: MIT */
/* battery_impl.h: the battery's builder (conform/battery_case.c: a case's random inputs,
 * masks, lengths and the garbage fill), shared by conform/battery.c (the suites and the
 * first categories) and conform/battery_sizes.c (the categories at the sizes and values
 * where kernels change path). Not installed. */
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

/* conform/battery_case.c: building a case (both battery.c and battery_sizes.c use it). */
uint64_t bat_rng_next(rng *r);
int64_t bat_rng_int(rng *r, int64_t lo, int64_t hi);
uint64_t bat_hash_name(const char *s, uint64_t seed);
void *bat_zalloc(builder *bd, size_t n, size_t size);
smattn_tensor *bat_tensor_of(conform_case *c, int t);
double *bat_alloc_f64(builder *bd, conform_case *c, int t, int64_t n, const int64_t st[4]);
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
/* ALiBi (SPEC 2.8): the case's slopes ([Hq], or [B][Hq] with per_batch) owned by the case,
 * in mode `mode`; from `from` when given, else FlashAttention's 2^(-8(h+1)/Hq). Returns the
 * slopes, or NULL (out of memory). */
float *bat_case_alibi(builder *bd, conform_case *c, smattn_alibi_mode mode, int per_batch,
                      const float *from);
void bat_fill_slopes(conform_case *c, const float *from);
void bat_case_free(conform_case *c);

/* battery_sizes.c's categories. */
void battery_nonfinite(builder *bd);
void battery_tiled(builder *bd, int full);
void battery_long_rows(builder *bd, int full);
void battery_regimes(builder *bd);
void battery_empty_rows_clean(builder *bd);
void battery_sinks_large(builder *bd);
void battery_head_dims(builder *bd);
void battery_regimes_masked(builder *bd);

/* battery_layout.c: ragged and paged batches (SPEC 2.7). */
void battery_layouts(builder *bd, int full);
enum { BAT_KV_DENSE = 0, BAT_KV_PACKED = 1, BAT_KV_PAGED = 2 };
typedef struct bat_lay_spec {
    int packed_q;   /* queries packed (cu_seqlens_q) */
    int kv;         /* BAT_KV_DENSE, BAT_KV_PACKED or BAT_KV_PAGED */
    int hnd;        /* paged: [num_pages, Hkv, page_size, D] */
    int64_t page;   /* paged: page size */
    int64_t spare;  /* paged: pages no sequence uses (garbage), beyond those in use; with
                       0, no table column past T either (a cache filled to capacity) */
    int64_t shared; /* paged: sequence 1's first `shared` pages are sequence 0's */
    int64_t extra;  /* packed keys: each slice this much past seqused_k (garbage) */
    int clean;      /* no garbage in the dense twin's unread slots (the backward's cases) */
    smattn_alibi_mode alibi; /* ALiBi, per-batch slopes of both signs (mask: with a bias) */
} bat_lay_spec;
/* A layout case in category cat: B sequences of Sb[b] queries and Tb[b] keys in a dense twin
 * S x T, laid out as ls says (finished: its caps name the layout's bits). A paged table's
 * rows are one column longer than max_pages (bt_stride = max_pages + 1, garbage past it):
 * the backward's layout cases read the table through its row stride. */
conform_case *bat_lay_case(builder *bd, const char *cat, const char *name, int64_t B,
                           const int64_t *Sb, const int64_t *Tb, int64_t S, int64_t T, int64_t Hq,
                           int64_t Hkv, int64_t D, smattn_causal causal, int64_t wl, int64_t wr,
                           const bat_lay_spec *ls);

/* battery_alibi.c: ALiBi's category (SPEC 2.8). */
void battery_alibi(builder *bd, int full);

/* battery_quant.c: 8-bit and block-quantised inputs with descales (SPEC 2.9). */
void battery_quant(builder *bd, int full);

/* battery_split.c: split-KV consistency (SPEC 9.6). */
void battery_split(builder *bd, int full);

/* battery_huge.c: the suite "huge". */
void battery_huge(builder *bd);

#endif
