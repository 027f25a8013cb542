#!/usr/bin/env bash
# run.sh — builds bench_kernels against a build's libcinfer_core.a and runs it.
# Usage: bench/kernels/run.sh [build-dir] [isa]   (defaults: build, best ISA)
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
build=${1:-$root/build}
cmake --build "$build" --target cinfer_core -j2 >/dev/null
out="$build/bench_kernels"
cc -std=c17 -O2 -D_GNU_SOURCE -I"$root/src" "$here/bench_kernels.c" "$build/libcinfer_core.a" \
   -lm -lpthread -o "$out"
exec "$out" ${2:-}
