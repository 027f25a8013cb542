#!/usr/bin/env python3
"""run.py — the cost of `--isolate`: decode tok/s and TTFT through the supervisor vs a plain
server, side by side in one run, and the model pool's switch / switch-back times.

Two servers on the same model run at once (an idle server costs nothing); each rep sends the
same kind of request to one, then the other (alternating which goes first), so both see the
same machine load. Requests: /v1/completions, streaming, temperature 0, EOS banned with
logit_bias so each decodes exactly N tokens, a unique first line so no prompt cache shortens
the prefill. TTFT = request sent -> first token chunk; decode tok/s = (N - 1) / (last chunk -
first chunk). Ratios: tok_s_ratio = isolated / plain decode tok/s (medians), ttft_delta_ms =
isolated - plain TTFT (medians).

Pool: `--isolate --model-pool 1` with MODEL and SWITCH_MODEL; a chat turn on MODEL, then one
on SWITCH_MODEL (switch_s: the request's wall time, drain + spawn + load + answer), then the
first conversation again on MODEL (switch_back_s, and switch_back_cached_frac = cached_tokens
/ prompt_tokens of that request). The pool runs with `--ssd-cache` in a fresh temporary
directory: the drained engine demotes its prompt cache to it (POST /admin/drain), and the
switch back restores the conversation from the disk.

Writes bench/results/isolate.json and prints a summary. Not a test.
Usage: bench/isolate/run.py [--model M] [--switch-model M2] [--threads T] [--tokens N] [--reps R]
"""
import argparse
import json
import os
import socket
import statistics
import subprocess
import threading
import time
import urllib.request

REPO = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
PROMPT = ("// A small C library for dynamic arrays of integers.\n#include <stdlib.h>\n\n"
          "typedef struct {\n    int *data;\n    size_t len, cap;\n} vec;\n\n")
_K = [0]


def free_port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    p = s.getsockname()[1]
    s.close()
    return p


def wait_up(base, proc, timeout=300):
    t0 = time.time()
    while time.time() - t0 < timeout:
        if proc.poll() is not None:
            raise RuntimeError("server exited")
        try:
            with urllib.request.urlopen(base + "/health", timeout=2) as r:
                if r.status == 200:
                    return
        except OSError:
            time.sleep(0.1)
    raise RuntimeError("server not ready")


def stream_once(base, n, ban):
    _K[0] += 1
    body = json.dumps({"prompt": f"// run {_K[0]}\n" + PROMPT, "max_tokens": n,
                       "temperature": 0, "stream": True,
                       "logit_bias": {str(i): -100 for i in ban}}).encode()
    req = urllib.request.Request(base + "/v1/completions", data=body,
                                 headers={"Content-Type": "application/json"})
    t0 = time.perf_counter()
    times = []
    with urllib.request.urlopen(req, timeout=600) as r:
        for line in r:
            line = line.strip()
            if not line.startswith(b"data: ") or line == b"data: [DONE]":
                continue
            ch = json.loads(line[6:]).get("choices") or [{}]
            if ch[0].get("text"):
                times.append(time.perf_counter())
    ttft = times[0] - t0
    dec = (len(times) - 1) / (times[-1] - times[0]) if len(times) > 1 else 0.0
    return ttft, dec


def chat(base, model, msgs):
    body = json.dumps({"model": model, "messages": msgs, "max_tokens": 8,
                       "temperature": 0}).encode()
    req = urllib.request.Request(base + "/v1/chat/completions", data=body,
                                 headers={"Content-Type": "application/json"})
    t0 = time.perf_counter()
    with urllib.request.urlopen(req, timeout=600) as r:
        j = json.loads(r.read())
    u = j["usage"]
    return time.perf_counter() - t0, u["prompt_tokens"], \
        (u.get("prompt_tokens_details") or {}).get("cached_tokens", 0)


def model_id(p):
    b = os.path.basename(p.rstrip("/"))
    return b[:-5] if b.endswith(".gguf") else b


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", default=os.path.join(REPO, "models",
                                                    "qwen2.5-coder-0.5b-instruct-Q4_K_M.gguf"))
    ap.add_argument("--switch-model", default=os.path.join(REPO, "models",
                                                           "smollm2-135m-instruct-Q4_1.gguf"))
    ap.add_argument("--threads", type=int, default=os.cpu_count())
    ap.add_argument("--tokens", type=int, default=64)
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--bin", default=os.environ.get("CINFER_BIN",
                                                    os.path.join(REPO, "build", "cinfer")))
    a = ap.parse_args()
    ban = [151643, 151645] if "qwen" in a.model.lower() else [2]
    load_before = os.getloadavg()
    procs, bases = [], {}
    try:
        for name, extra in (("plain", []), ("isolated", ["--isolate"])):
            port = free_port()
            p = subprocess.Popen([a.bin, "serve", a.model, "--port", str(port), "-t",
                                  str(a.threads), "--no-open", *extra],
                                 stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
            procs.append(p)
            bases[name] = f"http://127.0.0.1:{port}"
            wait_up(bases[name], p)
        for b in bases.values():
            stream_once(b, 8, ban)  # warm-up
        res = {"plain": [], "isolated": []}
        for i in range(a.reps):
            order = ["plain", "isolated"] if i % 2 == 0 else ["isolated", "plain"]
            for name in order:
                res[name].append(stream_once(bases[name], a.tokens, ban))
        # /health of the supervisor while its engine is saturated (4 streams at once)
        lat, busy = [], threading.Event()

        def load():
            ths = [threading.Thread(target=stream_once, args=(bases["isolated"], a.tokens, ban))
                   for _ in range(4)]
            for t in ths:
                t.start()
            for t in ths:
                t.join()
            busy.set()
        threading.Thread(target=load, daemon=True).start()
        time.sleep(0.5)
        while not busy.is_set():
            t0 = time.perf_counter()
            urllib.request.urlopen(bases["isolated"] + "/health", timeout=10).read()
            lat.append((time.perf_counter() - t0) * 1000)
            time.sleep(0.02)
        lat.sort()
    finally:
        for p in procs:
            p.terminate()
            p.wait(timeout=60)
    med = {k: (statistics.median(r[0] for r in v), statistics.median(r[1] for r in v))
           for k, v in res.items()}

    # the pool: A, B, A in a pool of one
    port = free_port()
    base = f"http://127.0.0.1:{port}"
    import shutil
    import tempfile
    ssd = tempfile.mkdtemp(prefix="cinfer-bench-iso-ssd-")
    p = subprocess.Popen([a.bin, "serve", a.model, a.switch_model, "--isolate",
                          "--model-pool", "1", "--port", str(port), "-t", str(a.threads),
                          "--ssd-cache", ssd, "--no-open"],
                         stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        wait_up(base, p)
        ida, idb = model_id(a.model), model_id(a.switch_model)
        conv = [{"role": "system", "content": "You are a terse C expert. " * 8},
                {"role": "user", "content": "What does realloc return on failure?"}]
        chat(base, ida, conv)
        switch_s, _, _ = chat(base, idb, [{"role": "user", "content": "Hi"}])
        switch_back_s, n_prompt, n_cached = chat(base, ida, conv)
        with urllib.request.urlopen(base + "/engine", timeout=30) as r:
            demotions = json.loads(r.read())["demotions"]
    finally:
        p.terminate()
        p.wait(timeout=60)
        shutil.rmtree(ssd, ignore_errors=True)

    out = {
        "model": os.path.basename(a.model), "switch_model": os.path.basename(a.switch_model),
        "threads": a.threads, "tokens": a.tokens, "reps": a.reps,
        "load_avg_before": [round(x, 2) for x in load_before],
        "load_avg_after": [round(x, 2) for x in os.getloadavg()],
        "plain": {"ttft_s": med["plain"][0], "decode_tok_s": med["plain"][1],
                  "runs": res["plain"]},
        "isolated": {"ttft_s": med["isolated"][0], "decode_tok_s": med["isolated"][1],
                     "runs": res["isolated"]},
        "health_ms_under_load": {"n": len(lat),
                                 "p50": round(lat[len(lat) // 2], 2) if lat else None,
                                 "p99": round(lat[int(len(lat) * 0.99)], 2) if lat else None,
                                 "max": round(lat[-1], 2) if lat else None},
        "tok_s_ratio": round(med["isolated"][1] / med["plain"][1], 4),
        "ttft_delta_ms": round((med["isolated"][0] - med["plain"][0]) * 1000, 2),
        "switch_s": round(switch_s, 3), "switch_back_s": round(switch_back_s, 3),
        "switch_back_cached_frac": round(n_cached / n_prompt, 4) if n_prompt else 0.0,
        "switch_back_prompt_tokens": n_prompt, "switch_back_cached_tokens": n_cached,
        "switch_demoted_blocks": demotions,
    }
    os.makedirs(os.path.join(REPO, "bench", "results"), exist_ok=True)
    with open(os.path.join(REPO, "bench", "results", "isolate.json"), "w") as f:
        json.dump(out, f, indent=1)
    print(json.dumps({k: v for k, v in out.items() if k not in ("plain", "isolated")},
                     indent=1))
    print(f"plain    TTFT {med['plain'][0]*1000:.1f} ms  decode {med['plain'][1]:.1f} tok/s")
    print(f"isolated TTFT {med['isolated'][0]*1000:.1f} ms  decode {med['isolated'][1]:.1f} tok/s")


if __name__ == "__main__":
    main()
