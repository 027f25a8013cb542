"""test_tool_reuse.py — prefix reuse across chat turns with tool calls (issue 27: "reuses >= 99%
of all previous turns' tokens at every turn", with tools), on the real 0.5B.

A call the model writes in the template's own markup is replayed with its sampled ids
(api/genhist.h). A call it writes another way (a bare JSON object) is re-rendered by the
template in the next turn's prompt, so those ids cannot be replayed; the next turn's
warm-up (serve_warm.c) prefills the template's rendering once the reply is out, and the
next turn finds it cached. The bare JSON call is made deterministic with guided_regex (the
model writes it on its own sometimes: bench/ssd_cache/tool_turns.py). The next turn's output
must equal a server's without any cache (the warm prefix is the same input), and with the
warm-up off (CINFER_WARM_NEXT_TURN=0) the reuse falls below 0.99 (the test can fail).
"""
import json
import os
import re
import shutil
import tempfile

import pytest

from conftest import QUICK, QWEN, Server, sse_events, wait_until

pytestmark = pytest.mark.skipif(QUICK, reason="CINFER_E2E_QUICK=1: real-model suite runs in "
                                "the release build only")

TOOLS = [{"type": "function", "function": {
    "name": "man_page", "description": "Look up a C library function's man page summary.",
    "parameters": {"type": "object", "properties": {"name": {"type": "string"}},
                   "required": ["name"]}}}]
SYSTEM = {"role": "system", "content": "You are a terse assistant for a C programmer. Answer in "
          "one or two sentences, plain text. " * 3}


def bare_call(fn):
    """guided_regex for a call written as a bare JSON object (not <tool_call> markup)."""
    return re.escape('{"name": "man_page", "arguments": {"name": "%s"}}' % fn)


@pytest.fixture(scope="module")
def model():
    if not os.path.exists(QWEN):
        pytest.skip("the 0.5B model is not fetched")
    return QWEN


def ask(s, msgs, stream=False, **kw):
    """One chat request; returns (assistant message as a client sends it back, usage)."""
    body = {"messages": msgs, "max_tokens": 16, "temperature": 0, "tools": TOOLS}
    body.update(kw)
    if stream:
        body["stream"] = True
    st, raw, _ = s.post("/v1/chat/completions", body)
    assert st == 200, raw
    if not stream:
        j = json.loads(raw)
        m = j["choices"][0]["message"]
        out = {"role": "assistant", "content": m.get("content")}
        if m.get("tool_calls"):
            out["tool_calls"] = m["tool_calls"]
        return out, j["usage"]
    text, calls, usage = "", {}, None
    for d in sse_events(raw):
        if d == "[DONE]":
            continue
        j = json.loads(d)
        usage = j.get("usage") or usage
        for ch in j.get("choices", []):
            delta = ch.get("delta", {})
            text += delta.get("content") or ""
            for c in delta.get("tool_calls") or []:
                k = calls.setdefault(c["index"], {"id": None, "type": "function",
                                                  "function": {"name": "", "arguments": ""}})
                k["id"] = c.get("id") or k["id"]
                f = c.get("function") or {}
                k["function"]["name"] += f.get("name") or ""
                k["function"]["arguments"] += f.get("arguments") or ""
    out = {"role": "assistant", "content": text or None}
    if calls:
        out["tool_calls"] = [calls[i] for i in sorted(calls)]
    return out, usage


def warm_settled(s):
    w = s.stats()["next_turn_warm"]
    return w["finished"] >= w["submitted"] and w


def bare_call_then_answer(s, stream=False, warm=True):
    """A bare-JSON call, its result, the answer: (call message, reuse of the answer's
    request, the answer's message)."""
    msgs = [SYSTEM, {"role": "user", "content": "What does malloc return on failure?"}]
    m, u = ask(s, msgs, stream, guided_regex=bare_call("malloc"), max_tokens=40)
    assert m.get("tool_calls") and m["tool_calls"][0]["function"]["name"] == "man_page", m
    prev = u["prompt_tokens"] + u["completion_tokens"]
    if warm:
        w = wait_until(lambda: warm_settled(s), 120, "the warm-up to finish")
        assert w["submitted"] == 1 and w["tokens"] > u["prompt_tokens"], w
    msgs += [m, {"role": "tool", "tool_call_id": m["tool_calls"][0]["id"],
                 "content": "malloc: returns NULL on failure and sets errno to ENOMEM."}]
    a, u2 = ask(s, msgs, stream)
    return m, u2["prompt_tokens_details"]["cached_tokens"] / prev, a


@pytest.mark.parametrize("stream", [False, True])
def test_bare_json_call_next_turn_reuses_the_template_rendering(model, stream):
    s = Server(model)
    try:
        _, reuse, answer = bare_call_then_answer(s, stream)
        assert reuse >= 0.99, reuse
    finally:
        assert s.stop() == 0, s.output()
    if stream:
        return
    # the same conversation on a server with no cache: the same answer (the warm prefix is
    # the prompt the model would have read anyway)
    c = Server(model, "--prompt-cache", "0")
    try:
        _, _, cold = bare_call_then_answer(c, warm=False)
        assert c.stats()["next_turn_warm"]["submitted"] == 0  # no cache, no warm-up
        assert cold["content"] == answer["content"], (cold, answer)
    finally:
        c.stop()


def test_without_the_warm_up_the_bare_call_breaks_reuse(model):
    s = Server(model, env={"CINFER_WARM_NEXT_TURN": "0"})
    try:
        _, reuse, _ = bare_call_then_answer(s, warm=False)
        assert s.stats()["next_turn_warm"]["submitted"] == 0
        assert reuse < 0.99, reuse  # the call's sampled ids are not what the template renders
    finally:
        s.stop()


def test_20_turns_with_tool_calls_reuse_previous_turns(model):
    """20 user turns on --ssd-cache; every third one starts with a call, alternately forced in
    the template's markup (tool_choice naming the function) and as a bare JSON object; the
    model may call again on its own (at most twice more). Every request after the first
    reuses >= 99% of the previous request's prompt + completion tokens."""
    d = tempfile.mkdtemp(prefix="cinfer-tool-reuse-")
    s = Server(model, "--ssd-cache", d)
    topics = ["malloc", "free", "memcpy", "strtol", "qsort", "fopen", "snprintf", "realloc",
              "strncpy", "atoi", "fgets", "calloc", "strtok", "printf", "scanf", "memset",
              "strcmp", "fclose", "getenv", "time"]
    msgs = [SYSTEM]
    prev, worst, n_req, kinds = None, 1.0, 0, set()
    try:
        for i, t in enumerate(topics):
            msgs.append({"role": "user", "content": f"Turn {i + 1}: one pitfall of {t}?"})
            for k in range(3):
                kw = {}
                if i % 3 == 1 and k == 0:
                    if i % 6 == 1:
                        kw["tool_choice"] = {"type": "function", "function": {"name": "man_page"}}
                    else:
                        kw["guided_regex"] = bare_call(t)
                        kw["max_tokens"] = 40
                m, u = ask(s, msgs, **kw)
                n_req += 1
                if prev is not None:
                    frac = u["prompt_tokens_details"]["cached_tokens"] / prev
                    worst = min(worst, frac)
                    assert frac >= 0.99, (i, k, kw, u, prev)
                prev = u["prompt_tokens"] + u["completion_tokens"]
                msgs.append(m)
                if not m.get("tool_calls"):
                    break
                kinds.add("forced" if "tool_choice" in kw else "bare" if kw else "auto")
                wait_until(lambda: warm_settled(s), 120, "the warm-up to finish")
                for c in m["tool_calls"]:
                    msgs.append({"role": "tool", "tool_call_id": c["id"],
                                 "content": f"{t}: see the C standard, section 7."})
        assert {"forced", "bare"} <= kinds, kinds
        print(f"{n_req} requests, calls {sorted(kinds)}: the worst reused {worst:.4f}")
    finally:
        assert s.stop() == 0, s.output()
        shutil.rmtree(d, ignore_errors=True)


def call_schema(fn):
    """An output schema whose only value is a bare JSON call of man_page(fn)."""
    return {"type": "object", "additionalProperties": False, "required": ["name", "arguments"],
            "properties": {"name": {"const": "man_page"}, "arguments": {
                "type": "object", "additionalProperties": False, "required": ["name"],
                "properties": {"name": {"const": fn}}}}}


def test_bare_json_call_next_turn_reuses_on_messages_and_responses(model):
    """The same through the Anthropic Messages API (tool_use blocks sent back) and the
    Responses API (function_call items sent back): the call is forced as a bare JSON object
    by an output schema; the next turn reuses >= 0.99 of the previous request's tokens."""
    s = Server(model)
    params = {"type": "object", "properties": {"name": {"type": "string"}}, "required": ["name"]}
    desc = "Look up a C library function's man page summary."
    try:
        # Anthropic: usage counts uncached input apart from cache reads and writes
        tools = [{"name": "man_page", "description": desc, "input_schema": params}]
        msgs = [{"role": "user", "content": "What does calloc return on failure?"}]
        body = {"model": "m", "system": SYSTEM["content"], "messages": msgs, "max_tokens": 40,
                "temperature": 0, "tools": tools,
                "output_format": {"type": "json_schema", "schema": call_schema("calloc")}}
        st, raw, _ = s.post("/v1/messages", body)
        assert st == 200, raw
        j = json.loads(raw)
        u = j["usage"]
        prev = (u["input_tokens"] + u["cache_read_input_tokens"] +
                u["cache_creation_input_tokens"] + u["output_tokens"])
        tu = [b for b in j["content"] if b["type"] == "tool_use"]
        assert tu, j
        w = wait_until(lambda: warm_settled(s), 120, "the warm-up to finish")
        assert w["submitted"] == 1, w
        msgs += [{"role": "assistant", "content": j["content"]},
                 {"role": "user", "content": [{"type": "tool_result", "tool_use_id": tu[0]["id"],
                                               "content": "calloc: NULL, errno ENOMEM."}]}]
        del body["output_format"]
        body["max_tokens"] = 8
        st, raw, _ = s.post("/v1/messages", body)
        assert st == 200, raw
        u = json.loads(raw)["usage"]
        assert u["cache_read_input_tokens"] >= 0.99 * prev, (u, prev)

        # Responses: function_call items and their outputs sent back as input
        rtools = [{"type": "function", "name": "man_page", "description": desc,
                   "parameters": params}]
        inp = [{"role": "user", "content": "What does realloc return on failure?"}]
        body = {"model": "m", "instructions": SYSTEM["content"], "input": inp,
                "max_output_tokens": 40, "temperature": 0, "tools": rtools,
                "text": {"format": {"type": "json_schema", "name": "call",
                                    "schema": call_schema("realloc")}}}
        st, raw, _ = s.post("/v1/responses", body)
        assert st == 200, raw
        j = json.loads(raw)
        prev = j["usage"]["input_tokens"] + j["usage"]["output_tokens"]
        fc = [o for o in j["output"] if o["type"] == "function_call"]
        assert fc, j
        w = wait_until(lambda: warm_settled(s), 120, "the warm-up to finish")
        assert w["submitted"] == 2, w
        inp += [fc[0], {"type": "function_call_output", "call_id": fc[0]["call_id"],
                        "output": "realloc: NULL, the block is left alone."}]
        del body["text"]
        body["max_output_tokens"] = 8
        st, raw, _ = s.post("/v1/responses", body)
        assert st == 200, raw
        u = json.loads(raw)["usage"]
        assert u["input_tokens_details"]["cached_tokens"] >= 0.99 * prev, (u, prev)
    finally:
        assert s.stop() == 0, s.output()


def test_tool_choice_none_drops_the_tools_by_default_and_keeps_them_on_request(model):
    """tool_choice "none": by default the tools are left out of the prompt, as the reference
    server does (the prompt is shorter and shares only the system text with the turns before);
    with --tool-choice-none-keeps-tools the prompt renders them, so it reuses >= 0.99 of the
    previous request, no call is parsed, and the call markup's token cannot be sampled even
    when logit_bias pushes it (without the flag the same push makes the model write it)."""
    msgs = [SYSTEM, {"role": "user", "content": "What does strtol do with leading spaces?"}]
    for keep in (False, True):
        s = Server(model, *(["--tool-choice-none-keeps-tools"] if keep else []))
        try:
            st, raw, _ = s.post("/tokenize", {"prompt": "<tool_call>", "add_special_tokens": False})
            assert st == 200, raw
            ids = json.loads(raw)["tokens"]
            assert len(ids) == 1, ids
            push = {str(ids[0]): 100}
            a, u = ask(s, msgs)
            prev = u["prompt_tokens"] + u["completion_tokens"]
            more = msgs + [a, {"role": "user", "content": "And with a plus sign?"}]
            m, u2 = ask(s, more, tool_choice="none", logit_bias=push)
            assert "tool_calls" not in m, m
            reuse = u2["prompt_tokens_details"]["cached_tokens"] / prev
            if keep:
                assert "<tool_call>" not in (m["content"] or ""), m  # banned
                assert reuse >= 0.99, (u, u2)
            else:
                assert "<tool_call>" in (m["content"] or ""), m  # the push works: not banned
                assert u2["prompt_tokens"] < prev - 50, (u, u2)  # no tools block
                assert reuse < 0.5, (u, u2)
        finally:
            assert s.stop() == 0, s.output()
