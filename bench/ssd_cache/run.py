#!/usr/bin/env python3
"""run.py — the SSD cold tier (--ssd-cache): time to first token after a restart, restored
from disk vs re-prefilled cold, and decode speed with --ssd-cache on vs off while a
write-behind snapshot is pending, side by side in one run. Not a test.

TTFT: for each prefix size a fresh server with an empty cache directory answers the prefix
(a raw /v1/completions prompt, streaming, temperature 0) — the cold time — and stops with
SIGTERM (which makes the cache durable); a second fresh server on the same directory answers
the same prompt — the restore time. Both are the first request after a start, so both pay
the same lazily mmap'd weights. TTFT = request sent -> first token chunk.

Decode: a fresh server answers a 2k prefix (--decode-prefix), then 1.2 s later (the write-behind snapshot is
queued and the writer is writing) a short prompt decodes N tokens (EOS banned);
decode tok/s = (N - 1) / (last chunk - first chunk). The same sequence on a server without
--ssd-cache; alternated, best of R each. decode_overhead_frac = 1 - on / off.

Writes bench/results/ssd_cache.json and prints a table; `uptime` before and after.
Usage: bench/ssd_cache/run.py [--model M] [--threads T] [--sizes 2000,8000,13700]
       [--tokens N] [--reps R]
"""
import argparse
import json
import os
import shutil
import signal
import socket
import subprocess
import tempfile
import time
import urllib.request

REPO = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
WORDS = ("the quick brown fox jumps over a lazy dog while seven wizards quietly pack boxes of "
         "liquor and jugs near old stone bridges under grey autumn skies").split()


def free_port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    p = s.getsockname()[1]
    s.close()
    return p


class Srv:
    def __init__(self, binp, model, threads, *args, ctx=16384, extra=()):
        self.port = free_port()
        self.base = f"http://127.0.0.1:{self.port}"
        self.log = tempfile.TemporaryFile()
        self.p = subprocess.Popen([binp, "serve", model, "--port", str(self.port), "-t",
                                   str(threads), "--ctx", str(ctx), *extra, *args],
                                  stdout=self.log, stderr=subprocess.STDOUT)
        t0 = time.time()
        while time.time() - t0 < 300:
            if self.p.poll() is not None:
                self.log.seek(0)
                raise RuntimeError("server exited: " + self.log.read().decode())
            try:
                urllib.request.urlopen(self.base + "/health", timeout=1).read()
                return
            except OSError:
                time.sleep(0.05)
        raise RuntimeError("server not ready")

    def stop(self):
        self.p.send_signal(signal.SIGTERM)
        self.p.wait(timeout=300)

    def stats(self):
        return json.loads(urllib.request.urlopen(self.base + "/stats").read())


def stream(base, prompt, n, ban=()):
    body = json.dumps({"prompt": prompt, "max_tokens": n, "temperature": 0, "stream": True,
                       "stream_options": {"include_usage": True},
                       "logit_bias": {str(i): -100 for i in ban}}).encode()
    req = urllib.request.Request(base + "/v1/completions", data=body,
                                 headers={"Content-Type": "application/json"})
    t0 = time.perf_counter()
    times, usage = [], None
    with urllib.request.urlopen(req, timeout=1800) as r:
        for line in r:
            line = line.strip()
            if not line.startswith(b"data: ") or line == b"data: [DONE]":
                continue
            j = json.loads(line[6:])
            if j.get("usage"):
                usage = j["usage"]
            ch = j.get("choices") or [{}]
            if ch and ch[0].get("text"):
                times.append(time.perf_counter())
    ttft = times[0] - t0
    dec = (len(times) - 1) / (times[-1] - times[0]) if len(times) > 1 else 0.0
    return ttft, dec, usage


TOK_PER_WORD = 1.04  # Qwen2.5's tokenizer on these words (--tok-per-word for others)


def prefix(n_words, seed):
    # ~TOK_PER_WORD tokens a word; the real count is reported
    return f"[{seed}] " + " ".join(WORDS[(i * 7 + seed) % len(WORDS)] for i in range(n_words))


def uptime():
    return subprocess.run(["uptime"], capture_output=True, text=True).stdout.strip()


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", default=os.path.join(REPO, "models",
                                                    "qwen2.5-coder-0.5b-instruct-Q4_K_M.gguf"))
    ap.add_argument("--threads", type=int, default=os.cpu_count())
    ap.add_argument("--sizes", default="2000,8000,13700")
    ap.add_argument("--tokens", type=int, default=96)
    ap.add_argument("--reps", type=int, default=2)
    ap.add_argument("--decode-prefix", type=int, default=2000,
                    help="tokens of the prefix whose snapshot is pending during the decode")
    ap.add_argument("--bin", default=os.environ.get("CINFER_BIN",
                                                    os.path.join(REPO, "build", "cinfer")))
    ap.add_argument("--out", default=os.path.join(REPO, "bench", "results", "ssd_cache.json"))
    ap.add_argument("--backend", default=None, help="cuda: the GPU half (writes only 'gpu')")
    ap.add_argument("--ctx", type=int, default=16384)
    ap.add_argument("--no-decode", action="store_true")
    ap.add_argument("--tok-per-word", type=float, default=1.04,
                    help="tokens a prompt word takes (the GPU run's byte-level tokenizer: ~6.2)")
    ap.add_argument("--only-gpu", action="store_true",
                    help="write {'gpu': {...}} (the GPU half) to --out")
    a = ap.parse_args()
    global TOK_PER_WORD
    TOK_PER_WORD = a.tok_per_word
    ban = [151643, 151645] if "qwen" in a.model.lower() else [2]
    res = {"model": os.path.basename(a.model), "threads": a.threads, "uptime_before": uptime(),
           "prefixes": []}
    for k, target in enumerate(int(x) for x in a.sizes.split(",")):
        d = tempfile.mkdtemp(prefix="cinfer-ssd-bench-")
        try:
            # calibrate the words to the token target with the server's own count
            p = prefix(int(target / TOK_PER_WORD), 100 + k)
            ex = ["--backend", a.backend] if a.backend else []
            s = Srv(a.bin, a.model, a.threads, "--ssd-cache", d, ctx=a.ctx, extra=ex)
            if a.backend:  # a device's first request pays its one-time set-up: not timed
                stream(s.base, f"[w{k}] warm up", 1)
            cold, _, u = stream(s.base, p, 1)
            s.stop()
            s = Srv(a.bin, a.model, a.threads, "--ssd-cache", d, ctx=a.ctx, extra=ex)
            if a.backend:
                stream(s.base, f"[v{k}] warm up", 1)
            warm, _, u2 = stream(s.base, p, 1)
            st = s.stats()["ssd_cache"]
            s.stop()
            row = {"tokens": u["prompt_tokens"], "cold_ttft_s": round(cold, 4),
                   "restore_ttft_s": round(warm, 4), "speedup": round(cold / warm, 1),
                   "cached_tokens": u2["prompt_tokens_details"]["cached_tokens"],
                   "restored_tokens": st["restored_tokens"],
                   "cold_prefill_tok_s": round(u["prompt_tokens"] / cold, 1),
                   "restore_tok_s": round(u2["prompt_tokens_details"]["cached_tokens"] / warm, 1),
                   "load": uptime()}
            print(json.dumps(row), flush=True)
            res["prefixes"].append(row)
            if a.only_gpu:  # each size as it lands (a device call may run out of time)
                os.makedirs(os.path.dirname(a.out), exist_ok=True)
                with open(a.out, "w") as f:
                    json.dump({"gpu": res}, f, indent=1)
        finally:
            shutil.rmtree(d, ignore_errors=True)
    if a.no_decode:
        res["uptime_after"] = uptime()
        os.makedirs(os.path.dirname(a.out), exist_ok=True)
        with open(a.out, "w") as f:
            json.dump({"gpu": res} if a.only_gpu else res, f, indent=1)
        print(json.dumps(res))
        return
    # decode speed with a snapshot pending vs no SSD tier
    big = prefix(int(a.decode_prefix / TOK_PER_WORD), 999)
    runs = {"on": [], "off": []}
    for r in range(a.reps):
        for mode in ("off", "on"):
            d = tempfile.mkdtemp(prefix="cinfer-ssd-bench-")
            try:
                args = ["--ssd-cache", d] if mode == "on" else []
                s = Srv(a.bin, a.model, a.threads, *args)
                stream(s.base, big + f" {r}", 1)
                time.sleep(1.2)  # the debounced snapshot starts; the writer is writing
                pend = s.stats().get("ssd_cache", {}).get("pending_spills")
                _, dec, _ = stream(s.base, f"Run {r}: write a story about a fox.", a.tokens, ban)
                after = s.stats().get("ssd_cache", {}).get("pending_spills")
                s.stop()
                runs[mode].append({"decode_tok_s": round(dec, 2), "pending_before": pend,
                                   "pending_after": after, "load": uptime()})
                print(mode, json.dumps(runs[mode][-1]), flush=True)
            finally:
                shutil.rmtree(d, ignore_errors=True)
    on = max(x["decode_tok_s"] for x in runs["on"])
    off = max(x["decode_tok_s"] for x in runs["off"])
    res["decode"] = {"tokens": a.tokens, "prefix_tokens": a.decode_prefix, "on_tok_s": on, "off_tok_s": off, "runs": runs}
    res["decode_overhead_frac"] = round(max(0.0, 1 - on / off), 4)
    res["uptime_after"] = uptime()
    res.setdefault("gpu", None)
    os.makedirs(os.path.dirname(a.out), exist_ok=True)
    old = {}
    if os.path.exists(a.out):
        with open(a.out) as f:
            old = json.load(f)
    if old.get("gpu"):
        res["gpu"] = old["gpu"]  # measured separately on the GPU machine
    with open(a.out, "w") as f:
        json.dump(res, f, indent=1)
    print("\n| prefix tokens | cold TTFT s | restore TTFT s | speedup |")
    print("| --- | --- | --- | --- |")
    for row in res["prefixes"]:
        print(f"| {row['tokens']} | {row['cold_ttft_s']} | {row['restore_ttft_s']} | "
              f"{row['speedup']}x |")
    print(f"decode tok/s with a snapshot pending: on {on} / off {off} "
          f"(overhead {res['decode_overhead_frac']})")


if __name__ == "__main__":
    main()
