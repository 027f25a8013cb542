#!/usr/bin/env python3
"""cache_invariance.py — does a prefix-cache hit give the cold run's output on this backend?
Two servers each answer the same greedy 240-token-prompt request twice (the second time 224
prompt tokens come from the prefix cache); prints whether the two cold runs agree, whether
the hit equals the cold run, and the first differing token. Env switches (e.g.
CINFER_CUDA_PRECISE=1, CINFER_ATTN_TC=0) pass to the servers.
Usage: BIN=dir python3 bench/gpu/cache_invariance.py MODEL_DIR   (CUDA; a random l1b works)
"""
import json, os, subprocess, sys, time, urllib.request
B = os.environ.get("BIN", "build"); M = sys.argv[1]
def start(port, extra=()):
    p = subprocess.Popen([f"{B}/cinfer", "serve", M, "--backend", "cuda", "--port", str(port), "-c", "4096", *extra], env=dict(os.environ),
                         stdout=open(f"/tmp/cc{port}.log", "w"), stderr=subprocess.STDOUT)
    for _ in range(600):
        try:
            urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=1); return p
        except OSError:
            time.sleep(0.1)
def post(port, body):
    r = urllib.request.Request(f"http://127.0.0.1:{port}/v1/completions", data=json.dumps(body).encode(), headers={"Content-Type": "application/json"})
    return json.loads(urllib.request.urlopen(r, timeout=120).read())
ids = [(17 * i) % 1000 + 100 for i in range(60)] * 4
g = {"prompt": ids, "max_tokens": 128, "temperature": 0, "logprobs": 1}
res = {}
for env0, name in ((None, "a"), (None, "b")):
    p = start(18300 + len(res))
    cold = post(18300 + len(res), g); hit = post(18300 + len(res), g)
    res[name] = (cold, hit); p.terminate(); p.wait()
ca, ha = res["a"]; cb, hb = res["b"]
def first_diff(x, y):
    tx = x["choices"][0]["logprobs"]["tokens"]; ty = y["choices"][0]["logprobs"]["tokens"]
    for i, (u, v) in enumerate(zip(tx, ty)):
        if u != v: return i
    return None
print(json.dumps({"cold_a_eq_cold_b": ca["choices"][0]["text"] == cb["choices"][0]["text"],
                  "hit_eq_cold": ha["choices"][0]["text"] == ca["choices"][0]["text"],
                  "hit_cached": ha["usage"]["prompt_tokens_details"]["cached_tokens"],
                  "first_diff_token": first_diff(ca, ha),
                  "lp_cold_0_5": ca["choices"][0]["logprobs"]["token_logprobs"][:5],
                  "lp_hit_0_5": ha["choices"][0]["logprobs"]["token_logprobs"][:5]}))
