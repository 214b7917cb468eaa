/* SPDX-License-Identifier: MIT */
/* fuzz_decode_prefill.c: a causal prefill against the decode steps that produce the same
 * rows. From the decoded problem (attention; cut to FUZZ_DP_MAX_P elements of the prefill's
 * P) it builds a prefill, S = T = Tp, causal, with the decoded window, softcap, bias, mask,
 * sinks and conventions (Q rows repeat the decoded ones), and for every row t:
 *  - decode: S = 1, the first t + 1 keys, lower-right causal (the KV-cache convention,
 *    diagonal t, so windows sit where they sat in the prefill), bias and mask row t;
 *  - cache: the same query against all Tp keys with kv_lens = t + 1 and NaN/inf in the
 *    cache slots beyond it (SPEC 3.6: never read).
 * The oracle's O, LSE and P of prefill row t, of decode and of cache must be the same bits
 * (P over keys 0..t; P of the cache beyond t is +0) -- except for an empty row under the
 * mean convention, whose keys are [0, T_b) and so differ between prefill and decode. The
 * kernel (one ISA chosen by the seed, the decoded thread count) must be within the SPEC 6
 * bound of the oracle on all three. Any failure is a MISMATCH report and abort(). */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "fuzz/common/fuzz_check.h"
#include "smattn.h"

#define TARGET "fuzz_decode_prefill"

/* dst (contiguous, dims dn) gathers src: along axis k, index x reads source index map[k][x]
 * (map[k] NULL: the identity) with source strides ss. */
static void *gather(const void *src, smattn_dtype t, const int64_t ss[4], const int64_t dn[4],
                    const int64_t *const map[4])
{
    size_t es = smattn_dtype_size(t), cnt = (size_t)(dn[0] * dn[1] * dn[2] * dn[3]);
    unsigned char *d = malloc(cnt ? cnt * es : 1);
    if (!d)
        abort();
    const unsigned char *s = src;
    size_t k = 0;
    int64_t x[4];
    for (x[0] = 0; x[0] < dn[0]; x[0]++)
        for (x[1] = 0; x[1] < dn[1]; x[1]++)
            for (x[2] = 0; x[2] < dn[2]; x[2]++)
                for (x[3] = 0; x[3] < dn[3]; x[3]++, k++) {
                    int64_t off = 0;
                    for (int a = 0; a < 4; a++)
                        off += (map[a] ? map[a][x[a]] : x[a]) * ss[a];
                    memcpy(d + k * es, s + (size_t)off * es, es);
                }
    return d;
}

/* A derived problem: owns q, k, v, bias, mask; shares sinks with the decoded one. */
static void derived_free(fuzz_problem *d)
{
    free(d->q), free(d->k), free(d->v), free(d->bias), free(d->mask);
}

/* Fill the strides and counts of a derived problem whose buffers are contiguous. */
static void derived_layout(fuzz_problem *d)
{
    smattn_problem *p = &d->p;
    smattn_inputs *in = &d->in;
    in->q.data = d->q, in->k.data = d->k, in->v.data = d->v;
    smattn_contiguous_strides(p, 'q', in->q.stride);
    smattn_contiguous_strides(p, 'k', in->k.stride);
    smattn_contiguous_strides(p, 'v', in->v.stride);
    d->nq = (size_t)(p->B * p->S * p->Hq * p->D);
    d->nk = (size_t)(p->B * p->T * p->Hkv * p->D);
    d->nv = (size_t)(p->B * p->T * p->Hkv * p->Dv);
    if (d->bias_kind) {
        int64_t H = d->bias_kind == 1 ? 1 : p->Hq;
        d->nbias = (size_t)(p->B * H * p->S * p->T);
        in->bias = (smattn_tensor){d->bias, SMATTN_F32,
                                   {H * p->S * p->T, d->bias_kind == 1 ? 0 : p->S * p->T, p->T, 1}};
    }
    if (d->mask_kind) {
        int64_t Sm = d->mask_kind == 1 ? 1 : p->S;
        d->nmask = (size_t)(p->B * p->Hq * Sm * p->T);
        in->mask = (smattn_tensor){d->mask, SMATTN_BOOL,
                                   {p->Hq * Sm * p->T, Sm * p->T, d->mask_kind == 1 ? 0 : p->T, 1}};
    }
}

/* The prefill `base` narrowed to query row rowmap[0] against keys [0, nkeys), S = 1. */
static fuzz_problem derive(const fuzz_problem *base, const int64_t rowmap[1], int64_t nkeys)
{
    const smattn_problem *bp = &base->p;
    fuzz_problem d = *base;
    d.q = d.k = d.v = NULL, d.bias = NULL, d.mask = NULL;
    d.nbias = d.nmask = 0;
    d.p.S = 1, d.p.T = nkeys, d.p.q_lens = d.p.kv_lens = NULL;
    d.p.causal = SMATTN_CAUSAL_LOWER_RIGHT; /* diagonal 0 + T_b - 1 = t, as in the prefill */
    d.shape_class = FUZZ_DECODE;
    const int64_t *none[4] = {NULL, NULL, NULL, NULL};
    const int64_t *rowsel[4] = {NULL, rowmap, NULL, NULL};
    const int64_t *brow[4] = {NULL, NULL, rowmap, NULL};
    d.q = gather(base->q, SMATTN_F32, base->in.q.stride, (int64_t[4]){bp->B, 1, bp->Hq, bp->D}, rowsel);
    d.k = gather(base->k, base->in.k.dtype, base->in.k.stride,
                 (int64_t[4]){bp->B, nkeys, bp->Hkv, bp->D}, none);
    d.v = gather(base->v, base->in.v.dtype, base->in.v.stride,
                 (int64_t[4]){bp->B, nkeys, bp->Hkv, bp->Dv}, none);
    if (d.bias_kind)
        d.bias = gather(base->bias, SMATTN_F32, base->in.bias.stride,
                        (int64_t[4]){bp->B, d.bias_kind == 1 ? 1 : bp->Hq, 1, nkeys}, brow);
    if (d.mask_kind) /* a broadcast mask [B,Hq,1,T] has stride 0 on rows: any row is row 0 */
        d.mask = gather(base->mask, SMATTN_BOOL, base->in.mask.stride,
                        (int64_t[4]){bp->B, bp->Hq, 1, nkeys}, brow);
    derived_layout(&d);
    return d;
}

/* Row t of the prefill has no visible key and no sink (SPEC 3.4). */
static int row_empty(const fuzz_problem *pf, int64_t b, int64_t h, int64_t t)
{
    const smattn_inputs *in = &pf->in;
    if (in->sinks.data && smattn_load(in->sinks.data, SMATTN_F32, h) != -HUGE_VAL)
        return 0;
    for (int64_t j = 0; j < pf->p.T; j++)
        if (smattn_visible(&pf->p, in, b, h, t, j) &&
            !(in->bias.data && smattn_load(in->bias.data, SMATTN_F32,
                                           b * in->bias.stride[0] + h * in->bias.stride[1] +
                                               t * in->bias.stride[2] + j) == -HUGE_VAL))
            return 0;
    return 1;
}

/* The oracle's pairs of row t: kind 0 prefill against decode, 1 decode against cache, 2 the
 * cache's P beyond kv_lens (a = 0). Bit for bit; the report names the prefill's element. */
static void same_value(const fuzz_problem *pf, int64_t t, int kind, const char *tname, size_t idx,
                       double a, double b)
{
    if (memcmp(&a, &b, sizeof a) == 0)
        return;
    static const char *const what[] = {"prefill row against the decode step",
                                       "decode step against the cache (kv_lens)",
                                       "cache step, P beyond kv_lens"};
    static const char *const names[][2] = {{"prefill", "decode"}, {"decode", "cache"}, {"zero", "cache"}};
    char w[128];
    snprintf(w, sizeof w, "oracle: %s (row %lld)", what[kind], (long long)t);
    fuzz_mismatch_head(TARGET, pf, w);
    fprintf(stderr, "index: %s[%zu] of the prefill\nvalues: %s %a %s %a\n", tname, idx,
            names[kind][0], a, names[kind][1], b);
    abort();
}

/* Prefill a, decode d, cache c of one element: a = d (unless skipped) and d = c. */
static void same_three(const fuzz_problem *pf, int64_t t, const char *tname, size_t idx, double a,
                       double d, double c, int skip_prefill)
{
    if (!skip_prefill)
        same_value(pf, t, 0, tname, idx, a, d);
    same_value(pf, t, 1, tname, idx, d, c);
}

/* The kernel within the bound on a derived problem. */
static void kernel_check(const fuzz_problem *d, const fuzz_outputs *ref, const fuzz_outputs *bnd,
                         const char *isa, const char *name)
{
    char what[128];
    fuzz_outputs ko;
    snprintf(what, sizeof what, "kernel status (%s, isa %s, threads %d)", name, isa, d->threads);
    fuzz_require_ok(TARGET, d, fuzz_run_opt(&d->p, &d->in, isa, d->threads, &ko), what);
    snprintf(what, sizeof what, "bound (%s, isa %s, threads %d)", name, isa, d->threads);
    fuzz_check_bound(TARGET, d, &ko, ref, bnd, what);
    fuzz_outputs_free(&ko);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    fuzz_problem fp;
    if (fuzz_problem_decode_bytes(&fp, data, size))
        return 0;
    if (fp.p.op != SMATTN_OP_ATTENTION || fuzz_problem_shrink(&fp, FUZZ_DP_MAX_P)) {
        fuzz_problem_free(&fp);
        return 0;
    }
    const smattn_problem *p0 = &fp.p;
    int64_t Tp = p0->T;
    while (Tp > 1 && p0->B * p0->Hq * Tp * Tp > FUZZ_DP_MAX_P)
        Tp--;

    /* the prefill: Q rows repeat the decoded ones; K, V the first Tp keys */
    fuzz_problem pf = fp;
    pf.p.S = pf.p.T = Tp;
    pf.p.kv_lens = pf.p.q_lens = NULL;
    pf.p.causal = p0->causal == SMATTN_CAUSAL_UPPER_LEFT ? SMATTN_CAUSAL_UPPER_LEFT
                                                          : SMATTN_CAUSAL_LOWER_RIGHT;
    pf.shape_class = FUZZ_PREFILL;
    int64_t *qrow = malloc((size_t)Tp * sizeof *qrow);
    if (!qrow)
        abort();
    for (int64_t i = 0; i < Tp; i++)
        qrow[i] = i % p0->S;
    const int64_t *none[4] = {NULL, NULL, NULL, NULL};
    const int64_t *qsel[4] = {NULL, qrow, NULL, NULL};
    const int64_t *bsel[4] = {NULL, NULL, qrow, NULL};
    pf.q = gather(fp.q, SMATTN_F32, fp.in.q.stride, (int64_t[4]){p0->B, Tp, p0->Hq, p0->D}, qsel);
    pf.k = gather(fp.k, fp.in.k.dtype, fp.in.k.stride, (int64_t[4]){p0->B, Tp, p0->Hkv, p0->D}, none);
    pf.v = gather(fp.v, fp.in.v.dtype, fp.in.v.stride, (int64_t[4]){p0->B, Tp, p0->Hkv, p0->Dv}, none);
    pf.bias = fp.bias_kind ? gather(fp.bias, SMATTN_F32, fp.in.bias.stride,
                                    (int64_t[4]){p0->B, fp.bias_kind == 1 ? 1 : p0->Hq, Tp, Tp}, bsel)
                           : NULL;
    pf.mask = fp.mask_kind == 1 ? gather(fp.mask, SMATTN_BOOL, fp.in.mask.stride,
                                         (int64_t[4]){p0->B, p0->Hq, 1, Tp}, none)
              : fp.mask_kind == 2 ? gather(fp.mask, SMATTN_BOOL, fp.in.mask.stride,
                                           (int64_t[4]){p0->B, p0->Hq, Tp, Tp}, bsel)
                                  : NULL;
    derived_layout(&pf);
    free(qrow);

    const char *isa = fuzz_pick_isa(fp.seed);
    fuzz_outputs rp, bp;
    if (fuzz_oracle_and_bound(TARGET, &pf, &rp, &bp))
        goto done;
    kernel_check(&pf, &rp, &bp, isa, "prefill");
    const smattn_problem *p = &pf.p;
    for (int64_t t = 0; t < Tp; t++) {
        int64_t row[1] = {t};
        fuzz_problem dec = derive(&pf, row, t + 1);
        fuzz_problem cache = derive(&pf, row, Tp);
        cache.kv_lens[0] = cache.kv_lens[1] = t + 1;
        cache.p.kv_lens = cache.kv_lens;
        for (int64_t b = 0; b < p->B; b++) /* slots beyond t + 1 are never read (SPEC 3.6) */
            for (int64_t j = t + 1; j < Tp; j++)
                for (int64_t g = 0; g < p->Hkv; g++) {
                    int64_t e = (b * Tp + j) * p->Hkv + g;
                    for (int64_t d = 0; d < p->D; d++)
                        smattn_store(cache.k, cache.in.k.dtype, e * p->D + d, (d + j) % 2 ? (double)NAN : HUGE_VAL);
                    for (int64_t d = 0; d < p->Dv; d++)
                        smattn_store(cache.v, cache.in.v.dtype, e * p->Dv + d, (d + j) % 2 ? -HUGE_VAL : (double)NAN);
                }
        fuzz_outputs rd, bd, rc, bc;
        if (fuzz_oracle_and_bound(TARGET, &dec, &rd, &bd)) {
            derived_free(&dec), derived_free(&cache);
            continue;
        }
        if (fuzz_oracle_and_bound(TARGET, &cache, &rc, &bc)) {
            fuzz_outputs_free(&rd), fuzz_outputs_free(&bd);
            derived_free(&dec), derived_free(&cache);
            continue;
        }
        for (int64_t b = 0; b < p->B; b++)
            for (int64_t h = 0; h < p->Hq; h++) {
                int skip_prefill = p->empty_rows == SMATTN_EMPTY_MEAN && row_empty(&pf, b, h, t);
                size_t lp = (size_t)((b * p->Hq + h) * Tp + t), ld = (size_t)(b * p->Hq + h);
                const double *Lp = rp.buf[1], *Ld = rd.buf[1], *Lc = rc.buf[1];
                const double *Pp = rp.buf[2], *Pd = rd.buf[2], *Pc = rc.buf[2];
                const double *Op = rp.buf[0], *Od = rd.buf[0], *Oc = rc.buf[0];
                same_three(&pf, t, "LSE", lp, Lp[lp], Ld[ld], Lc[ld], skip_prefill);
                for (int64_t j = 0; j < Tp; j++) {
                    size_t ip = lp * (size_t)Tp + (size_t)j;
                    double pc = Pc[ld * (size_t)Tp + (size_t)j];
                    if (j <= t)
                        same_three(&pf, t, "P", ip, Pp[ip], Pd[ld * (size_t)(t + 1) + (size_t)j], pc,
                                   skip_prefill);
                    else if (p->empty_rows != SMATTN_EMPTY_NAN || !isnan(pc))
                        same_value(&pf, t, 2, "P", ip, 0.0, pc);
                }
                for (int64_t c = 0; c < p->Dv; c++) {
                    size_t op = (size_t)(((b * Tp + t) * p->Hq + h) * p->Dv + c);
                    size_t od = (size_t)((b * p->Hq + h) * p->Dv + c);
                    same_three(&pf, t, "O", op, Op[op], Od[od], Oc[od], skip_prefill);
                }
            }
        kernel_check(&dec, &rd, &bd, isa, "decode step");
        kernel_check(&cache, &rc, &bc, isa, "cache step");
        fuzz_outputs_free(&rd), fuzz_outputs_free(&bd), fuzz_outputs_free(&rc), fuzz_outputs_free(&bc);
        derived_free(&dec), derived_free(&cache);
    }
    fuzz_outputs_free(&rp), fuzz_outputs_free(&bp);
done:
    derived_free(&pf);
    fuzz_problem_free(&fp);
    return 0;
}
