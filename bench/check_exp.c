/* SPDX-License-Identifier: MIT */
/* check_exp.c: the kernel's binary32 exp, for every ISA the CPU has, over EVERY binary32
 * input in [-104, 0] and every 16th one in (0, 88.7], against the correctly rounded exp.
 *
 * Reference: glibc's binary64 exp (error below 1 ulp of binary64, i.e. below 2^-52
 * relative). Its binary32 rounding is the correct one unless the binary64 value lies within
 * 2^-45 relative of a binary32 rounding boundary (a midpoint between two binary32 numbers,
 * or FLT_MIN for the flush decision): then MPFR decides, in a Ziv loop closed by
 * mpfr_can_round. The error of a result is |computed - exact| / ulp(exact) in binary32
 * ulps (smattn_ulp_error, with the binary64 exact value: off by at most 2^-28 ulp).
 * Inputs whose exact exp is below FLT_MIN must give exactly +0 (the kernel flushes:
 * SPEC 6's "tiny" is FLT_MIN for it); they are counted apart. Special inputs: -inf -> +0,
 * +inf -> +inf, NaN -> NaN.
 *
 * Exit status: 0 when every ISA's max error is <= SMATTN_OPT_EXP_ULPS and every flushed
 * or special input behaves; 1 otherwise. Usage: check_exp [--threads N] [--isa NAME]. */
#include <float.h>
#include <math.h>
#include <mpfr.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "opt/opt_internal.h"
#include "smattn.h"

/* Inputs per unit of work handed to a thread. */
#define CHUNK (1u << 20)
/* Stride of the sample of positive inputs. */
#define POS_STRIDE 16u
/* ulp buckets: correctly rounded, then error <= each edge, then above the last edge. */
static const double bucket_edge[] = {0.5, 1.0, 1.5, 2.0, 3.0, 4.0};
#define NEDGE ((int)(sizeof bucket_edge / sizeof bucket_edge[0]))
#define NBUCKET (NEDGE + 2)
#define MAX_ISA 3

typedef struct isa_stats {
    uint64_t bucket[NBUCKET]; /* [0]: == correct rounding; [k]: <= edge[k-1]; last: beyond */
    uint64_t flushed_ok;      /* exact < FLT_MIN, result +0 */
    uint64_t flushed_bad;     /* exact < FLT_MIN, result not +0 */
    float bad_flush_x;        /* an example of the above */
    double max_err;
    float max_x; /* the input of max_err (first one found in its chunk) */
    uint64_t le0_differ;      /* x <= 0 where expf_le0 and expf give different bits */
    float le0_x;              /* an example of the above */
} isa_stats;

typedef struct range {
    uint32_t first, last, step; /* bit patterns first, first+step, ..., <= last */
} range;

typedef struct shared {
    const opt_isa *isa[MAX_ISA];
    int nisa;
    range ranges[2];
    uint64_t nchunks[2];
    atomic_ullong next;
    uint64_t total_chunks;
} shared;

typedef struct worker {
    shared *sh;
    isa_stats st[MAX_ISA];
    uint64_t inputs, mpfr_calls;
    long max_prec;
} worker;

static float float_of(uint32_t u)
{
    float f;
    memcpy(&f, &u, sizeof f);
    return f;
}

static uint32_t bits_of(float f)
{
    uint32_t u;
    memcpy(&u, &f, sizeof u);
    return u;
}

static int is_plus_zero(float f)
{
    return bits_of(f) == 0;
}

/* The correctly rounded binary32 exp(x) and a binary64 value within 2^-52 relative of the
 * exact one, by MPFR: Ziv's loop until the rounding to 24 bits is certain. */
static float exp_mpfr(float x, double *exact, long *max_prec)
{
    mpfr_t mx, y;
    mpfr_init2(mx, 24);
    mpfr_set_flt(mx, x, MPFR_RNDN); /* exact */
    float r = 0;
    for (long prec = 128;; prec *= 2) {
        mpfr_init2(y, prec);
        mpfr_exp(y, mx, MPFR_RNDN); /* error <= 1/2 ulp at prec bits */
        if (mpfr_can_round(y, prec - 1, MPFR_RNDN, MPFR_RNDZ, 24 + 1) || prec >= 1 << 16) {
            r = mpfr_get_flt(y, MPFR_RNDN);
            *exact = mpfr_get_d(y, MPFR_RNDN);
            if (prec > *max_prec)
                *max_prec = prec;
            mpfr_clear(y);
            break;
        }
        mpfr_clear(y);
    }
    mpfr_clear(mx);
    return r;
}

/* Nonzero when the binary64 value e (within 2^-52 relative of the exact exp) is within
 * 2^-45 relative of a binary32 rounding boundary or of FLT_MIN, so that its own rounding
 * to binary32 (or its comparison with FLT_MIN) may differ from the exact value's. */
static int near_boundary(double e)
{
    if (fabs(e - (double)FLT_MIN) <= 0x1p-45 * e)
        return 1;
    if (e < (double)FLT_MIN || !(e < (double)FLT_MAX))
        return 0;
    uint64_t b;
    memcpy(&b, &e, sizeof b);
    /* e = 1.f * 2^k with 52 fraction bits; binary32 keeps the top 23, so the rounding
     * boundary is at low29 = 2^28. One unit of low29 is 2^-52 * 2^k <= 2^-52 e, so
     * |low29 - 2^28| <= 2^8 covers every e within 2^-45 relative (as 2^-45 e < 2^8 units). */
    int64_t low = (int64_t)(b & ((1u << 29) - 1));
    return llabs(low - (1 << 28)) <= (1 << 8);
}

static void account(isa_stats *st, float x, float c, float rn, double exact, int flush)
{
    if (flush) {
        if (is_plus_zero(c))
            st->flushed_ok++;
        else if (st->flushed_bad++ == 0)
            st->bad_flush_x = x;
        return;
    }
    if (bits_of(c) == bits_of(rn)) { /* error <= 1/2 ulp: never the max once any is not */
        st->bucket[0]++;
        return;
    }
    double err = smattn_ulp_error((double)c, exact, SMATTN_F32);
    int k;
    for (k = 1; k <= NEDGE && !(err <= bucket_edge[k - 1]); k++)
        ;
    st->bucket[k]++;
    if (err > st->max_err || isnan(err)) {
        st->max_err = isnan(err) ? HUGE_VAL : err;
        st->max_x = x;
    }
}

static void run_chunk(worker *w, const range *r, uint64_t chunk)
{
    shared *sh = w->sh;
    uint64_t lo = (uint64_t)r->first + chunk * CHUNK * r->step;
    for (uint64_t k = 0; k < CHUNK; k++) {
        uint64_t u = lo + k * r->step;
        if (u > r->last)
            break;
        float x = float_of((uint32_t)u);
        double e = exp((double)x);
        float rn;
        if (near_boundary(e)) {
            rn = exp_mpfr(x, &e, &w->max_prec);
            w->mpfr_calls++;
        } else
            rn = (float)e;
        int flush = e < (double)FLT_MIN;
        for (int i = 0; i < sh->nisa; i++) {
            float c = sh->isa[i]->expf(x);
            account(&w->st[i], x, c, rn, e, flush);
            if (!(x > 0) && bits_of(sh->isa[i]->expf_le0(x)) != bits_of(c) &&
                w->st[i].le0_differ++ == 0)
                w->st[i].le0_x = x;
        }
        w->inputs++;
    }
}

static void *worker_main(void *arg)
{
    worker *w = arg;
    shared *sh = w->sh;
    for (;;) {
        uint64_t c = atomic_fetch_add(&sh->next, 1);
        if (c >= sh->total_chunks)
            break;
        if (c < sh->nchunks[0])
            run_chunk(w, &sh->ranges[0], c);
        else
            run_chunk(w, &sh->ranges[1], c - sh->nchunks[0]);
    }
    mpfr_free_cache();
    return NULL;
}

static void merge(isa_stats *a, const isa_stats *b)
{
    for (int k = 0; k < NBUCKET; k++)
        a->bucket[k] += b->bucket[k];
    a->flushed_ok += b->flushed_ok;
    if (b->flushed_bad && !a->flushed_bad)
        a->bad_flush_x = b->bad_flush_x;
    a->flushed_bad += b->flushed_bad;
    if (b->le0_differ && !a->le0_differ)
        a->le0_x = b->le0_x;
    a->le0_differ += b->le0_differ;
    if (b->max_err > a->max_err || (b->max_err == a->max_err && b->max_x < a->max_x)) {
        a->max_err = b->max_err;
        a->max_x = b->max_x;
    }
}

static int check_specials(const opt_isa *isa)
{
    float ni = isa->expf(-HUGE_VALF), pi = isa->expf(HUGE_VALF), nn = isa->expf(NAN);
    int ok = is_plus_zero(ni) && pi == HUGE_VALF && isnan(nn) && is_plus_zero(isa->expf_le0(-HUGE_VALF));
    printf("  special inputs: exp(-inf) = %a, exp(+inf) = %a, exp(nan) = %a: %s\n", (double)ni,
           (double)pi, (double)nn, ok ? "ok" : "WRONG (want +0, +inf, nan)");
    return ok;
}

static double now(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

int main(int argc, char **argv)
{
    int threads = 2;
    const char *only = NULL;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--threads") && i + 1 < argc)
            threads = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--isa") && i + 1 < argc)
            only = argv[++i];
        else {
            fprintf(stderr, "usage: check_exp [--threads N] [--isa scalar|avx2|avx512]\n");
            return 2;
        }
    }
    if (threads < 1 || threads > 64) {
        fprintf(stderr, "check_exp: --threads must be in [1, 64]\n");
        return 2;
    }
    shared sh;
    memset(&sh, 0, sizeof sh);
    const opt_isa *all[MAX_ISA] = {&smattn__isa_scalar, &smattn__isa_avx2, &smattn__isa_avx512};
    for (int i = 0; i < MAX_ISA; i++)
        if (smattn_opt_isa_available(all[i]->name) && (!only || !strcmp(only, all[i]->name)))
            sh.isa[sh.nisa++] = all[i];
    if (sh.nisa == 0) {
        fprintf(stderr, "check_exp: ISA '%s' is unknown or not available on this CPU\n", only);
        return 2;
    }
    /* [-104, -0]: bit patterns 0x80000000 (-0) up to that of -104, all of them;
     * (0, 88.7]: every POS_STRIDE-th pattern from the smallest subnormal, and 88.7f. */
    sh.ranges[0] = (range){0x80000000u, bits_of(-104.0f), 1};
    sh.ranges[1] = (range){1u, bits_of(88.7f), POS_STRIDE};
    for (int r = 0; r < 2; r++) {
        uint64_t n = ((uint64_t)sh.ranges[r].last - sh.ranges[r].first) / sh.ranges[r].step + 1;
        sh.nchunks[r] = (n + CHUNK - 1) / CHUNK;
    }
    sh.total_chunks = sh.nchunks[0] + sh.nchunks[1];
    atomic_init(&sh.next, 0);

    printf("check-exp: the kernel's binary32 exp against the correctly rounded exp\n"
           "inputs: every binary32 in [-104, 0] (%llu), every %uth in (0, 88.7]; ISAs:",
           (unsigned long long)(bits_of(-104.0f) - 0x80000000u + 1), POS_STRIDE);
    for (int i = 0; i < sh.nisa; i++)
        printf(" %s", sh.isa[i]->name);
    printf("; %d threads\n", threads);
    fflush(stdout);

    double t0 = now();
    worker *w = calloc((size_t)threads, sizeof *w);
    pthread_t *tid = calloc((size_t)threads, sizeof *tid);
    if (!w || !tid)
        return 2;
    for (int t = 0; t < threads; t++) {
        w[t].sh = &sh;
        if (pthread_create(&tid[t], NULL, worker_main, &w[t])) {
            fprintf(stderr, "check_exp: cannot start a thread\n");
            return 2;
        }
    }
    isa_stats tot[MAX_ISA];
    memset(tot, 0, sizeof tot);
    uint64_t inputs = 0, mpfr_calls = 0;
    long max_prec = 0;
    for (int t = 0; t < threads; t++) {
        pthread_join(tid[t], NULL);
        for (int i = 0; i < sh.nisa; i++)
            merge(&tot[i], &w[t].st[i]);
        inputs += w[t].inputs;
        mpfr_calls += w[t].mpfr_calls;
        max_prec = w[t].max_prec > max_prec ? w[t].max_prec : max_prec;
    }
    printf("%llu inputs in %.1f s; %llu near a rounding boundary decided by MPFR (max %ld "
           "bits)\n\n",
           (unsigned long long)inputs, now() - t0, (unsigned long long)mpfr_calls, max_prec);

    int fail = 0;
    for (int i = 0; i < sh.nisa; i++) {
        const isa_stats *s = &tot[i];
        float x = s->max_x;
        double exact = exp((double)x);
        if (s->max_err == 0 && s->bucket[0])
            printf("%s: every result correctly rounded (max error <= 0.5 ulp)\n", sh.isa[i]->name);
        else
            printf("%s: max error %.4f ulp at x = %a (kernel %a, exact %.9g); bound "
                   "SMATTN_OPT_EXP_ULPS = %.1f: %s\n",
                   sh.isa[i]->name, s->max_err, (double)x, (double)sh.isa[i]->expf(x), exact,
                   SMATTN_OPT_EXP_ULPS, s->max_err <= SMATTN_OPT_EXP_ULPS ? "ok" : "EXCEEDED");
        printf("  correctly rounded       %12llu\n", (unsigned long long)s->bucket[0]);
        for (int k = 1; k <= NEDGE; k++)
            printf("  (%.1f, %.1f] ulp %*s%12llu\n", k == 1 ? 0.0 : bucket_edge[k - 2],
                   bucket_edge[k - 1], 10, "", (unsigned long long)s->bucket[k]);
        printf("  > %.1f ulp %*s%12llu\n", bucket_edge[NEDGE - 1], 14, "",
               (unsigned long long)s->bucket[NEDGE + 1]);
        printf("  exact below FLT_MIN: %llu flushed to +0, %llu not",
               (unsigned long long)s->flushed_ok, (unsigned long long)s->flushed_bad);
        if (s->flushed_bad)
            printf(" (e.g. x = %a gives %a)", (double)s->bad_flush_x,
                   (double)sh.isa[i]->expf(s->bad_flush_x));
        printf("\n");
        printf("  the x <= 0 variant (softmax): %llu inputs in [-104, 0] with other bits",
               (unsigned long long)s->le0_differ);
        if (s->le0_differ)
            printf(" (e.g. x = %a: %a, not %a)", (double)s->le0_x,
                   (double)sh.isa[i]->expf_le0(s->le0_x), (double)sh.isa[i]->expf(s->le0_x));
        printf("\n");
        int ok = check_specials(sh.isa[i]);
        if (!(s->max_err <= SMATTN_OPT_EXP_ULPS) || s->flushed_bad || !ok || s->le0_differ)
            fail = 1;
    }
    printf("\ncheck-exp: %s\n", fail ? "FAIL" : "PASS");
    free(w);
    free(tid);
    return fail;
}
