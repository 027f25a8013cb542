#!/usr/bin/env bash
# run.sh — the grammar benchmark (not a test): compile time and per-token mask time (thread
# CPU time, µs) of cinfer, llguidance and xgrammar on the same inputs, vocabulary (Qwen2.5,
# 151k ids) and token ids, in one run; decode tok/s with and without a schema at batch 1 and 8
# on the CPU. Writes bench/results/grammar.json.
# usage: bench/grammar/run.sh [BUILD_DIR]
# pip: llguidance; xgrammar with `pip install --no-deps xgrammar apache-tvm-ffi` (it imports
# torch and transformers, which must be there already).
set -eu
SRC=$(cd "$(dirname "$0")/../.." && pwd)
BUILD=${1:-$SRC/build}
MODEL=${CINFER_MODELS:-$SRC/models}/qwen2.5-coder-0.5b-instruct-Q4_K_M.gguf
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
cc -O2 -std=c17 -D_GNU_SOURCE -I"$SRC/src" "$SRC/bench/grammar/bench_grammar.c" "$BUILD/libcinfer_core.a" \
   $(pkg-config --libs jansson libpcre2-8 libutf8proc) -lz -lm -lpthread -o "$tmp/bench_grammar"
python3 "$SRC/bench/grammar/inputs.py" "$tmp/inputs.json"
load0=$(cut -d' ' -f1 /proc/loadavg)
BENCH_DUMP_MASKS="$tmp/masks.txt" "$tmp/bench_grammar" "$MODEL" "$tmp/inputs.json" "$tmp"
python3 "$SRC/bench/grammar/bench_llg.py" "$tmp/inputs.json" "$tmp" || echo '{"inputs": []}' > "$tmp/llguidance.json"
python3 "$SRC/bench/grammar/bench_xgr.py" "$tmp/inputs.json" "$tmp" 2>/dev/null || echo '{"inputs": []}' > "$tmp/xgrammar.json"
# the masks of the regexes and the EBNF grammar against xgrammar's, step by step
(cd "$SRC/bench/grammar" && python3 xgr_check.py "$tmp/inputs.json" "$tmp" > "$tmp/xgr_check.json") ||
    [ -s "$tmp/xgr_check.json" ] || echo '{"masks_differ": null, "inputs": []}' > "$tmp/xgr_check.json"
load1=$(cut -d' ' -f1 /proc/loadavg)
python3 "$SRC/bench/grammar/decode.py" "$BUILD/cinfer" "$MODEL" > "$tmp/decode.json"
load2=$(cut -d' ' -f1 /proc/loadavg)
python3 - "$tmp" "$SRC" "$load0" "$load1" "$load2" <<'PY'
import json, sys, subprocess
tmp, src, l0, l1, l2 = sys.argv[1:]
a = json.load(open(f"{tmp}/cinfer.json")); b = json.load(open(f"{tmp}/llguidance.json"))
x = json.load(open(f"{tmp}/xgrammar.json"))
dec = json.load(open(f"{tmp}/decode.json"))
chk = json.load(open(f"{tmp}/xgr_check.json"))
bb = {r["name"]: r for r in b["inputs"]}
xx = {r["name"]: r for r in x["inputs"]}
def stats(v):
    v = sorted(v); return sum(v) / len(v), v[min(len(v) - 1, int(len(v) * 0.99))]
def good(r):
    return "mask_us" in r and r.get("ok")
# the steps all three engines ran (each input cut to the shortest run of the three)
rows, ca, la, xa, cc, lc, xc = [], [], [], [], [], [], []
for r in a["inputs"]:
    q, w = bb.get(r["name"], {}), xx.get(r["name"], {})
    if not good(r) or not good(q) or not good(w):
        continue
    n = min(len(r["mask_us"]), len(q["mask_us"]), len(w["mask_us"]))
    ca += r["mask_us"][:n]; la += q["mask_us"][:n]; xa += w["mask_us"][:n]
    cc.append(r["compile_us"]); lc.append(q["compile_us"]); xc.append(w["compile_us"])
    rows.append({"name": r["name"], "kind": r["kind"], "steps": n, "cinfer_mask_us_mean": stats(r["mask_us"][:n])[0],
                 "llguidance_mask_us_mean": stats(q["mask_us"][:n])[0],
                 "xgrammar_mask_us_mean": stats(w["mask_us"][:n])[0], "cinfer_compile_us": r["compile_us"],
                 "llguidance_compile_us": q["compile_us"], "xgrammar_compile_us": w["compile_us"]})
cm, cp = stats(ca); lm, lp = stats(la); xm, xp = stats(xa)
corpus = json.load(open(f"{src}/tests/data/structured/corpus.json"))["cases"]
out = subprocess.run([f"{src}/build/test_grammar"], capture_output=True, text=True,
                     env={"CINFER_SRC": src, "CINFER_TEST_ONLY": "corpus"}).stdout
out2 = subprocess.run([f"{src}/build/test_grammar"], capture_output=True, text=True,
                      env={"CINFER_SRC": src, "CINFER_TEST_ONLY": "jsonschemabench"}).stdout
import re
cov = int(re.search(r"corpus: (\d+)/(\d+)", out).group(1)) / len(corpus)
m = re.search(r"jsonschemabench: (\d+)/(\d+)", out2)
res = {
    "mask_us_mean": round(cm, 1), "mask_us_p99": round(cp, 1),
    "mask_vs_xgrammar": round(cm / xm, 2), "mask_p99_vs_xgrammar": round(cp / xp, 2),
    "xgrammar_mask_us_mean": round(xm, 1), "xgrammar_mask_us_p99": round(xp, 1),
    "xgrammar_compile_us_mean": round(sum(xc) / len(xc), 1),
    "mask_vs_llguidance": round(cm / lm, 2), "mask_p99_vs_llguidance": round(cp / lp, 2),
    "llguidance_mask_us_mean": round(lm, 1), "llguidance_mask_us_p99": round(lp, 1),
    "compile_us_mean": round(sum(cc) / len(cc), 1), "llguidance_compile_us_mean": round(sum(lc) / len(lc), 1),
    "schema_coverage": round(cov, 4),
    "jsonschemabench_coverage": round(int(m.group(1)) / int(m.group(2)), 4),
    # the grammar's extra work per generated token: server CPU time (every thread), batch 1
    # and 8, the larger; wall-clock tok/s (best of the reps) beside it
    "decode_overhead_frac": max(dec["batch1"]["cpu_overhead_frac"], dec["batch8"]["cpu_overhead_frac"]),
    "decode_overhead_frac_wall": max(dec["batch1"]["overhead_frac"], dec["batch8"]["overhead_frac"]),
    "decode": dec, "steps": len(ca), "inputs": len(rows),
    "xgrammar_version": x.get("version", ""),
    "xgrammar_mask_check": {"masks": sum(r.get("steps", 0) for r in chk["inputs"]),
                            "masks_differ": chk["masks_differ"], "inputs": [r["name"] for r in chk["inputs"]]},
    "llguidance_version": b.get("version", ""),
    "inputs_skipped": [r["name"] for r in a["inputs"] if r["name"] not in {q["name"] for q in rows}],
    "timing": "thread CPU time per mask call; decode: server CPU time per token and wall-clock tok/s, one server",
    "load_avg_1min": {"before_masks": float(l0), "after_masks": float(l1), "after_decode": float(l2)},
    "per_input": rows,
}
json.dump(res, open(f"{src}/bench/results/grammar.json", "w"), indent=1)
print(json.dumps({k: v for k, v in res.items() if k != "per_input"}, indent=1))
PY
