/* conform.h: the conformance subcommands of the smattn tool (cli/conform.c). Each takes
 * the arguments after its name and returns the exit code: 0 conforming, 1 not conforming
 * (or a baseline regression), 2 bad usage or input (including a kernel that cannot be
 * loaded). */
#ifndef SMATTN_CLI_CONFORM_H
#define SMATTN_CLI_CONFORM_H

int smattn_cli_conform(int argc, char **argv);
int smattn_cli_gen(int argc, char **argv);
int smattn_cli_check(int argc, char **argv);

#endif
