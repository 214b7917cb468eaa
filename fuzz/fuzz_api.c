/* SPDX-License-Identifier: MIT */
/* fuzz_api.c: raw descriptors against the public boundary. A decoded valid problem is
 * corrupted by up to six operations (zero, negative and huge dims, NULL pointers, short or
 * negative strides, Hq not a multiple of Hkv, NaN scale and softcap, bad windows and
 * lengths, unknown enums and dtypes, overlapping outputs). smattn_validate must give a
 * clear status, and smattn_ref and the kernel must give that same status, except
 * SMATTN_ERR_UNSUPPORTED from the kernel for valid dtypes it does not take. Buffers hold
 * 8 bytes per element of the original shape; a corrupted descriptor that validates but
 * reaches beyond them is only validated, never run. */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fuzz/common/fuzz_input.h"
#include "smattn.h"

enum { T_Q, T_K, T_V, T_X, T_BIAS, T_MASK, T_SINKS, T_O, T_LSE, T_P, T_N };
static const char *const tname[T_N] = {"q", "k", "v", "x", "bias", "mask", "sinks", "o", "lse", "p"};

typedef struct api_case {
    smattn_problem p;
    smattn_inputs in;
    smattn_outputs out;
    const smattn_problem *pp;
    const smattn_inputs *pin;
    const smattn_outputs *pout;
    void *buf[T_N];
    size_t bytes[T_N];
    int64_t lens[2][2];
} api_case;

static int64_t pick_i64(fuzz_provider *dp, int64_t orig)
{
    static const int64_t v[] = {0, -1, INT64_MIN, INT64_MAX, INT64_C(1) << 31, INT64_C(1) << 40,
                                INT64_C(1) << 62, 3, 65, -2, INT64_C(1) << 32};
    uint32_t k = fuzz_take(dp, 13);
    /* orig +- 1 saturates: the harness itself must be free of undefined behaviour */
    if (k < 11)
        return v[k];
    if (k == 11)
        return orig < INT64_MAX ? orig + 1 : orig;
    return orig > INT64_MIN ? orig - 1 : orig;
}

static smattn_tensor *in_tensor(api_case *c, int t)
{
    switch (t) {
    case T_Q: return &c->in.q;
    case T_K: return &c->in.k;
    case T_V: return &c->in.v;
    case T_X: return &c->in.x;
    case T_BIAS: return &c->in.bias;
    case T_MASK: return &c->in.mask;
    default: return &c->in.sinks;
    }
}

static void corrupt(api_case *c, fuzz_provider *dp)
{
    smattn_problem *p = &c->p;
    int64_t *dims[] = {&p->B, &p->S, &p->T, &p->Hq, &p->Hkv, &p->D, &p->Dv};
    int t = (int)fuzz_take(dp, T_N);
    switch (fuzz_take(dp, 12)) {
    case 0: {
        int64_t *d = dims[fuzz_take(dp, 7)];
        *d = pick_i64(dp, *d);
        break;
    }
    case 1:
        switch (fuzz_take(dp, 4)) {
        case 0: c->pp = NULL; break;
        case 1: c->pin = NULL; break;
        case 2: c->pout = NULL; break;
        default:
            if (t < T_O)
                in_tensor(c, t)->data = NULL;
            else
                (t == T_O ? &c->out.o : t == T_LSE ? &c->out.lse : &c->out.p)->data = NULL;
        }
        break;
    case 2: {
        int64_t *s = t < T_O ? in_tensor(c, t)->stride
                             : (t == T_O ? &c->out.o : t == T_LSE ? &c->out.lse : &c->out.p)->stride;
        int k = (int)fuzz_take(dp, 4);
        s[k] = pick_i64(dp, s[k]);
        break;
    }
    case 3: /* Hq not a multiple of Hkv (an Hkv corrupted to a huge value gets a small Hq) */
        p->Hq = p->Hkv > 0 && p->Hkv < (INT64_C(1) << 32)
                    ? p->Hkv * (1 + (int64_t)fuzz_take(dp, 4)) + 1
                    : 3;
        break;
    case 4: {
        static const double sc[] = {(double)NAN, HUGE_VAL, -HUGE_VAL, 0.0, -1.0, 0x1p-1074, 1e300};
        p->scale = sc[fuzz_take(dp, 7)];
        break;
    }
    case 5: {
        static const double sc[] = {-1.0, (double)NAN, HUGE_VAL, -0.0, 0x1p-1074, 1e300};
        p->softcap = sc[fuzz_take(dp, 6)];
        break;
    }
    case 6:
        if (fuzz_take(dp, 2))
            p->window_left = pick_i64(dp, p->window_left);
        else
            p->window_right = pick_i64(dp, p->window_right);
        break;
    case 7: {
        int w = (int)fuzz_take(dp, 2), b = (int)fuzz_take(dp, 2);
        c->lens[w][b] = pick_i64(dp, c->lens[w][b]);
        if (w)
            p->q_lens = c->lens[1];
        else
            p->kv_lens = c->lens[0];
        break;
    }
    case 8: {
        int v = (int)fuzz_take(dp, 5) - 1; /* -1 .. 3 */
        switch (fuzz_take(dp, 4)) {
        case 0: p->op = (smattn_op)v; break;
        case 1: p->causal = (smattn_causal)v; break;
        case 2: p->empty_rows = (smattn_empty)v; break;
        default: p->empty_lse = (smattn_empty_lse)v; break;
        }
        break;
    }
    case 9: {
        smattn_dtype d = (smattn_dtype)((int)fuzz_take(dp, 7) - 1); /* -1 .. 5 */
        if (t < T_O)
            in_tensor(c, t)->dtype = d;
        else
            (t == T_O ? &c->out.o : t == T_LSE ? &c->out.lse : &c->out.p)->dtype = d;
        break;
    }
    case 10: { /* overlapping outputs, or an output over an input */
        void *targets[] = {c->out.o.data, c->out.lse.data, c->out.p.data, c->buf[T_Q], c->buf[T_X]};
        void *tgt = targets[fuzz_take(dp, 5)];
        int which = (int)fuzz_take(dp, 3);
        (which == 0 ? &c->out.o : which == 1 ? &c->out.lse : &c->out.p)->data = tgt;
        break;
    }
    default: { /* a present optional input that was absent */
        int k = (int)fuzz_take(dp, 3);
        smattn_tensor *x = k == 0 ? &c->in.bias : k == 1 ? &c->in.mask : &c->in.sinks;
        int tt = k == 0 ? T_BIAS : k == 1 ? T_MASK : T_SINKS;
        x->data = c->buf[tt];
        smattn_contiguous_strides(p, k == 2 ? 's' : 'b', x->stride);
        break;
    }
    }
}

/* Does every element the descriptor addresses lie inside the buffers? (Only asked of a
 * descriptor that validated, so dims are >= 1 and offsets fit in int64.) */
static int fits_one(const void *data, const int64_t *stride, int rank, const int64_t *n,
                    smattn_dtype t, const api_case *c)
{
    if (!data)
        return 1;
    int64_t off = 0, m;
    for (int k = 0; k < rank; k++) {
        if (stride[k] < 0 || n[k] < 1 || __builtin_mul_overflow(n[k] - 1, stride[k], &m) ||
            __builtin_add_overflow(off, m, &off))
            return 0;
    }
    size_t es = smattn_dtype_size(t);
    for (int k = 0; k < T_N; k++)
        if (data == c->buf[k])
            return (uint64_t)off < c->bytes[k] / (es ? es : 8);
    return 0; /* an unknown pointer */
}

static int fits(const api_case *c)
{
    const smattn_problem *p = &c->p;
    int att = p->op == SMATTN_OP_ATTENTION;
    int64_t q[4] = {p->B, p->S, p->Hq, p->D}, k[4] = {p->B, p->T, p->Hkv, p->D},
            v[4] = {p->B, p->T, p->Hkv, p->Dv}, full[4] = {p->B, p->Hq, p->S, p->T},
            o[4] = {p->B, p->S, p->Hq, p->Dv}, s[1] = {p->Hq};
    const smattn_inputs *in = &c->in;
    const smattn_outputs *out = &c->out;
    return (!att || (fits_one(in->q.data, in->q.stride, 4, q, in->q.dtype, c) &&
                     fits_one(in->k.data, in->k.stride, 4, k, in->k.dtype, c) &&
                     fits_one(in->v.data, in->v.stride, 4, v, in->v.dtype, c) &&
                     fits_one(out->o.data, out->o.stride, 4, o, out->o.dtype, c))) &&
           (att || fits_one(in->x.data, in->x.stride, 4, full, in->x.dtype, c)) &&
           fits_one(in->bias.data, in->bias.stride, 4, full, in->bias.dtype, c) &&
           fits_one(in->mask.data, in->mask.stride, 4, full, in->mask.dtype, c) &&
           fits_one(in->sinks.data, in->sinks.stride, 1, s, in->sinks.dtype, c) &&
           fits_one(out->lse.data, out->lse.stride, 3, full, out->lse.dtype, c) &&
           fits_one(out->p.data, out->p.stride, 4, full, out->p.dtype, c);
}

/* Valid dtypes the kernel does not take (its documented SMATTN_ERR_UNSUPPORTED): f64
 * anywhere; every tensor takes f32, f16 and bf16. */
static int kernel_dtype_ok(smattn_dtype t)
{
    return t == SMATTN_F32 || t == SMATTN_F16 || t == SMATTN_BF16;
}

static int kernel_unsupported(const api_case *c)
{
    const smattn_inputs *in = &c->in;
    const smattn_outputs *out = &c->out;
    if (c->p.op == SMATTN_OP_ATTENTION
            ? !kernel_dtype_ok(in->q.dtype) || !kernel_dtype_ok(in->k.dtype) ||
                  !kernel_dtype_ok(in->v.dtype) || !kernel_dtype_ok(out->o.dtype)
            : !kernel_dtype_ok(in->x.dtype))
        return 1;
    return (in->bias.data && !kernel_dtype_ok(in->bias.dtype)) ||
           (in->sinks.data && !kernel_dtype_ok(in->sinks.dtype)) ||
           (out->lse.data && !kernel_dtype_ok(out->lse.dtype)) ||
           (out->p.data && !kernel_dtype_ok(out->p.dtype));
}

static void report(const api_case *c, const fuzz_problem *fp, const char *what, smattn_status v,
                   smattn_status got)
{
    fprintf(stderr, "MISMATCH fuzz_api %s\n", fuzz_shape_class_name(fp->shape_class));
    fprintf(stderr, "check: %s\nsmattn_validate: %s, got: %s\n", what, smattn_status_name(v),
            smattn_status_name(got));
    const smattn_problem *p = &c->p;
    fprintf(stderr,
            "descriptor: prob %s in %s out %s op %d B=%lld S=%lld T=%lld Hq=%lld Hkv=%lld "
            "D=%lld Dv=%lld scale=%a softcap=%a causal=%d window=[%lld,%lld] empty %d/%d "
            "kv_lens %s q_lens %s\n",
            c->pp ? "set" : "NULL", c->pin ? "set" : "NULL", c->pout ? "set" : "NULL", (int)p->op,
            (long long)p->B, (long long)p->S, (long long)p->T, (long long)p->Hq,
            (long long)p->Hkv, (long long)p->D, (long long)p->Dv, p->scale, p->softcap,
            (int)p->causal, (long long)p->window_left, (long long)p->window_right,
            (int)p->empty_rows, (int)p->empty_lse, p->kv_lens ? "set" : "NULL",
            p->q_lens ? "set" : "NULL");
    if (p->kv_lens)
        fprintf(stderr, "  kv_lens %lld %lld\n", (long long)p->kv_lens[0], (long long)p->kv_lens[1]);
    if (p->q_lens)
        fprintf(stderr, "  q_lens %lld %lld\n", (long long)p->q_lens[0], (long long)p->q_lens[1]);
    for (int t = 0; t < T_N; t++) {
        const void *d;
        int dt;
        const int64_t *s;
        if (t < T_O) {
            const smattn_tensor *x = in_tensor((api_case *)(uintptr_t)c, t);
            d = x->data, dt = (int)x->dtype, s = x->stride;
        } else {
            const smattn_out_tensor *x = t == T_O ? &c->out.o : t == T_LSE ? &c->out.lse : &c->out.p;
            d = x->data, dt = (int)x->dtype, s = x->stride;
        }
        fprintf(stderr, "  %s: data %p dtype %d stride [%lld,%lld,%lld,%lld]\n", tname[t], d, dt,
                (long long)s[0], (long long)s[1], (long long)s[2], (long long)s[3]);
    }
    fprintf(stderr, "base problem:\n");
    fuzz_problem_print(stderr, fp);
    abort();
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    fuzz_provider dp;
    fuzz_provider_init(&dp, data, size);
    /* the corruptions come first from the tail, so that the decoder's raw front bytes stay
     * the last thing read */
    uint8_t ops[6 * 8];
    int nops = (int)fuzz_take(&dp, 7);
    for (int i = 0; i < nops * 8; i++)
        ops[i] = (uint8_t)fuzz_take(&dp, 256);
    fuzz_problem fp;
    api_case c;
    int64_t *wide = NULL;
    memset(&c, 0, sizeof c);
    if (fuzz_problem_decode(&fp, &dp))
        goto done;
    c.p = fp.p;
    c.in = fp.in;
    const smattn_problem *p = &fp.p;
    /* own buffers, 8 bytes per element, so that a dtype change stays inside them */
    size_t n[T_N] = {fp.nq, fp.nk, fp.nv, fp.nx, (size_t)(p->B * p->Hq * p->S * p->T),
                     (size_t)(p->B * p->Hq * p->S * p->T), (size_t)p->Hq,
                     (size_t)(p->B * p->S * p->Hq * p->Dv), (size_t)(p->B * p->Hq * p->S),
                     (size_t)(p->B * p->Hq * p->S * p->T)};
    for (int t = 0; t < T_N; t++) {
        c.bytes[t] = (n[t] ? n[t] : 1) * 8;
        if (!(c.buf[t] = calloc(1, c.bytes[t])))
            goto done;
    }
    const void *src[T_N] = {fp.q, fp.k, fp.v, fp.x, fp.bias, fp.mask, fp.sinks};
    for (int t = 0; t < T_SINKS + 1; t++) {
        smattn_tensor *x = in_tensor(&c, t);
        if (x->data) {
            memcpy(c.buf[t], src[t], (t == T_BIAS ? fp.nbias : t == T_MASK ? fp.nmask : n[t]) *
                                         smattn_dtype_size(x->dtype));
            x->data = c.buf[t];
        }
    }
    memcpy(c.lens, (int64_t[2][2]){{fp.kv_lens[0], fp.kv_lens[1]}, {fp.q_lens[0], fp.q_lens[1]}},
           sizeof c.lens);
    c.p.kv_lens = p->kv_lens ? c.lens[0] : NULL;
    c.p.q_lens = p->q_lens ? c.lens[1] : NULL;
    c.out.o = (smattn_out_tensor){p->op == SMATTN_OP_ATTENTION ? c.buf[T_O] : NULL, SMATTN_F32, {0}};
    c.out.lse = (smattn_out_tensor){c.buf[T_LSE], SMATTN_F32, {0}};
    c.out.p = (smattn_out_tensor){c.buf[T_P], SMATTN_F32, {0}};
    smattn_contiguous_strides(&c.p, 'o', c.out.o.stride);
    smattn_contiguous_strides(&c.p, 'l', c.out.lse.stride);
    smattn_contiguous_strides(&c.p, 'p', c.out.p.stride);
    c.pp = &c.p, c.pin = &c.in, c.pout = &c.out;
    fuzz_provider ops_dp;
    fuzz_provider_init(&ops_dp, ops, (size_t)nops * 8);
    for (int i = 0; i < nops; i++)
        corrupt(&c, &ops_dp);
    /* kv_lens and q_lens hold B entries by contract: after a change of B, give them B
     * entries (0, a valid length) when B is small, and drop them when it is not */
    if ((c.p.kv_lens || c.p.q_lens) && c.p.B > 2) {
        if (c.p.B <= 4096 && (wide = calloc((size_t)c.p.B, sizeof *wide)) != NULL) {
            c.p.kv_lens = c.p.kv_lens ? wide : NULL;
            c.p.q_lens = c.p.q_lens ? wide : NULL;
        } else {
            c.p.kv_lens = c.p.q_lens = NULL;
        }
    }

    smattn_status v = smattn_validate(c.pp, c.pin, c.pout);
    if ((int)v < 0 || v > SMATTN_ERR_LAYOUT || v == SMATTN_ERR_INTERNAL)
        report(&c, &fp, "validate status", v, v);
    if (v == SMATTN_OK && !fits(&c))
        goto done; /* valid, but beyond the harness's buffers: nothing safe to run */
    smattn_ref_config rc = {1, 0, 0, 0};
    smattn_status r = smattn_ref(c.pp, c.pin, c.pout, &rc, NULL);
    if (r != v && !(v == SMATTN_OK && r == SMATTN_ERR_PRECISION && c.p.softcap > 0))
        report(&c, &fp, "smattn_ref status", v, r);
    smattn_opt_config oc = {1, NULL};
    smattn_status a = c.pp && c.p.op == SMATTN_OP_SOFTMAX ? smattn_softmax(c.pp, c.pin, c.pout, &oc)
                                                          : smattn_attention(c.pp, c.pin, c.pout, &oc);
    if (a != v && !(v == SMATTN_OK && a == SMATTN_ERR_UNSUPPORTED && kernel_unsupported(&c)))
        report(&c, &fp, "kernel status", v, a);
done:
    free(wide);
    for (int t = 0; t < T_N; t++)
        free(c.buf[t]);
    fuzz_problem_free(&fp);
    return 0;
}
