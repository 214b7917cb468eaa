/* SPDX-License-Identifier: MIT */
/* test_conform.c: `smattn conform`, `gen` and `check` as a user runs them (SMATTN_CLI):
 * the plugin loader's errors, a crashing, hanging or out-of-bounds kernel failing only its
 * own case, well-formed JSON and JUnit reports, the baseline gate, the built-in kernel as
 * a .so giving the built-in verdict, and the gen/check round trip (the oracle's own
 * outputs pass, a perturbed one fails). Plugins: build/tests/fixtures (mk/conform.mk). */
#include <check.h>
#include <fcntl.h>
#include <json.h>
#include <math.h>
#include <spawn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "io/case.h"
#include "io/npy.h"
#include "smattn.h"
#include "tests/support/cli_run.h"
#include "tests/support/fs.h"

/* the shared helpers under this suite's short names */
typedef test_outcome outcome;
#define built test_built
#define slurp test_slurp
#define outcome_free test_outcome_free
#define find_case test_report_case
#define field test_report_field

extern char **environ;

static char dir[64];

static void setup(void)
{
    ck_assert_int_eq(test_mkdtemp(dir, sizeof dir, "conform"), 0);
}

static void teardown(void)
{
    test_rm_tree(dir);
}

/* dir/name (test_path's rotating buffers) */
static const char *tmp(const char *name)
{
    return test_path(dir, name);
}

/* SMATTN_CLI with the given arguments (NULL-terminated), stdout and stderr to files in dir. */
#define cli(...) test_cli_runl(dir, __VA_ARGS__)

/* A JSON report: parsed, with the keys of the contract checked. */
static json_object *load_report(const char *path)
{
    char *text = slurp(path);
    json_tokener *tok = json_tokener_new();
    json_object *root = json_tokener_parse_ex(tok, text, (int)strlen(text));
    ck_assert_msg(root && json_tokener_get_error(tok) == json_tokener_success,
                  "%s is not JSON: %.200s", path, text);
    json_tokener_free(tok);
    free(text);
    json_object *k, *v, *cases;
    ck_assert(json_object_object_get_ex(root, "kernel", &k));
    ck_assert(json_object_object_get_ex(k, "name", &v) && json_object_object_get_ex(k, "path", &v));
    ck_assert(json_object_object_get_ex(root, "suite", &v));
    ck_assert(json_object_object_get_ex(root, "seed", &v));
    ck_assert(json_object_object_get_ex(root, "verdict", &v));
    const char *verdict = json_object_get_string(v);
    ck_assert(!strcmp(verdict, "conforming") || !strcmp(verdict, "not conforming"));
    ck_assert(json_object_object_get_ex(root, "summary", &v));
    ck_assert(json_object_object_get_ex(root, "categories", &v));
    ck_assert(json_object_object_get_ex(root, "cases", &cases));
    ck_assert(json_object_is_type(cases, json_type_array));
    for (size_t i = 0; i < json_object_array_length(cases); i++) {
        json_object *c = json_object_array_get_idx(cases, i);
        static const char *const keys[] = {"name",      "category", "status",
                                           "max_ratio", "max_ulp",  "reason"};
        for (size_t j = 0; j < sizeof keys / sizeof keys[0]; j++)
            ck_assert_msg(json_object_object_get_ex(c, keys[j], &v), "case %zu lacks %s", i,
                          keys[j]);
    }
    return root;
}

static int64_t summary(json_object *root, const char *key)
{
    json_object *s, *v;
    ck_assert(json_object_object_get_ex(root, "summary", &s));
    ck_assert(json_object_object_get_ex(s, key, &v));
    return json_object_get_int64(v);
}

/* ---- the plugin loader ------------------------------------------------------------------ */

static void expect_load_error(const char *plugin, const char *needle)
{
    outcome o = cli("conform", "--kernel", plugin, "--json", tmp("r.json"), NULL);
    ck_assert_msg(o.code == 2, "exit %d for %s; stderr: %s", o.code, plugin, o.err);
    ck_assert_msg(strstr(o.err, needle), "stderr '%s' lacks '%s'", o.err, needle);
    ck_assert_msg(strchr(o.err, '\n') == o.err + strlen(o.err) - 1, "not one line: %s", o.err);
    ck_assert_msg(access(tmp("r.json"), F_OK) != 0, "a report was written");
    outcome_free(&o);
}

START_TEST(loader_errors)
{
    expect_load_error(built("tests/fixtures/fixture_nosym.so"),
                      "missing symbol smattn_plugin_attention");
    expect_load_error(built("tests/fixtures/fixture_abi.so"), "plugin ABI version 2");
    expect_load_error(tmp("no_such_plugin.so"), "no such file");
    outcome o = cli("conform", "--suite", "enormous", NULL);
    ck_assert_int_eq(o.code, 2);
    outcome_free(&o);
    o = cli("conform", "--frobnicate", NULL);
    ck_assert_int_eq(o.code, 2);
    outcome_free(&o);
    o = cli("check", NULL);
    ck_assert_int_eq(o.code, 2);
    outcome_free(&o);
    o = cli("conform", "--help", NULL);
    ck_assert_int_eq(o.code, 0);
    ck_assert_ptr_nonnull(strstr(o.out, "usage: smattn conform"));
    outcome_free(&o);
}
END_TEST

/* ---- isolation: the bad case fails with its reason, the others still run ---------------- */

/* The misbehaving fixtures break on D == 3 only: shapes/s3_t7_d3 in the quick suite. */
static void expect_isolated(const char *mode, const char *needle, double max_seconds)
{
    outcome o = cli("conform", "--kernel", test_fixture(mode), "--case-timeout", "0.3", "--json",
                    tmp("r.json"), "--junit", tmp("r.xml"), NULL);
    ck_assert_msg(o.code == 1, "%s: exit %d; stderr %s", mode, o.code, o.err);
    ck_assert_msg(o.seconds < max_seconds, "%s: took %.1f s", mode, o.seconds);
    json_object *r = load_report(tmp("r.json"));
    json_object *c = find_case(r, "shapes/s3_t7_d3");
    ck_assert_str_eq(field(c, "status"), "fail");
    ck_assert_msg(strstr(field(c, "reason"), needle), "%s: reason '%s' lacks '%s'", mode,
                  field(c, "reason"), needle);
    ck_assert_int_eq(summary(r, "failed"), 1);
    ck_assert_int_ge(summary(r, "passed"), 8); /* the run went on */
    ck_assert_str_eq(field(r, "verdict"), "not conforming");
    ck_assert_ptr_nonnull(strstr(o.out, "verdict: NOT CONFORMING"));
    json_object_put(r);
    outcome_free(&o);
}

START_TEST(isolation_crash)
{
    expect_isolated("segv", "crash", 60);
}
END_TEST

START_TEST(isolation_hang)
{
    expect_isolated("hang", "hang", 30);
}
END_TEST

START_TEST(isolation_out_of_bounds_write)
{
    expect_isolated("oob", "wrote outside its outputs: 0 bytes past the end of O", 60);
}
END_TEST

START_TEST(isolation_status)
{
    expect_isolated("status", "returned status 17", 60);
}
END_TEST

START_TEST(good_plugin_conforms)
{
    outcome o = cli("conform", "--kernel", built("tests/fixtures/fixture_good.so"), "--json",
                    tmp("r.json"), NULL);
    ck_assert_msg(o.code == 0, "exit %d; stdout %s", o.code, o.out);
    json_object *r = load_report(tmp("r.json"));
    ck_assert_str_eq(field(r, "verdict"), "conforming");
    /* The fixture claims no mask, no GQA: those cases are skipped, and said so. */
    json_object *c = find_case(r, "causal/lower_right_s16_t16");
    ck_assert_str_eq(field(c, "status"), "skip");
    ck_assert_ptr_nonnull(strstr(field(c, "reason"), "causal_lower_right, not claimed"));
    ck_assert_int_gt(summary(r, "skipped"), 0);
    json_object_put(r);
    outcome_free(&o);
}
END_TEST

/* The dtype cases: the built-in kernel takes f16 / bf16 Q, X and outputs and passes them;
 * a kernel claiming f32 only is not handed them (skipped, and said so). */
START_TEST(dtype_cases)
{
    outcome o = cli("conform", "--only", "dtype", "--json", tmp("d.json"), NULL);
    ck_assert_msg(o.code == 0, "builtin: exit %d: %s", o.code, o.out);
    outcome_free(&o);
    json_object *r = load_report(tmp("d.json"));
    ck_assert_int_ge(summary(r, "passed"), 5);
    ck_assert_int_eq(summary(r, "skipped"), 0);
    ck_assert_str_eq(field(find_case(r, "dtype/all_bf16"), "status"), "pass");
    json_object_put(r);
    o = cli("conform", "--kernel", built("tests/fixtures/fixture_good.so"), "--only", "dtype",
            "--json", tmp("d.json"), NULL);
    outcome_free(&o);
    r = load_report(tmp("d.json"));
    json_object *c = find_case(r, "dtype/q_f16_out_f16");
    ck_assert_str_eq(field(c, "status"), "skip");
    ck_assert_ptr_nonnull(strstr(field(c, "reason"), "Q in f16, not claimed"));
    json_object_put(r);
}
END_TEST

/* ---- reports ----------------------------------------------------------------------------- */

/* A small well-formedness check of XML: one root, balanced tags, quoted attributes, no raw
 * '<' or '&' outside markup and entities. Returns the number of elements named `tag`. */
static int xml_count(const char *s, const char *tag)
{
    char stack[16][64];
    int depth = 0, roots = 0, count = 0;
    if (!strncmp(s, "<?xml", 5))
        s = strstr(s, "?>") + 2;
    while (*s) {
        if (*s == '&') {
            ck_assert_msg(!strncmp(s, "&amp;", 5) || !strncmp(s, "&lt;", 4) ||
                              !strncmp(s, "&gt;", 4) || !strncmp(s, "&quot;", 6) ||
                              !strncmp(s, "&apos;", 6),
                          "bad entity at %.20s", s);
            s++;
            continue;
        }
        if (*s != '<') {
            s++;
            continue;
        }
        int closing = s[1] == '/';
        const char *name = s + 1 + closing;
        size_t n = strcspn(name, " \t\n/>");
        ck_assert(n > 0 && n < 64);
        const char *end = name + n;
        while (*end && *end != '>') {
            if (*end == '"') {
                const char *q = strchr(end + 1, '"');
                ck_assert_ptr_nonnull(q);
                ck_assert_msg(memchr(end + 1, '<', (size_t)(q - end - 1)) == NULL, "raw < in attr");
                end = q;
            }
            end++;
        }
        ck_assert_msg(*end == '>', "unterminated tag");
        int selfclose = end[-1] == '/';
        if (closing) {
            ck_assert_msg(depth > 0 && strlen(stack[depth - 1]) == n &&
                              !strncmp(stack[depth - 1], name, n),
                          "mismatched </%.*s>", (int)n, name);
            depth--;
        } else {
            if (depth == 0)
                roots++;
            if (strlen(tag) == n && !strncmp(name, tag, n))
                count++;
            if (!selfclose) {
                ck_assert(depth < 16);
                snprintf(stack[depth++], 64, "%.*s", (int)n, name);
            }
        }
        s = end + 1;
    }
    ck_assert_int_eq(depth, 0);
    ck_assert_int_eq(roots, 1);
    return count;
}

START_TEST(reports_well_formed)
{
    outcome o = cli("conform", "--kernel", built("tests/fixtures/fixture_segv.so"), "--json",
                    tmp("r.json"), "--junit", tmp("r.xml"), "--html", tmp("r.html"), NULL);
    ck_assert_int_eq(o.code, 1);
    json_object *r = load_report(tmp("r.json"));
    char *xml = slurp(tmp("r.xml"));
    ck_assert_int_eq(xml_count(xml, "testcase"), (int)summary(r, "cases"));
    ck_assert_int_eq(xml_count(xml, "failure"), 1);
    ck_assert_int_eq(xml_count(xml, "skipped"), (int)summary(r, "skipped"));
    char *html = slurp(tmp("r.html"));
    ck_assert_ptr_nonnull(strstr(html, "<svg"));
    ck_assert_ptr_null(strstr(html, "src=")); /* self-contained */
    ck_assert_ptr_null(strstr(html, "href="));
    free(html);
    free(xml);
    json_object_put(r);
    outcome_free(&o);
}
END_TEST

/* ---- the baseline gate and the built-in kernel as a .so ------------------------------------ */

/* A copy of report `in` with case `name`'s max_ratio set to r0. */
static void write_baseline(const char *in, const char *out, const char *name, double r0)
{
    json_object *root = load_report(in), *c = find_case(root, name);
    ck_assert_ptr_nonnull(c);
    json_object_object_add(c, "max_ratio", json_object_new_double(r0));
    ck_assert_int_eq(json_object_to_file(out, root), 0);
    json_object_put(root);
}

START_TEST(baseline_gate)
{
    const char *only = "golden/temp,golden/s,golden/causal"; /* ~20 small cases */
    outcome o = cli("conform", "--only", only, "--json", tmp("base.json"), NULL);
    ck_assert_msg(o.code == 0, "builtin: exit %d: %s", o.code, o.out);
    outcome_free(&o);
    /* Unchanged: no regression. */
    o = cli("conform", "--only", only, "--baseline", tmp("base.json"), NULL);
    ck_assert_msg(o.code == 0, "same run against itself: exit %d: %s", o.code, o.out);
    ck_assert_ptr_nonnull(strstr(o.out, "no regression"));
    outcome_free(&o);
    /* The case with the largest ratio, stored as if it had been 20x smaller: a regression. */
    json_object *r = load_report(tmp("base.json")), *cases, *worst = NULL;
    json_object_object_get_ex(r, "cases", &cases);
    double wr = 0;
    for (size_t i = 0; i < json_object_array_length(cases); i++) {
        json_object *c = json_object_array_get_idx(cases, i), *v;
        json_object_object_get_ex(c, "max_ratio", &v);
        if (json_object_get_double(v) > wr)
            wr = json_object_get_double(v), worst = c;
    }
    ck_assert_msg(wr > 0.06, "no case with a ratio to grow (%g)", wr);
    char name[128];
    snprintf(name, sizeof name, "%s", field(worst, "name"));
    json_object_put(r);
    write_baseline(tmp("base.json"), tmp("lower.json"), name, wr / 20);
    o = cli("conform", "--only", only, "--baseline", tmp("lower.json"), "--json", tmp("g.json"),
            NULL);
    ck_assert_msg(o.code == 1, "a grown ratio: exit %d", o.code);
    char want[160];
    snprintf(want, sizeof want, "REGRESSION %s: error/bound ratio", name);
    ck_assert_msg(strstr(o.out, want), "'%s' not in %s", want, o.out);
    /* Within the bound still, but the verdict over exit 1 does not say CONFORMING. */
    ck_assert_ptr_nonnull(strstr(o.out, "verdict: NOT CONFORMING (baseline regression; every case "
                                        "passed"));
    outcome_free(&o);
    /* Growth within the margin (ratio 0.9 r0 + slack) is not a regression. */
    write_baseline(tmp("base.json"), tmp("near.json"), name, wr * 0.9);
    o = cli("conform", "--only", only, "--baseline", tmp("near.json"), NULL);
    ck_assert_msg(o.code == 0, "growth within the margin: exit %d: %s", o.code, o.out);
    outcome_free(&o);
    /* The built-in kernel as a plugin file: the same verdict and counts. */
    o = cli("conform", "--only", only, "--kernel", built("plugins/smattn_opt.so"), "--json",
            tmp("so.json"), NULL);
    ck_assert_msg(o.code == 0, "smattn_opt.so: exit %d: %s", o.code, o.out);
    json_object *a = load_report(tmp("base.json")), *b = load_report(tmp("so.json"));
    ck_assert_str_eq(field(a, "verdict"), field(b, "verdict"));
    ck_assert_int_eq(summary(a, "passed"), summary(b, "passed"));
    ck_assert_int_eq(summary(a, "skipped"), summary(b, "skipped"));
    json_object_put(a);
    json_object_put(b);
    outcome_free(&o);
}
END_TEST

/* ---- gen and check ------------------------------------------------------------------------ */

/* Every case of the manifest in root gets the oracle's own outputs (f32), as a kernel
 * without error would save them. */
static void answer_with_oracle(const char *root)
{
    char path[700];
    snprintf(path, sizeof path, "%s/manifest.json", root);
    json_object *man = json_object_from_file(path), *cases, *v;
    ck_assert_ptr_nonnull(man);
    ck_assert(json_object_object_get_ex(man, "cases", &cases));
    for (size_t i = 0; i < json_object_array_length(cases); i++) {
        ck_assert(json_object_object_get_ex(json_object_array_get_idx(cases, i), "dir", &v));
        snprintf(path, sizeof path, "%s/%s", root, json_object_get_string(v));
        smattn_case c;
        char err[300];
        ck_assert_msg(smattn_case_load(path, &c, err, sizeof err) == 0, "%s: %s", path, err);
        smattn_outputs out;
        unsigned which = SMATTN_CASE_OUT_O | SMATTN_CASE_OUT_LSE |
                         (c.prob.op == SMATTN_OP_SOFTMAX ? SMATTN_CASE_OUT_P : 0u);
        ck_assert_int_eq(smattn_case_outputs_alloc(&c, SMATTN_F32, which, &out, err, sizeof err),
                         SMATTN_OK);
        smattn_ref_config cfg = {1, 0, 0, 0};
        ck_assert_int_eq(smattn_ref(&c.prob, &c.in, &out, &cfg, NULL), SMATTN_OK);
        ck_assert_int_eq(smattn_case_write_outputs(&c, &out, path, err, sizeof err), 0);
        smattn_case_outputs_free(&out);
        smattn_case_free(&c);
    }
    json_object_put(man);
}

START_TEST(gen_check_round_trip)
{
    char cases[600];
    snprintf(cases, sizeof cases, "%s", tmp("cases"));
    outcome o = cli("gen", "--suite", "quick", "--seed", "7", cases, NULL);
    ck_assert_msg(o.code == 0, "gen: exit %d: %s", o.code, o.err);
    outcome_free(&o);
    answer_with_oracle(cases);
    o = cli("check", cases, "--json", tmp("c.json"), "--junit", tmp("c.xml"), NULL);
    ck_assert_msg(o.code == 0, "the oracle's outputs: exit %d: %s%s", o.code, o.out, o.err);
    json_object *r = load_report(tmp("c.json"));
    ck_assert_int_eq(summary(r, "failed"), 0);
    ck_assert_int_ge(summary(r, "passed"), 50);
    json_object_put(r);
    outcome_free(&o);
    /* One element of one O moved by 1e-3 relative: that case fails, and only it. The two
     * cases changed here stand for a kernel's own writer, which leaves no set marker
     * (SPEC 7.2; with the marker of the oracle's set they would fail as not whole). */
    char opath[700];
    snprintf(opath, sizeof opath, "%s/causal-lower_right_s5_t16/.smattn-set", cases);
    ck_assert_int_eq(unlink(opath), 0);
    snprintf(opath, sizeof opath, "%s/shapes-s1_t1_d1/.smattn-set", cases);
    ck_assert_int_eq(unlink(opath), 0);
    snprintf(opath, sizeof opath, "%s/causal-lower_right_s5_t16/o.npy", cases);
    smattn_npy a;
    char err[300];
    ck_assert_int_eq(smattn_npy_read(opath, &a, err, sizeof err), 0);
    ck_assert_int_eq(a.type, SMATTN_NPY_F32);
    ((float *)a.data)[5] *= 1.001f;
    ck_assert_int_eq(smattn_npy_write(opath, a.type, a.rank, a.shape, a.data, err, sizeof err), 0);
    smattn_npy_free(&a);
    /* Another case's o.npy removed: a failure that says so. */
    snprintf(opath, sizeof opath, "%s/shapes-s1_t1_d1/o.npy", cases);
    ck_assert_int_eq(unlink(opath), 0);
    o = cli("check", cases, "--json", tmp("c.json"), NULL);
    ck_assert_int_eq(o.code, 1);
    r = load_report(tmp("c.json"));
    ck_assert_int_eq(summary(r, "failed"), 2);
    json_object *c = find_case(r, "causal/lower_right_s5_t16");
    ck_assert_str_eq(field(c, "status"), "fail");
    ck_assert_ptr_nonnull(strstr(field(c, "reason"), "error/bound ratio"));
    c = find_case(r, "shapes/s1_t1_d1");
    ck_assert_ptr_nonnull(strstr(field(c, "reason"), "o.npy missing"));
    json_object_put(r);
    outcome_free(&o);
    /* A single case directory works too. */
    snprintf(opath, sizeof opath, "%s/causal-lower_right_s16_t16", cases);
    o = cli("check", opath, NULL);
    ck_assert_msg(o.code == 0, "one case: exit %d: %s", o.code, o.out);
    outcome_free(&o);
}
END_TEST

Suite *conform_suite(void);
Suite *conform_suite(void)
{
    Suite *s = suite_create("conform");
    TCase *tc = tcase_create("conform");
    tcase_set_timeout(tc, 300);
    tcase_add_checked_fixture(tc, setup, teardown);
    tcase_add_test(tc, loader_errors);
    tcase_add_test(tc, isolation_crash);
    tcase_add_test(tc, isolation_hang);
    tcase_add_test(tc, isolation_out_of_bounds_write);
    tcase_add_test(tc, isolation_status);
    tcase_add_test(tc, good_plugin_conforms);
    tcase_add_test(tc, dtype_cases);
    tcase_add_test(tc, reports_well_formed);
    tcase_add_test(tc, baseline_gate);
    tcase_add_test(tc, gen_check_round_trip);
    suite_add_tcase(s, tc);
    return s;
}
