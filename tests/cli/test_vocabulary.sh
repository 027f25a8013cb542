#!/usr/bin/env bash
# test_vocabulary.sh — run, serve and bench share one vocabulary (src/server/cli_opts.h):
# the same KV dtype flag and default (--kv-dtype f16|f32, default f16, old spellings
# accepted), the same --backend values and default (auto), the same sampling-default rule;
# `cinfer --help` and `serve --help` name every route the sources register.
set -u
bin=${CINFER_BIN:-build/cinfer}
src=${CINFER_SRC:-.}
fx=${CINFER_FIXTURES:-tests/data/fixtures}
m=$fx/stories260K/stories260K.gguf
fail=0; pass=0
ok() { pass=$((pass + 1)); }
bad() { echo "FAIL: $*" >&2; fail=$((fail + 1)); }

for c in run serve bench; do
    h=$("$bin" $c --help 2>&1)
    echo "$h" | grep -q -- "--kv-dtype f16|f32" && echo "$h" | grep -q "default f16" && ok ||
        bad "$c --help: no '--kv-dtype f16|f32 ... default f16'"
    echo "$h" | grep -q -- "--backend auto|cpu|cuda" && echo "$h" | grep -q "default auto" && ok ||
        bad "$c --help: no '--backend auto|cpu|cuda ... default auto'"
done
for c in run serve; do
    "$bin" $c --help | grep -q "generation_config.json" && ok || bad "$c --help: sampling defaults rule"
done

# bad values are refused the same way; old spellings work
for c in run serve bench; do
    extra=(); [ $c = run ] && extra=(-p x)
    e=$("$bin" $c "$m" "${extra[@]}" --kv-dtype f8 2>&1); rc=$?
    [ $rc -eq 1 ] && echo "$e" | grep -q "cinfer $c: --kv-dtype expects f16|f32, got 'f8'" && ok ||
        bad "$c --kv-dtype f8 -> $rc '$e'"
done
for kv in "--kv-dtype f32:f32" "--kv f32:f32" "--kv-f32:f32" "--kv-f16:f16" ":f16"; do
    out=$("$bin" bench "$m" -t 1 -p 8 -n 4 ${kv%%:*} 2>/dev/null)
    echo "$out" | grep -q "\"kv\": \"${kv##*:}\"" && ok || bad "bench ${kv%%:*}: $out"
done

# every route registered in src/server/*.c is named by both help texts
h1=$("$bin" --help); h2=$("$bin" serve --help)
n=0
while read -r meth path; do
    n=$((n + 1))
    want="$meth  *\(.*, \)*$path\($\|[ ,]\)"
    [ "${path%/}" != "$path" ] && want="$meth  *.*${path}{[a-z]*}" # a prefix route: /v1/models/{id}
    echo "$h1" | grep -q -- "$want" && ok || bad "cinfer --help does not name $meth $path"
    echo "$h2" | grep -q -- "$want" && ok || bad "cinfer serve --help does not name $meth $path"
done < <(grep -rho --include='*.c' 'http_route([^,]*, *"[A-Z]*", *"[^"]*"' "$src"/src/server "$src"/src/web |
         sed 's/.*"\([A-Z]*\)", *"\([^"]*\)"/\1 \2/' | sort -u)
[ "$n" -ge 12 ] && ok || bad "found only $n routes in the sources"

echo "$pass passed, $fail failed"
[ "$fail" -eq 0 ]
