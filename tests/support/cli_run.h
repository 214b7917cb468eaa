/* SPDX-License-Identifier: MIT */
/* cli_run.h: running the smattn tool from a test and reading what it wrote (the conform,
 * gate and rows suites share these). */
#ifndef SMATTN_TESTS_CLI_RUN_H
#define SMATTN_TESTS_CLI_RUN_H

#include <json.h>

/* A file's whole text, NUL-terminated (malloc'd; "" if it cannot be read). */
char *test_slurp(const char *path);
/* A file next to the CLI ($SMATTN_CLI's directory)/rel; fails the test if it is missing.
 * Points into a few rotating buffers. */
const char *test_built(const char *rel);
/* The fixture plugin tests/fixtures/fixture_<mode>.so next to the CLI (test_built). */
const char *test_fixture(const char *mode);

typedef struct test_outcome {
    int code; /* exit status; -1 if killed by a signal */
    double seconds;
    char *out, *err; /* owned */
} test_outcome;
void test_outcome_free(test_outcome *o);
/* $SMATTN_CLI with the NULL-terminated arguments, stdout and stderr captured through
 * files in dir (stdout.txt, stderr.txt). */
test_outcome test_cli_run(const char *dir, const char *const *args);
/* test_cli_run with the arguments as a NULL-terminated list (at most 39 are taken). */
test_outcome test_cli_runl(const char *dir, const char *a0, ...);
/* The same with program prog (NULL: $SMATTN_CLI) run as user and group uid when the suite
 * runs as root (as the suite's own user otherwise), under RLIMIT_NPROC = nproc when
 * nproc > 0: a full process table for that user alone. The program and every file it reads
 * must be reachable by uid (test_copy_public). A run that has not ended after 60 s dies of
 * SIGALRM (code -1): a test of something that used to block fails instead of hanging. */
test_outcome test_cli_run_as(const char *dir, const char *prog, const char *const *args,
                             unsigned uid, long nproc);
/* A copy of file src in directory dir, readable and executable by everyone; its path (a few
 * rotating buffers). Fails the test if it cannot be made. */
const char *test_copy_public(const char *dir, const char *src);
/* A uid no account and no process of this machine uses, for test_cli_run_as. */
unsigned test_spare_uid(void);

/* `smattn ref` wrote the outputs in dir as a set whose marker names it ("writer": "ref"),
 * which `smattn check` skips (the oracle's own outputs); the marker is removed, so that the
 * outputs are judged as another program's: the oracle's outputs must pass. Fails the test
 * if the marker does not name ref. */
void test_unmark_ref_set(const char *dir);

/* The case named `name` of a JSON report (NULL if absent), and a case's field as text
 * (fails the test if absent). */
json_object *test_report_case(json_object *root, const char *name);
const char *test_report_field(json_object *c, const char *key);

#endif
