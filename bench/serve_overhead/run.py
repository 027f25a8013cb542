#!/usr/bin/env python3
"""run.py — server overhead: TTFT and decode tok/s through HTTP vs `cinfer run`, and vs
llama.cpp's server (llama-cpp-python[server]) on the same GGUF, concurrency 1, in one run.

For each engine the same raw prompt (/v1/completions, streaming, temperature 0, the EOS ids
banned with logit_bias so every run decodes exactly N tokens; a unique first line per request
so that no prompt cache shortens the prefill) is sent R times after one warm-up; TTFT = request sent -> first token chunk; decode tok/s = (N - 1) / (last chunk -
first chunk). `cinfer run` reports its own prefill and decode times (stderr), KV in F16 as
the server. Prints a table and writes bench/results/serve_overhead.json. Not a test: run it
on a quiet machine. Needs build/cinfer, the model (scripts/fetch_models.sh) and, for the
peer, llama-cpp-python[server] (LLAMA_CPP_LIB_PATH may point at a local llama.cpp build).

Usage: bench/serve_overhead/run.py [--model M] [--threads T] [--tokens N] [--reps R]
"""
import argparse
import json
import os
import platform
import re
import socket
import statistics
import subprocess
import sys
import time
import urllib.request

REPO = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
PROMPT = ("// A small C library for dynamic arrays of integers.\n#include <stdlib.h>\n\n"
          "typedef struct {\n    int *data;\n    size_t len, cap;\n} vec;\n\n")


def free_port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    p = s.getsockname()[1]
    s.close()
    return p


def wait_up(base, proc, timeout=180):
    t0 = time.time()
    while time.time() - t0 < timeout:
        if proc.poll() is not None:
            raise RuntimeError("server exited")
        try:
            urllib.request.urlopen(base + "/v1/models", timeout=1).read()
            return
        except OSError:
            time.sleep(0.1)
    raise RuntimeError("server not ready")


_K = [0]


def unique_prompt():
    """A prompt no server has seen: caches (cinfer's prefix cache, llama.cpp's prompt reuse)
    cannot shorten the prefill, so TTFT compares like with like."""
    _K[0] += 1
    return f"// run {_K[0]}\n" + PROMPT


def stream_once(base, n, ban):
    body = json.dumps({"prompt": unique_prompt(), "max_tokens": n, "temperature": 0, "stream": True,
                       "logit_bias": {str(i): -100 for i in ban}, "model": "m"}).encode()
    req = urllib.request.Request(base + "/v1/completions", data=body,
                                 headers={"Content-Type": "application/json"})
    t0 = time.perf_counter()
    times = []
    with urllib.request.urlopen(req, timeout=600) as r:
        for line in r:
            line = line.strip()
            if not line.startswith(b"data: ") or line == b"data: [DONE]":
                continue
            j = json.loads(line[6:])
            ch = j.get("choices") or [{}]
            if ch[0].get("text"):
                times.append(time.perf_counter())
    # a chunk is one token for both servers; usage (when present) confirms the count
    ttft = times[0] - t0
    dec = (len(times) - 1) / (times[-1] - times[0]) if len(times) > 1 else 0.0
    return ttft, dec, len(times)


def bench_server(cmd, base, n, reps, ban, env=None):
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=env)
    try:
        wait_up(base, proc)
        stream_once(base, 8, ban)  # warm-up
        res = [stream_once(base, n, ban) for _ in range(reps)]
    finally:
        proc.terminate()
        proc.wait(timeout=60)
    return {"ttft_s": statistics.median(r[0] for r in res),
            "decode_tok_s": statistics.median(r[1] for r in res),
            "chunks": res[0][2], "runs": [list(r) for r in res]}


def bench_run(binp, model, threads, n, reps):
    out = []
    for _ in range(reps + 1):
        p = subprocess.run([binp, "run", model, "-p", unique_prompt(), "-n", str(n), "--temp", "0",
                            "--kv-f16", "--ignore-eos", "-t", str(threads)],
                           capture_output=True, text=True, check=True)
        pre = re.search(r"prefill: (\d+) tokens in ([\d.]+) s", p.stderr)
        dec = re.search(r"decode:\s+(\d+) tokens in ([\d.]+) s = ([\d.]+) tok/s", p.stderr)
        out.append((float(pre.group(2)), float(dec.group(3)), int(pre.group(1))))
    out = out[1:]  # the first run warms the page cache
    return {"prefill_s": statistics.median(r[0] for r in out),
            "decode_tok_s": statistics.median(r[1] for r in out),
            "prompt_tokens": out[0][2], "runs": [list(r) for r in out]}


def eos_ids(binp, model):
    info = subprocess.run([binp, "info", model], capture_output=True, text=True).stdout
    ids = set()
    for m in re.finditer(r"(?:eos|eot|eog)[^\n]*?(\d+)", info, re.I):
        ids.add(int(m.group(1)))
    return sorted(ids) or [2]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", default=os.path.join(REPO, "models",
                                                    "qwen2.5-coder-0.5b-instruct-Q4_K_M.gguf"))
    ap.add_argument("--threads", type=int, default=os.cpu_count())
    ap.add_argument("--tokens", type=int, default=128)
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--bin", default=os.environ.get("CINFER_BIN",
                                                    os.path.join(REPO, "build", "cinfer")))
    ap.add_argument("--no-peer", action="store_true")
    a = ap.parse_args()
    ban = eos_ids(a.bin, a.model)
    # Qwen2.5: <|endoftext|> 151643, <|im_end|> 151645 are the EOG ids; ban them all
    ban = sorted(set(ban) | ({151643, 151645} if "qwen" in a.model.lower() else set()))
    res = {"model": os.path.basename(a.model), "threads": a.threads, "tokens": a.tokens,
           "reps": a.reps}
    res["cinfer_run"] = bench_run(a.bin, a.model, a.threads, a.tokens, a.reps)
    port = free_port()
    res["cinfer_serve"] = bench_server([a.bin, "serve", a.model, "--port", str(port), "-t",
                                        str(a.threads)], f"http://127.0.0.1:{port}", a.tokens,
                                       a.reps, ban)
    if not a.no_peer:
        port = free_port()
        cmd = [sys.executable, "-m", "llama_cpp.server", "--model", a.model, "--n_threads",
               str(a.threads), "--n_threads_batch", str(a.threads), "--port", str(port),
               "--n_ctx", "4096", "--verbose", "False"]
        res["llamacpp_server"] = bench_server(cmd, f"http://127.0.0.1:{port}", a.tokens, a.reps,
                                              ban)
    r, s = res["cinfer_run"], res["cinfer_serve"]
    res["overhead"] = {
        "decode_pct": 100.0 * (1 - s["decode_tok_s"] / r["decode_tok_s"]),
        "ttft_minus_prefill_ms": 1000.0 * (s["ttft_s"] - r["prefill_s"]),
        "ttft_pct": 100.0 * (s["ttft_s"] / r["prefill_s"] - 1),
    }
    if "llamacpp_server" in res:
        l = res["llamacpp_server"]
        res["vs_llamacpp_server"] = {"decode_ratio": s["decode_tok_s"] / l["decode_tok_s"],
                                     "ttft_ratio": l["ttft_s"] / s["ttft_s"]}
    cpu = next((x.split(":", 1)[1].strip() for x in open("/proc/cpuinfo")
                if x.startswith("model name")), "?")
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True,
                            text=True, cwd=REPO).stdout.strip()
    res["machine"] = {"cpu": cpu, "cores": os.cpu_count(), "kernel": platform.release()}
    res["commit"] = commit
    print(json.dumps(res, indent=1))
    os.makedirs(os.path.join(REPO, "bench", "results"), exist_ok=True)
    with open(os.path.join(REPO, "bench", "results", "serve_overhead.json"), "w") as f:
        json.dump(res, f, indent=1)


if __name__ == "__main__":
    main()
