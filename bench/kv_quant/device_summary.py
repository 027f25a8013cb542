#!/usr/bin/env python3
"""device_summary.py — device_kvq.sh's summary and the issue's "gpu" object.

  device_summary.py [--decode GENERAL.json] [--decode-kvqdec KVQDEC.json] [--quality Q.json]
                    [--gpu-json OUT.json] [--device NAME]

Inputs are cinfer_kvq_bench outputs (an empty or missing path is skipped): the decode runs
with the general attention kernel (CINFER_KVQ_DEC=0) and the decode-step kernel
(CINFER_KVQ_DEC=1), and the quality run on a real model. Prints one line per scheme and
writes {"gpu": {"schemes": {8|4|k8v4|k8v3: {...}}, "meta": {...}}}:
  bytes_per_token, compression       the decode model's (l8b: head_dim 128),
  ppl_delta_frac, kl_mean            the quality model's, over all scored tokens of all texts
                                     (+ _<text> per text),
  decode_ratio_4k / _16k / _32k      the general kernel (the default unless KVQ_DEC_DEFAULT
                                     is 1 in cuda_kvq.cu), f16 tok/s over the scheme's,
  decode_ratio_*_kvq_dec             the decode-step kernel.
"""
import argparse
import json
import math
import os

NAMES = {"8": "8", "4": "4", "turbo:k8v4": "k8v4", "turbo": "k8v3"}


def ctx_label(n):
    return "%dk" % (n // 1024) if n % 1024 == 0 else str(n)


def load(p):
    if not p or not os.path.exists(p) or not os.path.getsize(p):
        return None
    try:
        return json.load(open(p))
    except ValueError as ex:
        print("  %s: no JSON (%s)" % (p, ex))
        return None


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--decode")
    ap.add_argument("--decode-kvqdec")
    ap.add_argument("--quality")
    ap.add_argument("--gpu-json")
    ap.add_argument("--device", default="")
    a = ap.parse_args()
    dg, dk, q = load(a.decode), load(a.decode_kvqdec), load(a.quality)
    rows, meta = {}, {"device": a.device}
    for name, key in NAMES.items():
        row = {}
        if dg and name in dg["schemes"]:
            s = dg["schemes"][name]
            row["bytes_per_token"] = s["bytes_per_token"]
            row["compression"] = round(s["compression"], 4)
        if q and name in q["schemes"]:
            s, s0, texts = q["schemes"][name], q["schemes"]["f16"], q["texts"]
            n = sum(s["n_" + t] for t in texts)
            if n:
                nll0 = sum(math.log(s0["ppl_" + t]) * s0["n_" + t] for t in texts)
                nll = sum(math.log(s["ppl_" + t]) * s["n_" + t] for t in texts)
                row["ppl_delta_frac"] = round(math.exp((nll - nll0) / n) - 1, 6)
                row["kl_mean"] = round(sum(s["kl_mean_" + t] * s["n_" + t] for t in texts) / n, 6)
                for t in texts:
                    row["ppl_delta_frac_" + t] = round(s["ppl_delta_frac_" + t], 6)
                    row["kl_mean_" + t] = round(s["kl_mean_" + t], 6)
            if "bytes_per_token" not in row:
                row["bytes_per_token"] = s["bytes_per_token"]
                row["compression"] = round(s["compression"], 4)
        for d, suffix in ((dg, ""), (dk, "_kvq_dec")):
            if d and name in d["schemes"]:
                sd = d["schemes"][name]
                for k in sorted((k for k in sd if k.startswith("decode_ratio_")),
                                key=lambda k: int(k.rsplit("_", 1)[1])):
                    n = int(k.rsplit("_", 1)[1])
                    row["decode_ratio_%s%s" % (ctx_label(n), suffix)] = round(sd[k], 4)
                    row["decode_tok_s_%s%s" % (ctx_label(n), suffix)] = round(
                        sd["decode_tok_s_%d" % n], 2)
        if row:
            rows[key] = row
            print("  %-5s " % key + "  ".join("%s %s" % (k, v) for k, v in row.items()
                                              if not k.endswith(("_prose", "_code"))))
    for d, label in ((dg, "decode"), (dk, "decode_kvq_dec"), (q, "quality")):
        if d:
            f16 = d["schemes"].get("f16", {})
            meta[label] = {"model": os.path.basename(d["model"].rstrip("/")),
                           "f16_decode_tok_s": {k[len("decode_tok_s_"):]: v for k, v in f16.items()
                                                if k.startswith("decode_tok_s_")}}
            if label == "quality":
                meta[label].update({"tokens_scored_per_text": {t: f16["n_" + t] for t in d["texts"]},
                                    "window": d["window"],
                                    "f16_ppl": {t: f16["ppl_" + t] for t in d["texts"]},
                                    "bytes_per_token": {NAMES.get(k, k): v["bytes_per_token"]
                                                        for k, v in d["schemes"].items()}})
    # the decode-step kernel wins where it is at least as fast at 16k and 32k for every scheme
    wins = None
    pairs = [(rows[k]["decode_tok_s_%s" % c], rows[k].get("decode_tok_s_%s_kvq_dec" % c, 0))
             for k in rows for c in ("16k", "32k") if "decode_tok_s_%s" % c in rows[k]]
    if pairs:
        wins = all(b >= a for a, b in pairs)
        print("  CINFER_KVQ_DEC=1 at least as fast at 16k and 32k for every scheme: %s%s" % (
            "yes" if wins else "no",
            " -> make it the default: KVQ_DEC_DEFAULT 1 in src/backend/cuda/cuda_kvq.cu" if wins else ""))
    meta["kvq_dec_wins"] = wins
    if a.gpu_json:
        with open(a.gpu_json, "w") as f:
            json.dump({"gpu": {"schemes": rows, "meta": meta}}, f, indent=1)
            f.write("\n")


main()
