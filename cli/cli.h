/* SPDX-License-Identifier: MIT */
/* cli.h: what the smattn tool's files share: exit codes, option parsing (cli/options.c)
 * and the subcommands' entry points. Each command takes the arguments after its name and
 * returns the exit code. */
#ifndef SMATTN_CLI_H
#define SMATTN_CLI_H

#include <stddef.h>

#include "smattn.h"

/* 0 success; 1 a golden vector, a kernel or a baseline check failed; 2 bad usage or bad
 * input (including a kernel that cannot be loaded); 3 the oracle or the kernel failed. */
enum { EXIT_OK = 0, EXIT_MISMATCH = 1, EXIT_INPUT = 2, EXIT_ORACLE = 3 };

/* One line "smattn CMD: MSG" (or "smattn: MSG" when cmd is NULL) on stderr, with control
 * characters in MSG escaped (\n, \t, \xHH). */
void cli_error(const char *cmd, const char *msg);
/* One line "smattn: MSG" on stderr (as cli_error), then code. */
int cli_fail(int code, const char *msg);
/* Statuses that mean the input was bad map to 2; the library's own failures to 3. */
int cli_exit_code_of(smattn_status st);
/* The value of argv[*i] given as "--name VALUE" (advancing *i) or "--name=VALUE"; NULL if
 * argv[*i] is another option, with *missing set when the value is absent. */
const char *cli_option_value(int argc, char **argv, int *i, const char *name, int *missing);
/* "f64", "f32", "f16", "bf16" -> *t; 0, or -1 for anything else. */
int cli_parse_dtype(const char *s, smattn_dtype *t);
/* SMATTN_ISA names no ISA, or one this CPU cannot run: say so in one line on stderr (the
 * kernel then runs its default ISA, which the line names). Called once, after the
 * arguments (and for opt the case) are found good, only where the environment's ISA is the
 * one used: opt without --isa, demo's kernel part, conform. */
void cli_check_isa_env(void);
/* The golden vectors' directory when none is given: $SMATTN_ROOT/spec/vectors when it is
 * set, DIR/../spec/vectors and DIR/../share/smattn/vectors of the executable's directory
 * DIR, then SMATTN_DATADIR/vectors (the installed data); the first that holds something
 * goes to out (conform_find_data).
 * 0, or -1 with the places looked at in `looked`. */
int cli_find_vectors(char *out, size_t cap, char *looked, size_t lcap);
/* Monotonic wall time in seconds. */
double cli_now_seconds(void);

int cmd_ref(int argc, char **argv);     /* cli/cmd_run.c */
int cmd_opt(int argc, char **argv);     /* cli/cmd_run.c */
int cmd_demo(int argc, char **argv);    /* cli/cmd_demo.c */
int cmd_conform(int argc, char **argv); /* cli/cmd_conform.c */
int cmd_gen(int argc, char **argv);     /* cli/cmd_conform.c */
int cmd_check(int argc, char **argv);   /* cli/cmd_conform.c */
int cmd_report(int argc, char **argv);  /* cli/cmd_conform.c */

#endif
