/* SPDX-License-Identifier: MIT */
/* fs.h: file-system helpers shared by the suites that build case directories. */
#ifndef SMATTN_TESTS_FS_H
#define SMATTN_TESTS_FS_H

#include <stddef.h>

/* Remove a directory and everything below it (no error if it is absent). */
void test_rm_tree(const char *dir);

/* Make a fresh directory /tmp/smattn_<tag>_XXXXXX into dir (n bytes); 0, or -1. */
int test_mkdtemp(char *dir, size_t n, const char *tag);

/* dir/name, in one of eight buffers used in turn (several may be live in one call). */
const char *test_path(const char *dir, const char *name);

#endif
