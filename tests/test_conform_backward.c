/* SPDX-License-Identifier: MIT */
/* test_conform_backward.c: the backward battery of `smattn conform` (conform/backward_check.c,
 * SPEC 10) as a user runs it (SMATTN_CLI): the built-in kernel, its .so and the example
 * plugin pass every backward case of both suites (none skipped); a plugin without the
 * entry skips them, saying why; a kernel claiming SMATTN_CAP_BACKWARD_DETERMINISTIC is run
 * twice per case and fails when its bits change; and the judge's reasons name the bug
 * class of gradients planted wrong (conform_judge_backward_result on the oracle's own
 * gradients, perturbed). Plugins: build/plugins, build/tests/fixtures (mk/conform.mk). */
#include <check.h>
#include <json.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "conform/conform.h"
#include "conform/judge_backward.h"
#include "smattn.h"
#include "tests/support/cli_run.h"
#include "tests/support/fs.h"

static char dir[64];

static void setup(void)
{
    ck_assert_int_eq(test_mkdtemp(dir, sizeof dir, "conform_bw"), 0);
}

static void teardown(void)
{
    test_rm_tree(dir);
}

/* `smattn conform --only backward/ --json DIR/r.json [args]`: exit status and the report. */
static int run_backward(json_object **report, const char *a0, ...)
{
    const char *args[16] = {"conform", "--only", "backward/", "--json", test_path(dir, "r.json")};
    int n = 5;
    va_list ap;
    va_start(ap, a0);
    for (const char *a = a0; a && n < 15; a = va_arg(ap, const char *))
        args[n++] = a;
    va_end(ap);
    args[n] = NULL;
    test_outcome o = test_cli_run(dir, args);
    int code = o.code;
    test_outcome_free(&o);
    *report = json_object_from_file(test_path(dir, "r.json"));
    ck_assert_msg(*report != NULL, "no JSON report (exit %d)", code);
    return code;
}

static json_object *cases_of(json_object *r)
{
    json_object *c;
    ck_assert(json_object_object_get_ex(r, "cases", &c));
    return c;
}

static const char *str_of(json_object *o, const char *key)
{
    json_object *v;
    return json_object_object_get_ex(o, key, &v) && v ? json_object_get_string(v) : "";
}

/* Layout and ALiBi cases a plugin does not claim (its caps lack their bits), and the dBias
 * and dSinks cases for one without bits 26 and 27: skipped, saying so, and not counted by
 * all_are. */
static size_t unclaimed, unclaimed_grads, dsinks_counted, dbias_counted;

/* Every case of the report in category backward with status want (and, given, a reason
 * holding `reason`, a rerun field `rerun`), but a layout or ALiBi case skipped because the
 * kernel does not claim its bits; returns the count of the others. */
static size_t all_are(json_object *r, const char *want, const char *reason, const char *rerun)
{
    json_object *cs = cases_of(r);
    size_t n = json_object_array_length(cs), counted = 0;
    unclaimed = unclaimed_grads = dsinks_counted = dbias_counted = 0;
    for (size_t i = 0; i < n; i++) {
        json_object *c = json_object_array_get_idx(cs, i);
        ck_assert_str_eq(str_of(c, "category"), "backward");
        const char *name = str_of(c, "name");
        if ((strstr(name, "layout_") || strstr(name, "alibi_")) &&
            !strcmp(str_of(c, "status"), "skip") && strstr(str_of(c, "reason"), "not claimed") &&
            strcmp(want, "skip") != 0) {
            unclaimed++;
            continue;
        }
        if ((strstr(name, "/dbias") || strstr(name, "/dsinks")) &&
            !strcmp(str_of(c, "status"), "skip") &&
            strstr(str_of(c, "reason"), "not claimed") &&
            strstr(str_of(c, "reason"), strstr(name, "/dbias") ? "backward_dbias" : "backward_dsinks") &&
            strcmp(want, "skip") != 0) {
            unclaimed_grads++;
            continue;
        }
        counted++;
        dsinks_counted += strstr(name, "/dsinks") != NULL;
        dbias_counted += strstr(name, "/dbias") != NULL;
        ck_assert_msg(!strcmp(str_of(c, "status"), want), "%s: %s (%s), want %s",
                      str_of(c, "name"), str_of(c, "status"), str_of(c, "reason"), want);
        if (reason)
            ck_assert_msg(strstr(str_of(c, "reason"), reason), "%s: reason '%s'",
                          str_of(c, "name"), str_of(c, "reason"));
        if (rerun)
            ck_assert_str_eq(str_of(c, "rerun"), rerun);
    }
    return counted;
}

/* The built-in kernel (in process and as smattn_opt.so) passes every backward case of
 * quick and full, each run twice with the same bits (it claims bit 25), the dBias and
 * dSinks ones among them (bits 26 and 27). */
START_TEST(builtin_passes_both_suites)
{
    json_object *r;
    ck_assert_int_eq(run_backward(&r, NULL), 0);
    size_t quick = all_are(r, "pass", NULL, "same bits");
    ck_assert_uint_ge(quick, 25); /* the layout and ALiBi cases among them */
    ck_assert_uint_eq(unclaimed, 0);
    ck_assert_uint_eq(unclaimed_grads, 0);
    ck_assert_uint_ge(dbias_counted,
                      5); /* dbias, dbias_broadcast_*, ..., dbias_dsinks_mixed: passed */
    ck_assert_uint_ge(dsinks_counted, 2); /* dsinks, dsinks_empty_rows: passed */
    json_object_put(r);
    ck_assert_int_eq(run_backward(&r, "--kernel", test_built("plugins/smattn_opt.so"), NULL), 0);
    ck_assert_uint_eq(all_are(r, "pass", NULL, "same bits"), quick);
    json_object_put(r);
    ck_assert_int_eq(run_backward(&r, "--suite", "full", NULL), 0);
    ck_assert_uint_gt(all_are(r, "pass", NULL, "same bits"), quick);
    json_object_put(r);
}
END_TEST

/* The example plugin's plain backward passes, dBias and dSinks included (it claims bits 26
 * and 27); it does not claim determinism, so nothing is run twice. */
START_TEST(example_passes)
{
    json_object *r;
    ck_assert_int_eq(run_backward(&r, "--kernel", test_built("plugins/example_kernel.so"), NULL), 0);
    ck_assert_uint_ge(all_are(r, "pass", NULL, ""), 18 + 7);
    ck_assert_uint_eq(unclaimed_grads, 0);
    json_object_put(r);
    ck_assert_int_eq(run_backward(&r, "--kernel", test_built("plugins/example_kernel.so"),
                                  "--suite", "full", "--only",
                                  "backward/dbias,backward/dsinks", NULL),
                     0);
    ck_assert_uint_ge(all_are(r, "pass", NULL, ""), 9);
    json_object_put(r);
}
END_TEST

/* A plugin without smattn_plugin_backward skips the battery, naming the entry (alone, the
 * run has nothing that ran: exit 1; with the rest of the suite its verdict is unchanged). */
START_TEST(no_entry_skips)
{
    json_object *r;
    ck_assert_int_eq(
        run_backward(&r, "--kernel", test_built("tests/fixtures/fixture_good.so"), NULL), 1);
    ck_assert_uint_ge(all_are(r, "skip", "exports no smattn_plugin_backward", NULL), 18);
    json_object_put(r);
}
END_TEST

/* Bit 25: a kernel keeping the claim passes with each case run twice; one whose second run
 * moves an element by an ulp fails every case, saying so. */
START_TEST(determinism_claim)
{
    json_object *r;
    ck_assert_int_eq(
        run_backward(&r, "--kernel", test_built("tests/fixtures/backward_det.so"), NULL), 0);
    all_are(r, "pass", NULL, "same bits");
    json_object_put(r);
    ck_assert_int_eq(
        run_backward(&r, "--kernel", test_built("tests/fixtures/backward_nondet.so"), NULL), 1);
    all_are(r, "fail",
            "not deterministic: dV element 0 differs between two runs, although the kernel "
            "claims SMATTN_CAP_BACKWARD_DETERMINISTIC",
            "other bits");
    json_object_put(r);
}
END_TEST

/* A kernel claiming bits 26 and 27 must write every element of dBias and dSinks ("dBias
 * element 0 was never written"); one that declines the cases asking for them skips those
 * only, saying so, and passes the rest. */
START_TEST(dbias_dsinks_claimed)
{
    json_object *r;
    ck_assert_int_eq(run_backward(&r, "--kernel",
                                  test_built("tests/fixtures/backward_grads_unwritten.so"),
                                  "--only", "backward/dbias,backward/dsinks", NULL),
                     1);
    json_object *cs = cases_of(r);
    size_t n = json_object_array_length(cs);
    ck_assert_uint_eq(n, 7);
    for (size_t i = 0; i < n; i++) {
        json_object *c = json_object_array_get_idx(cs, i);
        const char *name = str_of(c, "name");
        ck_assert_str_eq(str_of(c, "status"), "fail");
        ck_assert_msg(strstr(str_of(c, "reason"), strstr(name, "/dbias") ? "dBias element 0 was "
                                                                           "never written"
                                                                         : "dSinks element 0 was "
                                                                           "never written"),
                      "%s: %s", name, str_of(c, "reason"));
    }
    json_object_put(r);
    ck_assert_int_eq(run_backward(&r, "--kernel",
                                  test_built("tests/fixtures/backward_grads_declined.so"), NULL),
                     0);
    cs = cases_of(r);
    size_t skipped = 0;
    for (size_t i = 0; i < json_object_array_length(cs); i++) {
        json_object *c = json_object_array_get_idx(cs, i);
        const char *name = str_of(c, "name");
        if (strstr(name, "/dbias") || strstr(name, "/dsinks")) {
            skipped++;
            ck_assert_str_eq(str_of(c, "status"), "skip");
            ck_assert_msg(strstr(str_of(c, "reason"), "declined the backward"), "%s: %s", name,
                          str_of(c, "reason"));
        } else if (!strstr(name, "layout_") && !strstr(name, "alibi_")) {
            ck_assert_msg(!strcmp(str_of(c, "status"), "pass"), "%s: %s (%s)", name,
                          str_of(c, "status"), str_of(c, "reason"));
        }
    }
    ck_assert_uint_eq(skipped, 7);
    json_object_put(r);
}
END_TEST

/* A backward that never returns is killed at the case time limit ("hang: the backward did
 * not return"), and after CONFORM_MAX_HANGS in a row the rest are not run, as for the
 * attention cases. */
START_TEST(hangs_stop_the_run)
{
    json_object *r;
    ck_assert_int_eq(run_backward(&r, "--kernel", test_built("tests/fixtures/backward_hang.so"),
                                  "--case-timeout", "1", NULL),
                     1);
    json_object *cs = cases_of(r);
    size_t n = json_object_array_length(cs);
    ck_assert_uint_ge(n, 18);
    for (size_t i = 0; i < n; i++) {
        json_object *c = json_object_array_get_idx(cs, i);
        const char *want = i < CONFORM_MAX_HANGS ? "hang: the backward did not return within 1 s"
                                                 : "not run: the run stopped after 3 cases in a "
                                                   "row hung";
        ck_assert_msg(strstr(str_of(c, "reason"), want), "%s: %s", str_of(c, "name"),
                      str_of(c, "reason"));
    }
    json_object_put(r);
}
END_TEST

/* A write one element past dK's last changes a canary: every case fails, saying so; in a
 * strided case the element is dK's row padding, which must stay unwritten. */
START_TEST(write_outside_fails)
{
    json_object *r;
    ck_assert_int_eq(
        run_backward(&r, "--kernel", test_built("tests/fixtures/backward_oob.so"), NULL), 1);
    all_are(r, "fail", "wrote outside its outputs: ", NULL);
    json_object *cs = cases_of(r);
    size_t strided = 0;
    for (size_t i = 0; i < json_object_array_length(cs); i++) {
        json_object *c = json_object_array_get_idx(cs, i);
        const char *name = str_of(c, "name"), *why = str_of(c, "reason");
        if (!strcmp(str_of(c, "status"), "skip"))
            continue;
        strided += strstr(name, "backward/strides_") != NULL;
        ck_assert_msg(strstr(why, strstr(name, "backward/strides_")
                                      ? "of dK's buffer is row padding"
                                      : "wrote outside its outputs: past the end of dK"),
                      "%s: %s", name, why);
    }
    ck_assert_uint_eq(strided, 2);
    json_object_put(r);
}
END_TEST

/* A forward that writes past its LSE and then declines fails the backward case, the
 * canaries read before the decline is taken as a skip (as for the attention cases). */
START_TEST(write_outside_then_decline_fails)
{
    json_object *r;
    ck_assert_int_eq(
        run_backward(&r, "--kernel", test_built("tests/fixtures/backward_fwd_oob.so"), NULL), 1);
    ck_assert_uint_ge(all_are(r, "fail",
                              "wrote outside its outputs: past the end of the forward's LSE",
                              NULL),
                      25);
    json_object_put(r);
}
END_TEST

/* A precision hook that ends the case's process fails the case as a crash there, not as
 * gradients never written. */
START_TEST(precision_exit_is_a_crash)
{
    json_object *r;
    ck_assert_int_eq(run_backward(&r, "--kernel", test_built("tests/fixtures/backward_prec_exit.so"),
                                  "--only", "backward/plain", NULL),
                     1);
    ck_assert_uint_eq(all_are(r, "fail",
                              "crash: smattn_plugin_precision's process exited with status 3 "
                              "without returning",
                              NULL),
                      1);
    json_object_put(r);
}
END_TEST

/* ---- the judge, in process ------------------------------------------------------------ */

/* A GQA problem with a causal mask, kv_lens hiding a key of batch 1, and an empty row (a
 * padding query): binary32 inputs, the oracle's gradients rounded to binary32 as `got`. */
typedef struct jcase {
    smattn_problem p;
    int64_t kv_lens[2], q_lens[2];
    float q[2 * 3 * 4 * 4], k[2 * 4 * 2 * 4], v[2 * 4 * 2 * 4], dout[2 * 3 * 4 * 4];
    float dq[2 * 3 * 4 * 4], dk[2 * 4 * 2 * 4], dv[2 * 4 * 2 * 4];
    smattn_inputs in;
    smattn_grad_inputs gin;
    smattn_grad_outputs got;
} jcase;

static void jcase_make(jcase *c)
{
    memset(c, 0, sizeof *c);
    smattn_problem *p = &c->p;
    *p = smattn_problem_default();
    p->B = 2, p->S = 3, p->T = 4, p->Hq = 4, p->Hkv = 2, p->D = p->Dv = 4;
    p->scale = 0.5;
    p->causal = SMATTN_CAUSAL_LOWER_RIGHT;
    c->kv_lens[0] = 4, c->kv_lens[1] = 3;
    c->q_lens[0] = 3, c->q_lens[1] = 2;
    p->kv_lens = c->kv_lens, p->q_lens = c->q_lens;
    uint64_t s = 12345;
    float *arr[4] = {c->q, c->k, c->v, c->dout};
    size_t len[4] = {sizeof c->q, sizeof c->k, sizeof c->v, sizeof c->dout};
    for (int t = 0; t < 4; t++)
        for (size_t e = 0; e < len[t] / sizeof(float); e++) {
            s = s * 6364136223846793005u + 1442695040888963407u;
            arr[t][e] = (float)((double)(s >> 40) * 0x1p-23 - 1.0);
        }
    smattn_contiguous_strides(p, 'q', c->in.q.stride);
    smattn_contiguous_strides(p, 'k', c->in.k.stride);
    smattn_contiguous_strides(p, 'v', c->in.v.stride);
    smattn_contiguous_strides(p, 'o', c->gin.dout.stride);
    c->in.q.data = c->q, c->in.k.data = c->k, c->in.v.data = c->v, c->gin.dout.data = c->dout;
    c->in.q.dtype = c->in.k.dtype = c->in.v.dtype = c->gin.dout.dtype = SMATTN_F32;
    smattn_out_tensor *o[3] = {&c->got.dq, &c->got.dk, &c->got.dv};
    void *d[3] = {c->dq, c->dk, c->dv};
    const int64_t n[3][4] = {{2, 3, 4, 4}, {2, 4, 2, 4}, {2, 4, 2, 4}};
    for (int t = 0; t < 3; t++) {
        o[t]->data = d[t], o[t]->dtype = SMATTN_F32;
        o[t]->stride[3] = 1;
        for (int a = 2; a >= 0; a--)
            o[t]->stride[a] = o[t]->stride[a + 1] * n[t][a + 1];
    }
    smattn_ref_config cfg = {1, 0, 0, 0};
    ck_assert_int_eq(smattn_ref_backward(p, &c->in, &c->gin, &c->got, &cfg, NULL), SMATTN_OK);
}

static void judge(jcase *c, conform_result *r)
{
    memset(r, 0, sizeof *r);
    smattn_backward_precision pm = smattn_backward_precision_of(SMATTN_F32);
    pm.o_dtype = pm.lse_dtype = SMATTN_F32;
    conform_judge_backward_result(&c->p, &c->in, &c->gin, &c->got, &pm, r);
}

START_TEST(judge_names_the_class)
{
    jcase c;
    conform_result r;
    jcase_make(&c);
    judge(&c, &r); /* correctly rounded: far inside the bound */
    ck_assert_msg(r.status == CONFORM_PASS, "%s", r.reason);
    ck_assert_int_eq(r.elements, 2 * (48 + 32 + 32));
    ck_assert_msg(r.max_ratio < 0.5, "max ratio %g", r.max_ratio);
    /* batch 1's padding query i = 2 sees no key: its dQ NaN */
    float keep = c.dq[(1 * 3 + 2) * 16 + 1 * 4 + 3];
    c.dq[(1 * 3 + 2) * 16 + 1 * 4 + 3] = NAN;
    judge(&c, &r);
    ck_assert_int_eq(r.status, CONFORM_FAIL);
    ck_assert_msg(strstr(r.reason, "empty row turned NaN: dQ[b=1,i=2,h=1,d=3] = NaN"), "%s",
                  r.reason);
    c.dq[(1 * 3 + 2) * 16 + 1 * 4 + 3] = keep;
    /* key 3 of batch 1 is padding (kv_lens 3): no row sees it */
    c.dv[(1 * 4 + 3) * 8 + 0 * 4 + 2] = 0.25f;
    judge(&c, &r);
    ck_assert_int_eq(r.status, CONFORM_FAIL);
    ck_assert_msg(strstr(r.reason, "masked key given gradient: dV[b=1,j=3,g=0,c=2] = 0.25"),
                  "%s", r.reason);
    c.dv[(1 * 4 + 3) * 8 + 0 * 4 + 2] = 0.0f;
    /* dK of KV head 1 halved: dK alone off (its scale) */
    for (int j = 0; j < 3; j++)
        for (int d = 0; d < 4; d++)
            c.dk[(0 * 4 + j) * 8 + 1 * 4 + d] *= 0.5f;
    judge(&c, &r);
    ck_assert_int_eq(r.status, CONFORM_FAIL);
    ck_assert_msg(strstr(r.reason, "dK = scale sum dU q is off while dQ and dV"), "%s", r.reason);
    /* and dV of KV head 1 halved too (one head of its pair): the group not summed */
    for (int j = 0; j < 3; j++)
        for (int d = 0; d < 4; d++)
            c.dv[(0 * 4 + j) * 8 + 1 * 4 + d] *= 0.5f;
    judge(&c, &r);
    ck_assert_int_eq(r.status, CONFORM_FAIL);
    ck_assert_msg(strstr(r.reason, "GQA group not summed"), "%s", r.reason);
    ck_assert_msg(strstr(r.reason, "sums over the 2 query heads"), "%s", r.reason);
    jcase_make(&c);
    /* dQ and dK off, dV right: Delta or dP */
    c.dq[5] *= 1.5f;
    c.dk[9] *= 1.5f;
    judge(&c, &r);
    ck_assert_msg(strstr(r.reason, "Delta or dP: dQ and dK are off"), "%s", r.reason);
    /* everything off: P */
    c.dv[9] *= 1.5f;
    judge(&c, &r);
    ck_assert_msg(strstr(r.reason, "P = exp(s - LSE) is off"), "%s", r.reason);
}
END_TEST

/* Reasons that name the bug, not a look-alike: dV alone off in a GQA problem is dV's (the
 * group not summed puts dK off too); gradients that are the oracle's for dLSE = 0 name
 * dLSE; under the mean convention a key no regular row sees has dV = the empty rows'
 * dO / T_b, so a zero there is not "masked key given gradient". */
START_TEST(judge_names_dv_dlse_mean)
{
    jcase c;
    conform_result r;
    jcase_make(&c);
    for (int j = 0; j < 3; j++) /* dV of KV head 1 halved, dK right */
        for (int d = 0; d < 4; d++)
            c.dv[(0 * 4 + j) * 8 + 1 * 4 + d] *= 0.5f;
    judge(&c, &r);
    ck_assert_int_eq(r.status, CONFORM_FAIL);
    ck_assert_msg(strstr(r.reason, "dV = sum P dO is off while dQ and dK are within"), "%s",
                  r.reason);
    /* a dLSE the gradients (the oracle's without one) left out */
    jcase_make(&c);
    float dlse[2 * 4 * 3];
    for (int e = 0; e < 2 * 4 * 3; e++)
        dlse[e] = 0.25f + 0.125f * (float)(e % 5);
    c.gin.dlse = (smattn_tensor){dlse, SMATTN_F32, {0}};
    smattn_contiguous_strides(&c.p, 'l', c.gin.dlse.stride);
    judge(&c, &r);
    ck_assert_int_eq(r.status, CONFORM_FAIL);
    ck_assert_msg(strstr(r.reason, "dLSE ignored: the gradients are the oracle's for dLSE = 0"),
                  "%s", r.reason);
    /* the oracle's with that dLSE pass; one element off is no longer dLSE left out */
    smattn_ref_config cfg = {1, 0, 0, 0};
    ck_assert_int_eq(smattn_ref_backward(&c.p, &c.in, &c.gin, &c.got, &cfg, NULL), SMATTN_OK);
    judge(&c, &r);
    ck_assert_msg(r.status == CONFORM_PASS, "%s", r.reason);
    c.dq[5] *= 1.5f;
    c.dk[9] *= 1.5f;
    judge(&c, &r);
    ck_assert_int_eq(r.status, CONFORM_FAIL);
    ck_assert_msg(!strstr(r.reason, "dLSE ignored"), "%s", r.reason);
    /* the mean convention: row 1 masked whole, key 1 seen by no row (exact dV dO / 4) */
    enum { S = 2, T = 4, D = 2 };
    float q[S * D] = {0.5f, -0.25f, 1, 0.75f}, k[T * D] = {1, 0, 0, 1, -0.5f, 0.5f, 0.25f, 1};
    float v[T * D] = {1, 2, -1, 0, 0.5f, 3, 2, -2}, dO[S * D] = {1, -1, 0.5f, 2};
    unsigned char m[S * T] = {1, 0, 1, 0, 0, 0, 0, 0};
    float dq[S * D], dk[T * D], dv[T * D];
    smattn_problem p = smattn_problem_default();
    p.op = SMATTN_OP_ATTENTION, p.B = 1, p.S = S, p.T = T, p.Hq = p.Hkv = 1, p.D = p.Dv = D;
    p.scale = 0.5, p.empty_rows = SMATTN_EMPTY_MEAN;
    smattn_inputs in;
    memset(&in, 0, sizeof in);
    in.q = (smattn_tensor){q, SMATTN_F32, {S * D, D, D, 1}};
    in.k = (smattn_tensor){k, SMATTN_F32, {T * D, D, D, 1}};
    in.v = (smattn_tensor){v, SMATTN_F32, {T * D, D, D, 1}};
    in.mask = (smattn_tensor){m, SMATTN_BOOL, {S * T, S * T, T, 1}};
    smattn_grad_inputs gi;
    memset(&gi, 0, sizeof gi);
    gi.dout = (smattn_tensor){dO, SMATTN_F32, {S * D, D, D, 1}};
    smattn_grad_outputs go;
    memset(&go, 0, sizeof go);
    go.dq = (smattn_out_tensor){dq, SMATTN_F32, {S * D, D, D, 1}};
    go.dk = (smattn_out_tensor){dk, SMATTN_F32, {T * D, D, D, 1}};
    go.dv = (smattn_out_tensor){dv, SMATTN_F32, {T * D, D, D, 1}};
    ck_assert_int_eq(smattn_ref_backward(&p, &in, &gi, &go, &cfg, NULL), SMATTN_OK);
    ck_assert(dv[2] == 0.125f && dv[3] == 0.5f); /* row 1's dO / T */
    dv[2] = dv[3] = 0.0f;
    smattn_backward_precision pm = smattn_backward_precision_of(SMATTN_F32);
    pm.o_dtype = pm.lse_dtype = SMATTN_F32;
    memset(&r, 0, sizeof r);
    conform_judge_backward_result(&p, &in, &gi, &go, &pm, &r);
    ck_assert_int_eq(r.status, CONFORM_FAIL);
    ck_assert_msg(!strstr(r.reason, "masked key given gradient") &&
                      strstr(r.reason, "dV = sum P dO is off while dQ and dK are within"),
                  "%s", r.reason);
}
END_TEST

/* Binary32 Q, K, V, dO and dQ, dK, dV of an MQA problem (one KV head) of S queries, T keys,
 * H query heads of size D, contiguous in the dense layouts; in, gi and go cleared first. */
static void bind_mqa(int64_t S, int64_t T, int64_t H, int64_t D, float *q, float *k, float *v,
                     float *dO, float *dq, float *dk, float *dv, smattn_inputs *in,
                     smattn_grad_inputs *gi, smattn_grad_outputs *go)
{
    memset(in, 0, sizeof *in);
    memset(gi, 0, sizeof *gi);
    memset(go, 0, sizeof *go);
    in->q = (smattn_tensor){q, SMATTN_F32, {S * H * D, H * D, D, 1}};
    in->k = (smattn_tensor){k, SMATTN_F32, {T * D, D, D, 1}};
    in->v = (smattn_tensor){v, SMATTN_F32, {T * D, D, D, 1}};
    gi->dout = (smattn_tensor){dO, SMATTN_F32, {S * H * D, H * D, D, 1}};
    go->dq = (smattn_out_tensor){dq, SMATTN_F32, {S * H * D, H * D, D, 1}};
    go->dk = (smattn_out_tensor){dk, SMATTN_F32, {T * D, D, D, 1}};
    go->dv = (smattn_out_tensor){dv, SMATTN_F32, {T * D, D, D, 1}};
}

/* dBias and dSinks (SPEC 10.1) through the judge: a bias broadcast over batches and heads
 * ([1,1,S,T], dBias the sum over both), sinks and dLSE; the oracle's gradients pass, and a
 * dBias element, dSinks negated or one dSinks off are each named; a full dBias given
 * gradient at a key its row does not see (a -inf bias) is a masked key. */
START_TEST(judge_names_dbias_dsinks)
{
    enum { B = 2, S = 3, T = 4, H = 2, D = 4 };
    float q[B * S * H * D], k[B * T * D], v[B * T * D], dO[B * S * H * D], dlse[B * H * S];
    float bias[B * H * S * T], sinks[H] = {0.5f, -0.25f};
    float dq[B * S * H * D], dk[B * T * D], dv[B * T * D], db[B * H * S * T], ds[H];
    uint64_t seed = 777;
    float *arr[5] = {q, k, v, dO, dlse};
    const size_t len[5] = {B * S * H * D, B * T * D, B * T * D, B * S * H * D, B * H * S};
    for (int t = 0; t < 5; t++)
        for (size_t e = 0; e < len[t]; e++) {
            seed = seed * 6364136223846793005u + 1442695040888963407u;
            arr[t][e] = (float)((double)(seed >> 40) * 0x1p-23 - 1.0);
        }
    for (int e = 0; e < B * H * S * T; e++)
        bias[e] = 0.125f * (float)(e % 7) - 0.375f;
    smattn_problem p = smattn_problem_default();
    p.op = SMATTN_OP_ATTENTION, p.B = B, p.S = S, p.T = T, p.Hq = H, p.Hkv = 1, p.D = p.Dv = D;
    p.scale = 0.5;
    smattn_inputs in;
    smattn_grad_inputs gi;
    smattn_grad_outputs go;
    bind_mqa(S, T, H, D, q, k, v, dO, dq, dk, dv, &in, &gi, &go);
    in.bias = (smattn_tensor){bias, SMATTN_F32, {0, 0, T, 1}}; /* [1,1,S,T] */
    in.sinks = (smattn_tensor){sinks, SMATTN_F32, {1, 0, 0, 0}};
    gi.dlse = (smattn_tensor){dlse, SMATTN_F32, {H * S, S, 1, 0}};
    go.dbias = (smattn_out_tensor){db, SMATTN_F32, {0, 0, T, 1}};
    go.dsinks = (smattn_out_tensor){ds, SMATTN_F32, {1, 0, 0, 0}};
    smattn_ref_config cfg = {1, 0, 0, 0};
    ck_assert_int_eq(smattn_ref_backward(&p, &in, &gi, &go, &cfg, NULL), SMATTN_OK);
    smattn_backward_precision pm = smattn_backward_precision_of(SMATTN_F32);
    pm.o_dtype = pm.lse_dtype = SMATTN_F32;
    conform_result r;
    memset(&r, 0, sizeof r);
    conform_judge_backward_result(&p, &in, &gi, &go, &pm, &r);
    ck_assert_msg(r.status == CONFORM_PASS, "%s", r.reason);
    ck_assert_int_eq(r.elements, B * S * H * D + 2 * B * T * D + S * T + H);
    conform_backward_verdict vd;
    ck_assert_int_eq(conform_judge_backward(&p, &in, &gi, &go, &pm, &cfg, &vd), SMATTN_OK);
    ck_assert(vd.mismatched == 0 && vd.worst[3] >= 0 && vd.worst[4] >= 0);
    /* one dBias element, the sum over both batches and heads, off */
    const float keep = db[1 * T + 1];
    db[1 * T + 1] = keep * 1.5f + 0.25f;
    memset(&r, 0, sizeof r);
    conform_judge_backward_result(&p, &in, &gi, &go, &pm, &r);
    ck_assert_int_eq(r.status, CONFORM_FAIL);
    ck_assert_msg(strstr(r.reason, "dBias of a broadcast bias off while dQ, dK and dV are within "
                                   "their bounds") &&
                      strstr(r.reason, "over all the batches and heads") &&
                      strstr(r.reason, "at dBias[b=*,h=*,i=1,j=1]"),
                  "%s", r.reason);
    ck_assert_int_eq(conform_judge_backward(&p, &in, &gi, &go, &pm, &cfg, &vd), SMATTN_OK);
    ck_assert(vd.mismatched == 1 && vd.worst[3] == 1 * T + 1);
    /* dQ off too: its class, dBias mentioned after */
    dq[3] += 1.0f;
    memset(&r, 0, sizeof r);
    conform_judge_backward_result(&p, &in, &gi, &go, &pm, &r);
    ck_assert_msg(strstr(r.reason, "dBias beyond its bound too"), "%s", r.reason);
    dq[3] -= 1.0f;
    db[1 * T + 1] = keep;
    /* dSinks negated, then one element off */
    for (int h = 0; h < H; h++)
        ds[h] = -ds[h];
    memset(&r, 0, sizeof r);
    conform_judge_backward_result(&p, &in, &gi, &go, &pm, &r);
    ck_assert_int_eq(r.status, CONFORM_FAIL);
    ck_assert_msg(strstr(r.reason, "dSinks has the wrong sign"), "%s", r.reason);
    for (int h = 0; h < H; h++)
        ds[h] = -ds[h];
    ds[1] += 0.5f;
    memset(&r, 0, sizeof r);
    conform_judge_backward_result(&p, &in, &gi, &go, &pm, &r);
    ck_assert_int_eq(r.status, CONFORM_FAIL);
    ck_assert_msg(strstr(r.reason, "dSinks off while dQ, dK and dV are within their bounds") &&
                      strstr(r.reason, "at dSinks[h=1]"),
                  "%s", r.reason);
    ds[1] -= 0.5f;
    /* a full bias with a -inf entry: dBias there is +0 */
    in.bias.stride[0] = H * S * T, in.bias.stride[1] = S * T;
    bias[(1 * H + 1) * S * T + 2 * T + 3] = -INFINITY;
    go.dbias.stride[0] = H * S * T, go.dbias.stride[1] = S * T;
    ck_assert_int_eq(smattn_ref_backward(&p, &in, &gi, &go, &cfg, NULL), SMATTN_OK);
    memset(&r, 0, sizeof r);
    conform_judge_backward_result(&p, &in, &gi, &go, &pm, &r);
    ck_assert_msg(r.status == CONFORM_PASS, "%s", r.reason);
    ck_assert(db[(1 * H + 1) * S * T + 2 * T + 3] == 0.0f);
    db[(1 * H + 1) * S * T + 2 * T + 3] = 0.25f;
    memset(&r, 0, sizeof r);
    conform_judge_backward_result(&p, &in, &gi, &go, &pm, &r);
    ck_assert_int_eq(r.status, CONFORM_FAIL);
    ck_assert_msg(strstr(r.reason, "masked key given gradient: dBias[b=1,h=1,i=2,j=3] = 0.25") &&
                      strstr(r.reason, "the row does not see that key"),
                  "%s", r.reason);
}
END_TEST

/* What the oracle cannot decide (SPEC 10.3 item 6) is not blamed on the kernel, nor passed
 * unjudged. Batch 1 repeats batch 0 with dO negated, so under softcap a dBias summed over
 * the batches is an exact zero no expansion reaches (SMATTN_ERR_PRECISION); the judge takes
 * each such element as the sum of the full-shape oracle's terms, within that sum's
 * rounding: the exact +0 passes, 1e30 fails, naming the rule. */
START_TEST(judge_summed_dbias_from_terms)
{
    enum { B = 2, S = 2, T = 3, H = 2, D = 4 };
    float q[B * S * H * D], k[B * T * D], v[B * T * D], dO[B * S * H * D];
    float bias[H * S * T], dq[B * S * H * D], dk[B * T * D], dv[B * T * D], db[H * S * T];
    uint64_t seed = 4242;
    float *arr[4] = {q, k, v, dO};
    const size_t len[4] = {B * S * H * D, B * T * D, B * T * D, B * S * H * D};
    for (int t = 0; t < 4; t++)
        for (size_t e = 0; e < len[t] / 2; e++) {
            seed = seed * 6364136223846793005u + 1442695040888963407u;
            arr[t][e] = (float)((double)(seed >> 40) * 0x1p-23 - 1.0);
            arr[t][len[t] / 2 + e] = t == 3 ? -arr[t][e] : arr[t][e]; /* batch 1 */
        }
    for (int e = 0; e < H * S * T; e++)
        bias[e] = 0.125f * (float)(e % 5) - 0.25f;
    smattn_problem p = smattn_problem_default();
    p.op = SMATTN_OP_ATTENTION, p.B = B, p.S = S, p.T = T, p.Hq = H, p.Hkv = 1;
    p.D = p.Dv = D, p.scale = 0.5, p.softcap = 2.0;
    smattn_inputs in;
    smattn_grad_inputs gi;
    smattn_grad_outputs go;
    bind_mqa(S, T, H, D, q, k, v, dO, dq, dk, dv, &in, &gi, &go);
    in.bias = (smattn_tensor){bias, SMATTN_F32, {0, S * T, T, 1}}; /* [1, H, S, T] */
    smattn_ref_config cfg = {1, 0, 0, 0};
    ck_assert_int_eq(smattn_ref_backward(&p, &in, &gi, &go, &cfg, NULL), SMATTN_OK);
    go.dbias = (smattn_out_tensor){db, SMATTN_F32, {0, S * T, T, 1}};
    ck_assert_int_eq(smattn_ref_backward(&p, &in, &gi, &go, &cfg, NULL), SMATTN_ERR_PRECISION);
    memset(db, 0, sizeof db); /* the exact value, +0 */
    smattn_backward_precision pm = smattn_backward_precision_of(SMATTN_F32);
    pm.o_dtype = pm.lse_dtype = SMATTN_F32;
    conform_result r;
    memset(&r, 0, sizeof r);
    conform_judge_backward_result(&p, &in, &gi, &go, &pm, &r);
    ck_assert_msg(r.status == CONFORM_PASS, "%s", r.reason);
    ck_assert_int_eq(r.elements, B * S * H * D + 2 * B * T * D + H * S * T);
    db[4] = 1e30f;
    memset(&r, 0, sizeof r);
    conform_judge_backward_result(&p, &in, &gi, &go, &pm, &r);
    ck_assert_int_eq(r.status, CONFORM_FAIL);
    ck_assert_msg(strstr(r.reason, "dBias[b=*,h=0,i=1,j=1]") &&
                      strstr(r.reason, "judged against the sum of its exact terms"),
                  "%s", r.reason);
}
END_TEST

/* A small softcap problem of halves (found by search) whose dQ, dK or dV the oracle cannot
 * decide (SPEC 10.3 item 6): the case is skipped, saying so, whatever the gradients hold. */
START_TEST(judge_skips_what_the_oracle_cannot_decide)
{
    /* B 1, S 2, T 3, Hq 2, Hkv 1, D 2, softcap 2, the default scale */
    float q[8] = {0, 0, 0, -0.5f, 1, -0.5f, 0.5f, -0.5f}, k[6] = {0, 1, -1, 0.5f, 0, 0.5f};
    float v[6] = {0.5f, -0.5f, 0.5f, 0.5f, 0, -1},
          dO[8] = {0.25f, -0.5f, 0.5f, 0.5f, 0.5f, -0.5f, 0.5f, 0.5f};
    float dq[8] = {0}, dk[6] = {0}, dv[6] = {0};
    smattn_problem p = smattn_problem_default();
    p.op = SMATTN_OP_ATTENTION, p.B = 1, p.S = 2, p.T = 3, p.Hq = 2, p.Hkv = 1, p.D = p.Dv = 2;
    p.scale = smattn_default_scale(2), p.softcap = 2.0;
    smattn_inputs in;
    smattn_grad_inputs gi;
    smattn_grad_outputs go;
    bind_mqa(2, 3, 2, 2, q, k, v, dO, dq, dk, dv, &in, &gi, &go);
    smattn_ref_config cfg = {1, 0, 0, 0};
    ck_assert_int_eq(smattn_ref_backward(&p, &in, &gi, &go, &cfg, NULL), SMATTN_ERR_PRECISION);
    smattn_backward_precision pm = smattn_backward_precision_of(SMATTN_F32);
    pm.o_dtype = pm.lse_dtype = SMATTN_F32;
    conform_result r;
    memset(&r, 0, sizeof r);
    conform_judge_backward_result(&p, &in, &gi, &go, &pm, &r);
    ck_assert_int_eq(r.status, CONFORM_SKIP);
    ck_assert_msg(!strncmp(r.reason, CONFORM_SKIP_ORACLE_UNDECIDED " the exact gradients",
                           strlen(CONFORM_SKIP_ORACLE_UNDECIDED " the exact gradients")) &&
                      strstr(r.reason, "SMATTN_ERR_PRECISION"),
                  "%s", r.reason);
}
END_TEST

/* A report holding a case the oracle could not judge is not conforming, whichever judge
 * skipped it (the backward's "not judged: the oracle could not decide", the forward's "the
 * oracle or the bound failed"), and its text says so and lists the case; a skip of the
 * kernel's own (--skip) leaves the verdict as it was. */
START_TEST(report_unjudged_not_conforming)
{
    static const char *const why[3] = {CONFORM_SKIP_ORACLE_UNDECIDED " dBias within its precision "
                                                                     "limit",
                                       "the oracle or the bound failed: the rounding could not be "
                                       "decided (SMATTN_ERR_PRECISION)",
                                       "skipped by --skip"};
    for (int k = 0; k < 3; k++) {
        conform_result res[2];
        memset(res, 0, sizeof res);
        snprintf(res[0].name, sizeof res[0].name, "a");
        snprintf(res[0].category, sizeof res[0].category, "case");
        res[0].status = CONFORM_PASS;
        res[0].worst_out = -1;
        res[1] = res[0];
        snprintf(res[1].name, sizeof res[1].name, "x");
        res[1].status = CONFORM_SKIP;
        snprintf(res[1].reason, sizeof res[1].reason, "%s", why[k]);
        conform_report rep;
        memset(&rep, 0, sizeof rep);
        rep.results = res, rep.n = 2, rep.suite = "files", rep.conventions[0] = '\0';
        ck_assert_int_eq(conform_report_conforming(&rep), k == 2);
        char *text = NULL;
        size_t len = 0;
        FILE *f = open_memstream(&text, &len);
        ck_assert(f != NULL);
        conform_report_print(&rep, f);
        fclose(f);
        if (k < 2)
            ck_assert_msg(strstr(text, "verdict: NOT CONFORMING (1 cases the oracle could not "
                                       "judge") &&
                              strstr(text, "  SKIP x: ") &&
                              strstr(text, "1 the oracle could not judge"),
                          "%s", text);
        else
            ck_assert_msg(strstr(text, "verdict: CONFORMING (1 cases passed, 1 skipped") &&
                              strstr(text, "1 by --skip"),
                          "%s", text);
        free(text);
    }
}
END_TEST

Suite *conform_backward_suite(void);
Suite *conform_backward_suite(void)
{
    Suite *s = suite_create("conform_backward");
    TCase *tc = tcase_create("conform_backward");
    tcase_set_timeout(tc, 300);
    tcase_add_checked_fixture(tc, setup, teardown);
    tcase_add_test(tc, builtin_passes_both_suites);
    tcase_add_test(tc, example_passes);
    tcase_add_test(tc, no_entry_skips);
    tcase_add_test(tc, determinism_claim);
    tcase_add_test(tc, dbias_dsinks_claimed);
    tcase_add_test(tc, hangs_stop_the_run);
    tcase_add_test(tc, write_outside_fails);
    tcase_add_test(tc, write_outside_then_decline_fails);
    tcase_add_test(tc, precision_exit_is_a_crash);
    tcase_add_test(tc, judge_names_the_class);
    tcase_add_test(tc, judge_names_dv_dlse_mean);
    tcase_add_test(tc, judge_names_dbias_dsinks);
    tcase_add_test(tc, judge_summed_dbias_from_terms);
    tcase_add_test(tc, judge_skips_what_the_oracle_cannot_decide);
    tcase_add_test(tc, report_unjudged_not_conforming);
    suite_add_tcase(s, tc);
    return s;
}
