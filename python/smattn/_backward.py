# SPDX-License-Identifier: MIT
"""_backward.py: the gradients of attention from NumPy arrays in the layouts of reference():
reference_backward() (the exact oracle, smattn_ref_backward, SPEC 10), attention_backward()
(the fast kernel, smattn_attention_backward, SPEC 10.8), and check_backward() /
assert_close_backward() (given gradients judged against the oracle with the backward bound,
smattn_backward_bound, SPEC 10.7)."""
import ctypes
import math
from collections import namedtuple

import numpy as np

from . import _api, _lib, _ragged

Gradients = namedtuple("Gradients", ["dq", "dk", "dv", "dbias", "dsinks"])
Gradients.__doc__ = """The gradients of reference_backward and attention_backward: dq, dk,
dv in the layouts and shapes of q, k, v (a ragged or paged problem's: packed rows, the page
pool, +0 where no sequence's key or query is); dbias in the bias's own shape, summed over the dimensions it
is broadcast along ([B, Hq, S, T] without a bias; None unless the problem has a bias or
dbias=True asks for it); dsinks [Hq] (None unless the problem has sinks or dsinks=True asks
for it)."""


def _grad_array(shape, code):
    return np.empty(shape, dtype=_api._NP_OF[code])


def _out(t, a, code, axes):
    """Point smattn_out_tensor t at the fresh C-contiguous array a, a's axes in `axes` order
    of the canonical layout (None: a stride the shape does not have)."""
    st = _api._element_strides(a)
    t.data = a.ctypes.data if a.size else None
    t.dtype = code
    for k, ax in enumerate(axes):
        t.stride[k] = st[ax] if ax is not None else 0


class _Setup:
    """A problem with its dO (and dLSE) for the backward: b (_api._Built), gin, the axes
    of the caller's layout in the canonical one (ax) and, per gradient dQ, dK, dV, the
    4-D array to allocate (grad_shape), its canonical axes (grad_axes) and whether the
    caller's array drops the leading axis of extent 1 (grad_squeeze). A ragged or paged
    problem's gradients have q's, k's and v's own shapes (SPEC 10.1): packed rows, or the
    page pool (NHD or HND)."""

    def __init__(self, what, q, k, v, do, dlse, problem):
        b = self.b = _api._build(q, k, v, **problem)
        self.ax = (0, 1, 2, 3) if b.layout == "bshd" else (0, 2, 1, 3)
        bshd = b.layout == "bshd"
        r = b.ragged
        packed_q = r is not None and r.cu_q is not None
        self.o_shape = (b.B, b.S, b.Hq, b.Dv) if bshd else (b.B, b.Hq, b.S, b.Dv)
        self.shape_bias = (b.B, b.Hq, b.S, b.T)
        if r is None:
            shapes = ((b.B, b.S, b.Hq, b.D) if bshd else (b.B, b.Hq, b.S, b.D),
                      (b.B, b.T, b.Hkv, b.D) if bshd else (b.B, b.Hkv, b.T, b.D),
                      (b.B, b.T, b.Hkv, b.Dv) if bshd else (b.B, b.Hkv, b.T, b.Dv))
            self.grad_shape = shapes
            self.grad_axes = (self.ax,) * 3
            self.grad_squeeze = (not b.batched,) * 3
        else:  # the inputs' own shapes and axes (_api._build_ragged)
            kv_axes = (0, 2, 1, 3) if r.paged and r.hnd else (0, 1, 2, 3)
            arrs = [_api._asarray(x, n) for x, n in ((q, "q"), (k, "k"), (v, "v"))]
            self.grad_shape = tuple(a.shape if a.ndim == 4 else (1,) + a.shape for a in arrs)
            self.grad_axes = ((0, 1, 2, 3), kv_axes, kv_axes)
            self.grad_squeeze = tuple(a.ndim == 3 for a in arrs)
        self.shape_q, self.shape_k, self.shape_v = self.grad_shape
        if r is not None and r.paged:  # SPEC 10.1: a shared page's gradient is not summed
            seen = {}
            for bb in range(b.B):
                for col in range(-(-int(r.kv_lens[bb]) // r.page_size)):
                    page = int(r.table[bb, col])
                    if page in seen:
                        raise ValueError(
                            "%s: block_table[%d][%d] and block_table[%d][%d] both name page %d: "
                            "the backward does not sum a shared page's gradients (SPEC 10.1)"
                            % ((what,) + seen[page] + (bb, col, page)))
                    seen[page] = (bb, col)
        self.gin = _lib.GradInputs()
        d = _api._required(do, "do")
        if packed_q:  # O's storage: [total_q, Hq, Dv], LSE's [Hq, total_q] (SPEC 2.7)
            want = (r.total_q, b.Hq, b.Dv)
            if tuple(d.shape) != want:
                raise ValueError("do: shape %s, want O's packed shape %s ([total_q,Hq,Dv])"
                                 % (tuple(d.shape), want))
            _api._tensor(self.gin.dout, d[None], _api._dtype_code(d, "do"), (0, 1, 2, 3),
                         b.keep)
        else:
            want = self.o_shape if b.batched else self.o_shape[1:]
            if tuple(d.shape) != want:
                raise ValueError("do: shape %s, want O's shape %s (%s)"
                                 % (tuple(d.shape), want,
                                    ("[B,S,Hq,Dv]" if bshd else "[B,Hq,S,Dv]")
                                    if b.batched else ("[S,Hq,Dv]" if bshd else "[Hq,S,Dv]")))
            d = d if b.batched else d[None]
            _api._tensor(self.gin.dout, d, _api._dtype_code(d, "do"), self.ax, b.keep)
        if dlse is not None:
            g = _api._asarray(dlse, "dlse")
            if packed_q:
                want = (b.Hq, r.total_q)
                if tuple(g.shape) != want:
                    raise ValueError("dlse: shape %s, want LSE's packed shape %s ([Hq,total_q])"
                                     % (tuple(g.shape), want))
                g = g[None]
            else:
                want = (b.B, b.Hq, b.S) if b.batched else (b.Hq, b.S)
                if tuple(g.shape) != want:
                    raise ValueError("dlse: shape %s, want LSE's shape %s (%s)"
                                     % (tuple(g.shape), want,
                                        "[B,Hq,S]" if b.batched else "[Hq,S]"))
                g = g if b.batched else g[None]
            _api._tensor(self.gin.dlse, g, _api._dtype_code(g, "dlse"), (0, 1, 2, None), b.keep)
        self.has_bias = bool(b.inputs.bias.data)
        # ALiBi's mask mode makes the bias a distance mask without a gradient (SPEC 10.1):
        # no dBias unless asked
        self.dbias_default = self.has_bias and b.prob.alibi_mode != _api._ALIBI["mask"]
        self.has_sinks = bool(b.inputs.sinks.data)
        # dBias in the bias's own shape (SPEC 10.1): NumPy's broadcast aligns it to the
        # right of [B, Hq, S, T]; a dimension it broadcasts along is summed (stride 0)
        # without a bias: P's shape, which keeps B for packed q (B sequences, SPEC 2.7)
        self.bias_shape = self.shape_bias if b.batched or packed_q else self.shape_bias[1:]
        self.bias_sum = (False,) * 4
        _, raw, _ = _api._attn_mask(problem.get("attn_mask"), problem.get("mask"),
                                    problem.get("bias"))  # the forward's reading of attn_mask
        if self.has_bias and raw is not None:
            own = tuple(_api._asarray(raw, "bias").shape)
            pad = (1,) * (4 - len(own)) + own
            self.bias_sum = tuple(pad[k] == 1 and self.shape_bias[k] > 1 for k in range(4))
            self.bias_shape = own

    def bias_grad(self, code):
        """A dBias array in the bias's own shape and its canonical [B, Hq, S, T] axes (a
        summed dimension of extent 1, stride 0)."""
        a = _grad_array(self.bias_shape, code)
        full = tuple(1 if self.bias_sum[k] else n for k, n in enumerate(self.shape_bias))
        return a, a.reshape(full)

    def outputs(self, codes, want_dbias, want_dsinks):
        """Fresh gradient arrays (dq, dk, dv, dbias, dsinks; codes: their dtypes) and the
        smattn_grad_outputs pointing at them."""
        gout = _lib.GradOutputs()
        dq, dk, dv = (_grad_array(s, c) for s, c in zip(self.grad_shape, codes))
        _out(gout.dq, dq, codes[0], self.grad_axes[0])
        _out(gout.dk, dk, codes[1], self.grad_axes[1])
        _out(gout.dv, dv, codes[2], self.grad_axes[2])
        db = ds = None
        if want_dbias:
            db, view = self.bias_grad(codes[3])
            _out(gout.dbias, view, codes[3], (0, 1, 2, 3))
            for k in range(4):
                if self.bias_sum[k]:
                    gout.dbias.stride[k] = 0
        if want_dsinks:
            ds = _grad_array((self.b.Hq,), codes[4])
            _out(gout.dsinks, ds, codes[4], (0, None, None, None))
        return gout, [dq, dk, dv, db, ds]

    def result(self, arrays):
        dq, dk, dv, db, ds = arrays
        dq, dk, dv = (a[0] if sq else a for a, sq in zip((dq, dk, dv), self.grad_squeeze))
        return Gradients(dq, dk, dv, db, ds)


def reference_backward(q, k, v, do, *, dlse=None, dbias=None, dsinks=None, dtype=None,
                       threads=0, **problem):
    """The exact backward (smattn_ref_backward, SPEC 10): the gradients of the loss
    sum(dO * O) + sum(dLSE * LSE) with respect to q, k, v (and the bias and sinks), every
    element the exact value rounded once to `dtype`, deterministic for any thread count.

    q, k, v and every problem argument (scale, causal, window, kv_lens, q_lens, bias, mask,
    sinks, softcap, empty_rows, empty_lse, layout, is_causal, attn_mask, softmax_scale,
    window_size, alibi_slopes, alibi_mode, and the ragged and paged layouts' cu_seqlens_q,
    cu_seqlens_k, seqused_k, block_table, kv_layout, kv_indptr, ...): as for reference().
    do: the gradient of O, in O's shape and layout ([B, S, Hq, Dv] for "bshd", [B, Hq, S,
    Dv] for "bhsd"; 3-D inputs drop B; [total_q, Hq, Dv] with cu_seqlens_q), any float
    dtype. dlse: None (0), or the gradient of LSE, [B, Hq, S] ([Hq, S] for 3-D inputs;
    [Hq, total_q] with cu_seqlens_q). A block table that names one page for two sequences
    is refused (the shared page's gradient is not summed, SPEC 10.1: ValueError). dbias, dsinks: None (the
    default) returns dbias when the problem has a bias (not under alibi_mode "mask", whose bias has no
    gradient) and dsinks when it has sinks; True
    or False asks for or drops them. dtype: as for reference() (None: the widest float type
    of q, k and v). threads: 0 all cores.

    Returns Gradients(dq, dk, dv, dbias, dsinks): dq like q, dk like k, dv like v (dK and
    dV summed over each KV head's group of query heads, SPEC 2.2; a layout's in its
    storage: packed rows or the page pool, +0 where no stored row or key reaches), dbias in the bias's own
    shape (a broadcast bias's gradient is the exact sum over the dimensions it is broadcast
    along, rounded once, SPEC 10.1; [B, Hq, S, T] when dbias=True without a bias, [Hq, S,
    T] for 3-D q), dsinks [Hq]. Masked keys get exactly +0. Errors as reference()'s, naming
    the argument."""
    threads = _api._integer(threads, "threads", 32, minimum=0)
    su = _Setup("reference_backward", q, k, v, do, dlse, problem)
    code = _api._out_code(dtype, su.b)
    want_dbias = su.dbias_default if dbias is None else bool(dbias)
    want_dsinks = su.has_sinks if dsinks is None else bool(dsinks)
    gout, arrays = su.outputs((code,) * 5, want_dbias, want_dsinks)
    cfg = _lib.RefConfig(threads, 0, 0, 0)
    b = su.b
    st = _lib.ref_backward(ctypes.byref(b.prob), ctypes.byref(b.inputs), ctypes.byref(su.gin),
                           ctypes.byref(gout), ctypes.byref(cfg), None)
    if st != 0:
        raise _api._status_error(st, "reference_backward: ")
    return su.result(arrays)


def attention_backward(q, k, v, do, *, o=None, lse=None, dlse=None, dbias=None, dsinks=None,
                       dtype=None, threads=0, isa=None, **problem):
    """The fast backward (smattn_attention_backward, SPEC 10.8): FlashAttention-2's
    algorithm in binary32 (SIMD, the thread pool), within the bound of its model
    (check_backward(..., precision="opt")); its gradients are the same bits for every
    thread count, and for every ISA given the same o and lse (without them each ISA runs
    its own forward first, whose O and LSE may differ by ISA).

    q, k, v, do, dlse and the problem arguments as for reference_backward(); q, k, v, bias,
    sinks, do and dlse in float32, float16 or bfloat16 (float64 anywhere is a TypeError).
    o, lse: what the forward stored (O in O's shape and layout, LSE [B, Hq, S]; with
    cu_seqlens_q attention()'s packed O [total_q, Hq, Dv] and LSE [Hq, total_q]), both or
    neither; None: smattn.attention is run first (binary32 O and LSE). dtype: the gradients'
    dtype, "float32", "float16" or "bfloat16" (None: the inputs' widest, as attention()).
    threads: 0 all cores; isa: None, "scalar", "avx2" or "avx512".

    dbias, dsinks: None (the default) returns dbias when the problem has a bias (not under
    alibi_mode "mask") and dsinks [Hq] when it has sinks; True or False asks or not. dbias
    is in the bias's own shape ([B, Hq, S, T] when dbias=True without a bias, [Hq, S, T]
    for 3-D q), summed over the dimensions the bias is broadcast along; dsinks +0 for every
    head without sinks.
    Each sum runs in a fixed order: the same bits at every thread count (and ISA, as above).

    Returns Gradients(dq, dk, dv, dbias, dsinks). Errors as attention()'s."""
    threads = _api._integer(threads, "threads", 32, minimum=0)
    if isa is not None:
        if not isinstance(isa, str) or isa not in _api._ISAS:
            raise ValueError("isa %r is unknown: want None (the active one), %s"
                             % (isa, ", ".join(repr(x) for x in _api._ISAS)))
        if not _lib.opt_isa_available(isa.encode()):
            raise ValueError("isa %r: this CPU cannot run it" % (isa,))
    su = _Setup("attention_backward", q, k, v, do, dlse, problem)
    b = su.b
    code = _api._out_code(dtype, b)
    saved = None
    if (o is None) != (lse is None):
        raise ValueError("attention_backward: o and lse are saved together: pass both (what "
                         "the forward stored) or neither (the forward is run first)")
    if o is not None:
        saved = _lib.ForwardSaved()
        oa, la = _api._asarray(o, "o"), _api._asarray(lse, "lse")
        if b.ragged is not None and b.ragged.cu_q is not None:
            # attention()'s packed O [total_q, Hq, Dv] and LSE [Hq, total_q], as dO and dLSE
            so, sl = _api._shapes(b)[:2]
            for a, name, want in ((oa, "o", so), (la, "lse", sl)):
                if tuple(a.shape) != want:
                    raise ValueError("%s: shape %s, want %s's packed shape %s (%s)"
                                     % (name, tuple(a.shape), name.upper(), want,
                                        "[total_q,Hq,Dv]" if name == "o" else "[Hq,total_q]"))
            _api._tensor(saved.o, oa[None], _api._dtype_code(oa, "o"), (0, 1, 2, 3), b.keep)
            _api._tensor(saved.lse, la[None], _api._dtype_code(la, "lse"), (0, 1, 2, None),
                         b.keep)
        else:
            want = su.o_shape if b.batched else su.o_shape[1:]
            if tuple(oa.shape) != want:
                raise ValueError("o: shape %s, want O's shape %s" % (tuple(oa.shape), want))
            oa = oa if b.batched else oa[None]
            _api._tensor(saved.o, oa, _api._dtype_code(oa, "o"), su.ax, b.keep)
            want = (b.B, b.Hq, b.S) if b.batched else (b.Hq, b.S)
            if tuple(la.shape) != want:
                raise ValueError("lse: shape %s, want LSE's shape %s" % (tuple(la.shape), want))
            la = la if b.batched else la[None]
            _api._tensor(saved.lse, la, _api._dtype_code(la, "lse"), (0, 1, 2, None), b.keep)
    want_dbias = su.dbias_default if dbias is None else bool(dbias)
    want_dsinks = su.has_sinks if dsinks is None else bool(dsinks)
    gout, arrays = su.outputs((code,) * 5, want_dbias, want_dsinks)
    cfg = _lib.OptConfig(threads, isa.encode() if isa else None)
    st = _lib.attention_backward(ctypes.byref(b.prob), ctypes.byref(b.inputs),
                                 ctypes.byref(saved) if saved is not None else None,
                                 ctypes.byref(su.gin), ctypes.byref(gout), ctypes.byref(cfg))
    if st != 0:
        err = _api._status_error(st, "attention_backward: kernel: ")
        if st == _api._ERR_UNSUPPORTED:
            err = TypeError(str(err) + "; smattn.attention_backward takes q, k, v, bias, sinks, "
                            "do, dlse, o and lse in float32, float16 or bfloat16 (not float64), "
                            "finite (a -inf bias or sink aside), with scores, sums and the "
                            "saved LSE within binary32's range, and gives dtype 'float32', "
                            "'float16' or 'bfloat16'")
        raise err
    return su.result(arrays)


# ---- judging given gradients (SPEC 10.7, the ratio of 6.10) ----------------------------

_FORMAT = {_api.F64: (53, -1022), _api.F32: (24, -126), _api.F16: (11, -14),
           _api.BF16: (8, -126)}


def _values(a, code):
    """An array of dtype code as float64 (bfloat16 uint16 bit patterns decoded)."""
    if code == _api.BF16 and a.dtype == np.uint16:
        return (a.astype(np.uint32) << 16).view(np.float32).astype(np.float64)
    return a.astype(np.float64)


def _ratio(c, e, bound):
    """smattn_error_ratio (SPEC 6.10) element by element."""
    with np.errstate(all="ignore"):
        r = np.abs(c - e) / bound
        r = np.where(bound == math.inf, 0.0, r)
        r = np.where(bound == 0, math.inf, r)
        r = np.where(np.isfinite(e) & np.isinf(c), np.where(bound == math.inf, 0.0, math.inf), r)
        r = np.where(np.isinf(e), math.inf, r)
        r = np.where(np.isnan(c) != np.isnan(e), math.inf, r)
        r = np.where((c == e) | (np.isnan(c) & np.isnan(e)), 0.0, r)
    return r


def _ulps(c, e, code):
    """smattn_ulp_error (SPEC 6.10) element by element, in the format of code."""
    p, emin = _FORMAT[code]
    with np.errstate(all="ignore"):
        ex = np.floor(np.log2(np.abs(e)))
        ex = np.where(np.isfinite(ex), np.maximum(ex, emin), emin)
        u = np.abs(c - e) / np.exp2(ex - p + 1)
        u = np.where(np.isnan(c) & np.isnan(e), 0.0, u)
        u = np.where((c == e), 0.0, u)
        u = np.where(~np.isfinite(u) & ~((c == e) | (np.isnan(c) & np.isnan(e))), math.inf, u)
    return u


_BACKWARD_NAMES = {"float64": _api.F64, "f64": _api.F64, "float32": _api.F32, "f32": _api.F32,
                   "float16": _api.F16, "f16": _api.F16, "bfloat16": _api.BF16,
                   "bf16": _api.BF16}


def _backward_precision(precision, b, o_dtype, lse_dtype):
    if isinstance(precision, _lib.BackwardPrecision):
        pm = precision
    elif precision == "opt":
        pm = _lib.opt_backward_precision(ctypes.byref(b.prob))
    elif isinstance(precision, str) and precision in _BACKWARD_NAMES:
        pm = _lib.backward_precision_of(_BACKWARD_NAMES[precision])
    else:
        raise ValueError("precision %r: want 'float32', 'float16', 'bfloat16', 'float64', "
                         "'opt' (smattn.attention_backward's model) or a "
                         "smattn._lib.BackwardPrecision" % (precision,))
    for name, dt in (("o_dtype", o_dtype), ("lse_dtype", lse_dtype)):
        if dt is not None:
            setattr(pm, name, _api._out_code(dt))
    return pm


def check_backward(dq, dk, dv, q, k, v, do, *, dlse=None, dbias=None, dsinks=None,
                   precision="float32", o_dtype=None, lse_dtype=None, **problem):
    """Judge a backward kernel's gradients (SPEC 10.7): every element of dq, dk, dv (and
    dbias, dsinks when given) against the exact oracle (smattn_ref_backward) with the
    per-element bound of smattn_backward_bound for the kernel model `precision`, by the
    ratio |got - exact| / bound of SPEC 6.10; the kernel meets the spec iff every ratio is
    <= 1. Non-finite exact values are compared by class; exact zeros (masked keys, empty
    rows) have bound 0, so a masked key given a gradient fails.

    dq, dk, dv: the kernel's gradients in the layouts of q, k, v, any float dtype (bfloat16
    as uint16 bit patterns or ml_dtypes); their dtypes are the outputs' rounding. dbias: the
    gradient in the bias's own shape (summed over the dimensions it is broadcast along, as
    reference_backward returns it; [B, Hq, S, T] without a bias). dsinks: [Hq]. q, k, v, do,
    dlse and the problem arguments: as for reference_backward(). precision: "float32",
    "float16", "bfloat16", "float64" (a plain kernel computing and storing O and LSE in that
    type: smattn_backward_precision_of), "opt" (smattn.attention_backward's model), or a
    smattn._lib.BackwardPrecision; o_dtype, lse_dtype: the dtypes the forward stored O and
    LSE in (its rounding is a term of the bound), overriding the model's.

    Returns a Report (as check()'s; Element.output is "dQ", "dK", "dV", "dBias" or
    "dSinks", its index that of the array given). Raises ValueError for bad shapes or a
    model out of range."""
    su = _Setup("check_backward", q, k, v, do, dlse, problem)
    b = su.b
    pm = _backward_precision(precision, b, o_dtype, lse_dtype)
    given = [("dQ", dq, su.shape_q, 0), ("dK", dk, su.shape_k, 1), ("dV", dv, su.shape_v, 2)]
    if dbias is not None:
        given.append(("dBias", dbias, su.bias_shape, (0, 1, 2, 3)))
    if dsinks is not None:
        given.append(("dSinks", dsinks, (b.Hq,), (0,)))
    got, codes = {}, {}
    for name, arr, shape, axes in given:
        a = _api._asarray(arr, name.lower())
        whole = name in ("dSinks", "dBias") or not su.grad_squeeze[axes]  # dBias: its own shape
        want = shape if whole else shape[1:]
        if tuple(a.shape) != tuple(want):
            raise ValueError("%s: shape %s, want %s" % (name.lower(), tuple(a.shape), list(want)))
        codes[name] = _api._dtype_code(a, name.lower())
        got[name] = a if whole else a[None]
    # the exact values (binary64) and the bounds, in the caller's layout
    want_db, want_ds = "dBias" in got, "dSinks" in got
    gexact, exact = su.outputs((_api.F64,) * 5, want_db, want_ds)
    cfg = _lib.RefConfig(0, 0, 0, 0)
    st = _lib.ref_backward(ctypes.byref(b.prob), ctypes.byref(b.inputs), ctypes.byref(su.gin),
                           ctypes.byref(gexact), ctypes.byref(cfg), None)
    if st != 0:
        raise _api._status_error(st, "check_backward: the oracle: ")
    gbound, bound = su.outputs((_api.F64,) * 5, want_db, want_ds)
    fmt = _lib.GradOutputs()
    for t, name in ((fmt.dq, "dQ"), (fmt.dk, "dK"), (fmt.dv, "dV"), (fmt.dbias, "dBias"),
                    (fmt.dsinks, "dSinks")):
        t.dtype = codes.get(name, _api.F64)
    st = _lib.backward_bound(ctypes.byref(b.prob), ctypes.byref(b.inputs), ctypes.byref(su.gin),
                             ctypes.byref(pm), ctypes.byref(fmt), ctypes.byref(gbound))
    if st == _api._ERR_OPTION:
        raise ValueError("precision: the backward model is out of range (SPEC 10.7): %r" % pm)
    if st != 0:
        raise _api._status_error(st, "check_backward: the bound: ")
    index = {"dQ": 0, "dK": 1, "dV": 2, "dBias": 3, "dSinks": 4}
    worst = None
    max_ratio = max_ulp = 0.0
    elements = unbounded = nonfinite = mismatched = 0
    first_bad = None
    for name, _, _, _ in given:
        c = _values(got[name], codes[name])
        e, bd = exact[index[name]], bound[index[name]]
        r = _ratio(c, e, bd)
        u = _ulps(c, e, codes[name])
        fin = np.isfinite(e)
        unbounded += int(np.count_nonzero(fin & (bd == math.inf)))
        nonfinite += int(np.count_nonzero(fin & ~np.isfinite(c)))
        elements += int(r.size)
        bad = r > 1
        mismatched += int(np.count_nonzero(bad))
        if u.size:
            max_ulp = max(max_ulp, float(np.max(np.where(bd == math.inf, 0.0, u))))
        if r.size:
            ix = np.unravel_index(int(np.argmax(r)), r.shape)
            if float(r[ix]) >= max_ratio:
                max_ratio = float(r[ix])
                pos = ix if (name in ("dSinks", "dBias") or
                             not su.grad_squeeze[index[name]]) else ix[1:]
                worst = _api.Element(name, tuple(int(x) for x in pos), float(c[ix]), float(e[ix]),
                                     float(bd[ix]))
                if bad[ix] and first_bad is None:
                    first_bad = worst
    passed = mismatched == 0
    reason = ""
    if not passed:
        w = worst
        reason = ("%s%s = %r, exact %r, bound %.3g (error/bound %.3g); %d of %d elements "
                  "beyond their bound" % (w.output, list(w.index), w.got, w.exact, w.bound,
                                          max_ratio, mismatched, elements))
    elif unbounded:
        reason = "%d elements out of the forward's contract (bound +inf, SPEC 6.8) not judged" \
            % unbounded
    rows = b.B * b.Hq * b.S
    return _api.Report(passed, max_ratio, max_ulp, elements, unbounded, nonfinite, reason, worst,
                       mismatched, rows, rows)


def assert_close_backward(dq, dk, dv, q, k, v, do, *, msg=None, **kw):
    """check_backward(...), raising AssertionError with the report's sentence (and msg)
    when the gradients are beyond their bound; returns the Report otherwise."""
    r = check_backward(dq, dk, dv, q, k, v, do, **kw)
    if not r.passed:
        raise AssertionError(("%s: " % msg if msg else "") + "smattn.check_backward: " + str(r))
    return r
