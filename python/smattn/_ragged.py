# SPDX-License-Identifier: MIT
"""_ragged.py: ragged (packed, cu_seqlens) and paged (block table) layouts (SPEC 2.7) for
reference(), attention(), check() and assert_close(): the arguments checked with messages
naming the argument and entry, FlashInfer's CSR page table turned into a block table, the
C descriptor (smattn_layout), and the dense, padded twin that check() judges."""
import ctypes

import numpy as np

from . import _lib

# The keyword arguments that describe a layout.
ARGS = ("cu_seqlens_q", "cu_seqlens_k", "seqused_k", "block_table", "kv_layout", "kv_indptr",
        "kv_indices", "kv_last_page_len", "page_size")

_INT32_MAX = 2 ** 31 - 1


def given(kw):
    """Whether kw asks for a layout (kv_layout="NHD" alone, the default, does not)."""
    return any(kw.get(a) is not None for a in ARGS if a != "kv_layout") or \
        kw.get("kv_layout") not in (None, "NHD", "nhd")


def _ints(x, name, ndim=1):
    """An integer array (int64, C order) from a list or array; a float is refused."""
    if x is None:
        return None
    a = np.asarray(x)
    if a.size == 0 and a.dtype.kind == "f":  # [] from a list
        a = a.astype(np.int64)
    if a.dtype.kind not in "iu":
        raise TypeError("%s: dtype '%s' is not an integer type" % (name, a.dtype))
    if a.dtype.kind == "u" and a.size and int(a.max()) > 2 ** 63 - 1:
        raise OverflowError("%s: %d does not fit in int64" % (name, int(a.max())))
    if a.ndim != ndim:
        raise ValueError("%s: shape %s, want %d-D" % (name, tuple(a.shape), ndim))
    return np.ascontiguousarray(a, dtype=np.int64)


def _cu(cu, name, B, total, what):
    """cu_seqlens-like: B + 1 entries, 0 first, never decreasing, ending at total."""
    if cu.shape[0] != B + 1:
        raise ValueError("%s: %d entries, want B + 1 = %d" % (name, cu.shape[0], B + 1))
    if cu[0] != 0:
        raise ValueError("%s[0] = %d, want 0" % (name, cu[0]))
    d = np.diff(cu)
    if (d < 0).any():
        b = int(np.argmax(d < 0))
        raise ValueError("%s[%d] = %d is less than %s[%d] = %d (sequence %d would have a "
                         "negative length)" % (name, b + 1, cu[b + 1], name, b, cu[b], b))
    if cu[-1] != total:
        raise ValueError("%s[%d] = %d, want %s = %d (the last entry is the number of packed "
                         "rows)" % (name, B, cu[-1], what, total))
    return d


class Ragged:
    """A layout, checked: where sequence b's queries and keys are, and the C descriptor."""

    def __init__(self, q, k, v, kw):
        cu_q = _ints(kw.get("cu_seqlens_q"), "cu_seqlens_q")
        cu_k = _ints(kw.get("cu_seqlens_k"), "cu_seqlens_k")
        used = _ints(kw.get("seqused_k"), "seqused_k")
        indptr = _ints(kw.get("kv_indptr"), "kv_indptr")
        indices = _ints(kw.get("kv_indices"), "kv_indices")
        last = _ints(kw.get("kv_last_page_len"), "kv_last_page_len")
        table = kw.get("block_table")
        kv_layout = kw.get("kv_layout") or "NHD"
        if not isinstance(kv_layout, str) or kv_layout.upper() not in ("NHD", "HND"):
            raise ValueError("kv_layout %r: want 'NHD' ([num_pages, page_size, Hkv, D]) or "
                             "'HND' ([num_pages, Hkv, page_size, D])" % (kv_layout,))
        self.hnd = kv_layout.upper() == "HND"
        csr = indptr is not None or indices is not None or last is not None
        if csr and (indptr is None or indices is None or last is None):
            missing = [n for n, x in (("kv_indptr", indptr), ("kv_indices", indices),
                                      ("kv_last_page_len", last)) if x is None]
            raise TypeError("%s missing: kv_indptr, kv_indices and kv_last_page_len come "
                            "together" % missing[0])
        for a, b, an, bn in ((cu_k, table, "cu_seqlens_k", "block_table"),
                             (cu_k, indptr, "cu_seqlens_k", "kv_indptr"),
                             (table, indptr, "block_table", "kv_indptr"),
                             (cu_q, kw.get("q_lens"), "cu_seqlens_q", "q_lens"),
                             (cu_k, kw.get("kv_lens"), "cu_seqlens_k", "kv_lens"),
                             (indptr, kw.get("kv_lens"), "kv_indptr", "kv_lens")):
            if a is not None and b is not None:
                raise TypeError("give %s or %s, not both" % (an, bn))
        if used is not None and cu_k is None:
            raise TypeError("seqused_k needs cu_seqlens_k")
        self.paged = table is not None or csr
        if self.hnd and not self.paged:
            raise ValueError("kv_layout 'HND' applies to page caches (block_table or kv_indptr)")
        if kw.get("page_size") is not None and not self.paged:
            raise TypeError("page_size applies to page caches (block_table or kv_indptr)")
        if (kw.get("layout") or "bshd").lower() != "bshd":
            raise ValueError("layout %r: ragged and paged layouts are given as bshd (packed q "
                             "[total_q, Hq, D], as flash_attn_varlen_func)" % (kw.get("layout"),))
        self.cu_q, self.cu_k, self.used = cu_q, cu_k, used
        # B, and the queries
        if cu_q is not None:
            if q.ndim != 3:
                raise ValueError("q: shape %s; with cu_seqlens_q want [total_q, Hq, D]"
                                 % (tuple(q.shape),))
            if cu_q.shape[0] < 2:
                raise ValueError("cu_seqlens_q: %d entries, want B + 1 >= 2" % cu_q.shape[0])
            B = cu_q.shape[0] - 1
            self.q_len = _cu(cu_q, "cu_seqlens_q", B, q.shape[0], "q's total_q")
            self.total_q = q.shape[0]
            S = max(1, int(self.q_len.max()))
        else:
            if q.ndim not in (3, 4):
                raise ValueError("q: shape %s has rank %d; want [B, S, Hq, D] or [S, Hq, D]"
                                 % (tuple(q.shape), q.ndim))
            B = q.shape[0] if q.ndim == 4 else 1
            S = q.shape[-3]
            self.q_len = None
            self.total_q = None
        Hq, D = q.shape[-2], q.shape[-1]
        self.B, self.S, self.Hq, self.D = B, S, Hq, D
        # the keys
        self.kv_lens = None
        if cu_k is not None:
            if k.ndim != 3 or v.ndim != 3:
                raise ValueError("%s: shape %s; with cu_seqlens_k want [total_k, Hkv, D]"
                                 % (("k", tuple(k.shape)) if k.ndim != 3 else ("v", tuple(v.shape))))
            have = _cu(cu_k, "cu_seqlens_k", B, k.shape[0], "k's total_k")
            if v.shape[0] != k.shape[0]:
                raise ValueError("v: shape %s does not match k's total_k %d"
                                 % (tuple(v.shape), k.shape[0]))
            if used is not None:
                if used.shape[0] != B:
                    raise ValueError("seqused_k: %d entries, want B = %d" % (used.shape[0], B))
                for b in range(B):
                    if not 0 <= used[b] <= have[b]:
                        raise ValueError("seqused_k[%d] = %d is outside [0, %d] (sequence %d's "
                                         "slice of cu_seqlens_k)" % (b, used[b], have[b], b))
            self.k_len = used if used is not None else have
            self.Hkv, self.Dv = k.shape[1], v.shape[2]
        elif self.paged:
            if k.ndim != 4 or v.ndim != 4:
                x, n = (k, "k") if k.ndim != 4 else (v, "v")
                raise ValueError("%s: shape %s; a page cache is %s" % (
                    n, tuple(x.shape), "[num_pages, Hkv, page_size, D] (kv_layout 'HND')"
                    if self.hnd else "[num_pages, page_size, Hkv, D] (kv_layout 'NHD')"))
            ds, dh = (2, 1) if self.hnd else (1, 2)
            self.num_pages, self.page_size = k.shape[0], k.shape[ds]
            self.Hkv, self.Dv = k.shape[dh], v.shape[3]
            for dim, what in ((0, "num_pages"), (ds, "page_size"), (dh, "Hkv")):
                if v.shape[dim] != k.shape[dim]:
                    raise ValueError("v: shape %s does not match k's %s %d"
                                     % (tuple(v.shape), what, k.shape[dim]))
            ps = kw.get("page_size")
            if ps is not None and ps != self.page_size:
                raise ValueError("page_size %r does not match k's page size %d (k.shape[%d])"
                                 % (ps, self.page_size, ds))
            if csr:
                table, self.kv_lens = self._from_csr(indptr, indices, last)
            else:
                table = self._table(table, kw.get("kv_lens"))
            self.table = table
            self.k_len = self.kv_lens
        else:
            if k.ndim not in (3, 4) or v.ndim != k.ndim:
                raise ValueError("k: shape %s, v: shape %s; want [B, T, Hkv, D] or [T, Hkv, D] "
                                 "(both)" % (tuple(k.shape), tuple(v.shape)))
            kb = k.shape[0] if k.ndim == 4 else 1
            if kb != B:
                raise ValueError("k: batch size %d, but B = %d" % (kb, B))
            self.Hkv, self.Dv = k.shape[-2], v.shape[-1]
            self.k_len = None
            self.T_dense = k.shape[-3]
        if k.shape[-1] != D:
            raise ValueError("k: shape %s does not match q's head dim %d" % (tuple(k.shape), D))
        if self.k_len is not None:
            self.T = max(1, int(np.max(self.k_len))) if B else 1
        else:
            self.T = self.T_dense
        if self.q_len is None:
            self.q_len_given = kw.get("q_lens")

    def _table(self, table, kv_lens):
        t = np.asarray(table)
        if t.dtype.kind not in "iu":
            raise TypeError("block_table: dtype '%s' is not an integer type (want int32 or "
                            "int64)" % t.dtype)
        if t.ndim != 2 or t.shape[0] != self.B or t.shape[1] < 1:
            raise ValueError("block_table: shape %s, want [B, max_pages] = [%d, >= 1]"
                             % (tuple(t.shape), self.B))
        big = (t.astype(np.int64) != t.astype(np.int32).astype(np.int64)) \
            if t.dtype.itemsize > 4 or t.dtype.kind == "u" else np.zeros(t.shape, bool)
        if big.any():
            b, p = (int(x) for x in np.argwhere(big)[0])
            raise OverflowError("block_table[%d][%d] = %d does not fit in int32" % (b, p, t[b, p]))
        if kv_lens is None:
            raise TypeError("kv_lens is required with block_table (each sequence's key count)")
        kl = _ints(kv_lens, "kv_lens")
        if kl.shape[0] != self.B:
            raise ValueError("kv_lens: %d entries, want B = %d" % (kl.shape[0], self.B))
        cap = t.shape[1] * self.page_size
        for b in range(self.B):
            if not 0 <= kl[b] <= cap:
                raise ValueError("kv_lens[%d] = %d is outside [0, max_pages * page_size] = "
                                 "[0, %d]" % (b, kl[b], cap))
            used = -(-int(kl[b]) // self.page_size)
            for p in range(used):
                if not 0 <= t[b, p] < self.num_pages:
                    raise ValueError("block_table[%d][%d] = %d is outside [0, num_pages) = "
                                     "[0, %d) (sequence %d uses %d pages)"
                                     % (b, p, t[b, p], self.num_pages, b, used))
        self.kv_lens = kl
        # a slice of a wider int32 table (a cache's block_tables[:, :max_pages]) is used in
        # place: its row stride is the descriptor's bt_stride (SPEC 2.7)
        if t.dtype == np.int32 and t.strides[1] == 4 and t.strides[0] % 4 == 0 and \
                t.strides[0] >= 4 * t.shape[1]:
            return t
        return np.ascontiguousarray(t, dtype=np.int32)

    def _from_csr(self, indptr, indices, last):
        """FlashInfer's form: kv_len_b = (pages_b - 1) * page_size + last_b (no page: 0)."""
        pages = _cu(indptr, "kv_indptr", self.B, indices.shape[0], "len(kv_indices)")
        if last.shape[0] != self.B:
            raise ValueError("kv_last_page_len: %d entries, want B = %d" % (last.shape[0], self.B))
        for e, x in enumerate(indices):
            if not 0 <= x < self.num_pages:
                raise ValueError("kv_indices[%d] = %d is outside [0, num_pages) = [0, %d)"
                                 % (e, x, self.num_pages))
        cols = max(1, int(pages.max()) if self.B else 1)
        table = np.full((self.B, cols), -1, dtype=np.int32)
        lens = np.zeros(self.B, dtype=np.int64)
        for b in range(self.B):
            n = int(pages[b])
            if (last[b] != 0) if n == 0 else not 1 <= last[b] <= self.page_size:
                raise ValueError("kv_last_page_len[%d] = %d, want %s (sequence %d has %d pages)"
                                 % (b, last[b], "0" if n == 0 else "1..page_size", b, n))
            table[b, :n] = indices[indptr[b]:indptr[b + 1]]
            lens[b] = (n - 1) * self.page_size + int(last[b]) if n else 0
        return table, lens

    # ---- the C descriptor ----------------------------------------------------------------

    def descriptor(self, keep):
        """A Layout for prob.layout (its arrays appended to keep, which must outlive it)."""
        lay = _lib.Layout()
        p64 = ctypes.POINTER(ctypes.c_int64)
        for name, a in (("cu_seqlens_q", self.cu_q), ("cu_seqlens_k", self.cu_k),
                        ("seqused_k", self.used)):
            if a is not None:
                keep.append(a)
                setattr(lay, name, a.ctypes.data_as(p64))
        if self.paged:
            keep.append(self.table)
            lay.block_table = self.table.ctypes.data_as(ctypes.POINTER(ctypes.c_int32))
            lay.max_pages = self.table.shape[1]
            lay.bt_stride = self.table.strides[0] // 4 if self.B > 1 else self.table.shape[1]
            lay.num_pages, lay.page_size = self.num_pages, self.page_size
        keep.append(lay)
        return lay

    # ---- the dense, padded twin (check) -------------------------------------------------

    def twin(self, q, k, v):
        """q, k, v gathered into [B, S, Hq, D], [B, T, Hkv, D], [B, T, Hkv, Dv] (zero
        padding) with the lengths (q_lens, kv_lens) that make them this problem."""
        B, S, T = self.B, self.S, self.T
        if self.cu_q is not None:
            Q = np.zeros((B, S) + q.shape[1:], dtype=q.dtype)
            for b in range(B):
                Q[b, :self.q_len[b]] = q[self.cu_q[b]:self.cu_q[b + 1]]
            q_lens = self.q_len.astype(np.int64)
        else:
            Q, q_lens = (q if q.ndim == 4 else q[None]), self.q_len_given
        if self.k_len is None:
            return Q, (k if k.ndim == 4 else k[None]), (v if v.ndim == 4 else v[None]), q_lens, None
        K = np.zeros((B, T, self.Hkv, self.D), dtype=k.dtype)
        V = np.zeros((B, T, self.Hkv, self.Dv), dtype=v.dtype)
        for b in range(B):
            n = int(self.k_len[b])
            if self.cu_k is not None:
                K[b, :n] = k[self.cu_k[b]:self.cu_k[b] + n]
                V[b, :n] = v[self.cu_k[b]:self.cu_k[b] + n]
            else:
                j = np.arange(n)
                pages, slots = self.table[b, j // self.page_size], j % self.page_size
                if self.hnd:
                    K[b, :n], V[b, :n] = k[pages, :, slots], v[pages, :, slots]
                else:
                    K[b, :n], V[b, :n] = k[pages, slots], v[pages, slots]
        return Q, K, V, q_lens, self.k_len.astype(np.int64)

    def dense_out(self, o, lse):
        """Packed o [total_q, Hq, Dv] and lse [Hq, total_q] into the twin's [B, S, Hq, Dv]
        and [B, Hq, S]: rows a sequence does not have hold 0 (the judge leaves them out)."""
        if self.cu_q is None:
            return o, lse
        S = self.S
        O = None if o is None else np.zeros((self.B, S) + o.shape[1:], dtype=o.dtype)
        L = None if lse is None else np.zeros((self.B, lse.shape[0], S), dtype=lse.dtype)
        for b in range(self.B):
            a, z = self.cu_q[b], self.cu_q[b + 1]
            if O is not None:
                O[b, :z - a] = o[a:z]
            if L is not None:
                L[b, :, :z - a] = lse[:, a:z]
        return O, L

    def packed_index(self, idx, output):
        """A twin index (b, i, h, c) of O or (b, h, i) of LSE as the caller's packed one."""
        if self.cu_q is None:
            return idx
        if output == "O":
            b, i, h, c = idx
            return (int(self.cu_q[b]) + i, h, c)
        if output == "LSE":
            b, h, i = idx
            return (h, int(self.cu_q[b]) + i)
        return idx
