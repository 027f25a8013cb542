#!/usr/bin/env python3
"""Write a layer-trimmed copy of a GGUF model: the first N transformer blocks, the
embeddings, the final norm and the output head, with `<arch>.block_count` set to N.

Why: speculation's two-model kind needs a smaller model with the same tokenizer. Where no
such model can be brought (the GPU machine gets SmolLM2-135M, the smallest of its family),
the target's own first blocks make one: an early-exit draft ("layer skipping"). It shares
the tokenizer byte for byte; its acceptance is whatever it is (measured, not assumed).

Pure Python (no numpy, no gguf package): the GPU machine has neither network nor the
gguf package. Format facts: GGUF v2/v3 header (magic, version, tensor count, KV count),
typed KV pairs, tensor infos (name, dims, type, offset into the aligned data section).

Measured (CPU, 2026-12-06, SmolLM2-135M-Instruct Q4_1 target, bench/spec/run.py
--kinds two_model --reps 1): drafts of its first 6 / 8 / 12 blocks were accepted 0-14% on
the code edit and 0% on prose (speed-ups 0.70-0.96): without training an early exit does
not predict the full model, so the GPU record keeps two_model "not measured".
Trimming to every block writes a byte-identical copy (checked).

Usage: trim_gguf.py IN.gguf OUT.gguf N
"""
import struct
import sys

# value type -> struct format of a scalar (8: string, 9: array are handled apart)
SCALAR = {0: "<B", 1: "<b", 2: "<H", 3: "<h", 4: "<I", 5: "<i", 6: "<f", 7: "<B",
          10: "<Q", 11: "<q", 12: "<d"}


class Reader:
    def __init__(self, buf):
        self.b, self.p = buf, 0

    def take(self, fmt):
        v = struct.unpack_from(fmt, self.b, self.p)
        self.p += struct.calcsize(fmt)
        return v[0]

    def string(self):
        n = self.take("<Q")
        s = self.b[self.p:self.p + n]
        if len(s) != n:
            raise ValueError("truncated string")
        self.p += n
        return s

    def value(self, t):
        """The raw bytes of one value of type t (so it can be written back unchanged)."""
        start = self.p
        if t in SCALAR:
            self.take(SCALAR[t])
        elif t == 8:
            self.string()
        elif t == 9:
            et, n = self.take("<I"), self.take("<Q")
            for _ in range(n):
                self.value(et)
        else:
            raise ValueError(f"unknown GGUF value type {t}")
        return self.b[start:self.p]


def gstr(s):
    return struct.pack("<Q", len(s)) + s


def trim(src, n_keep):
    r = Reader(src)
    if r.take("<I") != 0x46554747:
        raise ValueError("not a GGUF file (bad magic)")
    version = r.take("<I")
    if version not in (2, 3):
        raise ValueError(f"GGUF version {version} not supported (2 or 3)")
    n_tensors, n_kv = r.take("<Q"), r.take("<Q")
    kvs, arch, align = [], None, 32
    for _ in range(n_kv):
        key = r.string()
        t = r.take("<I")
        raw = r.value(t)
        kvs.append([key, t, raw])
        if key == b"general.architecture":
            arch = raw[8:]
        if key == b"general.alignment":
            align = struct.unpack("<I", raw)[0]
    if arch is None:
        raise ValueError("no general.architecture")
    bc_key = arch + b".block_count"
    have = None
    for kv in kvs:
        if kv[0] == bc_key:
            have = struct.unpack(SCALAR[kv[1]], kv[2])[0]
            if not 1 <= n_keep <= have:
                raise ValueError(f"N must be 1..{have}")
            kv[2] = struct.pack(SCALAR[kv[1]], n_keep)
    if have is None:
        raise ValueError(f"no {bc_key.decode()}")
    infos = []
    for _ in range(n_tensors):
        name = r.string()
        nd = r.take("<I")
        dims = [r.take("<Q") for _ in range(nd)]
        ty, off = r.take("<I"), r.take("<Q")
        infos.append((name, dims, ty, off))
    data0 = (r.p + align - 1) // align * align
    ends = sorted(off for _, _, _, off in infos) + [len(src) - data0]
    size = {off: ends[i + 1] - off for i, off in enumerate(ends[:-1])}

    def keep(name):
        if not name.startswith(b"blk."):
            return True
        return int(name.split(b".")[1]) < n_keep

    kept = [t for t in sorted(infos, key=lambda t: t[3]) if keep(t[0])]
    head = bytearray(struct.pack("<IIQQ", 0x46554747, version, len(kept), len(kvs)))
    for key, t, raw in kvs:
        head += gstr(key) + struct.pack("<I", t) + raw
    off, chunks = 0, []
    for name, dims, ty, o in kept:
        head += gstr(name) + struct.pack("<I", len(dims))
        head += b"".join(struct.pack("<Q", d) for d in dims) + struct.pack("<IQ", ty, off)
        chunk = src[data0 + o:data0 + o + size[o]]
        pad = -len(chunk) % align
        chunks.append(chunk + b"\0" * pad)
        off += len(chunk) + pad
    head += b"\0" * (-len(head) % align)
    return bytes(head) + b"".join(chunks), have, len(infos), len(kept)


def main(argv):
    if len(argv) != 4:
        sys.stderr.write(__doc__)
        return 2
    try:
        n_keep = int(argv[3])
        with open(argv[1], "rb") as f:
            src = f.read()
        out, have, n_in, n_out = trim(src, n_keep)
    except (OSError, ValueError, struct.error) as e:
        sys.stderr.write(f"trim_gguf: {e}\n")
        return 1
    with open(argv[2], "wb") as f:
        f.write(out)
    print(f"trim_gguf: {argv[2]}: {n_keep} of {have} blocks, {n_out} of {n_in} tensors, "
          f"{len(out)} bytes")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
