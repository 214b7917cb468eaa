/* SPDX-License-Identifier: MIT */
/* merge_check.c: the merge battery's cases (merge_battery.c, SPEC 9) run on a kernel
 * exporting smattn_plugin_merge, each in a child like the attention cases, and judged
 * against smattn_ref_merge under smattn_merge_bound. */
#define _DEFAULT_SOURCE 1
#include <errno.h>
#include <signal.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include "conform/conform.h"

static int pick(unsigned accepted)
{
    static const smattn_dtype pref[3] = {SMATTN_F32, SMATTN_F16, SMATTN_BF16};
    for (int k = 0; k < 3; k++)
        if (accepted & SMATTN_DTYPE_BIT(pref[k]))
            return (int)pref[k];
    return -1;
}

/* The child's answer, on a shared page. */
typedef struct merge_report {
    volatile int returned, status;
    char err[256];
} merge_report;

/* The model a merge is judged by: the builtin's smattn_merge_opt_precision(), a plugin's
 * info.precision with its sums taken as serial (acc_len 0: a partial's term passes through
 * up to N - 1 additions, whatever the attention's blocking). */
static smattn_precision merge_model(const conform_kernel *k)
{
    if (k->builtin)
        return smattn_merge_opt_precision();
    smattn_precision pm = k->info.precision;
    pm.acc_len = 0;
    return pm;
}

void conform_run_merge_case(const conform_kernel *k, const conform_merge_case *c, double timeout,
                            int capture_fd, conform_result *r)
{
    memset(r, 0, sizeof *r);
    snprintf(r->name, sizeof r->name, "%s", c->name);
    snprintf(r->category, sizeof r->category, "merge");
    const smattn_merge_problem *p = &c->prob;
    r->shape[0] = p->B, r->shape[1] = p->S, r->shape[3] = p->Hq, r->shape[6] = p->Dv;
    r->worst_out = -1;
    int it = pick(k->info.q_dtypes), ot = pick(k->info.out_dtypes);
    if (!k->has_merge || it < 0 || ot < 0) {
        r->status = CONFORM_SKIP;
        snprintf(r->reason, sizeof r->reason, "not claimed: the kernel exports no %s",
                 SMATTN_PLUGIN_MERGE_SYMBOL);
        return;
    }
    const int64_t no = p->B * p->S * p->Hq * p->Dv, nl = p->B * p->Hq * p->S;
    /* the partials 3 and 5 elements apart beyond their extents, the gaps NaN: a merge that
     * takes them packed (partial n at n B S Hq Dv, not n o_part_stride) reads NaN */
    const int64_t po = no + 3, pl = nl + 5;
    const size_t ies = smattn_dtype_size((smattn_dtype)it), oes = smattn_dtype_size((smattn_dtype)ot);
    /* inputs in the kernel's dtype (the oracle reads the same values); outputs shared */
    size_t in_bytes = (size_t)(p->N * (po + pl)) * ies, out_bytes = (size_t)(no + nl) * oes;
    unsigned char *inb = malloc(in_bytes ? in_bytes : 1);
    unsigned char *outb = mmap(NULL, out_bytes + 4096, PROT_READ | PROT_WRITE,
                               MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    merge_report *rep = mmap(NULL, 4096, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    double *ref = malloc((size_t)(2 * (no + nl)) * sizeof *ref);
    if (!inb || outb == MAP_FAILED || rep == MAP_FAILED || !ref) {
        r->status = CONFORM_FAIL;
        snprintf(r->reason, sizeof r->reason, "could not run: out of memory");
        goto done;
    }
    for (int64_t e = 0; e < p->N * po; e++)
        smattn_store(inb, (smattn_dtype)it, e, e % po < no ? c->o[e / po * no + e % po] : (double)NAN);
    for (int64_t e = 0; e < p->N * pl; e++)
        smattn_store(inb + (size_t)(p->N * po) * ies, (smattn_dtype)it, e,
                     e % pl < nl ? c->l[e / pl * nl + e % pl] : (double)NAN);
    memset(outb, 0xa5, out_bytes);
    smattn_merge_inputs in;
    memset(&in, 0, sizeof in);
    const int64_t so[4] = {p->S * p->Hq * p->Dv, p->Hq * p->Dv, p->Dv, 1};
    const int64_t sl[4] = {p->Hq * p->S, p->S, 1, 0};
    in.o_parts = (smattn_tensor){inb, (smattn_dtype)it, {so[0], so[1], so[2], so[3]}};
    in.lse_parts = (smattn_tensor){inb + (size_t)(p->N * po) * ies, (smattn_dtype)it,
                                   {sl[0], sl[1], sl[2], sl[3]}};
    in.o_part_stride = po, in.lse_part_stride = pl;
    smattn_outputs out, eo, bo;
    memset(&out, 0, sizeof out);
    out.o = (smattn_out_tensor){outb, (smattn_dtype)ot, {so[0], so[1], so[2], so[3]}};
    out.lse = (smattn_out_tensor){outb + (size_t)no * oes, (smattn_dtype)ot,
                                  {sl[0], sl[1], sl[2], sl[3]}};
    eo = out, bo = out;
    eo.o.data = ref, eo.o.dtype = SMATTN_F64;
    eo.lse.data = ref + no, eo.lse.dtype = SMATTN_F64;
    bo.o.data = ref + no + nl, bo.o.dtype = SMATTN_F64;
    bo.lse.data = ref + 2 * no + nl, bo.lse.dtype = SMATTN_F64;
    memset(rep, 0, sizeof *rep);
    conform_capture_reset(capture_fd);
    sigset_t old;
    pid_t pid = conform_child_fork(capture_fd, &old);
    if (pid < 0) {
        r->status = CONFORM_FAIL;
        snprintf(r->reason, sizeof r->reason, "could not run: fork: %s", strerror(errno));
        goto done;
    }
    if (pid == 0) {
        alarm((unsigned)ceil(timeout) + 2);
        conform_entry e;
        if (conform_kernel_bind(k, &e, rep->err, sizeof rep->err) || !e.merge)
            _exit(0);
        rep->status = e.merge(p, &in, &out);
        rep->returned = 1;
        _exit(0);
    }
    int ws = 0;
    int hung = conform_child_finish(pid, timeout, &old, &ws);
    conform_capture_read(capture_fd, r->output, sizeof r->output);
    r->status = CONFORM_FAIL;
    if (hung || !rep->returned) {
        snprintf(r->reason, sizeof r->reason, "%s: the merge %s", hung ? "hang" : "crash",
                 hung ? "did not return in time (killed)"
                      : WIFSIGNALED(ws) ? "died with a signal" : "exited without returning");
        goto done;
    }
    if (rep->status == SMATTN_ERR_UNSUPPORTED) {
        r->status = CONFORM_SKIP;
        snprintf(r->reason, sizeof r->reason, "the kernel declined it (SMATTN_ERR_UNSUPPORTED)");
        goto done;
    }
    if (rep->status != 0) {
        snprintf(r->reason, sizeof r->reason, "the merge returned status %d (%s)", rep->status,
                 smattn_status_name((smattn_status)rep->status));
        goto done;
    }
    smattn_precision pm = merge_model(k);
    smattn_ref_config cfg = {1, 0, 0, 0};
    int st = smattn_ref_merge(p, &in, &eo, &cfg);
    if (!st)
        st = smattn_merge_bound(p, &in, &pm, &out, &bo);
    if (st) {
        snprintf(r->reason, sizeof r->reason, "could not judge: %s",
                 smattn_status_name((smattn_status)st));
        goto done;
    }
    r->status = CONFORM_PASS;
    r->pm = pm;
    r->has_pm = 1;
    const double *ex[2] = {ref, ref + no}, *bd[2] = {ref + no + nl, ref + 2 * no + nl};
    const int64_t cnt[2] = {no, nl};
    const smattn_out_tensor *gt[2] = {&out.o, &out.lse};
    for (int t = 0; t < 2; t++)
        for (int64_t e = 0; e < cnt[t]; e++) {
            double got = smattn_load(gt[t]->data, gt[t]->dtype, e);
            double ratio = smattn_error_ratio(got, ex[t][e], bd[t][e]);
            r->elements++;
            if (ratio > r->max_ratio || !(ratio == ratio)) {
                r->max_ratio = ratio;
                r->worst_out = t, r->worst_got = got, r->worst_exact = ex[t][e];
                r->worst_bound = bd[t][e];
            }
            if (!(ratio <= 1) && r->status == CONFORM_PASS) {
                r->status = CONFORM_FAIL;
                r->mismatched++;
                snprintf(r->reason, sizeof r->reason,
                         "error/bound ratio %.4g at %s element %lld: got %.9g, exact %.9g, bound "
                         "%.3g (SPEC 9.5)",
                         ratio, t ? "LSE" : "O", (long long)e, got, ex[t][e], bd[t][e]);
            }
        }
done:
    free(inb);
    free(ref);
    if (outb != MAP_FAILED)
        munmap(outb, out_bytes + 4096);
    if (rep != MAP_FAILED)
        munmap(rep, 4096);
}
