#!/bin/bash
# SPDX-License-Identifier: MIT
# prove.sh: Frama-C WP, with runtime-error goals, on the proved integer logic of SPEC 2-3;
# exit 0 only when every goal of every file is proved (proof/README.md).
# Usage: proof/prove.sh [MASK_C]   (default core/mask.c; the wrong-predicate demo passes a
# mutated copy). Environment: BUILD (default build), PROVE_TIMEOUT (seconds per goal and
# prover, default 30), PROVE_PAR (parallel prover runs, default 2).
set -u
cd "$(dirname "$0")/.."
mask=${1:-core/mask.c}
out=${BUILD:-build}/prove
mkdir -p "$out"
# Why3 keeps its prover list in a file; ours lives in the build tree, not in $HOME.
export WHY3CONFIG=$PWD/$out/why3.conf
[ -s "$WHY3CONFIG" ] || why3 config detect >"$out/why3-detect.log" 2>&1 || {
  cat "$out/why3-detect.log" >&2; exit 1; }
rc=0
summary=""
for f in "$mask" proof/lemmas_offsets.c proof/lemmas_heads.c proof/lemmas_ceil.c \
         proof/lemmas_layout.c; do
  log=$out/$(basename "$f" .c).log
  frama-c -wp -wp-rte -wp-prover z3,cvc4 -wp-timeout "${PROVE_TIMEOUT:-30}" \
    -wp-par "${PROVE_PAR:-2}" -cpp-extra-args="-Iinclude -I." "$f" \
    -then -report-classify -report-unclassified-unknown ERROR >"$log" 2>&1
  frc=$?
  proved=$(sed -n 's/^\[wp\] Proved goals: *\([0-9]*\) \/ \([0-9]*\)$/\1 \2/p' "$log")
  set -- $proved
  if [ $frc -ne 0 ] || [ $# -ne 2 ] || [ "$1" != "$2" ]; then
    rc=1
    echo "prove: $f: NOT PROVED (frama-c rc $frc, goals ${1:-?}/${2:-?}); unproved goals:" >&2
    grep -A2 '^\[wp\] \[\(Failed\|Timeout\|Unknown\)\]' "$log" |
      grep -v -e '^--' -e '^\[wp\] \[[A-Z][a-z]*[ 0-9.]*\] Goal .*Valid' >&2
    grep -i 'error' "$log" | grep -v '^\[wp\] \[' | head -20 >&2
  fi
  summary="$summary$f: ${1:-?} / ${2:-?} goals proved"$'\n'
done
# Goals per property: the functions and lemmas of core/mask.h grouped as in proof/README.md.
count() { cat "$out"/{"$(basename "$mask" .c)",lemmas_*}.log 2>/dev/null | grep ' : Valid' |
          grep -o '^\[wp\] \[[A-Za-z0-9 .]*\] Goal typed_[A-Za-z0-9_]*' |
          sed 's/.*Goal typed_//; s/__*/_/g' | grep -cE "^($1)"; }
printf '%s' "$summary"
echo "proved goals by property (lemmas included):"
echo "  predicate = spec per mask kind (key_interval): $(count 'smattn_key_interval')"
echo "  GQA head mapping (head_group, walk, lemmas):   $(count 'smattn_head_|lemma_block_')"
echo "  offsets fit int64 (max_offset, off4, lemmas):  $(count \
  'smattn_max_offset|smattn_off4|lemma_term_|lemma_offset_')"
echo "  tiling: cover once, skip only empty:           $(count \
  'smattn_chunk_|smattn_clip_|smattn_hull_|smattn_tile_|smattn_qtile_|lemma_ceil_')"
echo "  layouts: pages, slots, packed rows in span:    $(count 'lemma_layout_|lemma_page_|lemma_used_|lemma_slot_|lemma_paged_|lemma_packed_')"
if [ $rc -eq 0 ]; then echo "prove: every goal proved"; else echo "prove: FAILED" >&2; fi
exit $rc
