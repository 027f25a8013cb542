#!/usr/bin/env bash
# device_gpu.sh — the GPU half of bench/ssd_cache on a device machine (one call): builds
# cinfer with CUDA, makes the random-weight 8B-shape model (bench/gpu/models.py l8b) with
# the Llama 3 tokenizer from $TOK (a folder with tokenizer.json[.gz], tokenizer_config.json),
# and times restart TTFT restored vs cold for 8k and 32k prefixes. JSON to $OUT/ssd_gpu.json.
# Not run yet: no device time was left in the session that wrote it (see notes/i27).
set -uo pipefail
OUT=${OUT:-/tmp/out}
mkdir -p "$OUT"
M=${MODELS:-/tmp/cinfer-models}
if [ ! -x build-gpu/cinfer ]; then
    cmake -S . -B build-gpu -G Ninja -DCMAKE_BUILD_TYPE=Release -DCINFER_CUDA=ON \
        -DCMAKE_CUDA_ARCHITECTURES=90 > "$OUT/build.log" 2>&1 &&
        ninja -C build-gpu cinfer >> "$OUT/build.log" 2>&1 || { tail -30 "$OUT/build.log"; exit 1; }
fi
if [ ! -f "$M/l8b/model.safetensors" ] && [ ! -f "$M/l8b/config.json" ]; then
    python3 bench/gpu/models.py bench "$M" l8b > "$OUT/models.log" 2>&1 || { tail "$OUT/models.log"; exit 1; }
fi
if [ -n "${TOK:-}" ]; then
    [ -f "$TOK/tokenizer.json.gz" ] && gunzip -c "$TOK/tokenizer.json.gz" > "$M/l8b/tokenizer.json"
    cp "$TOK/tokenizer_config.json" "$M/l8b/" 2>/dev/null
fi
[ "${PHASE:-all}" = prep ] && { ls -la "$M/l8b"; exit 0; }
export LD_LIBRARY_PATH="$PWD/build-gpu:/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}"
python3 bench/ssd_cache/run.py --bin build-gpu/cinfer --model "$M/l8b" --backend cuda \
    --threads 8 --sizes "${SIZES:-8000,32000}" --ctx 33000 --no-decode --out "$OUT/ssd_gpu.json"
