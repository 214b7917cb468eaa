/* SPDX-License-Identifier: MIT */
/* vector.c: golden vector files (spec/vectors/<name>.json) loaded exactly (vector.h). */
#include <math.h>
#include <stdalign.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/internal.h"
#include "io/util.h"
#include "io/vector.h"

/* Vector files hold a few small problems; a generous cap keeps a stray file harmless. */
#define VECTOR_MAX_BYTES ((size_t)256 << 20)

/* ---- owned memory: a list of blocks freed together ------------------------------------ */

typedef union block {
    union block *next;
    max_align_t align;
} block;

static void *vec_alloc(smattn_vector *v, size_t n)
{
    if (n > SIZE_MAX - sizeof(block))
        return NULL;
    block *b = calloc(1, sizeof(block) + n);
    if (!b)
        return NULL;
    b->next = v->owned;
    v->owned = b;
    return b + 1;
}

void smattn_vector_free(smattn_vector *v)
{
    if (!v)
        return;
    block *b = v->owned;
    while (b) {
        block *n = b->next;
        free(b);
        b = n;
    }
    memset(v, 0, sizeof *v);
}

/* ---- parsing context ------------------------------------------------------------------- */

typedef struct ctx {
    smattn_vector *v;
    char *err;
    size_t errlen;
} ctx;

#define FAIL(cx, ...) (smattn_io_err((cx)->err, (cx)->errlen, __VA_ARGS__), -1)

static int oom(ctx *cx)
{
    return FAIL(cx, "out of memory");
}

/* Keys of obj must all be in allowed (NULL-terminated). */
static int check_keys(ctx *cx, json_object *obj, const char *where, const char *const *allowed)
{
    json_object_object_foreach(obj, key, val)
    {
        (void)val;
        const char *const *a = allowed;
        while (*a && strcmp(*a, key) != 0)
            a++;
        if (!*a)
            return FAIL(cx, "%s: unknown key \"%.64s\"", where, key);
    }
    return 0;
}

static json_object *get(json_object *obj, const char *key)
{
    json_object *v = NULL;
    return json_object_object_get_ex(obj, key, &v) ? v : NULL;
}

/* A string field; with required < 0 a long value is cut short (descriptions), otherwise it
 * is an error. */
static int get_string(ctx *cx, json_object *obj, const char *key, int required, char *out,
                      size_t cap)
{
    json_object *s = get(obj, key);
    if (!s)
        return required > 0 ? FAIL(cx, "missing \"%s\"", key) : 0;
    if (!json_object_is_type(s, json_type_string))
        return FAIL(cx, "\"%s\" must be a string", key);
    if (required >= 0 && (size_t)json_object_get_string_len(s) >= cap)
        return FAIL(cx, "\"%s\" is longer than %zu characters", key, cap - 1);
    snprintf(out, cap, "%s", json_object_get_string(s));
    if ((size_t)json_object_get_string_len(s) >= cap && cap > 4)
        memcpy(out + cap - 4, "...", 4);
    return 0;
}

/* A float written as a C99 hex string, or "inf", "-inf", "nan". Hex is converted exactly
 * by strtod whenever it has at most 53 significant bits, which every binary64 has. */
static int parse_float(const char *s, double *out)
{
    if (strcmp(s, "inf") == 0)
        *out = HUGE_VAL;
    else if (strcmp(s, "-inf") == 0)
        *out = -HUGE_VAL;
    else if (strcmp(s, "nan") == 0)
        *out = (double)NAN;
    else {
        const char *h = s[0] == '-' ? s + 1 : s;
        if (h[0] != '0' || (h[1] != 'x' && h[1] != 'X'))
            return -1;
        char *end;
        *out = strtod(s, &end);
        if (end == s || *end != '\0' || !isfinite(*out))
            return -1;
    }
    return 0;
}

static int float_elem(ctx *cx, json_object *e, const char *where, size_t k, double *out)
{
    if (!json_object_is_type(e, json_type_string) || parse_float(json_object_get_string(e), out))
        return FAIL(cx,
                    "%s[%zu]: want a hex float string (\"0x1.8p+1\"), \"inf\", \"-inf\" or "
                    "\"nan\"",
                    where, k);
    return 0;
}

/* x is exactly representable in dtype t (NaN counts as representable). */
static int representable(double x, smattn_dtype t)
{
    if (isnan(x))
        return 1;
    double y = smattn__bits_to_double(smattn__round_bits(x, t), t);
    return y == x && signbit(y) == signbit(x);
}

static int dim_value(ctx *cx, json_object *obj, const char *key, int required, int64_t *out)
{
    json_object *d = get(obj, key);
    if (!d) {
        if (required)
            return FAIL(cx, "problem: missing \"%s\"", key);
        *out = 1;
        return 0;
    }
    int64_t x = json_object_get_int64(d);
    if (!json_object_is_type(d, json_type_int) || x < 1 || x > SMATTN_MAX_DIM)
        return FAIL(cx, "problem.%s: want an integer in [1, 2^32]", key);
    *out = x;
    return 0;
}

static int enum_value(ctx *cx, json_object *obj, const char *key, const char *const *names, int n,
                      int *out)
{
    json_object *s = get(obj, key);
    if (!s)
        return 0;
    if (json_object_is_type(s, json_type_string))
        for (int k = 0; k < n; k++)
            if (strcmp(json_object_get_string(s), names[k]) == 0) {
                *out = k;
                return 0;
            }
    return FAIL(cx, "problem.%s: unknown value %s", key, json_object_to_json_string(s));
}

static int hex_value(ctx *cx, json_object *obj, const char *key, double *out)
{
    json_object *s = get(obj, key);
    if (!s)
        return 0;
    if (!json_object_is_type(s, json_type_string) || parse_float(json_object_get_string(s), out))
        return FAIL(cx, "problem.%s: want a hex float string such as \"0x1p+0\"", key);
    return 0;
}

/* kv_lens / q_lens: null or B integers, stored in owned memory. */
static int lens_value(ctx *cx, json_object *obj, const char *key, const int64_t **out)
{
    json_object *a = get(obj, key);
    *out = NULL;
    if (!a || json_object_is_type(a, json_type_null))
        return 0;
    int64_t B = cx->v->prob.B;
    if (!json_object_is_type(a, json_type_array) || (int64_t)json_object_array_length(a) != B)
        return FAIL(cx, "problem.%s: want null or an array of B = %lld integers", key,
                    (long long)B);
    int64_t *l = vec_alloc(cx->v, (size_t)B * sizeof *l);
    if (!l)
        return oom(cx);
    for (int64_t b = 0; b < B; b++) {
        json_object *e = json_object_array_get_idx(a, (size_t)b);
        if (!json_object_is_type(e, json_type_int))
            return FAIL(cx, "problem.%s[%lld]: want an integer", key, (long long)b);
        l[b] = json_object_get_int64(e);
    }
    *out = l;
    return 0;
}

static int window_value(ctx *cx, json_object *obj)
{
    json_object *w = get(obj, "window");
    if (!w)
        return 0;
    if (!json_object_is_type(w, json_type_array) || json_object_array_length(w) != 2 ||
        !json_object_is_type(json_object_array_get_idx(w, 0), json_type_int) ||
        !json_object_is_type(json_object_array_get_idx(w, 1), json_type_int))
        return FAIL(cx, "problem.window: want [left, right] integers");
    cx->v->prob.window_left = json_object_get_int64(json_object_array_get_idx(w, 0));
    cx->v->prob.window_right = json_object_get_int64(json_object_array_get_idx(w, 1));
    return 0;
}

/* One ALiBi slope: a hex string whose value is a finite binary32 exactly (SPEC 2.8). */
static int slope_value(ctx *cx, json_object *e, const char *where, float *out)
{
    double x;
    if (!json_object_is_type(e, json_type_string) || parse_float(json_object_get_string(e), &x) ||
        !isfinite(x) || (double)(float)x != x)
        return FAIL(cx, "problem.alibi_slopes%s: want a hex string holding a finite binary32",
                    where);
    *out = (float)x;
    return 0;
}

/* Optional "alibi_mode" ("none", "symmetric", "one_sided", "mask") and "alibi_slopes": Hq
 * slopes, or B lists of Hq slopes (per batch), as case.json has them (SPEC 7.1). */
static int alibi_value(ctx *cx, json_object *obj)
{
    static const char *const modes[] = {"none", "symmetric", "one_sided", "mask"};
    smattn_problem *p = &cx->v->prob;
    int mode = 0;
    if (enum_value(cx, obj, "alibi_mode", modes, 4, &mode))
        return -1;
    json_object *a = get(obj, "alibi_slopes");
    if ((mode == 0) != (a == NULL))
        return FAIL(cx, "problem: \"alibi_mode\" and \"alibi_slopes\" go together");
    if (mode == 0)
        return 0;
    if (p->op != SMATTN_OP_ATTENTION)
        return FAIL(cx, "problem.alibi_mode: ALiBi is for the attention op");
    const int lists = json_object_is_type(a, json_type_array) && json_object_array_length(a) > 0 &&
                      json_object_is_type(json_object_array_get_idx(a, 0), json_type_array);
    const int64_t nl = lists ? p->B : 1;
    if (!json_object_is_type(a, json_type_array) ||
        (int64_t)json_object_array_length(a) != (lists ? p->B : p->Hq))
        return FAIL(cx, "problem.alibi_slopes: want Hq = %lld slopes or B = %lld lists of them",
                    (long long)p->Hq, (long long)p->B);
    float *s = vec_alloc(cx->v, (size_t)(nl * p->Hq) * sizeof *s);
    if (!s)
        return oom(cx);
    char where[48];
    for (int64_t b = 0; b < nl; b++) {
        json_object *row = lists ? json_object_array_get_idx(a, (size_t)b) : a;
        if (!json_object_is_type(row, json_type_array) ||
            (int64_t)json_object_array_length(row) != p->Hq)
            return FAIL(cx, "problem.alibi_slopes[%lld]: want Hq = %lld slopes", (long long)b,
                        (long long)p->Hq);
        for (int64_t h = 0; h < p->Hq; h++) {
            if (lists)
                snprintf(where, sizeof where, "[%lld][%lld]", (long long)b, (long long)h);
            else
                snprintf(where, sizeof where, "[%lld]", (long long)h);
            if (slope_value(cx, json_object_array_get_idx(row, (size_t)h), where,
                            &s[b * p->Hq + h]))
                return -1;
        }
    }
    p->alibi_mode = (smattn_alibi_mode)mode;
    p->alibi_slopes = s;
    p->alibi_slopes_per_batch = lists;
    return 0;
}

/* A merge problem (SPEC 9.1): N, B, S, Hq, Dv, lse_base, empty_parts, empty_rows (zero or
 * nan), empty_lse. prob gets B, S, Hq and Dv for the output shapes. */
static int parse_merge_problem(ctx *cx, json_object *obj)
{
    static const char *const keys[] = {"op",         "N",         "B",        "S",
                                       "Hq",         "Dv",        "lse_base", "empty_parts",
                                       "empty_rows", "empty_lse", NULL};
    static const char *const bases[] = {"e", "2"};
    static const char *const parts[] = {"neg_inf", "pos_inf"};
    static const char *const rows[] = {"zero", "nan"};
    static const char *const lse[] = {"neg_inf", "pos_inf", "zero"};
    smattn_vector *v = cx->v;
    smattn_merge_problem *m = &v->mprob;
    *m = smattn_merge_problem_default();
    int b = 0, pa = 0, r = 0, l = 0;
    if (check_keys(cx, obj, "problem", keys) || dim_value(cx, obj, "N", 1, &m->N) ||
        dim_value(cx, obj, "B", 1, &m->B) || dim_value(cx, obj, "S", 1, &m->S) ||
        dim_value(cx, obj, "Hq", 1, &m->Hq) || dim_value(cx, obj, "Dv", 1, &m->Dv) ||
        enum_value(cx, obj, "lse_base", bases, 2, &b) ||
        enum_value(cx, obj, "empty_parts", parts, 2, &pa) ||
        enum_value(cx, obj, "empty_rows", rows, 2, &r) ||
        enum_value(cx, obj, "empty_lse", lse, 3, &l))
        return -1;
    m->lse_base = (smattn_lse_base)b;
    m->empty_parts = (smattn_empty_lse)pa;
    m->empty_rows = (smattn_empty)r;
    m->empty_lse = (smattn_empty_lse)l;
    v->merge = 1;
    smattn_problem *p = &v->prob;
    *p = smattn_problem_default();
    p->op = SMATTN_OP_ATTENTION;
    p->B = m->B, p->S = m->S, p->Hq = m->Hq, p->Dv = m->Dv;
    p->T = p->Hkv = p->D = 1;
    return 0;
}

static int parse_problem(ctx *cx, json_object *obj)
{
    static const char *const keys[] = {
        "op",      "B",      "S",          "T",         "Hq",         "Hkv",
        "D",       "Dv",     "scale",      "softcap",   "causal",     "window",
        "kv_lens", "q_lens", "empty_rows", "empty_lse", "alibi_mode", "alibi_slopes",
        NULL};
    static const char *const ops[] = {"attention", "softmax", "merge"};
    static const char *const causal[] = {"none", "lower_right", "upper_left"};
    static const char *const rows[] = {"zero", "nan", "mean"};
    static const char *const lse[] = {"neg_inf", "pos_inf", "zero"};
    smattn_problem *p = &cx->v->prob;
    *p = smattn_problem_default();
    if (!obj || !json_object_is_type(obj, json_type_object))
        return FAIL(cx, "missing \"problem\" object");
    int op = -1, c = 0, r = 0, l = 0;
    if (!obj || !json_object_is_type(obj, json_type_object) ||
        enum_value(cx, obj, "op", ops, 3, &op))
        return -1;
    if (op == 2)
        return parse_merge_problem(cx, obj);
    if (check_keys(cx, obj, "problem", keys))
        return -1;
    if (op < 0)
        return FAIL(cx, "problem: missing \"op\"");
    p->op = (smattn_op)op;
    const int att = op == SMATTN_OP_ATTENTION;
    if (dim_value(cx, obj, "B", 1, &p->B) || dim_value(cx, obj, "S", 1, &p->S) ||
        dim_value(cx, obj, "T", 1, &p->T) || dim_value(cx, obj, "Hq", 1, &p->Hq) ||
        dim_value(cx, obj, "Hkv", att, &p->Hkv) || dim_value(cx, obj, "D", att, &p->D) ||
        dim_value(cx, obj, "Dv", att, &p->Dv))
        return -1;
    p->scale = att ? smattn_default_scale(p->D) : 1.0;
    if (hex_value(cx, obj, "scale", &p->scale) || hex_value(cx, obj, "softcap", &p->softcap) ||
        enum_value(cx, obj, "causal", causal, 3, &c) ||
        enum_value(cx, obj, "empty_rows", rows, 3, &r) ||
        enum_value(cx, obj, "empty_lse", lse, 3, &l) || window_value(cx, obj) ||
        lens_value(cx, obj, "kv_lens", &p->kv_lens) || lens_value(cx, obj, "q_lens", &p->q_lens) ||
        alibi_value(cx, obj))
        return -1;
    p->causal = (smattn_causal)c;
    p->empty_rows = (smattn_empty)r;
    p->empty_lse = (smattn_empty_lse)l;
    return 0;
}

/* ---- inputs ---------------------------------------------------------------------------- */

/* Product of n[0..rank), or -1 on int64 overflow. */
static int64_t count_of(const int64_t *n, int rank)
{
    int64_t c = 1;
    for (int r = 0; r < rank; r++) {
        if (n[r] != 0 && c > INT64_MAX / n[r])
            return -1;
        c *= n[r];
    }
    return c;
}

/* The logical shape of an input role and whether its dims may be 1 (broadcast). */
static int role_shape(const smattn_problem *p, const char *name, int64_t n[4], int *bcast)
{
    *bcast = 0;
    if (!strcmp(name, "q"))
        memcpy(n, (int64_t[4]){p->B, p->S, p->Hq, p->D}, 4 * sizeof *n);
    else if (!strcmp(name, "k"))
        memcpy(n, (int64_t[4]){p->B, p->T, p->Hkv, p->D}, 4 * sizeof *n);
    else if (!strcmp(name, "v"))
        memcpy(n, (int64_t[4]){p->B, p->T, p->Hkv, p->Dv}, 4 * sizeof *n);
    else if (!strcmp(name, "sinks")) {
        n[0] = p->Hq;
        return 1;
    } else {
        memcpy(n, (int64_t[4]){p->B, p->Hq, p->S, p->T}, 4 * sizeof *n);
        *bcast = strcmp(name, "x") != 0;
    }
    return 4;
}

static int parse_dtype(ctx *cx, json_object *obj, const char *where, smattn_dtype *t)
{
    static const char *const names[] = {"f64", "f32", "f16", "bf16", "bool"};
    json_object *s = get(obj, "dtype");
    if (s && json_object_is_type(s, json_type_string))
        for (int k = 0; k < 5; k++)
            if (strcmp(json_object_get_string(s), names[k]) == 0) {
                *t = (smattn_dtype)k;
                return 0;
            }
    return FAIL(cx, "%s.dtype: want \"f64\", \"f32\", \"f16\", \"bf16\" or \"bool\"", where);
}

/* Shape given in the file against the role's shape; row-major strides of the given shape,
 * 0 on dims of extent 1 (broadcast). */
static int parse_shape(ctx *cx, json_object *obj, const char *where, const char *name,
                       int64_t shape[4], int *rank, int64_t stride[4])
{
    int64_t want[4];
    int bcast;
    int rk = role_shape(&cx->v->prob, name, want, &bcast);
    json_object *s = get(obj, "shape");
    if (!s || !json_object_is_type(s, json_type_array) || (int)json_object_array_length(s) != rk)
        return FAIL(cx, "%s.shape: want an array of %d integers", where, rk);
    for (int r = 0; r < rk; r++) {
        json_object *e = json_object_array_get_idx(s, (size_t)r);
        int64_t d = json_object_get_int64(e);
        if (!json_object_is_type(e, json_type_int) || !(d == want[r] || (bcast && d == 1)))
            return FAIL(cx, "%s.shape[%d]: want %lld%s (from the problem)", where, r,
                        (long long)want[r], bcast ? " or 1" : "");
        shape[r] = d;
    }
    int64_t acc = 1;
    for (int r = rk - 1; r >= 0; r--) {
        stride[r] = shape[r] == 1 ? 0 : acc;
        acc *= shape[r]; /* no overflow: shape[r] <= want[r], whose product was checked */
    }
    for (int r = rk; r < 4; r++)
        stride[r] = 0;
    *rank = rk;
    return 0;
}

static int store_elem(ctx *cx, json_object *e, const char *where, size_t k, smattn_dtype t,
                      void *base)
{
    if (t == SMATTN_BOOL) {
        int64_t b = json_object_get_int64(e);
        if (json_object_is_type(e, json_type_boolean))
            b = json_object_get_boolean(e);
        else if (!json_object_is_type(e, json_type_int) || (b != 0 && b != 1))
            return FAIL(cx, "%s.data[%zu]: want 0, 1, true or false", where, k);
        ((unsigned char *)base)[k] = (unsigned char)b;
        return 0;
    }
    double x;
    if (float_elem(cx, e, where, k, &x))
        return -1;
    if (!representable(x, t))
        return FAIL(cx, "%s.data[%zu] = %a is not exactly representable in %s", where, k, x,
                    smattn_dtype_name(t));
    smattn__store_bits(base, t, (int64_t)k, smattn__round_bits(x, t));
    return 0;
}

static int parse_input(ctx *cx, const char *name, json_object *obj, smattn_tensor *t)
{
    static const char *const keys[] = {"dtype", "shape", "data", NULL};
    char where[32];
    snprintf(where, sizeof where, "inputs.%s", name);
    if (!json_object_is_type(obj, json_type_object))
        return FAIL(cx, "%s: want an object", where);
    int64_t shape[4];
    int rank;
    if (check_keys(cx, obj, where, keys) || parse_dtype(cx, obj, where, &t->dtype) ||
        parse_shape(cx, obj, where, name, shape, &rank, t->stride))
        return -1;
    if ((t->dtype == SMATTN_BOOL) != (strcmp(name, "mask") == 0))
        return FAIL(cx, "%s.dtype: %s", where,
                    strcmp(name, "mask") == 0 ? "a mask is \"bool\"" : "want a float dtype");
    int64_t n = count_of(shape, rank);
    json_object *d = get(obj, "data");
    if (!d || !json_object_is_type(d, json_type_array) || (int64_t)json_object_array_length(d) != n)
        return FAIL(cx, "%s.data: want an array of %lld elements", where, (long long)n);
    void *base = vec_alloc(cx->v, (size_t)n * smattn_dtype_size(t->dtype));
    if (!base)
        return oom(cx);
    for (size_t k = 0; k < (size_t)n; k++)
        if (store_elem(cx, json_object_array_get_idx(d, k), where, k, t->dtype, base))
            return -1;
    t->data = base;
    if (strcmp(name, "bias") != 0 && strcmp(name, "mask") != 0) {
        char role = name[0]; /* q k v x s(inks) */
        smattn_contiguous_strides(&cx->v->prob, role, t->stride);
    }
    return 0;
}

/* A merge vector's inputs: "o_parts" [N,B,S,Hq,Dv] and "lse_parts" [N,B,Hq,S], float,
 * full shapes, row-major (SPEC 9.1). */
static int parse_merge_inputs(ctx *cx, json_object *obj)
{
    static const char *const keys[] = {"o_parts", "lse_parts", NULL};
    static const char *const tkeys[] = {"dtype", "shape", "data", NULL};
    smattn_vector *v = cx->v;
    const smattn_merge_problem *m = &v->mprob;
    if (!obj || !json_object_is_type(obj, json_type_object))
        return FAIL(cx, "missing \"inputs\" object");
    if (check_keys(cx, obj, "inputs", keys))
        return -1;
    const int64_t want[2][5] = {{m->N, m->B, m->S, m->Hq, m->Dv}, {m->N, m->B, m->Hq, m->S, 1}};
    const int rank[2] = {5, 4};
    smattn_tensor *ts[2] = {&v->min.o_parts, &v->min.lse_parts};
    for (int k = 0; k < 2; k++) {
        char where[32];
        snprintf(where, sizeof where, "inputs.%s", keys[k]);
        json_object *t = get(obj, keys[k]);
        if (!t)
            return FAIL(cx, "inputs: missing \"%s\"", keys[k]);
        if (!json_object_is_type(t, json_type_object))
            return FAIL(cx, "%s: want an object", where);
        if (check_keys(cx, t, where, tkeys) || parse_dtype(cx, t, where, &ts[k]->dtype))
            return -1;
        if (ts[k]->dtype == SMATTN_BOOL)
            return FAIL(cx, "%s.dtype: want a float dtype", where);
        json_object *s = get(t, "shape");
        if (!s || !json_object_is_type(s, json_type_array) ||
            (int)json_object_array_length(s) != rank[k])
            return FAIL(cx, "%s.shape: want an array of %d integers", where, rank[k]);
        int64_t n = 1;
        for (int r = 0; r < rank[k]; r++) {
            json_object *e = json_object_array_get_idx(s, (size_t)r);
            if (!json_object_is_type(e, json_type_int) || json_object_get_int64(e) != want[k][r])
                return FAIL(cx, "%s.shape[%d]: want %lld (from the problem)", where, r,
                            (long long)want[k][r]);
            if (n > INT64_MAX / want[k][r])
                return FAIL(cx, "%s: the size overflows", where);
            n *= want[k][r];
        }
        json_object *d = get(t, "data");
        if (!d || !json_object_is_type(d, json_type_array) ||
            (int64_t)json_object_array_length(d) != n || (uint64_t)n > SIZE_MAX / 8)
            return FAIL(cx, "%s.data: want an array of %lld elements", where, (long long)n);
        void *base = vec_alloc(v, (size_t)n * smattn_dtype_size(ts[k]->dtype));
        if (!base)
            return oom(cx);
        for (size_t e = 0; e < (size_t)n; e++)
            if (store_elem(cx, json_object_array_get_idx(d, e), where, e, ts[k]->dtype, base))
                return -1;
        ts[k]->data = base;
    }
    /* row-major: a part after another, then [B,S,Hq,Dv] and [B,Hq,S] */
    smattn_tensor *o = &v->min.o_parts, *l = &v->min.lse_parts;
    o->stride[0] = m->S * m->Hq * m->Dv, o->stride[1] = m->Hq * m->Dv, o->stride[2] = m->Dv;
    o->stride[3] = 1;
    l->stride[0] = m->Hq * m->S, l->stride[1] = m->S, l->stride[2] = 1, l->stride[3] = 0;
    v->min.o_part_stride = m->B * o->stride[0];
    v->min.lse_part_stride = m->B * l->stride[0];
    return 0;
}

static int parse_inputs(ctx *cx, json_object *obj)
{
    if (cx->v->merge)
        return parse_merge_inputs(cx, obj);
    static const char *const keys[] = {"q", "k", "v", "x", "bias", "mask", "sinks", NULL};
    smattn_inputs *in = &cx->v->in;
    smattn_tensor *ts[7] = {&in->q, &in->k, &in->v, &in->x, &in->bias, &in->mask, &in->sinks};
    if (!obj || !json_object_is_type(obj, json_type_object))
        return FAIL(cx, "missing \"inputs\" object");
    if (check_keys(cx, obj, "inputs", keys))
        return -1;
    const int att = cx->v->prob.op == SMATTN_OP_ATTENTION;
    for (int k = 0; k < 7; k++) {
        json_object *t = get(obj, keys[k]);
        int needed = k < 3 ? att : k == 3 ? !att : -1; /* -1: optional */
        if (!t && needed == 1)
            return FAIL(cx, "inputs: missing \"%s\"", keys[k]);
        if (t && needed == 0)
            return FAIL(cx, "inputs.%s: not an input of this op", keys[k]);
        if (t && parse_input(cx, keys[k], t, ts[k]))
            return -1;
    }
    return 0;
}

/* ---- expected and exact ---------------------------------------------------------------- */

static const char *const out_names[3] = {"o", "lse", "p"};

/* One output list: n[k] values, which must be in dtype t (t < 0: strings, for "exact"). */
static int parse_values(ctx *cx, json_object *a, const char *where, int k, int t)
{
    smattn_vector *v = cx->v;
    size_t n = (size_t)v->n[k];
    if (!json_object_is_type(a, json_type_array) || json_object_array_length(a) != n)
        return FAIL(cx, "%s: want an array of %zu values", where, n);
    if (t < 0) {
        char **s = vec_alloc(v, (n ? n : 1) * sizeof *s);
        if (!s)
            return oom(cx);
        for (size_t e = 0; e < n; e++) {
            json_object *x = json_object_array_get_idx(a, e);
            if (!json_object_is_type(x, json_type_string))
                return FAIL(cx, "%s[%zu]: want a decimal string", where, e);
            size_t len = (size_t)json_object_get_string_len(x);
            if (!(s[e] = vec_alloc(v, len + 1)))
                return oom(cx);
            memcpy(s[e], json_object_get_string(x), len + 1);
        }
        v->exact[k] = s;
        return 0;
    }
    double *d = vec_alloc(v, (n ? n : 1) * sizeof *d);
    if (!d)
        return oom(cx);
    for (size_t e = 0; e < n; e++) {
        if (float_elem(cx, json_object_array_get_idx(a, e), where, e, &d[e]))
            return -1;
        if (!representable(d[e], (smattn_dtype)t))
            return FAIL(cx, "%s[%zu] = %a is not a %s value", where, e, d[e],
                        smattn_dtype_name((smattn_dtype)t));
    }
    v->expected[t][k] = d;
    return 0;
}

/* {"o": [...], "lse": [...], "p": [...]}; "o" only for attention. */
static int parse_outputs(ctx *cx, json_object *obj, const char *where, int t)
{
    static const char *const keys[] = {"o", "lse", "p", NULL};
    if (!json_object_is_type(obj, json_type_object))
        return FAIL(cx, "%s: want an object", where);
    if (check_keys(cx, obj, where, keys))
        return -1;
    for (int k = 0; k < 3; k++) {
        json_object *a = get(obj, out_names[k]);
        char w[48];
        snprintf(w, sizeof w, "%s.%s", where, out_names[k]);
        if (a && k == 0 && cx->v->prob.op != SMATTN_OP_ATTENTION)
            return FAIL(cx, "%s: softmax has no output o", w);
        if (a && k == SMATTN_VEC_P && cx->v->merge)
            return FAIL(cx, "%s: a merge has no output p", w);
        if (a && parse_values(cx, a, w, k, t))
            return -1;
    }
    return 0;
}

static int parse_expected(ctx *cx, json_object *obj)
{
    static const char *const keys[] = {"f64", "f32", "f16", "bf16", NULL};
    if (!obj)
        return 0;
    if (!json_object_is_type(obj, json_type_object))
        return FAIL(cx, "\"expected\": want an object");
    if (check_keys(cx, obj, "expected", keys))
        return -1;
    for (int t = 0; t < 4; t++) {
        json_object *o = get(obj, keys[t]);
        char w[32];
        snprintf(w, sizeof w, "expected.%s", keys[t]);
        if (o && parse_outputs(cx, o, w, t))
            return -1;
    }
    return 0;
}

/* Element counts of O, LSE and P; all three must fit (with 8-byte elements). */
static int output_counts(ctx *cx)
{
    const smattn_problem *p = &cx->v->prob;
    int64_t no[4] = {p->B, p->S, p->Hq, p->Dv}, nl[3] = {p->B, p->Hq, p->S};
    int64_t np[4] = {p->B, p->Hq, p->S, p->T};
    int64_t *n = cx->v->n;
    n[SMATTN_VEC_O] = p->op == SMATTN_OP_ATTENTION ? count_of(no, 4) : 0;
    n[SMATTN_VEC_LSE] = count_of(nl, 3);
    n[SMATTN_VEC_P] = cx->v->merge ? 0 : count_of(np, 4);
    int64_t in[2][4] = {{p->B, p->S, p->Hq, p->D},
                        {p->B, p->T, p->Hkv, p->D > p->Dv ? p->D : p->Dv}};
    for (int k = 0; k < 3; k++)
        if (n[k] < 0 || (uint64_t)n[k] > SIZE_MAX / 8)
            return FAIL(cx, "problem: the output sizes overflow");
    for (int k = 0; k < 2; k++)
        if (count_of(in[k], 4) < 0)
            return FAIL(cx, "problem: the input sizes overflow");
    return 0;
}

/* The file name without directory and ".json". */
static void file_stem(const char *path, char *out, size_t cap)
{
    const char *b = strrchr(path, '/');
    b = b ? b + 1 : path;
    size_t n = strlen(b);
    if (n >= 5 && strcmp(b + n - 5, ".json") == 0)
        n -= 5;
    snprintf(out, cap, "%.*s", (int)(n < cap ? n : cap - 1), b);
}

static int parse_vector(ctx *cx, json_object *root, const char *stem)
{
    static const char *const keys[] = {"name",     "description", "spec",    "problem", "inputs",
                                       "expected", "exact",       "comment", NULL};
    smattn_vector *v = cx->v;
    if (!json_object_is_type(root, json_type_object))
        return FAIL(cx, "the top level must be an object");
    if (check_keys(cx, root, "vector", keys) ||
        get_string(cx, root, "name", 1, v->name, sizeof v->name) ||
        get_string(cx, root, "description", -1, v->description, sizeof v->description) ||
        get_string(cx, root, "spec", 0, v->spec, sizeof v->spec))
        return -1;
    if (strcmp(v->name, stem) != 0)
        return FAIL(cx, "name \"%s\" differs from the file name \"%s\"", v->name, stem);
    if (parse_problem(cx, get(root, "problem")) || output_counts(cx) ||
        parse_inputs(cx, get(root, "inputs")) || parse_expected(cx, get(root, "expected")))
        return -1;
    json_object *ex = get(root, "exact");
    return ex ? parse_outputs(cx, ex, "exact", -1) : 0;
}

int smattn_vector_load(const char *path, smattn_vector *v, char *err, size_t errlen)
{
    memset(v, 0, sizeof *v);
    ctx cx = {v, err, errlen};
    char stem[128];
    file_stem(path, stem, sizeof stem);
    size_t len = 0;
    char *text = smattn_io_read_text(path, VECTOR_MAX_BYTES, &len, err, errlen);
    json_object *root = text ? smattn_io_parse_json(text, len, err, errlen) : NULL;
    free(text);
    int rc = root ? parse_vector(&cx, root, stem) : -1;
    json_object_put(root);
    if (rc) {
        smattn_vector_free(v);
        char q[SMATTN_IO_PATH_MAX];
        smattn_io_err_prefix(err, errlen, smattn_io_path(stem[0] ? stem : path, q));
    }
    return rc;
}

smattn_status smattn_vector_run(const smattn_vector *v, const smattn_outputs *out)
{
    if (!v->merge)
        return smattn_ref(&v->prob, &v->in, out, NULL, NULL);
    if (out->p.data)
        return SMATTN_ERR_OPTION;
    return smattn_ref_merge(&v->mprob, &v->min, out, NULL);
}
