# SPDX-License-Identifier: MIT
# mk/onednn.mk: the oneDNN adapter plugin (plugins/onednn/README.md), included by
# mk/mutants.mk. Nothing else depends on it (make check does not need oneDNN); its targets
# install Debian's libdnnl-dev when it is missing. `make conform-onednn` runs the full
# conformance suite on the adapter and writes the reports into build/onednn/.
.PHONY: onednn conform-onednn onednn-probe-exp
ONEDNN_HEADER := $(wildcard /usr/include/oneapi/dnnl/dnnl.h)
ONEDNN_SO     := $(BUILD)/plugins/onednn_kernel.so
ONEDNN_REPORT := $(BUILD)/onednn

ifneq ($(ONEDNN_HEADER),)
$(ONEDNN_SO): plugins/onednn/onednn_kernel.c include/smattn_kernel.h include/smattn.h | deps
	@mkdir -p $(dir $@)
	$(call say,LD,$@)$(CC) $(PLUGIN_CFLAGS) -o $@ $< -ldnnl -lm
onednn: $(ONEDNN_SO)
conform-onednn: $(CLI) $(ONEDNN_SO)
	@mkdir -p $(ONEDNN_REPORT)
	$(CLI) conform --kernel $(ONEDNN_SO) --suite full --json $(ONEDNN_REPORT)/conform.json \
	  --junit $(ONEDNN_REPORT)/conform.xml; st=$$?; \
	  echo "reports: $(ONEDNN_REPORT)/conform.json, $(ONEDNN_REPORT)/conform.xml (exit $$st)"; \
	  test $$st -le 1 # a verdict either way is a finished run; 2 is a usage or load error
# The accuracy of oneDNN's softmax exp, through the adapter (plugins/onednn/probe_exp.c).
$(BUILD)/onednn/probe_exp: plugins/onednn/probe_exp.c $(ONEDNN_SO)
	@mkdir -p $(dir $@)
	$(call say,LD,$@)$(CC) $(CFLAGS_BASE) -o $@ $< $(abspath $(ONEDNN_SO)) -Wl,-rpath,$(abspath $(dir $(ONEDNN_SO))) -lm
onednn-probe-exp: $(BUILD)/onednn/probe_exp
	$<
else
# Not installed: install it (mk/deps.sh: as root with apt-get, else it says what to do),
# then run the target again, now with the rules above.
onednn conform-onednn onednn-probe-exp:
	@mk/deps.sh libdnnl-dev && $(MAKE) --no-print-directory $@
endif
