#!/usr/bin/env python3
"""run.py — concurrency and agent-replay benchmark: cinfer vs llama.cpp's server, one run.

Part 1 (concurrency sweep): for C in 1, 2, 4, 8, 16, C closed-loop clients each send
--per-client streaming /v1/completions requests (distinct ~60-token prompts, temperature 0,
EOS banned so each decodes exactly --tokens tokens). cinfer runs with --batch C, llama.cpp's
`llama-server` with -np C parallel slots (continuous batching on), same GGUF, same threads.
Reported per C: aggregate decode tok/s (generated tokens / wall time), TTFT p50/p95.

Part 2 (agent replay): 4 agents share a ~2k-token system prompt and each runs a 20-turn
conversation (user turn -> assistant reply appended -> next turn), interleaved round-robin,
through /v1/chat/completions. Reported: prompt tokens, prefill tokens saved by the prefix
cache (usage.prompt_tokens_details.cached_tokens), and TTFT per turn, for both servers.

Writes bench/results/concurrency.json; bench/RESULTS.md quotes it. Not a test: run it on a
quiet machine. Needs build/cinfer, the model (scripts/fetch_models.sh) and a llama-server
binary (LLAMA_SERVER=path; see docs/models.md for building llama.cpp).
Usage: bench/concurrency/run.py [--threads T] [--tokens N] [--levels 1,2,4,8,16]
"""
import argparse
import json
import os
import platform
import socket
import statistics
import subprocess
import threading
import time
import urllib.request

REPO = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
QWEN_EOG = [151643, 151645]
TOPICS = ["a linked list", "a hash map", "a ring buffer", "a binary heap", "a trie",
          "a bitset", "an arena allocator", "a string builder", "a thread pool", "a B-tree",
          "a bloom filter", "an LRU cache", "a skip list", "a deque", "a rope", "a graph"]


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
            urllib.request.urlopen(base + "/v1/models", timeout=2).read()
            return
        except OSError:
            time.sleep(0.2)
    raise RuntimeError("server not ready")


def stream(base, path, body):
    """Sends a streaming request; returns (ttft, n_chunks, t_end, usage)."""
    body = dict(body, stream=True)
    req = urllib.request.Request(base + path, data=json.dumps(body).encode(),
                                 headers={"Content-Type": "application/json"})
    t0 = time.perf_counter()
    first, n, usage = None, 0, None
    with urllib.request.urlopen(req, timeout=1800) as r:
        for line in r:
            line = line.strip()
            if not line.startswith(b"data: ") or line == b"data: [DONE]":
                continue
            j = json.loads(line[6:])
            if j.get("usage"):
                usage = j["usage"]
            ch = (j.get("choices") or [{}])[0]
            piece = ch.get("text") or (ch.get("delta") or {}).get("content")
            if piece:
                n += 1
                if first is None:
                    first = time.perf_counter() - t0
    return first or 0.0, n, time.perf_counter(), usage


def prompt_for(i, j):
    t = TOPICS[(i * 5 + j) % len(TOPICS)]
    return (f"/* Request {i}.{j}: an implementation of {t} in portable C99, with a short "
            f"comment on each function, error handling through return codes, and no global "
            f"state. */\n#include <stdlib.h>\n#include <string.h>\n\n")


def sweep_level(base, c, per_client, tokens):
    ttfts, total = [], [0]
    lock = threading.Lock()

    def client(i):
        for j in range(per_client):
            ttft, n, _, _ = stream(base, "/v1/completions", {
                "prompt": prompt_for(i, j), "max_tokens": tokens, "temperature": 0,
                "logit_bias": {str(t): -100 for t in QWEN_EOG}, "model": "m",
                "cache_prompt": False})
            with lock:
                ttfts.append(ttft)
                total[0] += n

    ts = [threading.Thread(target=client, args=(i,)) for i in range(c)]
    t0 = time.perf_counter()
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    wall = time.perf_counter() - t0
    ttfts.sort()
    return {"concurrency": c, "requests": len(ttfts), "tokens": total[0], "wall_s": wall,
            "agg_tok_s": total[0] / wall, "ttft_p50_s": statistics.median(ttfts),
            "ttft_p95_s": ttfts[min(len(ttfts) - 1, int(0.95 * len(ttfts)))]}


def system_prompt():
    rules = []
    for k in range(60):
        rules.append(f"Rule {k + 1}: when you write C code for {TOPICS[k % len(TOPICS)]}, check every "
                     f"allocation, keep functions under forty lines, and name things plainly.")
    return "You are a careful C programming assistant for a small team.\n" + "\n".join(rules)


def agent_replay(base, turns=20, agents=4, reply_tokens=24):
    sysmsg = system_prompt()
    convs = [[{"role": "system", "content": sysmsg}] for _ in range(agents)]
    rows = []
    for t in range(turns):
        for a in range(agents):
            convs[a].append({"role": "user", "content":
                             f"Agent {a}, step {t}: write the next function for {TOPICS[(a + t) % 16]}."})
            body = {"messages": convs[a], "max_tokens": reply_tokens, "temperature": 0,
                    "model": "m", "cache_prompt": True}
            req = urllib.request.Request(base + "/v1/chat/completions",
                                         data=json.dumps(dict(body, stream=True)).encode(),
                                         headers={"Content-Type": "application/json"})
            t0 = time.perf_counter()
            first, text, usage = None, [], None
            with urllib.request.urlopen(req, timeout=1800) as r:
                for line in r:
                    line = line.strip()
                    if not line.startswith(b"data: ") or line == b"data: [DONE]":
                        continue
                    j = json.loads(line[6:])
                    if j.get("usage"):
                        usage = j["usage"]
                    d = ((j.get("choices") or [{}])[0].get("delta") or {}).get("content")
                    if d:
                        text.append(d)
                        if first is None:
                            first = time.perf_counter() - t0
            convs[a].append({"role": "assistant", "content": "".join(text)})
            u = usage or {}
            rows.append({"turn": t, "agent": a, "ttft_s": first or 0.0,
                         "prompt_tokens": u.get("prompt_tokens"),
                         "cached_tokens": (u.get("prompt_tokens_details") or {}).get("cached_tokens")})
    pt = sum(r["prompt_tokens"] or 0 for r in rows)
    ct = sum(r["cached_tokens"] or 0 for r in rows)
    per_turn = [statistics.mean(r["ttft_s"] for r in rows if r["turn"] == t) for t in range(turns)]
    return {"turns": turns, "agents": agents, "system_prompt_tokens_approx": len(sysmsg) // 4,
            "prompt_tokens": pt, "cached_tokens": ct,
            "prefill_saved_frac": ct / pt if pt else None,
            "ttft_mean_s": statistics.mean(r["ttft_s"] for r in rows),
            "ttft_first_turn_s": per_turn[0], "ttft_later_turns_mean_s": statistics.mean(per_turn[1:]),
            "ttft_per_turn_s": per_turn, "rows": rows}


def run_server(kind, model, threads, c, ctx_per_seq):
    port = free_port()
    base = f"http://127.0.0.1:{port}"
    if kind == "cinfer":
        cmd = [os.environ.get("CINFER_BIN", os.path.join(REPO, "build", "cinfer")), "serve", model,
               "--port", str(port), "-t", str(threads), "--batch", str(c), "--ctx",
               str(ctx_per_seq)]
    else:
        cmd = [os.environ.get("LLAMA_SERVER", "/tmp/llama-build/bin/llama-server"), "-m", model,
               "--port", str(port), "-t", str(threads), "-tb", str(threads), "-np", str(c),
               "-c", str(ctx_per_seq * c), "-cb", "--no-webui"]
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    wait_up(base, proc)
    return proc, base


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", default=os.path.join(REPO, "models",
                                                    "qwen2.5-coder-0.5b-instruct-Q4_K_M.gguf"))
    ap.add_argument("--threads", type=int, default=os.cpu_count())
    ap.add_argument("--tokens", type=int, default=48)
    ap.add_argument("--per-client", type=int, default=2)
    ap.add_argument("--levels", default="1,2,4,8,16")
    ap.add_argument("--turns", type=int, default=20)
    ap.add_argument("--engines", default="cinfer,llamacpp")
    ap.add_argument("--skip-replay", action="store_true")
    a = ap.parse_args()
    levels = [int(x) for x in a.levels.split(",")]
    out = {"model": os.path.basename(a.model), "threads": a.threads, "tokens": a.tokens,
           "per_client": a.per_client, "sweep": {}, "replay": {}}
    for eng in a.engines.split(","):
        out["sweep"][eng] = []
        for c in levels:
            proc, base = run_server(eng, a.model, a.threads, c, 1024)
            try:
                stream(base, "/v1/completions", {"prompt": "int main(void) {", "max_tokens": 4,
                                                 "temperature": 0, "model": "m"})  # warm-up
                r = sweep_level(base, c, a.per_client, a.tokens)
            finally:
                proc.terminate()
                proc.wait(timeout=60)
            print(eng, json.dumps(r), flush=True)
            out["sweep"][eng].append(r)
        if not a.skip_replay:
            proc, base = run_server(eng, a.model, a.threads, 4, 8192)
            try:
                out["replay"][eng] = agent_replay(base, turns=a.turns)
            finally:
                proc.terminate()
                proc.wait(timeout=60)
            rp = out["replay"][eng]
            print(eng, "replay", json.dumps({k: v for k, v in rp.items() if k not in ("rows", "ttft_per_turn_s")}),
                  flush=True)
    s = out["sweep"].get("cinfer")
    if s:
        by = {r["concurrency"]: r for r in s}
        if 1 in by and 8 in by:
            out["cinfer_scaling_8_over_1"] = by[8]["agg_tok_s"] / by[1]["agg_tok_s"]
        l = {r["concurrency"]: r for r in out["sweep"].get("llamacpp", [])}
        if 8 in by and 8 in l:
            out["cinfer_over_llamacpp_at_8"] = by[8]["agg_tok_s"] / l[8]["agg_tok_s"]
    cpu = next((x.split(":", 1)[1].strip() for x in open("/proc/cpuinfo")
                if x.startswith("model name")), "?")
    out["machine"] = {"cpu": cpu, "cores": os.cpu_count(), "kernel": platform.release()}
    out["commit"] = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True,
                                   text=True, cwd=REPO).stdout.strip()
    os.makedirs(os.path.join(REPO, "bench", "results"), exist_ok=True)
    with open(os.path.join(REPO, "bench", "results", "concurrency.json"), "w") as f:
        json.dump(out, f, indent=1)
    print(json.dumps({k: v for k, v in out.items() if k not in ("sweep", "replay")}, indent=1))


if __name__ == "__main__":
    main()
