/* SPDX-License-Identifier: MIT */
/* conform.h: the conformance checker behind `smattn conform`, `gen` and `check`.
 *
 * Library code of the checker, linked into the CLI only (build/libsmattn_conform.a):
 *   plugin.c   load a kernel under test (a .so speaking include/smattn_kernel.h, or the
 *              built-in optimised kernel through the same table)
 *   builtin.c  the built-in kernel as a plugin ("smattn-opt")
 *   battery.c  the cases: golden vectors, edge cases by category, random sweeps
 *              (battery_layout.c: the ragged and paged ones, laid out for a kernel)
 *   isolate.c  the child processes plugin code runs in: process groups, time limits,
 *              output capture, no process left behind
 *   run.c      one case in a forked child: time limit, guard pages, canaries
 *   judge.c    the oracle, the SPEC 6 bound, and a sentence naming what was violated
 *   report.c   the summary table, JSON, JUnit XML, HTML and the baseline gate
 *   files.c    case directories for kernels that are not C (gen and check)
 * Every function reports failure through a status and one line of text; nothing here
 * prints except report.c's writers (to the stream they are given) and the progress bar.
 */
#ifndef SMATTN_CONFORM_H
#define SMATTN_CONFORM_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <signal.h>
#include <sys/types.h>

#include "smattn.h"
#include "smattn_kernel.h"

/* Per-case time limit (seconds) when --time does not set a shorter one. */
#define CONFORM_CASE_TIMEOUT 10.0
/* A run stops after this many cases in a row hung (each costs the case time limit). */
#define CONFORM_MAX_HANGS 3
/* REGRESSION lines printed in the text report (the JSON report has them all). */
#define CONFORM_REGRESSIONS_SHOWN 20
/* Time limit (seconds) of loading a plugin and calling its describe, in a child. */
#define CONFORM_DESCRIBE_TIMEOUT 10.0
/* A plugin's stdout and stderr during a case: a capture file of at most this many bytes
 * (writes beyond fail), of which the first CONFORM_OUTPUT_LINES lines (at most
 * CONFORM_OUTPUT_SHOWN bytes read) go into the result. */
#define CONFORM_OUTPUT_LIMIT (1 << 20)
#define CONFORM_OUTPUT_SHOWN 4096
#define CONFORM_OUTPUT_LINES 8

/* The baseline gate (--baseline): a case regresses when it passed before and fails now,
 * or when its max error/bound ratio r grew beyond max(CONFORM_BASELINE_FACTOR * r0,
 * r0 + CONFORM_BASELINE_SLACK) for the stored ratio r0. The slack keeps tiny ratios (a
 * kernel exact to a few ulps sits near 0.01) from failing on noise-level changes. */
#define CONFORM_BASELINE_FACTOR 1.25
#define CONFORM_BASELINE_SLACK 0.05
/* The start of the reason of a case `smattn check` skips because its outputs are the set
 * `smattn ref` wrote (the oracle's own: judging them would tell nothing of a kernel). */
#define CONFORM_SKIP_ORACLE_OUTPUTS "not judged: the outputs are the oracle's own"
/* The start of the reason of a case left unjudged because the oracle could not decide the
 * exact values it needs within its precision limit (SMATTN_ERR_PRECISION: an exact zero or
 * a rounding midpoint that no expansion reaches, SPEC 10.3 item 6): nothing the kernel did. */
#define CONFORM_SKIP_ORACLE_UNDECIDED "not judged: the oracle could not decide"
/* The start of the reason of a forward case judge.c leaves unjudged because the oracle or
 * the bound returned an error (SMATTN_ERR_PRECISION under softcap, SPEC 5.5; out of memory). */
#define CONFORM_SKIP_ORACLE_FAILED "the oracle or the bound failed"

/* ---- the inputs a kernel must not change (inputs.c) ----------------------------------- */

/* Spans of at most CONFORM_MAX_HASHED bytes are hashed (the huge suite's reserved,
 * untouched memory is not read). */
#define CONFORM_MAX_HASH_SPANS 32
#define CONFORM_MAX_HASHED ((size_t)64 << 20)
typedef struct conform_hashes {
    const void *lo[CONFORM_MAX_HASH_SPANS], *hi[CONFORM_MAX_HASH_SPANS];
    const char *name[CONFORM_MAX_HASH_SPANS];
    uint64_t h[CONFORM_MAX_HASH_SPANS];
    int n;
} conform_hashes;
/* The bytes of every input of a valid problem (smattn__input_spans), hashed now. */
void conform_hashes_inputs(conform_hashes *ch, const smattn_problem *p, const smattn_inputs *in);
/* One more buffer of bytes bytes (the backward's saved O and LSE, dO, dLSE), hashed now. */
void conform_hashes_add(conform_hashes *ch, const void *data, size_t bytes, const char *name);
/* The name of the first span whose bytes changed since they were hashed, or NULL. */
const char *conform_hashes_changed(const conform_hashes *ch);
/* A case's reason for a changed input: "wrote into its inputs: <what> (...)". */
void conform_inputs_reason(char *reason, size_t cap, const char *what);

/* ---- kernels ------------------------------------------------------------------------- */

/* What the checker knows of a kernel. Of a plugin file, no code runs in the checker's
 * process: dlopen and describe run in a child, whose answer comes back by value over a
 * pipe (strings copied and checked there, no pointer of the plugin kept); every case
 * loads the plugin again in its own child. */
typedef struct conform_kernel {
    char name[64], version[64];
    char path[1024];         /* the .so given, or "builtin" */
    char load_path[1100];    /* what the case children dlopen ("./x.so" for a bare name) */
    smattn_plugin_info info; /* the plugin's info (name/version point into the above) */
    int builtin;             /* the built-in kernel: its own code, called directly */
    int has_softmax;         /* smattn_plugin_softmax is exported */
    int has_precision;       /* smattn_plugin_precision is exported (else info.precision) */
    int has_merge;           /* smattn_plugin_merge is exported (the merge battery runs) */
    int has_backward;        /* smattn_plugin_backward is exported (the backward battery runs) */
} conform_kernel;

/* Load "builtin" (or NULL) or a .so path, describing it in a child that has `timeout`
 * seconds. 0, or -1 with one line in err ("kernel K cannot be loaded: ..."): cannot open,
 * missing symbol, ABI version mismatch, an info that is not usable or not readable, a
 * crash or hang while loading or describing. */
int conform_kernel_open(const char *spec, double timeout, conform_kernel *k, char *err,
                        size_t errlen);
void conform_kernel_close(conform_kernel *k);
/* The entry points, in a child only: a plugin is dlopened there (its constructors run in
 * that child). 0, or -1 with the reason in err. */
typedef struct conform_entry {
    smattn_plugin_run_fn attention, softmax;
    smattn_plugin_precision_fn precision; /* NULL: info.precision */
    smattn_plugin_threads_fn threads;     /* NULL: the plugin takes no thread count */
    smattn_plugin_merge_fn merge;         /* NULL: no merge entry */
    smattn_plugin_backward_fn backward;   /* NULL: no backward entry */
} conform_entry;
int conform_kernel_bind(const conform_kernel *k, conform_entry *e, char *err, size_t errlen);
/* 0 if a precision model is in range (SPEC 6.1), else -1 with one line in err. */
int conform_precision_check(const smattn_precision *pm, const char *who, char *err, size_t errlen);

/* ---- isolation (isolate.c) ------------------------------------------------------------ */

/* Once, before any case: make this process the reaper of orphans of plugin code (Linux). */
void conform_isolate_init(void);
/* fork() for plugin code. Parent: SIGCHLD blocked (the old mask in *old), the child put in
 * its own process group. Child: its own process group, stdin /dev/null, stdout and stderr
 * to out_fd (/dev/null if < 0), files capped at CONFORM_OUTPUT_LIMIT bytes. */
pid_t conform_child_fork(int out_fd, sigset_t *old);
/* Wait up to timeout seconds for the child pid, then kill its process group and every
 * other process left as a child of this one (the checker has no other children), reap them
 * all and restore the signal mask. 1 if the time ran out, else 0; *ws the wait status. */
int conform_child_finish(pid_t pid, double timeout, const sigset_t *old, int *ws);
/* A capture file for a child's output (-1 if none could be made); empty it; its first
 * lines as text into out. */
int conform_capture_open(void);
void conform_capture_reset(int fd);
void conform_capture_read(int fd, char *out, size_t cap);

/* The built-in optimised kernel as plugin entry points (builtin.c). */
const smattn_plugin_info *conform_builtin_describe(uint32_t host_abi);
int conform_builtin_attention(const smattn_problem *p, const smattn_inputs *in,
                              const smattn_outputs *out);
int conform_builtin_softmax(const smattn_problem *p, const smattn_inputs *in,
                            const smattn_outputs *out);
smattn_precision conform_builtin_precision(const smattn_problem *p);
int conform_builtin_threads(int n);
int conform_builtin_merge(const smattn_merge_problem *p, const smattn_merge_inputs *in,
                          const smattn_outputs *out);
int conform_builtin_backward(const smattn_problem *p, const smattn_inputs *in,
                             const smattn_forward_saved *saved, const smattn_grad_inputs *gin,
                             const smattn_grad_outputs *out);

/* ---- the battery --------------------------------------------------------------------- */

/* One case: the problem, and its inputs stored as binary64 (or bool for the mask) in the
 * layout given by in64's strides; each run converts them to the dtypes the kernel takes
 * (the oracle then reads the same converted values, so exactness is kept). */
typedef struct conform_case {
    char name[96];
    char category[24];
    uint32_t caps;         /* the smattn_plugin_caps the case uses (computed) */
    smattn_problem prob;   /* kv_lens / q_lens point to lens[0] / lens[1] */
    smattn_inputs in64;    /* data are owned; F64 except the mask (BOOL) */
    int64_t count[7];      /* elements allocated for q, k, v, x, bias, mask, sinks */
    int64_t *lens[2];      /* owned */
    smattn_dtype kv_dtype; /* F32, or F16 / BF16 for the dtype cases (skipped if refused) */
    smattn_dtype q_dtype;  /* the same for Q, X, bias and sinks */
    smattn_dtype out_dtype; /* the same for O, LSE and P */
    int garbage;           /* invisible slots hold NaN or infinity on purpose */
    int strided;           /* rows padded (pitch > D), padding holds NaN */
    int sparse;            /* Q, K, V are read only through their views (stride-0 broadcasts,
                              strides past 2^31 elements over untouched memory): converted
                              and checked by their views, not their count (suite huge) */
    size_t mapped[7];      /* bytes of tensor t mapped by conform_map_zero (0: malloc'd) */
    /* A ragged or paged case (SPEC 2.7, conform/battery_layout.c): prob and in64 above are
     * its dense, padded twin (q_lens / kv_lens the sequences' lengths S_b / T_b), the
     * problem judged; a kernel claiming the layout is handed the same problem laid out as
     * `layout` says (conform_case_lay_out), and never the twin. */
    int has_layout;
    smattn_layout layout;  /* its arrays owned (lay_arrays, lay_table) */
    int kv_hnd;            /* pages [num_pages, Hkv, page_size, D] (else NHD) */
    int64_t *lay_arrays[3]; /* cu_seqlens_q, cu_seqlens_k, seqused_k (NULL: not used) */
    int32_t *lay_table;     /* the block table (NULL: none) */
    float *slopes;         /* owned: prob.alibi_slopes (SPEC 2.8), or NULL */
    int64_t split_at;      /* > 0: also run the keys [0, split_at) and [split_at, T) as two
                              problems and merge them (split-KV consistency, SPEC 9.6);
                              only on a plain non-causal problem without sinks */
    /* Descales (SPEC 2.9, conform/battery_quant.c): prob.descale, owned with its per-head
     * arrays [B][Hkv] (NULL: none). */
    smattn_descale *descale;
    double *descale_heads[3];
} conform_case;

typedef struct conform_battery {
    conform_case *cases;
    size_t n, cap;
} conform_battery;

/* The checker's data, "vectors" (spec/vectors) or "regressions" (conform/regressions): the
 * first directory holding something (an empty one is passed over) of $SMATTN_ROOT/<source
 * path> when SMATTN_ROOT is set, next to the executable in a source tree (build/smattn ->
 * ../spec/vectors), next to it in an installed tree (bin/smattn ->
 * ../share/smattn/vectors), SMATTN_DATADIR/what (compiled in: make install's share/smattn).
 * 0 with the directory in out, or -1 with the places looked at in `looked` (datadir.c). */
int conform_find_data(const char *what, char *out, size_t cap, char *looked, size_t lcap);
/* The digest of the golden vectors in dir as the batteries read them (every *.json not
 * starting with '.', sorted): FNV-1a (conform_fnv1a) over each file's name, a NUL, its
 * size as 8 bytes little endian and its bytes. The contents, not the path: two checkouts of
 * the same vectors give one digest, one changed byte another. dir NULL or "" (no vectors):
 * CONFORM_FNV_BASIS. 0, or -1 with one line in err. */
int conform_vectors_digest(const char *dir, uint64_t *digest, char *err, size_t errlen);
/* The golden vectors' files in dir as the batteries and the digest take them: every *.json
 * not starting with '.', at most CONFORM_MAX_VECTORS, in strcmp order, each malloc'd into
 * names[] as "dir/name" (path 1) or "name" (path 0); *n their count (to free). 0; -1 out of
 * memory (nothing left to free); -2 when dir does not open (*n 0). */
#define CONFORM_MAX_VECTORS 512
int conform_vector_files(const char *dir, int path, char *names[CONFORM_MAX_VECTORS], size_t *n);
/* How a report writes it ("vectors": {"digest": ...}): "fnv1a64:" and 16 hex digits. */
#define CONFORM_VECTORS_DIGEST_FMT "fnv1a64:%016llx"

/* The rows per (batch, head) a run of the suite "huge" judges when --rows does not say. */
#define CONFORM_HUGE_ROWS 64
/* And its per-case time limit when --case-timeout does not say (a kernel runs each case
 * twice; 2^31 scores take seconds). */
#define CONFORM_HUGE_CASE_TIMEOUT 300.0
/* Build the suite "quick", "full" or "huge" (cases at sizes where 32-bit index arithmetic
 * overflows, conform/battery_huge.c: to be judged on sampled rows, --rows) for a seed; golden vectors come from vectors_dir
 * ("": none; NULL: found next to the executable or in the working directory, none found
 * being no error here: the CLI locates them and makes that one). 0, or -1 with err. */
int conform_battery_build(conform_battery *b, const char *suite, uint64_t seed,
                          const char *vectors_dir, char *err, size_t errlen);
/* The same with the fuzzer finds from regressions_dir ("": none; NULL: conform_find_data's
 * search), for callers whose executable says nothing of where the data is (the Python
 * package runs inside python3). */
int conform_battery_build_dirs(conform_battery *b, const char *suite, uint64_t seed,
                               const char *vectors_dir, const char *regressions_dir, char *err,
                               size_t errlen);
void conform_battery_free(conform_battery *b);
/* A case's inputs converted to the dtypes a kernel takes, with the conventions it claims
 * set in the problem. Tensors are owned (conform_inst_free); the mask is shared. */
typedef struct conform_inst {
    smattn_problem prob;
    smattn_inputs in;
    void *owned[6];
    size_t mapped[6]; /* bytes of owned[t] mapped by conform_map_zero (0: malloc'd) */
} conform_inst;
/* Zero memory reserved without being committed (MAP_NORESERVE): a page costs only when
 * written, and a fork does not count the rest, so that a view may stride past 2^31
 * elements over a few touched MiB (battery_huge.c). NULL on failure. */
void *conform_map_zero(size_t bytes);
void conform_unmap(void *p, size_t bytes);
/* 0, or -1 when out of memory. qdt is used for Q, X, bias and sinks; kvdt for K and V. */
int conform_case_materialise(const conform_case *c, smattn_dtype qdt, smattn_dtype kvdt,
                             smattn_empty empty, smattn_empty_lse empty_lse, conform_inst *m);
void conform_inst_free(conform_inst *m);
/* Nonzero if instance m reads quantised inputs: Q, K or V in an 8-bit or block dtype, or
 * descales (SPEC 2.9). */
int conform_inst_quantised(const conform_inst *m);
/* Its binary64 twin (SPEC 2.9): Q, K and V in binary64 with every element of their views
 * decoded and multiplied by its factor (exact), slots outside the views NaN, the problem
 * without descales; the other inputs shared with m (valid while m is). The oracle's
 * outputs and the bound of the twin are those of m; the judge reads the twin. 0, or -1
 * when out of memory. */
int conform_inst_real(const conform_inst *m, conform_inst *tw);
/* The same with the factors of tensor `forget` ('q', 'k' or 'v'; 0: none) taken as 1: the
 * problem of a kernel that leaves that descale out (the judge's hint). */
int conform_inst_real_forget(const conform_inst *m, char forget, conform_inst *tw);
/* A layout case's inputs as the kernel is handed them (SPEC 2.7): from the dense instance
 * dense (conform_case_materialise of c), Q packed when c packs the queries, K and V packed
 * or in pages (every slot no sequence uses, and keys past seqused_k, holding NaN and
 * infinities), the other inputs shared with dense; lay->prob is dense's with c's layout,
 * q_lens / kv_lens NULL where the layout replaces them. Valid while c and dense are. 0, or
 * -1 when out of memory. */
int conform_case_lay_out(const conform_case *c, const conform_inst *dense, conform_inst *lay);
/* Does case c keep its meaning in the dtypes a kernel takes (qdt for Q, X, bias and sinks;
 * kvdt for K and V)? 0 if every finite nonzero input stays finite and nonzero; else -1
 * with the reason in why ("K holds -1e+06, which overflows in binary16 ..."): the case is
 * skipped with it, never run as a silently different case (NaN/inf garbage and zeros
 * convert as they are; rounding is allowed: the oracle reads the converted values). An
 * ALiBi mask-mode case whose bias would be f64 does not fit either (SPEC 2.8 refuses it). */
int conform_case_dtype_fits(const conform_case *c, smattn_dtype qdt, smattn_dtype kvdt, char *why,
                            size_t cap);
/* The features of caps as ", "-separated names into buf; and one name per bit. */
void conform_caps_str(uint32_t caps, char *buf, size_t cap);
const char *conform_cap_name(unsigned bit);
/* The caps a problem uses (all but CAP_STRIDES, CAP_LSE, CAP_P), its layout's included. */
uint32_t conform_problem_caps(const smattn_problem *p, const smattn_inputs *in);
/* The layout caps of L (PACKED_Q, PACKED_KV, PAGED_NHD or, when K's slot stride is below
 * its head stride, PAGED_HND; in may be NULL: NHD). */
uint32_t conform_layout_caps(const smattn_layout *L, const smattn_inputs *in);

/* ---- shards (--shard I/N) -------------------------------------------------------------- */

/* Shard I of N holds the cases whose name hashes to I modulo N (conform_shard_hash, 64-bit
 * FNV-1a of the name's bytes): the N shards partition any suite, whatever N, and the split
 * does not depend on the order or number of the other cases. */
#define CONFORM_SHARD_MAX 65536u
typedef struct conform_shard {
    unsigned index, count; /* 0 <= index < count; count 1: everything */
} conform_shard;
uint64_t conform_shard_hash(const char *name);
/* FNV-1a (64 bits) of n bytes from h (CONFORM_FNV_BASIS to start): the shards' name hash,
 * the battery's seeds from case names, the input hashes around a kernel's call, the golden
 * vectors' digest. */
#define CONFORM_FNV_BASIS 0xcbf29ce484222325ULL
uint64_t conform_fnv1a(const void *data, size_t n, uint64_t h);
int conform_shard_of(const char *name, unsigned n);
/* Parse "I/N" (decimal, 0 <= I < N <= CONFORM_SHARD_MAX): 0, or -1 with a one-line err. */
int conform_shard_parse(const char *s, conform_shard *sh, char *err, size_t errlen);
/* Nonzero if the case named name belongs to shard sh (NULL or count 1: every case). */
int conform_shard_has(const conform_shard *sh, const char *name);
struct conform_battery;
/* Keep only the cases of shard sh in b (the others freed), in their order. */
void conform_battery_keep_shard(struct conform_battery *b, const conform_shard *sh);

/* ---- results ------------------------------------------------------------------------- */

typedef enum conform_status { CONFORM_PASS = 0, CONFORM_FAIL = 1, CONFORM_SKIP = 2 } conform_status;

typedef struct conform_result {
    char name[96];
    char category[24];
    uint32_t caps;
    int64_t shape[7]; /* B, S, T, Hq, Hkv, D, Dv */
    conform_status status;
    double max_ratio;       /* max |c - e| / bound over the outputs (SPEC 6.10) */
    double max_ulp;         /* max ulp error over elements with a finite exact value */
    int64_t unbounded;      /* elements with a finite exact value and bound +inf (6.8) */
    int64_t unbounded_rows; /* rows (b, h, i) holding such elements: not judged */
    int64_t nonfinite;      /* NaN or infinity where the spec has a finite value */
    int64_t mismatched;     /* judged elements beyond their bound (ratio > 1) */
    int64_t elements;       /* elements compared */
    double seconds;         /* wall time of the kernel's child process */
    char reason[512];       /* why it failed or was skipped; "" on a plain pass */
    /* The element the reason names (a failure) or the worst one (a pass): worst_out is 0
     * (O), 1 (LSE), 2 (P) or -1 (nothing judged); worst_ix is (b, h, i, col) as in SPEC
     * 2.1's names (col: O's column or P's key; 0 for LSE). Set by conform_judge only. */
    int worst_out;
    int64_t worst_ix[4];
    double worst_got, worst_exact, worst_bound;
    char output[1024]; /* the first lines the kernel wrote to stdout/stderr in the case */
    int has_pm;        /* pm is the precision model the case was judged under */
    smattn_precision pm;
    int64_t index;     /* the case's position in the whole suite (or listing), whatever the
                          shard: merged shard reports are put back in this order */
    int rerun;         /* the case ran twice (threads 1 and 2 when the plugin takes a
                          thread count): 1 the same bits, -1 other bits, 0 not compared */
    /* The rows (b, h, i) judged, of rows_total = B Hq S (both 0: not judged at all); fewer
     * than all when the check was sampled (--rows, conform/rows.c): then the verdict is on
     * those rows only. */
    int64_t rows_judged, rows_total;
} conform_result;

/* ---- sampled rows (--rows K, rows.c) ---------------------------------------------------- */

/* A check of K query rows per (batch, head) instead of all of them: the oracle's cost is
 * then O(K T D) per head. k 0: every row (the full check). */
typedef struct conform_sample {
    int64_t k;
    uint64_t seed;
} conform_sample;
/* The rule, in words, for reports. */
#define CONFORM_ROWS_RULE                                                                       \
    "per (batch, head): rows 0 and S-1, rows 2^k-1 and 2^k below S (k >= 1), the rest up to K " \
    "drawn by selection sampling from splitmix64 seeded by (seed, b, h)"
/* The rows of S judged for (b, h) under K and seed, ascending, into out (room for S): the
 * rule of CONFORM_ROWS_RULE, so at least the always-judged rows even when K is smaller,
 * and every row when K >= S. Returns the count. */
int64_t conform_rows_pick(int64_t S, int64_t K, uint64_t seed, int64_t b, int64_t h, int64_t *out);
/* Every judged row of p as indices (b Hq + h) S + i, ascending, malloc'd (count in *n);
 * NULL when out of memory. */
int64_t *conform_rows_list(const smattn_problem *p, int64_t K, uint64_t seed, int64_t *n);
/* The same with batch b's rows [0, rows_of[b]) only (a packed batch's stored rows; NULL:
 * conform_rows_list): the rule applied to S_b = rows_of[b], so each sequence's first and
 * last rows are among them. */
int64_t *conform_rows_list_of(const smattn_problem *p, int64_t K, uint64_t seed,
                              const int64_t *rows_of, int64_t *n);

/* ---- running and judging ------------------------------------------------------------- */

/* Run case c through kernel k in a child process (time limit `timeout` seconds; the
 * plugin loaded, its precision model computed and the kernel called there, its output
 * captured into capture_fd if >= 0) and judge it; fills *r. Never fails: every problem
 * becomes a failed or skipped result. */
void conform_run_case(const conform_kernel *k, const conform_case *c, double timeout,
                      int capture_fd, conform_result *r);
/* The same, judged on the rows sample chooses (NULL or k 0: every row). */
void conform_run_case_rows(const conform_kernel *k, const conform_case *c, double timeout,
                           int capture_fd, const conform_sample *sample, conform_result *r);

/* Judge outputs `got` (O required for attention; LSE and P optional; any float dtype,
 * contiguous) of problem p against the oracle under precision model pm. `strided` says the
 * rows of the inputs are padded and the padding, outside every tensor's view, holds NaN
 * (named in messages; slots inside the views the judge inspects itself, row by row, for
 * the leak hint). Fills status, figures and reason of r. */
void conform_judge(const smattn_problem *p, const smattn_inputs *in, const smattn_outputs *got,
                   const smattn_precision *pm, int strided, conform_result *r);
/* The same with smattn__bound_flags flags (core/internal.h): SMATTN__BOUND_SINK_IN_MAX for
 * a kernel claiming SMATTN_CAP_SINK_IN_MAX. */
void conform_judge_flags(const smattn_problem *p, const smattn_inputs *in,
                         const smattn_outputs *got, const smattn_precision *pm, unsigned flags,
                         int strided, conform_result *r);
/* The same on the rows sample chooses (NULL or k 0: every row): the oracle and the bound
 * run on those rows only, and only their elements are judged; r->rows_judged says how
 * many. */
/* ---- the merge battery (merge_check.c, SPEC 9) ------------------------------------------ */

/* One merge case: the problem and its partials in binary64, [N,B,S,Hq,Dv] and [N,B,Hq,S]
 * contiguous (converted to the kernel's dtype when run), and the layout the kernel is
 * handed them in within a partial: CONFORM_MERGE_PACKED (contiguous rows),
 * CONFORM_MERGE_PADDED (3 elements between O's heads, 5 between its rows, 7 between its
 * batches; 2 between the LSE's heads, 1 between its batches) or
 * CONFORM_MERGE_LSE_TOKEN_MAJOR (the LSE [B,S,Hq] in memory, as FlashInfer's, O's rows 4
 * apart): every slot between elements NaN. The outputs follow the layout: packed, or
 * strided too (O's heads 2, rows 3, batches 1 apart and the LSE's heads 1, batches 2 apart;
 * or the LSE [B,S,Hq] and O's rows 2 apart), the slots between them holding canary bytes
 * that a merge must leave as they are. */
enum { CONFORM_MERGE_PACKED = 0, CONFORM_MERGE_PADDED = 1, CONFORM_MERGE_LSE_TOKEN_MAJOR = 2 };
typedef struct conform_merge_case {
    char name[96];
    smattn_merge_problem prob;
    double *o, *l;
    int layout;
} conform_merge_case;
typedef struct conform_merge_battery {
    conform_merge_case *cases;
    size_t n, cap;
} conform_merge_battery;
/* 0, or -1 out of memory. */
int conform_merge_battery_build(conform_merge_battery *mb, uint64_t seed);
/* Append the merge golden vectors of dir (sorted; "op": "merge", SPEC 8) as the cases
 * "merge/golden_<name>"; NULL or "" adds none. 0, or -1 out of memory. */
int conform_merge_battery_add_vectors(conform_merge_battery *mb, const char *dir);
void conform_merge_battery_free(conform_merge_battery *mb);
/* Run case c on k's smattn_plugin_merge in a child and judge it (category "merge"); a
 * kernel without the entry skips it. */
void conform_run_merge_case(const conform_kernel *k, const conform_merge_case *c, double timeout,
                            int capture_fd, conform_result *r);

/* ---- the backward battery (backward_check.c, SPEC 10) ---------------------------------- */

/* Forward cases of category "backward" (clean inputs: no garbage in invisible slots) and,
 * per case, dO [B,S,Hq,Dv] and dLSE [B,Hq,S] (NULL: none) in binary64, contiguous. */
typedef struct conform_backward_battery {
    conform_battery cases;
    double **dout, **dlse;
    unsigned *flags; /* per case: what it gets beyond its problem (backward_check.c) */
    size_t cap;
} conform_backward_battery;
/* The cases of suite "quick" or "full" (a superset) for a seed. 0, or -1 out of memory. */
int conform_backward_battery_build(conform_backward_battery *bb, const char *suite, uint64_t seed);
void conform_backward_battery_free(conform_backward_battery *bb);
/* Run case idx on k in a child: its forward (O and LSE in a dtype of info.out_dtypes), then
 * smattn_plugin_backward from them (twice, on 1 and 2 threads, when k claims
 * SMATTN_CAP_BACKWARD_DETERMINISTIC, the bits compared); judged by
 * conform_judge_backward_result. A kernel without the entry, or not claiming the case's
 * features or SMATTN_CAP_LSE, skips it. */
void conform_run_backward_case(const conform_kernel *k, const conform_backward_battery *bb,
                               size_t idx, double timeout, int capture_fd, conform_result *r);
/* Judge got (dq, dk, dv) against smattn_ref_backward under smattn_backward_bound for pm
 * (conform/judge_backward.c) into r: status, elements, mismatched, max_ratio, worst_*, and
 * for a failure a reason naming the bug class (SPEC 10.1-10.2: an empty row given a NaN, a
 * key no row sees given gradient, the GQA group not summed, softcap's derivative, Delta or
 * dP, P itself), then the worst element. Where the oracle cannot decide an element
 * (SMATTN_ERR_PRECISION) the case is skipped, its reason starting with
 * CONFORM_SKIP_ORACLE_UNDECIDED, after dQ, dK and dV have been judged alone when dBias or
 * dSinks were given: a failure of theirs still fails it. */
void conform_judge_backward_result(const smattn_problem *p, const smattn_inputs *in,
                                   const smattn_grad_inputs *gin, const smattn_grad_outputs *got,
                                   const smattn_backward_precision *pm, conform_result *r);

/* Split-KV consistency (SPEC 9.6): the kernel's own O and LSE over keys [0, t) (sp[0],
 * sin[0], sout[0]) and [t, T) (sp[1], ...), merged by the oracle (smattn_ref_merge), agree
 * with its attention over all keys (full) within the sum of the two bounds: the full
 * output's and the parts' propagated through the merge. A failure sets r (status and
 * reason); a pass leaves r as it is. */
void conform_judge_split(const smattn_problem *p, const smattn_inputs *in,
                         const smattn_outputs *full, const smattn_problem sp[2],
                         const smattn_inputs sin[2], const smattn_outputs sout[2],
                         const smattn_precision *pm, unsigned flags, int64_t t,
                         conform_result *r);
void conform_judge_rows(const smattn_problem *p, const smattn_inputs *in,
                        const smattn_outputs *got, const smattn_precision *pm, unsigned flags,
                        int strided, const conform_sample *sample, conform_result *r);
/* The same for a layout's dense twin (SPEC 2.7) whose batch b stores rows [0, stored[b])
 * only (packed queries; NULL: every row): the other rows, which the layout does not have,
 * have their O and LSE left unjudged and, when P is not given, are counted in neither
 * rows_judged nor rows_total; a sample is drawn over each batch's stored rows
 * (conform_rows_list_of). */
void conform_judge_twin(const smattn_problem *p, const smattn_inputs *in, const smattn_outputs *got,
                        const smattn_precision *pm, unsigned flags, int strided,
                        const conform_sample *sample, const int64_t *stored, conform_result *r);

/* Judge outputs got of layout problem lp (as laid out: packed O and LSE with cu_seqlens_q)
 * as its dense twin tp with inputs tin (SPEC 2.7): got scattered into the twin's shapes,
 * then conform_judge_twin with each batch's stored rows (i < S_b). A failure's reason ends
 * naming the sequence, its packed rows and pages (conform_layout_describe). */
void conform_judge_layout(const smattn_problem *tp, const smattn_inputs *tin,
                          const smattn_problem *lp, const smattn_outputs *got,
                          const smattn_precision *pm, unsigned flags, int strided,
                          const conform_sample *sample, conform_result *r);
/* "sequence b of the packed/paged batch: ..." into out: S_b and its packed rows, T_b and
 * its packed keys or its pages (up to a few, the page size, the slots its last page holds,
 * the table columns past them never read), and key j's page and slot when j >= 0. */
void conform_layout_describe(const smattn_problem *lp, int64_t b, int64_t j, char *out,
                             size_t cap);
/* Append a layout description to a failed result's reason, cutting the reason to keep
 * the description whole. */
void conform_reason_append(conform_result *r, const char *what);

/* ---- reports ------------------------------------------------------------------------- */

typedef struct conform_report {
    const char *kernel_name, *kernel_version, *kernel_path;
    const char *suite;
    uint64_t seed;
    const conform_result *results;
    size_t n;
    /* What the kernel was judged under: its declared precision model (per_problem: it
     * exports smattn_plugin_precision, and each case's model is in its result) and the
     * conventions it claims (empty rows, empty LSE, the features; "" for files). */
    smattn_precision precision;
    int per_problem;
    char conventions[512];
    /* golden vectors: where from ("" none) and how many cases of them ran */
    const char *vectors_dir;
    size_t vectors;
    /* --require-precision (filled by conform_require_precision): failures, one per line */
    const char *required;
    size_t precision_failures;
    char *precision_text; /* owned, may be NULL */
    /* baseline gate (filled by conform_baseline_compare) */
    const char *baseline_path;
    size_t regressions;
    char *regression_text; /* one line per regression; owned, may be NULL */
    /* What makes the run a pure function of (suite, seed, shard), written into the JSON
     * report so that `smattn report merge` can refuse pieces of different runs: the
     * smattn version (NULL: this one), the shard (count 0 or 1: the whole suite), the
     * --only filter (NULL: none) and, for a merged report, the shards missing from it. */
    const char *smattn_version;
    unsigned shard_index, shard_count;
    const char *only;
    const char *missing_shards; /* "" or NULL: none (a --partial merge names them) */
    /* --rows K with --seed: the sample of rows judged (k 0: every row), and of the results,
     * the rows judged and the rows there are (conform_report_rows) */
    conform_sample sample;
    /* the digest of the golden vectors' contents (conform_vectors_digest; has_ 0: not known,
     * as in reports written before it was recorded) */
    int has_vectors_digest;
    uint64_t vectors_digest;
} conform_report;

typedef struct conform_totals {
    size_t cases, passed, failed, skipped;
} conform_totals;

conform_totals conform_report_totals(const conform_report *rep);
/* The rows judged and the rows there are, over the results; sampled: fewer were judged. */
void conform_report_rows(const conform_report *rep, int64_t *judged, int64_t *total);
int conform_report_sampled(const conform_report *rep);
int conform_report_conforming(const conform_report *rep);
/* The summary table by category, the failures and the verdict line, on f. */
void conform_report_print(const conform_report *rep, FILE *f);
/* JSON, JUnit XML and HTML files; 0, or -1 with one line in err. */
int conform_report_json(const conform_report *rep, const char *path, char *err, size_t errlen);
int conform_report_junit(const conform_report *rep, const char *path, char *err, size_t errlen);
int conform_report_html(const conform_report *rep, const char *path, char *err, size_t errlen);
/* fclose f, written to path: 0, or -1 with "path: cannot write" if any write failed. */
int conform_file_close(FILE *f, const char *path, char *err, size_t errlen);
/* A report file opened for writing. The path must name a regular file (created 0644 if
 * absent), never a FIFO (opening one would wait for a reader), a device or a directory,
 * checked on the descriptor opened; an existing file must be empty or a report of smattn
 * (JSON, JUnit or HTML, told by its first bytes), so that a path given by mistake (a case's
 * q.npy) loses nothing. The report is written to a temporary beside the file (beside a
 * symbolic link's target), flushed and renamed over it by conform_report_close: a run
 * that fails (disk full, a file-size limit, a signal) leaves the file as it was. Only
 * when the directory takes no new file is the file itself emptied and written.
 * conform_report_abandon drops a report without writing it (the file as it was);
 * conform_report_remove_temp unlinks the temporary of the report being written now
 * (async-signal-safe, for a handler). NULL / -1 with "PATH: cannot write: ..." in err.
 * conform_report_check runs the same checks and writes nothing ("NAME PATH: ..."). */
typedef struct conform_report_file {
    FILE *f;
    char *tmp;   /* the temporary (malloc'd); NULL when the file itself is written */
    char *final; /* the file renamed over (malloc'd) */
    int created; /* the file did not exist before: removed again if the report fails */
} conform_report_file;
FILE *conform_report_open(const char *path, conform_report_file *rf, char *err, size_t errlen);
int conform_report_close(conform_report_file *rf, const char *path, char *err, size_t errlen);
void conform_report_abandon(conform_report_file *rf);
void conform_report_remove_temp(void);
int conform_report_check(const char *name, const char *path, char *err, size_t errlen);
/* s as text safe to show anywhere: valid UTF-8 (RFC 3629) without control characters: C0
 * controls, DEL, the C1 controls U+0080-U+009F, U+FFFE, U+FFFF and every byte that does not
 * belong to a valid UTF-8 character are written as \xHH per byte; newline and tab as \n
 * and \t, or kept as they are with keep_lines (JSON and XML hold them). Written into out
 * (cap bytes, NUL included; 4 strlen(s) + 1 holds any s), cut at a whole piece. Returns
 * the length written. */
size_t conform_text_clean(const char *s, int keep_lines, char *out, size_t cap);
/* A baseline (--baseline): a JSON report of an earlier run, read and checked once, before
 * any plugin code runs (a plugin can write the user's files: a baseline read again after
 * it ran would be whatever the plugin left there). */
struct json_object;
typedef struct conform_baseline {
    const char *path;
    struct json_object *root; /* owned */
} conform_baseline;
/* Read path (a regular file of at most CONFORM_BASELINE_MAX bytes: a FIFO, a device or a
 * directory is refused, never waited on or read without end) and parse it with the strict
 * JSON reader (io/util.h: NaN, Infinity, duplicate keys refused), then check that it is a
 * report of ours: a "cases" array of objects with a string "name" and "status" and a
 * "max_ratio" that is a number or null, and a valid declared precision model (without it
 * the precision gate would be off, silently). 0, or -1 with "baseline F: ..." in err. */
#define CONFORM_BASELINE_MAX ((size_t)256 << 20)
int conform_baseline_load(const char *path, conform_baseline *b, char *err, size_t errlen);
void conform_baseline_free(conform_baseline *b);
/* Compare the run with baseline b; fills rep->regressions and rep->regression_text. A
 * case regresses when it passed in the baseline and now fails, is skipped, declined, not
 * run or missing, or its ratio grew past the limit; the declared precision model (and a
 * case's own model) regresses in every field looser than the baseline's. */
void conform_baseline_compare(conform_report *rep, const conform_baseline *b);
/* The fields in which model a is looser than b ("u_acc 0.000977 > 5.96e-08, ..."), with
 * only the unit roundoffs (u_score, u_acc, u_p) when roundoff_only; "" if none. An acc_len
 * of 0 (every term in one serial sum) is the loosest. */
void conform_precision_looser(const smattn_precision *a, const smattn_precision *b,
                              int roundoff_only, char *out, size_t cap);
/* --require-precision: the declared model and every case's model against that of format
 * t (smattn_precision_of) in u_score, u_acc, u_p, exp_ulps and tiny (up to the format's
 * smallest normal: flushing to zero is allowed); blocks and acc_len are the algorithm's,
 * not judged here. Fills rep->required, precision_failures and precision_text. */
void conform_require_precision(conform_report *rep, smattn_dtype t);
/* "empty rows zero, empty LSE neg_inf; claims causal_lower_right, ..." into out. */
void conform_conventions_str(const smattn_plugin_info *info, char *out, size_t cap);

/* ---- case directories (gen / check) -------------------------------------------------- */

/* Write every case of b that a file can express under OUT/<name>/ (inputs in dtype t, the
 * conventions given) and OUT/manifest.json. Returns the number written, or -1 with err.
 * layout 0 writes the cases dense; 1, 2, 3 write each attention case with at least one
 * query and one key with its queries packed (cu_seqlens_q) and its keys packed
 * (cu_seqlens_k), paged (block_table.npy, pages of 16 in reverse order, NaN in unused
 * slots) or paged in FlashInfer's CSR form (SPEC 7.1): the same problem on every row a
 * sequence has; a layout case (has_layout) is written in its own layout whichever of 1-3
 * (conform_case_lay_out: its packing, seqused_k, pages, NHD or HND). layout | CONFORM_GEN_BACKWARD (dense only) also writes each attention
 * case's do.npy [B,S,Hq,Dv] (SPEC 7.1, 10: a backward case), uniform in [-1, 1) in dtype t
 * from the case's name and the seed. */
#define CONFORM_GEN_BACKWARD 16
/* A non-empty OUT is refused unless force, and then each case directory written is
 * removed first, so that no file of an earlier run (an old o.npy, a skip marker) stays. */
long conform_gen_write(const conform_battery *b, const char *out, smattn_dtype t,
                       smattn_empty empty, smattn_empty_lse empty_lse, int layout,
                       const char *suite, uint64_t seed, int force, char *err, size_t errlen);
/* Judge CASE_OR_DIR: one case directory, or a directory of them (manifest.json or every
 * subdirectory holding q.npy or x.npy). Results are malloc'd into *res (count *n).
 * 0, or -1 with err for an unusable path (a case whose o.npy is missing or malformed is a
 * failed result, not an error). */
/* A case directory holding a file `skip` (its first line the reason), or whose name starts
 * with one of the comma-separated prefixes of `skip`, is a skipped result. progress (may
 * be NULL) is called before each case and once at the end with done == total. */
typedef void (*conform_progress_fn)(size_t done, size_t total, const char *name);
/* shard (may be NULL): judge only the cases of that shard (by case name, as --shard). */
int conform_check_path(const char *path, const smattn_precision *pm, const char *skip,
                       const conform_shard *shard, conform_progress_fn progress,
                       conform_result **res, size_t *n, char *err, size_t errlen);
/* The same, judged on the rows sample chooses (NULL or k 0: every row). */
int conform_check_path_rows(const char *path, const smattn_precision *pm, const char *skip,
                            const conform_shard *shard, const conform_sample *sample,
                            conform_progress_fn progress, conform_result **res, size_t *n,
                            char *err, size_t errlen);


/* ---- merged reports (smattn report merge) ------------------------------------------------ */

/* A JSON report of smattn conform or check read back (conform_report_load): the report and
 * its results, every string owned. */
typedef struct conform_loaded {
    conform_report rep;
    conform_result *results;
    char *strings[8]; /* kernel name, version, path, suite, smattn version, only, vectors dir */
} conform_loaded;
/* A precision model as conform_report_json stores it; 0, or -1 if o is not one. */
struct json_object;
int conform_pm_from_json(struct json_object *o, smattn_precision *m);
/* Read a JSON report written by conform_report_json (strict JSON, a regular file of at
 * most CONFORM_BASELINE_MAX bytes); 0, or -1 with one line in err. */
int conform_report_load(const char *path, conform_loaded *L, char *err, size_t errlen);
void conform_loaded_free(conform_loaded *L);
/* Merge shard reports into *out (its results malloc'd into *results, strings pointing into
 * the inputs): refuses, with one line in err naming the reason, reports of different
 * suites, seeds, --only filters, kernels, precision models, conventions, smattn versions
 * or golden vectors (their digests; a report without one merges only with others without),
 * different shard counts, a shard given twice or a case in two of them, and
 * missing shards unless partial (then out->missing_shards names them, in buf). */
int conform_report_merge(conform_loaded *in, size_t n, const char *const *paths, int partial,
                         conform_report *out, conform_result **results, char *buf, size_t bufcap,
                         char *err, size_t errlen);

#endif
