"""decode.py — decode tok/s on the CPU with and without a JSON schema, batch 1 and 8, on one
server (the same run), plain and schema runs interleaved REPS times, the best of each kept (the
machine is shared: the best run is the least disturbed). A second server with
CINFER_GRAMMAR_JUMP=1 runs the schema requests again: tok/s and whether the outputs are the
same. Beside wall-clock tok/s, the server's CPU time per generated token (utime + stime of
the process, every thread — the mask worker's too) is summed over the reps: it is what the
grammar adds in work, and moves much less than wall clock with the load of others.
usage: decode.py CINFER_BIN MODEL  -> prints a JSON object."""
import json
import os
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
REPS = int(os.environ.get("REPS", "3"))


def post(base, body):
    req = urllib.request.Request(base + "/v1/chat/completions", data=json.dumps(body).encode(),
                                 headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=600) as r:
        return json.loads(r.read())


def cpu_s(pid):
    f = open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()
    return (int(f[11]) + int(f[12])) / os.sysconf("SC_CLK_TCK")


def run(base, batch, schema, pid=None):
    body = {"messages": [{"role": "user", "content": "List many grocery items with quantities and tags as JSON."}],
            "max_tokens": N_TOK, "temperature": 0, "ignore_eos": True}
    if schema:
        body["response_format"] = {"type": "json_schema", "json_schema": {"name": "g", "schema": SCHEMA}}
    toks, texts = [0] * batch, [""] * batch

    def one(i):
        d = post(base, body)
        toks[i] = d["usage"]["completion_tokens"]
        texts[i] = d["choices"][0]["message"]["content"]

    post(base, dict(body, max_tokens=2))  # warm: prefix cache, vocabulary bytes
    c0 = cpu_s(pid) if pid else 0.0
    t0 = time.time()
    th = [threading.Thread(target=one, args=(i,)) for i in range(batch)]
    for t in th:
        t.start()
    for t in th:
        t.join()
    dt = time.time() - t0
    if pid:
        run.cpu = (cpu_s(pid) - c0, sum(toks))
    return sum(toks) / dt, texts


def serve(bin_, model, env):
    port = 18000 + int(time.time() * 10) % 1000
    p = subprocess.Popen([bin_, "serve", model, "--port", str(port), "-t", "2"], stdout=subprocess.DEVNULL,
                         stderr=subprocess.DEVNULL, env=dict(os.environ, **env))
    base = f"http://127.0.0.1:{port}"
    for _ in range(600):
        try:
            urllib.request.urlopen(base + "/health", timeout=1)
            break
        except OSError:
            time.sleep(0.1)
    return p, base


def main(bin_, model):
    out = {"reps": REPS, "keep": "best of the reps"}
    texts = {}
    p, base = serve(bin_, model, {})
    try:
        for b in (1, 8):
            plain, cons, cpu = [], [], {False: [0.0, 0], True: [0.0, 0]}
            for _ in range(REPS):
                for sch in (False, True):
                    t, tx = run(base, b, sch, p.pid)
                    (cons if sch else plain).append(t)
                    if sch:
                        texts[b] = tx
                    cpu[sch][0] += run.cpu[0]
                    cpu[sch][1] += run.cpu[1]
            cpt = {k: v[0] / max(v[1], 1) * 1e3 for k, v in cpu.items()}
            out[f"batch{b}"] = {"plain_tok_s": round(max(plain), 2), "schema_tok_s": round(max(cons), 2),
                                "overhead_frac": round(1 - max(cons) / max(plain), 4),
                                "plain_runs": [round(x, 2) for x in plain], "schema_runs": [round(x, 2) for x in cons],
                                "plain_cpu_ms_per_tok": round(cpt[False], 2), "schema_cpu_ms_per_tok": round(cpt[True], 2),
                                "cpu_overhead_frac": round(cpt[True] / cpt[False] - 1, 4)}
    finally:
        p.terminate()
        p.wait()
    p, base = serve(bin_, model, {"CINFER_GRAMMAR_JUMP": "1"})
    try:
        for b in (1, 8):
            best, same = 0.0, True
            for _ in range(REPS):
                t, tx = run(base, b, True)
                best = max(best, t)
                same &= tx == texts[b]
            out[f"batch{b}"]["jump_schema_tok_s"] = round(best, 2)
            out[f"batch{b}"]["jump_same_output"] = same
    finally:
        p.terminate()
        p.wait()
    print(json.dumps(out))


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
