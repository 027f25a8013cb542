"""test_stories_api.py — the OpenAI surface of `cinfer serve` on stories260K (fast).

Drives the real binary with raw HTTP and with the official `openai` SDK: routes, every
sampler knob, stop strings, logprobs against the llama2.c logits, validation messages,
streaming shape, concurrency.
"""
import json
import math
import os
import subprocess
import threading

import openai
import pytest

from conftest import BIN, FIXTURES, STORIES, http, sse_events

EXPECTED = json.load(open(os.path.join(FIXTURES, "stories260K", "expected_greedy.json")))
CASE = EXPECTED["cases"][0]  # "Once upon a time"


def complete(srv, **kw):
    body = {"prompt": CASE["prompt"], "max_tokens": 24, "temperature": 0}
    body.update(kw)
    st, raw, _ = srv.post("/v1/completions", body)
    assert st == 200, raw
    return json.loads(raw)


def cli_run(prompt, n):
    out = subprocess.run([BIN, "run", STORIES, "-p", prompt, "-n", str(n), "--temp", "0",
                          "-t", "2"], capture_output=True, text=True, check=True)
    return out.stdout.rstrip("\n")


# ---- routes ------------------------------------------------------------------------------

def test_health_exact(stories):
    st, body, hdr = stories.get("/health")
    assert st == 200 and body == b'{"status": "ok"}'


def test_index_models(stories):
    st, body, _ = stories.get("/v1")
    j = json.loads(body)
    assert st == 200 and j["name"] == "cinfer" and j["model"] == "stories260K"
    assert "POST /v1/chat/completions" in j["endpoints"]
    assert "POST /v1/embeddings" in j["endpoints"]
    st, body, _ = stories.get("/v1/models")
    j = json.loads(body)
    m = j["data"][0]
    assert j["object"] == "list" and m["id"] == "stories260K"
    assert m["context_window"] == 2048 and m["owned_by"] == "cinfer"
    for k in ("reasoning", "vision", "audio", "gen_defaults"):
        assert k in m
    st, body, _ = stories.get("/v1/models/stories260K")
    assert st == 200 and json.loads(body)["id"] == "stories260K"
    st, body, _ = stories.get("/v1/models/nope")
    assert st == 404 and "not found" in json.loads(body)["error"]["message"]


def test_unknown_path_and_method(stories):
    st, body, _ = stories.get("/v2/whatever")
    assert st == 404 and json.loads(body)["error"]["message"] == "not found"
    st, body, _ = http("GET", stories.base + "/v1/chat/completions")
    assert st == 405


def test_sdk_models(stories):
    c = openai.OpenAI(base_url=stories.base + "/v1", api_key="x")
    ids = [m.id for m in c.models.list().data]
    assert ids[0] == "stories260K"


# ---- generation: greedy equals the CLI and llama2.c -----------------------------------------

def test_completion_greedy_matches_cli_and_llama2c(stories):
    j = complete(stories, max_tokens=40, logprobs=True)
    ch = j["choices"][0]
    assert j["object"] == "text_completion" and j["id"].startswith("cmpl-")
    assert ch["finish_reason"] == "length"
    ids = [e["id"] for e in ch["logprobs"]["content"]]
    assert ids == CASE["greedy_generated_ids"][:40]
    assert ch["text"] == cli_run(CASE["prompt"], 40)  # `cinfer run` prints the continuation
    u = j["usage"]
    assert u["prompt_tokens"] == len(CASE["prompt_ids_with_bos"]) and u["completion_tokens"] == 40
    assert u["total_tokens"] == u["prompt_tokens"] + 40
    assert u["prompt_tokens_details"]["cached_tokens"] == 0


def test_stream_equals_nonstream(stories):
    full = complete(stories, max_tokens=30)["choices"][0]["text"]
    st, body, hdr = stories.post("/v1/completions", {"prompt": CASE["prompt"], "max_tokens": 30,
                                                     "temperature": 0, "stream": True})
    assert st == 200 and hdr["Content-Type"].startswith("text/event-stream")
    ev = sse_events(body)
    assert ev[-1] == "[DONE]"
    chunks = [json.loads(e) for e in ev[:-1]]
    assert "".join(c["choices"][0]["text"] for c in chunks) == full
    assert all(c["choices"][0]["finish_reason"] is None for c in chunks[:-1])
    assert chunks[-1]["choices"][0]["finish_reason"] == "length"
    assert chunks[-1]["usage"]["completion_tokens"] == 30
    assert all("logprobs" not in c["choices"][0] or c["choices"][0]["logprobs"] is None
               for c in chunks)


def test_sdk_chat_stream_and_not(stories):
    c = openai.OpenAI(base_url=stories.base + "/v1", api_key="x")
    msgs = [{"role": "user", "content": "Once upon a time"}]
    r = c.chat.completions.create(model="x", messages=msgs, max_tokens=20, temperature=0)
    text = r.choices[0].message.content
    assert r.object == "chat.completion" and r.choices[0].message.role == "assistant"
    assert r.choices[0].finish_reason == "length" and r.usage.completion_tokens == 20
    s = c.chat.completions.create(model="x", messages=msgs, max_tokens=20, temperature=0,
                                  stream=True)
    chunks = list(s)
    assert chunks[0].choices[0].delta.role == "assistant"
    assert "".join(ch.choices[0].delta.content or "" for ch in chunks) == text
    assert chunks[-1].choices[0].finish_reason == "length"
    assert chunks[-1].usage.prompt_tokens == r.usage.prompt_tokens


def test_sdk_completions(stories):
    c = openai.OpenAI(base_url=stories.base + "/v1", api_key="x")
    r = c.completions.create(model="x", prompt=CASE["prompt"], max_tokens=10, temperature=0)
    assert r.choices[0].text == complete(stories, max_tokens=10)["choices"][0]["text"]
    s = list(c.completions.create(model="x", prompt=CASE["prompt"], max_tokens=10,
                                  temperature=0, stream=True))
    assert "".join(x.choices[0].text for x in s) == r.choices[0].text


def test_parts_content_and_developer_role(stories):
    a = stories.post("/v1/chat/completions", {
        "messages": [{"role": "developer", "content": "Story."},
                     {"role": "user", "content": [{"type": "text", "text": "Once upon"},
                                                  {"type": "text", "text": " a time"}]}],
        "max_tokens": 12, "temperature": 0})
    b = stories.post("/v1/chat/completions", {
        "messages": [{"role": "system", "content": "Story."},
                     {"role": "user", "content": "Once upon a time"}],
        "max_tokens": 12, "temperature": 0})
    assert a[0] == 200 and json.loads(a[1])["choices"][0]["message"]["content"] == \
        json.loads(b[1])["choices"][0]["message"]["content"]


# ---- sampler knobs -------------------------------------------------------------------------

def test_greedy_and_seed_reproducible(stories):
    assert complete(stories)["choices"][0]["text"] == complete(stories)["choices"][0]["text"]
    a = complete(stories, temperature=1.0, seed=42, max_tokens=40)["choices"][0]["text"]
    b = complete(stories, temperature=1.0, seed=42, max_tokens=40)["choices"][0]["text"]
    assert a == b
    others = {complete(stories, temperature=1.0, seed=s, max_tokens=40)["choices"][0]["text"]
              for s in (1, 2, 3)}
    assert len(others | {a}) > 1, "different seeds should give different samples"


def test_logit_bias_forces_and_bans(stories):
    j = complete(stories, logit_bias={"400": 100}, logprobs=True, max_tokens=8)
    assert [e["id"] for e in j["choices"][0]["logprobs"]["content"]] == [400] * 8
    first = CASE["greedy_generated_ids"][0]
    j = complete(stories, logit_bias={str(first): -100}, logprobs=True, max_tokens=1)
    assert j["choices"][0]["logprobs"]["content"][0]["id"] != first
    # temperature > 0 too
    j = complete(stories, temperature=1.5, seed=7, logit_bias={"400": 100}, logprobs=True,
                 max_tokens=5)
    assert [e["id"] for e in j["choices"][0]["logprobs"]["content"]] == [400] * 5


def test_top_k_1_is_greedy_and_knobs_accepted(stories):
    g = complete(stories, max_tokens=20)["choices"][0]["text"]
    assert complete(stories, temperature=1.0, top_k=1, seed=3, max_tokens=20)["choices"][0]["text"] == g
    assert complete(stories, temperature=1.0, min_p=1.0, seed=3, max_tokens=20)["choices"][0]["text"] == g
    # every knob at once is accepted and deterministic under a seed
    kw = dict(temperature=0.9, top_p=0.9, top_k=40, min_p=0.05, xtc_probability=0.5,
              xtc_threshold=0.1, repetition_penalty=1.3, repetition_context_size=0,
              presence_penalty=0.5, presence_context_size=10, frequency_penalty=0.5,
              frequency_context_size=0, seed=11, max_tokens=30)
    assert complete(stories, **kw)["choices"][0]["text"] == complete(stories, **kw)["choices"][0]["text"]


def test_penalties_change_greedy(stories):
    base = complete(stories, max_tokens=60, logprobs=True)
    pen = complete(stories, max_tokens=60, logprobs=True, repetition_penalty=2.0,
                   repetition_context_size=0)
    ids_b = [e["id"] for e in base["choices"][0]["logprobs"]["content"]]
    ids_p = [e["id"] for e in pen["choices"][0]["logprobs"]["content"]]
    assert ids_b != ids_p
    # the penalised run repeats fewer distinct-token occurrences
    assert len(ids_p) - len(set(ids_p)) <= len(ids_b) - len(set(ids_b))
    fr = complete(stories, max_tokens=60, logprobs=True, frequency_penalty=2.0,
                  frequency_context_size=0)
    ids_f = [e["id"] for e in fr["choices"][0]["logprobs"]["content"]]
    assert ids_f != ids_b


def test_stop_across_token_boundary(stories):
    j = complete(stories, max_tokens=40, top_logprobs=1)
    ents = j["choices"][0]["logprobs"]["content"]
    text = j["choices"][0]["text"]
    # " little girl" spans the tokens " little", " g", "ir", "l"; stop on "e gi"
    stop = "e gi"
    assert stop in text
    k = text.index(stop)
    s = complete(stories, max_tokens=40, stop=[stop, "zzz-never"])
    assert s["choices"][0]["text"] == text[:k]
    assert s["choices"][0]["finish_reason"] == "stop"
    # earliest match wins, whatever the order of the list
    s2 = complete(stories, max_tokens=40, stop=["Lily", "there"])
    assert s2["choices"][0]["text"] == text[:text.index("there")]
    # streaming: the stop text never leaks
    st, body, _ = stories.post("/v1/completions", {"prompt": CASE["prompt"], "max_tokens": 40,
                                                   "temperature": 0, "stream": True,
                                                   "stop": stop})
    got = "".join(json.loads(e)["choices"][0]["text"] for e in sse_events(body)[:-1])
    assert got == text[:k]
    assert len(ents) == 40


def test_logprobs_equal_log_softmax_of_reference_logits(stories):
    """First generated token: top_logprobs equal log_softmax of llama2.c's logits."""
    for case in EXPECTED["cases"][:3]:
        if not case["prompt"]:
            continue
        st, raw, _ = stories.post("/v1/completions", {"prompt": case["prompt"], "max_tokens": 1,
                                                      "temperature": 0, "logprobs": True,
                                                      "top_logprobs": 11})
        e = json.loads(raw)["choices"][0]["logprobs"]["content"][0]
        lg = case["logits_last_prompt_pos"]
        m = max(lg)
        lse = m + math.log(sum(math.exp(x - m) for x in lg))
        ref = sorted(((x - lse, i) for i, x in enumerate(lg)), reverse=True)
        assert len(e["top_logprobs"]) == 11
        for got, (lp, i) in zip(e["top_logprobs"], ref):
            assert abs(got["logprob"] - lp) < 2e-4, (got, lp, i)
        assert e["id"] == case["greedy_generated_ids"][0]
        assert abs(e["logprob"] - ref[0][0]) < 2e-4
        assert e["token"] == e["top_logprobs"][0]["token"]
        lps = [t["logprob"] for t in e["top_logprobs"]]
        assert lps == sorted(lps, reverse=True)


def test_logprobs_shapes(stories):
    j = complete(stories, max_tokens=5, logprobs=True)
    for e in j["choices"][0]["logprobs"]["content"]:
        assert set(e) == {"id", "token", "logprob", "bytes", "top_logprobs"} and e["logprob"] <= 0
        assert e["top_logprobs"] == []
    j = complete(stories, max_tokens=5, top_logprobs=3)
    for e in j["choices"][0]["logprobs"]["content"]:
        assert set(e) == {"id", "token", "logprob", "bytes", "top_logprobs"}
        assert len(e["top_logprobs"]) == 3
        assert all(set(t) == {"id", "token", "logprob", "bytes"} for t in e["top_logprobs"])
    j = complete(stories, max_tokens=3)
    assert j["choices"][0]["logprobs"] is None
    j = complete(stories, max_tokens=3, logprobs=False, top_logprobs=-1)
    assert j["choices"][0]["logprobs"] is None


# ---- validation: exact messages ---------------------------------------------------------------

BAD = [
    ("/v1/chat/completions", b"{not json", "invalid JSON body"),
    ("/v1/chat/completions", b"[1,2]", "invalid JSON body"),
    ("/v1/chat/completions", {"messages": []}, "messages required"),
    ("/v1/chat/completions", {"max_tokens": 3}, "messages required"),
    ("/v1/chat/completions", {"messages": [{"role": "user", "content": "hi"}], "logprobs": 1},
     "logprobs must be of type bool"),
    ("/v1/chat/completions", {"messages": [{"role": "user", "content": "hi"}],
                              "top_logprobs": "3"}, "top_logprobs must be of type int"),
    ("/v1/chat/completions", {"messages": [{"role": "user", "content": "hi"}],
                              "top_logprobs": -2}, "top_logprobs must be at least 0"),
    ("/v1/chat/completions", {"messages": [{"role": "user", "content": "hi"}],
                              "top_logprobs": 12}, "top_logprobs must be at most 11"),
    ("/v1/chat/completions", {"messages": [{"role": "user", "content": "hi"}],
                              "logit_bias": {"abc": 1}}, "logit_bias must be a dict of int to float"),
    ("/v1/chat/completions", {"messages": [{"role": "user", "content": "hi"}],
                              "logit_bias": [1]}, "logit_bias must be a dict of int to float"),
    ("/v1/completions", {"prompt": [1, 2, 1 << 40]},
     "prompt token id 1099511627776 is outside the vocabulary [0, 512)"),
    ("/v1/completions", {"prompt": ""},
     "prompt is required: a non-empty string, an array of strings, an array of token ids or an array of arrays of token ids"),
    ("/v1/completions", {"prompt": "x", "temperature": "hot"}, "temperature must be a number"),
    ("/v1/completions", {"prompt": "x", "max_tokens": 0}, "max_tokens must be at least 1"),
    ("/v1/completions", {"prompt": "x", "stream": "yes"}, "stream must be of type bool"),
    ("/v1/chat/completions", {"messages": [{"role": "wizard", "content": "hi"}]},
     "messages[0].role must be one of system, developer, user, assistant, tool"),
    ("/v1/chat/completions", {"messages": [{"role": "user", "content": [
        {"type": "image_url", "image_url": {"url": "http://x/y.png"}}]}]},
     "model has no vision sidecar"),
    ("/v1/chat/completions", {"messages": [{"role": "user", "content": "hi"}],
                              "reasoning_effort": "max"},
     "reasoning_effort must be one of none, minimal, low, medium, high, xhigh"),
]


@pytest.mark.parametrize("path,body,msg", BAD)
def test_validation_messages(stories, path, body, msg):
    raw = isinstance(body, bytes)
    st, resp, _ = stories.post(path, body, raw=raw)
    assert st == 400, resp
    err = json.loads(resp)["error"]
    assert err["message"] == msg
    assert err["type"] == "invalid_request_error"


SAMPLER_RANGES = [
    {"min_p": 1.5}, {"xtc_threshold": 0.7}, {"xtc_probability": 2}, {"repetition_penalty": -1},
    {"top_p": 1.5}, {"temperature": -1}, {"top_k": -1}, {"logit_bias": {"99999": 1}},
]


@pytest.mark.parametrize("extra", SAMPLER_RANGES)
def test_sampler_range_errors_name_the_field(stories, extra):
    body = {"prompt": "x", "max_tokens": 2}
    body.update(extra)
    st, resp, _ = stories.post("/v1/completions", body)
    assert st == 400
    field = next(iter(extra))
    assert field in json.loads(resp)["error"]["message"]


def test_sdk_raises_bad_request(stories):
    c = openai.OpenAI(base_url=stories.base + "/v1", api_key="x")
    with pytest.raises(openai.BadRequestError) as ei:
        c.chat.completions.create(model="x", messages=[], max_tokens=2)
    assert "messages required" in str(ei.value)


def test_prompt_over_context(stories):
    st, resp, _ = stories.post("/v1/completions", {"prompt": "Once upon a time " * 600,
                                                   "max_tokens": 2})
    assert st == 400 and "context" in json.loads(resp)["error"]["message"]


# ---- concurrency ---------------------------------------------------------------------------

def test_eight_concurrent_streams_match_solo(stories):
    prompts = [c["prompt"] for c in EXPECTED["cases"] if c["prompt"]] + ["Tom had a", "The sun"]
    prompts = prompts[:8]
    solo = {p: json.loads(stories.post("/v1/completions", {"prompt": p, "max_tokens": 30 + 3 * i,
                                                           "temperature": 0})[1])
            ["choices"][0]["text"] for i, p in enumerate(prompts)}
    got = {}

    def one(i, p):
        st, body, _ = stories.post("/v1/completions", {"prompt": p, "max_tokens": 30 + 3 * i,
                                                       "temperature": 0, "stream": True})
        got[p] = "".join(json.loads(e)["choices"][0]["text"] for e in sse_events(body)[:-1])

    ts = [threading.Thread(target=one, args=(i, p)) for i, p in enumerate(prompts)]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    assert got == solo


def test_stats_and_metrics(stories):
    complete(stories, max_tokens=3)
    s = stories.stats()
    assert s["server"]["model"] == "stories260K"
    for k in ("prompt_cache", "admission", "batch", "requests", "tokens"):
        assert k in s
    assert s["batch"]["configured"] == 8 and s["batch"]["mode"] == "batch"
    assert s["requests"]["completions"] >= 1 and s["tokens"]["generated"] >= 3
    st, body, hdr = stories.get("/metrics")
    text = body.decode()
    assert st == 200 and hdr["Content-Type"].startswith("text/plain")
    for name in ("cinfer_requests_total", "cinfer_prompt_tokens_total",
                 "cinfer_generation_tokens_total", "cinfer_time_to_first_token_seconds_bucket",
                 "cinfer_time_per_output_token_seconds_bucket", "cinfer_queue_depth",
                 "cinfer_running_requests", "cinfer_prompt_cache_hits_total"):
        assert name in text, name
