# SPDX-License-Identifier: MIT
"""_api.py: reference(), attention(), check() and assert_close(): NumPy arrays in the
layouts of torch.nn.functional.scaled_dot_product_attention and flash_attn_func turned into
one smattn_problem (SPEC 2) and passed to the C library by pointer and strides."""
import ctypes
import dataclasses
import inspect
import math
import operator
import os
import sys
import threading
import time
from dataclasses import dataclass
from typing import Optional, Tuple

import numpy as np

from . import _lib, _ragged

F64, F32, F16, BF16, BOOL, F8E4M3, F8E5M2, Q8_0, Q4_0 = 0, 1, 2, 3, 4, 5, 6, 7, 8
# llama.cpp's blocks (SPEC 2.9): 32 elements in 34 (q8_0) or 18 (q4_0) bytes
_QBLOCK = 32
_BLOCK_BYTES = {Q8_0: 34, Q4_0: 18}
_NP_OF = {F64: np.float64, F32: np.float32, F16: np.float16, BF16: np.uint16}
_ITEMSIZE = {F64: 8, F32: 4, F16: 2, BF16: 2, BOOL: 1, F8E4M3: 1, F8E5M2: 1}
_FP8_NAMES = {"float8_e4m3fn": F8E4M3, "float8_e5m2": F8E5M2}
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
_ERR_DTYPE, _ERR_NULL, _ERR_NOMEM, _ERR_UNSUPPORTED, _ERR_OPTION = 6, 1, 12, 15, 11
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


def _dtype_code(a, name, fp8=None):
    """The smattn dtype of a float array: float64/32/16, bfloat16 (ml_dtypes' dtype, or
    uint16 holding bfloat16 bit patterns, as `smattn gen` writes them); fp8 (SPEC 2.9) as
    ml_dtypes' float8_e4m3fn / float8_e5m2, or uint8 bit patterns when fp8 (the format the
    caller named the array in: F8E4M3 or F8E5M2) is given."""
    dt = a.dtype
    if fp8 in _BLOCK_BYTES:
        _block_dims(a, name, fp8)  # uint8 whole blocks, or a TypeError / ValueError
        return fp8
    if fp8 is not None:
        if dt == np.uint8 or _FP8_NAMES.get(dt.name) == fp8:
            return fp8
        raise TypeError("%s: named in fp8_%s, but its dtype is '%s' (want uint8 bit patterns)"
                        % (name, "e4m3" if fp8 == F8E4M3 else "e5m2", dt))
    if dt.name in _FP8_NAMES and dt.itemsize == 1:
        return _FP8_NAMES[dt.name]
    if dt == np.uint8:
        raise TypeError("%s: dtype 'uint8' holds raw bits; name it in fp8_e4m3 or fp8_e5m2 to "
                        "read them as that format" % name)
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


def _integer(x, name, bits, minimum=None, signed=True):
    """An integer argument as a Python int that fits the C field it goes to (bits wide), so
    that ctypes never wraps it: 2**64 + 1 is an OverflowError, not 1. Integers only (int,
    NumPy integers, anything with __index__): a float, a string or a bool is a TypeError,
    not converted. minimum: the smallest value allowed (ValueError below it)."""
    if isinstance(x, (bool, np.bool_)):
        raise TypeError("%s %r: want an integer, not a bool" % (name, x))
    try:
        n = operator.index(x)
    except TypeError:
        raise TypeError("%s %r: want an integer" % (name, x)) from None
    lo, hi = (-(1 << (bits - 1)), (1 << (bits - 1)) - 1) if signed else (0, (1 << bits) - 1)
    if not lo <= n <= hi:
        raise OverflowError("%s %d does not fit in %s (range [%d, %d])"
                            % (name, n, ("int%d" if signed else "uint%d") % bits, lo, hi))
    if minimum is not None and n < minimum:
        raise ValueError("%s %d: want >= %d" % (name, n, minimum))
    return n


def _layout(layout):
    """"bshd" or "bhsd", in any case ("BHSD" is "bhsd")."""
    low = layout.lower() if isinstance(layout, str) else layout
    if low not in _LAYOUTS:
        raise ValueError("layout %r: want 'bshd' (q [B,S,H,D], flash_attn_func) or 'bhsd' "
                         "(q [B,H,S,D], scaled_dot_product_attention), in any case"
                         % (layout,))
    return low


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
    if code in _BLOCK_BYTES:  # strides in elements of whole blocks (SPEC 2.9)
        a, _, st = _block_dims(a, "?", code)
        keep.append(a)
        t.data = a.ctypes.data if a.size else None
        t.dtype = code
        for k, ax in enumerate(axes):
            t.stride[k] = st[ax] if ax is not None else 0
        return a
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
    arrays: tuple  # q, k, v, bias arrays (softmax: x, bias), for the garbage test
    softmax: bool = False
    visible_mask: Optional[np.ndarray] = None  # the bool mask, [B, Hq, S, T] (for visible())
    lens: tuple = (None, None)  # kv_lens, q_lens as int64 arrays, or None
    ragged: Optional["_ragged.Ragged"] = None  # a ragged or paged layout (SPEC 2.7)
    descale: Optional[tuple] = None  # (smattn_descale, its [B, Hkv] arrays) (SPEC 2.9)


def _pick(name, value, alias_name, alias_value):
    if alias_value is not None:
        if value is not None:
            raise TypeError("give %s or %s, not both" % (name, alias_name))
        return alias_value
    return value


def _attn_mask(attn_mask, mask, bias):
    """SDPA's attn_mask as (mask, bias, the name the bias came in): a bool array is the
    mask (True = may attend), any other the additive bias (bfloat16 as uint16 bits too).
    The backward reads the bias's own shape through it, so that both agree."""
    if attn_mask is None:
        return mask, bias, "bias"
    am = _asarray(attn_mask, "attn_mask")
    if am.dtype == np.bool_:
        return _pick("mask", mask, "attn_mask", am), bias, "bias"
    return mask, _pick("bias", bias, "attn_mask", am), "attn_mask"


def _fp8_names(fp8_e4m3, fp8_e5m2, q8_0=(), q4_0=()):
    """{name: dtype code} of the arrays named in fp8_e4m3 / fp8_e5m2 (among q, k, v) and in
    q8_0 / q4_0 (k and v: the block formats are K's and V's, SPEC 2.9)."""
    named, where = {}, {}
    for lst, code, key in ((fp8_e4m3, F8E4M3, "fp8_e4m3"), (fp8_e5m2, F8E5M2, "fp8_e5m2"),
                           (q8_0, Q8_0, "q8_0"), (q4_0, Q4_0, "q4_0")):
        if isinstance(lst, str):
            lst = (lst,)
        allowed = ("q", "k", "v") if code in (F8E4M3, F8E5M2) else ("k", "v")
        for n in lst or ():
            if n not in allowed:
                raise ValueError("%s: %r is not one of %s%s" % (
                    key, n, ", ".join(repr(a) for a in allowed),
                    "" if len(allowed) == 3 else " (block formats are for K and V only)"))
            if n in named:
                raise ValueError("%s is named in both %s and %s" % (n, where[n], key))
            named[n], where[n] = code, key
    return named


def _block_dims(a, name, code):
    """An array of q8_0 / q4_0 blocks as `smattn gen` writes them (SPEC 7.1): uint8, the
    last axis whole blocks of bytes; returns (its shape with the last axis in elements, its
    strides in elements), copying it to C order when its strides are not whole blocks."""
    if a.dtype != np.uint8:
        raise TypeError("%s: named in %s, but its dtype is '%s' (want uint8 raw blocks)"
                        % (name, "q8_0" if code == Q8_0 else "q4_0", a.dtype))
    size = _BLOCK_BYTES[code]
    if a.ndim < 1 or a.shape[-1] % size:
        raise ValueError("%s: shape %s: the last axis is not a whole number of %d-byte %s "
                         "blocks" % (name, tuple(a.shape), size,
                                     "q8_0" if code == Q8_0 else "q4_0"))
    st = list(a.strides)
    if a.shape[-1] > 1 and st[-1] != 1 or any(s < 0 or s % size for s in st[:-1]):
        a = np.ascontiguousarray(a)
        st = list(a.strides)
    shape = list(a.shape[:-1]) + [a.shape[-1] // size * _QBLOCK]
    return a, shape, [s // size * _QBLOCK for s in st[:-1]] + [1]


def _descale(prob, keep, B, Hkv, q_descale, k_descale, v_descale):
    """smattn_descale for the problem (SPEC 2.9): each a number or [B][Hkv] numbers; the
    library checks the values (positive finite binary32). None when none is given."""
    given = (q_descale, k_descale, v_descale)
    if all(x is None for x in given):
        return None
    ds = _lib.Descale(1.0, 1.0, 1.0, None, None, None)
    arrays = []
    for x, name in zip(given, ("q", "k", "v")):
        if x is None:
            arrays.append(None)
            continue
        a = np.asarray(x, dtype=np.float64)
        if a.ndim == 0:
            setattr(ds, name, float(a))
            arrays.append(None)
            continue
        if a.shape != (B, Hkv):
            raise ValueError("%s_descale: shape %s; want a number or [B, Hkv] = [%d, %d]"
                             % (name, a.shape, B, Hkv))
        a = np.ascontiguousarray(a)
        keep.append(a)
        setattr(ds, name + "_head", a.ctypes.data_as(ctypes.POINTER(ctypes.c_double)))
        arrays.append(a)
    keep.append(ds)
    prob.descale = ctypes.addressof(ds)
    return ds, arrays


def _build(q, k, v, *, scale=None, causal=None, window=None, kv_lens=None, q_lens=None,
           bias=None, mask=None, sinks=None, softcap=0, empty_rows="zero",
           empty_lse="neg_inf", layout="bshd", is_causal=None, attn_mask=None,
           softmax_scale=None, window_size=None, alibi_slopes=None, alibi_mode=None,
           fp8_e4m3=(), fp8_e5m2=(), q_descale=None, k_descale=None, v_descale=None,
           q8_0=(), q4_0=(), **ragged):
    keep = []
    unknown = sorted(set(ragged) - set(_ragged.ARGS))
    if unknown:
        raise TypeError("unexpected keyword argument %r" % unknown[0])
    fp8 = _fp8_names(fp8_e4m3, fp8_e5m2, q8_0, q4_0)
    if _ragged.given(ragged) and (fp8 or any(x is not None
                                             for x in (q_descale, k_descale, v_descale))):
        raise TypeError("fp8 or block-quantised arrays and descales are not supported with "
                        "ragged or paged layouts yet")
    if _ragged.given(ragged):
        return _build_ragged(q, k, v, scale=scale, causal=causal, window=window,
                             kv_lens=kv_lens, q_lens=q_lens, bias=bias, mask=mask, sinks=sinks,
                             softcap=softcap, empty_rows=empty_rows, empty_lse=empty_lse,
                             layout=layout, is_causal=is_causal, attn_mask=attn_mask,
                             softmax_scale=softmax_scale, window_size=window_size,
                             alibi_slopes=alibi_slopes, alibi_mode=alibi_mode, **ragged)
    layout = _layout(layout)
    scale = _pick("scale", scale, "softmax_scale", softmax_scale)
    window = _pick("window", window, "window_size", window_size)
    if is_causal is not None:  # SDPA's name: its is_causal=True is tril, upper-left
        if causal is not None:
            raise TypeError("give causal or is_causal, not both")
        causal = "upper_left" if is_causal else None
    mask, bias, bias_name = _attn_mask(attn_mask, mask, bias)
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

    def dims(a, n=None):
        code = fp8.get(n)
        if code in _BLOCK_BYTES:  # the last axis in elements: bytes / block size * 32
            return [_block_dims(a, n, code)[1][i] for i in ax]
        return [a.shape[i] for i in ax]

    for a, n, names in ((q, "q", "B S Hq D"), (k, "k", "B T Hkv D"), (v, "v", "B T Hkv Dv")):
        for dim, dn in zip(dims(a, n), names.split()):
            if dim < 1:
                raise _status_error(2, "%s: shape %s has %s = %d: "  # SMATTN_ERR_SHAPE
                                    % (n, tuple(a.shape), dn, dim))
    B, S, Hq, D = dims(q, "q")
    Bk, T, Hkv, Dk = dims(k, "k")
    Bv, Tv, Hv, Dv = dims(v, "v")
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
    inp = _lib.Inputs()
    q = _tensor(inp.q, q, _dtype_code(q, "q", fp8.get("q")), ax, keep)
    k = _tensor(inp.k, k, _dtype_code(k, "k", fp8.get("k")), ax, keep)
    v = _tensor(inp.v, v, _dtype_code(v, "v", fp8.get("v")), ax, keep)
    bias, mask, lens = _options(prob, inp, keep, B, S, T, Hq, causal, window, kv_lens, q_lens,
                                bias, mask, sinks, softcap, empty_rows, empty_lse)
    _alibi(prob, inp, keep, B, Hq, alibi_mode, alibi_slopes, bias_name)
    ds = _descale(prob, keep, B, Hkv, q_descale, k_descale, v_descale)
    return _Built(prob, inp, keep, layout, rank == 4, B, S, T, Hq, Hkv, D, Dv, (q, k, v, bias),
                  False, mask, lens, descale=ds)


def _build_ragged(q, k, v, *, scale=None, causal=None, window=None, kv_lens=None, q_lens=None,
                  bias=None, mask=None, sinks=None, softcap=0, empty_rows="zero",
                  empty_lse="neg_inf", layout="bshd", is_causal=None, attn_mask=None,
                  softmax_scale=None, window_size=None, alibi_slopes=None, alibi_mode=None,
                  **ragged):
    """A problem with a ragged or paged layout (SPEC 2.7): the dense, padded twin's B, S,
    T and options, Q/O/LSE packed with cu_seqlens_q, K/V packed with cu_seqlens_k or paged
    (block_table, or FlashInfer's kv_indptr/kv_indices/kv_last_page_len)."""
    keep = []
    scale = _pick("scale", scale, "softmax_scale", softmax_scale)
    window = _pick("window", window, "window_size", window_size)
    if is_causal is not None:
        if causal is not None:
            raise TypeError("give causal or is_causal, not both")
        causal = "upper_left" if is_causal else None
    mask, bias, bias_name = _attn_mask(attn_mask, mask, bias)
    q, k, v = (_required(x, n) for x, n in ((q, "q"), (k, "k"), (v, "v")))
    batched = ragged.get("cu_seqlens_q") is None and q.ndim == 4
    for a, n in ((q, "q"), (k, "k"), (v, "v")):
        if 0 in a.shape:
            raise _status_error(2, "%s: shape %s has an empty dimension: " % (n, tuple(a.shape)))
    r = _ragged.Ragged(q, k, v, dict(ragged, q_lens=q_lens, kv_lens=kv_lens, layout=layout))
    B, S, T, Hq, Hkv, D, Dv = r.B, r.S, r.T, r.Hq, r.Hkv, r.D, r.Dv
    if v.shape[-1] != Dv or (r.paged and v.shape[0] != k.shape[0]):
        raise ValueError("v: shape %s does not match k" % (tuple(v.shape),))
    prob = _lib.problem_default()
    prob.op = 0
    prob.B, prob.S, prob.T, prob.Hq, prob.Hkv, prob.D, prob.Dv = B, S, T, Hq, Hkv, D, Dv
    prob.scale = _lib.default_scale(D) if scale is None else _number(scale, "scale")
    inp = _lib.Inputs()
    canon = (0, 1, 2, 3)
    q = _tensor(inp.q, q if q.ndim == 4 else q[None], _dtype_code(q, "q"), canon, keep)
    kv_axes = (0, 2, 1, 3) if r.paged and r.hnd else canon
    k = _tensor(inp.k, k if k.ndim == 4 else k[None], _dtype_code(k, "k"), kv_axes, keep)
    v = _tensor(inp.v, v if v.ndim == 4 else v[None], _dtype_code(v, "v"), kv_axes, keep)
    if r.paged:
        kv_lens = r.kv_lens
    bias, mask, lens = _options(prob, inp, keep, B, S, T, Hq, causal, window, kv_lens, q_lens,
                                bias, mask, sinks, softcap, empty_rows, empty_lse)
    _alibi(prob, inp, keep, B, Hq, alibi_mode, alibi_slopes, bias_name)
    prob.layout = ctypes.addressof(r.descriptor(keep))
    return _Built(prob, inp, keep, "bshd", batched, B, S, T, Hq, Hkv, D, Dv, (q, k, v, bias),
                  False, mask, lens, r)


def _build_softmax(x, *, scale=None, causal=None, window=None, kv_lens=None, q_lens=None,
                   bias=None, mask=None, sinks=None, softcap=0, empty_rows="zero",
                   empty_lse="neg_inf", is_causal=None, attn_mask=None, layout=None):
    """The softmax op (SPEC 2, op softmax): P = softmax(scale x + bias) row by row, x
    [B, Hq, S, T] (3-D: [Hq, S, T]); the options are those of attention."""
    keep = []
    if layout is not None:
        _layout(layout)  # x, P, LSE have one layout: accepted and ignored
    if is_causal is not None:
        if causal is not None:
            raise TypeError("give causal or is_causal, not both")
        causal = "upper_left" if is_causal else None
    mask, bias, _ = _attn_mask(attn_mask, mask, bias)
    x = _required(x, "x")
    if x.ndim not in (3, 4):
        raise ValueError("x: shape %s has rank %d; want [B,Hq,S,T] or [Hq,S,T]"
                         % (tuple(x.shape), x.ndim))
    batched = x.ndim == 4
    if not batched:
        x = x[None]
    for dim, dn in zip(x.shape, ("B", "Hq", "S", "T")):
        if dim < 1:
            raise _status_error(2, "x: shape %s has %s = %d: " % (tuple(x.shape), dn, dim))
    B, Hq, S, T = x.shape
    prob = _lib.problem_default()
    prob.op = 1
    prob.B, prob.S, prob.T, prob.Hq, prob.Hkv, prob.D, prob.Dv = B, S, T, Hq, Hq, 1, 1
    prob.scale = 1.0 if scale is None else _number(scale, "scale")
    inp = _lib.Inputs()
    x = _tensor(inp.x, x, _dtype_code(x, "x"), (0, 1, 2, 3), keep)
    bias, mask, lens = _options(prob, inp, keep, B, S, T, Hq, causal, window, kv_lens, q_lens,
                                bias, mask, sinks, softcap, empty_rows, empty_lse)
    return _Built(prob, inp, keep, "bhsd", batched, B, S, T, Hq, Hq, 1, 1, (x, bias), True,
                  mask, lens)


_ALIBI = {"symmetric": 1, "one_sided": 2, "mask": 3}


def _alibi(prob, inp, keep, B, Hq, mode, slopes, bias_name="bias"):
    """ALiBi (SPEC 2.8) into prob: slopes [Hq] or [B, Hq], each a float32 exactly; mode
    'symmetric' (FlashAttention's alibi_slopes, the default when slopes are given),
    'one_sided' (vLLM's) or 'mask' (llama.cpp's: bias holds -|distance| and is multiplied
    by the slope). bias_name: the argument the bias came in (bias or attn_mask)."""
    if slopes is None:
        if mode is not None:
            raise ValueError("alibi_mode %r without alibi_slopes" % (mode,))
        return
    if mode is None:
        mode = "symmetric"
    try:
        prob.alibi_mode = _ALIBI[mode]
    except (KeyError, TypeError):
        raise ValueError("alibi_mode %r: want 'symmetric' (FlashAttention's), 'one_sided' "
                         "(vLLM's) or 'mask' (llama.cpp's)" % (mode,)) from None
    if prob.alibi_mode == _ALIBI["mask"] and inp.bias.data and inp.bias.dtype == F64:
        # the library's SMATTN_ERR_DTYPE says only "a dtype is not allowed": name the array
        raise TypeError("%s: float64 with alibi_mode 'mask': the slope times the bias must be "
                        "exact in binary64, so the bias is float32, float16 or bfloat16 "
                        "(SPEC 2.8; SMATTN_ERR_DTYPE)" % bias_name)
    a = _asarray(slopes, "alibi_slopes")
    if a.dtype.kind not in "fiu":
        raise TypeError("alibi_slopes: dtype '%s' is not a number type" % (a.dtype,))
    if a.shape not in ((Hq,), (B, Hq)):
        raise ValueError("alibi_slopes: shape %s, want [Hq] = [%d] or [B, Hq] = [%d, %d]"
                         % (tuple(a.shape), Hq, B, Hq))
    f = _aligned(np.ascontiguousarray(a.reshape(-1), dtype=np.float32))
    exact = a.reshape(-1).astype(np.float64)
    bad = np.nonzero(f.astype(np.float64) != exact)[0]
    if bad.size and np.isfinite(exact[bad[0]]):
        raise ValueError("alibi_slopes[%d] = %r is not a float32 exactly (SPEC 2.8: the slopes "
                         "are binary32)" % (bad[0], float(exact[bad[0]])))
    keep.append(f)
    prob.alibi_slopes = f.ctypes.data_as(ctypes.POINTER(ctypes.c_float))
    prob.alibi_slopes_per_batch = 1 if a.ndim == 2 else 0


def _options(prob, inp, keep, B, S, T, Hq, causal, window, kv_lens, q_lens, bias, mask, sinks,
             softcap, empty_rows, empty_lse):
    """The options both ops share (SPEC 2.3-3.5) into prob and inp: (bias, mask, (kv_lens,
    q_lens)) as passed to C."""
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
        try:
            wl, wr = window
        except (TypeError, ValueError):
            raise TypeError("window %r: want (left, right), integers >= -1 (-1 or None: "
                            "unbounded)" % (window,)) from None
        try:  # integers only (1.7 is refused, not truncated), and none that int64 would wrap
            prob.window_left = -1 if wl is None else _integer(wl, "window left", 64)
            prob.window_right = -1 if wr is None else _integer(wr, "window right", 64)
        except TypeError:
            raise TypeError("window %r: want (left, right), integers >= -1 (-1 or None: "
                            "unbounded)" % (window,)) from None
        except OverflowError as e:
            raise OverflowError("window %r: %s" % (window, e)) from None
    try:
        prob.empty_rows = _EMPTY[empty_rows]
    except (KeyError, TypeError):
        raise ValueError("empty_rows %r: want 'zero', 'nan' or 'mean'" % (empty_rows,)) from None
    try:
        prob.empty_lse = _EMPTY_LSE[empty_lse]
    except (KeyError, TypeError):
        raise ValueError("empty_lse %r: want 'neg_inf', 'pos_inf' or 'zero'"
                         % (empty_lse,)) from None
    lens = []
    for ls, name in ((kv_lens, "kv_lens"), (q_lens, "q_lens")):
        if ls is None:
            lens.append(None)
            continue
        la = _asarray(ls, name)
        if la.dtype.kind not in "iu":
            raise TypeError("%s: dtype '%s' is not an integer type" % (name, la.dtype))
        if la.dtype.kind == "u" and la.size and int(la.max()) > 2 ** 63 - 1:
            raise OverflowError("%s: %d does not fit in int64" % (name, int(la.max())))
        la = _aligned(np.ascontiguousarray(la.reshape(-1), dtype=np.int64))
        if la.shape[0] != B:
            raise ValueError("%s: %d entries, want B = %d" % (name, la.shape[0], B))
        keep.append(la)
        lens.append(la)
        setattr(prob, name, la.ctypes.data_as(ctypes.POINTER(ctypes.c_int64)))
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
        if a.ndim > 4:  # 0-d (a scalar) to 4-d broadcast, NumPy's rules
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
    return bias, mask, tuple(lens)


def _out_code(dtype, b=None):
    """The output dtype code: dtype as asked, or None: the inputs' widest float type."""
    if dtype is None:
        return _widest(b)
    if isinstance(dtype, str) and dtype in _OUT_DTYPES:
        return _OUT_DTYPES[dtype]
    try:
        nd = np.dtype(dtype)
    except TypeError:
        nd = None
    for code, t in ((F64, np.float64), (F32, np.float32), (F16, np.float16)):
        if nd == t:
            return code
    raise TypeError("dtype %r: want None (the inputs' widest float type), 'float64', "
                    "'float32', 'float16' or 'bfloat16' (returned as uint16 bit patterns)"
                    % (dtype,))


def _widest(b):
    """The default output dtype: the widest float type of q, k and v (x for softmax), as
    NumPy and torch promote them: float64 if any is, else float32 if any is (or float16 meets
    bfloat16, which neither holds), else their common 16-bit type."""
    codes = {b.inputs.x.dtype} if b.softmax else {b.inputs.q.dtype, b.inputs.k.dtype,
                                                  b.inputs.v.dtype}
    codes = {F32 if c in (F8E4M3, F8E5M2, Q8_0, Q4_0) else c  # quantised times a binary32
             for c in codes}
    if F64 in codes:                                                 # descale: float32
        return F64
    if F32 in codes or codes == {F16, BF16}:
        return F32
    return codes.pop()


def _shapes(b):
    """O, LSE and P shapes in the caller's layout (3-D inputs: no batch axis); softmax: no O.
    With cu_seqlens_q: O [total_q, Hq, Dv], LSE [Hq, total_q], P [B, Hq, S, T]."""
    if b.ragged is not None and b.ragged.cu_q is not None:
        return (b.ragged.total_q, b.Hq, b.Dv), (b.Hq, b.ragged.total_q), (b.B, b.Hq, b.S, b.T)
    o = (b.B, b.S, b.Hq, b.Dv) if b.layout == "bshd" else (b.B, b.Hq, b.S, b.Dv)
    lse, p = (b.B, b.Hq, b.S), (b.B, b.Hq, b.S, b.T)
    if not b.batched:
        o, lse, p = o[1:], lse[1:], p[1:]
    return (None if b.softmax else o), lse, p


def _outputs(b, dtype, weights, lse=True):
    code = _out_code(dtype, b)
    npdt = _NP_OF[code]
    so, sl, sp = _shapes(b)
    o = np.empty(so, dtype=npdt) if so is not None else None
    ls = np.empty(sl, dtype=npdt) if lse else None
    p = np.empty(sp, dtype=npdt) if weights else None
    out = _lib.Outputs()
    ax_o = (0, 1, 2, 3) if b.layout == "bshd" else (0, 2, 1, 3)

    def batch(a):
        return a if a is None or b.batched else a[None]
    packed = b.ragged is not None and b.ragged.cu_q is not None  # P stays [B, Hq, S, T]
    for t, a, axes in ((out.o, batch(o), ax_o), (out.lse, batch(ls), (0, 1, 2, None)),
                       (out.p, p if packed else batch(p), (0, 1, 2, 3))):
        if a is None:
            continue
        st = _element_strides(a)
        t.data = a.ctypes.data if a.size else None
        t.dtype = code
        for k, ax in enumerate(axes):
            t.stride[k] = st[ax] if ax is not None else 0
    return out, o, ls, p


# ---- the oracle in chunks: progress and Ctrl-C ---------------------------------------------
#
# smattn_ref cannot be stopped once called, and a KeyboardInterrupt reaches Python only
# between bytecodes of the main thread. So a large call runs in a worker thread, as a
# sequence of sub-problems (whole query heads: rows are independent, so the bits are those
# of one call), while the calling thread waits in short, interruptible steps, shows the
# progress and, on Ctrl-C, tells the worker to stop after its current chunk and raises at
# once. A chunk is about _REF_CHUNK_UNITS x threads units of key slots x (D + Dv), about a
# second of binary32-sized work; a head is never split (its rows' causal diagonal depends on
# S), so one head of a huge row count is one chunk.
_REF_CHUNK_UNITS = 1 << 23
_PROGRESS_AFTER = 1.0  # seconds before the terminal display appears (short calls stay quiet)
_POLL = 0.1            # seconds between two looks at the worker


def _ref_chunks(b, budget):
    """Sub-problems (b0, nb, h0, nh) covering the problem, each about `budget` units; a
    head range stays within one KV group or covers whole groups, so that it is a problem
    of its own (query head h reads KV head h // G)."""
    G = 1 if b.softmax else b.Hq // b.Hkv
    per_head = b.S * b.T * (b.D + b.Dv)
    if b.B * b.Hq * per_head <= budget or b.ragged is not None:  # a layout: one call
        return [(0, b.B, 0, b.Hq)]
    heads = max(1, budget // per_head)
    if heads >= b.Hq:
        nb = heads // b.Hq
        return [(b0, min(nb, b.B - b0), 0, b.Hq) for b0 in range(0, b.B, nb)]
    out = []
    for b0 in range(b.B):
        if heads >= G:
            n = heads // G * G
            out += [(b0, 1, h0, min(n, b.Hq - h0)) for h0 in range(0, b.Hq, n)]
        else:
            for g0 in range(0, b.Hq, G):
                out += [(b0, 1, h0, min(heads, g0 + G - h0)) for h0 in range(g0, g0 + G, heads)]
    return out


def _shift(t, off):
    """Tensor t's data moved by `off` elements (a view of a sub-problem)."""
    if t.data and off:  # a block tensor's offsets are whole blocks (strides of 32)
        t.data = t.data + (off // _QBLOCK * _BLOCK_BYTES[t.dtype] if t.dtype in _BLOCK_BYTES
                           else off * _ITEMSIZE[t.dtype])


def _sub_problem(b, out, b0, nb, h0, nh):
    """The problem, inputs and outputs of batches [b0, b0+nb) and heads [h0, h0+nh): the
    same memory, the pointers moved (strides are the canonical ones of SPEC 2.1)."""
    G = 1 if b.softmax else b.Hq // b.Hkv
    p = _lib.Problem.from_buffer_copy(b.prob)
    p.B, p.Hq = nb, nh
    if not b.softmax:
        p.Hkv = max(1, nh // G)
    for name, la in zip(("kv_lens", "q_lens"), b.lens):
        if la is not None:
            setattr(p, name, la[b0:].ctypes.data_as(ctypes.POINTER(ctypes.c_int64)))
    inp = _lib.Inputs.from_buffer_copy(b.inputs)
    o = _lib.Outputs.from_buffer_copy(out)
    if b.softmax:
        _shift(inp.x, b0 * inp.x.stride[0] + h0 * inp.x.stride[1])
    else:
        _shift(inp.q, b0 * inp.q.stride[0] + h0 * inp.q.stride[2])
        for t in (inp.k, inp.v):
            _shift(t, b0 * t.stride[0] + (h0 // G) * t.stride[2])
        _shift(o.o, b0 * o.o.stride[0] + h0 * o.o.stride[2])
    for t in (inp.bias, inp.mask, o.lse, o.p):
        _shift(t, b0 * t.stride[0] + h0 * t.stride[1])
    _shift(inp.sinks, h0 * inp.sinks.stride[0])
    if p.alibi_slopes:  # [Hq], or [B][Hq] read at b * Hq + h with the chunk's own Hq
        # (core/internal.h): a chunk of fewer heads than Hq is one batch (b = 0 only), a
        # chunk of whole batches keeps Hq, so the row stride stays right either way
        off = (b0 * b.Hq if p.alibi_slopes_per_batch else 0) + h0
        p.alibi_slopes = ctypes.cast(ctypes.cast(p.alibi_slopes, ctypes.c_void_p).value
                                     + off * ctypes.sizeof(ctypes.c_float),
                                     ctypes.POINTER(ctypes.c_float))
    if b.descale is not None:  # [B][Hkv] rows: a chunk is whole batches or heads of one
        ds, arrays = b.descale
        sub = _lib.Descale.from_buffer_copy(ds)
        for name, a in zip(("q_head", "k_head", "v_head"), arrays):
            if a is not None:
                setattr(sub, name, a.ravel()[b0 * b.Hkv + h0 // G:].ctypes.data_as(
                    ctypes.POINTER(ctypes.c_double)))
        p.descale = ctypes.addressof(sub)
        p._keep_descale = sub  # alive as long as p
    return p, inp, o


class _Progress:
    """What the caller asked to see: progress=None shows a line on a terminal (stderr) once
    a call has run _PROGRESS_AFTER seconds; True shows it always; False nothing; a callable
    is called as progress(done, total) (key slots: total = B Hq S T) from the calling
    thread, as the work advances and once at the end with done == total."""

    def __init__(self, progress, total, what):
        if not (progress is None or isinstance(progress, bool) or callable(progress)):
            raise TypeError("progress %r: want None (a line on a terminal), True, False or a "
                            "callable(done, total)" % (progress,))
        self.fn = progress if callable(progress) and not isinstance(progress, bool) else None
        self.stream = None
        if progress is True or (progress is None and _isatty(sys.stderr)):
            self.stream = sys.stderr
        self.always = progress is True
        self.total, self.what, self.last, self.shown = total, what, -1, 0
        self.t0 = time.monotonic()

    def update(self, done):
        if done == self.last:
            return
        self.last = done
        if self.fn is not None:
            self.fn(done, self.total)
        el = time.monotonic() - self.t0
        if self.stream is not None and (self.always or el >= _PROGRESS_AFTER):
            frac = done / self.total if self.total else 1.0
            eta = " (about %.0f s left)" % (el / frac - el) if 0 < frac < 1 else ""
            line = "%s: %3.0f%%%s" % (self.what, 100 * frac, eta)
            self.stream.write("\r" + line.ljust(self.shown))
            self.stream.flush()
            self.shown = len(line)

    def close(self):
        if self.stream is not None and self.shown:
            self.stream.write("\r" + " " * self.shown + "\r")
            self.stream.flush()
            self.shown = 0


def _isatty(f):
    try:
        return f.isatty()
    except (AttributeError, ValueError):
        return False


def _validate(b, out):
    """smattn_validate; for a layout or descales, smattn_validate_explain: raises the
    status's exception, then with the library's line (it names the field, the sequence and
    the entry: "k_descale[1][0] = -1 ...").
    A dense problem keeps the status's sentence, as the CLI prints it."""
    if b.ragged is None and b.descale is None:
        st = _lib.validate(ctypes.byref(b.prob), ctypes.byref(b.inputs), ctypes.byref(out))
        if st != 0:
            raise _status_error(st)
        return
    msg = ctypes.create_string_buffer(512)
    st = _lib.validate_explain(ctypes.byref(b.prob), ctypes.byref(b.inputs), ctypes.byref(out),
                               msg, len(msg))
    if st != 0:
        line = msg.value.decode(errors="replace")
        if line and line != _lib.status_str(st).decode():
            raise _status_error(st).__class__("%s (%s)" % (line, _lib.status_name(st).decode()))
        raise _status_error(st)


def _ref_run(b, out, threads, progress, what):
    """smattn_ref on b into out: one call when the work is small and nobody watches, else
    chunks in a worker thread (see above). Raises the status's exception."""
    _validate(b, out)
    cores = os.cpu_count() or 1
    budget = _REF_CHUNK_UNITS * max(1, min(threads or cores, cores))
    chunks = _ref_chunks(b, budget)
    total = b.B * b.Hq * b.S * b.T
    show = _Progress(progress, total, what)
    cfg = _lib.RefConfig(threads, 0, 0, 0)
    small = b.B * b.Hq * b.S * b.T * (b.D + b.Dv) <= budget
    if small and show.fn is None and not show.always:  # about a second at most: one call
        st = _lib.ref(ctypes.byref(b.prob), ctypes.byref(b.inputs), ctypes.byref(out),
                      ctypes.byref(cfg), None)
        if st != 0:
            raise _status_error(st)
        return
    state = {"done": 0, "status": 0, "error": None}
    stop, finished = threading.Event(), threading.Event()
    base = [0, 1, 1]  # key slots before this chunk, this chunk's slots, its C total

    def on_progress(done, ctotal, _arg):  # in the worker, from inside smattn_ref_progress
        if ctotal > 0:
            state["done"] = base[0] + base[1] * done // ctotal

    cfn = _lib.ProgressFn(on_progress)

    def work():
        try:
            for b0, nb, h0, nh in chunks:
                if stop.is_set():
                    return
                p, inp, o = _sub_problem(b, out, b0, nb, h0, nh)
                base[1] = nb * nh * b.S * b.T
                st = _lib.ref_progress(ctypes.byref(p), ctypes.byref(inp), ctypes.byref(o),
                                       ctypes.byref(cfg), None, cfn, None)
                if st != 0:
                    state["status"] = st
                    return
                base[0] += base[1]
                state["done"] = base[0]
        except BaseException as e:  # noqa: B902 (handed to the calling thread)
            state["error"] = e
        finally:
            finished.set()

    worker = threading.Thread(target=work, name="smattn.reference", daemon=True)
    try:
        worker.start()
        while not finished.wait(_POLL):
            show.update(state["done"])
        if state["error"] is not None:
            raise state["error"]
        if state["status"] != 0:
            raise _status_error(state["status"])
        show.update(total)
    except BaseException:
        stop.set()  # the worker ends with its current chunk; its outputs are dropped
        raise
    finally:
        show.close()


def _run(engine, q, k, v, dtype, weights, threads, isa, kw, progress=None):
    threads = _integer(threads, "threads", 32, minimum=0)
    if engine == "opt" and isa is not None:
        if not isinstance(isa, str) or isa not in _ISAS:
            raise ValueError("isa %r is unknown: want None (the active one), %s"
                             % (isa, ", ".join(repr(x) for x in _ISAS)))
        if not _lib.opt_isa_available(isa.encode()):
            raise ValueError("isa %r: this CPU cannot run it (available: %s)"
                             % (isa, ", ".join(x for x in _ISAS
                                               if _lib.opt_isa_available(x.encode()))))
    b = _build_softmax(q, **kw) if engine == "ref_softmax" else _build(q, k, v, **kw)
    out, o, lse, p = _outputs(b, dtype, weights)
    if engine != "opt":
        _ref_run(b, out, threads, progress,
                 "smattn.reference_softmax" if b.softmax else "smattn.reference")
        if b.softmax:
            return p, lse
        return (o, lse, p) if weights else (o, lse)
    cfg = _lib.OptConfig(threads, isa.encode() if isa else None)
    if b.ragged is not None or b.descale is not None:  # the library's line, not the kernel's
        _validate(b, out)
    st = _lib.attention(ctypes.byref(b.prob), ctypes.byref(b.inputs), ctypes.byref(out),
                        ctypes.byref(cfg))
    if st != 0:
        err = _status_error(st, "opt: kernel: ")
        if st == _ERR_UNSUPPORTED:
            err = TypeError(str(err) + "; smattn.attention takes q, k, v, bias and sinks in "
                            "float32, float16 or bfloat16 (any mix; not float64), q, k and v "
                            "also in fp8 (fp8_e4m3, fp8_e5m2), and gives dtype 'float32', "
                            "'float16' or 'bfloat16'; k and v also as q8_0 or q4_0 blocks, "
                            "with descales")
        raise err
    return (o, lse, p) if weights else (o, lse)


_DOC_ARGS = """
    q, k, v: arrays (NumPy, or anything np.asarray reads: a CPU torch tensor via
        t.detach().numpy()), any float dtype (float64, float32, float16; bfloat16 as an
        ml_dtypes bfloat16 array or as uint16 bit patterns), any strides (passed to C as
        they are; only negative or misaligned strides are copied). Layout "bshd" (default,
        any case: "BSHD" too;
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
    cu_seqlens_q: [B+1] integers; q is packed [total_q, Hq, D] (flash_attn_varlen_func) and
        O is [total_q, Hq, Dv], LSE [Hq, total_q], P [B, Hq, S, T] (S, T: the longest
        sequence's). cu_seqlens_k (with seqused_k [B]): k, v packed [total_k, Hkv, D].
        block_table [B, max_pages] (int32/int64, with kv_lens; an int32 slice of a wider
        table keeps its row stride as bt_stride): k, v are page caches
        [num_pages, page_size, Hkv, D], or [num_pages, Hkv, page_size, D] with
        kv_layout="HND". kv_indptr, kv_indices, kv_last_page_len (page_size optional,
        checked against k): FlashInfer's paged form, turned into a block table and kv_lens.
        Layouts take layout="bshd" only (SPEC 2.7).
    bias: additive, any float dtype, broadcast to [B, Hq, S, T] (NumPy rules, zero strides);
        -inf hides a key. mask: bool (or uint8), True = may attend, broadcast likewise.
        attn_mask (SDPA's keyword): a bool array is `mask`, any other `bias` (bfloat16 as
        uint16 bit patterns too).
    sinks: [Hq] logits that join only the softmax denominator (gpt-oss, FA4; SPEC 2.5).
    softcap: c > 0 replaces each score s by c*tanh(s/c) before bias and masks (SPEC 2.4).
    alibi_slopes, alibi_mode: ALiBi without a dense bias (SPEC 2.8), added after softcap and
        bias: slopes [Hq] or [B, Hq], each a float32 exactly; mode "symmetric" (the default:
        FlashAttention's -m|i + T_b - S_b - j|), "one_sided" (vLLM's m (j - T_b + 1)) or
        "mask" (llama.cpp's: bias holds -|distance| or -inf and is multiplied by the slope).
    empty_rows: what a row with no visible key and no sink gives (SPEC 3.4): "zero" (O = 0,
        P = 0: PyTorch >= 2.5, FlashAttention), "nan", or "mean" (O = mean of V over the
        first T_b keys: finite "minus large" masks as in JAX).
    empty_lse: that row's LSE: "neg_inf" (default), "pos_inf" (FlashAttention-2's kernel),
        "zero" (PyTorch's CPU flash kernel).
    dtype: output dtype: None (default) follows the inputs: the widest float type of q, k
        and v (float64 if any is float64, else float32 if any is float32 or float16 meets
        bfloat16, else their 16-bit type), as NumPy and torch promote them; or "float64",
        "float32", "float16" or "bfloat16" (returned as uint16 bit patterns:
        o.view(ml_dtypes.bfloat16), or torch.from_numpy(o.view(np.int16)).view(torch.bfloat16)).
    weights: also return P [B, Hq, S, T].
    threads: worker threads (0: all cores); results do not depend on it.

    Returns (O, LSE) or (O, LSE, P): O in the input layout ([B, S, Hq, Dv] for "bshd",
    [B, Hq, S, Dv] for "bhsd"), LSE [B, Hq, S] (natural log; flash_attn's softmax_lse), P
    [B, Hq, S, T]. Errors: ValueError for bad shapes or options, TypeError for dtypes, with
    the CLI's sentences (smattn_status_str); integers that do not fit the C field they go
    to (window, threads, kv_lens) are an OverflowError, never wrapped; floats, strings and
    bools are not integers (TypeError).
    fp8_e4m3, fp8_e5m2: names among "q", "k", "v" of uint8 arrays holding fp8 bit patterns
        (SPEC 2.9: e4m3fn, no infinity, NaN S.1111.111; e5m2 IEEE-like); ml_dtypes'
        float8_e4m3fn and float8_e5m2 arrays are recognised without being named.
    q8_0, q4_0: names among "k", "v" of uint8 arrays of llama.cpp's raw blocks (SPEC 2.9: per
        32 elements a little-endian binary16 scale d, then 32 int8 q (value d q) or 16
        bytes of nibbles n (value d (n - 8), element j < 16 the low nibble of byte j)), the
        last axis in bytes as `smattn gen` writes them: [B, T, Hkv, D/32*34] or D/32*18
        (D and Dv multiples of 32; strides of whole blocks).
    q_descale, k_descale, v_descale: a number (vLLM's k_scale) or [B, Hkv] numbers
        (FlashAttention 3's descales; query head h takes its KV head's): the real input is
        the decoded value times it, exactly; each a positive finite binary32 value
        (ValueError otherwise)."""


# The problem's keyword arguments of reference(), attention() and check() (_build's), and
# those of the softmax op's reference_softmax() and check_softmax() (_build_softmax's).
_PROBLEM_ARGS = (
    "scale", "causal", "window", "kv_lens", "q_lens", "bias", "mask", "sinks", "softcap",
    "empty_rows", "empty_lse", "layout", "is_causal", "attn_mask", "softmax_scale",
    "window_size", "cu_seqlens_q", "cu_seqlens_k", "seqused_k", "block_table",
    "kv_layout", "kv_indptr", "kv_indices", "kv_last_page_len", "page_size",
    "alibi_slopes", "alibi_mode", "fp8_e4m3", "fp8_e5m2", "q8_0", "q4_0", "q_descale",
    "k_descale", "v_descale")
_SOFTMAX_ARGS = (
    "scale", "causal", "window", "kv_lens", "q_lens", "bias", "mask", "sinks", "softcap",
    "empty_rows", "empty_lse", "is_causal", "attn_mask")


def _problem_kw(args, names):
    """The problem's keyword arguments among a caller's locals(), by name."""
    return {n: args[n] for n in names}


def reference(q, k, v, *, scale=None, causal=None, window=None, kv_lens=None, q_lens=None,
              bias=None, mask=None, sinks=None, softcap=0, empty_rows="zero",
              empty_lse="neg_inf", dtype=None, weights=False, layout="bshd",
              threads=0, progress=None, is_causal=None, attn_mask=None, softmax_scale=None,
              window_size=None, cu_seqlens_q=None, cu_seqlens_k=None, seqused_k=None,
              block_table=None, kv_layout=None, kv_indptr=None, kv_indices=None,
              kv_last_page_len=None, page_size=None, alibi_slopes=None, alibi_mode=None,
              fp8_e4m3=(), fp8_e5m2=(), q_descale=None, k_descale=None, v_descale=None,
              q8_0=(), q4_0=()):
    kw = _problem_kw(locals(), _PROBLEM_ARGS)
    return _run("ref", q, k, v, dtype, weights, threads, None, kw, progress)


_DOC_PROGRESS = """
    progress: the oracle takes seconds to minutes on large problems (S = T = 512, 28 heads,
        D = 128: about half a minute). None (default): a line "smattn.reference: 42% (about
        20 s left)" on stderr when it is a terminal and the call has run a second; True:
        that line always; False: nothing; a callable: called as progress(done, total) from
        the calling thread (total = B Hq S T key slots; done never decreases; the last call
        has done == total). Ctrl-C (KeyboardInterrupt) stops the call within a fraction of a
        second: large calls run in a worker thread, query heads at a time.
"""

reference.__doc__ = """The exact oracle (smattn_ref): every output is the exact value of
    SPEC 4 rounded once to `dtype`.
""" + _DOC_ARGS + _DOC_PROGRESS


def attention(q, k, v, *, scale=None, causal=None, window=None, kv_lens=None, q_lens=None,
              bias=None, mask=None, sinks=None, softcap=0, empty_rows="zero",
              empty_lse="neg_inf", dtype=None, weights=False, layout="bshd",
              threads=0, isa=None, is_causal=None, attn_mask=None, softmax_scale=None,
              window_size=None, cu_seqlens_q=None, cu_seqlens_k=None, seqused_k=None,
              block_table=None, kv_layout=None, kv_indptr=None, kv_indices=None,
              kv_last_page_len=None, page_size=None, alibi_slopes=None, alibi_mode=None,
              fp8_e4m3=(), fp8_e5m2=(), q_descale=None, k_descale=None, v_descale=None,
              q8_0=(), q4_0=()):
    kw = _problem_kw(locals(), _PROBLEM_ARGS)
    return _run("opt", q, k, v, dtype, weights, threads, isa, kw)


attention.__doc__ = """The fast kernel (smattn_attention: SIMD flash-attention tiles, a
    thread pool), within the SPEC 6 bound of its model (check(..., precision="opt")).
    Takes q, k, v, bias and sinks in float32, float16 or bfloat16, in any mix, q, k and v
    also in fp8, k and v also as q8_0 or q4_0 blocks (each read exactly into binary32), with
    descales per tensor or per (batch, KV head), and gives O, LSE and P in float32, float16
    or bfloat16 (rounded once from its float32 result); float64 anywhere is a TypeError.
    isa: None, "scalar", "avx2" or "avx512".
""" + _DOC_ARGS


def reference_softmax(x, *, scale=None, causal=None, window=None, kv_lens=None, q_lens=None,
                      bias=None, mask=None, sinks=None, softcap=0, empty_rows="zero",
                      empty_lse="neg_inf", dtype=None, threads=0, progress=None,
                      is_causal=None, attn_mask=None):
    """The exact oracle of the softmax op (SPEC 2, smattn_ref with op softmax): P and LSE
    of the rows of scale * x (softcapped, plus bias), with every visibility rule and
    convention of attention. x: [B, Hq, S, T] scores (3-D: [Hq, S, T]); scale: default 1.
    Returns (P [B, Hq, S, T], LSE [B, Hq, S]) rounded once to dtype (None: x's type). The
    other arguments are those of reference()."""
    kw = _problem_kw(locals(), _SOFTMAX_ARGS)
    return _run("ref_softmax", x, None, None, dtype, True, threads, None, kw, progress)


def _visibility(b):
    """SPEC 3.1-3.3 and the bool mask of 3.5 (smattn_visible, vectorised): bool [B, Hq, S,
    T], True where key j is visible to row (b, h, i) before the bias (a -inf bias, and for
    softmax an x of -inf, hide keys too: SPEC 3.5) and before any data-dependent masking."""
    p = b.prob
    i = np.arange(b.S, dtype=np.int64)[:, None]
    j = np.arange(b.T, dtype=np.int64)[None, :]
    out = np.empty((b.B, b.Hq, b.S, b.T), dtype=bool)
    kv, ql = b.lens
    r = b.ragged  # a layout's S_b and T_b (SPEC 2.7): its slices, seqused_k or kv_lens
    if r is not None and r.cu_q is not None:
        ql = r.q_len
    if r is not None and r.k_len is not None:
        kv = r.k_len
    for bb in range(b.B):
        Tb = b.T if kv is None else int(kv[bb])
        Sb = b.S if ql is None else int(ql[bb])
        d = i if p.causal == 2 else i + (Tb - Sb)  # the diagonal of SPEC 3.1
        vis = (j < Tb) & (i < Sb)
        if p.causal:
            vis = vis & (j <= d)
        if p.window_left >= 0:
            vis = vis & (j >= d - p.window_left)
        if p.window_right >= 0:
            vis = vis & (j <= d + p.window_right)
        out[bb] = vis
    if b.visible_mask is not None:
        out &= b.visible_mask
    return out


def visible(q, k, v, **problem):
    """Which keys each query row sees (SPEC 3, smattn_visible): bool [B, Hq, S, T] (3-D
    inputs: [Hq, S, T]), True where key j is visible to query i of batch b, head h under
    causal, window, kv_lens, q_lens and the bool mask; the bias is not applied (add it, as
    SPEC 3.5 says a -inf bias hides a key). For a kernel that takes a mask or an additive
    bias only: mask=visible(...), or bias=np.where(visible(...), 0, -np.inf) plus the
    problem's own bias. A row with no True is an empty row (SPEC 3.4): its output follows
    empty_rows, not the mask. problem: the arguments of reference() (layout included).
    With cu_seqlens_q it is [B, Hq, S, T] (P's shape; S and T the longest sequence's), each
    sequence under its own S_b and T_b (SPEC 2.7)."""
    b = _build(q, k, v, **problem)
    out = _visibility(b)
    packed = b.ragged is not None and b.ragged.cu_q is not None
    return out if b.batched or packed else out[0]


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
    where the spec has a finite value. mismatched: judged elements beyond their bound.
    rows_judged, rows_total: the query rows (b, h, i) judged and there are; fewer judged
    when check() was given rows=K (sampled: then passed says nothing of the other rows).
    With packed q (cu_seqlens_q) elements and rows are those the kernel gave: the stored
    rows, not the dense twin's padding rows (every twin row when P is judged too)."""
    passed: bool
    max_ratio: float
    max_ulp: float
    elements: int
    unbounded: int
    nonfinite: int
    reason: str
    worst: Optional[Element]
    mismatched: int = 0
    rows_judged: int = 0
    rows_total: int = 0

    @property
    def sampled(self):
        """True when only some rows were judged (rows=K): not the full check."""
        return self.rows_judged < self.rows_total

    def __bool__(self):
        return self.passed

    def __str__(self):
        smp = (" (sampled: %d of %d rows judged)" % (self.rows_judged, self.rows_total)
               if self.sampled else "")
        if not self.passed:
            return "fail" + smp + ": " + self.reason
        s = "pass%s: max error/bound %.3g over %d elements" % (smp, self.max_ratio, self.elements)
        return s + ("; " + self.reason if self.reason else "")


_PRECISION_NAMES = {"float64": F64, "f64": F64, "float32": F32, "f32": F32, "float16": F16,
                    "f16": F16, "bfloat16": BF16, "bf16": BF16}
_PRECISION_INTS = ("blocks", "acc_len")  # int64 fields; the others are doubles


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
            # checked here, not by ctypes: it would wrap 2**64 + 1 to 1 and take True as 1
            if key in _PRECISION_INTS:
                try:
                    val = _integer(val, "precision: " + key, 64)
                except TypeError:
                    raise TypeError("precision: %s %r is not an integer" % (key, val)) from None
            else:
                val = _number(val, "precision: " + key)
            setattr(pm, key, val)
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
    if name == "opt":  # smattn_opt_precision reads the problem (its blocks, its dtypes)
        raise ValueError("precision(\"opt\"): the built-in kernel's model depends on the "
                         "problem; pass precision=\"opt\" to check() instead")
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


def _judge(b, o, lse, p, precision, rows=None, seed=0, stored=None):
    """The checker (conform_judge) on the caller's outputs of problem b: a Report. rows:
    judge that many query rows per (batch, head) (conform/rows.c), chosen by seed. stored:
    int64 [B], a packed twin's rows per batch (conform_judge_twin), or None."""
    rows_k = 0 if rows is None else _integer(rows, "rows", 64, minimum=1)
    seed = _integer(seed, "seed", 64, signed=False)
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
        # An output that shares memory with an input (a kernel that works in place, O
        # written over Q) is judged on a copy: the checker reads the inputs as they are now.
        if any(isinstance(x, np.ndarray) and np.may_share_memory(a, x) for x in b.keep + keep):
            a = a.copy()
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
    _lib.shim().smattn_py_judge_stored(ctypes.byref(b.prob), ctypes.byref(b.inputs),
                                       ctypes.byref(got), ctypes.byref(pm), int(garbage), rows_k,
                                       seed, None if stored is None else stored.ctypes.data,
                                       ctypes.byref(r))
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
                  int(r.nonfinite), reason, worst, int(r.mismatched), int(r.rows_judged),
                  int(r.rows_total))


# A failure this far beyond the bound, with finite outputs, looks like outputs read in the
# wrong order (a layout mistake gives errors of the size of the values, 1e6-1e9 bounds).
_LAYOUT_HINT_RATIO = 1e3



def _other_layout(q, k, v, o, lse, p, kw):
    """The other layout's name if the arrays make a valid problem read in it, with the
    outputs' shapes of that problem (checked, not judged: judging again could take as long
    as the check); None if not."""
    here = _layout(kw.get("layout", "bshd"))
    other = "bhsd" if here == "bshd" else "bshd"
    try:
        b2 = _build(q, k, v, **dict(kw, layout=other))
        so, sl, sp = _shapes(b2)
        for arr, shape in ((o, so), (lse, sl), (p, sp)):
            if arr is not None and tuple(np.shape(arr)) != shape:
                return None
        out2, *held = _outputs(b2, "float32", False)  # held: the arrays out2 points into
        st = _lib.validate(ctypes.byref(b2.prob), ctypes.byref(b2.inputs), ctypes.byref(out2))
    except (TypeError, ValueError, OverflowError):
        return None
    return other if st == 0 else None


def _layout_hint(other):
    here = "bhsd" if other == "bshd" else "bshd"
    what = {"bhsd": "[B, H, S, D] as torch's scaled_dot_product_attention takes them",
            "bshd": "[B, S, H, D] as flash_attn_func takes them"}
    return ("; is the layout wrong? These arrays also make a valid problem read as "
            "layout=%r (%s): if that is how they are laid out, pass layout=%r (this check "
            "read them as layout=%r, %s)" % (other, what[other], other, here, what[here]))


def _check_ragged(b, o, q, k, v, lse, p, precision, kw, rows=None, seed=0):
    """check() of a ragged or paged problem: judged as its dense, padded twin (SPEC 2.7).
    Rows a sequence does not have are not the kernel's: their O and LSE are neither judged
    nor counted, and rows=K samples each sequence's own rows (conform_judge_twin); the worst
    element is reported in the caller's indices."""
    r = b.ragged
    so, sl, sp = _shapes(b)
    got = {}
    for arr, name, shape in ((o, "o", so), (lse, "lse", sl), (p, "p", sp)):
        if arr is None:
            continue
        a = _asarray(arr, name)
        if tuple(a.shape) != tuple(shape):
            raise ValueError("%s: shape %s, want %s" % (name, tuple(a.shape), list(shape)))
        got[name] = a
    Q, K, V, q_lens, kv_lens = r.twin(*(np.asarray(x) for x in (q, k, v)))
    tkw = {n: x for n, x in kw.items() if n not in _ragged.ARGS}
    tkw.update(q_lens=q_lens, kv_lens=kv_lens if kv_lens is not None else kw.get("kv_lens"),
               layout="bshd")
    bt = _build(Q, K, V, **tkw)
    O, L, P = got.get("o"), got.get("lse"), got.get("p")
    if r.cu_q is None and not b.batched:  # 3-D q: the twin's B = 1 is the caller's no axis
        O, L, P = (None if x is None else x[None] for x in (O, L, P))
    stored = None
    if r.cu_q is not None:  # each sequence's rows [0, S_b); the twin's others are not the kernel's
        O, L = r.dense_out(O, L)
        stored = np.ascontiguousarray(r.q_len, dtype=np.int64)
    rep = _judge(bt, O, L, P, precision, rows, seed, stored=stored)
    w = rep.worst
    if w is not None and r.cu_q is None and not b.batched:
        rep = dataclasses.replace(rep, worst=dataclasses.replace(w, index=w.index[1:]))
    elif w is not None and w.output in ("O", "LSE"):
        rep = dataclasses.replace(rep, worst=dataclasses.replace(
            w, index=r.packed_index(w.index, w.output)))
    return rep


def check(o, q, k, v, *, lse=None, p=None, precision="float32", scale=None, causal=None,
          window=None, kv_lens=None, q_lens=None, bias=None, mask=None, sinks=None,
          softcap=0, empty_rows="zero", empty_lse="neg_inf", layout="bshd", is_causal=None,
          attn_mask=None, softmax_scale=None, window_size=None, rows=None, seed=0,
          cu_seqlens_q=None, cu_seqlens_k=None, seqused_k=None, block_table=None, kv_layout=None,
          kv_indptr=None, kv_indices=None, kv_last_page_len=None, page_size=None,
          alibi_slopes=None, alibi_mode=None, fp8_e4m3=(), fp8_e5m2=(), q_descale=None,
          k_descale=None, v_descale=None, q8_0=(), q4_0=()):
    kw = _problem_kw(locals(), _PROBLEM_ARGS)
    b = _build(q, k, v, **kw)
    if o is None:
        raise TypeError("o: None; want the kernel's O (check judges O, and LSE and P when "
                        "given)")
    if b.ragged is not None:
        return _check_ragged(b, o, q, k, v, lse, p, precision, kw, rows, seed)
    try:
        r = _judge(b, o, lse, p, precision, rows, seed)
    except ValueError as e:  # an output's shape: is it the other layout's?
        other = _other_layout(q, k, v, o, lse, p, kw) if " shape " in str(e) else None
        if other is None:
            raise
        raise ValueError(str(e) + _layout_hint(other)) from None
    # A failure far beyond the bound with finite outputs, in arrays that also make a problem
    # in the other layout: a layout mistake gives errors of the size of the values.
    if not r.passed and not r.nonfinite and r.max_ratio > _LAYOUT_HINT_RATIO:
        other = _other_layout(q, k, v, o, lse, p, kw)
        if other is not None:
            r = Report(r.passed, r.max_ratio, r.max_ulp, r.elements, r.unbounded, r.nonfinite,
                       r.reason + _layout_hint(other), r.worst, r.mismatched, r.rows_judged,
                       r.rows_total)
    return r


check.__doc__ = """Judge a kernel's outputs against the exact oracle under the SPEC 6 error
    bound of a precision model (conform/judge.c, the judge of `smattn conform`).

    o: the kernel's O in the layout of q (see below); lse [B, Hq, S] and p [B, Hq, S, T]:
    optional, judged too when given. Any float dtype; an output that overlaps an input (a
    kernel that works in place) is judged on a copy. precision: the kernel model the bound
    assumes: "float32" (default: binary32 arithmetic, exp within 4 ulps, one block, serial
    sums), "float16", "bfloat16", "float64", "opt" (smattn.attention's model), a dict of
    smattn_precision fields, or smattn.precision(...). The bound replaces tolerances: there
    is no rtol or atol. The problem's arguments are those of reference(), and must describe
    the call the kernel made. A failure far beyond the bound whose arrays also make a valid
    problem in the other layout says so in its reason.

    rows: judge only that many query rows per (batch, head), so that the oracle costs
    O(rows T D) instead of O(S T D): rows 0 and S-1 and both sides of every power of two
    (2^k - 1 and 2^k below S) always, the rest drawn from `seed` (the rule of `smattn check
    --rows`, conform/rows.c). The Report then says sampled (rows_judged < rows_total): a
    bug on a row left out is not seen. None (default): every row.

    Returns a Report (truthy iff passed). Raises ValueError/TypeError for a bad problem or
    output shape, RuntimeError if the oracle fails (precision limit).
""" + _DOC_ARGS.split("    dtype:")[0]


def check_softmax(p, x, *, lse=None, precision="float32", scale=None, causal=None,
                  window=None, kv_lens=None, q_lens=None, bias=None, mask=None, sinks=None,
                  softcap=0, empty_rows="zero", empty_lse="neg_inf", is_causal=None,
                  attn_mask=None, rows=None, seed=0):
    """Judge a softmax kernel's P [B, Hq, S, T] (and LSE [B, Hq, S]) for scores x [B, Hq,
    S, T] (3-D: no B) against the exact oracle, as check() does for attention (the
    battery's softmax cases: Case.check). The arguments are those of reference_softmax()."""
    kw = _problem_kw(locals(), _SOFTMAX_ARGS)
    b = _build_softmax(x, **kw)
    if p is None:
        raise TypeError("p: None; want the kernel's P (check_softmax judges P, and LSE when "
                        "given)")
    return _judge(b, None, lse, p, precision, rows, seed)


# assert_close's keywords are check()'s, read from its signature so that a keyword added to
# check() reaches assert_close too (a hand-kept list had lost ALiBi's, fp8's and the
# descales')
_CHECK_ARGS = frozenset(n for n, par in inspect.signature(check).parameters.items()
                        if par.kind == par.KEYWORD_ONLY)


def _mismatch_message(r, msg):
    """assert_close's message, laid out as torch.testing.assert_close's: the checker's
    reason, then how many elements are beyond their bound and the worst one."""
    judged = r.elements - r.unbounded
    lines = [(msg + ": " if msg else "") + r.reason, "",
             "Mismatched elements: %d / %d (%.1f%%)"
             % (r.mismatched, judged, 100.0 * r.mismatched / judged if judged else 0.0)]
    w = r.worst
    if w is not None:
        lines.append("Greatest error/bound ratio: %.4g at %s index %s: got %r, exact %r, "
                     "bound %.3g" % (r.max_ratio, w.output, w.index, w.got, w.exact, w.bound))
    if r.unbounded:
        lines.append("Not judged: %d elements out of contract (SPEC 6.8)" % r.unbounded)
    return "\n".join(lines)


def assert_close(o, q, k, v, *, msg=None, **kw):
    """check(o, q, k, v, **kw), raising AssertionError when an element is outside its
    bound, laid out as torch.testing.assert_close's message: the checker's one-sentence
    reason, "Mismatched elements: k / n (x%)" and the worst element. msg: a prefix for the
    first line. The SPEC 6 bound replaces tolerances: rtol and atol are refused (choose
    the kernel model with precision= instead). Returns the Report on success."""
    tol = sorted(set(kw) & {"rtol", "atol"})
    if tol:
        raise TypeError("assert_close() takes no %s: smattn judges each element against its "
                        "SPEC 6 error bound, which replaces tolerances. Describe the kernel "
                        "instead: precision='float16', 'bfloat16', 'opt', or "
                        "smattn.precision('float32', blocks=32, u_p=2**-8) for an online "
                        "softmax that rounds P to bfloat16" % " or ".join(tol))
    unknown = sorted(set(kw) - _CHECK_ARGS)
    if unknown:
        raise TypeError("assert_close() got an unexpected keyword argument %r" % unknown[0])
    r = check(o, q, k, v, **kw)
    if not r.passed:
        raise AssertionError(_mismatch_message(r, msg))
    return r
