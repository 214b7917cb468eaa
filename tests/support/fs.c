/* SPDX-License-Identifier: MIT */
/* fs.c: file-system helpers shared by the suites that build case directories. */
#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "tests/support/fs.h"

int test_mkdtemp(char *dir, size_t n, const char *tag)
{
    int w = snprintf(dir, n, "/tmp/smattn_%s_XXXXXX", tag);
    return w > 0 && (size_t)w < n && mkdtemp(dir) ? 0 : -1;
}

const char *test_path(const char *dir, const char *name)
{
    static char buf[8][600];
    static int k;
    k = (k + 1) % 8;
    snprintf(buf[k], sizeof buf[k], "%s/%s", dir, name);
    return buf[k];
}

void test_rm_tree(const char *dir)
{
    DIR *d = opendir(dir);
    if (!d)
        return;
    struct dirent *e;
    while ((e = readdir(d))) {
        if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, ".."))
            continue;
        char p[512];
        snprintf(p, sizeof p, "%s/%s", dir, e->d_name);
        struct stat st;
        if (lstat(p, &st) == 0 && S_ISDIR(st.st_mode))
            test_rm_tree(p);
        else
            unlink(p);
    }
    closedir(d);
    rmdir(dir);
}
