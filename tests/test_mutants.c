/* SPDX-License-Identifier: MIT */
/* test_mutants.c: `smattn conform --suite quick` (SMATTN_CLI) accepts the example plugin and
 * the built-in kernel, and rejects every mutant of tests/mutants/ (exit 1, verdict "not
 * conforming") on the quick suite's cases of the category aimed at its bug, with a failed
 * case there (`make mutants-table` runs each mutant on every case); the mutants aimed at
 * cases both suites hold fail those cases in full too. The plugins are those
 * of the CLI's build directory (make builds them as prerequisites of `tests`), so check-san
 * runs sanitized plugins under the sanitized checker. */
#include <check.h>
#include <fcntl.h>
#include <json-c/json.h>
#include <libgen.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "tests/support/testkit.h"

/* Every mutant with the category whose cases target its bug (tests/mutants/README.md). */
static const struct {
    const char *name, *category;
} mutants[] = {
    {"causal_off_by_one", "causal"},
    {"empty_nan", "empty_rows"},
    {"f16_accum", "prefill"},
    {"finite_mask", "empty_rows"},
    {"gqa_interleaved", "gqa"},
    {"kv_lens_overread", "padding"},
    {"lse_no_max", "golden"},
    {"masked_v_nan", "garbage"},
    {"no_max_sub", "extreme"},
    {"scale_f16", "prefill"},
    {"upper_left", "causal"},
    {"zero_mask", "causal"},
    {"sink_overflow", "sinks"},
    {"max_restart_zero", "regimes"},
    {"scale_d128", "head_dim"},
    {"alibi_slope_sign", "alibi"},
    {"alibi_off_by_one", "alibi"},
    {"alibi_mode_confused", "alibi"},
    {"alibi_diag_follows_causal", "alibi"},
    {"tail_keys_dropped", "split"},
    {"merge_no_max", "merge"},
    {"merge_batch_ignored", "merge"},
    {"merge_part_stride_assumed", "merge"},
    {"merge_base2_no_max", "merge"},
    {"merge_empty_lse_ignored", "merge"},
    {"merge_row_stride_assumed", "merge"},
    {"merge_nan_lse_empty", "merge"},
    {"merge_tiny_weight_skipped", "merge"},
    {"merge_fa2_neg_inf_read", "merge"},
    {"merge_out_stride_assumed", "merge"},
    {"bw_gqa_not_summed", "backward"},
    {"bw_mask_ignored", "backward"},
    {"bw_softcap_no_derivative", "backward"},
    {"bw_delta_wrong_o", "backward"},
    {"bw_empty_nan", "backward"},
    {"bw_strides_ignored", "backward"},
    {"bw_p_unshifted", "backward"},
    {"bw_decline_overflow", "backward"},
    {"bw_input_strides_ignored", "backward"},
    {"bw_dv_head0", "backward"},
    {"bw_dlse_ignored", "backward"},
    {"paged_bt_stride_ignored", "layout"},
    {"descale_k_ignored", "quant"},
    {"q4_0_nibbles_swapped", "quant"},
    {"q8_0_scale_other_block", "quant"},
    {"e4m3_nan_as_480", "quant"},
    {"q_scaled_in_place", "golden"},
    {"bw_saved_lse_scratch", "backward"},
    {"e5m2_inf_as_nan", "quant"},
    {"q8_0_scale_abs", "quant"},
    {"bw_dbias_not_summed", "backward"},
    {"bw_dsinks_sign", "backward"},
};
#define NMUTANTS (int)(sizeof mutants / sizeof mutants[0])

static char tmp[64];

static void setup(void)
{
    snprintf(tmp, sizeof tmp, "/tmp/smattn_mutants_XXXXXX");
    ck_assert_ptr_nonnull(mkdtemp(tmp));
}

static void teardown(void)
{
    char p[128];
    snprintf(p, sizeof p, "%s/report.json", tmp);
    unlink(p);
    rmdir(tmp);
}

/* The CLI's build directory (build/ or build-san/), where the plugins are. */
static const char *build_dir(void)
{
    static char dir[1024];
    const char *cli = getenv("SMATTN_CLI");
    ck_assert_msg(cli != NULL, "SMATTN_CLI is not set");
    snprintf(dir, sizeof dir, "%s", cli);
    return dirname(dir);
}

/* Run `smattn conform --suite SUITE [--only PREFIX] [--kernel K] --json tmp/report.json`;
 * returns the exit status and the parsed report (NULL if none was written). */
static int conform_only(const char *suite, const char *only, const char *kernel,
                        json_object **report)
{
    char json[128];
    snprintf(json, sizeof json, "%s/report.json", tmp);
    unlink(json);
    const char *argv[12] = {getenv("SMATTN_CLI"), "conform", "--suite", suite, "--json", json};
    int n = 6;
    if (only)
        argv[n++] = "--only", argv[n++] = only;
    if (kernel)
        argv[n++] = "--kernel", argv[n++] = kernel;
    argv[n] = NULL;
    pid_t pid = fork();
    ck_assert_int_ge(pid, 0);
    if (pid == 0) {
        int null = open("/dev/null", O_WRONLY);
        if (null < 0 || dup2(null, 1) < 0 || dup2(null, 2) < 0)
            _exit(127);
        execv(argv[0], (char *const *)(uintptr_t)argv);
        _exit(127);
    }
    int ws;
    ck_assert_int_eq(waitpid(pid, &ws, 0), pid);
    *report = json_object_from_file(json);
    return WIFEXITED(ws) ? WEXITSTATUS(ws) : -1;
}

static int conform(const char *kernel, json_object **report)
{
    return conform_only("quick", NULL, kernel, report);
}

static const char *str_of(json_object *o, const char *key)
{
    json_object *v;
    return json_object_object_get_ex(o, key, &v) ? json_object_get_string(v) : "";
}

/* The number of failed cases of a category in a report. */
static int failed_in(json_object *report, const char *category, int *failed_total)
{
    json_object *cases;
    ck_assert(json_object_object_get_ex(report, "cases", &cases));
    int n = 0;
    *failed_total = 0;
    for (size_t i = 0; i < json_object_array_length(cases); i++) {
        json_object *c = json_object_array_get_idx(cases, i);
        if (strcmp(str_of(c, "status"), "fail") != 0)
            continue;
        ++*failed_total;
        n += strcmp(str_of(c, "category"), category) == 0;
    }
    return n;
}

static void expect_conforming(const char *kernel)
{
    json_object *r = NULL;
    int st = conform(kernel, &r);
    ck_assert_msg(r != NULL, "no JSON report for %s", kernel ? kernel : "the built-in kernel");
    int total;
    failed_in(r, "", &total);
    ck_assert_msg(st == 0 && total == 0, "%s: exit %d, %d failed cases, verdict %s",
                  kernel ? kernel : "built-in", st, total, str_of(r, "verdict"));
    ck_assert_str_eq(str_of(r, "verdict"), "conforming");
    json_object_put(r);
}

START_TEST(example_conforms)
{
    char so[1200];
    snprintf(so, sizeof so, "%s/plugins/example_kernel.so", build_dir());
    expect_conforming(so);
}
END_TEST

START_TEST(builtin_conforms)
{
    expect_conforming(NULL);
}
END_TEST

START_TEST(mutant_rejected)
{
    if (!test_keep(_i, NMUTANTS)) /* the sanitizer half: a share of the list (testkit.h) */
        return;
    char so[1200];
    snprintf(so, sizeof so, "%s/mutants/%s.so", build_dir(), mutants[_i].name);
    /* the quick suite's cases of the mutant's category: the whole suite for each of some
     * thirty mutants was most of make check's time under ASan+UBSan, and the kill table
     * (make mutants-table) runs every mutant on every case */
    char only[64];
    snprintf(only, sizeof only, "%s/", mutants[_i].category);
    json_object *r = NULL;
    int st = conform_only("quick", only, so, &r);
    ck_assert_msg(r != NULL, "no JSON report for mutant %s (exit %d)", mutants[_i].name, st);
    int total, n = failed_in(r, mutants[_i].category, &total);
    ck_assert_msg(st == 1, "mutant %s: exit %d (verdict %s, %d failed cases), expected 1",
                  mutants[_i].name, st, str_of(r, "verdict"), total);
    ck_assert_str_eq(str_of(r, "verdict"), "not conforming");
    ck_assert_msg(n > 0, "mutant %s: %d failed cases, none in category %s", mutants[_i].name,
                  total, mutants[_i].category);
    json_object_put(r);
}
END_TEST

/* Mutants failing one case with the reason aimed at their bug (conform/judge.c and, for
 * the backward's, conform/judge_backward.c): the ALiBi
 * mutants name the reading of ALiBi their outputs follow (the one-sided causal prefill tells
 * the two modes apart through the LSE alone); tail_keys_dropped passes the full row (T = 20,
 * a multiple of 4) and fails the split-KV check of its parts (T = 3 and 17); the quantised
 * mutants fail the case aimed at their bug, a forgotten descale named as such. */
static const struct {
    const char *name, *only, *reason;
} alibi_named[] = {
    {"alibi_slope_sign", "alibi/one_sided_causal_prefill",
     "ALiBi: the outputs follow the slopes negated"},
    {"alibi_off_by_one", "alibi/one_sided_causal_prefill",
     "ALiBi: the outputs follow each distance one further"},
    {"alibi_mode_confused", "alibi/one_sided_causal_prefill",
     "ALiBi: the outputs follow the symmetric mode"},
    {"alibi_diag_follows_causal", "alibi/symmetric_upper_left_prefill", "error/bound ratio"},
    {"tail_keys_dropped", "split/prefill_t20_at3",
     "split-KV: the kernel's own attention over keys [0, 3) and [3, 20), merged by the oracle"},
    {"merge_no_max", "merge/lse_spread_pm1000", "error/bound ratio inf at O element"},
    {"merge_batch_ignored", "merge/batch_b3", "error/bound ratio"},
    {"merge_part_stride_assumed", "merge/n2_plain", "error/bound ratio inf at O element"},
    {"merge_base2_no_max", "merge/base2_spread_pm1000", "error/bound ratio inf at O element"},
    {"merge_empty_lse_ignored", "merge/all_parts_empty_fa2",
     "error/bound ratio inf at LSE element 0: got -inf, exact inf"},
    /* the merge's poisoned rows and strided partials: the reason names what the row holds */
    {"merge_row_stride_assumed", "merge/row_strides_padded",
     "strided partials: O's and the LSE's rows and heads padded, NaN between them"},
    {"merge_nan_lse_empty", "merge/poison_rows_neg_inf",
     "a poisoned row: part 1's LSE is NaN, so O and LSE are NaN (SPEC 9.2)"},
    {"merge_tiny_weight_skipped", "merge/poison_rows_neg_inf",
     "part 3's O holds NaN in this column: a non-finite O of a part that is not empty counts "
     "whatever its weight"},
    {"merge_fa2_neg_inf_read", "merge/poison_rows_fa2",
     "(LSE -inf) under empty_parts pos_inf hold NaN in O: an empty part's O is never read"},
    {"merge_out_stride_assumed", "merge/row_strides_padded",
     "wrote between the elements of its strided outputs (O, element"},
    /* the backward's (conform/judge_backward.c): each names its bug class */
    {"bw_gqa_not_summed", "backward/gqa_hq4_hkv2",
     "GQA group not summed: dK and dV are off while dQ is within its bound"},
    /* dV alone off in a GQA case: dV's reason, not the group's */
    {"bw_dv_head0", "backward/gqa_hq4_hkv2",
     "dV = sum P dO is off while dQ and dK are within their bounds"},
    {"bw_dlse_ignored", "backward/dlse",
     "dLSE ignored: the gradients are the oracle's for dLSE = 0"},
    {"bw_mask_ignored", "backward/mask", "masked key given gradient: dK[b=0,j=0,g=0,d=0]"},
    {"bw_softcap_no_derivative", "backward/softcap",
     "softcap's derivative: dQ and dK are off while dV"},
    {"bw_delta_wrong_o", "backward/plain", "Delta or dP: dQ and dK are off"},
    {"bw_empty_nan", "backward/padding", "empty row turned NaN: dQ[b=1,i=2,h=0,d=0] = NaN"},
    /* a backward blind to strides writes the gradients' row padding, or, honouring the
     * outputs' strides only, reads the inputs' (1024) and is named strided; P = e^s / e^LSE
     * overflows in the case whose LSEs pass 88 (inf / inf); a write past dQ is caught
     * although the kernel then declines the case */
    {"bw_strides_ignored", "backward/strides_padded", "of dQ's buffer is row padding"},
    {"bw_input_strides_ignored", "backward/strides_gqa_head_major",
     "strided case: Q, K, V, dO and dLSE have padded rows (1024 in the padding)"},
    {"bw_p_unshifted", "backward/scores_above88", "P = exp(s - LSE) is off"},
    {"bw_decline_overflow", "backward/softcap",
     "wrote outside its outputs: past the end of dQ (a 160-element buffer), then declined the "
     "backward"},
    /* the table's columns past max_pages hold page numbers no page has (INT32_MAX among
     * them): read as sequence 1's pages, they crash the kernel */
    {"paged_bt_stride_ignored", "layout/paged_p16_decode", "crash: "},
    {"descale_k_ignored", "quant/e4m3_descale_head_gqa",
     "descale: the outputs follow the K descale left out"},
    {"q4_0_nibbles_swapped", "quant/q4_0_kv_prefill", "error/bound ratio"},
    {"q8_0_scale_other_block", "quant/q8_0_kv_causal_prefill", "error/bound ratio"},
    {"e4m3_nan_as_480", "quant/e4m3_nan_key", "where the spec has NaN"},
    /* right on its first call, so named for what it did, not for what the split or the
     * second run then saw */
    {"q_scaled_in_place", "prefill/000", "wrote into its inputs: Q changed during the call"},
    {"bw_saved_lse_scratch", "backward/plain",
     "wrote into its inputs: the saved LSE changed during the backward"},
    {"e5m2_inf_as_nan", "quant/e5m2_inf_value",
     "NaN at O[b=0,i=0,h=0,c=7] where the spec has +inf"},
    {"q8_0_scale_abs", "quant/q8_0_kv_causal_prefill", "error/bound ratio"},
    /* the optional gradients (SMATTN_CAP_BACKWARD_DBIAS, _DSINKS): named as such */
    {"bw_dbias_not_summed", "backward/dbias_broadcast_batch_heads",
     "dBias of a broadcast bias off while dQ, dK and dV are within their bounds: each element "
     "(* in its index) is the sum of dS over all the batches and heads"},
    {"bw_dsinks_sign", "backward/dsinks_empty_rows", "dSinks has the wrong sign"},
};

/* Mutants of dBias and dSinks alone: every backward case without those outputs passes (the
 * battery before it asked for them let them through), only the cases that ask fail. */
static const char *const grad_only[] = {"bw_dbias_not_summed", /* and */ "bw_dsinks_sign"};

START_TEST(gradient_mutant_caught_by_its_cases)
{
    char so[1200];
    snprintf(so, sizeof so, "%s/mutants/%s.so", build_dir(), grad_only[_i]);
    json_object *r = NULL;
    int st = conform_only("quick", "backward/", so, &r);
    ck_assert_msg(r != NULL && st == 1, "mutant %s: exit %d", grad_only[_i], st);
    const char *out = strstr(grad_only[_i], "dbias") ? "dbias" : "dsinks";
    json_object *cases;
    ck_assert(json_object_object_get_ex(r, "cases", &cases));
    int failed = 0, passed_without = 0;
    for (size_t i = 0; i < json_object_array_length(cases); i++) {
        json_object *c = json_object_array_get_idx(cases, i);
        const char *name = str_of(c, "name"), *status = str_of(c, "status");
        if (!strcmp(status, "fail")) {
            failed++;
            ck_assert_msg(strstr(name, out), "mutant %s fails %s: %s", grad_only[_i], name,
                          str_of(c, "reason"));
            ck_assert_msg(strstr(str_of(c, "reason"), strcmp(out, "dbias") ? "dSinks" : "dBias"),
                          "mutant %s, %s: reason '%s'", grad_only[_i], name,
                          str_of(c, "reason"));
        } else if (!strcmp(status, "pass") && !strstr(name, "dbias") && !strstr(name, "dsinks")) {
            passed_without++;
        }
    }
    ck_assert_int_ge(failed, 2);
    ck_assert_int_ge(passed_without, 20);
    json_object_put(r);
}
END_TEST

START_TEST(alibi_mutant_named)
{
    if (!test_keep(_i, (int)(sizeof alibi_named / sizeof alibi_named[0]))) /* the sanitizer half: a share of the list (testkit.h) */
        return;
    char so[1200];
    snprintf(so, sizeof so, "%s/mutants/%s.so", build_dir(), alibi_named[_i].name);
    json_object *r = NULL;
    int st = conform_only("quick", alibi_named[_i].only, so, &r);
    ck_assert_msg(r != NULL && st == 1, "mutant %s: exit %d", alibi_named[_i].name, st);
    json_object *cases, *c;
    ck_assert(json_object_object_get_ex(r, "cases", &cases));
    ck_assert_int_eq(json_object_array_length(cases), 1);
    c = json_object_array_get_idx(cases, 0);
    ck_assert_str_eq(str_of(c, "status"), "fail");
    ck_assert_msg(strstr(str_of(c, "reason"), alibi_named[_i].reason), "mutant %s: reason '%s'",
                  alibi_named[_i].name, str_of(c, "reason"));
    json_object_put(r);
}
END_TEST

/* The merge battery runs on every plugin exporting smattn_plugin_merge (the example's, and
 * smattn_opt.so's smattn_merge) and passes: none of its cases is skipped. Of the merge
 * golden vectors, which keep their own conventions, the example declines the one with NaN
 * empty rows (FlashAttention-2's, merge_empty_parts_fa2): a skip that names the decline. */
START_TEST(merge_battery_runs_on_plugins)
{
    static const char *const so_names[2] = {"plugins/example_kernel.so", "plugins/smattn_opt.so"};
    for (int k = 0; k < 2; k++) {
        char so[1200];
        snprintf(so, sizeof so, "%s/%s", build_dir(), so_names[k]);
        json_object *r = NULL;
        int st = conform_only("quick", "merge/", so, &r);
        ck_assert_msg(r != NULL && st == 0, "%s: exit %d", so_names[k], st);
        json_object *cases;
        ck_assert(json_object_object_get_ex(r, "cases", &cases));
        ck_assert_int_ge(json_object_array_length(cases), 20);
        int golden = 0;
        for (size_t i = 0; i < json_object_array_length(cases); i++) {
            json_object *c = json_object_array_get_idx(cases, i);
            golden += strncmp(str_of(c, "name"), "merge/golden_", 13) == 0;
            if (k == 0 && !strcmp(str_of(c, "name"), "merge/golden_merge_empty_parts_fa2")) {
                ck_assert_str_eq(str_of(c, "status"), "skip");
                ck_assert_ptr_nonnull(strstr(str_of(c, "reason"), "declined"));
                continue;
            }
            ck_assert_msg(!strcmp(str_of(c, "status"), "pass"), "%s on %s: %s (%s)",
                          str_of(c, "name"), so_names[k], str_of(c, "status"),
                          str_of(c, "reason"));
        }
        ck_assert_int_ge(golden, 5);
        json_object_put(r);
    }
}
END_TEST

/* The mutants whose cases are the same in both suites fail full too (run on those cases
 * only: the whole full suite costs a minute of oracle time). */
static const struct {
    const char *name, *only;
} in_full[] = {{"sink_overflow", "sinks/large_sink_decode"},
               {"max_restart_zero", "regimes/masked_tiles"}};

START_TEST(mutant_rejected_full)
{
    char so[1200];
    snprintf(so, sizeof so, "%s/mutants/%s.so", build_dir(), in_full[_i].name);
    json_object *r = NULL;
    int st = conform_only("full", in_full[_i].only, so, &r);
    ck_assert_msg(r != NULL, "no JSON report for mutant %s (exit %d)", in_full[_i].name, st);
    int total;
    failed_in(r, "", &total);
    ck_assert_msg(st == 1 && total > 0, "mutant %s on full %s*: exit %d, %d failed cases",
                  in_full[_i].name, in_full[_i].only, st, total);
    json_object_put(r);
}
END_TEST

Suite *mutants_suite(void);
Suite *mutants_suite(void)
{
    Suite *s = suite_create("mutants");
    TCase *tc = tcase_create("mutants");
    tcase_set_timeout(tc, 300); /* per run of the quick suite; slow under ASan+UBSan */
    tcase_add_checked_fixture(tc, setup, teardown);
    tcase_add_test(tc, example_conforms);
    tcase_add_test(tc, builtin_conforms);
    tcase_add_loop_test(tc, mutant_rejected, 0, NMUTANTS);
    tcase_add_test(tc, merge_battery_runs_on_plugins);
    tcase_add_loop_test(tc, gradient_mutant_caught_by_its_cases, 0,
                        (int)(sizeof grad_only / sizeof grad_only[0]));
    tcase_add_loop_test(tc, alibi_mutant_named, 0,
                        (int)(sizeof alibi_named / sizeof alibi_named[0]));
    tcase_add_loop_test(tc, mutant_rejected_full, 0,
                        (int)(sizeof in_full / sizeof in_full[0]));
    suite_add_tcase(s, tc);
    return s;
}
