# SPDX-License-Identifier: MIT
"""test_quant.py: fp8 inputs (uint8 bit patterns) and descales (SPEC 2.9) through the Python
API: the oracle on them equals the oracle on float64 arrays holding the real values, bit for
bit, also when the call is cut into chunks; bad descales are ValueErrors naming them."""
import numpy as np
import pytest

import smattn
from smattn import _api


def e4m3(b):
    """e4m3fn decoded by hand (SPEC 2.9), independently of the library."""
    b = np.asarray(b, dtype=np.int64)
    s = np.where(b & 0x80, -1.0, 1.0)
    e, m = (b >> 3) & 15, b & 7
    v = np.where(e == 0, m * 2.0 ** -9, (8 + m) * np.exp2(e - 10.0))
    return np.where((e == 15) & (m == 7), np.nan, s * v)


def e5m2(b):
    return (np.asarray(b, dtype=np.uint16) << 8).view(np.float16).astype(np.float64)


def case(B=2, S=3, T=9, Hq=4, Hkv=2, D=8, Dv=5, seed=1):
    r = np.random.default_rng(seed)
    q = r.integers(0, 0x77, (B, S, Hq, D), dtype=np.uint8)  # e4m3, no NaN
    k = r.integers(0, 0x7b, (B, T, Hkv, D), dtype=np.uint8)  # e5m2, finite
    v = r.integers(0, 0x77, (B, T, Hkv, Dv), dtype=np.uint8)
    v |= r.integers(0, 2, (B, T, Hkv, Dv), dtype=np.uint8) << 7  # signs
    kd = np.float32(r.uniform(0.25, 2, (B, Hkv))).astype(np.float64)
    return q, k, v, kd


def test_fp8_with_descales_is_its_float64_twin():
    q, k, v, kd = case()
    kw = dict(fp8_e4m3=("q", "v"), fp8_e5m2="k", q_descale=0.5, k_descale=kd, v_descale=0.25,
              causal=True)
    got = smattn.reference(q, k, v, weights=True, dtype="float64", **kw)
    Q = e4m3(q) * 0.5
    K = e5m2(k) * kd[:, None, :, None]
    V = e4m3(v) * 0.25
    want = smattn.reference(Q, K, V, weights=True, causal=True)
    for g, w in zip(got, want):
        assert np.array_equal(g, w, equal_nan=True)
    # the descales matter: dropping k's changes the LSE
    other = smattn.reference(q, k, v, dtype="float64", **dict(kw, k_descale=None))
    assert not np.array_equal(other[1], got[1])


@pytest.mark.parametrize("units", [1, 3 * 9 * 13, 1 << 40])
def test_chunks_carry_per_head_descales(monkeypatch, units):
    """Cut into single heads, KV groups or whole batches, the per-(batch, KV head) descales
    follow each chunk: the bits of one call."""
    q, k, v, kd = case()
    qd = np.float32(np.linspace(0.5, 2, 4)).astype(np.float64).reshape(2, 2)
    kw = dict(fp8_e4m3=("q", "v"), fp8_e5m2=("k",), q_descale=qd, k_descale=kd, v_descale=kd)
    want = smattn.reference(q, k, v, **kw)
    monkeypatch.setattr(_api, "_REF_CHUNK_UNITS", units)
    got = smattn.reference(q, k, v, threads=1, progress=False, **kw)
    for g, w in zip(got, want):
        assert np.array_equal(g, w, equal_nan=True)


def test_e4m3_nan_makes_the_row_nan():
    q, k, v, kd = case()
    k = k.copy()
    k[0, 0, 0, 0] = 0x7F  # a NaN in e4m3 (an ordinary 57344-ish number nowhere)
    o, lse = smattn.reference(q, k, v, fp8_e4m3=("q", "k", "v"))
    assert np.isnan(o[0, :, 0]).all() and np.isnan(lse[0, 0]).all()
    assert not np.isnan(o[1]).any()


@pytest.mark.parametrize("bad,msg", [(0.0, "k_descale = 0 "), (-1.0, "k_descale = -1 "),
                                     (float("nan"), "k_descale = nan "),
                                     (0.1, "k_descale = 0.1 ")])
def test_bad_descales_name_themselves(bad, msg):
    q, k, v, kd = case()
    with pytest.raises(ValueError, match=msg):
        smattn.reference(q, k, v, fp8_e4m3=("q", "k", "v"), k_descale=bad)
    kd = kd.copy()
    kd[1, 0] = bad
    with pytest.raises(ValueError, match=r"k_descale\[1\]\[0\]"):
        smattn.reference(q, k, v, fp8_e4m3=("q", "k", "v"), k_descale=kd)


def test_bad_names_and_shapes():
    q, k, v, kd = case()
    with pytest.raises(TypeError, match="uint8"):
        smattn.reference(q, k, v)
    with pytest.raises(ValueError, match="both fp8_e4m3 and fp8_e5m2"):
        smattn.reference(q, k, v, fp8_e4m3="qkv"[0:1], fp8_e5m2=("q", "k", "v"))
    with pytest.raises(ValueError, match=r"shape \(3,\)"):
        smattn.reference(q, k, v, fp8_e4m3=("q", "k", "v"), v_descale=[1.0, 2.0, 3.0])
    # the kernel reads fp8 (SPEC 6.11); descales it may still decline, with a clear error
    o, lse = smattn.attention(q, k, v, fp8_e4m3=("q", "k", "v"))
    assert smattn.check(o, q, k, v, lse=lse, precision="opt", fp8_e4m3=("q", "k", "v"))
    _kernel_within_bound("descales", q, k, v, fp8_e4m3=("q", "k", "v"), k_descale=0.5)


# ---- q8_0 and q4_0 blocks (SPEC 2.9) ------------------------------------------------------

def f16_bits(x):
    return np.float16(x).view(np.uint16)


def q8_0_blocks(r, rows, nb):
    """rows x nb blocks of q8_0 as bytes [rows, nb * 34], and their values decoded by hand
    (d * q_j) as float64 [rows, nb * 32]."""
    raw = np.zeros((rows, nb, 34), dtype=np.uint8)
    vals = np.zeros((rows, nb, 32))
    for i in range(rows):
        for b in range(nb):
            d = np.float16(r.uniform(0.5, 2) * 2.0 ** r.integers(-9, -2))
            qs = r.integers(-128, 128, 32).astype(np.int8)
            raw[i, b, 0:2] = np.frombuffer(np.array([f16_bits(d)], dtype="<u2").tobytes(),
                                           dtype=np.uint8)
            raw[i, b, 2:] = qs.view(np.uint8)
            vals[i, b] = float(d) * qs.astype(np.float64)
    return raw.reshape(rows, nb * 34), vals.reshape(rows, nb * 32)


def q4_0_blocks(r, rows, nb):
    """The same for q4_0: element j < 16 the low nibble of byte j, j + 16 its high nibble,
    the value d * (n - 8)."""
    raw = np.zeros((rows, nb, 18), dtype=np.uint8)
    vals = np.zeros((rows, nb, 32))
    for i in range(rows):
        for b in range(nb):
            d = np.float16(r.uniform(0.5, 2) * 2.0 ** r.integers(-9, -2))
            n = r.integers(0, 16, 32)
            raw[i, b, 0:2] = np.frombuffer(np.array([f16_bits(d)], dtype="<u2").tobytes(),
                                           dtype=np.uint8)
            raw[i, b, 2:] = (n[:16] | (n[16:] << 4)).astype(np.uint8)
            vals[i, b] = float(d) * (n - 8.0)
    return raw.reshape(rows, nb * 18), vals.reshape(rows, nb * 32)


def block_case(B=2, S=3, T=11, Hq=4, Hkv=2, D=64, Dv=32, seed=5):
    r = np.random.default_rng(seed)
    q = r.standard_normal((B, S, Hq, D)).astype(np.float32)
    kb, kv = q8_0_blocks(r, B * T * Hkv, D // 32)
    vb, vv = q4_0_blocks(r, B * T * Hkv, Dv // 32)
    return (q, kb.reshape(B, T, Hkv, -1), vb.reshape(B, T, Hkv, -1),
            kv.reshape(B, T, Hkv, D), vv.reshape(B, T, Hkv, Dv))


@pytest.mark.parametrize("layout", ["bshd", "bhsd"])
def test_blocks_with_descales_are_their_float64_twin(layout):
    """q8_0 K and q4_0 V (raw blocks, the last axis in bytes, as smattn gen writes them) with
    per-head descales: the oracle's bits are those of float64 arrays of the real values."""
    q, kb, vb, K, V = block_case()
    kd = np.float32([[0.75, 1.5], [2.0, 0.375]]).astype(np.float64)
    kw = dict(q8_0="k", q4_0=("v",), k_descale=kd, v_descale=0.5, causal=True)
    if layout == "bhsd":
        q, kb, vb = (np.swapaxes(a, 1, 2) for a in (q, kb, vb))
    got = smattn.reference(q, kb, vb, weights=True, dtype="float64", layout=layout, **kw)
    Kr, Vr = K * kd[:, None, :, None], V * 0.5
    if layout == "bhsd":
        Kr, Vr = np.swapaxes(Kr, 1, 2), np.swapaxes(Vr, 1, 2)
    want = smattn.reference(q.astype(np.float64), Kr, Vr, weights=True, causal=True,
                            layout=layout)
    for g, w in zip(got, want):
        assert np.array_equal(g, w, equal_nan=True)
    rep = smattn.check(got[0].astype(np.float32), q, kb, vb, lse=got[1], layout=layout, **kw)
    assert rep, rep
    # the nibble order matters: the same bytes read with the halves swapped are another V
    swapped = ((vb & 0x0F) << 4) | (vb >> 4)
    swapped[..., 0:2] = vb[..., 0:2]
    other = smattn.reference(q, kb, swapped, layout=layout, **kw)
    assert not np.array_equal(other[0], smattn.reference(q, kb, vb, layout=layout, **kw)[0])


def test_block_arguments_name_themselves():
    q, kb, vb, K, V = block_case()
    with pytest.raises(ValueError, match="'q' is not one of 'k', 'v'"):
        smattn.reference(q, kb, vb, q8_0=("q", "k"), q4_0="v")
    with pytest.raises(ValueError, match="both q8_0 and q4_0"):
        smattn.reference(q, kb, vb, q8_0="k", q4_0=("k", "v"))
    with pytest.raises(ValueError, match="whole number of 34-byte q8_0 blocks"):
        smattn.reference(q, kb[..., :-1], vb, q8_0="k", q4_0="v")
    with pytest.raises(TypeError, match="want uint8 raw blocks"):
        smattn.reference(q, kb.astype(np.int16), vb, q8_0="k", q4_0="v")
    with pytest.raises(TypeError, match="v: dtype 'uint8' holds raw bits"):  # not named
        smattn.reference(q, kb, vb, q8_0="k")


def _kernel_within_bound(what, q, k, v, **kw):
    """smattn.attention on quantised inputs (the kernel reads fp8, q8_0, q4_0 and descales):
    within its bound against the exact oracle (check precision "opt")."""
    o, lse = smattn.attention(q, k, v, **kw)
    rep = smattn.check(o, q, k, v, lse=lse, precision="opt", **kw)
    assert rep, (what, rep)


def test_attention_passes_blocks_to_the_kernel():
    q, kb, vb, K, V = block_case()
    _kernel_within_bound("blocks", q, kb, vb, q8_0="k", q4_0="v")


def test_quant_cases_come_quantised():
    """cases() yields the quant category as `smattn conform` hands it to a kernel: Q, K and V
    as uint8 bytes named in the case's kwargs, with its descales; the oracle's outputs pass
    the case's check, and those computed without the V descale fail it."""
    seen = set()
    for c in smattn.cases("quick", categories=["quant"]):
        kw = c.kwargs
        names = {key: kw[key] for key in ("fp8_e4m3", "fp8_e5m2", "q8_0", "q4_0") if key in kw}
        assert names, c.name
        for key, arrays in names.items():
            seen.add(key)
            for n in arrays:
                assert {"q": c.q, "k": c.k, "v": c.v}[n].dtype == np.uint8, (c.name, n)
        o, lse = smattn.reference(c.q, c.k, c.v, **kw)
        assert c.check(o, lse=lse), c.name
        if "v_descale" in kw:
            seen.add("v_descale")
            wrong = dict(kw)
            del wrong["v_descale"]
            o2, lse2 = smattn.reference(c.q, c.k, c.v, **wrong)
            assert not c.check(o2, lse=lse2), c.name
    assert seen == {"fp8_e4m3", "fp8_e5m2", "q8_0", "q4_0", "v_descale"}, seen
