/* SPDX-License-Identifier: MIT */
/* battery_case.c: how a battery case is built (random streams, tensors, masks, bias,
 * sinks, lengths, the garbage in invisible slots), shared by battery.c and
 * battery_sizes.c, which both build cases and neither calls the other back. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "conform/battery_impl.h"

/* ---- random numbers (splitmix64): every case draws from its own stream ---------------- */

uint64_t bat_rng_next(rng *r)
{
    uint64_t z = (r->s += 0x9e3779b97f4a7c15u);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9u;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebu;
    return z ^ (z >> 31);
}

/* Uniform in [-a, a). */
static double bat_rng_sym(rng *r, double a)
{
    return ((double)(bat_rng_next(r) >> 11) * 0x1p-52 - 1.0) * a;
}

/* Uniform integer in [lo, hi]. */
int64_t bat_rng_int(rng *r, int64_t lo, int64_t hi)
{
    return lo + (int64_t)(bat_rng_next(r) % (uint64_t)(hi - lo + 1));
}

uint64_t bat_hash_name(const char *s, uint64_t seed)
{
    return conform_fnv1a(s, strlen(s), CONFORM_FNV_BASIS ^ seed);
}

/* ---- building cases ------------------------------------------------------------------ */

void *bat_zalloc(builder *bd, size_t n, size_t size)
{
    void *p = calloc(n ? n : 1, size);
    if (!p)
        bd->oom = 1;
    return p;
}

smattn_tensor *bat_tensor_of(conform_case *c, int t)
{
    smattn_tensor *ts[] = {&c->in64.q,    &c->in64.k,    &c->in64.v,    &c->in64.x,
                           &c->in64.bias, &c->in64.mask, &c->in64.sinks};
    return ts[t];
}

double *bat_alloc_f64(builder *bd, conform_case *c, int t, int64_t n, const int64_t st[4])
{
    smattn_tensor *ts = bat_tensor_of(c, t);
    double *d = bat_zalloc(bd, (size_t)n, sizeof(double));
    ts->data = d;
    ts->dtype = SMATTN_F64;
    memcpy(ts->stride, st, sizeof ts->stride);
    c->count[t] = n;
    return d;
}

/* A new case with random Q, K, V (or X) in [-amp, amp) (V in [-1, 1)). pad > 0 pads every
 * innermost row of Q, K and V by pad elements holding NaN (strided layout). Returns NULL
 * when out of memory (bd->oom set). */
conform_case *bat_case_new(builder *bd, const char *cat, const char *name, smattn_op op,
                              int64_t B, int64_t S, int64_t T, int64_t Hq, int64_t Hkv, int64_t D,
                              int64_t Dv, double amp, int64_t pad)
{
    conform_battery *b = bd->b;
    if (bd->oom)
        return NULL;
    if (b->n == b->cap) {
        size_t cap = b->cap ? 2 * b->cap : 64;
        conform_case *nc = realloc(b->cases, cap * sizeof *nc);
        if (!nc) {
            bd->oom = 1;
            return NULL;
        }
        b->cases = nc, b->cap = cap;
    }
    conform_case *c = &b->cases[b->n++];
    memset(c, 0, sizeof *c);
    snprintf(c->category, sizeof c->category, "%s", cat);
    snprintf(c->name, sizeof c->name, "%s/%s", cat, name);
    c->kv_dtype = c->q_dtype = c->out_dtype = SMATTN_F32;
    c->garbage = 1;
    bd->r.s = bat_hash_name(c->name, bd->seed);
    smattn_problem *p = &c->prob;
    *p = smattn_problem_default();
    p->op = op;
    p->B = B, p->S = S, p->T = T, p->Hq = Hq, p->Hkv = Hkv, p->D = D, p->Dv = Dv;
    p->scale = op == SMATTN_OP_ATTENTION ? smattn_default_scale(D) : 1.0;
    if (op == SMATTN_OP_SOFTMAX) {
        int64_t st[4];
        smattn_contiguous_strides(p, 'x', st);
        double *x = bat_alloc_f64(bd, c, T_X, B * Hq * S * T, st);
        for (int64_t e = 0; x && e < c->count[T_X]; e++)
            x[e] = bat_rng_sym(&bd->r, amp);
        return bd->oom ? NULL : c;
    }
    c->strided = pad > 0;
    struct {
        int t;
        int64_t rows, heads, dim;
        double a;
    } tens[3] = {{T_Q, S, Hq, D, amp}, {T_K, T, Hkv, D, amp}, {T_V, T, Hkv, Dv, 1.0}};
    for (int k = 0; k < 3; k++) {
        int64_t pitch = tens[k].dim + pad;
        int64_t st[4] = {tens[k].rows * tens[k].heads * pitch, tens[k].heads * pitch, pitch, 1};
        double *d = bat_alloc_f64(bd, c, tens[k].t, B * st[0], st);
        for (int64_t e = 0; d && e < c->count[tens[k].t]; e++)
            d[e] = e % pitch < tens[k].dim ? bat_rng_sym(&bd->r, tens[k].a) : ((double)NAN);
    }
    return bd->oom ? NULL : c;
}

/* An all-true bool mask [B,Hq,S,T] for the caller to clear entries of. */
unsigned char *bat_case_mask(builder *bd, conform_case *c)
{
    const smattn_problem *p = &c->prob;
    int64_t n = p->B * p->Hq * p->S * p->T;
    unsigned char *m = bat_zalloc(bd, (size_t)n, 1);
    if (!m)
        return NULL;
    memset(m, 1, (size_t)n);
    c->in64.mask.data = m;
    c->in64.mask.dtype = SMATTN_BOOL;
    smattn_contiguous_strides(p, 'b', c->in64.mask.stride);
    c->count[T_MASK] = n;
    return m;
}

/* A bias [B,Hq,S,T] uniform in [-amp, amp). */
double *bat_case_bias(builder *bd, conform_case *c, double amp)
{
    const smattn_problem *p = &c->prob;
    int64_t st[4];
    smattn_contiguous_strides(p, 'b', st);
    double *d = bat_alloc_f64(bd, c, T_BIAS, p->B * p->Hq * p->S * p->T, st);
    for (int64_t e = 0; d && e < c->count[T_BIAS]; e++)
        d[e] = bat_rng_sym(&bd->r, amp);
    return d;
}

/* Sinks [Hq] uniform in [lo, hi). */
double *bat_case_sinks(builder *bd, conform_case *c, double lo, double hi)
{
    int64_t st[4] = {1, 0, 0, 0};
    double *d = bat_alloc_f64(bd, c, T_SINKS, c->prob.Hq, st);
    for (int64_t h = 0; d && h < c->prob.Hq; h++)
        d[h] = lo + (hi - lo) * 0.5 * (bat_rng_sym(&bd->r, 1.0) + 1.0);
    return d;
}

/* kv_lens (which = 0) or q_lens (1) from vals[0..B). */
void bat_case_lens(builder *bd, conform_case *c, int which, const int64_t *vals)
{
    int64_t *l = bat_zalloc(bd, (size_t)c->prob.B, sizeof(int64_t));
    if (!l)
        return;
    memcpy(l, vals, (size_t)c->prob.B * sizeof *l);
    c->lens[which] = l;
    if (which == 0)
        c->prob.kv_lens = l;
    else
        c->prob.q_lens = l;
}

static double bat_at(const smattn_tensor *t, int64_t a, int64_t b, int64_t c, int64_t d)
{
    return ((const double *)
                t->data)[a * t->stride[0] + b * t->stride[1] + c * t->stride[2] + d * t->stride[3]];
}

/* Key j of row (b, h, i) is visible: SPEC 3.1-3.3, the mask, and no -inf bias (or x). */
static int bat_key_visible(const smattn_problem *p, const smattn_inputs *in, int64_t b, int64_t h,
                       int64_t i, int64_t j)
{
    if (!smattn_visible(p, in, b, h, i, j))
        return 0;
    if (in->bias.data && bat_at(&in->bias, b, h, i, j) == -HUGE_VAL)
        return 0;
    if (p->op == SMATTN_OP_SOFTMAX && bat_at(&in->x, b, h, i, j) == -HUGE_VAL)
        return 0;
    return 1;
}

/* Fill what no output may depend on with NaN and infinities (SPEC 3.6, 4.2): K at keys no
 * row of the KV head sees; V there too unless a row of the batch is empty (the mean
 * convention reads V at [0, T_b)); Q of rows that see no key; bias and X at positions
 * hidden by causality, window, lengths or the mask. */
static int64_t bat_fill_garbage(builder *bd, conform_case *c)
{
    int64_t filled = 0;
    smattn_problem *p = &c->prob;
    smattn_inputs *in = &c->in64;
    static const double junk[3] = {((double)NAN), HUGE_VAL, -HUGE_VAL};
    int64_t Hkv = p->op == SMATTN_OP_ATTENTION ? p->Hkv : p->Hq, G = p->Hq / Hkv;
    unsigned char *seen = bat_zalloc(bd, (size_t)(Hkv * p->T), 1);
    if (!seen)
        return 0;
    for (int64_t b = 0; b < p->B; b++) {
        memset(seen, 0, (size_t)(Hkv * p->T));
        int any_empty = 0;
        for (int64_t h = 0; h < p->Hq; h++)
            for (int64_t i = 0; i < p->S; i++) {
                int n = 0;
                for (int64_t j = 0; j < p->T; j++) {
                    int vis = bat_key_visible(p, in, b, h, i, j);
                    n += vis;
                    seen[(h / G) * p->T + j] |= (unsigned char)vis;
                    if (smattn_visible(p, in, b, h, i, j))
                        continue;
                    double *t = MUT(p->op == SMATTN_OP_SOFTMAX ? in->x.data : in->bias.data);
                    const smattn_tensor *ts = p->op == SMATTN_OP_SOFTMAX ? &in->x : &in->bias;
                    filled += t != NULL;
                    if (t) /* NaN, +inf, -inf in turn: fmax skips a NaN, not a +inf */
                        t[b * ts->stride[0] + h * ts->stride[1] + i * ts->stride[2] +
                          j * ts->stride[3]] = junk[(i + j) % 3];
                }
                if (n == 0 && p->op == SMATTN_OP_ATTENTION) {
                    any_empty |= !in->sinks.data || bat_at(&in->sinks, h, 0, 0, 0) == -HUGE_VAL;
                    double *q = MUT(in->q.data);
                    filled += p->D;
                    for (int64_t d = 0; d < p->D; d++)
                        q[b * in->q.stride[0] + i * in->q.stride[1] + h * in->q.stride[2] +
                          d * in->q.stride[3]] = junk[(i + d) % 3];
                } else if (n == 0) {
                    any_empty = 1;
                }
            }
        if (p->op != SMATTN_OP_ATTENTION)
            continue;
        int64_t Tb = p->kv_lens ? p->kv_lens[b] : p->T;
        for (int64_t g = 0; g < Hkv; g++)
            for (int64_t j = 0; j < p->T; j++) {
                if (seen[g * p->T + j])
                    continue;
                double *k = MUT(in->k.data), *v = MUT(in->v.data);
                filled += p->D;
                for (int64_t d = 0; d < p->D; d++)
                    k[b * in->k.stride[0] + j * in->k.stride[1] + g * in->k.stride[2] +
                      d * in->k.stride[3]] = junk[(j + d) % 3];
                if (any_empty && j < Tb)
                    continue;
                for (int64_t d = 0; d < p->Dv; d++)
                    v[b * in->v.stride[0] + j * in->v.stride[1] + g * in->v.stride[2] +
                      d * in->v.stride[3]] = d % 2 ? ((double)NAN) : junk[(j + d) % 3];
            }
    }
    free(seen);
    return filled;
}

/* Close a case: garbage in invisible slots (unless turned off), then its features. */
void bat_finish(builder *bd, conform_case *c)
{
    if (!c || bd->oom)
        return;
    if (c->garbage)
        c->garbage = bat_fill_garbage(bd, c) > 0;
    c->caps = conform_problem_caps(&c->prob, &c->in64) | (c->strided ? SMATTN_CAP_STRIDES : 0u);
}

/* The plain attention case most edge cases start from. */
conform_case *bat_att(builder *bd, const char *cat, const char *name, int64_t B, int64_t S,
                         int64_t T, int64_t Hq, int64_t Hkv, int64_t D)
{
    return bat_case_new(bd, cat, name, SMATTN_OP_ATTENTION, B, S, T, Hq, Hkv, D, D, 2.0, 0);
}

/* ---- golden vectors (SPEC 8) ---------------------------------------------------------- */

void bat_case_free(conform_case *c)
{
    for (int t = 0; t < 7; t++) {
        void *d = (void *)(uintptr_t)bat_tensor_of(c, t)->data;
        if (c->mapped[t])
            conform_unmap(d, c->mapped[t]);
        else
            free(d);
    }
    free(c->lens[0]);
    free(c->lens[1]);
    for (int k = 0; k < 3; k++)
        free(c->lay_arrays[k]);
    free(c->lay_table);
    free(c->slopes);
    free(c->descale);
    for (int k = 0; k < 3; k++)
        free(c->descale_heads[k]);
}

float *bat_case_alibi(builder *bd, conform_case *c, smattn_alibi_mode mode, int per_batch,
                      const float *from)
{
    smattn_problem *p = &c->prob;
    int64_t n = (per_batch ? p->B : 1) * p->Hq;
    free(c->slopes);
    c->slopes = bat_zalloc(bd, (size_t)n, sizeof *c->slopes);
    if (!c->slopes)
        return NULL;
    p->alibi_mode = mode;
    p->alibi_slopes_per_batch = per_batch;
    p->alibi_slopes = c->slopes;
    if (from)
        bat_fill_slopes(c, from);
    else
        for (int64_t k = 0; k < n; k++)
            c->slopes[k] = (float)exp2(-8.0 * (double)(k % p->Hq + 1) / (double)p->Hq);
    return c->slopes;
}

void bat_fill_slopes(conform_case *c, const float *from)
{
    int64_t n = (c->prob.alibi_slopes_per_batch ? c->prob.B : 1) * c->prob.Hq;
    memcpy(c->slopes, from, (size_t)n * sizeof *c->slopes);
}
