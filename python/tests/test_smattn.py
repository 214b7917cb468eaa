# SPDX-License-Identifier: MIT
"""test_smattn.py: the Python package against the C library: the oracle and the kernel
through NumPy layouts and strides, the checker's verdicts and sentences on a correct NumPy
kernel and on kernels with one planted bug each, the battery, errors, installation."""
import os
import subprocess
import sys

import numpy as np
import pytest

import smattn
from smattn import _api

sys.path.insert(0, os.path.dirname(__file__))
from kernels import numpy_attention, numpy_softmax  # noqa: E402

ROOT = os.environ.get("SMATTN_ROOT") or os.path.dirname(os.path.dirname(
    os.path.dirname(os.path.abspath(__file__))))


def rand(*shape, seed=0, dtype=np.float32):
    return np.random.default_rng(seed).standard_normal(shape).astype(dtype)


def qkv(B=2, S=5, T=7, Hq=4, Hkv=2, D=8, Dv=8, dtype=np.float32):
    return rand(B, S, Hq, D, seed=1, dtype=dtype), rand(B, T, Hkv, D, seed=2, dtype=dtype), \
        rand(B, T, Hkv, Dv, seed=3, dtype=dtype)


# ---- the oracle and the kernel ------------------------------------------------------------

def test_library_found():
    assert os.path.exists(smattn.LIBRARY_PATH) or smattn.LIBRARY_PATH == "libsmattn.so.0"
    if os.environ.get("SMATTN_LIBRARY"):
        assert smattn.LIBRARY_PATH == os.environ["SMATTN_LIBRARY"]


def test_reference_matches_numpy_float64():
    q, k, v = qkv(dtype=np.float64)
    for causal in (None, "lower_right", "upper_left"):
        o, lse = smattn.reference(q, k, v, causal=causal, dtype="float64")
        o2, lse2 = numpy_attention(q, k, v, causal=causal)
        assert o.shape == (2, 5, 4, 8) and lse.shape == (2, 4, 5) and o.dtype == np.float64
        np.testing.assert_allclose(o, o2, rtol=1e-6, atol=1e-6)
        np.testing.assert_allclose(lse, lse2, rtol=1e-6)


def test_attention_within_its_bound():
    q, k, v = qkv(S=9, T=33)
    o, lse, p = smattn.attention(q, k, v, causal=True, weights=True, window=(4, 0))
    r = smattn.check(o, q, k, v, lse=lse, p=p, causal=True, window=(4, 0), precision="opt")
    assert r.passed and 0 <= r.max_ratio <= 1 and r.reason == ""
    assert r.elements == o.size + lse.size + p.size
    assert r.worst is not None and r.worst.output in ("O", "LSE", "P")


def test_bhsd_layout_same_bits_as_bshd():
    q, k, v = qkv()
    o, lse = smattn.reference(q, k, v, causal="upper_left")
    qt, kt, vt = (np.swapaxes(x, 1, 2) for x in (q, k, v))  # views: [B, H, S, D]
    ob, lseb = smattn.reference(qt, kt, vt, causal="upper_left", layout="bhsd")
    assert ob.shape == (2, 4, 5, 8)
    assert np.array_equal(np.swapaxes(ob, 1, 2), o) and np.array_equal(lseb, lse)
    # and contiguous BHSD arrays, as SDPA users hold them
    ob2, _ = smattn.reference(*(np.ascontiguousarray(x) for x in (qt, kt, vt)),
                              causal="upper_left", layout="bhsd")
    assert np.array_equal(ob2, ob)


def test_strides_passed_not_copied():
    big = rand(2, 10, 4, 16, seed=5)
    q = big[:, ::2, :, ::2]  # [2, 5, 4, 8], no unit stride anywhere
    k, v = rand(2, 7, 2, 8, seed=6), rand(2, 7, 2, 8, seed=7)
    b = _api._build(q, k, v)
    assert np.shares_memory(b.keep[0], big)  # passed by pointer and strides
    assert list(b.inputs.q.stride) == [640, 128, 16, 2]
    o, lse = smattn.reference(q, k, v)
    o2, lse2 = smattn.reference(np.ascontiguousarray(q), k, v)
    assert np.array_equal(o, o2) and np.array_equal(lse, lse2)
    # negative strides cannot be passed: copied, same result
    o3, _ = smattn.reference(q, k[:, ::-1][:, ::-1], v)
    assert np.array_equal(o3, o)


def test_input_and_output_dtypes():
    q, k, v = qkv()
    o32, _ = smattn.reference(q, k, v)
    o16, _ = smattn.reference(q.astype(np.float16), k.astype(np.float16), v.astype(np.float16),
                              dtype="float16")
    assert o16.dtype == np.float16
    obf, lbf = smattn.reference(q, k, v, dtype="bfloat16")  # bit patterns
    assert obf.dtype == np.uint16 and lbf.dtype == np.uint16
    back = (obf.astype(np.uint32) << 16).view(np.float32)
    assert np.max(np.abs(back - o32)) <= 2 ** -8 * np.max(np.abs(o32))
    # uint16 inputs are bfloat16 bit patterns: the same values as float32 holding them
    kb = (k.view(np.uint32) >> 16).astype(np.uint16)
    kf = (kb.astype(np.uint32) << 16).view(np.float32)
    assert np.array_equal(smattn.reference(q, kb, v)[0], smattn.reference(q, kf, v)[0])
    vb = (v.view(np.uint32) >> 16).astype(np.uint16)
    o, lse = smattn.attention(q, kb, vb, causal=True)  # the kernel takes bfloat16 K/V
    assert smattn.check(o, q, kb, vb, lse=lse, causal=True, precision="opt")
    qf = np.asfortranarray(q)  # column-major: passed with its strides
    assert np.array_equal(smattn.reference(qf, k, v)[0], o32)
    with pytest.raises(TypeError, match="not a float type"):
        smattn.reference(q.astype(np.int32), k, v)
    with pytest.raises(TypeError, match=r"dtype 'int8'"):
        smattn.reference(q, k, v, dtype="int8")


def test_masks_bias_sinks_and_sdpa_names():
    q, k, v = qkv(S=4, T=6)
    mask = rand(4, 6, seed=9) > -0.5  # [S, T], broadcast (zero strides)
    bias = rand(1, 4, 1, 6, seed=10)
    o1, _ = smattn.reference(q, k, v, mask=mask)
    o2, _ = smattn.reference(q, k, v, attn_mask=mask)
    assert np.array_equal(o1, o2)
    o3, _ = smattn.reference(q, k, v, bias=bias)
    o4, _ = smattn.reference(q, k, v, attn_mask=bias)
    assert np.array_equal(o3, o4)
    o5, _ = smattn.reference(q, k, v, is_causal=True)
    o6, _ = smattn.reference(q, k, v, causal="upper_left")
    assert np.array_equal(o5, o6)
    o7, _ = smattn.reference(q, k, v, causal=True)
    o8, _ = smattn.reference(q, k, v, causal="lower_right")
    assert np.array_equal(o7, o8) and not np.array_equal(o7, o6)  # S != T: they differ
    o9, _ = smattn.reference(q, k, v, softmax_scale=0.5, window_size=(2, 0))
    o10, _ = smattn.reference(q, k, v, scale=0.5, window=(2, 0))
    assert np.array_equal(o9, o10)
    sinks = np.array([0.5, -1, 2, -np.inf], dtype=np.float32)
    o, lse = smattn.reference(q, k, v, sinks=sinks, kv_lens=[0, 6])
    assert np.all(o[0] == 0) and np.array_equal(lse[0, :, 0], sinks)  # sink only: O = 0
    with pytest.raises(TypeError, match="not both"):
        smattn.reference(q, k, v, causal=True, is_causal=True)


def test_three_d_inputs_drop_batch():
    q, k, v = qkv(B=1)
    o, lse = smattn.reference(q[0], k[0], v[0], causal=True)
    o4, lse4 = smattn.reference(q, k, v, causal=True)
    assert o.shape == (5, 4, 8) and lse.shape == (4, 5)
    assert np.array_equal(o, o4[0]) and np.array_equal(lse, lse4[0])
    assert smattn.check(o, q[0], k[0], v[0], lse=lse, causal=True).passed


# ---- errors: the C library's sentences ------------------------------------------------------

@pytest.mark.parametrize("kw, exc, text", [
    (dict(window=(-2, 0)), ValueError, "a window bound is below -1 (SMATTN_ERR_WINDOW)"),
    (dict(scale=float("nan")), ValueError,
     "the scale is NaN or infinite, or a descale is not a positive finite binary32 value "
     "(SMATTN_ERR_SCALE)"),
    (dict(softcap=-1), ValueError,
     "the softcap is negative, NaN or infinite (SMATTN_ERR_SOFTCAP)"),
    (dict(kv_lens=[9, 1]), ValueError,
     "a kv_lens or q_lens entry is out of range (SMATTN_ERR_LENGTHS)"),
    (dict(kv_lens=[1]), ValueError, "kv_lens: 1 entries, want B = 2"),
    (dict(causal="sideways"), ValueError, "causal 'sideways'"),
    (dict(empty_rows="none"), ValueError, "empty_rows 'none'"),
    (dict(layout="sbhd"), ValueError, "layout 'sbhd'"),
    (dict(mask=np.ones((3, 3), dtype=bool)), ValueError, "does not broadcast to [B,Hq,S,T]"),
    (dict(mask=np.ones((5, 7), dtype=np.float32)), TypeError, "not a mask type"),
])
def test_bad_arguments(kw, exc, text):
    q, k, v = qkv()
    with pytest.raises(exc) as e:
        smattn.reference(q, k, v, **kw)
    assert text in str(e.value)


def test_bad_shapes():
    q, k, v = qkv()
    with pytest.raises(ValueError, match=r"the number of query heads is not a multiple of the "
                                         r"KV heads \(SMATTN_ERR_HEADS\)"):
        smattn.reference(rand(2, 5, 3, 8), k, v)
    with pytest.raises(ValueError, match="does not match q's head dim 8"):
        smattn.reference(q, rand(2, 7, 2, 6), v)
    with pytest.raises(ValueError, match="3-D but q is 4-D"):
        smattn.reference(q, k[0], v)
    with pytest.raises(ValueError, match=r"\(SMATTN_ERR_SHAPE\)"):
        smattn.reference(rand(2, 0, 4, 8), k, v)
    with pytest.raises(TypeError, match=r"opt: kernel: valid, but not supported by this "
                                        r"implementation \(SMATTN_ERR_UNSUPPORTED\)"):
        smattn.attention(q.astype(np.float64), k, v)
    with pytest.raises(ValueError, match=r"o: shape \(2, 4, 5, 8\), want \[2, 5, 4, 8\]"):
        smattn.check(np.zeros((2, 4, 5, 8), np.float32), q, k, v)


# ---- the checker ----------------------------------------------------------------------------

def test_report_names_the_element():
    q, k, v = qkv()
    qt, kt, vt = (np.swapaxes(x, 1, 2) for x in (q, k, v))
    o, lse = smattn.reference(qt, kt, vt, layout="bhsd", causal=True)
    assert smattn.check(o, qt, kt, vt, lse=lse, layout="bhsd", causal=True)
    bad = o.copy()
    bad[1, 3, 2, 5] += 1e-3  # [b, h, i, c] in BHSD
    r = smattn.check(bad, qt, kt, vt, layout="bhsd", causal=True)
    assert not r and r.worst.output == "O" and r.worst.index == (1, 3, 2, 5)
    assert r.worst.got == float(bad[1, 3, 2, 5]) and r.max_ratio > 1
    assert "error/bound ratio" in r.reason and "O[b=1,i=2,h=3,c=5]" in r.reason
    assert str(r) == "fail: " + r.reason
    with pytest.raises(AssertionError) as e:
        smattn.assert_close(bad, qt, kt, vt, layout="bhsd", causal=True, msg="my kernel")
    assert str(e.value).split("\n")[0] == "my kernel: " + r.reason


def test_precision_models():
    q, k, v = qkv()
    # a kernel that computes in binary16 (inputs rounded to it): within binary16's model only
    o, _ = numpy_attention(*(x.astype(np.float16) for x in (q, k, v)))
    r16 = smattn.check(o, q, k, v, precision="float16")
    r32 = smattn.check(o, q, k, v, precision="float32")
    assert r16.passed and not r32.passed and r32.max_ratio > 10
    pm = smattn.precision("float32", blocks=8, acc_len=16)
    assert pm.blocks == 8 and pm.u_score == 2.0 ** -24
    assert smattn.check(smattn.reference(q, k, v)[0], q, k, v, precision=pm).passed
    assert smattn.check(smattn.reference(q, k, v)[0], q, k, v, precision={"u_p": 2 ** -8})
    with pytest.raises(ValueError, match="unknown field"):
        smattn.precision("float32", ulps=3)
    # the built-in kernel's model needs the problem: a sentence, not ctypes' TypeError
    with pytest.raises(ValueError, match="depends on the problem"):
        smattn.precision("opt")


# ---- the battery: a NumPy kernel judged case by case ----------------------------------------

def _softmax_of(case):
    """numpy_softmax on a softmax case, the visibility rules from case.visible()."""
    kw = {n: a for n, a in case.kwargs.items() if n not in ("causal", "window", "q_lens",
                                                             "mask")}
    return numpy_softmax(case.x, visible=case.visible(), **kw)


# The layout features (SPEC 2.7): numpy_attention claims none, so it skips those cases; nor
# does it read quantised inputs (SPEC 2.9, the quant category).
_LAYOUTS = {"packed_q", "packed_kv", "paged_nhd", "paged_hnd"}


def _unclaimed(case):
    return bool(_LAYOUTS & set(case.features)) or case.category == "quant"


def test_numpy_kernel_passes_the_battery():
    n, cats = 0, set()
    for case in smattn.cases("quick"):
        if _unclaimed(case):
            continue  # numpy_attention takes no ragged or paged batch, no quantised input
        if case.op == "softmax":
            p, lse = _softmax_of(case)
            r = case.check(p=p, lse=lse)
        else:
            o, lse = numpy_attention(case.q, case.k, case.v, **case.kwargs)
            r = case.check(o, lse=lse)
        assert r.passed, "%s: %s" % (case.name, r.reason)
        n, cats = n + 1, cats | {case.category}
    assert n >= 60 and {"causal", "gqa", "empty_rows", "strides", "decode", "softmax",
                        "regressions", "alibi"} <= cats


def test_cases_carry_their_conventions():
    """Every case names its empty-row conventions; the golden vectors of the other
    conventions are judged by them: a kernel that returns zeros there fails."""
    by_name = {c.name: c for c in smattn.cases("quick", categories=["golden"])}
    for c in by_name.values():
        assert c.kwargs["empty_rows"] in ("zero", "nan", "mean"), c.name
        assert c.kwargs["empty_lse"] in ("neg_inf", "pos_inf", "zero"), c.name
    want = {"golden/empty_mean": "mean", "golden/empty_nan": "nan",
            "golden/sinks_empty_row": None}
    for name, conv in want.items():
        assert name in by_name, sorted(by_name)
        if conv:
            assert by_name[name].kwargs["empty_rows"] == conv, by_name[name].kwargs
    for name in ("golden/empty_mean", "golden/empty_nan"):
        c = by_name[name]
        kw = dict(c.kwargs, empty_rows="zero", empty_lse="neg_inf")
        o, lse = numpy_attention(c.q, c.k, c.v, **kw)
        assert not c.check(o, lse=lse).passed, name + ": zeros passed a non-zero convention"
        o, lse = numpy_attention(c.q, c.k, c.v, **c.kwargs)
        r = c.check(o, lse=lse)
        assert r.passed, "%s: %s" % (name, r.reason)


# Each bug, the cases it shows on, and the sentence the checker must give for it.
BUGGY = [
    ("causal_upper_left", None, "causal alignment: O follows upper_left, but lower_right is "
                                "claimed"),
    ("causal_off_by_one", None, "causal alignment off by one: O follows keys "
                                "j <= i + T_b - S_b + 1"),
    ("empty_nan", "empty_rows", "empty row (no visible key, no sink): O["),
    ("v_unmasked", "garbage", "slots this row must not read hold NaN/inf: did a masked or "
                              "padded position leak in?"),
    ("gqa_interleaved", "gqa", "error/bound ratio"),
    ("no_scale", "shapes", "error/bound ratio"),
]


@pytest.mark.parametrize("bug, category, sentence", BUGGY, ids=[b[0] for b in BUGGY])
def test_buggy_numpy_kernel_fails_with_its_reason(bug, category, sentence):
    failed = []
    for case in smattn.cases("quick", categories=[category] if category else None):
        if case.op != "attention" or _unclaimed(case):
            continue
        o, lse = numpy_attention(case.q, case.k, case.v, bug=bug, **case.kwargs)
        r = case.check(o, lse=lse)
        if not r.passed:
            failed.append((case.name, r.reason))
    assert failed, "the %s bug went unnoticed" % bug
    assert any(sentence in reason for _, reason in failed), failed[:5]


def test_empty_nan_reason_exact():
    q, k, v = qkv(S=4, T=2)  # lower-right, S > T: rows 0 and 1 see no key
    o, lse = numpy_attention(q, k, v, causal="lower_right", bug="empty_nan")
    with pytest.raises(AssertionError, match=r"^empty row \(no visible key, no sink\): "
                                             r"O\[b=0,i=0,h=0,c=0\] expected \+0 \(zero "
                                             r"convention\), got NaN\n"):
        smattn.assert_close(o, q, k, v, causal=True)


def test_cases_arrays_and_options():
    by_name = {c.name: c for c in smattn.cases("quick", layout="bhsd")}
    pad = by_name["strides/row_pitch_pad3"]
    assert pad.q.shape == (2, 2, 3, 8) and not pad.q.flags.c_contiguous  # [B, H, S, D] view
    assert pad.q.strides[1] == 11 * 4  # BSHD rows of pitch D + 3 = 11, seen as BHSD
    assert "strides" in pad.features
    f16 = by_name["dtype/kv_f16"]
    assert f16.k.dtype == np.float16 and f16.q.dtype == np.float32 and f16.kv_dtype == "float16"
    bf = by_name["dtype/kv_bf16"]
    assert bf.kv_dtype == "bfloat16" and not (np.asarray(bf.k).view(np.uint32) & 0xFFFF).any()
    sm = [c for c in by_name.values() if c.category == "softmax"]
    assert sm and all(c.op == "softmax" and c.q is None and c.x.ndim == 4 for c in sm)
    assert all(c.op == "attention" and c.x is None for c in by_name.values()
               if c.category in ("gqa", "causal", "strides"))
    seeds = [[c.q.tobytes() for c in smattn.cases(seed=s, categories=["decode"])] for s in (0, 1)]
    assert seeds[0] != seeds[1]
    with pytest.raises(ValueError, match="unknown suite 'enormous'"):
        next(smattn.cases("enormous"))


def test_kernel_output_through_case_in_bhsd():
    for case in smattn.cases("quick", layout="bhsd", categories=["gqa", "causal"]):
        q, k, v = (np.swapaxes(x, 1, 2) for x in (case.q, case.k, case.v))
        o, lse = numpy_attention(q, k, v, **case.kwargs)
        assert case.check(np.swapaxes(o, 1, 2), lse=lse).passed, case.name


# ---- installation ---------------------------------------------------------------------------

@pytest.mark.skipif(not os.path.exists(os.path.join(ROOT, "Makefile")),
                    reason="not in the source tree")
def test_install_python_finds_recorded_library(tmp_path):
    """make install-python into a prefix; the package finds the library at the path it
    recorded (a copy of the build's library stands in for `make install`'s)."""
    build = os.path.dirname(smattn.LIBRARY_PATH)
    env = {k: v for k, v in os.environ.items()
           if k not in ("SMATTN_LIBRARY", "SMATTN_SHIM", "SMATTN_ROOT", "PYTHONPATH",
                        "MAKEFLAGS", "MFLAGS", "MAKELEVEL")}
    prefix = str(tmp_path / "prefix")
    subprocess.run(["make", "-s", "--no-print-directory", "-C", ROOT, "BUILD=" + build,
                    "PREFIX=" + prefix, "install-python"], check=True, env=env,
                   stdout=subprocess.DEVNULL)
    os.makedirs(os.path.join(prefix, "lib"), exist_ok=True)
    with open(smattn.LIBRARY_PATH, "rb") as src, \
            open(os.path.join(prefix, "lib", "libsmattn.so.0"), "wb") as dst:
        dst.write(src.read())
    site = [os.path.join(prefix, "lib", d, "dist-packages")
            for d in os.listdir(os.path.join(prefix, "lib")) if d.startswith("python3")][0]
    code = ("import numpy as np, smattn\n"
            "q = np.ones((1, 2, 1, 4), np.float32)\n"
            "o, lse = smattn.reference(q, q, q)\n"
            "print(smattn.LIBRARY_PATH, smattn.check(o, q, q, q).passed,"
            " sum(1 for _ in smattn.cases()) > 0)\n")
    out = subprocess.run([sys.executable, "-c", code], env=dict(env, PYTHONPATH=site),
                         cwd=str(tmp_path), check=True, capture_output=True, text=True).stdout
    assert out.split() == [os.path.join(prefix, "lib", "libsmattn.so.0"), "True", "True"]
    subprocess.run(["make", "-s", "--no-print-directory", "-C", ROOT, "BUILD=" + build,
                    "PREFIX=" + prefix, "uninstall-python"], check=True, env=env)
    assert not os.path.exists(os.path.join(site, "smattn"))


def test_missing_library_is_a_clear_import_error(tmp_path):
    env = dict(os.environ, SMATTN_LIBRARY=str(tmp_path / "nope.so"))
    r = subprocess.run([sys.executable, "-c", "import smattn"], env=env, capture_output=True,
                       text=True)
    assert r.returncode == 1
    assert "ImportError: smattn: cannot load libsmattn.so.0; tried: " + str(tmp_path) \
        in r.stderr and "SMATTN_LIBRARY=" in r.stderr


def test_version_and_soname_from_VERSION():
    """__version__ and the soname the package loads come from VERSION alone."""
    from smattn import _version
    with open(os.path.join(ROOT, "VERSION")) as f:
        v = f.read().strip()
    assert smattn.__version__ == v
    assert _version.SONAME == "libsmattn.so." + v.split(".")[0]
    if not os.environ.get("SMATTN_LIBRARY"):
        assert os.path.basename(smattn.LIBRARY_PATH) == _version.SONAME


# ---- the boundary: odd arrays and arguments get an answer or a clear error, never a crash ----

def test_misaligned_big_endian_and_long_double_inputs():
    q, k, v = qkv()
    o, lse = smattn.reference(q, k, v)

    def misaligned(a):  # contiguous, at an odd address
        buf = np.zeros(a.nbytes + 1, np.uint8)[1:]
        m = buf.view(a.dtype).reshape(a.shape)
        m[...] = a
        assert not m.flags.aligned and m.flags.c_contiguous
        return m
    for args in ((misaligned(q), k, v), (q, k, misaligned(v)),
                 (q.astype(">f4"), k.astype(">f4"), v.astype(">f4"))):
        o2, lse2 = smattn.reference(*args)
        assert np.array_equal(o, o2) and np.array_equal(lse, lse2)
        o3, _ = smattn.attention(*args)
        assert smattn.check(misaligned(o3), *args, lse=misaligned(lse)).passed
    assert smattn.check(o.astype(">f4"), q, k, v, lse=lse.astype(">f4")).passed
    ld = [x.astype(np.longdouble) for x in (q, k, v)]
    o64, _ = smattn.reference(*ld, dtype="float64")
    assert np.array_equal(o64, smattn.reference(q.astype(np.float64), k, v, dtype="float64")[0])
    if np.finfo(np.longdouble).nmant > 52:  # x86: 64-bit significands
        ld[0][0, 0, 0, 0] = np.longdouble(1) + np.finfo(np.longdouble).eps
        with pytest.raises(TypeError, match="q: dtype 'float128' holds values that float64 "
                                            "cannot represent exactly"):
            smattn.reference(*ld)


@pytest.mark.parametrize("call, exc, text", [
    (lambda q, k, v: smattn.reference(None, k, v), TypeError, "q: None; want an array"),
    (lambda q, k, v: smattn.check(q, q, None, v), TypeError, "k: None; want an array"),
    (lambda q, k, v: smattn.check(smattn.reference(q, k, v)[0], q, k, v,
                                  precision={"blocks": -3}),
     ValueError, "precision model out of range"),
    (lambda q, k, v: smattn.check(smattn.reference(q, k, v)[0], q, k, v,
                                  precision={"u_score": 1e300}),
     ValueError, "precision model out of range"),
    (lambda q, k, v: smattn.attention(q, k, v, isa="neon"), ValueError,
     "isa 'neon' is unknown: want None (the active one), 'scalar', 'avx2', 'avx512'"),
    (lambda q, k, v: smattn.reference(q, k, v, window=(1.7, 0)), TypeError, "window (1.7, 0)"),
    (lambda q, k, v: smattn.reference(q, k, v, scale="x"), TypeError,
     "scale 'x': want a real number"),
    (lambda q, k, v: smattn.reference(q, k, v, softcap="1"), TypeError,
     "softcap '1': want a real number"),
    (lambda q, k, v: smattn.reference(q[:, :0], k, v), ValueError,
     "q: shape (2, 0, 4, 8) has S = 0: "),
    (lambda q, k, v: smattn.reference(q, k[..., :0], v), ValueError,
     "k: shape (2, 7, 2, 0) has D = 0"),
])
def test_boundary_errors(call, exc, text):
    q, k, v = qkv()
    with pytest.raises(exc) as e:
        call(q, k, v)
    assert text in str(e.value), str(e.value)

