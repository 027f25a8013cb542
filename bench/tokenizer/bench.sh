#!/usr/bin/env bash
# bench.sh — tokenizer encode throughput, cinfer vs the HF reference, one thread each, same text.
# usage: bench/tokenizer/bench.sh [BUILD_DIR] [reps]   (BUILD_DIR holds libcinfer_core.a; default build)
# Generates the 1.2 MB corpus, builds bench_tok.c against the library, then for each tokenizer
# present runs cinfer and HF back to back and prints MB/s and the ratio cinfer/HF.
set -eu
SRC=$(cd "$(dirname "$0")/../.." && pwd)
BUILD=${1:-$SRC/build}
REPS=${2:-3}
FIX=${CINFER_FIXTURES:-$SRC/tests/data/fixtures}
MODELS=${CINFER_MODELS:-$SRC/models}
export RAYON_NUM_THREADS=1 TOKENIZERS_PARALLELISM=false OMP_NUM_THREADS=1
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
python3 "$SRC/scripts/gen_tok_corpus.py" "$tmp/corpus.jsonl" 2>/dev/null
cc -O2 -std=c17 -D_GNU_SOURCE -I"$SRC/src" "$SRC/bench/tokenizer/bench_tok.c" "$BUILD/libcinfer_core.a" \
   $(pkg-config --libs jansson libpcre2-8 libutf8proc) -lz -lm -lpthread -o "$tmp/bench_tok"
printf "%-22s %10s %10s %8s\n" tokenizer "cinfer MB/s" "HF MB/s" ratio
for spec in qwen3:$FIX/qwen3-tokenizer/tokenizer.json.gz llama3:$FIX/llama3-tokenizer/tokenizer.json.gz \
            llama2:$FIX/llama2-tokenizer/tokenizer.model gpt2:$FIX/llamacpp-vocab/ggml-vocab-gpt-2.gguf \
            gemma3:$MODELS/gemma3-270m-Q4_K_M.gguf smollm2:$MODELS/smollm2-135m-instruct-Q4_1.gguf \
            qwen2.5-coder:$MODELS/qwen2.5-coder-0.5b-instruct-Q4_K_M.gguf; do
    name=${spec%%:*}; path=${spec#*:}
    [ -f "$path" ] || { echo "skip $name: $path not present"; continue; }
    c=$("$tmp/bench_tok" "$path" "$tmp/corpus.jsonl" "$REPS" | awk '{print $(NF-4)}')
    h=$(python3 "$SRC/bench/tokenizer/bench_hf.py" "$path" "$tmp/corpus.jsonl" "$REPS" 2>/dev/null | awk '{print $(NF-1)}')
    printf "%-22s %10s %10s %7.2fx\n" "$name" "$c" "$h" "$(echo "$c / $h" | bc -l)"
done
