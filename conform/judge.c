/* SPDX-License-Identifier: MIT */
/* judge.c: a kernel's outputs against the exact oracle (smattn_ref, with the conventions
 * the kernel claims) under the SPEC 6 bound of its precision model (smattn_bound): the max
 * error/bound ratio and ulp error, and, for a failure, one sentence naming what was
 * violated (an empty-row convention, a -inf sink taken as a term, a masked key with weight,
 * the causal alignment, another scale, a NaN where the spec has a number, with a leak hint
 * when a slot the row must not read holds NaN/inf). Elements with a finite exact value but
 * bound +inf (rows out of contract, SPEC 6.8) are counted and not judged by size; they are
 * held to what any kernel can meet there (O in the hull of the visible V rows, LSE not
 * NaN, P in [0, 1]). */
#include <float.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "conform/conform.h"
#include "core/internal.h"

static const char out_roles[3] = {'o', 'l', 'p'};

static const char *empty_name(smattn_empty e)
{
    return e == SMATTN_EMPTY_NAN ? "nan" : e == SMATTN_EMPTY_MEAN ? "mean" : "zero";
}

static const char *empty_lse_name(smattn_empty_lse e)
{
    return e == SMATTN_LSE_POS_INF ? "pos_inf" : e == SMATTN_LSE_ZERO ? "zero" : "neg_inf";
}

static double load4(const smattn_tensor *t, int64_t a, int64_t b, int64_t c, int64_t d)
{
    return smattn_load(t->data, t->dtype,
                       a * t->stride[0] + b * t->stride[1] + c * t->stride[2] + d * t->stride[3]);
}

/* The rows judged: every row (list NULL), or the list of a sampled check (--rows) with its
 * membership by row index (b Hq + h) S + i; no_ol (NULL: none) marks the rows whose O and
 * LSE are not judged, a layout twin's rows without storage (P keeps them: SPEC 2.7). */
typedef struct row_set {
    const int64_t *list;
    int64_t n;
    const unsigned char *in;
    const unsigned char *no_ol;
} row_set;

/* The row (b Hq + h) S + i of element e of output t (0 O, 1 LSE, 2 P; SPEC 2.1 layouts). */
static int64_t elem_row(const smattn_problem *p, int t, int64_t e)
{
    if (t == 0) { /* O [B,S,Hq,Dv] */
        int64_t r = e / p->Dv, h = r % p->Hq, bi = r / p->Hq;
        return ((bi / p->S) * p->Hq + h) * p->S + bi % p->S;
    }
    return t == 1 ? e : e / p->T; /* LSE [B,Hq,S], P [B,Hq,S,T] */
}

static int judged(const row_set *rs, const smattn_problem *p, int t, int64_t e)
{
    if (!rs)
        return 1;
    const int64_t row = elem_row(p, t, e);
    return (!rs->in || rs->in[row]) && !(t < 2 && rs->no_ol && rs->no_ol[row]);
}

/* The oracle and the bound on the rows of rs. */
static smattn_status ref_on(const smattn_problem *p, const smattn_inputs *in,
                            const smattn_outputs *out, const smattn_ref_config *cfg,
                            const row_set *rs)
{
    if (!rs || !rs->list)
        return smattn_ref(p, in, out, cfg, NULL);
    /* a sample of a large problem: its rows are long, so on every core (the bits do not
     * depend on the thread count) */
    smattn_ref_config all = *cfg;
    all.threads = 0;
    return smattn__ref_rows(p, in, out, &all, NULL, rs->list, rs->n);
}

static smattn_status bound_on(const smattn_problem *p, const smattn_inputs *in,
                              const smattn_precision *pm, const smattn_outputs *fmt,
                              const smattn_outputs *bnd, unsigned flags, const row_set *rs)
{
    return rs && rs->list ? smattn__bound_rows(p, in, pm, fmt, bnd, flags, rs->list, rs->n)
                          : smattn__bound_flags(p, in, pm, fmt, bnd, flags);
}

/* Why key j is hidden from row (b, h, i), or NULL if it is visible. */
static const char *hidden_by(const smattn_problem *p, const smattn_inputs *in, int64_t b, int64_t h,
                             int64_t i, int64_t j, char *buf, size_t cap)
{
    int64_t Tb = p->kv_lens ? p->kv_lens[b] : p->T, Sb = p->q_lens ? p->q_lens[b] : p->S;
    if (i >= Sb) {
        snprintf(buf, cap, "q_lens (row %lld is padding, q_lens[%lld] = %lld)", (long long)i,
                 (long long)b, (long long)Sb);
        return buf;
    }
    if (j >= Tb) {
        snprintf(buf, cap, "kv_lens (key %lld is padding, kv_lens[%lld] = %lld)", (long long)j,
                 (long long)b, (long long)Tb);
        return buf;
    }
    if (smattn_visible(p, in, b, h, i, j)) {
        if (in->bias.data && load4(&in->bias, b, h, i, j) == -HUGE_VAL)
            return "a -inf bias";
        if (p->op == SMATTN_OP_SOFTMAX && load4(&in->x, b, h, i, j) == -HUGE_VAL)
            return "x = -inf";
        return NULL;
    }
    smattn_problem q = *p;
    q.causal = SMATTN_CAUSAL_NONE;
    if (p->causal != SMATTN_CAUSAL_NONE && smattn_visible(&q, in, b, h, i, j)) {
        int64_t d = p->causal == SMATTN_CAUSAL_UPPER_LEFT ? i : i + Tb - Sb;
        snprintf(buf, cap, "the causal mask (%s: key %lld > diagonal %lld)",
                 p->causal == SMATTN_CAUSAL_UPPER_LEFT ? "upper_left" : "lower_right", (long long)j,
                 (long long)d);
        return buf;
    }
    q.window_left = q.window_right = -1;
    if (smattn_visible(&q, in, b, h, i, j))
        return "the sliding window";
    return "the bool mask";
}

/* Keys row (b, h, i) sees, and whether it has a sink (SPEC 3.4). */
static int64_t row_keys(const smattn_problem *p, const smattn_inputs *in, int64_t b, int64_t h,
                        int64_t i, int *sink)
{
    char buf[160];
    int64_t n = 0;
    for (int64_t j = 0; j < p->T; j++)
        n += hidden_by(p, in, b, h, i, j, buf, sizeof buf) == NULL;
    *sink = in->sinks.data && load4(&in->sinks, h, 0, 0, 0) != -HUGE_VAL;
    return n;
}

/* Does the Q row (b, i, h) hold a NaN or an infinity? */
static int q_row_dirty(const smattn_problem *p, const smattn_inputs *in, int64_t b, int64_t h,
                       int64_t i)
{
    for (int64_t d = 0; p->op == SMATTN_OP_ATTENTION && d < p->D; d++)
        if (!isfinite(load4(&in->q, b, i, h, d)))
            return 1;
    return 0;
}

/* Does what row (b, h, i) would read at key j (K and V of its KV head, the bias, X) hold a
 * NaN or an infinity? */
static int slot_dirty(const smattn_problem *p, const smattn_inputs *in, int64_t b, int64_t h,
                      int64_t i, int64_t j)
{
    if (in->bias.data && !isfinite(load4(&in->bias, b, h, i, j)))
        return 1;
    if (p->op == SMATTN_OP_SOFTMAX)
        return !isfinite(load4(&in->x, b, h, i, j));
    int64_t g = h / (p->Hq / p->Hkv);
    for (int64_t d = 0; d < p->D; d++)
        if (!isfinite(load4(&in->k, b, j, g, d)))
            return 1;
    for (int64_t d = 0; d < p->Dv; d++)
        if (!isfinite(load4(&in->v, b, j, g, d)))
            return 1;
    return 0;
}

/* Is the slot row (b, h, i) must not read at hidden key j non-finite: K or V of its KV
 * head, the bias or X there? A -inf bias or x that is itself what hides the key is the
 * mask, not garbage (SPEC 3.5): a kernel reads it to know the key is hidden. */
static int hidden_slot_dirty(const smattn_problem *p, const smattn_inputs *in, int64_t b,
                             int64_t h, int64_t i, int64_t j, const char *why)
{
    int self_hidden = !strcmp(why, "a -inf bias") || !strcmp(why, "x = -inf");
    if (in->bias.data) {
        double z = load4(&in->bias, b, h, i, j);
        if (!isfinite(z) && !(self_hidden && z == -HUGE_VAL))
            return 1;
    }
    if (p->op == SMATTN_OP_SOFTMAX) {
        double x = load4(&in->x, b, h, i, j);
        return !isfinite(x) && !(self_hidden && x == -HUGE_VAL);
    }
    int64_t g = h / (p->Hq / p->Hkv);
    for (int64_t d = 0; d < p->D; d++)
        if (!isfinite(load4(&in->k, b, j, g, d)))
            return 1;
    for (int64_t d = 0; d < p->Dv; d++)
        if (!isfinite(load4(&in->v, b, j, g, d)))
            return 1;
    return 0;
}

/* Could a NaN in row (b, h, i) come from a slot the row must not read: a hidden key whose
 * K, V, bias or X holds a NaN or an infinity, or, for a row that sees no key, its own Q
 * row? The leak hint is given on this evidence only, row by row: a case may hold
 * non-finite values that no hidden slot of this row holds (a visible infinite K, the
 * -inf entries that make a softmax row empty). */
static int row_leak_evidence(const smattn_problem *p, const smattn_inputs *in, int64_t b,
                             int64_t h, int64_t i)
{
    char buf[160];
    int64_t seen = 0;
    for (int64_t j = 0; j < p->T; j++) {
        const char *why = hidden_by(p, in, b, h, i, j, buf, sizeof buf);
        if (!why)
            seen++;
        else if (hidden_slot_dirty(p, in, b, h, i, j, why))
            return 1;
    }
    return seen == 0 && q_row_dirty(p, in, b, h, i);
}

/* Would the oracle of problem q read a non-finite value at a slot that the claimed problem
 * p hides (a key visible under q only, or the Q row of a row empty under p only)? Then a
 * kernel that "follows q" may only be reading garbage that q's oracle reads too (NaN
 * matches NaN): q is no explanation. */
static int alt_reads_garbage(const smattn_problem *p, const smattn_problem *q,
                             const smattn_inputs *in, const row_set *rs)
{
    char b1[160], b2[160];
    const int64_t rows = rs && rs->list ? rs->n : p->B * p->Hq * p->S;
    for (int64_t k = 0; k < rows; k++) {
                const int64_t row = rs && rs->list ? rs->list[k] : k;
                const int64_t b = row / (p->Hq * p->S), h = (row / p->S) % p->Hq, i = row % p->S;
                int64_t np = 0, nq = 0;
                for (int64_t j = 0; j < p->T; j++) {
                    int vp = hidden_by(p, in, b, h, i, j, b1, sizeof b1) == NULL;
                    int vq = hidden_by(q, in, b, h, i, j, b2, sizeof b2) == NULL;
                    np += vp, nq += vq;
                    if (vq && !vp && slot_dirty(p, in, b, h, i, j))
                        return 1;
                }
                if (np == 0 && nq > 0 && q_row_dirty(p, in, b, h, i))
                    return 1;
            }
    return 0;
}

/* Element e of output t as (b, h, i, col) and its text. */
static void locate(const smattn_problem *p, int t, int64_t e, int64_t ix[4], char *buf, size_t cap)
{
    if (t == 0) { /* O [B,S,Hq,Dv] */
        ix[3] = e % p->Dv, e /= p->Dv;
        ix[1] = e % p->Hq, e /= p->Hq;
        ix[2] = e % p->S, ix[0] = e / p->S;
        snprintf(buf, cap, "O[b=%lld,i=%lld,h=%lld,c=%lld]", (long long)ix[0], (long long)ix[2],
                 (long long)ix[1], (long long)ix[3]);
    } else if (t == 1) { /* LSE [B,Hq,S] */
        ix[3] = 0;
        ix[2] = e % p->S, e /= p->S;
        ix[1] = e % p->Hq, ix[0] = e / p->Hq;
        snprintf(buf, cap, "LSE[b=%lld,h=%lld,i=%lld]", (long long)ix[0], (long long)ix[1],
                 (long long)ix[2]);
    } else { /* P [B,Hq,S,T] */
        ix[3] = e % p->T, e /= p->T;
        ix[2] = e % p->S, e /= p->S;
        ix[1] = e % p->Hq, ix[0] = e / p->Hq;
        snprintf(buf, cap, "P[b=%lld,h=%lld,i=%lld,j=%lld]", (long long)ix[0], (long long)ix[1],
                 (long long)ix[2], (long long)ix[3]);
    }
}

static void fmt_value(double x, char *buf, size_t cap)
{
    if (isnan(x))
        snprintf(buf, cap, "NaN");
    else if (x == 0)
        snprintf(buf, cap, "%s0", signbit(x) ? "-" : "+");
    else
        snprintf(buf, cap, "%.9g", x);
}

/* Outputs in binary64 for the tensors present in `like`. */
static int alloc_f64(const smattn_problem *p, const smattn_outputs *like, smattn_outputs *o,
                     int64_t n[3])
{
    memset(o, 0, sizeof *o);
    const smattn_out_tensor *lt[3] = {&like->o, &like->lse, &like->p};
    smattn_out_tensor *ot[3] = {&o->o, &o->lse, &o->p};
    for (int t = 0; t < 3; t++) {
        if (!lt[t]->data)
            continue;
        ot[t]->data = calloc((size_t)(n[t] ? n[t] : 1), sizeof(double));
        if (!ot[t]->data)
            return -1;
        ot[t]->dtype = SMATTN_F64;
        smattn_contiguous_strides(p, out_roles[t], ot[t]->stride);
    }
    return 0;
}

static void free_f64(smattn_outputs *o)
{
    free(o->o.data);
    free(o->lse.data);
    free(o->p.data);
    memset(o, 0, sizeof *o);
}

/* The max error/bound ratio of got's O against problem q's oracle; +inf on any failure. */
static double ratio_under(const smattn_problem *q, const smattn_inputs *in,
                          const smattn_outputs *got, const smattn_precision *pm, unsigned flags,
                          int64_t nO, const row_set *rs)
{
    smattn_outputs only = {got->o, {0}, {0}}, ref, bnd;
    int64_t n[3] = {nO, 0, 0};
    double worst = HUGE_VAL;
    smattn_ref_config cfg = {1, 0, 0, 0};
    if (!alloc_f64(q, &only, &ref, n) && !alloc_f64(q, &only, &bnd, n) &&
        ref_on(q, in, &ref, &cfg, rs) == SMATTN_OK &&
        bound_on(q, in, pm, &only, &bnd, flags, rs) == SMATTN_OK) {
        worst = 0;
        for (int64_t e = 0; e < nO; e++) {
            if (!judged(rs, q, 0, e))
                continue;
            double r = smattn_error_ratio(smattn_load(got->o.data, got->o.dtype, e),
                                          ((double *)ref.o.data)[e], ((double *)bnd.o.data)[e]);
            worst = r > worst ? r : worst;
        }
    }
    free_f64(&ref);
    free_f64(&bnd);
    return worst;
}

/* The worst error/bound ratio of O and LSE (those the kernel wrote) under problem q with
 * inputs qin: the outputs "follow" q when it is <= 1. */
static double ratio_o_lse_under(const smattn_problem *q, const smattn_inputs *qin,
                                const smattn_outputs *got, const smattn_precision *pm,
                                unsigned flags, const row_set *rs)
{
    smattn_outputs only = {got->o, got->lse, {0}}, ref, bnd;
    int64_t n[3] = {got->o.data ? q->B * q->S * q->Hq * q->Dv : 0,
                    got->lse.data ? q->B * q->Hq * q->S : 0, 0};
    double worst = HUGE_VAL;
    smattn_ref_config cfg = {1, 0, 0, 0};
    if (!alloc_f64(q, &only, &ref, n) && !alloc_f64(q, &only, &bnd, n) &&
        ref_on(q, qin, &ref, &cfg, rs) == SMATTN_OK &&
        bound_on(q, qin, pm, &only, &bnd, flags, rs) == SMATTN_OK) {
        worst = 0;
        const smattn_out_tensor *gt[2] = {&got->o, &got->lse};
        const smattn_out_tensor *rt[2] = {&ref.o, &ref.lse}, *bt[2] = {&bnd.o, &bnd.lse};
        for (int t = 0; t < 2; t++)
            for (int64_t e = 0; e < n[t]; e++) {
                if (!judged(rs, q, t, e))
                    continue;
                double r = smattn_error_ratio(smattn_load(gt[t]->data, gt[t]->dtype, e),
                                              ((double *)rt[t]->data)[e],
                                              ((double *)bt[t]->data)[e]);
                worst = r > worst ? r : worst;
            }
    }
    free_f64(&ref);
    free_f64(&bnd);
    return worst;
}

/* ALiBi read another way (SPEC 2.8), for naming what a failing kernel did: kind 0 the slopes
 * negated, 1 and 2 every distance one further (|d| + 1) or one nearer (|d| - 1; the
 * one-sided mode: j - T_b + 2 and j - T_b), 3 the other mode (symmetric <-> one-sided; the
 * mask mode: the bias added as is, not times the slope). The alternative is the problem
 * without ALiBi and with a binary64 bias holding bias + term (its rounding is far below any
 * bound). 0 with *q, *qin and *buf (to free) set, -1 if out of memory. */
static int alibi_alt(const smattn_problem *p, const smattn_inputs *in, int kind,
                     smattn_problem *q, smattn_inputs *qin, double **buf, const char **what)
{
    static const char *const names[2][4] = {
        {"the slopes negated (+m |distance|)", "each distance one further",
         "each distance one nearer", "the other mode"},
        {"the slopes negated", "each distance one further (bias - 1)",
         "each distance one nearer (bias + 1)", "the bias added as is, not times the slope"}};
    const int mask = p->alibi_mode == SMATTN_ALIBI_MASK;
    *what = names[mask][kind];
    if (kind == 3 && !mask)
        *what = p->alibi_mode == SMATTN_ALIBI_SYMMETRIC
                    ? "the one-sided mode, m (j - T_b + 1) (vLLM's)"
                    : "the symmetric mode, -m |i + T_b - S_b - j| (FlashAttention's)";
    const int64_t n = p->B * p->Hq * p->S * p->T;
    double *bb = malloc((size_t)(n ? n : 1) * sizeof *bb);
    if (!bb)
        return -1;
    for (int64_t b = 0, k = 0; b < p->B; b++)
        for (int64_t h = 0; h < p->Hq; h++)
            for (int64_t i = 0; i < p->S; i++)
                for (int64_t j = 0; j < p->T; j++, k++) {
                    double x = in->bias.data ? load4(&in->bias, b, h, i, j) : 0.0;
                    double m = (double)smattn__alibi_slope(p, b, h);
                    if (!isfinite(x)) {
                        bb[k] = x;
                        continue;
                    }
                    if (mask) {
                        double v = kind == 1 ? x - 1 : kind == 2 ? x + 1 : x;
                        bb[k] = kind == 3 ? x : kind == 0 ? -m * x : m * v;
                        continue;
                    }
                    smattn_problem r = *p;
                    if (kind == 3)
                        r.alibi_mode = p->alibi_mode == SMATTN_ALIBI_SYMMETRIC
                                           ? SMATTN_ALIBI_ONE_SIDED
                                           : SMATTN_ALIBI_SYMMETRIC;
                    double d = (double)smattn__alibi_dist(&r, b, i, j);
                    if (kind == 1)
                        d -= 1; /* symmetric: -(|x| + 1); one-sided: j - T_b (one further) */
                    else if (kind == 2)
                        d = p->alibi_mode == SMATTN_ALIBI_SYMMETRIC ? -fabs(fabs(d) - 1) : d + 1;
                    bb[k] = x + (kind == 0 ? -m : m) * d;
                }
    *q = *p;
    q->alibi_mode = SMATTN_ALIBI_NONE;
    q->alibi_slopes = NULL;
    *qin = *in;
    qin->bias.data = bb;
    qin->bias.dtype = SMATTN_F64;
    smattn_contiguous_strides(q, 'b', qin->bias.stride);
    *buf = bb;
    return 0;
}

/* O of row (b, h, i) in binary64 under another scale: a cheap first test of a scale that
 * might explain the outputs, before the oracle confirms it. 0, or -1 when the row holds a
 * non-finite input or sees nothing (no cheap answer: the oracle decides). peak_lse (may be
 * NULL): the row's largest score (or sink) and its LSE. */
static int row_o_scaled(const smattn_problem *p, const smattn_inputs *in, double scale, int64_t b,
                        int64_t h, int64_t i, double *o, double peak_lse[2])
{
    char buf[160];
    int64_t g = h / (p->Hq / p->Hkv), n = 0;
    double *s = malloc((size_t)p->T * sizeof *s), m = -HUGE_VAL, zeta = -HUGE_VAL, l = 0;
    if (!s)
        return -1;
    if (in->sinks.data)
        zeta = load4(&in->sinks, h, 0, 0, 0);
    int ok = !isnan(zeta) && zeta != HUGE_VAL;
    m = zeta;
    for (int64_t j = 0; ok && j < p->T; j++) {
        s[j] = -HUGE_VAL;
        if (hidden_by(p, in, b, h, i, j, buf, sizeof buf))
            continue;
        double d = 0;
        for (int64_t c = 0; c < p->D; c++)
            d += load4(&in->q, b, i, h, c) * load4(&in->k, b, j, g, c);
        d *= scale;
        if (p->softcap > 0)
            d = p->softcap * tanh(d / p->softcap);
        if (in->bias.data)
            d += load4(&in->bias, b, h, i, j);
        ok = isfinite(d);
        s[j] = d, n++;
        m = d > m ? d : m;
    }
    ok = ok && (n > 0 || zeta > -HUGE_VAL);
    for (int64_t c = 0; ok && c < p->Dv; c++)
        o[c] = 0;
    for (int64_t j = 0; ok && j < p->T; j++) {
        if (s[j] == -HUGE_VAL)
            continue;
        double w = exp(s[j] - m);
        l += w;
        for (int64_t c = 0; c < p->Dv; c++)
            o[c] += w * load4(&in->v, b, j, g, c);
    }
    if (ok && zeta > -HUGE_VAL)
        l += exp(zeta - m);
    for (int64_t c = 0; ok && c < p->Dv; c++)
        o[c] /= l, ok = isfinite(o[c]);
    if (peak_lse)
        peak_lse[0] = m, peak_lse[1] = m + log(l);
    free(s);
    return ok ? 0 : -1;
}

/* A scale that explains the outputs where the problem's does not (SPEC 2.3): left out (1),
 * 1/D for 1/sqrt(D), applied twice, 1/sqrt(Dv), the default where another was given, or
 * rounded to binary16 or bfloat16. Each candidate is tried first on the failing row in
 * binary64, then confirmed by the oracle and the bound on every O element. The scale, with
 * the names of the mistakes it fits in what, or NaN. */
static double other_scale(const smattn_problem *p, const smattn_inputs *in,
                          const smattn_outputs *got, const smattn_precision *pm, unsigned flags,
                          const int64_t ix[4], int64_t nO, const row_set *rs, char *what,
                          size_t wcap)
{
    struct {
        double s;
        const char *what;
    } cand[7];
    int nc = 0;
    double s0 = p->scale;
    double f16 = smattn__bits_to_double(smattn__round_bits(s0, SMATTN_F16), SMATTN_F16);
    double bf16 = smattn__bits_to_double(smattn__round_bits(s0, SMATTN_BF16), SMATTN_BF16);
#define CAND(x, w) (cand[nc].s = (x), cand[nc++].what = (w))
    CAND(1.0, "the scale left out");
    CAND(s0 * s0, "the scale applied twice");
    CAND(1.0 / (double)p->D, "1/D instead of 1/sqrt(D)");
    CAND(smattn_default_scale(p->Dv), "1/sqrt(Dv) instead of 1/sqrt(D)");
    CAND(smattn_default_scale(p->D), "the default 1/sqrt(D) instead of the problem's scale");
    CAND(f16, "the scale rounded to binary16");
    CAND(bf16, "the scale rounded to bfloat16");
#undef CAND
    double *row = malloc((size_t)p->Dv * sizeof *row);
    int64_t o0 = ((ix[0] * p->S + ix[2]) * p->Hq + ix[1]) * p->Dv; /* O [B,S,Hq,Dv] */
    for (int k = 0; row && k < nc; k++) {
        int seen = cand[k].s == s0 || !isfinite(cand[k].s);
        for (int e = 0; e < k && !seen; e++)
            seen = cand[e].s == cand[k].s;
        if (seen || row_o_scaled(p, in, cand[k].s, ix[0], ix[1], ix[2], row, NULL))
            continue;
        double diff = 0, size = 0;
        for (int64_t c = 0; c < p->Dv; c++) {
            double g = smattn_load(got->o.data, got->o.dtype, o0 + c);
            diff = fmax(diff, fabs(g - row[c]));
            size = fmax(size, fabs(row[c]));
            if (isnan(g))
                diff = HUGE_VAL;
        }
        if (!(diff <= 0x1p-6 * size + 0x1p-1000)) /* far off: no need to ask the oracle */
            continue;
        smattn_problem q = *p;
        q.scale = cand[k].s;
        if (ratio_under(&q, in, got, pm, flags, nO, rs) <= 1) {
            free(row);
            /* one value, several mistakes: 1/sqrt(D) squared is 1/D */
            size_t len = (size_t)snprintf(what, wcap, "%s", cand[k].what);
            for (int e = k + 1; e < nc && len < wcap; e++)
                if (cand[e].s == cand[k].s)
                    len += (size_t)snprintf(what + len, wcap - len, ", or %s", cand[e].what);
            return cand[k].s;
        }
    }
    free(row);
    return (double)NAN;
}

/* A sentence for the worst element: which convention or rule it breaks. `strided`: the
 * rows of the inputs are padded and the padding (outside every tensor's view) holds NaN. */
/* Append to a reason: a reason that does not fit ends in "..." rather than mid-word unseen. */
static void reason_appendf(char *out, size_t cap, const char *fmt, ...)
{
    if (cap == 0)
        return;
    va_list ap;
    va_start(ap, fmt);
    int w = vsnprintf(out, cap, fmt, ap);
    va_end(ap);
    if (w >= 0 && (size_t)w >= cap && cap > 4)
        memcpy(out + cap - 4, "...", 4);
}

/* Whether got follows problem q (another alignment of p) without q's oracle reading a slot
 * p hides that holds garbage: O within its bounds under q, and the LSE too when given. */
static int alt_fits(const smattn_problem *p, const smattn_problem *q, const smattn_inputs *in,
                    const smattn_outputs *got, const smattn_precision *pm, unsigned flags,
                    int64_t nO, const row_set *rs)
{
    if (alt_reads_garbage(p, q, in, rs))
        return 0;
    return (got->lse.data ? ratio_o_lse_under(q, in, got, pm, flags, rs)
                          : ratio_under(q, in, got, pm, flags, nO, rs)) <= 1;
}

/* "causal alignment: ...; " into out when O is wrong under the problem's causal alignment
 * and right under the other (or the lower-right one off by one); its length, 0 for none.
 * *o_wrong: whether O is wrong under the problem (the scale's diagnosis reads it). */
static size_t alignment(const smattn_problem *p, const smattn_inputs *in, const smattn_outputs *got,
                        const smattn_precision *pm, unsigned flags, int64_t nO, const row_set *rs,
                        int *o_wrong, char *out, size_t cap)
{
    size_t n = 0;
    /* Another causal alignment or scale is named only when O is wrong under the problem's
     * and right under the other, and so is the LSE when given (a mean-convention empty row
     * of a one-key sequence holds upper-left's O, but not its LSE): with S = T the two
     * alignments are one problem, and a wrong LSE alone says nothing of either. */
    *o_wrong = p->op == SMATTN_OP_ATTENTION && got->o.data &&
               ratio_under(p, in, got, pm, flags, nO, rs) > 1;
    if (*o_wrong && p->causal != SMATTN_CAUSAL_NONE) {
        smattn_problem q = *p;
        q.causal = p->causal == SMATTN_CAUSAL_LOWER_RIGHT ? SMATTN_CAUSAL_UPPER_LEFT
                                                          : SMATTN_CAUSAL_LOWER_RIGHT;
        if (alt_fits(p, &q, in, got, pm, flags, nO, rs))
            n = (size_t)snprintf(
                out, cap, "causal alignment: O follows %s, but %s is claimed; ",
                p->causal == SMATTN_CAUSAL_LOWER_RIGHT ? "upper_left" : "lower_right",
                p->causal == SMATTN_CAUSAL_LOWER_RIGHT ? "lower_right" : "upper_left");
        else if (p->causal == SMATTN_CAUSAL_LOWER_RIGHT && p->window_right == -1) {
            q = *p;
            q.causal = SMATTN_CAUSAL_NONE;
            q.window_right = 1;
            if (alt_fits(p, &q, in, got, pm, flags, nO, rs))
                n = (size_t)snprintf(out, cap,
                                     "causal alignment off by one: O follows keys "
                                     "j <= i + T_b - S_b + 1; ");
        }
    }
    return n;
}

static void diagnose(const smattn_problem *p, const smattn_inputs *in, const smattn_outputs *got,
                     const smattn_precision *pm, unsigned flags, int strided, int t, int64_t e,
                     double c, double x, double bound, double ratio, int64_t nO,
                     const row_set *rs, char *out, size_t cap)
{
    int64_t ix[4];
    char where[96], cs[40], xs[40];
    locate(p, t, e, ix, where, sizeof where);
    fmt_value(c, cs, sizeof cs);
    fmt_value(x, xs, sizeof xs);
    int sink;
    int64_t keys = row_keys(p, in, ix[0], ix[1], ix[2], &sink);
    int64_t Sb = p->q_lens ? p->q_lens[ix[0]] : p->S;
    const char *leak = " slots this row must not read hold NaN/inf: did a masked or padded "
                       "position leak in?";
    const char *pad = " the padding of this case's rows holds NaN: are the strides followed?";
    int evidence = isnan(c) && row_leak_evidence(p, in, ix[0], ix[1], ix[2]);
    int att = p->op == SMATTN_OP_ATTENTION;
    if (keys == 0 && !sink && isnan(c) && !isnan(x)) {
        /* A sink of -inf adds no term (SPEC 3.4): taken as one, e^{-inf - (-inf)} is NaN
         * without any slot of the row being read, so it comes before the leak. */
        if (in->sinks.data && ix[2] < Sb && load4(&in->sinks, ix[1], 0, 0, 0) == -HUGE_VAL) {
            snprintf(out, cap,
                     "NaN at %s where the spec has %s: an empty row (no visible key, and the sink "
                     "of head %lld is -inf, which adds no term: SPEC 3.4); a -inf sink taken as "
                     "a term gives exp(-inf - (-inf)) = NaN",
                     where, xs, (long long)ix[1]);
            return;
        }
        if (evidence) {
            snprintf(out, cap,
                     "NaN at %s where the spec has %s (an empty row: no visible key, no sink);%s",
                     where, xs, leak);
            return;
        }
    }
    /* Named first: with S_b > T_b the rows a lower-right mask leaves empty see keys under
     * the upper-left one, so a kernel of the other alignment fails there first. */
    int o_wrong = 0;
    size_t n = alignment(p, in, got, pm, flags, nO, rs, &o_wrong, out, cap);
    if (n >= cap)
        return;
    if (keys == 0 && !sink) {
        const char *conv = t == 1 ? empty_lse_name(p->empty_lse) : empty_name(p->empty_rows);
        const char *want = t == 1 ? (p->empty_lse == SMATTN_LSE_ZERO      ? "0"
                                     : p->empty_lse == SMATTN_LSE_POS_INF ? "+inf"
                                                                          : "-inf")
                           : p->empty_rows == SMATTN_EMPTY_NAN  ? "NaN"
                           : p->empty_rows == SMATTN_EMPTY_ZERO ? "+0"
                                                                : xs;
        snprintf(out + n, cap - n,
                 "empty row (no visible key, no sink): %s expected %s (%s convention%s), got %s",
                 where, want, conv, t == 1 ? " for the LSE" : "", cs);
        return;
    }
    char why[160];
    const char *hid = t == 2 && x == 0 && bound == 0
                          ? hidden_by(p, in, ix[0], ix[1], ix[2], ix[3], why, sizeof why)
                          : NULL;
    if (hid && isnan(c) && p->op == SMATTN_OP_SOFTMAX && p->scale == 0 &&
        !strcmp(hid, "x = -inf")) {
        snprintf(out, cap,
                 "NaN at %s, a key hidden by x = -inf: the scale 0 times x = -inf is NaN, but an "
                 "x of -inf hides its key whatever the scale (SPEC 3.5)",
                 where);
        return;
    }
    if (hid) {
        snprintf(out + n, cap - n, "masked key got weight: %s = %s, but key %lld is hidden by %s",
                 where, cs, (long long)ix[3], hid);
        return;
    }
    if (n == 0 && p->alibi_mode != SMATTN_ALIBI_NONE && keys > 0 &&
        ratio_o_lse_under(p, in, got, pm, flags, rs) > 1) {
        /* ALiBi read another way (SPEC 2.8): O and LSE both, since under a causal mask the
         * symmetric and one-sided modes (and a distance off by one) move the LSE alone; named
         * only when O or LSE is wrong under the problem (a decode's two modes are one) */
        for (int kind = 0; kind < 4 && n == 0; kind++) {
            smattn_problem q;
            smattn_inputs qin;
            double *bb = NULL;
            const char *what;
            if (alibi_alt(p, in, kind, &q, &qin, &bb, &what))
                break;
            if (ratio_o_lse_under(&q, &qin, got, pm, flags, rs) <= 1)
                n = (size_t)snprintf(out, cap, "ALiBi: the outputs follow %s, not the problem's "
                                     "%s mode; ", what,
                                     p->alibi_mode == SMATTN_ALIBI_SYMMETRIC ? "symmetric"
                                     : p->alibi_mode == SMATTN_ALIBI_ONE_SIDED ? "one_sided"
                                                                               : "mask");
            free(bb);
        }
    }
    if (o_wrong && n == 0 && keys > 0) {
        char what[200];
        double s = other_scale(p, in, got, pm, flags, ix, nO, rs, what, sizeof what);
        if (!isnan(s))
            n = (size_t)snprintf(out, cap,
                                 "scale: O follows scale %.9g (%s), not the problem's %.9g; ", s,
                                 what, p->scale);
    }
    if (n >= cap)
        return;
    /* Scores far from 0 (SPEC 6.1 A3): past log of the accumulation format's range, exp
     * overflows, and past its negative, underflows, unless the weights are shifted by the
     * row's own maximum. Named before a leak: with garbage in the row's hidden slots too,
     * a max that restarted at 0 after a masked tile is the likelier cause of 0/0. */
    char regime[300] = "";
    double *row = att ? malloc((size_t)p->Dv * sizeof *row) : NULL, pl[2];
    if (row && !row_o_scaled(p, in, p->scale, ix[0], ix[1], ix[2], row, pl)) {
        double range = pm->u_acc == 0x1p-11 ? 65504.0
                       : pm->u_acc <= 0x1p-53 ? DBL_MAX
                                              : (double)FLT_MAX;
        double peak = pl[0], lse = (double)NAN;
        if (got->lse.data) /* [B,Hq,S] */
            lse = smattn_load(got->lse.data, got->lse.dtype, (ix[0] * p->Hq + ix[1]) * p->S + ix[2]);
        /* a right LSE means right weights: then the shift is not the cause */
        int lse_right = fabs(lse - pl[1]) <= 0x1p-10 * fmax(1.0, fabs(pl[1]));
        if (fabs(peak) > log(range) - 1.5 && !lse_right)
            snprintf(regime, sizeof regime,
                     "; the row's visible scores peak at %.4g, where exp(s) %s in the kernel's "
                     "format: are the weights shifted by the row's own maximum (a running max "
                     "that restarts at 0 after a fully masked tile, or none at all, gives %s)?",
                     peak, peak > 0 ? "overflows" : "underflows", peak > 0 ? "inf/inf" : "0/0");
    }
    free(row);
    const char *hint = evidence ? leak : strided && isnan(c) ? pad : "";
    if (regime[0] && evidence)
        hint = " slots this row must not read hold NaN/inf too: a leak is the other suspect";
    if (isfinite(x) && !isfinite(c))
        reason_appendf(out + n, cap - n, "%s at %s where the spec has a finite value (%s)%s%s%s",
                 isnan(c) ? "NaN" : "infinity", where, xs, regime, hint[0] ? ";" : "", hint);
    else if (isnan(x))
        reason_appendf(out + n, cap - n, "%s = %s where the spec has NaN (SPEC 4.2)", where, cs);
    else if (isinf(x))
        reason_appendf(out + n, cap - n, "%s at %s where the spec has %s (SPEC 4.2)%s%s",
                 isnan(c) ? "NaN" : cs, where, x > 0 ? "+inf" : "-inf", hint[0] ? ";" : "",
                 hint);
    else
        reason_appendf(out + n, cap - n, "error/bound ratio %.4g at %s: got %s, exact %s, bound %.3g%s",
                 ratio, where, cs, xs, bound, regime);
}

void conform_judge(const smattn_problem *p, const smattn_inputs *in, const smattn_outputs *got,
                   const smattn_precision *pm, int strided, conform_result *r)
{
    conform_judge_flags(p, in, got, pm, 0, strided, r);
}

/* Row (b, h, i) of element e of output t, as an index into [B, Hq, S]. */
static int64_t row_of(const smattn_problem *p, int t, int64_t e)
{
    int64_t ix[4];
    char buf[96];
    locate(p, t, e, ix, buf, sizeof buf);
    return (ix[0] * p->Hq + ix[1]) * p->S + ix[2];
}

/* ---- rows out of contract (SPEC 6.8): what any kernel can still meet ------------------- */

/* The visible keys of the last row asked for, kept while its elements are checked. */
typedef struct vis_row {
    int64_t row, n, *keys;
    int sink;
} vis_row;

static const int64_t *vis_keys(const smattn_problem *p, const smattn_inputs *in,
                               const int64_t ix[4], vis_row *v)
{
    int64_t row = (ix[0] * p->Hq + ix[1]) * p->S + ix[2];
    if (v->row == row)
        return v->keys;
    if (!v->keys && !(v->keys = malloc((size_t)(p->T ? p->T : 1) * sizeof *v->keys)))
        return NULL;
    char buf[160];
    v->n = 0;
    for (int64_t j = 0; j < p->T; j++)
        if (!hidden_by(p, in, ix[0], ix[1], ix[2], j, buf, sizeof buf))
            v->keys[v->n++] = j;
    v->sink = in->sinks.data && load4(&in->sinks, ix[1], 0, 0, 0) > -HUGE_VAL;
    v->row = row;
    return v->keys;
}

/* gamma_k(u) (SPEC 1), +inf when k u >= 1. */
static double gamma_k(double k, double u)
{
    double ku = k * u;
    return ku < 1 ? ku / (1 - ku) : HUGE_VAL;
}

/* Does element (t, e) of a row out of contract (exact value x finite, or an LSE beyond
 * binary64) break what any kernel can meet there (SPEC 6.8)? O is a convex combination of
 * the visible V rows (and of 0 with a sink): c must lie in their hull, widened by the
 * roundings of model pm (sums of k_a terms in N and L, nb - 1 rescalings of each, the
 * exp, u_p, the output's rounding, and tiny per operation); an infinity only where that
 * widened hull reaches the output format's overflow threshold. LSE must not be NaN; P must
 * lie in [0, 1] widened likewise. 1 with a sentence in out, else 0. */
static int oc_breach(const smattn_problem *p, const smattn_inputs *in, const smattn_precision *pm,
                     smattn_dtype odt, int t, int64_t e, double c, double x, vis_row *v,
                     char *out, size_t cap)
{
    int64_t ix[4];
    char where[96], cs[40], xs[40];
    locate(p, t, e, ix, where, sizeof where);
    fmt_value(c, cs, sizeof cs);
    fmt_value(x, xs, sizeof xs);
    const smattn_format *f = &smattn__formats[odt];
    double ovf = ldexp(2.0 - ldexp(1.0, 1 - f->prec), f->emax);
    smattn_precision po = smattn_precision_of(odt);
    double E = 2 * pm->exp_ulps * pm->u_acc;
    const char *head = "in a row out of contract (SPEC 6.8: not judged by size, since its "
                       "arithmetic may overflow), but";
    if (t == 1) {
        if (!isnan(c))
            return 0;
        snprintf(out, cap, "%s = NaN %s a NaN LSE is never right there: the exact value is %s",
                 where, head, isinf(x) ? "finite (beyond binary64)" : xs);
        return 1;
    }
    if (!vis_keys(p, in, ix, v))
        return 0;
    double nb = (double)(pm->blocks > 0 ? pm->blocks : 1);
    double ka = pm->acc_len > 0 ? (double)pm->acc_len : (double)(v->n + v->sink);
    /* a NaN or an infinity where the spec has a finite value is said to be one (SPEC 6.8:
     * it fails whatever overflowed, unless, for O, the hull reaches the overflow threshold) */
    const char *nonfinite = isfinite(c) ? ""
                            : "; a NaN or an infinity where the spec has a finite value fails "
                              "whatever overflowed";
    if (t == 2) {
        double hi = (1 + gamma_k(ka + 2 * nb + 4, pm->u_acc)) * (1 + E) * (1 + po.u_acc) + po.tiny;
        if (c >= 0 && c <= hi)
            return 0;
        snprintf(out, cap, "%s = %s %s a weight is in [0, 1] (exact %s)%s", where, cs, head, xs,
                 nonfinite);
        return 1;
    }
    int64_t g = ix[1] / (p->Hq / p->Hkv);
    double lo = v->sink ? 0 : HUGE_VAL, hi = v->sink ? 0 : -HUGE_VAL;
    for (int64_t k = 0; k < v->n; k++) {
        double vj = load4(&in->v, ix[0], v->keys[k], g, ix[3]);
        lo = fmin(lo, vj), hi = fmax(hi, vj);
    }
    if (!(lo <= hi))
        return 0; /* no term: nothing to say */
    double big = fmax(fabs(lo), fabs(hi));
    double rel = (1 + gamma_k(2 * ka + 2 * nb + 4, pm->u_acc)) * (1 + pm->u_p) * (1 + E) *
                     (1 + po.u_acc) - 1;
    double slack = rel * big + (ka + 4) * pm->tiny * big + po.tiny;
    if (isnan(slack))
        slack = HUGE_VAL;
    double a = lo - slack, b = hi + slack;
    if (!isnan(c) && (isinf(c) ? (c > 0 ? b >= ovf : a <= -ovf) : c >= a && c <= b))
        return 0;
    snprintf(out, cap,
             "%s = %s %s O is a convex combination of the row's visible V values%s: in "
             "[%.9g, %.9g] up to rounding (exact %s)%s",
             where, cs, head, v->sink ? " and 0 (the sink)" : "", lo, hi, xs, nonfinite);
    return 1;
}

void conform_judge_flags(const smattn_problem *p, const smattn_inputs *in,
                         const smattn_outputs *got, const smattn_precision *pm, unsigned flags,
                         int strided, conform_result *r)
{
    conform_judge_rows(p, in, got, pm, flags, strided, NULL, r);
}

static void judge_set(const smattn_problem *p, const smattn_inputs *in, const smattn_outputs *got,
                      const smattn_precision *pm, unsigned flags, int strided, const row_set *rs,
                      conform_result *r);

void conform_judge_rows(const smattn_problem *p, const smattn_inputs *in,
                        const smattn_outputs *got, const smattn_precision *pm, unsigned flags,
                        int strided, const conform_sample *sample, conform_result *r)
{
    conform_judge_twin(p, in, got, pm, flags, strided, sample, NULL, r);
}

void conform_judge_twin(const smattn_problem *p, const smattn_inputs *in, const smattn_outputs *got,
                        const smattn_precision *pm, unsigned flags, int strided,
                        const conform_sample *sample, const int64_t *stored, conform_result *r)
{
    const int64_t total = p->B * p->Hq * p->S;
    int64_t kept = total; /* the rows the layout stores */
    unsigned char *no_ol = NULL;
    if (stored) {
        no_ol = calloc((size_t)total + 1, 1);
        kept = 0;
        for (int64_t k = 0; no_ol && k < total; k++) {
            no_ol[k] = k % p->S >= stored[k / (p->Hq * p->S)];
            kept += !no_ol[k];
        }
    }
    row_set rs = {NULL, 0, NULL, no_ol};
    int64_t *list = NULL, n = 0;
    unsigned char *member = NULL;
    const int sampled = sample && sample->k > 0;
    if (sampled) {
        list = conform_rows_list_of(p, sample->k, sample->seed, stored, &n);
        member = calloc((size_t)total + 1, 1);
    }
    if ((stored && !no_ol) || (sampled && (!list || !member))) {
        free(no_ol), free(list), free(member);
        r->status = CONFORM_SKIP;
        r->rows_judged = 0, r->rows_total = total;
        snprintf(r->reason, sizeof r->reason, CONFORM_SKIP_ORACLE_FAILED ": %s (%s)",
                 smattn_status_str(SMATTN_ERR_NOMEM), smattn_status_name(SMATTN_ERR_NOMEM));
        return;
    }
    /* without P, the rows the layout does not have are no rows of the kernel's */
    r->rows_total = got->p.data ? total : kept;
    r->rows_judged = r->rows_total;
    if (sampled && n < kept) { /* fewer than all: sampled (else the full check, as it is) */
        for (int64_t k = 0; k < n; k++)
            member[list[k]] = 1;
        rs.list = list, rs.n = n, rs.in = member;
        r->rows_judged = n;
    }
    judge_set(p, in, got, pm, flags, strided, &rs, r);
    free(no_ol);
    free(list);
    free(member);
}

static void judge_set(const smattn_problem *p, const smattn_inputs *in, const smattn_outputs *got,
                      const smattn_precision *pm, unsigned flags, int strided, const row_set *rs,
                      conform_result *r)
{
    r->max_ratio = r->max_ulp = 0;
    r->unbounded = r->unbounded_rows = r->elements = r->nonfinite = r->mismatched = 0;
    unsigned char *oc_rows = calloc((size_t)(p->B * p->Hq * p->S) + 1, 1);
    r->reason[0] = '\0';
    r->worst_out = -1;
    int att = p->op == SMATTN_OP_ATTENTION;
    int64_t n[3] = {att ? p->B * p->S * p->Hq * p->Dv : 0, p->B * p->Hq * p->S,
                    p->B * p->Hq * p->S * p->T};
    smattn_outputs ref, bnd;
    smattn_ref_config cfg = {1, 0, 0, 0};
    smattn_status st = SMATTN_ERR_NOMEM;
    if (!alloc_f64(p, got, &ref, n) && !alloc_f64(p, got, &bnd, n)) {
        st = ref_on(p, in, &ref, &cfg, rs);
        if (st == SMATTN_OK)
            st = bound_on(p, in, pm, got, &bnd, flags, rs);
    }
    if (st == SMATTN_ERR_OPTION) { /* the model the kernel claims for this problem */
        r->status = CONFORM_FAIL;
        snprintf(r->reason, sizeof r->reason,
                 "the kernel's precision model is out of range for this problem (u_score %g, "
                 "u_acc %g, exp_ulps %g, u_p %g, blocks %lld, acc_len %lld, tiny %g; SPEC 6.1)",
                 pm->u_score, pm->u_acc, pm->exp_ulps, pm->u_p, (long long)pm->blocks,
                 (long long)pm->acc_len, pm->tiny);
        free_f64(&ref);
        free_f64(&bnd);
        free(oc_rows);
        return;
    }
    if (st != SMATTN_OK) {
        r->status = CONFORM_SKIP;
        snprintf(r->reason, sizeof r->reason, CONFORM_SKIP_ORACLE_FAILED ": %s (%s)",
                 smattn_status_str(st), smattn_status_name(st));
        free_f64(&ref);
        free_f64(&bnd);
        free(oc_rows);
        return;
    }
    const smattn_out_tensor *gt[3] = {&got->o, &got->lse, &got->p};
    const smattn_out_tensor *rt[3] = {&ref.o, &ref.lse, &ref.p};
    const smattn_out_tensor *bt[3] = {&bnd.o, &bnd.lse, &bnd.p};
    /* The element the failure is reported at: the worst one if its row is empty, else the
     * first weight given to a masked key, else the first non-finite value where the spec
     * has a finite one, else the worst. */
    struct {
        int t;
        int64_t e;
        double c, x, b, ratio;
    } worst = {-1, 0, 0, 0, 0, 0}, masked = worst, nonfinite = worst, breach = worst;
    char breach_why[sizeof r->reason];
    vis_row vis = {-1, 0, NULL, 0};
    /* Rows out of contract (SPEC 6.8), marked first: an LSE of such a row whose exact value
     * is beyond binary64 (the oracle stores +-inf) is finite in exact arithmetic, so it is
     * held to the same as the row's finite values. O columns whose V holds an infinity
     * stay judged: SPEC 4.2 makes them infinite whatever the weights, and a kernel can
     * honour that without computing the scores. */
    int any_oc = 0;
    for (int t = 0; t < 3 && oc_rows; t++) {
        if (!gt[t]->data)
            continue;
        for (int64_t e = 0; e < n[t]; e++) {
            if (!judged(rs, p, t, e))
                continue;
            double x = ((const double *)rt[t]->data)[e], b = ((const double *)bt[t]->data)[e];
            if (isfinite(x) && b == HUGE_VAL) {
                int64_t row = row_of(p, t, e);
                r->unbounded_rows += !oc_rows[row];
                oc_rows[row] = 1, any_oc = 1;
            }
        }
    }
    for (int t = 0; t < 3; t++) {
        if (!gt[t]->data)
            continue;
        for (int64_t e = 0; e < n[t]; e++) {
            if (!judged(rs, p, t, e))
                continue;
            double c = smattn_load(gt[t]->data, gt[t]->dtype, e);
            double x = ((const double *)rt[t]->data)[e], b = ((const double *)bt[t]->data)[e];
            r->elements++;
            /* Out of contract: not judged by size, but held to what any kernel can meet. */
            int oc = isfinite(x) && b == HUGE_VAL;
            oc |= t == 1 && isinf(x) && any_oc && oc_rows[row_of(p, t, e)];
            if (oc) {
                r->unbounded++;
                char why[sizeof r->reason];
                if (oc_breach(p, in, pm, gt[t]->dtype, t, e, c, x, &vis, why, sizeof why)) {
                    r->nonfinite += !isfinite(c);
                    if (breach.t < 0) {
                        breach.t = t, breach.e = e, breach.c = c, breach.x = x, breach.b = b;
                        breach.ratio = HUGE_VAL;
                        snprintf(breach_why, sizeof breach_why, "%s", why);
                    }
                }
                continue;
            }
            double ratio = smattn_error_ratio(c, x, b);
            double ulp = smattn_ulp_error(c, x, gt[t]->dtype);
            if (ulp > r->max_ulp || isnan(ulp))
                r->max_ulp = isnan(ulp) ? HUGE_VAL : ulp;
            if (isnan(ratio))
                ratio = HUGE_VAL;
            if (worst.t < 0 || ratio > worst.ratio)
                worst.t = t, worst.e = e, worst.c = c, worst.x = x, worst.b = b,
                worst.ratio = ratio;
            if (ratio > 1 && masked.t < 0 && t == 2 && x == 0 && b == 0)
                masked.t = t, masked.e = e, masked.c = c, masked.x = x, masked.b = b,
                masked.ratio = ratio;
            r->nonfinite += isfinite(x) && !isfinite(c) && ratio > 1;
            r->mismatched += ratio > 1;
            if (ratio > 1 && nonfinite.t < 0 && isfinite(x) && !isfinite(c))
                nonfinite.t = t, nonfinite.e = e, nonfinite.c = c, nonfinite.x = x, nonfinite.b = b,
                nonfinite.ratio = ratio;
        }
    }
    free(vis.keys);
    r->max_ratio = worst.t < 0 ? 0 : worst.ratio;
    if (r->max_ratio > 1) {
        r->status = CONFORM_FAIL;
        int64_t ix[4];
        char where[96];
        int sink;
        locate(p, worst.t, worst.e, ix, where, sizeof where);
        int empty = row_keys(p, in, ix[0], ix[1], ix[2], &sink) == 0 && !sink;
        if (!empty && masked.t >= 0)
            worst = masked;
        else if (!empty && nonfinite.t >= 0)
            worst = nonfinite;
        locate(p, worst.t, worst.e, r->worst_ix, where, sizeof where);
        r->worst_out = worst.t, r->worst_got = worst.c, r->worst_exact = worst.x;
        r->worst_bound = worst.b;
        diagnose(p, in, got, pm, flags, strided, worst.t, worst.e, worst.c, worst.x, worst.b,
                 worst.ratio, n[0], rs, r->reason, sizeof r->reason);
        size_t len = strlen(r->reason);
        int here = oc_rows && oc_rows[row_of(p, worst.t, worst.e)];
        if (here && len < sizeof r->reason)
            /* Judged in a row out of contract: an exact infinity or NaN (SPEC 4.2), or an
             * element whose own bound is finite. */
            snprintf(r->reason + len, sizeof r->reason - len,
                     " (this row is out of contract, SPEC 6.8: its elements with bound +inf are "
                     "held only to what any kernel can meet, but %s; %lld rows out of contract "
                     "in all)",
                     isfinite(worst.x) ? "this one's bound is finite, so it is judged"
                                       : "an exact infinity or NaN is judged by class",
                     (long long)r->unbounded_rows);
        else if (r->unbounded_rows && len < sizeof r->reason)
            snprintf(r->reason + len, sizeof r->reason - len,
                     " (and %lld rows out of contract, SPEC 6.8, held only to what any kernel "
                     "can meet)",
                     (long long)r->unbounded_rows);
    } else if (breach.t >= 0) {
        r->status = CONFORM_FAIL;
        r->max_ratio = HUGE_VAL;
        char where[96];
        locate(p, breach.t, breach.e, r->worst_ix, where, sizeof where);
        r->worst_out = breach.t, r->worst_got = breach.c, r->worst_exact = breach.x;
        r->worst_bound = breach.b;
        size_t len = strlen(breach_why);
        memcpy(r->reason, breach_why, len + 1);
        if (len < sizeof r->reason)
            snprintf(r->reason + len, sizeof r->reason - len,
                     " (%lld rows out of contract in all)", (long long)r->unbounded_rows);
    } else {
        r->status = CONFORM_PASS;
        if (worst.t >= 0) {
            char where[96];
            locate(p, worst.t, worst.e, r->worst_ix, where, sizeof where);
            r->worst_out = worst.t, r->worst_got = worst.c, r->worst_exact = worst.x;
            r->worst_bound = worst.b;
        }
        if (r->unbounded)
            snprintf(r->reason, sizeof r->reason,
                     "%lld rows out of contract (%lld elements with a finite exact value and "
                     "bound +inf: SPEC 6.8), held only to what any kernel can meet (O in the "
                     "hull of the visible V rows, LSE not NaN, P in [0, 1])",
                     (long long)r->unbounded_rows, (long long)r->unbounded);
    }
    free_f64(&ref);
    free_f64(&bnd);
    free(oc_rows);
}

/* ---- split-KV consistency (SPEC 9.6) ------------------------------------------------------
 * With the exact partial states (O*_n, L*_n) and the full L*, the kernel's parts are within
 * bO_n and bL_n of them. The oracle merges the kernel's parts exactly: Lm = log sum e^L_n is
 * within eL = max_n bL_n of L* (log-sum-exp is 1-Lipschitz in the max norm), and each
 * weight w_n = e^(L_n - Lm) within a factor e^(+-2 eL) of w*_n, so
 *   |Om - O*| <= sum_n w_n (bO_n + e^(2 eL) expm1(2 eL) (|O_n| + bO_n)),
 * and the kernel's full O is within bO of O*. Their sum (with Om's own rounding, 2^-52 |Om|)
 * bounds |Om - O|; eL + bL (and Lm's rounding) bounds |Lm - L|. */
void conform_judge_split(const smattn_problem *p, const smattn_inputs *in,
                         const smattn_outputs *full, const smattn_problem sp[2],
                         const smattn_inputs sin[2], const smattn_outputs sout[2],
                         const smattn_precision *pm, unsigned flags, int64_t t,
                         conform_result *r)
{
    const int64_t B = p->B, S = p->S, Hq = p->Hq, Dv = p->Dv;
    const int64_t no = B * S * Hq * Dv, nl = B * Hq * S;
    double *buf = malloc((size_t)(6 * no + 6 * nl) * sizeof *buf);
    if (!buf) {
        r->status = CONFORM_FAIL;
        snprintf(r->reason, sizeof r->reason, "split-KV: the checker ran out of memory");
        return;
    }
    double *bo = buf, *bop = buf + no, *op = buf + 3 * no, *om = buf + 5 * no;
    double *bl = buf + 6 * no, *blp = bl + nl, *lp = bl + 3 * nl, *lm = bl + 5 * nl;
    smattn_outputs fb, mo;
    memset(&fb, 0, sizeof fb);
    fb.o = (smattn_out_tensor){bo, SMATTN_F64, {0}};
    fb.lse = (smattn_out_tensor){bl, SMATTN_F64, {0}};
    smattn_contiguous_strides(p, 'o', fb.o.stride);
    smattn_contiguous_strides(p, 'l', fb.lse.stride);
    int st = smattn__bound_flags(p, in, pm, full, &fb, flags);
    for (int n = 0; n < 2 && !st; n++) {
        smattn_outputs pb = fb;
        pb.o.data = bop + n * no;
        pb.lse.data = blp + n * nl;
        st = smattn__bound_flags(&sp[n], &sin[n], pm, &sout[n], &pb, flags);
        for (int64_t e = 0; e < no; e++)
            op[n * no + e] = smattn_load(sout[n].o.data, sout[n].o.dtype, e);
        for (int64_t e = 0; e < nl; e++)
            lp[n * nl + e] = smattn_load(sout[n].lse.data, sout[n].lse.dtype, e);
    }
    smattn_merge_problem mp = smattn_merge_problem_default();
    mp.N = 2, mp.B = B, mp.S = S, mp.Hq = Hq, mp.Dv = Dv;
    mp.empty_parts = p->empty_lse == SMATTN_LSE_POS_INF ? SMATTN_LSE_POS_INF : SMATTN_LSE_NEG_INF;
    smattn_merge_inputs mi;
    memset(&mi, 0, sizeof mi);
    mi.o_parts = (smattn_tensor){op, SMATTN_F64, {0}};
    mi.lse_parts = (smattn_tensor){lp, SMATTN_F64, {0}};
    smattn_contiguous_strides(p, 'o', mi.o_parts.stride);
    smattn_contiguous_strides(p, 'l', mi.lse_parts.stride);
    mi.o_part_stride = no, mi.lse_part_stride = nl;
    memset(&mo, 0, sizeof mo);
    mo.o = (smattn_out_tensor){om, SMATTN_F64, {0}};
    mo.lse = (smattn_out_tensor){lm, SMATTN_F64, {0}};
    smattn_contiguous_strides(p, 'o', mo.o.stride);
    smattn_contiguous_strides(p, 'l', mo.lse.stride);
    smattn_ref_config cfg = {1, 0, 0, 0};
    if (!st)
        st = smattn_ref_merge(&mp, &mi, &mo, &cfg);
    if (st) {
        r->status = CONFORM_FAIL;
        snprintf(r->reason, sizeof r->reason,
                 "split-KV: the kernel's parts over keys [0, %lld) and [%lld, %lld) cannot be "
                 "merged or bounded (%s)",
                 (long long)t, (long long)t, (long long)p->T, smattn_status_name((smattn_status)st));
        free(buf);
        return;
    }
    for (int64_t b = 0; b < B; b++)
        for (int64_t h = 0; h < Hq; h++)
            for (int64_t i = 0; i < S; i++) {
                const int64_t l = (b * Hq + h) * S + i;
                double eL = fmax(blp[l], blp[nl + l]), w[2];
                if (!isfinite(eL) || !isfinite(lm[l]) || !isfinite(bl[l]))
                    continue; /* an empty part, or a row out of contract: not judged here */
                for (int n = 0; n < 2; n++)
                    w[n] = isfinite(lp[n * nl + l]) ? exp(lp[n * nl + l] - lm[l]) : 0.0;
                double g = exp(2 * eL) * expm1(2 * eL);
                const char *what = NULL;
                double got = 0, want = 0, bound = 0;
                int64_t col = 0;
                double L = smattn_load(full->lse.data, full->lse.dtype, l);
                double bL = eL + bl[l] + 0x1p-52 * fabs(lm[l]);
                if (!(fabs(lm[l] - L) <= bL))
                    what = "LSE", got = lm[l], want = L, bound = bL;
                for (int64_t c = 0; c < Dv && !what; c++) {
                    const int64_t e = ((b * S + i) * Hq + h) * Dv + c;
                    double bO = bo[e] + 0x1p-52 * fabs(om[e]);
                    for (int n = 0; n < 2; n++)
                        bO += w[n] * (bop[n * no + e] + g * (fabs(op[n * no + e]) + bop[n * no + e]));
                    double O = smattn_load(full->o.data, full->o.dtype, e);
                    if (isfinite(bO) && !(fabs(om[e] - O) <= bO))
                        what = "O", got = om[e], want = O, bound = bO, col = c;
                }
                if (what) {
                    char at[96];
                    if (what[0] == 'O')
                        snprintf(at, sizeof at, "O[b=%lld,i=%lld,h=%lld,c=%lld]", (long long)b,
                                 (long long)i, (long long)h, (long long)col);
                    else
                        snprintf(at, sizeof at, "LSE[b=%lld,h=%lld,i=%lld]", (long long)b,
                                 (long long)h, (long long)i);
                    r->status = CONFORM_FAIL;
                    snprintf(r->reason, sizeof r->reason,
                             "split-KV: the kernel's own attention over keys [0, %lld) and "
                             "[%lld, %lld), merged by the oracle, gives %s = %.9g, but its "
                             "attention over all keys gives %.9g: |difference| %.3g above the "
                             "bound %.3g of the two (SPEC 9.6)",
                             (long long)t, (long long)t, (long long)p->T, at, got, want,
                             fabs(got - want), bound);
                    free(buf);
                    return;
                }
            }
    free(buf);
}
