#!/usr/bin/env bash
# device_lora.sh — issue 21's LoRA checks and benchmark on the GPU machine, in one call.
# Binaries are prebuilt on the CPU machine in build-gpu (-DCINFER_CUDA=ON) and carried in
# $BIN (default .gpubin): test_lora, cinfer_lora_bench, cinfer and the shared libraries they
# need (bench/gpu/README.md). Kernel variants (CINFER_CUDA_LORA): default = the two-launch
# shrink/expand (cuda_lora_sg.cu), fused = one launch per recorded call (cuda_lora_fu.cu),
# v1 = one kernel per projection (cuda_lora.cu). In the order that matters most if the call
# runs out of time (every step has its own timeout; ~5-6 min in all):
#   1. test_lora on CUDA (CINFER_LORA_BACKEND=cuda) with the default and the fused kernels:
#      adapters a, b, a+b vs the committed transformers + peft goldens on the
#      llama/qwen2/qwen3/gemma3 parity models (HF and GGUF bases, PEFT and GGUF adapters),
#      the mixed batch (4 sets + none) vs each row alone, malformed adapters, the registry;
#   2. cinfer_lora_bench --backend cuda on a random l1b model (bench/gpu/models.py; and l8b
#      with MODELS="l1b l8b") per variant in $VARIANTS (default: default, fused, fused_plain
#      = the fused kernel alone, without the norm chain across the delta and without the
#      act_mul folded into the gate/up call (CINFER_CUDA_LORA_CHAIN=0, CINFER_CUDA_LORA_ACT=0),
#      fused with bf16 adapters; e.g. add fused_nopre=CINFER_CUDA_LORA=fused:CINFER_CUDA_LORA_PRE=0,
#      or v1=CINFER_CUDA_LORA=v1) -> lora_bench_<model>_<variant>.json and lora_gpu.json (the
#      "gpu" object of bench/results/lora.json, every variant inside); each run first dumps
#      the logits of fixed steps (--dump), and lora_gpu.json's probe_rel_vs_default compares
#      every variant's with the default kernels' (the bf16 model runs the skinny kernels and
#      the norm chain, which test_lora's f32 models do not);
#   3. bench/lora/device_serve.py with $B/cinfer and the fused kernels: `cinfer serve
#      --backend cuda` mounts adapters with POST /v1/adapters, unmounts one while requests
#      run with it, outputs equal a server that mounted them at start-up -> serve_cuda.json;
#   4. test_lora with the fused kernel alone (CINFER_CUDA_LORA_CHAIN=0,
#      CINFER_CUDA_LORA_ACT=0), with graphs off, without the norm on the fly
#      (CINFER_CUDA_LORA_NORM=0) and without PDL (CINFER_CUDA_PDL=0) (TESTS2 overrides);
#   5. when there is time left (under LEFT seconds used, 270 by default) and ncu is there:
#      per-kernel durations of ~2 one-adapter batch-1 steps with the fused kernels
#      (PROFILE= skips; NCU_VARIANTS adds others);
#   6. with GOLDEN=1, the goldens regenerated with scripts/lora_reference.py (the device's
#      torch/transformers/peft) and compared with the committed ones.
# Session 8: fold4 (CINFER_CUDA_LORA_FOLD=4: fold 3's folds, with each shrink as its own
# launch just before its projection, which streams its weights meanwhile; no polling) must
# equal fold3 bit for bit (BITREF, default "fold4:fold3", printed as "bit-equal pairs"); e.g.
# VARIANTS="default fold3=CINFER_CUDA_LORA_FOLD=3 fold4=CINFER_CUDA_LORA_FOLD=4"; fold5
# (=5, measurements: the same shrink launch, the projection waiting for it before its loop)
# shows what the overlap is worth (BITREF="fold4:fold3 fold5:fold3"). fold6
# (CINFER_CUDA_LORA_FOLD=6: fold 4 with the gate/up, down and q/k/v shrinks run by the
# trailing blocks of the projection that writes their x, no launch of their own) must equal
# fold3 too (BITREF="fold4:fold3 fold6:fold3").
# Session 5 (the batch-1 overhead): the default variants are default (two launches a lora
# call), fold (CINFER_CUDA_LORA_FOLD=1: each lora call folded into the skinny projection
# kernel before it, cuda_lora_mm.cuh), fold2 (=2: also the act_mul and the norm chain across
# the o/down delta), fold3 (=3: also the rope + K/V store), fold and fold3 without PDL too; the probe then also says whether fold's logits
# equal the default's bit for bit (they must: the fold runs the same arithmetic; fold2
# differs by the chained norm's rounding) and whether row 0 of one_b8 equals one_b1 (batch
# invariance). PROFILE=1: per-kernel GPU time of one_b1 (default, fold, fold2, fold3) and none_b1
# (default) steps, with nsys (CUDA graph nodes traced) when the device has it, else ncu.
# Everything lands in $OUT.
B=$(cd "${BIN:-$PWD/.gpubin}" && pwd)
# the tree the tests read (tests/data/{lora,parity}, scripts/, bench/gpu/models.py): $B/src
# when the binaries folder carries one (a checkout without this branch), else the checkout
SRC=${SRC:-$PWD}
[ -d "$B/src/tests/data/lora" ] && SRC=$B/src
cd "$SRC" || exit 1
export LD_LIBRARY_PATH=$B:/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}
OUT=${OUT:-/tmp/out}
mkdir -p "$OUT"
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader 2>&1 | tee "$OUT/gpu.txt"
t0=$(date +%s)

# test_lora on CUDA under the settings in $TESTS (space-separated; a setting joins
# variables with ':'; log: test_lora_<setting>.log)
run_tests() {
    for v in ${TESTS:-default}; do
        t1=$(date +%s)
        tag=$(echo "$v" | sed -e 's/CINFER_CUDA_//g' -e 's/[=:]/_/g')
        log=$OUT/test_lora_$tag.log
        ev=$v; [ "$v" = default ] && ev=CINFER_X=1
        env ${ev//:/ } CINFER_LORA_BACKEND=${BACKEND:-cuda} CINFER_SRC=$SRC \
            timeout 150 "$B/test_lora" > "$log" 2>&1
        echo "test_lora (${BACKEND:-cuda}, $v) rc=$? ($(( $(date +%s) - t1 )) s) -> $(basename "$log")"
        grep -E "FAIL|failed|mixed batch|passed" "$log" | head -12
        grep -oE "max \|dlogit\| [0-9.e+-]+" "$log" | sort -g -k3 | tail -1
    done
}

TESTS=${TESTS1:-"default CINFER_CUDA_LORA_FOLD=1 CINFER_CUDA_LORA_FOLD=3"} run_tests

first=${MODELS:-l1b}; first=${first%% *}
t2=$(date +%s)
# (MDIR: a folder that already holds the models, e.g. for a dry run of this script on the
# CPU: BACKEND=cpu MDIR=tests/data/fixtures/stories260K MODELS=stories260K.gguf)
if [ -z "${MDIR:-}" ]; then
    MDIR=/tmp/m
    timeout 300 python3 bench/gpu/models.py bench /tmp/m ${MODELS:-l1b} > "$OUT/models.log" 2>&1
    echo "models rc=$? ($(( $(date +%s) - t2 )) s)"; tail -2 "$OUT/models.log"
fi
MDIR=$(cd "$MDIR" 2> /dev/null && pwd || echo "$MDIR")
# the bench per kernel variant on the same card (a variant: name=VAR=VAL[:VAR=VAL]; "bf16"
# in the name adds --dtype bf16)
VARIANTS=${VARIANTS:-"default fold=CINFER_CUDA_LORA_FOLD=1 fold2=CINFER_CUDA_LORA_FOLD=2 fold3=CINFER_CUDA_LORA_FOLD=3 fold_nopdl=CINFER_CUDA_LORA_FOLD=1:CINFER_CUDA_PDL=0 fold3_nopdl=CINFER_CUDA_LORA_FOLD=3:CINFER_CUDA_PDL=0"}
for m in ${MODELS:-l1b}; do
    for vv in $VARIANTS; do
        t3=$(date +%s)
        name=${vv%%=*}; ev=CINFER_X=1; [ "$name" != "$vv" ] && ev=${vv#*=}
        args=; case $name in *bf16*) args="--dtype bf16";; esac
        env ${ev//:/ } timeout 200 "$B/cinfer_lora_bench" "$MDIR/$m" \
            --backend ${BACKEND:-cuda} -n ${STEPS:-32} --reps ${REPS:-3} $args --dump "$OUT/probe_${m}_$name" \
            > "$OUT/lora_bench_${m}_$name.json" 2> "$OUT/lora_bench_${m}_$name.err"
        echo "lora_bench $m $name ($ev $args) rc=$? ($(( $(date +%s) - t3 )) s)"
        cat "$OUT/lora_bench_${m}_$name.json"; tail -2 "$OUT/lora_bench_${m}_$name.err"
    done
done
python3 - "$OUT" "$first" "$VARIANTS" "${BITREF:-fold4:fold3}" <<'PY'
import json, sys
out, m, variants = sys.argv[1], sys.argv[2], sys.argv[3].split()
bitref = [p.split(":") for p in sys.argv[4].split() if p.count(":") == 1]
keys = ("overhead_b1", "overhead_b8", "mixed_vs_single_at_8", "overhead_paths_b1",
        "tok_s_median", "adapter_dtype", "rank", "clock", "steps", "reps")
g = {"model": m, "device": open(f"{out}/gpu.txt").read().strip(), "variants": {}}
for vv in variants:
    name = vv.split("=", 1)[0]
    try:
        d = json.load(open(f"{out}/lora_bench_{m}_{name}.json"))
        g["variants"][name] = {k: d[k] for k in keys if k in d}
        g["variants"][name]["env"] = vv.split("=", 1)[1] if "=" in vv else ""
    except Exception as ex:
        g["variants"][name] = "missing: %s" % ex
ok = {k: v for k, v in g["variants"].items() if isinstance(v, dict) and "bf16" not in k}
if ok:  # the issue's three names at the top: the variant with the lowest overhead_b1
    best = min(ok, key=lambda k: ok[k]["overhead_b1"])
    g.update({k: ok[best][k] for k in ("overhead_b1", "overhead_b8", "mixed_vs_single_at_8")})
    g["kernel"] = best
# correctness of each variant on the bf16 model (test_lora's models are f32: the skinny
# kernels and the norm chain do not run there): the logits of fixed steps (--dump) against
# the default kernels', relative to the largest |logit|; "adapter_effect" = one adapter vs
# none with the default kernels (what a variant that dropped the delta would show)
import numpy as np
def probe(name, conf):
    try:
        return np.fromfile(f"{out}/probe_{m}_{name}_{conf}.f32", "<f4")
    except Exception:
        return None
ref = {c: probe("default", c) for c in ("none_b8", "paths_b8", "one_b1", "one_b8", "mixed_b8")}
def rel(a, b):
    return None if a is None or b is None or a.shape != b.shape else \
        float(np.abs(a - b).max() / max(np.abs(b).max(), 1e-30))
g["probe_rel_vs_default"] = {vv.split("=", 1)[0]: {c: rel(probe(vv.split("=", 1)[0], c), ref[c]) for c in ref}
                             for vv in variants if vv.split("=", 1)[0] != "default"}
g["probe_adapter_effect"] = rel(ref["one_b8"], ref["paths_b8"])
# bit for bit: each variant vs default (fold must be 0.0), and row 0 of one_b8 vs one_b1
def same(a, b):
    return None if a is None or b is None else bool(a.shape == b.shape and (a.view("<u4") == b.view("<u4")).all())
g["probe_bitequal_vs_default"] = {vv.split("=", 1)[0]: {c: same(probe(vv.split("=", 1)[0], c), ref[c]) for c in ref}
                                  for vv in variants if vv.split("=", 1)[0] != "default"}
# BITREF ("a:b ...", default fold4:fold3): variant a's logits equal b's bit for bit in every
# configuration (fold 4 runs fold 3's arithmetic; only where the shrink runs differs)
g["probe_bitequal_pairs"] = {f"{a}=={b}": {c: same(probe(a, c), probe(b, c)) for c in ref}
                             for a, b in bitref if probe(a, "one_b1") is not None}
if g["probe_bitequal_pairs"]:
    print("bit-equal pairs:", json.dumps(g["probe_bitequal_pairs"]))
def inv(name):
    a, b = probe(name, "one_b1"), probe(name, "one_b8")
    return None if a is None or b is None else same(a, b[:a.size])
g["probe_b1_eq_b8row0"] = {vv.split("=", 1)[0]: inv(vv.split("=", 1)[0]) for vv in variants}
print("bit-equal vs default:", json.dumps(g["probe_bitequal_vs_default"]))
print("one_b1 == one_b8 row 0:", json.dumps(g["probe_b1_eq_b8row0"]))
print("probe (max |logit diff| / max |logit| vs default):", json.dumps(g["probe_rel_vs_default"]),
      "adapter effect:", g["probe_adapter_effect"])
json.dump(g, open(f"{out}/lora_gpu.json", "w"), indent=1)
print(json.dumps({k: v for k, v in g.items() if k != "variants"}))
for k, v in g["variants"].items():
    print(k, v if isinstance(v, str) else {x: v.get(x) for x in keys[:4]})
PY

# mount / unmount while serving on CUDA (the engine thread loads and frees), vs start-up mounts
if [ -x "$B/cinfer" ] && [ "${SERVE:-1}" != 0 ]; then # (SERVE=0 skips it)
    t4=$(date +%s)
    env ${SERVE_ENV:-CINFER_CUDA_LORA_FOLD=3} CINFER_LIBS=$B/lib timeout 200 \
        python3 bench/lora/device_serve.py "$B/cinfer" ${BACKEND:-cuda} "$OUT/serve_cuda.json" \
        > "$OUT/serve_cuda.log" 2>&1
    echo "device_serve (${BACKEND:-cuda}) rc=$? ($(( $(date +%s) - t4 )) s)"; tail -c 1500 "$OUT/serve_cuda.log"
    cp /tmp/lora-device-serve-*.log "$OUT/" 2> /dev/null
fi

TESTS=${TESTS2:-"CINFER_CUDA_LORA_FOLD=3:CINFER_CUDA_GRAPHS=0 CINFER_CUDA_LORA_FOLD=3:CINFER_CUDA_PDL=0"} run_tests

# PROFILE=1: where a step's time goes (per-kernel GPU time of --only steps: a run is
# conf:variant). nsys traces every CUDA graph node; its kern_sum report (total ns, launches,
# name per kernel) over the 12 timed + 2 warm-up steps -> nsys_<conf>_<variant>.csv / .txt
if [ "${PROFILE:-}" = 1 ]; then
    NSYS=$(command -v nsys || ls /usr/local/cuda/bin/nsys /opt/nvidia/nsight-systems/*/bin/nsys 2> /dev/null | head -1)
    for run in ${PROF_RUNS:-one_b1:default one_b1:fold=CINFER_CUDA_LORA_FOLD=1 one_b1:fold2=CINFER_CUDA_LORA_FOLD=2 one_b1:fold3=CINFER_CUDA_LORA_FOLD=3 none_b1:default}; do
        conf=${run%%:*}; v=${run#*:}
        name=${v%%=*}; ev=CINFER_X=1; [ "$name" != "$v" ] && ev=${v#*=}
        for conf in $conf; do
            t5=$(date +%s)
            if [ -n "$NSYS" ]; then
                rm -f "$OUT/nsys_${conf}_$name.nsys-rep" "$OUT/nsys_${conf}_$name.sqlite"
                env ${ev//:/ } timeout 120 "$NSYS" profile --cuda-graph-trace=node -t cuda \
                    -o "$OUT/nsys_${conf}_$name" "$B/cinfer_lora_bench" "$MDIR/${first:-l1b}" \
                    --backend cuda --only $conf -n 12 > "$OUT/nsys_${conf}_$name.log" 2>&1
                echo "nsys $conf $name rc=$? ($(( $(date +%s) - t5 )) s)"
                timeout 90 "$NSYS" stats -q -r cuda_gpu_kern_sum -f csv \
                    "$OUT/nsys_${conf}_$name.nsys-rep" > "$OUT/nsys_${conf}_$name.csv" 2>> "$OUT/nsys_${conf}_$name.log"
                python3 - "$OUT/nsys_${conf}_$name.csv" <<'PY' | tee "$OUT/nsys_${conf}_$name.txt"
import csv, sys
rows = list(csv.reader(l for l in open(sys.argv[1]) if l.count(",") > 3))
if not rows:
    print("no kernel rows"); sys.exit(0)
h = rows[0]
ix = {k: h.index(k) for k in ("Total Time (ns)", "Instances", "Avg (ns)", "Name") if k in h}
tot = sum(float(r[ix["Total Time (ns)"]]) for r in rows[1:])
print("total kernel time %.1f us over all steps (14 steps: 2 warm-up + 12)" % (tot / 1e3))
for r in rows[1:26]:
    print("%9.1f us %6s x  avg %7.2f us  %s" % (float(r[ix["Total Time (ns)"]]) / 1e3, r[ix["Instances"]],
          float(r[ix["Avg (ns)"]]) / 1e3, r[ix["Name"]][:90]))
PY
                rm -f "$OUT/nsys_${conf}_$name.sqlite"
                [ -n "${KEEP_REP:-}" ] || rm -f "$OUT/nsys_${conf}_$name.nsys-rep" # (KEEP_REP=1 keeps it)
            elif command -v ncu > /dev/null; then
                env ${ev//:/ } timeout ${NCU_T:-90} ncu --clock-control none --launch-skip ${SKIP:-1200} \
                    --launch-count ${CNT:-500} --metrics gpu__time_duration.sum \
                    --csv "$B/cinfer_lora_bench" "$MDIR/${first:-l1b}" --backend cuda --only $conf -n 12 \
                    > "$OUT/ncu_${conf}_$name.csv" 2> /dev/null
                echo "ncu $conf $name rc=$?"
                python3 bench/gpu/ncu_sum.py "$OUT/ncu_${conf}_$name.csv" > "$OUT/ncu_${conf}_$name.txt" 2>&1
                head -24 "$OUT/ncu_${conf}_$name.txt"
            else
                echo "neither nsys nor ncu here: no profile"
            fi
        done
    done
fi

# where a step's time goes with one adapter at batch 1: ncu's per-kernel durations of a few
# steps (graphs on: ncu times each kernel node), new kernels and v1
if [ "${PROFILE:-}" = ncu ] && command -v ncu > /dev/null; then
    for v in ${NCU_VARIANTS:-CINFER_CUDA_LORA=fused}; do
        sfx=_$(echo "$v" | sed -e 's/CINFER_CUDA_//g' -e 's/[=:]/_/g')
        # 2 warm-up steps + 12 timed ones of ~300-400 kernels each: skip into the 4th step,
        # then ~2 steps (ncu_sum's counts per kernel say how many launches a step has)
        env ${v//:/ } timeout ${NCU_T:-90} ncu --clock-control none --launch-skip ${SKIP:-1200} \
            --launch-count ${CNT:-500} --metrics gpu__time_duration.sum \
            --csv "$B/cinfer_lora_bench" "$MDIR/${first:-l1b}" --backend cuda --only one_b1 -n 12 \
            > "$OUT/ncu_one_b1$sfx.csv" 2> /dev/null
        echo "ncu one_b1 $v rc=$?"
        python3 bench/gpu/ncu_sum.py "$OUT/ncu_one_b1$sfx.csv" > "$OUT/ncu_one_b1$sfx.txt" 2>&1
        head -16 "$OUT/ncu_one_b1$sfx.txt"
    done
fi

t1=$(date +%s)
if [ -z "${GOLDEN:-}" ]; then
    echo "goldens not regenerated (GOLDEN=1 does; the 2026-12-06 05:58 run matched them)"
elif python3 -c "import peft" 2> /dev/null; then
    timeout 300 python3 scripts/lora_reference.py --out "$OUT/golden" > "$OUT/golden.log" 2>&1
    echo "lora_reference.py rc=$? ($(( $(date +%s) - t1 )) s)"
    python3 - "$OUT" <<'PY' | tee "$OUT/golden_cmp.json"
import base64, json, sys, os
import numpy as np
out = sys.argv[1]
res = {}
for arch in ["llama", "qwen2", "qwen3", "gemma3"]:
    a = json.load(open(f"tests/data/lora/{arch}/golden.json"))
    p = f"{out}/golden/{arch}/golden.json"
    if not os.path.exists(p):
        res[arch] = "missing"
        continue
    b = json.load(open(p))
    for c in a["cases"]:
        x = np.frombuffer(base64.b64decode(a["cases"][c]["logits"]["data"]), "<f4")
        y = np.frombuffer(base64.b64decode(b["cases"][c]["logits"]["data"]), "<f4")
        res[f"{arch}/{c}"] = dict(max_abs=float(np.abs(x - y).max()) if x.shape == y.shape else None,
                                  ids_equal=a["cases"][c]["greedy_ids"] == b["cases"][c]["greedy_ids"])
print(json.dumps(res, indent=1))
PY
else
    echo "peft is not installed here: goldens not regenerated"
fi

echo "total $(( $(date +%s) - t0 )) s"
