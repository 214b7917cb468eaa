/* SPDX-License-Identifier: MIT */
/* files.c: file-based checking for kernels that are not C: `smattn gen` writes the battery
 * as case directories (SPEC 7.1, readable by `smattn ref`) with a manifest; the user runs a
 * kernel on each and saves o.npy (optionally lse.npy, p.npy) beside the inputs; `smattn
 * check` judges them with the same rules as `smattn conform`. */
#include <dirent.h>
#include <errno.h>
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <json.h>

#include "conform/battery_impl.h"
#include "conform/conform.h"
#include "core/internal.h"
#include "io/case.h"
#include "io/merge_case.h"
#include "io/npy.h"
#include "io/util.h"

/* The longest path files.c makes or reads (the kernel's own limit). gen checks before it
 * makes anything that every path it will write fits; check reports a path that does not
 * as the case's error. */
#define FPATH PATH_MAX

static const char *const empty_names[3] = {"zero", "nan", "mean"};
static const char *const empty_lse_names[3] = {"neg_inf", "pos_inf", "zero"};
static const char *const causal_names[3] = {"none", "lower_right", "upper_left"};

/* a/b into out; -1 (out "") if it does not fit. */
static int join(char *out, size_t cap, const char *a, const char *b)
{
    size_t la = strlen(a), lb = strlen(b);
    if (la + 1 + lb >= cap) {
        out[0] = '\0';
        return -1;
    }
    memcpy(out, a, la);
    out[la] = '/';
    memcpy(out + la + 1, b, lb + 1);
    return 0;
}

static int make_dir(const char *path, char *err, size_t errlen)
{
    struct stat st;
    if (mkdir(path, 0777) == 0 || (errno == EEXIST && stat(path, &st) == 0 && S_ISDIR(st.st_mode)))
        return 0;
    snprintf(err, errlen, "%s: cannot create directory: %s", path, strerror(errno));
    return -1;
}

/* OUT/<category>-<name> for case name "<category>/<name>". */
static void case_dir_name(const conform_case *c, char *buf, size_t cap)
{
    snprintf(buf, cap, "%s", c->name);
    for (char *s = buf; *s; s++)
        if (*s == '/')
            *s = '-';
}

static int write_array(const char *dir, const char *file, smattn_npy_type t, int rank,
                       const int64_t *shape, const void *data, char *err, size_t errlen)
{
    char path[FPATH];
    (void)join(path, sizeof path, dir, file); /* fits: conform_gen_write checked */
    return smattn_npy_write(path, t, rank, shape, data, err, errlen);
}

static void put_lens(FILE *f, const char *key, const int64_t *l, int64_t B)
{
    if (!l)
        return;
    fprintf(f, ",\n  \"%s\": [", key);
    for (int64_t b = 0; b < B; b++)
        fprintf(f, "%s%lld", b ? ", " : "", (long long)l[b]);
    fprintf(f, "]");
}

/* dir/case.json (its path into path) opened and begun with the keys every case has:
 * scale, causal, window, softcap, empty_rows and empty_lse (SPEC 7.1); the caller adds its
 * own and ends it with close_case_json. NULL with err when it cannot be written. */
static FILE *open_case_json(const char *dir, const smattn_problem *p, char path[FPATH],
                            char *err, size_t errlen)
{
    (void)join(path, FPATH, dir, "case.json"); /* fits: conform_gen_write checked */
    FILE *f = fopen(path, "w");
    if (!f) {
        snprintf(err, errlen, "%s: cannot write", path);
        return NULL;
    }
    fprintf(f,
            "{\n  \"scale\": %.17g,\n  \"causal\": \"%s\",\n  \"window\": [%lld, %lld],\n"
            "  \"softcap\": %.17g,\n  \"empty_rows\": \"%s\",\n  \"empty_lse\": \"%s\"",
            p->scale, causal_names[p->causal], (long long)p->window_left,
            (long long)p->window_right, p->softcap, empty_names[p->empty_rows],
            empty_lse_names[p->empty_lse]);
    return f;
}

/* The closing brace of a case.json from open_case_json, and the file closed: 0, or -1
 * with err. */
static int close_case_json(FILE *f, const char *path, char *err, size_t errlen)
{
    fprintf(f, "\n}\n");
    return conform_file_close(f, path, err, errlen);
}

/* case.json's "bf16" list of a layout case in bfloat16: Q, K, V and the bias, sinks and
 * dO it has. */
static void put_bf16_qkv(FILE *f, int bias, int sinks, int dout)
{
    fprintf(f, ",\n  \"bf16\": [\"q\", \"k\", \"v\"%s%s%s]", bias ? ", \"bias\"" : "",
            sinks ? ", \"sinks\"" : "", dout ? ", \"do\"" : "");
}

/* case.json with every option of the problem (SPEC 7.1). */
static int write_case_json(const char *dir, const smattn_problem *p, const smattn_inputs *in,
                           int bf16, int backward, char *err, size_t errlen)
{
    char path[FPATH];
    FILE *f = open_case_json(dir, p, path, err, errlen);
    if (!f)
        return -1;
    put_lens(f, "kv_lens", p->kv_lens, p->B);
    put_lens(f, "q_lens", p->q_lens, p->B);
    smattn_case_json_put_alibi(f, p);
    smattn_case_json_put_quant(f, p, in);
    if (bf16) {
        const char *names[7];
        int n = 0;
        if (p->op != SMATTN_OP_ATTENTION)
            names[n++] = "x";
        else /* those of Q, K and V in bfloat16 (not quantised) */
            for (int k = 0; k < 3; k++)
                if ((k == 0 ? &in->q : k == 1 ? &in->k : &in->v)->dtype == SMATTN_BF16)
                    names[n++] = k == 0 ? "q" : k == 1 ? "k" : "v";
        if (in->bias.data)
            names[n++] = "bias";
        if (in->sinks.data)
            names[n++] = "sinks";
        if (backward)
            names[n++] = "do";
        fprintf(f, ",\n  \"bf16\": [");
        for (int k = 0; k < n; k++)
            fprintf(f, "%s\"%s\"", k ? ", " : "", names[k]);
        fprintf(f, "]");
    }
    return close_case_json(f, path, err, errlen);
}

/* What gen --backward adds to a layout case: the dense dO's stream (case name, seed). */
typedef struct gen_grads {
    int on;
    const conform_case *c;
    uint64_t seed;
} gen_grads;

static int write_layout_case(const char *dir, const conform_inst *m, smattn_dtype t, int layout,
                             gen_grads gr, char *err, size_t errlen);
static int write_own_layout_case(const char *dir, const conform_case *c, const conform_inst *m,
                                 smattn_dtype t, gen_grads gr, char *err, size_t errlen);

/* dO [B,S,Hq,Dv] of a backward case (SPEC 7.1, 10.1): uniform in [-1, 1) like V, from a
 * stream of its own seeded by the case's name and the run's seed (the battery's streams
 * are left as they are, so the forward inputs do not change), rounded to t; malloc'd. */
static void *make_dout(const conform_case *c, const smattn_problem *p, smattn_dtype t,
                       uint64_t seed)
{
    const int64_t n = p->B * p->S * p->Hq * p->Dv;
    void *d = malloc((size_t)(n > 0 ? n : 1) * smattn_dtype_size(t));
    if (!d)
        return NULL;
    rng r = {bat_hash_name(c->name, seed ^ 0x6261636b77617264u)}; /* "backward" */
    for (int64_t e = 0; e < n; e++)
        smattn_store(d, t, e, (double)(bat_rng_next(&r) >> 11) * 0x1p-52 - 1.0);
    return d;
}

/* do.npy of a backward case: the dense [B,S,Hq,Dv], or O's packed shape [total_q,Hq,Dv]
 * (the stored rows of cu_q; SPEC 7.1) when cu_q is given. */
static int write_dout(const char *dir, const conform_case *c, const smattn_problem *p,
                      const int64_t *cu_q, smattn_dtype t, uint64_t seed, char *err,
                      size_t errlen)
{
    void *d = make_dout(c, p, t, seed);
    if (!d) {
        snprintf(err, errlen, "out of memory");
        return -1;
    }
    const size_t es = smattn_dtype_size(t), row = (size_t)(p->Hq * p->Dv) * es;
    int rc;
    if (cu_q) { /* rows in place: row cu_q[b] + i <- (b, i), i < S_b, in increasing order */
        unsigned char *u = d;
        for (int64_t b = 0; b < p->B; b++)
            for (int64_t i = 0; i < cu_q[b + 1] - cu_q[b]; i++)
                memmove(u + (size_t)(cu_q[b] + i) * row, u + (size_t)(b * p->S + i) * row, row);
        const int64_t shape[3] = {cu_q[p->B], p->Hq, p->Dv};
        rc = write_array(dir, "do.npy", smattn_npy_type_of(t), 3, shape, d, err, errlen);
    } else {
        const int64_t shape[4] = {p->B, p->S, p->Hq, p->Dv};
        rc = write_array(dir, "do.npy", smattn_npy_type_of(t), 4, shape, d, err, errlen);
    }
    free(d);
    return rc;
}

/* Whether two used entries of a block table name one page (SPEC 10.1: no backward then). */
static int table_shares_page(const smattn_problem *p, const smattn_layout *L)
{
    if (!L->block_table)
        return 0;
    unsigned char *hit = calloc((size_t)L->num_pages, 1);
    int shared = !hit;
    for (int64_t b = 0; hit && b < p->B && !shared; b++) {
        const int64_t Tb = p->kv_lens ? p->kv_lens[b] : p->T;
        for (int64_t k = 0; k < (Tb + L->page_size - 1) / L->page_size && !shared; k++)
            shared = hit[L->block_table[b * L->bt_stride + k]]++ != 0;
    }
    free(hit);
    return shared;
}

/* The dtypes a case's Q (which 0) or K and V (1) are written in: the case's own 8-bit or
 * block dtype (the quant category, SPEC 2.9), else gen's t. */
static smattn_dtype gen_dtype(const conform_case *c, int which, smattn_dtype t)
{
    smattn_dtype own = which ? c->kv_dtype : c->q_dtype;
    int quant = own == SMATTN_F8E4M3 || own == SMATTN_F8E5M2 ||
                (which && (own == SMATTN_Q8_0 || own == SMATTN_Q4_0));
    return quant ? own : t;
}

/* A .npy of Q, K or V in dtype dt: the float types as they are; fp8 as |u1 bit patterns of
 * the same shape; q8_0 and q4_0 as |u1 raw blocks, the last dimension D / 32 blocks of
 * bytes (SPEC 7.1, "Quantised arrays"). */
static int write_qkv(const char *dir, const char *file, smattn_dtype dt, const int64_t shape[4],
                     const void *data, char *err, size_t errlen)
{
    if (dt != SMATTN_F8E4M3 && dt != SMATTN_F8E5M2 && smattn_dtype_block(dt) == 1)
        return write_array(dir, file, smattn_npy_type_of(dt), 4, shape, data, err, errlen);
    int64_t s[4] = {shape[0], shape[1], shape[2], shape[3]};
    if (smattn_dtype_block(dt) > 1)
        s[3] = shape[3] / smattn_dtype_block(dt) * (int64_t)smattn_dtype_size(dt);
    return write_array(dir, file, SMATTN_NPY_U8, 4, s, data, err, errlen);
}

static int write_case(const conform_case *c, const char *dir, smattn_dtype t, smattn_empty empty,
                      smattn_empty_lse empty_lse, int layout, uint64_t seed, char *err,
                      size_t errlen)
{
    const int backward = (layout & CONFORM_GEN_BACKWARD) != 0;
    layout &= ~CONFORM_GEN_BACKWARD;
    const smattn_dtype qdt = gen_dtype(c, 0, t), kvdt = gen_dtype(c, 1, t);
    const int quant = qdt != t || kvdt != t;
    conform_inst m, mq; /* mq: Q, K and V in their own dtypes (a quantised case), else m */
    if (conform_case_materialise(c, t, t, empty, empty_lse, &m)) {
        snprintf(err, errlen, "out of memory");
        return -1;
    }
    if (quant && conform_case_materialise(c, qdt, kvdt, empty, empty_lse, &mq)) {
        conform_inst_free(&m);
        snprintf(err, errlen, "out of memory");
        return -1;
    }
    if (quant) /* the quantised Q, K and V with the other inputs in t */
        m.in.q = mq.in.q, m.in.k = mq.in.k, m.in.v = mq.in.v;
    const smattn_problem *p = &m.prob;
    if (layout && p->op == SMATTN_OP_ATTENTION && !quant) {
        /* a layout case keeps its own layout; the others take --layout's rule */
        gen_grads g = {backward, c, seed};
        int lr = c->has_layout ? write_own_layout_case(dir, c, &m, t, g, err, errlen)
                               : write_layout_case(dir, &m, t, layout, g, err, errlen);
        if (lr <= 0) {
            conform_inst_free(&m);
            return lr;
        }
    }
    smattn_npy_type nt = smattn_npy_type_of(t);
    int64_t q[4] = {p->B, p->S, p->Hq, p->D}, k[4] = {p->B, p->T, p->Hkv, p->D};
    int64_t v[4] = {p->B, p->T, p->Hkv, p->Dv}, x[4] = {p->B, p->Hq, p->S, p->T};
    int rc = make_dir(dir, err, errlen);
    if (!rc && p->op == SMATTN_OP_ATTENTION)
        rc = write_qkv(dir, "q.npy", m.in.q.dtype, q, m.in.q.data, err, errlen) ||
             write_qkv(dir, "k.npy", m.in.k.dtype, k, m.in.k.data, err, errlen) ||
             write_qkv(dir, "v.npy", m.in.v.dtype, v, m.in.v.data, err, errlen);
    else if (!rc)
        rc = write_array(dir, "x.npy", nt, 4, x, m.in.x.data, err, errlen);
    if (!rc && m.in.bias.data)
        rc = write_array(dir, "bias.npy", nt, 4, x, m.in.bias.data, err, errlen);
    if (!rc && m.in.mask.data)
        rc = write_array(dir, "mask.npy", SMATTN_NPY_BOOL, 4, x, m.in.mask.data, err, errlen);
    if (!rc && m.in.sinks.data)
        rc = write_array(dir, "sinks.npy", nt, 1, &p->Hq, m.in.sinks.data, err, errlen);
    /* the backward takes no quantised input (SPEC 10): a quantised case stays forward */
    const int grads = backward && p->op == SMATTN_OP_ATTENTION && !quant;
    if (!rc && grads)
        rc = write_dout(dir, c, p, NULL, t, seed, err, errlen);
    if (!rc)
        rc = write_case_json(dir, p, &m.in, t == SMATTN_BF16, grads, err, errlen);
    conform_inst_free(&m);
    if (quant)
        conform_inst_free(&mq);
    return rc ? -1 : 0;
}

/* ---- gen --layout: the attention cases as ragged or paged case files (SPEC 7.1) ------- */

/* Page size of `gen --layout paged|csr`: FlashInfer's usual 16; pages are handed out in
 * reverse order, so that no sequence's keys are where the dense layout had them, and the
 * unused slots of a last page hold NaN (never read, SPEC 3.6). */
#define GEN_PAGE_SIZE 16

static void put_list(FILE *f, const char *key, const int64_t *l, int64_t n)
{
    fprintf(f, ",\n  \"%s\": [", key);
    for (int64_t b = 0; b < n; b++)
        fprintf(f, "%s%lld", b ? ", " : "", (long long)l[b]);
    fprintf(f, "]");
}

/* Copy n elements of es bytes from src (strided by sst elements) to dst (contiguous). */
static void copy_row(unsigned char *dst, const unsigned char *src, int64_t n, int64_t sst,
                     size_t es)
{
    for (int64_t e = 0; e < n; e++)
        memcpy(dst + (size_t)e * es, src + (size_t)(e * sst) * es, es);
}

/* Case m (attention) written with its queries packed (cu_seqlens_q) and its keys packed
 * (layout 1: cu_seqlens_k), paged (2: block_table.npy and kv_lens) or paged in FlashInfer's
 * CSR form (3: kv_indptr, kv_indices, kv_last_page_len): the same problem on the rows a
 * sequence has (S and T become the longest sequence's; bias and mask are cut to them).
 * 1 when the case has no query or no key at all (a packed file cannot be empty: the caller
 * writes it dense), 0 written, -1 with err. */
static int write_layout_case(const char *dir, const conform_inst *m, smattn_dtype t, int layout,
                             gen_grads gr, char *err, size_t errlen)
{
    const smattn_problem *p = &m->prob;
    const smattn_inputs *in = &m->in;
    const int64_t B = p->B, Hq = p->Hq, Hkv = p->Hkv, D = p->D, Dv = p->Dv;
    const size_t es = smattn_dtype_size(t);
    smattn_npy_type nt = smattn_npy_type_of(t);
    int64_t *cu_q = calloc((size_t)B + 1, sizeof *cu_q), *cu_k = calloc((size_t)B + 1, 8);
    int64_t *tl = calloc((size_t)B, 8), *pg = calloc((size_t)B + 1, 8),
            *last = calloc((size_t)B, 8);
    unsigned char *q = NULL, *k = NULL, *v = NULL, *bias = NULL, *mask = NULL;
    int32_t *table = NULL;
    int64_t *indices = NULL;
    int rc = -1;
    if (!cu_q || !cu_k || !tl || !pg || !last)
        goto nomem;
    int64_t S2 = 1, T2 = 1, maxp = 1;
    for (int64_t b = 0; b < B; b++) {
        int64_t Sb = p->q_lens ? p->q_lens[b] : p->S, Tb = p->kv_lens ? p->kv_lens[b] : p->T;
        int64_t np = (Tb + GEN_PAGE_SIZE - 1) / GEN_PAGE_SIZE;
        cu_q[b + 1] = cu_q[b] + Sb;
        cu_k[b + 1] = cu_k[b] + Tb;
        pg[b + 1] = pg[b] + np;
        tl[b] = Tb;
        last[b] = np ? Tb - (np - 1) * GEN_PAGE_SIZE : 0;
        S2 = Sb > S2 ? Sb : S2, T2 = Tb > T2 ? Tb : T2, maxp = np > maxp ? np : maxp;
    }
    const int64_t tq = cu_q[B], tk = cu_k[B], npages = pg[B];
    if (tq == 0 || (layout == 1 ? tk == 0 : npages == 0)) {
        rc = 1;
        goto done;
    }
    /* queries [total_q, Hq, D] */
    if (!(q = malloc((size_t)(tq * Hq * D) * es)))
        goto nomem;
    for (int64_t b = 0; b < B; b++)
        for (int64_t i = 0; i < cu_q[b + 1] - cu_q[b]; i++)
            for (int64_t h = 0; h < Hq; h++)
                copy_row(
                    q + (size_t)(((cu_q[b] + i) * Hq + h) * D) * es,
                    (const unsigned char *)in->q.data +
                        (size_t)(b * in->q.stride[0] + i * in->q.stride[1] + h * in->q.stride[2]) *
                            es,
                    D, in->q.stride[3], es);
    /* keys: packed [total_k, Hkv, .] or pages [npages, 16, Hkv, .] (NaN in unused slots) */
    const int64_t rows = layout == 1 ? tk : npages * GEN_PAGE_SIZE;
    if (!(k = malloc((size_t)(rows * Hkv * D) * es)) ||
        !(v = malloc((size_t)(rows * Hkv * Dv) * es)))
        goto nomem;
    for (int64_t e = 0; layout != 1 && e < rows * Hkv * D; e++)
        smattn_store(k, t, e, (double)NAN);
    for (int64_t e = 0; layout != 1 && e < rows * Hkv * Dv; e++)
        smattn_store(v, t, e, (double)NAN);
    if (layout != 1 && (!(table = malloc((size_t)(B * maxp) * sizeof *table)) ||
                        !(indices = malloc((size_t)npages * sizeof *indices))))
        goto nomem;
    for (int64_t b = 0; b < B; b++) {
        for (int64_t c = 0; layout != 1 && c < maxp; c++) {
            int64_t page = npages - 1 - (pg[b] + c); /* reverse order */
            table[b * maxp + c] = c < pg[b + 1] - pg[b] ? (int32_t)page : -1;
            if (c < pg[b + 1] - pg[b])
                indices[pg[b] + c] = page;
        }
        for (int64_t j = 0; j < tl[b]; j++) {
            int64_t row = layout == 1 ? cu_k[b] + j
                                      : (npages - 1 - (pg[b] + j / GEN_PAGE_SIZE)) * GEN_PAGE_SIZE +
                                            j % GEN_PAGE_SIZE;
            for (int64_t g = 0; g < Hkv; g++) {
                copy_row(
                    k + (size_t)((row * Hkv + g) * D) * es,
                    (const unsigned char *)in->k.data +
                        (size_t)(b * in->k.stride[0] + j * in->k.stride[1] + g * in->k.stride[2]) *
                            es,
                    D, in->k.stride[3], es);
                copy_row(
                    v + (size_t)((row * Hkv + g) * Dv) * es,
                    (const unsigned char *)in->v.data +
                        (size_t)(b * in->v.stride[0] + j * in->v.stride[1] + g * in->v.stride[2]) *
                            es,
                    Dv, in->v.stride[3], es);
            }
        }
    }
    /* bias and mask cut to [B, Hq, S', T'] */
    const smattn_tensor *bm[2] = {&in->bias, &in->mask};
    unsigned char **cut[2] = {&bias, &mask};
    for (int n = 0; n < 2; n++) {
        if (!bm[n]->data)
            continue;
        size_t bes = n ? 1 : es;
        if (!(*cut[n] = malloc((size_t)(B * Hq * S2 * T2) * bes)))
            goto nomem;
        for (int64_t b = 0; b < B; b++)
            for (int64_t h = 0; h < Hq; h++)
                for (int64_t i = 0; i < S2; i++)
                    copy_row(*cut[n] + (size_t)(((b * Hq + h) * S2 + i) * T2) * bes,
                             (const unsigned char *)bm[n]->data +
                                 (size_t)(b * bm[n]->stride[0] + h * bm[n]->stride[1] +
                                          i * bm[n]->stride[2]) *
                                     bes,
                             T2, bm[n]->stride[3], bes);
    }
    int64_t sq[3] = {tq, Hq, D}, sk[4] = {layout == 1 ? tk : npages, GEN_PAGE_SIZE, Hkv, D};
    int64_t sv[4] = {sk[0], GEN_PAGE_SIZE, Hkv, Dv}, sbm[4] = {B, Hq, S2, T2}, st[2] = {B, maxp};
    if (layout == 1) {
        int64_t pk[3] = {tk, Hkv, D}, pv[3] = {tk, Hkv, Dv};
        rc = make_dir(dir, err, errlen) || write_array(dir, "q.npy", nt, 3, sq, q, err, errlen) ||
             write_array(dir, "k.npy", nt, 3, pk, k, err, errlen) ||
             write_array(dir, "v.npy", nt, 3, pv, v, err, errlen);
    } else
        rc = make_dir(dir, err, errlen) || write_array(dir, "q.npy", nt, 3, sq, q, err, errlen) ||
             write_array(dir, "k.npy", nt, 4, sk, k, err, errlen) ||
             write_array(dir, "v.npy", nt, 4, sv, v, err, errlen) ||
             (layout == 2 &&
              write_array(dir, "block_table.npy", SMATTN_NPY_I32, 2, st, table, err, errlen));
    if (!rc && bias)
        rc = write_array(dir, "bias.npy", nt, 4, sbm, bias, err, errlen);
    if (!rc && mask)
        rc = write_array(dir, "mask.npy", SMATTN_NPY_BOOL, 4, sbm, mask, err, errlen);
    if (!rc && in->sinks.data)
        rc = write_array(dir, "sinks.npy", nt, 1, &p->Hq, in->sinks.data, err, errlen);
    if (!rc && gr.on) /* fresh pages per sequence: a backward case */
        rc = write_dout(dir, gr.c, p, cu_q, t, gr.seed, err, errlen);
    if (!rc) {
        char path[FPATH];
        FILE *f = open_case_json(dir, p, path, err, errlen);
        if (!f) {
            rc = -1;
            goto done;
        }
        put_list(f, "cu_seqlens_q", cu_q, B + 1);
        if (layout == 1)
            put_list(f, "cu_seqlens_k", cu_k, B + 1);
        else if (layout == 2)
            put_list(f, "kv_lens", tl, B);
        else {
            put_list(f, "kv_indptr", pg, B + 1);
            put_list(f, "kv_indices", indices, npages);
            put_list(f, "kv_last_page_len", last, B);
        }
        smattn_case_json_put_alibi(f, p);
        if (t == SMATTN_BF16)
            put_bf16_qkv(f, bias != NULL, in->sinks.data != NULL, gr.on);
        rc = close_case_json(f, path, err, errlen);
    }
    goto done;
nomem:
    snprintf(err, errlen, "out of memory");
    rc = -1;
done:
    free(cu_q), free(cu_k), free(tl), free(pg), free(last);
    free(q), free(k), free(v), free(bias), free(mask), free(table), free(indices);
    return rc;
}

/* A layout case (c->has_layout: conform/battery_layout.c) written in its own layout, as
 * `smattn conform` hands it to a kernel claiming it (conform_case_lay_out): its own packing,
 * seqused_k and dead keys, pages (page size, order, shared pages, spare table columns)
 * and NHD or HND, with NaN and infinities in every slot no sequence uses; q_lens or
 * kv_lens where the layout leaves Q or K/V dense. S and T become what the loader derives
 * (the longest sequence's where packed or paged); bias and mask are cut to them. 1 when
 * a packed tensor would be empty (the caller writes the case dense), 0 written, -1 with
 * err. */
static int write_own_layout_case(const char *dir, const conform_case *c, const conform_inst *m,
                                 smattn_dtype t, gen_grads gr, char *err, size_t errlen)
{
    const smattn_layout *L = &c->layout;
    /* a table sharing a page has no backward (SPEC 10.1): the case stays forward only */
    gr.on = gr.on && !table_shares_page(&m->prob, L);
    const smattn_problem *p = &m->prob;
    const int64_t B = p->B, Hq = p->Hq, Hkv = p->Hkv, D = p->D, Dv = p->Dv;
    const size_t es = smattn_dtype_size(t);
    smattn_npy_type nt = smattn_npy_type_of(t);
    if ((L->cu_seqlens_q && L->cu_seqlens_q[B] == 0) || (L->cu_seqlens_k && L->cu_seqlens_k[B] == 0))
        return 1;
    conform_inst lm;
    if (conform_case_lay_out(c, m, &lm)) {
        snprintf(err, errlen, "out of memory");
        return -1;
    }
    int64_t S2 = L->cu_seqlens_q ? 1 : p->S, T2 = L->cu_seqlens_k || L->block_table ? 1 : p->T;
    /* the table whole, bt_stride columns a row: with "max_pages" below it, the columns past
     * max_pages (garbage, never read) stay the row stride's */
    int32_t *table = L->block_table ? malloc((size_t)(B * L->bt_stride) * sizeof *table) : NULL;
    unsigned char *cut[2] = {NULL, NULL};
    int rc = -1;
    if (L->block_table && !table)
        goto nomem;
    for (int64_t b = 0; b < B; b++) {
        int64_t Sb = p->q_lens ? p->q_lens[b] : p->S, Tb = p->kv_lens ? p->kv_lens[b] : p->T;
        if (L->cu_seqlens_q && Sb > S2)
            S2 = Sb;
        if ((L->cu_seqlens_k || L->block_table) && Tb > T2)
            T2 = Tb;
        for (int64_t col = 0; table && col < L->bt_stride; col++)
            table[b * L->bt_stride + col] = L->block_table[b * L->bt_stride + col];
    }
    /* bias and mask cut to [B, Hq, S', T'] */
    const smattn_tensor *bm[2] = {&m->in.bias, &m->in.mask};
    for (int n = 0; n < 2; n++) {
        if (!bm[n]->data)
            continue;
        size_t bes = n ? 1 : es;
        if (!(cut[n] = malloc((size_t)(B * Hq * S2 * T2) * bes)))
            goto nomem;
        for (int64_t b = 0; b < B; b++)
            for (int64_t h = 0; h < Hq; h++)
                for (int64_t i = 0; i < S2; i++)
                    copy_row(cut[n] + (size_t)(((b * Hq + h) * S2 + i) * T2) * bes,
                             (const unsigned char *)bm[n]->data +
                                 (size_t)(b * bm[n]->stride[0] + h * bm[n]->stride[1] +
                                          i * bm[n]->stride[2]) *
                                     bes,
                             T2, bm[n]->stride[3], bes);
    }
    const int64_t tq = L->cu_seqlens_q ? L->cu_seqlens_q[B] : 0;
    const int64_t tk = L->cu_seqlens_k ? L->cu_seqlens_k[B] : 0, ps = L->page_size;
    int64_t sq[4] = {B, p->S, Hq, D}, sk[4] = {B, p->T, Hkv, D}, sv[4] = {B, p->T, Hkv, Dv};
    int rq = 4, rk = 4;
    if (L->cu_seqlens_q)
        sq[0] = tq, sq[1] = Hq, sq[2] = D, rq = 3;
    if (L->cu_seqlens_k) {
        sk[0] = sv[0] = tk, sk[1] = sv[1] = Hkv, sk[2] = D, sv[2] = Dv, rk = 3;
    } else if (L->block_table) { /* [num_pages, page_size, Hkv, .] or HND [.., Hkv, page_size, .] */
        sk[0] = sv[0] = L->num_pages;
        sk[1] = sv[1] = c->kv_hnd ? Hkv : ps;
        sk[2] = sv[2] = c->kv_hnd ? ps : Hkv;
        sk[3] = D, sv[3] = Dv;
    }
    const int64_t sbm[4] = {B, Hq, S2, T2}, st[2] = {B, L->bt_stride};
    rc = make_dir(dir, err, errlen) ||
         write_array(dir, "q.npy", nt, rq, sq, lm.in.q.data, err, errlen) ||
         write_array(dir, "k.npy", nt, rk, sk, lm.in.k.data, err, errlen) ||
         write_array(dir, "v.npy", nt, rk, sv, lm.in.v.data, err, errlen) ||
         (table && write_array(dir, "block_table.npy", SMATTN_NPY_I32, 2, st, table, err, errlen)) ||
         (cut[0] && write_array(dir, "bias.npy", nt, 4, sbm, cut[0], err, errlen)) ||
         (cut[1] && write_array(dir, "mask.npy", SMATTN_NPY_BOOL, 4, sbm, cut[1], err, errlen)) ||
         (m->in.sinks.data && write_array(dir, "sinks.npy", nt, 1, &p->Hq, m->in.sinks.data, err, errlen)) ||
         (gr.on && write_dout(dir, gr.c, p, L->cu_seqlens_q, t, gr.seed, err, errlen));
    if (!rc) {
        char path[FPATH];
        FILE *f = open_case_json(dir, p, path, err, errlen);
        if (!f) {
            rc = -1;
            goto done;
        }
        if (L->cu_seqlens_q)
            put_list(f, "cu_seqlens_q", L->cu_seqlens_q, B + 1);
        else if (p->q_lens)
            put_list(f, "q_lens", p->q_lens, B);
        if (L->cu_seqlens_k) {
            put_list(f, "cu_seqlens_k", L->cu_seqlens_k, B + 1);
            if (L->seqused_k)
                put_list(f, "seqused_k", L->seqused_k, B);
        } else if (p->kv_lens)
            put_list(f, "kv_lens", p->kv_lens, B);
        if (L->block_table && c->kv_hnd)
            fprintf(f, ",\n  \"kv_layout\": \"HND\"");
        if (L->block_table && L->bt_stride != L->max_pages)
            fprintf(f, ",\n  \"max_pages\": %lld", (long long)L->max_pages);
        smattn_case_json_put_alibi(f, p);
        if (t == SMATTN_BF16)
            put_bf16_qkv(f, cut[0] != NULL, m->in.sinks.data != NULL, gr.on);
        rc = close_case_json(f, path, err, errlen);
    }
    goto done;
nomem:
    snprintf(err, errlen, "out of memory");
    rc = -1;
done:
    conform_inst_free(&lm);
    free(table), free(cut[0]), free(cut[1]);
    return rc;
}

/* Remove path and everything below it (symbolic links removed, never followed). */
static int remove_tree(const char *path)
{
    struct stat st;
    if (lstat(path, &st))
        return errno == ENOENT ? 0 : -1;
    if (S_ISDIR(st.st_mode)) {
        DIR *d = opendir(path);
        if (!d)
            return -1;
        struct dirent *de;
        char sub[FPATH];
        int rc = 0;
        while ((de = readdir(d)))
            if (strcmp(de->d_name, ".") && strcmp(de->d_name, "..") &&
                (join(sub, sizeof sub, path, de->d_name) || remove_tree(sub)))
                rc = -1;
        closedir(d);
        return rc || rmdir(path) ? -1 : 0;
    }
    return unlink(path);
}

/* 1 if dir holds anything, 0 if it is empty or absent (or not a directory: making it
 * fails then, with its own message), -1 if it exists and cannot be listed (a directory
 * without read permission can still take files: that it is empty cannot be known). */
static int non_empty(const char *dir)
{
    DIR *d = opendir(dir);
    if (!d)
        return errno == ENOENT || errno == ENOTDIR ? 0 : -1;
    struct dirent *de;
    int any = 0;
    while (!any && (de = readdir(d)))
        any = strcmp(de->d_name, ".") && strcmp(de->d_name, "..");
    closedir(d);
    return any;
}

/* The longest path gen will write under out (OUT/manifest.json, OUT/<case>/<file>), NUL
 * included. */
static size_t longest_path(const conform_battery *b, const char *out)
{
    size_t lo = strlen(out), need = lo + sizeof "/manifest.json";
    for (size_t k = 0; k < b->n; k++) {
        char name[sizeof b->cases[k].name];
        case_dir_name(&b->cases[k], name, sizeof name);
        size_t n = lo + 1 + strlen(name) + sizeof "/block_table.npy"; /* the longest name */
        need = n > need ? n : need;
    }
    return need;
}

long conform_gen_write(const conform_battery *b, const char *out, smattn_dtype t,
                       smattn_empty empty, smattn_empty_lse empty_lse, int layout,
                       const char *suite, uint64_t seed, int force, char *err, size_t errlen)
{
    static const char *const layout_names[4] = {"dense", "packed", "paged", "csr"};
    char q[SMATTN_IO_PATH_MAX];
    /* Before anything is made: a path too long would fail half-way, leaving case
     * directories and no manifest. */
    size_t need = longest_path(b, out);
    if (need > FPATH) {
        snprintf(err, errlen,
                 "%s: too long a path: the case files under it would need %zu bytes, more than "
                 "the system's %d (choose a shorter OUT)",
                 smattn_io_path(out, q), need, FPATH);
        return -1;
    }
    /* A stale o.npy, skip marker or extra input of an earlier run would change a case. */
    int used = non_empty(out);
    if (used < 0) {
        snprintf(err, errlen,
                 "%s: cannot list it (%s): whether it holds files of an earlier run cannot be "
                 "known; give a directory that can be read, or a new one",
                 smattn_io_path(out, q), strerror(errno));
        return -1;
    }
    if (!force && used) {
        snprintf(err, errlen,
                 "%s is not empty: files of an earlier run could change the cases; give "
                 "--force to replace the case directories, or an empty directory",
                 out);
        return -1;
    }
    struct stat ost;
    int made_out = stat(out, &ost) != 0; /* removed again if anything fails */
    if (make_dir(out, err, errlen))
        return -1;
    json_object *man = json_object_new_object();
    json_object_object_add(man, "suite", json_object_new_string(suite));
    json_object_object_add(man, "seed", json_object_new_int64((int64_t)seed));
    json_object_object_add(man, "dtype", json_object_new_string(smattn_dtype_name(t)));
    json_object_object_add(man, "empty_rows", json_object_new_string(empty_names[empty]));
    json_object_object_add(man, "empty_lse", json_object_new_string(empty_lse_names[empty_lse]));
    json_object_object_add(man, "layout", json_object_new_string(layout_names[layout & 3]));
    json_object_object_add(man, "backward",
                           json_object_new_boolean((layout & CONFORM_GEN_BACKWARD) != 0));
    json_object *arr = json_object_new_array(), *skipped = json_object_new_array();
    json_object_object_add(man, "skipped", skipped); /* cases the dtype would change */
    json_object_object_add(man, "cases", arr);
    long n = 0;
    int failed = 0;
    char dir[FPATH];
    for (size_t k = 0; k < b->n && !failed; k++) {
        const conform_case *c = &b->cases[k];
        if (c->strided) /* files are contiguous: these cases would repeat others */
            continue;
        char name[sizeof c->name], why[400];
        if (conform_case_dtype_fits(c, gen_dtype(c, 0, t), gen_dtype(c, 1, t), why, sizeof why) ||
            conform_case_dtype_fits(c, t, t, why, sizeof why)) { /* listed, not written */
            json_object *e = json_object_new_object();
            json_object_object_add(e, "name", json_object_new_string(c->name));
            json_object_object_add(e, "reason", json_object_new_string(why));
            json_object_array_add(skipped, e);
            continue;
        }
        case_dir_name(c, name, sizeof name);
        (void)join(dir, sizeof dir, out, name); /* fits: checked above */
        if (remove_tree(dir)) {
            snprintf(err, errlen, "%s: cannot clear the old case directory: %s", dir,
                     strerror(errno));
            failed = 1;
            break;
        }
        /* listed before it is written: on failure, the list says what to remove */
        json_object *e = json_object_new_object();
        json_object_object_add(e, "dir", json_object_new_string(name));
        json_object_object_add(e, "name", json_object_new_string(c->name));
        json_object_object_add(e, "category", json_object_new_string(c->category));
        json_object *feat = json_object_new_array();
        /* a layout case written dense is its twin: the twin's features (lengths, no layout) */
        uint32_t caps = c->has_layout && !layout
                            ? conform_problem_caps(&c->prob, &c->in64) | (c->caps & SMATTN_CAP_STRIDES)
                            : c->caps;
        for (unsigned bit = 0; bit < 32; bit++)
            if (caps & (1u << bit))
                json_object_array_add(feat, json_object_new_string(conform_cap_name(bit)));
        json_object_object_add(e, "features", feat);
        json_object_array_add(arr, e);
        if (write_case(c, dir, t, empty, empty_lse, layout, seed, err, errlen))
            failed = 1;
        else
            n++;
    }
    char path[FPATH];
    (void)join(path, sizeof path, out, "manifest.json");
    if (!failed && json_object_to_file_ext(path, man, JSON_C_TO_STRING_PRETTY)) {
        snprintf(err, errlen, "%s: cannot write", path);
        failed = 1;
    }
    if (failed) {
        /* What this run wrote goes again (the case directories listed, the manifest, and
         * OUT if it made it): no half set is left to be taken for a whole one. */
        for (size_t k = 0; k < json_object_array_length(arr); k++) {
            json_object *d;
            if (json_object_object_get_ex(json_object_array_get_idx(arr, k), "dir", &d) &&
                !join(dir, sizeof dir, out, json_object_get_string(d)))
                (void)remove_tree(dir);
        }
        unlink(path);
        if (made_out)
            rmdir(out);
        n = -1;
    }
    json_object_put(man);
    return n;
}

/* ---- check ------------------------------------------------------------------------------ */

/* 1 if dir/name has a directory entry of any kind (a file, a directory, a FIFO, a
 * symbolic link, dangling or not), 0 if it has none or the path does not fit. Absent means
 * no entry at all: an output or a skip marker that cannot be read is the case's error,
 * never taken for an absent one (an lse.npy that is a dangling link went unjudged). */
static int has_entry(const char *dir, const char *name)
{
    char path[FPATH];
    struct stat st;
    return !join(path, sizeof path, dir, name) && lstat(path, &st) == 0;
}

/* An attention or softmax case (q.npy, x.npy), or a merge case (o_parts.npy or
 * lse_parts.npy, SPEC 7.1). */
static int is_case_dir(const char *dir)
{
    return has_entry(dir, "q.npy") || has_entry(dir, "x.npy") || has_entry(dir, "o_parts.npy") ||
           has_entry(dir, "lse_parts.npy");
}

/* The reader's message for dir/file, said better for a symbolic link to nothing. */
static void explain_unreadable(const char *dir, const char *file, char *err, size_t errlen)
{
    char path[FPATH];
    struct stat st;
    if (!join(path, sizeof path, dir, file) && lstat(path, &st) == 0 && S_ISLNK(st.st_mode) &&
        stat(path, &st) != 0)
        snprintf(err, errlen,
                 "a dangling symbolic link (its target does not exist; a file is absent only "
                 "when the case directory has no entry of that name)");
}

/* A Fortran-ordered array (as np.save writes a transposed one) rewritten in C order. */
static int to_c_order(smattn_npy *a)
{
    unsigned char *c = malloc((size_t)(a->count ? a->count : 1) * a->itemsize);
    if (!c)
        return -1;
    for (int64_t e = 0; e < a->count; e++) {
        int64_t rest = e, off = 0;
        for (int r = a->rank - 1; r >= 0; r--) {
            off += (rest % a->shape[r]) * a->stride[r];
            rest /= a->shape[r];
        }
        memcpy(c + (size_t)e * a->itemsize, (unsigned char *)a->data + (size_t)off * a->itemsize,
               a->itemsize);
    }
    free(a->data);
    a->data = c;
    a->fortran_order = 0;
    return 0;
}

/* Read OUTPUT.npy of a case; 1 if absent, -1 (err) if malformed, 0 with got filled. */
/* "want [B,S,Hq,Dv] = [1,4,8,16]" appended to err: the shape an output must have */
static void append_want(char *err, size_t errlen, int rank, const char *const *names,
                        const int64_t *w)
{
    snprintf(err + strlen(err), errlen - strlen(err), "want [");
    for (int r = 0; r < rank; r++)
        snprintf(err + strlen(err), errlen - strlen(err), "%s%s", r ? "," : "", names[r]);
    snprintf(err + strlen(err), errlen - strlen(err), "] = [");
    for (int r = 0; r < rank; r++)
        snprintf(err + strlen(err), errlen - strlen(err), "%s%lld", r ? "," : "", (long long)w[r]);
    snprintf(err + strlen(err), errlen - strlen(err), "]");
}

/* "file: " in front of the reader's message in err. */
static void put_name(const char *file, char *err, size_t errlen)
{
    size_t fl = strlen(file), el = strlen(err);
    if (fl + 2 + el < errlen) {
        memmove(err + fl + 2, err, el + 1);
        memcpy(err, file, fl);
        memcpy(err + fl, ": ", 2);
    }
}

static int read_array(const char *dir, const char *file, int rank, const int64_t w[4],
                      const int64_t stride[4], const char *const *names, smattn_npy *a,
                      smattn_out_tensor *got, char *err, size_t errlen);

static int read_output(const char *dir, const char *file, const smattn_case *c, int t,
                       smattn_npy *a, smattn_out_tensor *got, char *err, size_t errlen)
{
    int64_t w[4], stride[4];
    int rank = smattn_case_out_layout(c, t, w, stride);
    static const char *const dn[3][4] = {
        {"B", "S", "Hq", "Dv"}, {"B", "Hq", "S", ""}, {"B", "Hq", "S", "T"}};
    static const char *const packed[2][3] = {{"total_q", "Hq", "Dv"}, {"Hq", "total_q", ""}};
    const char *const *names = c->packed_q && t < 2 ? packed[t] : dn[t] + (c->rank == 3);
    return read_array(dir, file, rank, w, stride, names, a, got, err, errlen);
}

/* A gradient of a backward case (t: 0 dq [B,S,Hq,D], 1 dk [B,T,Hkv,D], 2 dv [B,T,Hkv,Dv],
 * 3-D without B in the case's 3-D convention; 3 dbias in bias.npy's own shape, [B,Hq,S,T]
 * without a bias; 4 dsinks [Hq]), as read_output. */
static int read_grad(const char *dir, const char *file, const smattn_case *c, int t,
                     smattn_npy *a, smattn_out_tensor *got, char *err, size_t errlen)
{
    const smattn_problem *p = &c->prob;
    int64_t w[4], stride[4];
    if (t >= 3) { /* the shapes `smattn ref` writes them in (a dbias stride 0 sums) */
        static const char *const bn[4] = {"B", "Hq", "S", "T"}, *const sn[1] = {"Hq"};
        const int rank = smattn_case_out_layout(c, 3 + t, w, stride);
        return read_array(dir, file, rank, w, stride, t == 4 ? sn : bn + (4 - rank), a, got, err,
                          errlen);
    }
    const int64_t n[3][4] = {{p->B, p->S, p->Hq, p->D}, {p->B, p->T, p->Hkv, p->D},
                             {p->B, p->T, p->Hkv, p->Dv}};
    static const char *const dn[3][4] = {
        {"B", "S", "Hq", "D"}, {"B", "T", "Hkv", "D"}, {"B", "T", "Hkv", "Dv"}};
    if (c->has_layout) { /* SPEC 10.1: dQ in Q's storage, dK and dV in K's and V's */
        static const char *const packed[3][3] = {
            {"total_q", "Hq", "D"}, {"total_k", "Hkv", "D"}, {"total_k", "Hkv", "Dv"}};
        static const char *const nhd[2][4] = {{"num_pages", "page_size", "Hkv", "D"},
                                              {"num_pages", "page_size", "Hkv", "Dv"}};
        static const char *const hnd[2][4] = {{"num_pages", "Hkv", "page_size", "D"},
                                              {"num_pages", "Hkv", "page_size", "Dv"}};
        const int rank = smattn_case_out_layout(c, 3 + t, w, stride);
        const char *const *names = dn[t] + (4 - rank);
        if (t == 0 && c->packed_q)
            names = packed[0];
        else if (t > 0 && c->packed_k)
            names = packed[t];
        else if (t > 0 && c->paged)
            names = c->json.kv_hnd ? hnd[t - 1] : nhd[t - 1];
        return read_array(dir, file, rank, w, stride, names, a, got, err, errlen);
    }
    stride[3] = 1;
    for (int k = 2; k >= 0; k--)
        stride[k] = stride[k + 1] * n[t][k + 1];
    const int drop = c->rank == 3;
    for (int k = drop; k < 4; k++)
        w[k - drop] = n[t][k];
    return read_array(dir, file, 4 - drop, w, stride, dn[t] + drop, a, got, err, errlen);
}

static int read_array(const char *dir, const char *file, int rank, const int64_t w[4],
                      const int64_t stride[4], const char *const *names, smattn_npy *a,
                      smattn_out_tensor *got, char *err, size_t errlen)
{
    char path[FPATH];
    if (!has_entry(dir, file))
        return 1;
    if (join(path, sizeof path, dir, file)) {
        snprintf(err, errlen, "%s: the path is too long", file);
        return -1;
    }
    /* The header first, checked against the case; the data only then (a wrong 2 GiB o.npy
     * was read whole before its shape was looked at). */
    if (smattn_npy_read_header(path, a, err, errlen)) {
        explain_unreadable(dir, file, err, errlen);
        put_name(file, err, errlen);
        /* and the shape wanted (a rank the reader refuses names it too) */
        snprintf(err + strlen(err), errlen - strlen(err), "; ");
        append_want(err, errlen, rank, names, w);
        return -1;
    }
    int ok = a->rank == rank;
    for (int r = 0; ok && r < rank; r++)
        ok = a->shape[r] == w[r];
    smattn_dtype dt;
    switch (a->type) {
    case SMATTN_NPY_F64: dt = SMATTN_F64; break;
    case SMATTN_NPY_F32: dt = SMATTN_F32; break;
    case SMATTN_NPY_F16: dt = SMATTN_F16; break;
    case SMATTN_NPY_U16:
    case SMATTN_NPY_BF16: dt = SMATTN_BF16; break;
    default: ok = 0, dt = SMATTN_F32; break;
    }
    if (!ok) {
        static const char *const dtn[] = {"f64", "f32", "f16", "bf16", "u2"};
        const char *tn = a->type == SMATTN_NPY_F64    ? dtn[0]
                         : a->type == SMATTN_NPY_F32  ? dtn[1]
                         : a->type == SMATTN_NPY_F16  ? dtn[2]
                         : a->type == SMATTN_NPY_BF16 ? dtn[3]
                         : a->type == SMATTN_NPY_U16  ? dtn[4]
                                                      : "not a float type";
        snprintf(err, errlen, "%s: got shape [", file);
        for (int r = 0; r < a->rank; r++)
            snprintf(err + strlen(err), errlen - strlen(err), "%s%lld", r ? "," : "",
                     (long long)a->shape[r]);
        snprintf(err + strlen(err), errlen - strlen(err), "] (%s), ", tn);
        append_want(err, errlen, rank, names, w);
        snprintf(err + strlen(err), errlen - strlen(err),
                 " (f64, f32, f16, or bf16 as u2; C or Fortran order)");
        return -1;
    }
    if (smattn_npy_read_data(path, a, err, errlen)) { /* what the header promised */
        explain_unreadable(dir, file, err, errlen);
        put_name(file, err, errlen);
        return -1;
    }
    if (a->fortran_order && to_c_order(a)) {
        snprintf(err, errlen, "%s: out of memory", file);
        return -1;
    }
    got->data = a->data;
    got->dtype = dt;
    memcpy(got->stride, stride, sizeof got->stride);
    return 0;
}

/* --skip P1,P2: name starts with one of the prefixes. */
static int skipped_by(const char *prefixes, const char *name)
{
    for (const char *s = prefixes; s && *s;) {
        size_t n = strcspn(s, ",");
        if (n && strncmp(name, s, n) == 0)
            return 1;
        s += n + (s[n] == ',');
    }
    return 0;
}

/* A `skip` file in the case directory: the kernel does not support the case; its first
 * line is the reason. 1 (reason in out) if present, 0 if absent, -1 (why in out) if it is
 * there and cannot be read as a regular file of at most SKIP_MAX bytes (a FIFO would block
 * the check, a directory or a dangling link is no reason to skip). */
#define SKIP_MAX ((size_t)64 << 10)
static int skip_marker(const char *dir, char *out, size_t cap)
{
    if (!has_entry(dir, "skip"))
        return 0;
    char path[FPATH], why[300];
    size_t len = 0;
    char *text = join(path, sizeof path, dir, "skip")
                     ? NULL
                     : smattn_io_read_text(path, SKIP_MAX, &len, why, sizeof why);
    if (!text) {
        if (!path[0])
            snprintf(why, sizeof why, "the path is too long");
        explain_unreadable(dir, "skip", why, sizeof why);
        snprintf(out, cap, "skip: %s (a skip marker is a regular file; its first line the reason)",
                 why);
        return -1;
    }
    text[strcspn(text, "\r\n")] = '\0';
    snprintf(out, cap, "skipped by the kernel (skip file): %.300s",
             text[0] ? text : "no reason given");
    free(text);
    return 1;
}

/* A ragged or paged case is judged as its dense, padded twin (SPEC 2.7): the inputs
 * gathered into dense arrays, the outputs scattered into [B,S,Hq,Dv] and [B,Hq,S]. Rows
 * the layout does not have (i >= S_b of packed queries; a dense Q with q_lens has them,
 * judged as the twin's empty rows) are not the kernel's: their O and LSE are not judged,
 * nor counted (conform_judge_twin); indices in the report are the twin's. */
static void judge_twin(const smattn_case *c, const smattn_outputs *got, const smattn_precision *pm,
                       const conform_sample *sample, conform_result *r)
{
    smattn_case_twin tw;
    smattn_outputs dense;
    memset(&dense, 0, sizeof dense);
    char why[300];
    if (smattn_case_twin_make(c, &tw, why, sizeof why)) {
        snprintf(r->reason, sizeof r->reason, "%s", why);
        return;
    }
    const smattn_problem *p = &tw.prob;
    smattn_status st;
    if (smattn_case_twin_outputs(c, got, NULL, &dense)) {
        snprintf(r->reason, sizeof r->reason, "out of memory");
    } else if ((st = smattn_validate(p, &tw.in, &dense)) != SMATTN_OK) {
        snprintf(r->reason, sizeof r->reason, "invalid case: %s (%s)", smattn_status_str(st),
                 smattn_status_name(st));
    } else
        conform_judge_twin(p, &tw.in, &dense, pm, 0, 0, sample, c->packed_q ? p->q_lens : NULL, r);
    smattn_case_twin_outputs_free(&dense);
    smattn_case_twin_free(&tw);
}

/* The gradients a backward case's directory holds (dq.npy, dk.npy, dv.npy: all three or
 * none; with them, dbias.npy and dsinks.npy when present), judged against
 * smattn_ref_backward under smattn_backward_bound (SPEC 10.7) for the model pm in both
 * passes, O and LSE stored in the dtypes of o.npy and lse.npy; the verdict joined to the
 * forward's in r (a forward failure is reported first). */
static void check_grads(const char *dir, const smattn_case *c, const smattn_outputs *fwd,
                        const smattn_precision *pm, conform_result *r)
{
    static const char *const files[5] = {"dq.npy", "dk.npy", "dv.npy", "dbias.npy", "dsinks.npy"};
    smattn_npy arr[5];
    memset(arr, 0, sizeof arr);
    smattn_grad_outputs got;
    memset(&got, 0, sizeof got);
    smattn_out_tensor *gt[5] = {&got.dq, &got.dk, &got.dv, &got.dbias, &got.dsinks};
    char err[400];
    int present = 0, missing = -1, bad = 0;
    for (int t = 0; t < 5 && !bad; t++) {
        int rc = read_grad(dir, files[t], c, t, &arr[t], gt[t], err, sizeof err);
        if (rc < 0) {
            r->status = CONFORM_FAIL;
            snprintf(r->reason, sizeof r->reason, "%s", err);
            bad = 1;
        } else if (rc == 0 && t == 3 && c->prob.alibi_mode == SMATTN_ALIBI_MASK) {
            r->status = CONFORM_FAIL;
            snprintf(r->reason, sizeof r->reason,
                     "dbias.npy: under alibi_mode mask the bias is a distance mask; its "
                     "gradient is not defined (SPEC 10.1)");
            bad = 1;
        } else if (rc > 0 && t < 3) {
            missing = missing < 0 ? t : missing;
        } else if (rc == 0 && t < 3) {
            present++;
        }
    }
    if (!bad && !present && (got.dbias.data || got.dsinks.data)) {
        r->status = CONFORM_FAIL;
        snprintf(r->reason, sizeof r->reason,
                 "%s without dq.npy, dk.npy and dv.npy: the gradients are judged together",
                 got.dbias.data ? files[3] : files[4]);
    } else if (!bad && present && missing >= 0) {
        r->status = CONFORM_FAIL;
        snprintf(r->reason, sizeof r->reason,
                 "%s missing: the gradients are judged together (dq.npy, dk.npy and dv.npy, "
                 "or none)",
                 files[missing]);
    } else if (!bad && present == 3) {
        smattn_backward_precision bpm;
        bpm.fwd = *pm;
        bpm.bwd = *pm;
        bpm.o_dtype = fwd->o.data ? fwd->o.dtype : SMATTN_F32;
        bpm.lse_dtype = fwd->lse.data ? fwd->lse.dtype : bpm.o_dtype;
        conform_result g;
        memset(&g, 0, sizeof g);
        conform_judge_backward_result(&c->prob, &c->in, &c->gin, &got, &bpm, &g);
        r->elements += g.elements;
        r->mismatched += g.mismatched;
        r->nonfinite += g.nonfinite;
        if (g.max_ratio > r->max_ratio || g.max_ratio != g.max_ratio)
            r->max_ratio = g.max_ratio;
        if (g.status == CONFORM_FAIL && r->status != CONFORM_FAIL) {
            r->status = CONFORM_FAIL;
            r->worst_out = -1;
            r->worst_got = g.worst_got, r->worst_exact = g.worst_exact;
            r->worst_bound = g.worst_bound;
            snprintf(r->reason, sizeof r->reason, "gradients: %.490s", g.reason);
        } else if (g.status == CONFORM_SKIP && r->status == CONFORM_PASS) {
            /* the oracle could not decide a gradient: the case is not judged whole */
            r->status = CONFORM_SKIP;
            snprintf(r->reason, sizeof r->reason,
                     "%.440s; the forward's outputs are within "
                     "their bounds",
                     g.reason);
        }
    }
    for (int t = 0; t < 5; t++)
        smattn_npy_free(&arr[t]);
}

/* A merge case (SPEC 7.1, 9): its o.npy (and lse.npy when present) judged against the exact
 * merge (smattn_ref_merge) under smattn_merge_bound for the model pm with its sums taken
 * as serial (acc_len 0), as the merge battery judges a plugin's merge; every element (a
 * merge is cheap: --rows does not sample it). */
static void check_merge(const char *dir, const smattn_precision *pm, conform_result *r)
{
    smattn_merge_case mc;
    char err[400];
    if (smattn_merge_case_load(dir, &mc, err, sizeof err)) {
        snprintf(r->reason, sizeof r->reason, "cannot load the case: %s", err);
        return;
    }
    const smattn_merge_problem *p = &mc.prob;
    int64_t s[7] = {p->B, p->S, 0, p->Hq, 0, 0, p->Dv};
    memcpy(r->shape, s, sizeof s);
    smattn_case wc; /* the outputs' shapes, as smattn ref writes them */
    smattn_merge_case_as_case(&mc, &wc);
    smattn_npy arr[2];
    memset(arr, 0, sizeof arr);
    smattn_outputs got, ex, bd;
    memset(&got, 0, sizeof got);
    double *buf = NULL;
    int rc[2] = {1, 1};
    for (int t = 0; t < 2; t++) {
        rc[t] = read_output(dir, t ? "lse.npy" : "o.npy", &wc, t, &arr[t],
                            t ? &got.lse : &got.o, err, sizeof err);
        if (rc[t] < 0) {
            snprintf(r->reason, sizeof r->reason, "%s", err);
            goto done;
        }
    }
    if (rc[0] > 0) {
        snprintf(r->reason, sizeof r->reason,
                 "o.npy missing: run the merge on the case and save its output there");
        goto done;
    }
    const int64_t cnt[2] = {p->B * p->S * p->Hq * p->Dv, rc[1] ? 0 : p->B * p->Hq * p->S};
    buf = malloc((size_t)(2 * (cnt[0] + cnt[1])) * sizeof *buf); /* sizes checked at load */
    if (!buf) {
        snprintf(r->reason, sizeof r->reason, "out of memory");
        goto done;
    }
    ex = got, bd = got;
    ex.o.data = buf, ex.o.dtype = SMATTN_F64;
    bd.o.data = buf + cnt[0], bd.o.dtype = SMATTN_F64;
    if (cnt[1]) {
        ex.lse.data = buf + 2 * cnt[0], ex.lse.dtype = SMATTN_F64;
        bd.lse.data = buf + 2 * cnt[0] + cnt[1], bd.lse.dtype = SMATTN_F64;
    }
    smattn_precision mp = *pm;
    mp.acc_len = 0;
    smattn_ref_config cfg = {0};
    smattn_status st = smattn_ref_merge(p, &mc.in, &ex, &cfg);
    if (st == SMATTN_OK)
        st = smattn_merge_bound(p, &mc.in, &mp, &got, &bd);
    if (st != SMATTN_OK) {
        snprintf(r->reason, sizeof r->reason, "could not judge: %s (%s)", smattn_status_str(st),
                 smattn_status_name(st));
        goto done;
    }
    r->status = CONFORM_PASS;
    r->pm = mp;
    r->has_pm = 1;
    const smattn_out_tensor *gt[2] = {&got.o, &got.lse};
    const double *exv[2] = {ex.o.data, ex.lse.data}, *bdv[2] = {bd.o.data, bd.lse.data};
    for (int t = 0; t < 2; t++)
        for (int64_t e = 0; e < cnt[t]; e++) {
            double g = smattn_load(gt[t]->data, gt[t]->dtype, e);
            double ratio = smattn_error_ratio(g, exv[t][e], bdv[t][e]);
            r->elements++;
            r->nonfinite += !isfinite(g) && isfinite(exv[t][e]);
            if (ratio > r->max_ratio || !(ratio == ratio)) {
                r->max_ratio = ratio;
                r->worst_out = t, r->worst_got = g, r->worst_exact = exv[t][e];
                r->worst_bound = bdv[t][e];
            }
            if (!(ratio <= 1)) {
                r->mismatched++;
                if (r->status == CONFORM_PASS)
                    snprintf(r->reason, sizeof r->reason,
                             "error/bound ratio %.4g at %s element %lld: got %.9g, exact %.9g, "
                             "bound %.3g (SPEC 9.5)",
                             ratio, t ? "LSE" : "O", (long long)e, g, exv[t][e], bdv[t][e]);
                r->status = CONFORM_FAIL;
            }
        }
done:
    free(buf);
    smattn_npy_free(&arr[0]);
    smattn_npy_free(&arr[1]);
    smattn_merge_case_free(&mc);
}

/* Whether the outputs in dir are to be judged: the set smattn ref/opt wrote is whole
 * (smattn_case_outputs_verify; else r fails with its reason), and its marker does not say
 * the oracle wrote it: outputs of `smattn ref` would be the oracle judged against itself, a
 * pass that says nothing of a kernel (a kernel that wrote nothing over them, say), so such
 * a case is skipped with a reason that says so. 0 to judge, nonzero with r set. */
static int outputs_verify(const char *dir, conform_result *r)
{
    char writer[8];
    if (smattn_case_outputs_verify_writer(dir, writer, sizeof writer, r->reason, sizeof r->reason))
        return -1;
    if (strcmp(writer, "ref") != 0)
        return 0;
    r->status = CONFORM_SKIP;
    snprintf(r->reason, sizeof r->reason,
             "%s (.smattn-set: written by smattn ref), not a kernel's: write the kernel's "
             "outputs here, or judge the built-in kernel's (smattn opt)",
             CONFORM_SKIP_ORACLE_OUTPUTS);
    return 1;
}

static void check_one(const char *dir, const char *name, const char *category,
                      const smattn_precision *pm, const char *skip, const conform_sample *sample,
                      conform_result *r)
{
    memset(r, 0, sizeof *r);
    snprintf(r->name, sizeof r->name, "%s", name);
    snprintf(r->category, sizeof r->category, "%s", category);
    r->status = CONFORM_FAIL;
    smattn_case c;
    char err[400];
    int marker = skip_marker(dir, r->reason, sizeof r->reason);
    if (marker < 0)
        return; /* failed, with the reason */
    if (marker) {
        r->status = CONFORM_SKIP;
    } else if (skipped_by(skip, name)) {
        r->status = CONFORM_SKIP;
        snprintf(r->reason, sizeof r->reason, "skipped by --skip");
    }
    if (smattn_merge_case_is(dir)) {
        snprintf(r->category, sizeof r->category, "%s", "merge");
        r->worst_out = -1;
        if (r->status == CONFORM_SKIP) { /* a skip marker does not excuse a broken case */
            smattn_merge_case mc;
            if (smattn_merge_case_load(dir, &mc, err, sizeof err)) {
                r->status = CONFORM_FAIL;
                snprintf(r->reason, sizeof r->reason, "cannot load the case: %s", err);
            } else {
                smattn_merge_case_free(&mc);
            }
            return;
        }
        r->status = CONFORM_FAIL;
        if (!outputs_verify(dir, r))
            check_merge(dir, pm, r);
        return;
    }
    if (smattn_case_load(dir, &c, err, sizeof err)) {
        r->status = CONFORM_FAIL; /* a skip marker does not excuse a broken case */
        snprintf(r->reason, sizeof r->reason, "cannot load the case: %s", err);
        return;
    }
    const smattn_problem *p = &c.prob;
    int64_t s[7] = {p->B, p->S, p->T, p->Hq, p->Hkv, p->D, p->Dv};
    memcpy(r->shape, s, sizeof s);
    r->caps = conform_problem_caps(p, &c.in);
    if (r->status == CONFORM_SKIP) {
        smattn_case_free(&c);
        return;
    }
    /* Outputs smattn ref/opt wrote as a set are judged only when the set is whole, and the
     * oracle's own are not judged at all. */
    if (outputs_verify(dir, r)) {
        smattn_case_free(&c);
        return;
    }
    static const char *const files[3] = {"o.npy", "lse.npy", "p.npy"};
    smattn_npy arr[3];
    memset(arr, 0, sizeof arr);
    smattn_outputs got;
    memset(&got, 0, sizeof got);
    smattn_out_tensor *gt[3] = {&got.o, &got.lse, &got.p};
    int att = p->op == SMATTN_OP_ATTENTION, bad = 0;
    for (int t = 0; t < 3 && !bad; t++) {
        if (t == 0 && !att)
            continue;
        int rc = read_output(dir, files[t], &c, t, &arr[t], gt[t], err, sizeof err);
        if (rc < 0) {
            snprintf(r->reason, sizeof r->reason, "%s", err);
            bad = 1;
        } else if (rc > 0 && (t == 0 || (t == 2 && !att))) {
            snprintf(r->reason, sizeof r->reason,
                     "%s missing: run the kernel on the case and save its output there", files[t]);
            bad = 1;
        }
    }
    smattn_status st;
    if (!bad && c.has_layout)
        judge_twin(&c, &got, pm, sample, r);
    else if (!bad && (st = smattn_validate(p, &c.in, &got)) != SMATTN_OK) {
        snprintf(r->reason, sizeof r->reason, "invalid case: %s (%s)", smattn_status_str(st),
                 smattn_status_name(st));
    } else if (!bad) {
        /* quantised inputs (SPEC 2.9): judged as the binary64 twin of the real values */
        conform_inst qi, tw;
        memset(&qi, 0, sizeof qi);
        qi.prob = c.prob, qi.in = c.in;
        if (!conform_inst_quantised(&qi))
            conform_judge_rows(p, &c.in, &got, pm, 0, 0, sample, r); /* .npy: no padding */
        else if (conform_inst_real(&qi, &tw))
            snprintf(r->reason, sizeof r->reason, "out of memory decoding the quantised inputs");
        else {
            conform_judge_rows(&tw.prob, &tw.in, &got, pm, 0, 0, sample, r);
            conform_inst_free(&tw);
        }
    }
    if (!bad && c.backward && p->op == SMATTN_OP_ATTENTION)
        check_grads(dir, &c, &got, pm, r);
    for (int t = 0; t < 3; t++)
        smattn_npy_free(&arr[t]);
    smattn_case_free(&c);
}

typedef struct entry {
    char *dir, *name, *category;
} entry;

typedef struct entries {
    entry *e;
    size_t n, cap;
} entries;

static int cmp_entry(const void *a, const void *b)
{
    return strcmp(((const entry *)a)->name, ((const entry *)b)->name);
}

static int push(entries *es, const char *dir, const char *name, const char *cat)
{
    if (es->n == es->cap) {
        size_t nc = es->cap ? 2 * es->cap : 64;
        entry *ne = realloc(es->e, nc * sizeof *ne);
        if (!ne)
            return -1;
        es->e = ne, es->cap = nc;
    }
    entry *x = &es->e[es->n++];
    x->dir = strdup(dir);
    x->name = strdup(name);
    x->category = strdup(cat);
    return x->dir && x->name && x->category ? 0 : -1;
}

/* A manifest of gen lists a few hundred cases in a few hundred KiB. */
#define MANIFEST_MAX ((size_t)64 << 20)
/* How deep `check DIR` looks for case directories (a symbolic link to a directory that is
 * not a case is not followed, so no loop; the bound keeps a huge tree cheap to refuse). */
#define CHECK_MAX_DEPTH 8

/* The cases of the manifest of smattn gen in dir, named prefix + their name, read with the
 * strict JSON reader (a file of bounded size, never a FIFO). */
static int from_manifest(const char *dir, const char *prefix, entries *es, char *err, size_t errlen)
{
    char path[FPATH], sub[FPATH], name[FPATH], why[300];
    char q[SMATTN_IO_PATH_MAX];
    size_t len = 0;
    if (join(path, sizeof path, dir, "manifest.json")) {
        snprintf(err, errlen, "%s/manifest.json: the path is too long", smattn_io_path(dir, q));
        return -1;
    }
    char *text = smattn_io_read_text(path, MANIFEST_MAX, &len, why, sizeof why);
    json_object *man = text ? smattn_io_parse_json(text, len, why, sizeof why) : NULL, *cases;
    free(text);
    if (!man) {
        snprintf(err, errlen, "%s: %s", smattn_io_path(path, q), why);
        return -1;
    }
    int rc = 0;
    if (!json_object_object_get_ex(man, "cases", &cases) ||
        !json_object_is_type(cases, json_type_array)) {
        snprintf(err, errlen, "%s: not a manifest of smattn gen (no \"cases\" array)",
                 smattn_io_path(path, q));
        rc = -1;
    }
    for (size_t k = 0; !rc && k < json_object_array_length(cases); k++) {
        json_object *c = json_object_array_get_idx(cases, k), *d, *nm, *cat;
        const char *dn =
            json_object_object_get_ex(c, "dir", &d) && json_object_is_type(d, json_type_string)
                ? json_object_get_string(d)
                : NULL;
        const char *nms =
            json_object_object_get_ex(c, "name", &nm) && json_object_is_type(nm, json_type_string)
                ? json_object_get_string(nm)
                : dn;
        const char *cats = json_object_object_get_ex(c, "category", &cat) &&
                                   json_object_is_type(cat, json_type_string)
                               ? json_object_get_string(cat)
                               : "case";
        if (!dn) {
            snprintf(err, errlen, "%s: case %zu has no \"dir\" string", smattn_io_path(path, q), k);
            rc = -1;
        } else if (!dn[0] || strstr(dn, "..") || strchr(dn, '/')) {
            char qd[SMATTN_IO_PATH_MAX];
            snprintf(err, errlen, "%s: case dir %s is not a plain name", smattn_io_path(path, q),
                     smattn_io_path(dn, qd));
            rc = -1;
        } else if (join(sub, sizeof sub, dir, dn) ||
                   snprintf(name, sizeof name, "%s%s", prefix, nms) >= (int)sizeof name) {
            snprintf(err, errlen, "%s: case %zu: the path is too long", smattn_io_path(path, q), k);
            rc = -1;
        } else if (push(es, sub, name, cats)) {
            snprintf(err, errlen, "out of memory");
            rc = -1;
        }
    }
    json_object_put(man);
    return rc;
}

/* The case directories under root/rel (rel "" for root itself), named by their path
 * relative to root: a directory holding q.npy, x.npy or o_parts.npy (is_case_dir) is a case;
 * one below root holding a manifest.json gives the manifest's cases; any other directory is
 * looked into, to CHECK_MAX_DEPTH levels. Names starting with '.' are passed over. */
static int scan(const char *root, const char *rel, int depth, entries *es, char *err, size_t errlen)
{
    char path[FPATH], sub[FPATH], subrel[FPATH];
    char q[SMATTN_IO_PATH_MAX];
    if (rel[0] ? join(path, sizeof path, root, rel)
               : snprintf(path, sizeof path, "%s", root) >= (int)sizeof path) {
        snprintf(err, errlen, "%s/%s: the path is too long", smattn_io_path(root, q), rel);
        return -1;
    }
    if (depth > 0 && has_entry(path, "manifest.json")) {
        if (snprintf(subrel, sizeof subrel, "%s/", rel) >= (int)sizeof subrel)
            return -1;
        return from_manifest(path, subrel, es, err, errlen);
    }
    DIR *d = opendir(path);
    if (!d) {
        snprintf(err, errlen, "%s: cannot list it: %s", smattn_io_path(path, q), strerror(errno));
        return -1;
    }
    struct dirent *de;
    int rc = 0;
    while (!rc && (de = readdir(d))) {
        if (de->d_name[0] == '.')
            continue;
        struct stat st;
        if (join(sub, sizeof sub, path, de->d_name) ||
            (rel[0] ? join(subrel, sizeof subrel, rel, de->d_name)
                    : snprintf(subrel, sizeof subrel, "%s", de->d_name) >= (int)sizeof subrel)) {
            snprintf(err, errlen, "%s/%s: the path is too long", smattn_io_path(path, q),
                     de->d_name);
            rc = -1;
        } else if (is_case_dir(sub)) {
            if (push(es, sub, subrel, "case")) {
                snprintf(err, errlen, "out of memory");
                rc = -1;
            }
        } else if (depth + 1 < CHECK_MAX_DEPTH && lstat(sub, &st) == 0 && S_ISDIR(st.st_mode)) {
            rc = scan(root, subrel, depth + 1, es, err, errlen);
        }
    }
    closedir(d);
    return rc;
}

/* The cases under root: its manifest's, or every case directory found below it. */
static int list_cases(const char *root, entries *es, char *err, size_t errlen)
{
    int rc = has_entry(root, "manifest.json") ? from_manifest(root, "", es, err, errlen)
                                              : scan(root, "", 0, es, err, errlen);
    if (!rc && es->n && !has_entry(root, "manifest.json"))
        qsort(es->e, es->n, sizeof *es->e, cmp_entry);
    return rc;
}

int conform_check_path(const char *path, const smattn_precision *pm, const char *skip,
                       const conform_shard *shard, conform_progress_fn progress,
                       conform_result **res, size_t *n, char *err, size_t errlen)
{
    return conform_check_path_rows(path, pm, skip, shard, NULL, progress, res, n, err, errlen);
}

int conform_check_path_rows(const char *path, const smattn_precision *pm, const char *skip,
                            const conform_shard *shard, const conform_sample *sample,
                            conform_progress_fn progress, conform_result **res, size_t *n,
                            char *err, size_t errlen)
{
    *res = NULL;
    *n = 0;
    entries es = {NULL, 0, 0};
    int rc = 0;
    if (is_case_dir(path)) {
        const char *base = strrchr(path, '/');
        rc = push(&es, path, base && base[1] ? base + 1 : path, "case");
        if (rc)
            snprintf(err, errlen, "out of memory");
    } else {
        rc = list_cases(path, &es, err, errlen);
        if (!rc && es.n == 0) {
            char q[SMATTN_IO_PATH_MAX];
            snprintf(err, errlen,
                     "%s: no case directory (q.npy, x.npy or o_parts.npy) here or below",
                     smattn_io_path(path, q));
            rc = -1;
        }
    }
    if (!rc && !(*res = calloc(es.n ? es.n : 1, sizeof **res))) {
        snprintf(err, errlen, "out of memory");
        rc = -1;
    }
    /* the shard's cases (--shard I/N), each keeping its index in the whole listing so that
     * merged shard reports come back in the unsharded order */
    size_t mine = 0, done = 0;
    for (size_t k = 0; !rc && k < es.n; k++)
        mine += conform_shard_has(shard, es.e[k].name) != 0;
    for (size_t k = 0; !rc && k < es.n; k++) {
        if (!conform_shard_has(shard, es.e[k].name))
            continue;
        if (progress)
            progress(done, mine, es.e[k].name);
        conform_result *r = &(*res)[done++];
        check_one(es.e[k].dir, es.e[k].name, es.e[k].category, pm, skip, sample, r);
        r->index = (int64_t)k;
    }
    if (!rc && progress)
        progress(mine, mine, "");
    if (!rc)
        *n = done;
    for (size_t k = 0; k < es.n; k++)
        free(es.e[k].dir), free(es.e[k].name), free(es.e[k].category);
    free(es.e);
    return rc;
}
