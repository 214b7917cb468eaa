/* SPDX-License-Identifier: MIT */
/* backward.c: the fast backward's entry point: validation, the stored O and LSE (or the
 * forward run here), the operands staged as binary32 blocks, each row's class, Delta, and
 * the two passes (dK/dV by key blocks, dQ by query blocks) over the thread pool. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "core/layout.h"
#include "opt/backward_internal.h"

static const bw_isa *bw_isa_by_name(const char *name)
{
    if (!name)
        name = smattn_opt_isa();
    if (!smattn__isa_known(name) || !smattn_opt_isa_available(name))
        return NULL;
    if (strcmp(name, "scalar") == 0)
        return &smattn__bw_isa_scalar;
    if (strcmp(name, "avx2") == 0)
        return &smattn__bw_isa_avx2;
    return &smattn__bw_isa_avx512;
}

static int bw_env_threads(void)
{
    const char *e = getenv("SMATTN_NUM_THREADS");
    if (!e || !*e)
        return 0;
    char *end;
    long n = strtol(e, &end, 10);
    return *end == 0 && n > 0 && n <= 1024 ? (int)n : 0;
}

static size_t ds_budget = (size_t)512 << 20;

size_t smattn__bw_set_ds_budget(size_t bytes)
{
    size_t was = ds_budget;
    ds_budget = bytes;
    return was;
}

static int is_half_or_f32(smattn_dtype t)
{
    return t == SMATTN_F32 || t == SMATTN_F16 || t == SMATTN_BF16;
}

/* Every element of a [n0,n1,n2,n3] tensor finite (-inf allowed if neg_inf_ok)? */
static int all_finite(const smattn_tensor *t, const int64_t n[4], int neg_inf_ok)
{
    for (int64_t a = 0; a < n[0]; a++)
        for (int64_t b = 0; b < n[1]; b++)
            for (int64_t c = 0; c < n[2]; c++)
                for (int64_t d = 0; d < n[3]; d++) {
                    double x = smattn_load(t->data, t->dtype,
                                           a * t->stride[0] + b * t->stride[1] +
                                               c * t->stride[2] + d * t->stride[3]);
                    if (!isfinite(x) && !(neg_inf_ok && x == -HUGE_VAL))
                        return 0;
                }
    return 1;
}

/* Row r of an [n0][n1][n2][cols] tensor as binary32 into dst, zero padded to ld. */
static void stage_row(float *dst, int64_t ld, const smattn_tensor *t, int64_t off, int64_t cols)
{
    if (t->dtype == SMATTN_F32)
        for (int64_t c = 0; c < cols; c++)
            dst[c] = opt_ld_f32(t->data, off + c * t->stride[3]);
    else if (t->dtype == SMATTN_BF16)
        for (int64_t c = 0; c < cols; c++) {
            uint16_t h;
            memcpy(&h, (const unsigned char *)t->data + 2 * (off + c * t->stride[3]), 2);
            uint32_t u = (uint32_t)h << 16;
            memcpy(&dst[c], &u, 4);
        }
    else
        for (int64_t c = 0; c < cols; c++)
            dst[c] = (float)smattn_load(t->data, t->dtype, off + c * t->stride[3]);
    for (int64_t c = cols; c < ld; c++)
        dst[c] = 0.0f;
}

/* Copies element (a0..a3) of a dense staging gradient to its place in the layout's tensor,
 * bit for bit (the same dtype). */
static void copy_elem(const smattn_out_tensor *dst, int64_t doff, const smattn_out_tensor *src,
                      int64_t soff)
{
    const size_t w = smattn_dtype_size(dst->dtype);
    memcpy((unsigned char *)dst->data + (size_t)doff * w,
           (const unsigned char *)src->data + (size_t)soff * w, w);
}

/* +0 in every element of an [n0, n1, n2, n3] output */
static void zero_out(const smattn_out_tensor *t, int64_t n0, int64_t n1, int64_t n2, int64_t n3)
{
    const size_t w = smattn_dtype_size(t->dtype);
    for (int64_t a = 0; a < n0; a++)
        for (int64_t b = 0; b < n1; b++)
            for (int64_t c = 0; c < n2; c++)
                for (int64_t d = 0; d < n3; d++)
                    memset((unsigned char *)t->data +
                               (size_t)smattn__off4(t->stride, a, b, c, d) * w,
                           0, w);
}

/* A layout's gradients (SPEC 10.1) from the dense twin's in `twin`: dQ of the stored rows
 * through smattn__row_off, dK and dV of the keys t < T_b through smattn__key_off, +0 in the
 * rest of the storage. The same bits as the dense problem's by construction. */
static void scatter_layout(const smattn_problem *p, const smattn_grad_outputs *twin,
                           const smattn_grad_outputs *out)
{
    int64_t qn[2], kn[2];
    smattn__storage_rows(p, qn, kn);
    zero_out(&out->dq, qn[0], qn[1], p->Hq, p->D);
    zero_out(&out->dk, kn[0], kn[1], p->Hkv, p->D);
    zero_out(&out->dv, kn[0], kn[1], p->Hkv, p->Dv);
    for (int64_t b = 0; b < p->B; b++) {
        for (int64_t i = 0; i < p->S; i++)
            for (int64_t h = 0; smattn__row_stored(p, b, i) && h < p->Hq; h++)
                for (int64_t d = 0; d < p->D; d++)
                    copy_elem(&out->dq, smattn__row_off(p, out->dq.stride, b, i, h, d),
                              &twin->dq, smattn__off4(twin->dq.stride, b, i, h, d));
        for (int64_t t = 0; t < smattn__kv_len(p, b); t++)
            for (int64_t g = 0; g < p->Hkv; g++) {
                for (int64_t d = 0; d < p->D; d++)
                    copy_elem(&out->dk, smattn__key_off(p, out->dk.stride, b, t, g, d),
                              &twin->dk, smattn__off4(twin->dk.stride, b, t, g, d));
                for (int64_t d = 0; d < p->Dv; d++)
                    copy_elem(&out->dv, smattn__key_off(p, out->dv.stride, b, t, g, d),
                              &twin->dv, smattn__off4(twin->dv.stride, b, t, g, d));
            }
    }
}

/* ALiBi (SPEC 2.8) as the dense binary32 bias the kernel body reads: the slope times the
 * bias (mask mode; -inf stays -inf, hiding the key whatever the slope), or the term of the
 * other modes, each rounded once (SPEC 10.7 B1 with 6.2.3: an addend of two roundings).
 * NULL on allocation failure. */
static float *alibi_bias(const smattn_problem *p, const smattn_inputs *in, int64_t st[4])
{
    const int64_t B = p->B, Hq = p->Hq, S = p->S, T = p->T;
    float *ab = malloc((size_t)(B * Hq * S * T) * sizeof *ab);
    if (!ab)
        return NULL;
    st[3] = 1, st[2] = T, st[1] = S * T, st[0] = Hq * S * T;
    for (int64_t b = 0; b < B; b++)
        for (int64_t h = 0; h < Hq; h++) {
            const double m = (double)smattn__alibi_slope(p, b, h);
            for (int64_t i = 0; i < S; i++)
                for (int64_t j = 0; j < T; j++) {
                    double x;
                    if (p->alibi_mode == SMATTN_ALIBI_MASK) {
                        x = smattn_load(in->bias.data, in->bias.dtype,
                                        smattn__off4(in->bias.stride, b, h, i, j));
                        if (x != -HUGE_VAL)
                            x *= m; /* exact: 24 + 24 bits */
                    } else {
                        x = smattn__alibi_term(p, b, h, i, j);
                    }
                    ab[smattn__off4(st, b, h, i, j)] = (float)x;
                }
        }
    return ab;
}

typedef struct bw_run {
    const bw_job *job;
    const bw_isa *isa;
} bw_run;

static void run_dkdv(void *ctx, int64_t item, int worker)
{
    const bw_run *r = ctx;
    r->isa->dkdv_item(r->job, item, worker);
}

static void run_dq(void *ctx, int64_t item, int worker)
{
    const bw_run *r = ctx;
    r->isa->dq_item(r->job, item, worker);
}

static void run_db(void *ctx, int64_t item, int worker)
{
    const bw_run *r = ctx;
    r->isa->db_item(r->job, item, worker);
}

static void job_free(bw_job *j)
{
    free(j->q), free(j->dO), free(j->k), free(j->kt), free(j->vt), free(j->lse);
    free(j->delta), free(j->lo), free(j->hi), free(j->cls), free(j->nan_group), free(j->ds);
    free(j->scratch);
}

/* The staging's work items: first the query rows by (b, h, query block), then the keys by
 * (b, g, key block). Each writes only its own rows of the staged operands (and of lo, hi,
 * cls, lse, delta) or its own keys and transposed key block, and its own verdict. */
typedef struct bw_stage {
    bw_job *job;
    const smattn_inputs *in;
    const smattn_grad_inputs *gin;
    const smattn_outputs *fo; /* the stored O and LSE */
    int64_t nq_items;
    unsigned char *bad; /* per item: a non-finite Q, K, V or dO element staged */
    float *mag;         /* per item, 4 each: max |Q|, |dO|, |O|, |dLSE| (query items); |K|, |V| */
} bw_stage;

/* The largest |x_c| of a staged row as its binary32 bits, sign cleared: integers order
 * finite magnitudes as floats do, and every infinity or NaN lies at or above 0x7f800000,
 * so one integer max (which vectorises, where a float max with NaN's rules does not) gives
 * both the finiteness verdict and the magnitude. */
static int32_t row_absbits(const float *x, int64_t n)
{
    int32_t m = 0;
    for (int64_t c = 0; c < n; c++) {
        int32_t u;
        memcpy(&u, &x[c], sizeof u);
        u &= 0x7fffffff;
        m = u > m ? u : m;
    }
    return m;
}

/* Fold a row's row_absbits into *mag (the largest finite magnitude so far); whether the
 * row is finite. */
static int row_fold(int32_t bits, float *mag)
{
    float f;
    memcpy(&f, &bits, sizeof f);
    *mag = bits < 0x7f800000 && f > *mag ? f : *mag;
    return bits < 0x7f800000;
}

/* Query rows of block qb of head (b, h): Q and dO staged, each row's key range, its class
 * (SPEC 10.2), its stored LSE and Delta = dO . O - dLSE. Returns 0 if a staged Q or dO
 * element, or the stored LSE of a row that sees keys, is not finite. */
static int stage_queries(const bw_stage *sg, int64_t item, float *orow, float mag[4])
{
    bw_job *job = sg->job;
    const smattn_problem *p = job->p;
    const smattn_inputs *in = sg->in;
    const smattn_grad_inputs *gin = sg->gin;
    const smattn_outputs *fo = sg->fo;
    const int64_t S = p->S, Hq = p->Hq, D = p->D, Dv = p->Dv;
    const int64_t qb = item % job->nqb, h = item / job->nqb % Hq, b = item / job->nqb / Hq;
    const int64_t i1 = (qb + 1) * BW_BQ < S ? (qb + 1) * BW_BQ : S;
    int ok = 1;
    for (int64_t i = qb * BW_BQ; i < i1; i++) {
        const int64_t row = (b * Hq + h) * S + i;
        smattn__key_range(p, b, i, &job->lo[row], &job->hi[row]);
        if (!smattn__row_stored(p, b, i)) { /* a packed padding row: no storage */
            memset(job->q + row * job->Dp, 0, (size_t)job->Dp * sizeof(float));
            memset(job->dO + row * job->Dvp, 0, (size_t)job->Dvp * sizeof(float));
            job->cls[row] = BW_ROW_SKIP; /* no O, no loss term (SPEC 10.1) */
            continue;
        }
        stage_row(job->q + row * job->Dp, job->Dp, &in->q,
                  smattn__row_off(p, in->q.stride, b, i, h, 0), D);
        stage_row(job->dO + row * job->Dvp, job->Dvp, &gin->dout,
                  smattn__row_off(p, gin->dout.stride, b, i, h, 0), Dv);
        ok &= row_fold(row_absbits(job->q + row * job->Dp, D), &mag[0]);
        ok &= row_fold(row_absbits(job->dO + row * job->Dvp, Dv), &mag[1]);
        int64_t nvis = 0;
        for (int64_t j = job->lo[row]; j < job->hi[row] && !nvis; j++) {
            if (!smattn__mask_allows(p, in, b, h, i, j))
                continue;
            if (in->bias.data &&
                smattn_load(in->bias.data, in->bias.dtype,
                            smattn__off4(in->bias.stride, b, h, i, j)) == -HUGE_VAL)
                continue;
            nvis = 1;
        }
        const int sink = in->sinks.data && i < smattn__q_len(p, b) &&
                         smattn_load(in->sinks.data, in->sinks.dtype, h * in->sinks.stride[0]) !=
                             -HUGE_VAL;
        unsigned char cls = BW_ROW_REGULAR;
        if (!nvis && !sink)
            cls = p->empty_rows == SMATTN_EMPTY_NAN ? BW_ROW_NAN
                  : p->empty_rows == SMATTN_EMPTY_MEAN && smattn__kv_len(p, b) > 0
                      ? BW_ROW_MEAN
                      : BW_ROW_SKIP; /* a `nan` row's group: marked after the run */
        else if (!nvis)
            cls = BW_ROW_SKIP; /* the sink alone: nothing flows to q, k, v */
        job->cls[row] = cls;
        if (cls != BW_ROW_REGULAR)
            continue;
        job->lse[row] = (float)smattn_load(fo->lse.data, fo->lse.dtype,
                                           smattn__lse_off(p, fo->lse.stride, b, h, i));
        /* a row that sees keys has a finite LSE: an infinite one (scores past binary32,
         * where the forward's LSE overflows) would give P = exp(inf - inf) = NaN */
        ok &= isfinite(job->lse[row]) != 0;
        const smattn_tensor ot = {fo->o.data, fo->o.dtype,
                                  {fo->o.stride[0], fo->o.stride[1], fo->o.stride[2],
                                   fo->o.stride[3]}};
        stage_row(orow, Dv, &ot, smattn__row_off(p, ot.stride, b, i, h, 0), Dv);
        /* a non-finite O is the bound's (out of contract), not a refusal */
        (void)row_fold(row_absbits(orow, Dv), &mag[2]);
        const float *dO = job->dO + row * job->Dvp;
        float dl = 0.0f;
        for (int64_t c = 0; c < Dv; c++)
            dl += dO[c] * orow[c]; /* two roundings, no libm call */
        if (gin->dlse.data) {
            const float x = (float)smattn_load(gin->dlse.data, gin->dlse.dtype,
                                               smattn__lse_off(p, gin->dlse.stride, b, h, i));
            mag[3] = fabsf(x) > mag[3] ? fabsf(x) : mag[3];
            dl -= x;
        }
        job->delta[row] = dl;
    }
    return ok;
}

/* Whether no sum of the passes can leave binary32's range, from the staged inputs' largest
 * magnitudes m (max |Q|, |dO|, |O|, |dLSE|, |K|, |V|): dP = dO . v_j and Delta = dO . O -
 * dLSE each below 2^126, so that dS = P (dP - Delta) (1 - t^2) is finite (0 <= P <= 1),
 * and the largest dQ (|scale| T max|dS| max|K|), dK (|scale| S G max|dS| max|Q|), dV (S G
 * max|dO|), dSinks (B S max|Delta|) and a summed dBias (db_terms max|dS|) below 2^126
 * too, and so are the scores, before the scale (D max|Q| max|K|: q . k is formed first, in
 * binary32) and after it without softcap (|scale| times that; softcap bounds them). Beyond,
 * dP - Delta can be inf - inf, a key no row sees gets 0 * NaN, and an infinite score gives
 * P = exp(inf - inf): such inputs are the oracle's (smattn.h). */
static int magnitudes_fit(const smattn_problem *p, const float mf[6], double db_terms)
{
    double m[6];
    for (int k = 0; k < 6; k++)
        m[k] = (double)mf[k];
    const double lim = 0x1p126, G = (double)(p->Hq / p->Hkv), S = (double)p->S;
    const double dp = (double)p->Dv * m[1] * m[5], dl = (double)p->Dv * m[1] * m[2] + m[3];
    const double ds = dp + dl, sc = fabs(p->scale);
    const double need[8] = {dp,
                            dl,
                            (double)p->D * m[0] * m[4] * fmax(1.0, p->softcap > 0 ? 1.0 : sc),
                            sc * (double)p->T * ds * m[4],
                            sc * S * G * ds * m[0],
                            S * G * m[1],
                            (double)p->B * S * dl,
                            db_terms * ds};
    for (int k = 0; k < 8; k++)
        if (!(need[k] < lim))
            return 0;
    return 1;
}

/* dSinks (SPEC 10.1, B13): per query head h, the sum over batches and queries, in that
 * order, of P_sink (dLSE - Delta) in binary32, rounded once to dsinks's dtype. A row that
 * sees keys takes P_sink = exp(fl(zeta - LSE)) from the stored LSE and dLSE - Delta as
 * staged (job->delta holds its negation, one rounding); a row that sees the sink alone has
 * P_sink = 1 and O = +0, so its term is dLSE; rows without storage, past q_len or with an
 * empty row's class add nothing; a head without a sink, or with a -inf one, gets +0. The
 * rows are read after the staging, on one thread: a fixed order, the same bits at every
 * thread count. */
static void write_dsinks(const bw_job *job, const smattn_inputs *in, const smattn_grad_inputs *gin,
                         const smattn_out_tensor *ds)
{
    const smattn_problem *p = job->p;
    const int64_t B = p->B, S = p->S, Hq = p->Hq;
    for (int64_t h = 0; h < Hq; h++) {
        float acc = 0.0f;
        const double zeta =
            in->sinks.data ? smattn_load(in->sinks.data, in->sinks.dtype, h * in->sinks.stride[0])
                           : -HUGE_VAL;
        for (int64_t b = 0; zeta != -HUGE_VAL && b < B; b++)
            for (int64_t i = 0; i < S; i++) {
                const int64_t row = (b * Hq + h) * S + i;
                if (job->cls[row] == BW_ROW_REGULAR) {
                    const float ps = expf((float)zeta - job->lse[row]);
                    acc += ps * -job->delta[row];
                } else if (job->cls[row] == BW_ROW_SKIP && smattn__row_stored(p, b, i) &&
                           i < smattn__q_len(p, b)) { /* the sink alone */
                    acc += gin->dlse.data
                               ? (float)smattn_load(gin->dlse.data, gin->dlse.dtype,
                                                    smattn__lse_off(p, gin->dlse.stride, b, h, i))
                               : 0.0f;
                }
            }
        smattn_store(ds->data, ds->dtype, h * ds->stride[0], (double)(acc + 0.0f));
    }
}

/* Keys of block kb of KV head (b, g): K by key and as the transposed block, V transposed.
 * A layout's keys past T_b have no storage: left +0 (calloc), never seen. Returns 0 if a
 * staged K or V element is not finite. */
static int stage_keys(const bw_stage *sg, int64_t item, float *orow, float mag[4])
{
    bw_job *job = sg->job;
    const smattn_problem *p = job->p;
    const smattn_inputs *in = sg->in;
    const int64_t Hkv = p->Hkv, D = p->D, Dv = p->Dv, Tp = job->nkb * BW_BK;
    const int64_t kb = item % job->nkb, g = item / job->nkb % Hkv, b = item / job->nkb / Hkv;
    const int64_t T = p->layout ? smattn__kv_len(p, b) : p->T;
    const int64_t j1 = (kb + 1) * BW_BK < T ? (kb + 1) * BW_BK : T;
    float *kt = job->kt + ((b * Hkv + g) * job->nkb + kb) * job->Dp * BW_BK;
    float *vt = job->vt + ((b * Hkv + g) * job->nkb + kb) * job->Dvp * BW_BK;
    int ok = 1;
    for (int64_t j = kb * BW_BK; j < j1; j++) {
        const int64_t c = j % BW_BK;
        float *kr = job->k + ((b * Hkv + g) * Tp + j) * job->Dp;
        stage_row(kr, job->Dp, &in->k, smattn__key_off(p, in->k.stride, b, j, g, 0), D);
        for (int64_t d = 0; d < D; d++)
            kt[d * BW_BK + c] = kr[d];
        stage_row(orow, Dv, &in->v, smattn__key_off(p, in->v.stride, b, j, g, 0), Dv);
        for (int64_t d = 0; d < Dv; d++)
            vt[d * BW_BK + c] = orow[d];
        ok &= row_fold(row_absbits(kr, D), &mag[0]);
        ok &= row_fold(row_absbits(orow, Dv), &mag[1]);
    }
    return ok;
}

static void run_stage(void *ctx, int64_t item, int worker)
{
    const bw_stage *sg = ctx;
    float *orow = sg->job->scratch + (int64_t)worker * sg->job->scratch_len;
    float *mag = sg->mag + 4 * item;
    sg->bad[item] = !(item < sg->nq_items ? stage_queries(sg, item, orow, mag)
                                          : stage_keys(sg, item - sg->nq_items, orow, mag));
}

static smattn_status backward_run(const smattn_problem *p, const smattn_inputs *in,
                                  const smattn_inputs *orig, const float *term,
                                  const smattn_forward_saved *saved, const smattn_grad_inputs *gin,
                                  const smattn_grad_outputs *gout, const smattn_opt_config *cfg);

smattn_status smattn_attention_backward(const smattn_problem *p, const smattn_inputs *in,
                                        const smattn_forward_saved *saved,
                                        const smattn_grad_inputs *gin,
                                        const smattn_grad_outputs *gout,
                                        const smattn_opt_config *cfg)
{
    smattn_status st = smattn__validate_backward(p, in, gin, gout);
    if (st)
        return st;
    /* ALiBi folded into a binary32 bias the passes read, fl(m bias) in the mask mode, fl(m d)
     * in the others; beside a bias added as is, the term stays apart (term, [B,Hq,S,T]) and
     * is added after the bias, each addition rounded, as the forward adds them (SPEC 10.8) */
    smattn_inputs ain;
    float *ab = NULL, *term = NULL;
    if (p->alibi_mode != SMATTN_ALIBI_NONE) {
        int64_t st4[4];
        if (!(ab = alibi_bias(p, in, st4)))
            return SMATTN_ERR_NOMEM;
        ain = *in;
        if (p->alibi_mode == SMATTN_ALIBI_MASK || !in->bias.data)
            ain.bias = (smattn_tensor){ab, SMATTN_F32, {st4[0], st4[1], st4[2], st4[3]}};
        else
            term = ab;
    }
    const smattn_inputs *ein = ab ? &ain : in;
    if (!p->layout) {
        st = backward_run(p, ein, in, term, saved, gin, gout, cfg);
        free(ab);
        return st;
    }
    /* A layout (SPEC 2.7, 10.1): the passes write the dense twin's gradients, in the
     * outputs' own dtypes, then each element goes to its storage through the locator. */
    smattn_grad_outputs twin;
    memset(&twin, 0, sizeof twin);
    const smattn_out_tensor *go3[3] = {&gout->dq, &gout->dk, &gout->dv};
    smattn_out_tensor *tw3[3] = {&twin.dq, &twin.dk, &twin.dv};
    const char roles[3] = {'q', 'k', 'v'};
    twin.dsinks = gout->dsinks; /* [Hq] whatever the layout: written in place */
    twin.dbias = gout->dbias;   /* the twin's [B,Hq,S,T] whatever the layout: in place */
    smattn_problem dense = *p;
    dense.layout = NULL; /* the twin's dense shapes for the strides */
    for (int k = 0; k < 3 && !st; k++) {
        tw3[k]->dtype = go3[k]->dtype;
        int64_t n = k == 0 ? p->B * p->S * p->Hq * p->D
                           : p->B * p->T * p->Hkv * (k == 1 ? p->D : p->Dv);
        tw3[k]->data = malloc((size_t)n * smattn_dtype_size(go3[k]->dtype));
        if (!tw3[k]->data)
            st = SMATTN_ERR_NOMEM;
        else
            st = smattn_contiguous_strides(&dense, roles[k], tw3[k]->stride);
    }
    if (!st)
        st = backward_run(p, ein, in, term, saved, gin, &twin, cfg);
    if (!st)
        scatter_layout(p, &twin, gout);
    free(twin.dq.data), free(twin.dk.data), free(twin.dv.data);
    free(ab);
    return st;
}

/* The passes over a validated problem, writing gout in the dense twin's shapes
 * (smattn_attention_backward scatters a layout's). in: the inputs with ALiBi folded into
 * the bias, which the passes read; term: with a bias beside the symmetric or one-sided
 * term, the terms apart ([B,Hq,S,T] contiguous), else NULL; orig: the caller's, for the
 * forward. */
static smattn_status backward_run(const smattn_problem *p, const smattn_inputs *in,
                                  const smattn_inputs *orig, const float *term,
                                  const smattn_forward_saved *saved, const smattn_grad_inputs *gin,
                                  const smattn_grad_outputs *gout, const smattn_opt_config *cfg)
{
    smattn_status st;
    if (cfg && ((cfg->isa && !smattn__isa_known(cfg->isa)) || cfg->threads < 0))
        return SMATTN_ERR_OPTION;
    const bw_isa *isa = bw_isa_by_name(cfg ? cfg->isa : NULL);
    if (!isa)
        return SMATTN_ERR_UNSUPPORTED; /* a known ISA this CPU lacks */
    /* the saved forward: O [B,S,Hq,Dv] and LSE [B,Hq,S], checked as the forward's outputs */
    smattn_outputs fo;
    memset(&fo, 0, sizeof fo);
    if (saved) {
        if (!saved->o.data || !saved->lse.data)
            return SMATTN_ERR_NULL;
        fo.o = (smattn_out_tensor){(void *)(uintptr_t)saved->o.data, saved->o.dtype,
                                   {saved->o.stride[0], saved->o.stride[1], saved->o.stride[2],
                                    saved->o.stride[3]}};
        fo.lse = (smattn_out_tensor){(void *)(uintptr_t)saved->lse.data, saved->lse.dtype,
                                     {saved->lse.stride[0], saved->lse.stride[1],
                                      saved->lse.stride[2], saved->lse.stride[3]}};
        if ((st = smattn_validate(p, orig, &fo)))
            return st;
    }
    /* SPEC 10.7 and smattn.h: what this kernel leaves to the oracle */
    if ((gout->dbias.data && !is_half_or_f32(gout->dbias.dtype)) ||
        (gout->dsinks.data && !is_half_or_f32(gout->dsinks.dtype)))
        return SMATTN_ERR_UNSUPPORTED;
    const smattn_dtype ts[] = {in->q.dtype, in->k.dtype, in->v.dtype, gin->dout.dtype,
                               gout->dq.dtype, gout->dk.dtype, gout->dv.dtype};
    for (size_t k = 0; k < sizeof ts / sizeof ts[0]; k++)
        if (!is_half_or_f32(ts[k]))
            return SMATTN_ERR_UNSUPPORTED;
    if ((in->bias.data && !is_half_or_f32(in->bias.dtype)) ||
        (in->sinks.data && !is_half_or_f32(in->sinks.dtype)) ||
        (gin->dlse.data && !is_half_or_f32(gin->dlse.dtype)) ||
        (saved && (!is_half_or_f32(saved->o.dtype) || !is_half_or_f32(saved->lse.dtype))))
        return SMATTN_ERR_UNSUPPORTED;
    const int64_t B = p->B, S = p->S, T = p->T, Hq = p->Hq, Hkv = p->Hkv, D = p->D, Dv = p->Dv;
    {
        const int64_t nq[4] = {B, S, Hq, D}, nk[4] = {B, T, Hkv, D}, nv[4] = {B, T, Hkv, Dv},
                      no[4] = {B, S, Hq, Dv}, nl[4] = {B, Hq, S, 1}, nf[4] = {B, Hq, S, T},
                      ns[4] = {Hq, 1, 1, 1};
        (void)nq, (void)nk, (void)nv, (void)no; /* Q, K, V, dO: checked as staged below */
        int dlse_ok = 1; /* dLSE has LSE's storage: its stored rows */
        for (int64_t b = 0; gin->dlse.data && b < B; b++)
            for (int64_t h = 0; h < Hq; h++)
                for (int64_t i = 0; i < S && smattn__row_stored(p, b, i); i++)
                    dlse_ok &= isfinite(smattn_load(gin->dlse.data, gin->dlse.dtype,
                                                    smattn__lse_off(p, gin->dlse.stride, b, h,
                                                                    i))) != 0;
        (void)nl;
        if (!dlse_ok || (in->bias.data && !all_finite(&in->bias, nf, 1)) ||
            (orig != in && orig->bias.data && !all_finite(&orig->bias, nf, 1)) ||
            (in->sinks.data && !all_finite(&in->sinks, ns, 1)))
            return SMATTN_ERR_UNSUPPORTED; /* non-finite inputs: smattn_ref_backward */
    }
    int nt = cfg && cfg->threads > 0 ? cfg->threads : bw_env_threads();
    if (nt <= 0 || nt > smattn__ncpu())
        nt = smattn__ncpu();

    bw_job job;
    memset(&job, 0, sizeof job);
    float *o_own = NULL, *l_own = NULL;
    if (!saved) { /* the forward, here: O and LSE in binary32 */
        o_own = malloc((size_t)(B * S * Hq * Dv) * sizeof *o_own);
        l_own = malloc((size_t)(B * Hq * S) * sizeof *l_own);
        if (!o_own || !l_own) {
            free(o_own), free(l_own);
            return SMATTN_ERR_NOMEM;
        }
        fo.o = (smattn_out_tensor){o_own, SMATTN_F32, {0}};
        fo.lse = (smattn_out_tensor){l_own, SMATTN_F32, {0}};
        smattn_opt_config fc = {nt, isa->name};
        if ((st = smattn_contiguous_strides(p, 'o', fo.o.stride)) ||
            (st = smattn_contiguous_strides(p, 'l', fo.lse.stride)) ||
            (st = smattn_attention(p, orig, &fo, &fc))) {
            free(o_own), free(l_own);
            return st;
        }
    }
    job.p = p;
    job.in = in;
    job.out = gout;
    job.scale_hi = (float)p->scale;
    job.scale_lo = (float)(p->scale - (double)job.scale_hi);
    job.cap = (float)p->softcap;
    job.term = term;
    job.G = Hq / Hkv;
    job.Dp = (D + BW_PAD - 1) / BW_PAD * BW_PAD;
    job.Dvp = (Dv + BW_PAD - 1) / BW_PAD * BW_PAD;
    job.nqb = (S + BW_BQ - 1) / BW_BQ;
    job.nkb = (T + BW_BK - 1) / BW_BK;
    const int64_t Tp = job.nkb * BW_BK, nrows = B * Hq * S;
    job.q = malloc((size_t)(nrows * job.Dp) * sizeof(float));
    job.dO = malloc((size_t)(nrows * job.Dvp) * sizeof(float));
    job.k = calloc((size_t)(B * Hkv * Tp * job.Dp), sizeof(float));
    job.kt = calloc((size_t)(B * Hkv * Tp * job.Dp), sizeof(float));
    job.vt = calloc((size_t)(B * Hkv * Tp * job.Dvp), sizeof(float));
    job.lse = calloc((size_t)nrows, sizeof(float));
    job.delta = calloc((size_t)nrows, sizeof(float));
    job.lo = calloc((size_t)nrows, sizeof(int64_t));
    job.hi = calloc((size_t)nrows, sizeof(int64_t));
    job.cls = calloc((size_t)nrows, 1);
    job.nan_group = calloc((size_t)(B * Hkv), 1);
    job.scratch_len = bw_scratch_len(job.Dp, job.Dvp);
    job.scratch = malloc((size_t)(nt * job.scratch_len) * sizeof(float));
    {
        const double ds_bytes = (double)(B * Hq) * (double)(job.nqb * job.nkb) * BW_BQ * BW_BK * 4;
        if (ds_bytes <= (double)ds_budget)
            job.ds = malloc((size_t)ds_bytes); /* NULL: recompute, the same bits */
    }
    if (!job.q || !job.dO || !job.k || !job.kt || !job.vt || !job.lse || !job.delta ||
        !job.lo || !job.hi || !job.cls || !job.nan_group || !job.scratch) {
        st = SMATTN_ERR_NOMEM;
        goto done;
    }
    /* the staging, the finiteness checks, each row's class and Delta: items over the pool,
     * each writing its own rows and keys; the verdicts combined after the run */
    {
        bw_stage sg = {&job, in, gin, &fo, B * Hq * job.nqb, NULL, NULL};
        const int64_t nitems = sg.nq_items + B * Hkv * job.nkb;
        sg.bad = calloc((size_t)(nitems > 0 ? nitems : 1), 1);
        sg.mag = calloc((size_t)(nitems > 0 ? 4 * nitems : 4), sizeof(float));
        if (!sg.bad || !sg.mag) {
            free(sg.bad), free(sg.mag);
            st = SMATTN_ERR_NOMEM;
            goto done;
        }
        smattn__pool_run(nt, nitems, run_stage, &sg);
        int bad = 0;
        float m[6] = {0}; /* max |Q|, |dO|, |O|, |dLSE|, |K|, |V| */
        for (int64_t x = 0; x < nitems; x++) {
            bad |= sg.bad[x];
            for (int k = 0; k < (x < sg.nq_items ? 4 : 2); k++) {
                const int at = x < sg.nq_items ? k : 4 + k;
                m[at] = sg.mag[4 * x + k] > m[at] ? sg.mag[4 * x + k] : m[at];
            }
        }
        free(sg.bad), free(sg.mag);
        /* the terms one dBias element sums: the extents of its dimensions of stride 0 */
        const int64_t ext[4] = {B, Hq, S, T};
        double db_terms = gout->dbias.data ? 1.0 : 0.0;
        for (int k = 0; gout->dbias.data && k < 4; k++)
            db_terms *= gout->dbias.stride[k] == 0 ? (double)ext[k] : 1.0;
        /* non-finite Q, K, V or dO, or sums that could overflow: the oracle's (smattn.h) */
        if (bad || !magnitudes_fit(p, m, db_terms)) {
            st = SMATTN_ERR_UNSUPPORTED;
            goto done;
        }
        for (int64_t row = 0; row < nrows; row++) /* a `nan` empty row poisons its group */
            if (job.cls[row] == BW_ROW_NAN)
                job.nan_group[row / (Hq * S) * Hkv + smattn__kv_head(p, row / S % Hq)] = 1;
    }
    {
        bw_run r = {&job, isa};
        smattn__pool_run(nt, B * job.nkb * Hkv, run_dkdv, &r);
        smattn__pool_run(nt, B * job.nqb * Hq, run_dq, &r);
        if (gout->dbias.data) { /* after dQ: it may read the kept dS */
            const int64_t *st4 = gout->dbias.stride;
            const int64_t ext[4] = {B, Hq, job.nqb, job.nkb};
            int64_t n = 1;
            for (int k = 0; k < 4; k++)
                n *= job.dbx[k] = st4[k] == 0 ? 1 : ext[k];
            smattn__pool_run(nt, n, run_db, &r);
        }
    }
    if (gout->dsinks.data)
        write_dsinks(&job, in, gin, &gout->dsinks);
    st = SMATTN_OK;
done:
    free(o_own), free(l_own);
    job_free(&job);
    return st;
}

smattn_backward_precision smattn_opt_backward_precision(const smattn_problem *p)
{
    smattn_backward_precision m = smattn_backward_precision_of(SMATTN_F32);
    m.fwd = smattn_opt_precision(p);
    m.bwd.exp_ulps = 4.0; /* the kernel's exp (SMATTN_OPT_EXP_ULPS), glibc's tanhf */
    m.bwd.tiny = 0x1p-126; /* exp flushes results below FLT_MIN */
    return m;
}
