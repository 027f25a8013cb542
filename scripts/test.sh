#!/usr/bin/env bash
# test.sh — runs every test: the release build with -Werror, then the same tests under
# ASan+UBSan. Extra opt-in suites: CINFER_TEST_LLAMACPP=1 (top-1 agreement with llama.cpp
# on the real models), see tests/README.md. Installs the Python packages of the end-to-end
# suites (openai, anthropic, pytest) and fetches the default model (~490 MB) and
# Qwen2.5-Coder-1.5B (~1.1 GB, for the tool round trip) when missing.
set -euo pipefail
cd "$(dirname "$0")/.."
./scripts/deps.sh
# the end-to-end suites drive the server with the official SDKs, on the default real model
python3 -c "import openai, anthropic, pytest, jsonschema" 2>/dev/null ||
    python3 -m pip install -q --break-system-packages openai anthropic pytest jsonschema
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
