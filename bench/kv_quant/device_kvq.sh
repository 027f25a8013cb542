#!/usr/bin/env bash
# device_kvq.sh — issue 19's GPU check and bench (quantized KV blocks read by the CUDA
# attention, src/backend/cuda/cuda_kvq.cu) in one device call of at most ~7 minutes.
# Binaries are built on the CPU machine with the CUDA backend and carried in $BIN
# (test_kvq_cuda, test_engine_kvq, cinfer, cinfer_kvq_bench, lib/, fixtures/, src/ with this
# script, device_summary.py, bench/gpu/models.py + synth_tokenizer.py and the eval texts).
# Parts (PARTS, default "test quality bench"; "serve" is extra), each bounded by what is
# left of BUDGET seconds (default 400), each teeing its lines to $OUT/summary.txt:
#  test     test_kvq_cuda (GPU store == kvq_store_row byte for byte; GPU attention == the CPU
#           kernel within 1e-4 of the output scale; every format; the decode path and the
#           general kernel: the test runs both) and test_engine_kvq with CINFER_TEST_BACKEND=cuda
#           (batched == solo, prefix hit == cold, preemption, per scheme, on stories260K);
#  quality  cinfer_kvq_bench --backend cuda on a real model (MODEL=, a GGUF; the lead ships
#           smollm2-135m-instruct-Q4_1.gguf) over the repository's eval texts
#           (bench/kv_quant/texts: prose and code, QTOKENS (16384) tokens each, windows of
#           2048): ppl_delta_frac and kl_mean per scheme vs f16 KV;
#  bench    random-weight l8b (bench/gpu/models.py, made once in MODELS_DIR; or DECODE_MODEL=
#           any model path): decode tok/s at CTX (4096,16384,32768) per scheme vs f16, best of
#           REPS (3) runs of STEPS (16) steps, once per KMODES (default "split general":
#           CINFER_KVQ_ATTN=split, the decode path of cuda_kvq_dec.cu, the default; =general,
#           the old kernel), then the decode path at XCTX (16384) once per EXTRA word (default
#           "CINFER_KVQ_STAGES=3 CINFER_KVQ_STAGES=4 CINFER_KVQ_SOFT=lean
#           CINFER_KVQ_STAGES=3,CINFER_KVQ_SOFT=lean CINFER_KVQ_STAGES=4,CINFER_KVQ_SOFT=lean":
#           the decode kernel's deeper cp.async pipelines and lean softmax, fields
#           decode_ratio_16k_stages3 .. _stages4_softlean; the earlier probes, e.g.
#           "CINFER_KVQ_NT=128 CINFER_KVQ_SPLITS=64 CINFER_KVQ_ROPE_STORE=split", by name;
#           "" skips); bytes per token;
#  PROFILE=1 (extra, after bench) ncu on one decode step's attention kernels at 16k, scheme
#           8 and f16, per kernel: duration, DRAM bytes read and GB/s — the decode path, the
#           general kernel, the f16 decode kernel (cuda_attn_dec.cu) and the quantizing
#           store: $OUT/ncu_*.csv; then nsys over 16 decode steps (f16 and 8): the
#           per-kernel sums (the top 25 in the summary, all in $OUT/nsys_8*.csv); NCU_SET
#           picks the ncu runs ("MODE:KERNEL_REGEX:SKIP ..."), NSYS_ON=0 skips nsys;
#  serve    (extra) cinfer serve --backend cuda --kv-quant turbo on stories260K: /stats and
#           one greedy completion beside the CPU backend's.
# Then device_summary.py writes $OUT/kv_quant_gpu.json: the issue's "gpu" object
# {"gpu": {"schemes": {8|4|k8v4|k8v3: {bytes_per_token, compression, ppl_delta_frac,
# kl_mean, decode_ratio_16k, ...}}, "meta": {...}}} (decode_ratio_*: the decode path;
# *_general: the old kernel) and says whether decode_ratio_16k >= 1.0 for 8 and k8v4.
# Usage (repo root on the device):
#   OUT=$OUT BIN=build-gpu/gpubin-t19 MODEL=path/to/smollm2-135m-instruct-Q4_1.gguf \
#     bash build-gpu/gpubin-t19/src/bench/kv_quant/device_kvq.sh
# BACKEND=cpu dry-runs it here (no GPU): e.g. BACKEND=cpu DECODE_MODEL=models/smollm2-... \
#   CTX=256,512 QTOKENS=128 STEPS=2 REPS=1.
set -u
BE=${BACKEND:-cuda}
PARTS=" ${PARTS:-test quality bench} "
want() { case "$PARTS" in *" $1 "*) return 0 ;; esac; return 1; }
B=$(cd "${BIN:-.gpubin}" && pwd)
SRC=$B/src
[ -d "$SRC/bench/kv_quant" ] || SRC=$PWD
TEXTS=${TEXTS:-$SRC/bench/kv_quant/texts}
# the carried shared libraries ($B/lib) only for our binaries, never for python (torch)
LDP=$B/lib:$B:/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}
bin() { LD_LIBRARY_PATH=$LDP "$@"; }
OUT=${OUT:-/tmp/out}
mkdir -p "$OUT"
S="$OUT/summary.txt"
BUDGET=${BUDGET:-400}
t0=$(date +%s)
left() { echo $(( BUDGET - ($(date +%s) - t0) )); }
# lim DEFAULT: a timeout of at most DEFAULT seconds within what is left (0 = skip)
lim() { local l; l=$(left); [ "$l" -lt "$1" ] && echo $(( l > 20 ? l : 0 )) || echo "$1"; }
NT=$(nproc 2> /dev/null || echo 4)
SCHEMES=${SCHEMES:-8,4,turbo:k8v4,turbo}
(nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader 2>&1 || true) | tee "$OUT/gpu.txt"

if want test; then
    T=$(lim 150)
    if [ "$T" -gt 0 ]; then
        CINFER_TEST_BACKEND=$BE CINFER_FIXTURES=$B/fixtures bin timeout "$T" "$B/test_kvq_cuda" > "$OUT/test_kvq_cuda.log" 2>&1
        echo "test_kvq_cuda rc=$? ($(( $(date +%s) - t0 )) s)" | tee -a "$S"
        grep -E "FAIL|passed|SKIP" "$OUT/test_kvq_cuda.log" | head -20 | tee -a "$S"
    else echo "test_kvq_cuda: skipped (budget)" | tee -a "$S"; fi
    T=$(lim 150)
    if [ "$T" -gt 0 ]; then
        t1=$(date +%s)
        CINFER_TEST_BACKEND=$BE CINFER_FIXTURES=$B/fixtures CINFER_SRC=$SRC \
            bin timeout "$T" "$B/test_engine_kvq" > "$OUT/test_engine_kvq.log" 2>&1
        echo "test_engine_kvq ($BE) rc=$? ($(( $(date +%s) - t1 )) s)" | tee -a "$S"
        grep -E "FAIL|passed|SKIP" "$OUT/test_engine_kvq.log" | head -20 | tee -a "$S"
    else echo "test_engine_kvq: skipped (budget)" | tee -a "$S"; fi
fi

QJ=""
if want quality; then
    M=${MODEL:-}
    T=$(lim 150)
    if [ -z "$M" ] || [ ! -f "$M" ]; then
        echo "quality: skipped (MODEL='$M' is not a file)" | tee -a "$S"
    elif [ "$T" -gt 0 ]; then
        t2=$(date +%s)
        QJ=$OUT/quality.json
        bin timeout "$T" "$B/cinfer_kvq_bench" "$M" --backend $BE --schemes "$SCHEMES" \
            --text "prose=$TEXTS/prose_vim_usr_01-05.txt" --text "code=$TEXTS/code_argparse.py" \
            --tokens ${QTOKENS:-16384} --window ${QWINDOW:-2048} --chunk 256 --decode-ctx "" \
            --score-threads $NT > "$QJ" 2> "$OUT/quality.err"
        rc=$?
        echo "quality $(basename "$M") rc=$rc ($(( $(date +%s) - t2 )) s)" | tee -a "$S"
        if [ $rc != 0 ]; then # a cut-off run: its last per-window line
            grep '^partial: ' "$OUT/quality.err" | tail -1 | sed 's/^partial: //' > "$QJ"
            echo "  (partial: $(grep -c '^partial: ' "$OUT/quality.err") windows)" | tee -a "$S"
        fi
        tail -2 "$OUT/quality.err" | grep -v '^partial' | tee -a "$S"
    else echo "quality: skipped (budget)" | tee -a "$S"; fi
fi

DJ="" DK="" DS=""
if want bench; then
    m=${DECODE_MODEL:-}
    if [ -z "$m" ]; then
        MD=${MODELS_DIR:-/tmp/m}
        m=$MD/l8b
        if [ ! -f "$m/config.json" ]; then
            t3=$(date +%s)
            T=$(lim 200)
            [ "$T" -gt 0 ] && timeout "$T" python3 "$SRC/bench/gpu/models.py" bench "$MD" l8b >> "$OUT/models.log" 2>&1
            echo "model l8b rc=$? ($(( $(date +%s) - t3 )) s)" | tee -a "$S"
        fi
        [ -f "$m/tokenizer.json" ] || python3 "$SRC/bench/gpu/synth_tokenizer.py" "$m" >> "$OUT/models.log" 2>&1
    fi
    for km in ${KMODES:-split general}; do
        T=$(lim 150)
        if [ "$T" -le 0 ]; then echo "kvq_bench CINFER_KVQ_ATTN=$km: skipped (budget)" | tee -a "$S"; continue; fi
        t4=$(date +%s)
        f=$OUT/decode_$km.json
        CINFER_KVQ_ATTN=$km bin timeout "$T" "$B/cinfer_kvq_bench" "$m" --backend $BE --schemes "$SCHEMES" \
            --decode-ctx ${CTX:-4096,16384,32768} --steps ${STEPS:-16} --reps ${REPS:-3} \
            > "$f" 2> "${f%.json}.err"
        echo "kvq_bench $(basename "$m") decode CINFER_KVQ_ATTN=$km rc=$? ($(( $(date +%s) - t4 )) s)" | tee -a "$S"
        [ $km = split ] && DJ=$f
        [ $km = general ] && DK=$f
    done
    # variants of the decode path at 16k, one run each: VAR=VALUE words, several joined by
    # commas for one run (label: each variable's last word and value, e.g.
    # CINFER_KVQ_NT=128 -> nt128; CINFER_KVQ_MERGE=fused,CINFER_KVQ_STORE=attn ->
    # mergefused_storeattn)
    for ev in ${EXTRA-CINFER_KVQ_STAGES=3 CINFER_KVQ_STAGES=4 CINFER_KVQ_SOFT=lean CINFER_KVQ_STAGES=3,CINFER_KVQ_SOFT=lean CINFER_KVQ_STAGES=4,CINFER_KVQ_SOFT=lean}; do
        T=$(lim 60)
        lab=""
        for w in $(printf %s "$ev" | tr ',' ' '); do
            lab=$lab${lab:+_}$(printf %s "${w%%=*}" | sed 's/.*_//' | tr 'A-Z' 'a-z')${w#*=}
        done
        if [ "$T" -le 0 ]; then echo "kvq_bench $ev: skipped (budget)" | tee -a "$S"; continue; fi
        t4=$(date +%s)
        f=$OUT/decode_$lab.json
        env $(printf %s "$ev" | tr ',' ' ') LD_LIBRARY_PATH=$LDP timeout "$T" "$B/cinfer_kvq_bench" "$m" --backend $BE --schemes "$SCHEMES" \
            --decode-ctx ${XCTX:-16384} --steps ${STEPS:-16} --reps ${REPS:-3} > "$f" 2> "${f%.json}.err"
        echo "kvq_bench $(basename "$m") decode ${XCTX:-16384} $ev rc=$? ($(( $(date +%s) - t4 )) s)" | tee -a "$S"
        DS="$DS $lab=$f"
    done
    if [ "${PROFILE:-0}" = 1 ]; then
        # one decode step's attention kernels at 16k (the warm step's first layers), scheme 8
        # and f16; ncu replays each profiled kernel for its metrics
        NCU=$(command -v ncu || ls /usr/local/cuda/bin/ncu 2> /dev/null | head -1)
        MET=gpu__time_duration.sum,dram__bytes_read.sum,dram__bytes_read.sum.per_second,dram__throughput.avg.pct_of_peak_sustained_elapsed,sm__throughput.avg.pct_of_peak_sustained_elapsed,smsp__issue_active.avg.pct_of_peak_sustained_active,sm__warps_active.avg.pct_of_peak_sustained_active,l1tex__data_bank_conflicts_pipe_lsu_mem_shared.sum,launch__grid_size,launch__registers_per_thread
        # (the bench's setup stores 16384 synthetic rows per layer through k_kvq_store in
        # 2048 launches before the first step: the decode's rope + store (k_kvq_rope_store)
        # is profiled after skipping them)
        for pr in ${NCU_SET:-split:k_kvq_mm|k_kvq_sd:0 general:k_kvq_attn|k_kvq_merge:0 split:k_attn_dec:0 split:k_kvq_rope_store|k_kvq_store:2048}; do
            km=${pr%%:*} kn=${pr#*:} sk=${pr##*:}
            kn=${kn%:*}
            fn=$(printf %s "${km}_$kn" | tr -c 'A-Za-z0-9_' '_')
            T=$(lim 90)
            if [ -z "$NCU" ] || [ "$T" -le 0 ]; then echo "ncu $km $kn: skipped (no ncu or budget)" | tee -a "$S"; continue; fi
            CINFER_KVQ_ATTN=$km bin timeout "$T" "$NCU" --csv --page raw --print-units base --metrics "$MET" -k "regex:$kn" -s $sk -c 6 \
                "$B/cinfer_kvq_bench" "$m" --backend $BE --schemes 8 --decode-ctx 16384 --steps 1 --reps 1 \
                > "$OUT/ncu_$fn.csv" 2> "$OUT/ncu_$fn.err"
            echo "ncu $km $kn rc=$?" | tee -a "$S"
            python3 "$SRC/bench/kv_quant/device_summary.py" --ncu "$OUT/ncu_$fn.csv" 2>&1 | tee -a "$S"
        done
        # every kernel of 16 decode steps at 16k, f16 and scheme 8 (the decode path) in one
        # process: nsys' per-kernel sums (the setup's stores are in k_kvq_store's count)
        NSYS=$(command -v nsys || ls /usr/local/cuda/bin/nsys /opt/nvidia/nsight-systems*/bin/nsys 2> /dev/null | head -1)
        [ "${NSYS_ON:-1}" = 1 ] || NSYS=""
        T=$(lim 120)
        if [ -n "$NSYS" ] && [ "$T" -gt 0 ]; then
            bin timeout "$T" "$NSYS" profile -o "$OUT/nsys_8" --force-overwrite true -t cuda \
                "$B/cinfer_kvq_bench" "$m" --backend $BE --schemes 8 --decode-ctx 16384 --steps 16 --reps 1 \
                > "$OUT/nsys_8.log" 2>&1
            echo "nsys rc=$?" | tee -a "$S"
            "$NSYS" stats --report cuda_gpu_kern_sum --format csv -o "$OUT/nsys_8" "$OUT/nsys_8.nsys-rep" > /dev/null 2>&1
            f=$(ls "$OUT"/nsys_8*kern_sum*.csv 2> /dev/null | head -1)
            [ -n "$f" ] && python3 -c "
import csv, sys
rows = list(csv.DictReader(open(sys.argv[1])))
for r in rows[:25]:
    print('  nsys %-70s n %6s avg %10s ns  total %5s%%' % (r.get('Name', '?')[:70], r.get('Instances', '?'),
          r.get('Avg (ns)', '?'), r.get('Time (%)', '?')))
" "$f" 2>&1 | tee -a "$S"
            rm -f "$OUT"/nsys_8.sqlite "$OUT"/nsys_8.nsys-rep # (large; the CSVs stay)
        else echo "nsys: skipped (no nsys or budget)" | tee -a "$S"; fi
    fi
fi

if want serve; then
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
            curl -s "http://127.0.0.1:$port/v1/completions" -H 'Content-Type: application/json' \
                -d '{"prompt": "Once upon a time, there was a little", "max_tokens": 48, "temperature": 0}' \
                | python3 -c "import json,sys; d=json.load(sys.stdin); print(repr(d['choices'][0]['text']))" \
                > "$OUT/serve_text_$be.txt"
        fi
        kill $pid 2> /dev/null; wait $pid 2> /dev/null
    done
    cmp -s "$OUT/serve_text_$BE.txt" "$OUT/serve_text_cpu.txt" && same=yes || same=no
    echo "serve: $BE text == cpu text (turbo, greedy): $same" | tee -a "$S"
fi

python3 "$SRC/bench/kv_quant/device_summary.py" --decode "$DJ" --decode-general "$DK" --quality "$QJ" \
    --extra "$DS" \
    --gpu-json "$OUT/kv_quant_gpu.json" --device "$(head -1 "$OUT/gpu.txt")" 2>&1 | tee -a "$S"
echo "total $(( $(date +%s) - t0 )) s" | tee -a "$S"
