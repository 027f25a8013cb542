#!/usr/bin/env bash
# test.sh — runs every test: the release build with -Werror, then the same tests under
# ASan+UBSan. Extra opt-in suites: CINFER_TEST_LLAMACPP=1 (top-1 agreement with llama.cpp
# on the real models), see tests/README.md.
set -euo pipefail
cd "$(dirname "$0")/.."
./scripts/deps.sh
jobs=$(nproc)
cmake -S . -B build -DCMAKE_BUILD_TYPE=Release -DCINFER_WERROR=ON >/dev/null
cmake --build build -j"$jobs"
(cd build && ctest --output-on-failure -j"$jobs")
cmake -S . -B build-asan -DCMAKE_BUILD_TYPE=Debug -DCINFER_WERROR=ON -DCINFER_SANITIZE=ON >/dev/null
cmake --build build-asan -j"$jobs"
(cd build-asan && ASAN_OPTIONS=detect_leaks=1 ctest --output-on-failure -j"$jobs")
echo "test.sh: all suites passed"
