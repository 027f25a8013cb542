"""test_lm_eval.py — lm-evaluation-harness (PyPI `lm_eval[api]`) against cinfer on stories260K.

`local-completions` runs a loglikelihood (multiple-choice) task with cinfer as its remote
tokenizer (vLLM's /tokenize, /detokenize, /tokenizer_info): it sends token-id prompts with
`echo` and `logprobs`, and the loglikelihoods it reports must equal the log-softmax of
`cinfer run --prompt-logprobs`'s logits (another code path: single-sequence prefill, no
engine) within 1e-4. `local-chat-completions` runs a generate-until task; its answers must be
the chat endpoint's own greedy answers. The tasks are tiny local files
(tests/data/lm_eval): the `json` dataset builder reads them, nothing is downloaded
(HF_DATASETS_OFFLINE=1, a private HF_HOME). The harness runs in the release build only
(CINFER_E2E_QUICK=1 skips it; the routes are checked there too).
"""
import json
import os
import subprocess

import pytest

from conftest import BIN, QUICK, REPO, STORIES

TASKS = os.path.join(REPO, "tests", "data", "lm_eval")


@pytest.fixture(scope="module")
def lm_eval_env(tmp_path_factory):
    if QUICK:  # the harness's imports take ~30 s; its requests are test_eval_completions'
        pytest.skip("CINFER_E2E_QUICK=1: lm-evaluation-harness runs in the release build only")
    d = tmp_path_factory.mktemp("lm_eval")
    # for this module only: later suites (test_model_store) read the real Hugging Face cache
    env = {"HF_HOME": str(d / "hf"), "HF_DATASETS_OFFLINE": "1", "HF_HUB_OFFLINE": "1"}
    saved = {k: os.environ.get(k) for k in env}
    os.environ.update(env)
    try:
        yield from _lm_eval_env(d)
    finally:
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


def _lm_eval_env(d):
    lm_eval = pytest.importorskip("lm_eval")
    pytest.importorskip("tenacity")  # lm_eval[api]
    from lm_eval.tasks import TaskManager
    # the task files with their data file's absolute path
    for name in ("tiny_ll", "tiny_gen"):
        y = open(os.path.join(TASKS, name + ".yaml")).read()
        y = y.replace(f"test: {name}.jsonl", "test: " + os.path.join(TASKS, name + ".jsonl"))
        (d / (name + ".yaml")).write_text(y)
    yield lm_eval, TaskManager(include_path=str(d))


def tokenize(srv, text):
    st, b, _ = srv.post("/tokenize", {"prompt": text, "add_special_tokens": False})
    assert st == 200, b
    return json.loads(b)["tokens"]


def run_prompt_logprobs(ids):
    out = subprocess.run([BIN, "run", STORIES, "--ids", ",".join(map(str, ids)),
                          "--prompt-logprobs", "--kv-f32", "-t", "2"],
                         capture_output=True, text=True, check=True)
    return json.loads(out.stdout)


def test_tokenizer_routes(stories):
    ids = tokenize(stories, "Once upon a time")
    st, b, _ = stories.post("/detokenize", {"tokens": ids})
    assert st == 200 and json.loads(b)["prompt"] == "Once upon a time"
    st, b, _ = stories.post("/tokenize", {"prompt": "Once upon a time"})
    j = json.loads(b)
    assert j["tokens"] == [1] + ids and j["count"] == len(ids) + 1 and j["max_model_len"] > 0
    st, b, _ = stories.post("/tokenize", {"messages": [{"role": "user", "content": "hi"}]})
    assert st == 200 and json.loads(b)["count"] > 2
    st, b, _ = stories.get("/tokenizer_info")
    assert st == 200 and json.loads(b)["eos_token"] == "</s>"
    st, b, _ = stories.post("/detokenize", {"tokens": [10 ** 9]})
    assert st == 400 and json.loads(b)["error"]["param"] == "tokens"
    st, b, _ = stories.post("/tokenize", {"text": "x"})
    assert st == 400


def test_local_completions_loglikelihood(stories, lm_eval_env):
    lm_eval, tm = lm_eval_env
    r = lm_eval.simple_evaluate(
        model="local-completions",
        model_args=f"model=stories260K,base_url={stories.base}/v1/completions,"
                   "tokenizer_backend=remote,tokenized_requests=True,num_concurrent=2,"
                   "max_retries=1",
        tasks=["cinfer_tiny_ll"], task_manager=tm, log_samples=True)
    samples = r["samples"]["cinfer_tiny_ll"]
    assert len(samples) == 3
    n = 0
    for s in samples:
        ctx = tokenize(stories, s["doc"]["context"])
        for choice, (ll, _greedy) in zip(s["doc"]["choices"], s["filtered_resps"]):
            cont = tokenize(stories, choice)
            ref = run_prompt_logprobs(ctx + cont)
            want = sum(ref[len(ctx):])
            assert abs(ll - want) < 1e-4, (s["doc"], choice, ll, want)
            n += 1
    assert n == 6
    assert 0.0 <= r["results"]["cinfer_tiny_ll"]["acc,none"] <= 1.0


def test_local_chat_completions_generate(stories, lm_eval_env):
    lm_eval, tm = lm_eval_env
    r = lm_eval.simple_evaluate(
        model="local-chat-completions",
        model_args=f"model=stories260K,base_url={stories.base}/v1/chat/completions,"
                   "tokenizer_backend=none,tokenized_requests=False,max_retries=1",
        tasks=["cinfer_tiny_gen"], task_manager=tm, log_samples=True, apply_chat_template=True)
    samples = r["samples"]["cinfer_tiny_gen"]
    assert len(samples) == 2
    for s in samples:
        st, b, _ = stories.post("/v1/chat/completions",
                                {"messages": [{"role": "user", "content": s["doc"]["question"]}],
                                 "max_tokens": 8, "temperature": 0, "stop": ["\n"]})
        assert st == 200, b
        want = json.loads(b)["choices"][0]["message"]["content"]
        assert s["resps"][0][0] == want, (s, want)
    assert "exact_match,none" in r["results"]["cinfer_tiny_gen"]
