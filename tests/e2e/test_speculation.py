"""test_speculation.py — speculative decoding through the real server (docs/speculative.md).

Greedy outputs (text, finish reason, logprobs) with ngram, suffix and two-model equal those
of a server without speculation: one at a time, 8 concurrent, after a prefix-cache hit,
ending at a stop string. usage.speculation / usage.lane, /stats.speculation and /metrics
report the drafts; the block-pool invariant checker (CINFER_CHECK_KV=1) stays clean through
the rollbacks. Bad flag combinations are refused at start-up with a clear message. The last
test runs a real model (Qwen2.5-Coder) on a code edit (skipped in quick mode).
"""
import json
import os
import subprocess
import threading

import pytest

from conftest import BIN, MODELS, QUICK, STORIES, STORIES_TEMPLATE, Server

PROMPTS = [
    "The cat sat on the mat. The cat sat on the mat. The cat",
    "Once upon a time there was a little girl. Once upon a time there was",
    "Lily and Ben were friends. One day they went to the park to play",
    "Tom had a big red ball. He liked to throw it high in the sky. One day the ball",
]


@pytest.fixture(autouse=True)
def check_kv(monkeypatch):
    monkeypatch.setenv("CINFER_CHECK_KV", "1")
    # a fixed step cost: how much is drafted must not depend on measured step times
    monkeypatch.setenv("CINFER_SPEC_STEP_COST", "0.25")
    # two-model: the draft (stories260K drafting for itself) priced at a tenth of the target:
    # at 1 drafting could never pay, and the policy would not even probe
    monkeypatch.setenv("CINFER_SPEC_DRAFT_COST", "0.1")


def gen(srv, prompt, n=60, **kw):
    body = {"prompt": prompt, "max_tokens": n, "temperature": 0}
    body.update(kw)
    st, raw, _ = srv.post("/v1/completions", body)
    assert st == 200, raw
    j = json.loads(raw)
    c = j["choices"][0]
    return (c["text"], c["finish_reason"], json.dumps(c.get("logprobs"))), j["usage"]


@pytest.fixture(scope="module")
def plain():
    s = Server(STORIES, "--kv-f32")
    yield s
    s.stop()


@pytest.mark.parametrize("kind", ["ngram", "suffix", "two-model"])
def test_greedy_identical(plain, kind):
    # two-model: stories260K drafts for itself (same tokenizer; every greedy draft is kept;
    # the fixture prices the draft at a tenth of the target)
    args = ["--draft-model", STORIES] if kind == "two-model" else ["--draft-kind", kind]
    srv = Server(STORIES, "--kv-f32", *args)
    try:
        drafted = 0
        for i, p in enumerate(PROMPTS):
            kw = {"logprobs": True, "top_logprobs": 2} if i % 2 else {}
            ref, u0 = gen(plain, p, **kw)
            got, u = gen(srv, p, **kw)
            assert got == ref
            assert "speculation" not in u0 and u0["lane"] == "batched"
            sp = u["speculation"]
            assert sp["accepted"] <= sp["drafted"]
            assert sp["target_calls"] + sp["accepted"] == u["completion_tokens"]
            if sp["drafted"]:
                assert u["lane"] == "batched+spec"
            drafted += sp["drafted"]
        assert drafted > 0
        # after a prefix-cache hit: the same prompt again
        ref, _ = gen(plain, PROMPTS[0], n=80)
        got, u = gen(srv, PROMPTS[0], n=80)
        assert got == ref and u["prompt_tokens_details"]["cached_tokens"] > 0
        # ending at a stop string
        ref, _ = gen(plain, PROMPTS[0], n=200, stop=["cat played"])
        got, u = gen(srv, PROMPTS[0], n=200, stop=["cat played"])
        assert got == ref and ref[1] == "stop"
        # 8 concurrent
        res = {}

        def one(i):
            res[i] = gen(srv, PROMPTS[i % 4], n=40 + 5 * i)[0]

        th = [threading.Thread(target=one, args=(i,)) for i in range(8)]
        for t in th:
            t.start()
        for t in th:
            t.join()
        for i in range(8):
            assert res[i] == gen(plain, PROMPTS[i % 4], n=40 + 5 * i)[0]
        st = srv.stats()
        sp = st["speculation"]
        assert sp["kind"] == kind and sp["drafted"] > 0 and sp["accepted"] > 0
        assert 0 < sp["acceptance_rate"] <= 1
        assert sp["step_ms"] >= 0 and sp["step_cost"] == 0.25  # pinned by the fixture
        if kind == "two-model":  # a draft forward's cost: pinned too; its time measured
            assert sp["draft_cost"] == pytest.approx(0.1) and sp["draft_ms"] >= 0
            assert 0 <= sp["lookup_accepted"] <= sp["lookup_drafted"] <= sp["drafted"]
            assert "copied spans by prompt lookup" in srv.output()
        assert st["batch"]["invariant_failures"] == 0
        m = srv.get("/metrics")[1].decode()
        assert f"cinfer_spec_accepted_tokens_total {sp['accepted']}" in m
        assert "Spec      " in srv.output()
        assert plain.stats()["speculation"] == {"kind": "none"}
        assert srv.stop() == 0  # a clean exit (under ASan: no leak)
    finally:
        srv.stop()


def test_usage_on_every_surface():
    # usage.speculation on the Anthropic Messages and Responses surfaces too (streamed and
    # not), consistent with the tokens they report; absent on a server without speculation
    srv = Server(STORIES, "--kv-f32", "--draft-kind", "ngram", "--chat-template",
                 STORIES_TEMPLATE)
    plain_srv = Server(STORIES, "--kv-f32", "--chat-template", STORIES_TEMPLATE)
    try:
        msgs = [{"role": "user", "content": PROMPTS[0]}]
        for s, on in ((srv, True), (plain_srv, False)):
            st, raw, _ = s.post("/v1/messages", {"model": "m", "max_tokens": 60,
                                                  "temperature": 0, "messages": msgs})
            assert st == 200, raw
            u = json.loads(raw)["usage"]
            st, raw, _ = s.post("/v1/messages", {"model": "m", "max_tokens": 60,
                                                  "temperature": 0, "messages": msgs,
                                                  "stream": True})
            assert st == 200, raw
            ev = [json.loads(line[6:]) for line in raw.decode().splitlines()
                  if line.startswith("data: ")]
            us = [e["usage"] for e in ev if e.get("type") == "message_delta"][-1]
            st, raw, _ = s.post("/v1/responses", {"model": "m", "max_output_tokens": 60,
                                                   "temperature": 0, "input": PROMPTS[0]})
            assert st == 200, raw
            ur = json.loads(raw)["usage"]
            st, raw, _ = s.post("/v1/responses", {"model": "m", "max_output_tokens": 60,
                                                   "temperature": 0, "input": PROMPTS[0],
                                                   "stream": True})
            assert st == 200, raw
            ev = [json.loads(line[6:]) for line in raw.decode().splitlines()
                  if line.startswith("data: ")]
            urs = [e["response"]["usage"] for e in ev
                   if e.get("type") == "response.completed"][-1]
            for x in (u, us, ur, urs):
                if not on:
                    assert "speculation" not in x, x
                    continue
                sp = x["speculation"]
                assert set(sp) == {"drafted", "accepted", "target_calls"}
                assert 0 <= sp["accepted"] <= sp["drafted"]
                assert sp["target_calls"] + sp["accepted"] == x["output_tokens"], x
            if on:
                assert u["speculation"]["drafted"] > 0 and ur["speculation"]["drafted"] > 0
    finally:
        srv.stop()
        plain_srv.stop()


@pytest.mark.parametrize("args,msg", [
    (["--draft-kind", "mtp"], "architecture that cinfer does not load"),
    (["--draft-kind", "bogus"], "ngram|suffix|two-model"),
    (["--draft-kind", "ngram", "--draft-model", STORIES], "drafts without a model"),
    (["--draft-kind", "two-model"], "needs --draft-model"),
    (["--draft-kind", "ngram", "--num-draft-tokens", "0"], "--num-draft-tokens"),
    (["--draft-model", STORIES, "--draft-lookup", "maybe"], "--draft-lookup expects on or off"),
])
def test_refusals(args, msg):
    p = subprocess.run([BIN, "serve", STORIES, "--port", "0", *args], capture_output=True,
                       text=True, timeout=120)
    assert p.returncode != 0
    assert msg in p.stderr, p.stderr


def test_tokenizer_mismatch_refused():
    other = os.path.join(MODELS, "smollm2-135m-instruct-Q4_1.gguf")
    if not os.path.exists(other):
        pytest.skip("models/smollm2-135m-instruct-Q4_1.gguf is not fetched")
    p = subprocess.run([BIN, "serve", STORIES, "--port", "0", "--draft-model", other],
                       capture_output=True, text=True, timeout=120)
    assert p.returncode != 0
    assert "does not share the target's tokenizer" in p.stderr, p.stderr


CODE = '''def area(w, h):
    """Area of a w x h rectangle."""
    return w * h


def perimeter(w, h):
    """Perimeter of a w x h rectangle."""
    return 2 * (w + h)


def describe(w, h):
    return f"{w}x{h}: area {area(w, h)}, perimeter {perimeter(w, h)}"
'''


@pytest.mark.skipif(QUICK, reason="real model: not in quick mode")
def test_real_model_code_edit():
    model = os.path.join(MODELS, "qwen2.5-coder-0.5b-instruct-Q4_K_M.gguf")
    if not os.path.exists(model):
        pytest.skip("models/qwen2.5-coder-0.5b-instruct-Q4_K_M.gguf is not fetched")
    msgs = [{"role": "user", "content": "Rename the function `area` to `rect_area` everywhere. "
             "Return the whole file and nothing else.\n\n```python\n" + CODE + "```"}]
    body = {"messages": msgs, "max_tokens": 160, "temperature": 0}
    out = {}
    for kind in (None, "ngram", "suffix"):
        srv = Server(model, *([] if kind is None else ["--draft-kind", kind]))
        try:
            st, raw, _ = srv.post("/v1/chat/completions", body)
            assert st == 200, raw
            j = json.loads(raw)
            out[kind] = (j["choices"][0]["message"]["content"], j["usage"])
        finally:
            srv.stop()
    assert out["ngram"][0] == out[None][0]
    assert out["suffix"][0] == out[None][0]
    for kind in ("ngram", "suffix"):
        sp = out[kind][1]["speculation"]
        assert sp["accepted"] > 20, sp  # a code edit is mostly copied
