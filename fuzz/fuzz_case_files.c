/* SPDX-License-Identifier: MIT */
/* fuzz_case_files.c: the .npy and case.json readers on arbitrary bytes. The first byte picks
 * the reader (even: smattn_npy_parse and smattn_npy_parse_header, odd:
 * smattn_case_json_parse); the rest is the file, copied into a buffer of exactly its size
 * so that ASan sees any read past it. A reader must return 0 with a coherent result, or
 * nonzero with a one-line message; anything else is a MISMATCH. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

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

static void check_err(const char *reader, const char *err, const uint8_t *d, size_t n)
{
    size_t len = strnlen(err, 256);
    if (len == 0 || len == 256 || strchr(err, '\n'))
        fail(reader, "an error without a one-line message", d, n);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size == 0)
        return 0;
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
            check_err("npy", err, buf, n);
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
            check_err("npy", err, buf, n);
            if (a.data)
                fail("npy", "data left after a failure", buf, n);
        }
    } else {
        smattn_case_json cj;
        memset(err, 0, sizeof err);
        if (smattn_case_json_parse((const char *)buf, n, &cj, err, sizeof err) == 0) {
            if ((cj.n_kv_lens && !cj.kv_lens) || (cj.n_q_lens && !cj.q_lens) ||
                (cj.n_sinks && !cj.sinks))
                fail("case_json", "incoherent result", buf, n);
            volatile double sum = 0;
            for (size_t i = 0; i < cj.n_kv_lens; i++)
                sum += (double)cj.kv_lens[i];
            for (size_t i = 0; i < cj.n_q_lens; i++)
                sum += (double)cj.q_lens[i];
            for (size_t i = 0; i < cj.n_sinks; i++)
                sum += cj.sinks[i];
            (void)sum;
            smattn_case_json_free(&cj);
        } else {
            check_err("case_json", err, buf, n);
        }
    }
    free(buf);
    return 0;
}
