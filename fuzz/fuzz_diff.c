/* fuzz_diff.c: the kernel against the oracle under the SPEC 6 bound on every ISA the CPU
 * has, then the kernel against itself bit for bit: the decoded thread count against one
 * thread, NaN/inf garbage in K/V slots beyond kv_lens (masked for every query), and a
 * repeated call. Any difference is a MISMATCH report followed by abort(). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fuzz/common/fuzz_input.h"
#include "smattn.h"

static const char *const isas[] = {"scalar", "avx2", "avx512"};

/* Speed (issue 5: >= 1,000 exec/s on one core): the oracle's cost grows with the elements
 * of P and most of the time went to a few large rows on its exact path, so problems are cut
 * to FUZZ_DIFF_MAX_P elements of P (fuzz_problem_shrink); and one ISA per input, chosen by
 * the decoded seed, instead of every ISA the CPU has. SMATTN_FUZZ_FULL=1 (set by make
 * check's replay) checks every input on every ISA, both as decoded (inputs found before the
 * cut) and cut. See fuzz/README.md for the measurements. */
#ifndef FUZZ_DIFF_MAX_P
#define FUZZ_DIFF_MAX_P 256
#endif
static int full_mode;

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
    (void)argc, (void)argv;
    const char *e = getenv("SMATTN_FUZZ_FULL");
    full_mode = e && *e && strcmp(e, "0") != 0;
    return 0;
}
static const char *const tnames[] = {"O", "LSE", "P"};

static void mismatch_head(const fuzz_problem *fp, const char *what)
{
    fprintf(stderr, "MISMATCH fuzz_diff %s\n", fuzz_shape_class_name(fp->shape_class));
    fprintf(stderr, "check: %s\n", what);
    fuzz_problem_print(stderr, fp);
}

static smattn_status run_opt(const fuzz_problem *fp, const smattn_inputs *in, const char *isa,
                             int threads, fuzz_outputs *o)
{
    if (fuzz_outputs_alloc(o, &fp->p, SMATTN_F32))
        abort(); /* out of memory in the harness: not a finding, but nothing to test */
    smattn_opt_config cfg = {threads, isa};
    return fp->p.op == SMATTN_OP_ATTENTION ? smattn_attention(&fp->p, in, &o->out, &cfg)
                                           : smattn_softmax(&fp->p, in, &o->out, &cfg);
}

/* Bitwise comparison of two kernel runs; reports the first differing element. */
static void same_bits(const fuzz_problem *fp, const fuzz_outputs *a, const fuzz_outputs *b,
                      const char *what)
{
    for (int k = 0; k < 3; k++)
        for (size_t i = 0; i < a->n[k]; i++) {
            const float *x = a->buf[k], *y = b->buf[k];
            if (memcmp(&x[i], &y[i], sizeof(float)) != 0) {
                mismatch_head(fp, what);
                fprintf(stderr, "index: %s[%zu]\nvalues: first %a second %a\n", tnames[k], i,
                        (double)x[i], (double)y[i]);
                abort();
            }
        }
}

/* K and V with NaN and infinities in every slot j >= kv_lens[b]: no query sees them. */
static void *garbage_copy(const fuzz_problem *fp, const smattn_tensor *t, size_t n, int64_t dim,
                          int which)
{
    size_t es = smattn_dtype_size(t->dtype);
    void *c = malloc(n * es);
    if (!c)
        abort();
    memcpy(c, t->data, n * es);
    const smattn_problem *p = &fp->p;
    for (int64_t b = 0; b < p->B; b++)
        for (int64_t j = p->kv_lens[b]; j < p->T; j++)
            for (int64_t g = 0; g < p->Hkv; g++)
                for (int64_t d = 0; d < dim; d++) {
                    int64_t e = b * t->stride[0] + j * t->stride[1] + g * t->stride[2] + d * t->stride[3];
                    int code = (int)((d + j + which) % 3);
                    smattn_store(c, t->dtype, e, code == 0 ? (double)NAN : code == 1 ? HUGE_VAL : -HUGE_VAL);
                }
    return c;
}

/* Every check on one decoded problem (freed on return). */
static void check_problem(fuzz_problem fp)
{
    const smattn_problem *p = &fp.p;
    fuzz_outputs ref, bnd, fmt;
    if (fuzz_outputs_alloc(&ref, p, SMATTN_F64) || fuzz_outputs_alloc(&bnd, p, SMATTN_F64) ||
        fuzz_outputs_alloc(&fmt, p, SMATTN_F32))
        abort();
    smattn_ref_config rc = {1, 0, 0, 0};
    smattn_status s = smattn_ref(p, &fp.in, &ref.out, &rc, NULL);
    if (s == SMATTN_ERR_PRECISION && p->softcap > 0) { /* allowed by SPEC 5.5 */
        fuzz_outputs_free(&ref), fuzz_outputs_free(&bnd), fuzz_outputs_free(&fmt);
        fuzz_problem_free(&fp);
        return;
    }
    if (s) {
        mismatch_head(&fp, "oracle status");
        fprintf(stderr, "smattn_ref: %s on a valid problem\n", smattn_status_name(s));
        abort();
    }
    smattn_precision pm = smattn_opt_precision(p);
    s = smattn_bound(p, &fp.in, &pm, &fmt.out, &bnd.out);
    if (s) {
        mismatch_head(&fp, "bound status");
        fprintf(stderr, "smattn_bound: %s on a valid problem\n", smattn_status_name(s));
        abort();
    }
    int avail[3], navail = 0;
    for (int a = 0; a < 3; a++)
        if (smattn_opt_isa_available(isas[a]))
            avail[navail++] = a;
    int pick = (int)(fp.seed % (uint32_t)navail);
    for (int ai = 0; ai < navail; ai++) {
        int a = avail[ai];
        if (!full_mode && ai != pick)
            continue;
        char what[128];
        fuzz_outputs first, again;
        s = run_opt(&fp, &fp.in, isas[a], 1, &first);
        if (s) {
            snprintf(what, sizeof what, "kernel status (isa %s)", isas[a]);
            mismatch_head(&fp, what);
            fprintf(stderr, "smattn_%s: %s on a supported problem\n",
                    p->op == SMATTN_OP_ATTENTION ? "attention" : "softmax", smattn_status_name(s));
            abort();
        }
        /* within the bound: ratio <= 1 for finite exact values with a finite bound and,
         * through smattn_error_ratio's class rules, for non-finite exact values; a finite
         * exact value with bound +inf is out of contract and not judged (SPEC 6.8) */
        for (int k = 0; k < 3; k++)
            for (size_t i = 0; i < first.n[k]; i++) {
                double c = (double)((const float *)first.buf[k])[i];
                double e = ((const double *)ref.buf[k])[i], b = ((const double *)bnd.buf[k])[i];
                if (isinf(b) && isfinite(e))
                    continue; /* out of contract (SPEC 6.8): the bound cannot judge it */
                double r = smattn_error_ratio(c, e, b);
                if (!(r <= 1.0)) {
                    snprintf(what, sizeof what, "bound (isa %s)", isas[a]);
                    mismatch_head(&fp, what);
                    fprintf(stderr,
                            "index: %s[%zu]\nvalues: kernel %a oracle %a\nerror: %a bound: %a "
                            "ratio: %g\n",
                            tnames[k], i, c, e, fabs(c - e), b, r);
                    abort();
                }
            }
        if (fp.threads > 1) {
            snprintf(what, sizeof what, "threads 1 vs %d (isa %s)", fp.threads, isas[a]);
            if ((s = run_opt(&fp, &fp.in, isas[a], fp.threads, &again))) {
                mismatch_head(&fp, what);
                fprintf(stderr, "status %s\n", smattn_status_name(s));
                abort();
            }
            same_bits(&fp, &first, &again, what);
            fuzz_outputs_free(&again);
        }
        snprintf(what, sizeof what, "repeated call (isa %s)", isas[a]);
        if ((s = run_opt(&fp, &fp.in, isas[a], 1, &again))) {
            mismatch_head(&fp, what);
            fprintf(stderr, "status %s\n", smattn_status_name(s));
            abort();
        }
        same_bits(&fp, &first, &again, what);
        fuzz_outputs_free(&again);
        if (p->op == SMATTN_OP_ATTENTION && p->kv_lens) {
            smattn_inputs dirty = fp.in;
            void *k2 = garbage_copy(&fp, &fp.in.k, fp.nk, p->D, 0);
            void *v2 = garbage_copy(&fp, &fp.in.v, fp.nv, p->Dv, 1);
            dirty.k.data = k2;
            dirty.v.data = v2;
            snprintf(what, sizeof what, "garbage beyond kv_lens (isa %s, threads %d)", isas[a],
                     fp.threads);
            if ((s = run_opt(&fp, &dirty, isas[a], fp.threads, &again))) {
                mismatch_head(&fp, what);
                fprintf(stderr, "status %s\n", smattn_status_name(s));
                abort();
            }
            same_bits(&fp, &first, &again, what);
            fuzz_outputs_free(&again);
            free(k2), free(v2);
        }
        fuzz_outputs_free(&first);
    }
    fuzz_outputs_free(&ref), fuzz_outputs_free(&bnd), fuzz_outputs_free(&fmt);
    fuzz_problem_free(&fp);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    for (int pass = full_mode ? 0 : 1; pass < 2; pass++) {
        fuzz_provider dp;
        fuzz_provider_init(&dp, data, size);
        fuzz_problem fp;
        if (fuzz_problem_decode(&fp, &dp)) {
            fuzz_problem_free(&fp);
            return 0;
        }
        if (pass == 1 && fuzz_problem_shrink(&fp, FUZZ_DIFF_MAX_P))
            return 0;
        if (pass == 1 && full_mode && !fp.full_p) { /* already checked as decoded */
            fuzz_problem_free(&fp);
            return 0;
        }
        check_problem(fp);
    }
    return 0;
}
