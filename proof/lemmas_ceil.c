/* SPDX-License-Identifier: MIT */
/* lemmas_ceil.c: the kernel's chunk and tile counts are ceilings (`make prove`).
 * ACSL only, nothing here is compiled. One small file per group of lemmas: WP gives every
 * lemma the earlier ones as hypotheses, and quantified nonlinear ones slow the provers down
 * on the unrelated goals that follow. */
/*@
    // opt/opt.c's (T + c - 1) / c is ceil(T / c), as smattn__chunk_keys requires.
    lemma ceil_div: \forall integer T, c; 1 <= T && 1 <= c ==>
      ((T + c - 1) / c - 1) * c < T <= (T + c - 1) / c * c;
*/
