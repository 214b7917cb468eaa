# SPDX-License-Identifier: MIT
"""setup.py: bundles the C side into the wheel: libsmattn.so.X (the public library, X the
major of VERSION), the private checker _smattn_conform.so, the golden vectors and the
fuzzer finds (conform/regressions), VERSION and LICENSE, from the build directory `make`
filled (SMATTN_BUILD, default ../build). Everything else is in pyproject.toml."""
import os
import re
import shutil

from setuptools import setup
from setuptools.command.build_py import build_py
from setuptools.dist import Distribution

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
BUILD = os.environ.get("SMATTN_BUILD", os.path.join(ROOT, "build"))


def version():
    """VERSION: one line X.Y.Z and nothing else (as the Makefile and smattn._version read it)."""
    with open(os.path.join(ROOT, "VERSION")) as f:
        text = f.read()
    if not re.fullmatch(r"[0-9]+\.[0-9]+\.[0-9]+", text.strip()):
        raise SystemExit("smattn: %s must hold one line X.Y.Z and nothing else, not %r"
                         % (os.path.join(ROOT, "VERSION"), text[:80]))
    return text.strip()


SONAME = "libsmattn.so." + version().split(".")[0]
FILES = [(os.path.join(BUILD, SONAME), SONAME),
         (os.path.join(BUILD, "python", "_smattn_conform.so"), "_smattn_conform.so"),
         (os.path.join(ROOT, "VERSION"), "VERSION"),
         (os.path.join(ROOT, "LICENSE"), "LICENSE")]


class BuildPy(build_py):
    def run(self):
        super().run()
        missing = [src for src, _ in FILES if not os.path.exists(src)]
        if missing:
            raise SystemExit("smattn: %s missing: run `make` in %s first (or set SMATTN_BUILD)"
                             % (", ".join(missing), ROOT))
        dst = os.path.join(self.build_lib, "smattn")
        for src, name in FILES:
            shutil.copy2(src, os.path.join(dst, name))
        # the battery's data, as `smattn conform` has it: golden vectors and fuzzer finds
        for src, name in ((os.path.join(ROOT, "spec", "vectors"), "vectors"),
                          (os.path.join(ROOT, "conform", "regressions"), "regressions")):
            if os.path.isdir(src):
                shutil.copytree(src, os.path.join(dst, name), dirs_exist_ok=True)


class BinaryDistribution(Distribution):
    """The wheel carries shared objects: tag it for this platform."""

    def has_ext_modules(self):
        return True


setup(version=version(), cmdclass={"build_py": BuildPy}, distclass=BinaryDistribution)
