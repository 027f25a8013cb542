#!/usr/bin/env bash
# test_tokenize_ref.sh — full-corpus tokenizer parity against the Python references.
# Where `tokenizers`, `sentencepiece` and `transformers` (+ `gguf`) are importable, it
# generates the >= 1 MB corpus (scripts/gen_tok_corpus.py), tokenizes it with the references
# (scripts/tok_reference.py) and runs test_tokenizer_ref over every tokenizer it could load
# (the real GGUF models only when present under models/ or $CINFER_MODELS). Otherwise it
# says so and exits 77 (ctest: skipped); the committed samples are checked by
# test_tokenizer_ref in every run.
set -u
SRC=${CINFER_SRC:-.}
BIN=${CINFER_BIN:-./build/cinfer}
T=$(dirname "$BIN")/test_tokenizer_ref
if ! python3 -c "import tokenizers, sentencepiece, transformers, gguf" 2>/dev/null; then
    echo "SKIPPED: python packages tokenizers/sentencepiece/transformers/gguf not installed"
    exit 77
fi
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
python3 "$SRC/scripts/gen_tok_corpus.py" "$tmp/corpus.jsonl" || exit 1
python3 "$SRC/scripts/tok_reference.py" --corpus "$tmp/corpus.jsonl" --out "$tmp/ref" 2>&1 \
    | grep -v -i "pytorch" || true
ls "$tmp"/ref/*.ref.json.gz >/dev/null 2>&1 || { echo "no reference written"; exit 1; }
CINFER_TOK_REF_DIR="$tmp/ref" "$T"
