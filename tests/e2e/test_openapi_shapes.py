"""test_openapi_shapes.py — responses validated against the official OpenAI spec, and the
requests OpenAI refuses refused here too (stories260K: fast, runs under the sanitizers).

The spec (tests/data/openapi/openai-openapi.json.gz, v2.3.0, MIT) is OpenAPI 3.1: its
schemas are JSON Schema 2020-12 apart from a few 3.0 `nullable: true` keys, which are turned
into `anyOf [..., null]` here. One known gap of the spec is patched and said so: a streamed
text_completion chunk has `finish_reason: null` until the last one (the spec reuses the
non-streaming schema, whose enum has no null; OpenAI's own API sends null), and so is its
`usage: null` before the last chunk under stream_options.include_usage.
"""
import copy
import gzip
import json
import os
import subprocess

import jsonschema
import pytest

from conftest import BIN, REPO, STORIES, Server, http, sse_events

SPEC_PATH = os.path.join(REPO, "tests", "data", "openapi", "openai-openapi.json.gz")


def _denullable(x):
    if isinstance(x, dict):
        y = {k: _denullable(v) for k, v in x.items()}
        if y.pop("nullable", False) is True:
            return {"anyOf": [y, {"type": "null"}]}
        return y
    if isinstance(x, list):
        return [_denullable(v) for v in x]
    return x


@pytest.fixture(scope="module")
def spec():
    with gzip.open(SPEC_PATH, "rt") as f:
        s = json.load(f)
    comps = _denullable(s["components"])
    cc = comps["schemas"]["CreateCompletionResponse"]["properties"]["choices"]["items"]
    chunk = copy.deepcopy(comps["schemas"]["CreateCompletionResponse"])
    chunk["properties"]["choices"]["items"]["properties"]["finish_reason"] = {
        "anyOf": [cc["properties"]["finish_reason"], {"type": "null"}]}
    chunk["properties"]["usage"] = {"anyOf": [chunk["properties"]["usage"], {"type": "null"}]}
    comps["schemas"]["CinferCompletionChunk"] = chunk
    return comps


def check(spec, name, obj):
    schema = {"$ref": f"#/components/schemas/{name}", "components": spec}
    v = jsonschema.Draft202012Validator(schema)
    errs = sorted(v.iter_errors(obj), key=lambda e: list(e.absolute_path))
    assert not errs, f"{name}: " + "; ".join(
        f"{list(e.absolute_path)}: {e.message[:200]}" for e in errs[:5]) + f"\n{obj}"


def post(srv, path, body, raw=False):
    st, b, h = srv.post(path, body, raw=raw)
    return st, b, h


MSG = [{"role": "user", "content": "Once upon a time"}]


# ---- shapes ---------------------------------------------------------------------------

def test_chat_body_and_logprobs(stories, spec):
    st, b, _ = post(stories, "/v1/chat/completions",
                    {"messages": MSG, "max_tokens": 12, "temperature": 0, "logprobs": True,
                     "top_logprobs": 3})
    assert st == 200, b
    j = json.loads(b)
    check(spec, "CreateChatCompletionResponse", j)
    ch = j["choices"][0]
    assert ch["message"]["refusal"] is None
    ents = ch["logprobs"]["content"]
    assert len(ents) >= 1 and all(len(e["top_logprobs"]) == 3 for e in ents)
    # token is the decoded text, bytes its UTF-8 bytes: they join to the content
    text = "".join(e["token"] for e in ents)
    assert text.startswith(ch["message"]["content"]) or ch["message"]["content"] == text
    for e in ents:
        if "\ufffd" not in e["token"]:
            assert bytes(e["bytes"]) == e["token"].encode()
    # logprobs: true alone still carries the token (an SDK joins them)
    st, b, _ = post(stories, "/v1/chat/completions",
                    {"messages": MSG, "max_tokens": 4, "temperature": 0, "logprobs": True})
    j = json.loads(b)
    check(spec, "CreateChatCompletionResponse", j)
    assert all("token" in e and e["top_logprobs"] == [] for e in
               j["choices"][0]["logprobs"]["content"])


def test_chat_stream_chunks_logprobs_and_usage(stories, spec):
    st, b, h = post(stories, "/v1/chat/completions",
                    {"messages": MSG, "max_tokens": 10, "temperature": 0, "stream": True,
                     "logprobs": True, "stream_options": {"include_usage": True}})
    assert st == 200
    ev = sse_events(b)
    assert ev[-1] == "[DONE]"
    chunks = [json.loads(e) for e in ev[:-1]]
    for c in chunks:
        check(spec, "CreateChatCompletionStreamResponse", c)
    # include_usage: every chunk has usage null but the last, which has choices []
    assert chunks[-1]["choices"] == [] and chunks[-1]["usage"]["completion_tokens"] == 10
    assert all(c["usage"] is None for c in chunks[:-1])
    content = "".join(c["choices"][0]["delta"].get("content") or "" for c in chunks[:-1])
    toks = [e for c in chunks[:-1] for e in
            ((c["choices"][0].get("logprobs") or {}).get("content") or [])]
    assert len(toks) == 10
    assert "".join(t["token"] for t in toks) == content
    # the same ids as the non-streaming body
    st, b2, _ = post(stories, "/v1/chat/completions",
                     {"messages": MSG, "max_tokens": 10, "temperature": 0, "logprobs": True})
    ids = [e["id"] for e in json.loads(b2)["choices"][0]["logprobs"]["content"]]
    assert [t["id"] for t in toks] == ids


def test_completion_body_legacy_logprobs_and_stream(stories, spec):
    st, b, _ = post(stories, "/v1/completions",
                    {"prompt": "Once upon a time", "max_tokens": 8, "temperature": 0,
                     "logprobs": 2})
    assert st == 200, b
    j = json.loads(b)
    check(spec, "CreateCompletionResponse", j)
    lp = j["choices"][0]["logprobs"]
    assert len(lp["tokens"]) == len(lp["token_logprobs"]) == len(lp["text_offset"]) == 8
    assert all(len(t) <= 2 and len(t) >= 1 for t in lp["top_logprobs"])
    assert "".join(lp["tokens"]) == j["choices"][0]["text"]
    offs = lp["text_offset"]
    assert offs[0] == 0 and all(offs[i + 1] == offs[i] + len(lp["tokens"][i])
                                for i in range(len(offs) - 1))
    # logprobs 0: the sampled tokens only
    st, b, _ = post(stories, "/v1/completions",
                    {"prompt": "Once upon a time", "max_tokens": 3, "temperature": 0,
                     "logprobs": 0})
    j0 = json.loads(b)
    check(spec, "CreateCompletionResponse", j0)
    assert j0["choices"][0]["logprobs"]["top_logprobs"] == [{}, {}, {}]
    # streamed: every chunk is a text_completion with its own tokens' block
    st, b, _ = post(stories, "/v1/completions",
                    {"prompt": "Once upon a time", "max_tokens": 8, "temperature": 0,
                     "logprobs": 2, "stream": True,
                     "stream_options": {"include_usage": True}})
    ev = sse_events(b)
    chunks = [json.loads(e) for e in ev[:-1]]
    for c in chunks:
        check(spec, "CinferCompletionChunk", c)
    assert chunks[-1]["choices"] == [] and chunks[-1]["usage"]["completion_tokens"] == 8
    toks = [t for c in chunks[:-1] if c["choices"][0]["logprobs"]
            for t in c["choices"][0]["logprobs"]["tokens"]]
    assert toks == lp["tokens"]


def test_models_and_errors(stories, spec):
    st, b, _ = stories.get("/v1/models")
    j = json.loads(b)
    check(spec, "ListModelsResponse", j)
    m = j["data"][0]
    assert m["context_length"] == m["context_window"] > 0
    assert "completions" in m["capabilities"] and "chat" in m["capabilities"]
    st, b, _ = stories.get("/v1/models/" + m["id"])
    check(spec, "Model", json.loads(b))
    st, b, _ = post(stories, "/v1/chat/completions", {"messages": []})
    assert st == 400
    check(spec, "ErrorResponse", json.loads(b))


def test_responses_object(stories, spec):
    st, b, _ = post(stories, "/v1/responses",
                    {"input": "Once upon a time", "max_output_tokens": 8, "temperature": 0,
                     "tools": [{"type": "function", "name": "f",
                                "parameters": {"type": "object", "properties": {}}}]})
    assert st == 200, b
    j = json.loads(b)
    check(spec, "Response", j)


CODEX_FIELDS = {"metadata": {"session": "s1", "k": "v" * 512}, "prompt_cache_key": "conv-7",
                "safety_identifier": "u-1", "user": "legacy-user", "truncation": "auto",
                "service_tier": "auto", "text": {"verbosity": "low"},
                "include": ["reasoning.encrypted_content"], "reasoning": {"summary": "auto"},
                "store": False, "parallel_tool_calls": False}


def test_responses_echo_codex_fields(stories, spec):
    """The request fields Codex and the Agents SDK send are accepted and repeated in the
    response object as OpenAI repeats them (service_tier: the tier used); the output is
    the same as without them."""
    base = {"input": "Once upon a time", "max_output_tokens": 8, "temperature": 0}
    st, b, _ = post(stories, "/v1/responses", {**base, **CODEX_FIELDS})
    assert st == 200, b
    j = json.loads(b)
    check(spec, "Response", j)
    assert j["metadata"] == CODEX_FIELDS["metadata"]
    assert j["prompt_cache_key"] == "conv-7" and j["safety_identifier"] == "u-1"
    assert j["user"] == "legacy-user" and j["truncation"] == "auto"
    assert j["service_tier"] == "default" and j["store"] is False
    assert j["text"] == {"format": {"type": "text"}, "verbosity": "low"}
    assert j["parallel_tool_calls"] is False
    st, b0, _ = post(stories, "/v1/responses", base)
    j0 = json.loads(b0)
    assert j0["output"][0]["content"][0]["text"] == j["output"][0]["content"][0]["text"]
    assert j0["metadata"] == {} and j0["truncation"] == "disabled" and "prompt_cache_key" not in j0
    # streamed: the final response object carries them too
    st, raw, _ = post(stories, "/v1/responses", {**base, **CODEX_FIELDS, "stream": True})
    done = [json.loads(e) for e in sse_events(raw) if '"response.completed"' in e]
    assert done and done[-1]["response"]["prompt_cache_key"] == "conv-7"


BAD_RESPONSES = [
    ({"metadata": {"k": 1}}, "metadata"), ({"metadata": [1]}, "metadata"),
    ({"metadata": {str(i): "v" for i in range(17)}}, "metadata"),
    ({"metadata": {"k" * 65: "v"}}, "metadata"), ({"metadata": {"k": "v" * 513}}, "metadata"),
    ({"prompt_cache_key": 5}, "prompt_cache_key"), ({"safety_identifier": "s" * 65},
                                                     "safety_identifier"),
    ({"truncation": "sometimes"}, "truncation"), ({"service_tier": "gold"}, "service_tier"),
    ({"text": {"verbosity": "loud"}}, "text.verbosity"),
]


@pytest.mark.parametrize("extra,param", BAD_RESPONSES)
def test_responses_field_refusals(stories, spec, extra, param):
    st, b, _ = post(stories, "/v1/responses", {"input": "Once", "max_output_tokens": 2, **extra})
    assert st == 400, b
    j = json.loads(b)
    check(spec, "ErrorResponse", j)
    assert j["error"]["param"] == param, j


# ---- refused as OpenAI refuses --------------------------------------------------------

BAD_CHAT = [
    ({"n": 0}, "n"), ({"n": -1}, "n"), ({"n": 1000}, "n"), ({"n": 129}, "n"),
    ({"tools": [{"type": "function"}]}, "tools"),
    ({"tools": [{"type": "function", "function": {"name": ""}}]}, "tools"),
    ({"tools": [{"type": "function", "function": {"name": "f", "parameters": 3}}]}, "tools"),
    ({"tools": ["x"]}, "tools"),
    ({"tools": [{"type": "retrieval"}]}, "tools"),
    ({"tool_choice": "sometimes"}, "tool_choice"),
    ({"tool_choice": {"type": "function", "function": {"name": "f"}}}, "tool_choice"),
    ({"tool_choice": "required"}, "tool_choice"),
    ({"tool_choice": 7, "tools": [{"type": "function", "function": {"name": "f"}}]},
     "tool_choice"),
    ({"stream_options": {"include_usage": True}}, "stream_options"),
    ({"stream": True, "stream_options": 3}, "stream_options"),
    # what cinfer cannot do: refused, never a silent no-op
    ({"modalities": ["text", "audio"]}, "modalities"), ({"modalities": ["video"]}, "modalities"),
    ({"audio": {"voice": "alloy", "format": "wav"}}, "audio"),
    ({"web_search_options": {}}, "web_search_options"),
    ({"functions": [{"name": "f", "parameters": {}}]}, "functions"),
    ({"function_call": "auto"}, "function_call"),
    # hints, checked as OpenAI checks them
    ({"metadata": {"a": 1}}, "metadata"), ({"metadata": {"k" * 65: "v"}}, "metadata"),
    ({"service_tier": "gold"}, "service_tier"), ({"verbosity": "loud"}, "verbosity"),
    ({"prediction": {"type": "x"}}, "prediction"),
    ({"prediction": {"type": "content", "content": [{"type": "image"}]}}, "prediction"),
    ({"store": "yes"}, "store"), ({"safety_identifier": "s" * 65}, "safety_identifier"),
    ({"prompt_cache_key": 3}, "prompt_cache_key"),
]

HINTS = {"metadata": {"a": "b"}, "prompt_cache_key": "k", "safety_identifier": "s",
         "user": "u", "store": True, "service_tier": "flex", "verbosity": "low",
         "modalities": ["text"], "prediction": {"type": "content", "content": "Once upon"}}


def test_chat_hints_are_accepted_and_change_nothing(stories, spec):
    base = {"messages": MSG, "max_tokens": 6, "temperature": 0}
    st, b, _ = post(stories, "/v1/chat/completions", {**base, **HINTS})
    assert st == 200, b
    j = json.loads(b)
    check(spec, "CreateChatCompletionResponse", j)
    st, b0, _ = post(stories, "/v1/chat/completions", base)
    assert json.loads(b0)["choices"][0]["message"] == j["choices"][0]["message"]


@pytest.mark.parametrize("extra,param", BAD_CHAT)
def test_chat_refusals(stories, spec, extra, param):
    st, b, _ = post(stories, "/v1/chat/completions", {"messages": MSG, "max_tokens": 2, **extra})
    assert st == 400, (extra, b)
    j = json.loads(b)
    check(spec, "ErrorResponse", j)
    assert j["error"]["param"] == param, j


BAD_COMPLETION = [
    ({"best_of": 3, "stream": True}, "best_of"), ({"suffix": "end"}, "suffix"),
    ({"echo": True, "logprobs": True}, "logprobs"), ({"prompt": [1, 2, 99999999]}, "prompt"),
    ({"prompt": [1.5]}, "prompt"), ({"prompt": ["a", 3]}, "prompt"), ({"prompt": ""}, "prompt"),
    ({"logprobs": 99}, "logprobs"), ({"logprobs": "x"}, "logprobs"), ({"n": 0}, "n"),
    ({"user": 5}, "user"),
]


@pytest.mark.parametrize("extra,param", BAD_COMPLETION)
def test_completion_refusals(stories, extra, param):
    body = {"prompt": "Once upon a time", "max_tokens": 2, **extra}
    st, b, _ = post(stories, "/v1/completions", body)
    assert st == 400, (extra, b)
    assert json.loads(b)["error"]["param"] == param


# ---- valid input accepted ---------------------------------------------------------------

def test_nul_escape_and_big_integers_are_valid_json(stories):
    raw = (b'{"messages": [{"role": "user", "content": "bin\\u0000ary"}], "max_tokens": 2, '
           b'"temperature": 0, "x_ignored": 123456789012345678901234567890, '
           b'"x_extra": {"n": -99999999999999999999999}}')
    st, b, _ = post(stories, "/v1/chat/completions", raw, raw=True)
    assert st == 200, b
    # the NUL is data: the prompt has one more token than without it
    st, b2, _ = post(stories, "/v1/chat/completions",
                     {"messages": [{"role": "user", "content": "binary"}], "max_tokens": 2,
                      "temperature": 0})
    assert json.loads(b)["usage"]["prompt_tokens"] > json.loads(b2)["usage"]["prompt_tokens"]
    # a seed within 2^53 still works in such a body
    raw = (b'{"prompt": "Once", "max_tokens": 3, "seed": 7, "temperature": 1, '
           b'"x": 99999999999999999999}')
    st, b, _ = post(stories, "/v1/completions", raw, raw=True)
    assert st == 200, b


def test_prompt_forms_and_echo(stories):
    base = {"max_tokens": 6, "temperature": 0}
    st, b, _ = post(stories, "/v1/completions", {"prompt": "Once upon a time", **base,
                                                 "logprobs": True})
    ref = json.loads(b)["choices"][0]
    st, b, _ = post(stories, "/v1/completions", {"prompt": ["Once upon a time"], **base})
    assert json.loads(b)["choices"][0]["text"] == ref["text"]
    # token ids: the ids of the string prompt (BOS included: nothing is added to ids)
    st, b, _ = post(stories, "/v1/completions", {"prompt": "Once upon a time", **base,
                                                 "echo": True})
    echoed = json.loads(b)["choices"][0]["text"]
    assert echoed == "Once upon a time" + ref["text"]
    ids = json.loads(subprocess.run([BIN, "tokenize", STORIES, "--text", "Once upon a time",
                                     "--add-special"], capture_output=True, text=True,
                                    check=True).stdout)
    for p in (ids, [ids]):
        st, b, _ = post(stories, "/v1/completions", {"prompt": p, **base})
        assert st == 200, b
        assert json.loads(b)["choices"][0]["text"] == ref["text"]
    # streamed echo: the prompt comes first
    st, b, _ = post(stories, "/v1/completions", {"prompt": "Once upon a time", **base,
                                                 "echo": True, "stream": True})
    chunks = [json.loads(e) for e in sse_events(b)[:-1]]
    assert "".join(c["choices"][0]["text"] for c in chunks) == echoed


def test_trace_is_405(stories):
    st, b, _ = http("TRACE", stories.base + "/v1/models")
    assert st == 405, b


def test_ignored_tools_and_fields_get_a_warning_header(stories):
    st, b, h = post(stories, "/v1/responses",
                    {"input": "Once upon a time", "max_output_tokens": 2,
                     "tools": [{"type": "web_search"}, {"type": "code_interpreter"},
                               {"type": "function", "name": "f", "parameters": {}}],
                     "prompt_cache_key": "k", "include": ["reasoning.encrypted_content"],
                     "reasoning": {"summary": "auto"}, "service_tier": "auto",
                     "text": {"verbosity": "low"}, "truncation": "auto"})
    assert st == 200, b
    w = h.get("Warning", "")
    assert w.startswith("299 cinfer") and "web_search" in w and "code_interpreter" in w, h
    assert [t["name"] for t in json.loads(b)["tools"]] == ["f"]
    st, b, h = post(stories, "/v1/messages",
                    {"model": "x", "max_tokens": 2, "container": "c1",
                     "messages": [{"role": "user", "content": "Once upon a time"}],
                     "tools": [{"type": "web_search_20250305", "name": "web_search"}]})
    assert st == 200, b
    w = h.get("Warning", "")
    assert "web_search_20250305" in w and "container" in w, h
    # nothing ignored: no header
    st, b, h = post(stories, "/v1/responses", {"input": "Once", "max_output_tokens": 1})
    assert st == 200 and "Warning" not in h


def test_get_and_delete_a_stored_response(stories, spec):
    st, b, _ = post(stories, "/v1/responses", {"input": "Once upon a time",
                                               "max_output_tokens": 4, "temperature": 0})
    made = json.loads(b)
    st, b, _ = stories.get("/v1/responses/" + made["id"])
    assert st == 200, b
    got = json.loads(b)
    check(spec, "Response", got)
    assert got == made
    st, b, _ = http("DELETE", stories.base + "/v1/responses/" + made["id"])
    assert st == 200 and json.loads(b)["deleted"] is True
    st, b, _ = stories.get("/v1/responses/" + made["id"])
    assert st == 404 and json.loads(b)["error"]["param"] == "response_id"
    st, b, _ = http("DELETE", stories.base + "/v1/responses/" + made["id"])
    assert st == 404
    # store: false is never kept
    st, b, _ = post(stories, "/v1/responses", {"input": "Once", "max_output_tokens": 2,
                                               "store": False})
    st, b, _ = stories.get("/v1/responses/" + json.loads(b)["id"])
    assert st == 404


# ---- embeddings (an embedding-only server of the tiny BERT, tests/data/embeddings) ------

def test_embeddings_shapes(spec):
    """CreateEmbeddingResponse for float and base64 bodies (the spec types `embedding` as a
    float array only; with encoding_format base64 OpenAI's API sends the base64 string,
    which is patched in here), the models list and the refusals' ErrorResponse."""
    srv = Server(os.path.join(REPO, "tests", "data", "embeddings", "tinybert"))
    try:
        body = {"model": "tinybert", "input": ["hello", "the quick brown fox"]}
        st, b, _ = post(srv, "/v1/embeddings", body)
        assert st == 200, b
        j = json.loads(b)
        check(spec, "CreateEmbeddingResponse", j)
        assert len(j["data"]) == 2 and len(j["data"][1]["embedding"]) == 32
        spec64 = copy.deepcopy(spec)
        spec64["schemas"]["Embedding"]["properties"]["embedding"] = {
            "anyOf": [spec["schemas"]["Embedding"]["properties"]["embedding"],
                      {"type": "string", "contentEncoding": "base64"}]}
        st, b, _ = post(srv, "/v1/embeddings", dict(body, encoding_format="base64"))
        j = json.loads(b)
        check(spec64, "CreateEmbeddingResponse", j)
        assert all(isinstance(d["embedding"], str) for d in j["data"])
        for tokens in ([5, 6, 7], [[5, 6], [7]]):
            st, b, _ = post(srv, "/v1/embeddings", {"model": "tinybert", "input": tokens})
            assert st == 200, b
            check(spec, "CreateEmbeddingResponse", json.loads(b))
        st, b, _ = srv.get("/v1/models")
        check(spec, "ListModelsResponse", json.loads(b))
        for path, bad in (("/v1/embeddings", {"input": []}),
                          ("/v1/embeddings", {"input": "a", "encoding_format": "x"}),
                          ("/v1/chat/completions", {"messages": [{"role": "user",
                                                                  "content": "hi"}]})):
            st, b, _ = post(srv, path, bad)
            assert st == 400
            check(spec, "ErrorResponse", json.loads(b))
    finally:
        assert srv.stop() == 0, srv.output()
