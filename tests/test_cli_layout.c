/* SPDX-License-Identifier: MIT */
/* test_cli_layout.c: smattn ref, opt and check on ragged and paged case directories (SPEC
 * 7.1): a bad layout is exit 2 with one line naming the key and entry and nothing written;
 * ref and opt write packed o.npy [total_q,Hq,Dv] and lse.npy [Hq,total_q] equal to the
 * oracle on the dense twin; check judges a layout case's saved outputs (a dense Q's padding
 * rows too); a block table's row stride ("max_pages" below its columns) is kept. */
#include <check.h>
#include <dirent.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

#include "conform/conform.h"
#include "io/case.h"
#include "tests/support/case_dir.h"
#include "tests/support/cli_run.h"
#include "tests/support/fs.h"

/* the shared helper (tests/support/case_dir.h) under this suite's short name */
#define put_text test_put_text

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

static const char *path_join(const char *a, const char *b)
{
    static char p[512];
    snprintf(p, sizeof p, "%s/%s", a, b);
    return p;
}

static const char *in_tmp(const char *name)
{
    static char p[4][256];
    static int k;
    k = (k + 1) % 4;
    snprintf(p[k], sizeof p[k], "%s/%s", tmp, name);
    return p[k];
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
        ck_assert(smattn_npy_write(path, SMATTN_NPY_F32, 3, (int64_t[]){c.total_q, p->Hq, p->Dv}, o,
                                   err, sizeof err) == 0);
        snprintf(path, sizeof path, "%s/lse.npy", dir);
        ck_assert(smattn_npy_write(path, SMATTN_NPY_F32, 2, (int64_t[]){p->Hq, c.total_q}, l, err,
                                   sizeof err) == 0);
        test_outcome r = run3("check", dir, NULL, NULL);
        ck_assert_msg(r.code == 0, "%s: exit %d: %s%s", kind_names[kind], r.code, r.out, r.err);
        test_outcome_free(&r);
        r = run3("check", dir, "--rows=1", NULL); /* sampled rows of the twin */
        ck_assert_msg(r.code == 0, "%s: --rows: exit %d: %s%s", kind_names[kind], r.code, r.out,
                      r.err);
        test_outcome_free(&r);
        /* one element of sequence 2's second query, packed row 5, wrong by 1e-3 */
        o[(5 * p->Hq + 1) * p->Dv + 2] += 1e-3f;
        snprintf(path, sizeof path, "%s/o.npy", dir);
        ck_assert(smattn_npy_write(path, SMATTN_NPY_F32, 3, (int64_t[]){c.total_q, p->Hq, p->Dv}, o,
                                   err, sizeof err) == 0);
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

/* ---- gen --layout: the battery's cases, packed and paged ----------------------------- */

/* Element (b, i, h, c) of a dense tensor as binary64. */
static double at4(const smattn_tensor *t, int64_t a, int64_t b, int64_t c, int64_t d)
{
    return smattn_load(t->data, t->dtype,
                       a * t->stride[0] + b * t->stride[1] + c * t->stride[2] + d * t->stride[3]);
}

static int same_value(double x, double y)
{
    return x == y || (isnan(x) && isnan(y));
}

/* The layout case's dense twin is the dense case on every row and key a sequence has: the
 * same options, lengths, queries, keys, values, bias and mask there. */
static void same_problem(const char *name, const smattn_case *dense, const smattn_case *lay)
{
    smattn_case_twin tw;
    char err[256];
    ck_assert_msg(smattn_case_twin_make(lay, &tw, err, sizeof err) == 0, "%s: %s", name, err);
    const smattn_problem *d = &dense->prob, *t = &tw.prob;
    ck_assert_msg(d->B == t->B && d->Hq == t->Hq && d->Hkv == t->Hkv && d->D == t->D &&
                      d->Dv == t->Dv && d->scale == t->scale && d->causal == t->causal &&
                      d->window_left == t->window_left && d->window_right == t->window_right &&
                      d->softcap == t->softcap && d->empty_rows == t->empty_rows &&
                      d->empty_lse == t->empty_lse && t->S <= d->S && t->T <= d->T,
                  "%s: the options or shapes differ", name);
    for (int64_t b = 0; b < d->B; b++) {
        int64_t Sb = d->q_lens ? d->q_lens[b] : d->S, Tb = d->kv_lens ? d->kv_lens[b] : d->T;
        ck_assert_msg(t->q_lens[b] == Sb && t->kv_lens[b] == Tb, "%s: lengths of %lld", name,
                      (long long)b);
        for (int64_t h = 0; h < d->Hq; h++)
            for (int64_t i = 0; i < Sb; i++) {
                for (int64_t c = 0; c < d->D; c++)
                    ck_assert_msg(
                        same_value(at4(&dense->in.q, b, i, h, c), at4(&tw.in.q, b, i, h, c)),
                        "%s: q[%lld,%lld,%lld,%lld]", name, (long long)b, (long long)i,
                        (long long)h, (long long)c);
                for (int64_t j = 0; j < Tb; j++) {
                    if (dense->in.bias.data)
                        ck_assert_msg(same_value(at4(&dense->in.bias, b, h, i, j),
                                                 at4(&tw.in.bias, b, h, i, j)),
                                      "%s: bias", name);
                    if (dense->in.mask.data) {
                        const smattn_tensor *m1 = &dense->in.mask, *m2 = &tw.in.mask;
                        unsigned char x = ((const unsigned char *)
                                               m1->data)[b * m1->stride[0] + h * m1->stride[1] +
                                                         i * m1->stride[2] + j * m1->stride[3]];
                        unsigned char y = ((const unsigned char *)
                                               m2->data)[b * m2->stride[0] + h * m2->stride[1] +
                                                         i * m2->stride[2] + j * m2->stride[3]];
                        ck_assert_msg((x != 0) == (y != 0), "%s: mask", name);
                    }
                }
            }
        for (int64_t g = 0; g < d->Hkv; g++)
            for (int64_t j = 0; j < Tb; j++) {
                for (int64_t c = 0; c < d->D; c++)
                    ck_assert_msg(
                        same_value(at4(&dense->in.k, b, j, g, c), at4(&tw.in.k, b, j, g, c)),
                        "%s: k[%lld,%lld,%lld,%lld]", name, (long long)b, (long long)j,
                        (long long)g, (long long)c);
                for (int64_t c = 0; c < d->Dv; c++)
                    ck_assert_msg(
                        same_value(at4(&dense->in.v, b, j, g, c), at4(&tw.in.v, b, j, g, c)),
                        "%s: v", name);
            }
    }
    ck_assert_msg((dense->in.sinks.data != NULL) == (tw.in.sinks.data != NULL), "%s: sinks", name);
    smattn_case_twin_free(&tw);
}

START_TEST(gen_layouts_are_the_dense_cases)
{
    static const char *const layouts[3] = {"packed", "paged", "csr"};
    const char *dense = in_tmp("dense");
    test_outcome r = run3("gen", "--layout=ragged", dense, NULL);
    ck_assert_msg(r.code == 2 && strstr(r.err, "--layout: want dense, packed, paged or csr"),
                  "exit %d: %s", r.code, r.err);
    ck_assert_int_ne(access(dense, F_OK), 0);
    test_outcome_free(&r);
    r = run3("gen", "--suite=quick", dense, NULL);
    ck_assert_msg(r.code == 0, "%s", r.err);
    test_outcome_free(&r);
    for (int l = 0; l < 3; l++) {
        char opt[32];
        snprintf(opt, sizeof opt, "--layout=%s", layouts[l]);
        const char *out = in_tmp(layouts[l]);
        const char *args[] = {"gen", "--suite=quick", "--dtype=bf16", opt, out, NULL};
        r = test_cli_run(tmp, args);
        ck_assert_msg(r.code == 0, "%s", r.err);
        test_outcome_free(&r);
        /* the dense cases again in bf16, to compare like with like */
        const char *dense16 = in_tmp("dense16");
        if (l == 0) {
            const char *a2[] = {"gen", "--suite=quick", "--dtype=bf16", dense16, NULL};
            r = test_cli_run(tmp, a2);
            ck_assert_int_eq(r.code, 0);
            test_outcome_free(&r);
        }
        char *man = test_slurp(path_join(out, "manifest.json"));
        ck_assert_msg(strstr(man, layouts[l]), "manifest names no layout");
        free(man);
        int laid = 0, total = 0;
        DIR *dd = opendir(out);
        ck_assert_ptr_nonnull(dd);
        struct dirent *de;
        while ((de = readdir(dd))) {
            if (de->d_name[0] == '.' || !strcmp(de->d_name, "manifest.json"))
                continue;
            char a[512], b[512], err[512];
            snprintf(a, sizeof a, "%s/%s", dense16, de->d_name);
            snprintf(b, sizeof b, "%s/%s", out, de->d_name);
            smattn_case cd, cl;
            ck_assert_msg(smattn_case_load(a, &cd, err, sizeof err) == 0, "%s: %s", a, err);
            ck_assert_msg(smattn_case_load(b, &cl, err, sizeof err) == 0, "%s: %s", b, err);
            total++;
            if (cl.has_layout) {
                laid++;
                /* a layout case keeps its own (gen_layout_cases_keep_their_own_layout) */
                if (strncmp(de->d_name, "layout-", 7) != 0)
                    ck_assert(cl.packed_q && (l == 0 ? cl.packed_k : cl.paged));
                same_problem(de->d_name, &cd, &cl);
            } else /* no query or no key at all, or a softmax: written dense */
                ck_assert(cd.prob.op == SMATTN_OP_SOFTMAX || !cl.has_layout);
            smattn_case_free(&cd);
            smattn_case_free(&cl);
        }
        closedir(dd);
        ck_assert_msg(laid > total / 2, "%s: only %d of %d cases with a layout", layouts[l], laid,
                      total);
    }
}
END_TEST

/* gen --layout writes each of the battery's layout cases in its own layout, as `smattn
 * conform` hands it to a kernel (conform_case_lay_out): its packing, seqused_k, pages in
 * its own order and size, NHD or HND, whatever --layout names (its rule, pages of 16 in
 * reverse order, NHD, is for the dense cases); and the case is still the dense one. */
START_TEST(gen_layout_cases_keep_their_own_layout)
{
    conform_battery bat;
    char err[1200];
    ck_assert_msg(conform_battery_build(&bat, "quick", 0, "", err, sizeof err) == 0, "%s", err);
    const char *dense = in_tmp("dense"), *out = in_tmp("own");
    const char *a1[] = {"gen", "--suite=quick", "--seed=0", dense, NULL};
    test_outcome r = test_cli_run(tmp, a1);
    ck_assert_msg(r.code == 0, "%s", r.err);
    test_outcome_free(&r);
    const char *a2[] = {"gen", "--suite=quick", "--seed=0", "--layout=packed", out, NULL};
    r = test_cli_run(tmp, a2);
    ck_assert_msg(r.code == 0, "%s", r.err);
    test_outcome_free(&r);
    int seen = 0, hnd = 0, used = 0, odd_pages = 0, dense_q = 0, strided = 0;
    for (size_t n = 0; n < bat.n; n++) {
        const conform_case *c = &bat.cases[n];
        if (!c->has_layout || c->prob.op != SMATTN_OP_ATTENTION)
            continue;
        char name[128], a[512], b[512];
        snprintf(name, sizeof name, "%s", c->name);
        for (char *x = name; *x; x++)
            if (*x == '/')
                *x = '-';
        snprintf(a, sizeof a, "%s/%s", dense, name);
        snprintf(b, sizeof b, "%s/%s", out, name);
        smattn_case cd, cl;
        ck_assert_msg(smattn_case_load(a, &cd, err, sizeof err) == 0, "%s: %s", a, err);
        ck_assert_msg(smattn_case_load(b, &cl, err, sizeof err) == 0, "%s: %s", b, err);
        const smattn_layout *L = &c->layout, *G = &cl.layout;
        const int64_t B = c->prob.B;
        if ((L->cu_seqlens_q && L->cu_seqlens_q[B] == 0) ||
            (L->cu_seqlens_k && L->cu_seqlens_k[B] == 0)) { /* no packed file can be empty */
            ck_assert_msg(!cl.has_layout, "%s", name);
            smattn_case_free(&cd), smattn_case_free(&cl);
            continue;
        }
        ck_assert_msg(cl.has_layout && cl.packed_q == (L->cu_seqlens_q != NULL) &&
                          cl.packed_k == (L->cu_seqlens_k != NULL) &&
                          cl.paged == (L->block_table != NULL),
                      "%s: not its own layout", name);
        for (int64_t k = 0; L->cu_seqlens_q && k <= B; k++)
            ck_assert_msg(G->cu_seqlens_q[k] == L->cu_seqlens_q[k], "%s: cu_seqlens_q", name);
        for (int64_t k = 0; L->cu_seqlens_k && k <= B; k++)
            ck_assert_msg(G->cu_seqlens_k[k] == L->cu_seqlens_k[k], "%s: cu_seqlens_k", name);
        ck_assert_msg((G->seqused_k != NULL) == (L->seqused_k != NULL), "%s: seqused_k", name);
        for (int64_t k = 0; L->seqused_k && k < B; k++)
            ck_assert_msg(G->seqused_k[k] == L->seqused_k[k], "%s: seqused_k", name);
        if (L->block_table) {
            ck_assert_msg(G->page_size == L->page_size && G->num_pages == L->num_pages &&
                              G->max_pages == L->max_pages && G->bt_stride == L->bt_stride &&
                              cl.json.kv_hnd == c->kv_hnd,
                          "%s: page geometry (bt_stride %lld, the case's %lld)", name,
                          (long long)G->bt_stride, (long long)L->bt_stride);
            /* the row stride's columns past max_pages too: the garbage a kernel reading
             * rows max_pages long would take for pages */
            for (int64_t e = 0; e < B * L->bt_stride; e++)
                ck_assert_msg(G->block_table[e] == L->block_table[e], "%s: block_table entry %lld",
                              name, (long long)e);
            strided += L->bt_stride > L->max_pages;
            for (int64_t bb = 0; bb < B; bb++) {
                int64_t np = (cl.prob.kv_lens[bb] + L->page_size - 1) / L->page_size;
                for (int64_t k = 0; k < np; k++)
                    ck_assert_msg(G->block_table[bb * G->bt_stride + k] ==
                                      L->block_table[bb * L->bt_stride + k],
                                  "%s: block_table[%lld][%lld]", name, (long long)bb,
                                  (long long)k);
            }
            hnd += c->kv_hnd;
            odd_pages += L->page_size != 16;
            dense_q += !L->cu_seqlens_q;
        }
        used += L->seqused_k != NULL;
        same_problem(name, &cd, &cl);
        seen++;
        smattn_case_free(&cd), smattn_case_free(&cl);
    }
    conform_battery_free(&bat);
    ck_assert_msg(seen >= 15 && hnd >= 2 && used >= 1 && odd_pages >= 3 && dense_q >= 1 &&
                      strided >= 2,
                  "%d cases, %d HND, %d with seqused_k, %d not of 16, %d with dense q, %d with "
                  "bt_stride above max_pages",
                  seen, hnd, used, odd_pages, dense_q, strided);
}
END_TEST

/* A dense Q with q_lens beside paged keys has its padding rows (SPEC 2.7: only packed
 * queries lack them): check judges them as the twin's empty rows (O +0, LSE -inf), not
 * as rows without storage. */
START_TEST(check_judges_dense_q_padding_rows)
{
    const char *dir = in_tmp("dense_q");
    make_case(dir, K_PAGED_NHD);
    put_f32(dir, "q.npy", 4, (int64_t[]){3, 4, 4, 16}, 1);
    put_text(dir, "case.json",
             "{\"q_lens\": [3, 1, 4], \"kv_lens\": [5, 3, 10], \"causal\": \"lower_right\"}");
    smattn_case c;
    smattn_case_twin tw;
    float *O, *L;
    twin_oracle(dir, &c, &tw, &O, &L);
    const smattn_problem *p = &c.prob;
    ck_assert(!c.packed_q && p->S == 4);
    const int64_t so[4] = {p->B, p->S, p->Hq, p->Dv}, sl[3] = {p->B, p->Hq, p->S};
    char path[512], err[256];
    for (int bad = 0; bad < 3; bad++) {
        /* sequence 1's padding row i = 2 (q_lens 1): O given 12345, or LSE given 1 */
        const int64_t e = ((1 * p->S + 2) * p->Hq + 0) * p->Dv + 0, f = (1 * p->Hq + 0) * p->S + 2;
        const float keep_o = O[e], keep_l = L[f];
        if (bad == 1)
            O[e] = 12345.0f;
        if (bad == 2)
            L[f] = 1.0f;
        snprintf(path, sizeof path, "%s/o.npy", dir);
        ck_assert(smattn_npy_write(path, SMATTN_NPY_F32, 4, so, O, err, sizeof err) == 0);
        snprintf(path, sizeof path, "%s/lse.npy", dir);
        ck_assert(smattn_npy_write(path, SMATTN_NPY_F32, 3, sl, L, err, sizeof err) == 0);
        O[e] = keep_o, L[f] = keep_l;
        test_outcome r = run3("check", dir, NULL, NULL);
        if (bad == 0)
            ck_assert_msg(r.code == 0, "exit %d: %s%s", r.code, r.out, r.err);
        else
            ck_assert_msg(r.code == 1 && strstr(r.out, bad == 1 ? "O[b=1,i=2,h=0,c=0]"
                                                                : "LSE[b=1,h=0,i=2]"),
                          "padding row given %s: exit %d: %s%s", bad == 1 ? "O" : "LSE", r.code,
                          r.out, r.err);
        test_outcome_free(&r);
    }
    free(O), free(L);
    smattn_case_twin_free(&tw);
    smattn_case_free(&c);
}
END_TEST

/* block_table.npy [B, bt_stride] with "max_pages" below bt_stride (a row stride longer
 * than the columns read, garbage past them): loaded as such, and the same outputs as the
 * table cut to max_pages columns; "max_pages" above the columns or without
 * block_table.npy refused. */
START_TEST(block_table_row_stride)
{
    char dir[256], cut[256], out1[256], out2[256], out[256], packed[256];
    snprintf(dir, sizeof dir, "%s", in_tmp("strided"));
    snprintf(cut, sizeof cut, "%s", in_tmp("cut"));
    snprintf(out1, sizeof out1, "%s", in_tmp("out_strided"));
    snprintf(out2, sizeof out2, "%s", in_tmp("out_cut"));
    snprintf(out, sizeof out, "%s", in_tmp("out_bad"));
    snprintf(packed, sizeof packed, "%s", in_tmp("packed_mp"));
    make_case(cut, K_PAGED_NHD);
    make_case(dir, K_PAGED_NHD);
    int32_t bt[15] = {0, 1, -1, -1, INT32_MAX, 2, -1, -1, 6, INT32_MIN, 3, 4, 5, -1, 6};
    char p[512], err[256];
    snprintf(p, sizeof p, "%s/block_table.npy", dir);
    ck_assert(smattn_npy_write(p, SMATTN_NPY_I32, 2, (int64_t[]){3, 5}, bt, err, sizeof err) == 0);
    put_text(dir, "case.json",
             "{\"cu_seqlens_q\": [0, 3, 4, 8], \"kv_lens\": [5, 3, 10], \"causal\": "
             "\"lower_right\", \"max_pages\": 3}");
    smattn_case c;
    ck_assert_msg(smattn_case_load(dir, &c, err, sizeof err) == 0, "%s", err);
    ck_assert_int_eq(c.layout.bt_stride, 5);
    ck_assert_int_eq(c.layout.max_pages, 3);
    smattn_case_free(&c);
    test_outcome r = run3("ref", dir, out1, NULL);
    ck_assert_msg(r.code == 0, "exit %d: %s", r.code, r.err);
    test_outcome_free(&r);
    r = run3("ref", cut, out2, NULL);
    ck_assert_msg(r.code == 0, "exit %d: %s", r.code, r.err);
    test_outcome_free(&r);
    const char *names[2] = {"o.npy", "lse.npy"};
    for (int k = 0; k < 2; k++) {
        smattn_npy a, b;
        snprintf(p, sizeof p, "%s/%s", out1, names[k]);
        ck_assert_msg(smattn_npy_read(p, &a, err, sizeof err) == 0, "%s", err);
        snprintf(p, sizeof p, "%s/%s", out2, names[k]);
        ck_assert_msg(smattn_npy_read(p, &b, err, sizeof err) == 0, "%s", err);
        ck_assert_int_eq(a.count, b.count);
        ck_assert_msg(memcmp(a.data, b.data, (size_t)a.count * a.itemsize) == 0, "%s differs",
                      names[k]);
        smattn_npy_free(&a), smattn_npy_free(&b);
    }
    static const struct {
        const char *json, *needle;
    } bad[] = {
        {"{\"cu_seqlens_q\": [0, 3, 4, 8], \"kv_lens\": [5, 3, 10], \"max_pages\": 6}",
         "\"max_pages\" = 6 is more than block_table.npy's 5 columns"},
        {"{\"cu_seqlens_q\": [0, 3, 4, 8], \"kv_lens\": [5, 3, 10], \"max_pages\": 0}",
         "\"max_pages\" must be an integer >= 1"},
        /* 2 columns read: sequence 2's 10 keys need 3 pages of 4 */
        {"{\"cu_seqlens_q\": [0, 3, 4, 8], \"kv_lens\": [5, 3, 10], \"max_pages\": 2}",
         "\"kv_lens\"[2] = 10 is outside [0, max_pages * page_size] = [0, 8]"},
    };
    for (size_t n = 0; n < sizeof bad / sizeof bad[0]; n++) {
        put_text(dir, "case.json", bad[n].json);
        r = run3("ref", dir, out, NULL);
        ck_assert_msg(r.code == 2 && strstr(r.err, bad[n].needle), "exit %d: '%s' lacks '%s'",
                      r.code, r.err, bad[n].needle);
        ck_assert_int_ne(access(out, F_OK), 0);
        test_outcome_free(&r);
    }
    make_case(packed, K_PACKED);
    put_text(packed, "case.json",
             "{\"cu_seqlens_q\": [0, 3, 4, 8], \"cu_seqlens_k\": [0, 5, 6, 13], \"max_pages\": 2}");
    r = run3("ref", packed, out, NULL);
    ck_assert_msg(r.code == 2 && strstr(r.err, "\"max_pages\" applies to block_table.npy"),
                  "exit %d: %s", r.code, r.err);
    test_outcome_free(&r);
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
            ck_assert_msg(r.code == 0, "%s %s: exit %d: %s", eng ? "opt" : "ref", kind_names[kind],
                          r.code, r.err);
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

/* `check --rows K` of a layout case runs the oracle on the sampled rows only, as for a
 * dense case: a packed batch of 1024 + 1 queries over 2 x 1024 keys (a full oracle: about
 * 13 s of CPU) is judged in a fraction of that. CPU time of the child, not wall time: the
 * machine may be shared. */
START_TEST(sampled_check_of_a_layout_is_sampled)
{
    const char *dir = in_tmp("big");
    ck_assert_int_eq(mkdir(dir, 0700), 0);
    const int64_t S = 1024, H = 4, D = 64;
    put_f32(dir, "q.npy", 3, (int64_t[]){S + 1, H, D}, 1);
    put_f32(dir, "k.npy", 3, (int64_t[]){2 * S, H, D}, 2);
    put_f32(dir, "v.npy", 3, (int64_t[]){2 * S, H, D}, 3);
    put_f32(dir, "o.npy", 3, (int64_t[]){S + 1, H, D}, 4);
    put_text(dir, "case.json", "{\"cu_seqlens_q\": [0, 1024, 1025], \"cu_seqlens_k\": [0, 1024, 2048]}");
    struct rusage before, after;
    getrusage(RUSAGE_CHILDREN, &before);
    test_outcome r = run3("check", dir, "--rows=1", NULL);
    getrusage(RUSAGE_CHILDREN, &after);
    double cpu = (double)(after.ru_utime.tv_sec - before.ru_utime.tv_sec) +
                 1e-6 * (double)(after.ru_utime.tv_usec - before.ru_utime.tv_usec);
    /* the rows the layout stores only: 4 heads x (1024 + 1), of which 84 sampled (the
     * twin's rows 1..1023 of the second sequence are padding, neither judged nor counted) */
    ck_assert_msg(r.code == 1 && strstr(r.out, "sampled: 84 of 4100 rows judged"), "exit %d: %s%s",
                  r.code, r.out, r.err);
    ck_assert_msg(cpu < 4.0, "a sampled check took %.2f s of CPU", cpu);
    test_outcome_free(&r);
}
END_TEST

/* `check --rows K` of packed queries samples each sequence's own rows [0, S_b), its first
 * and last among them: a kernel wrong only at a short sequence's last row fails (drawn over
 * the twin's S = 256 rows, the sample judged rows 0-4, 7, 8, 15, 16 of a 20-row sequence,
 * not row 19). */
START_TEST(sampled_check_judges_each_sequence_end)
{
    const char *dir = in_tmp("ends"), *out = in_tmp("ends_out");
    ck_assert_int_eq(mkdir(dir, 0700), 0);
    const int64_t H = 2, D = 16, tq = 256 + 20;
    put_f32(dir, "q.npy", 3, (int64_t[]){tq, H, D}, 1);
    put_f32(dir, "k.npy", 3, (int64_t[]){tq, H, D}, 2);
    put_f32(dir, "v.npy", 3, (int64_t[]){tq, H, D}, 3);
    put_text(dir, "case.json",
             "{\"cu_seqlens_q\": [0, 256, 276], \"cu_seqlens_k\": [0, 256, 276]}");
    test_outcome r = run3("ref", dir, out, "--dtype=f32");
    ck_assert_msg(r.code == 0, "ref: exit %d: %s", r.code, r.err);
    test_outcome_free(&r);
    double *o = read_out(out, "o.npy", 3, (int64_t[]){tq, H, D});
    float *of = malloc((size_t)(tq * H * D) * sizeof *of);
    for (int64_t e = 0; e < tq * H * D; e++)
        of[e] = (float)o[e];
    of[(tq - 1) * H * D] += 0.25f; /* row 19 of sequence 1, head 0: its last */
    char p[512], err[256];
    snprintf(p, sizeof p, "%s/o.npy", dir);
    ck_assert_msg(
        smattn_npy_write(p, SMATTN_NPY_F32, 3, (int64_t[]){tq, H, D}, of, err, sizeof err) == 0,
        "%s", err);
    r = run3("check", dir, "--rows=1", NULL);
    ck_assert_msg(r.code == 1 && strstr(r.out, "O[b=1,i=19,h=0,c=0]"), "exit %d: %s%s", r.code,
                  r.out, r.err);
    test_outcome_free(&r);
    free(o), free(of);
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
    tcase_add_test(tc, check_judges_dense_q_padding_rows);
    tcase_add_test(tc, block_table_row_stride);
    tcase_add_test(tc, sampled_check_of_a_layout_is_sampled);
    tcase_add_test(tc, sampled_check_judges_each_sequence_end);
    tcase_add_test(tc, gen_layouts_are_the_dense_cases);
    tcase_add_test(tc, gen_layout_cases_keep_their_own_layout);
    suite_add_tcase(s, tc);
    /* needs the library's layouts (smattn_ref, smattn_attention with a layout) */
    TCase *e2e = tcase_create("library");
    tcase_add_checked_fixture(e2e, setup, teardown);
    tcase_set_timeout(e2e, 120);
    tcase_add_test(e2e, ref_opt_match_dense_twin);
    suite_add_tcase(s, e2e);
    return s;
}
