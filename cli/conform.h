/* conform.h: the conformance subcommands of the smattn tool (cli/conform.c). Each takes
 * the arguments after its name and returns the exit code: 0 conforming, 1 not conforming
 * (or a baseline regression), 2 bad usage or input (including a kernel that cannot be
 * loaded). */
#ifndef SMATTN_CLI_CONFORM_H
#define SMATTN_CLI_CONFORM_H

#include "smattn.h"

int smattn_cli_conform(int argc, char **argv);
int smattn_cli_gen(int argc, char **argv);
int smattn_cli_check(int argc, char **argv);

/* Shared by every subcommand (cli/smattn.c). The value of argv[*i] given as "--name VALUE"
 * (advancing *i) or "--name=VALUE"; NULL if argv[*i] is another option, with *missing set
 * when the value is absent. */
const char *smattn_cli_option_value(int argc, char **argv, int *i, const char *name, int *missing);
/* "f64", "f32", "f16", "bf16" -> *t; 0, or -1 for anything else. */
int smattn_cli_parse_dtype(const char *s, smattn_dtype *t);

#endif
