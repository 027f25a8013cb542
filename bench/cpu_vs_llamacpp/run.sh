#!/usr/bin/env bash
# run.sh — cinfer vs llama.cpp on the same GGUF files, same thread count, in one run.
#
# For each model: `cinfer bench` and run_llamacpp.py (llama-bench pp512/tg128 + the Python
# API for TTFT and peak RSS), then prints decode/prefill ratios and writes
# bench/results/cpu_vs_llamacpp.json. For the models matching LONG_MODELS (default: the
# Qwen ones) also the long-context pair: prefill of an L-token prompt and decode of 32
# tokens after an L-token prompt (-l L, default 8192; llama-bench pp L and tg32 at depth L),
# fields decode_ratio_Nk / prefill_ratio_Nk. Engines alternate model by model, and the
# 1-minute load average is recorded beside every engine's run (the machine may be shared).
# Not a test.
# Needs: build/cinfer, ./models (scripts/fetch_models.sh), llama.cpp's llama-bench
# ($LLAMA_BENCH, PATH, or next to $LLAMA_CPP_LIB_PATH; see README.md here for building it
# from the llama-cpp-python sdist); llama-cpp-python for TTFT/RSS (without it: llama-bench
# only, RSS of the llama-bench process).
# Usage: bench/cpu_vs_llamacpp/run.sh [-t THREADS] [-l LONG] [model-file ...]
# Env: LONG_MODELS (grep -E pattern, "" = none), LONG_REPS (default 1), REPS (default 3),
# SKIP_SHORT=1 (long-context pair only), OUT_JSON (default bench/results/cpu_vs_llamacpp.json).
set -euo pipefail
cd "$(dirname "$0")/../.."
threads=$(nproc)
long=8192
while [ $# -gt 0 ]; do
    case "$1" in
    -t) threads=$2; shift 2 ;;
    -l) long=$2; shift 2 ;;
    *) break ;;
    esac
done
models=("$@")
if [ ${#models[@]} -eq 0 ]; then
    models=(models/qwen2.5-coder-0.5b-instruct-Q4_K_M.gguf models/qwen2.5-coder-1.5b-instruct-Q4_K_M.gguf
            models/gemma3-270m-Q4_K_M.gguf models/smollm2-135m-instruct-Q4_1.gguf)
fi
long_models=${LONG_MODELS-qwen}
long_reps=${LONG_REPS:-1}
reps=${REPS:-3}
skip_short=${SKIP_SHORT:-0}
out_json=${OUT_JSON:-bench/results/cpu_vs_llamacpp.json}
bin=${CINFER_BIN:-build/cinfer}
pyapi=()
python3 -c "import llama_cpp" 2>/dev/null || pyapi=(--no-python-api)
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
la() { cut -d' ' -f1 /proc/loadavg; }
i=0
for m in "${models[@]}"; do
    [ -f "$m" ] || { echo "missing $m (scripts/fetch_models.sh)" >&2; exit 1; }
    echo "== $m ($threads threads, load $(la))" >&2
    # the decode/prefill figures are the best of $reps runs of each engine
    if [ "$skip_short" != 1 ]; then
        la > "$tmp/la-c$i"
        for rep in $(seq 1 "$reps"); do
            "$bin" bench "$m" -t "$threads" -p 512 -n 128 --kv-dtype f16 --backend cpu > "$tmp/c$i-$rep.json"
        done
        la >> "$tmp/la-c$i"
        la > "$tmp/la-l$i"
        python3 bench/cpu_vs_llamacpp/run_llamacpp.py "$m" --threads "$threads" --reps "$reps" \
            "${pyapi[@]}" --out "$tmp/l$i.json" > /dev/null
        la >> "$tmp/la-l$i"
    fi
    if [ -n "$long_models" ] && echo "$m" | grep -qE "$long_models"; then
        echo "   long context $long (load $(la))" >&2
        la > "$tmp/la-cl$i"
        for rep in $(seq 1 "$long_reps"); do
            "$bin" bench "$m" -t "$threads" -p 8 -n 32 -d "$long" --kv-dtype f16 --backend cpu > "$tmp/cl$i-$rep.json"
        done
        la >> "$tmp/la-cl$i"
        la > "$tmp/la-ll$i"
        python3 bench/cpu_vs_llamacpp/run_llamacpp.py "$m" --threads "$threads" --reps 1 \
            --no-python-api --long "$long" --long-reps "$long_reps" --out "$tmp/ll$i.json" > /dev/null
        la >> "$tmp/la-ll$i"
    fi
    i=$((i + 1))
done
python3 - "$tmp" "$threads" "$long" "$reps" "$long_reps" "$out_json" "${models[@]}" <<'PY'
import glob, json, os, platform, subprocess, sys
tmp, threads, long_n, reps, long_reps, out_json, models = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4]), int(sys.argv[5]), sys.argv[6], sys.argv[7:]
tag = f"{long_n // 1024}k" if long_n % 1024 == 0 else str(long_n)
commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True).stdout.strip()
cpu = next((l.split(":", 1)[1].strip() for l in open("/proc/cpuinfo") if l.startswith("model name")), "?")
out = {"machine": {"cpu": cpu, "cores": os.cpu_count(), "threads": threads, "kernel": platform.release()},
       "commit": commit, "long_tokens": long_n, "models": {}}
def load(name):
    try:
        return [float(x) for x in open(f"{tmp}/{name}").read().split()]
    except OSError:
        return None
print(f"{'model':44} {'decode c/l tok/s':>20} {'ratio':>6} {'prefill c/l tok/s':>22} {'ratio':>6} {'RSS c/l MiB':>14}")
for i, m in enumerate(models):
    name = os.path.basename(m).removesuffix(".gguf")
    row, line = {}, f"{name:44}"
    if os.path.exists(f"{tmp}/l{i}.json"):
        cs = [json.load(open(f"{tmp}/c{i}-{r}.json")) for r in range(1, reps + 1)]
        c = dict(cs[0])
        c["decode_tok_s"] = max(x["decode_tok_s"] for x in cs)
        c["prefill_tok_s"] = max(x["prefill_tok_s"] for x in cs)
        c["ttft_s"] = min(x["ttft_s"] for x in cs)
        c["runs"] = cs
        c["loadavg_1min_before_after"] = load(f"la-c{i}")
        l = json.load(open(f"{tmp}/l{i}.json"))
        l["loadavg_1min_before_after_run"] = load(f"la-l{i}")
        dr = c["decode_tok_s"] / l["decode_tok_s"]
        pr = c["prefill_tok_s"] / l["prefill_tok_s"]
        row = {"decode_ratio": round(dr, 3), "prefill_ratio": round(pr, 3), "cinfer": c, "llamacpp": l}
        line += (f" {c['decode_tok_s']:9.1f}/{l['decode_tok_s']:<9.1f} {dr:6.2f} "
                 f"{c['prefill_tok_s']:10.1f}/{l['prefill_tok_s']:<10.1f} {pr:6.2f} "
                 f"{c['peak_rss_bytes']/2**20:6.0f}/{(l.get('peak_rss_mib') or 0):<6.0f}")
    if os.path.exists(f"{tmp}/ll{i}.json"):
        cl = [json.load(open(f)) for f in sorted(glob.glob(f"{tmp}/cl{i}-*.json"))]
        ll = json.load(open(f"{tmp}/ll{i}.json"))
        ll["loadavg_1min_before_after_run"] = load(f"la-ll{i}")
        cd = max(x["decode_tok_s"] for x in cl)
        cp = max(x["depth_prefill_tok_s"] for x in cl)
        row[f"decode_ratio_{tag}"] = round(cd / ll["decode_long_tok_s"], 3)
        row[f"prefill_ratio_{tag}"] = round(cp / ll["prefill_long_tok_s"], 3)
        row["long"] = {"cinfer": {"decode_tok_s": cd, "prefill_tok_s": cp, "runs": cl,
                                  "loadavg_1min_before_after": load(f"la-cl{i}")},
                       "llamacpp": ll}
        line += (f"\n{'':44} {tag}: decode {cd:.2f}/{ll['decode_long_tok_s']:.2f} = {cd / ll['decode_long_tok_s']:.2f}, "
                 f"prefill {cp:.1f}/{ll['prefill_long_tok_s']:.1f} = {cp / ll['prefill_long_tok_s']:.2f}")
    out["models"][name] = row
    print(line)
os.makedirs(os.path.dirname(out_json) or ".", exist_ok=True)
json.dump(out, open(out_json, "w"), indent=2)
print(f"wrote {out_json}")
PY
