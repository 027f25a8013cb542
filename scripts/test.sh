#!/usr/bin/env bash
# test.sh — runs every test: the release build with -Werror, then the same tests under
# ASan+UBSan. Extra opt-in suites: CINFER_TEST_LLAMACPP=1 (top-1 agreement with llama.cpp
# on the real models), see tests/README.md. Installs the Python packages of the end-to-end
# suites (openai, anthropic, pytest) and fetches the default model (~490 MB) and
# Qwen2.5-Coder-1.5B (~1.1 GB, for the tool round trip) when missing. Selenium drives the
# browser tests of the chat page (tests/e2e/test_web_browser.py).
set -euo pipefail
cd "$(dirname "$0")/.."
./scripts/deps.sh
# the end-to-end suites drive the server with the official SDKs, on the default real model
# Python packages of the end-to-end suites, as module:package (installed when missing); the
# router-facing suites need a Prometheus text parser, a ZMQ/msgpack KV-event subscriber, two
# real cache-aware routers (docs/scaling.md) and huggingface_hub reading the model cache
py_pkgs=(openai:openai anthropic:anthropic pytest:pytest jsonschema:jsonschema
         schemathesis:schemathesis selenium:selenium prometheus_client:prometheus_client
         zmq:pyzmq msgpack:msgpack sglang_router:sglang-router vllm_router:vllm-router
         huggingface_hub:huggingface_hub)
missing=()
for mp in "${py_pkgs[@]}"; do python3 -c "import ${mp%%:*}" 2>/dev/null || missing+=("${mp#*:}"); done
[ ${#missing[@]} -eq 0 ] || python3 -m pip install -q --break-system-packages "${missing[@]}"
./scripts/fetch_models.sh qwen2.5-coder-0.5b
# the tool round trip (call -> result -> answer) needs the 1.5B: the 0.5B never answers
./scripts/fetch_models.sh qwen2.5-coder-1.5b
jobs=$(nproc)
cmake -S . -B build -DCMAKE_BUILD_TYPE=Release -DCINFER_WERROR=ON >/dev/null
cmake --build build -j"$jobs"
(cd build && ctest --output-on-failure -j"$jobs")
cmake -S . -B build-asan -DCMAKE_BUILD_TYPE=Debug -DCINFER_WERROR=ON -DCINFER_SANITIZE=ON >/dev/null
cmake --build build-asan -j"$jobs"
(cd build-asan && ASAN_OPTIONS=detect_leaks=1 ctest --output-on-failure -j"$jobs")
echo "test.sh: all suites passed"
