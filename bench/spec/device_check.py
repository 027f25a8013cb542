#!/usr/bin/env python3
"""device_check.py — speculative decoding's lossless contract through `cinfer serve` on a GPU
(not a test: the device call of device_spec.sh runs it; see bench/gpu/README.md).

Greedy outputs (text, finish reason, the emitted tokens' logprobs) with --draft-kind ngram,
suffix and two-model (--draft-model DRAFT) against a server without speculation, on the
same backend: each prompt alone (batch 1: the reference), then the 8 prompts at once
(--batch 8) — those are compared with the alone reference, and so is the plain server's own
concurrent run (on CUDA a row's bits may depend on the step's row count; the plain server's
concurrent agreement is the floor speculation is held to). Prints one JSON object.

Usage: BIN=.gpubin python3 bench/spec/device_check.py TARGET DRAFT [--backend cuda]
       [--tokens 160] [--kinds ngram,suffix,two-model] [--server-args '-c 4096']
"""
import argparse
import json
import os
import socket
import subprocess
import threading
import time
import urllib.request

BIN = os.environ.get("BIN", "build")
NO_LP = False  # --no-logprobs

PROMPTS = [
    "the cat sat on the mat. the cat sat on the mat. the cat sat on",
    "int main(void) { int x = 0; for (int i = 0; i < 10; i++) x += i; return x; }\n"
    "int main(void) {",
    "alpha beta gamma delta alpha beta gamma delta alpha beta",
    "Once upon a time",
    "1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12,",
    "def f(x):\n    return x * 2\n\ndef g(x):\n    return f(x) + 1\n\ndef h(x):\n",
    "hello world",
    "a b c d e f g h i j k l m n o p q r s t u v w x y z a b c d e f",
]


def free_port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    p = s.getsockname()[1]
    s.close()
    return p


class Server:
    def __init__(self, model, args, batch, extra):
        self.port = free_port()
        self.base = f"http://127.0.0.1:{self.port}"
        cmd = [f"{BIN}/cinfer", "serve", model, "--port", str(self.port), "--backend",
               args.backend, "--batch", str(batch), "--no-open"] + args.server_args.split() + extra
        self.log = f"/tmp/spec-check-{self.port}.log"
        self.p = subprocess.Popen(cmd, stdout=open(self.log, "w"), stderr=subprocess.STDOUT)
        for _ in range(6000):
            try:
                urllib.request.urlopen(self.base + "/health", timeout=1).read()
                return
            except OSError:
                if self.p.poll() is not None:
                    raise SystemExit("server exited: " + open(self.log).read()[-3000:])
                time.sleep(0.1)
        raise SystemExit("server not ready")

    def gen(self, prompt, n):
        body = {"prompt": prompt, "max_tokens": n, "temperature": 0}
        if not NO_LP:  # (a request with logprobs never runs in a decode burst)
            body["logprobs"] = 1
        req = urllib.request.Request(self.base + "/v1/completions", data=json.dumps(body).encode(),
                                     headers={"Content-Type": "application/json"})
        j = json.loads(urllib.request.urlopen(req, timeout=600).read())
        c = j["choices"][0]
        lp = c.get("logprobs") or {}
        return {"text": c["text"], "finish": c["finish_reason"],
                "tokens": lp.get("tokens"), "lp": lp.get("token_logprobs"),
                "usage": j["usage"]}

    def stats(self):
        return json.loads(urllib.request.urlopen(self.base + "/stats", timeout=10).read())

    def stop(self):
        self.p.terminate()
        try:
            self.p.wait(timeout=60)
        except subprocess.TimeoutExpired:
            self.p.kill()


def run(model, args, extra):
    """Alone (batch 1), then all at once (batch 8): lists of results."""
    s = Server(model, args, 1, extra)
    try:
        alone = [s.gen(p, args.tokens) for p in PROMPTS]
        full = s.stats()
        st1 = dict(full.get("speculation", {}),
                   overlapped_steps=full.get("batch", {}).get("overlapped_steps"))
    finally:
        s.stop()
    s = Server(model, args, 8, extra)
    try:
        conc = [None] * len(PROMPTS)

        def one(i):
            conc[i] = s.gen(PROMPTS[i], args.tokens)

        th = [threading.Thread(target=one, args=(i,)) for i in range(len(PROMPTS))]
        for t in th:
            t.start()
        for t in th:
            t.join()
        full = s.stats()
        st8 = dict(full.get("speculation", {}),
                   overlapped_steps=full.get("batch", {}).get("overlapped_steps"))
    finally:
        s.stop()
    return alone, conc, st1, st8


def same(a, b):
    return a["text"] == b["text"] and a["finish"] == b["finish"] and a["tokens"] == b["tokens"]


def lp_diff(a, b):
    if not a["lp"] or not b["lp"] or len(a["lp"]) != len(b["lp"]):
        return None
    return max((abs(x - y) for x, y in zip(a["lp"], b["lp"])), default=0.0)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("target")
    ap.add_argument("draft")
    ap.add_argument("--backend", default="cuda")
    ap.add_argument("--tokens", type=int, default=160)
    ap.add_argument("--kinds", default="ngram,suffix,two-model")
    ap.add_argument("--server-args", default="-c 4096")
    ap.add_argument("--no-logprobs", action="store_true",
                    help="greedy requests without logprobs (text and finish compared), so that "
                    "decode bursts run")
    args = ap.parse_args()
    global NO_LP
    NO_LP = args.no_logprobs
    out = {"target": args.target, "draft": args.draft, "backend": args.backend,
           "tokens": args.tokens, "prompts": len(PROMPTS)}
    ref, ref_conc, _, _ = run(args.target, args, [])
    out["plain_concurrent_same_as_alone"] = sum(same(a, b) for a, b in zip(ref, ref_conc))
    for kind in args.kinds.split(","):
        extra = ["--draft-model", args.draft] if kind == "two-model" else ["--draft-kind", kind]
        alone, conc, st1, st8 = run(args.target, args, extra)
        r = {"alone_same": sum(same(a, b) for a, b in zip(ref, alone)),
             "concurrent_same_as_alone_ref": sum(same(a, b) for a, b in zip(ref, conc)),
             "concurrent_same_as_plain_concurrent": sum(same(a, b)
                                                         for a, b in zip(ref_conc, conc)),
             "alone_max_logprob_diff": max((d for d in (lp_diff(a, b)
                                                        for a, b in zip(ref, alone))
                                            if d is not None), default=None),
             "drafted_alone": st1.get("drafted"), "accepted_alone": st1.get("accepted"),
             "drafted_concurrent": st8.get("drafted"), "accepted_concurrent": st8.get("accepted"),
             "step_cost": st1.get("step_cost"), "draft_cost": st1.get("draft_cost"),
             "overlapped_alone": st1.get("overlapped_steps"),
             "overlapped_concurrent": st8.get("overlapped_steps")}
        r["first_diff_alone"] = next((i for i, (a, b) in enumerate(zip(ref, alone))
                                      if not same(a, b)), None)
        out[kind] = r
        print(json.dumps({kind: r}), flush=True)
    print(json.dumps(out))


if __name__ == "__main__":
    main()
