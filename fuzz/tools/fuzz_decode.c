/* SPDX-License-Identifier: MIT */
/* fuzz_decode.c: what a fuzz input means. Prints the problem an input file decodes to (as
 * the given target sees it: fuzz_diff, fuzz_diff_long, fuzz_decode_prefill, fuzz_dtypes and
 * fuzz_ref_props cut it with fuzz_problem_shrink, fuzz_diff_long stretches its keys,
 * fuzz_dtypes rounds Q/X and bias to the dtypes it reads after the problem and prints
 * them with its output dtype; fuzz_diff, fuzz_dtypes and fuzz_ref_props quantise some
 * inputs, fuzz_problem_quant), and
 * with --case DIR writes it as a case directory (SPEC 7.1) that
 * `smattn ref DIR OUT --weights` and `smattn opt DIR OUT --weights` reproduce. The case is
 * checked on the way out: it is loaded back and the oracle must give the same bits on the
 * loaded case as on the decoded problem.
 *   fuzz_decode [--target NAME] [--case DIR] FILE
 * fuzz_decode_prefill derives its prefill and decode steps from the problem printed here;
 * fuzz_api corrupts the printed problem's descriptor (its report prints the corruption).
 * fuzz_diff and fuzz_backward give some attention inputs ALiBi (fuzz_problem_alibi), written
 * to case.json with the rest; for fuzz_backward the case also holds the gradients' inputs
 * the target fed the backward (do.npy, dlse.npy: fuzz_grad_values), so that `smattn ref`
 * writes the exact dQ, dK, dV (and dBias, dSinks) beside O.
 * Exit status: 0, 1 on a failed write or check, 2 on bad usage. */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "fuzz/common/fuzz_check.h"
#include "io/case.h"
#include "io/npy.h"

static unsigned char *read_file(const char *path, size_t *n)
{
    FILE *f = fopen(path, "rb");
    if (!f)
        return NULL;
    size_t cap = 4096;
    unsigned char *buf = malloc(cap);
    *n = 0;
    size_t got;
    while (buf && (got = fread(buf + *n, 1, cap - *n, f)) > 0) {
        *n += got;
        if (*n == cap) {
            unsigned char *b2 = realloc(buf, cap *= 2);
            if (!b2)
                free(buf);
            buf = b2;
        }
    }
    fclose(f);
    return buf;
}

static int put_npy(const char *dir, const char *name, smattn_npy_type t, int rank,
                   const int64_t *shape, const void *data)
{
    char path[4096], err[256];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    if (smattn_npy_write(path, t, rank, shape, data, err, sizeof err)) {
        fprintf(stderr, "fuzz_decode: %s: %s\n", path, err);
        return 1;
    }
    return 0;
}

static smattn_npy_type npy_of(smattn_dtype t)
{
    return t == SMATTN_F16 ? SMATTN_NPY_F16 : t == SMATTN_BF16 ? SMATTN_NPY_U16 : SMATTN_NPY_F32;
}

/* Q, K or V of dtype t and shape s (SPEC 7.1): floats as npy_of says; fp8 as |u1 bit patterns
 * of the same shape; q8_0 and q4_0 as |u1 raw blocks, the last axis D / 32 blocks of bytes. */
static int put_qkv(const char *dir, const char *name, smattn_dtype t, const int64_t s[4],
                   const void *data)
{
    if (t != SMATTN_F8E4M3 && t != SMATTN_F8E5M2 && smattn_dtype_block(t) == 1)
        return put_npy(dir, name, npy_of(t), 4, s, data);
    int64_t b[4] = {s[0], s[1], s[2], s[3]};
    if (smattn_dtype_block(t) > 1)
        b[3] = s[3] / smattn_dtype_block(t) * (int64_t)smattn_dtype_size(t);
    return put_npy(dir, name, SMATTN_NPY_U8, 4, b, data);
}

static void put_lens(FILE *f, const char *key, const int64_t *lens, int64_t B)
{
    if (!lens)
        return;
    fprintf(f, ",\n  \"%s\": [", key);
    for (int64_t b = 0; b < B; b++)
        fprintf(f, "%s%" PRId64, b ? ", " : "", lens[b]);
    fprintf(f, "]");
}

/* The case directory of a decoded problem (its buffers are contiguous, as decoded). */
static int write_case(const fuzz_problem *fp, const char *dir, const double *dout,
                      const double *dlse)
{
    const smattn_problem *p = &fp->p;
    if (mkdir(dir, 0777) != 0 && errno != EEXIST) {
        fprintf(stderr, "fuzz_decode: cannot create %s: %s\n", dir, strerror(errno));
        return 1;
    }
    int bad = 0;
    if (p->op == SMATTN_OP_ATTENTION) {
        smattn_dtype kt = fp->in.k.dtype;
        bad |= put_qkv(dir, "q.npy", fp->in.q.dtype, (int64_t[]){p->B, p->S, p->Hq, p->D}, fp->q);
        bad |= put_qkv(dir, "k.npy", kt, (int64_t[]){p->B, p->T, p->Hkv, p->D}, fp->k);
        bad |= put_qkv(dir, "v.npy", kt, (int64_t[]){p->B, p->T, p->Hkv, p->Dv}, fp->v);
    } else {
        bad |= put_npy(dir, "x.npy", npy_of(fp->in.x.dtype), 4, (int64_t[]){p->B, p->Hq, p->S, p->T},
                       fp->x);
    }
    if (fp->bias)
        bad |= put_npy(dir, "bias.npy", npy_of(fp->in.bias.dtype), 4,
                       (int64_t[]){p->B, fp->bias_kind == 1 ? 1 : p->Hq, p->S, p->T}, fp->bias);
    if (fp->mask)
        bad |= put_npy(dir, "mask.npy", SMATTN_NPY_U8, 4,
                       (int64_t[]){p->B, p->Hq, fp->mask_kind == 1 ? 1 : p->S, p->T}, fp->mask);
    if (fp->sinks)
        bad |= put_npy(dir, "sinks.npy", SMATTN_NPY_F32, 1, (int64_t[]){p->Hq}, fp->sinks);
    if (dout) /* the gradients' inputs, in binary64 as the target held them */
        bad |=
            put_npy(dir, "do.npy", SMATTN_NPY_F64, 4, (int64_t[]){p->B, p->S, p->Hq, p->Dv}, dout);
    if (dlse)
        bad |= put_npy(dir, "dlse.npy", SMATTN_NPY_F64, 3, (int64_t[]){p->B, p->Hq, p->S}, dlse);
    if (bad)
        return 1;
    char path[4096];
    snprintf(path, sizeof path, "%s/case.json", dir);
    FILE *f = fopen(path, "w");
    if (!f) {
        fprintf(stderr, "fuzz_decode: cannot write %s\n", path);
        return 1;
    }
    static const char *const causal[] = {"none", "lower_right", "upper_left"};
    static const char *const empty[] = {"zero", "nan", "mean"};
    static const char *const lse[] = {"neg_inf", "pos_inf", "zero"};
    /* %.17g round-trips a binary64 through strtod (SPEC 7.1: the nearest binary64) */
    fprintf(f, "{\n  \"scale\": %.17g,\n  \"softcap\": %.17g,\n  \"causal\": \"%s\",\n"
               "  \"window\": [%" PRId64 ", %" PRId64 "],\n  \"empty_rows\": \"%s\",\n"
               "  \"empty_lse\": \"%s\"",
            p->scale, p->softcap, causal[p->causal], p->window_left, p->window_right,
            empty[p->empty_rows], lse[p->empty_lse]);
    put_lens(f, "kv_lens", p->kv_lens, p->B);
    put_lens(f, "q_lens", p->q_lens, p->B);
    smattn_case_json_put_quant(f, &fp->p, &fp->in);
    smattn_case_json_put_alibi(f, &fp->p);
    /* bf16 .npy files hold raw '<u2' bits: case.json names them */
    const char *bf[4];
    int nbf = 0;
    if (p->op == SMATTN_OP_ATTENTION && fp->in.q.dtype == SMATTN_BF16)
        bf[nbf++] = "q";
    if (p->op == SMATTN_OP_ATTENTION && fp->in.k.dtype == SMATTN_BF16)
        bf[nbf++] = "k", bf[nbf++] = "v";
    if (p->op == SMATTN_OP_SOFTMAX && fp->in.x.dtype == SMATTN_BF16)
        bf[nbf++] = "x";
    if (fp->bias && fp->in.bias.dtype == SMATTN_BF16)
        bf[nbf++] = "bias";
    for (int i = 0; i < nbf; i++)
        fprintf(f, "%s\"%s\"%s", i ? ", " : ",\n  \"bf16\": [", bf[i], i + 1 == nbf ? "]" : "");
    fprintf(f, "\n}\n");
    if (fclose(f)) {
        fprintf(stderr, "fuzz_decode: cannot write %s\n", path);
        return 1;
    }
    return 0;
}

/* Load the case back and compare the oracle's bits on it and on the decoded problem. */
static int check_case(const fuzz_problem *fp, const char *dir)
{
    smattn_case c;
    char err[512];
    if (smattn_case_load(dir, &c, err, sizeof err)) {
        fprintf(stderr, "fuzz_decode: %s: %s\n", dir, err);
        return 1;
    }
    smattn_outputs out;
    unsigned which = SMATTN_CASE_OUT_O | SMATTN_CASE_OUT_LSE | SMATTN_CASE_OUT_P;
    smattn_status s = smattn_case_outputs_alloc(&c, SMATTN_F64, which, &out, err, sizeof err);
    if (s) {
        fprintf(stderr, "fuzz_decode: %s: %s\n", dir, err);
        smattn_case_free(&c);
        return 1;
    }
    fuzz_outputs mine;
    if (fuzz_outputs_alloc(&mine, &fp->p, SMATTN_F64))
        abort();
    smattn_ref_config rc = {1, 0, 0, 0};
    smattn_status s1 = smattn_ref(&c.prob, &c.in, &out, &rc, NULL);
    smattn_status s2 = smattn_ref(&fp->p, &fp->in, &mine.out, &rc, NULL);
    int bad = s1 != s2;
    if (bad)
        fprintf(stderr, "fuzz_decode: oracle status %s on the case, %s on the decoded problem\n",
                smattn_status_name(s1), smattn_status_name(s2));
    const void *theirs[3] = {out.o.data, out.lse.data, out.p.data};
    for (int k = 0; k < 3 && !bad && !s1; k++)
        if (mine.n[k] && memcmp(theirs[k], mine.buf[k], mine.n[k] * sizeof(double)) != 0) {
            fprintf(stderr, "fuzz_decode: the case's %s differs from the decoded problem's\n",
                    k == 0 ? "O" : k == 1 ? "LSE" : "P");
            bad = 1;
        }
    fuzz_outputs_free(&mine);
    smattn_case_outputs_free(&out);
    smattn_case_free(&c);
    return bad;
}

int main(int argc, char **argv)
{
    const char *target = NULL, *dir = NULL, *file = NULL;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--target") && i + 1 < argc)
            target = argv[++i];
        else if (!strcmp(argv[i], "--case") && i + 1 < argc)
            dir = argv[++i];
        else if (argv[i][0] != '-' && !file)
            file = argv[i];
        else
            file = NULL, i = argc;
    }
    if (!file) {
        fprintf(stderr, "usage: fuzz_decode [--target fuzz_diff|fuzz_diff_long|fuzz_ref_props|"
                        "fuzz_decode_prefill|fuzz_dtypes|fuzz_api|fuzz_backward] [--case DIR] "
                        "FILE\n");
        return 2;
    }
    int64_t max_p = 0;
    /* the targets that quantise some inputs (fuzz_problem_quant) */
    const int quant_in8 = !target                          ? 0
                          : !strcmp(target, "fuzz_dtypes") ? FUZZ_DTYPES_QUANT_IN8
                          : !strcmp(target, "fuzz_diff")   ? FUZZ_DIFF_QUANT_IN8
                          : !strcmp(target, "fuzz_ref_props") ? FUZZ_REF_PROPS_QUANT_IN8
                                                              : 0;
    int long_rows = target && !strcmp(target, "fuzz_diff_long");
    int dtypes = target && !strcmp(target, "fuzz_dtypes");
    const int backward = target && !strcmp(target, "fuzz_backward");
    /* the targets that draw ALiBi from the decoded seed (fuzz_problem_alibi) */
    const int alibi = backward || (target && !strcmp(target, "fuzz_diff"));
    if (target && (!strcmp(target, "fuzz_diff") || long_rows || dtypes))
        max_p = FUZZ_DIFF_MAX_P;
    else if (target && !strcmp(target, "fuzz_ref_props"))
        max_p = FUZZ_REF_PROPS_MAX_P;
    else if (target && !strcmp(target, "fuzz_decode_prefill"))
        max_p = FUZZ_DP_MAX_P;
    else if (backward)
        max_p = FUZZ_BACKWARD_MAX_P;
    else if (target && strcmp(target, "fuzz_api") != 0) {
        fprintf(stderr, "fuzz_decode: unknown target %s\n", target);
        return 2;
    }
    size_t n;
    unsigned char *data = read_file(file, &n);
    if (!data) {
        fprintf(stderr, "fuzz_decode: cannot read %s\n", file);
        return 1;
    }
    fuzz_provider dp;
    fuzz_provider_init(&dp, data, n);
    /* fuzz_backward's leading bytes: its checks (c0: dLSE, special values, binary32 dO), its
     * planted descriptor (c1) and the gradients' seed */
    const uint32_t c0 = backward ? fuzz_take(&dp, 16) : 0, c1 = backward ? fuzz_take(&dp, 8) : 0;
    const uint32_t gseed = backward ? fuzz_take_u32(&dp) : 0;
    fuzz_problem fp;
    fuzz_dtype_choice dc = {SMATTN_F32, SMATTN_F32, SMATTN_F32};
    double *dout = NULL, *dlse = NULL;
    if (fuzz_problem_decode(&fp, &dp) || (max_p && fuzz_problem_shrink(&fp, max_p)) ||
        (alibi && fuzz_problem_alibi(&fp)) ||
        (long_rows && fuzz_diff_long_T(&fp) &&
         fuzz_problem_stretch_keys(&fp, fuzz_diff_long_T(&fp))) ||
        (dtypes && (dc = fuzz_take_dtypes(&dp), fuzz_problem_convert(&fp, dc.qx, dc.bias))) ||
        (quant_in8 && fuzz_problem_quant(&fp, quant_in8)) ||
        (backward && fp.p.op == SMATTN_OP_ATTENTION &&
         fuzz_grad_values(&fp.p, gseed, (c0 & 4) != 0, fuzz_grad_dtype(c0, gseed), &dout,
                          c0 & 1 ? &dlse : NULL))) {
        fprintf(stderr, "fuzz_decode: out of memory\n");
        return 1;
    }
    printf("input: %s (%zu bytes)%s%s\n", file, n, target ? " as seen by " : "",
           target ? target : "");
    if (dtypes)
        printf("dtypes: %s %s, bias %s, outputs %s (the case holds the inputs; smattn opt "
               "--dtype %s gives the outputs)\n",
               fp.p.op == SMATTN_OP_ATTENTION ? "q" : "x", smattn_dtype_name(dc.qx),
               fp.bias ? smattn_dtype_name(dc.bias) : "-", smattn_dtype_name(dc.out),
               smattn_dtype_name(dc.out));
    fuzz_problem_print(stdout, &fp);
    if (backward && fp.p.op != SMATTN_OP_ATTENTION)
        printf("backward: none (the softmax op has no backward, SPEC 10.4; the target checks "
               "that the oracle refuses it)\n");
    else if (backward)
        printf("backward: dO%s from seed %" PRIu32 "%s%s; gradients in %s%s; planted descriptor "
               "%" PRIu32 "\n",
               dlse ? " and dLSE" : "", gseed,
               c0 & 8                                      ? ""
               : fuzz_grad_dtype(c0, gseed) == SMATTN_F16  ? ", binary16 values"
               : fuzz_grad_dtype(c0, gseed) == SMATTN_BF16 ? ", bfloat16 values"
                                                           : ", binary32 values",
               c0 & 4 ? ", three special values" : "", c0 & 2 ? "f32" : "f64",
               c0 & 2 || c0 & 8 ? "" : " (the fast backward judged too)", c1);
    if (target && (!strcmp(target, "fuzz_diff") || long_rows || backward)) { /* its layout twin */
        fuzz_layout fl;
        int lay = fuzz_layout_draw(&fp, &fl);
        if (lay < 0) {
            fprintf(stderr, "fuzz_decode: out of memory\n");
            return 1;
        }
        if (lay)
            fuzz_layout_print(stdout, &fl);
        else
            printf("layout: none (the dense problem only)\n");
        fuzz_layout_free(&fl);
    }
    int rc = 0;
    if (dir) {
        rc = write_case(&fp, dir, dout, dlse) || check_case(&fp, dir);
        if (!rc)
            printf("case: %s (the oracle gives the same bits on it; reproduce with\n"
                   "  smattn ref %s OUT --weights   and   smattn opt %s OUT --weights)\n",
                   dir, dir, dir);
    }
    fuzz_problem_free(&fp);
    free(dout), free(dlse);
    free(data);
    return rc;
}
