/* SPDX-License-Identifier: MIT */
/* merge_case.c: merge case directories (SPEC 7.1): o_parts.npy, lse_parts.npy and
 * case.json's merge keys, checked against each other before any data is read. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "io/merge_case.h"
#include "io/util.h"

#define MERGE_JSON_MAX 4096

enum { BF16_O = 1, BF16_LSE = 2 };

static int exists(const char *dir, const char *name)
{
    char *p = smattn_io_join_path(dir, name);
    struct stat st;
    int rc = p && lstat(p, &st) == 0;
    free(p);
    return rc;
}

int smattn_merge_case_is(const char *dir)
{
    return exists(dir, "o_parts.npy") || exists(dir, "lse_parts.npy");
}

/* One of the strings names[0..n) -> *idx; the key names the error. */
static int choice(json_object *v, const char *key, const char *const *names, int n, int *idx,
                  char *err, size_t errlen)
{
    const char *s = json_object_is_type(v, json_type_string) ? json_object_get_string(v) : NULL;
    for (int k = 0; s && k < n; k++)
        if (strcmp(s, names[k]) == 0)
            return *idx = k, 0;
    char want[128] = "";
    for (int k = 0; k < n; k++)
        snprintf(want + strlen(want), sizeof want - strlen(want), "%s\"%s\"",
                 k == 0 ? "" : k == n - 1 ? " or " : ", ", names[k]);
    smattn_io_err(err, errlen, "\"%s\" must be %s", key, want);
    return -1;
}

static int parse_json(json_object *obj, smattn_merge_problem *p, unsigned *bf16, char *err,
                      size_t errlen)
{
    static const char *const bases[] = {"e", "2"}, *const parts[] = {"neg_inf", "pos_inf"},
                             *const rows[] = {"zero", "nan"},
                             *const lses[] = {"neg_inf", "pos_inf", "zero"},
                             *const arrays[] = {"o_parts", "lse_parts"};
    if (!json_object_is_type(obj, json_type_object)) {
        smattn_io_err(err, errlen, "the top level must be a JSON object");
        return -1;
    }
    json_object_object_foreach(obj, key, val)
    {
        int k;
        if (strcmp(key, "lse_base") == 0) {
            if (choice(val, key, bases, 2, &k, err, errlen))
                return -1;
            p->lse_base = k ? SMATTN_LSE_BASE_2 : SMATTN_LSE_BASE_E;
        } else if (strcmp(key, "empty_parts") == 0) {
            if (choice(val, key, parts, 2, &k, err, errlen))
                return -1;
            p->empty_parts = k ? SMATTN_LSE_POS_INF : SMATTN_LSE_NEG_INF;
        } else if (strcmp(key, "empty_rows") == 0) {
            if (choice(val, key, rows, 2, &k, err, errlen)) {
                if (json_object_is_type(val, json_type_string) &&
                    strcmp(json_object_get_string(val), "mean") == 0)
                    smattn_io_err(err, errlen, "\"empty_rows\" must be \"zero\" or \"nan\": "
                                               "\"mean\" needs the keys' values, which partial "
                                               "states do not carry (SPEC 9.1)");
                return -1;
            }
            p->empty_rows = k ? SMATTN_EMPTY_NAN : SMATTN_EMPTY_ZERO;
        } else if (strcmp(key, "empty_lse") == 0) {
            if (choice(val, key, lses, 3, &k, err, errlen))
                return -1;
            p->empty_lse = (smattn_empty_lse)k;
        } else if (strcmp(key, "bf16") == 0) {
            size_t n = json_object_is_type(val, json_type_array) ? json_object_array_length(val) : 0;
            if (!json_object_is_type(val, json_type_array)) {
                smattn_io_err(err, errlen, "\"bf16\" must be an array of names among o_parts, lse_parts");
                return -1;
            }
            for (size_t e = 0; e < n; e++) {
                if (choice(json_object_array_get_idx(val, e), "bf16", arrays, 2, &k, err, errlen))
                    return -1;
                *bf16 |= 1u << k;
            }
        } else {
            char shown[65];
            size_t n = 0;
            for (const char *c = key; *c && n < sizeof shown - 1; c++, n++)
                shown[n] = *c >= 0x20 && *c < 0x7f ? *c : '?';
            shown[n] = 0;
            smattn_io_err(err, errlen,
                          "unknown key \"%s\" in a merge case (known: lse_base, empty_parts, "
                          "empty_rows, empty_lse, bf16)",
                          shown);
            return -1;
        }
    }
    return 0;
}

/* The header (data 0) or the data (data 1) of dir/name into *a; a failure named "name: ". */
static int load(const char *dir, const char *name, int data, smattn_npy *a, char *err,
                size_t errlen)
{
    const int rc = smattn_io_npy_load(dir, name, data, a, err, errlen);
    if (rc > 0)
        smattn_io_err_prefix(err, errlen, name);
    return rc ? -1 : 0;
}

/* Shapes: o_parts [N,B,S,Hq,Dv] or [N,S,Hq,Dv]; lse_parts [N,B,Hq,S] or [N,Hq,S]. */
static int check_shapes(smattn_merge_case *mc, char *err, size_t errlen)
{
    const smattn_npy *o = &mc->o_parts, *l = &mc->lse_parts;
    char so[128], sl[128];
    smattn_io_shape_str(o, so, sizeof so);
    smattn_io_shape_str(l, sl, sizeof sl);
    if (o->rank != 4 && o->rank != 5) {
        smattn_io_err(err, errlen, "o_parts.npy: shape %s has rank %d; want [N,B,S,Hq,Dv] or [N,S,Hq,Dv]",
                      so, o->rank);
        return -1;
    }
    if (l->rank != o->rank - 1) {
        smattn_io_err(err, errlen, "lse_parts.npy: shape %s has rank %d; want %s with o_parts.npy %s",
                      sl, l->rank, o->rank == 5 ? "[N,B,Hq,S]" : "[N,Hq,S]", so);
        return -1;
    }
    for (int r = 0; r < o->rank; r++)
        if (o->shape[r] < 1) {
            smattn_io_err(err, errlen, "o_parts.npy: shape %s has an empty dimension", so);
            return -1;
        }
    const int d = o->rank - 4; /* 1 when B is given */
    int64_t N = o->shape[0], B = d ? o->shape[1] : 1, S = o->shape[1 + d], Hq = o->shape[2 + d],
            Dv = o->shape[3 + d];
    int64_t want[4] = {N, B, Hq, S};
    for (int r = 0; r < l->rank; r++)
        if (l->shape[r] != want[r + (d ? 0 : (r > 0))]) {
            smattn_io_err(err, errlen, "lse_parts.npy: shape %s does not match o_parts.npy %s (want %s)",
                          sl, so, d ? "[N,B,Hq,S]" : "[N,Hq,S]");
            return -1;
        }
    smattn_merge_problem *p = &mc->prob;
    p->N = N, p->B = B, p->S = S, p->Hq = Hq, p->Dv = Dv;
    mc->rank = d ? 4 : 3;
    /* strides: the npy's own (C or Fortran order), the partial index first */
    smattn_tensor *to = &mc->in.o_parts, *tl = &mc->in.lse_parts;
    mc->in.o_part_stride = o->stride[0];
    to->stride[0] = d ? o->stride[1] : 0;
    for (int r = 1; r < 4; r++)
        to->stride[r] = o->stride[r + d];
    mc->in.lse_part_stride = l->stride[0];
    tl->stride[0] = d ? l->stride[1] : 0;
    tl->stride[1] = l->stride[1 + d];
    tl->stride[2] = l->stride[2 + d];
    tl->stride[3] = 0;
    return 0;
}

void smattn_merge_case_free(smattn_merge_case *mc)
{
    smattn_npy_free(&mc->o_parts);
    smattn_npy_free(&mc->lse_parts);
    memset(mc, 0, sizeof *mc);
}

int smattn_merge_case_load(const char *dir, smattn_merge_case *mc, char *err, size_t errlen)
{
    memset(mc, 0, sizeof *mc);
    mc->prob = smattn_merge_problem_default();
    unsigned bf16 = 0;
    if (exists(dir, "q.npy") || exists(dir, "x.npy")) {
        smattn_io_err(err, errlen, "o_parts.npy and lse_parts.npy make a merge case: it has no "
                                   "q.npy or x.npy");
        return -1;
    }
    if (exists(dir, "case.json")) {
        char *p = smattn_io_join_path(dir, "case.json");
        size_t len;
        char *text = p ? smattn_io_read_text(p, MERGE_JSON_MAX, &len, err, errlen) : NULL;
        free(p);
        json_object *obj = text ? smattn_io_parse_json(text, len, err, errlen) : NULL;
        free(text);
        int rc = obj ? parse_json(obj, &mc->prob, &bf16, err, errlen) : -1;
        if (obj)
            json_object_put(obj);
        if (rc) {
            smattn_io_err_prefix(err, errlen, "case.json");
            return -1;
        }
    }
    if (load(dir, "o_parts.npy", 0, &mc->o_parts, err, errlen) ||
        load(dir, "lse_parts.npy", 0, &mc->lse_parts, err, errlen) ||
        smattn_io_float_dtype(&mc->o_parts, "o_parts.npy", "o_parts", (bf16 & BF16_O) != 0, 0,
                              &mc->in.o_parts.dtype, err, errlen) ||
        smattn_io_float_dtype(&mc->lse_parts, "lse_parts.npy", "lse_parts", (bf16 & BF16_LSE) != 0,
                              0, &mc->in.lse_parts.dtype, err, errlen) ||
        check_shapes(mc, err, errlen) || load(dir, "o_parts.npy", 1, &mc->o_parts, err, errlen) ||
        load(dir, "lse_parts.npy", 1, &mc->lse_parts, err, errlen)) {
        smattn_merge_case_free(mc);
        return -1;
    }
    mc->in.o_parts.data = mc->o_parts.data;
    mc->in.lse_parts.data = mc->lse_parts.data;
    return 0;
}

void smattn_merge_case_as_case(const smattn_merge_case *mc, smattn_case *c)
{
    memset(c, 0, sizeof *c);
    c->prob = smattn_problem_default();
    c->prob.op = SMATTN_OP_ATTENTION;
    c->prob.B = mc->prob.B, c->prob.S = mc->prob.S, c->prob.Hq = mc->prob.Hq;
    c->prob.Hkv = 1, c->prob.D = 1, c->prob.T = 1, c->prob.Dv = mc->prob.Dv;
    c->rank = mc->rank;
}
