#!/bin/bash -eu
# SPDX-License-Identifier: MIT
# build.sh: every fuzz target of smattn into $OUT, as ClusterFuzzLite / OSS-Fuzz expect:
# compiled with $CC $CFLAGS, linked with $CXX and $LIB_FUZZING_ENGINE, MPFR, GMP and json-c
# linked statically; beside each binary <target>_seed_corpus.zip (fuzz/corpus/<target> and
# fuzz/regressions/<target>), <target>.dict and <target>.options.
#
# Without Docker, run it by hand from anywhere (it finds the tree from its own path):
#   CC=clang CXX=clang++ CFLAGS="-O1 -g -fsanitize=address,undefined -fsanitize=fuzzer-no-link" \
#   LIB_FUZZING_ENGINE=-fsanitize=fuzzer SRC=/tmp OUT=/tmp/cflite-out .clusterfuzzlite/build.sh
# (CXX defaults to clang++, SRC is not used beyond the image's layout.)
: "${CC:?set CC}" "${CFLAGS:?set CFLAGS}" "${LIB_FUZZING_ENGINE:?set LIB_FUZZING_ENGINE}" \
  "${OUT:?set OUT}"
CXX=${CXX:-clang++}
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$ROOT"
WORK=${WORK:-$(mktemp -d)}
mkdir -p "$OUT" "$WORK/obj"

TARGETS="fuzz_diff fuzz_diff_long fuzz_dtypes fuzz_ref_props fuzz_decode_prefill fuzz_api fuzz_case_files fuzz_merge fuzz_backward"
# The project's own flags (Makefile): C11, no FMA contraction (the oracle's double-double
# arithmetic relies on single roundings), no fast-math; ISA flags on kernel files only.
PROJ="-std=c11 -ffp-contract=off -fno-fast-math -D_POSIX_C_SOURCE=200809L -Iinclude -I. -pthread"
JSONC_CFLAGS=$(pkg-config --cflags json-c 2>/dev/null || echo -I/usr/include/json-c)

objs=()
for src in core/*.c ref/*.c opt/*.c io/*.c fuzz/common/*.c; do
  isa=""
  case "$src" in
    opt/kernel_avx2.c) isa="-mavx2 -mfma -mf16c" ;;
    opt/kernel_avx512.c) isa="-mavx512f -mavx512bw -mavx512vl -mavx2 -mfma -mf16c" ;;
  esac
  o="$WORK/obj/${src//\//_}.o"
  $CC $CFLAGS $PROJ $isa $JSONC_CFLAGS -c "$src" -o "$o"
  objs+=("$o")
done

# Static MPFR, GMP, json-c and zlib: the runner image has no extra packages.
STATIC_LIBS="-Wl,-Bstatic -lmpfr -lgmp -ljson-c -lz -Wl,-Bdynamic -lm -pthread"
for t in $TARGETS; do
  $CC $CFLAGS $PROJ $JSONC_CFLAGS -c "fuzz/$t.c" -o "$WORK/obj/$t.o"
  $CXX $CFLAGS "$WORK/obj/$t.o" "${objs[@]}" $LIB_FUZZING_ENGINE $STATIC_LIBS -o "$OUT/$t"
  cp "fuzz/$t.dict" "$OUT/$t.dict"
  cp "fuzz/$t.options" "$OUT/$t.options"
  rm -f "$OUT/${t}_seed_corpus.zip"
  (cd fuzz && find "corpus/$t" "regressions/$t" -type f ! -name '.*' -print0 |
     xargs -0 zip -q -j "$OUT/${t}_seed_corpus.zip")
done
echo "build.sh: $(for t in $TARGETS; do printf '%s ' "$t"; done)in $OUT"
