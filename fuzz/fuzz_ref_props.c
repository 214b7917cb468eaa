/* SPDX-License-Identifier: MIT */
/* fuzz_ref_props.c: the oracle alone, on problems cut to FUZZ_REF_PROPS_MAX_P elements of P,
 * against properties its exact definition (SPEC 3-4) implies bit for bit:
 *  - precision stability: the MPFR phase alone, started at another precision (and with the
 *    decoded thread count), gives the same bits as the default run;
 *  - fully masked rows (SPEC 3.4): O, P and LSE follow empty_rows and empty_lse; a row whose
 *    only term is a finite sink has O = P = +0 and LSE = the sink;
 *  - ordinary rows with finite inputs: P = +0 at invisible keys, 0 <= P <= 1, the row sum
 *    within rounding of 1 (at most 1 with a sink), and each O column inside the convex hull
 *    of the visible V values (and 0 with a sink): hull ends are binary64 numbers, so a
 *    correctly rounded O stays inside;
 *  - shift invariance (no softcap, no sinks): K + w (attention; w one vector per KV head)
 *    or X + c (softmax) on a grid where the sum is exact gives the same P and O bits;
 *  - key permutation invariance (no causality, window or kv_lens): permuting K, V (or X),
 *    bias and mask along the keys permutes P and leaves O and LSE bit for bit.
 * A quarter of the attention inputs are quantised (fuzz_problem_quant, SPEC 2.9): the hull
 * is of the real V values (times their descale), and a block-quantised K or V is permuted
 * by whole rows of blocks.
 * Any failure is a MISMATCH report followed by abort(). */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "fuzz/common/fuzz_check.h"
#include "smattn.h"

#define TARGET "fuzz_ref_props"

static const char *const tnames[] = {"O", "LSE", "P"};

static void fail_at(const fuzz_problem *fp, const char *what, int k, size_t idx, double got,
                    const char *expect)
{
    fuzz_mismatch_head(TARGET, fp, what);
    fprintf(stderr, "index: %s[%zu]\nvalues: oracle %a, expected %s\n", tnames[k], idx, got,
            expect);
    abort();
}

/* The oracle with a config; 1 if it gave up within its precision limit on a softcap
 * problem (allowed, SPEC 5.5), else 0 (any other failure is a mismatch). */
static int run_ref(const fuzz_problem *fp, const smattn_inputs *in, const smattn_ref_config *rc,
                   fuzz_outputs *o, const char *what)
{
    if (fuzz_outputs_alloc(o, &fp->p, SMATTN_F64))
        abort();
    smattn_status s = smattn_ref(&fp->p, in, &o->out, rc, NULL);
    if (s == SMATTN_ERR_PRECISION && fp->p.softcap > 0) {
        fuzz_outputs_free(o);
        return 1;
    }
    if (s) {
        fuzz_mismatch_head(TARGET, fp, what);
        fprintf(stderr, "smattn_ref: %s on a valid problem\n", smattn_status_name(s));
        abort();
    }
    return 0;
}

static void *dup_bytes(const void *src, size_t n)
{
    void *d = malloc(n ? n : 1);
    if (!d)
        abort();
    if (n)
        memcpy(d, src, n);
    return d;
}

static double at(const smattn_tensor *t, int64_t i0, int64_t i1, int64_t i2, int64_t i3)
{
    return smattn_load(t->data, t->dtype,
                       i0 * t->stride[0] + i1 * t->stride[1] + i2 * t->stride[2] + i3 * t->stride[3]);
}

/* ---- fully masked rows and ordinary rows ------------------------------------------------ */

static int is_pos_zero(double x)
{
    return x == 0 && !signbit(x);
}

static void check_rows(const fuzz_problem *fp, const fuzz_outputs *r)
{
    const smattn_problem *p = &fp->p;
    const smattn_inputs *in = &fp->in;
    const int att = p->op == SMATTN_OP_ATTENTION;
    const double *O = r->buf[0], *L = r->buf[1], *P = r->buf[2];
    char *vis = malloc((size_t)p->T);
    if (!vis)
        abort();
    for (int64_t b = 0; b < p->B; b++)
        for (int64_t h = 0; h < p->Hq; h++)
            for (int64_t i = 0; i < p->S; i++) {
                int64_t g = h / (p->Hq / p->Hkv);
                int64_t Sb = p->q_lens ? p->q_lens[b] : p->S, Tb = p->kv_lens ? p->kv_lens[b] : p->T;
                size_t prow = (size_t)(((b * p->Hq + h) * p->S + i) * p->T);
                size_t lrow = (size_t)((b * p->Hq + h) * p->S + i);
                size_t orow = att ? (size_t)(((b * p->S + i) * p->Hq + h) * p->Dv) : 0;
                int64_t nvis = 0;
                int finite = 1; /* every input the row reads is finite (bias: or -inf) */
                for (int64_t j = 0; j < p->T; j++) {
                    vis[j] = i < Sb && smattn_visible(p, in, b, h, i, j);
                    if (vis[j] && in->bias.data && at(&in->bias, b, h, i, j) == -HUGE_VAL)
                        vis[j] = 0;
                    if (vis[j] && !att && at(&in->x, b, h, i, j) == -HUGE_VAL)
                        vis[j] = 0;
                    if (!vis[j])
                        continue;
                    nvis++;
                    if (in->bias.data && !isfinite(at(&in->bias, b, h, i, j)))
                        finite = 0;
                    if (!att && !isfinite(at(&in->x, b, h, i, j)))
                        finite = 0;
                    for (int64_t d = 0; att && d < p->D; d++)
                        if (!isfinite(at(&in->k, b, j, g, d)))
                            finite = 0;
                }
                for (int64_t d = 0; att && nvis && d < p->D; d++)
                    if (!isfinite(at(&in->q, b, i, h, d)))
                        finite = 0;
                double sink = in->sinks.data && i < Sb ? at(&in->sinks, h, 0, 0, 0) : -HUGE_VAL;
                int empty = nvis == 0 && sink == -HUGE_VAL;
                if (empty) {
                    static const double lse_of[] = {-HUGE_VAL, HUGE_VAL, 0.0};
                    double want = lse_of[p->empty_lse];
                    if (!(L[lrow] == want && !signbit(L[lrow]) == !signbit(want)))
                        fail_at(fp, "empty row: LSE convention", 1, lrow, L[lrow],
                                p->empty_lse == 0 ? "-inf" : p->empty_lse == 1 ? "+inf" : "+0");
                    for (int64_t j = 0; j < p->T; j++) {
                        double x = P[prow + (size_t)j];
                        int ok = p->empty_rows == SMATTN_EMPTY_ZERO  ? is_pos_zero(x)
                                 : p->empty_rows == SMATTN_EMPTY_NAN ? isnan(x)
                                 : j < Tb                            ? x == 1.0 / (double)Tb
                                                                     : is_pos_zero(x);
                        if (!ok)
                            fail_at(fp, "empty row: P convention", 2, prow + (size_t)j, x,
                                    "the empty_rows value");
                    }
                    for (int64_t c = 0; att && c < p->Dv; c++) {
                        double x = O[orow + (size_t)c];
                        int ok = p->empty_rows == SMATTN_EMPTY_ZERO ? is_pos_zero(x)
                                 : p->empty_rows == SMATTN_EMPTY_NAN ? isnan(x)
                                                                     : 1; /* mean: hull below */
                        if (p->empty_rows == SMATTN_EMPTY_MEAN) {
                            double lo = HUGE_VAL, hi = -HUGE_VAL;
                            int fin = 1;
                            for (int64_t j = 0; j < Tb; j++) {
                                double v = at(&in->v, b, j, g, c) * fuzz_descale(fp, 'v', b, g);
                                fin &= isfinite(v) != 0;
                                lo = fmin(lo, v), hi = fmax(hi, v);
                            }
                            ok = !fin || (Tb == 0 ? is_pos_zero(x) : x >= lo && x <= hi);
                        }
                        if (!ok)
                            fail_at(fp, "empty row: O convention", 0, orow + (size_t)c, x,
                                    "the empty_rows value");
                    }
                    continue;
                }
                if (nvis == 0 && isfinite(sink)) { /* only a finite sink: SPEC 3.4 */
                    if (L[lrow] != sink)
                        fail_at(fp, "sink-only row: LSE = sink", 1, lrow, L[lrow], "the sink");
                    for (int64_t j = 0; j < p->T; j++)
                        if (!is_pos_zero(P[prow + (size_t)j]))
                            fail_at(fp, "sink-only row: P = +0", 2, prow + (size_t)j,
                                    P[prow + (size_t)j], "+0");
                    for (int64_t c = 0; att && c < p->Dv; c++)
                        if (!is_pos_zero(O[orow + (size_t)c]))
                            fail_at(fp, "sink-only row: O = +0", 0, orow + (size_t)c,
                                    O[orow + (size_t)c], "+0");
                    continue;
                }
                for (int64_t j = 0; j < p->T; j++) /* invisible keys: +0 even in NaN rows */
                    if (!vis[j] && !is_pos_zero(P[prow + (size_t)j]))
                        fail_at(fp, "P = +0 at an invisible key", 2, prow + (size_t)j,
                                P[prow + (size_t)j], "+0");
                if (!finite || !(isfinite(sink) || sink == -HUGE_VAL))
                    continue; /* a poisoned row (SPEC 4.2): fuzz_diff judges its classes */
                double sum = 0;
                for (int64_t j = 0; j < p->T; j++) {
                    double x = P[prow + (size_t)j];
                    if (vis[j] && !(x >= 0 && x <= 1))
                        fail_at(fp, "0 <= P <= 1", 2, prow + (size_t)j, x, "in [0, 1]");
                    sum += x;
                }
                /* each P is rounded once (relative 2^-53) and the sum adds nvis roundings */
                double tol = (double)(2 * nvis + 2) * 0x1p-53;
                int has_sink = isfinite(sink);
                if (has_sink ? !(sum <= 1 + tol) : !(fabs(sum - 1) <= tol)) {
                    char e[64];
                    snprintf(e, sizeof e, "a row sum %s 1 within %a", has_sink ? "<=" : "=", tol);
                    fail_at(fp, "row sum of P", 2, prow, sum, e);
                }
                if (!isfinite(L[lrow]))
                    fail_at(fp, "finite LSE of a finite row", 1, lrow, L[lrow], "finite");
                for (int64_t c = 0; att && c < p->Dv; c++) {
                    double lo = has_sink ? 0 : HUGE_VAL, hi = has_sink ? 0 : -HUGE_VAL;
                    int fin = 1;
                    for (int64_t j = 0; j < p->T; j++)
                        if (vis[j]) {
                            double v = at(&in->v, b, j, g, c) * fuzz_descale(fp, 'v', b, g);
                            fin &= isfinite(v) != 0;
                            lo = fmin(lo, v), hi = fmax(hi, v);
                        }
                    double x = O[orow + (size_t)c];
                    if (fin && !(x >= lo && x <= hi)) {
                        char e[96];
                        snprintf(e, sizeof e, "in the hull [%a, %a]", lo, hi);
                        fail_at(fp, "O in the convex hull of V", 0, orow + (size_t)c, x, e);
                    }
                }
            }
    free(vis);
}

/* ---- shift invariance ------------------------------------------------------------------- */

/* Round finite values to multiples of 2^-q in [-2^m, 2^m]; a shift by a multiple of 2^-q
 * in [-2^(m-1), 2^(m-1)] stays on that grid below 2^(m+1), which the dtype holds exactly
 * (and every store is checked). */
static int grid_of(smattn_dtype t, int *q, int *m)
{
    switch (t) {
    case SMATTN_F32: *q = 10, *m = 12; return 1; /* 23 bits */
    case SMATTN_F16: *q = 4, *m = 5; return 1;   /* 10 bits */
    case SMATTN_BF16: *q = 1, *m = 5; return 1;  /* 7 bits */
    default: return 0;
    }
}

static double on_grid(double x, int q, int m)
{
    if (!isfinite(x))
        return x;
    double y = nearbyint(ldexp(x, q));
    double lim = ldexp(1.0, m + q);
    return ldexp(fmin(fmax(y, -lim), lim), -q);
}

/* Quantize buf (n elements) in place; return 0 if a store was not exact. */
static int quantize(void *buf, smattn_dtype t, size_t n, int q, int m)
{
    for (size_t i = 0; i < n; i++) {
        double y = on_grid(smattn_load(buf, t, (int64_t)i), q, m);
        smattn_store(buf, t, (int64_t)i, y);
        if (isfinite(y) && smattn_load(buf, t, (int64_t)i) != y)
            return 0;
    }
    return 1;
}

/* A multiple of 2^-q in [-2^(m-1), 2^(m-1)] drawn from s. */
static double shift_of(uint32_t s, int q, int m)
{
    int32_t half = (int32_t)1 << (m - 1 + q);
    return ldexp((double)((int32_t)((s >> 8) % (uint32_t)(2 * half + 1)) - half), -q);
}

static void check_shift(const fuzz_problem *fp0)
{
    const smattn_problem *p = &fp0->p;
    if (p->softcap > 0 || fp0->sinks)
        return;
    const int att = p->op == SMATTN_OP_ATTENTION;
    smattn_dtype t = att ? fp0->in.k.dtype : SMATTN_F32;
    int q, m;
    if (!grid_of(t, &q, &m))
        return;
    size_t n = att ? fp0->nk : fp0->nx, es = smattn_dtype_size(t);
    fuzz_problem fp = *fp0; /* shares every buffer but the quantized one */
    void *base = dup_bytes(att ? fp0->k : (void *)fp0->x, n * es);
    void *shifted = NULL;
    if (!quantize(base, t, n, q, m))
        goto out;
    shifted = dup_bytes(base, n * es);
    uint32_t s = fp0->seed * 2654435761u;
    if (att) {
        /* w[g][d]: multiples of 2^-q in [-2^(m-1), 2^(m-1)], one vector per KV head */
        const int64_t *st = fp0->in.k.stride;
        for (int64_t g = 0; g < p->Hkv; g++)
            for (int64_t d = 0; d < p->D; d++) {
                s = s * 1664525u + 1013904223u;
                double w = shift_of(s, q, m);
                for (int64_t b = 0; b < p->B; b++)
                    for (int64_t j = 0; j < p->T; j++) {
                        int64_t e = b * st[0] + j * st[1] + g * st[2] + d * st[3];
                        double y = smattn_load(shifted, t, e) + w;
                        smattn_store(shifted, t, e, y);
                        if (smattn_load(shifted, t, e) != y && !isnan(y))
                            goto out;
                    }
            }
    } else {
        double c = shift_of(s, q, m);
        for (size_t i = 0; i < n; i++) {
            double y = smattn_load(shifted, t, (int64_t)i) + c;
            smattn_store(shifted, t, (int64_t)i, y);
            if (smattn_load(shifted, t, (int64_t)i) != y && !isnan(y))
                goto out;
        }
    }
    smattn_inputs a = fp0->in, b = fp0->in;
    if (att)
        a.k.data = base, b.k.data = shifted, fp.k = base;
    else
        a.x.data = base, b.x.data = shifted, fp.x = base;
    smattn_ref_config rc = {1, 0, 0, 0};
    fuzz_outputs ra, rb;
    if (run_ref(&fp, &a, &rc, &ra, "oracle status (shift, on the grid)"))
        goto out;
    if (run_ref(&fp, &b, &rc, &rb, "oracle status (shift, shifted)")) {
        fuzz_outputs_free(&ra);
        goto out;
    }
    ra.n[1] = rb.n[1] = 0; /* the LSE moves by the shift */
    fuzz_check_same_bits(TARGET, &fp,
                         &ra, &rb, att ? "shift invariance: K + w per KV head (P, O)"
                                       : "shift invariance: X + c (P)");
    fuzz_outputs_free(&ra), fuzz_outputs_free(&rb);
out:
    free(base), free(shifted);
}

/* ---- key permutation invariance --------------------------------------------------------- */

/* dst[.., j, ..] = src[.., perm[j], ..] along the key axis `ax` of a contiguous 4-D tensor
 * of dims n as stored (ax 1: K/V [B,T,H,D]; ax 3: X, bias, mask [.., T]). */
static void *permute(const void *src, size_t es, const int64_t n[4], int ax, const int64_t *perm)
{
    size_t cnt = (size_t)(n[0] * n[1] * n[2] * n[3]);
    unsigned char *d = malloc(cnt ? cnt * es : 1);
    if (!d)
        abort();
    const unsigned char *s = src;
    int64_t idx[4];
    for (idx[0] = 0; idx[0] < n[0]; idx[0]++)
        for (idx[1] = 0; idx[1] < n[1]; idx[1]++)
            for (idx[2] = 0; idx[2] < n[2]; idx[2]++)
                for (idx[3] = 0; idx[3] < n[3]; idx[3]++) {
                    int64_t from[4] = {idx[0], idx[1], idx[2], idx[3]};
                    from[ax] = perm[idx[ax]];
                    size_t to = (size_t)(((idx[0] * n[1] + idx[1]) * n[2] + idx[2]) * n[3] + idx[3]);
                    size_t fr = (size_t)(((from[0] * n[1] + from[1]) * n[2] + from[2]) * n[3] + from[3]);
                    memcpy(d + to * es, s + fr * es, es);
                }
    return d;
}

static void check_permutation(const fuzz_problem *fp, const fuzz_outputs *r)
{
    const smattn_problem *p = &fp->p;
    if (p->causal != SMATTN_CAUSAL_NONE || p->window_left >= 0 || p->window_right >= 0 ||
        p->kv_lens || p->T < 2)
        return;
    const int att = p->op == SMATTN_OP_ATTENTION;
    int64_t *perm = malloc((size_t)p->T * sizeof *perm);
    if (!perm)
        abort();
    for (int64_t j = 0; j < p->T; j++)
        perm[j] = j;
    uint32_t s = fp->seed ^ 0x9e3779b9u;
    for (int64_t j = p->T - 1; j > 0; j--) { /* Fisher-Yates */
        s = s * 1664525u + 1013904223u;
        int64_t k = (int64_t)((s >> 8) % (uint32_t)(j + 1));
        int64_t tmp = perm[j];
        perm[j] = perm[k], perm[k] = tmp;
    }
    smattn_inputs in = fp->in;
    void *bufs[4] = {NULL, NULL, NULL, NULL};
    if (att) { /* rows of blocks for q8_0 and q4_0: D / 32 units of 34 or 18 bytes */
        size_t es = smattn_dtype_size(fp->in.k.dtype);
        int64_t blk = smattn_dtype_block(fp->in.k.dtype);
        bufs[0] = permute(fp->k, es, (int64_t[4]){p->B, p->T, p->Hkv, p->D / blk}, 1, perm);
        bufs[1] = permute(fp->v, es, (int64_t[4]){p->B, p->T, p->Hkv, p->Dv / blk}, 1, perm);
        in.k.data = bufs[0], in.v.data = bufs[1];
    } else {
        bufs[0] = permute(fp->x, sizeof(float), (int64_t[4]){p->B, p->Hq, p->S, p->T}, 3, perm);
        in.x.data = bufs[0];
    }
    if (fp->bias) {
        int64_t H = fp->bias_kind == 1 ? 1 : p->Hq;
        bufs[2] = permute(fp->bias, sizeof(float), (int64_t[4]){p->B, H, p->S, p->T}, 3, perm);
        in.bias.data = bufs[2];
    }
    if (fp->mask) {
        int64_t Sm = fp->mask_kind == 1 ? 1 : p->S;
        bufs[3] = permute(fp->mask, 1, (int64_t[4]){p->B, p->Hq, Sm, p->T}, 3, perm);
        in.mask.data = bufs[3];
    }
    smattn_ref_config rc = {1, 0, 0, 0};
    fuzz_outputs rp;
    if (!run_ref(fp, &in, &rc, &rp, "oracle status (keys permuted)")) {
        /* P'[.., j] against P[.., perm[j]]: gather P into key order first */
        const double *P = r->buf[2];
        double *Pg = malloc(r->n[2] ? r->n[2] * sizeof *Pg : 1);
        if (!Pg)
            abort();
        for (size_t row = 0; row < r->n[1]; row++)
            for (int64_t j = 0; j < p->T; j++)
                Pg[row * (size_t)p->T + (size_t)j] = P[row * (size_t)p->T + (size_t)perm[j]];
        fuzz_outputs g = *r;
        g.buf[2] = Pg;
        fuzz_check_same_bits(TARGET, fp, &g, &rp, "key permutation invariance (O, LSE, P permuted)");
        free(Pg);
        fuzz_outputs_free(&rp);
    }
    for (int k = 0; k < 4; k++)
        free(bufs[k]);
    free(perm);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    fuzz_problem fp;
    if (fuzz_problem_decode_bytes(&fp, data, size))
        return 0;
    if (fuzz_problem_shrink(&fp, FUZZ_REF_PROPS_MAX_P) ||
        fuzz_problem_quant(&fp, FUZZ_REF_PROPS_QUANT_IN8)) /* SPEC 2.9, from the seed */
        return 0;
    fuzz_outputs r, r2;
    smattn_ref_config rc = {1, 0, 0, 0};
    if (run_ref(&fp, &fp.in, &rc, &r, "oracle status")) {
        fuzz_problem_free(&fp);
        return 0;
    }
    /* the MPFR phase alone from another starting precision, on the decoded thread count */
    smattn_ref_config rc2 = {fp.threads, 0, 1, 64 + 32 * (long)(fp.seed % 8)};
    if (!run_ref(&fp, &fp.in, &rc2, &r2, "oracle status (no fast phase)")) {
        char what[128];
        snprintf(what, sizeof what, "precision stability (MPFR from %ld bits, %d threads)",
                 rc2.fixed_prec, fp.threads);
        fuzz_check_same_bits(TARGET, &fp, &r, &r2, what);
        fuzz_outputs_free(&r2);
    }
    check_rows(&fp, &r);
    check_permutation(&fp, &r);
    check_shift(&fp);
    fuzz_outputs_free(&r);
    fuzz_problem_free(&fp);
    return 0;
}
