/* SPDX-License-Identifier: MIT */
/* test_reasons.c: the one-sentence reason of `smattn conform` (conform/judge.c) is right:
 * for every sentence the judge can give, a plugin with that bug gets it on the case aimed
 * at the bug, and a plugin with a look-alike bug does not (tests/fixtures/reason_fixture.c,
 * one .so per bug, mk/conform.mk). Each run is `--only` one case or two: about 0.1 s. */
#include <check.h>
#include <json.h>
#include <libgen.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "tests/support/fs.h"

/* One expectation: the fixture `mode` run on the cases starting with `only`; case `name`
 * has `status`, its reason contains `want` (if not NULL) and not `never` (if not NULL). */
typedef struct expect {
    const char *mode, *only, *name, *status, *want, *never;
} expect;

static const expect table[] = {
    /* empty row: only when the row is empty and its inputs are clean */
    {"empty_nan", "empty_rows/clean_mask", "empty_rows/clean_mask_rows_false", "fail",
     "empty row (no visible key, no sink): O[b=0,i=1,h=0,c=0] expected +0", NULL},
    {"empty_leak", "empty_rows/mask_rows_false", "empty_rows/mask_rows_false", "fail", "leak in?",
     "expected +0 (zero convention)"},
    {"empty_leak", "empty_rows/clean_mask", "empty_rows/clean_mask_rows_false", "pass", NULL, NULL},
    /* a masked key with weight; a visible key with none is not that */
    {"zero_mask", "causal/lower_right_s16_t16", "causal/lower_right_s16_t16", "fail",
     "masked key got weight: P[b=0,h=0,i=0,j=1]", NULL},
    {"diag_hidden", "causal/lower_right_s16_t16", "causal/lower_right_s16_t16", "fail", NULL,
     "masked key"},
    /* the other alignment, only when it fits without reading garbage */
    {"upper_left", "causal/lower_right_s5_t16", "causal/lower_right_s5_t16", "fail",
     "causal alignment: O follows upper_left, but lower_right is claimed", NULL},
    {"v_leak", "causal/upper_left_s5_t16", "causal/upper_left_s5_t16", "fail", "leak in?",
     "causal alignment"},
    /* off by one, not two */
    {"plus1", "causal/lower_right_s16_t16", "causal/lower_right_s16_t16", "fail",
     "causal alignment off by one", NULL},
    {"plus2", "causal/lower_right_s16_t16", "causal/lower_right_s16_t16", "fail", NULL,
     "off by one"},
    /* a NaN where the spec has a number: a leak hint only with garbage in the case */
    {"v_leak", "garbage/kv_cache", "garbage/kv_cache_slots", "fail",
     "NaN at O[b=0,i=0,h=0,c=0] where the spec has a finite value", "empty row"},
    {"nan_out", "shapes/s3_t7", "shapes/s3_t7_d3", "fail",
     "NaN at O[b=0,i=0,h=0,c=0] where the spec has a finite value", "leak"},
    /* infinity against a large error */
    {"inf_out", "shapes/s3_t7", "shapes/s3_t7_d3", "fail", "infinity at O[b=0,i=0,h=0,c=0]",
     "error/bound"},
    {"big_out", "shapes/s3_t7", "shapes/s3_t7_d3", "fail", "error/bound ratio", "infinity"},
    {"scale_err", "shapes/s3_t7", "shapes/s3_t7_d3", "fail", "error/bound ratio", NULL},
    /* SPEC 4.2: a visible -inf score is not a masked key */
    {"ninf_masked", "nonfinite/k_neg_inf", "nonfinite/k_neg_inf", "fail",
     "where the spec has NaN (SPEC 4.2)", NULL},
    {"ninf_masked", "nonfinite/tile", "nonfinite/tile_s128_t130_k_neg_inf_v_nan", "fail",
     "where the spec has NaN (SPEC 4.2)", NULL},
    {"good", "nonfinite/tile", "nonfinite/tile_s128_t130_k_neg_inf_v_nan", "pass", NULL, NULL},
    {"v_inf_row_nan", "nonfinite/v_pos_inf", "nonfinite/v_pos_inf", "fail",
     "where the spec has a finite value", "SPEC 4.2"},
    /* the run itself: an element never written, a declined case, an error status */
    {"unwritten", "shapes/s3_t7", "shapes/s3_t7_d3", "fail", "O element 0 was never written", NULL},
    {"nan_out", "shapes/s3_t7", "shapes/s3_t7_d3", "fail", NULL, "never written"},
    {"decline", "shapes/s3_t7", "shapes/s3_t7_d3", "skip", "declined it", NULL},
    {"status", "shapes/s3_t7", "shapes/s3_t7_d3", "fail", "returned status 17", "declined"},
    /* the precision model */
    {"bad_model", "shapes/s3_t7", "shapes/s3_t7_d3", "fail", "precision model is out of range",
     NULL},
    {"loose_model", "shapes/s3_t7", "shapes/s3_t7_d3", "pass", NULL, NULL},
    /* a conversion that changes the case is a skip with its reason, not a different case */
    {"kv_f16", "extreme/large_v", "extreme/large_v", "skip", "V holds", NULL},
    {"kv_f16", "extreme/flat_tiny", "extreme/flat_tiny_values", "skip", "flushes to zero", NULL},
    {"kv_f16", "dtype/kv_f16", "dtype/kv_f16", "pass", NULL, NULL},
    /* rows with a sink far above the keys: out of contract (counted) unless the sink is in
     * the running max and the kernel says so (SMATTN_CAP_SINK_IN_MAX) */
    {"good", "sinks/large", "sinks/large_sink_decode", "pass", "4 rows out of contract", NULL},
    {"sink_max", "sinks/large", "sinks/large_sink_decode", "pass", NULL, "out of contract"},
    /* a bug on the paths real kernels take at S >= 64 or T >= 512 only */
    {"big_leak", "tiled/causal_ul_s64", "tiled/causal_ul_s64_t65_d16_dv16", "fail", "leak in?",
     NULL},
    {"big_leak", "tiled/kv_lens_s64", "tiled/kv_lens_s64_t65_d16_dv16", "fail", "leak in?", NULL},
    {"big_leak", "tiled/masked_key", "tiled/masked_key_nan_v_64_rows", "fail", "leak in?", NULL},
    {"big_leak", "long/decode_t512", "long/decode_t512_kv512_257", "fail", "leak in?", NULL},
    {"big_leak", "long/decode_t600", "long/decode_t600_window_sinks_bias", "fail", "leak in?",
     NULL},
    {"big_leak", "garbage/kv_cache", "garbage/kv_cache_slots", "pass", NULL, NULL},
    /* value regimes: subnormal weights flushed; the ends of binary16 kept within range */
    {"ftz", "regimes/exp_underflow", "regimes/exp_underflow_weights", "fail", "error/bound ratio",
     NULL},
    {"good", "regimes/exp_underflow", "regimes/exp_underflow_weights", "pass", NULL, NULL},
    {"kv_f16", "regimes/kv_f16", "regimes/kv_f16_range_ends", "pass", NULL, NULL},
    /* garbage cycles NaN, +inf, -inf in the bias too: a max by fmax over hidden keys skips
     * a NaN but not a +inf */
    {"fmax_all", "tiled/causal_lr_s64", "tiled/causal_lr_s64_t65_d16_dv16", "fail", NULL, NULL},
    {"good", "tiled/causal_lr_s64", "tiled/causal_lr_s64_t65_d16_dv16", "pass", NULL, NULL},
    /* fuzzer finds (conform/regressions): scores that overflow from finite inputs */
    {"good", "regressions/attention", "regressions/attention_qk_overflow_inf_v", "pass", NULL,
     NULL},
    {"good", "regressions/softmax", "regressions/softmax_scaled_x_overflow", "skip", "softmax op",
     NULL},
};
#define NTABLE (int)(sizeof table / sizeof table[0])

static char tmp[64];

static void setup(void)
{
    snprintf(tmp, sizeof tmp, "/tmp/smattn_reasons_XXXXXX");
    ck_assert_ptr_nonnull(mkdtemp(tmp));
}

static void teardown(void)
{
    char p[128];
    snprintf(p, sizeof p, "%s/r.json", tmp);
    unlink(p);
    rmdir(tmp);
}

static const char *str_of(json_object *o, const char *key)
{
    json_object *v;
    return json_object_object_get_ex(o, key, &v) ? json_object_get_string(v) : "";
}

START_TEST(reason_is_right)
{
    const expect *x = &table[_i];
    const char *cli = getenv("SMATTN_CLI");
    ck_assert_msg(cli != NULL, "SMATTN_CLI is not set");
    char dir[1024], so[1200], json[128];
    snprintf(dir, sizeof dir, "%s", cli);
    snprintf(so, sizeof so, "%s/tests/fixtures/reason_%s.so", dirname(dir), x->mode);
    ck_assert_msg(access(so, R_OK) == 0, "%s is missing (make tests builds it)", so);
    snprintf(json, sizeof json, "%s/r.json", tmp);
    unlink(json);
    const char *argv[] = {cli, "conform", "--kernel", so, "--only", x->only, "--json", json, NULL};
    pid_t pid = fork();
    ck_assert_int_ge(pid, 0);
    if (pid == 0) {
        if (!freopen("/dev/null", "w", stdout) || !freopen("/dev/null", "w", stderr))
            _exit(127);
        execv(argv[0], (char *const *)(uintptr_t)argv);
        _exit(127);
    }
    int ws;
    ck_assert_int_eq(waitpid(pid, &ws, 0), pid);
    json_object *r = json_object_from_file(json), *cases, *c = NULL;
    ck_assert_msg(r != NULL, "%s: no report", x->mode);
    ck_assert(json_object_object_get_ex(r, "cases", &cases));
    for (size_t k = 0; k < json_object_array_length(cases); k++)
        if (!strcmp(str_of(json_object_array_get_idx(cases, k), "name"), x->name))
            c = json_object_array_get_idx(cases, k);
    ck_assert_msg(c != NULL, "%s: no case %s", x->mode, x->name);
    const char *reason = str_of(c, "reason");
    ck_assert_msg(!strcmp(str_of(c, "status"), x->status), "%s on %s: %s, not %s (%s)", x->mode,
                  x->name, str_of(c, "status"), x->status, reason);
    ck_assert_msg(!x->want || strstr(reason, x->want), "%s on %s: reason '%s' lacks '%s'", x->mode,
                  x->name, reason, x->want);
    ck_assert_msg(!x->never || !strstr(reason, x->never), "%s on %s: reason '%s' has '%s'", x->mode,
                  x->name, reason, x->never);
    json_object_put(r);
}
END_TEST

/* The quick suite holds at least one case of every class issue 14 added (and the built-in
 * kernel passes them): a kernel whose only bug sits on a tiled or split path must not pass
 * quick. */
START_TEST(quick_has_every_class)
{
    const char *cli = getenv("SMATTN_CLI");
    ck_assert_msg(cli != NULL, "SMATTN_CLI is not set");
    char json[128];
    snprintf(json, sizeof json, "%s/r.json", tmp);
    const char *argv[] = {cli, "conform", "--suite", "quick", "--json", json, NULL};
    pid_t pid = fork();
    ck_assert_int_ge(pid, 0);
    if (pid == 0) {
        if (!freopen("/dev/null", "w", stdout) || !freopen("/dev/null", "w", stderr))
            _exit(127);
        execv(argv[0], (char *const *)(uintptr_t)argv);
        _exit(127);
    }
    int ws;
    ck_assert_int_eq(waitpid(pid, &ws, 0), pid);
    ck_assert_msg(WIFEXITED(ws) && WEXITSTATUS(ws) == 0, "built-in kernel: not conforming");
    json_object *r = json_object_from_file(json), *cats, *cat, *v;
    ck_assert_ptr_nonnull(r);
    ck_assert(json_object_object_get_ex(r, "categories", &cats));
    static const char *const need[] = {"regressions", "tiled",      "long",    "nonfinite",
                                       "regimes",     "empty_rows", "garbage", "dtype"};
    for (size_t k = 0; k < sizeof need / sizeof need[0]; k++) {
        ck_assert_msg(json_object_object_get_ex(cats, need[k], &cat), "no category %s", need[k]);
        ck_assert(json_object_object_get_ex(cat, "passed", &v));
        ck_assert_msg(json_object_get_int64(v) >= 1, "category %s: nothing passed", need[k]);
    }
    json_object_put(r);
}
END_TEST

/* gen --dtype f16 does not write a case the conversion would change: it lists it under
 * "skipped" in manifest.json with the reason. */
START_TEST(gen_lists_dtype_skips)
{
    const char *cli = getenv("SMATTN_CLI");
    ck_assert_msg(cli != NULL, "SMATTN_CLI is not set");
    char out[128], man[160];
    snprintf(out, sizeof out, "%s/gen", tmp);
    snprintf(man, sizeof man, "%s/manifest.json", out);
    const char *argv[] = {cli, "gen", "--suite", "quick", "--dtype", "f16", out, NULL};
    pid_t pid = fork();
    ck_assert_int_ge(pid, 0);
    if (pid == 0) {
        if (!freopen("/dev/null", "w", stdout) || !freopen("/dev/null", "w", stderr))
            _exit(127);
        execv(argv[0], (char *const *)(uintptr_t)argv);
        _exit(127);
    }
    int ws;
    ck_assert_int_eq(waitpid(pid, &ws, 0), pid);
    ck_assert_msg(WIFEXITED(ws) && WEXITSTATUS(ws) == 0, "gen failed");
    json_object *r = json_object_from_file(man), *sk;
    ck_assert_ptr_nonnull(r);
    ck_assert_msg(json_object_object_get_ex(r, "skipped", &sk), "manifest has no 'skipped'");
    int found = 0;
    for (size_t k = 0; k < json_object_array_length(sk); k++) {
        json_object *e = json_object_array_get_idx(sk, k);
        found |= !strcmp(str_of(e, "name"), "extreme/large_v") &&
                 strstr(str_of(e, "reason"), "overflows in f16") != NULL;
    }
    ck_assert_msg(found, "extreme/large_v not listed as skipped for f16");
    char dir[200];
    snprintf(dir, sizeof dir, "%s/extreme-large_v", out);
    ck_assert_msg(access(dir, F_OK) != 0, "%s was written", dir);
    json_object_put(r);
    test_rm_tree(out);
}
END_TEST

Suite *reasons_suite(void);
Suite *reasons_suite(void)
{
    Suite *s = suite_create("reasons");
    TCase *tc = tcase_create("reasons");
    tcase_set_timeout(tc, 120);
    tcase_add_checked_fixture(tc, setup, teardown);
    tcase_add_loop_test(tc, reason_is_right, 0, NTABLE);
    tcase_add_test(tc, quick_has_every_class);
    tcase_add_test(tc, gen_lists_dtype_skips);
    suite_add_tcase(s, tc);
    return s;
}
