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
    char *p = smattn_io_join_path(dir, name);
    if (!p) {
        smattn_io_err(err, errlen, "out of memory");
        return -1;
    }
    int rc = smattn_npy_read_header(p, a, err, errlen);
    free(p);
    if (rc) {
        name_error(dir, name, err, errlen);
        name_dangling(dir, name, err, errlen);
    }
    return rc;
}

/* An input file was given (its header is loaded; its data may not be yet). */
static int present(const smattn_npy *a)
{
    return a->itemsize != 0;
}

/* The data of every present array, read only once every header has been checked. */
static int read_data(const char *dir, smattn_case *c, char *err, size_t errlen)
{
    static const char *const names[7] = {"q.npy",    "k.npy",    "v.npy",    "x.npy",
                                         "bias.npy", "mask.npy", "sinks.npy"};
    smattn_npy *arr[7] = {&c->q, &c->k, &c->v, &c->x, &c->bias, &c->mask, &c->sinks};
    for (int n = 0; n < 7; n++) {
        if (!present(arr[n]))
            continue;
        char *p = smattn_io_join_path(dir, names[n]);
        if (!p) {
            smattn_io_err(err, errlen, "out of memory");
            return -1;
        }
        int rc = smattn_npy_read_data(p, arr[n], err, errlen);
        free(p);
        if (rc) {
            name_error(dir, names[n], err, errlen);
            return -1;
        }
    }
    /* Every check has passed: no present array is empty, so each has data now. */
    c->in.q.data = c->q.data;
    c->in.k.data = c->k.data;
    c->in.v.data = c->v.data;
    c->in.x.data = c->x.data;
    c->in.bias.data = c->bias.data;
    c->in.mask.data = c->mask.data;
    if (present(&c->sinks))
        c->in.sinks.data = c->sinks.data;
    return 0;
}

/* ---- checks ---------------------------------------------------------------------------- */

static void shape_str(const smattn_npy *a, char *out, size_t cap)
{
    size_t n = (size_t)snprintf(out, cap, "[");
    for (int r = 0; r < a->rank && n < cap; r++)
        n += (size_t)snprintf(out + n, cap - n, "%s%lld", r ? "," : "", (long long)a->shape[r]);
    if (n < cap)
        snprintf(out + n, cap - n, "]");
}

/* The smattn dtype of a float input; bf16 says whether case.json names it in "bf16". */
static int float_dtype(const smattn_npy *a, const char *file, const char *key, int bf16,
                       smattn_dtype *t, char *err, size_t errlen)
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

static int nonempty_dims(const smattn_npy *a, const char *file, char *err, size_t errlen)
{
    for (int r = 0; r < a->rank; r++)
        if (a->shape[r] < 1) {
            char s[128];
            shape_str(a, s, sizeof s);
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
    shape_str(a, s, sizeof s);
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
    shape_str(a, s, sizeof s);
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
            shape_str(kv[n], s, sizeof s);
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
        if (float_dtype(arr[n], names[n], keys[n], (c->json.bf16 & bits[n]) != 0, &ten[n]->dtype,
                        err, errlen))
            return -1;
        strides_34(arr[n], ten[n]->stride);
    }
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
    if (float_dtype(x, "x.npy", "x", (c->json.bf16 & SMATTN_CASE_X) != 0, &c->in.x.dtype, err,
                    errlen))
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
            shape_str(a, s, sizeof s);
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
        if (float_dtype(&c->bias, "bias.npy", "bias", (c->json.bf16 & SMATTN_CASE_BIAS) != 0,
                        &c->in.bias.dtype, err, errlen) ||
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
            shape_str(&c->sinks, s, sizeof s);
            smattn_io_err(err, errlen, "sinks.npy: shape %s, want [Hq] = [%lld]", s, (long long)Hq);
            return -1;
        }
        if (float_dtype(&c->sinks, "sinks.npy", "sinks", (c->json.bf16 & SMATTN_CASE_SINKS) != 0,
                        &c->in.sinks.dtype, err, errlen))
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
    static const char *const bf16_names[] = {"q", "k", "v", "x", "bias", "sinks"};
    const smattn_npy *arr[6] = {&c->q, &c->k, &c->v, &c->x, &c->bias, &c->sinks};
    for (int n = 0; n < 6; n++)
        if ((c->json.bf16 >> n & 1) && !present(arr[n])) {
            smattn_io_err(err, errlen, "case.json: \"bf16\" names %s, but there is no %s.npy",
                          bf16_names[n], bf16_names[n]);
            return -1;
        }
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
    if (op == SMATTN_OP_ATTENTION) {
        if (load_header(dir, "q.npy", 1, &c->q, err, errlen) ||
            load_header(dir, "k.npy", 1, &c->k, err, errlen) ||
            load_header(dir, "v.npy", 1, &c->v, err, errlen) || check_attention(c, err, errlen))
            return -1;
    } else if (load_header(dir, "x.npy", 1, &c->x, err, errlen) || check_softmax(c, err, errlen))
        return -1;
    if (load_header(dir, "bias.npy", 0, &c->bias, err, errlen) ||
        load_header(dir, "mask.npy", 0, &c->mask, err, errlen) ||
        load_header(dir, "sinks.npy", 0, &c->sinks, err, errlen) ||
        check_bf16_names(c, err, errlen) || check_bias_mask(c, err, errlen) ||
        check_sinks(c, err, errlen))
        return -1;
    const smattn_problem *p = &c->prob;
    if (check_lens(c->json.kv_lens, c->json.n_kv_lens, "kv_lens", p->B, p->T, "T", err, errlen) ||
        check_lens(c->json.q_lens, c->json.n_q_lens, "q_lens", p->B, p->S, "S", err, errlen))
        return -1;
    apply_json(c);
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
    smattn_npy *arr[7] = {&c->q, &c->k, &c->v, &c->x, &c->bias, &c->mask, &c->sinks};
    for (int n = 0; n < 7; n++)
        smattn_npy_free(arr[n]);
    smattn_case_json_free(&c->json);
    memset(c, 0, sizeof *c);
}
