#!/usr/bin/env bash
# test.sh — runs every test: the release build (build/, -Werror) and its ctest, then the
# sanitizer build (build-asan/, ASan+UBSan) and its ctest. Both builds go through
# scripts/build.sh, so what quickstart.sh built in build/ is reused, not rebuilt.
# Installs what it needs: Debian packages (scripts/deps.sh), the Python packages of the
# end-to-end suites (below) and the default model (~490 MB) plus Qwen2.5-Coder-1.5B (~1.1 GB, for the tool round trip), SmolLM2-135M (~98 MB, a
# second vocabulary for the grammar masks) and all-MiniLM-L6-v2 when missing. Everything else the
# tests read is in the repository (tests/data). See docs/testing.md: what runs, the
# environment the tests read, opt-in suites (CINFER_TEST_LLAMACPP=1), skipped entries.
# Env: CINFER_CUDA (see scripts/build.sh), CINFER_JOBS (default nproc).
set -euo pipefail
cd "$(dirname "$0")/.."
t0=$(date +%s)
./scripts/deps.sh
# the end-to-end suites drive the server with the official SDKs, on the default real model.
# Python packages of the end-to-end suites, as module:package (installed when missing); the
# router-facing suites need a Prometheus text parser, a ZMQ/msgpack KV-event subscriber, two
# real cache-aware routers (docs/scaling.md) and huggingface_hub reading the model cache;
# the client suites drive it with lm-evaluation-harness (lm_eval[api]: tenacity, aiohttp),
# LiteLLM and pydantic-ai (docs/api.md "Clients")
py_pkgs=(openai:openai anthropic:anthropic pytest:pytest jsonschema:jsonschema
         schemathesis:schemathesis selenium:selenium prometheus_client:prometheus_client
         zmq:pyzmq msgpack:msgpack sglang_router:sglang-router vllm_router:vllm-router
         huggingface_hub:huggingface_hub "lm_eval:lm_eval[api]" "tenacity:lm_eval[api]"
         litellm:litellm "pydantic_ai:pydantic-ai-slim[openai]")
missing=()
for mp in "${py_pkgs[@]}"; do python3 -c "import ${mp%%:*}" 2>/dev/null || missing+=("${mp#*:}"); done
[ ${#missing[@]} -eq 0 ] || python3 -m pip install -q --break-system-packages "${missing[@]}"
./scripts/fetch_models.sh qwen2.5-coder-0.5b
# the tool round trip (call -> result -> answer) needs the 1.5B: the 0.5B never answers
./scripts/fetch_models.sh qwen2.5-coder-1.5b
# the embedding suites compare all-MiniLM-L6-v2 with sentence-transformers' goldens
./scripts/fetch_models.sh all-minilm-l6-v2
# the grammar masks are checked over a second real vocabulary (SmolLM2's, ~98 MB)
./scripts/fetch_models.sh smollm2-135m
jobs=${CINFER_JOBS:-$(nproc)}
./scripts/build.sh release
(cd build && ctest --output-on-failure -j"$jobs")
./scripts/build.sh asan
(cd build-asan && ASAN_OPTIONS=detect_leaks=1 ctest --output-on-failure -j"$jobs")
echo "test.sh: all suites passed in $(( $(date +%s) - t0 )) s ($(uptime | sed 's/.*load/load/'))"
