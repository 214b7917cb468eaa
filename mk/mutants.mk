# SPDX-License-Identifier: MIT
# mk/mutants.mk: plugins under test: the example kernel, its mutants, the oneDNN
# adapter and the fuzz_plugin target. Included by the Makefile.
.PHONY: plugins mutants-table fuzz-plugin deps-mutants

# The example plugin (examples/README.md), built with the flags of the build directory, so
# that build-san/plugins/example_kernel.so runs under ASan+UBSan with the sanitized CLI.
PLUGIN_CFLAGS = $(CFLAGS_BASE) -fPIC -shared
$(BUILD)/plugins/example_kernel.so: examples/example_kernel.c include/smattn_kernel.h \
                                    include/smattn.h | deps
	@mkdir -p $(dir $@)
	$(call say,LD,$@)$(CC) $(PLUGIN_CFLAGS) -o $@ $< -lm

# Mutants (tests/mutants/README.md): each tests/mutants/<name>.patch is a unified diff
# against examples/example_kernel.c holding one bug; applied with fuzz 0, so that a patch
# that no longer applies exactly fails the build instead of drifting.
MUTANTS     := $(sort $(patsubst tests/mutants/%.patch,%,$(wildcard tests/mutants/*.patch)))
MUTANT_SOS  := $(patsubst %,$(BUILD)/mutants/%.so,$(MUTANTS))
deps-mutants:
	@mk/deps.sh patch
$(BUILD)/mutants/%.c: examples/example_kernel.c tests/mutants/%.patch | deps-mutants
	@mkdir -p $(dir $@)
	$(call say,PATCH,$@)patch --quiet --fuzz=0 --reject-file=- -o $@ examples/example_kernel.c tests/mutants/$*.patch
$(BUILD)/mutants/%.so: $(BUILD)/mutants/%.c include/smattn_kernel.h include/smattn.h | deps
	$(call say,LD,$@)$(CC) $(PLUGIN_CFLAGS) -o $@ $< -lm
.PRECIOUS: $(BUILD)/mutants/%.c

plugins: $(BUILD)/plugins/example_kernel.so $(MUTANT_SOS)
tests: $(BUILD)/plugins/example_kernel.so $(MUTANT_SOS)

# The kill table: every mutant through `smattn conform --suite quick`, from a real run.
mutants-table: $(CLI) plugins
	@tests/mutants/kill_table.py $(CLI) $(BUILD) > tests/mutants/README.md.tmp && \
	  mv tests/mutants/README.md.tmp tests/mutants/README.md && \
	  echo "tests/mutants/README.md written"

# fuzz/fuzz_plugin.c: libFuzzer against any plugin (SMATTN_KERNEL=path.so), built like the
# other targets by mk/fuzz.mk's pattern rules (clang, ASan+UBSan, in build-fuzz/).
#   make fuzz-plugin && SMATTN_KERNEL=build/mutants/gqa_interleaved.so \
#     build-fuzz/fuzz/bin/fuzz_plugin -max_total_time=60 fuzz/corpus/fuzz_diff
# make check builds its replay driver (mk/fuzz.mk's pattern rule), so that it keeps compiling.
tests: $(BUILD)/fuzz/replay/fuzz_plugin
# `SMATTN_KERNEL=build/plugins/example_kernel.so make fuzz T=fuzz_plugin SECONDS=60`: a
# campaign like the other targets' (fuzz/corpus/fuzz_plugin is fuzz_diff's corpus, the
# same input format; fuzz/regressions/fuzz_plugin keeps the raw finds, and their case
# directories are battery cases in conform/regressions/).
fuzz-bins: $(BUILD)/fuzz/bin/fuzz_plugin
fuzz-plugin: deps
	@$(MAKE) --no-print-directory BUILD=build-fuzz CC=clang OPT=-O1 SAN="$(FUZZ_SAN)" \
	  build-fuzz/fuzz/bin/fuzz_plugin

include mk/onednn.mk
