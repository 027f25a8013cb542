#!/usr/bin/env python3
"""serve_sampled.py — serve_sampled_vs_greedy (issue 18): the aggregate tok/s of `cinfer serve
--backend cuda --batch 64` at 64 concurrent streams with each sampling configuration, divided
by the same with plain greedy requests, measured side by side in one run; then the same
server with CINFER_DEVICE_SAMPLE=0 (every sampled row fetched and sampled on the host: the
path before the op sample) for the before/after ratio, and a seeded request alone on both
servers, whose texts must be identical (the op draws the host sampler's ids).

Configurations (OpenAI /v1/completions fields): greedy {temperature 0}; temperature {} (no
sampling field: the server default T = 0.7, what every SDK sends); top_p {T 0.7, top_p 0.9};
logit_bias {T 0, 256 ids}; repetition_penalty {T 0.7, repetition_penalty 1.1}.

Usage: BIN=.gpubin python3 bench/gpu/serve_sampled.py MODEL_DIR [--streams 64] [--tokens 256]
       [--timeout 120]   (writes the tokenizer with synth_tokenizer.py when the dir has none)
Prints one JSON object.
"""
import argparse
import json
import os
import subprocess
import sys
import threading
import time
import urllib.request

BIN = os.environ.get("BIN", "build")
HERE = os.path.dirname(os.path.abspath(__file__))


def cfgs():
    nv = int(os.environ.get("VOCAB", "128000"))  # ids below it (a smoke test on a small model)
    bias = {str((128 + 397 * i) % nv): (-3.0 + 6.0 * (i % 13) / 12.0) for i in range(256)}
    return [("greedy", {"temperature": 0}),
            ("temperature", {}),
            ("logit_bias", {"temperature": 0, "logit_bias": bias}),
            ("repetition_penalty", {"temperature": 0.7, "repetition_penalty": 1.1}),
            ("top_p", {"temperature": 0.7, "top_p": 0.9})]


def start(model, port, env_extra, batch, log):
    env = dict(os.environ, **env_extra)
    p = subprocess.Popen([f"{BIN}/cinfer", "serve", model, "--backend",
                          os.environ.get("BACKEND", "cuda"), "--port",
                          str(port), "--batch", str(batch), "-c", "2048"],
                         stdout=open(log, "w"), stderr=subprocess.STDOUT, env=env)
    base = f"http://127.0.0.1:{port}"
    for _ in range(3000):
        try:
            urllib.request.urlopen(base + "/health", timeout=1).read()
            return p, base
        except OSError:
            if p.poll() is not None:
                raise SystemExit("server exited: " + open(log).read()[-3000:])
            time.sleep(0.1)
    raise SystemExit("server not ready")


def post(base, body, timeout):
    req = urllib.request.Request(base + "/v1/completions", data=json.dumps(body).encode(),
                                 headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=timeout) as r:
        return json.loads(r.read())


def stats(base):
    return json.loads(urllib.request.urlopen(base + "/stats", timeout=10).read())


def wave(base, fields, streams, tokens, timeout, tag):
    """streams concurrent requests; returns tok/s and details."""
    res = [None] * streams
    deadline = time.time() + timeout

    def one(i):
        body = dict(fields, model="m", prompt=f"{tag} stream {i} of the wave: once upon a time",
                    max_tokens=tokens, seed=1000 + i)
        try:
            j = post(base, body, max(1.0, deadline - time.time()))
            res[i] = (j["usage"]["completion_tokens"], time.time())
        except Exception as e:  # a timeout counts its stream as unfinished
            res[i] = (0, None, str(e)[:100])

    s0 = stats(base)
    t0 = time.time()
    th = [threading.Thread(target=one, args=(i,)) for i in range(streams)]
    for t in th:
        t.start()
    for t in th:
        t.join()
    t1 = max([r[1] for r in res if r[1]] or [time.time()])
    s1 = stats(base)
    done = sum(1 for r in res if r[1])
    toks = sum(r[0] for r in res)
    gen = s1["tokens"]["generated"] - s0["tokens"]["generated"]
    ov = s1["batch"]["overlapped_steps"] - s0["batch"]["overlapped_steps"]
    st = s1["batch"]["steps"] - s0["batch"]["steps"]
    return {"tok_s": round(toks / (t1 - t0), 1), "tokens": toks, "wall_s": round(t1 - t0, 3),
            "finished": done, "engine_generated": gen, "steps": st, "overlapped_steps": ov,
            "errors": [r[2] for r in res if len(r) > 2][:3]}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("model")
    ap.add_argument("--streams", type=int, default=64)
    ap.add_argument("--tokens", type=int, default=256)
    ap.add_argument("--timeout", type=float, default=120)
    ap.add_argument("--skip-host", action="store_true")
    a = ap.parse_args()
    if os.path.isdir(a.model) and not os.path.exists(os.path.join(a.model, "tokenizer.json")):
        subprocess.check_call([sys.executable, os.path.join(HERE, "synth_tokenizer.py"), a.model])
    out = {"model": a.model, "streams": a.streams, "tokens": a.tokens}
    texts = {}
    for mode, env in (("device", {}), ("host", {"CINFER_DEVICE_SAMPLE": "0"})):
        if mode == "host" and a.skip_host:
            break
        p, base = start(a.model, 18300 + len(texts), env, a.streams, f"/tmp/serve-{mode}.log")
        try:
            wave(base, {"temperature": 0}, a.streams, 16, a.timeout, "warm")  # graphs, allocs
            wave(base, {}, a.streams, 16, a.timeout, "warm2")
            r = {}
            texts[mode] = {}
            for name, f in cfgs():  # a seeded request alone: the texts must match
                j = post(base, dict(f, model="m", prompt="a seeded request alone", max_tokens=48,
                                    seed=7), a.timeout)
                texts[mode][name] = j["choices"][0]["text"]
            order = cfgs()[:4] + [("greedy_again", {"temperature": 0})] + cfgs()[4:]
            for name, f in order:  # top_p last: a wave cut at the timeout leaves work behind
                if mode == "host" and name not in ("greedy", "temperature", "logit_bias"):
                    continue
                r[name] = wave(base, f, a.streams, a.tokens, a.timeout, name)
                print(mode, name, json.dumps(r[name]), file=sys.stderr, flush=True)
            out[mode] = r
        finally:
            p.terminate()
            p.wait(timeout=60)
        tail = open(f"/tmp/serve-{mode}.log").read().splitlines()[-3:]
        out[mode + "_log_tail"] = tail
    d = out["device"]
    g = d["greedy"]["tok_s"]
    out["serve_sampled_vs_greedy"] = {k: round(d[k]["tok_s"] / g, 3)
                                      for k in ("temperature", "top_p", "logit_bias",
                                                "repetition_penalty")}
    if "host" in out:
        h = out["host"]
        out["host_sampled_vs_greedy"] = {k: round(h[k]["tok_s"] / h["greedy"]["tok_s"], 3)
                                         for k in ("temperature", "logit_bias")}
        out["seeded_text_same"] = {k: texts["device"][k] == texts["host"][k]
                                   for k in texts["device"]}
        out["seeded_text_example"] = {k: texts["device"][k][:80] for k in ("temperature",)}
    print(json.dumps(out, indent=1))


if __name__ == "__main__":
    main()
