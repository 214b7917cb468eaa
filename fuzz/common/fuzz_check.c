/* SPDX-License-Identifier: MIT */
/* fuzz_check.c: the shared checks of the comparing fuzz targets (see fuzz_check.h). */
#include "fuzz/common/fuzz_check.h"

#include <inttypes.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

static const char *const tnames[] = {"O", "LSE", "P"};

void fuzz_mismatch_head(const char *target, const fuzz_problem *fp, const char *what)
{
    fprintf(stderr, "MISMATCH %s %s\n", target, fuzz_shape_class_name(fp->shape_class));
    fprintf(stderr, "check: %s\n", what);
    fuzz_problem_print(stderr, fp);
}

int fuzz_full_mode(void)
{
    const char *e = getenv("SMATTN_FUZZ_FULL");
    return e ? atoi(e) : 0;
}

int fuzz_isa_list(const char *isas[3])
{
    static const char *const all[] = {"scalar", "avx2", "avx512"};
    int n = 0;
    for (int a = 0; a < 3; a++)
        if (smattn_opt_isa_available(all[a]))
            isas[n++] = all[a];
    return n;
}

const char *fuzz_pick_isa(uint32_t pick)
{
    /* smattn_opt_isa_available reads CPUID, which is slow in a VM: ask once */
    static const char *isas[3];
    static int n;
    if (!n)
        n = fuzz_isa_list(isas);
    return isas[pick % (uint32_t)n];
}

smattn_status fuzz_run_opt(const smattn_problem *p, const smattn_inputs *in, const char *isa,
                           int threads, fuzz_outputs *o)
{
    return fuzz_run_opt_as(p, in, isa, threads, SMATTN_F32, o);
}

smattn_status fuzz_run_opt_as(const smattn_problem *p, const smattn_inputs *in, const char *isa,
                              int threads, smattn_dtype out_t, fuzz_outputs *o)
{
    if (fuzz_outputs_alloc(o, p, out_t))
        abort(); /* out of memory in the harness: not a finding, but nothing to test */
    smattn_opt_config cfg = {threads, isa};
    return p->op == SMATTN_OP_ATTENTION ? smattn_attention(p, in, &o->out, &cfg)
                                        : smattn_softmax(p, in, &o->out, &cfg);
}

void fuzz_require_ok(const char *target, const fuzz_problem *fp, smattn_status s,
                     const char *what)
{
    if (s == SMATTN_OK)
        return;
    fuzz_mismatch_head(target, fp, what);
    fprintf(stderr, "status: %s on a supported problem\n", smattn_status_name(s));
    abort();
}

int fuzz_oracle_and_bound(const char *target, const fuzz_problem *fp, fuzz_outputs *ref,
                          fuzz_outputs *bnd)
{
    smattn_precision pm = smattn_opt_precision(&fp->p);
    return fuzz_oracle_and_bound_as(target, fp, &pm, SMATTN_F32, ref, bnd);
}

int fuzz_oracle_and_bound_pm(const char *target, const fuzz_problem *fp,
                             const smattn_precision *pm, fuzz_outputs *ref, fuzz_outputs *bnd)
{
    return fuzz_oracle_and_bound_as(target, fp, pm, SMATTN_F32, ref, bnd);
}

int fuzz_oracle_and_bound_as(const char *target, const fuzz_problem *fp,
                             const smattn_precision *pm, smattn_dtype out_t, fuzz_outputs *ref,
                             fuzz_outputs *bnd)
{
    const smattn_problem *p = &fp->p;
    fuzz_outputs fmt; /* only its dtypes are read: they give smattn_bound u_out (SPEC 6, A6) */
    if (fuzz_outputs_alloc(ref, p, SMATTN_F64) || fuzz_outputs_alloc(bnd, p, SMATTN_F64) ||
        fuzz_outputs_alloc(&fmt, p, out_t))
        abort();
    smattn_ref_config rc = {1, 0, 0, 0};
    smattn_status s = smattn_ref(p, &fp->in, &ref->out, &rc, NULL);
    if (s == SMATTN_ERR_PRECISION && p->softcap > 0) { /* allowed by SPEC 5.5 */
        fuzz_outputs_free(ref), fuzz_outputs_free(bnd), fuzz_outputs_free(&fmt);
        return 1;
    }
    if (s) {
        fuzz_mismatch_head(target, fp, "oracle status");
        fprintf(stderr, "smattn_ref: %s on a valid problem\n", smattn_status_name(s));
        abort();
    }
    s = smattn_bound(p, &fp->in, pm, &fmt.out, &bnd->out);
    fuzz_outputs_free(&fmt);
    if (s) {
        fuzz_mismatch_head(target, fp, "bound status");
        fprintf(stderr, "smattn_bound: %s on a valid problem\n", smattn_status_name(s));
        abort();
    }
    return 0;
}

void fuzz_check_bound(const char *target, const fuzz_problem *fp, const fuzz_outputs *kernel,
                      const fuzz_outputs *ref, const fuzz_outputs *bnd, const char *what)
{
    /* within the bound: ratio <= 1 for finite exact values with a finite bound and,
     * through smattn_error_ratio's class rules, for non-finite exact values */
    for (int k = 0; k < 3; k++)
        for (size_t i = 0; i < kernel->n[k]; i++) {
            double c = smattn_load(kernel->buf[k], kernel->dtype, (int64_t)i);
            double e = ((const double *)ref->buf[k])[i], b = ((const double *)bnd->buf[k])[i];
            if (isinf(b) && isfinite(e))
                continue; /* out of contract (SPEC 6.8): the bound cannot judge it */
            double r = smattn_error_ratio(c, e, b);
            if (!(r <= 1.0)) {
                fuzz_mismatch_head(target, fp, what);
                fprintf(stderr,
                        "index: %s[%zu]\nvalues: kernel %a oracle %a\nerror: %a bound: %a "
                        "ratio: %g\n",
                        tnames[k], i, c, e, fabs(c - e), b, r);
                abort();
            }
        }
}

void fuzz_check_same_bits(const char *target, const fuzz_problem *fp, const fuzz_outputs *a,
                          const fuzz_outputs *b, const char *what)
{
    size_t es = smattn_dtype_size(a->dtype);
    for (int k = 0; k < 3; k++)
        for (size_t i = 0; i < a->n[k] && i < b->n[k]; i++) {
            const unsigned char *x = a->buf[k], *y = b->buf[k];
            if (memcmp(x + i * es, y + i * es, es) != 0) {
                fuzz_mismatch_head(target, fp, what);
                fprintf(stderr, "index: %s[%zu]\nvalues: first %a second %a\n", tnames[k], i,
                        smattn_load(x, a->dtype, (int64_t)i), smattn_load(y, b->dtype, (int64_t)i));
                abort();
            }
        }
}

void *fuzz_garbage_beyond_kv_lens(const fuzz_problem *fp, const smattn_tensor *t, size_t n,
                                  int64_t dim, int which)
{
    const int64_t blk = smattn_dtype_block(t->dtype);
    const size_t bytes = (size_t)((int64_t)n / blk) * smattn_dtype_size(t->dtype);
    void *c = malloc(bytes ? bytes : 1);
    if (!c)
        abort();
    memcpy(c, t->data, bytes);
    const smattn_problem *p = &fp->p;
    if (blk > 1) { /* q8_0, q4_0: a NaN or infinite scale in every block of those rows */
        unsigned char *u = c;
        for (int64_t b = 0; b < p->B; b++)
            for (int64_t j = p->kv_lens[b]; j < p->T; j++)
                for (int64_t g = 0; g < p->Hkv; g++)
                    for (int64_t d = 0; d < dim; d += blk) {
                        int64_t e = b * t->stride[0] + j * t->stride[1] + g * t->stride[2] + d;
                        unsigned char *s = u + (size_t)(e / blk) * smattn_dtype_size(t->dtype);
                        s[0] = 0x00, s[1] = (d / blk + j + which) % 2 ? 0x7c : 0x7e;
                    }
        return c;
    }
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

/* Every check of one ISA (fuzz_diff_check_as), the kernel's outputs in dtype out_t. The
 * check: lines name the output dtype when it is not f32 (fuzz_dtypes), so that fuzz_diff's
 * reports read as before. */
/* The outputs of a layout problem (lay, through its cu_seqlens_q when Q is packed) and of
 * its dense twin (dense) the same bits: O and LSE of every row the layout stores, P whole
 * (its shape is the twin's). Offsets are formed here from the strides, not through the
 * library's locator. */
static void check_twin_bits(const char *target, const fuzz_problem *fp, const fuzz_layout *fl,
                            const fuzz_outputs *dense, const fuzz_outputs *lay, const char *what)
{
    const smattn_problem *p = &fl->p;
    const size_t es = smattn_dtype_size(dense->dtype);
    const smattn_out_tensor *dt[2] = {&dense->out.o, &dense->out.lse};
    const smattn_out_tensor *lt[2] = {&lay->out.o, &lay->out.lse};
    for (int64_t b = 0; b < p->B; b++)
        for (int64_t i = 0; i < p->S; i++) {
            if (fl->packed_q && i >= fl->cu_q[b + 1] - fl->cu_q[b])
                continue; /* the twin's padding row: no storage */
            const int64_t lb = fl->packed_q ? 0 : b, li = fl->packed_q ? fl->cu_q[b] + i : i;
            for (int64_t h = 0; h < p->Hq; h++)
                for (int k = 0; k < 2; k++)
                    for (int64_t c = 0; c < (k ? 1 : p->Dv); c++) {
                        const int64_t *ds = dt[k]->stride, *ls = lt[k]->stride;
                        int64_t od = k ? b * ds[0] + h * ds[1] + i * ds[2]
                                       : b * ds[0] + i * ds[1] + h * ds[2] + c * ds[3];
                        int64_t ol = k ? lb * ls[0] + h * ls[1] + li * ls[2]
                                       : lb * ls[0] + li * ls[1] + h * ls[2] + c * ls[3];
                        const unsigned char *x = dense->buf[k], *y = lay->buf[k];
                        if (!dense->buf[k] || !memcmp(x + od * (int64_t)es, y + ol * (int64_t)es, es))
                            continue;
                        fuzz_mismatch_head(target, fp, what);
                        fuzz_layout_print(stderr, fl);
                        fprintf(stderr, "index: %s of row (b %" PRId64 ", i %" PRId64 ", h %" PRId64
                                        ") column %" PRId64 "\nvalues: dense %a layout %a\n",
                                tnames[k], b, i, h, c, smattn_load(x, dense->dtype, od),
                                smattn_load(y, lay->dtype, ol));
                        abort();
                    }
        }
    const unsigned char *x = dense->buf[2], *y = lay->buf[2];
    for (size_t i = 0; i < dense->n[2]; i++)
        if (memcmp(x + i * es, y + i * es, es) != 0) {
            fuzz_mismatch_head(target, fp, what);
            fuzz_layout_print(stderr, fl);
            fprintf(stderr, "index: P[%zu]\nvalues: dense %a layout %a\n", i,
                    smattn_load(x, dense->dtype, (int64_t)i), smattn_load(y, lay->dtype, (int64_t)i));
            abort();
        }
}

static void diff_check_isa(const char *target, const fuzz_problem *fp, const fuzz_layout *fl,
                           const fuzz_outputs *ref, const fuzz_outputs *bnd, const char *isa,
                           smattn_dtype out_t)
{
    const smattn_problem *p = &fp->p;
    char what[160], how[64];
    fuzz_outputs first, again;
    if (out_t == SMATTN_F32)
        snprintf(how, sizeof how, "isa %s", isa);
    else
        snprintf(how, sizeof how, "isa %s, outputs %s", isa, smattn_dtype_name(out_t));
    snprintf(what, sizeof what, "kernel status (%s)", how);
    smattn_status s0 = fuzz_run_opt_as(p, &fp->in, isa, 1, out_t, &first);
    fuzz_require_ok(target, fp, s0, what);
    snprintf(what, sizeof what, "bound (%s)", how);
    fuzz_check_bound(target, fp, &first, ref, bnd, what);
    if (fl) { /* the layout twin, on the decoded thread count: the dense run's bits */
        snprintf(what, sizeof what, "layout vs dense (%s, threads %d)", how, fp->threads);
        fuzz_require_ok(target, fp, fuzz_run_opt_as(&fl->p, &fl->in, isa, fp->threads, out_t, &again),
                        what);
        check_twin_bits(target, fp, fl, &first, &again, what);
        fuzz_outputs_free(&again);
    }
    if (fp->threads > 1) {
        snprintf(what, sizeof what, "threads 1 vs %d (%s)", fp->threads, how);
        fuzz_require_ok(target, fp, fuzz_run_opt_as(p, &fp->in, isa, fp->threads, out_t, &again),
                        what);
        fuzz_check_same_bits(target, fp, &first, &again, what);
        fuzz_outputs_free(&again);
    }
    snprintf(what, sizeof what, "repeated call (%s)", how);
    fuzz_require_ok(target, fp, fuzz_run_opt_as(p, &fp->in, isa, 1, out_t, &again), what);
    fuzz_check_same_bits(target, fp, &first, &again, what);
    fuzz_outputs_free(&again);
    if (p->op == SMATTN_OP_ATTENTION && p->kv_lens) {
        smattn_inputs dirty = fp->in;
        void *k2 = fuzz_garbage_beyond_kv_lens(fp, &fp->in.k, fp->nk, p->D, 0);
        void *v2 = fuzz_garbage_beyond_kv_lens(fp, &fp->in.v, fp->nv, p->Dv, 1);
        dirty.k.data = k2;
        dirty.v.data = v2;
        snprintf(what, sizeof what, "garbage beyond kv_lens (%s, threads %d)", how, fp->threads);
        fuzz_require_ok(target, fp, fuzz_run_opt_as(p, &dirty, isa, fp->threads, out_t, &again),
                        what);
        fuzz_check_same_bits(target, fp, &first, &again, what);
        fuzz_outputs_free(&again);
        free(k2), free(v2);
    }
    fuzz_outputs_free(&first);
}

void fuzz_diff_check(const char *target, const fuzz_problem *fp, int all_isas)
{
    fuzz_diff_check_as(target, fp, all_isas, SMATTN_F32);
}

static void diff_check(const char *target, const fuzz_problem *fp, const fuzz_layout *fl,
                       int all_isas, smattn_dtype out_t)
{
    fuzz_outputs ref, bnd;
    smattn_precision pm = smattn_opt_precision(&fp->p);
    if (fuzz_oracle_and_bound_as(target, fp, &pm, out_t, &ref, &bnd))
        return;
    if (fl) { /* the oracle on the layout twin: the dense problem's bits */
        fuzz_outputs lref;
        if (fuzz_outputs_alloc(&lref, &fl->p, SMATTN_F64))
            abort();
        smattn_ref_config rc = {1, 0, 0, 0};
        smattn_status s = smattn_ref(&fl->p, &fl->in, &lref.out, &rc, NULL);
        if (s) {
            fuzz_mismatch_head(target, fp, "oracle status (layout)");
            fuzz_layout_print(stderr, fl);
            char why[256];
            if (smattn_validate_explain(&fl->p, &fl->in, &lref.out, why, sizeof why) == SMATTN_OK)
                snprintf(why, sizeof why, "valid");
            fprintf(stderr, "smattn_ref: %s on a valid problem (%s)\n", smattn_status_name(s), why);
            abort();
        }
        check_twin_bits(target, fp, fl, &ref, &lref, "oracle: layout vs dense");
        fuzz_outputs_free(&lref);
    }
    if (all_isas) {
        const char *isas[3];
        int n = fuzz_isa_list(isas);
        for (int a = 0; a < n; a++)
            diff_check_isa(target, fp, fl, &ref, &bnd, isas[a], out_t);
    } else {
        diff_check_isa(target, fp, fl, &ref, &bnd, fuzz_pick_isa(fp->seed), out_t);
    }
    fuzz_outputs_free(&ref), fuzz_outputs_free(&bnd);
}

void fuzz_diff_check_as(const char *target, const fuzz_problem *fp, int all_isas,
                        smattn_dtype out_t)
{
    diff_check(target, fp, NULL, all_isas, out_t);
}

void fuzz_diff_check_layout(const char *target, const fuzz_problem *fp, const fuzz_layout *fl,
                            int all_isas)
{
    diff_check(target, fp, fl, all_isas, SMATTN_F32);
}
