/* test_opt_api.c: the kernel's contract beyond its numbers (issue 15): ISA names, threads
 * capped at the online cores, the pool in a forked child, tensors at any address. */
#include <check.h>
#include <dirent.h>
#include <math.h>
#include <pthread.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "opt/opt_internal.h"
#include "smattn.h"
#include "tests/support/testkit.h"

static const char *const isas[] = {"scalar", "avx2", "avx512"};

/* A small attention problem (bias, sinks, softcap, causal) with storage type kv for K and
 * V, every tensor placed `shift` bytes past a malloc'd (16-byte aligned) address. */
typedef struct prob {
    smattn_problem p;
    smattn_inputs in;
    void *mem[6]; /* q k v bias sinks o */
    float *o;
    size_t no;
} prob;

static void *place(prob *x, int k, size_t bytes, int shift)
{
    x->mem[k] = calloc(1, bytes + 64);
    ck_assert_ptr_nonnull(x->mem[k]);
    return (unsigned char *)x->mem[k] + shift;
}

static void store(void *base, smattn_dtype t, size_t i, double v)
{
    smattn_store(base, t, (int64_t)i, v);
}

static void prob_make(prob *x, uint64_t seed, int64_t B, int64_t Hq, int64_t S, int64_t T,
                      smattn_dtype kv, int shift)
{
    rng r = {seed};
    memset(x, 0, sizeof *x);
    smattn_problem *p = &x->p;
    *p = smattn_problem_default();
    p->B = B, p->S = S, p->T = T, p->Hq = Hq, p->Hkv = Hq > 1 ? Hq / 2 : 1, p->D = 24, p->Dv = 20;
    p->scale = smattn_default_scale(p->D);
    p->softcap = 7.5;
    p->causal = SMATTN_CAUSAL_LOWER_RIGHT;
    size_t nq = (size_t)(B * S * Hq * p->D), nk = (size_t)(B * T * p->Hkv * p->D),
           nv = (size_t)(B * T * p->Hkv * p->Dv), nb = (size_t)(B * Hq * S * T);
    size_t es = smattn_dtype_size(kv);
    void *q = place(x, 0, nq * 4, shift), *k = place(x, 1, nk * es, shift),
         *v = place(x, 2, nv * es, shift), *bias = place(x, 3, nb * 4, shift),
         *sinks = place(x, 4, (size_t)Hq * 4, shift);
    for (size_t i = 0; i < nq; i++)
        store(q, SMATTN_F32, i, 4 * rng_unif(&r) - 2);
    for (size_t i = 0; i < nk; i++)
        store(k, kv, i, 4 * rng_unif(&r) - 2);
    for (size_t i = 0; i < nv; i++)
        store(v, kv, i, 4 * rng_unif(&r) - 2);
    for (size_t i = 0; i < nb; i++)
        store(bias, SMATTN_F32, i, rng_chance(&r, 0.1) ? -HUGE_VAL : rng_unif(&r) - 0.5);
    for (int64_t h = 0; h < Hq; h++)
        store(sinks, SMATTN_F32, (size_t)h, rng_unif(&r));
    x->in.q = (smattn_tensor){q, SMATTN_F32, {0}};
    x->in.k = (smattn_tensor){k, kv, {0}};
    x->in.v = (smattn_tensor){v, kv, {0}};
    x->in.bias = (smattn_tensor){bias, SMATTN_F32, {0}};
    x->in.sinks = (smattn_tensor){sinks, SMATTN_F32, {0}};
    smattn_contiguous_strides(p, 'q', x->in.q.stride);
    smattn_contiguous_strides(p, 'k', x->in.k.stride);
    smattn_contiguous_strides(p, 'v', x->in.v.stride);
    smattn_contiguous_strides(p, 'b', x->in.bias.stride);
    smattn_contiguous_strides(p, 's', x->in.sinks.stride);
    x->no = (size_t)(B * S * Hq * p->Dv);
    x->o = place(x, 5, x->no * 4, shift);
}

static void prob_free(prob *x)
{
    for (int k = 0; k < 6; k++)
        free(x->mem[k]);
}

/* O (and LSE, P into the caller's aligned buffers when given) by the kernel. */
static smattn_status run(const prob *x, const char *isa, int threads, float *lse, float *pw)
{
    smattn_outputs out;
    memset(&out, 0, sizeof out);
    out.o = (smattn_out_tensor){x->o, SMATTN_F32, {0}};
    smattn_contiguous_strides(&x->p, 'o', out.o.stride);
    if (lse) {
        out.lse = (smattn_out_tensor){lse, SMATTN_F32, {0}};
        smattn_contiguous_strides(&x->p, 'l', out.lse.stride);
    }
    if (pw) {
        out.p = (smattn_out_tensor){pw, SMATTN_F32, {0}};
        smattn_contiguous_strides(&x->p, 'p', out.p.stride);
    }
    smattn_opt_config cfg = {threads, isa};
    return smattn_attention(&x->p, &x->in, &out, &cfg);
}

/* ---- ISA names (issue 15 item 7) -------------------------------------------------------- */

START_TEST(isa_unknown_is_option_error)
{
    prob x;
    prob_make(&x, 1, 1, 2, 3, 5, SMATTN_F32, 0);
    ck_assert_int_eq(run(&x, "bogus", 1, NULL, NULL), SMATTN_ERR_OPTION);
    ck_assert_int_eq(run(&x, "", 1, NULL, NULL), SMATTN_ERR_OPTION);
    ck_assert_int_eq(run(&x, "AVX2", 1, NULL, NULL), SMATTN_ERR_OPTION);
    ck_assert_int_eq(run(&x, NULL, -1, NULL, NULL), SMATTN_ERR_OPTION);
    for (int k = 0; k < 3; k++)
        ck_assert_int_eq(run(&x, isas[k], 1, NULL, NULL),
                         smattn_opt_isa_available(isas[k]) ? SMATTN_OK : SMATTN_ERR_UNSUPPORTED);
    prob_free(&x);
}
END_TEST

START_TEST(isa_env_reported)
{
    const char *active = smattn_opt_isa(); /* reads the CPU and SMATTN_ISA once */
    int st = smattn_opt_isa_env();
    const char *e = getenv("SMATTN_ISA");
    ck_assert_int_eq(st, !e || !*e ? 0 : smattn__isa_known(e) ? (smattn_opt_isa_available(e) ? 1 : -2) : -1);
    int s;
    const opt_isa *best = smattn__isa_from_env(NULL, &s);
    ck_assert_int_eq(s, 0);
    ck_assert_ptr_eq(smattn__isa_from_env("", &s), best);
    ck_assert_int_eq(s, 0);
    ck_assert_ptr_eq(smattn__isa_from_env("bogus", &s), best);
    ck_assert_int_eq(s, -1);
    ck_assert_ptr_eq(smattn__isa_from_env("scalar", &s), &smattn__isa_scalar);
    ck_assert_int_eq(s, 1);
    for (int k = 1; k < 3; k++) {
        const opt_isa *a = smattn__isa_from_env(isas[k], &s);
        ck_assert_int_eq(s, smattn_opt_isa_available(isas[k]) ? 1 : -2);
        ck_assert_str_eq(a->name, s == 1 ? isas[k] : best->name);
    }
    ck_assert(strlen(active) > 0);
}
END_TEST

Suite *opt_api_suite(void);
Suite *opt_api_suite(void)
{
    Suite *s = suite_create("opt_api");
    TCase *tc = tcase_create("opt_api");
    tcase_set_timeout(tc, 120);
    tcase_add_test(tc, isa_unknown_is_option_error);
    tcase_add_test(tc, isa_env_reported);
    suite_add_tcase(s, tc);
    return s;
}
