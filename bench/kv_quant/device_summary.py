#!/usr/bin/env python3
"""device_summary.py — device_kvq.sh's summary and the issue's "gpu" object.

  device_summary.py [--decode SPLIT.json] [--decode-general GENERAL.json] [--quality Q.json]
                    [--extra "LABEL=FILE ..."] [--gpu-json OUT.json] [--device NAME]
  device_summary.py --ncu NCU.csv     (one ncu --csv --page raw output: a line per kernel)

Inputs are cinfer_kvq_bench outputs (an empty or missing path is skipped): the decode runs
with the decode path (CINFER_KVQ_ATTN=split, cuda_kvq_dec.cu, the default) and the general
kernel (CINFER_KVQ_ATTN=general), 16k runs of variants of the decode path (device_kvq.sh's
EXTRA: e.g. nt128 = CINFER_KVQ_NT=128, splits64 = CINFER_KVQ_SPLITS=64), and
the quality run on a real model. Prints one line per scheme and writes
{"gpu": {"schemes": {8|4|k8v4|k8v3: {...}}, "meta": {...}}}:
  bytes_per_token, compression       the decode model's (l8b: head_dim 128),
  ppl_delta_frac, kl_mean            the quality model's, over all scored tokens of all texts
                                     (+ _<text> per text),
  decode_ratio_4k / _16k / _32k      the scheme's decode tok/s over f16's, the decode path,
  decode_ratio_*_general             the general kernel (CINFER_KVQ_ATTN=general),
  decode_ratio_16k_<label>           a variant of the decode path.
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
    ap.add_argument("--decode-general")
    ap.add_argument("--extra", default="")
    ap.add_argument("--ncu")
    ap.add_argument("--quality")
    ap.add_argument("--gpu-json")
    ap.add_argument("--device", default="")
    a = ap.parse_args()
    if a.ncu:
        return ncu_summary(a.ncu)
    dg, dk, q = load(a.decode), load(a.decode_general), load(a.quality)
    runs = [(dg, ""), (dk, "_general")]
    for item in a.extra.split():
        lab, _, path = item.partition("=")
        runs.append((load(path), "_" + lab))
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
        for d, suffix in runs:
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
    for d, label in [(dg, "decode"), (dk, "decode_general"), (q, "quality")] + [
            (d, "decode" + sfx) for d, sfx in runs[2:]]:
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
    # the target: decode_ratio_16k >= 1.0 for 8 and k8v4 (the decode path)
    met = None
    r16 = {k: rows[k].get("decode_ratio_16k") for k in ("8", "k8v4") if k in rows}
    if r16 and all(v is not None for v in r16.values()):
        met = all(v >= 1.0 for v in r16.values())
        print("  decode_ratio_16k >= 1.0 for 8 and k8v4 (decode path): %s (%s)" % (
            "yes" if met else "NO", ", ".join("%s %.3f" % kv for kv in r16.items())))
    meta["target_16k_met"] = met
    if a.gpu_json:
        with open(a.gpu_json, "w") as f:
            json.dump({"gpu": {"schemes": rows, "meta": meta}}, f, indent=1)
            f.write("\n")


def ncu_summary(path):
    """One line per profiled kernel: name, duration, DRAM bytes read, GB/s."""
    import csv
    try:
        lines = [l for l in open(path) if l.startswith('"')]
    except OSError as ex:
        print("  ncu: %s" % ex)
        return
    rows = list(csv.reader(lines))
    if len(rows) < 3:
        print("  ncu: no kernel rows in %s" % path)
        return
    hdr = rows[0]
    rows = [r for r in rows if len(r) == len(hdr)]
    col = {h: i for i, h in enumerate(hdr)}

    def val(r, name):
        i = col.get(name)
        return r[i] if i is not None and i < len(r) else "?"
    for r in rows[2:]:  # rows[1]: units
        name = val(r, "Kernel Name")[:60]
        print("  ncu %-40s time %s ns  dram read %s B  %s B/s  (dram %s%%, sm %s%%, issue %s%%, "
              "warps %s%%, smem conflicts %s, grid %s, regs %s)" % (
                  name[:40], val(r, "gpu__time_duration.sum"), val(r, "dram__bytes_read.sum"),
                  val(r, "dram__bytes_read.sum.per_second"),
                  val(r, "dram__throughput.avg.pct_of_peak_sustained_elapsed"),
                  val(r, "sm__throughput.avg.pct_of_peak_sustained_elapsed"),
                  val(r, "smsp__issue_active.avg.pct_of_peak_sustained_active"),
                  val(r, "sm__warps_active.avg.pct_of_peak_sustained_active"),
                  val(r, "l1tex__data_bank_conflicts_pipe_lsu_mem_shared.sum"),
                  val(r, "launch__grid_size"), val(r, "launch__registers_per_thread")))


main()
