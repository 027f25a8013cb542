#!/usr/bin/env bash
# device_run.sh — one device call: checks (conformance, stories260K, parity) and/or the
# benchmark, with prebuilt binaries in $BIN (cinfer, test_backend_conformance,
# cinfer_gpu_bench; built on the CPU machine, nvcc there) or a fresh build when BIN is
# unset. Logs and JSON go to $OUT (bench/gpu/README.md says how to read them).
#   device_run.sh check|bench|all
set -uo pipefail
phase=${1:-all}
OUT=${OUT:-/tmp/out}
RES=/tmp/cinfer-res   # everything lands here; packed into $OUT/res.tgz at exit (1 file back)
mkdir -p "$OUT" "$RES"
trap 'tar czf "$OUT/res.tgz" -C "$RES" .' EXIT
trap 'exit 143' TERM INT
BIN=${BIN:-}
if [ -z "$BIN" ]; then
    cmake -S . -B build-gpu -G Ninja -DCINFER_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES=90 >/dev/null &&
        ninja -C build-gpu cinfer test_backend_conformance cinfer_gpu_bench >/dev/null || exit 1
    BIN=build-gpu
fi
export LD_LIBRARY_PATH="$PWD/$BIN:/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}"
export PYTHONUNBUFFERED=1
FIX=${FIX:-$BIN/fixtures}
M=${MODELS:-/tmp/cinfer-models}
{
    nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.sm,clocks.mem --format=csv
    nvcc --version | tail -1
} > "$RES/machine.txt" 2>&1

if [ "$phase" = check ] || [ "$phase" = all ]; then
    echo "== conformance"
    "$BIN/test_backend_conformance" > "$RES/conformance.log" 2>&1
    echo "conformance rc=$?"; tail -3 "$RES/conformance.log"
    echo "== stories260K"
    F=$FIX/stories260K/stories260K.gguf
    for be in cpu cuda; do
        "$BIN/cinfer" run "$F" -p "Once upon a time" -n 200 --temp 0 --backend $be \
            > "$RES/stories_$be.txt" 2>> "$RES/stories_err.txt"
        "$BIN/cinfer" run "$F" --ids 1,403,407,261,378 -n 250 --temp 0 --ignore-eos \
            --output-ids --backend $be > "$RES/stories_ids_$be.txt" 2>> "$RES/stories_err.txt"
    done
    cmp "$RES/stories_cpu.txt" "$RES/stories_cuda.txt" && echo "stories text: cuda == cpu"
    cmp "$RES/stories_ids_cpu.txt" "$RES/stories_ids_cuda.txt" && echo "stories ids: cuda == cpu"
    head -c 300 "$RES/stories_cuda.txt"; echo
    echo "== parity"
    python3 bench/gpu/models.py parity "$M/parity" > /dev/null
    python3 bench/gpu/parity.py "$BIN/cinfer_gpu_bench" "$M"/parity/* > "$RES/parity.json" 2> "$RES/parity_err.txt"
    echo "parity rc=$?"; tail -4 "$RES/parity_err.txt"
fi

if [ "$phase" = bench ] || [ "$phase" = all ]; then
    echo "== bench"
    python3 bench/gpu/models.py bench "$M" ${BENCH_MODELS:-l1b l8b}
    python3 bench/gpu/peers.py bw | tee "$RES/bw.json"
    # the streaming-read bandwidth of a plain CUDA kernel (the decode ceiling: it only reads)
    if [ -x "$BIN/bw_read" ] || nvcc -O3 -arch=sm_90 -o "$BIN/bw_read" bench/gpu/bw_read.cu; then
        "$BIN/bw_read" > "$RES/bw_read.json"; tail -c 80 "$RES/bw_read.json"
    fi
    for m in ${BENCH_MODELS:-l1b l8b}; do
        "$BIN/cinfer_gpu_bench" "$M/$m" perf | tee "$RES/cinfer_$m.json"
        [ -n "${PEERS:-1}" ] && python3 bench/gpu/peers.py eager "$M/$m" --agg | tee "$RES/eager_$m.json"
    done
    if [ -n "${PROFILE:-}" ]; then
        # one batch-1 decode step of l8b, per kernel (graphs off so ncu sees each launch),
        # then two attention launches of the 4096-token prefill
        CINFER_CUDA_GRAPHS=0 timeout 150 ncu --clock-control none --launch-skip 2400 --launch-count 470 \
            --metrics gpu__time_duration.sum,dram__throughput.avg.pct_of_peak_sustained_elapsed \
            --csv "$BIN/cinfer_gpu_bench" "$M/l8b" perf --batches 8 > "$RES/ncu_l8b_decode.csv" 2> "$RES/ncu_err.txt"
        python3 bench/gpu/ncu_sum.py "$RES/ncu_l8b_decode.csv" | tee "$RES/ncu_l8b_decode.txt"
        CINFER_CUDA_GRAPHS=0 timeout 150 ncu --clock-control none --kernel-name regex:k_attn \
            --launch-skip 8224 --launch-count 2 \
            --metrics gpu__time_duration.sum,sm__throughput.avg.pct_of_peak_sustained_elapsed,dram__throughput.avg.pct_of_peak_sustained_elapsed \
            --csv "$BIN/cinfer_gpu_bench" "$M/l8b" perf --batches 8 > "$RES/ncu_l8b_prefill.csv" 2>> "$RES/ncu_err.txt"
        python3 bench/gpu/ncu_sum.py "$RES/ncu_l8b_prefill.csv" | tee "$RES/ncu_l8b_prefill.txt"
    fi
    if [ -n "${COMPILED:-}" ]; then
        for m in ${BENCH_MODELS:-l1b l8b}; do
            timeout ${COMPILE_TIMEOUT:-150} python3 bench/gpu/peers.py compiled "$M/$m" | tee "$RES/compiled_$m.json"
        done
    fi
fi

if [ "$phase" = profile ]; then
    # per-kernel device time of batch-1 decode steps (graphs off so ncu sees plain launches)
    python3 bench/gpu/models.py bench "$M" l1b > /dev/null
    "$BIN/test_backend_conformance" > "$RES/conformance.log" 2>&1; echo "conformance rc=$?"
    tail -3 "$RES/conformance.log"
    for gr in 1 0; do
        CINFER_CUDA_GRAPHS=$gr "$BIN/cinfer_gpu_bench" "$M/l1b" perf --prefill 512 --batches 8 | tee "$RES/l1b_graphs$gr.json"
    done
    CINFER_CUDA_GRAPHS=0 timeout 200 ncu --clock-control none --launch-skip 3000 --launch-count 240 \
        --metrics gpu__time_duration.sum,dram__throughput.avg.pct_of_peak_sustained_elapsed,launch__grid_size \
        --csv "$BIN/cinfer_gpu_bench" "$M/l1b" perf --prefill 128 --batches 8 > "$RES/ncu_l1b.csv" 2> "$RES/ncu_err.txt"
    echo "ncu rc=$?"
    python3 bench/gpu/ncu_sum.py "$RES/ncu_l1b.csv"
fi
