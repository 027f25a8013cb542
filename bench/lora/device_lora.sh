#!/usr/bin/env bash
# device_lora.sh — issue 21's LoRA checks and benchmark on the GPU machine, in one call.
# Binaries are prebuilt on the CPU machine in build-gpu (-DCINFER_CUDA=ON) and carried in
# $BIN (default .gpubin): test_lora, cinfer_lora_bench and the shared libraries they need
# (binaries built on a CPU machine with nvcc and carried; bench/gpu/README.md). In the
# order that matters most if the call runs out of time:
#   1. test_lora on CUDA (CINFER_LORA_BACKEND=cuda) with the default kernels (cuda_lora_sg.cu:
#      shrink/expand, q/k/v and gate/up merged into one recorded call): adapters a, b, a+b
#      vs the committed transformers + peft goldens on the llama/qwen2/qwen3/gemma3 parity
#      models (HF and GGUF bases, PEFT and GGUF adapters), the mixed batch (4 sets + none)
#      vs each row alone, malformed adapters, the registry;
#   2. cinfer_lora_bench --backend cuda on a random l1b model (bench/gpu/models.py; and l8b
#      with MODELS="l1b l8b"): the default kernels with f32 adapters, the previous kernel
#      (CINFER_CUDA_LORA=v1) in the same call, then bf16 adapters -> lora_gpu.json (the "gpu"
#      object of bench/results/lora.json);
#   3. bench/lora/device_serve.py with $B/cinfer (when carried): `cinfer serve --backend cuda`
#      mounts adapters with POST /v1/adapters (on the engine thread), unmounts one while
#      requests run with it, and its outputs equal a server that mounted them at start-up
#      -> serve_cuda.json;
#   4. test_lora again without the norm on the fly (CINFER_CUDA_LORA_NORM=0: rmsnorm into a
#      buffer, then the deltas), with graphs off (no merging), with every call split into
#      one-row slices (CINFER_CUDA_LORA_PART_MAX=1) and with v1;
#   5. ncu's per-kernel durations of ~1.5 one-adapter batch-1 steps (PROFILE= skips;
#      NCU_VARIANTS="default CINFER_CUDA_LORA=v1" adds the old kernel);
#   6. with GOLDEN=1, the goldens regenerated with scripts/lora_reference.py (the device's
#      torch/transformers/peft) and compared with the committed ones.
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
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader | tee "$OUT/gpu.txt"
t0=$(date +%s)

# test_lora on CUDA under the settings in $TESTS (log: test_lora[_SETTING].log)
run_tests() {
    for v in ${TESTS:-default}; do
        t1=$(date +%s)
        log=$OUT/test_lora${v/default/}.log; log=${log/CINFER_CUDA_/_}; log=${log/=/_}
        env ${v/default/CINFER_LORA_BACKEND=cuda} CINFER_LORA_BACKEND=cuda CINFER_SRC=$SRC \
            timeout 150 "$B/test_lora" > "$log" 2>&1
        echo "test_lora (cuda, $v) rc=$? ($(( $(date +%s) - t1 )) s) -> $(basename "$log")"
        grep -E "FAIL|failed|mixed batch|passed" "$log" | head -12
        grep -oE "max \|dlogit\| [0-9.e+-]+" "$log" | sort -g -k3 | tail -1
    done
}

TESTS=default run_tests

first=${MODELS:-l1b}; first=${first%% *}
t2=$(date +%s)
timeout 300 python3 bench/gpu/models.py bench /tmp/m ${MODELS:-l1b} > "$OUT/models.log" 2>&1
echo "models rc=$? ($(( $(date +%s) - t2 )) s)"; tail -2 "$OUT/models.log"
# the bench: the default kernels (f32 adapters, then bf16), and the previous kernel (v1) in
# the same call on the same card, for the before/after ratio
for m in ${MODELS:-l1b}; do
    for v in default CINFER_CUDA_LORA=v1 bf16; do
        t3=$(date +%s)
        sfx=; args=; ev=CINFER_X=
        [ "$v" = bf16 ] && sfx=_bf16 args="--dtype bf16"
        [ "$v" = CINFER_CUDA_LORA=v1 ] && sfx=_v1 ev=$v
        env $ev timeout 240 "$B/cinfer_lora_bench" /tmp/m/$m \
            --backend cuda -n ${STEPS:-64} --reps ${REPS:-5} $args \
            > "$OUT/lora_bench_$m$sfx.json" 2> "$OUT/lora_bench_$m$sfx.err"
        echo "lora_bench $m $v rc=$? ($(( $(date +%s) - t3 )) s)"
        cat "$OUT/lora_bench_$m$sfx.json"; tail -2 "$OUT/lora_bench_$m$sfx.err"
    done
done
python3 - "$OUT" "$first" <<'PY'
import json, sys
out, m = sys.argv[1], sys.argv[2]
try:
    d = json.load(open(f"{out}/lora_bench_{m}.json"))
    g = {k: d[k] for k in ("overhead_b1", "overhead_b8", "mixed_vs_single_at_8")}
    g.update(model=m, device=open(f"{out}/gpu.txt").read().strip(), tok_s_median=d["tok_s_median"],
             rank=d["rank"], adapter_dtype=d["adapter_dtype"], clock=d["clock"],
             steps=d["steps"], reps=d["reps"], kernel="shrink/expand (cuda_lora_sg.cu)")
    if "overhead_paths_b1" in d:
        g["overhead_paths_b1"] = d["overhead_paths_b1"]
    for sfx, key in (("_bf16", "bf16"), ("_v1", "v1_same_run")):
        try:
            e = json.load(open(f"{out}/lora_bench_{m}{sfx}.json"))
            g[key] = {k: e[k] for k in ("overhead_b1", "overhead_b8", "mixed_vs_single_at_8",
                                        "tok_s_median", "adapter_dtype")}
        except Exception as ex:
            g[key] = "missing: %s" % ex
    json.dump(g, open(f"{out}/lora_gpu.json", "w"), indent=1)
    print(json.dumps(g))
except Exception as e:
    print("no GPU bench result:", e)
PY

# mount / unmount while serving on CUDA (the engine thread loads and frees), vs start-up mounts
if [ -x "$B/cinfer" ]; then
    t4=$(date +%s)
    CINFER_LIBS=$B/lib timeout 240 python3 bench/lora/device_serve.py "$B/cinfer" cuda "$OUT/serve_cuda.json" \
        > "$OUT/serve_cuda.log" 2>&1
    echo "device_serve (cuda) rc=$? ($(( $(date +%s) - t4 )) s)"; tail -c 1500 "$OUT/serve_cuda.log"
    cp /tmp/lora-device-serve-*.log "$OUT/" 2> /dev/null
fi

TESTS="CINFER_CUDA_LORA_NORM=0 CINFER_CUDA_GRAPHS=0 CINFER_CUDA_LORA_PART_MAX=1 CINFER_CUDA_LORA=v1" run_tests

# where a step's time goes with one adapter at batch 1: ncu's per-kernel durations of a few
# steps (graphs on: ncu times each kernel node), new kernels and v1
if [ -n "${PROFILE-1}" ] && command -v ncu > /dev/null; then
    for v in ${NCU_VARIANTS:-default}; do
        sfx=; [ "$v" != default ] && sfx=_v1
        # 2 warm-up steps + 12 timed ones of ~300-400 kernels each: skip into the 4th step,
        # then ~2 steps (ncu_sum's counts per kernel say how many launches a step has)
        env ${v/default/CINFER_X=} timeout ${NCU_T:-120} ncu --clock-control none --launch-skip ${SKIP:-1200} \
            --launch-count ${CNT:-500} --metrics gpu__time_duration.sum \
            --csv "$B/cinfer_lora_bench" /tmp/m/${first:-l1b} --backend cuda --only one_b1 -n 12 \
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
