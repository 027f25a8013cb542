#!/usr/bin/env python3
"""llamacpp_ref.py — teacher-forced reference outputs of a GGUF model from llama.cpp.

Tokenizes a text file with llama.cpp's own tokenizer (BOS added iff the model's
GGUF says so), evaluates the first N tokens in one teacher-forced pass with
logits for every position, and writes a JSON with the token ids, the top-1 id
and the top-5 (id, logit) of every position. The C side checks its own top-1
against `top1` (agreement >= 99% expected) — see tests/data/llamacpp/README.md.

Usage:
  scripts/llamacpp_ref.py MODEL.gguf --text tests/data/text/lighthouse.txt \
      --n 512 --out tests/data/llamacpp/<model>.json [--threads 2] [--kv f32|f16]
Needs llama-cpp-python (pip install llama-cpp-python; LLAMA_CPP_LIB_PATH may
point at a separately built libllama.so).
"""
from __future__ import annotations

import argparse
import hashlib
import json
import os
import sys
import time

import numpy as np


def sha256_file(path: str) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 22), b""):
            h.update(block)
    return h.hexdigest()


def main() -> int:
    ap = argparse.ArgumentParser(description="teacher-forced llama.cpp reference (top-1/top-5)")
    ap.add_argument("model")
    ap.add_argument("--text", required=True, help="UTF-8 text file")
    ap.add_argument("--n", type=int, default=512, help="number of tokens to evaluate")
    ap.add_argument("--out", required=True)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--kv", choices=["f32", "f16"], default="f32",
                    help="KV cache type (f32 keeps the reference closest to exact math)")
    ap.add_argument("--top", type=int, default=5)
    ap.add_argument("--no-sha", action="store_true", help="skip hashing the model file")
    args = ap.parse_args()

    import llama_cpp
    from llama_cpp import Llama

    text = open(args.text, encoding="utf-8").read()
    kv_type = llama_cpp.GGML_TYPE_F32 if args.kv == "f32" else llama_cpp.GGML_TYPE_F16
    # tokenize with a vocab-only load first to size the context
    vocab = Llama(model_path=args.model, vocab_only=True, verbose=False)
    ids_all = vocab.tokenize(text.encode("utf-8"), add_bos=True, special=False)
    add_bos = bool(llama_cpp.llama_vocab_get_add_bos(vocab._model.vocab)) \
        if hasattr(llama_cpp, "llama_vocab_get_add_bos") else None
    bos = vocab.token_bos()
    del vocab
    if len(ids_all) < args.n:
        print(f"text has only {len(ids_all)} tokens < --n {args.n}", file=sys.stderr)
        return 1
    ids = ids_all[: args.n]
    n_ctx = max(args.n, 64)
    m = Llama(model_path=args.model, n_ctx=n_ctx, n_batch=n_ctx, n_ubatch=n_ctx,
              n_threads=args.threads, n_threads_batch=args.threads,
              logits_all=True, verbose=False, type_k=kv_type, type_v=kv_type)
    t0 = time.time()
    m.reset()
    m.eval(ids)
    dt = time.time() - t0
    logits = np.asarray(m.scores[: len(ids)], dtype=np.float32)
    n_vocab = logits.shape[1]
    k = args.top
    top_idx = np.argpartition(-logits, k, axis=1)[:, :k]
    rows = []
    top1 = []
    for i in range(len(ids)):
        idx = top_idx[i][np.argsort(-logits[i, top_idx[i]], kind="stable")]
        rows.append([[int(j), round(float(logits[i, j]), 4)] for j in idx])
        top1.append(int(idx[0]))
    gaps = [r[0][1] - r[1][1] for r in rows]
    acc = float(np.mean([top1[i] == ids[i + 1] for i in range(len(ids) - 1)]))
    meta = m.metadata if hasattr(m, "metadata") else {}
    out = {
        "format": "cinfer-llamacpp-ref-1",
        "model_file": os.path.basename(args.model),
        "model_sha256": None if args.no_sha else sha256_file(args.model),
        "architecture": meta.get("general.architecture"),
        "model_name": meta.get("general.name"),
        "text_file": os.path.basename(args.text),
        "text_sha256": hashlib.sha256(text.encode("utf-8")).hexdigest(),
        "text_tokens_total": len(ids_all),
        "n_tokens": len(ids),
        "add_bos": add_bos if add_bos is not None else (ids[0] == bos),
        "bos_id": bos,
        "n_vocab": n_vocab,
        "kv_cache_type": args.kv,
        "llama_cpp_python": getattr(llama_cpp, "__version__", None),
        "ids": [int(t) for t in ids],
        "top1": top1,
        "top5": rows,
        "top1_gap": [round(g, 4) for g in gaps],
        "next_token_accuracy": round(acc, 4),
        "eval_seconds": round(dt, 2),
    }
    os.makedirs(os.path.dirname(os.path.abspath(args.out)), exist_ok=True)
    with open(args.out, "w") as f:
        json.dump(out, f, separators=(",", ":"))
        f.write("\n")
    small = sum(1 for g in gaps if g < 1e-2)
    print(f"{os.path.basename(args.model)}: {len(ids)} tokens (text has {len(ids_all)}), "
          f"add_bos={out['add_bos']}, eval {dt:.1f}s, next-token acc {acc:.3f}, "
          f"near-ties (gap<0.01) {small} -> {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
