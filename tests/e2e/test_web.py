"""test_web.py — the browser page at the HTTP level (src/web): content types, gzip when the
client accepts it, ETag / 304, cache headers of hashed asset names, the /chat and /status
302s, the page staying public under --api-key, and the browser open on a terminal (a fake
xdg-open on PATH records the URL it was given; the server's stdout is a pseudo-terminal).
The page in a real browser: test_web_browser.py.
"""
import gzip
import os
import pty
import re
import stat
import subprocess
import time

import pytest

from conftest import BIN, STORIES, STORIES_TEMPLATE, Server, free_port, http


@pytest.fixture(scope="module")
def srv():
    s = Server(STORIES, "--chat-template", STORIES_TEMPLATE)
    yield s
    assert s.stop() == 0, s.output()


def asset_paths(index_html):
    return re.findall(r'(?:href|src)="(/assets/[^"]+)"', index_html)


def test_index_and_assets(srv):
    st, body, h = srv.get("/")
    assert st == 200 and h["Content-Type"] == "text/html; charset=utf-8"
    assert h["Cache-Control"] == "no-cache" and h["ETag"].startswith('"')
    assert "script-src 'self'" in h["Content-Security-Policy"]
    html = body.decode()
    assets = asset_paths(html)
    # hashed names of our files and Debian's libraries
    for name in ("app", "marked", "purify", "highlight", "katex"):
        assert any(re.fullmatch(rf"/assets/{name}\.[0-9a-f]{{8}}\.js", a) for a in assets), (name, assets)
    assert "http://" not in html and "https://" not in html  # nothing from the network
    types = {".js": "text/javascript; charset=utf-8", ".css": "text/css; charset=utf-8"}
    for a in assets:
        st, b, h = srv.get(a)
        assert st == 200, a
        assert h["Content-Type"] == types[os.path.splitext(a)[1]], a
        assert h["Cache-Control"] == "public, max-age=31536000, immutable", a
        assert "Content-Encoding" not in h and len(b) > 100
    st, _, _ = srv.get("/assets/app.00000000.js")
    assert st == 404
    st, b, h = srv.get("/index.html")
    assert st == 200 and b == body


def test_katex_fonts_resolve(srv):
    html = srv.get("/")[1].decode()
    css = [a for a in asset_paths(html) if "/katex." in a and a.endswith(".css")][0]
    fonts = set(re.findall(r"url\((fonts/[^)]+\.woff2)\)", srv.get(css)[1].decode()))
    assert len(fonts) >= 10
    for f in sorted(fonts):
        st, b, h = srv.get("/assets/" + f)
        assert st == 200 and h["Content-Type"] == "font/woff2" and b[:4] == b"wOF2", f


def test_gzip_when_accepted(srv):
    plain = srv.get("/")[1]
    for ae in ("gzip", "gzip, deflate, br", "br;q=1.0, gzip;q=0.8", "*"):
        st, body, h = srv.get("/", headers={"Accept-Encoding": ae})
        assert st == 200 and h.get("Content-Encoding") == "gzip", ae
        assert h["Vary"] == "Accept-Encoding"
        assert gzip.decompress(body) == plain
    for ae in ("identity", "gzip;q=0", "br", "deflate"):
        st, body, h = srv.get("/", headers={"Accept-Encoding": ae})
        assert "Content-Encoding" not in h and body == plain, ae
    # a large library: compressed much smaller
    js = [a for a in asset_paths(plain.decode()) if "/highlight." in a][0]
    raw = srv.get(js)[1]
    st, gz, h = srv.get(js, headers={"Accept-Encoding": "gzip"})
    assert gzip.decompress(gz) == raw and len(gz) < len(raw) / 2


def test_etag_304(srv):
    st, body, h = srv.get("/")
    tag = h["ETag"]
    st, b, h2 = srv.get("/", headers={"If-None-Match": tag})
    assert st == 304 and b == b"" and h2["ETag"] == tag
    st, b, _ = srv.get("/", headers={"If-None-Match": 'W/"nope", ' + tag})
    assert st == 304
    st, b, _ = srv.get("/", headers={"If-None-Match": '"nope"'})
    assert st == 200 and b == body
    a = asset_paths(body.decode())[0]
    atag = srv.get(a)[2]["ETag"]
    assert srv.get(a, headers={"If-None-Match": atag})[0] == 304


def test_redirects_and_head(srv):
    for p in ("/chat", "/status"):
        st, _, h = no_follow(srv.base + p)
        assert st == 302 and h["Location"] == "/#" + p
    st, body, h = http("HEAD", srv.base + "/")
    assert st == 200 and body == b"" and int(h["Content-Length"]) > 1000


def no_follow(url):
    import urllib.request

    class NoRedirect(urllib.request.HTTPRedirectHandler):
        def redirect_request(self, *a, **k):
            return None

    op = urllib.request.build_opener(NoRedirect)
    try:
        r = op.open(url, timeout=60)
        return r.status, r.read(), dict(r.headers)
    except urllib.error.HTTPError as e:
        return e.code, e.read(), dict(e.headers)


def test_page_public_under_api_key():
    s = Server(STORIES, "--api-key", "sekret")
    try:
        st, body, _ = s.get("/")
        assert st == 200
        for a in asset_paths(body.decode()):
            assert s.get(a)[0] == 200
        assert no_follow(s.base + "/chat")[0] == 302
        assert s.get("/v1/models")[0] == 401
        assert s.get("/v1/models", headers={"Authorization": "Bearer sekret"})[0] == 200
    finally:
        assert s.stop() == 0


# ---- the browser open ----------------------------------------------------------------------

def run_on_tty(tmp_path, *extra, tty=True):
    """Starts the server with stdout on a pseudo-terminal (or a pipe) and a fake xdg-open
    first on PATH; returns (server process, file the fake writes its argument to)."""
    fake = tmp_path / "bin"
    fake.mkdir(exist_ok=True)
    out = tmp_path / "opened.txt"
    (fake / "xdg-open").write_text(f'#!/bin/sh\nprintf "%s\\n" "$1" >> "{out}"\n')
    (fake / "xdg-open").chmod(stat.S_IRWXU)
    env = dict(os.environ, PATH=f"{fake}:{os.environ.get('PATH', '/usr/bin:/bin')}")
    port = free_port()
    cmd = [BIN, "serve", STORIES, "--port", str(port), "-t", "1", *extra]
    if tty:
        master, slave = pty.openpty()
        p = subprocess.Popen(cmd, stdout=slave, stderr=slave, stdin=subprocess.DEVNULL, env=env)
        os.close(slave)
    else:
        master = None
        p = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                             stdin=subprocess.DEVNULL, env=env)
    return p, out, port, master


def drain(master):
    try:
        while True:
            if not os.read(master, 65536):
                break
    except OSError:
        pass


def wait_health(port, p, timeout=120):
    t0 = time.time()
    while time.time() - t0 < timeout:
        assert p.poll() is None, "server exited"
        try:
            if http("GET", f"http://127.0.0.1:{port}/health", timeout=2)[0] == 200:
                return
        except OSError:
            pass
        time.sleep(0.1)
    raise AssertionError("server not ready")


def stop(p, master):
    p.terminate()
    if master is not None:
        import threading
        threading.Thread(target=drain, args=(master,), daemon=True).start()
    assert p.wait(timeout=60) == 0
    if master is not None:
        os.close(master)


def test_browser_opens_on_a_terminal(tmp_path):
    p, out, port, master = run_on_tty(tmp_path, "--host", "0.0.0.0")
    try:
        wait_health(port, p)
        t0 = time.time()
        while not out.exists() and time.time() - t0 < 60:
            time.sleep(0.1)
        assert out.read_text() == f"http://localhost:{port}/#/chat\n"
    finally:
        stop(p, master)


@pytest.mark.parametrize("how", ["no-open", "not-a-tty"])
def test_browser_not_opened(tmp_path, how):
    if how == "no-open":
        p, out, port, master = run_on_tty(tmp_path, "--no-open")
    else:
        p, out, port, master = run_on_tty(tmp_path, tty=False)
    try:
        wait_health(port, p)
        # the open happens before the loop serves /health; give a stray child time anyway
        for _ in range(20):
            assert http("GET", f"http://127.0.0.1:{port}/health")[0] == 200
        time.sleep(0.5)
        assert not out.exists()
    finally:
        if master is None:
            p.terminate()
            p.communicate(timeout=60)
        else:
            stop(p, master)
