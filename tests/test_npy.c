/* SPDX-License-Identifier: MIT */
/* test_npy.c: the .npy reader and writer: round trips, numpy's exact header layout, and
 * malformed, truncated and overflowing files rejected with a message (never a crash). */
#include <check.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "io/merge_case.h"
#include "io/npy.h"
#include "io/util.h"

/* A .npy file from a header dict and raw data: version v, padded to 64 like numpy. */
static unsigned char *make_npy(int v, const char *dict, const void *data, size_t nbytes,
                               size_t *len)
{
    size_t pre = v == 1 ? 10 : 12, dl = strlen(dict);
    size_t total = (pre + dl + 1 + 63) / 64 * 64, hlen = total - pre;
    unsigned char *b = malloc(total + nbytes + 1);
    ck_assert_ptr_nonnull(b);
    memcpy(b, "\x93NUMPY", 6);
    b[6] = (unsigned char)v;
    b[7] = 0;
    for (size_t k = 0; k < pre - 8; k++)
        b[8 + k] = (unsigned char)(hlen >> (8 * k));
    memcpy(b + pre, dict, dl);
    memset(b + pre + dl, ' ', hlen - dl - 1);
    b[total - 1] = '\n';
    if (nbytes)
        memcpy(b + total, data, nbytes);
    *len = total + nbytes;
    return b;
}

/* Parse must fail with a non-empty one-line message. */
static void expect_reject(const void *buf, size_t len, const char *what)
{
    smattn_npy a;
    char err[256] = "";
    int rc = smattn_npy_parse(buf, len, &a, err, sizeof err);
    ck_assert_msg(rc != 0, "accepted: %s", what);
    ck_assert_msg(err[0] != '\0' && !strchr(err, '\n'), "bad message for %s: '%s'", what, err);
    ck_assert_ptr_null(a.data);
}

static void expect_dict_reject(const char *dict, size_t nbytes, const char *needle)
{
    static const unsigned char zeros[64];
    size_t len;
    unsigned char *b = make_npy(1, dict, zeros, nbytes, &len);
    smattn_npy a;
    char err[256] = "";
    ck_assert_msg(smattn_npy_parse(b, len, &a, err, sizeof err) != 0, "accepted: %s", dict);
    ck_assert_msg(strstr(err, needle) != NULL, "%s: message '%s' lacks '%s'", dict, err, needle);
    free(b);
}

START_TEST(round_trip_every_type_and_rank)
{
    const smattn_npy_type types[] = {SMATTN_NPY_F64, SMATTN_NPY_F32,  SMATTN_NPY_F16,
                                     SMATTN_NPY_U16, SMATTN_NPY_BOOL, SMATTN_NPY_U8};
    const int64_t shape[4] = {2, 3, 1, 4};
    unsigned char data[24 * 8];
    for (size_t k = 0; k < sizeof data; k++)
        data[k] = (unsigned char)(k * 37 + 11);
    for (size_t ti = 0; ti < sizeof types / sizeof types[0]; ti++)
        for (int rank = 0; rank <= 4; rank++) {
            size_t len, count = 1;
            for (int r = 0; r < rank; r++)
                count *= (size_t)shape[r];
            char err[256];
            unsigned char *b =
                smattn_npy_encode(types[ti], rank, shape, data, &len, err, sizeof err);
            ck_assert_msg(b != NULL, "%s", err);
            /* numpy's layout: header padded to 64 bytes and ending in a newline. */
            size_t hl = (size_t)b[8] | (size_t)b[9] << 8;
            ck_assert_uint_eq((10 + hl) % 64, 0);
            ck_assert_int_eq(b[10 + hl - 1], '\n');
            smattn_npy a;
            ck_assert_msg(smattn_npy_parse(b, len, &a, err, sizeof err) == 0, "%s", err);
            ck_assert_int_eq(a.type, types[ti]);
            ck_assert_int_eq(a.rank, rank);
            ck_assert_int_eq(a.count, (int64_t)count);
            ck_assert_int_eq(a.fortran_order, 0);
            for (int r = 0; r < rank; r++)
                ck_assert_int_eq(a.shape[r], shape[r]);
            if (rank == 4)
                ck_assert(a.stride[0] == 12 && a.stride[1] == 4 && a.stride[2] == 4 &&
                          a.stride[3] == 1);
            ck_assert(memcmp(a.data, data, count * a.itemsize) == 0);
            smattn_npy_free(&a);
            free(b);
        }
}
END_TEST

START_TEST(header_matches_numpy)
{
    const int64_t shape[2] = {2, 3};
    double d[6] = {0, 1, 2, 3, 4, 5};
    size_t len;
    char err[128];
    unsigned char *b = smattn_npy_encode(SMATTN_NPY_F64, 2, shape, d, &len, err, sizeof err);
    ck_assert_ptr_nonnull(b);
    const char *dict = "{'descr': '<f8', 'fortran_order': False, 'shape': (2, 3), }";
    ck_assert_uint_eq(len, 128 + 48);
    ck_assert(memcmp(b, "\x93NUMPY\x01\x00\x76\x00", 10) == 0);
    ck_assert(memcmp(b + 10, dict, strlen(dict)) == 0);
    free(b);
    /* 1-D shapes carry the tuple comma; rank 0 is (); bf16 is written as '<u2'. */
    b = smattn_npy_encode(SMATTN_NPY_U16, 1, (int64_t[]){3}, (uint16_t[]){1, 2, 3}, &len, err,
                          sizeof err);
    ck_assert(strstr((char *)b + 10, "'descr': '<u2', 'fortran_order': False, 'shape': (3,), }"));
    free(b);
    b = smattn_npy_encode(SMATTN_NPY_BOOL, 0, NULL, (unsigned char[]){1}, &len, err, sizeof err);
    ck_assert(strstr((char *)b + 10, "'descr': '|b1', 'fortran_order': False, 'shape': (), }"));
    ck_assert_uint_eq(len, 128 + 1);
    free(b);
}
END_TEST

START_TEST(fortran_order_reports_strides)
{
    double d[6] = {0, 1, 2, 3, 4, 5}; /* column-major [2,3]: element (i,j) = d[i + 2j] */
    size_t len;
    unsigned char *b = make_npy(1, "{'descr': '<f8', 'fortran_order': True, 'shape': (2, 3), }", d,
                                sizeof d, &len);
    smattn_npy a;
    char err[128];
    ck_assert_msg(smattn_npy_parse(b, len, &a, err, sizeof err) == 0, "%s", err);
    ck_assert_int_eq(a.fortran_order, 1);
    ck_assert_int_eq(a.stride[0], 1);
    ck_assert_int_eq(a.stride[1], 2);
    const double *x = a.data;
    ck_assert(x[1 * a.stride[0] + 2 * a.stride[1]] == 5.0);
    smattn_npy_free(&a);
    free(b);
}
END_TEST

START_TEST(versions_orders_and_spellings)
{
    float f[3] = {1.5f, -2.0f, 0.25f};
    const char *dicts[] = {
        "{'shape': (3,), 'fortran_order': False, 'descr': '<f4'}",
        "{\"descr\": \"<f4\", \"fortran_order\": False, \"shape\": (3,)}",
        "{'descr':'<f4','fortran_order':False,'shape':(3L,),}",
        "{ 'descr' : '=f4' ,\n 'fortran_order' : False , 'shape' : ( 3 , ) , }",
    };
    for (int v = 1; v <= 3; v++)
        for (size_t k = 0; k < sizeof dicts / sizeof dicts[0]; k++) {
            size_t len;
            unsigned char *b = make_npy(v, dicts[k], f, sizeof f, &len);
            smattn_npy a;
            char err[128];
            ck_assert_msg(smattn_npy_parse(b, len, &a, err, sizeof err) == 0, "v%d %s: %s", v,
                          dicts[k], err);
            ck_assert_int_eq(a.version, v);
            ck_assert(((float *)a.data)[2] == 0.25f);
            smattn_npy_free(&a);
            free(b);
        }
}
END_TEST

START_TEST(bfloat16_void_and_big_endian)
{
    uint16_t bits[2] = {0x3f80, 0xc000}; /* bf16 1.0, -2.0 */
    const char *v2[] = {"{'descr': '|V2', 'fortran_order': False, 'shape': (2,), }",
                        "{'descr': '<V2', 'fortran_order': False, 'shape': (2,), }"};
    for (int k = 0; k < 2; k++) {
        size_t len;
        unsigned char *b = make_npy(1, v2[k], bits, sizeof bits, &len);
        smattn_npy a;
        char err[128];
        ck_assert_msg(smattn_npy_parse(b, len, &a, err, sizeof err) == 0, "%s", err);
        ck_assert_int_eq(a.type, SMATTN_NPY_BF16);
        ck_assert_uint_eq(((uint16_t *)a.data)[1], 0xc000);
        smattn_npy_free(&a);
        free(b);
    }
    /* '>f8': big-endian bytes of 1.0 are 3f f0 00 ...; loaded in host order. */
    unsigned char be[8] = {0x3f, 0xf0, 0, 0, 0, 0, 0, 0};
    size_t len;
    unsigned char *b =
        make_npy(1, "{'descr': '>f8', 'fortran_order': False, 'shape': (), }", be, 8, &len);
    smattn_npy a;
    char err[128];
    ck_assert_msg(smattn_npy_parse(b, len, &a, err, sizeof err) == 0, "%s", err);
    ck_assert(*(double *)a.data == 1.0);
    smattn_npy_free(&a);
    free(b);
}
END_TEST

START_TEST(malformed_headers_rejected)
{
    expect_dict_reject("{'descr': '<f8', 'fortran_order': False}", 0, "missing key 'shape'");
    expect_dict_reject("{'descr': '<f8', 'descr': '<f8', 'fortran_order': False, 'shape': ()}", 8,
                       "twice");
    expect_dict_reject("{'descr': '<f8', 'fortran_order': False, 'shape': (), 'x': 1}", 8,
                       "unknown key 'x'");
    expect_dict_reject("{'descr': '<c16', 'fortran_order': False, 'shape': ()}", 16,
                       "not supported");
    expect_dict_reject("{'descr': '<i2', 'fortran_order': False, 'shape': ()}", 2, "not supported");
    expect_dict_reject("{'descr': '|f8', 'fortran_order': False, 'shape': ()}", 8, "byte order");
    expect_dict_reject("{'descr': '>V2', 'fortran_order': False, 'shape': ()}", 2, "big-endian");
    expect_dict_reject("{'descr': [('a', '<f8')], 'fortran_order': False, 'shape': ()}", 8,
                       "structured");
    expect_dict_reject("{'descr': '<f8', 'fortran_order': 'no', 'shape': ()}", 8, "True or False");
    expect_dict_reject("{'descr': '<f8', 'fortran_order': Falsey, 'shape': ()}", 8,
                       "True or False");
    expect_dict_reject("{'descr': '<f8', 'fortran_order': False, 'shape': [1]}", 8, "'('");
    expect_dict_reject("{'descr': '<f8', 'fortran_order': False, 'shape': (1)}", 8, "not a tuple");
    expect_dict_reject("{'descr': '<f8', 'fortran_order': False, 'shape': (-1,)}", 8, "negative");
    expect_dict_reject("{'descr': '<f8', 'fortran_order': False, 'shape': (1,,)}", 8,
                       "expected an integer");
    expect_dict_reject("{'descr': '<f8', 'fortran_order': False, 'shape': (1 2)}", 8,
                       "expected ','");
    expect_dict_reject("{'descr': '<f8', 'fortran_order': False, 'shape': (1,1,1,1,1,1)}", 8,
                       "more than 5");
    expect_dict_reject("{'descr': '<f8', 'fortran_order': False, 'shape': "
                       "(99999999999999999999,)}",
                       8, "too large");
    expect_dict_reject("{'descr': '<f8', 'fortran_order': False, 'shape': "
                       "(4294967296, 4294967296)}",
                       8, "overflows");
    expect_dict_reject("{'descr': '<f8', 'fortran_order': False, 'shape': "
                       "(1152921504606846976,)}",
                       8, "overflows"); /* 2^60 * 8 bytes */
    expect_dict_reject("{'descr': '<f8', 'fortran_order': False, 'shape': "
                       "(1099511627776,)}",
                       8, "truncated data"); /* 2^40: no allocation */
    expect_dict_reject("{'descr': '<f8', 'fortran_order': False, 'shape': ()} x", 8,
                       "after the closing");
    expect_dict_reject("{'descr': '<f8, 'fortran_order': False, 'shape': ()}", 8, "header");
    expect_dict_reject("{'descr': '<f8' 'fortran_order': False, 'shape': ()}", 8, "expected ','");
    expect_dict_reject("['descr', '<f8']", 8, "expected '{'");
    expect_dict_reject("{'descr': '<f8', 'fortran_order': False, 'shape': (2,)}", 8,
                       "truncated data");
    expect_dict_reject("{'descr': '<f8', 'fortran_order': False, 'shape': (1,)}", 9,
                       "trailing bytes");
    expect_dict_reject("{'descr': '<f\\x38', 'fortran_order': False, 'shape': ()}", 8,
                       "inside a string");
}
END_TEST

START_TEST(bad_preambles_rejected)
{
    double d = 1.0;
    size_t len;
    unsigned char *good =
        make_npy(1, "{'descr': '<f8', 'fortran_order': False, 'shape': (), }", &d, 8, &len);
    expect_reject(good, 0, "empty");
    expect_reject("\x93NUMP", 5, "short magic");
    expect_reject("PK\x03\x04 not npy at all", 20, "zip");
    unsigned char *b = malloc(len);
    memcpy(b, good, len);
    b[6] = 4;
    expect_reject(b, len, "version 4.0");
    b[6] = 1;
    b[7] = 1;
    expect_reject(b, len, "version 1.1");
    b[7] = 0;
    b[8] = 0xff;
    b[9] = 0xff; /* header longer than the file */
    expect_reject(b, len, "header past end");
    b[8] = 0;
    b[9] = 0; /* empty header */
    expect_reject(b, len, "empty header");
    memcpy(b, good, len);
    b[20] = '\0'; /* a NUL inside the dict */
    expect_reject(b, len, "NUL in header");
    /* Every truncation of a valid file is rejected. */
    for (size_t n = 0; n < len; n++)
        expect_reject(good, n, "truncation");
    free(b);
    free(good);
}
END_TEST

/* Random single- and multi-byte mutations of a valid file: each parse either succeeds with
 * a consistent result or fails with a message; under ASan nothing reads out of bounds. */
START_TEST(mutations_never_crash)
{
    const unsigned seed = 12345u;
    srand(seed);
    float f[6] = {1, 2, 3, 4, 5, 6};
    size_t len;
    unsigned char *good = make_npy(1,
                                   "{'descr': '<f4', 'fortran_order': False, "
                                   "'shape': (2, 3), }",
                                   f, sizeof f, &len);
    unsigned char *b = malloc(len);
    for (int it = 0; it < 20000; it++) {
        memcpy(b, good, len);
        int nm = 1 + rand() % 4;
        for (int m = 0; m < nm; m++)
            b[(size_t)rand() % len] = (unsigned char)rand();
        size_t n = rand() % 8 ? len : (size_t)rand() % (len + 1);
        /* Copy into an exact-size buffer so ASan sees any overread. */
        unsigned char *exact = malloc(n ? n : 1);
        memcpy(exact, b, n);
        smattn_npy a;
        char err[256] = "";
        if (smattn_npy_parse(exact, n, &a, err, sizeof err) == 0) {
            ck_assert_msg((size_t)a.count * a.itemsize + a.data_offset == n, "seed %u it %d", seed,
                          it);
            smattn_npy_free(&a);
        } else
            ck_assert_msg(err[0] != '\0', "seed %u it %d: empty message", seed, it);
        free(exact);
    }
    free(b);
    free(good);
}
END_TEST

START_TEST(files_read_and_write)
{
    char dir[] = "/tmp/smattn_npy_XXXXXX";
    ck_assert_ptr_nonnull(mkdtemp(dir));
    char path[256], err[256];
    snprintf(path, sizeof path, "%s/a.npy", dir);
    const int64_t shape[3] = {2, 2, 2};
    double d[8] = {1, -0.0, 3, 4, 5, 6, 7, 0x1p-1074};
    ck_assert_msg(smattn_npy_write(path, SMATTN_NPY_F64, 3, shape, d, err, sizeof err) == 0, "%s",
                  err);
    smattn_npy a;
    ck_assert_msg(smattn_npy_read(path, &a, err, sizeof err) == 0, "%s", err);
    ck_assert(memcmp(a.data, d, sizeof d) == 0);
    ck_assert_int_eq(a.rank, 3);
    smattn_npy_free(&a);
    /* A directory, a missing file and a truncated file are errors. */
    ck_assert(smattn_npy_read(dir, &a, err, sizeof err) != 0);
    ck_assert(strstr(err, "regular") != NULL);
    snprintf(path, sizeof path, "%s/missing.npy", dir);
    ck_assert(smattn_npy_read(path, &a, err, sizeof err) != 0);
    snprintf(path, sizeof path, "%s/a.npy", dir);
    ck_assert(truncate(path, 100) == 0);
    ck_assert(smattn_npy_read(path, &a, err, sizeof err) != 0);
    ck_assert_msg(strstr(err, "truncated") != NULL, "%s", err);
    unlink(path);
    rmdir(dir);
}
END_TEST

/* The header alone (cost before work): a file whose header claims 64 GiB that
 * are a hole gives its shape with no data read; a truncated one is refused from its size;
 * the data read later must come from the same header. */
START_TEST(header_first_then_data)
{
    char dir[] = "/tmp/smattn_npy_XXXXXX";
    ck_assert_ptr_nonnull(mkdtemp(dir));
    char path[256], err[256];
    snprintf(path, sizeof path, "%s/big.npy", dir);
    const int64_t one[1] = {1};
    float f = 1;
    ck_assert(smattn_npy_write(path, SMATTN_NPY_F32, 1, one, &f, err, sizeof err) == 0);
    /* rewrite the header's shape (1,) as (17179869184,): 2^34 floats, then grow the hole */
    FILE *fp = fopen(path, "r+b");
    ck_assert_ptr_nonnull(fp);
    char hdr[128];
    ck_assert_int_eq(fread(hdr, 1, 10, fp), 10);
    size_t hl = 10 + (unsigned char)hdr[8] + 256u * (unsigned char)hdr[9];
    ck_assert(hl <= sizeof hdr);
    ck_assert_int_eq(fread(hdr + 10, 1, hl - 10, fp), hl - 10);
    char *sp = strstr(hdr + 10, "(1,)");
    ck_assert_ptr_nonnull(sp);
    memcpy(sp, "(17179869184,), }", 17);
    for (char *q = sp + 17; q < hdr + hl - 1; q++)
        *q = ' ';
    rewind(fp);
    ck_assert_int_eq(fwrite(hdr, 1, hl, fp), hl);
    fclose(fp);
    ck_assert(truncate(path, (off_t)hl + ((off_t)1 << 36)) == 0);
    smattn_npy a;
    ck_assert_msg(smattn_npy_read_header(path, &a, err, sizeof err) == 0, "%s", err);
    ck_assert(a.data == NULL && a.rank == 1 && a.shape[0] == (int64_t)1 << 34);
    ck_assert(truncate(path, (off_t)hl + ((off_t)1 << 35)) == 0);
    ck_assert(smattn_npy_read_header(path, &a, err, sizeof err) != 0);
    ck_assert_msg(strstr(err, "truncated") != NULL, "%s", err);
    /* the file replaced between header and data */
    snprintf(path, sizeof path, "%s/a.npy", dir);
    const int64_t two[1] = {2};
    float g[2] = {1, 2};
    ck_assert(smattn_npy_write(path, SMATTN_NPY_F32, 1, two, g, err, sizeof err) == 0);
    ck_assert(smattn_npy_read_header(path, &a, err, sizeof err) == 0);
    ck_assert(smattn_npy_write(path, SMATTN_NPY_F32, 1, one, g, err, sizeof err) == 0);
    ck_assert(smattn_npy_read_data(path, &a, err, sizeof err) != 0);
    ck_assert_msg(strstr(err, "changed") != NULL, "%s", err);
    ck_assert(smattn_npy_read_header(path, &a, err, sizeof err) == 0);
    ck_assert_msg(smattn_npy_read_data(path, &a, err, sizeof err) == 0, "%s", err);
    ck_assert(a.data && ((float *)a.data)[0] == 1);
    smattn_npy_free(&a);
    unlink(path);
    snprintf(path, sizeof path, "%s/big.npy", dir);
    unlink(path);
    rmdir(dir);
}
END_TEST

/* smattn_io_npy_load, the one reader of dir/name for case and merge case directories: the
 * header, then the data, with 0; a failure 1 with the reader's message left unnamed (each
 * directory kind names the file its own way: a merge case "o_parts.npy: ", a case its path
 * when the file cannot be opened); and smattn_io_shape_str's "[d0,d1]", cut to its buffer. */
START_TEST(dir_load_names_left_to_caller)
{
    char dir[] = "/tmp/smattn_npy_XXXXXX";
    ck_assert_ptr_nonnull(mkdtemp(dir));
    char path[256], err[256] = "";
    snprintf(path, sizeof path, "%s/a.npy", dir);
    const int64_t shape[2] = {2, 3};
    const float f[6] = {1, 2, 3, 4, 5, 6};
    ck_assert(smattn_npy_write(path, SMATTN_NPY_F32, 2, shape, f, err, sizeof err) == 0);
    smattn_npy a;
    ck_assert_msg(smattn_io_npy_load(dir, "a.npy", 0, &a, err, sizeof err) == 0, "%s", err);
    ck_assert(a.data == NULL && a.rank == 2 && a.shape[0] == 2 && a.shape[1] == 3);
    char sh[16];
    smattn_io_shape_str(&a, sh, sizeof sh);
    ck_assert_str_eq(sh, "[2,3]");
    smattn_io_shape_str(&a, sh, 4);
    ck_assert_str_eq(sh, "[2,");
    ck_assert_msg(smattn_io_npy_load(dir, "a.npy", 1, &a, err, sizeof err) == 0, "%s", err);
    ck_assert(a.data && memcmp(a.data, f, sizeof f) == 0);
    smattn_npy_free(&a);
    ck_assert_int_eq(smattn_io_npy_load(dir, "none.npy", 0, &a, err, sizeof err), 1);
    ck_assert_msg(err[0] && strstr(err, "none.npy") == NULL, "%s", err);
    /* a merge case names the file it could not read */
    char from[256];
    snprintf(from, sizeof from, "%s/a.npy", dir);
    snprintf(path, sizeof path, "%s/o_parts.npy", dir);
    ck_assert(rename(from, path) == 0);
    smattn_merge_case mc;
    ck_assert(smattn_merge_case_load(dir, &mc, err, sizeof err) != 0);
    ck_assert_msg(strncmp(err, "lse_parts.npy: ", 15) == 0, "%s", err);
    unlink(path);
    rmdir(dir);
}
END_TEST

Suite *npy_suite(void);
Suite *npy_suite(void)
{
    Suite *s = suite_create("npy");
    TCase *tc = tcase_create("npy");
    tcase_set_timeout(tc, 60);
    tcase_add_test(tc, round_trip_every_type_and_rank);
    tcase_add_test(tc, header_matches_numpy);
    tcase_add_test(tc, fortran_order_reports_strides);
    tcase_add_test(tc, versions_orders_and_spellings);
    tcase_add_test(tc, bfloat16_void_and_big_endian);
    tcase_add_test(tc, malformed_headers_rejected);
    tcase_add_test(tc, bad_preambles_rejected);
    tcase_add_test(tc, mutations_never_crash);
    tcase_add_test(tc, files_read_and_write);
    tcase_add_test(tc, header_first_then_data);
    tcase_add_test(tc, dir_load_names_left_to_caller);
    suite_add_tcase(s, tc);
    return s;
}
