#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""torch_backward.py: PyTorch autograd's attention gradients against smattn's exact ones.

An attention written with plain torch ops (GQA by repeat_interleave, lower-right causal mask,
an additive bias, softmax, P @ V) is differentiated by autograd in float64 and float32, and
every gradient (dq, dk, dv, dbias) is compared with smattn.reference_backward (SPEC 10),
the exact values correctly rounded. The float64 run must agree to a few units in the last
place of the largest gradient; the float32 run shows the size of a working-precision
backward's error. Exits 0 when they agree, 1 when not; without torch it says so and
exits 0 (torch is not a dependency of smattn).

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
    exact = smattn.reference_backward(q, k, v, do, bias=bias, scale=scale, causal=True,
                                      dtype="float64")
    # float64 autograd differs from the exact values by its own rounding only: sums of at
    # most T + D products, each gradient within a few hundred ulps of the largest magnitude
    # it involves. 2^-40 relative to the largest gradient is far above that and far below a
    # wrong formula (a dropped term, a scale applied twice, the group not summed).
    limits = {torch.float64: 2.0 ** -40, torch.float32: 2.0 ** -14}
    ok = True
    for dt, limit in limits.items():
        ts = [torch.tensor(a, dtype=dt, requires_grad=True) for a in (q, k, v, bias)]
        o = torch_attention(*ts, scale)
        o.backward(torch.tensor(do, dtype=dt))
        for name, t, want in zip(("dq", "dk", "dv", "dbias"), ts,
                                 (exact.dq, exact.dk, exact.dv, exact.dbias)):
            got = t.grad.detach().double().numpy()
            err = float(np.max(np.abs(got - want)) / np.max(np.abs(want)))
            good = err <= limit
            ok &= good
            print("torch_backward: %-7s %-5s max |autograd - exact| / max |exact| = %.3g (%s %.3g)"
                  % (str(dt).replace("torch.", ""), name, err, "<=" if good else "EXCEEDS",
                     limit))
    print("torch_backward: autograd's gradients %s smattn's exact ones"
          % ("agree with" if ok else "DISAGREE with"))
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
