/* conform.h: the conformance checker behind `smattn conform`, `gen` and `check` (issue 6).
 *
 * Library code of the checker, linked into the CLI only (build/libsmattn_conform.a):
 *   plugin.c   load a kernel under test (a .so speaking include/smattn_kernel.h, or the
 *              built-in optimised kernel through the same table)
 *   builtin.c  the built-in kernel as a plugin ("smattn-opt")
 *   battery.c  the cases: golden vectors, edge cases by category, random sweeps
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

#include "smattn.h"
#include "smattn_kernel.h"

/* Per-case time limit (seconds) when --time does not set a shorter one. */
#define CONFORM_CASE_TIMEOUT 10.0

/* The baseline gate (--baseline): a case regresses when it passed before and fails now,
 * or when its max error/bound ratio r grew beyond max(CONFORM_BASELINE_FACTOR * r0,
 * r0 + CONFORM_BASELINE_SLACK) for the stored ratio r0. The slack keeps tiny ratios (a
 * kernel exact to a few ulps sits near 0.01) from failing on noise-level changes. */
#define CONFORM_BASELINE_FACTOR 1.25
#define CONFORM_BASELINE_SLACK 0.05

/* ---- kernels ------------------------------------------------------------------------- */

typedef struct conform_kernel {
    char name[64], version[64];
    char path[1024];         /* the .so given, or "builtin" */
    smattn_plugin_info info; /* the plugin's info (name/version point into the above) */
    smattn_plugin_run_fn attention;
    smattn_plugin_run_fn softmax;         /* NULL: not exported */
    smattn_plugin_precision_fn precision; /* NULL: info.precision */
    void *handle;                         /* dlopen handle; NULL for the built-in kernel */
} conform_kernel;

/* Load "builtin" (or NULL) or a .so path. 0, or -1 with one line in err: cannot open,
 * missing symbol, ABI version mismatch, an info that is not usable. */
int conform_kernel_open(const char *spec, conform_kernel *k, char *err, size_t errlen);
void conform_kernel_close(conform_kernel *k);
/* The precision model the kernel is judged by for a problem. */
smattn_precision conform_kernel_precision(const conform_kernel *k, const smattn_problem *p);

/* The built-in optimised kernel as plugin entry points (builtin.c). */
const smattn_plugin_info *conform_builtin_describe(uint32_t host_abi);
int conform_builtin_attention(const smattn_problem *p, const smattn_inputs *in,
                              const smattn_outputs *out);
int conform_builtin_softmax(const smattn_problem *p, const smattn_inputs *in,
                            const smattn_outputs *out);
smattn_precision conform_builtin_precision(const smattn_problem *p);

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
} conform_case;

typedef struct conform_battery {
    conform_case *cases;
    size_t n, cap;
} conform_battery;

/* Build the suite "quick" or "full" for a seed; golden vectors come from vectors_dir
 * (NULL: found next to the executable or in the working directory; none found is not an
 * error for a directory that was not named). 0, or -1 with one line in err. */
int conform_battery_build(conform_battery *b, const char *suite, uint64_t seed,
                          const char *vectors_dir, char *err, size_t errlen);
void conform_battery_free(conform_battery *b);
/* A case's inputs converted to the dtypes a kernel takes, with the conventions it claims
 * set in the problem. Tensors are owned (conform_inst_free); the mask is shared. */
typedef struct conform_inst {
    smattn_problem prob;
    smattn_inputs in;
    void *owned[6];
} conform_inst;
/* 0, or -1 when out of memory. qdt is used for Q, X, bias and sinks; kvdt for K and V. */
int conform_case_materialise(const conform_case *c, smattn_dtype qdt, smattn_dtype kvdt,
                             smattn_empty empty, smattn_empty_lse empty_lse, conform_inst *m);
void conform_inst_free(conform_inst *m);
/* The features of caps as ", "-separated names into buf; and one name per bit. */
void conform_caps_str(uint32_t caps, char *buf, size_t cap);
const char *conform_cap_name(unsigned bit);
/* The caps a problem uses (all but CAP_STRIDES, CAP_LSE, CAP_P). */
uint32_t conform_problem_caps(const smattn_problem *p, const smattn_inputs *in);

/* ---- results ------------------------------------------------------------------------- */

typedef enum conform_status { CONFORM_PASS = 0, CONFORM_FAIL = 1, CONFORM_SKIP = 2 } conform_status;

typedef struct conform_result {
    char name[96];
    char category[24];
    uint32_t caps;
    int64_t shape[7]; /* B, S, T, Hq, Hkv, D, Dv */
    conform_status status;
    double max_ratio;  /* max |c - e| / bound over the outputs (SPEC 6.10) */
    double max_ulp;    /* max ulp error over elements with a finite exact value */
    int64_t unbounded; /* elements with a finite exact value and bound +inf (6.8) */
    int64_t nonfinite; /* NaN or infinity where the spec has a finite value */
    int64_t elements;  /* elements compared */
    double seconds;    /* wall time of the kernel's child process */
    char reason[512];  /* why it failed or was skipped; "" on a plain pass */
} conform_result;

/* ---- running and judging ------------------------------------------------------------- */

/* Run case c through kernel k in a child process (time limit `timeout` seconds) and judge
 * it; fills *r. Never fails: every problem becomes a failed or skipped result. */
void conform_run_case(const conform_kernel *k, const conform_case *c, double timeout,
                      conform_result *r);

/* Judge outputs `got` (O required for attention; LSE and P optional; any float dtype,
 * contiguous) of problem p against the oracle under precision model pm. `garbage` says
 * invisible slots hold NaN (named in messages). Fills status, figures and reason of r. */
void conform_judge(const smattn_problem *p, const smattn_inputs *in, const smattn_outputs *got,
                   const smattn_precision *pm, int garbage, conform_result *r);

/* ---- reports ------------------------------------------------------------------------- */

typedef struct conform_report {
    const char *kernel_name, *kernel_version, *kernel_path;
    const char *suite;
    uint64_t seed;
    const conform_result *results;
    size_t n;
    /* baseline gate (filled by conform_baseline_compare) */
    const char *baseline_path;
    size_t regressions;
    char *regression_text; /* one line per regression; owned, may be NULL */
} conform_report;

typedef struct conform_totals {
    size_t cases, passed, failed, skipped;
} conform_totals;

conform_totals conform_report_totals(const conform_report *rep);
int conform_report_conforming(const conform_report *rep);
/* The summary table by category, the failures and the verdict line, on f. */
void conform_report_print(const conform_report *rep, FILE *f);
/* JSON, JUnit XML and HTML files; 0, or -1 with one line in err. */
int conform_report_json(const conform_report *rep, const char *path, char *err, size_t errlen);
int conform_report_junit(const conform_report *rep, const char *path, char *err, size_t errlen);
int conform_report_html(const conform_report *rep, const char *path, char *err, size_t errlen);
/* fclose f, written to path: 0, or -1 with "path: cannot write" if any write failed. */
int conform_file_close(FILE *f, const char *path, char *err, size_t errlen);
/* Compare with a stored JSON report; fills rep->regressions and rep->regression_text.
 * 0, or -1 with one line in err when the file cannot be read or is not such a report. */
int conform_baseline_compare(conform_report *rep, const char *path, char *err, size_t errlen);

/* ---- case directories (gen / check) -------------------------------------------------- */

/* Write every case of b that a file can express under OUT/<name>/ (inputs in dtype t, the
 * conventions given) and OUT/manifest.json. Returns the number written, or -1 with err. */
long conform_gen_write(const conform_battery *b, const char *out, smattn_dtype t,
                       smattn_empty empty, smattn_empty_lse empty_lse, const char *suite,
                       uint64_t seed, char *err, size_t errlen);
/* Judge CASE_OR_DIR: one case directory, or a directory of them (manifest.json or every
 * subdirectory holding q.npy or x.npy). Results are malloc'd into *res (count *n).
 * 0, or -1 with err for an unusable path (a case whose o.npy is missing or malformed is a
 * failed result, not an error). */
int conform_check_path(const char *path, const smattn_precision *pm, conform_result **res,
                       size_t *n, char *err, size_t errlen);

#endif
