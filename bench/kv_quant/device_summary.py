#!/usr/bin/env python3
"""device_summary.py BENCH.json [--gpu-json OUT.json] — one line per scheme of a
cinfer_kvq_bench output: bytes per token, compression, and each decode_ratio_N with its
tok/s (device_kvq.sh's summary). --gpu-json also writes the issue's "gpu" half of
bench/results/kv_quant.json: {"gpu": {"schemes": {8|4|k8v4|k8v3: {"bytes_per_token",
"compression", "ppl_delta_frac", "kl_mean", "decode_ratio_16k", "decode_ratio_4k",
"decode_ratio_32k"}}, "meta": {...}}} (ppl and KL null: the device models are random-weight;
merge it by hand beside the "cpu" half)."""
import json
import sys

NAMES = {"8": "8", "4": "4", "turbo:k8v4": "k8v4", "turbo": "k8v3"}


def main():
    try:
        d = json.load(open(sys.argv[1]))
    except Exception as ex:  # a failed run leaves no JSON: say so, do not fail the script
        print("  no JSON:", ex)
        return
    for name, s in d["schemes"].items():
        print("  %-12s bytes/token %7d  compr %.2f  " % (name, s["bytes_per_token"], s["compression"]) +
              "  ".join("%s %.3f (%.1f tok/s)" % (k, v, s[k.replace("ratio", "tok_s")])
                        for k, v in s.items() if k.startswith("decode_ratio_")))
    if "--gpu-json" in sys.argv:
        out = {}
        for name, key in NAMES.items():
            s = d["schemes"].get(name)
            if not s:
                continue
            row = {"bytes_per_token": s["bytes_per_token"], "compression": round(s["compression"], 4),
                   "ppl_delta_frac": None, "kl_mean": None}
            for n, label in ((16384, "16k"), (4096, "4k"), (32768, "32k")):
                r = s.get("decode_ratio_%d" % n)
                row["decode_ratio_" + label] = None if r is None else round(r, 4)
            out[key] = row
        meta = {"model": d.get("model"), "backend": d.get("backend"),
                "f16_decode_tok_s": {k: v for k, v in d["schemes"].get("f16", {}).items()
                                     if k.startswith("decode_tok_s")}}
        with open(sys.argv[sys.argv.index("--gpu-json") + 1], "w") as f:
            json.dump({"gpu": {"schemes": out, "meta": meta}}, f, indent=1)


main()
