#!/usr/bin/env bash
# device_memcheck.sh — on the GPU machine (carry .gpubin): the memory plan of `cinfer serve
# --backend cuda` uses device memory (ready card, /stats.admission), and a budget that fits
# nothing is refused before allocating.
export LD_LIBRARY_PATH=$PWD/.gpubin:/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}
.gpubin/cinfer serve .gpubin/fixtures/stories260K/stories260K.gguf --backend cuda --port 18190 > $OUT/card.log 2>&1 &
P=$!
for i in $(seq 1 50); do python3 -c "import urllib.request; urllib.request.urlopen('http://127.0.0.1:18190/health')" 2>/dev/null && break; sleep 0.2; done
python3 -c "import json,urllib.request; print(json.dumps(json.load(urllib.request.urlopen('http://127.0.0.1:18190/stats'))['admission']))"
kill $P; wait $P; echo "exit=$?"
grep -E "Memory|Backend" $OUT/card.log
.gpubin/cinfer serve .gpubin/fixtures/stories260K/stories260K.gguf --backend cuda --port 18191 --memory-budget 0.001 2>&1 | tail -2
