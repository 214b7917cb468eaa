/* SPDX-License-Identifier: MIT */
/* report.c: the results of a run for people and for CI: a summary table by category and a
 * verdict line, a JSON report (every case with its figures), JUnit XML (one testcase per
 * case), a self-contained HTML page with an SVG plot of error/bound, and the baseline
 * gate that compares a run with a stored JSON report. */
#define _DEFAULT_SOURCE 1 /* realpath */
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <json.h>

#include "conform/conform.h"
#include "io/util.h"

static const char *const status_names[3] = {"pass", "fail", "skip"};

conform_totals conform_report_totals(const conform_report *rep)
{
    conform_totals t = {rep->n, 0, 0, 0};
    for (size_t k = 0; k < rep->n; k++) {
        conform_status s = rep->results[k].status;
        t.passed += s == CONFORM_PASS;
        t.failed += s == CONFORM_FAIL;
        t.skipped += s == CONFORM_SKIP;
    }
    return t;
}

void conform_report_rows(const conform_report *rep, int64_t *judged, int64_t *total)
{
    *judged = *total = 0;
    for (size_t k = 0; k < rep->n; k++) {
        *judged += rep->results[k].rows_judged;
        *total += rep->results[k].rows_total;
    }
}

/* A case skipped because the oracle (or the bound) could not judge it: judge.c's and
 * judge_backward.c's reasons; the kernel had no part in it. */
static int oracle_skip(const conform_result *r)
{
    return r->status == CONFORM_SKIP &&
           (!strncmp(r->reason, CONFORM_SKIP_ORACLE_UNDECIDED,
                     strlen(CONFORM_SKIP_ORACLE_UNDECIDED)) ||
            !strncmp(r->reason, CONFORM_SKIP_ORACLE_FAILED, strlen(CONFORM_SKIP_ORACLE_FAILED)));
}

/* Sampled: a case judged fewer rows than it has (--rows); its verdict is not the full one. */
int conform_report_sampled(const conform_report *rep)
{
    for (size_t k = 0; k < rep->n; k++)
        if (rep->results[k].rows_judged < rep->results[k].rows_total)
            return 1;
    return 0;
}

/* "sampled: J of M rows judged (--rows K, seed N); " for a sampled report, else "". */
static const char *sampled_str(const conform_report *rep, char *buf, size_t cap)
{
    buf[0] = '\0';
    if (!conform_report_sampled(rep))
        return buf;
    int64_t j, m;
    conform_report_rows(rep, &j, &m);
    snprintf(buf, cap, "sampled: %lld of %lld rows judged (--rows %lld, seed %llu); ",
             (long long)j, (long long)m, (long long)rep->sample.k,
             (unsigned long long)rep->sample.seed);
    return buf;
}

/* The cases the oracle could not judge: nothing proves their outputs right or wrong, so a
 * report holding one is not conforming (a kernel's wrong output there would otherwise pass
 * beside any passing case). */
static size_t unjudged_cases(const conform_report *rep)
{
    size_t n = 0;
    for (size_t k = 0; k < rep->n; k++)
        n += oracle_skip(&rep->results[k]);
    return n;
}

/* Conforming: nothing failed, something ran, no shard is missing (a partial merge), and no
 * case was left unjudged by the oracle. */
int conform_report_conforming(const conform_report *rep)
{
    conform_totals t = conform_report_totals(rep);
    return t.failed == 0 && t.passed > 0 && !(rep->missing_shards && rep->missing_shards[0]) &&
           unjudged_cases(rep) == 0;
}

/* ---- categories, in order of first appearance ------------------------------------------ */

typedef struct category {
    const char *name;
    size_t cases, passed, failed, skipped;
    size_t judged;             /* cases whose outputs were compared (not crashed, not skipped) */
    double max_ratio, max_ulp; /* over the cases judged */
} category;

/* A category's figure, or "-" when none of its cases was judged (all skipped, or crashed,
 * hung, ...: 0 would claim a perfect score). */
static const char *figure(const category *c, double x, char *buf, size_t cap)
{
    if (c->judged == 0)
        return "-";
    snprintf(buf, cap, "%.4g", x);
    return buf;
}

/* ---- the precision model and the conventions ------------------------------------------- */

static const char *const pm_fields[7] = {"u_score", "u_acc",   "exp_ulps", "u_p",
                                         "blocks",  "acc_len", "tiny"};

static void pm_values(const smattn_precision *m, double v[7])
{
    v[0] = m->u_score, v[1] = m->u_acc, v[2] = m->exp_ulps, v[3] = m->u_p;
    v[4] = (double)m->blocks;
    v[5] = m->acc_len == 0 ? HUGE_VAL : (double)m->acc_len; /* 0: every term, the loosest */
    v[6] = m->tiny;
}

static void pm_str(const smattn_precision *m, char *out, size_t cap)
{
    snprintf(out, cap,
             "u_score %.3g, u_acc %.3g, exp_ulps %.3g, u_p %.3g, blocks %lld, "
             "acc_len %lld, tiny %.3g",
             m->u_score, m->u_acc, m->exp_ulps, m->u_p, (long long)m->blocks, (long long)m->acc_len,
             m->tiny);
}

void conform_precision_looser(const smattn_precision *a, const smattn_precision *b,
                              int roundoff_only, char *out, size_t cap)
{
    double va[7], vb[7];
    pm_values(a, va);
    pm_values(b, vb);
    out[0] = '\0';
    for (int f = 0; f < 7; f++) {
        if (roundoff_only && f != 0 && f != 1 && f != 3)
            continue;
        if (va[f] <= vb[f]) /* NaN is looser than anything: it turns every bound off */
            continue;
        size_t n = strlen(out);
        if (f == 5)
            snprintf(out + n, cap - n, "%sacc_len %lld looser than %lld", n ? ", " : "",
                     (long long)a->acc_len, (long long)b->acc_len);
        else
            snprintf(out + n, cap - n, "%s%s %.3g > %.3g", n ? ", " : "", pm_fields[f], va[f],
                     vb[f]);
    }
}

void conform_conventions_str(const smattn_plugin_info *info, char *out, size_t cap)
{
    static const char *const em[3] = {"zero", "nan", "mean"};
    static const char *const el[3] = {"neg_inf", "pos_inf", "zero"};
    char caps[400];
    conform_caps_str(info->caps, caps, sizeof caps);
    snprintf(out, cap, "empty rows %s, empty LSE %s; claims %s",
             em[(unsigned)info->empty_rows < 3 ? info->empty_rows : 0],
             el[(unsigned)info->empty_lse < 3 ? info->empty_lse : 0], caps[0] ? caps : "nothing");
}

static void append(char **text, size_t *len, const char *line);

/* Where model a is looser than the arithmetic of format model `want` (--require-precision):
 * every roundoff field (u_score, u_acc, u_p) and exp_ulps above want's; tiny above the
 * format's smallest normal (a kernel that flushes subnormals to zero is still computing in
 * the format; SPEC 6.1 lets tiny be the smallest normal then, which is want.tiny / (2 u) for
 * want.tiny the subnormal spacing 2^(emin - prec + 1) and u = 2^-prec). blocks and acc_len
 * describe the algorithm (online-softmax rescalings, blocked sums), not the arithmetic: an
 * online-softmax binary32 kernel is a binary32 kernel (the built-in one declares blocks and
 * acc_len of its tiles and chunks, larger than T on short rows): they are not judged here
 * (the baseline gate compares them). */
static void require_looser(const smattn_precision *a, const smattn_precision *want, char *out,
                           size_t cap)
{
    conform_precision_looser(a, want, 1, out, cap);
    size_t n = strlen(out);
    if (!(a->exp_ulps <= want->exp_ulps))
        n += (size_t)snprintf(out + n, cap - n, "%sexp_ulps %.3g > %.3g", n ? ", " : "",
                              a->exp_ulps, want->exp_ulps);
    double min_normal = want->tiny / (2 * want->u_acc);
    if (n < cap && !(a->tiny <= min_normal))
        snprintf(out + n, cap - n, "%stiny %.3g > %.3g (the format's smallest normal)",
                 n ? ", " : "", a->tiny, min_normal);
}

void conform_require_precision(conform_report *rep, smattn_dtype t)
{
    static const char *const names[4] = {"f64", "f32", "f16", "bf16"};
    rep->required = names[t];
    rep->precision_failures = 0;
    smattn_precision want = smattn_precision_of(t);
    size_t len = 0;
    char why[400], line[700];
    require_looser(&rep->precision, &want, why, sizeof why);
    if (why[0]) {
        snprintf(line, sizeof line, "  PRECISION the declared model is looser than %s's: %s",
                 names[t], why);
        rep->precision_failures++;
        append(&rep->precision_text, &len, line);
    }
    for (size_t k = 0; k < rep->n; k++) {
        const conform_result *r = &rep->results[k];
        if (!r->has_pm)
            continue;
        require_looser(&r->pm, &want, why, sizeof why);
        /* blocks and acc_len describe the algorithm, not the format, so the format's model
         * (one block, serial sums) cannot bound them; but no algorithm rescales more than
         * once per key (plus a first block and a split-K merge) or passes a term through
         * more than a serial sum of every key plus a merge per block and chunk: claims
         * beyond that only widen the bound. */
        int64_t T = r->shape[2], nb = T + 3, na = 2 * (T + 2);
        size_t n = strlen(why);
        if (n < sizeof why && r->pm.blocks > nb)
            n += (size_t)snprintf(why + n, sizeof why - n,
                                  "%sblocks %lld > T + 3 = %lld (more rescalings than keys)",
                                  n ? ", " : "", (long long)r->pm.blocks, (long long)nb);
        if (n < sizeof why && r->pm.acc_len > na)
            snprintf(why + n, sizeof why - n, "%sacc_len %lld > 2 (T + 2) = %lld", n ? ", " : "",
                     (long long)r->pm.acc_len, (long long)na);
        if (!why[0])
            continue;
        snprintf(line, sizeof line, "  PRECISION %s: its model is looser than %s's: %s", r->name,
                 names[t], why);
        rep->precision_failures++;
        append(&rep->precision_text, &len, line);
    }
}

static size_t categories(const conform_report *rep, category *cat, size_t cap)
{
    size_t n = 0;
    for (size_t k = 0; k < rep->n; k++) {
        const conform_result *r = &rep->results[k];
        size_t c = 0;
        while (c < n && strcmp(cat[c].name, r->category))
            c++;
        if (c == n) {
            if (n == cap)
                continue;
            memset(&cat[n], 0, sizeof cat[n]);
            cat[n++].name = r->category;
        }
        cat[c].cases++;
        cat[c].passed += r->status == CONFORM_PASS;
        cat[c].failed += r->status == CONFORM_FAIL;
        cat[c].skipped += r->status == CONFORM_SKIP;
        if (r->status != CONFORM_SKIP && r->elements > 0) {
            cat[c].judged++;
            cat[c].max_ratio = fmax(cat[c].max_ratio, r->max_ratio);
            cat[c].max_ulp = fmax(cat[c].max_ulp, r->max_ulp);
        }
    }
    return n;
}

#define MAX_CATEGORIES 64

/* The categories every case of which was skipped, ", "-separated into buf ("" if none):
 * a verdict says nothing about them, so every report names them. Their number. */
static size_t untested(const conform_report *rep, char *buf, size_t cap)
{
    category cat[MAX_CATEGORIES];
    size_t nc = categories(rep, cat, MAX_CATEGORIES), k = 0, len = 0;
    buf[0] = '\0';
    for (size_t c = 0; c < nc; c++)
        if (cat[c].cases > 0 && cat[c].skipped == cat[c].cases) {
            if (len < cap)
                len += (size_t)snprintf(buf + len, cap - len, "%s%s", k ? ", " : "", cat[c].name);
            k++;
        }
    return k;
}

/* The length of the UTF-8 character at p (1 to 4), or 0 if p does not start a valid one
 * (RFC 3629: no overlong form, no surrogate, nothing above U+10FFFF), with its code point. */
static size_t utf8_char(const unsigned char *p, unsigned *cp)
{
    unsigned c = p[0];
    size_t n = c < 0x80             ? 1
               : (c & 0xe0) == 0xc0 ? 2
               : (c & 0xf0) == 0xe0 ? 3
               : (c & 0xf8) == 0xf0 ? 4
                                    : 0;
    if (n == 0)
        return 0;
    unsigned v = n == 1 ? c : c & (0x7fu >> n);
    for (size_t k = 1; k < n; k++) {
        if ((p[k] & 0xc0) != 0x80) /* also stops at the NUL */
            return 0;
        v = v << 6 | (p[k] & 0x3fu);
    }
    static const unsigned least[5] = {0, 0, 0x80, 0x800, 0x10000};
    if (v < least[n] || v > 0x10ffff || (v >= 0xd800 && v <= 0xdfff))
        return 0;
    *cp = v;
    return n;
}

size_t conform_text_clean(const char *s, int keep_lines, char *out, size_t cap)
{
    size_t o = 0;
    if (cap == 0)
        return 0;
    for (const unsigned char *p = (const unsigned char *)s; p && *p;) {
        unsigned cp = 0;
        size_t n = utf8_char(p, &cp);
        char esc[8 * 4 + 1];
        const char *piece = (const char *)p;
        size_t len = n;
        if (n && keep_lines && (cp == '\n' || cp == '\t')) {
            /* as it is */
        } else if (n && cp == '\n') {
            piece = "\\n", len = 2;
        } else if (n && cp == '\t') {
            piece = "\\t", len = 2;
        } else if (!n || cp < 0x20 || (cp >= 0x7f && cp < 0xa0) || cp == 0xfffe || cp == 0xffff) {
            /* a control character (C0, DEL, C1), a character XML forbids, or a byte that is
             * not UTF-8: its bytes as \xHH */
            size_t m = n ? n : 1;
            len = 0;
            for (size_t k = 0; k < m; k++)
                len += (size_t)snprintf(esc + len, sizeof esc - len, "\\x%02x", p[k]);
            piece = esc;
            n = m;
        }
        if (o + len >= cap)
            break;
        memcpy(out + o, piece, len);
        o += len;
        p += n;
    }
    out[o] = '\0';
    return o;
}

/* s for a text report (conform_text_clean, newlines escaped): names and text that come
 * from the plugin, a manifest or a file must not forge lines of a CI log or drive a
 * terminal. */
static const char *clean(const char *s, char *buf, size_t cap)
{
    conform_text_clean(s, 0, buf, cap);
    return buf;
}

/* A JSON string of s made valid UTF-8 without control characters but newline and tab
 * (json-c escapes those): every report is valid JSON whatever the plugin named itself. */
static json_object *jstr(const char *s)
{
    size_t cap = 4 * strlen(s ? s : "") + 1;
    char *buf = malloc(cap);
    if (!buf)
        return json_object_new_string("");
    conform_text_clean(s ? s : "", 1, buf, cap);
    json_object *o = json_object_new_string(buf);
    free(buf);
    return o;
}

/* What the kernel printed during a failed case, indented and marked as its output. */
static void print_output(FILE *f, const char *out)
{
    if (!out[0])
        return;
    fprintf(f, "       the kernel's output:\n");
    for (const char *s = out; *s;) {
        size_t n = strcspn(s, "\n");
        char line[CONFORM_OUTPUT_SHOWN + 1], esc[4 * CONFORM_OUTPUT_SHOWN + 8];
        snprintf(line, sizeof line, "%.*s", (int)n, s);
        fprintf(f, "       | %s\n", clean(line, esc, sizeof esc));
        s += n + (s[n] == '\n');
    }
}

/* The first `max` lines of text (one per '\n'), each escaped (they hold case names from a
 * manifest or a baseline); the number printed. */
static size_t print_lines(FILE *f, const char *text, size_t max)
{
    size_t shown = 0;
    for (const char *s = text ? text : ""; *s && shown < max; shown++) {
        size_t n = strcspn(s, "\n");
        char line[1024], esc[4 * sizeof line];
        snprintf(line, sizeof line, "%.*s", (int)(n < sizeof line ? n : sizeof line - 1), s);
        fprintf(f, "%s\n", clean(line, esc, sizeof esc));
        s += n + (s[n] == '\n');
    }
    return shown;
}

void conform_report_print(const conform_report *rep, FILE *f)
{
    category cat[MAX_CATEGORIES];
    size_t nc = categories(rep, cat, MAX_CATEGORIES);
    char name[300], version[300], path[1200];
    fprintf(f, "kernel %s %s (%s), suite %s, seed %llu\n", clean(rep->kernel_name, name, sizeof name),
            clean(rep->kernel_version, version, sizeof version),
            clean(rep->kernel_path, path, sizeof path), rep->suite, (unsigned long long)rep->seed);
    char pm[300];
    pm_str(&rep->precision, pm, sizeof pm);
    fprintf(f, "precision model%s: %s\n",
            rep->per_problem ? " (declared; per problem by smattn_plugin_precision)" : "", pm);
    if (rep->conventions[0])
        fprintf(f, "conventions: %s\n", rep->conventions);
    if (rep->vectors_dir)
        fprintf(f, "golden vectors: %zu ran%s%s\n", rep->vectors,
                rep->vectors_dir[0] ? " from " : " (none: --no-vectors)",
                clean(rep->vectors_dir, path, sizeof path));
    if (rep->sample.k > 0 || conform_report_sampled(rep)) {
        int64_t j, m;
        conform_report_rows(rep, &j, &m);
        if (conform_report_sampled(rep))
            fprintf(f, "rows: sampled, %lld of %lld judged (--rows %lld, seed %llu: %s); the "
                       "rows left out were not judged\n",
                    (long long)j, (long long)m, (long long)rep->sample.k,
                    (unsigned long long)rep->sample.seed, CONFORM_ROWS_RULE);
        else
            fprintf(f, "rows: all %lld judged (--rows %lld covers every row)\n", (long long)m,
                    (long long)rep->sample.k);
    }
    fprintf(f, "\n");
    fprintf(f, "  %-12s %6s %6s %6s %6s  %14s %12s\n", "category", "cases", "pass", "fail", "skip",
            "max err/bound", "max ulp");
    for (size_t c = 0; c < nc; c++) {
        char b1[32], b2[32], cn[4 * sizeof((conform_result *)0)->category];
        fprintf(f, "  %-12s %6zu %6zu %6zu %6zu  %14s %12s\n", clean(cat[c].name, cn, sizeof cn),
                cat[c].cases, cat[c].passed, cat[c].failed, cat[c].skipped,
                figure(&cat[c], cat[c].max_ratio, b1, sizeof b1),
                figure(&cat[c], cat[c].max_ulp, b2, sizeof b2));
    }
    conform_totals t = conform_report_totals(rep);
    fprintf(f, "  %-12s %6zu %6zu %6zu %6zu\n\n", "total", t.cases, t.passed, t.failed, t.skipped);
    if (t.failed) {
        fprintf(f, "failures:\n");
        for (size_t k = 0; k < rep->n; k++)
            if (rep->results[k].status == CONFORM_FAIL) {
                char why[sizeof rep->results[k].reason * 4], nm[sizeof rep->results[k].name * 4];
                fprintf(f, "  FAIL %s: %s\n", clean(rep->results[k].name, nm, sizeof nm),
                        clean(rep->results[k].reason, why, sizeof why));
                print_output(f, rep->results[k].output);
            }
        fprintf(f, "\n");
    }
    const size_t unjudged = unjudged_cases(rep);
    if (unjudged) { /* skips, but not the kernel's: say which and why */
        fprintf(f, "not judged (the oracle's limits, not the kernel's):\n");
        for (size_t k = 0; k < rep->n; k++)
            if (oracle_skip(&rep->results[k])) {
                char why[sizeof rep->results[k].reason * 4], nm[sizeof rep->results[k].name * 4];
                fprintf(f, "  SKIP %s: %s\n", clean(rep->results[k].name, nm, sizeof nm),
                        clean(rep->results[k].reason, why, sizeof why));
            }
        fprintf(f, "\n");
    }
    if (rep->required) {
        if (rep->precision_failures) {
            fprintf(f, "--require-precision %s: %zu failures\n", rep->required,
                    rep->precision_failures);
            print_lines(f, rep->precision_text, (size_t)-1);
            fprintf(f, "\n");
        } else
            fprintf(f, "--require-precision %s: the model is within it\n", rep->required);
    }
    if (rep->baseline_path) {
        if (rep->regressions) {
            fprintf(f,
                    "baseline %s: %zu regressions (limit: ratio > max(%.2f x, +%.2f), a "
                    "pass turned into a failure, a skip or a missing case, or a looser "
                    "precision model)\n",
                    clean(rep->baseline_path, path, sizeof path), rep->regressions,
                    CONFORM_BASELINE_FACTOR, CONFORM_BASELINE_SLACK);
            /* The first CONFORM_REGRESSIONS_SHOWN lines; all of them are in the JSON. */
            const char *s = rep->regression_text ? rep->regression_text : "";
            size_t lines = 0;
            for (const char *q = s; *q; q++)
                lines += *q == '\n';
            size_t shown = print_lines(f, s, CONFORM_REGRESSIONS_SHOWN);
            if (lines > shown)
                fprintf(f, "  ... and %zu more (the JSON report lists them all)\n", lines - shown);
            fprintf(f, "\n");
        } else
            fprintf(f, "baseline %s: no regression\n",
                    clean(rep->baseline_path, path, sizeof path));
    }
    char gaps[1024], smp[200];
    size_t ngaps = untested(rep, gaps, sizeof gaps);
    sampled_str(rep, smp, sizeof smp);
    if (ngaps && (t.passed || t.failed))
        fprintf(f,
                "untested: every case of %zu categories was skipped (not claimed, declined or "
                "not run), so the verdict says nothing of them: %s\n",
                ngaps, gaps);
    if (rep->missing_shards && rep->missing_shards[0])
        fprintf(f, "verdict: NOT CONFORMING (%sa partial merge: shards %s missing; of the rest "
                   "%zu passed, %zu failed, %zu skipped)\n",
                smp, rep->missing_shards, t.passed, t.failed, t.skipped);
    else if (t.passed == 0 && t.failed == 0)
        fprintf(f, "verdict: NOT CONFORMING (no case ran: every case was skipped)\n");
    else if (t.failed)
        fprintf(f, "verdict: NOT CONFORMING (%s%zu of %zu cases failed, %zu skipped)\n", smp,
                t.failed, t.cases, t.skipped);
    else if (unjudged)
        fprintf(f,
                "verdict: NOT CONFORMING (%s%zu cases the oracle could not judge, so nothing "
                "proves their outputs right; %zu passed, %zu skipped)\n",
                smp, unjudged, t.passed, t.skipped);
    else if (rep->regressions || rep->precision_failures)
        fprintf(f, "verdict: NOT CONFORMING (%s%s; every case passed: %zu, %zu skipped)\n", smp,
                rep->regressions && rep->precision_failures ? "baseline regression, --require-precision"
                : rep->regressions                          ? "baseline regression"
                                                            : "--require-precision",
                t.passed, t.skipped);
    else
        fprintf(f, "verdict: CONFORMING (%s%zu cases passed, %zu skipped%s%s%s)\n", smp, t.passed,
                t.skipped, ngaps ? "; untested categories: " : "", ngaps ? gaps : "",
                ngaps ? ", every case skipped" : "");
    /* Why cases were skipped, by kind: the kernel (unclaimed, declined, or its skip file),
     * --skip, and cases not run (the --time budget, or a run stopped after hangs). */
    size_t not_run = 0, by_option = 0, by_file = 0, oracle_own = 0;
    for (size_t k = 0; k < rep->n; k++) {
        const conform_result *r = &rep->results[k];
        if (r->status != CONFORM_SKIP)
            continue;
        not_run += !strncmp(r->reason, "not run:", 8);
        by_option += !strcmp(r->reason, "skipped by --skip");
        by_file += !strncmp(r->reason, "skipped by the kernel (skip file)", 33);
        oracle_own +=
            !strncmp(r->reason, CONFORM_SKIP_ORACLE_OUTPUTS, strlen(CONFORM_SKIP_ORACLE_OUTPUTS));
    }
    /* (unjudged: the oracle's limits, not the kernel's) */
    size_t by_kernel = t.skipped - not_run - by_option - by_file - oracle_own - unjudged;
    if (t.skipped) {
        const char *sep = "";
        fprintf(f, "skipped:");
        if (by_kernel)
            fprintf(f, " %zu not claimed by the kernel or declined by it", by_kernel), sep = ",";
        if (by_file)
            fprintf(f, "%s %zu by the kernel's skip file", sep, by_file), sep = ",";
        if (by_option)
            fprintf(f, "%s %zu by --skip", sep, by_option), sep = ",";
        if (oracle_own)
            fprintf(f, "%s %zu holding the oracle's own outputs (smattn ref wrote them)", sep,
                    oracle_own),
                sep = ",";
        if (unjudged)
            fprintf(f, "%s %zu the oracle could not judge (its precision limit or memory)", sep,
                    unjudged),
                sep = ",";
        if (not_run)
            fprintf(f, "%s %zu not run (the --time budget ran out, or the run stopped)", sep,
                    not_run);
        fprintf(f, "\n");
    }
    /* Rows out of contract (SPEC 6.8) are not judged by size, only held to what any kernel
     * can meet there: say how many, and where. */
    size_t oc_cases = 0;
    long long oc_rows = 0;
    for (size_t k = 0; k < rep->n; k++)
        if (rep->results[k].status != CONFORM_SKIP && rep->results[k].unbounded_rows > 0) {
            oc_cases++;
            oc_rows += (long long)rep->results[k].unbounded_rows;
        }
    if (oc_cases) {
        fprintf(f,
                "out of contract (SPEC 6.8, not judged by size; O in the hull of V, LSE not "
                "NaN, P in [0, 1]): %lld rows in %zu cases:",
                oc_rows, oc_cases);
        size_t listed = 0;
        for (size_t k = 0; k < rep->n && listed < 5; k++)
            if (rep->results[k].status != CONFORM_SKIP && rep->results[k].unbounded_rows > 0) {
                char nm[sizeof rep->results[k].name * 4];
                fprintf(f, "%s %s (%lld)", listed++ ? "," : "",
                        clean(rep->results[k].name, nm, sizeof nm),
                        (long long)rep->results[k].unbounded_rows);
            }
        fprintf(f, "%s\n", oc_cases > listed ? ", ..." : "");
    }
    /* Every case runs twice (conform/run.c): whether the bits stayed the same. A kernel
     * claiming determinism fails on a change; any other is told here. */
    size_t reran = 0, changed = 0;
    for (size_t k = 0; k < rep->n; k++) {
        reran += rep->results[k].rerun != 0;
        changed += rep->results[k].rerun == -1;
    }
    if (changed) {
        fprintf(f, "not deterministic: %zu of %zu cases run twice gave other bits the second "
                   "time:", changed, reran);
        size_t listed = 0;
        for (size_t k = 0; k < rep->n && listed < 5; k++)
            if (rep->results[k].rerun == -1) {
                char nm[sizeof rep->results[k].name * 4];
                fprintf(f, "%s %s", listed++ ? "," : "", clean(rep->results[k].name, nm, sizeof nm));
            }
        fprintf(f, "%s\n", changed > listed ? ", ..." : "");
    } else if (reran)
        fprintf(f, "deterministic: each of the %zu cases run twice gave the same bits\n", reran);
}

/* ---- JSON ------------------------------------------------------------------------------ */

/* A finite number, or null (JSON has no infinity). */
static json_object *num(double x)
{
    return isfinite(x) ? json_object_new_double(x) : NULL;
}

static json_object *pm_json(const smattn_precision *m)
{
    json_object *o = json_object_new_object();
    json_object_object_add(o, "u_score", json_object_new_double(m->u_score));
    json_object_object_add(o, "u_acc", json_object_new_double(m->u_acc));
    json_object_object_add(o, "exp_ulps", json_object_new_double(m->exp_ulps));
    json_object_object_add(o, "u_p", json_object_new_double(m->u_p));
    json_object_object_add(o, "blocks", json_object_new_int64(m->blocks));
    json_object_object_add(o, "acc_len", json_object_new_int64(m->acc_len));
    json_object_object_add(o, "tiny", json_object_new_double(m->tiny));
    return o;
}

/* A model stored by pm_json; 0, or -1 if o is not one (a field missing or not a number;
 * blocks and acc_len integers). */
int conform_pm_from_json(json_object *o, smattn_precision *m)
{
    json_object *v[7];
    for (int f = 0; f < 7; f++) {
        if (!o || !json_object_object_get_ex(o, pm_fields[f], &v[f]))
            return -1;
        int is_int = json_object_is_type(v[f], json_type_int);
        if (!is_int && (f == 4 || f == 5 || !json_object_is_type(v[f], json_type_double)))
            return -1;
    }
    m->u_score = json_object_get_double(v[0]);
    m->u_acc = json_object_get_double(v[1]);
    m->exp_ulps = json_object_get_double(v[2]);
    m->u_p = json_object_get_double(v[3]);
    m->blocks = json_object_get_int64(v[4]);
    m->acc_len = json_object_get_int64(v[5]);
    m->tiny = json_object_get_double(v[6]);
    return 0;
}

int conform_file_close(FILE *f, const char *path, char *err, size_t errlen)
{
    int bad = ferror(f);
    if (fclose(f) || bad) {
        snprintf(err, errlen, "%s: cannot write", path);
        return -1;
    }
    return 0;
}

/* What a report of this tool begins with, and a text each kind holds near its start: an
 * existing file is replaced only when it is one of them (or empty), so that a report path
 * that names a case's q.npy, a source file or another program's output by mistake loses
 * nothing. */
#define REPORT_HEAD ((size_t)64 << 10) /* past a kernel path of PATH_MAX bytes, escaped */
static int is_report_text(const char *head)
{
    static const char *const kinds[3][2] = {{"{", "\"smattn_version\""},
                                            {"<?xml", "<testsuites name=\"smattn conform\""},
                                            {"<!DOCTYPE html>", "<title>smattn conform"}};
    const char *h = head + strspn(head, " \t\r\n");
    for (int k = 0; k < 3; k++)
        if (!strncmp(h, kinds[k][0], strlen(kinds[k][0])) && strstr(h, kinds[k][1]))
            return 1;
    return 0;
}

/* 0 when the regular file at path is empty or a report of this tool, else -1 with the
 * reason in why. A file that cannot be read is taken as it was before (it can only be
 * written). */
static int replaceable(const char *path, off_t size, char *why, size_t cap)
{
    if (size == 0)
        return 0;
    int fd = open(path, O_RDONLY | O_NONBLOCK | O_NOCTTY | O_CLOEXEC);
    if (fd < 0)
        return 0;
    char *head = malloc(REPORT_HEAD + 1);
    ssize_t n = head ? pread(fd, head, REPORT_HEAD, 0) : -1;
    close(fd);
    int ok = 0;
    if (n > 0) {
        head[n] = '\0';
        ok = memchr(head, '\0', (size_t)n) == NULL && is_report_text(head);
    }
    free(head);
    if (!ok)
        snprintf(why, cap,
                 "it exists and is not a report of smattn (a JSON, JUnit or HTML report is "
                 "replaced; any other file is kept): remove it, or give another path");
    return ok ? 0 : -1;
}

/* Open path for writing as a regular file (see conform_report_open): the descriptor, or -1
 * with the reason in why; *created says the file did not exist before. */
static int open_report_fd(const char *path, int *created, char *why, size_t cap)
{
    struct stat st;
    *created = 0;
    if (stat(path, &st) == 0 && !S_ISREG(st.st_mode)) {
        snprintf(why, cap, "not a regular file (a FIFO, a device or a directory)");
        return -1;
    }
    /* O_NONBLOCK: a FIFO put there since the stat fails at once (ENXIO) or is opened
     * without waiting, and refused below on the descriptor itself. */
    int fl = O_WRONLY | O_NONBLOCK | O_NOCTTY | O_CLOEXEC;
    int fd = open(path, fl | O_CREAT | O_EXCL, 0644);
    if (fd >= 0)
        *created = 1;
    else if (errno == EEXIST)
        fd = open(path, fl);
    if (fd < 0) {
        snprintf(why, cap, "%s", errno == ENXIO ? "not a regular file (a FIFO)" : strerror(errno));
        return -1;
    }
    if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
        snprintf(why, cap, "not a regular file (a FIFO, a device or a directory)");
        close(fd);
        if (*created)
            unlink(path);
        return -1;
    }
    if (!*created && replaceable(path, st.st_size, why, cap)) {
        close(fd);
        return -1;
    }
    return fd;
}

int conform_report_check(const char *name, const char *path, char *err, size_t errlen)
{
    char why[300];
    int created;
    int fd = open_report_fd(path, &created, why, sizeof why);
    if (fd < 0) {
        snprintf(err, errlen, "%s %s: cannot write: %s", name, path, why);
        return -1;
    }
    close(fd);
    if (created)
        unlink(path);
    return 0;
}

/* The temporary a report is being written to, for a signal handler to remove. */
static char *volatile live_report_temp;

void conform_report_remove_temp(void)
{
    char *p = live_report_temp;
    if (p)
        unlink(p);
}

FILE *conform_report_open(const char *path, conform_report_file *rf, char *err, size_t errlen)
{
    char why[300];
    int created;
    memset(rf, 0, sizeof *rf);
    int fd = open_report_fd(path, &created, why, sizeof why);
    struct stat st;
    FILE *f = NULL;
    if (fd >= 0 && fstat(fd, &st) == 0) {
        rf->created = created;
        /* A symbolic link keeps pointing where it did: its target is replaced. */
        char *target = realpath(path, NULL);
        rf->final = target ? target : strdup(path);
        char *tmp = NULL;
        int tfd = -1;
        if (rf->final) {
            const char *slash = strrchr(rf->final, '/');
            int dl = slash ? (int)(slash - rf->final) + 1 : 0;
            size_t n = strlen(rf->final) + 16;
            if ((tmp = malloc(n))) {
                snprintf(tmp, n, "%.*s.%s.XXXXXX", dl, rf->final, rf->final + dl);
                tfd = mkstemp(tmp);
            }
        }
        if (tfd >= 0) {
            live_report_temp = tmp;
            (void)fchmod(tfd, st.st_mode & 07777); /* the mode the file has (or would get) */
            close(fd);
            fd = tfd;
            rf->tmp = tmp;
        } else {
            free(tmp); /* a directory that takes no new file: the file itself, emptied */
            if (ftruncate(fd, 0) != 0)
                snprintf(why, sizeof why, "%s", strerror(errno)), close(fd), fd = -1;
        }
        if (fd >= 0 && fcntl(fd, F_SETFL, 0) == 0)
            f = fdopen(fd, "w");
        else if (fd >= 0)
            snprintf(why, sizeof why, "%s", strerror(errno));
    } else if (fd >= 0) {
        snprintf(why, sizeof why, "%s", strerror(errno));
    }
    if (!f) {
        if (fd >= 0)
            close(fd);
        conform_report_abandon(rf);
        snprintf(err, errlen, "%s: cannot write: %s", path, why);
    }
    rf->f = f;
    return f;
}

void conform_report_abandon(conform_report_file *rf)
{
    if (rf->f)
        fclose(rf->f);
    if (rf->tmp) {
        unlink(rf->tmp);
        live_report_temp = NULL;
    }
    if (rf->created && rf->final)
        unlink(rf->final); /* the empty file made to check the path */
    free(rf->tmp);
    free(rf->final);
    memset(rf, 0, sizeof *rf);
}

int conform_report_close(conform_report_file *rf, const char *path, char *err, size_t errlen)
{
    FILE *f = rf->f;
    errno = 0;
    int bad = fflush(f) != 0 || ferror(f) || (rf->tmp && fsync(fileno(f)) != 0);
    int e = errno;
    rf->f = NULL;
    if (fclose(f) != 0 && !bad)
        bad = 1, e = errno;
    if (!bad && rf->tmp && rename(rf->tmp, rf->final) != 0)
        bad = 1, e = errno;
    if (bad) {
        snprintf(err, errlen, "%s: cannot write: %s%s", path, e ? strerror(e) : "write error",
                 !rf->tmp       ? ""
                 : rf->created ? " (no file left)"
                               : " (the file is as it was)");
        conform_report_abandon(rf);
        return -1;
    }
    live_report_temp = NULL;
    free(rf->tmp);
    free(rf->final);
    memset(rf, 0, sizeof *rf);
    return 0;
}

static int write_text(const char *path, const char *text, char *err, size_t errlen)
{
    conform_report_file rf;
    FILE *f = conform_report_open(path, &rf, err, errlen);
    if (!f)
        return -1;
    fputs(text, f);
    return conform_report_close(&rf, path, err, errlen);
}

int conform_report_json(const conform_report *rep, const char *path, char *err, size_t errlen)
{
    json_object *root = json_object_new_object();
    json_object *k = json_object_new_object();
    json_object_object_add(k, "name", jstr(rep->kernel_name));
    json_object_object_add(k, "version", jstr(rep->kernel_version));
    json_object_object_add(k, "path", jstr(rep->kernel_path));
    json_object_object_add(root, "kernel", k);
    json_object_object_add(root, "suite", jstr(rep->suite));
    json_object_object_add(root, "seed", json_object_new_int64((int64_t)rep->seed));
    /* what `smattn report merge` compares: the version, the shard, the --only filter */
    char ver[32];
    snprintf(ver, sizeof ver, "%d.%d.%d", SMATTN_VERSION_MAJOR, SMATTN_VERSION_MINOR,
             SMATTN_VERSION_PATCH);
    json_object_object_add(root, "smattn_version",
                           jstr(rep->smattn_version ? rep->smattn_version : ver));
    json_object *sh = json_object_new_object();
    json_object_object_add(sh, "index", json_object_new_int64(rep->shard_count > 1 ? rep->shard_index : 0));
    json_object_object_add(sh, "count", json_object_new_int64(rep->shard_count > 1 ? rep->shard_count : 1));
    json_object_object_add(root, "shard", sh);
    json_object_object_add(root, "only", rep->only ? jstr(rep->only) : NULL);
    if (rep->missing_shards && rep->missing_shards[0])
        json_object_object_add(root, "missing_shards", jstr(rep->missing_shards));
    json_object_object_add(root, "precision", pm_json(&rep->precision));
    json_object_object_add(root, "precision_per_problem",
                           json_object_new_boolean(rep->per_problem));
    json_object_object_add(root, "conventions", jstr(rep->conventions));
    if (rep->vectors_dir) {
        json_object *v = json_object_new_object();
        json_object_object_add(v, "dir", jstr(rep->vectors_dir));
        json_object_object_add(v, "ran", json_object_new_int64((int64_t)rep->vectors));
        if (rep->has_vectors_digest) { /* what they held: `smattn report merge` compares it */
            char dg[32];
            snprintf(dg, sizeof dg, CONFORM_VECTORS_DIGEST_FMT,
                     (unsigned long long)rep->vectors_digest);
            json_object_object_add(v, "digest", jstr(dg));
        }
        json_object_object_add(root, "vectors", v);
    }
    /* a sampled run is never the full check: its verdict says so */
    int sampled = conform_report_sampled(rep);
    json_object_object_add(root, "verdict",
                           jstr(conform_report_conforming(rep)
                                    ? (sampled ? "conforming (sampled rows)" : "conforming")
                                    : (sampled ? "not conforming (sampled rows)" : "not conforming")));
    if (rep->sample.k > 0 || sampled) { /* which rows: the rule and its inputs reproduce them */
        int64_t j, m;
        conform_report_rows(rep, &j, &m);
        json_object *ro = json_object_new_object();
        json_object_object_add(ro, "sampled", json_object_new_boolean(sampled));
        json_object_object_add(ro, "per_head", json_object_new_int64(rep->sample.k));
        json_object_object_add(ro, "seed", json_object_new_int64((int64_t)rep->sample.seed));
        json_object_object_add(ro, "rule", jstr(CONFORM_ROWS_RULE));
        json_object_object_add(ro, "judged", json_object_new_int64(j));
        json_object_object_add(ro, "total", json_object_new_int64(m));
        json_object_object_add(root, "rows", ro);
    }
    conform_totals t = conform_report_totals(rep);
    json_object *s = json_object_new_object();
    json_object_object_add(s, "cases", json_object_new_int64((int64_t)t.cases));
    json_object_object_add(s, "passed", json_object_new_int64((int64_t)t.passed));
    json_object_object_add(s, "failed", json_object_new_int64((int64_t)t.failed));
    json_object_object_add(s, "skipped", json_object_new_int64((int64_t)t.skipped));
    json_object_object_add(root, "summary", s);
    /* every case of these categories was skipped: the verdict says nothing of them */
    json_object *gaps = json_object_new_array();
    category ucat[MAX_CATEGORIES];
    size_t nu = categories(rep, ucat, MAX_CATEGORIES);
    for (size_t c = 0; c < nu; c++)
        if (ucat[c].cases > 0 && ucat[c].skipped == ucat[c].cases)
            json_object_array_add(gaps, json_object_new_string(ucat[c].name));
    json_object_object_add(root, "untested_categories", gaps);
    category cat[MAX_CATEGORIES];
    size_t nc = categories(rep, cat, MAX_CATEGORIES);
    json_object *cats = json_object_new_object();
    for (size_t c = 0; c < nc; c++) {
        json_object *o = json_object_new_object();
        json_object_object_add(o, "cases", json_object_new_int64((int64_t)cat[c].cases));
        json_object_object_add(o, "passed", json_object_new_int64((int64_t)cat[c].passed));
        json_object_object_add(o, "failed", json_object_new_int64((int64_t)cat[c].failed));
        json_object_object_add(o, "skipped", json_object_new_int64((int64_t)cat[c].skipped));
        int ran = cat[c].judged > 0; /* null: none of its cases was judged */
        json_object_object_add(o, "max_ratio", ran ? num(cat[c].max_ratio) : NULL);
        json_object_object_add(o, "max_ulp", ran ? num(cat[c].max_ulp) : NULL);
        char key[4 * sizeof((conform_result *)0)->category];
        conform_text_clean(cat[c].name, 1, key, sizeof key);
        json_object_object_add(cats, key, o);
    }
    json_object_object_add(root, "categories", cats);
    json_object *arr = json_object_new_array();
    for (size_t n = 0; n < rep->n; n++) {
        const conform_result *r = &rep->results[n];
        json_object *o = json_object_new_object();
        json_object_object_add(o, "name", jstr(r->name));
        json_object_object_add(o, "index", json_object_new_int64(r->index));
        json_object_object_add(o, "rerun",
                               r->rerun ? jstr(r->rerun > 0 ? "same bits" : "other bits") : NULL);
        json_object_object_add(o, "category", jstr(r->category));
        json_object_object_add(o, "status", jstr(status_names[r->status]));
        json_object_object_add(o, "max_ratio", num(r->max_ratio));
        json_object_object_add(o, "max_ulp", num(r->max_ulp));
        json_object_object_add(o, "reason", jstr(r->reason));
        json_object *feat = json_object_new_array();
        for (unsigned b = 0; b < 32; b++)
            if (r->caps & (1u << b))
                json_object_array_add(feat, jstr(conform_cap_name(b)));
        json_object_object_add(o, "features", feat);
        json_object *shape = json_object_new_object();
        static const char *const dims[7] = {"B", "S", "T", "Hq", "Hkv", "D", "Dv"};
        for (int d = 0; d < 7; d++)
            json_object_object_add(shape, dims[d], json_object_new_int64(r->shape[d]));
        json_object_object_add(o, "shape", shape);
        json_object_object_add(o, "elements", json_object_new_int64(r->elements));
        json_object_object_add(o, "rows_judged", json_object_new_int64(r->rows_judged));
        json_object_object_add(o, "rows_total", json_object_new_int64(r->rows_total));
        json_object_object_add(o, "unbounded", json_object_new_int64(r->unbounded));
        json_object_object_add(o, "unbounded_rows", json_object_new_int64(r->unbounded_rows));
        json_object_object_add(o, "nonfinite", json_object_new_int64(r->nonfinite));
        json_object_object_add(o, "seconds", json_object_new_double(r->seconds));
        json_object_object_add(o, "output", jstr(r->output));
        if (r->has_pm)
            json_object_object_add(o, "precision", pm_json(&r->pm));
        json_object_array_add(arr, o);
    }
    json_object_object_add(root, "cases", arr);
    if (rep->baseline_path) {
        json_object *b = json_object_new_object();
        json_object_object_add(b, "file", jstr(rep->baseline_path));
        json_object_object_add(b, "regressions", json_object_new_int64((int64_t)rep->regressions));
        json_object_object_add(b, "text", jstr(rep->regression_text ? rep->regression_text : ""));
        json_object_object_add(root, "baseline", b);
    }
    if (rep->required) {
        json_object *b = json_object_new_object();
        json_object_object_add(b, "format", jstr(rep->required));
        json_object_object_add(b, "failures",
                               json_object_new_int64((int64_t)rep->precision_failures));
        json_object_object_add(b, "text", jstr(rep->precision_text ? rep->precision_text : ""));
        json_object_object_add(root, "require_precision", b);
    }
    const char *text = json_object_to_json_string_ext(root, JSON_C_TO_STRING_PRETTY |
                                                                JSON_C_TO_STRING_NOSLASHESCAPE);
    int rc = write_text(path, text, err, errlen);
    json_object_put(root);
    return rc;
}

/* ---- XML and HTML escaping -------------------------------------------------------------- */

/* s with & < > " ' escaped, made valid UTF-8 without a character XML 1.0 forbids
 * (conform_text_clean keeping newline and tab): a plugin's name that is not UTF-8, or a
 * control character in a manifest's case name, leaves the JUnit and HTML files well
 * formed. */
static void put_escaped(FILE *f, const char *s)
{
    size_t cap = 4 * strlen(s) + 1;
    char *buf = malloc(cap);
    if (!buf)
        return;
    conform_text_clean(s, 1, buf, cap);
    for (const char *p = buf; *p; p++) {
        switch (*p) {
        case '&': fputs("&amp;", f); break;
        case '<': fputs("&lt;", f); break;
        case '>': fputs("&gt;", f); break;
        case '"': fputs("&quot;", f); break;
        case '\'': fputs("&apos;", f); break;
        default: fputc(*p, f);
        }
    }
    free(buf);
}

int conform_report_junit(const conform_report *rep, const char *path, char *err, size_t errlen)
{
    conform_report_file rf;
    FILE *f = conform_report_open(path, &rf, err, errlen);
    if (!f)
        return -1;
    conform_totals t = conform_report_totals(rep);
    double total = 0;
    for (size_t k = 0; k < rep->n; k++)
        total += rep->results[k].seconds;
    fprintf(f, "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n");
    fprintf(f,
            "<testsuites name=\"smattn conform\" tests=\"%zu\" failures=\"%zu\" skipped=\"%zu\" "
            "time=\"%.6f\">\n",
            t.cases, t.failed, t.skipped, total);
    fprintf(f, "  <testsuite name=\"");
    put_escaped(f, rep->kernel_name);
    fprintf(f, "\" tests=\"%zu\" failures=\"%zu\" errors=\"0\" skipped=\"%zu\" time=\"%.6f\">\n",
            t.cases, t.failed, t.skipped, total);
    fprintf(f, "    <properties>\n      <property name=\"suite\" value=\"");
    put_escaped(f, rep->suite);
    fprintf(f,
            "\"/>\n      <property name=\"seed\" value=\"%llu\"/>\n      <property name=\"kernel\" "
            "value=\"",
            (unsigned long long)rep->seed);
    put_escaped(f, rep->kernel_path);
    char pm[300];
    pm_str(&rep->precision, pm, sizeof pm);
    fprintf(f, "\"/>\n      <property name=\"precision\" value=\"");
    put_escaped(f, pm);
    fprintf(f, "%s\"/>\n      <property name=\"conventions\" value=\"",
            rep->per_problem ? " (declared; per problem by smattn_plugin_precision)" : "");
    put_escaped(f, rep->conventions);
    fprintf(f, "\"/>\n");
    if (rep->vectors_dir)
        fprintf(f, "      <property name=\"golden_vectors\" value=\"%zu\"/>\n", rep->vectors);
    char smp[200];
    if (sampled_str(rep, smp, sizeof smp)[0]) { /* the verdict is on those rows only */
        smp[strlen(smp) - 2] = '\0';
        fprintf(f, "      <property name=\"rows\" value=\"");
        put_escaped(f, smp);
        fprintf(f, ": ");
        put_escaped(f, CONFORM_ROWS_RULE);
        fprintf(f, "\"/>\n");
    }
    char gaps[1024];
    if (untested(rep, gaps, sizeof gaps)) { /* every case skipped: the verdict says nothing */
        fprintf(f, "      <property name=\"untested_categories\" value=\"");
        put_escaped(f, gaps);
        fprintf(f, "\"/>\n");
    }
    fprintf(f, "    </properties>\n");
    for (size_t k = 0; k < rep->n; k++) {
        const conform_result *r = &rep->results[k];
        fprintf(f, "    <testcase classname=\"conform.");
        put_escaped(f, r->category);
        fprintf(f, "\" name=\"");
        put_escaped(f, r->name);
        fprintf(f, "\" time=\"%.6f\"", r->seconds);
        if (r->status == CONFORM_PASS) {
            fprintf(f, ">\n      <system-out>max error/bound %.6g, max ulp %.6g", r->max_ratio,
                    r->max_ulp);
            if (r->reason[0]) {
                fprintf(f, "; ");
                put_escaped(f, r->reason);
            }
            fprintf(f, "</system-out>\n    </testcase>\n");
            continue;
        }
        fprintf(f, ">\n      <%s message=\"", r->status == CONFORM_FAIL ? "failure" : "skipped");
        put_escaped(f, r->reason);
        if (r->status == CONFORM_FAIL) {
            fprintf(f, "\" type=\"nonconforming\">");
            put_escaped(f, r->reason);
            fprintf(f, "\nmax error/bound %.6g, max ulp %.6g</failure>\n", r->max_ratio,
                    r->max_ulp);
        } else {
            fprintf(f, "\"/>\n");
        }
        fprintf(f, "    </testcase>\n");
    }
    fprintf(f, "  </testsuite>\n</testsuites>\n");
    return conform_report_close(&rf, path, err, errlen);
}

/* ---- HTML: a table and one SVG plot of log10(error/bound) per case by category --------- */

/* One SVG plot of log10(error/bound) in [-8, 2] per case (1 is the bound): by_size 0 puts
 * the cases in columns by category, 1 at x = log10(B Hq S T max(D, Dv)) in [0, 9]. */
static void svg_plot(FILE *f, const conform_report *rep, const category *cat, size_t nc,
                     int by_size)
{
    const double W = 960, H = 320, L = 50, R = 10, Tp = 10, Bm = 90, ymin = -8, ymax = 2;
    const double xmax = 9;
    double pw = W - L - R, ph = H - Tp - Bm;
    size_t ncase = rep->n ? rep->n : 1;
    fprintf(f,
            "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"%g\" height=\"%g\" "
            "font-size=\"10\">\n",
            W, H);
    fprintf(f,
            "<rect x=\"%g\" y=\"%g\" width=\"%g\" height=\"%g\" fill=\"#fafafa\" "
            "stroke=\"#999\"/>\n",
            L, Tp, pw, ph);
    for (int d = (int)ymin; d <= (int)ymax; d += 2) {
        double y = Tp + ph * (ymax - d) / (ymax - ymin);
        fprintf(f, "<text x=\"%g\" y=\"%g\" text-anchor=\"end\">1e%d</text>\n", L - 4, y + 3, d);
        fprintf(f, "<line x1=\"%g\" x2=\"%g\" y1=\"%g\" y2=\"%g\" stroke=\"#ddd\"/>\n", L, L + pw,
                y, y);
    }
    double y1 = Tp + ph * ymax / (ymax - ymin);
    fprintf(f,
            "<line x1=\"%g\" x2=\"%g\" y1=\"%g\" y2=\"%g\" stroke=\"#b00\"/>"
            "<text x=\"%g\" y=\"%g\" fill=\"#b00\">bound</text>\n",
            L, L + pw, y1, y1, L + 4, y1 - 3);
    for (int d = 0; by_size && d <= (int)xmax; d++)
        fprintf(f, "<text x=\"%g\" y=\"%g\" text-anchor=\"middle\">1e%d</text>\n",
                L + pw * d / xmax, Tp + ph + 14, d);
    size_t idx = 0;
    for (size_t c = 0; c < nc; c++) {
        double x0 = L + pw * (double)idx / (double)ncase;
        if (!by_size) {
            fprintf(f, "<line x1=\"%g\" x2=\"%g\" y1=\"%g\" y2=\"%g\" stroke=\"#ccc\"/>\n", x0, x0,
                    Tp, Tp + ph);
            fprintf(f, "<text transform=\"translate(%g,%g) rotate(60)\">", x0 + 3, Tp + ph + 6);
            put_escaped(f, cat[c].name);
            fprintf(f, "</text>\n");
        }
        for (size_t k = 0; k < rep->n; k++) {
            const conform_result *r = &rep->results[k];
            if (strcmp(r->category, cat[c].name))
                continue;
            const int64_t *sh = r->shape;
            double work = (double)sh[0] * (double)sh[3] * (double)sh[1] * (double)sh[2] *
                          (double)(sh[5] > sh[6] ? sh[5] : sh[6]);
            double lx = work > 1 ? log10(work) : 0;
            double x = by_size ? L + pw * (lx > xmax ? xmax : lx) / xmax
                               : L + pw * ((double)idx + 0.5) / (double)ncase;
            idx++;
            if (r->status == CONFORM_SKIP)
                continue;
            double lr = r->max_ratio > 0 ? log10(r->max_ratio) : ymin;
            /* A ratio above the plot is drawn at its top as a triangle: capped (finite) or
             * infinite, said in its title, never shown as if it were 1e2. */
            int capped = !(lr <= ymax);
            lr = lr < ymin ? ymin : capped ? ymax : lr;
            double y = Tp + ph * (ymax - lr) / (ymax - ymin);
            const char *fill = r->status == CONFORM_FAIL ? "#b00" : "#070";
            if (capped)
                fprintf(f,
                        "<polygon class=\"%s\" points=\"%.1f,%.1f %.1f,%.1f %.1f,%.1f\" "
                        "fill=\"%s\"><title>",
                        isfinite(r->max_ratio) ? "capped" : "infinite", x, y - 5, x - 4, y + 3,
                        x + 4, y + 3, fill);
            else
                fprintf(f, "<circle cx=\"%.1f\" cy=\"%.1f\" r=\"3\" fill=\"%s\"><title>", x, y,
                        fill);
            put_escaped(f, r->name);
            fprintf(f,
                    " [B=%lld S=%lld T=%lld Hq=%lld Hkv=%lld D=%lld Dv=%lld] ratio %.3g%s</title>"
                    "</%s>\n",
                    (long long)sh[0], (long long)sh[1], (long long)sh[2], (long long)sh[3],
                    (long long)sh[4], (long long)sh[5], (long long)sh[6], r->max_ratio,
                    !capped                  ? ""
                    : isfinite(r->max_ratio) ? " (capped: above the plot)"
                                             : " (infinite)",
                    capped ? "polygon" : "circle");
        }
    }
    fprintf(f, "</svg>\n");
}

int conform_report_html(const conform_report *rep, const char *path, char *err, size_t errlen)
{
    conform_report_file rf;
    FILE *f = conform_report_open(path, &rf, err, errlen);
    if (!f)
        return -1;
    category cat[MAX_CATEGORIES];
    size_t nc = categories(rep, cat, MAX_CATEGORIES);
    int ok = conform_report_conforming(rep);
    fprintf(f, "<!DOCTYPE html>\n<html><head><meta charset=\"utf-8\"><title>smattn conform: ");
    put_escaped(f, rep->kernel_name);
    fprintf(f, "</title>\n<style>body{font-family:sans-serif;margin:2em}"
               "table{border-collapse:collapse}td,th{border:1px solid #ccc;padding:2px 8px;"
               "text-align:right}td.l{text-align:left}.fail{color:#b00}.pass{color:#070}"
               ".skip{color:#888}</style></head><body>\n<h1>smattn conform: ");
    put_escaped(f, rep->kernel_name);
    fprintf(f, " ");
    put_escaped(f, rep->kernel_version);
    char smp[200];
    sampled_str(rep, smp, sizeof smp);
    if (smp[0])
        smp[strlen(smp) - 2] = '\0';
    fprintf(f, "</h1>\n<p>suite %s, seed %llu: <b class=\"%s\">%s%s%s%s</b>", rep->suite,
            (unsigned long long)rep->seed, ok ? "pass" : "fail",
            ok ? "CONFORMING" : "NOT CONFORMING", smp[0] ? " (" : "", smp, smp[0] ? ")" : "");
    if (smp[0]) {
        fprintf(f, "<br>rows judged: ");
        put_escaped(f, CONFORM_ROWS_RULE);
    }
    char gaps[1024];
    if (untested(rep, gaps, sizeof gaps)) {
        fprintf(f, "; <b class=\"untested\">untested categories</b> (every case skipped, so the "
                   "verdict says nothing of them): ");
        put_escaped(f, gaps);
    }
    fprintf(f, "</p>\n");
    char pm[300];
    pm_str(&rep->precision, pm, sizeof pm);
    fprintf(f, "<p>precision model%s: ",
            rep->per_problem ? " (declared; per problem by smattn_plugin_precision)" : "");
    put_escaped(f, pm);
    fprintf(f, "<br>conventions: ");
    put_escaped(f, rep->conventions[0] ? rep->conventions : "as in each case.json");
    if (rep->vectors_dir)
        fprintf(f, "<br>golden vectors: %zu ran", rep->vectors);
    fprintf(f, "</p>\n");
    svg_plot(f, rep, cat, nc, 0);
    svg_plot(f, rep, cat, nc, 1);
    fprintf(f, "<p>Each dot is a case: its max error/bound ratio (log scale; at or below the "
               "red line conforms), by category, then against the problem's size "
               "(B Hq S T max(D, Dv), log scale). A triangle at the top is a ratio above the "
               "plot (capped) or infinite. Hover for the case and its shape.</p>\n");
    fprintf(f, "<table><tr><th>category</th><th>cases</th><th>pass</th><th>fail</th>"
               "<th>skip</th><th>max err/bound</th><th>max ulp</th></tr>\n");
    for (size_t c = 0; c < nc; c++) {
        char b1[32], b2[32];
        fprintf(f, "<tr><td class=\"l\">");
        put_escaped(f, cat[c].name);
        fprintf(f,
                "</td><td>%zu</td><td>%zu</td><td>%zu</td><td>%zu</td><td>%s</td><td>%s</td></"
                "tr>\n",
                cat[c].cases, cat[c].passed, cat[c].failed, cat[c].skipped,
                figure(&cat[c], cat[c].max_ratio, b1, sizeof b1),
                figure(&cat[c], cat[c].max_ulp, b2, sizeof b2));
    }
    fprintf(f, "</table>\n<h2>Cases</h2>\n<p>Failures first.</p>\n<table><tr><th>case</th>"
               "<th>status</th><th>shape B,S,T,Hq,Hkv,D,Dv</th><th>err/bound</th><th>ulp</th>"
               "<th>reason</th></tr>\n");
    static const conform_status order[3] = {CONFORM_FAIL, CONFORM_PASS, CONFORM_SKIP};
    for (int pass = 0; pass < 3; pass++)
        for (size_t k = 0; k < rep->n; k++) {
            const conform_result *r = &rep->results[k];
            if (r->status != order[pass])
                continue;
            fprintf(f, "<tr><td class=\"l\">");
            put_escaped(f, r->name);
            char ratio[48], ulp[48];
            if (r->status == CONFORM_SKIP)
                snprintf(ratio, sizeof ratio, "-"), snprintf(ulp, sizeof ulp, "-");
            else {
                if (isinf(r->max_ratio))
                    snprintf(ratio, sizeof ratio, "<span class=\"infinite\">inf</span>");
                else
                    snprintf(ratio, sizeof ratio, "%.4g", r->max_ratio);
                snprintf(ulp, sizeof ulp, "%.4g", r->max_ulp);
            }
            fprintf(f,
                    "</td><td class=\"%s\">%s</td><td>%lld,%lld,%lld,%lld,%lld,%lld,%lld</td>"
                    "<td>%s</td><td>%s</td><td class=\"l\">",
                    status_names[r->status], status_names[r->status], (long long)r->shape[0],
                    (long long)r->shape[1], (long long)r->shape[2], (long long)r->shape[3],
                    (long long)r->shape[4], (long long)r->shape[5], (long long)r->shape[6], ratio,
                    ulp);
            put_escaped(f, r->reason);
            if (r->output[0]) {
                fprintf(f, "<pre>");
                put_escaped(f, r->output);
                fprintf(f, "</pre>");
            }
            fprintf(f, "</td></tr>\n");
        }
    fprintf(f, "</table>\n</body></html>\n");
    return conform_report_close(&rf, path, err, errlen);
}

/* ---- the baseline gate ------------------------------------------------------------------ */

static void append(char **text, size_t *len, const char *line)
{
    size_t n = strlen(line);
    char *t = realloc(*text, *len + n + 2);
    if (!t)
        return;
    memcpy(t + *len, line, n);
    t[*len + n] = '\n';
    t[*len + n + 1] = '\0';
    *text = t;
    *len += n + 1;
}

static const char *const status_words[3] = {"passes", "fails", "is skipped"};

void conform_baseline_free(conform_baseline *b)
{
    if (b->root)
        json_object_put(b->root);
    b->root = NULL;
}

/* A baseline's case: an object with a string "name" and "status" (pass, fail or skip), a
 * "max_ratio" absent, null or a finite number >= 0, a "precision" absent or a valid model.
 * NULL, or the reason it is not one. */
static const char *bad_case(json_object *c)
{
    json_object *v;
    if (!json_object_is_type(c, json_type_object))
        return "is not an object";
    if (!json_object_object_get_ex(c, "name", &v) || !json_object_is_type(v, json_type_string))
        return "has no \"name\" string";
    if (!json_object_object_get_ex(c, "status", &v) || !json_object_is_type(v, json_type_string))
        return "has no \"status\" string";
    const char *st = json_object_get_string(v);
    if (strcmp(st, "pass") && strcmp(st, "fail") && strcmp(st, "skip"))
        return "has a \"status\" other than pass, fail or skip";
    if (json_object_object_get_ex(c, "max_ratio", &v) && v) {
        int num = json_object_is_type(v, json_type_double) || json_object_is_type(v, json_type_int);
        double r = num ? json_object_get_double(v) : -1;
        if (!num || !(r >= 0) || !isfinite(r))
            return "has a \"max_ratio\" that is not a finite number >= 0 or null";
    }
    smattn_precision pm;
    char perr[300];
    if (json_object_object_get_ex(c, "precision", &v) &&
        (conform_pm_from_json(v, &pm) || conform_precision_check(&pm, "", perr, sizeof perr)))
        return "has a \"precision\" that is not a valid model";
    return NULL;
}

int conform_baseline_load(const char *path, conform_baseline *b, char *err, size_t errlen)
{
    memset(b, 0, sizeof *b);
    b->path = path;
    char why[300];
    size_t len = 0;
    char *text = smattn_io_read_text(path, CONFORM_BASELINE_MAX, &len, why, sizeof why);
    if (!text) {
        snprintf(err, errlen, "baseline %s: %s", path,
                 strstr(why, "No such file") ? "no such file" : why);
        return -1;
    }
    json_object *root = smattn_io_parse_json(text, len, why, sizeof why), *cases, *bp;
    free(text);
    if (!root) {
        snprintf(err, errlen, "baseline %s: %s", path, why);
        return -1;
    }
    if (!json_object_object_get_ex(root, "cases", &cases) ||
        !json_object_is_type(cases, json_type_array)) {
        snprintf(err, errlen,
                 "baseline %s: not a JSON report of smattn conform (no \"cases\" array)", path);
        json_object_put(root);
        return -1;
    }
    for (size_t k = 0; k < json_object_array_length(cases); k++) {
        const char *bad = bad_case(json_object_array_get_idx(cases, k));
        if (bad) {
            snprintf(err, errlen, "baseline %s: case %zu %s (edited?): regenerate it", path, k,
                     bad);
            json_object_put(root);
            return -1;
        }
    }
    /* Without the declared model the precision gate would be off, silently: refuse. */
    smattn_precision p0;
    char perr[300];
    if (!json_object_object_get_ex(root, "precision", &bp) || conform_pm_from_json(bp, &p0) ||
        conform_precision_check(&p0, "", perr, sizeof perr)) {
        snprintf(err, errlen,
                 "baseline %s has no valid precision model (written by an older smattn, or "
                 "edited?): regenerate it",
                 path);
        json_object_put(root);
        return -1;
    }
    b->root = root;
    return 0;
}

void conform_baseline_compare(conform_report *rep, const conform_baseline *b)
{
    rep->baseline_path = b->path;
    rep->regressions = 0;
    json_object *cases, *bp;
    if (!b->root || !json_object_object_get_ex(b->root, "cases", &cases))
        return; /* conform_baseline_load made sure of both */
    size_t len = 0;
    char line[1000], why[400];
    /* The declared model, field by field. */
    smattn_precision p0;
    if (json_object_object_get_ex(b->root, "precision", &bp) && !conform_pm_from_json(bp, &p0)) {
        conform_precision_looser(&rep->precision, &p0, 0, why, sizeof why);
        if (why[0]) {
            snprintf(line, sizeof line,
                     "  REGRESSION precision model: looser than the baseline's in %s", why);
            rep->regressions++;
            append(&rep->regression_text, &len, line);
        }
    }
    size_t nb = json_object_array_length(cases);
    for (size_t k = 0; k < nb; k++) {
        json_object *c = json_object_array_get_idx(cases, k), *v;
        if (!json_object_object_get_ex(c, "name", &v))
            continue;
        const char *name = json_object_get_string(v);
        const char *was =
            json_object_object_get_ex(c, "status", &v) ? json_object_get_string(v) : "";
        const conform_result *r = NULL;
        for (size_t j = 0; j < rep->n && !r; j++)
            if (!strcmp(rep->results[j].name, name))
                r = &rep->results[j];
        int has_ratio = json_object_object_get_ex(c, "max_ratio", &v) && v;
        double r0 = has_ratio ? json_object_get_double(v) : HUGE_VAL;
        line[0] = '\0';
        if (strcmp(was, "pass")) {
            /* only what passed before is held to it */
        } else if (!r) {
            snprintf(line, sizeof line,
                     "  REGRESSION %s: passed in the baseline, missing now (not in this run)",
                     name);
        } else if (r->status != CONFORM_PASS) {
            snprintf(line, sizeof line, "  REGRESSION %s: passed in the baseline, %s now: %s", name,
                     status_words[r->status], r->reason);
        } else if (has_ratio) {
            double limit = fmax(CONFORM_BASELINE_FACTOR * r0, r0 + CONFORM_BASELINE_SLACK);
            if (r->max_ratio > limit)
                snprintf(line, sizeof line,
                         "  REGRESSION %s: error/bound ratio %.4g, baseline %.4g (limit %.4g)",
                         name, r->max_ratio, r0, limit);
        }
        smattn_precision pc;
        if (!line[0] && r && r->has_pm && json_object_object_get_ex(c, "precision", &v) &&
            !conform_pm_from_json(v, &pc)) {
            conform_precision_looser(&r->pm, &pc, 0, why, sizeof why);
            if (why[0])
                snprintf(line, sizeof line,
                         "  REGRESSION %s: precision model looser than the baseline's in %s", name,
                         why);
        }
        if (line[0]) {
            rep->regressions++;
            append(&rep->regression_text, &len, line);
        }
    }
}
