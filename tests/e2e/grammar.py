"""grammar.py — replay a recorded SSE stream and assert the event order each protocol
requires; return what the stream assembles to, so tests can compare it with the
non-streaming answer.

- chat_stream(body): OpenAI chat completions (role chunk, deltas, one finish chunk with
  usage, [DONE]; tool_calls[i] open with id+name, then only argument pieces).
- anthropic_stream(body): Anthropic Messages (message_start, pings, content blocks opened,
  delta'd with the block's own delta type and closed in index order, thinking closed by a
  signature_delta, one message_delta, message_stop last).
- responses_stream(body): OpenAI Responses (sequence numbers 0..n-1, created, in_progress,
  each output item added -> its part/text/arguments events -> done, response.completed last).
"""
import json


def named_events(body):
    """SSE body -> [(event, data dict)]; every frame must have both lines."""
    out = []
    for block in body.decode().split("\n\n"):
        if not block.strip():
            continue
        ev = data = None
        for line in block.split("\n"):
            if line.startswith("event: "):
                ev = line[7:]
            elif line.startswith("data: "):
                data = json.loads(line[6:])
        assert ev is not None and data is not None, block
        out.append((ev, data))
    return out


def chat_stream(body):
    frames = [b for b in body.decode().split("\n\n") if b.strip()]
    assert frames and frames[-1] == "data: [DONE]", frames[-1:]
    chunks = [json.loads(f[6:]) for f in frames[:-1]]
    assert all(f.startswith("data: ") for f in frames)
    first = chunks[0]["choices"][0]
    assert first["delta"] == {"role": "assistant", "content": "", "refusal": None}
    assert first["finish_reason"] is None
    ids = {c["id"] for c in chunks}
    assert len(ids) == 1
    content, reasoning, calls = "", "", []
    for c in chunks[1:-1]:
        ch = c["choices"][0]
        assert ch["finish_reason"] is None and "usage" not in c
        d = ch["delta"]
        assert d, c
        content += d.get("content", "") or ""
        reasoning += d.get("reasoning", "") or ""
        for tc in d.get("tool_calls", []):
            i = tc["index"]
            if i == len(calls):  # a new call: id, type, name first
                assert tc["id"].startswith("call_") and tc["type"] == "function"
                calls.append({"id": tc["id"], "name": tc["function"]["name"],
                              "arguments": tc["function"].get("arguments", "")})
            else:
                assert i == len(calls) - 1, "calls arrive in order, one at a time"
                assert "id" not in tc and set(tc["function"]) == {"arguments"}
                calls[i]["arguments"] += tc["function"]["arguments"]
    last = chunks[-1]
    assert last["choices"][0]["delta"] == {} and last["choices"][0]["finish_reason"]
    assert "usage" in last
    if calls:
        assert last["choices"][0]["finish_reason"] == "tool_calls"
        for c in calls:
            json.loads(c["arguments"])
    return {"content": content, "reasoning": reasoning, "tool_calls": calls,
            "finish_reason": last["choices"][0]["finish_reason"], "usage": last["usage"]}


DELTA_FOR = {"text": {"text_delta"}, "thinking": {"thinking_delta", "signature_delta"},
             "tool_use": {"input_json_delta"}}


def anthropic_stream(body):
    evs = named_events(body)
    for name, data in evs:
        assert data["type"] == name, (name, data)
    names = [n for n, _ in evs]
    assert names[0] == "message_start" and names[-1] == "message_stop", names
    assert names.count("message_delta") == 1 and names[-2] == "message_delta", names
    msg = evs[0][1]["message"]
    assert msg["id"].startswith("msg_") and msg["content"] == [] and msg["stop_reason"] is None
    blocks, open_i, sig_seen = [], None, False
    for name, d in evs[1:-2]:
        if name == "ping":
            continue
        if name == "content_block_start":
            assert open_i is None, "a block starts only after the previous one stopped"
            assert d["index"] == len(blocks)
            b = dict(d["content_block"])
            if b["type"] == "tool_use":
                assert b["input"] == {} and b["id"] and b["name"]
                b["_json"] = ""
            blocks.append(b)
            open_i, sig_seen = d["index"], False
        elif name == "content_block_delta":
            assert d["index"] == open_i
            b = blocks[open_i]
            t = d["delta"]["type"]
            assert t in DELTA_FOR[b["type"]], (b["type"], t)
            assert not sig_seen, "signature_delta is the last delta of a thinking block"
            if t == "text_delta":
                b["text"] += d["delta"]["text"]
            elif t == "thinking_delta":
                b["thinking"] += d["delta"]["thinking"]
            elif t == "signature_delta":
                sig_seen = True
            else:
                b["_json"] += d["delta"]["partial_json"]
        elif name == "content_block_stop":
            assert d["index"] == open_i
            if blocks[open_i]["type"] == "thinking":
                assert sig_seen, "a thinking block ends with a signature_delta"
            open_i = None
        else:
            raise AssertionError(f"unexpected event {name}")
    assert open_i is None, "every block is stopped before message_delta"
    assert blocks, "at least one content block"
    for b in blocks:
        if b["type"] == "tool_use":
            b["input"] = json.loads(b.pop("_json") or "{}")
    md = evs[-2][1]
    assert md["delta"]["stop_reason"] in ("end_turn", "max_tokens", "stop_sequence", "tool_use")
    if any(b["type"] == "tool_use" for b in blocks):
        assert md["delta"]["stop_reason"] == "tool_use"
    return {"content": blocks, "stop_reason": md["delta"]["stop_reason"],
            "stop_sequence": md["delta"]["stop_sequence"], "usage": md["usage"],
            "input_tokens_at_start": msg["usage"]["input_tokens"],
            "usage_at_start": msg["usage"]}


def responses_stream(body):
    evs = named_events(body)
    for i, (name, data) in enumerate(evs):
        assert data["type"] == name and data["sequence_number"] == i, (i, name, data)
    names = [n for n, _ in evs]
    assert names[:2] == ["response.created", "response.in_progress"], names[:3]
    assert names[-1] == "response.completed" and names.count("response.completed") == 1
    rid = evs[0][1]["response"]["id"]
    assert rid.startswith("resp_") and evs[0][1]["response"]["status"] == "in_progress"
    items, cur, k = [], None, 2
    while k < len(evs) - 1:
        name, d = evs[k]
        assert name == "response.output_item.added", (k, name)
        assert d["output_index"] == len(items)
        item = d["item"]
        iid = item["id"]
        text = ""
        k += 1
        if item["type"] == "message":
            assert evs[k][0] == "response.content_part.added"
            k += 1
            while evs[k][0] == "response.output_text.delta":
                assert evs[k][1]["item_id"] == iid
                text += evs[k][1]["delta"]
                k += 1
            assert evs[k][0] == "response.output_text.done" and evs[k][1]["text"] == text
            assert evs[k + 1][0] == "response.content_part.done"
            assert evs[k + 1][1]["part"]["text"] == text
            k += 2
        elif item["type"] == "function_call":
            assert item["call_id"].startswith("call_") and item["name"]
            while evs[k][0] == "response.function_call_arguments.delta":
                assert evs[k][1]["item_id"] == iid
                text += evs[k][1]["delta"]
                k += 1
            assert evs[k][0] == "response.function_call_arguments.done"
            assert evs[k][1]["arguments"] == text
            json.loads(text)
            k += 1
        elif item["type"] == "custom_tool_call":
            assert item["call_id"].startswith("call_") and item["name"]
            while evs[k][0] == "response.custom_tool_call_input.delta":
                assert evs[k][1]["item_id"] == iid
                text += evs[k][1]["delta"]
                k += 1
            assert evs[k][0] == "response.custom_tool_call_input.done"
            assert evs[k][1]["input"] == text
            k += 1
        elif item["type"] == "reasoning":
            while evs[k][0] == "response.reasoning_summary_text.delta":
                text += evs[k][1]["delta"]
                k += 1
            assert evs[k][0] == "response.reasoning_summary_text.done"
            assert evs[k][1]["text"] == text
            k += 1
        else:
            raise AssertionError(item)
        assert evs[k][0] == "response.output_item.done" and evs[k][1]["item"]["id"] == iid
        items.append(evs[k][1]["item"])
        k += 1
    final = evs[-1][1]["response"]
    assert final["id"] == rid and final["status"] in ("completed", "incomplete")
    assert final["output"] == items
    return final
