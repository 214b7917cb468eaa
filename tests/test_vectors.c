/* SPDX-License-Identifier: MIT */
/* test_vectors.c: the oracle reproduces every golden vector (spec/vectors) bit for bit:
 * smattn_ref on the attention and softmax vectors, smattn_ref_merge on the merge ones.
 *
 * The vectors come from spec/tools/gen_vectors.py (Python, mpmath intervals, exact
 * Fractions), written without the C oracle, so agreement checks both against a second,
 * independent derivation of SPEC 3-5. Every vector is run in each output dtype (f64, f32,
 * f16, bf16) with O, LSE and P wanted. Equality is exact: any NaN matches any NaN (SPEC 2.6
 * never compares NaN payloads), but +0 and -0 differ. */
#include <check.h>
#include <dirent.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "io/vector.h"
#include "smattn.h"

/* Mismatches printed per vector and dtype before the rest are only counted. */
#define VEC_MAX_REPORTS 8
#define VEC_MAX_FILES 1024

static char vec_dir[4096];
static char *vec_files[VEC_MAX_FILES];
static int vec_count;
static int vec_overflow; /* more files than VEC_MAX_FILES */

static int cmp_names(const void *a, const void *b)
{
    return strcmp(*(char *const *)a, *(char *const *)b);
}

/* List the .json files of <root>/spec/vectors once, sorted, when the suite is built
 * (before any fork). */
static void scan_vectors(void)
{
    const char *root = getenv("SMATTN_ROOT");
    snprintf(vec_dir, sizeof vec_dir, "%s/spec/vectors", root && *root ? root : ".");
    DIR *d = opendir(vec_dir);
    if (!d)
        return;
    struct dirent *e;
    while ((e = readdir(d)) != NULL) {
        size_t n = strlen(e->d_name);
        if (n <= 5 || strcmp(e->d_name + n - 5, ".json") != 0 || e->d_name[0] == '.')
            continue;
        if (vec_count == VEC_MAX_FILES) {
            vec_overflow = 1;
            break;
        }
        char *s = malloc(n + 1);
        if (!s)
            break;
        memcpy(s, e->d_name, n + 1);
        vec_files[vec_count++] = s;
    }
    closedir(d);
    qsort(vec_files, (size_t)vec_count, sizeof *vec_files, cmp_names);
}

/* Bit-exact equality of two binary64 values holding dtype values; NaN matches NaN. */
static int same_value(double got, double want)
{
    if (isnan(got) || isnan(want))
        return isnan(got) && isnan(want);
    return got == want && signbit(got) == signbit(want);
}

START_TEST(directory_has_vectors)
{
    ck_assert_msg(vec_count > 0, "no golden vectors (*.json) in %s (set SMATTN_ROOT)", vec_dir);
    ck_assert_msg(!vec_overflow, "more than %d vectors in %s: raise VEC_MAX_FILES", VEC_MAX_FILES,
                  vec_dir);
}
END_TEST

START_TEST(vector_matches_oracle)
{
    static const char *const out_name[3] = {"o", "lse", "p"};
    static const char role[3] = {'o', 'l', 'p'};
    char path[8192], err[512] = "";
    snprintf(path, sizeof path, "%s/%s", vec_dir, vec_files[_i]);
    smattn_vector v;
    ck_assert_msg(smattn_vector_load(path, &v, err, sizeof err) == 0, "%s: %s", path, err);
    const int att = v.prob.op == SMATTN_OP_ATTENTION;
    long mismatches = 0;
    char first[1024] = "";
    for (int t = SMATTN_F64; t <= SMATTN_BF16; t++) {
        const smattn_dtype dt = (smattn_dtype)t;
        void *buf[3] = {NULL, NULL, NULL};
        smattn_outputs out;
        memset(&out, 0, sizeof out);
        smattn_out_tensor *ot[3] = {&out.o, &out.lse, &out.p};
        for (int k = 0; k < 3; k++) {
            if ((k == SMATTN_VEC_O && !att) || (k == SMATTN_VEC_P && v.merge))
                continue;
            ck_assert_msg(v.expected[t][k] != NULL, "%s: no expected %s for %s", v.name,
                          out_name[k], smattn_dtype_name(dt));
            buf[k] = calloc((size_t)v.n[k] + 1, smattn_dtype_size(dt));
            ck_assert_ptr_nonnull(buf[k]);
            ot[k]->data = buf[k];
            ot[k]->dtype = dt;
            smattn_contiguous_strides(&v.prob, role[k], ot[k]->stride);
        }
        smattn_status st = smattn_vector_run(&v, &out);
        ck_assert_msg(st == SMATTN_OK, "%s (%s): the oracle returned %s", v.name,
                      smattn_dtype_name(dt), smattn_status_name(st));
        int reported = 0;
        for (int k = 0; k < 3; k++) {
            if (!buf[k])
                continue;
            /* Contiguous row-major outputs: flat index e is element offset e. */
            for (int64_t e = 0; e < v.n[k]; e++) {
                double got = smattn_load(buf[k], dt, e), want = v.expected[t][k][e];
                if (same_value(got, want))
                    continue;
                if (mismatches == 0)
                    snprintf(first, sizeof first, "%s %s %s[%lld]: got %a, expected %a", v.name,
                             smattn_dtype_name(dt), out_name[k], (long long)e, got, want);
                mismatches++;
                if (reported++ < VEC_MAX_REPORTS)
                    fprintf(stderr,
                            "vector %s dtype %s output %s index %lld: got %a, expected %a"
                            " (exact %s)\n",
                            v.name, smattn_dtype_name(dt), out_name[k], (long long)e, got, want,
                            v.exact[k] ? v.exact[k][e] : "?");
            }
        }
        for (int k = 0; k < 3; k++)
            free(buf[k]);
    }
    smattn_vector_free(&v);
    ck_assert_msg(mismatches == 0, "%ld mismatches; first: %s", mismatches, first);
}
END_TEST

/* SPEC 2.8: under a lower-right causal mask the symmetric and one-sided ALiBi modes differ
 * by a constant of the row, so the pair of vectors over one problem has the same O and P bit
 * for bit in every dtype and an LSE that differs on the rows before a batch's last. */
START_TEST(alibi_causal_pair_differs_only_in_lse)
{
    char path[2][8192], err[512] = "";
    smattn_vector v[2];
    static const char *const names[2] = {"alibi_causal_symmetric", "alibi_causal_one_sided"};
    for (int k = 0; k < 2; k++) {
        snprintf(path[k], sizeof path[k], "%s/%s.json", vec_dir, names[k]);
        ck_assert_msg(smattn_vector_load(path[k], &v[k], err, sizeof err) == 0, "%s", err);
    }
    ck_assert_int_eq(v[0].prob.alibi_mode, SMATTN_ALIBI_SYMMETRIC);
    ck_assert_int_eq(v[1].prob.alibi_mode, SMATTN_ALIBI_ONE_SIDED);
    ck_assert_int_eq(v[0].prob.causal, SMATTN_CAUSAL_LOWER_RIGHT);
    int lse_differs = 0;
    for (int t = SMATTN_F64; t <= SMATTN_BF16; t++)
        for (int k = 0; k < 3; k++)
            for (int64_t e = 0; e < v[0].n[k]; e++) {
                int same = same_value(v[0].expected[t][k][e], v[1].expected[t][k][e]);
                if (k == SMATTN_VEC_LSE)
                    lse_differs |= !same;
                else
                    ck_assert_msg(same, "%s differs at %lld", k ? "P" : "O", (long long)e);
            }
    ck_assert_msg(lse_differs, "the pair's LSEs are the same: nothing tells the modes apart");
    smattn_vector_free(&v[0]);
    smattn_vector_free(&v[1]);
}
END_TEST

/* The reader takes ALiBi's keys only together, with binary32 slopes in the right number. */
START_TEST(alibi_keys_checked)
{
    static const char *const bad[] = {
        "\"alibi_mode\": \"symmetric\"",
        "\"alibi_slopes\": [\"0x1p+0\"]",
        "\"alibi_mode\": \"symmetric\", \"alibi_slopes\": [\"0x1.000001p+0\"]",
        "\"alibi_mode\": \"symmetric\", \"alibi_slopes\": [\"0x1p+0\", \"0x1p+0\"]",
        "\"alibi_mode\": \"symmetric\", \"alibi_slopes\": [\"inf\"]",
        "\"alibi_mode\": \"sideways\", \"alibi_slopes\": [\"0x1p+0\"]",
    };
    char path[] = "/tmp/smattn_vecXXXXXX";
    int fd = mkstemp(path);
    ck_assert_int_ge(fd, 0);
    close(fd);
    for (int k = -1; k < (int)(sizeof bad / sizeof *bad); k++) {
        FILE *f = fopen(path, "w");
        ck_assert_ptr_nonnull(f);
        fprintf(f,
                "{\"name\": \"%s\", \"problem\": {\"op\": \"attention\", \"B\": 1, \"S\": 1, "
                "\"T\": 1, \"Hq\": 1, \"Hkv\": 1, \"D\": 1, \"Dv\": 1%s%s}, \"inputs\": {"
                "\"q\": {\"dtype\": \"f32\", \"shape\": [1,1,1,1], \"data\": [\"0x1p+0\"]},"
                "\"k\": {\"dtype\": \"f32\", \"shape\": [1,1,1,1], \"data\": [\"0x1p+0\"]},"
                "\"v\": {\"dtype\": \"f32\", \"shape\": [1,1,1,1], \"data\": [\"0x1p+0\"]}}}\n",
                strrchr(path, '/') + 1, k < 0 ? "" : ", ", k < 0 ? "" : bad[k]);
        fclose(f);
        /* the stem must be the name: the file has no .json, so the stem is the whole name */
        smattn_vector v;
        char err[512] = "";
        int rc = smattn_vector_load(path, &v, err, sizeof err);
        if (k < 0) {
            ck_assert_msg(rc == 0, "the plain vector does not load: %s", err);
            smattn_vector_free(&v);
        } else
            ck_assert_msg(rc != 0, "accepted %s", bad[k]);
    }
    /* and a good per-batch list is read in order */
    FILE *f = fopen(path, "w");
    ck_assert_ptr_nonnull(f);
    fprintf(
        f,
        "{\"name\": \"%s\", \"problem\": {\"op\": \"attention\", \"B\": 2, \"S\": 1, "
        "\"T\": 1, \"Hq\": 1, \"Hkv\": 1, \"D\": 1, \"Dv\": 1, \"alibi_mode\": \"one_sided\", "
        "\"alibi_slopes\": [[\"0x1p-1\"], [\"-0x1p+2\"]]}, \"inputs\": {"
        "\"q\": {\"dtype\": \"f32\", \"shape\": [2,1,1,1], \"data\": [\"0x1p+0\", \"0x1p+0\"]},"
        "\"k\": {\"dtype\": \"f32\", \"shape\": [2,1,1,1], \"data\": [\"0x1p+0\", \"0x1p+0\"]},"
        "\"v\": {\"dtype\": \"f32\", \"shape\": [2,1,1,1], \"data\": [\"0x1p+0\", \"0x1p+0\"]}}}\n",
        strrchr(path, '/') + 1);
    fclose(f);
    smattn_vector v;
    char err[512] = "";
    ck_assert_msg(smattn_vector_load(path, &v, err, sizeof err) == 0, "%s", err);
    ck_assert_int_eq(v.prob.alibi_mode, SMATTN_ALIBI_ONE_SIDED);
    ck_assert_int_ne(v.prob.alibi_slopes_per_batch, 0);
    ck_assert(v.prob.alibi_slopes[0] == 0.5f && v.prob.alibi_slopes[1] == -4.0f);
    smattn_vector_free(&v);
    unlink(path);
}
END_TEST

/* A merge vector (SPEC 9): its problem and partials are read in their shapes, and a vector
 * with a P, a missing input, a wrong shape or a mean convention is refused. */
START_TEST(merge_keys_checked)
{
    static const char *const good_in =
        "\"o_parts\": {\"dtype\": \"f32\", \"shape\": [2,1,1,1,2], \"data\": [\"0x1p+0\", "
        "\"0x1p+1\", \"nan\", \"-0x1p+0\"]}, \"lse_parts\": {\"dtype\": \"f16\", \"shape\": "
        "[2,1,1,1], \"data\": [\"0x1p-1\", \"-inf\"]}";
    static const struct {
        const char *problem, *inputs, *extra;
    } files[] = {
        {"\"lse_base\": \"2\", \"empty_rows\": \"nan\"", NULL, ""}, /* good */
        {"\"empty_rows\": \"mean\"", NULL, ""},
        {"\"lse_base\": \"10\"", NULL, ""},
        {"\"T\": 3", NULL, ""},
        {"", "\"o_parts\": {\"dtype\": \"f32\", \"shape\": [2,1,1,1,2], \"data\": "
             "[\"0x1p+0\", \"0x1p+1\", \"nan\", \"-0x1p+0\"]}", ""},
        {"", "\"o_parts\": {\"dtype\": \"f32\", \"shape\": [2,1,1,2,1], \"data\": "
             "[\"0x1p+0\", \"0x1p+1\", \"nan\", \"-0x1p+0\"]}, \"lse_parts\": {\"dtype\": "
             "\"f32\", \"shape\": [2,1,1,1], \"data\": [\"0x1p+0\", \"0x1p+0\"]}", ""},
        {"", NULL, ", \"expected\": {\"f64\": {\"p\": []}}"},
    };
    char path[] = "/tmp/smattn_mvecXXXXXX";
    int fd = mkstemp(path);
    ck_assert_int_ge(fd, 0);
    close(fd);
    for (size_t k = 0; k < sizeof files / sizeof *files; k++) {
        FILE *f = fopen(path, "w");
        ck_assert_ptr_nonnull(f);
        fprintf(f,
                "{\"name\": \"%s\", \"problem\": {\"op\": \"merge\", \"N\": 2, \"B\": 1, "
                "\"S\": 1, \"Hq\": 1, \"Dv\": 2%s%s}, \"inputs\": {%s}%s}\n",
                strrchr(path, '/') + 1, files[k].problem[0] ? ", " : "", files[k].problem,
                files[k].inputs ? files[k].inputs : good_in, files[k].extra);
        fclose(f);
        smattn_vector v;
        char err[512] = "";
        int rc = smattn_vector_load(path, &v, err, sizeof err);
        if (k > 0) {
            ck_assert_msg(rc != 0, "file %zu accepted", k);
            continue;
        }
        ck_assert_msg(rc == 0, "%s", err);
        ck_assert(v.merge);
        ck_assert_int_eq(v.mprob.N, 2);
        ck_assert_int_eq(v.mprob.Dv, 2);
        ck_assert_int_eq(v.mprob.lse_base, SMATTN_LSE_BASE_2);
        ck_assert_int_eq(v.mprob.empty_rows, SMATTN_EMPTY_NAN);
        ck_assert_int_eq(v.n[SMATTN_VEC_O], 2);
        ck_assert_int_eq(v.n[SMATTN_VEC_LSE], 1);
        ck_assert_int_eq(v.n[SMATTN_VEC_P], 0);
        ck_assert(smattn_load(v.min.o_parts.data, v.min.o_parts.dtype,
                              v.min.o_part_stride + 1) == -1.0);
        ck_assert(smattn_load(v.min.lse_parts.data, v.min.lse_parts.dtype, 0) == 0.5);
        /* the oracle on it: one finite partial, so O = O_1 and LSE = 0.5 exactly */
        double o[2], l[1];
        smattn_outputs out;
        memset(&out, 0, sizeof out);
        out.o = (smattn_out_tensor){o, SMATTN_F64, {2, 2, 2, 1}};
        out.lse = (smattn_out_tensor){l, SMATTN_F64, {1, 1, 1, 0}};
        ck_assert_int_eq(smattn_vector_run(&v, &out), SMATTN_OK);
        ck_assert(o[0] == 1.0 && o[1] == 2.0 && l[0] == 0.5);
        smattn_vector_free(&v);
    }
    unlink(path);
}
END_TEST

Suite *vectors_suite(void);
Suite *vectors_suite(void)
{
    scan_vectors();
    Suite *s = suite_create("vectors");
    TCase *tc = tcase_create("golden");
    tcase_set_timeout(tc, 120);
    tcase_add_test(tc, directory_has_vectors);
    tcase_add_test(tc, alibi_causal_pair_differs_only_in_lse);
    tcase_add_test(tc, alibi_keys_checked);
    tcase_add_test(tc, merge_keys_checked);
    if (vec_count > 0)
        tcase_add_loop_test(tc, vector_matches_oracle, 0, vec_count);
    suite_add_tcase(s, tc);
    return s;
}
