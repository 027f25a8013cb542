#!/usr/bin/env python3
"""device_lead.py — functional checks of the newer serving features on CUDA, in one device call:
speculative decoding (ngram, suffix) must give the ids of plain greedy decoding; the SSD tier
must restore a prompt's KV after a restart (cached_tokens > 0) with identical text; a seeded
sampled request must give the same text on CUDA with the device sampler and on the host path.

Usage: BIN=dir python3 bench/gpu/device_lead.py MODEL_DIR   (prints one JSON object)
"""
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
import urllib.request

BIN = os.environ.get("BIN", "build")


def start(model, port, args, env_extra=None, log="/tmp/lead.log"):
    env = dict(os.environ, **(env_extra or {}))
    p = subprocess.Popen([f"{BIN}/cinfer", "serve", model, "--backend", os.environ.get("BACKEND", "cuda"), "--port",
                          str(port), "-c", "4096"] + args,
                         stdout=open(log, "w"), stderr=subprocess.STDOUT, env=env)
    base = f"http://127.0.0.1:{port}"
    for _ in range(3000):
        try:
            urllib.request.urlopen(base + "/health", timeout=1).read()
            return p, base
        except OSError:
            if p.poll() is not None:
                raise RuntimeError("server exited: " + open(log).read()[-2000:])
            time.sleep(0.1)
    raise RuntimeError("server not ready")


def stop(p):
    p.terminate()
    try:
        p.wait(30)
    except subprocess.TimeoutExpired:
        p.kill()


def post(base, body, timeout=120):
    req = urllib.request.Request(base + "/v1/completions", data=json.dumps(body).encode(),
                                 headers={"Content-Type": "application/json"})
    t0 = time.time()
    r = json.loads(urllib.request.urlopen(req, timeout=timeout).read())
    r["_s"] = time.time() - t0
    return r


def main():
    model = sys.argv[1]
    res = {}
    if os.path.isdir(model) and not os.path.exists(os.path.join(model, "tokenizer.json")):
        here = os.path.dirname(os.path.abspath(__file__))
        subprocess.check_call([sys.executable, os.path.join(here, "synth_tokenizer.py"), model])
    # a prompt that repeats itself, so prompt lookup finds drafts
    nv = int(os.environ.get("VOCAB", "1100"))
    ids = [(17 * i) % (nv - 100) + 100 for i in range(60)] * 4
    body = {"prompt": ids, "max_tokens": 128, "temperature": 0}
    try:
        p, base = start(model, 18201, [])
        plain = post(base, body)
        seeded = post(base, {"prompt": ids, "max_tokens": 64, "temperature": 0.8, "seed": 7})
        stop(p)
        p, base = start(model, 18202, [], {"CINFER_DEVICE_SAMPLE": "0"})
        seeded_host = post(base, {"prompt": ids, "max_tokens": 64, "temperature": 0.8, "seed": 7})
        stop(p)
        res["seeded_device_eq_host"] = seeded["choices"][0]["text"] == seeded_host["choices"][0]["text"]
        for kind in ("ngram", "suffix"):
            p, base = start(model, 18203, ["--draft-kind", kind])
            r = post(base, body)
            stop(p)
            res[f"spec_{kind}_same_text"] = r["choices"][0]["text"] == plain["choices"][0]["text"]
            res[f"spec_{kind}_usage"] = r.get("usage", {}).get("speculation")
            res[f"spec_{kind}_s"] = round(r["_s"], 3)
        res["plain_s"] = round(plain["_s"], 3)
    except Exception as e:  # noqa: BLE001
        res["spec_error"] = str(e)[-1500:]
    try:
        d = tempfile.mkdtemp()
        p, base = start(model, 18204, ["--ssd-cache", d])
        a = post(base, body)
        stop(p)
        p, base = start(model, 18205, ["--ssd-cache", d])
        b = post(base, body)
        stop(p)
        res["ssd_same_text"] = a["choices"][0]["text"] == b["choices"][0]["text"]
        res["ssd_cached_tokens"] = (b.get("usage", {}).get("prompt_tokens_details") or {}).get("cached_tokens")
        res["ssd_files"] = sum(len(f) for _, _, f in os.walk(d))
        shutil.rmtree(d, ignore_errors=True)
    except Exception as e:  # noqa: BLE001
        res["ssd_error"] = str(e)[-1500:]
    print(json.dumps(res, indent=1))


if __name__ == "__main__":
    main()
