/* kern_avx2.c — AVX2 + FMA kernels (compiled with -mavx2 -mfma -mf16c; used only when the
 * CPU reports AVX2 and FMA). Entries not set here keep the scalar reference. */
#include <immintrin.h>

#include "backend/cpu/cpu_int.h"

void cpu_kernels_avx2(struct cpu_kernels *k)
{
    (void)k;
}
