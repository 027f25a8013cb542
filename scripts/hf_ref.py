#!/usr/bin/env python3
"""hf_ref.py — a third opinion for the real-model references: exact float32 math.

Loads a GGUF into Hugging Face transformers (which dequantizes every tensor to
float32, so no activation quantization happens anywhere), runs teacher forcing
over the token ids of a scripts/llamacpp_ref.py JSON, and reports how often its
argmax agrees with llama.cpp's `top1`, plus the logit differences on
llama.cpp's top-5. Use it to tell which of two disagreeing engines is off.

Usage:
  scripts/hf_ref.py models/X.gguf --ref tests/data/llamacpp/X.json [--n 768]
                    [--out FILE.json]   # optional: write our own top1/top5 in the
                                        # same format as llamacpp_ref.py
Needs: torch, transformers, gguf, numpy.
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import time

import numpy as np


def main() -> int:
    ap = argparse.ArgumentParser(description="float32 transformers reference on a GGUF")
    ap.add_argument("model")
    ap.add_argument("--ref", required=True, help="JSON written by scripts/llamacpp_ref.py")
    ap.add_argument("--n", type=int, default=0, help="positions to use (default: all)")
    ap.add_argument("--out")
    ap.add_argument("--threads", type=int, default=2)
    args = ap.parse_args()

    import torch
    import transformers
    from transformers import AutoModelForCausalLM

    torch.set_num_threads(args.threads)
    ref = json.load(open(args.ref))
    ids = ref["ids"][: args.n or None]
    t0 = time.time()
    model = AutoModelForCausalLM.from_pretrained(
        os.path.dirname(os.path.abspath(args.model)), gguf_file=os.path.basename(args.model),
        torch_dtype=torch.float32, attn_implementation="eager").eval()
    load_s = time.time() - t0
    t0 = time.time()
    with torch.no_grad():
        logits = model(input_ids=torch.tensor([ids])).logits[0].float().numpy()
    eval_s = time.time() - t0
    top1 = logits.argmax(-1)
    lc_top1 = np.array(ref["top1"][: len(ids)])
    agree = float((top1 == lc_top1).mean())
    # logit differences on llama.cpp's top-5 ids
    dmax = 0.0
    for i, row in enumerate(ref["top5"][: len(ids)]):
        for tok, lv in row:
            dmax = max(dmax, abs(float(logits[i, tok]) - lv))
    acc = float(np.mean(top1[:-1] == np.array(ids[1:])))
    print(f"{os.path.basename(args.model)}: transformers {transformers.__version__} float32 vs "
          f"llama.cpp top-1 agreement {agree * 100:.2f}% over {len(ids)} positions; "
          f"max |dlogit| on llama.cpp's top-5 {dmax:.3f}; next-token acc {acc:.3f} "
          f"(load {load_s:.0f}s, eval {eval_s:.0f}s)")
    if args.out:
        rows = []
        for i in range(len(ids)):
            idx = np.argsort(-logits[i], kind="stable")[:5]
            rows.append([[int(j), round(float(logits[i, j]), 4)] for j in idx])
        out = {"format": "cinfer-llamacpp-ref-1", "engine": "transformers-float32",
               "model_file": os.path.basename(args.model), "ids": ids,
               "top1": [int(t) for t in top1], "top5": rows,
               "agreement_with_llamacpp": agree, "max_abs_dlogit_llamacpp_top5": dmax}
        with open(args.out, "w") as f:
            json.dump(out, f, separators=(",", ":"))
            f.write("\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
