#!/usr/bin/env python3
"""run.py — the KV quantization benchmark (not a test): builds nothing; runs the
cinfer_kvq_bench binary (cmake --build build --target cinfer_kvq_bench) on the CPU and
writes bench/results/kv_quant.json in the issue's layout:

  {"cpu": {"schemes": {SCHEME: {"bytes_per_token", "compression", "ppl_delta_frac",
                                "kl_mean", "decode_ratio_16k", ...}}}, "gpu": {...}}

SCHEME in 8, 4, k8v4, k8v3 (turbo:k8v4, turbo = turbo:k8v3). ppl_delta_frac is the relative
perplexity change vs f16 KV over all scored tokens of both texts (prose and code); kl_mean
the mean KL(p_f16 || p_scheme) over the same positions; decode_ratio_N = decode tok/s at
context N over f16's, measured side by side (best of the repetitions).

Texts (copied from Debian packages into bench/kv_quant/texts/, sources and licenses in its
README.md): prose = the Vim user manual, chapters 1-5 (OPL); code = CPython 3.11's
argparse.py (PSF License 2). The first --tokens (16384) + 1 tokens of each are scored, in
windows of --window tokens (each window starts a fresh context).

usage: bench/kv_quant/run.py [--bin build/cinfer_kvq_bench] [--model M] [--tokens N]
                              [--window W] [--schemes 8,4,turbo:k8v4,turbo]
                              [--decode-ctx 4096,16384 | ''] [--raw OUT.json]
                              [--from-raw IN.json | --from-log STDERR.log] [--merge]
--from-log F... combines runs: each F a raw JSON or a (possibly cut-off) run's stderr (its
last "partial:" line); their scored positions add up per scheme and text (other texts, or
other windows of a text via the bench's --start).
--merge keeps the fields of --out that this run did not measure (e.g. the decode ratios
of an earlier run, the gpu half), replacing only what it measured.
"""
import argparse
import json
import math
import os
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.abspath(os.path.join(HERE, "..", ".."))
NAMES = {"8": "8", "4": "4", "turbo:k8v4": "k8v4", "turbo": "k8v3"}


def rnd(x):
    return None if x is None else round(x, 4)


def convert(raw, load_start, load_end, commit):
    """The issue's layout from a raw kvq_bench object (quality and/or decode fields)."""
    s0 = raw["schemes"]["f16"]
    texts = raw["texts"]
    out = {}
    for name, key in NAMES.items():
        s = raw["schemes"].get(name)
        if not s:
            continue
        row = {"bytes_per_token": s["bytes_per_token"],
               "compression": round(s["compression"], 4)}
        n = sum(s["n_" + t] for t in texts)
        if n:
            nll0 = sum(math.log(s0["ppl_" + t]) * s0["n_" + t] for t in texts)
            nll = sum(math.log(s["ppl_" + t]) * s["n_" + t] for t in texts)
            row["ppl_delta_frac"] = round(math.exp(nll / n) / math.exp(nll0 / n) - 1, 6)
            row["kl_mean"] = round(sum(s["kl_mean_" + t] * s["n_" + t] for t in texts) / n, 6)
            for t in texts:
                row["ppl_delta_frac_" + t] = round(s["ppl_delta_frac_" + t], 6)
                row["kl_mean_" + t] = round(s["kl_mean_" + t], 6)
        for ctx, name in ((16384, "decode_ratio_16k"), (4096, "decode_ratio_4k"),
                          (32768, "decode_ratio_32k")):
            if "decode_ratio_%d" % ctx in s:
                row[name] = rnd(s["decode_ratio_%d" % ctx])
        out[key] = row
    meta = {"model": os.path.basename(raw["model"]), "threads": raw["threads"],
            "tokens_scored_per_text": {t: s0["n_" + t] for t in texts},
            "window": raw["window"], "f16_ppl": {t: s0["ppl_" + t] for t in texts},
            "f16_decode_tok_s": {k[len("decode_tok_s_"):]: v for k, v in s0.items()
                                 if k.startswith("decode_tok_s_")},
            "load_start": load_start, "load_end": load_end, "commit": commit}
    return {"cpu": {"schemes": out, "meta": meta}}


def read_part(path):
    """A raw kvq_bench object: a JSON file, or the last 'partial:' line of a stderr log."""
    text = open(path).read()
    if text.lstrip().startswith("{"):
        return json.loads(text)
    lines = [l for l in text.splitlines() if l.startswith("partial: ")]
    if not lines:
        sys.exit("run.py: no 'partial:' line in " + path)
    return json.loads(lines[-1][len("partial: "):])


def combine(parts):
    """Sums the scored positions of several runs (other texts, or other windows of a text
    via --start) into one raw object: per scheme and text, NLL, KL and counts add up."""
    out = json.loads(json.dumps(parts[0]))
    out["texts"] = []
    acc = {}
    for p in parts:
        for t in p["texts"]:
            if t not in out["texts"]:
                out["texts"].append(t)
            for name, s in p["schemes"].items():
                a = acc.setdefault(name, {}).setdefault(t, [0.0, 0.0, 0])
                n = s["n_" + t]
                a[0] += math.log(s["ppl_" + t]) * n
                a[1] += s["kl_mean_" + t] * n
                a[2] += n
    for name, per in acc.items():
        s = out["schemes"].setdefault(name, dict(parts[0]["schemes"].get(name, {})))
        for t, (nll, kl, n) in per.items():
            s["n_" + t] = n
            s["ppl_" + t] = math.exp(nll / n) if n else 1.0
            s["kl_mean_" + t] = kl / n if n else 0.0
    for name, s in out["schemes"].items():
        for t in out["texts"]:
            s["ppl_delta_frac_" + t] = s["ppl_" + t] / out["schemes"]["f16"]["ppl_" + t] - 1
    return out


def merge(old, new):
    """new's measured fields over old's (per scheme row; meta under a run-specific key)."""
    res = dict(old)
    cpu = dict(old.get("cpu", {}))
    rows = {k: dict(v) for k, v in cpu.get("schemes", {}).items()}
    for k, v in new["cpu"]["schemes"].items():
        rows.setdefault(k, {}).update(v)
    cpu["schemes"] = rows
    meta = dict(cpu.get("meta", {}))
    m = new["cpu"]["meta"]
    run = "quality_run" if any("ppl_delta_frac" in v for v in new["cpu"]["schemes"].values()) \
        else "decode_run"
    meta[run] = m
    cpu["meta"] = meta
    res["cpu"] = cpu
    return res


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--bin", default=os.path.join(ROOT, "build", "cinfer_kvq_bench"))
    ap.add_argument("--model", default=os.path.join(ROOT, "models",
                                                    "qwen2.5-coder-1.5b-instruct-Q4_K_M.gguf"))
    ap.add_argument("--tokens", type=int, default=16384)
    ap.add_argument("--schemes", default="8,4,turbo:k8v4,turbo")
    ap.add_argument("--decode-ctx", default="4096,16384")
    ap.add_argument("--chunk", type=int, default=256)
    ap.add_argument("--from-log", nargs="+")
    ap.add_argument("--merge", action="store_true")
    ap.add_argument("--window", type=int, default=2048)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--raw")
    ap.add_argument("--from-raw")
    ap.add_argument("--load-start", default="")
    ap.add_argument("--load-end", default="")
    ap.add_argument("--commit", default="")
    ap.add_argument("--out", default=os.path.join(ROOT, "bench", "results", "kv_quant.json"))
    a = ap.parse_args()
    if a.from_raw:
        raw = json.load(open(a.from_raw))
    elif a.from_log:
        raw = combine([read_part(f) for f in a.from_log])
    else:
        up = lambda: open("/proc/loadavg").read().split()[:3]
        a.load_start = " ".join(up())
        texts = os.path.join(HERE, "texts")
        p = subprocess.run([a.bin, a.model, "-t", str(a.threads), "--schemes", a.schemes,
                            "--text", "prose=" + os.path.join(texts, "prose_vim_usr_01-05.txt"),
                            "--text", "code=" + os.path.join(texts, "code_argparse.py"),
                            "--tokens", str(a.tokens), "--window", str(a.window),
                            "--chunk", str(a.chunk), "--decode-ctx", a.decode_ctx],
                           capture_output=True, text=True)
        if p.returncode:
            sys.exit(p.stderr)
        raw = json.loads(p.stdout)
        a.load_end = " ".join(up())
        a.commit = subprocess.run(["git", "-C", ROOT, "rev-parse", "HEAD"], capture_output=True,
                                  text=True).stdout.strip()
        if a.raw:
            json.dump(raw, open(a.raw, "w"), indent=1)
    res = convert(raw, a.load_start, a.load_end, a.commit)
    if a.merge and os.path.exists(a.out):
        res = merge(json.load(open(a.out)), res)
    os.makedirs(os.path.dirname(a.out), exist_ok=True)
    with open(a.out, "w") as f:
        json.dump(res, f, indent=2)
        f.write("\n")
    print(json.dumps(res, indent=2))


if __name__ == "__main__":
    main()
