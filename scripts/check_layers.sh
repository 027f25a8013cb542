#!/usr/bin/env bash
# check_layers.sh — fails when a file includes a header from a higher layer
# (DESIGN.md §2: a layer may include only itself and layers below it).
set -euo pipefail
cd "$(dirname "$0")/.."
layers=(util backend format tokenizer template model kv engine api http web server)
rank() { local i; for i in "${!layers[@]}"; do [ "${layers[$i]}" = "$1" ] && { echo "$i"; return; }; done; echo -1; }
# Only backend/cuda may include CUDA headers.
bad=0
while IFS= read -r f; do
    rel=${f#src/}
    layer=${rel%%/*}
    [ "$rel" = "main.c" ] && continue
    me=$(rank "$layer")
    if [ "$me" -lt 0 ]; then echo "$f: folder '$layer' is not a known layer"; bad=1; continue; fi
    while IFS= read -r inc; do
        dep=${inc%%/*}
        r=$(rank "$dep")
        [ "$r" -lt 0 ] && continue
        if [ "$r" -gt "$me" ]; then
            echo "$f: upward include \"$inc\" ($layer may not depend on $dep)"; bad=1
        fi
    done < <(sed -n 's/^[[:space:]]*#[[:space:]]*include[[:space:]]*"\([^"]*\)".*/\1/p' "$f")
    if [[ "$rel" != backend/cuda/* ]] && grep -qE '#[[:space:]]*include[[:space:]]*<(cuda|cublas|cuda_runtime)' "$f"; then
        echo "$f: CUDA header outside backend/cuda"; bad=1
    fi
done < <(find src -name '*.c' -o -name '*.h' -o -name '*.cu' -o -name '*.cuh' | sort)
if [ "$bad" -ne 0 ]; then echo "check_layers: FAILED"; exit 1; fi
echo "check_layers: ok"
