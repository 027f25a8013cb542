"""test_tool_choice.py — tool_choice that forces a call ("required" / a named function),
on the default real model (Qwen2.5-Coder-0.5B, Hermes-style template), through chat
completions (SDK, stream and not), Anthropic Messages ({type: any} / {type: tool}) and
Responses ("required" / {type: function, name}). The prompts would not call a tool on their
own: the forced generation starts inside the call markup.
"""
import json

import anthropic
import openai
import pytest

from conftest import sse_events

TOOLS = [{"type": "function", "function": {
    "name": "get_weather", "description": "Current weather for a city.",
    "parameters": {"type": "object", "properties": {"city": {"type": "string"}},
                   "required": ["city"]}}},
    {"type": "function", "function": {
        "name": "add", "description": "Add two integers.",
        "parameters": {"type": "object", "properties": {"a": {"type": "integer"},
                                                        "b": {"type": "integer"}},
                       "required": ["a", "b"]}}}]
MSG = [{"role": "user", "content": "Say hello to me in French, please."}]


def test_chat_required_and_named(qwen):
    c = openai.OpenAI(base_url=qwen.base + "/v1", api_key="x")
    free = c.chat.completions.create(model="m", messages=MSG, tools=TOOLS, max_tokens=40,
                                     temperature=0)
    assert free.choices[0].finish_reason == "stop" and not free.choices[0].message.tool_calls
    # "required" with one declared tool calls that tool even for a greeting
    r = c.chat.completions.create(model="m", messages=MSG, tools=TOOLS[1:],
                                  tool_choice="required", max_tokens=60, temperature=0)
    assert r.choices[0].finish_reason == "tool_calls", r
    assert r.choices[0].message.tool_calls[0].function.name == "add"
    json.loads(r.choices[0].message.tool_calls[0].function.arguments)
    # with several tools the model picks one (a best effort: a small model may name an
    # undeclared function, which then stays content)
    r = c.chat.completions.create(model="m", messages=[{"role": "user", "content": "Add 17 and 25."}],
                                  tools=TOOLS, tool_choice="required", max_tokens=60,
                                  temperature=0)
    assert r.choices[0].finish_reason == "tool_calls", r
    call = r.choices[0].message.tool_calls[0]
    assert call.function.name == "add" and json.loads(call.function.arguments) == {"a": 17, "b": 25}
    r = c.chat.completions.create(model="m", messages=MSG, tools=TOOLS, max_tokens=60,
                                  temperature=0,
                                  tool_choice={"type": "function", "function": {"name": "add"}})
    calls = r.choices[0].message.tool_calls
    assert r.choices[0].finish_reason == "tool_calls" and calls[0].function.name == "add"
    args = json.loads(calls[0].function.arguments)
    assert isinstance(args, dict)
    # streaming: the same call arrives as deltas
    s = list(c.chat.completions.create(
        model="m", messages=MSG, tools=TOOLS, max_tokens=60, temperature=0, stream=True,
        tool_choice={"type": "function", "function": {"name": "add"}}))
    names = [tc.function.name for ch in s for tc in (ch.choices[0].delta.tool_calls or [])
             if tc.function and tc.function.name]
    got = "".join(tc.function.arguments or "" for ch in s
                  for tc in (ch.choices[0].delta.tool_calls or []) if tc.function)
    assert names == ["add"] and json.loads(got) == args
    pieces = [tc.function.arguments for ch in s for tc in (ch.choices[0].delta.tool_calls or [])
              if tc.function and tc.function.arguments]
    assert len(pieces) > 2  # the arguments stream in increments as they are generated
    assert s[-1].choices[0].finish_reason == "tool_calls"


def test_chat_tool_choice_errors(qwen):
    st, raw, _ = qwen.post("/v1/chat/completions", {
        "messages": MSG, "tools": TOOLS, "max_tokens": 4,
        "tool_choice": {"type": "function", "function": {"name": "nope"}}})
    assert st == 400
    assert json.loads(raw)["error"]["message"] == \
        'tool_choice names the function "nope", which is not in tools'


def test_anthropic_any_and_named(qwen):
    c = anthropic.Anthropic(base_url=qwen.base, api_key="x")
    tools = [{"name": t["function"]["name"], "description": t["function"]["description"],
              "input_schema": t["function"]["parameters"]} for t in TOOLS]
    r = c.messages.create(model="m", max_tokens=60,
                          messages=[{"role": "user", "content": "Add 17 and 25."}], tools=tools,
                          tool_choice={"type": "any"}, extra_body={"temperature": 0})
    assert r.stop_reason == "tool_use"
    assert [b.type for b in r.content if b.type == "tool_use"]
    r = c.messages.create(model="m", max_tokens=60, messages=MSG, tools=tools,
                          tool_choice={"type": "tool", "name": "get_weather"},
                          extra_body={"temperature": 0})
    uses = [b for b in r.content if b.type == "tool_use"]
    assert r.stop_reason == "tool_use" and uses[0].name == "get_weather"
    assert isinstance(uses[0].input, dict)


def test_responses_required_and_named(qwen):
    c = openai.OpenAI(base_url=qwen.base + "/v1", api_key="x")
    tools = [{"type": "function", "name": t["function"]["name"],
              "description": t["function"]["description"],
              "parameters": t["function"]["parameters"]} for t in TOOLS]
    r = c.responses.create(model="m", input="Add 17 and 25.", tools=tools,
                           tool_choice="required", max_output_tokens=60, temperature=0)
    assert [o.type for o in r.output if o.type == "function_call"]
    r = c.responses.create(model="m", input=MSG[0]["content"], tools=tools,
                           tool_choice={"type": "function", "name": "add"},
                           max_output_tokens=60, temperature=0)
    fc = [o for o in r.output if o.type == "function_call"]
    assert fc and fc[0].name == "add"
