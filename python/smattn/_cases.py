# SPDX-License-Identifier: MIT
"""_cases.py: the conformance battery (conform/battery.c, the cases `smattn conform` runs)
as NumPy arrays and keyword arguments, so that a kernel in any framework can run it in its
own process and be judged case by case with check()."""
import ctypes
from dataclasses import dataclass, field
from typing import Any, Dict, List, Optional

import numpy as np

from . import _api, _lib, _ragged
from ._api import _EMPTY, _EMPTY_LSE, _integer, _layout, check, check_softmax
from ._backward import check_backward
from ._merge import MergeProblem, check_merge

_CAP_NAMES = ("causal_lower_right", "causal_upper_left", "window", "kv_lens", "q_lens", "mask",
              "bias", "sinks", "softcap", "gqa", "strides", "lse", "p", "dv", "sink_in_max",
              "deterministic", "packed_q", "packed_kv", "paged_nhd", "paged_hnd")
# bit -> feature name (smattn_kernel.h): bits 0-19 above, then ALiBi's 22-24
_CAP_BITS = list(enumerate(_CAP_NAMES)) + [(22, "alibi_symmetric"), (23, "alibi_one_sided"),
                                           (24, "alibi_mask")]
_CAP_BITS += [(20, "descale_tensor"), (21, "descale_head")]  # descales (SPEC 2.9)
_CAP_BITS.sort()
_ALIBI_NAME = {1: "symmetric", 2: "one_sided", 3: "mask"}
_DTYPE_NAME = {0: "float64", 1: "float32", 2: "float16", 3: "bfloat16", 5: "float8_e4m3fn",
               6: "float8_e5m2", 7: "q8_0", 8: "q4_0"}
# the quantised dtypes (SPEC 2.9): the case's arrays are their bytes, named in these kwargs
_QUANT_KW = {5: "fp8_e4m3", 6: "fp8_e5m2", 7: "q8_0", 8: "q4_0"}
_QUANT_BYTES = {5: (1, 1), 6: (1, 1), 7: (34, 32), 8: (18, 32)}  # bytes per element block
_EMPTY_NAME = {v: k for k, v in _EMPTY.items()}
_EMPTY_LSE_NAME = {v: k for k, v in _EMPTY_LSE.items()}


@dataclass
class Case:
    """One battery case. op "attention": call your kernel as kernel(case.q, case.k, case.v,
    **case.kwargs) (or read case.kwargs and map them to your kernel's own arguments), then
    judge its O (and LSE, P) with case.check(o, lse=...). op "softmax": x holds the scores
    [B, Hq, S, T] (q, k, v are None); judge P (and LSE) with case.check(p=p, lse=...).

    name, category: as `smattn conform` prints them. q, k, v: in `layout` (BSHD by default);
    a "strides" case's rows are padded (pitch > D) and the padding holds NaN. kwargs: scale,
    causal ("lower_right", "upper_left" or None), window, kv_lens, q_lens, bias, mask,
    sinks, softcap: only those the case uses; empty_rows and empty_lse: always (the
    convention the case is judged by, SPEC 3.4). features: the capability names
    of smattn_kernel.h the case needs (skip cases your kernel does not claim). kv_dtype,
    q_dtype, out_dtype: the dtypes the case is about, for K and V, for Q (X), bias and
    sinks, and for the outputs ("float32" unless it is a dtype case; a "float16" input is a
    float16 array; "bfloat16" inputs are float32 arrays holding bfloat16 values exactly;
    `smattn conform` asks a kernel for out_dtype outputs when it claims that dtype).
    garbage: invisible slots (masked, padded, never-seen keys) hold NaN or infinity on
    purpose (SPEC 3.6). visible(): which keys each row sees (the dense twin's for a layout case). shape: the
    problem's B, S, T, Hq, Hkv, D, Dv (of the dense, padded twin for a layout case).

    A ragged or paged case (category "layout", features packed_q, packed_kv, paged_nhd or
    paged_hnd; SPEC 2.7) comes laid out as `smattn conform` hands it to a kernel: q packed
    [total_q, Hq, D] with kwargs cu_seqlens_q, k and v packed [total_k, Hkv, .] with
    cu_seqlens_k (and seqused_k) or page caches [num_pages, page_size, Hkv, .] (kv_layout
    "HND": [num_pages, Hkv, page_size, .]) with block_table and kv_lens. Every slot no
    sequence uses holds NaN or an infinity, unused block-table entries hold garbage (-1,
    huge values); its O is [total_q, Hq, Dv] when q is packed."""
    name: str
    category: str
    q: Optional[np.ndarray]
    k: Optional[np.ndarray]
    v: Optional[np.ndarray]
    kwargs: Dict[str, Any]
    features: List[str]
    kv_dtype: str
    garbage: bool
    layout: str = "bshd"
    seed: int = 0
    op: str = "attention"
    x: Optional[np.ndarray] = None
    q_dtype: str = "float32"
    out_dtype: str = "float32"
    shape: Dict[str, int] = field(default_factory=dict)
    _extra: Dict[str, Any] = field(default_factory=dict, repr=False)
    do: Optional[np.ndarray] = None
    dlse: Optional[np.ndarray] = None
    o_parts: Optional[np.ndarray] = None
    lse_parts: Optional[np.ndarray] = None

    def check_backward(self, dq, dk, dv, dbias=None, dsinks=None, precision="float32",
                       **overrides):
        """A backward case (op "backward", cases(backward=True)): check_backward(dq, dk, dv,
        self.q, self.k, self.v, self.do, dlse=self.dlse, layout=self.layout, **self.kwargs)
        for the gradients of a kernel run as kernel_backward(case.q, case.k, case.v,
        case.do, dlse=case.dlse, **case.kwargs)."""
        if self.op != "backward":
            raise TypeError("%s is not a backward case: take cases(backward=True)" % self.name)
        kw = dict(self.kwargs, **overrides)
        return check_backward(dq, dk, dv, self.q, self.k, self.v, self.do, dlse=self.dlse,
                              dbias=dbias, dsinks=dsinks, precision=precision,
                              layout=self.layout, **kw)

    def check(self, o=None, lse=None, p=None, precision="float32", **overrides):
        """check(o, self.q, self.k, self.v, layout=self.layout, **self.kwargs); for a
        softmax case check_softmax(p, self.x, **self.kwargs)."""
        kw = dict(self.kwargs, **overrides)
        if self.op == "merge":
            if p is not None:
                raise TypeError("%s is a merge case: it has no P; pass the merged O (and LSE "
                                "as lse=)" % self.name)
            return check_merge(o, lse, self.o_parts, self.lse_parts, precision=precision, **kw)
        if self.op == "backward":
            raise TypeError("%s is a backward case: judge the kernel's gradients with "
                            "case.check_backward(dq, dk, dv)" % self.name)
        if self.op == "softmax":
            if o is not None:
                raise TypeError("%s is a softmax case: it has no O; pass the kernel's P as "
                                "p= (and LSE as lse=)" % self.name)
            return check_softmax(p, self.x, lse=lse, precision=precision, **kw)
        return check(o, self.q, self.k, self.v, lse=lse, p=p, precision=precision,
                     layout=self.layout, **kw)

    def visible(self):
        """bool [B, Hq, S, T]: True where key j is visible to row (b, h, i) under the case's
        causal, window, kv_lens, q_lens and mask (SPEC 3.1-3.3, 3.5's bool mask; the C
        library's smattn_visible), so that a kernel that takes only a mask or an additive
        bias need not rebuild those rules: pass mask=case.visible(), or add
        np.where(case.visible(), 0, -np.inf) to the case's bias (a -inf bias entry hides
        its key as well, SPEC 3.5). Rows with no visible key are empty rows: their output
        follows kwargs["empty_rows"] (SPEC 3.4), whatever the mask gives. A layout case's
        is its dense twin's, [B, Hq, S, T] of `shape`, under its sequences' own S_b and T_b
        (cu_seqlens_q, cu_seqlens_k, seqused_k, kv_lens; SPEC 2.7): row i of sequence b is
        packed row cu_seqlens_q[b] + i of q, key j its key j wherever its page is."""
        if self.op == "merge":
            raise TypeError("%s is a merge case: partial states have no keys to see" % self.name)
        kw = {n: self.kwargs[n] for n in ("causal", "window", "kv_lens", "q_lens", "mask")
              if n in self.kwargs}
        if self.op == "softmax":
            return _api._visibility(_api._build_softmax(self.x, **kw))
        rag = {n: a for n, a in self.kwargs.items() if n in _ragged.ARGS}
        if not _ragged.given(rag):
            return _api._visibility(_api._build(self.q, self.k, self.v, layout=self.layout, **kw))
        # the layout's own S and T are its longest sequences': the twin's may be longer (the
        # rows and keys past them are no sequence's), and the mask has the twin's shape
        mask = kw.pop("mask", None)
        b = _api._build(self.q, self.k, self.v, layout=self.layout, **kw, **rag)
        sh = self.shape
        out = np.zeros((sh["B"], sh["Hq"], sh["S"], sh["T"]), dtype=bool)
        out[:, :, :b.S, :b.T] = _api._visibility(b)
        if mask is not None:
            out &= np.broadcast_to(np.asarray(mask, dtype=bool), out.shape)
        return out

    def __repr__(self):
        if self.op == "merge":
            return "Case(%s, merge o_parts%s lse_parts%s, base %s)" % (
                self.name, tuple(self.o_parts.shape), tuple(self.lse_parts.shape),
                self.kwargs["base"])
        ins = ("x%s" % (tuple(self.x.shape),) if self.op == "softmax" else
               "q%s k%s v%s" % (tuple(self.q.shape), tuple(self.k.shape), tuple(self.v.shape)))
        return "Case(%s, %s%s, %s)" % (self.name, "softmax " if self.op == "softmax" else "",
                                       ins, ", ".join(self.features) or "plain")


def _array(t, count, shape, dtype):
    """The battery's binary64 (or bool) buffer, copied: (flat buffer, shape, element
    strides), so that a strided case keeps its padded pitch; None if the tensor is absent."""
    if count == 0 or not t.data:
        return None
    ctype = ctypes.c_uint8 if dtype == np.bool_ else ctypes.c_double
    buf = np.ctypeslib.as_array(ctypes.cast(t.data, ctypes.POINTER(ctype)), shape=(count,))
    buf = buf.astype(dtype, copy=True)
    return buf, shape, [int(s) for s in list(t.stride)[:len(shape)]]


def _round_bf16(a):
    """binary64 values to the nearest bfloat16 (ties to even), as float32 (NaN kept NaN)."""
    bits = a.astype(np.float32).view(np.uint32).astype(np.uint64)
    r = ((bits + 0x7FFF + ((bits >> 16) & 1)) >> 16) << 16
    r = np.where(np.isnan(a), (bits & 0xFFFF0000) | 0x00400000, r)
    return r.astype(np.uint32).view(np.float32)


def _cast(t, dtype):
    """A view, with the battery's strides, of its flat buffer rounded to dtype."""
    if t is None:
        return None
    buf, shape, st = t
    if dtype == np.bool_:
        out = buf
    elif dtype == "bfloat16":
        out = _round_bf16(buf)
    else:
        with np.errstate(over="ignore"):  # the extreme cases overflow float16 on purpose
            out = buf.astype(dtype)
    return np.lib.stride_tricks.as_strided(out, shape=shape,
                                           strides=[s * out.itemsize for s in st])


def cases(suite="quick", seed=0, *, dtype="float32", layout="bshd", vectors=None,
          regressions=None, categories=None, backward=False, merge=False):
    """Yield the battery of `smattn conform --suite SUITE --seed SEED`, case for case and in
    its order, as Case objects: the golden vectors of SPEC 8, the fuzzer finds (category
    "regressions"), edge cases by category, random prefill / chunked / decode sweeps, and
    the softmax op's cases (op "softmax": skip them if your kernel does attention only, as
    `smattn conform` does for a kernel without smattn_plugin_softmax).

    suite: "quick" (what `make demo` and the CI example run) or "full"; seed: the sweeps'
    seed (as `smattn conform --seed`, an integer in [0, 2**64)). dtype: the dtype of q (x),
    bias and sinks, and of k and v, where the case does not name another ("float32"
    default, "float64" for the battery's exact binary64 values, or "float16"; under
    "float64" a bias that ALiBi's mask mode multiplies by the slope stays float32, which
    holds its distances exactly: SPEC 2.8 takes no binary64 bias there). layout:
    "bshd" or "bhsd", any case (views, no copy). vectors, regressions: the golden vectors'
    and the fuzzer finds' directories ("" for none; default: found in the source tree, the
    wheel, or the installed share/smattn, as `smattn conform` finds them). categories: only
    cases of these categories (e.g. ["causal", "gqa"]).

    backward=True: the backward cases instead (SPEC 10): the battery's attention cases the
    exact backward takes (ALiBi and the ragged and paged layouts included, but not a block
    table sharing a page, nor quantised inputs), each with op "backward", the feature
    "backward", a dO in O's shape and layout (case.do, drawn from seed and the case's
    position, in the case's q dtype; [total_q, Hq, Dv] for a packed case) and, every other
    case, a dLSE [B, Hq, S] ([Hq, total_q] packed; case.dlse, else None). Run the kernel's backward on case.q, case.k, case.v, case.do (and
    case.dlse) with case.kwargs and judge its gradients with case.check_backward(dq, dk,
    dv); the fast one is smattn.attention_backward (float32 kwargs, finite inputs: skip
    cases with garbage).

    merge=True: the merge cases instead (SPEC 9; the category "merge" that `smattn conform`
    runs on a kernel exporting smattn_plugin_merge, the same cases for the same seed): op
    "merge", the feature "merge", partial states case.o_parts [N, B, S, Hq, Dv] and
    case.lse_parts [N, B, Hq, S] in `dtype` (LSEs spread over +-1000, -inf and +inf empty
    parts, rows whose parts are all empty, base 2), and kwargs base, empty_parts, empty_rows
    and empty_lse (merge_reference's keywords). Merge them with the kernel, e.g.
    smattn.merge(case.o_parts, case.lse_parts, **case.kwargs), and judge the merged O and
    LSE with case.check(o, lse=lse): smattn.check_merge under smattn_merge_bound for
    `precision` (serial sums; "opt": smattn.merge's model)."""
    if merge and backward:
        raise ValueError("merge=True and backward=True: take one battery at a time")
    if merge:
        yield from _merge_cases(suite, seed, dtype, categories, vectors)
        return
    layout = _layout(layout)
    if suite == "huge":  # stride-0 and sparse views over gigabytes of reserved memory
        raise ValueError("suite 'huge' runs through `smattn conform --suite huge` only: its "
                         "views (stride-0 broadcasts, offsets past 2^31 elements) have no "
                         "NumPy array form of a sane size")
    if dtype not in ("float64", "float32", "float16"):
        raise TypeError("dtype %r: want 'float64', 'float32' or 'float16'" % (dtype,))
    seed = _integer(seed, "seed", 64, signed=False)
    shim = _lib.shim()
    vdir = vectors if vectors is not None else _lib.vectors_dir()
    rdir = regressions if regressions is not None else _lib.regressions_dir()
    err = ctypes.create_string_buffer(512)
    bat = shim.smattn_py_battery_new(str(suite).encode(), seed,
                                     None if vdir is None else vdir.encode(),
                                     None if rdir is None else rdir.encode(), err, 512)
    if not bat:
        raise ValueError(err.value.decode(errors="replace"))
    try:
        n = shim.smattn_py_battery_size(bat)
        for idx in range(n):
            c = _lib.PyCase()
            if shim.smattn_py_battery_case(bat, idx, ctypes.byref(c)):
                break
            cat = c.category.decode()
            if categories is not None and cat not in categories:
                continue
            if not backward:
                yield _make_case(c, dtype, layout, seed, bat, idx)
            elif (c.prob.op == 0 and not c.prob.descale and c.kv_dtype <= 3
                  and c.q_dtype <= 3):
                # the backward takes binary64/32/16 and bfloat16 inputs only (SPEC 10.6),
                # and no block table sharing a page (SPEC 10.1)
                case = _make_case(c, dtype, layout, seed, bat, idx)
                if not _shares_page(case):
                    yield _backward_case(case, idx, seed)
    finally:
        shim.smattn_py_battery_free(bat)


_JUNK = (np.nan, np.inf, -np.inf)
_BASE_NAME = {0: "e", 1: "2"}
_PARTS_NAME = {0: "neg_inf", 1: "pos_inf"}


def _merge_cases(suite, seed, dtype, categories, vectors):
    """The merge battery (conform/merge_battery.c) as Case objects, in its order, then the
    merge golden vectors as "merge/golden_<name>". Its cases do not depend on the suite."""
    if suite not in ("quick", "full"):
        raise ValueError("suite %r: want 'quick' or 'full'" % (suite,))
    if dtype not in ("float64", "float32", "float16"):
        raise TypeError("dtype %r: want 'float64', 'float32' or 'float16'" % (dtype,))
    seed = _integer(seed, "seed", 64, signed=False)
    if categories is not None and "merge" not in categories:
        return
    shim = _lib.shim()
    vdir = vectors if vectors is not None else _lib.vectors_dir()
    bat = shim.smattn_py_merge_battery_new(seed, None if vdir is None else vdir.encode())
    if not bat:
        raise MemoryError("smattn: out of memory building the merge battery")
    try:
        for idx in range(shim.smattn_py_merge_battery_size(bat)):
            name = ctypes.c_char_p()
            p = MergeProblem()
            o = ctypes.POINTER(ctypes.c_double)()
            lp = ctypes.POINTER(ctypes.c_double)()
            if shim.smattn_py_merge_battery_case(bat, idx, ctypes.byref(name), ctypes.byref(p),
                                                 ctypes.byref(o), ctypes.byref(lp)):
                break
            N, B, S, H, Dv = p.N, p.B, p.S, p.Hq, p.Dv
            o_parts = np.ctypeslib.as_array(o, shape=(N * B * S * H * Dv,)).astype(dtype)
            lse_parts = np.ctypeslib.as_array(lp, shape=(N * B * H * S,)).astype(dtype)
            kw = {"base": _BASE_NAME[p.lse_base], "empty_parts": _PARTS_NAME[p.empty_parts],
                  "empty_rows": _EMPTY_NAME[p.empty_rows],
                  "empty_lse": _EMPTY_LSE_NAME[p.empty_lse]}
            yield Case(name.value.decode(), "merge", None, None, None, kw, ["merge"], dtype,
                       False, "bshd", seed, "merge", None, dtype, dtype,
                       dict(N=N, B=B, S=S, Hq=H, Dv=Dv),
                       o_parts=o_parts.reshape(N, B, S, H, Dv),
                       lse_parts=lse_parts.reshape(N, B, H, S))
    finally:
        shim.smattn_py_merge_battery_free(bat)


def _lay_out(c, q, k, v, kw):
    """A ragged or paged case (SPEC 2.7) as `smattn conform` hands it to a kernel claiming
    its layout (conform_case_lay_out): Q packed [total_q, Hq, D] with cu_seqlens_q, K and V
    packed [total_k, Hkv, .] with cu_seqlens_k (and seqused_k) or page caches [num_pages,
    page_size, Hkv, .] (kv_layout "HND": [num_pages, Hkv, page_size, .]) with block_table
    and kv_lens; every slot no sequence uses holds NaN or an infinity, unused block-table
    entries garbage. q, k, v: the dense twin's BSHD arrays; kw is updated in place."""
    L = c.layout.contents
    B = c.prob.B
    lens_q = kw.pop("q_lens", None) if L.cu_seqlens_q else kw.get("q_lens")
    lens_k = kw["kv_lens"]
    if L.cu_seqlens_q:
        cu = np.array([L.cu_seqlens_q[b] for b in range(B + 1)], dtype=np.int64)
        kw["cu_seqlens_q"] = cu
        q = np.concatenate([q[b, :lens_q[b]] for b in range(B)], axis=0)
    if L.cu_seqlens_k:
        cu = np.array([L.cu_seqlens_k[b] for b in range(B + 1)], dtype=np.int64)
        kw["cu_seqlens_k"] = cu
        del kw["kv_lens"]
        if L.seqused_k:
            kw["seqused_k"] = np.array([L.seqused_k[b] for b in range(B)], dtype=np.int64)
        out = []
        for a in (k, v):
            p = np.empty((int(cu[B]),) + a.shape[2:], dtype=a.dtype)
            p.reshape(-1)[:] = np.resize(np.array(_JUNK, dtype=a.dtype), p.size)
            for b in range(B):
                p[cu[b]:cu[b] + lens_k[b]] = a[b, :lens_k[b]]
            out.append(p)
        k, v = out
    elif L.block_table:
        ps, npages, maxp = int(L.page_size), int(L.num_pages), int(L.max_pages)
        # the table's rows bt_stride long (garbage past max_pages), handed as a slice of
        # max_pages columns: the row stride stays the case's
        wide = np.array([[L.block_table[b * L.bt_stride + j] for j in range(int(L.bt_stride))]
                         for b in range(B)], dtype=np.int32).reshape(B, int(L.bt_stride))
        table = wide[:, :maxp]
        kw["block_table"] = table
        out = []
        for a in (k, v):
            p = np.empty((npages, ps) + a.shape[2:], dtype=a.dtype)
            p.reshape(-1)[:] = np.resize(np.array(_JUNK, dtype=a.dtype), p.size)
            for b in range(B):
                for t in range(int(lens_k[b])):
                    p[table[b, t // ps], t % ps] = a[b, t]
            out.append(np.ascontiguousarray(np.swapaxes(p, 1, 2)) if c.kv_hnd else p)
        k, v = out
        if c.kv_hnd:
            kw["kv_layout"] = "HND"
    return q, k, v, "bshd"


def _quantised(bat, idx, c, q, k, v, layout, kw):
    """A quant case's Q, K and V as `smattn conform` hands them to a kernel (SPEC 2.9): uint8
    fp8 bit patterns of the arrays' shapes, or q8_0 / q4_0 raw blocks with the last axis in
    bytes (as `smattn gen` writes them), named in kw's fp8_e4m3, fp8_e5m2, q8_0 or q4_0; the
    descales in kw's q_descale, k_descale, v_descale (a number or [B, Hkv])."""
    from . import _lib
    p = c.prob
    shapes = ((p.B, p.S, p.Hq, p.D), (p.B, p.T, p.Hkv, p.D), (p.B, p.T, p.Hkv, p.Dv))
    codes = (c.q_dtype, c.kv_dtype, c.kv_dtype)
    out = [q, k, v]
    for w, (name, shape, code) in enumerate(zip("qkv", shapes, codes)):
        if code not in _QUANT_KW:
            continue
        size, per = _QUANT_BYTES[code]
        shp = shape[:3] + (shape[3] // per * size,)
        a = np.empty(shp, dtype=np.uint8)
        n = _lib.shim().smattn_py_battery_case_quant(bat, idx, w, a.ctypes.data, a.nbytes)
        if n != a.nbytes:
            raise RuntimeError("smattn: case %s: its %s could not be quantised"
                               % (c.name.decode(), name))
        kw.setdefault(_QUANT_KW[code], []).append(name)
        out[w] = np.swapaxes(a, 1, 2) if layout == "bhsd" else a
    if p.descale:
        ds = _lib.Descale.from_address(p.descale)
        for name in "qkv":
            head = getattr(ds, name + "_head")
            if head:
                kw[name + "_descale"] = np.array(
                    [head[e] for e in range(p.B * p.Hkv)], dtype=np.float64).reshape(p.B, p.Hkv)
            elif getattr(ds, name) != 1.0:
                kw[name + "_descale"] = float(getattr(ds, name))
    for key in set(_QUANT_KW.values()) & set(kw):
        kw[key] = tuple(kw[key])
    return out


def _make_case(c, dtype, layout, seed, bat=None, idx=None):
    p = c.prob
    B, S, T, Hq, Hkv, D, Dv = p.B, p.S, p.T, p.Hq, p.Hkv, p.D, p.Dv
    cnt = list(c.count)
    softmax = p.op == 1
    bias = _array(c.in_.bias, cnt[4], (B, Hq, S, T), np.float64)
    mask = _array(c.in_.mask, cnt[5], (B, Hq, S, T), np.bool_)
    sinks = _array(c.in_.sinks, cnt[6], (Hq,), np.float64)
    kvd = _DTYPE_NAME.get(c.kv_dtype, "float32")
    qd = _DTYPE_NAME.get(c.q_dtype, "float32")
    outd = _DTYPE_NAME.get(c.out_dtype, "float32")
    # what `smattn conform` hands a kernel (conform_case_materialise): Q, X, bias and sinks
    # in the case's q dtype, K and V in its kv dtype; float32 there means "the caller's"
    q_cast = dtype if qd == "float32" else qd
    kv_cast = dtype if kvd == "float32" else kvd
    if c.q_dtype in _QUANT_KW:  # fp8 Q: bias and sinks stay binary32 (SPEC 2.9), and Q,
        q_cast = "float32"      # K and V come from _quantised
    if c.kv_dtype in _QUANT_KW:
        kv_cast = "float32"
    # ALiBi's mask mode multiplies the bias by the slope, exact only for a binary32 or
    # narrower bias (SPEC 2.8; the library refuses a binary64 one): its distance mask stays
    # the float32 cases' (llama.cpp's f16 distances are exact in binary32)
    bias_cast = "float32" if p.alibi_mode == 3 and q_cast == "float64" else q_cast
    bias, sinks = _cast(bias, bias_cast), _cast(sinks, q_cast)
    mask = _cast(mask, np.bool_)
    q = k = v = x = None
    if softmax:
        x = _cast(_array(c.in_.x, cnt[3], (B, Hq, S, T), np.float64), q_cast)
    else:
        q = _cast(_array(c.in_.q, cnt[0], (B, S, Hq, D), np.float64), q_cast)
        k = _cast(_array(c.in_.k, cnt[1], (B, T, Hkv, D), np.float64), kv_cast)
        v = _cast(_array(c.in_.v, cnt[2], (B, T, Hkv, Dv), np.float64), kv_cast)
        if layout == "bhsd" and not c.layout:  # a layout case has its own (SPEC 2.7)
            q, k, v = (np.swapaxes(a, 1, 2) for a in (q, k, v))
    kw = {"scale": p.scale}
    if p.causal:
        kw["causal"] = "lower_right" if p.causal == 1 else "upper_left"
    if p.window_left != -1 or p.window_right != -1:
        kw["window"] = (int(p.window_left), int(p.window_right))
    for name, ptr in (("kv_lens", p.kv_lens), ("q_lens", p.q_lens)):
        if ptr:
            kw[name] = np.array([ptr[b] for b in range(B)], dtype=np.int64)
    for name, a in (("bias", bias), ("mask", mask), ("sinks", sinks)):
        if a is not None:
            kw[name] = a
    if p.softcap > 0:
        kw["softcap"] = p.softcap
    if p.alibi_mode:  # SPEC 2.8: [Hq], or [B, Hq] per batch
        n = (B if p.alibi_slopes_per_batch else 1) * Hq
        sl = np.array([p.alibi_slopes[k] for k in range(n)], dtype=np.float32)
        kw["alibi_mode"] = _ALIBI_NAME[p.alibi_mode]
        kw["alibi_slopes"] = sl.reshape(B, Hq) if p.alibi_slopes_per_batch else sl
    # the conventions of the case, always: check() judges by them, so the kernel must follow
    kw["empty_rows"] = _EMPTY_NAME[p.empty_rows]
    kw["empty_lse"] = _EMPTY_LSE_NAME[p.empty_lse]
    if not softmax and (c.q_dtype in _QUANT_KW or c.kv_dtype in _QUANT_KW):
        q, k, v = _quantised(bat, idx, c, q, k, v, layout, kw)
    feats = [n for bit, n in _CAP_BITS if c.caps & (1 << bit)]
    if c.layout:
        q, k, v, layout = _lay_out(c, q, k, v, kw)
    return Case(c.name.decode(), c.category.decode(), q, k, v, kw, feats, kvd,
                bool(c.garbage), layout, seed, "softmax" if softmax else "attention", x, qd,
                outd, dict(B=B, S=S, T=T, Hq=Hq, Hkv=Hkv, D=D, Dv=Dv))


def _shares_page(case):
    """Whether a case's block table names one page in two used entries (SPEC 10.1)."""
    kw = case.kwargs
    table, lens = kw.get("block_table"), kw.get("kv_lens")
    if table is None or lens is None:
        return False
    t = np.asarray(table)
    hnd = str(kw.get("kv_layout") or "NHD").upper() == "HND"
    ps = int(case.k.shape[2 if hnd else 1])  # the caches' page size
    used = [int(t[b, col]) for b in range(t.shape[0]) for col in range(-(-int(lens[b]) // ps))]
    return len(used) != len(set(used))


def _backward_case(case, idx, seed):
    """An attention case made a backward case: dO (and every other case dLSE) from a
    generator seeded by (seed, idx), in the dtype of the case's q; in O's and LSE's packed
    shapes for a case with cu_seqlens_q (SPEC 2.7)."""
    rng = np.random.default_rng([seed, idx])
    sh = case.shape
    packed = case.kwargs.get("cu_seqlens_q") is not None
    if packed:
        o_shape, l_shape = (case.q.shape[0], sh["Hq"], sh["Dv"]), (sh["Hq"], case.q.shape[0])
    elif case.layout == "bshd":
        o_shape, l_shape = (sh["B"], sh["S"], sh["Hq"], sh["Dv"]), (sh["B"], sh["Hq"], sh["S"])
    else:
        o_shape, l_shape = (sh["B"], sh["Hq"], sh["S"], sh["Dv"]), (sh["B"], sh["Hq"], sh["S"])
    qd = case.q.dtype if case.q.dtype != np.uint16 else np.float32
    case.do = rng.standard_normal(o_shape).astype(qd)
    if idx % 2:
        case.dlse = rng.standard_normal(l_shape).astype(qd)
    case.op = "backward"
    case.features = case.features + ["backward"]
    return case
