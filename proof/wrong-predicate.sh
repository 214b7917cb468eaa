#!/bin/bash
# SPDX-License-Identifier: MIT
# wrong-predicate.sh: the proofs catch an off-by-one. Copies core/mask.c with the causal
# bound j <= d turned into j < d (a query no longer sees its own position), runs the same
# proof/prove.sh as `make prove` on the copy, and succeeds only if that run FAILS.
set -u
cd "$(dirname "$0")/.."
out=${BUILD:-build}/prove/wrong
mkdir -p "$out"
sed -e 's/SMATTN_CAUSAL_NONE \&\& d + 1 < h)/SMATTN_CAUSAL_NONE \&\& d < h)/' \
    -e 's/h = d + 1 > 0 ? d + 1 : 0;/h = d > 0 ? d : 0;/' core/mask.c >"$out/mask.c"
if diff -u core/mask.c "$out/mask.c"; then
  echo "wrong-predicate: the mutation did not apply (core/mask.c changed?)" >&2
  exit 2
fi
if proof/prove.sh "$out/mask.c"; then
  echo "wrong-predicate: the off-by-one predicate was PROVED: the contracts are too weak" >&2
  exit 1
fi
echo "wrong-predicate: make prove fails on the off-by-one predicate, as it must"
