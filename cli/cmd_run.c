/* SPDX-License-Identifier: MIT */
/* cmd_run.c: `smattn ref` and `smattn opt`: load a case directory, run the exact oracle or
 * the optimised kernel, write the outputs. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cli/cli.h"
#include "cli/merge.h"
#include "io/case.h"
#include "io/merge_case.h"
#include "smattn.h"

/* Which implementation a case runs through. */
typedef enum engine { ENGINE_REF, ENGINE_OPT } engine;

typedef struct run_args {
    const char *cmd; /* "ref" or "opt", the prefix of every message */
    const char *case_dir, *out_dir;
    smattn_dtype dtype; /* of the outputs: ref f64 by default, opt f32 (never f64) */
    int weights;
    int threads;
    const char *isa; /* opt only; NULL: the active ISA */
} run_args;

static const char ref_help[] =
    "usage: smattn ref CASE OUT [--dtype f64|f32|f16|bf16] [--weights] [--threads N]\n"
    "  Run the exact oracle on the case directory CASE (q.npy k.npy v.npy, or x.npy for a\n"
    "  softmax; optional bias.npy mask.npy sinks.npy block_table.npy case.json; SPEC 7) and\n"
    "  write OUT/o.npy and OUT/lse.npy (softmax: p.npy and lse.npy), correctly rounded, as a\n"
    "  set (ragged and paged cases, SPEC 7.1: o.npy [total_q,Hq,Dv], lse.npy [Hq,total_q]):\n"
    "  all or none, marked whole in OUT/.smattn-set (SPEC 7.2); an o/lse/p.npy of an earlier\n"
    "  run that this run does not write is removed. OUT is created if missing; a run into\n"
    "  an OUT another run is writing waits for it. A merge case (o_parts.npy, lse_parts.npy;\n"
    "  SPEC 9) gives the merged o.npy and lse.npy of its partial states. A backward case\n"
    "  (do.npy, optional dlse.npy; SPEC 7.1, 10) also gives the exact gradients dq.npy,\n"
    "  dk.npy, dv.npy (and dbias.npy with a bias, dsinks.npy with sinks) in --dtype.\n"
    "options:\n"
    "  --dtype T     output dtype: f64 (default), f32, f16, bf16 (written as '<u2' bits)\n"
    "  --weights     also write OUT/p.npy, the attention weights\n"
    "  --threads N   threads, 0..4096; 0 (default) uses every online core\n"
    "  -h, --help    print this text\n"
    "A progress bar shows on stderr when it is a terminal and the work is long.\n"
    "exit status: 0 success, 2 bad usage or input (one line on stderr, OUT unchanged),\n"
    "3 the oracle failed.\n";

static const char opt_help[] =
    "usage: smattn opt CASE OUT [--dtype f32|f16|bf16] [--threads N] [--isa scalar|avx2|avx512]\n"
    "                  [--weights]\n"
    "  The case and outputs of 'smattn ref', computed by the optimised kernel\n"
    "  (smattn_attention, or smattn_softmax for x.npy; smattn_merge for a merge case) and\n"
    "  written in --dtype, as a set.\n"
    "  The kernel takes every input (q, k, v, x, bias, sinks) in f32, f16 or bf16 (q, k, v\n"
    "  also fp8, without descales); an f64 input exits with 2. A backward case (do.npy,\n"
    "  optional dlse.npy) also gets dq.npy, dk.npy, dv.npy in --dtype from the fast\n"
    "  backward (smattn_attention_backward, SPEC 10.8) reading the forward's O and LSE as\n"
    "  written, dbias.npy with a bias (in its shape) and dsinks.npy with sinks; a\n"
    "  non-finite input there exits with 2.\n"
    "options:\n"
    "  --dtype T     output dtype: f32 (default), f16, bf16 (written as '<u2' bits); f16\n"
    "                and bf16 are the f32 results rounded once (no f64: the kernel is f32)\n"
    "  --isa I       force an ISA the CPU has: scalar, avx2, avx512 (default: the active\n"
    "                one; the environment variable SMATTN_ISA may set it)\n"
    "  --weights     also write OUT/p.npy\n"
    "  --threads N   threads, 0..4096; 0 (default) uses every online core\n"
    "  -h, --help    print this text\n"
    "exit status: 0 success, 2 bad usage or input (one line on stderr, OUT unchanged),\n"
    "3 the kernel failed.\n";

/* 0 parsed, -1 bad (msg), 1 help printed. */
static int parse_run_args(engine eng, int argc, char **argv, run_args *ra, char *msg, size_t len)
{
    memset(ra, 0, sizeof *ra);
    ra->cmd = eng == ENGINE_REF ? "ref" : "opt";
    ra->dtype = eng == ENGINE_REF ? SMATTN_F64 : SMATTN_F32;
    const char *cmd = ra->cmd;
    int npos = 0;
    for (int i = 0; i < argc; i++) {
        const char *a = argv[i], *val;
        int bad = 0;
        if (strcmp(a, "--help") == 0 || strcmp(a, "-h") == 0) {
            fputs(eng == ENGINE_REF ? ref_help : opt_help, stdout);
            return 1;
        }
        if (strcmp(a, "--weights") == 0)
            ra->weights = 1;
        else if ((val = cli_option_value(argc, argv, &i, "--dtype", &bad))) {
            if (cli_parse_dtype(val, &ra->dtype) || (eng == ENGINE_OPT && ra->dtype == SMATTN_F64)) {
                snprintf(msg, len, "%s: --dtype '%.40s': want %s", cmd, val,
                         eng == ENGINE_REF ? "f64, f32, f16 or bf16" : "f32, f16 or bf16");
                return -1;
            }
        } else if (eng == ENGINE_OPT && (val = cli_option_value(argc, argv, &i, "--isa", &bad))) {
            if (strcmp(val, "scalar") && strcmp(val, "avx2") && strcmp(val, "avx512")) {
                snprintf(msg, len, "opt: --isa '%.40s': want scalar, avx2 or avx512", val);
                return -1;
            }
            if (!smattn_opt_isa_available(val)) {
                snprintf(msg, len, "opt: --isa '%s': this CPU cannot run it", val);
                return -1;
            }
            ra->isa = val;
        } else if ((val = cli_option_value(argc, argv, &i, "--threads", &bad))) {
            char *end;
            errno = 0;
            long t = strtol(val, &end, 10);
            if (end == val || *end || errno || t < 0 || t > 4096) {
                snprintf(msg, len, "%s: --threads '%.40s': want an integer in [0, 4096]", cmd, val);
                return -1;
            }
            ra->threads = (int)t;
        } else if (bad) {
            snprintf(msg, len, "%s: %s needs a value", cmd, a);
            return -1;
        } else if (a[0] == '-' && a[1] != '\0') {
            snprintf(msg, len, "%s: unknown option '%.40s' (try 'smattn %s --help')", cmd, a, cmd);
            return -1;
        } else if (npos < 2) {
            *(npos++ ? &ra->out_dir : &ra->case_dir) = a;
        } else {
            snprintf(msg, len, "%s: unexpected argument '%.40s' (want CASE OUT)", cmd, a);
            return -1;
        }
    }
    if (npos < 2) {
        snprintf(msg, len, "%s: missing %s (usage: smattn %s CASE OUT [options])", cmd,
                 npos ? "OUT" : "CASE and OUT", cmd);
        return -1;
    }
    return 0;
}

/* The optimised kernel's input dtypes (smattn.h): f32, f16 or bf16 for every input, fp8 for
 * q, k and v, q8_0 and q4_0 for k and v; the first it does not take (f64) named in msg; 0 if
 * it takes them all. Needs the headers only (smattn_case_open). */
static int opt_check_dtypes(const smattn_case *c, char *msg, size_t len)
{
    const smattn_inputs *in = &c->in;
    struct {
        const char *file;
        const smattn_tensor *t;
        const smattn_npy *npy; /* present when its header was read (itemsize != 0) */
    } need[] = {{"q.npy", &in->q, &c->q},          {"k.npy", &in->k, &c->k},
                {"v.npy", &in->v, &c->v},          {"x.npy", &in->x, &c->x},
                {"bias.npy", &in->bias, &c->bias}, {"sinks.npy", &in->sinks, &c->sinks}};
    for (size_t k = 0; k < sizeof need / sizeof need[0]; k++) {
        const smattn_tensor *t = need[k].t;
        const int fp8 = k < 3 && (t->dtype == SMATTN_F8E4M3 || t->dtype == SMATTN_F8E5M2);
        const int block = (k == 1 || k == 2) && (t->dtype == SMATTN_Q8_0 || t->dtype == SMATTN_Q4_0);
        if (!need[k].npy->itemsize || t->dtype == SMATTN_F32 || t->dtype == SMATTN_F16 ||
            t->dtype == SMATTN_BF16 || fp8 || block)
            continue;
        snprintf(msg, len, "opt: %s is %s; the kernel takes f32, f16 or bf16%s", need[k].file,
                 smattn_dtype_name(t->dtype),
                 k < 3 ? " (q, k, v also fp8; k and v also q8_0 and q4_0)" : "");
        return -1;
    }
    return 0;
}

/* The oracle's progress bar: on stderr when it is a terminal, once the work has lasted
 * half a second (short runs show nothing), at most ten times a second, erased at the end
 * (exactly what was written: the line's length is remembered). smattn_ref_progress calls
 * it from this thread only, in key slots: T per row (1 if B Hq S T overflows), so a
 * decode's single row moves the bar too. */
typedef struct progress_bar {
    double t0, last;
    int shown, len;
    int64_t unit; /* key slots per row, as smattn_ref_progress counts them */
} progress_bar;

static void show_progress(int64_t done, int64_t total, void *arg)
{
    progress_bar *b = arg;
    double now = cli_now_seconds();
    if (done >= total) {
        if (b->shown)
            fprintf(stderr, "\r%*s\r", b->len, "");
        fflush(stderr);
        return;
    }
    if (now - b->t0 < 0.5 || (b->shown && now - b->last < 0.1))
        return;
    const int width = 30;
    double f = total > 0 ? (double)done / (double)total : 0;
    int fill = (int)((double)width * f);
    int64_t unit = b->unit > 0 && total % b->unit == 0 ? b->unit : 1;
    int n = fprintf(stderr, "\rsmattn ref: [%.*s%*s] %3d%% %lld/%lld rows %.1f s", fill,
                    "##############################", width - fill, "", (int)(100.0 * f),
                    (long long)(done / unit), (long long)(total / unit), now - b->t0);
    if (n - 1 > b->len)
        b->len = n - 1; /* without the '\r' */
    fflush(stderr);
    b->shown = 1;
    b->last = now;
}

/* Run the oracle or the kernel on a loaded case (and, given g, the exact backward); one
 * line in msg and an exit code on failure. The kernel's failures exit with 3, except
 * "unsupported" (an input it does not take: bad input for this command). */
static int run_engine(engine eng, const run_args *ra, const smattn_case *c,
                      const smattn_outputs *out, const smattn_grad_outputs *g, char *msg,
                      size_t len)
{
    smattn_status st;
    if (eng == ENGINE_REF) {
        smattn_ref_config cfg = {0};
        cfg.threads = ra->threads;
        const smattn_problem *p = &c->prob;
        int64_t rows = p->B * p->Hq * p->S;
        progress_bar bar = {cli_now_seconds(), 0, 0, 0,
                            p->T > 0 && rows <= INT64_MAX / p->T ? p->T : 1};
        st = smattn_ref_progress(&c->prob, &c->in, out, &cfg, NULL,
                                 isatty(STDERR_FILENO) ? show_progress : NULL, &bar);
        if (st == SMATTN_OK && g) {
            st = smattn_ref_backward(&c->prob, &c->in, &c->gin, g, &cfg, NULL);
            if (st != SMATTN_OK) {
                snprintf(msg, len, "oracle (backward): %s (%s)", smattn_status_str(st),
                         smattn_status_name(st));
                return cli_exit_code_of(st);
            }
        }
    } else {
        if (!ra->isa) /* the environment's ISA is used: say if it was bad, now the input is */
            cli_check_isa_env();
        smattn_opt_config cfg = {ra->threads, ra->isa};
        st = c->prob.op == SMATTN_OP_SOFTMAX ? smattn_softmax(&c->prob, &c->in, out, &cfg)
                                             : smattn_attention(&c->prob, &c->in, out, &cfg);
        if (st == SMATTN_OK && g) {
            /* FlashAttention-2's backward from the O and LSE just written (SPEC 10.8) */
            smattn_forward_saved saved;
            memset(&saved, 0, sizeof saved);
            saved.o.data = out->o.data, saved.o.dtype = out->o.dtype;
            saved.lse.data = out->lse.data, saved.lse.dtype = out->lse.dtype;
            memcpy(saved.o.stride, out->o.stride, sizeof saved.o.stride);
            memcpy(saved.lse.stride, out->lse.stride, sizeof saved.lse.stride);
            st = smattn_attention_backward(&c->prob, &c->in, &saved, &c->gin, g, &cfg);
            if (st != SMATTN_OK) {
                snprintf(msg, len, "opt: kernel (backward): %s (%s)%s", smattn_status_str(st),
                         smattn_status_name(st),
                         st == SMATTN_ERR_UNSUPPORTED
                             ? "; smattn ref writes the exact gradients of any case"
                             : "");
                return st == SMATTN_ERR_UNSUPPORTED ? EXIT_INPUT : cli_exit_code_of(st);
            }
        }
    }
    if (st == SMATTN_OK)
        return EXIT_OK;
    snprintf(msg, len, "%s: %s (%s)", eng == ENGINE_REF ? "oracle" : "opt: kernel",
             smattn_status_str(st), smattn_status_name(st));
    if (eng == ENGINE_OPT && st == SMATTN_ERR_UNSUPPORTED)
        return EXIT_INPUT;
    return cli_exit_code_of(st);
}

/* smattn ref / smattn opt: load CASE, run, write OUT; nothing is written on failure. */
static int cmd_run(engine eng, int argc, char **argv)
{
    char msg[1024];
    run_args ra;
    int pr = parse_run_args(eng, argc, argv, &ra, msg, sizeof msg);
    if (pr > 0)
        return EXIT_OK;
    /* OUT first: a path that cannot take the outputs is found before any work. */
    if (pr < 0 || smattn_case_out_check(ra.out_dir, msg, sizeof msg))
        return cli_fail(EXIT_INPUT, msg);
    if (smattn_merge_case_is(ra.case_dir)) /* o_parts.npy, lse_parts.npy (SPEC 7.1, 9) */
        return cli_run_merge(eng == ENGINE_OPT, ra.case_dir, ra.out_dir, ra.dtype, ra.weights,
                             ra.threads, ra.isa);
    smattn_case c;
    if (smattn_case_open(ra.case_dir, &c, msg, sizeof msg))
        return cli_fail(EXIT_INPUT, msg);
    if (eng == ENGINE_OPT && opt_check_dtypes(&c, msg, sizeof msg)) { /* before the data */
        smattn_case_free(&c);
        return cli_fail(EXIT_INPUT, msg);
    }
    unsigned which = SMATTN_CASE_OUT_O | SMATTN_CASE_OUT_LSE;
    if (ra.weights || c.prob.op == SMATTN_OP_SOFTMAX)
        which |= SMATTN_CASE_OUT_P;
    /* the gradients of a backward case: the oracle's, or the fast backward's (dq, dk, dv) */
    const int backward = c.backward && (eng == ENGINE_REF || c.prob.op == SMATTN_OP_ATTENTION);
    /* outputs too large to hold are found from the headers, before the data are read */
    if (smattn_case_outputs_check(&c, ra.dtype, which, msg, sizeof msg) ||
        (backward && smattn_case_grads_check(&c, ra.dtype, msg, sizeof msg))) {
        smattn_case_free(&c);
        return cli_fail(EXIT_INPUT, msg);
    }
    if (smattn_case_read(ra.case_dir, &c, msg, sizeof msg))
        return cli_fail(EXIT_INPUT, msg);
    smattn_outputs out;
    smattn_grad_outputs grads;
    memset(&grads, 0, sizeof grads);
    smattn_status st = smattn_case_outputs_alloc(&c, ra.dtype, which, &out, msg, sizeof msg);
    if (st == SMATTN_OK && backward &&
        (st = smattn_case_grads_alloc(&c, ra.dtype, &grads, msg, sizeof msg)) != SMATTN_OK)
        smattn_case_outputs_free(&out);
    int rc = EXIT_OK;
    if (st != SMATTN_OK)
        rc = cli_fail(cli_exit_code_of(st), msg);
    else if ((rc = run_engine(eng, &ra, &c, &out, backward ? &grads : NULL, msg, sizeof msg)) !=
             EXIT_OK)
        cli_fail(rc, msg);
    else if (smattn_case_write_set(&c, &out, backward ? &grads : NULL, ra.out_dir,
                                   eng == ENGINE_OPT ? "opt" : "ref", msg, sizeof msg))
        rc = cli_fail(EXIT_INPUT, msg);
    smattn_case_outputs_free(&out);
    smattn_case_grads_free(&grads);
    smattn_case_free(&c);
    return rc;
}

int cmd_ref(int argc, char **argv)
{
    return cmd_run(ENGINE_REF, argc, argv);
}

int cmd_opt(int argc, char **argv)
{
    return cmd_run(ENGINE_OPT, argc, argv);
}
