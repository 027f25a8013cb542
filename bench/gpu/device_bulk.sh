#!/usr/bin/env bash
# device_bulk.sh — one device call for the bulk-copy pipeline of the skinny kernel
# (CINFER_CUDA_SG_BULK=1, k_sg BULK; written at stop 14, not yet run on a GPU) and the
# gemv_bench layout variants. Prebuilt binaries in $BIN (.gpubin). Each step has a timeout:
# a pipeline bug hangs rather than fails.
#   1. conformance with the pipeline on (every skinny case, batch invariance included);
#   2. bit identity: greedy ids and every logit row of l1b/l8b with and without it (the
#      pipeline keeps the register path's chunk order, so they must be equal byte for byte);
#   3. decode A/B (perf) on l1b and l8b, default / pipeline / default;
#   4. gemv_bench (built here with nvcc): tile / bulk / bulkrow against the register kernel.
set -uo pipefail
BIN=${BIN:-.gpubin}
OUT=${OUT:-/tmp/out}
M=${MODELS:-/tmp/cinfer-models}
export LD_LIBRARY_PATH="$PWD/$BIN:/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}"
mkdir -p "$OUT"
echo "== conformance, CINFER_CUDA_SG_BULK=1"
CINFER_CUDA_SG_BULK=1 timeout 180 "$BIN/test_backend_conformance" > "$OUT/conf_bulk.log" 2>&1
echo "rc=$?"; grep -iE "fail|off|differ|depends" "$OUT/conf_bulk.log" | grep -v "^  cpu" | head -10
tail -1 "$OUT/conf_bulk.log"
python3 bench/gpu/models.py bench "$M" l1b l8b > /dev/null
echo "== bit identity (logits of 8 greedy steps)"
for m in l1b l8b; do
    timeout 120 "$BIN/cinfer_gpu_bench" "$M/$m" logits --ids 1,2,3,4,5,6,7,8,9,10,11,12 -n 8 \
        > "$OUT/lg_$m.txt" 2> /dev/null; a=$?
    CINFER_CUDA_SG_BULK=1 timeout 120 "$BIN/cinfer_gpu_bench" "$M/$m" logits \
        --ids 1,2,3,4,5,6,7,8,9,10,11,12 -n 8 > "$OUT/lgb_$m.txt" 2> /dev/null; b=$?
    if cmp -s "$OUT/lg_$m.txt" "$OUT/lgb_$m.txt"; then echo "$m: identical (rc $a $b)";
    else echo "$m: DIFFERENT (rc $a $b)"; fi
    rm -f "$OUT/lg_$m.txt" "$OUT/lgb_$m.txt"
done
echo "== decode A/B"
for v in CINFER_NONE=1 CINFER_CUDA_SG_BULK=1 CINFER_NONE=2 CINFER_CUDA_SG_BULK=1:CINFER_NONE=3; do
    for m in l1b l8b; do
        env ${v//:/ } timeout 120 "$BIN/cinfer_gpu_bench" "$M/$m" perf --batches 8 2> /dev/null |
            sed -E "s/^/$m $v: /" | cut -c1-220
    done
done
echo "== gemv_bench"
if nvcc -O3 -arch=sm_90 -std=c++17 -o /tmp/gemv_bench bench/gpu/gemv_bench.cu -lcublas; then
    timeout 240 /tmp/gemv_bench 1 | tee "$OUT/gemv_bench.txt"
    echo "rc=$?"
fi
