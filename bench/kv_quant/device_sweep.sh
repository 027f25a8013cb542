#!/usr/bin/env bash
# device_sweep.sh — decode tok/s of schemes vs f16 on the random l8b under a list of
# environments, one cinfer_kvq_bench run each (best of REPS x STEPS steps at CTX), f16 in
# the same process: the quick side-by-side for a kernel switch or a split target.
#   B=<pack dir> [MD=/tmp/m] [CTX=4096,16384,32768] [SCHEMES=8] [REPS=3] [STEPS=16] \
#     bash device_sweep.sh "" "CINFER_KVQ_SPLITS=64" "CINFER_KVQ_BULK=0 CINFER_KVQ_SPLITS=32"
# One line per environment and scheme: its ratios (and tok/s) at each context.
set -u
B=${B:?pack dir}
MD=${MD:-/tmp/m}; M=$MD/l8b
LDP=$B:$B/lib:/usr/local/cuda/lib64
[ -f "$M/config.json" ] || python3 "$B/src/bench/gpu/models.py" bench "$MD" l8b > /dev/null
[ -f "$M/tokenizer.json" ] || python3 "$B/src/bench/gpu/synth_tokenizer.py" "$M" > /dev/null
for e in "$@"; do
    env $e LD_LIBRARY_PATH=$LDP timeout ${T:-120} "$B/cinfer_kvq_bench" "$M" --backend cuda \
        --schemes "${SCHEMES:-8}" --decode-ctx "${CTX:-4096,16384,32768}" --steps "${STEPS:-16}" \
        --reps "${REPS:-3}" 2> /dev/null | python3 -c "
import json, sys
d = json.load(sys.stdin)['schemes']
for k, x in d.items():
    if k == 'f16':
        continue
    r = ' '.join('%s %.4f (%.1f tok/s; f16 %.1f)' % (c.split('_')[-1], x[c], x['decode_tok_s_' + c.split('_')[-1]],
                 d['f16']['decode_tok_s_' + c.split('_')[-1]]) for c in x if c.startswith('decode_ratio_'))
    print('[%s] %s: %s' % (sys.argv[1] or 'default', k, r))
" "$e"
done
