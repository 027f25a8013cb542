"""bench_llg.py — the llguidance peer on the same inputs, vocabulary and token ids.
usage: bench_llg.py INPUTS.json OUT_DIR   (reads OUT_DIR/vocab.bin and cinfer.json; writes
OUT_DIR/llguidance.json). Mask time per step is LLMatcher.unsafe_compute_mask_ptr (thread CPU time)."""
import ctypes
import json
import struct
import sys
import time

import llguidance
from llguidance import LLMatcher, LLTokenizer, TokenizerWrapper


class Vocab:
    def __init__(self, path, eos):
        data = open(path, "rb").read()
        self.tokens, self.special_token_ids, o = [], [], 0
        while o < len(data):
            (n,) = struct.unpack_from("<I", data, o)
            o += 4
            if n == 0xFFFFFFFF:
                self.special_token_ids.append(len(self.tokens))
                self.tokens.append(b"")
            else:
                self.tokens.append(data[o:o + n])
                o += n
        self.eos_token_id = eos
        self.bos_token_id = None
        self.byte_id = {}
        for i, t in enumerate(self.tokens):
            if len(t) == 1 and t[0] not in self.byte_id:
                self.byte_id[t[0]] = i

    def __call__(self, s):
        if isinstance(s, str):
            s = s.encode()
        return [self.byte_id[b] for b in s if b in self.byte_id]


def main(inputs, outdir):
    cin = json.load(open(outdir + "/cinfer.json"))
    voc = Vocab(outdir + "/vocab.bin", cin["eos"])
    t0 = time.thread_time()
    tok = LLTokenizer(TokenizerWrapper(voc))
    tok_us = (time.thread_time() - t0) * 1e6
    items = json.load(open(inputs))
    res = []
    byname = {r["name"]: r for r in cin["inputs"]}
    for it in items:
        r = {"name": it["name"], "kind": it["kind"]}
        res.append(r)
        c = byname.get(it["name"], {})
        if "ids" not in c:
            r["error"] = "cinfer did not compile it"
            continue
        fmt = {"schema": "json_schema", "regex": "regex", "ebnf": "gbnf"}[it["kind"]]
        src = json.dumps(it["source"]) if it["kind"] == "schema" else it["source"]
        best = 1e30
        m = None
        for _ in range(5):
            a = time.thread_time()
            g = llguidance.grammar_from(fmt, src)
            m = LLMatcher(tok, g, log_level=0)
            best = min(best, (time.thread_time() - a) * 1e6)
        if m.is_error():
            r["error"] = m.get_error()
            continue
        r["compile_us"] = best
        words = (tok.vocab_size + 31) // 32
        mask = (ctypes.c_uint32 * words)()
        ptr = ctypes.addressof(mask)
        times, ok = [], True
        for tid in c["ids"]:
            a = time.thread_time()
            m.unsafe_compute_mask_ptr(ptr, words * 4)
            times.append((time.thread_time() - a) * 1e6)
            if not m.consume_token(tid):
                ok = False
                break
        r["ok"] = ok and not m.is_error()
        r["mask_us"] = times
    json.dump({"tokenizer_us": tok_us, "version": llguidance.get_version() if hasattr(llguidance, "get_version") else "",
               "inputs": res}, open(outdir + "/llguidance.json", "w"))


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
