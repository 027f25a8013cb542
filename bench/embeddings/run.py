#!/usr/bin/env python3
"""bench/embeddings/run.py — embeddings/s and tokens/s of `cinfer serve` vs sentence-transformers.

Same model directory (all-MiniLM-L6-v2 by default), same CPU thread count, same sentences,
measured side by side in one run, alternating engine by engine and repetition by repetition:

  b1   one sentence per call: cinfer = one POST /v1/embeddings per sentence over a kept-alive
       HTTP connection (so the HTTP + JSON round trip is in cinfer's time), sentence-
       transformers = model.encode([s]) per sentence (in process, no HTTP);
  b32  32 sentences per call: cinfer = one POST with 32 inputs, sentence-transformers =
       model.encode(batch, batch_size=32).

Best of --reps per cell. Tokens are the tokenizer's (special tokens included, as both count
them). Writes bench/results/embeddings.json as {"cpu": {"ratio_b1", "ratio_b32", ...}}
(ratio = cinfer embeddings/s ÷ sentence-transformers embeddings/s) and prints a table row.
The 1-minute load average is recorded before and after each engine's cells.

Usage: PY=/path/to/python-with-torch bench/embeddings/run.py [--threads 2] [--reps 3]
       [--model models/all-MiniLM-L6-v2] [--bin build/cinfer] [--n1 64] [--n32 256]
Needs: torch + sentence-transformers (pip) in the interpreter that runs it; not a test.
"""
import argparse
import http.client
import json
import os
import re
import socket
import subprocess
import sys
import time

# torch's OpenMP barrier spins by default; on a shared, loaded machine PASSIVE is the fairer
# peer (as for llama.cpp in bench/cpu_vs_llamacpp). OMP_WAIT_POLICY=ACTIVE in the environment
# keeps torch's default.
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
REPO = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))


def load1():
    return float(open("/proc/loadavg").read().split()[0])


def sentences(n):
    text = open(os.path.join(REPO, "tests", "data", "text", "lighthouse.txt")).read()
    parts = [p.strip() for p in re.split(r"(?<=[.!?])\s+", text) if len(p.strip()) > 20]
    out = []
    while len(out) < n:
        out.extend(parts)
    return [" ".join(s.split()) for s in out[:n]]


def free_port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    p = s.getsockname()[1]
    s.close()
    return p


class Cinfer:
    def __init__(self, binary, model, threads):
        self.port = free_port()
        self.log = open(f"/tmp/cinfer-bench-embed-{self.port}.log", "w+")
        self.proc = subprocess.Popen([binary, "serve", model, "--port", str(self.port), "-t",
                                      str(threads), "--no-open"], stdout=self.log,
                                     stderr=subprocess.STDOUT)
        t0 = time.time()
        while time.time() - t0 < 120:
            try:
                c = http.client.HTTPConnection("127.0.0.1", self.port, timeout=2)
                c.request("GET", "/health")
                if c.getresponse().status == 200:
                    break
            except OSError:
                time.sleep(0.1)
        else:
            raise RuntimeError("cinfer did not start")
        self.conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=600)

    def fresh(self):
        """A new connection (the server closes one idle for 30 s: the peer's cells are long)."""
        self.conn.close()
        self.conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=600)
        self.conn.connect()

    def embed(self, inputs):
        body = json.dumps({"model": "m", "input": inputs})
        self.conn.request("POST", "/v1/embeddings", body, {"Content-Type": "application/json"})
        r = self.conn.getresponse()
        data = r.read()
        assert r.status == 200, data[:300]
        j = json.loads(data)
        return j["usage"]["prompt_tokens"]

    def stop(self):
        self.proc.terminate()
        self.proc.wait(timeout=60)


def timed(fn, calls):
    t0 = time.perf_counter()
    toks = 0
    for c in calls:
        toks += fn(c)
    return time.perf_counter() - t0, toks


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--model", default=os.path.join(REPO, "models", "all-MiniLM-L6-v2"))
    ap.add_argument("--bin", default=os.path.join(REPO, "build", "cinfer"))
    ap.add_argument("--n1", type=int, default=64)
    ap.add_argument("--n32", type=int, default=256)
    ap.add_argument("--out", default=os.path.join(REPO, "bench", "results", "embeddings.json"))
    a = ap.parse_args()

    import torch
    import sentence_transformers
    from sentence_transformers import SentenceTransformer
    torch.set_num_threads(a.threads)
    torch.set_num_interop_threads(1)
    st = SentenceTransformer(a.model, device="cpu")
    tok = st.tokenizer

    def st_embed(batch):
        st.encode(batch, batch_size=32, convert_to_numpy=True)
        return sum(len(tok(s)["input_ids"]) for s in batch)

    s1 = sentences(a.n1)
    s32 = sentences(a.n32)
    calls = {"b1": [[s] for s in s1], "b32": [s32[i:i + 32] for i in range(0, len(s32), 32)]}
    srv = Cinfer(a.bin, a.model, a.threads)
    engines = {"cinfer": srv.embed, "sentence_transformers": st_embed}
    for name, fn in engines.items():  # warm-up
        fn(calls["b32"][0])
        fn(calls["b1"][0])
    res = {e: {b: {"best_s": None} for b in calls} for e in engines}
    loads = {e: [] for e in engines}
    for rep in range(a.reps):
        for b in calls:
            for e, fn in engines.items():
                if e == "cinfer":
                    srv.fresh()
                l0 = load1()
                dt, toks = timed(fn, calls[b])
                loads[e].append([l0, load1()])
                cell = res[e][b]
                if cell["best_s"] is None or dt < cell["best_s"]:
                    n = sum(len(c) for c in calls[b])
                    cell.update(best_s=dt, embeddings=n, tokens=toks,
                                embeddings_per_s=n / dt, tokens_per_s=toks / dt)
    srv.stop()
    commit = subprocess.run(["git", "-C", REPO, "rev-parse", "--short", "HEAD"],
                            capture_output=True, text=True).stdout.strip()
    out = {"cpu": {
        "ratio_b1": res["cinfer"]["b1"]["embeddings_per_s"] /
        res["sentence_transformers"]["b1"]["embeddings_per_s"],
        "ratio_b32": res["cinfer"]["b32"]["embeddings_per_s"] /
        res["sentence_transformers"]["b32"]["embeddings_per_s"],
        "model": os.path.basename(os.path.normpath(a.model)), "threads": a.threads,
        "reps": a.reps, "cinfer": res["cinfer"],
        "sentence_transformers": res["sentence_transformers"],
        "load1_before_after": loads, "cinfer_commit": commit,
        "peer": {"sentence_transformers": sentence_transformers.__version__,
                 "torch": torch.__version__,
                 "OMP_WAIT_POLICY": os.environ.get("OMP_WAIT_POLICY")},
        "note": "cinfer through HTTP (kept-alive connection, JSON floats), "
                "sentence-transformers in process"}}
    os.makedirs(os.path.dirname(a.out), exist_ok=True)
    with open(a.out, "w") as f:
        json.dump(out, f, indent=1)
    c, p = res["cinfer"], res["sentence_transformers"]
    print(f"| {out['cpu']['model']} | {a.threads} | "
          f"{c['b1']['embeddings_per_s']:.1f} / {p['b1']['embeddings_per_s']:.1f} | "
          f"**{out['cpu']['ratio_b1']:.2f}** | "
          f"{c['b32']['embeddings_per_s']:.1f} / {p['b32']['embeddings_per_s']:.1f} | "
          f"**{out['cpu']['ratio_b32']:.2f}** | "
          f"{c['b32']['tokens_per_s']:.0f} / {p['b32']['tokens_per_s']:.0f} |")
    print("load1 (before, after) per cell:", json.dumps(loads))


if __name__ == "__main__":
    sys.exit(main())
