#!/usr/bin/env python3
"""bench_hf.py — HF reference encode throughput, one thread, on the same corpus chunks.

usage: bench_hf.py TOKENIZER CORPUS.jsonl [reps]
TOKENIZER: tokenizer.json(.gz) -> `tokenizers`; tokenizer.model -> `sentencepiece`;
.gguf -> transformers' GGUF loader, then its `tokenizers` backend. Encodes each chunk with
add_special_tokens=False (specials parsed: HF's default), best of `reps` passes.
Prints: "hf <bytes> bytes <ids> ids <seconds> s <MB/s> MB/s".
"""
import gzip
import json
import os
import sys
import time

os.environ.setdefault("RAYON_NUM_THREADS", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")


def load(path):
    if path.endswith(".model"):
        import sentencepiece as spm
        sp = spm.SentencePieceProcessor(model_file=path)
        return "sentencepiece", sp.encode
    if path.endswith(".gguf"):
        from transformers import AutoTokenizer
        d, f = os.path.split(path)
        tk = AutoTokenizer.from_pretrained(d, gguf_file=f).backend_tokenizer
    else:
        from tokenizers import Tokenizer
        raw = gzip.open(path).read() if path.endswith(".gz") else open(path, "rb").read()
        tk = Tokenizer.from_str(raw.decode())
    return "tokenizers", lambda s: tk.encode(s, add_special_tokens=False).ids


def main():
    path, corpus = sys.argv[1], sys.argv[2]
    reps = int(sys.argv[3]) if len(sys.argv) > 3 else 3
    kind, enc = load(path)
    chunks = [json.loads(l) for l in open(corpus, encoding="utf-8")]
    nbytes = sum(len(c.encode()) for c in chunks)
    best, nids = 1e30, 0
    for _ in range(reps):
        t = time.perf_counter()
        n = 0
        for c in chunks:
            n += len(enc(c))
        best = min(best, time.perf_counter() - t)
        nids = n
    print(f"hf({kind}) {nbytes} bytes {nids} ids {best:.4f} s {nbytes / best / 1e6:.2f} MB/s")


if __name__ == "__main__":
    main()
