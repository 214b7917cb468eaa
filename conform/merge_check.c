/* SPDX-License-Identifier: MIT */
/* merge_check.c: the merge battery (SPEC 9) for a kernel exporting smattn_plugin_merge:
 * LSEs spread past exp's range, -inf and +inf empty partials injected (FlashInfer's and
 * vLLM's identity, FlashAttention-2's +inf), every part empty, one part alone per row, N = 1
 * and N = 64, base 2; each case run in a child like the attention cases and judged against
 * smattn_ref_merge under smattn_merge_bound. */
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

static uint64_t mrng(uint64_t *s)
{
    *s += 0x9e3779b97f4a7c15u;
    uint64_t z = *s;
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9u;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebu;
    return z ^ (z >> 31);
}

static double munif(uint64_t *s)
{
    return (double)(mrng(s) >> 11) * 0x1p-53;
}

/* kind: 0 plain, 1 spread past exp's range, 2 -inf injected, 3 +inf injected (FA2's empty
 * parts), 4 all empty, 5 one part per row, 6 base 2 */
static int add_case(conform_merge_battery *mb, const char *name, int64_t N, int64_t S,
                    int64_t Hq, int64_t Dv, int kind, uint64_t seed)
{
    if (mb->n == mb->cap) {
        size_t cap = mb->cap ? 2 * mb->cap : 16;
        conform_merge_case *nc = realloc(mb->cases, cap * sizeof *nc);
        if (!nc)
            return -1;
        mb->cases = nc, mb->cap = cap;
    }
    conform_merge_case *c = &mb->cases[mb->n];
    memset(c, 0, sizeof *c);
    snprintf(c->name, sizeof c->name, "merge/%s", name);
    smattn_merge_problem *p = &c->prob;
    *p = smattn_merge_problem_default();
    p->N = N, p->B = 1, p->S = S, p->Hq = Hq, p->Dv = Dv;
    if (kind == 3)
        p->empty_parts = SMATTN_LSE_POS_INF;
    if (kind == 6)
        p->lse_base = SMATTN_LSE_BASE_2;
    const int64_t no = S * Hq * Dv, nl = Hq * S;
    c->o = malloc((size_t)(N * no) * sizeof *c->o);
    c->l = malloc((size_t)(N * nl) * sizeof *c->l);
    if (!c->o || !c->l) {
        free(c->o), free(c->l);
        return -1;
    }
    uint64_t s = seed ^ (uint64_t)kind * 0x51ed27u;
    const double empty = kind == 3 ? HUGE_VAL : -HUGE_VAL;
    for (int64_t n = 0; n < N; n++)
        for (int64_t h = 0; h < Hq; h++)
            for (int64_t i = 0; i < S; i++) {
                double l = kind == 1 ? 2000 * munif(&s) - 1000 : 6 * munif(&s) - 3;
                int is_empty = ((kind == 2 || kind == 3) && munif(&s) < 0.25) || kind == 4 ||
                               (kind == 5 && n != (h + i) % N);
                c->l[n * nl + h * S + i] = is_empty ? empty : l;
                for (int64_t d = 0; d < Dv; d++)
                    c->o[n * no + (i * Hq + h) * Dv + d] = is_empty ? 0.0 : 2 * munif(&s) - 1;
            }
    mb->n++;
    return 0;
}

int conform_merge_battery_build(conform_merge_battery *mb, uint64_t seed)
{
    memset(mb, 0, sizeof *mb);
    int rc = add_case(mb, "n1", 1, 3, 2, 8, 0, seed) ||
             add_case(mb, "n2_plain", 2, 4, 2, 16, 0, seed) ||
             add_case(mb, "n64", 64, 2, 2, 8, 0, seed) ||
             add_case(mb, "lse_spread_pm1000", 8, 3, 2, 8, 1, seed) ||
             add_case(mb, "neg_inf_parts", 8, 4, 2, 8, 2, seed) ||
             add_case(mb, "pos_inf_parts_fa2", 8, 4, 2, 8, 3, seed) ||
             add_case(mb, "all_parts_empty", 4, 2, 2, 8, 4, seed) ||
             add_case(mb, "one_part_per_row", 6, 4, 3, 8, 5, seed) ||
             add_case(mb, "base2", 5, 3, 2, 8, 6, seed);
    if (rc)
        conform_merge_battery_free(mb);
    return rc ? -1 : 0;
}

void conform_merge_battery_free(conform_merge_battery *mb)
{
    for (size_t k = 0; k < mb->n; k++)
        free(mb->cases[k].o), free(mb->cases[k].l);
    free(mb->cases);
    memset(mb, 0, sizeof *mb);
}

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
    const size_t ies = smattn_dtype_size((smattn_dtype)it), oes = smattn_dtype_size((smattn_dtype)ot);
    /* inputs in the kernel's dtype (the oracle reads the same values); outputs shared */
    size_t in_bytes = (size_t)(p->N * (no + nl)) * ies, out_bytes = (size_t)(no + nl) * oes;
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
    for (int64_t e = 0; e < p->N * no; e++)
        smattn_store(inb, (smattn_dtype)it, e, c->o[e]);
    for (int64_t e = 0; e < p->N * nl; e++)
        smattn_store(inb + (size_t)(p->N * no) * ies, (smattn_dtype)it, e, c->l[e]);
    memset(outb, 0xa5, out_bytes);
    smattn_merge_inputs in;
    memset(&in, 0, sizeof in);
    const int64_t so[4] = {p->S * p->Hq * p->Dv, p->Hq * p->Dv, p->Dv, 1};
    const int64_t sl[4] = {p->Hq * p->S, p->S, 1, 0};
    in.o_parts = (smattn_tensor){inb, (smattn_dtype)it, {so[0], so[1], so[2], so[3]}};
    in.lse_parts = (smattn_tensor){inb + (size_t)(p->N * no) * ies, (smattn_dtype)it,
                                   {sl[0], sl[1], sl[2], sl[3]}};
    in.o_part_stride = no, in.lse_part_stride = nl;
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
