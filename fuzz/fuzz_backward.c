/* SPDX-License-Identifier: MIT */
/* fuzz_backward.c: the exact backward oracle (smattn_ref_backward, SPEC 10) on decoded
 * problems (every shape class: prefill, chunked prefill, decode; every mask kind, GQA, bias,
 * sinks, softcap, lengths, the three empty-row conventions) cut to FUZZ_BACKWARD_MAX_P
 * elements of P, with a dO (and sometimes a dLSE) drawn from the input, against properties
 * its definition implies:
 *  - status: SMATTN_OK, or SMATTN_ERR_PRECISION only with softcap (SPEC 10.3 item 6: no
 *    exact expansion; without softcap it needs an exact rational across rows whose common
 *    denominator passes 2^18 terms, which these sizes make rare enough that a campaign's
 *    finding of one is worth a look); a softmax problem or a descriptor with one
 *    planted error gives exactly the validation status that error calls for;
 *  - keys no row sees (SPEC 10.1): dK and dV exactly +0, unless an empty row of the `nan`
 *    convention (every key NaN) or of `mean` (dV of the keys [0, T_b)) touches them; dBias
 *    +0 at every invisible (row, key) outside `nan` empty rows;
 *  - finite inputs (q, k, v, dO, dLSE finite; bias and sinks finite or -inf) and no `nan`
 *    convention: every binary64 gradient finite (their exact values are below 2^400);
 *  - GQA (Hq > Hkv): the MHA expansion (K and V repeated per query head), run on the
 *    decoded thread count, gives the same dQ, dBias and dSinks bits, and each dK, dV is
 *    the sum of its group's expanded ones within their rounding (half an ulp of each, the
 *    sum taken exactly);
 *  - dBias summed over the heads and queries (a stride 0, SPEC 10.1; with c1 = 5): each
 *    element the full-shape dBias's sum within their roundings, NaN when a term is;
 *  - ALiBi (SPEC 2.8, 10.1): 3 problems in 8 get one of its modes (fuzz_problem_alibi);
 *    every property above holds with it (dBias is not asked for in the mask mode);
 *  - a ragged or paged twin (fuzz_layout_draw, 3 in 8: packed queries, packed keys with
 *    seqused_k, pages in a random order, NHD or HND): its gradients are the dense problem's
 *    bits at every stored row and key t < T_b (the dense run's dO and dLSE 0 at a packed
 *    batch's padding rows, which have no loss term; dK and dV not compared when `nan`
 *    padding rows would poison the dense run only), and +0 in all the storage no stored row
 *    or key reaches (SPEC 10.1);
 *  - the fast backward (smattn_attention_backward, SPEC 10.7, 10.8) differentially, on the
 *    oracle's own run (binary64 gradients, dO and dLSE values of binary32, binary16 or
 *    bfloat16, read by the kernel in that dtype: fuzz_grad_dtype): saved NULL (its binary32
 *    forward), binary32 dQ, dK, dV, dBias (where the oracle's run has it) and dSinks (asked
 *    for with or without sinks: +0 without); status SMATTN_OK, or SMATTN_ERR_UNSUPPORTED
 *    only where smattn.h lets it refuse (a non-finite input other than a -inf bias or
 *    sink); then each element within smattn_backward_bound of the
 *    oracle's for smattn_opt_backward_precision with O and LSE binary32 (SPEC 6.10's ratio,
 *    NaN and infinities by class), 1 thread on the ISA the seed picks; the same bits with 3
 *    threads (every ISA in the replay, SMATTN_FUZZ_FULL; not across ISAs, whose forwards
 *    differ); on the layout twin (SPEC 10.8), the dense run's bits in dSinks and at every
 *    stored row and key, +0 in the rest of the storage. Elements out of contract (finite
 *    exact value, bound +inf) are not judged; a refusal of finite inputs is allowed only
 *    where their magnitudes' sums could leave binary32 (fast_magnitudes_large);
 *  - no crash, leak or undefined behaviour on any input (the sanitizer builds).
 * Choices read from the input's tail before the problem: c0 (bit 0 dLSE, bit 1 binary32
 * outputs instead of binary64, bit 2 special values in dO and dLSE, bit 3 dO and dLSE of 53
 * bits instead of binary32 values), c1 (a planted validation error, 1-6), and a 32-bit seed
 * for dO and dLSE. The kernel reads only binary32/16 and bfloat16 tensors: dO and dLSE are
 * drawn as binary32 values (bit 3 clear; binary16 or bfloat16 ones for a quarter of the
 * seeds each, fuzz_grad_dtype) so that the oracle's one run serves both the properties
 * above and the kernel, which gets the same values as tensors of that dtype; the
 * oracle's runs are where the target's time goes (the kernel's runs and the bound add
 * nothing measurable to the corpus replay, fuzz/README.md), so a second oracle run on
 * rounded copies would cost far more than the check. The differential runs where
 * bits 1 and 3 are clear (a quarter of random inputs, half the seeds); bit 3 keeps the
 * oracle fuzzed on 53-bit gradients of the loss. Any failure is a MISMATCH report followed
 * by abort(). */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include <mpfr.h>

#include "core/internal.h" /* smattn__kv_len */
#include "core/layout.h"
#include "fuzz/common/fuzz_check.h"
#include "smattn.h"

#define TARGET "fuzz_backward"

/* The backward expands exact sums over the rows of a unit (SPEC 10.3 item 5: a GQA unit
 * puts its rows' terms over one denominator, and a row's scores spread over 2^70 make
 * large expansions): problems are cut below the forward targets' size, and the Ziv loops
 * stop at 2048 bits (an element undecided there is SMATTN_ERR_PRECISION, which skips the
 * input: this target judges the gradients' properties, not the oracle's precision). The
 * committed corpus keeps the inputs that run in a fraction of a second (fuzz/README.md). */
#define FUZZ_BACKWARD_MAX_PREC 2048L

static void fail(const fuzz_problem *fp, const char *what, const char *detail)
{
    fuzz_mismatch_head(TARGET, fp, what);
    fprintf(stderr, "%s\n", detail);
    abort();
}

static void *xcalloc(size_t n, size_t es)
{
    void *p = calloc(n ? n : 1, es);
    if (!p)
        abort();
    return p;
}

/* dO, dLSE and the gradients of one run: contiguous, binary64 inputs, outputs in `t`. */
typedef struct grads {
    smattn_grad_inputs gin;
    smattn_grad_outputs go;
    double *dout, *dlse;
    smattn_dtype vt; /* the type of dO's and dLSE's values (fuzz_grad_dtype) */
    void *buf[5]; /* dq, dk, dv, dbias, dsinks */
    int64_t n[5];
    smattn_dtype t;
} grads;

static void grads_alloc(grads *g, const smattn_problem *p, smattn_dtype t)
{
    smattn_problem q = *p;
    const int64_t n[5] = {p->B * p->S * p->Hq * p->D, p->B * p->T * p->Hkv * p->D,
                          p->B * p->T * p->Hkv * p->Dv, p->B * p->Hq * p->S * p->T, p->Hq};
    smattn_out_tensor *slot[5] = {&g->go.dq, &g->go.dk, &g->go.dv, &g->go.dbias, &g->go.dsinks};
    const char roles[5] = {'q', 'k', 'v', 'b', 's'};
    g->t = t;
    for (int k = 0; k < 5; k++) {
        g->n[k] = n[k];
        g->buf[k] = xcalloc((size_t)n[k], smattn_dtype_size(t));
        *slot[k] = (smattn_out_tensor){g->buf[k], t, {0}};
        if (smattn_contiguous_strides(&q, roles[k], slot[k]->stride))
            abort();
    }
}

/* dO [B,S,Hq,Dv] and, with dlse, dLSE [B,Hq,S]: uniform in [-2, 6) from seed (values of
 * vt, binary32, binary16 or bfloat16, so that the fast backward reads the values the oracle
 * had; binary64 draws with vt F64), with special values (NaN, infinities, FLT_MAX, zeros)
 * at a few places when `special`. */
static void grads_inputs(grads *g, const smattn_problem *p, uint32_t seed, int dlse, int special,
                         smattn_dtype vt)
{
    g->vt = vt;
    if (fuzz_grad_values(p, seed, special, vt, &g->dout, dlse ? &g->dlse : NULL))
        abort(); /* out of memory in the harness */
    smattn_problem q = *p;
    g->gin.dout = (smattn_tensor){g->dout, SMATTN_F64, {0}};
    if (smattn_contiguous_strides(&q, 'o', g->gin.dout.stride))
        abort();
    if (dlse) {
        g->gin.dlse = (smattn_tensor){g->dlse, SMATTN_F64, {0}};
        if (smattn_contiguous_strides(&q, 'l', g->gin.dlse.stride))
            abort();
    }
}

static void grads_free(grads *g)
{
    for (int k = 0; k < 5; k++)
        free(g->buf[k]);
    free(g->dout);
    free(g->dlse);
    memset(g, 0, sizeof *g);
}

static double gat(const grads *g, int k, int64_t e)
{
    return smattn_load(g->buf[k], g->t, e);
}

static double at(const smattn_tensor *t, int64_t i0, int64_t i1, int64_t i2, int64_t i3)
{
    return smattn_load(t->data, t->dtype,
                       i0 * t->stride[0] + i1 * t->stride[1] + i2 * t->stride[2] +
                           i3 * t->stride[3]);
}

/* The oracle; 1 if it stopped at its precision limit with softcap (SMATTN_ERR_PRECISION,
 * which SPEC 10.3 item 6 allows for an element it could not decide), 0 on success; else a
 * MISMATCH. */
static int run(const fuzz_problem *fp, const smattn_problem *p, const smattn_inputs *in,
               const grads *g, int threads, const char *what)
{
    smattn_ref_config rc = {threads, FUZZ_BACKWARD_MAX_PREC, 0, 0};
    smattn_status s = smattn_ref_backward(p, in, &g->gin, &g->go, &rc, NULL);
    if (s == SMATTN_ERR_PRECISION && p->softcap == 0)
        fail(fp, what,
             "smattn_ref_backward: SMATTN_ERR_PRECISION without softcap (SPEC 10.3 item 6 "
             "leaves it to an exact rational across rows whose common denominator passes 2^18 "
             "terms: check that it is one)");
    if (s == SMATTN_ERR_PRECISION)
        return 1;
    if (s != SMATTN_OK) {
        char d[160];
        snprintf(d, sizeof d, "smattn_ref_backward: %s on a valid problem", smattn_status_name(s));
        fail(fp, what, d);
    }
    return 0;
}

/* ---- validation: one planted error, its status ------------------------------------------- */

static void check_validation(const fuzz_problem *fp, const grads *g, int which)
{
    smattn_problem p = fp->p;
    smattn_inputs in = fp->in;
    smattn_grad_inputs gin = g->gin;
    smattn_grad_outputs go = g->go;
    smattn_layout lay;
    memset(&lay, 0, sizeof lay);
    int64_t *cu_bad = NULL;
    smattn_status want;
    switch (which) {
    case 1: gin.dout.data = NULL, want = SMATTN_ERR_NULL; break;
    case 2: go.dq.dtype = SMATTN_BOOL, want = SMATTN_ERR_DTYPE; break;
    case 3: go.dv.data = go.dk.data, want = SMATTN_ERR_ALIAS; break;
    case 4: gin.dout.stride[1] = -1, want = SMATTN_ERR_STRIDE; break;
    case 5: /* a dBias summed over the heads (valid, SPEC 10.1) written over dQ; a problem
             * with no dBias (no bias, or ALiBi's mask mode, whose dBias is unsupported) has
             * none to plant */
        if (!g->go.dbias.data)
            return;
        go.dbias.stride[1] = 0, go.dbias.data = go.dq.data, want = SMATTN_ERR_ALIAS;
        break;
    case 6: /* a cu_seqlens_q not starting at 0 (SPEC 2.7: the forward's rule) */
        cu_bad = xcalloc((size_t)p.B + 1, sizeof *cu_bad);
        cu_bad[0] = 1;
        lay.cu_seqlens_q = cu_bad, p.q_lens = NULL, p.layout = &lay, want = SMATTN_ERR_LAYOUT;
        break;
    default: return;
    }
    smattn_status s = smattn_ref_backward(&p, &in, &gin, &go, NULL, NULL);
    free(cu_bad);
    if (s != want) {
        char d[200];
        snprintf(d, sizeof d, "planted error %d: status %s, want %s", which, smattn_status_name(s),
                 smattn_status_name(want));
        fail(fp, "validation", d);
    }
}

/* ---- rows: which keys each row sees ------------------------------------------------------- */

/* vis[((b*Hq + h)*S + i)*T + j]: key j visible to the row (SPEC 3, a -inf bias hides it);
 * empty[(b*Hq + h)*S + i]: the row is empty (SPEC 3.4: a padding query, or no visible key
 * and no sink). */
static void visibility(const fuzz_problem *fp, char *vis, char *empty)
{
    const smattn_problem *p = &fp->p;
    const smattn_inputs *in = &fp->in;
    for (int64_t b = 0; b < p->B; b++)
        for (int64_t h = 0; h < p->Hq; h++)
            for (int64_t i = 0; i < p->S; i++) {
                const int64_t r = (b * p->Hq + h) * p->S + i;
                const int64_t Sb = p->q_lens ? p->q_lens[b] : p->S;
                int64_t n = 0;
                for (int64_t j = 0; j < p->T; j++) {
                    char v = i < Sb && smattn_visible(p, in, b, h, i, j);
                    if (v && in->bias.data && at(&in->bias, b, h, i, j) == -HUGE_VAL)
                        v = 0;
                    vis[r * p->T + j] = v;
                    n += v;
                }
                const double sink = in->sinks.data ? at(&in->sinks, h, 0, 0, 0) : -HUGE_VAL;
                empty[r] = i >= Sb || (n == 0 && sink == -HUGE_VAL);
            }
}

static int pos_zero(double x)
{
    return x == 0 && !signbit(x);
}

static void check_masked(const fuzz_problem *fp, const grads *g)
{
    const smattn_problem *p = &fp->p;
    const int64_t gs = p->Hq / p->Hkv, rows = p->B * p->Hq * p->S;
    char *vis = xcalloc((size_t)(rows * p->T), 1), *empty = xcalloc((size_t)rows, 1);
    visibility(fp, vis, empty);
    char d[200];
    for (int64_t b = 0; b < p->B; b++)
        for (int64_t kv = 0; kv < p->Hkv; kv++) {
            /* what the group's empty rows add (SPEC 10.2) */
            int nan_rows = 0, mean_rows = 0;
            for (int64_t h = kv * gs; h < (kv + 1) * gs; h++)
                for (int64_t i = 0; i < p->S; i++)
                    if (empty[(b * p->Hq + h) * p->S + i]) {
                        nan_rows |= p->empty_rows == SMATTN_EMPTY_NAN;
                        mean_rows |= p->empty_rows == SMATTN_EMPTY_MEAN;
                    }
            const int64_t Tb = p->kv_lens ? p->kv_lens[b] : p->T;
            for (int64_t j = 0; j < p->T && !nan_rows; j++) {
                int seen = 0;
                for (int64_t h = kv * gs; h < (kv + 1) * gs && !seen; h++)
                    for (int64_t i = 0; i < p->S && !seen; i++)
                        seen = vis[((b * p->Hq + h) * p->S + i) * p->T + j];
                if (seen)
                    continue;
                for (int64_t e = 0; e < p->D; e++) {
                    int64_t x = ((b * p->T + j) * p->Hkv + kv) * p->D + e;
                    if (!pos_zero(gat(g, 1, x))) {
                        snprintf(d, sizeof d, "dK[b=%lld,j=%lld,g=%lld,%lld] = %a, want +0",
                                 (long long)b, (long long)j, (long long)kv, (long long)e,
                                 gat(g, 1, x));
                        fail(fp, "a key no row sees", d);
                    }
                }
                for (int64_t e = 0; e < p->Dv && !(mean_rows && j < Tb); e++) {
                    int64_t x = ((b * p->T + j) * p->Hkv + kv) * p->Dv + e;
                    if (!pos_zero(gat(g, 2, x))) {
                        snprintf(d, sizeof d, "dV[b=%lld,j=%lld,g=%lld,%lld] = %a, want +0",
                                 (long long)b, (long long)j, (long long)kv, (long long)e,
                                 gat(g, 2, x));
                        fail(fp, "a key no row sees", d);
                    }
                }
            }
        }
    for (int64_t r = 0; r < rows && g->go.dbias.data; r++)
        for (int64_t j = 0; j < p->T; j++) {
            if (vis[r * p->T + j] || (empty[r] && p->empty_rows == SMATTN_EMPTY_NAN))
                continue;
            if (!pos_zero(gat(g, 3, r * p->T + j))) {
                snprintf(d, sizeof d, "dBias[row %lld, j=%lld] = %a, want +0", (long long)r,
                         (long long)j, gat(g, 3, r * p->T + j));
                fail(fp, "dBias at an invisible key", d);
            }
        }
    free(vis);
    free(empty);
}

/* ---- finite inputs, finite gradients ------------------------------------------------------ */

static int all_finite(const smattn_tensor *t, int64_t n0, int64_t n1, int64_t n2, int64_t n3,
                      int neg_inf_ok)
{
    for (int64_t a = 0; t->data && a < n0; a++)
        for (int64_t b = 0; b < n1; b++)
            for (int64_t c = 0; c < n2; c++)
                for (int64_t d = 0; d < n3; d++) {
                    double x = at(t, a, b, c, d);
                    if (!isfinite(x) && !(neg_inf_ok && x == -HUGE_VAL))
                        return 0;
                }
    return 1;
}

static void check_finite(const fuzz_problem *fp, const grads *g)
{
    const smattn_problem *p = &fp->p;
    const smattn_inputs *in = &fp->in;
    if (g->t != SMATTN_F64 || p->empty_rows == SMATTN_EMPTY_NAN ||
        !all_finite(&in->q, p->B, p->S, p->Hq, p->D, 0) ||
        !all_finite(&in->k, p->B, p->T, p->Hkv, p->D, 0) ||
        !all_finite(&in->v, p->B, p->T, p->Hkv, p->Dv, 0) ||
        !all_finite(&in->bias, p->B, p->Hq, p->S, p->T, 1) ||
        !all_finite(&in->sinks, p->Hq, 1, 1, 1, 1) ||
        !all_finite(&g->gin.dout, p->B, p->S, p->Hq, p->Dv, 0) ||
        !all_finite(&g->gin.dlse, p->B, p->Hq, p->S, 1, 0))
        return;
    static const char *const names[5] = {"dQ", "dK", "dV", "dBias", "dSinks"};
    for (int k = 0; k < 5; k++)
        for (int64_t e = 0; e < g->n[k] && (k != 3 || g->go.dbias.data); e++)
            if (!isfinite(gat(g, k, e))) {
                char d[160];
                snprintf(d, sizeof d, "%s[%lld] = %a from finite inputs", names[k], (long long)e,
                         gat(g, k, e));
                fail(fp, "finite inputs, finite gradients", d);
            }
}

/* ---- GQA: the group sums of the MHA expansion ------------------------------------------ */

/* Half the spacing of dtype t at x (binary64 or binary32). */
static double half_ulp(double x, smattn_dtype t)
{
    x = fabs(x);
    if (t == SMATTN_F32)
        return 0.5 * ((double)nextafterf((float)x, HUGE_VALF) - x);
    return 0.5 * (nextafter(x, HUGE_VAL) - x);
}

static void check_gqa(const fuzz_problem *fp, const grads *g)
{
    const smattn_problem *p = &fp->p;
    const int64_t gs = p->Hq / p->Hkv;
    if (gs == 1)
        return;
    smattn_problem m = *p;
    m.Hkv = p->Hq;
    /* K and V repeated per query head, binary64 (exact: every dtype converts exactly) */
    const int64_t nk = p->B * p->T * p->Hq * p->D, nv = p->B * p->T * p->Hq * p->Dv;
    double *k = xcalloc((size_t)nk, sizeof(double)), *v = xcalloc((size_t)nv, sizeof(double));
    for (int64_t b = 0; b < p->B; b++)
        for (int64_t j = 0; j < p->T; j++)
            for (int64_t h = 0; h < p->Hq; h++) {
                for (int64_t e = 0; e < p->D; e++)
                    k[((b * p->T + j) * p->Hq + h) * p->D + e] = at(&fp->in.k, b, j, h / gs, e);
                for (int64_t e = 0; e < p->Dv; e++)
                    v[((b * p->T + j) * p->Hq + h) * p->Dv + e] = at(&fp->in.v, b, j, h / gs, e);
            }
    smattn_inputs in = fp->in;
    in.k = (smattn_tensor){k, SMATTN_F64, {0}};
    in.v = (smattn_tensor){v, SMATTN_F64, {0}};
    if (smattn_contiguous_strides(&m, 'k', in.k.stride) ||
        smattn_contiguous_strides(&m, 'v', in.v.stride))
        abort();
    grads e;
    memset(&e, 0, sizeof e);
    grads_alloc(&e, &m, g->t);
    e.gin = g->gin;
    if (!g->go.dbias.data)
        e.go.dbias.data = NULL;
    if (run(fp, &m, &in, &e, fp->threads, "the MHA expansion's status")) {
        free(k), free(v), grads_free(&e);
        return;
    }
    char d[240];
    static const char *const names[5] = {"dQ", "dK", "dV", "dBias", "dSinks"};
    const int same[3] = {0, 3, 4};
    for (int s = 0; s < 3; s++) {
        const int kx = same[s];
        if (kx == 3 && !g->go.dbias.data)
            continue;
        const size_t es = smattn_dtype_size(g->t);
        for (int64_t x = 0; x < g->n[kx]; x++)
            if (memcmp((char *)g->buf[kx] + (size_t)x * es, (char *)e.buf[kx] + (size_t)x * es,
                       es)) {
                snprintf(d, sizeof d, "%s[%lld]: GQA %a, MHA expansion %a", names[kx], (long long)x,
                         gat(g, kx, x), gat(&e, kx, x));
                fail(fp, "GQA against its MHA expansion (same bits)", d);
            }
    }
    mpfr_t sum, slack;
    mpfr_inits2(2400, sum, slack, (mpfr_ptr)0); /* exact for binary64 sums of < 2^300 terms */
    for (int w = 1; w <= 2; w++) {
        const int64_t W = w == 1 ? p->D : p->Dv;
        for (int64_t b = 0; b < p->B; b++)
            for (int64_t j = 0; j < p->T; j++)
                for (int64_t kv = 0; kv < p->Hkv; kv++)
                    for (int64_t c = 0; c < W; c++) {
                        double a = gat(g, w, ((b * p->T + j) * p->Hkv + kv) * W + c);
                        int finite = isfinite(a);
                        mpfr_set_d(sum, -a, MPFR_RNDN);
                        mpfr_set_d(slack, half_ulp(a, g->t), MPFR_RNDN);
                        for (int64_t h = kv * gs; h < (kv + 1) * gs && finite; h++) {
                            double t = gat(&e, w, ((b * p->T + j) * p->Hq + h) * W + c);
                            finite = isfinite(t);
                            mpfr_add_d(sum, sum, t, MPFR_RNDN);
                            mpfr_add_d(slack, slack, half_ulp(t, g->t), MPFR_RNDN);
                        }
                        if (!finite || mpfr_cmpabs(sum, slack) <= 0)
                            continue;
                        snprintf(d, sizeof d,
                                 "%s[b=%lld,j=%lld,g=%lld,%lld] = %a, the group's expanded ones "
                                 "sum to %a more",
                                 names[w], (long long)b, (long long)j, (long long)kv, (long long)c,
                                 a, mpfr_get_d(sum, MPFR_RNDN));
                        fail(fp, "GQA dK/dV against the group sums of the MHA expansion", d);
                    }
    }
    mpfr_clears(sum, slack, (mpfr_ptr)0);
    free(k), free(v);
    grads_free(&e); /* its dO and dLSE are g's: e.dout and e.dlse stay NULL */
}

/* ---- dBias summed over the heads and queries ([B, 1, 1, T], SPEC 10.1) ---------------------- */

/* Each summed element is the sum of the full-shape dBias over its heads and queries within
 * their roundings (half an ulp of each, and of the sum); NaN when one of them is. */
static void check_dbias_sums(const fuzz_problem *fp, const grads *g)
{
    const smattn_problem *p = &fp->p;
    const int64_t B = p->B, H = p->Hq, S = p->S, T = p->T;
    const size_t es = smattn_dtype_size(g->t);
    void *out = xcalloc((size_t)(B * T), es);
    grads e = *g;
    e.go.dbias = (smattn_out_tensor){out, g->t, {T, 0, 0, 1}};
    if (run(fp, p, &fp->in, &e, fp->threads, "dBias summed over heads and queries")) {
        free(out);
        return;
    }
    mpfr_t sum, slack;
    mpfr_inits2(2400, sum, slack, (mpfr_ptr)0);
    for (int64_t b = 0; b < B; b++)
        for (int64_t j = 0; j < T; j++) {
            double a = smattn_load(out, g->t, b * T + j);
            int nan = 0, finite = 1;
            mpfr_set_d(sum, -a, MPFR_RNDN);
            mpfr_set_d(slack, half_ulp(a, g->t), MPFR_RNDN);
            for (int64_t h = 0; h < H; h++)
                for (int64_t i = 0; i < S; i++) {
                    double t = gat(g, 3, ((b * H + h) * S + i) * T + j);
                    nan |= isnan(t);
                    finite &= isfinite(t);
                    if (isfinite(t)) {
                        mpfr_add_d(sum, sum, t, MPFR_RNDN);
                        mpfr_add_d(slack, slack, half_ulp(t, g->t), MPFR_RNDN);
                    }
                }
            char d[200];
            if (nan && !isnan(a)) {
                snprintf(d, sizeof d, "dBias sum [b=%lld, j=%lld] = %a, a term is NaN",
                         (long long)b, (long long)j, a);
                fail(fp, "dBias summed over heads and queries", d);
            }
            if (!finite || !isfinite(a) || mpfr_cmpabs(sum, slack) <= 0)
                continue;
            snprintf(d, sizeof d, "dBias sum [b=%lld, j=%lld] = %a, the full elements sum to %a more",
                     (long long)b, (long long)j, a, mpfr_get_d(sum, MPFR_RNDN));
            fail(fp, "dBias summed over heads and queries", d);
        }
    mpfr_clears(sum, slack, (mpfr_ptr)0);
    free(out);
}

/* ---- the ragged or paged twin (SPEC 2.7, 10.1) -------------------------------------------- */

/* Element count of a layout's storage for Q's (role 'q') or K's and V's rows, times w. */
static int64_t storage_rows(const fuzz_layout *fl, char role)
{
    const smattn_problem *p = &fl->p;
    const smattn_layout *L = &fl->L;
    if (role == 'q')
        return L->cu_seqlens_q ? (L->cu_seqlens_q[p->B] > 0 ? L->cu_seqlens_q[p->B] : 1)
                               : p->B * p->S;
    if (L->cu_seqlens_k)
        return L->cu_seqlens_k[p->B] > 0 ? L->cu_seqlens_k[p->B] : 1;
    return L->block_table ? L->num_pages * L->page_size : p->B * p->T;
}

static void check_fast_layout(const fuzz_problem *fp, const fuzz_layout *fl,
                              const smattn_grad_inputs *dgin, const smattn_grad_inputs *lgin,
                              int64_t nlo, int64_t nll, const int64_t n[3],
                              const int64_t st[3][4], int nan_pad);

/* fast: the fast backward is judged on this input (check_fast_layout too). */
static void check_layout_twin(const fuzz_problem *fp, const fuzz_layout *fl, const grads *g,
                              int fast)
{
    const smattn_problem *p = &fp->p, *lp = &fl->p;
    const int64_t B = p->B, S = p->S, Hq = p->Hq, Hkv = p->Hkv, D = p->D, Dv = p->Dv;
    const int packed = fl->L.cu_seqlens_q != NULL;
    const int64_t Sb[2] = {p->q_lens ? p->q_lens[0] : S, p->q_lens && B > 1 ? p->q_lens[1] : S};
    /* the dense run: dO and dLSE 0 at the padding rows a packed batch does not store */
    grads e;
    memset(&e, 0, sizeof e);
    grads_alloc(&e, p, g->t);
    if (!g->go.dbias.data)
        e.go.dbias.data = NULL;
    e.gin = g->gin;
    const int64_t no = B * S * Hq * Dv, nl = B * Hq * S;
    double *dod = xcalloc((size_t)no, sizeof(double)), *dld = NULL;
    memcpy(dod, g->dout, (size_t)no * sizeof(double));
    if (g->dlse) {
        dld = xcalloc((size_t)nl, sizeof(double));
        memcpy(dld, g->dlse, (size_t)nl * sizeof(double));
        e.gin.dlse.data = dld;
    }
    e.gin.dout.data = dod;
    int padded = 0;
    for (int64_t b = 0; packed && b < B; b++)
        for (int64_t i = Sb[b]; i < S; i++) {
            padded = 1;
            for (int64_t h = 0; h < Hq; h++) {
                for (int64_t c = 0; c < Dv; c++)
                    dod[((b * S + i) * Hq + h) * Dv + c] = 0;
                if (dld)
                    dld[(b * Hq + h) * S + i] = 0;
            }
        }
    /* the layout run: dO, dLSE packed like O and LSE; the gradients in Q's, K's, V's storage */
    const int64_t rq = storage_rows(fl, 'q'), rk = storage_rows(fl, 'k');
    double *dol = xcalloc((size_t)(rq * Hq * Dv), sizeof(double)), *dll = NULL;
    grads l;
    memset(&l, 0, sizeof l);
    l.t = g->t;
    l.gin.dout = (smattn_tensor){dol, SMATTN_F64, {packed ? 0 : S * Hq * Dv, Hq * Dv, Dv, 1}};
    if (g->dlse) {
        dll = xcalloc((size_t)(rq * Hq), sizeof(double));
        l.gin.dlse = (smattn_tensor){dll, SMATTN_F64, {packed ? 0 : Hq * S, packed ? rq : S, 1, 0}};
    }
    for (int64_t b = 0; b < B; b++)
        for (int64_t i = 0; i < S; i++)
            for (int64_t h = 0; h < Hq && smattn__row_stored(lp, b, i); h++) {
                for (int64_t c = 0; c < Dv; c++)
                    dol[smattn__row_off(lp, l.gin.dout.stride, b, i, h, c)] =
                        g->dout[((b * S + i) * Hq + h) * Dv + c];
                if (dll)
                    dll[smattn__lse_off(lp, l.gin.dlse.stride, b, h, i)] =
                        g->dlse[(b * Hq + h) * S + i];
            }
    const smattn_tensor *src[3] = {&fl->in.q, &fl->in.k, &fl->in.v};
    smattn_out_tensor *slot[3] = {&l.go.dq, &l.go.dk, &l.go.dv};
    const int64_t n[3] = {rq * Hq * D, rk * Hkv * D, rk * Hkv * Dv};
    for (int k = 0; k < 3; k++) {
        l.n[k] = n[k];
        l.buf[k] = xcalloc((size_t)n[k], smattn_dtype_size(g->t));
        memset(l.buf[k], 0x5a, (size_t)n[k] * smattn_dtype_size(g->t)); /* unwritten: seen */
        *slot[k] = (smattn_out_tensor){l.buf[k], g->t, {0}};
        memcpy(slot[k]->stride, src[k]->stride, sizeof slot[k]->stride);
    }
    if (g->go.dsinks.data) { /* dBias and dSinks are dense: the dense run's, not compared */
        l.buf[4] = xcalloc((size_t)Hq, smattn_dtype_size(g->t));
        l.go.dsinks = (smattn_out_tensor){l.buf[4], g->t, {1, 0, 0, 0}};
    }
    const int dense_st = run(fp, p, &fp->in, &e, fp->threads, "the layout twin's dense run");
    smattn_ref_config rc = {fp->threads, FUZZ_BACKWARD_MAX_PREC, 0, 0};
    smattn_status ls = smattn_ref_backward(lp, &fl->in, &l.gin, &l.go, &rc, NULL);
    char d[240];
    if (ls != SMATTN_OK && !(ls == SMATTN_ERR_PRECISION && p->softcap > 0)) {
        snprintf(d, sizeof d, "smattn_ref_backward on the layout twin: %s",
                 smattn_status_name(ls));
        fail(fp, "layout twin", d);
    }
    if (!dense_st && ls == SMATTN_OK) {
        const size_t es = smattn_dtype_size(g->t);
        unsigned char *seen[3];
        for (int k = 0; k < 3; k++)
            seen[k] = xcalloc((size_t)n[k], 1);
        const int nan_pad = padded && p->empty_rows == SMATTN_EMPTY_NAN;
        for (int64_t b = 0; b < B; b++) {
            for (int64_t i = 0; i < S; i++)
                for (int64_t h = 0; h < Hq && smattn__row_stored(lp, b, i); h++)
                    for (int64_t c = 0; c < D; c++) {
                        const int64_t o = smattn__row_off(lp, l.go.dq.stride, b, i, h, c);
                        const int64_t x = ((b * S + i) * Hq + h) * D + c;
                        seen[0][o] = 1;
                        if (memcmp((char *)l.buf[0] + o * (int64_t)es,
                                   (char *)e.buf[0] + x * (int64_t)es, es)) {
                            snprintf(d, sizeof d, "dQ[b=%lld,i=%lld,h=%lld,%lld]: layout %a, "
                                     "dense %a", (long long)b, (long long)i, (long long)h,
                                     (long long)c, gat(&l, 0, o), gat(&e, 0, x));
                            fail(fp, "layout twin: the dense problem's bits", d);
                        }
                    }
            const int64_t Tb = smattn__kv_len(lp, b); /* the keys stored for b */
            for (int64_t t = 0; t < Tb; t++)
                for (int64_t kv = 0; kv < Hkv; kv++)
                    for (int w = 1; w <= 2; w++)
                        for (int64_t c = 0; c < (w == 1 ? D : Dv); c++) {
                            const int64_t W = w == 1 ? D : Dv;
                            const int64_t o = smattn__key_off(lp, slot[w]->stride, b, t, kv, c);
                            const int64_t x = ((b * p->T + t) * Hkv + kv) * W + c;
                            seen[w][o] = 1;
                            if (!nan_pad && memcmp((char *)l.buf[w] + o * (int64_t)es,
                                                   (char *)e.buf[w] + x * (int64_t)es, es)) {
                                snprintf(d, sizeof d, "d%c[b=%lld,t=%lld,g=%lld,%lld]: layout "
                                         "%a, dense %a", w == 1 ? 'K' : 'V', (long long)b,
                                         (long long)t, (long long)kv, (long long)c,
                                         gat(&l, w, o), gat(&e, w, x));
                                fail(fp, "layout twin: the dense problem's bits", d);
                            }
                        }
        }
        for (int k = 0; k < 3; k++) {
            for (int64_t o = 0; o < n[k]; o++)
                if (!seen[k][o] && !pos_zero(gat(&l, k, o))) {
                    snprintf(d, sizeof d, "%s storage element %lld = %a, reached by no stored "
                             "row or key: want +0", k == 0 ? "dQ" : k == 1 ? "dK" : "dV",
                             (long long)o, gat(&l, k, o));
                    fail(fp, "layout twin: storage no key reaches", d);
                }
            free(seen[k]);
        }
    }
    if (fast) {
        const int64_t st[3][4] = {{slot[0]->stride[0], slot[0]->stride[1], slot[0]->stride[2],
                                   slot[0]->stride[3]},
                                  {slot[1]->stride[0], slot[1]->stride[1], slot[1]->stride[2],
                                   slot[1]->stride[3]},
                                  {slot[2]->stride[0], slot[2]->stride[1], slot[2]->stride[2],
                                   slot[2]->stride[3]}};
        check_fast_layout(fp, fl, &e.gin, &l.gin, rq * Hq * Dv, rq * Hq, n, st,
                          padded && p->empty_rows == SMATTN_EMPTY_NAN);
    }
    free(dod), free(dld), free(dol), free(dll);
    e.gin.dout.data = NULL;
    grads_free(&e);
    grads_free(&l);
}

/* ---- the fast backward against the oracle's run (SPEC 10.7, 10.8) --------------------------- */

/* The largest |element| of a tensor (0 without data). */
static double max_abs(const smattn_tensor *t, int64_t n0, int64_t n1, int64_t n2, int64_t n3)
{
    double m = 0;
    for (int64_t a = 0; t->data && a < n0; a++)
        for (int64_t b = 0; b < n1; b++)
            for (int64_t c = 0; c < n2; c++)
                for (int64_t d = 0; d < n3; d++)
                    m = fmax(m, fabs(at(t, a, b, c, d)));
    return m;
}

/* Whether the kernel's magnitude rule (opt/backward.c magnitudes_fit: dP, Delta, the
 * gradients' sums and the scores below 2^126 from the inputs' largest magnitudes; the stored
 * LSE of a row that sees keys finite) may refuse the problem: the same sums, with max |O| <=
 * max |V| (O is a convex combination of V's rows, rounded), reaching 2^120, a margin below
 * the kernel's limit for its O's roundings; and the scores with the largest finite bias and
 * ALiBi term, past which the forward's binary32 LSE may overflow. */
static int fast_magnitudes_large(const smattn_problem *p, const smattn_inputs *in,
                                 const smattn_grad_inputs *gin)
{
    const double mq = max_abs(&in->q, p->B, p->S, p->Hq, p->D),
                 mk = max_abs(&in->k, p->B, p->T, p->Hkv, p->D),
                 mv = max_abs(&in->v, p->B, p->T, p->Hkv, p->Dv),
                 mdo = max_abs(&gin->dout, p->B, p->S, p->Hq, p->Dv),
                 mdl = max_abs(&gin->dlse, p->B, p->Hq, p->S, 1);
    const double G = (double)(p->Hq / p->Hkv), S = (double)p->S, sc = fabs(p->scale);
    const double dp = (double)p->Dv * mdo * mv, dl = dp + mdl, ds = dp + dl;
    double mb = 0, ms = 0; /* the largest finite |bias|, |slope| */
    for (int64_t a = 0; in->bias.data && a < p->B; a++)
        for (int64_t b = 0; b < p->Hq; b++)
            for (int64_t c = 0; c < p->S; c++)
                for (int64_t d = 0; d < p->T; d++) {
                    const double x = fabs(at(&in->bias, a, b, c, d));
                    mb = isfinite(x) ? fmax(mb, x) : mb;
                }
    const int64_t nsl = p->alibi_slopes_per_batch ? p->B * p->Hq : p->Hq;
    for (int64_t h = 0; p->alibi_mode != SMATTN_ALIBI_NONE && p->alibi_slopes && h < nsl; h++)
        ms = fmax(ms, fabs((double)p->alibi_slopes[h]));
    const double scores = (double)p->D * mq * mk * fmax(1, p->softcap > 0 ? 1 : sc) +
                          mb * fmax(1, ms) + ms * (double)(p->S + p->T);
    const double need[7] = {dp,
                            dl,
                            sc * (double)p->T * ds * mk,
                            sc * S * G * ds * mq,
                            S * G * mdo,
                            (double)p->B * S * dl,
                            scores};
    for (int k = 0; k < 7; k++)
        if (!(need[k] < 0x1p120))
            return 1;
    return 0;
}

/* Whether smattn_attention_backward may refuse the problem (smattn.h): a Q, K, V, dO or dLSE
 * element not finite, a bias or sink element neither finite nor -inf, or magnitudes whose
 * sums could leave binary32's range (fast_magnitudes_large). Every tensor the decoder makes is
 * binary32, binary16 or bfloat16 and a dBias asked for is the full [B,Hq,S,T] in binary32, so
 * nothing else may. */
static int fast_may_refuse(const fuzz_problem *fp, const smattn_grad_inputs *gin)
{
    const smattn_problem *p = &fp->p;
    const smattn_inputs *in = &fp->in;
    if (all_finite(&in->q, p->B, p->S, p->Hq, p->D, 0) &&
        all_finite(&in->k, p->B, p->T, p->Hkv, p->D, 0) &&
        all_finite(&in->v, p->B, p->T, p->Hkv, p->Dv, 0) &&
        all_finite(&gin->dout, p->B, p->S, p->Hq, p->Dv, 0) &&
        all_finite(&gin->dlse, p->B, p->Hq, p->S, 1, 0) && fast_magnitudes_large(p, in, gin))
        return 1;
    return !all_finite(&in->q, p->B, p->S, p->Hq, p->D, 0) ||
           !all_finite(&in->k, p->B, p->T, p->Hkv, p->D, 0) ||
           !all_finite(&in->v, p->B, p->T, p->Hkv, p->Dv, 0) ||
           !all_finite(&in->bias, p->B, p->Hq, p->S, p->T, 1) ||
           !all_finite(&in->sinks, p->Hq, 1, 1, 1, 1) ||
           !all_finite(&gin->dout, p->B, p->S, p->Hq, p->Dv, 0) ||
           !all_finite(&gin->dlse, p->B, p->Hq, p->S, 1, 0);
}

/* A binary32 copy of n binary64 elements (exact: drawn as binary32 values). */
static float *f32_copy(const double *x, int64_t n)
{
    float *c = xcalloc((size_t)n, sizeof(float));
    for (int64_t e = 0; e < n; e++)
        c[e] = (float)x[e];
    return c;
}

/* The fast backward's dQ, dK, dV, dBias (when the oracle's run has it, g->go.dbias), dSinks
 * (binary32, g's shapes, in out[0..4], filled with the byte `fill` first so that an element
 * it leaves unwritten differs between two runs), saved NULL: it runs the binary32 forward
 * itself. */
static smattn_status fast_run(const fuzz_problem *fp, const grads *g, const smattn_grad_inputs *gin,
                              const char *isa, int threads, float *out[5], int fill)
{
    smattn_grad_outputs go;
    memset(&go, 0, sizeof go);
    smattn_out_tensor *slot[5] = {&go.dq, &go.dk, &go.dv, &go.dbias, &go.dsinks};
    const smattn_out_tensor *like[5] = {&g->go.dq, &g->go.dk, &g->go.dv, &g->go.dbias,
                                        &g->go.dsinks};
    for (int k = 0; k < 5; k++) {
        if (k == 3 && !g->go.dbias.data)
            continue;
        memset(out[k], fill, (size_t)g->n[k] * sizeof(float));
        *slot[k] = (smattn_out_tensor){out[k], SMATTN_F32, {0}};
        memcpy(slot[k]->stride, like[k]->stride, sizeof slot[k]->stride);
    }
    smattn_opt_config cfg = {threads, isa};
    return smattn_attention_backward(&fp->p, &fp->in, NULL, gin, &go, &cfg);
}

/* smattn_attention_backward on the oracle's problem (g: binary64 gradients of dO and dLSE
 * that are values of g->vt): SMATTN_OK or, where smattn.h allows it, SMATTN_ERR_UNSUPPORTED;
 * then every dQ, dK, dV, dBias (with a bias) and dSinks element within smattn_backward_bound
 * of the oracle's for
 * the kernel's model (smattn_opt_backward_precision, O and LSE stored in binary32 by its own
 * forward) with 1 thread, and the same bits with 3 threads; on the ISA the seed picks (every
 * ISA in the replay, SMATTN_FUZZ_FULL). Not across ISAs: with saved NULL each runs its own
 * forward, whose O and LSE may differ by ISA (smattn.h). An element whose exact value is
 * finite and whose bound is +inf (a row out of the forward's contract, or a majorant past
 * binary32's range: SPEC 6.8, 10.7) is not judged, as in fuzz_check_bound: the model's
 * binary32 arithmetic may overflow there, and inf - inf gives NaN. */
static void check_fast(const fuzz_problem *fp, const grads *g)
{
    static const char *const names[5] = {"dQ", "dK", "dV", "dBias", "dSinks"};
    const int nout = 5, has_db = g->go.dbias.data != NULL;
    const smattn_problem *p = &fp->p;
    const int64_t no = p->B * p->S * p->Hq * p->Dv, nl = p->B * p->Hq * p->S;
    const size_t es = smattn_dtype_size(g->vt);
    void *do32 = xcalloc((size_t)no, es), *dl32 = NULL;
    smattn_grad_inputs gin = g->gin;
    for (int64_t e = 0; e < no; e++) /* exact: drawn as values of g->vt */
        smattn_store(do32, g->vt, e, g->dout[e]);
    gin.dout.data = do32, gin.dout.dtype = g->vt;
    if (g->dlse) {
        dl32 = xcalloc((size_t)nl, es);
        for (int64_t e = 0; e < nl; e++)
            smattn_store(dl32, g->vt, e, g->dlse[e]);
        gin.dlse.data = dl32, gin.dlse.dtype = g->vt;
    }
    float *a[5], *b[5];
    double *bd[5];
    for (int k = 0; k < nout; k++) {
        a[k] = xcalloc((size_t)g->n[k], sizeof(float));
        b[k] = xcalloc((size_t)g->n[k], sizeof(float));
        bd[k] = xcalloc((size_t)g->n[k], sizeof(double));
    }
    const char *isas[3];
    const int nisa = fuzz_full_mode() > 0 ? fuzz_isa_list(isas) : 1;
    if (nisa == 1)
        isas[0] = fuzz_pick_isa(fp->seed);
    int bounded = 0;
    char d[320];
    for (int x = 0; x < nisa; x++) {
        const char *isa = isas[x];
        smattn_status s = fast_run(fp, g, &gin, isa, 1, a, 0x5a);
        if (s == SMATTN_ERR_UNSUPPORTED && !fast_may_refuse(fp, &gin)) {
            snprintf(d, sizeof d,
                     "smattn_attention_backward (isa %s): SMATTN_ERR_UNSUPPORTED on "
                     "finite binary32 inputs (smattn.h: it takes them)",
                     isa);
            fail(fp, "fast backward status", d);
        }
        if (s == SMATTN_ERR_UNSUPPORTED)
            continue;
        if (s != SMATTN_OK) {
            snprintf(d, sizeof d, "smattn_attention_backward (isa %s): %s on a valid problem", isa,
                     smattn_status_name(s));
            fail(fp, "fast backward status", d);
        }
        if (!bounded++) {
            smattn_backward_precision pm = smattn_opt_backward_precision(p);
            pm.o_dtype = pm.lse_dtype = SMATTN_F32; /* what its own forward stored (saved NULL) */
            smattn_grad_outputs fmt, bo;
            memset(&fmt, 0, sizeof fmt);
            memset(&bo, 0, sizeof bo);
            fmt.dq.dtype = fmt.dk.dtype = fmt.dv.dtype = fmt.dbias.dtype = fmt.dsinks.dtype =
                SMATTN_F32;
            smattn_out_tensor *bs[5] = {&bo.dq, &bo.dk, &bo.dv, &bo.dbias, &bo.dsinks};
            const smattn_out_tensor *like[5] = {&g->go.dq, &g->go.dk, &g->go.dv, &g->go.dbias,
                                                &g->go.dsinks};
            for (int k = 0; k < nout; k++) {
                if (k == 3 && !has_db)
                    continue;
                *bs[k] = (smattn_out_tensor){bd[k], SMATTN_F64, {0}};
                memcpy(bs[k]->stride, like[k]->stride, sizeof bs[k]->stride);
            }
            s = smattn_backward_bound(p, &fp->in, &gin, &pm, &fmt, &bo);
            if (s != SMATTN_OK) {
                snprintf(d, sizeof d, "smattn_backward_bound: %s", smattn_status_name(s));
                fail(fp, "fast backward bound", d);
            }
        }
        for (int k = 0; k < nout; k++)
            for (int64_t e = 0; e < g->n[k] && (k != 3 || has_db); e++) {
                const double got = (double)a[k][e], ex = gat(g, k, e);
                if (isfinite(ex) && isinf(bd[k][e]))
                    continue; /* out of contract (SPEC 6.8): binary32 may overflow, even to NaN */
                const double r = smattn_error_ratio(got, ex, bd[k][e]);
                if (r > 1) {
                    snprintf(d, sizeof d, "%s[%lld]: fast %a, exact %a, bound %a, ratio %g (isa "
                             "%s, 1 thread)", names[k], (long long)e, got, ex, bd[k][e], r, isa);
                    fail(fp, "fast backward within the bound (SPEC 10.7)", d);
                }
            }
        s = fast_run(fp, g, &gin, isa, 3, b, 0xa5);
        if (s != SMATTN_OK) {
            snprintf(d, sizeof d, "smattn_attention_backward (isa %s): %s with 3 threads, "
                     "SMATTN_OK with 1", isa, smattn_status_name(s));
            fail(fp, "fast backward status", d);
        }
        for (int k = 0; k < nout; k++)
            for (int64_t e = 0; e < g->n[k] && (k != 3 || has_db); e++)
                if (memcmp(&a[k][e], &b[k][e], sizeof(float))) {
                    snprintf(d, sizeof d, "%s[%lld]: %a with 1 thread, %a with 3 (isa %s)",
                             names[k], (long long)e, (double)a[k][e], (double)b[k][e], isa);
                    fail(fp, "fast backward, the same bits at 1 and 3 threads", d);
                }
    }
    for (int k = 0; k < nout; k++)
        free(a[k]), free(b[k]), free(bd[k]);
    free(do32), free(dl32);
}

/* The fast backward on the layout twin (SPEC 10.8): the dense run's bits (1 thread, its dO
 * and dLSE 0 at a packed batch's padding rows: dgin) in dSinks, at every stored row and key
 * t < T_b, and +0 in the storage no stored row or key reaches; the layout run on the decoded thread
 * count, dO and dLSE in O's and LSE's storage (lgin, nl elements of dLSE), the gradients in
 * Q's, K's and V's (n elements, strides st); dK and dV not compared when `nan` padding rows
 * poison the dense run only (nan_pad). The ISA the seed picks; binary32 throughout. */
static void check_fast_layout(const fuzz_problem *fp, const fuzz_layout *fl,
                              const smattn_grad_inputs *dgin, const smattn_grad_inputs *lgin,
                              int64_t nlo, int64_t nll, const int64_t n[3],
                              const int64_t st[3][4], int nan_pad)
{
    const smattn_problem *p = &fp->p, *lp = &fl->p;
    const int64_t B = p->B, S = p->S, T = p->T, Hq = p->Hq, Hkv = p->Hkv, D = p->D, Dv = p->Dv;
    const int64_t dn[3] = {B * S * Hq * D, B * T * Hkv * D, B * T * Hkv * Dv};
    const char *isa = fuzz_pick_isa(fp->seed);
    smattn_grad_inputs dg = *dgin, lg = *lgin;
    float *f[4] = {f32_copy(dgin->dout.data, B * S * Hq * Dv),
                   dgin->dlse.data ? f32_copy(dgin->dlse.data, B * Hq * S) : NULL,
                   f32_copy(lgin->dout.data, nlo),
                   lgin->dlse.data ? f32_copy(lgin->dlse.data, nll) : NULL};
    dg.dout.data = f[0], dg.dlse.data = f[1], lg.dout.data = f[2], lg.dlse.data = f[3];
    dg.dout.dtype = dg.dlse.dtype = lg.dout.dtype = lg.dlse.dtype = SMATTN_F32;
    smattn_grad_outputs dgo, lgo;
    memset(&dgo, 0, sizeof dgo);
    memset(&lgo, 0, sizeof lgo);
    smattn_out_tensor *ds[3] = {&dgo.dq, &dgo.dk, &dgo.dv}, *ls[3] = {&lgo.dq, &lgo.dk, &lgo.dv};
    const char roles[3] = {'q', 'k', 'v'};
    float *dbuf[3], *lbuf[3];
    for (int k = 0; k < 3; k++) {
        dbuf[k] = xcalloc((size_t)dn[k], sizeof(float));
        lbuf[k] = xcalloc((size_t)n[k], sizeof(float));
        memset(lbuf[k], 0x5a, (size_t)n[k] * sizeof(float)); /* unwritten: seen */
        *ds[k] = (smattn_out_tensor){dbuf[k], SMATTN_F32, {0}};
        smattn_problem q = *p;
        if (smattn_contiguous_strides(&q, roles[k], ds[k]->stride))
            abort();
        *ls[k] = (smattn_out_tensor){lbuf[k], SMATTN_F32, {st[k][0], st[k][1], st[k][2], st[k][3]}};
    }
    /* dSinks [Hq] of both runs, asked for with or without sinks; unwritten: seen */
    float *dsd = xcalloc((size_t)Hq, sizeof(float)), *dsl = xcalloc((size_t)Hq, sizeof(float));
    memset(dsd, 0xa5, (size_t)Hq * sizeof(float));
    memset(dsl, 0x5a, (size_t)Hq * sizeof(float));
    dgo.dsinks = (smattn_out_tensor){dsd, SMATTN_F32, {1, 0, 0, 0}};
    lgo.dsinks = (smattn_out_tensor){dsl, SMATTN_F32, {1, 0, 0, 0}};
    smattn_opt_config c1 = {1, isa}, cn = {fp->threads, isa};
    const smattn_status sd = smattn_attention_backward(p, &fp->in, NULL, &dg, &dgo, &c1);
    char d[240];
    if (sd == SMATTN_OK) {
        const smattn_status sl = smattn_attention_backward(lp, &fl->in, NULL, &lg, &lgo, &cn);
        if (sl != SMATTN_OK) {
            snprintf(d, sizeof d, "smattn_attention_backward on the layout twin (isa %s): %s, "
                     "SMATTN_OK on the dense problem", isa, smattn_status_name(sl));
            fail(fp, "fast backward, layout twin", d);
        }
        for (int64_t h = 0; h < Hq; h++)
            if (memcmp(&dsl[h], &dsd[h], sizeof(float))) {
                snprintf(d, sizeof d, "dSinks[%lld]: layout %a, dense %a (isa %s)", (long long)h,
                         (double)dsl[h], (double)dsd[h], isa);
                fail(fp, "fast backward, layout twin: the dense problem's bits", d);
            }
        unsigned char *seen[3];
        for (int k = 0; k < 3; k++)
            seen[k] = xcalloc((size_t)n[k], 1);
        for (int64_t b = 0; b < B; b++) {
            for (int64_t i = 0; i < S; i++)
                for (int64_t h = 0; h < Hq && smattn__row_stored(lp, b, i); h++)
                    for (int64_t c = 0; c < D; c++) {
                        const int64_t o = smattn__row_off(lp, ls[0]->stride, b, i, h, c);
                        const int64_t x = ((b * S + i) * Hq + h) * D + c;
                        seen[0][o] = 1;
                        if (memcmp(&lbuf[0][o], &dbuf[0][x], sizeof(float))) {
                            snprintf(d, sizeof d, "dQ[b=%lld,i=%lld,h=%lld,%lld]: layout %a, dense "
                                     "%a (isa %s)", (long long)b, (long long)i, (long long)h,
                                     (long long)c, (double)lbuf[0][o], (double)dbuf[0][x], isa);
                            fail(fp, "fast backward, layout twin: the dense problem's bits", d);
                        }
                    }
            const int64_t Tb = smattn__kv_len(lp, b); /* the keys stored for b */
            for (int64_t t = 0; t < Tb; t++)
                for (int64_t kv = 0; kv < Hkv; kv++)
                    for (int w = 1; w <= 2; w++)
                        for (int64_t c = 0; c < (w == 1 ? D : Dv); c++) {
                            const int64_t W = w == 1 ? D : Dv;
                            const int64_t o = smattn__key_off(lp, ls[w]->stride, b, t, kv, c);
                            const int64_t x = ((b * T + t) * Hkv + kv) * W + c;
                            seen[w][o] = 1;
                            if (!nan_pad && memcmp(&lbuf[w][o], &dbuf[w][x], sizeof(float))) {
                                snprintf(d, sizeof d, "d%c[b=%lld,t=%lld,g=%lld,%lld]: layout %a, "
                                         "dense %a (isa %s)", w == 1 ? 'K' : 'V', (long long)b,
                                         (long long)t, (long long)kv, (long long)c,
                                         (double)lbuf[w][o], (double)dbuf[w][x], isa);
                                fail(fp, "fast backward, layout twin: the dense problem's bits", d);
                            }
                        }
        }
        for (int k = 0; k < 3; k++) {
            for (int64_t o = 0; o < n[k]; o++)
                if (!seen[k][o] && !pos_zero((double)lbuf[k][o])) {
                    snprintf(d, sizeof d, "%s storage element %lld = %a, reached by no stored row "
                             "or key: want +0 (isa %s)", k == 0 ? "dQ" : k == 1 ? "dK" : "dV",
                             (long long)o, (double)lbuf[k][o], isa);
                    fail(fp, "fast backward, layout twin: storage no key reaches", d);
                }
            free(seen[k]);
        }
    }
    for (int k = 0; k < 3; k++)
        free(dbuf[k]), free(lbuf[k]);
    for (int k = 0; k < 4; k++)
        free(f[k]);
    free(dsd), free(dsl);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    fuzz_provider dp;
    fuzz_provider_init(&dp, data, size);
    const uint32_t c0 = fuzz_take(&dp, 16), c1 = fuzz_take(&dp, 8), seed = fuzz_take_u32(&dp);
    fuzz_problem fp;
    if (fuzz_problem_decode(&fp, &dp))
        return 0;
    if (fuzz_problem_shrink(&fp, FUZZ_BACKWARD_MAX_P))
        return 0;
    if (fp.p.op == SMATTN_OP_ATTENTION && fuzz_problem_alibi(&fp)) /* ALiBi, from the seed */
        return 0;
    fuzz_layout fl;
    const int lay = fp.p.op == SMATTN_OP_ATTENTION ? fuzz_layout_draw(&fp, &fl) : 0;
    if (lay < 0)
        abort(); /* out of memory in the harness */
    grads g;
    memset(&g, 0, sizeof g);
    const smattn_dtype t = c0 & 2 ? SMATTN_F32 : SMATTN_F64;
    grads_alloc(&g, &fp.p, t);
    if (fp.p.alibi_mode == SMATTN_ALIBI_MASK) /* its dBias is not defined (SPEC 10.1) */
        g.go.dbias.data = NULL;
    grads_inputs(&g, &fp.p, seed, c0 & 1, (c0 & 4) != 0, fuzz_grad_dtype(c0, seed));
    if (fp.p.op != SMATTN_OP_ATTENTION) { /* the softmax op has no backward (SPEC 10.4) */
        smattn_status s = smattn_ref_backward(&fp.p, &fp.in, &g.gin, &g.go, NULL, NULL);
        if (s != SMATTN_ERR_UNSUPPORTED)
            fail(&fp, "softmax", smattn_status_name(s));
    } else {
        check_validation(&fp, &g, (int)c1);
        if (!run(&fp, &fp.p, &fp.in, &g, 1, "oracle status")) {
            check_masked(&fp, &g);
            check_finite(&fp, &g);
            check_gqa(&fp, &g);
            const int fast = t == SMATTN_F64 && !(c0 & 8);
            if (fast) /* binary64 gradients of binary32 dO, dLSE */
                check_fast(&fp, &g);
            if (c1 == 5 && g.go.dbias.data) /* the planted summing stride's valid twin */
                check_dbias_sums(&fp, &g);
            if (lay)
                check_layout_twin(&fp, &fl, &g, fast);
        }
    }
    if (lay)
        fuzz_layout_free(&fl);
    grads_free(&g);
    fuzz_problem_free(&fp);
    return 0;
}
