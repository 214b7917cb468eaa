# SPDX-License-Identifier: MIT
# mk/conform.mk: the conformance checker (conform/README.md), included by the Makefile.
#  - build/libsmattn_conform.a: conform/*.c but opt_plugin.c, linked into the CLI (with -ldl);
#  - build/plugins/smattn_opt.so: the built-in kernel as a loadable plugin (position-independent
#    objects of the library in build/pic/, only the smattn_plugin_* symbols exported);
#  - build/tests/fixtures/*.so: the plugins tests/test_conform.c loads (tests/fixtures/).
.PHONY: conform-plugins

CONFORM_SRC := $(filter-out conform/opt_plugin.c,$(wildcard conform/*.c))
CONFORM_LIB := $(BUILD)/libsmattn_conform.a
PLUGIN_DIR  := $(BUILD)/plugins
OPT_PLUGIN  := $(PLUGIN_DIR)/smattn_opt.so

$(CONFORM_LIB): $(call obj,$(CONFORM_SRC))
	$(call say,AR,$@)rm -f $@ && ar rcs $@ $^

# The CLI links the checker: the archive among its prerequisites, and the libraries it
# needs after it on the link line (the Makefile's recipe puts $(LIBS) last).

$(CLI): $(CONFORM_LIB)
$(CLI): LIBS += $(IOLIB) $(LIB) $(IO_LIBS) -lmpfr -lgmp -lm -ldl
# The test runner links the checker too (tests/test_judge.c calls the judge, tests/test_rows.c
# the row choice of conform/rows.c).
$(TESTBIN): $(CONFORM_LIB)
$(TESTBIN): LIBS += $(IOLIB) $(LIB) $(IO_LIBS) -lmpfr -lgmp -lm -ldl

# Position-independent objects for the plugin; the kernel files keep their ISA flags.
$(BUILD)/pic/%.o: %.c | deps
	@mkdir -p $(dir $@)
	$(call say,CC,$@)$(CC) $(CFLAGS_BASE) $(ISAFLAGS) -fPIC -MMD -MP -c $< -o $@
$(BUILD)/pic/opt/kernel_avx2.o: ISAFLAGS := -mavx2 -mfma -mf16c
$(BUILD)/pic/opt/kernel_avx512.o: ISAFLAGS := -mavx512f -mavx512bw -mavx512vl -mavx2 -mfma -mf16c

OPT_PLUGIN_OBJ := $(patsubst %.c,$(BUILD)/pic/%.o,conform/opt_plugin.c conform/builtin.c $(LIB_SRC))
$(OPT_PLUGIN): $(OPT_PLUGIN_OBJ) conform/smattn_opt.map
	@mkdir -p $(dir $@)
	$(call say,LD,$@)$(CC) $(CFLAGS_BASE) -shared -Wl,--version-script=conform/smattn_opt.map -o $@ \
	  $(OPT_PLUGIN_OBJ) -lmpfr -lgmp -lm -pthread

# Test fixtures: one source, one behaviour per build (tests/fixtures/plugin_fixture.c).
FIXTURE_DIR   := $(BUILD)/tests/fixtures
FIXTURE_MODES := good segv hang oob status abi nosym badinfo badname ctor_abort dtor_segv \
                 describe_hang prec_segv prec_hang forker chatty loose stubborn \
                 hang_all prec_hang_all wide_exp big_tiny ftz huge_blocks huge_acc evilname \
                 sinkmax unknown_cap nan_model badutf8 bomb bomb_nproc flaky flaky_claims \
                 steady_claims row_bug row_bug_hidden
FIXTURE_MODES += q_blocks
FIXTURES      := $(patsubst %,$(FIXTURE_DIR)/fixture_%.so,$(FIXTURE_MODES))
$(FIXTURE_DIR)/fixture_%.so: tests/fixtures/plugin_fixture.c include/smattn_kernel.h include/smattn.h | deps
	@mkdir -p $(dir $@)
	$(call say,LD,$@)$(CC) $(CFLAGS_BASE) -fPIC -shared -DFIXTURE_MODE_$* -o $@ $< -lm

# The judge's sentences (tests/test_reasons.c): one binary64 plugin per bug or look-alike
# bug (tests/fixtures/reason_fixture.c).
REASON_MODES := good empty_nan empty_leak zero_mask diag_hidden upper_left v_leak plus1 plus2 \
                nan_out inf_out big_out ninf_masked v_inf_row_nan scale_err bad_model \
                loose_model sink_max kv_f16 big_leak ftz fmax_all \
                unwritten decline status sink_ninf inf_col_nan lse_off scale_drop scale_sq \
                scale0_nan scale0_zero narrow decline_all
REASONS      := $(patsubst %,$(FIXTURE_DIR)/reason_%.so,$(REASON_MODES))
$(FIXTURE_DIR)/reason_%.so: tests/fixtures/reason_fixture.c include/smattn_kernel.h include/smattn.h | deps
	@mkdir -p $(dir $@)
	$(call say,CC,$@)$(CC) $(CFLAGS_BASE) -fPIC -shared -DREASON_$* -o $@ $< -lm

# Ragged and paged batches (tests/test_conform_layout.c): one binary64 plugin per planted
# layout bug (tests/fixtures/layout_fixture.c).
LAYOUT_MODES := good page_off slot_pow2 no_seqused unused_slot cu_off
LAYOUTS      := $(patsubst %,$(FIXTURE_DIR)/layout_%.so,$(LAYOUT_MODES))
$(FIXTURE_DIR)/layout_%.so: tests/fixtures/layout_fixture.c include/smattn_kernel.h include/smattn.h | deps
	@mkdir -p $(dir $@)
	$(call say,CC,$@)$(CC) $(CFLAGS_BASE) -fPIC -shared -DLAYOUT_$* -o $@ $< -lm

# The backward's determinism claim (tests/test_conform_backward.c): the example plugin
# claiming SMATTN_CAP_BACKWARD_DETERMINISTIC, keeping it or not, hanging in its backward,
# writing past dK, ending the process in its precision hook, writing past its forward's
# LSE before declining, or claiming dBias and dSinks and then leaving them unwritten or
# declining the cases that ask (tests/fixtures/backward_fixture.c).
BACKWARD_MODES := det nondet hang oob prec_exit fwd_oob grads_unwritten grads_declined
BACKWARDS      := $(patsubst %,$(FIXTURE_DIR)/backward_%.so,$(BACKWARD_MODES))
$(FIXTURE_DIR)/backward_%.so: tests/fixtures/backward_fixture.c examples/example_kernel.c \
                              include/smattn_kernel.h include/smattn.h | deps
	@mkdir -p $(dir $@)
	$(call say,CC,$@)$(CC) $(CFLAGS_BASE) -fPIC -shared -DBACKWARD_$* -o $@ $< -lm

conform-plugins: $(OPT_PLUGIN) $(FIXTURES) $(REASONS) $(LAYOUTS) $(BACKWARDS)
tests: $(OPT_PLUGIN) $(FIXTURES) $(REASONS) $(LAYOUTS) $(BACKWARDS)
