# SPDX-License-Identifier: MIT
"""test_backward.py: smattn.reference_backward (SPEC 10) from NumPy: the gradients are the
derivatives of smattn.reference's loss (central differences of the exact forward in
float64), both layouts and 3-D inputs give the same bits, GQA sums the group, masked keys
get +0, dbias and dsinks come with a bias and sinks, and bad arguments name themselves."""
import numpy as np
import pytest

import smattn


def rand(*shape, seed=0, dtype=np.float64):
    return np.random.default_rng(seed).standard_normal(shape).astype(dtype)


def loss(q, k, v, do, dlse=None, **kw):
    """The loss whose gradients SPEC 10.1 defines, and a bound on its rounding error: O and
    LSE are correctly rounded (eps/2 relative each) and the sum of n products in float64
    adds at most gamma_n (ASNA 3.1) of the sum of magnitudes."""
    o, lse = smattn.reference(q, k, v, dtype="float64", **kw)
    terms = [(o * do).ravel()] + ([(lse * dlse).ravel()] if dlse is not None else [])
    t = np.concatenate(terms)
    eps = np.finfo(np.float64).eps
    err = (eps / 2 + (len(t) + 1) * eps) * float(np.sum(np.abs(t)))
    return float(np.sum(t)), err


def central(f, x, h):
    """Central differences of f at every element of x (changed in place, then restored),
    with step h and 2h, and a bound on each one's error: the truncation error of the step-h
    difference is c h^2 + O(h^4), that of 2h four times it, so their difference estimates
    3 c h^2 (taken twice over, for the O(h^4) terms); the rounding of the two losses adds
    (err_+ + err_-) / 2h."""
    g, tol = np.empty_like(x), np.empty_like(x)
    for ix in np.ndindex(x.shape):
        x0, d, e = x[ix], [], 0.0
        for step in (h, 2 * h):
            x[ix] = x0 + step
            fp, ep = f()
            x[ix] = x0 - step
            fm, em = f()
            d.append((fp - fm) / (2 * step))
            e = max(e, (ep + em) / (2 * step))
        x[ix] = x0
        g[ix] = d[0]
        tol[ix] = 2 * abs(d[1] - d[0]) / 3 + 2 * e
    return g, tol


def test_gradients_are_derivatives_of_the_forward():
    # The oracle's gradients against central differences of its own exact forward: a
    # second, independent route to the derivative (the C suite compares with an MPFR
    # forward written from the definitions). Tolerances are derived per element (central).
    q, k, v = rand(1, 3, 2, 4, seed=1), rand(1, 5, 1, 4, seed=2), rand(1, 5, 1, 3, seed=3)
    bias, sinks = rand(1, 2, 3, 5, seed=4) * 0.5, rand(2, seed=5)
    do, dlse = rand(1, 3, 2, 3, seed=6), rand(1, 2, 3, seed=7)
    kw = dict(causal="lower_right", bias=bias, sinks=sinks, softcap=3.0)
    g = smattn.reference_backward(q, k, v, do, dlse=dlse, dtype="float64", **kw)
    assert g.dq.shape == q.shape and g.dk.shape == k.shape and g.dv.shape == v.shape
    assert g.dbias.shape == (1, 2, 3, 5) and g.dsinks.shape == (2,)
    worst = 0.0
    for x, got in ((q, g.dq), (k, g.dk), (v, g.dv), (bias, g.dbias), (sinks, g.dsinks)):
        want, tol = central(lambda: loss(q, k, v, do, dlse, **kw), x, 2.0 ** -14)
        assert np.all(tol < 1e-6)  # tight enough that a wrong formula cannot pass
        assert np.all(np.abs(got - want) <= tol), np.max(np.abs(got - want) - tol)
        worst = max(worst, float(np.max(np.abs(got))))
    assert worst > 1e-2  # the gradients are not all tiny: the comparison means something


def test_layouts_ranks_and_dtypes_agree():
    q, k, v = rand(2, 4, 4, 3, seed=8), rand(2, 6, 2, 3, seed=9), rand(2, 6, 2, 5, seed=10)
    do = rand(2, 4, 4, 5, seed=11)
    g = smattn.reference_backward(q, k, v, do, causal=True, dtype="float32")
    assert g.dq.dtype == np.float32 and g.dbias is None and g.dsinks is None
    t = lambda a: np.ascontiguousarray(a.transpose(0, 2, 1, 3))  # noqa: E731
    h = smattn.reference_backward(t(q), t(k), t(v), t(do), causal=True, dtype="float32",
                                  layout="bhsd")
    for a, b in ((g.dq, h.dq), (g.dk, h.dk), (g.dv, h.dv)):
        assert np.array_equal(t(b), a)
    one = smattn.reference_backward(q[1], k[1], v[1], do[1], causal=True, dtype="float32")
    assert one.dq.shape == q.shape[1:] and np.array_equal(one.dk, g.dk[1])
    # bfloat16 as bit patterns, the float32 result's bits rounded once more (both are the
    # exact value rounded: rounding the float32 to bfloat16 differs only at a double rounding)
    bf = smattn.reference_backward(q, k, v, do, causal=True, dtype="bfloat16")
    assert bf.dq.dtype == np.uint16
    back = (bf.dq.astype(np.uint32) << 16).view(np.float32)
    np.testing.assert_allclose(back, g.dq, rtol=2 ** -8, atol=0)
    # float32 inputs by default give float32 gradients
    assert smattn.reference_backward(*(a.astype(np.float32) for a in (q, k, v, do))).dq.dtype \
        == np.float32


def test_gqa_sums_the_group_and_masked_keys_get_zero():
    q, k, v = rand(1, 3, 4, 2, seed=12), rand(1, 5, 2, 2, seed=13), rand(1, 5, 2, 3, seed=14)
    do = rand(1, 3, 4, 3, seed=15)
    k[0, 4] = np.nan  # key 4 is padding: never read
    v[0, 4] = np.inf
    g = smattn.reference_backward(q, k, v, do, kv_lens=[4], dtype="float64")
    assert np.all(g.dk[0, 4] == 0) and not np.any(np.signbit(g.dk[0, 4]))
    assert np.all(g.dv[0, 4] == 0) and not np.any(np.signbit(g.dv[0, 4]))
    assert np.all(np.isfinite(g.dq))
    m = smattn.reference_backward(q, np.repeat(k, 2, axis=2), np.repeat(v, 2, axis=2), do,
                                  kv_lens=[4], dtype="float64")
    assert np.array_equal(m.dq, g.dq)
    summed = m.dk.reshape(1, 5, 2, 2, 2).sum(axis=3)
    np.testing.assert_allclose(g.dk, summed, rtol=1e-15, atol=1e-300)


def test_dbias_and_dsinks_on_request():
    q, k, v = rand(3, 2, 4, seed=16), rand(5, 2, 4, seed=17), rand(5, 2, 4, seed=18)
    do = rand(3, 2, 4, seed=19)
    g = smattn.reference_backward(q, k, v, do, dbias=True, dsinks=True, dtype="float64")
    assert g.dbias.shape == (2, 3, 5) and g.dsinks.shape == (2,)
    assert np.all(g.dsinks == 0)  # no sinks: the gradient of a -inf sink
    # sum_j dS_ij = 0 without dLSE and sinks (SPEC 10.1)
    assert np.all(np.abs(g.dbias.sum(axis=-1)) <= 1e-15 * np.abs(g.dbias).sum(axis=-1) + 1e-300)
    sinks = rand(2, seed=20)
    h = smattn.reference_backward(q, k, v, do, sinks=sinks, dbias=False, dtype="float64")
    assert h.dbias is None and h.dsinks.shape == (2,) and np.all(h.dsinks != 0)


def test_errors_name_the_argument():
    q, k, v = rand(1, 3, 2, 4), rand(1, 5, 1, 4), rand(1, 5, 1, 3)
    do = rand(1, 3, 2, 3)
    with pytest.raises(ValueError, match=r"do: shape \(1, 3, 2, 4\), want O's shape"):
        smattn.reference_backward(q, k, v, rand(1, 3, 2, 4))
    with pytest.raises(ValueError, match=r"dlse: shape \(1, 3, 2\), want LSE's shape"):
        smattn.reference_backward(q, k, v, do, dlse=rand(1, 3, 2))
    with pytest.raises(TypeError, match="do: dtype 'int32' is not a float type"):
        smattn.reference_backward(q, k, v, do.astype(np.int32))
    with pytest.raises(TypeError, match="do: None"):
        smattn.reference_backward(q, k, v, None)
    with pytest.raises(ValueError, match=r"do: shape \(3, 2, 4\), want O's packed shape"):
        smattn.reference_backward(q[0], k[0], v[0], rand(3, 2, 4), cu_seqlens_q=[0, 3])
    with pytest.raises(ValueError, match="threads"):
        smattn.reference_backward(q, k, v, do, threads=-1)


def _paged(k, T_b, page, order):
    """Page caches [num_pages, page, Hkv, .] holding sequence b's keys [0, T_b[b]) in the
    pages `order` hands out, NaN in every other slot, and the block table."""
    B, npages = k.shape[0], max(order) + 1
    maxp = max(-(-t // page) for t in T_b)
    cache = np.full((npages, page) + k.shape[2:], np.nan)
    table = np.full((B, maxp), -1, dtype=np.int32)
    it = iter(order)
    for b in range(B):
        for col in range(-(-T_b[b] // page)):
            table[b, col] = pg = next(it)
            n = min(page, T_b[b] - col * page)
            cache[pg, :n] = k[b, col * page:col * page + n]
    return cache, table


def test_ragged_and_paged_are_the_dense_twin():
    # SPEC 10.1: packed queries and paged keys give the dense problem's gradients, bit for
    # bit, in their own storage; the slots no key uses get +0; a shared page is refused
    B, S, T, Hq, Hkv = 2, 4, 7, 4, 2
    q, k, v = rand(B, S, Hq, 3, seed=30), rand(B, T, Hkv, 3, seed=31), rand(B, T, Hkv, 2, seed=32)
    do, dlse = rand(B, S, Hq, 2, seed=33), rand(B, Hq, S, seed=34)
    S_b, T_b = [4, 2], [7, 5]
    do[1, 2:] = 0  # sequence 1's padding rows: no loss term in the packed problem
    dlse[1, :, 2:] = 0
    kw = dict(causal="lower_right", kv_lens=T_b, q_lens=S_b, softcap=4.0, dtype="float64")
    g = smattn.reference_backward(q, k, v, do, dlse=dlse, **kw)
    cu = np.array([0, 4, 6])
    qp = np.concatenate([q[0], q[1, :2]])
    dop = np.concatenate([do[0], do[1, :2]])
    dlp = np.concatenate([dlse[0], dlse[1, :, :2]], axis=1)
    kc, table = _paged(k, T_b, 3, [4, 0, 2, 1, 5])
    vc, _ = _paged(v, T_b, 3, [4, 0, 2, 1, 5])
    h = smattn.reference_backward(qp, kc, vc, dop, dlse=dlp, cu_seqlens_q=cu, block_table=table,
                                  kv_lens=T_b, causal="lower_right", softcap=4.0,
                                  dtype="float64")
    assert h.dq.shape == qp.shape and h.dk.shape == kc.shape and h.dv.shape == vc.shape
    assert np.array_equal(h.dq, np.concatenate([g.dq[0], g.dq[1, :2]]))
    for got, dense in ((h.dk, g.dk), (h.dv, g.dv)):
        seen = np.zeros(got.shape[:2], bool)
        for b in range(B):
            for t in range(T_b[b]):
                pg, sl = table[b, t // 3], t % 3
                seen[pg, sl] = True
                assert np.array_equal(got[pg, sl], dense[b, t])
        rest = got[~seen]
        assert rest.size and np.all(rest == 0) and not np.any(np.signbit(rest))
    # the fast kernel: the dense problem's bits
    f32 = lambda a: a.astype(np.float32)  # noqa: E731
    fd = smattn.attention_backward(f32(q), f32(k), f32(v), f32(do), dlse=f32(dlse),
                                   causal="lower_right", kv_lens=T_b, q_lens=S_b, softcap=4.0)
    fl = smattn.attention_backward(f32(qp), f32(np.nan_to_num(kc)), f32(np.nan_to_num(vc)),
                                   f32(dop), dlse=f32(dlp), cu_seqlens_q=cu, block_table=table,
                                   kv_lens=T_b, causal="lower_right", softcap=4.0)
    assert np.array_equal(fl.dq, np.concatenate([fd.dq[0], fd.dq[1, :2]]))
    assert np.array_equal(fl.dk[table[1, 1], 1], fd.dk[1, 4])
    r = smattn.check_backward(fl.dq, fl.dk, fl.dv, f32(qp), f32(np.nan_to_num(kc)),
                              f32(np.nan_to_num(vc)), f32(dop), dlse=f32(dlp), cu_seqlens_q=cu,
                              block_table=table, kv_lens=T_b, causal="lower_right",
                              softcap=4.0, precision="opt")
    assert r.passed, r
    bad = fl.dk.copy()
    bad[3, 2, 0, 0] = 1.0  # page 3 is no sequence's
    r = smattn.check_backward(fl.dq, bad, fl.dv, f32(qp), f32(np.nan_to_num(kc)),
                              f32(np.nan_to_num(vc)), f32(dop), dlse=f32(dlp), cu_seqlens_q=cu,
                              block_table=table, kv_lens=T_b, causal="lower_right",
                              softcap=4.0, precision="opt")
    assert not r.passed and r.worst.output == "dK" and r.worst.index == (3, 2, 0, 0)
    shared = table.copy()
    shared[1, 0] = table[0, 0]
    with pytest.raises(ValueError, match=r"block_table\[0\]\[0\] and block_table\[1\]\[0\] "
                                          r"both name page 4"):
        smattn.reference_backward(qp, kc, vc, dop, cu_seqlens_q=cu, block_table=shared,
                                  kv_lens=T_b)


def test_alibi_is_its_bias():
    # SPEC 10.1: ALiBi's term enters the backward as the bias it stands for
    q, k, v = rand(1, 3, 2, 4, seed=40), rand(1, 6, 1, 4, seed=41), rand(1, 6, 1, 2, seed=42)
    do = rand(1, 3, 2, 2, seed=43)
    slopes = np.array([0.5, -0.25], dtype=np.float32)
    g = smattn.reference_backward(q, k, v, do, alibi_slopes=slopes, alibi_mode="symmetric",
                                  causal="lower_right", dtype="float64")
    i, j = np.arange(3)[:, None], np.arange(6)[None, :]
    dist = -np.abs(i + 6 - 3 - j)
    bias = (slopes.astype(np.float64)[:, None, None] * dist)[None]
    h = smattn.reference_backward(q, k, v, do, bias=bias, dbias=False, causal="lower_right",
                                  dtype="float64")
    for a, b in ((g.dq, h.dq), (g.dk, h.dk), (g.dv, h.dv)):
        assert np.array_equal(a, b)
    plain = smattn.reference_backward(q, k, v, do, causal="lower_right", dtype="float64")
    assert not np.array_equal(plain.dq, g.dq)


def test_alibi_mask_mode_has_no_dbias_by_default():
    # SPEC 10.1: under the mask mode the bias is a distance mask without a gradient; a
    # problem with a bias asks for none unless told (asking is SMATTN_ERR_UNSUPPORTED)
    q, k, v = rand(1, 3, 2, 4, seed=50), rand(1, 6, 1, 4, seed=51), rand(1, 6, 1, 2, seed=52)
    do = rand(1, 3, 2, 2, seed=53)
    bias = rand(1, 2, 3, 6, seed=54, dtype=np.float32)  # f64 is refused in the mask mode
    slopes = np.array([0.5, 0.25], dtype=np.float32)
    g = smattn.reference_backward(q, k, v, do, bias=bias, alibi_slopes=slopes,
                                  alibi_mode="mask", dtype="float64")
    assert g.dbias is None and g.dq.shape == q.shape
    with pytest.raises(Exception, match="SMATTN_ERR_UNSUPPORTED"):
        smattn.reference_backward(q, k, v, do, bias=bias, alibi_slopes=slopes,
                                  alibi_mode="mask", dbias=True, dtype="float64")


def _run_example(pre=""):
    import os
    import subprocess
    import sys
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    path = os.path.join(root, "examples", "torch_backward.py")
    code = pre + "import runpy; runpy.run_path(%r, run_name='__main__')" % path
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=300, env=dict(os.environ,
                                                PYTHONPATH=os.pathsep.join(sys.path)))


def test_torch_example():
    """examples/torch_backward.py: autograd's gradients agree with the exact ones when torch
    is importable; without torch it says it skipped and exits 0."""
    r = _run_example()
    assert r.returncode == 0, r.stdout + r.stderr
    assert "agree with smattn's exact ones" in r.stdout or "skipped: torch" in r.stdout
    r = _run_example("import sys; sys.modules['torch'] = None; ")
    assert r.returncode == 0, r.stdout + r.stderr
    assert "torch_backward: skipped: torch is not importable" in r.stdout
