/* SPDX-License-Identifier: MIT */
/* test_case_layout.c: ragged and paged case directories (SPEC 7.1): cu_seqlens_q/k,
 * seqused_k, block_table.npy (i4, i8, NHD, HND), FlashInfer's CSR keys; every bad key and
 * table rejected with one line naming the key and entry; the dense twin; and the oracle on
 * a layout case against the oracle on its twin. */
#include <check.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "io/case.h"
#include "io/util.h"
#include "tests/support/case_dir.h"
#include "tests/support/fs.h"

/* the shared helpers (tests/support/case_dir.h) under this suite's short names */
#define put_text test_put_text
#define load_ok test_case_load_ok
#define load_fails test_case_load_fails

static void rm(const char *dir, const char *name)
{
    char p[512];
    snprintf(p, sizeof p, "%s/%s", dir, name);
    unlink(p);
}

/* An f64 array whose element e holds base + e / 64 (each distinct, exact). */
static void put_f64(const char *dir, const char *name, int rank, const int64_t *shape, double base)
{
    int64_t n = 1;
    for (int r = 0; r < rank; r++)
        n *= shape[r];
    double *x = malloc((size_t)n * sizeof *x);
    for (int64_t e = 0; e < n; e++)
        x[e] = base + (double)(e % 97) / 64.0 - 0.75;
    char p[512], err[256];
    snprintf(p, sizeof p, "%s/%s", dir, name);
    ck_assert_msg(smattn_npy_write(p, SMATTN_NPY_F64, rank, shape, x, err, sizeof err) == 0, "%s",
                  err);
    free(x);
}

static void put_ints(const char *dir, const char *name, smattn_npy_type t, int64_t rows,
                     int64_t cols, const int64_t *v)
{
    char p[512], err[256];
    snprintf(p, sizeof p, "%s/%s", dir, name);
    int64_t shape[2] = {rows, cols};
    void *buf = malloc((size_t)(rows * cols) * 8);
    for (int64_t e = 0; e < rows * cols; e++) {
        if (t == SMATTN_NPY_I32) {
            int32_t w = (int32_t)v[e];
            memcpy((char *)buf + e * 4, &w, 4);
        } else
            memcpy((char *)buf + e * 8, &v[e], 8);
    }
    ck_assert_msg(smattn_npy_write(p, t, 2, shape, buf, err, sizeof err) == 0, "%s", err);
    free(buf);
}

/* The running example: B = 3 sequences of 3, 1, 4 queries (total_q 8), Hq 4, Hkv 2, D 16,
 * Dv 8; paged keys of 5, 3, 10 tokens in 6 pages of 4 slots (NHD or HND). */
static const int64_t ex_table[9] = {0, 1, -1, 2, -1, -1, 3, 4, 5};

static void put_paged(const char *dir, int hnd, smattn_npy_type tt)
{
    put_f64(dir, "q.npy", 3, (int64_t[]){8, 4, 16}, 0);
    put_f64(dir, "k.npy", 4, hnd ? (int64_t[]){6, 2, 4, 16} : (int64_t[]){6, 4, 2, 16}, 1);
    put_f64(dir, "v.npy", 4, hnd ? (int64_t[]){6, 2, 4, 8} : (int64_t[]){6, 4, 2, 8}, 2);
    put_ints(dir, "block_table.npy", tt, 3, 3, ex_table);
    put_text(dir, "case.json",
             hnd ? "{\"cu_seqlens_q\": [0, 3, 4, 8], \"kv_lens\": [5, 3, 10], \"kv_layout\": "
                   "\"HND\", \"causal\": \"lower_right\"}"
                 : "{\"cu_seqlens_q\": [0, 3, 4, 8], \"kv_lens\": [5, 3, 10], \"causal\": "
                   "\"lower_right\"}");
}

/* ---- good cases ------------------------------------------------------------------------ */

START_TEST(paged_nhd_packed_q)
{
    char *d = test_case_tmpdir("layout");
    put_paged(d, 0, SMATTN_NPY_I32);
    smattn_case c;
    load_ok(d, &c);
    const smattn_problem *p = &c.prob;
    ck_assert(c.has_layout && c.packed_q && c.paged && !c.packed_k);
    ck_assert_ptr_eq(p->layout, &c.layout);
    ck_assert(p->B == 3 && p->S == 4 && p->T == 10 && p->Hq == 4 && p->Hkv == 2 && p->D == 16 &&
              p->Dv == 8);
    ck_assert_ptr_null(p->q_lens);
    ck_assert(p->kv_lens && p->kv_lens[2] == 10);
    ck_assert(c.layout.cu_seqlens_q[3] == 8 && !c.layout.cu_seqlens_k);
    ck_assert(c.layout.max_pages == 3 && c.layout.bt_stride == 3 && c.layout.num_pages == 6 &&
              c.layout.page_size == 4);
    for (int e = 0; e < 9; e++)
        ck_assert_int_eq(c.layout.block_table[e], ex_table[e]);
    /* Q [1,total_q,Hq,D]; K pages [6,4,2,16] as they are */
    ck_assert(c.in.q.stride[1] == 64 && c.in.q.stride[2] == 16 && c.in.q.stride[3] == 1);
    ck_assert(c.in.k.stride[0] == 128 && c.in.k.stride[1] == 32 && c.in.k.stride[2] == 16 &&
              c.in.k.stride[3] == 1);
    /* outputs: o [total_q,Hq,Dv], lse [Hq,total_q] packed; p [B,Hq,S,T] */
    int64_t sh[4], st[4];
    ck_assert_int_eq(smattn_case_out_layout(&c, 0, sh, st), 3);
    ck_assert(sh[0] == 8 && sh[1] == 4 && sh[2] == 8);
    ck_assert(st[1] == 32 && st[2] == 8 && st[3] == 1);
    ck_assert_int_eq(smattn_case_out_layout(&c, 1, sh, st), 2);
    ck_assert(sh[0] == 4 && sh[1] == 8 && st[1] == 8 && st[2] == 1);
    ck_assert_int_eq(smattn_case_out_layout(&c, 2, sh, st), 4);
    ck_assert(sh[0] == 3 && sh[1] == 4 && sh[2] == 4 && sh[3] == 10);
    smattn_case_free(&c);
    /* the same table as i8 */
    put_paged(d, 0, SMATTN_NPY_I64);
    load_ok(d, &c);
    ck_assert_int_eq(c.layout.block_table[7], 4);
    smattn_case_free(&c);
    test_rm_tree(d);
    free(d);
}
END_TEST

START_TEST(paged_hnd_strides)
{
    char *d = test_case_tmpdir("layout");
    put_paged(d, 1, SMATTN_NPY_I32);
    smattn_case c;
    load_ok(d, &c);
    ck_assert(c.layout.page_size == 4 && c.layout.num_pages == 6 && c.prob.Hkv == 2);
    /* k.npy [6,2,4,16] read as [pages, slots, heads, D]: the slot stride is 16, the head's 64 */
    ck_assert(c.in.k.stride[0] == 128 && c.in.k.stride[1] == 16 && c.in.k.stride[2] == 64 &&
              c.in.k.stride[3] == 1);
    ck_assert(c.in.v.stride[0] == 64 && c.in.v.stride[1] == 8 && c.in.v.stride[2] == 32);
    smattn_case_free(&c);
    test_rm_tree(d);
    free(d);
}
END_TEST

START_TEST(packed_k_seqused)
{
    char *d = test_case_tmpdir("layout");
    put_f64(d, "q.npy", 3, (int64_t[]){5, 2, 4}, 0);
    put_f64(d, "k.npy", 3, (int64_t[]){9, 1, 4}, 1);
    put_f64(d, "v.npy", 3, (int64_t[]){9, 1, 3}, 2);
    put_text(d, "case.json",
             "{\"cu_seqlens_q\": [0, 2, 5], \"cu_seqlens_k\": [0, 6, 9], \"seqused_k\": [4, 3]}");
    smattn_case c;
    load_ok(d, &c);
    ck_assert(c.packed_q && c.packed_k && !c.paged);
    ck_assert(c.prob.B == 2 && c.prob.S == 3 && c.prob.T == 4 && c.prob.Dv == 3);
    ck_assert_ptr_null(c.prob.kv_lens);
    ck_assert(c.layout.seqused_k[0] == 4 && c.layout.cu_seqlens_k[2] == 9);
    ck_assert(c.in.k.stride[1] == 4 && c.in.v.stride[1] == 3);
    smattn_case_free(&c);
    /* dense q (4-D, B = 2) with packed keys and no seqused_k: T the longest slice */
    put_f64(d, "q.npy", 4, (int64_t[]){2, 3, 2, 4}, 0);
    put_text(d, "case.json", "{\"cu_seqlens_k\": [0, 2, 9]}");
    load_ok(d, &c);
    ck_assert(!c.packed_q && c.packed_k && c.rank == 4 && c.prob.T == 7 && c.prob.S == 3);
    int64_t sh[4], st[4];
    ck_assert_int_eq(smattn_case_out_layout(&c, 0, sh, st), 4); /* o dense [B,S,Hq,Dv] */
    smattn_case_free(&c);
    test_rm_tree(d);
    free(d);
}
END_TEST

START_TEST(flashinfer_csr)
{
    char *d = test_case_tmpdir("layout");
    put_f64(d, "q.npy", 4, (int64_t[]){3, 1, 4, 16}, 0); /* decode: one query per sequence */
    put_f64(d, "k.npy", 4, (int64_t[]){6, 4, 2, 16}, 1);
    put_f64(d, "v.npy", 4, (int64_t[]){6, 4, 2, 8}, 2);
    /* pages: seq 0 {5, 1} with 3 in the last, seq 1 none, seq 2 {0, 2, 4} full */
    put_text(d, "case.json",
             "{\"kv_indptr\": [0, 2, 2, 5], \"kv_indices\": [5, 1, 0, 2, 4], "
             "\"kv_last_page_len\": [3, 0, 4]}");
    smattn_case c;
    load_ok(d, &c);
    ck_assert(c.paged && !c.packed_q && c.prob.B == 3 && c.prob.T == 12);
    ck_assert(c.prob.kv_lens[0] == 7 && c.prob.kv_lens[1] == 0 && c.prob.kv_lens[2] == 12);
    ck_assert(c.layout.max_pages == 3 && c.layout.bt_stride == 3);
    const int32_t want[9] = {5, 1, -1, -1, -1, -1, 0, 2, 4};
    for (int e = 0; e < 9; e++)
        ck_assert_int_eq(c.layout.block_table[e], want[e]);
    smattn_case_free(&c);
    /* the same with kv_layout HND */
    put_f64(d, "k.npy", 4, (int64_t[]){6, 2, 4, 16}, 1);
    put_f64(d, "v.npy", 4, (int64_t[]){6, 2, 4, 8}, 2);
    put_text(d, "case.json",
             "{\"kv_indptr\": [0, 2, 2, 5], \"kv_indices\": [5, 1, 0, 2, 4], "
             "\"kv_last_page_len\": [3, 0, 4], \"kv_layout\": \"HND\"}");
    load_ok(d, &c);
    ck_assert(c.layout.page_size == 4 && c.in.k.stride[2] == 64);
    smattn_case_free(&c);
    test_rm_tree(d);
    free(d);
}
END_TEST

/* ---- bad cases ------------------------------------------------------------------------- */

START_TEST(bad_cu_seqlens)
{
    char *d = test_case_tmpdir("layout");
    put_f64(d, "q.npy", 3, (int64_t[]){8, 4, 16}, 0);
    put_f64(d, "k.npy", 3, (int64_t[]){7, 2, 16}, 1);
    put_f64(d, "v.npy", 3, (int64_t[]){7, 2, 8}, 2);
    static const struct {
        const char *json, *needle;
    } bad[] = {
        {"{\"cu_seqlens_q\": [8]}", "\"cu_seqlens_q\" has 1 entries; want B + 1 >= 2"},
        {"{\"cu_seqlens_q\": [1, 8]}", "\"cu_seqlens_q\"[0] = 1, want 0"},
        {"{\"cu_seqlens_q\": [0, 5, 3, 8]}",
         "\"cu_seqlens_q\"[2] = 3 is less than \"cu_seqlens_q\"[1] = 5"},
        {"{\"cu_seqlens_q\": [0, 3, 7]}", "\"cu_seqlens_q\"[2] = 7, want q.npy's row count 8"},
        {"{\"cu_seqlens_q\": [0, 3, 8], \"q_lens\": [1, 2]}",
         "\"cu_seqlens_q\" and \"q_lens\" cannot both"},
        {"{\"cu_seqlens_q\": [0, 3, 8], \"cu_seqlens_k\": [0, 7]}",
         "\"cu_seqlens_k\" has 2 entries, want B + 1 = 3 (B from \"cu_seqlens_q\")"},
        {"{\"cu_seqlens_q\": [0, 3, 8], \"cu_seqlens_k\": [0, 4, 6]}",
         "\"cu_seqlens_k\"[2] = 6, want k.npy's row count 7"},
        {"{\"cu_seqlens_q\": [0, 3, 8], \"cu_seqlens_k\": [0, 4, 7], \"kv_lens\": [1, 1]}",
         "\"cu_seqlens_k\" and \"kv_lens\" cannot both"},
        {"{\"cu_seqlens_q\": [0, 3, 8], \"cu_seqlens_k\": [0, 4, 7], \"seqused_k\": [4]}",
         "\"seqused_k\" has 1 entries, want B = 2"},
        {"{\"cu_seqlens_q\": [0, 3, 8], \"cu_seqlens_k\": [0, 4, 7], \"seqused_k\": [4, 4]}",
         "\"seqused_k\"[1] = 4 is outside [0, 3]"},
        {"{\"cu_seqlens_q\": [0, 3, 8], \"cu_seqlens_k\": [0, 4, 7], \"seqused_k\": [-1, 1]}",
         "\"seqused_k\"[0] = -1 is outside [0, 4]"},
        {"{\"cu_seqlens_q\": [0, 3, 8], \"seqused_k\": [1, 1]}",
         "\"seqused_k\" needs \"cu_seqlens_k\""},
        {"{\"cu_seqlens_q\": [0, 3, 8], \"kv_layout\": \"HND\"}",
         "\"kv_layout\" applies to page caches"},
        {"{\"cu_seqlens_q\": [0, 3, 8], \"kv_layout\": \"NDH\"}",
         "\"kv_layout\" must be \"NHD\" or \"HND\""},
        {"{\"cu_seqlens_q\": null}", "\"cu_seqlens_q\" must be an array of integers"},
        {"{\"cu_seqlens_q\": [0, 2.5, 8]}", "\"cu_seqlens_q\"[1] is not an integer"},
        {"{\"cu_seqlens_k\": [0, \"7\"]}", "\"cu_seqlens_k\"[1] is not an integer"},
        /* dense keys beside packed queries: k.npy 3-D means B = 1 */
        {"{\"cu_seqlens_q\": [0, 3, 8]}",
         "k.npy: batch size 1 (3-D), but B = 2 from \"cu_seqlens_q\""},
    };
    for (size_t n = 0; n < sizeof bad / sizeof bad[0]; n++) {
        put_text(d, "case.json", bad[n].json);
        load_fails(d, bad[n].needle);
    }
    /* q.npy 4-D with cu_seqlens_q */
    put_f64(d, "q.npy", 4, (int64_t[]){1, 8, 4, 16}, 0);
    put_text(d, "case.json", "{\"cu_seqlens_q\": [0, 8]}");
    load_fails(d, "q.npy: shape [1,8,4,16] has rank 4; want [total_q,Hq,D] with \"cu_seqlens_q\"");
    /* the packed keys must be 3-D */
    put_f64(d, "q.npy", 3, (int64_t[]){8, 4, 16}, 0);
    put_f64(d, "k.npy", 4, (int64_t[]){1, 7, 2, 16}, 1);
    put_text(d, "case.json", "{\"cu_seqlens_q\": [0, 8], \"cu_seqlens_k\": [0, 7]}");
    load_fails(d, "k.npy: shape [1,7,2,16] has rank 4; with \"cu_seqlens_k\" want [total_k,Hkv,D]");
    /* a softmax has no layout */
    rm(d, "q.npy"), rm(d, "k.npy"), rm(d, "v.npy");
    put_f64(d, "x.npy", 3, (int64_t[]){2, 3, 4}, 0);
    load_fails(d, "case.json: a softmax case (x.npy) has no ragged or paged layout");
    test_rm_tree(d);
    free(d);
}
END_TEST

START_TEST(bad_block_tables)
{
    char *d = test_case_tmpdir("layout");
    put_paged(d, 0, SMATTN_NPY_I64);
    smattn_case c;
    /* i8 entries outside int32, used or not, are named */
    int64_t t[9];
    memcpy(t, ex_table, sizeof t);
    t[5] = (int64_t)1 << 32;
    put_ints(d, "block_table.npy", SMATTN_NPY_I64, 3, 3, t);
    load_fails(d, "block_table.npy: entry [1][2] = 4294967296 does not fit in int32");
    t[5] = -2147483649LL;
    put_ints(d, "block_table.npy", SMATTN_NPY_I64, 3, 3, t);
    load_fails(d, "block_table.npy: entry [1][2] = -2147483649 does not fit in int32");
    /* a used page outside [0, num_pages); an unused one may be anything in int32 */
    memcpy(t, ex_table, sizeof t);
    t[8] = 6;
    put_ints(d, "block_table.npy", SMATTN_NPY_I32, 3, 3, t);
    load_fails(d, "block_table.npy: entry [2][2] = 6 is outside [0, num_pages) = [0, 6) (sequence "
                  "2 uses 3 pages)");
    t[8] = 5, t[1] = -1;
    put_ints(d, "block_table.npy", SMATTN_NPY_I32, 3, 3, t);
    load_fails(d, "block_table.npy: entry [0][1] = -1 is outside");
    t[1] = 1, t[2] = 99;
    put_ints(d, "block_table.npy", SMATTN_NPY_I32, 3, 3, t);
    load_ok(d, &c);
    smattn_case_free(&c);
    /* shape, dtype, rows */
    put_ints(d, "block_table.npy", SMATTN_NPY_I32, 2, 3, ex_table);
    load_fails(d, "block_table.npy: 2 rows, want B = 3 (B from \"cu_seqlens_q\")");
    put_f64(d, "block_table.npy", 2, (int64_t[]){3, 3}, 0);
    load_fails(d, "block_table.npy: dtype '<f8' is not an integer type (want '<i4' or '<i8')");
    put_f64(d, "block_table.npy", 1, (int64_t[]){3}, 0);
    load_fails(d, "block_table.npy: dtype '<f8'");
    char p[512], err[256];
    snprintf(p, sizeof p, "%s/block_table.npy", d);
    int32_t nine[9] = {0};
    ck_assert(smattn_npy_write(p, SMATTN_NPY_I32, 1, (int64_t[]){9}, nine, err, sizeof err) == 0);
    load_fails(d, "block_table.npy: shape [9] has rank 1; want [B,max_pages]");
    put_ints(d, "block_table.npy", SMATTN_NPY_I32, 3, 3, ex_table);
    /* kv_lens: required, B entries, within the table's capacity (3 pages of 4) */
    put_text(d, "case.json", "{\"cu_seqlens_q\": [0, 3, 4, 8]}");
    load_fails(d, "case.json: \"kv_lens\" is required with block_table.npy");
    put_text(d, "case.json", "{\"cu_seqlens_q\": [0, 3, 4, 8], \"kv_lens\": [5, 3]}");
    load_fails(d, "case.json: \"kv_lens\" has 2 entries, want B = 3");
    put_text(d, "case.json", "{\"cu_seqlens_q\": [0, 3, 4, 8], \"kv_lens\": [5, 13, 1]}");
    load_fails(d, "case.json: \"kv_lens\"[1] = 13 is outside [0, max_pages * page_size] = [0, 12]");
    put_text(d, "case.json",
             "{\"cu_seqlens_q\": [0, 3, 4, 8], \"kv_lens\": [5, 3, 10], \"cu_seqlens_k\": [0, 1, "
             "2, 3]}");
    load_fails(d, "\"cu_seqlens_k\" and block_table.npy cannot both");
    /* the caches: 4-D, v like k */
    put_text(d, "case.json", "{\"cu_seqlens_q\": [0, 3, 4, 8], \"kv_lens\": [5, 3, 10]}");
    put_f64(d, "v.npy", 4, (int64_t[]){6, 4, 1, 8}, 2);
    load_fails(d, "v.npy: shape [6,4,1,8] does not match k.npy's KV head count Hkv = 2");
    put_f64(d, "v.npy", 4, (int64_t[]){5, 4, 2, 8}, 2);
    load_fails(d, "v.npy: shape [5,4,2,8] does not match k.npy's num_pages 6");
    put_f64(d, "v.npy", 3, (int64_t[]){24, 2, 8}, 2);
    load_fails(d, "v.npy: shape [24,2,8] has rank 3; a page cache is [num_pages,page_size,Hkv,D]");
    test_rm_tree(d);
    free(d);
}
END_TEST

START_TEST(bad_csr)
{
    char *d = test_case_tmpdir("layout");
    put_f64(d, "q.npy", 4, (int64_t[]){3, 1, 4, 16}, 0);
    put_f64(d, "k.npy", 4, (int64_t[]){6, 4, 2, 16}, 1);
    put_f64(d, "v.npy", 4, (int64_t[]){6, 4, 2, 8}, 2);
#define CSR(ip, ix, lp) "{\"kv_indptr\": " ip ", \"kv_indices\": " ix ", \"kv_last_page_len\": " lp
    static const struct {
        const char *json, *needle;
    } bad[] = {
        {"{\"kv_indptr\": [0, 1, 1, 1], \"kv_indices\": [0]}",
         "case.json: \"kv_last_page_len\" is missing"},
        {"{\"kv_indices\": [0], \"kv_last_page_len\": [1, 0, 0]}",
         "case.json: \"kv_indptr\" is missing"},
        {CSR("[0, 1, 1]", "[0]", "[1, 0, 0]") "}",
         "\"kv_indptr\" has 3 entries, want B + 1 = 4 (B from q.npy)"},
        {CSR("[0, 1, 1, 2]", "[0]", "[1, 0, 0]") "}",
         "\"kv_indptr\"[3] = 2, want \"kv_indices\"'s row count 1"},
        {CSR("[0, 2, 1, 2]", "[0, 1]", "[1, 0, 0]") "}",
         "\"kv_indptr\"[2] = 1 is less than \"kv_indptr\"[1] = 2"},
        {CSR("[0, 1, 1, 1]", "[6]", "[1, 0, 0]") "}",
         "\"kv_indices\"[0] = 6 is outside [0, num_pages) = [0, 6)"},
        {CSR("[0, 1, 1, 1]", "[-1]", "[1, 0, 0]") "}", "\"kv_indices\"[0] = -1 is outside"},
        {CSR("[0, 1, 1, 1]", "[0]", "[1, 0]") "}",
         "\"kv_last_page_len\" has 2 entries, want B = 3"},
        {CSR("[0, 1, 1, 1]", "[0]", "[5, 0, 0]") "}",
         "\"kv_last_page_len\"[0] = 5, want 1..page_size (sequence 0 has 1 pages)"},
        {CSR("[0, 1, 1, 1]", "[0]", "[0, 0, 0]") "}",
         "\"kv_last_page_len\"[0] = 0, want 1..page_size"},
        {CSR("[0, 1, 1, 1]", "[0]", "[1, 2, 0]") "}",
         "\"kv_last_page_len\"[1] = 2, want 0 (sequence 1 has 0 pages)"},
        {CSR("[0, 1, 1, 1]", "[0]", "[1, 0, 0]") ", \"kv_lens\": [1, 0, 0]}",
         "\"kv_indptr\" and \"kv_lens\" cannot both"},
        {CSR("[0, 1, 1, 1]", "[0]", "[1, 0, 0]") ", \"cu_seqlens_k\": [0, 1, 1, 1]}",
         "\"cu_seqlens_k\" and \"kv_indptr\" cannot both"},
        {CSR("[0, 1, 1, 1]", "[0]", "[1, 0, 0]") ", \"kv_layout\": 1}",
         "\"kv_layout\" must be \"NHD\" or \"HND\""},
    };
#undef CSR
    for (size_t n = 0; n < sizeof bad / sizeof bad[0]; n++) {
        put_text(d, "case.json", bad[n].json);
        load_fails(d, bad[n].needle);
    }
    put_ints(d, "block_table.npy", SMATTN_NPY_I32, 3, 1, (int64_t[]){0, 1, 2});
    put_text(d, "case.json",
             "{\"kv_indptr\": [0, 1, 1, 1], \"kv_indices\": [0], \"kv_last_page_len\": [1, 0, 0]}");
    load_fails(d, "block_table.npy and \"kv_indptr\" cannot both");
    test_rm_tree(d);
    free(d);
}
END_TEST

/* ---- the dense twin -------------------------------------------------------------------- */

START_TEST(twin_gathers_sequences)
{
    char *d = test_case_tmpdir("layout");
    for (int hnd = 0; hnd < 2; hnd++) {
        put_paged(d, hnd, SMATTN_NPY_I32);
        smattn_case c;
        smattn_case_twin tw;
        char err[256];
        load_ok(d, &c);
        ck_assert_msg(smattn_case_twin_make(&c, &tw, err, sizeof err) == 0, "%s", err);
        const smattn_problem *p = &tw.prob;
        ck_assert_ptr_null(p->layout);
        ck_assert(p->q_lens[0] == 3 && p->q_lens[1] == 1 && p->q_lens[2] == 4);
        ck_assert(p->kv_lens[0] == 5 && p->kv_lens[2] == 10);
        ck_assert(smattn_validate(p, &tw.in, &(smattn_outputs){0}) != SMATTN_ERR_LAYOUT);
        const double *q = c.q.data, *tq = tw.q, *k = c.k.data, *tk = tw.k;
        /* query 2 of sequence 2 is packed row 6 */
        for (int h = 0; h < 4; h++)
            for (int e = 0; e < 16; e++)
                ck_assert(tq[((2 * 4 + 2) * 4 + h) * 16 + e] == q[(6 * 4 + h) * 16 + e]);
        ck_assert(tq[((1 * 4 + 1) * 4 + 0) * 16 + 0] == 0); /* padding */
        /* key 9 of sequence 2: page ex_table[6 + 2] = 5, slot 1 */
        for (int g = 0; g < 2; g++)
            for (int e = 0; e < 16; e++) {
                int64_t src = hnd ? ((5 * 2 + g) * 4 + 1) * 16 + e : ((5 * 4 + 1) * 2 + g) * 16 + e;
                ck_assert(tk[((2 * 10 + 9) * 2 + g) * 16 + e] == k[src]);
            }
        ck_assert(tk[((1 * 10 + 3) * 2 + 0) * 16 + 0] == 0); /* past sequence 1's 3 keys */
        /* outputs in the case's packed layout scatter into the twin's rows */
        smattn_outputs got = {0}, dense;
        double o[8 * 4 * 8], l[4 * 8];
        for (int e = 0; e < 256; e++)
            o[e] = e;
        for (int e = 0; e < 32; e++)
            l[e] = -e;
        int64_t sh[4];
        got.o = (smattn_out_tensor){o, SMATTN_F64, {0}};
        got.lse = (smattn_out_tensor){l, SMATTN_F64, {0}};
        smattn_case_out_layout(&c, 0, sh, got.o.stride);
        smattn_case_out_layout(&c, 1, sh, got.lse.stride);
        ck_assert_int_eq(smattn_case_twin_outputs(&c, &got, NULL, &dense), 0);
        const double *dO = dense.o.data, *dL = dense.lse.data;
        ck_assert(dO[((2 * 4 + 2) * 4 + 3) * 8 + 5] == o[(6 * 4 + 3) * 8 + 5]);
        ck_assert(dL[(2 * 4 + 3) * 4 + 2] == l[3 * 8 + 6]);
        ck_assert(dO[((1 * 4 + 2) * 4 + 0) * 8 + 0] == 0); /* a row sequence 1 does not have */
        smattn_case_twin_outputs_free(&dense);
        smattn_case_twin_free(&tw);
        smattn_case_free(&c);
    }
    test_rm_tree(d);
    free(d);
}
END_TEST

/* ---- backward cases (SPEC 7.1, 10.1) --------------------------------------------------- */

/* A paged backward case: do.npy [total_q,Hq,Dv] and dlse.npy [Hq,total_q]; the gradients'
 * shapes are q.npy's, k.npy's and v.npy's (NHD and HND); the oracle's gradients of the case
 * are its twin's at the stored rows and keys and +0 in the slots no key reaches; a table
 * naming a page twice, and a do.npy of the dense shape, are refused with one line. */
START_TEST(paged_backward_case)
{
    char *d = test_case_tmpdir("layout");
    for (int hnd = 0; hnd < 2; hnd++) {
        put_paged(d, hnd, SMATTN_NPY_I32);
        put_f64(d, "do.npy", 3, (int64_t[]){8, 4, 8}, 3);
        put_f64(d, "dlse.npy", 2, (int64_t[]){4, 8}, 4);
        smattn_case c;
        load_ok(d, &c);
        ck_assert(c.backward);
        int64_t sh[4], st[4];
        ck_assert_int_eq(smattn_case_out_layout(&c, 3, sh, st), 3);
        ck_assert(sh[0] == 8 && sh[1] == 4 && sh[2] == 16);
        ck_assert(st[1] == 64 && st[2] == 16 && st[3] == 1);
        for (int w = 4; w <= 5; w++) {
            const smattn_npy *a = w == 4 ? &c.k : &c.v;
            const smattn_tensor *t = w == 4 ? &c.in.k : &c.in.v;
            ck_assert_int_eq(smattn_case_out_layout(&c, w, sh, st), 4);
            for (int r = 0; r < 4; r++) {
                ck_assert_int_eq(sh[r], a->shape[r]);
                ck_assert_int_eq(st[r], t->stride[r]);
            }
        }
        /* the oracle on the case, against its dense twin */
        double gq[8 * 4 * 16], gk[6 * 4 * 2 * 16], gv[6 * 4 * 2 * 8];
        memset(gq, 0x5a, sizeof gq), memset(gk, 0x5a, sizeof gk), memset(gv, 0x5a, sizeof gv);
        smattn_grad_outputs go;
        memset(&go, 0, sizeof go);
        go.dq = (smattn_out_tensor){gq, SMATTN_F64, {0}};
        go.dk = (smattn_out_tensor){gk, SMATTN_F64, {0}};
        go.dv = (smattn_out_tensor){gv, SMATTN_F64, {0}};
        smattn_case_out_layout(&c, 3, sh, go.dq.stride);
        smattn_case_out_layout(&c, 4, sh, go.dk.stride);
        smattn_case_out_layout(&c, 5, sh, go.dv.stride);
        ck_assert_int_eq(smattn_ref_backward(&c.prob, &c.in, &c.gin, &go, NULL, NULL), SMATTN_OK);
        smattn_case_twin tw;
        char err[256];
        ck_assert_msg(smattn_case_twin_make(&c, &tw, err, sizeof err) == 0, "%s", err);
        static const int64_t cu[4] = {0, 3, 4, 8}, Tb[3] = {5, 3, 10};
        double tdo[3 * 4 * 4 * 8] = {0}, tdl[3 * 4 * 4] = {0};
        const double *pdo = c.dout.data, *pdl = c.dlse.data;
        for (int b = 0; b < 3; b++)
            for (int64_t i = 0; i < cu[b + 1] - cu[b]; i++)
                for (int h = 0; h < 4; h++) {
                    for (int e = 0; e < 8; e++)
                        tdo[((b * 4 + i) * 4 + h) * 8 + e] = pdo[((cu[b] + i) * 4 + h) * 8 + e];
                    tdl[(b * 4 + h) * 4 + i] = pdl[h * 8 + cu[b] + i];
                }
        smattn_grad_inputs tg;
        memset(&tg, 0, sizeof tg);
        tg.dout = (smattn_tensor){tdo, SMATTN_F64, {128, 32, 8, 1}};
        tg.dlse = (smattn_tensor){tdl, SMATTN_F64, {16, 4, 1, 0}};
        double dq[3 * 4 * 4 * 16], dk[3 * 10 * 2 * 16], dv[3 * 10 * 2 * 8];
        smattn_grad_outputs dg;
        memset(&dg, 0, sizeof dg);
        dg.dq = (smattn_out_tensor){dq, SMATTN_F64, {256, 64, 16, 1}};
        dg.dk = (smattn_out_tensor){dk, SMATTN_F64, {320, 32, 16, 1}};
        dg.dv = (smattn_out_tensor){dv, SMATTN_F64, {160, 16, 8, 1}};
        ck_assert_int_eq(smattn_ref_backward(&tw.prob, &tw.in, &tg, &dg, NULL, NULL), SMATTN_OK);
        for (int b = 0; b < 3; b++)
            for (int64_t i = 0; i < cu[b + 1] - cu[b]; i++)
                for (int e = 0; e < 4 * 16; e++)
                    ck_assert(memcmp(&gq[(cu[b] + i) * 64 + e], &dq[(b * 4 + i) * 64 + e], 8) == 0);
        unsigned char seen[6 * 4] = {0};
        for (int b = 0; b < 3; b++)
            for (int64_t t = 0; t < Tb[b]; t++) {
                const int64_t pg = ex_table[b * 3 + t / 4], sl = t % 4;
                seen[pg * 4 + sl] = 1;
                for (int g = 0; g < 2; g++)
                    for (int e = 0; e < 16; e++) {
                        const int64_t o = pg * go.dk.stride[0] + sl * go.dk.stride[1] +
                                          g * go.dk.stride[2] + e;
                        ck_assert(memcmp(&gk[o], &dk[((b * 10 + t) * 2 + g) * 16 + e], 8) == 0);
                    }
            }
        for (int x = 0; x < 24; x++) /* slots no key reaches: +0 */
            for (int g = 0; g < 2 && !seen[x]; g++)
                for (int e = 0; e < 16; e++) {
                    const int64_t o = x / 4 * go.dk.stride[0] + x % 4 * go.dk.stride[1] +
                                      g * go.dk.stride[2] + e;
                    ck_assert_msg(gk[o] == 0 && !signbit(gk[o]), "slot %d not +0", x);
                }
        smattn_case_twin_free(&tw);
        smattn_case_free(&c);
    }
    /* sequence 1 reuses sequence 0's first page */
    static const int64_t shared[9] = {0, 1, -1, 0, -1, -1, 3, 4, 5};
    put_ints(d, "block_table.npy", SMATTN_NPY_I32, 3, 3, shared);
    load_fails(d, "block_table.npy: sequences 0 and 1 both use page 0 (entries 0 and 0)");
    rm(d, "do.npy"), rm(d, "dlse.npy");
    smattn_case c;
    load_ok(d, &c); /* the forward reads a shared page */
    smattn_case_free(&c);
    put_ints(d, "block_table.npy", SMATTN_NPY_I32, 3, 3, ex_table);
    put_f64(d, "do.npy", 4, (int64_t[]){3, 4, 4, 8}, 3);
    load_fails(d, "do.npy: shape [3,4,4,8], want [total_q,Hq,Dv] = [8,4,8] (O's)");
    put_f64(d, "do.npy", 3, (int64_t[]){8, 4, 8}, 3);
    put_f64(d, "dlse.npy", 3, (int64_t[]){3, 4, 4}, 3);
    load_fails(d, "dlse.npy: shape [3,4,4], want [Hq,total_q] = [4,8] (LSE's)");
    test_rm_tree(d);
    free(d);
}
END_TEST

/* ---- the library's line (needs the library's layouts) --------------------------------- */

START_TEST(library_line_in_errors)
{
    char *d = test_case_tmpdir("layout");
    put_paged(d, 0, SMATTN_NPY_I32);
    smattn_case c;
    load_ok(d, &c);
    smattn_outputs out;
    char err[512];
    ck_assert_int_eq(
        smattn_case_outputs_alloc(&c, SMATTN_F32,
                                  SMATTN_CASE_OUT_O | SMATTN_CASE_OUT_LSE | SMATTN_CASE_OUT_P, &out,
                                  err, sizeof err),
        SMATTN_OK);
    smattn_case_outputs_free(&out);
    /* a used page that io would have refused, put in after loading: the library's line */
    c.table[8] = 99;
    ck_assert_int_eq(
        smattn_case_outputs_alloc(&c, SMATTN_F32, SMATTN_CASE_OUT_O, &out, err, sizeof err),
        SMATTN_ERR_LAYOUT);
    ck_assert_msg(strstr(err, "block_table[2][2] = 99 is outside [0, 6)") &&
                      strstr(err, "(SMATTN_ERR_LAYOUT)") && !strchr(err, '\n'),
                  "%s", err);
    ck_assert_ptr_null(out.o.data);
    smattn_case_free(&c);
    test_rm_tree(d);
    free(d);
}
END_TEST

Suite *case_layout_suite(void);
Suite *case_layout_suite(void)
{
    Suite *s = suite_create("case_layout");
    TCase *tc = tcase_create("case_layout");
    tcase_set_timeout(tc, 60);
    tcase_add_test(tc, paged_nhd_packed_q);
    tcase_add_test(tc, paged_hnd_strides);
    tcase_add_test(tc, packed_k_seqused);
    tcase_add_test(tc, flashinfer_csr);
    tcase_add_test(tc, bad_cu_seqlens);
    tcase_add_test(tc, bad_block_tables);
    tcase_add_test(tc, bad_csr);
    tcase_add_test(tc, twin_gathers_sequences);
    tcase_add_test(tc, paged_backward_case);
    suite_add_tcase(s, tc);
    TCase *lib = tcase_create("library"); /* needs the library's layouts (SPEC 2.7) */
    tcase_add_test(lib, library_line_in_errors);
    suite_add_tcase(s, lib);
    return s;
}
