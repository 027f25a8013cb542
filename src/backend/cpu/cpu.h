/* cpu.h — the CPU backend: a thread pool plus SIMD kernels (AVX2/FMA, AVX-512 where the
 * CPU has them, a scalar reference for every kernel), chosen at run time. */
#ifndef CINFER_BACKEND_CPU_H
#define CINFER_BACKEND_CPU_H

#include "backend/backend.h"

struct be *be_cpu_new(const struct be_config *cfg, struct cerr *e);

#endif
