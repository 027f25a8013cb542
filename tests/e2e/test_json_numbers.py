"""test_json_numbers.py — reals in every JSON body are the shortest decimal that reads back as
the same double (0.7, not 0.69999999999999996): /v1/models, /stats, and logprobs of chat
completions, completions, Responses and Anthropic bodies (src/util/jsonfmt.h)."""
import json
import re

from conftest import STORIES, STORIES_TEMPLATE, Server, sse_events

NUM = re.compile(r'"(?:[^"\\]|\\.)*"|(-?\d+(?:\.\d+)?(?:[eE][-+]?\d+)?)')


def reals(text):
    """The real-number tokens of a JSON text (strings skipped)."""
    return [m.group(1) for m in NUM.finditer(text) if m.group(1) and re.search(r"[.eE]", m.group(1))]


def sig_digits(tok):
    mant = tok.lower().split("e")[0].lstrip("-").replace(".", "")
    return len(mant.strip("0")) or 1


def assert_shortest(text):
    rs = reals(text)
    for t in rs:
        short = repr(float(t))  # Python's repr is the shortest round-trip form
        assert sig_digits(t) <= sig_digits(short), (t, short)
    return rs


def test_models_temperature_is_0_7():
    s = Server(STORIES, "--chat-template", STORIES_TEMPLATE, "--temperature", "0.7", "--top-p", "0.95")
    try:
        st, raw, _ = s.get("/v1/models")
        text = raw.decode()
        assert '"temperature":0.7,' in text and '"top_p":0.95,' in text, text
        assert "0.69999" not in text
        assert_shortest(text)
        assert_shortest(s.get("/stats")[1].decode())
    finally:
        assert s.stop() == 0


def test_logprobs_bodies_are_shortest(stories):
    bodies = []
    st, raw, _ = stories.post("/v1/chat/completions", {
        "messages": [{"role": "user", "content": "Once upon a time"}], "max_tokens": 8,
        "temperature": 0, "logprobs": True, "top_logprobs": 3})
    assert st == 200
    bodies.append(raw.decode())
    st, raw, _ = stories.post("/v1/completions", {"prompt": "Once upon a time", "max_tokens": 8,
                                                  "temperature": 0.3, "logprobs": True, "top_logprobs": 2, "stream": True})
    assert st == 200
    bodies += sse_events(raw)[:-1]
    st, raw, _ = stories.post("/v1/responses", {"input": "Once", "max_output_tokens": 4,
                                                "temperature": 0.7, "top_p": 0.9})
    assert st == 200
    bodies.append(raw.decode())
    n = 0
    for b in bodies:
        json.loads(b)
        n += len(assert_shortest(b))
    assert n > 20  # the logprobs are there, and every one is shortest
    assert '"temperature":0.7' in bodies[-1] and '"top_p":0.9' in bodies[-1], bodies[-1]
