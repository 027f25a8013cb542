"""test_kv_quant.py — KV cache quantization and the tiers/levers through the real server
(docs/kv-quant.md) on stories260K: /stats.kv_quant and /stats.route for each scheme, the
ready-card line, fewer KV bytes per token in the memory plan (/fit), a greedy request under
each scheme twice (the second a prefix-cache hit) giving the same text, the CINFER_* mirrors,
--l2 without a kv_config.json (the preset) and with one, and every bad value refused naming
its flag.
"""
import json
import os
import subprocess
import tempfile

import pytest

from conftest import BIN, STORIES, Server

PROMPT = ("Once upon a time there was a little girl named Lily. She loved to play outside in "
          "the park with her friends and her big brown dog. One day Lily")


def gen(srv, n=20):
    st, raw, _ = srv.post("/v1/completions",
                          {"prompt": PROMPT, "max_tokens": n, "temperature": 0})
    assert st == 200, raw
    j = json.loads(raw)
    return j["choices"][0]["text"], j["usage"]


@pytest.mark.parametrize("scheme,mode,kbits,vbits,bpt", [
    ("8", "8", 8, 8, 480), ("4", "4", 4, 4, 336), ("turbo", "turbo:k8v3", 8, 3, 340),
    ("turbo:k8v4", "turbo:k8v4", 8, 4, 360)])
def test_scheme_stats_and_cache(scheme, mode, kbits, vbits, bpt):
    srv = Server(STORIES, "--kv-quant", scheme)
    try:
        st = srv.stats()
        kq = st["kv_quant"]
        assert kq["mode"] == mode
        assert kq["bits"] == {"k": kbits, "v": vbits}
        # stories260K: 5 layers, kv_dim 32, groups of 8 ("4": layer 0's keys at 8 bits)
        assert kq["bytes_per_token"] == bpt
        assert kq["layers"]["quantized"] == 5 and kq["layers"]["plain"] == 0
        assert kq["attention"]["global"].startswith("quantized")
        assert kq["attention"]["sliding_window"] == "none"
        assert set(kq["rotate"]) == {"k", "v"}
        assert st["route"]["fused_sdpa"] is True
        st2, raw, _ = srv.get("/fit")
        assert st2 == 200 and json.loads(raw)["kv_bytes_per_token"] == bpt
        t1, u1 = gen(srv)
        t2, u2 = gen(srv)
        assert t1 == t2
        assert u2["prompt_tokens_details"]["cached_tokens"] > 0
        assert "KV quant  " + mode in srv.output()
    finally:
        srv.stop()


def test_off_is_f16_and_default():
    srv = Server(STORIES)
    try:
        kq = srv.stats()["kv_quant"]
        assert kq["mode"] == "off" and kq["bits"] == {"k": 16, "v": 16}
        assert kq["bytes_per_token"] == 640 and kq["layers"]["quantized"] == 0
        assert kq["attention"]["global"] == "f16"
        assert srv.stats()["route"]["tier"] == "default"
    finally:
        srv.stop()


def test_env_mirrors_and_flag_wins():
    old = dict(os.environ)
    os.environ.update({"CINFER_KV_QUANT": "8", "CINFER_KV_ROTATE": "off", "CINFER_TIER": "l1"})
    try:
        srv = Server(STORIES)
        try:
            st = srv.stats()
            assert st["kv_quant"]["mode"] == "8"
            assert st["kv_quant"]["rotate"] == {"k": False, "v": False}
            assert st["route"]["tier"] == "l1"
        finally:
            srv.stop()
        srv = Server(STORIES, "--kv-quant", "4")  # the flag wins over CINFER_KV_QUANT
        try:
            assert srv.stats()["kv_quant"]["mode"] == "4"
        finally:
            srv.stop()
    finally:
        os.environ.clear()
        os.environ.update(old)


def test_l2_preset_and_config_file():
    srv = Server(STORIES, "--l2")
    try:
        kq = srv.stats()["kv_quant"]
        assert kq["mode"] == "config"
        # preset: first and last layer plain, k8v4 elsewhere
        assert kq["layers"]["per_layer"][0] == "f16" and kq["layers"]["per_layer"][-1] == "f16"
        assert kq["layers"]["quantized"] == 3
        assert kq["layers"]["config"].startswith("preset")
        assert srv.stats()["route"]["tier"] == "l2"
    finally:
        srv.stop()
    d = tempfile.mkdtemp(prefix="cinfer-kvq-")
    cfg = os.path.join(d, "kv_config.json")
    with open(cfg, "w") as f:
        json.dump({"default": "8", "layers": {"2": "turbo:k8v3", "-1": "off"}}, f)
    srv = Server(STORIES, "--kv-quant", "config:" + cfg)
    try:
        kq = srv.stats()["kv_quant"]
        per = kq["layers"]["per_layer"]
        assert per[4] == "f16" and per[2].startswith("ka8") and "lm3" in per[2]
        assert kq["layers"]["config"] == cfg
        t1, _ = gen(srv)
        t2, u2 = gen(srv)
        assert t1 == t2 and u2["prompt_tokens_details"]["cached_tokens"] > 0
    finally:
        srv.stop()
        os.unlink(cfg)
        os.rmdir(d)


@pytest.mark.parametrize("args,needle", [
    (["--kv-quant", "3"], "--kv-quant"),
    (["--kv-quant", "turbo:k3v3"], "--kv-quant"),
    (["--kv-quant", "turbo:k8v9"], "--kv-quant"),
    (["--kv-quant"], "--kv-quant"),
    (["--kv-rotate", "maybe"], "--kv-rotate"),
    (["--fused-sdpa", "yes"], "--fused-sdpa"),
    (["--compiled-activations", "2"], "--compiled-activations"),
    (["--l3"], "--l3"),
    (["--kv-quant", "config:/nonexistent/kv_config.json"], "kv_config.json"),
    (["--fused-sdpa", "off"], "--fused-sdpa off"),
])
def test_bad_values_name_the_flag(args, needle):
    p = subprocess.run([BIN, "serve", STORIES, "--port", "0", *args], capture_output=True,
                       text=True, timeout=120)
    assert p.returncode != 0
    assert needle in p.stderr, p.stderr


def test_bad_env_names_the_variable():
    env = dict(os.environ, CINFER_KV_QUANT="9")
    p = subprocess.run([BIN, "serve", STORIES, "--port", "0"], capture_output=True, text=True,
                       timeout=120, env=env)
    assert p.returncode != 0 and "CINFER_KV_QUANT" in p.stderr


def test_force_wire_reports():
    srv = Server(STORIES, "--force-wire")
    try:
        r = srv.stats()["route"]
        assert r["force_wire"] is True and r["wired_bytes"] > 0
    finally:
        srv.stop()


def cli(cmd, *args):
    p = subprocess.run([BIN, cmd, STORIES, *args], capture_output=True, text=True, timeout=120)
    assert p.returncode == 0, p.stderr
    return p.stdout


@pytest.mark.parametrize("scheme", ["8", "4", "turbo"])
def test_run_and_bench_take_the_scheme(scheme):
    """`cinfer run --kv-quant` generates the server's greedy text under that scheme (one KV
    format, one kernel; the server's text differs from f16's for some schemes, so this also
    shows the flag is not ignored), and `cinfer bench` names the scheme it ran."""
    srv = Server(STORIES, "--kv-quant", scheme)
    try:
        served, _ = gen(srv, 24)
    finally:
        srv.stop()
    ran = cli("run", "-p", PROMPT, "-n", "24", "--temperature", "0", "--kv-quant", scheme)
    assert ran.rstrip("\n") == served
    j = json.loads(cli("bench", "-p", "16", "-n", "4", "--kv-quant", scheme).strip().splitlines()[-1])
    assert j["kv"] == {"turbo": "turbo:k8v3"}.get(scheme, scheme)


def test_run_scheme_changes_the_cache():
    """A 2-bit scheme (large error) changes the greedy text of `cinfer run` against f16, and
    `off` is f16: the flag reaches the KV cache."""
    args = ["-p", PROMPT, "-n", "24", "--temperature", "0"]
    f16 = cli("run", *args)
    assert cli("run", *args, "--kv-quant", "off") == f16
    assert cli("run", *args, "--kv-quant", "turbo:k2v2") != f16


@pytest.mark.parametrize("cmd", ["run", "bench"])
@pytest.mark.parametrize("args,needle", [
    (["--kv-quant", "3"], "--kv-quant"),
    (["--kv-quant"], "--kv-quant"),
    (["--kv-rotate", "maybe"], "--kv-rotate"),
    (["--kv-quant", "config:/nonexistent/kv_config.json"], "kv_config.json"),
])
def test_run_bench_bad_values_name_the_flag(cmd, args, needle):
    extra = ["-p", "hello", "-n", "1"] if cmd == "run" else ["-p", "8", "-n", "1"]
    p = subprocess.run([BIN, cmd, STORIES, *extra, *args], capture_output=True, text=True,
                       timeout=120)
    assert p.returncode != 0
    assert needle in p.stderr, p.stderr
