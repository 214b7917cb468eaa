/* SPDX-License-Identifier: MIT */
/* test_rows.c: sampled checks (--rows K): the row choice (conform/rows.c), the oracle and
 * the bound on listed rows (ref/rows.c, smattn__bound_rows), the judge on those rows, and
 * the tool's verdicts and reports, with plugins whose bug sits on a row a sample always
 * judges (row 4 = 2^2) or on one it may leave out (row 5). */
#define _DEFAULT_SOURCE 1
#include <check.h>
#include <sys/stat.h>
#include <unistd.h>
#include <json.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "conform/conform.h"
#include "core/internal.h"
#include "tests/support/cli_run.h"
#include "tests/support/fs.h"
#include "tests/support/testkit.h"

/* The rows of (S 100, K 20, seed 1, b 0, h 0), hashed (FNV-1a): pinned. */
#define PINNED_ROWS_HASH 0x31fe206f18024b5fu

/* ---- the rule ------------------------------------------------------------------------ */

static int has(const int64_t *v, int64_t n, int64_t x)
{
    for (int64_t k = 0; k < n; k++)
        if (v[k] == x)
            return 1;
    return 0;
}

START_TEST(pick_rule)
{
    static const int64_t Ss[] = {1, 2, 3, 7, 9, 100, 1000, 4097};
    static const int64_t Ks[] = {1, 5, 64, 5000};
    int64_t *a = malloc(4097 * sizeof *a), *b = malloc(4097 * sizeof *b);
    ck_assert_ptr_nonnull(a);
    ck_assert_ptr_nonnull(b);
    for (size_t s = 0; s < sizeof Ss / sizeof Ss[0]; s++)
        for (size_t k = 0; k < sizeof Ks / sizeof Ks[0]; k++) {
            int64_t S = Ss[s], K = Ks[k];
            int64_t n = conform_rows_pick(S, K, 11, 1, 2, a);
            /* always: the first, the last, and 2^k - 1, 2^k below S (k >= 1) */
            int64_t fixed = 0;
            for (int64_t i = 0; i < S; i++) {
                int must = i == 0 || i == S - 1;
                for (int64_t q = 2; q <= S; q *= 2)
                    must |= i == q - 1 || i == q;
                fixed += must;
                if (must)
                    ck_assert_msg(has(a, n, i), "S %lld K %lld: row %lld missing", (long long)S,
                                  (long long)K, (long long)i);
            }
            int64_t want = K < S ? K : S;
            ck_assert_int_eq(n, want > fixed ? want : fixed);
            for (int64_t r = 0; r < n; r++) {
                ck_assert(a[r] >= 0 && a[r] < S);
                ck_assert(r == 0 || a[r] > a[r - 1]); /* ascending, each once */
            }
            /* a function of (S, K, seed, b, h) alone */
            ck_assert_int_eq(conform_rows_pick(S, K, 11, 1, 2, b), n);
            ck_assert(!memcmp(a, b, (size_t)n * sizeof *a));
        }
    /* the draws depend on the seed and on (b, h) */
    int64_t n = conform_rows_pick(1000, 64, 1, 0, 0, a);
    ck_assert(conform_rows_pick(1000, 64, 2, 0, 0, b) == n && memcmp(a, b, (size_t)n * sizeof *a));
    ck_assert(conform_rows_pick(1000, 64, 1, 0, 1, b) == n && memcmp(a, b, (size_t)n * sizeof *a));
    ck_assert(conform_rows_pick(1000, 64, 1, 1, 0, b) == n && memcmp(a, b, (size_t)n * sizeof *a));
    /* pinned: a report's K and seed name these rows, so the rule must not drift */
    n = conform_rows_pick(100, 20, 1, 0, 0, a);
    ck_assert_int_eq(n, 20);
    uint64_t h = 0xcbf29ce484222325u;
    for (int64_t r = 0; r < n; r++)
        h = (h ^ (uint64_t)a[r]) * 0x100000001b3u;
    ck_assert_msg(h == PINNED_ROWS_HASH, "the rows of (S 100, K 20, seed 1) changed: hash %#llx",
                  (unsigned long long)h);
    free(a);
    free(b);
}
END_TEST

/* ---- the oracle, the bound and the judge on listed rows --------------------------------- */

typedef struct prob {
    smattn_problem p;
    smattn_inputs in;
    float *q, *k, *v;
} prob;

/* B 2, S 37, T 50, Hq 2, Hkv 1, D 8, causal lower-right: random binary32 inputs. */
static void prob_make(prob *x)
{
    smattn_problem *p = &x->p;
    *p = smattn_problem_default();
    p->B = 2, p->S = 37, p->T = 50, p->Hq = 2, p->Hkv = 1, p->D = p->Dv = 8;
    p->scale = smattn_default_scale(8);
    p->causal = SMATTN_CAUSAL_LOWER_RIGHT;
    memset(&x->in, 0, sizeof x->in);
    rng r = {42};
    int64_t nq = p->B * p->S * p->Hq * p->D, nk = p->B * p->T * p->Hkv * p->D;
    x->q = malloc((size_t)nq * sizeof(float));
    x->k = malloc((size_t)nk * sizeof(float));
    x->v = malloc((size_t)nk * sizeof(float));
    ck_assert(x->q && x->k && x->v);
    for (int64_t e = 0; e < nq; e++)
        x->q[e] = (float)(2 * rng_unif(&r) - 1);
    for (int64_t e = 0; e < nk; e++)
        x->k[e] = (float)(2 * rng_unif(&r) - 1), x->v[e] = (float)(2 * rng_unif(&r) - 1);
    smattn_tensor *t[3] = {&x->in.q, &x->in.k, &x->in.v};
    float *d[3] = {x->q, x->k, x->v};
    static const char roles[3] = {'q', 'k', 'v'};
    for (int k = 0; k < 3; k++) {
        t[k]->data = d[k];
        t[k]->dtype = SMATTN_F32;
        ck_assert_int_eq(smattn_contiguous_strides(p, roles[k], t[k]->stride), SMATTN_OK);
    }
}

static void prob_free(prob *x)
{
    free(x->q), free(x->k), free(x->v);
}

/* outbuf with O and LSE only, every element NaN (never written stays NaN) */
static void outs_nan(outbuf *o, const smattn_problem *p, smattn_dtype t)
{
    outbuf_make(o, p, t);
    o->out.p.data = NULL;
    for (size_t e = 0; e < o->no; e++)
        outbuf_put(o, 'o', (int64_t)e, (double)NAN);
    for (size_t e = 0; e < o->nl; e++)
        outbuf_put(o, 'l', (int64_t)e, (double)NAN);
}

static int64_t row_of_o(const smattn_problem *p, int64_t e) /* O [B,S,Hq,Dv] */
{
    int64_t r = e / p->Dv, h = r % p->Hq, bi = r / p->Hq;
    return ((bi / p->S) * p->Hq + h) * p->S + bi % p->S;
}

/* A packed batch's sample is drawn over its stored rows [0, S_b): each sequence's first and
 * last rows are judged (a sequence's end is where varlen kernels go wrong), none past it. */
START_TEST(list_of_stored_rows)
{
    smattn_problem p = smattn_problem_default();
    p.B = 3, p.S = 50, p.Hq = 2;
    const int64_t rows_of[3] = {50, 7, 0};
    int64_t n = 0, *list = conform_rows_list_of(&p, 4, 9, rows_of, &n);
    ck_assert_ptr_nonnull(list);
    int seen_last[3][2] = {{0}};
    for (int64_t k = 0; k < n; k++) {
        const int64_t b = list[k] / (p.Hq * p.S), h = list[k] / p.S % p.Hq, i = list[k] % p.S;
        ck_assert_msg(i < rows_of[b], "batch %lld: row %lld past its %lld rows", (long long)b,
                      (long long)i, (long long)rows_of[b]);
        seen_last[b][h] |= i == rows_of[b] - 1;
    }
    for (int b = 0; b < 2; b++)
        for (int h = 0; h < 2; h++)
            ck_assert_msg(seen_last[b][h], "batch %d head %d: its last row not sampled", b, h);
    int64_t m = 0, *all = conform_rows_list_of(&p, 4, 9, NULL, &m), m2 = 0;
    int64_t *same = conform_rows_list(&p, 4, 9, &m2);
    ck_assert(all && same && m == m2 && !memcmp(all, same, (size_t)m * sizeof *all));
    free(list), free(all), free(same);
}
END_TEST

START_TEST(ref_and_bound_on_listed_rows)
{
    prob x;
    prob_make(&x);
    const smattn_problem *p = &x.p;
    int64_t n = 0, *list = conform_rows_list(p, 3, 5, &n);
    ck_assert_ptr_nonnull(list);
    int64_t total = p->B * p->Hq * p->S;
    ck_assert(n > 0 && n < total);
    unsigned char *in = calloc((size_t)total, 1);
    for (int64_t k = 0; k < n; k++)
        in[list[k]] = 1;
    outbuf full, part, bfull, bpart;
    outs_nan(&full, p, SMATTN_F64);
    outs_nan(&part, p, SMATTN_F64);
    outs_nan(&bfull, p, SMATTN_F64);
    outs_nan(&bpart, p, SMATTN_F64);
    ck_assert_int_eq(smattn_ref(p, &x.in, &full.out, NULL, NULL), SMATTN_OK);
    ck_assert_int_eq(smattn__ref_rows(p, &x.in, &part.out, NULL, NULL, list, n), SMATTN_OK);
    smattn_precision pm = smattn_precision_of(SMATTN_F32);
    smattn_outputs fmt = full.out; /* dtypes of the outputs judged: binary64 here */
    ck_assert_int_eq(smattn__bound_flags(p, &x.in, &pm, &fmt, &bfull.out, 0), SMATTN_OK);
    ck_assert_int_eq(smattn__bound_rows(p, &x.in, &pm, &fmt, &bpart.out, 0, list, n), SMATTN_OK);
    /* listed rows: the same bits as the whole evaluation; the others untouched */
    for (size_t e = 0; e < full.no; e++) {
        int64_t row = row_of_o(p, (int64_t)e);
        double a = outbuf_get(&full, 'o', (int64_t)e), b = outbuf_get(&part, 'o', (int64_t)e);
        double c = outbuf_get(&bfull, 'o', (int64_t)e), d = outbuf_get(&bpart, 'o', (int64_t)e);
        if (in[row]) {
            ck_assert_msg(!memcmp(&a, &b, 8), "O[%zu]: %a, listed %a", e, a, b);
            ck_assert_msg(!memcmp(&c, &d, 8), "bound O[%zu]: %a, listed %a", e, c, d);
        } else {
            ck_assert(isnan(b) && isnan(d));
        }
    }
    for (size_t e = 0; e < full.nl; e++) {
        double a = outbuf_get(&full, 'l', (int64_t)e), b = outbuf_get(&part, 'l', (int64_t)e);
        ck_assert(in[e] ? !memcmp(&a, &b, 8) : isnan(b));
    }
    /* a list out of order, repeated or out of range is refused */
    int64_t bad[3][2] = {{3, 2}, {2, 2}, {0, 148}};
    for (int k = 0; k < 3; k++) {
        ck_assert_int_eq(smattn__ref_rows(p, &x.in, &part.out, NULL, NULL, bad[k], 2),
                         SMATTN_ERR_SHAPE);
        ck_assert_int_eq(smattn__bound_rows(p, &x.in, &pm, &fmt, &bpart.out, 0, bad[k], 2),
                         SMATTN_ERR_SHAPE);
    }
    outbuf_free(&full), outbuf_free(&part), outbuf_free(&bfull), outbuf_free(&bpart);
    free(in);
    free(list);
    prob_free(&x);
}
END_TEST

/* The judge: a correct output passes sampled as in full; a bug on an always-judged row is
 * caught; a bug on a row left out is not claimed found, and the result says sampled. */
START_TEST(judge_on_sampled_rows)
{
    prob x;
    prob_make(&x);
    const smattn_problem *p = &x.p;
    outbuf o;
    outs_nan(&o, p, SMATTN_F32);
    ck_assert_int_eq(smattn_ref(p, &x.in, &o.out, NULL, NULL), SMATTN_OK);
    smattn_precision pm = smattn_precision_of(SMATTN_F32);
    conform_sample smp = {1, 9}; /* K 1: the always-judged rows alone */
    conform_result r;
    memset(&r, 0, sizeof r);
    conform_judge_rows(p, &x.in, &o.out, &pm, 0, 0, NULL, &r);
    ck_assert_int_eq(r.status, CONFORM_PASS);
    ck_assert_int_eq(r.rows_judged, r.rows_total);
    conform_judge_rows(p, &x.in, &o.out, &pm, 0, 0, &smp, &r);
    ck_assert_int_eq(r.status, CONFORM_PASS);
    ck_assert(r.rows_judged < r.rows_total && r.rows_total == 148);
    /* O[b=1, i=16, h=1, c=2]: row 16 = 2^4 is always judged */
    int64_t e16 = ((1 * p->S + 16) * p->Hq + 1) * p->Dv + 2;
    double keep = outbuf_get(&o, 'o', e16);
    outbuf_put(&o, 'o', e16, keep + 0.5);
    conform_judge_rows(p, &x.in, &o.out, &pm, 0, 0, &smp, &r);
    ck_assert_int_eq(r.status, CONFORM_FAIL);
    ck_assert_msg(strstr(r.reason, "O[b=1,i=16,h=1,c=2]"), "%s", r.reason);
    outbuf_put(&o, 'o', e16, keep);
    /* row 10 is no neighbour of a power of two: K 1 never judges it */
    int64_t e10 = ((0 * p->S + 10) * p->Hq + 0) * p->Dv + 0;
    outbuf_put(&o, 'o', e10, outbuf_get(&o, 'o', e10) + 0.5);
    conform_judge_rows(p, &x.in, &o.out, &pm, 0, 0, &smp, &r);
    ck_assert_int_eq(r.status, CONFORM_PASS);
    ck_assert(r.rows_judged < r.rows_total);
    conform_judge_rows(p, &x.in, &o.out, &pm, 0, 0, NULL, &r);
    ck_assert_int_eq(r.status, CONFORM_FAIL);
    ck_assert_msg(strstr(r.reason, "O[b=0,i=10,h=0,c=0]"), "%s", r.reason);
    outbuf_free(&o);
    prob_free(&x);
}
END_TEST

/* ---- the tool ---------------------------------------------------------------------------- */

static char dir[64];
/* the tool run in dir with a NULL-terminated argument list; a fixture plugin by mode */
#define cli(...) test_cli_runl(dir, __VA_ARGS__)
#define fixture test_fixture

static void setup(void)
{
    ck_assert_int_eq(test_mkdtemp(dir, sizeof dir, "rows"), 0);
}

static void teardown(void)
{
    test_rm_tree(dir);
}

/* The verdict line of a text report ("" if none). */
static const char *verdict(const char *out, char *buf, size_t cap)
{
    const char *v = strstr(out, "verdict: ");
    size_t n = v ? strcspn(v, "\n") : 0;
    snprintf(buf, cap, "%.*s", (int)n, v ? v : "");
    return buf;
}

/* cases of S 7 and S 9 (rows 4 and 5 exist) that the plain fixture claims */
#define ONLY "shapes/s7_t65_d5,shapes/s_gt_t_s9_t4"

START_TEST(cli_sampled_verdicts)
{
    char v[400];
    /* a correct kernel: the same verdict sampled and whole, and only sampled says so */
    char jx[200], jh[200];
    snprintf(jx, sizeof jx, "%s", test_path(dir, "g.xml"));
    snprintf(jh, sizeof jh, "%s", test_path(dir, "g.html"));
    test_outcome o = cli("conform", "--kernel", fixture("good"), "--only", ONLY, "--rows", "1",
                         "--json", test_path(dir, "g.json"), "--junit", jx, "--html", jh, NULL);
    ck_assert_msg(o.code == 0, "%s%s", o.out, o.err);
    /* JUnit and HTML say it too */
    char *xml = test_slurp(jx), *html = test_slurp(jh);
    ck_assert_msg(strstr(xml, "<property name=\"rows\" value=\"sampled: 19 of 23 rows judged"),
                  "%s", xml);
    ck_assert_msg(strstr(html, "CONFORMING (sampled: 19 of 23 rows judged"), "%s", html);
    free(xml);
    free(html);
    ck_assert_msg(strstr(verdict(o.out, v, sizeof v), "verdict: CONFORMING (sampled: "), "%s", v);
    ck_assert_msg(strstr(o.out, "rows: sampled, "), "%s", o.out);
    test_outcome_free(&o);
    o = cli("conform", "--kernel", fixture("good"), "--only", ONLY, NULL);
    ck_assert_int_eq(o.code, 0);
    ck_assert_msg(!strstr(verdict(o.out, v, sizeof v), "sampled"), "%s", v);
    test_outcome_free(&o);
    /* the JSON: verdict, rule, K and seed, and per case the rows judged */
    char *text = test_slurp(test_path(dir, "g.json"));
    json_object *root = json_tokener_parse(text);
    ck_assert_ptr_nonnull(root);
    json_object *rows = NULL, *x = NULL;
    ck_assert(json_object_object_get_ex(root, "rows", &rows));
    ck_assert(json_object_object_get_ex(rows, "per_head", &x) && json_object_get_int64(x) == 1);
    ck_assert(json_object_object_get_ex(rows, "seed", &x) && json_object_get_int64(x) == 0);
    ck_assert(json_object_object_get_ex(rows, "rule", &x));
    ck_assert_str_eq(test_report_field(root, "verdict"), "conforming (sampled rows)");
    json_object *c = test_report_case(root, "shapes/s7_t65_d5");
    ck_assert_ptr_nonnull(c);
    ck_assert_str_eq(test_report_field(c, "rows_judged"), "12"); /* rows 0-4, 6 of 2 heads */
    ck_assert_str_eq(test_report_field(c, "rows_total"), "14");
    json_object_put(root);
    free(text);
    /* a bug on row 4 (2^2): found by any sample */
    o = cli("conform", "--kernel", fixture("row_bug"), "--only", ONLY, "--rows", "1", NULL);
    ck_assert_int_eq(o.code, 1);
    ck_assert_msg(strstr(verdict(o.out, v, sizeof v), "NOT CONFORMING (sampled: "), "%s", v);
    ck_assert_msg(strstr(o.out, "i=4,h=0,c=0"), "%s", o.out);
    test_outcome_free(&o);
    /* a bug on row 5, which K 1 leaves out: not found, and the verdict says sampled */
    o = cli("conform", "--kernel", fixture("row_bug_hidden"), "--only", ONLY, "--rows", "1", NULL);
    ck_assert_int_eq(o.code, 0);
    ck_assert_msg(strstr(verdict(o.out, v, sizeof v), "CONFORMING (sampled: "), "%s", v);
    test_outcome_free(&o);
    o = cli("conform", "--kernel", fixture("row_bug_hidden"), "--only", ONLY, NULL);
    ck_assert_int_eq(o.code, 1);
    ck_assert_msg(strstr(o.out, "i=5,h=0,c=0"), "%s", o.out);
    test_outcome_free(&o);
    /* bad values */
    o = cli("conform", "--rows", "0", NULL);
    ck_assert_int_eq(o.code, 2);
    test_outcome_free(&o);
    o = cli("check", dir, "--seed", "3", NULL);
    ck_assert_int_eq(o.code, 2);
    ck_assert_msg(strstr(o.err, "--rows"), "%s", o.err);
    test_outcome_free(&o);
}
END_TEST

/* Shards of a sampled run merge into a sampled report; a sample of another K does not. */
START_TEST(cli_sampled_merge)
{
    char v[400];
    const char *sh[2] = {"0/2", "1/2"}, *js[2] = {"s0.json", "s1.json"};
    for (int k = 0; k < 2; k++) {
        char p[200];
        snprintf(p, sizeof p, "%s", test_path(dir, js[k]));
        test_outcome o = cli("conform", "--kernel", fixture("good"), "--only", "shapes/",
                             "--rows", "2", "--shard", sh[k], "--json", p, NULL);
        ck_assert_msg(o.code == 0 || o.code == 1, "%s", o.err);
        test_outcome_free(&o);
    }
    char m[200], a[200], b[200];
    snprintf(m, sizeof m, "%s", test_path(dir, "m.json"));
    snprintf(a, sizeof a, "%s", test_path(dir, "s0.json"));
    snprintf(b, sizeof b, "%s", test_path(dir, "s1.json"));
    test_outcome o = cli("report", "merge", m, a, b, NULL);
    ck_assert_msg(o.code == 0, "%s%s", o.out, o.err);
    ck_assert_msg(strstr(verdict(o.out, v, sizeof v), "(sampled: "), "%s", v);
    test_outcome_free(&o);
    char *text = test_slurp(m);
    ck_assert_msg(strstr(text, "\"per_head\":2") || strstr(text, "\"per_head\": 2"), "%s", text);
    free(text);
    o = cli("conform", "--kernel", fixture("good"), "--only", "shapes/", "--rows", "3",
            "--shard", "1/2", "--json", b, NULL);
    test_outcome_free(&o);
    o = cli("report", "merge", m, a, b, NULL);
    ck_assert_int_eq(o.code, 2);
    ck_assert_msg(strstr(o.err, "--rows samples"), "%s", o.err);
    test_outcome_free(&o);
}
END_TEST

/* smattn check --rows on case directories: the oracle's own outputs pass sampled as whole;
 * a wrong first row (always judged) fails the sampled check too. */
START_TEST(cli_check_sampled)
{
    char v[400], out[200], first[600], sh[32];
    snprintf(out, sizeof out, "%s", test_path(dir, "cases"));
    /* the shard holding a case of S 7 (two heads), written as OUT/<name> */
    const char *name = "shapes/s7_t65_d5";
    snprintf(sh, sizeof sh, "%d/40", conform_shard_of(name, 40));
    test_outcome o = cli("gen", "--suite", "quick", "--no-vectors", "--shard", sh, out, NULL);
    ck_assert_msg(o.code == 0, "%s", o.err);
    test_outcome_free(&o);
    snprintf(first, sizeof first, "%s/shapes-s7_t65_d5", out); /* "/" becomes "-" */
    o = cli("ref", first, first, "--dtype", "f32", NULL); /* exact outputs: conforming */
    ck_assert_msg(o.code == 0, "%s: %s", first, o.err);
    test_outcome_free(&o);
    test_unmark_ref_set(first);
    out[0] = '\0';
    strcat(out, first);
    o = cli("check", out, "--rows", "1", "--seed", "5", NULL);
    ck_assert_msg(o.code == 0, "%s%s", o.out, o.err);
    ck_assert_msg(strstr(verdict(o.out, v, sizeof v), "verdict: CONFORMING (sampled: "), "%s", v);
    test_outcome_free(&o);
    o = cli("check", out, NULL);
    ck_assert_int_eq(o.code, 0);
    test_outcome_free(&o);
    /* O[0, 0, 0, 0] (row 0 of batch 0, head 0) made wrong; the set's marker removed so
     * that the changed file is judged rather than refused */
    char f[700];
    snprintf(f, sizeof f, "%s/o.npy", first);
    FILE *fp = fopen(f, "r+b");
    ck_assert_ptr_nonnull(fp);
    unsigned char h[10];
    ck_assert_int_eq(fread(h, 1, 10, fp), 10);
    long data = 10 + (long)(h[8] | h[9] << 8); /* npy 1.0: the header's length at 8 */
    float big = 1e3f;
    ck_assert_int_eq(fseek(fp, data, SEEK_SET), 0);
    ck_assert_int_eq(fwrite(&big, 4, 1, fp), 1);
    fclose(fp);
    unlink(test_path(first, ".smattn-set"));
    o = cli("check", out, "--rows", "1", NULL);
    ck_assert_int_eq(o.code, 1);
    ck_assert_msg(strstr(verdict(o.out, v, sizeof v), "NOT CONFORMING (sampled: "), "%s", v);
    test_outcome_free(&o);
}
END_TEST

Suite *rows_suite(void);
Suite *rows_suite(void)
{
    Suite *s = suite_create("rows");
    TCase *tc = tcase_create("rule");
    tcase_add_test(tc, pick_rule);
    tcase_add_test(tc, list_of_stored_rows);
    tcase_add_test(tc, ref_and_bound_on_listed_rows);
    tcase_add_test(tc, judge_on_sampled_rows);
    suite_add_tcase(s, tc);
    tc = tcase_create("cli");
    tcase_add_checked_fixture(tc, setup, teardown);
    tcase_set_timeout(tc, 120);
    tcase_add_test(tc, cli_sampled_verdicts);
    tcase_add_test(tc, cli_sampled_merge);
    tcase_add_test(tc, cli_check_sampled);
    suite_add_tcase(s, tc);
    return s;
}
