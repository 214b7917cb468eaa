#!/bin/sh
# SPDX-License-Identifier: MIT
# Ensure the Debian packages a make target needs are installed.
# Usage: mk/deps.sh PKG... ; each PKG is checked with dpkg-query. As root on a
# Debian-like system the missing ones are installed with apt-get; elsewhere the
# script names them and fails, so that nothing half-built follows.
set -eu
# `make -j` may start this twice at once (deps and deps-check): one apt-get at a time.
if command -v flock >/dev/null 2>&1; then
  exec 9>"${TMPDIR:-/tmp}/smattn-deps.lock"
  flock 9
fi
missing=""
for p in "$@"; do
  if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed"; then
    missing="$missing $p"
  fi
done
[ -z "$missing" ] && exit 0
if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
  echo "mk/deps.sh: installing:$missing" >&2
  export DEBIAN_FRONTEND=noninteractive
  # A fresh machine has no package lists; an old list may lack a package.
  apt-get update -qq >/dev/null 2>&1 || apt-get update
  apt-get install -y -qq --no-install-recommends $missing >/dev/null || \
    apt-get install -y --no-install-recommends $missing
  exit 0
fi
echo "mk/deps.sh: missing Debian packages:$missing" >&2
echo "mk/deps.sh: install them (as root: apt-get install$missing) and run make again." >&2
exit 1
