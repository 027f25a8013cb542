/* kern_avx512.c — AVX-512 kernels (F/BW/VL/DQ + VNNI; installed only when the CPU reports
 * all of them): 512-bit float-weight matmul tiles, the quantized tiles of qk_x86.h on
 * 256-bit VNNI (vpdpbusd / vpdpwssd) with mask-register bit expansion, and 512-bit
 * attention / rmsnorm primitives. Entries not set here keep the AVX2 ones.
 */
#include <immintrin.h>
#include <stdint.h>

#include "backend/cpu/cpu_int.h"

static inline __m256i qk_dot4(__m256i u, __m256i s)
{
    return _mm256_dpbusd_epi32(_mm256_setzero_si256(), u, s);
}

static inline __m256i qk_dot16(__m256i acc, __m256i u, __m256i s, __m256i sc16)
{
    return _mm256_dpwssd_epi32(acc, _mm256_maddubs_epi16(u, s), sc16);
}

static inline __m256i qk_bits(uint32_t bits, int8_t v)
{
    return _mm256_maskz_set1_epi8((__mmask32)bits, v);
}

#include "backend/cpu/qk_x86.h"

/* ---- float weights: F32, F16, BF16 ---- */

QK_INLINE __m512 fw_load16(int dt, const void *w, int64_t i)
{
    if (dt == DT_F32)
        return _mm512_loadu_ps((const float *)w + i);
    __m256i h = _mm256_loadu_si256((const __m256i *)((const uint16_t *)w + i));
    if (dt == DT_F16)
        return _mm512_cvtph_ps(h);
    return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16));
}

QK_INLINE __m512 fw_load16_mask(int dt, const void *w, int64_t i, __mmask16 m)
{
    if (dt == DT_F32)
        return _mm512_maskz_loadu_ps(m, (const float *)w + i);
    __m256i h = _mm256_maskz_loadu_epi16(m, (const uint16_t *)w + i);
    if (dt == DT_F16)
        return _mm512_cvtph_ps(h);
    return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16));
}

/* One weight row against nx x rows: two 16-lane accumulators per element over 32-element
 * steps, then one masked 16-lane step per remaining 16 elements; a fixed horizontal sum. */
QK_INLINE void f_tile(int dt, int nx, int64_t k, const void *w, const float *x, size_t xs,
                      float *y, int64_t ldy)
{
    __m512 a0[4], a1[4];
    #pragma GCC unroll 4
    for (int i = 0; i < nx; i++)
        a0[i] = a1[i] = _mm512_setzero_ps();
    int64_t c = 0;
    for (; c + 32 <= k; c += 32) {
        __m512 w0 = fw_load16(dt, w, c), w1 = fw_load16(dt, w, c + 16);
        #pragma GCC unroll 4
        for (int i = 0; i < nx; i++) {
            const float *xr = x + (size_t)i * xs;
            a0[i] = _mm512_fmadd_ps(w0, _mm512_loadu_ps(xr + c), a0[i]);
            a1[i] = _mm512_fmadd_ps(w1, _mm512_loadu_ps(xr + c + 16), a1[i]);
        }
    }
    for (; c < k; c += 16) {
        __mmask16 m = k - c >= 16 ? (__mmask16)0xffff : (__mmask16)((1u << (k - c)) - 1);
        __m512 w0 = fw_load16_mask(dt, w, c, m);
        #pragma GCC unroll 4
        for (int i = 0; i < nx; i++)
            a0[i] = _mm512_fmadd_ps(w0, _mm512_maskz_loadu_ps(m, x + (size_t)i * xs + c), a0[i]);
    }
    #pragma GCC unroll 4
    for (int i = 0; i < nx; i++)
        y[i * ldy] = _mm512_reduce_add_ps(_mm512_add_ps(a0[i], a1[i]));
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

QK_INLINE float dot16(int dt, const float *q, const void *k, int n)
{
    __m512 a0 = _mm512_setzero_ps(), a1 = _mm512_setzero_ps();
    int i = 0;
    for (; i + 32 <= n; i += 32) {
        a0 = _mm512_fmadd_ps(_mm512_loadu_ps(q + i), fw_load16(dt, k, i), a0);
        a1 = _mm512_fmadd_ps(_mm512_loadu_ps(q + i + 16), fw_load16(dt, k, i + 16), a1);
    }
    for (; i < n; i += 16) {
        __mmask16 m = n - i >= 16 ? (__mmask16)0xffff : (__mmask16)((1u << (n - i)) - 1);
        a0 = _mm512_fmadd_ps(_mm512_maskz_loadu_ps(m, q + i), fw_load16_mask(dt, k, i, m), a0);
    }
    return _mm512_reduce_add_ps(_mm512_add_ps(a0, a1));
}

static float dot_kv_f32(const float *q, const void *krow, int n) { return dot16(DT_F32, q, krow, n); }
static float dot_kv_f16(const float *q, const void *krow, int n) { return dot16(DT_F16, q, krow, n); }

/* acc += p * v, multiply then add (unfused) so the result matches the scalar reference. */
QK_INLINE void axpy16(int dt, float *acc, float p, const void *v, int n)
{
    __m512 vp = _mm512_set1_ps(p);
    for (int i = 0; i < n; i += 16) {
        __mmask16 m = n - i >= 16 ? (__mmask16)0xffff : (__mmask16)((1u << (n - i)) - 1);
        __m512 a = _mm512_maskz_loadu_ps(m, acc + i);
        _mm512_mask_storeu_ps(acc + i, m, _mm512_add_ps(a, _mm512_mul_ps(vp, fw_load16_mask(dt, v, i, m))));
    }
}

static void axpy_kv_f32(float *acc, float p, const void *v, int n) { axpy16(DT_F32, acc, p, v, n); }
static void axpy_kv_f16(float *acc, float p, const void *v, int n) { axpy16(DT_F16, acc, p, v, n); }

static float sumsq(const float *x, int n)
{
    __m512 a0 = _mm512_setzero_ps(), a1 = _mm512_setzero_ps();
    int i = 0;
    for (; i + 32 <= n; i += 32) {
        __m512 v0 = _mm512_loadu_ps(x + i), v1 = _mm512_loadu_ps(x + i + 16);
        a0 = _mm512_fmadd_ps(v0, v0, a0);
        a1 = _mm512_fmadd_ps(v1, v1, a1);
    }
    for (; i < n; i += 16) {
        __mmask16 m = n - i >= 16 ? (__mmask16)0xffff : (__mmask16)((1u << (n - i)) - 1);
        __m512 v0 = _mm512_maskz_loadu_ps(m, x + i);
        a0 = _mm512_fmadd_ps(v0, v0, a0);
    }
    return _mm512_reduce_add_ps(_mm512_add_ps(a0, a1));
}

void cpu_kernels_avx512(struct cpu_kernels *k)
{
    k->mm[DT_F32] = mm_f32;
    k->mm[DT_F16] = mm_f16;
    k->mm[DT_BF16] = mm_bf16;
    qk_install(k);
    k->dot_kv[0] = dot_kv_f32;
    k->dot_kv[1] = dot_kv_f16;
    k->axpy_kv[0] = axpy_kv_f32;
    k->axpy_kv[1] = axpy_kv_f16;
    k->sumsq = sumsq;
}
