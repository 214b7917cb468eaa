/* SPDX-License-Identifier: MIT */
/* test_conform_layout.c: the checker on ragged and paged batches (SPEC 2.7), as a user runs
 * it (SMATTN_CLI): the built-in kernel and a right binary64 plugin pass every layout case,
 * a plugin that claims no layout skips them and says which, and each planted layout bug
 * (tests/fixtures/layout_fixture.c) fails with a reason that names the sequence and its
 * pages or packed rows. */
#include <check.h>
#include <json.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "conform/conform.h"
#include "tests/support/cli_run.h"
#include "tests/support/fs.h"

static char dir[64];

static void setup(void)
{
    ck_assert_int_eq(test_mkdtemp(dir, sizeof dir, "conform_layout"), 0);
}

static void teardown(void)
{
    test_rm_tree(dir);
}

/* `smattn conform --kernel K --only layout/ --json` (with --rows ROWS unless NULL), the
 * report parsed. */
static json_object *run_layout(const char *kernel, const char *rows)
{
    const char *json = test_path(dir, "r.json");
    const char *args[] = {"conform", "--kernel", kernel, "--only",
                          "layout/", "--json",   json,   rows ? "--rows" : NULL,
                          rows,      NULL};
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

/* Every layout case passes, none skipped; at least `min` of them, each using a layout. */
static void expect_all_pass(const char *kernel, size_t min)
{
    json_object *root = run_layout(kernel, NULL), *cases = cases_of(root);
    size_t n = json_object_array_length(cases);
    ck_assert_msg(n >= min, "%s: %zu layout cases", kernel, n);
    for (size_t k = 0; k < n; k++) {
        json_object *c = json_object_array_get_idx(cases, k), *f;
        ck_assert_msg(!strcmp(test_report_field(c, "status"), "pass"), "%s: %s: %s %s", kernel,
                      test_report_field(c, "name"), test_report_field(c, "status"),
                      test_report_field(c, "reason"));
        ck_assert(json_object_object_get_ex(c, "features", &f));
        const char *feats = json_object_to_json_string(f);
        ck_assert_msg(strstr(feats, "packed_") || strstr(feats, "paged_"), "%s: features %s",
                      test_report_field(c, "name"), feats);
    }
    json_object_put(root);
}

START_TEST(builtin_and_right_plugins_pass)
{
    expect_all_pass("builtin", 19);
    expect_all_pass(test_built("plugins/smattn_opt.so"), 19);
    expect_all_pass(test_built("tests/fixtures/layout_good.so"), 19);
}
END_TEST

/* A plugin that claims no layout is not handed one: every layout case skipped, the layout
 * named. */
START_TEST(unclaimed_layouts_are_skipped)
{
    json_object *root = run_layout(test_built("tests/fixtures/fixture_good.so"), NULL),
                *cases = cases_of(root);
    ck_assert_int_ge(json_object_array_length(cases), 19);
    for (size_t k = 0; k < json_object_array_length(cases); k++) {
        json_object *c = json_object_array_get_idx(cases, k);
        const char *reason = test_report_field(c, "reason");
        ck_assert_str_eq(test_report_field(c, "status"), "skip");
        ck_assert_msg(strstr(reason, "packed_") || strstr(reason, "paged_"), "%s: %s",
                      test_report_field(c, "name"), reason);
    }
    json_object_put(root);
}
END_TEST

/* A planted bug: the cases named in fail fail, those in pass pass; every failure's reason
 * names the sequence and `word` (its pages, or its packed rows or keys). */
static const struct bug {
    const char *mode, *word;
    const char *fail[3], *pass[3];
} bugs[] = {
    {"page_off",
     "page",
     {"layout/paged_p16_decode", "layout/paged_p3_hnd_causal", "layout/paged_p1_gqa"},
     {"layout/packed_window_gqa", "layout/packed_seqused_k", NULL}},
    {"slot_pow2",
     "page",
     {"layout/paged_p3_nopow2", "layout/paged_full_capacity", "layout/paged_hnd_window_gqa"},
     {"layout/paged_p16_decode", "layout/paged_p1_gqa", "layout/paged_p256"}},
    {"no_seqused",
     "seqused_k",
     {"layout/packed_seqused_k", NULL, NULL},
     {"layout/packed_window_gqa", "layout/paged_p3_nopow2", NULL}},
    {"unused_slot",
     "page",
     {"layout/paged_p16_decode", "layout/paged_p3_nopow2", "layout/paged_split_decode_t600"},
     {"layout/paged_full_capacity", "layout/paged_p1_gqa", "layout/packed_seqused_k"}},
    {"cu_off",
     "packed rows",
     {"layout/packed_mixed_decode_prefill", "layout/paged_mixed_decode_prefill", NULL},
     {"layout/paged_p16_decode", "layout/paged_split_decode_t600", NULL}},
};
#define NBUGS ((int)(sizeof bugs / sizeof bugs[0]))

START_TEST(planted_bugs_fail_naming_the_layout)
{
    const struct bug *x = &bugs[_i];
    char so[96];
    snprintf(so, sizeof so, "tests/fixtures/layout_%s.so", x->mode);
    json_object *root = run_layout(test_built(so), NULL), *cases = cases_of(root);
    size_t failed = 0;
    for (size_t k = 0; k < json_object_array_length(cases); k++) {
        json_object *c = json_object_array_get_idx(cases, k);
        if (strcmp(test_report_field(c, "status"), "fail"))
            continue;
        failed++;
        const char *reason = test_report_field(c, "reason");
        ck_assert_msg(strstr(reason, "sequence ") && strstr(reason, x->word), "%s: %s: %s", x->mode,
                      test_report_field(c, "name"), reason);
    }
    ck_assert_msg(failed > 0, "%s: nothing failed", x->mode);
    for (int k = 0; k < 3; k++) {
        json_object *c = x->fail[k] ? test_report_case(root, x->fail[k]) : NULL;
        ck_assert_msg(!x->fail[k] || (c && !strcmp(test_report_field(c, "status"), "fail")),
                      "%s: %s did not fail", x->mode, x->fail[k]);
        c = x->pass[k] ? test_report_case(root, x->pass[k]) : NULL;
        ck_assert_msg(!x->pass[k] || (c && !strcmp(test_report_field(c, "status"), "pass")),
                      "%s: %s did not pass: %s", x->mode, x->pass[k],
                      c ? test_report_field(c, "reason") : "absent");
    }
    json_object_put(root);
}
END_TEST

/* --rows K judges a sample of a layout case's rows (the twin's padding rows taken from the
 * oracle on the sampled rows only), and a bug on a sampled row still fails. */
START_TEST(sampled_rows_on_layouts)
{
    json_object *root = run_layout(test_built("tests/fixtures/layout_good.so"), "2"),
                *c = test_report_case(root, "layout/paged_mixed_decode_prefill"), *v;
    ck_assert_str_eq(test_report_field(c, "status"), "pass");
    ck_assert(json_object_object_get_ex(c, "rows_judged", &v));
    int64_t judged = json_object_get_int64(v);
    ck_assert(json_object_object_get_ex(c, "rows_total", &v));
    ck_assert_msg(judged > 0 && judged < json_object_get_int64(v), "judged %lld of %lld",
                  (long long)judged, (long long)json_object_get_int64(v));
    json_object_put(root);
    root = run_layout(test_built("tests/fixtures/layout_cu_off.so"), "2");
    c = test_report_case(root, "layout/packed_mixed_decode_prefill");
    ck_assert_str_eq(test_report_field(c, "status"), "fail");
    json_object_put(root);
}
END_TEST

/* gen writes a layout case dense as its twin: the manifest gives the twin's features (its
 * lengths, no layout), as `check` reports them. */
START_TEST(gen_dense_lists_the_twins_features)
{
    const char *out = test_path(dir, "cases");
    const char *args[] = {"gen", out, NULL};
    test_outcome o = test_cli_run(dir, args);
    ck_assert_msg(o.code == 0, "gen: exit %d: %s", o.code, o.err);
    test_outcome_free(&o);
    char *text = test_slurp(test_path(dir, "cases/manifest.json"));
    json_object *root = json_tokener_parse(text), *cases, *c = NULL, *v;
    free(text);
    ck_assert(root && json_object_object_get_ex(root, "cases", &cases));
    for (size_t k = 0; k < json_object_array_length(cases) && !c; k++) {
        json_object *e = json_object_array_get_idx(cases, k);
        if (!strcmp(test_report_field(e, "name"), "layout/paged_mixed_decode_prefill"))
            c = e;
    }
    ck_assert_ptr_nonnull(c);
    ck_assert(json_object_object_get_ex(c, "features", &v));
    const char *feats = json_object_to_json_string(v);
    ck_assert_msg(strstr(feats, "\"kv_lens\"") && strstr(feats, "\"q_lens\"") &&
                      !strstr(feats, "paged_") && !strstr(feats, "packed_"),
                  "features %s", feats);
    json_object_put(root);
}
END_TEST

/* check reports a paged case file's features as conform does: the layout, not kv_lens
 * (a paged cache's lengths are the layout's own). */
START_TEST(check_names_a_paged_files_features)
{
    const char *out = test_path(dir, "paged");
    const char *gen[] = {"gen", "--layout", "paged", out, NULL};
    test_outcome o = test_cli_run(dir, gen);
    ck_assert_msg(o.code == 0, "gen: exit %d: %s", o.code, o.err);
    test_outcome_free(&o);
    char cdir[256];
    snprintf(cdir, sizeof cdir, "%s/layout-paged_p3_nopow2", out);
    const char *ref[] = {"ref", cdir, cdir, NULL};
    o = test_cli_run(dir, ref);
    ck_assert_msg(o.code == 0, "ref: exit %d: %s", o.code, o.err);
    test_outcome_free(&o);
    test_unmark_ref_set(cdir);
    const char *json = test_path(dir, "c.json");
    const char *check[] = {"check", cdir, "--json", json, NULL};
    o = test_cli_run(dir, check);
    ck_assert_msg(o.code == 0, "check: exit %d: %s", o.code, o.out);
    test_outcome_free(&o);
    char *text = test_slurp(json);
    json_object *root = json_tokener_parse(text), *cases, *v;
    free(text);
    ck_assert(root && json_object_object_get_ex(root, "cases", &cases));
    json_object *c = json_object_array_get_idx(cases, 0);
    ck_assert(json_object_object_get_ex(c, "features", &v));
    const char *feats = json_object_to_json_string(v);
    ck_assert_msg(strstr(feats, "\"paged_nhd\"") && strstr(feats, "\"packed_q\"") &&
                      !strstr(feats, "kv_lens"),
                  "features %s", feats);
    json_object_put(root);
}
END_TEST

/* Paged tables with rows longer than max_pages: four of the layout cases and every paged
 * backward case, the columns past max_pages holding numbers no page has (a kernel taking
 * max_pages for the row stride reads them as pages); the others' stride is max_pages. */
START_TEST(paged_tables_have_row_strides)
{
    for (int full = 0; full < 2; full++) {
        conform_battery bat;
        conform_backward_battery bb;
        char err[1200];
        ck_assert_msg(conform_battery_build(&bat, full ? "full" : "quick", 0, "", err,
                                            sizeof err) == 0,
                      "%s", err);
        ck_assert_int_eq(conform_backward_battery_build(&bb, full ? "full" : "quick", 0), 0);
        int strided = 0, plain = 0, bw = 0;
        for (size_t n = 0; n < bat.n + bb.cases.n; n++) {
            const conform_case *c = n < bat.n ? &bat.cases[n] : &bb.cases.cases[n - bat.n];
            const smattn_layout *L = &c->layout;
            if (!c->has_layout || !L->block_table)
                continue;
            const int backward = !strcmp(c->category, "backward");
            ck_assert_msg(!backward || L->bt_stride > L->max_pages, "%s: bt_stride %lld",
                          c->name, (long long)L->bt_stride);
            bw += backward;
            strided += !backward && L->bt_stride > L->max_pages;
            plain += !backward && L->bt_stride == L->max_pages;
            for (int64_t b = 0; b < c->prob.B; b++)
                for (int64_t col = L->max_pages; col < L->bt_stride; col++) {
                    int32_t e = L->block_table[b * L->bt_stride + col];
                    ck_assert_msg(e < 0 || e >= L->num_pages, "%s: [%lld][%lld] = %d is a page",
                                  c->name, (long long)b, (long long)col, e);
                }
        }
        ck_assert_msg(strided >= 4 && plain >= 4 && bw >= 3, "%s: %d strided, %d not, %d backward",
                      full ? "full" : "quick", strided, plain, bw);
        conform_battery_free(&bat);
        conform_backward_battery_free(&bb);
    }
}
END_TEST

Suite *conform_layout_suite(void);
Suite *conform_layout_suite(void)
{
    Suite *s = suite_create("conform_layout");
    TCase *tc = tcase_create("core");
    tcase_add_checked_fixture(tc, setup, teardown);
    tcase_set_timeout(tc, 300);
    tcase_add_test(tc, builtin_and_right_plugins_pass);
    tcase_add_test(tc, unclaimed_layouts_are_skipped);
    tcase_add_loop_test(tc, planted_bugs_fail_naming_the_layout, 0, NBUGS);
    tcase_add_test(tc, sampled_rows_on_layouts);
    tcase_add_test(tc, gen_dense_lists_the_twins_features);
    tcase_add_test(tc, check_names_a_paged_files_features);
    tcase_add_test(tc, paged_tables_have_row_strides);
    suite_add_tcase(s, tc);
    return s;
}
