#!/usr/bin/env bash
# test_e2e.sh — the end-to-end suites (tests/e2e, pytest): the real `cinfer serve` binary
# driven with raw HTTP and the official openai SDK, on stories260K and on the default real
# chat model (models/qwen2.5-coder-0.5b-instruct-Q4_K_M.gguf, fetched by scripts/test.sh).
# Under the sanitizer build only the stories260K suites run (CINFER_E2E_QUICK=1): the server
# paths get ASan/UBSan/LSan coverage (a leak makes its exit status non-zero at SIGTERM).
set -u
SRC=${CINFER_SRC:-.}
export CINFER_BIN=${CINFER_BIN:-./build/cinfer}
if ! python3 -c "import openai, pytest" 2>/dev/null; then
    echo "FAIL: the Python packages openai and pytest are missing (scripts/test.sh installs them:"
    echo "      python3 -m pip install --break-system-packages openai anthropic pytest)"
    echo "0 passed, 1 failed"
    exit 1
fi
if [ "${CINFER_SANITIZED:-0}" = "1" ]; then
    export CINFER_E2E_QUICK=1
    export ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=1}
fi
cd "$SRC/tests/e2e" && exec python3 -m pytest -q -p no:cacheprovider .
