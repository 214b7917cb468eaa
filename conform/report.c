/* report.c: the results of a run for people and for CI: a summary table by category and a
 * verdict line, a JSON report (every case with its figures), JUnit XML (one testcase per
 * case), a self-contained HTML page with an SVG plot of error/bound, and the baseline
 * gate that compares a run with a stored JSON report. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <json.h>

#include "conform/conform.h"

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

/* Conforming: nothing failed and something ran. */
int conform_report_conforming(const conform_report *rep)
{
    conform_totals t = conform_report_totals(rep);
    return t.failed == 0 && t.passed > 0;
}

/* ---- categories, in order of first appearance ------------------------------------------ */

typedef struct category {
    const char *name;
    size_t cases, passed, failed, skipped;
    double max_ratio, max_ulp;
} category;

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
        if (r->status != CONFORM_SKIP) {
            cat[c].max_ratio = fmax(cat[c].max_ratio, r->max_ratio);
            cat[c].max_ulp = fmax(cat[c].max_ulp, r->max_ulp);
        }
    }
    return n;
}

#define MAX_CATEGORIES 64

void conform_report_print(const conform_report *rep, FILE *f)
{
    category cat[MAX_CATEGORIES];
    size_t nc = categories(rep, cat, MAX_CATEGORIES);
    fprintf(f, "kernel %s %s (%s), suite %s, seed %llu\n\n", rep->kernel_name, rep->kernel_version,
            rep->kernel_path, rep->suite, (unsigned long long)rep->seed);
    fprintf(f, "  %-12s %6s %6s %6s %6s  %14s %12s\n", "category", "cases", "pass", "fail", "skip",
            "max err/bound", "max ulp");
    for (size_t c = 0; c < nc; c++)
        fprintf(f, "  %-12s %6zu %6zu %6zu %6zu  %14.4g %12.4g\n", cat[c].name, cat[c].cases,
                cat[c].passed, cat[c].failed, cat[c].skipped, cat[c].max_ratio, cat[c].max_ulp);
    conform_totals t = conform_report_totals(rep);
    fprintf(f, "  %-12s %6zu %6zu %6zu %6zu\n\n", "total", t.cases, t.passed, t.failed, t.skipped);
    if (t.failed) {
        fprintf(f, "failures:\n");
        for (size_t k = 0; k < rep->n; k++)
            if (rep->results[k].status == CONFORM_FAIL)
                fprintf(f, "  FAIL %s: %s\n", rep->results[k].name, rep->results[k].reason);
        fprintf(f, "\n");
    }
    if (rep->baseline_path) {
        if (rep->regressions)
            fprintf(f,
                    "baseline %s: %zu regressions (limit: ratio > max(%.2f x, +%.2f) or a "
                    "pass turned into a failure)\n%s\n",
                    rep->baseline_path, rep->regressions, CONFORM_BASELINE_FACTOR,
                    CONFORM_BASELINE_SLACK, rep->regression_text ? rep->regression_text : "");
        else
            fprintf(f, "baseline %s: no regression\n", rep->baseline_path);
    }
    if (t.passed == 0 && t.failed == 0)
        fprintf(f, "verdict: NOT CONFORMING (no case ran: every case was skipped)\n");
    else if (t.failed)
        fprintf(f, "verdict: NOT CONFORMING (%zu of %zu cases failed, %zu skipped)\n", t.failed,
                t.cases, t.skipped);
    else
        fprintf(f, "verdict: CONFORMING (%zu cases passed, %zu skipped)\n", t.passed, t.skipped);
    size_t not_run = 0;
    for (size_t k = 0; k < rep->n; k++)
        not_run += rep->results[k].status == CONFORM_SKIP &&
                   !strncmp(rep->results[k].reason, "not run:", 8);
    if (t.skipped)
        fprintf(f, "skipped: %zu not claimed by the kernel or declined by it%s",
                t.skipped - not_run, not_run ? "" : "\n");
    if (not_run)
        fprintf(f, ", %zu not run (the --time budget ran out)\n", not_run);
}

/* ---- JSON ------------------------------------------------------------------------------ */

/* A finite number, or null (JSON has no infinity). */
static json_object *num(double x)
{
    return isfinite(x) ? json_object_new_double(x) : NULL;
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

static int write_text(const char *path, const char *text, char *err, size_t errlen)
{
    FILE *f = fopen(path, "w");
    if (!f) {
        snprintf(err, errlen, "%s: cannot write", path);
        return -1;
    }
    fputs(text, f);
    return conform_file_close(f, path, err, errlen);
}

int conform_report_json(const conform_report *rep, const char *path, char *err, size_t errlen)
{
    json_object *root = json_object_new_object();
    json_object *k = json_object_new_object();
    json_object_object_add(k, "name", json_object_new_string(rep->kernel_name));
    json_object_object_add(k, "version", json_object_new_string(rep->kernel_version));
    json_object_object_add(k, "path", json_object_new_string(rep->kernel_path));
    json_object_object_add(root, "kernel", k);
    json_object_object_add(root, "suite", json_object_new_string(rep->suite));
    json_object_object_add(root, "seed", json_object_new_int64((int64_t)rep->seed));
    json_object_object_add(
        root, "verdict",
        json_object_new_string(conform_report_conforming(rep) ? "conforming" : "not conforming"));
    conform_totals t = conform_report_totals(rep);
    json_object *s = json_object_new_object();
    json_object_object_add(s, "cases", json_object_new_int64((int64_t)t.cases));
    json_object_object_add(s, "passed", json_object_new_int64((int64_t)t.passed));
    json_object_object_add(s, "failed", json_object_new_int64((int64_t)t.failed));
    json_object_object_add(s, "skipped", json_object_new_int64((int64_t)t.skipped));
    json_object_object_add(root, "summary", s);
    category cat[MAX_CATEGORIES];
    size_t nc = categories(rep, cat, MAX_CATEGORIES);
    json_object *cats = json_object_new_object();
    for (size_t c = 0; c < nc; c++) {
        json_object *o = json_object_new_object();
        json_object_object_add(o, "cases", json_object_new_int64((int64_t)cat[c].cases));
        json_object_object_add(o, "passed", json_object_new_int64((int64_t)cat[c].passed));
        json_object_object_add(o, "failed", json_object_new_int64((int64_t)cat[c].failed));
        json_object_object_add(o, "skipped", json_object_new_int64((int64_t)cat[c].skipped));
        json_object_object_add(o, "max_ratio", num(cat[c].max_ratio));
        json_object_object_add(o, "max_ulp", num(cat[c].max_ulp));
        json_object_object_add(cats, cat[c].name, o);
    }
    json_object_object_add(root, "categories", cats);
    json_object *arr = json_object_new_array();
    for (size_t n = 0; n < rep->n; n++) {
        const conform_result *r = &rep->results[n];
        json_object *o = json_object_new_object();
        json_object_object_add(o, "name", json_object_new_string(r->name));
        json_object_object_add(o, "category", json_object_new_string(r->category));
        json_object_object_add(o, "status", json_object_new_string(status_names[r->status]));
        json_object_object_add(o, "max_ratio", num(r->max_ratio));
        json_object_object_add(o, "max_ulp", num(r->max_ulp));
        json_object_object_add(o, "reason", json_object_new_string(r->reason));
        json_object *feat = json_object_new_array();
        for (unsigned b = 0; b < 32; b++)
            if (r->caps & (1u << b))
                json_object_array_add(feat, json_object_new_string(conform_cap_name(b)));
        json_object_object_add(o, "features", feat);
        json_object *shape = json_object_new_object();
        static const char *const dims[7] = {"B", "S", "T", "Hq", "Hkv", "D", "Dv"};
        for (int d = 0; d < 7; d++)
            json_object_object_add(shape, dims[d], json_object_new_int64(r->shape[d]));
        json_object_object_add(o, "shape", shape);
        json_object_object_add(o, "elements", json_object_new_int64(r->elements));
        json_object_object_add(o, "unbounded", json_object_new_int64(r->unbounded));
        json_object_object_add(o, "unbounded_rows", json_object_new_int64(r->unbounded_rows));
        json_object_object_add(o, "nonfinite", json_object_new_int64(r->nonfinite));
        json_object_object_add(o, "seconds", json_object_new_double(r->seconds));
        json_object_array_add(arr, o);
    }
    json_object_object_add(root, "cases", arr);
    if (rep->baseline_path) {
        json_object *b = json_object_new_object();
        json_object_object_add(b, "file", json_object_new_string(rep->baseline_path));
        json_object_object_add(b, "regressions", json_object_new_int64((int64_t)rep->regressions));
        json_object_object_add(root, "baseline", b);
    }
    const char *text = json_object_to_json_string_ext(root, JSON_C_TO_STRING_PRETTY |
                                                                JSON_C_TO_STRING_NOSLASHESCAPE);
    int rc = write_text(path, text, err, errlen);
    json_object_put(root);
    return rc;
}

/* ---- XML and HTML escaping -------------------------------------------------------------- */

/* s with & < > " ' escaped (and control characters other than tab and newline dropped). */
static void put_escaped(FILE *f, const char *s)
{
    for (; *s; s++) {
        unsigned char ch = (unsigned char)*s;
        switch (ch) {
        case '&': fputs("&amp;", f); break;
        case '<': fputs("&lt;", f); break;
        case '>': fputs("&gt;", f); break;
        case '"': fputs("&quot;", f); break;
        case '\'': fputs("&apos;", f); break;
        default:
            if (ch >= 0x20 || ch == '\t' || ch == '\n')
                fputc(ch, f);
        }
    }
}

int conform_report_junit(const conform_report *rep, const char *path, char *err, size_t errlen)
{
    FILE *f = fopen(path, "w");
    if (!f) {
        snprintf(err, errlen, "%s: cannot write", path);
        return -1;
    }
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
    fprintf(f, "\"/>\n    </properties>\n");
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
    return conform_file_close(f, path, err, errlen);
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
            lr = lr < ymin ? ymin : lr > ymax ? ymax : lr;
            double y = Tp + ph * (ymax - lr) / (ymax - ymin);
            fprintf(f, "<circle cx=\"%.1f\" cy=\"%.1f\" r=\"3\" fill=\"%s\"><title>", x, y,
                    r->status == CONFORM_FAIL ? "#b00" : "#070");
            put_escaped(f, r->name);
            fprintf(f,
                    " [B=%lld S=%lld T=%lld Hq=%lld Hkv=%lld D=%lld Dv=%lld] ratio %.3g</title>"
                    "</circle>\n",
                    (long long)sh[0], (long long)sh[1], (long long)sh[2], (long long)sh[3],
                    (long long)sh[4], (long long)sh[5], (long long)sh[6], r->max_ratio);
        }
    }
    fprintf(f, "</svg>\n");
}

int conform_report_html(const conform_report *rep, const char *path, char *err, size_t errlen)
{
    FILE *f = fopen(path, "w");
    if (!f) {
        snprintf(err, errlen, "%s: cannot write", path);
        return -1;
    }
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
    fprintf(f, "</h1>\n<p>suite %s, seed %llu: <b class=\"%s\">%s</b></p>\n", rep->suite,
            (unsigned long long)rep->seed, ok ? "pass" : "fail",
            ok ? "CONFORMING" : "NOT CONFORMING");
    svg_plot(f, rep, cat, nc, 0);
    svg_plot(f, rep, cat, nc, 1);
    fprintf(f, "<p>Each dot is a case: its max error/bound ratio (log scale; at or below the "
               "red line conforms), by category, then against the problem's size "
               "(B Hq S T max(D, Dv), log scale). Hover for the case and its shape.</p>\n");
    fprintf(f, "<table><tr><th>category</th><th>cases</th><th>pass</th><th>fail</th>"
               "<th>skip</th><th>max err/bound</th><th>max ulp</th></tr>\n");
    for (size_t c = 0; c < nc; c++) {
        fprintf(f, "<tr><td class=\"l\">");
        put_escaped(f, cat[c].name);
        fprintf(f,
                "</td><td>%zu</td><td>%zu</td><td>%zu</td><td>%zu</td><td>%.4g</td><td>%.4g</td></"
                "tr>\n",
                cat[c].cases, cat[c].passed, cat[c].failed, cat[c].skipped, cat[c].max_ratio,
                cat[c].max_ulp);
    }
    fprintf(f, "</table>\n<h2>Cases</h2>\n<table><tr><th>case</th><th>status</th><th>shape "
               "B,S,T,Hq,Hkv,D,Dv</th><th>err/bound</th><th>ulp</th><th>reason</th></tr>\n");
    for (size_t k = 0; k < rep->n; k++) {
        const conform_result *r = &rep->results[k];
        fprintf(f, "<tr><td class=\"l\">");
        put_escaped(f, r->name);
        fprintf(f,
                "</td><td class=\"%s\">%s</td><td>%lld,%lld,%lld,%lld,%lld,%lld,%lld</td>"
                "<td>%.4g</td><td>%.4g</td><td class=\"l\">",
                status_names[r->status], status_names[r->status], (long long)r->shape[0],
                (long long)r->shape[1], (long long)r->shape[2], (long long)r->shape[3],
                (long long)r->shape[4], (long long)r->shape[5], (long long)r->shape[6],
                r->max_ratio, r->max_ulp);
        put_escaped(f, r->reason);
        fprintf(f, "</td></tr>\n");
    }
    fprintf(f, "</table>\n</body></html>\n");
    return conform_file_close(f, path, err, errlen);
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

int conform_baseline_compare(conform_report *rep, const char *path, char *err, size_t errlen)
{
    rep->baseline_path = path;
    rep->regressions = 0;
    json_object *root = json_object_from_file(path);
    json_object *cases;
    if (!root || !json_object_object_get_ex(root, "cases", &cases) ||
        !json_object_is_type(cases, json_type_array)) {
        snprintf(err, errlen,
                 "baseline %s: not a JSON report of smattn conform (no \"cases\" array)", path);
        if (root)
            json_object_put(root);
        return -1;
    }
    size_t len = 0;
    size_t nb = json_object_array_length(cases);
    for (size_t k = 0; k < rep->n; k++) {
        const conform_result *r = &rep->results[k];
        for (size_t b = 0; b < nb; b++) {
            json_object *c = json_object_array_get_idx(cases, b), *v;
            if (!json_object_object_get_ex(c, "name", &v) ||
                strcmp(json_object_get_string(v), r->name))
                continue;
            const char *was =
                json_object_object_get_ex(c, "status", &v) ? json_object_get_string(v) : "";
            int has_ratio =
                json_object_object_get_ex(c, "max_ratio", &v) &&
                (json_object_is_type(v, json_type_double) || json_object_is_type(v, json_type_int));
            double r0 = has_ratio ? json_object_get_double(v) : HUGE_VAL;
            char line[800];
            line[0] = '\0';
            if (!strcmp(was, "pass") && r->status == CONFORM_FAIL)
                snprintf(line, sizeof line,
                         "  REGRESSION %s: passed in the baseline, fails now: %s", r->name,
                         r->reason);
            else if (r->status == CONFORM_PASS && !strcmp(was, "pass") && has_ratio) {
                double limit = fmax(CONFORM_BASELINE_FACTOR * r0, r0 + CONFORM_BASELINE_SLACK);
                if (r->max_ratio > limit)
                    snprintf(line, sizeof line,
                             "  REGRESSION %s: error/bound ratio %.4g, baseline %.4g (limit %.4g)",
                             r->name, r->max_ratio, r0, limit);
            }
            if (line[0]) {
                rep->regressions++;
                append(&rep->regression_text, &len, line);
            }
            break;
        }
    }
    json_object_put(root);
    return 0;
}
