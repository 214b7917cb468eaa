#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""torch_backward.py: PyTorch autograd's attention gradients against smattn's exact ones.

An attention written with plain torch ops (GQA by repeat_interleave, lower-right causal mask,
an additive bias, softmax, P @ V) is differentiated by autograd in float64 and float32, and
every gradient (dq, dk, dv, dbias) is judged by smattn.check_backward: against the exact
values (smattn.reference_backward, SPEC 10) within the per-element bound of SPEC 10.7 for a
plain kernel in that dtype. Exits 0 when they agree, 1 when not; without torch it says so
and exits 0 (torch is not a dependency of smattn).

    PYTHONPATH=python python3 examples/torch_backward.py
"""
import sys

import numpy as np

try:
    import torch
except ImportError:
    print("torch_backward: skipped: torch is not importable (pip install torch to run it)")
    sys.exit(0)

import smattn

B, S, T, HQ, HKV, D, DV = 2, 5, 7, 4, 2, 8, 6


def torch_attention(q, k, v, bias, scale):
    """O of q [B,S,Hq,D], k [B,T,Hkv,D], v [B,T,Hkv,Dv] with lower-right causality (key j
    visible to query i iff j <= i + T - S) and an additive bias [B,Hq,S,T]."""
    g = q.shape[2] // k.shape[2]
    kk = k.repeat_interleave(g, dim=2).transpose(1, 2)  # [B,Hq,T,D]
    vv = v.repeat_interleave(g, dim=2).transpose(1, 2)
    s = q.transpose(1, 2) @ kk.transpose(-1, -2) * scale + bias  # [B,Hq,S,T]
    i = torch.arange(q.shape[1])[:, None]
    j = torch.arange(k.shape[1])[None, :]
    s = s.masked_fill(j > i + (k.shape[1] - q.shape[1]), float("-inf"))
    return (torch.softmax(s, dim=-1) @ vv).transpose(1, 2)  # [B,S,Hq,Dv]


def main():
    rng = np.random.default_rng(2024)
    q, k, v = (rng.standard_normal(s) for s in ((B, S, HQ, D), (B, T, HKV, D), (B, T, HKV, DV)))
    bias, do = rng.standard_normal((B, HQ, S, T)) * 0.5, rng.standard_normal((B, S, HQ, DV))
    scale = 1 / np.sqrt(D)
    # Each run is judged by smattn.check_backward: every element of dq, dk, dv and dbias
    # against the exact gradient of the same (rounded) inputs, within the per-element bound
    # of SPEC 10.7 for a plain kernel computing in that dtype (its forward's O and LSE in it
    # too). The bound holds a working-precision backward's own rounding, and is far below a
    # wrong formula (a dropped term, a scale applied twice, the group not summed).
    ok = True
    for dt, npdt, name in ((torch.float64, np.float64, "float64"),
                           (torch.float32, np.float32, "float32")):
        a = [x.astype(npdt) for x in (q, k, v, bias, do)]
        ts = [torch.tensor(x, dtype=dt, requires_grad=True) for x in a[:4]]
        o = torch_attention(*ts, scale)
        o.backward(torch.tensor(a[4], dtype=dt))
        dq, dk, dv, dbias = (t.grad.detach().numpy() for t in ts)
        r = smattn.check_backward(dq, dk, dv, a[0], a[1], a[2], a[4], bias=a[3], dbias=dbias,
                                  scale=scale, causal=True, precision=name)
        ok &= r.passed
        w = r.worst
        print("torch_backward: %-7s %s (worst %s%s: autograd %.17g, exact %.17g, bound %.3g)"
              % (name, r, w.output, list(w.index), w.got, w.exact, w.bound))
    print("torch_backward: autograd's gradients %s smattn's exact ones"
          % ("agree with" if ok else "DISAGREE with"))
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
