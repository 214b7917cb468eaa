# SPDX-License-Identifier: MIT
"""test_api.py: the package as a new user meets it: the battery is the one `smattn conform`
runs, the oracle shows progress and stops on Ctrl-C, the messages of a failed check point at
the likely mistake (a layout, a tolerance), dtypes and layouts follow the inputs, integers
never wrap, in-place kernels are judged, and Case.visible() gives the visibility rules."""
import ctypes
import inspect
import json
import os
import re
import signal
import subprocess
import sys
import time

import numpy as np
import pytest

import smattn
from smattn import _api, _lib

sys.path.insert(0, os.path.dirname(__file__))
from kernels import numpy_attention  # noqa: E402

ROOT = os.environ.get("SMATTN_ROOT") or os.path.dirname(os.path.dirname(
    os.path.dirname(os.path.abspath(__file__))))


def rand(*shape, seed=0, dtype=np.float32):
    return np.random.default_rng(seed).standard_normal(shape).astype(dtype)


def qkv(B=2, S=5, T=7, Hq=4, Hkv=2, D=8, Dv=8, dtype=np.float32):
    return rand(B, S, Hq, D, seed=1, dtype=dtype), rand(B, T, Hkv, D, seed=2, dtype=dtype), \
        rand(B, T, Hkv, Dv, seed=3, dtype=dtype)


# ---- the battery is `smattn conform`'s ------------------------------------------------------

def _cli():
    for c in (os.environ.get("SMATTN_CLI"), os.path.join(ROOT, "build", "smattn")):
        if c and os.access(c, os.X_OK):
            return c
    return None


@pytest.mark.skipif(_cli() is None, reason="no smattn CLI (make check-python builds it)")
@pytest.mark.parametrize("seed", [0, 7])
def test_cases_are_the_conform_battery(tmp_path, seed):
    """cases("quick") yields the cases `smattn conform --suite quick` runs, in its order,
    with the same categories, features and shapes: the regressions and the softmax cases
    too (run from another directory, so that the package finds its data itself)."""
    out = tmp_path / "r.json"
    env = {k: v for k, v in os.environ.items() if k != "SMATTN_ROOT"}
    subprocess.run([_cli(), "conform", "--suite", "quick", "--seed", str(seed), "--json",
                    str(out)], check=True, cwd=str(tmp_path), env=env,
                   stdout=subprocess.DEVNULL)
    # the merge battery (SPEC 9) runs on smattn_plugin_merge and the backward battery
    # (SPEC 10) on smattn_plugin_backward, not on attention alone: not cases here
    want = [(c["name"], c["category"], c["features"], c["shape"])
            for c in json.loads(out.read_text())["cases"]
            if c["category"] not in ("merge", "backward")]
    got, ops = [], {}
    for c in smattn.cases("quick", seed=seed):
        ops[c.name] = op = getattr(c, "op", "attention")
        if op == "softmax":
            B, Hq, S, T = c.x.shape
            got.append((c.name, c.category, c.features, dict(B=B, S=S, T=T, Hq=Hq)))
            continue
        if c.category in ("layout", "quant"):  # packed, paged or block arrays: the shape
            got.append((c.name, c.category, c.features, c.shape))
            continue
        B, S, Hq, D = c.q.shape
        T, Hkv, Dv = c.k.shape[1], c.k.shape[2], c.v.shape[3]
        assert c.shape == dict(B=B, S=S, T=T, Hq=Hq, Hkv=Hkv, D=D, Dv=Dv)
        got.append((c.name, c.category, c.features,
                    dict(B=B, S=S, T=T, Hq=Hq, Hkv=Hkv, D=D, Dv=Dv)))
    # softmax cases: conform reports the problem's Hkv, D and Dv too, which the op ignores
    want = [(n, cat, f, s if ops.get(n) != "softmax" else
             {k: v for k, v in s.items() if k in ("B", "S", "T", "Hq")})
            for n, cat, f, s in want]
    assert [g[0] for g in got] == [w[0] for w in want]
    assert got == want
    cats = {g[1] for g in got}
    assert {"regressions", "softmax", "layout"} <= cats


def test_regressions_found_from_any_directory(tmp_path):
    """The fuzzer finds are in the battery whatever the working directory and with no
    SMATTN_ROOT: the package names their directory (the C lookup starts from the
    executable, python3's here)."""
    env = {k: v for k, v in os.environ.items() if k != "SMATTN_ROOT"}
    code = ("import smattn\n"
            "print(sorted({c.name for c in smattn.cases() if c.category == 'regressions'}))\n")
    out = subprocess.run([sys.executable, "-c", code], env=env, cwd=str(tmp_path), check=True,
                         capture_output=True, text=True).stdout
    names = sorted("regressions/" + d for d in os.listdir(os.path.join(ROOT, "conform",
                                                                          "regressions"))
                   if os.path.isdir(os.path.join(ROOT, "conform", "regressions", d)))
    assert names and out.strip() == repr(names)
    assert not [c for c in smattn.cases(regressions="") if c.category == "regressions"]


def test_cases_carry_the_case_dtypes():
    by_name = {c.name: c for c in smattn.cases("quick", categories=["dtype"])}
    c = by_name["dtype/q_f16_out_f16"]
    assert c.q.dtype == np.float16 and c.q_dtype == "float16" and c.out_dtype == "float16"
    c = by_name["dtype/all_bf16"]
    assert c.q_dtype == c.kv_dtype == c.out_dtype == "bfloat16"
    assert c.q.dtype == np.float32 and not (c.q.view(np.uint32) & 0xFFFF).any()
    c = by_name["dtype/softmax_x_bf16_out_f16"]
    assert c.op == "softmax" and c.q_dtype == "bfloat16" and c.out_dtype == "float16"
    assert not (c.x.view(np.uint32) & 0xFFFF).any()


_MASK_MODE_CASES = ("golden/alibi_mask", "alibi/mask_f16_distances", "alibi/mask_f16_past_2048")


@pytest.mark.parametrize("backward", [False, True])
def test_float64_cases_keep_the_mask_mode_bias_binary32(backward):
    """ALiBi's mask mode multiplies the bias by the slope, exactly only for a binary32 or
    narrower bias (SPEC 2.8): cases(dtype="float64") gives those cases the float32 cases'
    bias, and the oracle's own outputs pass their check."""
    f32 = {c.name: c for c in smattn.cases(categories=["golden", "alibi"], backward=backward)}
    got = set()
    for c in smattn.cases(dtype="float64", categories=["golden", "alibi"], backward=backward):
        if c.kwargs.get("alibi_mode") != "mask":
            continue
        got.add(c.name)
        assert c.q.dtype == np.float64 and c.kwargs["bias"].dtype == np.float32, c.name
        assert np.array_equal(c.kwargs["bias"], f32[c.name].kwargs["bias"]), c.name
        kw = dict(c.kwargs, layout=c.layout)
        if backward:
            g = smattn.reference_backward(c.q, c.k, c.v, c.do, dlse=c.dlse, **kw)
            assert c.check_backward(g.dq, g.dk, g.dv), c.name
        else:
            o, lse = smattn.reference(c.q, c.k, c.v, **kw)
            assert c.check(o, lse=lse), c.name
    assert got == set(_MASK_MODE_CASES)


def test_mask_mode_float64_bias_names_the_bias():
    """A float64 bias under the mask mode is refused before the library sees it, naming the
    argument it came in as (bias or attn_mask), by every entry point."""
    q, k, v = qkv()
    bias = -np.abs(rand(2, 4, 5, 7, seed=4, dtype=np.float64)).round()
    sl = np.float32([0.5, 0.25, 0.125, 0.0625])
    o = np.zeros((2, 5, 4, 8), np.float32)
    for arg in ("bias", "attn_mask"):
        kw = {arg: bias, "alibi_slopes": sl, "alibi_mode": "mask"}
        for call in (lambda: smattn.reference(q, k, v, **kw),
                     lambda: smattn.check(o, q, k, v, **kw),
                     lambda: smattn.reference_backward(q, k, v, o, **kw)):
            with pytest.raises(TypeError, match=r"^%s: float64 with alibi_mode 'mask'" % arg):
                call()


def test_softmax_case_check():
    c = next(c for c in smattn.cases(categories=["softmax"]))
    p, lse = smattn.reference_softmax(c.x, **c.kwargs)
    assert p.shape == c.x.shape and lse.shape == c.x.shape[:3]
    assert c.check(p=p, lse=lse).passed
    bad = p.copy()
    bad[0, 0, 0, 0] += 0.1
    assert not c.check(p=bad)
    with pytest.raises(TypeError, match="softmax case: it has no O; pass the kernel's P as p="):
        c.check(p)


# ---- the oracle: progress and Ctrl-C --------------------------------------------------------

@pytest.fixture
def small_chunks(monkeypatch):
    """Chunks of one KV group's heads or less, so that small problems take the chunked
    path: a chunk of about 2**12 units (key slots x (D + Dv)) per thread."""
    monkeypatch.setattr(_api, "_REF_CHUNK_UNITS", 1 << 12)


@pytest.mark.parametrize("units", [1, 5 * 7 * 16 * 2, 5 * 7 * 16 * 3, 5 * 7 * 16 * 8, 1 << 40])
def test_reference_in_chunks_same_bits(monkeypatch, units):
    """Every way of cutting the problem (a head, part of a KV group, whole groups, whole
    batches, one call) gives the bits of one call, with every feature that reads per-batch
    or per-head data."""
    q, k, v = qkv(B=3, Hq=8, Hkv=2)
    kw = dict(causal=True, kv_lens=[7, 3, 0], q_lens=[5, 4, 2], mask=rand(8, 1, 7) > -1,
              bias=rand(3, 8, 5, 7, seed=4), sinks=rand(8, seed=5), empty_rows="mean",
              weights=True)
    want = smattn.reference(q, k, v, **kw)
    wantb = smattn.reference(*(np.swapaxes(x, 1, 2) for x in (q, k, v)), layout="bhsd", **kw)
    x = rand(3, 8, 5, 7, seed=6)
    wants = smattn.reference_softmax(x, scale=0.7, kv_lens=[7, 3, 0], sinks=rand(8, seed=5))
    monkeypatch.setattr(_api, "_REF_CHUNK_UNITS", max(1, units // (os.cpu_count() or 1)))
    calls = []
    got = smattn.reference(q, k, v, progress=lambda d, t: calls.append((d, t)), **kw)
    for w, g in zip(want, got):
        assert np.array_equal(w, g, equal_nan=True)
    gotb = smattn.reference(*(np.swapaxes(x, 1, 2) for x in (q, k, v)), layout="bhsd", **kw)
    for w, g in zip(wantb, gotb):
        assert np.array_equal(w, g, equal_nan=True)
    gots = smattn.reference_softmax(x, scale=0.7, kv_lens=[7, 3, 0], sinks=rand(8, seed=5),
                                    progress=False)
    for w, g in zip(wants, gots):
        assert np.array_equal(w, g, equal_nan=True)
    assert calls[-1] == (3 * 8 * 5 * 7, 3 * 8 * 5 * 7)
    assert all(a[0] <= b[0] for a, b in zip(calls, calls[1:]))


@pytest.mark.parametrize("units", [1, 5 * 7 * 16 * 2, 5 * 7 * 16 * 8])
@pytest.mark.parametrize("per_batch", [False, True])
def test_reference_in_chunks_carries_alibi_slopes(monkeypatch, units, per_batch):
    """ALiBi slopes are read per head (and per batch with [B, Hq] slopes): a chunk of heads
    h0.. of batch b0 reads slope [b0, h0], not head 0's, so that every cut gives the bits
    of one call, and each head those of a one-head call with its own slope."""
    q, k, v = qkv(B=3, Hq=8, Hkv=2)
    sl = np.float32(2.0) ** -np.arange(1, 9, dtype=np.float32)
    if per_batch:
        sl = np.stack([sl, sl[::-1], sl * 4])
    kw = dict(causal=True, alibi_slopes=sl)
    want = smattn.reference(q, k, v, **kw)
    monkeypatch.setattr(_api, "_REF_CHUNK_UNITS", units)
    got = smattn.reference(q, k, v, threads=1, progress=False, **kw)
    for w, g in zip(want, got):
        assert np.array_equal(w, g, equal_nan=True)
    for bb, h in ((0, 5), (2, 7)):
        one = smattn.reference(q[bb:bb + 1, :, h:h + 1], k[bb:bb + 1, :, h // 4:h // 4 + 1],
                               v[bb:bb + 1, :, h // 4:h // 4 + 1], causal=True,
                               alibi_slopes=sl[bb, h:h + 1] if per_batch else sl[h:h + 1])
        assert np.array_equal(got[0][bb:bb + 1, :, h:h + 1], one[0])


def test_reference_chunks_respect_kv_groups():
    """A chunk of heads is one problem: within one KV group, or whole groups."""
    q, k, v = qkv(B=2, S=4, T=4, Hq=12, Hkv=3, D=4, Dv=4)  # G = 4
    b = _api._build(q, k, v)
    per_head = 4 * 4 * 8
    for heads in range(1, 13):
        chunks = _api._ref_chunks(b, heads * per_head)
        covered = sorted((b0 + i, h) for b0, nb, h0, nh in chunks
                         for i in range(nb) for h in range(h0, h0 + nh))
        assert covered == [(bb, h) for bb in range(2) for h in range(12)], heads
        for b0, nb, h0, nh in chunks:
            assert nb * nh <= max(heads, 1) or nb == 1 and nh == 1
            assert (h0 // 4 == (h0 + nh - 1) // 4) or (h0 % 4 == 0 and nh % 4 == 0), \
                (heads, h0, nh)


class _Tty:
    def __init__(self):
        self.text = ""

    def isatty(self):
        return True

    def write(self, s):
        self.text += s

    def flush(self):
        pass


def test_reference_shows_progress_on_a_terminal(monkeypatch, small_chunks):
    q, k, v = qkv(B=2, S=16, T=16, Hq=4, Hkv=4, D=8, Dv=8)
    tty = _Tty()
    monkeypatch.setattr(sys, "stderr", tty)
    monkeypatch.setattr(_api, "_PROGRESS_AFTER", 0.0)
    o, _ = smattn.reference(q, k, v)
    assert "smattn.reference: 100%" in tty.text, tty.text
    assert tty.text.endswith("\r") and tty.text.split("\r")[-2].strip() == ""  # cleared
    tty.text = ""
    smattn.reference(q, k, v, progress=False)
    assert tty.text == ""
    monkeypatch.setattr(_api, "_PROGRESS_AFTER", 3600.0)  # a short call says nothing
    smattn.reference(q, k, v)
    assert tty.text == ""
    # one head larger than a chunk (a head is never split): still watched
    monkeypatch.setattr(_api, "_PROGRESS_AFTER", 0.0)
    monkeypatch.setattr(_api, "_REF_CHUNK_UNITS", 1)
    assert len(_api._ref_chunks(_api._build(q[:1, :, :1], k[:1, :, :1], v[:1, :, :1]), 2)) == 1
    tty.text = ""
    smattn.reference(q[:1, :, :1], k[:1, :, :1], v[:1, :, :1])
    assert "smattn.reference: 100%" in tty.text, tty.text
    monkeypatch.setattr(sys, "stderr", open(os.devnull, "w"))
    with pytest.raises(TypeError, match="progress 'yes'"):
        smattn.reference(q, k, v, progress="yes")


_INTERRUPTED = r"""
import signal, sys, time, numpy as np, smattn
# Ctrl-C as a terminal user gets it, however the tests were started: a shell script's
# background job (`make check &`) starts with SIGINT ignored, and Python then leaves it so.
signal.signal(signal.SIGINT, signal.default_int_handler)
q = np.random.default_rng(0).standard_normal((1, 256, 32, 64)).astype(np.float32)
seen = []
def progress(done, total):
    if not seen:
        print("started", flush=True)
    seen.append((done, total))
t = time.monotonic()
try:
    smattn.reference(q, q, q, progress=progress)
    print("finished", flush=True)
except KeyboardInterrupt:
    print("interrupted %.3f %d %d" % (time.monotonic(), seen[-1][0], seen[-1][1]), flush=True)
"""


def test_reference_stops_on_ctrl_c():
    """SIGINT during a long oracle call raises KeyboardInterrupt within a fraction of a
    second (it used to run to the end: 35 s for S = T = 512, 28 heads, D = 128), and the
    process exits at once."""
    p = subprocess.Popen([sys.executable, "-c", _INTERRUPTED], stdout=subprocess.PIPE,
                         text=True)
    try:
        assert p.stdout.readline().strip() == "started"
        time.sleep(0.2)
        sent = time.monotonic()
        p.send_signal(signal.SIGINT)
        out = p.stdout.read().split()
        p.wait(timeout=30)
        exited = time.monotonic()
    finally:
        p.kill()
    assert out and out[0] == "interrupted", out
    when, done, total = float(out[1]), int(out[2]), int(out[3])
    assert done < total  # stopped, not finished
    assert when - sent < 1.0 and exited - sent < 2.0, (when - sent, exited - sent)


# ---- messages that point at the mistake -----------------------------------------------------

def test_layout_hint_for_sdpa_arrays():
    """SDPA-shaped arrays [B, H, S, D] judged as the default BSHD fail far beyond the bound;
    the reason says the other layout fits. A plain bug does not get the hint when the
    other layout cannot be a problem."""
    q, k, v = (rand(1, 4, 12, 8, seed=s) for s in (1, 2, 3))  # [B, H, S, D]
    o, lse = smattn.reference(q, k, v, layout="bhsd", is_causal=True)
    assert smattn.check(o, q, k, v, lse=lse, layout="bhsd", is_causal=True)
    r = smattn.check(o, q, k, v, is_causal=True)
    assert not r and r.max_ratio > 1e3
    assert "is the layout wrong? These arrays also make a valid problem read as " \
           "layout='bhsd'" in r.reason, r.reason
    with pytest.raises(AssertionError, match="pass layout='bhsd'"):
        smattn.assert_close(o, q, k, v, is_causal=True)
    # with the LSE the shapes disagree before anything is judged: the same hint
    with pytest.raises(ValueError, match=r"lse: shape \(1, 4, 12\), want \[1, 12, 4\]; is the "
                                         r"layout wrong\?"):
        smattn.check(o, q, k, v, lse=lse, is_causal=True)
    # the reverse: BSHD arrays judged as BHSD
    qs, ks, vs = (np.ascontiguousarray(np.swapaxes(x, 1, 2)) for x in (q, k, v))
    os_ = np.ascontiguousarray(np.swapaxes(o, 1, 2))
    r = smattn.check(os_, qs, ks, vs, layout="BHSD", is_causal=True)
    assert not r and "read as layout='bshd'" in r.reason
    # arrays whose other reading is no problem (Hq' = S = 6 heads, Hkv' = T = 4): no hint
    q, k, v = qkv(B=1, S=6, T=4, Hq=4, Hkv=2)
    bad = smattn.reference(q, k, v)[0] * 1000
    r = smattn.check(bad, q, k, v)
    assert not r and r.max_ratio > 1e3 and "layout" not in r.reason


def test_assert_close_message_and_tolerances():
    q, k, v = qkv()
    o, lse = smattn.reference(q, k, v, causal=True)
    bad = o.copy()
    bad[1, 2, 3, 4] += 0.25
    bad[0, 0, 0, 0] -= 1e-3
    with pytest.raises(TypeError) as e:
        smattn.assert_close(bad, q, k, v, causal=True, rtol=1e-3)
    assert "assert_close() takes no rtol" in str(e.value)
    assert "bound, which replaces tolerances" in str(e.value) and "precision=" in str(e.value)
    with pytest.raises(TypeError, match="takes no atol or rtol"):
        smattn.assert_close(bad, q, k, v, rtol=1e-3, atol=1e-5)
    with pytest.raises(TypeError, match=r"^assert_close\(\) got an unexpected keyword "
                                        r"argument 'equal_nan'"):
        smattn.assert_close(bad, q, k, v, equal_nan=True)
    r = smattn.check(bad, q, k, v, causal=True)
    assert r.mismatched == 2
    with pytest.raises(AssertionError) as e:
        smattn.assert_close(bad, q, k, v, causal=True, msg="mine")
    lines = str(e.value).split("\n")
    assert lines[0] == "mine: " + r.reason
    assert lines[2] == "Mismatched elements: 2 / %d (%.1f%%)" % (o.size, 200.0 / o.size)
    assert lines[3].startswith("Greatest error/bound ratio: %.4g at O index (1, 2, 3, 4): "
                               "got %r, exact " % (r.max_ratio, float(bad[1, 2, 3, 4])))
    assert smattn.assert_close(o, q, k, v, lse=lse, causal=True).mismatched == 0


def test_assert_close_takes_every_keyword_of_check():
    """assert_close passes check() every keyword check() takes: each at its default, and
    ALiBi's, the descales' and fp8's with values that change the problem."""
    q, k, v = qkv()
    o, lse = smattn.reference(q, k, v)
    for name, par in inspect.signature(smattn.check).parameters.items():
        if par.kind == par.KEYWORD_ONLY:
            assert smattn.assert_close(o, q, k, v, **dict({"lse": lse}, **{name: par.default})), \
                name
    sl = np.float32([0.5, 0.25, 0.125, 0.0625])
    for kw in (dict(alibi_slopes=sl), dict(alibi_slopes=sl, alibi_mode="one_sided"),
               dict(k_descale=0.5, q_descale=2.0, v_descale=0.25)):
        o, lse = smattn.reference(q, k, v, **kw)
        assert smattn.assert_close(o, q, k, v, lse=lse, **kw)
    q8 = (rand(2, 5, 4, 8, seed=7) * 40).astype(np.int8).view(np.uint8)
    o, lse = smattn.reference(q8, k, v, fp8_e4m3="q")
    assert smattn.assert_close(o, q8, k, v, lse=lse, fp8_e4m3="q")


# ---- dtypes, layouts, integers --------------------------------------------------------------

def test_output_dtype_follows_the_inputs():
    q, k, v = qkv(dtype=np.float64)
    o, lse = smattn.reference(q, k, v)
    assert o.dtype == lse.dtype == np.float64
    o32, _ = smattn.reference(q, k, v, dtype="float32")
    assert o32.dtype == np.float32 and np.array_equal(o.astype(np.float32), o32)
    assert smattn.reference(q.astype(np.float32), k, v)[0].dtype == np.float64  # widest
    h = [x.astype(np.float16) for x in (q, k, v)]
    assert smattn.reference(*h)[0].dtype == np.float16
    assert smattn.attention(*h)[0].dtype == np.float16
    kb = (k.astype(np.float32).view(np.uint32) >> 16).astype(np.uint16)  # bfloat16 bits
    assert smattn.reference(h[0], kb, h[2])[0].dtype == np.float32  # f16 meets bf16
    assert smattn.reference(*(x.astype(np.float32) for x in (q, k, v)))[0].dtype == np.float32
    p, lse = smattn.reference_softmax(rand(2, 3, 4, seed=1, dtype=np.float64))
    assert p.dtype == np.float64


def test_layout_any_case():
    q, k, v = (rand(2, 4, 5, 8, seed=s) for s in (1, 2, 3))
    o, lse = smattn.reference(q, k, v, layout="bhsd")
    for name in ("BHSD", "Bhsd"):
        o2, lse2 = smattn.reference(q, k, v, layout=name)
        assert np.array_equal(o, o2) and np.array_equal(lse, lse2)
        assert smattn.check(o, q, k, v, layout=name)
    assert next(iter(smattn.cases(layout="BHSD", categories=["gqa"]))).layout == "bhsd"
    with pytest.raises(ValueError, match="layout 'sbhd'"):
        smattn.reference(q, k, v, layout="sbhd")


@pytest.mark.parametrize("call, exc, text", [
    (lambda q, k, v: smattn.reference(q, k, v, window=(2 ** 64 + 1, 0)), OverflowError,
     "window (18446744073709551617, 0): window left 18446744073709551617 does not fit in "
     "int64"),
    (lambda q, k, v: smattn.reference(q, k, v, window=(0, -2 ** 63 - 1)), OverflowError,
     "does not fit in int64"),
    (lambda q, k, v: smattn.reference(q, k, v, window=(True, 0)), TypeError, "window (True, 0)"),
    (lambda q, k, v: smattn.reference(q, k, v, window=("1", 0)), TypeError, "window ('1', 0)"),
    (lambda q, k, v: smattn.reference(q, k, v, threads=2 ** 32 + 1), OverflowError,
     "threads 4294967297 does not fit in int32"),
    (lambda q, k, v: smattn.attention(q, k, v, threads=2 ** 31), OverflowError,
     "threads 2147483648 does not fit in int32"),
    (lambda q, k, v: smattn.reference(q, k, v, threads=-1), ValueError, "threads -1: want >= 0"),
    (lambda q, k, v: smattn.reference(q, k, v, threads=1.0), TypeError, "threads 1.0: want an "
                                                                        "integer"),
    (lambda q, k, v: smattn.attention(q, k, v, threads="2"), TypeError, "threads '2': want an "
                                                                        "integer"),
    (lambda q, k, v: smattn.reference(q, k, v, threads=True), TypeError, "not a bool"),
    (lambda q, k, v: smattn.precision("float32", blocks=2 ** 64 + 1), OverflowError,
     "precision: blocks 18446744073709551617 does not fit in int64"),
    (lambda q, k, v: smattn.precision("float32", acc_len=2.5), TypeError,
     "precision: acc_len 2.5 is not an integer"),
    (lambda q, k, v: smattn.precision("float32", blocks=True), TypeError,
     "precision: blocks True is not an integer"),
    (lambda q, k, v: smattn.precision("float32", u_p="0.1"), TypeError,
     "precision: u_p '0.1': want a real number"),
    (lambda q, k, v: smattn.reference(q, k, v, kv_lens=np.array([2 ** 64 - 1, 1], np.uint64)),
     OverflowError, "kv_lens: 18446744073709551615 does not fit in int64"),
    (lambda q, k, v: next(smattn.cases(seed=2 ** 64)), OverflowError,
     "seed 18446744073709551616 does not fit in uint64"),
    (lambda q, k, v: next(smattn.cases(seed=-1)), OverflowError, "seed -1 does not fit"),
    (lambda q, k, v: next(smattn.cases(seed=1.5)), TypeError, "seed 1.5: want an integer"),
])
def test_integers_never_wrap(call, exc, text):
    q, k, v = qkv()
    with pytest.raises(exc) as e:
        call(q, k, v)
    assert text in str(e.value), str(e.value)


def test_integers_in_range_still_work():
    q, k, v = qkv()
    o, _ = smattn.reference(q, k, v, window=(np.int64(2), np.uint8(0)), threads=np.int32(1))
    assert np.array_equal(o, smattn.reference(q, k, v, window=(2, 0))[0])
    assert smattn.precision("float32", blocks=np.int64(4), u_p=0).blocks == 4
    assert sum(1 for _ in smattn.cases(seed=2 ** 64 - 1, categories=["decode"])) == 3


def test_attention_dtypes_documented():
    """The kernel takes f32/f16/bf16 everywhere (include/smattn.h); the docstring and the
    error for float64 say so."""
    q, k, v = qkv()
    h = [x.astype(np.float16) for x in (q, k, v)]
    o, lse = smattn.attention(*h, bias=rand(5, 7, dtype=np.float16), dtype="bfloat16")
    assert o.dtype == np.uint16
    doc = smattn.attention.__doc__
    assert "float32 q, bias and sinks" not in doc and "float32 outputs" not in doc
    assert "q, k, v, bias and sinks in float32, float16 or bfloat16" in doc
    with pytest.raises(TypeError) as e:
        smattn.attention(q.astype(np.float64), k, v, dtype="float32")
    assert "takes q, k, v, bias and sinks in float32, float16 or bfloat16 (any mix; not " \
           "float64)" in str(e.value) and "'float16' or 'bfloat16'" in str(e.value)


def test_zero_d_bias_and_mask_broadcast():
    q, k, v = qkv()
    o, _ = smattn.reference(q, k, v, bias=np.float32(0.5))
    assert np.array_equal(o, smattn.reference(q, k, v, bias=np.full((5, 7), 0.5, np.float32))[0])
    o, _ = smattn.reference(q, k, v, bias=np.array(-np.inf, np.float32))
    assert np.all(o == 0)  # every key hidden: empty rows
    o2, _ = smattn.reference(q, k, v, mask=np.array(True))
    assert np.array_equal(o2, smattn.reference(q, k, v)[0])


def test_check_judges_an_in_place_kernel():
    """An output that overlaps an input (a kernel that works in place) is judged on a copy,
    not refused as aliasing (SMATTN_ERR_ALIAS is for the library's own outputs)."""
    q, k, v = qkv(S=1, T=1, Hq=2, Hkv=2)  # one key per row: O = V exactly (P = 1)
    assert np.shares_memory(v, v)
    r = smattn.check(v, q, k, v)  # O written over V
    assert r.passed and r.elements == v.size
    r = smattn.check(q, q, k, v, lse=np.zeros((2, 2, 1), np.float32))  # O over Q: judged
    assert not r.passed and r.worst is not None
    x = np.ones((1, 2, 3, 1), np.float32)  # one key per row: P = 1 = x
    assert smattn.check_softmax(x, x).passed
    x[0, 0, 0, 0] = 3  # still P = 1 there, and x no longer equals it
    r = smattn.check_softmax(x, x)
    assert not r.passed and r.worst.index == (0, 0, 0, 0)


# ---- visibility -----------------------------------------------------------------------------

def _c_visible(b):
    """smattn_visible for every (b, h, i, j), the C library's answer."""
    out = np.zeros((b.B, b.Hq, b.S, b.T), dtype=bool)
    for idx in np.ndindex(*out.shape):
        out[idx] = _lib.visible(ctypes.byref(b.prob), ctypes.byref(b.inputs), *idx) != 0
    return out


@pytest.mark.parametrize("kw", [
    dict(), dict(causal=True), dict(causal="upper_left"), dict(window=(2, 1)),
    dict(causal=True, window=(3, -1), kv_lens=[5, 0], q_lens=[4, 5]),
    dict(causal="upper_left", window=(-1, 2), q_lens=[2, 5]),
    dict(mask=rand(1, 4, 5, 7, seed=8) > 0, kv_lens=[7, 6], causal=True),
    dict(bias=np.where(rand(5, 7, seed=9) > 0, 0, -np.inf).astype(np.float32)),
])
def test_visible_is_smattn_visible(kw):
    q, k, v = qkv()
    b = _api._build(q, k, v, **kw)
    vis = smattn.visible(q, k, v, **kw)
    assert vis.shape == (2, 4, 5, 7) and vis.dtype == np.bool_
    assert np.array_equal(vis, _c_visible(b))
    assert smattn.visible(q[0], k[0], v[0], **{n: a for n, a in kw.items()
                                              if n not in ("kv_lens", "q_lens")}).ndim == 3


def test_case_visible_lets_a_plain_kernel_pass():
    """A kernel that knows no causal, window or lengths, only a bool mask, passes the
    cases that use them when it is given case.visible() as its mask; without it, it
    fails. visible() is smattn_visible on every case of those categories."""
    n = 0
    for case in smattn.cases("quick", categories=["causal", "window", "padding", "garbage",
                                                  "empty_rows"]):
        if case.op != "attention":
            continue
        vis = case.visible()
        b = _api._build(case.q, case.k, case.v, layout=case.layout,
                        **{k: a for k, a in case.kwargs.items()
                           if k in ("causal", "window", "kv_lens", "q_lens", "mask")})
        if vis.size <= 20000:
            assert np.array_equal(vis, _c_visible(b)), case.name
        plain = {k: a for k, a in case.kwargs.items()
                 if k not in ("causal", "window", "kv_lens", "q_lens", "mask")}
        if plain["empty_rows"] == "mean":
            continue  # the mean convention reads V over [0, kv_lens[b]): not a mask
        o, lse = numpy_attention(case.q, case.k, case.v, mask=vis, **plain)
        assert case.check(o, lse=lse).passed, case.name
        if not vis.all():
            o, lse = numpy_attention(case.q, case.k, case.v, **plain)
            assert not case.check(o, lse=lse).passed, case.name
        n += 1
    assert n >= 5


# ---- the docs -------------------------------------------------------------------------------

def _read(*path):
    with open(os.path.join(ROOT, *path)) as f:
        return f.read()


def test_docs_name_debians_python_and_count_right():
    """The READMEs say which python3 to use (pyenv and conda put another first on PATH:
    pip fails on bdist_wheel, the installed package is not found) and state no case count
    the battery does not have."""
    top = _read("README.md")
    py_section = top[top.index("## Using smattn from Python"):]
    py_section = py_section[:py_section.index("\n## ", 3)]
    pyreadme = _read("python", "README.md")
    for text in (py_section, pyreadme):
        assert "/usr/bin/python3" in text
        assert "pyenv" in text and "conda" in text and "bdist_wheel" in text
    n = sum(1 for _ in smattn.cases("quick"))
    for text in (top, pyreadme):
        for m in re.finditer(r"(~?)(\d+) cases", text):
            assert not m.group(1) and int(m.group(2)) == n, m.group(0)


def test_check_sampled_rows():
    """check(rows=K): the verdict of the whole check for a correct kernel, a bug on an
    always-judged row (2^k) found, one on a row left out not claimed found (the Report says
    sampled), and the rows a function of the seed."""
    q, k, v = rand(2, 40, 2, 8, seed=1), rand(2, 40, 2, 8, seed=2), rand(2, 40, 2, 8, seed=3)
    o, _ = smattn.reference(q, k, v, causal=True, dtype="float32")
    whole = smattn.check(o, q, k, v, causal=True)
    r = smattn.check(o, q, k, v, causal=True, rows=1, seed=4)
    assert whole and r and not whole.sampled and r.sampled
    assert r.rows_total == whole.rows_total == 2 * 2 * 40 and r.rows_judged < r.rows_total
    assert "sampled" in str(r) and "sampled" not in str(whole)
    bad = o.copy()
    bad[1, 32, 0, 3] += 0.5  # row 32 = 2^5: always judged
    r = smattn.check(bad, q, k, v, causal=True, rows=1)
    assert not r and r.sampled and "i=32" in r.reason
    bad = o.copy()
    bad[0, 20, 1, 0] += 0.5  # row 20: judged only when drawn, never with K = 1
    assert smattn.check(bad, q, k, v, causal=True, rows=1).sampled
    assert smattn.check(bad, q, k, v, causal=True, rows=1)
    assert not smattn.check(bad, q, k, v, causal=True)
    # K = S: every row, the whole check
    assert not smattn.check(bad, q, k, v, causal=True, rows=40).sampled
    for bad_rows in (0, -1):
        with pytest.raises(ValueError):
            smattn.check(o, q, k, v, causal=True, rows=bad_rows)
    with pytest.raises(ValueError):
        next(smattn.cases("huge"))


def test_alibi_modes():
    """ALiBi (SPEC 2.8): reference, attention and check take alibi_slopes and alibi_mode;
    under a lower-right causal mask the symmetric and one-sided modes give the same O and
    LSEs apart by m (S - 1 - i); a slope that is not a float32 is refused."""
    rng = np.random.default_rng(5)
    q = rng.standard_normal((1, 4, 2, 8)).astype(np.float32)
    k = rng.standard_normal((1, 9, 1, 8)).astype(np.float32)
    v = rng.standard_normal((1, 9, 1, 8)).astype(np.float32)
    slopes = np.array([0.5, 0.125], dtype=np.float32)
    kw = dict(causal="lower_right", alibi_slopes=slopes)
    o_s, lse_s = smattn.reference(q, k, v, alibi_mode="symmetric", dtype="float64", **kw)
    o_o, lse_o = smattn.reference(q, k, v, alibi_mode="one_sided", dtype="float64", **kw)
    assert np.array_equal(o_s, o_o)
    want = slopes[None, :, None] * (3 - np.arange(4))[None, None, :]
    assert np.allclose(lse_s - lse_o, want, rtol=0, atol=1e-12)
    o, lse = smattn.attention(q, k, v, alibi_mode="one_sided", **kw)
    assert smattn.check(o, q, k, v, lse=lse, precision="opt", alibi_mode="one_sided",
                        **kw).passed
    r = smattn.check(o, q, k, v, lse=lse, precision="opt", alibi_mode="symmetric", **kw)
    assert not r.passed and "LSE" in r.reason
    with pytest.raises(ValueError, match="not a float32 exactly"):
        smattn.reference(q, k, v, alibi_slopes=[0.1, 0.5])
    with pytest.raises(ValueError, match="alibi_mode"):
        smattn.reference(q, k, v, alibi_slopes=slopes, alibi_mode="sym")
    c = next(c for c in smattn.cases(categories=["alibi"]) if c.name.endswith("q_lens_gqa"))
    assert c.kwargs["alibi_mode"] == c.name.split("/")[1].split("_q_lens")[0]
    assert "alibi_" + c.kwargs["alibi_mode"] in c.features
    assert c.kwargs["alibi_slopes"].dtype == np.float32
