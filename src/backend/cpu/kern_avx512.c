/* kern_avx512.c — AVX-512 (F/BW/VL/DQ + VNNI) kernels, used only when the CPU reports all
 * of them. Entries not set here keep the AVX2 ones. */
#include <immintrin.h>

#include "backend/cpu/cpu_int.h"

void cpu_kernels_avx512(struct cpu_kernels *k)
{
    (void)k;
}
