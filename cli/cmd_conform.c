/* cmd_conform.c: `smattn conform`, `smattn gen` and `smattn check`: option parsing, the
 * progress bar and the reports around the checker in conform/ (conform/README.md). */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "cli/cli.h"
#include "conform/conform.h"

enum { EXIT_FAIL = EXIT_MISMATCH, EXIT_USAGE = EXIT_INPUT };
/* parse_opts: --help was given and answered; the command exits 0. */
enum { EXIT_HELP = -1 };

typedef struct opts {
    const char *kernel, *suite, *json, *junit, *baseline, *html, *vectors, *only;
    const char *precision, *dtype, *empty, *empty_lse;
    uint64_t seed;
    double time_budget; /* 0: none */
    double case_timeout;
    const char *pos[2];
    int npos;
} opts;

static int usage_error(const char *cmd, const char *msg)
{
    char line[768];
    snprintf(line, sizeof line, "%s (try 'smattn help')", msg);
    cli_error(cmd, line);
    return EXIT_USAGE;
}

static const char *usage_of(const char *cmd)
{
    if (!strcmp(cmd, "conform"))
        return "usage: smattn conform [--kernel K.so|builtin] [--suite quick|full] [--seed N]\n"
               "         [--time S] [--case-timeout S] [--only PREFIX,...] [--json F] [--junit F]\n"
               "         [--html F] [--baseline F] [--vectors DIR]\n";
    if (!strcmp(cmd, "gen"))
        return "usage: smattn gen [--suite quick|full] [--seed N] [--dtype f32|f16|bf16]\n"
               "         [--empty zero|nan|mean] [--empty-lse neg_inf|pos_inf|zero] OUT\n";
    return "usage: smattn check CASE_OR_DIR [--precision f32|f16|bf16|f64] [--json F]\n"
           "         [--junit F] [--html F] [--baseline F]\n";
}

static int parse_seconds(const char *s, double *out)
{
    char *end;
    errno = 0;
    double v = strtod(s, &end);
    if (end == s || *end || errno || !(v > 0) || v > 1e6)
        return -1;
    *out = v;
    return 0;
}

/* Options of all three commands; `allowed` lists the ones cmd takes ("kernel suite ..."). */
static int parse_opts(const char *cmd, const char *allowed, int maxpos, int argc, char **argv,
                      opts *o)
{
    static const char *const names[] = {
        "--kernel",    "--suite",   "--json",      "--junit",        "--baseline",
        "--html",      "--vectors", "--precision", "--dtype",        "--empty",
        "--empty-lse", "--seed",    "--time",      "--case-timeout", "--only"};
    const char **slots[] = {&o->kernel,    &o->suite,   &o->json,      &o->junit, &o->baseline,
                            &o->html,      &o->vectors, &o->precision, &o->dtype, &o->empty,
                            &o->empty_lse, NULL,        NULL,          NULL,      &o->only};
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
            } else if (!strcmp(names[k], "--time") || !strcmp(names[k], "--case-timeout")) {
                double *dst = names[k][2] == 't' ? &o->time_budget : &o->case_timeout;
                if (parse_seconds(val, dst)) {
                    snprintf(msg, sizeof msg, "%s '%.40s': want a number of seconds > 0", names[k],
                             val);
                    return usage_error(cmd, msg);
                }
            } else {
                *slots[k] = val;
            }
        } else if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
            printf("%s(details: 'smattn help', conform/README.md)\n", usage_of(cmd));
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
    if (o->suite && strcmp(o->suite, "quick") && strcmp(o->suite, "full")) {
        snprintf(msg, sizeof msg, "--suite '%.40s': want quick or full", o->suite);
        return usage_error(cmd, msg);
    }
    if (!o->suite)
        o->suite = "quick";
    return EXIT_OK;
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

static void progress(size_t done, size_t total, const char *name)
{
    int width = 30, fill = total ? (int)((double)width * (double)done / (double)total) : width;
    fprintf(stderr, "\r[%.*s%*s] %zu/%zu %-40.40s", fill, "##############################",
            width - fill, "", done, total, name);
    if (done == total)
        fprintf(stderr, "\r%*s\r", width + 60, "");
    fflush(stderr);
}

/* JSON, JUnit, HTML and the baseline gate; the table on stdout; the exit code. */
static int finish_report(const char *cmd, conform_report *rep, const opts *o)
{
    char err[512];
    if (o->baseline && conform_baseline_compare(rep, o->baseline, err, sizeof err)) {
        cli_error(cmd, err);
        return EXIT_USAGE;
    }
    conform_report_print(rep, stdout);
    fflush(stdout);
    int rc = conform_report_conforming(rep) && rep->regressions == 0 ? EXIT_OK : EXIT_FAIL;
    if ((o->json && conform_report_json(rep, o->json, err, sizeof err)) ||
        (o->junit && conform_report_junit(rep, o->junit, err, sizeof err)) ||
        (o->html && conform_report_html(rep, o->html, err, sizeof err))) {
        cli_error(cmd, err);
        rc = EXIT_USAGE;
    }
    free(rep->regression_text);
    rep->regression_text = NULL;
    return rc;
}

int cmd_conform(int argc, char **argv)
{
    opts o;
    memset(&o, 0, sizeof o);
    int rc = parse_opts("conform",
                        "kernel suite seed time case-timeout json junit baseline html "
                        "vectors only",
                        0, argc, argv, &o);
    if (rc)
        return rc == EXIT_HELP ? EXIT_OK : rc;
    char err[1200];
    conform_kernel k;
    if (conform_kernel_open(o.kernel, &k, err, sizeof err)) {
        cli_error("conform", err);
        return EXIT_USAGE;
    }
    conform_battery b;
    if (conform_battery_build(&b, o.suite, o.seed, o.vectors, err, sizeof err)) {
        cli_error("conform", err);
        conform_kernel_close(&k);
        return EXIT_USAGE;
    }
    conform_result *res = calloc(b.n ? b.n : 1, sizeof *res);
    if (!res) {
        fprintf(stderr, "smattn conform: out of memory\n");
        conform_battery_free(&b);
        conform_kernel_close(&k);
        return EXIT_USAGE;
    }
    double timeout = o.case_timeout > 0 ? o.case_timeout : CONFORM_CASE_TIMEOUT;
    int bar = isatty(2);
    double t0 = cli_now_seconds();
    size_t nr = 0;
    for (size_t n = 0; n < b.n; n++) {
        if (!selected(o.only, b.cases[n].name))
            continue;
        if (bar)
            progress(n, b.n, b.cases[n].name);
        double left = o.time_budget > 0 ? o.time_budget - (cli_now_seconds() - t0) : HUGE_VAL;
        conform_result *r = &res[nr++];
        if (left <= 0) {
            memset(r, 0, sizeof *r);
            snprintf(r->name, sizeof r->name, "%s", b.cases[n].name);
            snprintf(r->category, sizeof r->category, "%s", b.cases[n].category);
            r->caps = b.cases[n].caps;
            r->status = CONFORM_SKIP;
            snprintf(r->reason, sizeof r->reason, "not run: the --time budget of %g s ran out",
                     o.time_budget);
            continue;
        }
        conform_run_case(&k, &b.cases[n], timeout < left ? timeout : left, r);
        if (left < timeout && r->status == CONFORM_FAIL && !strncmp(r->reason, "hang", 4)) {
            /* cut short by the budget, not by its own limit: not a verdict on the kernel */
            r->status = CONFORM_SKIP;
            snprintf(r->reason, sizeof r->reason,
                     "not run: the --time budget of %g s ran out during the case", o.time_budget);
        }
    }
    if (bar)
        progress(b.n, b.n, "");
    if (nr == 0 && o.only) {
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
    printf("smattn conform: %zu cases in %.2f s\n", nr, cli_now_seconds() - t0);
    rc = finish_report("conform", &rep, &o);
    free(res);
    conform_battery_free(&b);
    conform_kernel_close(&k);
    return rc;
}

int cmd_gen(int argc, char **argv)
{
    opts o;
    memset(&o, 0, sizeof o);
    int rc = parse_opts("gen", "suite seed dtype empty empty-lse vectors", 1, argc, argv, &o);
    if (rc)
        return rc == EXIT_HELP ? EXIT_OK : rc;
    if (o.npos != 1)
        return usage_error("gen", "missing OUT (usage: smattn gen [--suite quick|full] OUT)");
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
    char err[1200];
    conform_battery b;
    if (conform_battery_build(&b, o.suite, o.seed, o.vectors, err, sizeof err)) {
        cli_error("gen", err);
        return EXIT_USAGE;
    }
    long n = conform_gen_write(&b, o.pos[0], t, (smattn_empty)e, (smattn_empty_lse)l, o.suite,
                               o.seed, err, sizeof err);
    conform_battery_free(&b);
    if (n < 0) {
        cli_error("gen", err);
        return EXIT_USAGE;
    }
    printf("smattn gen: %ld cases in %s (manifest.json lists them)\n", n, o.pos[0]);
    return EXIT_OK;
}

int cmd_check(int argc, char **argv)
{
    opts o;
    memset(&o, 0, sizeof o);
    int rc = parse_opts("check", "precision json junit baseline html", 1, argc, argv, &o);
    if (rc)
        return rc == EXIT_HELP ? EXIT_OK : rc;
    if (o.npos != 1)
        return usage_error("check", "missing CASE_OR_DIR (usage: smattn check CASE_OR_DIR "
                                    "[--precision f32|f16|bf16|f64])");
    smattn_dtype t = SMATTN_F32;
    if (o.precision && cli_parse_dtype(o.precision, &t))
        return usage_error("check", "--precision: want f64, f32, f16 or bf16");
    smattn_precision pm = smattn_precision_of(t);
    char err[1200];
    conform_result *res = NULL;
    size_t n = 0;
    if (conform_check_path(o.pos[0], &pm, &res, &n, err, sizeof err)) {
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
    rc = finish_report("check", &rep, &o);
    free(res);
    return rc;
}
