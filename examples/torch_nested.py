#!/usr/bin/python3
# SPDX-License-Identifier: MIT
"""torch_nested.py: PyTorch's ragged attention on CPU (nested tensors through
torch.nn.functional._scaled_dot_product_attention, Debian's python3-torch 1.13) run over
the packed cases of `smattn gen --layout packed`, so that `smattn check` judges a real
implementation's ragged path (conform/README.md, "A real implementation").

    smattn gen --layout packed --force OUT
    /usr/bin/python3 examples/torch_nested.py OUT
    smattn check OUT

Each case directory gets o.npy ([total_q, Hq, Dv] for packed queries, [B, S, Hq, Dv]
otherwise; float32), or a file `skip` saying why torch cannot express it: PyTorch 1.13's
nested path takes no causal flag ("Nested tensors for query / key are not supported when
is_causal=True"), no mask or bias, no window, sinks or softcap, and only the default scale
1/sqrt(D). GQA is given to it as users do, K and V heads repeated (h -> h / (Hq / Hkv)).
Torch has no paged KV cache: a paged case's keys are gathered from its pages (NHD or HND,
through block_table.npy, kv_lens or seqused_k) into one tensor per sequence, as a user of
torch would; keys past seqused_k are dropped. Not part of `make check`: torch is
no dependency of smattn."""
import json
import math
import os
import sys
import warnings

import numpy as np
import torch
import torch.nn.functional as F


# The case.json keys this example reads or checks above (SPEC 7.1).
KNOWN_KEYS = {"scale", "causal", "window", "softcap", "empty_rows", "empty_lse",
              "cu_seqlens_q", "cu_seqlens_k", "seqused_k", "kv_lens", "kv_layout",
              "max_pages"}  # max_pages: the table's columns read (gather_keys reads only
                            # the pages each sequence uses)


def why_not(cj, d):
    """Why torch's nested SDPA cannot run the case in directory d, or None."""
    if not os.path.exists(os.path.join(d, "q.npy")):
        return "the softmax op: no nested-tensor form in torch"
    if "cu_seqlens_k" not in cj and not os.path.exists(os.path.join(d, "block_table.npy")):
        return "not a packed or paged case"
    if "q_lens" in cj:
        return "q_lens: padded queries, not a packed batch"
    for f in ("bias.npy", "mask.npy", "sinks.npy"):
        if os.path.exists(os.path.join(d, f)):
            return "%s: no mask, bias or sinks on torch 1.13's nested path" % f
    if cj.get("causal", "none") != "none":
        return "causal: torch 1.13 refuses is_causal with nested tensors"
    if list(cj.get("window", [-1, -1])) != [-1, -1] or cj.get("softcap", 0):
        return "window or softcap: not in torch's SDPA"
    if cj.get("alibi_mode", "none") != "none":
        return "ALiBi (alibi_mode %s): no such argument in torch's SDPA" % cj["alibi_mode"]
    if cj.get("empty_rows", "zero") != "zero":
        return "empty rows %s: torch gives zeros" % cj["empty_rows"]
    # Any other key (ALiBi, descales, quantised dtypes, ...) changes the problem in a way
    # this example does not pass on to torch: skipped, not run wrongly.
    other = sorted(set(cj) - KNOWN_KEYS)
    if other:
        return "case.json key %s: not expressed by this example" % ", ".join(other)
    return None


def gather_keys(cj, d, k, v):
    """[(K_b [len_b, Hkv, D], V_b [len_b, Hkv, Dv])] of every sequence b: slices of packed
    keys (cu_seqlens_k), or rows gathered from the pages of block_table.npy (SPEC 2.7: pages
    of NHD [num_pages, page_size, Hkv, D] or HND [num_pages, Hkv, page_size, D]); the first
    seqused_k[b] keys of each where the case has seqused_k."""
    used = cj.get("seqused_k")
    if "cu_seqlens_k" in cj:
        ck = cj["cu_seqlens_k"]
        out = [(k[ck[b]:ck[b + 1]], v[ck[b]:ck[b + 1]]) for b in range(len(ck) - 1)]
    else:
        bt = np.load(os.path.join(d, "block_table.npy"))
        if cj.get("kv_layout", "NHD") == "HND":
            k, v = k.transpose(0, 2, 1, 3), v.transpose(0, 2, 1, 3)
        page = k.shape[1]
        lens = used if used is not None else cj["kv_lens"]
        out = []
        for b, n in enumerate(lens):
            pages = bt[b, :-(-n // page)]
            out.append((k[pages].reshape(-1, *k.shape[2:])[:n],
                        v[pages].reshape(-1, *v.shape[2:])[:n]))
    if used is not None:
        out = [(kb[:n], vb[:n]) for (kb, vb), n in zip(out, used)]
    return out


def run(d):
    with open(os.path.join(d, "case.json")) as f:
        cj = json.load(f)
    reason = why_not(cj, d)
    q = np.load(os.path.join(d, "q.npy")) if reason is None else None
    if q is not None and (q.dtype != np.float32 or
                          not math.isclose(cj["scale"], 1 / math.sqrt(q.shape[-1]),
                                           rel_tol=1e-15)):
        reason = "dtype %s or scale %r: torch's nested SDPA here is float32, scale " \
                 "1/sqrt(D)" % (q.dtype, cj["scale"])
    if reason is not None:
        with open(os.path.join(d, "skip"), "w") as f:
            f.write(reason + "\n")
        return False
    k = np.load(os.path.join(d, "k.npy"))
    v = np.load(os.path.join(d, "v.npy"))
    Hq = q.shape[-2]
    G = Hq // (k.shape[-2] if "cu_seqlens_k" in cj or cj.get("kv_layout", "NHD") == "NHD"
               else k.shape[1])
    keys = gather_keys(cj, d, k, v)
    cq = cj.get("cu_seqlens_q")
    # one [H, len, D] tensor per sequence; K and V heads repeated for GQA
    if cq is not None:
        qs = [torch.from_numpy(q[cq[b]:cq[b + 1]]).transpose(0, 1) for b in range(len(cq) - 1)]
    else:
        qs = [torch.from_numpy(q[b]).transpose(0, 1) for b in range(q.shape[0])]
    ks = [torch.from_numpy(kb).repeat_interleave(G, 1).transpose(0, 1) for kb, _ in keys]
    vs = [torch.from_numpy(vb).repeat_interleave(G, 1).transpose(0, 1) for _, vb in keys]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # "nested tensors are a prototype"
        o, _ = F._scaled_dot_product_attention(torch.nested.nested_tensor(qs),
                                               torch.nested.nested_tensor(ks),
                                               torch.nested.nested_tensor(vs))
    rows = [t.transpose(0, 1).numpy() for t in o.unbind()]
    out = np.concatenate(rows, axis=0) if cq is not None else np.stack(rows)
    assert out.shape == q.shape[:-1] + (v.shape[-1],)
    np.save(os.path.join(d, "o.npy"), out.astype(np.float32))
    return True


def main(out):
    ran = skipped = 0
    for name in sorted(os.listdir(out)):
        d = os.path.join(out, name)
        if not os.path.isdir(d):
            continue
        if run(d):
            ran += 1
        else:
            skipped += 1
    print("torch %s: o.npy for %d cases, %d skipped (a skip file says why)"
          % (torch.__version__, ran, skipped))


if __name__ == "__main__":
    if len(sys.argv) != 2:
        sys.exit("usage: torch_nested.py OUT (a directory of `smattn gen --layout packed`)")
    main(sys.argv[1])
