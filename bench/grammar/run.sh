#!/usr/bin/env bash
# run.sh — the grammar benchmark (not a test): compile time and per-token mask time (thread
# CPU time, µs) of cinfer and llguidance on the same inputs, vocabulary (Qwen2.5, 151k ids)
# and token ids, in one run; decode tok/s with and without a schema at batch 1 and 8 on the
# CPU. Writes bench/results/grammar.json. xgrammar is a peer where it installs (it needs
# torch); it is reported as null otherwise.
# usage: bench/grammar/run.sh [BUILD_DIR]   (pip: llguidance)
set -eu
SRC=$(cd "$(dirname "$0")/../.." && pwd)
BUILD=${1:-$SRC/build}
MODEL=${CINFER_MODELS:-$SRC/models}/qwen2.5-coder-0.5b-instruct-Q4_K_M.gguf
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
cc -O2 -std=c17 -D_GNU_SOURCE -I"$SRC/src" "$SRC/bench/grammar/bench_grammar.c" "$BUILD/libcinfer_core.a" \
   $(pkg-config --libs jansson libpcre2-8 libutf8proc) -lz -lm -lpthread -o "$tmp/bench_grammar"
python3 "$SRC/bench/grammar/inputs.py" "$tmp/inputs.json"
load0=$(cut -d' ' -f1 /proc/loadavg)
"$tmp/bench_grammar" "$MODEL" "$tmp/inputs.json" "$tmp"
python3 "$SRC/bench/grammar/bench_llg.py" "$tmp/inputs.json" "$tmp" || echo '{"inputs": []}' > "$tmp/llguidance.json"
python3 "$SRC/bench/grammar/bench_xgr.py" "$tmp/inputs.json" "$tmp" 2>/dev/null || echo '{"inputs": []}' > "$tmp/xgrammar.json"
load1=$(cut -d' ' -f1 /proc/loadavg)
python3 "$SRC/bench/grammar/decode.py" "$BUILD/cinfer" "$MODEL" > "$tmp/decode.json"
load2=$(cut -d' ' -f1 /proc/loadavg)
python3 - "$tmp" "$SRC" "$load0" "$load1" "$load2" <<'PY'
import json, sys, subprocess
tmp, src, l0, l1, l2 = sys.argv[1:]
a = json.load(open(f"{tmp}/cinfer.json")); b = json.load(open(f"{tmp}/llguidance.json"))
dec = json.load(open(f"{tmp}/decode.json"))
bb = {r["name"]: r for r in b["inputs"]}
def stats(v):
    v = sorted(v); return sum(v) / len(v), v[min(len(v) - 1, int(len(v) * 0.99))]
rows, ca, la, cc, lc = [], [], [], [], []
for r in a["inputs"]:
    q = bb.get(r["name"], {})
    if "mask_us" not in r or not r.get("ok") or "mask_us" not in q or not q.get("ok"):
        continue
    n = min(len(r["mask_us"]), len(q["mask_us"]))
    ca += r["mask_us"][:n]; la += q["mask_us"][:n]; cc.append(r["compile_us"]); lc.append(q["compile_us"])
    rows.append({"name": r["name"], "kind": r["kind"], "steps": n, "cinfer_mask_us_mean": stats(r["mask_us"][:n])[0],
                 "llguidance_mask_us_mean": stats(q["mask_us"][:n])[0], "cinfer_compile_us": r["compile_us"],
                 "llguidance_compile_us": q["compile_us"]})
cm, cp = stats(ca); lm, lp = stats(la)
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
    "mask_vs_xgrammar": None,
    "mask_vs_llguidance": round(cm / lm, 2), "mask_p99_vs_llguidance": round(cp / lp, 2),
    "llguidance_mask_us_mean": round(lm, 1), "llguidance_mask_us_p99": round(lp, 1),
    "compile_us_mean": round(sum(cc) / len(cc), 1), "llguidance_compile_us_mean": round(sum(lc) / len(lc), 1),
    "schema_coverage": round(cov, 4),
    "jsonschemabench_coverage": round(int(m.group(1)) / int(m.group(2)), 4),
    "decode_overhead_frac": max(dec["batch1"]["overhead_frac"], dec["batch8"]["overhead_frac"]),
    "decode": dec, "steps": len(ca), "inputs": len(rows),
    "xgrammar": "not installed: its wheel pulls torch with CUDA (GBs) on this CPU machine",
    "llguidance_version": b.get("version", ""),
    "timing": "thread CPU time per mask call; decode: wall clock, one server",
    "load_avg_1min": {"before_masks": float(l0), "after_masks": float(l1), "after_decode": float(l2)},
    "per_input": rows,
}
json.dump(res, open(f"{src}/bench/results/grammar.json", "w"), indent=1)
print(json.dumps({k: v for k, v in res.items() if k != "per_input"}, indent=1))
PY
