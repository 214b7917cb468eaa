/* SPDX-License-Identifier: MIT */
/* case_out.c: the outputs of a case: allocation in the case's shapes, the writer of
 * OUT/o.npy, lse.npy, p.npy (and a backward case's dq, dk, dv, dbias, dsinks.npy) as one
 * set, and the check that a set is whole. */
#define _DEFAULT_SOURCE /* flock, S_ISVTX */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <zlib.h>

#include "io/case.h"
#include "io/util.h"

/* The outputs a run may write, by index (`which` below): the forward's 0 o, 1 lse, 2 p,
 * then the backward's 3 dq, 4 dk, 5 dv, 6 dbias, 7 dsinks (SPEC 7.1, 10.1). */
#define N_OUT 8

/* Output shapes in the case's convention: rank 4 [B,...] or rank 3 without B; with a
 * packed q, o [total_q,Hq,Dv] and lse [Hq,total_q] (p stays [B,Hq,S,T]). dsinks is [Hq];
 * dbias has bias.npy's own shape (SPEC 10.1: summed over the dimensions it broadcasts). */
static int out_shape(const smattn_case *c, int which, int64_t shape[4])
{
    const smattn_problem *p = &c->prob;
    if (which == 7) {
        shape[0] = p->Hq;
        return 1;
    }
    if (which == 6 && c->bias.rank > 0) {
        for (int r = 0; r < c->bias.rank; r++)
            shape[r] = c->bias.shape[r];
        return c->bias.rank;
    }
    if (c->packed_q && which == 0) {
        shape[0] = c->total_q, shape[1] = p->Hq, shape[2] = p->Dv;
        return 3;
    }
    if (c->packed_q && which == 1) {
        shape[0] = p->Hq, shape[1] = c->total_q;
        return 2;
    }
    if (c->packed_q && which == 3) { /* dQ has Q's storage (SPEC 10.1) */
        shape[0] = c->total_q, shape[1] = p->Hq, shape[2] = p->D;
        return 3;
    }
    if ((c->packed_k || c->paged) && (which == 4 || which == 5)) {
        /* dK and dV have k.npy's and v.npy's shapes: packed rows or the page pool */
        const smattn_npy *a = which == 4 ? &c->k : &c->v;
        for (int r = 0; r < a->rank; r++)
            shape[r] = a->shape[r];
        return a->rank;
    }
    int64_t full[7][4] = {{p->B, p->S, p->Hq, p->Dv}, {p->B, p->Hq, p->S, 0},
                          {p->B, p->Hq, p->S, p->T},  {p->B, p->S, p->Hq, p->D},
                          {p->B, p->T, p->Hkv, p->D}, {p->B, p->T, p->Hkv, p->Dv},
                          {p->B, p->Hq, p->S, p->T}};
    int rank = which == 1 ? 3 : 4;
    int drop = c->rank == 3;
    for (int r = drop; r < rank; r++)
        shape[r - drop] = full[which][r];
    return rank - drop;
}

int smattn_case_out_layout(const smattn_case *c, int which, int64_t shape[4], int64_t stride[4])
{
    static const char roles[N_OUT] = {'o', 'l', 'p', 'q', 'k', 'v', 'b', 's'};
    int rank = out_shape(c, which, shape);
    smattn_contiguous_strides(&c->prob, roles[which], stride);
    if (which == 6 && c->bias.rank > 0) { /* bias.npy's shape, right-aligned: stride 0 sums */
        int64_t pad[4] = {1, 1, 1, 1}, st = 1;
        for (int r = 0; r < rank; r++)
            pad[4 - rank + r] = shape[r];
        for (int k = 3; k >= 0; k--) {
            stride[k] = pad[k] == 1 ? 0 : st;
            st *= pad[k];
        }
    }
    if (c->packed_q && which == 3) /* dQ [1,total_q,Hq,D] */
        stride[0] = 0, stride[1] = shape[1] * shape[2], stride[2] = shape[2], stride[3] = 1;
    if ((c->packed_k || c->paged) && (which == 4 || which == 5)) {
        /* C order of k.npy's (v.npy's) shape, read as the input is: packed [1,total_k,Hkv,D],
         * pages NHD [pages,page_size,Hkv,D] or HND [pages,Hkv,page_size,D] */
        const int64_t W = shape[rank - 1];
        if (rank == 3) {
            stride[0] = 0, stride[1] = shape[1] * W, stride[2] = W, stride[3] = 1;
        } else if (c->json.kv_hnd) {
            stride[0] = shape[1] * shape[2] * W, stride[1] = W, stride[2] = shape[2] * W;
            stride[3] = 1;
        } else {
            stride[0] = shape[1] * shape[2] * W, stride[1] = shape[2] * W, stride[2] = W;
            stride[3] = 1;
        }
    }
    if (c->packed_q && which < 2) { /* O [1,total_q,Hq,Dv], LSE [1,Hq,total_q] (SPEC 2.7) */
        stride[0] = 0;
        stride[1] = which == 0 ? shape[1] * shape[2] : shape[1];
        stride[2] = which == 0 ? shape[2] : 1;
        stride[3] = which == 0 ? 1 : 0;
    }
    return rank;
}

/* Element count of a shape, or -1 if it does not fit in int64 or size_t bytes. */
static int64_t shape_count(const int64_t *shape, int rank, size_t es)
{
    int64_t n = 1;
    for (int r = 0; r < rank; r++) {
        if (shape[r] != 0 && n > INT64_MAX / shape[r])
            return -1;
        n *= shape[r];
    }
    return (uint64_t)n > SIZE_MAX / es ? -1 : n;
}

/* Names of the outputs, for messages and files (without ".npy"). */
static const char *const out_stems[N_OUT] = {"o", "lse", "p", "dq", "dk", "dv", "dbias", "dsinks"};

/* The outputs `bits` (bit k: output k) of the case fit in size_t bytes and in the
 * machine's memory; -1 with a message naming the first that does not. */
static int sizes_check(const smattn_case *c, smattn_dtype t, unsigned bits, char *err,
                       size_t errlen)
{
    size_t es = smattn_dtype_size(t);
    if (es == 0)
        return 0; /* the allocation reports the dtype */
    long pages = sysconf(_SC_PHYS_PAGES), psize = sysconf(_SC_PAGESIZE);
    double phys = pages > 0 && psize > 0 ? (double)pages * (double)psize : 0;
    for (int k = 0; k < N_OUT; k++) {
        if (!(bits >> k & 1))
            continue;
        int64_t shape[4];
        int rank = out_shape(c, k, shape);
        double elems = 1; /* in binary64: only the message needs the exact size */
        for (int r = 0; r < rank; r++)
            elems *= (double)shape[r];
        if (shape_count(shape, rank, es) >= 0 && (phys == 0 || elems * (double)es <= phys))
            continue;
        smattn_io_err(err, errlen, "%s.npy would need %.4g elements (%.4g bytes): too large%s",
                      out_stems[k], elems, elems * (double)es,
                      phys > 0 ? " (more than the machine's memory)" : "");
        return -1;
    }
    return 0;
}

/* The forward's outputs asked for by `which` (O only for attention), as bits of out_stems. */
static unsigned forward_bits(const smattn_case *c, unsigned which)
{
    return (which & 7u) & (c->prob.op == SMATTN_OP_ATTENTION ? 7u : 6u);
}

/* The gradients of a backward case, as bits of out_stems: dq, dk, dv; dbias with a bias,
 * except under ALiBi's mask mode, whose bias is a distance mask without a gradient (SPEC
 * 10.1: asking for it is SMATTN_ERR_UNSUPPORTED); dsinks with sinks. */
static unsigned grad_bits(const smattn_case *c)
{
    if (!c->backward)
        return 0;
    const int dbias = c->bias.itemsize && c->prob.alibi_mode != SMATTN_ALIBI_MASK;
    return 0x38u | (dbias ? 1u << 6 : 0) | (c->sinks.itemsize || c->json.sinks ? 1u << 7 : 0);
}

int smattn_case_outputs_check(const smattn_case *c, smattn_dtype t, unsigned which, char *err,
                              size_t errlen)
{
    return sizes_check(c, t, forward_bits(c, which), err, errlen);
}

int smattn_case_grads_check(const smattn_case *c, smattn_dtype t, char *err, size_t errlen)
{
    return sizes_check(c, t, grad_bits(c), err, errlen);
}

/* Allocate output k (zeroed, contiguous in the case's shape) into *ot; a status and one
 * line on failure. */
static smattn_status alloc_one(const smattn_case *c, int k, smattn_dtype t, smattn_out_tensor *ot,
                               char *err, size_t errlen)
{
    size_t es = smattn_dtype_size(t);
    int64_t shape[4], stride[4];
    int rank = smattn_case_out_layout(c, k, shape, stride);
    int64_t n = shape_count(shape, rank, es);
    if (n < 0) {
        smattn_io_err(err, errlen, "%s.npy: the output has too many elements to allocate",
                      out_stems[k]);
        return SMATTN_ERR_OVERFLOW;
    }
    ot->data = calloc((size_t)n ? (size_t)n : 1, es);
    if (!ot->data) {
        smattn_io_err(err, errlen, "%s.npy: out of memory for %lld elements of %s", out_stems[k],
                      (long long)n, smattn_dtype_name(t));
        return SMATTN_ERR_NOMEM;
    }
    ot->dtype = t;
    memcpy(ot->stride, stride, sizeof stride);
    return SMATTN_OK;
}

static int float_out(smattn_dtype t, char *err, size_t errlen)
{
    if (smattn_dtype_size(t) != 0 && t != SMATTN_BOOL)
        return 0;
    smattn_io_err(err, errlen, "output dtype %d is not a float type", (int)t);
    return -1;
}

smattn_status smattn_case_outputs_alloc(const smattn_case *c, smattn_dtype t, unsigned which,
                                        smattn_outputs *out, char *err, size_t errlen)
{
    memset(out, 0, sizeof *out);
    smattn_out_tensor *ot[3] = {&out->o, &out->lse, &out->p};
    if (float_out(t, err, errlen))
        return SMATTN_ERR_DTYPE;
    unsigned bits = forward_bits(c, which);
    for (int k = 0; k < 3; k++) {
        if (!(bits >> k & 1))
            continue;
        smattn_status st = alloc_one(c, k, t, ot[k], err, errlen);
        if (st != SMATTN_OK) {
            smattn_case_outputs_free(out);
            return st;
        }
    }
    char why[512];
    smattn_status st = smattn_validate_explain(&c->prob, &c->in, out, why, sizeof why);
    if (st != SMATTN_OK) {
        smattn_io_err(err, errlen, "case: %s (%s)", why[0] ? why : smattn_status_str(st),
                      smattn_status_name(st));
        smattn_case_outputs_free(out);
    }
    return st;
}

void smattn_case_outputs_free(smattn_outputs *out)
{
    if (!out)
        return;
    free(out->o.data);
    free(out->lse.data);
    free(out->p.data);
    memset(out, 0, sizeof *out);
}

static smattn_out_tensor *grad_slot(smattn_grad_outputs *g, int k)
{
    smattn_out_tensor *slot[5] = {&g->dq, &g->dk, &g->dv, &g->dbias, &g->dsinks};
    return slot[k - 3];
}

smattn_status smattn_case_grads_alloc(const smattn_case *c, smattn_dtype t, smattn_grad_outputs *g,
                                      char *err, size_t errlen)
{
    memset(g, 0, sizeof *g);
    if (float_out(t, err, errlen))
        return SMATTN_ERR_DTYPE;
    unsigned bits = grad_bits(c);
    for (int k = 3; k < N_OUT; k++) {
        if (!(bits >> k & 1))
            continue;
        smattn_status st = alloc_one(c, k, t, grad_slot(g, k), err, errlen);
        if (st != SMATTN_OK) {
            smattn_case_grads_free(g);
            return st;
        }
    }
    return SMATTN_OK;
}

void smattn_case_grads_free(smattn_grad_outputs *g)
{
    if (!g)
        return;
    for (int k = 3; k < N_OUT; k++)
        free(grad_slot(g, k)->data);
    memset(g, 0, sizeof *g);
}

/* ---- OUT: the outputs as a set (SPEC 7.2) ------------------------------------------------
 *
 * The marker OUT/.smattn-set, renamed into place last, says which set is whole: "state":
 * "whole" with every output of the run, its size and its CRC-32; or "state": "writing",
 * put there before the first output is switched, so that a run stopped half-way (SIGKILL,
 * a power cut) leaves a set that says it is not whole. Under an exclusive lock on OUT a
 * run removes what an interrupted run left, checks that it can replace every name it
 * manages, writes and flushes each output under a temporary name (a signal here removes
 * them: OUT is as it was), then, with every catchable signal held back: the "writing"
 * marker, the renames and the removal of stale outputs, the "whole" marker, each step
 * flushed before the next. So at any moment, and on the disk after a power cut, OUT holds
 * a whole set with a marker that matches it, or a marker that says it is not whole; a
 * caught signal takes effect once the new set is whole. */

#define SET_MARKER ".smattn-set"

/* The names a run manages in OUT: each output is written by the run or, if the run does
 * not produce it, removed as stale, so OUT never holds outputs of two runs; the marker is
 * replaced by every run. */
static const char *const out_names[N_OUT] = {"o.npy",  "lse.npy", "p.npy",     "dq.npy",
                                             "dk.npy", "dv.npy",  "dbias.npy", "dsinks.npy"};
#define N_MANAGED (N_OUT + 1)
static const char *const managed[N_MANAGED] = {"o.npy",     "lse.npy",    "p.npy",
                                               "dq.npy",    "dk.npy",     "dv.npy",
                                               "dbias.npy", "dsinks.npy", SET_MARKER};

/* Prefixes of the temporaries a run makes in OUT (mkstemp adds six letters or digits):
 * one per managed name, and the probe of smattn_case_out_check. */
#define N_TEMP_PREFIXES (N_MANAGED + 1)
static const char *const temp_prefixes[N_TEMP_PREFIXES] = {
    ".o.npy.",  ".lse.npy.",   ".p.npy.",      ".dq.npy.",     ".dk.npy.",
    ".dv.npy.", ".dbias.npy.", ".dsinks.npy.", SET_MARKER ".", ".smattn_probe."};

/* Hold back every signal that can be held (SIGKILL and SIGSTOP cannot) in this thread; the
 * old mask in *old. The opt kernel's workers hold them all the time (opt/pool.c) and the
 * oracle's have ended, so none is taken by another thread meanwhile. */
static void hold_signals(sigset_t *old)
{
    sigset_t all;
    sigfillset(&all);
    pthread_sigmask(SIG_BLOCK, &all, old);
}

static void release_signals(const sigset_t *old)
{
    pthread_sigmask(SIG_SETMASK, old, NULL);
}

/* The directory that would hold OUT (OUT without its last component), in buf. */
static void parent_of(const char *outdir, char *buf, size_t cap)
{
    snprintf(buf, cap, "%s", outdir);
    size_t n = strlen(buf);
    while (n > 1 && buf[n - 1] == '/') /* "a/b/" names b */
        buf[--n] = '\0';
    char *slash = strrchr(buf, '/');
    if (!slash)
        snprintf(buf, cap, ".");
    else if (slash == buf)
        buf[1] = '\0';
    else
        *slash = '\0';
}

/* A name this run would replace or remove and cannot: OUT is sticky (a shared directory
 * like /tmp) and neither the file nor OUT belongs to this user, so rename and unlink fail
 * with EPERM. Found here, before anything changes, instead of after the first output was
 * switched. Root (CAP_FOWNER) may. 0, or -1 with err. */
static int check_replaceable(const char *outdir, char *err, size_t errlen)
{
    struct stat dst, st;
    uid_t me = geteuid();
    if (stat(outdir, &dst) != 0 || !(dst.st_mode & S_ISVTX) || me == 0 || dst.st_uid == me)
        return 0;
    for (int k = 0; k < N_MANAGED; k++) {
        char *p = smattn_io_join_path(outdir, managed[k]);
        if (!p) {
            smattn_io_err(err, errlen, "out of memory");
            return -1;
        }
        int theirs = lstat(p, &st) == 0 && st.st_uid != me;
        if (theirs) {
            char q[SMATTN_IO_PATH_MAX];
            smattn_io_err(err, errlen,
                          "%s: belongs to another user (uid %lu) in a sticky directory, so this "
                          "run could not replace or remove it; ask its owner to remove it, or "
                          "give another OUT",
                          smattn_io_path(p, q), (unsigned long)st.st_uid);
        }
        free(p);
        if (theirs)
            return -1;
    }
    return 0;
}

int smattn_case_out_check(const char *outdir, char *err, size_t errlen)
{
    char q[SMATTN_IO_PATH_MAX], q2[SMATTN_IO_PATH_MAX];
    const char *shown = smattn_io_path(outdir, q);
    struct stat st;
    if (stat(outdir, &st) != 0) {
        if (errno != ENOENT) {
            smattn_io_err(err, errlen, "%s: %s", shown, strerror(errno));
            return -1;
        }
        if (lstat(outdir, &st) == 0 && S_ISLNK(st.st_mode)) { /* mkdir would say "File exists" */
            smattn_io_err(err, errlen,
                          "%s: is a dangling symbolic link (its target does not exist); "
                          "create the target or give another OUT",
                          shown);
            return -1;
        }
        char parent[4096];
        parent_of(outdir, parent, sizeof parent);
        if (stat(parent, &st) != 0 || !S_ISDIR(st.st_mode)) {
            smattn_io_err(err, errlen, "%s: cannot be created: its parent %s %s", shown,
                          smattn_io_path(parent, q2),
                          errno == ENOENT ? "does not exist" : "is not a directory");
            return -1;
        }
        /* A directory made in the parent and removed at once: the only sure test that OUT
         * can be made there (permissions, a read-only file system, ACLs, root). It has a
         * name of its own: OUT's name may be taken meanwhile by a run writing into it. */
        size_t end = strlen(outdir), start;
        while (end > 1 && outdir[end - 1] == '/') /* "a/b/" names b */
            end--;
        for (start = end; start > 0 && outdir[start - 1] != '/'; start--)
            ;
        size_t last_len = end - start;
        long name_max = pathconf(parent, _PC_NAME_MAX);
        if (name_max > 0 && last_len > (size_t)name_max) {
            smattn_io_err(err, errlen, "%s: cannot create directory: %s", shown,
                          strerror(ENAMETOOLONG));
            return -1;
        }
        char *probe = smattn_io_join_path(parent, ".smattn_probe.XXXXXX");
        if (!probe) {
            smattn_io_err(err, errlen, "out of memory");
            return -1;
        }
        sigset_t old;
        hold_signals(&old); /* no probe is left behind by a signal */
        int made = mkdtemp(probe) != NULL, e = errno;
        if (made)
            rmdir(probe);
        release_signals(&old);
        free(probe);
        if (!made) {
            smattn_io_err(err, errlen, "%s: cannot create directory: %s", shown, strerror(e));
            return -1;
        }
        return 0;
    }
    if (!S_ISDIR(st.st_mode)) {
        smattn_io_err(err, errlen, "%s: exists and is not a directory", shown);
        return -1;
    }
    for (int k = 0; k < N_MANAGED; k++) {
        char *p = smattn_io_join_path(outdir, managed[k]);
        if (!p) {
            smattn_io_err(err, errlen, "out of memory");
            return -1;
        }
        int dir = lstat(p, &st) == 0 && S_ISDIR(st.st_mode);
        if (dir)
            smattn_io_err(err, errlen, "%s: is a directory where a run writes %s; move it away",
                          smattn_io_path(p, q2),
                          k < N_OUT ? "an output or removes a stale one"
                                    : "the marker of its outputs");
        free(p);
        if (dir)
            return -1;
    }
    if (check_replaceable(outdir, err, errlen))
        return -1;
    /* A file made and removed at once: the only sure test that OUT takes files (permissions,
     * a read-only file system, ACLs, root). Signals are held meanwhile so that no probe is
     * left behind. */
    char *probe = smattn_io_join_path(outdir, ".smattn_probe.XXXXXX");
    if (!probe) {
        smattn_io_err(err, errlen, "out of memory");
        return -1;
    }
    sigset_t old;
    hold_signals(&old);
    int fd = mkstemp(probe);
    int e = errno;
    if (fd >= 0) {
        close(fd);
        unlink(probe);
    }
    release_signals(&old);
    if (fd < 0)
        smattn_io_err(err, errlen, "%s: cannot write into it: %s", shown, strerror(e));
    free(probe);
    return fd < 0 ? -1 : 0;
}

/* Make OUT if missing; *created says whether this call made it. Another run may make it
 * at the same moment: EEXIST on a directory is success. */
static int make_outdir(const char *outdir, int *created, char *err, size_t errlen)
{
    char q[SMATTN_IO_PATH_MAX];
    struct stat st;
    *created = 0;
    if (stat(outdir, &st) == 0) {
        if (S_ISDIR(st.st_mode))
            return 0;
        smattn_io_err(err, errlen, "%s: exists and is not a directory", smattn_io_path(outdir, q));
        return -1;
    }
    if (mkdir(outdir, 0777) != 0) {
        if (errno == EEXIST && stat(outdir, &st) == 0 && S_ISDIR(st.st_mode))
            return 0;
        smattn_io_err(err, errlen, "%s: cannot create directory: %s", smattn_io_path(outdir, q),
                      strerror(errno));
        return -1;
    }
    *created = 1;
    return 0;
}

/* The temporaries that exist now, for a signal handler to remove (smattn_case_remove_temps):
 * a slot is set, with signals held, as soon as its file exists, and cleared before the path
 * is freed. */
static char *volatile live_temps[N_MANAGED];

void smattn_case_remove_temps(void)
{
    for (int k = 0; k < N_MANAGED; k++) {
        char *p = live_temps[k];
        if (p)
            unlink(p);
    }
}

static void forget_temp(const char *path)
{
    for (int k = 0; path && k < N_MANAGED; k++)
        if (live_temps[k] == path)
            live_temps[k] = NULL;
}

/* A new temporary file in OUT for the managed name `name` (".o.npy.XXXXXX",
 * ".smattn-set.XXXXXX"), mode 0644 like any output, registered for the signal handler
 * before any signal can arrive. Its descriptor, and its malloc'd path in *tmp; -1 with err. */
static int make_temp(const char *outdir, const char *name, char **tmp, char *err, size_t errlen)
{
    char q[SMATTN_IO_PATH_MAX];
    size_t n = strlen(outdir) + strlen(name) + 16;
    char *path = malloc(n);
    if (!path) {
        smattn_io_err(err, errlen, "out of memory");
        return -1;
    }
    snprintf(path, n, "%s/%s%s.XXXXXX", outdir, name[0] == '.' ? "" : ".", name);
    sigset_t old;
    hold_signals(&old);
    int fd = mkstemp(path);
    int e = errno;
    for (int k = 0; fd >= 0 && k < N_MANAGED; k++)
        if (!live_temps[k]) {
            live_temps[k] = path;
            break;
        }
    release_signals(&old);
    if (fd < 0) {
        smattn_io_err(err, errlen, "%s: cannot create a temporary file: %s",
                      smattn_io_path(outdir, q), strerror(e));
        free(path);
        return -1;
    }
    (void)fchmod(fd, 0644); /* mkstemp makes 0600; outputs are ordinary files */
    *tmp = path;
    return fd;
}

/* Size and CRC-32 (zlib's crc32, as Python's zlib.crc32) of the file open on fd, read from
 * its start: it tells one run's file from another's (not a forgery), little beside writing
 * or judging the set. 0, or -1 with errno. */
static int file_crc(int fd, uint64_t *bytes, uint32_t *crc)
{
    unsigned char *buf = malloc(1 << 20);
    int rc = buf && lseek(fd, 0, SEEK_SET) == 0 ? 0 : -1;
    uLong c = crc32(0L, Z_NULL, 0);
    *bytes = 0;
    while (rc == 0) {
        ssize_t got = read(fd, buf, 1 << 20);
        if (got < 0 && errno == EINTR)
            continue;
        if (got <= 0) {
            rc = got < 0 ? -1 : 0;
            break;
        }
        c = crc32(c, buf, (uInt)got); /* got <= 1 MiB fits uInt */
        *bytes += (uint64_t)got;
    }
    if (!buf)
        errno = ENOMEM;
    free(buf);
    *crc = (uint32_t)c;
    return rc;
}

/* One output of the set: produced by the run or not, its temporary, size and CRC. */
typedef struct set_file {
    int produced;
    char *tmp, *final;
    uint64_t bytes;
    uint32_t crc;
} set_file;

/* Write one output to a fresh temporary file in OUT, flushed to the disk (so that a crash
 * after the rename cannot leave an empty output); its path, size and CRC go to *f. */
static int write_temp(const char *outdir, const char *name, const smattn_out_tensor *t, int rank,
                      const int64_t *shape, set_file *f, char *err, size_t errlen)
{
    int fd = make_temp(outdir, name, &f->tmp, err, errlen);
    if (fd < 0)
        return -1;
    close(fd);
    if (smattn_npy_write(f->tmp, smattn_npy_type_of(t->dtype), rank, shape, t->data, err, errlen)) {
        smattn_io_err_prefix(err, errlen, name);
        return -1;
    }
    fd = open(f->tmp, O_RDONLY);
    if (fd < 0 || fsync(fd) != 0 || file_crc(fd, &f->bytes, &f->crc) != 0) {
        smattn_io_err(err, errlen, "%s: cannot flush to disk: %s", name, strerror(errno));
        if (fd >= 0)
            close(fd);
        return -1;
    }
    close(fd);
    return 0;
}

/* Put the marker text in place: a temporary, flushed, renamed over OUT/.smattn-set, then
 * OUT flushed, so that the marker on the disk never runs ahead of what it describes (a
 * directory fsync that the file system refuses is passed over). 0, or -1 with err. */
static int put_marker(const char *outdir, int dfd, const char *text, char *err, size_t errlen)
{
    char q[SMATTN_IO_PATH_MAX];
    char *tmp = NULL, *final = smattn_io_join_path(outdir, SET_MARKER);
    if (!final) {
        smattn_io_err(err, errlen, "out of memory");
        return -1;
    }
    int fd = make_temp(outdir, SET_MARKER, &tmp, err, errlen), rc = fd < 0 ? -1 : 0, e = 0;
    size_t len = strlen(text), done = 0;
    while (rc == 0 && done < len) {
        ssize_t w = write(fd, text + done, len - done);
        if (w < 0 && errno == EINTR)
            continue;
        if (w <= 0)
            rc = -1, e = w < 0 ? errno : ENOSPC;
        else
            done += (size_t)w;
    }
    if (rc == 0 && fsync(fd) != 0)
        rc = -1, e = errno;
    if (fd >= 0 && close(fd) != 0 && rc == 0)
        rc = -1, e = errno;
    if (rc == 0 && rename(tmp, final) != 0)
        rc = -1, e = errno;
    if (rc == 0)
        (void)fsync(dfd);
    else if (fd >= 0)
        smattn_io_err(err, errlen, "%s: cannot write: %s", smattn_io_path(final, q), strerror(e));
    if (tmp && rc)
        unlink(tmp);
    forget_temp(tmp);
    free(tmp);
    free(final);
    return rc;
}

/* Remove what an interrupted run left in OUT: its temporaries (a run killed by SIGKILL
 * or a power cut, or a signal that arrived before the handler was in place). Called with
 * OUT locked, so no live run is writing them. A file that cannot be removed (another
 * user's, in a sticky OUT) stays; it changes nothing. */
static void remove_stale_temps(const char *outdir, int dfd)
{
    DIR *d = opendir(outdir);
    struct dirent *e;
    while (d && (e = readdir(d))) {
        const char *n = e->d_name;
        for (int k = 0; k < N_TEMP_PREFIXES; k++) {
            size_t pl = strlen(temp_prefixes[k]);
            if (strncmp(n, temp_prefixes[k], pl) != 0 || strlen(n) != pl + 6)
                continue;
            int ok = 1;
            for (size_t i = pl; i < pl + 6; i++)
                ok &= (n[i] >= 'a' && n[i] <= 'z') || (n[i] >= 'A' && n[i] <= 'Z') ||
                      (n[i] >= '0' && n[i] <= '9');
            struct stat st;
            if (ok && fstatat(dfd, n, &st, AT_SYMLINK_NOFOLLOW) == 0 && S_ISREG(st.st_mode))
                (void)unlinkat(dfd, n, 0);
            break;
        }
    }
    if (d)
        closedir(d);
}

/* Switch OUT to the new set (the outputs are in their temporaries), with signals held:
 * the "writing" marker; the renames and the removal of stale outputs, OUT flushed; the
 * "whole" marker. 0, or -1 with err (after the "writing" marker, OUT then holds a set that
 * says it is not whole, and err says so). */
static int switch_set(const char *outdir, int dfd, set_file f[N_OUT], const char *writer, char *err,
                      size_t errlen)
{
    char q[SMATTN_IO_PATH_MAX];
    sigset_t old;
    hold_signals(&old);
    int rc = put_marker(outdir, dfd, "{\"smattn_set\": 1, \"state\": \"writing\"}\n", err, errlen);
    int started = rc == 0;
    for (int k = 0; rc == 0 && k < N_OUT; k++) {
        if (f[k].produced && rename(f[k].tmp, f[k].final) != 0) {
            smattn_io_err(err, errlen, "%s: cannot rename into place: %s",
                          smattn_io_path(f[k].final, q), strerror(errno));
            rc = -1;
        } else if (f[k].produced) {
            forget_temp(f[k].tmp);
            free(f[k].tmp);
            f[k].tmp = NULL;
        }
    }
    for (int k = 0; rc == 0 && k < N_OUT; k++)
        if (!f[k].produced && unlink(f[k].final) != 0 && errno != ENOENT) {
            smattn_io_err(err, errlen, "%s: cannot remove the stale output of an earlier run: %s",
                          smattn_io_path(f[k].final, q), strerror(errno));
            rc = -1;
        }
    if (rc == 0) {
        (void)fsync(dfd); /* the new outputs are on the disk before the marker says so */
        char text[1536];  /* eight entries of at most 80 bytes each */
        int n = snprintf(text, sizeof text, "{\"smattn_set\": 1, \"state\": \"whole\", ");
        if (writer)
            n += snprintf(text + n, sizeof text - (size_t)n, "\"writer\": \"%s\", ", writer);
        n += snprintf(text + n, sizeof text - (size_t)n, "\"files\": {");
        for (int k = 0, first = 1; k < N_OUT; k++)
            if (f[k].produced) {
                n +=
                    snprintf(text + n, sizeof text - (size_t)n,
                             "%s\"%s\": {\"bytes\": %llu, \"crc32\": %lu}", first ? "" : ", ",
                             out_names[k], (unsigned long long)f[k].bytes, (unsigned long)f[k].crc);
                first = 0;
            }
        snprintf(text + n, sizeof text - (size_t)n, "}}\n");
        rc = put_marker(outdir, dfd, text, err, errlen);
    }
    if (rc && started) {
        char why[600];
        snprintf(why, sizeof why, "%s", err);
        smattn_io_err(err, errlen,
                      "%s; OUT now holds an incomplete set, marked so in %s: run again", why,
                      SET_MARKER);
    }
    release_signals(&old);
    return rc;
}

int smattn_case_write_outputs(const smattn_case *c, const smattn_outputs *out, const char *outdir,
                              char *err, size_t errlen)
{
    return smattn_case_write_set(c, out, NULL, outdir, NULL, err, errlen);
}

int smattn_case_write_set(const smattn_case *c, const smattn_outputs *out,
                          const smattn_grad_outputs *g, const char *outdir, const char *writer,
                          char *err, size_t errlen)
{
    char q[SMATTN_IO_PATH_MAX];
    const smattn_out_tensor *ot[N_OUT] = {&out->o,
                                          &out->lse,
                                          &out->p,
                                          g ? &g->dq : NULL,
                                          g ? &g->dk : NULL,
                                          g ? &g->dv : NULL,
                                          g ? &g->dbias : NULL,
                                          g ? &g->dsinks : NULL};
    if (writer && strcmp(writer, "ref") != 0 && strcmp(writer, "opt") != 0) {
        smattn_io_err(err, errlen, "writer '%.20s' is not \"ref\" or \"opt\"", writer);
        return -1;
    }
    set_file f[N_OUT];
    memset(f, 0, sizeof f);
    int created, rc = -1;
    if (smattn_case_out_check(outdir, err, errlen) || make_outdir(outdir, &created, err, errlen))
        return -1;
    /* One run at a time writes into OUT: an exclusive lock on OUT itself, released when the
     * descriptor is closed or the process dies (never stale). A second run waits here. A
     * file system without such locks (some network ones) leaves the runs unserialised; the
     * marker's sizes and CRCs still tell a mix from a whole set. */
    int dfd = -1;
    for (int tries = 0;; tries++) {
        dfd = open(outdir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
        if (dfd < 0) {
            smattn_io_err(err, errlen, "%s: cannot open: %s", smattn_io_path(outdir, q),
                          strerror(errno));
            goto done;
        }
        while (flock(dfd, LOCK_EX) != 0 && errno == EINTR)
            ;
        /* OUT removed while this run waited (another run made it, failed and removed it
         * again): make it anew. */
        struct stat st;
        if (tries == 8 || (fstat(dfd, &st) == 0 && st.st_nlink > 0))
            break;
        close(dfd);
        dfd = -1;
        int again;
        if (make_outdir(outdir, &again, err, errlen))
            goto done;
        created |= again;
    }
    remove_stale_temps(outdir, dfd);
    if (check_replaceable(outdir, err, errlen)) /* again: OUT may have changed during the run */
        goto done;
    for (int k = 0; k < N_OUT; k++) {
        f[k].final = smattn_io_join_path(outdir, out_names[k]);
        if (!f[k].final) {
            smattn_io_err(err, errlen, "out of memory");
            goto done;
        }
        f[k].produced = ot[k] && ot[k]->data && (k != 0 || c->prob.op == SMATTN_OP_ATTENTION);
        if (!f[k].produced)
            continue;
        int64_t shape[4];
        int rank = out_shape(c, k, shape);
        if (write_temp(outdir, out_names[k], ot[k], rank, shape, &f[k], err, errlen))
            goto done;
    }
    rc = switch_set(outdir, dfd, f, writer, err, errlen);
done:
    for (int k = 0; k < N_OUT; k++) {
        if (f[k].tmp)
            remove(f[k].tmp);
        forget_temp(f[k].tmp);
        free(f[k].tmp);
        free(f[k].final);
    }
    if (rc && created)
        rmdir(outdir);
    if (dfd >= 0)
        close(dfd); /* the lock goes with it */
    return rc;
}

/* ---- reading a set ---------------------------------------------------------------------- */

/* An integer member of obj in [0, max], in *v; -1 if absent or not such an integer. */
static int member_uint(json_object *obj, const char *key, uint64_t max, uint64_t *v)
{
    json_object *m;
    if (!json_object_object_get_ex(obj, key, &m) || !json_object_is_type(m, json_type_int))
        return -1;
    errno = 0;
    int64_t i = json_object_get_int64(m);
    if (errno || i < 0 || (uint64_t)i > max)
        return -1;
    *v = (uint64_t)i;
    return 0;
}

int smattn_case_outputs_verify(const char *outdir, char *err, size_t errlen)
{
    return smattn_case_outputs_verify_writer(outdir, NULL, 0, err, errlen);
}

int smattn_case_outputs_verify_writer(const char *outdir, char *writer, size_t cap, char *err,
                                      size_t errlen)
{
    if (writer && cap)
        writer[0] = 0;
    char e2[300];
    struct stat st;
    char *mp = smattn_io_join_path(outdir, SET_MARKER), *text = NULL;
    json_object *j = NULL, *state, *files = NULL;
    int rc = -1;
    if (!mp) {
        smattn_io_err(err, errlen, "out of memory");
        return -1;
    }
    if (lstat(mp, &st) != 0 && errno == ENOENT) { /* unmarked: taken as it is */
        free(mp);
        return 0;
    }
    size_t len = 0;
    if (stat(mp, &st) != 0) {
        smattn_io_err(err, errlen, "%s: %s", SET_MARKER,
                      errno == ENOENT ? "is a dangling symbolic link" : strerror(errno));
        goto done;
    }
    if (!S_ISREG(st.st_mode)) {
        smattn_io_err(err, errlen, "%s: is not a regular file (the marker of the outputs' set)",
                      SET_MARKER);
        goto done;
    }
    text = smattn_io_read_text(mp, 1 << 16, &len, e2, sizeof e2);
    if (!text || !(j = smattn_io_parse_json(text, len, e2, sizeof e2))) {
        smattn_io_err(err, errlen, "%s: %s", SET_MARKER, e2);
        goto done;
    }
    uint64_t version;
    if (member_uint(j, "smattn_set", UINT64_MAX >> 1, &version) || version != 1 ||
        !json_object_object_get_ex(j, "state", &state) ||
        !json_object_is_type(state, json_type_string)) {
        smattn_io_err(err, errlen,
                      "%s: not a marker of an output set this smattn knows (want \"smattn_set\": "
                      "1 and a \"state\")",
                      SET_MARKER);
        goto done;
    }
    if (strcmp(json_object_get_string(state), "writing") == 0) {
        smattn_io_err(err, errlen,
                      "the outputs are not a whole set: %s says a run was replacing them and "
                      "did not finish (killed, or the machine stopped), so its outputs may mix "
                      "two runs; run it again",
                      SET_MARKER);
        goto done;
    }
    if (strcmp(json_object_get_string(state), "whole") != 0 ||
        !json_object_object_get_ex(j, "files", &files) ||
        !json_object_is_type(files, json_type_object)) {
        smattn_io_err(err, errlen,
                      "%s: state '%.20s' is not \"whole\" or \"writing\", or no "
                      "\"files\" object",
                      SET_MARKER, json_object_get_string(state));
        goto done;
    }
    int listed = 0;
    for (int k = 0; k < N_OUT; k++)
        listed += json_object_object_get_ex(files, out_names[k], NULL);
    if (listed != json_object_object_length(files)) {
        smattn_io_err(err, errlen, "%s: \"files\" names a file that is not an output", SET_MARKER);
        goto done;
    }
    for (int k = 0; k < N_OUT; k++) {
        json_object *fe;
        char *p = smattn_io_join_path(outdir, out_names[k]);
        if (!p) {
            smattn_io_err(err, errlen, "out of memory");
            goto done;
        }
        int bad = 0;
        if (!json_object_object_get_ex(files, out_names[k], &fe)) {
            if ((bad = lstat(p, &st) == 0 || errno != ENOENT))
                smattn_io_err(err, errlen,
                              "the outputs are not a whole set: %s is not in the set %s records "
                              "(written after it by another program?)",
                              out_names[k], SET_MARKER);
            free(p);
            if (bad)
                goto done;
            continue;
        }
        uint64_t bytes, want_crc, got_bytes = 0;
        uint32_t got_crc = 0;
        if (member_uint(fe, "bytes", UINT64_MAX >> 1, &bytes) ||
            member_uint(fe, "crc32", UINT32_MAX, &want_crc)) {
            smattn_io_err(err, errlen, "%s: %s has no \"bytes\" and \"crc32\" integers", SET_MARKER,
                          out_names[k]);
            free(p);
            goto done;
        }
        int fd = open(p, O_RDONLY | O_NONBLOCK); /* a FIFO must not block the reader */
        if (fd < 0 || fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
            smattn_io_err(
                err, errlen, "the outputs are not a whole set: %s is in the set %s records but %s",
                out_names[k], SET_MARKER, fd < 0 ? strerror(errno) : "is not a regular file");
            bad = 1;
        } else if ((uint64_t)st.st_size == bytes && file_crc(fd, &got_bytes, &got_crc) != 0) {
            smattn_io_err(err, errlen, "%s: cannot read: %s", out_names[k], strerror(errno));
            bad = 1;
        } else if ((uint64_t)st.st_size != bytes || got_bytes != bytes || got_crc != want_crc) {
            int same_size = (uint64_t)st.st_size == bytes && got_bytes == bytes;
            smattn_io_err(err, errlen,
                          "the outputs are not a whole set: %s differs from the one %s records "
                          "(%llu bytes, crc32 %08lx; now %llu bytes%s): changed after smattn "
                          "wrote the set, or a mix of two runs; run again, or remove %s if "
                          "another program wrote it on purpose",
                          out_names[k], SET_MARKER, (unsigned long long)bytes,
                          (unsigned long)want_crc,
                          (unsigned long long)(same_size ? got_bytes : (uint64_t)st.st_size),
                          same_size ? ", another crc32" : "", SET_MARKER);
            bad = 1;
        }
        if (fd >= 0)
            close(fd);
        free(p);
        if (bad)
            goto done;
    }
    json_object *wr;
    if (json_object_object_get_ex(j, "writer", &wr)) {
        const char *w =
            json_object_is_type(wr, json_type_string) ? json_object_get_string(wr) : NULL;
        if (!w || (strcmp(w, "ref") != 0 && strcmp(w, "opt") != 0)) {
            smattn_io_err(err, errlen, "%s: \"writer\" is not \"ref\" or \"opt\"", SET_MARKER);
            goto done;
        }
        if (writer && cap)
            snprintf(writer, cap, "%s", w);
    }
    rc = 0;
done:
    if (j)
        json_object_put(j);
    free(text);
    free(mp);
    return rc;
}
