/* SPDX-License-Identifier: MIT */
/* datadir.c: where the checker's data is found: the golden vectors (spec/vectors) and the
 * fuzzer finds (conform/regressions), under $SMATTN_ROOT, in a source tree or an installed
 * one; the first of them that is a directory holding something. */
#include <dirent.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "conform/conform.h"

#ifndef SMATTN_DATADIR /* builds outside the Makefile (build.sh) */
#define SMATTN_DATADIR "/usr/local/share/smattn"
#endif

/* A directory holding at least one entry whose name does not start with '.': an empty
 * one (a stray spec/vectors beside an installed smattn) must not hide the data found
 * further down the list. */
static int has_data(const char *p)
{
    struct stat st;
    if (stat(p, &st) != 0 || !S_ISDIR(st.st_mode))
        return 0;
    DIR *d = opendir(p);
    struct dirent *de;
    int any = 0;
    while (d && !any && (de = readdir(d)))
        any = de->d_name[0] != '.';
    if (d)
        closedir(d);
    return any;
}

int conform_find_data(const char *what, char *out, size_t cap, char *looked, size_t lcap)
{
    const char *src = !strcmp(what, "vectors") ? "spec/vectors" : "conform/regressions";
    char cand[4][1100];
    int n = 0;
    /* $SMATTN_ROOT first: set, it says which tree to use, over what is found next to the
     * executable or installed. */
    const char *root = getenv("SMATTN_ROOT");
    if (root && root[0])
        snprintf(cand[n++], sizeof cand[0], "%.1000s/%s", root, src);
    char exe[1024];
    ssize_t len = readlink("/proc/self/exe", exe, sizeof exe - 1);
    if (len > 0) {
        exe[len] = '\0';
        char *slash = strrchr(exe, '/');
        if (slash) {
            *slash = '\0';
            snprintf(cand[n++], sizeof cand[0], "%.1000s/../%s", exe, src);
            snprintf(cand[n++], sizeof cand[0], "%.1000s/../share/smattn/%s", exe, what);
        }
    }
    snprintf(cand[n++], sizeof cand[0], "%.1000s/%s", SMATTN_DATADIR, what);
    if (lcap)
        looked[0] = '\0';
    for (int k = 0; k < n; k++) {
        if (has_data(cand[k])) {
            snprintf(out, cap, "%.1000s", cand[k]);
            return 0;
        }
        size_t l = lcap ? strlen(looked) : 0;
        if (lcap && l < lcap)
            snprintf(looked + l, lcap - l, "%s%.250s%s", k ? ", " : "", cand[k],
                     access(cand[k], F_OK) == 0 ? " (empty)" : "");
    }
    return -1;
}
