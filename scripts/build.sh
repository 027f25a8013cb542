#!/usr/bin/env bash
# build.sh — configures and builds one configuration, the same way for every script
# (quickstart.sh and test.sh call it), so a build made by one is reused by the other.
#
# Usage: scripts/build.sh release|asan [extra `cmake --build` args, e.g. --target cinfer]
#   release  build/       Release, -Werror
#   asan     build-asan/  Debug, -Werror, ASan+UBSan; never the CUDA kernels
# CUDA kernels (release only; nvcc, sm_90, minutes on a small machine): env CINFER_CUDA=ON
# builds them (nvcc required; CI does this so they always compile), OFF never, AUTO whenever
# nvcc is found. Unset: built when nvcc is found and a GPU is visible (nvidia-smi), else
# skipped with a message.
# Env: CINFER_JOBS (parallel jobs, default nproc).
set -euo pipefail
cd "$(dirname "$0")/.."
cfg=${1:?usage: scripts/build.sh release|asan [cmake --build args]}
shift
jobs=${CINFER_JOBS:-$(nproc)}
have_nvcc() { command -v nvcc >/dev/null 2>&1 || [ -x /usr/local/cuda/bin/nvcc ]; }
have_gpu() { command -v nvidia-smi >/dev/null 2>&1 && nvidia-smi -L 2>/dev/null | grep -q '^GPU'; }
case "$cfg" in
release)
    dir=build
    cuda=${CINFER_CUDA:-}
    if [ -z "$cuda" ]; then
        if have_nvcc && have_gpu; then
            cuda=ON
        else
            cuda=OFF
            if have_nvcc; then
                echo "build.sh: no GPU visible: the CUDA kernels are not built (CPU backend only; CINFER_CUDA=ON builds them)"
            fi
        fi
    fi
    flags=(-DCMAKE_BUILD_TYPE=Release -DCINFER_WERROR=ON -DCINFER_SANITIZE=OFF -DCINFER_CUDA="$cuda")
    ;;
asan)
    dir=build-asan
    [ "${CINFER_CUDA:-}" = "ON" ] && echo "build.sh: the sanitizer build never builds the CUDA kernels (the release build does)"
    flags=(-DCMAKE_BUILD_TYPE=Debug -DCINFER_WERROR=ON -DCINFER_SANITIZE=ON -DCINFER_CUDA=OFF)
    ;;
*)
    echo "usage: scripts/build.sh release|asan [cmake --build args]" >&2
    exit 2
    ;;
esac
cmake -S . -B "$dir" "${flags[@]}" >/dev/null
cmake --build "$dir" -j"$jobs" "$@"
