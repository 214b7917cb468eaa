/* SPDX-License-Identifier: MIT */
/* problem.c: the problem descriptor: defaults, strides, validation and visibility (SPEC 2-3). */
#include <math.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
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

/* S_b and T_b (SPEC 3.2, 2.7): a layout's slices and seqused_k stand for q_lens and
 * kv_lens (which are then NULL); a block table reads kv_lens. */
int64_t smattn__q_len(const smattn_problem *p, int64_t b)
{
    const smattn_layout *L = p->layout;
    if (L && L->cu_seqlens_q)
        return L->cu_seqlens_q[b + 1] - L->cu_seqlens_q[b];
    return p->q_lens ? p->q_lens[b] : p->S;
}

int64_t smattn__kv_len(const smattn_problem *p, int64_t b)
{
    const smattn_layout *L = p->layout;
    if (L && L->cu_seqlens_k)
        return L->seqused_k ? L->seqused_k[b] : L->cu_seqlens_k[b + 1] - L->cu_seqlens_k[b];
    return p->kv_lens ? p->kv_lens[b] : p->T;
}

void smattn__storage_rows(const smattn_problem *p, int64_t qn[2], int64_t kn[2])
{
    const smattn_layout *L = p->layout;
    qn[0] = p->B, qn[1] = p->S, kn[0] = p->B, kn[1] = p->T;
    if (L && L->cu_seqlens_q)
        qn[0] = 1, qn[1] = L->cu_seqlens_q[p->B] > 0 ? L->cu_seqlens_q[p->B] : 1;
    if (L && L->cu_seqlens_k)
        kn[0] = 1, kn[1] = L->cu_seqlens_k[p->B] > 0 ? L->cu_seqlens_k[p->B] : 1;
    else if (L && L->block_table)
        kn[0] = L->num_pages, kn[1] = L->page_size;
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
    /* A layout's Q/O/LSE and K/V (SPEC 2.7): packed rows [1, total, H, D] (LSE [1, Hq,
     * total_q]) or pages [num_pages, page_size, Hkv, D] (NHD), so that stride[0] spans the
     * whole packed tensor (one page). Its arrays are read: total = cu[B], when B >= 1; a
     * total of 0 is one row, as validation checks it (else LSE [1, Hq, 0] had stride 0
     * between heads and overlapped itself: SMATTN_ERR_ALIAS on a valid problem). */
    const smattn_layout *L = p->layout;
    int64_t rows_q = p->S, rows_k = p->T;
    if (L && L->cu_seqlens_q && p->B >= 1)
        rows_q = L->cu_seqlens_q[p->B] == 0 ? 1 : L->cu_seqlens_q[p->B];
    if (L && L->cu_seqlens_k && p->B >= 1)
        rows_k = L->cu_seqlens_k[p->B] == 0 ? 1 : L->cu_seqlens_k[p->B];
    else if (L && L->block_table)
        rows_k = L->page_size;
    switch (role) {
    case 'q': n1 = rows_q, n2 = p->Hq, n3 = p->D; break;
    case 'k': n1 = rows_k, n2 = p->Hkv, n3 = p->D; break;
    case 'v': n1 = rows_k, n2 = p->Hkv, n3 = p->Dv; break;
    case 'o': n1 = rows_q, n2 = p->Hq, n3 = p->Dv; break;
    case 'l': n1 = p->Hq, n2 = rows_q, n3 = 1; break;
    case 'x': case 'p': case 'b': n1 = p->Hq, n2 = p->S, n3 = p->T; break;
    case 's': s[0] = 1; return SMATTN_OK;
    default: return SMATTN_ERR_OPTION;
    }
    if (n1 < 0 || n2 < 0 || n3 < 0)
        return SMATTN_ERR_SHAPE;
    /* computed with overflow checks (T = 2^63 - 1 once overflowed here) */
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
    const char *name;             /* for smattn_validate_explain */
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
    const int64_t blk = smattn_dtype_block(t); /* a block format: whole blocks */
    sp->lo = data;
    sp->hi = (const unsigned char *)data + (size_t)((m + blk) / blk) * es;
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

static int is_fp8(smattn_dtype t)
{
    return t == SMATTN_F8E4M3 || t == SMATTN_F8E5M2;
}

static int is_block(smattn_dtype t)
{
    return t == SMATTN_Q8_0 || t == SMATTN_Q4_0;
}

/* The validation's verdict: the status, and for smattn_validate_explain one line naming
 * the field (cut to cap - 1 bytes). */
typedef struct verdict {
    char *msg;
    size_t cap;
} verdict;

#if defined(__GNUC__)
__attribute__((format(printf, 3, 4)))
#endif
static smattn_status fail(const verdict *v, smattn_status st, const char *fmt, ...)
{
    if (v->msg && v->cap) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(v->msg, v->cap, fmt, ap);
        va_end(ap);
    }
    return st;
}

/* The lengths of a cu_seqlens array [B+1] (SPEC 2.7): starts at 0, never decreases, each
 * slice at most `most` long (when most >= 0); *total = cu[B]. */
static smattn_status check_cu(const verdict *v, const char *name, const int64_t *cu, int64_t B,
                              int64_t most, const char *bound_name, int64_t *total)
{
    if (cu[0] != 0)
        return fail(v, SMATTN_ERR_LAYOUT, "%s[0] = %lld is not 0", name, (long long)cu[0]);
    for (int64_t b = 0; b < B; b++) {
        if (cu[b + 1] < cu[b])
            return fail(v, SMATTN_ERR_LAYOUT, "%s[%lld] = %lld is below %s[%lld] = %lld", name,
                        (long long)(b + 1), (long long)cu[b + 1], name, (long long)b,
                        (long long)cu[b]);
        /* cu[b + 1] - cu[b] >= 0 cannot overflow: cu[b] >= 0 */
        if (most >= 0 && cu[b + 1] - cu[b] > most)
            return fail(v, SMATTN_ERR_LAYOUT,
                        "sequence %lld: %s[%lld] - %s[%lld] = %lld is more than %s = %lld",
                        (long long)b, name, (long long)(b + 1), name, (long long)b,
                        (long long)(cu[b + 1] - cu[b]), bound_name, (long long)most);
    }
    *total = cu[B];
    if (*total > SMATTN_MAX_DIM)
        return fail(v, SMATTN_ERR_OVERFLOW, "%s[%lld] = %lld: more rows than 2^32", name,
                    (long long)B, (long long)*total);
    return SMATTN_OK;
}

/* The layout's own consistency (SPEC 2.7). Sets the extents of dims 0-1 of Q/O/LSE
 * (qrows) and of K/V (krows) as the tensors are checked. */
static smattn_status check_layout(const verdict *v, const smattn_problem *p, int64_t qn[2],
                                  int64_t kn[2])
{
    const smattn_layout *L = p->layout;
    qn[0] = p->B, qn[1] = p->S, kn[0] = p->B, kn[1] = p->T;
    if (!L)
        return SMATTN_OK;
    if (p->op != SMATTN_OP_ATTENTION)
        return fail(v, SMATTN_ERR_UNSUPPORTED, "layout: only attention reads a layout "
                                               "(the softmax input X is dense)");
    if (L->cu_seqlens_k && L->block_table)
        return fail(v, SMATTN_ERR_LAYOUT, "layout: cu_seqlens_k and block_table are exclusive");
    if (L->seqused_k && !L->cu_seqlens_k)
        return fail(v, SMATTN_ERR_LAYOUT, "layout: seqused_k without cu_seqlens_k");
    smattn_status st;
    int64_t total;
    if (L->cu_seqlens_q) {
        if (p->q_lens)
            return fail(v, SMATTN_ERR_LAYOUT, "layout: q_lens must be NULL with cu_seqlens_q "
                                              "(S_b is the slice length)");
        if ((st = check_cu(v, "cu_seqlens_q", L->cu_seqlens_q, p->B, p->S, "S", &total)))
            return st;
        qn[0] = 1, qn[1] = total > 0 ? total : 1;
    }
    if (L->cu_seqlens_k) {
        if (p->kv_lens)
            return fail(v, SMATTN_ERR_LAYOUT, "layout: kv_lens must be NULL with cu_seqlens_k "
                                              "(T_b is seqused_k or the slice length)");
        if ((st = check_cu(v, "cu_seqlens_k", L->cu_seqlens_k, p->B, L->seqused_k ? -1 : p->T,
                           "T", &total)))
            return st;
        for (int64_t b = 0; L->seqused_k && b < p->B; b++) {
            int64_t u = L->seqused_k[b], n = L->cu_seqlens_k[b + 1] - L->cu_seqlens_k[b];
            if (u < 0 || u > n || u > p->T)
                return fail(v, SMATTN_ERR_LAYOUT,
                            "seqused_k[%lld] = %lld is outside [0, %lld] (its slice holds %lld "
                            "keys, T = %lld)",
                            (long long)b, (long long)u, (long long)(n < p->T ? n : p->T),
                            (long long)n, (long long)p->T);
        }
        kn[0] = 1, kn[1] = total > 0 ? total : 1;
    }
    if (L->block_table) {
        if (L->page_size < 1 || L->page_size > SMATTN_MAX_DIM)
            return fail(v, SMATTN_ERR_LAYOUT, "page_size = %lld is outside [1, 2^32]",
                        (long long)L->page_size);
        if (L->num_pages < 1 || L->num_pages > SMATTN_MAX_DIM)
            return fail(v, SMATTN_ERR_LAYOUT, "num_pages = %lld is outside [1, 2^32]",
                        (long long)L->num_pages);
        if (L->max_pages < 1 || L->max_pages > SMATTN_MAX_DIM)
            return fail(v, SMATTN_ERR_LAYOUT, "max_pages = %lld is outside [1, 2^32]",
                        (long long)L->max_pages);
        if (L->bt_stride < L->max_pages)
            return fail(v, SMATTN_ERR_LAYOUT, "bt_stride = %lld is below max_pages = %lld",
                        (long long)L->bt_stride, (long long)L->max_pages);
        /* the table's last entry, (B - 1) bt_stride + max_pages - 1: its index, and the
         * table's size in bytes, fit in int64 */
        int64_t last;
        if (__builtin_mul_overflow(p->B - 1, L->bt_stride, &last) ||
            __builtin_add_overflow(last, L->max_pages - 1, &last) || last >= INT64_MAX / 16)
            return fail(v, SMATTN_ERR_OVERFLOW, "block_table: B x bt_stride = %lld x %lld "
                        "entries do not fit in int64", (long long)p->B, (long long)L->bt_stride);
        /* max_pages, page_size <= 2^32: the product fits */
        if (p->T > L->max_pages * L->page_size)
            return fail(v, SMATTN_ERR_LAYOUT,
                        "T = %lld is more than max_pages x page_size = %lld x %lld",
                        (long long)p->T, (long long)L->max_pages, (long long)L->page_size);
        if (!p->kv_lens)
            return fail(v, SMATTN_ERR_LAYOUT, "layout: a block_table needs kv_lens (T_b)");
        for (int64_t b = 0; b < p->B; b++) {
            int64_t Tb = p->kv_lens[b];
            if (Tb < 0 || Tb > p->T)
                return fail(v, SMATTN_ERR_LENGTHS, "kv_lens[%lld] = %lld is outside [0, %lld]",
                            (long long)b, (long long)Tb, (long long)p->T);
            int64_t used = (Tb + L->page_size - 1) / L->page_size; /* <= max_pages */
            for (int64_t k = 0; k < used; k++) {
                int32_t e = L->block_table[b * L->bt_stride + k];
                if (e < 0 || e >= L->num_pages)
                    return fail(v, SMATTN_ERR_LAYOUT, "block_table[%lld][%lld] = %ld is outside "
                                "[0, %lld)", (long long)b, (long long)k, (long)e,
                                (long long)L->num_pages);
            }
        }
        kn[0] = L->num_pages, kn[1] = L->page_size;
    }
    return SMATTN_OK;
}

/* ALiBi (SPEC 2.8): the mode, the slopes (finite binary32), the mask mode's bias, and the
 * extents that keep every slope x distance exact in binary64 (24 + 29 bits). */
static smattn_status check_alibi(const verdict *v, const smattn_problem *p,
                                 const smattn_inputs *in)
{
    if ((unsigned)p->alibi_mode > SMATTN_ALIBI_MASK)
        return fail(v, SMATTN_ERR_OPTION, "alibi_mode = %d is unknown", (int)p->alibi_mode);
    if (p->alibi_mode == SMATTN_ALIBI_NONE)
        return SMATTN_OK;
    if (p->op != SMATTN_OP_ATTENTION)
        return fail(v, SMATTN_ERR_OPTION, "alibi_mode: ALiBi applies to the attention op only");
    if (!p->alibi_slopes)
        return fail(v, SMATTN_ERR_NULL, "alibi_slopes is NULL with alibi_mode = %d",
                    (int)p->alibi_mode);
    if (p->S > SMATTN_ALIBI_MAX_LEN || p->T > SMATTN_ALIBI_MAX_LEN)
        return fail(v, SMATTN_ERR_ALIBI, "alibi: %s = %lld is above 2^29",
                    p->S > SMATTN_ALIBI_MAX_LEN ? "S" : "T",
                    (long long)(p->S > SMATTN_ALIBI_MAX_LEN ? p->S : p->T));
    int64_t n = (p->alibi_slopes_per_batch ? p->B : 1) * p->Hq; /* <= 2^64: B, Hq <= 2^32 */
    for (int64_t k = 0; k < n; k++)
        if (!isfinite(p->alibi_slopes[k]))
            return fail(v, SMATTN_ERR_ALIBI, "alibi_slopes[%lld] = %g is not finite",
                        (long long)k, (double)p->alibi_slopes[k]);
    if (p->alibi_mode == SMATTN_ALIBI_MASK) {
        if (!in->bias.data)
            return fail(v, SMATTN_ERR_ALIBI, "alibi_mode mask needs the bias input (the "
                        "distances the slope multiplies)");
        if (in->bias.dtype == SMATTN_F64)
            return fail(v, SMATTN_ERR_DTYPE, "bias: f64 with alibi_mode mask (slope x bias "
                        "must be exact in binary64: f32, f16 or bf16)");
    }
    return SMATTN_OK;
}

/* A block-format tensor (SPEC 2.9): blocks of SMATTN_QBLOCK along its last dimension, which
 * must be contiguous, so that every row starts a block. */
static smattn_status check_blocks(const verdict *v, const char *name, int64_t d,
                                  const smattn_tensor *t)
{
    if (d % SMATTN_QBLOCK != 0)
        return fail(v, SMATTN_ERR_SHAPE, "%s: %s needs %s = %lld to be a multiple of %d", name,
                    smattn_dtype_name(t->dtype), name[0] == 'V' ? "Dv" : "D", (long long)d,
                    SMATTN_QBLOCK);
    if (t->stride[3] != 1)
        return fail(v, SMATTN_ERR_STRIDE, "%s: %s needs stride[3] = 1 (got %lld)", name,
                    smattn_dtype_name(t->dtype), (long long)t->stride[3]);
    for (int r = 0; r < 3; r++)
        if (t->stride[r] % SMATTN_QBLOCK != 0)
            return fail(v, SMATTN_ERR_STRIDE, "%s: %s needs stride[%d] = %lld to be a multiple "
                        "of %d", name, smattn_dtype_name(t->dtype), r, (long long)t->stride[r],
                        SMATTN_QBLOCK);
    return SMATTN_OK;
}

smattn_descale smattn_descale_default(void)
{
    smattn_descale d;
    memset(&d, 0, sizeof d);
    d.q = d.k = d.v = 1.0;
    return d;
}

/* One descale factor (SPEC 2.9): a binary32 value, finite and > 0; 1 on a binary64 tensor. */
static smattn_status check_factor(const verdict *v, const char *name, int64_t b, int64_t g,
                                  double f, smattn_dtype t)
{
    char where[48] = "";
    if (b >= 0)
        snprintf(where, sizeof where, "[%lld][%lld]", (long long)b, (long long)g);
    if (!(f > 0) || !isfinite(f) || (double)(float)f != f)
        return fail(v, SMATTN_ERR_SCALE, "%s%s = %g is not a positive finite binary32 value",
                    name, where, f);
    if (t == SMATTN_F64 && f != 1.0)
        return fail(v, SMATTN_ERR_DTYPE, "%s%s = %g: a binary64 tensor takes no descale", name,
                    where, f);
    return SMATTN_OK;
}

static smattn_status check_descale(const verdict *v, const smattn_problem *p,
                                   const smattn_inputs *in, span *sp, int *nspp)
{
    const smattn_descale *ds = p->descale;
    if (p->op != SMATTN_OP_ATTENTION)
        return fail(v, SMATTN_ERR_UNSUPPORTED, "descale: the softmax op takes none");
    static const char *const names[3] = {"q_descale", "k_descale", "v_descale"};
    const double num[3] = {ds->q, ds->k, ds->v};
    const double *arr[3] = {ds->q_head, ds->k_head, ds->v_head};
    const smattn_dtype dt[3] = {in->q.dtype, in->k.dtype, in->v.dtype};
    smattn_status st;
    for (int k = 0; k < 3; k++) {
        if (!arr[k]) {
            if ((st = check_factor(v, names[k], -1, 0, num[k], dt[k])))
                return st;
            continue;
        }
        for (int64_t b = 0; b < p->B; b++)
            for (int64_t g = 0; g < p->Hkv; g++)
                if ((st = check_factor(v, names[k], b, g, arr[k][b * p->Hkv + g], dt[k])))
                    return st;
        /* B, Hkv <= 2^32 and B Hkv elements were just read: the byte count fits */
        sp[*nspp].lo = (const unsigned char *)arr[k];
        sp[*nspp].hi = (const unsigned char *)arr[k] + (size_t)(p->B * p->Hkv) * 8;
        sp[(*nspp)++].name = names[k];
    }
    return SMATTN_OK;
}

static const char *const input_names[] = {"Q", "K", "V"};
static const char *const output_names[] = {"O", "LSE", "P"};

/* The problem and its inputs (SPEC 2, 3): the spans read go to sp[*nspp...], the extents
 * of Q/O/LSE's first two dimensions to qn, of K/V's to kn. */
static smattn_status validate_inputs(const smattn_problem *p, const smattn_inputs *in,
                                     const verdict *v, span *sp, int *nspp, int64_t qn[2],
                                     int64_t kn[2])
{
    if ((unsigned)p->op > SMATTN_OP_SOFTMAX)
        return fail(v, SMATTN_ERR_OPTION, "op = %d is unknown", (int)p->op);
    if ((unsigned)p->causal > SMATTN_CAUSAL_UPPER_LEFT)
        return fail(v, SMATTN_ERR_OPTION, "causal = %d is unknown", (int)p->causal);
    if ((unsigned)p->empty_rows > SMATTN_EMPTY_MEAN)
        return fail(v, SMATTN_ERR_OPTION, "empty_rows = %d is unknown", (int)p->empty_rows);
    if ((unsigned)p->empty_lse > SMATTN_LSE_ZERO)
        return fail(v, SMATTN_ERR_OPTION, "empty_lse = %d is unknown", (int)p->empty_lse);
    const int att = p->op == SMATTN_OP_ATTENTION;
    int64_t dims[7] = {p->B, p->S, p->T, p->Hq, att ? p->Hkv : 1, att ? p->D : 1,
                       att ? p->Dv : 1};
    static const char *const dim_names[7] = {"B", "S", "T", "Hq", "Hkv", "D", "Dv"};
    for (int k = 0; k < 7; k++)
        if (dims[k] < 1 || dims[k] > SMATTN_MAX_DIM)
            return fail(v, SMATTN_ERR_SHAPE, "%s = %lld is outside [1, 2^32]", dim_names[k],
                        (long long)dims[k]);
    if (att && p->Hq % p->Hkv != 0)
        return fail(v, SMATTN_ERR_HEADS, "Hq = %lld is not a multiple of Hkv = %lld",
                    (long long)p->Hq, (long long)p->Hkv);
    if (!isfinite(p->scale))
        return fail(v, SMATTN_ERR_SCALE, "scale = %g is not finite", p->scale);
    if (!(p->softcap >= 0) || !isfinite(p->softcap))
        return fail(v, SMATTN_ERR_SOFTCAP, "softcap = %g is negative, NaN or infinite",
                    p->softcap);
    if (p->window_left < -1 || p->window_right < -1)
        return fail(v, SMATTN_ERR_WINDOW, "window_%s = %lld is below -1",
                    p->window_left < -1 ? "left" : "right",
                    (long long)(p->window_left < -1 ? p->window_left : p->window_right));
    smattn_status st;
    if ((st = check_alibi(v, p, in)))
        return st;
    if ((st = check_layout(v, p, qn, kn)))
        return st;
    for (int64_t b = 0; (p->kv_lens || p->q_lens) && b < p->B; b++) {
        if (p->kv_lens && (p->kv_lens[b] < 0 || p->kv_lens[b] > p->T))
            return fail(v, SMATTN_ERR_LENGTHS, "kv_lens[%lld] = %lld is outside [0, %lld]",
                        (long long)b, (long long)p->kv_lens[b], (long long)p->T);
        if (p->q_lens && (p->q_lens[b] < 0 || p->q_lens[b] > p->S))
            return fail(v, SMATTN_ERR_LENGTHS, "q_lens[%lld] = %lld is outside [0, %lld]",
                        (long long)b, (long long)p->q_lens[b], (long long)p->S);
    }

    /* Inputs. Q/O/LSE and K/V take their extents from the layout (SPEC 2.7): the whole
     * packed or paged tensor is checked, so every offset the locator forms fits int64. */
    int nsp = *nspp;
    if (att) {
        int64_t nq[4] = {qn[0], qn[1], p->Hq, p->D};
        int64_t nk[4] = {kn[0], kn[1], p->Hkv, p->D};
        int64_t nv[4] = {kn[0], kn[1], p->Hkv, p->Dv};
        const smattn_tensor *t3[3] = {&in->q, &in->k, &in->v};
        const int64_t *n3[3] = {nq, nk, nv};
        for (int k = 0; k < 3; k++) {
            if (!t3[k]->data)
                return fail(v, SMATTN_ERR_NULL, "%s.data is NULL", input_names[k]);
            if (!is_float(t3[k]->dtype) && !is_fp8(t3[k]->dtype) &&
                !(k > 0 && is_block(t3[k]->dtype)))
                return fail(v, SMATTN_ERR_DTYPE, "%s: dtype %d is not a float type%s",
                            input_names[k], (int)t3[k]->dtype,
                            is_block(t3[k]->dtype) ? " (block formats are for K and V only)"
                                                   : "");
            if (is_block(t3[k]->dtype) && (st = check_blocks(v, input_names[k], n3[k][3],
                                                             t3[k])))
                return st;
            if ((st = check_tensor(4, n3[k], t3[k]->stride, t3[k]->dtype, t3[k]->data,
                                   &sp[nsp])))
                return fail(v, st, "%s: %s", input_names[k], smattn_status_str(st));
            sp[nsp++].name = input_names[k];
        }
    } else {
        int64_t nx[4] = {p->B, p->Hq, p->S, p->T};
        if (!in->x.data)
            return fail(v, SMATTN_ERR_NULL, "X.data is NULL");
        if (!is_float(in->x.dtype))
            return fail(v, SMATTN_ERR_DTYPE, "X: dtype %d is not a float type", (int)in->x.dtype);
        if ((st = check_tensor(4, nx, in->x.stride, in->x.dtype, in->x.data, &sp[nsp])))
            return fail(v, st, "X: %s", smattn_status_str(st));
        sp[nsp++].name = "X";
    }
    int64_t nfull[4] = {p->B, p->Hq, p->S, p->T};
    if (in->bias.data) {
        if (!is_float(in->bias.dtype))
            return fail(v, SMATTN_ERR_DTYPE, "bias: dtype %d is not a float type",
                        (int)in->bias.dtype);
        if ((st = check_tensor(4, nfull, in->bias.stride, in->bias.dtype, in->bias.data,
                               &sp[nsp])))
            return fail(v, st, "bias: %s", smattn_status_str(st));
        sp[nsp++].name = "bias";
    }
    if (in->mask.data) {
        if (in->mask.dtype != SMATTN_BOOL)
            return fail(v, SMATTN_ERR_DTYPE, "mask: dtype %d is not bool", (int)in->mask.dtype);
        if ((st = check_tensor(4, nfull, in->mask.stride, in->mask.dtype, in->mask.data,
                               &sp[nsp])))
            return fail(v, st, "mask: %s", smattn_status_str(st));
        sp[nsp++].name = "mask";
    }
    if (in->sinks.data) {
        int64_t ns[1] = {p->Hq};
        if (!is_float(in->sinks.dtype))
            return fail(v, SMATTN_ERR_DTYPE, "sinks: dtype %d is not a float type",
                        (int)in->sinks.dtype);
        if ((st = check_tensor(1, ns, in->sinks.stride, in->sinks.dtype, in->sinks.data,
                               &sp[nsp])))
            return fail(v, st, "sinks: %s", smattn_status_str(st));
        sp[nsp++].name = "sinks";
    }
    /* the lengths and the layout's arrays are inputs too: an output must not overwrite them */
    const smattn_layout *L = p->layout;
    const void *arr[7] = {p->kv_lens, p->q_lens, L ? L->cu_seqlens_q : NULL,
                          L ? L->cu_seqlens_k : NULL, L ? L->seqused_k : NULL,
                          L ? L->block_table : NULL,
                          p->alibi_mode != SMATTN_ALIBI_NONE ? p->alibi_slopes : NULL};
    size_t arr_bytes[7] = {(size_t)p->B * 8, (size_t)p->B * 8, ((size_t)p->B + 1) * 8,
                           ((size_t)p->B + 1) * 8, (size_t)p->B * 8, 0,
                           (size_t)(p->alibi_slopes_per_batch ? p->B : 1) * (size_t)p->Hq * 4};
    if (L && L->block_table) /* the entries up to the last row's max_pages (fits: checked) */
        arr_bytes[5] = ((size_t)(p->B - 1) * (size_t)L->bt_stride + (size_t)L->max_pages) * 4;
    static const char *const arr_names[7] = {"kv_lens", "q_lens", "cu_seqlens_q",
                                             "cu_seqlens_k", "seqused_k", "block_table",
                                             "alibi_slopes"};
    for (int k = 0; k < 7; k++)
        if (arr[k]) {
            sp[nsp].lo = arr[k];
            sp[nsp].hi = (const unsigned char *)arr[k] + arr_bytes[k];
            sp[nsp++].name = arr_names[k];
        }
    *nspp = nsp;
    if (p->descale && (st = check_descale(v, p, in, sp, nspp)))
        return st;
    return SMATTN_OK;
}

static smattn_status validate(const smattn_problem *p, const smattn_inputs *in,
                              const smattn_outputs *out, const verdict *v)
{
    if (!p || !in || !out)
        return fail(v, SMATTN_ERR_NULL, "%s is NULL", !p ? "prob" : !in ? "in" : "out");
    span sp[24];
    memset(sp, 0, sizeof sp);
    int nsp = 0;
    int64_t qn[2], kn[2];
    smattn_status st = validate_inputs(p, in, v, sp, &nsp, qn, kn);
    if (st)
        return st;
    const int att = p->op == SMATTN_OP_ATTENTION;
    int64_t nfull[4] = {p->B, p->Hq, p->S, p->T};

    /* Outputs. */
    if (att && !out->o.data)
        return fail(v, SMATTN_ERR_NULL, "O.data is NULL (attention needs O)");
    if (!att && !out->p.data && !out->lse.data)
        return fail(v, SMATTN_ERR_NULL, "P.data and LSE.data are NULL (softmax needs one)");
    int64_t no[4] = {qn[0], qn[1], p->Hq, p->Dv};
    int64_t nl[4] = {qn[0], p->Hq, qn[1], 1};
    const smattn_out_tensor *ot[3] = {&out->o, &out->lse, &out->p};
    const int64_t *on[3] = {no, nl, nfull};
    const int orank[3] = {4, 3, 4};
    for (int k = 0; k < 3; k++) {
        if (!ot[k]->data || (k == 0 && !att))
            continue;
        if (!is_float(ot[k]->dtype))
            return fail(v, SMATTN_ERR_DTYPE, "%s: dtype %d is not a float type", output_names[k],
                        (int)ot[k]->dtype);
        if ((st = check_tensor(orank[k], on[k], ot[k]->stride, ot[k]->dtype, ot[k]->data,
                               &sp[nsp])))
            return fail(v, st, "%s: %s", output_names[k], smattn_status_str(st));
        if (!self_disjoint(orank[k], on[k], ot[k]->stride))
            return fail(v, SMATTN_ERR_ALIAS, "%s overlaps itself (its strides)", output_names[k]);
        for (int j = 0; j < nsp; j++)
            if (spans_meet(sp[nsp], sp[j]))
                return fail(v, SMATTN_ERR_ALIAS, "%s overlaps %s", output_names[k], sp[j].name);
        sp[nsp++].name = output_names[k];
    }
    if (v->msg && v->cap)
        v->msg[0] = 0;
    return SMATTN_OK;
}

smattn_status smattn_validate(const smattn_problem *p, const smattn_inputs *in,
                              const smattn_outputs *out)
{
    verdict v = {NULL, 0};
    return validate(p, in, out, &v);
}

int smattn__input_spans(const smattn_problem *p, const smattn_inputs *in, const void **lo,
                        const void **hi, const char **names, int max)
{
    if (!p || !in)
        return -1;
    span sp[24];
    memset(sp, 0, sizeof sp);
    int nsp = 0;
    int64_t qn[2], kn[2];
    verdict v = {NULL, 0};
    if (validate_inputs(p, in, &v, sp, &nsp, qn, kn))
        return -1;
    int n = 0;
    for (int k = 0; k < nsp && n < max; k++)
        if (sp[k].lo && sp[k].hi > sp[k].lo)
            lo[n] = sp[k].lo, hi[n] = sp[k].hi, names[n++] = sp[k].name;
    return n;
}

/* Used block-table entries, sorted by page then by (b, column): two neighbours naming one
 * page are a shared page. */
typedef struct bt_use {
    int64_t page, b, col;
} bt_use;

static int bt_use_cmp(const void *x, const void *y)
{
    const bt_use *a = x, *c = y;
    if (a->page != c->page)
        return a->page < c->page ? -1 : 1;
    if (a->b != c->b)
        return a->b < c->b ? -1 : 1;
    return (a->col > c->col) - (a->col < c->col);
}

int smattn__shared_page(const smattn_layout *L, int64_t B, const int64_t *lens, int64_t at[5])
{
    if (!L || !L->block_table || !lens)
        return 0;
    size_t n = 0;
    for (int64_t b = 0; b < B; b++)
        n += (size_t)((lens[b] + L->page_size - 1) / L->page_size);
    if (n < 2)
        return 0;
    bt_use *u = malloc(n * sizeof *u);
    if (!u)
        return -1;
    size_t m = 0;
    for (int64_t b = 0; b < B; b++) {
        const int64_t used = (lens[b] + L->page_size - 1) / L->page_size;
        for (int64_t k = 0; k < used; k++)
            u[m++] = (bt_use){L->block_table[b * L->bt_stride + k], b, k};
    }
    qsort(u, n, sizeof *u, bt_use_cmp);
    int found = 0;
    for (size_t k = 1; k < n && !found; k++)
        if (u[k].page == u[k - 1].page) {
            at[0] = u[k - 1].b, at[1] = u[k - 1].col, at[2] = u[k].b, at[3] = u[k].col;
            at[4] = u[k].page;
            found = 1;
        }
    free(u);
    return found;
}

/* SPEC 10.4: a page that two used block-table entries name (prefix sharing) would need
 * the sum of its gradients over every (b, t) that reads it; the backward refuses it. */
static smattn_status check_pages_unshared(const verdict *v, const smattn_problem *p)
{
    int64_t at[5];
    const int r = p->layout ? smattn__shared_page(p->layout, p->B, p->kv_lens, at) : 0;
    if (r < 0)
        return fail(v, SMATTN_ERR_NOMEM, "block_table: no memory to check for shared pages");
    if (r > 0)
        return fail(v, SMATTN_ERR_LAYOUT,
                    "block_table[%lld][%lld] and block_table[%lld][%lld] both name page %lld: "
                    "the backward does not sum a shared page's gradients",
                    (long long)at[0], (long long)at[1], (long long)at[2], (long long)at[3],
                    (long long)at[4]);
    return SMATTN_OK;
}

/* The backward's descriptor (SPEC 10.4): the problem and inputs as smattn_validate checks
 * them, then dO, dLSE and the gradients, each output disjoint from itself and from every
 * input and output. With a layout (SPEC 2.7) dO, dLSE and dQ have Q's, O's and LSE's
 * storage, dK and dV K's and V's. */
static smattn_status validate_backward(const smattn_problem *p, const smattn_inputs *in,
                                       const smattn_grad_inputs *gin,
                                       const smattn_grad_outputs *gout, const verdict *v)
{
    if (!p || !in || !gin || !gout)
        return fail(v, SMATTN_ERR_NULL, "%s is NULL",
                    !p ? "prob" : !in ? "in" : !gin ? "gin" : "gout");

    span sp[28];
    memset(sp, 0, sizeof sp);
    int nsp = 0;
    int64_t qn[2], kn[2];
    smattn_status st = validate_inputs(p, in, v, sp, &nsp, qn, kn);
    if (st)
        return st;
    if (p->op != SMATTN_OP_ATTENTION)
        return fail(v, SMATTN_ERR_UNSUPPORTED, "backward: the softmax op's is not defined");
    if (p->descale || (unsigned)in->q.dtype > SMATTN_BF16 ||
        (unsigned)in->k.dtype > SMATTN_BF16 || (unsigned)in->v.dtype > SMATTN_BF16)
        return fail(v, SMATTN_ERR_UNSUPPORTED, "backward: quantised inputs and descales are "
                                               "not defined (SPEC 10.6)");
    if ((st = check_pages_unshared(v, p)))
        return st;
    /* dO [B,S,Hq,Dv] required, dLSE [B,Hq,S] optional (O's and LSE's storage) */
    int64_t no[4] = {qn[0], qn[1], p->Hq, p->Dv};
    int64_t nl[4] = {qn[0], p->Hq, qn[1], 1};
    if (!gin->dout.data)
        return fail(v, SMATTN_ERR_NULL, "dO.data is NULL");
    if (!is_float(gin->dout.dtype))
        return fail(v, SMATTN_ERR_DTYPE, "dO: dtype %d is not a float type",
                    (int)gin->dout.dtype);
    if ((st = check_tensor(4, no, gin->dout.stride, gin->dout.dtype, gin->dout.data, &sp[nsp])))
        return fail(v, st, "dO: %s", smattn_status_str(st));
    sp[nsp++].name = "dO";
    if (gin->dlse.data) {
        if (!is_float(gin->dlse.dtype))
            return fail(v, SMATTN_ERR_DTYPE, "dLSE: dtype %d is not a float type",
                        (int)gin->dlse.dtype);
        if ((st = check_tensor(3, nl, gin->dlse.stride, gin->dlse.dtype, gin->dlse.data,
                               &sp[nsp])))
            return fail(v, st, "dLSE: %s", smattn_status_str(st));
        sp[nsp++].name = "dLSE";
    }
    /* dQ [B,S,Hq,D], dK [B,T,Hkv,D], dV [B,T,Hkv,Dv] required (Q's and K/V's storage);
     * dBias [B,Hq,S,T] and dSinks [Hq] optional. A dBias stride 0 on a dimension asks for
     * the sum over it (a broadcast bias's own shape, SPEC 10.1): the tensor then has extent
     * 1 there. */
    if (gout->dbias.data && p->alibi_mode == SMATTN_ALIBI_MASK)
        return fail(v, SMATTN_ERR_UNSUPPORTED, "dBias: with alibi_mode mask the bias is a "
                                               "distance mask; its gradient is not defined");
    int64_t nq[4] = {qn[0], qn[1], p->Hq, p->D};
    int64_t nk[4] = {kn[0], kn[1], p->Hkv, p->D};
    int64_t nv[4] = {kn[0], kn[1], p->Hkv, p->Dv};
    int64_t nb[4] = {p->B, p->Hq, p->S, p->T};
    int64_t ns[4] = {p->Hq, 1, 1, 1};
    for (int k = 0; gout->dbias.data && k < 4; k++)
        if (gout->dbias.stride[k] == 0)
            nb[k] = 1;
    const smattn_out_tensor *ot[5] = {&gout->dq, &gout->dk, &gout->dv, &gout->dbias,
                                      &gout->dsinks};
    const int64_t *on[5] = {nq, nk, nv, nb, ns};
    static const char *const names[5] = {"dQ", "dK", "dV", "dBias", "dSinks"};
    for (int k = 0; k < 5; k++) {
        int rank = k == 4 ? 1 : 4;
        if (k >= 3 && !ot[k]->data)
            continue; /* dBias and dSinks are optional */
        if (!ot[k]->data)
            return fail(v, SMATTN_ERR_NULL, "%s.data is NULL", names[k]);
        if (!is_float(ot[k]->dtype))
            return fail(v, SMATTN_ERR_DTYPE, "%s: dtype %d is not a float type", names[k],
                        (int)ot[k]->dtype);
        if ((st = check_tensor(rank, on[k], ot[k]->stride, ot[k]->dtype, ot[k]->data, &sp[nsp])))
            return fail(v, st, "%s: %s", names[k], smattn_status_str(st));
        if (!self_disjoint(rank, on[k], ot[k]->stride))
            return fail(v, SMATTN_ERR_ALIAS, "%s overlaps itself (its strides)", names[k]);
        for (int j = 0; j < nsp; j++)
            if (spans_meet(sp[nsp], sp[j]))
                return fail(v, SMATTN_ERR_ALIAS, "%s overlaps %s", names[k], sp[j].name);
        sp[nsp++].name = names[k];
    }
    if (v->msg && v->cap)
        v->msg[0] = 0;
    return SMATTN_OK;
}

smattn_status smattn__validate_backward(const smattn_problem *p, const smattn_inputs *in,
                                        const smattn_grad_inputs *gin,
                                        const smattn_grad_outputs *gout)
{
    verdict v = {NULL, 0};
    return validate_backward(p, in, gin, gout, &v);
}

smattn_status smattn__validate_backward_explain(const smattn_problem *p,
                                                const smattn_inputs *in,
                                                const smattn_grad_inputs *gin,
                                                const smattn_grad_outputs *gout, char *msg,
                                                size_t cap)
{
    verdict v = {msg, msg ? cap : 0};
    return validate_backward(p, in, gin, gout, &v);
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

/* The processors online, read once per process: sysconf(_SC_NPROCESSORS_ONLN) reads
 * /sys/devices/system/cpu/online on every call, 6 us, and 50-60 us with the caches cold
 * (as after `make bench`'s flush), twice per call of the kernel: a tenth of a decode step
 * at T = 4096. A count that changes later (hotplug) is not followed; it only caps the
 * thread count, which changes no bit. Two threads that race here store the same value. */
int smattn__ncpu(void)
{
    static atomic_int known;
    int n = atomic_load_explicit(&known, memory_order_relaxed);
    if (n > 0)
        return n;
    long c = sysconf(_SC_NPROCESSORS_ONLN);
    n = c < 1 ? 1 : c > 256 ? 256 : (int)c;
    atomic_store_explicit(&known, n, memory_order_relaxed);
    return n;
}

smattn_status smattn_validate_explain(const smattn_problem *p, const smattn_inputs *in,
                                      const smattn_outputs *out, char *msg, size_t cap)
{
    verdict v = {msg, msg ? cap : 0};
    return validate(p, in, out, &v);
}
