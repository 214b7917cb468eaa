/* SPDX-License-Identifier: MIT */
/* test_opt_api.c: the kernel's contract beyond its numbers: ISA names, threads
 * capped at the online cores, the pool in a forked child, tensors at any address. */
#include <check.h>
#include <dirent.h>
#include <math.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
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

static void prob_make_dims(prob *x, uint64_t seed, int64_t B, int64_t Hq, int64_t S, int64_t T,
                           smattn_dtype kv, int shift, int64_t D, int64_t Dv)
{
    rng r = {seed};
    memset(x, 0, sizeof *x);
    smattn_problem *p = &x->p;
    *p = smattn_problem_default();
    p->B = B, p->S = S, p->T = T, p->Hq = Hq, p->Hkv = Hq > 1 ? Hq / 2 : 1, p->D = D, p->Dv = Dv;
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

static void prob_make(prob *x, uint64_t seed, int64_t B, int64_t Hq, int64_t S, int64_t T,
                      smattn_dtype kv, int shift)
{
    prob_make_dims(x, seed, B, Hq, S, T, kv, shift, 24, 20);
}

static void prob_free(prob *x)
{
    for (int k = 0; k < 6; k++)
        free(x->mem[k]);
}

/* O (and LSE, P into the caller's aligned buffers when given) by the kernel. */
static smattn_status run(const prob *x, const char *isa, int threads, void *lse, void *pw)
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

/* ---- ISA names -------------------------------------------------------- */

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

/* ---- threads capped at the online cores ------------------------------- */

static void nap(long us)
{
    struct timespec ts = {0, us * 1000};
    nanosleep(&ts, NULL);
}

static int threads_now(void)
{
    DIR *d = opendir("/proc/self/task");
    if (!d)
        return -1;
    int n = 0;
    struct dirent *e;
    while ((e = readdir(d)) != NULL)
        n += e->d_name[0] != '.';
    closedir(d);
    return n;
}

static long ncpu(void)
{
    long n = sysconf(_SC_NPROCESSORS_ONLN);
    return n < 1 ? 1 : n;
}

/* The most threads seen in the process while the watched call runs. */
typedef struct watch {
    atomic_int stop, most;
} watch;

static void *watcher(void *arg)
{
    watch *w = arg;
    while (!atomic_load(&w->stop)) {
        int n = threads_now();
        if (n > atomic_load(&w->most))
            atomic_store(&w->most, n);
        nap(200);
    }
    return NULL;
}

START_TEST(threads_capped_kernel)
{
    if (threads_now() < 0)
        return; /* no /proc */
    prob x;
    prob_make(&x, 2, 2, 8, 64, 40, SMATTN_F32, 0); /* 2 x 4 KV heads x 64 rows: many items */
    size_t no = x.no;
    float *ref1 = malloc(no * 4);
    ck_assert_int_eq(run(&x, NULL, 1, NULL, NULL), SMATTN_OK);
    memcpy(ref1, x.o, no * 4);
    int before = threads_now();
    ck_assert_int_eq(run(&x, NULL, 4096, NULL, NULL), SMATTN_OK);
    int after = threads_now();
    /* the pool's workers stay: at most ncpu - 1 of them beside this thread (and a few the
     * earlier tests of this process may have started, also capped) */
    ck_assert_msg(after <= before + ncpu() - 1 && after <= 1 + ncpu() + 1,
                  "threads %d before, %d after a call asking 4096 (%ld cores)", before, after, ncpu());
    ck_assert_int_eq(memcmp(ref1, x.o, no * 4), 0);
    setenv("SMATTN_NUM_THREADS", "1000", 1);
    ck_assert_int_eq(run(&x, NULL, 0, NULL, NULL), SMATTN_OK);
    unsetenv("SMATTN_NUM_THREADS");
    ck_assert_int_le(threads_now(), 1 + ncpu() + 1);
    ck_assert_int_eq(memcmp(ref1, x.o, no * 4), 0);
    free(ref1);
    prob_free(&x);
}
END_TEST

START_TEST(threads_capped_ref)
{
    if (threads_now() < 0)
        return;
    prob x;
    prob_make(&x, 3, 1, 8, 64, 12, SMATTN_F32, 0); /* 512 rows: 128 threads of 4 rows uncapped */
    x.p.softcap = 0;
    smattn_outputs out;
    memset(&out, 0, sizeof out);
    out.o = (smattn_out_tensor){x.o, SMATTN_F32, {0}};
    smattn_contiguous_strides(&x.p, 'o', out.o.stride);
    float *one = malloc(x.no * 4);
    smattn_ref_config c1 = {1, 0, 0, 0};
    ck_assert_int_eq(smattn_ref(&x.p, &x.in, &out, &c1, NULL), SMATTN_OK);
    memcpy(one, x.o, x.no * 4);
    memset(x.o, 0, x.no * 4);
    watch w;
    atomic_init(&w.stop, 0);
    atomic_init(&w.most, 0);
    int base = threads_now();
    pthread_t t;
    ck_assert_int_eq(pthread_create(&t, NULL, watcher, &w), 0);
    smattn_ref_config c = {4096, 0, 0, 0};
    ck_assert_int_eq(smattn_ref(&x.p, &x.in, &out, &c, NULL), SMATTN_OK);
    atomic_store(&w.stop, 1);
    pthread_join(t, NULL);
    /* this thread, the watcher, and at most ncpu - 1 workers */
    ck_assert_msg(atomic_load(&w.most) <= base + 1 + ncpu() - 1,
                  "%d threads seen during smattn_ref(threads 4096) (%d before, %ld cores)",
                  atomic_load(&w.most), base, ncpu());
    ck_assert_int_eq(memcmp(one, x.o, x.no * 4), 0);
    free(one);
    prob_free(&x);
}
END_TEST

/* ---- the pool in a forked child ----------------------------------------- */

/* In a child: the kernel with 0 and 2 threads must give `want`'s bits; an alarm turns a
 * deadlock into a failure. Returns the child's exit status (0: good). */
static int child_calls(prob *x, const float *want)
{
    pid_t pid = fork();
    ck_assert_int_ge(pid, 0);
    if (pid == 0) {
        signal(SIGALRM, SIG_DFL); /* not Check's handler (it would kill the whole group) */
        alarm(20);
        int bad = 0;
        for (int k = 0; k < 3; k++) {
            memset(x->o, 0, x->no * 4);
            bad |= run(x, NULL, k == 0 ? 0 : 2, NULL, NULL) != SMATTN_OK;
            bad |= memcmp(x->o, want, x->no * 4) != 0;
        }
        _exit(bad ? 3 : 0);
    }
    int status = 0;
    ck_assert_int_eq(waitpid(pid, &status, 0), pid);
    return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

START_TEST(fork_after_threaded_call)
{
    prob x;
    prob_make(&x, 4, 2, 4, 48, 40, SMATTN_F16, 0);
    float *want = malloc(x.no * 4);
    ck_assert_int_eq(run(&x, NULL, 1, NULL, NULL), SMATTN_OK);
    memcpy(want, x.o, x.no * 4);
    ck_assert_int_eq(run(&x, NULL, 2, NULL, NULL), SMATTN_OK); /* starts the pool's workers */
    ck_assert_int_eq(memcmp(want, x.o, x.no * 4), 0);
    int st = child_calls(&x, want);
    ck_assert_msg(st == 0, "child after fork: status %d (142: a deadlock killed by alarm)", st);
    ck_assert_int_eq(run(&x, NULL, 2, NULL, NULL), SMATTN_OK); /* the parent's pool still works */
    ck_assert_int_eq(memcmp(want, x.o, x.no * 4), 0);
    free(want);
    prob_free(&x);
}
END_TEST

/* A fork while another thread is inside a threaded call (it may hold the pool's locks). */
typedef struct busy {
    prob x;
    atomic_int stop, calls;
} busy;

static void *keep_calling(void *arg)
{
    busy *b = arg;
    while (!atomic_load(&b->stop)) {
        if (run(&b->x, NULL, 2, NULL, NULL) != SMATTN_OK)
            break;
        atomic_fetch_add(&b->calls, 1);
    }
    return NULL;
}

/* GCC 12's AddressSanitizer does not lock its allocator around fork(): a child forked while
 * another thread is inside malloc hangs in the child's first malloc (seen: the child in
 * SizeClassAllocator64::GetFromAllocator under ws_alloc, the parent's thread in malloc). A
 * limit of the sanitizer's runtime, not of the library: this test runs in the plain build. */
#if defined(__SANITIZE_ADDRESS__)
#define ASAN_FORK_UNSAFE 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define ASAN_FORK_UNSAFE 1
#endif
#endif

START_TEST(fork_during_threaded_call)
{
#ifdef ASAN_FORK_UNSAFE
    return;
#endif
    busy *b = calloc(1, sizeof *b);
    prob_make(&b->x, 5, 2, 4, 64, 200, SMATTN_F32, 0);
    prob x;
    prob_make(&x, 6, 1, 2, 8, 70, SMATTN_BF16, 0);
    float *want = malloc(x.no * 4);
    ck_assert_int_eq(run(&x, NULL, 1, NULL, NULL), SMATTN_OK);
    memcpy(want, x.o, x.no * 4);
    atomic_init(&b->stop, 0);
    atomic_init(&b->calls, 0);
    pthread_t t;
    ck_assert_int_eq(pthread_create(&t, NULL, keep_calling, b), 0);
    for (int k = 0; k < 6; k++) {
        while (atomic_load(&b->calls) < k + 1)
            nap(100);
        nap(37 * k); /* land at different moments of a call */
        int st = child_calls(&x, want);
        ck_assert_msg(st == 0, "child %d forked during a call: status %d", k, st);
    }
    atomic_store(&b->stop, 1);
    pthread_join(t, NULL);
    free(want);
    prob_free(&x);
    prob_free(&b->x);
    free(b);
}
END_TEST

/* ---- tensors at any address ------------------------------------------- */

/* Every tensor (Q, K, V, bias, sinks, O, LSE, P) 1, 2 or 3 bytes past an aligned address:
 * the kernel on every ISA the CPU has, and the oracle, give the aligned run's bits. Under
 * the sanitizer build a misaligned access fails the test. */
START_TEST(any_address_same_bits)
{
    static const smattn_dtype kvs[] = {SMATTN_F32, SMATTN_F16, SMATTN_BF16};
    for (int k = 0; k < 3; k++) {
        if (!smattn_opt_isa_available(isas[k]))
            continue;
        for (int t = 0; t < 3; t++) {
            prob a;
            prob_make(&a, 7 + (uint64_t)t, 2, 4, 19, 83, kvs[t], 0);
            size_t nl = (size_t)(a.p.B * a.p.Hq * a.p.S), np = nl * (size_t)a.p.T;
            unsigned char *la = calloc(1, nl * 4 + 8), *pa = calloc(1, np * 4 + 8);
            unsigned char *lb = calloc(1, nl * 4 + 8), *pb = calloc(1, np * 4 + 8);
            ck_assert_int_eq(run(&a, isas[k], 2, la, pa), SMATTN_OK);
            for (int shift = 1; shift <= 3; shift++) {
                prob b;
                prob_make(&b, 7 + (uint64_t)t, 2, 4, 19, 83, kvs[t], shift);
                ck_assert_int_eq(run(&b, isas[k], 2, lb + shift, pb + shift), SMATTN_OK);
                ck_assert_msg(memcmp(a.o, b.o, a.no * 4) == 0, "%s %s shift %d: O differs", isas[k],
                              smattn_dtype_name(kvs[t]), shift);
                ck_assert_msg(memcmp(la, lb + shift, nl * 4) == 0, "%s %s shift %d: LSE differs",
                              isas[k], smattn_dtype_name(kvs[t]), shift);
                ck_assert_msg(memcmp(pa, pb + shift, np * 4) == 0, "%s %s shift %d: P differs",
                              isas[k], smattn_dtype_name(kvs[t]), shift);
                prob_free(&b);
            }
            free(la), free(pa), free(lb), free(pb);
            prob_free(&a);
        }
    }
    /* the oracle, f32 and f16 inputs, f32 outputs at odd addresses */
    for (int t = 0; t < 2; t++) {
        prob a, b;
        prob_make(&a, 11, 1, 2, 5, 9, kvs[t], 0);
        prob_make(&b, 11, 1, 2, 5, 9, kvs[t], 3);
        a.p.softcap = b.p.softcap = 0; /* the oracle decides these quickly */
        smattn_outputs oa, ob;
        memset(&oa, 0, sizeof oa), memset(&ob, 0, sizeof ob);
        oa.o = (smattn_out_tensor){a.o, SMATTN_F32, {0}};
        ob.o = (smattn_out_tensor){b.o, SMATTN_F32, {0}};
        smattn_contiguous_strides(&a.p, 'o', oa.o.stride);
        smattn_contiguous_strides(&b.p, 'o', ob.o.stride);
        smattn_ref_config c = {1, 0, 0, 0};
        ck_assert_int_eq(smattn_ref(&a.p, &a.in, &oa, &c, NULL), SMATTN_OK);
        ck_assert_int_eq(smattn_ref(&b.p, &b.in, &ob, &c, NULL), SMATTN_OK);
        ck_assert_int_eq(memcmp(a.o, b.o, a.no * 4), 0);
        prob_free(&a), prob_free(&b);
    }
}
END_TEST

/* AVX2's many-row P.V stages each tile of a dense V once per call for every work item that
 * reads it (opt.c's vstage), and every call's workspaces come from a block kept between
 * calls (opt.c's scratch): neither may change a bit. A prefill (Dv a multiple of 16, three
 * query tiles per KV head) at 1, 2 and 3 threads, each after a call of another shape and
 * other values (a stale tile or workspace would show), from two threads at once, and
 * against the same problem described as a packed batch of one (cu_seqlens_k = {0, T}),
 * whose units each stage their own tiles. */
typedef struct twin_call {
    const prob *x;
    const char *isa;
    float *o;
    smattn_status st;
} twin_call;

static void *call_into(void *arg)
{
    twin_call *c = arg;
    smattn_outputs out;
    memset(&out, 0, sizeof out);
    out.o = (smattn_out_tensor){c->o, SMATTN_F32, {0}};
    smattn_contiguous_strides(&c->x->p, 'o', out.o.stride);
    smattn_opt_config cfg = {2, c->isa};
    c->st = smattn_attention(&c->x->p, &c->x->in, &out, &cfg);
    return NULL;
}

START_TEST(shared_tiles_and_kept_scratch_same_bits)
{
    static const smattn_dtype kvs[] = {SMATTN_F32, SMATTN_F16};
    for (int k = 0; k < 3; k++) {
        if (!smattn_opt_isa_available(isas[k]))
            continue;
        for (int t = 0; t < 2; t++) {
            prob a, other;
            prob_make_dims(&a, 31 + (uint64_t)t, 1, 4, 150, 170, kvs[t], 0, 32, 32);
            float *want = malloc(a.no * 4);
            ck_assert_ptr_nonnull(want);
            ck_assert_int_eq(run(&a, isas[k], 1, NULL, NULL), SMATTN_OK);
            memcpy(want, a.o, a.no * 4);
            for (int threads = 1; threads <= 3; threads++) {
                prob_make_dims(&other, 77 + (uint64_t)threads, 1, 4, 200 + 10 * threads, 230,
                               kvs[1 - t], 0, 32, 32);
                ck_assert_int_eq(run(&other, isas[k], 2, NULL, NULL), SMATTN_OK);
                prob_free(&other);
                memset(a.o, 0, a.no * 4);
                ck_assert_int_eq(run(&a, isas[k], threads, NULL, NULL), SMATTN_OK);
                ck_assert_msg(memcmp(want, a.o, a.no * 4) == 0, "%s %s, %d threads: O differs",
                              isas[k], smattn_dtype_name(kvs[t]), threads);
            }
            float *o2[2] = {calloc(a.no, 4), calloc(a.no, 4)};
            ck_assert(o2[0] && o2[1]);
            twin_call c[2] = {{&a, isas[k], o2[0], SMATTN_OK}, {&a, isas[k], o2[1], SMATTN_OK}};
            pthread_t th[2];
            for (int n = 0; n < 2; n++)
                ck_assert_int_eq(pthread_create(&th[n], NULL, call_into, &c[n]), 0);
            for (int n = 0; n < 2; n++) {
                pthread_join(th[n], NULL);
                ck_assert_int_eq(c[n].st, SMATTN_OK);
                ck_assert_msg(memcmp(want, o2[n], a.no * 4) == 0,
                              "%s %s, two callers at once: O differs", isas[k],
                              smattn_dtype_name(kvs[t]));
            }
            free(o2[0]), free(o2[1]);
            const int64_t cu_k[2] = {0, a.p.T};
            smattn_layout lay = {NULL, cu_k, NULL, NULL, 0, 0, 0, 0};
            prob b = a; /* the same buffers, described as a packed batch of one */
            b.p.layout = &lay;
            const int64_t Hkv = a.p.Hkv;
            b.in.k.stride[0] = 0, b.in.k.stride[1] = Hkv * a.p.D;
            b.in.k.stride[2] = a.p.D, b.in.k.stride[3] = 1;
            b.in.v.stride[0] = 0, b.in.v.stride[1] = Hkv * a.p.Dv;
            b.in.v.stride[2] = a.p.Dv, b.in.v.stride[3] = 1;
            memset(a.o, 0, a.no * 4);
            ck_assert_int_eq(run(&b, isas[k], 2, NULL, NULL), SMATTN_OK);
            ck_assert_msg(memcmp(want, b.o, a.no * 4) == 0, "%s %s: the packed twin's O differs",
                          isas[k], smattn_dtype_name(kvs[t]));
            free(want);
            prob_free(&a);
        }
    }
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
    tcase_add_test(tc, threads_capped_kernel);
    tcase_add_test(tc, threads_capped_ref);
    tcase_add_test(tc, fork_after_threaded_call);
    tcase_add_test(tc, fork_during_threaded_call);
    tcase_add_test(tc, any_address_same_bits);
    tcase_add_test(tc, shared_tiles_and_kept_scratch_same_bits);
    suite_add_tcase(s, tc);
    return s;
}
