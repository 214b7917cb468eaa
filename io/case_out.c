/* SPDX-License-Identifier: MIT */
/* case_out.c: the outputs of a case: allocation in the case's shapes and the writer of
 * OUT/o.npy, lse.npy, p.npy. */
#include <errno.h>
#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "io/case.h"
#include "io/util.h"

/* Output shapes in the case's convention: rank 4 [B,...] or rank 3 without B. */
static int out_shape(const smattn_case *c, int which, int64_t shape[4])
{
    const smattn_problem *p = &c->prob;
    int64_t full[3][4] = {
        {p->B, p->S, p->Hq, p->Dv}, {p->B, p->Hq, p->S, 0}, {p->B, p->Hq, p->S, p->T}};
    int rank = which == 1 ? 3 : 4;
    int drop = c->rank == 3;
    for (int r = drop; r < rank; r++)
        shape[r - drop] = full[which][r];
    return rank - drop;
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

int smattn_case_outputs_check(const smattn_case *c, smattn_dtype t, unsigned which, char *err,
                              size_t errlen)
{
    static const char *const names[3] = {"o", "lse", "p"};
    size_t es = smattn_dtype_size(t);
    if (es == 0)
        return 0; /* smattn_case_outputs_alloc reports the dtype */
    long pages = sysconf(_SC_PHYS_PAGES), psize = sysconf(_SC_PAGESIZE);
    double phys = pages > 0 && psize > 0 ? (double)pages * (double)psize : 0;
    for (int k = 0; k < 3; k++) {
        if (!(which >> k & 1) || (k == 0 && c->prob.op != SMATTN_OP_ATTENTION))
            continue;
        int64_t shape[4];
        int rank = out_shape(c, k, shape);
        double elems = 1; /* in binary64: only the message needs the exact size */
        for (int r = 0; r < rank; r++)
            elems *= (double)shape[r];
        if (shape_count(shape, rank, es) >= 0 && (phys == 0 || elems * (double)es <= phys))
            continue;
        smattn_io_err(err, errlen, "%s.npy would need %.4g elements (%.4g bytes): too large%s",
                      names[k], elems, elems * (double)es,
                      phys > 0 ? " (more than the machine's memory)" : "");
        return -1;
    }
    return 0;
}

smattn_status smattn_case_outputs_alloc(const smattn_case *c, smattn_dtype t, unsigned which,
                                        smattn_outputs *out, char *err, size_t errlen)
{
    static const char *const names[3] = {"o", "lse", "p"};
    static const char roles[3] = {'o', 'l', 'p'};
    memset(out, 0, sizeof *out);
    smattn_out_tensor *ot[3] = {&out->o, &out->lse, &out->p};
    size_t es = smattn_dtype_size(t);
    if (es == 0 || t == SMATTN_BOOL) {
        smattn_io_err(err, errlen, "output dtype %d is not a float type", (int)t);
        return SMATTN_ERR_DTYPE;
    }
    for (int k = 0; k < 3; k++) {
        if (!(which >> k & 1) || (k == 0 && c->prob.op != SMATTN_OP_ATTENTION))
            continue;
        int64_t shape[4];
        int rank = out_shape(c, k, shape);
        int64_t n = shape_count(shape, rank, es);
        if (n < 0) {
            smattn_io_err(err, errlen, "%s.npy: the output has too many elements to allocate",
                          names[k]);
            smattn_case_outputs_free(out);
            return SMATTN_ERR_OVERFLOW;
        }
        ot[k]->data = calloc((size_t)n ? (size_t)n : 1, es);
        if (!ot[k]->data) {
            smattn_io_err(err, errlen, "%s.npy: out of memory for %lld elements of %s", names[k],
                          (long long)n, smattn_dtype_name(t));
            smattn_case_outputs_free(out);
            return SMATTN_ERR_NOMEM;
        }
        ot[k]->dtype = t;
        smattn_contiguous_strides(&c->prob, roles[k], ot[k]->stride);
    }
    smattn_status st = smattn_validate(&c->prob, &c->in, out);
    if (st != SMATTN_OK) {
        smattn_io_err(err, errlen, "case: %s (%s)", smattn_status_str(st), smattn_status_name(st));
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

/* The names a run manages in OUT: each is written by the run or, if the run does not
 * produce it, removed as stale, so OUT never holds outputs of two runs. */
static const char *const out_names[3] = {"o.npy", "lse.npy", "p.npy"};

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
        /* Made and removed at once: the only sure test that it can be made. */
        if (mkdir(outdir, 0777) != 0) {
            smattn_io_err(err, errlen, "%s: cannot create directory: %s", shown, strerror(errno));
            return -1;
        }
        rmdir(outdir);
        return 0;
    }
    if (!S_ISDIR(st.st_mode)) {
        smattn_io_err(err, errlen, "%s: exists and is not a directory", shown);
        return -1;
    }
    for (int k = 0; k < 3; k++) {
        char *p = smattn_io_join_path(outdir, out_names[k]);
        if (!p) {
            smattn_io_err(err, errlen, "out of memory");
            return -1;
        }
        int dir = lstat(p, &st) == 0 && S_ISDIR(st.st_mode);
        if (dir)
            smattn_io_err(err, errlen,
                          "%s: is a directory where a run writes an output or removes a "
                          "stale one; move it away",
                          smattn_io_path(p, q2));
        free(p);
        if (dir)
            return -1;
    }
    /* A file made and removed at once: the only sure test that OUT takes files (permissions,
     * a read-only file system, ACLs, root). */
    char *probe = smattn_io_join_path(outdir, ".smattn_probe.XXXXXX");
    if (!probe) {
        smattn_io_err(err, errlen, "out of memory");
        return -1;
    }
    int fd = mkstemp(probe);
    if (fd < 0)
        smattn_io_err(err, errlen, "%s: cannot write into it: %s", shown, strerror(errno));
    else {
        close(fd);
        unlink(probe);
    }
    free(probe);
    return fd < 0 ? -1 : 0;
}

/* Make OUT if missing; *created says whether this call made it. */
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
        smattn_io_err(err, errlen, "%s: cannot create directory: %s", smattn_io_path(outdir, q),
                      strerror(errno));
        return -1;
    }
    *created = 1;
    return 0;
}

/* The temporaries that exist now, for a signal handler to remove (smattn_case_remove_temps):
 * a slot is set once its file exists and cleared before the path is freed. */
static char *volatile live_temps[3];

void smattn_case_remove_temps(void)
{
    for (int k = 0; k < 3; k++) {
        char *p = live_temps[k];
        if (p)
            unlink(p);
    }
}

static void forget_temp(const char *path)
{
    for (int k = 0; path && k < 3; k++)
        if (live_temps[k] == path)
            live_temps[k] = NULL;
}

/* Write one output to a fresh temporary file in OUT, flushed to the disk (so that a crash
 * after the rename cannot leave an empty output); its path goes to *tmp. */
static int write_temp(const char *outdir, const char *name, const smattn_out_tensor *t, int rank,
                      const int64_t *shape, char **tmp, char *err, size_t errlen)
{
    char q[SMATTN_IO_PATH_MAX];
    size_t n = strlen(outdir) + strlen(name) + 16;
    char *path = malloc(n);
    if (!path) {
        smattn_io_err(err, errlen, "out of memory");
        return -1;
    }
    snprintf(path, n, "%s/.%s.XXXXXX", outdir, name);
    int fd = mkstemp(path);
    if (fd < 0) {
        smattn_io_err(err, errlen, "%s: cannot create a temporary file: %s",
                      smattn_io_path(outdir, q), strerror(errno));
        free(path);
        return -1;
    }
    (void)fchmod(fd, 0644); /* mkstemp makes 0600; outputs are ordinary files */
    close(fd);
    *tmp = path;
    for (int k = 0; k < 3; k++)
        if (!live_temps[k]) {
            live_temps[k] = path;
            break;
        }
    if (smattn_npy_write(path, smattn_npy_type_of(t->dtype), rank, shape, t->data, err, errlen)) {
        smattn_io_err_prefix(err, errlen, name);
        return -1;
    }
    fd = open(path, O_RDONLY);
    if (fd < 0 || fsync(fd) != 0) {
        smattn_io_err(err, errlen, "%s: cannot flush to disk: %s", name, strerror(errno));
        if (fd >= 0)
            close(fd);
        return -1;
    }
    close(fd);
    return 0;
}

/* fsync OUT itself, so that the renames are on the disk too; best effort (some file systems
 * refuse a directory fsync). */
static void sync_dir(const char *outdir)
{
    int fd = open(outdir, O_RDONLY | O_DIRECTORY);
    if (fd >= 0) {
        (void)fsync(fd);
        close(fd);
    }
}

int smattn_case_write_outputs(const smattn_case *c, const smattn_outputs *out, const char *outdir,
                              char *err, size_t errlen)
{
    const smattn_out_tensor *ot[3] = {&out->o, &out->lse, &out->p};
    char *tmp[3] = {NULL, NULL, NULL}, *final[3] = {NULL, NULL, NULL};
    int created, rc = -1, k;
    if (smattn_case_out_check(outdir, err, errlen) || make_outdir(outdir, &created, err, errlen))
        return -1;
    for (k = 0; k < 3; k++) {
        final[k] = smattn_io_join_path(outdir, out_names[k]);
        if (!final[k]) {
            smattn_io_err(err, errlen, "out of memory");
            break;
        }
        if (!ot[k]->data || (k == 0 && c->prob.op != SMATTN_OP_ATTENTION))
            continue;
        int64_t shape[4];
        int rank = out_shape(c, k, shape);
        if (write_temp(outdir, out_names[k], ot[k], rank, shape, &tmp[k], err, errlen))
            break;
    }
    /* Every output is written: now the renames, then the stale outputs of an earlier run go.
     * OUT and its targets were checked just before, so only a race can fail here. */
    for (rc = k == 3 ? 0 : -1, k = 0; rc == 0 && k < 3; k++) {
        char q[SMATTN_IO_PATH_MAX];
        if (tmp[k] && rename(tmp[k], final[k]) != 0) {
            smattn_io_err(err, errlen, "%s: cannot rename into place: %s",
                          smattn_io_path(final[k], q), strerror(errno));
            rc = -1;
        } else if (tmp[k]) {
            forget_temp(tmp[k]);
            free(tmp[k]);
            tmp[k] = NULL;
        }
    }
    for (k = 0; rc == 0 && k < 3; k++) {
        int produced = ot[k]->data && (k != 0 || c->prob.op == SMATTN_OP_ATTENTION);
        if (!produced && unlink(final[k]) != 0 && errno != ENOENT) {
            char q[SMATTN_IO_PATH_MAX];
            smattn_io_err(err, errlen, "%s: cannot remove the stale output of an earlier run: %s",
                          smattn_io_path(final[k], q), strerror(errno));
            rc = -1;
        }
    }
    for (k = 0; k < 3; k++) {
        if (tmp[k])
            remove(tmp[k]);
        forget_temp(tmp[k]);
        free(tmp[k]);
        free(final[k]);
    }
    if (rc && created)
        rmdir(outdir);
    if (rc == 0)
        sync_dir(outdir);
    return rc;
}
