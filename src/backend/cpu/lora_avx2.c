/* lora_avx2.c — the LoRA primitives (lora_kern.h) with AVX2 + FMA (built with -mavx2 -mfma;
 * used only when the CPU has them). */
#include <immintrin.h>

#include "backend/cpu/lora_kern.h"

static float dot_avx2(const float *x, const float *a, int n)
{
    __m256 s0 = _mm256_setzero_ps(), s1 = _mm256_setzero_ps();
    __m256 s2 = _mm256_setzero_ps(), s3 = _mm256_setzero_ps();
    int i = 0;
    for (; i + 32 <= n; i += 32) {
        s0 = _mm256_fmadd_ps(_mm256_loadu_ps(x + i), _mm256_loadu_ps(a + i), s0);
        s1 = _mm256_fmadd_ps(_mm256_loadu_ps(x + i + 8), _mm256_loadu_ps(a + i + 8), s1);
        s2 = _mm256_fmadd_ps(_mm256_loadu_ps(x + i + 16), _mm256_loadu_ps(a + i + 16), s2);
        s3 = _mm256_fmadd_ps(_mm256_loadu_ps(x + i + 24), _mm256_loadu_ps(a + i + 24), s3);
    }
    for (; i + 8 <= n; i += 8)
        s0 = _mm256_fmadd_ps(_mm256_loadu_ps(x + i), _mm256_loadu_ps(a + i), s0);
    __m256 s = _mm256_add_ps(_mm256_add_ps(s0, s1), _mm256_add_ps(s2, s3));
    float l[8];
    _mm256_storeu_ps(l, s);
    float r = ((l[0] + l[1]) + (l[2] + l[3])) + ((l[4] + l[5]) + (l[6] + l[7]));
    for (; i < n; i++)
        r += x[i] * a[i];
    return r;
}

static void axpy_avx2(float *acc, float s, const float *b, int n)
{
    __m256 vs = _mm256_set1_ps(s);
    int i = 0;
    for (; i + 8 <= n; i += 8)
        _mm256_storeu_ps(acc + i,
                         _mm256_fmadd_ps(vs, _mm256_loadu_ps(b + i), _mm256_loadu_ps(acc + i)));
    for (; i < n; i++)
        acc[i] = __builtin_fmaf(s, b[i], acc[i]);
}

static void add_avx2(float *y, const float *d, int n)
{
    int i = 0;
    for (; i + 8 <= n; i += 8)
        _mm256_storeu_ps(y + i, _mm256_add_ps(_mm256_loadu_ps(y + i), _mm256_loadu_ps(d + i)));
    for (; i < n; i++)
        y[i] += d[i];
}

const struct lora_kern cpu_lora_kern_avx2 = {dot_avx2, axpy_avx2, add_avx2};
