/* lora_scalar.c — the scalar reference of the LoRA primitives (lora_kern.h) and the choice
 * of level. */
#include "backend/cpu/cpu_int.h"
#include "backend/cpu/lora_kern.h"

static float dot_scalar(const float *x, const float *a, int n)
{
    float s[8] = {0};
    int i = 0;
    for (; i + 8 <= n; i += 8)
        for (int l = 0; l < 8; l++)
            s[l] += x[i + l] * a[i + l];
    for (; i < n; i++)
        s[i & 7] += x[i] * a[i];
    return ((s[0] + s[1]) + (s[2] + s[3])) + ((s[4] + s[5]) + (s[6] + s[7]));
}

static void axpy_scalar(float *acc, float s, const float *b, int n)
{
    for (int i = 0; i < n; i++)
        acc[i] += s * b[i];
}

static void add_scalar(float *y, const float *d, int n)
{
    for (int i = 0; i < n; i++)
        y[i] += d[i];
}

static const struct lora_kern g_scalar = {dot_scalar, axpy_scalar, add_scalar};

const struct lora_kern *cpu_lora_kern(int isa)
{
    return isa >= CPU_ISA_AVX2 ? &cpu_lora_kern_avx2 : &g_scalar;
}
