# SPDX-License-Identifier: MIT
"""test_layouts.py: ragged (cu_seqlens) and paged (block table, FlashInfer's CSR form)
layouts from Python (SPEC 2.7): the ctypes Layout mirrors smattn.h, bad arguments are named
with their entry, check() and assert_close() judge packed outputs, and reference() and
attention() on a layout equal the oracle on the dense twin (those need the library's
layouts: test names end in _library)."""
import ctypes

import numpy as np
import pytest

import smattn
from smattn import _lib, _ragged

CU_Q = [0, 3, 4, 8]
KV_LENS = [5, 3, 10]
TABLE = np.array([[0, 1, -1], [2, -1, -1], [3, 4, 5]], dtype=np.int32)
# the same pages as FlashInfer's CSR form (kv_len = (pages - 1) * 4 + last)
INDPTR, INDICES, LAST = [0, 2, 3, 6], [0, 1, 2, 3, 4, 5], [1, 3, 2]


def arrays(hnd=False, dtype=np.float32):
    r = np.random.default_rng(5)
    q = r.standard_normal((8, 4, 16)).astype(dtype)
    kc = r.standard_normal((6, 4, 2, 16)).astype(dtype)
    vc = r.standard_normal((6, 4, 2, 8)).astype(dtype)
    if hnd:  # the same cache, [num_pages, Hkv, page_size, D]
        kc, vc = np.ascontiguousarray(kc.transpose(0, 2, 1, 3)), \
            np.ascontiguousarray(vc.transpose(0, 2, 1, 3))
    return q, kc, vc


def packed_k():
    """The paged example's keys packed: k [total_k, Hkv, D] with cu_seqlens_k."""
    q, kc, vc = arrays()
    ks, vs, cu = [], [], [0]
    for b, n in enumerate(KV_LENS):
        j = np.arange(n)
        ks.append(kc[TABLE[b, j // 4], j % 4])
        vs.append(vc[TABLE[b, j // 4], j % 4])
        cu.append(cu[-1] + n + 1)  # one unused key after each slice (seqused_k)
        ks.append(np.full((1, 2, 16), np.nan, np.float32))
        vs.append(np.full((1, 2, 8), np.nan, np.float32))
    return q, np.concatenate(ks), np.concatenate(vs), cu


LAYOUTS = {
    "paged_nhd": lambda: (arrays(), dict(block_table=TABLE, kv_lens=KV_LENS)),
    "paged_hnd": lambda: (arrays(True), dict(block_table=TABLE, kv_lens=KV_LENS,
                                             kv_layout="HND")),
    "csr": lambda: (arrays(), dict(kv_indptr=INDPTR, kv_indices=INDICES,
                                   kv_last_page_len=LAST)),
    "packed": lambda: (packed_k()[:3], dict(cu_seqlens_k=packed_k()[3], seqused_k=KV_LENS)),
}


def twin_outputs(q, k, v, kw, dtype="float32"):
    """The oracle on the dense twin, packed back: o [total_q, Hq, Dv], lse [Hq, total_q]."""
    r = _ragged.Ragged(q, k, v, dict(kw, cu_seqlens_q=CU_Q))
    Q, K, V, ql, kvl = r.twin(q, k, v)
    O, L = smattn.reference(Q, K, V, q_lens=ql, kv_lens=kvl, causal=True, dtype=dtype)
    o = np.concatenate([O[b, :ql[b]] for b in range(3)])
    lse = np.concatenate([L[b, :, :ql[b]] for b in range(3)], axis=1)
    return o, lse


def test_layout_struct_matches_header():
    """_lib.Layout has smattn_layout's size and field offsets (the shim reports them)."""
    s = _lib.shim()
    s.smattn_py_layout_abi.restype = None
    s.smattn_py_layout_abi.argtypes = [ctypes.POINTER(ctypes.c_int64 * 9)]
    got = (ctypes.c_int64 * 9)()
    s.smattn_py_layout_abi(ctypes.byref(got))
    want = [ctypes.sizeof(_lib.Layout)] + [getattr(_lib.Layout, f).offset
                                           for f, _ in _lib.Layout._fields_]
    assert list(got) == want


@pytest.mark.parametrize("name", sorted(LAYOUTS))
def test_check_judges_packed_outputs(name):
    """check() and assert_close() on packed outputs: a pass, then one wrong element named by
    its packed index (row 5 is sequence 2's second query)."""
    (q, k, v), kw = LAYOUTS[name]()
    o, lse = twin_outputs(q, k, v, kw)
    rep = smattn.check(o, q, k, v, lse=lse, cu_seqlens_q=CU_Q, causal=True, **kw)
    assert rep.passed, rep.reason
    smattn.assert_close(o, q, k, v, lse=lse, cu_seqlens_q=CU_Q, causal=True, **kw)
    bad = o.copy()
    bad[5, 1, 2] += 1e-3
    rep = smattn.check(bad, q, k, v, lse=lse, cu_seqlens_q=CU_Q, causal=True, **kw)
    assert not rep.passed and rep.worst.output == "O" and rep.worst.index == (5, 1, 2)
    with pytest.raises(AssertionError, match="Mismatched elements: 1 /"):
        smattn.assert_close(bad, q, k, v, cu_seqlens_q=CU_Q, causal=True, **kw)
    bad_lse = lse.copy()
    bad_lse[3, 6] += 1e-3
    rep = smattn.check(o, q, k, v, lse=bad_lse, cu_seqlens_q=CU_Q, causal=True, **kw)
    assert not rep.passed and rep.worst.output == "LSE" and rep.worst.index == (3, 6)


def test_check_rows_sampled():
    """check(rows=K, seed=N) on a layout judges the sampled rows of each sequence (rows 0,
    S_b - 1, the powers of two around them and K more per sequence and head), not every
    row."""
    r = np.random.default_rng(9)
    q = r.standard_normal((64, 2, 8)).astype(np.float32)
    k = r.standard_normal((50, 1, 8)).astype(np.float32)
    v = r.standard_normal((50, 1, 8)).astype(np.float32)
    kw = dict(cu_seqlens_q=[0, 40, 64], cu_seqlens_k=[0, 30, 50], causal=True)
    Q, K, V, ql, kvl = _ragged.Ragged(q, k, v, kw).twin(q, k, v)
    O, L = smattn.reference(Q, K, V, q_lens=ql, kv_lens=kvl, causal=True, dtype="float32")
    o = np.concatenate([O[0, :40], O[1, :24]])
    lse = np.concatenate([L[0, :, :40], L[1, :, :24]], axis=1)
    full = smattn.check(o, q, k, v, lse=lse, **kw)
    rep = smattn.check(o, q, k, v, lse=lse, rows=1, seed=3, **kw)
    assert full.passed and full.rows_judged == full.rows_total == 64 * 2  # the stored rows
    assert rep.passed and 0 < rep.rows_judged < rep.rows_total == 64 * 2


def test_check_rows_sampled_judges_each_sequence_end():
    """rows=K samples each sequence's own rows, its last among them: an O wrong only at the
    last row of a 20-row sequence packed beside one of 256 fails (drawn over the twin's 256
    rows, the sample missed it)."""
    r = np.random.default_rng(4)
    q, k, v = (r.standard_normal((276, 2, 16)).astype(np.float32) for _ in range(3))
    kw = dict(cu_seqlens_q=[0, 256, 276], cu_seqlens_k=[0, 256, 276])
    o, lse = smattn.reference(q, k, v, **kw)
    assert smattn.check(o, q, k, v, lse=lse, rows=1, **kw).passed
    o = o.copy()
    o[275, 0, 0] += 0.25
    rep = smattn.check(o, q, k, v, lse=lse, rows=1, **kw)
    assert not rep.passed and rep.worst.output == "O" and rep.worst.index == (275, 0, 0)


def test_check_counts_only_the_rows_given():
    """A packed-q check counts the elements and rows the kernel gave (O's and LSE's stored
    rows), not the twin's padding rows it fills with the oracle's values; with P (whose
    padding rows are the kernel's, SPEC 2.7) every row of the twin; sampled (rows=K), the
    stored rows among those sampled: one planted error in each stored row is seen that many
    times."""
    rng = np.random.default_rng(5)
    cu_q, cu_k = [0, 3, 4, 9], [0, 5, 7, 15]
    q = rng.standard_normal((9, 2, 8)).astype(np.float32)
    k, v = (rng.standard_normal((15, 1, 8)).astype(np.float32) for _ in range(2))
    kw = dict(cu_seqlens_q=cu_q, cu_seqlens_k=cu_k)
    o, lse, p = smattn.reference(q, k, v, weights=True, **kw)
    rep = smattn.check(o, q, k, v, lse=lse, **kw)
    assert rep.elements == o.size + lse.size == 162
    assert rep.rows_judged == rep.rows_total == 9 * 2
    assert smattn.check(o, q, k, v, **kw).elements == o.size
    rep = smattn.check(o, q, k, v, lse=lse, p=p, **kw)
    assert rep.elements == o.size + lse.size + p.size
    assert rep.rows_judged == rep.rows_total == p.shape[0] * 2 * p.shape[2]
    r = np.random.default_rng(9)
    q = r.standard_normal((64, 2, 8)).astype(np.float32)
    k, v = (r.standard_normal((50, 1, 8)).astype(np.float32) for _ in range(2))
    kw = dict(cu_seqlens_q=[0, 40, 64], cu_seqlens_k=[0, 30, 50], causal=True)
    o, lse = smattn.reference(q, k, v, **kw)
    bad = o.copy()
    bad[:, :, 0] += 1.0
    for K, seed in ((1, 0), (9, 7), (20, 5), (20, 2 ** 64 - 1), (30, 1), (39, 3)):
        rep = smattn.check(bad, q, k, v, lse=lse, rows=K, seed=seed, **kw)
        assert rep.rows_total == 64 * 2 and rep.mismatched == rep.rows_judged < 64 * 2
        assert rep.elements == rep.rows_judged * (8 + 1)


def test_check_dense_q_paged_keys():
    """Decode: dense q [B, 1, Hq, D] over a paged cache; outputs dense."""
    _, kc, vc = arrays()
    q = np.random.default_rng(2).standard_normal((3, 1, 4, 16)).astype(np.float32)
    r = _ragged.Ragged(q, kc, vc, dict(block_table=TABLE, kv_lens=KV_LENS))
    _, K, V, _, kvl = r.twin(q, kc, vc)
    o, lse = smattn.reference(q, K, V, kv_lens=kvl, dtype="float32")
    assert smattn.check(o, q, kc, vc, lse=lse, block_table=TABLE, kv_lens=KV_LENS)
    o[2, 0, 3, 1] += 1e-3
    rep = smattn.check(o, q, kc, vc, kv_indptr=INDPTR, kv_indices=INDICES,
                       kv_last_page_len=LAST)
    assert not rep.passed and rep.worst.index == (2, 0, 3, 1)


@pytest.mark.parametrize("name", sorted(LAYOUTS))
def test_check_3d_dense_q_packed_or_paged_keys(name):
    """3-D q (no batch axis, B = 1) over packed or paged keys: check() takes reference()'s
    3-D O and 2-D LSE (and 3-D P) and names a wrong element by its 3-D index."""
    (_, k, v), kw = LAYOUTS[name]()
    if "block_table" in kw:  # one sequence: the first row of the table
        kw = dict(kw, block_table=TABLE[:1], kv_lens=KV_LENS[:1])
    elif "kv_indptr" in kw:
        kw = dict(kw, kv_indptr=INDPTR[:2], kv_indices=INDICES[:2], kv_last_page_len=LAST[:1])
    else:
        kw = dict(kw, cu_seqlens_k=kw["cu_seqlens_k"][:2], seqused_k=KV_LENS[:1])
        k, v = k[:kw["cu_seqlens_k"][1]], v[:kw["cu_seqlens_k"][1]]
    q = np.random.default_rng(4).standard_normal((3, 4, 16)).astype(np.float32)
    o, lse, p = smattn.reference(q, k, v, causal=True, weights=True, **kw)
    assert o.shape == (3, 4, 8) and lse.shape == (4, 3) and p.shape[:2] == (4, 3)
    assert smattn.check(o, q, k, v, lse=lse, p=p, causal=True, **kw)
    with pytest.raises(ValueError, match=r"o: shape \(1, 3, 4, 8\), want \[3, 4, 8\]"):
        smattn.check(o[None], q, k, v, causal=True, **kw)
    bad = lse.copy()
    bad[2, 1] += 1e-3
    rep = smattn.check(o, q, k, v, lse=bad, causal=True, **kw)
    assert not rep and rep.worst.output == "LSE" and rep.worst.index == (2, 1)


BAD = [
    (dict(cu_seqlens_q=[0, 3, 2, 8]), ValueError,
     r"cu_seqlens_q\[2\] = 2 is less than cu_seqlens_q\[1\] = 3"),
    (dict(cu_seqlens_q=[1, 3, 4, 8]), ValueError, r"cu_seqlens_q\[0\] = 1, want 0"),
    (dict(cu_seqlens_q=[0, 3, 4, 7]), ValueError, r"cu_seqlens_q\[3\] = 7, want q's total_q = 8"),
    (dict(cu_seqlens_q=CU_Q, q_lens=[1, 1, 1]), TypeError, "give cu_seqlens_q or q_lens"),
    (dict(cu_seqlens_q=[0, 3.5, 8]), TypeError, "cu_seqlens_q: dtype 'float64'"),
    (dict(kv_lens=None), TypeError, "kv_lens is required with block_table"),
    (dict(kv_lens=[5, 3, 13]), ValueError,
     r"kv_lens\[2\] = 13 is outside \[0, max_pages \* page_size\] = \[0, 12\]"),
    (dict(block_table=np.array([[0, 1, -1], [2, -1, -1], [3, 6, 5]])), ValueError,
     r"block_table\[2\]\[1\] = 6 is outside \[0, num_pages\) = \[0, 6\)"),
    (dict(block_table=np.array([[0, 1, -1], [2, -1, 2 ** 40], [3, 4, 5]])), OverflowError,
     r"block_table\[1\]\[2\] = 1099511627776 does not fit in int32"),
    (dict(block_table=TABLE.astype(np.float32)), TypeError, "block_table: dtype 'float32'"),
    (dict(block_table=TABLE[:2]), ValueError, r"block_table: shape \(2, 3\), want \[B, max_pages\]"),
    (dict(kv_layout="NDH"), ValueError, "kv_layout 'NDH': want 'NHD'"),
    (dict(page_size=8), ValueError, "page_size 8 does not match k's page size 4"),
    (dict(block_table=None, kv_lens=None, kv_indptr=INDPTR, kv_indices=INDICES), TypeError,
     "kv_last_page_len missing"),
    (dict(block_table=None, kv_lens=None, kv_indptr=INDPTR, kv_indices=[0, 1, 2, 3, 4, 9],
          kv_last_page_len=LAST), ValueError,
     r"kv_indices\[5\] = 9 is outside \[0, num_pages\) = \[0, 6\)"),
    (dict(block_table=None, kv_lens=None, kv_indptr=INDPTR, kv_indices=INDICES,
          kv_last_page_len=[1, 5, 2]), ValueError,
     r"kv_last_page_len\[1\] = 5, want 1..page_size"),
    (dict(block_table=None, kv_lens=None, kv_indptr=[0, 2, 2, 6], kv_indices=INDICES,
          kv_last_page_len=[1, 1, 2]), ValueError,
     r"kv_last_page_len\[1\] = 1, want 0 \(sequence 1 has 0 pages\)"),
    (dict(kv_indptr=INDPTR, kv_indices=INDICES, kv_last_page_len=LAST), TypeError,
     "give block_table or kv_indptr"),
    (dict(block_table=None, kv_lens=None, seqused_k=[1, 1, 1]), TypeError,
     "seqused_k needs cu_seqlens_k"),
    (dict(layout="bhsd"), ValueError, "ragged and paged layouts are given as bshd"),
]


@pytest.mark.parametrize("bad,exc,msg", BAD)
def test_bad_layouts_named(bad, exc, msg):
    """Each bad argument is refused with its name and entry, by check() and reference()."""
    q, kc, vc = arrays()
    kw = dict(cu_seqlens_q=CU_Q, block_table=TABLE, kv_lens=KV_LENS)
    kw.update(bad)
    kw = {n: x for n, x in kw.items() if x is not None}
    o = np.zeros((8, 4, 8), np.float32)
    with pytest.raises(exc, match=msg):
        smattn.check(o, q, kc, vc, **kw)
    with pytest.raises(exc, match=msg):
        smattn.reference(q, kc, vc, **kw)


def test_csr_is_a_block_table():
    """kv_indptr/kv_indices/kv_last_page_len make the block table and kv_lens FlashInfer
    means, an empty sequence (no page) included."""
    q, kc, vc = arrays()
    r = _ragged.Ragged(q, kc, vc, dict(cu_seqlens_q=CU_Q, kv_indptr=[0, 2, 2, 5],
                                       kv_indices=[5, 1, 0, 2, 4], kv_last_page_len=[3, 0, 4]))
    assert r.kv_lens.tolist() == [7, 0, 12]
    assert r.table.tolist() == [[5, 1, -1], [-1, -1, -1], [0, 2, 4]]
    lay = r.descriptor([])
    assert lay.max_pages == lay.bt_stride == 3 and lay.page_size == 4 and lay.num_pages == 6


@pytest.mark.parametrize("name", sorted(LAYOUTS))
def test_reference_attention_match_twin_library(name):
    """reference() on a layout equals the oracle on its dense twin bit for bit, attention()
    passes check(); needs the library's layouts (SPEC 2.7)."""
    (q, k, v), kw = LAYOUTS[name]()
    o_want, lse_want = twin_outputs(q, k, v, kw)
    o, lse = smattn.reference(q, k, v, cu_seqlens_q=CU_Q, causal=True, dtype="float32", **kw)
    assert o.shape == (8, 4, 8) and lse.shape == (4, 8)
    assert np.array_equal(o, o_want) and np.array_equal(lse, lse_want)
    o, lse, p = smattn.attention(q, k, v, cu_seqlens_q=CU_Q, causal=True, weights=True, **kw)
    assert p.shape == (3, 4, 4, 10)
    smattn.assert_close(o, q, k, v, lse=lse, cu_seqlens_q=CU_Q, causal=True, precision="opt",
                        **kw)


def test_library_line_library():
    """A layout the library refuses is told by its line (smattn_validate_explain), naming the
    entry; the table is spoiled after the package's own checks passed."""
    q, kc, vc = arrays()
    b = smattn._api._build(q, kc, vc, cu_seqlens_q=CU_Q, block_table=TABLE.copy(),
                           kv_lens=KV_LENS)
    b.ragged.table[2, 2] = 99  # the array the descriptor points at (a copy: TABLE is shared)
    out, *held = smattn._api._outputs(b, "float32", False)
    with pytest.raises(ValueError, match=r"block_table\[2\]\[2\] = 99 is outside \[0, 6\) "
                                         r"\(SMATTN_ERR_LAYOUT\)"):
        smattn._api._validate(b, out)


def test_cases_yield_layouts_library():
    """cases() yields the battery's ragged and paged cases laid out, with their arrays: q
    packed with cu_seqlens_q, k and v packed or in pages with a block table (NaN and
    infinities in every slot no sequence uses), judged through check() as `smattn conform`
    judges them; the library's kernel passes them, and a page index off by one fails."""
    seen, junk, table_junk, strided = set(), 0, 0, 0
    for c in smattn.cases("quick", categories=["layout"]):
        kw = c.kwargs
        assert ("cu_seqlens_q" in kw) == ("packed_q" in c.features) == (c.q.ndim == 3)
        assert ("cu_seqlens_k" in kw) == ("packed_kv" in c.features)
        paged = "paged_nhd" in c.features or "paged_hnd" in c.features
        assert ("block_table" in kw) == paged
        assert (kw.get("kv_layout") == "HND") == ("paged_hnd" in c.features)
        assert "q_lens" not in kw or "cu_seqlens_q" not in kw
        junk += not np.isfinite(c.k).all()  # unused slots hold NaN or an infinity
        if paged:
            table_junk += (kw["block_table"] == -1).any()
            t = kw["block_table"]  # a row stride above max_pages: a slice of a wider table
            strided += t.strides[0] > 4 * t.shape[1]
        seen.update(f for f in c.features if f.startswith(("packed", "paged")))
        o, lse = smattn.attention(c.q, c.k, c.v, **kw)[:2]
        assert o.shape[0] == (kw["cu_seqlens_q"][-1] if c.q.ndim == 3 else c.shape["B"])
        r = c.check(o, lse=lse)
        assert r, (c.name, r.reason)
        if paged and c.name.endswith("p16_decode"):
            t = kw["block_table"].copy()
            used = (np.asarray(kw["kv_lens"]) + 15) // 16
            for b in range(t.shape[0]):
                t[b, :used[b]] = (t[b, :used[b]] + 1) % c.k.shape[0]
            bad = smattn.attention(c.q, c.k, c.v, **dict(kw, block_table=t))[0]
            r = c.check(bad)
            assert not r and "O[b=" in r.reason
    assert seen == {"packed_q", "packed_kv", "paged_nhd", "paged_hnd"}
    assert junk >= 10 and table_junk >= 10 and strided >= 2, (junk, table_junk, strided)


def test_block_table_row_stride_library():
    """A slice of a wider int32 table (block_tables[:, :max_pages]) is used in place:
    bt_stride is the wide table's row, the columns past max_pages (page numbers no page
    has) never read, the outputs those of the table alone."""
    q, kc, vc = arrays()
    wide = np.empty((3, 5), dtype=np.int32)
    wide[:, :3] = TABLE
    wide[:, 3:] = [[2 ** 31 - 1, 6], [6, -2 ** 31], [-1, 6]]
    kw = dict(cu_seqlens_q=CU_Q, kv_lens=KV_LENS)
    r = _ragged.Ragged(q, kc, vc, dict(kw, block_table=wide[:, :3]))
    lay = r.descriptor([])
    assert lay.max_pages == 3 and lay.bt_stride == 5
    o, lse = smattn.reference(q, kc, vc, block_table=wide[:, :3], dtype="float32", **kw)
    o_want, lse_want = smattn.reference(q, kc, vc, block_table=TABLE, dtype="float32", **kw)
    assert np.array_equal(o, o_want) and np.array_equal(lse, lse_want)


def _c_visible(b, S, T):
    """smattn_visible on the built problem (its layout included) for every (b, h, i, j) of
    its own extents, padded with False to the twin's S and T."""
    out = np.zeros((b.B, b.Hq, S, T), dtype=bool)
    for idx in np.ndindex(b.B, b.Hq, b.S, b.T):
        out[idx] = _lib.visible(ctypes.byref(b.prob), ctypes.byref(b.inputs), *idx) != 0
    return out


def test_visible_takes_the_layouts_lengths():
    """visible() with a layout: each sequence's S_b from cu_seqlens_q and T_b from
    seqused_k (or kv_lens with pages), as smattn_visible; rows a sequence does not have see
    nothing (a packed sequence shorter than the longest once saw every key)."""
    q, k, v, cu = packed_k()
    for kw in (dict(cu_seqlens_k=cu, seqused_k=KV_LENS),
               dict(block_table=TABLE, kv_lens=KV_LENS)):
        if "block_table" in kw:
            q, k, v = arrays()
        for causal in (None, True, "upper_left"):
            vis = smattn.visible(q, k, v, cu_seqlens_q=CU_Q, causal=causal, **kw)
            b = smattn._api._build(q, k, v, cu_seqlens_q=CU_Q, causal=causal, **kw)
            assert vis.shape == (3, 4, 4, 10)
            assert np.array_equal(vis, _c_visible(b, 4, 10))
            assert not vis[1, :, 1:].any() and not vis[0, :, :, 5:].any()


def test_case_visible_of_layout_cases_library():
    """Case.visible() of a ragged or paged case is its dense twin's, [B, Hq, S, T] of
    case.shape: smattn_visible on the case's own problem (its layout), and the dense twin's
    visibility (q_lens and kv_lens from the layout, the same options) row by row; a kernel
    that takes only the twin and a mask passes check() with it."""
    n = 0
    for c in smattn.cases("quick", categories=["layout"]):
        if c.op != "attention":
            continue
        sh = c.shape
        vis = c.visible()
        assert vis.shape == (sh["B"], sh["Hq"], sh["S"], sh["T"]), c.name
        rag = {k: a for k, a in c.kwargs.items() if k in _ragged.ARGS}
        opts = {k: c.kwargs[k] for k in ("causal", "window", "kv_lens", "q_lens")
                if k in c.kwargs}
        b = smattn._api._build(c.q, c.k, c.v, **rag, **opts)
        want = _c_visible(b, sh["S"], sh["T"])
        if "mask" in c.kwargs:
            want &= np.broadcast_to(np.asarray(c.kwargs["mask"], bool), want.shape)
        assert np.array_equal(vis, want), c.name
        # the twin, dense, with the layout's lengths
        Q, K, V, ql, kvl = b.ragged.twin(c.q, c.k, c.v)
        tw = smattn.visible(Q, K, V, q_lens=ql, kv_lens=kvl, **{
            k: a for k, a in opts.items() if k not in ("kv_lens", "q_lens")})
        assert np.array_equal(vis[:, :, :b.S, :b.T] & tw, vis[:, :, :b.S, :b.T]), c.name
        if "mask" not in c.kwargs:
            assert np.array_equal(vis[:, :, :b.S, :b.T], tw), c.name
        n += 1
    assert n >= 15
