"""test_litellm.py — LiteLLM (PyPI) pointed at cinfer with the `openai/` prefix (cinfer's
OpenAI routes) and the `anthropic/` prefix (its Anthropic Messages route): bodies, streams,
usage, n > 1, a completions prompt array on stories260K; a forced tool call through both
prefixes on the default real model. LiteLLM reads its local model-cost map (no fetch).
"""
import json
import os

import pytest

from conftest import QUICK

os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")
litellm = pytest.importorskip("litellm")

MSG = [{"role": "user", "content": "Once upon a time"}]


def both(srv):
    """(model, api_base) for each prefix."""
    return [("openai/stories260K", srv.base + "/v1"), ("anthropic/stories260K", srv.base)]


def test_chat_body_and_stream_both_prefixes(stories):
    st, b, _ = stories.post("/v1/chat/completions",
                            {"messages": MSG, "max_tokens": 8, "temperature": 0})
    want = json.loads(b)["choices"][0]["message"]["content"]
    for model, base in both(stories):
        r = litellm.completion(model=model, api_base=base, api_key="x", messages=MSG,
                               max_tokens=8, temperature=0)
        assert r.choices[0].message.content == want, model
        assert r.usage.completion_tokens == 8 and r.usage.prompt_tokens > 0
        chunks = list(litellm.completion(model=model, api_base=base, api_key="x", messages=MSG,
                                         max_tokens=8, temperature=0, stream=True))
        assert "".join(c.choices[0].delta.content or "" for c in chunks) == want, model
    # Anthropic's usage carries the prompt-cache accounting through LiteLLM
    r = litellm.completion(model="anthropic/stories260K", api_base=stories.base, api_key="x",
                           messages=[{"role": "user", "content": "A new prompt for the cache"}],
                           max_tokens=2, temperature=0)
    assert r.usage.cache_creation_input_tokens + r.usage.cache_read_input_tokens > 0


def test_openai_n_and_prompt_array(stories):
    r = litellm.completion(model="openai/stories260K", api_base=stories.base + "/v1",
                           api_key="x", messages=MSG, max_tokens=6, temperature=1.0, n=3,
                           seed=9)
    assert [c.index for c in r.choices] == [0, 1, 2]
    r = litellm.text_completion(model="openai/stories260K", api_base=stories.base + "/v1",
                                api_key="x", prompt=["Once upon a time", "The cat"],
                                max_tokens=4, temperature=0)
    assert [c.index for c in r.choices] == [0, 1]
    st, b, _ = stories.post("/v1/completions",
                            {"prompt": "The cat", "max_tokens": 4, "temperature": 0})
    assert r.choices[1].text == json.loads(b)["choices"][0]["text"]


@pytest.mark.skipif(QUICK, reason="CINFER_E2E_QUICK=1: real-model suite in the release build")
def test_forced_tool_call_both_prefixes(qwen):
    tools = [{"type": "function", "function": {
        "name": "get_weather", "description": "Current weather of a city",
        "parameters": {"type": "object", "properties": {"city": {"type": "string"}},
                       "required": ["city"]}}}]
    msgs = [{"role": "user", "content": "What is the weather in Paris?"}]
    for model, base in [("openai/m", qwen.base + "/v1"), ("anthropic/m", qwen.base)]:
        r = litellm.completion(model=model, api_base=base, api_key="x", messages=msgs,
                               tools=tools, max_tokens=64, temperature=0,
                               tool_choice={"type": "function",
                                            "function": {"name": "get_weather"}})
        calls = r.choices[0].message.tool_calls
        assert calls and calls[0].function.name == "get_weather", (model, r)
        assert "city" in json.loads(calls[0].function.arguments), (model, r)
        assert r.choices[0].finish_reason == "tool_calls", (model, r)
