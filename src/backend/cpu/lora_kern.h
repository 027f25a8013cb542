/* lora_kern.h — the vector primitives of the CPU op lora (lora.c), per ISA level
 * (lora_avx2.c for AVX2 + FMA, the scalar reference in lora_scalar.c) and per element type
 * of the adapter's matrices (index lora_kern_dt: f32, f16, bf16; 16-bit elements are
 * converted to float exactly). Each is one chain of operations in a fixed order per output
 * element, whatever the call's length. */
#ifndef CINFER_BACKEND_CPU_LORA_KERN_H
#define CINFER_BACKEND_CPU_LORA_KERN_H

#include <stdint.h>

#include "backend/dtype.h"

/* pf: where the caller reads next (the next group's matrix at the same offsets: a distinct
 * adapter far away in memory), prefetched in step with the reads of a / b, one call's worth
 * ahead; NULL: the kernel prefetches a fixed distance ahead in a / b itself. Only a hint:
 * the results never depend on it. */
struct lora_kern {
    float (*dot[3])(const float *x, const void *a, int n, const void *pf); /* sum x[i] a[i] */
    /* for j < rank in order: acc[i] += t[j] b[j * ld + i] (one fused multiply-add each) */
    void (*expand[3])(float *acc, const float *t, const void *b, size_t ld, int rank, int n,
                      const void *pf);
    void (*add)(float *y, const float *d, int n);               /* y[i] += d[i] */
};

static inline int lora_kern_dt(int dtype)
{
    return dtype == DT_F16 ? 1 : dtype == DT_BF16 ? 2 : 0;
}

/* The table for an enum cpu_isa level (AVX2 and above: lora_avx2.c). */
const struct lora_kern *cpu_lora_kern(int isa);
extern const struct lora_kern cpu_lora_kern_avx2;

#endif
