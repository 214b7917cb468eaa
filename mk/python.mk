# SPDX-License-Identifier: MIT
# mk/python.mk: the Python package (python/), included by the Makefile.
#  - $(PY_SHIM): python/_smattn_shim.c, the package's private judge and battery (conform/
#    judge.c, battery.c, io/ and the oracle linked in statically, only smattn_py_* exported);
#  - check-python: the pytest suite (python/tests/) against the build tree;
#  - install-python / uninstall-python: the package under PYTHON_SITEDIR, with the paths of
#    the installed libraries recorded in smattn/_paths.py.
# The package itself loads $(BUILD)/$(SONAME) (the public API, smattn.h) with ctypes.
.PHONY: python check-python install-python uninstall-python

# Debian's interpreter (python3-numpy, python3-pytest), not whichever python3 is first on PATH.
PYTHON ?= $(shell test -x /usr/bin/python3 && echo /usr/bin/python3 || echo python3)

# The package loads $(SHLIB), mk/install.mk's libsmattn.so.$(VERSION) (soname $(SONAME),
# which smattn/_version.py derives from VERSION as mk/install.mk does).

# The shim: its own copy of the oracle and bound (core/ ref/) beside conform's judge and
# battery and io/ (the golden vectors), so that libsmattn.so.0 need export nothing private.
PY_SHIM     := $(BUILD)/python/_smattn_conform.so
PY_SHIM_SRC := conform/judge.c conform/rows.c conform/battery.c conform/battery_case.c conform/battery_alibi.c conform/battery_quant.c conform/battery_split.c conform/battery_sizes.c conform/battery_huge.c conform/battery_layout.c conform/merge_battery.c conform/shard.c conform/datadir.c $(IO_SRC) $(LIB_SRC)
PY_SHIM_OBJ := $(patsubst %.c,$(BUILD)/pic/%.o,python/_smattn_shim.c $(PY_SHIM_SRC))
# io/util.h includes <json.h>: the pic rule's per-target flag slot carries json-c's -I.
$(patsubst %.c,$(BUILD)/pic/%.o,$(IO_SRC) conform/battery.c conform/battery_case.c conform/battery_sizes.c python/_smattn_shim.c): \
  ISAFLAGS := $(JSONC_CFLAGS)
$(BUILD)/python/libshim.a: $(filter-out $(BUILD)/pic/python/%,$(PY_SHIM_OBJ))
	@mkdir -p $(dir $@)
	$(call say,AR,$@)rm -f $@ && ar rcs $@ $^
$(BUILD)/python/shim.map: | deps
	@mkdir -p $(dir $@)
	@printf '{ global: smattn_py_*; local: *; };\n' > $@
$(PY_SHIM): $(BUILD)/pic/python/_smattn_shim.o $(BUILD)/python/libshim.a $(BUILD)/python/shim.map
	$(call say,LD,$@)$(CC) $(CFLAGS_BASE) -shared -Wl,--version-script=$(BUILD)/python/shim.map -o $@ \
	  $(BUILD)/pic/python/_smattn_shim.o $(BUILD)/python/libshim.a $(IO_LIBS) \
	  -lmpfr -lgmp -lm -pthread

python: $(SHLIB) $(PY_SHIM)
all: python

# pytest against the build tree (SMATTN_LIBRARY and SMATTN_SHIM name this BUILD's files, so
# build-san works too); -p no:cacheprovider keeps python/ free of .pytest_cache.
# The CLI: python/tests compares smattn.cases() with the battery `smattn conform` runs.
check-python: deps-check python $(CLI)
	$(call say,TEST,python/tests)SMATTN_LIBRARY=$(abspath $(SHLIB)) SMATTN_SHIM=$(abspath $(PY_SHIM)) \
	  SMATTN_CLI=$(abspath $(CLI)) SMATTN_ROOT=$(CURDIR) PYTHONPATH=$(CURDIR)/python \
	  PYTHONDONTWRITEBYTECODE=1 \
	  $(PYTHON) -m pytest -q -p no:cacheprovider python/tests

# Debian's layout: /usr/lib/python3/dist-packages for the system prefix, else
# PREFIX/lib/python3.X/dist-packages (on sys.path for /usr/local).
PYTHON_SITEDIR ?= $(if $(filter /usr,$(PREFIX)),$(PREFIX)/lib/python3/dist-packages,$(PREFIX)/lib/$(shell $(PYTHON) -c 'import sys; print("python%d.%d" % sys.version_info[:2])' 2>/dev/null)/dist-packages)
# install-python and uninstall-python need the interpreter that will import the package (its
# site directory depends on its version): without one they stop with this line, before any
# file is written (python3 is in DEPS_BUILD, so `make` installs Debian's).
py_need = @$(PYTHON) -c 'import sys; sys.exit(sys.version_info[0] != 3)' >/dev/null 2>&1 || \
  { echo "make $(1): PYTHON=$(PYTHON) does not run a python3: install python3 (mk/deps.sh does: make deps), give PYTHON=/path/to/python3, or use make $(1:%-python=%-c) for the C library alone" >&2; exit 1; }
PY_PKG_FILES := $(filter-out python/smattn/_paths.py,$(wildcard python/smattn/*.py))
install-python:: python
	$(call py_need,install-python)
	$(call say,INST,$(DESTDIR)$(PYTHON_SITEDIR)/smattn)set -e; \
	new=$$($(call new_dirs,'$(PYTHON_SITEDIR)/smattn')); \
	$(INSTALL) -d '$(DESTDIR)$(PYTHON_SITEDIR)/smattn'; \
	old=$$(cat '$(DESTDIR)$(PYTHON_SITEDIR)/smattn/installed-dirs' 2>/dev/null || true); \
	printf '%s\n' "$$old" "$$new" | sed '/^$$/d' | sort -u \
	  > '$(DESTDIR)$(PYTHON_SITEDIR)/smattn/installed-dirs'; \
	$(INSTALL) -m 644 $(PY_PKG_FILES) '$(DESTDIR)$(PYTHON_SITEDIR)/smattn/'; \
	$(INSTALL) -m 755 $(PY_SHIM) '$(DESTDIR)$(PYTHON_SITEDIR)/smattn/'; \
	printf '# written by make install-python\nLIBRARY = "%s"\nVECTORS = "%s"\nREGRESSIONS = "%s"\nVERSION = "%s"\n' \
	  '$(LIBDIR)/$(SONAME)' '$(PKGDATADIR)/vectors' '$(PKGDATADIR)/regressions' '$(VERSION)' \
	  > '$(DESTDIR)$(PYTHON_SITEDIR)/smattn/_paths.py'
# The directories install-python created (smattn/installed-dirs: the site directory, its
# python3.X parent...) go too when empty (mk/install.mk's new_dirs and rm_dirs).
uninstall-python::
	$(call py_need,uninstall-python)
	$(call say,RM,$(DESTDIR)$(PYTHON_SITEDIR)/smattn)$(call rm_dirs,$(DESTDIR)$(PYTHON_SITEDIR)/smattn/installed-dirs); \
	rm -rf '$(DESTDIR)$(PYTHON_SITEDIR)/smattn' && $(rm_dirs_now)
