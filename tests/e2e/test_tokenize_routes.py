"""test_tokenize_routes.py — the routes routers call besides generation: vLLM's POST /tokenize
and /detokenize (serve_template.c; lm-eval's remote tokenizer uses them too, test_lm_eval.py)
and SGLang's /server_info and /model_info probes (serve_info.c).

/tokenize must answer the ids a generation of the same body prefills — checked against the
prompt_tokens of real generations and against the prefix cache (a completion sent as the
returned ids hits the blocks the text prompt stored) — and refuse what it cannot honour.
"""
import json

import pytest

from conftest import STORIES, STORIES_TEMPLATE, Server, http

PROMPT = "Once upon a time there was a little girl named Lily. She liked to play outside."


@pytest.fixture(scope="module")
def srv():
    s = Server(STORIES, "--chat-template", STORIES_TEMPLATE, "--served-model-name", "tiny")
    yield s
    assert s.stop() == 0, s.output()


def post(srv, path, body):
    st, raw, _ = srv.post(path, body)
    return st, json.loads(raw)


def test_tokenize_prompt_matches_generation_and_cache(srv):
    st, tk = post(srv, "/tokenize", {"model": "tiny", "prompt": PROMPT})
    assert st == 200, tk
    assert tk["count"] == len(tk["tokens"]) and tk["token_strs"] is None
    assert tk["max_model_len"] > 0 and tk["tokens"][0] == 1  # the tokenizer's BOS
    st, gen = post(srv, "/v1/completions", {"prompt": PROMPT, "max_tokens": 2, "temperature": 0})
    assert st == 200 and gen["usage"]["prompt_tokens"] == tk["count"]
    # the same prompt as the returned ids reuses the blocks the text prompt stored
    st, again = post(srv, "/v1/completions", {"prompt": tk["tokens"], "max_tokens": 2,
                                              "temperature": 0})
    assert st == 200 and again["choices"][0]["text"] == gen["choices"][0]["text"]
    assert again["usage"]["prompt_tokens_details"]["cached_tokens"] >= 16


def test_tokenize_chat_matches_generation(srv):
    msgs = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hi there"}]
    st, tk = post(srv, "/tokenize", {"model": "tiny", "messages": msgs,
                                     "return_token_strs": True})
    assert st == 200, tk
    assert len(tk["token_strs"]) == tk["count"] and all(isinstance(s, str) for s in tk["token_strs"])
    st, gen = post(srv, "/v1/chat/completions", {"messages": msgs, "max_tokens": 1})
    assert st == 200 and gen["usage"]["prompt_tokens"] == tk["count"]


def test_detokenize_round_trip(srv):
    st, tk = post(srv, "/tokenize", {"prompt": PROMPT})
    st, dt = post(srv, "/detokenize", {"tokens": tk["tokens"][1:]})  # without BOS
    assert st == 200 and dt["prompt"] == PROMPT
    st, err = post(srv, "/detokenize", {"tokens": [1, 10 ** 6]})
    assert st == 400 and err["error"]["param"] == "tokens"


def test_tokenize_special_tokens_and_ids(srv):
    st, with_bos = post(srv, "/tokenize", {"prompt": PROMPT})
    st2, without = post(srv, "/tokenize", {"prompt": PROMPT, "add_special_tokens": False})
    assert st == st2 == 200 and with_bos["tokens"] == [1] + without["tokens"]
    st, ids = post(srv, "/tokenize", {"prompt": with_bos["tokens"]})  # ids: taken as they are
    assert st == 200 and ids["tokens"] == with_bos["tokens"]
    st, err = post(srv, "/tokenize", {"prompt": [1, -3]})
    assert st == 400 and err["error"]["param"] == "prompt"


@pytest.mark.parametrize("body,param", [
    ({"messages": [{"role": "user", "content": "x"}], "add_generation_prompt": False},
     "add_generation_prompt"),
    ({"messages": [{"role": "user", "content": "x"}], "continue_final_message": True},
     "continue_final_message"),
    ({"model": "tiny"}, "prompt"),
])
def test_tokenize_refuses_what_it_cannot_honour(srv, body, param):
    st, err = post(srv, "/tokenize", body)
    assert st == 400 and err["error"]["param"] == param, err


def test_tokenize_bad_bodies(srv):
    for raw in (b"", b"[1,2]", b"{", b'{"prompt": 5}', b'{"messages": "x"}'):
        st, body, _ = http("POST", srv.base + "/tokenize", data=raw)
        assert st == 400, (raw, body)
        assert json.loads(body)["error"]["type"] == "invalid_request_error"


@pytest.mark.parametrize("path", ["/server_info", "/get_server_info", "/model_info",
                                  "/get_model_info"])
def test_sglang_probes(srv, path):
    st, raw, _ = srv.get(path)
    assert st == 200
    info = json.loads(raw)
    assert info["served_model_name"] == "tiny" and info["is_generation"] is True
    assert info["model_path"].endswith("stories260K.gguf") and info["context_length"] > 0
    if "server_info" in path:
        assert info["dp_size"] == 1 and info["page_size"] == 16
        assert info["vllm_config"]["cache_config"]["block_size"] == 16
        assert info["vllm_config"]["model_config"]["model"] == "tiny"
