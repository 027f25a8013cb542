"""test_anthropic_cache.py — what Claude-Code-style agents read from the Messages stream
(stories260K): message_start carries the prefix cache's real accounting (the prompt tokens
this request read from the cache and wrote to it), the same numbers as message_delta and as
the non-streaming usage; the three beta fields are accepted with a Warning.
"""
import json

import anthropic

import grammar
from conftest import Server, STORIES, STORIES_TEMPLATE

LONG = ("Once upon a time there was a little girl named Lily. She loved to play outside in "
        "the sun with her dog and her friends every day. ")


def usage_of(events, name):
    for n, d in events:
        if n == name:
            return (d["message"] if name == "message_start" else d)["usage"]
    raise AssertionError(f"no {name}: {events}")


def stream(srv, text):
    st, b, h = srv.post("/v1/messages", {"model": "x", "max_tokens": 4, "temperature": 0,
                                         "stream": True,
                                         "messages": [{"role": "user", "content": text}]})
    assert st == 200, b
    return grammar.named_events(b)


def test_message_start_has_the_real_cache_counts(stories):
    text = LONG + "What did Lily see in the park?"
    first = stream(stories, text)
    s1, d1 = usage_of(first, "message_start"), usage_of(first, "message_delta")
    total = s1["input_tokens"] + s1["cache_read_input_tokens"] + s1["cache_creation_input_tokens"]
    assert total > 32
    assert s1["cache_creation_input_tokens"] > 0  # a new prompt: written to the cache
    again = stream(stories, text)
    s2, d2 = usage_of(again, "message_start"), usage_of(again, "message_delta")
    assert s2["cache_read_input_tokens"] >= 32  # the same prompt again: read from it
    assert s2["input_tokens"] + s2["cache_read_input_tokens"] + \
        s2["cache_creation_input_tokens"] == total
    for s, d in ((s1, d1), (s2, d2)):
        for k in ("input_tokens", "cache_read_input_tokens", "cache_creation_input_tokens"):
            assert s[k] == d[k], (k, s, d)
    # the SDK's stream helper sees them on message_start too
    c = anthropic.Anthropic(base_url=stories.base, api_key="x")
    with c.messages.stream(model="x", max_tokens=4,
                           messages=[{"role": "user", "content": text}]) as st:
        start = next(e for e in st if e.type == "message_start")
        fin = st.get_final_message()
    assert start.message.usage.cache_read_input_tokens == s2["cache_read_input_tokens"]
    assert fin.usage.cache_read_input_tokens == s2["cache_read_input_tokens"]


def test_no_prompt_cache_writes_nothing():
    s = Server(STORIES, "--chat-template", STORIES_TEMPLATE, "--prompt-cache", "0")
    try:
        for _ in range(2):
            u = usage_of(stream(s, LONG), "message_start")
            assert u["cache_read_input_tokens"] == 0 and u["cache_creation_input_tokens"] == 0
            assert u["input_tokens"] > 32
    finally:
        assert s.stop() == 0, s.output()


def test_beta_fields_accepted_with_a_warning(stories):
    st, b, h = stories.post("/v1/messages", {
        "model": "x", "max_tokens": 2, "messages": [{"role": "user", "content": "Hi"}],
        "context_management": {"edits": [{"type": "clear_tool_uses_20250919"}]},
        "container": "c1", "mcp_servers": [{"type": "url", "url": "http://x", "name": "x"}]},
        headers={"anthropic-beta": "context-management-2025-06-27"})
    assert st == 200, b
    w = h.get("Warning", "")
    assert all(f in w for f in ("context_management", "container", "mcp_servers")), h
    assert json.loads(b)["type"] == "message"


def test_metadata_and_service_tier_checked_as_anthropic_does(stories):
    """metadata.user_id (what Claude Code sends) and service_tier are accepted and change
    nothing; anything else in metadata, or another tier, is a 400 in Anthropic's shape."""
    base = {"model": "x", "max_tokens": 3, "temperature": 0,
            "messages": [{"role": "user", "content": "Hi"}]}
    st, b0, _ = stories.post("/v1/messages", base)
    assert st == 200, b0
    ok = {"metadata": {"user_id": "user_" + "a" * 64 + "_session_1"}, "service_tier": "auto"}
    st, b, _ = stories.post("/v1/messages", {**base, **ok})
    assert st == 200, b
    assert json.loads(b)["content"] == json.loads(b0)["content"]
    for extra in ({"metadata": {"user_id": 5}}, {"metadata": {"tag": "x"}}, {"metadata": 3},
                  {"service_tier": "priority"}):
        st, b, _ = stories.post("/v1/messages", {**base, **extra})
        j = json.loads(b)
        assert st == 400 and j["type"] == "error", (extra, b)
        assert j["error"]["type"] == "invalid_request_error", j
