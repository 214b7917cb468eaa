/* SPDX-License-Identifier: MIT */
/* test_conform_quant.c: the checker on quantised inputs (SPEC 2.9), as a user runs it
 * (SMATTN_CLI): the example plugin and the built-in kernel pass every case of the quant
 * category; a plugin claiming none skips them all, named; `gen` writes the cases with their
 * quantised arrays and descales, `ref` and `check` agree on them, and `check` fails outputs
 * computed without a descale. */
#include <check.h>
#include <json.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "conform/conform.h"
#include "tests/support/cli_run.h"
#include "tests/support/fs.h"

static char dir[64];

static void setup(void)
{
    ck_assert_int_eq(test_mkdtemp(dir, sizeof dir, "conform_quant"), 0);
}

static void teardown(void)
{
    test_rm_tree(dir);
}

/* `smattn conform --suite SUITE --kernel K --only quant/ --json`, the report parsed. */
static json_object *run_quant(const char *kernel, const char *suite)
{
    const char *json = test_path(dir, "r.json");
    const char *args[] = {"conform", "--suite", suite, "--kernel", kernel,
                          "--only",  "quant/", "--json",  json,    NULL};
    test_outcome o = test_cli_run(dir, args);
    ck_assert_msg(o.code == 0 || o.code == 1, "exit %d: %s %s", o.code, o.out, o.err);
    char *text = test_slurp(json);
    json_object *root = json_tokener_parse(text);
    ck_assert_msg(root != NULL, "not JSON: %.200s", text);
    free(text);
    test_outcome_free(&o);
    return root;
}

static json_object *cases_of(json_object *root)
{
    json_object *cases;
    ck_assert(json_object_object_get_ex(root, "cases", &cases));
    return cases;
}

/* A right plugin decoding every quantised dtype and taking descales passes all of them,
 * quick and full, none skipped. */
START_TEST(example_passes_every_quant_case)
{
    static const char *const suites[2] = {"quick", "full"};
    static const size_t least[2] = {10, 14};
    for (int s = 0; s < 2; s++) {
        json_object *root = run_quant(test_built("plugins/example_kernel.so"), suites[s]),
                    *cases = cases_of(root);
        size_t n = json_object_array_length(cases);
        ck_assert_msg(n >= least[s], "%s: %zu quant cases", suites[s], n);
        for (size_t k = 0; k < n; k++) {
            json_object *c = json_object_array_get_idx(cases, k);
            ck_assert_msg(!strcmp(test_report_field(c, "status"), "pass"), "%s: %s: %s %s",
                          suites[s], test_report_field(c, "name"),
                          test_report_field(c, "status"), test_report_field(c, "reason"));
        }
        json_object_put(root);
    }
}
END_TEST

/* The built-in kernel reads and claims fp8, q8_0, q4_0 and both kinds of descale (SPEC
 * 2.9, 6.11): every quant case, quick and full, passes; none is skipped. */
START_TEST(builtin_passes_every_quant_case)
{
    const char *suites[] = {"quick", "full"};
    for (int s = 0; s < 2; s++) {
        json_object *root = run_quant("builtin", suites[s]), *cases = cases_of(root);
        size_t n = json_object_array_length(cases);
        for (size_t k = 0; k < n; k++) {
            json_object *c = json_object_array_get_idx(cases, k);
            ck_assert_msg(!strcmp(test_report_field(c, "status"), "pass"), "%s %s: %s %s",
                          suites[s], test_report_field(c, "name"),
                          test_report_field(c, "status"), test_report_field(c, "reason"));
        }
        ck_assert_msg(n >= (s ? 14u : 10u), "%s: %zu quant cases", suites[s], n);
        json_object_put(root);
    }
}
END_TEST

/* A plugin claiming a block format for Q (SPEC 2.9: K and V only) is refused at load,
 * with the reason. */
START_TEST(blocks_claimed_for_q_are_refused)
{
    const char *args[] = {"conform", "--kernel", test_built("tests/fixtures/fixture_q_blocks.so"),
                          "--only", "quant/", NULL};
    test_outcome o = test_cli_run(dir, args);
    ck_assert_msg(o.code == 2 && strstr(o.err, "claims q8_0 or q4_0 for Q (q_dtypes 0x82)") &&
                      strstr(o.err, "K and V only"),
                  "exit %d: %s", o.code, o.err);
    test_outcome_free(&o);
}
END_TEST

/* A float32-only plugin (claiming the masks and GQA the cases use) is handed no quantised
 * case: each skipped, the dtype or descale it lacks named. */
START_TEST(float_plugin_skips_them_all)
{
    json_object *root = run_quant(test_built("tests/fixtures/layout_good.so"), "quick"),
                *cases = cases_of(root);
    ck_assert_int_ge(json_object_array_length(cases), 10);
    for (size_t k = 0; k < json_object_array_length(cases); k++) {
        json_object *c = json_object_array_get_idx(cases, k);
        const char *reason = test_report_field(c, "reason");
        ck_assert_str_eq(test_report_field(c, "status"), "skip");
        ck_assert_msg(strstr(reason, "f8e4m3") || strstr(reason, "f8e5m2") ||
                          strstr(reason, "q8_0") || strstr(reason, "q4_0") ||
                          strstr(reason, "descale_"),
                      "%s: %s", test_report_field(c, "name"), reason);
    }
    json_object_put(root);
}
END_TEST

static void run_ok(const char *const *args)
{
    test_outcome o = test_cli_run(dir, args);
    ck_assert_msg(o.code == 0, "%s: exit %d: %s %s", args[0], o.code, o.out, o.err);
    test_outcome_free(&o);
}

static void write_text(const char *path, const char *text)
{
    FILE *f = fopen(path, "w");
    ck_assert_ptr_nonnull(f);
    ck_assert(fputs(text, f) >= 0);
    ck_assert_int_eq(fclose(f), 0);
}

/* `check CASE --json` on one case directory: its status and reason (owned). */
static char *check_status(const char *cdir, char **reason)
{
    const char *json = test_path(dir, "c.json");
    const char *args[] = {"check", cdir, "--json", json, NULL};
    test_outcome o = test_cli_run(dir, args);
    test_outcome_free(&o);
    char *text = test_slurp(json);
    json_object *root = json_tokener_parse(text);
    free(text);
    ck_assert_ptr_nonnull(root);
    json_object *c = json_object_array_get_idx(cases_of(root), 0);
    char *st = strdup(test_report_field(c, "status"));
    *reason = strdup(test_report_field(c, "reason"));
    json_object_put(root);
    return st;
}

/* gen writes a quantised case as SPEC 7.1 says (k.npy and v.npy q4_0 blocks, the descales
 * per head in case.json); ref's outputs pass check; outputs computed without the V
 * descale fail it. */
START_TEST(gen_ref_check_round_trip)
{
    const char *out = test_path(dir, "cases");
    const char *gen[] = {"gen", out, NULL};
    run_ok(gen);
    char cdir[256], path[300];
    snprintf(cdir, sizeof cdir, "%s/quant-q4_0_descale_head_decode", out);
    snprintf(path, sizeof path, "%s/case.json", cdir);
    char *text = test_slurp(path);
    ck_assert_msg(strstr(text, "\"q4_0\": [\"k\", \"v\"]") && strstr(text, "\"k_descale\": [[") &&
                      strstr(text, "\"v_descale\": [[") && !strstr(text, "q_descale"),
                  "%s", text);
    free(text);
    /* k.npy: |u1 [B=3, T=90, Hkv=2, 64/32*18 = 36] */
    snprintf(path, sizeof path, "%s/k.npy", cdir);
    text = test_slurp(path);
    /* the header after the magic, version and length (10 bytes, a NUL among them) */
    ck_assert_msg(strstr(text + 10, "'descr': '|u1'") && strstr(text + 10, "(3, 90, 2, 36)"),
                  "%.120s", text + 10);
    free(text);
    const char *ref[] = {"ref", cdir, cdir, NULL};
    run_ok(ref);
    test_unmark_ref_set(cdir);
    char *reason, *st = check_status(cdir, &reason);
    ck_assert_msg(!strcmp(st, "pass"), "%s: %s", st, reason);
    free(st), free(reason);
    /* the same case without its V descale: its outputs, written into the case, fail */
    const char *forgot = test_path(dir, "forgot");
    ck_assert_int_eq(mkdir(forgot, 0755), 0);
    static const char *const arrays[2] = {"k.npy", "v.npy"};
    for (int a = 0; a < 2; a++) {
        char src[300], dst[300];
        snprintf(src, sizeof src, "%s/%s", cdir, arrays[a]);
        snprintf(dst, sizeof dst, "%s/%s", forgot, arrays[a]);
        ck_assert_int_eq(symlink(src, dst), 0);
    }
    char src[300], dst[300];
    snprintf(src, sizeof src, "%s/q.npy", cdir);
    snprintf(dst, sizeof dst, "%s/q.npy", forgot);
    ck_assert_int_eq(symlink(src, dst), 0);
    snprintf(path, sizeof path, "%s/case.json", cdir);
    text = test_slurp(path);
    char *v = strstr(text, ",\n  \"v_descale\"");
    ck_assert_ptr_nonnull(v);
    strcpy(v, "\n}\n");
    snprintf(path, sizeof path, "%s/case.json", forgot);
    write_text(path, text);
    free(text);
    const char *ref2[] = {"ref", forgot, cdir, NULL};
    run_ok(ref2);
    test_unmark_ref_set(cdir);
    st = check_status(cdir, &reason);
    ck_assert_msg(!strcmp(st, "fail") && strstr(reason, "error/bound ratio"), "%s: %s", st,
                  reason);
    free(st), free(reason);
}
END_TEST

/* The case named name of the quick battery (the battery stays built: *b). */
static const conform_case *quick_case(conform_battery *b, const char *name)
{
    char err[256];
    ck_assert_msg(conform_battery_build(b, "quick", 0, "", err, sizeof err) == 0, "%s", err);
    for (size_t k = 0; k < b->n; k++)
        if (!strcmp(b->cases[k].name, name))
            return &b->cases[k];
    ck_abort_msg("no case %s", name);
    return NULL;
}

/* A run stores a block case as llama.cpp's reference quantisers do: every element within
 * half a step of its value (the step d = amax / 127 or max / -8, rounded to binary16), the
 * block's largest element at q = +-127 (q8_0) or nibble 0 (q4_0, value -8 d); and the twin
 * the judge reads holds decoded times factor, exactly, the factors per (batch, KV head). */
START_TEST(blocks_as_ggml_quantises_them)
{
    static const char *const names[2] = {"quant/q8_0_k_scale_v_scale",
                                         "quant/q4_0_descale_head_decode"};
    const char *name = names[_i];
    conform_battery b;
    const conform_case *c = quick_case(&b, name);
    conform_inst m, tw;
    ck_assert_int_eq(conform_case_materialise(c, c->q_dtype, c->kv_dtype, SMATTN_EMPTY_ZERO,
                                              SMATTN_LSE_NEG_INF, &m),
                     0);
    ck_assert_int_eq(m.in.k.dtype, c->kv_dtype);
    ck_assert(conform_inst_quantised(&m));
    ck_assert_int_eq(conform_inst_real(&m, &tw), 0);
    ck_assert(tw.prob.descale == NULL && tw.in.k.dtype == SMATTN_F64);
    const int q8 = c->kv_dtype == SMATTN_Q8_0;
    const smattn_problem *p = &c->prob;
    const double *x = c->in64.k.data;
    for (int64_t blk = 0; blk < c->count[1] / SMATTN_QBLOCK; blk++) {
        const double *xb = x + blk * SMATTN_QBLOCK;
        double amax = 0, max = 0;
        int finite = 1;
        for (int j = 0; j < SMATTN_QBLOCK; j++) {
            finite &= isfinite(xb[j]) != 0;
            if (fabs(xb[j]) > amax)
                amax = fabs(xb[j]), max = xb[j];
        }
        int64_t o = blk * SMATTN_QBLOCK;
        if (!finite) { /* garbage: the whole block NaN */
            for (int j = 0; j < SMATTN_QBLOCK; j++)
                ck_assert(isnan(smattn_load(m.in.k.data, m.in.k.dtype, o + j)));
            continue;
        }
        double d = q8 ? (double)((float)amax / 127.0f) : (double)((float)max / -8.0f);
        double step = fabs(d) * (1 + 0x1p-10); /* the binary16 scale: 2^-11 relative */
        /* q4_0 holds d (n - 8), n in [0, 15]: from -8 d to 7 d, so a value of the other sign
         * than the largest may exceed 7 |d| and is clamped there, as in ggml */
        const double lo = q8 ? -HUGE_VAL : fmin(-8 * d, 7 * d) * (1 + 0x1p-10),
                     hi = q8 ? HUGE_VAL : fmax(-8 * d, 7 * d) * (1 + 0x1p-10);
        for (int j = 0; j < SMATTN_QBLOCK; j++) {
            double got = smattn_load(m.in.k.data, m.in.k.dtype, o + j);
            double xc = fmin(fmax(xb[j], lo), hi);
            ck_assert_msg(fabs(got - xc) <= step / 2 + fabs(xb[j]) * 0x1p-10 + 1e-300,
                          "%s: element %lld: %a for %a (step %a)", name, (long long)(o + j), got,
                          xb[j], step);
            if (fabs(xb[j]) == amax) /* the largest: q = +-127, or nibble 0 */
                ck_assert_msg(fabs(fabs(got) - (q8 ? 127.0 : 8.0) * fabs(d)) <=
                                  fabs(d) * (q8 ? 127.0 : 8.0) * 0x1p-10,
                              "%s: the largest %a stored as %a", name, xb[j], got);
        }
    }
    /* the twin: decoded times the factor of the element's (b, KV head) */
    for (int64_t e = 0; e < c->count[1]; e++) {
        int64_t g = (e / p->D) % p->Hkv, bb = e / (p->T * p->Hkv * p->D);
        double f = p->descale->k_head ? p->descale->k_head[bb * p->Hkv + g] : p->descale->k;
        double want = smattn_load(m.in.k.data, m.in.k.dtype, e) * f;
        double got = ((const double *)tw.in.k.data)[e];
        ck_assert_msg(got == want || (isnan(got) && isnan(want)), "%s: twin K[%lld] %a, want %a",
                      name, (long long)e, got, want);
    }
    conform_inst_free(&tw);
    conform_inst_free(&m);
    conform_battery_free(&b);
}
END_TEST

/* ALiBi's mask mode refuses a bias in f64 (SPEC 2.8): a kernel that takes its inputs in
 * f64 only skips such a case with the reason (it was run, and the oracle refused it), and
 * one taking f32 runs it. */
START_TEST(alibi_mask_bias_not_in_f64)
{
    conform_battery b;
    const conform_case *c = quick_case(&b, "alibi/mask_f16_distances");
    char why[400] = "";
    ck_assert_int_eq(conform_case_dtype_fits(c, SMATTN_F64, SMATTN_F64, why, sizeof why), -1);
    ck_assert_msg(strstr(why, "mask mode takes its bias"), "%s", why);
    ck_assert_int_eq(conform_case_dtype_fits(c, SMATTN_F32, SMATTN_F64, why, sizeof why), 0);
    conform_battery_free(&b);
}
END_TEST

Suite *conform_quant_suite(void);
Suite *conform_quant_suite(void)
{
    Suite *s = suite_create("conform_quant");
    TCase *tc = tcase_create("core");
    tcase_add_checked_fixture(tc, setup, teardown);
    tcase_set_timeout(tc, 300);
    tcase_add_test(tc, example_passes_every_quant_case);
    tcase_add_test(tc, builtin_passes_every_quant_case);
    tcase_add_test(tc, float_plugin_skips_them_all);
    tcase_add_test(tc, blocks_claimed_for_q_are_refused);
    tcase_add_test(tc, gen_ref_check_round_trip);
    tcase_add_test(tc, alibi_mask_bias_not_in_f64);
    tcase_add_loop_test(tc, blocks_as_ggml_quantises_them, 0, 2);
    suite_add_tcase(s, tc);
    return s;
}
