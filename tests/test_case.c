/* SPDX-License-Identifier: MIT */
/* test_case.c: case directories: good 3-D/4-D cases with broadcasting, bf16 and sinks, and
 * every kind of bad case rejected with one line naming the file; case.json parsing; the
 * output writer. */
#include <check.h>
#include <dirent.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "tests/support/case_dir.h"
#include "tests/support/fs.h"
#include "io/case.h"
#include "io/util.h"

/* the shared helpers (tests/support/case_dir.h) under this suite's short names */
#define put_text test_put_text
#define load_ok test_case_load_ok
#define load_fails test_case_load_fails

/* ---- fixtures -------------------------------------------------------------------------- */

/* An array of n elements with the given values (converted to the type), written as npy. */
static void put(const char *dir, const char *name, smattn_npy_type t, int rank,
                const int64_t *shape)
{
    int64_t n = 1;
    for (int r = 0; r < rank; r++)
        n *= shape[r];
    size_t es = smattn_npy_type_size(t);
    unsigned char *buf = calloc((size_t)(n ? n : 1), es);
    for (int64_t k = 0; k < n; k++) {
        double x = (double)(k % 7) - 3.0; /* small exact values */
        if (t == SMATTN_NPY_F64)
            memcpy(buf + k * 8, &x, 8);
        else if (t == SMATTN_NPY_F32) {
            float f = (float)x;
            memcpy(buf + k * 4, &f, 4);
        } else if (t == SMATTN_NPY_U16 || t == SMATTN_NPY_F16) {
            uint16_t h = 0x3c00; /* f16 1.0; as bf16 bits 0x3c00 = 2^-7 */
            memcpy(buf + k * 2, &h, 2);
        } else
            buf[k] = (unsigned char)(k % 2);
    }
    char p[512], err[256];
    snprintf(p, sizeof p, "%s/%s", dir, name);
    ck_assert_msg(smattn_npy_write(p, t, rank, shape, buf, err, sizeof err) == 0, "%s", err);
    free(buf);
}

static void put_bytes(const char *dir, const char *name, const void *b, size_t n)
{
    char p[512];
    snprintf(p, sizeof p, "%s/%s", dir, name);
    FILE *f = fopen(p, "wb");
    ck_assert_ptr_nonnull(f);
    ck_assert_uint_eq(fwrite(b, 1, n, f), n);
    fclose(f);
}

/* A version-1.0 file with a hand-written header dict (under 117 characters) padded to 128
 * bytes, followed by nbytes bytes of data (zeros when data is NULL). */
static void put_header(const char *dir, const char *name, const char *dict, const void *data,
                       size_t nbytes)
{
    unsigned char *file = calloc(1, 128 + nbytes);
    ck_assert(strlen(dict) < 117);
    memset(file, ' ', 128);
    memcpy(file, "\x93NUMPY\x01\x00\x76\x00", 10);
    memcpy(file + 10, dict, strlen(dict));
    file[127] = '\n';
    if (data)
        memcpy(file + 128, data, nbytes);
    put_bytes(dir, name, file, 128 + nbytes);
    free(file);
}

/* A standard attention case: q [S,Hq,D] k,v [T,Hkv,D] (3-D) or with B first (4-D). */
static void put_qkv(const char *dir, int rank, int64_t B, int64_t S, int64_t T, int64_t Hq,
                    int64_t Hkv, int64_t D, smattn_npy_type t)
{
    int64_t q[4] = {B, S, Hq, D}, k[4] = {B, T, Hkv, D};
    int o = 4 - rank;
    put(dir, "q.npy", t, rank, q + o);
    put(dir, "k.npy", t, rank, k + o);
    put(dir, "v.npy", t, rank, k + o);
}

/* ---- good cases ------------------------------------------------------------------------ */

START_TEST(attention_3d_defaults)
{
    char *d = test_case_tmpdir("case");
    put_qkv(d, 3, 1, 2, 5, 4, 2, 8, SMATTN_NPY_F32);
    smattn_case c;
    load_ok(d, &c);
    ck_assert_int_eq(c.rank, 3);
    ck_assert_int_eq(c.prob.op, SMATTN_OP_ATTENTION);
    ck_assert(c.prob.B == 1 && c.prob.S == 2 && c.prob.T == 5 && c.prob.Hq == 4 &&
              c.prob.Hkv == 2 && c.prob.D == 8 && c.prob.Dv == 8);
    ck_assert(c.prob.scale == smattn_default_scale(8));
    ck_assert_int_eq(c.in.q.dtype, SMATTN_F32);
    ck_assert(c.in.q.stride[1] == 32 && c.in.q.stride[2] == 8 && c.in.q.stride[3] == 1);
    smattn_outputs out;
    char err[256];
    ck_assert_msg(smattn_case_outputs_alloc(&c, SMATTN_F32, SMATTN_CASE_OUT_O | SMATTN_CASE_OUT_LSE,
                                            &out, err, sizeof err) == SMATTN_OK,
                  "%s", err);
    ck_assert_ptr_null(out.p.data);
    smattn_case_outputs_free(&out);
    smattn_case_free(&c);
    test_rm_tree(d);
    free(d);
}
END_TEST

START_TEST(attention_4d_broadcast_options)
{
    char *d = test_case_tmpdir("case");
    put_qkv(d, 4, 2, 3, 4, 2, 1, 4, SMATTN_NPY_F64);
    put(d, "bias.npy", SMATTN_NPY_F32, 4, (int64_t[]){1, 1, 3, 4});
    put(d, "mask.npy", SMATTN_NPY_BOOL, 1, (int64_t[]){4});
    put_text(d, "case.json",
             "{\"scale\": 0.1, \"causal\": \"upper_left\", \"window\": [2, 0],"
             " \"kv_lens\": [4, 3], \"q_lens\": [3, 1], \"softcap\": 30, \"sinks\": [-1, "
             "\"-inf\"], \"empty_rows\": \"mean\", \"empty_lse\": \"pos_inf\"}\n");
    smattn_case c;
    load_ok(d, &c);
    ck_assert_int_eq(c.rank, 4);
    ck_assert(c.prob.B == 2 && c.prob.Hq == 2 && c.prob.Hkv == 1);
    ck_assert(c.prob.scale == 0.1 && c.prob.softcap == 30.0);
    ck_assert(c.prob.causal == SMATTN_CAUSAL_UPPER_LEFT && c.prob.window_left == 2 &&
              c.prob.window_right == 0);
    ck_assert(c.prob.kv_lens[1] == 3 && c.prob.q_lens[1] == 1);
    ck_assert(c.prob.empty_rows == SMATTN_EMPTY_MEAN && c.prob.empty_lse == SMATTN_LSE_POS_INF);
    ck_assert(c.in.bias.stride[0] == 0 && c.in.bias.stride[1] == 0 && c.in.bias.stride[2] == 4 &&
              c.in.bias.stride[3] == 1);
    ck_assert(c.in.mask.stride[0] == 0 && c.in.mask.stride[2] == 0 && c.in.mask.stride[3] == 1);
    ck_assert_int_eq(c.in.mask.dtype, SMATTN_BOOL);
    ck_assert(c.in.sinks.dtype == SMATTN_F64 && isinf(((const double *)c.in.sinks.data)[1]));
    smattn_outputs out;
    char err[256];
    ck_assert_msg(smattn_case_outputs_alloc(&c, SMATTN_BF16, 7, &out, err, sizeof err) == SMATTN_OK,
                  "%s", err);
    smattn_case_outputs_free(&out);
    smattn_case_free(&c);
    test_rm_tree(d);
    free(d);
}
END_TEST

START_TEST(bf16_sinks_softmax_fortran)
{
    char *d = test_case_tmpdir("case");
    /* bf16 as '<u2' bits when named; sinks.npy [Hq]. */
    put_qkv(d, 3, 1, 2, 3, 2, 2, 4, SMATTN_NPY_U16);
    put(d, "sinks.npy", SMATTN_NPY_F16, 1, (int64_t[]){2});
    put_text(d, "case.json", "{\"bf16\": [\"q\", \"k\", \"v\"]}");
    smattn_case c;
    load_ok(d, &c);
    ck_assert(c.in.q.dtype == SMATTN_BF16 && c.in.v.dtype == SMATTN_BF16);
    ck_assert(c.in.sinks.dtype == SMATTN_F16 && c.in.sinks.stride[0] == 1);
    smattn_case_free(&c);
    test_rm_tree(d);
    /* Softmax, 3-D x, Fortran-ordered: used in place through column-major strides. */
    ck_assert_int_eq(mkdir(d, 0700), 0);
    double x[6] = {0, 1, 2, 3, 4, 5};
    put_header(d, "x.npy", "{'descr': '<f8', 'fortran_order': True, 'shape': (1, 2, 3), }", x,
               sizeof x);
    load_ok(d, &c);
    ck_assert(c.prob.op == SMATTN_OP_SOFTMAX && c.prob.Hq == 1 && c.prob.S == 2 && c.prob.T == 3 &&
              c.prob.scale == 1.0);
    ck_assert(c.in.x.stride[2] == 1 && c.in.x.stride[3] == 2); /* [h][i][j] at i + 2j */
    smattn_case_free(&c);
    test_rm_tree(d);
    free(d);
}
END_TEST

/* ---- bad cases ------------------------------------------------------------------------- */

START_TEST(bad_files_rejected)
{
    char *d = test_case_tmpdir("case");
    load_fails("/nonexistent/smattn/case", "no such case directory");
    load_fails(d, "no q.npy");
    put_qkv(d, 3, 1, 2, 3, 2, 2, 4, SMATTN_NPY_F32);
    char p[512];
    snprintf(p, sizeof p, "%s/k.npy", d);
    unlink(p);
    load_fails(d, "k.npy: missing");
    put(d, "k.npy", SMATTN_NPY_F32, 3, (int64_t[]){3, 2, 4});
    /* Truncated file. */
    snprintf(p, sizeof p, "%s/v.npy", d);
    ck_assert_int_eq(truncate(p, 130), 0);
    load_fails(d, "v.npy: truncated data");
    put(d, "v.npy", SMATTN_NPY_F32, 3, (int64_t[]){3, 2, 4});
    /* Not npy at all. */
    put_text(d, "mask.npy", "hello");
    load_fails(d, "mask.npy: not a .npy file");
    put(d, "mask.npy", SMATTN_NPY_F32, 1, (int64_t[]){3});
    load_fails(d, "mask.npy: dtype '<f4' is not a mask type");
    put(d, "mask.npy", SMATTN_NPY_U8, 1, (int64_t[]){3});
    smattn_case c;
    load_ok(d, &c);
    smattn_case_free(&c);
    put(d, "x.npy", SMATTN_NPY_F32, 3, (int64_t[]){2, 2, 3});
    load_fails(d, "not both");
    test_rm_tree(d);
    free(d);
}
END_TEST

START_TEST(bad_dtypes_rejected)
{
    char *d = test_case_tmpdir("case");
    put_qkv(d, 3, 1, 2, 3, 2, 2, 4, SMATTN_NPY_F32);
    put(d, "q.npy", SMATTN_NPY_U16, 3, (int64_t[]){2, 2, 4});
    load_fails(d, "q.npy: dtype '<u2' holds raw bits");
    put(d, "q.npy", SMATTN_NPY_BOOL, 3, (int64_t[]){2, 2, 4});
    load_fails(d, "q.npy: dtype '|b1' is not a float type");
    put(d, "q.npy", SMATTN_NPY_F32, 3, (int64_t[]){2, 2, 4});
    put_text(d, "case.json", "{\"bf16\": [\"k\"]}");
    load_fails(d, "\"bf16\" names k, but k.npy has dtype '<f4'");
    put_text(d, "case.json", "{\"bf16\": [\"x\"]}");
    load_fails(d, "there is no x.npy");
    put_text(d, "case.json", "{\"bf16\": [\"mask\"]}");
    load_fails(d, "case.json: \"bf16\"[0]");
    put_text(d, "case.json", "{}");
    put_header(d, "q.npy", "{'descr': '<i2', 'fortran_order': False, 'shape': (), }", NULL, 2);
    load_fails(d, "q.npy: header: dtype '<i2' is not supported");
    test_rm_tree(d);
    free(d);
}
END_TEST

START_TEST(bad_shapes_rejected)
{
    char *d = test_case_tmpdir("case");
    put_qkv(d, 3, 1, 4, 4, 4, 4, 128, SMATTN_NPY_F32);
    put(d, "k.npy", SMATTN_NPY_F32, 3, (int64_t[]){4, 4, 16});
    load_fails(d, "k.npy: shape [4,4,16] does not match q.npy's head dim 128");
    test_rm_tree(d);
    ck_assert_int_eq(mkdir(d, 0700), 0);
    put_qkv(d, 3, 1, 2, 3, 28, 5, 2, SMATTN_NPY_F32);
    load_fails(d, "Hq (28) is not a multiple of Hkv (5)");
    put_qkv(d, 3, 1, 2, 3, 4, 2, 2, SMATTN_NPY_F32);
    put(d, "v.npy", SMATTN_NPY_F32, 3, (int64_t[]){4, 2, 2});
    load_fails(d, "v.npy: shape [4,2,2] does not match k.npy's key count T = 3");
    put(d, "v.npy", SMATTN_NPY_F32, 4, (int64_t[]){1, 3, 2, 2});
    load_fails(d, "v.npy: shape [1,3,2,2] is 4-D but q.npy is 3-D");
    put(d, "v.npy", SMATTN_NPY_F32, 3, (int64_t[]){3, 2, 0});
    load_fails(d, "v.npy: shape [3,2,0] has an empty dimension");
    put(d, "v.npy", SMATTN_NPY_F32, 3, (int64_t[]){3, 2, 5}); /* Dv != D is fine */
    put(d, "q.npy", SMATTN_NPY_F32, 2, (int64_t[]){2, 4});
    load_fails(d, "q.npy: shape [2,4] has rank 2");
    put(d, "q.npy", SMATTN_NPY_F32, 3, (int64_t[]){2, 4, 2});
    put(d, "bias.npy", SMATTN_NPY_F32, 2, (int64_t[]){3, 3});
    load_fails(d, "bias.npy: shape [3,3] does not broadcast to [B,Hq,S,T] = [1,4,2,3]");
    load_fails(d, "(its dim 0, aligned with S, is 3: want 1 or 2)");
    /* the review: B = 1 said "want 1 or 1" without naming the dimension */
    put(d, "bias.npy", SMATTN_NPY_F32, 4, (int64_t[]){3, 1, 1, 1});
    load_fails(d, "(its dim 0, aligned with B, is 3: want 1)");
    /* SPEC 7.1: bias and mask have rank 1-4; a rank-0 array is not taken as a scalar. */
    put(d, "bias.npy", SMATTN_NPY_F32, 0, NULL);
    load_fails(d, "bias.npy: shape [] has rank 0; want rank 1-4");
    put(d, "bias.npy", SMATTN_NPY_F32, 4, (int64_t[]){1, 4, 1, 3});
    put(d, "mask.npy", SMATTN_NPY_BOOL, 0, NULL);
    load_fails(d, "mask.npy: shape [] has rank 0; want rank 1-4");
    char mp[512];
    snprintf(mp, sizeof mp, "%s/mask.npy", d);
    unlink(mp);
    put(d, "sinks.npy", SMATTN_NPY_F32, 0, NULL);
    load_fails(d, "sinks.npy: shape [], want [Hq] = [4]");
    put(d, "sinks.npy", SMATTN_NPY_F32, 1, (int64_t[]){3});
    load_fails(d, "sinks.npy: shape [3], want [Hq] = [4]");
    put(d, "sinks.npy", SMATTN_NPY_F32, 1, (int64_t[]){4});
    put_text(d, "case.json", "{\"sinks\": [1, 2, 3, 4]}");
    load_fails(d, "sinks are also given in case.json");
    put_text(d, "case.json", "{\"kv_lens\": [1, 2]}");
    load_fails(d, "\"kv_lens\" has 2 entries, want B = 1");
    put_text(d, "case.json", "{\"q_lens\": [3]}");
    load_fails(d, "\"q_lens\"[0] = 3 is outside [0, S] = [0, 2]");
    put_text(d, "case.json", "{\"kv_lens\": [3]}");
    smattn_case c;
    load_ok(d, &c);
    smattn_case_free(&c);
    /* A header whose element count overflows int64. */
    put_header(d, "q.npy",
               "{'descr': '<f4', 'fortran_order': False, 'shape': "
               "(4294967296, 4294967296, 4294967296), }",
               NULL, 0);
    load_fails(d, "q.npy: shape: the element count overflows");
    test_rm_tree(d);
    free(d);
}
END_TEST

START_TEST(bad_json_rejected)
{
    char *d = test_case_tmpdir("case");
    put_qkv(d, 3, 1, 2, 3, 2, 2, 4, SMATTN_NPY_F32);
    const char *bad[][2] = {
        {"{\"scale\": 1,", "case.json: malformed JSON"},
        {"{\"scale\": 1} {}", "case.json: malformed JSON"},
        {"[1, 2]", "top level must be a JSON object"},
        {"{\"scael\": 1}", "case.json: unknown key \"scael\""},
        {"{\"scale\": \"0.5\"}", "\"scale\" must be a finite number"},
        {"{\"scale\": 1e400}", "\"scale\" must be a finite number"},
        {"{\"scale\": 99999999999999999999999}", "case.json: integer at byte 10 is out of range"},
        {"{\"causal\": \"lower-right\"}", "\"causal\" must be"},
        {"{\"window\": [1]}", "\"window\" must be"},
        {"{\"window\": [-2, 0]}", "\"window\" must be"},
        {"{\"window\": [1.5, 0]}", "\"window\" must be"},
        {"{\"softcap\": -1}", "\"softcap\" must be"},
        {"{\"kv_lens\": [1, \"a\"]}", "\"kv_lens\"[1] is not an integer"},
        {"{\"sinks\": [\"-infinity\"]}", "\"sinks\"[0] is not a number"},
        {"{\"empty_rows\": \"skip\"}", "\"empty_rows\" must be"},
        {"{\"empty_lse\": 0}", "\"empty_lse\" must be"},
        {"{\"bf16\": \"q\"}", "\"bf16\" must be an array"},
        {"", "case.json: malformed JSON"},
    };
    for (size_t k = 0; k < sizeof bad / sizeof bad[0]; k++) {
        put_text(d, "case.json", bad[k][0]);
        load_fails(d, bad[k][1]);
    }
    test_rm_tree(d);
    free(d);
}
END_TEST

START_TEST(json_from_memory)
{
    smattn_case_json cj;
    char err[256];
    ck_assert(smattn_case_json_parse("{}", 2, &cj, err, sizeof err) == 0);
    ck_assert(!cj.has_scale && cj.window[0] == -1 && cj.causal == SMATTN_CAUSAL_NONE);
    smattn_case_json_free(&cj);
    /* Not NUL-terminated; the length bounds the parse. */
    const char text[] = "{\"scale\": 0.125, \"sinks\": [\"inf\", -2.5]}GARBAGE";
    ck_assert_msg(smattn_case_json_parse(text, 40, &cj, err, sizeof err) == 0, "%s", err);
    ck_assert(cj.has_scale && cj.scale == 0.125 && cj.n_sinks == 2 && cj.sinks[1] == -2.5);
    smattn_case_json_free(&cj);
    ck_assert(smattn_case_json_parse(text, sizeof text - 1, &cj, err, sizeof err) != 0);
    ck_assert(smattn_case_json_parse("{\"scale\": 1}\0", 13, &cj, err, sizeof err) != 0);
    ck_assert(strstr(err, "NUL") != NULL);
    /* The nearest binary64: 0.1 is 0x1.999999999999ap-4. */
    ck_assert(smattn_case_json_parse("{\"scale\": 0.1}", 14, &cj, err, sizeof err) == 0);
    ck_assert(cj.scale == 0x1.999999999999ap-4);
    smattn_case_json_free(&cj);
}
END_TEST

/* RFC 8259 where json-c 0.16 is lax: integers exact over all of int64, anything
 * beyond it out of range (not saturated), single quotes, duplicate keys (also spelled with
 * escapes, also nested), a top level that is not an object, leading zeros. */
static void json_bad(const char *text, const char *needle)
{
    smattn_case_json cj;
    char err[256] = "";
    ck_assert_msg(smattn_case_json_parse(text, strlen(text), &cj, err, sizeof err) != 0,
                  "accepted: %s", text);
    ck_assert_msg(strstr(err, needle) != NULL, "%s: message '%s' lacks '%s'", text, err, needle);
    ck_assert_msg(!strchr(err, '\n'), "%s: two lines", text);
}

START_TEST(json_strict_rfc8259)
{
    smattn_case_json cj;
    char err[256];
    const char *t = "{\"scale\": 9223372036854775807,"
                    " \"kv_lens\": [9223372036854775807, -9223372036854775808, 0]}";
    ck_assert_msg(smattn_case_json_parse(t, strlen(t), &cj, err, sizeof err) == 0, "%s", err);
    ck_assert(cj.scale == 0x1p63);
    ck_assert(cj.n_kv_lens == 3 && cj.kv_lens[0] == INT64_MAX && cj.kv_lens[1] == INT64_MIN);
    smattn_case_json_free(&cj);
    json_bad("{\"scale\": 123456789012345678901234567890}", "out of range");
    json_bad("{\"scale\": 9223372036854775808}", "out of range");
    json_bad("{\"kv_lens\": [-9223372036854775809]}", "out of range");
    json_bad("{\"kv_lens\": [18446744073709551615]}", "out of range");
    json_bad("{'scale': 1}", "single quotes");
    json_bad("{\"causal\": 'none'}", "single quotes");
    json_bad("{\"scale\": 1, \"scale\": 2}", "duplicate key \"scale\"");
    json_bad("{\"scale\": 1, \"\\u0073cale\": 1}", "duplicate key \"scale\"");
    json_bad("true", "the top level must be a JSON object");
    json_bad("null", "the top level must be a JSON object");
    json_bad(" [1] ", "the top level must be a JSON object");
    json_bad("12", "the top level must be a JSON object");
    json_bad("{\"scale\": 01}", "leading zero");
    json_bad("{\"scale\": 1.}", "malformed number");
    json_bad("{\"scale\": .5}", "malformed");
    json_bad("{\"scale\": 1,}", "expected a key");
    json_bad("{\"causal\": \"no\tne\"}", "control character");
    /* These said "a malformed number" */
    json_bad("{\"window\": [1, 2,]}", "a trailing comma before ']'");
    json_bad("{\"window\": [1, ]}", "a trailing comma");
    json_bad("{\"scale\": ]}", "expected a value, not a closing bracket");
    json_bad("\xef\xbb\xbf{\"scale\": 1}", "a byte-order mark is not allowed (RFC 8259)");
    /* the check alone: a duplicate in a nested object, a surrogate pair as a key */
    const char *nested = "{\"a\": [{\"b\": 1, \"c\": {\"d\": 1, \"d\": 2}}]}";
    ck_assert(smattn_io_json_check(nested, strlen(nested), err, sizeof err) != 0);
    ck_assert_msg(strstr(err, "duplicate key \"d\""), "%s", err);
    const char *pair = "{\"\\ud83d\\ude00\": 1, \"x\": {\"\\ud83d\\ude00\": 1}}";
    ck_assert_msg(smattn_io_json_check(pair, strlen(pair), err, sizeof err) == 0, "%s", err);
}
END_TEST

/* Every key used to malloc the rest of the text, so 200k keys in 2.6 MB
 * asked for about 260 GB (a 13.8 MB file took 30 s and 4.6 GB). Under a 300 MB address-space
 * limit (not under ASan, whose shadow needs terabytes of it) the parse reports the first
 * unknown key, quickly, not "out of memory". */
static double test_now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

START_TEST(json_many_keys_bounded_memory)
{
    const size_t nkeys = 200000;
    size_t cap = nkeys * 16 + 16, n = 0;
    char *t = malloc(cap);
    ck_assert(t != NULL);
    t[n++] = '{';
    for (size_t k = 0; k < nkeys; k++)
        n += (size_t)snprintf(t + n, cap - n, "%s\"k%06zu\": 0", k ? ", " : "", k);
    t[n++] = '}';
    double t0 = test_now();
    pid_t pid = fork();
    ck_assert(pid >= 0);
    if (pid == 0) {
#if !defined(__SANITIZE_ADDRESS__)
        struct rlimit rl = {300u << 20, 300u << 20};
        if (setrlimit(RLIMIT_AS, &rl) != 0)
            _exit(3);
#endif
        smattn_case_json cj;
        char err[256] = "";
        int rc = smattn_case_json_parse(t, n, &cj, err, sizeof err);
        if (rc == 0)
            _exit(4);
        _exit(strstr(err, "unknown key \"k000000\"") ? 0 : strstr(err, "memory") ? 2 : 1);
    }
    int st = 0;
    ck_assert(waitpid(pid, &st, 0) == pid);
    double secs = test_now() - t0;
    free(t);
    ck_assert_msg(WIFEXITED(st) && WEXITSTATUS(st) == 0, "child status %d (2: out of memory)",
                  st);
    ck_assert_msg(secs < 10, "%.1f s for 200k keys", secs);
}
END_TEST

/* Random byte mutations of a full case.json, parsed from an exact-size buffer: each parse
 * succeeds or fails with a message; ASan sees any overread. */
START_TEST(json_mutations_never_crash)
{
    const unsigned seed = 4242u;
    srand(seed);
    const char good[] = "{\"scale\": 0.125, \"causal\": \"lower_right\", \"window\": [3, -1],"
                        " \"kv_lens\": [1, 2], \"softcap\": 20, \"sinks\": [\"-inf\", 1e3],"
                        " \"empty_rows\": \"nan\", \"empty_lse\": \"zero\", \"bf16\": [\"q\"]}";
    const size_t len = sizeof good - 1;
    for (int it = 0; it < 5000; it++) {
        char *b = malloc(len);
        memcpy(b, good, len);
        int nm = 1 + rand() % 3;
        for (int m = 0; m < nm; m++)
            b[(size_t)rand() % len] = (char)(rand() % 2 ? rand() : "{}[]\",:0-e\\"[rand() % 11]);
        size_t n = rand() % 4 ? len : (size_t)rand() % len;
        smattn_case_json cj;
        char err[256] = "";
        if (smattn_case_json_parse(b, n, &cj, err, sizeof err) == 0)
            smattn_case_json_free(&cj);
        else
            ck_assert_msg(err[0] != '\0', "seed %u it %d: empty message", seed, it);
        free(b);
    }
}
END_TEST

/* ---- outputs --------------------------------------------------------------------------- */

static int count_entries(const char *dir)
{
    DIR *dd = opendir(dir);
    int n = 0;
    struct dirent *e;
    while (dd && (e = readdir(dd)))
        n += strcmp(e->d_name, ".") && strcmp(e->d_name, "..");
    if (dd)
        closedir(dd);
    return n;
}

/* A NUL in a key or a value (\u0000) is refused: keys that differ only after it passed
 * the duplicate check and were read as one key, and a value was taken for its prefix. */
START_TEST(json_nul_refused)
{
    json_bad("{\"causal\": \"none\\u0000x\"}", "\\u0000 in a string");
    json_bad("{\"scale\\u0000a\": 1, \"scale\\u0000b\": 2}", "\\u0000 in a string");
    json_bad("{\"scale\\u0000\": 1}", "\\u0000 in a string");
    json_bad("{\"bf16\": [\"q\\u0000\"]}", "\\u0000 in a string");
    /* other escapes of control characters are still strings like any other */
    smattn_case_json cj;
    char err[256];
    const char *t = "{\"causal\": \"none\"}";
    ck_assert_msg(smattn_case_json_parse(t, strlen(t), &cj, err, sizeof err) == 0, "%s", err);
    smattn_case_json_free(&cj);
    json_bad("{\"causal\": \"none\\u0001\"}", "\"causal\" must be");
}
END_TEST

/* Absent means no directory entry: an optional input (bias, mask, sinks, case.json) that
 * is a dangling symbolic link, a FIFO or a directory is an error naming it, never a case
 * run without it. */
START_TEST(unreadable_optional_inputs_are_errors)
{
    static const char *const names[4] = {"bias.npy", "mask.npy", "sinks.npy", "case.json"};
    char *d = test_case_tmpdir("case");
    put_qkv(d, 3, 1, 2, 3, 2, 2, 4, SMATTN_NPY_F32);
    smattn_case c;
    load_ok(d, &c);
    smattn_case_free(&c);
    char p[600], target[600];
    for (int k = 0; k < 4; k++) {
        snprintf(p, sizeof p, "%s/%s", d, names[k]);
        snprintf(target, sizeof target, "%s/gone_%s", d, names[k]);
        ck_assert_int_eq(symlink(target, p), 0);
        char want[80];
        snprintf(want, sizeof want, "%s: a dangling symbolic link", names[k]);
        load_fails(d, want);
        ck_assert_int_eq(unlink(p), 0);
        ck_assert_int_eq(mkfifo(p, 0600), 0);
        load_fails(d, "not a regular file");
        ck_assert_int_eq(unlink(p), 0);
        ck_assert_int_eq(mkdir(p, 0700), 0);
        load_fails(d, "not a regular file");
        ck_assert_int_eq(rmdir(p), 0);
        load_ok(d, &c); /* and absent again: the case as it was */
        smattn_case_free(&c);
    }
    test_rm_tree(d);
    free(d);
}
END_TEST

START_TEST(outputs_written_in_case_rank)
{
    char *d = test_case_tmpdir("case");
    put_qkv(d, 3, 1, 2, 3, 4, 2, 5, SMATTN_NPY_F32);
    put(d, "v.npy", SMATTN_NPY_F32, 3, (int64_t[]){3, 2, 6});
    smattn_case c;
    load_ok(d, &c);
    smattn_outputs out;
    char err[256], outdir[512], p[600];
    ck_assert(smattn_case_outputs_alloc(&c, SMATTN_BF16, 7, &out, err, sizeof err) == 0);
    snprintf(outdir, sizeof outdir, "%s/out", d);
    ck_assert_msg(smattn_case_write_outputs(&c, &out, outdir, err, sizeof err) == 0, "%s", err);
    ck_assert_int_eq(count_entries(outdir), 4); /* and the set's marker, .smattn-set */
    const char *names[3] = {"o.npy", "lse.npy", "p.npy"};
    const int64_t shapes[3][3] = {{2, 4, 6}, {4, 2, 0}, {4, 2, 3}};
    for (int k = 0; k < 3; k++) {
        smattn_npy a;
        snprintf(p, sizeof p, "%s/%s", outdir, names[k]);
        ck_assert_msg(smattn_npy_read(p, &a, err, sizeof err) == 0, "%s: %s", names[k], err);
        ck_assert_int_eq(a.rank, k == 1 ? 2 : 3);
        ck_assert_int_eq(a.type, SMATTN_NPY_U16);
        for (int r = 0; r < a.rank; r++)
            ck_assert_int_eq(a.shape[r], shapes[k][r]);
        smattn_npy_free(&a);
    }
    /* OUT is a file: an error, and nothing is left behind. */
    snprintf(p, sizeof p, "%s/afile", d);
    put_text(d, "afile", "x");
    ck_assert(smattn_case_write_outputs(&c, &out, p, err, sizeof err) != 0);
    ck_assert(strstr(err, "not a directory") != NULL);
    /* OUT cannot be created (missing parent). */
    snprintf(p, sizeof p, "%s/no/such/dir", d);
    ck_assert(smattn_case_write_outputs(&c, &out, p, err, sizeof err) != 0);
    smattn_case_outputs_free(&out);
    smattn_case_free(&c);
    test_rm_tree(d);
    free(d);
}
END_TEST

/* ALiBi's keys (SPEC 7.1, 2.8): the mode and the slopes reach the problem; every bad form is
 * one line naming the key. */
START_TEST(alibi_keys)
{
    char *d = test_case_tmpdir("case");
    put_qkv(d, 4, 2, 3, 4, 2, 1, 4, SMATTN_NPY_F32);
    put_text(d, "case.json", "{\"alibi_mode\": \"one_sided\", \"alibi_slopes\": [0.5, -0.125]}");
    smattn_case c;
    load_ok(d, &c);
    ck_assert_int_eq(c.prob.alibi_mode, SMATTN_ALIBI_ONE_SIDED);
    ck_assert(c.prob.alibi_slopes && c.prob.alibi_slopes[0] == 0.5f &&
              c.prob.alibi_slopes[1] == -0.125f && !c.prob.alibi_slopes_per_batch);
    smattn_case_free(&c);
    put_text(d, "case.json", "{\"alibi_mode\": \"symmetric\", \"alibi_slopes\": [[1, 2], [3, "
                             "0.0039215688593685627]]}");
    load_ok(d, &c);
    ck_assert_int_eq(c.prob.alibi_mode, SMATTN_ALIBI_SYMMETRIC);
    ck_assert(c.prob.alibi_slopes_per_batch && c.prob.alibi_slopes[2] == 3.0f &&
              c.prob.alibi_slopes[3] == (float)(1.0 / 255));
    smattn_case_free(&c);
    put_text(d, "case.json", "{\"alibi_mode\": \"symmetric\", \"alibi_slopes\": [0.1, 1]}");
    load_fails(d, "\"alibi_slopes\"[0] must be a finite binary32 number exactly, got 0.1");
    put_text(d, "case.json", "{\"alibi_mode\": \"symmetric\", \"alibi_slopes\": [1]}");
    load_fails(d, "\"alibi_slopes\" has 1 slopes, want Hq = 2");
    put_text(d, "case.json", "{\"alibi_mode\": \"symmetric\", \"alibi_slopes\": [[1, 2]]}");
    load_fails(d, "\"alibi_slopes\" has 1 lists, want B = 2");
    put_text(d, "case.json", "{\"alibi_mode\": \"symmetric\", \"alibi_slopes\": [[1, 2], [3]]}");
    load_fails(d, "\"alibi_slopes\"[1] must be an array of 2 numbers");
    put_text(d, "case.json", "{\"alibi_mode\": \"symmetric\"}");
    load_fails(d, "\"alibi_mode\" is given without \"alibi_slopes\"");
    put_text(d, "case.json", "{\"alibi_slopes\": [1, 2]}");
    load_fails(d, "\"alibi_slopes\" is given without \"alibi_mode\"");
    put_text(d, "case.json", "{\"alibi_mode\": \"sym\", \"alibi_slopes\": [1, 2]}");
    load_fails(d, "alibi_mode");
    put_text(d, "case.json", "{\"alibi_mode\": \"mask\", \"alibi_slopes\": [1, 2]}");
    load_fails(d, "\"mask\" needs bias.npy");
    put(d, "bias.npy", SMATTN_NPY_F16, 4, (int64_t[]){1, 1, 3, 4});
    load_ok(d, &c);
    ck_assert_int_eq(c.prob.alibi_mode, SMATTN_ALIBI_MASK);
    smattn_case_free(&c);
    test_rm_tree(d);
    free(d);
}
END_TEST

Suite *case_suite(void);
Suite *case_suite(void)
{
    Suite *s = suite_create("case");
    TCase *tc = tcase_create("case");
    tcase_set_timeout(tc, 60);
    tcase_add_test(tc, attention_3d_defaults);
    tcase_add_test(tc, alibi_keys);
    tcase_add_test(tc, attention_4d_broadcast_options);
    tcase_add_test(tc, bf16_sinks_softmax_fortran);
    tcase_add_test(tc, bad_files_rejected);
    tcase_add_test(tc, bad_dtypes_rejected);
    tcase_add_test(tc, bad_shapes_rejected);
    tcase_add_test(tc, bad_json_rejected);
    tcase_add_test(tc, json_from_memory);
    tcase_add_test(tc, json_strict_rfc8259);
    tcase_add_test(tc, json_mutations_never_crash);
    tcase_add_test(tc, json_many_keys_bounded_memory);
    tcase_add_test(tc, outputs_written_in_case_rank);
    tcase_add_test(tc, json_nul_refused);
    tcase_add_test(tc, unreadable_optional_inputs_are_errors);
    suite_add_tcase(s, tc);
    return s;
}
