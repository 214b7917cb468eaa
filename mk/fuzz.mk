# mk/fuzz.mk: the fuzzing rules (issue 5; fuzz/README.md), included by the Makefile.
.PHONY: check-fuzz-replay fuzz-build fuzz-bins fuzz fuzz-seeds

# ---- fuzzing (issue 5; fuzz/README.md) ---------------------------------------------------
# make check replays every target's corpus and regressions through a plain main built with
# the same flags as the tests (so check-san replays them under ASan+UBSan too).
FUZZ_TARGETS := fuzz_diff fuzz_ref_props fuzz_decode_prefill fuzz_api fuzz_case_files
FUZZ_COMMON  := $(BUILD)/fuzz/common/fuzz_input.o $(BUILD)/fuzz/common/fuzz_check.o
$(BUILD)/fuzz/replay/%: $(BUILD)/fuzz/%.o $(BUILD)/fuzz/replay_main.o $(FUZZ_COMMON) $(IOLIB) $(LIB)
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS_BASE) -o $@ $^ $(JSONC_LIBS) $(LIBS)
check-fuzz-replay: $(patsubst %,$(BUILD)/fuzz/replay/%,$(FUZZ_TARGETS))
	@for t in $(FUZZ_TARGETS); do \
	  SMATTN_FUZZ_FULL=1 $(BUILD)/fuzz/replay/$$t fuzz/corpus/$$t fuzz/regressions/$$t || exit 1; done

# The seed corpora: `make fuzz-seeds` rewrites fuzz/corpus/<target>/seed-* and npy-*/json-*.
$(BUILD)/fuzz/gen_seeds: $(BUILD)/fuzz/tools/gen_seeds.o $(FUZZ_COMMON) $(IOLIB) $(LIB)
	$(CC) $(CFLAGS_BASE) -o $@ $^ $(JSONC_LIBS) $(LIBS)
fuzz-seeds: $(BUILD)/fuzz/gen_seeds
	@for t in $(FUZZ_TARGETS); do mkdir -p fuzz/corpus/$$t && $< $$t fuzz/corpus/$$t || exit 1; done

# libFuzzer builds: clang, the library and readers compiled with clang in build-fuzz/.
FUZZ_SAN := -fsanitize=fuzzer-no-link,address,undefined -fno-sanitize-recover=all \
            -fno-omit-frame-pointer
# Two clang 14 workarounds for library code that only gcc builds as is: io/case.c passes
# NAN (a float under clang's math.h) where a double is expected (-Wdouble-promotion), and
fuzz-build: deps
	@$(MAKE) --no-print-directory BUILD=build-fuzz CC=clang OPT=-O1 SAN="$(FUZZ_SAN)" fuzz-bins
fuzz-bins: $(patsubst %,$(BUILD)/fuzz/bin/%,$(FUZZ_TARGETS))
$(BUILD)/fuzz/bin/%: $(BUILD)/fuzz/%.o $(FUZZ_COMMON) $(IOLIB) $(LIB)
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS_BASE) -fsanitize=fuzzer -o $@ $^ $(JSONC_LIBS) $(LIBS)

# make fuzz T=<target> SECONDS=<n> JOBS=<n>: libFuzzer's fork mode with the target's dict
# and options; new inputs go to build-fuzz/corpus/<target>, crashes to build-fuzz/artifacts/.
T       ?= fuzz_diff
SECONDS ?= 60
JOBS    ?= $(shell nproc)
fuzz: fuzz-build
	@mkdir -p build-fuzz/corpus/$(T) build-fuzz/artifacts/$(T)
	build-fuzz/fuzz/bin/$(T) -fork=$(JOBS) -max_total_time=$(SECONDS) -dict=fuzz/$(T).dict \
	  $$(sed -n 's/^\([a-z_]*\) *= *\([^ ]*\)$$/-\1=\2/p' fuzz/$(T).options | grep -v '^-dict=') \
	  -artifact_prefix=build-fuzz/artifacts/$(T)/ build-fuzz/corpus/$(T) fuzz/corpus/$(T) \
	  fuzz/regressions/$(T)
