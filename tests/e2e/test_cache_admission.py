"""test_cache_admission.py — the prefix cache, memory admission, the KV budget and
preemption through the real server (stories260K), with the block-pool invariant checker on
(CINFER_CHECK_KV=1: the engine checks the pool after every step; /stats would show a
failure and the tests assert there was none).
"""
import json
import os
import subprocess
import threading

import pytest

from conftest import BIN, STORIES, Server

SYSTEM = ("Once upon a time there was a little girl named Lily. She loved to play outside "
          "in the park with her friends and her big brown dog. ")


@pytest.fixture(autouse=True)
def check_kv(monkeypatch):
    monkeypatch.setenv("CINFER_CHECK_KV", "1")


def gen(srv, prompt, n=24, **kw):
    body = {"prompt": prompt, "max_tokens": n, "temperature": 0}
    body.update(kw)
    st, raw, _ = srv.post("/v1/completions", body)
    assert st == 200, raw
    j = json.loads(raw)
    return j["choices"][0]["text"], j["usage"]


def invariants_ok(srv):
    b = srv.stats()["batch"]
    assert b["invariant_checks"] is True
    return b["invariant_failures"] == 0 and "KV pool invariant broken" not in srv.output()


def test_cached_prefix_equals_cold_and_reports_cached_tokens():
    srv = Server(STORIES, "--kv-f32")
    cold = Server(STORIES, "--kv-f32", "--prompt-cache", "0")
    try:
        a_cold, u0 = gen(cold, SYSTEM + "One day Lily")
        assert u0["prompt_tokens_details"]["cached_tokens"] == 0
        gen(srv, SYSTEM + "The dog")              # agent 1 warms the system prompt
        a, u = gen(srv, SYSTEM + "One day Lily")  # agent 2 shares it
        assert a == a_cold
        cached = u["prompt_tokens_details"]["cached_tokens"]
        assert cached >= 16 and cached % 16 == 0, u
        st = srv.stats()["prompt_cache"]
        assert st["hits"] >= 1 and st["hit_tokens"] >= cached and st["entries"] > 0
        assert 0 < st["bytes"] <= st["max_bytes"]
        # the next turn of a finished conversation reuses it (incl. its partial last block)
        turn2 = SYSTEM + "One day Lily" + a + " Then"
        b, u2 = gen(srv, turn2)
        b_cold, _ = gen(cold, turn2)
        assert b == b_cold
        assert u2["prompt_tokens_details"]["cached_tokens"] >= u["prompt_tokens"] + 24 - 1 - 16
        # /metrics carries the same figures
        m = srv.get("/metrics")[1].decode()
        hits = [l for l in m.splitlines() if l.startswith("cinfer_prompt_cache_hits_total ")]
        assert float(hits[0].split()[1]) >= 2
        assert invariants_ok(srv)
    finally:
        assert srv.stop() == 0
        assert cold.stop() == 0


def test_prompt_cache_disabled_and_lru_eviction():
    off = Server(STORIES, "--prompt-cache", "0")
    small = Server(STORIES, "--prompt-cache", "0.00005")  # ~52 KB: a few blocks
    try:
        gen(off, SYSTEM + "A")
        _, u = gen(off, SYSTEM + "A")
        assert u["prompt_tokens_details"]["cached_tokens"] == 0
        assert off.stats()["prompt_cache"]["entries"] == 0
        for i in range(6):
            gen(small, f"{i} {SYSTEM} {i}", n=40)
        st = small.stats()["prompt_cache"]
        assert st["evictions"] > 0 and st["bytes"] <= st["max_bytes"] + 16 * 640 * 8, st
        assert invariants_ok(small)
    finally:
        assert off.stop() == 0
        assert small.stop() == 0


def test_memory_budget_refuses_before_loading():
    out = subprocess.run([BIN, "serve", STORIES, "--memory-budget", "0.001", "--port", "0"],
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == 1
    assert "no context fits the memory budget" in out.stderr
    assert "weights" in out.stderr and "per token" in out.stderr


def test_admission_error_shape_and_preemption_under_tiny_pool():
    # a budget that leaves a few hundred positions of KV: the max safe context is small
    srv = Server(STORIES, "--memory-budget", "0.00165", "--max-batch-tokens", "64",
                 "--prompt-cache", "0")
    try:
        adm = srv.stats()["admission"]
        ctx = adm["max_safe_context"]
        assert 256 <= ctx < 2048, adm
        assert adm["memory_budget_bytes"] == 1650000 and adm["weights_bytes"] > 0
        st, raw, _ = srv.post("/v1/completions", {"prompt": "Once upon a time",
                                                  "max_tokens": ctx})
        assert st == 400
        err = json.loads(raw)["error"]
        assert err["type"] == "memory_admission" and err["code"] == "context_over_budget"
        assert err["message"] == (f"request needs {5 + ctx} tokens of context (prompt 5 + "
                                  f"max_tokens {ctx}) but the memory budget caps safe context "
                                  f"at {ctx} — shorten the prompt or lower max_tokens")
        # 4 concurrent requests that together need more KV than the pool: preemption,
        # every output still equals its solo run
        prompts = ["Once upon a time", "Lily and Ben", "The cat sat", "Tom had a big"]
        n = ctx // 2
        solo = {p: gen(srv, p, n)[0] for p in prompts}
        got = {}

        def one(p):
            got[p] = gen(srv, p, n)[0]

        ts = [threading.Thread(target=one, args=(p,)) for p in prompts]
        for t in ts:
            t.start()
        for t in ts:
            t.join()
        assert got == solo
        s = srv.stats()
        assert s["requests"]["preempted"] > 0, s
        # every block is back (free or evictable) once the responses are out
        assert s["batch"]["blocks_free"] == s["batch"]["blocks_total"], s["batch"]
        assert invariants_ok(srv)
    finally:
        assert srv.stop() == 0


def test_kv_budget_queues_and_refuses():
    # stories: 640 B of f16 KV per token; 0.00012 GB = 120 KB = 187 tokens
    srv = Server(STORIES, "--kv-budget", "0.00012")
    try:
        st, raw, _ = srv.post("/v1/completions", {"prompt": "Once upon a time", "max_tokens": 400})
        assert st == 400
        err = json.loads(raw)["error"]
        assert err["type"] == "memory_admission" and err["code"] == "kv_over_budget"
        res = []

        def one():
            res.append(gen(srv, "Once upon a time", 100)[0])

        ts = [threading.Thread(target=one) for _ in range(3)]
        for t in ts:
            t.start()
        for t in ts:
            t.join()
        assert len(res) == 3 and len(set(res)) == 1
        b = srv.stats()["batch"]
        assert b["kv_budget_bytes"] == 120000
        assert invariants_ok(srv)
    finally:
        assert srv.stop() == 0
