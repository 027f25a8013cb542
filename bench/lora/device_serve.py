#!/usr/bin/env python3
"""device_serve.py — LoRA adapters mounted and unmounted while `cinfer serve` runs on a
device backend (run by device_lora.sh on the GPU machine; no pytest needed).

    [CINFER_LIBS=DIR] python3 bench/lora/device_serve.py CINFER_BIN BACKEND OUT_JSON

On the tiny qwen2 parity model and its adapters (tests/data/{parity,lora}/qwen2), with
BACKEND (cuda there; cpu works too, for trying the script):
  - hot mount: POST /v1/adapters a and b (200), greedy outputs with a, b, a+b, none;
  - the same outputs from a server that mounted a and b at start-up (--adapter), compared
    token logprobs and text (same backend, same process layout: they must be identical);
  - unmount under load: 6 requests (3 with b) run, DELETE b while they do (200), mount the
    GGUF copy of b as b2 meanwhile; the running ones finish 200 with the reference output; a
    new request naming b gets 400; b2's output equals b's (a GGUF LoRA == its PEFT source
    within the CUDA tolerance: compared on the text of 12 greedy tokens);
  - a request whose model names the adapter gets the adapter's id back as model.
Writes {"checks": {name: true|false|"error ..."}, "ok": all passed} to OUT_JSON and exits 0
only when every check passed.
"""
import json
import os
import socket
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.abspath(os.path.join(HERE, "..", ".."))
BASE = os.path.join(REPO, "tests", "data", "parity", "qwen2", "model.gguf")
ADIR = os.path.join(REPO, "tests", "data", "lora", "qwen2")
PROMPT = [1] + [(i * 37) % 260 + 3 for i in range(39)]


def http(method, url, body=None, timeout=300):
    data = json.dumps(body).encode() if body is not None else None
    req = urllib.request.Request(url, data=data, method=method,
                                 headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(req, timeout=timeout) as r:
            return r.status, json.loads(r.read() or b"null")
    except urllib.error.HTTPError as e:
        try:
            return e.code, json.loads(e.read() or b"null")
        except ValueError:
            return e.code, None


class Server:
    def __init__(self, binary, backend, *args, env=None):
        s = socket.socket()
        s.bind(("127.0.0.1", 0))
        self.port = s.getsockname()[1]
        s.close()
        self.base = f"http://127.0.0.1:{self.port}"
        self.log = open(f"/tmp/lora-device-serve-{self.port}.log", "w+")
        cmd = [binary, "serve", BASE, "--backend", backend, "--port", str(self.port),
               "--no-open", "--adapters-dir", ADIR, *args]
        penv = dict(os.environ, **(env or {}))
        if os.environ.get("CINFER_LIBS"):  # the server's own shared libraries (carried)
            penv["LD_LIBRARY_PATH"] = os.environ["CINFER_LIBS"] + ":" + \
                penv.get("LD_LIBRARY_PATH", "")
        self.proc = subprocess.Popen(cmd, stdout=self.log, stderr=subprocess.STDOUT, env=penv)
        t0 = time.time()
        while time.time() - t0 < 180:
            if self.proc.poll() is not None:
                raise RuntimeError("cinfer exited: " + self.output())
            try:
                with urllib.request.urlopen(self.base + "/health", timeout=1) as r:
                    if r.status == 200:
                        return
            except OSError:
                time.sleep(0.1)
        raise RuntimeError("not ready: " + self.output())

    def output(self):
        self.log.flush()
        self.log.seek(0)
        return self.log.read()[-3000:]

    def stop(self):
        self.proc.terminate()
        try:
            return self.proc.wait(timeout=60)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            return self.proc.wait()

    def complete(self, **kw):
        body = {"prompt": PROMPT, "max_tokens": 12, "temperature": 0, "logprobs": 1}
        body.update(kw)
        return http("POST", self.base + "/v1/completions", body)


def out_of(r):
    c = r["choices"][0]
    return c["text"], tuple(round(x, 4) for x in c["logprobs"]["token_logprobs"])


def main():
    binary, backend, out = sys.argv[1], sys.argv[2], sys.argv[3]
    checks = {}

    def check(name, fn):
        try:
            checks[name] = bool(fn())
        except Exception as e:  # noqa: BLE001 - every failure is recorded, not raised
            checks[name] = "error %r" % (e,)

    hot = Server(binary, backend, "--batch", "8", env={"CINFER_TEST_STEP_DELAY_MS": "20"})
    res = {}
    try:
        check("mount_a", lambda: hot_post(hot, {"path": "a"}) == 200)
        check("mount_b", lambda: hot_post(hot, {"path": "b"}) == 200)
        for ad in ("a", "b", "a+b", "none"):
            st, r = hot.complete(adapter=ad)
            res[ad] = out_of(r) if st == 200 else None
        check("outputs_200_and_distinct",
              lambda: all(res.values()) and len({v[0] for v in res.values()}) >= 3)
        st, r = hot.complete(model="a", max_tokens=2)
        check("model_echoes_adapter", lambda: st == 200 and r["model"] == "a")
        # unmount b while 3 requests run with it
        st, ref = hot.complete(adapter="b", max_tokens=60)
        st2, ref_none = hot.complete(adapter="none", max_tokens=60)
        outs = {}

        def run(i):
            outs[i] = hot.complete(adapter="b" if i % 2 else "none", max_tokens=60)

        th = [threading.Thread(target=run, args=(i,)) for i in range(6)]
        for t in th:
            t.start()
        t0 = time.time()
        while time.time() - t0 < 120:
            _, j = http("GET", hot.base + "/v1/adapters")
            if any(a["id"] == "b" and a["running"] >= 3 for a in j["data"]):
                break
            time.sleep(0.05)
        st, _ = http("DELETE", hot.base + "/v1/adapters/b")
        check("unmount_while_running_200", lambda: st == 200)
        check("mount_b2_while_running",
              lambda: hot_post(hot, {"path": os.path.join(ADIR, "b.gguf"), "id": "b2"}) == 200)
        st3, e = hot.complete(adapter="b")
        check("unmounted_is_400", lambda: st3 == 400 and "unknown adapter 'b'" in
              e["error"]["message"])
        for t in th:
            t.join(300)
        check("running_ones_finished_with_their_adapter",
              lambda: all(outs[i][0] == 200 and out_of(outs[i][1])[0] ==
                          out_of(ref if i % 2 else ref_none)[0] for i in range(6)))
        st, r = hot.complete(adapter="b2")
        check("gguf_copy_equals_peft_text", lambda: st == 200 and out_of(r)[0] == res["b"][0])
    finally:
        rc = hot.stop()
        checks["hot_server_exit_0"] = rc == 0
        if rc != 0:
            print(hot.output())
    boot = Server(binary, backend, "--adapter", os.path.join(ADIR, "a"), "--adapter",
                  os.path.join(ADIR, "b"))
    try:
        same = {}
        for ad in ("a", "b", "a+b", "none"):
            st, r = boot.complete(adapter=ad)
            same[ad] = st == 200 and res.get(ad) is not None and out_of(r) == res[ad]
        check("hot_mount_equals_startup_mount", lambda: all(same.values()))
        checks["hot_vs_startup_per_set"] = same
    finally:
        checks["startup_server_exit_0"] = boot.stop() == 0
    ok = all(v is True or isinstance(v, dict) for v in checks.values())
    json.dump({"backend": backend, "checks": checks, "ok": ok}, open(out, "w"), indent=1)
    print(json.dumps({"ok": ok, "checks": checks}))
    return 0 if ok else 1


def hot_post(s, body):
    st, _ = http("POST", s.base + "/v1/adapters", body)
    return st


if __name__ == "__main__":
    try:
        sys.exit(main())
    except Exception as ex:  # noqa: BLE001 - a server that did not start: say so in the JSON
        json.dump({"backend": sys.argv[2], "ok": False, "error": repr(ex)[-3000:]},
                  open(sys.argv[3], "w"), indent=1)
        print("device_serve: %r" % (ex,))
        sys.exit(1)
