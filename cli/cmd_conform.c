/* SPDX-License-Identifier: MIT */
/* cmd_conform.c: `smattn conform`, `smattn gen` and `smattn check`: option parsing, the
 * progress bar and the reports around the checker in conform/ (conform/README.md). */
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "cli/cli.h"
#include "conform/conform.h"
#include "io/util.h"

enum { EXIT_FAIL = EXIT_MISMATCH, EXIT_USAGE = EXIT_INPUT };

/* Where `make install` puts conform/README.md (DOCDIR/conform/README.md); mk/install.mk
 * sets it from PREFIX (or DOCDIR), as SMATTN_DATADIR. */
#ifndef SMATTN_DOCDIR
#define SMATTN_DOCDIR "/usr/local/share/doc/smattn"
#endif
/* parse_opts: --help was given and answered; the command exits 0. */
enum { EXIT_HELP = -1 };

typedef struct opts {
    const char *kernel, *suite, *json, *junit, *baseline, *html, *vectors, *only;
    const char *precision, *dtype, *empty, *empty_lse, *require_precision, *skip, *shard_text;
    const char *layout; /* gen --layout */
    int no_vectors, force, partial, backward; /* flags */
    conform_shard shard; /* --shard I/N (count 1: the whole suite) */
    uint64_t seed;
    int64_t rows;       /* --rows K: K query rows judged per (batch, head); 0: every row */
    double time_budget; /* 0: none */
    double case_timeout;
    double describe_timeout;
    const char *pos[64];
    int npos;
} opts;

static int usage_error(const char *cmd, const char *msg)
{
    char line[1600];
    snprintf(line, sizeof line, "%s (try 'smattn help')", msg);
    cli_error(cmd, line);
    return EXIT_USAGE;
}

static const char *usage_of(const char *cmd)
{
    if (!strcmp(cmd, "conform"))
        return "usage: smattn conform [--kernel K.so|builtin] [--suite quick|full|huge] [--seed N]\n"
               "         [--shard I/N] [--rows K] [--time S] [--case-timeout S]\n"
               "         [--describe-timeout S] [--only PREFIX,...]\n"
               "         [--json F] [--junit F] [--html F] [--baseline F]\n"
               "         [--require-precision f32|f16|bf16] [--vectors DIR | --no-vectors]\n";
    if (!strcmp(cmd, "gen"))
        return "usage: smattn gen [--suite quick|full] [--seed N] [--shard I/N] [--dtype f32|f16|bf16]\n"
               "         [--empty zero|nan|mean] [--empty-lse neg_inf|pos_inf|zero]\n"
               "         [--layout dense|packed|paged|csr] [--backward] [--vectors DIR | --no-vectors]\n"
               "         [--force] OUT\n"
               "  --layout: attention cases with packed queries (cu_seqlens_q) and packed keys\n"
               "  (cu_seqlens_k), a paged cache (block_table.npy, pages of 16) or FlashInfer's\n"
               "  kv_indptr/kv_indices/kv_last_page_len (SPEC 7.1); default dense. The layout\n"
               "  cases keep their own (pages, HND, seqused_k), as conform hands them over\n"
               "  --backward: each attention case also gets do.npy, the gradient of O (uniform\n"
               "  in [-1, 1) in --dtype; SPEC 7.1, 10), so that 'smattn ref' writes its exact\n"
               "  dq.npy, dk.npy, dv.npy (dense layout only)\n";
    if (!strcmp(cmd, "report"))
        return "usage: smattn report merge OUT.json IN.json... [--partial] [--junit F] [--html F]\n"
               "         [--baseline F]\n"
               "  Merge the JSON reports of the shards of one run (--shard I/N of conform or\n"
               "  check) into OUT.json: the report of the unsharded run. Refuses reports of\n"
               "  different suites, seeds, kernels, precision models, golden vectors (by\n"
               "  their contents, not their directory) or smattn versions, a shard given\n"
               "  twice and missing shards (--partial: merge what is there and name what is\n"
               "  missing). Exit codes as for conform.\n";
    return "usage: smattn check CASE_OR_DIR [--precision f32|f16|bf16|f64] [--skip PREFIX,...]\n"
           "         [--shard I/N] [--rows K [--seed N]] [--json F] [--junit F] [--html F]\n"
           "         [--baseline F]\n";
}

/* A time limit above this is no limit in practice (31 years), and stays a number that every
 * conversion of it (to a timespec, to alarm's unsigned seconds) can hold. */
#define MAX_SECONDS 1e9

static int parse_seconds(const char *s, double *out)
{
    char *end;
    errno = 0;
    double v = strtod(s, &end);
    /* ERANGE: a value too large (inf, refused below) or one that underflows (tiny and
     * positive: 0 after rounding, also refused) */
    if (end == s || *end || !(v > 0) || !isfinite(v))
        return -1;
    *out = v < MAX_SECONDS ? v : MAX_SECONDS;
    return 0;
}

/* Options of all three commands; `allowed` lists the ones cmd takes ("kernel suite ..."). */
static int parse_opts(const char *cmd, const char *allowed, int maxpos, int argc, char **argv,
                      opts *o)
{
    static const char *const names[] = {"--kernel",
                                        "--suite",
                                        "--json",
                                        "--junit",
                                        "--baseline",
                                        "--html",
                                        "--vectors",
                                        "--precision",
                                        "--dtype",
                                        "--empty",
                                        "--empty-lse",
                                        "--seed",
                                        "--time",
                                        "--case-timeout",
                                        "--only",
                                        "--describe-timeout",
                                        "--require-precision",
                                        "--skip",
                                        "--shard",
                                        "--rows",
                                        "--layout"};
    const char **slots[] = {
        &o->kernel,  &o->suite,     &o->json,  &o->junit, &o->baseline,          &o->html,
        &o->vectors, &o->precision, &o->dtype, &o->empty, &o->empty_lse,         NULL,
        NULL,        NULL,          &o->only,  NULL,      &o->require_precision, &o->skip,
        &o->shard_text, NULL, &o->layout};
    char msg[200];
    for (int i = 0; i < argc; i++) {
        const char *a = argv[i], *val = NULL;
        int missing = 0;
        size_t k;
        for (k = 0; k < sizeof names / sizeof names[0]; k++)
            if ((val = cli_option_value(argc, argv, &i, names[k], &missing)) || missing)
                break;
        if (missing) {
            snprintf(msg, sizeof msg, "%s needs a value", a);
            return usage_error(cmd, msg);
        }
        if (k < sizeof names / sizeof names[0]) {
            if (!strstr(allowed, names[k] + 2)) {
                snprintf(msg, sizeof msg, "option %s does not apply here", names[k]);
                return usage_error(cmd, msg);
            }
            if (!strcmp(names[k], "--seed")) {
                char *end;
                errno = 0;
                unsigned long long s = strtoull(val, &end, 0);
                if (end == val || *end || errno || val[0] == '-') {
                    snprintf(msg, sizeof msg, "--seed '%.40s': want a non-negative integer", val);
                    return usage_error(cmd, msg);
                }
                o->seed = s;
            } else if (!strcmp(names[k], "--rows")) {
                char *end;
                errno = 0;
                long long r = strtoll(val, &end, 10);
                if (end == val || *end || errno || r < 1) {
                    snprintf(msg, sizeof msg,
                             "--rows '%.40s': want a number of rows per (batch, head) >= 1", val);
                    return usage_error(cmd, msg);
                }
                o->rows = r;
            } else if (!strcmp(names[k], "--time") || !strcmp(names[k], "--case-timeout") ||
                       !strcmp(names[k], "--describe-timeout")) {
                double *dst = names[k][2] == 't'   ? &o->time_budget
                              : names[k][2] == 'c' ? &o->case_timeout
                                                   : &o->describe_timeout;
                if (parse_seconds(val, dst)) {
                    snprintf(msg, sizeof msg, "%s '%.40s': want a finite number of seconds > 0",
                             names[k], val);
                    return usage_error(cmd, msg);
                }
            } else {
                *slots[k] = val;
            }
        } else if (!strcmp(a, "--no-vectors") || !strcmp(a, "--force") ||
                   !strcmp(a, "--partial") || !strcmp(a, "--backward")) {
            if (!strstr(allowed, a + 2)) {
                snprintf(msg, sizeof msg, "option %s does not apply here", a);
                return usage_error(cmd, msg);
            }
            *(a[2] == 'n'   ? &o->no_vectors
              : a[2] == 'f' ? &o->force
              : a[2] == 'b' ? &o->backward
                            : &o->partial) = 1;
        } else if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
            printf("%s(details: 'smattn help', " SMATTN_DOCDIR "/conform/README.md)\n",
                   usage_of(cmd));
            return EXIT_HELP;
        } else if (a[0] == '-' && a[1] != '\0') {
            snprintf(msg, sizeof msg, "unknown option '%.40s'", a);
            return usage_error(cmd, msg);
        } else if (o->npos < maxpos) {
            o->pos[o->npos++] = a;
        } else {
            snprintf(msg, sizeof msg, "unexpected argument '%.40s'", a);
            return usage_error(cmd, msg);
        }
    }
    if (o->suite && strcmp(o->suite, "quick") && strcmp(o->suite, "full") &&
        strcmp(o->suite, "huge")) {
        snprintf(msg, sizeof msg, "--suite '%.40s': want quick, full or huge", o->suite);
        return usage_error(cmd, msg);
    }
    if (!o->suite)
        o->suite = "quick";
    o->shard.index = 0;
    o->shard.count = 1;
    if (o->shard_text && conform_shard_parse(o->shard_text, &o->shard, msg, sizeof msg))
        return usage_error(cmd, msg);
    return EXIT_OK;
}

/* Every report path can be written (a regular file, never a FIFO or a device; an existing
 * one empty or a report of smattn; a file that did not exist is removed again) and no two
 * reports name the same file (one would
 * overwrite the other); the baseline is read and checked into *base. All of it before the
 * run: no plugin code has run yet, so none can have changed what the gate reads. 0, or the
 * exit code. */
static int check_paths(const char *cmd, const opts *o, conform_baseline *base)
{
    const char *paths[3] = {o->json, o->junit, o->html};
    static const char *const names[3] = {"--json", "--junit", "--html"};
    char err[1400];
    struct stat st[3];
    int made[3] = {0, 0, 0}, rc = 0;
    /* Files that do not exist yet are made for the check (and removed after it), so that
     * two spellings of one new file (r.xml, ./r.xml) are seen to be one. */
    for (int k = 0; k < 3 && !rc; k++) {
        if (!paths[k])
            continue;
        int fd = open(paths[k], O_WRONLY | O_CREAT | O_EXCL | O_NONBLOCK | O_NOCTTY, 0644);
        if (fd >= 0) {
            made[k] = 1;
            close(fd);
        }
        if (conform_report_check(names[k], paths[k], err, sizeof err) ||
            stat(paths[k], &st[k]) != 0) {
            cli_error(cmd, err);
            rc = EXIT_USAGE;
        }
        for (int j = 0; j < k && !rc; j++) {
            if (paths[j] && st[j].st_dev == st[k].st_dev && st[j].st_ino == st[k].st_ino) {
                char q[SMATTN_IO_PATH_MAX];
                snprintf(err, sizeof err,
                         "%s and %s name the same file %s: give each report its own", names[j],
                         names[k], smattn_io_path(paths[k], q));
                rc = usage_error(cmd, err);
            }
        }
    }
    for (int k = 0; k < 3; k++)
        if (made[k])
            unlink(paths[k]);
    if (!rc && o->baseline && conform_baseline_load(o->baseline, base, err, sizeof err)) {
        cli_error(cmd, err);
        rc = EXIT_USAGE;
    }
    return rc;
}

/* The vectors directory for the battery ("" with --no-vectors); 0, or the exit code. */
static int vectors_for(const char *cmd, const opts *o, char *out, size_t cap)
{
    if (o->no_vectors && o->vectors)
        return usage_error(cmd, "--vectors and --no-vectors contradict each other");
    if (o->no_vectors) {
        out[0] = '\0';
        return 0;
    }
    if (o->vectors) {
        snprintf(out, cap, "%s", o->vectors);
        return 0;
    }
    char looked[1200];
    if (cli_find_vectors(out, cap, looked, sizeof looked)) {
        char m[1400];
        snprintf(m, sizeof m,
                 "the golden vectors (spec/vectors) are not found (looked in %s); "
                 "give --vectors DIR, or --no-vectors to run without them",
                 looked);
        cli_error(cmd, m);
        return EXIT_USAGE;
    }
    return 0;
}

static size_t golden_count(const conform_battery *b)
{
    size_t n = 0;
    for (size_t k = 0; k < b->n; k++)
        n += !strcmp(b->cases[k].category, "golden");
    return n;
}

/* --only P1,P2,...: the case names starting with one of the prefixes. */
static int selected(const char *only, const char *name)
{
    if (!only)
        return 1;
    for (const char *s = only; *s;) {
        size_t n = strcspn(s, ",");
        if (n && strncmp(name, s, n) == 0)
            return 1;
        s += n + (s[n] == ',');
    }
    return 0;
}

/* The bar on a terminal: cases done of total, the time left at the rate so far (once a
 * case has finished), the case being run. */
static void progress(size_t done, size_t total, const char *name)
{
    static double t0;
    if (done == 0 || t0 == 0)
        t0 = cli_now_seconds();
    int width = 30, fill = total ? (int)((double)width * (double)done / (double)total) : width;
    char shown[41 * 4]; /* a case name from a manifest: escaped, the first 40 bytes of it */
    conform_text_clean(name, 0, shown, 41);
    char left[32] = "";
    double el = cli_now_seconds() - t0;
    if (done > 0 && done < total) {
        double rest = el / (double)done * (double)(total - done);
        snprintf(left, sizeof left, rest < 60 ? " (%.0f s left)" : " (%.0f min left)",
                 rest < 60 ? rest : rest / 60);
    }
    fprintf(stderr, "\r[%.*s%*s] %zu/%zu %-40.40s%-16s", fill, "##############################",
            width - fill, "", done, total, shown, left);
    if (done == total) {
        fprintf(stderr, "\r%*s\r", width + 80, "");
        t0 = 0;
    }
    fflush(stderr);
}

/* JSON, JUnit, HTML and the baseline gate; the table on stdout; the exit code. */
static int finish_report(const char *cmd, conform_report *rep, const opts *o,
                         const conform_baseline *base)
{
    char err[1400];
    if (o->baseline)
        conform_baseline_compare(rep, base);
    if (o->require_precision) {
        smattn_dtype t;
        (void)cli_parse_dtype(o->require_precision, &t); /* checked before the run */
        conform_require_precision(rep, t);
    }
    conform_report_print(rep, stdout);
    fflush(stdout);
    int rc = conform_report_conforming(rep) && rep->regressions == 0 && rep->precision_failures == 0
                 ? EXIT_OK
                 : EXIT_FAIL;
    if ((o->json && conform_report_json(rep, o->json, err, sizeof err)) ||
        (o->junit && conform_report_junit(rep, o->junit, err, sizeof err)) ||
        (o->html && conform_report_html(rep, o->html, err, sizeof err))) {
        cli_error(cmd, err);
        rc = EXIT_USAGE;
    }
    free(rep->regression_text);
    rep->regression_text = NULL;
    free(rep->precision_text);
    rep->precision_text = NULL;
    return rc;
}

static int run_conform(const opts *op, conform_baseline *base);

int cmd_conform(int argc, char **argv)
{
    opts o;
    memset(&o, 0, sizeof o);
    int rc = parse_opts("conform",
                        "kernel suite seed shard rows time case-timeout describe-timeout json "
                        "junit baseline html vectors no-vectors only require-precision",
                        0, argc, argv, &o);
    if (rc)
        return rc == EXIT_HELP ? EXIT_OK : rc;
    smattn_dtype req;
    if (o.require_precision && (cli_parse_dtype(o.require_precision, &req) || req == SMATTN_F64))
        return usage_error("conform", "--require-precision: want f32, f16 or bf16");
    conform_baseline base;
    memset(&base, 0, sizeof base);
    rc = run_conform(&o, &base);
    conform_baseline_free(&base);
    return rc;
}

/* conform after its options: the baseline read into *base (freed by the caller). */
static int run_conform(const opts *op, conform_baseline *base)
{
    opts o = *op;
    int rc;
    char vdir[1100];
    if (!strcmp(o.suite, "huge") && o.rows == 0)
        o.rows = CONFORM_HUGE_ROWS; /* the full oracle on these shapes would take hours */
    if (!strcmp(o.suite, "huge") && o.case_timeout == 0)
        o.case_timeout = CONFORM_HUGE_CASE_TIMEOUT;
    if ((rc = check_paths("conform", &o, base)) ||
        (rc = vectors_for("conform", &o, vdir, sizeof vdir)))
        return rc;
    cli_check_isa_env(); /* the arguments are good: the kernel will run */
    char err[1200];
    conform_isolate_init();
    conform_kernel k;
    if (conform_kernel_open(o.kernel,
                            o.describe_timeout > 0 ? o.describe_timeout : CONFORM_DESCRIBE_TIMEOUT,
                            &k, err, sizeof err)) {
        cli_error("conform", err);
        return EXIT_USAGE;
    }
    conform_battery b;
    if (conform_battery_build(&b, o.suite, o.seed, vdir, err, sizeof err)) {
        cli_error("conform", err);
        conform_kernel_close(&k);
        return EXIT_USAGE;
    }
    if (vdir[0] && golden_count(&b) == 0 && strcmp(o.suite, "huge")) {
        char m[1300];
        snprintf(m, sizeof m, "no golden vector (*.json) in %s (--no-vectors runs without)", vdir);
        cli_error("conform", m);
        conform_battery_free(&b);
        return EXIT_USAGE;
    }
    /* what the vectors held, for `smattn report merge` (their directory may differ between
     * shards of one run; their contents may not) */
    uint64_t vdigest = 0;
    if (conform_vectors_digest(vdir, &vdigest, err, sizeof err)) {
        cli_error("conform", err);
        conform_battery_free(&b);
        conform_kernel_close(&k);
        return EXIT_USAGE;
    }
    conform_merge_battery mb;
    memset(&mb, 0, sizeof mb);
    if (strcmp(o.suite, "huge") && (conform_merge_battery_build(&mb, o.seed) ||
                                     conform_merge_battery_add_vectors(&mb, vdir))) {
        conform_merge_battery_free(&mb);
        cli_error("conform", "out of memory");
        conform_battery_free(&b);
        conform_kernel_close(&k);
        return EXIT_USAGE;
    }
    conform_backward_battery bwb;
    memset(&bwb, 0, sizeof bwb);
    if (strcmp(o.suite, "huge") && conform_backward_battery_build(&bwb, o.suite, o.seed)) {
        cli_error("conform", "out of memory");
        conform_merge_battery_free(&mb);
        conform_battery_free(&b);
        conform_kernel_close(&k);
        return EXIT_USAGE;
    }
    const size_t nbw = bwb.cases.n, nmb = mb.n;
    conform_result *res = calloc(b.n + mb.n + nbw ? b.n + mb.n + nbw : 1, sizeof *res);
    if (!res) {
        cli_error("conform", "out of memory");
        conform_backward_battery_free(&bwb);
        conform_merge_battery_free(&mb);
        conform_battery_free(&b);
        conform_kernel_close(&k);
        return EXIT_USAGE;
    }
    double timeout = o.case_timeout > 0 ? o.case_timeout : CONFORM_CASE_TIMEOUT;
    int capture = conform_capture_open(); /* the plugin's stdout and stderr, per case */
    int bar = isatty(2);
    double t0 = cli_now_seconds();
    size_t nr = 0;
    int hangs = 0; /* cases in a row that hung: at CONFORM_MAX_HANGS the run stops */
    size_t todo = 0;
    for (size_t n = 0; n < b.n; n++)
        todo += selected(o.only, b.cases[n].name) && conform_shard_has(&o.shard, b.cases[n].name);
    for (size_t n = 0; n < mb.n; n++)
        todo += selected(o.only, mb.cases[n].name) && conform_shard_has(&o.shard, mb.cases[n].name);
    for (size_t n = 0; n < nbw; n++)
        todo += selected(o.only, bwb.cases.cases[n].name) &&
                conform_shard_has(&o.shard, bwb.cases.cases[n].name);
    for (size_t n = 0; n < b.n; n++) {
        if (!selected(o.only, b.cases[n].name) || !conform_shard_has(&o.shard, b.cases[n].name))
            continue;
        if (bar)
            progress(nr, todo, b.cases[n].name);
        double left = o.time_budget > 0 ? o.time_budget - (cli_now_seconds() - t0) : HUGE_VAL;
        conform_result *r = &res[nr++];
        if (left <= 0 || hangs >= CONFORM_MAX_HANGS) {
            memset(r, 0, sizeof *r);
            r->index = (int64_t)n;
            snprintf(r->name, sizeof r->name, "%s", b.cases[n].name);
            snprintf(r->category, sizeof r->category, "%s", b.cases[n].category);
            r->caps = b.cases[n].caps;
            r->status = CONFORM_SKIP;
            if (hangs >= CONFORM_MAX_HANGS)
                snprintf(r->reason, sizeof r->reason,
                         "not run: the run stopped after %d cases in a row hung", hangs);
            else
                snprintf(r->reason, sizeof r->reason, "not run: the --time budget of %g s ran out",
                         o.time_budget);
            continue;
        }
        conform_sample sample = {o.rows, o.seed};
        conform_run_case_rows(&k, &b.cases[n], timeout < left ? timeout : left, capture, &sample,
                              r);
        r->index = (int64_t)n; /* its place in the whole suite, whatever the shard */
        if (left < timeout && r->status == CONFORM_FAIL && !strncmp(r->reason, "hang", 4)) {
            /* cut short by the budget, not by its own limit: not a verdict on the kernel */
            r->status = CONFORM_SKIP;
            snprintf(r->reason, sizeof r->reason,
                     "not run: the --time budget of %g s ran out during the case", o.time_budget);
        }
        if (r->status == CONFORM_FAIL && !strncmp(r->reason, "hang", 4))
            hangs++;
        else if (r->status != CONFORM_SKIP)
            hangs = 0;
    }
    /* the merge battery (SPEC 9), after the attention cases: skipped by a kernel that does
     * not export smattn_plugin_merge */
    for (size_t n = 0; n < mb.n; n++) {
        if (!selected(o.only, mb.cases[n].name) || !conform_shard_has(&o.shard, mb.cases[n].name))
            continue;
        if (bar)
            progress(nr, todo, mb.cases[n].name);
        conform_result *r = &res[nr++];
        conform_run_merge_case(&k, &mb.cases[n], timeout, capture, r);
        r->index = (int64_t)(b.n + n);
    }
    conform_merge_battery_free(&mb);
    /* the backward battery (SPEC 10), last: skipped by a kernel that does not export
     * smattn_plugin_backward */
    for (size_t n = 0; n < nbw; n++) {
        const char *name = bwb.cases.cases[n].name;
        if (!selected(o.only, name) || !conform_shard_has(&o.shard, name))
            continue;
        if (bar)
            progress(nr, todo, name);
        double left = o.time_budget > 0 ? o.time_budget - (cli_now_seconds() - t0) : HUGE_VAL;
        conform_result *r = &res[nr++];
        if (left <= 0 || hangs >= CONFORM_MAX_HANGS) { /* as the attention cases */
            memset(r, 0, sizeof *r);
            snprintf(r->name, sizeof r->name, "%s", name);
            snprintf(r->category, sizeof r->category, "backward");
            r->caps = bwb.cases.cases[n].caps;
            r->status = CONFORM_SKIP;
            if (hangs >= CONFORM_MAX_HANGS)
                snprintf(r->reason, sizeof r->reason,
                         "not run: the run stopped after %d cases in a row hung", hangs);
            else
                snprintf(r->reason, sizeof r->reason, "not run: the --time budget of %g s ran out",
                         o.time_budget);
        } else {
            conform_run_backward_case(&k, &bwb, n, timeout < left ? timeout : left, capture, r);
            if (r->status == CONFORM_FAIL && !strncmp(r->reason, "hang", 4))
                hangs++;
            else if (r->status != CONFORM_SKIP)
                hangs = 0;
        }
        r->index = (int64_t)(b.n + nmb + n);
    }
    conform_backward_battery_free(&bwb);
    if (bar)
        progress(todo, todo, "");
    if (capture >= 0)
        close(capture);
    if (nr == 0 && o.only && o.shard.count <= 1) {
        free(res);
        conform_battery_free(&b);
        conform_kernel_close(&k);
        return usage_error("conform", "--only matches no case of the suite");
    }
    conform_report rep;
    memset(&rep, 0, sizeof rep);
    rep.kernel_name = k.name;
    rep.kernel_version = k.version;
    rep.kernel_path = k.path;
    rep.suite = o.suite;
    rep.seed = o.seed;
    rep.results = res;
    rep.n = nr;
    rep.precision = k.info.precision;
    rep.per_problem = k.has_precision;
    rep.shard_index = o.shard.index;
    rep.shard_count = o.shard.count;
    rep.only = o.only;
    rep.sample.k = o.rows;
    rep.sample.seed = o.seed;
    conform_conventions_str(&k.info, rep.conventions, sizeof rep.conventions);
    rep.vectors_dir = vdir;
    rep.has_vectors_digest = 1;
    rep.vectors_digest = vdigest;
    for (size_t j = 0; j < nr; j++)
        rep.vectors += !strcmp(res[j].category, "golden") && res[j].status != CONFORM_SKIP;
    if (o.shard.count > 1)
        printf("smattn conform: shard %u/%u: %zu of the suite's %zu cases in %.2f s\n",
               o.shard.index, o.shard.count, nr, b.n, cli_now_seconds() - t0);
    else
        printf("smattn conform: %zu cases in %.2f s\n", nr, cli_now_seconds() - t0);
    if (hangs >= CONFORM_MAX_HANGS)
        printf("stopped: %d cases in a row hung; the rest were not run and the kernel is "
               "reported not conforming\n",
               hangs);
    rc = finish_report("conform", &rep, &o, base);
    free(res);
    conform_battery_free(&b);
    conform_kernel_close(&k);
    return rc;
}

int cmd_gen(int argc, char **argv)
{
    opts o;
    memset(&o, 0, sizeof o);
    int rc = parse_opts("gen",
                        "suite seed shard dtype empty empty-lse layout backward vectors no-vectors "
                        "force",
                        1, argc, argv, &o);
    if (rc)
        return rc == EXIT_HELP ? EXIT_OK : rc;
    if (o.npos != 1)
        return usage_error("gen", "missing OUT (usage: smattn gen [--suite quick|full] OUT)");
    if (!strcmp(o.suite, "huge"))
        return usage_error("gen", "--suite huge: its stride-0 and sparse views have no .npy "
                                  "form (and would be gigabytes): run it with smattn conform");
    smattn_dtype t = SMATTN_F32;
    if (o.dtype && (cli_parse_dtype(o.dtype, &t) || t == SMATTN_F64))
        return usage_error("gen", "--dtype: want f32, f16 or bf16");
    static const char *const em[3] = {"zero", "nan", "mean"};
    static const char *const el[3] = {"neg_inf", "pos_inf", "zero"};
    int e = 0, l = 0;
    while (o.empty && e < 3 && strcmp(o.empty, em[e]))
        e++;
    while (o.empty_lse && l < 3 && strcmp(o.empty_lse, el[l]))
        l++;
    if (e == 3)
        return usage_error("gen", "--empty: want zero, nan or mean");
    if (l == 3)
        return usage_error("gen", "--empty-lse: want neg_inf, pos_inf or zero");
    static const char *const lay[4] = {"dense", "packed", "paged", "csr"};
    int y = 0;
    while (o.layout && y < 4 && strcmp(o.layout, lay[y]))
        y++;
    if (y == 4)
        return usage_error("gen", "--layout: want dense, packed, paged or csr");
    char err[1200], vdir[1100];
    if ((rc = vectors_for("gen", &o, vdir, sizeof vdir)))
        return rc;
    conform_battery b;
    if (conform_battery_build(&b, o.suite, o.seed, vdir, err, sizeof err)) {
        cli_error("gen", err);
        return EXIT_USAGE;
    }
    conform_battery_keep_shard(&b, &o.shard);
    long n = conform_gen_write(&b, o.pos[0], t, (smattn_empty)e, (smattn_empty_lse)l,
                               y | (o.backward ? CONFORM_GEN_BACKWARD : 0), o.suite,
                               o.seed, o.force, err, sizeof err);
    conform_battery_free(&b);
    if (n < 0) {
        cli_error("gen", err);
        return EXIT_USAGE;
    }
    printf("smattn gen: %ld cases in %s (manifest.json lists them)\n", n, o.pos[0]);
    return EXIT_OK;
}

static int run_check(const opts *op, smattn_precision pm, conform_baseline *base);

int cmd_check(int argc, char **argv)
{
    opts o;
    memset(&o, 0, sizeof o);
    int rc = parse_opts("check", "precision shard rows seed json junit baseline html skip", 1, argc,
                        argv, &o);
    if (rc)
        return rc == EXIT_HELP ? EXIT_OK : rc;
    if (o.npos != 1)
        return usage_error("check", "missing CASE_OR_DIR (usage: smattn check CASE_OR_DIR "
                                    "[--precision f32|f16|bf16|f64])");
    if (o.seed && !o.rows)
        return usage_error("check", "--seed chooses the rows of --rows K: give --rows too");
    smattn_dtype t = SMATTN_F32;
    if (o.precision && cli_parse_dtype(o.precision, &t))
        return usage_error("check", "--precision: want f64, f32, f16 or bf16");
    conform_baseline base;
    memset(&base, 0, sizeof base);
    rc = run_check(&o, smattn_precision_of(t), &base);
    conform_baseline_free(&base);
    return rc;
}

/* check after its options: the baseline read into *base (freed by the caller). */
static int run_check(const opts *op, smattn_precision pm, conform_baseline *base)
{
    opts o = *op;
    int rc;
    if ((rc = check_paths("check", &o, base)))
        return rc;
    char err[1200];
    conform_result *res = NULL;
    size_t n = 0;
    /* the header only for a path that exists (a missing one is just the error line), the
     * path escaped (a newline in it made the header two lines) */
    struct stat pst;
    char qp[SMATTN_IO_PATH_MAX];
    if (stat(o.pos[0], &pst) == 0) {
        printf("smattn check: judging the outputs saved in %s under the %s model (SPEC 6.1; "
               "--precision)\n",
               smattn_io_path(o.pos[0], qp), o.precision ? o.precision : "f32");
        fflush(stdout);
    }
    conform_sample sample = {o.rows, o.seed};
    if (conform_check_path_rows(o.pos[0], &pm, o.skip, &o.shard, &sample,
                                isatty(2) ? progress : NULL, &res, &n, err, sizeof err)) {
        cli_error("check", err);
        return EXIT_USAGE;
    }
    conform_report rep;
    memset(&rep, 0, sizeof rep);
    char kname[64];
    snprintf(kname, sizeof kname, "files (%s model)", o.precision ? o.precision : "f32");
    rep.kernel_name = kname;
    rep.kernel_version = "";
    rep.kernel_path = o.pos[0];
    rep.suite = "files";
    rep.results = res;
    rep.n = n;
    rep.precision = pm;
    rep.shard_index = o.shard.index;
    rep.shard_count = o.shard.count;
    rep.sample = sample;
    rep.seed = o.seed;
    snprintf(rep.conventions, sizeof rep.conventions,
             "as written in each case.json (smattn gen "
             "--empty, --empty-lse)");
    rc = finish_report("check", &rep, &o, base);
    free(res);
    return rc;
}

/* smattn report merge OUT.json IN.json...: the shard reports of one run merged into the
 * report of the unsharded run (conform_report_merge), printed and written as conform writes
 * its reports, gated by --baseline as conform is. */
int cmd_report(int argc, char **argv)
{
    if (argc >= 1 && (!strcmp(argv[0], "--help") || !strcmp(argv[0], "-h"))) {
        printf("%s", usage_of("report"));
        return EXIT_OK;
    }
    if (argc < 1 || strcmp(argv[0], "merge"))
        return usage_error("report", argc < 1 ? "missing subcommand (usage: smattn report merge "
                                                "OUT.json IN.json...)"
                                              : "unknown subcommand: want merge");
    opts o;
    memset(&o, 0, sizeof o);
    int rc = parse_opts("report", "junit html baseline partial", 64, argc - 1, argv + 1, &o);
    if (rc)
        return rc == EXIT_HELP ? EXIT_OK : rc;
    if (o.npos < 2)
        return usage_error("report", "want OUT.json and at least one IN.json");
    o.json = o.pos[0];
    /* the inputs first (a report named as OUT is read before it is replaced), then the
     * paths to write, as conform checks them */
    size_t n = (size_t)o.npos - 1;
    conform_loaded *in = calloc(n, sizeof *in);
    if (!in)
        return cli_fail(EXIT_USAGE, "out of memory");
    char err[1400];
    size_t got = 0;
    for (; got < n; got++)
        if (conform_report_load(o.pos[1 + got], &in[got], err, sizeof err))
            break;
    conform_baseline base;
    memset(&base, 0, sizeof base);
    if (got == n) {
        rc = check_paths("report", &o, &base);
        conform_report rep;
        conform_result *all = NULL;
        char missing[512];
        if (!rc && conform_report_merge(in, n, o.pos + 1, o.partial, &rep, &all, missing,
                                        sizeof missing, err, sizeof err)) {
            cli_error("report", err);
            rc = EXIT_USAGE;
        }
        if (!rc) {
            printf("smattn report merge: %zu reports, %zu cases\n", n, rep.n);
            if (rep.missing_shards)
                printf("partial: shards %s missing; their cases are not in this report\n",
                       rep.missing_shards);
            rc = finish_report("report", &rep, &o, &base); /* partial: never conforming */
        }
        free(all);
    } else {
        cli_error("report", err);
        rc = EXIT_USAGE;
    }
    for (size_t k = 0; k < got; k++)
        conform_loaded_free(&in[k]);
    free(in);
    conform_baseline_free(&base);
    return rc;
}
