#!/usr/bin/env bash
# device_spec.sh — speculative decoding on CUDA in one device call (issue 17; binaries built
# on the CPU machine with the CUDA backend and carried in $BIN, see bench/gpu/README.md):
#  1. test_spec with CINFER_TEST_BACKEND=cuda: the unit contracts (greedy ids and logprobs
#     identical with and without ngram / suffix / two-model drafts, alone, 8 concurrent,
#     prefix hit, stop string, tight pool; T > 0 same seed; the chi-square tests; Gemma 3's
#     sliding pool) on stories260K and the gemma3 parity model, on the GPU backend;
#  2. random-weight l8b / l1b (bench/gpu/models.py, synthetic tokenizer);
#  3. device_check.py: greedy outputs through `cinfer serve --backend cuda` with ngram,
#     suffix and two-model (l8b target, l1b draft) equal the plain server's, alone and
#     8 concurrent; then l1b drafting for itself (every greedy draft accepted);
#  4. bench/spec/run.py --backend cuda --section gpu --sequential on l8b (+ l1b draft):
#     batch-1 decode speed-up per kind and workload, aggregate at 8 (random weights: the
#     acceptance is that of the random model's own loops, not of real text — see
#     bench/RESULTS.md).
# Everything lands in $OUT: gpu.txt, test_spec_cuda.log, models.log, check_l8b.json,
# check_l1b_self.json, spec_gpu.json (+ .log), summary.txt.
# Usage (repo root on the device, $BIN carried):  BIN=.gpubin bash bench/spec/device_spec.sh
# PARTS (default "test models check bench") runs some of them (the models stay in $MODELS_DIR,
# default /tmp/m, while the machine is warm); REPS (default 1: the GPU is not shared, one
# repetition is steady) and TOKENS / AGG_TOKENS size the bench.
set -u
PARTS=" ${PARTS:-test models check bench} "
want() { case "$PARTS" in *" $1 "*) return 0 ;; esac; return 1; }
B=$(cd "${BIN:-.gpubin}" && pwd)
export LD_LIBRARY_PATH=$B:/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}
OUT=${OUT:-/tmp/out}
mkdir -p "$OUT"
S="$OUT/summary.txt"
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader | tee "$OUT/gpu.txt"
t0=$(date +%s)

# 1. the unit contracts on CUDA
if want test; then
CINFER_TEST_BACKEND=${BACKEND:-cuda} CINFER_FIXTURES=$B/fixtures CINFER_SRC=$PWD \
    timeout ${TEST_TIMEOUT:-300} "$B/test_spec" > "$OUT/test_spec_cuda.log" 2>&1
echo "test_spec (${BACKEND:-cuda}) rc=$? ($(( $(date +%s) - t0 )) s)" | tee -a "$S"
grep -E "FAIL|passed|identical|chi-square|gemma3|rejection" "$OUT/test_spec_cuda.log" | head -40 | tee -a "$S"
fi

# 2. the random-weight models
t1=$(date +%s)
M=${MODELS_DIR:-/tmp/m}
if want models; then
timeout ${MODELS_TIMEOUT:-420} python3 bench/gpu/models.py bench "$M" l1b l8b > "$OUT/models.log" 2>&1
echo "models rc=$? ($(( $(date +%s) - t1 )) s)" | tee -a "$S"
fi
for m in l1b l8b; do
    [ ! -d "$M/$m" ] || [ -f "$M/$m/tokenizer.json" ] || python3 bench/gpu/synth_tokenizer.py "$M/$m" >> "$OUT/models.log" 2>&1
done

# 3. lossless through the server
if want check; then
t2=$(date +%s)
BIN=$B timeout ${CHECK_TIMEOUT:-600} python3 bench/spec/device_check.py "$M/l8b" "$M/l1b" \
    --backend ${BACKEND:-cuda} --tokens ${CHECK_TOKENS:-160} > "$OUT/check_l8b.json" 2> "$OUT/check_l8b.err"
echo "check l8b (draft l1b) rc=$? ($(( $(date +%s) - t2 )) s)" | tee -a "$S"
tail -c 3000 "$OUT/check_l8b.err" | tail -5
tail -1 "$OUT/check_l8b.json" | tee -a "$S"
t3=$(date +%s)
BIN=$B timeout ${CHECK_TIMEOUT:-600} python3 bench/spec/device_check.py "$M/l1b" "$M/l1b" \
    --backend ${BACKEND:-cuda} --kinds two-model --tokens ${CHECK_TOKENS:-160} \
    > "$OUT/check_l1b_self.json" 2> "$OUT/check_l1b_self.err"
echo "check l1b drafting for itself rc=$? ($(( $(date +%s) - t3 )) s)" | tee -a "$S"
tail -1 "$OUT/check_l1b_self.json" | tee -a "$S"
fi

# 4. the bench numbers (one server at a time: four l8b servers do not fit one GPU)
if want bench; then
t4=$(date +%s)
cp bench/results/spec.json "$OUT/spec_gpu.json" 2>/dev/null
BIN=$B timeout ${BENCH_TIMEOUT:-420} python3 bench/spec/run.py --backend ${BACKEND:-cuda} --section gpu \
    --sequential --target "$M/l8b" --draft "$M/l1b" \
    --chat-template tests/e2e/data/stories_chat.jinja --server-args "-c 8192" \
    --max-tokens ${TOKENS:-256} --agg-tokens ${AGG_TOKENS:-128} --reps ${REPS:-1} \
    --out "$OUT/spec_gpu.json" > "$OUT/spec_gpu.log" 2>&1
echo "bench rc=$? ($(( $(date +%s) - t4 )) s)" | tee -a "$S"
python3 - "$OUT/spec_gpu.json" <<'EOF' | tee -a "$S"
import json, sys
g = json.load(open(sys.argv[1])).get("gpu", {})
print(json.dumps({k: v for k, v in g.items() if k != "raw"}))
EOF
fi
echo "total $(( $(date +%s) - t0 )) s" | tee -a "$S"
