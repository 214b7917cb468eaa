/* SPDX-License-Identifier: MIT */
/* pool.c: the threads of the oracles (smattn_ref, smattn_ref_merge, smattn_ref_backward):
 * how many, MPFR's exponent range on each, and the lowest failing unit, so that a status
 * does not depend on which thread met it first. */
#include <stdlib.h>

#include "ref/ref_internal.h"

int smattn__ref_fail_init(ref_fail *f)
{
    f->unit = -1;
    f->status = SMATTN_OK;
    return pthread_mutex_init(&f->lock, NULL) ? -1 : 0;
}

void smattn__ref_fail_record(ref_fail *f, int64_t unit, smattn_status st)
{
    pthread_mutex_lock(&f->lock);
    if (f->unit < 0 || unit < f->unit) {
        f->unit = unit;
        f->status = st;
    }
    pthread_mutex_unlock(&f->lock);
}

smattn_status smattn__ref_fail_done(ref_fail *f)
{
    pthread_mutex_destroy(&f->lock);
    return f->unit >= 0 ? f->status : SMATTN_OK;
}

void smattn__ref_mpfr_widen(mpfr_exp_t saved[2])
{
    /* MPFR's exponent range is per thread (TLS build): widen it for the phases, so that
     * e^-1e6 and the like are numbers, not underflows (SPEC 5.3). */
    saved[0] = mpfr_get_emin(), saved[1] = mpfr_get_emax();
    mpfr_set_emin(mpfr_get_emin_min());
    mpfr_set_emax(mpfr_get_emax_max());
}

void smattn__ref_mpfr_restore(const mpfr_exp_t saved[2])
{
    mpfr_set_emin(saved[0]);
    mpfr_set_emax(saved[1]);
    mpfr_free_cache();
}

void smattn__ref_threads(int requested, int64_t most, void *(*worker)(void *), void *arg)
{
    /* at most the online cores: each thread holds buffers of its own, and no result
     * depends on the thread that computes it */
    int nt = requested > 0 && requested < smattn__ncpu() ? requested : smattn__ncpu();
    if (!mpfr_buildopt_tls_p())
        nt = 1; /* MPFR's state is global: one thread only */
    if ((int64_t)nt > most)
        nt = (int)most;
    if (nt < 1)
        nt = 1;
    pthread_t *tid = nt > 1 ? malloc((size_t)(nt - 1) * sizeof *tid) : NULL;
    int started = 0;
    for (int t = 0; tid && t < nt - 1; t++) {
        if (pthread_create(&tid[t], NULL, worker, arg))
            break;
        started++;
    }
    worker(arg); /* the caller is one of them */
    for (int t = 0; t < started; t++)
        pthread_join(tid[t], NULL);
    free(tid);
}
