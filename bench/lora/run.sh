#!/usr/bin/env bash
# run.sh — the CPU half of bench/results/lora.json (bench/lora/README.md).
# Usage: bench/lora/run.sh [MODEL] [-t THREADS]   (default: models/qwen2.5-coder-0.5b-instruct-Q4_K_M.gguf, 2)
# Env: BIN (build dir, default build), STEPS (16), REPS (7), GPU_JSON (a device run's
# lora_gpu.json: becomes the "gpu" object; else the file's previous "gpu" is kept).
set -euo pipefail
cd "$(dirname "$0")/../.."
model=${1:-models/qwen2.5-coder-0.5b-instruct-Q4_K_M.gguf}
threads=2
[ "${2:-}" = "-t" ] && threads=${3:-2}
bin=${BIN:-build}
load0=$(cut -d' ' -f1-3 /proc/loadavg)
out=$("$bin/cinfer_lora_bench" "$model" -t "$threads" -n "${STEPS:-16}" --reps "${REPS:-7}")
load1=$(cut -d' ' -f1-3 /proc/loadavg)
echo "$out"
python3 - "$out" "$load0" "$load1" "$threads" "$(git rev-parse --short HEAD)" <<'PY'
import json, os, sys
d = json.loads(sys.argv[1])
cpu = {k: d[k] for k in ("overhead_b1", "overhead_b8", "mixed_vs_single_at_8")}
cpu.update(model=os.path.basename(d["model"]), rank=d["rank"], threads=int(sys.argv[4]),
           steps=d["steps"], reps=d["reps"], tok_s_median=d["tok_s_median"],
           adapter_bytes=d["adapter_bytes"], weight_bytes=d["weight_bytes"],
           load_avg_before=sys.argv[2], load_avg_after=sys.argv[3], commit=sys.argv[5])
p = "bench/results/lora.json"
old = json.load(open(p)) if os.path.exists(p) else {}
gpu = old.get("gpu", {})
if os.environ.get("GPU_JSON"):
    gpu = json.load(open(os.environ["GPU_JSON"]))
json.dump({"cpu": cpu, "gpu": gpu}, open(p, "w"), indent=1)
open(p, "a").write("\n")
print(json.dumps({"cpu": cpu, "gpu": gpu}, indent=1))
PY
