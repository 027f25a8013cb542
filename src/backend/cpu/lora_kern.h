/* lora_kern.h — the vector primitives of the CPU op lora (lora.c), per ISA level
 * (lora_avx2.c for AVX2 + FMA, the scalar reference in lora_scalar.c). Each is one chain of
 * operations in a fixed order per output element, whatever the call's length. */
#ifndef CINFER_BACKEND_CPU_LORA_KERN_H
#define CINFER_BACKEND_CPU_LORA_KERN_H

#include <stdint.h>

struct lora_kern {
    float (*dot)(const float *x, const float *a, int n);      /* sum x[i] a[i] */
    void (*axpy)(float *acc, float s, const float *b, int n); /* acc[i] += s b[i] */
    void (*add)(float *y, const float *d, int n);             /* y[i] += d[i] */
};

/* The table for an enum cpu_isa level (AVX2 and above: lora_avx2.c). */
const struct lora_kern *cpu_lora_kern(int isa);
extern const struct lora_kern cpu_lora_kern_avx2;

#endif
