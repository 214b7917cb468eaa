/* SPDX-License-Identifier: MIT */
/* test_case_quant.c: case files with fp8 and q8_0 / q4_0 arrays and descales (SPEC 7.1):
 * a quantised case gives the oracle's outputs of its binary64 twin case bit for bit, and bad
 * quantised input exits 2 with one line naming it, writing nothing. */
#include <check.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "core/internal.h"
#include "io/case.h"
#include "io/npy.h"
#include "smattn.h"
#include "tests/support/cli_run.h"
#include "tests/support/case_dir.h"
#include "tests/support/fs.h"

enum { CB = 2, CS = 3, CT = 5, CHQ = 2, CHKV = 1, CD = 32, CDV = 64 };

static void write_npy(const char *dir, const char *name, smattn_npy_type t, int rank,
                      const int64_t *shape, const void *data)
{
    char p[512], err[256];
    snprintf(p, sizeof p, "%s/%s", dir, name);
    ck_assert_msg(smattn_npy_write(p, t, rank, shape, data, err, sizeof err) == 0, "%s", err);
}

static void write_text(const char *dir, const char *name, const char *text)
{
    char p[512];
    snprintf(p, sizeof p, "%s/%s", dir, name);
    FILE *f = fopen(p, "w");
    ck_assert_ptr_nonnull(f);
    fputs(text, f);
    fclose(f);
}

static void put_half(unsigned char *p, double x)
{
    uint16_t h = (uint16_t)smattn__round_bits(x, SMATTN_F16);
    memcpy(p, &h, 2);
}

/* The quantised case: q e4m3 [B,S,Hq,D], k q8_0 [B,T,Hkv,D/32*34], v q4_0 [B,T,Hkv,Dv/32*18],
 * q_descale 0.5, k_descale per (b, g), v_descale 0.25; and its twin in f64 in dir64. */
static const double kds[CB] = {2.0, 0.75};

static void make_cases(const char *dir, const char *dir64)
{
    static unsigned char q[CB * CS * CHQ * CD], k[CB * CT * CHKV * CD / 32 * 34],
        v[CB * CT * CHKV * CDV / 32 * 18];
    static double q64[CB * CS * CHQ * CD], k64[CB * CT * CHKV * CD], v64[CB * CT * CHKV * CDV];
    uint64_t s = 0x5eed;
    for (size_t e = 0; e < sizeof q; e++) {
        s = s * 6364136223846793005u + 1442695040888963407u;
        q[e] = (unsigned char)((s >> 33) & 0xb7); /* no NaN: exponent field <= 14 */
        q64[e] = smattn_load(q, SMATTN_F8E4M3, (int64_t)e) * 0.5;
    }
    for (size_t e = 0; e < sizeof k; e++) {
        s = s * 6364136223846793005u + 1442695040888963407u;
        k[e] = (unsigned char)(s >> 40);
    }
    for (size_t e = 0; e < sizeof v; e++) {
        s = s * 6364136223846793005u + 1442695040888963407u;
        v[e] = (unsigned char)(s >> 40);
    }
    for (int blk = 0; blk < CB * CT * CHKV * CD / 32; blk++)
        put_half(k + 34 * blk, ldexp(1.0 + blk % 5, -8));
    for (int blk = 0; blk < CB * CT * CHKV * CDV / 32; blk++)
        put_half(v + 18 * blk, -ldexp(1.0 + blk % 3, -3));
    for (int64_t e = 0; e < CB * CT * CHKV * CD; e++)
        k64[e] = smattn_load(k, SMATTN_Q8_0, e) * kds[e / (CT * CHKV * CD)];
    for (int64_t e = 0; e < CB * CT * CHKV * CDV; e++)
        v64[e] = smattn_load(v, SMATTN_Q4_0, e) * 0.25;
    const int64_t sq[4] = {CB, CS, CHQ, CD}, sk[4] = {CB, CT, CHKV, CD / 32 * 34},
                  sv[4] = {CB, CT, CHKV, CDV / 32 * 18}, sk64[4] = {CB, CT, CHKV, CD},
                  sv64[4] = {CB, CT, CHKV, CDV};
    write_npy(dir, "q.npy", SMATTN_NPY_U8, 4, sq, q);
    write_npy(dir, "k.npy", SMATTN_NPY_U8, 4, sk, k);
    write_npy(dir, "v.npy", SMATTN_NPY_U8, 4, sv, v);
    write_text(dir, "case.json",
               "{\"fp8_e4m3\": [\"q\"], \"q8_0\": [\"k\"], \"q4_0\": [\"v\"], \"causal\": "
               "\"lower_right\", \"q_descale\": 0.5, \"k_descale\": [[2.0], [0.75]], "
               "\"v_descale\": 0.25}");
    write_npy(dir64, "q.npy", SMATTN_NPY_F64, 4, sq, q64);
    write_npy(dir64, "k.npy", SMATTN_NPY_F64, 4, sk64, k64);
    write_npy(dir64, "v.npy", SMATTN_NPY_F64, 4, sv64, v64);
    write_text(dir64, "case.json", "{\"causal\": \"lower_right\"}");
}

START_TEST(quantised_case_is_its_twin)
{
    char *dir = test_case_tmpdir("qcase"), *dir64 = test_case_tmpdir("qcase");
    make_cases(dir, dir64);
    smattn_case c, t;
    char err[256];
    ck_assert_msg(smattn_case_load(dir, &c, err, sizeof err) == 0, "%s", err);
    ck_assert_msg(smattn_case_load(dir64, &t, err, sizeof err) == 0, "%s", err);
    ck_assert_int_eq(c.in.q.dtype, SMATTN_F8E4M3);
    ck_assert_int_eq(c.in.k.dtype, SMATTN_Q8_0);
    ck_assert_int_eq(c.in.v.dtype, SMATTN_Q4_0);
    ck_assert_int_eq(c.prob.D, CD);
    ck_assert_int_eq(c.prob.Dv, CDV);
    ck_assert_int_eq(c.in.k.stride[0], CT * CHKV * CD); /* elements, not bytes */
    ck_assert_int_eq(c.in.v.stride[1], CHKV * CDV);
    ck_assert_ptr_nonnull(c.prob.descale);
    ck_assert(c.prob.descale->k_head && c.prob.descale->k_head[1] == 0.75);
    ck_assert(c.prob.descale->q == 0.5 && c.prob.descale->v == 0.25 && !c.prob.descale->v_head);
    /* the oracle's outputs agree bit for bit */
    double o1[CB * CS * CHQ * CDV], o2[CB * CS * CHQ * CDV], l1[CB * CHQ * CS], l2[CB * CHQ * CS];
    smattn_outputs a, b;
    memset(&a, 0, sizeof a);
    a.o.data = o1, a.o.dtype = SMATTN_F64;
    a.lse.data = l1, a.lse.dtype = SMATTN_F64;
    ck_assert_int_eq(smattn_contiguous_strides(&c.prob, 'o', a.o.stride), SMATTN_OK);
    ck_assert_int_eq(smattn_contiguous_strides(&c.prob, 'l', a.lse.stride), SMATTN_OK);
    b = a;
    b.o.data = o2, b.lse.data = l2;
    ck_assert_int_eq(smattn_ref(&c.prob, &c.in, &a, NULL, NULL), SMATTN_OK);
    ck_assert_int_eq(smattn_ref(&t.prob, &t.in, &b, NULL, NULL), SMATTN_OK);
    ck_assert(memcmp(o1, o2, sizeof o1) == 0);
    ck_assert(memcmp(l1, l2, sizeof l1) == 0);
    smattn_case_free(&c);
    smattn_case_free(&t);
    /* the CLI writes the same */
    char out[600];
    snprintf(out, sizeof out, "%s/out", dir);
    const char *args[] = {"ref", dir, out, NULL};
    test_outcome r = test_cli_run(dir64, args);
    ck_assert_msg(r.code == 0, "%s", r.err);
    test_outcome_free(&r);
    /* the kernel takes an fp8 case without descales: o.npy within the f32 model's bound */
    write_text(dir, "case.json", "{\"fp8_e4m3\": [\"q\", \"k\", \"v\"]}");
    {
        static unsigned char b8[CB * CT * CHKV * CDV];
        for (size_t e = 0; e < sizeof b8; e++)
            b8[e] = (unsigned char)((e * 37) & 0xb7);
        const int64_t sk[4] = {CB, CT, CHKV, CD}, sv[4] = {CB, CT, CHKV, CDV};
        write_npy(dir, "k.npy", SMATTN_NPY_U8, 4, sk, b8);
        write_npy(dir, "v.npy", SMATTN_NPY_U8, 4, sv, b8);
    }
    const char *opt_args[] = {"opt", dir, dir, NULL};
    r = test_cli_run(dir64, opt_args);
    ck_assert_msg(r.code == 0, "%s", r.err);
    test_outcome_free(&r);
    const char *check_args[] = {"check", dir, NULL};
    r = test_cli_run(dir64, check_args);
    ck_assert_msg(r.code == 0 && strstr(r.out, "CONFORMING"), "%s%s", r.out, r.err);
    test_outcome_free(&r);
    test_rm_tree(dir);
    test_rm_tree(dir64);
    free(dir);
    free(dir64);
}
END_TEST

/* One bad variation of the quantised case: case.json replaced by json (NULL: kept), v.npy
 * cut to vlast bytes per row (0: kept). Exit 2, one line containing `want`, no OUT. */
static void expect_bad(const char *json, int64_t vlast, const char *want)
{
    char *dir = test_case_tmpdir("qcase"), *dir64 = test_case_tmpdir("qcase");
    make_cases(dir, dir64);
    if (json)
        write_text(dir, "case.json", json);
    if (vlast) {
        static unsigned char v[CB * CT * CHKV * 64];
        memset(v, 0x88, sizeof v);
        const int64_t sv[4] = {CB, CT, CHKV, vlast};
        write_npy(dir, "v.npy", SMATTN_NPY_U8, 4, sv, v);
    }
    char out[600];
    snprintf(out, sizeof out, "%s/out", dir);
    const char *cmds[2] = {"ref", "opt"};
    for (int k = 0; k < 2; k++) {
        const char *args[] = {cmds[k], dir, out, NULL};
        test_outcome r = test_cli_run(dir64, args);
        ck_assert_msg(r.code == 2, "%s: code %d for %s: %s", cmds[k], r.code, want, r.err);
        /* opt reads every quantised dtype and descale: the same one line as ref */
        ck_assert_msg(strstr(r.err, want) != NULL, "%s: want \"%s\" in: %s", cmds[k], want,
                      r.err);
        const char *nl = strchr(r.err, '\n');
        ck_assert_msg(nl && nl[1] == 0, "%s: not one line: %s", cmds[k], r.err);
        struct stat st;
        ck_assert_msg(stat(out, &st) != 0, "%s wrote %s", cmds[k], out);
        test_outcome_free(&r);
    }
    test_rm_tree(dir);
    test_rm_tree(dir64);
    free(dir);
    free(dir64);
}

START_TEST(bad_quantised_input_exits_2)
{
    const char *base = "\"fp8_e4m3\": [\"q\"], \"q8_0\": [\"k\"], \"q4_0\": [\"v\"]";
    char j[512];
    snprintf(j, sizeof j, "{%s, \"k_descale\": 0}", base);
    expect_bad(j, 0, "k_descale = 0 is not a positive finite binary32 value");
    snprintf(j, sizeof j, "{%s, \"k_descale\": [[1.0], [-2.0]]}", base);
    expect_bad(j, 0, "k_descale[1][0] = -2 is not a positive finite binary32 value");
    snprintf(j, sizeof j, "{%s, \"v_descale\": 0.1}", base);
    expect_bad(j, 0, "v_descale = 0.1 is not a positive finite binary32 value");
    snprintf(j, sizeof j, "{%s, \"q_descale\": \"nan\"}", base);
    expect_bad(j, 0, "\"q_descale\" must be a number");
    snprintf(j, sizeof j, "{%s, \"q_descale\": [[1.0, 2.0], [1.0, 2.0]]}", base);
    expect_bad(j, 0, "\"q_descale\" holds 2 lists of 2 numbers; want B = 2 lists of Hkv = 1");
    snprintf(j, sizeof j, "{%s}", base);
    expect_bad(j, 20, "v.npy: a q4_0 array's last dimension holds whole blocks of 18 bytes");
    expect_bad("{\"fp8_e4m3\": [\"q\"], \"q8_0\": [\"k\", \"q\"], \"q4_0\": [\"v\"]}", 0,
               "\"q8_0\"[1] must be one of k, v");
    expect_bad("{\"fp8_e4m3\": [\"q\"], \"q4_0\": [\"v\"]}", 0,
               "k.npy: dtype '|u1' holds raw bytes");
    expect_bad("{\"fp8_e4m3\": [\"q\"], \"fp8_e5m2\": [\"k\"], \"q8_0\": [\"k\"], \"q4_0\": "
               "[\"v\"]}",
               0, "k is named in more than one of");
}
END_TEST

Suite *case_quant_suite(void);
Suite *case_quant_suite(void)
{
    Suite *s = suite_create("case_quant");
    TCase *tc = tcase_create("core");
    tcase_set_timeout(tc, 120);
    tcase_add_test(tc, quantised_case_is_its_twin);
    tcase_add_test(tc, bad_quantised_input_exits_2);
    suite_add_tcase(s, tc);
    return s;
}
