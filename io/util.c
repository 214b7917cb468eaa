/* SPDX-License-Identifier: MIT */
/* util.c: messages, whole-file reads and strict JSON parsing for the io/ readers. */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "io/util.h"

void smattn_io_err(char *err, size_t errlen, const char *fmt, ...)
{
    if (!err || errlen == 0)
        return;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(err, errlen, fmt, ap);
    va_end(ap);
}

void smattn_io_err_prefix(char *err, size_t errlen, const char *name)
{
    if (!err || errlen == 0)
        return;
    char tmp[1024];
    snprintf(tmp, sizeof tmp, "%s", err);
    snprintf(err, errlen, "%s: %s", name, tmp);
}

const char *smattn_io_path(const char *path, char buf[SMATTN_IO_PATH_MAX])
{
    int plain = path[0] != '\0';
    for (const char *p = path; *p && plain; p++)
        plain = (*p >= 'a' && *p <= 'z') || (*p >= 'A' && *p <= 'Z') || (*p >= '0' && *p <= '9') ||
                strchr("/._-+,:@%=~", *p) != NULL;
    if (plain && strlen(path) < SMATTN_IO_PATH_MAX)
        return path;
    /* 'quoted', with \n, \t, \xHH for control and non-ASCII bytes, \' and \\ */
    size_t n = 0, cap = SMATTN_IO_PATH_MAX;
    buf[n++] = '\'';
    for (const unsigned char *p = (const unsigned char *)path; *p; p++) {
        char e[5];
        if (*p == '\n' || *p == '\t' || *p == '\r')
            snprintf(e, sizeof e, "\\%c", *p == '\n' ? 'n' : *p == '\t' ? 't' : 'r');
        else if (*p == '\'' || *p == '\\')
            snprintf(e, sizeof e, "\\%c", *p);
        else if (*p < 0x20 || *p >= 0x7f)
            snprintf(e, sizeof e, "\\x%02x", *p);
        else
            e[0] = (char)*p, e[1] = '\0';
        size_t m = strlen(e);
        if (n + m + 5 > cap) { /* room for "...'" and the NUL */
            memcpy(buf + n, "...", 3);
            n += 3;
            break;
        }
        memcpy(buf + n, e, m);
        n += m;
    }
    buf[n++] = '\'';
    buf[n] = '\0';
    return buf;
}

char *smattn_io_join_path(const char *dir, const char *name)
{
    size_t n = strlen(dir) + strlen(name) + 2;
    char *p = malloc(n);
    if (p)
        snprintf(p, n, "%s/%s", dir, name);
    return p;
}

int smattn_io_npy_load(const char *dir, const char *name, int data, smattn_npy *a, char *err,
                       size_t errlen)
{
    char *p = smattn_io_join_path(dir, name);
    if (!p) {
        smattn_io_err(err, errlen, "out of memory");
        return -1;
    }
    int rc = data ? smattn_npy_read_data(p, a, err, errlen)
                  : smattn_npy_read_header(p, a, err, errlen);
    free(p);
    return rc ? 1 : 0;
}

void smattn_io_shape_str(const smattn_npy *a, char *out, size_t cap)
{
    size_t n = (size_t)snprintf(out, cap, "[");
    for (int r = 0; r < a->rank && n < cap; r++)
        n += (size_t)snprintf(out + n, cap - n, "%s%lld", r ? "," : "", (long long)a->shape[r]);
    if (n < cap)
        snprintf(out + n, cap - n, "]");
}

char *smattn_io_read_text(const char *path, size_t max, size_t *len, char *err, size_t errlen)
{
    /* O_NONBLOCK: opening a FIFO must not hang; it is then refused as not regular. */
    int fd = open(path, O_RDONLY | O_NONBLOCK);
    FILE *f = fd < 0 ? NULL : fdopen(fd, "rb");
    if (!f) {
        smattn_io_err(err, errlen, "cannot open: %s", strerror(errno));
        if (fd >= 0)
            close(fd);
        return NULL;
    }
    struct stat st;
    if (fstat(fileno(f), &st) != 0 || !S_ISREG(st.st_mode)) {
        smattn_io_err(err, errlen, "not a regular file");
        fclose(f);
        return NULL;
    }
    /* Read up to max+1 bytes whatever stat said: the file may change under us. */
    size_t cap = 4096, n = 0;
    char *buf = malloc(cap + 1);
    while (buf) {
        n += fread(buf + n, 1, cap - n, f);
        if (n < cap || ferror(f) || n > max)
            break;
        size_t ncap = cap * 2 > max + 1 ? max + 1 : cap * 2;
        char *nb = realloc(buf, ncap + 1);
        if (!nb)
            free(buf);
        buf = nb;
        cap = ncap;
    }
    int bad = !buf || ferror(f) || n > max;
    fclose(f);
    if (bad) {
        smattn_io_err(err, errlen,
                      !buf      ? "out of memory"
                      : n > max ? "file too large"
                                : "read error");
        free(buf);
        return NULL;
    }
    buf[n] = '\0';
    *len = n;
    return buf;
}

int smattn_io_float_dtype(const smattn_npy *a, const char *file, const char *key, int bf16,
                          int byte_lists, smattn_dtype *t, char *err, size_t errlen)
{
    switch (a->type) {
    case SMATTN_NPY_F64: *t = SMATTN_F64; break;
    case SMATTN_NPY_F32: *t = SMATTN_F32; break;
    case SMATTN_NPY_F16: *t = SMATTN_F16; break;
    case SMATTN_NPY_BF16: *t = SMATTN_BF16; return 0;
    case SMATTN_NPY_U16:
        if (bf16) {
            *t = SMATTN_BF16;
            return 0;
        }
        smattn_io_err(err, errlen,
                      "%s: dtype '%s' holds raw bits; name \"%s\" in case.json's \"bf16\" list to "
                      "read them as bfloat16",
                      file, a->descr, key);
        return -1;
    case SMATTN_NPY_U8:
        if (byte_lists) {
            smattn_io_err(err, errlen,
                          "%s: dtype '%s' holds raw bytes; name \"%s\" in case.json's "
                          "\"fp8_e4m3\", \"fp8_e5m2\", \"q8_0\" or \"q4_0\" list to read them "
                          "as that format",
                          file, a->descr, key);
            return -1;
        }
        /* fall through */
    default:
        smattn_io_err(err, errlen, "%s: dtype '%s' is not a float type (want f8, f4, f2 or bf16)",
                      file, a->descr);
        return -1;
    }
    if (bf16) {
        smattn_io_err(err, errlen,
                      "case.json: \"bf16\" names %s, but %s has dtype '%s' (want '<u2')", key, file,
                      a->descr);
        return -1;
    }
    return 0;
}
