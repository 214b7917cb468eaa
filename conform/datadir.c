/* SPDX-License-Identifier: MIT */
/* datadir.c: where the checker's data is found: the golden vectors (spec/vectors) and the
 * fuzzer finds (conform/regressions), under $SMATTN_ROOT, in a source tree or an installed
 * one; the first of them that is a directory holding something. And the digest of the
 * golden vectors' contents that a report records (`smattn report merge` compares it). */
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

static int cmp_name(const void *a, const void *b)
{
    return strcmp(*(char *const *)a, *(char *const *)b);
}

/* Hash one file's name and bytes into *h: the name, a NUL, the size as 8 bytes (little
 * endian), then the bytes, so that no two sets of files run together into one stream. */
static int digest_file(const char *dir, const char *name, uint64_t *h, char *err, size_t errlen)
{
    char path[1400];
    snprintf(path, sizeof path, "%.1000s/%.300s", dir, name);
    FILE *f = fopen(path, "rb");
    struct stat st;
    if (!f || fstat(fileno(f), &st) != 0 || !S_ISREG(st.st_mode)) {
        snprintf(err, errlen, "vectors: %.1100s cannot be read", path);
        if (f)
            fclose(f);
        return -1;
    }
    *h = conform_fnv1a(name, strlen(name) + 1, *h);
    unsigned char sz[8];
    for (int k = 0; k < 8; k++)
        sz[k] = (unsigned char)((uint64_t)st.st_size >> (8 * k));
    *h = conform_fnv1a(sz, sizeof sz, *h);
    unsigned char buf[8192];
    size_t got, total = 0;
    while ((got = fread(buf, 1, sizeof buf, f)) > 0) {
        *h = conform_fnv1a(buf, got, *h);
        total += got;
    }
    int bad = ferror(f) || total != (size_t)st.st_size;
    fclose(f);
    if (bad)
        snprintf(err, errlen, "vectors: %.1100s changed or failed while it was read", path);
    return bad ? -1 : 0;
}

int conform_vector_files(const char *dir, int path, char *names[CONFORM_MAX_VECTORS], size_t *n)
{
    *n = 0;
    DIR *d = dir ? opendir(dir) : NULL;
    if (!d)
        return -2;
    int rc = 0;
    struct dirent *e;
    while ((e = readdir(d)) && *n < CONFORM_MAX_VECTORS) {
        size_t l = strlen(e->d_name);
        if (l > 5 && e->d_name[0] != '.' && strcmp(e->d_name + l - 5, ".json") == 0) {
            char *s = malloc((path ? strlen(dir) + 1 : 0) + l + 1);
            if (!s) {
                rc = -1;
                break;
            }
            if (path)
                sprintf(s, "%s/%s", dir, e->d_name);
            else
                memcpy(s, e->d_name, l + 1);
            names[(*n)++] = s;
        }
    }
    closedir(d);
    if (rc) {
        while (*n)
            free(names[--*n]);
        return rc;
    }
    qsort(names, *n, sizeof *names, cmp_name);
    return 0;
}

int conform_vectors_digest(const char *dir, uint64_t *digest, char *err, size_t errlen)
{
    *digest = CONFORM_FNV_BASIS;
    if (!dir || !dir[0])
        return 0;
    char *names[CONFORM_MAX_VECTORS];
    size_t n;
    int rc = conform_vector_files(dir, 0, names, &n);
    if (rc == -2)
        snprintf(err, errlen, "vectors: %.1000s is not a directory", dir);
    else if (rc)
        snprintf(err, errlen, "out of memory");
    for (size_t k = 0; k < n; k++) {
        if (!rc)
            rc = digest_file(dir, names[k], digest, err, errlen);
        free(names[k]);
    }
    return rc ? -1 : 0;
}
