#!/usr/bin/env bash
# device_ncu_kernel.sh — ncu's detailed sections (speed of light, memory workload, occupancy,
# launch statistics, warp stall reasons) for single launches of the batch-1 decode skinny
# kernels, graphs off, clocks as found: the l8b q/k/v (k_sg MODE 3), gate/up (MODE 1) and the
# residual ADDs (MODE 2). Prebuilt binaries in $BIN (.gpubin); reports in $OUT/ncu_kernel_*.txt.
#   KERNELS="MODE:SKIP ..." (defaults below) picks which launch of each instance to profile.
set -uo pipefail
BIN=${BIN:-.gpubin}
OUT=${OUT:-/tmp/out}
M=${MODELS:-/tmp/cinfer-models}
MODEL=${MODEL:-l8b}
export LD_LIBRARY_PATH="$PWD/$BIN:/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}"
mkdir -p "$OUT"
python3 bench/gpu/models.py bench "$M" "$MODEL" > /dev/null
for spec in ${KERNELS:-3:300 1:300 2:600}; do
    mode=${spec%%:*} skip=${spec#*:}
    # k_sg<BF=1, MODE, NS=1, P=0, W, NI>: the decode instance of each mode
    CINFER_CUDA_GRAPHS=0 timeout ${NCU_T:-120} ncu --clock-control none \
        --kernel-name-base mangled --kernel-name "regex:_Z4k_sgILi1ELi${mode}ELi1ELi0E" \
        --launch-skip "$skip" --launch-count 1 \
        --section SpeedOfLight --section MemoryWorkloadAnalysis --section Occupancy \
        --section LaunchStats --section WarpStateStats --section SchedulerStats \
        "$BIN/cinfer_gpu_bench" "$M/$MODEL" perf --prefill 128 --batches 8 \
        > "$OUT/ncu_kernel_${MODEL}_mode$mode.txt" 2>&1
    echo "mode $mode rc=$?"
    grep -E "k_sg|Duration|DRAM Throughput|Memory Throughput|Achieved Occupancy|Theoretical Occupancy|Registers Per|Block Limit|Waves Per SM|Grid Size|Block Size|Stall|Warp Cycles Per Issued|Eligible|No Eligible" \
        "$OUT/ncu_kernel_${MODEL}_mode$mode.txt" | head -40
done
