/* SPDX-License-Identifier: MIT */
/* test_judge.c: conform/judge.c called directly (conform_judge_flags), without a plugin or
 * the CLI: a NaN or an infinity where the spec has a finite value fails, with a reason that
 * says so, in ordinary rows and in rows out of contract (SPEC 6.8), whose elements are not
 * judged by size but are still held to what any kernel can meet. */
#include <check.h>
#include <float.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "conform/conform.h"
#include "smattn.h"
#include "tests/support/testkit.h"

/* An attention problem, B = 1, S = 5, T = 37, Hq = 2, Hkv = 1, D = 16, Dv = 8, inputs drawn
 * from seed; opts: 1 sinks, 2 a bias [1,1,S,T] (a tenth -inf), 4 a bool mask [1,Hq,1,T]. */
typedef struct jcase {
    smattn_problem p;
    smattn_inputs in;
    float q[5 * 2 * 16], k[37 * 16], v[37 * 8], bias[5 * 37], sinks[2];
    unsigned char mask[2 * 37];
} jcase;

static void make(jcase *c, double scale, int opts, uint64_t seed)
{
    rng r = {seed};
    memset(c, 0, sizeof *c);
    smattn_problem *p = &c->p;
    *p = smattn_problem_default();
    p->B = 1, p->S = 5, p->T = 37, p->Hq = 2, p->Hkv = 1, p->D = 16, p->Dv = 8;
    p->scale = scale;
    p->causal = SMATTN_CAUSAL_LOWER_RIGHT;
    for (size_t i = 0; i < sizeof c->q / sizeof *c->q; i++)
        c->q[i] = (float)(4 * rng_unif(&r) - 2);
    for (size_t i = 0; i < sizeof c->k / sizeof *c->k; i++)
        c->k[i] = (float)(4 * rng_unif(&r) - 2);
    for (size_t i = 0; i < sizeof c->v / sizeof *c->v; i++)
        c->v[i] = (float)(2 * rng_unif(&r) - 1);
    for (size_t i = 0; i < sizeof c->bias / sizeof *c->bias; i++)
        c->bias[i] = rng_pick(&r, 10) == 0 ? -HUGE_VALF : (float)(rng_unif(&r) - 0.5);
    for (size_t i = 0; i < sizeof c->mask; i++)
        c->mask[i] = rng_pick(&r, 4) != 0;
    c->sinks[0] = 1.5f, c->sinks[1] = -HUGE_VALF;
    smattn_inputs *in = &c->in;
    in->q = (smattn_tensor){c->q, SMATTN_F32, {0}};
    in->k = (smattn_tensor){c->k, SMATTN_F32, {0}};
    in->v = (smattn_tensor){c->v, SMATTN_F32, {0}};
    smattn_contiguous_strides(p, 'q', in->q.stride);
    smattn_contiguous_strides(p, 'k', in->k.stride);
    smattn_contiguous_strides(p, 'v', in->v.stride);
    if (opts & 1)
        in->sinks = (smattn_tensor){c->sinks, SMATTN_F32, {1}};
    if (opts & 2)
        in->bias = (smattn_tensor){c->bias, SMATTN_F32, {5 * 37, 0, 37, 1}};
    if (opts & 4)
        in->mask = (smattn_tensor){c->mask, SMATTN_BOOL, {2 * 37, 37, 0, 1}};
}

/* The built-in kernel's outputs (O, LSE, P) of c in dtype t. */
static void run_kernel(const jcase *c, smattn_dtype t, outbuf *o)
{
    outbuf_make(o, &c->p, t);
    ck_assert_int_eq(smattn_attention(&c->p, &c->in, &o->out, NULL), SMATTN_OK);
}

static void judge(const jcase *c, const outbuf *o, conform_result *r)
{
    smattn_precision pm = smattn_opt_precision(&c->p);
    memset(r, 0, sizeof *r);
    conform_judge_flags(&c->p, &c->in, &o->out, &pm, 0, 0, r);
}

/* Element k of output w ('o', 'l', 'p') set to x; judged: it must fail, naming want. */
static int poisoned_fails(const jcase *c, const outbuf *good, char w, int64_t k, double x,
                          const char *want, const char *want2)
{
    outbuf o;
    outbuf_make(&o, &c->p, good->t);
    size_t es = smattn_dtype_size(good->t);
    memcpy(o.o, good->o, good->no * es);
    memcpy(o.l, good->l, good->nl * es);
    memcpy(o.p, good->p, good->np * es);
    outbuf_put(&o, w, k, x);
    conform_result r;
    judge(c, &o, &r);
    int ok = r.status == CONFORM_FAIL && strstr(r.reason, want) &&
             (!want2 || strstr(r.reason, want2));
    if (!ok)
        fprintf(stderr, "scale %a, %c[%lld] = %g in %s: status %d, reason: %s\n", c->p.scale, w,
                (long long)k, x, smattn_dtype_name(good->t), (int)r.status, r.reason);
    outbuf_free(&o);
    return ok;
}

/* Scales up to DBL_MAX put every row out of contract (the scores overflow every kernel
 * format): the built-in kernel's finite outputs pass, and a NaN (or, for O and P, an
 * infinity) anywhere fails with a reason saying the spec has a finite value there. */
START_TEST(judge_nonfinite_out_of_contract)
{
    static const double scales[] = {1e308, 1.7e308, DBL_MAX, -DBL_MAX};
    static const smattn_dtype dts[] = {SMATTN_F32, SMATTN_BF16};
    int bad = 0;
    const char *oc = "in a row out of contract (SPEC 6.8";
    const char *fin = "where the spec has a finite value";
    for (int a = 0; a < 4; a++)
        for (int opts = 0; opts < 8; opts += 3) {
            jcase c;
            make(&c, scales[a], opts, 100 + (uint64_t)(8 * a + opts));
            for (int d = 0; d < 2; d++) {
                outbuf good;
                run_kernel(&c, dts[d], &good);
                conform_result r;
                judge(&c, &good, &r);
                if (r.status != CONFORM_PASS || r.unbounded_rows != c.p.B * c.p.Hq * c.p.S) {
                    fprintf(stderr, "scale %a opts %d: the kernel's outputs: status %d, %lld rows "
                            "out of contract, reason: %s\n", scales[a], opts, (int)r.status,
                            (long long)r.unbounded_rows, r.reason);
                    bad++;
                }
                /* O of (b 0, i 4, h 1, c 3); the LSE and a visible P of row (0, 1, 4) */
                int64_t eo = (4 * c.p.Hq + 1) * c.p.Dv + 3, el = c.p.S + 4;
                int64_t ep = (c.p.S + 4) * c.p.T + 36; /* the diagonal key: visible */
                bad += !poisoned_fails(&c, &good, 'o', eo, (double)NAN, oc, fin);
                bad += !poisoned_fails(&c, &good, 'o', eo, HUGE_VAL, oc, fin);
                bad += !poisoned_fails(&c, &good, 'o', eo, -HUGE_VAL, oc, fin);
                bad += !poisoned_fails(&c, &good, 'l', el, (double)NAN, oc,
                                       "a NaN LSE is never right there: the exact value is finite");
                bad += !poisoned_fails(&c, &good, 'p', ep, (double)NAN, oc, fin);
                bad += !poisoned_fails(&c, &good, 'p', ep, HUGE_VAL, oc, fin);
                outbuf_free(&good);
            }
        }
    ck_assert_msg(bad == 0, "%d judgements wrong (stderr)", bad);
}
END_TEST

/* The same poisons in ordinary rows (scale 1/4): judged by size, a NaN or an infinity is
 * "NaN / infinity at ... where the spec has a finite value". */
START_TEST(judge_nonfinite_ordinary)
{
    int bad = 0;
    for (int opts = 0; opts < 8; opts += 3) {
        jcase c;
        make(&c, 0.25, opts, 200 + (uint64_t)opts);
        outbuf good;
        run_kernel(&c, SMATTN_F32, &good);
        conform_result r;
        judge(&c, &good, &r);
        if (r.status != CONFORM_PASS || r.unbounded_rows != 0) {
            fprintf(stderr, "opts %d: the kernel's outputs: status %d, reason: %s\n", opts,
                    (int)r.status, r.reason);
            bad++;
        }
        int64_t eo = (4 * c.p.Hq + 1) * c.p.Dv + 3, el = c.p.S + 4;
        bad += !poisoned_fails(&c, &good, 'o', eo, (double)NAN, "NaN at O[b=0,i=4,h=1,c=3] where "
                               "the spec has a finite value", NULL);
        bad += !poisoned_fails(&c, &good, 'o', eo, HUGE_VAL, "infinity at O[b=0,i=4,h=1,c=3] "
                               "where the spec has a finite value", NULL);
        bad += !poisoned_fails(&c, &good, 'l', el, (double)NAN, "NaN at LSE[b=0,h=1,i=4] where "
                               "the spec has a finite value", NULL);
        outbuf_free(&good);
    }
    ck_assert_msg(bad == 0, "%d judgements wrong (stderr)", bad);
}
END_TEST

/* The other causal alignment is named first, before the rule the first wrong element breaks:
 * a correct kernel of one alignment judged as the other, on clean inputs. With S > T the
 * rows lower-right leaves empty see keys under upper-left (the empty-row convention is
 * broken first); with S < T upper-left hides keys lower-right gives weight (a masked key's
 * P is broken first). Not named when the LSE contradicts it. */
START_TEST(judge_alignment_named_first)
{
    static const struct {
        int64_t S, T;
        smattn_causal run, claim;
        smattn_empty empty; /* the run's empty-row convention (the claim's: zero) */
        const char *want, *never;
    } cases[] = {
        {6, 4, SMATTN_CAUSAL_UPPER_LEFT, SMATTN_CAUSAL_LOWER_RIGHT, SMATTN_EMPTY_ZERO,
         "causal alignment: O follows upper_left, but lower_right is claimed; empty row (no "
         "visible key, no sink): O[b=0,i=0,h=0,c=0] expected +0",
         NULL},
        {4, 6, SMATTN_CAUSAL_LOWER_RIGHT, SMATTN_CAUSAL_UPPER_LEFT, SMATTN_EMPTY_ZERO,
         "causal alignment: O follows lower_right, but upper_left is claimed; masked key got "
         "weight: P[b=0,h=0,i=0,j=1]",
         NULL},
        /* the right alignment, the mean convention on the empty rows of a one-key sequence:
         * its O is upper-left's, its LSE (-inf there) is not */
        {4, 1, SMATTN_CAUSAL_LOWER_RIGHT, SMATTN_CAUSAL_LOWER_RIGHT, SMATTN_EMPTY_MEAN,
         "empty row (no visible key, no sink): O[b=0,i=0,h=0,c=0] expected +0", "causal alignment"},
    };
    for (size_t k = 0; k < sizeof cases / sizeof cases[0]; k++) {
        rng r = {300 + (uint64_t)k};
        float q[6 * 8], kk[6 * 8], v[6 * 8];
        for (int x = 0; x < 48; x++)
            q[x] = (float)(4 * rng_unif(&r) - 2), kk[x] = (float)(4 * rng_unif(&r) - 2),
            v[x] = (float)(2 * rng_unif(&r) - 1);
        smattn_problem p = smattn_problem_default();
        p.B = 1, p.S = cases[k].S, p.T = cases[k].T, p.Hq = p.Hkv = 1, p.D = p.Dv = 8;
        p.scale = smattn_default_scale(8);
        p.causal = cases[k].run;
        p.empty_rows = cases[k].empty;
        smattn_inputs in;
        memset(&in, 0, sizeof in);
        in.q = (smattn_tensor){q, SMATTN_F32, {0}};
        in.k = (smattn_tensor){kk, SMATTN_F32, {0}};
        in.v = (smattn_tensor){v, SMATTN_F32, {0}};
        smattn_contiguous_strides(&p, 'q', in.q.stride);
        smattn_contiguous_strides(&p, 'k', in.k.stride);
        smattn_contiguous_strides(&p, 'v', in.v.stride);
        outbuf o;
        outbuf_make(&o, &p, SMATTN_F32);
        ck_assert_int_eq(smattn_attention(&p, &in, &o.out, NULL), SMATTN_OK);
        p.causal = cases[k].claim;
        p.empty_rows = SMATTN_EMPTY_ZERO;
        smattn_precision pm = smattn_opt_precision(&p);
        conform_result res;
        memset(&res, 0, sizeof res);
        conform_judge_flags(&p, &in, &o.out, &pm, 0, 0, &res);
        ck_assert_int_eq(res.status, CONFORM_FAIL);
        ck_assert_msg(strstr(res.reason, cases[k].want), "S %lld T %lld: reason '%s' lacks '%s'",
                      (long long)p.S, (long long)p.T, res.reason, cases[k].want);
        ck_assert_msg(!cases[k].never || !strstr(res.reason, cases[k].never),
                      "S %lld T %lld: reason '%s' names '%s'", (long long)p.S, (long long)p.T,
                      res.reason, cases[k].never);
        outbuf_free(&o);
    }
}
END_TEST

Suite *judge_suite(void);
Suite *judge_suite(void)
{
    Suite *s = suite_create("judge");
    TCase *tc = tcase_create("judge");
    tcase_set_timeout(tc, 300);
    tcase_add_test(tc, judge_nonfinite_out_of_contract);
    tcase_add_test(tc, judge_nonfinite_ordinary);
    tcase_add_test(tc, judge_alignment_named_first);
    suite_add_tcase(s, tc);
    return s;
}
