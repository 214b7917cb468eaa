/* SPDX-License-Identifier: MIT */
/* fs.h: file-system helpers shared by the suites that build case directories. */
#ifndef SMATTN_TESTS_FS_H
#define SMATTN_TESTS_FS_H

/* Remove a directory and everything below it (no error if it is absent). */
void test_rm_tree(const char *dir);

#endif
