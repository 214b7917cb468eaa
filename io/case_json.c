/* SPDX-License-Identifier: MIT */
/* case_json.c: case.json parsed into smattn_case_json (SPEC 7.1): keys, types, ranges. */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "io/case.h"
#include "io/util.h"

void smattn_case_json_init(smattn_case_json *cj)
{
    memset(cj, 0, sizeof *cj);
    cj->causal = SMATTN_CAUSAL_NONE;
    cj->window[0] = cj->window[1] = -1;
    cj->empty_rows = SMATTN_EMPTY_ZERO;
    cj->empty_lse = SMATTN_LSE_NEG_INF;
}

void smattn_case_json_free(smattn_case_json *cj)
{
    if (!cj)
        return;
    free(cj->kv_lens);
    free(cj->q_lens);
    free(cj->sinks);
    free(cj->cu_seqlens_q);
    free(cj->cu_seqlens_k);
    free(cj->seqused_k);
    free(cj->kv_indptr);
    free(cj->kv_indices);
    free(cj->kv_last_page_len);
    free(cj->alibi_slopes);
    cj->alibi_slopes = NULL;
    for (int k = 0; k < 3; k++)
        free(cj->descale_arr[k]), cj->descale_arr[k] = NULL;
    cj->kv_lens = cj->q_lens = NULL;
    cj->cu_seqlens_q = cj->cu_seqlens_k = cj->seqused_k = NULL;
    cj->kv_indptr = cj->kv_indices = cj->kv_last_page_len = NULL;
    cj->sinks = NULL;
}

/* An integer. Exact: smattn_io_json_check refused every integer beyond int64, so json-c
 * did not saturate this one. */
static int json_exact_int(json_object *v, int64_t *out)
{
    if (!json_object_is_type(v, json_type_int))
        return -1;
    *out = json_object_get_int64(v);
    return 0;
}
/* A JSON number as the nearest binary64 (json-c parses decimals with strtod, which rounds
 * correctly; integers are exact in int64 and converted with one rounding). The strings
 * "inf", "-inf" and "nan" are accepted where allow_special is set. */
static int json_number(json_object *v, int allow_special, double *out)
{
    if (json_object_is_type(v, json_type_double)) {
        *out = json_object_get_double(v);
        return 0;
    }
    int64_t i;
    if (json_exact_int(v, &i) == 0) {
        *out = (double)i;
        return 0;
    }
    if (allow_special && json_object_is_type(v, json_type_string)) {
        const char *s = json_object_get_string(v);
        if (strcmp(s, "inf") == 0)
            *out = HUGE_VAL;
        else if (strcmp(s, "-inf") == 0)
            *out = -HUGE_VAL;
        else if (strcmp(s, "nan") == 0)
            *out = (double)NAN;
        else
            return -1;
        return 0;
    }
    return -1;
}

/* A string value among names[0..n); its index in *idx. */
static int json_choice(json_object *v, const char *key, const char *const *names, int n, int *idx,
                       char *err, size_t errlen)
{
    if (json_object_is_type(v, json_type_string)) {
        const char *s = json_object_get_string(v);
        for (int k = 0; k < n; k++)
            if (strcmp(s, names[k]) == 0) {
                *idx = k;
                return 0;
            }
    }
    char list[128] = "";
    for (int k = 0; k < n; k++)
        snprintf(list + strlen(list), sizeof list - strlen(list), "%s\"%s\"",
                 k == 0       ? ""
                 : k == n - 1 ? " or "
                              : ", ",
                 names[k]);
    smattn_io_err(err, errlen, "\"%s\" must be %s", key, list);
    return -1;
}

static int json_int_array(json_object *v, const char *key, int64_t **out, size_t *n, char *err,
                          size_t errlen)
{
    if (json_object_is_type(v, json_type_null))
        return 0;
    if (!json_object_is_type(v, json_type_array)) {
        smattn_io_err(err, errlen, "\"%s\" must be an array of integers", key);
        return -1;
    }
    size_t len = json_object_array_length(v);
    int64_t *a = malloc((len ? len : 1) * sizeof *a);
    if (!a) {
        smattn_io_err(err, errlen, "out of memory");
        return -1;
    }
    for (size_t k = 0; k < len; k++)
        if (json_exact_int(json_object_array_get_idx(v, k), &a[k])) {
            smattn_io_err(err, errlen, "\"%s\"[%zu] is not an integer", key, k);
            free(a);
            return -1;
        }
    *out = a;
    *n = len;
    return 0;
}

static int key_scale(json_object *v, smattn_case_json *cj, char *err, size_t errlen)
{
    if (json_number(v, 0, &cj->scale) || !isfinite(cj->scale)) {
        smattn_io_err(err, errlen, "\"scale\" must be a finite number, got %s",
                      json_object_to_json_string(v));
        return -1;
    }
    cj->has_scale = 1;
    return 0;
}

static int key_softcap(json_object *v, smattn_case_json *cj, char *err, size_t errlen)
{
    if (json_number(v, 0, &cj->softcap) || !isfinite(cj->softcap) || cj->softcap < 0) {
        smattn_io_err(err, errlen, "\"softcap\" must be a finite number >= 0, got %s",
                      json_object_to_json_string(v));
        return -1;
    }
    return 0;
}

static int key_causal(json_object *v, smattn_case_json *cj, char *err, size_t errlen)
{
    static const char *const names[] = {"none", "lower_right", "upper_left"};
    int k;
    if (json_choice(v, "causal", names, 3, &k, err, errlen))
        return -1;
    cj->causal = (smattn_causal)k;
    return 0;
}

static int key_empty_rows(json_object *v, smattn_case_json *cj, char *err, size_t errlen)
{
    static const char *const names[] = {"zero", "nan", "mean"};
    int k;
    if (json_choice(v, "empty_rows", names, 3, &k, err, errlen))
        return -1;
    cj->empty_rows = (smattn_empty)k;
    return 0;
}

static int key_empty_lse(json_object *v, smattn_case_json *cj, char *err, size_t errlen)
{
    static const char *const names[] = {"neg_inf", "pos_inf", "zero"};
    int k;
    if (json_choice(v, "empty_lse", names, 3, &k, err, errlen))
        return -1;
    cj->empty_lse = (smattn_empty_lse)k;
    return 0;
}

static int key_window(json_object *v, smattn_case_json *cj, char *err, size_t errlen)
{
    int64_t w[2];
    if (!json_object_is_type(v, json_type_array) || json_object_array_length(v) != 2 ||
        json_exact_int(json_object_array_get_idx(v, 0), &w[0]) ||
        json_exact_int(json_object_array_get_idx(v, 1), &w[1]) || w[0] < -1 || w[1] < -1) {
        smattn_io_err(err, errlen,
                      "\"window\" must be [left, right], integers >= -1 (-1: unbounded)");
        return -1;
    }
    cj->window[0] = w[0];
    cj->window[1] = w[1];
    return 0;
}

static int key_kv_lens(json_object *v, smattn_case_json *cj, char *err, size_t errlen)
{
    return json_int_array(v, "kv_lens", &cj->kv_lens, &cj->n_kv_lens, err, errlen);
}

static int key_q_lens(json_object *v, smattn_case_json *cj, char *err, size_t errlen)
{
    return json_int_array(v, "q_lens", &cj->q_lens, &cj->n_q_lens, err, errlen);
}

/* The layout keys (SPEC 7.1): lists of integers. null is refused (unlike kv_lens): a key
 * that names a layout either describes it or is absent. */
static int layout_list(json_object *v, const char *key, int64_t **out, size_t *n, char *err,
                       size_t errlen)
{
    if (!json_object_is_type(v, json_type_array)) {
        smattn_io_err(err, errlen, "\"%s\" must be an array of integers", key);
        return -1;
    }
    return json_int_array(v, key, out, n, err, errlen);
}

static int key_cu_seqlens_q(json_object *v, smattn_case_json *cj, char *err, size_t errlen)
{
    return layout_list(v, "cu_seqlens_q", &cj->cu_seqlens_q, &cj->n_cu_seqlens_q, err, errlen);
}

static int key_cu_seqlens_k(json_object *v, smattn_case_json *cj, char *err, size_t errlen)
{
    return layout_list(v, "cu_seqlens_k", &cj->cu_seqlens_k, &cj->n_cu_seqlens_k, err, errlen);
}

static int key_seqused_k(json_object *v, smattn_case_json *cj, char *err, size_t errlen)
{
    return layout_list(v, "seqused_k", &cj->seqused_k, &cj->n_seqused_k, err, errlen);
}

static int key_kv_indptr(json_object *v, smattn_case_json *cj, char *err, size_t errlen)
{
    return layout_list(v, "kv_indptr", &cj->kv_indptr, &cj->n_kv_indptr, err, errlen);
}

static int key_kv_indices(json_object *v, smattn_case_json *cj, char *err, size_t errlen)
{
    return layout_list(v, "kv_indices", &cj->kv_indices, &cj->n_kv_indices, err, errlen);
}

static int key_kv_last_page_len(json_object *v, smattn_case_json *cj, char *err, size_t errlen)
{
    return layout_list(v, "kv_last_page_len", &cj->kv_last_page_len, &cj->n_kv_last_page_len, err,
                       errlen);
}

static int key_kv_layout(json_object *v, smattn_case_json *cj, char *err, size_t errlen)
{
    static const char *const names[] = {"NHD", "HND"};
    int k;
    if (json_choice(v, "kv_layout", names, 2, &k, err, errlen))
        return -1;
    cj->has_kv_layout = 1;
    cj->kv_hnd = k;
    return 0;
}

/* "max_pages": the block table's columns a sequence may use, fewer than block_table.npy's
 * (its row stride, bt_stride; the columns past max_pages are never read). */
static int key_max_pages(json_object *v, smattn_case_json *cj, char *err, size_t errlen)
{
    int64_t m;
    if (json_exact_int(v, &m) || m < 1) {
        smattn_io_err(err, errlen, "\"max_pages\" must be an integer >= 1");
        return -1;
    }
    cj->max_pages = m;
    return 0;
}

static int key_sinks(json_object *v, smattn_case_json *cj, char *err, size_t errlen)
{
    if (!json_object_is_type(v, json_type_array)) {
        smattn_io_err(err, errlen, "\"sinks\" must be an array of numbers (one per query head)");
        return -1;
    }
    size_t len = json_object_array_length(v);
    double *a = malloc((len ? len : 1) * sizeof *a);
    if (!a) {
        smattn_io_err(err, errlen, "out of memory");
        return -1;
    }
    for (size_t k = 0; k < len; k++)
        if (json_number(json_object_array_get_idx(v, k), 1, &a[k])) {
            smattn_io_err(err, errlen,
                          "\"sinks\"[%zu] is not a number (or \"inf\", \"-inf\", \"nan\")", k);
            free(a);
            return -1;
        }
    cj->sinks = a;
    cj->n_sinks = len;
    return 0;
}

static int key_alibi_mode(json_object *v, smattn_case_json *cj, char *err, size_t errlen)
{
    static const char *const names[] = {"none", "symmetric", "one_sided", "mask"};
    int k;
    if (json_choice(v, "alibi_mode", names, 4, &k, err, errlen))
        return -1;
    cj->alibi_mode = (smattn_alibi_mode)k;
    return 0;
}

/* One slope: a number that is a binary32 exactly (SPEC 7.1); "where" names it. */
static int alibi_slope(json_object *v, float *out, const char *where, char *err, size_t errlen)
{
    double x;
    if (json_number(v, 0, &x) || !isfinite(x) || (double)(float)x != x) {
        smattn_io_err(err, errlen, "\"alibi_slopes\"%s must be a finite binary32 number "
                      "exactly, got %s", where, json_object_to_json_string(v));
        return -1;
    }
    *out = (float)x;
    return 0;
}

/* "alibi_slopes": Hq numbers, or B lists of Hq numbers (lengths checked against the shapes
 * later, in io/case.c). */
static int key_alibi_slopes(json_object *v, smattn_case_json *cj, char *err, size_t errlen)
{
    if (!json_object_is_type(v, json_type_array) || json_object_array_length(v) == 0) {
        smattn_io_err(err, errlen, "\"alibi_slopes\" must be a non-empty array of Hq numbers, "
                      "or of B arrays of Hq numbers");
        return -1;
    }
    size_t len = json_object_array_length(v), lists = 0, per = len;
    if (json_object_is_type(json_object_array_get_idx(v, 0), json_type_array)) {
        lists = len;
        per = json_object_array_length(json_object_array_get_idx(v, 0));
    }
    size_t total = lists ? len * per : len;
    float *a = malloc((total ? total : 1) * sizeof *a);
    if (!a) {
        smattn_io_err(err, errlen, "out of memory");
        return -1;
    }
    char where[48];
    for (size_t k = 0; k < len; k++) {
        json_object *e = json_object_array_get_idx(v, k);
        if (!lists) {
            snprintf(where, sizeof where, "[%zu]", k);
            if (alibi_slope(e, &a[k], where, err, errlen))
                return free(a), -1;
            continue;
        }
        if (!json_object_is_type(e, json_type_array) || json_object_array_length(e) != per) {
            smattn_io_err(err, errlen, "\"alibi_slopes\"[%zu] must be an array of %zu numbers "
                          "like \"alibi_slopes\"[0]", k, per);
            return free(a), -1;
        }
        for (size_t h = 0; h < per; h++) {
            snprintf(where, sizeof where, "[%zu][%zu]", k, h);
            if (alibi_slope(json_object_array_get_idx(e, h), &a[k * per + h], where, err,
                            errlen))
                return free(a), -1;
        }
    }
    free(cj->alibi_slopes);
    cj->alibi_slopes = a;
    cj->n_alibi_slopes = total;
    cj->n_alibi_lists = lists;
    return 0;
}

static const char *const bf16_names[] = {"q", "k", "v", "x", "bias", "sinks", "do", "dlse"};

static int key_bf16(json_object *v, smattn_case_json *cj, char *err, size_t errlen)
{
    if (!json_object_is_type(v, json_type_array)) {
        smattn_io_err(err, errlen,
                      "\"bf16\" must be an array of names among q, k, v, x, bias, sinks, do, dlse");
        return -1;
    }
    size_t len = json_object_array_length(v);
    for (size_t k = 0; k < len; k++) {
        int idx;
        if (json_choice(json_object_array_get_idx(v, k), "bf16", bf16_names, 8, &idx, err,
                        errlen)) {
            smattn_io_err(err, errlen,
                          "\"bf16\"[%zu] must be one of q, k, v, x, bias, sinks, do, dlse", k);
            return -1;
        }
        cj->bf16 |= 1u << idx;
    }
    return 0;
}

/* "fp8_e4m3", "fp8_e5m2" (names among q, k, v) and "q8_0", "q4_0" (among k, v): arrays
 * stored as |u1 (SPEC 7.1). An array in two of these lists is an error (found later, with
 * "bf16", when the arrays are checked). */
static int name_list(json_object *v, const char *key, int kv_only, unsigned *bits, char *err,
                     size_t errlen)
{
    static const char *const names[3] = {"q", "k", "v"};
    const char *want = kv_only ? "k, v" : "q, k, v";
    if (!json_object_is_type(v, json_type_array)) {
        smattn_io_err(err, errlen, "\"%s\" must be an array of names among %s", key, want);
        return -1;
    }
    size_t len = json_object_array_length(v);
    for (size_t k = 0; k < len; k++) {
        int idx;
        if (json_choice(json_object_array_get_idx(v, k), key, names, 3, &idx, err, errlen) ||
            (kv_only && idx == 0)) {
            smattn_io_err(err, errlen, "\"%s\"[%zu] must be one of %s", key, k, want);
            return -1;
        }
        *bits |= 1u << idx;
    }
    return 0;
}

static int key_fp8_e4m3(json_object *v, smattn_case_json *cj, char *err, size_t errlen)
{
    return name_list(v, "fp8_e4m3", 0, &cj->fp8_e4m3, err, errlen);
}

static int key_fp8_e5m2(json_object *v, smattn_case_json *cj, char *err, size_t errlen)
{
    return name_list(v, "fp8_e5m2", 0, &cj->fp8_e5m2, err, errlen);
}

static int key_q8_0(json_object *v, smattn_case_json *cj, char *err, size_t errlen)
{
    return name_list(v, "q8_0", 1, &cj->q8_0, err, errlen);
}

static int key_q4_0(json_object *v, smattn_case_json *cj, char *err, size_t errlen)
{
    return name_list(v, "q4_0", 1, &cj->q4_0, err, errlen);
}

/* A descale (SPEC 2.9, 7.1): a number, or B lists of Hkv numbers. Values are the library's
 * to check (binary32, finite, > 0: smattn_validate_explain names the entry); here types and
 * that every inner list has the same length. */
static int key_descale(json_object *v, smattn_case_json *cj, int k, char *err, size_t errlen)
{
    static const char *const names[3] = {"q_descale", "k_descale", "v_descale"};
    const char *key = names[k];
    cj->has_descale[k] = 1;
    if (!json_object_is_type(v, json_type_array)) {
        if (json_number(v, 0, &cj->descale_num[k])) {
            smattn_io_err(err, errlen, "\"%s\" must be a number or B lists of Hkv numbers", key);
            return -1;
        }
        return 0;
    }
    size_t nb = json_object_array_length(v), nh = 0;
    for (size_t b = 0; b < nb; b++) {
        json_object *row = json_object_array_get_idx(v, b);
        if (!json_object_is_type(row, json_type_array) ||
            (b > 0 && json_object_array_length(row) != nh) ||
            json_object_array_length(row) == 0) {
            smattn_io_err(err, errlen, "\"%s\"[%zu] must be a list of Hkv numbers%s", key, b,
                          b > 0 ? ", as long as the first" : "");
            return -1;
        }
        nh = json_object_array_length(row);
    }
    if (nb == 0) {
        smattn_io_err(err, errlen, "\"%s\" must be a number or B lists of Hkv numbers", key);
        return -1;
    }
    double *a = malloc(nb * nh * sizeof *a);
    if (!a) {
        smattn_io_err(err, errlen, "out of memory");
        return -1;
    }
    for (size_t b = 0; b < nb; b++)
        for (size_t h = 0; h < nh; h++)
            if (json_number(json_object_array_get_idx(json_object_array_get_idx(v, b), h), 0,
                            &a[b * nh + h])) {
                smattn_io_err(err, errlen, "\"%s\"[%zu][%zu] is not a number", key, b, h);
                free(a);
                return -1;
            }
    free(cj->descale_arr[k]);
    cj->descale_arr[k] = a;
    cj->descale_n[k][0] = nb, cj->descale_n[k][1] = nh;
    return 0;
}

static int key_q_descale(json_object *v, smattn_case_json *cj, char *err, size_t errlen)
{
    return key_descale(v, cj, 0, err, errlen);
}

static int key_k_descale(json_object *v, smattn_case_json *cj, char *err, size_t errlen)
{
    return key_descale(v, cj, 1, err, errlen);
}

static int key_v_descale(json_object *v, smattn_case_json *cj, char *err, size_t errlen)
{
    return key_descale(v, cj, 2, err, errlen);
}

typedef int (*key_fn)(json_object *, smattn_case_json *, char *, size_t);
static const struct {
    const char *name;
    key_fn fn;
} case_keys[] = {
    {"scale", key_scale},
    {"causal", key_causal},
    {"window", key_window},
    {"kv_lens", key_kv_lens},
    {"q_lens", key_q_lens},
    {"softcap", key_softcap},
    {"sinks", key_sinks},
    {"empty_rows", key_empty_rows},
    {"empty_lse", key_empty_lse},
    {"bf16", key_bf16},
    {"cu_seqlens_q", key_cu_seqlens_q},
    {"cu_seqlens_k", key_cu_seqlens_k},
    {"seqused_k", key_seqused_k},
    {"kv_indptr", key_kv_indptr},
    {"kv_indices", key_kv_indices},
    {"kv_last_page_len", key_kv_last_page_len},
    {"kv_layout", key_kv_layout},
    {"max_pages", key_max_pages},
    {"alibi_mode", key_alibi_mode},
    {"alibi_slopes", key_alibi_slopes},
    {"fp8_e4m3", key_fp8_e4m3},
    {"fp8_e5m2", key_fp8_e5m2},
    {"q8_0", key_q8_0},
    {"q4_0", key_q4_0},
    {"q_descale", key_q_descale},
    {"k_descale", key_k_descale},
    {"v_descale", key_v_descale},
};

static int parse_object(json_object *obj, smattn_case_json *cj, char *err, size_t errlen)
{
    if (!json_object_is_type(obj, json_type_object)) {
        smattn_io_err(err, errlen, "the top level must be a JSON object");
        return -1;
    }
    json_object_object_foreach(obj, key, val)
    {
        size_t k = 0, nk = sizeof case_keys / sizeof case_keys[0];
        while (k < nk && strcmp(key, case_keys[k].name) != 0)
            k++;
        if (k == nk) {
            char shown[65]; /* the key as printable ASCII: the error stays one line */
            size_t n = 0;
            for (const char *c = key; *c && n < sizeof shown - 1; c++, n++)
                shown[n] = *c >= 0x20 && *c < 0x7f ? *c : '?';
            shown[n] = 0;
            smattn_io_err(err, errlen,
                          "unknown key \"%s\" (known: scale, causal, window, kv_lens, q_lens, "
                          "softcap, sinks, empty_rows, empty_lse, bf16, cu_seqlens_q, "
                          "cu_seqlens_k, seqused_k, kv_indptr, kv_indices, kv_last_page_len, "
                          "kv_layout, max_pages, alibi_mode, alibi_slopes, fp8_e4m3, fp8_e5m2, "
                          "q8_0, q4_0, q_descale, k_descale, v_descale)",
                          shown);
            return -1;
        }
        if (case_keys[k].fn(val, cj, err, errlen))
            return -1;
    }
    return 0;
}

int smattn_case_json_parse(const char *text, size_t len, smattn_case_json *cj, char *err,
                           size_t errlen)
{
    smattn_case_json_init(cj);
    json_object *obj = smattn_io_parse_json(text, len, err, errlen);
    if (!obj)
        return -1;
    int rc = parse_object(obj, cj, err, errlen);
    json_object_put(obj);
    if (rc) {
        smattn_case_json_free(cj);
        smattn_case_json_init(cj);
    }
    return rc;
}

/* "alibi_mode" and "alibi_slopes" (SPEC 7.1, 2.8): each slope printed with 17 digits, so
 * that the number read back is the binary32 exactly; nothing without ALiBi. */
void smattn_case_json_put_alibi(FILE *f, const smattn_problem *p)
{
    static const char *const modes[4] = {"none", "symmetric", "one_sided", "mask"};
    if (p->alibi_mode == SMATTN_ALIBI_NONE || !p->alibi_slopes)
        return;
    fprintf(f, ",\n  \"alibi_mode\": \"%s\",\n  \"alibi_slopes\": [", modes[p->alibi_mode]);
    const int64_t lists = p->alibi_slopes_per_batch ? p->B : 0;
    for (int64_t b = 0; b < (lists ? lists : 1); b++) {
        if (lists)
            fprintf(f, "%s[", b ? ", " : "");
        for (int64_t h = 0; h < p->Hq; h++)
            fprintf(f, "%s%.17g", h ? ", " : "", (double)p->alibi_slopes[b * p->Hq + h]);
        if (lists)
            fprintf(f, "]");
    }
    fprintf(f, "]");
}

/* The quantised inputs' lists ("fp8_e4m3", "fp8_e5m2", "q8_0", "q4_0") and the descales
 * ("q_descale", ... a number or B lists of Hkv; each a binary32, printed with 17 digits so
 * that the number read back is exactly it) of case.json (SPEC 7.1, 2.9). */
void smattn_case_json_put_quant(FILE *f, const smattn_problem *p, const smattn_inputs *in)
{
    if (p->op != SMATTN_OP_ATTENTION)
        return;
    static const smattn_dtype kinds[4] = {SMATTN_F8E4M3, SMATTN_F8E5M2, SMATTN_Q8_0, SMATTN_Q4_0};
    static const char *const keys[4] = {"fp8_e4m3", "fp8_e5m2", "q8_0", "q4_0"};
    const smattn_tensor *t[3] = {&in->q, &in->k, &in->v};
    static const char *const names[3] = {"q", "k", "v"};
    for (int k = 0; k < 4; k++) {
        int n = 0;
        for (int a = 0; a < 3; a++) {
            if (!t[a]->data || t[a]->dtype != kinds[k])
                continue;
            if (!n++)
                fprintf(f, ",\n  \"%s\": [", keys[k]);
            else
                fprintf(f, ", ");
            fprintf(f, "\"%s\"", names[a]);
        }
        if (n)
            fprintf(f, "]");
    }
    const smattn_descale *d = p->descale;
    if (!d)
        return;
    const double one[3] = {d->q, d->k, d->v};
    const double *heads[3] = {d->q_head, d->k_head, d->v_head};
    for (int a = 0; a < 3; a++) {
        if (!heads[a]) {
            if (one[a] != 1.0)
                fprintf(f, ",\n  \"%s_descale\": %.17g", names[a], one[a]);
            continue;
        }
        fprintf(f, ",\n  \"%s_descale\": [", names[a]);
        for (int64_t b = 0; b < p->B; b++) {
            fprintf(f, "%s[", b ? ", " : "");
            for (int64_t g = 0; g < p->Hkv; g++)
                fprintf(f, "%s%.17g", g ? ", " : "", heads[a][b * p->Hkv + g]);
            fprintf(f, "]");
        }
        fprintf(f, "]");
    }
}
