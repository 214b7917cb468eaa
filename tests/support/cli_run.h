/* SPDX-License-Identifier: MIT */
/* cli_run.h: running the smattn tool from a test and reading what it wrote (the conform and
 * gate suites share these). */
#ifndef SMATTN_TESTS_CLI_RUN_H
#define SMATTN_TESTS_CLI_RUN_H

#include <json.h>

/* A file's whole text, NUL-terminated (malloc'd; "" if it cannot be read). */
char *test_slurp(const char *path);
/* A file next to the CLI ($SMATTN_CLI's directory)/rel; fails the test if it is missing.
 * Points into a few rotating buffers. */
const char *test_built(const char *rel);

typedef struct test_outcome {
    int code; /* exit status; -1 if killed by a signal */
    double seconds;
    char *out, *err; /* owned */
} test_outcome;
void test_outcome_free(test_outcome *o);
/* $SMATTN_CLI with the NULL-terminated arguments, stdout and stderr captured through
 * files in dir (stdout.txt, stderr.txt). */
test_outcome test_cli_run(const char *dir, const char *const *args);

/* The case named `name` of a JSON report (NULL if absent), and a case's field as text
 * (fails the test if absent). */
json_object *test_report_case(json_object *root, const char *name);
const char *test_report_field(json_object *c, const char *key);

#endif
