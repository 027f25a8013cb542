#!/usr/bin/env bash
# run.sh — the CPU half of bench/results/lora.json (bench/lora/README.md).
# Usage: bench/lora/run.sh [MODEL]   (default: models/qwen2.5-coder-0.5b-instruct-Q4_K_M.gguf)
# Three runs of cinfer_lora_bench: f32 adapters and bf16 adapters, both one thread timed by
# the process's CPU time (--clock cpu: on a shared machine wall times of one configuration
# vary 2-3x between repetitions), then f32 with 2 threads on wall time (for reference).
# The top-level cpu fields are the f32 CPU-time run's; "bf16" and "wall_t2" hold the others.
# Env: BIN (build dir, default build), STEPS (16), REPS (7), GPU_JSON (a device run's
# lora_gpu.json: becomes the "gpu" object; else the file's previous "gpu" is kept).
set -euo pipefail
cd "$(dirname "$0")/../.."
model=${1:-models/qwen2.5-coder-0.5b-instruct-Q4_K_M.gguf}
bin=${BIN:-build}
args=("$model" -n "${STEPS:-16}" --reps "${REPS:-7}")
load0=$(cut -d' ' -f1-3 /proc/loadavg)
f32=$("$bin/cinfer_lora_bench" "${args[@]}" -t 1 --clock cpu --dtype f32)
load1=$(cut -d' ' -f1-3 /proc/loadavg)
bf16=$("$bin/cinfer_lora_bench" "${args[@]}" -t 1 --clock cpu --dtype bf16)
load2=$(cut -d' ' -f1-3 /proc/loadavg)
wall=$("$bin/cinfer_lora_bench" "${args[@]}" -t 2 --clock wall --dtype f32)
load3=$(cut -d' ' -f1-3 /proc/loadavg)
python3 - "$f32" "$bf16" "$wall" "$load0|$load1|$load2|$load3" "$(git rev-parse --short HEAD)" <<'PY'
import json, os, sys
keys = ("overhead_b1", "overhead_b8", "mixed_vs_single_at_8")
runs = [json.loads(a) for a in sys.argv[1:4]]
loads = sys.argv[4].split("|")
def part(d, l0, l1, threads):
    o = {k: d[k] for k in keys}
    o.update(adapter_dtype=d["adapter_dtype"], clock=d["clock"], threads=threads,
             tok_s_median=d["tok_s_median"], adapter_bytes=d["adapter_bytes"],
             load_avg_before=l0, load_avg_after=l1)
    return o
cpu = part(runs[0], loads[0], loads[1], 1)
cpu.update(model=os.path.basename(runs[0]["model"]), weight_bytes=runs[0]["weight_bytes"],
           rank=runs[0]["rank"], steps=runs[0]["steps"], reps=runs[0]["reps"], commit=sys.argv[5],
           bf16=part(runs[1], loads[1], loads[2], 1), wall_t2=part(runs[2], loads[2], loads[3], 2))
p = "bench/results/lora.json"
old = json.load(open(p)) if os.path.exists(p) else {}
gpu = old.get("gpu", {})
if os.environ.get("GPU_JSON"):
    gpu = json.load(open(os.environ["GPU_JSON"]))
with open(p, "w") as f:
    json.dump({"cpu": cpu, "gpu": gpu}, f, indent=1)
    f.write("\n")
print(json.dumps({"cpu": cpu, "gpu": gpu}, indent=1))
PY
