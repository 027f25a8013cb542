"""test_real_model.py — `cinfer serve` on the default real chat model (Qwen2.5-Coder-0.5B
Instruct Q4_K_M from PyPI): the chat-template path end to end, with the openai SDK (the
examples of README.md and docs/ are run by test_docs_examples.py).
"""
import json
import subprocess
import threading

import openai

from conftest import BIN, QWEN, sse_events

MSG = "Write a C function that returns the larger of two ints."


def cli_chat(prompt, n):
    out = subprocess.run([BIN, "run", QWEN, "--chat", "-p", prompt, "-n", str(n), "--temp", "0",
                          "--kv-f16", "-t", "2"], capture_output=True, text=True, check=True)
    return out.stdout.rstrip("\n")


def test_chat_greedy_equals_cli(qwen):
    c = openai.OpenAI(base_url=qwen.base + "/v1", api_key="x")
    r = c.chat.completions.create(model="anything", messages=[{"role": "user", "content": MSG}],
                                  max_tokens=48, temperature=0)
    text = r.choices[0].message.content
    assert r.model == "qwen2.5-coder-0.5b-instruct-Q4_K_M"
    assert "int" in text
    assert text == cli_chat(MSG, 48)
    # the SDK stream reassembles to the same text
    s = list(c.chat.completions.create(model="x", messages=[{"role": "user", "content": MSG}],
                                       max_tokens=48, temperature=0, stream=True))
    assert "".join(ch.choices[0].delta.content or "" for ch in s) == text
    assert s[-1].choices[0].finish_reason == r.choices[0].finish_reason
    assert s[-1].usage.total_tokens == r.usage.total_tokens


def test_eos_finish_and_max_completion_tokens(qwen):
    c = openai.OpenAI(base_url=qwen.base + "/v1", api_key="x")
    r = c.chat.completions.create(model="x", messages=[{"role": "user", "content": "Say just: ok"}],
                                  max_tokens=50, temperature=0)
    assert r.choices[0].finish_reason == "stop" and r.usage.completion_tokens < 50
    r = c.chat.completions.create(model="x", messages=[{"role": "user", "content": MSG}],
                                  max_tokens=50, max_completion_tokens=5, temperature=0)
    assert r.choices[0].finish_reason == "length" and r.usage.completion_tokens == 5


def test_stop_string_and_system_prompt(qwen):
    c = openai.OpenAI(base_url=qwen.base + "/v1", api_key="x")
    msgs = [{"role": "system", "content": "You answer with code only."},
            {"role": "user", "content": MSG}]
    full = c.chat.completions.create(model="x", messages=msgs, max_tokens=40, temperature=0)
    text = full.choices[0].message.content
    assert "(" in text
    cut = c.chat.completions.create(model="x", messages=msgs, max_tokens=40, temperature=0,
                                    stop=["("])
    assert cut.choices[0].message.content == text[:text.index("(")]
    assert cut.choices[0].finish_reason == "stop"


def test_multi_turn_and_tool_messages_render(qwen):
    c = openai.OpenAI(base_url=qwen.base + "/v1", api_key="x")
    msgs = [{"role": "user", "content": "What is 2+2?"},
            {"role": "assistant", "content": None, "tool_calls": [
                {"id": "call_1", "type": "function",
                 "function": {"name": "calc", "arguments": "{\"expr\": \"2+2\"}"}}]},
            {"role": "tool", "tool_call_id": "call_1", "content": "4"},
            {"role": "user", "content": "And the answer was?"}]
    tools = [{"type": "function", "function": {"name": "calc", "description": "evaluate",
                                               "parameters": {"type": "object", "properties": {
                                                   "expr": {"type": "string"}}}}}]
    r = c.chat.completions.create(model="x", messages=msgs, tools=tools, max_tokens=20,
                                  temperature=0)
    assert r.usage.prompt_tokens > 60  # the tool schema and the tool turn were rendered


def test_concurrent_chat_streams_match_solo(qwen):
    qs = ["What is C?", "Name a sorting algorithm.", "What does malloc do?", "Define a struct."]
    solo = {}
    for q in qs:
        st, body, _ = qwen.post("/v1/chat/completions", {"messages": [{"role": "user", "content": q}],
                                                         "max_tokens": 16, "temperature": 0})
        solo[q] = json.loads(body)["choices"][0]["message"]["content"]
    got = {}

    def one(q):
        st, body, _ = qwen.post("/v1/chat/completions", {"messages": [{"role": "user", "content": q}],
                                                         "max_tokens": 16, "temperature": 0,
                                                         "stream": True})
        got[q] = "".join(json.loads(e)["choices"][0]["delta"].get("content", "")
                         for e in sse_events(body)[:-1])

    ts = [threading.Thread(target=one, args=(q,)) for q in qs]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    assert got == solo
