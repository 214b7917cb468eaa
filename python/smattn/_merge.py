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
_merge_bound = _lib._proto("smattn_merge_bound", ctypes.c_int, _P(MergeProblem), _P(MergeInputs),
                           _P(_lib.Precision), _P(_lib.Outputs), _P(_lib.Outputs))
_merge_opt_precision = _lib._proto("smattn_merge_opt_precision", _lib.Precision)
_error_ratio = _lib._proto("smattn_error_ratio", ctypes.c_double, ctypes.c_double,
                           ctypes.c_double, ctypes.c_double)
_load = _lib._proto("smattn_load", ctypes.c_double, ctypes.c_void_p, ctypes.c_int,
                     ctypes.c_int64)
_ulp_error = _lib._proto("smattn_ulp_error", ctypes.c_double, ctypes.c_double, ctypes.c_double,
                         ctypes.c_int)

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


def _prepare(o_parts, lse_parts, base, empty_parts, empty_rows, empty_lse):
    """The problem and inputs of a merge: (MergeProblem, MergeInputs, arrays to keep alive,
    batched)."""
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
    return p, inp, (o5, l4), batched


def _run(kind, o_parts, lse_parts, base, empty_parts, empty_rows, empty_lse, dtype, threads,
         isa):
    p, inp, keep, batched = _prepare(o_parts, lse_parts, base, empty_parts, empty_rows,
                                     empty_lse)
    B, S, H, Dv = p.B, p.S, p.Hq, p.Dv
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
    if kind == "ref":
        cfg = _lib.RefConfig(threads=threads)
        st = _ref_merge(ctypes.byref(p), ctypes.byref(inp), ctypes.byref(out), ctypes.byref(cfg))
    else:
        if isa is not None and isa not in _ISAS:
            raise ValueError("isa %r: want None, %s" % (isa, ", ".join(map(repr, _ISAS))))
        cfg = _lib.OptConfig(threads=threads, isa=isa.encode() if isa else None)
        st = _merge(ctypes.byref(p), ctypes.byref(inp), ctypes.byref(out), ctypes.byref(cfg))
    del keep  # alive across the call
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


def _merge_precision(precision):
    """The merge's kernel model (SPEC 9.4): "opt" is smattn.merge's; a format name or a dict
    as check() takes them, with serial sums (acc_len 0: a partial's term passes through up
    to N - 1 additions) unless the dict sets acc_len, as `smattn conform` judges a plugin's
    merge; a smattn.precision(...) as it is."""
    from ._api import _precision
    if isinstance(precision, str) and precision == "opt":
        return _merge_opt_precision()
    if isinstance(precision, dict) and precision.get("base") == "opt":
        raise ValueError("precision: base 'opt' is smattn.attention's model; for a merge give "
                         "'opt' alone, or fields on a format ('float32')")
    pm = _precision(precision, None)
    if not isinstance(precision, _lib.Precision) and not (
            isinstance(precision, dict) and "acc_len" in precision):
        pm.acc_len = 0
    return pm


def check_merge(o, lse, o_parts, lse_parts, *, base="e", empty_parts="neg_inf",
                empty_rows="zero", empty_lse="neg_inf", precision="float32"):
    """Judge a merge kernel's O and LSE (either may be None, not both) for the partial
    states o_parts, lse_parts (merge_reference's arguments and shapes) against the exact
    merge, element by element, under smattn_merge_bound (SPEC 9.5-9.6) for `precision`:
    "float32" (default), "float16", "bfloat16", "float64" (a plain kernel in that format,
    serial sums), "opt" (smattn.merge's model), a dict of smattn_precision fields or
    smattn.precision(...). Returns a Report (as check()): passed iff every error/bound
    ratio is <= 1; NaN and infinities are compared by class."""
    from ._api import Element, Report, _dtype_code
    if o is None and lse is None:
        raise TypeError("o and lse: both None; want the kernel's O, LSE or both")
    p, inp, keep, batched = _prepare(o_parts, lse_parts, base, empty_parts, empty_rows,
                                     empty_lse)
    pm = _merge_precision(precision)
    shapes = {"o": (p.B, p.S, p.Hq, p.Dv), "lse": (p.B, p.Hq, p.S)}
    got, exact, bound = _lib.Outputs(), _lib.Outputs(), _lib.Outputs()
    arrays = {}
    for name, arr in (("o", o), ("lse", lse)):
        if arr is None:
            continue
        a = _asarray(arr, name)
        want = shapes[name] if batched else shapes[name][1:]
        if tuple(a.shape) != want:
            raise ValueError("%s: shape %s, want %s" % (name, tuple(a.shape), list(want)))
        code = _dtype_code(a, name)
        a = np.ascontiguousarray(a.reshape(shapes[name]))
        e = np.zeros(shapes[name], dtype=np.float64)
        bd = np.zeros(shapes[name], dtype=np.float64)
        arrays[name] = (a, code, e, bd)
        for t, x, c in ((getattr(got, name), a, code), (getattr(exact, name), e, F64),
                        (getattr(bound, name), bd, F64)):
            st = _element_strides(x)
            t.data = x.ctypes.data if x.size else None
            t.dtype = c
            for k in range(x.ndim):
                t.stride[k] = st[k]
    st = _ref_merge(ctypes.byref(p), ctypes.byref(inp), ctypes.byref(exact),
                    ctypes.byref(_lib.RefConfig()))
    if not st:
        st = _merge_bound(ctypes.byref(p), ctypes.byref(inp), ctypes.byref(pm), ctypes.byref(got),
                          ctypes.byref(bound))
    del keep
    if st:
        raise _status_error(st, "smattn.check_merge: ")
    worst, worst_ratio, max_ulp, elements, mismatched, nonfinite, unbounded = (
        None, -1.0, 0.0, 0, 0, 0, 0)
    reason = ""
    for name, (a, code, e, bd) in arrays.items():
        flat = a.reshape(-1)
        for off, idx in enumerate(np.ndindex(*a.shape)):
            gv = _load(flat.ctypes.data, code, off)
            ev, bv = float(e[idx]), float(bd[idx])
            r = _error_ratio(gv, ev, bv)
            elements += 1
            if np.isinf(bv) and np.isfinite(ev):
                unbounded += 1
            if np.isfinite(ev) and not np.isfinite(gv):
                nonfinite += 1
            max_ulp = max(max_ulp, _ulp_error(gv, ev, code))
            uidx = idx if batched else idx[1:]
            if r > worst_ratio or r != r:
                worst_ratio = r
                worst = Element("O" if name == "o" else "LSE", tuple(int(x) for x in uidx),
                                gv, ev, bv)
            if not r <= 1:
                mismatched += 1
                if not reason:
                    reason = ("error/bound ratio %.4g at %s%s: got %.9g, exact %.9g, bound %.3g "
                              "(SPEC 9.5)" % (r, "O" if name == "o" else "LSE", list(uidx), gv,
                                              ev, bv))
    return Report(mismatched == 0, max(worst_ratio, 0.0), max_ulp, elements, unbounded,
                  nonfinite, reason, worst, mismatched, 0, 0)
