/* SPDX-License-Identifier: MIT */
/* test_merge_cli.c: `smattn ref` and `smattn opt` on merge case directories (SPEC 7.1, 9):
 * the files the tool writes hold the library's bits, in both rank conventions, and bad merge
 * cases exit 2 with one line naming the problem. */
#include <check.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "io/npy.h"
#include "smattn.h"
#include "tests/support/cli_run.h"
#include "tests/support/fs.h"
#include "tests/support/testkit.h"

static char tmp[128];

static void setup(void)
{
    ck_assert_int_eq(test_mkdtemp(tmp, sizeof tmp, "merge_cli"), 0);
}

static void teardown(void)
{
    test_rm_tree(tmp);
}

static void write_text(const char *path, const char *text)
{
    FILE *f = fopen(path, "w");
    ck_assert_ptr_nonnull(f);
    fputs(text, f);
    fclose(f);
}

/* A merge case in dir: N=3 partials of B=2, S=3, Hq=2, Dv=4 (rank 5 o_parts) or without B
 * (rank 4), binary32, one partial empty in one row. */
typedef struct mc {
    int64_t N, B, S, Hq, Dv;
    float o[3 * 2 * 3 * 2 * 4], l[3 * 2 * 2 * 3];
} mc;

static void make_case(mc *m, const char *dir, int with_b, const char *json)
{
    m->N = 3, m->B = with_b ? 2 : 1, m->S = 3, m->Hq = 2, m->Dv = 4;
    rng r = {0x6d636c69ull};
    int64_t no = m->N * m->B * m->S * m->Hq * m->Dv, nl = m->N * m->B * m->Hq * m->S;
    for (int64_t e = 0; e < no; e++)
        m->o[e] = (float)rng_gauss(&r);
    for (int64_t e = 0; e < nl; e++)
        m->l[e] = (float)(rng_gauss(&r) * 3);
    m->l[1] = -HUGE_VALF;
    char err[256];
    int64_t so[5] = {m->N, m->B, m->S, m->Hq, m->Dv}, sl[4] = {m->N, m->B, m->Hq, m->S};
    int64_t so4[4] = {m->N, m->S, m->Hq, m->Dv}, sl3[3] = {m->N, m->Hq, m->S};
    ck_assert_int_eq(smattn_npy_write(test_path(dir, "o_parts.npy"), SMATTN_NPY_F32, with_b ? 5 : 4,
                                      with_b ? so : so4, m->o, err, sizeof err), 0);
    ck_assert_int_eq(smattn_npy_write(test_path(dir, "lse_parts.npy"), SMATTN_NPY_F32, with_b ? 4 : 3,
                                      with_b ? sl : sl3, m->l, err, sizeof err), 0);
    if (json)
        write_text(test_path(dir, "case.json"), json);
}

/* The library's merge of the case, in dtype t. */
static void library(const mc *m, smattn_merge_problem p, int kernel, smattn_dtype t, void *o,
                    void *l)
{
    p.N = m->N, p.B = m->B, p.S = m->S, p.Hq = m->Hq, p.Dv = m->Dv;
    smattn_merge_inputs in = {{m->o, SMATTN_F32, {m->S * m->Hq * m->Dv, m->Hq * m->Dv, m->Dv, 1}},
                              m->B * m->S * m->Hq * m->Dv,
                              {m->l, SMATTN_F32, {m->Hq * m->S, m->S, 1, 0}},
                              m->B * m->Hq * m->S};
    smattn_outputs out = {{o, t, {m->S * m->Hq * m->Dv, m->Hq * m->Dv, m->Dv, 1}},
                          {l, t, {m->Hq * m->S, m->S, 1, 0}},
                          {NULL, t, {0}}};
    smattn_status st = kernel ? smattn_merge(&p, &in, &out, NULL) : smattn_ref_merge(&p, &in, &out, NULL);
    ck_assert_int_eq(st, SMATTN_OK);
}

/* OUT/name holds `bytes` bytes equal to want, with the expected rank */
static void expect_file(const char *out, const char *name, int rank, const void *want, size_t bytes)
{
    smattn_npy a;
    char err[256];
    ck_assert_msg(smattn_npy_read(test_path(out, name), &a, err, sizeof err) == 0, "%s: %s", name, err);
    ck_assert_int_eq(a.rank, rank);
    ck_assert_uint_eq((size_t)a.count * a.itemsize, bytes);
    ck_assert_msg(memcmp(a.data, want, bytes) == 0, "%s differs from the library's bits", name);
    smattn_npy_free(&a);
}

START_TEST(test_ref_and_opt)
{
    for (int with_b = 0; with_b < 2; with_b++)
        for (int base2 = 0; base2 < 2; base2++) {
            char cdir[256], out[256];
            snprintf(cdir, sizeof cdir, "%s/case%d%d", tmp, with_b, base2);
            snprintf(out, sizeof out, "%s/out%d%d", tmp, with_b, base2);
            char mk[300];
            snprintf(mk, sizeof mk, "mkdir -p %s", cdir);
            ck_assert_int_eq(system(mk), 0);
            mc m;
            make_case(&m, cdir, with_b,
                      base2 ? "{\"lse_base\": \"2\", \"empty_parts\": \"pos_inf\", \"empty_lse\": \"zero\"}"
                            : NULL);
            smattn_merge_problem p = smattn_merge_problem_default();
            if (base2)
                p.lse_base = SMATTN_LSE_BASE_2, p.empty_parts = SMATTN_LSE_POS_INF,
                p.empty_lse = SMATTN_LSE_ZERO;
            double o64[2 * 3 * 2 * 4], l64[2 * 2 * 3];
            float o32[2 * 3 * 2 * 4], l32[2 * 2 * 3];
            size_t no = (size_t)(m.B * m.S * m.Hq * m.Dv), nl = (size_t)(m.B * m.Hq * m.S);
            test_outcome r = test_cli_run(tmp, (const char *[]){"ref", cdir, out, NULL});
            ck_assert_msg(r.code == 0, "ref: exit %d: %s", r.code, r.err);
            test_outcome_free(&r);
            library(&m, p, 0, SMATTN_F64, o64, l64);
            expect_file(out, "o.npy", with_b ? 4 : 3, o64, no * 8);
            expect_file(out, "lse.npy", with_b ? 3 : 2, l64, nl * 8);
            r = test_cli_run(tmp, (const char *[]){"opt", cdir, out, "--threads", "2", NULL});
            ck_assert_msg(r.code == 0, "opt: exit %d: %s", r.code, r.err);
            test_outcome_free(&r);
            library(&m, p, 1, SMATTN_F32, o32, l32);
            expect_file(out, "o.npy", with_b ? 4 : 3, o32, no * 4);
            expect_file(out, "lse.npy", with_b ? 3 : 2, l32, nl * 4);
        }
}
END_TEST

/* a bad merge case: exit 2, one line holding `want`, OUT not made */
static void expect_bad(const char *cmd, const char *cdir, const char *want, const char *extra)
{
    const char *out = test_path(tmp, "never");
    test_outcome r = test_cli_run(tmp, (const char *[]){cmd, cdir, out, extra, NULL});
    ck_assert_msg(r.code == 2, "%s: exit %d, want 2 (%s)", want, r.code, r.err);
    ck_assert_msg(strstr(r.err, want) != NULL, "stderr '%s' lacks '%s'", r.err, want);
    ck_assert_msg(strchr(r.err, '\n') == r.err + strlen(r.err) - 1, "not one line: %s", r.err);
    test_outcome_free(&r);
    FILE *f = fopen(out, "r");
    ck_assert_msg(f == NULL, "OUT was made");
}

START_TEST(test_bad_cases)
{
    mc m;
    make_case(&m, tmp, 1, "{\"empty_rows\": \"mean\"}");
    expect_bad("ref", tmp, "\"mean\" needs the keys' values", NULL);
    write_text(test_path(tmp, "case.json"), "{\"lse_base\": \"10\"}");
    expect_bad("ref", tmp, "\"lse_base\" must be \"e\" or \"2\"", NULL);
    write_text(test_path(tmp, "case.json"), "{\"empty_parts\": \"zero\"}");
    expect_bad("opt", tmp, "\"empty_parts\" must be \"neg_inf\" or \"pos_inf\"", NULL);
    write_text(test_path(tmp, "case.json"), "{\"scale\": 1}");
    expect_bad("ref", tmp, "unknown key \"scale\" in a merge case", NULL);
    write_text(test_path(tmp, "case.json"), "{}");
    expect_bad("ref", tmp, "a merge case has no attention weights", "--weights");
    char err[256];
    int64_t bad[4] = {3, 2, 3, 2}; /* [N,B,S,Hq] is not [N,B,Hq,S] */
    float z[36] = {0};
    ck_assert_int_eq(smattn_npy_write(test_path(tmp, "lse_parts.npy"), SMATTN_NPY_F32, 4, bad, z,
                                      err, sizeof err), 0);
    expect_bad("ref", tmp, "lse_parts.npy: shape [3,2,3,2] does not match o_parts.npy [3,2,3,2,4]",
               NULL);
    make_case(&m, tmp, 1, NULL);
    double o64[3 * 2 * 3 * 2 * 4] = {0};
    int64_t so[5] = {3, 2, 3, 2, 4};
    ck_assert_int_eq(smattn_npy_write(test_path(tmp, "o_parts.npy"), SMATTN_NPY_F64, 5, so, o64,
                                      err, sizeof err), 0);
    expect_bad("opt", tmp, "merge kernel", NULL); /* binary64: the kernel does not take it */
    test_outcome r = test_cli_run(tmp, (const char *[]){"ref", tmp, test_path(tmp, "ok"), NULL});
    ck_assert_msg(r.code == 0, "ref takes binary64 partials: %s", r.err);
    test_outcome_free(&r);
    /* raw bits and bytes: bf16 only through case.json's "bf16"; no byte formats here, so
     * the message does not send the user to the case directories' fp8 lists */
    uint16_t u16[3 * 2 * 3 * 2 * 4] = {0};
    ck_assert_int_eq(smattn_npy_write(test_path(tmp, "o_parts.npy"), SMATTN_NPY_U16, 5, so, u16,
                                      err, sizeof err), 0);
    expect_bad("ref", tmp, "o_parts.npy: dtype '<u2' holds raw bits; name \"o_parts\" in", NULL);
    uint8_t u8[3 * 2 * 3 * 2 * 4] = {0};
    ck_assert_int_eq(smattn_npy_write(test_path(tmp, "o_parts.npy"), SMATTN_NPY_U8, 5, so, u8, err,
                                      sizeof err), 0);
    expect_bad("ref", tmp, "o_parts.npy: dtype '|u1' is not a float type", NULL);
    write_text(test_path(tmp, "q.npy"), "");
    expect_bad("ref", tmp, "it has no q.npy or x.npy", NULL);
}
END_TEST

/* `smattn check` judges a merge case's o.npy and lse.npy against the exact merge (SPEC 9.5):
 * found below a directory beside attention cases (it was passed over, so a tree whose merge
 * output was wrong was conforming), the kernel's outputs pass, one O element off by 1e-3
 * fails naming it, a missing o.npy fails, and a lone merge case is a case too. */
START_TEST(test_check_judges_merge_cases)
{
    char root[256], cdir[256], att[256];
    snprintf(root, sizeof root, "%s/tree", tmp);
    snprintf(cdir, sizeof cdir, "%s/tree/m", tmp);
    snprintf(att, sizeof att, "%s/tree/a", tmp);
    char mk[800];
    snprintf(mk, sizeof mk, "mkdir -p %s %s", cdir, att);
    ck_assert_int_eq(system(mk), 0);
    mc m;
    make_case(&m, cdir, 1, NULL);
    /* an attention case beside it, with the kernel's outputs */
    char err[256];
    int64_t sh[3] = {2, 1, 4};
    float q[8] = {0.5f, -1, 0.25f, 2, 1, 0, -0.5f, 0.75f};
    ck_assert_int_eq(smattn_npy_write(test_path(att, "q.npy"), SMATTN_NPY_F32, 3, sh, q, err,
                                      sizeof err), 0);
    ck_assert_int_eq(smattn_npy_write(test_path(att, "k.npy"), SMATTN_NPY_F32, 3, sh, q, err,
                                      sizeof err), 0);
    ck_assert_int_eq(smattn_npy_write(test_path(att, "v.npy"), SMATTN_NPY_F32, 3, sh, q, err,
                                      sizeof err), 0);
    test_outcome r = test_cli_run(tmp, (const char *[]){"opt", att, att, NULL});
    ck_assert_msg(r.code == 0, "opt: %s", r.err);
    test_outcome_free(&r);
    r = test_cli_run(tmp, (const char *[]){"opt", cdir, cdir, NULL});
    ck_assert_msg(r.code == 0, "opt: %s", r.err);
    test_outcome_free(&r);
    r = test_cli_run(tmp, (const char *[]){"check", root, NULL});
    ck_assert_msg(r.code == 0 && strstr(r.out, "merge ") && strstr(r.out, "2 cases passed"),
                  "exit %d: %s %s", r.code, r.out, r.err);
    test_outcome_free(&r);
    /* O off by 1e-3 in one element, written as another program would (no set marker) */
    smattn_npy o;
    ck_assert_int_eq(smattn_npy_read(test_path(cdir, "o.npy"), &o, err, sizeof err), 0);
    ((float *)o.data)[5] += 1e-3f;
    ck_assert_int_eq(remove(test_path(cdir, ".smattn-set")), 0);
    ck_assert_int_eq(smattn_npy_write(test_path(cdir, "o.npy"), SMATTN_NPY_F32, o.rank, o.shape,
                                      o.data, err, sizeof err), 0);
    smattn_npy_free(&o);
    r = test_cli_run(tmp, (const char *[]){"check", root, NULL});
    ck_assert_msg(r.code == 1 && strstr(r.out, "FAIL m: error/bound ratio") &&
                      strstr(r.out, "at O element 5"),
                  "exit %d: %s %s", r.code, r.out, r.err);
    test_outcome_free(&r);
    ck_assert_int_eq(remove(test_path(cdir, "o.npy")), 0);
    r = test_cli_run(tmp, (const char *[]){"check", cdir, NULL});
    ck_assert_msg(r.code == 1 && strstr(r.out, "o.npy missing"), "exit %d: %s %s", r.code, r.out,
                  r.err);
    test_outcome_free(&r);
}
END_TEST

Suite *merge_cli_suite(void);
Suite *merge_cli_suite(void)
{
    Suite *s = suite_create("merge_cli");
    TCase *tc = tcase_create("merge_cli");
    tcase_add_checked_fixture(tc, setup, teardown);
    tcase_add_test(tc, test_ref_and_opt);
    tcase_add_test(tc, test_bad_cases);
    tcase_add_test(tc, test_check_judges_merge_cases);
    tcase_set_timeout(tc, 60);
    suite_add_tcase(s, tc);
    return s;
}
