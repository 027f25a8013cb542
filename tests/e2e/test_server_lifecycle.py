"""test_server_lifecycle.py — start-up, limits, disconnects and shutdown of `cinfer serve`.

Each test starts its own server on stories260K where it needs special flags.
"""
import json
import signal
import socket
import subprocess
import threading
import time

import pytest

from conftest import BIN, STORIES, Server, free_port, http


def raw_stream(port, body, read_chunks=2):
    """Opens a streaming request on a raw socket, reads a few SSE events, returns the socket."""
    s = socket.create_connection(("127.0.0.1", port))
    data = json.dumps(body).encode()
    s.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
              b"Content-Length: " + str(len(data)).encode() + b"\r\n\r\n" + data)
    buf = b""
    while buf.count(b"data: ") < read_chunks:
        chunk = s.recv(65536)
        if not chunk:
            break
        buf += chunk
    return s, buf


def wait_for(pred, timeout=120):
    t0 = time.time()
    while time.time() - t0 < timeout:
        if pred():
            return True
        time.sleep(0.05)
    return False


def test_client_disconnect_cancels():
    srv = Server(STORIES, "--ctx", "2048")
    try:
        s, buf = raw_stream(srv.port, {"prompt": "Once upon a time", "max_tokens": 2000,
                                       "temperature": 0.8, "stream": True})
        assert b"data: " in buf
        s.close()
        assert wait_for(lambda: srv.stats()["requests"]["cancelled"] >= 1), srv.stats()
        st = srv.stats()
        assert st["requests"]["disconnects"] >= 1
        assert st["batch"]["active_rows"] == 0
        assert st["tokens"]["generated"] < 2000
        assert wait_for(lambda: srv.stats()["batch"]["blocks_free"] == srv.stats()["batch"]["blocks_total"])
        m = srv.get("/metrics")[1].decode()
        line = [l for l in m.splitlines() if l.startswith("cinfer_requests_cancelled_total ")][0]
        assert float(line.split()[1]) >= 1
        # the server still answers normally afterwards
        st, body, _ = srv.post("/v1/completions", {"prompt": "Once", "max_tokens": 3})
        assert st == 200
    finally:
        assert srv.stop() == 0, srv.output()


def test_sigterm_during_stream_ends_with_error_event():
    srv = Server(STORIES)
    s, buf = raw_stream(srv.port, {"prompt": "Once upon a time", "max_tokens": 2000,
                                   "temperature": 0.8, "stream": True})
    srv.proc.send_signal(signal.SIGTERM)
    s.settimeout(120)
    while True:
        chunk = s.recv(65536)
        if not chunk:
            break
        buf += chunk
    s.close()
    rc = srv.proc.wait(timeout=120)
    assert rc == 0, srv.output()
    text = buf.decode(errors="replace")
    assert '"error"' in text and "shutting down" in text
    assert "[DONE]" not in text


def test_body_limit_413():
    srv = Server(STORIES, "--max-body", "2048")
    try:
        big = {"prompt": "x" * 5000, "max_tokens": 1}
        st, body, _ = srv.post("/v1/completions", big)
        assert st == 413, body
        assert "too large" in json.loads(body)["error"]["message"]
        # the route's error shape: Anthropic on /v1/messages
        st, body, _ = srv.post("/v1/messages", {"model": "m", "max_tokens": 1,
                                                "messages": [{"role": "user", "content": "x" * 5000}]})
        j = json.loads(body)
        assert st == 413 and j["type"] == "error" and j["error"]["type"] == "request_too_large"
        st, _, _ = srv.post("/v1/completions", {"prompt": "Once", "max_tokens": 1})
        assert st == 200
        # a declared body over the limit is answered before any of it is sent: 2^63 bytes
        # declared and nothing sent, and Expect: 100-continue (the socket's timeout bounds it)
        for path, extra in (("/v1/chat/completions", ""), ("/v1/messages", ""),
                            ("/v1/completions", "Expect: 100-continue\r\n")):
            c = socket.create_connection(("127.0.0.1", srv.port), timeout=30)
            c.sendall((f"POST {path} HTTP/1.1\r\nHost: x\r\n{extra}Content-Type: "
                       f"application/json\r\nContent-Length: {2 ** 63 - 1}\r\n\r\n").encode())
            got = b""
            while b"\r\n\r\n" not in got or not got.rstrip().endswith(b"}"):
                k = c.recv(4096)
                if not k:
                    break
                got += k
            c.close()
            head, _, body = got.partition(b"\r\n\r\n")
            assert head.startswith(b"HTTP/1.1 413"), got
            j = json.loads(body)
            if path == "/v1/messages":
                assert j["error"]["type"] == "request_too_large", j
            else:
                assert "too large" in j["error"]["message"], j
        # pipelined behind a generation, in one send: the completion's reply first, then the
        # 413 in the second request's route shape, then the server's close
        ok = json.dumps({"prompt": "Once", "max_tokens": 4, "temperature": 0}).encode()
        c = socket.create_connection(("127.0.0.1", srv.port), timeout=60)
        c.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json"
                  b"\r\nContent-Length: %d\r\n\r\n%s" % (len(ok), ok) +
                  b"POST /v1/messages HTTP/1.1\r\nHost: x\r\nContent-Type: application/json"
                  b"\r\nContent-Length: 99999999999\r\n\r\n{\"model\"")
        got = b""
        while True:
            k = c.recv(65536)
            if not k:
                break
            got += k
        c.close()
        first, _, rest = got.partition(b"HTTP/1.1 413")
        assert first.startswith(b"HTTP/1.1 200") and b'"text_completion"' in first, got
        j = json.loads(rest.partition(b"\r\n\r\n")[2])
        assert j["type"] == "error" and j["error"]["type"] == "request_too_large", got
    finally:
        assert srv.stop() == 0


def test_queue_limit_429_with_retry_after():
    srv = Server(STORIES, "--batch", "1", "--max-queue", "1")
    try:
        results = []

        def one():
            results.append(srv.post("/v1/completions", {"prompt": "Once upon a time",
                                                        "max_tokens": 300,
                                                        "temperature": 0}))

        ts = [threading.Thread(target=one) for _ in range(6)]
        for t in ts:
            t.start()
        for t in ts:
            t.join()
        codes = sorted(r[0] for r in results)
        assert 200 in codes and 429 in codes, codes
        r429 = [r for r in results if r[0] == 429][0]
        assert r429[2].get("Retry-After") == "1"
        assert json.loads(r429[1])["error"]["type"] == "rate_limit_error"
        assert srv.stats()["requests"]["rejected_429"] >= 1
    finally:
        assert srv.stop() == 0


def test_api_key():
    srv = Server(STORIES, "--api-key", "sekret")
    try:
        body = {"prompt": "Once", "max_tokens": 1}
        assert srv.post("/v1/completions", body)[0] == 401
        assert srv.post("/v1/completions", body, headers={"Authorization": "Bearer nope"})[0] == 401
        assert srv.post("/v1/completions", body, headers={"Authorization": "Bearer sekret"})[0] == 200
        assert srv.post("/v1/completions", body, headers={"x-api-key": "sekret"})[0] == 200
        assert srv.get("/health")[0] == 200
        import openai
        c = openai.OpenAI(base_url=srv.base + "/v1", api_key="sekret")
        assert c.completions.create(model="x", prompt="Once", max_tokens=2).choices
        with pytest.raises(openai.AuthenticationError):
            openai.OpenAI(base_url=srv.base + "/v1", api_key="bad").models.list()
    finally:
        assert srv.stop() == 0


def test_preflight_probe_refuses_a_second_server():
    srv = Server(STORIES)
    try:
        out = subprocess.run([BIN, "serve", STORIES, "--port", str(srv.port)],
                             capture_output=True, text=True, timeout=120)
        assert out.returncode == 1
        assert "already serves" in out.stderr and "stories260K" in out.stderr
    finally:
        assert srv.stop() == 0


def test_port_held_by_something_else():
    s = socket.socket()
    s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    s.bind(("127.0.0.1", 0))
    s.listen(1)
    port = s.getsockname()[1]
    try:
        out = subprocess.run([BIN, "serve", STORIES, "--port", str(port)],
                             capture_output=True, text=True, timeout=120)
        assert out.returncode == 1
        assert str(port) in out.stderr
    finally:
        s.close()


@pytest.mark.parametrize("args,msg", [
    (["--temperature", "9"], "--temperature expects a number in [0, 5]"),
    (["--temp", "x"], "--temp expects a number in [0, 5]"),
    (["--batch", "0"], "--batch expects an integer >= 1"),
    (["--top-p", "2"], "--top-p expects a number in [0, 1]"),
    (["--top-k", "-1"], "--top-k expects an integer in [0, 1000000]"),
    (["--max-tokens", "0"], "--max-tokens expects an integer in [1, 10000000]"),
    (["--thinking", "maybe"], "--thinking expects true|false"),
    (["--port", "70000"], "--port expects an integer in [0, 65535]"),
    (["--bogus"], "unknown option '--bogus'"),
])
def test_bad_flags_exit_1(args, msg):
    out = subprocess.run([BIN, "serve", STORIES, *args], capture_output=True, text=True,
                         timeout=120)
    assert out.returncode == 1 and msg in out.stderr, out.stderr


def test_help_and_ready_card():
    out = subprocess.run([BIN, "serve", "--help"], capture_output=True, text=True)
    assert out.returncode == 0 and "--api-key" in out.stdout and "--thinking" in out.stdout
    srv = Server(STORIES, "--temperature", "0.3", "--temp", "0.9", "--no-open")
    try:
        card = srv.output()
        assert f"http://127.0.0.1:{srv.port}/v1" in card
        assert "stories260K" in card and "context 2048" in card and "threads" in card
        assert "temperature 0.3 (--temperature)" in card
        assert json.loads(srv.get("/v1/models")[1])["data"][0]["gen_defaults"]["temperature"] == 0.3
    finally:
        assert srv.stop() == 0


def test_bare_cinfer_without_default_model(tmp_path):
    out = subprocess.run([BIN, "--port", str(free_port())], capture_output=True, text=True,
                         cwd=tmp_path, env={"HOME": str(tmp_path), "PATH": "/usr/bin:/bin"},
                         timeout=120)
    assert out.returncode == 1 and "fetch_models.sh" in out.stderr
