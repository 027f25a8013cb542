#!/usr/bin/env bash
# run.sh — builds bench_http.c against a cinfer build folder and runs it.
#   bench/http/run.sh BUILD_DIR [seconds per phase] [connections] [SSE events per second]
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
build=${1:?usage: run.sh BUILD_DIR [seconds] [connections] [sse_rate]}
out="$build/bench_http"
cc -std=c17 -O2 -D_GNU_SOURCE -I"$root/src" "$here/bench_http.c" "$build/libcinfer_core.a" \
   $(pkg-config --cflags --libs libevent libevent_pthreads) -lpthread -lm -o "$out"
"$out" "${2:-3}" "${3:-4}" "${4:-2000}"
