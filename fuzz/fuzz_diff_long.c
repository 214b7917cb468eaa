/* SPDX-License-Identifier: MIT */
/* fuzz_diff_long.c: fuzz_diff's checks (fuzz_diff_check: the bound, threads 1 vs N, a
 * repeated call, garbage beyond kv_lens) on long decode rows: an attention decode input
 * with B*Hq <= 2 after fuzz_diff's cut has its keys repeated to T = 1025-1088
 * (fuzz_diff_long_T, fuzz_problem_stretch_keys), beyond the decoder's T <= 64, so that the
 * kernel splits the keys of a row and merges the parts. Other inputs are not this target's:
 * they return at once (fuzz_diff checks them). A row costs the oracle 5-50 ms, which is why
 * these rows left fuzz_diff (fuzz/README.md, "Speed"). One ISA per input, chosen by the
 * decoded seed; SMATTN_FUZZ_FULL=1 or 2 (make check's replay) runs every ISA. 3 in 8 also
 * run as a ragged or paged twin (fuzz_layout_draw): split keys across pages. */
#include <stdlib.h>

#include "fuzz/common/fuzz_check.h"

#define TARGET "fuzz_diff_long"

static int full_mode;

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
    (void)argc, (void)argv;
    full_mode = fuzz_full_mode();
    return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    fuzz_problem fp;
    if (fuzz_problem_decode_bytes(&fp, data, size) || fuzz_problem_shrink(&fp, FUZZ_DIFF_MAX_P))
        return 0;
    int64_t T = fuzz_diff_long_T(&fp);
    if (!T) {
        fuzz_problem_free(&fp);
        return 0;
    }
    if (fuzz_problem_stretch_keys(&fp, T))
        return 0;
    fuzz_layout fl; /* a ragged or paged twin, drawn from the seed: pages across split keys */
    int lay = fuzz_layout_draw(&fp, &fl);
    if (lay < 0)
        abort(); /* out of memory in the harness */
    fuzz_diff_check_layout(TARGET, &fp, lay ? &fl : NULL, full_mode != 0);
    fuzz_layout_free(&fl);
    fuzz_problem_free(&fp);
    return 0;
}
