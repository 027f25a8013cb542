#!/usr/bin/env python3
"""run_llamacpp.py — the llama.cpp half of the CPU benchmark (cinfer vs llama.cpp).

Measures one GGUF model with llama.cpp on N threads and prints one JSON object:
  prefill_tok_s  512-token prompt, one batch          (llama-bench pp512, else Python API)
  decode_tok_s   128 tokens generated after a prompt  (llama-bench tg128, else Python API)
  ttft_ms        time to first token: a warm, loaded model gets a short prompt
                 (~32 tokens); time until the first greedy token is known
  Each figure is the best of --reps runs (fastest; medians/averages are kept beside
  them), matching bench/cpu_vs_llamacpp/run.sh's best-of-3 for cinfer.
  peak_rss_mib   peak resident set of a process that loads the model, prefills
                 512 tokens and decodes 128 (Python API, subprocess)
The llama-bench binary is used when found (--bench-bin, $LLAMA_BENCH, PATH, or
next to $LLAMA_CPP_LIB_PATH); the llama-cpp-python figures are always reported
too, under "python_api". KV cache F16 (llama.cpp's default) unless --kv f32.

Usage: bench/cpu_vs_llamacpp/run_llamacpp.py MODEL.gguf [--threads 2] [--reps 3]
           [--bench-bin PATH | --no-bench-bin] [--kv f16|f32] [--out FILE]
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import time

PROMPT_TEXT = ("The old lighthouse stood on the northern point, and every night its keeper "
               "climbed the narrow stair to light the lamp. One evening in late autumn,")


def find_bench_bin(explicit: str | None) -> str | None:
    cands = [explicit, os.environ.get("LLAMA_BENCH"), shutil.which("llama-bench")]
    lib = os.environ.get("LLAMA_CPP_LIB_PATH")
    if lib:
        cands.append(os.path.join(lib, "llama-bench"))
    for c in cands:
        if c and os.path.isfile(c) and os.access(c, os.X_OK):
            return c
    return None


def run_llama_bench(binary: str, model: str, threads: int, reps: int, kv: str,
                    shape: tuple = ("-p", "512", "-n", "128")) -> dict:
    cmd = [binary, "-m", model, "-t", str(threads), *shape, "-r", str(reps),
           "-ctk", kv, "-ctv", kv, "-o", "json"]
    env = dict(os.environ)
    lib = os.path.dirname(binary)
    env["LD_LIBRARY_PATH"] = lib + (":" + env["LD_LIBRARY_PATH"] if env.get("LD_LIBRARY_PATH") else "")
    p = subprocess.run(cmd, capture_output=True, text=True, env=env)
    if p.returncode != 0:
        raise RuntimeError(f"llama-bench failed ({p.returncode}): {p.stderr[-2000:]}")
    rows = json.loads(p.stdout)
    import resource
    res = {"cmd": " ".join(cmd), "build_commit": None, "rows": [],
           "peak_rss_mib_children": round(resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024.0, 1)}
    for r in rows:
        res["build_commit"] = r.get("build_commit")
        kind = "pp" if r.get("n_prompt", 0) > 0 and r.get("n_gen", 0) == 0 else "tg"
        res["rows"].append({"test": f"{kind}{r.get('n_prompt') or r.get('n_gen')}", "n_depth": r.get("n_depth"),
                            "avg_ts": r.get("avg_ts"), "stddev_ts": r.get("stddev_ts"),
                            "samples_ts": r.get("samples_ts")})
        best = max(r.get("samples_ts") or [r.get("avg_ts")])
        if kind == "pp":
            res["prefill_tok_s"] = best
        else:
            res["decode_tok_s"] = best
    return res


def child(model: str, threads: int, reps: int, kv: str) -> None:
    """Runs in a fresh process so that ru_maxrss belongs to this model alone."""
    import resource

    import llama_cpp
    from llama_cpp import Llama

    kv_type = llama_cpp.GGML_TYPE_F32 if kv == "f32" else llama_cpp.GGML_TYPE_F16
    t0 = time.perf_counter()
    m = Llama(model_path=model, n_ctx=1024, n_batch=512, n_ubatch=512, n_threads=threads,
              n_threads_batch=threads, logits_all=False, verbose=False,
              type_k=kv_type, type_v=kv_type)
    load_s = time.perf_counter() - t0

    import numpy as np

    short = m.tokenize(PROMPT_TEXT.encode(), add_bos=True)
    # long prompt: 512 tokens of repeated text
    long_ids = m.tokenize((PROMPT_TEXT + " ").encode() * 40, add_bos=True)[:512]

    # warm-up
    m.reset(); m.eval(short[:8])

    ttft = []
    for _ in range(reps):
        m.reset()
        t = time.perf_counter()
        m.eval(short)
        int(np.argmax(m.scores[m.n_tokens - 1]))
        ttft.append((time.perf_counter() - t) * 1000.0)

    pre = []
    for _ in range(reps):
        m.reset()
        t = time.perf_counter()
        m.eval(long_ids)
        pre.append(len(long_ids) / (time.perf_counter() - t))

    dec = []
    for _ in range(reps):
        m.reset()
        m.eval(short)
        tok = int(np.argmax(m.scores[m.n_tokens - 1]))
        t = time.perf_counter()
        for _ in range(128):
            m.eval([tok])
            tok = int(np.argmax(m.scores[m.n_tokens - 1]))
        dec.append(128 / (time.perf_counter() - t))

    rss_kib = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    print(json.dumps({
        "load_s": round(load_s, 3),
        "ttft_ms": round(min(ttft), 1),
        "ttft_ms_median": round(statistics.median(ttft), 1),
        "ttft_prompt_tokens": len(short),
        "prefill_tok_s": round(max(pre), 2),
        "prefill_tok_s_median": round(statistics.median(pre), 2),
        "prefill_tokens": len(long_ids),
        "decode_tok_s": round(max(dec), 2),
        "decode_tok_s_median": round(statistics.median(dec), 2),
        "decode_tokens": 128,
        "peak_rss_mib": round(rss_kib / 1024.0, 1),
        "llama_cpp_python": getattr(llama_cpp, "__version__", None),
    }))


def main() -> int:
    ap = argparse.ArgumentParser(description="llama.cpp CPU benchmark (JSON to stdout)")
    ap.add_argument("model")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--kv", choices=["f16", "f32"], default="f16")
    ap.add_argument("--bench-bin")
    ap.add_argument("--no-bench-bin", action="store_true")
    ap.add_argument("--out", help="also write the JSON here")
    ap.add_argument("--no-python-api", action="store_true",
                    help="llama-bench only (ttft absent; peak RSS of the llama-bench process)")
    ap.add_argument("--long", type=int, default=0,
                    help="also prefill a LONG-token prompt (pp LONG) and decode 32 tokens after "
                         "a LONG-token prompt (tg32 at depth LONG), llama-bench, --long-reps runs")
    ap.add_argument("--long-reps", type=int, default=1)
    ap.add_argument("--_child", action="store_true", help=argparse.SUPPRESS)
    args = ap.parse_args()

    if args._child:
        child(args.model, args.threads, args.reps, args.kv)
        return 0

    load_before = os.getloadavg()
    py = {"ttft_ms": None, "peak_rss_mib": None, "prefill_tok_s": None, "decode_tok_s": None}
    if not args.no_python_api:
        p = subprocess.run([sys.executable, os.path.abspath(__file__), args.model, "--_child",
                            "--threads", str(args.threads), "--reps", str(args.reps),
                            "--kv", args.kv], capture_output=True, text=True)
        if p.returncode != 0:
            print(p.stderr[-3000:], file=sys.stderr)
            return 1
        py = json.loads(p.stdout.strip().splitlines()[-1])

    result = {
        "engine": "llama.cpp",
        "model": os.path.basename(args.model),
        "model_bytes": os.path.getsize(args.model),
        "threads": args.threads,
        "kv_cache_type": args.kv,
        "ttft_ms": py["ttft_ms"],
        "peak_rss_mib": py["peak_rss_mib"],
        "prefill_tok_s": py["prefill_tok_s"],
        "decode_tok_s": py["decode_tok_s"],
        "source": "python_api",
        "python_api": py,
    }
    binary = None if args.no_bench_bin else find_bench_bin(args.bench_bin)
    if binary:
        lb = run_llama_bench(binary, args.model, args.threads, args.reps, args.kv)
        result["llama_bench"] = lb
        if "prefill_tok_s" in lb and "decode_tok_s" in lb:
            result["prefill_tok_s"] = round(lb["prefill_tok_s"], 2)
            result["decode_tok_s"] = round(lb["decode_tok_s"], 2)
            result["source"] = "llama-bench (prefill/decode), python_api (ttft, rss)"
            if args.no_python_api:
                result["source"] = "llama-bench (prefill/decode, rss of its process)"
                result["peak_rss_mib"] = lb["peak_rss_mib_children"]
        if args.long > 0:
            n = str(args.long)
            lp = run_llama_bench(binary, args.model, args.threads, args.long_reps, args.kv,
                                 ("-p", n, "-n", "0"))
            ld = run_llama_bench(binary, args.model, args.threads, args.long_reps, args.kv,
                                 ("-p", "0", "-n", "32", "-d", n))
            result["long_tokens"] = args.long
            result["prefill_long_tok_s"] = round(lp["prefill_tok_s"], 2)
            result["decode_long_tok_s"] = round(ld["decode_tok_s"], 2)
            result["llama_bench_long"] = [lp, ld]
    # other processes on the machine distort multi-thread figures badly (llama.cpp's
    # threads meet at a barrier after every op): record how busy the machine was.
    result["loadavg_1min_before_after"] = [round(load_before[0], 2), round(os.getloadavg()[0], 2)]
    result["cpu_count"] = os.cpu_count()
    text = json.dumps(result, indent=2)
    print(text)
    if args.out:
        with open(args.out, "w") as f:
            f.write(text + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
