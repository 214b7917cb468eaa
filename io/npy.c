/* SPDX-License-Identifier: MIT */
/* npy.c: strict .npy parsing from memory or a file, and the version-1.0 writer (npy.h). */
#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "io/npy.h"

static const unsigned char npy_magic[6] = {0x93, 'N', 'U', 'M', 'P', 'Y'};

/* Longest header accepted. numpy itself refuses headers over 10000 bytes unless told to
 * trust the file; ours have three short keys, so 64 KiB leaves room for any padding. */
#define NPY_MAX_HEADER ((size_t)1 << 16)

static void set_err(char *err, size_t errlen, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

static void set_err(char *err, size_t errlen, const char *fmt, ...)
{
    if (!err || errlen == 0)
        return;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(err, errlen, fmt, ap);
    va_end(ap);
}

static int host_is_little(void)
{
    const uint16_t one = 1;
    unsigned char b;
    memcpy(&b, &one, 1);
    return b == 1;
}

/* ---- types ------------------------------------------------------------------------------ */

typedef struct type_info {
    const char *code; /* descr without the byte-order character */
    smattn_npy_type type;
    size_t size;
    const char *name;
} type_info;

static const type_info npy_types[] = {
    {"f8", SMATTN_NPY_F64, 8, "f64"},   {"f4", SMATTN_NPY_F32, 4, "f32"},
    {"f2", SMATTN_NPY_F16, 2, "f16"},   {"u2", SMATTN_NPY_U16, 2, "u16"},
    {"V2", SMATTN_NPY_BF16, 2, "bf16"}, {"b1", SMATTN_NPY_BOOL, 1, "bool"},
    {"u1", SMATTN_NPY_U8, 1, "u8"},     {"i4", SMATTN_NPY_I32, 4, "i32"},
    {"i8", SMATTN_NPY_I64, 8, "i64"},
};
#define NPY_NTYPES (sizeof npy_types / sizeof npy_types[0])

static const type_info *type_lookup(smattn_npy_type t)
{
    for (size_t k = 0; k < NPY_NTYPES; k++)
        if (npy_types[k].type == t)
            return &npy_types[k];
    return NULL;
}

size_t smattn_npy_type_size(smattn_npy_type t)
{
    const type_info *ti = type_lookup(t);
    return ti ? ti->size : 0;
}

const char *smattn_npy_type_name(smattn_npy_type t)
{
    const type_info *ti = type_lookup(t);
    return ti ? ti->name : "unknown";
}

smattn_npy_type smattn_npy_type_of(smattn_dtype t)
{
    switch (t) {
    case SMATTN_F64: return SMATTN_NPY_F64;
    case SMATTN_F32: return SMATTN_NPY_F32;
    case SMATTN_F16: return SMATTN_NPY_F16;
    case SMATTN_BF16: return SMATTN_NPY_U16;
    case SMATTN_BOOL: return SMATTN_NPY_BOOL;
    case SMATTN_F8E4M3:
    case SMATTN_F8E5M2: /* bit patterns */
    case SMATTN_Q8_0:
    case SMATTN_Q4_0: /* raw blocks */
        return SMATTN_NPY_U8;
    }
    return SMATTN_NPY_U8;
}

/* Whether the stored bytes must be reversed to reach host order. 'V2' (bfloat16) has no
 * byte order of its own in numpy; its bits are little-endian as np.save writes them on
 * every machine this targets. */
static int npy_needs_swap(const smattn_npy *a)
{
    if (a->itemsize < 2)
        return 0;
    char bo = a->descr[0];
    if (bo == '=')
        return 0;
    int file_little = bo != '>';
    return file_little != host_is_little();
}

/* ---- header dict parsing ---------------------------------------------------------------- */

typedef struct cursor {
    const char *p, *end;
} cursor;

static void skip_ws(cursor *c)
{
    while (c->p < c->end && (*c->p == ' ' || *c->p == '\t' || *c->p == '\n' || *c->p == '\r'))
        c->p++;
}

/* Describe the next byte for a message: a printable character or its hex code. */
static const char *describe_next(const cursor *c, char buf[16])
{
    if (c->p >= c->end)
        return "end of header";
    unsigned char ch = (unsigned char)*c->p;
    if (ch >= 0x21 && ch < 0x7f)
        snprintf(buf, 16, "'%c'", ch);
    else
        snprintf(buf, 16, "byte 0x%02x", ch);
    return buf;
}

static int expect_char(cursor *c, char want, const char *where, char *err, size_t errlen)
{
    skip_ws(c);
    if (c->p < c->end && *c->p == want) {
        c->p++;
        return 0;
    }
    char b[16];
    set_err(err, errlen, "header: expected '%c' %s, found %s", want, where, describe_next(c, b));
    return -1;
}

/* A Python string literal in single or double quotes, without escapes (none of the
 * header's strings needs one). At most cap-1 characters. */
static int parse_string(cursor *c, char *out, size_t cap, char *err, size_t errlen)
{
    skip_ws(c);
    char b[16];
    if (c->p >= c->end || (*c->p != '\'' && *c->p != '"')) {
        set_err(err, errlen, "header: expected a quoted string, found %s", describe_next(c, b));
        return -1;
    }
    char q = *c->p++;
    size_t n = 0;
    while (c->p < c->end && *c->p != q) {
        unsigned char ch = (unsigned char)*c->p;
        if (ch < 0x20 || ch >= 0x7f || ch == '\\') {
            set_err(err, errlen, "header: unexpected %s inside a string", describe_next(c, b));
            return -1;
        }
        if (n + 1 >= cap) {
            set_err(err, errlen, "header: string too long (over %zu characters)", cap - 1);
            return -1;
        }
        out[n++] = (char)ch;
        c->p++;
    }
    if (c->p >= c->end) {
        set_err(err, errlen, "header: unterminated string");
        return -1;
    }
    c->p++;
    out[n] = '\0';
    return 0;
}

static int match_word(cursor *c, const char *w)
{
    size_t n = strlen(w);
    if ((size_t)(c->end - c->p) < n || memcmp(c->p, w, n) != 0)
        return 0;
    /* The word must end there: "Truest" is not True. */
    if ((size_t)(c->end - c->p) > n) {
        char nx = c->p[n];
        if ((nx >= 'a' && nx <= 'z') || (nx >= 'A' && nx <= 'Z') || (nx >= '0' && nx <= '9') ||
            nx == '_')
            return 0;
    }
    c->p += n;
    return 1;
}

static int parse_bool(cursor *c, int *v, char *err, size_t errlen)
{
    skip_ws(c);
    if (match_word(c, "True"))
        *v = 1;
    else if (match_word(c, "False"))
        *v = 0;
    else {
        char b[16];
        set_err(err, errlen, "header: fortran_order must be True or False, found %s",
                describe_next(c, b));
        return -1;
    }
    return 0;
}

/* A non-negative decimal integer, optionally with Python 2's 'L' suffix; <= INT64_MAX. */
static int parse_dim(cursor *c, int k, int64_t *v, char *err, size_t errlen)
{
    skip_ws(c);
    char b[16];
    if (c->p < c->end && *c->p == '-') {
        set_err(err, errlen, "header: shape dimension %d is negative", k);
        return -1;
    }
    if (c->p >= c->end || *c->p < '0' || *c->p > '9') {
        set_err(err, errlen, "header: shape dimension %d: expected an integer, found %s", k,
                describe_next(c, b));
        return -1;
    }
    int64_t x = 0;
    while (c->p < c->end && *c->p >= '0' && *c->p <= '9') {
        int d = *c->p - '0';
        if (x > (INT64_MAX - d) / 10) {
            set_err(err, errlen, "header: shape dimension %d is too large", k);
            return -1;
        }
        x = x * 10 + d;
        c->p++;
    }
    if (c->p < c->end && *c->p == 'L')
        c->p++;
    *v = x;
    return 0;
}

/* A Python tuple of at most SMATTN_NPY_MAX_RANK integers: (), (3,), (3, 4), (3, 4, ). */
static int parse_shape(cursor *c, smattn_npy *a, char *err, size_t errlen)
{
    if (expect_char(c, '(', "to open the shape tuple", err, errlen))
        return -1;
    int rank = 0;
    int commas = 0;
    for (;;) {
        skip_ws(c);
        if (c->p < c->end && *c->p == ')') {
            c->p++;
            break;
        }
        if (rank > commas) {
            char b[16];
            set_err(err, errlen, "header: expected ',' or ')' in the shape, found %s",
                    describe_next(c, b));
            return -1;
        }
        if (rank == SMATTN_NPY_MAX_RANK) {
            set_err(err, errlen, "header: shape has more than %d dimensions", SMATTN_NPY_MAX_RANK);
            return -1;
        }
        if (parse_dim(c, rank, &a->shape[rank], err, errlen))
            return -1;
        rank++;
        skip_ws(c);
        if (c->p < c->end && *c->p == ',') {
            c->p++;
            commas++;
        }
    }
    if (rank == 1 && commas == 0) {
        set_err(err, errlen, "header: shape (%lld) is not a tuple (a 1-tuple needs a comma)",
                (long long)a->shape[0]);
        return -1;
    }
    a->rank = rank;
    return 0;
}

static int parse_descr(cursor *c, smattn_npy *a, char *err, size_t errlen)
{
    skip_ws(c);
    if (c->p < c->end && (*c->p == '[' || *c->p == '{')) {
        set_err(err, errlen, "header: structured dtypes are not supported");
        return -1;
    }
    char d[16];
    if (parse_string(c, d, sizeof d, err, errlen))
        return -1;
    const char *bo = strchr("<>|=", d[0]);
    const type_info *ti = NULL;
    if (d[0] && bo)
        for (size_t k = 0; k < NPY_NTYPES; k++)
            if (strcmp(d + 1, npy_types[k].code) == 0)
                ti = &npy_types[k];
    if (!ti) {
        set_err(err, errlen,
                "header: dtype '%s' is not supported (want f8, f4, f2, u2, V2, b1, u1, i4 or i8)", d);
        return -1;
    }
    /* '|' means "no byte order": right for one-byte types and numpy's void bfloat16 only. */
    if (d[0] == '|' && ti->size > 1 && ti->type != SMATTN_NPY_BF16) {
        set_err(err, errlen, "header: dtype '%s' needs a byte order ('<' or '>')", d);
        return -1;
    }
    if (ti->type == SMATTN_NPY_BF16 && d[0] == '>') {
        set_err(err, errlen, "header: dtype '%s': big-endian bfloat16 is not supported", d);
        return -1;
    }
    a->type = ti->type;
    a->itemsize = ti->size;
    memcpy(a->descr, d, 4); /* "<f8" + NUL: all accepted descrs have 3 characters */
    return 0;
}

/* The dict: the three keys numpy writes, each exactly once, in any order, with an
 * optional trailing comma; only whitespace may follow the closing brace. */
static int parse_dict(cursor *c, smattn_npy *a, char *err, size_t errlen)
{
    int have_descr = 0, have_fortran = 0, have_shape = 0;
    if (expect_char(c, '{', "at the start of the header", err, errlen))
        return -1;
    for (;;) {
        skip_ws(c);
        if (c->p < c->end && *c->p == '}') {
            c->p++;
            break;
        }
        char key[32];
        if (parse_string(c, key, sizeof key, err, errlen))
            return -1;
        if (expect_char(c, ':', "after a key", err, errlen))
            return -1;
        int *seen;
        int rc;
        if (strcmp(key, "descr") == 0) {
            seen = &have_descr;
            rc = parse_descr(c, a, err, errlen);
        } else if (strcmp(key, "fortran_order") == 0) {
            seen = &have_fortran;
            rc = parse_bool(c, &a->fortran_order, err, errlen);
        } else if (strcmp(key, "shape") == 0) {
            seen = &have_shape;
            rc = parse_shape(c, a, err, errlen);
        } else {
            set_err(err, errlen, "header: unknown key '%s'", key);
            return -1;
        }
        if (*seen) {
            set_err(err, errlen, "header: key '%s' given twice", key);
            return -1;
        }
        if (rc)
            return -1;
        *seen = 1;
        skip_ws(c);
        if (c->p < c->end && *c->p == ',')
            c->p++;
        else if (!(c->p < c->end && *c->p == '}')) {
            char b[16];
            set_err(err, errlen, "header: expected ',' or '}' after key '%s', found %s", key,
                    describe_next(c, b));
            return -1;
        }
    }
    skip_ws(c);
    if (c->p != c->end) {
        char b[16];
        set_err(err, errlen, "header: unexpected %s after the closing '}'", describe_next(c, b));
        return -1;
    }
    const char *missing = !have_descr     ? "descr"
                          : !have_fortran ? "fortran_order"
                          : !have_shape   ? "shape"
                                          : NULL;
    if (missing) {
        set_err(err, errlen, "header: missing key '%s'", missing);
        return -1;
    }
    return 0;
}

/* ---- preamble and sizes ----------------------------------------------------------------- */

/* Magic, version and header length: on success the dict text is b[*hstart, *hend). */
static int parse_preamble(const unsigned char *b, size_t len, smattn_npy *a, size_t *hstart,
                          size_t *hend, char *err, size_t errlen)
{
    if (len == 0) {
        set_err(err, errlen, "empty file (not a .npy file)");
        return -1;
    }
    size_t nm = len < 6 ? len : 6;
    if (memcmp(b, npy_magic, nm) != 0) {
        set_err(err, errlen, "not a .npy file (no \\x93NUMPY magic)");
        return -1;
    }
    if (len < 8) {
        set_err(err, errlen, "truncated .npy file (%zu bytes, no complete preamble)", len);
        return -1;
    }
    int major = b[6], minor = b[7];
    if (major < 1 || major > 3 || minor != 0) {
        set_err(err, errlen, "unsupported .npy format version %d.%d (want 1.0, 2.0 or 3.0)", major,
                minor);
        return -1;
    }
    size_t pre = major == 1 ? 10 : 12;
    if (len < pre) {
        set_err(err, errlen, "truncated .npy file (%zu bytes, no complete preamble)", len);
        return -1;
    }
    size_t hlen = (size_t)b[8] | (size_t)b[9] << 8;
    if (major > 1)
        hlen |= (size_t)b[10] << 16 | (size_t)b[11] << 24;
    if (hlen > NPY_MAX_HEADER) {
        set_err(err, errlen, "header length %zu is implausible (over %zu bytes)", hlen,
                NPY_MAX_HEADER);
        return -1;
    }
    if (hlen > len - pre) {
        set_err(err, errlen, "truncated .npy file: header of %zu bytes, only %zu present", hlen,
                len - pre);
        return -1;
    }
    a->version = major;
    *hstart = pre;
    *hend = pre + hlen;
    return 0;
}

/* Element count, strides and byte size, every product checked. */
static int finish_layout(smattn_npy *a, char *err, size_t errlen)
{
    int64_t count = 1;
    for (int r = 0; r < a->rank; r++) {
        int64_t n = a->shape[r];
        if (n != 0 && count > INT64_MAX / n) {
            set_err(err, errlen, "shape: the element count overflows");
            return -1;
        }
        count *= n;
    }
    if ((uint64_t)count > SIZE_MAX / a->itemsize ||
        (uint64_t)count > (uint64_t)INT64_MAX / a->itemsize) {
        set_err(err, errlen, "shape: the byte size overflows");
        return -1;
    }
    a->count = count;
    /* Strides in elements; they cannot overflow, being partial products of count (or of
     * a product containing a zero, where every element offset is moot). */
    int64_t s = 1;
    for (int k = 0; k < a->rank; k++) {
        int r = a->fortran_order ? k : a->rank - 1 - k;
        a->stride[r] = s;
        if (a->shape[r] != 0 && s <= INT64_MAX / a->shape[r])
            s *= a->shape[r];
    }
    return 0;
}

int smattn_npy_parse_header(const void *buf, size_t len, smattn_npy *a, char *err, size_t errlen)
{
    memset(a, 0, sizeof *a);
    if (!buf && len) {
        set_err(err, errlen, "no data");
        return -1;
    }
    const unsigned char *b = buf;
    size_t hs, he;
    if (parse_preamble(b, len, a, &hs, &he, err, errlen))
        return -1;
    cursor c = {(const char *)b + hs, (const char *)b + he};
    if (parse_dict(&c, a, err, errlen) || finish_layout(a, err, errlen)) {
        memset(a, 0, sizeof *a);
        return -1;
    }
    a->data_offset = he;
    return 0;
}

/* "[2,3,4] of f32" for messages. */
static void describe_array(const smattn_npy *a, char *out, size_t cap)
{
    size_t n = 0;
    n += (size_t)snprintf(out, cap, "[");
    for (int r = 0; r < a->rank && n < cap; r++)
        n += (size_t)snprintf(out + n, cap - n, "%s%lld", r ? "," : "", (long long)a->shape[r]);
    if (n < cap)
        snprintf(out + n, cap - n, "] of %s", smattn_npy_type_name(a->type));
}

static int check_data_size(const smattn_npy *a, size_t have, char *err, size_t errlen)
{
    size_t want = (size_t)a->count * a->itemsize;
    if (have == want)
        return 0;
    char d[128];
    describe_array(a, d, sizeof d);
    set_err(err, errlen, "%s: %zu data bytes, expected %zu for shape %s",
            have < want ? "truncated data" : "trailing bytes after the data", have, want, d);
    return -1;
}

static void swap_elements(unsigned char *p, size_t count, size_t size)
{
    for (size_t e = 0; e < count; e++, p += size)
        for (size_t i = 0; i < size / 2; i++) {
            unsigned char t = p[i];
            p[i] = p[size - 1 - i];
            p[size - 1 - i] = t;
        }
}

/* Allocate the data block (at least one byte, so that data != NULL after success). */
static int alloc_data(smattn_npy *a, char *err, size_t errlen)
{
    size_t bytes = (size_t)a->count * a->itemsize;
    a->data = malloc(bytes ? bytes : 1);
    if (!a->data) {
        set_err(err, errlen, "out of memory for %zu data bytes", bytes);
        return -1;
    }
    return 0;
}

int smattn_npy_parse(const void *buf, size_t len, smattn_npy *a, char *err, size_t errlen)
{
    if (smattn_npy_parse_header(buf, len, a, err, errlen))
        return -1;
    if (check_data_size(a, len - a->data_offset, err, errlen) || alloc_data(a, err, errlen)) {
        memset(a, 0, sizeof *a);
        return -1;
    }
    size_t bytes = (size_t)a->count * a->itemsize;
    if (bytes)
        memcpy(a->data, (const unsigned char *)buf + a->data_offset, bytes);
    if (npy_needs_swap(a))
        swap_elements(a->data, (size_t)a->count, a->itemsize);
    return 0;
}

void smattn_npy_free(smattn_npy *a)
{
    if (!a)
        return;
    free(a->data);
    a->data = NULL;
}

/* ---- reading a file --------------------------------------------------------------------- */

/* Read exactly n bytes (fewer only at end of file). Returns the count, or -1 on error. */
static ssize_t read_full(int fd, void *buf, size_t n)
{
    size_t got = 0;
    while (got < n) {
        ssize_t r = read(fd, (unsigned char *)buf + got, n - got);
        if (r < 0 && errno == EINTR)
            continue;
        if (r < 0)
            return -1;
        if (r == 0)
            break;
        got += (size_t)r;
    }
    return (ssize_t)got;
}

/* Read and parse the header: at most NPY_MAX_HEADER bytes past the preamble are read, so
 * a lying header length costs nothing. */
static int read_header_of(int fd, size_t fsize, smattn_npy *a, char *err, size_t errlen)
{
    size_t want = fsize < NPY_MAX_HEADER + 12 ? fsize : NPY_MAX_HEADER + 12;
    unsigned char *hb = malloc(want ? want : 1);
    if (!hb) {
        set_err(err, errlen, "out of memory");
        return -1;
    }
    ssize_t r = read_full(fd, hb, want);
    int rc = -1;
    if (r != (ssize_t)want)
        set_err(err, errlen, "read error: %s", r < 0 ? strerror(errno) : "file shrank");
    else
        rc = smattn_npy_parse_header(hb, want, a, err, errlen);
    free(hb);
    return rc;
}

/* Open path read-only as a regular file, with its header parsed into *a (data NULL) and
 * the data size checked against the file size. Returns the descriptor, or -1 with err. */
static int open_with_header(const char *path, smattn_npy *a, char *err, size_t errlen)
{
    memset(a, 0, sizeof *a);
    /* O_NONBLOCK: opening a FIFO must not hang; it is then refused as not regular. */
    int fd = open(path, O_RDONLY | O_NONBLOCK);
    if (fd < 0) {
        set_err(err, errlen, "cannot open: %s", strerror(errno));
        return -1;
    }
    struct stat st;
    int rc = -1;
    if (fstat(fd, &st) != 0)
        set_err(err, errlen, "cannot stat: %s", strerror(errno));
    else if (!S_ISREG(st.st_mode))
        set_err(err, errlen, "not a regular file");
    else if (read_header_of(fd, (size_t)st.st_size, a, err, errlen) == 0)
        rc = check_data_size(a, (size_t)st.st_size - a->data_offset, err, errlen);
    if (rc) {
        close(fd);
        memset(a, 0, sizeof *a);
        return -1;
    }
    return fd;
}

int smattn_npy_read_header(const char *path, smattn_npy *a, char *err, size_t errlen)
{
    int fd = open_with_header(path, a, err, errlen);
    if (fd < 0)
        return -1;
    close(fd);
    return 0;
}

int smattn_npy_read(const char *path, smattn_npy *a, char *err, size_t errlen)
{
    int fd = open_with_header(path, a, err, errlen);
    if (fd < 0)
        return -1;
    int rc = -1;
    size_t bytes = (size_t)a->count * a->itemsize;
    if (alloc_data(a, err, errlen) == 0) {
        ssize_t r = -1;
        if (lseek(fd, (off_t)a->data_offset, SEEK_SET) >= 0)
            r = read_full(fd, a->data, bytes);
        if (r == (ssize_t)bytes) {
            if (npy_needs_swap(a))
                swap_elements(a->data, (size_t)a->count, a->itemsize);
            rc = 0;
        } else
            set_err(err, errlen, "read error: %s", r < 0 ? strerror(errno) : "file shrank");
    }
    close(fd);
    if (rc) {
        smattn_npy_free(a);
        memset(a, 0, sizeof *a);
    }
    return rc;
}

int smattn_npy_read_data(const char *path, smattn_npy *a, char *err, size_t errlen)
{
    smattn_npy b;
    if (smattn_npy_read(path, &b, err, errlen))
        return -1;
    if (b.type != a->type || b.rank != a->rank || b.fortran_order != a->fortran_order ||
        memcmp(b.shape, a->shape, sizeof b.shape) != 0 || b.version != a->version) {
        smattn_npy_free(&b);
        set_err(err, errlen, "the file changed while it was being read");
        return -1;
    }
    *a = b;
    return 0;
}

/* ---- writing ---------------------------------------------------------------------------- */

/* The version-1.0 header for a C-order little-endian array; returns its length or 0. */
static size_t encode_header(const type_info *ti, int rank, const int64_t *shape, unsigned char *out,
                            size_t cap)
{
    char dims[128] = "";
    size_t n = 0;
    for (int r = 0; r < rank; r++)
        n += (size_t)snprintf(dims + n, sizeof dims - n, "%s%lld", r ? ", " : "",
                              (long long)shape[r]);
    if (rank == 1)
        snprintf(dims + n, sizeof dims - n, ",");
    char dict[256];
    int len = snprintf(dict, sizeof dict,
                       "{'descr': '%c%s', 'fortran_order': False, "
                       "'shape': (%s), }",
                       ti->size > 1 ? '<' : '|', ti->code, dims);
    if (len < 0 || (size_t)len >= sizeof dict)
        return 0;
    size_t total = 10 + (size_t)len + 1;
    total = (total + 63) / 64 * 64;
    if (total > cap)
        return 0;
    size_t hlen = total - 10;
    memcpy(out, npy_magic, 6);
    out[6] = 1;
    out[7] = 0;
    out[8] = (unsigned char)(hlen & 0xff);
    out[9] = (unsigned char)(hlen >> 8);
    memcpy(out + 10, dict, (size_t)len);
    memset(out + 10 + len, ' ', hlen - (size_t)len - 1);
    out[total - 1] = '\n';
    return total;
}

/* Check an array description for writing; returns its byte size via *bytes. */
static const type_info *check_write(smattn_npy_type t, int rank, const int64_t *shape,
                                    size_t *bytes, char *err, size_t errlen)
{
    const type_info *ti = type_lookup(t);
    if (!ti || rank < 0 || rank > SMATTN_NPY_MAX_RANK || (rank > 0 && !shape)) {
        set_err(err, errlen, "npy writer: bad type or rank");
        return NULL;
    }
    uint64_t count = 1;
    for (int r = 0; r < rank; r++) {
        if (shape[r] < 0 || (shape[r] != 0 && count > (uint64_t)INT64_MAX / (uint64_t)shape[r])) {
            set_err(err, errlen, "npy writer: bad or overflowing shape");
            return NULL;
        }
        count *= (uint64_t)shape[r];
    }
    if (count > SIZE_MAX / ti->size) {
        set_err(err, errlen, "npy writer: byte size overflows");
        return NULL;
    }
    *bytes = (size_t)count * ti->size;
    return ti;
}

/* Copy n bytes of elements to little-endian order. */
static void to_little(unsigned char *dst, const unsigned char *src, size_t n, size_t size)
{
    memcpy(dst, src, n);
    if (!host_is_little())
        swap_elements(dst, n / size, size);
}

unsigned char *smattn_npy_encode(smattn_npy_type t, int rank, const int64_t *shape,
                                 const void *data, size_t *len, char *err, size_t errlen)
{
    size_t bytes;
    const type_info *ti = check_write(t, rank, shape, &bytes, err, errlen);
    if (!ti)
        return NULL;
    unsigned char hdr[320];
    size_t hl = encode_header(ti, rank, shape, hdr, sizeof hdr);
    if (!hl || bytes > SIZE_MAX - hl) {
        set_err(err, errlen, "npy writer: header does not fit");
        return NULL;
    }
    unsigned char *buf = malloc(hl + bytes);
    if (!buf) {
        set_err(err, errlen, "out of memory");
        return NULL;
    }
    memcpy(buf, hdr, hl);
    if (bytes)
        to_little(buf + hl, data, bytes, ti->size);
    *len = hl + bytes;
    return buf;
}

int smattn_npy_write(const char *path, smattn_npy_type t, int rank, const int64_t *shape,
                     const void *data, char *err, size_t errlen)
{
    size_t bytes;
    const type_info *ti = check_write(t, rank, shape, &bytes, err, errlen);
    if (!ti)
        return -1;
    unsigned char hdr[320];
    size_t hl = encode_header(ti, rank, shape, hdr, sizeof hdr);
    if (!hl) {
        set_err(err, errlen, "npy writer: header does not fit");
        return -1;
    }
    FILE *f = fopen(path, "wb");
    if (!f) {
        set_err(err, errlen, "cannot create: %s", strerror(errno));
        return -1;
    }
    int ok = fwrite(hdr, 1, hl, f) == hl;
    /* The data go out in chunks through a buffer that puts them in little-endian order. */
    unsigned char chunk[1 << 14];
    const unsigned char *src = data;
    for (size_t done = 0; ok && done < bytes;) {
        size_t n = bytes - done < sizeof chunk ? bytes - done : sizeof chunk;
        to_little(chunk, src + done, n, ti->size);
        ok = fwrite(chunk, 1, n, f) == n;
        done += n;
    }
    if (fclose(f) != 0)
        ok = 0;
    if (!ok) {
        set_err(err, errlen, "write error: %s", strerror(errno));
        remove(path);
        return -1;
    }
    return 0;
}
