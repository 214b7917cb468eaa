/* SPDX-License-Identifier: MIT */
/* test_backward.c: the exact backward oracle (SPEC 10): its gradients against central
 * differences of an independent MPFR forward, its exact zeros and rationals, the
 * conventions, GQA, permutations, threads, and the validation of its descriptor. */
#include <check.h>
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <mpfr.h>

#include "smattn.h"

/* ---- a test case: contiguous binary64 tensors -------------------------------------------- */

typedef struct tc {
    smattn_problem p;
    double *q, *k, *v, *bias, *sinks, *dout, *dlse;
    unsigned char *mask;
    int64_t kv_lens[4];
    double *dq, *dk, *dv, *dbias, *dsinks;
    int want_dbias;   /* ask for dBias (full shape) */
    int want_dsinks;  /* ask for dSinks */
    smattn_dtype odt; /* output dtype */
    unsigned char *obuf[5];
} tc;

static int64_t nq(const tc *c)
{
    return c->p.B * c->p.S * c->p.Hq * c->p.D;
}
static int64_t nk(const tc *c)
{
    return c->p.B * c->p.T * c->p.Hkv * c->p.D;
}
static int64_t nv(const tc *c)
{
    return c->p.B * c->p.T * c->p.Hkv * c->p.Dv;
}
static int64_t no(const tc *c)
{
    return c->p.B * c->p.S * c->p.Hq * c->p.Dv;
}
static int64_t nfull(const tc *c)
{
    return c->p.B * c->p.Hq * c->p.S * c->p.T;
}
static int64_t nl(const tc *c)
{
    return c->p.B * c->p.Hq * c->p.S;
}

/* Deterministic pseudo-random values: small dyadic numbers, so every input is exact. */
static uint64_t rng_state;
static double rnd(void)
{
    rng_state = rng_state * 6364136223846793005u + 1442695040888963407u;
    int64_t m = (int64_t)((rng_state >> 33) % 4097) - 2048; /* [-2048, 2048] */
    return (double)m / 1024.0;
}

static void tc_init(tc *c, int64_t B, int64_t S, int64_t T, int64_t Hq, int64_t Hkv, int64_t D,
                    int64_t Dv, uint64_t seed)
{
    memset(c, 0, sizeof *c);
    c->p = smattn_problem_default();
    c->p.B = B, c->p.S = S, c->p.T = T, c->p.Hq = Hq, c->p.Hkv = Hkv, c->p.D = D, c->p.Dv = Dv;
    c->p.scale = smattn_default_scale(D);
    c->odt = SMATTN_F64;
    rng_state = seed;
    c->q = malloc((size_t)nq(c) * sizeof(double));
    c->k = malloc((size_t)nk(c) * sizeof(double));
    c->v = malloc((size_t)nv(c) * sizeof(double));
    c->dout = malloc((size_t)no(c) * sizeof(double));
    for (int64_t x = 0; x < nq(c); x++)
        c->q[x] = rnd();
    for (int64_t x = 0; x < nk(c); x++)
        c->k[x] = rnd();
    for (int64_t x = 0; x < nv(c); x++)
        c->v[x] = rnd();
    for (int64_t x = 0; x < no(c); x++)
        c->dout[x] = rnd();
}

static void tc_free(tc *c)
{
    free(c->q), free(c->k), free(c->v), free(c->bias), free(c->sinks), free(c->dout);
    free(c->dlse), free(c->mask), free(c->dq), free(c->dk), free(c->dv), free(c->dbias);
    free(c->dsinks);
    for (int k = 0; k < 5; k++)
        free(c->obuf[k]);
}

static void tc_add_bias(tc *c)
{
    c->bias = malloc((size_t)nfull(c) * sizeof(double));
    for (int64_t x = 0; x < nfull(c); x++)
        c->bias[x] = rnd();
}

static void tc_add_mask(tc *c, int every)
{
    c->mask = malloc((size_t)nfull(c));
    for (int64_t x = 0; x < nfull(c); x++)
        c->mask[x] = (unsigned char)(x % every != 0);
}

static void tc_add_sinks(tc *c)
{
    c->sinks = malloc((size_t)c->p.Hq * sizeof(double));
    for (int64_t h = 0; h < c->p.Hq; h++)
        c->sinks[h] = rnd();
}

static void tc_add_dlse(tc *c)
{
    c->dlse = malloc((size_t)nl(c) * sizeof(double));
    for (int64_t x = 0; x < nl(c); x++)
        c->dlse[x] = rnd();
}

static void tc_tensors(tc *c, smattn_inputs *in, smattn_grad_inputs *gin, smattn_grad_outputs *go)
{
    memset(in, 0, sizeof *in);
    memset(gin, 0, sizeof *gin);
    memset(go, 0, sizeof *go);
    smattn_problem *p = &c->p;
    in->q = (smattn_tensor){c->q, SMATTN_F64, {0}};
    in->k = (smattn_tensor){c->k, SMATTN_F64, {0}};
    in->v = (smattn_tensor){c->v, SMATTN_F64, {0}};
    ck_assert_int_eq(smattn_contiguous_strides(p, 'q', in->q.stride), SMATTN_OK);
    ck_assert_int_eq(smattn_contiguous_strides(p, 'k', in->k.stride), SMATTN_OK);
    ck_assert_int_eq(smattn_contiguous_strides(p, 'v', in->v.stride), SMATTN_OK);
    if (c->bias) {
        in->bias = (smattn_tensor){c->bias, SMATTN_F64, {0}};
        ck_assert_int_eq(smattn_contiguous_strides(p, 'b', in->bias.stride), SMATTN_OK);
    }
    if (c->mask) {
        in->mask = (smattn_tensor){c->mask, SMATTN_BOOL, {0}};
        ck_assert_int_eq(smattn_contiguous_strides(p, 'b', in->mask.stride), SMATTN_OK);
    }
    if (c->sinks)
        in->sinks = (smattn_tensor){c->sinks, SMATTN_F64, {1, 0, 0, 0}};
    gin->dout = (smattn_tensor){c->dout, SMATTN_F64, {0}};
    ck_assert_int_eq(smattn_contiguous_strides(p, 'o', gin->dout.stride), SMATTN_OK);
    if (c->dlse) {
        gin->dlse = (smattn_tensor){c->dlse, SMATTN_F64, {0}};
        ck_assert_int_eq(smattn_contiguous_strides(p, 'l', gin->dlse.stride), SMATTN_OK);
    }
    int64_t n[5] = {nq(c), nk(c), nv(c), nfull(c), c->p.Hq};
    size_t es = smattn_dtype_size(c->odt);
    for (int k = 0; k < 5; k++)
        if (!c->obuf[k] && (k < 3 || (k == 3 && c->want_dbias) || (k == 4 && c->want_dsinks)))
            c->obuf[k] = malloc((size_t)n[k] * es);
    if (c->want_dsinks)
        go->dsinks = (smattn_out_tensor){c->obuf[4], c->odt, {1, 0, 0, 0}};
    if (c->want_dbias) {
        go->dbias = (smattn_out_tensor){c->obuf[3], c->odt, {0}};
        ck_assert_int_eq(smattn_contiguous_strides(p, 'b', go->dbias.stride), SMATTN_OK);
    }
    go->dq = (smattn_out_tensor){c->obuf[0], c->odt, {0}};
    go->dk = (smattn_out_tensor){c->obuf[1], c->odt, {0}};
    go->dv = (smattn_out_tensor){c->obuf[2], c->odt, {0}};
    ck_assert_int_eq(smattn_contiguous_strides(p, 'q', go->dq.stride), SMATTN_OK);
    ck_assert_int_eq(smattn_contiguous_strides(p, 'k', go->dk.stride), SMATTN_OK);
    ck_assert_int_eq(smattn_contiguous_strides(p, 'v', go->dv.stride), SMATTN_OK);
}

/* Nonzero: run the oracle without its binary64 and double-double tiers (MPFR only). */
static int g_no_fast;

/* Run the oracle; the outputs as binary64 in c->dq, c->dk, c->dv. */
static smattn_status tc_run(tc *c, int threads, smattn_ref_stats *stats)
{
    smattn_inputs in;
    smattn_grad_inputs gin;
    smattn_grad_outputs go;
    tc_tensors(c, &in, &gin, &go);
    smattn_ref_config cfg;
    memset(&cfg, 0, sizeof cfg);
    cfg.threads = threads;
    cfg.no_fast_phase = g_no_fast;
    smattn_status st = smattn_ref_backward(&c->p, &in, &gin, &go, &cfg, stats);
    double **dst[5] = {&c->dq, &c->dk, &c->dv, &c->dbias, &c->dsinks};
    int64_t n[5] = {nq(c), nk(c), nv(c), nfull(c), c->p.Hq};
    for (int k = 0; k < 5; k++) {
        if ((k == 3 && !c->want_dbias) || (k == 4 && !c->want_dsinks))
            continue;
        free(*dst[k]);
        *dst[k] = malloc((size_t)n[k] * sizeof(double));
        for (int64_t x = 0; x < n[k]; x++)
            (*dst[k])[x] = smattn_load(c->obuf[k], c->odt, x);
    }
    return st;
}

static uint64_t bits64(double x)
{
    uint64_t b;
    memcpy(&b, &x, 8);
    return b;
}

/* ---- an independent forward in MPFR, for central differences ---------------------------- */

#define FP 512   /* working precision of the test's forward */
#define HEXP -90 /* h = 2^HEXP */

typedef struct fwd {
    const tc *c;
    mpfr_t *q, *k, *v, *bias, *sinks; /* the inputs as MPFR, perturbable (NULL if absent) */
} fwd;

static void fwd_init(fwd *f, const tc *c)
{
    f->c = c;
    f->q = malloc((size_t)nq(c) * sizeof *f->q);
    f->k = malloc((size_t)nk(c) * sizeof *f->k);
    f->v = malloc((size_t)nv(c) * sizeof *f->v);
    for (int64_t x = 0; x < nq(c); x++)
        mpfr_init2(f->q[x], FP), mpfr_set_d(f->q[x], c->q[x], MPFR_RNDN);
    for (int64_t x = 0; x < nk(c); x++)
        mpfr_init2(f->k[x], FP), mpfr_set_d(f->k[x], c->k[x], MPFR_RNDN);
    for (int64_t x = 0; x < nv(c); x++)
        mpfr_init2(f->v[x], FP), mpfr_set_d(f->v[x], c->v[x], MPFR_RNDN);
    f->sinks = NULL;
    if (c->sinks) {
        f->sinks = malloc((size_t)c->p.Hq * sizeof *f->sinks);
        for (int64_t h = 0; h < c->p.Hq; h++)
            mpfr_init2(f->sinks[h], FP), mpfr_set_d(f->sinks[h], c->sinks[h], MPFR_RNDN);
    }
    f->bias = NULL;
    if (c->bias) {
        f->bias = malloc((size_t)nfull(c) * sizeof *f->bias);
        for (int64_t x = 0; x < nfull(c); x++)
            mpfr_init2(f->bias[x], FP), mpfr_set_d(f->bias[x], c->bias[x], MPFR_RNDN);
    }
}

static void fwd_free(fwd *f)
{
    for (int64_t x = 0; x < nq(f->c); x++)
        mpfr_clear(f->q[x]);
    for (int64_t x = 0; x < nk(f->c); x++)
        mpfr_clear(f->k[x]);
    for (int64_t x = 0; x < nv(f->c); x++)
        mpfr_clear(f->v[x]);
    for (int64_t x = 0; f->bias && x < nfull(f->c); x++)
        mpfr_clear(f->bias[x]);
    for (int64_t h = 0; f->sinks && h < f->c->p.Hq; h++)
        mpfr_clear(f->sinks[h]);
    free(f->q), free(f->k), free(f->v), free(f->bias), free(f->sinks);
}

/* loss = sum over rows of dO . O + dLSE LSE (SPEC 4.1, 3.4 zero and mean conventions),
 * written from the definitions with the test's own indexing. */
static void fwd_loss(const fwd *f, mpfr_ptr loss)
{
    const tc *c = f->c;
    const smattn_problem *p = &c->p;
    smattn_inputs in;
    memset(&in, 0, sizeof in);
    in.mask = (smattn_tensor){c->mask, SMATTN_BOOL, {p->Hq * p->S * p->T, p->S * p->T, p->T, 1}};
    int64_t T = p->T, D = p->D, Dv = p->Dv, gs = p->Hq / p->Hkv;
    mpfr_t *s = malloc((size_t)T * sizeof *s);
    int *vis = malloc((size_t)T * sizeof *vis);
    for (int64_t j = 0; j < T; j++)
        mpfr_init2(s[j], FP);
    mpfr_t x, m, L, e, o, lse;
    mpfr_inits2(FP, x, m, L, e, o, lse, (mpfr_ptr)0);
    mpfr_set_zero(loss, 1);
    for (int64_t b = 0; b < p->B; b++)
        for (int64_t h = 0; h < p->Hq; h++)
            for (int64_t i = 0; i < p->S; i++) {
                int64_t g = h / gs, n = 0;
                int64_t Tb = p->kv_lens ? p->kv_lens[b] : T;
                int has_sink = c->sinks && c->sinks[h] != -HUGE_VAL;
                for (int64_t j = 0; j < T; j++) {
                    int64_t bi = ((b * p->Hq + h) * p->S + i) * T + j;
                    vis[j] = smattn_visible(p, &in, b, h, i, j) &&
                             !(c->bias && c->bias[bi] == -HUGE_VAL);
                    if (!vis[j])
                        continue;
                    n++;
                    mpfr_set_zero(s[j], 1);
                    for (int64_t d = 0; d < D; d++) {
                        mpfr_mul(x, f->q[((b * p->S + i) * p->Hq + h) * D + d],
                                 f->k[((b * T + j) * p->Hkv + g) * D + d], MPFR_RNDN);
                        mpfr_add(s[j], s[j], x, MPFR_RNDN);
                    }
                    mpfr_mul_d(s[j], s[j], p->scale, MPFR_RNDN);
                    if (p->softcap > 0) {
                        mpfr_div_d(s[j], s[j], p->softcap, MPFR_RNDN);
                        mpfr_tanh(s[j], s[j], MPFR_RNDN);
                        mpfr_mul_d(s[j], s[j], p->softcap, MPFR_RNDN);
                    }
                    if (c->bias)
                        mpfr_add(s[j], s[j], f->bias[bi], MPFR_RNDN);
                }
                const double *dO = &c->dout[((b * p->S + i) * p->Hq + h) * Dv];
                if (n == 0 && !has_sink) {
                    if (p->empty_rows == SMATTN_EMPTY_MEAN && Tb > 0)
                        for (int64_t cc = 0; cc < Dv; cc++) {
                            mpfr_set_zero(o, 1);
                            for (int64_t j = 0; j < Tb; j++)
                                mpfr_add(o, o, f->v[((b * T + j) * p->Hkv + g) * Dv + cc],
                                         MPFR_RNDN);
                            mpfr_div_si(o, o, (long)Tb, MPFR_RNDN);
                            mpfr_mul_d(o, o, dO[cc], MPFR_RNDN);
                            mpfr_add(loss, loss, o, MPFR_RNDN);
                        }
                    continue;
                }
                mpfr_set_inf(m, -1);
                for (int64_t j = 0; j < T; j++)
                    if (vis[j] && mpfr_cmp(s[j], m) > 0)
                        mpfr_set(m, s[j], MPFR_RNDN);
                if (has_sink && mpfr_cmp(m, f->sinks[h]) < 0)
                    mpfr_set(m, f->sinks[h], MPFR_RNDN);
                mpfr_set_zero(L, 1);
                if (has_sink) {
                    mpfr_sub(x, f->sinks[h], m, MPFR_RNDN);
                    mpfr_exp(x, x, MPFR_RNDN);
                    mpfr_add(L, L, x, MPFR_RNDN);
                }
                for (int64_t j = 0; j < T; j++)
                    if (vis[j]) {
                        mpfr_sub(x, s[j], m, MPFR_RNDN);
                        mpfr_exp(x, x, MPFR_RNDN);
                        mpfr_add(L, L, x, MPFR_RNDN);
                    }
                for (int64_t cc = 0; cc < Dv; cc++) {
                    mpfr_set_zero(o, 1);
                    for (int64_t j = 0; j < T; j++)
                        if (vis[j]) {
                            mpfr_sub(x, s[j], m, MPFR_RNDN);
                            mpfr_exp(e, x, MPFR_RNDN);
                            mpfr_mul(e, e, f->v[((b * T + j) * p->Hkv + g) * Dv + cc], MPFR_RNDN);
                            mpfr_add(o, o, e, MPFR_RNDN);
                        }
                    mpfr_div(o, o, L, MPFR_RNDN);
                    mpfr_mul_d(o, o, dO[cc], MPFR_RNDN);
                    mpfr_add(loss, loss, o, MPFR_RNDN);
                }
                if (c->dlse) {
                    mpfr_log(lse, L, MPFR_RNDN);
                    mpfr_add(lse, lse, m, MPFR_RNDN);
                    mpfr_mul_d(lse, lse, c->dlse[(b * p->Hq + h) * p->S + i], MPFR_RNDN);
                    mpfr_add(loss, loss, lse, MPFR_RNDN);
                }
            }
    for (int64_t j = 0; j < T; j++)
        mpfr_clear(s[j]);
    free(s), free(vis);
    mpfr_clears(x, m, L, e, o, lse, (mpfr_ptr)0);
}

/* Central difference of the loss in element x of a tensor: (L(x + h) - L(x - h)) / 2h,
 * within about h^2 of the derivative. */
static void fwd_diff(fwd *f, mpfr_t *t, int64_t x, mpfr_ptr g)
{
    mpfr_t lp, lm, save;
    mpfr_inits2(FP, lp, lm, save, (mpfr_ptr)0);
    mpfr_set(save, t[x], MPFR_RNDN);
    mpfr_set_ui_2exp(lp, 1, HEXP, MPFR_RNDN);
    mpfr_add(t[x], save, lp, MPFR_RNDN);
    fwd_loss(f, lp);
    mpfr_set_ui_2exp(lm, 1, HEXP, MPFR_RNDN);
    mpfr_sub(t[x], save, lm, MPFR_RNDN);
    fwd_loss(f, lm);
    mpfr_set(t[x], save, MPFR_RNDN);
    mpfr_sub(g, lp, lm, MPFR_RNDN);
    mpfr_mul_2si(g, g, -HEXP - 1, MPFR_RNDN);
    mpfr_clears(lp, lm, save, (mpfr_ptr)0);
}

/* The oracle's binary64 value must be the rounding of the derivative g (known to about
 * 2^-170): equal to fl64(g), unless g lies within 2^-150 |g| of a rounding boundary (then
 * the element proves nothing and is counted); a |g| below 2^-140 is an exact zero: +0. */
static int check_elem(const char *what, int64_t x, double got, mpfr_srcptr g, int *unsure)
{
    mpfr_t a, w;
    mpfr_inits2(FP, a, w, (mpfr_ptr)0);
    int ok;
    if (mpfr_zero_p(g) || mpfr_get_exp(g) < -140) { /* |g| < 2^-141 */
        ok = bits64(got) == 0;
    } else {
        double want = mpfr_get_d(g, MPFR_RNDN);
        /* distance from g to the nearest midpoint, relative */
        double up = nextafter(want, HUGE_VAL), dn = nextafter(want, -HUGE_VAL);
        mpfr_set_d(a, want, MPFR_RNDN);
        mpfr_add_d(a, a, up, MPFR_RNDN);
        mpfr_div_2ui(a, a, 1, MPFR_RNDN);
        mpfr_sub(a, a, g, MPFR_RNDN);
        mpfr_set_d(w, want, MPFR_RNDN);
        mpfr_add_d(w, w, dn, MPFR_RNDN);
        mpfr_div_2ui(w, w, 1, MPFR_RNDN);
        mpfr_sub(w, w, g, MPFR_RNDN);
        mpfr_abs(a, a, MPFR_RNDN);
        mpfr_abs(w, w, MPFR_RNDN);
        mpfr_min(a, a, w, MPFR_RNDN);
        mpfr_div(a, a, g, MPFR_RNDN);
        if (mpfr_zero_p(a) || mpfr_get_exp(a) < -150)
            (*unsure)++;
        ok = bits64(got) == bits64(want);
        if (!ok)
            fprintf(stderr, "%s[%" PRId64 "]: oracle %a, derivative %a\n", what, x, got, want);
    }
    mpfr_clears(a, w, (mpfr_ptr)0);
    return ok;
}

/* Every element of dQ, dK and dV against the central differences; the MPFR phase alone
 * (no fast tiers) gives the same bits. */
static void check_against_diffs(tc *c)
{
    smattn_ref_stats stats;
    g_no_fast = 1;
    ck_assert_int_eq(tc_run(c, 0, &stats), SMATTN_OK);
    g_no_fast = 0;
    double *slow[5] = {c->dq, c->dk, c->dv, c->dbias, c->dsinks};
    c->dq = c->dk = c->dv = c->dbias = c->dsinks = NULL;
    ck_assert_int_eq(tc_run(c, 0, &stats), SMATTN_OK);
    for (int64_t x = 0; x < nq(c); x++)
        ck_assert_msg(bits64(slow[0][x]) == bits64(c->dq[x]), "dq[%" PRId64 "] fast/slow", x);
    for (int64_t x = 0; x < nk(c); x++)
        ck_assert_msg(bits64(slow[1][x]) == bits64(c->dk[x]), "dk[%" PRId64 "] fast/slow", x);
    for (int64_t x = 0; x < nv(c); x++)
        ck_assert_msg(bits64(slow[2][x]) == bits64(c->dv[x]), "dv[%" PRId64 "] fast/slow", x);
    for (int64_t x = 0; c->want_dbias && x < nfull(c); x++)
        ck_assert_msg(bits64(slow[3][x]) == bits64(c->dbias[x]), "dbias[%" PRId64 "] fast/slow", x);
    for (int64_t h = 0; c->want_dsinks && h < c->p.Hq; h++)
        ck_assert_msg(bits64(slow[4][h]) == bits64(c->dsinks[h]), "dsinks[%" PRId64 "] fast/slow",
                      h);
    free(slow[0]), free(slow[1]), free(slow[2]), free(slow[3]), free(slow[4]);
    fwd f;
    fwd_init(&f, c);
    mpfr_t g;
    mpfr_init2(g, FP);
    int unsure = 0, bad = 0;
    for (int64_t x = 0; x < nq(c); x++) {
        fwd_diff(&f, f.q, x, g);
        bad += !check_elem("dq", x, c->dq[x], g, &unsure);
    }
    for (int64_t x = 0; x < nk(c); x++) {
        fwd_diff(&f, f.k, x, g);
        bad += !check_elem("dk", x, c->dk[x], g, &unsure);
    }
    for (int64_t x = 0; x < nv(c); x++) {
        fwd_diff(&f, f.v, x, g);
        bad += !check_elem("dv", x, c->dv[x], g, &unsure);
    }
    for (int64_t h = 0; c->want_dsinks && c->sinks && h < c->p.Hq; h++) {
        fwd_diff(&f, f.sinks, h, g);
        bad += !check_elem("dsinks", h, c->dsinks[h], g, &unsure);
    }
    for (int64_t x = 0; c->want_dbias && c->bias && x < nfull(c); x++) {
        fwd_diff(&f, f.bias, x, g); /* a -inf bias stays -inf: derivative 0 */
        bad += !check_elem("dbias", x, c->dbias[x], g, &unsure);
    }
    mpfr_clear(g);
    fwd_free(&f);
    ck_assert_msg(bad == 0, "%d elements differ from the derivative", bad);
    ck_assert_msg(unsure == 0, "%d elements too close to a boundary to judge", unsure);
}

START_TEST(diff_plain_mha)
{
    tc c;
    tc_init(&c, 1, 3, 5, 2, 2, 3, 2, 11);
    check_against_diffs(&c);
    tc_free(&c);
}
END_TEST

START_TEST(diff_gqa_masks_bias_sinks_dlse)
{
    tc c;
    tc_init(&c, 2, 3, 5, 4, 2, 3, 2, 12);
    c.p.causal = SMATTN_CAUSAL_LOWER_RIGHT;
    c.kv_lens[0] = 5, c.kv_lens[1] = 4;
    c.p.kv_lens = c.kv_lens;
    tc_add_bias(&c);
    tc_add_mask(&c, 4);
    tc_add_sinks(&c);
    tc_add_dlse(&c);
    c.want_dbias = 1;
    c.want_dsinks = 1;
    check_against_diffs(&c);
    tc_free(&c);
}
END_TEST

START_TEST(diff_softcap_window)
{
    tc c;
    tc_init(&c, 1, 3, 4, 2, 1, 2, 2, 13);
    c.p.softcap = 1.5;
    c.p.window_left = 1;
    c.p.window_right = 1;
    tc_add_bias(&c);
    tc_add_dlse(&c);
    c.want_dbias = 1; /* dBias is dS, not dU: the bias comes after the cap */
    check_against_diffs(&c);
    tc_free(&c);
}
END_TEST

/* The mean and zero conventions' gradients are the derivatives of their outputs. */
START_TEST(diff_empty_rows_mean_and_zero)
{
    for (int conv = 0; conv < 2; conv++) {
        tc c;
        tc_init(&c, 1, 3, 3, 2, 1, 2, 2, 14);
        c.p.empty_rows = conv ? SMATTN_EMPTY_MEAN : SMATTN_EMPTY_ZERO;
        tc_add_mask(&c, 1);
        /* rows (h, i) = (0, 1) and (1, 2) see nothing; the others see keys 0 and 2 */
        for (int64_t x = 0; x < nfull(&c); x++)
            c.mask[x] = (unsigned char)(x % 3 != 1);
        memset(&c.mask[(0 * 3 + 1) * 3], 0, 3);
        memset(&c.mask[(1 * 3 + 2) * 3], 0, 3);
        c.kv_lens[0] = 3;
        check_against_diffs(&c);
        /* the empty rows' dQ is +0 */
        ck_assert_uint_eq(bits64(c.dq[(1 * 2 + 0) * 2]), 0);
        ck_assert_uint_eq(bits64(c.dq[(2 * 2 + 1) * 2 + 1]), 0);
        tc_free(&c);
    }
}
END_TEST

/* SPEC 10.5: the hand-worked example, computed by spec/tools/backward_example.py. */
START_TEST(golden_example)
{
    tc c;
    tc_init(&c, 1, 1, 3, 2, 1, 2, 2, 0);
    c.p.scale = 0.5;
    const double q[] = {1, 2, -1, 0.5}, k[] = {1, 0, 0, 1, 1, 1}, v[] = {1, 2, -1, 0, 0.5, 3};
    const double dO[] = {1, -1, 0.25, 2};
    memcpy(c.q, q, sizeof q), memcpy(c.k, k, sizeof k), memcpy(c.v, v, sizeof v);
    memcpy(c.dout, dO, sizeof dO);
    tc_add_dlse(&c);
    c.dlse[0] = 0.5, c.dlse[1] = 0;
    ck_assert_int_eq(tc_run(&c, 1, NULL), SMATTN_OK);
    const double dq[] = {0x1.ceed07ce9d628p-5, 0x1.0fa6a74a9eeecp-3, 0x1.62f2ff0d15e0ep-1,
                         -0x1.785d3b4af7c4dp-3};
    const double dk[] = {-0x1.1007c52b2d671p-4, 0x1.4e70a7881f027p-2,  0x1.c6042e902c0abp-1,
                         0x1.4a8df7fa16341p-5,  -0x1.240335eac65ddp-1, 0x1.107b32f13c6e1p-3};
    const double dv[] = {0x1.f1ed713a0609fp-3, 0x1.128cf44a080a0p-2, 0x1.b5b5f6e1c3356p-2,
                         0x1.4f48d867c4fb6p-1, 0x1.28a9a8409ce2dp-1, 0x1.3b856b99b7fcdp-4};
    for (int x = 0; x < 4; x++)
        ck_assert_msg(bits64(c.dq[x]) == bits64(dq[x]), "dq[%d] %a != %a", x, c.dq[x], dq[x]);
    for (int x = 0; x < 6; x++) {
        ck_assert_msg(bits64(c.dk[x]) == bits64(dk[x]), "dk[%d] %a != %a", x, c.dk[x], dk[x]);
        ck_assert_msg(bits64(c.dv[x]) == bits64(dv[x]), "dv[%d] %a != %a", x, c.dv[x], dv[x]);
    }
    tc_free(&c);
}
END_TEST

/* ---- exact zeros and rationals ----------------------------------------------------------- */

/* dO orthogonal to the differences of V: every dP_j equal, dS = 0 exactly, so dQ and dK are
 * +0 in every dtype while dV is not. (With a sink the weights of the keys no longer sum to
 * 1 and the gradients are not zero: diff_gqa_masks_bias_sinks_dlse covers that.) */
START_TEST(trap_do_orthogonal)
{
    const smattn_dtype dts[] = {SMATTN_F64, SMATTN_F32, SMATTN_F16, SMATTN_BF16};
    for (int t = 0; t < 4; t++) {
        tc c;
        tc_init(&c, 1, 2, 6, 2, 1, 4, 2, 21);
        for (int64_t j = 0; j < 6; j++)
            c.v[j * 2 + 1] = 0.75; /* column 1 constant */
        for (int64_t r = 0; r < 4; r++)
            c.dout[r * 2] = 0, c.dout[r * 2 + 1] = 1.5 + (double)r;
        c.odt = dts[t];
        c.want_dbias = 1;
        ck_assert_int_eq(tc_run(&c, 0, NULL), SMATTN_OK);
        for (int64_t x = 0; x < nfull(&c); x++)
            ck_assert_msg(bits64(c.dbias[x]) == 0, "dbias[%" PRId64 "] = %a", x, c.dbias[x]);
        for (int64_t x = 0; x < nq(&c); x++)
            ck_assert_msg(bits64(c.dq[x]) == 0, "dq[%" PRId64 "] = %a", x, c.dq[x]);
        for (int64_t x = 0; x < nk(&c); x++)
            ck_assert_msg(bits64(c.dk[x]) == 0, "dk[%" PRId64 "] = %a", x, c.dk[x]);
        for (int64_t j = 0; j < 6; j++)
            ck_assert(c.dv[j * 2 + 1] > 0);
        tc_free(&c);
    }
}
END_TEST

/* A column of K constant across the keys: dQ_d = kappa sum_j dS_j = 0 exactly without
 * dLSE and sink (sum_j dS_j = 0), although every dS_j is irrational; with dLSE it is
 * kappa dLSE exactly. Decided by the exact path, never a Ziv loop. */
START_TEST(trap_dS_sums_to_zero)
{
    for (int with_dlse = 0; with_dlse < 2; with_dlse++) {
        tc c;
        tc_init(&c, 1, 2, 5, 1, 1, 3, 2, 22);
        for (int64_t j = 0; j < 5; j++)
            c.k[j * 3 + 2] = 0.625;
        if (with_dlse) {
            tc_add_dlse(&c);
            c.dlse[0] = 0.5, c.dlse[1] = -3;
        }
        smattn_ref_stats st;
        ck_assert_int_eq(tc_run(&c, 1, &st), SMATTN_OK);
        for (int64_t i = 0; i < 2; i++) {
            double want = with_dlse ? c.p.scale * 0.625 * c.dlse[i] : 0.0;
            /* scale * 0.625 * dLSE: the real product, rounded once (scale is 1/sqrt(3)) */
            mpfr_t w;
            mpfr_init2(w, 200);
            mpfr_set_d(w, c.p.scale, MPFR_RNDN);
            mpfr_mul_d(w, w, 0.625, MPFR_RNDN);
            mpfr_mul_d(w, w, with_dlse ? c.dlse[i] : 0.0, MPFR_RNDN);
            want = mpfr_get_d(w, MPFR_RNDN);
            mpfr_clear(w);
            ck_assert_msg(bits64(c.dq[i * 3 + 2]) == bits64(want + 0.0),
                          "row %" PRId64 ": %a != %a", i, c.dq[i * 3 + 2], want);
        }
        if (!with_dlse)
            ck_assert(st.rows_rational > 0); /* the exact path decided the zeros */
        tc_free(&c);
    }
}
END_TEST

/* Scores 0, 1, 2, 3 (an arithmetic progression: e^{0+3} and e^{1+2} merge), dP = (1,0,1,0)
 * and k_1 = (a, a, b, b): the pair terms cancel across the merge and dQ_1 = 0 exactly,
 * although Delta and sum_j P_j k_j1 are both irrational. */
START_TEST(trap_pair_coincidence)
{
    tc c;
    tc_init(&c, 1, 1, 4, 1, 1, 2, 1, 23);
    c.p.scale = 1;
    c.q[0] = 1, c.q[1] = 0;
    const double k[] = {0, 0.5, 1, 0.5, 2, -1.25, 3, -1.25};
    memcpy(c.k, k, sizeof k);
    const double v[] = {1, 0, 1, 0};
    memcpy(c.v, v, sizeof v);
    c.dout[0] = 1;
    ck_assert_int_eq(tc_run(&c, 1, NULL), SMATTN_OK);
    ck_assert_msg(bits64(c.dq[1]) == 0, "dq[1] = %a", c.dq[1]);
    ck_assert(c.dq[0] != 0);
    check_against_diffs(&c);
    tc_free(&c);
}
END_TEST

/* Two rows with scores (0, 1) and (0, -1): P_{1,0} + P_{2,0} = 1/(1+e) + e/(1+e) = 1, so
 * dV_0 = dO (1 + 2^-24) exactly when both dO are 1 + 2^-24: a binary32 midpoint (ties to
 * even: 1), and exactly 1 + 2^-24 in binary64. No interval can decide the midpoint. */
START_TEST(trap_cross_row_midpoint)
{
    for (int f32 = 0; f32 < 2; f32++) {
        tc c;
        tc_init(&c, 1, 2, 2, 1, 1, 1, 1, 24);
        c.p.scale = 1;
        c.q[0] = 1, c.q[1] = -1;
        c.k[0] = 0, c.k[1] = 1;
        c.dout[0] = c.dout[1] = 1 + 0x1p-24;
        c.odt = f32 ? SMATTN_F32 : SMATTN_F64;
        smattn_ref_stats st;
        ck_assert_int_eq(tc_run(&c, 1, &st), SMATTN_OK);
        double want = f32 ? 1.0 : 1 + 0x1p-24;
        ck_assert_msg(c.dv[0] == want && c.dv[1] == want, "dv = %a %a", c.dv[0], c.dv[1]);
        tc_free(&c);
    }
}
END_TEST

/* One group of equal scores (q = 0): P = 1/2 and dQ = (dP_1 - dP_2)(k_1 - k_2)/4 =
 * 1 + 2^-24 exactly, a binary32 midpoint. */
START_TEST(trap_rational_dq_midpoint)
{
    tc c;
    tc_init(&c, 1, 1, 2, 1, 1, 1, 1, 25);
    c.p.scale = 1;
    c.q[0] = 0;
    c.k[0] = 4 + 0x1p-22, c.k[1] = 0;
    c.v[0] = 1, c.v[1] = 0;
    c.dout[0] = 1;
    c.odt = SMATTN_F32;
    ck_assert_int_eq(tc_run(&c, 1, NULL), SMATTN_OK);
    ck_assert_msg(c.dq[0] == 1.0, "dq = %a", c.dq[0]);
    c.odt = SMATTN_F64;
    free(c.obuf[0]), free(c.obuf[1]), free(c.obuf[2]);
    c.obuf[0] = c.obuf[1] = c.obuf[2] = NULL;
    ck_assert_int_eq(tc_run(&c, 1, NULL), SMATTN_OK);
    ck_assert_msg(c.dq[0] == 1 + 0x1p-24, "dq = %a", c.dq[0]);
    tc_free(&c);
}
END_TEST

/* A key at score -1e6 (a finite bias): dV_0 = dO P_0 = (1 + 3 2^-24) / (1 + e^-1e6) lies
 * e^-1e6 below a binary32 midpoint whose even neighbour is the upper one, closer than any
 * precision can resolve: the sign of num - B den decides it (1 + 2^-23); in binary64 it is
 * 1 + 3 2^-24. dV_1 is a positive value far
 * below the subnormals: +0. dQ = k sum_j dS_j = 0 exactly (equal k, no sink, no dLSE). */
START_TEST(trap_far_key_near_midpoint)
{
    for (int f32 = 0; f32 < 2; f32++) {
        tc c;
        tc_init(&c, 1, 1, 2, 1, 1, 1, 1, 26);
        c.q[0] = 0.25;
        c.k[0] = c.k[1] = 0.5;
        c.v[0] = 1, c.v[1] = 0;
        c.dout[0] = 1 + 3 * 0x1p-24;
        tc_add_bias(&c);
        c.bias[0] = 0, c.bias[1] = -1e6;
        c.odt = f32 ? SMATTN_F32 : SMATTN_F64;
        smattn_ref_stats st;
        ck_assert_int_eq(tc_run(&c, 1, &st), SMATTN_OK);
        ck_assert_msg(c.dv[0] == (f32 ? 1 + 0x1p-23 : 1 + 3 * 0x1p-24), "dv[0] = %a", c.dv[0]);
        ck_assert_uint_eq(bits64(c.dv[1]), 0);
        ck_assert_uint_eq(bits64(c.dq[0]), 0);
        if (f32)
            ck_assert(st.rows_rational > 0);
        tc_free(&c);
    }
}
END_TEST

/* Far keys across a GQA group (a defect fuzz_backward's seeds found): H query heads on one
 * KV head, one query each, T = 14 keys whose scores (set by the bias; K = 0) are 0 for key 0
 * and -(2^60 a_j + 2^18 b_hj) for the others, a_j the marks of a Golomb ruler (so no pair
 * sums coincide) and b_hj distinct per head, head 0's smallest. Every P_hj with j > 0 is
 * below MPFR's range, so the interval loop cannot decide the keys' dK (a sum of terms of
 * both signs around 0) nor a dV on a binary64 midpoint; the rows' denominators put over one
 * multiply past 2^18 terms, where the oracle used to stop with SMATTN_ERR_PRECISION. The
 * values are known: head 0's terms exceed the others' by e^{2^28}. */
static void far_keys_case(tc *c, int64_t H, const double *dout)
{
    static const int a[14] = {0, 4, 6, 20, 35, 52, 59, 77, 78, 86, 89, 99, 122, 127};
    tc_init(c, 1, 1, 14, H, 1, 2, 1, 41);
    memset(c->k, 0, (size_t)nk(c) * sizeof(double));
    for (int64_t j = 0; j < 14; j++)
        c->v[j] = j ? 1 : 0;
    for (int64_t h = 0; h < H; h++) {
        c->q[h * 2] = h % 2 ? -1.5 : 0.75; /* head 0 positive, the next negative */
        c->q[h * 2 + 1] = h % 2 ? 0.5 : -1.25;
        c->dout[h] = dout[h];
    }
    tc_add_bias(c);
    for (int64_t h = 0; h < H; h++)
        for (int64_t j = 0; j < 14; j++)
            c->bias[h * 14 + j] =
                j ? -(0x1p60 * a[j] + 0x1p18 * (double)(h ? 1024 + 97 * h + 31 * j : 3 * j)) : 0;
}

START_TEST(gqa_far_keys)
{
    /* dK: the sign of head 0's term; dV of the far keys +0; dQ +0 (K = 0) */
    static const double dout3[3] = {1, 1, 1};
    tc c;
    far_keys_case(&c, 3, dout3);
    smattn_ref_stats st;
    ck_assert_int_eq(tc_run(&c, 1, &st), SMATTN_OK);
    for (int64_t j = 0; j < 14; j++)
        for (int64_t d = 0; d < 2; d++) {
            /* dS_0j > 0 for j > 0 (dP_j = 1 > Delta), dS_00 < 0: dK_jd has q_0d's sign or
             * the opposite, and rounds to zero */
            double want = copysign(0.0, j ? c.q[d] : -c.q[d]);
            ck_assert_msg(bits64(c.dk[j * 2 + d]) == bits64(want),
                          "dk[%" PRId64 "][%" PRId64 "] = %a", j, d, c.dk[j * 2 + d]);
        }
    for (int64_t j = 1; j < 14; j++)
        ck_assert_uint_eq(bits64(c.dv[j]), 0);
    for (int64_t x = 0; x < nq(&c); x++)
        ck_assert_uint_eq(bits64(c.dq[x]), 0);
    tc_free(&c);

    /* dV_0 = sum_h dO_h P_h0 = (1 + 2^-52 + 2^-53) - (far terms, head 0's positive): just
     * below a binary64 midpoint whose tie would round up */
    static const double dout6[6] = {1 + 0x1p-52, 0x1p-54, 0x1p-54, 0x1p-55, -0x1p-56, -0x1p-56};
    far_keys_case(&c, 6, dout6);
    ck_assert_int_eq(tc_run(&c, 1, &st), SMATTN_OK);
    ck_assert_msg(c.dv[0] == 1 + 0x1p-52, "dv[0] = %a", c.dv[0]);
    tc_free(&c);
}
END_TEST

/* dSinks across batches with far keys: three batches of one query (T = 14, the far keys of
 * gqa_far_keys by batch), a sink at -2^61 below the top key, dLSE 1, -1, 0. Each batch's
 * term e^{-2^61} (dLSE_b L_b - F_b) / L_b^2 (F_b the far keys' weights) is about +-1 or
 * tiny times e^{-2^61}: the +-1 cancel exactly and the rest, -2 F_0 - F_2 + F_1^2 < 0 to
 * leading order, is below MPFR's range; the three denominators put over one pass 2^18
 * terms. The sign splits off the cancelling parts exactly: -0. */
START_TEST(dsinks_far_keys_across_batches)
{
    static const int a[14] = {0, 4, 6, 20, 35, 52, 59, 77, 78, 86, 89, 99, 122, 127};
    tc c;
    tc_init(&c, 3, 1, 14, 1, 1, 2, 1, 44);
    memset(c.k, 0, (size_t)nk(&c) * sizeof(double));
    tc_add_bias(&c);
    tc_add_sinks(&c);
    tc_add_dlse(&c);
    for (int64_t b = 0; b < 3; b++) {
        c.dout[b] = 1;
        c.dlse[b] = b == 0 ? 1 : b == 1 ? -1 : 0;
        for (int64_t j = 0; j < 14; j++) {
            c.v[b * 14 + j] = j ? 1 : 0;
            c.bias[b * 14 + j] =
                j ? -(0x1p60 * a[j] + 0x1p18 * (double)(b ? 1024 + 97 * b + 31 * j : 3 * j)) : 0;
        }
    }
    c.sinks[0] = -0x1p61;
    c.want_dsinks = 1;
    for (int nofast = 0; nofast < 2; nofast++) {
        g_no_fast = nofast;
        ck_assert_int_eq(tc_run(&c, 0, NULL), SMATTN_OK);
        ck_assert_msg(bits64(c.dsinks[0]) == bits64(-0.0), "dsinks %a", c.dsinks[0]);
    }
    g_no_fast = 0;
    tc_free(&c);
}
END_TEST

/* The same far keys: the GQA backward against its MHA expansion (K, V repeated per head):
 * dQ the same bits, and each dK, and the far keys' dV, the signed zero the expansion's
 * head 0 gives (the others' terms being e^{2^28} smaller). */
START_TEST(gqa_far_keys_mha_expansion)
{
    static const double dout3[3] = {1, -0.5, 2};
    tc g, m;
    far_keys_case(&g, 3, dout3);
    far_keys_case(&m, 3, dout3);
    free(m.k), free(m.v);
    m.p.Hkv = 3;
    m.k = calloc((size_t)nk(&m), sizeof(double));
    m.v = malloc((size_t)nv(&m) * sizeof(double));
    for (int64_t j = 0; j < 14; j++)
        for (int64_t h = 0; h < 3; h++)
            m.v[j * 3 + h] = g.v[j];
    ck_assert_int_eq(tc_run(&g, 0, NULL), SMATTN_OK);
    ck_assert_int_eq(tc_run(&m, 0, NULL), SMATTN_OK);
    for (int64_t x = 0; x < nq(&g); x++)
        ck_assert_uint_eq(bits64(g.dq[x]), bits64(m.dq[x]));
    for (int64_t j = 0; j < 14; j++) {
        for (int64_t d = 0; d < 2; d++)
            ck_assert_msg(bits64(g.dk[j * 2 + d]) == bits64(m.dk[(j * 3 + 0) * 2 + d]),
                          "dk[%" PRId64 "][%" PRId64 "] = %a, head 0's %a", j, d, g.dk[j * 2 + d],
                          m.dk[(j * 3) * 2 + d]);
        if (j) /* P_hj: head 0's */
            ck_assert_uint_eq(bits64(g.dv[j]), bits64(m.dv[j * 3]));
    }
    /* dV_0 = sum_h dO_h (1 - far terms): 2.5 less something far below its ulp, the
     * expansion's heads 1, -0.5 and 2 */
    ck_assert_msg(g.dv[0] == m.dv[0] + m.dv[1] + m.dv[2] && g.dv[0] == 2.5, "dv[0] = %a", g.dv[0]);
    tc_free(&g);
    tc_free(&m);
}
END_TEST

/* dSinks across batches: two batches with the same inputs and opposite dO and dLSE give
 * opposite irrational terms P_sink (dLSE - Delta) whose sum is 0 exactly (+0); a row that
 * sees no key but its sink adds its dLSE exactly; a NaN sink makes its head's dsink NaN. */
START_TEST(dsinks_traps)
{
    tc c;
    tc_init(&c, 2, 2, 4, 2, 1, 3, 2, 27);
    tc_add_sinks(&c);
    tc_add_dlse(&c);
    tc_add_mask(&c, 1000000);
    memset(c.mask, 1, (size_t)nfull(&c));
    int64_t half = nq(&c) / 2, halfo = no(&c) / 2, halfl = nl(&c) / 2;
    memcpy(c.q + half, c.q, (size_t)half * sizeof(double));
    memcpy(c.k + nk(&c) / 2, c.k, (size_t)(nk(&c) / 2) * sizeof(double));
    memcpy(c.v + nv(&c) / 2, c.v, (size_t)(nv(&c) / 2) * sizeof(double));
    for (int64_t x = 0; x < halfo; x++)
        c.dout[halfo + x] = -c.dout[x];
    for (int64_t x = 0; x < halfl; x++)
        c.dlse[halfl + x] = -c.dlse[x];
    c.want_dsinks = 1;
    ck_assert_int_eq(tc_run(&c, 0, NULL), SMATTN_OK);
    ck_assert_msg(bits64(c.dsinks[0]) == 0 && bits64(c.dsinks[1]) == 0, "dsinks %a %a", c.dsinks[0],
                  c.dsinks[1]);
    /* head 1, batch 0: both rows see no key: they add dLSE (their P_sink is 1, Delta 0);
     * batch 1 stays as it was, so the head's dsink is the batch-0 rows' dLSE plus the
     * batch-1 rows' terms, checked against the derivative */
    memset(&c.mask[(0 * 2 + 1) * 2 * 4], 0, 2 * 4);
    check_against_diffs(&c);
    c.sinks[0] = NAN;
    ck_assert_int_eq(tc_run(&c, 0, NULL), SMATTN_OK);
    ck_assert(isnan(c.dsinks[0]) && isfinite(c.dsinks[1]));
    tc_free(&c);
}
END_TEST

/* ---- properties -------------------------------------------------------------------------- */

/* sum_j dS_ij = 0 without dLSE and sinks, so sum_j dK_j = scale sum_i q_i sum_j dS_ij = 0:
 * the rounded dK_j sum to within half an ulp each of 0. */
START_TEST(dk_sums_to_zero)
{
    tc c;
    tc_init(&c, 1, 4, 7, 2, 2, 3, 3, 31);
    c.p.causal = SMATTN_CAUSAL_LOWER_RIGHT;
    ck_assert_int_eq(tc_run(&c, 0, NULL), SMATTN_OK);
    for (int64_t g = 0; g < 2; g++)
        for (int64_t d = 0; d < 3; d++) {
            mpfr_t s, slack;
            mpfr_inits2(4000, s, slack, (mpfr_ptr)0);
            mpfr_set_zero(s, 1);
            mpfr_set_zero(slack, 1);
            for (int64_t j = 0; j < 7; j++) {
                double x = c.dk[(j * 2 + g) * 3 + d];
                mpfr_add_d(s, s, x, MPFR_RNDN); /* exact at 4000 bits */
                mpfr_add_d(slack, slack, 0.5 * (nextafter(fabs(x), HUGE_VAL) - fabs(x)), MPFR_RNDN);
            }
            ck_assert(mpfr_cmpabs(s, slack) <= 0);
            mpfr_clears(s, slack, (mpfr_ptr)0);
        }
    tc_free(&c);
}
END_TEST

/* Keys no row can see (beyond kv_lens, masked for every row, -inf bias everywhere) get +0
 * in dK and dV, and the NaN stored there is never read. */
START_TEST(masked_keys_exact_zero)
{
    tc c;
    tc_init(&c, 1, 3, 6, 2, 1, 2, 2, 32);
    c.kv_lens[0] = 5;
    c.p.kv_lens = c.kv_lens;
    tc_add_mask(&c, 1000000);
    tc_add_bias(&c);
    for (int64_t h = 0; h < 2; h++)
        for (int64_t i = 0; i < 3; i++) {
            c.mask[(h * 3 + i) * 6 + 1] = 0;         /* key 1 masked */
            c.bias[(h * 3 + i) * 6 + 3] = -HUGE_VAL; /* key 3 -inf bias */
        }
    int64_t dead[] = {1, 3, 5};
    for (int t = 0; t < 3; t++) {
        for (int64_t d = 0; d < 2; d++)
            c.k[dead[t] * 2 + d] = NAN, c.v[dead[t] * 2 + d] = -HUGE_VAL;
    }
    ck_assert_int_eq(tc_run(&c, 0, NULL), SMATTN_OK);
    for (int t = 0; t < 3; t++)
        for (int64_t d = 0; d < 2; d++) {
            ck_assert_uint_eq(bits64(c.dk[dead[t] * 2 + d]), 0);
            ck_assert_uint_eq(bits64(c.dv[dead[t] * 2 + d]), 0);
        }
    for (int64_t x = 0; x < nq(&c); x++)
        ck_assert(isfinite(c.dq[x]));
    ck_assert(c.dk[0] != 0 && isfinite(c.dk[0]));
    tc_free(&c);
}
END_TEST

/* GQA dK, dV are the exact group sums of the MHA expansion's: each oracle output is the
 * rounding of its exact value, so |gqa - sum_h mha_h| <= ulp(gqa)/2 + sum_h ulp(mha_h)/2;
 * dQ is identical. */
START_TEST(gqa_equals_mha_group_sums)
{
    tc g, m;
    tc_init(&g, 1, 3, 5, 4, 2, 2, 3, 33);
    tc_init(&m, 1, 3, 5, 4, 4, 2, 3, 33);
    g.p.causal = m.p.causal = SMATTN_CAUSAL_UPPER_LEFT;
    memcpy(m.q, g.q, (size_t)nq(&g) * sizeof(double));
    memcpy(m.dout, g.dout, (size_t)no(&g) * sizeof(double));
    for (int64_t j = 0; j < 5; j++)
        for (int64_t h = 0; h < 4; h++) {
            memcpy(&m.k[(j * 4 + h) * 2], &g.k[(j * 2 + h / 2) * 2], 2 * sizeof(double));
            memcpy(&m.v[(j * 4 + h) * 3], &g.v[(j * 2 + h / 2) * 3], 3 * sizeof(double));
        }
    ck_assert_int_eq(tc_run(&g, 0, NULL), SMATTN_OK);
    ck_assert_int_eq(tc_run(&m, 0, NULL), SMATTN_OK);
    for (int64_t x = 0; x < nq(&g); x++)
        ck_assert_uint_eq(bits64(g.dq[x]), bits64(m.dq[x]));
    for (int which = 0; which < 2; which++) {
        int64_t W = which ? 3 : 2;
        const double *gx = which ? g.dv : g.dk, *mx = which ? m.dv : m.dk;
        for (int64_t j = 0; j < 5; j++)
            for (int64_t kv = 0; kv < 2; kv++)
                for (int64_t d = 0; d < W; d++) {
                    mpfr_t s, slack;
                    mpfr_inits2(4000, s, slack, (mpfr_ptr)0);
                    double a = gx[(j * 2 + kv) * W + d];
                    mpfr_set_d(s, -a, MPFR_RNDN);
                    mpfr_set_d(slack, 0.5 * (nextafter(fabs(a), HUGE_VAL) - fabs(a)), MPFR_RNDN);
                    for (int64_t h = 2 * kv; h < 2 * kv + 2; h++) {
                        double b = mx[(j * 4 + h) * W + d];
                        mpfr_add_d(s, s, b, MPFR_RNDN);
                        mpfr_add_d(slack, slack, 0.5 * (nextafter(fabs(b), HUGE_VAL) - fabs(b)),
                                   MPFR_RNDN);
                    }
                    ck_assert_msg(mpfr_cmpabs(s, slack) <= 0, "%s j %" PRId64, which ? "dv" : "dk",
                                  j);
                    mpfr_clears(s, slack, (mpfr_ptr)0);
                }
    }
    tc_free(&g);
    tc_free(&m);
}
END_TEST

/* Reversing the keys (no causality, no window) reverses dK and dV and keeps dQ. */
START_TEST(key_permutation)
{
    tc a, b;
    tc_init(&a, 1, 2, 6, 2, 1, 3, 2, 34);
    tc_init(&b, 1, 2, 6, 2, 1, 3, 2, 34);
    tc_add_sinks(&a);
    tc_add_sinks(&b);
    b.sinks[0] = a.sinks[0], b.sinks[1] = a.sinks[1];
    for (int64_t j = 0; j < 6; j++) {
        memcpy(&b.k[j * 3], &a.k[(5 - j) * 3], 3 * sizeof(double));
        memcpy(&b.v[j * 2], &a.v[(5 - j) * 2], 2 * sizeof(double));
    }
    ck_assert_int_eq(tc_run(&a, 0, NULL), SMATTN_OK);
    ck_assert_int_eq(tc_run(&b, 0, NULL), SMATTN_OK);
    for (int64_t x = 0; x < nq(&a); x++)
        ck_assert_uint_eq(bits64(a.dq[x]), bits64(b.dq[x]));
    for (int64_t j = 0; j < 6; j++) {
        for (int64_t d = 0; d < 3; d++)
            ck_assert_uint_eq(bits64(a.dk[j * 3 + d]), bits64(b.dk[(5 - j) * 3 + d]));
        for (int64_t d = 0; d < 2; d++)
            ck_assert_uint_eq(bits64(a.dv[j * 2 + d]), bits64(b.dv[(5 - j) * 2 + d]));
    }
    tc_free(&a);
    tc_free(&b);
}
END_TEST

START_TEST(bitwise_across_threads)
{
    tc a;
    tc_init(&a, 2, 3, 6, 4, 2, 3, 2, 35);
    tc_add_bias(&a);
    a.odt = SMATTN_BF16;
    ck_assert_int_eq(tc_run(&a, 1, NULL), SMATTN_OK);
    double *ref[3] = {a.dq, a.dk, a.dv};
    a.dq = a.dk = a.dv = NULL;
    for (int th = 2; th <= 4; th += 2) {
        ck_assert_int_eq(tc_run(&a, th, NULL), SMATTN_OK);
        double *got[3] = {a.dq, a.dk, a.dv};
        int64_t n[3] = {nq(&a), nk(&a), nv(&a)};
        for (int k = 0; k < 3; k++)
            for (int64_t x = 0; x < n[k]; x++)
                ck_assert_uint_eq(bits64(ref[k][x]), bits64(got[k][x]));
    }
    free(ref[0]), free(ref[1]), free(ref[2]);
    tc_free(&a);
}
END_TEST

/* The NaN convention: an empty row's dQ is NaN and so are dK and dV of every key of its
 * batch and KV head; a NaN in dO makes its row's dQ NaN, dK NaN at its visible keys, and
 * dV NaN only in that column. */
START_TEST(nan_conventions)
{
    tc c;
    tc_init(&c, 2, 2, 3, 1, 1, 2, 2, 36);
    c.p.empty_rows = SMATTN_EMPTY_NAN;
    c.p.causal = SMATTN_CAUSAL_LOWER_RIGHT;
    c.kv_lens[0] = 3, c.kv_lens[1] = 1;
    c.p.kv_lens = c.kv_lens;
    /* batch 1: S = 2 > T_1 = 1 with lower-right causality: row 0 is empty */
    c.dout[0 * 2 + 1] = NAN; /* batch 0, row 0, column 1 */
    c.want_dbias = 1;
    ck_assert_int_eq(tc_run(&c, 0, NULL), SMATTN_OK);
    /* dBias [B=2][Hq=1][S=2][T=3]: b0 row 0 NaN at its keys 0, 1 and +0 at key 2; b0 row 1
     * finite; b1 row 0 (empty, nan) NaN at every key; b1 row 1 sees key 0 only */
    ck_assert(isnan(c.dbias[0]) && isnan(c.dbias[1]) && bits64(c.dbias[2]) == 0);
    ck_assert(isfinite(c.dbias[3]) && isfinite(c.dbias[4]) && isfinite(c.dbias[5]));
    ck_assert(isnan(c.dbias[6]) && isnan(c.dbias[7]) && isnan(c.dbias[8]));
    ck_assert(isfinite(c.dbias[9]) && bits64(c.dbias[10]) == 0 && bits64(c.dbias[11]) == 0);
    ck_assert(isnan(c.dq[0]) && isnan(c.dq[1]));       /* b0 row 0: dO NaN */
    ck_assert(isfinite(c.dq[2]) && isfinite(c.dq[3])); /* b0 row 1 */
    /* b0 row 0 sees key 0 and 1 (lower-right, S=2, T=3): dK NaN there, key 2 from row 1 */
    ck_assert(isnan(c.dk[0]) && isnan(c.dk[2]) && isfinite(c.dk[4]));
    ck_assert(isfinite(c.dv[0]) && isnan(c.dv[1]));
    ck_assert(isnan(c.dq[4]) && isnan(c.dq[5])); /* b1 row 0: empty */
    for (int64_t x = 6; x < 12; x++)
        ck_assert(isnan(c.dk[x]) && isnan(c.dv[x])); /* every key of batch 1 */
    tc_free(&c);
}
END_TEST

/* |sum_k x_k - target| against the rounding of the x_k: each is its exact value rounded to
 * nearest, so the exact sum lies within sum_k ulp(x_k)/2 of the sum of the rounded values
 * (taken exactly at 4000 bits). 1 if target is in that interval. */
static int sum_within_rounding(const double *x, int64_t n, double target)
{
    mpfr_t s, slack;
    mpfr_inits2(4000, s, slack, (mpfr_ptr)0);
    mpfr_set_d(s, -target, MPFR_RNDN);
    mpfr_set_zero(slack, 1);
    for (int64_t k = 0; k < n; k++) {
        double a = x[k];
        mpfr_add_d(s, s, a, MPFR_RNDN);
        mpfr_add_d(slack, slack, 0.5 * (nextafter(fabs(a), HUGE_VAL) - fabs(a)), MPFR_RNDN);
    }
    int ok = mpfr_cmpabs(s, slack) <= 0;
    if (!ok)
        fprintf(stderr, "sum %a off target %a by more than %a\n", mpfr_get_d(s, MPFR_RNDN), target,
                mpfr_get_d(slack, MPFR_RNDN));
    mpfr_clears(s, slack, (mpfr_ptr)0);
    return ok;
}

/* dBias summed over a broadcast bias's dimensions (SPEC 10.1: a stride 0 asks for the sum
 * over that dimension): the full-shape dBias of the same problem summed, within the
 * roundings (half an ulp of each full element, of the sum); over the keys, a row's sum is
 * exactly dLSE_i (0 without dLSE, SPEC 10.1: sum_j P_j (dP_j - Delta) = 0), an exact
 * zero or rational only the exact path decides (with the fast tiers off too); a `nan`
 * empty row makes every sum it enters NaN. */
static smattn_status run_dbias_strides(tc *c, const int64_t st[4], double *out)
{
    smattn_inputs in;
    smattn_grad_inputs gin;
    smattn_grad_outputs go;
    c->want_dbias = 0;
    tc_tensors(c, &in, &gin, &go);
    go.dbias = (smattn_out_tensor){out, SMATTN_F64, {st[0], st[1], st[2], st[3]}};
    smattn_ref_config cfg;
    memset(&cfg, 0, sizeof cfg);
    cfg.no_fast_phase = g_no_fast;
    return smattn_ref_backward(&c->p, &in, &gin, &go, &cfg, NULL);
}

static int sum_rounded(const double *x, int64_t n, double target)
{
    mpfr_t s, slack;
    mpfr_inits2(4000, s, slack, (mpfr_ptr)0);
    mpfr_set_d(s, -target, MPFR_RNDN);
    mpfr_set_d(slack, 0.5 * (nextafter(fabs(target), HUGE_VAL) - fabs(target)), MPFR_RNDN);
    for (int64_t k = 0; k < n; k++) {
        mpfr_add_d(s, s, x[k], MPFR_RNDN);
        mpfr_add_d(slack, slack, 0.5 * (nextafter(fabs(x[k]), HUGE_VAL) - fabs(x[k])), MPFR_RNDN);
    }
    int ok = mpfr_cmpabs(s, slack) <= 0;
    mpfr_clears(s, slack, (mpfr_ptr)0);
    return ok;
}

START_TEST(dbias_broadcast_sums)
{
    for (int nofast = 0; nofast < 2; nofast++) {
        g_no_fast = nofast;
        tc c;
        tc_init(&c, 2, 3, 5, 4, 2, 3, 2, 61);
        c.p.causal = SMATTN_CAUSAL_LOWER_RIGHT;
        tc_add_bias(&c);
        tc_add_mask(&c, 7);
        c.want_dbias = 1;
        ck_assert_int_eq(tc_run(&c, 0, NULL), SMATTN_OK);
        const int64_t B = 2, H = 4, S = 3, T = 5;
        double *full = malloc((size_t)nfull(&c) * sizeof(double));
        memcpy(full, c.dbias, (size_t)nfull(&c) * sizeof(double));
        /* [1, 1, S, T]: over batches and heads (rows of both KV heads); [B, H, 1, 1] */
        static const int64_t sts[3][4] = {{0, 0, T, 1}, {H * T, T, 0, 1}, {H, 1, 0, 0}};
        for (int v = 0; v < 3; v++) {
            double out[2 * 4 * 3 * 5];
            ck_assert_int_eq(run_dbias_strides(&c, sts[v], out), SMATTN_OK);
            for (int64_t b = 0; b < B; b++)
                for (int64_t h = 0; h < H; h++)
                    for (int64_t i = 0; i < S; i++)
                        for (int64_t j = 0; j < T; j++) {
                            const int64_t *st = sts[v];
                            if ((st[0] == 0 && b) || (st[1] == 0 && h) || (st[2] == 0 && i) ||
                                (st[3] == 0 && j))
                                continue; /* one element per summed set */
                            double terms[2 * 4 * 3 * 5];
                            int64_t n = 0;
                            for (int64_t bb = 0; bb < B; bb++)
                                for (int64_t hh = 0; hh < H; hh++)
                                    for (int64_t ii = 0; ii < S; ii++)
                                        for (int64_t jj = 0; jj < T; jj++)
                                            if ((st[0] == 0 || bb == b) &&
                                                (st[1] == 0 || hh == h) &&
                                                (st[2] == 0 || ii == i) && (st[3] == 0 || jj == j))
                                                terms[n++] =
                                                    full[((bb * H + hh) * S + ii) * T + jj];
                            double got = out[b * st[0] + h * st[1] + i * st[2] + j * st[3]];
                            ck_assert_msg(sum_rounded(terms, n, got),
                                          "variant %d (%lld,%lld,%lld,%lld): %a", v, (long long)b,
                                          (long long)h, (long long)i, (long long)j, got);
                            if (v == 2) /* over S and T, no dLSE or sink: exactly +0 */
                                ck_assert_uint_eq(bits64(got), 0);
                        }
        }
        /* over the keys with dLSE: a row's sum is its dLSE exactly */
        tc_add_dlse(&c);
        static const int64_t stj[4] = {H * S, S, 1, 0};
        double out[2 * 4 * 3];
        ck_assert_int_eq(run_dbias_strides(&c, stj, out), SMATTN_OK);
        for (int64_t r = 0; r < B * H * S; r++) {
            int empty = 1; /* a row the mask and causality leave empty sums to +0 */
            for (int64_t j = 0; j < T; j++)
                empty &= c.mask[r * T + j] == 0 || j > r % S + T - S;
            ck_assert_msg(bits64(out[r]) == bits64(empty ? 0.0 : c.dlse[r]),
                          "row %lld: %a, dLSE %a", (long long)r, out[r], c.dlse[r]);
        }
        /* a `nan` empty row: NaN in every sum it enters */
        c.p.empty_rows = SMATTN_EMPTY_NAN;
        memset(c.mask, 0, (size_t)T); /* row (0, 0, 0) sees nothing */
        static const int64_t sth[4] = {0, 0, T, 1};
        double o3[3 * 5];
        ck_assert_int_eq(run_dbias_strides(&c, sth, o3), SMATTN_OK);
        for (int64_t j = 0; j < T; j++)
            ck_assert_msg(isnan(o3[j]), "j %lld: %a", (long long)j, o3[j]);
        free(full);
        tc_free(&c);
    }
    g_no_fast = 0;
}
END_TEST

/* The sums no expansion reaches (SPEC 10.3 items 3 and 6): a dBias summed over the keys under
 * softcap (no expansion), and one summed over all four dimensions of a problem whose
 * denominators multiply past the expansion limit. Each takes every key of each of its rows,
 * so it is exactly the sum of those rows' dLSE (+0 without dLSE; a row the mask leaves empty
 * adds nothing), decided structurally; a row with a finite sink has no such identity. */
START_TEST(dbias_key_sums_structural)
{
    for (int variant = 0; variant < 4; variant++) {
        const int big = variant >= 2, with_dlse = variant & 1;
        tc c;
        if (big)
            tc_init(&c, 2, 1, 600, 4, 2, 4, 4, 71);
        else
            tc_init(&c, 2, 3, 5, 4, 2, 3, 2, 73);
        tc_add_bias(&c);
        tc_add_mask(&c, 7);
        if (with_dlse)
            tc_add_dlse(&c);
        if (!big)
            c.p.softcap = 1.5;
        const int64_t B = c.p.B, H = c.p.Hq, S = c.p.S, T = c.p.T;
        /* big: [1, 1, 1, 1] (every row, every key); else [B, H, S, 1] */
        const int64_t st[4] = {big ? 0 : H * S, big ? 0 : S, big ? 0 : 1, 0};
        double out[2 * 4 * 3];
        g_no_fast = 0;
        ck_assert_int_eq(run_dbias_strides(&c, st, out), SMATTN_OK);
        mpfr_t sum; /* the dLSE summed exactly, then rounded once */
        mpfr_init2(sum, 4000);
        mpfr_set_zero(sum, 1);
        for (int64_t r = 0; r < B * H * S; r++) {
            int empty = 1;
            for (int64_t j = 0; j < T; j++)
                empty &= c.mask[r * T + j] == 0;
            if (!empty && with_dlse)
                mpfr_add_d(sum, sum, c.dlse[r], MPFR_RNDN);
            if (!big || r + 1 == B * H * S) {
                const int64_t e = big ? 0 : r;
                const double want = mpfr_get_d(sum, MPFR_RNDN);
                ck_assert_msg(bits64(out[e]) == bits64(want),
                              "variant %d element %lld: %a, want %a", variant, (long long)e, out[e],
                              want);
                mpfr_set_zero(sum, 1);
            }
        }
        mpfr_clear(sum);
        tc_free(&c);
    }
}
END_TEST

/* dBias = dS: over a row's visible keys sum_j dS_j = dLSE_i - P_sink (dLSE_i - Delta_i)
 * (sum_j P_j (dP_j - Delta) = 0 and sum_j P_j = 1 - P_sink). Without sinks each row's dBias
 * sums to dLSE_i (0 without dLSE); with one query per head, dsink_h is the row's sink term,
 * so sum_j dBias_hj + dsink_h = dLSE_h. A dS without its dLSE term, or a sink weight left
 * out of the denominator, breaks these by far more than the outputs' rounding. */
START_TEST(dS_row_sums)
{
    for (int variant = 0; variant < 3; variant++) {
        tc c;
        const int64_t S = variant == 2 ? 1 : 3, T = 7, Hq = 3;
        tc_init(&c, 1, S, T, Hq, 1, 2, 3, 51 + (uint64_t)variant);
        c.p.causal = variant == 1 ? SMATTN_CAUSAL_LOWER_RIGHT : SMATTN_CAUSAL_NONE;
        tc_add_bias(&c);
        tc_add_mask(&c, 3);
        for (int64_t r = 0; r < Hq * S; r++)
            c.mask[r * T + T - 1] = 1; /* every row of the first two variants sees key T - 1 */
        if (variant >= 1)
            tc_add_dlse(&c);
        if (variant == 2) {
            tc_add_sinks(&c);
            c.want_dsinks = 1;
        }
        c.want_dbias = 1;
        ck_assert_int_eq(tc_run(&c, 0, NULL), SMATTN_OK);
        for (int64_t h = 0; h < Hq; h++)
            for (int64_t i = 0; i < S; i++) {
                double terms[8];
                memcpy(terms, &c.dbias[(h * S + i) * T], (size_t)T * sizeof(double));
                terms[T] = c.sinks ? c.dsinks[h] : 0.0;
                double target = c.dlse ? c.dlse[h * S + i] : 0.0;
                ck_assert_msg(sum_within_rounding(terms, T + 1, target),
                              "variant %d row h %" PRId64 " i %" PRId64, variant, h, i);
                ck_assert(terms[0] != 0 || terms[1] != 0); /* not an empty row */
            }
        tc_free(&c);
    }
}
END_TEST

/* A row of a prefill is a decode: with dO and dLSE zero on every other row, the prefill's
 * gradients are that row's alone (the other rows' dS are exactly 0), so a decode step of
 * the row (S = 1, the keys it sees: lower-right causality over kv_lens = i + T - S + 1)
 * gives the same exact values, hence the same bits, in dQ, dK, dV, dBias and dSinks; the
 * other rows' dQ are +0. GQA, a bias, sinks and dLSE included. */
START_TEST(decode_row_of_prefill)
{
    const int64_t S = 4, T = 6, Hq = 4, Hkv = 2, D = 3, Dv = 2;
    for (int64_t i = 0; i < S; i++) {
        tc pre, dec;
        tc_init(&pre, 1, S, T, Hq, Hkv, D, Dv, 61);
        pre.p.causal = SMATTN_CAUSAL_LOWER_RIGHT;
        tc_add_bias(&pre);
        tc_add_sinks(&pre);
        tc_add_dlse(&pre);
        pre.want_dbias = pre.want_dsinks = 1;
        for (int64_t r = 0; r < S; r++)
            for (int64_t h = 0; h < Hq; h++) {
                if (r == i)
                    continue;
                for (int64_t cc = 0; cc < Dv; cc++)
                    pre.dout[(r * Hq + h) * Dv + cc] = 0;
                pre.dlse[h * S + r] = 0;
            }
        tc_init(&dec, 1, 1, T, Hq, Hkv, D, Dv, 62);
        dec.p.causal = SMATTN_CAUSAL_LOWER_RIGHT;
        dec.kv_lens[0] = i + T - S + 1;
        dec.p.kv_lens = dec.kv_lens;
        memcpy(dec.k, pre.k, (size_t)nk(&pre) * sizeof(double));
        memcpy(dec.v, pre.v, (size_t)nv(&pre) * sizeof(double));
        memcpy(dec.q, &pre.q[i * Hq * D], (size_t)(Hq * D) * sizeof(double));
        memcpy(dec.dout, &pre.dout[i * Hq * Dv], (size_t)(Hq * Dv) * sizeof(double));
        tc_add_bias(&dec);
        tc_add_sinks(&dec);
        tc_add_dlse(&dec);
        memcpy(dec.sinks, pre.sinks, (size_t)Hq * sizeof(double));
        for (int64_t h = 0; h < Hq; h++) {
            memcpy(&dec.bias[h * T], &pre.bias[(h * S + i) * T], (size_t)T * sizeof(double));
            dec.dlse[h] = pre.dlse[h * S + i];
        }
        dec.want_dbias = dec.want_dsinks = 1;
        ck_assert_int_eq(tc_run(&pre, 0, NULL), SMATTN_OK);
        ck_assert_int_eq(tc_run(&dec, 0, NULL), SMATTN_OK);
        for (int64_t r = 0; r < S; r++)
            for (int64_t x = 0; x < Hq * D; x++) {
                double want = r == i ? dec.dq[x] : 0.0;
                ck_assert_msg(bits64(pre.dq[r * Hq * D + x]) == bits64(want),
                              "row %" PRId64 ": dq[%" PRId64 "][%" PRId64 "] %a vs %a", i, r, x,
                              pre.dq[r * Hq * D + x], want);
            }
        for (int64_t x = 0; x < nk(&pre); x++)
            ck_assert_msg(bits64(pre.dk[x]) == bits64(dec.dk[x]),
                          "row %" PRId64 ": dk[%" PRId64 "] %a vs %a", i, x, pre.dk[x], dec.dk[x]);
        for (int64_t x = 0; x < nv(&pre); x++)
            ck_assert_msg(bits64(pre.dv[x]) == bits64(dec.dv[x]),
                          "row %" PRId64 ": dv[%" PRId64 "] %a vs %a", i, x, pre.dv[x], dec.dv[x]);
        for (int64_t h = 0; h < Hq; h++) {
            ck_assert_uint_eq(bits64(pre.dsinks[h]), bits64(dec.dsinks[h]));
            for (int64_t j = 0; j < T; j++)
                ck_assert_uint_eq(bits64(pre.dbias[(h * S + i) * T + j]),
                                  bits64(dec.dbias[h * T + j]));
        }
        /* not vacuous: the row has gradients, and the keys it cannot see none */
        ck_assert(dec.dq[0] != 0 && dec.dv[0] != 0);
        if (i + T - S + 1 < T)
            ck_assert_uint_eq(bits64(pre.dk[(T - 1) * Hkv * D]), 0);
        tc_free(&pre);
        tc_free(&dec);
    }
}
END_TEST

/* ---- validation -------------------------------------------------------------------------- */

/* ALiBi (SPEC 2.8) enters the backward as the bias it stands for: the gradients with a
 * mode are, bit for bit, those of the problem whose binary64 bias holds the exact term
 * (symmetric, one-sided: the distance times the slope; mask: the slope times the f32
 * bias), through every tier (fast tiers on and off) and under softcap. dBias with the mask
 * mode is not defined. */
START_TEST(alibi_is_its_bias)
{
    static const smattn_alibi_mode modes[3] = {SMATTN_ALIBI_SYMMETRIC, SMATTN_ALIBI_ONE_SIDED,
                                               SMATTN_ALIBI_MASK};
    for (int run = 0; run < 12; run++) {
        const smattn_alibi_mode mode = modes[run % 3];
        const int softcap = run / 3 % 2, no_fast = run / 6;
        tc c;
        tc_init(&c, 2, 3, 5, 4, 2, 3, 2, 700 + (uint64_t)run);
        c.p.causal = run % 2 ? SMATTN_CAUSAL_LOWER_RIGHT : SMATTN_CAUSAL_NONE;
        c.p.softcap = softcap ? 2.5 : 0.0;
        int64_t qlens[2] = {3, 2}, kvlens[2] = {5, 4};
        c.p.q_lens = qlens, c.p.kv_lens = kvlens;
        float slopes[8] = {0.5f, -0.25f, 1.0f, 0.125f, 0.0f, 0.75f, -1.5f, 0.0625f};
        c.p.alibi_mode = mode;
        c.p.alibi_slopes = slopes;
        c.p.alibi_slopes_per_batch = 1;
        tc_add_bias(&c); /* k / 1024: exact in binary32 */
        tc_add_dlse(&c);
        smattn_inputs in;
        smattn_grad_inputs gin;
        smattn_grad_outputs go;
        tc_tensors(&c, &in, &gin, &go);
        const int64_t nf = nfull(&c);
        float *b32 = malloc((size_t)nf * sizeof *b32);
        double *twin_bias = malloc((size_t)nf * sizeof *twin_bias);
        for (int64_t x = 0; x < nf; x++)
            b32[x] = (float)c.bias[x];
        if (mode == SMATTN_ALIBI_MASK) {
            in.bias.data = b32;
            in.bias.dtype = SMATTN_F32;
        } else {
            in.bias.data = NULL;
        }
        for (int64_t b = 0; b < 2; b++)
            for (int64_t h = 0; h < 4; h++)
                for (int64_t i = 0; i < 3; i++)
                    for (int64_t j = 0; j < 5; j++) {
                        int64_t x = ((b * 4 + h) * 3 + i) * 5 + j;
                        double m = slopes[b * 4 + h];
                        int64_t d = mode == SMATTN_ALIBI_SYMMETRIC
                                        ? -llabs(i + kvlens[b] - qlens[b] - j)
                                        : j - kvlens[b] + 1;
                        twin_bias[x] = mode == SMATTN_ALIBI_MASK ? m * (double)b32[x] : m * (double)d;
                    }
        smattn_ref_config cfg;
        memset(&cfg, 0, sizeof cfg);
        cfg.no_fast_phase = no_fast;
        const size_t nbytes[3] = {(size_t)nq(&c) * 8, (size_t)nk(&c) * 8, (size_t)nv(&c) * 8};
        void *got[3];
        ck_assert_int_eq(smattn_ref_backward(&c.p, &in, &gin, &go, &cfg, NULL), SMATTN_OK);
        for (int k = 0; k < 3; k++) {
            got[k] = malloc(nbytes[k]);
            memcpy(got[k], c.obuf[k], nbytes[k]);
        }
        smattn_problem pt = c.p;
        pt.alibi_mode = SMATTN_ALIBI_NONE;
        pt.alibi_slopes = NULL;
        smattn_inputs it = in;
        it.bias = (smattn_tensor){twin_bias, SMATTN_F64, {60, 15, 5, 1}};
        ck_assert_int_eq(smattn_ref_backward(&pt, &it, &gin, &go, &cfg, NULL), SMATTN_OK);
        for (int k = 0; k < 3; k++) {
            ck_assert_msg(memcmp(got[k], c.obuf[k], nbytes[k]) == 0, "run %d gradient %d", run, k);
            free(got[k]);
        }
        /* the ALiBi changed something: without it the gradients differ */
        pt.alibi_mode = SMATTN_ALIBI_NONE;
        it.bias.data = NULL;
        if (mode != SMATTN_ALIBI_MASK) {
            ck_assert_int_eq(smattn_ref_backward(&pt, &it, &gin, &go, &cfg, NULL), SMATTN_OK);
            void *plain = malloc(nbytes[0]);
            memcpy(plain, c.obuf[0], nbytes[0]);
            ck_assert_int_eq(smattn_ref_backward(&c.p, &in, &gin, &go, &cfg, NULL), SMATTN_OK);
            ck_assert(memcmp(plain, c.obuf[0], nbytes[0]) != 0);
            free(plain);
        } else { /* SPEC 10.4: no dBias of a distance mask */
            double *db = malloc((size_t)nf * 8);
            smattn_grad_outputs g2 = go;
            g2.dbias = (smattn_out_tensor){db, SMATTN_F64, {60, 15, 5, 1}};
            ck_assert_int_eq(smattn_ref_backward(&c.p, &in, &gin, &g2, &cfg, NULL),
                             SMATTN_ERR_UNSUPPORTED);
            free(db);
        }
        free(b32), free(twin_bias);
        tc_free(&c);
    }
}
END_TEST

START_TEST(validation)
{
    tc c;
    tc_init(&c, 1, 2, 3, 2, 1, 2, 2, 41);
    smattn_inputs in;
    smattn_grad_inputs gin;
    smattn_grad_outputs go;
    tc_tensors(&c, &in, &gin, &go);
    ck_assert_int_eq(smattn_ref_backward(&c.p, &in, &gin, &go, NULL, NULL), SMATTN_OK);
    ck_assert_int_eq(smattn_ref_backward(NULL, &in, &gin, &go, NULL, NULL), SMATTN_ERR_NULL);
    ck_assert_int_eq(smattn_ref_backward(&c.p, &in, NULL, &go, NULL, NULL), SMATTN_ERR_NULL);
    smattn_grad_inputs g2 = gin;
    g2.dout.data = NULL;
    ck_assert_int_eq(smattn_ref_backward(&c.p, &in, &g2, &go, NULL, NULL), SMATTN_ERR_NULL);
    g2 = gin;
    g2.dout.dtype = SMATTN_BOOL;
    ck_assert_int_eq(smattn_ref_backward(&c.p, &in, &g2, &go, NULL, NULL), SMATTN_ERR_DTYPE);
    g2 = gin;
    g2.dlse = (smattn_tensor){c.dout, SMATTN_F64, {-1, 0, 0, 0}};
    ck_assert_int_eq(smattn_ref_backward(&c.p, &in, &g2, &go, NULL, NULL), SMATTN_ERR_STRIDE);
    smattn_grad_outputs o2 = go;
    o2.dk.data = NULL;
    ck_assert_int_eq(smattn_ref_backward(&c.p, &in, &gin, &o2, NULL, NULL), SMATTN_ERR_NULL);
    o2 = go;
    o2.dv.data = go.dq.data; /* overlaps dQ */
    ck_assert_int_eq(smattn_ref_backward(&c.p, &in, &gin, &o2, NULL, NULL), SMATTN_ERR_ALIAS);
    o2 = go;
    o2.dq.data = c.dout; /* writes over an input */
    ck_assert_int_eq(smattn_ref_backward(&c.p, &in, &gin, &o2, NULL, NULL), SMATTN_ERR_ALIAS);
    o2 = go;
    o2.dq.stride[2] = 0; /* overlaps itself */
    ck_assert_int_eq(smattn_ref_backward(&c.p, &in, &gin, &o2, NULL, NULL), SMATTN_ERR_ALIAS);
    o2 = go;
    double dbias_buf[12];
    o2.dbias = (smattn_out_tensor){dbias_buf, SMATTN_F64, {12, 6, 3, 1}};
    ck_assert_int_eq(smattn_ref_backward(&c.p, &in, &gin, &o2, NULL, NULL), SMATTN_OK);
    o2.dbias.stride[1] = 0; /* a reduction over heads: [B, 1, S, T] */
    ck_assert_int_eq(smattn_ref_backward(&c.p, &in, &gin, &o2, NULL, NULL), SMATTN_OK);
    o2.dbias = (smattn_out_tensor){go.dq.data, SMATTN_F64, {12, 6, 3, 1}}; /* over dQ */
    ck_assert_int_eq(smattn_ref_backward(&c.p, &in, &gin, &o2, NULL, NULL), SMATTN_ERR_ALIAS);
    o2 = go;
    double sink_grad[2];
    o2.dsinks = (smattn_out_tensor){sink_grad, SMATTN_F64, {1, 0, 0, 0}};
    ck_assert_int_eq(smattn_ref_backward(&c.p, &in, &gin, &o2, NULL, NULL), SMATTN_OK);
    ck_assert_uint_eq(bits64(sink_grad[0]), 0); /* no sink input: the gradient of a -inf sink */
    o2.dsinks.dtype = SMATTN_BOOL;
    ck_assert_int_eq(smattn_ref_backward(&c.p, &in, &gin, &o2, NULL, NULL), SMATTN_ERR_DTYPE);
    o2.dsinks = (smattn_out_tensor){go.dv.data, SMATTN_F64, {1, 0, 0, 0}}; /* over dV */
    ck_assert_int_eq(smattn_ref_backward(&c.p, &in, &gin, &o2, NULL, NULL), SMATTN_ERR_ALIAS);
    smattn_problem p2 = c.p;
    smattn_layout lay;
    memset(&lay, 0, sizeof lay);
    p2.layout = &lay; /* a layout of NULL arrays is the dense one (SPEC 2.7, 10.4) */
    ck_assert_int_eq(smattn_ref_backward(&p2, &in, &gin, &go, NULL, NULL), SMATTN_OK);
    int64_t cu_bad[2] = {0, 99}; /* a slice longer than S: the forward's rule */
    lay.cu_seqlens_q = cu_bad;
    ck_assert_int_eq(smattn_ref_backward(&p2, &in, &gin, &go, NULL, NULL), SMATTN_ERR_LAYOUT);
    p2 = c.p;
    p2.op = SMATTN_OP_SOFTMAX;
    smattn_inputs in2 = in;
    in2.x = in.q;
    ck_assert_int_eq(smattn_ref_backward(&p2, &in2, &gin, &go, NULL, NULL), SMATTN_ERR_UNSUPPORTED);
    smattn_ref_config cfg;
    memset(&cfg, 0, sizeof cfg);
    cfg.max_prec = 3;
    ck_assert_int_eq(smattn_ref_backward(&c.p, &in, &gin, &go, &cfg, NULL), SMATTN_ERR_OPTION);
    tc_free(&c);
}
END_TEST

Suite *backward_suite(void);
Suite *backward_suite(void)
{
    Suite *s = suite_create("backward");
    TCase *tcs = tcase_create("oracle");
    tcase_set_timeout(tcs, 120);
    tcase_add_test(tcs, diff_plain_mha);
    tcase_add_test(tcs, diff_gqa_masks_bias_sinks_dlse);
    tcase_add_test(tcs, diff_softcap_window);
    tcase_add_test(tcs, diff_empty_rows_mean_and_zero);
    tcase_add_test(tcs, golden_example);
    tcase_add_test(tcs, trap_do_orthogonal);
    tcase_add_test(tcs, trap_dS_sums_to_zero);
    tcase_add_test(tcs, trap_pair_coincidence);
    tcase_add_test(tcs, trap_cross_row_midpoint);
    tcase_add_test(tcs, trap_rational_dq_midpoint);
    tcase_add_test(tcs, trap_far_key_near_midpoint);
    tcase_add_test(tcs, gqa_far_keys);
    tcase_add_test(tcs, gqa_far_keys_mha_expansion);
    tcase_add_test(tcs, dsinks_far_keys_across_batches);
    tcase_add_test(tcs, dsinks_traps);
    tcase_add_test(tcs, dk_sums_to_zero);
    tcase_add_test(tcs, masked_keys_exact_zero);
    tcase_add_test(tcs, gqa_equals_mha_group_sums);
    tcase_add_test(tcs, key_permutation);
    tcase_add_test(tcs, bitwise_across_threads);
    tcase_add_test(tcs, nan_conventions);
    tcase_add_test(tcs, dS_row_sums);
    tcase_add_test(tcs, dbias_broadcast_sums);
    tcase_add_test(tcs, dbias_key_sums_structural);
    tcase_add_test(tcs, decode_row_of_prefill);
    tcase_add_test(tcs, validation);
    tcase_add_test(tcs, alibi_is_its_bias);
    suite_add_tcase(s, tcs);
    return s;
}
