/* SPDX-License-Identifier: MIT */
/* pool.c: a persistent pthread pool for the optimised kernel. One job runs at a time; a
 * caller that finds the pool busy runs its job on its own thread, which changes no result
 * bit because work items never depend on which thread runs them.
 *
 * fork(): the child has none of the workers, and the locks may have been held by threads
 * that the child does not have (a fork while another thread is inside a call). A
 * pthread_atfork child handler, registered at the pool's first use, gives the child an
 * empty pool with fresh locks; its first threaded call starts its own workers. */
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdlib.h>

#include "opt/opt_internal.h"

#define POOL_MAX 256

static pthread_mutex_t pool_lock = PTHREAD_MUTEX_INITIALIZER; /* held by the running job */
static pthread_mutex_t state_lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t wake = PTHREAD_COND_INITIALIZER, done = PTHREAD_COND_INITIALIZER;
static int nworkers;           /* started so far */
static unsigned long generation; /* bumped per job */
static int job_workers;        /* workers wanted for the current job */
static int active;             /* workers still inside the current job */
static opt_pool_fn job_fn;
static void *job_ctx;
static int64_t job_items;
static atomic_llong job_next;
static pthread_once_t atfork_once = PTHREAD_ONCE_INIT;
static int atfork_ok; /* the handler is registered: threads may be used */

/* In the child of a fork: the forking thread alone, so plain stores are safe. The mutexes
 * and condition variables are set to their initial state (the parent's holders are gone);
 * a job interrupted in the parent belongs to the parent and is forgotten here. */
static void pool_after_fork_child(void)
{
    pool_lock = (pthread_mutex_t)PTHREAD_MUTEX_INITIALIZER;
    state_lock = (pthread_mutex_t)PTHREAD_MUTEX_INITIALIZER;
    wake = (pthread_cond_t)PTHREAD_COND_INITIALIZER;
    done = (pthread_cond_t)PTHREAD_COND_INITIALIZER;
    nworkers = 0;
    generation = 0;
    job_workers = 0;
    active = 0;
    job_fn = NULL;
    job_ctx = NULL;
    job_items = 0;
    atomic_store(&job_next, 0);
}

static void register_atfork(void)
{
    atfork_ok = pthread_atfork(NULL, NULL, pool_after_fork_child) == 0;
}

static void run_items(int worker)
{
    for (;;) {
        int64_t it = (int64_t)atomic_fetch_add(&job_next, 1);
        if (it >= job_items)
            break;
        job_fn(job_ctx, it, worker);
    }
}

static void *pool_main(void *arg)
{
    int id = (int)(intptr_t)arg; /* 1 .. POOL_MAX-1; the caller is worker 0 */
    unsigned long seen = 0;
    pthread_mutex_lock(&state_lock);
    for (;;) {
        while (generation == seen || id >= job_workers) {
            seen = generation > seen && id >= job_workers ? generation : seen;
            pthread_cond_wait(&wake, &state_lock);
        }
        seen = generation;
        pthread_mutex_unlock(&state_lock);
        run_items(id);
        pthread_mutex_lock(&state_lock);
        if (--active == 0)
            pthread_cond_signal(&done);
    }
    return NULL;
}

int smattn__pool_run(int nthreads, int64_t nitems, opt_pool_fn fn, void *ctx)
{
    if (nthreads > POOL_MAX)
        nthreads = POOL_MAX;
    if (nthreads > nitems)
        nthreads = (int)(nitems > 0 ? nitems : 1);
    if (nthreads > 1)
        pthread_once(&atfork_once, register_atfork);
    /* without the fork handler no worker is started: a child could not use them */
    if (nthreads <= 1 || !atfork_ok || pthread_mutex_trylock(&pool_lock) != 0) {
        for (int64_t it = 0; it < nitems; it++) /* inline: same items, same results */
            fn(ctx, it, 0);
        return 1;
    }
    pthread_mutex_lock(&state_lock);
    while (nworkers < nthreads - 1) {
        pthread_t t;
        pthread_attr_t attr;
        pthread_attr_init(&attr);
        pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
        /* Workers outlive the call: they hold back every asynchronous signal (a worker
         * starts with its creator's mask), so that the application's threads take them,
         * as a program that masks signals around a critical step expects. Faults stay
         * deliverable to the thread that faults. */
        sigset_t all, was;
        sigfillset(&all);
        int sync_sigs[] = {SIGSEGV, SIGBUS, SIGFPE, SIGILL, SIGTRAP, SIGSYS, SIGABRT};
        for (size_t k = 0; k < sizeof sync_sigs / sizeof sync_sigs[0]; k++)
            sigdelset(&all, sync_sigs[k]);
        pthread_sigmask(SIG_BLOCK, &all, &was);
        int err = pthread_create(&t, &attr, pool_main, (void *)(intptr_t)(nworkers + 1));
        pthread_sigmask(SIG_SETMASK, &was, NULL);
        pthread_attr_destroy(&attr);
        if (err)
            break;
        nworkers++;
    }
    int helpers = nthreads - 1 < nworkers ? nthreads - 1 : nworkers;
    job_fn = fn;
    job_ctx = ctx;
    job_items = nitems;
    atomic_store(&job_next, 0);
    job_workers = helpers + 1;
    active = helpers;
    generation++;
    pthread_cond_broadcast(&wake);
    pthread_mutex_unlock(&state_lock);
    run_items(0);
    pthread_mutex_lock(&state_lock);
    while (active > 0)
        pthread_cond_wait(&done, &state_lock);
    job_workers = 0;
    pthread_mutex_unlock(&state_lock);
    pthread_mutex_unlock(&pool_lock);
    return helpers + 1;
}
