"""test_schemathesis.py — schemathesis (PyPI) fuzzes the implemented OpenAI operations of
the shipped spec against `cinfer serve` on stories260K: no 5xx, no hang, no crash.

Operations: POST /chat/completions, POST /completions, GET /models, GET /models/{model},
POST /responses, GET and DELETE /responses/{response_id}. The check is schemathesis's
`not_a_server_error`; the server must still answer /health afterwards and exit cleanly (the
fixture checks the exit status, so a sanitizer report fails the test). Under the sanitizer
build (CINFER_E2E_QUICK=1) the examples and coverage phases run with fewer examples.
"""
import gzip
import os
import shutil
import subprocess
import sys

import pytest

from conftest import QUICK, REPO

SPEC = os.path.join(REPO, "tests", "data", "openapi", "openai-openapi.json.gz")
PATHS = r"^/(chat/completions|completions|models|models/\{model\}|responses|responses/\{response_id\})$"


def test_no_server_error(stories, tmp_path):
    exe = shutil.which("schemathesis") or shutil.which("st")
    if exe is None:
        pytest.fail("schemathesis is not installed (scripts/test.sh installs it: "
                    "python3 -m pip install schemathesis)")
    spec = tmp_path / "openai-openapi.json"
    with gzip.open(SPEC, "rb") as f:
        spec.write_bytes(f.read())
    phases = "examples,coverage" if QUICK else "examples,coverage,fuzzing"
    cmd = [exe, "run", str(spec), "--url", stories.base + "/v1", "--include-path-regex", PATHS,
           "--checks", "not_a_server_error", "--max-examples", "4" if QUICK else "8",
           "--request-timeout", "300", "--phases", phases, "--seed", "20261206",
           "--no-color"]
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=3000,
                       env={**os.environ, "SCHEMATHESIS_HOOKS": ""})
    out = r.stdout + r.stderr
    assert r.returncode == 0, out[-6000:]
    assert "Server error" not in out, out[-6000:]
    st, body, _ = stories.get("/health")
    assert st == 200, body
