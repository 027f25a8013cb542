/* cpu.h — the CPU backend: a thread pool plus SIMD kernels (AVX2/FMA, AVX-512 where the
 * CPU has them, a scalar reference for every kernel), chosen at run time.
 *
 * The level is the best the CPU supports, or the one forced by the environment variable
 * CINFER_CPU_ISA=scalar|avx2|avx512 (read at be_cpu_new; a level the CPU lacks is refused
 * with a warning and the best available one is used).
 *
 * Q4_K, Q5_K, Q6_K, Q8_0, Q5_0, Q4_0, Q4_1 weights are repacked at weight_prepare into
 * row-interleaved groups (a copy in host memory owned by the backend; the mmap'd file is
 * untouched and its pages are released) when the kernel level has kernels for the layout
 * (AVX-512 with VNNI and VBMI, Q6_K also GFNI; AVX2: all but Q5_K). CINFER_CPU_REPACK
 * (read at be_cpu_new): 0 = keep the file layout, unset / 1 / all = every type with kernels,
 * or a comma-separated list of dtype names.
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
/* Bytes of repacked weight copies a CPU backend holds (0: none), and *src_bytes (may be
 * NULL) the file-layout bytes they stand for. */
size_t be_cpu_repacked_bytes(const struct be *b, size_t *src_bytes);

#endif
