# SPDX-License-Identifier: MIT
# smattn: build, test and demo. `make demo` and `make check` are the two entry points;
# each first makes sure the Debian packages it needs are present (mk/deps.sh).
.SUFFIXES:
.DELETE_ON_ERROR:
# keep intermediate objects: make check must end on its summary, not on an rm
.SECONDARY:
SHELL := /bin/bash

# Quiet by default: one short line per file built ("  CC    core/bound.o"); `make V=1`
# prints the full commands instead, `make -s` neither (the first word of MAKEFLAGS holds
# the one-letter flags).
V ?= 0
ifeq ($(V),1)
Q :=
say :=
else ifneq ($(findstring s,$(firstword -$(MAKEFLAGS))),)
Q := @
say := @
else
Q := @
say = @printf '  %-5s %s\n' '$(1)' '$(patsubst $(BUILD)/%,%,$(2))';
endif

# The version lives in VERSION only (CHANGELOG.md says what each holds). The soname carries
# its major (the ABI), smattn.pc and the Python package read it, and include/smattn.h's
# SMATTN_VERSION_* macros are checked against it at every build ($(BUILD)/version.ok).
# VERSION holds one line, X.Y.Z, and nothing else (no comment): every reader (this file,
# tests/install/test_install.sh, python/setup.py, smattn/_version.py) takes it whole.
VERSION       := $(shell cat VERSION)
ifneq ($(shell grep -c '' VERSION 2>/dev/null) $(shell grep -Ecx '[0-9]+\.[0-9]+\.[0-9]+' VERSION 2>/dev/null),1 1)
$(error VERSION must hold one line X.Y.Z and nothing else (no comment, no blank line); it holds '$(VERSION)')
endif
VERSION_MAJOR := $(word 1,$(subst ., ,$(VERSION)))

CC      ?= gcc
ifeq ($(origin CC),default)
CC := gcc
endif
BUILD   ?= build
OPT     ?= -O2
SAN     ?=
DEFS    ?=
# -ffp-contract=off everywhere: the oracle's double-double arithmetic and the bound's
# evaluation depend on every operation being rounded once (SPEC 5.2).
WARN    := -Wall -Wextra -Wpedantic -Werror -Wshadow -Wstrict-prototypes \
           -Wmissing-prototypes -Wvla -Wformat=2 -Wdouble-promotion -Wcast-qual \
           -Wpointer-arith -Wundef
CFLAGS_BASE := -std=c11 $(OPT) -g $(WARN) -ffp-contract=off -fno-fast-math \
           -D_POSIX_C_SOURCE=200809L -Iinclude -I. -pthread $(SAN) $(DEFS)
JSONC_CFLAGS = $(shell pkg-config --cflags json-c 2>/dev/null)
JSONC_LIBS   = $(shell pkg-config --libs json-c 2>/dev/null || echo -ljson-c)
# io/ also needs zlib (crc32 of the output set's marker, io/case_out.c)
IO_LIBS      = $(JSONC_LIBS) $(shell pkg-config --libs zlib 2>/dev/null || echo -lz)
CHECK_LIBS   = $(shell pkg-config --libs check 2>/dev/null || echo -lcheck -lsubunit -lrt)
LIBS    := -lmpfr -lgmp -lm -pthread

DEPS_BUILD := libmpfr-dev libgmp-dev libjson-c-dev zlib1g-dev pkg-config python3
DEPS_CHECK := $(DEPS_BUILD) check man-db groff-base python3-numpy python3-pytest parallel python3-yaml \
              clang

LIB_SRC := $(wildcard core/*.c ref/*.c opt/*.c)
IO_SRC  := $(wildcard io/*.c)
CLI_SRC := $(wildcard cli/*.c)
TEST_SRC := $(wildcard tests/test_*.c)
TSUP_SRC := $(wildcard tests/support/*.c)

obj = $(patsubst %.c,$(BUILD)/%.o,$(1))
LIB     := $(BUILD)/libsmattn.a
IOLIB   := $(BUILD)/libsmattn_io.a
CLI     := $(BUILD)/smattn
TESTBIN := $(BUILD)/tests/run

.PHONY: all deps deps-check demo check check-build check-built check-unit check-reach check-shards check-man check-make check-examples check-san check-tsan check-long check-huge lib cli tests clean bench-ref bench-ref-backward bench bench-read bench-phases bench-tiles bench-shape bench-wake bench-layout bench-backward \
        check-exp format
all: deps cli

deps:
	@mk/deps.sh $(DEPS_BUILD)
deps-check:
	@mk/deps.sh $(DEPS_CHECK)

$(BUILD)/%.o: %.c | deps
	@mkdir -p $(dir $@)
	$(call say,CC,$@)$(CC) $(CFLAGS_BASE) $(ISAFLAGS) $(JSONC_CFLAGS) -MMD -MP -c $< -o $@

# ISA flags on the kernel files only; opt/dispatch.c picks one at run time.
$(BUILD)/opt/kernel_avx2.o: ISAFLAGS := -mavx2 -mfma -mf16c
$(BUILD)/opt/kernel_avx512.o: ISAFLAGS := -mavx512f -mavx512bw -mavx512vl -mavx2 -mfma -mf16c

# include/smattn.h must state the version of VERSION (an installed header cannot read the
# file, and every consumer of include/, Frama-C and .clusterfuzzlite/build.sh among them,
# reads the header as it is, so the macros stay literal and are checked here).
$(BUILD)/version.ok: VERSION include/smattn.h
	@mkdir -p $(dir $@)
	@hv=$$(sed -n 's/^#define SMATTN_VERSION_\(MAJOR\|MINOR\|PATCH\) \([0-9]*\)$$/\2/p' \
	       include/smattn.h | paste -sd.); \
	 if [ "$$hv" != "$(VERSION)" ]; then \
	   echo "include/smattn.h says version '$$hv', VERSION says '$(VERSION)': make them agree" >&2; \
	   exit 1; fi; touch $@

# A sanitizer build's static library is made of its position-independent objects (the
# plugins' and the shared library's, mk/conform.mk), so that the kernel files, the slowest
# to compile under ASan (kernel_avx512.c 26 s, kernel_avx2.c 13 s), are compiled once per
# build, not twice; the plain build keeps position-dependent objects for the benchmarks.
LIB_OBJ := $(if $(SAN),$(patsubst %.c,$(BUILD)/pic/%.o,$(LIB_SRC)),$(call obj,$(LIB_SRC)))
$(LIB): $(LIB_OBJ) | $(BUILD)/version.ok
	$(call say,AR,$@)rm -f $@ && ar rcs $@ $^
$(IOLIB): $(call obj,$(IO_SRC))
	$(call say,AR,$@)rm -f $@ && ar rcs $@ $^

$(CLI): $(call obj,$(CLI_SRC)) $(IOLIB) $(LIB)
	$(call say,LD,$@)$(CC) $(CFLAGS_BASE) -o $@ $^ $(IO_LIBS) $(LIBS)

# One runner for every tests/test_<unit>.c; the suite list is generated from the names.
$(BUILD)/tests/suites.h: $(TEST_SRC) | deps
	@mkdir -p $(dir $@)
	@( for f in $(sort $(notdir $(basename $(TEST_SRC)))); do \
	     echo "SUITE($${f#test_})"; done ) > $@.tmp && \
	  (cmp -s $@.tmp $@ || mv $@.tmp $@); rm -f $@.tmp
$(BUILD)/tests/runner.o: tests/runner.c $(BUILD)/tests/suites.h | deps-check
	@mkdir -p $(dir $@)
	$(call say,CC,$@)$(CC) $(CFLAGS_BASE) $(JSONC_CFLAGS) -I$(BUILD)/tests -MMD -MP -c $< -o $@
# the test sources include check.h: with make -j on a fresh machine they must not be
# compiled before deps-check has installed it
$(call obj,$(TEST_SRC) $(TSUP_SRC)): | deps-check
$(TESTBIN): $(BUILD)/tests/runner.o $(call obj,$(TEST_SRC) $(TSUP_SRC)) $(IOLIB) $(LIB) | deps-check
	$(call say,LD,$@)$(CC) $(CFLAGS_BASE) -o $@ $^ $(CHECK_LIBS) $(IO_LIBS) $(LIBS)

lib: $(LIB)
cli: $(CLI)
# the benchmark programs too, so that make check keeps them compiling (none of them runs);
# in the plain build only (the sanitizer build of them cost about a minute of make check)
BENCH_BINS := $(BUILD)/bench_opt $(BUILD)/bench_ref $(BUILD)/bench_ref_backward $(BUILD)/bench_read \
              $(BUILD)/bench_shape $(BUILD)/bench_tiles $(BUILD)/bench_wake $(BUILD)/check_exp \
              $(BUILD)/bench_layout $(BUILD)/bench_backward
tests: $(TESTBIN) $(CLI) $(if $(SAN),,$(BENCH_BINS))

# The whole suite: install into a temporary DESTDIR and use it (tests/install/), unit,
# property and CLI tests, then the same suite under ASan+UBSan (so it ends on a summary).
# With two cores or more the sanitizer half runs beside the plain half (each suite runner is
# one process at a time, so one core each): its output is kept in build-san/check-san.log and
# printed after the plain half's, so the output reads in order and ends on its summary. One
# core, or CHECK_SAN_BESIDE=0, runs them one after the other.
CHECK_JOBS ?= $(shell nproc 2>/dev/null || echo 1)
# The plain half ends sooner (its suites run 3-4x faster): the sanitizer suites named in
# CHECK_SAN_LATER run after it, on the core it frees, before the rest of the sanitizer half
# is printed. Chosen so that both cores end together: from a fresh clone at c0401be the
# plain core ran its last sanitizer suite (gate cli reasons, 91 s) to 532 s and then waited
# to 628 s for the other; mutants, conform_backward, conform and case_out (20, 12, 9.5 and
# 6 s under the sanitizers) moved here. At 81c089a the other core ended at 582 s, this one
# at 606 s: conform_backward (13 s) went back.
CHECK_SAN_BESIDE ?= $(if $(filter 1,$(CHECK_JOBS)),0,1)
CHECK_SAN_LATER ?= gate cli reasons mutants conform case_out
check: deps-check
	@$(MAKE) --no-print-directory -j$(CHECK_JOBS) check-build
ifeq ($(CHECK_SAN_BESIDE),1)
	@log=build-san/check-san.log; rm -f $$log $$log.rc; \
	  ( $(MAKE) --no-print-directory CHECK_SUITES_SKIP="$(CHECK_SAN_LATER)" check-san \
	      > $$log 2>&1; echo $$? > $$log.rc ) & \
	  echo "  (the sanitizer half runs beside this one; its output follows at the end)"; \
	  $(MAKE) --no-print-directory check-install && \
	  $(MAKE) --no-print-directory check-unit && \
	  $(MAKE) --no-print-directory check-python && \
	  { echo "  ---- sanitizer suites $(CHECK_SAN_LATER) (ASan+UBSan) ----"; \
	    $(MAKE) --no-print-directory $(SAN_VARS) SMATTN_TEST_SCALE=$(CHECK_SAN_SCALE) \
	      CHECK_SUITES="$(CHECK_SAN_LATER)" CHECK_UNIT_NO_REPLAY=1 check-unit; }; rc=$$?; wait; \
	  echo; echo "  ---- the sanitizer half (ASan+UBSan, $$log) ----"; cat $$log; \
	  san=$$(cat $$log.rc 2>/dev/null || echo 1); \
	  if [ $$rc -ne 0 ]; then echo "make check: the plain half failed (above)"; exit $$rc; fi; \
	  if [ $$san -ne 0 ]; then echo "make check: the sanitizer half failed (above)"; exit $$san; fi
else
	@$(MAKE) --no-print-directory check-install
	@$(MAKE) --no-print-directory check-unit
	@$(MAKE) --no-print-directory check-python
	@$(MAKE) --no-print-directory check-san
endif

# Everything make check runs, built first with one job per core (CHECK_JOBS; each half's
# suites then run one after the other, so that their output reads in order): built one file
# at a time, the two builds were about a third of make check on 2 cores.
SAN_VARS := BUILD=build-san OPT=-O1 \
  SAN="-fsanitize=address,undefined -fno-sanitize-recover=all -fno-omit-frame-pointer"
check-build: deps-check
	@$(MAKE) --no-print-directory check-built
	@$(MAKE) --no-print-directory $(SAN_VARS) check-built
# (check-built's prerequisites: after mk/*.mk, which define them)

# Check's time limits (tcase_set_timeout) scaled for the machine: Check multiplies them by
# CK_TIMEOUT_MULTIPLIER. By default 3 under a sanitizer (ASan+UBSan runs the suites 2-3x
# slower) and 1 otherwise, times the load per core when it is above 1 (the 1-minute load
# average over nproc, rounded up): a loaded shared machine once stopped make check on a
# timeout in the sanitizer build. `make check CK_TIMEOUT_MULTIPLIER=N` (or the variable in
# the environment) sets it (tests/make/test_ck_timeout.sh checks that it reaches the runner).
CK_TIMEOUT_BASE ?= $(if $(SAN),3,1)
ifeq ($(origin CK_TIMEOUT_MULTIPLIER),undefined)
CK_TIMEOUT_MULTIPLIER := $(shell awk -v b=$(CK_TIMEOUT_BASE) -v n=$$(nproc 2>/dev/null || echo 1) \
  '{ r = $$1 / (n > 0 ? n : 1); m = r > 1 ? b * r : b; print (m == int(m) ? m : int(m) + 1) }' \
  /proc/loadavg 2>/dev/null || echo $(CK_TIMEOUT_BASE))
endif

# CHECK_SUITES: the suites to run (all when empty); CHECK_SUITES_SKIP: suites left out of an
# empty list (make check's sanitizer half leaves CHECK_SAN_LATER to its end, below).
# CHECK_UNIT_NO_REPLAY=1 leaves the fuzz replays out.
ALL_SUITES := $(patsubst test_%,%,$(sort $(notdir $(basename $(TEST_SRC)))))
CHECK_SUITES ?= $(if $(CHECK_SUITES_SKIP),$(filter-out $(CHECK_SUITES_SKIP),$(ALL_SUITES)))
check-unit: tests $(if $(CHECK_UNIT_NO_REPLAY),,check-fuzz-replay)
	$(call say,TEST,$(TESTBIN))CK_TIMEOUT_MULTIPLIER=$(CK_TIMEOUT_MULTIPLIER) \
	  SMATTN_CLI=$(abspath $(CLI)) SMATTN_ROOT=$(CURDIR) $(TESTBIN) $(CHECK_SUITES)
	$(if $(SAN)$(CHECK_UNIT_NO_EXTRA),,@$(MAKE) --no-print-directory check-reach check-shards check-man check-make check-examples \
	  check-fuzz-clang)

# The quick suite in 3 shards through GNU parallel (examples/at-scale/parallel.sh), merged,
# against one unsharded run; gen's shards; the Slurm and Kubernetes recipes syntax-checked.
check-shards: tests
	@echo "  TEST  shards merged = the unsharded run (tests/shards/test_shards.sh)"
	@tests/shards/test_shards.sh $(CLI)

# The man pages against `smattn CMD --help` and include/smattn.h (tests/man/test_man.sh):
# every option, function, type and status code is on its page. Under a second.
check-man: $(CLI)
	@echo "  TEST  man pages = smattn --help and smattn.h (tests/man/test_man.sh)"
	@tests/man/test_man.sh $(CLI)

# examples/conform-gate.yml parses, pins no ref this repository lacks, and its install
# step refuses an empty SMATTN_REF and checks out a commit (tests/examples/). A second.
check-examples:
	@echo "  TEST  examples/conform-gate.yml (tests/examples/test_gate_yml.sh)"
	@tests/examples/test_gate_yml.sh

# CK_TIMEOUT_MULTIPLIER reaches the Check runner of check-unit and check-san (a stand-in
# runner, nothing built or run). A second.
check-make:
	@echo "  TEST  CK_TIMEOUT_MULTIPLIER reaches the runner (tests/make/test_ck_timeout.sh)"
	@MAKE='$(MAKE)' tests/make/test_ck_timeout.sh

# The CLI suite again with the CLI inside a folder of mode 0700, as a checkout under /root
# or a `mktemp -d` folder is: its tests that run the CLI as another user (nobody) must not
# depend on who can reach the checkout. About 10 s.
check-reach: tests
	@d=$$(mktemp -d) && trap 'rm -rf "$$d"' EXIT && mkdir -m 700 "$$d/private" && \
	  cp $(CLI) "$$d/private/smattn" && echo "  TEST  cli suite, the CLI in a 0700 folder" && \
	  CK_TIMEOUT_MULTIPLIER=$(CK_TIMEOUT_MULTIPLIER) SMATTN_CLI="$$d/private/smattn" \
	  SMATTN_ROOT=$(CURDIR) $(TESTBIN) cli

# The same suites under ASan+UBSan, their random and fixed lists of problems and of mutants
# at a quarter of their length (SMATTN_TEST_SCALE, tests/support/testkit.h test_keep): the
# sanitizers look for memory and undefined behaviour on the same code paths that the plain
# half judges in full (the suite opt alone took 3.5 of the sanitizer half's 7.4 CPU minutes
# at 1; at 0.5 the sanitizer half was the longer of the two, 8 minutes after the builds).
CHECK_SAN_SCALE ?= 0.25
check-san: deps-check
	@$(MAKE) --no-print-directory $(SAN_VARS) SMATTN_TEST_SCALE=$(CHECK_SAN_SCALE) check-unit

# The property suite (tests/test_props.c) with 100x its random problems, then opt and ref
# at 100x as well, then the suite huge (conform/battery_huge.c: T >= 65536, S T >= 2^31,
# offsets past 2^31 elements) through the built-in kernel, judged on 64 sampled rows per
# (batch, head), timed: run by hand before a release, not part of `make check`.
check-long: tests
	SMATTN_TEST_SCALE=100 SMATTN_CLI=$(abspath $(CLI)) SMATTN_ROOT=$(CURDIR) $(TESTBIN) props opt ref
	@$(MAKE) --no-print-directory check-huge

check-huge: cli
	@echo "  TEST  smattn conform --suite huge --rows 64 (the built-in kernel; a few minutes)"
	@t0=$$(date +%s); SMATTN_ROOT=$(CURDIR) $(CLI) conform --suite huge --rows 64 \
	  --json $(BUILD)/huge.json; rc=$$?; \
	  echo "  the suite huge took $$(( $$(date +%s) - t0 )) s (report: $(BUILD)/huge.json)"; exit $$rc

# ThreadSanitizer on the threaded suites (the kernel's pool, the oracle's workers, the properties).
check-tsan: deps-check
	@$(MAKE) --no-print-directory BUILD=build-tsan OPT=-O1 SAN="-fsanitize=thread" tests
	SMATTN_ROOT=$(CURDIR) TSAN_OPTIONS="halt_on_error=1" build-tsan/tests/run opt ref props

demo: deps cli
	@$(CLI) demo spec/vectors
	@echo; echo '4. smattn conform --suite quick: the built-in kernel through the conformance checker'; echo
	@$(CLI) conform --suite quick

# The oracle's speed: small rows on one core, a full decode step on all.
$(BUILD)/bench_ref: $(call obj,bench/bench_ref.c bench/bench_machine.c bench/peak_fma_avx2.c \
                    bench/peak_fma_avx512.c) $(LIB)
	$(call say,LD,$@)$(CC) $(CFLAGS_BASE) -o $@ $^ $(LIBS)
# The backward oracle on a decode step (SPEC 9.3's speed target): T = 4096 on every core.
$(BUILD)/bench_ref_backward: $(call obj,bench/bench_ref_backward.c) $(LIB)
	$(call say,LD,$@)$(CC) $(CFLAGS_BASE) -o $@ $^ $(LIBS)
bench-ref-backward: deps $(BUILD)/bench_ref_backward
	$(BUILD)/bench_ref_backward 4096
bench-ref: deps $(BUILD)/bench_ref
	$(BUILD)/bench_ref 7

# The optimised kernel's speed: canonical Qwen2.5-7B shapes, the machine's FMA
# peak and memory bandwidth measured in the same run, a scalar baseline run interleaved.
THREADS    ?= 2
ISA        ?=
BENCH_JSON ?= $(BUILD)/bench_opt.json
BENCH_SRC  := bench/bench_opt.c bench/bench_machine.c bench/bench_peer.c bench/peak_fma_avx2.c \
              bench/peak_fma_avx512.c
$(BUILD)/bench/peak_fma_avx2.o: ISAFLAGS := -mavx2 -mfma
$(BUILD)/bench/peak_fma_avx512.o: ISAFLAGS := -mavx512f -mavx2 -mfma
$(BUILD)/bench_opt: $(call obj,$(BENCH_SRC)) $(LIB)
	$(call say,LD,$@)$(CC) $(CFLAGS_BASE) -o $@ $^ $(LIBS) -ldl
# The peer in the same run: oneDNN composed by plugins/onednn, built by
# mk/onednn.mk's `onednn` (which installs Debian's libdnnl-dev when missing); without it
# the table says '-'. make check never needs oneDNN.
bench: deps $(BUILD)/bench_opt $(BUILD)/bench_layout $(BUILD)/bench_backward
	@$(MAKE) --no-print-directory onednn || echo "bench: no oneDNN peer (libdnnl-dev not installed)" >&2
	$(BUILD)/bench_opt --threads $(THREADS) $(if $(ISA),--isa $(ISA)) --json $(BENCH_JSON) \
	  $$(test -f /usr/include/oneapi/dnnl/dnnl.h && test -f $(ONEDNN_SO) && echo --peer $(ONEDNN_SO))
	$(BUILD)/bench_layout --threads $(THREADS) $(if $(ISA),--isa $(ISA))
	$(BUILD)/bench_backward --threads $(THREADS) $(if $(ISA),--isa $(ISA))

# The fast backward against the forward in the same run (bench/bench_backward.c), alone:
$(BUILD)/bench_backward: $(call obj,bench/bench_backward.c bench/bench_machine.c bench/peak_fma_avx2.c \
                         bench/peak_fma_avx512.c) $(LIB)
	$(call say,LD,$@)$(CC) $(CFLAGS_BASE) -o $@ $^ $(LIBS)
bench-backward: deps $(BUILD)/bench_backward
	$(BUILD)/bench_backward --threads $(THREADS) $(if $(ISA),--isa $(ISA))

# Ragged and paged layouts against the same problems dense (bench/bench_layout.c), alone:
$(BUILD)/bench_layout: $(call obj,bench/bench_layout.c bench/bench_machine.c bench/peak_fma_avx2.c \
                       bench/peak_fma_avx512.c) $(LIB)
	$(call say,LD,$@)$(CC) $(CFLAGS_BASE) -o $@ $^ $(LIBS)
bench-layout: deps $(BUILD)/bench_layout
	$(BUILD)/bench_layout --threads $(THREADS) $(if $(ISA),--isa $(ISA))

# Where the kernel's time goes: the library and bench_opt rebuilt in build-phases/ with
# -DSMATTN_PHASES (each thread times the phases of its work items), the same shapes.
bench-phases: deps
	@$(MAKE) --no-print-directory BUILD=build-phases DEFS=-DSMATTN_PHASES build-phases/bench_opt
	build-phases/bench_opt --threads $(THREADS) $(if $(ISA),--isa $(ISA))

# The micro-kernels alone on a tile that stays in cache, one thread: their ceiling
# (bench/tiles_body.h over each vector instance of the kernel body).
TILES_SRC := bench/bench_tiles.c bench/tiles_avx2.c bench/tiles_avx512.c bench/bench_machine.c \
             bench/peak_fma_avx2.c bench/peak_fma_avx512.c
$(BUILD)/bench/tiles_avx2.o: ISAFLAGS := -mavx2 -mfma -mf16c
$(BUILD)/bench/tiles_avx512.o: ISAFLAGS := -mavx512f -mavx512bw -mavx512vl -mavx2 -mfma -mf16c
$(BUILD)/bench_tiles: $(call obj,$(TILES_SRC)) $(LIB)
	$(call say,LD,$@)$(CC) $(CFLAGS_BASE) -o $@ $^ $(LIBS)
bench-tiles: deps $(BUILD)/bench_tiles
	$(BUILD)/bench_tiles

# A floor for the decode step: its K and V read with no arithmetic, in the kernel's order
# and in address order, beside the STREAM triad of the same run (bench/bench_read.c).
$(BUILD)/bench_read: $(call obj,bench/bench_read.c bench/bench_machine.c bench/peak_fma_avx2.c \
                     bench/peak_fma_avx512.c) $(LIB)
	$(call say,LD,$@)$(CC) $(CFLAGS_BASE) -o $@ $^ $(LIBS)
bench-read: deps $(BUILD)/bench_read
	$(BUILD)/bench_read --threads $(THREADS)

# One shape timed alone, with its output's hash, for A/B runs of two builds (bench/bench_shape.c):
# make bench-shape ARGS='--S 512 --T 512 --threads 1 --isa avx2'
$(BUILD)/bench_shape: $(call obj,bench/bench_shape.c bench/bench_machine.c bench/peak_fma_avx2.c \
                      bench/peak_fma_avx512.c) $(LIB)
	$(call say,LD,$@)$(CC) $(CFLAGS_BASE) -o $@ $^ $(LIBS)
bench-shape: deps $(BUILD)/bench_shape
	$(BUILD)/bench_shape $(ARGS)

# How long the pool's second thread takes to start working after a call (bench/bench_wake.c).
$(BUILD)/bench_wake: $(call obj,bench/bench_wake.c bench/bench_machine.c bench/peak_fma_avx2.c \
                     bench/peak_fma_avx512.c) $(LIB)
	$(call say,LD,$@)$(CC) $(CFLAGS_BASE) -o $@ $^ $(LIBS)
bench-wake: deps $(BUILD)/bench_wake
	$(BUILD)/bench_wake

# The kernel's exp against the correctly rounded one over every binary32 in [-104, 0].
$(BUILD)/check_exp: $(call obj,bench/check_exp.c) $(LIB)
	$(call say,LD,$@)$(CC) $(CFLAGS_BASE) -o $@ $^ $(LIBS)
check-exp: deps $(BUILD)/check_exp
	$(BUILD)/check_exp --threads $(THREADS)

format:
	clang-format -i $(LIB_SRC) $(IO_SRC) $(CLI_SRC) $(TEST_SRC) include/*.h

clean:
	rm -rf build build-san build-tsan build-fuzz build-phases

-include $(shell find $(BUILD) -name '*.d' 2>/dev/null)

# Each area's rules live in mk/<area>.mk.
include mk/fuzz.mk mk/conform.mk mk/mutants.mk mk/prove.mk mk/install.mk mk/python.mk

# What make check runs (see check-build).
check-built: tests $(SHLIB) $(LIB) $(CLI) $(BUILD)/smattn.pc $(if $(SAN),,python) \
  $(patsubst %,$(BUILD)/fuzz/replay/%,$(FUZZ_TARGETS)) $(BUILD)/fuzz/fuzz_decode
