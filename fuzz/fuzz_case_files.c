/* SPDX-License-Identifier: MIT */
/* fuzz_case_files.c: the .npy and case.json readers on arbitrary bytes. The first byte picks
 * the reader (even: smattn_npy_parse and smattn_npy_parse_header, 7 mod 8: a layout case,
 * other odd: smattn_case_json_parse); the rest is the file, copied into a buffer of exactly
 * its size so that ASan sees any read past it. A reader must return 0 with a coherent
 * result, or nonzero with a one-line message; anything else is a MISMATCH.
 *
 * Layout cases (SPEC 7.1): the second byte picks one of four case directories with fixed
 * q/k/v.npy (packed q [8,4,16] over NHD pages [6,4,2,16], the same over HND pages
 * [6,2,4,16], packed q and k [13,2,16], a dense q [3,1,4,16] over NHD pages); the bytes up
 * to the first NUL are its case.json, those after it its block_table.npy (none: no file).
 * smattn_case_load must refuse with one line, or accept a case whose every layout read
 * stays inside its arrays (the dense twin gathers them all, under ASan), whose twin
 * validates, and whose descriptor the library does not call inconsistent. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "fuzz/common/fuzz_input.h"
#include "io/case.h"
#include "io/npy.h"

static void fail(const char *reader, const char *what, const uint8_t *data, size_t size)
{
    fprintf(stderr, "MISMATCH fuzz_case_files %s\ncheck: %s\ninput (%zu bytes):", reader, what,
            size);
    for (size_t i = 0; i < size; i++)
        fprintf(stderr, "%s%02x", i % 32 ? " " : "\n  ", data[i]);
    fprintf(stderr, "\n");
    abort();
}

static void check_err(const char *reader, const char *err, size_t cap, const uint8_t *d, size_t n)
{
    size_t len = strnlen(err, cap);
    if (len == 0 || len == cap || strchr(err, '\n'))
        fail(reader, "an error without a one-line message", d, n);
}

/* The four case directories of the layout mode, made once per process. */
static char layout_root[64];
static const char *const layout_names[4] = {"paged_nhd", "paged_hnd", "packed", "dense_q"};

static int put_f32(const char *dir, const char *name, int rank, const int64_t *shape)
{
    float x[13 * 4 * 16];
    for (size_t e = 0; e < sizeof x / sizeof x[0]; e++)
        x[e] = (float)(e % 11) / 8.0f - 0.5f;
    char p[256], err[256];
    snprintf(p, sizeof p, "%s/%s", dir, name);
    return smattn_npy_write(p, SMATTN_NPY_F32, rank, shape, x, err, sizeof err);
}

static void remove_layout_dirs(void)
{
    static const char *const files[5] = {"q.npy", "k.npy", "v.npy", "case.json", "block_table.npy"};
    for (int t = 0; t < 4; t++) {
        char p[256];
        for (int f = 0; f < 5; f++) {
            snprintf(p, sizeof p, "%s/%s/%s", layout_root, layout_names[t], files[f]);
            unlink(p);
        }
        snprintf(p, sizeof p, "%s/%s", layout_root, layout_names[t]);
        rmdir(p);
    }
    rmdir(layout_root);
}

static int make_layout_dirs(void)
{
    if (layout_root[0])
        return 0;
    snprintf(layout_root, sizeof layout_root, "/tmp/smattn_fuzz_layout_XXXXXX");
    if (!mkdtemp(layout_root))
        return layout_root[0] = 0, -1;
    atexit(remove_layout_dirs);
    for (int t = 0; t < 4; t++) {
        char d[128];
        snprintf(d, sizeof d, "%s/%s", layout_root, layout_names[t]);
        int hnd = t == 1;
        int64_t kp[4] = {6, hnd ? 2 : 4, hnd ? 4 : 2, 16}, vp[4] = {6, kp[1], kp[2], 8};
        if (mkdir(d, 0700) ||
            (t == 3 ? put_f32(d, "q.npy", 4, (int64_t[]){3, 1, 4, 16})
                    : put_f32(d, "q.npy", 3, (int64_t[]){8, 4, 16})) ||
            (t == 2 ? put_f32(d, "k.npy", 3, (int64_t[]){13, 2, 16}) ||
                          put_f32(d, "v.npy", 3, (int64_t[]){13, 2, 8})
                    : put_f32(d, "k.npy", 4, kp) || put_f32(d, "v.npy", 4, vp)))
            return -1;
    }
    return 0;
}

static void put_or_remove(const char *dir, const char *name, const uint8_t *d, size_t n, int put)
{
    char p[256];
    snprintf(p, sizeof p, "%s/%s", dir, name);
    unlink(p);
    if (!put)
        return;
    FILE *f = fopen(p, "wb");
    if (f) {
        if (n)
            fwrite(d, 1, n, f);
        fclose(f);
    }
}

static void layout_case(const uint8_t *buf, size_t n)
{
    if (n == 0 || make_layout_dirs())
        return;
    char dir[128];
    snprintf(dir, sizeof dir, "%s/%s", layout_root, layout_names[buf[0] % 4]);
    const uint8_t *text = buf + 1, *nul = memchr(text, 0, n - 1);
    size_t tlen = nul ? (size_t)(nul - text) : n - 1;
    put_or_remove(dir, "case.json", text, tlen, tlen > 0);
    put_or_remove(dir, "block_table.npy", nul ? nul + 1 : NULL, nul ? n - 1 - tlen - 1 : 0,
                  nul != NULL);
    smattn_case c;
    char err[512] = "";
    if (smattn_case_load(dir, &c, err, sizeof err)) {
        check_err("layout", err, sizeof err, buf, n);
        return;
    }
    if (c.has_layout != (c.prob.layout != NULL) ||
        (c.has_layout &&
         (c.prob.layout != &c.layout || c.prob.B < 1 || c.prob.S < 1 || c.prob.T < 1)))
        fail("layout", "incoherent case", buf, n);
    smattn_case_twin tw;
    if (smattn_case_twin_make(&c, &tw, err, sizeof err) == 0) { /* reads every used key */
        smattn_outputs out;
        smattn_status st = smattn_case_outputs_alloc(
            &c, SMATTN_F32, SMATTN_CASE_OUT_O | SMATTN_CASE_OUT_LSE, &out, err, sizeof err);
        /* what io accepted the library must not call inconsistent (UNSUPPORTED: a library
         * that does not read layouts yet) */
        if (st != SMATTN_OK && st != SMATTN_ERR_UNSUPPORTED && st != SMATTN_ERR_NOMEM)
            fail("layout", "the library refuses a case io accepted", buf, n);
        if (st == SMATTN_OK) {
            smattn_outputs dense;
            if (smattn_case_twin_outputs(&c, &out, NULL, &dense) == 0) {
                if (smattn_validate(&tw.prob, &tw.in, &dense) != SMATTN_OK)
                    fail("layout", "the dense twin does not validate", buf, n);
                smattn_case_twin_outputs_free(&dense);
            }
            smattn_case_outputs_free(&out);
        }
        smattn_case_twin_free(&tw);
    }
    smattn_case_free(&c);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size == 0)
        return 0;
    if (data[0] % 8 == 7) {
        uint8_t *b = malloc(size - 1 ? size - 1 : 1);
        if (b) {
            memcpy(b, data + 1, size - 1);
            layout_case(b, size - 1);
        }
        free(b);
        return 0;
    }
    size_t n = size - 1;
    uint8_t *buf = malloc(n ? n : 1);
    if (!buf)
        return 0;
    memcpy(buf, data + 1, n);
    char err[256];
    if (data[0] % 2 == 0) {
        smattn_npy a;
        memset(err, 0, sizeof err);
        if (smattn_npy_parse_header(buf, n, &a, err, sizeof err) == 0) {
            if (a.rank < 0 || a.rank > SMATTN_NPY_MAX_RANK || a.data_offset > n || a.data ||
                a.itemsize != smattn_npy_type_size(a.type))
                fail("npy", "incoherent header", buf, n);
        } else {
            check_err("npy", err, sizeof err, buf, n);
        }
        memset(err, 0, sizeof err);
        memset(&a, 0, sizeof a);
        if (smattn_npy_parse(buf, n, &a, err, sizeof err) == 0) {
            int64_t count = 1;
            for (int k = 0; k < a.rank; k++)
                count *= a.shape[k];
            if (a.rank < 0 || a.rank > SMATTN_NPY_MAX_RANK || count != a.count ||
                a.data_offset + (size_t)a.count * a.itemsize != n || (a.count > 0 && !a.data))
                fail("npy", "incoherent array", buf, n);
            volatile unsigned sum = 0; /* touch every byte the reader says it owns */
            for (size_t i = 0; i < (size_t)a.count * a.itemsize; i++)
                sum += ((const unsigned char *)a.data)[i];
            (void)sum;
            smattn_npy_free(&a);
        } else {
            check_err("npy", err, sizeof err, buf, n);
            if (a.data)
                fail("npy", "data left after a failure", buf, n);
        }
    } else {
        smattn_case_json cj;
        memset(err, 0, sizeof err);
        if (smattn_case_json_parse((const char *)buf, n, &cj, err, sizeof err) == 0) {
            if ((cj.n_kv_lens && !cj.kv_lens) || (cj.n_q_lens && !cj.q_lens) ||
                (cj.n_sinks && !cj.sinks) || (cj.n_cu_seqlens_q && !cj.cu_seqlens_q) ||
                (cj.n_cu_seqlens_k && !cj.cu_seqlens_k) || (cj.n_seqused_k && !cj.seqused_k) ||
                (cj.n_kv_indptr && !cj.kv_indptr) || (cj.n_kv_indices && !cj.kv_indices) ||
                (cj.n_kv_last_page_len && !cj.kv_last_page_len) || cj.kv_hnd > 1)
                fail("case_json", "incoherent result", buf, n);
            volatile double sum = 0;
            for (size_t i = 0; i < cj.n_kv_lens; i++)
                sum += (double)cj.kv_lens[i];
            for (size_t i = 0; i < cj.n_q_lens; i++)
                sum += (double)cj.q_lens[i];
            for (size_t i = 0; i < cj.n_sinks; i++)
                sum += cj.sinks[i];
            const int64_t *lists[6] = {cj.cu_seqlens_q, cj.cu_seqlens_k, cj.seqused_k,
                                       cj.kv_indptr,    cj.kv_indices,   cj.kv_last_page_len};
            const size_t counts[6] = {cj.n_cu_seqlens_q, cj.n_cu_seqlens_k, cj.n_seqused_k,
                                      cj.n_kv_indptr,    cj.n_kv_indices,   cj.n_kv_last_page_len};
            for (int l = 0; l < 6; l++)
                for (size_t i = 0; i < counts[l]; i++)
                    sum += (double)lists[l][i];
            (void)sum;
            smattn_case_json_free(&cj);
        } else {
            check_err("case_json", err, sizeof err, buf, n);
        }
    }
    free(buf);
    return 0;
}
