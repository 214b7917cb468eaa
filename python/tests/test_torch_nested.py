# SPDX-License-Identifier: MIT
"""test_torch_nested.py: a real ragged implementation through `smattn gen --layout packed`
and `smattn check` (examples/torch_nested.py: PyTorch's nested-tensor attention on CPU).
Runs only where python3-torch is installed (never a dependency of smattn): skipped
elsewhere."""
import json
import os
import subprocess
import sys

import pytest

torch = pytest.importorskip("torch")

ROOT = os.environ.get("SMATTN_ROOT") or os.path.dirname(os.path.dirname(
    os.path.dirname(os.path.abspath(__file__))))
CLI = os.environ.get("SMATTN_CLI") or os.path.join(ROOT, "build", "smattn")


@pytest.mark.skipif(not os.access(CLI, os.X_OK), reason="no smattn CLI")
def test_torch_nested_sdpa_conforms_on_packed_cases(tmp_path):
    out = tmp_path / "cases"
    subprocess.run([CLI, "gen", "--layout", "packed", str(out)], check=True,
                   stdout=subprocess.DEVNULL)
    subprocess.run([sys.executable, os.path.join(ROOT, "examples", "torch_nested.py"),
                    str(out)], check=True, stdout=subprocess.DEVNULL)
    rep = tmp_path / "r.json"
    r = subprocess.run([CLI, "check", str(out), "--json", str(rep)],
                       stdout=subprocess.PIPE, universal_newlines=True)
    assert r.returncode == 0, r.stdout[-2000:]
    cases = json.loads(rep.read_text())["cases"]
    ran = [c for c in cases if c["status"] == "pass"]
    assert not [c for c in cases if c["status"] == "fail"]
    # the ragged cases torch can express ran: zero-length sequences, pages of 3, 16, 256
    names = {c["name"] for c in ran}
    assert {"layout/packed_zero_length", "layout/paged_p3_nopow2",
            "layout/paged_split_decode_t600"} <= names, sorted(names)
    assert len(ran) >= 40
