#!/usr/bin/env bash
# device_s4.sh — session 4's first device call (binaries built here with nvcc, carried in
# .gpubin/b.tar.xz: cinfer, the tests and benches below, their non-system libraries,
# fixtures/stories260K; *_t21 = the same with branch t21's cuda_lora_sg.cu):
#   A. test_embed_dec on CUDA (issue 28: decoder embeddings vs transformers goldens on the GPU
#      backend), test_lora on CUDA with main's and t21's shrink/expand kernels (issue 21),
#      test_spec on CUDA and the backend conformance (regressions since the last GPU run);
#   B. cinfer_lora_bench on the random l1b: main, t21's rewrite, v1 (overhead_b1/b8, mixed);
#   C. bench/lora/device_serve.py: adapters mounted and unmounted while serving on CUDA;
#   D. bench/ssd_cache/device_gpu.sh on the random 8B-shape l8b: restart TTFT for 8k and 32k
#      prefixes, restored from the SSD tier vs re-prefilled (issue 27).
# Results: $OUT/summary.txt and the logs beside it.
set -u
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
tar -C /tmp -xJf .gpubin/b.tar.xz; B=/tmp/b
export LD_LIBRARY_PATH=$B:/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}
S=$OUT/summary.txt
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader | tee "$S"
t0=$(date +%s); el() { echo "$(( $(date +%s) - t0 )) s"; }
export CINFER_FIXTURES=$B/fixtures CINFER_SRC=$PWD
t() { # name, env..., binary
    local n=$1; shift
    env "$@" > "$OUT/$n.log" 2>&1
    echo "$n rc=$? ($(el))" | tee -a "$S"; grep -E "FAIL|passed|failed" "$OUT/$n.log" | head -8 | tee -a "$S"
}
t embed_dec CINFER_TEST_BACKEND=cuda timeout 120 $B/test_embed_dec
t lora_main CINFER_LORA_BACKEND=cuda timeout 60 $B/test_lora
t lora_t21 CINFER_LORA_BACKEND=cuda timeout 60 $B/test_lora_t21
t spec CINFER_TEST_BACKEND=cuda timeout 90 $B/test_spec
t conformance timeout 120 $B/test_backend_conformance
timeout 150 python3 bench/gpu/models.py bench /tmp/m l1b > $OUT/models.log 2>&1
echo "models rc=$? ($(el))" | tee -a $S
for v in main t21 v1; do
    bin=$B/cinfer_lora_bench; ev=CINFER_X=
    [ $v = t21 ] && bin=$B/cinfer_lora_bench_t21
    [ $v = v1 ] && ev=CINFER_CUDA_LORA=v1
    env $ev timeout 60 $bin /tmp/m/l1b --backend cuda -n 32 --reps 3 > $OUT/lora_$v.json 2> $OUT/lora_$v.err
    echo "lora_bench l1b $v rc=$? ($(el))" | tee -a $S
    python3 -c "import json,sys; d=json.load(open(sys.argv[1])); print({k: d.get(k) for k in ('overhead_b1','overhead_b8','mixed_vs_single_at_8','overhead_paths_b1','tok_s_median')})" $OUT/lora_$v.json 2>&1 | tee -a $S
done
CINFER_LIBS=$B timeout 150 python3 bench/lora/device_serve.py $B/cinfer cuda $OUT/lora_serve.json > $OUT/lora_serve.log 2>&1
echo "lora device_serve rc=$? ($(el))" | tee -a $S; head -c 1500 $OUT/lora_serve.json | tee -a $S; echo | tee -a $S
ln -sfn $B .b4
BIN=.b4 MODELS=/tmp/m timeout ${SSD_S:-330} bash bench/ssd_cache/device_gpu.sh > $OUT/ssd.log 2>&1
echo "ssd l8b rc=$? ($(el))" | tee -a $S; tail -5 $OUT/ssd.log | tee -a $S; cat $OUT/ssd_gpu.json 2>/dev/null | head -c 1500 | tee -a $S
echo "total $(el)" | tee -a $S
