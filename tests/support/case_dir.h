/* SPDX-License-Identifier: MIT */
/* case_dir.h: writing and loading case directories in a test (the case and case layout
 * suites share these). */
#ifndef SMATTN_TESTS_CASE_DIR_H
#define SMATTN_TESTS_CASE_DIR_H

#include "io/case.h"

/* A fresh directory /tmp/smattn_<tag>_XXXXXX (malloc'd), or the test fails. */
char *test_case_tmpdir(const char *tag);

/* dir/name holding text (no NUL), or the test fails. */
void test_put_text(const char *dir, const char *name, const char *text);

/* smattn_case_load(dir) succeeds into *c, or the test fails with the loader's message. */
void test_case_load_ok(const char *dir, smattn_case *c);

/* smattn_case_load(dir) fails with one line that contains needle, or the test fails. */
void test_case_load_fails(const char *dir, const char *needle);

#endif
