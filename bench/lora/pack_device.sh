#!/usr/bin/env bash
# pack_device.sh — the folder (and tarball) that bench/lora/device_lora.sh runs from on a GPU
# machine without this checkout's build: stripped test_lora, cinfer_lora_bench and cinfer
# (when built: without it the pack serves SERVE=0 runs)
# from a CUDA build (-DCINFER_CUDA=ON), the non-system shared libraries they link (jansson and
# libcrypto beside the binaries; cinfer's others in lib/, put on LD_LIBRARY_PATH only for the
# server; cuBLAS comes from the device's CUDA), and src/ = the files the script reads.
# Usage: bash bench/lora/pack_device.sh [BUILD_DIR (build-gpu)] [OUT_DIR (BUILD_DIR/t21)]
#   -> OUT_DIR/ and OUT_DIR.tar.xz; run there as
#   BIN=OUT_DIR bash OUT_DIR/src/bench/lora/device_lora.sh
set -eu
cd "$(dirname "$0")/../.."
BUILD=${1:-build-gpu}
OUT=${2:-$BUILD/t21}
rm -rf "$OUT" && mkdir -p "$OUT/lib" "$OUT/src"
for b in test_lora cinfer_lora_bench cinfer; do
    if [ "$b" = cinfer ] && [ ! -x "$BUILD/cinfer" ]; then
        echo "pack_device: no $BUILD/cinfer: packed without the server (run with SERVE=0)" >&2
        continue
    fi
    cp "$BUILD/$b" "$OUT/" && strip "$OUT/$b"
done
sys='linux-vdso|libc\.so|libm\.so|libpthread|libdl\.so|librt|libresolv|ld-linux|libstdc|libgcc_s|libcublas|libcudart|libcuda\.so'
for l in $(ldd "$OUT/test_lora" "$OUT/cinfer_lora_bench" | awk '$3 ~ /^\// {print $3}' | grep -vE "$sys" | sort -u); do
    cp -L "$l" "$OUT/"
done
[ -x "$OUT/cinfer" ] && for l in $(ldd "$OUT/cinfer" | awk '$3 ~ /^\// {print $3}' | grep -vE "$sys" | sort -u); do
    cp -L "$l" "$OUT/lib/"
done
for f in tests/data/lora tests/data/parity scripts/lora_reference.py bench/lora/device_lora.sh \
    bench/lora/device_serve.py bench/gpu/models.py bench/gpu/ncu_sum.py; do
    mkdir -p "$OUT/src/$(dirname "$f")" && cp -r "$f" "$OUT/src/$f"
done
git log -1 --format='%H %s' > "$OUT/COMMIT"
tar -C "$(dirname "$OUT")" -cJf "$OUT.tar.xz" "$(basename "$OUT")"
du -sh "$OUT" "$OUT.tar.xz"
