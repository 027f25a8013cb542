"""test_cpu_chunking.py — a prompt's logprobs do not depend on how its prefill was split
(CPU backend batch invariance, docs/backend-cpu.md).

One server has no prompt cache, so every request is a cold prefill of the whole prompt in one
step; the other keeps a prompt cache and prefills at most 37 tokens a step (so its matmuls
see tiles of every height). On the second, a prefix of the prompt is sent first, so the
prompt then hits the cache at the prefix's last full block and only its tail is computed (in
chunks of 37); sent again, it hits at its own last full block. Every generated token's
logprob and top candidates must be the same bits as the cold prefill's, at each x86 kernel
level this CPU has (Qwen2.5-Coder-0.5B Q4_K_M: the AVX-512 level runs the repacked
Q4_K/Q5_0/Q8_0 kernels, AVX2 the file layout). Broken on purpose once (a repacked Q4_K tile
of one row rounding differently): this test failed.
The raw completions route is used: the chat routes may splice remembered generations into a
prompt (genhist), which changes its ids, not how they are computed.
"""
import json
import os

import pytest

from conftest import QUICK, QWEN, Server

PROMPT = (
    "# A small key-value store with expiry.\n"
    "import time\n\n\n"
    "class Store:\n"
    "    def __init__(self, clock=time.monotonic):\n"
    "        self._clock = clock\n"
    "        self._data = {}\n\n"
    "    def put(self, key, value, ttl=None):\n"
    "        expires = None if ttl is None else self._clock() + ttl\n"
    "        self._data[key] = (value, expires)\n\n"
    "    def get(self, key, default=None):\n"
    "        item = self._data.get(key)\n"
    "        if item is None:\n"
    "            return default\n"
    "        value, expires = item\n"
    "        if expires is not None and expires <= self._clock():\n"
    "            del self._data[key]\n"
    "            return default\n"
    "        return value\n\n"
    "    def purge(self):\n"
    "        \"\"\"Drops every expired entry and returns how many were dropped.\"\"\"\n"
)
# cut points (characters) of the prefix sent first: hits of a few blocks, then most of them
CUTS = (97, 420)


def cpu_flags():
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("flags"):
                    return set(line.split(":", 1)[1].split())
    except OSError:
        pass
    return set()


def levels():
    f = cpu_flags()
    out = []
    if {"avx512f", "avx512bw", "avx512vl", "avx512dq", "avx512_vnni"} <= f:
        out.append("avx512")
    if {"avx2", "fma"} <= f:
        out.append("avx2")
    return out


def complete(s, prompt):
    st, body, _ = s.post("/v1/completions", {"prompt": prompt, "max_tokens": 4, "temperature": 0,
                                             "logprobs": True, "top_logprobs": 5})
    assert st == 200, body
    j = json.loads(body)
    return j["choices"][0]["logprobs"]["content"], j["usage"]["prompt_tokens_details"]["cached_tokens"]


@pytest.mark.parametrize("isa", levels() or ["none"])
def test_prefix_hit_and_chunking_match_cold_prefill(isa):
    if QUICK:
        pytest.skip("CINFER_E2E_QUICK=1: real-model suite runs in the release build only")
    if isa == "none":
        pytest.skip("no x86 SIMD level (avx2/avx512) on this CPU")
    if not os.path.exists(QWEN):
        if os.environ.get("CINFER_E2E_ALLOW_NO_MODEL") == "1":
            pytest.skip("default model not fetched (scripts/fetch_models.sh qwen2.5-coder-0.5b)")
        pytest.fail(f"{QWEN} is missing: run scripts/fetch_models.sh qwen2.5-coder-0.5b")
    env = {"CINFER_CPU_ISA": isa}
    cold = Server(QWEN, "--prompt-cache", "0", env=env)
    warm = None
    try:
        warm = Server(QWEN, "--max-batch-tokens", "37", env=env)
        for i, cut in enumerate(CUTS):
            # a prompt per round (its own first line), so no round hits another's blocks
            prompt = f"# round {i}\n" + PROMPT
            ref, c0 = complete(cold, prompt)
            assert c0 == 0
            again, c1 = complete(cold, prompt)
            assert c1 == 0 and again == ref  # cold twice: deterministic
            complete(warm, prompt[:cut])  # caches the prefix's full blocks
            got, hit = complete(warm, prompt)  # the prefix hits, the tail is computed
            assert got == ref, (isa, cut, hit)
            got, full = complete(warm, prompt)  # hits at the prompt's own last full block
            assert got == ref, (isa, cut, full)
            assert 0 < hit < full, (hit, full)  # the first hit really was partial
    finally:
        assert cold.stop() == 0, cold.output()
        if warm:
            assert warm.stop() == 0, warm.output()
