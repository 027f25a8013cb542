"""test_anthropic.py — POST /v1/messages and /v1/messages/count_tokens with the official
anthropic SDK and raw HTTP: non-streaming and streaming (event grammar replayed by
grammar.py) on the real model, the mapping of system/blocks/stop_sequences/max_tokens,
thinking blocks (stories260K under a think-tag template), and every error shape.
Tool calls on this surface are in test_tools.py.
"""
import json
import os

import anthropic
import pytest

from conftest import FIXTURES, STORIES, STORIES_TEMPLATE, Server
import grammar

# this anthropic SDK (2.x) has no temperature argument: it goes in the body
T0 = {"temperature": 0}
MSG = [{"role": "user", "content": "Write a C function that returns the larger of two ints."}]


def client(srv, **kw):
    return anthropic.Anthropic(base_url=srv.base, api_key="x", max_retries=0, **kw)


def chat_text(srv, messages, **kw):
    body = {"messages": messages, "temperature": 0}
    body.update(kw)
    st, raw, _ = srv.post("/v1/chat/completions", body)
    assert st == 200, raw
    return json.loads(raw)


def test_message_equals_chat_and_stream(qwen):
    c = client(qwen)
    r = c.messages.create(model="anything", max_tokens=32, extra_body=T0, messages=MSG)
    assert r.type == "message" and r.role == "assistant" and r.id.startswith("msg_")
    assert r.model == "qwen2.5-coder-0.5b-instruct-Q4_K_M"
    assert [b.type for b in r.content] == ["text"]
    ref = chat_text(qwen, MSG, max_tokens=32)
    assert r.content[0].text == ref["choices"][0]["message"]["content"]
    assert r.stop_reason == "max_tokens" and r.stop_sequence is None
    # Anthropic accounting: the prompt = input_tokens + cache_read_input_tokens +
    # cache_creation_input_tokens; the prefix cache writes every prompt token it computed
    u = r.usage
    assert u.input_tokens + u.cache_read_input_tokens + u.cache_creation_input_tokens == \
        ref["usage"]["prompt_tokens"]
    assert u.input_tokens == 0 and u.cache_creation_input_tokens == \
        ref["usage"]["prompt_tokens"] - u.cache_read_input_tokens
    assert r.usage.output_tokens == 32
    # the SDK's stream helper assembles the same message
    with c.messages.stream(model="x", max_tokens=32, extra_body=T0, messages=MSG) as s:
        text = "".join(s.text_stream)
        final = s.get_final_message()
    assert text == r.content[0].text and final.content[0].text == text
    assert final.stop_reason == "max_tokens" and final.usage.output_tokens == 32
    # raw stream: the exact grammar
    st, raw, h = qwen.post("/v1/messages", {"model": "x", "max_tokens": 32, "temperature": 0,
                                            "messages": MSG, "stream": True})
    assert st == 200 and h["Content-Type"].startswith("text/event-stream")
    g = grammar.anthropic_stream(raw)
    assert [b["type"] for b in g["content"]] == ["text"]
    assert g["content"][0]["text"] == text and g["stop_reason"] == "max_tokens"
    # message_start: Anthropic's accounting (as message_delta's), the prompt cache's numbers
    u0 = g["usage_at_start"]
    assert u0["input_tokens"] + u0["cache_read_input_tokens"] + \
        u0["cache_creation_input_tokens"] == ref["usage"]["prompt_tokens"]
    assert g["usage"]["input_tokens"] + g["usage"]["cache_read_input_tokens"] + \
        g["usage"]["cache_creation_input_tokens"] == ref["usage"]["prompt_tokens"]
    assert g["usage"]["output_tokens"] == 32


def test_end_turn_system_blocks_and_stop_sequences(qwen):
    c = client(qwen)
    r = c.messages.create(model="x", max_tokens=50, extra_body=T0,
                          messages=[{"role": "user", "content": "Say just: ok"}])
    assert r.stop_reason == "end_turn" and r.usage.output_tokens < 50
    sys_blocks = [{"type": "text", "text": "You answer with code only."}]
    msgs = [{"role": "user", "content": [{"type": "text", "text": MSG[0]["content"]}]}]
    full = c.messages.create(model="x", max_tokens=40, extra_body=T0, system=sys_blocks,
                             messages=msgs)
    ref = chat_text(qwen, [{"role": "system", "content": "You answer with code only."}] + MSG,
                    max_tokens=40)
    text = full.content[0].text
    assert text == ref["choices"][0]["message"]["content"] and "(" in text
    cut = c.messages.create(model="x", max_tokens=40, extra_body=T0, system=sys_blocks,
                            messages=msgs, stop_sequences=["("])
    assert cut.content[0].text == text[:text.index("(")]
    assert cut.stop_reason == "stop_sequence" and cut.stop_sequence == "("
    st, raw, _ = qwen.post("/v1/messages", {"model": "x", "max_tokens": 40, "temperature": 0,
                                            "system": sys_blocks, "messages": msgs,
                                            "stop_sequences": ["("], "stream": True})
    g = grammar.anthropic_stream(raw)
    assert g["stop_reason"] == "stop_sequence" and g["stop_sequence"] == "("
    assert g["content"][0]["text"] == cut.content[0].text


def test_count_tokens(qwen):
    c = client(qwen)
    n = c.messages.count_tokens(model="x", messages=MSG, system="Be brief.")
    r = c.messages.create(model="x", max_tokens=1, messages=MSG, system="Be brief.")
    u = r.usage
    assert n.input_tokens == u.input_tokens + u.cache_read_input_tokens + \
        u.cache_creation_input_tokens > 10


def test_thinking_blocks():
    """stories260K under the R1-distill template: thinking on opens a think block in the
    prompt, so the whole output is a thinking block; off, it is a text block."""
    tmpl = os.path.join(FIXTURES, "chat-templates", "deepseek-ai-DeepSeek-R1-Distill-Qwen-32B.jinja")
    s = Server(STORIES, "--chat-template", tmpl)
    try:
        c = client(s)
        m = [{"role": "user", "content": "Once upon a time"}]
        on = c.messages.create(model="x", max_tokens=20, extra_body=T0, messages=m,
                               thinking={"type": "enabled", "budget_tokens": 1024})
        assert [b.type for b in on.content] == ["thinking"]
        assert len(on.content[0].thinking) > 10 and on.content[0].signature == ""
        off = c.messages.create(model="x", max_tokens=20, extra_body=T0, messages=m,
                                thinking={"type": "disabled"})
        assert [b.type for b in off.content] == ["text"] and len(off.content[0].text) > 10
        st, raw, _ = s.post("/v1/messages", {"model": "x", "max_tokens": 20, "temperature": 0,
                                             "messages": m, "stream": True,
                                             "thinking": {"type": "enabled", "budget_tokens": 1024}})
        g = grammar.anthropic_stream(raw)
        assert [b["type"] for b in g["content"]] == ["thinking"]
        assert g["content"][0]["thinking"] == on.content[0].thinking
        # prior thinking blocks are dropped from the prompt
        hist = [{"role": "user", "content": "Hi"},
                {"role": "assistant", "content": [{"type": "thinking", "thinking": "x" * 200,
                                                   "signature": ""},
                                                  {"type": "text", "text": "Hello"}]},
                {"role": "user", "content": "Go on"}]
        plain = [hist[0], {"role": "assistant", "content": "Hello"}, hist[2]]
        assert (c.messages.count_tokens(model="x", messages=hist).input_tokens ==
                c.messages.count_tokens(model="x", messages=plain).input_tokens)
    finally:
        assert s.stop() == 0


@pytest.fixture(scope="module")
def guarded():
    s = Server(STORIES, "--chat-template", STORIES_TEMPLATE, "--api-key", "sekret",
               "--max-body", "2048")
    yield s
    assert s.stop() == 0


def err(raw):
    j = json.loads(raw)
    assert set(j) == {"type", "error"} and j["type"] == "error", j
    assert set(j["error"]) == {"type", "message"} and j["error"]["message"], j
    return j["error"]["type"], j["error"]["message"]


def test_error_shapes(guarded):
    s = guarded
    ok = {"model": "x", "max_tokens": 4, "messages": [{"role": "user", "content": "Hi"}]}
    key = {"x-api-key": "sekret"}
    # x-api-key is accepted; a wrong or missing key is a 401 in the Anthropic shape
    st, raw, _ = s.post("/v1/messages", ok, headers=key)
    assert st == 200, raw
    st, raw, _ = s.post("/v1/messages", ok, headers={"x-api-key": "nope"})
    assert st == 401 and err(raw)[0] == "authentication_error"
    with pytest.raises(anthropic.AuthenticationError):
        client(s).messages.create(**ok)
    assert client(s, default_headers={"x-api-key": "sekret"}).messages.create(**ok).content
    cases = [
        (b"{", "invalid JSON body"),
        ({**ok, "messages": []}, "messages"),
        ({**ok, "messages": [{"role": "system", "content": "x"}]}, "role"),
        ({**ok, "messages": [{"role": "user", "content": [
            {"type": "image", "source": {"type": "base64", "media_type": "image/png",
                                         "data": "AAAA"}}]}]}, "image blocks are not supported"),
        ({**ok, "messages": [{"role": "user", "content": [{"type": "video"}]}]}, "video"),
        ({**ok, "temperature": "hot"}, "temperature"),
        ({**ok, "max_tokens": 0}, "max_tokens"),
        ({k: v for k, v in ok.items() if k != "max_tokens"}, "max_tokens: Field required"),
    ]
    for body, needle in cases:
        st, raw, _ = s.post("/v1/messages", body, headers=key, raw=isinstance(body, bytes))
        assert st == 400, (body, raw)
        t, m = err(raw)
        assert t == "invalid_request_error" and needle in m, (body, m)
    with pytest.raises(anthropic.BadRequestError) as e:
        client(s, default_headers={"x-api-key": "sekret"}).messages.create(
            model="x", max_tokens=4, messages=[{"role": "user", "content": [
                {"type": "image", "source": {"type": "base64", "media_type": "image/png",
                                             "data": "AAAA"}}]}])
    assert e.value.body["error"]["type"] == "invalid_request_error"
    # the HTTP layer's own errors on /v1/messages paths
    st, raw, _ = s.post("/v1/messages/nope", ok, headers=key)
    assert st == 404 and err(raw)[0] == "not_found_error"
    st, raw, _ = s.get("/v1/messages", headers=key)
    assert st == 405 and err(raw)[0] == "invalid_request_error"
    # Claude Code posts to /v1/messages?beta=true
    st, raw, _ = s.post("/v1/messages?beta=true", ok, headers=key)
    assert st == 200 and json.loads(raw)["type"] == "message"
    # (an oversized body is refused by evhttp before the path is known: that 413 keeps the
    # OpenAI shape; see the report)
    st, raw, _ = s.post("/v1/messages/count_tokens", {"messages": 3}, headers=key)
    assert st == 400 and err(raw)[0] == "invalid_request_error"
    # other paths keep the OpenAI shape
    st, raw, _ = s.post("/v1/nope", ok, headers=key)
    assert st == 404 and "type" in json.loads(raw)["error"] and "param" in json.loads(raw)["error"]
    stats = json.loads(s.get("/stats", headers={"Authorization": "Bearer sekret"})[1])
    assert stats["requests"]["messages"] >= 3


def test_index_lists_routes(stories):
    eps = json.loads(stories.get("/v1")[1])["endpoints"]
    assert "POST /v1/messages" in eps and "POST /v1/messages/count_tokens" in eps
    assert "POST /v1/responses" in eps


def test_429_and_stream_error_event_on_shutdown():
    """With one running and one waiting request (--batch 1 --max-queue 1), another request
    is refused with 429 in each protocol's shape (Anthropic rate_limit_error). Streams cut by
    the server (SIGTERM mid-generation) end with the protocol's error event: `event: error`
    {type: "error", error: {type, message}} for Anthropic, an `error` event for Responses;
    the server still exits cleanly."""
    import http.client
    import signal
    import threading
    from conftest import QUICK, QWEN, wait_until
    if QUICK or not os.path.exists(QWEN):
        pytest.skip("needs the real model")
    s = Server(QWEN, "--batch", "1", "--max-queue", "1")
    bodies, ready = {}, {}
    story = "Write a very long story about a robot."
    # long enough that the first stream is still running when the refusals are checked
    # (SIGTERM ends both streams)
    reqs = [("/v1/messages", {"max_tokens": 4000, "stream": True, "temperature": 0,
                              "messages": [{"role": "user", "content": story}]}),
            ("/v1/responses", {"max_output_tokens": 4000, "stream": True, "temperature": 0,
                               "input": story})]

    def stream(path, body):
        c = http.client.HTTPConnection("127.0.0.1", s.port, timeout=300)
        c.request("POST", path, json.dumps(body), {"Content-Type": "application/json"})
        r = c.getresponse()
        assert r.status == 200, r.read()
        first = r.read1(65536)
        ready[path].set()
        bodies[path] = first + r.read()

    def batch():
        b = s.stats()["batch"]
        return b["active_rows"], b["pending_rows"]

    ts = []
    for (path, body), want in zip(reqs, [(1, 0), (1, 1)]):
        ready[path] = threading.Event()
        ts.append(threading.Thread(target=stream, args=(path, body)))
        ts[-1].start()
        assert ready[path].wait(120)
        # the first one running (out of the queue) before the second comes; the second waiting
        wait_until(lambda: batch() == want, 120, f"(active, pending) rows == {want}")
    st, raw, h = s.post("/v1/messages", {"max_tokens": 4, "messages": [{"role": "user",
                                                                         "content": "Hi"}]})
    assert st == 429 and h.get("Retry-After") == "1"
    assert err(raw)[0] == "rate_limit_error"
    st, raw, _ = s.post("/v1/responses", {"input": "Hi"})
    assert st == 429 and json.loads(raw)["error"]["type"] == "rate_limit_error"
    assert s.stop(signal.SIGTERM) == 0
    for t in ts:
        t.join()
    evs = grammar.named_events(bodies["/v1/messages"])
    # message_start waits for the request's first event (its usage has the cache counts): a
    # stream cancelled before it ran gets the error alone
    assert evs[0][0] in ("message_start", "error") and evs[-1][0] == "error"
    assert evs[-1][1] == {"type": "error", "error": {"type": "api_error",
                                                     "message": "the server is shutting down"}}
    evs = grammar.named_events(bodies["/v1/responses"])
    assert evs[0][0] == "response.created" and evs[-1][0] == "error"
    assert evs[-1][1]["message"] == "the server is shutting down"
    assert evs[-1][1]["type"] == "error"
