# SPDX-License-Identifier: MIT
"""_backward.py: reference_backward(), the exact gradients of attention (SPEC 10,
smattn_ref_backward) from NumPy arrays in the layouts of reference()."""
import ctypes
from collections import namedtuple

import numpy as np

from . import _api, _lib, _ragged

Gradients = namedtuple("Gradients", ["dq", "dk", "dv", "dbias", "dsinks"])
Gradients.__doc__ = """The gradients of reference_backward: dq, dk, dv in the layouts of q,
k, v; dbias [B, Hq, S, T] (None unless the problem has a bias or dbias=True asks for it);
dsinks [Hq] (None unless the problem has sinks or dsinks=True asks for it)."""


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


def reference_backward(q, k, v, do, *, dlse=None, dbias=None, dsinks=None, dtype=None,
                       threads=0, **problem):
    """The exact backward (smattn_ref_backward, SPEC 10): the gradients of the loss
    sum(dO * O) + sum(dLSE * LSE) with respect to q, k, v (and the bias and sinks), every
    element the exact value rounded once to `dtype`, deterministic for any thread count.

    q, k, v and every problem argument (scale, causal, window, kv_lens, q_lens, bias, mask,
    sinks, softcap, empty_rows, empty_lse, layout, is_causal, attn_mask, softmax_scale,
    window_size): as for reference(); the ragged and paged layouts have no backward yet
    (ValueError). do: the gradient of O, in O's shape and layout ([B, S, Hq, Dv] for
    "bshd", [B, Hq, S, Dv] for "bhsd"; 3-D inputs drop B), any float dtype. dlse: None (0),
    or the gradient of LSE, [B, Hq, S] ([Hq, S] for 3-D inputs). dbias, dsinks: None (the
    default) returns dbias when the problem has a bias and dsinks when it has sinks; True
    or False asks for or drops them. dtype: as for reference() (None: the widest float type
    of q, k and v). threads: 0 all cores.

    Returns Gradients(dq, dk, dv, dbias, dsinks): dq like q, dk like k, dv like v (dK and
    dV summed over each KV head's group of query heads, SPEC 2.2), dbias [B, Hq, S, T]
    (the full shape: a broadcast bias's gradient is its sum over the broadcast dimensions,
    which the caller takes: dbias.sum(axis=..., keepdims=True)), dsinks [Hq]. Masked keys
    get exactly +0. Errors as reference()'s, naming the argument."""
    threads = _api._integer(threads, "threads", 32, minimum=0)
    if _ragged.given(problem):
        raise ValueError("reference_backward: the ragged and paged layouts (cu_seqlens_q, "
                         "cu_seqlens_k, block_table, kv_indptr) have no backward yet (SPEC "
                         "10.6); pass their dense, padded twin with q_lens and kv_lens")
    b = _api._build(q, k, v, **problem)
    code = _api._out_code(dtype, b)
    ax = (0, 1, 2, 3) if b.layout == "bshd" else (0, 2, 1, 3)
    o_shape = (b.B, b.S, b.Hq, b.Dv) if b.layout == "bshd" else (b.B, b.Hq, b.S, b.Dv)
    keep = b.keep
    gin = _lib.GradInputs()
    d = _api._required(do, "do")
    want = o_shape if b.batched else o_shape[1:]
    if tuple(d.shape) != want:
        raise ValueError("do: shape %s, want O's shape %s (%s)"
                         % (tuple(d.shape), want,
                            ("[B,S,Hq,Dv]" if b.layout == "bshd" else "[B,Hq,S,Dv]")
                            if b.batched else
                            ("[S,Hq,Dv]" if b.layout == "bshd" else "[Hq,S,Dv]")))
    d = d if b.batched else d[None]
    _api._tensor(gin.dout, d, _api._dtype_code(d, "do"), ax, keep)
    if dlse is not None:
        g = _api._asarray(dlse, "dlse")
        want = (b.B, b.Hq, b.S) if b.batched else (b.Hq, b.S)
        if tuple(g.shape) != want:
            raise ValueError("dlse: shape %s, want LSE's shape %s (%s)"
                             % (tuple(g.shape), want, "[B,Hq,S]" if b.batched else "[Hq,S]"))
        g = g if b.batched else g[None]
        _api._tensor(gin.dlse, g, _api._dtype_code(g, "dlse"), (0, 1, 2, None), keep)
    has_bias = bool(b.inputs.bias.data)
    has_sinks = bool(b.inputs.sinks.data)
    want_dbias = has_bias if dbias is None else bool(dbias)
    want_dsinks = has_sinks if dsinks is None else bool(dsinks)
    shape_q = (b.B, b.S, b.Hq, b.D) if b.layout == "bshd" else (b.B, b.Hq, b.S, b.D)
    shape_k = (b.B, b.T, b.Hkv, b.D) if b.layout == "bshd" else (b.B, b.Hkv, b.T, b.D)
    shape_v = (b.B, b.T, b.Hkv, b.Dv) if b.layout == "bshd" else (b.B, b.Hkv, b.T, b.Dv)
    gout = _lib.GradOutputs()
    dq, dk, dv = (_grad_array(s, code) for s in (shape_q, shape_k, shape_v))
    _out(gout.dq, dq, code, ax)
    _out(gout.dk, dk, code, ax)
    _out(gout.dv, dv, code, ax)
    db = ds = None
    if want_dbias:
        db = _grad_array((b.B, b.Hq, b.S, b.T), code)
        _out(gout.dbias, db, code, (0, 1, 2, 3))
    if want_dsinks:
        ds = _grad_array((b.Hq,), code)
        _out(gout.dsinks, ds, code, (0, None, None, None))
    cfg = _lib.RefConfig(threads, 0, 0, 0)
    st = _lib.ref_backward(ctypes.byref(b.prob), ctypes.byref(b.inputs), ctypes.byref(gin),
                           ctypes.byref(gout), ctypes.byref(cfg), None)
    if st != 0:
        raise _api._status_error(st, "reference_backward: ")
    if not b.batched:
        dq, dk, dv = dq[0], dk[0], dv[0]
        db = db[0] if db is not None else None
    return Gradients(dq, dk, dv, db, ds)
