"""test_generation_config.py — sampling defaults from a Hugging Face model directory's
generation_config.json, and their precedence: request > server flag > generation_config >
built-in. The model is the random-weight qwen2 parity model (tests/data/parity/qwen2, vocab
272) with a byte-level BPE tokenizer.json written here (256 byte tokens + 16 specials).
"""
import json
import os
import shutil

import pytest

from conftest import REPO, Server


def bytes_to_unicode():
    bs = list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1)) + \
        list(range(ord("®"), ord("ÿ") + 1))
    cs = bs[:]
    n = 0
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + n)
            n += 1
    return dict(zip(bs, [chr(c) for c in cs]))


@pytest.fixture(scope="module")
def hfdir(tmp_path_factory):
    d = tmp_path_factory.mktemp("hf-qwen2")
    src = os.path.join(REPO, "tests", "data", "parity", "qwen2")
    for f in ("config.json", "model.safetensors"):
        shutil.copy(os.path.join(src, f), d / f)
    b2u = bytes_to_unicode()
    vocab = {b2u[b]: b for b in range(256)}
    added = [{"id": 256 + i, "content": f"<|special_{i}|>", "single_word": False, "lstrip": False,
              "rstrip": False, "normalized": False, "special": True} for i in range(16)]
    tok = {"version": "1.0", "truncation": None, "padding": None, "added_tokens": added,
           "normalizer": None,
           "pre_tokenizer": {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True,
                             "use_regex": True},
           "post_processor": None,
           "decoder": {"type": "ByteLevel", "add_prefix_space": True, "trim_offsets": True,
                       "use_regex": True},
           "model": {"type": "BPE", "dropout": None, "unk_token": None,
                     "continuing_subword_prefix": None, "end_of_word_suffix": None,
                     "fuse_unk": False, "byte_fallback": False, "vocab": vocab, "merges": []}}
    (d / "tokenizer.json").write_text(json.dumps(tok))
    (d / "tokenizer_config.json").write_text(json.dumps({"eos_token": "<|special_1|>"}))
    (d / "generation_config.json").write_text(json.dumps(
        {"temperature": 0.25, "top_p": 0.8, "top_k": 7, "eos_token_id": [257, 258]}))
    return str(d)


def gen_defaults(srv):
    return json.loads(srv.get("/v1/models")[1])["data"][0]["gen_defaults"]


def test_generation_config_defaults_and_precedence(hfdir):
    s = Server(hfdir)
    try:
        assert gen_defaults(s) == {"temperature": 0.25, "top_p": 0.8, "top_k": 7}
        assert "temperature 0.25 (generation_config)" in s.output()
        # requests still override, and the defaults really sample: greedy is reproducible
        body = {"prompt": "hello", "max_tokens": 12, "temperature": 0}
        a = json.loads(s.post("/v1/completions", body)[1])["choices"][0]["text"]
        b = json.loads(s.post("/v1/completions", body)[1])["choices"][0]["text"]
        assert a == b
    finally:
        assert s.stop() == 0
    s = Server(hfdir, "--temperature", "0.5", "--top-k", "0")
    try:
        # server flags beat generation_config; what they leave unset still comes from it
        assert gen_defaults(s) == {"temperature": 0.5, "top_p": 0.8, "top_k": 0}
        assert "temperature 0.5 (--temperature)" in s.output()
    finally:
        assert s.stop() == 0


def test_generation_config_eos_ids_stop_generation(hfdir):
    s = Server(hfdir)
    try:
        # force an extra EOS id from generation_config: generation ends at once with "stop"
        body = {"prompt": "hello", "max_tokens": 20, "temperature": 0,
                "logit_bias": {"258": 100}, "logprobs": True}
        j = json.loads(s.post("/v1/completions", body)[1])
        assert j["choices"][0]["finish_reason"] == "stop"
        assert j["usage"]["completion_tokens"] == 1
        assert j["choices"][0]["logprobs"]["content"][0]["id"] == 258
    finally:
        assert s.stop() == 0
