/* SPDX-License-Identifier: MIT */
/* report_merge.c: JSON reports read back and shard reports merged into one (`smattn report
 * merge`, README "At scale"): the merged report is the report of the unsharded run, case
 * for case, or the merge refuses with the reason. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <json.h>

#include "conform/conform.h"
#include "io/util.h"

enum { S_KNAME, S_KVERSION, S_KPATH, S_SUITE, S_VERSION, S_ONLY, S_VECTORS, S_CONVENTIONS };

static json_object *member(json_object *o, const char *key)
{
    json_object *v = NULL;
    return o && json_object_object_get_ex(o, key, &v) ? v : NULL;
}

static const char *str_of(json_object *o, const char *key)
{
    json_object *v = member(o, key);
    return v && json_object_is_type(v, json_type_string) ? json_object_get_string(v) : NULL;
}

/* An integer member in [lo, hi]; -1 if absent or not one. */
static int int_of(json_object *o, const char *key, int64_t lo, int64_t hi, int64_t *out)
{
    json_object *v = member(o, key);
    if (!v || !json_object_is_type(v, json_type_int))
        return -1;
    int64_t x = json_object_get_int64(v);
    if (x < lo || x > hi)
        return -1;
    *out = x;
    return 0;
}

/* A number member (null: NaN, as the writer stores a case that judged nothing). */
static int num_of(json_object *o, const char *key, double *out)
{
    json_object *v = NULL;
    if (!o || !json_object_object_get_ex(o, key, &v))
        return -1;
    if (!v) {
        *out = NAN;
        return 0;
    }
    if (!json_object_is_type(v, json_type_double) && !json_object_is_type(v, json_type_int))
        return -1;
    *out = json_object_get_double(v);
    return 0;
}

static int dup_into(char **slot, const char *s)
{
    *slot = strdup(s ? s : "");
    return *slot ? 0 : -1;
}

/* One case of a report into r; NULL, or what is wrong with it. */
static const char *load_case(json_object *c, conform_result *r)
{
    memset(r, 0, sizeof *r);
    r->worst_out = -1;
    const char *name = str_of(c, "name"), *cat = str_of(c, "category"), *st = str_of(c, "status");
    const char *reason = str_of(c, "reason"), *output = str_of(c, "output");
    if (!name || !cat || !st)
        return "has no \"name\", \"category\" or \"status\" string";
    if (strlen(name) >= sizeof r->name || strlen(cat) >= sizeof r->category)
        return "has a name or category longer than smattn writes";
    snprintf(r->name, sizeof r->name, "%s", name);
    snprintf(r->category, sizeof r->category, "%s", cat);
    snprintf(r->reason, sizeof r->reason, "%s", reason ? reason : "");
    snprintf(r->output, sizeof r->output, "%s", output ? output : "");
    if (!strcmp(st, "pass"))
        r->status = CONFORM_PASS;
    else if (!strcmp(st, "fail"))
        r->status = CONFORM_FAIL;
    else if (!strcmp(st, "skip"))
        r->status = CONFORM_SKIP;
    else
        return "has a \"status\" other than pass, fail or skip";
    if (int_of(c, "index", 0, INT64_MAX, &r->index))
        return "has no \"index\" (written by an smattn without shards?)";
    if (num_of(c, "max_ratio", &r->max_ratio) || num_of(c, "max_ulp", &r->max_ulp) ||
        num_of(c, "seconds", &r->seconds))
        return "has a \"max_ratio\", \"max_ulp\" or \"seconds\" that is not a number";
    static const char *const counts[4] = {"elements", "unbounded", "unbounded_rows", "nonfinite"};
    int64_t *dst[4] = {&r->elements, &r->unbounded, &r->unbounded_rows, &r->nonfinite};
    for (int k = 0; k < 4; k++)
        if (int_of(c, counts[k], 0, INT64_MAX, dst[k]))
            return "has an element count that is not an integer >= 0";
    /* the rows judged (--rows); absent in reports from before sampling: every row */
    if (member(c, "rows_judged") &&
        (int_of(c, "rows_total", 0, INT64_MAX, &r->rows_total) ||
         int_of(c, "rows_judged", 0, r->rows_total, &r->rows_judged)))
        return "has \"rows_judged\" or \"rows_total\" that are not integers 0 <= judged <= total";
    json_object *shape = member(c, "shape");
    static const char *const dims[7] = {"B", "S", "T", "Hq", "Hkv", "D", "Dv"};
    for (int d = 0; d < 7; d++)
        if (int_of(shape, dims[d], 0, INT64_MAX, &r->shape[d]))
            return "has no \"shape\" of seven integers";
    json_object *feat = member(c, "features");
    if (!feat || !json_object_is_type(feat, json_type_array))
        return "has no \"features\" array";
    for (size_t k = 0; k < json_object_array_length(feat); k++) {
        json_object *f = json_object_array_get_idx(feat, k);
        const char *fn = json_object_is_type(f, json_type_string) ? json_object_get_string(f) : "";
        unsigned b = 0;
        while (b < 32 && strcmp(conform_cap_name(b), fn))
            b++;
        if (b == 32)
            return "names a feature smattn does not know";
        r->caps |= 1u << b;
    }
    const char *rerun = str_of(c, "rerun");
    r->rerun = !rerun ? 0 : !strcmp(rerun, "same bits") ? 1 : -1;
    json_object *pm = member(c, "precision");
    if (pm) {
        if (conform_pm_from_json(pm, &r->pm))
            return "has a \"precision\" that is not a model";
        r->has_pm = 1;
    }
    return NULL;
}

int conform_report_load(const char *path, conform_loaded *L, char *err, size_t errlen)
{
    memset(L, 0, sizeof *L);
    char why[300], q[SMATTN_IO_PATH_MAX];
    const char *qp = smattn_io_path(path, q);
    size_t len = 0;
    char *text = smattn_io_read_text(path, CONFORM_BASELINE_MAX, &len, why, sizeof why);
    json_object *root = text ? smattn_io_parse_json(text, len, why, sizeof why) : NULL;
    free(text);
    if (!root) {
        snprintf(err, errlen, "%s: %s", qp, why);
        return -1;
    }
    const char *bad = NULL;
    json_object *k = member(root, "kernel"), *cases = member(root, "cases");
    json_object *shard = member(root, "shard");
    int64_t seed = 0, si = 0, sc = 0;
    const char *strs[8] = {str_of(k, "name"),          str_of(k, "version"),
                           str_of(k, "path"),          str_of(root, "suite"),
                           str_of(root, "smattn_version"), str_of(root, "only"),
                           str_of(member(root, "vectors"), "dir"), str_of(root, "conventions")};
    if (!strs[S_KNAME] || !strs[S_KVERSION] || !strs[S_KPATH] || !strs[S_SUITE] ||
        !cases || !json_object_is_type(cases, json_type_array))
        bad = "not a JSON report of smattn conform or check (no kernel, suite or cases)";
    else if (!strs[S_VERSION] || int_of(shard, "count", 1, CONFORM_SHARD_MAX, &sc) ||
             int_of(shard, "index", 0, sc - 1, &si))
        bad = "has no smattn_version or shard (written by an smattn without shards: run it again)";
    else if (int_of(root, "seed", 0, INT64_MAX, &seed) ||
             conform_pm_from_json(member(root, "precision"), &L->rep.precision))
        bad = "has no seed or precision model";
    json_object *rows = member(root, "rows");
    int64_t rk = 0, rseed = 0;
    if (!bad && rows &&
        (int_of(rows, "per_head", 1, INT64_MAX, &rk) || int_of(rows, "seed", INT64_MIN, INT64_MAX, &rseed)))
        bad = "has a \"rows\" without an integer per_head >= 1 and seed";
    /* the golden vectors' digest: absent in reports from before it was recorded */
    const char *dg = str_of(member(root, "vectors"), "digest");
    unsigned long long dv = 0;
    if (!bad && dg) {
        char *end = NULL;
        size_t hex = strncmp(dg, "fnv1a64:", 8) ? 0 : strspn(dg + 8, "0123456789abcdef");
        if (hex == 16 && strlen(dg) == 24)
            dv = strtoull(dg + 8, &end, 16);
        if (!end || *end)
            bad = "has a \"vectors\" \"digest\" that is not fnv1a64: and 16 hex digits";
    }
    for (int s = 0; !bad && s < 8; s++)
        if (dup_into(&L->strings[s], strs[s]))
            bad = "out of memory";
    size_t n = bad ? 0 : json_object_array_length(cases);
    if (!bad && !(L->results = calloc(n ? n : 1, sizeof *L->results)))
        bad = "out of memory";
    char line[400];
    for (size_t c = 0; !bad && c < n; c++) {
        const char *why_case = load_case(json_object_array_get_idx(cases, c), &L->results[c]);
        if (why_case) {
            snprintf(line, sizeof line, "case %zu %s", c, why_case);
            bad = line;
        }
    }
    if (bad) {
        snprintf(err, errlen, "%s: %s", qp, bad);
        json_object_put(root);
        conform_loaded_free(L);
        return -1;
    }
    conform_report *r = &L->rep;
    r->kernel_name = L->strings[S_KNAME];
    r->kernel_version = L->strings[S_KVERSION];
    r->kernel_path = L->strings[S_KPATH];
    r->suite = L->strings[S_SUITE];
    r->smattn_version = L->strings[S_VERSION];
    r->only = strs[S_ONLY] ? L->strings[S_ONLY] : NULL;
    r->vectors_dir = strs[S_VECTORS] ? L->strings[S_VECTORS] : NULL;
    snprintf(r->conventions, sizeof r->conventions, "%s", L->strings[S_CONVENTIONS]);
    json_object *pp = member(root, "precision_per_problem");
    r->per_problem = pp && json_object_get_boolean(pp);
    r->seed = (uint64_t)seed;
    r->sample.k = rk;
    r->sample.seed = (uint64_t)rseed;
    r->has_vectors_digest = dg != NULL;
    r->vectors_digest = (uint64_t)dv;
    r->shard_index = (unsigned)si;
    r->shard_count = (unsigned)sc;
    r->results = L->results;
    r->n = n;
    for (size_t c = 0; c < n; c++)
        r->vectors += !strcmp(L->results[c].category, "golden") && L->results[c].status != CONFORM_SKIP;
    json_object_put(root);
    return 0;
}

void conform_loaded_free(conform_loaded *L)
{
    for (int s = 0; s < 8; s++)
        free(L->strings[s]);
    free(L->results);
    memset(L, 0, sizeof *L);
}

static int same_pm(const smattn_precision *a, const smattn_precision *b)
{
    return a->u_score == b->u_score && a->u_acc == b->u_acc && a->exp_ulps == b->exp_ulps &&
           a->u_p == b->u_p && a->blocks == b->blocks && a->acc_len == b->acc_len &&
           a->tiny == b->tiny;
}

static int same_str(const char *a, const char *b)
{
    return (!a && !b) || (a && b && !strcmp(a, b));
}

/* A report's golden vectors for a message: their digest, or that it has none. */
static const char *digest_str(const conform_report *r, char *buf, size_t cap)
{
    if (!r->has_vectors_digest)
        return "no digest (a report from before it was recorded)";
    snprintf(buf, cap, CONFORM_VECTORS_DIGEST_FMT, (unsigned long long)r->vectors_digest);
    return buf;
}

static int by_index(const void *a, const void *b)
{
    const conform_result *x = a, *y = b;
    return x->index < y->index ? -1 : x->index > y->index;
}

int conform_report_merge(conform_loaded *in, size_t n, const char *const *paths, int partial,
                         conform_report *out, conform_result **results, char *buf, size_t bufcap,
                         char *err, size_t errlen)
{
    *results = NULL;
    memset(out, 0, sizeof *out);
    char q0[SMATTN_IO_PATH_MAX], q1[SMATTN_IO_PATH_MAX];
    if (n == 0) {
        snprintf(err, errlen, "no report to merge");
        return -1;
    }
    const conform_report *a = &in[0].rep;
    size_t total = 0;
    for (size_t k = 0; k < n; k++) {
        const conform_report *b = &in[k].rep;
        const char *what = !same_str(a->suite, b->suite)                 ? "suites"
                           : a->seed != b->seed                          ? "seeds"
                           : !same_str(a->only, b->only)                 ? "--only filters"
                           : !same_str(a->smattn_version, b->smattn_version) ? "smattn versions"
                           : !same_str(a->kernel_name, b->kernel_name) ||
                                   !same_str(a->kernel_version, b->kernel_version) ||
                                   !same_str(a->kernel_path, b->kernel_path)
                               ? "kernels"
                           : !same_pm(&a->precision, &b->precision) ||
                                   a->per_problem != b->per_problem
                               ? "precision models"
                           : strcmp(a->conventions, b->conventions) ? "conventions"
                           : a->sample.k != b->sample.k || a->sample.seed != b->sample.seed
                               ? "--rows samples"
                           : a->shard_count != b->shard_count       ? "shard counts"
                                                                    : NULL;
        if (what) {
            snprintf(err, errlen, "%s and %s are of different runs (their %s differ): not merged",
                     smattn_io_path(paths[0], q0), smattn_io_path(paths[k], q1), what);
            return -1;
        }
        /* the vectors by their contents, not their directory: shards run from two
         * checkouts of the same vectors merge, shards run on different vectors do not */
        if (a->has_vectors_digest != b->has_vectors_digest ||
            a->vectors_digest != b->vectors_digest) {
            char da[32], db[32];
            snprintf(err, errlen,
                     "%s and %s are of different runs (their golden vectors differ: %s, %s; "
                     "different --vectors?): not merged",
                     smattn_io_path(paths[0], q0), smattn_io_path(paths[k], q1),
                     digest_str(a, da, sizeof da), digest_str(b, db, sizeof db));
            return -1;
        }
        for (size_t j = 0; j < k; j++)
            if (in[j].rep.shard_index == b->shard_index) {
                snprintf(err, errlen, "%s and %s are both shard %u/%u: overlapping shards",
                         smattn_io_path(paths[j], q0), smattn_io_path(paths[k], q1),
                         b->shard_index, b->shard_count);
                return -1;
            }
        total += b->n;
    }
    /* which shards are missing */
    size_t len = 0, missing = 0;
    buf[0] = '\0';
    for (unsigned s = 0; s < a->shard_count; s++) {
        size_t k = 0;
        while (k < n && in[k].rep.shard_index != s)
            k++;
        if (k < n)
            continue;
        missing++;
        if (len + 16 < bufcap)
            len += (size_t)snprintf(buf + len, bufcap - len, "%s%u/%u", missing > 1 ? ", " : "", s,
                                    a->shard_count);
    }
    if (missing && !partial) {
        snprintf(err, errlen, "%zu of %u shards missing (%s): give them all, or --partial", missing,
                 a->shard_count, buf);
        return -1;
    }
    conform_result *all = calloc(total ? total : 1, sizeof *all);
    if (!all) {
        snprintf(err, errlen, "out of memory");
        return -1;
    }
    size_t m = 0;
    for (size_t k = 0; k < n; k++) {
        const conform_report *b = &in[k].rep;
        for (size_t c = 0; c < b->n; c++) {
            /* a case in the wrong shard: the reports were edited, or the hash changed */
            if (b->shard_count > 1 &&
                conform_shard_of(b->results[c].name, b->shard_count) != (int)b->shard_index) {
                snprintf(err, errlen, "%s: case %s does not belong to shard %u/%u",
                         smattn_io_path(paths[k], q0), b->results[c].name, b->shard_index,
                         b->shard_count);
                free(all);
                return -1;
            }
            all[m++] = b->results[c];
        }
    }
    qsort(all, m, sizeof *all, by_index);
    for (size_t c = 1; c < m; c++)
        if (all[c].index == all[c - 1].index) {
            snprintf(err, errlen, "case %s and case %s have the same index %lld: not one run",
                     all[c - 1].name, all[c].name, (long long)all[c].index);
            free(all);
            return -1;
        }
    *out = *a;
    out->results = all;
    out->n = m;
    out->shard_index = 0;
    out->shard_count = 1;
    out->missing_shards = missing ? buf : NULL;
    out->vectors = 0;
    for (size_t c = 0; c < m; c++)
        out->vectors += !strcmp(all[c].category, "golden") && all[c].status != CONFORM_SKIP;
    out->baseline_path = NULL;
    out->regressions = 0;
    out->regression_text = NULL;
    out->required = NULL;
    out->precision_failures = 0;
    out->precision_text = NULL;
    *results = all;
    return 0;
}
