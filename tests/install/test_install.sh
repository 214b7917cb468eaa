#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# test_install.sh: `make install` into a temporary DESTDIR used as a user would:
# the shared library exports exactly the functions of include/smattn.h, a C program builds
# with `pkg-config --cflags --libs smattn` alone (and statically with --static) and runs,
# the installed `smattn` runs from an empty directory with its installed data, the man
# pages format without warnings, and `make uninstall` leaves no file behind.
# Run by `make check-install` (and so by `make check`); prints a few lines, the last one
# the verdict. Environment: BUILD (default build), MAKE, PREFIX (default /usr/local).
set -euo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
cd "$ROOT"
BUILD=${BUILD:-build}
MAKE=${MAKE:-make}
PREFIX=${PREFIX:-/usr/local}
VERSION=$(cat VERSION)   # one line X.Y.Z, nothing else (the Makefile rejects anything else)
STAGE=$(mktemp -d "${TMPDIR:-/tmp}/smattn-install.XXXXXX")
trap 'rm -rf "$STAGE"' EXIT
D=$STAGE/root   # the DESTDIR
W=$STAGE/work   # an empty working directory, outside the tree
mkdir -p "$D" "$W"
fail() { echo "test_install: FAIL: $*" >&2; exit 1; }

# 0. The licence: every source file (C, headers, scripts, make files, Python, YAML, man
# pages) carries the SPDX line of LICENSE near its top (data, corpora and docs excepted).
spdx="SPDX-License-Identifier: MIT"
grep -q "MIT License" LICENSE || fail "LICENSE is not the MIT licence that the SPDX lines name"
if git rev-parse --is-inside-work-tree >/dev/null 2>&1; then
    files=$(git ls-files)
else
    files=$(find . -path ./build -prune -o -type f -print | sed 's|^\./||')
fi
missing=$(printf '%s\n' "$files" | grep -E '\.(c|h|sh|py|mk|map|ya?ml|toml|[13])$|(^|/)(Makefile|run|Dockerfile)$' |
          grep -v -E '(^|/)(corpus|regressions)/' | while IFS= read -r f; do
              head -n 3 "$f" | grep -q "$spdx" || echo "$f"; done)
[ -z "$missing" ] || { echo "$missing" >&2; fail "source files without '$spdx'"; }

# 1. Exported symbols: exactly the functions declared in include/smattn.h.
declared=$(sed -n 's/^[A-Za-z_][A-Za-z0-9_ *]*[ *]\(smattn_[a-z0-9_]*\)(.*/\1/p' include/smattn.h |
           sort -u)
exported=$(nm -D --defined-only "$BUILD/libsmattn.so.$VERSION" | awk '$3 !~ /^SMATTN_[0-9.]+$/ {print $3}' |
           sed 's/@.*//' | sort -u)
[ -n "$declared" ] || fail "no function found in include/smattn.h"
if [ "$declared" != "$exported" ]; then
    diff <(echo "$declared") <(echo "$exported") | sed 's/^</  declared, not exported:/; s/^>/  exported, not declared:/' >&2 || true
    fail "libsmattn.so exports a different set than include/smattn.h declares (mk/libsmattn.map)"
fi
# Every global the static archive defines carries the prefix (a static link shares the
# consumer's namespace): smattn_ for the API, smattn__ for the internals.
stray=$(nm -g --defined-only "$BUILD/libsmattn.a" | awk 'NF == 3 && $3 !~ /^smattn_/ {print $3}' |
        sort -u)
[ -z "$stray" ] || { echo "$stray" >&2; fail "libsmattn.a defines globals without the smattn_ prefix"; }
soname=$(readelf -d "$BUILD/libsmattn.so.$VERSION" | sed -n 's/.*Library soname: \[\(.*\)\]/\1/p')
[ "$soname" = "libsmattn.so.${VERSION%%.*}" ] || fail "soname is '$soname'"

# 2. Install.
# another package's file in bin/ and an empty include/ that were there before: uninstall keeps them
mkdir -p "$D$PREFIX/bin" "$D$PREFIX/include"
echo other >"$D$PREFIX/bin/other-tool"
inst=$($MAKE --no-print-directory install DESTDIR="$D" PREFIX="$PREFIX" BUILD="$BUILD" 2>&1) ||
    { echo "$inst" >&2; fail "make install"; }
# quiet: one short line per step ("  INST  DIR"), no raw command (V=1 shows them)
loud=$(grep -Ev '^  [A-Z]{2,5} +[^ ]' <<<"$inst" || true)
[ -z "$loud" ] || { echo "$loud" >&2; fail "make install printed more than its one-line steps"; }
P=$D$PREFIX
for f in bin/smattn lib/libsmattn.so.$VERSION lib/libsmattn.so.0 lib/libsmattn.so lib/libsmattn.a \
         include/smattn.h include/smattn_kernel.h lib/pkgconfig/smattn.pc \
         share/smattn/vectors/causal4_table.json share/man/man1/smattn.1 share/man/man3/smattn.3; do
    [ -e "$P/$f" ] || fail "make install did not install $PREFIX/$f"
done

# 3. A program built with pkg-config only, run against the installed library.
export PKG_CONFIG_PATH=$P/lib/pkgconfig PKG_CONFIG_SYSROOT_DIR=$D
[ "$(pkg-config --modversion smattn)" = "$VERSION" ] || fail "pkg-config --modversion smattn"
cc_=${CC:-cc}
# shellcheck disable=SC2046
(cd "$W" && $cc_ -std=c11 -o consumer "$ROOT/tests/install/consumer.c" $(pkg-config --cflags --libs smattn)) ||
    fail "consumer.c did not build with pkg-config --cflags --libs smattn"
# (no `cmd | grep -q` under pipefail: grep's early exit would make the writer fail)
dyn=$(readelf -d "$W/consumer")
grep -q 'NEEDED.*\[libsmattn.so.0\]' <<<"$dyn" || fail "consumer does not need libsmattn.so.0"
out=$(cd "$W" && LD_LIBRARY_PATH=$P/lib ./consumer) || fail "consumer: $out"
deps=$(LD_LIBRARY_PATH=$P/lib ldd "$W/consumer")
grep -qF "libsmattn.so.0 => $P/lib/" <<<"$deps" || fail "consumer did not load the installed libsmattn.so.0"
# Static: the archive and Libs.private are enough.
# shellcheck disable=SC2046
(cd "$W" && $cc_ -std=c11 -o consumer_static "$ROOT/tests/install/consumer.c" \
    $(pkg-config --cflags smattn) \
    $(pkg-config --static --libs smattn | sed 's/-lsmattn\b/-l:libsmattn.a/')) ||
    fail "consumer.c did not link statically with pkg-config --static --libs smattn"
(cd "$W" && ./consumer_static >/dev/null) || fail "consumer_static failed"
echo "test_install: $out (shared and static)"

# 4. The installed tool from an empty directory, with nothing of the tree in its environment.
S=$P/bin/smattn
v=$(cd "$W" && env -u SMATTN_ROOT "$S" version) || fail "smattn version"
[ "${v#smattn "$VERSION" }" != "$v" ] || fail "smattn version says '$v', VERSION '$VERSION'"
(cd "$W" && env -u SMATTN_ROOT "$S" demo "$P/share/smattn/vectors" --vectors-only >/dev/null) ||
    fail "smattn demo on the installed vectors"
# with no DIR: the installed vectors, found as conform finds them
demo=$(cd "$W" && env -u SMATTN_ROOT "$S" demo --vectors-only 2>&1) ||
    { echo "$demo" | tail -3 >&2; fail "smattn demo --vectors-only (no DIR) from an empty directory"; }
grep -qF "share/smattn/vectors" <<<"$demo" || fail "smattn demo did not take the installed vectors"
conf=$(cd "$W" && env -u SMATTN_ROOT "$S" conform --suite quick 2>&1) || { echo "$conf" >&2; fail "smattn conform --suite quick"; }
golden=$(echo "$conf" | awk '$1 == "golden" && $2 ~ /^[0-9]+$/ {print $2}')
from=$(echo "$conf" | sed -n 's/^golden vectors: [0-9]* ran from //p')
[ "$(cd "$from" 2>/dev/null && pwd -P)" = "$(cd "$P/share/smattn/vectors" && pwd -P)" ] ||
    fail "the installed smattn conform took its vectors from '$from', not $PREFIX/share/smattn/vectors"
# (the merge vectors run in the merge category, for a kernel with a merge entry: counted apart)
nvec=$(grep -L '"op": *"merge"' "$P/share/smattn/vectors/"*.json | wc -l)
# the fuzzer finds (conform/regressions) are installed and run too: a category never vanishes
nreg=$(ls -d "$P/share/smattn/regressions/"*/ 2>/dev/null | wc -l)
ran_reg=$(echo "$conf" | awk '$1 == "regressions" && $2 ~ /^[0-9]+$/ {print $2}')
[ "$nreg" -gt 0 ] && [ "${ran_reg:-0}" = "$nreg" ] ||
    fail "the installed smattn conform ran ${ran_reg:-0} regressions cases, not the $nreg of $PREFIX/share/smattn/regressions"
if [ "${golden:-0}" = "$nvec" ]; then
    echo "test_install: installed smattn conform --suite quick found its $nvec golden vectors: $(echo "$conf" | tail -1)"
else
    fail "the installed smattn conform ran ${golden:-0} golden vectors, not the $nvec of $PREFIX/share/smattn/vectors"
fi

# 5. The man pages: man opens them, groff finds nothing to warn about.
for m in man1/smattn.1 man3/smattn.3; do
    warn=$(groff -man -Tutf8 -ww -z "$P/share/man/$m" 2>&1) || fail "groff $m"
    [ -z "$warn" ] || { echo "$warn" >&2; fail "groff warns on $m"; }
    page=$(MANWIDTH=80 man -l "$P/share/man/$m" 2>&1) || fail "man -l $m"
    grep -q '^NAME' <<<"$page" || fail "man -l $m shows no NAME section"
    th=$(sed -n 's/^\.TH .*"smattn \([^"]*\)".*/\1/p' "$P/share/man/$m")
    [ "$th" = "$VERSION" ] || fail "the installed $m says version '$th', VERSION '$VERSION'"
done
[ "$(man -M "$P/share/man" -w smattn)" = "$P/share/man/man1/smattn.1" ] || fail "man -M ... smattn"

# 5b. The installed Python package, from an empty directory: it imports, runs the oracle and
# the kernel, and checks an attention output (the recorded library path is the real PREFIX,
# so SMATTN_LIBRARY points into the DESTDIR as LD_LIBRARY_PATH does for the C program).
PYTHON=${PYTHON:-$(test -x /usr/bin/python3 && echo /usr/bin/python3 || echo python3)}
site=$(cd "$P" && find . -path '*-packages/smattn/__init__.py' | head -1)
[ -n "$site" ] || fail "make install put no Python package smattn under $PREFIX"
site=$(cd "$P/$(dirname "$(dirname "$site")")" && pwd -P)
pyout=$(cd "$W" && env -u SMATTN_ROOT -u SMATTN_SHIM PYTHONPATH="$site" PYTHONDONTWRITEBYTECODE=1         SMATTN_LIBRARY="$P/lib/libsmattn.so.0" "$PYTHON" -c '
import numpy as np, smattn
rng = np.random.default_rng(0)
q = rng.standard_normal((1, 16, 28, 64), dtype=np.float32)
k = rng.standard_normal((1, 16, 4, 64), dtype=np.float32)
v = rng.standard_normal((1, 16, 4, 64), dtype=np.float32)
o, lse = smattn.attention(q, k, v, causal=True)
r = smattn.check(o, q, k, v, lse=lse, causal=True)
assert r.passed, r.reason
assert smattn.__file__.startswith("'"$site"'"), smattn.__file__
assert smattn.__version__ == "'"$VERSION"'", (smattn.__version__, "'"$VERSION"'")
print("python", smattn.__version__, "max error/bound %.4f" % r.max_ratio)
' 2>&1) || { echo "$pyout" >&2; fail "the installed Python package"; }
echo "test_install: installed Python package: $pyout"

# 5c. README's commands for a PREFIX outside the search paths (its "export ..." block, with
# $HOME/.local standing for the staged prefix) import the installed package from an empty
# directory: PYTHONPATH names the right site directory.
block=$(awk '/^export PKG_CONFIG_PATH=\$HOME\/.local/ {on = 1} on && /^```/ {exit} on' README.md)
grep -q '^export PYTHONPATH=' <<<"$block" || fail "README's PREFIX section does not set PYTHONPATH"
readme_out=$(cd "$W" && env -u SMATTN_ROOT -u SMATTN_SHIM -u PYTHONPATH PYTHONDONTWRITEBYTECODE=1 \
    SMATTN_LIBRARY="$P/lib/libsmattn.so.0" HOME="$STAGE/home" \
    bash -ec "$(sed "s|\$HOME/.local|$P|g" <<<"$block")" 2>&1) ||
    { echo "$readme_out" >&2; fail "README's PREFIX commands (PYTHONPATH) did not import the installed smattn"; }
[ "$(tail -1 <<<"$readme_out")" = "$VERSION" ] || fail "README's PREFIX commands printed '$readme_out'"
echo "test_install: README's PYTHONPATH for a PREFIX imports smattn $readme_out"

# 5d. The manuals and examples under share/doc/smattn, and `smattn conform --help` names the
# installed conform/README.md (DOCDIR, computed from PREFIX as the data directory is).
for f in conform/README.md python/README.md examples/README.md examples/example_kernel.c \
         examples/conform-gate.yml $(git ls-files examples 2>/dev/null); do
    cmp -s "$f" "$P/share/doc/smattn/$f" || fail "make install did not install $f as $PREFIX/share/doc/smattn/$f"
done
[ -x "$P/share/doc/smattn/examples/at-scale/parallel.sh" ] || fail "examples/at-scale/parallel.sh installed without its x bit"
chelp=$(cd "$W" && env -u SMATTN_ROOT "$S" conform --help) || fail "installed smattn conform --help"
grep -qF "$PREFIX/share/doc/smattn/conform/README.md" <<<"$chelp" ||
    { echo "$chelp" | tail -2 >&2; fail "smattn conform --help does not name $PREFIX/share/doc/smattn/conform/README.md"; }

# 6. Uninstall: no file, link or directory that install created is left; what was there before
# (bin/other-tool, an empty include/) stays.
$MAKE --no-print-directory -s uninstall DESTDIR="$D" PREFIX="$PREFIX" BUILD="$BUILD" >/dev/null
left=$(cd "$D" && find . -mindepth 1 | sort | tr '\n' ' ')
want=$(cd "$D" && for p in ${PREFIX//\// }; do q=${q:-.}/$p; echo "$q"; done | sort | tr '\n' ' ')
want=$(printf '%s\n' $want ".$PREFIX/bin" ".$PREFIX/bin/other-tool" ".$PREFIX/include" | sort -u | tr '\n' ' ')
[ "$left" = "$want" ] || { echo "left: $left" >&2; echo "want: $want" >&2;
    fail "make uninstall left files or directories it created behind, or removed others"; }
# 7. No python3: make install stops with one clear line and puts no Python package anywhere.
N=$STAGE/nopy
if nopy=$($MAKE --no-print-directory -s install DESTDIR="$N" PREFIX="$PREFIX" BUILD="$BUILD" \
          PYTHON=/nonexistent/python3 2>&1); then
    fail "make install PYTHON=/nonexistent/python3 succeeded"
fi
grep -qF "make install-python: PYTHON=/nonexistent/python3 does not run a python3" <<<"$nopy" ||
    { echo "$nopy" >&2; fail "make install without python3: no clear message"; }
# (Python examples under share/doc/smattn/examples are documentation, installed either way.)
[ -z "$(find "$N" -name dist-packages -o -name site-packages -o -path '*/smattn/__init__.py')" ] ||
    fail "make install without python3 put the Python package somewhere"
echo "test_install: make install without python3: $(grep -F 'does not run' <<<"$nopy" | cut -c1-70)..."

echo "test_install: make install, pkg-config, the installed smattn and man pages, make uninstall: passed"
