/* SPDX-License-Identifier: MIT */
/* run.c: one case through a kernel under test, isolated: the kernel runs in a forked child
 * with a time limit; its outputs live in shared mappings with PROT_NONE guard pages before
 * and after and canary-filled gaps between the data and the guards, and are prefilled with
 * a signalling-NaN pattern so that an element never written is seen. A crash, a hang, a
 * nonzero status or a write outside the outputs fails the case with its reason. */
/* MAP_ANONYMOUS is not POSIX (the build sets _POSIX_C_SOURCE). */
#define _DEFAULT_SOURCE 1
#include <errno.h>
#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "conform/conform.h"
#include "core/internal.h"

/* Canary bytes on each side of an output's data (the gap before the data is exactly
 * this; the gap after runs to the end of the page, at least this). */
#define GAP_BYTES 64
#define CANARY 0xA5
/* P is requested only up to this many elements (the oracle and bound hold it in binary64). */
#define MAX_P_ELEMS ((int64_t)1 << 20)

typedef struct guarded {
    unsigned char *map; /* [guard page][body][guard page] */
    size_t map_len, body_len;
    unsigned char *data; /* body + GAP_BYTES */
    size_t bytes;
} guarded;

/* Where the child was: loading the plugin, in its precision hook, in the kernel. */
enum { IN_LOAD = 1, IN_PRECISION = 2, IN_KERNEL = 3 };

/* What the child leaves for the parent (a shared page). */
typedef struct child_report {
    volatile int stage;     /* IN_LOAD, IN_PRECISION, IN_KERNEL */
    volatile int returned;  /* the entry point returned */
    volatile int status;    /* its return value */
    volatile int rerun;     /* the second run returned 0 into the second buffers */
    volatile int threads;   /* the threads of the two runs (1, 2), or 0: the plugin's own */
    volatile int split;     /* split-KV runs: 0 not run, 1 a part failed, 2 both returned 0 */
    volatile int fault_sig; /* SIGSEGV / SIGBUS caught, with its address */
    void *volatile fault_addr;
    smattn_precision pm; /* the model for this problem (the hook's, or info.precision) */
    char err[256];       /* loading failed: why */
    char changed[96];    /* the first input the kernel's calls changed ("": none) */
} child_report;

static child_report *g_report; /* the child's view, for its signal handler */

static size_t page_size(void)
{
    long p = sysconf(_SC_PAGESIZE);
    return p > 0 ? (size_t)p : 4096;
}

static int guarded_alloc(guarded *g, size_t bytes)
{
    size_t ps = page_size();
    memset(g, 0, sizeof *g);
    g->bytes = bytes;
    g->body_len = (bytes + 2 * GAP_BYTES + ps - 1) / ps * ps;
    g->map_len = g->body_len + 2 * ps;
    void *m = mmap(NULL, g->map_len, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    if (m == MAP_FAILED)
        return -1;
    g->map = m;
    if (mprotect(g->map, ps, PROT_NONE) || mprotect(g->map + ps + g->body_len, ps, PROT_NONE)) {
        munmap(g->map, g->map_len);
        g->map = NULL;
        return -1;
    }
    memset(g->map + ps, CANARY, g->body_len);
    g->data = g->map + ps + GAP_BYTES;
    return 0;
}

static void guarded_free(guarded *g)
{
    if (g->map)
        munmap(g->map, g->map_len);
    g->map = NULL;
}

/* Where a fault address lies relative to an output, as text; 0 if not near it. */
static int describe_addr(const guarded *g, const char *name, const void *addr, char *out,
                         size_t cap)
{
    const unsigned char *a = addr;
    if (!g->map || a < g->map || a >= g->map + g->map_len)
        return 0;
    if (a < g->data)
        snprintf(out, cap, "%zu bytes before %s", (size_t)(g->data - a), name);
    else if (a >= g->data + g->bytes)
        snprintf(out, cap, "%zu bytes past the end of %s", (size_t)(a - (g->data + g->bytes)),
                 name);
    else
        snprintf(out, cap, "inside %s", name);
    return 1;
}

/* The first canary byte changed, as text; 0 if all intact. */
static int check_canaries(const guarded *g, const char *name, char *out, size_t cap)
{
    size_t ps = page_size();
    const unsigned char *body = g->map + ps, *end = body + g->body_len;
    for (const unsigned char *p = body; p < g->data; p++)
        if (*p != CANARY) {
            snprintf(out, cap, "wrote outside its outputs: %zu bytes before %s",
                     (size_t)(g->data - p), name);
            return 1;
        }
    for (const unsigned char *p = g->data + g->bytes; p < end; p++)
        if (*p != CANARY) {
            snprintf(out, cap,
                     "wrote outside its outputs: %zu bytes past the end of %s "
                     "(a %zu-byte buffer)",
                     (size_t)(p - (g->data + g->bytes)), name, g->bytes);
            return 1;
        }
    return 0;
}

/* A signalling NaN per dtype, the prefill of every output. */
static void fill_pattern(void *data, smattn_dtype t, int64_t n)
{
    for (int64_t e = 0; e < n; e++)
        switch (t) {
        case SMATTN_F64: {
            uint64_t b = 0x7ff4a5a5a5a5a5a5u;
            memcpy((char *)data + 8 * e, &b, 8);
            break;
        }
        case SMATTN_F32: {
            uint32_t b = 0x7fa5a5a5u;
            memcpy((char *)data + 4 * e, &b, 4);
            break;
        }
        case SMATTN_F16: {
            uint16_t b = 0x7d5a;
            memcpy((char *)data + 2 * e, &b, 2);
            break;
        }
        default: {
            uint16_t b = 0x7fa5;
            memcpy((char *)data + 2 * e, &b, 2);
            break;
        }
        }
}

static int is_pattern(const void *data, smattn_dtype t, int64_t e)
{
    size_t es = smattn_dtype_size(t);
    unsigned char want[8];
    fill_pattern(want, t, 1);
    return memcmp((const char *)data + (size_t)e * es, want, es) == 0;
}

static void on_fault(int sig, siginfo_t *si, void *uc)
{
    (void)uc;
    if (g_report) {
        g_report->fault_sig = sig;
        g_report->fault_addr = si ? si->si_addr : NULL;
    }
    signal(sig, SIG_DFL);
    raise(sig);
}

static double now_seconds(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

/* The dtype used for a tensor: the case's wish if the kernel takes it, else F32, F16,
 * BF16, F64 in that order; -1 if none. */
static int pick_dtype(unsigned accepted, smattn_dtype want)
{
    if (accepted & SMATTN_DTYPE_BIT(want))
        return (int)want;
    static const smattn_dtype order[4] = {SMATTN_F32, SMATTN_F16, SMATTN_BF16, SMATTN_F64};
    for (int k = 0; k < 4; k++)
        if (accepted & SMATTN_DTYPE_BIT(order[k]))
            return (int)order[k];
    return -1;
}

/* The sequence element e of output t (0 O, 1 LSE, as the kernel was handed them) is in. */
static int64_t seq_of(const smattn_problem *kp, int t, int64_t e)
{
    const smattn_layout *L = kp->layout;
    if (!L || !L->cu_seqlens_q)
        return t ? e / (kp->Hq * kp->S) : e / (kp->S * kp->Hq * kp->Dv);
    const int64_t total = L->cu_seqlens_q[kp->B];
    int64_t row = t ? e % (total ? total : 1) : e / (kp->Hq * kp->Dv), b = 0;
    while (b + 1 < kp->B && L->cu_seqlens_q[b + 1] <= row)
        b++;
    return b;
}

static void fill_shape(conform_result *r, const smattn_problem *p)
{
    int64_t s[7] = {p->B, p->S, p->T, p->Hq, p->Hkv, p->D, p->Dv};
    memcpy(r->shape, s, sizeof s);
}

/* Why the kernel does not claim case c; NULL if it does. */
static const char *unclaimed(const conform_kernel *k, const conform_case *c, char *buf, size_t cap)
{
    const smattn_plugin_info *info = &k->info;
    if (c->prob.op == SMATTN_OP_SOFTMAX && !k->has_softmax)
        return "the softmax op (smattn_plugin_softmax not exported)";
    uint32_t missing = c->caps & ~info->caps;
    if (missing) {
        char names[256];
        conform_caps_str(missing, names, sizeof names);
        snprintf(buf, cap, "uses %s, not claimed", names);
        return buf;
    }
    if (info->max_head_dim && (c->prob.D > info->max_head_dim || c->prob.Dv > info->max_head_dim)) {
        snprintf(buf, cap, "head dim %lld over the kernel's max_head_dim %lld",
                 (long long)(c->prob.D > c->prob.Dv ? c->prob.D : c->prob.Dv),
                 (long long)info->max_head_dim);
        return buf;
    }
    if (c->kv_dtype != SMATTN_F32 && !(info->kv_dtypes & SMATTN_DTYPE_BIT(c->kv_dtype))) {
        snprintf(buf, cap, "K and V in %s, not claimed", smattn_dtype_name(c->kv_dtype));
        return buf;
    }
    if (c->q_dtype != SMATTN_F32 && !(info->q_dtypes & SMATTN_DTYPE_BIT(c->q_dtype))) {
        snprintf(buf, cap, "%s in %s, not claimed", c->prob.op == SMATTN_OP_SOFTMAX ? "X" : "Q",
                 smattn_dtype_name(c->q_dtype));
        return buf;
    }
    if (c->out_dtype != SMATTN_F32 && !(info->out_dtypes & SMATTN_DTYPE_BIT(c->out_dtype))) {
        snprintf(buf, cap, "outputs in %s, not claimed", smattn_dtype_name(c->out_dtype));
        return buf;
    }
    return NULL;
}

/* A failed case with descales (SPEC 2.9): if the outputs pass as those of the problem with
 * one tensor's factors left out (taken as 1), the reason says so first. */
static void descale_hint(const conform_inst *m, const smattn_outputs *out,
                         const smattn_precision *pm, unsigned flags, int strided,
                         const conform_sample *sample, conform_result *r)
{
    static const char which[3] = {'q', 'k', 'v'};
    static const char *const names[3] = {"Q", "K", "V"};
    for (int t = 0; t < 3; t++) {
        conform_inst alt;
        if (conform_inst_real_forget(m, which[t], &alt))
            return;
        conform_result *ar = malloc(sizeof *ar);
        if (!ar) {
            conform_inst_free(&alt);
            return;
        }
        memset(ar, 0, sizeof *ar);
        conform_judge_rows(&alt.prob, &alt.in, out, pm, flags, strided, sample, ar);
        conform_inst_free(&alt);
        int follows = ar->status == CONFORM_PASS;
        free(ar);
        if (!follows)
            continue;
        char first[380]; /* the judge's sentence, cut to leave room for the hint */
        memcpy(first, r->reason, sizeof first - 1);
        first[sizeof first - 1] = '\0';
        snprintf(r->reason, sizeof r->reason,
                 "descale: the outputs follow the %s descale left out (every factor 1), not "
                 "the problem's; %s",
                 names[t], first);
        return;
    }
}

void conform_run_case(const conform_kernel *k, const conform_case *c, double timeout,
                      int capture_fd, conform_result *r)
{
    conform_run_case_rows(k, c, timeout, capture_fd, NULL, r);
}

void conform_run_case_rows(const conform_kernel *k, const conform_case *c, double timeout,
                           int capture_fd, const conform_sample *sample, conform_result *r)
{
    memset(r, 0, sizeof *r);
    snprintf(r->name, sizeof r->name, "%s", c->name);
    snprintf(r->category, sizeof r->category, "%s", c->category);
    r->caps = c->caps;
    fill_shape(r, &c->prob);
    char why[300];
    const char *skip = unclaimed(k, c, why, sizeof why);
    if (skip) {
        r->status = CONFORM_SKIP;
        snprintf(r->reason, sizeof r->reason, "%s", skip);
        return;
    }
    int qdt = pick_dtype(k->info.q_dtypes, c->q_dtype);
    int kvdt = pick_dtype(k->info.kv_dtypes, c->kv_dtype);
    int odt = pick_dtype(k->info.out_dtypes, c->out_dtype);
    if (conform_case_dtype_fits(c, (smattn_dtype)qdt, (smattn_dtype)kvdt, r->reason,
                                sizeof r->reason)) {
        r->status = CONFORM_SKIP;
        return;
    }
    conform_inst m;
    /* From here on, a case the checker cannot run fails: a skip says the kernel did not
     * claim it, and a run whose forks fail (a plugin's processes filling the process
     * table) must not read as a kernel that passed what it claims. */
    if (conform_case_materialise(c, (smattn_dtype)qdt, (smattn_dtype)kvdt, k->info.empty_rows,
                                 k->info.empty_lse, &m)) {
        r->status = CONFORM_FAIL;
        snprintf(r->reason, sizeof r->reason,
                 "could not run: the checker ran out of memory preparing the case");
        return;
    }
    const smattn_problem *p = &m.prob;
    /* a layout case: the kernel is handed the problem laid out (kp, kin), and judged as the
     * dense twin (p, m.in) */
    conform_inst lm;
    memset(&lm, 0, sizeof lm);
    if (c->has_layout && conform_case_lay_out(c, &m, &lm)) {
        r->status = CONFORM_FAIL;
        snprintf(r->reason, sizeof r->reason,
                 "could not run: the checker ran out of memory preparing the case");
        conform_inst_free(&m);
        return;
    }
    const smattn_problem *kp = c->has_layout ? &lm.prob : p;
    const smattn_inputs *kin = c->has_layout ? &lm.in : &m.in;
    int att = p->op == SMATTN_OP_ATTENTION;
    /* O and LSE rows: B S, or total_q of packed queries */
    const int64_t rows_q = kp->layout && kp->layout->cu_seqlens_q ? kp->layout->cu_seqlens_q[p->B]
                                                                  : p->B * p->S;
    int64_t n[3] = {att ? rows_q * p->Hq * p->Dv : 0,
                    (k->info.caps & SMATTN_CAP_LSE) ? p->Hq * rows_q : 0,
                    (!att || (k->info.caps & SMATTN_CAP_P)) ? p->B * p->Hq * p->S * p->T : 0};
    if (att && n[2] > MAX_P_ELEMS)
        n[2] = 0;
    static const char *const names[3] = {"O", "LSE", "P"};
    static const char roles[3] = {'o', 'l', 'p'};
    /* g: the outputs judged; g2: a second run's, compared bit for bit (determinism) */
    guarded g[3], g2[3];
    memset(g, 0, sizeof g);
    memset(g2, 0, sizeof g2);
    smattn_outputs out, out2;
    memset(&out, 0, sizeof out);
    memset(&out2, 0, sizeof out2);
    smattn_out_tensor *ot[3] = {&out.o, &out.lse, &out.p};
    smattn_out_tensor *ot2[3] = {&out2.o, &out2.lse, &out2.p};
    size_t es = smattn_dtype_size((smattn_dtype)odt);
    child_report *rep =
        mmap(NULL, page_size(), PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    int ok = rep != MAP_FAILED;
    for (int t = 0; t < 3 && ok; t++) {
        if (!n[t])
            continue;
        if (guarded_alloc(&g[t], (size_t)n[t] * es) || guarded_alloc(&g2[t], (size_t)n[t] * es)) {
            ok = 0;
            break;
        }
        fill_pattern(g[t].data, (smattn_dtype)odt, n[t]);
        fill_pattern(g2[t].data, (smattn_dtype)odt, n[t]);
        ot[t]->data = g[t].data;
        ot[t]->dtype = (smattn_dtype)odt;
        smattn_contiguous_strides(kp, roles[t], ot[t]->stride);
        *ot2[t] = *ot[t];
        ot2[t]->data = g2[t].data;
    }
    /* split-KV (SPEC 9.6): the keys [0, t) and [t, T) as two problems of their own (K and V
     * from key t on for the second), each writing O and LSE */
    const int64_t t_split = att && (!sample || sample->k <= 0) && c->split_at > 0 &&
                                    c->split_at < p->T && n[1] && !conform_inst_quantised(&m)
                                ? c->split_at
                                : 0;
    guarded gs[2][2];
    memset(gs, 0, sizeof gs);
    smattn_problem sp[2];
    smattn_inputs sin[2];
    smattn_outputs sout[2];
    memset(sout, 0, sizeof sout);
    for (int q = 0; t_split && q < 2 && ok; q++) {
        sp[q] = *p;
        sin[q] = m.in;
        sp[q].T = q ? p->T - t_split : t_split;
        if (q) {
            sin[q].k.data = (const unsigned char *)m.in.k.data +
                            (size_t)(t_split * m.in.k.stride[1]) * smattn_dtype_size(m.in.k.dtype);
            sin[q].v.data = (const unsigned char *)m.in.v.data +
                            (size_t)(t_split * m.in.v.stride[1]) * smattn_dtype_size(m.in.v.dtype);
        }
        for (int u = 0; u < 2 && ok; u++) {
            if (guarded_alloc(&gs[q][u], (size_t)n[u] * es)) {
                ok = 0;
                break;
            }
            fill_pattern(gs[q][u].data, (smattn_dtype)odt, n[u]);
            smattn_out_tensor *o = u ? &sout[q].lse : &sout[q].o;
            o->data = gs[q][u].data;
            o->dtype = (smattn_dtype)odt;
            smattn_contiguous_strides(&sp[q], roles[u], o->stride);
        }
    }
    if (!ok) {
        r->status = CONFORM_FAIL;
        snprintf(r->reason, sizeof r->reason,
                 "could not run: the checker cannot map the output buffers: %s", strerror(errno));
        goto done;
    }
    memset(rep, 0, sizeof *rep);
    conform_capture_reset(capture_fd);
    sigset_t old;
    double t0 = now_seconds();
    pid_t pid = conform_child_fork(capture_fd, &old);
    if (pid < 0) {
        r->status = CONFORM_FAIL;
        snprintf(r->reason, sizeof r->reason,
                 "could not run: the checker cannot start the case's process (fork: %s)",
                 strerror(errno));
        goto done;
    }
    if (pid == 0) {
        g_report = rep;
        struct sigaction sa;
        memset(&sa, 0, sizeof sa);
        sa.sa_sigaction = on_fault;
        sa.sa_flags = SA_SIGINFO;
        sigaction(SIGSEGV, &sa, NULL);
        sigaction(SIGBUS, &sa, NULL);
        alarm((unsigned)ceil(timeout) + 2); /* a backstop; the parent kills on time */
        rep->stage = IN_LOAD;
        conform_entry e;
        if (conform_kernel_bind(k, &e, rep->err, sizeof rep->err))
            _exit(0);
        rep->stage = IN_PRECISION;
        rep->pm = e.precision ? e.precision(kp) : k->info.precision;
        conform_hashes ih; /* the inputs, which the call must leave as they are (inputs.c) */
        conform_hashes_inputs(&ih, kp, kin);
        rep->stage = IN_KERNEL;
        smattn_plugin_run_fn fn = att ? e.attention : e.softmax;
        /* twice, on 1 thread and then 2 when the plugin takes a thread count: the second
         * run's bits are compared with the first's (SMATTN_CAP_DETERMINISTIC) */
        int th = e.threads && e.threads(1) == 0;
        rep->status = fn ? fn(kp, kin, &out) : SMATTN_ERR_UNSUPPORTED;
        rep->returned = 1;
        if (rep->status == 0) {
            th = th && e.threads(2) == 0;
            rep->threads = th;
            rep->rerun = fn(kp, kin, &out2) == 0;
        }
        if (rep->status == 0 && t_split) /* split-KV: the two parts */
            rep->split = 1 + (fn(&sp[0], &sin[0], &sout[0]) == 0 &&
                              fn(&sp[1], &sin[1], &sout[1]) == 0);
        const char *chg = conform_hashes_changed(&ih); /* after every call of the kernel */
        if (chg)
            snprintf(rep->changed, sizeof rep->changed, "%s changed during the call", chg);
        _exit(0); /* no destructors, no atexit handlers of the plugin */
    }
    int ws = 0;
    int hung = conform_child_finish(pid, timeout, &old, &ws);
    r->seconds = now_seconds() - t0;
    conform_capture_read(capture_fd, r->output, sizeof r->output);
    r->status = CONFORM_FAIL;
    static const char *const where_in[4] = {"", "loading the plugin (its constructors)",
                                            "smattn_plugin_precision", "the kernel"};
    int stage = rep->stage >= IN_LOAD && rep->stage <= IN_KERNEL ? rep->stage : IN_LOAD;
    if (hung) {
        if (stage == IN_KERNEL)
            snprintf(r->reason, sizeof r->reason,
                     "hang: the kernel did not return within %.3g s (killed)", timeout);
        else
            snprintf(r->reason, sizeof r->reason, "hang: %s did not finish within %.3g s (killed)",
                     where_in[stage], timeout);
        goto done;
    }
    if (WIFSIGNALED(ws)) {
        int sig = WTERMSIG(ws);
        char where[160] = "";
        for (int t = 0; t < 3 && rep->fault_sig && stage == IN_KERNEL; t++)
            if (describe_addr(&g[t], names[t], rep->fault_addr, where + 2, sizeof where - 2)) {
                memcpy(where, ": ", 2);
                break;
            }
        if (sig == SIGALRM)
            snprintf(r->reason, sizeof r->reason, "hang: the kernel hit the time limit (%.3g s)",
                     timeout);
        else if (where[0])
            snprintf(r->reason, sizeof r->reason,
                     "wrote outside its outputs: crashed with signal %d (%s) at an address "
                     "in a guard page%s",
                     sig, strsignal(sig), where);
        else if (stage != IN_KERNEL)
            snprintf(r->reason, sizeof r->reason, "crash: %s died with signal %d (%s)",
                     where_in[stage], sig, strsignal(sig));
        else
            snprintf(r->reason, sizeof r->reason, "crash: the kernel died with signal %d (%s)%s",
                     sig, strsignal(sig), rep->fault_sig ? " (a bad address)" : "");
        goto done;
    }
    if (rep->stage == IN_LOAD && rep->err[0]) {
        rep->err[sizeof rep->err - 1] = '\0';
        snprintf(r->reason, sizeof r->reason,
                 "crash: the plugin could not be loaded in the case's process: %s", rep->err);
        goto done;
    }
    if (!rep->returned) {
        if (stage != IN_KERNEL)
            snprintf(r->reason, sizeof r->reason,
                     "crash: %s exited with status %d (a sanitizer report or an exit() "
                     "there?)",
                     where_in[stage], WIFEXITED(ws) ? WEXITSTATUS(ws) : -1);
        else
            snprintf(r->reason, sizeof r->reason,
                     "crash: the kernel's process exited with status %d without returning "
                     "(a sanitizer report or an exit() in the kernel?)",
                     WIFEXITED(ws) ? WEXITSTATUS(ws) : -1);
        goto done;
    }
    for (int t = 0; t < 3; t++)
        if (n[t] && (check_canaries(&g[t], names[t], r->reason, sizeof r->reason) ||
                     check_canaries(&g2[t], names[t], r->reason, sizeof r->reason)))
            goto done;
    if (rep->changed[0]) { /* whatever it returned: the caller's tensors are not the kernel's */
        rep->changed[sizeof rep->changed - 1] = '\0';
        conform_inputs_reason(r->reason, sizeof r->reason, rep->changed);
        goto done;
    }
    if (rep->status == SMATTN_ERR_UNSUPPORTED) {
        r->status = CONFORM_SKIP;
        snprintf(r->reason, sizeof r->reason, "the kernel declined it (SMATTN_ERR_UNSUPPORTED)");
        goto done;
    }
    if (rep->status != 0) {
        snprintf(r->reason, sizeof r->reason, "the kernel returned status %d (%s)", rep->status,
                 smattn_status_name((smattn_status)rep->status));
        goto done;
    }
    for (int t = 0; t < 3; t++)
        for (int64_t e = 0; e < n[t]; e++)
            if (is_pattern(g[t].data, (smattn_dtype)odt, e)) {
                snprintf(r->reason, sizeof r->reason,
                         "%s element %lld was never written (it still holds the prefill pattern)",
                         names[t], (long long)e);
                if (c->has_layout && t < 2) {
                    char what[320];
                    conform_layout_describe(kp, seq_of(kp, t, e), -1, what, sizeof what);
                    conform_reason_append(r, what);
                }
                goto done;
            }
    smattn_precision pm = rep->pm;
    r->pm = pm;
    r->has_pm = 1;
    char perr[400];
    if (conform_precision_check(&pm, "smattn_plugin_precision", perr, sizeof perr)) {
        snprintf(r->reason, sizeof r->reason, "%s", perr);
        goto done;
    }
    /* the second run: the same bits, byte for byte (a NaN's payload included) */
    char diff[160] = "";
    if (rep->rerun) {
        r->rerun = 1;
        for (int t = 0; t < 3 && r->rerun == 1; t++)
            for (int64_t e = 0; e < n[t]; e++)
                if (memcmp((const char *)g[t].data + (size_t)e * es,
                           (const char *)g2[t].data + (size_t)e * es, es)) {
                    r->rerun = -1;
                    snprintf(diff, sizeof diff, "%s element %lld differs between two runs%s",
                             names[t], (long long)e,
                             rep->threads ? " (on 1 thread and on 2)" : "");
                    break;
                }
    }
    double secs = r->seconds;
    const unsigned flags = (k->info.caps & SMATTN_CAP_SINK_IN_MAX) ? SMATTN__BOUND_SINK_IN_MAX : 0u;
    /* quantised inputs (SPEC 2.9): judged as the binary64 twin holding the real values */
    conform_inst tw;
    memset(&tw, 0, sizeof tw);
    if (!c->has_layout && conform_inst_quantised(&m) && conform_inst_real(&m, &tw)) {
        snprintf(r->reason, sizeof r->reason,
                 "could not run: the checker ran out of memory decoding the quantised inputs");
        goto done;
    }
    if (c->has_layout)
        conform_judge_layout(p, &m.in, kp, &out, &pm, flags, c->strided, sample, r);
    else if (tw.prob.B) {
        conform_judge_rows(&tw.prob, &tw.in, &out, &pm, flags, c->strided, sample, r);
        if (r->status == CONFORM_FAIL && m.prob.descale)
            descale_hint(&m, &out, &pm, flags, c->strided, sample, r);
    } else
        conform_judge_rows(p, &m.in, &out, &pm, flags, c->strided, sample, r); /* keeps output */
    conform_inst_free(&tw);
    r->seconds = secs;
    if (t_split && r->status == CONFORM_PASS) {
        if (rep->split != 2) {
            r->status = CONFORM_FAIL;
            snprintf(r->reason, sizeof r->reason,
                     "split-KV: the kernel did not return 0 on the keys [0, %lld) or [%lld, %lld) "
                     "as problems of their own",
                     (long long)t_split, (long long)t_split, (long long)p->T);
        }
        for (int q = 0; q < 2 && r->status == CONFORM_PASS; q++)
            for (int u = 0; u < 2 && r->status == CONFORM_PASS; u++) {
                if (check_canaries(&gs[q][u], names[u], r->reason, sizeof r->reason)) {
                    r->status = CONFORM_FAIL;
                    break;
                }
                for (int64_t e = 0; e < n[u]; e++)
                    if (is_pattern(gs[q][u].data, (smattn_dtype)odt, e)) {
                        r->status = CONFORM_FAIL;
                        snprintf(r->reason, sizeof r->reason,
                                 "split-KV: %s element %lld of the keys %s was never written",
                                 names[u], (long long)e, q ? "[t, T)" : "[0, t)");
                        break;
                    }
            }
        if (r->status == CONFORM_PASS)
            conform_judge_split(p, &m.in, &out, sp, sin, sout, &pm, flags, t_split, r);
    }
    if (r->rerun == -1 && (k->info.caps & SMATTN_CAP_DETERMINISTIC) && r->status != CONFORM_FAIL) {
        r->status = CONFORM_FAIL;
        snprintf(r->reason, sizeof r->reason,
                 "not deterministic: %s, although the kernel claims SMATTN_CAP_DETERMINISTIC", diff);
    }
done:
    for (int t = 0; t < 3; t++)
        guarded_free(&g[t]), guarded_free(&g2[t]);
    for (int q = 0; q < 2; q++)
        guarded_free(&gs[q][0]), guarded_free(&gs[q][1]);
    if (rep != MAP_FAILED)
        munmap(rep, page_size());
    conform_inst_free(&lm);
    conform_inst_free(&m);
}
