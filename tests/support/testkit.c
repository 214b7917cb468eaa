/* SPDX-License-Identifier: MIT */
/* testkit.c: see testkit.h. */
#include "tests/support/testkit.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

double test_scale(void)
{
    const char *s = getenv("SMATTN_TEST_SCALE");
    double v = s ? atof(s) : 1.0;
    return v > 0 ? v : 1.0;
}

int test_scaled(int n)
{
    int k = (int)(n * test_scale() + 0.5);
    return k < 1 ? 1 : k;
}

int test_keep(int k, int count)
{
    double s = test_scale();
    if (s >= 1 || k == count - 1)
        return 1;
    return floor((k + 1) * s) > floor(k * s);
}

uint64_t rng_next(rng *r)
{
    uint64_t z = (r->s += 0x9e3779b97f4a7c15u);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9u;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebu;
    return z ^ (z >> 31);
}

double rng_unif(rng *r)
{
    return (double)(rng_next(r) >> 11) * 0x1p-53;
}

int64_t rng_pick(rng *r, int64_t n)
{
    return (int64_t)(rng_next(r) % (uint64_t)n);
}

int64_t rng_int(rng *r, int64_t lo, int64_t hi)
{
    return lo + (int64_t)(rng_next(r) % (uint64_t)(hi - lo + 1));
}

int rng_chance(rng *r, double p)
{
    return rng_unif(r) < p;
}

double rng_gauss(rng *r)
{
    double u1 = rng_unif(r), u2 = rng_unif(r);
    return sqrt(-2.0 * log(u1 + 0x1p-60)) * cos(6.283185307179586 * u2);
}

void outbuf_make(outbuf *x, const smattn_problem *p, smattn_dtype t)
{
    x->t = t;
    x->no = p->op == SMATTN_OP_ATTENTION ? (size_t)(p->B * p->S * p->Hq * p->Dv) : 0;
    x->nl = (size_t)(p->B * p->Hq * p->S);
    x->np = x->nl * (size_t)p->T;
    size_t es = smattn_dtype_size(t);
    x->o = calloc(x->no + 1, es);
    x->l = calloc(x->nl, es);
    x->p = calloc(x->np, es);
    memset(&x->out, 0, sizeof x->out);
    x->out.o = (smattn_out_tensor){p->op == SMATTN_OP_ATTENTION ? x->o : NULL, t, {0}};
    x->out.lse = (smattn_out_tensor){x->l, t, {0}};
    x->out.p = (smattn_out_tensor){x->p, t, {0}};
    smattn_contiguous_strides(p, 'o', x->out.o.stride);
    smattn_contiguous_strides(p, 'l', x->out.lse.stride);
    smattn_contiguous_strides(p, 'p', x->out.p.stride);
}

void outbuf_free(outbuf *x)
{
    free(x->o), free(x->l), free(x->p);
    memset(x, 0, sizeof *x);
}

double outbuf_get(const outbuf *x, char which, int64_t k)
{
    return smattn_load(which == 'o' ? x->o : which == 'l' ? x->l : x->p, x->t, k);
}

void outbuf_put(outbuf *x, char which, int64_t k, double v)
{
    smattn_store(which == 'o' ? x->o : which == 'l' ? x->l : x->p, x->t, k, v);
}
