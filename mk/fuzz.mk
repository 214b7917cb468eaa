# SPDX-License-Identifier: MIT
# mk/fuzz.mk: the fuzzing rules (fuzz/README.md), included by the Makefile.
.PHONY: check-fuzz-replay check-fuzz-clang check-fuzz-decode fuzz-build fuzz-build-fast fuzz-bins fuzz fuzz-seeds fuzz-merge fuzz-min \
        fuzz-speed fuzz-cov fuzz-afl-build fuzz-afl

# ---- fuzzing (fuzz/README.md) ---------------------------------------------------
# make check replays every target's corpus and regressions through a plain main built with
# the same flags as the tests (so check-san replays them under ASan+UBSan too).
FUZZ_TARGETS := fuzz_diff fuzz_diff_long fuzz_dtypes fuzz_ref_props fuzz_decode_prefill fuzz_api fuzz_merge \
                fuzz_case_files fuzz_backward
FUZZ_COMMON  := $(BUILD)/fuzz/common/fuzz_input.o $(BUILD)/fuzz/common/fuzz_check.o
$(BUILD)/fuzz/replay/%: $(BUILD)/fuzz/%.o $(BUILD)/fuzz/replay_main.o $(FUZZ_COMMON) $(IOLIB) $(LIB)
	@mkdir -p $(dir $@)
	$(call say,LD,$@)$(CC) $(CFLAGS_BASE) -o $@ $^ $(IO_LIBS) $(LIBS)
check-fuzz-replay: $(patsubst %,$(BUILD)/fuzz/replay/%,$(FUZZ_TARGETS)) check-fuzz-decode
	@for t in $(FUZZ_TARGETS); do \
	  SMATTN_FUZZ_FULL=1 $(BUILD)/fuzz/replay/$$t fuzz/corpus/$$t || exit 1; \
	  SMATTN_FUZZ_FULL=2 $(BUILD)/fuzz/replay/$$t fuzz/regressions/$$t || exit 1; done

# fuzz/'s sources through clang's warnings: the libFuzzer builds (fuzz-build) compile them
# with clang only, which warns where gcc does not (a float promoted to double in an
# assignment, a variable set but not used); a second or two.
FUZZ_C_SRC := $(wildcard fuzz/*.c fuzz/common/*.c fuzz/tools/*.c)
check-fuzz-clang:
	@echo "  TEST  fuzz/ under clang's warnings ($(words $(FUZZ_C_SRC)) files, -fsyntax-only)"
	@for f in $(FUZZ_C_SRC); do \
	  clang $(filter-out $(SAN),$(CFLAGS_BASE)) $(JSONC_CFLAGS) -fsyntax-only $$f || exit 1; done

# tools/fuzz_decode.c: `build/fuzz/fuzz_decode [--target T] [--case DIR] FILE` prints what
# an input decodes to and writes it as a case directory; the replay smoke-tests it on three
# inputs through `smattn ref`.
$(BUILD)/fuzz/fuzz_decode: $(BUILD)/fuzz/tools/fuzz_decode.o $(FUZZ_COMMON) $(IOLIB) $(LIB)
	$(call say,LD,$@)$(CC) $(CFLAGS_BASE) -o $@ $^ $(IO_LIBS) $(LIBS)
check-fuzz-decode: $(BUILD)/fuzz/fuzz_decode $(CLI)
	@rm -rf $(BUILD)/fuzz/decode-smoke && mkdir -p $(BUILD)/fuzz/decode-smoke
	@$< --target fuzz_diff --case $(BUILD)/fuzz/decode-smoke/case \
	  fuzz/corpus/fuzz_diff/seed-000-chunked_prefill > $(BUILD)/fuzz/decode-smoke.txt
	@$(CLI) ref $(BUILD)/fuzz/decode-smoke/case $(BUILD)/fuzz/decode-smoke/out --weights
	@$< --target fuzz_ref_props --case $(BUILD)/fuzz/decode-smoke/quant \
	  fuzz/regressions/fuzz_ref_props/harness-q8_0-subnormal-block.bin \
	  >> $(BUILD)/fuzz/decode-smoke.txt
	@$(CLI) ref $(BUILD)/fuzz/decode-smoke/quant $(BUILD)/fuzz/decode-smoke/quant-out --weights
	@$< --target fuzz_backward --case $(BUILD)/fuzz/decode-smoke/backward \
	  fuzz/corpus/fuzz_backward/seed-000-chunked_prefill >> $(BUILD)/fuzz/decode-smoke.txt
	@$(CLI) ref $(BUILD)/fuzz/decode-smoke/backward $(BUILD)/fuzz/decode-smoke/backward-out
	@test -f $(BUILD)/fuzz/decode-smoke/backward-out/dq.npy
	@$< --target fuzz_backward --case $(BUILD)/fuzz/decode-smoke/backward-mask \
	  fuzz/corpus/fuzz_backward/seed-006-s_gt_t >> $(BUILD)/fuzz/decode-smoke.txt
	@$(CLI) ref $(BUILD)/fuzz/decode-smoke/backward-mask $(BUILD)/fuzz/decode-smoke/backward-mask-out
	@test -f $(BUILD)/fuzz/decode-smoke/backward-mask-out/dq.npy && \
	  test ! -e $(BUILD)/fuzz/decode-smoke/backward-mask-out/dbias.npy
	@echo "fuzz_decode: a decoded seed, a quantised input (q8_0, descales) and two backward inputs (ALiBi, dO; mask mode: no dBias) written as cases, reproduced by smattn ref"

# The seed corpora: `make fuzz-seeds` rewrites fuzz/corpus/<target>/seed-* and npy-*/json-*;
# fuzz_dtypes also gets fuzz_diff's regressions, as they are and with dtype choices (from-*).
$(BUILD)/fuzz/gen_seeds: $(BUILD)/fuzz/tools/gen_seeds.o $(FUZZ_COMMON) $(IOLIB) $(LIB)
	$(call say,LD,$@)$(CC) $(CFLAGS_BASE) -o $@ $^ $(IO_LIBS) $(LIBS)
fuzz-seeds: $(BUILD)/fuzz/gen_seeds
	@for t in $(FUZZ_TARGETS); do mkdir -p fuzz/corpus/$$t && $< $$t fuzz/corpus/$$t \
	  $$(test $$t = fuzz_dtypes && ls fuzz/regressions/fuzz_diff/*.bin) || exit 1; done

# libFuzzer builds: clang, the library and readers compiled with clang. Two flavours:
#   build-fuzz/       ASan + UBSan, -O1: the campaigns (`make fuzz`), merge, minimise;
#   build-fuzz-fast/  no sanitizer, -O2: speed measurements (`make fuzz-speed`) and long
#                     runs of the slow targets where more executions matter more.
FUZZ_SAN := -fsanitize=fuzzer-no-link,address,undefined -fno-sanitize-recover=all \
            -fno-omit-frame-pointer
fuzz-build: deps
	@$(MAKE) --no-print-directory BUILD=build-fuzz CC=clang OPT=-O1 SAN="$(FUZZ_SAN)" fuzz-bins
fuzz-build-fast: deps
	@$(MAKE) --no-print-directory BUILD=build-fuzz-fast CC=clang OPT=-O2 \
	  SAN="-fsanitize=fuzzer-no-link" fuzz-bins
fuzz-bins: $(patsubst %,$(BUILD)/fuzz/bin/%,$(FUZZ_TARGETS))
$(BUILD)/fuzz/bin/%: $(BUILD)/fuzz/%.o $(FUZZ_COMMON) $(IOLIB) $(LIB)
	@mkdir -p $(dir $@)
	$(call say,LD,$@)$(CC) $(CFLAGS_BASE) -fsanitize=fuzzer -o $@ $^ $(IO_LIBS) $(LIBS)

# make fuzz T=<target> SECONDS=<n> JOBS=<n> [FAST=1] [FUZZ_ARGS=...]: libFuzzer's fork mode
# with the target's dict and options; new inputs go to build-fuzz/corpus/<target>, crashes
# to build-fuzz/artifacts/<target>/. FAST=1 runs the unsanitized build. A campaign that must
# survive its findings adds FUZZ_ARGS=-ignore_crashes=1.
T         ?= fuzz_diff
SECONDS   ?= 60
JOBS      ?= $(shell nproc)
FAST      ?=
FUZZ_ARGS ?=
FUZZ_BIN   = $(if $(FAST),build-fuzz-fast,build-fuzz)/fuzz/bin/$(T)
FUZZ_OPTS  = -dict=fuzz/$(T).dict \
  $$(sed -n 's/^\([a-z_]*\) *= *\([^ ]*\)$$/-\1=\2/p' fuzz/$(T).options | grep -v '^-dict=')
fuzz: $(if $(FAST),fuzz-build-fast,fuzz-build)
	@mkdir -p build-fuzz/corpus/$(T) build-fuzz/artifacts/$(T)
	$(FUZZ_BIN) -fork=$(JOBS) -max_total_time=$(SECONDS) $(FUZZ_OPTS) $(FUZZ_ARGS) \
	  -artifact_prefix=build-fuzz/artifacts/$(T)/ build-fuzz/corpus/$(T) fuzz/corpus/$(T) \
	  fuzz/regressions/$(T)

# make fuzz-merge T=<target>: fuzz/corpus/<target> and build-fuzz/corpus/<target> (what
# campaigns found) minimised by edge coverage (libFuzzer -merge=1 without the value profile
# and the hit counts that fuzzing uses: those kept 1,129 and 940 of 1,576 fuzz_diff inputs,
# edges alone kept 207, which make check replays in seconds) into fuzz/corpus/<target>.
# Seeds that add no coverage are dropped (`make fuzz-seeds` writes them back, as committed).
fuzz-merge: fuzz-build
	@rm -rf build-fuzz/merge/$(T) && mkdir -p build-fuzz/merge/$(T) build-fuzz/corpus/$(T)
	build-fuzz/fuzz/bin/$(T) -merge=1 $(FUZZ_OPTS) -use_value_profile=0 -use_counters=0 \
	  build-fuzz/merge/$(T) \
	  fuzz/corpus/$(T) \
	  build-fuzz/corpus/$(T)
	@rm -f fuzz/corpus/$(T)/* && cp build-fuzz/merge/$(T)/* fuzz/corpus/$(T)/ && \
	  echo "fuzz-merge: $$(ls fuzz/corpus/$(T) | wc -l) inputs, $$(cat fuzz/corpus/$(T)/* | wc -c) bytes in fuzz/corpus/$(T)"

# make fuzz-min T=<target> CRASH=<file>: the smallest input that still crashes, in
# <file>.min (libFuzzer -minimize_crash=1), then its report through the gcc replay.
MIN_RUNS ?= 20000
fuzz-min: fuzz-build $(BUILD)/fuzz/replay/$(T)
	@test -n "$(CRASH)" || { echo "usage: make fuzz-min T=<target> CRASH=<file>" >&2; exit 2; }
	build-fuzz/fuzz/bin/$(T) -minimize_crash=1 -runs=$(MIN_RUNS) $(FUZZ_OPTS) \
	  -exact_artifact_path=$(CRASH).min $(CRASH)
	-$(BUILD)/fuzz/replay/$(T) $(CRASH).min 2>&1 | head -3
	@echo "fuzz-min: $(CRASH).min ($$(wc -c < $(CRASH).min) bytes)"

# make fuzz-speed [T=<target>] [SECONDS=<n>]: executions per second of the unsanitized
# -O2 build on one core over the committed corpus (replay_main --speed: in one process,
# wall clock and CPU time).
fuzz-speed: $(BUILD)/fuzz/replay/$(T)
	$(BUILD)/fuzz/replay/$(T) --speed $(if $(filter 60,$(SECONDS)),10,$(SECONDS)) \
	  fuzz/corpus/$(T) fuzz/regressions/$(T)

# make fuzz-cov: line coverage of ref/ and opt/ from every target's corpus, regressions
# and campaign corpus (build-fuzz/corpus/), replayed by the plain main built with clang
# -fprofile-instr-generate -fcoverage-mapping in build-fuzz-cov/; report in
# build-fuzz-cov/coverage.txt, annotated sources in build-fuzz-cov/html/.
COV_BUILD := build-fuzz-cov
fuzz-cov: deps
	@$(MAKE) --no-print-directory BUILD=$(COV_BUILD) CC=clang OPT=-O1 \
	  SAN="-fprofile-instr-generate -fcoverage-mapping -fprofile-update=atomic" \
	  $(patsubst %,$(COV_BUILD)/fuzz/replay/%,$(FUZZ_TARGETS))
	@rm -rf $(COV_BUILD)/prof && mkdir -p $(COV_BUILD)/prof
	@for t in $(FUZZ_TARGETS); do \
	  LLVM_PROFILE_FILE=$(CURDIR)/$(COV_BUILD)/prof/$$t-%4m.profraw SMATTN_FUZZ_FULL=2 \
	    $(COV_BUILD)/fuzz/replay/$$t fuzz/corpus/$$t fuzz/regressions/$$t \
	    $$(test -d build-fuzz/corpus/$$t && echo build-fuzz/corpus/$$t) | tail -1; done
	llvm-profdata merge -sparse -o $(COV_BUILD)/fuzz.profdata $(COV_BUILD)/prof/*.profraw
	llvm-cov report $(COV_BUILD)/fuzz/replay/fuzz_diff \
	  $(patsubst %,-object $(COV_BUILD)/fuzz/replay/%,$(filter-out fuzz_diff,$(FUZZ_TARGETS))) \
	  -instr-profile=$(COV_BUILD)/fuzz.profdata $(wildcard ref/*.c ref/*.h opt/*.c opt/*.h) \
	  | tee $(COV_BUILD)/coverage.txt
	@llvm-cov show $(COV_BUILD)/fuzz/replay/fuzz_diff \
	  $(patsubst %,-object $(COV_BUILD)/fuzz/replay/%,$(filter-out fuzz_diff,$(FUZZ_TARGETS))) \
	  -instr-profile=$(COV_BUILD)/fuzz.profdata -format=html -output-dir=$(COV_BUILD)/html \
	  $(wildcard ref/*.c ref/*.h opt/*.c opt/*.h)
	@echo "fuzz-cov: $(COV_BUILD)/coverage.txt, $(COV_BUILD)/html/index.html"

# AFL++ builds of the same targets (Debian package afl++): afl-clang-fast links the
# libFuzzer entry point to AFL's driver; make fuzz-afl T=<target> SECONDS=<n> runs one
# afl-fuzz instance seeded from the corpus, output in build-afl/out/<target>.
fuzz-afl-build:
	@mk/deps.sh afl++ $(DEPS_BUILD)
	@$(MAKE) --no-print-directory BUILD=build-afl CC=afl-clang-fast OPT=-O1 \
	  SAN="-fsanitize=address,undefined -fno-sanitize-recover=all" fuzz-bins
fuzz-afl: fuzz-afl-build
	@mkdir -p build-afl/out
	AFL_SKIP_CPUFREQ=1 AFL_I_DONT_CARE_ABOUT_MISSING_CRASHES=1 AFL_NO_UI=1 \
	  afl-fuzz -i fuzz/corpus/$(T) -o build-afl/out/$(T) -x fuzz/$(T).dict \
	  -V $(SECONDS) -- build-afl/fuzz/bin/$(T)
