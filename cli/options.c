/* SPDX-License-Identifier: MIT */
/* options.c: what every subcommand of the smattn tool parses and reports with. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "cli/cli.h"
#include "conform/conform.h"

/* The installed data directory (make install puts the golden vectors in
 * $(SMATTN_DATADIR)/vectors); mk/install.mk sets it from PREFIX. */
#ifndef SMATTN_DATADIR
#define SMATTN_DATADIR "/usr/local/share/smattn"
#endif

void cli_error(const char *cmd, const char *msg)
{
    /* Control characters and bytes that are not UTF-8 escaped (conform_text_clean): a path
     * holding a newline must not split the line (the io/ messages quote paths already; this
     * also covers the conform library's), a plugin's text must not drive the terminal. */
    size_t cap = 4 * strlen(msg) + 1;
    char *buf = malloc(cap);
    if (buf)
        conform_text_clean(msg, 0, buf, cap);
    fprintf(stderr, "smattn%s%s: %s\n", cmd ? " " : "", cmd ? cmd : "", buf ? buf : "");
    free(buf);
}

int cli_fail(int code, const char *msg)
{
    cli_error(NULL, msg);
    return code;
}

int cli_exit_code_of(smattn_status st)
{
    switch (st) {
    case SMATTN_ERR_NOMEM:
    case SMATTN_ERR_PRECISION:
    case SMATTN_ERR_THREADS:
    case SMATTN_ERR_UNSUPPORTED:
    case SMATTN_ERR_INTERNAL: return EXIT_ORACLE;
    default: return EXIT_INPUT;
    }
}

int cli_parse_dtype(const char *s, smattn_dtype *t)
{
    static const char *const names[4] = {"f64", "f32", "f16", "bf16"};
    for (int k = 0; k < 4; k++)
        if (strcmp(s, names[k]) == 0) {
            *t = (smattn_dtype)k;
            return 0;
        }
    return -1;
}

const char *cli_option_value(int argc, char **argv, int *i, const char *name, int *missing)
{
    size_t n = strlen(name);
    const char *a = argv[*i];
    if (strncmp(a, name, n) != 0)
        return NULL;
    if (a[n] == '=')
        return a + n + 1;
    if (a[n] != '\0')
        return NULL;
    if (*i + 1 >= argc) {
        *missing = 1;
        return NULL;
    }
    return argv[++*i];
}

double cli_now_seconds(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

void cli_check_isa_env(void)
{
    /* the library decides (smattn_opt_isa_env) and never prints; the tool says it once */
    int r = smattn_opt_isa_env();
    if (r >= 0)
        return;
    const char *e = getenv("SMATTN_ISA");
    char msg[160];
    if (r == -1)
        snprintf(msg, sizeof msg,
                 "SMATTN_ISA='%.40s' is not an ISA (want scalar, avx2 or avx512); using %s", e ? e : "",
                 smattn_opt_isa());
    else
        snprintf(msg, sizeof msg, "SMATTN_ISA=%.40s: this CPU cannot run it; using %s", e ? e : "",
                 smattn_opt_isa());
    cli_error(NULL, msg);
}

/* The golden vectors: under $SMATTN_ROOT when set, next to the executable (build/smattn ->
 * spec/vectors in the source tree; bin/smattn -> share/smattn/vectors in an installed
 * tree), or in SMATTN_DATADIR/vectors (the first that holds something wins; `smattn
 * conform`, `gen` and `demo` share it).
 * 0 with the directory in out, or -1 with where it looked. */
int cli_find_vectors(char *out, size_t cap, char *looked, size_t lcap)
{
    return conform_find_data("vectors", out, cap, looked, lcap);
}
