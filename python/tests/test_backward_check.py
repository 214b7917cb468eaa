# SPDX-License-Identifier: MIT
"""test_backward_check.py: the fast backward from Python (smattn.attention_backward), the
judge of given gradients (smattn.check_backward, assert_close_backward: the oracle, the
bound of SPEC 10.7, the ratio of 6.10) and the backward cases of smattn.cases(): a plain
float32 backward written here in NumPy passes, the same with a wrong formula fails, the
fast kernel passes its own model and gives the same bits for any thread count."""
import ctypes
import math

import numpy as np
import pytest

import smattn
from smattn import _backward, _lib


def rand(*shape, seed=0, dtype=np.float32):
    return np.random.default_rng(seed).standard_normal(shape).astype(dtype)


def problem(seed=0):
    """A GQA problem (4 query heads on 2 KV heads), BSHD, float32."""
    q, k, v = rand(2, 5, 4, 8, seed=seed), rand(2, 7, 2, 8, seed=seed + 1), \
        rand(2, 7, 2, 6, seed=seed + 2)
    do = rand(2, 5, 4, 6, seed=seed + 3)
    return q, k, v, do


def numpy_backward(q, k, v, do, *, scale=None, causal=False, bug=None):
    """FlashAttention-2's backward in float32 NumPy (BSHD, lower-right causal): P from the
    forward's LSE, Delta = dO . O, dS = P (dP - Delta). bug: "no_group_sum" (dK, dV of the
    group's first head only), "scale_twice", "masked_keys" (P = exp(s - LSE) without the
    mask: masked keys get gradient)."""
    B, S, Hq, D = q.shape
    T, Hkv = k.shape[1], k.shape[2]
    g = Hq // Hkv
    sc = np.float32(1 / math.sqrt(D) if scale is None else scale)
    dq, dk, dv = np.zeros_like(q), np.zeros_like(k), np.zeros_like(v)
    for b in range(B):
        for h in range(Hq):
            kv = h // g
            s = (q[b, :, h] @ k[b, :, kv].T) * sc
            vis = np.ones((S, T), bool)
            if causal:
                vis = np.arange(T)[None, :] <= np.arange(S)[:, None] + T - S
            sm = np.where(vis, s, -np.inf)
            mx = sm.max(axis=1, keepdims=True)
            lse = mx + np.log(np.exp(sm - mx).sum(axis=1, keepdims=True))
            p = np.exp((s if bug == "masked_keys" else sm) - lse).astype(np.float32)
            o = p @ v[b, :, kv]
            dp = do[b, :, h] @ v[b, :, kv].T
            delta = (do[b, :, h] * o).sum(axis=1, keepdims=True)
            ds = p * (dp - delta)
            if bug == "scale_twice":
                ds = ds * sc
            dq[b, :, h] = (ds @ k[b, :, kv]) * sc
            if bug == "no_group_sum" and h % g:
                continue
            dk[b, :, kv] += (ds.T @ q[b, :, h]) * sc
            dv[b, :, kv] += p.T @ do[b, :, h]
    return dq, dk, dv


def test_numpy_backward_passes_and_wrong_formulas_fail():
    q, k, v, do = problem()
    for causal in (False, True):
        kw = dict(causal="lower_right") if causal else {}
        r = smattn.check_backward(*numpy_backward(q, k, v, do, causal=causal), q, k, v, do,
                                  **kw)
        assert r.passed, str(r)
        assert 0 < r.max_ratio <= 1 and r.elements == q.size + k.size + v.size
        assert r.rows_judged == r.rows_total == 2 * 4 * 5
    for bug, out in (("no_group_sum", "dK"), ("scale_twice", "dQ")):
        r = smattn.check_backward(*numpy_backward(q, k, v, do, bug=bug), q, k, v, do)
        assert not r.passed and r.mismatched > 0 and r.worst.output in ("dQ", "dK", "dV"), bug
        assert "beyond their bound" in r.reason
    # masked keys given gradient: their exact gradient is +0 with bound 0
    r = smattn.check_backward(*numpy_backward(q, k, v, do, causal=True, bug="masked_keys"),
                              q, k, v, do, causal="lower_right")
    assert not r.passed


def test_oracle_rounded_to_float32_passes_and_a_moved_element_fails():
    q, k, v, do = problem(seed=10)
    bias = rand(1, 4, 5, 7, seed=14) * 0.5
    sinks = rand(4, seed=15)
    dlse = rand(2, 4, 5, seed=16)
    kw = dict(causal="upper_left", bias=bias, sinks=sinks, softcap=4.0)
    g = smattn.reference_backward(q, k, v, do, dlse=dlse, dtype="float32", **kw)
    r = smattn.check_backward(g.dq, g.dk, g.dv, q, k, v, do, dlse=dlse, **kw)
    assert r.passed and r.max_ratio <= 1, str(r)
    # the exact values rounded to float32: at most half an ulp each
    assert r.max_ulp <= 0.5
    dk = g.dk.copy()
    dk[1, 3, 0, 2] += np.float32(1e-2) * max(1.0, abs(float(dk[1, 3, 0, 2])))
    r = smattn.check_backward(g.dq, dk, g.dv, q, k, v, do, dlse=dlse, **kw)
    assert not r.passed and r.mismatched == 1
    assert r.worst.output == "dK" and r.worst.index == (1, 3, 0, 2)
    with pytest.raises(AssertionError, match=r"mine: smattn.check_backward: fail: dK\[1, 3, 0, 2\]"):
        smattn.assert_close_backward(g.dq, dk, g.dv, q, k, v, do, dlse=dlse, msg="mine", **kw)
    assert smattn.assert_close_backward(g.dq, g.dk, g.dv, q, k, v, do, dlse=dlse, **kw).passed


def test_check_backward_layouts_and_3d():
    q, k, v, do = problem(seed=20)
    g = smattn.reference_backward(q, k, v, do, dtype="float32")
    t = lambda a: np.ascontiguousarray(np.swapaxes(a, 1, 2))  # noqa: E731
    r = smattn.check_backward(t(g.dq), t(g.dk), t(g.dv), t(q), t(k), t(v), t(do),
                              layout="bhsd")
    assert r.passed, str(r)
    dk = t(g.dk)
    dk[0, 1, 4, 3] *= 2  # [B, Hkv, T, D]: key 4 of KV head 1
    r = smattn.check_backward(t(g.dq), dk, t(g.dv), t(q), t(k), t(v), t(do), layout="bhsd")
    assert not r.passed and r.worst.output == "dK" and r.worst.index == (0, 1, 4, 3)
    r = smattn.check_backward(g.dq[0], g.dk[0], g.dv[0], q[0], k[0], v[0], do[0])
    assert r.passed and r.rows_total == 4 * 5
    with pytest.raises(ValueError, match="dk: shape"):
        smattn.check_backward(g.dq, g.dv, g.dv, q, k, v, do)
    with pytest.raises(ValueError, match="precision 'float8'"):
        smattn.check_backward(g.dq, g.dk, g.dv, q, k, v, do, precision="float8")


def test_dbias_is_judged():
    q, k, v, do = problem(seed=30)
    bias = rand(2, 4, 5, 7, seed=31)
    g = smattn.reference_backward(q, k, v, do, bias=bias, dtype="float32")
    r = smattn.check_backward(g.dq, g.dk, g.dv, q, k, v, do, bias=bias, dbias=g.dbias)
    assert r.passed and r.elements == q.size + k.size + v.size + bias.size, str(r)
    db = g.dbias.copy()
    db[1, 2, 3, 4] = -db[1, 2, 3, 4] + 1
    r = smattn.check_backward(g.dq, g.dk, g.dv, q, k, v, do, bias=bias, dbias=db)
    assert not r.passed and r.worst.output == "dBias" and r.worst.index == (1, 2, 3, 4)


def test_ratio_is_the_librarys():
    """_backward._ratio (NumPy) against smattn_error_ratio (SPEC 6.10) on every pairing of
    special values."""
    f = _lib.lib.smattn_error_ratio
    f.restype, f.argtypes = ctypes.c_double, [ctypes.c_double] * 3
    vals = [0.0, -0.0, 1.0, -1.0, 1.5, math.inf, -math.inf, math.nan, 1e-300]
    bounds = [0.0, 0.25, 1.0, math.inf]
    c, e, bd = (np.array(x) for x in zip(*[(a, b, B) for a in vals for b in vals
                                            for B in bounds]))
    want = np.array([f(a, b, B) for a, b, B in zip(c, e, bd)])
    got = _backward._ratio(c, e, bd)
    assert np.array_equal(got, want, equal_nan=True), [
        (a, b, B, x, y) for a, b, B, x, y in zip(c, e, bd, got, want) if not (x == y)]


def test_attention_backward_within_its_model_and_deterministic():
    q, k, v, do = problem(seed=40)
    bias, sinks, dlse = rand(1, 4, 5, 7, seed=41), rand(4, seed=42), rand(2, 4, 5, seed=43)
    kw = dict(causal="lower_right", bias=bias, sinks=sinks, softcap=5.0)
    g = smattn.attention_backward(q, k, v, do, dlse=dlse, **kw)
    assert g.dq.dtype == np.float32 and g.dk.shape == k.shape
    assert g.dbias.shape == bias.shape and g.dbias.dtype == np.float32  # summed over B
    assert g.dsinks.shape == (4,) and g.dsinks.dtype == np.float32
    r = smattn.check_backward(g.dq, g.dk, g.dv, q, k, v, do, dlse=dlse, dbias=g.dbias,
                              dsinks=g.dsinks, precision="opt", **kw)
    assert r.passed, str(r)
    # dBias off by one part in a thousand of its largest element: beyond its bound
    bad = g.dbias.copy()
    bad.flat[np.argmax(np.abs(bad))] *= 1.001
    r = smattn.check_backward(g.dq, g.dk, g.dv, q, k, v, do, dlse=dlse, dbias=bad,
                              dsinks=g.dsinks, precision="opt", **kw)
    assert not r.passed and "dBias" in str(r), str(r)
    assert smattn.attention_backward(q, k, v, do, dlse=dlse, dbias=False, **kw).dbias is None
    # dSinks off by one part in a thousand of its largest element: beyond its bound
    bad = g.dsinks.copy()
    bad[np.argmax(np.abs(bad))] *= 1.001
    r = smattn.check_backward(g.dq, g.dk, g.dv, q, k, v, do, dlse=dlse, dsinks=bad,
                              precision="opt", **kw)
    assert not r.passed and "dSinks" in str(r), str(r)
    for threads in (1, 3):
        h = smattn.attention_backward(q, k, v, do, dlse=dlse, threads=threads, **kw)
        assert all(np.array_equal(a, b) for a, b in zip(g[:3] + (g.dbias, g.dsinks),
                                                         h[:3] + (h.dbias, h.dsinks)))
    assert smattn.attention_backward(q, k, v, do, dlse=dlse, dsinks=False, **kw).dsinks is None
    # the saved O and LSE of attention(): the same bits as the forward run inside
    o, lse = smattn.attention(q, k, v, **kw)
    h = smattn.attention_backward(q, k, v, do, dlse=dlse, o=o, lse=lse, **kw)
    assert all(np.array_equal(a, b) for a, b in zip(g[:3], h[:3]))
    # bhsd and 3-D inputs: the same bits
    t = lambda a: np.ascontiguousarray(np.swapaxes(a, 1, 2))  # noqa: E731
    h = smattn.attention_backward(t(q), t(k), t(v), t(do), dlse=dlse, layout="bhsd", **kw)
    assert np.array_equal(t(h.dq), g.dq) and np.array_equal(t(h.dk), g.dk)
    h = smattn.attention_backward(q[0], k[0], v[0], do[0], causal="lower_right")
    assert h.dq.shape == q[0].shape
    # bf16 gradients as uint16 bit patterns, judged in their own dtype
    h = smattn.attention_backward(q, k, v, do, dtype="bfloat16", **kw)
    assert h.dq.dtype == np.uint16
    r = smattn.check_backward(h.dq, h.dk, h.dv, q, k, v, do, precision="opt", **kw)
    assert r.passed, str(r)


def test_attention_backward_errors():
    q, k, v, do = problem(seed=50)
    with pytest.raises(TypeError, match="float64"):
        smattn.attention_backward(q.astype(np.float64), k, v, do)
    with pytest.raises(ValueError, match="o and lse are saved together"):
        smattn.attention_backward(q, k, v, do, o=do)
    with pytest.raises(ValueError, match="o: shape"):
        smattn.attention_backward(q, k, v, do, o=q, lse=rand(2, 4, 5))
    with pytest.raises(ValueError, match="isa 'sse9'"):
        smattn.attention_backward(q, k, v, do, isa="sse9")
    with pytest.raises(ValueError, match="want O's packed shape"):
        smattn.attention_backward(q[0], k[0], v[0], do[0][:, :, :2], cu_seqlens_q=[0, 5])


def test_backward_cases():
    cs = list(smattn.cases("quick", backward=True))
    assert len(cs) > 50
    fwd = list(smattn.cases("quick"))
    assert len(cs) < len(fwd)  # softmax, quantised and shared-page cases have no backward
    judged = packed = alibi = with_db = 0
    for i, c in enumerate(cs):
        assert c.op == "backward" and "backward" in c.features
        B, S, Hq, Dv = (c.shape[x] for x in ("B", "S", "Hq", "Dv"))
        if c.kwargs.get("cu_seqlens_q") is not None:  # O's and LSE's packed shapes
            packed += 1
            tq = c.q.shape[0]
            assert c.do.shape == (tq, Hq, Dv)
            assert c.dlse is None or c.dlse.shape == (Hq, tq)
        else:
            assert c.do.shape == ((B, S, Hq, Dv) if c.layout == "bshd" else (B, Hq, S, Dv))
            assert c.dlse is None or c.dlse.shape == (B, Hq, S)
        alibi += c.kwargs.get("alibi_mode") is not None
        with pytest.raises(TypeError, match="backward case"):
            c.check(None)
        # the fast kernel takes finite inputs; a third of the cases, and those with a bias
        if c.garbage or (i % 3 and c.kwargs.get("bias") is None):
            continue
        try:
            g = smattn.attention_backward(c.q, c.k, c.v, c.do, dlse=c.dlse, layout=c.layout,
                                          **c.kwargs)
        except TypeError:  # outside the fast kernel's dtypes or values
            continue
        r = c.check_backward(g.dq, g.dk, g.dv, dbias=g.dbias, dsinks=g.dsinks, precision="opt")
        with_db += g.dbias is not None
        # what the fast kernel computes is within its model; scores beyond binary32 (whose
        # NaN gradients the class rule of SPEC 10.7 fails) it refuses, above
        assert r.passed, "%s: %s" % (c.name, r)
        judged += r.passed
    assert judged > 10 and packed > 5 and alibi > 5 and with_db > 3, (judged, packed, alibi,
                                                                     with_db)
    assert any(c.dlse is not None for c in cs) and any(c.dlse is None for c in cs)
    with pytest.raises(TypeError, match="not a backward case"):
        fwd[0].check_backward(None, None, None)


def test_broadcast_bias_gradient_in_its_own_shape():
    """dbias of a broadcast bias: the exact sum over the dimensions it is broadcast along
    (SPEC 10.1), in the bias's own shape; against the full-shape gradient summed."""
    q, k, v, do = (x.astype(np.float64) for x in problem(seed=60))
    full = (2, 4, 5, 7)
    for shape in ((5, 7), (4, 1, 7), (2, 1, 1, 1), (1, 4, 5, 1), (7,)):
        bias = rand(*shape, seed=61).astype(np.float64)
        g = smattn.reference_backward(q, k, v, do, bias=bias, causal="lower_right",
                                      dtype="float64")
        assert g.dbias.shape == shape
        f = smattn.reference_backward(q, k, v, do, bias=np.broadcast_to(bias, full).copy(),
                                      causal="lower_right", dtype="float64")
        pad = (1,) * (4 - len(shape)) + shape
        axes = tuple(a for a in range(4) if pad[a] == 1 and full[a] > 1)
        want = f.dbias.sum(axis=axes, keepdims=True).reshape(shape)
        tol = 64 * np.finfo(np.float64).eps * np.abs(f.dbias).sum(axis=axes, keepdims=True)
        assert np.all(np.abs(g.dbias - want) <= tol.reshape(shape) + 1e-300), shape
    # over the keys, without dLSE or sinks, a row's sum is exactly +0 (SPEC 10.1)
    g = smattn.reference_backward(q, k, v, do, bias=rand(2, 4, 5, 1, seed=62),
                                  dtype="float64")
    assert g.dbias.shape == (2, 4, 5, 1) and np.all(g.dbias == 0)
    assert not np.any(np.signbit(g.dbias))
    # float32 inputs and outputs, judged by check_backward in the bias's shape
    q, k, v, do = problem(seed=63)
    bias = rand(5, 7, seed=64)
    g = smattn.reference_backward(q, k, v, do, bias=bias, dtype="float32")
    r = smattn.check_backward(g.dq, g.dk, g.dv, q, k, v, do, bias=bias, dbias=g.dbias)
    assert r.passed and r.elements == q.size + k.size + v.size + 5 * 7, str(r)
    db = g.dbias.copy()
    db[3, 2] += np.float32(0.01) * max(1.0, abs(float(db[3, 2])))
    r = smattn.check_backward(g.dq, g.dk, g.dv, q, k, v, do, bias=bias, dbias=db)
    assert not r.passed and r.worst.output == "dBias" and r.worst.index == (3, 2)
    with pytest.raises(ValueError, match=r"dbias: shape \(2, 4, 5, 7\), want \[5, 7\]"):
        smattn.check_backward(g.dq, g.dk, g.dv, q, k, v, do, bias=bias,
                              dbias=np.zeros((2, 4, 5, 7), np.float32))


def packed_problem(seed=80):
    """Two sequences packed (cu_seqlens_q = cu_seqlens_k = [0, 3, 5]): q, k, v, do
    [5, 2, 8], B = 2, S = T = 3."""
    q, k, v, do = (rand(5, 2, 8, seed=seed + i) for i in range(4))
    return q, k, v, do, dict(cu_seqlens_q=[0, 3, 5], cu_seqlens_k=[0, 3, 5])


def test_dbias_of_packed_q_keeps_the_batch_axis():
    """dbias=True without a bias on packed q (B = 2 sequences): [B, Hq, S, T], P's shape,
    from the oracle and the fast backward, and check_backward judges it in that shape."""
    q, k, v, do, kw = packed_problem()
    g = smattn.reference_backward(q, k, v, do, dbias=True, **kw)
    assert g.dbias.shape == (2, 2, 3, 3)
    h = smattn.attention_backward(q, k, v, do, dbias=True, **kw)
    assert h.dbias.shape == (2, 2, 3, 3)
    r = smattn.check_backward(h.dq, h.dk, h.dv, q, k, v, do, dbias=h.dbias, precision="opt",
                              **kw)
    assert r.passed and r.elements == 3 * q.size + 2 * 2 * 3 * 3, str(r)
    bad = g.dbias.copy()
    bad[1, 0, 1, 0] += 0.01
    r = smattn.check_backward(g.dq, g.dk, g.dv, q, k, v, do, dbias=bad, **kw)
    assert not r.passed and r.worst.output == "dBias" and r.worst.index == (1, 0, 1, 0)


def test_attention_backward_takes_the_packed_forward_outputs():
    """o= and lse= of packed q are what attention() returns for it, O [total_q, Hq, Dv] and
    LSE [Hq, total_q]: the same bits as the forward run inside."""
    q, k, v, do, kw = packed_problem(seed=90)
    o, lse = smattn.attention(q, k, v, **kw)
    assert o.shape == (5, 2, 8) and lse.shape == (2, 5)
    g = smattn.attention_backward(q, k, v, do, **kw)
    h = smattn.attention_backward(q, k, v, do, o=o, lse=lse, **kw)
    assert all(np.array_equal(a, b) for a, b in zip(g[:3], h[:3]))
    with pytest.raises(ValueError, match=r"lse: shape \(5, 2\), want LSE's packed shape"):
        smattn.attention_backward(q, k, v, do, o=o, lse=lse.T, **kw)


def test_bfloat16_attn_mask_is_a_bias_with_its_own_dbias():
    """attn_mask in bfloat16 bits (uint16) is an additive bias, as the forward reads it: its
    dbias has the bias's own shape, as with bias=, and check_backward judges that shape."""
    q, k, v, do = problem(seed=100)
    bits = (rand(1, 4, 1, 7, seed=101).view(np.uint32) >> 16).astype(np.uint16)
    want = smattn.reference_backward(q, k, v, do, bias=bits)
    g = smattn.reference_backward(q, k, v, do, attn_mask=bits)
    assert g.dbias.shape == bits.shape
    assert all(np.array_equal(a, b) for a, b in zip(g[:4], want[:4]))
    h = smattn.attention_backward(q, k, v, do, attn_mask=bits)
    assert h.dbias.shape == bits.shape
    r = smattn.check_backward(g.dq, g.dk, g.dv, q, k, v, do, attn_mask=bits, dbias=g.dbias)
    assert r.passed, str(r)


def test_dsinks_are_judged():
    q, k, v, do = problem(seed=70)
    sinks, dlse = rand(4, seed=71), rand(2, 4, 5, seed=72)
    g = smattn.reference_backward(q, k, v, do, sinks=sinks, dlse=dlse, dtype="float32")
    r = smattn.check_backward(g.dq, g.dk, g.dv, q, k, v, do, sinks=sinks, dlse=dlse,
                              dsinks=g.dsinks)
    assert r.passed and r.elements == q.size + k.size + v.size + 4, str(r)
    ds = g.dsinks.copy()
    ds[2] += np.float32(0.01)  # the sum cancels: its bound is ~1e-5 absolute
    r = smattn.check_backward(g.dq, g.dk, g.dv, q, k, v, do, sinks=sinks, dlse=dlse, dsinks=ds)
    assert not r.passed and r.worst.output == "dSinks" and r.worst.index == (2,)


def test_fast_backward_refuses_scores_beyond_binary32():
    """golden/score_beyond_f32 (finite inputs, scores about 1e40): the forward's binary32
    LSE overflows, and exp(s - LSE) would make every gradient NaN where the exact one is
    finite; the fast backward refuses it (the oracle's, smattn.h) instead."""
    c = next(c for c in smattn.cases(backward=True) if c.name == "golden/score_beyond_f32")
    assert not c.garbage
    with pytest.raises(TypeError, match="binary32's range"):
        smattn.attention_backward(c.q, c.k, c.v, c.do, dlse=c.dlse, layout=c.layout, **c.kwargs)
    g = smattn.reference_backward(c.q, c.k, c.v, c.do, dlse=c.dlse, layout=c.layout,
                                  **c.kwargs)
    assert c.check_backward(g.dq, g.dk, g.dv).passed
