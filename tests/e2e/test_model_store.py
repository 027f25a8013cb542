"""test_model_store.py — models by name: `cinfer pull` against a mock Hugging Face Hub (an
HTTP server this test starts: model info, resolve with redirect to a CDN path, X-Linked-Etag
= sha256, X-Repo-Commit, Range requests), the cache layout read back by huggingface_hub
(scan_cache_dir, try_to_load_from_cache), resume after a cut connection, a sha256
mismatch refused, a gated repo's error, `cinfer ls` / `cinfer rm`, and `cinfer serve NAME`
name resolution (unique, ambiguous, none) and bare `cinfer` picking the largest model that
fits. No internet: HF_ENDPOINT points at the mock.
"""
import hashlib
import json
import os
import re
import subprocess
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from conftest import BIN, STORIES, Server, free_port, http

COMMIT = "0123456789abcdef0123456789abcdef01234567"


def sha(b):
    return hashlib.sha256(b).hexdigest()


class Hub:
    """The Hub's behaviour that `cinfer pull` and huggingface_hub rely on."""

    def __init__(self):
        with open(STORIES, "rb") as f:
            gguf = f.read()
        self.repos = {
            "test-org/stories-GGUF": {"stories260K-Q8_0.gguf": gguf,
                                      "stories260K-F32.gguf": gguf + b"\0" * 4096,
                                      "README.md": b"# stories\n"},
            "test-org/badsha-GGUF": {"model-Q4_K_M.gguf": gguf},
        }
        self.bad_sha = {"test-org/badsha-GGUF"}
        self.gated = {"test-org/gated-model"}
        self.cut_once = set()  # blob shas whose next full GET is cut halfway
        self.gets = []         # (path, Range header) of CDN GETs
        hub = self

        class H(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *a):
                pass

            def send(self, code, body=b"", headers=None, head=False):
                self.send_response(code)
                for k, v in (headers or {}).items():
                    self.send_header(k, v)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                if not head:
                    self.wfile.write(body)

            def do_HEAD(self):
                self.route(head=True)

            def do_GET(self):
                self.route(head=False)

            def route(self, head):
                p = self.path.split("?")[0]
                m = re.match(r"^/api/models/([^/]+/[^/]+)/revision/main$", p)
                if m:
                    return hub.api(self, m.group(1), head)
                m = re.match(r"^/([^/]+/[^/]+)/resolve/([^/]+)/(.+)$", p)
                if m:
                    return hub.resolve(self, m.group(1), m.group(3), head)
                m = re.match(r"^/cdn/([0-9a-f]{64})$", p)
                if m:
                    return hub.cdn(self, m.group(1), head)
                self.send(404, b'{"error":"not found"}', head=head)

        self.srv = ThreadingHTTPServer(("127.0.0.1", 0), H)
        self.url = f"http://127.0.0.1:{self.srv.server_address[1]}"
        self.th = threading.Thread(target=self.srv.serve_forever, daemon=True)
        self.th.start()

    def blob(self, digest):
        for files in self.repos.values():
            for b in files.values():
                if sha(b) == digest:
                    return b
        return None

    def api(self, h, repo, head):
        if repo in self.gated and not h.headers.get("Authorization"):
            return h.send(401, b'{"error":"gated"}', {
                "X-Error-Code": "GatedRepo",
                "X-Error-Message": f"Access to model {repo} is restricted."}, head)
        if repo not in self.repos:
            return h.send(404, b'{"error":"Repository not found"}',
                          {"X-Error-Code": "RepoNotFound"}, head)
        body = json.dumps({"id": repo, "sha": COMMIT,
                           "siblings": [{"rfilename": f} for f in self.repos[repo]]}).encode()
        h.send(200, body, {"Content-Type": "application/json"}, head)

    def resolve(self, h, repo, file, head):
        files = self.repos.get(repo)
        if files is None or file not in files:
            return h.send(404, b"", {"X-Error-Code": "EntryNotFound"}, head)
        b = files[file]
        if file.endswith(".gguf"):  # an LFS file: redirect to the CDN
            etag = sha(b) if repo not in self.bad_sha else sha(b + b"x")
            return h.send(302, b"", {"Location": f"/cdn/{sha(b)}", "X-Repo-Commit": COMMIT,
                                     "X-Linked-Etag": f'"{etag}"',
                                     "X-Linked-Size": str(len(b)),
                                     "ETag": '"0000000000000000000000000000000000000001"'},
                          head)
        gitsha = hashlib.sha1(b"blob %d\0" % len(b) + b).hexdigest()
        h.send(200, b, {"X-Repo-Commit": COMMIT, "ETag": f'"{gitsha}"'}, head)

    def cdn(self, h, digest, head):
        b = self.blob(digest)
        if b is None:
            return h.send(404, b"", head=head)
        rng = h.headers.get("Range")
        if not head:
            self.gets.append((digest, rng))
        if rng:
            start = int(re.match(r"bytes=(\d+)-", rng).group(1))
            if start >= len(b):
                return h.send(416, b"", {"Content-Range": f"bytes */{len(b)}"}, head)
            part = b[start:]
            return h.send(206, part, {"Content-Range": f"bytes {start}-{len(b) - 1}/{len(b)}"},
                          head)
        if digest in self.cut_once and not head:
            self.cut_once.discard(digest)
            h.send_response(200)
            h.send_header("Content-Length", str(len(b)))
            h.end_headers()
            h.wfile.write(b[:len(b) // 2])
            h.wfile.flush()
            h.close_connection = True
            h.connection.shutdown(2)
            return
        h.send(200, b, head=head)

    def close(self):
        self.srv.shutdown()
        self.srv.server_close()


@pytest.fixture
def hub(tmp_path):
    h = Hub()
    env = dict(os.environ, HF_ENDPOINT=h.url, HF_HUB_CACHE=str(tmp_path / "hub"),
               HOME=str(tmp_path))
    env.pop("HF_TOKEN", None)
    env.pop("CINFER_MODEL", None)
    yield h, env, tmp_path
    h.close()


def cinfer(env, *args, cwd=None):
    return subprocess.run([BIN, *args], env=env, capture_output=True, text=True, timeout=300,
                          cwd=cwd)


def test_pull_resume_layout_and_names(hub):
    h, env, tmp = hub
    q8 = h.repos["test-org/stories-GGUF"]["stories260K-Q8_0.gguf"]
    h.cut_once.add(sha(q8))
    p = cinfer(env, "pull", "test-org/stories-GGUF:Q8_0")
    assert p.returncode == 0, p.stderr
    path = p.stdout.strip()
    assert path.endswith("/snapshots/" + COMMIT + "/stories260K-Q8_0.gguf")
    with open(path, "rb") as f:
        assert f.read() == q8
    # the cut connection was resumed with a Range request, not restarted
    ranges = [r for d, r in h.gets if d == sha(q8)]
    assert ranges[0] is None and ranges[1] is not None and ranges[1].startswith("bytes=")
    assert int(ranges[1][6:-1]) > 0
    assert "%" in p.stderr  # the progress line
    # the huggingface_hub layout, read by huggingface_hub itself
    repo_dir = tmp / "hub" / "models--test-org--stories-GGUF"
    assert os.path.islink(path)
    assert os.readlink(path) == "../../blobs/" + sha(q8)
    assert (repo_dir / "refs" / "main").read_text() == COMMIT
    hfh = pytest.importorskip("huggingface_hub")
    info = hfh.scan_cache_dir(str(tmp / "hub"))
    assert not info.warnings, info.warnings
    (repo,) = [r for r in info.repos if r.repo_id == "test-org/stories-GGUF"]
    assert repo.repo_type == "model" and repo.size_on_disk == len(q8)
    (rev,) = repo.revisions
    assert rev.commit_hash == COMMIT and {f.file_name for f in rev.files} == \
        {"stories260K-Q8_0.gguf"}
    assert hfh.try_to_load_from_cache("test-org/stories-GGUF", "stories260K-Q8_0.gguf",
                                      cache_dir=str(tmp / "hub")) == path
    # a second pull of the same file downloads nothing
    n = len(h.gets)
    assert cinfer(env, "pull", "test-org/stories-GGUF:Q8_0", "-q").returncode == 0
    assert len(h.gets) == n
    # the other quant: two cached models now
    assert cinfer(env, "pull", "test-org/stories-GGUF:stories260K-F32.gguf", "-q"
                  ).returncode == 0
    ls = cinfer(env, "ls")
    assert ls.returncode == 0
    assert "test-org/stories-GGUF:stories260K-Q8_0.gguf" in ls.stdout
    assert "test-org/stories-GGUF:stories260K-F32.gguf" in ls.stdout
    assert "llama" in ls.stdout  # the architecture read from the GGUF
    # names: ambiguous, none, unique
    amb = cinfer(env, "serve", "STORIES", "--port", str(free_port()))
    assert amb.returncode == 1 and "matches 2 cached models" in amb.stderr, amb.stderr
    assert "Q8_0" in amb.stderr and "F32" in amb.stderr
    none = cinfer(env, "serve", "no-such-model", "--port", str(free_port()))
    assert none.returncode == 1 and "no cached model matches" in none.stderr
    port = free_port()
    env_s = dict(env)
    srv = Server.__new__(Server)
    srv.port, srv.base = port, f"http://127.0.0.1:{port}"
    srv.log = open(f"/tmp/cinfer-e2e-{port}.log", "w+")
    srv.proc = subprocess.Popen([BIN, "serve", "stories-gguf:q8", "--port", str(port), "-t", "1"],
                                env=env_s, stdout=srv.log, stderr=subprocess.STDOUT)
    try:
        srv.wait_ready()
        st, body, _ = srv.get("/v1/models")
        assert json.loads(body)["data"][0]["id"] == "stories260K-Q8_0"
        st, body, _ = srv.post("/v1/completions", {"prompt": "Once", "max_tokens": 3})
        assert st == 200
    finally:
        assert srv.stop() == 0, srv.output()
    # rm: the F32 file and its blob go; the Q8_0 stays
    f32 = h.repos["test-org/stories-GGUF"]["stories260K-F32.gguf"]
    rm = cinfer(env, "rm", "f32")
    assert rm.returncode == 0, rm.stderr
    assert not (tmp / "hub" / "models--test-org--stories-GGUF" / "blobs" / sha(f32)).exists()
    assert os.path.exists(path)
    # bare `cinfer`: no default model, so the largest cached model that fits
    port = free_port()
    env_b = dict(env, CINFER_FIT_BYTES=str(len(q8)))
    srv.port, srv.base = port, f"http://127.0.0.1:{port}"
    srv.proc = subprocess.Popen([BIN, "--port", str(port), "-t", "1"], env=env_b, cwd=str(tmp),
                                stdout=srv.log, stderr=subprocess.STDOUT)
    try:
        srv.wait_ready()
        st, body, _ = srv.get("/v1/models")
        assert json.loads(body)["data"][0]["id"] == "stories260K-Q8_0"
    finally:
        assert srv.stop() == 0, srv.output()


def test_pull_refuses_sha_mismatch(hub):
    h, env, tmp = hub
    p = cinfer(env, "pull", "test-org/badsha-GGUF", "-q")
    assert p.returncode == 1
    assert "sha256" in p.stderr and "deleted" in p.stderr, p.stderr
    blobs = tmp / "hub" / "models--test-org--badsha-GGUF" / "blobs"
    assert not blobs.exists() or not any(blobs.iterdir())
    assert not (tmp / "hub" / "models--test-org--badsha-GGUF" / "snapshots").exists()


def test_pull_gated_and_missing(hub):
    h, env, tmp = hub
    p = cinfer(env, "pull", "test-org/gated-model", "-q")
    assert p.returncode == 1 and "gated" in p.stderr and "HF_TOKEN" in p.stderr, p.stderr
    p = cinfer(env, "pull", "test-org/nothing-here", "-q")
    assert p.returncode == 1 and "404" in p.stderr and "not found" in p.stderr, p.stderr
    p = cinfer(env, "pull", "test-org/stories-GGUF:Q2_K", "-q")
    assert p.returncode == 1 and "no file matches" in p.stderr and "Q8_0" in p.stderr
    p = cinfer(env, "pull", "test-org/stories-GGUF", "-q")  # two GGUFs, no Q4_K_M
    assert p.returncode == 1 and "pick one of" in p.stderr
    p = cinfer(env, "pull", "not a repo", "-q")
    assert p.returncode == 1 and "ORG/REPO" in p.stderr
