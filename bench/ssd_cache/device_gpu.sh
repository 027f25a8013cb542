#!/usr/bin/env bash
# device_gpu.sh — the GPU half of bench/ssd_cache in one device call: restart TTFT of an
# 8B-shape model (bench/gpu/models.py l8b: random bf16 weights, Llama-3.1-8B shapes) for 8k
# and 32k-token prefixes, restored from the SSD tier vs re-prefilled cold, on the CUDA
# backend (the restore streams the blocks from disk into device memory).
#
# BIN=<dir> with a prebuilt CUDA cinfer (and the shared libraries the device lacks; see
# bench/gpu/README.md); without BIN it builds build-gpu (needs jansson, libevent,
# pcre2, utf8proc, zmq and curl development files on the device). The tokenizer is
# bench/gpu/synth_tokenizer.py's byte-level one unless TOK names a folder with a real
# tokenizer.json[.gz] + tokenizer_config.json (then set TPW to its tokens per word).
# Results: $OUT/ssd_gpu.json ({"gpu": {...}}, rewritten after each size), logs beside it.
# BACKEND=cpu with MODELS naming a folder whose l8b is a tiny model runs the same steps on a
# CPU build (a dry run of the script itself).
# The scripts are found beside this file (bench/ssd_cache, bench/gpu), so a copy carried in
# a binaries folder (BIN/src/bench/...) runs on a checkout that lacks them.
set -uo pipefail
HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
GPUB=$HERE/../gpu
OUT=${OUT:-/tmp/out}
mkdir -p "$OUT"
M=${MODELS:-/tmp/cinfer-models}
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader | tee "$OUT/gpu.txt"
if [ -n "${BIN:-}" ]; then
    CINFER=$PWD/$BIN/cinfer
    export LD_LIBRARY_PATH="$PWD/$BIN:/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}"
else
    if [ ! -x build-gpu/cinfer ]; then
        cmake -S . -B build-gpu -G Ninja -DCMAKE_BUILD_TYPE=Release -DCINFER_CUDA=ON \
            -DCMAKE_CUDA_ARCHITECTURES=90 > "$OUT/build.log" 2>&1 &&
            ninja -C build-gpu cinfer >> "$OUT/build.log" 2>&1 || { tail -30 "$OUT/build.log"; exit 1; }
    fi
    CINFER=$PWD/build-gpu/cinfer
    export LD_LIBRARY_PATH="$PWD/build-gpu:/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}"
fi
"$CINFER" --version || { ldd "$CINFER" | grep "not found"; exit 1; }
t0=$(date +%s)
if [ ! -f "$M/l8b/config.json" ]; then
    python3 "$GPUB/models.py" bench "$M" l8b > "$OUT/models.log" 2>&1 || { tail "$OUT/models.log"; exit 1; }
fi
if [ -n "${TOK:-}" ]; then
    [ -f "$TOK/tokenizer.json.gz" ] && gunzip -c "$TOK/tokenizer.json.gz" > "$M/l8b/tokenizer.json"
    [ -f "$TOK/tokenizer.json" ] && cp "$TOK/tokenizer.json" "$M/l8b/"
    cp "$TOK/tokenizer_config.json" "$M/l8b/" 2>/dev/null
elif [ ! -f "$M/l8b/tokenizer.json" ]; then
    python3 "$GPUB/synth_tokenizer.py" "$M/l8b" > /dev/null || exit 1
fi
echo "model ready ($(( $(date +%s) - t0 )) s)"; du -sh "$M/l8b"; df -h "${SSD_TMP:-/tmp}" | tail -1
[ "${PHASE:-all}" = prep ] && exit 0
# the cache directory on the device's disk; SIGTERM writes everything (a 32k prefix of the
# 8B shape is ~4 GiB of KV files), so the flush bound is raised
export CINFER_SSD_FLUSH_TIMEOUT_S=${FLUSH_S:-400}
export TMPDIR=${SSD_TMP:-/tmp}
PYTHONUNBUFFERED=1 python3 "$HERE/run.py" --bin "$CINFER" --model "$M/l8b" --backend "${BACKEND:-cuda}" \
    --threads 8 --sizes "${SIZES:-8000,32000}" --ctx "${CTX:-33000}" --no-decode --only-gpu \
    --tok-per-word "${TPW:-5.44}" --out "$OUT/ssd_gpu.json" 2>&1 | tee "$OUT/run.log"
echo "total $(( $(date +%s) - t0 )) s"
