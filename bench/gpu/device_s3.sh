#!/usr/bin/env bash
# device_s3.sh — one device call for the CUDA work of several issues at once, correctness
# first, then speed while time is left (the device budget of a session is small):
#   A. test_spec on CUDA (issue 17: greedy ids and logprobs with speculation == without:
#      CUDA row invariance); test_backend_conformance (every op vs the CPU, the new 128-row
#      invariance checks, the grammar mask of the op sample: issue 26); test_kvq_cuda and
#      test_engine_kvq on CUDA (issue 19); test_lora on CUDA (issue 21, the shrink/expand
#      kernels);
#   B. while the elapsed time is under BUDGET_B (s): the random l1b model, then
#      cinfer_lora_bench new vs v1 (overhead_b1), the prefix-cache invariance of
#      bench/gpu/cache_invariance.py, and cinfer_gpu_bench l1b perf at the default and
#      CINFER_CUDA_INVARIANT_ROWS=0 (what the invariance costs).
# Binaries: .gpubin/b.tar.xz (built with nvcc here: cinfer, the tests above, the benches,
# every non-system library they link, fixtures/stories260K). Results: $OUT/summary.txt.
set -u
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
tar -C /tmp -xJf .gpubin/b.tar.xz; B=/tmp/b
LDP=$B:/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}
LB() { LD_LIBRARY_PATH=$LDP "$@"; }
W=/tmp/wrap; mkdir -p $W
printf '#!/bin/sh\nLD_LIBRARY_PATH=%s exec %s/cinfer "$@"\n' "$LDP" "$B" > $W/cinfer; chmod +x $W/cinfer
S=$OUT/summary.txt
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader | tee "$OUT/gpu.txt" "$S"
t0=$(date +%s); el() { echo "$(( $(date +%s) - t0 )) s"; }
export CINFER_FIXTURES=$B/fixtures CINFER_SRC=$PWD

CINFER_TEST_BACKEND=cuda LB timeout 90 $B/test_spec > $OUT/test_spec.log 2>&1
echo "test_spec cuda rc=$? ($(el))" | tee -a $S; grep -E "FAIL|passed" $OUT/test_spec.log | head -12 | tee -a $S
LB timeout 120 $B/test_backend_conformance > $OUT/conformance.log 2>&1
echo "conformance rc=$? ($(el))" | tee -a $S; grep -E "FAIL|differ|depends|passed|failed" $OUT/conformance.log | head -16 | tee -a $S
CINFER_TEST_BACKEND=cuda LB timeout 60 $B/test_kvq_cuda > $OUT/test_kvq_cuda.log 2>&1
echo "test_kvq_cuda rc=$? ($(el))" | tee -a $S; grep -E "FAIL|passed|SKIP" $OUT/test_kvq_cuda.log | head -12 | tee -a $S
CINFER_TEST_BACKEND=cuda LB timeout 60 $B/test_engine_kvq > $OUT/test_engine_kvq.log 2>&1
echo "test_engine_kvq cuda rc=$? ($(el))" | tee -a $S; grep -E "FAIL|passed" $OUT/test_engine_kvq.log | head -12 | tee -a $S
CINFER_LORA_BACKEND=cuda LB timeout 60 $B/test_lora > $OUT/test_lora.log 2>&1
echo "test_lora cuda rc=$? ($(el))" | tee -a $S; grep -E "FAIL|failed|passed" $OUT/test_lora.log | head -12 | tee -a $S
grep -oE "max \|dlogit\| [0-9.e+-]+" $OUT/test_lora.log | sort -g -k3 | tail -1 | tee -a $S

B2=${BUDGET_B:-200}
[ $(( $(date +%s) - t0 )) -lt $B2 ] || { echo "no time for part B ($(el))" | tee -a $S; exit 0; }
timeout 150 python3 bench/gpu/models.py bench /tmp/m l1b > $OUT/models.log 2>&1
echo "models rc=$? ($(el))" | tee -a $S
for v in default CINFER_CUDA_LORA=v1; do
    [ $(( $(date +%s) - t0 )) -lt $(( B2 + 120 )) ] || break
    ev=CINFER_X=; [ $v = default ] || ev=$v
    env $ev LD_LIBRARY_PATH=$LDP timeout 60 $B/cinfer_lora_bench /tmp/m/l1b --backend cuda -n 32 --reps 3 \
        > $OUT/lora_$v.json 2> $OUT/lora_$v.err
    echo "lora_bench l1b $v rc=$? ($(el))" | tee -a $S
    python3 -c "import json,sys; d=json.load(open(sys.argv[1])); print({k: d.get(k) for k in ('overhead_b1','overhead_b8','mixed_vs_single_at_8','overhead_paths_b1','tok_s_median')})" $OUT/lora_$v.json 2>&1 | tee -a $S
done
[ $(( $(date +%s) - t0 )) -lt $(( B2 + 150 )) ] && {
    BIN=$W timeout 60 python3 bench/gpu/cache_invariance.py /tmp/m/l1b > $OUT/cache_default.json 2> $OUT/cache_default.err
    echo "cache invariance default rc=$? ($(el))" | tee -a $S; head -c 600 $OUT/cache_default.json | tee -a $S; echo | tee -a $S
}
for inv in default 0; do
    [ $(( $(date +%s) - t0 )) -lt $(( B2 + 190 )) ] || break
    ev=CINFER_X=; [ $inv = 0 ] && ev=CINFER_CUDA_INVARIANT_ROWS=0
    env $ev LD_LIBRARY_PATH=$LDP timeout 60 $B/cinfer_gpu_bench /tmp/m/l1b perf --batches 8,32 \
        > $OUT/perf_$inv.json 2> $OUT/perf_$inv.err
    echo "perf l1b INVARIANT_ROWS=$inv rc=$? ($(el))" | tee -a $S; head -c 700 $OUT/perf_$inv.json | tee -a $S; echo | tee -a $S
done
echo "total $(el)" | tee -a $S
