#!/usr/bin/env bash
# device_explore.sh — the open batch-1 decode experiments of issue 7 in one device call, with
# prebuilt binaries in $BIN (.gpubin, as device_iter.sh): the persistent-chain variants of
# chain_bench.cu on l1b/l8b shapes, then A/B decode runs of cinfer (perf, one machine, one
# call) for the warp-count and chained-norm knobs. Prints a short summary; everything else
# goes to $OUT/explore.log (one file, so it always comes back).
set -uo pipefail
BIN=${BIN:-.gpubin}
OUT=${OUT:-/tmp/out}
mkdir -p "$OUT"
LOG="$OUT/explore.log"
{
    echo "== chain_bench (us per layer of the 4-projection chain; same bits in every variant)"
    if [ "${CHAIN:-1}" = 0 ]; then
        echo "skipped (CHAIN=0)"
    elif nvcc -O3 -arch=sm_90 -std=c++17 -o /tmp/chain_bench bench/gpu/chain_bench.cu; then
        /tmp/chain_bench l1b
        /tmp/chain_bench l8b
    else
        echo "chain_bench did not build"
    fi
    echo "== cinfer decode A/B (CINFER_NONE=* are repeats of the default)"
    MM= PROFILE= MODELS="${MODELS:-l1b l8b}" AB_MODELS="${AB_MODELS:-l1b l8b}" \
        AB="${AB:-CINFER_NONE=1 CINFER_CUDA_SG_WARPS_QKV=8 CINFER_CUDA_SG_WARPS_GLU=8 CINFER_CUDA_SG_WARPS_QKV=8:CINFER_CUDA_SG_WARPS_GLU=8 CINFER_CUDA_FUSE_NORM=2 CINFER_CUDA_FUSE_NORM=0 CINFER_NONE=2}" \
        BIN="$BIN" OUT="$OUT/iter" bash bench/gpu/device_iter.sh
} > "$LOG" 2>&1
# the summary: chain_bench lines, conformance, and decode tok/s per switch
grep -E "^(l1b|l8b):|us/layer|grids|conformance|passed|stories" "$LOG"
# tok/s, then the step's wall time and its device time alone (graph replay), in µs
grep -E '^(l1b|l8b) ' "$LOG" | sed -E 's/\{"decode_b1_tok_s": ([0-9.]+), "decode_step_us": ([0-9.-]+), "decode_gpu_step_us": ([0-9.-]+).*/\1 tok\/s \2 \3/'
grep -E '^\{"decode_b1_tok_s"' "$LOG" | sed -E 's/\{"decode_b1_tok_s": ([0-9.]+), "decode_step_us": ([0-9.-]+), "decode_gpu_step_us": ([0-9.-]+).*/default: \1 tok\/s \2 \3/'
grep -h "no replay" "$OUT"/iter/perf_*_err.txt 2>/dev/null
rm -rf "$OUT/iter"
