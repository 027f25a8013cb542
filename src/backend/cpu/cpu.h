/* cpu.h — the CPU backend: a thread pool plus SIMD kernels (AVX2/FMA, AVX-512 where the
 * CPU has them, a scalar reference for every kernel), chosen at run time.
 *
 * The level is the best the CPU supports, or the one forced by the environment variable
 * CINFER_CPU_ISA=scalar|avx2|avx512 (read at be_cpu_new; a level the CPU lacks is refused
 * with a warning and the best available one is used).
 */
#ifndef CINFER_BACKEND_CPU_H
#define CINFER_BACKEND_CPU_H

#include "backend/backend.h"

/* Creates the CPU backend with cfg->n_threads threads (<= 0: online cores). NULL + e on
 * failure. Free with be_free(). */
struct be *be_cpu_new(const struct be_config *cfg, struct cerr *e);

/* "scalar", "avx2" or "avx512": the kernel level a CPU backend b runs. b must be a CPU
 * backend. */
const char *be_cpu_isa(const struct be *b);
/* 1 when this CPU can run kernel level name ("scalar", "avx2", "avx512"), else 0. */
int be_cpu_isa_supported(const char *name);
/* Number of threads of a CPU backend. */
int be_cpu_threads(const struct be *b);

#endif
