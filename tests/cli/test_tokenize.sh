#!/usr/bin/env bash
# test_tokenize.sh — `cinfer tokenize` / `cinfer detokenize` end to end on the test fixtures:
# JSON output, --special, --add-special, every MODEL kind (tokenizer.json.gz, tokenizer.model,
# GGUF vocab), round trips, invalid UTF-8 input, and usage/load errors with their exit codes.
set -u
BIN=${CINFER_BIN:-./build/cinfer}
FIX=${CINFER_FIXTURES:-tests/data/fixtures}
pass=0; fail=0
check() { # name expected actual
    if [ "$2" == "$3" ]; then pass=$((pass+1)); else fail=$((fail+1)); echo "FAIL $1: expected [$2] got [$3]" >&2; fi
}
Q=$FIX/qwen3-tokenizer/tokenizer.json.gz
L2=$FIX/llama2-tokenizer/tokenizer.model
G2=$FIX/llamacpp-vocab/ggml-vocab-gpt-2.gguf

check qwen_hello "[9707, 1879]" "$("$BIN" tokenize "$Q" --text "Hello world")"
check qwen_special "[151644, 872, 198]" "$("$BIN" tokenize "$Q" --text $'<|im_start|>user\n' --special)"
check qwen_nospecial "[27, 91, 318, 4906, 91, 29, 872, 198]" "$("$BIN" tokenize "$Q" --text $'<|im_start|>user\n')"
check llama2_hello "[15043, 3186]" "$("$BIN" tokenize "$L2" --text "Hello world")"
check llama2_bos "[1, 15043, 3186]" "$("$BIN" tokenize "$L2" --text "Hello world" --add-special)"
check gpt2_hello "[15496, 995]" "$("$BIN" tokenize "$G2" --text "Hello world")"
check detok_llama2 "Hello world" "$("$BIN" detokenize "$L2" --ids 15043,3186)"
check detok_bracket "Hello world" "$("$BIN" detokenize "$L2" --ids "[15043, 3186]")"
check detok_skip "Hello world" "$("$BIN" detokenize "$L2" --ids 1,15043,3186,2 --skip-special)"
check detok_keep "<s> Hello world</s>" "$("$BIN" detokenize "$L2" --ids 1,15043,3186,2)"
check detok_qwen "Hello world" "$("$BIN" detokenize "$Q" --ids 9707,1879)"

# round trip through a file, CJK + emoji
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
printf '我想在apple工作 😶‍🌫️ done' > "$tmp/t.txt"
ids=$("$BIN" tokenize "$Q" --file "$tmp/t.txt")
check roundtrip "$(cat "$tmp/t.txt")" "$("$BIN" detokenize "$Q" --ids "$ids")"
printf 'stdin text' | "$BIN" tokenize "$Q" --file - > "$tmp/o" ; check stdin "$("$BIN" tokenize "$Q" --text 'stdin text')" "$(cat "$tmp/o")"

# a Hugging Face model directory (plain tokenizer.json + tokenizer_config.json)
mkdir -p "$tmp/hfdir"
gzip -dc "$FIX/llama3-tokenizer/tokenizer.json.gz" > "$tmp/hfdir/tokenizer.json"
cp "$FIX/llama3-tokenizer/tokenizer_config.json" "$tmp/hfdir/"
check hfdir "[9906, 1917]" "$("$BIN" tokenize "$tmp/hfdir" --text "Hello world")"
check hfdir_json "[128000, 9906, 1917]" "$("$BIN" tokenize "$tmp/hfdir/tokenizer.json" --text "<|begin_of_text|>Hello world" --special)"
check hfdir_cleanup "Hello, world." "$("$BIN" detokenize "$tmp/hfdir" --ids "$("$BIN" tokenize "$tmp/hfdir" --text "Hello, world.")")"

# invalid UTF-8 is repaired like Python's decode("utf-8", "replace"): \xff -> U+FFFD
printf 'a\xffb' > "$tmp/bad.txt"
check invalid_utf8 "$("$BIN" tokenize "$Q" --text $'a\xef\xbf\xbdb')" "$("$BIN" tokenize "$Q" --file "$tmp/bad.txt")"

# errors: usage -> 2, load/decode -> 1
"$BIN" tokenize "$Q" >/dev/null 2>&1; check usage_rc 2 $?
"$BIN" tokenize "$Q" --bogus --text x >/dev/null 2>&1; check badopt_rc 2 $?
"$BIN" tokenize /nonexistent --text x >/dev/null 2>&1; check noload_rc 1 $?
"$BIN" detokenize "$L2" --ids 99999 >/dev/null 2>&1; check badid_rc 1 $?
"$BIN" detokenize "$L2" --ids 1,x >/dev/null 2>&1; check badids_rc 2 $?
"$BIN" tokenize "$L2" --text x --file y >/dev/null 2>&1; check both_rc 2 $?
"$BIN" tokenize --help | grep -q -- "--special"; check help_tok 0 $?
"$BIN" detokenize --help | grep -q -- "--ids"; check help_detok 0 $?
printf 'not a tokenizer' > "$tmp/junk.model"
"$BIN" tokenize "$tmp/junk.model" --text x >/dev/null 2>"$tmp/err"; check junk_rc 1 $?
grep -q "cannot load" "$tmp/err"; check junk_msg 0 $?

echo "$pass passed, $fail failed"
[ "$fail" -eq 0 ]
