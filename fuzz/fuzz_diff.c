/* SPDX-License-Identifier: MIT */
/* fuzz_diff.c: the kernel against the oracle under the SPEC 6 bound, then the kernel against
 * itself bit for bit: the decoded thread count against one thread, NaN/inf garbage in K/V
 * slots beyond kv_lens (masked for every query), and a repeated call (fuzz_diff_check). Any
 * difference is a MISMATCH report followed by abort().
 *
 * Speed (>= 1,000 exec/s on one core): the oracle's cost grows with the elements
 * of P and most of the time went to a few large rows on its exact path, so problems are cut
 * to FUZZ_DIFF_MAX_P elements of P (fuzz_problem_shrink), and each input runs on one ISA,
 * chosen by the decoded seed, instead of on every ISA the CPU has. The long decode rows
 * (T > 1024, the kernel's split keys) cost 5-50 ms each and have their own target,
 * fuzz_diff_long.c; here decode inputs run as decoded (T <= 64).
 * SMATTN_FUZZ_FULL=1 (make check's replay of the corpus) checks every input on every ISA;
 * SMATTN_FUZZ_FULL=2 (its replay of the regressions, some found before the cut) also checks
 * the problem as decoded, uncut. fuzz/README.md has the measurements. ALiBi (SPEC 2.8): 3 in
 * 8 attention inputs get one of its modes, drawn from the decoded seed (fuzz_problem_alibi),
 * so that the corpus decodes as before; so are quantised inputs (fuzz_problem_quant: a
 * quarter of the attention inputs get fp8, q8_0 or q4_0 inputs and descales, which the
 * kernel must read). Layouts (SPEC 2.7): 3 in 8 attention inputs without q8_0 or q4_0 also
 * run as a ragged or paged twin drawn from
 * the seed (fuzz_layout_draw: packed queries, packed keys, pages in a random order), whose
 * oracle and kernel outputs must be the dense problem's bits (fuzz_diff_check_layout). */
#include <stdlib.h>
#include <string.h>

#include "fuzz/common/fuzz_check.h"

#define TARGET "fuzz_diff"

static int full_mode;

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
    (void)argc, (void)argv;
    full_mode = fuzz_full_mode();
    return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    for (int pass = full_mode >= 2 ? 0 : 1; pass < 2; pass++) {
        fuzz_problem fp;
        if (fuzz_problem_decode_bytes(&fp, data, size))
            return 0;
        if (pass == 1 && fuzz_problem_shrink(&fp, FUZZ_DIFF_MAX_P))
            return 0;
        if (fuzz_problem_alibi(&fp)) /* ALiBi's modes, drawn from the seed */
            return 0;
        if (fuzz_problem_quant(&fp, FUZZ_DIFF_QUANT_IN8)) /* SPEC 2.9, from the seed too */
            return 0;
        fuzz_layout fl; /* a ragged or paged twin, drawn from the seed (not of block formats,
                           whose element-wise layout copy would cut blocks) */
        memset(&fl, 0, sizeof fl);
        int blocks = smattn_dtype_block(fp.in.k.dtype) > 1 || smattn_dtype_block(fp.in.v.dtype) > 1;
        int lay = blocks ? 0 : fuzz_layout_draw(&fp, &fl);
        if (lay < 0)
            abort(); /* out of memory in the harness: not a finding, but nothing to test */
        /* pass 1 after pass 0: only if it was cut */
        if (pass == 0 || fp.full_p || full_mode < 2)
            fuzz_diff_check_layout(TARGET, &fp, lay ? &fl : NULL, full_mode != 0);
        fuzz_layout_free(&fl);
        fuzz_problem_free(&fp);
    }
    return 0;
}
