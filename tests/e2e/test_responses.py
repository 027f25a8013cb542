"""test_responses.py — POST /v1/responses with the official openai SDK and raw HTTP:
non-streaming and streaming (event chain replayed by grammar.py) on the real model, input
items and instructions, previous_response_id chaining and expiry, /stats.response_store,
reasoning items (stories260K under a think-tag template) and the error shapes. Tool calls on
this surface are in test_tools.py.
"""
import json
import os

import openai
import pytest

from conftest import FIXTURES, STORIES, STORIES_TEMPLATE, Server
import grammar

Q = "Write a C function that returns the larger of two ints."


def client(srv):
    return openai.OpenAI(base_url=srv.base + "/v1", api_key="x", max_retries=0)


def chat(srv, messages, **kw):
    body = {"messages": messages, "temperature": 0}
    body.update(kw)
    st, raw, _ = srv.post("/v1/chat/completions", body)
    assert st == 200, raw
    return json.loads(raw)


def test_response_equals_chat_and_stream(qwen):
    c = client(qwen)
    r = c.responses.create(model="x", input=Q, max_output_tokens=24, temperature=0)
    assert r.id.startswith("resp_") and r.object == "response"
    assert r.status == "incomplete" and r.incomplete_details.reason == "max_output_tokens"
    ref = chat(qwen, [{"role": "user", "content": Q}], max_tokens=24)
    assert r.output_text == ref["choices"][0]["message"]["content"]
    assert [o.type for o in r.output] == ["message"]
    assert r.usage.input_tokens == ref["usage"]["prompt_tokens"]
    assert r.usage.output_tokens == 24 and r.usage.total_tokens == r.usage.input_tokens + 24
    assert r.usage.output_tokens_details.reasoning_tokens == 0
    assert r.usage.input_tokens_details.cached_tokens >= 0
    # SDK streaming
    evs = list(c.responses.create(model="x", input=Q, max_output_tokens=24, temperature=0,
                                  stream=True))
    assert evs[0].type == "response.created" and evs[-1].type == "response.completed"
    text = "".join(e.delta for e in evs if e.type == "response.output_text.delta")
    assert text == r.output_text and evs[-1].response.output_text == text
    # raw stream: the exact chain
    st, raw, _ = qwen.post("/v1/responses", {"input": Q, "max_output_tokens": 24,
                                             "temperature": 0, "stream": True})
    final = grammar.responses_stream(raw)
    assert final["output"][0]["content"][0]["text"] == text
    assert final["usage"]["output_tokens"] == 24


def test_items_and_instructions_map_like_chat(qwen):
    c = client(qwen)
    items = [{"type": "message", "role": "developer", "content": "Answer briefly."},
             {"role": "user", "content": [{"type": "input_text", "text": "What is C?"}]},
             {"type": "message", "role": "assistant",
              "content": [{"type": "output_text", "text": "A language."}]},
             {"role": "user", "content": "Who made it?"}]
    r = c.responses.create(model="x", input=items, instructions="You are terse.",
                           max_output_tokens=12, temperature=0)
    ref = chat(qwen, [{"role": "system", "content": "You are terse.\n\nAnswer briefly."},
                      {"role": "user", "content": "What is C?"},
                      {"role": "assistant", "content": "A language."},
                      {"role": "user", "content": "Who made it?"}], max_tokens=12)
    assert r.output_text == ref["choices"][0]["message"]["content"]
    assert r.usage.input_tokens == ref["usage"]["prompt_tokens"]
    assert r.instructions == "You are terse.\n\nAnswer briefly."


def test_function_tools_render_like_chat(qwen):
    """A Responses request with function tools and a call round trip renders as the chat
    request an agent SDK sends for the same turn (openai-agents: its chat and Responses
    models), `strict` included: the template dumps the tools into the prompt, and a
    different prompt made the 1.5B write another call instead of the answer."""
    par = {"type": "object", "properties": {"city": {"type": "string"}},
           "required": ["city"], "additionalProperties": False}
    for strict in (True, False, None):
        flat = {"type": "function", "name": "get_temperature", "parameters": par,
                "description": "Get the temperature of a city in Celsius."}
        fn = {"name": "get_temperature", "description": flat["description"], "parameters": par}
        if strict is not None:
            flat["strict"] = fn["strict"] = strict
        items = [{"role": "user", "content": "How warm is Paris?"},
                 {"type": "function_call", "call_id": "call_1", "name": "get_temperature",
                  "arguments": "{\"city\":\"Paris\"}"},
                 {"type": "function_call_output", "call_id": "call_1", "output": "20.0"}]
        st, raw, _ = qwen.post("/v1/responses", {"input": items, "tools": [flat],
                                                 "instructions": "Use the tools.",
                                                 "max_output_tokens": 8, "temperature": 0})
        assert st == 200, raw
        r = json.loads(raw)
        ref = chat(qwen, [{"role": "system", "content": "Use the tools."},
                          {"role": "user", "content": "How warm is Paris?"},
                          {"role": "assistant", "content": None, "tool_calls": [
                              {"id": "call_1", "type": "function",
                               "function": {"name": "get_temperature",
                                            "arguments": "{\"city\":\"Paris\"}"}}]},
                          {"role": "tool", "tool_call_id": "call_1", "content": "20.0"}],
                   tools=[{"type": "function", "function": fn}], max_tokens=8)
        assert r["usage"]["input_tokens"] == ref["usage"]["prompt_tokens"], strict
        assert r["output"][0]["content"][0]["text"] == ref["choices"][0]["message"]["content"]
        assert r["tools"][0]["strict"] == strict


def test_previous_response_id_chain(qwen):
    c = client(qwen)
    before = qwen.stats()["response_store"]
    r1 = c.responses.create(model="x", input="What is C?", instructions="Be terse.",
                            max_output_tokens=10, temperature=0)
    r2 = c.responses.create(model="x", input="Who made it?", previous_response_id=r1.id,
                            max_output_tokens=10, temperature=0)
    assert r2.previous_response_id == r1.id
    assert r2.instructions == "Be terse."  # carried over
    # the same conversation sent whole through chat completions renders the same prompt
    ref = chat(qwen, [{"role": "system", "content": "Be terse."},
                      {"role": "user", "content": "What is C?"},
                      {"role": "assistant", "content": r1.output_text},
                      {"role": "user", "content": "Who made it?"}], max_tokens=10)
    assert r2.usage.input_tokens == ref["usage"]["prompt_tokens"]
    assert r2.output_text == ref["choices"][0]["message"]["content"]
    # the second turn reuses the first turn's KV (prompt + sampled tokens)
    assert r2.usage.input_tokens_details.cached_tokens >= r1.usage.input_tokens
    # a streamed response is stored too (on its final event), and chains further
    st, raw, _ = qwen.post("/v1/responses", {"input": "When?", "previous_response_id": r2.id,
                                             "max_output_tokens": 8, "temperature": 0,
                                             "stream": True})
    f3 = grammar.responses_stream(raw)
    r4 = c.responses.create(model="x", input="Thanks.", previous_response_id=f3["id"],
                            max_output_tokens=4, temperature=0)
    assert r4.usage.input_tokens > r2.usage.input_tokens + 10
    after = qwen.stats()["response_store"]
    assert after["entries"] >= before["entries"] + 4 and after["bytes"] > before["bytes"]
    assert after["max_bytes"] == 33554432 and after["ttl_ms"] == 3600000
    # store: false is not kept
    r5 = c.responses.create(model="x", input="Hi", store=False, max_output_tokens=2)
    assert r5.store is False and qwen.stats()["response_store"]["entries"] == after["entries"]
    with pytest.raises(openai.NotFoundError):
        c.responses.create(model="x", input="x", previous_response_id=r5.id)
    with pytest.raises(openai.NotFoundError) as e:
        c.responses.create(model="x", input="x", previous_response_id="resp_unknown")
    assert e.value.body["message"] == "previous_response_id 'resp_unknown' not found or expired"


@pytest.fixture(scope="module")
def ctl():
    # the store's TTL stays its default (1 h); the test moves the store's clock instead of
    # waiting, so nothing here depends on how fast the machine is
    s = Server(STORIES, "--chat-template", STORIES_TEMPLATE, env={"CINFER_TEST_CONTROLS": "1"})
    yield s
    assert s.stop() == 0


def advance(s, seconds):
    st, raw, _ = s.post("/debug/advance-clock", {"seconds": seconds})
    assert st == 200, raw


def test_previous_response_id_expiry(ctl):
    s = ctl
    c = client(s)
    r1 = c.responses.create(model="x", input="Once upon a time", max_output_tokens=4)
    assert s.stats()["response_store"] == {"entries": 1, "bytes": s.stats()["response_store"]["bytes"],
                                           "max_bytes": 33554432, "ttl_ms": 3600000}
    advance(s, 3000)  # 50 min of the hour: still there, and usable
    c.responses.create(model="x", input="more", previous_response_id=r1.id, max_output_tokens=4)
    assert s.stats()["response_store"]["entries"] == 2
    advance(s, 601)  # past r1's hour (a get does not extend it); r2 has 10 min left
    st, raw, _ = s.post("/v1/responses", {"input": "more", "previous_response_id": r1.id})
    assert st == 404
    j = json.loads(raw)["error"]
    assert j["message"] == f"previous_response_id '{r1.id}' not found or expired"
    assert j["param"] == "previous_response_id"
    assert s.stats()["response_store"]["entries"] == 1
    advance(s, 3000)  # past r2's hour too
    assert s.stats()["response_store"]["entries"] == 0


def test_ttl_env_and_controls_off():
    # CINFER_RESPONSE_TTL_MS sets the TTL; without CINFER_TEST_CONTROLS the control is a 404
    s = Server(STORIES, "--chat-template", STORIES_TEMPLATE, env={"CINFER_RESPONSE_TTL_MS": "90000"})
    try:
        assert s.stats()["response_store"]["ttl_ms"] == 90000
        st, _, _ = s.post("/debug/advance-clock", {"seconds": 100})
        assert st == 404
    finally:
        assert s.stop() == 0


def test_advance_clock_bad_body(ctl):
    for body in ({}, {"seconds": 0}, {"seconds": -5}, {"seconds": "1"}):
        st, _, _ = ctl.post("/debug/advance-clock", body)
        assert st == 400, body


def test_reasoning_item():
    tmpl = os.path.join(FIXTURES, "chat-templates", "deepseek-ai-DeepSeek-R1-Distill-Qwen-32B.jinja")
    s = Server(STORIES, "--chat-template", tmpl)
    try:
        c = client(s)
        r = c.responses.create(model="x", input="Once upon a time", max_output_tokens=20,
                               temperature=0, reasoning={"effort": "medium"})
        assert r.output[0].type == "reasoning" and r.output[0].id.startswith("rs_")
        assert len(r.output[0].summary[0].text) > 10
        assert 0 < r.usage.output_tokens_details.reasoning_tokens <= 20
        st, raw, _ = s.post("/v1/responses", {"input": "Once upon a time", "max_output_tokens": 20,
                                              "temperature": 0, "stream": True,
                                              "reasoning": {"effort": "medium"}})
        f = grammar.responses_stream(raw)
        assert f["output"][0]["type"] == "reasoning"
        assert f["output"][0]["summary"][0]["text"] == r.output[0].summary[0].text
        # reasoning items sent back are not replayed into the prompt
        base = c.responses.create(model="x", input=[{"role": "user", "content": "Hi"}],
                                  max_output_tokens=1)
        with_rs = c.responses.create(model="x", input=[
            {"type": "reasoning", "id": "rs_1", "summary": [{"type": "summary_text", "text": "x" * 99}]},
            {"role": "user", "content": "Hi"}], max_output_tokens=1)
        assert with_rs.usage.input_tokens == base.usage.input_tokens
    finally:
        assert s.stop() == 0


def test_error_shapes(stories):
    def err(st, raw, status, needle):
        assert st == status, raw
        j = json.loads(raw)
        assert set(j) == {"error"} and set(j["error"]) == {"message", "type", "param", "code"}
        assert needle in j["error"]["message"], j
        return j["error"]

    e = err(*stories.post("/v1/responses", b"{", raw=True)[:2], 400, "invalid JSON body")
    assert e["type"] == "invalid_request_error"
    err(*stories.post("/v1/responses", {"input": 3})[:2], 400, "input must be")
    err(*stories.post("/v1/responses", {"input": []})[:2], 400, "input has no message")
    err(*stories.post("/v1/responses", {"input": [
        {"role": "user", "content": [{"type": "input_image", "image_url": "http://x/y.png"}]}]})[:2],
        400, "input_image is not supported")
    err(*stories.post("/v1/responses", {"input": [{"type": "web_search_call"}]})[:2], 400,
        "unsupported item type")
    err(*stories.post("/v1/responses", {"input": "x", "temperature": 9})[:2], 400, "temperature")
    err(*stories.post("/v1/responses", {"input": "x", "max_output_tokens": 0})[:2], 400,
        "max_tokens must be at least 1")
    e = err(*stories.post("/v1/responses", {"input": "x", "previous_response_id": "resp_0"})[:2],
            404, "previous_response_id 'resp_0' not found or expired")
    with pytest.raises(openai.BadRequestError):
        client(stories).responses.create(model="x", input=[{"type": "bogus"}])
