/* SPDX-License-Identifier: MIT */
/* lemmas_heads.c: GQA head groups are contiguous and disjoint (SPEC 2.2; `make prove`).
 * ACSL only, nothing here is compiled. One small file per group of lemmas: WP gives every
 * lemma the earlier ones as hypotheses, and quantified nonlinear ones slow the provers down
 * on the unrelated goals that follow. */
/*@
    // GQA groups are contiguous and disjoint: a head lies in one block of G heads only.
    lemma block_order: \forall integer a, b, G; 0 < G && a < b ==> a * G + G <= b * G;
    lemma block_unique: \forall integer a, b, G, h;
      0 < G && a * G <= h < a * G + G && b * G <= h < b * G + G ==> a == b;
*/
