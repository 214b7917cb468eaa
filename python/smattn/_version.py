# SPDX-License-Identifier: MIT
"""_version.py: the package's version and the C library's soname, from the one VERSION file
of the source tree. VERSION holds one line, X.Y.Z, nothing else (the Makefile
rejects anything else); the soname is libsmattn.so.X (the ABI major, as mk/install.mk)."""
import os
import re

_HERE = os.path.dirname(os.path.abspath(__file__))
_FORMAT = re.compile(r"[0-9]+\.[0-9]+\.[0-9]+")


def _read(path):
    with open(path) as f:
        text = f.read()
    v = text.strip()
    if not _FORMAT.fullmatch(v):
        raise ImportError("smattn: %s must hold one line X.Y.Z and nothing else, not %r"
                          % (path, text[:80]))
    return v


def _find():
    try:
        from ._paths import VERSION as v  # written by make install-python
        return v
    except ImportError:
        pass
    # a wheel carries smattn/VERSION (setup.py); the source tree has <repo>/VERSION
    for path in (os.path.join(_HERE, "VERSION"),
                 os.path.join(os.path.dirname(os.path.dirname(_HERE)), "VERSION")):
        if os.path.exists(path):
            return _read(path)
    raise ImportError("smattn: no VERSION found (looked for smattn/_paths.py, %s and the "
                      "source tree's VERSION): install with `make install` or pip"
                      % os.path.join(_HERE, "VERSION"))


VERSION = _find()
SONAME = "libsmattn.so." + VERSION.split(".")[0]
