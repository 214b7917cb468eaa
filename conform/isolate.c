/* SPDX-License-Identifier: MIT */
/* isolate.c: the process hygiene around plugin code. Every call into a plugin (dlopen and
 * its constructors, describe, precision, the kernel) runs in a forked child in its own
 * process group, with its stdout and stderr in a capture file of bounded size; when the
 * child ends or its time runs out, its whole group is killed, and so is every process left
 * under this one whatever group or session it moved to (a subreaper on Linux, so that
 * grandchildren that called setsid() come back to us instead of init; all of them stopped
 * first, then killed, so that a fork bomb cannot outrun the kill: sweep_orphans), and all
 * are reaped: the checker never runs plugin code,
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

static double now_seconds(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

/* How long a sweep keeps trying to stop every process under the checker before it kills
 * what it found anyway (a process in uninterruptible sleep cannot stop; one that keeps
 * sending SIGCONT to the others delays the moment all are stopped), and how long it goes
 * on at all (a process stuck in the kernel cannot even die; it is left, the run goes on). */
#define SWEEP_FREEZE_SECONDS 2.0
#define SWEEP_GIVE_UP_SECONDS 10.0

/* 1 if this process has a child (running, stopped or a zombie). The checker is a subreaper
 * and has no children of its own when it sweeps: no child means no plugin process at all,
 * which is the common case, found without reading /proc. */
static int have_children(void)
{
    siginfo_t si;
    memset(&si, 0, sizeof si);
    return !(waitid(P_ALL, 0, &si, WEXITED | WNOHANG | WNOWAIT) < 0 && errno == ECHILD);
}

typedef struct proc_ent {
    pid_t pid, ppid;
    char state; /* /proc/PID/stat's letter: R, S, D, T (stopped), t, Z, X, ... */
} proc_ent;

/* What a sweep keeps between its scans of /proc. */
typedef struct sweep_state {
    proc_ent *v; /* the processes of a scan */
    size_t cap;
    unsigned char *under; /* a bit per pid: this process or one under it, in this scan */
    size_t nbits;
    pid_t *stopped; /* every pid sent SIGSTOP */
    size_t nstopped, scap;
} sweep_state;

static int is_under(const sweep_state *s, pid_t p)
{
    return p > 0 && (size_t)p < s->nbits && (s->under[(size_t)p / 8] >> ((size_t)p % 8) & 1);
}

static void set_under(sweep_state *s, pid_t p)
{
    if (p <= 0)
        return;
    if ((size_t)p >= s->nbits) { /* a pid past pid_max as read at the start */
        size_t nb = ((size_t)p + 1) * 2, old = (s->nbits + 7) / 8, now = (nb + 7) / 8;
        unsigned char *u = realloc(s->under, now);
        if (!u)
            return;
        memset(u + old, 0, now - old);
        s->under = u, s->nbits = nb;
    }
    s->under[(size_t)p / 8] |= (unsigned char)(1u << ((size_t)p % 8));
}

static int stoppable(char st)
{
    return st != 'T' && st != 't' && st != 'Z' && st != 'X';
}

static void stop_one(sweep_state *s, pid_t p)
{
    (void)kill(p, SIGSTOP);
    if (s->nstopped == s->scap) {
        size_t nc = s->scap ? 2 * s->scap : 64;
        pid_t *ns = realloc(s->stopped, nc * sizeof *ns);
        if (!ns)
            return;
        s->stopped = ns, s->scap = nc;
    }
    s->stopped[s->nstopped++] = p;
}

/* The way where the kernel does not list children (walk_tree): every process under this
 * one (children, their children, ...) with its state as read, into s->v; the count, and in *running how many were neither stopped nor dead. One pass
 * over /proc, then the closure over parents: a process is listed whatever group or session
 * it moved to, and however deep (a sweep that follows only this process's own children
 * reaches one generation per round). With stop, each one found running is sent SIGSTOP at
 * once, as the pass reaches it: /proc lists pids in increasing order, so a parent is
 * mostly met before its children, and a process that forks fast gets little time to. */
static size_t scan_all(sweep_state *s, int stop, size_t *running)
{
    size_t n = 0;
    *running = 0;
#ifdef __linux__
    if (s->under)
        memset(s->under, 0, (s->nbits + 7) / 8);
    set_under(s, getpid());
    DIR *d = opendir("/proc");
    struct dirent *de;
    while (d && (de = readdir(d))) {
        char *end;
        long p = strtol(de->d_name, &end, 10);
        if (*end || p <= 0)
            continue;
        char path[64], buf[512];
        snprintf(path, sizeof path, "/proc/%ld/stat", p);
        int fd = open(path, O_RDONLY | O_CLOEXEC);
        if (fd < 0)
            continue;
        ssize_t got = read(fd, buf, sizeof buf - 1);
        close(fd);
        if (got <= 0)
            continue;
        buf[got] = '\0';
        const char *rp = strrchr(buf, ')'); /* the name may hold anything, ')' too */
        long ppid;
        char st;
        if (!rp || sscanf(rp + 1, " %c %ld", &st, &ppid) != 2)
            continue;
        if (n == s->cap) {
            size_t nc = s->cap ? 2 * s->cap : 256;
            proc_ent *nv = realloc(s->v, nc * sizeof *nv);
            if (!nv)
                break;
            s->v = nv, s->cap = nc;
        }
        s->v[n++] = (proc_ent){(pid_t)p, (pid_t)ppid, st};
        if (is_under(s, (pid_t)ppid)) {
            set_under(s, (pid_t)p);
            if (stop && stoppable(st))
                stop_one(s, (pid_t)p);
        }
    }
    if (d)
        closedir(d);
    /* The closure: those met before their parent (pids wrap around), pass after pass until
     * a pass adds none; then the ones under this process to the front. */
    for (int grew = 1; grew;) {
        grew = 0;
        for (size_t k = 0; k < n; k++)
            if (!is_under(s, s->v[k].pid) && is_under(s, s->v[k].ppid)) {
                set_under(s, s->v[k].pid);
                if (stop && stoppable(s->v[k].state))
                    stop_one(s, s->v[k].pid);
                grew = 1;
            }
    }
    size_t kept = 0;
    for (size_t k = 0; k < n; k++)
        if (is_under(s, s->v[k].pid) && s->v[k].pid != getpid()) {
            *running += stoppable(s->v[k].state);
            s->v[kept++] = s->v[k];
        }
    n = kept;
#else
    (void)s;
    (void)stop;
#endif
    return n;
}

/* Appends pid c, a child of p whose state is not read yet, to the processes of this walk
 * (s->v, *n of them) unless it is there already. */
static void add_found(sweep_state *s, size_t *n, pid_t c, pid_t p)
{
    if (c <= 0 || is_under(s, c))
        return;
    if (*n == s->cap) {
        size_t nc = s->cap ? 2 * s->cap : 256;
        proc_ent *nv = realloc(s->v, nc * sizeof *nv);
        if (!nv)
            return;
        s->v = nv, s->cap = nc;
    }
    set_under(s, c);
    s->v[(*n)++] = (proc_ent){c, p, '?'};
}

/* The children of thread tid of process p (/proc/p/task/tid/children: pids and spaces),
 * added as add_found does. -1 if the file cannot be opened: the thread is gone, or the
 * kernel has no such file. */
static int read_children(sweep_state *s, size_t *n, pid_t p, const char *tid)
{
    char path[320], buf[4096];
    snprintf(path, sizeof path, "/proc/%ld/task/%s/children", (long)p, tid);
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return -1;
    long c = 0;
    int digits = 0;
    ssize_t got;
    while ((got = read(fd, buf, sizeof buf)) > 0) /* a number may straddle two reads */
        for (ssize_t k = 0; k < got; k++) {
            if (buf[k] >= '0' && buf[k] <= '9') {
                c = digits++ < 9 ? 10 * c + (buf[k] - '0') : -1;
                continue;
            }
            if (digits)
                add_found(s, n, (pid_t)c, p);
            c = 0, digits = 0;
        }
    if (digits)
        add_found(s, n, (pid_t)c, p);
    close(fd);
    return 0;
}

/* The state letter of thread tid of process p (R, S, D, T, t, Z, X, ...); 'X' when gone. */
static char task_state(pid_t p, const char *tid)
{
    char path[320], buf[512];
    snprintf(path, sizeof path, "/proc/%ld/task/%s/stat", (long)p, tid);
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return 'X';
    ssize_t got = read(fd, buf, sizeof buf - 1);
    close(fd);
    if (got <= 0)
        return 'X';
    buf[got] = '\0';
    const char *rp = strrchr(buf, ')'); /* the name may hold anything, ')' too */
    char st;
    return rp && sscanf(rp + 1, " %c", &st) == 1 ? st : 'X';
}

/* Visits process p: reads the states of its threads, counts it in *running and with stop
 * sends it SIGSTOP when any of them is neither stopped nor dead, then adds its threads'
 * children to the walk. Returns its state (the first running thread's, else the leader's);
 * 'X' if p is gone; 0 if none of its threads lists children (a kernel without the file). */
static char visit(sweep_state *s, size_t *n, pid_t p, int stop, size_t *running)
{
    char path[64];
    snprintf(path, sizeof path, "/proc/%ld/task", (long)p);
    DIR *d = opendir(path);
    if (!d)
        return 'X';
    char st = 'X';
    struct dirent *de;
    while ((de = readdir(d)))
        if (de->d_name[0] >= '0' && de->d_name[0] <= '9') {
            char t = task_state(p, de->d_name);
            if (st == 'X' || (stoppable(t) && !stoppable(st)))
                st = t;
        }
    if (p != getpid() && stoppable(st)) {
        ++*running;
        if (stop)
            stop_one(s, p);
    }
    rewinddir(d);
    int listed = 0;
    while ((de = readdir(d)))
        if (de->d_name[0] >= '0' && de->d_name[0] <= '9')
            listed |= read_children(s, n, p, de->d_name) == 0;
    closedir(d);
    return listed || st == 'Z' || st == 'X' ? st : 0;
}

/* Every process under this one (children, their children, ...) into s->v, found by
 * following the kernel's lists of children (/proc/PID/task/TID/children) from this
 * process down, breadth first: only the checker's own subtree is read, however many
 * processes the machine has (a scan of all of /proc took long enough, with thousands of
 * them, for a chain of processes that fork and exit to move out of its sight). Each
 * process's lists of children are read after its states and its SIGSTOP, so that those of
 * a process found stopped are complete (a stopped process forks no more; a fork under way
 * when the SIGSTOP came has added its child before the stop): when a walk finds every
 * process stopped, it has found all of the subtree, and the subtree can no longer change.
 * Returns the count, or (size_t)-1 if the kernel lists no children (scan_all then). */
static size_t walk_tree(sweep_state *s, int stop, size_t *running)
{
    size_t n = 0;
    *running = 0;
    if (s->under)
        memset(s->under, 0, (s->nbits + 7) / 8);
    set_under(s, getpid());
    char self = visit(s, &n, getpid(), stop, running);
    if (self == 0 || self == 'X')
        return (size_t)-1;
    for (size_t i = 0; i < n; i++) {
        char st = visit(s, &n, s->v[i].pid, stop, running);
        s->v[i].state = st ? st : 'R';
    }
    return n;
}

/* Every process under this one, with its state, into s->v; see walk_tree and scan_all. */
static size_t descendants(sweep_state *s, int stop, size_t *running)
{
    size_t n = walk_tree(s, stop, running);
    return n != (size_t)-1 ? n : scan_all(s, stop, running);
}

static void sleep_ms(double ms)
{
    struct timespec ts = {0, (long)(ms * 1e6)};
    nanosleep(&ts, NULL);
}

/* Kill and reap every process under this one, whatever group or session it moved to, fork
 * bombs included: stop them all first (SIGSTOP cannot be caught or ignored, and a stopped
 * process forks no more), scanning again until a scan finds every one of them stopped,
 * then kill them all and reap, until no child is left. Killing pids one generation at a
 * time let a process that forks (or a line of processes each the child of the one before)
 * outrun the kill. Without privileges and without a cgroup: the checker is a subreaper,
 * so every orphan of plugin code stays under it; a process that has something outside
 * start a program for it (a daemon, `at`) is out of reach, as it would be of a process
 * group kill. A pid stopped here that is no longer under the checker at the end (it died
 * and the pid was reused between the scan and the signal) is continued again. */
static void sweep_orphans(void)
{
    double t0 = now_seconds();
    sweep_state s;
    memset(&s, 0, sizeof s);
    int unseen = 0;
    while (have_children() && now_seconds() - t0 < SWEEP_GIVE_UP_SECONDS) {
        while (waitpid(-1, NULL, WNOHANG) > 0) /* zombies: nothing to stop */
            ;
        size_t running = 0, n = descendants(&s, 1, &running);
        if (n == 0) {
            /* Children, none of them found in /proc: one handed up to us after our list
             * was read (look again, a few times), or /proc cannot be read (not Linux, or
             * mounted hidepid): the process group kills were all there was to do. */
            if (have_children() && !(waitpid(-1, NULL, WNOHANG) > 0) && ++unseen > 3)
                break;
            sleep_ms(0.2);
            continue;
        }
        unseen = 0;
        if (running && now_seconds() - t0 < SWEEP_FREEZE_SECONDS) {
            sleep_ms(0.2); /* the SIGSTOPs to land; then look again */
            continue;
        }
        for (size_t k = 0; k < n; k++)
            (void)kill(s.v[k].pid, SIGKILL);
        /* Reap what died (and the zombies handed up to us as their parents die). */
        double t1 = now_seconds();
        while (have_children() && now_seconds() - t1 < 0.5) {
            if (waitpid(-1, NULL, WNOHANG) <= 0)
                sleep_ms(0.2);
        }
    }
    while (waitpid(-1, NULL, WNOHANG) > 0)
        ;
    /* Every stopped pid that is still alive now is not ours (see above): continue it. */
    for (size_t k = 0; k < s.nstopped; k++)
        if (kill(s.stopped[k], 0) == 0)
            (void)kill(s.stopped[k], SIGCONT);
    free(s.stopped);
    free(s.under);
    free(s.v);
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
