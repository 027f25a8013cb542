#!/usr/bin/env bash
# run.sh — compiles the CPU backend sources and bench_kernels.c on their own (no CMake, no
# third-party libraries, so it also runs on a bare machine) and runs the benchmark.
# Usage: bench/kernels/run.sh [isa]   (isa = scalar|avx2|avx512; default: best available)
# Env: CC (default cc), OUT (build folder, default /tmp/cinfer-bench-kernels), BENCH=rp
# builds and runs bench_rp.c instead (repacked vs file layout; its arguments: [threads
# [dtype ...]]); BENCH=attn builds and runs bench_attn.c (attention split over threads vs
# in place; arguments: [threads [ctx ...]]).
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
cc=${CC:-cc}
out=${OUT:-/tmp/cinfer-bench-kernels}
mkdir -p "$out"
flags=(-std=c17 -O2 -D_GNU_SOURCE -I"$root/src")
objs=()
for f in "$root"/src/backend/*.c "$root"/src/backend/cpu/*.c "$root"/src/util/err.c "$root"/src/util/log.c; do
    isa=()
    case "$f" in
    *_avx2.c) isa=(-mavx2 -mfma -mf16c -mbmi2) ;;
    *_avx512.c) isa=(-mavx512f -mavx512bw -mavx512vl -mavx512dq -mavx512vnni -mavx2 -mfma -mf16c -mbmi2) ;;
    esac
    o="$out/$(basename "${f%.c}").o"
    "$cc" "${flags[@]}" "${isa[@]}" -c "$f" -o "$o" &
    objs+=("$o")
done
wait
# the streaming-read loop is plain C; -O3 lets the compiler vectorize it
if [ "${BENCH:-}" = attn ]; then
    "$cc" "${flags[@]}" "$here/bench_attn.c" "${objs[@]}" -lm -lpthread -o "$out/bench_attn"
    exec "$out/bench_attn" "$@"
fi
if [ "${BENCH:-}" = rp ]; then
    "$cc" "${flags[@]}" "$here/bench_rp.c" "${objs[@]}" -lm -lpthread -o "$out/bench_rp"
    exec "$out/bench_rp" "$@"
fi
"$cc" "${flags[@]}" -O3 "$here/bench_kernels.c" "${objs[@]}" -lm -lpthread -o "$out/bench_kernels"
exec "$out/bench_kernels" "$@"
