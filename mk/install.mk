# SPDX-License-Identifier: MIT
# mk/install.mk: the shared library, smattn.pc, `make install` / `make uninstall` and the
# install test (README "Using smattn from C"). Included by the Makefile.
#
#   make install [PREFIX=/usr/local] [DESTDIR=/tmp/stage]     make uninstall (same variables)
#
# Installed: bin/smattn; lib/libsmattn.so.$(VERSION), its soname link libsmattn.so.0 and the
# link-time libsmattn.so, lib/libsmattn.a; include/smattn.h and include/smattn_kernel.h (as in
# the tree, so `#include "smattn.h"` works with pkg-config's Cflags); lib/pkgconfig/smattn.pc;
# share/smattn/vectors/ (the golden vectors the conformance battery starts with);
# share/man/man1/smattn.1 and man3/smattn.3; share/doc/smattn/ (README, SPEC, CHANGELOG,
# LICENSE, the example plugin). share/smattn/installed-dirs lists the directories install
# created, which uninstall removes again when empty.
.PHONY: shlib install install-c install-python uninstall uninstall-c uninstall-python \
        check-install

PREFIX       ?= /usr/local
BINDIR       ?= $(PREFIX)/bin
LIBDIR       ?= $(PREFIX)/lib
INCLUDEDIR   ?= $(PREFIX)/include
PKGCONFIGDIR ?= $(LIBDIR)/pkgconfig
PKGDATADIR   ?= $(PREFIX)/share/smattn
MANDIR       ?= $(PREFIX)/share/man
DOCDIR       ?= $(PREFIX)/share/doc/smattn
INSTALL      ?= install

# ---- the shared library -----------------------------------------------------------------
# Built from the position-independent objects in $(BUILD)/pic/ (mk/conform.mk's rule, which
# the built-in plugin uses too); libsmattn.a, the CLI, tests and benches keep the non-PIC
# objects. The soname carries the ABI major; the version script exports the public API only.
# -fPIC costs the kernel nothing measurable: callgrind, AVX2, one smattn_attention call of a
# causal prefill S = T = 512, Hq 28, Hkv 4, D 128, one thread: 339,046,536 instructions
# through libsmattn.a, 339,352,925 through libsmattn.so (+0.09%), the same output bits.
SONAME      := libsmattn.so.$(VERSION_MAJOR)
SHLIB       := $(BUILD)/libsmattn.so.$(VERSION)
SHLIB_OBJ   := $(patsubst %.c,$(BUILD)/pic/%.o,$(LIB_SRC))
SHLIB_LIBS  := -lmpfr -lgmp -lm -pthread
$(SHLIB): $(SHLIB_OBJ) mk/libsmattn.map | $(BUILD)/version.ok
	$(call say,LD,$@)$(CC) $(CFLAGS_BASE) -shared -Wl,-soname,$(SONAME) \
	  -Wl,--version-script=mk/libsmattn.map -Wl,--no-undefined -o $@ $(SHLIB_OBJ) $(SHLIB_LIBS)
	@ln -sf $(notdir $@) $(BUILD)/$(SONAME) && ln -sf $(SONAME) $(BUILD)/libsmattn.so
shlib: $(SHLIB)
lib: $(SHLIB)
all: $(SHLIB)

# ---- where the installed tool finds its data ----------------------------------------------
# The CLI and the checker are compiled with SMATTN_DATADIR, the installed share/smattn; the
# objects are rebuilt when PREFIX (or PKGDATADIR) changes, through $(BUILD)/datadir.txt.
$(BUILD)/datadir.txt: FORCE
	@mkdir -p $(dir $@)
	@echo '$(PKGDATADIR) $(DOCDIR)' > $@.tmp && (cmp -s $@.tmp $@ || mv $@.tmp $@); rm -f $@.tmp
$(BUILD)/installdirs.txt: FORCE
	@mkdir -p $(dir $@)
	@echo '$(PREFIX) $(LIBDIR) $(INCLUDEDIR) $(PKGDATADIR)' > $@.tmp && \
	  (cmp -s $@.tmp $@ || mv $@.tmp $@); rm -f $@.tmp
.PHONY: FORCE
FORCE:
$(call obj,$(CLI_SRC) $(CONFORM_SRC)) $(patsubst %.c,$(BUILD)/pic/%.o,$(CONFORM_SRC)): \
  $(BUILD)/datadir.txt
$(call obj,$(CLI_SRC) $(CONFORM_SRC)) $(patsubst %.c,$(BUILD)/pic/%.o,$(CONFORM_SRC)): \
  CFLAGS_BASE += -DSMATTN_DATADIR='"$(PKGDATADIR)"' -DSMATTN_DOCDIR='"$(DOCDIR)"'

# ---- smattn.pc ------------------------------------------------------------------------
# Libs.private rather than Requires.private: mpfr.pc is not shipped everywhere MPFR is (it
# is on Debian 12), and a missing Requires.private breaks every pkg-config query.
pcpath = $(patsubst $(PREFIX)/%,$${prefix}/%,$(1))
$(BUILD)/smattn.pc: VERSION $(BUILD)/installdirs.txt mk/install.mk
	$(call say,GEN,$@)printf '%s\n' \
	  'prefix=$(PREFIX)' \
	  'libdir=$(call pcpath,$(LIBDIR))' \
	  'includedir=$(call pcpath,$(INCLUDEDIR))' \
	  'datadir=$(call pcpath,$(PKGDATADIR))' \
	  '' \
	  'Name: smattn' \
	  'Description: scaled masked softmax attention made checkable: exact oracle, fast kernel, error bound' \
	  'Version: $(VERSION)' \
	  'Cflags: -I$${includedir}' \
	  'Libs: -L$${libdir} -lsmattn' \
	  'Libs.private: $(SHLIB_LIBS)' > $@

# ---- install / uninstall --------------------------------------------------------------
# install-python and uninstall-python are double-colon rules: python/ adds its own recipe
# (`install-python::` in its own .mk) without touching this file.
MANPAGES := man/smattn.1 man/smattn.3
VECTORS  := $(wildcard spec/vectors/*.json) spec/vectors/README.md
# the battery's fuzzer finds (conform/regressions/<case>/), found by the installed smattn
REGRESSIONS := $(patsubst %/,%,$(dir $(wildcard conform/regressions/*/case.json)))
DOCS     := README.md CHANGELOG.md LICENSE spec/SPEC.md examples/example_kernel.c
# kept in their folders under DOCDIR (each folder has its README.md): the checker's manual
# (named by `smattn conform --help`), the Python package's, the examples
DOC_TREES := conform/README.md python/README.md $(sort $(shell find examples -type f 2>/dev/null))

# One after the other, so that the directory lists below are exact: install-c first (lib/
# is then its own), uninstall-python first (lib/ is empty when uninstall-c removes it).
install: install-c
	@$(MAKE) --no-print-directory install-python
uninstall: uninstall-python
	@$(MAKE) --no-print-directory uninstall-c

# Directories `make install` creates (DESTDIR kept out) are recorded in a file, and `make
# uninstall` removes those only, deepest first, and only when empty (rmdir): a prefix's
# bin/ or lib/ that existed before, or that holds another package's files, stays.
# $(call new_dirs,DIRS): the missing directories among DIRS and their ancestors, one a line.
new_dirs = for d in $(1); do d="$(DESTDIR)$$d"; \
  while [ ! -d "$$d" ] && [ "$$d" != '$(DESTDIR)' ] && [ "$$d" != / ]; do \
    printf '%s\n' "$${d\#$(DESTDIR)}"; d=$$(dirname "$$d"); done; done | sort -u
# $(call rm_dirs,LISTFILE): rmdir the directories LISTFILE names, deepest first; the list is
# read before anything is removed (it may live in one of them).
rm_dirs = dirs=$$(cat '$(1)' 2>/dev/null || true)
rm_dirs_now = printf '%s\n' "$$dirs" | sort -r | while IFS= read -r d; do \
  [ -n "$$d" ] && rmdir "$(DESTDIR)$$d" 2>/dev/null; done; true
install-python::
	@:
uninstall-python::
	@:

install-c: $(SHLIB) $(LIB) $(CLI) $(BUILD)/smattn.pc $(MANPAGES)
	$(call say,INST,$(DESTDIR)$(PREFIX))set -e; \
	new=$$($(call new_dirs,'$(BINDIR)' '$(LIBDIR)' '$(INCLUDEDIR)' '$(PKGCONFIGDIR)' \
	  '$(PKGDATADIR)/vectors' '$(MANDIR)/man1' '$(MANDIR)/man3' '$(DOCDIR)' \
	  $(foreach d,$(sort $(dir $(DOC_TREES))),'$(DOCDIR)/$(d:/=)'))); \
	$(INSTALL) -d '$(DESTDIR)$(BINDIR)' '$(DESTDIR)$(LIBDIR)' '$(DESTDIR)$(INCLUDEDIR)' \
	  '$(DESTDIR)$(PKGCONFIGDIR)' '$(DESTDIR)$(PKGDATADIR)/vectors' \
	  '$(DESTDIR)$(MANDIR)/man1' '$(DESTDIR)$(MANDIR)/man3' '$(DESTDIR)$(DOCDIR)'; \
	old=$$(cat '$(DESTDIR)$(PKGDATADIR)/installed-dirs' 2>/dev/null || true); \
	printf '%s\n' "$$old" "$$new" | sed '/^$$/d' | sort -u > '$(DESTDIR)$(PKGDATADIR)/installed-dirs'; \
	$(INSTALL) -m 755 $(CLI) '$(DESTDIR)$(BINDIR)/smattn'; \
	$(INSTALL) -m 755 $(SHLIB) '$(DESTDIR)$(LIBDIR)/'; \
	ln -sf $(notdir $(SHLIB)) '$(DESTDIR)$(LIBDIR)/$(SONAME)'; \
	ln -sf $(SONAME) '$(DESTDIR)$(LIBDIR)/libsmattn.so'; \
	$(INSTALL) -m 644 $(LIB) '$(DESTDIR)$(LIBDIR)/'; \
	$(INSTALL) -m 644 include/smattn.h include/smattn_kernel.h '$(DESTDIR)$(INCLUDEDIR)/'; \
	$(INSTALL) -m 644 $(BUILD)/smattn.pc '$(DESTDIR)$(PKGCONFIGDIR)/'; \
	$(INSTALL) -m 644 $(VECTORS) '$(DESTDIR)$(PKGDATADIR)/vectors/'; \
	for d in $(REGRESSIONS); do $(INSTALL) -d '$(DESTDIR)$(PKGDATADIR)/regressions/'$${d##*/}; \
	  $(INSTALL) -m 644 $$d/* '$(DESTDIR)$(PKGDATADIR)/regressions/'$${d##*/}/; done; \
	for m in $(MANPAGES); do \
	  sed -e 's|/usr/local/share/smattn|$(PKGDATADIR)|g' -e 's|/usr/local/share/doc/smattn|$(DOCDIR)|g' \
	    -e '/^\.TH /s|"smattn [^"]*"|"smattn $(VERSION)"|' $$m > '$(DESTDIR)$(MANDIR)'/man$${m##*.}/$${m##*/}; \
	  chmod 644 '$(DESTDIR)$(MANDIR)'/man$${m##*.}/$${m##*/}; done; \
	$(INSTALL) -m 644 $(DOCS) '$(DESTDIR)$(DOCDIR)/'; \
	for f in $(DOC_TREES); do $(INSTALL) -D -m $$(test -x $$f && echo 755 || echo 644) \
	  $$f '$(DESTDIR)$(DOCDIR)/'$$f; done
	@if [ -z '$(DESTDIR)' ] && [ "$$(id -u)" = 0 ] && command -v ldconfig >/dev/null; then \
	  ldconfig; fi

uninstall-c:
	$(call say,RM,$(DESTDIR)$(PREFIX))rm -f '$(DESTDIR)$(BINDIR)/smattn' \
	  '$(DESTDIR)$(LIBDIR)/$(notdir $(SHLIB))' '$(DESTDIR)$(LIBDIR)/$(SONAME)' \
	  '$(DESTDIR)$(LIBDIR)/libsmattn.so' '$(DESTDIR)$(LIBDIR)/libsmattn.a' \
	  '$(DESTDIR)$(INCLUDEDIR)/smattn.h' '$(DESTDIR)$(INCLUDEDIR)/smattn_kernel.h' \
	  '$(DESTDIR)$(PKGCONFIGDIR)/smattn.pc' \
	  '$(DESTDIR)$(MANDIR)/man1/smattn.1' '$(DESTDIR)$(MANDIR)/man3/smattn.3' && \
	$(call rm_dirs,$(DESTDIR)$(PKGDATADIR)/installed-dirs) && \
	rm -rf '$(DESTDIR)$(PKGDATADIR)' '$(DESTDIR)$(DOCDIR)' && \
	$(rm_dirs_now)
	@if [ -z '$(DESTDIR)' ] && [ "$$(id -u)" = 0 ] && command -v ldconfig >/dev/null; then \
	  ldconfig; fi

# ---- the install test (make check runs it once, before the suites) --------------------------
check-install: $(SHLIB) $(LIB) $(CLI) $(BUILD)/smattn.pc
	$(call say,TEST,tests/install/test_install.sh)BUILD=$(BUILD) MAKE='$(MAKE)' \
	  tests/install/test_install.sh
