/* SPDX-License-Identifier: MIT */
/* slow.c: the optimised kernel's exact-enough path for rare rows: any row whose float32
 * evaluation met a NaN, an infinity or an overflow, empty rows under the mean convention,
 * and softmax rows with sinks. binary64 arithmetic (products of binary32 inputs are exact,
 * scores cannot overflow), every rule of SPEC 3-4, outputs rounded once to their dtype. Its
 * error is far inside the float32 bound of SPEC 6. */
#include <math.h>
#include <stdatomic.h>
#include <stdlib.h>

#include "opt/opt_internal.h"

static atomic_llong slow_rows;

long long smattn__opt_slow_rows(void)
{
    return atomic_load_explicit(&slow_rows, memory_order_relaxed);
}

/* f32 as before; f16 and bf16 rounded once from the binary64 result (SPEC 2.6), a NaN as
 * the positive quiet NaN (SPEC 4.3). */
static void put(const smattn_out_tensor *t, int64_t off, double x)
{
    if (t->dtype == SMATTN_F32)
        opt_st_f32(t->data, off, (float)x + 0.0f); /* any address */
    else
        smattn_store(t->data, t->dtype, off, isnan(x) ? (double)NAN : x + 0.0);
}

static void put_lse(const opt_job *job, int64_t b, int64_t h, int64_t i, double x)
{
    const smattn_out_tensor *t = &job->out->lse;
    if (t->data && smattn__row_stored(job->p, b, i)) /* no LSE for a packed padding row */
        put(t, smattn__lse_off(job->p, t->stride, b, h, i), x);
}

static void put_o(const opt_job *job, int64_t b, int64_t h, int64_t i, int64_t c, double x)
{
    const smattn_out_tensor *t = &job->out->o;
    if (smattn__row_stored(job->p, b, i)) /* no O for a packed padding row (SPEC 2.7) */
        put(t, smattn__row_off(job->p, t->stride, b, i, h, c), x);
}

static void put_p(const opt_job *job, int64_t b, int64_t h, int64_t i, int64_t j, double x)
{
    const smattn_out_tensor *t = &job->out->p;
    if (t->data)
        put(t, smattn__off4(t->stride, b, h, i, j), x);
}

static double empty_lse(const smattn_problem *p)
{
    return p->empty_lse == SMATTN_LSE_POS_INF ? HUGE_VAL
           : p->empty_lse == SMATTN_LSE_ZERO  ? 0.0
                                              : -HUGE_VAL;
}

/* The real V element: the decoded one times its descale, exact (SPEC 2.9) */
static double vval(const opt_job *job, int64_t b, int64_t j, int64_t g, int64_t c)
{
    const smattn_tensor *t = &job->in->v;
    return smattn_load(t->data, t->dtype, smattn__key_off(job->p, t->stride, b, j, g, c)) *
           smattn__descale(job->p, 'v', b, g);
}

/* O_c = sum_j w_j v_jc / L over keys idx[0..n), with the V column classes of SPEC 4.2. */
static void write_o(const opt_job *job, int64_t b, int64_t h, int64_t i, const int64_t *idx,
                    const double *w, int64_t n, double L)
{
    const smattn_problem *p = job->p;
    int64_t g = smattn__kv_head(p, h);
    for (int64_t c = 0; c < p->Dv; c++) {
        double acc = 0;
        int nan = 0, pos = 0, neg = 0;
        for (int64_t k = 0; k < n; k++) {
            double v = vval(job, b, idx[k], g, c);
            nan |= isnan(v), pos |= v == HUGE_VAL, neg |= v == -HUGE_VAL;
            acc += w[k] * v;
        }
        double o = nan || (pos && neg) ? (double)NAN : pos ? HUGE_VAL : neg ? -HUGE_VAL : acc / L;
        put_o(job, b, h, i, c, o);
    }
}

void smattn__opt_write_empty(const opt_job *job, int64_t b, int64_t h, int64_t i)
{
    const smattn_problem *p = job->p;
    int nan = p->empty_rows == SMATTN_EMPTY_NAN;
    put_lse(job, b, h, i, empty_lse(p));
    for (int64_t j = 0; j < p->T; j++)
        put_p(job, b, h, i, j, nan ? (double)NAN : 0.0);
    if (p->op == SMATTN_OP_ATTENTION)
        for (int64_t c = 0; c < p->Dv; c++)
            put_o(job, b, h, i, c, nan ? (double)NAN : 0.0);
}

/* The weights of a row whose binary64 scores overflowed (|scale q.k| beyond DBL_MAX, as for
 * a scale near DBL_MAX and |q.k| > 1; never with softcap, which bounds the scores by c).
 * Each score is s_k = 2^e t_k + u_k, scale = sf 2^e (frexp), t_k = sf q.k (one rounding),
 * u_k the bias; the sink is t = 0, u = zeta. A difference s_k - s_r = 2^e (t_k - t_r) +
 * (u_k - u_r) never forms s: it is exact up to a few binary64 roundings of its two terms,
 * so the maximum r, the weights e^{s_k - s_r} <= 1 (0 when the difference is -inf) and L
 * are those of the exact scores up to these roundings, and m = 2^e t_r + u_r is +-inf only
 * where the exact LSE is beyond binary64 (it then rounds to an infinity in every output
 * format). t holds q.k, u the bias on entry; w receives the weights. Returns m; *L the
 * denominator, sink included (>= 1). */
static double big_weights(const smattn_problem *p, double *t, const double *u, int64_t n,
                          int has_sink, double sink, double *w, double *L)
{
    int e;
    const double sf = frexp(p->scale, &e);
    int64_t r = -1; /* the maximum: a key, or -1 for the sink (or nothing yet) */
    for (int64_t k = 0; k < n; k++) {
        t[k] *= sf;
        double d = r >= 0 ? ldexp(t[k] - t[r], e) + (u[k] - u[r])
                   : has_sink ? ldexp(t[k], e) + (u[k] - sink)
                              : HUGE_VAL;
        if (d > 0)
            r = k;
    }
    /* The differences are rounded pairwise, so one the loop above left below r may come out
     * a rounding above it: each is clamped to 0, so every weight is in [0, 1], r's is 1,
     * and O is a convex combination of the V rows (and 0 for the sink) whatever cancels. */
    const double tr = r >= 0 ? t[r] : 0.0, ur = r >= 0 ? u[r] : sink;
    double l = has_sink ? exp(fmin(ldexp(-tr, e) + (sink - ur), 0.0)) : 0.0;
    for (int64_t k = 0; k < n; k++) {
        w[k] = exp(fmin(ldexp(t[k] - tr, e) + (u[k] - ur), 0.0));
        l += w[k];
    }
    *L = l;
    return ldexp(tr, e) + ur;
}

void smattn__opt_slow_row(const opt_job *job, int64_t b, int64_t h, int64_t i)
{
    atomic_fetch_add_explicit(&slow_rows, 1, memory_order_relaxed);
    const smattn_problem *p = job->p;
    const smattn_inputs *in = job->in;
    const int att = p->op == SMATTN_OP_ATTENTION;
    const int64_t T = p->T, g = att ? smattn__kv_head(p, h) : 0;
    int64_t *idx = malloc((size_t)T * sizeof *idx);
    double *s = malloc((size_t)T * sizeof *s), *t = malloc(2 * (size_t)T * sizeof *t);
    if (!idx || !s || !t) { /* cannot happen for sizes validate accepted; write NaN, not garbage */
        free(idx), free(s), free(t);
        put_lse(job, b, h, i, (double)NAN);
        if (att)
            for (int64_t c = 0; c < p->Dv; c++)
                put_o(job, b, h, i, c, (double)NAN);
        for (int64_t j = 0; j < T; j++)
            put_p(job, b, h, i, j, (double)NAN);
        return;
    }
    int64_t n = 0, lo, hi;
    int nan = 0, has_sink = 0;
    double sink = 0;
    if (i >= smattn__q_len(p, b))
        goto empty;
    smattn__key_range(p, b, i, &lo, &hi);
    for (int64_t j = lo; j < hi; j++) {
        if (!smattn__mask_allows(p, in, b, h, i, j))
            continue;
        double bj = in->bias.data ? smattn_load(in->bias.data, in->bias.dtype,
                                                smattn__off4(in->bias.stride, b, h, i, j))
                                  : 0.0;
        double x = 0;
        if (!att) {
            x = smattn_load(in->x.data, in->x.dtype, smattn__off4(in->x.stride, b, h, i, j));
            if (x == -HUGE_VAL)
                continue;
        }
        if (bj == -HUGE_VAL)
            continue;
        idx[n] = j;
        s[n++] = x;
    }
    if (in->sinks.data) {
        sink = smattn_load(in->sinks.data, in->sinks.dtype, h * in->sinks.stride[0]);
        if (isnan(sink) || sink == HUGE_VAL)
            nan = 1;
        else if (sink != -HUGE_VAL)
            has_sink = 1;
    }
    if (!nan && n == 0 && !has_sink)
        goto empty;
    /* scores in binary64, of the real Q and K (SPEC 2.9: each decoded element times its
     * descale, exact) */
    const double fq = att ? smattn__descale(p, 'q', b, g) : 1.0;
    const double fk = att ? smattn__descale(p, 'k', b, g) : 1.0;
    for (int64_t k = 0; k < n && !nan; k++) {
        int64_t j = idx[k];
        double x = s[k];
        if (att) {
            x = 0;
            for (int64_t d = 0; d < p->D; d++) {
                double q = fq * smattn_load(in->q.data, in->q.dtype, smattn__row_off(p, in->q.stride, b, i, h, d));
                double kk = fk * smattn_load(in->k.data, in->k.dtype, smattn__key_off(p, in->k.stride, b, j, g, d));
                if (!isfinite(q) || !isfinite(kk))
                    nan = 1;
                x += q * kk;
            }
        } else if (!isfinite(x)) {
            nan = 1;
        }
        t[k] = x; /* q.k and the bias, for big_weights */
        t[T + k] = 0.0;
        x *= p->scale;
        if (p->softcap > 0)
            x = p->softcap * tanh(x / p->softcap);
        if (in->bias.data) {
            double bj = smattn_load(in->bias.data, in->bias.dtype, smattn__off4(in->bias.stride, b, h, i, j));
            if (!isfinite(bj))
                nan = 1;
            else if (p->alibi_mode == SMATTN_ALIBI_MASK) /* SPEC 2.8: exact */
                bj *= (double)smattn__alibi_slope(p, b, h);
            x += bj;
            t[T + k] = bj;
        }
        double al = smattn__alibi_term(p, b, h, i, j); /* exact; 0 without it */
        if (al != 0) {
            x += al;
            t[T + k] += al;
        }
        s[k] = x;
    }
    if (nan) { /* SPEC 4.2: the row is NaN */
        put_lse(job, b, h, i, (double)NAN);
        if (att)
            for (int64_t c = 0; c < p->Dv; c++)
                put_o(job, b, h, i, c, (double)NAN);
        for (int64_t j = 0; j < T; j++)
            put_p(job, b, h, i, j, 0.0);
        for (int64_t k = 0; k < n; k++)
            put_p(job, b, h, i, idx[k], (double)NAN);
        goto done;
    }
    int big = 0; /* finite inputs, a score beyond binary64: the scale times q.k overflowed */
    for (int64_t k = 0; k < n; k++)
        big |= !isfinite(s[k]);
    double m, L;
    if (big) {
        m = big_weights(p, t, t + T, n, has_sink, sink, s, &L);
    } else {
        m = has_sink ? sink : -HUGE_VAL;
        for (int64_t k = 0; k < n; k++)
            m = s[k] > m ? s[k] : m;
        L = has_sink ? exp(sink - m) : 0.0;
        for (int64_t k = 0; k < n; k++) {
            s[k] = exp(s[k] - m);
            L += s[k];
        }
    }
    put_lse(job, b, h, i, m + log(L));
    for (int64_t j = 0; j < T; j++)
        put_p(job, b, h, i, j, 0.0);
    for (int64_t k = 0; k < n; k++)
        put_p(job, b, h, i, idx[k], s[k] / L);
    if (att)
        write_o(job, b, h, i, idx, s, n, L);
    goto done;

empty:
    if (p->empty_rows == SMATTN_EMPTY_MEAN) {
        int64_t Tb = smattn__kv_len(p, b);
        put_lse(job, b, h, i, empty_lse(p));
        for (int64_t j = 0; j < T; j++)
            put_p(job, b, h, i, j, j < Tb ? 1.0 / (double)Tb : 0.0);
        if (att) {
            for (int64_t j = 0; j < Tb; j++)
                idx[j] = j, s[j] = 1.0;
            if (Tb > 0)
                write_o(job, b, h, i, idx, s, Tb, (double)Tb);
            else
                for (int64_t c = 0; c < p->Dv; c++)
                    put_o(job, b, h, i, c, 0.0);
        }
    } else {
        smattn__opt_write_empty(job, b, h, i);
    }
done:
    free(idx);
    free(s);
    free(t);
}
