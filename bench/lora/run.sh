#!/usr/bin/env bash
# run.sh — the CPU half of bench/results/lora.json (bench/lora/README.md).
# Usage: bench/lora/run.sh [MODEL]   (default: models/qwen2.5-coder-0.5b-instruct-Q4_K_M.gguf)
# Four runs of cinfer_lora_bench on f32 adapter files: kept in f16 (the loader's default),
# kept in f32 (CINFER_LORA_DTYPE=f32), bf16 files, all one thread timed by the process's CPU
# time (--clock cpu: on a shared machine wall times of one configuration vary 2-3x between
# repetitions), then the default with 2 threads on wall time (for reference). The top-level
# cpu fields are the default's CPU-time run; "f32_kept", "bf16" and "wall_t2" the others.
# Env: BIN (build dir, default build), STEPS (16), REPS (7), GPU_JSON (a device run's
# lora_gpu.json: becomes the "gpu" object; else the file's previous "gpu" is kept).
set -euo pipefail
cd "$(dirname "$0")/../.."
model=${1:-models/qwen2.5-coder-0.5b-instruct-Q4_K_M.gguf}
bin=${BIN:-build}
args=("$model" -n "${STEPS:-16}" --reps "${REPS:-7}")
unset CINFER_LORA_DTYPE
load0=$(cut -d' ' -f1-3 /proc/loadavg)
f16=$("$bin/cinfer_lora_bench" "${args[@]}" -t 1 --clock cpu --dtype f32)
load1=$(cut -d' ' -f1-3 /proc/loadavg)
f32=$(CINFER_LORA_DTYPE=f32 "$bin/cinfer_lora_bench" "${args[@]}" -t 1 --clock cpu --dtype f32)
load2=$(cut -d' ' -f1-3 /proc/loadavg)
bf16=$("$bin/cinfer_lora_bench" "${args[@]}" -t 1 --clock cpu --dtype bf16)
load3=$(cut -d' ' -f1-3 /proc/loadavg)
wall=$("$bin/cinfer_lora_bench" "${args[@]}" -t 2 --clock wall --dtype f32)
load4=$(cut -d' ' -f1-3 /proc/loadavg)
python3 - "$f16" "$f32" "$bf16" "$wall" "$load0|$load1|$load2|$load3|$load4" \
    "$(git rev-parse --short HEAD)" <<'PY'
import json, os, sys
keys = ("overhead_b1", "overhead_b8", "mixed_vs_single_at_8")
runs = [json.loads(a) for a in sys.argv[1:5]]
loads = sys.argv[5].split("|")
def part(i, threads):
    d = runs[i]
    o = {k: d[k] for k in keys}
    o.update(adapter_dtype=d["adapter_dtype"], store_dtype=d["store_dtype"], clock=d["clock"],
             threads=threads, tok_s_median=d["tok_s_median"], adapter_bytes=d["adapter_bytes"],
             load_avg_before=loads[i], load_avg_after=loads[i + 1])
    return o
cpu = part(0, 1)
cpu.update(model=os.path.basename(runs[0]["model"]), weight_bytes=runs[0]["weight_bytes"],
           rank=runs[0]["rank"], steps=runs[0]["steps"], reps=runs[0]["reps"], commit=sys.argv[6],
           f32_kept=part(1, 1), bf16=part(2, 1), wall_t2=part(3, 2))
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
