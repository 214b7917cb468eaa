# SPDX-License-Identifier: MIT
"""_api.py: reference(), attention(), check() and assert_close(): NumPy arrays in the
layouts of torch.nn.functional.scaled_dot_product_attention and flash_attn_func turned into
one smattn_problem (SPEC 2) and passed to the C library by pointer and strides."""
import ctypes
import math
import operator
from dataclasses import dataclass
from typing import Optional, Tuple

import numpy as np

from . import _lib

F64, F32, F16, BF16, BOOL = 0, 1, 2, 3, 4
_NP_OF = {F64: np.float64, F32: np.float32, F16: np.float16, BF16: np.uint16}
_OUT_DTYPES = {"float64": F64, "f64": F64, "float32": F32, "f32": F32, "float16": F16,
               "f16": F16, "half": F16, "bfloat16": BF16, "bf16": BF16}
_CAUSAL = {None: 0, False: 0, "none": 0,
           True: 1, "lower_right": 1, "bottom_right": 1,
           "upper_left": 2, "top_left": 2}
_EMPTY = {"zero": 0, "nan": 1, "mean": 2}
_EMPTY_LSE = {"neg_inf": 0, "pos_inf": 1, "zero": 2}
_LAYOUTS = ("bshd", "bhsd")
_ISAS = ("scalar", "avx2", "avx512")

# Status codes (smattn.h, pinned) and the Python exception each becomes.
_ERR_DTYPE, _ERR_NULL, _ERR_NOMEM, _ERR_UNSUPPORTED = 6, 1, 12, 15
_TYPE_ERRORS = (_ERR_NULL, _ERR_DTYPE, _ERR_UNSUPPORTED)
_RUNTIME_ERRORS = (13, 14, 17)  # precision limit, threads, internal


def _status_error(st, prefix=""):
    """The exception for status st, with the CLI's sentence: 'what went wrong (NAME)'."""
    msg = "%s%s (%s)" % (prefix, _lib.status_str(st).decode(), _lib.status_name(st).decode())
    if st in _TYPE_ERRORS:
        return TypeError(msg)
    if st == _ERR_NOMEM:
        return MemoryError(msg)
    if st in _RUNTIME_ERRORS:
        return RuntimeError(msg)
    return ValueError(msg)


def _dtype_code(a, name):
    """The smattn dtype of a float array: float64/32/16, bfloat16 (ml_dtypes' dtype, or
    uint16 holding bfloat16 bit patterns, as `smattn gen` writes them)."""
    dt = a.dtype
    if dt == np.float64:
        return F64
    if dt == np.float32:
        return F32
    if dt == np.float16:
        return F16
    if dt.name == "bfloat16" and dt.itemsize == 2:
        return BF16
    if dt == np.uint16:
        return BF16
    raise TypeError("%s: dtype '%s' is not a float type (want float64, float32, float16, or "
                    "bfloat16 as uint16 bit patterns)" % (name, dt))


def _asarray(x, name):
    """A NumPy view of x (an ndarray, a CPU torch tensor without grad, anything with
    __array__); None stays None."""
    if x is None:
        return None
    try:
        a = np.asarray(x)
    except Exception as e:  # e.g. a torch tensor that requires grad, or on a GPU
        raise TypeError("%s: cannot be read as a NumPy array (%s); pass t.detach().cpu().numpy()"
                        % (name, e)) from None
    dt = a.dtype
    if not dt.isnative:  # big-endian ('>f4'): the same values in this machine's byte order
        a = a.astype(dt.newbyteorder("="))
        dt = a.dtype
    if dt.kind == "f" and dt.itemsize > 8:  # long double: float64 when no value changes
        b = a.astype(np.float64)
        with np.errstate(all="ignore"):
            exact = np.array_equal(b.astype(dt), a, equal_nan=True)
        if not exact:
            raise TypeError("%s: dtype '%s' holds values that float64 cannot represent "
                            "exactly (smattn reads at most float64); convert it yourself, "
                            "e.g. %s.astype(np.float64)" % (name, dt, name))
        a = b
    return a


def _required(x, name):
    """q, k, v: an array, never None."""
    if x is None:
        raise TypeError("%s: None; want an array (NumPy, or a CPU torch tensor via "
                        "t.detach().numpy())" % name)
    return _asarray(x, name)


def _number(x, name):
    """A real number argument (scale, softcap) as a float, naming the argument otherwise."""
    if isinstance(x, (bool, np.bool_)) or not isinstance(x, (int, float, np.integer,
                                                               np.floating)):
        raise TypeError("%s %r: want a real number" % (name, x))
    return float(x)


def _aligned(a):
    """a itself if it is C-contiguous and aligned, else an aligned C-contiguous copy."""
    if a.flags.c_contiguous and a.flags.aligned:
        return a
    return np.array(a, order="C", copy=True)


def _element_strides(a):
    """Strides in elements if a can be passed as is (aligned, non-negative, whole-element
    strides), else None."""
    isz = a.itemsize
    if not a.flags.aligned or any(s < 0 or s % isz for s in a.strides):
        return None
    return [s // isz for s in a.strides]


def _tensor(t, a, code, axes, keep):
    """Fill smattn_tensor t with array a, a's axes in the order `axes` of the canonical
    layout; copied only when its strides cannot be expressed (negative, misaligned)."""
    st = _element_strides(a)
    if st is None:  # negative or partial-element strides, or a misaligned base: a copy
        a = np.array(a, order="C", copy=True)
        st = _element_strides(a)
    keep.append(a)
    t.data = a.ctypes.data if a.size else None
    t.dtype = code
    for k, ax in enumerate(axes):
        t.stride[k] = st[ax] if ax is not None else 0
    return a


@dataclass
class _Built:
    prob: "_lib.Problem"
    inputs: "_lib.Inputs"
    keep: list
    layout: str
    batched: bool
    B: int
    S: int
    T: int
    Hq: int
    Hkv: int
    D: int
    Dv: int
    arrays: tuple  # q, k, v, bias arrays (for the garbage test)


def _pick(name, value, alias_name, alias_value):
    if alias_value is not None:
        if value is not None:
            raise TypeError("give %s or %s, not both" % (name, alias_name))
        return alias_value
    return value


def _build(q, k, v, *, scale=None, causal=None, window=None, kv_lens=None, q_lens=None,
           bias=None, mask=None, sinks=None, softcap=0, empty_rows="zero",
           empty_lse="neg_inf", layout="bshd", is_causal=None, attn_mask=None,
           softmax_scale=None, window_size=None):
    keep = []
    if layout not in _LAYOUTS:
        raise ValueError("layout %r: want 'bshd' (q [B,S,H,D], flash_attn_func) or 'bhsd' "
                         "(q [B,H,S,D], scaled_dot_product_attention)" % (layout,))
    scale = _pick("scale", scale, "softmax_scale", softmax_scale)
    window = _pick("window", window, "window_size", window_size)
    if is_causal is not None:  # SDPA's name: its is_causal=True is tril, upper-left
        if causal is not None:
            raise TypeError("give causal or is_causal, not both")
        causal = "upper_left" if is_causal else None
    if attn_mask is not None:  # SDPA's attn_mask: bool = may attend, float = added
        am = _asarray(attn_mask, "attn_mask")
        if am.dtype == np.bool_:
            mask = _pick("mask", mask, "attn_mask", am)
        else:
            bias = _pick("bias", bias, "attn_mask", am)
    q, k, v = (_required(x, n) for x, n in ((q, "q"), (k, "k"), (v, "v")))
    rank = q.ndim
    if rank not in (3, 4):
        raise ValueError("q: shape %s has rank %d; want %s or its 3-D form without B"
                         % (tuple(q.shape), rank,
                            "[B,S,Hq,D]" if layout == "bshd" else "[B,Hq,S,D]"))
    for x, n in ((k, "k"), (v, "v")):
        if x.ndim != rank:
            raise ValueError("%s: shape %s is %d-D but q is %d-D (q, k, v must all be 3-D or "
                             "all 4-D)" % (n, tuple(x.shape), x.ndim, rank))
    if rank == 3:
        q, k, v = q[None], k[None], v[None]
    # canonical axes (b, s, h, d) in the caller's array
    ax = (0, 1, 2, 3) if layout == "bshd" else (0, 2, 1, 3)

    def dims(a):
        return [a.shape[i] for i in ax]

    for a, n, names in ((q, "q", "B S Hq D"), (k, "k", "B T Hkv D"), (v, "v", "B T Hkv Dv")):
        for dim, dn in zip(dims(a), names.split()):
            if dim < 1:
                raise _status_error(2, "%s: shape %s has %s = %d: "  # SMATTN_ERR_SHAPE
                                    % (n, tuple(a.shape), dn, dim))
    B, S, Hq, D = dims(q)
    Bk, T, Hkv, Dk = dims(k)
    Bv, Tv, Hv, Dv = dims(v)
    if Bk != B or Bv != B:
        raise ValueError("%s: shape %s does not match q's batch size B = %d"
                         % ("k" if Bk != B else "v", tuple((k if Bk != B else v).shape), B))
    if Dk != D:
        raise ValueError("k: shape %s does not match q's head dim %d" % (tuple(k.shape), D))
    if Tv != T:
        raise ValueError("v: shape %s does not match k's key count T = %d" % (tuple(v.shape), T))
    if Hv != Hkv:
        raise ValueError("v: shape %s does not match k's KV head count Hkv = %d"
                         % (tuple(v.shape), Hkv))
    prob = _lib.problem_default()
    prob.op = 0
    prob.B, prob.S, prob.T, prob.Hq, prob.Hkv, prob.D, prob.Dv = B, S, T, Hq, Hkv, D, Dv
    prob.scale = _lib.default_scale(D) if scale is None else _number(scale, "scale")
    prob.softcap = _number(softcap if softcap is not None else 0, "softcap")
    try:
        prob.causal = _CAUSAL[causal]
    except (KeyError, TypeError):
        raise ValueError("causal %r: want None/False, True or 'lower_right' (FlashAttention's "
                         "causal=True), or 'upper_left' (SDPA's is_causal=True)"
                         % (causal,)) from None
    if window is None:
        prob.window_left = prob.window_right = -1
    else:
        try:  # operator.index: integers only (1.7 is refused, not truncated)
            wl, wr = window
            prob.window_left = -1 if wl is None else operator.index(wl)
            prob.window_right = -1 if wr is None else operator.index(wr)
        except (TypeError, ValueError):
            raise TypeError("window %r: want (left, right), integers >= -1 (-1 or None: "
                            "unbounded)" % (window,)) from None
    try:
        prob.empty_rows = _EMPTY[empty_rows]
    except (KeyError, TypeError):
        raise ValueError("empty_rows %r: want 'zero', 'nan' or 'mean'" % (empty_rows,)) from None
    try:
        prob.empty_lse = _EMPTY_LSE[empty_lse]
    except (KeyError, TypeError):
        raise ValueError("empty_lse %r: want 'neg_inf', 'pos_inf' or 'zero'"
                         % (empty_lse,)) from None
    for lens, name, field in ((kv_lens, "kv_lens", "kv_lens"), (q_lens, "q_lens", "q_lens")):
        if lens is None:
            continue
        la = _asarray(lens, name)
        if la.dtype.kind not in "iu":
            raise TypeError("%s: dtype '%s' is not an integer type" % (name, la.dtype))
        la = _aligned(np.ascontiguousarray(la.reshape(-1), dtype=np.int64))
        if la.shape[0] != B:
            raise ValueError("%s: %d entries, want B = %d" % (name, la.shape[0], B))
        keep.append(la)
        setattr(prob, field, la.ctypes.data_as(ctypes.POINTER(ctypes.c_int64)))
    inp = _lib.Inputs()
    q = _tensor(inp.q, q, _dtype_code(q, "q"), ax, keep)
    k = _tensor(inp.k, k, _dtype_code(k, "k"), ax, keep)
    v = _tensor(inp.v, v, _dtype_code(v, "v"), ax, keep)
    full = (B, Hq, S, T)
    for arr, name, is_mask in ((bias, "bias", False), (mask, "mask", True)):
        if arr is None:
            continue
        a = _asarray(arr, name)
        if is_mask:
            if a.dtype == np.uint8:
                a = a.view(np.bool_)
            if a.dtype != np.bool_:
                raise TypeError("mask: dtype '%s' is not a mask type (want bool or uint8; "
                                "True = may attend)" % a.dtype)
            code = BOOL
        else:
            code = _dtype_code(a, name)
        if a.ndim > 4 or a.ndim < 1:
            raise ValueError("%s: shape %s does not broadcast to [B,Hq,S,T] = %s"
                             % (name, tuple(a.shape), list(full)))
        try:
            a = np.broadcast_to(a, full)
        except ValueError:
            raise ValueError("%s: shape %s does not broadcast to [B,Hq,S,T] = %s"
                             % (name, tuple(a.shape), list(full))) from None
        tgt = inp.mask if is_mask else inp.bias
        a = _tensor(tgt, a, code, (0, 1, 2, 3), keep)
        if is_mask:
            mask = a
        else:
            bias = a
    if sinks is not None:
        s = _asarray(sinks, "sinks")
        if s.shape != (Hq,):
            raise ValueError("sinks: shape %s, want [Hq] = [%d]" % (tuple(s.shape), Hq))
        _tensor(inp.sinks, s, _dtype_code(s, "sinks"), (0, None, None, None), keep)
    return _Built(prob, inp, keep, layout, rank == 4, B, S, T, Hq, Hkv, D, Dv, (q, k, v, bias))


def _out_code(dtype):
    if dtype in _OUT_DTYPES:
        return _OUT_DTYPES[dtype]
    try:
        nd = np.dtype(dtype)
    except TypeError:
        nd = None
    for code, t in ((F64, np.float64), (F32, np.float32), (F16, np.float16)):
        if nd == t:
            return code
    raise TypeError("dtype %r: want 'float64', 'float32', 'float16' or 'bfloat16' (returned as "
                    "uint16 bit patterns)" % (dtype,))


def _shapes(b):
    """O, LSE and P shapes in the caller's layout (3-D inputs: no batch axis)."""
    o = (b.B, b.S, b.Hq, b.Dv) if b.layout == "bshd" else (b.B, b.Hq, b.S, b.Dv)
    lse, p = (b.B, b.Hq, b.S), (b.B, b.Hq, b.S, b.T)
    if not b.batched:
        o, lse, p = o[1:], lse[1:], p[1:]
    return o, lse, p


def _outputs(b, dtype, weights, lse=True):
    code = _out_code(dtype)
    npdt = _NP_OF[code]
    so, sl, sp = _shapes(b)
    o = np.empty(so, dtype=npdt)
    ls = np.empty(sl, dtype=npdt) if lse else None
    p = np.empty(sp, dtype=npdt) if weights else None
    out = _lib.Outputs()
    ax_o = (0, 1, 2, 3) if b.layout == "bshd" else (0, 2, 1, 3)
    ob, lb, pb = (o, ls, p) if b.batched else (o[None], None if ls is None else ls[None],
                                                None if p is None else p[None])
    for t, a, axes in ((out.o, ob, ax_o), (out.lse, lb, (0, 1, 2, None)),
                       (out.p, pb, (0, 1, 2, 3))):
        if a is None:
            continue
        st = _element_strides(a)
        t.data = a.ctypes.data if a.size else None
        t.dtype = code
        for k, ax in enumerate(axes):
            t.stride[k] = st[ax] if ax is not None else 0
    return out, o, ls, p


def _run(engine, q, k, v, dtype, weights, threads, isa, kw):
    if engine == "opt" and isa is not None:
        if not isinstance(isa, str) or isa not in _ISAS:
            raise ValueError("isa %r is unknown: want None (the active one), %s"
                             % (isa, ", ".join(repr(x) for x in _ISAS)))
        if not _lib.opt_isa_available(isa.encode()):
            raise ValueError("isa %r: this CPU cannot run it (available: %s)"
                             % (isa, ", ".join(x for x in _ISAS
                                               if _lib.opt_isa_available(x.encode()))))
    b = _build(q, k, v, **kw)
    out, o, lse, p = _outputs(b, dtype, weights)
    if engine == "ref":
        cfg = _lib.RefConfig(int(threads), 0, 0, 0)
        st = _lib.ref(ctypes.byref(b.prob), ctypes.byref(b.inputs), ctypes.byref(out),
                      ctypes.byref(cfg), None)
        prefix = ""
    else:
        cfg = _lib.OptConfig(int(threads), isa.encode() if isa else None)
        st = _lib.attention(ctypes.byref(b.prob), ctypes.byref(b.inputs), ctypes.byref(out),
                            ctypes.byref(cfg))
        prefix = "opt: kernel: "
    if st != 0:
        err = _status_error(st, prefix)
        if engine == "opt" and st == _ERR_UNSUPPORTED:
            err = TypeError(str(err) + "; smattn.attention takes float32 q, bias and sinks, "
                            "float32, float16 or bfloat16 k and v, and dtype='float32'")
        raise err
    return (o, lse, p) if weights else (o, lse)


_DOC_ARGS = """
    q, k, v: arrays (NumPy, or anything np.asarray reads: a CPU torch tensor via
        t.detach().numpy()), any float dtype (float64, float32, float16; bfloat16 as an
        ml_dtypes bfloat16 array or as uint16 bit patterns), any strides (passed to C as
        they are; only negative or misaligned strides are copied). Layout "bshd" (default,
        flash_attn_func): q [B, S, Hq, D], k [B, T, Hkv, D], v [B, T, Hkv, Dv]. Layout
        "bhsd" (scaled_dot_product_attention): q [B, Hq, S, D], k [B, Hkv, T, D],
        v [B, Hkv, T, Dv]. 3-D arrays drop B (B = 1); the outputs then drop it too.
        GQA/MQA: Hq must be a multiple of Hkv and query head h reads KV head
        h // (Hq // Hkv) (contiguous groups, as SDPA's enable_gqa and flash_attn; SPEC 2.2).
    scale (alias softmax_scale): multiplies q.k exactly; None: the binary64 nearest
        1/sqrt(D) (SPEC 2.3).
    causal: None/False: no causal mask. True, "lower_right" (or "bottom_right"): key j
        visible to query i iff j <= i + T_b - S_b, FlashAttention >= 2.1's causal=True and
        the KV-cache convention (rows with i < S_b - T_b see nothing). "upper_left" (or
        "top_left"): j <= i, SDPA's is_causal=True (torch.tril). They agree when S_b = T_b
        (SPEC 3.1). is_causal=True (SDPA's keyword) is causal="upper_left".
    window (alias window_size): (left, right) as flash_attn's window_size: key j visible iff
        d_i - left <= j <= d_i + right around the diagonal d_i of `causal` (lower-right
        when causal is off); -1 or None: unbounded (SPEC 3.3).
    kv_lens, q_lens: [B] integers: keys j >= kv_lens[b] and queries i >= q_lens[b] are
        padding (padded queries are empty rows; SPEC 3.2).
    bias: additive, any float dtype, broadcast to [B, Hq, S, T] (NumPy rules, zero strides);
        -inf hides a key. mask: bool (or uint8), True = may attend, broadcast likewise.
        attn_mask (SDPA's keyword): a bool array is `mask`, a float array is `bias`.
    sinks: [Hq] logits that join only the softmax denominator (gpt-oss, FA4; SPEC 2.5).
    softcap: c > 0 replaces each score s by c*tanh(s/c) before bias and masks (SPEC 2.4).
    empty_rows: what a row with no visible key and no sink gives (SPEC 3.4): "zero" (O = 0,
        P = 0: PyTorch >= 2.5, FlashAttention), "nan", or "mean" (O = mean of V over the
        first T_b keys: finite "minus large" masks as in JAX).
    empty_lse: that row's LSE: "neg_inf" (default), "pos_inf" (FlashAttention-2's kernel),
        "zero" (PyTorch's CPU flash kernel).
    dtype: output dtype, "float32" (default), "float64", "float16" or "bfloat16" (returned
        as uint16 bit patterns: o.view(ml_dtypes.bfloat16), or
        torch.from_numpy(o.view(np.int16)).view(torch.bfloat16)).
    weights: also return P [B, Hq, S, T].
    threads: worker threads (0: all cores); results do not depend on it.

    Returns (O, LSE) or (O, LSE, P): O in the input layout ([B, S, Hq, Dv] for "bshd",
    [B, Hq, S, Dv] for "bhsd"), LSE [B, Hq, S] (natural log; flash_attn's softmax_lse), P
    [B, Hq, S, T]. Errors: ValueError for bad shapes or options, TypeError for dtypes, with
    the CLI's sentences (smattn_status_str)."""


def reference(q, k, v, *, scale=None, causal=None, window=None, kv_lens=None, q_lens=None,
              bias=None, mask=None, sinks=None, softcap=0, empty_rows="zero",
              empty_lse="neg_inf", dtype="float32", weights=False, layout="bshd",
              threads=0, is_causal=None, attn_mask=None, softmax_scale=None,
              window_size=None):
    kw = dict(scale=scale, causal=causal, window=window, kv_lens=kv_lens, q_lens=q_lens,
              bias=bias, mask=mask, sinks=sinks, softcap=softcap, empty_rows=empty_rows,
              empty_lse=empty_lse, layout=layout, is_causal=is_causal, attn_mask=attn_mask,
              softmax_scale=softmax_scale, window_size=window_size)
    return _run("ref", q, k, v, dtype, weights, threads, None, kw)


reference.__doc__ = """The exact oracle (smattn_ref): every output is the exact value of
    SPEC 4 rounded once to `dtype`.
""" + _DOC_ARGS


def attention(q, k, v, *, scale=None, causal=None, window=None, kv_lens=None, q_lens=None,
              bias=None, mask=None, sinks=None, softcap=0, empty_rows="zero",
              empty_lse="neg_inf", dtype="float32", weights=False, layout="bshd",
              threads=0, isa=None, is_causal=None, attn_mask=None, softmax_scale=None,
              window_size=None):
    kw = dict(scale=scale, causal=causal, window=window, kv_lens=kv_lens, q_lens=q_lens,
              bias=bias, mask=mask, sinks=sinks, softcap=softcap, empty_rows=empty_rows,
              empty_lse=empty_lse, layout=layout, is_causal=is_causal, attn_mask=attn_mask,
              softmax_scale=softmax_scale, window_size=window_size)
    return _run("opt", q, k, v, dtype, weights, threads, isa, kw)


attention.__doc__ = """The fast kernel (smattn_attention: SIMD flash-attention tiles, a
    thread pool), within the SPEC 6 bound of its model (check(..., precision="opt")).
    Takes float32 q, bias and sinks, float32/float16/bfloat16 k and v, float32 outputs
    (anything else: TypeError). isa: None, "scalar", "avx2" or "avx512".
""" + _DOC_ARGS


# ---- judging ---------------------------------------------------------------------------

@dataclass(frozen=True)
class Element:
    """One output element: which output ("O", "LSE" or "P"), its index in the array the
    caller passed, the value given, the exact value (the oracle's binary64) and the bound."""
    output: str
    index: Tuple[int, ...]
    got: float
    exact: float
    bound: float


@dataclass(frozen=True)
class Report:
    """What check() found. passed: every judged element within its SPEC 6 bound (ratio
    <= 1). max_ratio: the largest |got - exact| / bound. max_ulp: the largest ulp error.
    worst: the element `reason` names (a failure) or the largest ratio (a pass). reason: the
    checker's one sentence ("" on a plain pass). unbounded: elements out of contract
    (finite exact value, bound +inf; SPEC 6.8), not judged. nonfinite: NaN or infinity
    where the spec has a finite value."""
    passed: bool
    max_ratio: float
    max_ulp: float
    elements: int
    unbounded: int
    nonfinite: int
    reason: str
    worst: Optional[Element]

    def __bool__(self):
        return self.passed

    def __str__(self):
        if not self.passed:
            return "fail: " + self.reason
        s = "pass: max error/bound %.3g over %d elements" % (self.max_ratio, self.elements)
        return s + ("; " + self.reason if self.reason else "")


_PRECISION_NAMES = {"float64": F64, "f64": F64, "float32": F32, "f32": F32, "float16": F16,
                    "f16": F16, "bfloat16": BF16, "bf16": BF16}


def _precision(precision, prob):
    if isinstance(precision, _lib.Precision):
        _precision_check(precision)
        return precision
    if isinstance(precision, str):
        if precision == "opt":
            return _lib.opt_precision(ctypes.byref(prob))
        if precision in _PRECISION_NAMES:
            return _lib.precision_of(_PRECISION_NAMES[precision])
    elif isinstance(precision, dict):
        pm = _precision(precision.get("base", "float32"), prob)
        for key, val in precision.items():
            if key == "base":
                continue
            if key not in dict(_lib.Precision._fields_):
                raise ValueError("precision: unknown field %r (fields: %s)"
                                 % (key, ", ".join(f for f, _ in _lib.Precision._fields_)))
            try:
                setattr(pm, key, val)
            except TypeError:
                raise TypeError("precision: %s %r is not a number of the field's type"
                                % (key, val)) from None
        _precision_check(pm)
        return pm
    raise ValueError("precision %r: want 'float32', 'float16', 'bfloat16', 'float64', 'opt' "
                     "(smattn.attention's model), a dict of smattn_precision fields, or "
                     "smattn.precision(...)" % (precision,))


def _precision_check(pm):
    """conform_precision_check (conform/plugin.c): a model out of range is a bad argument,
    not a failing kernel."""
    ok = (0 < pm.u_score < 1 and 0 < pm.u_acc < 1 and math.isfinite(pm.exp_ulps)
          and pm.exp_ulps >= 0 and 0 <= pm.u_p < 1 and pm.blocks >= 1 and pm.acc_len >= 0
          and math.isfinite(pm.tiny) and pm.tiny >= 0)
    if not ok:
        raise ValueError("precision model out of range (%s; SPEC 6.1: 0 < u_score, u_acc < 1, "
                         "0 <= u_p < 1, exp_ulps and tiny finite >= 0, blocks >= 1, "
                         "acc_len >= 0)" % ", ".join("%s %r" % (f, getattr(pm, f))
                                                    for f, _ in pm._fields_))


def precision(name="float32", **fields):
    """The SPEC 6.1 kernel model for a plain kernel computing in `name` (u, exp error, one
    block, serial sums), with fields overridden: e.g. precision("float32", blocks=32) for
    an online softmax over 32 key blocks, u_p=2**-8 when P is rounded to bfloat16 before
    P.V, acc_len=64 for tree/blocked sums."""
    return _precision(dict(fields, base=name), None)


def _got(b, arr, name, shape, axes):
    """The caller's output as a contiguous array in SPEC 2.1's layout, with its dtype."""
    a = _asarray(arr, name)
    if tuple(a.shape) != shape:
        raise ValueError("%s: shape %s, want %s" % (name, tuple(a.shape), list(shape)))
    code = _dtype_code(a, name)
    if not b.batched:
        a = a[None]
    return _aligned(np.ascontiguousarray(np.transpose(a, axes))), code


def check(o, q, k, v, *, lse=None, p=None, precision="float32", scale=None, causal=None,
          window=None, kv_lens=None, q_lens=None, bias=None, mask=None, sinks=None,
          softcap=0, empty_rows="zero", empty_lse="neg_inf", layout="bshd", is_causal=None,
          attn_mask=None, softmax_scale=None, window_size=None):
    kw = dict(scale=scale, causal=causal, window=window, kv_lens=kv_lens, q_lens=q_lens,
              bias=bias, mask=mask, sinks=sinks, softcap=softcap, empty_rows=empty_rows,
              empty_lse=empty_lse, layout=layout, is_causal=is_causal, attn_mask=attn_mask,
              softmax_scale=softmax_scale, window_size=window_size)
    b = _build(q, k, v, **kw)
    so, sl, sp = _shapes(b)
    got = _lib.Outputs()
    keep = []
    ax_o = (0, 1, 2, 3) if b.layout == "bshd" else (0, 2, 1, 3)
    for t, arr, name, shape, axes, role in ((got.o, o, "o", so, ax_o, b"o"),
                                            (got.lse, lse, "lse", sl, (0, 1, 2), b"l"),
                                            (got.p, p, "p", sp, (0, 1, 2, 3), b"p")):
        if arr is None:
            continue
        a, code = _got(b, arr, name, shape, axes)
        keep.append(a)
        t.data = a.ctypes.data
        t.dtype = code
        _lib.contiguous_strides(ctypes.byref(b.prob), role, ctypes.byref(t.stride))
    st = _lib.validate(ctypes.byref(b.prob), ctypes.byref(b.inputs), ctypes.byref(got))
    if st != 0:
        raise _status_error(st)
    pm = _precision(precision, b.prob)
    garbage = any(x is not None and x.dtype != np.uint16 and not np.isfinite(x).all()
                  for x in b.arrays)
    r = _lib.PyResult()
    _lib.shim().smattn_py_judge(ctypes.byref(b.prob), ctypes.byref(b.inputs), ctypes.byref(got),
                                ctypes.byref(pm), int(garbage), ctypes.byref(r))
    reason = r.reason.decode(errors="replace")
    if r.status == 2:
        raise RuntimeError(reason)
    if reason.startswith("the kernel's precision model is out of range for this problem"):
        raise ValueError(reason.replace("the kernel's precision model", "precision", 1))
    worst = None
    if r.worst_out >= 0:
        bb, h, i, c = (int(x) for x in r.worst_ix)
        if r.worst_out == 0:
            name, idx = "O", ((bb, i, h, c) if b.layout == "bshd" else (bb, h, i, c))
        elif r.worst_out == 1:
            name, idx = "LSE", (bb, h, i)
        else:
            name, idx = "P", (bb, h, i, c)
        if not b.batched:
            idx = idx[1:]
        worst = Element(name, idx, r.worst_got, r.worst_exact, r.worst_bound)
    return Report(r.status == 0, r.max_ratio, r.max_ulp, int(r.elements), int(r.unbounded),
                  int(r.nonfinite), reason, worst)


check.__doc__ = """Judge a kernel's outputs against the exact oracle under the SPEC 6 error
    bound of a precision model (conform/judge.c, the judge of `smattn conform`).

    o: the kernel's O in the layout of q (see below); lse [B, Hq, S] and p [B, Hq, S, T]:
    optional, judged too when given. Any float dtype. precision: the kernel model the bound
    assumes: "float32" (default: binary32 arithmetic, exp within 4 ulps, one block, serial
    sums), "float16", "bfloat16", "float64", "opt" (smattn.attention's model), a dict of
    smattn_precision fields, or smattn.precision(...). The problem's arguments are those of
    reference(), and must describe the call the kernel made.

    Returns a Report (truthy iff passed). Raises ValueError/TypeError for a bad problem or
    output shape, RuntimeError if the oracle fails (precision limit).
""" + _DOC_ARGS.split("    dtype:")[0]


def assert_close(o, q, k, v, *, msg=None, **kw):
    """check(o, q, k, v, **kw), raising AssertionError with the checker's one-sentence
    reason when an element is outside its bound (as torch.testing.assert_close does).
    msg: a prefix for the message. Returns the Report on success."""
    r = check(o, q, k, v, **kw)
    if not r.passed:
        raise AssertionError((msg + ": " if msg else "") + r.reason)
    return r
