#!/usr/bin/env bash
# device_kvq.sh — issue 19's CUDA part (quantized KV blocks read by the CUDA attention,
# src/backend/cuda/cuda_kvq.cu) in one device call. Binaries are built on the CPU machine
# with the CUDA backend and carried in $BIN (test_kvq_cuda, test_engine_kvq, cinfer, cinfer_kvq_bench, lib/):
#  1. test_kvq_cuda (twice over: default kernels, then CINFER_KVQ_DEC=1): the GPU's quantized store equals kvq_store_row byte for byte, and the
#     GPU attention over quantized blocks equals the CPU kernel's within 1e-4 of the output
#     scale (every format; decode / verify / prefill steps; several geometries);
#  2. test_engine_kvq with CINFER_TEST_BACKEND=cuda: stories260K through the engine on the
#     GPU under 8, 4, turbo:k8v4, turbo and a config file (batched == solo, prefix hit ==
#     cold, preemption, the SSD tier keeps schemes apart);
#  3. a server smoke: `cinfer serve --backend cuda --kv-quant turbo` on stories260K starts
#     (it was refused before), /stats.kv_quant, one greedy completion beside the CPU's;
#  4. cinfer_kvq_bench --backend cuda on random-weight l1b and l8b (bench/gpu/models.py):
#     bytes per token and decode tok/s at 4k / 16k / 32k context per scheme vs f16 KV
#     (decode_ratio_N = f16 time / scheme time); also with CINFER_ATTN_DEC=0 for f16 (the
#     general kernel the quantized path is built like), to separate kernel from bytes; and
#     the schemes again with CINFER_KVQ_DEC=1 (cuda_kvq.cu's decode-step kernel).
# Everything lands in $OUT: gpu.txt, test_kvq_cuda.log, test_engine_kvq.log, serve.log,
# bench_<model>.json (+ .err), kv_quant_gpu_<model>.json (the "gpu" half), summary.txt.
# Usage (repo root on the device):  BIN=.gpubin bash .gpubin/src/bench/kv_quant/device_kvq.sh
# PARTS (default "test engine serve bench"), MODELS (default "l1b l8b"), GENERAL_MODELS (the
# models also run with CINFER_ATTN_DEC=0; default l1b), CTX (default 4096,16384,32768), REPS
# (default 3), STEPS (default 16), MODELS_DIR (default /tmp/m: models made once stay there
# while the machine is warm). BACKEND=cpu dry-runs the script without a GPU.
set -u
BE=${BACKEND:-cuda} # BACKEND=cpu: a dry run of the script on a machine without a GPU
PARTS=" ${PARTS:-test engine serve bench} "
want() { case "$PARTS" in *" $1 "*) return 0 ;; esac; return 1; }
B=$(cd "${BIN:-.gpubin}" && pwd)
SRC=$B/src
[ -d "$SRC" ] || SRC=$PWD
# the carried shared libraries ($B/lib) only for our binaries, never for python (torch)
LDP=$B/lib:$B:/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}
bin() { LD_LIBRARY_PATH=$LDP "$@"; }
OUT=${OUT:-/tmp/out}
mkdir -p "$OUT"
S="$OUT/summary.txt"
(nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader 2>&1 || true) | tee "$OUT/gpu.txt"
t0=$(date +%s)

if want test; then
    CINFER_TEST_BACKEND=$BE CINFER_FIXTURES=$B/fixtures bin timeout ${TEST_TIMEOUT:-240} "$B/test_kvq_cuda" > "$OUT/test_kvq_cuda.log" 2>&1
    echo "test_kvq_cuda rc=$? ($(( $(date +%s) - t0 )) s)" | tee -a "$S"
    grep -E "FAIL|passed|SKIP" "$OUT/test_kvq_cuda.log" | head -30 | tee -a "$S"
    awk '/max err/ {print $NF, $0}' "$OUT/test_kvq_cuda.log" | sort -g | tail -3 | cut -d' ' -f2- | tee -a "$S"
fi

if want engine; then
    t1=$(date +%s)
    CINFER_TEST_BACKEND=$BE CINFER_FIXTURES=$B/fixtures CINFER_SRC=$SRC \
        bin timeout ${ENGINE_TIMEOUT:-300} "$B/test_engine_kvq" > "$OUT/test_engine_kvq.log" 2>&1
    echo "test_engine_kvq ($BE) rc=$? ($(( $(date +%s) - t1 )) s)" | tee -a "$S"
    grep -E "FAIL|passed|SKIP" "$OUT/test_engine_kvq.log" | head -30 | tee -a "$S"
fi

if want serve; then
    t2=$(date +%s)
    M=$B/fixtures/stories260K/stories260K.gguf
    for be in $BE cpu; do
        port=$(( 18190 + RANDOM % 500 ))
        LD_LIBRARY_PATH=$LDP "$B/cinfer" serve "$M" --backend $be --kv-quant turbo --port $port > "$OUT/serve_$be.log" 2>&1 &
        pid=$!
        ok=0
        for i in $(seq 1 120); do
            if curl -sf "http://127.0.0.1:$port/health" > /dev/null 2>&1; then ok=1; break; fi
            kill -0 $pid 2> /dev/null || break
            sleep 0.5
        done
        echo "serve --backend $be --kv-quant turbo: up=$ok" | tee -a "$S"
        if [ $ok = 1 ]; then
            curl -s "http://127.0.0.1:$port/stats" | python3 -c \
                "import json,sys; d=json.load(sys.stdin); print(json.dumps(d.get('kv_quant')))" | tee -a "$S"
            curl -s "http://127.0.0.1:$port/v1/completions" -H 'Content-Type: application/json' \
                -d '{"prompt": "Once upon a time, there was a little", "max_tokens": 48, "temperature": 0}' \
                | python3 -c "import json,sys; d=json.load(sys.stdin); print(repr(d['choices'][0]['text']))" \
                | tee "$OUT/serve_text_$be.txt" | sed "s/^/  $be text: /" | tee -a "$S"
        fi
        kill $pid 2> /dev/null; wait $pid 2> /dev/null
        tail -3 "$OUT/serve_$be.log"
    done
    cmp -s "$OUT/serve_text_$BE.txt" "$OUT/serve_text_cpu.txt" && same=yes || same=no
    echo "serve: $BE text == cpu text (turbo, greedy): $same ($(( $(date +%s) - t2 )) s)" | tee -a "$S"
fi

if want bench; then
    MD=${MODELS_DIR:-/tmp/m}
    for m in ${MODELS:-l1b l8b}; do
        t3=$(date +%s)
        if [ ! -f "$MD/$m/config.json" ]; then
            timeout ${MODELS_TIMEOUT:-300} python3 "$SRC/bench/gpu/models.py" bench "$MD" $m >> "$OUT/models.log" 2>&1
            echo "model $m rc=$? ($(( $(date +%s) - t3 )) s)" | tee -a "$S"
        fi
        [ -f "$MD/$m/tokenizer.json" ] || python3 "$SRC/bench/gpu/synth_tokenizer.py" "$MD/$m" >> "$OUT/models.log" 2>&1
        t4=$(date +%s)
        bin timeout ${BENCH_TIMEOUT:-240} "$B/cinfer_kvq_bench" "$MD/$m" --backend $BE \
            --schemes 8,4,turbo:k8v4,turbo --decode-ctx ${CTX:-4096,16384,32768} \
            --steps ${STEPS:-16} --reps ${REPS:-3} > "$OUT/bench_$m.json" 2> "$OUT/bench_$m.err"
        echo "kvq_bench $m rc=$? ($(( $(date +%s) - t4 )) s)" | tee -a "$S"
        python3 "$SRC/bench/kv_quant/device_summary.py" "$OUT/bench_$m.json" \
            --gpu-json "$OUT/kv_quant_gpu_$m.json" | tee -a "$S"
        # the decode-step kernel for quantized KV (CINFER_KVQ_DEC=1, not the default yet)
        t6=$(date +%s)
        CINFER_KVQ_DEC=1 bin timeout ${BENCH_TIMEOUT:-240} "$B/cinfer_kvq_bench" "$MD/$m" --backend $BE \
            --schemes 8,4,turbo:k8v4,turbo --decode-ctx ${CTX:-4096,16384,32768} \
            --steps ${STEPS:-16} --reps ${REPS:-3} > "$OUT/bench_${m}_kvqdec.json" 2> "$OUT/bench_${m}_kvqdec.err"
        echo "kvq_bench $m, CINFER_KVQ_DEC=1 rc=$? ($(( $(date +%s) - t6 )) s)" | tee -a "$S"
        python3 "$SRC/bench/kv_quant/device_summary.py" "$OUT/bench_${m}_kvqdec.json" | tee -a "$S"
        # f16 on the general attention kernel (the one cuda_kvq.cu is built like)
        case " ${GENERAL_MODELS:-l1b} " in *" $m "*) ;; *) continue ;; esac
        t5=$(date +%s)
        CINFER_ATTN_DEC=0 bin timeout ${BENCH_TIMEOUT:-240} "$B/cinfer_kvq_bench" "$MD/$m" --backend $BE \
            --schemes 8 --decode-ctx ${CTX:-4096,16384,32768} --steps ${STEPS:-16} --reps ${REPS:-3} \
            > "$OUT/bench_${m}_general.json" 2> "$OUT/bench_${m}_general.err"
        echo "kvq_bench $m, CINFER_ATTN_DEC=0 rc=$? ($(( $(date +%s) - t5 )) s)" | tee -a "$S"
        python3 -c "
import json; d = json.load(open('$OUT/bench_${m}_general.json'))
for n, s in d['schemes'].items(): print('  general kernel', n, {k: v for k, v in s.items() if k.startswith('decode_tok_s')})
" 2>&1 | tee -a "$S"
    done
fi
echo "total $(( $(date +%s) - t0 )) s" | tee -a "$S"
