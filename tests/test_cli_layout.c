/* SPDX-License-Identifier: MIT */
/* test_cli_layout.c: smattn ref, opt and check on ragged and paged case directories (SPEC
 * 7.1): a bad layout is exit 2 with one line naming the key and entry and nothing written;
 * ref and opt write packed o.npy [total_q,Hq,Dv] and lse.npy [Hq,total_q] equal to the
 * oracle on the dense twin; check judges a layout case's saved outputs. */
#include <check.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "io/case.h"
#include "tests/support/cli_run.h"
#include "tests/support/fs.h"

static char tmp[64];

static void setup(void)
{
    snprintf(tmp, sizeof tmp, "/tmp/smattn_clil_XXXXXX");
    ck_assert_ptr_nonnull(mkdtemp(tmp));
}

static void teardown(void)
{
    test_rm_tree(tmp);
}

static const char *in_tmp(const char *name)
{
    static char p[4][256];
    static int k;
    k = (k + 1) % 4;
    snprintf(p[k], sizeof p[k], "%s/%s", tmp, name);
    return p[k];
}

static void put_text(const char *dir, const char *name, const char *text)
{
    char p[512];
    snprintf(p, sizeof p, "%s/%s", dir, name);
    FILE *f = fopen(p, "wb");
    ck_assert_ptr_nonnull(f);
    ck_assert_uint_eq(fwrite(text, 1, strlen(text), f), strlen(text));
    fclose(f);
}

/* An f32 array of pseudo-random values in [-1, 1) (a fixed stream per seed). */
static void put_f32(const char *dir, const char *name, int rank, const int64_t *shape,
                    unsigned seed)
{
    int64_t n = 1;
    for (int r = 0; r < rank; r++)
        n *= shape[r];
    float *x = malloc((size_t)n * sizeof *x);
    uint32_t s = seed * 2654435761u + 1;
    for (int64_t e = 0; e < n; e++) {
        s = s * 1664525u + 1013904223u;
        x[e] = (float)((double)(s >> 8) / 8388608.0 - 1.0);
    }
    char p[512], err[256];
    snprintf(p, sizeof p, "%s/%s", dir, name);
    ck_assert_msg(smattn_npy_write(p, SMATTN_NPY_F32, rank, shape, x, err, sizeof err) == 0, "%s",
                  err);
    free(x);
}

/* Kinds of layout case: packed q with pages (NHD, HND), packed q and k, the CSR form. */
enum { K_PAGED_NHD, K_PAGED_HND, K_PACKED, K_CSR, K_COUNT };
static const char *const kind_names[K_COUNT] = {"paged_nhd", "paged_hnd", "packed", "csr"};

static void make_case(const char *dir, int kind)
{
    ck_assert_int_eq(mkdir(dir, 0700), 0);
    put_f32(dir, "q.npy", 3, (int64_t[]){8, 4, 16}, 1);
    if (kind == K_PACKED) {
        put_f32(dir, "k.npy", 3, (int64_t[]){13, 2, 16}, 2);
        put_f32(dir, "v.npy", 3, (int64_t[]){13, 2, 8}, 3);
        put_text(dir, "case.json",
                 "{\"cu_seqlens_q\": [0, 3, 4, 8], \"cu_seqlens_k\": [0, 5, 6, 13], \"seqused_k\": "
                 "[5, 0, 6], \"causal\": \"lower_right\"}");
        return;
    }
    const int hnd = kind == K_PAGED_HND;
    put_f32(dir, "k.npy", 4, hnd ? (int64_t[]){6, 2, 4, 16} : (int64_t[]){6, 4, 2, 16}, 2);
    put_f32(dir, "v.npy", 4, hnd ? (int64_t[]){6, 2, 4, 8} : (int64_t[]){6, 4, 2, 8}, 3);
    if (kind == K_CSR) {
        put_text(dir, "case.json",
                 "{\"cu_seqlens_q\": [0, 3, 4, 8], \"kv_indptr\": [0, 2, 3, 6], \"kv_indices\": "
                 "[4, 1, 0, 5, 3, 2], \"kv_last_page_len\": [1, 3, 2], \"window\": [6, -1]}");
        return;
    }
    int32_t bt[9] = {0, 1, -1, 2, -1, -1, 3, 4, 5};
    char p[512], err[256];
    snprintf(p, sizeof p, "%s/block_table.npy", dir);
    ck_assert(smattn_npy_write(p, SMATTN_NPY_I32, 2, (int64_t[]){3, 3}, bt, err, sizeof err) == 0);
    put_text(dir, "case.json",
             hnd ? "{\"cu_seqlens_q\": [0, 3, 4, 8], \"kv_lens\": [5, 3, 10], \"kv_layout\": "
                   "\"HND\", \"causal\": \"lower_right\"}"
                 : "{\"cu_seqlens_q\": [0, 3, 4, 8], \"kv_lens\": [5, 3, 10], \"causal\": "
                   "\"lower_right\"}");
}

/* The oracle on the case's dense twin, in f32: O [B,S,Hq,Dv] and LSE [B,Hq,S]. */
static void twin_oracle(const char *dir, smattn_case *c, smattn_case_twin *tw, float **o, float **l)
{
    char err[512];
    ck_assert_msg(smattn_case_load(dir, c, err, sizeof err) == 0, "%s", err);
    ck_assert_msg(smattn_case_twin_make(c, tw, err, sizeof err) == 0, "%s", err);
    const smattn_problem *p = &tw->prob;
    smattn_outputs out = {0};
    *o = calloc((size_t)(p->B * p->S * p->Hq * p->Dv), sizeof **o);
    *l = calloc((size_t)(p->B * p->Hq * p->S), sizeof **l);
    out.o = (smattn_out_tensor){*o, SMATTN_F32, {0}};
    out.lse = (smattn_out_tensor){*l, SMATTN_F32, {0}};
    smattn_contiguous_strides(p, 'o', out.o.stride);
    smattn_contiguous_strides(p, 'l', out.lse.stride);
    smattn_ref_config cfg = {1, 0, 0, 0};
    ck_assert_int_eq(smattn_ref(p, &tw->in, &out, &cfg, NULL), SMATTN_OK);
}

/* Row (b, i) of the twin is packed row cu_q[b] + i. */
static void pack_outputs(const smattn_case *c, const float *O, const float *L, float *o, float *l)
{
    const smattn_problem *p = &c->prob;
    const int64_t *cu = c->layout.cu_seqlens_q;
    for (int64_t b = 0; b < p->B; b++)
        for (int64_t i = 0; i < cu[b + 1] - cu[b]; i++)
            for (int64_t h = 0; h < p->Hq; h++) {
                for (int64_t e = 0; e < p->Dv; e++)
                    o[((cu[b] + i) * p->Hq + h) * p->Dv + e] =
                        O[((b * p->S + i) * p->Hq + h) * p->Dv + e];
                l[h * c->total_q + cu[b] + i] = L[(b * p->Hq + h) * p->S + i];
            }
}

static test_outcome run3(const char *a, const char *b, const char *c, const char *d)
{
    const char *args[] = {a, b, c, d, NULL};
    return test_cli_run(tmp, args);
}

/* ---- bad cases: exit 2, one line, nothing written -------------------------------------- */

START_TEST(bad_layout_exit_2)
{
    const char *dir = in_tmp("bad"), *out = in_tmp("out");
    make_case(dir, K_PAGED_NHD);
    static const struct {
        const char *json, *needle;
    } bad[] = {
        {"{\"cu_seqlens_q\": [0, 3, 5, 8], \"kv_lens\": [5, 3, 13]}",
         "\"kv_lens\"[2] = 13 is outside [0, max_pages * page_size] = [0, 12]"},
        {"{\"cu_seqlens_q\": [0, 3, 2, 8], \"kv_lens\": [5, 3, 10]}",
         "\"cu_seqlens_q\"[2] = 2 is less than \"cu_seqlens_q\"[1] = 3"},
        {"{\"cu_seqlens_q\": [0, 3, 4, 8]}", "\"kv_lens\" is required with block_table.npy"},
    };
    for (size_t n = 0; n < sizeof bad / sizeof bad[0]; n++)
        for (int opt = 0; opt < 2; opt++) {
            put_text(dir, "case.json", bad[n].json);
            test_outcome r = run3(opt ? "opt" : "ref", dir, out, NULL);
            ck_assert_msg(r.code == 2, "exit %d: %s", r.code, r.err);
            ck_assert_msg(strstr(r.err, bad[n].needle), "'%s' lacks '%s'", r.err, bad[n].needle);
            ck_assert_msg(strchr(r.err, '\n') == r.err + strlen(r.err) - 1, "not one line: %s",
                          r.err);
            ck_assert_int_ne(access(out, F_OK), 0);
            test_outcome_free(&r);
        }
    /* an i8 table entry outside int32, in an unused slot */
    int64_t bt[9] = {0, 1, -1, 2, -1, (int64_t)1 << 40, 3, 4, 5};
    char p[512], err[256];
    snprintf(p, sizeof p, "%s/block_table.npy", dir);
    ck_assert(smattn_npy_write(p, SMATTN_NPY_I64, 2, (int64_t[]){3, 3}, bt, err, sizeof err) == 0);
    put_text(dir, "case.json", "{\"cu_seqlens_q\": [0, 3, 4, 8], \"kv_lens\": [5, 3, 10]}");
    test_outcome r = run3("ref", dir, out, NULL);
    ck_assert_msg(r.code == 2 && strstr(r.err, "block_table.npy: entry [1][2] = 1099511627776 "
                                               "does not fit in int32"),
                  "exit %d: %s", r.code, r.err);
    ck_assert_int_ne(access(out, F_OK), 0);
    test_outcome_free(&r);
}
END_TEST

/* ---- check: saved outputs of a layout case judged ------------------------------------- */

START_TEST(check_judges_layout_outputs)
{
    for (int kind = 0; kind < K_COUNT; kind++) {
        const char *dir = in_tmp(kind_names[kind]);
        make_case(dir, kind);
        smattn_case c;
        smattn_case_twin tw;
        float *O, *L;
        twin_oracle(dir, &c, &tw, &O, &L);
        const smattn_problem *p = &c.prob;
        float *o = calloc((size_t)(c.total_q * p->Hq * p->Dv), sizeof *o);
        float *l = calloc((size_t)(c.total_q * p->Hq), sizeof *l);
        pack_outputs(&c, O, L, o, l);
        char path[512], err[256];
        snprintf(path, sizeof path, "%s/o.npy", dir);
        ck_assert(smattn_npy_write(path, SMATTN_NPY_F32, 3, (int64_t[]){c.total_q, p->Hq, p->Dv},
                                   o, err, sizeof err) == 0);
        snprintf(path, sizeof path, "%s/lse.npy", dir);
        ck_assert(smattn_npy_write(path, SMATTN_NPY_F32, 2, (int64_t[]){p->Hq, c.total_q}, l, err,
                                   sizeof err) == 0);
        test_outcome r = run3("check", dir, NULL, NULL);
        ck_assert_msg(r.code == 0, "%s: exit %d: %s%s", kind_names[kind], r.code, r.out, r.err);
        test_outcome_free(&r);
        /* one element of sequence 2's second query, packed row 5, wrong by 1e-3 */
        o[(5 * p->Hq + 1) * p->Dv + 2] += 1e-3f;
        snprintf(path, sizeof path, "%s/o.npy", dir);
        ck_assert(smattn_npy_write(path, SMATTN_NPY_F32, 3, (int64_t[]){c.total_q, p->Hq, p->Dv},
                                   o, err, sizeof err) == 0);
        r = run3("check", dir, NULL, NULL);
        ck_assert_msg(r.code == 1 && strstr(r.out, "O[b=2,i=1,h=1,c=2]"), "%s: exit %d: %s%s",
                      kind_names[kind], r.code, r.out, r.err);
        test_outcome_free(&r);
        /* o.npy in the dense shape is not this case's */
        ck_assert(smattn_npy_write(path, SMATTN_NPY_F32, 4, (int64_t[]){p->B, p->S, p->Hq, p->Dv},
                                   O, err, sizeof err) == 0);
        r = run3("check", dir, NULL, NULL);
        ck_assert_msg(r.code == 1 && strstr(r.out, "want [total_q,Hq,Dv] = [8,4,8]"),
                      "%s: exit %d: %s%s", kind_names[kind], r.code, r.out, r.err);
        test_outcome_free(&r);
        free(o), free(l), free(O), free(L);
        smattn_case_twin_free(&tw);
        smattn_case_free(&c);
    }
}
END_TEST

/* ---- ref and opt: the library's layouts, end to end ----------------------------------- */

/* OUT/name as f32 or f64 values, its shape checked. */
static double *read_out(const char *out, const char *name, int rank, const int64_t *shape)
{
    char p[512], err[256];
    snprintf(p, sizeof p, "%s/%s", out, name);
    smattn_npy a;
    ck_assert_msg(smattn_npy_read(p, &a, err, sizeof err) == 0, "%s: %s", name, err);
    ck_assert_int_eq(a.rank, rank);
    for (int r = 0; r < rank; r++)
        ck_assert_int_eq(a.shape[r], shape[r]);
    double *x = malloc((size_t)a.count * sizeof *x);
    for (int64_t e = 0; e < a.count; e++)
        x[e] = smattn_load(a.data, a.type == SMATTN_NPY_F64 ? SMATTN_F64 : SMATTN_F32, e);
    smattn_npy_free(&a);
    return x;
}

START_TEST(ref_opt_match_dense_twin)
{
    for (int kind = 0; kind < K_COUNT; kind++) {
        const char *dir = in_tmp(kind_names[kind]);
        make_case(dir, kind);
        smattn_case c;
        smattn_case_twin tw;
        float *O, *L;
        twin_oracle(dir, &c, &tw, &O, &L);
        const smattn_problem *p = &c.prob;
        const int64_t no = c.total_q * p->Hq * p->Dv, nl = c.total_q * p->Hq;
        float *o = calloc((size_t)no, sizeof *o), *l = calloc((size_t)nl, sizeof *l);
        pack_outputs(&c, O, L, o, l);
        for (int eng = 0; eng < 2; eng++) {
            const char *out = in_tmp(eng ? "out_opt" : "out_ref");
            test_outcome r = run3(eng ? "opt" : "ref", dir, out, eng ? NULL : "--dtype=f32");
            ck_assert_msg(r.code == 0, "%s %s: exit %d: %s", eng ? "opt" : "ref",
                          kind_names[kind], r.code, r.err);
            test_outcome_free(&r);
            double *go = read_out(out, "o.npy", 3, (int64_t[]){c.total_q, p->Hq, p->Dv});
            double *gl = read_out(out, "lse.npy", 2, (int64_t[]){p->Hq, c.total_q});
            /* ref: bit for bit the twin's oracle; opt: close to it */
            for (int64_t e = 0; e < no; e++) {
                double want = (double)o[e];
                ck_assert_msg(eng ? fabs(go[e] - want) <= 1e-4 : go[e] == want,
                              "%s %s: O element %lld: %a vs %a", eng ? "opt" : "ref",
                              kind_names[kind], (long long)e, go[e], want);
            }
            for (int64_t e = 0; e < nl; e++) {
                double want = (double)l[e];
                ck_assert_msg(eng ? gl[e] == want || fabs(gl[e] - want) <= 1e-4 : gl[e] == want,
                              "%s %s: LSE element %lld: %a vs %a", eng ? "opt" : "ref",
                              kind_names[kind], (long long)e, gl[e], want);
            }
            free(go), free(gl);
        }
        free(o), free(l), free(O), free(L);
        smattn_case_twin_free(&tw);
        smattn_case_free(&c);
    }
}
END_TEST

Suite *cli_layout_suite(void);
Suite *cli_layout_suite(void)
{
    Suite *s = suite_create("cli_layout");
    TCase *tc = tcase_create("io");
    tcase_add_checked_fixture(tc, setup, teardown);
    tcase_set_timeout(tc, 120);
    tcase_add_test(tc, bad_layout_exit_2);
    tcase_add_test(tc, check_judges_layout_outputs);
    suite_add_tcase(s, tc);
    /* needs the library's layouts (smattn_ref, smattn_attention with a layout) */
    TCase *e2e = tcase_create("library");
    tcase_add_checked_fixture(e2e, setup, teardown);
    tcase_set_timeout(e2e, 120);
    tcase_add_test(e2e, ref_opt_match_dense_twin);
    suite_add_tcase(s, e2e);
    return s;
}
