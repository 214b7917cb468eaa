# SPDX-License-Identifier: MIT
"""kernels.py: plain NumPy attention kernels for the package's tests: one that follows
SPEC 2-4 (BSHD, binary64 arithmetic, outputs rounded to float32) and copies of it with one
known bug each, as a kernel author's test would meet them."""
import numpy as np

BUGS = ("causal_upper_left", "causal_off_by_one", "empty_nan", "no_scale", "gqa_interleaved",
        "v_unmasked")


def numpy_attention(q, k, v, *, scale=None, causal=None, window=None, kv_lens=None,
                    q_lens=None, bias=None, mask=None, sinks=None, softcap=0,
                    empty_rows="zero", empty_lse="neg_inf", alibi_slopes=None,
                    alibi_mode=None, bug=None):
    """O [B,S,Hq,Dv] and LSE [B,Hq,S] as float32; `bug` (one of BUGS) plants one bug.
    Empty rows (no visible key, no sink) follow empty_rows ("zero", "nan", "mean": the mean
    of v over keys j < kv_lens[b]) and empty_lse ("neg_inf", "pos_inf", "zero"), SPEC 3.4."""
    assert empty_rows in ("zero", "nan", "mean") and empty_lse in ("neg_inf", "pos_inf", "zero")
    q, k, v = (np.asarray(x, dtype=np.float64) for x in (q, k, v))
    B, S, Hq, D = q.shape
    T, Hkv, Dv = k.shape[1], k.shape[2], v.shape[3]
    G = Hq // Hkv
    # query head h reads KV head h // G (SPEC 2.2); interleaving is the planted bug
    heads = np.arange(Hq) % Hkv if bug == "gqa_interleaved" else np.arange(Hq) // G
    kk, vv = k[:, :, heads, :], v[:, :, heads, :]
    if scale is None:
        scale = 1 / np.sqrt(D)
    if bug == "no_scale":
        scale = 1.0
    with np.errstate(all="ignore"):  # invisible slots may hold NaN or infinity
        s = np.einsum("bshd,bthd->bhst", q, kk) * scale
        if softcap:
            s = softcap * np.tanh(s / softcap)
        i = np.arange(S)[:, None]
        j = np.arange(T)[None, :]
        vis = np.zeros((B, 1, S, T), dtype=bool)
        for b in range(B):
            Tb = T if kv_lens is None else int(kv_lens[b])
            Sb = S if q_lens is None else int(q_lens[b])
            d = i + Tb - Sb  # the lower-right diagonal (SPEC 3.1)
            if causal == "upper_left" or bug == "causal_upper_left":
                d = i + 0 * Tb
            if bug == "causal_off_by_one":
                d = d + 1
            m = (j < Tb) & (i < Sb)
            if causal:
                m &= j <= d
            if window is not None:
                wl, wr = window
                if wl >= 0:
                    m &= j >= d - wl
                if wr >= 0:
                    m &= j <= d + wr
            vis[b, 0] = m
        vis = np.broadcast_to(vis, (B, Hq, S, T))
        if mask is not None:
            vis = vis & np.asarray(mask, dtype=bool)
        slope = None
        if alibi_slopes is not None:  # SPEC 2.8: [Hq] or [B, Hq], as [B, Hq, 1, 1]
            slope = np.broadcast_to(np.asarray(alibi_slopes, dtype=np.float64),
                                    (B, Hq))[:, :, None, None]
        if bias is not None:
            bias = np.asarray(bias, dtype=np.float64)
            vis = vis & (bias != -np.inf)
            s = s + (bias * slope if alibi_mode == "mask" else bias)
        if slope is not None and alibi_mode in (None, "symmetric", "one_sided"):
            for b in range(B):
                Tb = T if kv_lens is None else int(kv_lens[b])
                Sb = S if q_lens is None else int(q_lens[b])
                dist = (-np.abs(i + Tb - Sb - j) if alibi_mode != "one_sided"
                        else j - Tb + 1 + 0 * i)
                s[b] = s[b] + slope[b] * dist
        s = np.where(vis, s, -np.inf)
        # SPEC 4.2: a non-finite q (row with visible keys), a non-finite k at a visible key,
        # or a NaN or +inf bias at a visible key poisons the row: NaN, never "masked"
        kbad = (~np.isfinite(kk)).any(axis=-1).transpose(0, 2, 1)[:, :, None, :]  # [B,Hq,1,T]
        qbad = (~np.isfinite(q)).any(axis=-1).transpose(0, 2, 1)  # [B,Hq,S]
        poison = (vis & kbad).any(axis=-1) | (qbad & vis.any(axis=-1))
        if bias is not None:
            poison |= (vis & (np.isnan(bias) | (bias == np.inf))).any(axis=-1)
        s = np.where(vis & poison[..., None], np.nan, s)
        mx = s.max(axis=-1)
        snk = None
        if sinks is not None:
            snk = np.asarray(sinks, dtype=np.float64)[None, :, None]
            mx = np.maximum(mx, snk)
        mxs = np.where(mx == -np.inf, 0.0, mx)  # an empty row; NaN and +inf propagate
        e = np.where(vis, np.exp(s - mxs[..., None]), 0.0)
        den = e.sum(axis=-1)
        if snk is not None:
            den = den + np.exp(snk - mxs)
        if bug == "empty_nan":
            p = e / den[..., None]
        else:
            p = np.where(den[..., None] != 0, e / np.where(den != 0, den, 1)[..., None], 0.0)
        vmean = np.zeros((B, Hq, Dv))
        for b in range(B):  # the mean convention reads v_j for every j < T_b
            Tb = T if kv_lens is None else int(kv_lens[b])
            if Tb > 0:
                vmean[b] = vv[b, :Tb].mean(axis=0)
        if bug == "v_unmasked":  # a key no row sees may hold NaN: 0 * NaN is NaN
            o = np.einsum("bhst,bthd->bshd", p, vv)
        else:
            # SPEC 4.2: V's non-finite values act per column over the row's visible keys
            # only (NaN, or both infinities: NaN; one infinity: that infinity), whatever
            # the weights (also where one underflowed to 0); invisible keys are not read.
            # Rows poisoned by a NaN or +inf score or sink are NaN through p already.
            o = np.einsum("bhst,bthd->bshd", p, np.where(np.isfinite(vv), vv, 0.0))
            fv = vis.astype(np.float64)
            hit = lambda c: np.einsum("bhst,bthd->bshd", fv, c.astype(np.float64)) > 0
            nan_c, pinf, ninf = hit(np.isnan(vv)), hit(vv == np.inf), hit(vv == -np.inf)
            ok = ~(np.isnan(mx) | (mx == np.inf)).transpose(0, 2, 1)[..., None]
            o = np.where(ok & (nan_c | (pinf & ninf)), np.nan, o)
            o = np.where(ok & ~nan_c & pinf & ~ninf, np.inf, o)
            o = np.where(ok & ~nan_c & ninf & ~pinf, -np.inf, o)
        lse = np.log(den) + mxs
        empty = den == 0  # [B,Hq,S]: no visible key and no sink (SPEC 3.4)
        if bug != "empty_nan":
            e_o = empty.transpose(0, 2, 1)[..., None]  # [B,S,Hq,1]
            if empty_rows == "nan":
                o = np.where(e_o, np.nan, o)
            elif empty_rows == "mean":
                o = np.where(e_o, vmean[:, None, :, :], o)
            if empty_lse != "neg_inf":
                lse = np.where(empty, np.inf if empty_lse == "pos_inf" else 0.0, lse)
        return o.astype(np.float32), lse.astype(np.float32)  # may overflow: +-inf


def numpy_softmax(x, *, scale=1.0, causal=None, window=None, kv_lens=None, q_lens=None,
                  bias=None, mask=None, sinks=None, softcap=0, empty_rows="zero",
                  empty_lse="neg_inf", visible=None):
    """The softmax op (SPEC 2, 4.1-4.2) in binary64: P [B,Hq,S,T] and LSE [B,Hq,S] as
    float32, for scores x [B,Hq,S,T]. visible: the bool [B,Hq,S,T] of Case.visible(), used
    instead of rebuilding causal, window, lengths and mask here."""
    x = np.asarray(x, dtype=np.float64)
    B, Hq, S, T = x.shape
    assert visible is not None, "give visible= (Case.visible())"
    vis = np.array(visible, dtype=bool)
    with np.errstate(all="ignore"):
        vis &= x != -np.inf  # x = -inf hides the key whatever the scale (SPEC 3.5)
        s = x * scale
        if softcap:
            s = softcap * np.tanh(s / softcap)
        if bias is not None:
            bias = np.asarray(bias, dtype=np.float64)
            vis &= bias != -np.inf
            s = s + bias
        # x NaN or +inf, a NaN or +inf bias at a visible key: the row is NaN (SPEC 4.2)
        poison = (vis & (np.isnan(x) | (x == np.inf))).any(axis=-1)
        if bias is not None:
            poison |= (vis & (np.isnan(bias) | (bias == np.inf))).any(axis=-1)
        s = np.where(vis, s, -np.inf)
        # a finite x * scale beyond binary64 is still a finite real (SPEC 4.4): such rows
        # are out of contract for a binary64 kernel, and the judge does not judge them
        mx = s.max(axis=-1)
        snk = None
        if sinks is not None:
            snk = np.asarray(sinks, dtype=np.float64)[None, :, None]
            poison |= np.isnan(snk) | (snk == np.inf)
            mx = np.maximum(mx, np.where(snk == -np.inf, -np.inf, snk))
        mxs = np.where(np.isfinite(mx), mx, 0.0)
        e = np.where(vis, np.exp(s - mxs[..., None]), 0.0)
        den = e.sum(axis=-1)
        if snk is not None:
            den = den + np.where(snk == -np.inf, 0.0, np.exp(snk - mxs))
        p = np.where(den[..., None] != 0, e / np.where(den != 0, den, 1)[..., None], 0.0)
        lse = np.log(den) + mxs
        # a finite x * scale beyond binary64 (+inf here): the weight goes to those keys,
        # shared equally, as the exact softmax's limit; the LSE overflows
        over = (mx == np.inf) & ~poison
        top = vis & (s == np.inf)
        p = np.where(over[..., None], top / np.maximum(top.sum(axis=-1), 1)[..., None], p)
        lse = np.where(over, np.inf, lse)
        p = np.where(poison[..., None] & vis, np.nan, p)
        lse = np.where(poison, np.nan, lse)
        empty = (den == 0) & ~poison  # no visible key and no sink (SPEC 3.4)
        Tb = np.full(B, T) if kv_lens is None else np.asarray(kv_lens)
        j = np.arange(T)[None, :]
        for b in range(B):
            eb = empty[b][..., None]
            if empty_rows == "nan":
                p[b] = np.where(eb, np.nan, p[b])
            elif empty_rows == "mean":
                p[b] = np.where(eb, np.where(j < Tb[b], 1.0 / max(int(Tb[b]), 1), 0.0), p[b])
        if empty_lse != "neg_inf":
            lse = np.where(empty, np.inf if empty_lse == "pos_inf" else 0.0, lse)
        return p.astype(np.float32), lse.astype(np.float32)
