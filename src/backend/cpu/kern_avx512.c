/* kern_avx512.c — AVX-512 kernels (F/BW/VL/DQ + VNNI; installed only when the CPU reports
 * all of them): 512-bit float-weight matmul tiles, the quantized tiles of qk_x86.h on
 * 256-bit VNNI (vpdpbusd / vpdpwssd) with mask-register bit expansion, 512-bit K-quant
 * tiles, and 512-bit attention primitives. Entries not set here keep the AVX2 ones.
 */
#include <immintrin.h>
#include <stdint.h>

#include "backend/cpu/cpu_int.h"

static inline __m256i qk_dot4(__m256i acc, __m256i u, __m256i s)
{
    return _mm256_dpbusd_epi32(acc, u, s);
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

/* ---- K-quants on 512-bit vectors: Q4_K, Q5_K, Q6_K ----
 * One zmm holds 64 consecutive elements (4 groups of 16); vpermw spreads the 4 group scales
 * over the int16 pair sums. Same integer sums as qk_tilek, so results equal the 256-bit
 * tile's up to the float accumulation (one 16-lane accumulator per element). */

/* Unsigned values of elements [64c, 64c+64) of K block p. */
QK_INLINE __m512i zk_vec(int dt, const uint8_t *p, int c)
{
    const __m512i m4 = _mm512_set1_epi8(0x0f), m2 = _mm512_set1_epi8(3);
    if (dt == DT_Q6_K) { /* c = 2n + h: low (h = 0) or high (h = 1) nibbles of ql[64n..] */
        const struct blk_q6_k *b = (const struct blk_q6_k *)p;
        int n = c / 2, h = c % 2;
        __m512i l = _mm512_loadu_si512((const void *)(b->ql + n * 64));
        l = _mm512_and_si512(h ? _mm512_srli_epi16(l, 4) : l, m4);
        __m256i qh = _mm256_loadu_si256((const __m256i *)(b->qh + n * 32));
        __m512i hz = _mm512_inserti64x4(_mm512_castsi256_si512(qh), qh, 1);
        /* elements of quarter qq take bits 2qq..2qq+1: qq = 2h (low half), 2h+1 (high) */
        __m512i sh = _mm512_inserti64x4(_mm512_set1_epi16((short)(4 * h)),
                                        _mm256_set1_epi16((short)(4 * h + 2)), 1);
        __m512i hi = _mm512_and_si512(_mm512_srlv_epi16(hz, sh), m2);
        return _mm512_or_si512(l, _mm512_slli_epi16(hi, 4));
    }
    const uint8_t *qs = dt == DT_Q4_K ? ((const struct blk_q4_k *)p)->qs
                                      : ((const struct blk_q5_k *)p)->qs;
    __m256i q = _mm256_loadu_si256((const __m256i *)(qs + 32 * c));
    __m512i z = _mm512_inserti64x4(_mm512_castsi256_si512(q), q, 1);
    const __m512i nib = _mm512_inserti64x4(_mm512_setzero_si512(), _mm256_set1_epi16(4), 1);
    __m512i u = _mm512_and_si512(_mm512_srlv_epi16(z, nib), m4);
    if (dt == DT_Q5_K) { /* fifth bit: sub-block 2c (low half), 2c+1 (high half) of qh */
        __m256i qh = _mm256_loadu_si256((const __m256i *)((const struct blk_q5_k *)p)->qh);
        __m512i hz = _mm512_inserti64x4(_mm512_castsi256_si512(qh), qh, 1);
        __m512i sh = _mm512_inserti64x4(_mm512_set1_epi16((short)(2 * c)),
                                        _mm256_set1_epi16((short)(2 * c + 1)), 1);
        __m512i hb = _mm512_and_si512(_mm512_srlv_epi16(hz, sh), _mm512_set1_epi8(1));
        u = _mm512_or_si512(u, _mm512_slli_epi16(hb, 4));
    }
    return u;
}

QK_INLINE void zk_tile(int dt, int nx, int64_t nb, const uint8_t *w, const uint8_t *x,
                       size_t xs, float *y, int64_t ldy)
{
    const size_t bb = qk_bb(dt);
    __m512 acc[4];
#pragma GCC unroll 4
    for (int i = 0; i < nx; i++)
        acc[i] = _mm512_setzero_ps();
    for (int64_t b = 0; b < nb; b++) {
        const uint8_t *p = w + (size_t)b * bb;
        struct qk_kblk kb;
        qk_kblk_init(dt, p, &kb);
        __m512i sc16 = _mm512_castsi256_si512(_mm256_cvtepi8_epi16(kb.sc8));
        const __m512 dwv = _mm512_set1_ps(kb.d), dmv = _mm512_set1_ps(kb.dm);
        const int np = nx == 1 ? 2 : 1;
        __m512i sp[2][4];
#pragma GCC unroll 2
        for (int a = 0; a < np; a++)
#pragma GCC unroll 4
            for (int i = 0; i < nx; i++)
                sp[a][i] = _mm512_setzero_si512();
#pragma GCC unroll 4
        for (int c = 0; c < 4; c++) {
            __m512i u = zk_vec(dt, p, c);
            /* int16 lane j (pair sum of elements 2j, 2j+1 of this 64) -> group 4c + j/8 */
            const __m512i idx = _mm512_add_epi16(
                _mm512_set1_epi16((short)(4 * c)),
                _mm512_set_epi64(0x0003000300030003ll, 0x0003000300030003ll,
                                 0x0002000200020002ll, 0x0002000200020002ll,
                                 0x0001000100010001ll, 0x0001000100010001ll, 0, 0));
            __m512i sc = _mm512_permutexvar_epi16(idx, sc16);
#pragma GCC unroll 4
            for (int i = 0; i < nx; i++) {
                const struct blk_a8k *xb = (const struct blk_a8k *)(x + (size_t)i * xs) + b;
                __m512i xq = _mm512_loadu_si512((const void *)(xb->q + 64 * c));
                sp[c % np][i] = _mm512_dpwssd_epi32(sp[c % np][i], _mm512_maddubs_epi16(u, xq), sc);
            }
        }
#pragma GCC unroll 4
        for (int i = 0; i < nx; i++) {
            const struct blk_a8k *xb = (const struct blk_a8k *)(x + (size_t)i * xs) + b;
            __m512i sumi = np == 2 ? _mm512_add_epi32(sp[0][i], sp[1][i]) : sp[0][i];
            __m256i om = _mm256_madd_epi16(_mm256_loadu_si256((const __m256i *)xb->bsums), kb.off);
            __m512i omz = _mm512_zextsi256_si512(om);
            __m512 dx = _mm512_set1_ps(xb->d);
            if (dt == DT_Q6_K) { /* same coefficient: fold in exactly */
                acc[i] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(_mm512_add_epi32(sumi, omz)),
                                         _mm512_mul_ps(dwv, dx), acc[i]);
            } else {
                acc[i] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(sumi), _mm512_mul_ps(dwv, dx), acc[i]);
                acc[i] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(omz), _mm512_mul_ps(dmv, dx), acc[i]);
            }
        }
    }
#pragma GCC unroll 4
    for (int i = 0; i < nx; i++)
        y[i * ldy] = _mm512_reduce_add_ps(acc[i]);
}

QK_INLINE void zk_mm(int dt, int64_t k, const void *w, size_t ws, int nw, const void *x,
                     size_t xs, int nx, float *y, int64_t ldy)
{
    for (int j = 0; j < nw; j++) {
        const uint8_t *wr = (const uint8_t *)w + (size_t)j * ws;
        int i = 0;
        for (; i + 4 <= nx; i += 4)
            zk_tile(dt, 4, k / 256, wr, (const uint8_t *)x + (size_t)i * xs, xs, y + i * ldy + j, ldy);
        const uint8_t *xr = (const uint8_t *)x + (size_t)i * xs;
        float *yr = y + i * ldy + j;
        switch (nx - i) {
        case 3: zk_tile(dt, 3, k / 256, wr, xr, xs, yr, ldy); break;
        case 2: zk_tile(dt, 2, k / 256, wr, xr, xs, yr, ldy); break;
        case 1: zk_tile(dt, 1, k / 256, wr, xr, xs, yr, ldy); break;
        default: break;
        }
    }
}

static void zk_mm_q4_k(int dt, int64_t k, const void *w, size_t ws, int nw, const void *x,
                       size_t xs, int nx, float *y, int64_t ldy)
{
    (void)dt;
    zk_mm(DT_Q4_K, k, w, ws, nw, x, xs, nx, y, ldy);
}
static void zk_mm_q5_k(int dt, int64_t k, const void *w, size_t ws, int nw, const void *x,
                       size_t xs, int nx, float *y, int64_t ldy)
{
    (void)dt;
    zk_mm(DT_Q5_K, k, w, ws, nw, x, xs, nx, y, ldy);
}
static void zk_mm_q6_k(int dt, int64_t k, const void *w, size_t ws, int nw, const void *x,
                       size_t xs, int nx, float *y, int64_t ldy)
{
    (void)dt;
    zk_mm(DT_Q6_K, k, w, ws, nw, x, xs, nx, y, ldy);
}

/* ---- attention and norm primitives ---- */

/* Four dot products at once: one 16-lane accumulator each (masked tail), halves added,
 * then a fixed hadd tree; missing rows of a short group are zero vectors. */
QK_INLINE void dots4(int dt, const float *q, const void *const *rows, int nr, int n, float *out)
{
    __m512 a[4];
    const void *r[4];
#pragma GCC unroll 4
    for (int j = 0; j < 4; j++)
        a[j] = _mm512_setzero_ps(), r[j] = rows[j < nr ? j : 0];
    for (int i = 0; i < n; i += 16) {
        __mmask16 m = n - i >= 16 ? (__mmask16)0xffff : (__mmask16)((1u << (n - i)) - 1);
        __m512 qv = _mm512_maskz_loadu_ps(m, q + i);
#pragma GCC unroll 4
        for (int j = 0; j < 4; j++)
            if (j < nr)
                a[j] = _mm512_fmadd_ps(qv, fw_load16_mask(dt, r[j], i, m), a[j]);
    }
    __m256 b[4];
#pragma GCC unroll 4
    for (int j = 0; j < 4; j++)
        b[j] = _mm256_add_ps(_mm512_castps512_ps256(a[j]), _mm512_extractf32x8_ps(a[j], 1));
    __m256 h = _mm256_hadd_ps(_mm256_hadd_ps(b[0], b[1]), _mm256_hadd_ps(b[2], b[3]));
    __m128 s = _mm_add_ps(_mm256_castps256_ps128(h), _mm256_extractf128_ps(h, 1));
    if (nr == 4) {
        _mm_storeu_ps(out, s);
    } else {
        float o[4];
        _mm_storeu_ps(o, s);
        for (int j = 0; j < nr; j++)
            out[j] = o[j];
    }
}

static void dots_kv_f32(const float *q, const void *const *rows, int np, int n, float *out)
{
    for (int j = 0; j < np; j += 4)
        dots4(DT_F32, q, rows + j, np - j < 4 ? np - j : 4, n, out + j);
}

static void dots_kv_f16(const float *q, const void *const *rows, int np, int n, float *out)
{
    for (int j = 0; j < np; j += 4)
        dots4(DT_F16, q, rows + j, np - j < 4 ? np - j : 4, n, out + j);
}

/* acc += p[j] * row j for j in order, multiply then add (unfused), as the reference. */
QK_INLINE void axpys(int dt, float *acc, const float *p, const void *const *rows, int np, int n)
{
    for (int i = 0; i < n; i += 16) {
        __mmask16 m = n - i >= 16 ? (__mmask16)0xffff : (__mmask16)((1u << (n - i)) - 1);
        __m512 a = _mm512_maskz_loadu_ps(m, acc + i);
        for (int j = 0; j < np; j++)
            a = _mm512_add_ps(a, _mm512_mul_ps(_mm512_set1_ps(p[j]), fw_load16_mask(dt, rows[j], i, m)));
        _mm512_mask_storeu_ps(acc + i, m, a);
    }
}

static void axpys_kv_f32(float *acc, const float *p, const void *const *rows, int np, int n)
{
    axpys(DT_F32, acc, p, rows, np, n);
}

static void axpys_kv_f16(float *acc, const float *p, const void *const *rows, int np, int n)
{
    axpys(DT_F16, acc, p, rows, np, n);
}

void cpu_kernels_avx512(struct cpu_kernels *k)
{
    k->mm[DT_F32] = mm_f32;
    k->mm[DT_F16] = mm_f16;
    k->mm[DT_BF16] = mm_bf16;
    qk_install(k);
    k->mm[DT_Q4_K] = zk_mm_q4_k;
    k->mm[DT_Q5_K] = zk_mm_q5_k;
    k->mm[DT_Q6_K] = zk_mm_q6_k;
    k->dots_kv[0] = dots_kv_f32;
    k->dots_kv[1] = dots_kv_f16;
    k->axpys_kv[0] = axpys_kv_f32;
    k->axpys_kv[1] = axpys_kv_f16;
}
