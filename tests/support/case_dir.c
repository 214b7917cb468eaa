/* SPDX-License-Identifier: MIT */
/* case_dir.c: writing and loading case directories in a test. */
#include "tests/support/case_dir.h"

#include <check.h>
#include <stdio.h>
#include <string.h>

#include "tests/support/fs.h"

char *test_case_tmpdir(const char *tag)
{
    char d[64];
    ck_assert_int_eq(test_mkdtemp(d, sizeof d, tag), 0);
    char *dup = strdup(d);
    ck_assert_ptr_nonnull(dup);
    return dup;
}

void test_put_text(const char *dir, const char *name, const char *text)
{
    char p[512];
    snprintf(p, sizeof p, "%s/%s", dir, name);
    FILE *f = fopen(p, "wb");
    ck_assert_ptr_nonnull(f);
    ck_assert_uint_eq(fwrite(text, 1, strlen(text), f), strlen(text));
    fclose(f);
}

void test_case_load_ok(const char *dir, smattn_case *c)
{
    char err[512] = "";
    ck_assert_msg(smattn_case_load(dir, c, err, sizeof err) == 0, "%s", err);
}

void test_case_load_fails(const char *dir, const char *needle)
{
    smattn_case c;
    char err[512] = "";
    ck_assert_msg(smattn_case_load(dir, &c, err, sizeof err) != 0, "accepted (%s)", needle);
    ck_assert_msg(strstr(err, needle) != NULL, "message '%s' lacks '%s'", err, needle);
    ck_assert_msg(!strchr(err, '\n'), "multi-line message '%s'", err);
}
