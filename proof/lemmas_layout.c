/* SPDX-License-Identifier: MIT */
/* lemmas_layout.c: the locator of ragged and paged layouts (core/layout.h, SPEC 2.7) only
 * forms offsets of elements inside the tensors the validation checked, so they fit int64
 * (`make prove`). ACSL only, nothing here is compiled.
 *
 * What the validation (core/problem.c, check_layout) establishes, per sequence b:
 *   paged:  1 <= ps, 0 <= T_b <= T <= max_pages * ps, and every entry of the first
 *           ceil(T_b / ps) = (T_b + ps - 1) / ps of row b lies in [0, num_pages);
 *   packed: 0 = cu[0] <= ... <= cu[B] = total, and T_b <= cu[b + 1] - cu[b] (seqused_k or
 *           the slice), S_b = cu[b + 1] - cu[b];
 * and smattn__max_offset accepted K [num_pages, ps, Hkv, D] or [1, total, Hkv, D], so their
 * span fits int64 (lemmas_offsets.c, offset_within_span). The lemmas below close the gap:
 * a key t < T_b reads a used entry, a slot inside its page, a packed row inside the tensor,
 * and the resulting index is inside the extents whose span was checked. */
/*@
    // Steps for the provers (nonlinear: stated once, then used as hypotheses).
    lemma layout_div_bounds: \forall integer a, ps;
      a >= 0 && ps >= 1 ==> (a / ps) * ps <= a < (a / ps) * ps + ps;
    lemma layout_mul_cancel_lt: \forall integer c, m, ps;
      ps >= 1 && c * ps < m * ps ==> c < m;
    lemma layout_term_le: \forall integer i, n, s;
      0 <= i < n && 0 <= s ==> 0 <= i * s <= (n - 1) * s;

    // Key t < T_b of a paged sequence reads table column t / ps, one of the columns the
    // validation checked, and that column exists in the table (at most max_pages).
    lemma page_column_used: \forall integer t, Tb, ps;
      0 <= t < Tb && ps >= 1 ==> 0 <= t / ps < (Tb + ps - 1) / ps;
    lemma used_columns_in_table: \forall integer Tb, T, ps, mp;
      0 <= Tb <= T <= mp * ps && ps >= 1 && mp >= 1 ==> (Tb + ps - 1) / ps <= mp;

    // The slot t % ps is inside the page, and (column, slot) names key t exactly.
    lemma slot_in_page: \forall integer t, ps;
      0 <= t && ps >= 1 ==> 0 <= t % ps < ps && t == (t / ps) * ps + t % ps;

    // A paged key's offset, page pg in [0, np) and slot in [0, ps): within the span of
    // K [np, ps, Hkv, D] (strides >= 0), which the validation bounded by INT64_MAX.
    lemma paged_offset_within_span: \forall integer np, ps, nh, nd, s0, s1, s2, s3, pg, sl, g, d;
      0 <= pg < np && 0 <= sl < ps && 0 <= g < nh && 0 <= d < nd &&
      s0 >= 0 && s1 >= 0 && s2 >= 0 && s3 >= 0 ==>
      0 <= pg * s0 + sl * s1 + g * s2 + d * s3 <=
        (np - 1) * s0 + (ps - 1) * s1 + (nh - 1) * s2 + (nd - 1) * s3;

    // Packed: a key t < T_b (or a query row i < S_b) of sequence b is row cu[b] + t of the
    // tensor [1, total, ...]: inside its rows, whose span the validation bounded.
    lemma packed_row_in_tensor: \forall integer cb, cb1, total, t, n;
      0 <= cb <= cb1 <= total && 0 <= t < n && n <= cb1 - cb ==> 0 <= cb + t < total;
*/
