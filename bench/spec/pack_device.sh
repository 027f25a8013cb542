#!/usr/bin/env bash
# pack_device.sh — the folder (and tarball) that bench/spec/device_spec_gpu.sh runs from on a
# GPU machine without this checkout: cinfer from a CUDA build (-DCINFER_CUDA=ON), stripped,
# with its non-system shared libraries beside it (cuBLAS and the C/C++ runtime come from the
# device), and src/ = the files the script reads (bench/spec's drivers, the code file of the
# code-edit workload, bench/results/spec.json whose "cpu" half the output keeps).
# Usage: bash bench/spec/pack_device.sh [BUILD_DIR (build-gpu)] [OUT_DIR (BUILD_DIR/t17)]
#   -> OUT_DIR/ and OUT_DIR.tar.xz; on the device:
#   OUT=$OUT BIN=OUT_DIR MODEL=/tmp/smol.gguf bash OUT_DIR/src/bench/spec/device_spec_gpu.sh
set -eu
cd "$(dirname "$0")/../.."
BUILD=${1:-build-gpu}
OUT=${2:-$BUILD/t17}
rm -rf "$OUT" && mkdir -p "$OUT/src"
cp "$BUILD/cinfer" "$OUT/" && strip "$OUT/cinfer"
sys='linux-vdso|libc\.so|libm\.so|libpthread|libdl\.so|librt|libresolv|ld-linux|libstdc|libgcc_s|libcublas|libcudart|libcuda\.so'
for l in $(ldd "$OUT/cinfer" | awk '$3 ~ /^\// {print $3}' | grep -vE "$sys" | sort -u); do
    cp -L "$l" "$OUT/"
done
for f in bench/spec/run.py bench/spec/device_check.py bench/spec/prof_sum.py bench/spec/trim_gguf.py \
    bench/spec/device_spec_gpu.sh bench/spec/data bench/results/spec.json; do
    mkdir -p "$OUT/src/$(dirname "$f")" && cp -r "$f" "$OUT/src/$f"
done
git log -1 --format='%H %s' > "$OUT/COMMIT"
git status --short -- src bench >> "$OUT/COMMIT"
tar -C "$(dirname "$OUT")" -cJf "$OUT.tar.xz" "$(basename "$OUT")"
du -sh "$OUT" "$OUT.tar.xz"
