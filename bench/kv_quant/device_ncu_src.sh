#!/usr/bin/env bash
# device_ncu_src.sh — where one decode-attention kernel spends its time, per SASS instruction:
# ncu's full set (warp-state and memory sections, the details page) and its source page
# (per-instruction executed counts and warp-stall samples, CSV) for one launch of the kernels
# matching KREGEX (default k_kvq_mm) in a decode step at CTX (16384) of scheme SCHEME (8) on
# the random l8b. Run on the device from a pack of pack_gpubin.sh:
#   B=<pack dir> OUT=<dir> [MD=<models dir>] [KREGEX=..] [ENVS="A=1 B=2"] bash device_ncu_src.sh
# Writes $OUT/ncu_src_<tag>.csv (the source page) and $OUT/ncu_det_<tag>.txt (details).
set -u
B=${B:?pack dir} OUT=${OUT:?out dir}
SRC=$B/src
MD=${MD:-/tmp/m}; M=$MD/l8b
LDP=$B:$B/lib:/usr/local/cuda/lib64
NCU=$(command -v ncu || ls /usr/local/cuda/bin/ncu 2> /dev/null | head -1)
[ -n "$NCU" ] || { echo "no ncu"; exit 1; }
if [ ! -f "$M/config.json" ]; then
    python3 "$SRC/bench/gpu/models.py" bench "$MD" l8b > /dev/null || { echo "model: failed"; exit 1; }
fi
[ -f "$M/tokenizer.json" ] || python3 "$SRC/bench/gpu/synth_tokenizer.py" "$M" > /dev/null
tag=${TAG:-$(printf %s "${KREGEX:-k_kvq_mm}_${ENVS:-def}" | tr -c 'A-Za-z0-9_' '_')}
env ${ENVS:-} LD_LIBRARY_PATH=$LDP timeout ${T:-200} "$NCU" --set full --import-source no \
    -k "regex:${KREGEX:-k_kvq_mm}" -s ${SKIP:-0} -c 1 --page source --print-source sass --csv \
    "$B/cinfer_kvq_bench" "$M" --backend cuda --schemes ${SCHEME:-8} --decode-ctx ${CTX:-16384} \
    --steps 1 --reps 1 > "$OUT/ncu_src_$tag.csv" 2> "$OUT/ncu_src_$tag.err"
echo "ncu source $tag rc=$?"
env ${ENVS:-} LD_LIBRARY_PATH=$LDP timeout ${T:-200} "$NCU" --set full -k "regex:${KREGEX:-k_kvq_mm}" \
    -s ${SKIP:-0} -c 1 --page details "$B/cinfer_kvq_bench" "$M" --backend cuda \
    --schemes ${SCHEME:-8} --decode-ctx ${CTX:-16384} --steps 1 --reps 1 \
    > "$OUT/ncu_det_$tag.txt" 2> "$OUT/ncu_det_$tag.err"
echo "ncu details $tag rc=$?"
