/* SPDX-License-Identifier: MIT */
/* gen_seeds.c: writes the committed seed corpus of a fuzz target into a directory.
 *   gen_seeds fuzz_diff|fuzz_diff_long|fuzz_dtypes|fuzz_ref_props|fuzz_decode_prefill|
 *             fuzz_api|fuzz_case_files|fuzz_merge|fuzz_backward DIR
 *   gen_seeds fuzz_dtypes DIR FILE...  also each FILE (a fuzz_diff input) as is and with
 *             two dtype choices (from-<name>, from-<name>-<qx>-<bias>-<out>)
 * fuzz_diff, fuzz_ref_props, fuzz_decode_prefill (one decoder, one seed set): a deterministic random search over byte strings, keeping an input whenever it
 * decodes to a problem with a feature value (shape class, op, D, Dv, K/V dtype, causal,
 * GQA ratio, bias, mask, sinks, softcap, lengths, window, threads, value mode, empty-row
 * convention) seen fewer than twice; so every shape class is covered. fuzz_diff_long: the
 * same search over the inputs it takes (decode rows it stretches, fuzz_diff_long_T), judged
 * on the problem after its cut, 40 of them (each costs 5-50 ms). fuzz_dtypes: the same
 * search, 40 inputs, each rewritten (with_dtypes) to decode to the same problem followed by
 * its three dtype choices, cycling through the 27 combinations. fuzz_api: those
 * inputs, some with corruption operations appended at the tail. fuzz_case_files: valid
 * .npy files of every type and rank, and case.json texts. fuzz_backward: the decoder's
 * inputs with its six choice bytes appended (read first from the tail: c0, c1, then a
 * 32-bit seed), c0 and c1 cycling through dLSE, binary32 outputs, special values in dO and
 * the planted validation errors. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fuzz/common/fuzz_check.h"
#include "fuzz/common/fuzz_input.h"
#include "io/npy.h"

static uint64_t rs = 0x5EED5EED;
static uint32_t rnd(void)
{
    rs ^= rs << 13, rs ^= rs >> 7, rs ^= rs << 17;
    return (uint32_t)(rs >> 11);
}

static void put(const char *dir, const char *name, const uint8_t *d, size_t n)
{
    char path[4096];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    FILE *f = fopen(path, "wb");
    if (!f || fwrite(d, 1, n, f) != n || fclose(f)) {
        fprintf(stderr, "gen_seeds: cannot write %s\n", path);
        exit(1);
    }
}

#define NFEAT 17
static int seen[NFEAT][128];

static int features(const fuzz_problem *fp, int f[NFEAT])
{
    const smattn_problem *p = &fp->p;
    int k = 0;
    f[k++] = fp->shape_class;
    f[k++] = (int)p->op;
    f[k++] = (int)p->D;
    f[k++] = (int)p->Dv;
    f[k++] = (int)fp->in.k.dtype;
    f[k++] = (int)p->causal;
    f[k++] = fp->gqa;
    f[k++] = fp->bias_kind;
    f[k++] = fp->mask_kind;
    f[k++] = fp->sinks != NULL;
    f[k++] = p->softcap > 0;
    f[k++] = (p->kv_lens != NULL) + 2 * (p->q_lens != NULL);
    f[k++] = (p->window_left >= 0) + 2 * (p->window_right >= 0);
    f[k++] = fp->threads;
    f[k++] = fp->value_mode;
    f[k++] = (int)p->empty_rows;
    f[k++] = (int)p->empty_lse;
    return k;
}

enum { GEN_PLAIN, GEN_API, GEN_LONG, GEN_DTYPES, GEN_BACKWARD };

/* fuzz_problem_print's text (malloc'd), for comparing two decoded problems. */
static char *printed(const fuzz_problem *fp)
{
    char *txt = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&txt, &len);
    if (!f)
        exit(1);
    fuzz_problem_print(f, fp);
    fclose(f);
    return txt;
}

/* fuzz_dtypes: into out (at most cap bytes) an input that decodes to the same problem as
 * base[0, n), followed by the dtype choices qx, bias, out (0 f16, 1 bf16, 2 f32; see
 * fuzz_take_dtypes). The decoder copies the front bytes raw over the tensors, so the front
 * is the decoded tensors' own bytes (written back unchanged), then the choice bytes, then
 * the tail bytes the decoder read from base, the missing ones (read as 0) made explicit.
 * Returns the length, or 0 if it does not fit. Checked by decoding it again. */
static size_t with_dtypes(const uint8_t *base, size_t n, const int choice[3], uint8_t *out,
                          size_t cap)
{
    fuzz_provider dp;
    fuzz_problem fp;
    fuzz_provider_init(&dp, base, n);
    if (fuzz_problem_decode(&fp, &dp))
        exit(1);
    size_t tl = n - dp.hi; /* tail bytes read from base */
    /* how many tail bytes the decoder reads in all: the same tail behind zeros */
    uint8_t z[1024] = {0};
    size_t zl = sizeof z - tl;
    memcpy(z + zl, base + dp.hi, tl);
    fuzz_provider dz;
    fuzz_problem fz;
    fuzz_provider_init(&dz, z, sizeof z);
    if (fuzz_problem_decode(&fz, &dz))
        exit(1);
    size_t reads = sizeof z - dz.hi, m = reads - tl;
    fuzz_problem_free(&fz);
    const int att = fp.p.op == SMATTN_OP_ATTENTION;
    size_t kvs = att ? smattn_dtype_size(fp.in.k.dtype) : 0;
    struct {
        const void *buf;
        size_t bytes;
    } img[5] = {{att ? (void *)fp.q : (void *)fp.x, (att ? fp.nq : fp.nx) * sizeof(float)},
                {fp.k, fp.nk * kvs},
                {fp.v, fp.nv * kvs},
                {fp.bias, fp.nbias * sizeof(float)},
                {fp.sinks, fp.sinks ? (size_t)fp.p.Hq * sizeof(float) : 0}};
    size_t len = 0;
    for (int k = 0; k < 5; k++)
        len += img[k].bytes;
    if (len + 3 + reads > cap) {
        fuzz_problem_free(&fp);
        return 0;
    }
    len = 0;
    for (int k = 0; k < 5; k++)
        if (img[k].bytes)
            memcpy(out + len, img[k].buf, img[k].bytes), len += img[k].bytes;
    out[len++] = (uint8_t)choice[2]; /* read last */
    out[len++] = (uint8_t)choice[1];
    out[len++] = (uint8_t)choice[0]; /* read first */
    memset(out + len, 0, m), len += m;
    memcpy(out + len, base + dp.hi, tl), len += tl;
    /* the check: the same problem, and exactly the three choices left */
    fuzz_provider d2;
    fuzz_problem f2;
    fuzz_provider_init(&d2, out, len);
    if (fuzz_problem_decode(&f2, &d2))
        exit(1);
    f2.raw_bytes = fp.raw_bytes;
    char *a = printed(&fp), *b = printed(&f2);
    if (strcmp(a, b) != 0 || fuzz_remaining(&d2) != 3) {
        fprintf(stderr, "gen_seeds: with_dtypes changed the problem\n");
        exit(1);
    }
    free(a), free(b);
    fuzz_problem_free(&fp), fuzz_problem_free(&f2);
    return len;
}

static void gen_problems(const char *dir, int mode)
{
    int kept = 0, max_kept = mode == GEN_LONG || mode == GEN_DTYPES ? 40 : 120;
    uint8_t buf[256];
    static uint8_t dbuf[4096]; /* fuzz_dtypes.options: max_len = 4096 */
    for (int tries = 0; tries < 200000 && kept < max_kept; tries++) {
        size_t n = 8 + rnd() % 56;
        for (size_t i = 0; i < n; i++)
            buf[i] = (uint8_t)rnd();
        fuzz_provider dp;
        fuzz_provider_init(&dp, buf, n);
        fuzz_problem fp;
        if (fuzz_problem_decode(&fp, &dp))
            exit(1);
        if (mode == GEN_LONG) {
            if (fuzz_problem_shrink(&fp, FUZZ_DIFF_MAX_P))
                exit(1);
            if (!fuzz_diff_long_T(&fp)) {
                fuzz_problem_free(&fp);
                continue;
            }
        }
        int f[NFEAT], nf = features(&fp, f), fresh = 0;
        for (int k = 0; k < nf; k++)
            fresh |= seen[k][f[k] & 127] < 2;
        size_t dlen = 0;
        if (fresh && mode == GEN_DTYPES) {
            int choice[3] = {kept % 3, kept / 3 % 3, kept / 9 % 3};
            if (!(dlen = with_dtypes(buf, n, choice, dbuf, sizeof dbuf)))
                fresh = 0; /* too large for max_len */
        }
        if (fresh) {
            for (int k = 0; k < nf; k++)
                seen[k][f[k] & 127]++;
            size_t len = n;
            if (mode == GEN_API) { /* a count and 8 bytes per operation, from the tail */
                int nops = kept % 4 == 0 ? 0 : 1 + (int)(rnd() % 6);
                for (int i = 0; i < nops * 8; i++)
                    buf[len++] = (uint8_t)rnd();
                buf[len++] = (uint8_t)nops;
            }
            if (mode == GEN_BACKWARD) { /* the seed, c1, c0: the tail is read from its end */
                for (int i = 0; i < 4; i++)
                    buf[len++] = (uint8_t)rnd();
                buf[len++] = (uint8_t)(kept / 8 % 8);
                buf[len++] = (uint8_t)(kept % 8);
            }
            char name[64];
            snprintf(name, sizeof name, "seed-%03d-%s", kept, fuzz_shape_class_name(fp.shape_class));
            if (mode == GEN_DTYPES)
                put(dir, name, dbuf, dlen);
            else
                put(dir, name, buf, len);
            kept++;
        }
        fuzz_problem_free(&fp);
    }
    printf("gen_seeds: %d inputs in %s\n", kept, dir);
}

/* fuzz_dtypes: fuzz_diff inputs (e.g. its regressions) as they are (f16 everywhere, unless
 * bytes are left after the problem) and with the choices bf16/bf16/bf16 and f32/f16/bf16. */
static void gen_dtypes_from(const char *dir, int nfiles, char **files)
{
    static const char *const dn[3] = {"f16", "bf16", "f32"};
    static const int variants[2][3] = {{1, 1, 1}, {2, 0, 1}};
    static uint8_t in[4096], out[4096];
    int kept = 0;
    for (int i = 0; i < nfiles; i++) {
        FILE *f = fopen(files[i], "rb");
        size_t n = f ? fread(in, 1, sizeof in, f) : 0;
        if (!f || ferror(f) || fclose(f)) {
            fprintf(stderr, "gen_seeds: cannot read %s\n", files[i]);
            exit(1);
        }
        const char *base = strrchr(files[i], '/') ? strrchr(files[i], '/') + 1 : files[i];
        char name[256];
        int stem = (int)(strrchr(base, '.') ? (size_t)(strrchr(base, '.') - base) : strlen(base));
        snprintf(name, sizeof name, "from-%.200s", base);
        put(dir, name, in, n), kept++;
        for (int v = 0; v < 2; v++) {
            size_t len = with_dtypes(in, n, variants[v], out, sizeof out);
            if (!len)
                continue;
            snprintf(name, sizeof name, "from-%.*s-%s-%s-%s", stem < 200 ? stem : 200, base,
                     dn[variants[v][0]],
                     dn[variants[v][1]], dn[variants[v][2]]);
            put(dir, name, out, len), kept++;
        }
    }
    printf("gen_seeds: %d inputs from %d files in %s\n", kept, nfiles, dir);
}

static void gen_case_files(const char *dir)
{
    int kept = 0;
    char name[64], err[256];
    uint8_t out[4096];
    for (int t = SMATTN_NPY_F64; t <= SMATTN_NPY_I64; t++)
        for (int rank = 0; rank <= SMATTN_NPY_MAX_RANK; rank++) {
            int64_t shape[SMATTN_NPY_MAX_RANK] = {2, 3, 1, 2, 1};
            size_t cnt = 1;
            for (int k = 0; k < rank; k++)
                cnt *= (size_t)shape[k];
            uint8_t data[8 * 12]; /* 12 elements of up to 8 bytes: the largest shape */
            if (cnt * 8 > sizeof data) {
                fprintf(stderr, "gen_seeds: %zu elements do not fit the data buffer\n", cnt);
                exit(1);
            }
            for (size_t i = 0; i < sizeof data; i++)
                data[i] = t == SMATTN_NPY_BOOL ? (uint8_t)(i % 2) : (uint8_t)(i * 37);
            size_t len;
            unsigned char *e = smattn_npy_encode((smattn_npy_type)t, rank, shape, data, &len, err,
                                                 sizeof err);
            if (!e || len + 1 > sizeof out) {
                fprintf(stderr, "gen_seeds: %s\n", err);
                exit(1);
            }
            out[0] = 0;
            memcpy(out + 1, e, len);
            free(e);
            snprintf(name, sizeof name, "npy-%s-rank%d", smattn_npy_type_name((smattn_npy_type)t), rank);
            put(dir, name, out, len + 1);
            kept++;
        }
    /* version 2.0 and 3.0 headers, Fortran order, big-endian, a zero dim */
    static const char *const hand[] = {
        "\x00\x93\x4e\x55\x4d\x50\x59\x02\x00\x74\x00\x00\x00\x7b\x27\x64\x65\x73\x63\x72\x27\x3a\x20\x27\x3c\x66\x34\x27\x2c\x20\x27\x66\x6f\x72\x74\x72\x61\x6e\x5f\x6f\x72\x64\x65\x72\x27\x3a\x20\x54\x72\x75\x65\x2c\x20\x27\x73\x68\x61\x70\x65\x27\x3a\x20\x28\x32\x2c\x20\x31\x29\x2c\x20\x7d\x20\x20\x20\x20\x20\x20\x20\x20\x20\x20\x20\x20\x20\x20\x20\x20\x20\x20\x20\x20\x20\x20\x20\x20\x20\x20\x20\x20\x20\x20\x20\x20\x20\x20\x20\x20\x20\x20\x20\x20\x20\x20\x20\x20\x20\x20\x20\x20\x20\x20\x20\x20\x20\x20\x20\x20\x20\x0a\x00\x00\x80\x3f\x00\x00\x00\x40",
        "\x00\x93\x4e\x55\x4d\x50\x59\x03\x00\x74\x00\x00\x00\x7b\x27\x64\x65\x73\x63\x72\x27\x3a\x20\x27\x3e\x66\x38\x27\x2c\x20\x27\x66\x6f\x72\x74\x72\x61\x6e\x5f\x6f\x72\x64\x65\x72\x27\x3a\x20\x46\x61\x6c\x73\x65\x2c\x20\x27\x73\x68\x61\x70\x65\x27\x3a\x20\x28\x31\x2c\x29\x2c\x20\x7d\x20\x20\x20\x20\x20\x20\x20\x20\x20\x20\x20\x20\x20\x20\x20\x20\x20\x20\x20\x20\x20\x20\x20\x20\x20\x20\x20\x20\x20\x20\x20\x20\x20\x20\x20\x20\x20\x20\x20\x20\x20\x20\x20\x20\x20\x20\x20\x20\x20\x20\x20\x20\x20\x20\x20\x20\x20\x20\x0a\x3f\xf0\x00\x00\x00\x00\x00\x00",
        "\x00\x93\x4e\x55\x4d\x50\x59\x01\x00\x76\x00\x7b\x27\x64\x65\x73\x63\x72\x27\x3a\x20\x27\x7c\x56\x32\x27\x2c\x20\x27\x66\x6f\x72\x74\x72\x61\x6e\x5f\x6f\x72\x64\x65\x72\x27\x3a\x20\x46\x61\x6c\x73\x65\x2c\x20\x27\x73\x68\x61\x70\x65\x27\x3a\x20\x28\x30\x2c\x20\x33\x29\x2c\x20\x7d\x20\x20\x20\x20\x20\x20\x20\x20\x20\x20\x20\x20\x20\x20\x20\x20\x20\x20\x20\x20\x20\x20\x20\x20\x20\x20\x20\x20\x20\x20\x20\x20\x20\x20\x20\x20\x20\x20\x20\x20\x20\x20\x20\x20\x20\x20\x20\x20\x20\x20\x20\x20\x20\x20\x20\x20\x20\x20\x0a",
    };
    static const size_t hand_len[] = {137, 137, 129};
    for (size_t i = 0; i < sizeof hand / sizeof hand[0]; i++) {
        snprintf(name, sizeof name, "npy-hand-%zu", i);
        put(dir, name, (const uint8_t *)hand[i], hand_len[i]);
        kept++;
    }
    static const char *const json[] = {
        "\x01{}",
        "\x01{\"scale\": 0.125, \"softcap\": 30.0, \"causal\": \"lower_right\", \"window\": [4, 0]}",
        "\x01{\"causal\": \"upper_left\", \"kv_lens\": [3, 0], \"q_lens\": [1, 2], "
        "\"empty_rows\": \"mean\", \"empty_lse\": \"pos_inf\"}",
        "\x01{\"causal\": \"none\", \"sinks\": [0.5, -1e30], \"empty_rows\": \"nan\", "
        "\"empty_lse\": \"zero\", \"bf16\": [\"q\", \"k\", \"v\", \"bias\"]}",
        "\x01{\"kv_lens\": null, \"q_lens\": null, \"window\": [-1, -1], \"scale\": 1e-300}",
    };
    for (size_t i = 0; i < sizeof json / sizeof json[0]; i++) {
        snprintf(name, sizeof name, "json-%zu", i);
        put(dir, name, (const uint8_t *)json[i], strlen(json[i] + 1) + 1);
        kept++;
    }
    /* layout cases (first byte 7 mod 8): the template (fuzz_case_files.c), case.json, and
     * after a NUL the block table's .npy */
    static const struct {
        int tmpl;
        const char *json;
        int table; /* 0 none, 1 i4 [3,3], 2 i8 [3,3] with an entry beyond int32, 3 i8 [3,3] */
    } lay[] = {
        {0, "{\"cu_seqlens_q\": [0, 3, 4, 8], \"kv_lens\": [5, 3, 10], \"causal\": \"lower_right\"}", 1},
        {1, "{\"cu_seqlens_q\": [0, 3, 4, 8], \"kv_lens\": [5, 3, 10], \"kv_layout\": \"HND\"}", 3},
        {0, "{\"cu_seqlens_q\": [0, 3, 4, 8], \"kv_lens\": [5, 3, 10]}", 2},
        {2, "{\"cu_seqlens_q\": [0, 3, 4, 8], \"cu_seqlens_k\": [0, 5, 6, 13], \"seqused_k\": [5, 0, 6]}", 0},
        {0, "{\"cu_seqlens_q\": [0, 3, 4, 8], \"kv_indptr\": [0, 2, 3, 6], \"kv_indices\": [0, 1, 2, 3, 4, 5], \"kv_last_page_len\": [1, 3, 2]}", 0},
        {3, "{\"kv_indptr\": [0, 2, 2, 5], \"kv_indices\": [5, 1, 0, 2, 4], \"kv_last_page_len\": [3, 0, 4], \"window\": [6, -1]}", 0},
        {3, "{\"kv_lens\": [1, 12, 0]}", 1},
    };
    for (size_t i = 0; i < sizeof lay / sizeof lay[0]; i++) {
        size_t n = 0, jl = strlen(lay[i].json);
        out[n++] = 7;
        out[n++] = (uint8_t)lay[i].tmpl;
        memcpy(out + n, lay[i].json, jl);
        n += jl;
        if (lay[i].table) {
            int64_t t64[9] = {0, 1, -1, 2, -1, -1, 3, 4, 5};
            int32_t t32[9];
            for (int k = 0; k < 9; k++)
                t32[k] = (int32_t)t64[k];
            if (lay[i].table == 2)
                t64[5] = INT64_C(1) << 33;
            size_t len;
            unsigned char *e =
                smattn_npy_encode(lay[i].table == 1 ? SMATTN_NPY_I32 : SMATTN_NPY_I64, 2,
                                  (int64_t[]){3, 3}, lay[i].table == 1 ? (void *)t32 : (void *)t64,
                                  &len, err, sizeof err);
            if (!e || n + 1 + len > sizeof out) {
                fprintf(stderr, "gen_seeds: %s\n", err);
                exit(1);
            }
            out[n++] = 0;
            memcpy(out + n, e, len);
            n += len;
            free(e);
        }
        snprintf(name, sizeof name, "layout-%zu", i);
        put(dir, name, out, n);
        kept++;
    }
    printf("gen_seeds: %d inputs in %s\n", kept, dir);
}

/* fuzz_merge: 135 inputs whose tails (fuzz_merge.c's choices, first choice last) cycle
 * through N (1-9), the LSE value modes (5), the O value modes (4), both bases and empty-part
 * conventions, every empty-row/LSE convention and dtype, with 0-2 special-value patches; one
 * in seven also carries front bytes that land raw in O. */
static void gen_merge(const char *dir)
{
    int kept = 0;
    char name[64];
    for (int i = 0; i < 135; i++) {
        uint8_t c[64], in[128];
        int n = 0;
        c[n++] = (uint8_t)(i % 9);                         /* N - 1 */
        c[n++] = (uint8_t)(i / 9 % 2);                     /* B - 1 */
        c[n++] = (uint8_t)(i / 18 % 2);                    /* S - 1 */
        c[n++] = (uint8_t)(i / 36 % 2);                    /* Hq - 1 */
        c[n++] = (uint8_t)(i * 7 % 9);                     /* Dv - 1 */
        c[n++] = (uint8_t)(i % 2);                         /* base */
        c[n++] = (uint8_t)(i / 2 % 2);                     /* empty_parts */
        c[n++] = (uint8_t)(i / 4 % 2);                     /* empty_rows */
        c[n++] = (uint8_t)(i % 3);                         /* empty_lse */
        c[n++] = (uint8_t)(i / 3 % 3);                     /* o dtype */
        c[n++] = (uint8_t)(i / 9 % 3);                     /* lse dtype */
        c[n++] = (uint8_t)(i / 27 % 3);                    /* output dtype */
        c[n++] = (uint8_t)(i % 4);                         /* threads - 1 */
        c[n++] = (uint8_t)(i % 5);                         /* LSE mode */
        c[n++] = (uint8_t)(i / 5 % 4);                     /* O mode */
        for (int k = 0; k < 4; k++)
            c[n++] = (uint8_t)rnd();                       /* seed */
        int np = i % 3;
        c[n++] = (uint8_t)np;
        for (int k = 0; k < np; k++) {
            c[n++] = (uint8_t)(rnd() % 2);                 /* LSE or O */
            c[n++] = (uint8_t)rnd(), c[n++] = (uint8_t)rnd(); /* index */
            c[n++] = (uint8_t)(rnd() % FUZZ_NSPECIAL);
        }
        int front = i % 7 == 0 ? 16 : 0;
        for (int k = 0; k < front; k++)
            in[k] = (uint8_t)rnd();
        for (int k = 0; k < n; k++)
            in[front + k] = c[n - 1 - k];
        snprintf(name, sizeof name, "seed-%03d", i);
        put(dir, name, in, (size_t)(front + n));
        kept++;
    }
    printf("gen_seeds: %d inputs in %s\n", kept, dir);
}

int main(int argc, char **argv)
{
    if (argc > 3 && !strcmp(argv[1], "fuzz_dtypes")) {
        gen_problems(argv[2], GEN_DTYPES);
        gen_dtypes_from(argv[2], argc - 3, argv + 3);
        return 0;
    }
    if (argc != 3) {
        fprintf(stderr, "usage: gen_seeds fuzz_diff|fuzz_diff_long|fuzz_dtypes|fuzz_ref_props|"
                        "fuzz_decode_prefill|fuzz_api|fuzz_case_files|fuzz_merge|fuzz_backward "
                        "DIR\n");
        return 2;
    }
    if (!strcmp(argv[1], "fuzz_diff") || !strcmp(argv[1], "fuzz_ref_props") ||
        !strcmp(argv[1], "fuzz_decode_prefill"))
        gen_problems(argv[2], GEN_PLAIN);
    else if (!strcmp(argv[1], "fuzz_diff_long"))
        gen_problems(argv[2], GEN_LONG);
    else if (!strcmp(argv[1], "fuzz_dtypes"))
        gen_problems(argv[2], GEN_DTYPES);
    else if (!strcmp(argv[1], "fuzz_api"))
        gen_problems(argv[2], GEN_API);
    else if (!strcmp(argv[1], "fuzz_case_files"))
        gen_case_files(argv[2]);
    else if (!strcmp(argv[1], "fuzz_merge"))
        gen_merge(argv[2]);
    else if (!strcmp(argv[1], "fuzz_backward"))
        gen_problems(argv[2], GEN_BACKWARD);
    else {
        fprintf(stderr, "gen_seeds: unknown target %s\n", argv[1]);
        return 2;
    }
    return 0;
}
