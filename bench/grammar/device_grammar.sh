#!/usr/bin/env bash
# device_grammar.sh — issue 26's CUDA slice in one device call: grammar bitsets applied by
# the op sample on the device (be_sample_row.mask_off). Prebuilt binaries in $BIN (.gpubin:
# cinfer, test_backend_conformance and the shared libraries they need, as bench/gpu/README.md
# describes). Steps:
#   1. the backend conformance tests of the op sample (CINFER_TEST_ONLY=sample: test_sample,
#      the draw's distribution, test_sample_mask: masked rows on CUDA = the reference, ids
#      and processed logits bit for bit);
#   2. a random-weight Llama-3.2-1B shape (bench/gpu/models.py l1b, synthetic tokenizer);
#   3. serve_grammar.py: the same server with the device bitset (default) and with
#      CINFER_GRAMMAR_DEVICE=0 (grammar rows fetch their logits to the host, the path
#      before): seeded texts equal, outputs valid, constrained tok/s at 1 and 8 streams.
# Results in $OUT: gpu.txt, conf.log, models.log, serve_grammar.json, serve_grammar.err.
set -u
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
B=$(cd "${BIN:-.gpubin}" && pwd)
# the carried libraries only for cinfer's binaries (python and torch keep the system's)
CLD=$B:/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader | tee "$OUT/gpu.txt"
LD_LIBRARY_PATH=$CLD ldd "$B/cinfer" | grep "not found"
t0=$(date +%s)
LD_LIBRARY_PATH=$CLD CINFER_TEST_ONLY=${CONF_ONLY:-sample} CINFER_FIXTURES=$B/fixtures CINFER_SRC=$PWD \
    timeout ${CONF_S:-200} "$B/test_backend_conformance" > "$OUT/conf.log" 2>&1
echo "conformance rc=$? ($(( $(date +%s) - t0 )) s)"
grep -E "FAIL|passed|SKIP|CHECK" "$OUT/conf.log" | head -20
t1=$(date +%s)
timeout ${MODELS_S:-240} python3 bench/gpu/models.py bench /tmp/m ${MODEL:-l1b} > "$OUT/models.log" 2>&1
echo "models rc=$? ($(( $(date +%s) - t1 )) s)"; tail -2 "$OUT/models.log"
t2=$(date +%s)
CINFER_LD_PATH=$CLD BIN=$B timeout ${SERVE_S:-240} python3 bench/grammar/serve_grammar.py /tmp/m/${MODEL:-l1b} \
    --tokens ${TOKENS:-128} --streams ${STREAMS:-8} > "$OUT/serve_grammar.json" 2> "$OUT/serve_grammar.err"
echo "serve_grammar rc=$? ($(( $(date +%s) - t2 )) s)"
tail -8 "$OUT/serve_grammar.err" | cut -c1-400
cat "$OUT/serve_grammar.json"
echo "total $(( $(date +%s) - t0 )) s"
