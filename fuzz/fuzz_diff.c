/* fuzz_diff.c: the kernel against the oracle under the SPEC 6 bound, then the kernel against
 * itself bit for bit: the decoded thread count against one thread, NaN/inf garbage in K/V
 * slots beyond kv_lens (masked for every query), and a repeated call. Any difference is a
 * MISMATCH report followed by abort().
 *
 * Speed (issue 5: >= 1,000 exec/s on one core): the oracle's cost grows with the elements
 * of P and most of the time went to a few large rows on its exact path, so problems are cut
 * to FUZZ_DIFF_MAX_P elements of P (fuzz_problem_shrink), and each input runs on one ISA,
 * chosen by the decoded seed, instead of on every ISA the CPU has. One decode input in 8
 * becomes a long decode (T > 1024, the kernel's split keys; fuzz_diff_long_T).
 * SMATTN_FUZZ_FULL=1 (make check's replay of the corpus) checks every input on every ISA;
 * SMATTN_FUZZ_FULL=2 (its replay of the regressions, some found before the cut) also checks
 * the problem as decoded, uncut. fuzz/README.md has the measurements. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "fuzz/common/fuzz_check.h"
#include "smattn.h"

#define TARGET "fuzz_diff"

static int full_mode;

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
    (void)argc, (void)argv;
    const char *e = getenv("SMATTN_FUZZ_FULL");
    full_mode = e ? atoi(e) : 0;
    return 0;
}

/* Every check of one ISA. */
static void check_isa(const fuzz_problem *fp, const fuzz_outputs *ref, const fuzz_outputs *bnd,
                      const char *isa)
{
    const smattn_problem *p = &fp->p;
    char what[128];
    fuzz_outputs first, again;
    snprintf(what, sizeof what, "kernel status (isa %s)", isa);
    fuzz_require_ok(TARGET, fp, fuzz_run_opt(p, &fp->in, isa, 1, &first), what);
    snprintf(what, sizeof what, "bound (isa %s)", isa);
    fuzz_check_bound(TARGET, fp, &first, ref, bnd, what);
    if (fp->threads > 1) {
        snprintf(what, sizeof what, "threads 1 vs %d (isa %s)", fp->threads, isa);
        fuzz_require_ok(TARGET, fp, fuzz_run_opt(p, &fp->in, isa, fp->threads, &again), what);
        fuzz_check_same_bits(TARGET, fp, &first, &again, what);
        fuzz_outputs_free(&again);
    }
    snprintf(what, sizeof what, "repeated call (isa %s)", isa);
    fuzz_require_ok(TARGET, fp, fuzz_run_opt(p, &fp->in, isa, 1, &again), what);
    fuzz_check_same_bits(TARGET, fp, &first, &again, what);
    fuzz_outputs_free(&again);
    if (p->op == SMATTN_OP_ATTENTION && p->kv_lens) {
        smattn_inputs dirty = fp->in;
        void *k2 = fuzz_garbage_beyond_kv_lens(fp, &fp->in.k, fp->nk, p->D, 0);
        void *v2 = fuzz_garbage_beyond_kv_lens(fp, &fp->in.v, fp->nv, p->Dv, 1);
        dirty.k.data = k2;
        dirty.v.data = v2;
        snprintf(what, sizeof what, "garbage beyond kv_lens (isa %s, threads %d)", isa,
                 fp->threads);
        fuzz_require_ok(TARGET, fp, fuzz_run_opt(p, &dirty, isa, fp->threads, &again), what);
        fuzz_check_same_bits(TARGET, fp, &first, &again, what);
        fuzz_outputs_free(&again);
        free(k2), free(v2);
    }
    fuzz_outputs_free(&first);
}

static void check_problem(const fuzz_problem *fp)
{
    fuzz_outputs ref, bnd;
    if (fuzz_oracle_and_bound(TARGET, fp, &ref, &bnd))
        return;
    if (full_mode) {
        const char *isas[3];
        int n = fuzz_isa_list(isas);
        for (int a = 0; a < n; a++)
            check_isa(fp, &ref, &bnd, isas[a]);
    } else {
        check_isa(fp, &ref, &bnd, fuzz_pick_isa(fp->seed));
    }
    fuzz_outputs_free(&ref), fuzz_outputs_free(&bnd);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    for (int pass = full_mode >= 2 ? 0 : 1; pass < 2; pass++) {
        fuzz_problem fp;
        if (fuzz_problem_decode_bytes(&fp, data, size))
            return 0;
        if (pass == 1 && (fuzz_problem_shrink(&fp, FUZZ_DIFF_MAX_P) ||
                          fuzz_problem_stretch_keys(&fp, fuzz_diff_long_T(&fp))))
            return 0;
        /* pass 1 after pass 0: only if it was cut or stretched */
        if (pass == 0 || fp.full_p || fuzz_diff_long_T(&fp) || full_mode < 2)
            check_problem(&fp);
        fuzz_problem_free(&fp);
    }
    return 0;
}
