"""test_docs_examples.py — every ```sh block of README.md and docs/*.md runs as written, so the
examples cannot rot.

Rules (docs/testing.md): a ```sh block is an example and runs, from the repository root,
under `bash -e -o pipefail`, against files in the repository and the default real model.
Lines that start a server (`build/cinfer serve ...`, bare `build/cinfer`) are not run: the
test's own server on the default model stands in for them, and `localhost:8080` /
`127.0.0.1:8080` in a block point at it. The README's two setup commands (quickstart.sh,
test.sh) are the only blocks not run (the suite is test.sh; quickstart.sh ends in a server).
A synopsis or an output sample goes in a plain ``` (or ```json) block. Every command must exit
0 and print something; a curl block must answer JSON (one document per curl) without an
"error", SSE ending in [DONE], or Prometheus text.
"""
import glob
import json
import os
import re
import subprocess

import pytest

from conftest import BIN, REPO, sse_events

NOT_RUN = {"./scripts/quickstart.sh", "./scripts/test.sh"}
SERVER_LINE = re.compile(r"^\s*(build/)?cinfer(\s+serve\b.*|\s*|\s+-.*)$")


def doc_blocks():
    out = []
    for path in [os.path.join(REPO, "README.md")] + sorted(glob.glob(os.path.join(REPO, "docs", "*.md"))):
        text = open(path).read()
        for m in re.finditer(r"```sh\n(.*?)```", text, re.S):
            line = text[:m.start()].count("\n") + 1
            out.append((f"{os.path.relpath(path, REPO)}:{line}", m.group(1)))
    return out


BLOCKS = doc_blocks()


def script_of(block, base):
    lines = [l for l in block.split("\n") if not SERVER_LINE.match(l)]
    s = "\n".join(lines)
    for host in ("http://localhost:8080", "http://127.0.0.1:8080", "localhost:8080", "127.0.0.1:8080"):
        s = s.replace(host, base)
    return s.replace("build/cinfer ", BIN + " ")


def check_output(where, block, text):
    assert text, f"{where}: printed nothing"
    if "curl" not in block:
        return
    if '"stream": true' in block or '"stream":true' in block:
        assert text.endswith("data: [DONE]") or "event: message_stop" in text, (where, text[-200:])
        for e in sse_events(text.encode()):
            if e != "[DONE]":
                json.loads(e)
    elif "/metrics" in block:
        assert "cinfer_requests_total" in text, where
    else:
        dec, i, n = json.JSONDecoder(), 0, 0
        while i < len(text):
            j, i = dec.raw_decode(text, i)
            while i < len(text) and text[i].isspace():
                i += 1
            assert j.get("error") is None, (where, j)  # a Responses object has "error": null
            n += 1
        assert n == block.count("curl"), (where, text)


def test_blocks_found():
    where = [w for w, _ in BLOCKS]
    assert any(w.startswith("README.md") for w in where) and any("docs/api.md" in w for w in where)
    assert len(BLOCKS) >= 18, where
    not_run = [b.strip() for _, b in BLOCKS if b.strip() in NOT_RUN]
    assert sorted(not_run) == sorted(NOT_RUN), not_run


@pytest.mark.parametrize("where,block", [b for b in BLOCKS if b[1].strip() not in NOT_RUN],
                         ids=[w for w, b in BLOCKS if b.strip() not in NOT_RUN])
def test_doc_example(qwen, where, block):
    # a server line's model file must exist (the fixture's server stands in for it)
    for l in block.split("\n"):
        if SERVER_LINE.match(l):
            for w in l.split():
                if w.endswith(".gguf"):
                    assert os.path.exists(os.path.join(REPO, w)), (where, w)
    script = script_of(block, qwen.base)
    if not script.strip():
        return
    out = subprocess.run(["bash", "-e", "-o", "pipefail", "-c", script], cwd=REPO,
                         capture_output=True, text=True, timeout=600)
    assert out.returncode == 0, (where, block, out.stderr[-2000:])
    check_output(where, block, out.stdout.strip())
