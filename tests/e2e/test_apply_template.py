"""test_apply_template.py — POST /apply-template: the prompt a chat body renders to equals
`cinfer render` of the same conversation (and the prompt /v1/chat/completions runs: its
prompt_tokens are the rendered text's tokens); bad bodies and a model without a chat
template answer 400 in the OpenAI shape."""
import json
import subprocess

from conftest import BIN, STORIES, STORIES_TEMPLATE, Server

MSGS = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Once upon a time"},
        {"role": "assistant", "content": "there was a cat"}, {"role": "user", "content": "More"}]


def test_apply_template_equals_render(stories, tmp_path):
    st, raw, _ = stories.post("/apply-template", {"messages": MSGS, "max_tokens": 3})
    assert st == 200, raw
    prompt = json.loads(raw)["prompt"]
    f = tmp_path / "chat.json"
    f.write_text(json.dumps(MSGS))
    out = subprocess.run([BIN, "render", STORIES_TEMPLATE, "--messages", str(f),
                          "--add-generation-prompt", "--bos", "<s>", "--eos", "</s>"],
                         capture_output=True, text=True, check=True)
    assert prompt == out.stdout
    # the chat route runs exactly that prompt
    st, raw, _ = stories.post("/v1/chat/completions", {"messages": MSGS, "max_tokens": 1})
    n_chat = json.loads(raw)["usage"]["prompt_tokens"]
    ids = json.loads(subprocess.run([BIN, "tokenize", STORIES, "--text", prompt, "--special"],
                                    capture_output=True, text=True, check=True).stdout)
    assert n_chat == len(ids), (n_chat, ids)


def test_apply_template_errors(stories):
    for body in ({}, {"messages": "x"}, {"messages": [{"role": "bogus", "content": "x"}]}):
        st, raw, _ = stories.post("/apply-template", body)
        assert st == 400, (body, raw)
        e = json.loads(raw)["error"]
        assert e["type"] == "invalid_request_error" and e["message"], e
    s = Server(STORIES)  # no chat template
    try:
        st, raw, _ = s.post("/apply-template", {"messages": MSGS})
        assert st == 400
        assert json.loads(raw)["error"]["message"].startswith("prompt build failed: the model has no chat template")
    finally:
        assert s.stop() == 0
