#!/usr/bin/python3
# SPDX-License-Identifier: MIT
"""`smattn check` on a layout case with dense queries and q_lens (paged keys): the kernel's
O and LSE in the padding rows i >= q_lens[b] are replaced by the oracle's and never judged
(io/case_layout.c:181 takes i >= seq_q_len as "no storage", conform/files.c:1078 fills
those rows), although a dense Q has those rows and SPEC 2.7 defines them as the twin's
(zero convention: O = +0, LSE = -inf). Usage: dense_q_lens_layout_check.py SMATTN WORKDIR.
Prints the verdict of the paged case with O = 12345 and LSE = 1 in those rows, and of the
same outputs with K and V dense (no layout), which fails them."""
import ast, json, os, shutil, struct, subprocess, sys


def rd(path, code='f'):
    b = open(path, 'rb').read()
    hl = struct.unpack('<H', b[8:10])[0]
    h = ast.literal_eval(b[10:10 + hl].decode())
    n = 1
    for x in h['shape']:
        n *= x
    return h['shape'], list(struct.unpack('<%d%s' % (n, code), b[10 + hl:10 + hl + 4 * n]))


def wr(path, shape, data):
    h = "{'descr': '<f4', 'fortran_order': False, 'shape': (%s), }" % ''.join('%d, ' % x for x in shape)
    h += ' ' * (64 - (10 + len(h) + 1) % 64) + '\n'
    open(path, 'wb').write(b'\x93NUMPY\x01\x00' + struct.pack('<H', len(h)) + h.encode() +
                           struct.pack('<%df' % len(data), *data))


def main():
    smattn, work = sys.argv[1], sys.argv[2]
    shutil.rmtree(work, ignore_errors=True)
    os.makedirs(work)
    subprocess.run([smattn, 'gen', '--suite', 'quick', '--layout', 'paged', '--no-vectors',
                    work + '/gen'], check=True, stdout=subprocess.DEVNULL)
    d = work + '/paged'
    shutil.copytree(work + '/gen/padding-causal_lr_both_lens', d)
    cj = json.load(open(d + '/case.json'))
    cu = cj.pop('cu_seqlens_q')
    B = len(cu) - 1
    lens = [cu[b + 1] - cu[b] for b in range(B)]
    S = max(lens)
    (_, Hq, D), q = rd(d + '/q.npy')
    dense = [0.0] * (B * S * Hq * D)  # the packed rows into a dense [B, S, Hq, D]
    for b in range(B):
        for i in range(lens[b]):
            for e in range(Hq * D):
                dense[(b * S + i) * Hq * D + e] = q[(cu[b] + i) * Hq * D + e]
    wr(d + '/q.npy', (B, S, Hq, D), dense)
    cj['q_lens'] = lens
    json.dump(cj, open(d + '/case.json', 'w'))
    subprocess.run([smattn, 'ref', d, d, '--dtype', 'f32'], check=True)
    b0 = min(range(B), key=lambda b: lens[b])  # a sequence with padding rows
    (_, _, _, Dv), o = rd(d + '/o.npy')
    (_, _, _), lse = rd(d + '/lse.npy')
    for i in range(lens[b0], S):
        for e in range(Hq * Dv):
            o[(b0 * S + i) * Hq * Dv + e] = 12345.0
        for h in range(Hq):
            lse[(b0 * Hq + h) * S + i] = 1.0
    wr(d + '/o.npy', (B, S, Hq, Dv), o)
    wr(d + '/lse.npy', (B, Hq, S), lse)
    os.remove(d + '/.smattn-set')
    # the same case with K and V gathered dense: no layout
    dd = work + '/dense'
    shutil.copytree(d, dd)
    (_, M), bt = rd(dd + '/block_table.npy', 'i')
    T = max(cj['kv_lens'])
    for name in ('k', 'v'):
        (_, PS, H, E), x = rd(dd + '/%s.npy' % name)
        out = [0.0] * (B * T * H * E)
        for b in range(B):
            for t in range(cj['kv_lens'][b]):
                pg = bt[b * M + t // PS]
                for e in range(H * E):
                    out[(b * T + t) * H * E + e] = x[((pg * PS + t % PS) * H) * E + e]
        wr(dd + '/%s.npy' % name, (B, T, H, E), out)
    os.remove(dd + '/block_table.npy')
    for name, path in (('paged, dense Q + q_lens', d), ('K and V dense', dd)):
        r = subprocess.run([smattn, 'check', path, '--precision', 'f32'], capture_output=True,
                           text=True)
        lines = [ln for ln in r.stdout.splitlines() if 'FAIL' in ln or 'verdict' in ln]
        print('%s (O[b=%d, i>=%d] = 12345, LSE = 1): exit %d' % (name, b0, lens[b0], r.returncode))
        for ln in lines:
            print('  ' + ln[:300])


main()
