#!/usr/bin/env python3
"""serve_grammar.py — grammar rows sampled on the device (issue 26): `cinfer serve` with the
grammar bitset applied by the backend's op sample (the default on CUDA) against the same
server with CINFER_GRAMMAR_DEVICE=0 (each grammar row fetches its logits and is masked and
sampled on the host: the path before), in one run.

Checks: every seeded request (a regex and a JSON schema, each greedy, at temperature 0.8 and
with a repetition penalty) gives the same text on both servers, and every output that
finished with "stop" matches its regex / parses as JSON with the schema's members.
Speed: aggregate tok/s of constrained requests (the schema at temperature 0.8) at 1 and at
8 concurrent streams, and the same without a constraint, on each server.

Usage: BIN=build python3 bench/grammar/serve_grammar.py MODEL [--tokens 128] [--streams 8]
       BACKEND=cuda by default; on the CPU, for a smoke test of the op path:
       BACKEND=cpu DEV_ENV=CINFER_DEVICE_SAMPLE=1 ... MODEL = tests/data/fixtures/stories260K
       (a directory without tokenizer.json gets bench/gpu/synth_tokenizer.py's).
Prints one JSON object: same_text (all equal), valid / finished_stop counts,
grammar_tok_s {device, host} x {b1, b8}, plain_tok_s, device_vs_host_b1 / _b8.
"""
import argparse
import json
import os
import re
import subprocess
import sys
import threading
import time
import urllib.request

BIN = os.environ.get("BIN", "build")
HERE = os.path.dirname(os.path.abspath(__file__))

REGEX = r"(the|a|one) [a-z]{1,10}( [a-z]{1,10}){3,24}\."
SCHEMA = {"type": "object",
          "properties": {"name": {"type": "string", "maxLength": 30},
                         "count": {"type": "integer", "minimum": 0, "maximum": 9999},
                         "tags": {"type": "array", "items": {"type": "string", "maxLength": 12},
                                  "maxItems": 4},
                         "ok": {"type": "boolean"}},
          "required": ["name", "count", "tags", "ok"], "additionalProperties": False}
CONSTRAINTS = {
    "regex": {"guided_regex": REGEX},
    "schema": {"response_format": {"type": "json_schema",
                                   "json_schema": {"name": "rec", "schema": SCHEMA}}},
}
SAMPLING = {"greedy": {"temperature": 0}, "temperature": {"temperature": 0.8},
            "penalty": {"temperature": 0.7, "repetition_penalty": 1.1}}


def start(model, port, env_extra, batch, log):
    env = dict(os.environ, **env_extra)
    if os.environ.get("CINFER_LD_PATH"):  # libraries carried for the binary alone
        env["LD_LIBRARY_PATH"] = os.environ["CINFER_LD_PATH"]
    p = subprocess.Popen([f"{BIN}/cinfer", "serve", model, "--backend",
                          os.environ.get("BACKEND", "cuda"), "--port", str(port), "--batch",
                          str(batch), "-c", "2048"],
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


def valid(kind, text):
    if kind == "regex":
        return re.fullmatch(REGEX, text) is not None
    try:
        d = json.loads(text)
    except ValueError:
        return False
    return (isinstance(d, dict) and set(d) == set(SCHEMA["required"]) and
            isinstance(d["name"], str) and len(d["name"]) <= 30 and
            isinstance(d["count"], int) and 0 <= d["count"] <= 9999 and
            isinstance(d["tags"], list) and len(d["tags"]) <= 4 and
            all(isinstance(t, str) and len(t) <= 12 for t in d["tags"]) and
            isinstance(d["ok"], bool))


def wave(base, fields, streams, reqs, tokens, timeout, tag):
    """reqs requests over `streams` client threads; aggregate completion tok/s."""
    lock = threading.Lock()
    todo = list(range(reqs))
    done = []

    def worker():
        while True:
            with lock:
                if not todo:
                    return
                i = todo.pop()
            body = dict(fields, model="m", prompt=f"{tag} request {i}: once upon a time",
                        max_tokens=tokens, seed=100 + i)
            try:
                j = post(base, body, timeout)
                with lock:
                    done.append(j["usage"]["completion_tokens"])
            except Exception as e:  # counted as unfinished
                print("request failed:", str(e)[:200], file=sys.stderr)

    t0 = time.time()
    th = [threading.Thread(target=worker) for _ in range(streams)]
    for t in th:
        t.start()
    for t in th:
        t.join()
    dt = time.time() - t0
    return {"tok_s": round(sum(done) / dt, 1), "tokens": sum(done), "finished": len(done),
            "wall_s": round(dt, 3)}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("model")
    ap.add_argument("--streams", type=int, default=8)
    ap.add_argument("--tokens", type=int, default=128)
    ap.add_argument("--timeout", type=float, default=120)
    a = ap.parse_args()
    if os.path.isdir(a.model) and not os.path.exists(os.path.join(a.model, "tokenizer.json")) \
            and not any(f.endswith(".gguf") for f in os.listdir(a.model)):
        subprocess.check_call([sys.executable,
                               os.path.join(HERE, "..", "gpu", "synth_tokenizer.py"), a.model])
    dev_env = dict(kv.split("=", 1) for kv in os.environ.get("DEV_ENV", "").split() if "=" in kv)
    out = {"model": a.model, "backend": os.environ.get("BACKEND", "cuda"),
           "streams": a.streams, "tokens": a.tokens}
    texts, speed = {}, {}
    modes = (("device", dict(dev_env)), ("host", dict(dev_env, CINFER_GRAMMAR_DEVICE="0")))
    for mi, (mode, env) in enumerate(modes):
        log = f"/tmp/serve-grammar-{mode}.log"
        p, base = start(a.model, 18400 + mi, env, a.streams, log)
        try:
            wave(base, {"temperature": 0}, a.streams, a.streams, 16, a.timeout, "warm")
            texts[mode] = {}
            for ck, cf in CONSTRAINTS.items():
                for sk, sf in SAMPLING.items():
                    j = post(base, dict(cf, **sf, model="m", prompt="a seeded request alone",
                                        max_tokens=a.tokens, seed=7), a.timeout)
                    c = j["choices"][0]
                    texts[mode][f"{ck}/{sk}"] = (c["text"], c["finish_reason"])
            f = dict(CONSTRAINTS["schema"], **SAMPLING["temperature"])
            speed[mode] = {
                "b1": wave(base, f, 1, 4, a.tokens, a.timeout, "b1"),
                f"b{a.streams}": wave(base, f, a.streams, 2 * a.streams, a.tokens, a.timeout,
                                      "b8"),
                "plain_b1": wave(base, SAMPLING["temperature"], 1, 4, a.tokens, a.timeout,
                                 "p1"),
            }
            print(mode, json.dumps(speed[mode]), file=sys.stderr, flush=True)
        finally:
            p.terminate()
            p.wait(timeout=60)
        out[mode + "_log_tail"] = open(log).read().splitlines()[-2:]
    d, h = texts["device"], texts["host"]
    out["same_text"] = {k: d[k] == h[k] for k in d}
    out["all_same"] = all(out["same_text"].values())
    stops = [(k.split("/")[0], t) for k, (t, fr) in d.items() if fr == "stop"]
    out["finished_stop"] = len(stops)
    out["valid"] = sum(valid(k, t) for k, t in stops)
    out["examples"] = {k: v[0][:100] for k, v in list(d.items())[:2]}
    out["grammar_tok_s"] = {m: {k: v["tok_s"] for k, v in s.items()} for m, s in speed.items()}
    bk = f"b{a.streams}"
    out["device_vs_host_b1"] = round(speed["device"]["b1"]["tok_s"] /
                                     max(speed["host"]["b1"]["tok_s"], 1e-9), 3)
    out[f"device_vs_host_{bk}"] = round(speed["device"][bk]["tok_s"] /
                                        max(speed["host"][bk]["tok_s"], 1e-9), 3)
    print(json.dumps(out, indent=1))


if __name__ == "__main__":
    main()
