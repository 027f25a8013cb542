"""test_router_facing.py — what a router or gateway sees of `cinfer serve` (docs/scaling.md):
the vLLM-named Prometheus series (parsed with prometheus_client's own text parser), /health
503 while the model loads (the listener is bound first: never a refused connection) and
while a SIGTERM drain lets the running requests finish, and --served-model-name.
"""
import json
import os
import signal
import socket
import threading
import time
import urllib.request

import pytest

from conftest import STORIES, Server, free_port, http, sse_events

prom_parser = pytest.importorskip("prometheus_client.parser")


def wait_for(pred, timeout=60):
    t0 = time.time()
    while time.time() - t0 < timeout:
        if pred():
            return True
        time.sleep(0.05)
    return False


def families(srv):
    st, body, hdr = srv.get("/metrics")
    assert st == 200
    return {f.name: f for f in prom_parser.text_string_to_metric_families(body.decode())}


def value(fams, family, sample=None, **labels):
    f = fams[family]
    for s in f.samples:
        if (sample is None or s.name == sample) and all(s.labels.get(k) == v
                                                         for k, v in labels.items()):
            return s.value
    raise KeyError((family, sample, labels))


def test_vllm_metrics_parse_and_move():
    srv = Server(STORIES, "--served-model-name", "stories-alias", "--kv-block-size", "16")
    try:
        fams = families(srv)
        for name, typ in [("vllm:num_requests_waiting", "gauge"),
                          ("vllm:num_requests_running", "gauge"),
                          ("vllm:kv_cache_usage_perc", "gauge"),
                          ("vllm:cache_config_info", "gauge"),
                          ("vllm:prefix_cache_queries", "counter"),
                          ("vllm:prefix_cache_hits", "counter"),
                          ("vllm:time_to_first_token_seconds", "histogram"),
                          ("vllm:inter_token_latency_seconds", "histogram"),
                          ("vllm:e2e_request_latency_seconds", "histogram"),
                          ("cinfer_prompt_tokens", "counter")]:
            assert name in fams, name
            assert fams[name].type == typ, (name, fams[name].type)
        info = fams["vllm:cache_config_info"].samples[0]
        assert info.labels["block_size"] == "16"
        assert int(info.labels["num_gpu_blocks"]) == srv.stats()["batch"]["blocks_total"]
        assert value(fams, "vllm:num_requests_running", model_name="stories-alias") == 0
        assert value(fams, "vllm:kv_cache_usage_perc") == 0
        # the same long prompt twice: the second is served from the prefix cache
        prompt = "Once upon a time there was a little girl named Lily. " * 6
        for _ in range(2):
            st, body, _ = srv.post("/v1/completions", {"prompt": prompt, "max_tokens": 4,
                                                       "temperature": 0})
            assert st == 200, body
        usage = json.loads(body)["usage"]
        cached = usage["prompt_tokens_details"]["cached_tokens"]
        assert cached > 0
        fams = families(srv)
        q = value(fams, "vllm:prefix_cache_queries", "vllm:prefix_cache_queries_total")
        h = value(fams, "vllm:prefix_cache_hits", "vllm:prefix_cache_hits_total")
        assert q == 2 * usage["prompt_tokens"], (q, usage)
        assert h == cached, (h, cached)
        assert value(fams, "vllm:time_to_first_token_seconds",
                     "vllm:time_to_first_token_seconds_count") == 2
        assert value(fams, "vllm:e2e_request_latency_seconds",
                     "vllm:e2e_request_latency_seconds_count") == 2
        # finished requests leave their blocks cached: evictable counts as free (vLLM's rule)
        assert 0 <= value(fams, "vllm:kv_cache_usage_perc") < 1
        st, body, _ = srv.get("/v1/models")
        assert json.loads(body)["data"][0]["id"] == "stories-alias"
    finally:
        assert srv.stop() == 0, srv.output()


def test_health_503_while_loading():
    port = free_port()
    env_before = os.environ.get("CINFER_LOAD_DELAY_MS")
    os.environ["CINFER_LOAD_DELAY_MS"] = "3000"
    try:
        srv = Server(STORIES, port=port, wait=False)
    finally:
        if env_before is None:
            del os.environ["CINFER_LOAD_DELAY_MS"]
        else:
            os.environ["CINFER_LOAD_DELAY_MS"] = env_before
    try:
        # the listener comes up before the model: poll until it answers at all
        seen = []

        def answered():
            try:
                seen.append(http("GET", srv.base + "/health", timeout=5)[0])
                return True
            except OSError:
                return False
        assert wait_for(answered, 60), srv.output()
        assert seen[-1] == 503, seen  # the delay is 3 s: the first answer comes while loading
        st, body, hdr = http("POST", srv.base + "/v1/completions",
                             data=json.dumps({"prompt": "x", "max_tokens": 1}).encode())
        if st == 503:
            assert "loading" in json.loads(body)["error"]["message"]
        # then 200, with no connection ever refused in between
        codes = []

        def ready():
            st = http("GET", srv.base + "/health", timeout=5)[0]
            codes.append(st)
            return st == 200
        assert wait_for(ready, 120), srv.output()
        assert set(codes) <= {200, 503}
        st, body, _ = srv.post("/v1/completions", {"prompt": "Once", "max_tokens": 2})
        assert st == 200
    finally:
        assert srv.stop() == 0, srv.output()


def stream_request(port, out, idx, body):
    """One streaming completion on a raw socket; out[idx] gets the whole response bytes."""
    s = socket.create_connection(("127.0.0.1", port))
    data = json.dumps(body).encode()
    s.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
              b"Connection: close\r\nContent-Length: " + str(len(data)).encode() + b"\r\n\r\n" +
              data)
    s.settimeout(120)
    buf = b""
    while True:
        chunk = s.recv(65536)
        if not chunk:
            break
        buf += chunk
    s.close()
    out[idx] = buf


def test_sigterm_drain_finishes_running_requests():
    # one request at a time and a queue of long ones: the drain has work to wait for
    # (the work is small and the drain bound generous: a loaded sanitizer build must finish
    # it well inside the bound, or the test would race the machine's speed)
    # a slow engine (the test hook: 10 ms a step), so that every request is surely queued
    # before the SIGTERM however fast the build is
    srv = Server(STORIES, "--ctx", "2048", "--batch", "1", "--drain-timeout", "900",
                 env={"CINFER_TEST_STEP_DELAY_MS": "10"})
    n = 6
    out = [None] * n
    body = {"prompt": "Once upon a time", "max_tokens": 150, "temperature": 0.8,
            "stream": True, "ignore_eos": True}
    ths = [threading.Thread(target=stream_request, args=(srv.port, out, i, body))
           for i in range(n)]
    for t in ths:
        t.start()
    try:
        # every request is in the engine before the SIGTERM (a request that arrives after it
        # is refused with a 503, as it should be: seen when a loaded sanitizer build started
        # the client threads late)
        assert wait_for(lambda: srv.stats()["batch"]["active_rows"] >= 1 and
                        srv.stats()["batch"]["active_rows"] +
                        srv.stats()["batch"]["pending_rows"] >= n, 120), srv.stats()
        srv.proc.send_signal(signal.SIGTERM)
        # draining: /health says 503, a new generation is refused, the listener stays open
        assert wait_for(lambda: srv.get("/health")[0] == 503, 30), srv.output()
        st, b, _ = srv.get("/health")
        assert st == 503 and json.loads(b)["status"] == "draining"
        st, b, _ = srv.post("/v1/completions", {"prompt": "Once", "max_tokens": 1})
        assert st == 503, b
        for t in ths:
            t.join(300)
        rc = srv.proc.wait(timeout=120)
        assert rc == 0, srv.output()
    finally:
        if srv.proc.poll() is None:
            srv.stop(signal.SIGKILL)
    for buf in out:
        assert buf is not None
        text = buf.decode(errors="replace")
        assert "[DONE]" in text, text[-500:]
        assert "shutting down" not in text
        assert '"finish_reason":' in text.replace(" ", ""), text[-300:]


def test_fit_reports_the_plan():
    srv = Server(STORIES, "--ctx", "1024")
    try:
        st, body, _ = srv.get("/fit")
        assert st == 200
        j = json.loads(body)
        stats = srv.stats()
        assert j["model"] == "stories260K" and j["fits"] is True and j["memory"] == "host"
        assert j["max_safe_context"] == stats["admission"]["max_safe_context"] == 1024
        assert j["weights_bytes"] == stats["admission"]["weights_bytes"]
        assert j["kv_bytes_per_token"] > 0 and j["host_read_bandwidth_gbs"] > 0
        per_tok = j["weights_bytes"] + 8192 * j["kv_bytes_per_token"]
        assert abs(j["predicted_decode_tok_s_at_8k"] -
                   j["host_read_bandwidth_gbs"] * 1e9 / per_tok) < 1e-6 * \
            j["predicted_decode_tok_s_at_8k"] + 1e-9
    finally:
        assert srv.stop() == 0, srv.output()
