/* SPDX-License-Identifier: MIT */
/* main.c: the smattn command-line tool: the usage text and the dispatch to the
 * subcommands (cli/cmd_*.c). Exit codes: 0 success, 1 a golden vector or a kernel check
 * failed, 2 bad usage or bad input (including a dtype the kernel does not take), 3 the
 * oracle or the kernel failed. */
#include <signal.h>
#include <stdio.h>
#include <string.h>

#include "cli/cli.h"
#include "conform/conform.h"
#include "io/case.h"
#include "smattn.h"

static const char usage_text[] =
    "usage: smattn COMMAND [ARGS]\n"
    "\n"
    "commands:\n"
    "  ref CASE OUT [--dtype f64|f32|f16|bf16] [--weights] [--threads N]\n"
    "      Load the case directory CASE (q.npy k.npy v.npy, or x.npy for a softmax;\n"
    "      optional bias.npy mask.npy sinks.npy case.json), run the exact oracle and\n"
    "      write OUT/o.npy and OUT/lse.npy (softmax: OUT/p.npy and OUT/lse.npy), plus\n"
    "      OUT/p.npy with --weights. Outputs are correctly rounded in --dtype (default\n"
    "      f64; bf16 is written as '<u2' bit patterns). --threads 0 uses every core.\n"
    "      With do.npy (and dlse.npy) in CASE, also the exact gradients OUT/dq.npy,\n"
    "      dk.npy, dv.npy (dbias.npy, dsinks.npy with a bias, sinks; SPEC 10).\n"
    "  opt CASE OUT [--dtype f32|f16|bf16] [--threads N] [--isa scalar|avx2|avx512]\n"
    "          [--weights]\n"
    "      The same case and outputs as ref, computed by the optimised kernel\n"
    "      (smattn_attention, or smattn_softmax for x.npy), written in --dtype\n"
    "      (default f32; f16 and bf16 are the f32 results rounded once). The kernel\n"
    "      takes every input in f32, f16 or bf16; an f64 input exits with 2. --isa\n"
    "      forces an ISA the CPU has (default: the active one, which SMATTN_ISA may\n"
    "      set). --threads 0 uses every core.\n"
    "  demo [DIR] [--vectors-only]\n"
    "      Show the seeds' worked examples beside their exact values, replay every\n"
    "      golden vector DIR/*.json (default spec/vectors) through the oracle in all\n"
    "      four dtypes bit for bit, then check the fast kernel against the oracle on\n"
    "      three Qwen2.5-7B-shaped problems under the SPEC 6 bound (skipped with\n"
    "      --vectors-only).\n";
/* in parts: C11 compilers need only take string literals of up to 4095 bytes */
static const char usage_text2[] =
    "  conform [--kernel K.so|builtin] [--suite quick|full|huge] [--seed N] [--shard I/N]\n"
    "          [--rows K] [--time SECONDS] [--case-timeout SECONDS] [--describe-timeout SECONDS]\n"
    "          [--only PREFIX,...]\n"
    "          [--json F] [--junit F] [--html F] [--baseline F]\n"
    "          [--require-precision f32|f16|bf16] [--vectors DIR | --no-vectors]\n"
    "      Judge an attention kernel (a plugin, include/smattn_kernel.h; default: the\n"
    "      built-in one) on a battery of cases against the exact oracle and the SPEC 6\n"
    "      bound: a table by category and a verdict. No plugin code runs in this\n"
    "      process: loading, describe, precision and each case run in child processes\n"
    "      with time limits, killed with everything they started; the plugin's output\n"
    "      is captured per case. The golden vectors are found under $SMATTN_ROOT,\n"
    "      next to the executable or in the installed data directory (none: exit 2,\n"
    "      unless --no-vectors). --baseline fails a case that passed in F and now\n"
    "      fails, is skipped, not run or missing, a ratio grown past its limit, and a\n"
    "      precision model looser than F's. Exit 0 conforming, 1 not (or a --baseline\n"
    "      or --require-precision failure), 2 bad usage, a kernel that cannot be\n"
    "      loaded, a baseline that is missing or not a valid report, or a report path\n"
    "      that cannot be written, is a file other than a report of smattn (kept), or\n"
    "      names another report's file (all checked before the run); a report is\n"
    "      renamed into place once whole. --shard I/N runs shard I of N: the cases\n"
    "      whose name hashes to I modulo N ('smattn report merge' joins the shards'\n"
    "      JSON reports). --rows K\n"
    "      judges K query rows per (batch, head), chosen from --seed (always the first,\n"
    "      the last and both sides of every power of two): the verdict says sampled.\n"
    "      --suite huge (T >= 65536, S T >= 2^31, offsets past 2^31) is sampled, K 64\n"
    "      unless --rows says. A kernel exporting smattn_plugin_backward also runs the\n"
    "      backward battery (category backward, SPEC 10): its forward, then its\n"
    "      backward from that O and LSE, dQ, dK, dV judged against the exact gradients\n"
    "      and the SPEC 10.7 bound (dBias and dSinks too when it claims\n"
    "      SMATTN_CAP_BACKWARD_DBIAS, _DSINKS); run twice when it claims bitwise-\n"
    "      repeatable gradients (SMATTN_CAP_BACKWARD_DETERMINISTIC).\n"
    "  gen [--suite quick|full] [--seed N] [--shard I/N] [--dtype f32|f16|bf16]\n"
    "      [--empty zero|nan|mean] [--empty-lse neg_inf|pos_inf|zero]\n"
    "      [--layout dense|packed|paged|csr] [--backward] [--vectors DIR | --no-vectors]\n"
    "      [--force] OUT\n"
    "      Write the battery as case directories under OUT, with OUT/manifest.json. An\n"
    "      OUT that is not empty is refused unless --force, which clears each case\n"
    "      directory it writes. --layout writes the attention cases ragged or paged\n"
    "      (SPEC 7.1). --backward adds do.npy to each attention case (SPEC 10).\n";
static const char usage_text3[] =
    "  check CASE_OR_DIR [--precision f32|f16|bf16|f64] [--skip PREFIX,...] [--shard I/N]\n"
    "          [--rows K [--seed N]] [--json F] [--junit F] [--html F] [--baseline F]\n"
    "      Judge the o.npy (and lse.npy, p.npy if present) saved in each case directory\n"
    "      by the same rules as conform; in a backward case (do.npy) also dq.npy, dk.npy\n"
    "      and dv.npy when present (all three), with dbias.npy and dsinks.npy when\n"
    "      present, under the SPEC 10.7 bound with the --precision model for both\n"
    "      passes; in a merge case (o_parts.npy) its o.npy (and lse.npy) against the\n"
    "      exact merge under the SPEC 9.5 bound. A case directory holding a file 'skip'\n"
    "      (its first line the reason), or named with a --skip prefix, is counted as\n"
    "      skipped.\n"
    "      --rows K judges sampled rows as conform does. Exit codes as for conform.\n"
    "  report merge OUT.json IN.json... [--partial] [--junit F] [--html F] [--baseline F]\n"
    "      Merge the JSON reports of the shards of one run (conform or check with\n"
    "      --shard I/N) into the report of the unsharded run. Exit codes as for conform.\n"
    "  version    print the version\n"
    "  help [COMMAND]\n"
    "      print this text, or COMMAND's options ('smattn COMMAND --help' does too)\n"
    "\n"
    "exit status: 0 success, 1 a golden vector or the kernel check failed, 2 bad usage or input,\n"
    "3 the oracle or the kernel failed (precision limit, out of memory).\n";

/* A signal that ends the process while outputs are written (a CI timeout's SIGTERM, Ctrl-C,
 * a closed terminal's SIGHUP, a CPU limit, a broken pipe): remove the temporaries, then
 * die of the signal as before (a report being written is left as it was). The switch of
 * the set itself holds signals back (io/case_out.c), so one that arrives then takes effect
 * once the new set is whole. */
static void on_signal(int sig)
{
    smattn_case_remove_temps();
    conform_report_remove_temp();
    signal(sig, SIG_DFL);
    raise(sig);
}

int main(int argc, char **argv)
{
    /* A file-size limit makes a write fail with EFBIG (reported, temporaries removed)
     * instead of killing the process with them left in OUT. */
    signal(SIGXFSZ, SIG_IGN);
    static const int sigs[] = {SIGHUP,    SIGINT,  SIGQUIT, SIGTERM, SIGALRM, SIGVTALRM,
                               SIGPROF,   SIGUSR1, SIGUSR2, SIGPIPE, SIGXCPU, SIGABRT,
#ifdef SIGPWR
                               SIGPWR,
#endif
#ifdef SIGSTKFLT
                               SIGSTKFLT,
#endif
                               SIGPOLL};
    for (size_t k = 0; k < sizeof sigs / sizeof sigs[0]; k++)
        if (signal(sigs[k], on_signal) == SIG_IGN)
            signal(sigs[k], SIG_IGN); /* ignored by the parent (nohup, &): stays ignored */
    if (argc < 2)
        return cli_fail(EXIT_INPUT, "missing command (try 'smattn help')");
    const char *cmd = argv[1];
    if (!strcmp(cmd, "help") || !strcmp(cmd, "-h") || !strcmp(cmd, "--help")) {
        /* "smattn help ref" is "smattn ref --help"; "help --help" is this text */
        if (argc > 2 && strcmp(argv[2], "--help") && strcmp(argv[2], "-h") &&
            strcmp(argv[2], "help") && strcmp(argv[2], "--version")) {
            char *sub[3] = {argv[0], argv[2], "--help"};
            return main(3, sub);
        }
        fputs(usage_text, stdout);
        fputs(usage_text2, stdout);
        fputs(usage_text3, stdout);
        return EXIT_OK;
    }
    if (!strcmp(cmd, "version") || !strcmp(cmd, "--version")) {
        if (argc > 2 && (!strcmp(argv[2], "--help") || !strcmp(argv[2], "-h"))) {
            fputs("usage: smattn version\n  Print the library's version and the SPEC version it\n"
                  "  implements.\noptions:\n  -h, --help    print this text\n",
                  stdout);
            return EXIT_OK;
        }
        if (argc > 2) {
            char msg[128];
            snprintf(msg, sizeof msg, "version: unexpected argument '%.40s'", argv[2]);
            return cli_fail(EXIT_INPUT, msg);
        }
        printf("smattn %d.%d.%d (spec %s)\n", SMATTN_VERSION_MAJOR, SMATTN_VERSION_MINOR,
               SMATTN_VERSION_PATCH, SMATTN_SPEC_VERSION);
        return EXIT_OK;
    }
    if (!strcmp(cmd, "ref"))
        return cmd_ref(argc - 2, argv + 2);
    if (!strcmp(cmd, "opt"))
        return cmd_opt(argc - 2, argv + 2);
    if (!strcmp(cmd, "demo"))
        return cmd_demo(argc - 2, argv + 2);
    if (!strcmp(cmd, "conform"))
        return cmd_conform(argc - 2, argv + 2);
    if (!strcmp(cmd, "gen"))
        return cmd_gen(argc - 2, argv + 2);
    if (!strcmp(cmd, "check"))
        return cmd_check(argc - 2, argv + 2);
    if (!strcmp(cmd, "report"))
        return cmd_report(argc - 2, argv + 2);
    char msg[128];
    snprintf(msg, sizeof msg, "unknown command '%.40s' (try 'smattn help')", cmd);
    return cli_fail(EXIT_INPUT, msg);
}
