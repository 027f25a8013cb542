#!/usr/bin/env bash
# device_iter.sh — one quick iteration on the device with prebuilt binaries in $BIN (.gpubin):
# conformance, stories260K cuda == cpu, the projection micro-benchmark (mm), perf of l1b/l8b
# (no peers), and an ncu per-kernel summary of l1b and l8b decode steps. Results in $OUT.
set -uo pipefail
BIN=${BIN:-.gpubin}
OUT=${OUT:-/tmp/out}
M=/tmp/cinfer-models
export LD_LIBRARY_PATH="$PWD/$BIN:/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}"
mkdir -p "$OUT"
"$BIN/test_backend_conformance" > "$OUT/conf.log" 2>&1; echo "conformance rc=$?"
grep -vE "^  (cpu|backend)" "$OUT/conf.log" | grep -iE "fail|off|differ|depends|error" | head -20; tail -2 "$OUT/conf.log"
F=$BIN/fixtures/stories260K/stories260K.gguf
for be in cpu cuda; do
    "$BIN/cinfer" run "$F" --ids 1,403,407,261,378 -n 250 --temp 0 --ignore-eos --output-ids --backend $be > "$OUT/st_$be.txt" 2>/dev/null
done
cmp -s "$OUT/st_cpu.txt" "$OUT/st_cuda.txt" && echo "stories ids: cuda == cpu" || echo "stories ids DIFFER"
if [ -n "${MM-1}" ]; then "$BIN/cinfer_gpu_bench" - mm > "$OUT/mm.json" 2> "$OUT/mm_err.txt"; echo "mm rc=$?"; fi
if [ -n "${PARITY:-}" ]; then
    python3 bench/gpu/models.py parity "$M/parity" > /dev/null
    timeout 200 python3 bench/gpu/parity.py "$BIN/cinfer_gpu_bench" "$M"/parity/* > "$OUT/parity.json" 2> "$OUT/parity_err.txt"
    echo "parity rc=$?"; tail -6 "$OUT/parity_err.txt"
fi
python3 bench/gpu/models.py bench "$M" ${MODELS:-l1b l8b} > /dev/null
for m in ${MODELS:-l1b l8b}; do
    "$BIN/cinfer_gpu_bench" "$M/$m" perf 2> "$OUT/perf_${m}_err.txt" | tee "$OUT/perf_$m.json"
done
# A/B runs with environment switches, e.g. AB="CINFER_NONE=1 CINFER_CUDA_PDL=0 A=1:B=2"
# (':' joins several switches into one run)
for v in ${AB:-}; do
    for m in ${AB_MODELS:-l1b}; do
        env ${v//:/ } "$BIN/cinfer_gpu_bench" "$M/$m" perf --batches 8 2>/dev/null | sed "s/^/$m $v: /"
    done
done
if [ -n "${PROFILE-1}" ]; then
    for m in ${PROFILE_MODELS:-l1b l8b}; do
        CINFER_CUDA_GRAPHS=0 timeout ${NCU_T:-100} ncu --clock-control none --cache-control ${NCU_CACHE:-all} --launch-skip ${SKIP:-4000} --launch-count ${CNT:-400} \
            --metrics gpu__time_duration.sum,dram__throughput.avg.pct_of_peak_sustained_elapsed \
            --csv "$BIN/cinfer_gpu_bench" "$M/$m" perf --prefill 128 --batches 8 > "$OUT/ncu_$m.csv" 2> /dev/null
        python3 bench/gpu/ncu_sum.py "$OUT/ncu_$m.csv" > "$OUT/ncu_$m.txt" 2>&1; head -14 "$OUT/ncu_$m.txt"
    done
fi
