/* SPDX-License-Identifier: MIT */
/* lemmas_offsets.c: every offset of an accepted descriptor fits int64 (SPEC 2.1; `make prove`).
 * ACSL only, nothing here is compiled. One small file per group of lemmas: WP gives every
 * lemma the earlier ones as hypotheses, and quantified nonlinear ones slow the provers down
 * on the unrelated goals that follow. */
/*@
    lemma term_nonneg: \forall integer i, s; 0 <= i && 0 <= s ==> 0 <= i * s;
    lemma term_le: \forall integer i, n, s; 0 <= i < n && 0 <= s ==> 0 <= i * s <= (n - 1) * s;
    lemma offset_within_span2: \forall integer n0, n1, s0, s1, i0, i1;
      0 <= i0 < n0 && 0 <= i1 < n1 && s0 >= 0 && s1 >= 0 ==>
      0 <= i0 * s0 + i1 * s1 <= (n0 - 1) * s0 + (n1 - 1) * s1;

    // An index inside the extents of a tensor whose strides are >= 0 has an offset in
    // [0, span]: for a tensor the validation accepts (smattn__max_offset >= 0, so the span
    // fits int64) the precondition of smattn__off4 holds.
    lemma offset_within_span:
      \forall integer n0, n1, n2, n3, s0, s1, s2, s3, i0, i1, i2, i3;
        0 <= i0 < n0 && 0 <= i1 < n1 && 0 <= i2 < n2 && 0 <= i3 < n3 &&
        s0 >= 0 && s1 >= 0 && s2 >= 0 && s3 >= 0 ==>
        i0 * s0 + i1 * s1 + i2 * s2 + i3 * s3 <=
          (n0 - 1) * s0 + (n1 - 1) * s1 + (n2 - 1) * s2 + (n3 - 1) * s3;
*/
