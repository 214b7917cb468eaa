/* SPDX-License-Identifier: MIT */
/* problem.c: the problem descriptor: defaults, strides, validation and visibility (SPEC 2-3). */
#include <math.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include <mpfr.h>

#include "core/internal.h"

smattn_problem smattn_problem_default(void)
{
    smattn_problem p;
    memset(&p, 0, sizeof p);
    p.op = SMATTN_OP_ATTENTION;
    p.scale = 1.0;
    p.softcap = 0.0;
    p.causal = SMATTN_CAUSAL_NONE;
    p.window_left = -1;
    p.window_right = -1;
    p.empty_rows = SMATTN_EMPTY_ZERO;
    p.empty_lse = SMATTN_LSE_NEG_INF;
    return p;
}

double smattn_default_scale(int64_t D)
{
    if (D < 1 || D > SMATTN_MAX_DIM)
        return 0.0;
    /* The binary64 nearest 1/sqrt(D): MPFR's rec_sqrt rounds correctly, where 1/sqrt(x)
     * in double would round twice. */
    mpfr_t r;
    mpfr_init2(r, 53);
    mpfr_set_si(r, (long)D, MPFR_RNDN); /* exact: D <= 2^32 */
    mpfr_rec_sqrt(r, r, MPFR_RNDN);
    double c = mpfr_get_d(r, MPFR_RNDN);
    mpfr_clear(r);
    return c;
}

int64_t smattn__q_len(const smattn_problem *p, int64_t b)
{
    return p->q_lens ? p->q_lens[b] : p->S;
}

int64_t smattn__kv_len(const smattn_problem *p, int64_t b)
{
    return p->kv_lens ? p->kv_lens[b] : p->T;
}

/* a * b * c for extents >= 0, or -1 when the product does not fit in int64 */
static int64_t prod3(int64_t a, int64_t b, int64_t c)
{
    int64_t ab, abc;
    if (__builtin_mul_overflow(a, b, &ab) || __builtin_mul_overflow(ab, c, &abc))
        return -1;
    return abc;
}

smattn_status smattn_contiguous_strides(const smattn_problem *p, char role, int64_t s[4])
{
    if (!s)
        return SMATTN_ERR_NULL;
    s[0] = s[1] = s[2] = s[3] = 0;
    if (!p)
        return SMATTN_ERR_NULL;
    int64_t n1, n2, n3; /* the extents of dims 1-3 whose products are the strides */
    switch (role) {
    case 'q': n1 = p->S, n2 = p->Hq, n3 = p->D; break;
    case 'k': n1 = p->T, n2 = p->Hkv, n3 = p->D; break;
    case 'v': n1 = p->T, n2 = p->Hkv, n3 = p->Dv; break;
    case 'o': n1 = p->S, n2 = p->Hq, n3 = p->Dv; break;
    case 'l': n1 = p->Hq, n2 = p->S, n3 = 1; break;
    case 'x': case 'p': case 'b': n1 = p->Hq, n2 = p->S, n3 = p->T; break;
    case 's': s[0] = 1; return SMATTN_OK;
    default: return SMATTN_ERR_OPTION;
    }
    if (n1 < 0 || n2 < 0 || n3 < 0)
        return SMATTN_ERR_SHAPE;
    /* computed with overflow checks (issue 15: T = 2^63 - 1 overflowed here) */
    int64_t s1 = prod3(n2, n3, 1), s0 = prod3(n1, n2, n3);
    if (s1 < 0 || s0 < 0)
        return SMATTN_ERR_OVERFLOW;
    if (role == 'l')
        s[0] = s0, s[1] = n2, s[2] = 1; /* LSE [B,Hq,S] */
    else
        s[0] = s0, s[1] = s1, s[2] = n3, s[3] = 1;
    return SMATTN_OK;
}

/* ---- validation ---------------------------------------------------------------------- */

typedef struct span {
    const unsigned char *lo, *hi; /* [lo, hi) bytes; lo == NULL: none */
} span;

static smattn_status check_tensor(int rank, const int64_t *n, const int64_t *s, smattn_dtype t,
                                  const void *data, span *sp)
{
    int64_t m = smattn__max_offset(rank, n, s); /* proved: m >= 0 bounds every offset */
    if (m == -2)
        return SMATTN_ERR_STRIDE;
    size_t es = smattn_dtype_size(t);
    if (m < 0 || es == 0 || m >= INT64_MAX / 16)
        return m < 0 || es != 0 ? SMATTN_ERR_OVERFLOW : SMATTN_ERR_DTYPE;
    sp->lo = data;
    sp->hi = (const unsigned char *)data + (size_t)(m + 1) * es;
    return SMATTN_OK;
}

/* Sufficient condition for a strided tensor not to overlap itself: sorted by stride, each
 * stride of a dimension of extent > 1 exceeds the span of the smaller ones. */
static int self_disjoint(int rank, const int64_t *n, const int64_t *s)
{
    int idx[4], k = 0;
    for (int r = 0; r < rank; r++)
        if (n[r] > 1)
            idx[k++] = r;
    for (int a = 1; a < k; a++) /* insertion sort by stride */
        for (int c = a; c > 0 && s[idx[c]] < s[idx[c - 1]]; c--) {
            int t = idx[c];
            idx[c] = idx[c - 1];
            idx[c - 1] = t;
        }
    int64_t span_below = 0; /* max offset reachable by the smaller dims */
    for (int a = 0; a < k; a++) {
        int r = idx[a];
        if (s[r] <= span_below)
            return 0;
        span_below += (n[r] - 1) * s[r]; /* no overflow: checked by smattn__max_offset */
    }
    return 1;
}

static int spans_meet(span a, span b)
{
    if (!a.lo || !b.lo)
        return 0;
    return a.lo < b.hi && b.lo < a.hi;
}

static int is_float(smattn_dtype t)
{
    return t == SMATTN_F64 || t == SMATTN_F32 || t == SMATTN_F16 || t == SMATTN_BF16;
}

/* The problem and its inputs (SPEC 2, 3); the spans of the inputs read go to sp[*nsp...]. */
static smattn_status check_problem_inputs(const smattn_problem *p, const smattn_inputs *in,
                                          span *sp, int *nspp)
{
    if (p->layout) /* ragged and paged layouts (SPEC 2.7) are not read yet: never ignored */
        return SMATTN_ERR_UNSUPPORTED;
    if ((unsigned)p->op > SMATTN_OP_SOFTMAX || (unsigned)p->causal > SMATTN_CAUSAL_UPPER_LEFT ||
        (unsigned)p->empty_rows > SMATTN_EMPTY_MEAN || (unsigned)p->empty_lse > SMATTN_LSE_ZERO)
        return SMATTN_ERR_OPTION;
    const int att = p->op == SMATTN_OP_ATTENTION;
    int64_t dims[7] = {p->B, p->S, p->T, p->Hq, att ? p->Hkv : 1, att ? p->D : 1,
                       att ? p->Dv : 1};
    for (int k = 0; k < 7; k++)
        if (dims[k] < 1 || dims[k] > SMATTN_MAX_DIM)
            return SMATTN_ERR_SHAPE;
    if (att && p->Hq % p->Hkv != 0)
        return SMATTN_ERR_HEADS;
    if (!isfinite(p->scale))
        return SMATTN_ERR_SCALE;
    if (!(p->softcap >= 0) || !isfinite(p->softcap))
        return SMATTN_ERR_SOFTCAP;
    if (p->window_left < -1 || p->window_right < -1)
        return SMATTN_ERR_WINDOW;
    for (int64_t b = 0; (p->kv_lens || p->q_lens) && b < p->B; b++) {
        if (p->kv_lens && (p->kv_lens[b] < 0 || p->kv_lens[b] > p->T))
            return SMATTN_ERR_LENGTHS;
        if (p->q_lens && (p->q_lens[b] < 0 || p->q_lens[b] > p->S))
            return SMATTN_ERR_LENGTHS;
    }

    /* Inputs. */
    int nsp = *nspp;
    smattn_status st;
    if (att) {
        int64_t nq[4] = {p->B, p->S, p->Hq, p->D};
        int64_t nk[4] = {p->B, p->T, p->Hkv, p->D};
        int64_t nv[4] = {p->B, p->T, p->Hkv, p->Dv};
        const smattn_tensor *t3[3] = {&in->q, &in->k, &in->v};
        const int64_t *n3[3] = {nq, nk, nv};
        for (int k = 0; k < 3; k++) {
            if (!t3[k]->data)
                return SMATTN_ERR_NULL;
            if (!is_float(t3[k]->dtype))
                return SMATTN_ERR_DTYPE;
            if ((st = check_tensor(4, n3[k], t3[k]->stride, t3[k]->dtype, t3[k]->data,
                                   &sp[nsp++])))
                return st;
        }
    } else {
        int64_t nx[4] = {p->B, p->Hq, p->S, p->T};
        if (!in->x.data)
            return SMATTN_ERR_NULL;
        if (!is_float(in->x.dtype))
            return SMATTN_ERR_DTYPE;
        if ((st = check_tensor(4, nx, in->x.stride, in->x.dtype, in->x.data, &sp[nsp++])))
            return st;
    }
    int64_t nfull[4] = {p->B, p->Hq, p->S, p->T};
    if (in->bias.data) {
        if (!is_float(in->bias.dtype))
            return SMATTN_ERR_DTYPE;
        if ((st = check_tensor(4, nfull, in->bias.stride, in->bias.dtype, in->bias.data,
                               &sp[nsp++])))
            return st;
    }
    if (in->mask.data) {
        if (in->mask.dtype != SMATTN_BOOL)
            return SMATTN_ERR_DTYPE;
        if ((st = check_tensor(4, nfull, in->mask.stride, in->mask.dtype, in->mask.data,
                               &sp[nsp++])))
            return st;
    }
    if (in->sinks.data) {
        int64_t ns[1] = {p->Hq};
        if (!is_float(in->sinks.dtype))
            return SMATTN_ERR_DTYPE;
        if ((st = check_tensor(1, ns, in->sinks.stride, in->sinks.dtype, in->sinks.data,
                               &sp[nsp++])))
            return st;
    }
    *nspp = nsp;
    return SMATTN_OK;
}

smattn_status smattn_validate(const smattn_problem *p, const smattn_inputs *in,
                              const smattn_outputs *out)
{
    if (!p || !in || !out)
        return SMATTN_ERR_NULL;
    span sp[10];
    memset(sp, 0, sizeof sp);
    int nsp = 0;
    smattn_status st = check_problem_inputs(p, in, sp, &nsp);
    if (st)
        return st;
    const int att = p->op == SMATTN_OP_ATTENTION;
    int64_t nfull[4] = {p->B, p->Hq, p->S, p->T};
    const int ninputs = nsp;

    /* Outputs. */
    if (att && !out->o.data)
        return SMATTN_ERR_NULL;
    if (!att && !out->p.data && !out->lse.data)
        return SMATTN_ERR_NULL;
    int64_t no[4] = {p->B, p->S, p->Hq, p->Dv};
    int64_t nl[4] = {p->B, p->Hq, p->S, 1};
    const smattn_out_tensor *ot[3] = {&out->o, &out->lse, &out->p};
    const int64_t *on[3] = {no, nl, nfull};
    const int orank[3] = {4, 3, 4};
    for (int k = 0; k < 3; k++) {
        if (!ot[k]->data || (k == 0 && !att))
            continue;
        if (!is_float(ot[k]->dtype))
            return SMATTN_ERR_DTYPE;
        if ((st = check_tensor(orank[k], on[k], ot[k]->stride, ot[k]->dtype, ot[k]->data,
                               &sp[nsp])))
            return st;
        if (!self_disjoint(orank[k], on[k], ot[k]->stride))
            return SMATTN_ERR_ALIAS;
        for (int j = 0; j < nsp; j++)
            if (spans_meet(sp[nsp], sp[j]))
                return SMATTN_ERR_ALIAS;
        nsp++;
    }
    (void)ninputs;
    return SMATTN_OK;
}

smattn_status smattn__validate_backward(const smattn_problem *p, const smattn_inputs *in,
                                        const smattn_grad_inputs *gin,
                                        const smattn_grad_outputs *gout)
{
    if (!p || !in || !gin || !gout)
        return SMATTN_ERR_NULL;
    span sp[16];
    memset(sp, 0, sizeof sp);
    int nsp = 0;
    smattn_status st = check_problem_inputs(p, in, sp, &nsp);
    if (st)
        return st;
    if (p->op != SMATTN_OP_ATTENTION)
        return SMATTN_ERR_UNSUPPORTED; /* the softmax op's backward is not defined yet */
    /* Gradient inputs: dO [B,S,Hq,Dv] required, dLSE [B,Hq,S] optional. */
    int64_t no[4] = {p->B, p->S, p->Hq, p->Dv};
    int64_t nl[4] = {p->B, p->Hq, p->S, 1};
    if (!gin->dout.data)
        return SMATTN_ERR_NULL;
    if (!is_float(gin->dout.dtype))
        return SMATTN_ERR_DTYPE;
    if ((st = check_tensor(4, no, gin->dout.stride, gin->dout.dtype, gin->dout.data, &sp[nsp++])))
        return st;
    if (gin->dlse.data) {
        if (!is_float(gin->dlse.dtype))
            return SMATTN_ERR_DTYPE;
        if ((st = check_tensor(3, nl, gin->dlse.stride, gin->dlse.dtype, gin->dlse.data,
                               &sp[nsp++])))
            return st;
    }
    /* Outputs: dQ [B,S,Hq,D], dK [B,T,Hkv,D], dV [B,T,Hkv,Dv], all required. */
    int64_t nq[4] = {p->B, p->S, p->Hq, p->D};
    int64_t nk[4] = {p->B, p->T, p->Hkv, p->D};
    int64_t nv[4] = {p->B, p->T, p->Hkv, p->Dv};
    int64_t nb[4] = {p->B, p->Hq, p->S, p->T};
    /* dBias: the full shape [B,Hq,S,T]; a stride 0 on a dimension of extent > 1 would ask
     * for the sum over it (a broadcast bias's own shape), not computed yet (SPEC 9.6) */
    for (int k = 0; gout->dbias.data && k < 4; k++)
        if (gout->dbias.stride[k] == 0 && nb[k] > 1)
            return SMATTN_ERR_UNSUPPORTED;
    const smattn_out_tensor *ot[4] = {&gout->dq, &gout->dk, &gout->dv, &gout->dbias};
    const int64_t *on[4] = {nq, nk, nv, nb};
    for (int k = 0; k < 4; k++) {
        if (k == 3 && !ot[k]->data)
            continue; /* dBias is optional */
        if (!ot[k]->data)
            return SMATTN_ERR_NULL;
        if (!is_float(ot[k]->dtype))
            return SMATTN_ERR_DTYPE;
        if ((st = check_tensor(4, on[k], ot[k]->stride, ot[k]->dtype, ot[k]->data, &sp[nsp])))
            return st;
        if (!self_disjoint(4, on[k], ot[k]->stride))
            return SMATTN_ERR_ALIAS;
        for (int j = 0; j < nsp; j++)
            if (spans_meet(sp[nsp], sp[j]))
                return SMATTN_ERR_ALIAS;
        nsp++;
    }
    if (gout->dsinks.data) { /* dSinks [Hq], optional */
        int64_t ns[1] = {p->Hq};
        if (!is_float(gout->dsinks.dtype))
            return SMATTN_ERR_DTYPE;
        if ((st = check_tensor(1, ns, gout->dsinks.stride, gout->dsinks.dtype, gout->dsinks.data,
                               &sp[nsp])))
            return st;
        if (!self_disjoint(1, ns, gout->dsinks.stride))
            return SMATTN_ERR_ALIAS;
        for (int j = 0; j < nsp; j++)
            if (spans_meet(sp[nsp], sp[j]))
                return SMATTN_ERR_ALIAS;
        nsp++;
    }
    return SMATTN_OK;
}

/* ---- visibility ------------------------------------------------------------------------ */

void smattn__key_range(const smattn_problem *p, int64_t b, int64_t i, int64_t *lo, int64_t *hi)
{
    smattn__key_interval((int)p->causal, p->window_left, p->window_right, smattn__q_len(p, b),
                         smattn__kv_len(p, b), i, lo, hi);
}

int smattn__mask_allows(const smattn_problem *p, const smattn_inputs *in, int64_t b, int64_t h,
                        int64_t i, int64_t j)
{
    (void)p;
    if (!in->mask.data)
        return 1;
    const unsigned char *m = in->mask.data;
    return m[smattn__off4(in->mask.stride, b, h, i, j)] != 0;
}

int smattn_visible(const smattn_problem *p, const smattn_inputs *in, int64_t b, int64_t h,
                   int64_t i, int64_t j)
{
    /* indices outside the shape name no slot: not visible (and no offset is computed) */
    if (!p || !in || b < 0 || b >= p->B || h < 0 || h >= p->Hq || i < 0 || i >= p->S || j < 0 ||
        j >= p->T)
        return 0;
    int64_t lo, hi;
    smattn__key_range(p, b, i, &lo, &hi);
    return j >= lo && j < hi && smattn__mask_allows(p, in, b, h, i, j);
}

int smattn__ncpu(void)
{
    long n = sysconf(_SC_NPROCESSORS_ONLN);
    return n < 1 ? 1 : n > 256 ? 256 : (int)n;
}

smattn_status smattn_validate_explain(const smattn_problem *p, const smattn_inputs *in,
                                      const smattn_outputs *out, char *msg, size_t cap)
{
    smattn_status st = smattn_validate(p, in, out);
    if (msg && cap)
        snprintf(msg, cap, "%s", st == SMATTN_OK ? "" : smattn_status_str(st));
    return st;
}
