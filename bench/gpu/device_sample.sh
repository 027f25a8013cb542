#!/usr/bin/env bash
# device_sample.sh — issue 18's sampler slice in one device call (binaries carried in .gpubin,
# built on the CPU machine with nvcc; see README.md): the backend conformance test (the op
# sample on CUDA vs the host sampler, ids and processed logits bit for bit), the op's device
# time beside argmax (cinfer_gpu_bench - sample), then serve_sampled.py on a random l8b.
# Everything lands in $OUT (gpu.txt, conf.log, sample_us.json, serve.json, serve.err).
B=$PWD/.gpubin
export LD_LIBRARY_PATH=$B:/usr/local/cuda/lib64:$LD_LIBRARY_PATH
OUT=${OUT:-/tmp/out}
mkdir -p "$OUT"
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader | tee "$OUT/gpu.txt"
t0=$(date +%s)
CINFER_TEST_ONLY=${CONF_ONLY:-} CINFER_FIXTURES=$B/fixtures CINFER_SRC=$PWD timeout 240 "$B/test_backend_conformance" > "$OUT/conf.log" 2>&1
echo "conformance rc=$? ($(( $(date +%s) - t0 )) s)"
grep -E "FAIL|passed|backend cuda|SKIP" "$OUT/conf.log" | head -20
timeout 90 "$B/cinfer_gpu_bench" - sample > "$OUT/sample_us.json" 2>&1
echo "sample bench rc=$?"; cat "$OUT/sample_us.json"
t1=$(date +%s)
timeout 240 python3 bench/gpu/models.py bench /tmp/m ${MODELS:-l8b} > "$OUT/models.log" 2>&1
echo "models rc=$? ($(( $(date +%s) - t1 )) s)"; tail -2 "$OUT/models.log"
for m in ${MODELS:-l8b}; do
    t2=$(date +%s)
    BIN=$B timeout ${SERVE_TIMEOUT:-420} python3 bench/gpu/serve_sampled.py /tmp/m/$m --streams 64 \
        --tokens ${TOKENS:-256} --timeout ${WAVE_TIMEOUT:-60} ${SKIP_HOST:+--skip-host} > "$OUT/serve_$m.json" 2> "$OUT/serve_$m.err"
    echo "serve $m rc=$? ($(( $(date +%s) - t2 )) s)"
    cat "$OUT/serve_$m.err" | cut -c1-300 | tail -14
    python3 -c "import json,sys; d=json.load(open('$OUT/serve_$m.json')); print(json.dumps({k: d.get(k) for k in ('serve_sampled_vs_greedy','host_sampled_vs_greedy','seeded_text_same')}))"
done
echo "total $(( $(date +%s) - t0 )) s"
