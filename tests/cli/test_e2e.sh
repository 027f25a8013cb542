#!/usr/bin/env bash
# test_e2e.sh — the end-to-end suites (tests/e2e, pytest): the real `cinfer serve` binary
# driven with raw HTTP and the official openai SDK, on stories260K and on the default real
# chat model (models/qwen2.5-coder-0.5b-instruct-Q4_K_M.gguf, fetched by scripts/test.sh).
# Under the sanitizer build only the stories260K suites run (CINFER_E2E_QUICK=1): the server
# paths get ASan/UBSan/LSan coverage (a leak makes its exit status non-zero at SIGTERM).
# Usage: test_e2e.sh [test_FILE.py ...] (default: every suite). A run whose every test was
# skipped exits 77 (ctest: skipped). One pytest process for all suites: the SDK imports and
# pytest's start cost 20-40 s a process on a loaded 2-core machine (one ctest entry per
# file was tried: 395 s against 177 s for the sanitizer-build suites).
set -u
SRC=${CINFER_SRC:-.}
export CINFER_BIN=${CINFER_BIN:-./build/cinfer}
if ! python3 -c "import openai, pytest" 2>/dev/null; then
    echo "FAIL: the Python packages openai and pytest are missing (scripts/test.sh installs them:"
    echo "      python3 -m pip install --break-system-packages openai anthropic pytest)"
    exit 1
fi
if [ "${CINFER_SANITIZED:-0}" = "1" ]; then
    export CINFER_E2E_QUICK=1
    export ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=1}
fi
cd "$SRC/tests/e2e" && exec python3 -m pytest -q -p no:cacheprovider --durations=10 "${@:-.}"
