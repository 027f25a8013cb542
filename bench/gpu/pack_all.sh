#!/usr/bin/env bash
# pack_all.sh — one tarball with the three device folders of bench/gpu/PENDING.md (t21: the
# LoRA bench, gpubin-t19: the KV-quant tests and bench, t17: the spec bench), identical files
# stored once (each binary holds the same CUDA fatbin, so xz -9 sees the repeats), and the
# SmolLM2 GGUF split into parts that fit the device call's 64 MiB limit beside it.
#
# Why: the three packs alone are ~19 MB each, the model 98 MB, and a call carries ~36 MB
# (the limit counts the checkout's tracked files by disk blocks, ~31 MB here). One ~21 MB
# tarball plus four model parts make a chain of four calls (PENDING.md).
# PACKS: the folders to put in (default "t21 gpubin-t19 t17").
# Usage: bash bench/gpu/pack_all.sh [BUILD_DIR (build-gpu)] [MODEL (models/smollm2-135m-instruct-Q4_1.gguf)]
#   -> .gpubin/all.tar.xz, .p1/p .. .p4/p (add /.gpubin/ and /.p1/ .. /.p4/ to .git/info/exclude)
set -eu
cd "$(dirname "$0")/../.."
BUILD=${1:-build-gpu}
MODEL=${2:-models/smollm2-135m-instruct-Q4_1.gguf}
cmake --build "$BUILD" -j2 --target cinfer test_lora cinfer_lora_bench test_kvq_cuda \
    test_engine_kvq cinfer_kvq_bench > /dev/null
mkdir -p .gpubin
XZ_OPT=-0 bash bench/lora/pack_device.sh "$BUILD" .gpubin/t21 > /dev/null
bash bench/kv_quant/pack_gpubin.sh "$BUILD" "$BUILD/gpubin-t19" > /dev/null
bash bench/spec/pack_device.sh "$BUILD" "$BUILD/t17" > /dev/null
S=$(mktemp -d /tmp/pack_all.XXXXXX)
PACKS=${PACKS:-t21 gpubin-t19 t17} # (a subset keeps the tarball small: e.g. PACKS="gpubin-t19 t17")
for p in $PACKS; do
    case $p in t21) cp -a .gpubin/t21 "$S/" ;; *) cp -a "$BUILD/$p" "$S/" ;; esac
done
python3 - "$S" <<'EOF'
import hashlib, os, sys
seen, saved = {}, 0
for root, dirs, files in sorted(os.walk(sys.argv[1])):
    dirs.sort()
    for f in sorted(files):
        p = os.path.join(root, f)
        if os.path.islink(p):
            continue
        h = hashlib.sha256(open(p, 'rb').read()).hexdigest()
        if h in seen:
            os.unlink(p)
            os.link(seen[h], p)
            saved += os.path.getsize(p)
        else:
            seen[h] = p
print(f"identical files linked: {saved / 1e6:.1f} MB stored once")
EOF
tar -C "$S" -cf - $PACKS | xz -9 -T1 > .gpubin/all.tar.xz
rm -rf "$S"
# the model in four parts: with all.tar.xz (call 1), alone (2, 3), the rest (4)
sz=$(stat -c %s "$MODEL")
mkdir -p .p1 .p2 .p3 .p4
head -c 14500000 "$MODEL" > .p1/p
tail -c +14500001 "$MODEL" | head -c 35000000 > .p2/p
tail -c +49500001 "$MODEL" | head -c 35000000 > .p3/p
tail -c +84500001 "$MODEL" > .p4/p
test "$(cat .p1/p .p2/p .p3/p .p4/p | md5sum | cut -d' ' -f1)" = "$(md5sum < "$MODEL" | cut -d' ' -f1)"
echo "model $sz bytes, md5 $(md5sum < "$MODEL" | cut -d' ' -f1), parts: $(stat -c %s .p1/p .p2/p .p3/p .p4/p | tr '\n' ' ')"
ls -l .gpubin/all.tar.xz
