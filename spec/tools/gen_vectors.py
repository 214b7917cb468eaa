#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""gen_vectors.py: writes the golden vectors spec/vectors/*.json, independently of the C oracle.

Run by hand from the repository root (never by make check):

    python3 spec/tools/gen_vectors.py            # (re)write every vector
    python3 spec/tools/gen_vectors.py --only NAME [NAME ...]
    python3 spec/tools/gen_vectors.py --list     # names, SPEC sections, descriptions
    python3 spec/tools/gen_vectors.py --selftest # the exact rounding against struct

Why this is independent of ref/ (C + MPFR): it is another language and another
arbitrary-precision library (mpmath), and it rounds by other means:
  * scores q.k are exact Fractions computed from the exact binary input values;
  * rational outputs (P = 1/n, LSE of one term, O whose score groups share one V mean,
    empty-row means) are rounded with exact integer arithmetic, never through a float;
  * every other output is enclosed in an mpmath interval (mpmath.iv, outward rounding,
    unbounded exponent) at 512, 1024, ... bits until both ends round to the same value
    in the target dtype (a Ziv loop whose decisions are proofs, not estimates);
  * when the enclosure still straddles one rounding boundary B (a midpoint, zero, or the
    overflow threshold) the side is decided by the sign of
        sum_k e^(t_k - t*) (W_k - B n_k),
    t_k the distinct exact scores, n_k their counts (a sink counts as one key with V = 0),
    W_k their V sums, t* the largest t_k with a nonzero coefficient (SPEC 5.5);
  * if neither decides, or the conventions leave a case open, the script raises rather
    than write a value it cannot prove.
The final rounding (nearest-even, IEEE subnormals, overflow to inf, sign of zero) is
done by integer arithmetic on the exact Fraction (round_frac below).
"""
import argparse
import json
import math
import os
import random
import sys
from decimal import Decimal, localcontext
from fractions import Fraction

from mpmath import iv, libmp, mp

NAN, INF, NINF = 'nan', 'inf', '-inf'
SPECIALS = (NAN, INF, NINF)

# dtype: (significand bits including the implicit one, exponent of the least normal,
#         exponent of the largest finite)
FORMATS = {
    'f64': (53, -1022, 1023),
    'f32': (24, -126, 127),
    'f16': (11, -14, 15),
    'bf16': (8, -126, 127),
}
OUT_DTYPES = ('f64', 'f32', 'f16', 'bf16')
ZIV_PRECS = (512, 1024, 2048, 4096, 8192)  # bits; beyond this only the sign test is tried
EXACT_DIGITS = 40


STATS = {'rational': 0, 'ziv': 0, 'sign_test': 0, 'max_prec': 0}


class Refused(Exception):
    """A value this script cannot prove, or a case the conventions do not pin."""


# ---- exact rounding ---------------------------------------------------------------------

def floor_log2(a):
    """floor(log2 a) for a Fraction a > 0."""
    n, d = a.numerator, a.denominator
    e = n.bit_length() - d.bit_length()
    if e >= 0:
        if n < (d << e):
            e -= 1
    elif (n << -e) < d:
        e -= 1
    return e


def round_frac(x, dt):
    """The Fraction x rounded to nearest, ties to even, in dtype dt, as a Python float (all
    four dtypes are subsets of binary64). Overflow gives +-inf; an exact zero is +0; a
    nonzero x that rounds to zero keeps its sign."""
    prec, emin, emax = FORMATS[dt]
    if x == 0:
        return 0.0
    neg = x < 0
    a = -x if neg else x
    e = floor_log2(a)
    q = max(e, emin) - (prec - 1)  # weight of the last significand bit (subnormals: fixed)
    n, d = a.numerator, a.denominator
    if q >= 0:
        d <<= q
    else:
        n <<= -q
    m, r = divmod(n, d)
    if 2 * r > d or (2 * r == d and m & 1):
        m += 1
    if m == 0:
        val = 0.0
    elif q + m.bit_length() - 1 > emax:  # m * 2^q >= 2^(emax+1): overflow
        val = math.inf
    else:
        val = math.ldexp(m, q)  # exact: m < 2^54
    return -val if neg else val


def same_float(a, b):
    if math.isnan(a) or math.isnan(b):
        return math.isnan(a) and math.isnan(b)
    return a == b and math.copysign(1.0, a) == math.copysign(1.0, b)


def order_index(x, dt):
    """An integer that increases by one between neighbouring values of dt, with -0 and +0
    as distinct neighbours and +-inf at the ends (to find the boundary between two)."""
    prec, emin, emax = FORMATS[dt]
    a = abs(x)
    if math.isinf(a):
        k = (emax - emin + 2) << (prec - 1)
    else:
        fa = Fraction(a)
        if fa < Fraction(2) ** emin:
            k = int(fa / Fraction(2) ** (emin - prec + 1))
        else:
            e = floor_log2(fa)
            m = fa / Fraction(2) ** (e - prec + 1)
            assert m.denominator == 1
            k = ((e - emin + 1) << (prec - 1)) + int(m) - (1 << (prec - 1))
    return -k - 1 if math.copysign(1.0, x) < 0 else k


def boundary_between(lo, hi, dt):
    """The one rounding boundary separating neighbours lo < hi of dt (exact Fraction)."""
    prec, emin, emax = FORMATS[dt]
    if order_index(hi, dt) != order_index(lo, dt) + 1:
        return None
    if lo == 0 and hi == 0:
        return Fraction(0)
    half_top = Fraction(2) ** (emax - prec)  # half an ulp at the largest binade
    if math.isinf(hi):
        return Fraction(lo) + half_top
    if math.isinf(lo):
        return Fraction(hi) - half_top
    return (Fraction(lo) + Fraction(hi)) / 2


def raw_to_float(t, dt):
    """Round an mpmath raw mpf (sign, man, exp, bc) to dt; None for an inf/nan end."""
    sign, man, exp, bc = t
    if not man:
        if t == libmp.fzero:
            return 0.0
        return None
    prec, emin, emax = FORMATS[dt]
    top = exp + bc  # 2^(top-1) <= |v| < 2^top
    if top <= emin - prec:  # below half the least subnormal: a signed zero
        return -0.0 if sign else 0.0
    if top - 1 >= emax + 2:
        return -math.inf if sign else math.inf
    fr = Fraction(man) * Fraction(2) ** exp
    return round_frac(-fr if sign else fr, dt)


def raw_to_frac(t):
    sign, man, exp, _ = t
    fr = Fraction(man) * Fraction(2) ** exp
    return -fr if sign else fr


def hexstr(x):
    """C99 hex float (or inf/-inf/nan) with trailing zero hex digits dropped."""
    if math.isnan(x):
        return 'nan'
    if math.isinf(x):
        return 'inf' if x > 0 else '-inf'
    h = float(x).hex()
    mant, _, exp = h.partition('p')
    if '.' in mant:
        mant = mant.rstrip('0').rstrip('.')
    return mant + 'p' + exp


def dec_string(d):
    """A Decimal as a plain string: fixed notation for moderate exponents, else d.ddde+-x."""
    if d.is_zero():
        return '-0' if d.is_signed() else '0'
    with localcontext() as ctx:
        ctx.prec = EXACT_DIGITS  # d has at most that many digits: normalize() is exact
        sign, digits, exp = d.normalize().as_tuple()
    ds = ''.join(map(str, digits))
    adj = exp + len(ds) - 1
    s = '-' if sign else ''
    if -6 <= adj < 21:
        if exp >= 0:
            return s + ds + '0' * exp
        point = len(ds) + exp
        if point > 0:
            return s + ds[:point] + '.' + ds[point:]
        return s + '0.' + '0' * (-point) + ds
    rest = ds[1:]
    return s + ds[0] + ('.' + rest if rest else '') + 'e' + ('+' if adj >= 0 else '') + str(adj)


def frac_decimal(x):
    with localcontext() as ctx:
        ctx.prec = EXACT_DIGITS
        return dec_string(Decimal(x.numerator) / Decimal(x.denominator))


def mpf_decimal(x):
    """40 significant digits of an mpmath number; the exponent may exceed Decimal's range
    (e^-3.4e38), so the digits are rounded apart from it."""
    text = mp.nstr(x, EXACT_DIGITS + 10, strip_zeros=False, min_fixed=1, max_fixed=0)
    mant, _, exp = text.lower().partition('e')
    with localcontext() as ctx:
        ctx.prec = EXACT_DIGITS
        m = +Decimal(mant)
    adj = m.adjusted()  # 0, or 1 when rounding carried to 10.0
    with localcontext() as ctx:
        ctx.prec = EXACT_DIGITS
        m = m.scaleb(-adj)
    e = int(exp or 0) + adj
    if -6 <= e < 21:
        with localcontext() as ctx:
            ctx.prec = EXACT_DIGITS
            return dec_string(m.scaleb(e))
    return dec_string(m).rstrip('.') + 'e' + ('+' if e >= 0 else '') + str(e)


def ivq(x):
    """An interval enclosing the Fraction x (exact when it fits the working precision)."""
    if x.denominator == 1:
        return iv.mpf(x.numerator)
    return iv.mpf(x.numerator) / iv.mpf(x.denominator)


def iv_sum(terms):
    acc = iv.mpf(0)
    for t in terms:
        acc = acc + t
    return acc


# ---- values ---------------------------------------------------------------------------
# An exact output value is one of:
#   ('s', NAN|INF|NINF)          special
#   ('q', Fraction)              rational (rounded exactly; 0 is +0)
#   ('x', evaluate, signinfo)    real: evaluate() encloses it at iv.prec; signinfo, if not
#                                None, is [(t_k, n_k, W_k)] with exact Fractions such that
#                                value = sum e^t_k W_k / sum e^t_k n_k (SPEC 5.5)

def decide(val):
    """{dtype: float} and the 40-digit string of an exact value (SPEC 2.6, 5.4-5.5)."""
    kind = val[0]
    if kind == 's':
        f = {NAN: math.nan, INF: math.inf, NINF: -math.inf}[val[1]]
        return {dt: f for dt in OUT_DTYPES}, val[1]
    if kind == 'q':
        STATS['rational'] += 1
        x = val[1]
        return {dt: round_frac(x, dt) for dt in OUT_DTYPES}, frac_decimal(x)
    _, evaluate, signinfo = val
    STATS['ziv'] += 1
    got = {}
    for prec in ZIV_PRECS:
        iv.prec = prec
        enc = evaluate()
        lo_t, hi_t = enc._mpi_
        ends = {}
        for dt in OUT_DTYPES:
            if dt in got:
                continue
            a, b = raw_to_float(lo_t, dt), raw_to_float(hi_t, dt)
            ends[dt] = (a, b)
            if a is not None and b is not None and same_float(a, b):
                got[dt] = a
        STATS['max_prec'] = max(STATS['max_prec'], prec)
        if len(got) == len(OUT_DTYPES):
            break
    for dt in OUT_DTYPES:
        if dt in got:
            continue
        a, b = ends[dt]
        if a is None or b is None:
            raise Refused('enclosure unbounded for %s' % dt)
        B = boundary_between(a, b, dt)
        if B is None or signinfo is None:
            raise Refused('undecided rounding for %s at %d bits (enclosure [%s, %s])'
                          % (dt, ZIV_PRECS[-1], a, b))
        sgn = sign_test(signinfo, B)
        STATS['sign_test'] += 1
        if sgn == 0:
            raise Refused('sign test undecided for %s at boundary %s' % (dt, B))
        got[dt] = b if sgn > 0 else a
    # The decimal string from the last enclosure's midpoint: its width is far below 40 digits.
    mp.prec = iv.prec + 64
    mid = (mp.make_mpf(lo_t) + mp.make_mpf(hi_t)) / 2
    return got, mpf_decimal(mid)


def sign_test(groups, B):
    """sign(value - B) for value = sum e^t W / sum e^t n: the sign of
    sum_k e^(t_k - t*) (W_k - B n_k), t* the largest t_k with a nonzero coefficient."""
    coef = [(t, W - B * n) for (t, n, W) in groups]
    nz = [(t, c) for (t, c) in coef if c != 0]
    if not nz:
        return 0  # value == B exactly: the rational path should have caught it
    tstar = max(t for t, _ in nz)
    for prec in ZIV_PRECS:
        iv.prec = prec
        s = iv_sum(iv.exp(ivq(t - tstar)) * ivq(c) for (t, c) in nz)
        lo_t, hi_t = s._mpi_
        lo, hi = mp.make_mpf(lo_t), mp.make_mpf(hi_t)
        if lo > 0:
            return 1
        if hi < 0:
            return -1
    return 0


# ---- inputs ---------------------------------------------------------------------------

def to_exact(x):
    if isinstance(x, str):
        if x in SPECIALS:
            return x
        raise ValueError(x)
    if isinstance(x, float):
        if math.isnan(x):
            return NAN
        if math.isinf(x):
            return INF if x > 0 else NINF
    return Fraction(x)


class Tensor:
    def __init__(self, dtype, shape, data):
        n = 1
        for s in shape:
            n *= s
        if len(data) != n:
            raise ValueError('tensor of shape %s needs %d values, got %d' % (shape, n, len(data)))
        self.dtype, self.shape = dtype, list(shape)
        if dtype == 'bool':
            self.data = [1 if v else 0 for v in data]
        else:
            self.data = [to_exact(v) for v in data]
            for v in self.data:
                if isinstance(v, Fraction) and Fraction(round_frac(v, dtype)) != v:
                    raise ValueError('%s is not exactly representable in %s' % (v, dtype))

    def at(self, idx):
        """Element at a full-rank index; size-1 dims broadcast (bias, mask)."""
        off = 0
        for i, n in zip(idx, self.shape):
            off = off * n + (i if n > 1 else 0)
        return self.data[off]

    def json(self):
        if self.dtype == 'bool':
            data = self.data
        else:
            data = [v if isinstance(v, str) else hexstr(float(v)) for v in self.data]
        return {'dtype': self.dtype, 'shape': self.shape, 'data': data}


def rnd(x, dt):
    """The dtype-dt value nearest the (float or Fraction) x: a convenient way to write inputs."""
    return Fraction(round_frac(Fraction(x), dt))


def is_finite(v):
    return isinstance(v, Fraction)


# ---- the semantics (conventions.md; SPEC 2-4) ------------------------------------------------

class Score:
    """A score s_j: exact when rat is not None, else c*tanh(pre/c) + bias with pre != 0."""
    __slots__ = ('rat', 'pre', 'cap', 'bias')

    def __init__(self, pre, cap, bias):
        self.pre, self.cap, self.bias = pre, cap, bias
        self.rat = (pre + bias) if cap == 0 else (bias if pre == 0 else None)

    def key(self):
        return ('r', self.rat) if self.rat is not None else ('c', self.pre, self.bias)

    def enclose(self):
        if self.rat is not None:
            return ivq(self.rat)
        c = ivq(self.cap)
        u = ivq(abs(self.pre)) / c
        e = iv.exp(-2 * u)  # in (0, 1): tanh(u) = (1 - e) / (1 + e), no cancellation issue
        th = (1 - e) / (1 + e)
        if self.pre < 0:
            th = -th
        return c * th + ivq(self.bias)

    def approx(self):
        if self.rat is not None:
            return self.rat
        mp.prec = 128
        c = mp.mpf(self.cap.numerator) / self.cap.denominator
        s = mp.mpf(self.pre.numerator) / self.pre.denominator
        b = mp.mpf(self.bias.numerator) / self.bias.denominator
        return raw_to_frac((c * mp.tanh(s / c) + b)._mpf_)


class Row:
    """The visible scores of one row, grouped by equal value (a sink joins as V = 0)."""

    def __init__(self, scores, vcols, sink):
        # scores: [Score]; vcols: per visible key, its V row (list) or None (softmax)
        groups = {}
        order = []
        for s, vrow in zip(scores, vcols):
            k = s.key()
            if k not in groups:
                groups[k] = [s, 0, None]
                order.append(k)
            g = groups[k]
            g[1] += 1
            if vrow is not None:
                g[2] = list(vrow) if g[2] is None else [a + b for a, b in zip(g[2], vrow)]
        if sink is not None:
            s = Score(sink, Fraction(0), Fraction(0))
            k = s.key()
            if k not in groups:
                groups[k] = [s, 0, None]
                order.append(k)
            groups[k][1] += 1  # V = 0: adds nothing to W
        self.groups = [groups[k] for k in order]
        self.ntotal = sum(g[1] for g in self.groups)
        # The shift: the largest score (exact when all are; any constant is exact maths).
        self.shift = max(g[0].approx() for g in self.groups)
        self.exact_scores = all(g[0].rat is not None for g in self.groups)
        self._cache = {}
        # Distinct keys must be distinct reals (softcapped scores are compared numerically).
        if not self.exact_scores:
            vals = sorted(float(g[0].approx()) for g in self.groups)
            for a, b in zip(vals, vals[1:]):
                if not b - a > 1e-9 * max(1.0, abs(a)):
                    raise Refused('softcapped scores too close to group safely')

    def _base(self):
        p = iv.prec
        if p not in self._cache:
            m = ivq(self.shift)
            E = [iv.exp(g[0].enclose() - m) for g in self.groups]
            den = iv_sum(e * g[1] for e, g in zip(E, self.groups))
            self._cache[p] = (E, den)
        return self._cache[p]

    def p_value(self, score):
        if len(self.groups) == 1:
            return ('q', Fraction(1, self.ntotal))
        k = score.key()
        idx = [i for i, g in enumerate(self.groups) if g[0].key() == k][0]

        def ev():
            E, den = self._base()
            return E[idx] / den
        return ('x', ev, None)

    def lse_value(self):
        if self.ntotal == 1 and self.groups[0][0].rat is not None:
            return ('q', self.groups[0][0].rat)

        def ev():
            _, den = self._base()
            return ivq(self.shift) + iv.log(den)
        return ('x', ev, None)

    def o_value(self, c):
        W = [(g[2][c] if g[2] is not None else Fraction(0)) for g in self.groups]
        means = {w / g[1] for w, g in zip(W, self.groups)}
        if len(means) == 1:
            return ('q', means.pop())  # rational: every score group has the same V mean

        def ev():
            E, den = self._base()
            return iv_sum(e * ivq(w) for e, w in zip(E, W)) / den
        info = None
        if self.exact_scores:
            info = [(g[0].rat, g[1], w) for g, w in zip(self.groups, W)]
        return ('x', ev, info)


def column_rule(vals):
    """Column c of O from the visible v_jc when some is not finite (SPEC 4.2), else None."""
    if any(v == NAN for v in vals) or (INF in vals and NINF in vals):
        return ('s', NAN)
    if INF in vals:
        return ('s', INF)
    if NINF in vals:
        return ('s', NINF)
    return None


def evaluate(prob, inp):
    """Exact outputs {'o','lse','p'} as flat row-major lists of values."""
    att = prob['op'] == 'attention'
    B, S, T, Hq = prob['B'], prob['S'], prob['T'], prob['Hq']
    Hkv, D, Dv = (prob['Hkv'], prob['D'], prob['Dv']) if att else (1, 1, 1)
    scale = Fraction(float.fromhex(prob['scale']))
    cap = Fraction(float.fromhex(prob['softcap']))
    causal = prob['causal']
    wl, wr = prob['window']
    kv_lens, q_lens = prob['kv_lens'], prob['q_lens']
    # ALiBi (SPEC 2.8): binary32 slopes, [Hq] or [B][Hq], used exactly.
    amode = prob.get('alibi_mode', 'none')
    raw = prob.get('alibi_slopes', [])
    per_batch = bool(raw) and isinstance(raw[0], list)
    slopes = [Fraction(float.fromhex(x)) for x in (sum(raw, []) if per_batch else raw)]
    O = {}
    L = {}
    P = {}
    rows = {}
    for b in range(B):
        Sb = q_lens[b] if q_lens else S
        Tb = kv_lens[b] if kv_lens else T
        for h in range(Hq):
            g = h // (Hq // Hkv)  # contiguous GQA groups
            sink = inp['sinks'].data[h] if 'sinks' in inp else None
            for i in range(S):
                padding = i >= Sb
                d = i if causal == 'upper_left' else i + Tb - Sb

                def visible(j):
                    if padding or j >= Tb:
                        return False
                    if causal != 'none' and j > d:
                        return False
                    if wr >= 0 and j > d + wr:
                        return False
                    if wl >= 0 and j < d - wl:
                        return False
                    if 'mask' in inp and not inp['mask'].at((b, h, i, j)):
                        return False
                    if 'bias' in inp and inp['bias'].at((b, h, i, j)) == NINF:
                        return False
                    if not att and inp['x'].at((b, h, i, j)) == NINF:
                        return False
                    return True
                J = [j for j in range(T) if visible(j)]
                has_sink = sink is not None and sink != NINF
                qrow = [inp['q'].at((b, i, h, e)) for e in range(D)] if att else None

                def out(o, lse, p):
                    for c in range(Dv):
                        O[(b, i, h, c)] = o[c]
                    L[(b, h, i)] = lse
                    for j in range(T):
                        P[(b, h, i, j)] = p[j]
                zero = ('q', Fraction(0))
                nan = ('s', NAN)
                if (not J and not has_sink) or padding:
                    if padding and has_sink:
                        raise Refused('padding row with a sink: not pinned by the conventions')
                    if att and not padding and not all(is_finite(v) for v in qrow):
                        raise Refused('empty row with a non-finite q: not pinned')
                    lse = {'neg_inf': ('s', NINF), 'pos_inf': ('s', INF),
                           'zero': zero}[prob['empty_lse']]
                    mode = prob['empty_rows']
                    if mode == 'zero':
                        out([zero] * Dv, lse, [zero] * T)
                    elif mode == 'nan':
                        out([nan] * Dv, lse, [nan] * T)
                    else:  # mean over keys [0, T_b)
                        p = [('q', Fraction(1, Tb)) if j < Tb else zero for j in range(T)]
                        o = []
                        for c in range(Dv):
                            vs = [inp['v'].at((b, j, g, c)) for j in range(Tb)] if att else []
                            if not all(is_finite(v) for v in vs):
                                raise Refused('mean of non-finite V: not pinned')
                            o.append(('q', sum(vs, Fraction(0)) / Tb) if Tb else zero)
                        out(o, lse, p)
                    continue
                if sink is not None and sink in (NAN, INF) and not J:
                    raise Refused('empty row with a NaN/+inf sink: not pinned')
                # Row NaN (SPEC 4.2): any non-finite q, visible k, visible x or bias NaN/+inf,
                # or a NaN/+inf sink.
                bad = sink in (NAN, INF)
                if att:
                    bad = bad or not all(is_finite(v) for v in qrow)
                    for j in J:
                        bad = bad or not all(is_finite(inp['k'].at((b, j, g, e))) for e in range(D))
                else:
                    bad = bad or any(inp['x'].at((b, h, i, j)) in (NAN, INF) for j in J)
                if 'bias' in inp:
                    bad = bad or any(inp['bias'].at((b, h, i, j)) in (NAN, INF) for j in J)
                if bad:
                    out([nan] * Dv, nan, [nan if j in J else zero for j in range(T)])
                    continue
                if not J:  # only a finite sink: O = +0, P = +0, LSE = sigma
                    out([zero] * Dv, ('q', sink), [zero] * T)
                    continue
                scores = []
                for j in J:
                    if att:
                        dot = sum((qrow[e] * inp['k'].at((b, j, g, e)) for e in range(D)),
                                  Fraction(0))
                    else:
                        dot = inp['x'].at((b, h, i, j))
                    bias = inp['bias'].at((b, h, i, j)) if 'bias' in inp else Fraction(0)
                    if amode != 'none':
                        m = slopes[b * Hq + h if per_batch else h]
                        if amode == 'symmetric':  # -m |i + T_b - S_b - j|, lower-right
                            bias += -m * abs(i + Tb - Sb - j)
                        elif amode == 'one_sided':  # m (j - T_b + 1)
                            bias += m * (j - Tb + 1)
                        else:  # mask: the bias input times the slope
                            bias = m * bias
                    scores.append(Score(scale * dot, cap, bias))
                vrows = [[inp['v'].at((b, j, g, c)) for c in range(Dv)] if att else None
                         for j in J]
                special_cols = {}
                for c in range(Dv):
                    r = column_rule([vr[c] for vr in vrows]) if att else None
                    if r:
                        special_cols[c] = r
                fin_rows = [[(v if c not in special_cols else Fraction(0))
                             for c, v in enumerate(vr)] if att else None for vr in vrows]
                row = Row(scores, fin_rows, sink if has_sink else None)
                rows[(b, h, i)] = J
                o = [special_cols[c] if c in special_cols else row.o_value(c) for c in range(Dv)]
                pj = {j: row.p_value(s) for j, s in zip(J, scores)}
                out(o, row.lse_value(), [pj.get(j, zero) for j in range(T)])
    res = {}
    if att:
        res['o'] = [O[(b, i, h, c)] for b in range(B) for i in range(S) for h in range(Hq)
                    for c in range(Dv)]
    res['lse'] = [L[(b, h, i)] for b in range(B) for h in range(Hq) for i in range(S)]
    res['p'] = [P[(b, h, i, j)] for b in range(B) for h in range(Hq) for i in range(S)
                for j in range(T)]
    return res, rows


# ---- the merge of partial states (SPEC 9) ----------------------------------------------

def log2_of_pow2(x):
    """k if the positive Fraction x is 2^k, else None."""
    n, d = x.numerator, x.denominator
    if n & (n - 1) == 0 and d & (d - 1) == 0:
        return n.bit_length() - d.bit_length()
    return None


def evaluate_merge(prob, inp):
    """Exact merged {'o', 'lse'} (SPEC 9.2): LSE = log_b sum b^LSE_n, O_c = sum b^(LSE_n -
    LSE) O_nc over the finite partials; empty partials (-inf, or +inf with empty_parts
    pos_inf) never read; a NaN LSE, or +inf with empty_parts neg_inf, makes the row NaN."""
    N, B, S, Hq, Dv = (prob[k] for k in ('N', 'B', 'S', 'Hq', 'Dv'))
    base2 = prob['lse_base'] == '2'
    O, L = {}, {}
    for b in range(B):
        for h in range(Hq):
            for i in range(S):
                lses = [inp['lse_parts'].at((n, b, h, i)) for n in range(N)]
                orows = [[inp['o_parts'].at((n, b, i, h, c)) for c in range(Dv)]
                         for n in range(N)]
                poison = any(x == NAN or (x == INF and prob['empty_parts'] == 'neg_inf')
                             for x in lses)
                F = [n for n, x in enumerate(lses) if is_finite(x)]
                if poison:
                    o, lse = [('s', NAN)] * Dv, ('s', NAN)
                elif not F:
                    o = [('q', Fraction(0)) if prob['empty_rows'] == 'zero' else ('s', NAN)] * Dv
                    lse = {'neg_inf': ('s', NINF), 'pos_inf': ('s', INF),
                           'zero': ('q', Fraction(0))}[prob['empty_lse']]
                else:
                    o, lse = merge_row([lses[n] for n in F], [orows[n] for n in F], Dv, base2)
                for c in range(Dv):
                    O[(b, i, h, c)] = o[c]
                L[(b, h, i)] = lse
    return {'o': [O[(b, i, h, c)] for b in range(B) for i in range(S) for h in range(Hq)
                  for c in range(Dv)],
            'lse': [L[(b, h, i)] for b in range(B) for h in range(Hq) for i in range(S)]}


def merge_row(t, orows, Dv, base2):
    """One row of finite partials: LSEs t (Fractions), O rows; values as evaluate()'s."""
    M = max(t)
    d = [x - M for x in t]
    # base 2 with integer differences: every weight 2^d_n is rational
    rational_w = base2 and all(x.denominator == 1 for x in d)
    W = [Fraction(2) ** int(x) for x in d] if rational_w else None

    def weights():
        if rational_w:
            return [ivq(w) for w in W]
        ln2 = iv.log(iv.mpf(2)) if base2 else None
        return [iv.exp(ivq(x) * ln2) if base2 else iv.exp(ivq(x)) for x in d]

    if len(t) == 1:
        lse = ('q', t[0])
    elif rational_w and log2_of_pow2(sum(W)) is not None:
        lse = ('q', M + log2_of_pow2(sum(W)))
    else:
        def ev_lse():
            tot = iv_sum(weights())
            return ivq(M) + (iv.log(tot) / iv.log(iv.mpf(2)) if base2 else iv.log(tot))
        lse = ('x', ev_lse, None)
    o = []
    for c in range(Dv):
        col = [r[c] for r in orows]
        rule = column_rule(col)
        if rule:
            o.append(rule)
            continue
        if len(set(col)) == 1:
            o.append(('q', col[0]))  # a convex combination of equal values
            continue
        if rational_w:
            o.append(('q', sum(w * v for w, v in zip(W, col)) / sum(W)))
            continue

        def ev_o(col=col):
            w = weights()
            return iv_sum(x * ivq(v) for x, v in zip(w, col)) / iv_sum(w)
        # base e: the sign test of SPEC 5.5 with the LSEs as scores and O as V
        info = None if base2 else [(x, 1, v) for x, v in zip(t, col)]
        o.append(('x', ev_o, info))
    return o, lse


# ---- an independent double-precision sanity check of the f64 results --------------------

def naive_check(name, prob, inp, rows, expected):
    """Recompute every finite, uncapped row in plain binary64 (shifted softmax) and compare
    loosely with the f64 expectations: catches slips in the exact path (grouping, indexing,
    output layout). rows: {(b, h, i): J} for the rows that took the ordinary path."""
    att = prob['op'] == 'attention'
    if float.fromhex(prob['softcap']) != 0:
        return 0
    amode = prob.get('alibi_mode', 'none')
    raw = prob.get('alibi_slopes', [])
    flat = [float.fromhex(x) for x in (sum(raw, []) if raw and isinstance(raw[0], list) else raw)]
    S, T, Hq = prob['S'], prob['T'], prob['Hq']
    Hkv, D, Dv = (prob['Hkv'], prob['D'], prob['Dv']) if att else (1, 1, 1)
    scale = float.fromhex(prob['scale'])
    ef = expected['f64']
    checked = 0
    for (b, h, i), J in rows.items():
        g = h // (Hq // Hkv)
        try:
            s = []
            for j in J:
                if att:
                    dot = math.fsum(float(inp['q'].at((b, i, h, e)) * inp['k'].at((b, j, g, e)))
                                    for e in range(D))
                else:
                    dot = float(inp['x'].at((b, h, i, j)))
                bias = float(inp['bias'].at((b, h, i, j))) if 'bias' in inp else 0.0
                if amode != 'none':  # SPEC 2.8, in binary64 from the problem's own fields
                    m = flat[b * Hq + h] if len(flat) > Hq else flat[h]
                    Sb = prob['q_lens'][b] if prob['q_lens'] else S
                    Tb = prob['kv_lens'][b] if prob['kv_lens'] else T
                    bias = {'symmetric': lambda: bias - m * abs(i + Tb - Sb - j),
                            'one_sided': lambda: bias + m * (j - Tb + 1),
                            'mask': lambda: m * bias}[amode]()
                s.append(scale * dot + bias)
            sink = inp['sinks'].data[h] if 'sinks' in inp else None
            extra = [float(sink)] if isinstance(sink, Fraction) else []
            m = max(s + extra)
            w = [math.exp(x - m) for x in s]
            tot = math.fsum(w + [math.exp(x - m) for x in extra])
        except OverflowError:
            continue
        if not all(math.isfinite(x) for x in s + [m, tot]) or max(map(abs, s)) > 2.0 ** 40:
            continue  # binary64 cannot resolve score differences there: nothing to compare
        li = (b * Hq + h) * S + i
        lse = m + math.log(tot)
        got = ef['lse'][li]
        assert abs(lse - got) <= 1e-12 * max(1.0, abs(lse)), (name, 'lse', li, lse, got)
        for jj, j in enumerate(J):
            got = ef['p'][li * T + j]
            assert abs(w[jj] / tot - got) <= 1e-12, (name, 'p', li, j, w[jj] / tot, got)
        if att:
            for c in range(Dv):
                oi = ((b * S + i) * Hq + h) * Dv + c
                vs = [inp['v'].at((b, j, g, c)) for j in J]
                if not all(is_finite(v) for v in vs):
                    continue
                o = math.fsum(w[jj] / tot * float(v) for jj, v in enumerate(vs))
                big = max(abs(float(v)) for v in vs)
                got = ef['o'][oi]
                assert abs(o - got) <= 1e-12 * big + 1e-300, (name, 'o', oi, o, got)
        checked += 1
    return checked


# ---- writing ----------------------------------------------------------------------------

def default_scale(D):
    """The binary64 nearest 1/sqrt(D) (SPEC 2.3), decided like any other output."""
    r = math.isqrt(D)
    if r * r == D:
        return round_frac(Fraction(1, r), 'f64')
    got, _ = decide(('x', lambda: 1 / iv.sqrt(iv.mpf(D)), None))
    return got['f64']


def problem(op='attention', B=1, S=1, T=1, Hq=1, Hkv=1, D=1, Dv=1, scale=None, softcap=0,
            causal='none', window=(-1, -1), kv_lens=None, q_lens=None, empty_rows='zero',
            empty_lse='neg_inf', alibi_mode='none', alibi_slopes=None):
    if scale is None:
        scale = default_scale(D) if op == 'attention' else 1.0
    if op == 'softmax':
        Hkv = D = Dv = 1
    for v in (scale, softcap):
        assert Fraction(round_frac(Fraction(v), 'f64')) == Fraction(v)
    d = {'op': op, 'B': B, 'S': S, 'T': T, 'Hq': Hq, 'Hkv': Hkv, 'D': D, 'Dv': Dv,
            'scale': hexstr(float(scale)), 'softcap': hexstr(float(softcap)), 'causal': causal,
            'window': list(window), 'kv_lens': kv_lens, 'q_lens': q_lens,
            'empty_rows': empty_rows, 'empty_lse': empty_lse}
    if alibi_mode != 'none':  # optional keys: the vectors without ALiBi stay as they were
        def f32hex(x):
            assert Fraction(round_frac(Fraction(x), 'f32')) == Fraction(x), x
            return hexstr(float(x))
        d['alibi_mode'] = alibi_mode
        d['alibi_slopes'] = [([f32hex(x) for x in row] if isinstance(row, list) else f32hex(row))
                             for row in alibi_slopes]
    return d


def shapes_for(prob):
    B, S, T, Hq, Hkv, D, Dv = (prob[k] for k in ('B', 'S', 'T', 'Hq', 'Hkv', 'D', 'Dv'))
    return {'q': [B, S, Hq, D], 'k': [B, T, Hkv, D], 'v': [B, T, Hkv, Dv], 'x': [B, Hq, S, T],
            'sinks': [Hq]}


def merge_problem(N=2, B=1, S=1, Hq=1, Dv=1, lse_base='e', empty_parts='neg_inf',
                  empty_rows='zero', empty_lse='neg_inf'):
    return {'op': 'merge', 'N': N, 'B': B, 'S': S, 'Hq': Hq, 'Dv': Dv, 'lse_base': lse_base,
            'empty_parts': empty_parts, 'empty_rows': empty_rows, 'empty_lse': empty_lse}


def build_merge(name, spec, description, prob, **inputs):
    """The JSON document of one merge vector (SPEC 9)."""
    N, B, S, Hq, Dv = (prob[k] for k in ('N', 'B', 'S', 'Hq', 'Dv'))
    shp = {'o_parts': [N, B, S, Hq, Dv], 'lse_parts': [N, B, Hq, S]}
    inp = {k: Tensor(dt, shp[k], data) for k, (dt, data) in inputs.items()}
    assert set(inp) == set(shp), (name, set(inp))
    vals = evaluate_merge(prob, inp)
    expected = {dt: {} for dt in OUT_DTYPES}
    exact = {}
    for out in ('o', 'lse'):
        exact[out] = []
        for dt in OUT_DTYPES:
            expected[dt][out] = []
        for v in vals[out]:
            got, text = decide(v)
            exact[out].append(text)
            for dt in OUT_DTYPES:
                expected[dt][out].append(got[dt])
    return {
        'name': name, 'description': description, 'spec': spec, 'problem': prob,
        'inputs': {k: inp[k].json() for k in ('o_parts', 'lse_parts')},
        'expected': {dt: {k: [hexstr(x) for x in expected[dt][k]] for k in expected[dt]}
                     for dt in OUT_DTYPES},
        'exact': exact, '_checked': naive_merge_check(name, prob, inp, expected),
    }


def naive_merge_check(name, prob, inp, expected):
    """The f64 expectations of rows with finite LSEs and O, recomputed in plain binary64."""
    N, B, S, Hq, Dv = (prob[k] for k in ('N', 'B', 'S', 'Hq', 'Dv'))
    base = 2.0 if prob['lse_base'] == '2' else math.e
    ef = expected['f64']
    checked = 0
    for b in range(B):
        for h in range(Hq):
            for i in range(S):
                ls = [inp['lse_parts'].at((n, b, h, i)) for n in range(N)]
                os_ = [[inp['o_parts'].at((n, b, i, h, c)) for c in range(Dv)] for n in range(N)]
                if not all(is_finite(x) for x in ls) or not all(is_finite(v) for r in os_ for v in r):
                    continue
                m = float(max(ls))
                w = [base ** (float(x) - m) for x in ls]
                lse = m + math.log(math.fsum(w), base)
                li = (b * Hq + h) * S + i
                assert abs(lse - ef['lse'][li]) <= 1e-12 * max(1.0, abs(lse)), (name, li)
                for c in range(Dv):
                    o = math.fsum(x * float(r[c]) for x, r in zip(w, os_)) / math.fsum(w)
                    oi = ((b * S + i) * Hq + h) * Dv + c
                    big = max(abs(float(r[c])) for r in os_)
                    assert abs(o - ef['o'][oi]) <= 1e-12 * big + 1e-300, (name, oi, o)
                checked += 1
    return checked


def build(name, spec, description, prob, **inputs):
    """Compute and return the JSON document of one vector."""
    if prob['op'] == 'merge':
        return build_merge(name, spec, description, prob, **inputs)
    shp = shapes_for(prob)
    inp = {}
    for key, (dtype, data, *rest) in inputs.items():
        if key in ('bias', 'mask'):
            shape = rest[0] if rest else [prob['B'], prob['Hq'], prob['S'], prob['T']]
            full = [prob['B'], prob['Hq'], prob['S'], prob['T']]
            assert all(s in (1, f) for s, f in zip(shape, full)), (name, key, shape)
        else:
            shape = shp[key]
        inp[key] = Tensor(dtype, shape, data)
    need = ('q', 'k', 'v') if prob['op'] == 'attention' else ('x',)
    for k in need:
        assert k in inp, (name, k)
    vals, rows = evaluate(prob, inp)
    expected = {dt: {} for dt in OUT_DTYPES}
    exact = {}
    for out in ('o', 'lse', 'p'):
        if out not in vals:
            continue
        exact[out] = []
        for dt in OUT_DTYPES:
            expected[dt][out] = []
        for v in vals[out]:
            got, text = decide(v)
            exact[out].append(text)
            for dt in OUT_DTYPES:
                expected[dt][out].append(got[dt])
    doc = {
        'name': name,
        'description': description,
        'spec': spec,
        'problem': prob,
        'inputs': {k: inp[k].json() for k in ('q', 'k', 'v', 'x', 'bias', 'mask', 'sinks')
                   if k in inp},
        'expected': {dt: {k: [hexstr(x) for x in expected[dt][k]] for k in expected[dt]}
                     for dt in OUT_DTYPES},
        'exact': exact,
    }
    doc['_checked'] = naive_check(name, prob, inp, rows, expected)
    return doc


def dump(doc):
    """JSON with nested objects one key per line and every array on one line."""
    def enc(v, ind):
        if isinstance(v, dict):
            flat = json.dumps(v, separators=(', ', ': '))
            if len(flat) <= 96 and not any(isinstance(x, dict) for x in v.values()):
                return flat
            pad = ' ' * (ind + 1)
            items = [pad + json.dumps(k) + ': ' + enc(x, ind + 1) for k, x in v.items()]
            return '{\n' + ',\n'.join(items) + '\n' + ' ' * ind + '}'
        return json.dumps(v, separators=(', ', ': '))
    return enc(doc, 0) + '\n'


# ---- the vectors ------------------------------------------------------------------------

def eighths(rng, n, lo=-16, hi=16):
    return [Fraction(rng.randint(lo, hi), 8) for _ in range(n)]


def vectors():
    """Yield (name, spec, description, problem, inputs) for every golden vector."""
    F = Fraction
    e23, e52 = F(1, 2 ** 23), F(1, 2 ** 52)
    out = []

    def add(name, spec, desc, prob, **inputs):
        out.append((name, spec, desc, prob, inputs))

    # -- the seeds' worked examples --------------------------------------------------------
    add('seed_softmax3', '2.1',
        'softmax op, x = [2, 1, -1], scale 1: P ~ [0.705, 0.260, 0.035], LSE ~ 2.349',
        problem('softmax', T=3, scale=1), x=('f32', [2, 1, -1]))
    add('seed_softmax_210', '2.1',
        'softmax op, x = [2, 1, 0], scale 1: P ~ [0.665, 0.245, 0.090], LSE ~ 2.408',
        problem('softmax', T=3, scale=1), x=('f32', [2, 1, 0]))
    add('seed_masked_row', '3.5',
        'attention D = 1, q = [1], k = [2, 1, -1, 3], scale 1, bool mask hides key 3, '
        'V = [10, 20, 100, NaN]: P ~ [0.705, 0.260, 0.035, +0], O ~ 15.75; the NaN in the '
        'masked slot is never read',
        problem(T=4, scale=1),
        q=('f32', [1]), k=('f32', [2, 1, -1, 3]), v=('f32', [10, 20, 100, NAN]),
        mask=('bool', [1, 1, 1, 0], [1, 1, 1, 4]))
    add('seed_masked_softmax', '3.5',
        'softmax op, x = [2, 1, -1, -inf]: x = -inf masks key 3, P ~ [0.705, 0.260, 0.035, +0]',
        problem('softmax', T=4, scale=1), x=('f32', [2, 1, -1, NINF]))
    add('causal4_table', '3.1',
        'causal prefill S = T = 4 (lower_right = upper_left when S = T), D = 1, Hq = 2 sharing '
        'one KV head: head 0 has q = 0 so P is the lower-triangular table 1/(i+1) and O the '
        'running mean of V = [1, 2, 3, 4]; head 1 has q = 1, k = [0, 1/2, 1, 3/2] so row i is '
        'softmax(k_0..k_i)',
        problem(S=4, T=4, Hq=2, Hkv=1, scale=1, causal='lower_right'),
        q=('f32', [0, 1] * 4), k=('f32', [0, F(1, 2), 1, F(3, 2)]), v=('f32', [1, 2, 3, 4]))
    add('temp_sharp', '2.3',
        'temperature 0.5 = scale 2 on the scores [2, 1, 0] (softmax op): P ~ [0.867, 0.117, '
        '0.016], sharper than at scale 1',
        problem('softmax', T=3, scale=2), x=('f32', [2, 1, 0]))
    add('temp_flat', '2.3',
        'temperature 2 = scale 0.5 on the scores [2, 1, 0] (softmax op): P ~ [0.506, 0.307, '
        '0.186], flatter than at scale 1',
        problem('softmax', T=3, scale=0.5), x=('f32', [2, 1, 0]))
    add('scale_default_d3', '2.3',
        'default scale for D = 3: the binary64 nearest 1/sqrt(3) (0x1.279a74590331cp-1), '
        'multiplied exactly into q.k = [1, 3, 0]',
        problem(T=3, D=3, Dv=2),
        q=('f32', [1, 1, 1]), k=('f32', [1, 0, 0, 1, 1, 1, 0, -1, 1]),
        v=('f32', [1, -1, 2, F(1, 2), -3, 4]))

    # -- GQA ---------------------------------------------------------------------------
    add('gqa_4_2', '2.2',
        'GQA Hq = 4, Hkv = 2: query heads 0,1 read KV head 0 and heads 2,3 read KV head 1 '
        '(contiguous groups); S = 1, T = 3, D = Dv = 2, default scale 1/sqrt(2)',
        problem(T=3, Hq=4, Hkv=2, D=2, Dv=2),
        q=('f32', [1, 0, 0, 1, 1, 1, -1, F(1, 2)]),
        k=('f32', [1, 2, -1, 0, 0, 1, F(1, 2), -2, 2, 1, -1, -1]),
        v=('f32', [1, 0, 10, 0, 0, 1, 0, 10, 2, 2, 20, 20]))
    rng = random.Random(7)
    add('gqa_14_2', '2.2',
        'GQA with groups of 7 query heads per KV head, as in Qwen2.5-7B (28:4) at Hq = 14, '
        'Hkv = 2: heads 0-6 read KV head 0, heads 7-13 read KV head 1; S = 1, T = 2, D = 2, '
        'Dv = 1, scale 1',
        problem(T=2, Hq=14, Hkv=2, D=2, Dv=1, scale=1),
        q=('f32', eighths(rng, 28)), k=('f32', [1, 0, -1, 1, 0, 1, 1, -1]),
        v=('f32', [1, 100, 2, 200]))

    # -- causal alignment, lengths, windows ----------------------------------------------
    kq = [F(1, 2), 1]
    kk = [1, 0, -1, 2]
    kv = [1, 2, 3, 4]
    add('causal_lr_s2_t4', '3.1',
        'lower_right causal with S = 2 < T = 4 (KV cache): query i sees keys j <= i + 2, so row '
        '0 sees keys 0-2 and row 1 all four; q = [1/2, 1], k = [1, 0, -1, 2], V = [1, 2, 3, 4]',
        problem(S=2, T=4, scale=1, causal='lower_right'),
        q=('f32', kq), k=('f32', kk), v=('f32', kv))
    add('causal_ul_s2_t4', '3.1',
        'upper_left causal with S = 2 < T = 4 (PyTorch is_causal): query i sees keys j <= i, so '
        'row 0 sees key 0 alone (P = 1, O = v_0, LSE = its score, all exact) and row 1 keys 0-1',
        problem(S=2, T=4, scale=1, causal='upper_left'),
        q=('f32', kq), k=('f32', kk), v=('f32', kv))
    add('causal_lr_s4_t2', '3.1',
        'lower_right causal with S = 4 > T = 2: query i sees keys j <= i - 2, so rows 0 and 1 see '
        'nothing (empty rows: O = +0, P = +0, LSE = -inf), row 2 sees key 0, row 3 both',
        problem(S=4, T=2, scale=1, causal='lower_right'),
        q=('f32', [1, -1, F(1, 2), 2]), k=('f32', [1, -1]), v=('f32', [3, 5]))
    add('causal_ul_s4_t2', '3.1',
        'upper_left causal with S = 4 > T = 2: query 0 sees key 0, queries 1-3 see both keys',
        problem(S=4, T=2, scale=1, causal='upper_left'),
        q=('f32', [1, -1, F(1, 2), 2]), k=('f32', [1, -1]), v=('f32', [3, 5]))
    add('window_causal', '3.3',
        'sliding window (left 2, right 0) with lower_right causal, S = T = 5: query i sees keys '
        'i-2..i',
        problem(S=5, T=5, scale=1, causal='lower_right', window=(2, 0)),
        q=('f32', [1, F(1, 2), -1, 2, F(1, 4)]), k=('f32', [0, 1, 2, -1, F(3, 2)]),
        v=('f32', [1, 2, 4, 8, 16]))
    add('window_noncausal', '3.3',
        'window (left 1, right 1) without causality, S = 2, T = 6: the window centres on the '
        'lower_right diagonal d = i + 4, so row 0 sees keys 3-5 and row 1 keys 4-5',
        problem(S=2, T=6, scale=1, window=(1, 1)),
        q=('f32', [1, -1]), k=('f32', [1, 2, 3, F(1, 2), -F(1, 2), 1]),
        v=('f32', [1, 2, 3, 4, 5, 6]))
    add('kv_lens_padding', '3.2',
        'kv_lens = [2, 4], B = 2, T = 4: batch 0 attends only keys 0-1; its padded keys 2-3 '
        'hold NaN/inf garbage in K and V, which is never read',
        problem(B=2, T=4, D=2, Dv=2, scale=1, kv_lens=[2, 4]),
        q=('f32', [1, F(1, 2), -1, 1]),
        k=('f32', [1, 0, 0, 1, NAN, 1, INF, NINF, 1, 1, 2, 0, 0, -1, F(1, 2), F(1, 2)]),
        v=('f32', [1, 2, 3, 4, NAN, NAN, NINF, INF, 1, -1, 2, -2, 3, -3, 4, -4]))
    add('q_lens_padding', '3.2',
        'q_lens = [3, 1] with lower_right causal, B = 2, S = T = 3: batch 1 has one real query, '
        'whose diagonal is 0 + 3 - 1 = 2 (it sees all keys); its rows 1-2 are padding (empty '
        'rows: O = +0, P = +0, LSE = -inf)',
        problem(B=2, S=3, T=3, scale=1, causal='lower_right', q_lens=[3, 1]),
        q=('f32', [1, 2, -1, F(1, 2), F(1, 4), 3]), k=('f32', [1, 0, -1, 2, 1, F(1, 2)]),
        v=('f32', [1, 2, 3, 10, 20, 30]))

    # -- bias, masks, sinks, softcap ------------------------------------------------------------
    add('bias_neg_inf', '3.5',
        'additive bias [1,1,3,4] broadcast over two heads, -inf masks keys: row 0 bias '
        '[0, -inf, 1/2, -inf], row 1 [1, -2, 0, -inf], row 2 all -inf (an empty row: O = +0, '
        'LSE = -inf); key 3 (masked everywhere) has NaN in K and inf in V, never read',
        problem(S=3, T=4, Hq=2, Hkv=1, scale=1),
        q=('f32', [1, -1, F(1, 2), 2, 0, 1]), k=('f32', [1, 2, -1, NAN]),
        v=('f32', [1, 2, 3, INF]),
        bias=('f32', [0, NINF, F(1, 2), NINF, 1, -2, 0, NINF, NINF, NINF, NINF, NINF],
              [1, 1, 3, 4]))
    big = rnd(-3.4e38, 'f32')
    add('bias_huge_gap', '5.5',
        'finite bias -3.4e38 (f32 %s) on key 2, scores [0, 0, -3.4e38] (q = 0): key 2 gets '
        'P = e^-3.4e38/.. which rounds to +0; O column 0 = mean(1, 1+2^-23) plus a positive '
        'e^-3.4e38 term, just above the f32 midpoint, so f32 rounds up to 1+2^-23; column 1 '
        'just below, f32 rounds down to 1 (decided by the sign test)' % hexstr(float(big)),
        problem(T=3, D=1, Dv=2, scale=1),
        q=('f32', [0]), k=('f32', [1, 2, 3]), v=('f32', [1, 1, 1 + e23, 1 + e23, 2, 0]),
        bias=('f32', [0, 0, big], [1, 1, 1, 3]))
    add('sinks', '2.5',
        'attention sinks per head, Hq = 3, Hkv = 1, T = 2: head 0 sink 1/2 joins the '
        'denominator only (P sums to < 1); head 1 sink -inf (no sink); head 2 sink 0 equals both '
        'scores (q = 0), so P = 1/3 exactly and O = (v0 + v1)/3 exactly',
        problem(T=2, Hq=3, Hkv=1, D=1, Dv=1, scale=1),
        q=('f32', [1, -1, 0]), k=('f32', [1, -1]), v=('f32', [3, 6]),
        sinks=('f32', [F(1, 2), NINF, 0]))
    add('sinks_empty_row', '2.5',
        'a row with no visible key but a finite sink is not empty: lower_right causal S = 2, '
        'T = 1, row 0 sees nothing, sink 3/2 gives O = +0, P = +0, LSE = 3/2 even though '
        'empty_rows = nan and empty_lse = pos_inf; row 1 sees key 0 and the sink',
        problem(S=2, T=1, scale=1, causal='lower_right', empty_rows='nan', empty_lse='pos_inf'),
        q=('f32', [1, 2]), k=('f32', [1]), v=('f32', [5]), sinks=('f32', [F(3, 2)]))
    add('softcap', '2.4',
        'softcap 5 (s -> 5 tanh(s/5)) applied to scale * q.k before the bias [0, 1, 6] (bias '
        'is not capped): row 0 scores 5tanh(12/5), 5tanh(0)+1 = 1 exactly, 5tanh(-8/5)+6; '
        'row 1 5tanh(3/5), 1, 5tanh(-2/5)+6; scale 1',
        problem(S=2, T=3, scale=1, softcap=5),
        q=('f32', [4, 1]), k=('f32', [3, 0, -2]), v=('f32', [1, 2, 3]),
        bias=('f32', [0, 1, 6], [1, 1, 1, 3]))
    add('bias_mask_broadcast', '2.5',
        'broadcast shapes: bias [1,Hq,1,T] (per head and key) and bool mask [B,1,1,T] (per '
        'batch key padding) with B = 2, Hq = 2, S = 2, T = 3',
        problem(B=2, S=2, T=3, Hq=2, Hkv=1, D=1, Dv=1, scale=1),
        q=('f32', [1, -1, F(1, 2), 2, 0, 1, -2, F(1, 4)]), k=('f32', [1, 0, -1, 2, F(1, 2), 1]),
        v=('f32', [1, 2, 3, 4, 5, 6]),
        bias=('f32', [0, F(-1, 2), -1, 0, -2, -4], [1, 2, 1, 3]),
        mask=('bool', [1, 1, 0, 0, 1, 1], [2, 1, 1, 3]))

    # -- empty-row conventions ------------------------------------------------------------
    emp = dict(B=2, S=3, T=3, scale=1, q_lens=[2, 3], kv_lens=[3, 0])
    emp_in = dict(
        q=('f32', [1, -1, 2, F(1, 2), 1, 0]),
        k=('f32', [1, 0, -1, NAN, NAN, NAN]), v=('f32', [1, 2, 4, NAN, INF, NAN]),
        mask=('bool', [1, 1, 1, 0, 0, 0, 1, 1, 0], [1, 1, 3, 3]))
    emp_desc = ('B = 2, S = T = 3, q_lens = [2, 3], kv_lens = [3, 0], mask [1,1,3,3] with row 1 '
                'all false: batch 0 row 0 is normal, row 1 fully masked, row 2 padding; batch 1 '
                'has no keys (its K, V are NaN garbage, never read). ')
    add('empty_zero', '3.4', emp_desc + 'empty_rows = zero: O = +0, P = +0; empty_lse = '
        'neg_inf: LSE = -inf', problem(**emp), **emp_in)
    add('empty_nan', '3.4', emp_desc + 'empty_rows = nan: O = NaN, P = NaN for all j < T; '
        'empty_lse = pos_inf: LSE = +inf',
        problem(**emp, empty_rows='nan', empty_lse='pos_inf'), **emp_in)
    add('empty_mean', '3.4', emp_desc + 'empty_rows = mean: P = 1/T_b over keys < T_b, O = '
        'their mean of V (7/3, rounded exactly); with T_b = 0, O = +0 and P = +0; empty_lse = '
        'zero: LSE = +0',
        problem(**emp, empty_rows='mean', empty_lse='zero'), **emp_in)

    # -- rational rows, midpoints, the sign test -------------------------------------------------
    add('midpoint_f32', '5.4',
        'all scores equal (q = 0) so O is the exact V mean: column 0 = 1+2^-24, the f32 midpoint '
        'between 1 and 1+2^-23, rounds to even (1); column 1 = 1+3*2^-24 rounds up to the even '
        '1+2^-22; column 2 = 1+2^-53, the f64 midpoint, rounds to 1 in f64',
        problem(T=2, D=1, Dv=3, scale=1),
        q=('f32', [0]), k=('f32', [1, -1]),
        v=('f64', [1, 1 + e23, 1, 1 + e23, 1 + 2 * e23, 1 + e52]))
    e10, e7 = F(1, 2 ** 10), F(1, 2 ** 7)
    add('midpoint_f16_bf16', '5.4',
        'q = 0, O = exact V mean of two keys: col 0 1+2^-11 (f16 midpoint, to even 1); col 1 '
        '1+3*2^-11 (f16 up to 1+2^-9); col 2 1+2^-8 (bf16 midpoint, to 1); col 3 1+3*2^-8 '
        '(bf16 up to 1+2^-6); col 4 2^-25, half the least f16 subnormal (f16 +0); col 5 -2^-25 '
        '(f16 -0); col 6 65520, the f16 overflow midpoint (f16 inf)',
        problem(T=2, D=1, Dv=7, scale=1),
        q=('f32', [0]), k=('f32', [1, 2]),
        v=('f32', [1, 1 + e10, 1, 1 + e7, 0, 0, 65504,
                   1 + e10, 1 + 2 * e10, 1 + e7, 1 + 2 * e7, F(1, 2 ** 24), -F(1, 2 ** 24), 65536]))
    add('near_midpoint_gap', '5.5',
        'scores [0, 0, -1e6] (q = 1, k = [0, 0, -1e6]): the first two keys average to a midpoint '
        'and the third adds e^-1e6 (V - midpoint) / 2: col 0/1 straddle the f32 midpoint '
        '1+2^-24 (up to 1+2^-23 / down to 1), col 2/3 the f16 midpoint 1+2^-11, col 4/5 the f64 '
        'midpoint 1+2^-53; no feasible precision separates them from the midpoint: the side '
        'follows from the sign of e^-1e6 (V_2 - midpoint) (SPEC 5.5)',
        problem(T=3, D=1, Dv=6, scale=1),
        q=('f32', [1]), k=('f32', [0, 0, -1000000]),
        v=('f64', [1, 1, 1, 1, 1, 1,
                   1 + e23, 1 + e23, 1 + e10, 1 + e10, 1 + e52, 1 + e52,
                   2, 0, 2, 0, 2, 0]))
    add('rational_groups', '5.4',
        'scores [1, 1, 0, 0] (q = 1, k = [1, 1, 0, 0]): column 0 V = [1, 3, 0, 4] gives both '
        'score groups the mean 2, so O = 2 exactly though P is irrational; column 1 V = '
        '[1, 2, 3, 4] is irrational; column 2 V = [1, 2, 0, 0] has means 3/2 and 0',
        problem(T=4, D=1, Dv=3, scale=1),
        q=('f32', [1]), k=('f32', [1, 1, 0, 0]),
        v=('f32', [1, 1, 1, 3, 2, 2, 0, 3, 0, 4, 4, 0]))
    add('single_key', '5.4',
        'rows with one visible key are exact: row 0 (mask keeps key 1 only) has P = 1, O = v_1 '
        '(the f64 nearest 0.1, rounded once per dtype) and LSE = its score 3/8; row 1 sees all '
        'three keys',
        problem(S=2, T=3, D=1, Dv=1, scale=1),
        q=('f32', [F(3, 8), 1]), k=('f32', [2, 1, -1]), v=('f64', [1, 0.1, -2]),
        mask=('bool', [0, 1, 0, 1, 1, 1], [1, 1, 2, 3]))
    add('softmax_neg_inf_scale0', '3.5',
        'softmax op at scale 0: every finite x scores 0, but x = -inf still masks its key: '
        'x = [5, -inf, -7] gives P = [1/2, +0, 1/2] exactly and LSE = log 2',
        problem('softmax', T=3, scale=0), x=('f32', [5, NINF, -7]))

    # -- dtypes, range, rounding ------------------------------------------------------------
    add('subnormal_out', '2.6',
        'scores [0, 1] with tiny V (f64): col 0 ~7.1e-323 (an f64 subnormal, 14 * 2^-1074), col 1 ~2^-140 '
        '(an f32 subnormal), col 2 ~2^-21 (an f16 subnormal, bf16 normal), col 3 ~-1.7*2^-1074 '
        '(f64 -2^-1073; rounds to -0 in every narrower dtype)',
        problem(T=2, D=1, Dv=4, scale=1),
        q=('f32', [1]), k=('f32', [0, 1]),
        v=('f64', [3 * F(1, 2 ** 1070), F(1, 2 ** 140), F(1, 2 ** 20), -F(1, 2 ** 1074),
                   F(1, 2 ** 1073), 3 * F(1, 2 ** 141), F(1, 2 ** 22), -F(1, 2 ** 1073)]))
    add('overflow_f16', '2.6',
        'scores [70000, 69999] (q = 1, k in f32): LSE ~ 70000.31 > 65504 overflows f16 to inf '
        '(bf16, f32 finite); V = [1e5, 1.5e5] and [-1e5, -2e5] give O beyond f16 range (+inf, '
        '-inf)',
        problem(T=2, D=1, Dv=2, scale=1),
        q=('f32', [1]), k=('f32', [70000, 69999]),
        v=('f32', [100000, -100000, 150000, -200000]))
    rng = random.Random(16)
    add('inputs_f16', '2.6',
        'binary16 inputs (q, k, v in f16, one K element a subnormal 2^-20), S = 2, T = 3, '
        'D = Dv = 2, default scale',
        problem(S=2, T=3, D=2, Dv=2),
        q=('f16', [rnd(rng.uniform(-2, 2), 'f16') for _ in range(4)]),
        k=('f16', [rnd(rng.uniform(-2, 2), 'f16') for _ in range(5)] + [F(1, 2 ** 20)]),
        v=('f16', [rnd(rng.uniform(-10, 10), 'f16') for _ in range(6)]))
    rng = random.Random(17)
    add('inputs_bf16', '2.6',
        'bfloat16 inputs (q, k, v, bias and sinks in bf16), S = 2, T = 3, D = Dv = 2, Hq = 2, '
        'Hkv = 1, default scale',
        problem(S=2, T=3, Hq=2, Hkv=1, D=2, Dv=2),
        q=('bf16', [rnd(rng.uniform(-4, 4), 'bf16') for _ in range(8)]),
        k=('bf16', [rnd(rng.uniform(-4, 4), 'bf16') for _ in range(6)]),
        v=('bf16', [rnd(rng.uniform(-100, 100), 'bf16') for _ in range(6)]),
        bias=('bf16', [rnd(rng.uniform(-1, 1), 'bf16') for _ in range(3)], [1, 1, 1, 3]),
        sinks=('bf16', [rnd(0.3, 'bf16'), rnd(-1.7, 'bf16')]))
    a20 = rnd(1e20, 'f32')
    add('score_beyond_f32', '2.3',
        'scores are exact reals: q = [1e20, 2^-20], k = [[1e20, 0], [1e20, 2^20], [-1e20, 0]] '
        '(all f32) give q.k = [A, A + 1, -A] with A = (f32 1e20)^2 ~ 1e40, beyond the f32 range; '
        'P = [1/(1+e), e/(1+e), +0], LSE = A + log(1 + e) (f32, f16, bf16: inf)',
        problem(T=3, D=2, Dv=1, scale=1),
        q=('f32', [a20, F(1, 2 ** 20)]), k=('f32', [a20, 0, a20, 2 ** 20, -a20, 0]),
        v=('f32', [1, 2, 3]))
    rng = random.Random(3)
    add('shapes_mixed', '2.1',
        'general layout: B = 2, S = 2, T = 3, Hq = 2, Hkv = 1, D = 3, Dv = 2, values in eighths, '
        'default scale 1/sqrt(3), no masking',
        problem(B=2, S=2, T=3, Hq=2, Hkv=1, D=3, Dv=2),
        q=('f32', eighths(rng, 24)), k=('f32', eighths(rng, 18)), v=('f32', eighths(rng, 12)))

    # -- non-finite inputs ------------------------------------------------------------------
    add('nonfinite_q', '4.2',
        'a NaN or inf in q makes the row NaN (O, LSE, and P at visible keys): row 0 q = [NaN, 1], '
        'row 2 q = [inf, 0]; row 1 is normal',
        problem(S=3, T=2, D=2, Dv=1, scale=1),
        q=('f32', [NAN, 1, F(1, 2), 1, INF, 0]), k=('f32', [1, 0, 0, 1]), v=('f32', [1, 2]))
    add('nonfinite_v_cols', '4.2',
        'non-finite V acts per column: col 0 has +inf (O = +inf), col 1 +inf and -inf (NaN), '
        'col 2 NaN (NaN), col 3 finite, col 4 -inf (-inf); key 2 is masked and all-NaN (no '
        'effect); LSE and P do not depend on V',
        problem(T=3, D=1, Dv=5, scale=1),
        q=('f32', [1]), k=('f32', [1, 0, 2]),
        v=('f32', [1, INF, NAN, 1, NINF, INF, NINF, 2, 3, 2, NAN, NAN, NAN, NAN, NAN]),
        mask=('bool', [1, 1, 0], [1, 1, 1, 3]))
    add('nonfinite_k', '4.2',
        'a non-finite K poisons only the rows that see it: lower_right causal S = 2, T = 3 with '
        'the mask hiding key 0 (K = NaN there: no effect) and K[2] = +inf, visible only to row 1 '
        '(row 1 is NaN, row 0 is normal)',
        problem(S=2, T=3, D=1, Dv=1, scale=1, causal='lower_right'),
        q=('f32', [1, 1]), k=('f32', [NAN, 1, INF]), v=('f32', [7, 1, 2]),
        mask=('bool', [0, 1, 1], [1, 1, 1, 3]))
    add('nonfinite_softmax_x', '4.2',
        'softmax op: row 0 x = [1, -inf, 2] (-inf masks key 1); row 1 x = [1, NaN, 0] and row 2 '
        'x = [+inf, 0, 1] are NaN rows',
        problem('softmax', S=3, T=3, scale=1),
        x=('f32', [1, NINF, 2, 1, NAN, 0, INF, 0, 1]))
    add('nonfinite_bias_sink', '4.2',
        'Hq = 2, S = 2, T = 2 with mask [1,1,2,2] hiding key 0 of row 1: head 0 row 0 has bias '
        'NaN at a visible key (row NaN); head 0 row 1 has bias NaN at the masked key (no effect); '
        'head 1 has a NaN sink (both rows NaN)',
        problem(S=2, T=2, Hq=2, Hkv=1, scale=1),
        q=('f32', [1, 1, F(1, 2), -1]), k=('f32', [1, 2]), v=('f32', [3, 4]),
        bias=('f32', [0, NAN, NAN, 0, 0, 1, 0, F(1, 2)]),
        mask=('bool', [1, 1, 0, 1], [1, 1, 2, 2]), sinks=('f32', [0, NAN]))
    add('never_read', '3.6',
        'decode (S = 1, T = 5) with lower_right causal and window left 1: only keys 3-4 are '
        'visible; keys 0-2 hold NaN/inf in K, V and bias (bias +inf, NaN), none of which is '
        'read',
        problem(S=1, T=5, D=1, Dv=1, scale=1, causal='lower_right', window=(1, -1)),
        q=('f32', [1]), k=('f32', [NAN, INF, NINF, 1, 2]), v=('f32', [INF, NAN, NINF, 5, 9]),
        bias=('f32', [NAN, INF, NAN, 0, F(-1, 2)], [1, 1, 1, 5]))

    # -- ALiBi (SPEC 2.8): the term comes from the distance and the head's slope -------------
    # One small problem read in each mode: q = 1, k = [2, 0, -1] (so q.k = [2, 0, -1]),
    # V = [1, 2, 4], scale 1; every score below is q.k plus the term.
    alibi_in = dict(q=('f32', [1, 1, 1, 1]), k=('f32', [2, 0, -1]), v=('f32', [1, 2, 4]))
    add('alibi_symmetric', '2.8',
        'FlashAttention\'s symmetric ALiBi, -m |i + T - S - j|, no mask: S = 2, T = 3, slopes '
        '[1, -0.5]; head 0 row 0 (distances 1, 0, 1) scores [1, 0, -2]: P = [e, 1, e^-2] / '
        '(e + 1 + e^-2) ~ [0.7054, 0.2595, 0.0351], O ~ 1.3649, LSE = log(e + 1 + e^-2) ~ 1.3490; '
        'row 1 (distances 2, 1, 0) [0, -1, -1]; head 1 (slope -0.5 adds 0.5 |d|) rows '
        '[2.5, 0, -0.5] and [3, 0.5, -1]',
        problem(S=2, T=3, Hq=2, Hkv=1, scale=1, alibi_mode='symmetric',
                alibi_slopes=[1, F(-1, 2)]), **alibi_in)
    add('alibi_one_sided', '2.8',
        'vLLM\'s one-sided ALiBi, m (j - T + 1), no mask: the inputs and slopes of '
        'alibi_symmetric; head 0 adds [-2, -1, 0] to both rows: scores [0, -1, -1], P = '
        '[1, e^-1, e^-1] / (1 + 2/e) ~ [0.5761, 0.2119, 0.2119], O ~ 1.8479, LSE = log(1 + 2/e) '
        '~ 0.5514; head 1 (slope -0.5) adds [1, 0.5, 0]: [3, 0.5, -1], the same as the symmetric '
        'mode on the last row only; row 0 differs in O, P and LSE',
        problem(S=2, T=3, Hq=2, Hkv=1, scale=1, alibi_mode='one_sided',
                alibi_slopes=[1, F(-1, 2)]), **alibi_in)
    causal_in = dict(q=('f32', [1, 1, 1, 1]), k=('f32', [2, 0, -1, 2, 0, NAN]),
                     v=('f32', [1, 2, 4, 1, 2, NAN]))
    add('alibi_causal_symmetric', '2.8',
        'symmetric ALiBi under a lower-right causal mask, B = 2, S = 2, T = 3, kv_lens [3, 2] '
        '(batch 1\'s key 2 is NaN padding), per-batch slopes [[1], [0.5]]: batch 0 row 0 sees '
        'keys 0, 1 with scores [1, 0] (P = [e, 1] / (e + 1) ~ [0.7311, 0.2689], LSE = log(1 + e) '
        '~ 1.3133), row 1 [0, -1, -1] (LSE = log(1 + 2/e) ~ 0.5514); batch 1 (T_b = 2) row 0 '
        'sees key 0 alone (LSE = 2 exactly), row 1 [1.5, 0]. O and P equal alibi_causal_one_sided\'s '
        'bit for bit; the LSE differs by m (S_b - 1 - i): 1 and 0.5 on row 0, 0 on row 1',
        problem(B=2, S=2, T=3, scale=1, causal='lower_right', kv_lens=[3, 2],
                alibi_mode='symmetric', alibi_slopes=[[1], [F(1, 2)]]), **causal_in)
    add('alibi_causal_one_sided', '2.8',
        'one-sided ALiBi, m (j - T_b + 1), on the problem of alibi_causal_symmetric: batch 0 '
        'row 0 scores [0, -1] (P as there, LSE = log(1 + e) - 1 ~ 0.3133), row 1 [0, -1, -1] '
        '(as there); batch 1 counts from T_b = 2, not T: row 0 key 0 alone, LSE = 1.5 exactly '
        '(2 there), row 1 [1.5, 0] (as there). Under a causal mask the modes differ only in '
        'the LSE, and only on rows before the last',
        problem(B=2, S=2, T=3, scale=1, causal='lower_right', kv_lens=[3, 2],
                alibi_mode='one_sided', alibi_slopes=[[1], [F(1, 2)]]), **causal_in)
    add('alibi_mask', '2.8',
        'llama.cpp\'s mask mode: the f16 bias holds -|p0 - p1| or -inf (rows [-1, 0, -inf] and '
        '[-2, -1, 0], broadcast over the heads) and is multiplied by the slope, [0.5, 0]: head 0 '
        'row 0 scores [1.5, 0] (P = [e^1.5, 1] / (e^1.5 + 1) ~ [0.8176, 0.1824], LSE ~ 1.7014), '
        'row 1 [1, -0.5, -1]; head 1 (slope 0) [2, 0] and [2, 0, -1]: the -inf still hides key 2 '
        'of row 0 (0 x -inf never arises)',
        problem(S=2, T=3, Hq=2, Hkv=1, scale=1, alibi_mode='mask', alibi_slopes=[F(1, 2), 0]),
        bias=('f16', [-1, 0, NINF, -2, -1, 0], [1, 1, 2, 3]), **alibi_in)

    # -- the merge of partial states (SPEC 9): o_parts [N,B,S,Hq,Dv], lse_parts [N,B,Hq,S] --
    add('merge_two_parts', '9.2',
        'two partials of one row, LSE [1, 0]: LSE = log(e + 1) ~ 1.3133, weights e/(e + 1) ~ '
        '0.7311 and 1/(e + 1) ~ 0.2689; O_1 = [1, 2, 0.5, inf], O_2 = [3, -2, 0.5, 1] give '
        'O ~ [1.5379, 0.9242, 0.5, inf]: 0.5 exactly (equal values), +inf from a finite '
        'partial\'s +inf (per column, as V in SPEC 4.2)',
        merge_problem(N=2, Dv=4),
        o_parts=('f32', [1, 2, F(1, 2), INF, 3, -2, F(1, 2), 1]), lse_parts=('f32', [1, 0]))
    big = rnd(1e30, 'f32')
    add('merge_far_apart', '9.2',
        'LSEs far apart, past exp\'s range in every format; row 0: LSE [0, -1000], LSE = '
        'log(1 + e^-1000) ~ 5.08e-435, +0 in every dtype (below half the least subnormal, '
        'positive), O = O_1 = [1, -1] (moved by ~1e-434); row 1: LSE [1000, 999], LSE = 1000 + '
        'log(1 + 1/e) ~ 1000.3133 (f16 1000.5, bf16 1000), O = (e O_1 + O_2)/(e + 1) ~ '
        '[1.4621, 0.5379] with O_1 = [2, 0], O_2 = [0, 2]; row 2: LSE [f32(1e30), 0], LSE = '
        'f32(1e30) (f16: inf), O = O_1 = [4, 8]',
        merge_problem(N=2, S=3, Dv=2),
        o_parts=('f32', [1, -1, 2, 0, 4, 8, 5, 7, 0, 2, -3, 9]),
        lse_parts=('f32', [0, 1000, big, -1000, 999, 0]))
    add('merge_empty_parts', '9.2',
        'empty partials, LSE -inf (FlashInfer\'s and vLLM\'s identity (0, -inf)), their O '
        'NaN and never read; row 0: LSE [-inf, 0.5, -inf], one finite partial: LSE = 0.5 and '
        'O = O_2 = [3, -1] exactly; row 1: every partial empty: O = +0, LSE = -inf '
        '(empty_rows zero, empty_lse neg_inf); row 2: LSE [+inf, 0, 0]: +inf is an infinite '
        'mass under empty_parts neg_inf, so the row is NaN',
        merge_problem(N=3, S=3, Dv=2),
        o_parts=('f32', [NAN, NAN, NAN, NAN, 1, 2, 3, -1, NAN, NAN, 5, 6, NAN, NAN, NAN, NAN,
                         7, 8]),
        lse_parts=('f32', [NINF, NINF, INF, F(1, 2), NINF, 0, NINF, NINF, 0]))
    add('merge_empty_parts_fa2', '9.2',
        'FlashAttention-2\'s conventions: empty partials written +inf (empty_parts pos_inf; '
        '-inf is empty too), empty rows O = NaN and LSE = +inf; row 0: LSE [+inf, 0.5, -inf]: '
        'LSE = 0.5, O = O_2 = [3, -1] exactly; row 1: LSE [+inf, +inf, -inf]: empty, O = NaN, '
        'LSE = +inf; row 2: LSE [NaN, 0, 0]: a NaN partial makes the row NaN',
        merge_problem(N=3, S=3, Dv=2, empty_parts='pos_inf', empty_rows='nan',
                      empty_lse='pos_inf'),
        o_parts=('f32', [NAN, NAN, NAN, NAN, 1, 2, 3, -1, NAN, NAN, 5, 6, NAN, NAN, NAN, NAN,
                         7, 8]),
        lse_parts=('f32', [INF, INF, NAN, F(1, 2), INF, 0, NINF, NINF, 0]))
    add('merge_base2', '9.2',
        'base 2 (FlashInfer\'s cascade states): LSE = log2 sum 2^LSE_n; row 0: LSE [3, 1], '
        'weights 8/10 and 2/10: LSE = log2(10) ~ 3.3219, O = 0.8 [1, 10] + 0.2 [6, 0] = [2, 8] '
        'exactly; row 1: LSE [2, 2]: LSE = 3 exactly, O = the mean of [1, 2] and [3, 3] = [2, '
        '2.5]; row 2: LSE [0.5, 0]: LSE = log2(1 + sqrt 2) ~ 1.2716, O = (sqrt 2 [1, 0] + '
        '[0, 1]) / (1 + sqrt 2) ~ [0.5858, 0.4142]',
        merge_problem(N=2, S=3, Dv=2, lse_base='2'),
        o_parts=('f32', [1, 10, 1, 2, 1, 0, 6, 0, 3, 3, 0, 1]),
        lse_parts=('f32', [3, 2, F(1, 2), 1, 2, 0]))
    return out


def selftest():
    """round_frac against Python's own binary64 -> binary32/binary16 conversions (struct 'f'
    and 'e' round to nearest-even), on random doubles around every range boundary."""
    import struct
    rng = random.Random(1)
    n = 0
    for _ in range(200000):
        e = rng.choice([rng.randint(-170, 140), rng.randint(-30, 20), rng.randint(-160, -120)])
        x = math.ldexp(rng.random() + (rng.random() < 0.1) * rng.choice([0, 1]), e)
        if rng.random() < 0.3:  # force ties and near-ties of the narrow formats
            x = math.ldexp(round(math.ldexp(x, 30)) + rng.choice([0.5, 0.5, 0.25]), -30)
        x = -x if rng.random() < 0.5 else x
        for dt, fmt in (('f32', 'f'), ('f16', 'e')):
            try:
                want = struct.unpack(fmt, struct.pack(fmt, x))[0]
            except OverflowError:
                want = math.copysign(math.inf, x)
            got = round_frac(Fraction(x), dt)
            if not same_float(got, want):
                raise AssertionError('round_frac(%r, %s) = %r, struct gives %r' % (x, dt, got, want))
            n += 1
        if round_frac(Fraction(x), 'f64') != x:
            raise AssertionError('f64 identity %r' % x)
    # bf16 is binary32's top half: nearest-even on the 16 dropped bits of a binary32.
    for _ in range(100000):
        bits = rng.getrandbits(32) & 0x7f7fffff
        if rng.random() < 0.3:
            bits = (bits & 0xffff0000) | rng.choice([0x8000, 0x7fff, 0x8001])
        f = struct.unpack('<f', struct.pack('<I', bits))[0]
        if math.isnan(f) or math.isinf(f):
            continue
        top, low = bits >> 16, bits & 0xffff
        if low > 0x8000 or (low == 0x8000 and top & 1):
            top += 1
        want = struct.unpack('<f', struct.pack('<I', top << 16))[0]
        got = round_frac(Fraction(f), 'bf16')
        if not same_float(got, want):
            raise AssertionError('round_frac(%r, bf16) = %r, want %r' % (f, got, want))
        n += 1
    print('selftest: %d roundings agree' % n)


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    here = os.path.dirname(os.path.abspath(__file__))
    ap.add_argument('--out', default=os.path.join(here, '..', 'vectors'))
    ap.add_argument('--only', nargs='*')
    ap.add_argument('--list', action='store_true')
    ap.add_argument('--selftest', action='store_true',
                    help='check the exact rounding against struct (f32, f16) and bf16 bit logic')
    args = ap.parse_args()
    if args.selftest:
        selftest()
        return 0
    vs = vectors()
    names = [v[0] for v in vs]
    assert len(set(names)) == len(names)
    if args.list:
        for name, spec, desc, _, _ in vs:
            print('%-24s %-4s %s' % (name, spec, desc))
        return 0
    os.makedirs(args.out, exist_ok=True)
    for name, spec, desc, prob, inputs in vs:
        if args.only and name not in args.only:
            continue
        for k in STATS:
            STATS[k] = 0
        doc = build(name, spec, desc, prob, **inputs)
        checked = doc.pop('_checked')
        path = os.path.join(args.out, name + '.json')
        with open(path, 'w') as f:
            f.write(dump(doc))
        print('wrote %-40s %3d rational, %3d Ziv (max %5d bits), %2d sign tests, %2d rows '
              'cross-checked in binary64' % (os.path.relpath(path), STATS['rational'], STATS['ziv'],
                                             STATS['max_prec'], STATS['sign_test'], checked))
    return 0


if __name__ == '__main__':
    sys.exit(main())
