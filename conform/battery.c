/* SPDX-License-Identifier: MIT */
/* battery.c: the cases `smattn conform` runs: the spec's golden vectors, edge cases by
 * category (each aimed at a bug real kernels have had), and random sweeps over prefill,
 * chunked prefill and decode shapes. Each case records the features it uses, so a kernel
 * is only given what it claims; invisible slots are filled with NaN and infinities, since
 * SPEC 3.6 lets them hold anything. */
#include <dirent.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "conform/conform.h"
#include "io/case.h"
#include "conform/battery_impl.h"
#include "core/internal.h"
#include "io/vector.h"

/* ---- features ------------------------------------------------------------------------ */

static const char *const cap_names[] = {"causal_lower_right",
                                        "causal_upper_left",
                                        "window",
                                        "kv_lens",
                                        "q_lens",
                                        "mask",
                                        "bias",
                                        "sinks",
                                        "softcap",
                                        "gqa",
                                        "strides",
                                        "lse",
                                        "p",
                                        "dv",
                                        "sink_in_max",
                                        "deterministic",
                                        "packed_q",
                                        "packed_kv",
                                        "paged_nhd",
                                        "paged_hnd",
                                        "descale_tensor",
                                        "descale_head",
                                        "alibi_symmetric",
                                        "alibi_one_sided",
                                        "alibi_mask",
                                        [25] = "backward_deterministic",
                                        "backward_dbias",
                                        "backward_dsinks"};

const char *conform_cap_name(unsigned bit)
{
    return bit < sizeof cap_names / sizeof cap_names[0] && cap_names[bit] ? cap_names[bit]
                                                                          : "unknown";
}

void conform_caps_str(uint32_t caps, char *buf, size_t cap)
{
    size_t n = 0;
    buf[0] = '\0';
    const unsigned known = (unsigned)(sizeof cap_names / sizeof cap_names[0]);
    for (unsigned b = 0; b < known && n < cap; b++)
        if (caps & (1u << b))
            n += (size_t)snprintf(buf + n, cap - n, "%s%s", n ? ", " : "", conform_cap_name(b));
    uint32_t unknown = caps & ~((1u << known) - 1u); /* once, as bits: no name to give */
    if (unknown && n < cap)
        snprintf(buf + n, cap - n, "%sunknown(0x%x)", n ? ", " : "", (unsigned)unknown);
}

uint32_t conform_problem_caps(const smattn_problem *p, const smattn_inputs *in)
{
    uint32_t c = 0;
    if (p->causal == SMATTN_CAUSAL_LOWER_RIGHT)
        c |= SMATTN_CAP_CAUSAL_LOWER_RIGHT;
    if (p->causal == SMATTN_CAUSAL_UPPER_LEFT)
        c |= SMATTN_CAP_CAUSAL_UPPER_LEFT;
    if (p->window_left != -1 || p->window_right != -1)
        c |= SMATTN_CAP_WINDOW;
    if (p->kv_lens)
        c |= SMATTN_CAP_KV_LENS;
    if (p->q_lens)
        c |= SMATTN_CAP_Q_LENS;
    if (in->mask.data)
        c |= SMATTN_CAP_BOOL_MASK;
    if (in->bias.data)
        c |= SMATTN_CAP_BIAS;
    if (in->sinks.data)
        c |= SMATTN_CAP_SINKS;
    if (p->softcap > 0)
        c |= SMATTN_CAP_SOFTCAP;
    if (p->op == SMATTN_OP_ATTENTION && p->Hq != p->Hkv)
        c |= SMATTN_CAP_GQA;
    if (p->op == SMATTN_OP_ATTENTION && p->Dv != p->D)
        c |= SMATTN_CAP_DV;
    if (p->alibi_mode == SMATTN_ALIBI_SYMMETRIC)
        c |= SMATTN_CAP_ALIBI_SYMMETRIC;
    if (p->alibi_mode == SMATTN_ALIBI_ONE_SIDED)
        c |= SMATTN_CAP_ALIBI_ONE_SIDED;
    if (p->alibi_mode == SMATTN_ALIBI_MASK)
        c |= SMATTN_CAP_ALIBI_MASK;
    if (p->op == SMATTN_OP_ATTENTION && p->descale) { /* SPEC 2.9: factors other than 1 */
        const smattn_descale *d = p->descale;
        if (d->q != 1.0 || d->k != 1.0 || d->v != 1.0)
            c |= SMATTN_CAP_DESCALE_TENSOR;
        if (d->q_head || d->k_head || d->v_head)
            c |= SMATTN_CAP_DESCALE_HEAD;
    }
    if (p->layout) { /* a paged cache's kv_lens are the layout's own lengths (SPEC 2.7) */
        c |= conform_layout_caps(p->layout, in);
        if (p->layout->block_table)
            c &= ~(uint32_t)SMATTN_CAP_KV_LENS;
    }
    return c;
}

uint32_t conform_layout_caps(const smattn_layout *L, const smattn_inputs *in)
{
    uint32_t c = 0;
    if (L->cu_seqlens_q)
        c |= SMATTN_CAP_PACKED_Q;
    if (L->cu_seqlens_k)
        c |= SMATTN_CAP_PACKED_KV;
    /* HND: a page's slots nearer than its heads ([num_pages, Hkv, page_size, D]) */
    if (L->block_table)
        c |= in && in->k.stride[1] < in->k.stride[2] ? SMATTN_CAP_PAGED_HND : SMATTN_CAP_PAGED_NHD;
    return c;
}

static int copy_tensor(builder *bd, conform_case *c, int t, const smattn_tensor *src, int64_t n0,
                       int64_t n1, int64_t n2, int64_t n3, char role)
{
    if (!src->data)
        return 0;
    int64_t st[4];
    smattn_contiguous_strides(&c->prob, role, st);
    if (role == 's')
        st[0] = 1;
    int64_t n = n0 * n1 * n2 * n3;
    if (t == T_MASK) {
        unsigned char *m = bat_zalloc(bd, (size_t)n, 1);
        if (!m)
            return -1;
        c->in64.mask = (smattn_tensor){m, SMATTN_BOOL, {st[0], st[1], st[2], st[3]}};
        c->count[T_MASK] = n;
    } else if (!bat_alloc_f64(bd, c, t, n, st)) {
        return -1;
    }
    for (int64_t a = 0; a < n0; a++)
        for (int64_t b = 0; b < n1; b++)
            for (int64_t e = 0; e < n2; e++)
                for (int64_t d = 0; d < n3; d++) {
                    int64_t off = a * src->stride[0] + b * src->stride[1] + e * src->stride[2] +
                                  d * src->stride[3];
                    int64_t dst = a * st[0] + b * st[1] + e * st[2] + d * st[3];
                    if (t == T_MASK)
                        ((unsigned char *)(uintptr_t)c->in64.mask.data)[dst] =
                            ((const unsigned char *)src->data)[off] != 0;
                    else
                        ((double *)(uintptr_t)bat_tensor_of(c, t)->data)[dst] =
                            smattn_load(src->data, src->dtype, off);
                }
    return 0;
}

/* A case holding a copy of a loaded problem (a golden vector, a regression); garbage says
 * whether its invisible slots get NaN/inf (a vector keeps its own values). */
static void add_loaded(builder *bd, const char *cat, const char *name, const smattn_problem *p,
                       const smattn_inputs *in, int garbage)
{
    conform_case *c = bat_case_new(bd, cat, name, p->op, 1, 1, 1, 1, 1, 1, 1, 1.0, 0);
    if (!c)
        return;
    for (int t = 0; t < 7; t++) {
        free((void *)(uintptr_t)bat_tensor_of(c, t)->data);
        bat_tensor_of(c, t)->data = NULL;
        c->count[t] = 0;
    }
    c->garbage = garbage;
    c->prob = *p;
    c->prob.kv_lens = c->prob.q_lens = NULL;
    int rc = 0;
    if (p->op == SMATTN_OP_ATTENTION) {
        rc |= copy_tensor(bd, c, T_Q, &in->q, p->B, p->S, p->Hq, p->D, 'q');
        rc |= copy_tensor(bd, c, T_K, &in->k, p->B, p->T, p->Hkv, p->D, 'k');
        rc |= copy_tensor(bd, c, T_V, &in->v, p->B, p->T, p->Hkv, p->Dv, 'v');
    } else {
        rc |= copy_tensor(bd, c, T_X, &in->x, p->B, p->Hq, p->S, p->T, 'x');
    }
    rc |= copy_tensor(bd, c, T_BIAS, &in->bias, p->B, p->Hq, p->S, p->T, 'b');
    rc |= copy_tensor(bd, c, T_MASK, &in->mask, p->B, p->Hq, p->S, p->T, 'b');
    rc |= copy_tensor(bd, c, T_SINKS, &in->sinks, p->Hq, 1, 1, 1, 's');
    if (p->kv_lens)
        bat_case_lens(bd, c, 0, p->kv_lens);
    if (p->q_lens)
        bat_case_lens(bd, c, 1, p->q_lens);
    c->prob.alibi_slopes = NULL;
    if (p->alibi_mode != SMATTN_ALIBI_NONE &&
        !bat_case_alibi(bd, c, p->alibi_mode, p->alibi_slopes_per_batch, p->alibi_slopes))
        rc = 1;
    if (rc)
        bd->oom = 1;
    bat_finish(bd, c);
}

static void add_vector(builder *bd, const char *path)
{
    smattn_vector v;
    char err[256];
    if (smattn_vector_load(path, &v, err, sizeof err))
        return; /* the demo and the vectors suite report broken vectors */
    if (!v.merge) /* a merge vector joins the merge battery (merge_battery.c) */
        add_loaded(bd, "golden", v.name, &v.prob, &v.in, 0);
    smattn_vector_free(&v);
}

static int cmp_str(const void *a, const void *b)
{
    return strcmp(*(char *const *)a, *(char *const *)b);
}

/* Every golden vector of dir (conform_vector_files: sorted). */
static void add_vectors(builder *bd, const char *dir)
{
    char *names[CONFORM_MAX_VECTORS];
    size_t n;
    if (conform_vector_files(dir, 1, names, &n))
        return;
    for (size_t k = 0; k < n; k++) {
        add_vector(bd, names[k]);
        free(names[k]);
    }
}

static int is_dir(const char *p)
{
    DIR *d = opendir(p);
    if (d)
        closedir(d);
    return d != NULL;
}

/* ---- regressions: fuzzer finds, as case directories (conform/regressions/README.md) --- */

/* Every case directory under dir (sorted), as category "regressions" with garbage in its
 * invisible slots (fuzz_plugin runs each problem clean and with garbage beyond kv_lens).
 * A directory that does not load is an error: a regression must not vanish silently. */
static int add_regressions(builder *bd, const char *dir, char *err, size_t errlen)
{
    DIR *d = opendir(dir);
    if (!d)
        return 0;
    char *names[512];
    size_t n = 0;
    struct dirent *e;
    while ((e = readdir(d)) && n < 512) {
        if (e->d_name[0] == '.')
            continue;
        names[n] = malloc(strlen(dir) + strlen(e->d_name) + 2);
        if (names[n])
            sprintf(names[n], "%s/%s", dir, e->d_name), n++;
    }
    closedir(d);
    qsort(names, n, sizeof *names, cmp_str);
    int rc = 0;
    for (size_t k = 0; k < n; k++) {
        if (!rc && is_dir(names[k])) {
            smattn_case c;
            char why[300];
            if (smattn_case_load(names[k], &c, why, sizeof why)) {
                snprintf(err, errlen, "regression %s: %s", names[k], why);
                rc = -1;
            } else {
                add_loaded(bd, "regressions", strrchr(names[k], '/') + 1, &c.prob, &c.in, 1);
                smattn_case_free(&c);
            }
        }
        free(names[k]);
    }
    return rc;
}

/* ---- edge cases by category ----------------------------------------------------------- */

static void empty_rows(builder *bd)
{
    conform_case *c = bat_att(bd, "empty_rows", "mask_rows_false", 1, 4, 8, 2, 2, 8);
    unsigned char *m = c ? bat_case_mask(bd, c) : NULL;
    for (int64_t j = 0; m && j < 8; j++)
        m[1 * 8 + j] = m[3 * 8 + j] = m[(4 + 2) * 8 + j] = 0; /* head 0 rows 1, 3; head 1 row 2 */
    bat_finish(bd, c);
    c = bat_att(bd, "empty_rows", "causal_lr_s6_t3", 1, 6, 3, 2, 2, 8);
    if (c)
        c->prob.causal = SMATTN_CAUSAL_LOWER_RIGHT;
    bat_finish(bd, c);
    c = bat_att(bd, "empty_rows", "kv_lens_zero", 2, 3, 5, 2, 2, 8);
    if (c)
        bat_case_lens(bd, c, 0, (int64_t[]){0, 5});
    bat_finish(bd, c);
    c = bat_att(bd, "empty_rows", "bias_row_neg_inf", 1, 4, 6, 1, 1, 4);
    double *bias = c ? bat_case_bias(bd, c, 1.0) : NULL;
    for (int64_t j = 0; bias && j < 6; j++)
        bias[0 * 6 + j] = bias[2 * 6 + j] = -HUGE_VAL;
    bat_finish(bd, c);
    c = bat_att(bd, "empty_rows", "window_outside_kv_lens", 2, 4, 12, 1, 1, 4);
    if (c) { /* batch 0: T_b = 3, the window [d - 1, d + 1] around d = i + 8 sees nothing */
        bat_case_lens(bd, c, 0, (int64_t[]){3, 12});
        bat_case_lens(bd, c, 1, (int64_t[]){4, 4});
        c->prob.window_left = c->prob.window_right = 1;
    }
    bat_finish(bd, c);
}

static void padding(builder *bd, int full)
{
    conform_case *c = bat_att(bd, "padding", "kv_lens_b3", 3, 4, 16, 2, 2, 8);
    if (c)
        bat_case_lens(bd, c, 0, (int64_t[]){1, 7, 16});
    bat_finish(bd, c);
    c = bat_att(bd, "padding", "q_lens_b3", 3, 5, 6, 2, 2, 8);
    if (c)
        bat_case_lens(bd, c, 1, (int64_t[]){4, 1, 0});
    bat_finish(bd, c);
    c = bat_att(bd, "padding", "causal_lr_both_lens", 2, 6, 20, 2, 1, 8);
    if (c) { /* the diagonal follows T_b - S_b per batch (SPEC 3.1) */
        c->prob.causal = SMATTN_CAUSAL_LOWER_RIGHT;
        bat_case_lens(bd, c, 0, (int64_t[]){9, 20});
        bat_case_lens(bd, c, 1, (int64_t[]){3, 6});
    }
    bat_finish(bd, c);
    if (full) {
        c = bat_att(bd, "padding", "decode_cache_b4", 4, 1, 70, 4, 2, 32);
        if (c)
            bat_case_lens(bd, c, 0, (int64_t[]){70, 1, 33, 64});
        bat_finish(bd, c);
    }
}

static void garbage(builder *bd)
{
    conform_case *c = bat_att(bd, "garbage", "kv_cache_slots", 2, 1, 16, 2, 2, 8);
    if (c)
        bat_case_lens(bd, c, 0, (int64_t[]){5, 11});
    bat_finish(bd, c);
    c = bat_att(bd, "garbage", "mask_columns", 1, 4, 9, 2, 2, 8);
    unsigned char *m = c ? bat_case_mask(bd, c) : NULL;
    for (int64_t r = 0; m && r < 2 * 4; r++)
        m[r * 9 + 3] = m[r * 9 + 5] = 0;
    bat_finish(bd, c);
    c = bat_att(bd, "garbage", "bias_neg_inf_columns", 1, 3, 8, 1, 1, 8);
    double *bias = c ? bat_case_bias(bd, c, 2.0) : NULL;
    for (int64_t i = 0; bias && i < 3; i++)
        bias[i * 8 + 2] = bias[i * 8 + 6] = -HUGE_VAL;
    bat_finish(bd, c);
    c = bat_att(bd, "garbage", "window_behind", 1, 4, 16, 1, 1, 8);
    if (c)
        c->prob.window_left = 2, c->prob.window_right = 0;
    bat_finish(bd, c);
}

static void extreme(builder *bd, int full)
{
    /* |q.k| up to ~ D a^2 / sqrt(D): e^s overflows binary32 without the max shift. */
    conform_case *c = bat_case_new(bd, "extreme", "large_scores", SMATTN_OP_ATTENTION, 1, 4, 16, 2, 2,
                               16, 16, 24.0, 0);
    bat_finish(bd, c);
    c = bat_att(bd, "extreme", "negative_scale", 1, 3, 12, 1, 1, 8);
    if (c)
        c->prob.scale = -40.0;
    bat_finish(bd, c);
    c = bat_att(bd, "extreme", "one_sharp_key", 1, 2, 33, 1, 1, 8);
    if (c) { /* key 17 scores ~ +90 over the others */
        double *k = MUT(c->in64.k.data), *q = MUT(c->in64.q.data);
        for (int64_t d = 0; d < 8; d++)
            q[d] = q[8 + d] = 4.0, k[17 * 8 + d] = 8.0;
    }
    bat_finish(bd, c);
    c = bat_case_new(bd, "extreme", "flat_tiny_values", SMATTN_OP_ATTENTION, 1, 3, 20, 1, 1, 8, 8,
                 1e-20, 0);
    double *v = c ? MUT(c->in64.v.data) : NULL;
    for (int64_t e = 0; v && e < c->count[T_V]; e++)
        v[e] *= 1e-39; /* binary32 subnormals */
    bat_finish(bd, c);
    c = bat_att(bd, "extreme", "large_v", 1, 2, 10, 1, 1, 4);
    v = c ? MUT(c->in64.v.data) : NULL;
    for (int64_t e = 0; v && e < c->count[T_V]; e++)
        v[e] *= 1e37;
    bat_finish(bd, c);
    if (full) {
        c = bat_case_new(bd, "extreme", "score_beyond_f32", SMATTN_OP_ATTENTION, 1, 2, 8, 1, 1, 4, 4,
                     3e19, 0);
        bat_finish(bd, c);
        c = bat_case_new(bd, "extreme", "large_scores_long", SMATTN_OP_ATTENTION, 1, 8, 300, 2, 2, 64,
                     64, 8.0, 0);
        bat_finish(bd, c);
    }
}

static void shapes(builder *bd, int full)
{
    static const int64_t sh[][3] = {{1, 1, 1},  {3, 7, 3},   {5, 17, 17}, {2, 33, 33},
                                    {7, 65, 5}, {1, 129, 8}, {9, 4, 8},   {2, 31, 96}};
    size_t n = full ? sizeof sh / sizeof sh[0] : 6;
    for (size_t k = 0; k < n; k++) {
        char name[48];
        snprintf(name, sizeof name, "s%lld_t%lld_d%lld", (long long)sh[k][0], (long long)sh[k][1],
                 (long long)sh[k][2]);
        bat_finish(bd, bat_att(bd, "shapes", name, 1, sh[k][0], sh[k][1], 2, 2, sh[k][2]));
    }
    bat_finish(bd, bat_att(bd, "shapes", "s_gt_t_s9_t4", 1, 9, 4, 1, 1, 8));
    conform_case *c =
        bat_case_new(bd, "shapes", "dv_ne_d", SMATTN_OP_ATTENTION, 2, 3, 9, 2, 2, 8, 5, 2.0, 0);
    bat_finish(bd, c);
}

static void causal(builder *bd, int full)
{
    static const int64_t st[][2] = {{16, 16}, {5, 16}, {16, 5}, {1, 9}, {33, 40}, {40, 33}};
    size_t n = full ? 6 : 3;
    for (int ul = 0; ul < 2; ul++)
        for (size_t k = 0; k < n; k++) {
            char name[48];
            snprintf(name, sizeof name, "%s_s%lld_t%lld", ul ? "upper_left" : "lower_right",
                     (long long)st[k][0], (long long)st[k][1]);
            conform_case *c = bat_att(bd, "causal", name, 1, st[k][0], st[k][1], 2, 2, 8);
            if (c)
                c->prob.causal = ul ? SMATTN_CAUSAL_UPPER_LEFT : SMATTN_CAUSAL_LOWER_RIGHT;
            bat_finish(bd, c);
        }
}

static void window(builder *bd, int full)
{
    static const int64_t w[][4] = {/* S, T, left, right; causal LR when right < 0 */
                                   {64, 64, 15, -1}, {65, 65, 16, -1},   {1, 64, 31, -1},
                                   {8, 40, 7, 8},    {128, 128, 63, -1}, {4, 129, 32, 32},
                                   {33, 64, 0, 0},   {16, 16, -1, 3}};
    size_t n = full ? sizeof w / sizeof w[0] : 4;
    for (size_t k = 0; k < n; k++) {
        char name[64];
        snprintf(name, sizeof name, "s%lld_t%lld_left%lld_right%lld", (long long)w[k][0],
                 (long long)w[k][1], (long long)w[k][2], (long long)w[k][3]);
        conform_case *c = bat_att(bd, "window", name, 1, w[k][0], w[k][1], 1, 1, 8);
        if (c) {
            c->prob.window_left = w[k][2];
            c->prob.window_right = w[k][3] < 0 ? 0 : w[k][3];
            if (w[k][3] < 0)
                c->prob.causal = SMATTN_CAUSAL_LOWER_RIGHT, c->prob.window_right = -1;
        }
        bat_finish(bd, c);
    }
}

static void gqa(builder *bd, int full)
{
    static const int64_t h[][2] = {{4, 2}, {7, 1}, {32, 1}, {64, 2}, {12, 4}, {128, 1}};
    size_t n = full ? 6 : 4;
    for (size_t k = 0; k < n; k++) {
        char name[48];
        snprintf(name, sizeof name, "hq%lld_hkv%lld", (long long)h[k][0], (long long)h[k][1]);
        conform_case *c = bat_att(bd, "gqa", name, 1, k % 2 ? 1 : 3, 12, h[k][0], h[k][1], 8);
        if (c && k == 3)
            c->prob.causal = SMATTN_CAUSAL_LOWER_RIGHT;
        bat_finish(bd, c);
    }
}

static void bias_cases(builder *bd)
{
    conform_case *c = bat_att(bd, "bias", "random", 1, 4, 10, 2, 2, 8);
    if (c)
        bat_case_bias(bd, c, 5.0);
    bat_finish(bd, c);
    c = bat_att(bd, "bias", "scattered_neg_inf", 1, 5, 12, 2, 2, 8);
    double *b = c ? bat_case_bias(bd, c, 1.0) : NULL;
    for (int64_t e = 0; b && e < c->count[T_BIAS]; e += 3)
        b[e] = -HUGE_VAL;
    bat_finish(bd, c);
    c = bat_att(bd, "bias", "huge_gap", 1, 2, 9, 1, 1, 4);
    b = c ? bat_case_bias(bd, c, 0.5) : NULL;
    if (b)
        b[4] = 1e4, b[9 + 1] = -1e4;
    bat_finish(bd, c);
}

static void sinks(builder *bd)
{
    conform_case *c = bat_att(bd, "sinks", "random", 1, 4, 10, 3, 3, 8);
    if (c)
        bat_case_sinks(bd, c, -2.0, 2.0);
    bat_finish(bd, c);
    c = bat_att(bd, "sinks", "dominant", 1, 3, 8, 2, 1, 8);
    double *s = c ? bat_case_sinks(bd, c, 20.0, 30.0) : NULL;
    if (s)
        s[1] = -HUGE_VAL; /* head 1: no sink */
    bat_finish(bd, c);
    c = bat_att(bd, "sinks", "with_empty_rows", 1, 5, 2, 2, 2, 8);
    s = c ? bat_case_sinks(bd, c, -1.0, 1.0) : NULL;
    if (s) { /* rows 0-2 see no key: head 0 has a finite sink (not empty), head 1 none */
        s[1] = -HUGE_VAL;
        c->prob.causal = SMATTN_CAUSAL_LOWER_RIGHT;
    }
    bat_finish(bd, c);
}

static void softcap(builder *bd)
{
    conform_case *c = bat_case_new(bd, "softcap", "cap30_large_scores", SMATTN_OP_ATTENTION, 1, 4, 12,
                               2, 2, 16, 16, 6.0, 0);
    if (c)
        c->prob.softcap = 30.0;
    bat_finish(bd, c);
    c = bat_att(bd, "softcap", "cap1_causal", 1, 6, 6, 1, 1, 8);
    if (c)
        c->prob.softcap = 1.0, c->prob.causal = SMATTN_CAUSAL_LOWER_RIGHT;
    bat_finish(bd, c);
}

static void dtypes(builder *bd)
{
    conform_case *c = bat_att(bd, "dtype", "kv_f16", 1, 3, 20, 2, 2, 16);
    if (c)
        c->kv_dtype = SMATTN_F16;
    bat_finish(bd, c);
    c = bat_att(bd, "dtype", "kv_bf16", 1, 3, 20, 2, 2, 16);
    if (c)
        c->kv_dtype = SMATTN_BF16;
    bat_finish(bd, c);
    /* Q (X) and outputs in f16 / bf16: what inference stacks run (bf16 everywhere) */
    c = bat_att(bd, "dtype", "q_f16_out_f16", 1, 3, 20, 2, 2, 16);
    if (c)
        c->q_dtype = c->out_dtype = SMATTN_F16;
    bat_finish(bd, c);
    c = bat_att(bd, "dtype", "all_bf16", 1, 3, 20, 4, 2, 16);
    if (c)
        c->q_dtype = c->kv_dtype = c->out_dtype = SMATTN_BF16;
    bat_finish(bd, c);
    c = bat_case_new(bd, "dtype", "softmax_x_bf16_out_f16", SMATTN_OP_SOFTMAX, 1, 3, 9, 2, 2, 0, 0, 3.0, 0);
    if (c)
        c->q_dtype = SMATTN_BF16, c->out_dtype = SMATTN_F16;
    bat_finish(bd, c);
}

static void strides(builder *bd)
{
    bat_finish(bd, bat_case_new(bd, "strides", "row_pitch_pad3", SMATTN_OP_ATTENTION, 2, 3, 11, 2, 2, 8, 8,
                        2.0, 3));
    bat_finish(bd, bat_case_new(bd, "strides", "decode_pitch_pad5", SMATTN_OP_ATTENTION, 1, 1, 17, 4, 4, 5,
                        5, 2.0, 5));
}

static void softmax(builder *bd)
{
    bat_finish(bd, bat_case_new(bd, "softmax", "plain", SMATTN_OP_SOFTMAX, 1, 3, 8, 2, 2, 0, 0, 3.0, 0));
    conform_case *c =
        bat_case_new(bd, "softmax", "neg_inf_entries", SMATTN_OP_SOFTMAX, 1, 3, 7, 1, 1, 0, 0, 3.0, 0);
    double *x = c ? MUT(c->in64.x.data) : NULL;
    for (int64_t j = 0; x && j < 7; j++) /* row 1 all -inf: an empty row */
        x[2 * j % 7] = -HUGE_VAL, x[7 + j] = -HUGE_VAL;
    bat_finish(bd, c);
    c = bat_case_new(bd, "softmax", "causal_lr", SMATTN_OP_SOFTMAX, 1, 6, 4, 2, 2, 0, 0, 2.0, 0);
    if (c)
        c->prob.causal = SMATTN_CAUSAL_LOWER_RIGHT;
    bat_finish(bd, c);
    /* scale 0: every score is 0, but an x of -inf still hides its key (SPEC 3.5), where
     * 0 * -inf is NaN */
    c = bat_case_new(bd, "softmax", "scale0_neg_inf_entries", SMATTN_OP_SOFTMAX, 1, 3, 7, 1, 1, 0, 0,
                 3.0, 0);
    x = c ? MUT(c->in64.x.data) : NULL;
    if (x) {
        c->prob.scale = 0.0;
        x[1] = x[4] = x[7] = x[2 * 7 + 6] = -HUGE_VAL;
    }
    bat_finish(bd, c);
}

/* ---- random sweeps -------------------------------------------------------------------- */

static const int64_t head_dims[] = {8, 16, 32, 64, 80, 96, 128};

/* Features on about half the cases, so a plain kernel still runs the rest. */
static void random_features(builder *bd, conform_case *c)
{
    rng *r = &bd->r;
    smattn_problem *p = &c->prob;
    if (bat_rng_next(r) % 2 == 0)
        return;
    if (bat_rng_next(r) % 2 == 0) {
        int64_t l[16];
        for (int64_t b = 0; b < p->B; b++)
            l[b] = bat_rng_int(r, p->S == 1 ? 1 : 0, p->T);
        bat_case_lens(bd, c, 0, l);
    }
    if (bat_rng_next(r) % 4 == 0)
        p->window_left = bat_rng_int(r, 0, p->T);
    if (bat_rng_next(r) % 4 == 0)
        p->softcap = 20.0 + (double)bat_rng_int(r, 0, 30);
    if (bat_rng_next(r) % 4 == 0)
        bat_case_sinks(bd, c, -3.0, 3.0);
}

static void sweep(builder *bd, const char *cat, int count, int full)
{
    for (int k = 0; k < count; k++) {
        char name[48];
        snprintf(name, sizeof name, "%03d", k);
        rng r = {bat_hash_name(name, bd->seed ^ bat_hash_name(cat, 0))};
        /* full: the oracle's cost, ~B Hq S T D, kept to a few seconds per case */
        int64_t B = bat_rng_int(&r, 1, 2), Hkv = bat_rng_int(&r, 1, full ? 4 : 2);
        int64_t G = bat_rng_int(&r, 1, 4), D = head_dims[bat_rng_int(&r, 0, full ? 6 : 3)];
        int64_t S, T;
        if (!strcmp(cat, "prefill"))
            S = T = bat_rng_int(&r, 2, full ? 200 : 40);
        else if (!strcmp(cat, "chunked"))
            S = bat_rng_int(&r, 2, full ? 48 : 12), T = S + bat_rng_int(&r, 1, full ? 400 : 60);
        else
            S = 1, T = bat_rng_int(&r, 1, full ? 2048 : 160);
        conform_case *c =
            bat_case_new(bd, cat, name, SMATTN_OP_ATTENTION, B, S, T, Hkv * G, Hkv, D, D, 2.5, 0);
        if (!c)
            return;
        bd->r = r;
        if (strcmp(cat, "prefill") || bat_rng_next(&bd->r) % 3)
            c->prob.causal = SMATTN_CAUSAL_LOWER_RIGHT;
        random_features(bd, c);
        bat_finish(bd, c);
    }
}

int conform_battery_build(conform_battery *b, const char *suite, uint64_t seed,
                          const char *vectors_dir, char *err, size_t errlen)
{
    return conform_battery_build_dirs(b, suite, seed, vectors_dir, NULL, err, errlen);
}

int conform_battery_build_dirs(conform_battery *b, const char *suite, uint64_t seed,
                               const char *vectors_dir, const char *regressions_dir, char *err,
                               size_t errlen)
{
    memset(b, 0, sizeof *b);
    int full = suite && !strcmp(suite, "full");
    int huge = suite && !strcmp(suite, "huge");
    if (!full && !huge && suite && strcmp(suite, "quick")) {
        snprintf(err, errlen, "unknown suite '%.40s' (want quick, full or huge)", suite);
        return -1;
    }
    builder bd = {b, seed, {seed}, 0};
    if (huge) { /* the large shapes alone (battery_huge.c) */
        battery_huge(&bd);
        if (bd.oom) {
            conform_battery_free(b);
            snprintf(err, errlen, "out of memory building the battery");
            return -1;
        }
        return 0;
    }
    char vdir[1100];
    if (vectors_dir && vectors_dir[0]) {
        if (!is_dir(vectors_dir)) {
            snprintf(err, errlen, "vectors: %s is not a directory", vectors_dir);
            return -1;
        }
        snprintf(vdir, sizeof vdir, "%s", vectors_dir);
    }
    if (vectors_dir && !vectors_dir[0]) {
        /* "": no golden vectors (smattn conform --no-vectors) */
    } else if (vectors_dir || conform_find_data("vectors", vdir, sizeof vdir, NULL, 0) == 0) {
        add_vectors(&bd, vdir);
    }
    char rdir[1100] = "";
    if (regressions_dir && strlen(regressions_dir) >= sizeof rdir) {
        conform_battery_free(b);
        snprintf(err, errlen, "regressions: the path is longer than %zu bytes", sizeof rdir - 1);
        return -1;
    }
    if (regressions_dir)
        snprintf(rdir, sizeof rdir, "%s", regressions_dir);
    else if (conform_find_data("regressions", rdir, sizeof rdir, NULL, 0))
        rdir[0] = '\0';
    if (rdir[0] && add_regressions(&bd, rdir, err, errlen)) {
        conform_battery_free(b);
        return -1;
    }
    empty_rows(&bd);
    battery_empty_rows_clean(&bd);
    padding(&bd, full);
    garbage(&bd);
    battery_tiled(&bd, full);
    battery_long_rows(&bd, full);
    battery_nonfinite(&bd);
    extreme(&bd, full);
    battery_regimes(&bd);
    battery_regimes_masked(&bd);
    battery_head_dims(&bd);
    shapes(&bd, full);
    causal(&bd, full);
    window(&bd, full);
    gqa(&bd, full);
    bias_cases(&bd);
    sinks(&bd);
    battery_sinks_large(&bd);
    softcap(&bd);
    battery_alibi(&bd, full);
    battery_split(&bd, full);
    dtypes(&bd);
    battery_quant(&bd, full);
    strides(&bd);
    battery_layouts(&bd, full);
    softmax(&bd);
    /* 32 per sweep in full (40 before the tiled and long categories): the oracle's time */
    sweep(&bd, "prefill", full ? 32 : 3, full);
    sweep(&bd, "chunked", full ? 32 : 3, full);
    sweep(&bd, "decode", full ? 32 : 3, full);
    if (bd.oom) {
        conform_battery_free(b);
        snprintf(err, errlen, "out of memory building the battery");
        return -1;
    }
    return 0;
}


void conform_battery_free(conform_battery *b)
{
    for (size_t k = 0; k < b->n; k++)
        bat_case_free(&b->cases[k]);
    free(b->cases);
    memset(b, 0, sizeof *b);
}

void conform_battery_keep_shard(conform_battery *b, const conform_shard *sh)
{
    size_t kept = 0;
    for (size_t k = 0; k < b->n; k++) {
        if (conform_shard_has(sh, b->cases[k].name))
            b->cases[kept++] = b->cases[k];
        else
            bat_case_free(&b->cases[k]);
    }
    b->n = kept;
}

/* ---- materialising a case for a kernel ------------------------------------------------- */

/* The extents of the view of tensor t (0 Q, 1 K, 2 V in materialise's order) of an
 * attention problem; 0 for the others (a sparse case has Q, K and V only). */
static int view_extents(const smattn_problem *p, int t, int64_t ext[4])
{
    if (p->op != SMATTN_OP_ATTENTION || t > 2)
        return 0;
    ext[0] = p->B;
    ext[1] = t == 0 ? p->S : p->T;
    ext[2] = t == 0 ? p->Hq : p->Hkv;
    ext[3] = t == 2 ? p->Dv : p->D;
    return 1;
}

/* The dtype tensor t (materialise's order: Q, K, V, X, bias, sinks) takes: kvdt for K and
 * V, qdt for the others, except that the 8-bit floats are Q's only (SPEC 2.9): X, the bias
 * and the sinks of an fp8 case stay binary32. */
static smattn_dtype tensor_dtype(int t, smattn_dtype qdt, smattn_dtype kvdt)
{
    if (t == 1 || t == 2)
        return kvdt;
    if (t != 0 && (qdt == SMATTN_F8E4M3 || qdt == SMATTN_F8E5M2))
        return SMATTN_F32;
    return qdt;
}

static int is_block(smattn_dtype t)
{
    return smattn_dtype_block(t) > 1;
}

int conform_case_materialise(const conform_case *c, smattn_dtype qdt, smattn_dtype kvdt,
                             smattn_empty empty, smattn_empty_lse empty_lse, conform_inst *m)
{
    memset(m, 0, sizeof *m);
    m->prob = c->prob;
    m->prob.empty_rows = empty;
    m->prob.empty_lse = empty_lse;
    m->in = c->in64;
    const smattn_tensor *src[6] = {&c->in64.q, &c->in64.k,    &c->in64.v,
                                   &c->in64.x, &c->in64.bias, &c->in64.sinks};
    smattn_tensor *dst[6] = {&m->in.q, &m->in.k, &m->in.v, &m->in.x, &m->in.bias, &m->in.sinks};
    static const int idx[6] = {T_Q, T_K, T_V, T_X, T_BIAS, T_SINKS};
    for (int t = 0; t < 6; t++) {
        if (!src[t]->data)
            continue;
        smattn_dtype dt = tensor_dtype(t, qdt, kvdt);
        int64_t n = c->count[idx[t]];
        /* sparse: reserved, so that the memory the views never reach stays untouched */
        size_t bytes = (size_t)(n ? n : 1) * smattn_dtype_size(dt);
        if (is_block(dt)) { /* whole blocks of the contiguous rows (SPEC 2.9) */
            if (c->sparse || n % SMATTN_QBLOCK) {
                conform_inst_free(m);
                return -1;
            }
            bytes = (size_t)(n / SMATTN_QBLOCK) * smattn_dtype_size(dt);
        }
        void *buf = c->sparse ? conform_map_zero(bytes) : malloc(bytes);
        if (!buf) {
            conform_inst_free(m);
            return -1;
        }
        m->mapped[t] = c->sparse ? bytes : 0;
        int64_t ext[4];
        if (c->sparse && view_extents(&c->prob, t, ext)) {
            const int64_t *st = src[t]->stride;
            for (int64_t a = 0; a < ext[0]; a++)
                for (int64_t i = 0; i < ext[1]; i++)
                    for (int64_t h = 0; h < ext[2]; h++)
                        for (int64_t d = 0; d < ext[3]; d++) {
                            int64_t e = a * st[0] + i * st[1] + h * st[2] + d * st[3];
                            smattn_store(buf, dt, e, ((const double *)src[t]->data)[e]);
                        }
        } else if (is_block(dt)) {
            for (int64_t k = 0; k < n / SMATTN_QBLOCK; k++) {
                unsigned char *blk = (unsigned char *)buf + (size_t)k * smattn_dtype_size(dt);
                smattn__quantise_block((const double *)src[t]->data + k * SMATTN_QBLOCK, dt, blk);
                /* llama.cpp's q8_0 quantiser writes d = amax / 127 >= 0, but the format is
                 * any binary16 d (SPEC 2.9): every odd block is stored as -d and -q_j, the
                 * same values exactly (|q_j| <= 127), so that a decoder dropping d's sign
                 * shows (q4_0's d = max / -8 has both signs already) */
                if (dt == SMATTN_Q8_0 && k % 2 && (blk[1] & 0x7c) != 0x7c) {
                    blk[1] ^= 0x80;
                    for (int j = 0; j < SMATTN_QBLOCK; j++)
                        blk[2 + j] = (unsigned char)(int8_t)(-(int8_t)blk[2 + j]);
                }
            }
        } else {
            for (int64_t e = 0; e < n; e++)
                smattn_store(buf, dt, e, ((const double *)src[t]->data)[e]);
        }
        m->owned[t] = buf;
        dst[t]->data = buf;
        dst[t]->dtype = dt;
    }
    return 0;
}

int conform_case_dtype_fits(const conform_case *c, smattn_dtype qdt, smattn_dtype kvdt, char *why,
                            size_t cap)
{
    static const char *const names[6] = {"Q", "K", "V", "X", "the bias", "the sinks"};
    const smattn_tensor *src[6] = {&c->in64.q, &c->in64.k,    &c->in64.v,
                                   &c->in64.x, &c->in64.bias, &c->in64.sinks};
    static const int idx[6] = {T_Q, T_K, T_V, T_X, T_BIAS, T_SINKS};
    if (c->prob.alibi_mode == SMATTN_ALIBI_MASK && c->in64.bias.data &&
        tensor_dtype(4, qdt, kvdt) == SMATTN_F64) {
        snprintf(why, cap,
                 "ALiBi's mask mode takes its bias (the distances) in f32, f16 or "
                 "bf16 (SPEC 2.8), and the kernel takes the bias in f64 only");
        return -1;
    }
    for (int t = 0; t < 6; t++) {
        smattn_dtype dt = tensor_dtype(t, qdt, kvdt);
        if (!src[t]->data || dt == SMATTN_F64)
            continue;
        const double *d = src[t]->data;
        if (is_block(dt)) {
            /* a block's values are rounded to a grid of its largest (a small one next to a
             * large one may become 0, as in the kernels): only a scale past binary16 or a
             * whole block lost changes the case */
            if (c->sparse || c->count[idx[t]] % SMATTN_QBLOCK) {
                snprintf(why, cap, "%s is not stored as whole blocks of %d contiguous elements",
                         names[t], SMATTN_QBLOCK);
                return -1;
            }
            for (int64_t e = 0; e < c->count[idx[t]]; e += SMATTN_QBLOCK) {
                unsigned char blk[64];
                smattn__quantise_block(d + e, dt, blk);
                double amax = 0.0, got = 0.0;
                int finite = 1;
                for (int j = 0; j < SMATTN_QBLOCK; j++) {
                    finite &= isfinite(d[e + j]) != 0;
                    amax = fmax(amax, fabs(d[e + j]));
                    got = fmax(got, fabs(smattn_load(blk, dt, j)));
                }
                if (!finite || amax == 0.0 || (isfinite(got) && got != 0.0))
                    continue;
                snprintf(why, cap,
                         "%s holds a block of largest magnitude %.3g, which %s in %s: the "
                         "converted case would not be this case",
                         names[t], amax, got == 0.0 ? "flushes to zero" : "overflows",
                         smattn_dtype_name(dt));
                return -1;
            }
            continue;
        }
        int64_t ext[4];
        if (c->sparse && view_extents(&c->prob, t, ext)) {
            /* the view's elements only: each is random in a range every dtype holds */
            const int64_t *st = src[t]->stride;
            for (int64_t a = 0; a < ext[0]; a++)
                for (int64_t i = 0; i < ext[1]; i++)
                    for (int64_t h = 0; h < ext[2]; h++)
                        for (int64_t k = 0; k < ext[3]; k++) {
                            double x = d[a * st[0] + i * st[1] + h * st[2] + k * st[3]];
                            unsigned char buf[8];
                            smattn_store(buf, dt, 0, x);
                            double r = smattn_load(buf, dt, 0);
                            if (isfinite(x) && x != 0 && (!isfinite(r) || r == 0)) {
                                snprintf(why, cap,
                                         "%s holds %.3g, which does not survive %s: the "
                                         "converted case would not be this case",
                                         names[t], x, smattn_dtype_name(dt));
                                return -1;
                            }
                        }
            continue;
        }
        for (int64_t e = 0; e < c->count[idx[t]]; e++) {
            if (!isfinite(d[e]) || d[e] == 0)
                continue; /* garbage and zeros convert as they are */
            unsigned char buf[8];
            smattn_store(buf, dt, 0, d[e]);
            double r = smattn_load(buf, dt, 0);
            if (isfinite(r) && r != 0)
                continue;
            snprintf(why, cap,
                     "%s holds %.3g, which %s in %s (the case would hold %s): the "
                     "converted case would not be this case",
                     names[t], d[e], r == 0 ? "flushes to zero" : "overflows",
                     smattn_dtype_name(dt),
                     r == 0  ? "0"
                     : r > 0 ? "+inf"
                             : "-inf");
            return -1;
        }
    }
    return 0;
}

void conform_inst_free(conform_inst *m)
{
    for (int t = 0; t < 6; t++)
        if (m->mapped[t])
            conform_unmap(m->owned[t], m->mapped[t]);
        else
            free(m->owned[t]);
    memset(m, 0, sizeof *m);
}

int conform_inst_quantised(const conform_inst *m)
{
    const smattn_tensor *t[3] = {&m->in.q, &m->in.k, &m->in.v};
    for (int k = 0; k < 3; k++)
        if (t[k]->data && (t[k]->dtype == SMATTN_F8E4M3 || t[k]->dtype == SMATTN_F8E5M2 ||
                           is_block(t[k]->dtype)))
            return 1;
    return m->prob.op == SMATTN_OP_ATTENTION && m->prob.descale != NULL;
}

int conform_inst_real(const conform_inst *m, conform_inst *tw)
{
    return conform_inst_real_forget(m, 0, tw);
}

int conform_inst_real_forget(const conform_inst *m, char forget, conform_inst *tw)
{
    memset(tw, 0, sizeof *tw);
    tw->prob = m->prob;
    tw->prob.descale = NULL;
    tw->in = m->in;
    const smattn_problem *p = &m->prob;
    if (p->op != SMATTN_OP_ATTENTION)
        return 0;
    const smattn_tensor *src[3] = {&m->in.q, &m->in.k, &m->in.v};
    smattn_tensor *dst[3] = {&tw->in.q, &tw->in.k, &tw->in.v};
    static const char role[3] = {'q', 'k', 'v'};
    const int64_t G = p->Hq / p->Hkv;
    for (int t = 0; t < 3; t++) {
        if (!src[t]->data)
            continue;
        const int64_t ext[4] = {p->B, t ? p->T : p->S, t ? p->Hkv : p->Hq, t == 2 ? p->Dv : p->D};
        const int64_t *st = src[t]->stride;
        int64_t last = 0;
        for (int a = 0; a < 4; a++)
            last += ext[a] > 0 ? (ext[a] - 1) * (st[a] > 0 ? st[a] : 0) : 0;
        double *d = malloc((size_t)(last + 1) * sizeof *d);
        if (!d) {
            conform_inst_free(tw);
            return -1;
        }
        for (int64_t e = 0; e <= last; e++)
            d[e] = (double)NAN;
        for (int64_t b = 0; b < ext[0]; b++)
            for (int64_t i = 0; i < ext[1]; i++)
                for (int64_t h = 0; h < ext[2]; h++) {
                    double f = role[t] == forget ? 1.0 : smattn__descale(p, role[t], b, t ? h : h / G);
                    for (int64_t c = 0; c < ext[3]; c++) {
                        int64_t o = b * st[0] + i * st[1] + h * st[2] + c * st[3];
                        d[o] = smattn_load(src[t]->data, src[t]->dtype, o) * f;
                    }
                }
        tw->owned[t] = d;
        dst[t]->data = d;
        dst[t]->dtype = SMATTN_F64;
    }
    return 0;
}
