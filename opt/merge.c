/* SPDX-License-Identifier: MIT */
/* merge.c: the fast merge of partial attention states (SPEC 9.4): binary32, the partials'
 * maximum subtracted first, rows over the thread pool, each column sum by the ISA's fused
 * axpy and its correctly rounded division, so every ISA and thread count gives the same bits. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "core/merge_internal.h"
#include "opt/opt_internal.h"

/* Rows per work item: a performance choice; a row's arithmetic does not depend on it. */
#define MERGE_ROWS_PER_ITEM 8

typedef struct merge_ws {
    float *acc, *row, *o; /* [Dv] */
    float *w, *t;         /* [N] weights and LSEs of the finite partials */
    int64_t *idx;         /* [N] their indices */
} merge_ws;

typedef struct merge_job {
    const opt_isa *isa;
    const smattn_merge_problem *p;
    const smattn_merge_inputs *in;
    const smattn_outputs *out;
    int64_t rows;
    merge_ws *ws;
} merge_job;

static const opt_isa *isa_named(const char *name)
{
    if (!name)
        return smattn__opt_isa();
    if (!smattn_opt_isa_available(name))
        return NULL;
    if (strcmp(name, "scalar") == 0)
        return &smattn__isa_scalar;
    return strcmp(name, "avx2") == 0 ? &smattn__isa_avx2 : &smattn__isa_avx512;
}

/* One output element: f32 as computed (+0 for a zero), f16/bf16 rounded once from it, NaN
 * as the positive quiet NaN (SPEC 4.3), as the attention kernel stores. */
static void put(const smattn_out_tensor *t, int64_t off, float x)
{
    if (t->dtype == SMATTN_F32)
        opt_st_f32(t->data, off, isnan(x) ? NAN : x + 0.0f);
    else
        smattn_store(t->data, t->dtype, off, isnan(x) ? (double)NAN : (double)(x + 0.0f));
}

/* A column whose binary32 sum met a non-finite value: the exact class first (SPEC 9.2: NaN,
 * +-inf as V in SPEC 4.2; a weight that underflowed to 0 must not turn inf into NaN), else
 * the finite inputs overflowed binary32 (out of the contract, SPEC 9.5) and the column is
 * taken again in binary64, rounded once. */
static float slow_column(const merge_job *job, const merge_ws *ws, int64_t k, double m,
                         int64_t b, int64_t h, int64_t i, int64_t c)
{
    const smattn_tensor *ot = &job->in->o_parts;
    const int base2 = job->p->lse_base == SMATTN_LSE_BASE_2;
    int nan = 0, pinf = 0, ninf = 0;
    double num = 0, den = 0;
    for (int64_t n = 0; n < k; n++) {
        double v = smattn_load(ot->data, ot->dtype, smattn__merge_o_off(job->in, ws->idx[n], b, i, h, c));
        nan |= v != v, pinf |= v == HUGE_VAL, ninf |= v == -HUGE_VAL;
        double e = base2 ? exp2((double)ws->t[n] - m) : exp((double)ws->t[n] - m);
        num += e * v;
        den += e;
    }
    if (nan || (pinf && ninf))
        return NAN;
    if (pinf || ninf)
        return ninf ? -HUGE_VALF : HUGE_VALF;
    return (float)(num / den);
}

static void merge_row(const merge_job *job, merge_ws *ws, int64_t b, int64_t h, int64_t i)
{
    const smattn_merge_problem *p = job->p;
    const smattn_merge_inputs *in = job->in;
    const smattn_outputs *out = job->out;
    const int base2 = p->lse_base == SMATTN_LSE_BASE_2;
    const int64_t Dv = p->Dv;
    const int64_t lo_off = out->lse.data ? smattn__merge_out_lse_off(out, b, h, i) : 0;
    int64_t k = 0;
    int poison = 0;
    float m = -HUGE_VALF;
    for (int64_t n = 0; n < p->N; n++) {
        float t = opt_load1(&in->lse_parts, smattn__merge_lse_off(in, n, b, h, i));
        int cl = smattn__merge_lse_class(p, (double)t);
        poison |= cl == MERGE_POISON;
        if (cl == MERGE_FINITE) {
            ws->idx[k] = n;
            ws->t[k++] = t;
            m = t > m ? t : m;
        }
    }
    if (poison || k == 0) { /* SPEC 9.2: a NaN row; every partial empty: SPEC 3.4's row */
        float lse = poison ? NAN : p->empty_lse == SMATTN_LSE_ZERO ? 0.0f
                                 : p->empty_lse == SMATTN_LSE_POS_INF ? HUGE_VALF : -HUGE_VALF;
        float o = poison || p->empty_rows == SMATTN_EMPTY_NAN ? NAN : 0.0f;
        if (out->lse.data)
            put(&out->lse, lo_off, lse);
        for (int64_t c = 0; out->o.data && c < Dv; c++)
            put(&out->o, smattn__off4(out->o.stride, b, i, h, c), o);
        return;
    }
    /* weights b^(t_n - m) <= 1, the largest exactly 1; L summed in the partials' order */
    float L = 0;
    for (int64_t n = 0; n < k; n++) {
        float d = ws->t[n] - m;
        ws->w[n] = base2 ? exp2f(d) : expf(d);
        L += ws->w[n];
    }
    if (out->lse.data)
        put(&out->lse, lo_off, m + (base2 ? log2f(L) : logf(L)));
    if (!out->o.data)
        return;
    const smattn_tensor *ot = &in->o_parts;
    memset(ws->acc, 0, (size_t)Dv * sizeof *ws->acc);
    for (int64_t n = 0; n < k; n++) {
        int64_t off = smattn__merge_o_off(in, ws->idx[n], b, i, h, 0);
        const float *x = ws->row;
        if (ot->dtype == SMATTN_F32 && ot->stride[3] == 1 &&
            (uintptr_t)ot->data % sizeof(float) == 0) /* read in place */
            x = (const float *)ot->data + off;
        else
            for (int64_t c = 0; c < Dv; c++)
                ws->row[c] = opt_load1(ot, off + c * ot->stride[3]);
        job->isa->axpy(ws->acc, x, ws->w[n], Dv);
    }
    const smattn_out_tensor *o = &out->o;
    const int64_t off0 = smattn__off4(o->stride, b, i, h, 0);
    /* a contiguous binary32 row is written in place, any other through ws->o */
    const int direct = o->dtype == SMATTN_F32 && o->stride[3] == 1 &&
                       (uintptr_t)o->data % sizeof(float) == 0;
    float *dst = direct ? (float *)o->data + off0 : ws->o;
    int bad = job->isa->write_o(dst, ws->acc, L, Dv);
    if (!direct && !bad && o->stride[3] == 1) { /* f16, bf16: the ISA's rounding stores */
        job->isa->store_half(o->data, o->dtype, off0, ws->o, Dv);
        return;
    }
    for (int64_t c = 0; c < Dv; c++) {
        float x = direct ? opt_ld_f32(dst, c) : ws->o[c];
        if (bad && !isfinite(x))
            x = slow_column(job, ws, k, (double)m, b, h, i, c);
        else if (direct)
            continue;
        put(o, off0 + c * o->stride[3], x);
    }
}

static void run_item(void *ctx, int64_t item, int worker)
{
    const merge_job *job = ctx;
    const smattn_merge_problem *p = job->p;
    int64_t end = (item + 1) * MERGE_ROWS_PER_ITEM;
    end = end < job->rows ? end : job->rows;
    for (int64_t row = item * MERGE_ROWS_PER_ITEM; row < end; row++)
        merge_row(job, &job->ws[worker], row / (p->Hq * p->S), (row / p->S) % p->Hq, row % p->S);
}

static int env_threads(void)
{
    const char *e = getenv("SMATTN_NUM_THREADS");
    if (!e || !*e)
        return 0;
    char *end;
    long n = strtol(e, &end, 10);
    return *end == 0 && n > 0 && n <= 1024 ? (int)n : 0;
}

static int half_or_single(smattn_dtype t)
{
    return t == SMATTN_F32 || t == SMATTN_F16 || t == SMATTN_BF16;
}

smattn_status smattn_merge(const smattn_merge_problem *p, const smattn_merge_inputs *in,
                           const smattn_outputs *out, const smattn_opt_config *cfg)
{
    smattn_status st = smattn_merge_validate(p, in, out);
    if (st)
        return st;
    if (cfg && ((cfg->isa && !smattn__isa_known(cfg->isa)) || cfg->threads < 0))
        return SMATTN_ERR_OPTION;
    if (!half_or_single(in->o_parts.dtype) || !half_or_single(in->lse_parts.dtype) ||
        (out->o.data && !half_or_single(out->o.dtype)) ||
        (out->lse.data && !half_or_single(out->lse.dtype)))
        return SMATTN_ERR_UNSUPPORTED;
    merge_job job;
    memset(&job, 0, sizeof job);
    job.isa = isa_named(cfg ? cfg->isa : NULL);
    if (!job.isa)
        return SMATTN_ERR_UNSUPPORTED; /* a known ISA this CPU lacks */
    job.p = p, job.in = in, job.out = out;
    job.rows = p->B * p->Hq * p->S;
    int nt = cfg && cfg->threads > 0 ? cfg->threads : env_threads();
    if (nt <= 0 || nt > smattn__ncpu())
        nt = smattn__ncpu();
    int64_t items = (job.rows + MERGE_ROWS_PER_ITEM - 1) / MERGE_ROWS_PER_ITEM;
    if (nt > items)
        nt = (int)items;
    job.ws = calloc((size_t)nt, sizeof *job.ws);
    st = job.ws ? SMATTN_OK : SMATTN_ERR_NOMEM;
    for (int t = 0; !st && t < nt; t++) {
        merge_ws *w = &job.ws[t];
        w->acc = malloc((size_t)p->Dv * sizeof *w->acc);
        w->row = malloc((size_t)p->Dv * sizeof *w->row);
        w->o = malloc((size_t)p->Dv * sizeof *w->o);
        w->w = malloc((size_t)p->N * sizeof *w->w);
        w->t = malloc((size_t)p->N * sizeof *w->t);
        w->idx = malloc((size_t)p->N * sizeof *w->idx);
        if (!w->acc || !w->row || !w->o || !w->w || !w->t || !w->idx)
            st = SMATTN_ERR_NOMEM;
    }
    if (!st) /* the pool falls back to this thread when it cannot start others */
        smattn__pool_run(nt, items, run_item, &job);
    for (int t = 0; job.ws && t < nt; t++) {
        merge_ws *w = &job.ws[t];
        free(w->acc), free(w->row), free(w->o), free(w->w), free(w->t), free(w->idx);
    }
    free(job.ws);
    return st;
}

smattn_precision smattn_merge_opt_precision(void)
{
    smattn_precision m = smattn_precision_of(SMATTN_F32);
    m.exp_ulps = 2.0; /* glibc's expf, exp2f, logf, log2f: within 1 ulp; 2 claimed */
    m.acc_len = 0;    /* serial over the partials */
    m.tiny = 0x1p-126;
    return m;
}
