# SPDX-License-Identifier: MIT
"""test_merge.py: smattn.merge_reference and smattn.merge (SPEC 9) from NumPy: the merge of
the oracle's partials over a split of the keys is the full attention, the kernel agrees with
the oracle and gives the same bits on every ISA and thread count, the conventions and the
errors name their argument."""
import json
import os
import subprocess

import numpy as np
import pytest

import smattn


def rand(*shape, seed=0, dtype=np.float32):
    return np.random.default_rng(seed).standard_normal(shape).astype(dtype)


def split_partials(q, k, v, parts, base):
    """The oracle's float64 partial states of q, k, v over the keys j with parts[j] == n."""
    os_, ls_ = [], []
    for n in range(max(parts) + 1):
        mask = np.zeros((q.shape[0], q.shape[2], q.shape[1], k.shape[1]), dtype=bool)
        mask[..., np.asarray(parts) == n] = True
        o, lse = smattn.reference(q, k, v, mask=mask, dtype="float64")
        os_.append(o)
        ls_.append(lse / np.log(2) if base == "2" else lse)
    return np.stack(os_), np.stack(ls_)


@pytest.mark.parametrize("base", ["e", "2"])
def test_split_is_full_attention(base):
    q, k, v = rand(2, 3, 2, 8, seed=1), rand(2, 11, 2, 8, seed=2), rand(2, 11, 2, 5, seed=3)
    o_full, lse_full = smattn.reference(q, k, v, dtype="float64")
    parts = [0, 2, 1, 0, 0, 2, 1, 1, 0, 2, 2]
    o_parts, lse_parts = split_partials(q, k, v, parts, base)
    o, lse = smattn.merge_reference(o_parts, lse_parts, base=base)
    assert o.dtype == np.float64 and o.shape == o_full.shape and lse.shape == lse_full.shape
    scale = np.log(2) if base == "2" else 1.0
    np.testing.assert_allclose(o, o_full, rtol=0, atol=1e-14)
    np.testing.assert_allclose(lse * scale, lse_full, rtol=1e-14, atol=1e-14)
    # the kernel on float32 partials: close to the full attention, the same bits everywhere
    ko, kl = smattn.merge(o_parts.astype(np.float32), lse_parts.astype(np.float32), base=base)
    assert ko.dtype == np.float32
    np.testing.assert_allclose(ko, o_full, rtol=0, atol=1e-5)
    for isa in ("scalar", "avx2", "avx512"):
        try:
            o2, l2 = smattn.merge(o_parts.astype(np.float32), lse_parts.astype(np.float32),
                                  base=base, isa=isa, threads=2)
        except TypeError:  # an ISA this CPU lacks
            continue
        assert o2.tobytes() == ko.tobytes() and l2.tobytes() == kl.tobytes()


def test_unbatched_and_conventions():
    o_parts = np.array([[[[1.0, 2.0]]], [[[3.0, np.nan]]]])  # [N=2, S=1, H=1, Dv=2]
    lse_parts = np.array([[[0.5]], [[-np.inf]]])             # the second partial empty
    o, lse = smattn.merge_reference(o_parts, lse_parts, dtype="float32")
    assert o.shape == (1, 1, 2) and lse.shape == (1, 1) and o.dtype == np.float32
    assert o.tolist() == [[[1.0, 2.0]]] and lse.tolist() == [[0.5]]
    both_empty = np.full((2, 1, 1), -np.inf)
    o, lse = smattn.merge_reference(o_parts, both_empty, empty_rows="nan", empty_lse="pos_inf")
    assert np.isnan(o).all() and lse.tolist() == [[np.inf]]
    o, lse = smattn.merge_reference(o_parts, np.full((2, 1, 1), np.inf), empty_parts="pos_inf")
    assert o.tolist() == [[[0.0, 0.0]]] and lse.tolist() == [[-np.inf]]
    o, lse = smattn.merge_reference(o_parts, np.full((2, 1, 1), np.inf))  # +inf poisons
    assert np.isnan(o).all() and np.isnan(lse).all()


def test_errors():
    o_parts, lse_parts = rand(2, 1, 3, 2, 4), rand(2, 1, 2, 3)
    with pytest.raises(ValueError, match="mean"):
        smattn.merge_reference(o_parts, lse_parts, empty_rows="mean")
    with pytest.raises(ValueError, match="base"):
        smattn.merge_reference(o_parts, lse_parts, base="10")
    with pytest.raises(ValueError, match="does not match"):
        smattn.merge_reference(o_parts, rand(2, 1, 3, 2))
    with pytest.raises(TypeError, match="SMATTN_ERR_UNSUPPORTED"):
        smattn.merge(o_parts.astype(np.float64), lse_parts)
    with pytest.raises(ValueError, match="empty_parts"):
        smattn.merge(o_parts, lse_parts, empty_parts="zero")


# ---- the merge battery: cases(merge=True) --------------------------------------------------

def _cli():
    root = os.environ.get("SMATTN_ROOT") or os.path.dirname(os.path.dirname(
        os.path.dirname(os.path.abspath(__file__))))
    for c in (os.environ.get("SMATTN_CLI"), os.path.join(root, "build", "smattn")):
        if c and os.access(c, os.X_OK):
            return c
    return None


def naive_merge(o_parts, lse_parts, base="e", **_):
    """A merge without the max subtraction, in float32: e^LSE_n overflows past 88."""
    with np.errstate(all="ignore"):
        w = np.exp(lse_parts.astype(np.float32)) if base == "e" else \
            np.exp2(lse_parts.astype(np.float32))
        L = w.sum(axis=0)
        o = np.einsum("nbhs,nbshd->bshd", w, np.nan_to_num(o_parts.astype(np.float32)))
        o = o / np.transpose(L, (0, 2, 1))[..., None]
        lse = np.log(L) if base == "e" else np.log2(L)
    return o.astype(np.float32), lse.astype(np.float32)


def test_merge_cases_judged():
    """cases(merge=True) yields the merge battery (N = 1, 2, 64, LSEs over +-1000, empty
    parts -inf and +inf, all parts empty, base 2, three batches, poisoned rows) as partial
    states; smattn.merge passes every case under its own model and under float32's, and a
    merge without the max subtraction fails the cases whose LSEs leave exp's range."""
    cs = list(smattn.cases(merge=True))
    names = [c.name for c in cs]
    assert names[:15] == ["merge/n1", "merge/n2_plain", "merge/n64", "merge/lse_spread_pm1000",
                          "merge/neg_inf_parts", "merge/pos_inf_parts_fa2",
                          "merge/all_parts_empty", "merge/all_parts_empty_fa2",
                          "merge/one_part_per_row", "merge/base2_spread_pm1000",
                          "merge/batch_b3", "merge/poison_rows_neg_inf", "merge/poison_rows_fa2",
                          "merge/row_strides_padded", "merge/lse_token_major"]
    # then the merge golden vectors (spec/vectors, "op": "merge"), sorted
    golden = [n for n in names[15:]]
    assert golden == sorted(golden) and all(n.startswith("merge/golden_") for n in golden)
    assert {"merge/golden_merge_two_parts", "merge/golden_merge_base2",
            "merge/golden_merge_far_apart"} <= set(golden)
    by = {c.name: c for c in cs}
    assert by["merge/base2_spread_pm1000"].kwargs["base"] == "2"
    assert np.abs(by["merge/base2_spread_pm1000"].lse_parts).max() > 500
    assert by["merge/all_parts_empty_fa2"].kwargs["empty_lse"] == "pos_inf"
    assert np.isposinf(by["merge/all_parts_empty_fa2"].lse_parts).all()
    assert by["merge/batch_b3"].o_parts.shape[1] == 3
    assert by["merge/pos_inf_parts_fa2"].kwargs["empty_parts"] == "pos_inf"
    assert np.isneginf(by["merge/all_parts_empty"].lse_parts).all()
    assert np.abs(by["merge/lse_spread_pm1000"].lse_parts).max() > 500
    # poisoned rows: NaN LSEs, NaN and infinities in O (the strided cases' layout is the
    # checker's; here their partials are contiguous)
    assert np.isnan(by["merge/poison_rows_neg_inf"].lse_parts).any()
    assert np.isposinf(by["merge/poison_rows_neg_inf"].o_parts).any()
    assert by["merge/poison_rows_fa2"].kwargs["empty_parts"] == "pos_inf"
    failed = []
    for c in cs:
        assert c.op == "merge" and c.category == "merge" and c.features == ["merge"]
        N, B, S, H, Dv = c.o_parts.shape
        assert c.lse_parts.shape == (N, B, H, S) and c.o_parts.dtype == np.float32
        assert c.shape == dict(N=N, B=B, S=S, Hq=H, Dv=Dv)
        o, lse = smattn.merge(c.o_parts, c.lse_parts, **c.kwargs)
        for prec in ("opt", "float32"):
            r = c.check(o, lse=lse, precision=prec)
            assert r.passed and r.elements == o.size + lse.size, (c.name, prec, str(r))
        assert c.check(o).passed and c.check(None, lse=lse).passed
        no, nl = naive_merge(c.o_parts, c.lse_parts, **c.kwargs)
        if not c.kwargs["empty_parts"] == "pos_inf":  # +inf parts: naive is NaN anyway
            r = c.check(no, lse=nl)
            if not r.passed and not c.name.startswith("merge/golden_"):
                failed.append(c.name)
                assert r.worst is not None and r.mismatched > 0 and "SPEC 9.5" in r.reason
    assert "merge/lse_spread_pm1000" in failed, failed
    assert "merge/n1" not in failed  # N = 1 with LSEs in [-3, 3]: no overflow to catch
    # a wrong O fails by its element
    c = by["merge/n2_plain"]
    o, lse = smattn.merge(c.o_parts, c.lse_parts, **c.kwargs)
    o[0, 1, 1, 3] += 1e-3
    r = c.check(o, lse=lse)
    assert not r.passed and r.worst.output == "O" and r.worst.index == (0, 1, 1, 3)


def test_merge_cases_arguments():
    c = next(smattn.cases(merge=True, dtype="float64"))
    assert c.o_parts.dtype == np.float64
    o, lse = smattn.merge_reference(c.o_parts, c.lse_parts, **c.kwargs)
    assert c.check(o, lse=lse, precision="float64").passed
    with pytest.raises(TypeError, match="no P"):
        c.check(o, p=o)
    with pytest.raises(TypeError, match="merge case"):
        c.visible()
    with pytest.raises(TypeError, match="both None"):
        c.check(None)
    with pytest.raises(ValueError, match="one battery"):
        next(smattn.cases(merge=True, backward=True))
    assert list(smattn.cases(merge=True, categories=["causal"])) == []
    n = len(list(smattn.cases(merge=True, categories=["merge"])))
    assert n > 15 and len(list(smattn.cases(merge=True, vectors=""))) == 15  # "": no vectors


@pytest.mark.skipif(_cli() is None, reason="no smattn CLI (make check-python builds it)")
@pytest.mark.parametrize("seed", [0, 5])
def test_merge_cases_are_the_conform_battery(tmp_path, seed):
    """cases(merge=True) is the category "merge" of `smattn conform` for the seed: the same
    names and shapes in the same order."""
    out = tmp_path / "r.json"
    subprocess.run([_cli(), "conform", "--suite", "quick", "--seed", str(seed), "--only",
                    "merge/", "--json", str(out)], check=True, cwd=str(tmp_path),
                   stdout=subprocess.DEVNULL)
    want = [(c["name"], c["shape"]["B"], c["shape"]["S"], c["shape"]["Hq"], c["shape"]["Dv"])
            for c in json.loads(out.read_text())["cases"] if c["category"] == "merge"]
    got = [(c.name, c.shape["B"], c.shape["S"], c.shape["Hq"], c.shape["Dv"])
           for c in smattn.cases(merge=True, seed=seed)]
    assert want and got == want
