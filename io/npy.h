/* SPDX-License-Identifier: MIT */
/* npy.h: a strict reader and a plain writer for NumPy .npy files (format versions 1.0-3.0).
 *
 * The reader parses untrusted bytes: it never reads outside the buffer it is given, checks
 * every size against the bytes actually present before allocating, and turns anything
 * malformed into one line of text (no path in it: callers prefix the file name).
 * Fortran-ordered arrays are loaded as they are stored and described by their strides
 * (column-major), not transposed. Data are converted to the host's byte order on load.
 */
#ifndef SMATTN_IO_NPY_H
#define SMATTN_IO_NPY_H

#include <stddef.h>
#include <stdint.h>

#include "smattn.h"

#define SMATTN_NPY_MAX_RANK 5 /* 5: a merge case's o_parts [N,B,S,Hq,Dv] (SPEC 7.1) */

/* The element types this project reads and writes. */
typedef enum smattn_npy_type {
    SMATTN_NPY_F64 = 0,  /* 'f8' */
    SMATTN_NPY_F32 = 1,  /* 'f4' */
    SMATTN_NPY_F16 = 2,  /* 'f2' */
    SMATTN_NPY_U16 = 3,  /* 'u2': raw bit patterns (bfloat16 when the case says so) */
    SMATTN_NPY_BF16 = 4, /* '|V2' / '<V2': ml_dtypes bfloat16 as np.save writes it */
    SMATTN_NPY_BOOL = 5, /* 'b1' */
    SMATTN_NPY_U8 = 6    /* 'u1' */
} smattn_npy_type;

typedef struct smattn_npy {
    smattn_npy_type type;
    char descr[8];                       /* the descr as written, for messages */
    int version;                         /* 1, 2 or 3 */
    int rank;                            /* 0..SMATTN_NPY_MAX_RANK */
    int fortran_order;                   /* 1: column-major (see stride) */
    int64_t shape[SMATTN_NPY_MAX_RANK];  /* unused trailing entries are 0 */
    int64_t stride[SMATTN_NPY_MAX_RANK]; /* in elements, row- or column-major */
    int64_t count;                       /* product of shape (1 for rank 0) */
    size_t itemsize;                     /* bytes per element */
    size_t data_offset;                  /* bytes of magic + header */
    void *data;                          /* owned; count*itemsize bytes; NULL if empty */
} smattn_npy;

/* Bytes per element of a type (0 if unknown) and its name ("f64", "u16", "bf16", ...). */
size_t smattn_npy_type_size(smattn_npy_type t);
const char *smattn_npy_type_name(smattn_npy_type t);
/* The npy type that holds an smattn dtype (BF16 -> U16 bit patterns). */
smattn_npy_type smattn_npy_type_of(smattn_dtype t);

/* Parse the magic, version and header dict from buf[0, len). On success fills every field
 * of *a except data (NULL) and returns 0; the data would start at a->data_offset. Needs
 * only the header bytes, not the data. On failure returns nonzero with one line in err. */
int smattn_npy_parse_header(const void *buf, size_t len, smattn_npy *a, char *err, size_t errlen);

/* Parse a whole .npy file held in memory: the header, then exactly count*itemsize bytes
 * of data (fewer or more is an error). The data are copied into owned, aligned memory.
 * Returns 0 on success; otherwise nonzero, *a is empty and err holds one line. */
int smattn_npy_parse(const void *buf, size_t len, smattn_npy *a, char *err, size_t errlen);

/* Read a .npy file (a regular file). Same contract as smattn_npy_parse; the header is read
 * first, so a huge or lying header costs nothing. */
int smattn_npy_read(const char *path, smattn_npy *a, char *err, size_t errlen);

/* The header of a .npy file only: every field of *a but data (NULL), the data size checked
 * against the file's size; no data byte is read. Same errors as smattn_npy_read. */
int smattn_npy_read_header(const char *path, smattn_npy *a, char *err, size_t errlen);

/* Read the data of a file whose header smattn_npy_read_header put in *a: the file is read
 * again whole and must still have the same header (else an error: it changed). */
int smattn_npy_read_data(const char *path, smattn_npy *a, char *err, size_t errlen);

/* Free the data of an array (safe on a zeroed or already freed one). */
void smattn_npy_free(smattn_npy *a);

/* Encode a version-1.0, little-endian, C-order .npy file in memory: the header padded with
 * spaces and a newline to a multiple of 64 bytes, then count*itemsize bytes of data (given
 * in host byte order, row-major). Returns a malloc'd buffer (size in *len), or NULL on a
 * bad rank/shape/type (err says which) or when out of memory. */
unsigned char *smattn_npy_encode(smattn_npy_type t, int rank, const int64_t *shape,
                                 const void *data, size_t *len, char *err, size_t errlen);

/* Write such a file to path. Returns 0 on success, else nonzero with one line in err. */
int smattn_npy_write(const char *path, smattn_npy_type t, int rank, const int64_t *shape,
                     const void *data, char *err, size_t errlen);

#endif
