"""test_eval_completions.py — what evaluation harnesses ask of completions (stories260K: fast,
runs under the sanitizers): n > 1 (independent samples sharing the prompt through the prefix
cache, seeded ones reproducible, streamed with each choice's index), prompt arrays (one
choice each, in order), echo with logprobs (the prompt's tokens scored: the first has null,
the others equal the log-softmax of the reference logits), best_of.
Shapes are validated against the OpenAI spec (tests/data/openapi, see test_openapi_shapes).
"""
import json
import math
import os
import subprocess
import threading

import pytest

from conftest import BIN, FIXTURES, STORIES, Server, sse_events
from test_openapi_shapes import check, spec  # noqa: F401  (the spec fixture)

EXPECTED = json.load(open(os.path.join(FIXTURES, "stories260K", "expected_greedy.json")))
CASE = EXPECTED["cases"][0]  # "Once upon a time"
LONG = ("Once upon a time there was a little girl named Lily. She loved to play outside in "
        "the sun with her dog and her friends every day.")


def post(srv, path, body):
    st, b, h = srv.post(path, body)
    assert st == 200, b
    return json.loads(b) if not body.get("stream") else b


def check_echo(spec, j):
    """The spec types token_logprobs as numbers and top_logprobs as objects, but an echoed
    prompt's first token has null in both (OpenAI's own API and the issue say so: nothing
    scores it): validated with those two nulls set aside."""
    k = json.loads(json.dumps(j))
    for c in k["choices"]:
        lp = c["logprobs"]
        if lp and lp["token_logprobs"] and lp["token_logprobs"][0] is None:
            lp["token_logprobs"][0] = 0.0
            lp["top_logprobs"][0] = {}
    check(spec, "CreateCompletionResponse", k)


def log_softmax(lg):
    m = max(lg)
    lse = m + math.log(sum(math.exp(x - m) for x in lg))
    return [x - lse for x in lg]


# ---- n > 1 ------------------------------------------------------------------------------

def test_n_samples_are_independent_and_seeded(stories, spec):
    body = {"prompt": LONG, "max_tokens": 16, "temperature": 1.0, "n": 4, "seed": 123}
    j = post(stories, "/v1/completions", body)
    check(spec, "CreateCompletionResponse", j)
    assert [c["index"] for c in j["choices"]] == [0, 1, 2, 3]
    texts = [c["text"] for c in j["choices"]]
    assert len(set(texts)) >= 2, texts  # independent samples, not one repeated
    # the same seed gives the same choices; each is the sample a lone request with seed + j
    assert [c["text"] for c in post(stories, "/v1/completions", body)["choices"]] == texts
    lone = post(stories, "/v1/completions", {**body, "n": 1, "seed": 125})
    assert lone["choices"][0]["text"] == texts[2]
    # usage: the prompt once, every choice's tokens
    one = post(stories, "/v1/completions", {**body, "n": 1})
    assert j["usage"]["prompt_tokens"] == one["usage"]["prompt_tokens"]
    assert j["usage"]["completion_tokens"] == 4 * 16


def test_n_shares_the_prompt_through_the_prefix_cache(stories):
    # a prompt no earlier test sent: the lead computes it, the followers find it cached
    prompt = LONG + " The sky was blue and the grass was green and soft."
    s0 = stories.stats()["prompt_cache"]
    j = post(stories, "/v1/completions",
             {"prompt": prompt, "max_tokens": 4, "temperature": 1.0, "n": 3, "seed": 1})
    s1 = stories.stats()["prompt_cache"]
    n_prompt = j["usage"]["prompt_tokens"]
    assert n_prompt >= 32
    full = n_prompt // 16 * 16
    # two followers each took at least the lead's full blocks (the last may be partial)
    assert s1["hit_tokens"] - s0["hit_tokens"] >= 2 * (full - 16), (s0, s1, n_prompt)
    assert s1["hits"] - s0["hits"] >= 2


def test_chat_n_body_and_stream(stories, spec):
    msgs = [{"role": "user", "content": "Once upon a time"}]
    j = post(stories, "/v1/chat/completions",
             {"messages": msgs, "max_tokens": 8, "temperature": 1.0, "n": 3, "seed": 5})
    check(spec, "CreateChatCompletionResponse", j)
    assert [c["index"] for c in j["choices"]] == [0, 1, 2]
    body = {"messages": msgs, "max_tokens": 8, "temperature": 1.0, "n": 3, "seed": 5,
            "stream": True, "stream_options": {"include_usage": True}}
    ev = sse_events(post(stories, "/v1/chat/completions", body))
    assert ev[-1] == "[DONE]"
    chunks = [json.loads(e) for e in ev[:-1]]
    for c in chunks:
        check(spec, "CreateChatCompletionStreamResponse", c)
    assert len({c["id"] for c in chunks}) == 1
    assert chunks[-1]["choices"] == [] and chunks[-1]["usage"]["completion_tokens"] == 24
    text = {0: "", 1: "", 2: ""}
    finish = {}
    for c in chunks[:-1]:
        for ch in c["choices"]:
            text[ch["index"]] += ch["delta"].get("content") or ""
            if ch["finish_reason"]:
                finish[ch["index"]] = ch["finish_reason"]
    assert finish == {0: "length", 1: "length", 2: "length"}
    # streamed = the body, choice by choice (same seeds)
    assert [text[i] for i in range(3)] == [c["message"]["content"] for c in j["choices"]]


def test_prompt_array_one_choice_each_in_order(stories, spec):
    prompts = ["Once upon a time", "The cat", "Lily went to the park"]
    each = [post(stories, "/v1/completions",
                 {"prompt": p, "max_tokens": 6, "temperature": 0})["choices"][0]["text"]
            for p in prompts]
    j = post(stories, "/v1/completions", {"prompt": prompts, "max_tokens": 6, "temperature": 0})
    check(spec, "CreateCompletionResponse", j)
    assert [c["text"] for c in j["choices"]] == each
    # arrays of token ids, and n per prompt: index = prompt * n + sample
    ids = CASE["prompt_ids_with_bos"]
    j = post(stories, "/v1/completions",
             {"prompt": [ids, ids[:3]], "max_tokens": 6, "temperature": 0, "n": 2})
    assert [c["index"] for c in j["choices"]] == [0, 1, 2, 3]
    assert j["choices"][0]["text"] == j["choices"][1]["text"] == each[0]
    # streamed: each prompt's text under its index
    ev = sse_events(post(stories, "/v1/completions",
                         {"prompt": prompts, "max_tokens": 6, "temperature": 0, "stream": True}))
    got = {}
    for e in ev[:-1]:
        for ch in json.loads(e)["choices"]:
            got[ch["index"]] = got.get(ch["index"], "") + ch["text"]
    assert [got[i] for i in range(3)] == each


# ---- echo with logprobs: the prompt scored ----------------------------------------------

def test_echo_logprobs_score_the_prompt(stories, spec):
    ids = CASE["prompt_ids_with_bos"]
    gen = CASE["greedy_generated_ids"][:5]
    j = post(stories, "/v1/completions",
             {"prompt": ids + gen, "max_tokens": 1, "temperature": 0, "echo": True,
              "logprobs": 3})
    check_echo(spec, j)
    lp = j["choices"][0]["logprobs"]
    n = len(ids) + len(gen)
    assert len(lp["tokens"]) == len(lp["token_logprobs"]) == len(lp["text_offset"]) == n + 1
    assert lp["token_logprobs"][0] is None and lp["top_logprobs"][0] is None
    assert all(isinstance(x, float) for x in lp["token_logprobs"][1:])
    assert all(len(t) == 3 for t in lp["top_logprobs"][1:])
    # the tokens join to the text (SentencePiece drops the first token's leading space in
    # the echoed text); the completion's offsets count from the echoed text's end
    assert "".join(lp["tokens"]).lstrip(" ") == j["choices"][0]["text"]
    assert lp["text_offset"][-1] == len(j["choices"][0]["text"]) - len(lp["tokens"][-1])
    # the first continuation token: log-softmax of llama2.c's logits at the last prompt position
    ref = log_softmax(CASE["logits_last_prompt_pos"])
    assert abs(lp["token_logprobs"][len(ids)] - ref[gen[0]]) < 2e-4
    # greedy continuation: the top alternative is the token itself
    for k in range(len(ids), n):
        assert abs(max(lp["top_logprobs"][k].values()) - lp["token_logprobs"][k]) < 1e-6
    # every scored token = the same token's logprob when the decode path samples it
    g = post(stories, "/v1/completions",
             {"prompt": ids, "max_tokens": len(gen), "temperature": 0, "logprobs": 1})
    glp = g["choices"][0]["logprobs"]["token_logprobs"]
    for k in range(len(gen)):
        assert abs(lp["token_logprobs"][len(ids) + k] - glp[k]) < 1e-4, (k, lp, glp)
    # BOS alone: position 0's logits
    c1 = EXPECTED["cases"][1]
    j = post(stories, "/v1/completions",
             {"prompt": c1["prompt_ids_with_bos"] + c1["greedy_generated_ids"][:2],
              "max_tokens": 1, "temperature": 0, "echo": True, "logprobs": 0})
    ref = log_softmax(c1["logits_pos0_after_bos"])
    got = j["choices"][0]["logprobs"]["token_logprobs"][1]
    assert abs(got - ref[c1["greedy_generated_ids"][0]]) < 2e-4
    assert j["choices"][0]["logprobs"]["top_logprobs"][1] == {}


def test_echo_logprobs_long_prompt_text_and_stream(stories, spec):
    # longer than one step's scoring rows: the prompt goes in several chunks
    prompt = LONG + " " + LONG
    j = post(stories, "/v1/completions",
             {"prompt": prompt, "max_tokens": 2, "temperature": 0, "echo": True, "logprobs": 1})
    ch = j["choices"][0]
    n_prompt = j["usage"]["prompt_tokens"]
    assert n_prompt > 40
    lp = ch["logprobs"]
    assert len(lp["token_logprobs"]) == n_prompt + 2
    assert ch["text"].startswith(prompt)
    assert all(x is not None and x <= 0 for x in lp["token_logprobs"][1:])
    # positions of later chunks: the logprob the decode path gives the same token after the
    # same prefix (when it is among the top 11 there)
    ids = json.loads(subprocess.run([BIN, "tokenize", STORIES, "--text", prompt, "--add-special"],
                                    capture_output=True, text=True, check=True).stdout)
    assert len(ids) == n_prompt
    seen = 0
    for t in (5, 17, 18, 33, n_prompt - 1):
        g = post(stories, "/v1/completions",
                 {"prompt": ids[:t], "max_tokens": 1, "temperature": 0, "logprobs": 11})
        top = g["choices"][0]["logprobs"]["top_logprobs"][0]
        tok = lp["tokens"][t]
        if tok in top:
            seen += 1
            assert abs(top[tok] - lp["token_logprobs"][t]) < 1e-4, (t, tok, top, lp)
    assert seen >= 3
    # cached prefix or not, scoring computes every position: the same numbers again
    j2 = post(stories, "/v1/completions",
              {"prompt": prompt, "max_tokens": 2, "temperature": 0, "echo": True, "logprobs": 1})
    assert j2["choices"][0]["logprobs"]["token_logprobs"] == lp["token_logprobs"]
    # streamed: the echo chunk carries the prompt's logprobs, then a chunk a token
    ev = sse_events(post(stories, "/v1/completions",
                         {"prompt": prompt, "max_tokens": 2, "temperature": 0, "echo": True,
                          "logprobs": 1, "stream": True}))
    chunks = [json.loads(e) for e in ev[:-1]]
    first = chunks[0]["choices"][0]
    assert first["text"] == prompt
    assert first["logprobs"]["token_logprobs"] == lp["token_logprobs"][:n_prompt]
    toks = [t for c in chunks for t in (c["choices"][0]["logprobs"] or {}).get("tokens", [])]
    assert toks == lp["tokens"]


def test_scoring_beside_generation_changes_nothing(stories):
    body = {"prompt": LONG, "max_tokens": 24, "temperature": 0}
    alone = post(stories, "/v1/completions", body)["choices"][0]["text"]
    out = {}

    def score():
        out["s"] = post(stories, "/v1/completions",
                        {"prompt": LONG + " " + LONG, "max_tokens": 1, "temperature": 0,
                         "echo": True, "logprobs": 2})

    ts = [threading.Thread(target=score) for _ in range(2)]
    for t in ts:
        t.start()
    beside = post(stories, "/v1/completions", body)["choices"][0]["text"]
    for t in ts:
        t.join()
    assert beside == alone
    assert out["s"]["choices"][0]["logprobs"]["token_logprobs"][0] is None


def test_scoring_with_speculation_and_a_small_step():
    """Scoring rows share the step with speculation's draft rows, and with a step budget
    smaller than the scoring rows (every logits row is a token of the step): the numbers
    are those of a plain server."""
    prompt = LONG + " " + LONG
    body = {"prompt": prompt, "max_tokens": 2, "temperature": 0, "echo": True, "logprobs": 2}
    gen = {"prompt": LONG + " " + LONG, "max_tokens": 40, "temperature": 0}
    got = []
    for args in ((), ("--draft-kind", "ngram"), ("--max-batch-tokens", "16")):
        s = Server(STORIES, "--kv-f32", *args)
        try:
            out = {}

            def run():
                out["g"] = post(s, "/v1/completions", gen)["choices"][0]["text"]

            t = threading.Thread(target=run)
            t.start()
            sc = post(s, "/v1/completions", body)["choices"][0]["logprobs"]["token_logprobs"]
            t.join()
            got.append((sc, out["g"]))
        finally:
            assert s.stop() == 0, s.output()
    for sc, g in got[1:]:
        assert g == got[0][1]
        assert len(sc) == len(got[0][0])
        assert all(abs(a - b) < 1e-4 for a, b in zip(sc[1:], got[0][0][1:])), (sc, got[0][0])


# ---- refused -----------------------------------------------------------------------------

@pytest.mark.parametrize("extra,param", [
    ({"best_of": 3, "stream": True}, "best_of"), ({"best_of": 1, "n": 2}, "best_of"),
    ({"best_of": 129}, "best_of"), ({"best_of": 65, "prompt": ["a", "b"]}, "prompt"),
    ({"echo": True, "logprobs": True}, "logprobs"),
    ({"prompt": ["a"] * 65, "n": 2}, "prompt"), ({"prompt": [["a"]]}, "prompt"),
    ({"prompt": [[]]}, "prompt"), ({"prompt": []}, "prompt"),
])
def test_refusals(stories, extra, param):
    st, b, _ = stories.post("/v1/completions",
                            {"prompt": "Once upon a time", "max_tokens": 2, **extra})
    assert st == 400, (extra, b)
    assert json.loads(b)["error"]["param"] == param


def test_best_of_equal_to_n_is_n(stories):
    j = post(stories, "/v1/completions",
             {"prompt": "Once", "max_tokens": 3, "temperature": 0, "n": 2, "best_of": 2})
    assert len(j["choices"]) == 2


def test_best_of_returns_the_best_by_mean_logprob(stories, spec):
    body = {"prompt": ["Once upon a time", "The cat"], "max_tokens": 8, "temperature": 1.0,
            "seed": 77}
    # the same samples (seed + j), all returned with their logprobs
    every = post(stories, "/v1/completions", {**body, "n": 4, "logprobs": 0})
    j = post(stories, "/v1/completions", {**body, "n": 2, "best_of": 4})
    check(spec, "CreateCompletionResponse", j)
    assert [c["index"] for c in j["choices"]] == [0, 1, 2, 3]
    for p in range(2):
        samples = every["choices"][p * 4:(p + 1) * 4]
        mean = [sum(c["logprobs"]["token_logprobs"]) / len(c["logprobs"]["token_logprobs"])
                for c in samples]
        ranked = [samples[k]["text"] for k in sorted(range(4), key=lambda k: -mean[k])]
        assert [c["text"] for c in j["choices"][p * 2:(p + 1) * 2]] == ranked[:2], (mean, j)
        assert all(c["logprobs"] is None for c in j["choices"])  # not asked for
    # usage: every sample's tokens, each prompt once
    assert j["usage"]["completion_tokens"] == every["usage"]["completion_tokens"]
    assert j["usage"]["prompt_tokens"] == every["usage"]["prompt_tokens"]
