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

#include "io/case.h"
#include "io/npy.h"
#include "smattn.h"
#include "tests/support/cli_run.h"
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
    {"empty_leak", "empty_rows/mask_rows_false", "empty_rows/mask_rows_false", "fail", "leak in?",
     "sink of head"},
    /* a -inf sink taken as a term: exp(-inf - (-inf)), no slot read, so no leak named */
    {"sink_ninf", "sinks/with_empty_rows", "sinks/with_empty_rows", "fail",
     "the sink of head 1 is -inf, which adds no term", "leak"},
    {"sink_ninf", "sinks/dominant", "sinks/dominant", "pass", NULL, NULL},
    {"empty_nan", "empty_rows/clean_mask", "empty_rows/clean_mask_rows_false", "fail",
     "(zero convention), got NaN", "sink of head"},
    /* scale 0 times x = -inf is NaN, which is not weight given to the hidden key */
    {"scale0_nan", "softmax/scale0", "softmax/scale0_neg_inf_entries", "fail",
     "the scale 0 times x = -inf is NaN, but an x of -inf hides its key", "got weight"},
    {"scale0_zero", "softmax/scale0", "softmax/scale0_neg_inf_entries", "fail",
     "masked key got weight: P[b=0,h=0,i=0,j=1] = 0.142857", "scale 0"},
    {"scale0_nan", "softmax/plain", "softmax/plain", "pass", NULL, NULL},
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
    /* S > T: the rows lower-right leaves empty see keys under upper-left, whose slots this
     * case fills with NaN (hidden there): a read of them, not an alignment (test_judge.c
     * names the alignment on clean inputs) */
    {"upper_left", "causal/lower_right_s16_t5", "causal/lower_right_s16_t5", "fail", "leak in?",
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
    {"scale_err", "shapes/s3_t7", "shapes/s3_t7_d3", "fail", "error/bound ratio",
     "O follows scale"},
    /* another scale, when it fits exactly: left out on one head dim, applied twice */
    {"scale_drop", "head_dim/prefill_causal_d128", "head_dim/prefill_causal_d128", "fail",
     "scale: O follows scale 1 (the scale left out), not the problem's 0.0883883476", NULL},
    {"scale_drop", "head_dim/prefill_causal_d64", "head_dim/prefill_causal_d64", "pass", NULL,
     NULL},
    {"scale_sq", "shapes/s3_t7", "shapes/s3_t7_d3", "fail", "(the scale applied twice", NULL},
    {"mutant:scale_d128", "head_dim/decode_gqa_d256", "head_dim/decode_gqa_d256", "fail",
     "O follows scale 1 (the scale left out)", NULL},
    /* SPEC 4.2: a visible -inf score is not a masked key */
    {"ninf_masked", "nonfinite/k_neg_inf", "nonfinite/k_neg_inf", "fail",
     "where the spec has NaN (SPEC 4.2)", NULL},
    {"ninf_masked", "nonfinite/tile", "nonfinite/tile_s128_t130_k_neg_inf_v_nan", "fail",
     "where the spec has NaN (SPEC 4.2)", NULL},
    {"good", "nonfinite/tile", "nonfinite/tile_s128_t130_k_neg_inf_v_nan", "pass", NULL, NULL},
    {"v_inf_row_nan", "nonfinite/v_pos_inf", "nonfinite/v_pos_inf", "fail",
     "where the spec has a finite value", "SPEC 4.2"},
    /* NaN where the spec has +inf, said so (not "ratio inf ... exact inf, bound inf") */
    {"inf_col_nan", "nonfinite/v_pos_inf", "nonfinite/v_pos_inf", "fail",
     "NaN at O[b=0,i=0,h=0,c=6] where the spec has +inf (SPEC 4.2)", "bound"},
    /* ... in a row out of contract: what is judged there, and why */
    {"inf_col_nan", "regressions/attention", "regressions/attention_qk_overflow_inf_v", "fail",
     "(this row is out of contract, SPEC 6.8: its elements with bound +inf are held only to "
     "what any kernel can meet, but an exact infinity or NaN is judged by class",
     "not judged"},
    /* a NaN of V leaking into rows that cannot see its key, in a case with an infinite K */
    {"v_leak", "nonfinite/tile", "nonfinite/tile_s128_t130_k_neg_inf_v_nan", "fail",
     "NaN at O[b=0,i=0,h=0,c=3] where the spec has a finite value (0.329383958); slots this "
     "row must not read hold NaN/inf: did a masked or padded position leak in?",
     NULL},
    /* only the LSE wrong on a causal S = T case: no alignment is blamed */
    {"lse_off", "causal/lower_right_s16_t16", "causal/lower_right_s16_t16", "fail",
     "error/bound ratio", "causal alignment"},
    /* rows out of contract still hold O in the hull of V (SPEC 6.8): a sink taken against
     * the keys' max overflows to inf * 0 = NaN */
    {"mutant:sink_overflow", "sinks/large", "sinks/large_sink_decode", "fail",
     "O[b=0,i=0,h=0,c=0] = NaN in a row out of contract (SPEC 6.8", "leak"},
    /* scores far below 0 behind a fully masked tile: a running max restarted at 0 */
    {"mutant:max_restart_zero", "regimes/masked_tiles_mask_prefill_below110",
     "regimes/masked_tiles_mask_prefill_below110", "fail",
     "peak at -108.1, where exp(s) underflows in the kernel's format", NULL},
    {"mutant:max_restart_zero", "regimes/masked_tiles_window_kv_lens_decode_below1000",
     "regimes/masked_tiles_window_kv_lens_decode_below1000", "fail", "restarts at 0", NULL},
    {"v_leak", "regimes/masked_tiles_mask_prefill_above1000",
     "regimes/masked_tiles_mask_prefill_above1000", "fail", "leak in?", "restarts at 0"},
    {"good", "regimes/masked_tiles", "regimes/masked_tiles_causal_prefill_below110", "pass", NULL,
     NULL},
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
    test_rm_tree(tmp);
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
    if (!strncmp(x->mode, "mutant:", 7)) /* a planted bug of tests/mutants */
        snprintf(so, sizeof so, "%s/mutants/%s.so", dirname(dir), x->mode + 7);
    else
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

/* The quick suite holds at least one case of every class of the sizes categories (and the built-in
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

/* The categories a report says went untested (JSON "untested_categories"), as one string. */
static void untested_of(json_object *r, char *buf, size_t cap)
{
    json_object *u;
    buf[0] = '\0';
    ck_assert_msg(json_object_object_get_ex(r, "untested_categories", &u), "no untested_categories");
    size_t len = 0;
    for (size_t k = 0; k < json_object_array_length(u) && len < cap; k++)
        len += (size_t)snprintf(buf + len, cap - len, ",%s,",
                                json_object_get_string(json_object_array_get_idx(u, k)));
}

/* A kernel claiming only causal lower-right and GQA (no LSE, no P) runs cases of the tiled,
 * long, regimes and head_dim categories, and every report says which whole categories went
 * untested: the verdict line, JSON, JUnit and HTML. */
START_TEST(partial_kernel_told_what_went_untested)
{
    char json[128], xml[128], html[128];
    snprintf(json, sizeof json, "%s/r.json", tmp);
    snprintf(xml, sizeof xml, "%s/r.xml", tmp);
    snprintf(html, sizeof html, "%s/r.html", tmp);
    const char *args[] = {"conform", "--kernel", test_built("tests/fixtures/reason_narrow.so"),
                          "--json", json, "--junit", xml, "--html", html, NULL};
    test_outcome o = test_cli_run(tmp, args);
    ck_assert_msg(o.code == 0, "narrow kernel: exit %d: %s", o.code, o.out);
    ck_assert_msg(strstr(o.out, "verdict: CONFORMING (") && strstr(o.out, "; untested categories: "),
                  "the verdict does not name the untested categories:\n%s", o.out);
    json_object *r = json_object_from_file(json), *cats, *cat, *v;
    ck_assert_ptr_nonnull(r);
    char gaps[2048];
    untested_of(r, gaps, sizeof gaps);
    static const char *const gone[] = {"padding", "bias", "sinks", "window", "softmax"};
    for (size_t k = 0; k < sizeof gone / sizeof gone[0]; k++) {
        char w[40];
        snprintf(w, sizeof w, ",%s,", gone[k]);
        ck_assert_msg(strstr(gaps, w), "%s not listed as untested: %s", gone[k], gaps);
    }
    ck_assert(json_object_object_get_ex(r, "categories", &cats));
    static const char *const ran[] = {"tiled", "long", "regimes", "head_dim", "empty_rows",
                                      "causal", "gqa", "prefill"};
    for (size_t k = 0; k < sizeof ran / sizeof ran[0]; k++) {
        ck_assert_msg(json_object_object_get_ex(cats, ran[k], &cat), "no category %s", ran[k]);
        ck_assert(json_object_object_get_ex(cat, "passed", &v));
        ck_assert_msg(json_object_get_int64(v) >= 1, "narrow kernel: nothing of %s ran", ran[k]);
    }
    json_object_put(r);
    char *x = test_slurp(xml), *h = test_slurp(html);
    ck_assert_msg(strstr(x, "<property name=\"untested_categories\" value=\""), "JUnit: none");
    ck_assert_msg(strstr(h, "untested categories</b>"), "HTML: none");
    free(x), free(h);
    unlink(xml), unlink(html);
    test_outcome_free(&o);
}
END_TEST

/* No category hangs on one optional feature: in quick and full, every category but bias
 * and sinks has at least half of its cases (and at least one) free of both (LSE and P are
 * never needed: a kernel is asked for what it claims; but split, which merges by the LSE). Quick covers the head dims kernels
 * specialise on, in prefill (S > 1) and decode (S = 1). The kernel declines every case, so
 * the JSON lists the battery's features and shapes without running the oracle. */
START_TEST(no_category_hangs_on_one_feature)
{
    char json[128];
    snprintf(json, sizeof json, "%s/r.json", tmp);
    for (int full = 0; full < 2; full++) {
        const char *args[] = {"conform", "--suite", full ? "full" : "quick", "--kernel",
                              test_built("tests/fixtures/reason_decline_all.so"), "--json", json,
                              NULL};
        test_outcome o = test_cli_run(tmp, args);
        test_outcome_free(&o);
        json_object *r = json_object_from_file(json), *cases;
        ck_assert_ptr_nonnull(r);
        ck_assert(json_object_object_get_ex(r, "cases", &cases));
        struct {
            char name[32];
            int n, plain;
        } cat[64];
        int nc = 0, dims[4][2] = {{0}};
        static const int64_t want_d[4] = {64, 128, 256, 80};
        for (size_t k = 0; k < json_object_array_length(cases); k++) {
            json_object *c = json_object_array_get_idx(cases, k), *f, *sh, *d, *sv;
            const char *name = str_of(c, "category");
            int i = 0;
            while (i < nc && strcmp(cat[i].name, name))
                i++;
            if (i == nc) {
                ck_assert_int_lt(nc, 64);
                snprintf(cat[nc].name, sizeof cat[nc].name, "%s", name);
                cat[nc].n = cat[nc].plain = 0;
                nc++;
            }
            ck_assert(json_object_object_get_ex(c, "features", &f));
            int optional = 0;
            for (size_t e = 0; e < json_object_array_length(f); e++) {
                const char *feat = json_object_get_string(json_object_array_get_idx(f, e));
                optional |= !strcmp(feat, "bias") || !strcmp(feat, "sinks") ||
                            !strcmp(feat, "lse") || !strcmp(feat, "p");
            }
            cat[i].n++;
            cat[i].plain += !optional;
            ck_assert(json_object_object_get_ex(c, "shape", &sh));
            ck_assert(json_object_object_get_ex(sh, "D", &d));
            ck_assert(json_object_object_get_ex(sh, "S", &sv));
            for (int w = 0; w < 4; w++)
                if (json_object_get_int64(d) == want_d[w])
                    dims[w][json_object_get_int64(sv) == 1]++;
        }
        for (int i = 0; i < nc; i++) {
            /* bias and sinks are their features; split merges its parts by their LSE, so
             * every split case needs it (SPEC 9.6) */
            if (!strcmp(cat[i].name, "bias") || !strcmp(cat[i].name, "sinks") ||
                !strcmp(cat[i].name, "split"))
                continue;
            ck_assert_msg(cat[i].plain >= 1 && 2 * cat[i].plain >= cat[i].n,
                          "%s: category %s has %d of %d cases without bias and sinks",
                          full ? "full" : "quick", cat[i].name, cat[i].plain, cat[i].n);
        }
        for (int w = 0; !full && w < 4; w++)
            ck_assert_msg(dims[w][0] >= 1 && dims[w][1] >= 1,
                          "quick: D = %lld in %d prefill and %d decode cases", (long long)want_d[w],
                          dims[w][0], dims[w][1]);
        json_object_put(r);
    }
}
END_TEST

/* `smattn check` on a softmax case whose only non-finite inputs are the x = -inf that make a
 * row empty: a NaN in that row is the empty-row convention broken, not a leak (the -inf
 * entries are the mask, not garbage). */
START_TEST(check_softmax_empty_row_is_no_leak)
{
    char out[128], dir[200], json[160];
    snprintf(out, sizeof out, "%s/gen", tmp);
    snprintf(json, sizeof json, "%s/c.json", tmp);
    const char *gen[] = {"gen", "--suite", "quick", out, NULL};
    test_outcome o = test_cli_run(tmp, gen);
    ck_assert_msg(o.code == 0, "gen: exit %d: %s", o.code, o.err);
    test_outcome_free(&o);
    snprintf(dir, sizeof dir, "%s/softmax-neg_inf_entries", out);
    smattn_case c;
    char err[300];
    ck_assert_msg(smattn_case_load(dir, &c, err, sizeof err) == 0, "%s", err);
    smattn_outputs res;
    ck_assert_int_eq(smattn_case_outputs_alloc(&c, SMATTN_F32, SMATTN_CASE_OUT_P, &res, err,
                                               sizeof err),
                     SMATTN_OK);
    smattn_ref_config cfg = {1, 0, 0, 0};
    ck_assert_int_eq(smattn_ref(&c.prob, &c.in, &res, &cfg, NULL), SMATTN_OK);
    for (int64_t j = 0; j < c.prob.T; j++) /* row 1: every x is -inf, an empty row */
        ((float *)res.p.data)[c.prob.T + j] = NAN;
    ck_assert_int_eq(smattn_case_write_outputs(&c, &res, dir, err, sizeof err), 0);
    smattn_case_outputs_free(&res);
    smattn_case_free(&c);
    const char *chk[] = {"check", dir, "--json", json, NULL};
    o = test_cli_run(tmp, chk);
    ck_assert_int_eq(o.code, 1);
    test_outcome_free(&o);
    json_object *r = json_object_from_file(json), *cases;
    ck_assert_ptr_nonnull(r);
    ck_assert(json_object_object_get_ex(r, "cases", &cases));
    const char *reason = str_of(json_object_array_get_idx(cases, 0), "reason");
    ck_assert_msg(strstr(reason, "empty row (no visible key, no sink): P[b=0,h=0,i=1,j=0] "
                                 "expected +0") && !strstr(reason, "leak"),
                  "reason: %s", reason);
    json_object_put(r);
    unlink(json);
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
    tcase_add_test(tc, partial_kernel_told_what_went_untested);
    tcase_add_test(tc, no_category_hangs_on_one_feature);
    tcase_add_test(tc, check_softmax_empty_row_is_no_leak);
    suite_add_tcase(s, tc);
    return s;
}
