"""conftest.py — start the real `cinfer` binary and talk HTTP to it.

Env: CINFER_BIN (the binary; default build/cinfer), CINFER_FIXTURES (default
<repo>/tests/data/fixtures), CINFER_MODELS (default <repo>/models),
CINFER_E2E_QUICK=1 (stories260K suites only; used for the sanitizer build).
Waits poll for a condition under a generous bound (wait_until); no test sleeps a fixed time
or races a clock: the server's clocks are moved by test controls (CINFER_TEST_CONTROLS=1,
docs/testing.md).
"""
import json
import os
import signal
import socket
import subprocess
import time
import urllib.request

import pytest

REPO = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
BIN = os.environ.get("CINFER_BIN", os.path.join(REPO, "build", "cinfer"))
FIXTURES = os.environ.get("CINFER_FIXTURES", os.path.join(REPO, "tests", "data", "fixtures"))
MODELS = os.environ.get("CINFER_MODELS", os.path.join(REPO, "models"))
STORIES = os.path.join(FIXTURES, "stories260K", "stories260K.gguf")
QWEN = os.path.join(MODELS, "qwen2.5-coder-0.5b-instruct-Q4_K_M.gguf")
QUICK = os.environ.get("CINFER_E2E_QUICK") == "1"
# a tiny chat template for the template path on stories260K (it has none of its own)
STORIES_TEMPLATE = os.path.join(os.path.dirname(__file__), "data", "stories_chat.jinja")


# A session whose every test was skipped checked nothing: exit 77, which ctest reports as
# skipped (SKIP_RETURN_CODE), never as passed.
_ran = {"passed": 0, "failed": 0}


def pytest_runtest_logreport(report):
    if report.failed:
        _ran["failed"] += 1
    elif report.when == "call" and report.passed:
        _ran["passed"] += 1


def pytest_sessionfinish(session, exitstatus):
    if exitstatus in (0, 5) and _ran["passed"] == 0 and _ran["failed"] == 0:
        session.exitstatus = 77


def free_port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    p = s.getsockname()[1]
    s.close()
    return p


class PortTaken(RuntimeError):
    """The server could not listen on its port (another process has it)."""


class Server:
    """One `cinfer serve` process on a free port."""

    def __init__(self, model, *args, port=None, wait=True, env=None):
        """env: extra environment variables of the server process (e.g. test controls).
        Without an explicit port, a free one is picked; if another process (e.g. a suite
        running in parallel) takes it first, the server is started again on another."""
        for attempt in range(8):
            self._start(model, args, port or free_port(), env)
            if not wait:
                return
            try:
                self.wait_ready()
                return
            except PortTaken:
                if port is not None or attempt == 7:
                    raise

    def _start(self, model, args, port, env):
        self.port = port
        self.base = f"http://127.0.0.1:{self.port}"
        self.log = open(f"/tmp/cinfer-e2e-{self.port}.log", "w+")
        cmd = [BIN, "serve", model, "--port", str(self.port), "-t", "2", *args]
        penv = dict(os.environ, **env) if env else None
        self.proc = subprocess.Popen(cmd, stdout=self.log, stderr=subprocess.STDOUT, env=penv)

    def wait_ready(self, timeout=120):
        t0 = time.time()
        while time.time() - t0 < timeout:
            if self.proc.poll() is not None:
                out = self.output()
                if "cannot listen on" in out or "already serves" in out:
                    raise PortTaken(out)
                raise RuntimeError(f"cinfer exited {self.proc.returncode}: {out}")
            try:
                with urllib.request.urlopen(self.base + "/health", timeout=1) as r:
                    if r.status == 200:
                        return
            except OSError:
                time.sleep(0.05)
        raise RuntimeError("cinfer did not become ready: " + self.output())

    def output(self):
        self.log.flush()
        self.log.seek(0)
        return self.log.read()

    def stop(self, sig=signal.SIGTERM, timeout=60):
        if self.proc.poll() is None:
            self.proc.send_signal(sig)
            try:
                self.proc.wait(timeout=timeout)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        return self.proc.returncode

    def get(self, path, headers=None):
        return http("GET", self.base + path, headers=headers)

    def post(self, path, body, headers=None, raw=False):
        data = body if raw else json.dumps(body).encode()
        return http("POST", self.base + path, data=data, headers=headers)

    def stats(self):
        return json.loads(self.get("/stats")[1])


def wait_until(cond, timeout=60, what="condition"):
    """Polls cond() until it returns a true value (returned) or timeout seconds pass (fails)."""
    t0 = time.time()
    while True:
        v = cond()
        if v:
            return v
        if time.time() - t0 > timeout:
            raise AssertionError(f"timed out after {timeout} s waiting for {what}")
        time.sleep(0.05)


def http(method, url, data=None, headers=None, timeout=300):
    """Returns (status, body bytes, headers dict) without raising on HTTP errors."""
    req = urllib.request.Request(url, data=data, method=method, headers=headers or {})
    if data is not None and "Content-Type" not in (headers or {}):
        req.add_header("Content-Type", "application/json")
    try:
        with urllib.request.urlopen(req, timeout=timeout) as r:
            return r.status, r.read(), dict(r.headers)
    except urllib.error.HTTPError as e:
        return e.code, e.read(), dict(e.headers)


def sse_events(body):
    """Splits an SSE body into the list of data payloads (strings)."""
    out = []
    for block in body.decode().split("\n\n"):
        for line in block.split("\n"):
            if line.startswith("data: "):
                out.append(line[6:])
    return out


@pytest.fixture(scope="module")
def stories():
    # F32 KV so that logprobs can be checked against llama2.c's f32 logits at 2e-4
    s = Server(STORIES, "--chat-template", STORIES_TEMPLATE, "--kv-f32")
    yield s
    rc = s.stop()
    assert rc == 0, s.output()


@pytest.fixture(scope="module")
def qwen():
    if QUICK:
        pytest.skip("CINFER_E2E_QUICK=1: real-model suite runs in the release build only")
    if not os.path.exists(QWEN):
        if os.environ.get("CINFER_E2E_ALLOW_NO_MODEL") == "1":
            pytest.skip("default model not fetched (scripts/fetch_models.sh qwen2.5-coder-0.5b)")
        pytest.fail(f"{QWEN} is missing: run scripts/fetch_models.sh qwen2.5-coder-0.5b "
                    "(or set CINFER_E2E_ALLOW_NO_MODEL=1 to skip the real-model suite)")
    s = Server(QWEN)
    yield s
    rc = s.stop()
    assert rc == 0, s.output()
