#!/usr/bin/env bash
# device_lead.sh — the lead's first device call of a session: the CUDA conformance suite (the
# op sample included), stories260K cuda == cpu, the sampler's device time, served sampling vs
# greedy (serve_sampled.py) and the functional checks of speculation / SSD tier on CUDA
# (device_lead.py). Binaries come as .gpubin/b.tar.xz (built here with nvcc; see README.md).
set -u
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
tar -C /tmp -xJf .gpubin/b.tar.xz; B=/tmp/b
export LD_LIBRARY_PATH=$B:/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader | tee "$OUT/gpu.txt"
ldd $B/cinfer | grep "not found"
t0=$(date +%s)
CINFER_FIXTURES=$B/fixtures CINFER_SRC=$PWD timeout ${CONF_S:-200} "$B/test_backend_conformance" > "$OUT/conf.log" 2>&1
echo "conformance rc=$? ($(( $(date +%s) - t0 )) s)"; grep -E "FAIL|passed|SKIP" "$OUT/conf.log" | head -20; tail -3 "$OUT/conf.log"
S=$B/fixtures/stories260K/stories260K.gguf
for be in cpu cuda; do timeout 60 $B/cinfer run $S -p "Once upon a time" -n 64 --temp 0 --backend $be > /tmp/run_$be.txt 2>/dev/null; done
cmp -s /tmp/run_cpu.txt /tmp/run_cuda.txt && echo "stories cuda == cpu" || { echo "stories DIFFER"; head -c 400 /tmp/run_cpu.txt; echo; head -c 400 /tmp/run_cuda.txt; }
timeout 60 "$B/cinfer_gpu_bench" - sample > "$OUT/sample_us.json" 2>&1; echo "sample bench rc=$?"; head -c 1500 "$OUT/sample_us.json"; echo
t1=$(date +%s)
timeout 200 python3 bench/gpu/models.py bench /tmp/m ${MODELS:-l1b} > "$OUT/models.log" 2>&1
echo "models rc=$? ($(( $(date +%s) - t1 )) s)"; tail -2 "$OUT/models.log"
for m in ${MODELS:-l1b}; do
  t2=$(date +%s)
  BIN=$B timeout ${LEAD_S:-150} python3 bench/gpu/device_lead.py /tmp/m/$m > "$OUT/lead_$m.json" 2> "$OUT/lead_$m.err"
  echo "lead $m rc=$? ($(( $(date +%s) - t2 )) s)"; cat "$OUT/lead_$m.json"; tail -5 "$OUT/lead_$m.err"
  t2=$(date +%s)
  BIN=$B timeout ${SERVE_S:-200} python3 bench/gpu/serve_sampled.py /tmp/m/$m --streams 64 --tokens ${TOKENS:-256} --timeout 60 > "$OUT/serve_$m.json" 2> "$OUT/serve_$m.err"
  echo "serve $m rc=$? ($(( $(date +%s) - t2 )) s)"; tail -12 "$OUT/serve_$m.err" | cut -c1-300
  python3 -c "import json; d=json.load(open('$OUT/serve_$m.json')); print(json.dumps(d)[:3000])"
done
echo "total $(( $(date +%s) - t0 )) s"
