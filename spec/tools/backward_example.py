#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""backward_example.py: the hand-worked example of SPEC 10.5, computed independently of the
C oracle: Python's decimal module at 80 significant digits (Decimal.exp is correctly rounded
at the context's precision), the formulas of SPEC 10.1 written out directly, and float() of
each Decimal (a correctly rounded conversion) for the binary64 values. Prints the exact
values to 30 digits and the binary64 results as C99 hex."""
from decimal import Decimal as Dec, getcontext

getcontext().prec = 80

scale = Dec("0.5")
# B = 1, S = 1, T = 3, Hq = 2, Hkv = 1 (both query heads read KV head 0), D = 2, Dv = 2
q = [[Dec(1), Dec(2)], [Dec(-1), Dec("0.5")]]            # q[h]
k = [[Dec(1), Dec(0)], [Dec(0), Dec(1)], [Dec(1), Dec(1)]]  # k[j]
v = [[Dec(1), Dec(2)], [Dec(-1), Dec(0)], [Dec("0.5"), Dec(3)]]
dout = [[Dec(1), Dec(-1)], [Dec("0.25"), Dec(2)]]        # dO[h]
dlse = [Dec("0.5"), Dec(0)]                               # dLSE[h]
T, D, Dv = 3, 2, 2

dq = [[Dec(0)] * D for _ in range(2)]
dk = [[Dec(0)] * D for _ in range(T)]
dv = [[Dec(0)] * Dv for _ in range(T)]
for h in range(2):
    s = [scale * sum(q[h][d] * k[j][d] for d in range(D)) for j in range(T)]
    e = [x.exp() for x in s]
    L = sum(e)
    P = [x / L for x in e]
    dP = [sum(dout[h][c] * v[j][c] for c in range(Dv)) for j in range(T)]
    delta = sum(P[j] * dP[j] for j in range(T))
    dS = [P[j] * (dP[j] - delta + dlse[h]) for j in range(T)]
    for d in range(D):
        dq[h][d] = scale * sum(dS[j] * k[j][d] for j in range(T))
    for j in range(T):
        for d in range(D):
            dk[j][d] += scale * dS[j] * q[h][d]
        for c in range(Dv):
            dv[j][c] += P[j] * dout[h][c]


def show(name, rows):
    for i, row in enumerate(rows):
        for d, x in enumerate(row):
            print(f"{name}[{i}][{d}] = {x:.30e}  f64 {float(x).hex()}")


show("dq", dq)
show("dk", dk)
show("dv", dv)
