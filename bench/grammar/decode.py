"""decode.py — decode tok/s on the CPU with and without a JSON schema, batch 1 and 8, on one
server (the same run). usage: decode.py CINFER_BIN MODEL  -> prints a JSON object."""
import json
import subprocess
import sys
import threading
import time
import urllib.request

SCHEMA = {"type": "object", "properties": {"items": {"type": "array", "items": {"type": "object", "properties": {
    "name": {"type": "string"}, "qty": {"type": "integer", "minimum": 1, "maximum": 99},
    "tags": {"type": "array", "items": {"enum": ["red", "green", "blue", "new", "sale"]}}},
    "required": ["name", "qty", "tags"], "additionalProperties": False}, "minItems": 40}},
    "required": ["items"], "additionalProperties": False}
N_TOK = 96


def post(base, body):
    req = urllib.request.Request(base + "/v1/chat/completions", data=json.dumps(body).encode(),
                                 headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=600) as r:
        return json.loads(r.read())


def run(base, batch, schema):
    body = {"messages": [{"role": "user", "content": "List many grocery items with quantities and tags as JSON."}],
            "max_tokens": N_TOK, "temperature": 0, "ignore_eos": True}
    if schema:
        body["response_format"] = {"type": "json_schema", "json_schema": {"name": "g", "schema": SCHEMA}}
    toks = [0] * batch

    def one(i):
        toks[i] = post(base, body)["usage"]["completion_tokens"]

    post(base, dict(body, max_tokens=2))  # warm: prefix cache, vocabulary bytes
    t0 = time.time()
    th = [threading.Thread(target=one, args=(i,)) for i in range(batch)]
    for t in th:
        t.start()
    for t in th:
        t.join()
    return sum(toks) / (time.time() - t0)


def main(bin_, model):
    port = 18000 + int(time.time()) % 1000
    p = subprocess.Popen([bin_, "serve", model, "--port", str(port), "-t", "2"], stdout=subprocess.DEVNULL,
                         stderr=subprocess.DEVNULL)
    base = f"http://127.0.0.1:{port}"
    try:
        for _ in range(600):
            try:
                urllib.request.urlopen(base + "/health", timeout=1)
                break
            except OSError:
                time.sleep(0.1)
        out = {}
        for b in (1, 8):
            plain = run(base, b, False)
            constrained = run(base, b, True)
            out[f"batch{b}"] = {"plain_tok_s": round(plain, 2), "schema_tok_s": round(constrained, 2),
                                "overhead_frac": round(1 - constrained / plain, 4)}
        print(json.dumps(out))
    finally:
        p.terminate()
        p.wait()


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
