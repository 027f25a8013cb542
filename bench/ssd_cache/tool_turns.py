#!/usr/bin/env python3
"""tool_turns.py — prefix reuse over a 20-turn chat with tool calls (issue 27's "reuses >= 99% of
all previous turns' tokens at every turn", here with tools), on the 0.5B with --ssd-cache.
Every third turn forces a call (tool_choice naming the function); the model may call again
on its own; after three calls the turn ends with tool_choice "none". Prints, per request, the
prompt tokens, cached_tokens and the previous request's prompt + completion tokens (what
could be reused) and their ratio; then the worst. Not a test: a probe (see bench/RESULTS.md).
Extra arguments go to `cinfer serve` (e.g. --tool-choice-none-keeps-tools).
"""
import sys, json, os, tempfile
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "tests", "e2e"))
from conftest import Server, QWEN
d = tempfile.mkdtemp()
s = Server(QWEN, "--ssd-cache", d, *sys.argv[1:])
tools = [{"type": "function", "function": {"name": "man_page", "description": "Look up a C library function's man page summary.",
          "parameters": {"type": "object", "properties": {"name": {"type": "string"}}, "required": ["name"]}}}]
msgs = [{"role": "system", "content": "You are a terse assistant for a C programmer. Answer in one or two sentences. " * 3}]
topics = ["malloc", "free", "memcpy", "strtol", "qsort", "fopen", "snprintf", "realloc", "strncpy", "atoi", "fgets", "calloc", "strtok", "printf", "scanf", "memset", "strcmp", "fclose", "getenv", "time"]
prev = None; worst = 1.0; n_req = 0; n_tool = 0
for i, t in enumerate(topics):
    msgs.append({"role": "user", "content": f"Turn {i+1}: what is one pitfall of {t}?"})
    force = i % 3 == 1
    for k in range(4):
        body = {"messages": msgs, "max_tokens": 40, "temperature": 0, "tools": tools}
        if force and k == 0:
            body["tool_choice"] = {"type": "function", "function": {"name": "man_page"}}
        if k == 3:
            body["tool_choice"] = "none"
        st, raw, _ = s.post("/v1/chat/completions", body)
        assert st == 200, raw
        j = json.loads(raw); u = j["usage"]; m = j["choices"][0]["message"]
        c = u["prompt_tokens_details"]["cached_tokens"]; n_req += 1
        if prev:
            worst = min(worst, c / prev)
        print(i, k, "tool" if m.get("tool_calls") else "text", u["prompt_tokens"], c, prev, round(c / prev, 4) if prev else None, flush=True)
        prev = u["prompt_tokens"] + u["completion_tokens"]
        if m.get("tool_calls"):
            n_tool += 1
            msgs.append({"role": "assistant", "content": m.get("content"), "tool_calls": m["tool_calls"]})
            for tc in m["tool_calls"]:
                msgs.append({"role": "tool", "tool_call_id": tc["id"], "content": f"{t}: see the C standard, section 7."})
            continue
        msgs.append({"role": "assistant", "content": m["content"]})
        break
print("worst", worst, "requests", n_req, "tool calls", n_tool, "warm-ups", s.stats()["next_turn_warm"])
s.stop()
