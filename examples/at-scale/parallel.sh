#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# parallel.sh: `smattn conform` over a few hosts with GNU parallel (Debian: parallel), then
# one merged report. Each shard is a pure function of (suite, seed, shard): the merged
# report equals one unsharded run's (README "At scale").
#
#   KERNEL=/opt/k/my_kernel.so HOSTS=hosts.txt N=8 examples/at-scale/parallel.sh
#
# hosts.txt is parallel's --sshloginfile (one "N/host" a line; ":" is this machine). smattn
# and the plugin must be installed at the same paths on every host. SSH=0 runs the shards
# on this machine only (what `make check` does, with the built-in kernel).
set -euo pipefail
N=${N:-8}
SUITE=${SUITE:-full}
SEED=${SEED:-0}
KERNEL=${KERNEL:-builtin}
OUT=${OUT:-smattn-shards}
SMATTN=${SMATTN:-smattn}
HOSTS=${HOSTS:-hosts.txt}
mkdir -p "$OUT"
where=(--sshloginfile "$HOSTS" --return "$OUT/shard-{}.json" --cleanup)
[ "${SSH:-1}" = 0 ] && where=(-j "${JOBS:-2}")
# exit 1 is a kernel that does not conform: its report is wanted all the same; 2 and 3 are
# errors (the plugin could not be loaded, the oracle failed) and stop the run
seq 0 $((N - 1)) | parallel --will-cite --halt now,fail=1 "${where[@]}" \
  "mkdir -p $OUT && $SMATTN conform --kernel $KERNEL --suite $SUITE --seed $SEED \
     --shard {}/$N --json $OUT/shard-{}.json >$OUT/shard-{}.txt 2>&1; r=\$?; [ \$r -le 1 ]"
shards=()
for i in $(seq 0 $((N - 1))); do shards+=("$OUT/shard-$i.json"); done
exec "$SMATTN" report merge "$OUT/merged.json" "${shards[@]}" --junit "$OUT/merged.xml" \
  ${BASELINE:+--baseline "$BASELINE"}
