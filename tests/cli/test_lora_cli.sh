#!/usr/bin/env bash
# test_lora_cli.sh — `cinfer run` and `cinfer bench` with --adapter (docs/lora.md): an
# adapter changes the greedy ids, --adapter-path is the same flag, stacking two adapters
# differs from either, the PEFT directory and its GGUF copy give the same ids, and a bad
# adapter fails with the loader's error.
set -u
bin=${CINFER_BIN:-build/cinfer}
src=${CINFER_SRC:-.}
m=$src/tests/data/parity/qwen2/model.gguf
L=$src/tests/data/lora/qwen2
fail=0; pass=0
ok() { pass=$((pass + 1)); }
bad() { echo "FAIL: $*" >&2; fail=$((fail + 1)); }
run() { "$bin" run "$m" --ids 1,50,60,70,80 -n 12 --temp 0 --output-ids --ignore-eos "$@" 2>/dev/null; }

base=$(run); a=$(run --adapter "$L/a"); a2=$(run --adapter-path "$L/a"); ag=$(run --adapter "$L/a.gguf")
ab=$(run --adapter "$L/a" --adapter "$L/b"); b=$(run --adapter "$L/b")
[ -n "$base" ] && [ -n "$a" ] && ok || bad "no output: '$base' '$a'"
[ "$a" != "$base" ] && ok || bad "adapter a changed nothing: $a"
[ "$a" = "$a2" ] && ok || bad "--adapter-path: $a2 != $a"
[ "$a" = "$ag" ] && ok || bad "GGUF copy of a: $ag != $a"
[ "$ab" != "$a" ] && [ "$ab" != "$b" ] && ok || bad "a+b: $ab (a $a, b $b)"
e=$("$bin" run "$m" --ids 1,2 -n 2 --adapter "$src/tests/data/lora/gemma3/a" 2>&1); rc=$?
[ $rc -eq 1 ] && echo "$e" | grep -q "tensor 'base_model.model.model.layers" && ok ||
    bad "mismatched adapter: rc $rc '$e'"
out=$("$bin" bench "$m" -p 16 -n 8 --adapter "$L/b" 2>/dev/null)
echo "$out" | grep -q '"decode_tok_s"' && ok || bad "bench --adapter: $out"
e=$("$bin" bench "$m" -p 16 -n 8 --adapter "$L/none" 2>&1); rc=$?
[ $rc -eq 1 ] && echo "$e" | grep -q "not a PEFT adapter directory" && ok || bad "bench bad adapter: $rc '$e'"
echo "$pass passed, $fail failed"
[ "$fail" -eq 0 ]
