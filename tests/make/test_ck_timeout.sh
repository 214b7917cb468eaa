#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# test_ck_timeout.sh: CK_TIMEOUT_MULTIPLIER (the Makefile, before check-unit) reaches the
# Check runner of `make check-unit` and of `make check-san`: by default at least 3 under
# the sanitizers and at least 1 without, and at least the load per core; a value given on
# the command line or in the environment wins. The runner is a stand-in script that prints
# what it got; -o keeps make from building or running anything else (check-san: make -n).
# Usage: test_ck_timeout.sh (from make check-make; MAKE may name make).
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
MAKE=${MAKE:-make}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
fail() { echo "test_ck_timeout: FAILED: $*" >&2; exit 1; }
printf '#!/bin/sh\necho "multiplier=${CK_TIMEOUT_MULTIPLIER-unset}"\n' >"$tmp/run"
chmod +x "$tmp/run"
# make with everything but the runner's recipe taken as done
# (CHECK_UNIT_NO_EXTRA: not the suites check-unit runs after the runner, this test among them)
mk() { env -u CK_TIMEOUT_MULTIPLIER "$@" -C "$root" --no-print-directory -s -o tests -o check-fuzz-replay \
         -o deps-check CHECK_UNIT_NO_EXTRA=1 TESTBIN="$tmp/run"; }
got() { sed -n 's/^multiplier=//p' <<<"$1" | tail -1; }
ok_int() { [[ $1 =~ ^[0-9]+$ ]] && [ "$1" -ge "$2" ]; }

load=$(awk -v n="$(nproc)" '{ r = $1 / n; print (r == int(r) ? r : int(r) + 1) }' /proc/loadavg)
out=$(mk $MAKE check-unit 2>&1) || fail "make check-unit: $out"
m=$(got "$out")
ok_int "$m" 1 || fail "make check-unit: the runner got CK_TIMEOUT_MULTIPLIER='$m' ($out)"
# the load per core is read at make's start; it may have fallen since, not by much
ok_int "$m" $((load > 2 ? load - 1 : 1)) || fail "make check-unit: multiplier $m at a load per core of about $load"
# check-san: its sub-make would build the sanitizer tree first (make passes no -o down), so
# dry-run (-n): the runner's command line as the sub-make would run it
san() { env -u CK_TIMEOUT_MULTIPLIER "$MAKE" -C "$root" --no-print-directory -n check-san TESTBIN="$tmp/run" "$@" 2>&1 |
        grep -F "$tmp/run" | sed -n 's/.*CK_TIMEOUT_MULTIPLIER=\([^ ]*\) .*/\1/p' | tail -1; }
s=$(san)
ok_int "$s" 3 || fail "make check-san: the runner gets CK_TIMEOUT_MULTIPLIER='$s', want >= 3"
[ "$s" -ge "$m" ] || fail "make check-san: multiplier $s below check-unit's $m"
s7=$(san CK_TIMEOUT_MULTIPLIER=7)
[ "$s7" = 7 ] || fail "make check-san CK_TIMEOUT_MULTIPLIER=7: the runner gets '$s7'"
out=$(CK_TIMEOUT_MULTIPLIER=5 "$MAKE" -C "$root" --no-print-directory -s -o tests -o check-fuzz-replay \
        -o deps-check CHECK_UNIT_NO_EXTRA=1 TESTBIN="$tmp/run" check-unit 2>&1) ||
    fail "CK_TIMEOUT_MULTIPLIER=5 make check-unit: $out"
[ "$(got "$out")" = 5 ] || fail "CK_TIMEOUT_MULTIPLIER=5 in the environment: the runner got '$(got "$out")'"
echo "test_ck_timeout: check-unit x$m, check-san x$s (load per core about $load), overrides honoured: passed"
