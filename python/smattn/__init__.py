# SPDX-License-Identifier: MIT
"""smattn: scaled masked softmax attention made checkable, from Python.

    o, lse = smattn.reference(q, k, v, causal=True)    # the exact oracle
    o, lse = smattn.attention(q, k, v, causal=True)    # the fast kernel
    dq, dk, dv, _, _ = smattn.reference_backward(q, k, v, do, causal=True)  # exact gradients
    g = smattn.attention_backward(q, k, v, do, causal=True)        # the fast backward
    smattn.assert_close_backward(my_dq, my_dk, my_dv, q, k, v, do, causal=True)  # SPEC 10.7
    smattn.assert_close(my_o, q, k, v, causal=True)    # judge your kernel (SPEC 6 bound)
    for case in smattn.cases("quick"):                 # the conformance battery
        if case.op == "attention":                     # (and its softmax cases)
            case.check(my_kernel(case.q, case.k, case.v, **case.kwargs))

NumPy is the only dependency; the C library (libsmattn.so.X, X the major of the version) is loaded with ctypes (see
smattn._lib for where it is looked for). Layouts: BSHD by default (flash_attn_func),
layout="bhsd" for scaled_dot_product_attention's [B, H, S, D]. spec/SPEC.md defines every
convention; help(smattn.reference) maps the arguments to it.
"""
from ._api import (Element, Report, assert_close, attention, check, check_softmax, precision,
                   reference, reference_softmax, visible)
from ._backward import (Gradients, assert_close_backward, attention_backward, check_backward,
                        reference_backward)
from ._cases import Case, cases
from ._merge import check_merge, merge, merge_reference
from ._lib import LIBRARY_PATH
from ._version import VERSION as _VERSION

__all__ = ["reference", "attention", "check", "assert_close", "cases", "precision", "Report",
           "reference_softmax", "check_softmax", "visible", "merge_reference", "merge", "check_merge",
           "Element", "Case", "LIBRARY_PATH", "__version__", "reference_backward", "Gradients",
           "attention_backward", "check_backward", "assert_close_backward"]

__version__ = _VERSION  # VERSION, read by smattn._version
