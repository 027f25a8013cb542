#!/usr/bin/env bash
# cinfer run on stories260K: text and ids out, --ids in, greedy; bad input exits 1 with a
# message naming the problem.
set -u
bin=${CINFER_BIN:-build/cinfer}
fx=${CINFER_FIXTURES:-tests/data/fixtures}
m=$fx/stories260K/stories260K.gguf
fail=0; pass=0
ok() { pass=$((pass + 1)); }
bad() { echo "FAIL: $*" >&2; fail=$((fail + 1)); }

out=$("$bin" run "$m" -p "Once upon a time" -n 16 --temp 0 -t 2 2>/dev/null)
[ "$out" = ", there was a little girl named Lily. She loved to play" ] && ok || bad "text: '$out'"

out=$("$bin" run "$m" --ids 1,403,407,261,378 --output-ids -n 16 --temp 0 2>/dev/null)
[ "$out" = "[432, 383, 286, 261, 376, 298, 315, 421, 395, 317, 426, 338, 401, 396, 267, 337]" ] \
    && ok || bad "ids: '$out'"

# stats go to stderr
err=$("$bin" run "$m" -p "Hello" -n 4 --temp 0 2>&1 >/dev/null)
echo "$err" | grep -q "decode:.*tok/s" && ok || bad "no decode speed on stderr: $err"

# sampling with a seed is reproducible
a=$("$bin" run "$m" -p "Once" -n 24 --temp 0.8 --top-p 0.9 --seed 7 2>/dev/null)
b=$("$bin" run "$m" -p "Once" -n 24 --temp 0.8 --top-p 0.9 --seed 7 2>/dev/null)
[ -n "$a" ] && [ "$a" = "$b" ] && ok || bad "seeded sampling not reproducible: '$a' vs '$b'"

# a Hugging Face directory without tokenizer files: --ids in, --output-ids out, and the
# greedy ids equal transformers' (tests/data/parity/qwen2/golden.json)
src=${CINFER_SRC:-.}
g=$src/tests/data/parity/qwen2/golden.json
ids=$(jq -r '.prompt_ids | map(tostring) | join(",")' "$g")
want=$(jq -c '.greedy_ids' "$g" | sed 's/,/, /g')
hf=$(mktemp -d)
trap 'rm -rf "$hf"' EXIT
cp "$src/tests/data/parity/qwen2/config.json" "$src/tests/data/parity/qwen2/model.safetensors" "$hf/"
out=$("$bin" run "$hf" --ids "$ids" --output-ids -n 32 --temp 0 --ignore-eos 2>/dev/null)
[ "$out" = "$want" ] && ok || bad "HF dir ids: '$out' want '$want'"
# the sampling defaults come from generation_config.json, as in serve (temperature 0 there:
# greedy without --temp), and its eos_token_id ends the generation
echo '{"temperature": 0.0, "top_k": 1}' > "$hf/generation_config.json"
out=$("$bin" run "$hf" --ids "$ids" --output-ids -n 32 --ignore-eos 2>/dev/null)
[ "$out" = "$want" ] && ok || bad "generation_config defaults: '$out' want '$want'"
first=$(echo "$want" | tr -d '[] ' | cut -d, -f3)
echo "{\"temperature\": 0.0, \"eos_token_id\": $first}" > "$hf/generation_config.json"
out=$("$bin" run "$hf" --ids "$ids" --output-ids -n 32 2>/dev/null)
[ "$out" = "$(echo "$want" | cut -d, -f1-3)]" ] && ok || bad "generation_config eos: '$out'"
rm "$hf/generation_config.json"
e=$("$bin" run "$hf" -p "hi" 2>&1 >/dev/null)
echo "$e" | grep -q "cannot load the tokenizer" && ok || bad "no tokenizer message: '$e'"

check_err() { # expected-substring args...
    local want=$1; shift
    local e rc
    e=$("$bin" run "$@" 2>&1 >/dev/null); rc=$?
    [ $rc -eq 1 ] && echo "$e" | grep -q -- "$want" && ok || bad "run $* -> rc $rc, '$e' (want '$want')"
}
check_err "--temp expects a number" "$m" -p x --temp hot
check_err "--top-p expects a number in" "$m" -p x --top-p 2
check_err "-n expects an integer" "$m" -p x -n -5
check_err "unknown option '--bogus'" "$m" -p x --bogus
check_err "cannot open" /nonexistent.gguf -p x
check_err "bad magic\|not a GGUF\|magic" "$fx/stories260K/SOURCES.md" -p x
check_err "outside the vocabulary" "$m" --ids 1,99999 --output-ids
check_err "--ids expects comma-separated" "$m" --ids 1,,x --output-ids
# one vocabulary with serve and bench: --kv-dtype f16|f32 (aliases --kv, --kv-f32, --kv-f16),
# --backend auto|cpu|cuda (default auto)
check_err "--kv-dtype expects f16|f32, got 'f8'" "$m" -p x --kv-dtype f8
check_err "--backend expects auto|cpu|cuda" "$m" -p x --backend tpu
for kv in "--kv-dtype f32" "--kv f32" "--kv-f32" "--kv-dtype f16" "--kv-f16" "--backend cpu" "--backend auto"; do
    # shellcheck disable=SC2086
    out=$("$bin" run "$m" -p "Once upon a time" -n 16 --temp 0 $kv 2>/dev/null)
    [ "$out" = ", there was a little girl named Lily. She loved to play" ] && ok || bad "run $kv: '$out'"
done
"$bin" run --help | grep -q -- "--kv-dtype f16|f32 *KV cache dtype (default f16" && ok || bad "run --help kv"

# --chat on a model without a template says how to give one; --chat-template supplies it
check_err "give one with --chat-template" "$m" --chat -p hi
out=$("$bin" run "$m" --chat-template "$fx/chat-templates/ollama-llama2-chat.jinja" -p "Tell me a story" -n 8 --temp 0 2>/dev/null)
[ $? -eq 0 ] && [ -n "$out" ] && ok || bad "--chat-template run failed: '$out'"

"$bin" run --help | grep -q "usage: cinfer run" && ok || bad "--help"
echo "$pass passed, $fail failed"
[ $fail -eq 0 ]
