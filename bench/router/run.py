#!/usr/bin/env python3
"""run.py — the 4-agent replay through a cache-aware router: 2 cinfer replicas behind
`sglang-router --policy cache_aware` vs 1 replica answered directly, one run, side by side.

Each of 4 agents holds a --turns-turn chat (its own ~300-token system prompt, a user turn,
the assistant's reply appended, the next turn), the agents running concurrently, streaming
/v1/chat/completions at temperature 0. Reported for each setup: cache_hit_frac = prompt
tokens served from the prefix cache (usage.prompt_tokens_details.cached_tokens) / prompt
tokens, and TTFT p50 per turn (request sent -> first content delta). Target: cache_hit_frac
through the router >= 0.9x the direct one (affinity keeps each agent on one replica's cache).

Writes bench/results/router.json ({"replicas": 2, "cache_hit_frac", "ttft_p50_s",
"direct": {...}}); bench/RESULTS.md quotes it. Not a test. Each replica gets --threads.
Usage: bench/router/run.py [--model PATH] [--turns N] [--threads T] [--tokens N]
"""
import argparse
import json
import os
import shutil
import signal
import socket
import statistics
import subprocess
import threading
import time
import urllib.request

REPO = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
TEAMS = ["red", "green", "blue", "gold"]


def free_port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    p = s.getsockname()[1]
    s.close()
    return p


def wait_http(url, body=None, timeout=300):
    t0 = time.time()
    while time.time() - t0 < timeout:
        try:
            req = urllib.request.Request(url, data=json.dumps(body).encode() if body else None,
                                         headers={"Content-Type": "application/json"})
            with urllib.request.urlopen(req, timeout=30) as r:
                if r.status == 200:
                    return
        except OSError:
            pass
        time.sleep(0.2)
    raise RuntimeError("not ready: " + url)


def start_replica(model, threads, name, extra):
    port = free_port()
    log = open(f"/tmp/cinfer-bench-router-{port}.log", "w")
    p = subprocess.Popen([os.path.join(REPO, "build", "cinfer"), "serve", model, "--port",
                          str(port), "-t", str(threads), "--served-model-name", name, *extra],
                         stdout=log, stderr=subprocess.STDOUT)
    base = f"http://127.0.0.1:{port}"
    wait_http(base + "/health")
    return p, base


def start_router(bases):
    port = free_port()
    log = open(f"/tmp/cinfer-bench-router-{port}.log", "w")
    p = subprocess.Popen([shutil.which("sglang-router"), "launch", "--host", "127.0.0.1",
                          "--port", str(port), "--worker-urls", *bases, "--policy",
                          "cache_aware", "--prometheus-host", "127.0.0.1", "--prometheus-port",
                          str(free_port()), "--log-level", "warn"],
                         stdout=log, stderr=subprocess.STDOUT)
    base = f"http://127.0.0.1:{port}"
    wait_http(base + "/v1/completions", {"model": "m", "prompt": "Hi", "max_tokens": 1})
    return p, base


def stream_turn(base, messages, max_tokens):
    body = {"model": "m", "messages": messages, "max_tokens": max_tokens, "temperature": 0,
            "stream": True, "stream_options": {"include_usage": True}}
    req = urllib.request.Request(base + "/v1/chat/completions", data=json.dumps(body).encode(),
                                 headers={"Content-Type": "application/json"})
    t0 = time.time()
    ttft, text, usage, model = None, [], None, None
    with urllib.request.urlopen(req, timeout=600) as r:
        for raw in r:
            line = raw.decode().strip()
            if not line.startswith("data: ") or line == "data: [DONE]":
                continue
            j = json.loads(line[6:])
            model = j.get("model", model)
            if j.get("usage"):
                usage = j["usage"]
            for ch in j.get("choices") or []:
                d = ch.get("delta", {}).get("content")
                if d:
                    if ttft is None:
                        ttft = time.time() - t0
                    text.append(d)
    return ttft if ttft is not None else time.time() - t0, "".join(text), usage, model


def agent(base, a, turns, max_tokens, out):
    sysmsg = (f"You are agent {a} of the {TEAMS[a]} team. " +
              "You answer programming questions about C with short, exact answers. " * 20)
    messages = [{"role": "system", "content": sysmsg}]
    for t in range(turns):
        messages.append({"role": "user",
                         "content": f"Question {t} from the {TEAMS[a]} team: name one use of "
                                    f"pointer number {t * 7 + a}."})
        ttft, text, usage, model = stream_turn(base, messages, max_tokens)
        out.append({"agent": a, "turn": t, "ttft_s": ttft, "model": model,
                    "prompt_tokens": usage["prompt_tokens"],
                    "cached_tokens": usage["prompt_tokens_details"]["cached_tokens"]})
        messages.append({"role": "assistant", "content": text})


def replay(base, turns, max_tokens):
    out = []
    ths = [threading.Thread(target=agent, args=(base, a, turns, max_tokens, out))
           for a in range(4)]
    for t in ths:
        t.start()
    for t in ths:
        t.join()
    prompt = sum(r["prompt_tokens"] for r in out)
    cached = sum(r["cached_tokens"] for r in out)
    per_agent_models = {a: sorted({r["model"] for r in out if r["agent"] == a})
                        for a in range(4)}
    return {"cache_hit_frac": cached / prompt if prompt else 0.0,
            "ttft_p50_s": statistics.median(r["ttft_s"] for r in out),
            "ttft_p50_s_after_first_turn": statistics.median(
                r["ttft_s"] for r in out if r["turn"] > 0),
            "prompt_tokens": prompt, "cached_tokens": cached, "requests": len(out),
            "replicas_per_agent": per_agent_models}


def stop(p):
    if p.poll() is None:
        p.send_signal(signal.SIGTERM)
        try:
            p.wait(60)
        except subprocess.TimeoutExpired:
            p.kill()


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", default=os.path.join(REPO, "models",
                                                    "qwen2.5-coder-0.5b-instruct-Q4_K_M.gguf"))
    ap.add_argument("--turns", type=int, default=10)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--tokens", type=int, default=16)
    ap.add_argument("--extra", default="", help="more flags for each replica")
    a = ap.parse_args()
    extra = a.extra.split()
    load = os.getloadavg()
    procs = []
    try:
        p, base = start_replica(a.model, a.threads, "direct", extra)
        procs.append(p)
        direct = replay(base, a.turns, a.tokens)
        stop(p)
        reps = [start_replica(a.model, a.threads, f"replica-{i}", extra) for i in range(2)]
        procs += [p for p, _ in reps]
        r, rbase = start_router([b for _, b in reps])
        procs.append(r)
        routed = replay(rbase, a.turns, a.tokens)
    finally:
        for p in procs:
            stop(p)
    res = {"replicas": 2, "cache_hit_frac": routed["cache_hit_frac"],
           "ttft_p50_s": routed["ttft_p50_s"], "direct": direct, "router": routed,
           "hit_ratio_router_over_direct": (routed["cache_hit_frac"] / direct["cache_hit_frac"]
                                            if direct["cache_hit_frac"] else None),
           "model": os.path.basename(a.model), "turns": a.turns, "agents": 4,
           "tokens_per_turn": a.tokens, "threads_per_replica": a.threads,
           "loadavg_before": load, "loadavg_after": os.getloadavg()}
    os.makedirs(os.path.join(REPO, "bench", "results"), exist_ok=True)
    with open(os.path.join(REPO, "bench", "results", "router.json"), "w") as f:
        json.dump(res, f, indent=1)
    print(json.dumps({k: v for k, v in res.items() if k not in ("direct", "router")}, indent=1))
    print("direct:", json.dumps({k: direct[k] for k in ("cache_hit_frac", "ttft_p50_s")}))


if __name__ == "__main__":
    main()
