/* SPDX-License-Identifier: MIT */
/* plugin.c: load a kernel under test: a .so speaking include/smattn_kernel.h, opened and
 * described in a child process (isolate.c) whose answer comes back by value over a pipe,
 * or the built-in optimised kernel through the same table; and check what it claims. */
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <setjmp.h>
#include <signal.h>
#include <stddef.h>
#include <stdio.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "conform/conform.h"

/* The smallest info a version-1 plugin may fill: every field up to the precision model. */
#define INFO_V1_SIZE (offsetof(smattn_plugin_info, precision) + sizeof(smattn_precision))

/* A data pointer from dlsym as a function pointer (POSIX guarantees this works). */
#define SYM_AS(type, h, name, out)                                                                 \
    do {                                                                                           \
        void *sym_ = dlsym((h), (name));                                                           \
        memcpy(&(out), &sym_, sizeof(out));                                                        \
    } while (0)

int conform_precision_check(const smattn_precision *pm, const char *who, char *err, size_t errlen)
{
    if (!(pm->u_score > 0 && pm->u_score < 1) || !(pm->u_acc > 0 && pm->u_acc < 1) ||
        !(pm->exp_ulps >= 0) || !isfinite(pm->exp_ulps) || !(pm->u_p >= 0 && pm->u_p < 1) ||
        pm->blocks < 1 || pm->acc_len < 0 || !(pm->tiny >= 0) || !isfinite(pm->tiny)) {
        snprintf(err, errlen,
                 "%s: precision model out of range (u_score %g, u_acc %g, exp_ulps %g, u_p %g, "
                 "blocks %lld, acc_len %lld, tiny %g; SPEC 6.1)",
                 who, pm->u_score, pm->u_acc, pm->exp_ulps, pm->u_p, (long long)pm->blocks,
                 (long long)pm->acc_len, pm->tiny);
        return -1;
    }
    return 0;
}

/* Copy and check the info a plugin described. */
static int take_info(conform_kernel *k, const smattn_plugin_info *info, const char *who, char *err,
                     size_t errlen)
{
    if (!info) {
        snprintf(err, errlen, "%s: smattn_plugin_describe returned NULL", who);
        return -1;
    }
    if (info->abi_version != SMATTN_PLUGIN_ABI_VERSION) {
        snprintf(err, errlen,
                 "%s: built against plugin ABI version %u; this smattn speaks version %u "
                 "(rebuild it against include/smattn_kernel.h)",
                 who, info->abi_version, SMATTN_PLUGIN_ABI_VERSION);
        return -1;
    }
    if (info->struct_size < INFO_V1_SIZE) {
        snprintf(err, errlen, "%s: info struct_size %u is smaller than ABI version 1's %zu", who,
                 info->struct_size, (size_t)INFO_V1_SIZE);
        return -1;
    }
    if (info != &k->info) {
        memset(&k->info, 0, sizeof k->info);
        memcpy(&k->info, info,
               info->struct_size < sizeof k->info ? info->struct_size : sizeof k->info);
        snprintf(k->name, sizeof k->name, "%s", info->name ? info->name : "(unnamed)");
        snprintf(k->version, sizeof k->version, "%s", info->version ? info->version : "");
    }
    k->info.name = k->name;
    k->info.version = k->version;
    if ((unsigned)info->empty_rows > SMATTN_EMPTY_MEAN ||
        (unsigned)info->empty_lse > SMATTN_LSE_ZERO) {
        snprintf(err, errlen, "%s: unknown empty-row convention (empty_rows %d, empty_lse %d)", who,
                 (int)info->empty_rows, (int)info->empty_lse);
        return -1;
    }
    unsigned floats = SMATTN_DTYPE_BIT(SMATTN_F64) | SMATTN_DTYPE_BIT(SMATTN_F32) |
                      SMATTN_DTYPE_BIT(SMATTN_F16) | SMATTN_DTYPE_BIT(SMATTN_BF16);
    if (!(info->q_dtypes & floats) || !(info->kv_dtypes & floats) || !(info->out_dtypes & floats)) {
        snprintf(err, errlen,
                 "%s: claims no float dtype for Q, K/V or the outputs "
                 "(q_dtypes 0x%x, kv_dtypes 0x%x, out_dtypes 0x%x)",
                 who, info->q_dtypes, info->kv_dtypes, info->out_dtypes);
        return -1;
    }
    const uint32_t blocks = SMATTN_DTYPE_BIT(SMATTN_Q8_0) | SMATTN_DTYPE_BIT(SMATTN_Q4_0);
    if (info->q_dtypes & blocks) { /* no case would ever hand them over: say so */
        snprintf(err, errlen,
                 "%s: claims q8_0 or q4_0 for Q (q_dtypes 0x%x); SPEC 2.9 has the block "
                 "formats for K and V only (kv_dtypes)",
                 who, info->q_dtypes);
        return -1;
    }
    uint32_t known = ((SMATTN_CAP_PAGED_HND << 1) - 1u) | /* bits 0-19, 20-25 */
                     SMATTN_CAP_DESCALE_TENSOR | SMATTN_CAP_DESCALE_HEAD |
                     SMATTN_CAP_ALIBI_SYMMETRIC | SMATTN_CAP_ALIBI_ONE_SIDED | SMATTN_CAP_ALIBI_MASK |
                     SMATTN_CAP_BACKWARD_DETERMINISTIC | SMATTN_CAP_BACKWARD_DBIAS |
                     SMATTN_CAP_BACKWARD_DSINKS;
    if (info->caps & ~known) {
        snprintf(err, errlen,
                 "%s: unknown capability bits 0x%x (built against a newer smattn_kernel.h?)", who,
                 (unsigned)(info->caps & ~known));
        return -1;
    }
    if (info->max_head_dim < 0) {
        snprintf(err, errlen, "%s: max_head_dim %lld is negative", who,
                 (long long)info->max_head_dim);
        return -1;
    }
    /* The declared model is checked even when a precision hook gives each case its own:
     * it is the one the reports show, --require-precision holds to its format and the
     * baseline compares; a NaN in it would turn those comparisons off. */
    char perr[400];
    if (conform_precision_check(&k->info.precision, "", perr, sizeof perr)) {
        snprintf(err, errlen, "%s: info->precision%s", who, perr);
        return -1;
    }
    return 0;
}

/* ---- the describe child ------------------------------------------------------------------ */

/* What the describe child sends back: the info by value (its pointers cleared), its
 * strings copied, or the problem it met. */
typedef struct desc_msg {
    char err[400];
    smattn_plugin_info info;
    char name[64], version[64];
    int has_softmax, has_precision;
    int has_merge;
    int has_backward;
} desc_msg;

/* Stages the child announces on the pipe before the message, so that a crash or hang is
 * attributed: loading (dlopen runs the constructors), describe, reading the info. */
enum { STAGE_LOAD = 'L', STAGE_DESCRIBE = 'D', STAGE_READ = 'R', STAGE_PRECISION = 'P',
       STAGE_DONE = 'M' };

static sigjmp_buf g_probe_jmp;

static void on_probe_fault(int sig)
{
    siglongjmp(g_probe_jmp, sig);
}

/* Copy n bytes from src, which the plugin gave and may be any pointer: 0, or -1 if it is
 * not readable (the fault caught). Runs in the describe child only. */
static int probe_copy(void *dst, const void *src, size_t n)
{
    struct sigaction sa, old_segv, old_bus;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_probe_fault;
    sigaction(SIGSEGV, &sa, &old_segv);
    sigaction(SIGBUS, &sa, &old_bus);
    volatile int rc = 0;
    if (sigsetjmp(g_probe_jmp, 1)) {
        rc = -1;
    } else {
        const volatile unsigned char *s = src;
        unsigned char *d = dst;
        for (size_t k = 0; k < n; k++)
            d[k] = s[k];
    }
    sigaction(SIGSEGV, &old_segv, NULL);
    sigaction(SIGBUS, &old_bus, NULL);
    return rc;
}

/* A string of the plugin into out[cap]: 0, -1 unreadable, -2 no NUL within cap bytes. */
static int probe_string(const char *src, char *out, size_t cap)
{
    for (size_t k = 0; k < cap; k++) {
        if (probe_copy(&out[k], src + k, 1))
            return -1;
        if (!out[k])
            return 0;
    }
    out[cap - 1] = '\0';
    return -2;
}

static void put_all(int fd, const void *buf, size_t n)
{
    const char *p = buf;
    while (n) {
        ssize_t w = write(fd, p, n);
        if (w < 0 && errno == EINTR)
            continue;
        if (w <= 0)
            return;
        p += w;
        n -= (size_t)w;
    }
}

static void stage(int fd, char s)
{
    put_all(fd, &s, 1);
}

/* The describe child's work: never returns. */
static void describe_child(const char *path, int fd)
{
    static desc_msg m;
    memset(&m, 0, sizeof m);
    stage(fd, STAGE_LOAD);
    dlerror();
    void *h = dlopen(path, RTLD_NOW | RTLD_LOCAL);
    if (!h) {
        const char *e = dlerror();
        snprintf(m.err, sizeof m.err, "%s", e ? e : "dlopen failed");
    } else {
        smattn_plugin_describe_fn describe;
        smattn_plugin_run_fn att, sm;
        smattn_plugin_precision_fn prec;
        SYM_AS(smattn_plugin_describe_fn, h, SMATTN_PLUGIN_DESCRIBE_SYMBOL, describe);
        SYM_AS(smattn_plugin_run_fn, h, SMATTN_PLUGIN_ATTENTION_SYMBOL, att);
        SYM_AS(smattn_plugin_run_fn, h, SMATTN_PLUGIN_SOFTMAX_SYMBOL, sm);
        SYM_AS(smattn_plugin_precision_fn, h, SMATTN_PLUGIN_PRECISION_SYMBOL, prec);
        m.has_softmax = sm != NULL;
        m.has_precision = prec != NULL;
        void *mg = dlsym(h, SMATTN_PLUGIN_MERGE_SYMBOL);
        m.has_merge = mg != NULL;
        m.has_backward = dlsym(h, SMATTN_PLUGIN_BACKWARD_SYMBOL) != NULL;
        const char *missing = !describe ? SMATTN_PLUGIN_DESCRIBE_SYMBOL
                              : !att    ? SMATTN_PLUGIN_ATTENTION_SYMBOL
                                        : NULL;
        if (missing) {
            snprintf(m.err, sizeof m.err,
                     "missing symbol %s (required by the plugin ABI, smattn_kernel.h)", missing);
        } else {
            stage(fd, STAGE_DESCRIBE);
            const smattn_plugin_info *ip = describe(SMATTN_PLUGIN_ABI_VERSION);
            stage(fd, STAGE_READ);
            size_t head = offsetof(smattn_plugin_info, struct_size) + sizeof(uint32_t);
            if (!ip) {
                snprintf(m.err, sizeof m.err, "smattn_plugin_describe returned NULL");
            } else if (probe_copy(&m.info, ip, head)) {
                snprintf(m.err, sizeof m.err,
                         "smattn_plugin_describe returned %p, which is not a readable info",
                         (const void *)ip);
            } else {
                size_t n = m.info.struct_size < sizeof m.info ? m.info.struct_size : sizeof m.info;
                if (n > head && probe_copy(&m.info, ip, n))
                    snprintf(m.err, sizeof m.err,
                             "the info at %p is not readable over its struct_size %u",
                             (const void *)ip, m.info.struct_size);
                else if (n >= offsetof(smattn_plugin_info, caps)) {
                    const char *strs[2] = {m.info.name, m.info.version};
                    char *outs[2] = {m.name, m.version};
                    static const char *const which[2] = {"name", "version"};
                    for (int t = 0; t < 2 && !m.err[0]; t++) {
                        int rc = strs[t] ? probe_string(strs[t], outs[t], 64) : 0;
                        if (rc == -1)
                            snprintf(m.err, sizeof m.err, "info->%s (%p) is not a readable string",
                                     which[t], (const void *)strs[t]);
                        else if (rc == -2)
                            snprintf(m.err, sizeof m.err,
                                     "info->%s is not a NUL-terminated string of at most 63 "
                                     "bytes",
                                     which[t]);
                    }
                    if (!m.info.name)
                        snprintf(m.name, sizeof m.name, "(unnamed)");
                }
                m.info.name = m.info.version = NULL; /* never read in the parent */
            }
            if (!m.err[0] && prec) {
                /* The hook once, on a small problem, under the describe time limit: one
                 * that blocks or crashes on everything makes the kernel unloadable here
                 * instead of costing the case time limit on every case. */
                stage(fd, STAGE_PRECISION);
                smattn_problem p = smattn_problem_default();
                p.op = SMATTN_OP_ATTENTION;
                p.B = p.Hq = p.Hkv = 1;
                p.S = p.T = p.D = p.Dv = 4;
                p.scale = smattn_default_scale(4);
                (void)prec(&p);
            }
        }
    }
    stage(fd, STAGE_DONE);
    put_all(fd, &m, sizeof m);
    _exit(0); /* no destructors, no atexit handlers of the plugin */
}

/* The bytes the child sent (the pipe's write end closed everywhere by now). */
static size_t drain(int fd, char *buf, size_t cap)
{
    size_t n = 0;
    for (;;) {
        if (n == cap) {
            char sink[256];
            if (read(fd, sink, sizeof sink) <= 0)
                break;
            continue;
        }
        ssize_t r = read(fd, buf + n, cap - n);
        if (r < 0 && errno == EINTR)
            continue;
        if (r <= 0)
            break;
        n += (size_t)r;
    }
    return n;
}

int conform_kernel_open(const char *spec, double timeout, conform_kernel *k, char *err,
                        size_t errlen)
{
    memset(k, 0, sizeof *k);
    if (!spec || strcmp(spec, "builtin") == 0) {
        snprintf(k->path, sizeof k->path, "builtin");
        k->builtin = 1;
        k->has_softmax = 1;
        k->has_precision = 1;
        k->has_merge = 1;
        k->has_backward = 1;
        return take_info(k, conform_builtin_describe(SMATTN_PLUGIN_ABI_VERSION), "builtin", err,
                         errlen);
    }
    snprintf(k->path, sizeof k->path, "%s", spec);
    /* dlopen searches the library path for a bare name: make a file name explicit. */
    snprintf(k->load_path, sizeof k->load_path, "%s%s", strchr(spec, '/') ? "" : "./", spec);
    char who[1100];
    snprintf(who, sizeof who, "kernel %s cannot be loaded", spec);
    if (access(k->load_path, F_OK) != 0) {
        snprintf(err, errlen, "%s: %s: no such file", who, spec);
        return -1;
    }
    int pfd[2];
    if (pipe(pfd)) {
        snprintf(err, errlen, "%s: pipe: %s", who, strerror(errno));
        return -1;
    }
    sigset_t old;
    int capture = conform_capture_open(); /* what a constructor or describe prints */
    pid_t pid = conform_child_fork(capture, &old);
    if (pid < 0) {
        snprintf(err, errlen, "%s: fork: %s", who, strerror(errno));
        close(pfd[0]);
        close(pfd[1]);
        if (capture >= 0)
            close(capture);
        return -1;
    }
    if (pid == 0) {
        close(pfd[0]);
        describe_child(k->load_path, pfd[1]);
    }
    close(pfd[1]);
    int ws;
    int hung = conform_child_finish(pid, timeout, &old, &ws);
    char printed[200];
    conform_capture_read(capture, printed, sizeof printed);
    if (capture >= 0)
        close(capture);
    printed[strcspn(printed, "\n")] = '\0'; /* its first line: the error stays one line */
    int fl = fcntl(pfd[0], F_GETFL);
    if (fl >= 0)
        (void)fcntl(pfd[0], F_SETFL, fl | O_NONBLOCK);
    static char buf[16 + sizeof(desc_msg)];
    size_t n = drain(pfd[0], buf, sizeof buf);
    close(pfd[0]);
    /* The last stage announced, and the message if the child got that far. */
    char last = 0;
    size_t at = 0;
    while (at < n && buf[at] != STAGE_DONE)
        last = buf[at++];
    static const char *const doing[4] = {
        "loading it (dlopen runs its constructors)", "in smattn_plugin_describe",
        "reading its info", "in smattn_plugin_precision (called once on a 1x4x4x4 problem)"};
    int si = last == STAGE_DESCRIBE    ? 1
             : last == STAGE_READ      ? 2
             : last == STAGE_PRECISION ? 3
                                       : 0;
    if (at < n && n - at - 1 == sizeof(desc_msg) && !hung) {
        desc_msg m;
        memcpy(&m, buf + at + 1, sizeof m);
        m.err[sizeof m.err - 1] = m.name[sizeof m.name - 1] = m.version[sizeof m.version - 1] =
            '\0';
        if (m.err[0]) {
            snprintf(err, errlen, "%s: %s", who, m.err);
            return -1;
        }
        memcpy(k->name, m.name, sizeof k->name);
        memcpy(k->version, m.version, sizeof k->version);
        memcpy(&k->info, &m.info, sizeof k->info);
        k->has_softmax = m.has_softmax;
        k->has_precision = m.has_precision;
        k->has_merge = m.has_merge;
        k->has_backward = m.has_backward;
        return take_info(k, &k->info, who, err, errlen);
    }
    if (hung)
        snprintf(err, errlen, "%s: no answer within %g s %s (killed)", who, timeout, doing[si]);
    else if (WIFSIGNALED(ws))
        snprintf(err, errlen, "%s: its process died with signal %d (%s) %s", who, WTERMSIG(ws),
                 strsignal(WTERMSIG(ws)), doing[si]);
    else
        snprintf(err, errlen, "%s: its process exited with status %d %s", who,
                 WIFEXITED(ws) ? WEXITSTATUS(ws) : -1, doing[si]);
    size_t el = strlen(err);
    if (printed[0] && el + 20 < errlen)
        snprintf(err + el, errlen - el, "; it printed: %s", printed);
    return -1;
}

void conform_kernel_close(conform_kernel *k)
{
    (void)k; /* nothing of a plugin lives in this process */
}

int conform_kernel_bind(const conform_kernel *k, conform_entry *e, char *err, size_t errlen)
{
    memset(e, 0, sizeof *e);
    if (k->builtin) {
        e->attention = conform_builtin_attention;
        e->softmax = conform_builtin_softmax;
        e->precision = conform_builtin_precision;
        e->threads = conform_builtin_threads;
        e->merge = conform_builtin_merge;
        e->backward = conform_builtin_backward;
        return 0;
    }
    dlerror();
    void *h = dlopen(k->load_path, RTLD_NOW | RTLD_LOCAL);
    if (!h) {
        const char *m = dlerror();
        snprintf(err, errlen, "%s", m ? m : "dlopen failed");
        return -1;
    }
    SYM_AS(smattn_plugin_run_fn, h, SMATTN_PLUGIN_ATTENTION_SYMBOL, e->attention);
    SYM_AS(smattn_plugin_run_fn, h, SMATTN_PLUGIN_SOFTMAX_SYMBOL, e->softmax);
    SYM_AS(smattn_plugin_precision_fn, h, SMATTN_PLUGIN_PRECISION_SYMBOL, e->precision);
    SYM_AS(smattn_plugin_threads_fn, h, SMATTN_PLUGIN_THREADS_SYMBOL, e->threads);
    SYM_AS(smattn_plugin_merge_fn, h, SMATTN_PLUGIN_MERGE_SYMBOL, e->merge);
    SYM_AS(smattn_plugin_backward_fn, h, SMATTN_PLUGIN_BACKWARD_SYMBOL, e->backward);
    if (!e->attention) {
        snprintf(err, errlen, "missing symbol %s", SMATTN_PLUGIN_ATTENTION_SYMBOL);
        return -1;
    }
    return 0;
}
