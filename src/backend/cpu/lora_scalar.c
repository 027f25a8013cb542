/* lora_scalar.c — the scalar reference of the LoRA primitives (lora_kern.h) and the choice
 * of level. */
#include <string.h>

#include "backend/cpu/cpu_int.h"
#include "backend/cpu/lora_kern.h"
#include "util/half.h"

static inline float ld(const void *p, int d, int i)
{
    if (d == 0) {
        float v;
        memcpy(&v, (const char *)p + 4 * (size_t)i, 4);
        return v;
    }
    uint16_t h;
    memcpy(&h, (const char *)p + 2 * (size_t)i, 2);
    return d == 1 ? half_f16_to_f32(h) : half_bf16_to_f32(h);
}

static inline float dot_any(const float *x, const void *a, int n, int d)
{
    float s[8] = {0};
    int i = 0;
    for (; i + 8 <= n; i += 8)
        for (int l = 0; l < 8; l++)
            s[l] += x[i + l] * ld(a, d, i + l);
    for (; i < n; i++)
        s[i & 7] += x[i] * ld(a, d, i);
    return ((s[0] + s[1]) + (s[2] + s[3])) + ((s[4] + s[5]) + (s[6] + s[7]));
}

static inline void expand_any(float *acc, const float *t, const void *b, size_t ldb, int rank,
                              int n, int d)
{
    for (int i = 0; i < n; i++) {
        float a = acc[i];
        for (int j = 0; j < rank; j++)
            a = __builtin_fmaf(t[j], ld(b, d, (int)((size_t)j * ldb) + i), a);
        acc[i] = a;
    }
}

/* (the scalar reference prefetches nothing: pf is only a hint) */
static float dot_f32(const float *x, const void *a, int n, const void *pf)
{
    (void)pf;
    return dot_any(x, a, n, 0);
}
static float dot_f16(const float *x, const void *a, int n, const void *pf)
{
    (void)pf;
    return dot_any(x, a, n, 1);
}
static float dot_bf16(const float *x, const void *a, int n, const void *pf)
{
    (void)pf;
    return dot_any(x, a, n, 2);
}
static void exp_f32(float *acc, const float *t, const void *b, size_t l, int r, int n,
                    const void *pf)
{
    (void)pf;
    expand_any(acc, t, b, l, r, n, 0);
}
static void exp_f16(float *acc, const float *t, const void *b, size_t l, int r, int n,
                    const void *pf)
{
    (void)pf;
    expand_any(acc, t, b, l, r, n, 1);
}
static void exp_bf16(float *acc, const float *t, const void *b, size_t l, int r, int n,
                     const void *pf)
{
    (void)pf;
    expand_any(acc, t, b, l, r, n, 2);
}

static void add_scalar(float *y, const float *d, int n)
{
    for (int i = 0; i < n; i++)
        y[i] += d[i];
}

static const struct lora_kern g_scalar = {
    {dot_f32, dot_f16, dot_bf16}, {exp_f32, exp_f16, exp_bf16}, add_scalar};

const struct lora_kern *cpu_lora_kern(int isa)
{
    return isa >= CPU_ISA_AVX2 ? &cpu_lora_kern_avx2 : &g_scalar;
}
