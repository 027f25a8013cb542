/* lora_avx2.c — the LoRA primitives (lora_kern.h) with AVX2 + FMA + F16C (built with -mavx2
 * -mfma -mf16c; used only when the CPU has them). 16-bit elements are widened to float
 * (exact) before the multiply, so a 16-bit adapter computes what its f32 copy would. */
#include <immintrin.h>
#include <string.h>

#include "backend/cpu/lora_kern.h"
#include "util/half.h"

/* Software prefetch distances, in elements ahead of the one being read. The stream of one
 * adapter matrix is short (A: rank rows of K; B^T: rank rows of M, read 32 outputs of every
 * rank at once) and every distinct adapter of a step starts a new one, which the hardware
 * prefetcher ramps up on too late: 8 distinct adapters read 8x the bytes of one. */
enum { PF_DOT = 1024, PF_EXP = 512 };

/* Prefetches the cache line(s) of element i of p (es-byte elements): the 32 elements the
 * caller will read at i (one line of 16-bit elements, two of f32). */
static inline void pf32(const void *p, int i, size_t es)
{
    _mm_prefetch((const char *)p + (size_t)i * es, _MM_HINT_T0);
    if (es == 4)
        _mm_prefetch((const char *)p + (size_t)i * es + 64, _MM_HINT_T0);
}

/* The same into L2 for a read a whole call ahead (lora_kern.h's pf). */
static inline void pf32_l2(const void *p, int i, size_t es)
{
    _mm_prefetch((const char *)p + (size_t)i * es, _MM_HINT_T1);
    if (es == 4)
        _mm_prefetch((const char *)p + (size_t)i * es + 64, _MM_HINT_T1);
}

/* 8 elements of type d (0 f32, 1 f16, 2 bf16) at element i, as floats */
static inline __m256 ld8(const void *p, int d, int i)
{
    if (d == 0)
        return _mm256_loadu_ps((const float *)p + i);
    __m128i h = _mm_loadu_si128((const __m128i *)((const uint16_t *)p + i));
    if (d == 1)
        return _mm256_cvtph_ps(h);
    return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16));
}

static inline float ld1(const void *p, int d, int i)
{
    if (d == 0)
        return ((const float *)p)[i];
    uint16_t h;
    memcpy(&h, (const uint16_t *)p + i, 2);
    return d == 1 ? half_f16_to_f32(h) : half_bf16_to_f32(h);
}

static inline float dot_any(const float *x, const void *a, int n, int d, const void *pf)
{
    __m256 s0 = _mm256_setzero_ps(), s1 = _mm256_setzero_ps();
    __m256 s2 = _mm256_setzero_ps(), s3 = _mm256_setzero_ps();
    int i = 0;
    for (; i + 32 <= n; i += 32) {
        if (pf)
            pf32_l2(pf, i, d ? 2 : 4);
        else
            pf32(a, i + PF_DOT, d ? 2 : 4);
        s0 = _mm256_fmadd_ps(_mm256_loadu_ps(x + i), ld8(a, d, i), s0);
        s1 = _mm256_fmadd_ps(_mm256_loadu_ps(x + i + 8), ld8(a, d, i + 8), s1);
        s2 = _mm256_fmadd_ps(_mm256_loadu_ps(x + i + 16), ld8(a, d, i + 16), s2);
        s3 = _mm256_fmadd_ps(_mm256_loadu_ps(x + i + 24), ld8(a, d, i + 24), s3);
    }
    for (; i + 8 <= n; i += 8)
        s0 = _mm256_fmadd_ps(_mm256_loadu_ps(x + i), ld8(a, d, i), s0);
    __m256 s = _mm256_add_ps(_mm256_add_ps(s0, s1), _mm256_add_ps(s2, s3));
    float l[8];
    _mm256_storeu_ps(l, s);
    float r = ((l[0] + l[1]) + (l[2] + l[3])) + ((l[4] + l[5]) + (l[6] + l[7]));
    for (; i < n; i++)
        r += x[i] * ld1(a, d, i);
    return r;
}

/* acc stays in registers over the ranks: 32 outputs at a time, then 8, then one */
static inline void expand_any(float *acc, const float *t, const void *b, size_t ldb, int rank,
                              int n, int d, const void *pf)
{
    const size_t es = d ? 2 : 4;
    int i = 0;
    for (; i + 32 <= n; i += 32) {
        __m256 a0 = _mm256_loadu_ps(acc + i), a1 = _mm256_loadu_ps(acc + i + 8);
        __m256 a2 = _mm256_loadu_ps(acc + i + 16), a3 = _mm256_loadu_ps(acc + i + 24);
        for (int j = 0; j < rank; j++) {
            const void *bj = (const char *)b + (size_t)j * ldb * es;
            if (pf)
                pf32_l2((const char *)pf + (size_t)j * ldb * es, i, es);
            else
                pf32(bj, i + PF_EXP, es);
            __m256 tj = _mm256_set1_ps(t[j]);
            a0 = _mm256_fmadd_ps(tj, ld8(bj, d, i), a0);
            a1 = _mm256_fmadd_ps(tj, ld8(bj, d, i + 8), a1);
            a2 = _mm256_fmadd_ps(tj, ld8(bj, d, i + 16), a2);
            a3 = _mm256_fmadd_ps(tj, ld8(bj, d, i + 24), a3);
        }
        _mm256_storeu_ps(acc + i, a0), _mm256_storeu_ps(acc + i + 8, a1);
        _mm256_storeu_ps(acc + i + 16, a2), _mm256_storeu_ps(acc + i + 24, a3);
    }
    for (; i + 8 <= n; i += 8) {
        __m256 a0 = _mm256_loadu_ps(acc + i);
        for (int j = 0; j < rank; j++)
            a0 = _mm256_fmadd_ps(_mm256_set1_ps(t[j]),
                                 ld8((const char *)b + (size_t)j * ldb * es, d, i), a0);
        _mm256_storeu_ps(acc + i, a0);
    }
    for (; i < n; i++) {
        float a = acc[i];
        for (int j = 0; j < rank; j++)
            a = __builtin_fmaf(t[j], ld1((const char *)b + (size_t)j * ldb * es, d, i), a);
        acc[i] = a;
    }
}

static float dot_f32(const float *x, const void *a, int n, const void *pf)
{
    return dot_any(x, a, n, 0, pf);
}
static float dot_f16(const float *x, const void *a, int n, const void *pf)
{
    return dot_any(x, a, n, 1, pf);
}
static float dot_bf16(const float *x, const void *a, int n, const void *pf)
{
    return dot_any(x, a, n, 2, pf);
}
static void exp_f32(float *acc, const float *t, const void *b, size_t l, int r, int n,
                    const void *pf)
{
    expand_any(acc, t, b, l, r, n, 0, pf);
}
static void exp_f16(float *acc, const float *t, const void *b, size_t l, int r, int n,
                    const void *pf)
{
    expand_any(acc, t, b, l, r, n, 1, pf);
}
static void exp_bf16(float *acc, const float *t, const void *b, size_t l, int r, int n,
                     const void *pf)
{
    expand_any(acc, t, b, l, r, n, 2, pf);
}

static void add_avx2(float *y, const float *d, int n)
{
    int i = 0;
    for (; i + 8 <= n; i += 8)
        _mm256_storeu_ps(y + i, _mm256_add_ps(_mm256_loadu_ps(y + i), _mm256_loadu_ps(d + i)));
    for (; i < n; i++)
        y[i] += d[i];
}

const struct lora_kern cpu_lora_kern_avx2 = {
    {dot_f32, dot_f16, dot_bf16}, {exp_f32, exp_f16, exp_bf16}, add_avx2};
