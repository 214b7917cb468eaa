# SPDX-License-Identifier: MIT
"""_merge.py: merge_reference() and merge(): partial attention states (O_n, LSE_n) merged
exactly (smattn_ref_merge) or by the kernel (smattn_merge), SPEC 9. Shapes as in the case
files of SPEC 7.1: o_parts [N, B, S, H, Dv] (or [N, S, H, Dv]), lse_parts [N, B, H, S] (or
[N, H, S]); the results are O [B, S, H, Dv] and LSE [B, H, S] (without B likewise)."""
import ctypes

import numpy as np

from . import _lib
from ._api import (_EMPTY_LSE, _ISAS, _NP_OF, BF16, F16, F32, F64, _aligned, _asarray,
                   _dtype_code, _element_strides, _integer, _out_code, _status_error)

_i64 = ctypes.c_int64


class MergeProblem(ctypes.Structure):  # smattn_merge_problem
    _fields_ = [("N", _i64), ("B", _i64), ("S", _i64), ("Hq", _i64), ("Dv", _i64),
                ("lse_base", ctypes.c_int), ("empty_parts", ctypes.c_int),
                ("empty_rows", ctypes.c_int), ("empty_lse", ctypes.c_int)]


class MergeInputs(ctypes.Structure):  # smattn_merge_inputs
    _fields_ = [("o_parts", _lib.Tensor), ("o_part_stride", _i64),
                ("lse_parts", _lib.Tensor), ("lse_part_stride", _i64)]


_P = ctypes.POINTER
_ref_merge = _lib._proto("smattn_ref_merge", ctypes.c_int, _P(MergeProblem), _P(MergeInputs),
                         _P(_lib.Outputs), _P(_lib.RefConfig))
_merge = _lib._proto("smattn_merge", ctypes.c_int, _P(MergeProblem), _P(MergeInputs),
                     _P(_lib.Outputs), _P(_lib.OptConfig))

_BASES = {"e": 0, "2": 1, 2: 1}
_PARTS = {"neg_inf": 0, "pos_inf": 1}
_ROWS = {"zero": 0, "nan": 1}


def _choice(table, value, name):
    try:
        return table[value]
    except (KeyError, TypeError):
        pass
    raise ValueError("%s %r: want one of %s" % (name, value, ", ".join(
        repr(k) for k in table if isinstance(k, str))))


def _run(kind, o_parts, lse_parts, base, empty_parts, empty_rows, empty_lse, dtype, threads,
         isa):
    o = _asarray(o_parts, "o_parts")
    ls = _asarray(lse_parts, "lse_parts")
    if o is None or ls is None:
        raise TypeError("o_parts and lse_parts: want arrays")
    if o.ndim not in (4, 5) or ls.ndim != o.ndim - 1:
        raise ValueError("o_parts %s and lse_parts %s: want [N,B,S,H,Dv] and [N,B,H,S], or "
                         "[N,S,H,Dv] and [N,H,S]" % (o.shape, ls.shape))
    batched = o.ndim == 5
    o5, l4 = (o, ls) if batched else (o[:, None], ls[:, None])
    # negative, partial-element or misaligned strides: an aligned copy (the same values)
    o5 = o5 if _element_strides(o5) is not None else _aligned(o5)
    l4 = l4 if _element_strides(l4) is not None else _aligned(l4)
    N, B, S, H, Dv = o5.shape
    if l4.shape != (N, B, H, S):
        raise ValueError("lse_parts %s does not match o_parts %s (want %s)"
                         % (ls.shape, o.shape, (N, B, H, S) if batched else (N, H, S)))
    p = MergeProblem(N=N, B=B, S=S, Hq=H, Dv=Dv)
    p.lse_base = _choice(_BASES, base, "base")
    p.empty_parts = _choice(_PARTS, empty_parts, "empty_parts")
    if empty_rows == "mean":
        raise ValueError("empty_rows 'mean': partial states do not carry the keys' values "
                         "(SPEC 9.1); want 'zero' or 'nan'")
    p.empty_rows = _choice(_ROWS, empty_rows, "empty_rows")
    p.empty_lse = _choice(_EMPTY_LSE, empty_lse, "empty_lse")
    inp = MergeInputs()
    for t, a, name in ((inp.o_parts, o5, "o_parts"), (inp.lse_parts, l4, "lse_parts")):
        st = _element_strides(a)
        t.data = a.ctypes.data if a.size else None
        t.dtype = _dtype_code(a, name)
        for k in range(4):
            t.stride[k] = st[k + 1] if k + 1 < a.ndim else 0
    inp.o_part_stride = _element_strides(o5)[0]
    inp.lse_part_stride = _element_strides(l4)[0]
    codes = {inp.o_parts.dtype, inp.lse_parts.dtype}
    if dtype is None:  # the inputs' widest float type (float16 with bfloat16: float32)
        code = F64 if F64 in codes else F32 if F32 in codes or codes == {F16, BF16} else codes.pop()
    else:
        code = _out_code(dtype)
    npdt = _NP_OF[code]
    o_out = np.empty((B, S, H, Dv), dtype=npdt)
    l_out = np.empty((B, H, S), dtype=npdt)
    out = _lib.Outputs()
    for t, a in ((out.o, o_out), (out.lse, l_out)):
        st = _element_strides(a)
        t.data = a.ctypes.data if a.size else None
        t.dtype = code
        for k in range(a.ndim):
            t.stride[k] = st[k]
    threads = _integer(threads, "threads", 31, minimum=0)
    keep = (o5, l4)  # noqa: F841 (alive across the call)
    if kind == "ref":
        cfg = _lib.RefConfig(threads=threads)
        st = _ref_merge(ctypes.byref(p), ctypes.byref(inp), ctypes.byref(out), ctypes.byref(cfg))
    else:
        if isa is not None and isa not in _ISAS:
            raise ValueError("isa %r: want None, %s" % (isa, ", ".join(map(repr, _ISAS))))
        cfg = _lib.OptConfig(threads=threads, isa=isa.encode() if isa else None)
        st = _merge(ctypes.byref(p), ctypes.byref(inp), ctypes.byref(out), ctypes.byref(cfg))
    if st:
        raise _status_error(st, "smattn.%s: " % ("merge_reference" if kind == "ref" else "merge"))
    if not batched:
        o_out, l_out = o_out[0], l_out[0]
    return o_out, l_out


def merge_reference(o_parts, lse_parts, *, base="e", empty_parts="neg_inf", empty_rows="zero",
                    empty_lse="neg_inf", dtype=None, threads=0):
    """The exact merge of partial attention states (smattn_ref_merge, SPEC 9): returns
    (O, LSE) with LSE = log_b sum_n b^LSE_n and O = sum_n b^(LSE_n - LSE) O_n, every element
    correctly rounded to `dtype` (None: the inputs' widest float type).
    o_parts [N, B, S, H, Dv] or [N, S, H, Dv]; lse_parts [N, B, H, S] or [N, H, S].
    base: "e" (FlashAttention, vLLM, smattn.reference) or "2" (FlashInfer).
    empty_parts: an empty partial's LSE, "neg_inf" or "pos_inf" (its O is never read).
    empty_rows ("zero", "nan") and empty_lse ("neg_inf", "pos_inf", "zero"): what a row whose
    partials are all empty gives."""
    return _run("ref", o_parts, lse_parts, base, empty_parts, empty_rows, empty_lse, dtype,
                threads, None)


def merge(o_parts, lse_parts, *, base="e", empty_parts="neg_inf", empty_rows="zero",
          empty_lse="neg_inf", dtype=None, threads=0, isa=None):
    """The merge kernel (smattn_merge, SPEC 9.4): merge_reference's arguments, float32,
    float16 or bfloat16 inputs and outputs (float64: TypeError), within smattn_merge_bound,
    the same bits for every thread count and ISA (None, "scalar", "avx2", "avx512")."""
    return _run("opt", o_parts, lse_parts, base, empty_parts, empty_rows, empty_lse, dtype,
                threads, isa)
