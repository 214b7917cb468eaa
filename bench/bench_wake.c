/* SPDX-License-Identifier: MIT */
/* bench_wake.c: how long the kernel's thread pool takes to put its second thread to work.
 *
 * A decode step at T = 4096 lasts about a millisecond, so the time the pool's worker needs
 * to wake (opt/pool.c: a condition variable; in a VM a halted vCPU is woken by the
 * hypervisor) is a visible share of it. This program calls smattn__pool_run with 2
 * threads and 40 busy items of 50 us after an idle gap (0.2 ms or 5 ms, alternately, as
 * between calls of a model's layers or after `make bench`'s cache flush) and prints how
 * long after the call the worker started its first item. `make bench-wake`. */
#define _POSIX_C_SOURCE 200809L
#include <stdatomic.h>
#include <stdio.h>

#include "bench/bench_machine.h"
#include "opt/opt_internal.h"

enum { CALLS = 200, ITEMS = 40 };

static double t0, first[2];
static atomic_int started[2];

static void busy(void *ctx, int64_t item, int worker)
{
    (void)ctx, (void)item;
    if (worker < 2 && !atomic_exchange(&started[worker], 1))
        first[worker] = bench_now() - t0;
    for (double end = bench_now() + 50e-6; bench_now() < end;)
        ;
}

int main(void)
{
    double sum = 0, worst = 0, t[CALLS];
    int n = 0;
    for (int r = 0; r < CALLS; r++) {
        for (double end = bench_now() + (r % 2 ? 5e-3 : 0.2e-3); bench_now() < end;)
            ; /* the idle gap (the caller busy elsewhere, the worker asleep) */
        atomic_store(&started[0], 0);
        atomic_store(&started[1], 0);
        first[1] = -1;
        t0 = bench_now();
        smattn__pool_run(2, ITEMS, busy, NULL);
        if (first[1] >= 0) {
            t[n++] = first[1];
            sum += first[1];
            worst = first[1] > worst ? first[1] : worst;
        }
    }
    if (n == 0) {
        printf("bench_wake: the worker never joined (one CPU, or no threads)\n");
        return 1;
    }
    bench_sort(t, (size_t)n);
    printf("bench_wake: the pool's worker started its first item %.1f us after the call "
           "(median; mean %.1f, max %.1f; %d of %d calls, the rest ran on the caller alone)\n",
           1e6 * t[n / 2], 1e6 * sum / n, 1e6 * worst, n, CALLS);
    return 0;
}
