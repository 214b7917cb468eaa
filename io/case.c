/* SPDX-License-Identifier: MIT */
/* case.c: case directories: the input arrays, their checks against each other and case.json. */
#include <errno.h>
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "core/internal.h"
#include "io/case.h"
#include "io/util.h"

/* ---- files ----------------------------------------------------------------------------- */

/* 1 if dir/name has a directory entry (a file, a directory, a FIFO, a symbolic link
 * dangling or not), 0 if it has none; -1 (with err) on another error. Absent means no entry
 * at all: an entry that cannot be read as a regular file is an error its reader reports,
 * never an optional input taken as absent (a dangling bias.npy would run the case without
 * its bias). */
static int file_exists(const char *dir, const char *name, char *err, size_t errlen)
{
    char *p = smattn_io_join_path(dir, name);
    if (!p) {
        smattn_io_err(err, errlen, "out of memory");
        return -1;
    }
    struct stat st;
    int rc = lstat(p, &st) == 0 ? 1 : errno == ENOENT ? 0 : -1;
    if (rc < 0) { /* EACCES and the like: the directory cannot be searched */
        char q[SMATTN_IO_PATH_MAX];
        smattn_io_err(err, errlen, "%s: cannot read the case directory (%s: %s)",
                      smattn_io_path(dir, q), name, strerror(errno));
    }
    free(p);
    return rc;
}

/* After a reader failed on dir/name: if it is a symbolic link to nothing, say so in err
 * ("NAME: a dangling symbolic link ..."), the reader's "cannot open: No such file" being
 * no help. */
static void name_dangling(const char *dir, const char *name, char *err, size_t errlen)
{
    char *p = smattn_io_join_path(dir, name);
    struct stat st;
    if (p && lstat(p, &st) == 0 && S_ISLNK(st.st_mode) && stat(p, &st) != 0 && errno == ENOENT)
        smattn_io_err(err, errlen,
                      "%s: a dangling symbolic link (its target does not exist; an input is "
                      "absent only when the case directory has no entry of that name)",
                      name);
    free(p);
}

/* A case.json has ten short keys; anything near this size is not one. */
#define CASE_JSON_MAX ((size_t)16 << 20)

static int load_json(const char *dir, smattn_case_json *cj, char *err, size_t errlen)
{
    smattn_case_json_init(cj);
    int ex = file_exists(dir, "case.json", err, errlen);
    if (ex <= 0)
        return ex;
    char *p = smattn_io_join_path(dir, "case.json");
    size_t len = 0;
    char *text = p ? smattn_io_read_text(p, CASE_JSON_MAX, &len, err, errlen) : NULL;
    if (!p)
        smattn_io_err(err, errlen, "out of memory");
    int unread = !text;
    int rc = text ? smattn_case_json_parse(text, len, cj, err, errlen) : -1;
    free(text);
    free(p);
    if (rc)
        smattn_io_err_prefix(err, errlen, "case.json");
    if (unread)
        name_dangling(dir, "case.json", err, errlen);
    return rc;
}

/* Prefix a file's error with its name; a file that cannot be opened is named with its
 * case directory (permissions are a property of the path, not of the file name). */
static void name_error(const char *dir, const char *name, char *err, size_t errlen)
{
    if (strncmp(err, "cannot open", 11) != 0) {
        smattn_io_err_prefix(err, errlen, name);
        return;
    }
    char *p = smattn_io_join_path(dir, name);
    char q[SMATTN_IO_PATH_MAX];
    if (p)
        smattn_io_err_prefix(err, errlen, smattn_io_path(p, q));
    else
        smattn_io_err_prefix(err, errlen, name);
    free(p);
}

/* The header of dir/name into *a (no data: see read_data); an absent optional file leaves
 * *a zeroed (present() is 0). */
static int load_header(const char *dir, const char *name, int required, smattn_npy *a, char *err,
                       size_t errlen)
{
    memset(a, 0, sizeof *a);
    int ex = file_exists(dir, name, err, errlen);
    if (ex < 0)
        return -1;
    if (!ex) {
        if (required)
            smattn_io_err(err, errlen, "%s: missing (required for this case)", name);
        return required ? -1 : 0;
    }
    const int rc = smattn_io_npy_load(dir, name, 0, a, err, errlen);
    if (rc > 0) {
        name_error(dir, name, err, errlen);
        name_dangling(dir, name, err, errlen);
    }
    return rc ? -1 : 0;
}

/* An input file was given (its header is loaded; its data may not be yet). */
static int present(const smattn_npy *a)
{
    return a->itemsize != 0;
}

static int table_from_npy(smattn_case *c, char *err, size_t errlen);

/* The data of every present array, read only once every header has been checked. */
static int quant_named(const smattn_case_json *j, int n);
static void block_view(smattn_npy *a, smattn_dtype t, int to_logical, int64_t bytes_last);

/* A backward case's page table must name each page at most once among its used entries
 * (SPEC 10.1, 10.4: a shared page's gradient would be a sum over sequences). */
static int shared_page(const smattn_case *c, char *err, size_t errlen)
{
    int64_t at[5];
    const int r = smattn__shared_page(&c->layout, c->prob.B,
                                      c->csr_lens ? c->csr_lens : c->json.kv_lens, at);
    if (r < 0)
        smattn_io_err(err, errlen, "out of memory");
    else if (r > 0)
        smattn_io_err(err, errlen,
                      "%s: sequences %lld and %lld both use page %lld (entries %lld and %lld): "
                      "the backward does not sum a shared page's gradients (SPEC 10.1)",
                      c->csr_lens ? "case.json: \"kv_indices\"" : "block_table.npy",
                      (long long)at[0], (long long)at[2], (long long)at[4], (long long)at[1],
                      (long long)at[3]);
    return r ? -1 : 0;
}

static int read_data(const char *dir, smattn_case *c, char *err, size_t errlen)
{
    static const char *const names[9] = {"q.npy",    "k.npy",     "v.npy",  "x.npy",   "bias.npy",
                                         "mask.npy", "sinks.npy", "do.npy", "dlse.npy"};
    smattn_npy *arr[9] = {&c->q,    &c->k,     &c->v,    &c->x,   &c->bias,
                          &c->mask, &c->sinks, &c->dout, &c->dlse};
    for (int n = 0; n < 9; n++) {
        if (!present(arr[n]))
            continue;
        const int qb = (n == 1 || n == 2) ? quant_named(&c->json, n) : -1;
        const int blocks = (qb == SMATTN_Q8_0 || qb == SMATTN_Q4_0) && c->kv_bytes_last[n - 1];
        if (blocks) /* the file holds bytes: compare its header as stored */
            block_view(arr[n], (smattn_dtype)qb, 0, c->kv_bytes_last[n - 1]);
        const int rc = smattn_io_npy_load(dir, names[n], 1, arr[n], err, errlen);
        if (rc) {
            if (rc > 0)
                name_error(dir, names[n], err, errlen);
            return -1;
        }
        if (blocks)
            block_view(arr[n], (smattn_dtype)qb, 1, c->kv_bytes_last[n - 1]);
    }
    if (present(&c->block_table)) {
        const int rc = smattn_io_npy_load(dir, "block_table.npy", 1, &c->block_table, err, errlen);
        if (rc) {
            if (rc > 0)
                name_error(dir, "block_table.npy", err, errlen);
            return -1;
        }
        if (table_from_npy(c, err, errlen))
            return -1;
    }
    if (c->backward && c->paged && shared_page(c, err, errlen))
        return -1;
    /* Every check has passed: no present array is empty, so each has data now. */
    c->in.q.data = c->q.data;
    c->in.k.data = c->k.data;
    c->in.v.data = c->v.data;
    c->in.x.data = c->x.data;
    c->in.bias.data = c->bias.data;
    c->in.mask.data = c->mask.data;
    if (present(&c->sinks))
        c->in.sinks.data = c->sinks.data;
    c->gin.dout.data = c->dout.data;
    c->gin.dlse.data = c->dlse.data;
    return 0;
}

/* ---- checks ---------------------------------------------------------------------------- */

/* The quantised format case.json names input n (0 q, 1 k, 2 v) in (SPEC 7.1), or -1. */
static int quant_named(const smattn_case_json *j, int n)
{
    const unsigned bit = 1u << n;
    return j->fp8_e4m3 & bit  ? SMATTN_F8E4M3
           : j->fp8_e5m2 & bit ? SMATTN_F8E5M2
           : j->q8_0 & bit     ? SMATTN_Q8_0
           : j->q4_0 & bit     ? SMATTN_Q4_0
                               : -1;
}

/* The dtype of input n (0 q, 1 k, 2 v): a float array, bf16 bits, or a |u1 array named in
 * one of the quantised lists (SPEC 2.9, 7.1). */
static int input_dtype(const smattn_case *c, int n, const smattn_npy *a, const char *file,
                       const char *key, smattn_dtype *t, char *err, size_t errlen)
{
    const smattn_case_json *j = &c->json;
    const unsigned bit = 1u << n;
    int lists = !!(j->bf16 & bit) + !!(j->fp8_e4m3 & bit) + !!(j->fp8_e5m2 & bit) +
                !!(j->q8_0 & bit) + !!(j->q4_0 & bit);
    if (lists > 1) {
        smattn_io_err(err, errlen,
                      "case.json: %s is named in more than one of \"bf16\", \"fp8_e4m3\", "
                      "\"fp8_e5m2\", \"q8_0\", \"q4_0\"",
                      key);
        return -1;
    }
    int qt = quant_named(j, n);
    if (qt < 0)
        return smattn_io_float_dtype(a, file, key, (j->bf16 & bit) != 0, 1, t, err, errlen);
    if (a->type != SMATTN_NPY_U8) {
        smattn_io_err(err, errlen, "case.json: \"%s\" names %s, but %s has dtype '%s' (want '|u1')",
                      smattn_dtype_name((smattn_dtype)qt)[0] == 'f'
                          ? (qt == SMATTN_F8E4M3 ? "fp8_e4m3" : "fp8_e5m2")
                          : smattn_dtype_name((smattn_dtype)qt),
                      key, file, a->descr);
        return -1;
    }
    *t = (smattn_dtype)qt;
    return 0;
}

/* A q8_0 / q4_0 array is |u1 with its blocks along the last dimension (SPEC 7.1): [..., D /
 * 32 * bytes]. Its header is viewed as the logical tensor: last dimension D, strides in
 * elements (to_logical), or back as stored (!to_logical, for re-reading the file). */
static void block_view(smattn_npy *a, smattn_dtype t, int to_logical, int64_t bytes_last)
{
    const int64_t bs = (int64_t)smattn_dtype_size(t), last = a->rank - 1;
    if (!to_logical) {
        a->shape[last] = bytes_last;
        return;
    }
    a->shape[last] = bytes_last / bs * SMATTN_QBLOCK;
    for (int r = 0; r < last; r++)
        a->stride[r] = a->stride[r] / bs * SMATTN_QBLOCK;
    a->stride[last] = 1;
}

static int block_arrays(smattn_case *c, int layout, char *err, size_t errlen)
{
    const smattn_npy *qkv[3] = {&c->q, &c->k, &c->v};
    static const char *const qkv_file[3] = {"q.npy", "k.npy", "v.npy"}, *key[3] = {"q", "k", "v"};
    for (int n = 0; n < 3; n++) { /* before any shape check: a name listed twice, raw bytes
                                     not named */
        smattn_dtype t;
        const smattn_case_json *j = &c->json;
        const unsigned bit = 1u << n;
        if (!!(j->bf16 & bit) + !!(j->fp8_e4m3 & bit) + !!(j->fp8_e5m2 & bit) +
                !!(j->q8_0 & bit) + !!(j->q4_0 & bit) > 1)
            return input_dtype(c, n, qkv[n], qkv_file[n], key[n], &t, err, errlen), -1;
        if (qkv[n]->type == SMATTN_NPY_U8 && quant_named(&c->json, n) < 0 &&
            smattn_io_float_dtype(qkv[n], qkv_file[n], key[n], 0, 1, &t, err, errlen))
            return -1;
    }
    smattn_npy *arr[2] = {&c->k, &c->v};
    static const char *const file[2] = {"k.npy", "v.npy"};
    for (int n = 0; n < 2; n++) {
        int qt = quant_named(&c->json, n + 1);
        if (qt != SMATTN_Q8_0 && qt != SMATTN_Q4_0)
            continue;
        smattn_npy *a = arr[n];
        const char *name = smattn_dtype_name((smattn_dtype)qt);
        const int64_t bs = (int64_t)smattn_dtype_size((smattn_dtype)qt);
        if (layout) {
            smattn_io_err(err, errlen, "%s: %s arrays in a ragged or paged case are not "
                          "supported yet", file[n], name);
            return -1;
        }
        if (a->type != SMATTN_NPY_U8 || a->rank < 1)
            continue; /* input_dtype says why */
        if (a->fortran_order && a->rank > 1) {
            smattn_io_err(err, errlen, "%s: a %s array must be in C order (its blocks run along "
                          "the last dimension)", file[n], name);
            return -1;
        }
        const int64_t last = a->shape[a->rank - 1];
        if (last < 1 || last % bs != 0) {
            smattn_io_err(err, errlen, "%s: a %s array's last dimension holds whole blocks of "
                          "%lld bytes; %lld is not a multiple of %lld", file[n], name,
                          (long long)bs, (long long)last, (long long)bs);
            return -1;
        }
        c->kv_bytes_last[n] = last;
        block_view(a, (smattn_dtype)qt, 1, last);
    }
    return 0;
}

static int nonempty_dims(const smattn_npy *a, const char *file, char *err, size_t errlen)
{
    for (int r = 0; r < a->rank; r++)
        if (a->shape[r] < 1) {
            char s[128];
            smattn_io_shape_str(a, s, sizeof s);
            smattn_io_err(err, errlen, "%s: shape %s has an empty dimension (each must be >= 1)",
                          file, s);
            return -1;
        }
    return 0;
}

/* One dimension of a checked against an expected extent set by another file. */
static int same_dim(const smattn_npy *a, const char *file, int r, int64_t want, const char *what,
                    char *err, size_t errlen)
{
    if (a->shape[r] == want)
        return 0;
    char s[128];
    smattn_io_shape_str(a, s, sizeof s);
    smattn_io_err(err, errlen, "%s: shape %s does not match %s %lld", file, s, what,
                  (long long)want);
    return -1;
}

static int rank_3_or_4(const smattn_npy *a, const char *file, const char *layout, char *err,
                       size_t errlen)
{
    if (a->rank == 3 || a->rank == 4)
        return 0;
    char s[128];
    smattn_io_shape_str(a, s, sizeof s);
    smattn_io_err(err, errlen, "%s: shape %s has rank %d; want %s", file, s, a->rank, layout);
    return -1;
}

/* Tensor strides for a 3-D (B = 1) or 4-D array. */
static void strides_34(const smattn_npy *a, int64_t st[4])
{
    int off = 4 - a->rank;
    st[0] = 0;
    for (int r = 0; r < a->rank; r++)
        st[off + r] = a->stride[r];
}

static int check_attention(smattn_case *c, char *err, size_t errlen)
{
    const smattn_npy *q = &c->q, *k = &c->k, *v = &c->v;
    if (rank_3_or_4(q, "q.npy", "[B,S,Hq,D] or [S,Hq,D]", err, errlen) ||
        nonempty_dims(q, "q.npy", err, errlen))
        return -1;
    const smattn_npy *kv[2] = {k, v};
    const char *kvn[2] = {"k.npy", "v.npy"};
    for (int n = 0; n < 2; n++) {
        if (kv[n]->rank != q->rank) {
            char s[128];
            smattn_io_shape_str(kv[n], s, sizeof s);
            smattn_io_err(err, errlen,
                          "%s: shape %s is %d-D but q.npy is %d-D (q, k, v must all be "
                          "3-D or all 4-D)",
                          kvn[n], s, kv[n]->rank, q->rank);
            return -1;
        }
        if (nonempty_dims(kv[n], kvn[n], err, errlen))
            return -1;
    }
    const int o = q->rank - 3; /* index of the first non-batch dim */
    smattn_problem *p = &c->prob;
    p->op = SMATTN_OP_ATTENTION;
    p->B = o ? q->shape[0] : 1;
    p->S = q->shape[o];
    p->Hq = q->shape[o + 1];
    p->D = q->shape[o + 2];
    if ((o && same_dim(k, "k.npy", 0, p->B, "q.npy's batch size B =", err, errlen)) ||
        same_dim(k, "k.npy", o + 2, p->D, "q.npy's head dim", err, errlen))
        return -1;
    p->T = k->shape[o];
    p->Hkv = k->shape[o + 1];
    if ((o && same_dim(v, "v.npy", 0, p->B, "q.npy's batch size B =", err, errlen)) ||
        same_dim(v, "v.npy", o, p->T, "k.npy's key count T =", err, errlen) ||
        same_dim(v, "v.npy", o + 1, p->Hkv, "k.npy's KV head count Hkv =", err, errlen))
        return -1;
    p->Dv = v->shape[o + 2];
    if (p->Hq % p->Hkv != 0) {
        smattn_io_err(err, errlen, "k.npy: Hq (%lld) is not a multiple of Hkv (%lld)",
                      (long long)p->Hq, (long long)p->Hkv);
        return -1;
    }
    c->rank = q->rank;
    const unsigned bits[3] = {SMATTN_CASE_Q, SMATTN_CASE_K, SMATTN_CASE_V};
    const smattn_npy *arr[3] = {q, k, v};
    const char *names[3] = {"q.npy", "k.npy", "v.npy"}, *keys[3] = {"q", "k", "v"};
    smattn_tensor *ten[3] = {&c->in.q, &c->in.k, &c->in.v};
    for (int n = 0; n < 3; n++) {
        if (input_dtype(c, n, arr[n], names[n], keys[n], &ten[n]->dtype, err, errlen))
            return -1;
        strides_34(arr[n], ten[n]->stride);
    }
    (void)bits;
    return 0;
}

/* ---- layouts (SPEC 2.7, 7.1) ----------------------------------------------------------- */

/* Whether case.json or the directory describes a ragged or paged layout. */
static int json_has_layout(const smattn_case_json *j)
{
    return j->cu_seqlens_q || j->cu_seqlens_k || j->seqused_k || j->kv_indptr || j->kv_indices ||
           j->kv_last_page_len || j->has_kv_layout;
}

/* A cu_seqlens list: B + 1 entries, 0 first, never decreasing, its last the packed row
 * count of file; the longest sequence in *maxlen. */
static int check_cu(const int64_t *cu, size_t n, const char *key, int64_t B, const char *bsrc,
                    int64_t total, const char *file, int64_t *maxlen, char *err, size_t errlen)
{
    if ((uint64_t)n != (uint64_t)B + 1) {
        smattn_io_err(err, errlen,
                      "case.json: \"%s\" has %zu entries, want B + 1 = %lld (B from %s)", key, n,
                      (long long)B + 1, bsrc);
        return -1;
    }
    if (cu[0] != 0) {
        smattn_io_err(err, errlen, "case.json: \"%s\"[0] = %lld, want 0", key, (long long)cu[0]);
        return -1;
    }
    *maxlen = 0;
    for (size_t b = 0; b + 1 < n; b++) {
        if (cu[b + 1] < cu[b]) {
            smattn_io_err(err, errlen,
                          "case.json: \"%s\"[%zu] = %lld is less than \"%s\"[%zu] = %lld "
                          "(sequence %zu would have a negative length)",
                          key, b + 1, (long long)cu[b + 1], key, b, (long long)cu[b], b);
            return -1;
        }
        if (cu[b + 1] - cu[b] > *maxlen)
            *maxlen = cu[b + 1] - cu[b];
    }
    if (cu[n - 1] != total) {
        smattn_io_err(err, errlen,
                      "case.json: \"%s\"[%zu] = %lld, want %s's row count %lld (the last entry "
                      "is the number of packed rows)",
                      key, n - 1, (long long)cu[n - 1], file, (long long)total);
        return -1;
    }
    return 0;
}

/* The two keys (or key and file) a and b exclude each other. */
static int exclusive(int has_a, int has_b, const char *a, const char *b, const char *why, char *err,
                     size_t errlen)
{
    if (!has_a || !has_b)
        return 0;
    smattn_io_err(err, errlen, "case.json: %s and %s cannot both be given (%s)", a, b, why);
    return -1;
}

/* The combinations of layout keys and files that mean something (SPEC 7.1). */
static int check_layout_keys(const smattn_case *c, char *err, size_t errlen)
{
    const smattn_case_json *j = &c->json;
    int bt = present(&c->block_table), csr = j->kv_indptr || j->kv_indices || j->kv_last_page_len;
    if (exclusive(j->cu_seqlens_q != NULL, j->q_lens != NULL, "\"cu_seqlens_q\"", "\"q_lens\"",
                  "a packed sequence's length is its slice", err, errlen) ||
        exclusive(j->cu_seqlens_k != NULL, bt, "\"cu_seqlens_k\"", "block_table.npy",
                  "keys are packed or paged, not both", err, errlen) ||
        exclusive(j->cu_seqlens_k != NULL, csr, "\"cu_seqlens_k\"", "\"kv_indptr\"",
                  "keys are packed or paged, not both", err, errlen) ||
        exclusive(j->cu_seqlens_k != NULL, j->kv_lens != NULL, "\"cu_seqlens_k\"", "\"kv_lens\"",
                  "give \"seqused_k\" to use fewer keys than a slice holds", err, errlen) ||
        exclusive(bt, csr, "block_table.npy", "\"kv_indptr\"", "one form of the page table", err,
                  errlen) ||
        exclusive(csr, j->kv_lens != NULL, "\"kv_indptr\"", "\"kv_lens\"",
                  "the lengths follow from \"kv_indptr\" and \"kv_last_page_len\"", err, errlen))
        return -1;
    if (csr && !(j->kv_indptr && j->kv_indices && j->kv_last_page_len)) {
        smattn_io_err(err, errlen,
                      "case.json: \"%s\" is missing (\"kv_indptr\", \"kv_indices\" and "
                      "\"kv_last_page_len\" come together)",
                      !j->kv_indptr    ? "kv_indptr"
                      : !j->kv_indices ? "kv_indices"
                                       : "kv_last_page_len");
        return -1;
    }
    if (j->seqused_k && !j->cu_seqlens_k) {
        smattn_io_err(err, errlen, "case.json: \"seqused_k\" needs \"cu_seqlens_k\"");
        return -1;
    }
    if (j->has_kv_layout && !bt && !csr) {
        smattn_io_err(err, errlen,
                      "case.json: \"kv_layout\" applies to page caches (block_table.npy or "
                      "\"kv_indptr\")");
        return -1;
    }
    if (j->max_pages && !bt) {
        smattn_io_err(err, errlen,
                      "case.json: \"max_pages\" applies to block_table.npy (the columns of its "
                      "rows a sequence may use)");
        return -1;
    }
    if (bt && !j->kv_lens) {
        smattn_io_err(err, errlen,
                      "case.json: \"kv_lens\" is required with block_table.npy (each "
                      "sequence's key count)");
        return -1;
    }
    return 0;
}

/* B as the first source that gives it states it: "cu_seqlens_q", or q.npy. */
static int64_t layout_batch(const smattn_case *c, const char **src)
{
    if (c->packed_q) {
        *src = "\"cu_seqlens_q\"";
        return (int64_t)c->json.n_cu_seqlens_q - 1;
    }
    *src = c->q.rank == 4 ? "q.npy" : "q.npy (3-D: B = 1)";
    return c->q.rank == 4 ? c->q.shape[0] : 1;
}

/* max_pages * page_size, saturated. */
static int64_t page_capacity(int64_t max_pages, int64_t page_size)
{
    return max_pages > 0 && page_size > INT64_MAX / max_pages ? INT64_MAX : max_pages * page_size;
}

/* The FlashInfer form: kv_indptr [B+1], kv_indices, kv_last_page_len [B] into a block
 * table and kv_lens (kv_len_b = (pages_b - 1) * page_size + last_b; no page: 0). */
static int table_from_csr(smattn_case *c, const char *bsrc, char *err, size_t errlen)
{
    const smattn_case_json *j = &c->json;
    const int64_t B = c->prob.B, ps = c->layout.page_size, np = c->layout.num_pages;
    int64_t maxp = 0;
    if (check_cu(j->kv_indptr, j->n_kv_indptr, "kv_indptr", B, bsrc, (int64_t)j->n_kv_indices,
                 "\"kv_indices\"", &maxp, err, errlen))
        return -1;
    if ((uint64_t)j->n_kv_last_page_len != (uint64_t)B) {
        smattn_io_err(err, errlen,
                      "case.json: \"kv_last_page_len\" has %zu entries, want B = %lld (B from %s)",
                      j->n_kv_last_page_len, (long long)B, bsrc);
        return -1;
    }
    for (size_t e = 0; e < j->n_kv_indices; e++)
        if (j->kv_indices[e] < 0 || j->kv_indices[e] >= np || j->kv_indices[e] > INT32_MAX) {
            smattn_io_err(err, errlen,
                          "case.json: \"kv_indices\"[%zu] = %lld is outside [0, num_pages) = "
                          "[0, %lld) (num_pages from k.npy)",
                          e, (long long)j->kv_indices[e], (long long)np);
            return -1;
        }
    const int64_t cols = maxp > 0 ? maxp : 1;
    c->table = malloc((size_t)B * (size_t)cols * sizeof *c->table);
    c->csr_lens = malloc((size_t)B * sizeof *c->csr_lens);
    if (!c->table || !c->csr_lens) {
        smattn_io_err(err, errlen, "out of memory");
        return -1;
    }
    for (int64_t b = 0; b < B; b++) {
        int64_t pages = j->kv_indptr[b + 1] - j->kv_indptr[b], last = j->kv_last_page_len[b];
        if (pages == 0 ? last != 0 : last < 1 || last > ps) {
            smattn_io_err(err, errlen,
                          "case.json: \"kv_last_page_len\"[%lld] = %lld, want %s (sequence %lld "
                          "has %lld pages)",
                          (long long)b, (long long)last, pages == 0 ? "0" : "1..page_size",
                          (long long)b, (long long)pages);
            return -1;
        }
        if (pages > 0 && pages - 1 > (INT64_MAX - last) / ps) {
            smattn_io_err(err, errlen,
                          "case.json: sequence %lld's key count (%lld pages of %lld) does not fit "
                          "in int64",
                          (long long)b, (long long)pages, (long long)ps);
            return -1;
        }
        c->csr_lens[b] = pages ? (pages - 1) * ps + last : 0;
        for (int64_t p = 0; p < cols; p++)
            c->table[b * cols + p] = p < pages ? (int32_t)j->kv_indices[j->kv_indptr[b] + p] : -1;
    }
    c->layout.max_pages = c->layout.bt_stride = cols;
    c->layout.block_table = c->table;
    return 0;
}

/* block_table.npy, read: every entry fits in int32, the pages each sequence uses lie in
 * [0, num_pages); copied into c->table in C order. */
static int table_from_npy(smattn_case *c, char *err, size_t errlen)
{
    const smattn_npy *a = &c->block_table;
    const int64_t B = a->shape[0], cols = a->shape[1], ps = c->layout.page_size;
    c->table = malloc((size_t)B * (size_t)cols * sizeof *c->table);
    if (!c->table) {
        smattn_io_err(err, errlen, "out of memory");
        return -1;
    }
    for (int64_t b = 0; b < B; b++) {
        const int64_t used = c->prob.kv_lens[b] / ps + (c->prob.kv_lens[b] % ps != 0);
        for (int64_t p = 0; p < cols; p++) {
            int64_t off = b * a->stride[0] + p * a->stride[1], v;
            if (a->type == SMATTN_NPY_I32) {
                int32_t w;
                memcpy(&w, (const char *)a->data + off * 4, 4);
                v = w;
            } else {
                memcpy(&v, (const char *)a->data + off * 8, 8);
                if (v < INT32_MIN || v > INT32_MAX) {
                    smattn_io_err(err, errlen,
                                  "block_table.npy: entry [%lld][%lld] = %lld does not fit in "
                                  "int32",
                                  (long long)b, (long long)p, (long long)v);
                    return -1;
                }
            }
            if (p < used && (v < 0 || v >= c->layout.num_pages)) {
                smattn_io_err(err, errlen,
                              "block_table.npy: entry [%lld][%lld] = %lld is outside [0, "
                              "num_pages) = [0, %lld) (sequence %lld uses %lld pages)",
                              (long long)b, (long long)p, (long long)v,
                              (long long)c->layout.num_pages, (long long)b, (long long)used);
                return -1;
            }
            c->table[b * cols + p] = (int32_t)v;
        }
    }
    c->layout.block_table = c->table;
    return 0;
}

/* The page caches k.npy, v.npy [num_pages,page_size,Hkv,D] (NHD) or [num_pages,Hkv,
 * page_size,D] (HND): the geometry into c->layout, the strides as the tensor [pages,
 * slots, Hkv, D] wants them. */
static int check_pages(smattn_case *c, char *err, size_t errlen)
{
    const int hnd = c->json.kv_hnd, ds = hnd ? 2 : 1, dh = hnd ? 1 : 2;
    const char *want = hnd ? "[num_pages,Hkv,page_size,D] (kv_layout HND)"
                           : "[num_pages,page_size,Hkv,D] (kv_layout NHD)";
    const smattn_npy *kv[2] = {&c->k, &c->v};
    const char *kvn[2] = {"k.npy", "v.npy"};
    for (int n = 0; n < 2; n++)
        if (kv[n]->rank != 4) {
            char s[128];
            smattn_io_shape_str(kv[n], s, sizeof s);
            smattn_io_err(err, errlen, "%s: shape %s has rank %d; a page cache is %s", kvn[n], s,
                          kv[n]->rank, want);
            return -1;
        } else if (nonempty_dims(kv[n], kvn[n], err, errlen))
            return -1;
    smattn_problem *p = &c->prob;
    c->layout.num_pages = c->k.shape[0];
    c->layout.page_size = c->k.shape[ds];
    p->Hkv = c->k.shape[dh];
    if (same_dim(&c->k, "k.npy", 3, p->D, "q.npy's head dim", err, errlen) ||
        same_dim(&c->v, "v.npy", 0, c->layout.num_pages, "k.npy's num_pages", err, errlen) ||
        same_dim(&c->v, "v.npy", ds, c->layout.page_size, "k.npy's page_size", err, errlen) ||
        same_dim(&c->v, "v.npy", dh, p->Hkv, "k.npy's KV head count Hkv =", err, errlen))
        return -1;
    p->Dv = c->v.shape[3];
    smattn_tensor *t[2] = {&c->in.k, &c->in.v};
    for (int n = 0; n < 2; n++) {
        t[n]->stride[0] = kv[n]->stride[0];
        t[n]->stride[1] = kv[n]->stride[ds];
        t[n]->stride[2] = kv[n]->stride[dh];
        t[n]->stride[3] = kv[n]->stride[3];
    }
    return 0;
}

/* block_table.npy's header: [B, max_pages] of i4 or i8. */
static int check_table_header(smattn_case *c, const char *bsrc, char *err, size_t errlen)
{
    const smattn_npy *a = &c->block_table;
    if (a->type != SMATTN_NPY_I32 && a->type != SMATTN_NPY_I64) {
        smattn_io_err(err, errlen,
                      "block_table.npy: dtype '%s' is not an integer type (want '<i4' or '<i8')",
                      a->descr);
        return -1;
    }
    if (a->rank != 2) {
        char s[128];
        smattn_io_shape_str(a, s, sizeof s);
        smattn_io_err(err, errlen, "block_table.npy: shape %s has rank %d; want [B,max_pages]", s,
                      a->rank);
        return -1;
    }
    if (nonempty_dims(a, "block_table.npy", err, errlen))
        return -1;
    if (a->shape[0] != c->prob.B) {
        smattn_io_err(err, errlen, "block_table.npy: %lld rows, want B = %lld (B from %s)",
                      (long long)a->shape[0], (long long)c->prob.B, bsrc);
        return -1;
    }
    /* "max_pages" reads the first columns of each row: the rest is the row stride's */
    if (c->json.max_pages > a->shape[1]) {
        smattn_io_err(err, errlen,
                      "case.json: \"max_pages\" = %lld is more than block_table.npy's %lld "
                      "columns (its row stride)",
                      (long long)c->json.max_pages, (long long)a->shape[1]);
        return -1;
    }
    c->layout.bt_stride = a->shape[1];
    c->layout.max_pages = c->json.max_pages ? c->json.max_pages : a->shape[1];
    const int64_t cap = page_capacity(c->layout.max_pages, c->layout.page_size);
    const int64_t *kl = c->json.kv_lens;
    if ((uint64_t)c->json.n_kv_lens != (uint64_t)c->prob.B) {
        smattn_io_err(err, errlen, "case.json: \"kv_lens\" has %zu entries, want B = %lld",
                      c->json.n_kv_lens, (long long)c->prob.B);
        return -1;
    }
    for (int64_t b = 0; b < c->prob.B; b++)
        if (kl[b] < 0 || kl[b] > cap) {
            smattn_io_err(err, errlen,
                          "case.json: \"kv_lens\"[%lld] = %lld is outside [0, max_pages * "
                          "page_size] = [0, %lld] (block_table.npy's capacity)",
                          (long long)b, (long long)kl[b], (long long)cap);
            return -1;
        }
    return 0;
}

/* An attention case with a layout: B, S, T, the heads and the tensors' strides from
 * case.json's layout keys, block_table.npy and the q/k/v headers. */
static int check_layout(smattn_case *c, char *err, size_t errlen)
{
    smattn_case_json *j = &c->json;
    smattn_problem *p = &c->prob;
    const smattn_npy *q = &c->q, *k = &c->k, *v = &c->v;
    if (check_layout_keys(c, err, errlen))
        return -1;
    c->has_layout = 1;
    c->packed_q = j->cu_seqlens_q != NULL;
    c->packed_k = j->cu_seqlens_k != NULL;
    c->paged = present(&c->block_table) || j->kv_indptr;
    p->op = SMATTN_OP_ATTENTION;
    if (c->packed_q && j->n_cu_seqlens_q < 2) {
        smattn_io_err(err, errlen, "case.json: \"cu_seqlens_q\" has %zu entries; want B + 1 >= 2",
                      j->n_cu_seqlens_q);
        return -1;
    }
    if (c->packed_q ? q->rank != 3 : q->rank != 3 && q->rank != 4) {
        char s[128];
        smattn_io_shape_str(q, s, sizeof s);
        smattn_io_err(err, errlen, "q.npy: shape %s has rank %d; want %s", s, q->rank,
                      c->packed_q ? "[total_q,Hq,D] with \"cu_seqlens_q\""
                                  : "[B,S,Hq,D] or [S,Hq,D]");
        return -1;
    }
    if (nonempty_dims(q, "q.npy", err, errlen))
        return -1;
    const char *bsrc;
    p->B = layout_batch(c, &bsrc);
    const int oq = q->rank - 3;
    p->Hq = q->shape[oq + 1];
    p->D = q->shape[oq + 2];
    int64_t maxq = 0;
    if (c->packed_q) {
        c->total_q = q->shape[0];
        if (check_cu(j->cu_seqlens_q, j->n_cu_seqlens_q, "cu_seqlens_q", p->B, bsrc, c->total_q,
                     "q.npy", &maxq, err, errlen))
            return -1;
        p->S = maxq > 0 ? maxq : 1;
    } else
        p->S = q->shape[oq];
    /* keys: packed, paged or dense */
    if (c->packed_k) {
        const smattn_npy *kv[2] = {k, v};
        const char *kvn[2] = {"k.npy", "v.npy"};
        for (int n = 0; n < 2; n++)
            if (kv[n]->rank != 3) {
                char s[128];
                smattn_io_shape_str(kv[n], s, sizeof s);
                smattn_io_err(err, errlen,
                              "%s: shape %s has rank %d; with \"cu_seqlens_k\" want "
                              "[total_k,Hkv,%s]",
                              kvn[n], s, kv[n]->rank, n ? "Dv" : "D");
                return -1;
            } else if (nonempty_dims(kv[n], kvn[n], err, errlen))
                return -1;
        c->total_k = k->shape[0];
        p->Hkv = k->shape[1];
        if (same_dim(k, "k.npy", 2, p->D, "q.npy's head dim", err, errlen) ||
            same_dim(v, "v.npy", 0, c->total_k, "k.npy's total_k", err, errlen) ||
            same_dim(v, "v.npy", 1, p->Hkv, "k.npy's KV head count Hkv =", err, errlen))
            return -1;
        p->Dv = v->shape[2];
        int64_t maxk = 0;
        if (check_cu(j->cu_seqlens_k, j->n_cu_seqlens_k, "cu_seqlens_k", p->B, bsrc, c->total_k,
                     "k.npy", &maxk, err, errlen))
            return -1;
        if (j->seqused_k) {
            if ((uint64_t)j->n_seqused_k != (uint64_t)p->B) {
                smattn_io_err(err, errlen,
                              "case.json: \"seqused_k\" has %zu entries, want B = %lld (B from %s)",
                              j->n_seqused_k, (long long)p->B, bsrc);
                return -1;
            }
            maxk = 0;
            for (size_t b = 0; b < j->n_seqused_k; b++) {
                int64_t have = j->cu_seqlens_k[b + 1] - j->cu_seqlens_k[b];
                if (j->seqused_k[b] < 0 || j->seqused_k[b] > have) {
                    smattn_io_err(err, errlen,
                                  "case.json: \"seqused_k\"[%zu] = %lld is outside [0, %lld] "
                                  "(sequence %zu's slice of \"cu_seqlens_k\")",
                                  b, (long long)j->seqused_k[b], (long long)have, b);
                    return -1;
                }
                maxk = j->seqused_k[b] > maxk ? j->seqused_k[b] : maxk;
            }
        }
        p->T = maxk > 0 ? maxk : 1;
        strides_34(k, c->in.k.stride);
        strides_34(v, c->in.v.stride);
    } else if (c->paged) {
        if (check_pages(c, err, errlen))
            return -1;
        int64_t maxk = 0;
        if (j->kv_indptr) {
            if (table_from_csr(c, bsrc, err, errlen))
                return -1;
            for (int64_t b = 0; b < p->B; b++)
                maxk = c->csr_lens[b] > maxk ? c->csr_lens[b] : maxk;
        } else {
            if (check_table_header(c, bsrc, err, errlen))
                return -1;
            for (int64_t b = 0; b < p->B; b++)
                maxk = j->kv_lens[b] > maxk ? j->kv_lens[b] : maxk;
        }
        p->T = maxk > 0 ? maxk : 1;
    } else { /* dense keys beside packed queries */
        const smattn_npy *kv[2] = {k, v};
        const char *kvn[2] = {"k.npy", "v.npy"};
        for (int n = 0; n < 2; n++)
            if (rank_3_or_4(kv[n], kvn[n], "[B,T,Hkv,D] or [T,Hkv,D]", err, errlen) ||
                nonempty_dims(kv[n], kvn[n], err, errlen))
                return -1;
        const int ok = k->rank - 3;
        if (v->rank != k->rank) {
            smattn_io_err(err, errlen, "v.npy: rank %d, but k.npy has rank %d", v->rank, k->rank);
            return -1;
        }
        if (ok ? k->shape[0] != p->B : p->B != 1) {
            smattn_io_err(err, errlen, "k.npy: batch size %lld%s, but B = %lld from %s",
                          (long long)(ok ? k->shape[0] : 1), ok ? "" : " (3-D)", (long long)p->B,
                          bsrc);
            return -1;
        }
        p->T = k->shape[ok];
        p->Hkv = k->shape[ok + 1];
        if (same_dim(k, "k.npy", ok + 2, p->D, "q.npy's head dim", err, errlen) ||
            (ok && same_dim(v, "v.npy", 0, p->B, "k.npy's batch size B =", err, errlen)) ||
            same_dim(v, "v.npy", ok, p->T, "k.npy's key count T =", err, errlen) ||
            same_dim(v, "v.npy", ok + 1, p->Hkv, "k.npy's KV head count Hkv =", err, errlen))
            return -1;
        p->Dv = v->shape[ok + 2];
        strides_34(k, c->in.k.stride);
        strides_34(v, c->in.v.stride);
    }
    if (p->Hq % p->Hkv != 0) {
        smattn_io_err(err, errlen, "k.npy: Hq (%lld) is not a multiple of Hkv (%lld)",
                      (long long)p->Hq, (long long)p->Hkv);
        return -1;
    }
    c->rank = c->packed_q ? 4 : q->rank;
    const unsigned bits[3] = {SMATTN_CASE_Q, SMATTN_CASE_K, SMATTN_CASE_V};
    const smattn_npy *arr[3] = {q, k, v};
    const char *names[3] = {"q.npy", "k.npy", "v.npy"}, *keys[3] = {"q", "k", "v"};
    smattn_tensor *ten[3] = {&c->in.q, &c->in.k, &c->in.v};
    for (int n = 0; n < 3; n++)
        if (input_dtype(c, n, arr[n], names[n], keys[n], &ten[n]->dtype, err, errlen))
            return -1;
    (void)bits;
    strides_34(q, c->in.q.stride);
    c->layout.cu_seqlens_q = j->cu_seqlens_q;
    c->layout.cu_seqlens_k = j->cu_seqlens_k;
    c->layout.seqused_k = j->seqused_k;
    return 0;
}

static int check_softmax(smattn_case *c, char *err, size_t errlen)
{
    const smattn_npy *x = &c->x;
    if (rank_3_or_4(x, "x.npy", "[B,H,S,T] or [H,S,T]", err, errlen) ||
        nonempty_dims(x, "x.npy", err, errlen))
        return -1;
    const int o = x->rank - 3;
    smattn_problem *p = &c->prob;
    p->op = SMATTN_OP_SOFTMAX;
    p->B = o ? x->shape[0] : 1;
    p->Hq = x->shape[o];
    p->S = x->shape[o + 1];
    p->T = x->shape[o + 2];
    p->Hkv = p->D = p->Dv = 1;
    c->rank = x->rank;
    if (smattn_io_float_dtype(x, "x.npy", "x", (c->json.bf16 & SMATTN_CASE_X) != 0, 1,
                              &c->in.x.dtype, err, errlen))
        return -1;
    strides_34(x, c->in.x.stride);
    return 0;
}

/* bias / mask: numpy broadcasting to [B,Hq,S,T], right-aligned; stride 0 where the extent
 * is 1 or the dimension is missing. */
static int check_broadcast(const smattn_case *c, const smattn_npy *a, const char *file,
                           smattn_tensor *t, char *err, size_t errlen)
{
    const smattn_problem *p = &c->prob;
    const int64_t full[4] = {p->B, p->Hq, p->S, p->T};
    const int off = 4 - a->rank;
    memset(t->stride, 0, sizeof t->stride);
    if (a->rank < 1) { /* SPEC 7.1: rank 1-4; a scalar is not a broadcastable array here */
        smattn_io_err(err, errlen,
                      "%s: shape [] has rank 0; want rank 1-4, broadcastable to "
                      "[B,Hq,S,T]",
                      file);
        return -1;
    }
    for (int r = 0; r < a->rank; r++) {
        int64_t n = a->shape[r];
        if (n != 1 && n != full[off + r]) {
            char s[128];
            smattn_io_shape_str(a, s, sizeof s);
            static const char *const dims[4] = {"B", "Hq", "S", "T"};
            char want[64];
            if (full[off + r] == 1)
                snprintf(want, sizeof want, "want 1");
            else
                snprintf(want, sizeof want, "want 1 or %lld", (long long)full[off + r]);
            smattn_io_err(err, errlen,
                          "%s: shape %s does not broadcast to [B,Hq,S,T] = "
                          "[%lld,%lld,%lld,%lld] (its dim %d, aligned with %s, is %lld: %s)",
                          file, s, (long long)full[0], (long long)full[1], (long long)full[2],
                          (long long)full[3], r, dims[off + r], (long long)n, want);
            return -1;
        }
        t->stride[off + r] = n == 1 ? 0 : a->stride[r];
    }
    return 0;
}

static int check_bias_mask(smattn_case *c, char *err, size_t errlen)
{
    if (present(&c->bias)) {
        if (smattn_io_float_dtype(&c->bias, "bias.npy", "bias",
                                  (c->json.bf16 & SMATTN_CASE_BIAS) != 0, 1, &c->in.bias.dtype, err,
                                  errlen) ||
            check_broadcast(c, &c->bias, "bias.npy", &c->in.bias, err, errlen))
            return -1;
    }
    if (present(&c->mask)) {
        if (c->mask.type != SMATTN_NPY_BOOL && c->mask.type != SMATTN_NPY_U8) {
            smattn_io_err(err, errlen,
                          "mask.npy: dtype '%s' is not a mask type (want '|b1' or "
                          "'|u1')",
                          c->mask.descr);
            return -1;
        }
        c->in.mask.dtype = SMATTN_BOOL;
        if (check_broadcast(c, &c->mask, "mask.npy", &c->in.mask, err, errlen))
            return -1;
    }
    return 0;
}

static int check_sinks(smattn_case *c, char *err, size_t errlen)
{
    const int64_t Hq = c->prob.Hq;
    if (present(&c->sinks) && c->json.sinks) {
        smattn_io_err(err, errlen, "sinks.npy: sinks are also given in case.json (give one)");
        return -1;
    }
    if (c->json.sinks) {
        if ((uint64_t)c->json.n_sinks != (uint64_t)Hq) {
            smattn_io_err(err, errlen, "case.json: \"sinks\" has %zu entries, want Hq = %lld",
                          c->json.n_sinks, (long long)Hq);
            return -1;
        }
        c->in.sinks = (smattn_tensor){c->json.sinks, SMATTN_F64, {1, 0, 0, 0}};
    }
    if (present(&c->sinks)) {
        if (c->sinks.rank != 1 || c->sinks.shape[0] != Hq) {
            char s[128];
            smattn_io_shape_str(&c->sinks, s, sizeof s);
            smattn_io_err(err, errlen, "sinks.npy: shape %s, want [Hq] = [%lld]", s, (long long)Hq);
            return -1;
        }
        if (smattn_io_float_dtype(&c->sinks, "sinks.npy", "sinks",
                                  (c->json.bf16 & SMATTN_CASE_SINKS) != 0, 1, &c->in.sinks.dtype,
                                  err, errlen))
            return -1;
        c->in.sinks.stride[0] = c->sinks.stride[0];
    }
    return 0;
}

static int check_lens(const int64_t *lens, size_t n, const char *key, int64_t B, int64_t max,
                      const char *maxname, char *err, size_t errlen)
{
    if (!lens)
        return 0;
    if ((uint64_t)n != (uint64_t)B) {
        smattn_io_err(err, errlen, "case.json: \"%s\" has %zu entries, want B = %lld", key, n,
                      (long long)B);
        return -1;
    }
    for (size_t b = 0; b < n; b++)
        if (lens[b] < 0 || lens[b] > max) {
            smattn_io_err(err, errlen,
                          "case.json: \"%s\"[%zu] = %lld is outside [0, %s] = [0, %lld]", key, b,
                          (long long)lens[b], maxname, (long long)max);
            return -1;
        }
    return 0;
}

/* Every name in "bf16" must be an input this case has (as a .npy file). */
static int check_bf16_names(const smattn_case *c, char *err, size_t errlen)
{
    static const char *const bf16_names[] = {"q", "k", "v", "x", "bias", "sinks", "do", "dlse"};
    const smattn_npy *arr[8] = {&c->q,    &c->k,     &c->v,    &c->x,
                                &c->bias, &c->sinks, &c->dout, &c->dlse};
    for (int n = 0; n < 8; n++)
        if ((c->json.bf16 >> n & 1) && !present(arr[n])) {
            smattn_io_err(err, errlen, "case.json: \"bf16\" names %s, but there is no %s.npy",
                          bf16_names[n], bf16_names[n]);
            return -1;
        }
    return 0;
}

/* do.npy and dlse.npy (SPEC 7.1, 10.1): dO [B,S,Hq,Dv] and dLSE [B,Hq,S], without B when
 * q/k/v are 3-D, or O's and LSE's packed shapes with cu_seqlens_q; float dtypes. Attention
 * cases only. */
static int check_grads(smattn_case *c, char *err, size_t errlen)
{
    const smattn_npy *d = &c->dout, *l = &c->dlse;
    if (!present(d)) {
        if (present(l))
            smattn_io_err(err, errlen, "dlse.npy: needs do.npy (the gradient of O; SPEC 10.1)");
        return present(l) ? -1 : 0;
    }
    if (c->prob.op != SMATTN_OP_ATTENTION) {
        smattn_io_err(err, errlen, "do.npy: a softmax case (x.npy) has no backward (SPEC 10.6)");
        return -1;
    }
    const smattn_problem *p = &c->prob;
    if (c->packed_q) { /* O's and LSE's storage: [total_q,Hq,Dv] and [Hq,total_q] (SPEC 2.7) */
        char s[128];
        if (d->rank != 3 || d->shape[0] != c->total_q || d->shape[1] != p->Hq ||
            d->shape[2] != p->Dv) {
            smattn_io_shape_str(d, s, sizeof s);
            smattn_io_err(err, errlen,
                          "do.npy: shape %s, want [total_q,Hq,Dv] = [%lld,%lld,%lld] (O's)", s,
                          (long long)c->total_q, (long long)p->Hq, (long long)p->Dv);
            return -1;
        }
        if (smattn_io_float_dtype(d, "do.npy", "do", (c->json.bf16 & SMATTN_CASE_DO) != 0, 1,
                                  &c->gin.dout.dtype, err, errlen))
            return -1;
        strides_34(d, c->gin.dout.stride);
        c->backward = 1;
        if (!present(l))
            return 0;
        if (l->rank != 2 || l->shape[0] != p->Hq || l->shape[1] != c->total_q) {
            smattn_io_shape_str(l, s, sizeof s);
            smattn_io_err(err, errlen, "dlse.npy: shape %s, want [Hq,total_q] = [%lld,%lld] "
                                       "(LSE's)",
                          s, (long long)p->Hq, (long long)c->total_q);
            return -1;
        }
        if (smattn_io_float_dtype(l, "dlse.npy", "dlse", (c->json.bf16 & SMATTN_CASE_DLSE) != 0, 1,
                                  &c->gin.dlse.dtype, err, errlen))
            return -1;
        c->gin.dlse.stride[0] = 0;
        c->gin.dlse.stride[1] = l->stride[0];
        c->gin.dlse.stride[2] = l->stride[1];
        return 0;
    }
    const int o = c->rank - 3; /* 1: B first */
    const int64_t want_d[4] = {p->B, p->S, p->Hq, p->Dv}, want_l[3] = {p->B, p->Hq, p->S};
    char s[128];
    if (d->rank != c->rank ||
        memcmp(d->shape, want_d + 1 - o, (size_t)d->rank * sizeof *d->shape) != 0) {
        smattn_io_shape_str(d, s, sizeof s);
        if (o)
            smattn_io_err(err, errlen,
                          "do.npy: shape %s, want [B,S,Hq,Dv] = [%lld,%lld,%lld,%lld] (O's)", s,
                          (long long)p->B, (long long)p->S, (long long)p->Hq, (long long)p->Dv);
        else
            smattn_io_err(err, errlen, "do.npy: shape %s, want [S,Hq,Dv] = [%lld,%lld,%lld] (O's)",
                          s, (long long)p->S, (long long)p->Hq, (long long)p->Dv);
        return -1;
    }
    if (smattn_io_float_dtype(d, "do.npy", "do", (c->json.bf16 & SMATTN_CASE_DO) != 0, 1,
                              &c->gin.dout.dtype, err, errlen))
        return -1;
    strides_34(d, c->gin.dout.stride);
    c->backward = 1;
    if (!present(l))
        return 0;
    if (l->rank != c->rank - 1 ||
        memcmp(l->shape, want_l + 1 - o, (size_t)l->rank * sizeof *l->shape) != 0) {
        smattn_io_shape_str(l, s, sizeof s);
        if (o)
            smattn_io_err(err, errlen,
                          "dlse.npy: shape %s, want [B,Hq,S] = [%lld,%lld,%lld] (LSE's)", s,
                          (long long)p->B, (long long)p->Hq, (long long)p->S);
        else
            smattn_io_err(err, errlen, "dlse.npy: shape %s, want [Hq,S] = [%lld,%lld] (LSE's)", s,
                          (long long)p->Hq, (long long)p->S);
        return -1;
    }
    if (smattn_io_float_dtype(l, "dlse.npy", "dlse", (c->json.bf16 & SMATTN_CASE_DLSE) != 0, 1,
                              &c->gin.dlse.dtype, err, errlen))
        return -1;
    c->gin.dlse.stride[0] = o ? l->stride[0] : 0;
    c->gin.dlse.stride[1] = l->stride[o];
    c->gin.dlse.stride[2] = l->stride[o + 1];
    return 0;
}

static void apply_json(smattn_case *c)
{
    smattn_problem *p = &c->prob;
    const smattn_case_json *j = &c->json;
    p->scale = j->has_scale                   ? j->scale
               : p->op == SMATTN_OP_ATTENTION ? smattn_default_scale(p->D)
                                              : 1.0;
    p->softcap = j->softcap;
    p->causal = j->causal;
    p->window_left = j->window[0];
    p->window_right = j->window[1];
    p->kv_lens = j->kv_lens;
    p->q_lens = j->q_lens;
    p->empty_rows = j->empty_rows;
    p->empty_lse = j->empty_lse;
    p->alibi_mode = j->alibi_mode;
    p->alibi_slopes = j->alibi_mode != SMATTN_ALIBI_NONE ? j->alibi_slopes : NULL;
    p->alibi_slopes_per_batch = j->n_alibi_lists > 0;
}

/* ALiBi's keys against the shapes (SPEC 7.1, 2.8): a mode needs slopes and slopes a mode;
 * Hq slopes, or B lists of Hq; the mask mode needs bias.npy. The slopes' values and the
 * extents are the library's to check (SMATTN_ERR_ALIBI). */
static int check_alibi(const smattn_case *c, char *err, size_t errlen)
{
    const smattn_case_json *j = &c->json;
    const smattn_problem *p = &c->prob;
    if (j->alibi_mode == SMATTN_ALIBI_NONE && !j->alibi_slopes)
        return 0;
    if (p->op != SMATTN_OP_ATTENTION) {
        smattn_io_err(err, errlen, "case.json: \"alibi_mode\" and \"alibi_slopes\" are for "
                      "attention cases (q.npy), not softmax");
        return -1;
    }
    if (j->alibi_mode == SMATTN_ALIBI_NONE || !j->alibi_slopes) {
        smattn_io_err(err, errlen, "case.json: \"%s\" is given without \"%s\"",
                      j->alibi_slopes ? "alibi_slopes" : "alibi_mode",
                      j->alibi_slopes ? "alibi_mode" : "alibi_slopes");
        return -1;
    }
    uint64_t per = j->n_alibi_lists ? j->n_alibi_slopes / j->n_alibi_lists : j->n_alibi_slopes;
    if (j->n_alibi_lists && (uint64_t)j->n_alibi_lists != (uint64_t)p->B) {
        smattn_io_err(err, errlen, "case.json: \"alibi_slopes\" has %zu lists, want B = %lld",
                      j->n_alibi_lists, (long long)p->B);
        return -1;
    }
    if (per != (uint64_t)p->Hq) {
        smattn_io_err(err, errlen, "case.json: \"alibi_slopes\"%s has %llu slopes, want Hq = "
                      "%lld", j->n_alibi_lists ? "[0]" : "", (unsigned long long)per,
                      (long long)p->Hq);
        return -1;
    }
    if (j->alibi_mode == SMATTN_ALIBI_MASK && !present(&c->bias)) {
        smattn_io_err(err, errlen, "case.json: \"alibi_mode\": \"mask\" needs bias.npy (the "
                      "-|distance| values the slope multiplies)");
        return -1;
    }
    return 0;
}

/* case.json's descales (SPEC 2.9, 7.1) into c->descale: B lists of Hkv numbers, or one. */
static int apply_descale(smattn_case *c, char *err, size_t errlen)
{
    static const char *const names[3] = {"q_descale", "k_descale", "v_descale"};
    const smattn_case_json *j = &c->json;
    if (!j->has_descale[0] && !j->has_descale[1] && !j->has_descale[2]) {
        if (j->fp8_e4m3 || j->fp8_e5m2 || j->q8_0 || j->q4_0) {
            if (c->prob.op != SMATTN_OP_ATTENTION) {
                smattn_io_err(err, errlen, "case.json: fp8 and block formats are for q, k and v "
                              "(a softmax case has none)");
                return -1;
            }
        }
        return 0;
    }
    const smattn_problem *p = &c->prob;
    for (int k = 0; k < 3; k++) {
        if (!j->has_descale[k])
            continue;
        if (p->op != SMATTN_OP_ATTENTION) {
            smattn_io_err(err, errlen, "case.json: \"%s\" is for attention cases (q.npy) only",
                          names[k]);
            return -1;
        }
        if (j->descale_arr[k] && (j->descale_n[k][0] != (size_t)p->B ||
                                  j->descale_n[k][1] != (size_t)p->Hkv)) {
            smattn_io_err(err, errlen, "case.json: \"%s\" holds %zu lists of %zu numbers; want "
                          "B = %lld lists of Hkv = %lld", names[k], j->descale_n[k][0],
                          j->descale_n[k][1], (long long)p->B, (long long)p->Hkv);
            return -1;
        }
    }
    c->descale = smattn_descale_default();
    double *num[3] = {&c->descale.q, &c->descale.k, &c->descale.v};
    const double **arr[3] = {&c->descale.q_head, &c->descale.k_head, &c->descale.v_head};
    for (int k = 0; k < 3; k++) {
        if (!j->has_descale[k])
            continue;
        if (j->descale_arr[k])
            *arr[k] = j->descale_arr[k];
        else
            *num[k] = j->descale_num[k];
    }
    c->prob.descale = &c->descale;
    return 0;
}

/* Which op: x.npy for softmax, q.npy for attention, never both. */
static int case_op(const char *dir, smattn_op *op, char *err, size_t errlen)
{
    int hq = file_exists(dir, "q.npy", err, errlen);
    int hx = hq < 0 ? -1 : file_exists(dir, "x.npy", err, errlen);
    if (hq < 0 || hx < 0)
        return -1;
    if (hq && hx) {
        smattn_io_err(err, errlen,
                      "x.npy: a case has q.npy (attention) or x.npy (softmax), not both");
        return -1;
    }
    if (!hq && !hx) {
        char q[SMATTN_IO_PATH_MAX];
        smattn_io_err(err, errlen, "%s: no q.npy (attention) or x.npy (softmax)",
                      smattn_io_path(dir, q));
        return -1;
    }
    *op = hq ? SMATTN_OP_ATTENTION : SMATTN_OP_SOFTMAX;
    if (!hq) {
        int hk = file_exists(dir, "k.npy", err, errlen);
        int hv = hk < 0 ? -1 : file_exists(dir, "v.npy", err, errlen);
        if (hk < 0 || hv < 0)
            return -1;
        if (hk || hv) {
            smattn_io_err(err, errlen, "%s: a softmax case (x.npy) has no k or v",
                          hk ? "k.npy" : "v.npy");
            return -1;
        }
    }
    return 0;
}

static int load_all(const char *dir, smattn_case *c, char *err, size_t errlen)
{
    struct stat st;
    char q[SMATTN_IO_PATH_MAX];
    if (stat(dir, &st) != 0) {
        if (errno == ENOENT)
            smattn_io_err(err, errlen, "%s: no such case directory", smattn_io_path(dir, q));
        else
            smattn_io_err(err, errlen, "%s: cannot read the case directory: %s",
                          smattn_io_path(dir, q), strerror(errno));
        return -1;
    }
    if (!S_ISDIR(st.st_mode)) {
        smattn_io_err(err, errlen, "%s: not a directory", smattn_io_path(dir, q));
        return -1;
    }
    smattn_op op;
    if (load_json(dir, &c->json, err, errlen) || case_op(dir, &op, err, errlen))
        return -1;
    /* Every header and case.json first, cross-checked; no data byte before that. */
    c->prob = smattn_problem_default();
    if (load_header(dir, "block_table.npy", 0, &c->block_table, err, errlen))
        return -1;
    const int layout = json_has_layout(&c->json) || present(&c->block_table);
    if (op == SMATTN_OP_ATTENTION) {
        if (load_header(dir, "q.npy", 1, &c->q, err, errlen) ||
            load_header(dir, "k.npy", 1, &c->k, err, errlen) ||
            load_header(dir, "v.npy", 1, &c->v, err, errlen) ||
            block_arrays(c, layout, err, errlen) ||
            (layout ? check_layout(c, err, errlen) : check_attention(c, err, errlen)))
            return -1;
    } else if (layout) {
        smattn_io_err(err, errlen, "%s: a softmax case (x.npy) has no ragged or paged layout",
                      present(&c->block_table) ? "block_table.npy" : "case.json");
        return -1;
    } else if (load_header(dir, "x.npy", 1, &c->x, err, errlen) || check_softmax(c, err, errlen))
        return -1;
    if (load_header(dir, "bias.npy", 0, &c->bias, err, errlen) ||
        load_header(dir, "mask.npy", 0, &c->mask, err, errlen) ||
        load_header(dir, "sinks.npy", 0, &c->sinks, err, errlen) ||
        load_header(dir, "do.npy", 0, &c->dout, err, errlen) ||
        load_header(dir, "dlse.npy", 0, &c->dlse, err, errlen) ||
        check_bf16_names(c, err, errlen) || check_bias_mask(c, err, errlen) ||
        check_sinks(c, err, errlen) || check_alibi(c, err, errlen) ||
        check_grads(c, err, errlen))
        return -1;
    const smattn_problem *p = &c->prob;
    if (check_lens(c->json.kv_lens, c->json.n_kv_lens, "kv_lens", p->B, p->T, "T", err, errlen) ||
        check_lens(c->json.q_lens, c->json.n_q_lens, "q_lens", p->B, p->S, "S", err, errlen))
        return -1;
    apply_json(c);
    if (apply_descale(c, err, errlen))
        return -1;
    if (c->has_layout) {
        c->prob.layout = &c->layout;
        if (c->csr_lens)
            c->prob.kv_lens = c->csr_lens;
    }
    return 0;
}

int smattn_case_open(const char *dir, smattn_case *c, char *err, size_t errlen)
{
    memset(c, 0, sizeof *c);
    smattn_case_json_init(&c->json);
    if (load_all(dir, c, err, errlen) == 0)
        return 0;
    smattn_case_free(c);
    return -1;
}

int smattn_case_read(const char *dir, smattn_case *c, char *err, size_t errlen)
{
    if (read_data(dir, c, err, errlen) == 0)
        return 0;
    smattn_case_free(c);
    return -1;
}

int smattn_case_load(const char *dir, smattn_case *c, char *err, size_t errlen)
{
    return smattn_case_open(dir, c, err, errlen) || smattn_case_read(dir, c, err, errlen) ? -1 : 0;
}

void smattn_case_free(smattn_case *c)
{
    if (!c)
        return;
    smattn_npy *arr[9] = {&c->q,    &c->k,     &c->v,    &c->x,   &c->bias,
                          &c->mask, &c->sinks, &c->dout, &c->dlse};
    for (int n = 0; n < 9; n++)
        smattn_npy_free(arr[n]);
    smattn_npy_free(&c->block_table);
    free(c->table);
    free(c->csr_lens);
    smattn_case_json_free(&c->json);
    memset(c, 0, sizeof *c);
}
