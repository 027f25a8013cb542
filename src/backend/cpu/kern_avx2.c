/* kern_avx2.c — AVX2 + FMA kernels (built with -mavx2 -mfma -mf16c; installed only when the
 * CPU reports AVX2 and FMA): float-weight matmul tiles, the quantized tiles of qk_x86.h
 * with maddubs/madd int8 products, and the attention / rmsnorm vector primitives.
 * Entries not set here keep the scalar reference.
 */
#include <immintrin.h>
#include <stdint.h>

#include "backend/cpu/cpu_int.h"

static inline __m256i qk_dot4(__m256i u, __m256i s)
{
    return _mm256_madd_epi16(_mm256_maddubs_epi16(u, s), _mm256_set1_epi16(1));
}

static inline __m256i qk_dot16(__m256i acc, __m256i u, __m256i s, __m256i sc16)
{
    return _mm256_add_epi32(acc, _mm256_madd_epi16(_mm256_maddubs_epi16(u, s), sc16));
}

static inline __m256i qk_bits(uint32_t bits, int8_t v)
{
    const __m256i shuf = _mm256_setr_epi8(0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 1, 1, 1, 2, 2,
                                          2, 2, 2, 2, 2, 2, 3, 3, 3, 3, 3, 3, 3, 3);
    const __m256i bitm = _mm256_set1_epi64x(0x8040201008040201ll);
    __m256i b = _mm256_shuffle_epi8(_mm256_set1_epi32((int)bits), shuf);
    b = _mm256_cmpeq_epi8(_mm256_and_si256(b, bitm), bitm);
    return _mm256_and_si256(b, _mm256_set1_epi8(v));
}

#include "backend/cpu/qk_x86.h"

/* ---- float weights: F32, F16, BF16 ---- */

QK_INLINE __m256 fw_load8(int dt, const void *w, int64_t i)
{
    if (dt == DT_F32)
        return _mm256_loadu_ps((const float *)w + i);
    __m128i h = _mm_loadu_si128((const __m128i *)((const uint16_t *)w + i));
    if (dt == DT_F16)
        return _mm256_cvtph_ps(h);
    return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16));
}

QK_INLINE float fw_get(int dt, const void *w, int64_t i)
{
    if (dt == DT_F32)
        return ((const float *)w)[i];
    uint16_t h = ((const uint16_t *)w)[i];
    if (dt == DT_F16)
        return _cvtsh_ss(h);
    uint32_t u = (uint32_t)h << 16;
    float f;
    memcpy(&f, &u, 4);
    return f;
}

/* One weight row against nx x rows: two 8-lane accumulators per element over 16-element
 * steps, an 8-element step, then a scalar tail added after the horizontal sum. */
QK_INLINE void f_tile(int dt, int nx, int64_t k, const void *w, const float *x, size_t xs,
                      float *y, int64_t ldy)
{
    __m256 a0[4], a1[4];
    #pragma GCC unroll 4
    for (int i = 0; i < nx; i++)
        a0[i] = a1[i] = _mm256_setzero_ps();
    int64_t c = 0;
    for (; c + 16 <= k; c += 16) {
        __m256 w0 = fw_load8(dt, w, c), w1 = fw_load8(dt, w, c + 8);
        #pragma GCC unroll 4
        for (int i = 0; i < nx; i++) {
            const float *xr = x + (size_t)i * xs;
            a0[i] = _mm256_fmadd_ps(w0, _mm256_loadu_ps(xr + c), a0[i]);
            a1[i] = _mm256_fmadd_ps(w1, _mm256_loadu_ps(xr + c + 8), a1[i]);
        }
    }
    for (; c + 8 <= k; c += 8) {
        __m256 w0 = fw_load8(dt, w, c);
        #pragma GCC unroll 4
        for (int i = 0; i < nx; i++)
            a0[i] = _mm256_fmadd_ps(w0, _mm256_loadu_ps(x + (size_t)i * xs + c), a0[i]);
    }
    #pragma GCC unroll 4
    for (int i = 0; i < nx; i++) {
        float s = qk_hsum(_mm256_add_ps(a0[i], a1[i]));
        for (int64_t cc = c; cc < k; cc++)
            s += fw_get(dt, w, cc) * x[(size_t)i * xs + cc];
        y[i * ldy] = s;
    }
}

QK_INLINE void f_mm(int dt, int64_t k, const void *w, size_t ws, int nw, const void *x,
                    size_t xs, int nx, float *y, int64_t ldy)
{
    size_t xf = xs / sizeof(float);
    for (int j = 0; j < nw; j++) {
        const void *wr = (const uint8_t *)w + (size_t)j * ws;
        int i = 0;
        for (; i + 4 <= nx; i += 4)
            f_tile(dt, 4, k, wr, (const float *)x + i * xf, xf, y + i * ldy + j, ldy);
        const float *xr = (const float *)x + i * xf;
        float *yr = y + i * ldy + j;
        switch (nx - i) {
        case 3: f_tile(dt, 3, k, wr, xr, xf, yr, ldy); break;
        case 2: f_tile(dt, 2, k, wr, xr, xf, yr, ldy); break;
        case 1: f_tile(dt, 1, k, wr, xr, xf, yr, ldy); break;
        default: break;
        }
    }
}

static void mm_f32(int dt, int64_t k, const void *w, size_t ws, int nw, const void *x, size_t xs,
                   int nx, float *y, int64_t ldy)
{
    (void)dt;
    f_mm(DT_F32, k, w, ws, nw, x, xs, nx, y, ldy);
}
static void mm_f16(int dt, int64_t k, const void *w, size_t ws, int nw, const void *x, size_t xs,
                   int nx, float *y, int64_t ldy)
{
    (void)dt;
    f_mm(DT_F16, k, w, ws, nw, x, xs, nx, y, ldy);
}
static void mm_bf16(int dt, int64_t k, const void *w, size_t ws, int nw, const void *x,
                    size_t xs, int nx, float *y, int64_t ldy)
{
    (void)dt;
    f_mm(DT_BF16, k, w, ws, nw, x, xs, nx, y, ldy);
}

/* ---- attention and norm primitives ---- */

static float dot_kv_f32(const float *q, const void *krow, int n)
{
    const float *k = krow;
    __m256 a0 = _mm256_setzero_ps(), a1 = _mm256_setzero_ps();
    int i = 0;
    for (; i + 16 <= n; i += 16) {
        a0 = _mm256_fmadd_ps(_mm256_loadu_ps(q + i), _mm256_loadu_ps(k + i), a0);
        a1 = _mm256_fmadd_ps(_mm256_loadu_ps(q + i + 8), _mm256_loadu_ps(k + i + 8), a1);
    }
    for (; i + 8 <= n; i += 8)
        a0 = _mm256_fmadd_ps(_mm256_loadu_ps(q + i), _mm256_loadu_ps(k + i), a0);
    float s = qk_hsum(_mm256_add_ps(a0, a1));
    for (; i < n; i++)
        s += q[i] * k[i];
    return s;
}

static float dot_kv_f16(const float *q, const void *krow, int n)
{
    const uint16_t *k = krow;
    __m256 a0 = _mm256_setzero_ps(), a1 = _mm256_setzero_ps();
    int i = 0;
    for (; i + 16 <= n; i += 16) {
        a0 = _mm256_fmadd_ps(_mm256_loadu_ps(q + i), fw_load8(DT_F16, k, i), a0);
        a1 = _mm256_fmadd_ps(_mm256_loadu_ps(q + i + 8), fw_load8(DT_F16, k, i + 8), a1);
    }
    for (; i + 8 <= n; i += 8)
        a0 = _mm256_fmadd_ps(_mm256_loadu_ps(q + i), fw_load8(DT_F16, k, i), a0);
    float s = qk_hsum(_mm256_add_ps(a0, a1));
    for (; i < n; i++)
        s += q[i] * _cvtsh_ss(k[i]);
    return s;
}

/* acc += p * v, multiply then add (unfused) so the result matches the scalar reference. */
static void axpy_kv_f32(float *acc, float p, const void *vrow, int n)
{
    const float *v = vrow;
    __m256 vp = _mm256_set1_ps(p);
    int i = 0;
    for (; i + 8 <= n; i += 8)
        _mm256_storeu_ps(acc + i, _mm256_add_ps(_mm256_loadu_ps(acc + i),
                                                _mm256_mul_ps(vp, _mm256_loadu_ps(v + i))));
    for (; i < n; i++)
        acc[i] += p * v[i];
}

static void axpy_kv_f16(float *acc, float p, const void *vrow, int n)
{
    const uint16_t *v = vrow;
    __m256 vp = _mm256_set1_ps(p);
    int i = 0;
    for (; i + 8 <= n; i += 8)
        _mm256_storeu_ps(acc + i, _mm256_add_ps(_mm256_loadu_ps(acc + i),
                                                _mm256_mul_ps(vp, fw_load8(DT_F16, v, i))));
    for (; i < n; i++)
        acc[i] += p * _cvtsh_ss(v[i]);
}

static void scale_inplace(float *x, float s, int n)
{
    __m256 vs = _mm256_set1_ps(s);
    int i = 0;
    for (; i + 8 <= n; i += 8)
        _mm256_storeu_ps(x + i, _mm256_mul_ps(_mm256_loadu_ps(x + i), vs));
    for (; i < n; i++)
        x[i] *= s;
}

static float sumsq(const float *x, int n)
{
    __m256 a0 = _mm256_setzero_ps(), a1 = _mm256_setzero_ps();
    int i = 0;
    for (; i + 16 <= n; i += 16) {
        __m256 v0 = _mm256_loadu_ps(x + i), v1 = _mm256_loadu_ps(x + i + 8);
        a0 = _mm256_fmadd_ps(v0, v0, a0);
        a1 = _mm256_fmadd_ps(v1, v1, a1);
    }
    for (; i + 8 <= n; i += 8) {
        __m256 v0 = _mm256_loadu_ps(x + i);
        a0 = _mm256_fmadd_ps(v0, v0, a0);
    }
    float s = qk_hsum(_mm256_add_ps(a0, a1));
    for (; i < n; i++)
        s += x[i] * x[i];
    return s;
}

static void norm_mul(float *y, const float *x, float s, const float *w, int n)
{
    __m256 vs = _mm256_set1_ps(s);
    int i = 0;
    for (; i + 8 <= n; i += 8)
        _mm256_storeu_ps(y + i, _mm256_mul_ps(_mm256_mul_ps(_mm256_loadu_ps(x + i), vs),
                                              _mm256_loadu_ps(w + i)));
    for (; i < n; i++)
        y[i] = (x[i] * s) * w[i];
}

void cpu_kernels_avx2(struct cpu_kernels *k)
{
    k->mm[DT_F32] = mm_f32;
    k->mm[DT_F16] = mm_f16;
    k->mm[DT_BF16] = mm_bf16;
    qk_install(k);
    k->dot_kv[0] = dot_kv_f32;
    k->dot_kv[1] = dot_kv_f16;
    k->axpy_kv[0] = axpy_kv_f32;
    k->axpy_kv[1] = axpy_kv_f16;
    k->scale_inplace = scale_inplace;
    k->sumsq = sumsq;
    k->norm_mul = norm_mul;
}
