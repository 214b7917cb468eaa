/* SPDX-License-Identifier: MIT */
/* ref.c: the exact oracle's driver: validation, rows split over threads, the per-row
 * conventions (empty rows, non-finite inputs), the two phases, and the writing of bits
 * (SPEC 3-5). */
#include <math.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include "ref/ref_internal.h"

#define REF_DEFAULT_MAX_PREC 16384L
/* Keys of work between two progress reports within a row: a few per second at least. */
#define REF_TICK_KEYS 16384

/* ---- loading ----------------------------------------------------------------------------- */

double smattn__ref_k(const ref_row *r, int64_t j, int64_t d)
{
    const smattn_tensor *t = &r->in->k;
    return smattn_load(t->data, t->dtype, smattn__key_off(r->p, t->stride, r->b, j, r->g, d)) *
           r->dk; /* exact (SPEC 2.9) */
}

double smattn__ref_v(const ref_row *r, int64_t j, int64_t c)
{
    const smattn_tensor *t = &r->in->v;
    return smattn_load(t->data, t->dtype, smattn__key_off(r->p, t->stride, r->b, j, r->g, c)) *
           r->dv; /* exact (SPEC 2.9) */
}

double smattn__ref_x(const ref_row *r, int64_t j)
{
    const smattn_tensor *t = &r->in->x;
    return smattn_load(t->data, t->dtype, smattn__off4(t->stride, r->b, r->h, r->i, j));
}

double smattn__ref_bias_raw(const ref_row *r, int64_t j)
{
    const smattn_tensor *t = &r->in->bias;
    if (!t->data)
        return 0.0;
    return smattn_load(t->data, t->dtype, smattn__off4(t->stride, r->b, r->h, r->i, j));
}

double smattn__ref_bias(const ref_row *r, int64_t j)
{
    double x = smattn__ref_bias_raw(r, j);
    if (r->p->alibi_mode == SMATTN_ALIBI_MASK && isfinite(x))
        x *= (double)smattn__alibi_slope(r->p, r->b, r->h); /* exact: 24 + 24 bits */
    return x;
}

double smattn__ref_alibi(const ref_row *r, int64_t j)
{
    return smattn__alibi_term(r->p, r->b, r->h, r->i, j);
}

void smattn__ref_load_vec(double *dst, const smattn_tensor *t, int64_t offset, int64_t stride,
                  int64_t n)
{
    switch (t->dtype) {
    /* bytes copied: a tensor may start at any address */
    case SMATTN_F32: {
        const unsigned char *src = (const unsigned char *)t->data + offset * 4;
        for (int64_t d = 0; d < n; d++) {
            float x;
            memcpy(&x, src + d * stride * 4, 4);
            dst[d] = (double)x;
        }
        return;
    }
    case SMATTN_F64: {
        const unsigned char *src = (const unsigned char *)t->data + offset * 8;
        for (int64_t d = 0; d < n; d++)
            memcpy(&dst[d], src + d * stride * 8, 8);
        return;
    }
    default:
        for (int64_t d = 0; d < n; d++)
            dst[d] = smattn_load(t->data, t->dtype, offset + d * stride);
    }
}

/* ---- writing ----------------------------------------------------------------------------- */

/* O and LSE of a row without storage (a packed batch's padding rows, SPEC 2.7) are not
 * written; P keeps the dense twin's shape. */
static void put_o(const ref_row *r, int64_t c, uint64_t bits)
{
    const smattn_out_tensor *t = &r->out->o;
    if (smattn__row_stored(r->p, r->b, r->i))
        smattn__store_bits(t->data, t->dtype,
                           smattn__row_off(r->p, t->stride, r->b, r->i, r->h, c), bits);
}

static void put_lse(const ref_row *r, uint64_t bits)
{
    const smattn_out_tensor *t = &r->out->lse;
    if (t->data && smattn__row_stored(r->p, r->b, r->i))
        smattn__store_bits(t->data, t->dtype, smattn__lse_off(r->p, t->stride, r->b, r->h, r->i),
                           bits);
}

static void put_p(const ref_row *r, int64_t j, uint64_t bits)
{
    const smattn_out_tensor *t = &r->out->p;
    smattn__store_bits(t->data, t->dtype, smattn__off4(t->stride, r->b, r->h, r->i, j), bits);
}

static uint64_t empty_lse_bits(const ref_row *r)
{
    smattn_dtype t = r->out->lse.data ? r->out->lse.dtype : SMATTN_F64;
    switch (r->p->empty_lse) {
    case SMATTN_LSE_POS_INF: return smattn__ref_inf_bits(t, 0);
    case SMATTN_LSE_ZERO: return 0;
    default: return smattn__ref_inf_bits(t, 1);
    }
}

/* Row with no visible key and no sink (SPEC 3.4). */
static smattn_status write_empty(ref_row *r)
{
    const smattn_problem *p = r->p;
    int64_t T = p->T;
    r->was_empty = 1;
    put_lse(r, empty_lse_bits(r));
    if (p->empty_rows == SMATTN_EMPTY_MEAN) {
        /* as if every key below T_b had the same finite score */
        int64_t Tb = smattn__kv_len(p, r->b);
        r->n = Tb;
        for (int64_t j = 0; j < Tb; j++)
            r->idx[j] = j;
        if (r->out->p.data)
            for (int64_t j = 0; j < T; j++)
                put_p(r, j, 0);
        if (Tb == 0) {
            if (r->att)
                for (int64_t c = 0; c < r->Dv; c++)
                    put_o(r, c, 0);
            return SMATTN_OK;
        }
        smattn_status st = smattn__ref_mean_row(r);
        if (st)
            return st;
        if (r->out->p.data)
            for (int64_t j = 0; j < Tb; j++)
                put_p(r, j, r->p_bits[j]);
        if (r->att)
            for (int64_t c = 0; c < r->Dv; c++)
                put_o(r, c, r->o_bits[c]);
        return SMATTN_OK;
    }
    int nan = p->empty_rows == SMATTN_EMPTY_NAN;
    if (r->out->p.data)
        for (int64_t j = 0; j < T; j++)
            put_p(r, j, nan ? smattn__ref_nan_bits(r->out->p.dtype) : 0);
    if (r->att)
        for (int64_t c = 0; c < r->Dv; c++)
            put_o(r, c, nan ? smattn__ref_nan_bits(r->out->o.dtype) : 0);
    return SMATTN_OK;
}

/* A row whose scores hold a NaN or +inf (SPEC 4.2). */
static void write_nan_row(ref_row *r)
{
    put_lse(r, smattn__ref_nan_bits(r->out->lse.data ? r->out->lse.dtype : SMATTN_F64));
    if (r->att)
        for (int64_t c = 0; c < r->Dv; c++)
            put_o(r, c, smattn__ref_nan_bits(r->out->o.dtype));
    if (r->out->p.data) {
        for (int64_t j = 0; j < r->p->T; j++)
            put_p(r, j, 0);
        for (int64_t jj = 0; jj < r->n; jj++)
            put_p(r, r->idx[jj], smattn__ref_nan_bits(r->out->p.dtype));
    }
}

/* ---- one row ----------------------------------------------------------------------------- */

typedef struct ref_job {
    const smattn_problem *p;
    const smattn_inputs *in;
    const smattn_outputs *out;
    const smattn_ref_config *cfg;
    int64_t rows;
    const int64_t *list;    /* the rows to evaluate (ref/rows.c), or NULL: rows 0..rows-1 */
    atomic_llong next;
    atomic_llong done;      /* rows finished, for progress */
    pthread_t caller;       /* the thread of smattn_ref: the only one that calls progress */
    smattn_progress_fn progress;
    void *progress_arg;
    int64_t unit;           /* progress units per row: T, or 1 if rows * T overflows */
    int64_t reported;       /* the last progress reported (the calling thread's only) */
    ref_fail fail;          /* the lowest failing row; its lock guards stats */
    smattn_ref_stats stats;
} ref_job;

/* Visible keys, the sink, and the NaN and V-class rules. Returns 0 for a row to compute,
 * 1 for a row already written. */
static int prepare(ref_row *r, smattn_status *st)
{
    const smattn_problem *p = r->p;
    const smattn_inputs *in = r->in;
    *st = SMATTN_OK;
    r->n = 0;
    r->has_sink = 0;
    if (r->i >= smattn__q_len(p, r->b)) /* padding query: nothing is read */
        return *st = write_empty(r), 1;
    int64_t lo, hi;
    smattn__key_range(p, r->b, r->i, &lo, &hi);
    for (int64_t j = lo; j < hi; j++) {
        if (!smattn__mask_allows(p, in, r->b, r->h, r->i, j))
            continue;
        if (in->bias.data && smattn__ref_bias_raw(r, j) == -HUGE_VAL)
            continue;
        if (!r->att && smattn__ref_x(r, j) == -HUGE_VAL)
            continue;
        r->idx[r->n++] = j;
    }
    int nan = 0;
    if (in->sinks.data) {
        double s = smattn_load(in->sinks.data, in->sinks.dtype, r->h * in->sinks.stride[0]);
        if (isnan(s) || s == HUGE_VAL)
            nan = 1;
        else if (s != -HUGE_VAL) {
            r->has_sink = 1;
            r->sink = s;
        }
    }
    if (!nan && r->n == 0 && !r->has_sink)
        return *st = write_empty(r), 1;
    if (!nan && r->att && r->n > 0)
        for (int64_t d = 0; d < r->D; d++) {
            const smattn_tensor *t = &in->q;
            r->qd[d] = smattn_load(t->data, t->dtype,
                                   smattn__row_off(p, t->stride, r->b, r->i, r->h, d)) *
                       r->dq; /* exact (SPEC 2.9) */
            if (!isfinite(r->qd[d]))
                nan = 1;
        }
    for (int64_t jj = 0; jj < r->n && !nan; jj++) {
        int64_t j = r->idx[jj];
        double bj = smattn__ref_bias_raw(r, j);
        if (isnan(bj) || bj == HUGE_VAL)
            nan = 1;
        if (!r->att) {
            double x = smattn__ref_x(r, j);
            if (isnan(x) || x == HUGE_VAL)
                nan = 1;
        } else {
            for (int64_t d = 0; d < r->D && !nan; d++)
                if (!isfinite(smattn__ref_k(r, j, d)))
                    nan = 1;
        }
    }
    if (nan) {
        write_nan_row(r);
        return 1;
    }
    if (r->n == 0) { /* the sink alone: O = +0, P = +0, LSE = sink exactly */
        if (r->out->lse.data)
            put_lse(r, smattn__round_bits(r->sink, r->out->lse.dtype));
        if (r->att)
            for (int64_t c = 0; c < r->Dv; c++)
                put_o(r, c, 0);
        if (r->out->p.data)
            for (int64_t j = 0; j < p->T; j++)
                put_p(r, j, 0);
        return 1;
    }
    for (int64_t c = 0; c < r->Dv; c++) {
        int has_nan = 0, pos = 0, neg = 0;
        for (int64_t jj = 0; jj < r->n; jj++) {
            double v = smattn__ref_v(r, r->idx[jj], c);
            has_nan |= isnan(v);
            pos |= v == HUGE_VAL;
            neg |= v == -HUGE_VAL;
        }
        r->vclass[c] = has_nan || (pos && neg) ? VCLASS_NAN
                       : pos                   ? VCLASS_POS_INF
                       : neg                   ? VCLASS_NEG_INF
                                               : VCLASS_FINITE;
        r->o_done[c] = r->vclass[c] != VCLASS_FINITE;
        if (r->vclass[c] == VCLASS_NAN)
            r->o_bits[c] = smattn__ref_nan_bits(r->out->o.dtype);
        else if (r->vclass[c] != VCLASS_FINITE)
            r->o_bits[c] = smattn__ref_inf_bits(r->out->o.dtype, r->vclass[c] == VCLASS_NEG_INF);
    }
    return 0;
}

static smattn_status run_row(ref_row *r, const smattn_ref_config *cfg, smattn_ref_stats *stats)
{
    smattn_status st;
    r->used_rational = 0;
    r->sign_tests = 0;
    r->prec_used = 0;
    r->work = 0;
    r->work_next = r->tick ? REF_TICK_KEYS : INT64_MAX;
    r->lse_done = r->out->lse.data == NULL;
    memset(r->o_done, 0, (size_t)r->Dv);
    memset(r->p_done, 0, (size_t)r->p->T);
    stats->rows++;
    r->was_empty = 0;
    if (!r->out->p.data && !smattn__row_stored(r->p, r->b, r->i)) {
        stats->rows_empty++; /* a packed batch's padding row, no P: nothing to write */
        return SMATTN_OK;
    }
    if (prepare(r, &st)) {
        stats->rows_empty += r->was_empty;
        return st;
    }
    if (!r->out->p.data)
        memset(r->p_done, 1, (size_t)r->n);
    int undecided = 1;
    if (!cfg->no_fast_phase && smattn__ref_fast_row(r)) {
        undecided = !r->lse_done;
        for (int64_t c = 0; c < r->Dv; c++)
            undecided |= !r->o_done[c];
        for (int64_t jj = 0; jj < r->n; jj++)
            undecided |= !r->p_done[jj];
        if (!undecided)
            stats->rows_fast++;
    }
    if (undecided) {
        long maxp = cfg->max_prec > 0 ? cfg->max_prec : REF_DEFAULT_MAX_PREC;
        st = smattn__ref_exact_row(r, cfg->fixed_prec, maxp);
        if (st)
            return st;
    }
    stats->rows_rational += r->used_rational;
    stats->elems_sign_test += r->sign_tests;
    if (r->prec_used > stats->max_prec_used)
        stats->max_prec_used = r->prec_used;
    put_lse(r, r->lse_bits);
    if (r->att)
        for (int64_t c = 0; c < r->Dv; c++)
            put_o(r, c, r->o_bits[c]);
    if (r->out->p.data) {
        for (int64_t j = 0; j < r->p->T; j++)
            put_p(r, j, 0);
        for (int64_t jj = 0; jj < r->n; jj++)
            put_p(r, r->idx[jj], r->p_bits[jj]);
    }
    return SMATTN_OK;
}

/* ---- workers ----------------------------------------------------------------------------- */

/* Report progress from the calling thread, never backwards. */
static void report(ref_job *job, int64_t done)
{
    int64_t total = job->rows * job->unit;
    if (done >= total)
        done = total - 1; /* done == total only once, at the end */
    if (done <= job->reported)
        return;
    job->reported = done;
    job->progress(done, total, job->progress_arg);
}

/* Within a row: the rows finished by all threads, plus an estimate of this row's share
 * from the keys its passes have gone through. A row makes several passes (scores, weights,
 * the exact phase's levels), a number not known in advance: w / (w + 4 (n + 1)) of a row
 * grows with the work and stays below 1 until the row is done. */
static void ref_tick(ref_row *r)
{
    ref_job *job = r->tick_arg;
    r->work_next = r->work + REF_TICK_KEYS;
    double w = (double)r->work, f = w / (w + 4.0 * (double)(r->n + 1));
    int64_t rows = (int64_t)atomic_load(&job->done);
    report(job, rows * job->unit + (int64_t)(f * (double)(job->unit - 1)));
}

static void row_free(ref_row *r)
{
    free(r->idx), free(r->vclass), free(r->qd), free(r->o_bits), free(r->o_done);
    free(r->p_bits), free(r->p_done), free(r->s_hi), free(r->s_lo), free(r->s_err);
    free(r->e_hi), free(r->e_lo), free(r->e_rel), free(r->acc), free(r->buf);
    mpfr_clears(r->fx, r->fe, r->ft, (mpfr_ptr)0);
}

static int row_alloc(ref_row *r, const ref_job *job)
{
    const smattn_problem *p = job->p;
    memset(r, 0, sizeof *r);
    r->p = p;
    r->in = job->in;
    r->out = job->out;
    r->att = p->op == SMATTN_OP_ATTENTION;
    r->D = r->att ? p->D : 0;
    r->Dv = r->att ? p->Dv : 0;
    size_t T = (size_t)p->T, D = (size_t)(r->D ? r->D : 1), Dv = (size_t)(r->Dv ? r->Dv : 1);
    r->idx = malloc(T * sizeof *r->idx);
    r->vclass = malloc(Dv);
    r->qd = malloc(D * sizeof *r->qd);
    r->o_bits = malloc(Dv * sizeof *r->o_bits);
    r->o_done = malloc(Dv);
    r->p_bits = malloc(T * sizeof *r->p_bits);
    r->p_done = malloc(T);
    r->s_hi = malloc(T * sizeof(double));
    r->s_lo = malloc(T * sizeof(double));
    r->s_err = malloc(T * sizeof(double));
    r->e_hi = malloc(T * sizeof(double));
    r->e_lo = malloc(T * sizeof(double));
    r->e_rel = malloc(T * sizeof(double));
    r->acc = malloc(4 * Dv * sizeof(double));
    r->buf = malloc((D > Dv ? D : Dv) * sizeof(double));
    mpfr_inits2(REF_FAST_PREC, r->fx, r->fe, r->ft, (mpfr_ptr)0);
    if (!r->idx || !r->vclass || !r->qd || !r->o_bits || !r->o_done || !r->p_bits ||
        !r->p_done || !r->s_hi || !r->s_lo || !r->s_err || !r->e_hi || !r->e_lo || !r->e_rel ||
        !r->acc || !r->buf) {
        row_free(r);
        return -1;
    }
    return 0;
}

static void record_failure(ref_job *job, int64_t row, smattn_status st)
{
    smattn__ref_fail_record(&job->fail, row, st);
}

static void *worker(void *arg)
{
    ref_job *job = arg;
    mpfr_exp_t range[2];
    smattn__ref_mpfr_widen(range);
    ref_row r;
    smattn_ref_stats stats;
    memset(&stats, 0, sizeof stats);
    if (row_alloc(&r, job)) {
        record_failure(job, 0, SMATTN_ERR_NOMEM);
    } else {
        if (job->progress && job->unit > 1 && pthread_equal(pthread_self(), job->caller)) {
            r.tick = ref_tick;
            r.tick_arg = job;
        }
        const smattn_problem *p = job->p;
        const int64_t chunk = 4;
        for (;;) {
            int64_t start = (int64_t)atomic_fetch_add(&job->next, (long long)chunk);
            if (start >= job->rows)
                break;
            int64_t end = start + chunk < job->rows ? start + chunk : job->rows;
            for (int64_t k = start; k < end; k++) {
                int64_t row = job->list ? job->list[k] : k;
                r.b = row / (p->Hq * p->S);
                r.h = (row / p->S) % p->Hq;
                r.i = row % p->S;
                r.g = r.att ? smattn__kv_head(p, r.h) : 0;
                r.dq = smattn__descale(p, 'q', r.b, r.g);
                r.dk = smattn__descale(p, 'k', r.b, r.g);
                r.dv = smattn__descale(p, 'v', r.b, r.g);
                smattn_status st = run_row(&r, job->cfg, &stats);
                if (st)
                    record_failure(job, row, st);
            }
            long long d = atomic_fetch_add(&job->done, (long long)(end - start)) + (end - start);
            if (job->progress && pthread_equal(pthread_self(), job->caller))
                report(job, (int64_t)d * job->unit);
        }
        row_free(&r);
    }
    pthread_mutex_lock(&job->fail.lock);
    job->stats.rows += stats.rows;
    job->stats.rows_empty += stats.rows_empty;
    job->stats.rows_fast += stats.rows_fast;
    job->stats.rows_rational += stats.rows_rational;
    job->stats.elems_sign_test += stats.elems_sign_test;
    if (stats.max_prec_used > job->stats.max_prec_used)
        job->stats.max_prec_used = stats.max_prec_used;
    pthread_mutex_unlock(&job->fail.lock);
    smattn__ref_mpfr_restore(range);
    return NULL;
}

smattn_status smattn_ref(const smattn_problem *p, const smattn_inputs *in,
                         const smattn_outputs *out, const smattn_ref_config *cfg,
                         smattn_ref_stats *stats)
{
    return smattn_ref_progress(p, in, out, cfg, stats, NULL, NULL);
}

smattn_status smattn_ref_progress(const smattn_problem *p, const smattn_inputs *in,
                                  const smattn_outputs *out, const smattn_ref_config *cfg,
                                  smattn_ref_stats *stats, smattn_progress_fn progress,
                                  void *progress_arg)
{
    smattn_status st = smattn_validate(p, in, out);
    if (st)
        return st;
    return smattn__ref_run(p, in, out, cfg, stats, progress, progress_arg, NULL, 0);
}

/* The driver after validation: every row, or the rows of `list` (ref/rows.c checks it). */
smattn_status smattn__ref_run(const smattn_problem *p, const smattn_inputs *in,
                              const smattn_outputs *out, const smattn_ref_config *cfg,
                              smattn_ref_stats *stats, smattn_progress_fn progress,
                              void *progress_arg, const int64_t *list, int64_t nlist)
{
    smattn_ref_config defcfg;
    memset(&defcfg, 0, sizeof defcfg);
    if (!cfg)
        cfg = &defcfg;
    /* the precisions reach mpfr_set_prec and the Ziv loop's doubling: out of range would
     * make MPFR/GMP abort (or the loop overflow) */
    if (cfg->threads < 0 ||
        (cfg->max_prec != 0 && (cfg->max_prec < SMATTN_REF_PREC_MIN || cfg->max_prec > SMATTN_REF_PREC_MAX)) ||
        (cfg->fixed_prec != 0 && (cfg->fixed_prec < SMATTN_REF_PREC_MIN || cfg->fixed_prec > SMATTN_REF_PREC_MAX)))
        return SMATTN_ERR_OPTION;
    ref_job job;
    memset(&job, 0, sizeof job);
    job.p = p;
    job.in = in;
    job.out = out;
    job.cfg = cfg;
    job.rows = list ? nlist : p->B * p->Hq * p->S; /* fits: validation bounded every offset */
    job.list = list;
    atomic_init(&job.next, 0);
    atomic_init(&job.done, 0);
    job.caller = pthread_self();
    job.progress = progress;
    job.progress_arg = progress_arg;
    job.unit = p->T > 0 && job.rows <= INT64_MAX / p->T ? p->T : 1;
    job.reported = 0;
    if (smattn__ref_fail_init(&job.fail))
        return SMATTN_ERR_THREADS;
    /* each thread takes rows 4 at a time */
    smattn__ref_threads(cfg->threads, (job.rows + 3) / 4, worker, &job);
    smattn_status st = smattn__ref_fail_done(&job.fail);
    if (progress)
        progress(job.rows * job.unit, job.rows * job.unit, progress_arg);
    if (stats)
        *stats = job.stats;
    return st;
}
