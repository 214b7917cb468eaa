#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# fuzz-campaign.sh: a fuzz campaign over several hosts, each running libFuzzer's -fork mode
# on one target from a checkout of smattn, then the corpora merged into fuzz/corpus by
# coverage (libFuzzer -merge=1, `make fuzz-merge`). README "At scale"; fuzz/README.md.
#
#   HOSTS="h1 h2 h3" T=fuzz_diff HOURS=12 examples/at-scale/fuzz-campaign.sh
#
# Each host needs the checkout at the same path ($DIR) and clang (make fuzz installs it).
set -euo pipefail
T=${T:?which target, for instance fuzz_diff}
HOURS=${HOURS:-1}
DIR=${DIR:-$PWD}
JOBS=${JOBS:-2}
for h in ${HOSTS:?space-separated host names}; do
  ssh "$h" "cd '$DIR' && make fuzz T=$T SECONDS=$((HOURS * 3600)) JOBS=$JOBS" &
done
wait
# bring every host's new inputs (build-fuzz/corpus/$T) and crashes here
for h in $HOSTS; do
  mkdir -p "build-fuzz/corpus/$T" "build-fuzz/artifacts/$T/$h"
  rsync -a "$h:$DIR/build-fuzz/corpus/$T/" "build-fuzz/corpus/$T/"
  rsync -a "$h:$DIR/build-fuzz/artifacts/$T/" "build-fuzz/artifacts/$T/$h/"
done
make fuzz-merge T="$T"     # fuzz/corpus/$T minimised by coverage: commit it
ls "build-fuzz/artifacts/$T"/*/crash-* 2>/dev/null && echo "crashes found: see fuzz/README.md" || true
