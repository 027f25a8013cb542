"""test_thinking.py — enable_thinking precedence and the reasoning/content split, on
stories260K served through real think-tag chat templates (Qwen3, DeepSeek-R1 distill).
"""
import json
import os

import pytest

from conftest import FIXTURES, STORIES, Server, sse_events

T = os.path.join(FIXTURES, "chat-templates")
MSGS = [{"role": "user", "content": "Once upon a time"}]


def prompt_tokens(srv, **kw):
    body = {"messages": MSGS, "max_tokens": 1, "temperature": 0}
    body.update(kw)
    st, raw, _ = srv.post("/v1/chat/completions", body)
    assert st == 200, raw
    return json.loads(raw)["usage"]["prompt_tokens"]


@pytest.fixture(scope="module")
def qwen3_tmpl():
    s = Server(STORIES, "--chat-template", os.path.join(T, "Qwen-Qwen3-0.6B.jinja"))
    yield s
    assert s.stop() == 0


def test_thinking_precedence(qwen3_tmpl):
    s = qwen3_tmpl
    on = prompt_tokens(s)  # template default: thinking on, no empty think block
    off = prompt_tokens(s, chat_template_kwargs={"enable_thinking": False})
    assert off > on  # "<think>\n\n</think>\n\n" was added
    assert prompt_tokens(s, reasoning_effort="none") == off
    assert prompt_tokens(s, reasoning_effort="high") == on
    # request kwargs beat reasoning_effort
    assert prompt_tokens(s, reasoning_effort="none",
                         chat_template_kwargs={"enable_thinking": True}) == on
    m = json.loads(s.get("/v1/models")[1])["data"][0]
    assert m["reasoning"] is True


def test_constrained_optional_think_block(qwen3_tmpl):
    """Qwen3's prompt leaves no block open: under a constraint the model may still open one
    itself as its first output (issue 26). "<" (stories id 504) is pushed to the top: with
    thinking on it starts "<think>" (the mask then allows only the marker's rest) and the
    block's text is free (it never closes here: all reasoning); with thinking off the
    opening is not allowed and the output is one of the choices."""
    body = {"messages": MSGS, "max_tokens": 12, "temperature": 0,
            "guided_choice": ["yes", "no"], "logit_bias": {"504": 100}}
    st, raw, _ = qwen3_tmpl.post("/v1/chat/completions", body)
    assert st == 200, raw
    msg = json.loads(raw)["choices"][0]["message"]
    assert not msg["content"] and msg["reasoning_content"].startswith("<<"), msg
    for off in ({"chat_template_kwargs": {"enable_thinking": False}},
                {"reasoning_effort": "none"}):
        st, raw, _ = qwen3_tmpl.post("/v1/chat/completions", {**body, **off})
        assert st == 200, raw
        ch = json.loads(raw)["choices"][0]
        assert ch["message"]["content"] in ("yes", "no") and ch["finish_reason"] == "stop", ch
        assert not ch["message"].get("reasoning_content"), ch
    body["stream"] = True  # streamed: the same split
    st, raw, _ = qwen3_tmpl.post("/v1/chat/completions", body)
    deltas = [json.loads(e)["choices"][0]["delta"] for e in sse_events(raw)[:-1]]
    assert "".join(d.get("reasoning_content") or "" for d in deltas) == msg["reasoning_content"]
    assert not "".join(d.get("content") or "" for d in deltas)


def test_single_call_stop_skips_the_think_block(qwen3_tmpl):
    """parallel_tool_calls false ends the generation at the first call's "</tool_call>", but
    not at one inside a think block: there it is reasoning, not a call. The text is forced
    by a choice; with thinking off the constraint applies from the first token, so it can
    open the block itself (the output splitter, and so the stop, still take it as
    reasoning). With parallel calls on, the whole text is written: more tokens, two calls."""
    call = lambda n: '<tool_call>\n{"name": "%s", "arguments": {}}\n</tool_call>' % n
    text = "<think>a</tool_call>b</tools>c</think>\n" + call("f") + "\n" + call("g")
    tools = [{"type": "function", "function": {"name": n, "parameters": {"type": "object"}}}
             for n in "fg"]
    out = {}
    for ptc in (False, True):
        body = {"messages": MSGS, "tools": tools, "max_tokens": 200, "temperature": 0,
                "guided_choice": [text], "parallel_tool_calls": ptc,
                "chat_template_kwargs": {"enable_thinking": False}}
        st, raw, _ = qwen3_tmpl.post("/v1/chat/completions", body)
        assert st == 200, raw
        out[ptc] = j = json.loads(raw)
        ch = j["choices"][0]
        assert ch["message"]["reasoning_content"] == "a</tool_call>b</tools>c", ch
        assert ch["finish_reason"] == "tool_calls", ch
        names = [c["function"]["name"] for c in ch["message"]["tool_calls"]]
        assert names == (["f", "g"] if ptc else ["f"]), ch
    # the stop fired after the first call: the second was never written
    assert out[False]["usage"]["completion_tokens"] < out[True]["usage"]["completion_tokens"]


def test_server_thinking_flag():
    s = Server(STORIES, "--chat-template", os.path.join(T, "Qwen-Qwen3-0.6B.jinja"),
               "--thinking", "false")
    try:
        off = prompt_tokens(s)
        assert prompt_tokens(s, reasoning_effort="low") < off  # request beats the flag
        assert prompt_tokens(s, chat_template_kwargs={"enable_thinking": False}) == off
    finally:
        assert s.stop() == 0


def test_prompt_opened_think_block_is_reasoning():
    """With thinking on, this R1-distill template ends the prompt with "<think>\\n":
    everything the model writes (stories never closes the block) is reasoning, streaming and
    not. With thinking off it closes the block in the prompt and the output is content."""
    s = Server(STORIES, "--chat-template",
               os.path.join(T, "deepseek-ai-DeepSeek-R1-Distill-Qwen-32B.jinja"))
    try:
        body = {"messages": MSGS, "max_tokens": 20, "temperature": 0}
        st, raw, _ = s.post("/v1/chat/completions", body)
        off = json.loads(raw)["choices"][0]["message"]
        assert len(off["content"]) > 10 and "reasoning" not in off
        body["reasoning_effort"] = "medium"
        st, raw, _ = s.post("/v1/chat/completions", body)
        msg = json.loads(raw)["choices"][0]["message"]
        assert msg["content"] == "" and len(msg["reasoning"]) > 10
        assert msg["reasoning_content"] == msg["reasoning"]
        body["stream"] = True
        st, raw, _ = s.post("/v1/chat/completions", body)
        deltas = [json.loads(e)["choices"][0]["delta"] for e in sse_events(raw)[:-1]]
        assert "".join(d.get("reasoning", "") for d in deltas) == msg["reasoning"]
        assert all(d.get("reasoning_content") == d.get("reasoning") for d in deltas)
        assert not "".join(d.get("content", "") for d in deltas)
    finally:
        assert s.stop() == 0
