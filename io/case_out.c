/* case_out.c: the outputs of a case: allocation in the case's shapes and the writer of
 * OUT/o.npy, lse.npy, p.npy. */
#include <errno.h>
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

/* Make OUT if missing; *created says whether this call made it. */
static int make_outdir(const char *outdir, int *created, char *err, size_t errlen)
{
    struct stat st;
    *created = 0;
    if (stat(outdir, &st) == 0) {
        if (S_ISDIR(st.st_mode))
            return 0;
        smattn_io_err(err, errlen, "%s: exists and is not a directory", outdir);
        return -1;
    }
    if (mkdir(outdir, 0777) != 0) {
        smattn_io_err(err, errlen, "%s: cannot create directory: %s", outdir, strerror(errno));
        return -1;
    }
    *created = 1;
    return 0;
}

/* Write one output to a fresh temporary file in OUT; its path goes to *tmp. */
static int write_temp(const char *outdir, const char *name, const smattn_out_tensor *t, int rank,
                      const int64_t *shape, char **tmp, char *err, size_t errlen)
{
    size_t n = strlen(outdir) + strlen(name) + 16;
    char *path = malloc(n);
    if (!path) {
        smattn_io_err(err, errlen, "out of memory");
        return -1;
    }
    snprintf(path, n, "%s/.%s.XXXXXX", outdir, name);
    int fd = mkstemp(path);
    if (fd < 0) {
        smattn_io_err(err, errlen, "%s: cannot create a temporary file: %s", outdir,
                      strerror(errno));
        free(path);
        return -1;
    }
    (void)fchmod(fd, 0644); /* mkstemp makes 0600; outputs are ordinary files */
    close(fd);
    *tmp = path;
    if (smattn_npy_write(path, smattn_npy_type_of(t->dtype), rank, shape, t->data, err, errlen)) {
        smattn_io_err_prefix(err, errlen, name);
        return -1;
    }
    return 0;
}

int smattn_case_write_outputs(const smattn_case *c, const smattn_outputs *out, const char *outdir,
                              char *err, size_t errlen)
{
    static const char *const names[3] = {"o.npy", "lse.npy", "p.npy"};
    const smattn_out_tensor *ot[3] = {&out->o, &out->lse, &out->p};
    char *tmp[3] = {NULL, NULL, NULL};
    int created, rc = -1;
    if (make_outdir(outdir, &created, err, errlen))
        return -1;
    int k;
    for (k = 0; k < 3; k++) {
        if (!ot[k]->data || (k == 0 && c->prob.op != SMATTN_OP_ATTENTION))
            continue;
        int64_t shape[4];
        int rank = out_shape(c, k, shape);
        if (write_temp(outdir, names[k], ot[k], rank, shape, &tmp[k], err, errlen))
            break;
    }
    if (k == 3) {
        rc = 0;
        for (k = 0; k < 3 && rc == 0; k++) {
            char *final = tmp[k] ? smattn_io_join_path(outdir, names[k]) : NULL;
            if (tmp[k] && (!final || rename(tmp[k], final) != 0)) {
                smattn_io_err(err, errlen, "%s: cannot rename into %s: %s", names[k], outdir,
                              final ? strerror(errno) : "out of memory");
                rc = -1;
            } else if (tmp[k]) {
                free(tmp[k]);
                tmp[k] = NULL;
            }
            free(final);
        }
    }
    for (k = 0; k < 3; k++) {
        if (tmp[k])
            remove(tmp[k]);
        free(tmp[k]);
    }
    if (rc && created)
        rmdir(outdir);
    return rc;
}
