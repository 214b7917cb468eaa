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


def test_attention_takes_fp8():
    """The fast kernel reads fp8 Q, K and V (it refused them before it had the loads):
    within the bound of its own model against the exact oracle."""
    q, k, v, kd = case()
    o, lse = smattn.attention(q, k, v, fp8_e4m3=("q", "k", "v"))
    r = smattn.check(o, q, k, v, lse=lse, precision="opt", fp8_e4m3=("q", "k", "v"))
    assert r.passed, r
