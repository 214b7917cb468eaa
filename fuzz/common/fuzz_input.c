/* SPDX-License-Identifier: MIT */
/* fuzz_input.c: bytes to a valid small problem (see fuzz_input.h for the convention). */
#include "fuzz/common/fuzz_input.h"

#include <float.h>
#include <inttypes.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "core/internal.h" /* smattn__quantise_block */

/* ---- the byte source ----------------------------------------------------------------- */

void fuzz_provider_init(fuzz_provider *dp, const uint8_t *data, size_t size)
{
    dp->data = data;
    dp->lo = 0;
    dp->hi = data ? size : 0;
}

size_t fuzz_remaining(const fuzz_provider *dp)
{
    return dp->hi - dp->lo;
}

static uint32_t take_byte(fuzz_provider *dp)
{
    if (dp->hi == dp->lo)
        return 0;
    return dp->data[--dp->hi];
}

uint32_t fuzz_take(fuzz_provider *dp, uint32_t n)
{
    if (n <= 1)
        return 0;
    uint32_t v = take_byte(dp);
    if (n > 256)
        v = v << 8 | take_byte(dp);
    return v % n;
}

uint32_t fuzz_take_u32(fuzz_provider *dp)
{
    uint32_t v = 0;
    for (int i = 0; i < 4; i++)
        v = v << 8 | take_byte(dp);
    return v;
}

/* ---- values ---------------------------------------------------------------------------- */

typedef struct prng {
    uint64_t s;
} prng;

static uint64_t prng_next(prng *r)
{
    /* splitmix64: every seed, 0 included, gives a full-period stream */
    uint64_t z = (r->s += 0x9E3779B97F4A7C15u);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9u;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBu;
    return z ^ (z >> 31);
}

static double prng_unif(prng *r)
{
    return (double)(prng_next(r) >> 11) * 0x1p-53;
}

static float from_bits(uint32_t b)
{
    float f;
    memcpy(&f, &b, sizeof f);
    return f;
}

float fuzz_special_value(int code)
{
    switch (code) {
    case 0: return 0.0f;
    case 1: return -0.0f;
    case 2: return HUGE_VALF;
    case 3: return -HUGE_VALF;
    case 4: return from_bits(0x7fc00000u); /* quiet NaN */
    case 5: return FLT_MAX;
    case 6: return -FLT_MAX;
    case 7: return FLT_MIN;
    case 8: return FLT_TRUE_MIN;
    case 9: return -FLT_TRUE_MIN;
    case 10: return 0x1.fffffcp-127f; /* largest subnormal */
    case 11: return 0x1.62e43p+6f;    /* expf overflows from here */
    case 12: return 0x1.62e42ep+6f;   /* largest argument with a finite expf */
    case 13: return -0x1.9fe368p+6f;  /* expf underflows to 0 below this */
    case 14: return -0x1.5d589ep+6f;  /* expf reaches FLT_MIN near here */
    case 15: return 1.0f;
    case 16: return -1.0f;
    case 17: return 65504.0f;         /* binary16's largest */
    case 18: return 0x1.fep+127f;     /* bfloat16's largest */
    default: return from_bits(0xffc00001u); /* a negative NaN with a payload */
    }
}

static double grad_splitmix(uint64_t *s)
{
    uint64_t z = (*s += 0x9e3779b97f4a7c15u);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9u;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebu;
    z ^= z >> 31;
    return (double)(z >> 11) * 0x1p-52 * 4.0 - 2.0; /* [-2, 6): 53 bits times 2^-52 is in [0, 2) */
}

smattn_dtype fuzz_grad_dtype(uint32_t c0, uint32_t seed)
{
    if (c0 & 8)
        return SMATTN_F64;
    return seed >> 30 == 2 ? SMATTN_F16 : seed >> 30 == 3 ? SMATTN_BF16 : SMATTN_F32;
}

/* x rounded once to vt (an F64 vt: x itself) */
static double grad_round(double x, smattn_dtype vt)
{
    if (vt == SMATTN_F64)
        return x;
    unsigned char b[4];
    smattn_store(b, vt, 0, x);
    return smattn_load(b, vt, 0);
}

int fuzz_grad_values(const smattn_problem *p, uint32_t seed, int special, smattn_dtype vt,
                     double **dout, double **dl)
{
    const int64_t no = p->B * p->S * p->Hq * p->Dv, nl = p->B * p->Hq * p->S;
    uint64_t s = seed;
    double *o = calloc((size_t)(no > 0 ? no : 1), sizeof *o);
    double *l = dl ? calloc((size_t)(nl > 0 ? nl : 1), sizeof *l) : NULL;
    if (!o || (dl && !l)) {
        free(o), free(l);
        return -1;
    }
    for (int64_t e = 0; e < no; e++)
        o[e] = grad_round(grad_splitmix(&s), vt == SMATTN_F64 ? vt : SMATTN_F32);
    for (int64_t e = 0; l && e < nl; e++)
        l[e] = grad_round(grad_splitmix(&s), vt == SMATTN_F64 ? vt : SMATTN_F32);
    for (int k = 0; special && k < 3; k++) {
        double *t = l && k == 2 ? l : o;
        const int64_t n = l && k == 2 ? nl : no;
        t[(int64_t)((grad_splitmix(&s) + 2) / 4 * (double)n) % n] = (double)fuzz_special_value(
            (int)((grad_splitmix(&s) + 2) / 4 * FUZZ_NSPECIAL) % FUZZ_NSPECIAL);
    }
    for (int64_t e = 0; vt != SMATTN_F32 && e < no; e++) /* binary32 values: as they are */
        o[e] = grad_round(o[e], vt);
    for (int64_t e = 0; vt != SMATTN_F32 && l && e < nl; e++)
        l[e] = grad_round(l[e], vt);
    *dout = o;
    if (dl)
        *dl = l;
    return 0;
}

static double draw(prng *r, int mode, double equal)
{
    double u = 2 * prng_unif(r) - 1;
    switch (mode) {
    case FUZZ_VAL_WIDE: return 80 * u;
    case FUZZ_VAL_EQUAL: return equal;
    case FUZZ_VAL_DOMINANT: return prng_next(r) % 16 == 0 ? 30 + u : u;
    case FUZZ_VAL_TINY: return u * 0x1p-126 * (double)(1 + prng_next(r) % 8);
    case FUZZ_VAL_EXPONENT: return ldexp(u, (int)(prng_next(r) % 81) - 40);
    default: return 2 * u;
    }
}

static void fill(prng *r, int mode, void *buf, smattn_dtype t, size_t n)
{
    double equal = 2 * prng_unif(r) - 1;
    if (t == SMATTN_F32) {
        /* the conversion rounds to nearest even like smattn_store (C11 F.5: correctly
         * rounded), which costs a generic rounding per element: 8% of fuzz_diff's time.
         * draw() gives finite values only, so no NaN payload to canonicalise. */
        float *f = buf;
        for (size_t i = 0; i < n; i++)
            f[i] = (float)draw(r, mode, equal);
        return;
    }
    for (size_t i = 0; i < n; i++)
        smattn_store(buf, t, (int64_t)i, draw(r, mode, equal));
}

/* ---- the decoder ----------------------------------------------------------------------- */

const char *fuzz_shape_class_name(int cls)
{
    static const char *const names[FUZZ_NCLASSES] = {"prefill", "chunked_prefill", "decode",
                                                     "small_s", "s_gt_t"};
    return cls >= 0 && cls < FUZZ_NCLASSES ? names[cls] : "unknown";
}

static const int64_t simd_dims[] = {1, 3, 7, 8, 9, 15, 16, 17, 31, 33, 64};
#define NDIMS ((uint32_t)(sizeof simd_dims / sizeof simd_dims[0]))

static int64_t take_dim(fuzz_provider *dp)
{
    uint32_t k = fuzz_take(dp, NDIMS + 4);
    return k < NDIMS ? simd_dims[k] : 1 + (int64_t)fuzz_take(dp, FUZZ_MAX_D);
}

static int64_t min64(int64_t a, int64_t b)
{
    return a < b ? a : b;
}

static void *alloc_elems(size_t n, size_t es)
{
    return calloc(n ? n : 1, es); /* never NULL for a present tensor */
}

int fuzz_problem_decode(fuzz_problem *fp, fuzz_provider *dp)
{
    memset(fp, 0, sizeof *fp);
    smattn_problem *p = &fp->p;
    smattn_inputs *in = &fp->in;
    *p = smattn_problem_default();
    p->op = fuzz_take(dp, 8) == 7 ? SMATTN_OP_SOFTMAX : SMATTN_OP_ATTENTION;
    int cls = fp->shape_class = (int)fuzz_take(dp, FUZZ_NCLASSES);
    p->B = 1 + fuzz_take(dp, 2);
    static const int ratios[] = {1, 2, 4, 7, 0};
    fp->gqa = ratios[fuzz_take(dp, 5)];
    if (fp->gqa) {
        p->Hkv = 1 + fuzz_take(dp, 2);
        p->Hq = p->Hkv * fp->gqa;
    } else { /* MQA */
        p->Hkv = 1;
        p->Hq = 1 + fuzz_take(dp, 8);
    }
    int64_t R = FUZZ_MAX_ROWS / (p->B * p->Hq); /* >= 2: B * Hq <= 28 */
    switch (cls) {
    case FUZZ_PREFILL:
        p->T = p->S = 1 + fuzz_take(dp, (uint32_t)min64(FUZZ_MAX_T, R));
        break;
    case FUZZ_CHUNKED:
        p->T = 2 + fuzz_take(dp, FUZZ_MAX_T - 1);
        p->S = 1 + fuzz_take(dp, (uint32_t)min64(p->T - 1, R));
        break;
    case FUZZ_DECODE:
        p->S = 1;
        p->T = 1 + fuzz_take(dp, FUZZ_MAX_T);
        break;
    case FUZZ_SMALL_S:
        p->S = 1 + fuzz_take(dp, (uint32_t)min64(4, R));
        p->T = 1 + fuzz_take(dp, FUZZ_MAX_T);
        break;
    default:
        p->T = 1 + fuzz_take(dp, (uint32_t)min64(R - 1, FUZZ_MAX_T - 1));
        p->S = p->T + 1 + fuzz_take(dp, (uint32_t)min64(8, R - p->T));
        break;
    }
    p->D = take_dim(dp);
    p->Dv = take_dim(dp);
    switch (fuzz_take(dp, 4)) {
    case 0: p->scale = smattn_default_scale(p->D); break;
    case 1: p->scale = smattn_default_scale(p->D) * (0.25 + fuzz_take(dp, 256) / 64.0); break;
    case 2: p->scale = 1.0; break;
    default: p->scale = ldexp(1.0, (int)fuzz_take(dp, 24) - 12); break;
    }
    p->causal = (smattn_causal)fuzz_take(dp, 3);
    if (fuzz_take(dp, 4) == 0)
        p->window_left = fuzz_take(dp, FUZZ_MAX_T);
    if (fuzz_take(dp, 6) == 0)
        p->window_right = fuzz_take(dp, 8);
    if (fuzz_take(dp, 8) == 0)
        p->softcap = 0.5 * (1 + fuzz_take(dp, 100));
    if (fuzz_take(dp, 3) == 0) {
        for (int64_t b = 0; b < p->B; b++)
            fp->kv_lens[b] = fuzz_take(dp, (uint32_t)p->T + 1);
        p->kv_lens = fp->kv_lens;
    }
    if (fuzz_take(dp, 5) == 0) {
        for (int64_t b = 0; b < p->B; b++)
            fp->q_lens[b] = fuzz_take(dp, (uint32_t)p->S + 1);
        p->q_lens = fp->q_lens;
    }
    p->empty_rows = (smattn_empty)fuzz_take(dp, 3);
    p->empty_lse = (smattn_empty_lse)fuzz_take(dp, 3);
    fp->bias_kind = fuzz_take(dp, 4) == 0 ? 1 + (int)fuzz_take(dp, 2) : 0;
    fp->mask_kind = fuzz_take(dp, 5) == 0 ? 1 + (int)fuzz_take(dp, 2) : 0;
    int mask_density = 1 + (int)fuzz_take(dp, 8); /* eighths of keys allowed */
    int bias_ninf = 2 + (int)fuzz_take(dp, 15);   /* one -inf in bias_ninf */
    int sinks = fuzz_take(dp, 5) == 0;
    smattn_dtype kvt = (smattn_dtype)(SMATTN_F32 + fuzz_take(dp, 3));
    fp->threads = 1 + (int)fuzz_take(dp, 4);
    fp->value_mode = (int)fuzz_take(dp, FUZZ_NVALMODES);
    fp->seed = fuzz_take_u32(dp);
    prng r = {fp->seed};

    /* tensors */
    const int att = p->op == SMATTN_OP_ATTENTION;
    size_t kvs = smattn_dtype_size(kvt);
    if (att) {
        fp->nq = (size_t)(p->B * p->S * p->Hq * p->D);
        fp->nk = (size_t)(p->B * p->T * p->Hkv * p->D);
        fp->nv = (size_t)(p->B * p->T * p->Hkv * p->Dv);
        fp->q = alloc_elems(fp->nq, sizeof(float));
        fp->k = alloc_elems(fp->nk, kvs);
        fp->v = alloc_elems(fp->nv, kvs);
        if (!fp->q || !fp->k || !fp->v)
            return 1;
        fill(&r, fp->value_mode, fp->q, SMATTN_F32, fp->nq);
        fill(&r, fp->value_mode, fp->k, kvt, fp->nk);
        fill(&r, fp->value_mode == FUZZ_VAL_EQUAL ? FUZZ_VAL_UNIFORM : fp->value_mode, fp->v, kvt,
             fp->nv);
        in->q = (smattn_tensor){fp->q, SMATTN_F32, {0}};
        in->k = (smattn_tensor){fp->k, kvt, {0}};
        in->v = (smattn_tensor){fp->v, kvt, {0}};
        smattn_contiguous_strides(p, 'q', in->q.stride);
        smattn_contiguous_strides(p, 'k', in->k.stride);
        smattn_contiguous_strides(p, 'v', in->v.stride);
    } else {
        fp->nx = (size_t)(p->B * p->Hq * p->S * p->T);
        fp->x = alloc_elems(fp->nx, sizeof(float));
        if (!fp->x)
            return 1;
        fill(&r, fp->value_mode, fp->x, SMATTN_F32, fp->nx);
        in->x = (smattn_tensor){fp->x, SMATTN_F32, {0}};
        smattn_contiguous_strides(p, 'x', in->x.stride);
    }
    if (fp->bias_kind) { /* 1: [B,1,S,T]; 2: [B,Hq,S,T] */
        int64_t H = fp->bias_kind == 1 ? 1 : p->Hq;
        fp->nbias = (size_t)(p->B * H * p->S * p->T);
        fp->bias = alloc_elems(fp->nbias, sizeof(float));
        if (!fp->bias)
            return 1;
        for (size_t i = 0; i < fp->nbias; i++)
            fp->bias[i] = prng_next(&r) % (uint64_t)bias_ninf == 0
                              ? -HUGE_VALF
                              : (float)(fp->value_mode == FUZZ_VAL_WIDE ? 40 * (prng_unif(&r) - 0.5)
                                                                        : prng_unif(&r) - 0.5);
        in->bias = (smattn_tensor){fp->bias, SMATTN_F32,
                                   {H * p->S * p->T, fp->bias_kind == 1 ? 0 : p->S * p->T, p->T, 1}};
    }
    if (fp->mask_kind) { /* 1: [B,Hq,1,T]; 2: [B,Hq,S,T] */
        int64_t S = fp->mask_kind == 1 ? 1 : p->S;
        fp->nmask = (size_t)(p->B * p->Hq * S * p->T);
        fp->mask = alloc_elems(fp->nmask, 1);
        if (!fp->mask)
            return 1;
        for (size_t i = 0; i < fp->nmask; i++)
            fp->mask[i] = (unsigned char)(prng_next(&r) % 8 < (uint64_t)mask_density);
        in->mask = (smattn_tensor){fp->mask, SMATTN_BOOL,
                                   {p->Hq * S * p->T, S * p->T, fp->mask_kind == 1 ? 0 : p->T, 1}};
    }
    if (sinks) {
        fp->sinks = alloc_elems((size_t)p->Hq, sizeof(float));
        if (!fp->sinks)
            return 1;
        for (int64_t h = 0; h < p->Hq; h++)
            fp->sinks[h] = (float)(4 * prng_unif(&r) - 2);
        in->sinks = (smattn_tensor){fp->sinks, SMATTN_F32, {1}};
    }

    /* special-value patches: (tensor, index, code); the last code copies the element
     * before, so that two scores are equal */
    fp->npatches = (int)fuzz_take(dp, 9);
    for (int n = 0; n < fp->npatches; n++) {
        int which = (int)fuzz_take(dp, 5);
        uint32_t idx = fuzz_take(dp, 65536);
        int code = (int)fuzz_take(dp, FUZZ_NSPECIAL + 1);
        void *buf = NULL;
        smattn_dtype t = SMATTN_F32;
        size_t cnt = 0;
        switch (which) {
        case 0: buf = att ? (void *)fp->q : (void *)fp->x, cnt = att ? fp->nq : fp->nx; break;
        case 1: buf = fp->k, t = kvt, cnt = fp->nk; break;
        case 2: buf = fp->v, t = kvt, cnt = fp->nv; break;
        case 3: buf = fp->bias, cnt = fp->nbias; break;
        default: buf = fp->sinks, cnt = fp->sinks ? (size_t)p->Hq : 0; break;
        }
        if (!buf || !cnt)
            continue;
        size_t i = idx % cnt;
        double v = code == FUZZ_NSPECIAL ? (i ? smattn_load(buf, t, (int64_t)i - 1) : 0.0)
                                         : (double)fuzz_special_value(code);
        smattn_store(buf, t, (int64_t)i, v);
    }

    /* the front bytes, raw, over the tensors in order */
    struct {
        void *buf;
        size_t bytes;
    } raw[5] = {{att ? (void *)fp->q : (void *)fp->x, (att ? fp->nq : fp->nx) * sizeof(float)},
                {fp->k, fp->nk * kvs},
                {fp->v, fp->nv * kvs},
                {fp->bias, fp->nbias * sizeof(float)},
                {fp->sinks, fp->sinks ? (size_t)p->Hq * sizeof(float) : 0}};
    for (int k = 0; k < 5 && fuzz_remaining(dp); k++) {
        size_t n = fuzz_remaining(dp) < raw[k].bytes ? fuzz_remaining(dp) : raw[k].bytes;
        if (n) {
            memcpy(raw[k].buf, dp->data + dp->lo, n);
            dp->lo += n;
            fp->raw_bytes += n;
        }
    }
    return 0;
}

int fuzz_problem_decode_bytes(fuzz_problem *fp, const uint8_t *data, size_t size)
{
    fuzz_provider dp;
    fuzz_provider_init(&dp, data, size);
    if (fuzz_problem_decode(fp, &dp)) {
        fuzz_problem_free(fp);
        return 1;
    }
    return 0;
}

/* The leading block n[4] of a contiguous 4-D tensor of dims o[4], as a new contiguous
 * buffer (NULL if out of memory). */
static void *sub_block(const void *src, size_t es, const int64_t o[4], const int64_t n[4])
{
    unsigned char *dst = alloc_elems((size_t)(n[0] * n[1] * n[2] * n[3]), es);
    if (!dst)
        return NULL;
    const unsigned char *s = src;
    size_t k = 0, row = (size_t)n[3] * es;
    for (int64_t a = 0; a < n[0]; a++)
        for (int64_t b = 0; b < n[1]; b++)
            for (int64_t c = 0; c < n[2]; c++, k += row)
                memcpy(dst + k, s + (size_t)(((a * o[1] + b) * o[2] + c) * o[3]) * es, row);
    return dst;
}

/* The leading block n of buf (dims o), replacing buf (freed); *count gets its size. NULL
 * (and *fail set) if out of memory; NULL stays NULL. */
static void *crop(void *buf, size_t es, const int64_t o[4], const int64_t n[4], size_t *count,
                  int *fail)
{
    if (!buf)
        return NULL;
    void *c = sub_block(buf, es, o, n);
    free(buf);
    if (!c)
        *fail = 1;
    *count = c ? (size_t)(n[0] * n[1] * n[2] * n[3]) : 0;
    return c;
}

int fuzz_problem_shrink(fuzz_problem *fp, int64_t max_p)
{
    smattn_problem *p = &fp->p;
    int64_t B = p->B, S = p->S, T = p->T, Hq = p->Hq, Hkv = p->Hkv;
    if (B * Hq * S * T <= max_p)
        return 0;
    fp->full_p = B * Hq * S * T;
    B = 1;
    if (B * Hq * S * T > max_p && Hkv > 1)
        Hq /= Hkv, Hkv = 1; /* the GQA ratio survives */
    if (B * Hq * S * T > max_p && Hq > 2)
        Hq = max_p / (S * T) > 2 ? min64(Hq, max_p / (S * T)) : 2;
    int64_t R = max_p / Hq; /* S * T budget */
    if (R < 2)
        R = 2;
    if (S * T > R) {
        switch (fp->shape_class) {
        case FUZZ_PREFILL: {
            int64_t n = 1;
            while ((n + 1) * (n + 1) <= R)
                n++;
            S = T = min64(S, n);
            break;
        }
        case FUZZ_CHUNKED:
            T = min64(T, R / S > 2 ? R / S : 2);
            S = min64(S, T - 1);
            if (S * T > R)
                S = R / T > 1 ? R / T : 1;
            break;
        case FUZZ_S_GT_T: {
            int64_t n = 1;
            while ((n + 1) * (n + 2) <= R)
                n++;
            T = min64(T, n);
            S = min64(S, R / T);
            if (S <= T)
                S = T + 1;
            break;
        }
        default: /* decode and small S: keep S (<= 4), cut T */
            T = min64(T, R / S > 1 ? R / S : 1);
            break;
        }
    }
    const int att = p->op == SMATTN_OP_ATTENTION;
    size_t kvs = smattn_dtype_size(fp->in.k.dtype);
    int64_t D = p->D, Dv = p->Dv;
    int fail = 0;
    if (att) {
        fp->q = crop(fp->q, sizeof(float), (int64_t[4]){p->B, p->S, p->Hq, D},
                     (int64_t[4]){B, S, Hq, D}, &fp->nq, &fail);
        fp->k = crop(fp->k, kvs, (int64_t[4]){p->B, p->T, p->Hkv, D}, (int64_t[4]){B, T, Hkv, D},
                     &fp->nk, &fail);
        fp->v = crop(fp->v, kvs, (int64_t[4]){p->B, p->T, p->Hkv, Dv},
                     (int64_t[4]){B, T, Hkv, Dv}, &fp->nv, &fail);
    } else {
        fp->x = crop(fp->x, sizeof(float), (int64_t[4]){p->B, p->Hq, p->S, p->T},
                     (int64_t[4]){B, Hq, S, T}, &fp->nx, &fail);
    }
    if (fp->bias_kind)
        fp->bias = crop(fp->bias, sizeof(float),
                     (int64_t[4]){p->B, fp->bias_kind == 1 ? 1 : p->Hq, p->S, p->T},
                     (int64_t[4]){B, fp->bias_kind == 1 ? 1 : Hq, S, T}, &fp->nbias, &fail);
    if (fp->mask_kind)
        fp->mask = crop(fp->mask, 1, (int64_t[4]){p->B, p->Hq, fp->mask_kind == 1 ? 1 : p->S, p->T},
                     (int64_t[4]){B, Hq, fp->mask_kind == 1 ? 1 : S, T}, &fp->nmask, &fail);
    if (fail) {
        fuzz_problem_free(fp);
        return 1;
    }
    p->B = B, p->S = S, p->T = T, p->Hq = Hq, p->Hkv = Hkv; /* sinks: the first Hq are kept */
    for (int64_t b = 0; b < B; b++) {
        fp->kv_lens[b] = min64(fp->kv_lens[b], T);
        fp->q_lens[b] = min64(fp->q_lens[b], S);
    }
    smattn_inputs *in = &fp->in;
    if (att) {
        in->q.data = fp->q, in->k.data = fp->k, in->v.data = fp->v;
        smattn_contiguous_strides(p, 'q', in->q.stride);
        smattn_contiguous_strides(p, 'k', in->k.stride);
        smattn_contiguous_strides(p, 'v', in->v.stride);
    } else {
        in->x.data = fp->x;
        smattn_contiguous_strides(p, 'x', in->x.stride);
    }
    if (fp->bias_kind) {
        int64_t H = fp->bias_kind == 1 ? 1 : Hq;
        in->bias = (smattn_tensor){fp->bias, SMATTN_F32,
                                   {H * S * T, fp->bias_kind == 1 ? 0 : S * T, T, 1}};
    }
    if (fp->mask_kind) {
        int64_t Sm = fp->mask_kind == 1 ? 1 : S;
        in->mask = (smattn_tensor){fp->mask, SMATTN_BOOL,
                                   {Hq * Sm * T, Sm * T, fp->mask_kind == 1 ? 0 : T, 1}};
    }
    return 0;
}

/* Columns along axis ax of a contiguous 4-D tensor of dims o repeated to n (> o[ax]). */
static void *repeat_axis(void *buf, size_t es, const int64_t o[4], int ax, int64_t n, size_t *count,
                         int *fail)
{
    if (!buf)
        return NULL;
    int64_t d[4] = {o[0], o[1], o[2], o[3]};
    d[ax] = n;
    size_t cnt = (size_t)(d[0] * d[1] * d[2] * d[3]);
    unsigned char *c = alloc_elems(cnt, es);
    if (c) {
        const unsigned char *s = buf;
        int64_t x[4];
        size_t k = 0;
        for (x[0] = 0; x[0] < d[0]; x[0]++)
            for (x[1] = 0; x[1] < d[1]; x[1]++)
                for (x[2] = 0; x[2] < d[2]; x[2]++)
                    for (x[3] = 0; x[3] < d[3]; x[3]++, k++) {
                        int64_t y[4] = {x[0], x[1], x[2], x[3]};
                        y[ax] %= o[ax];
                        memcpy(c + k * es, s + (size_t)(((y[0] * o[1] + y[1]) * o[2] + y[2]) * o[3] + y[3]) * es, es);
                    }
    }
    free(buf);
    if (!c)
        *fail = 1;
    *count = c ? cnt : 0;
    return c;
}

int fuzz_problem_stretch_keys(fuzz_problem *fp, int64_t T)
{
    smattn_problem *p = &fp->p;
    if (p->op != SMATTN_OP_ATTENTION || T <= p->T)
        return 0;
    size_t kvs = smattn_dtype_size(fp->in.k.dtype);
    int fail = 0;
    fp->k = repeat_axis(fp->k, kvs, (int64_t[4]){p->B, p->T, p->Hkv, p->D}, 1, T, &fp->nk, &fail);
    fp->v = repeat_axis(fp->v, kvs, (int64_t[4]){p->B, p->T, p->Hkv, p->Dv}, 1, T, &fp->nv, &fail);
    if (fp->bias_kind)
        fp->bias = repeat_axis(fp->bias, sizeof(float),
                               (int64_t[4]){p->B, fp->bias_kind == 1 ? 1 : p->Hq, p->S, p->T}, 3,
                               T, &fp->nbias, &fail);
    if (fp->mask_kind)
        fp->mask = repeat_axis(fp->mask, 1,
                               (int64_t[4]){p->B, p->Hq, fp->mask_kind == 1 ? 1 : p->S, p->T}, 3,
                               T, &fp->nmask, &fail);
    if (fail) {
        fuzz_problem_free(fp);
        return 1;
    }
    for (int64_t b = 0; p->kv_lens && b < p->B; b++)
        fp->kv_lens[b] += T - p->T;
    p->T = T;
    smattn_inputs *in = &fp->in;
    in->k.data = fp->k, in->v.data = fp->v;
    smattn_contiguous_strides(p, 'k', in->k.stride);
    smattn_contiguous_strides(p, 'v', in->v.stride);
    if (fp->bias_kind) {
        int64_t H = fp->bias_kind == 1 ? 1 : p->Hq;
        in->bias = (smattn_tensor){fp->bias, SMATTN_F32,
                                   {H * p->S * T, fp->bias_kind == 1 ? 0 : p->S * T, T, 1}};
    }
    if (fp->mask_kind) {
        int64_t Sm = fp->mask_kind == 1 ? 1 : p->S;
        in->mask = (smattn_tensor){fp->mask, SMATTN_BOOL,
                                   {p->Hq * Sm * T, Sm * T, fp->mask_kind == 1 ? 0 : T, 1}};
    }
    return 0;
}

fuzz_dtype_choice fuzz_take_dtypes(fuzz_provider *dp)
{
    static const smattn_dtype order[3] = {SMATTN_F16, SMATTN_BF16, SMATTN_F32};
    fuzz_dtype_choice c;
    c.qx = order[fuzz_take(dp, 3)];
    c.bias = order[fuzz_take(dp, 3)];
    c.out = order[fuzz_take(dp, 3)];
    return c;
}

/* n float32 elements rounded to t in a new buffer (NULL if out of memory). */
static void *convert(const float *src, size_t n, smattn_dtype t)
{
    void *c = alloc_elems(n, smattn_dtype_size(t));
    for (size_t i = 0; c && i < n; i++)
        smattn_store(c, t, (int64_t)i, (double)src[i]);
    return c;
}

int fuzz_problem_convert(fuzz_problem *fp, smattn_dtype qx, smattn_dtype bias)
{
    smattn_inputs *in = &fp->in;
    float **qxbuf = fp->p.op == SMATTN_OP_ATTENTION ? &fp->q : &fp->x;
    smattn_tensor *qxt = fp->p.op == SMATTN_OP_ATTENTION ? &in->q : &in->x;
    size_t nqx = fp->p.op == SMATTN_OP_ATTENTION ? fp->nq : fp->nx;
    struct {
        float **buf;
        smattn_tensor *t;
        size_t n;
        smattn_dtype to;
    } job[2] = {{qxbuf, qxt, nqx, qx}, {&fp->bias, &in->bias, fp->nbias, bias}};
    for (int k = 0; k < 2; k++) {
        if (!*job[k].buf || job[k].t->dtype != SMATTN_F32 || job[k].to == SMATTN_F32)
            continue;
        void *c = convert(*job[k].buf, job[k].n, job[k].to);
        if (!c) {
            fuzz_problem_free(fp);
            return 1;
        }
        free(*job[k].buf);
        *job[k].buf = c; /* holds job[k].to elements from here on (see fuzz_input.h) */
        job[k].t->data = c;
        job[k].t->dtype = job[k].to;
    }
    return 0;
}

int fuzz_problem_alibi(fuzz_problem *fp)
{
    smattn_problem *p = &fp->p;
    prng r = {(uint64_t)fp->seed * 0x9e3779b97f4a7c15u + 0xa11b1u};
    int draw = (int)(prng_next(&r) % 8);
    if (p->op != SMATTN_OP_ATTENTION || draw > 2)
        return 0;
    smattn_alibi_mode mode = (smattn_alibi_mode)(SMATTN_ALIBI_SYMMETRIC + draw);
    if (mode == SMATTN_ALIBI_MASK && !fp->in.bias.data)
        mode = SMATTN_ALIBI_SYMMETRIC;
    int per_batch = prng_next(&r) % 2 == 0;
    int64_t n = (per_batch ? p->B : 1) * p->Hq;
    fp->alibi_slopes = alloc_elems((size_t)n, sizeof(float));
    if (!fp->alibi_slopes) {
        fuzz_problem_free(fp);
        return 1;
    }
    int kind = (int)(prng_next(&r) % 3);
    for (int64_t k = 0; k < n; k++)
        fp->alibi_slopes[k] = kind == 0 ? (float)ldexp(1.0, -(int)(k % p->Hq + 1))
                              : kind == 1 ? (float)(4 * prng_unif(&r) - 2)
                                          : (k % 3 == 0 ? 0.0f : 0.125f);
    p->alibi_mode = mode;
    p->alibi_slopes = fp->alibi_slopes;
    p->alibi_slopes_per_batch = per_batch;
    return 0;
}

/* ---- quantised inputs (SPEC 2.9) ------------------------------------------------------- */

static int is_fp8(smattn_dtype t)
{
    return t == SMATTN_F8E4M3 || t == SMATTN_F8E5M2;
}

static int is_block(smattn_dtype t)
{
    return smattn_dtype_block(t) > 1;
}

/* The bytes of n elements of t. */
static size_t bytes_of(smattn_dtype t, size_t n)
{
    return n / (size_t)smattn_dtype_block(t) * smattn_dtype_size(t);
}

/* Tensor [B, rows, H, dim] of dtype t at *buf re-encoded in dtype to with its last
 * dimension widened to dim2 (the new columns uniform in [-2, 2] from r); the buffer
 * replaced. 0, or -1 out of memory. */
static int requant(void **buf, smattn_tensor *t, size_t *n, int64_t B, int64_t rows, int64_t H,
                   int64_t dim, int64_t dim2, smattn_dtype to, prng *r)
{
    const size_t n2 = (size_t)(B * rows * H * dim2);
    double *x = malloc((n2 ? n2 : 1) * sizeof *x);
    unsigned char *c = alloc_elems(bytes_of(to, n2), 1);
    if (!x || !c) {
        free(x), free(c);
        return -1;
    }
    for (size_t row = 0; row < (size_t)(B * rows * H); row++)
        for (int64_t d = 0; d < dim2; d++)
            x[row * (size_t)dim2 + (size_t)d] =
                d < dim ? smattn_load(*buf, t->dtype, (int64_t)row * dim + d)
                        : 4 * prng_unif(r) - 2;
    if (is_block(to))
        for (size_t k = 0; k < n2 / SMATTN_QBLOCK; k++)
            smattn__quantise_block(x + k * SMATTN_QBLOCK, to, c + k * smattn_dtype_size(to));
    else
        for (size_t e = 0; e < n2; e++)
            smattn_store(c, to, (int64_t)e, x[e]);
    free(x);
    free(*buf);
    *buf = c;
    *n = n2;
    t->data = c;
    t->dtype = to;
    t->stride[3] = 1, t->stride[2] = dim2, t->stride[1] = H * dim2, t->stride[0] = rows * H * dim2;
    return 0;
}

int fuzz_problem_quant(fuzz_problem *fp, int in8)
{
    smattn_problem *p = &fp->p;
    prng r = {(uint64_t)fp->seed * 0xd1342543de82ef95u + 0x9a47u};
    if (p->op != SMATTN_OP_ATTENTION || (int)(prng_next(&r) % 8) >= in8)
        return 0;
    static const smattn_dtype qs[3] = {SMATTN_F32, SMATTN_F8E4M3, SMATTN_F8E5M2};
    static const smattn_dtype kvs[4] = {SMATTN_F8E4M3, SMATTN_F8E5M2, SMATTN_Q8_0, SMATTN_Q4_0};
    const smattn_dtype qt = qs[prng_next(&r) % 3], kvt = kvs[prng_next(&r) % 4];
    const int descale = (int)(prng_next(&r) % 3); /* 0 none, 1 per tensor, 2 per head */
    int64_t D2 = p->D, Dv2 = p->Dv;
    if (is_block(kvt)) /* whole blocks along D and Dv (SPEC 2.9) */
        D2 = (p->D + 31) / 32 * 32, Dv2 = (p->Dv + 31) / 32 * 32;
    void **qb = (void **)&fp->q;
    if (((qt != SMATTN_F32 || D2 != p->D) &&
         requant(qb, &fp->in.q, &fp->nq, p->B, p->S, p->Hq, p->D, D2,
                 qt != SMATTN_F32 ? qt : fp->in.q.dtype, &r)) ||
        requant(&fp->k, &fp->in.k, &fp->nk, p->B, p->T, p->Hkv, p->D, D2, kvt, &r) ||
        requant(&fp->v, &fp->in.v, &fp->nv, p->B, p->T, p->Hkv, p->Dv, Dv2, kvt, &r)) {
        fuzz_problem_free(fp);
        return 1;
    }
    p->D = D2, p->Dv = Dv2;
    if (!descale)
        return 0;
    const int64_t n = p->B * p->Hkv;
    fp->descale = malloc(sizeof *fp->descale + 3 * (size_t)n * sizeof(double));
    if (!fp->descale) {
        fuzz_problem_free(fp);
        return 1;
    }
    *fp->descale = smattn_descale_default();
    double *arr = (double *)(fp->descale + 1);
    double *one[3] = {&fp->descale->q, &fp->descale->k, &fp->descale->v};
    const double **head[3] = {&fp->descale->q_head, &fp->descale->k_head, &fp->descale->v_head};
    for (int t = 0; t < 3; t++) {
        if (prng_next(&r) % 4 == 0)
            continue; /* this tensor without a factor */
        for (int64_t e = 0; e < (descale == 2 ? n : 1); e++) /* binary32 in [2^-4, 2^4] */
            arr[t * n + e] = (double)(float)ldexp(1.0 + prng_unif(&r), (int)(prng_next(&r) % 8) - 4);
        if (descale == 2)
            *head[t] = arr + t * n;
        else
            *one[t] = arr[t * n];
    }
    p->descale = fp->descale;
    return 0;
}

double fuzz_descale(const fuzz_problem *fp, char which, int64_t b, int64_t g)
{
    const smattn_descale *d = fp->p.descale;
    if (!d)
        return 1.0;
    const double *a = which == 'q' ? d->q_head : which == 'k' ? d->k_head : d->v_head;
    return a ? a[b * fp->p.Hkv + g] : which == 'q' ? d->q : which == 'k' ? d->k : d->v;
}

/* Element i[0..3] of tensor t (through its strides) copied to element o[0..3] of dst
 * (strides ds, t's dtype). */
static void copy_elem(void *dst, const int64_t ds[4], const smattn_tensor *t, const int64_t i[4],
                      const int64_t o[4])
{
    size_t es = smattn_dtype_size(t->dtype);
    int64_t from = i[0] * t->stride[0] + i[1] * t->stride[1] + i[2] * t->stride[2] + i[3] * t->stride[3];
    int64_t to = o[0] * ds[0] + o[1] * ds[1] + o[2] * ds[2] + o[3] * ds[3];
    memcpy((unsigned char *)dst + (size_t)to * es, (const unsigned char *)t->data + (size_t)from * es, es);
}

/* n elements of dtype t, each NaN, +inf or -inf: what a layout leaves unread (SPEC 2.7). */
static void *garbage_elems(smattn_dtype t, int64_t n)
{
    void *buf = alloc_elems((size_t)(n > 0 ? n : 1), smattn_dtype_size(t));
    for (int64_t k = 0; buf && k < n; k++)
        smattn_store(buf, t, k, k % 3 == 0 ? (double)NAN : k % 3 == 1 ? HUGE_VAL : -HUGE_VAL);
    return buf;
}

int fuzz_layout_draw(const fuzz_problem *fp, fuzz_layout *fl)
{
    memset(fl, 0, sizeof *fl);
    const smattn_problem *p = &fp->p;
    /* the seed and the shape: inputs too short to reach the seed's bytes (seed 0) vary */
    prng r = {(uint64_t)fp->seed * 0xd1b54a32d192ed03u +
              (uint64_t)(((p->T * 67 + p->S) * 67 + p->D) * 67 + p->Dv) * 4 + (uint64_t)p->B};
    if (p->op != SMATTN_OP_ATTENTION || prng_next(&r) % 8 >= 3)
        return 0;
    /* 0 packed Q; 1 packed K; 2 paged; 3 packed Q and K; 4 packed Q over pages */
    int kind = (int)(prng_next(&r) % 5);
    fl->packed_q = kind == 0 || kind >= 3;
    fl->keys = kind == 1 || kind == 3 ? 1 : kind == 2 || kind == 4 ? 2 : 0;
    const int64_t B = p->B, S = p->S, T = p->T, Hq = p->Hq, Hkv = p->Hkv, D = p->D, Dv = p->Dv;
    int64_t Sb[2], Tb[2];
    for (int64_t b = 0; b < B; b++) {
        Sb[b] = p->q_lens ? p->q_lens[b] : S;
        Tb[b] = p->kv_lens ? p->kv_lens[b] : T;
    }
    fl->p = *p;
    fl->in = fp->in;
    fl->p.layout = &fl->L;
    if (fl->packed_q) { /* the twin's q_lens are the slices */
        for (int64_t b = 0; b < B; b++)
            fl->cu_q[b + 1] = fl->cu_q[b] + Sb[b];
        const int64_t total = fl->cu_q[B];
        const int64_t qs[4] = {(int64_t)(prng_next(&r) % 4096), Hq * D, D, 1}; /* [0] unused */
        if (!(fl->q = garbage_elems(fp->in.q.dtype, (total > 0 ? total : 1) * Hq * D))) /* >= 1 row */
            return -1;
        for (int64_t b = 0; b < B; b++)
            for (int64_t i = 0; i < Sb[b]; i++)
                for (int64_t h = 0; h < Hq; h++)
                    for (int64_t d = 0; d < D; d++)
                        copy_elem(fl->q, qs, &fp->in.q, (const int64_t[4]){b, i, h, d},
                                  (const int64_t[4]){0, fl->cu_q[b] + i, h, d});
        fl->in.q.data = fl->q;
        memcpy(fl->in.q.stride, qs, sizeof qs);
        fl->L.cu_seqlens_q = fl->cu_q;
        fl->p.q_lens = NULL;
    }
    if (fl->keys == 1) { /* packed keys, half of them with seqused_k and dead keys after */
        const int used = prng_next(&r) % 2 == 0;
        for (int64_t b = 0; b < B; b++) {
            fl->used[b] = Tb[b];
            fl->cu_k[b + 1] = fl->cu_k[b] + Tb[b] + (used ? (int64_t)(prng_next(&r) % 4) : 0);
        }
        const int64_t total = fl->cu_k[B];
        const int64_t ks[4] = {(int64_t)(prng_next(&r) % 4096), Hkv * D, D, 1};
        const int64_t vs[4] = {ks[0], Hkv * Dv, Dv, 1};
        if (!(fl->k = garbage_elems(fp->in.k.dtype, (total > 0 ? total : 1) * Hkv * D)) ||
            !(fl->v = garbage_elems(fp->in.v.dtype, (total > 0 ? total : 1) * Hkv * Dv)))
            return -1;
        for (int64_t b = 0; b < B; b++)
            for (int64_t t = 0; t < Tb[b]; t++)
                for (int64_t g = 0; g < Hkv; g++) {
                    for (int64_t d = 0; d < D; d++)
                        copy_elem(fl->k, ks, &fp->in.k, (const int64_t[4]){b, t, g, d},
                                  (const int64_t[4]){0, fl->cu_k[b] + t, g, d});
                    for (int64_t d = 0; d < Dv; d++)
                        copy_elem(fl->v, vs, &fp->in.v, (const int64_t[4]){b, t, g, d},
                                  (const int64_t[4]){0, fl->cu_k[b] + t, g, d});
                }
        fl->L.cu_seqlens_k = fl->cu_k;
        fl->L.seqused_k = used ? fl->used : NULL;
        fl->p.kv_lens = NULL;
        fl->in.k.data = fl->k, fl->in.v.data = fl->v;
        memcpy(fl->in.k.stride, ks, sizeof ks);
        memcpy(fl->in.v.stride, vs, sizeof vs);
    } else if (fl->keys == 2) { /* pages in a random order, NHD or HND, wild entries after */
        static const int64_t sizes[] = {1, 2, 3, 4, 5, 7, 8, 16, 17, 32, 64};
        const int64_t ps = sizes[prng_next(&r) % (sizeof sizes / sizeof *sizes)];
        fl->hnd = prng_next(&r) % 2 == 0;
        const int64_t max_pages = (T + ps - 1) / ps + (int64_t)(prng_next(&r) % 2);
        const int64_t bt_stride = max_pages + (int64_t)(prng_next(&r) % 2);
        int64_t fresh = 0;
        for (int64_t b = 0; b < B; b++)
            fresh += (Tb[b] + ps - 1) / ps;
        const int64_t num_pages = fresh + (int64_t)(prng_next(&r) % 3) + (fresh == 0);
        if (!(fl->bt = alloc_elems((size_t)(B * bt_stride), sizeof *fl->bt)))
            return -1;
        static const int32_t wild[] = {-1, INT32_MAX, INT32_MIN, 1 << 30};
        for (int64_t k = 0; k < B * bt_stride; k++)
            fl->bt[k] = wild[prng_next(&r) % 4];
        int32_t *perm = alloc_elems((size_t)num_pages, sizeof *perm);
        if (!perm)
            return -1;
        for (int64_t k = 0; k < num_pages; k++)
            perm[k] = (int32_t)k;
        for (int64_t k = num_pages - 1; k > 0; k--) {
            int64_t j = (int64_t)(prng_next(&r) % (uint64_t)(k + 1));
            int32_t x = perm[k];
            perm[k] = perm[j], perm[j] = x;
        }
        for (int64_t b = 0, next = 0; b < B; b++)
            for (int64_t k = 0; k < (Tb[b] + ps - 1) / ps; k++)
                fl->bt[b * bt_stride + k] = perm[next++];
        free(perm);
        int64_t ks[4], vs[4]; /* [num_pages, page_size, Hkv, D]; HND: [.., Hkv, page_size, D] */
        ks[0] = ps * Hkv * D, ks[3] = 1, ks[1] = fl->hnd ? D : Hkv * D, ks[2] = fl->hnd ? ps * D : D;
        vs[0] = ps * Hkv * Dv, vs[3] = 1, vs[1] = fl->hnd ? Dv : Hkv * Dv, vs[2] = fl->hnd ? ps * Dv : Dv;
        if (!(fl->k = garbage_elems(fp->in.k.dtype, num_pages * ks[0])) ||
            !(fl->v = garbage_elems(fp->in.v.dtype, num_pages * vs[0])))
            return -1;
        for (int64_t b = 0; b < B; b++)
            for (int64_t t = 0; t < Tb[b]; t++) {
                const int64_t pg = fl->bt[b * bt_stride + t / ps], slot = t % ps;
                for (int64_t g = 0; g < Hkv; g++) {
                    for (int64_t d = 0; d < D; d++)
                        copy_elem(fl->k, ks, &fp->in.k, (const int64_t[4]){b, t, g, d},
                                  (const int64_t[4]){pg, slot, g, d});
                    for (int64_t d = 0; d < Dv; d++)
                        copy_elem(fl->v, vs, &fp->in.v, (const int64_t[4]){b, t, g, d},
                                  (const int64_t[4]){pg, slot, g, d});
                }
            }
        for (int64_t b = 0; b < B; b++)
            fl->kv_lens[b] = Tb[b];
        fl->L.block_table = fl->bt;
        fl->L.bt_stride = bt_stride, fl->L.max_pages = max_pages;
        fl->L.num_pages = num_pages, fl->L.page_size = ps;
        fl->p.kv_lens = fl->kv_lens;
        fl->in.k.data = fl->k, fl->in.v.data = fl->v;
        memcpy(fl->in.k.stride, ks, sizeof ks);
        memcpy(fl->in.v.stride, vs, sizeof vs);
    }
    return 1;
}

void fuzz_layout_free(fuzz_layout *fl)
{
    free(fl->q), free(fl->k), free(fl->v), free(fl->bt);
    memset(fl, 0, sizeof *fl);
}

void fuzz_layout_print(FILE *f, const fuzz_layout *fl)
{
    const smattn_layout *L = &fl->L;
    const int64_t B = fl->p.B;
    fprintf(f, "layout:");
    if (L->cu_seqlens_q) {
        fprintf(f, " cu_seqlens_q");
        for (int64_t b = 0; b <= B; b++)
            fprintf(f, " %" PRId64, L->cu_seqlens_q[b]);
    }
    if (L->cu_seqlens_k) {
        fprintf(f, " cu_seqlens_k");
        for (int64_t b = 0; b <= B; b++)
            fprintf(f, " %" PRId64, L->cu_seqlens_k[b]);
        if (L->seqused_k)
            for (int64_t b = 0; b < B; b++)
                fprintf(f, "%s%" PRId64, b ? " " : " seqused_k ", L->seqused_k[b]);
    }
    if (L->block_table) {
        fprintf(f, " pages of %" PRId64 " (%s), %" PRId64 " of them, kv_lens", L->page_size,
                fl->hnd ? "HND" : "NHD", L->num_pages);
        for (int64_t b = 0; b < B; b++)
            fprintf(f, " %" PRId64, fl->kv_lens[b]);
        fprintf(f, ", block_table [%" PRId64 "][%" PRId64 "]:", B, L->bt_stride);
        for (int64_t k = 0; k < B * L->bt_stride; k++)
            fprintf(f, " %" PRId32, L->block_table[k]);
    }
    fprintf(f, "\n");
}

void fuzz_problem_free(fuzz_problem *fp)
{
    free(fp->q), free(fp->x), free(fp->k), free(fp->v), free(fp->bias), free(fp->mask),
        free(fp->sinks), free(fp->alibi_slopes), free(fp->descale);
    memset(fp, 0, sizeof *fp);
}

static void print_tensor(FILE *f, const char *name, const void *buf, smattn_dtype t, size_t n)
{
    if (!buf)
        return;
    fprintf(f, "%s (%s, %zu):", name, smattn_dtype_name(t), n);
    for (size_t i = 0; i < n; i++) {
        if (i % 8 == 0)
            fprintf(f, "\n  [%zu]", i);
        if (t == SMATTN_BOOL)
            fprintf(f, " %d", ((const unsigned char *)buf)[i] != 0);
        else
            fprintf(f, " %a", smattn_load(buf, t, (int64_t)i));
    }
    fprintf(f, "\n");
}

void fuzz_problem_print(FILE *f, const fuzz_problem *fp)
{
    const smattn_problem *p = &fp->p;
    static const char *const causal[] = {"none", "lower_right", "upper_left"};
    static const char *const empty[] = {"zero", "nan", "mean"};
    static const char *const else_[] = {"-inf", "+inf", "0"};
    fprintf(f,
            "problem: op %s class %s B=%" PRId64 " S=%" PRId64 " T=%" PRId64 " Hq=%" PRId64
            " Hkv=%" PRId64 " D=%" PRId64 " Dv=%" PRId64 " scale=%a softcap=%a causal=%s"
            " window=[%" PRId64 ",%" PRId64 "] empty_rows=%s empty_lse=%s kv_dtype=%s\n",
            p->op == SMATTN_OP_ATTENTION ? "attention" : "softmax",
            fuzz_shape_class_name(fp->shape_class), p->B, p->S, p->T, p->Hq, p->Hkv, p->D, p->Dv,
            p->scale, p->softcap, causal[p->causal], p->window_left, p->window_right,
            empty[p->empty_rows], else_[p->empty_lse], smattn_dtype_name(fp->in.k.dtype));
    fprintf(f, "  kv_lens:");
    for (int64_t b = 0; p->kv_lens && b < p->B; b++)
        fprintf(f, " %" PRId64, p->kv_lens[b]);
    fprintf(f, "%s  q_lens:", p->kv_lens ? "" : " -");
    for (int64_t b = 0; p->q_lens && b < p->B; b++)
        fprintf(f, " %" PRId64, p->q_lens[b]);
    fprintf(f,
            "%s  bias %s  mask %s  sinks %s  threads %d  values %d seed %" PRIu32
            " patches %d raw bytes %zu",
            p->q_lens ? "" : " -",
            fp->bias_kind == 0 ? "-" : fp->bias_kind == 1 ? "[B,1,S,T]" : "[B,Hq,S,T]",
            fp->mask_kind == 0 ? "-" : fp->mask_kind == 1 ? "[B,Hq,1,T]" : "[B,Hq,S,T]",
            fp->sinks ? "yes" : "-", fp->threads, fp->value_mode, fp->seed, fp->npatches,
            fp->raw_bytes);
    if (fp->full_p)
        fprintf(f, "  (shrunk from %" PRId64 " elements of P)", fp->full_p);
    if (p->op == SMATTN_OP_ATTENTION && (is_fp8(fp->in.q.dtype) || fp->p.descale)) {
        fprintf(f, "  q_dtype=%s", smattn_dtype_name(fp->in.q.dtype));
        const char names[3] = {'q', 'k', 'v'};
        for (int t = 0; fp->p.descale && t < 3; t++) {
            fprintf(f, " %c_descale:", names[t]);
            for (int64_t b = 0; b < p->B; b++)
                for (int64_t g = 0; g < p->Hkv; g++)
                    fprintf(f, " %a", fuzz_descale(fp, names[t], b, g));
        }
    }
    if (p->alibi_mode != SMATTN_ALIBI_NONE) {
        static const char *const modes[4] = {"none", "symmetric", "one_sided", "mask"};
        int64_t n = (p->alibi_slopes_per_batch ? p->B : 1) * p->Hq;
        fprintf(f, "  alibi %s slopes%s:", modes[p->alibi_mode],
                p->alibi_slopes_per_batch ? " [B][Hq]" : "");
        for (int64_t k = 0; k < n; k++)
            fprintf(f, " %a", (double)p->alibi_slopes[k]);
    }
    fprintf(f, "\n");
    print_tensor(f, "q", fp->q, fp->in.q.dtype, fp->nq);
    print_tensor(f, "k", fp->k, fp->in.k.dtype, fp->nk);
    print_tensor(f, "v", fp->v, fp->in.v.dtype, fp->nv);
    print_tensor(f, "x", fp->x, fp->in.x.dtype, fp->nx);
    print_tensor(f, "bias", fp->bias, fp->in.bias.dtype, fp->nbias);
    print_tensor(f, "mask", fp->mask, SMATTN_BOOL, fp->nmask);
    print_tensor(f, "sinks", fp->sinks, SMATTN_F32, fp->sinks ? (size_t)fp->p.Hq : 0);
}

/* ---- outputs --------------------------------------------------------------------------- */

int fuzz_outputs_alloc(fuzz_outputs *o, const smattn_problem *p, smattn_dtype t)
{
    memset(o, 0, sizeof *o);
    o->dtype = t;
    o->n[0] = p->op == SMATTN_OP_ATTENTION ? (size_t)(p->B * p->S * p->Hq * p->Dv) : 0;
    o->n[1] = (size_t)(p->B * p->Hq * p->S);
    o->n[2] = o->n[1] * (size_t)p->T;
    size_t es = smattn_dtype_size(t);
    for (int k = 0; k < 3; k++)
        if ((k > 0 || o->n[0]) && !(o->buf[k] = calloc(o->n[k] ? o->n[k] : 1, es)))
            return 1;
    o->out.o = (smattn_out_tensor){o->buf[0], t, {0}};
    o->out.lse = (smattn_out_tensor){o->buf[1], t, {0}};
    o->out.p = (smattn_out_tensor){o->buf[2], t, {0}};
    smattn_contiguous_strides(p, 'o', o->out.o.stride);
    smattn_contiguous_strides(p, 'l', o->out.lse.stride);
    smattn_contiguous_strides(p, 'p', o->out.p.stride);
    return 0;
}

void fuzz_outputs_free(fuzz_outputs *o)
{
    for (int k = 0; k < 3; k++)
        free(o->buf[k]);
    memset(o, 0, sizeof *o);
}
