#!/usr/bin/env bash
# pack_gpubin.sh [BUILD_DIR] [DEST] [TARBALL] — the folder device_kvq.sh runs from, built on the CPU
# machine: the CUDA build's test_kvq_cuda, test_engine_kvq, cinfer, cinfer_kvq_bench
# (stripped), lib/ (the shared libraries they need that a bare device image lacks; never
# put on python's path), fixtures/stories260K, and src/ with the scripts and eval texts.
# Defaults: build-gpu, build-gpu/gpubin. The CUDA build first:
#   cmake -S . -B build-gpu -DCMAKE_BUILD_TYPE=Release -DCINFER_WERROR=ON -DCINFER_CUDA=ON \
#     -DCMAKE_CUDA_ARCHITECTURES=90
#   cmake --build build-gpu -j2 --target cinfer test_engine_kvq test_kvq_cuda cinfer_kvq_bench
set -eu
BD=${1:-build-gpu}
G=${2:-$BD/gpubin}
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
# (built here: cinfer_kvq_bench is not in the default target, and a stale copy would measure
# old code under new variables)
cmake --build "$BD" -j2 --target test_kvq_cuda test_engine_kvq cinfer cinfer_kvq_bench > /dev/null
rm -rf "$G"
mkdir -p "$G/fixtures" "$G/lib" "$G/src/bench/kv_quant" "$G/src/bench/gpu"
for b in test_kvq_cuda test_engine_kvq cinfer cinfer_kvq_bench; do
    cp "$BD/$b" "$G/"
    strip "$G/$b"
done
ldd "$G/cinfer" "$G/test_kvq_cuda" "$G/test_engine_kvq" "$G/cinfer_kvq_bench" | awk '{print $3}' \
    | grep '^/' | sort -u \
    | grep -v -E 'libc\.so|libm\.so|libpthread|libdl|librt|ld-linux|libstdc|libgcc_s|libresolv|libcuda|libcudart|libcublas' \
    | xargs -r -I{} cp -L {} "$G/lib/"
cp -r "$ROOT/tests/data/fixtures/stories260K" "$G/fixtures/"
cp "$ROOT"/bench/kv_quant/{device_kvq.sh,device_summary.py} "$G/src/bench/kv_quant/"
cp -r "$ROOT/bench/kv_quant/texts" "$G/src/bench/kv_quant/"
cp "$ROOT"/bench/gpu/{models.py,synth_tokenizer.py} "$G/src/bench/gpu/"
du -sh "$G"
# TARBALL: also the .tar.xz of it (xz -9: its 64 MB window finds the four binaries' shared
# CUDA code, ~15 MB instead of ~36)
if [ -n "${3:-}" ]; then
    rm -f "$3"
    (cd "$(dirname "$G")" && XZ_OPT="-9 -T1" tar cJf - "$(basename "$G")") > "$3"
    ls -la "$3"
fi
