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

/* What a failed element points at, from the case's partials (SPEC 9.2), into buf ("" if
 * nothing): a poisoned row given a value, a non-finite column of a part that is not empty
 * lost (whatever its weight), an empty part's O read, the padding between the partials'
 * rows and heads read. t: 0 O, 1 LSE; e: its packed index. */
static void merge_hint(const conform_merge_case *c, int t, int64_t e, double got, double exact,
                       char *buf, size_t cap)
{
    const smattn_merge_problem *p = &c->prob;
    const int64_t no = p->B * p->S * p->Hq * p->Dv, nl = p->B * p->Hq * p->S;
    const int pos = p->empty_parts == SMATTN_LSE_POS_INF;
    int64_t b, h, i, d = 0;
    if (t == 0)
        d = e % p->Dv, h = e / p->Dv % p->Hq, i = e / (p->Dv * p->Hq) % p->S,
        b = e / (p->Dv * p->Hq * p->S);
    else
        i = e % p->S, h = e / p->S % p->Hq, b = e / (p->S * p->Hq);
    const double *l = c->l + (b * p->Hq + h) * p->S + i;
    const double *o = c->o + ((b * p->S + i) * p->Hq + h) * p->Dv + d;
    size_t len = 0;
    buf[0] = '\0';
    for (int64_t n = 0; n < p->N && !len; n++)
        if (isnan(l[n * nl]) || (!pos && l[n * nl] == HUGE_VAL))
            len = (size_t)snprintf(buf, cap,
                                   "; a poisoned row: part %lld's LSE is %s%s, so O and LSE are "
                                   "NaN (SPEC 9.2), not %s",
                                   (long long)n, isnan(l[n * nl]) ? "NaN" : "+inf",
                                   isnan(l[n * nl]) ? "" : " under empty_parts neg_inf",
                                   isnan(got) ? "NaN" : "a number or an empty row");
    int64_t M = -1;
    for (int64_t n = 0; n < p->N && !len; n++)
        if (isfinite(l[n * nl]) && (M < 0 || l[n * nl] > l[M * nl]))
            M = n;
    for (int64_t n = 0; n < p->N && !len && t == 0 && !isfinite(exact); n++)
        if (isfinite(l[n * nl]) && !isfinite(o[n * no]))
            len = (size_t)snprintf(buf, cap,
                                   "; part %lld's O holds %s in this column: a non-finite O of a "
                                   "part that is not empty counts whatever its weight (here "
                                   "%s^(%.4g) of the largest; SPEC 9.2)",
                                   (long long)n, isnan(o[n * no]) ? "NaN" : o[n * no] > 0 ? "+inf"
                                                                                        : "-inf",
                                   p->lse_base == SMATTN_LSE_BASE_2 ? "2" : "e",
                                   l[n * nl] - l[M * nl]);
    if (!len && isnan(got) && !isnan(exact)) {
        size_t at = 0;
        for (int64_t n = 0; n < p->N && at + 40 < cap; n++)
            if ((l[n * nl] == -HUGE_VAL || (pos && l[n * nl] == HUGE_VAL)) && isnan(o[n * no]))
                at += (size_t)snprintf(buf + at, cap - at, "%s%lld (LSE %s)",
                                       at ? ", " : "; empty parts ", (long long)n,
                                       l[n * nl] > 0 ? "+inf" : "-inf");
        if (at && at < cap)
            at += (size_t)snprintf(buf + at, cap - at,
                                   " under empty_parts %s hold NaN in O: an empty part's O is "
                                   "never read, whichever infinity marks it (SPEC 9.2)",
                                   pos ? "pos_inf" : "neg_inf");
        len = at < cap ? at : cap - 1;
    }
    if (c->layout != CONFORM_MERGE_PACKED && len < cap)
        snprintf(buf + len, cap - len,
                 "; strided partials: %s, NaN between them: are o_parts' and lse_parts' strides "
                 "read?",
                 c->layout == CONFORM_MERGE_PADDED
                     ? "O's and the LSE's rows and heads padded"
                     : "the LSE token-major [B,S,Hq], O's rows padded");
}

/* O's strides o[4] ([B,S,Hq,Dv]) and the LSE's l[4] ([B,Hq,S], l[3] = 0) in a case's layout,
 * and their extents eo, el (elements from the first to one past the last): packed; padded
 * (gap[0] after each head's Dv elements, gap[1] after each row's heads, gap[2] after each
 * batch; the LSE gap[3] after each head's S, gap[4] after each batch); or the LSE
 * token-major [B,S,Hq] and O's rows tok elements apart beyond their Hq Dv. */
static void merge_strides(const smattn_merge_problem *p, int layout, const int gap[5], int tok,
                          int64_t o[4], int64_t l[4], int64_t *eo, int64_t *el)
{
    o[0] = p->S * p->Hq * p->Dv, o[1] = p->Hq * p->Dv, o[2] = p->Dv, o[3] = 1;
    l[0] = p->Hq * p->S, l[1] = p->S, l[2] = 1, l[3] = 0;
    if (layout == CONFORM_MERGE_PADDED) {
        o[2] = p->Dv + gap[0], o[1] = p->Hq * o[2] + gap[1], o[0] = p->S * o[1] + gap[2];
        l[1] = p->S + gap[3], l[0] = p->Hq * l[1] + gap[4];
    } else if (layout == CONFORM_MERGE_LSE_TOKEN_MAJOR) {
        o[1] = p->Hq * p->Dv + tok, o[0] = p->S * o[1];
        l[0] = p->S * p->Hq, l[1] = 1, l[2] = p->Hq;
    }
    *eo = (p->B - 1) * o[0] + (p->S - 1) * o[1] + (p->Hq - 1) * o[2] + (p->Dv - 1) * o[3] + 1;
    *el = (p->B - 1) * l[0] + (p->Hq - 1) * l[1] + (p->S - 1) * l[2] + 1;
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
    /* within a partial, the case's layout (conform_merge_case): packed, or NaN between the
     * rows and heads a merge must step over by the strides */
    int64_t so[4], sl[4], eo, el;
    merge_strides(p, c->layout, (const int[5]){3, 5, 7, 2, 1}, 4, so, sl, &eo, &el);
    /* the partials 3 and 5 elements apart beyond their extents, the gaps NaN: a merge that
     * takes them packed (partial n at n B S Hq Dv, not n o_part_stride) reads NaN */
    const int64_t po = eo + 3, pl = el + 5;
    const size_t ies = smattn_dtype_size((smattn_dtype)it), oes = smattn_dtype_size((smattn_dtype)ot);
    /* the outputs packed, or in the strided cases strided too (O's rows and heads padded;
     * the LSE padded, or token-major [B,S,Hq] as FlashInfer stores it), the gaps holding the
     * canary bytes a merge must not write over */
    int64_t qo[4], ql[4], xo, xl;
    merge_strides(p, c->layout, (const int[5]){2, 3, 1, 1, 2}, 2, qo, ql, &xo, &xl);
    /* inputs in the kernel's dtype (the oracle reads the same values); outputs shared */
    size_t in_bytes = (size_t)(p->N * (po + pl)) * ies, out_bytes = (size_t)(xo + xl) * oes;
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
    unsigned char *linb = inb + (size_t)(p->N * po) * ies;
    for (int64_t e = 0; e < p->N * po; e++)
        smattn_store(inb, (smattn_dtype)it, e, (double)NAN);
    for (int64_t e = 0; e < p->N * pl; e++)
        smattn_store(linb, (smattn_dtype)it, e, (double)NAN);
    for (int64_t n = 0; n < p->N; n++)
        for (int64_t b = 0; b < p->B; b++)
            for (int64_t h = 0; h < p->Hq; h++)
                for (int64_t i = 0; i < p->S; i++) {
                    smattn_store(linb, (smattn_dtype)it, n * pl + b * sl[0] + h * sl[1] + i * sl[2],
                                 c->l[n * nl + (b * p->Hq + h) * p->S + i]);
                    for (int64_t d = 0; d < p->Dv; d++)
                        smattn_store(inb, (smattn_dtype)it,
                                     n * po + b * so[0] + i * so[1] + h * so[2] + d * so[3],
                                     c->o[n * no + ((b * p->S + i) * p->Hq + h) * p->Dv + d]);
                }
    memset(outb, 0xa5, out_bytes);
    smattn_merge_inputs in;
    memset(&in, 0, sizeof in);
    in.o_parts = (smattn_tensor){inb, (smattn_dtype)it, {so[0], so[1], so[2], so[3]}};
    in.lse_parts = (smattn_tensor){linb, (smattn_dtype)it, {sl[0], sl[1], sl[2], 0}};
    in.o_part_stride = po, in.lse_part_stride = pl;
    smattn_outputs out, ex_out, bo;
    memset(&out, 0, sizeof out);
    out.o = (smattn_out_tensor){outb, (smattn_dtype)ot, {qo[0], qo[1], qo[2], qo[3]}};
    out.lse = (smattn_out_tensor){
        outb + (size_t)xo * oes, (smattn_dtype)ot, {ql[0], ql[1], ql[2], ql[3]}};
    /* the oracle's values and the bounds packed */
    ex_out = out, bo = out;
    const int64_t po4[4] = {p->S * p->Hq * p->Dv, p->Hq * p->Dv, p->Dv, 1},
                  pl4[4] = {p->Hq * p->S, p->S, 1, 0};
    memcpy(ex_out.o.stride, po4, sizeof po4), memcpy(ex_out.lse.stride, pl4, sizeof pl4);
    memcpy(bo.o.stride, po4, sizeof po4), memcpy(bo.lse.stride, pl4, sizeof pl4);
    ex_out.o.data = ref, ex_out.o.dtype = SMATTN_F64;
    ex_out.lse.data = ref + no, ex_out.lse.dtype = SMATTN_F64;
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
    /* the canary bytes between the strided outputs' elements, untouched */
    if (c->layout != CONFORM_MERGE_PACKED) {
        unsigned char *mine = calloc((size_t)(xo + xl), 1);
        if (!mine) {
            snprintf(r->reason, sizeof r->reason, "could not judge: out of memory");
            goto done;
        }
        for (int64_t b = 0; b < p->B; b++)
            for (int64_t h = 0; h < p->Hq; h++)
                for (int64_t i = 0; i < p->S; i++) {
                    mine[xo + b * ql[0] + h * ql[1] + i * ql[2]] = 1;
                    for (int64_t d = 0; d < p->Dv; d++)
                        mine[b * qo[0] + i * qo[1] + h * qo[2] + d * qo[3]] = 1;
                }
        int64_t hit = -1;
        for (int64_t e = 0; e < xo + xl && hit < 0; e++)
            for (size_t byte = 0; !mine[e] && byte < oes && hit < 0; byte++)
                if (outb[(size_t)e * oes + byte] != 0xa5)
                    hit = e;
        free(mine);
        if (hit >= 0) {
            snprintf(r->reason, sizeof r->reason,
                     "wrote between the elements of its strided outputs (%s, element %lld of the "
                     "storage): are O's and the LSE's strides read?",
                     hit < xo ? "O" : "LSE", (long long)(hit < xo ? hit : hit - xo));
            goto done;
        }
    }
    smattn_precision pm = merge_model(k);
    smattn_ref_config cfg = {1, 0, 0, 0};
    int st = smattn_ref_merge(p, &in, &ex_out, &cfg);
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
            /* element e of the packed order ([B,S,Hq,Dv], [B,Hq,S]) in the kernel's strides */
            const int64_t *q = gt[t]->stride;
            const int64_t at =
                t == 0 ? e / (p->S * p->Hq * p->Dv) * q[0] + e / (p->Hq * p->Dv) % p->S * q[1] +
                             e / p->Dv % p->Hq * q[2] + e % p->Dv * q[3]
                       : e / (p->Hq * p->S) * q[0] + e / p->S % p->Hq * q[1] + e % p->S * q[2];
            double got = smattn_load(gt[t]->data, gt[t]->dtype, at);
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
                char hint[320];
                merge_hint(c, t, e, got, ex[t][e], hint, sizeof hint);
                snprintf(r->reason, sizeof r->reason,
                         "error/bound ratio %.4g at %s element %lld: got %.9g, exact %.9g, bound "
                         "%.3g (SPEC 9.5)%s",
                         ratio, t ? "LSE" : "O", (long long)e, got, ex[t][e], bd[t][e], hint);
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
