/* SPDX-License-Identifier: MIT */
/* isolate.c: the process hygiene around plugin code. Every call into a plugin (dlopen and
 * its constructors, describe, precision, the kernel) runs in a forked child in its own
 * process group, with its stdout and stderr in a capture file of bounded size; when the
 * child ends or its time runs out, its whole group is killed, and so is every orphan left
 * to this process (a subreaper on Linux, so that grandchildren that called setsid() come
 * back to us instead of init), and all are reaped: the checker never runs plugin code,
 * never hangs on it, and leaves no process of it behind, even when the checker itself is
 * killed (SIGTERM, SIGINT, SIGHUP: a CI job's timeout, Ctrl-C) in the middle of a case. */
/* prctl and WNOWAIT need more than _POSIX_C_SOURCE. */
#define _DEFAULT_SOURCE 1
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>
#ifdef __linux__
#include <sys/prctl.h>
#endif

#include "conform/conform.h"

/* The process group of the child running plugin code now (0: none), and the terminating
 * signal the checker received while it ran (0: none). The handler kills the group at once
 * (kill is async-signal-safe) and conform_child_finish, which the main line is waiting in,
 * sweeps the orphans and dies of the signal. */
static volatile sig_atomic_t g_pgid;
static volatile sig_atomic_t g_term_sig;
static const int TERM_SIGS[3] = {SIGTERM, SIGINT, SIGHUP};

static void on_term(int sig)
{
    pid_t pg = (pid_t)g_pgid;
    g_term_sig = sig;
    if (pg > 0) {
        (void)kill(-pg, SIGKILL);
        (void)kill(pg, SIGKILL);
        return;
    }
    /* No plugin code running, no orphan left (each case sweeps its own): die of it now. */
    signal(sig, SIG_DFL);
    raise(sig);
}

static void add_term_sigs(sigset_t *set)
{
    for (int k = 0; k < 3; k++)
        sigaddset(set, TERM_SIGS[k]);
}

void conform_isolate_init(void)
{
#ifdef __linux__
    /* Orphans of plugin code are re-parented to this process, where the sweep finds them. */
    (void)prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0);
#endif
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_term;
    sigemptyset(&sa.sa_mask);
    add_term_sigs(&sa.sa_mask);
    for (int k = 0; k < 3; k++) {
        struct sigaction was;
        /* A signal ignored by whoever started us (nohup) stays ignored. */
        if (sigaction(TERM_SIGS[k], NULL, &was) == 0 && was.sa_handler == SIG_IGN)
            continue;
        sigaction(TERM_SIGS[k], &sa, NULL);
    }
}

pid_t conform_child_fork(int out_fd, sigset_t *old)
{
    fflush(NULL);
    /* SIGCHLD blocked, so that the parent can sleep in sigtimedwait until the child ends;
     * the terminating signals blocked until the child's group is recorded for on_term. */
    sigset_t chld;
    sigemptyset(&chld);
    sigaddset(&chld, SIGCHLD);
    add_term_sigs(&chld);
    sigprocmask(SIG_BLOCK, &chld, old);
    pid_t pid = fork();
    if (pid < 0) {
        sigprocmask(SIG_SETMASK, old, NULL);
        return pid;
    }
    if (pid > 0) {
        (void)setpgid(pid, pid); /* also here: no race with what the child does first */
        g_pgid = (sig_atomic_t)pid;
        sigset_t term;
        sigemptyset(&term);
        add_term_sigs(&term);
        sigprocmask(SIG_UNBLOCK, &term, NULL);
        return pid;
    }
    for (int k = 0; k < 3; k++) /* the checker's handler is not the plugin's */
        if (signal(TERM_SIGS[k], SIG_DFL) == SIG_IGN)
            signal(TERM_SIGS[k], SIG_IGN);
    sigprocmask(SIG_SETMASK, old, NULL);
    (void)setpgid(0, 0);
    int null = open("/dev/null", O_RDWR);
    if (null >= 0)
        (void)dup2(null, 0);
    int out = out_fd >= 0 ? out_fd : null;
    if (out >= 0) {
        (void)dup2(out, 1);
        (void)dup2(out, 2);
    }
    if (null > 2)
        close(null);
    /* A chatty plugin fills the capture file up to the limit, then its writes fail
     * (EFBIG, with SIGXFSZ ignored) instead of filling the disk. */
    struct rlimit rl = {CONFORM_OUTPUT_LIMIT, CONFORM_OUTPUT_LIMIT};
    (void)setrlimit(RLIMIT_FSIZE, &rl);
    signal(SIGXFSZ, SIG_IGN);
    return 0;
}

/* The processes whose parent is this one (up to cap); Linux only, else 0. */
static size_t list_children(pid_t *out, size_t cap)
{
    size_t n = 0;
#ifdef __linux__
    char path[64];
    snprintf(path, sizeof path, "/proc/self/task/%ld/children", (long)getpid());
    FILE *f = fopen(path, "r");
    if (f) {
        long v;
        while (n < cap && fscanf(f, "%ld", &v) == 1)
            out[n++] = (pid_t)v;
        fclose(f);
        return n;
    }
    /* A kernel without CONFIG_PROC_CHILDREN: every /proc/N/stat, field 4 is the parent. */
    DIR *d = opendir("/proc");
    struct dirent *de;
    while (d && n < cap && (de = readdir(d))) {
        char *end;
        long p = strtol(de->d_name, &end, 10);
        if (*end || p <= 0)
            continue;
        char stat[300], buf[512];
        snprintf(stat, sizeof stat, "/proc/%ld/stat", p);
        FILE *s = fopen(stat, "r");
        if (!s)
            continue;
        size_t got = fread(buf, 1, sizeof buf - 1, s);
        fclose(s);
        buf[got] = '\0';
        const char *rp = strrchr(buf, ')');
        long ppid;
        char st;
        if (rp && sscanf(rp + 1, " %c %ld", &st, &ppid) == 2 && ppid == (long)getpid())
            out[n++] = (pid_t)p;
    }
    if (d)
        closedir(d);
#else
    (void)out;
    (void)cap;
#endif
    return n;
}

/* Kill and reap every child of this process, and the children they leave, in rounds (a
 * killed orphan's own children come back to us in turn). The checker has no other children
 * when it calls this. */
static void sweep_orphans(void)
{
    for (int round = 0; round < 64; round++) {
        pid_t kids[256];
        size_t n = list_children(kids, 256);
        if (!n)
            break;
        for (size_t k = 0; k < n; k++) {
            (void)kill(-kids[k], SIGKILL); /* its group, if it made one */
            (void)kill(kids[k], SIGKILL);
        }
        for (size_t k = 0; k < n; k++)
            while (waitpid(kids[k], NULL, 0) < 0 && errno == EINTR)
                ;
    }
    while (waitpid(-1, NULL, WNOHANG) > 0)
        ;
}

static double now_seconds(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

int conform_child_finish(pid_t pid, double timeout, const sigset_t *old, int *ws)
{
    double t0 = now_seconds();
    sigset_t chld;
    sigemptyset(&chld);
    sigaddset(&chld, SIGCHLD);
    int hung = 0;
    for (;;) {
        if (g_term_sig) /* the checker is being killed: on_term killed the group */
            break;
        /* WNOWAIT: the child stays a zombie, so its pid (and process group id) cannot be
         * reused before the group is killed below. */
        siginfo_t si;
        memset(&si, 0, sizeof si);
        int w = waitid(P_PID, (id_t)pid, &si, WEXITED | WNOHANG | WNOWAIT);
        if (w == 0 && si.si_pid == pid)
            break;
        if (w < 0 && errno != EINTR)
            break;
        double left = timeout - (now_seconds() - t0);
        if (left <= 0) {
            hung = 1;
            break;
        }
        left = left < 0.1 ? left : 0.1;
        struct timespec ts = {(time_t)left, (long)((left - floor(left)) * 1e9)};
        sigtimedwait(&chld, NULL, &ts);
    }
    /* From here to the end of the sweep a terminating signal waits (and is acted on below):
     * dying half-way would leave the orphans of the sweep alive. */
    sigset_t term;
    sigemptyset(&term);
    add_term_sigs(&term);
    sigprocmask(SIG_BLOCK, &term, NULL);
    (void)kill(-pid, SIGKILL); /* the child's group: grandchildren that stayed in it */
    (void)kill(pid, SIGKILL);
    *ws = 0;
    while (waitpid(pid, ws, 0) < 0 && errno == EINTR)
        ;
    sweep_orphans();
    g_pgid = 0;
    /* SIGCHLDs of the sweep are pending and blocked: drop them before unblocking. */
    struct timespec zero = {0, 0};
    while (sigtimedwait(&chld, NULL, &zero) > 0)
        ;
    int sig = (int)g_term_sig;
    if (sig) { /* all of the plugin is gone: die of the signal, as if we had no handler */
        signal(sig, SIG_DFL);
        sigset_t one;
        sigemptyset(&one);
        sigaddset(&one, sig);
        raise(sig);
        sigprocmask(SIG_UNBLOCK, &one, NULL);
        _exit(128 + sig); /* not reached */
    }
    sigprocmask(SIG_SETMASK, old, NULL);
    return hung;
}

void conform_capture_read(int fd, char *out, size_t cap)
{
    out[0] = '\0';
    if (fd < 0 || cap < 2)
        return;
    char buf[CONFORM_OUTPUT_SHOWN + 1];
    ssize_t n = pread(fd, buf, sizeof buf - 1, 0);
    if (n <= 0)
        return;
    buf[n] = '\0';
    /* The first lines, printable characters only (a report is text). */
    size_t o = 0;
    ssize_t k = 0;
    int lines = 0;
    for (; k < n && o + 1 < cap; k++) {
        unsigned char ch = (unsigned char)buf[k];
        if (ch == '\n') {
            if (++lines == CONFORM_OUTPUT_LINES)
                break;
            out[o++] = '\n';
        } else {
            out[o++] = (ch >= 0x20 && ch != 0x7f) || ch == '\t' || ch >= 0x80 ? (char)ch : '?';
        }
    }
    while (o > 0 && out[o - 1] == '\n')
        o--;
    out[o] = '\0';
    off_t total = lseek(fd, 0, SEEK_END);
    if ((k + 1 < n || total > (off_t)n) && o + 7 < cap)
        snprintf(out + o, cap - o, "\n[...]");
}

int conform_capture_open(void)
{
    FILE *f = tmpfile();
    if (!f)
        return -1;
    int fd = dup(fileno(f));
    fclose(f);
    return fd;
}

void conform_capture_reset(int fd)
{
    if (fd >= 0) {
        (void)ftruncate(fd, 0);
        (void)lseek(fd, 0, SEEK_SET);
    }
}
