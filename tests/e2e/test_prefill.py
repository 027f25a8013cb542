"""test_prefill.py — a final assistant message continues: Anthropic Messages prefill, and the
same through chat completions' `continue_final_message` (as vLLM names it), on the default
real model. The reply is the continuation only, and it equals the continuation the model
writes after its own unprefilled answer reached the same point.
"""
import json

import anthropic

Q = "List the first eight prime numbers, comma separated, nothing else."


def test_anthropic_prefill_continues(qwen):
    c = anthropic.Anthropic(base_url=qwen.base, api_key="x")
    full = c.messages.create(model="m", max_tokens=30, messages=[{"role": "user", "content": Q}],
                             extra_body={"temperature": 0}).content[0].text
    assert full.startswith("2, 3, 5,")
    r = c.messages.create(model="m", max_tokens=30,
                          messages=[{"role": "user", "content": Q},
                                    {"role": "assistant", "content": "2, 3, 5,"}],
                          extra_body={"temperature": 0})
    cont = r.content[0].text
    assert r.stop_reason == "end_turn"
    assert "2, 3, 5," + cont == full  # the same greedy path, without the prefill repeated
    assert r.usage.cache_read_input_tokens > 0  # the rendered prompt is a prefix of this one
    # the same through chat completions
    st, raw, _ = qwen.post("/v1/chat/completions", {
        "messages": [{"role": "user", "content": Q}, {"role": "assistant", "content": "2, 3, 5,"}],
        "continue_final_message": True, "max_tokens": 30, "temperature": 0})
    assert st == 200 and json.loads(raw)["choices"][0]["message"]["content"] == cont
    st, raw, _ = qwen.post("/v1/chat/completions", {
        "messages": [{"role": "user", "content": Q}], "continue_final_message": True,
        "max_tokens": 3})
    assert st == 400
    assert json.loads(raw)["error"]["message"] == \
        "continue_final_message needs a final assistant message with text"
