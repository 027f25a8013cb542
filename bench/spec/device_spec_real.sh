#!/usr/bin/env bash
# device_spec_real.sh — the "gpu" half of bench/results/spec.json on a real model, in one
# device call (issue 17). Random weights say nothing about acceptance; this runs the bench on
# a real instruct model (SmolLM2-135M-Instruct Q4_1, the one the lead ships) as the target:
#  1. check: bench/spec/device_check.py — greedy outputs (text, finish, tokens) with ngram and
#     suffix equal the plain server's, alone and 8 concurrent, on the real model;
#  2. bench: bench/spec/run.py --section gpu — batch-1 decode speed-up on the code edit, the
#     agent loop and prose for ngram and suffix, and aggregate tok/s at 8 concurrent with and
#     without speculation (aggregate_ratio_at_8); two_model is recorded as not measured (no
#     smaller model shares SmolLM2's tokenizer: its workloads carry speedup/acceptance_rate
#     null and the reason). The file keeps the "cpu" half of the repository's spec.json.
# Results in $OUT: summary.txt (read this), gpu.txt, check_real.json (+ .err), spec.json (the
# whole file, "gpu" filled in), spec_gpu.log (one JSON line a repetition).
# Usage (repository root on the device; BIN: a dir with cinfer and its libraries beside it):
#   OUT=$OUT BIN=gpubin MODEL=/path/smollm2-135m-instruct-Q4_1.gguf bash bench/spec/device_spec_real.sh
# Knobs: BACKEND (default cuda; cpu to dry-run it here), PARTS (default "check bench"),
# TOKENS (batch-1 max tokens, 256), AGG_TOKENS (120), REPS (2), CHECK_TOKENS (128),
# CHECK_TIMEOUT (120 s), BENCH_TIMEOUT (240 s): about 6 minutes at most in all.
set -u
PARTS=" ${PARTS:-check bench} "
want() { case "$PARTS" in *" $1 "*) return 0 ;; esac; return 1; }
B=$(cd "${BIN:?BIN=dir holding cinfer}" && pwd)
MODEL=$(cd "$(dirname "${MODEL:?MODEL=path of the gguf}")" && pwd)/$(basename "$MODEL")
BACKEND=${BACKEND:-cuda}
# the carried libraries are for cinfer only (python keeps the machine's): the python drivers
# get a wrapper that sets them
LDP=$B:/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}
W=$(mktemp -d /tmp/specreal.XXXXXX)
printf '#!/bin/sh\nLD_LIBRARY_PATH=%s exec %s/cinfer "$@"\n' "$LDP" "$B" > "$W/cinfer"
chmod +x "$W/cinfer"
OUT=${OUT:-/tmp/out}
mkdir -p "$OUT"
S="$OUT/summary.txt"
: > "$S"
if [ "$BACKEND" = cuda ]; then
    nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader | tee "$OUT/gpu.txt"
else
    echo "backend $BACKEND (dry run): $(nproc) cores, load $(cut -d' ' -f1-3 /proc/loadavg)" | tee "$OUT/gpu.txt"
fi
[ -f "$MODEL" ] || { echo "MODEL $MODEL not found" | tee -a "$S"; exit 2; }
"$W/cinfer" --version 2>&1 | head -1 | tee -a "$S"
t0=$(date +%s)

# 1. lossless on the real model (ngram, suffix; the draft argument is unused by them)
if want check; then
    BIN=$W timeout -s INT -k 20 "${CHECK_TIMEOUT:-120}" python3 bench/spec/device_check.py "$MODEL" "$MODEL" \
        --backend "$BACKEND" --kinds ngram,suffix --tokens "${CHECK_TOKENS:-128}" \
        --server-args "-c 4096" > "$OUT/check_real.json" 2> "$OUT/check_real.err"
    echo "check rc=$? ($(( $(date +%s) - t0 )) s)" | tee -a "$S"
    tail -c 2000 "$OUT/check_real.err" | tail -3 | tee -a "$S"
    tail -1 "$OUT/check_real.json" | tee -a "$S"
fi

# 2. the bench: the gpu section of spec.json
if want bench; then
    t1=$(date +%s)
    cp bench/results/spec.json "$OUT/spec.json" 2>/dev/null || echo '{}' > "$OUT/spec.json"
    BIN=$W timeout -s INT -k 20 "${BENCH_TIMEOUT:-240}" python3 bench/spec/run.py --backend "$BACKEND" \
        --section gpu --target "$MODEL" --kinds ngram,suffix \
        --not-measured "two_model=no smaller model shares SmolLM2's tokenizer (135M is the smallest SmolLM2; a random-weight draft would measure no acceptance)" \
        --server-args "-c 8192" --threads 2 \
        --max-tokens "${TOKENS:-256}" --agg-tokens "${AGG_TOKENS:-120}" --reps "${REPS:-2}" \
        --out "$OUT/spec.json" > "$OUT/spec_gpu.log" 2>&1
    echo "bench rc=$? ($(( $(date +%s) - t1 )) s)" | tee -a "$S"
    tail -3 "$OUT/spec_gpu.log" | cut -c1-400
    python3 - "$OUT/spec.json" <<'EOF' | tee -a "$S"
import json, sys
g = json.load(open(sys.argv[1])).get("gpu", {})
for k in ("ngram", "suffix", "two_model"):
    print(k, json.dumps({w: {f: v.get(f) for f in ("speedup", "acceptance_rate")}
                         for w, v in g.get(k, {}).items()}))
print("aggregate_ratio_at_8", g.get("aggregate_ratio_at_8"),
      json.dumps(g.get("aggregate_ratio_at_8_by_kind")), json.dumps(g.get("aggregate_tok_s_at_8")))
EOF
fi
rm -rf "$W"
echo "total $(( $(date +%s) - t0 )) s" | tee -a "$S"
