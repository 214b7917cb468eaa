/* SPDX-License-Identifier: MIT */
/* util.h: small helpers shared by the io/ readers (messages, whole-file text, strict JSON). */
#ifndef SMATTN_IO_UTIL_H
#define SMATTN_IO_UTIL_H

#include <stddef.h>

#include <json.h>

#include "io/npy.h"
#include "smattn.h"

/* snprintf into err (nothing if err is NULL or errlen is 0). */
void smattn_io_err(char *err, size_t errlen, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

/* Turn err into "name: err" in place. */
void smattn_io_err_prefix(char *err, size_t errlen, const char *name);

/* A path as messages show it: itself when it holds only letters, digits and /._-+,:@%=~;
 * otherwise in single quotes with control characters, non-ASCII bytes, quotes and
 * backslashes escaped (\n, \xHH, \', \\), so every message stays one printable line. Long
 * paths are cut with "...". Returns path or buf. */
#define SMATTN_IO_PATH_MAX 512
const char *smattn_io_path(const char *path, char buf[SMATTN_IO_PATH_MAX]);

/* "dir/name" in a malloc'd string (NULL when out of memory). */
char *smattn_io_join_path(const char *dir, const char *name);

/* Read the header (data 0) or, after it, the data (data 1) of the .npy file dir/name into
 * *a (smattn_npy_read_header, smattn_npy_read_data). 0; -1 when out of memory (err says
 * so); 1 when the reader failed, err holding its message for the caller to name the file
 * in (case directories and merge case directories name it in their own ways). */
int smattn_io_npy_load(const char *dir, const char *name, int data, smattn_npy *a, char *err,
                       size_t errlen);

/* The smattn dtype of a float .npy input into *t: f8, f4 and f2 as themselves, bf16 as
 * bfloat16, '<u2' as bfloat16 when case.json names key in "bf16" (bf16 nonzero), which it
 * may name for '<u2' only. byte_lists says whether the reader takes '|u1' arrays through
 * case.json's fp8 and block lists (case directories do, merge case directories do not), so
 * the message for such an array points to them. 0, or -1 with one line in err naming file. */
int smattn_io_float_dtype(const smattn_npy *a, const char *file, const char *key, int bf16,
                          int byte_lists, smattn_dtype *t, char *err, size_t errlen);

/* a's shape as "[d0,d1,...]" in out (cut to cap bytes), for messages. */
void smattn_io_shape_str(const smattn_npy *a, char *out, size_t cap);

/* Read a whole text file of at most max bytes into a malloc'd buffer (length in *len, plus
 * a NUL after it). NULL with one line in err on failure. */
char *smattn_io_read_text(const char *path, size_t max, size_t *len, char *err, size_t errlen);

/* Check text[0, len) against RFC 8259 where json-c is lax (io/json_strict.c): one object at
 * the top level, double-quoted strings only, no duplicate key in any object, integers
 * within int64; and no \u0000 in any string (keys and values are C strings to us). 0, or
 * nonzero with one line in err. */
int smattn_io_json_check(const char *text, size_t len, char *err, size_t errlen);

/* Parse text[0, len) strictly (RFC 8259, smattn_io_json_check, then json-c in strict mode
 * with UTF-8 validation) as one JSON object followed only by whitespace (a NUL byte inside
 * is an error). Returns a new json-c reference, or NULL with one line in err. */
json_object *smattn_io_parse_json(const char *text, size_t len, char *err, size_t errlen);

#endif
