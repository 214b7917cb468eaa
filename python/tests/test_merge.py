# SPDX-License-Identifier: MIT
"""test_merge.py: smattn.merge_reference and smattn.merge (SPEC 9) from NumPy: the merge of
the oracle's partials over a split of the keys is the full attention, the kernel agrees with
the oracle and gives the same bits on every ISA and thread count, the conventions and the
errors name their argument."""
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
