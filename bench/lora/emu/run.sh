#!/usr/bin/env bash
# bench/lora/emu/run.sh — runs the CUDA LoRA kernels (src/backend/cuda/cuda_lora_sg.cu) on
# the CPU, for machines without a GPU: the kernel source is compiled as C++ with a shim
# (shim.h: a block's threads are std::threads, __syncthreads a barrier, warp shuffles an
# exchange through a shared array) and test.cpp checks three projections merged into one
# call (cu_lk_first + cu_lk_merge), 3 groups (10 rows: two expand chunks; ranks crossing the
# shrink's 16-rank tiles; f32/bf16/f16 terms; 1-4 stacked terms), K not a multiple of the
# K chunk, against a double-precision reference (relative 1e-5), rows outside the groups
# untouched, and one group alone == the same rows in the full call bit for bit. Slow (one
# OS thread per CUDA thread): ~1 min. Not a GPU test: timing, PDL, graphs and the real
# compiler's code are not covered. Usage: bash bench/lora/emu/run.sh [K [norm]]
#   (norm: x un-normed, the shrink norms each row on the fly: the op lora_norm)
#   CINFER_CUDA_LORA_PART_MAX=1 bash bench/lora/emu/run.sh 600   # the row-slice path
#   CINFER_CUDA_LORA=fused bash bench/lora/emu/run.sh 600 norm    # the one-launch kernel
#     (cuda_lora_fu.cu; blocks run in ticket order; the counters must be zero after each call)
#   bash bench/lora/emu/run.sh fold [K]   # the folded path's pieces (cuda_lora_mm.cuh,
#     fold.cpp) against the two-launch path, bit for bit (CINFER_CUDA_LORA_FOLD=1..6); with
#     CINFER_CUDA_LORA_FOLD=8 within 1e-5 (fixed point) and each group alone bit for bit
#     equal to the full call (~3 min at K 1100)
set -e
cd "$(dirname "$0")"
ROOT=$(cd ../../.. && pwd)
T=$(mktemp -d)
trap 'rm -rf "$T"' EXIT
FOLD=0
[ "${1:-}" = fold ] && FOLD=1 && shift
python3 - "$ROOT" "$T" "$FOLD" <<'PY'
import sys
root, t, fold = sys.argv[1], sys.argv[2], sys.argv[3] == "1"
src = root + '/src/backend/cuda/'
h = open(src + 'cuda_lora.cuh').read().replace('#include "backend/cuda/cuda_int.cuh"', '')
mm = open(src + 'cuda_lora_mm.cuh').read().replace('#include "backend/cuda/cuda_lora.cuh"', '')
if fold:  # the fold's device side too (fold.cpp)
    mm = '#define LKM_EMU 1\n' + mm
else:
    mm = mm[:mm.index('/* ---- the fold')] + '#endif\n'  # (not used by test.cpp)
mm = mm.replace('#define LK_BAR(sg) asm', '#define LK_BAR(sg) __syncthreads(); if (0) asm')
h += mm.replace('__shared__ ', 'static ')
c = open(src + 'cuda_lora_sg.cu').read().replace('#include "backend/cuda/cuda_lora_mm.cuh"', '')
c = c.replace('extern __shared__ float s_t[];', 'float *s_t = emu_dyn;').replace('__shared__ ', 'static ')
f = open(src + 'cuda_lora_fu.cu').read().replace('#include "backend/cuda/cuda_lora.cuh"', '')
f = f.replace('__shared__ ', 'static ')
open(t + '/emu_gen.cpp', 'w').write('#include "shim.h"\n' + h + c + f)
PY
cp shim.h test.cpp fold.cpp "$T/"
SRC=test.cpp; [ $FOLD = 1 ] && SRC=fold.cpp
g++ -std=c++17 -O1 -I"$ROOT/src" -o "$T/test" "$T/$SRC" -lpthread
"$T/test" "$@"
