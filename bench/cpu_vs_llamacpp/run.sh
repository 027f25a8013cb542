#!/usr/bin/env bash
# run.sh — cinfer vs llama.cpp on the same GGUF files, same thread count, in one run.
#
# For each model: `cinfer bench` and run_llamacpp.py (llama-bench pp512/tg128 + the Python
# API for TTFT and peak RSS), then prints decode/prefill ratios and writes
# bench/results/cpu_vs_llamacpp.json. Not a test: run it on a quiet machine.
# Needs: build/cinfer, ./models (scripts/fetch_models.sh), llama.cpp (pip install
# llama-cpp-python; LLAMA_CPP_LIB_PATH may point at a build with llama-bench).
# Usage: bench/cpu_vs_llamacpp/run.sh [-t THREADS] [model-file ...]
set -euo pipefail
cd "$(dirname "$0")/../.."
threads=$(nproc)
if [ "${1:-}" = "-t" ]; then threads=$2; shift 2; fi
models=("$@")
if [ ${#models[@]} -eq 0 ]; then
    models=(models/qwen2.5-coder-0.5b-instruct-Q4_K_M.gguf models/qwen2.5-coder-1.5b-instruct-Q4_K_M.gguf
            models/gemma3-270m-Q4_K_M.gguf models/smollm2-135m-instruct-Q4_1.gguf)
fi
bin=${CINFER_BIN:-build/cinfer}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
i=0
for m in "${models[@]}"; do
    [ -f "$m" ] || { echo "missing $m (scripts/fetch_models.sh)" >&2; exit 1; }
    echo "== $m ($threads threads)" >&2
    # the decode/prefill figures are the best of 3 runs of each engine, interleaved
    for rep in 1 2 3; do
        "$bin" bench "$m" -t "$threads" -p 512 -n 128 --kv-dtype f16 --backend cpu > "$tmp/c$i-$rep.json"
    done
    python3 bench/cpu_vs_llamacpp/run_llamacpp.py "$m" --threads "$threads" --reps 3 \
        --out "$tmp/l$i.json" > /dev/null
    i=$((i + 1))
done
python3 - "$tmp" "$threads" "${models[@]}" <<'PY'
import json, os, platform, subprocess, sys
tmp, threads, models = sys.argv[1], int(sys.argv[2]), sys.argv[3:]
commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True).stdout.strip()
cpu = next((l.split(":", 1)[1].strip() for l in open("/proc/cpuinfo") if l.startswith("model name")), "?")
out = {"machine": {"cpu": cpu, "cores": os.cpu_count(), "threads": threads, "kernel": platform.release()},
       "commit": commit, "models": {}}
print(f"{'model':44} {'decode c/l tok/s':>20} {'ratio':>6} {'prefill c/l tok/s':>22} {'ratio':>6} {'TTFT c/l s':>14} {'RSS c/l MiB':>14}")
for i, m in enumerate(models):
    cs = [json.load(open(f"{tmp}/c{i}-{r}.json")) for r in (1, 2, 3)]
    c = dict(cs[0])
    c["decode_tok_s"] = max(x["decode_tok_s"] for x in cs)
    c["prefill_tok_s"] = max(x["prefill_tok_s"] for x in cs)
    c["ttft_s"] = min(x["ttft_s"] for x in cs)
    l = json.load(open(f"{tmp}/l{i}.json"))
    name = os.path.basename(m).removesuffix(".gguf")
    dr = c["decode_tok_s"] / l["decode_tok_s"]
    pr = c["prefill_tok_s"] / l["prefill_tok_s"]
    out["models"][name] = {"decode_ratio": round(dr, 3), "prefill_ratio": round(pr, 3),
                           "cinfer": c, "llamacpp": l}
    l_ttft = l.get("ttft_ms", 0) / 1000
    print(f"{name:44} {c['decode_tok_s']:9.1f}/{l['decode_tok_s']:<9.1f} {dr:6.2f} "
          f"{c['prefill_tok_s']:10.1f}/{l['prefill_tok_s']:<10.1f} {pr:6.2f} "
          f"{c['ttft_s']:6.2f}/{l_ttft:<6.2f} {c['peak_rss_bytes']/2**20:6.0f}/{l.get('peak_rss_mib', 0):<6.0f}")
os.makedirs("bench/results", exist_ok=True)
json.dump(out, open("bench/results/cpu_vs_llamacpp.json", "w"), indent=2)
print("wrote bench/results/cpu_vs_llamacpp.json")
PY
