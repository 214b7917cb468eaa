/* SPDX-License-Identifier: MIT */
/* fuzz_dtypes.c: fuzz_diff's checks with f16/bf16 Q (or X), bias and outputs.
 * The problem is decoded and cut as in fuzz_diff (fuzz_problem_decode, fuzz_problem_shrink
 * to FUZZ_DIFF_MAX_P); then three more choices from the provider's tail (fuzz_take_dtypes:
 * Q or X, bias, and outputs, each f16, bf16 or f32, a missing byte giving f16) and Q/X and
 * the bias are replaced by copies rounded to their dtype (fuzz_problem_convert: the problem
 * is that of the rounded values, for the oracle and the kernel alike). K/V keep the dtype
 * the decoder drew (f32, f16, bf16), sinks stay f32. Then fuzz_diff_check_as with the
 * output dtype: the kernel within the SPEC 6 bound for outputs of that dtype (u_out from
 * the dtype, A6), and bit for bit: threads 1 vs the decoded count, a repeated call,
 * NaN/inf garbage beyond kv_lens. Every f32/f16/bf16 combination is supported, so a status
 * other than SMATTN_OK is a MISMATCH. Half the attention inputs are then quantised
 * (fuzz_problem_quant, SPEC 2.9: fp8 Q, K and V, q8_0 and q4_0 K and V, descales), drawn
 * from the decoded seed; the kernel reads them all, so a status other than SMATTN_OK is a
 * MISMATCH there too. This is a target of its own because extending the
 * shared decoder would change what every other target's corpus means.
 * One ISA per input (by the decoded seed); SMATTN_FUZZ_FULL=1 or 2 (make check's replay)
 * runs every ISA, and 2 (the regressions) also the problem as decoded when the cut changed
 * it. */
#include "fuzz/common/fuzz_check.h"

#define TARGET "fuzz_dtypes"

static int full_mode;

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
    (void)argc, (void)argv;
    full_mode = fuzz_full_mode();
    return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    /* as fuzz_diff: SMATTN_FUZZ_FULL=2 also checks a problem the cut changed, uncut */
    for (int pass = full_mode >= 2 ? 0 : 1; pass < 2; pass++) {
        fuzz_provider dp;
        fuzz_provider_init(&dp, data, size);
        fuzz_problem fp;
        if (fuzz_problem_decode(&fp, &dp)) {
            fuzz_problem_free(&fp);
            return 0;
        }
        if (pass == 1 && fuzz_problem_shrink(&fp, FUZZ_DIFF_MAX_P))
            return 0;
        if (pass == 0 || fp.full_p || full_mode < 2) {
            fuzz_dtype_choice c = fuzz_take_dtypes(&dp); /* the cut reads nothing */
            if (fuzz_problem_convert(&fp, c.qx, c.bias) ||
                fuzz_problem_quant(&fp, FUZZ_DTYPES_QUANT_IN8))
                return 0;
            fuzz_diff_check_as(TARGET, &fp, full_mode != 0, c.out);
        }
        fuzz_problem_free(&fp);
    }
    return 0;
}
