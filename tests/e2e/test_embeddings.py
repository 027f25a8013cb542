"""test_embeddings.py — POST /v1/embeddings through the OpenAI SDK (docs/embeddings.md).

The tiny random-weight BERT of tests/data/embeddings/tinybert (CLS pooling + Normalize) runs
in every build, sanitizers included: the SDK's float and base64 paths, every input shape,
the refusals in OpenAI's error shape, the generation routes refused on an embedding-only
server, /v1/models. all-MiniLM-L6-v2 (scripts/fetch_models.sh all-minilm-l6-v2) is compared
with sentence-transformers' goldens (tests/data/embeddings/minilm.json, cosine >= 1 - 1e-4)
through the server, in the release build. A generative model's /v1/embeddings is a 400.
"""
import base64
import concurrent.futures as cf
import json
import math
import os
import struct

import openai
import pytest

from conftest import MODELS, QUICK, REPO, STORIES, Server

DATA = os.path.join(REPO, "tests", "data", "embeddings")
TINY = os.path.join(DATA, "tinybert")
MINILM = os.path.join(MODELS, "all-MiniLM-L6-v2")


def golden(path):
    with open(path) as f:
        return json.load(f)


def cosine(a, b):
    dot = sum(x * y for x, y in zip(a, b))
    return dot / math.sqrt(sum(x * x for x in a) * sum(y * y for y in b))


def client(srv):
    return openai.OpenAI(base_url=srv.base + "/v1", api_key="x", max_retries=0)


@pytest.fixture(scope="module")
def tiny():
    s = Server(TINY)
    yield s
    assert s.stop() == 0, s.output()


@pytest.fixture(scope="module")
def minilm():
    if QUICK:
        pytest.skip("CINFER_E2E_QUICK=1: the real embedding model runs in the release build")
    if not os.path.isdir(MINILM):
        pytest.skip("all-MiniLM-L6-v2 not fetched (scripts/fetch_models.sh all-minilm-l6-v2)")
    s = Server(MINILM)
    yield s
    assert s.stop() == 0, s.output()


def check_golden(srv, g, tol=1e-4):
    c = client(srv)
    r = c.embeddings.create(model="m", input=g["sentences"], encoding_format="float")
    assert [d.index for d in r.data] == list(range(len(g["sentences"])))
    worst = 1.0
    for d, want in zip(r.data, g["embeddings"]):
        assert len(d.embedding) == len(want)
        worst = min(worst, cosine(d.embedding, want))
        assert max(abs(x - y) for x, y in zip(d.embedding, want)) < 1e-4
    assert worst >= 1 - tol, worst
    assert r.usage.prompt_tokens == sum(len(i) for i in g["ids"])
    assert r.usage.total_tokens == r.usage.prompt_tokens
    return r


def test_tiny_matches_sentence_transformers(tiny):
    check_golden(tiny, golden(os.path.join(TINY, "golden.json")))


def test_minilm_matches_sentence_transformers(minilm):
    r = check_golden(minilm, golden(os.path.join(DATA, "minilm.json")))
    assert r.model == "all-MiniLM-L6-v2"
    # normalized (the model's Normalize module)
    for d in r.data:
        assert abs(math.sqrt(sum(x * x for x in d.embedding)) - 1) < 1e-5


def test_float_and_base64_are_the_same_bits(tiny):
    c = client(tiny)
    texts = ["the quick brown fox", "hello"]
    f = c.embeddings.create(model="m", input=texts, encoding_format="float")
    b = c.embeddings.create(model="m", input=texts, encoding_format="base64")
    for df, db in zip(f.data, b.data):
        assert isinstance(db.embedding, str)
        raw = base64.b64decode(db.embedding)
        vals = struct.unpack(f"<{len(raw) // 4}f", raw)
        # the float text reads back as the same float32
        assert list(vals) == [struct.unpack("<f", struct.pack("<f", x))[0] for x in df.embedding]
    # the SDK's default (no encoding_format: it asks for base64 and decodes it)
    d = c.embeddings.create(model="m", input=texts)
    f32 = lambda v: [struct.unpack("<f", struct.pack("<f", x))[0] for x in v]  # noqa: E731
    assert f32(d.data[0].embedding) == f32(f.data[0].embedding)


def test_input_shapes(tiny):
    c = client(tiny)
    g = golden(os.path.join(TINY, "golden.json"))
    one = c.embeddings.create(model="m", input=g["sentences"][0]).data
    assert len(one) == 1
    # token ids are the text's ids without the special tokens: the same vector
    ids = g["ids"][0][1:-1]
    by_ids = c.embeddings.create(model="m", input=ids, encoding_format="float").data
    assert by_ids[0].embedding == c.embeddings.create(
        model="m", input=g["sentences"][0], encoding_format="float").data[0].embedding
    many = c.embeddings.create(model="m", input=[g["ids"][k][1:-1] for k in range(3)],
                               encoding_format="float").data
    assert len(many) == 3
    alone = c.embeddings.create(model="m", input=g["sentences"][2],
                                encoding_format="float").data[0].embedding
    assert many[2].embedding == alone  # batch invariant, bit for bit


def test_refusals_in_openai_shape(tiny):
    c = client(tiny)
    cases = [
        ({"input": ""}, "input"),
        ({"input": []}, "input"),
        ({"input": ["a", 3]}, "input"),
        ({"input": [[1, 2], "a"]}, "input"),
        ({"input": [[]]}, "input"),
        ({"input": {"a": 1}}, "input"),
        ({}, "input"),
        ({"input": "a", "encoding_format": "int8"}, "encoding_format"),
        ({"input": "a", "dimensions": 0}, "dimensions"),
        ({"input": "a", "dimensions": 8}, "dimensions"),  # not a Matryoshka model
        ({"input": [[1, 100000]]}, "input"),  # not a token id of the model
        ({"input": ["x"] * 2049}, "input"),
        ({"input": "word " * 70}, "input"),  # over the model's 64 positions
    ]
    for body, param in cases:
        st, b, _ = tiny.post("/v1/embeddings", dict({"model": "m"}, **body))
        assert st == 400, (body, b)
        err = json.loads(b)["error"]
        assert err["param"] == param and err["type"] == "invalid_request_error", (body, err)
        assert err["message"]
    with pytest.raises(openai.BadRequestError) as ei:
        c.embeddings.create(model="m", input="a", dimensions=8)
    assert "dimensions" in str(ei.value)
    st, b, _ = tiny.post("/v1/embeddings", b"{not json", raw=True)
    assert st == 400 and "invalid JSON" in json.loads(b)["error"]["message"]
    # full-size dimensions is no truncation: accepted
    r = c.embeddings.create(model="m", input="a", dimensions=32, encoding_format="float")
    assert len(r.data[0].embedding) == 32


def test_embedding_only_server_refuses_generation(tiny):
    c = client(tiny)
    with pytest.raises(openai.BadRequestError) as ei:
        c.chat.completions.create(model="m", messages=[{"role": "user", "content": "hi"}])
    assert "embedding model" in str(ei.value)
    with pytest.raises(openai.BadRequestError):
        c.completions.create(model="m", prompt="hi")
    st, b, _ = tiny.post("/v1/messages", {"model": "m", "max_tokens": 4,
                                          "messages": [{"role": "user", "content": "hi"}]})
    assert st == 400 and json.loads(b)["type"] == "error"
    m = c.models.list().data[0]
    assert m.id == "tinybert"
    j = json.loads(tiny.get("/v1/models")[1])["data"][0]
    assert j["capabilities"] == ["embeddings"] and j["embedding_dimensions"] == 32
    assert j["context_length"] == 64


def test_concurrent_requests_batch_and_match(tiny):
    c = client(tiny)
    g = golden(os.path.join(TINY, "golden.json"))
    alone = [c.embeddings.create(model="m", input=s, encoding_format="float").data[0].embedding
             for s in g["sentences"]]
    with cf.ThreadPoolExecutor(8) as ex:
        futs = [ex.submit(c.embeddings.create, model="m", input=g["sentences"],
                          encoding_format="float") for _ in range(8)]
        for f in futs:
            assert [d.embedding for d in f.result().data] == alone
    st = tiny.stats()["embeddings"]
    # one request's 8 sentences go in one forward (batched by --max-batch-tokens)
    assert st["max_inputs_in_forward"] >= 8
    assert st["forwards"] < st["inputs"]


def test_generative_model_refuses_embeddings_without_the_flag():
    s = Server(STORIES)
    try:
        st, b, _ = s.post("/v1/embeddings", {"model": "m", "input": "hello"})
        assert st == 400, b
        err = json.loads(b)["error"]
        assert err["param"] == "model" and "--embeddings" in err["message"]
        caps = json.loads(s.get("/v1/models")[1])["data"][0]["capabilities"]
        assert "embeddings" not in caps
    finally:
        assert s.stop() == 0, s.output()


@pytest.mark.parametrize("pool", ["last", "mean"])
def test_generative_model_with_embeddings_flag(pool):
    """--embeddings: the decoder's pooled final hidden states (numerics vs transformers:
    tests/unit/test_embed_dec.c), beside generation, which still works."""
    s = Server(STORIES, "--embeddings", pool)
    try:
        c = client(s)
        texts = ["Once upon a time", "The cat sat on the mat.", "hello"]
        r = c.embeddings.create(model="m", input=texts, encoding_format="float")
        assert len(r.data) == 3 and all(len(d.embedding) == 64 for d in r.data)
        for d in r.data:
            assert abs(math.sqrt(sum(x * x for x in d.embedding)) - 1) < 1e-5
        alone = c.embeddings.create(model="m", input=texts[1], encoding_format="float")
        assert alone.data[0].embedding == r.data[1].embedding
        assert r.data[0].embedding != r.data[1].embedding
        caps = json.loads(s.get("/v1/models")[1])["data"][0]["capabilities"]
        assert "embeddings" in caps and "completions" in caps
        out = c.completions.create(model="m", prompt="Once upon", max_tokens=4, temperature=0)
        assert out.choices[0].text
        with pytest.raises(openai.BadRequestError):
            c.embeddings.create(model="m", input="a", dimensions=8)
    finally:
        assert s.stop() == 0, s.output()


def test_decoder_embeddings_beside_a_stream():
    """--embeddings runs its forwards on the engine's thread between generation steps: an
    embedding request made while a long greedy stream runs is answered with the same vector
    as when the server is idle, and the stream is the same tokens as a stream alone."""
    import threading
    s = Server(STORIES, "--embeddings", "mean")
    try:
        c = client(s)
        text = "The little dog ran home."
        idle = c.embeddings.create(model="m", input=text, encoding_format="float")

        def stream():
            parts = []
            for ch in c.completions.create(model="m", prompt="Once upon a time", max_tokens=200,
                                           temperature=0, stream=True,
                                           extra_body={"ignore_eos": True}):
                if ch.choices:
                    parts.append(ch.choices[0].text)
            return "".join(parts)

        alone = stream()
        got = {}
        th = threading.Thread(target=lambda: got.update(text=stream()))
        th.start()
        busy = [c.embeddings.create(model="m", input=[text, "hello"], encoding_format="float")
                for _ in range(3)]
        th.join(timeout=300)
        assert not th.is_alive()
        for r in busy:
            assert r.data[0].embedding == idle.data[0].embedding
        assert got["text"] == alone and len(alone) > 0
        st = s.stats()["embeddings"]  # a generative server's /stats has them too
        assert st["requests"] == 4 and st["inputs"] == 7 and st["failed"] == 0, st
    finally:
        assert s.stop() == 0, s.output()


def test_bad_embeddings_flag():
    import subprocess
    from conftest import BIN
    p = subprocess.run([BIN, "serve", STORIES, "--embeddings", "max"], capture_output=True,
                       text=True, timeout=60)
    assert p.returncode != 0 and "--embeddings expects last|mean" in p.stderr


def test_matryoshka_model_allows_dimensions(tmp_path):
    """A model whose card says it was trained with MatryoshkaLoss takes `dimensions`: the
    first N values, renormalized (the tiny BERT copied with such a card)."""
    import shutil
    d = tmp_path / "tinybert-mrl"
    shutil.copytree(TINY, d)
    (d / "README.md").write_text("---\ntags: [sentence-transformers]\n---\n"
                                 "Trained with loss: MatryoshkaLoss\n")
    s = Server(str(d))
    try:
        c = client(s)
        full = c.embeddings.create(model="m", input="hello", encoding_format="float")
        cut = c.embeddings.create(model="m", input="hello", dimensions=8,
                                  encoding_format="float")
        v = full.data[0].embedding[:8]
        n = math.sqrt(sum(x * x for x in v))
        assert len(cut.data[0].embedding) == 8
        assert max(abs(a - b / n) for a, b in zip(cut.data[0].embedding, v)) < 1e-6
        with pytest.raises(openai.BadRequestError) as ei:
            c.embeddings.create(model="m", input="hello", dimensions=33)
        assert "at most 32" in str(ei.value)
        assert "dimensions allowed" in s.output()
    finally:
        assert s.stop() == 0, s.output()


@pytest.mark.parametrize("kind", ["encoder", "decoder"])
def test_sigterm_drain_finishes_embeddings(kind):
    """With --drain-timeout, a SIGTERM lets an embedding request in flight finish (200, its
    vectors) before the server exits 0; new ones get 503. The worker (for a decoder: the
    engine's thread) is slowed with the engine's test hook (CINFER_TEST_STEP_DELAY_MS, per
    forward) so the request is surely in flight when the signal lands."""
    import signal
    import threading
    from conftest import wait_until
    model = [TINY] if kind == "encoder" else [STORIES, "--embeddings", "last"]
    s = Server(*model, "--drain-timeout", "60", env={"CINFER_TEST_STEP_DELAY_MS": "3000"})
    got = {}

    def call():
        got["r"] = s.post("/v1/embeddings", {"model": "m", "input": ["hello", "a b"]})

    t = threading.Thread(target=call)
    t.start()
    try:
        wait_until(lambda: s.stats()["embeddings"]["jobs"] >= 1, what="the request queued")
        s.proc.send_signal(signal.SIGTERM)
        wait_until(lambda: s.get("/health")[0] == 503 or s.proc.poll() is not None,
                   what="the drain")
        if s.proc.poll() is None:  # still draining: new work is refused
            st, b, _ = s.post("/v1/embeddings", {"model": "m", "input": "x"})
            assert st == 503, b
        t.join(120)
        st, b, _ = got["r"]
        assert st == 200, b
        assert len(json.loads(b)["data"]) == 2
        assert s.proc.wait(120) == 0, s.output()
    finally:
        t.join(1)
        s.stop()


def test_schemathesis_embeddings_no_server_error(tiny, tmp_path):
    """schemathesis (PyPI) fuzzes POST /embeddings and the models operations of the shipped
    spec against the embedding server: no 5xx; the server still answers afterwards (the
    fixture checks its exit status, so a sanitizer report fails too)."""
    import gzip
    import shutil
    import subprocess
    exe = shutil.which("schemathesis") or shutil.which("st")
    if exe is None:
        pytest.fail("schemathesis is not installed (scripts/test.sh installs it)")
    spec = tmp_path / "openai-openapi.json"
    with gzip.open(os.path.join(REPO, "tests", "data", "openapi", "openai-openapi.json.gz"),
                   "rb") as f:
        spec.write_bytes(f.read())
    phases = "examples,coverage" if QUICK else "examples,coverage,fuzzing"
    cmd = [exe, "run", str(spec), "--url", tiny.base + "/v1", "--include-path-regex",
           r"^/(embeddings|models|models/\{model\})$", "--checks", "not_a_server_error",
           "--max-examples", "4" if QUICK else "25", "--request-timeout", "300",
           "--phases", phases, "--seed", "20261206", "--no-color"]
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=1200,
                       env={**os.environ, "SCHEMATHESIS_HOOKS": ""})
    out = r.stdout + r.stderr
    assert r.returncode == 0, out[-6000:]
    assert "Server error" not in out, out[-6000:]
    assert tiny.get("/health")[0] == 200


def test_client_gone_cancels_untaken_inputs():
    """A client that disconnects drops its inputs not yet computed (the worker is slowed to
    one forward per second by the test hook, 64 tokens a forward: 200 short inputs need
    ~20 forwards, the disconnect lands within the first few)."""
    import socket
    from conftest import wait_until
    s = Server(TINY, "--max-batch-tokens", "64", env={"CINFER_TEST_STEP_DELAY_MS": "1000"})
    try:
        body = json.dumps({"model": "m", "input": ["hello a b"] * 200}).encode()
        sock = socket.create_connection(("127.0.0.1", s.port))
        sock.sendall(b"POST /v1/embeddings HTTP/1.1\r\nHost: x\r\nContent-Type: "
                     b"application/json\r\nContent-Length: " + str(len(body)).encode() +
                     b"\r\n\r\n" + body)
        wait_until(lambda: s.stats()["embeddings"]["forwards"] >= 1, what="a forward")
        sock.close()
        st = wait_until(lambda: (lambda e: e if e["cancelled_inputs"] > 0 else None)(
            s.stats()["embeddings"]), timeout=120, what="the cancellation")
        assert st["cancelled_inputs"] + st["inputs"] <= 200
        # the server goes on serving
        r = client(s).embeddings.create(model="m", input="hello", encoding_format="float")
        assert len(r.data[0].embedding) == 32
        final = s.stats()["embeddings"]
        assert final["cancelled_inputs"] + final["inputs"] == 201
    finally:
        assert s.stop() == 0, s.output()
