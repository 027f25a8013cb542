"""test_lora.py — LoRA adapters through the real server (docs/lora.md).

The base is the tiny random-weight qwen2 of tests/data/parity, the adapters are
tests/data/lora/qwen2/{a, b, a.gguf, b.gguf} (scripts/lora_reference.py; their logits are
checked against transformers + peft by test_lora.c). Here: the routes, the request's
"adapter" and "model" fields, the default set, cached KV never shared between adapter sets,
mount and unmount while requests run, and a bad --adapter failing start-up.
"""
import json
import os
import subprocess
import threading

import pytest

from conftest import BIN, REPO, Server, http, sse_events, wait_until

BASE = os.path.join(REPO, "tests", "data", "parity", "qwen2", "model.gguf")
ADIR = os.path.join(REPO, "tests", "data", "lora", "qwen2")
# token ids of the tiny vocabulary; 40 of them so that two full 16-token blocks get cached
PROMPT = [1] + [(i * 37) % 260 + 3 for i in range(39)]


@pytest.fixture(scope="module")
def srv():
    s = Server(BASE, "--adapter", os.path.join(ADIR, "a"), "--adapters-dir", ADIR,
               env={"CINFER_TEST_STEP_DELAY_MS": "5"})
    yield s
    assert s.stop() == 0, s.output()


def complete(s, **kw):
    body = {"prompt": PROMPT, "max_tokens": 12, "temperature": 0, "logprobs": 1}
    body.update(kw)
    st, b, _ = s.post("/v1/completions", body)
    return st, json.loads(b)


def text(r):
    """The output: its text and its tokens' logprobs (the tiny vocabulary's random bytes
    decode to many U+FFFD, so the text alone may hide a difference)."""
    c = r["choices"][0]
    return c["text"], tuple(round(x, 5) for x in c["logprobs"]["token_logprobs"])


def cached(r):
    return r["usage"]["prompt_tokens_details"]["cached_tokens"]


def test_card_and_routes(srv):
    assert "Adapters  1 mounted: a (rank 4, q k v o gate up down) · default a" in srv.output()
    st, b, _ = srv.get("/v1/adapters")
    j = json.loads(b)
    assert st == 200 and [a["id"] for a in j["data"]] == ["a"] and j["default"] == "a"
    assert j["data"][0]["rank"] == 4 and len(j["data"][0]["target_modules"]) == 7
    st, b, _ = srv.get("/v1/adapters/available")
    avail = {(a["id"], a["format"]) for a in json.loads(b)["data"]}
    assert {("a", "peft"), ("b", "peft"), ("a", "gguf"), ("b", "gguf")} <= avail
    # mount b by name under --adapters-dir, and the GGUF copy of b as another id
    st, b, _ = srv.post("/v1/adapters", {"path": "b"})
    assert st == 200 and json.loads(b)["id"] == "b", b
    st, b, _ = srv.post("/v1/adapters", {"path": os.path.join(ADIR, "b.gguf"), "id": "bg"})
    assert st == 200, b
    st, b, _ = srv.post("/v1/adapters", {"path": "b"})
    assert st == 409 and b"already mounted" in b
    st, b, _ = srv.post("/v1/adapters", {"path": os.path.join(ADIR, "nope")})
    assert st == 400 and b"not a PEFT adapter directory" in b
    st, b, _ = srv.post("/v1/adapters", {"id": "x"})
    assert st == 400
    # /v1/models: the base, then each adapter with the base as parent
    st, b, _ = srv.get("/v1/models")
    data = json.loads(b)["data"]
    base = data[0]["id"]
    kids = {m["id"]: m for m in data[1:]}
    assert set(kids) == {"a", "b", "bg"} and all(m["parent"] == base for m in kids.values())
    st, b, _ = srv.get("/v1/models/bg")
    assert st == 200 and json.loads(b)["parent"] == base
    st, b, _ = http("DELETE", srv.base + "/v1/adapters/bg")
    assert st == 200 and json.loads(b)["deleted"] is True
    st, b, _ = http("DELETE", srv.base + "/v1/adapters/bg")
    assert st == 404 and b"unknown adapter 'bg'" in b


def test_request_fields(srv):
    if not any(a["id"] == "b" for a in json.loads(srv.get("/v1/adapters")[1])["data"]):
        srv.post("/v1/adapters", {"path": "b"})
    _, dflt = complete(srv)
    _, a = complete(srv, adapter="a")
    _, none = complete(srv, adapter="none")
    _, b = complete(srv, adapter="b")
    _, via_model = complete(srv, model="b")
    _, ab = complete(srv, adapter="a+b")
    _, ab2 = complete(srv, adapter="a,b")
    assert text(dflt) == text(a)           # --adapter is the default
    assert text(via_model) == text(b)      # a router names the adapter in "model"
    assert text(ab) == text(ab2)
    assert len({text(a), text(none), text(b), text(ab)}) == 4, (a, none, b, ab)
    st, e = complete(srv, adapter="zz")
    assert st == 400 and e["error"]["message"] == "unknown adapter 'zz'"
    assert e["error"]["param"] == "adapter"
    st, e = complete(srv, adapter="a+zz")
    assert st == 400 and "'zz'" in e["error"]["message"]
    st, e = complete(srv, adapter=3)
    assert st == 400
    st, b, _ = srv.get("/stats")
    ad = {x["id"]: x for x in json.loads(b)["adapters"]["mounted"]}
    assert ad["a"]["requests"] >= 3 and ad["b"]["requests"] >= 3
    st, b, _ = srv.get("/metrics")
    assert b'vllm:lora_requests_info{max_lora="64",running_lora_adapters=' in b
    assert b'cinfer_lora_requests_total{adapter="b"}' in b


def test_cache_never_shared_between_sets(srv):
    prompt = [1] + [(i * 53) % 260 + 3 for i in range(47)]
    _, a1 = complete(srv, prompt=prompt, adapter="a")
    _, a2 = complete(srv, prompt=prompt, adapter="a")
    assert cached(a2) >= 32 and text(a1) == text(a2)   # the same set reuses its blocks
    _, n1 = complete(srv, prompt=prompt, adapter="none")
    assert cached(n1) == 0                              # never a's blocks
    _, b1 = complete(srv, prompt=prompt, adapter="b")
    assert cached(b1) == 0
    _, ab = complete(srv, prompt=prompt, adapter="a+b")
    assert cached(ab) == 0
    _, a3 = complete(srv, prompt=prompt, adapter="a")
    assert cached(a3) >= 32 and text(a3) == text(a1)


def test_concurrent_sets_equal_alone(srv):
    """8 concurrent requests over a, b, a+b and none (batched steps with 4 groups) give
    what each gives alone (the CPU kernels are batch invariant)."""
    if not any(a["id"] == "b" for a in json.loads(srv.get("/v1/adapters")[1])["data"]):
        srv.post("/v1/adapters", {"path": "b"})
    sets = ["a", "b", "a+b", "none", "a", "b", "a+b", "none"]
    prompts = [[1] + [(i * 29 + k * 7) % 260 + 3 for i in range(20)] for k in range(8)]
    alone = [text(complete(srv, prompt=p, adapter=a, max_tokens=16)[1])
             for p, a in zip(prompts, sets)]
    out = {}

    def run(k):
        out[k] = complete(srv, prompt=prompts[k], adapter=sets[k], max_tokens=16)

    th = [threading.Thread(target=run, args=(k,)) for k in range(8)]
    for t in th:
        t.start()
    for t in th:
        t.join(300)
    for k in range(8):
        st, r = out[k]
        assert st == 200, r
        assert text(r) == alone[k], (k, sets[k])


def test_mount_unmount_under_load():
    s = Server(BASE, "--batch", "8", env={"CINFER_TEST_STEP_DELAY_MS": "20"})
    try:
        assert s.post("/v1/adapters", {"path": os.path.join(ADIR, "a"), "id": "x"})[0] == 200
        _, ref = complete(s, adapter="x", max_tokens=60)
        _, ref_none = complete(s, adapter="none", max_tokens=60)
        out = {}

        def run(i, ad):
            out[i] = complete(s, adapter=ad, max_tokens=60)

        th = [threading.Thread(target=run, args=(i, "x" if i % 2 else "none")) for i in range(6)]
        for t in th:
            t.start()
        wait_until(lambda: any(a["id"] == "x" and a["running"] >= 3
                               for a in json.loads(s.get("/v1/adapters")[1])["data"]),
                   what="3 requests running with x")
        st, m, _ = s.get("/metrics")
        assert b'running_lora_adapters="x"' in m, m
        # unmount x while they run; mount another adapter meanwhile
        st, b, _ = http("DELETE", s.base + "/v1/adapters/x")
        assert st == 200, b
        assert s.post("/v1/adapters", {"path": os.path.join(ADIR, "b.gguf"), "id": "y"})[0] == 200
        st, e = complete(s, adapter="x")
        assert st == 400 and "unknown adapter 'x'" in e["error"]["message"]
        _, y = complete(s, adapter="y", max_tokens=4)
        for t in th:
            t.join(300)
        for i in range(6):
            st, r = out[i]
            assert st == 200, r
            # the running requests finished with the adapter they started with
            assert text(r) == text(ref if i % 2 else ref_none), (i, r)
        assert y["usage"]["completion_tokens"] == 4
    finally:
        assert s.stop() == 0, s.output()


def test_bad_adapter_fails_startup(tmp_path):
    bad = tmp_path / "bad"
    bad.mkdir()
    (bad / "adapter_config.json").write_text('{"r": 0, "lora_alpha": 8}')
    with open(os.path.join(ADIR, "a", "adapter_model.safetensors"), "rb") as f:
        (bad / "adapter_model.safetensors").write_bytes(f.read())
    p = subprocess.run([BIN, "serve", BASE, "--port", "0", "--no-open", "--adapter", str(bad)],
                       capture_output=True, text=True, timeout=120)
    assert p.returncode != 0
    assert "--adapter" in p.stderr and "rank r = 0" in p.stderr, p.stderr
    p = subprocess.run([BIN, "serve", BASE, "--port", "0", "--no-open", "--adapter",
                        os.path.join(REPO, "tests", "data", "lora", "gemma3", "a")],
                       capture_output=True, text=True, timeout=120)
    assert p.returncode != 0 and "tensor 'base_model.model.model.layers." in p.stderr, p.stderr


def test_response_model_echoes_the_adapter():
    """A request whose "model" names a mounted adapter gets that name back as the response's
    model (what vLLM does, so a router sees the adapter it asked for), on every route and
    in stream chunks; the base name or an "adapter" field echoes the base."""
    s = Server(BASE, "--adapter", os.path.join(ADIR, "a"), "--chat-template",
               os.path.join(REPO, "tests", "e2e", "data", "stories_chat.jinja"))
    try:
        base = json.loads(s.get("/v1/models")[1])["data"][0]["id"]
        chat = {"messages": [{"role": "user", "content": "hi"}], "max_tokens": 4,
                "temperature": 0}
        for model, adapter, want in (("a", None, "a"), (base, None, base), ("a", "a", base)):
            extra = {"model": model}
            if adapter:
                extra["adapter"] = adapter
            st, r = complete(s, max_tokens=4, **extra)
            assert st == 200 and r["model"] == want, (model, adapter, r)
            st, b, _ = s.post("/v1/chat/completions", dict(chat, **extra))
            assert st == 200 and json.loads(b)["model"] == want, b
            st, b, _ = s.post("/v1/messages", dict(chat, **extra),
                              headers={"Content-Type": "application/json"})
            assert st == 200 and json.loads(b)["model"] == want, b
            st, b, _ = s.post("/v1/responses", dict(input="hi", max_output_tokens=4,
                                                    temperature=0, **extra))
            assert st == 200 and json.loads(b)["model"] == want, b
            st, b, _ = s.post("/v1/chat/completions", dict(chat, stream=True, **extra))
            chunks = [json.loads(e) for e in sse_events(b) if e != "[DONE]"]
            assert st == 200 and chunks and all(c["model"] == want for c in chunks), b
        # the adapter's text is the one the base name gets with "adapter": "a"
        _, via_model = complete(s, model="a")
        _, via_field = complete(s, model=base, adapter="a")
        assert text(via_model) == text(via_field)
    finally:
        assert s.stop() == 0, s.output()
