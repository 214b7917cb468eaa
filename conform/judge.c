/* SPDX-License-Identifier: MIT */
/* judge.c: a kernel's outputs against the exact oracle (smattn_ref, with the conventions
 * the kernel claims) under the SPEC 6 bound of its precision model (smattn_bound): the max
 * error/bound ratio and ulp error, and, for a failure, one sentence naming what was
 * violated (an empty-row convention, a masked key with weight, the causal alignment, a NaN
 * where the spec has a finite value). Elements with a finite exact value but bound +inf
 * (out of contract, SPEC 6.8) are counted and reported, not judged. */
#include <math.h>
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

/* Do the inputs of row (b, h, i) hold a NaN or an infinity anywhere (its Q row, and K, V,
 * bias or X at any key)? An empty row reads none of them, so a NaN in its output with
 * dirty inputs is first of all a leak. */
static int row_dirty(const smattn_problem *p, const smattn_inputs *in, int64_t b, int64_t h,
                     int64_t i)
{
    if (q_row_dirty(p, in, b, h, i))
        return 1;
    for (int64_t j = 0; j < p->T; j++)
        if (slot_dirty(p, in, b, h, i, j))
            return 1;
    return 0;
}

/* Would the oracle of problem q read a non-finite value at a slot that the claimed problem
 * p hides (a key visible under q only, or the Q row of a row empty under p only)? Then a
 * kernel that "follows q" may only be reading garbage that q's oracle reads too (NaN
 * matches NaN): q is no explanation. */
static int alt_reads_garbage(const smattn_problem *p, const smattn_problem *q,
                             const smattn_inputs *in)
{
    char b1[160], b2[160];
    for (int64_t b = 0; b < p->B; b++)
        for (int64_t h = 0; h < p->Hq; h++)
            for (int64_t i = 0; i < p->S; i++) {
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
                          int64_t nO)
{
    smattn_outputs only = {got->o, {0}, {0}}, ref, bnd;
    int64_t n[3] = {nO, 0, 0};
    double worst = HUGE_VAL;
    smattn_ref_config cfg = {1, 0, 0, 0};
    if (!alloc_f64(q, &only, &ref, n) && !alloc_f64(q, &only, &bnd, n) &&
        smattn_ref(q, in, &ref, &cfg, NULL) == SMATTN_OK &&
        smattn__bound_flags(q, in, pm, &only, &bnd, flags) == SMATTN_OK) {
        worst = 0;
        for (int64_t e = 0; e < nO; e++) {
            double r = smattn_error_ratio(smattn_load(got->o.data, got->o.dtype, e),
                                          ((double *)ref.o.data)[e], ((double *)bnd.o.data)[e]);
            worst = r > worst ? r : worst;
        }
    }
    free_f64(&ref);
    free_f64(&bnd);
    return worst;
}

/* A sentence for the worst element: which convention or rule it breaks. */
static void diagnose(const smattn_problem *p, const smattn_inputs *in, const smattn_outputs *got,
                     const smattn_precision *pm, unsigned flags, int garbage, int t, int64_t e,
                     double c, double x, double bound, double ratio, int64_t nO, char *out,
                     size_t cap)
{
    int64_t ix[4];
    char where[96], cs[40], xs[40];
    locate(p, t, e, ix, where, sizeof where);
    fmt_value(c, cs, sizeof cs);
    fmt_value(x, xs, sizeof xs);
    int sink;
    int64_t keys = row_keys(p, in, ix[0], ix[1], ix[2], &sink);
    if (keys == 0 && !sink && garbage && isnan(c) && !isnan(x) &&
        row_dirty(p, in, ix[0], ix[1], ix[2])) {
        snprintf(out, cap,
                 "NaN at %s where the spec has %s (an empty row: no visible key, no sink); "
                 "invisible slots of this case hold NaN/inf: did a masked or padded position "
                 "leak in?",
                 where, xs);
        return;
    }
    if (keys == 0 && !sink) {
        const char *conv = t == 1 ? empty_lse_name(p->empty_lse) : empty_name(p->empty_rows);
        const char *want = t == 1 ? (p->empty_lse == SMATTN_LSE_ZERO      ? "0"
                                     : p->empty_lse == SMATTN_LSE_POS_INF ? "+inf"
                                                                          : "-inf")
                           : p->empty_rows == SMATTN_EMPTY_NAN  ? "NaN"
                           : p->empty_rows == SMATTN_EMPTY_ZERO ? "+0"
                                                                : xs;
        snprintf(out, cap,
                 "empty row (no visible key, no sink): %s expected %s (%s convention%s), got %s",
                 where, want, conv, t == 1 ? " for the LSE" : "", cs);
        return;
    }
    char why[160];
    const char *hid = t == 2 && x == 0 && bound == 0
                          ? hidden_by(p, in, ix[0], ix[1], ix[2], ix[3], why, sizeof why)
                          : NULL;
    if (hid) {
        snprintf(out, cap, "masked key got weight: %s = %s, but key %lld is hidden by %s", where,
                 cs, (long long)ix[3], hid);
        return;
    }
    size_t n = 0;
    if (p->op == SMATTN_OP_ATTENTION && p->causal != SMATTN_CAUSAL_NONE && got->o.data) {
        smattn_problem q = *p;
        q.causal = p->causal == SMATTN_CAUSAL_LOWER_RIGHT ? SMATTN_CAUSAL_UPPER_LEFT
                                                          : SMATTN_CAUSAL_LOWER_RIGHT;
        if (!alt_reads_garbage(p, &q, in) && ratio_under(&q, in, got, pm, flags, nO) <= 1)
            n = (size_t)snprintf(
                out, cap, "causal alignment: O follows %s, but %s is claimed; ",
                p->causal == SMATTN_CAUSAL_LOWER_RIGHT ? "upper_left" : "lower_right",
                p->causal == SMATTN_CAUSAL_LOWER_RIGHT ? "lower_right" : "upper_left");
        else if (p->causal == SMATTN_CAUSAL_LOWER_RIGHT && p->window_right == -1) {
            q = *p;
            q.causal = SMATTN_CAUSAL_NONE;
            q.window_right = 1;
            if (!alt_reads_garbage(p, &q, in) && ratio_under(&q, in, got, pm, flags, nO) <= 1)
                n = (size_t)snprintf(out, cap,
                                     "causal alignment off by one: O follows keys "
                                     "j <= i + T_b - S_b + 1; ");
        }
    }
    if (n >= cap)
        return;
    if (isfinite(x) && !isfinite(c))
        snprintf(out + n, cap - n, "%s at %s where the spec has a finite value (%s)%s",
                 isnan(c) ? "NaN" : "infinity", where, xs,
                 garbage && isnan(c) ? "; invisible slots of this case hold NaN/inf: did a "
                                       "masked or padded position leak in?"
                                     : "");
    else if (isnan(x))
        snprintf(out + n, cap - n, "%s = %s where the spec has NaN (SPEC 4.2)", where, cs);
    else
        snprintf(out + n, cap - n, "error/bound ratio %.4g at %s: got %s, exact %s, bound %.3g",
                 ratio, where, cs, xs, bound);
}

void conform_judge(const smattn_problem *p, const smattn_inputs *in, const smattn_outputs *got,
                   const smattn_precision *pm, int garbage, conform_result *r)
{
    conform_judge_flags(p, in, got, pm, 0, garbage, r);
}

/* Row (b, h, i) of element e of output t, as an index into [B, Hq, S]. */
static int64_t row_of(const smattn_problem *p, int t, int64_t e)
{
    int64_t ix[4];
    char buf[96];
    locate(p, t, e, ix, buf, sizeof buf);
    return (ix[0] * p->Hq + ix[1]) * p->S + ix[2];
}

void conform_judge_flags(const smattn_problem *p, const smattn_inputs *in,
                         const smattn_outputs *got, const smattn_precision *pm, unsigned flags,
                         int garbage, conform_result *r)
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
        st = smattn_ref(p, in, &ref, &cfg, NULL);
        if (st == SMATTN_OK)
            st = smattn__bound_flags(p, in, pm, got, &bnd, flags);
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
        snprintf(r->reason, sizeof r->reason, "the oracle or the bound failed: %s (%s)",
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
    } worst = {-1, 0, 0, 0, 0, 0}, masked = worst, nonfinite = worst;
    /* Rows out of contract (SPEC 6.8), marked first: an LSE of such a row whose exact value
     * is beyond binary64 (the oracle stores +-inf) is finite in exact arithmetic, so it is
     * not judged either (a kernel whose scores overflowed may give NaN there). O columns
     * whose V holds an infinity stay judged: SPEC 4.2 makes them infinite whatever the
     * weights, and a kernel can honour that without computing the scores. */
    int any_oc = 0;
    for (int t = 0; t < 3 && oc_rows; t++) {
        if (!gt[t]->data)
            continue;
        for (int64_t e = 0; e < n[t]; e++) {
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
            double c = smattn_load(gt[t]->data, gt[t]->dtype, e);
            double x = ((const double *)rt[t]->data)[e], b = ((const double *)bt[t]->data)[e];
            r->elements++;
            if (isfinite(x) && b == HUGE_VAL) {
                r->unbounded++;
                continue;
            }
            if (t == 1 && isinf(x) && any_oc && oc_rows[row_of(p, t, e)]) {
                r->unbounded++;
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
        diagnose(p, in, got, pm, flags, garbage, worst.t, worst.e, worst.c, worst.x, worst.b,
                 worst.ratio, n[0], r->reason, sizeof r->reason);
        size_t len = strlen(r->reason);
        if (r->unbounded_rows && len < sizeof r->reason)
            snprintf(r->reason + len, sizeof r->reason - len,
                     " (and %lld rows out of contract, SPEC 6.8, not judged)",
                     (long long)r->unbounded_rows);
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
                     "bound +inf: SPEC 6.8), not judged",
                     (long long)r->unbounded_rows, (long long)r->unbounded);
    }
    free_f64(&ref);
    free_f64(&bnd);
    free(oc_rows);
}
