#!/usr/bin/env python3
"""lm4_emu.py [PLANT] -- groundwork for k8v4's values on the tensor cores (not in any kernel
yet; bench/gpu/PENDING.md section 2, session 13): the A operand of the values' mma.m16n8k16
built from 4-bit Lloyd-Max codes by byte permutes, emulated on the host.

The 4-bit codebook (src/backend/kvq_lm.h, N(0,1), ascending) is symmetric, cb[15 - c] = -cb[c],
so a code c is a magnitude index m = (c & 7) ^ (c < 8 ? 7 : 0) into cb[8 .. 15] and a sign
(negative when c < 8). The 8 magnitudes as f16 are 16 bytes: their low bytes in two 32-bit
registers (TL0, TL1), their high bytes in two more (TH0, TH1). For a 32-bit word w of 8
codes (nibble k = code k), the selector nibbles are s = (w & 0x77777777) ^ (n * 7), n = the
nibbles' "c < 8" bits ((~w >> 3) & 0x11111111); then for codes 0..3 (s & 0xffff):
  a = prmt(TL0, TL1, s), b = prmt(TH0, TH1, s)            (4 low bytes, 4 high bytes)
  r01 = prmt(a, b, 0x5140), r23 = prmt(a, b, 0x7362)     (f16 pairs: codes 0, 1 and 2, 3)
and the sign bits (bit 15 / 31 of a pair) from n. An f16 of a centroid is off by up to 2^-12
of it, beyond the decode test's 1e-4 of the output scale, so a second table holds the f16 of
what the first leaves (hi + lo = the centroid to ~2^-22): two A operands, two mmas a tile.
Checks every word of 8 codes drawn at random (and every code in every nibble) against
np.float16(cb) and np.float16(cb - f16(cb)): exit 0 when all agree bit for bit and hi + lo is
within 2^-20 of each centroid. PLANT 1 (the sign rule inverted) and PLANT 2 (the
interleave selector of the second pair wrong) must fail (exit 1)."""
import os
import re
import sys

import numpy as np

PLANT = int(sys.argv[1]) if len(sys.argv) > 1 else 0
ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "..")
txt = open(os.path.join(ROOT, "src", "backend", "kvq_lm.h")).read()
body = re.search(r"kvq_lm4\[16\] = \{(.*?)\};", txt, re.S).group(1)
cb = np.array([float(x.rstrip("f")) for x in re.findall(r"-?[0-9.]+e[-+][0-9]+f", body)], dtype=np.float32)
assert len(cb) == 16 and all(cb[15 - c] == -cb[c] for c in range(16)), "codebook not symmetric"


def prmt(x, y, s):  # __byte_perm, default mode, selector nibbles < 8
    src = [(x >> (8 * i)) & 255 for i in range(4)] + [(y >> (8 * i)) & 255 for i in range(4)]
    return sum(src[(s >> (4 * i)) & 7] << (8 * i) for i in range(4))


def f16bits(v):
    return int(np.array([v], dtype=np.float16).view(np.uint16)[0])


def tables(vals):  # 8 f16 magnitudes -> TL0, TL1, TH0, TH1
    b = [f16bits(v) for v in vals]
    lo = [x & 255 for x in b]
    hi = [x >> 8 for x in b]
    w = lambda q: q[0] | q[1] << 8 | q[2] << 16 | q[3] << 24
    return w(lo[:4]), w(lo[4:]), w(hi[:4]), w(hi[4:])


mag = cb[8:16].astype(np.float64)
hi_v = [float(np.float16(m)) for m in mag]
lo_v = [float(np.float16(m - h)) for m, h in zip(mag, hi_v)]
T = {"hi": tables(hi_v), "lo": tables(lo_v)}


def pairs(w, t):
    """The four f16 pairs (codes 0,1 / 2,3 / 4,5 / 6,7 of w) from table t, as u32."""
    TL0, TL1, TH0, TH1 = T[t]
    n = (~w >> 3) & 0x11111111
    if PLANT == 1:
        n = (w >> 3) & 0x11111111
    s = (w & 0x77777777) ^ (n * 7)
    out = []
    for half in range(2):
        sh = (s >> (16 * half)) & 0xFFFF
        a, b = prmt(TL0, TL1, sh), prmt(TH0, TH1, sh)
        sel2 = 0x7362 if PLANT != 2 else 0x7340
        for k, sel in enumerate((0x5140, sel2)):
            r = prmt(a, b, sel)
            code0 = 4 * half + 2 * k
            neg0 = (n >> (4 * code0)) & 1
            neg1 = (n >> (4 * (code0 + 1))) & 1
            r ^= (neg0 << 15) | (neg1 << 31)
            out.append(r)
    return out


def want(c, t):
    h = np.float16(cb[c])
    return f16bits(h) if t == "hi" else f16bits(np.float16(np.float64(cb[c]) - float(h)))


rng = np.random.default_rng(3)
words = [int(x) for x in rng.integers(0, 2**32, size=4000, dtype=np.uint64)]
words += [sum(c << (4 * k) for k in range(8)) for c in range(16)]  # every code in every nibble
bad = 0
for w in words:
    codes = [(w >> (4 * k)) & 15 for k in range(8)]
    for t in ("hi", "lo"):
        got = pairs(w, t)
        for k in range(8):
            g = (got[k // 2] >> (16 * (k % 2))) & 0xFFFF
            if g != want(codes[k], t):
                bad += 1
worst = max(abs(float(np.float16(cb[c])) + float(np.float16(np.float64(cb[c]) - float(np.float16(cb[c]))))
                - float(cb[c])) / abs(float(cb[c])) for c in range(16))
ok = bad == 0 and worst < 2.0**-20
print("lm4_emu: %d words, %d mismatching halves, hi + lo within %.1e of each centroid: %s"
      % (len(words), bad, worst, "ok" if ok else "FAIL"))
sys.exit(0 if ok else 1)
