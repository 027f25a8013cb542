/* kern_avx512.c — AVX-512 kernels (F/BW/VL/DQ + VNNI; installed only when the CPU reports
 * all of them): 512-bit float-weight matmul tiles, the quantized tiles of qk_x86.h on
 * 256-bit VNNI (vpdpbusd / vpdpwssd) with mask-register bit expansion, 512-bit K-quant
 * tiles, and 512-bit attention primitives. Entries not set here keep the AVX2 ones.
 */
#include <immintrin.h>
#include <math.h>
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

/* ---- attention chunks (cpu_int.h: kt_pack, at_chunk): one score per lane ---- */

/* exp(x) on 16 lanes: the steps of exp8 in kern_avx2.c (Cephes polynomial, 2^n by exponent
 * bits, 0 below -87.3), at 512 bits. */
static inline __m512 exp16(__m512 x)
{
    const __m512 lo = _mm512_set1_ps(-87.3f);
    __mmask16 under = _mm512_cmp_ps_mask(x, lo, _CMP_LT_OQ);
    x = _mm512_min_ps(_mm512_max_ps(x, lo), _mm512_set1_ps(88.3f));
    __m512 n = _mm512_roundscale_ps(_mm512_mul_ps(x, _mm512_set1_ps(1.44269504088896341f)),
                                    _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    __m512 r = _mm512_fnmadd_ps(n, _mm512_set1_ps(0.693359375f), x);
    r = _mm512_fnmadd_ps(n, _mm512_set1_ps(-2.12194440e-4f), r);
    __m512 p = _mm512_set1_ps(1.9875691500e-4f);
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.3981999507e-3f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(8.3334519073e-3f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(4.1665795894e-2f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.6666665459e-1f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(5.0000001201e-1f));
    p = _mm512_fmadd_ps(p, _mm512_mul_ps(r, r), _mm512_add_ps(r, _mm512_set1_ps(1.0f)));
    __m512i e = _mm512_slli_epi32(_mm512_add_epi32(_mm512_cvtps_epi32(n), _mm512_set1_epi32(127)), 23);
    return _mm512_maskz_mul_ps((__mmask16)~under, p, _mm512_castsi512_ps(e));
}

/* 8 x 8 transpose: r[i] becomes column i. */
QK_INLINE void tr8(__m256 r[8])
{
    __m256 t[8], u[8];
    #pragma GCC unroll 4
    for (int i = 0; i < 4; i++) {
        t[2 * i] = _mm256_unpacklo_ps(r[2 * i], r[2 * i + 1]);
        t[2 * i + 1] = _mm256_unpackhi_ps(r[2 * i], r[2 * i + 1]);
    }
    #pragma GCC unroll 4
    for (int i = 0; i < 2; i++) {
        u[4 * i] = _mm256_shuffle_ps(t[4 * i], t[4 * i + 2], _MM_SHUFFLE(1, 0, 1, 0));
        u[4 * i + 1] = _mm256_shuffle_ps(t[4 * i], t[4 * i + 2], _MM_SHUFFLE(3, 2, 3, 2));
        u[4 * i + 2] = _mm256_shuffle_ps(t[4 * i + 1], t[4 * i + 3], _MM_SHUFFLE(1, 0, 1, 0));
        u[4 * i + 3] = _mm256_shuffle_ps(t[4 * i + 1], t[4 * i + 3], _MM_SHUFFLE(3, 2, 3, 2));
    }
    #pragma GCC unroll 4
    for (int i = 0; i < 4; i++) {
        r[i] = _mm256_permute2f128_ps(u[i], u[i + 4], 0x20);
        r[i + 4] = _mm256_permute2f128_ps(u[i], u[i + 4], 0x31);
    }
}

static void kt_pack(float *kt, const void *const *rows, int np, int n, int f16)
{
    for (int j0 = 0; j0 < CPU_AT_CH; j0 += 8)
        for (int d0 = 0; d0 < n; d0 += 8) {
            int nd = n - d0 < 8 ? n - d0 : 8;
            __mmask8 m = (__mmask8)((1u << nd) - 1);
            __m256 r[8];
#pragma GCC unroll 8
            for (int j = 0; j < 8; j++) {
                const void *src = rows[j0 + j < np ? j0 + j : 0];
                if (j0 + j >= np)
                    r[j] = _mm256_setzero_ps();
                else if (f16)
                    r[j] = _mm256_cvtph_ps(_mm_maskz_loadu_epi16(m, (const uint16_t *)src + d0));
                else
                    r[j] = _mm256_maskz_loadu_ps(m, (const float *)src + d0);
            }
            tr8(r);
            for (int i = 0; i < nd; i++)
                _mm256_storeu_ps(kt + (d0 + i) * CPU_AT_CH + j0, r[i]);
        }
}

/* at_chunk for NR rows (a compile-time constant after inlining): the K lanes and V rows
 * are loaded once for all rows; each row keeps its own accumulators. */
QK_INLINE void at_tile(const struct cpu_at_row *r, const int nr, const float *kt,
                       const float *const *v, int n, float scale, float cap)
{
    __m512 e0[4], e1[4], o0[4], o1[4];
    #pragma GCC unroll 4
    for (int i = 0; i < nr; i++)
        e0[i] = e1[i] = o0[i] = o1[i] = _mm512_setzero_ps();
    int d = 0;
    for (; d + 2 <= n; d += 2) {
        const float *k = kt + d * CPU_AT_CH;
        __m512 k0 = _mm512_loadu_ps(k), k1 = _mm512_loadu_ps(k + 16);
        __m512 k2 = _mm512_loadu_ps(k + 32), k3 = _mm512_loadu_ps(k + 48);
        #pragma GCC unroll 4
        for (int i = 0; i < nr; i++) {
            __m512 qe = _mm512_set1_ps(r[i].q[d]), qo = _mm512_set1_ps(r[i].q[d + 1]);
            e0[i] = _mm512_fmadd_ps(qe, k0, e0[i]);
            e1[i] = _mm512_fmadd_ps(qe, k1, e1[i]);
            o0[i] = _mm512_fmadd_ps(qo, k2, o0[i]);
            o1[i] = _mm512_fmadd_ps(qo, k3, o1[i]);
        }
    }
    if (d < n) {
        const float *k = kt + d * CPU_AT_CH;
        __m512 k0 = _mm512_loadu_ps(k), k1 = _mm512_loadu_ps(k + 16);
        #pragma GCC unroll 4
        for (int i = 0; i < nr; i++) {
            __m512 qe = _mm512_set1_ps(r[i].q[d]);
            e0[i] = _mm512_fmadd_ps(qe, k0, e0[i]);
            e1[i] = _mm512_fmadd_ps(qe, k1, e1[i]);
        }
    }
    float p[4][CPU_AT_CH];
    int jmin = CPU_AT_CH;
    const __m512 vs = _mm512_set1_ps(scale);
    #pragma GCC unroll 4
    for (int i = 0; i < nr; i++) {
        const struct cpu_at_row *w = &r[i];
        int np = w->np;
        __m512 s0 = _mm512_mul_ps(_mm512_add_ps(e0[i], o0[i]), vs);
        __m512 s1 = _mm512_mul_ps(_mm512_add_ps(e1[i], o1[i]), vs);
        if (cap > 0.0f) {
            float t[CPU_AT_CH];
            _mm512_storeu_ps(t, s0);
            _mm512_storeu_ps(t + 16, s1);
            for (int j = 0; j < np; j++)
                t[j] = cap * tanhf(t[j] / cap);
            s0 = _mm512_loadu_ps(t);
            s1 = _mm512_loadu_ps(t + 16);
        }
        __mmask16 m0 = np >= 16 ? (__mmask16)0xffff : (__mmask16)((1u << np) - 1);
        __mmask16 m1 = np >= 32 ? (__mmask16)0xffff
                       : np > 16 ? (__mmask16)((1u << (np - 16)) - 1)
                                 : (__mmask16)0;
        float c0 = _mm512_mask_reduce_max_ps(m0, s0), c1 = _mm512_mask_reduce_max_ps(m1, s1);
        float cm = c1 > c0 ? c1 : c0;
        if (cm > *w->m) {
            float f = expf(*w->m - cm);
            *w->l *= f;
            __m512 vf = _mm512_set1_ps(f);
            for (int x = 0; x < n; x += 16) {
                __mmask16 mk = n - x >= 16 ? (__mmask16)0xffff : (__mmask16)((1u << (n - x)) - 1);
                _mm512_mask_storeu_ps(w->acc + x, mk,
                                      _mm512_mul_ps(_mm512_maskz_loadu_ps(mk, w->acc + x), vf));
            }
            *w->m = cm;
        }
        __m512 vm = _mm512_set1_ps(*w->m);
        __m512 p0 = _mm512_maskz_mov_ps(m0, exp16(_mm512_sub_ps(s0, vm)));
        __m512 p1 = _mm512_maskz_mov_ps(m1, exp16(_mm512_sub_ps(s1, vm)));
        *w->l += _mm512_reduce_add_ps(_mm512_add_ps(p0, p1));
        _mm512_storeu_ps(p[i], p0);
        _mm512_storeu_ps(p[i] + 16, p1);
        jmin = np < jmin ? np : jmin;
    }
    for (int d0 = 0; d0 < n; d0 += 64) {
        __mmask16 mk[4];
        #pragma GCC unroll 4
        for (int c = 0; c < 4; c++) {
            int rem = n - d0 - 16 * c;
            mk[c] = rem >= 16 ? (__mmask16)0xffff : rem > 0 ? (__mmask16)((1u << rem) - 1) : 0;
        }
        __m512 a[4][4];
        #pragma GCC unroll 4
        for (int i = 0; i < nr; i++)
            #pragma GCC unroll 4
            for (int c = 0; c < 4; c++)
                a[i][c] = _mm512_maskz_loadu_ps(mk[c], r[i].acc + d0 + 16 * c);
        for (int j = 0; j < jmin; j++) {
            __m512 vv[4];
            #pragma GCC unroll 4
            for (int c = 0; c < 4; c++)
                vv[c] = _mm512_maskz_loadu_ps(mk[c], v[j] + d0 + 16 * c);
            #pragma GCC unroll 4
            for (int i = 0; i < nr; i++) {
                __m512 pb = _mm512_set1_ps(p[i][j]);
                #pragma GCC unroll 4
                for (int c = 0; c < 4; c++)
                    a[i][c] = _mm512_fmadd_ps(pb, vv[c], a[i][c]);
            }
        }
        #pragma GCC unroll 4
        for (int i = 0; i < nr; i++)
            for (int j = jmin; j < r[i].np; j++) {
                __m512 pb = _mm512_set1_ps(p[i][j]);
                #pragma GCC unroll 4
                for (int c = 0; c < 4; c++)
                    a[i][c] = _mm512_fmadd_ps(pb, _mm512_maskz_loadu_ps(mk[c], v[j] + d0 + 16 * c),
                                              a[i][c]);
            }
        #pragma GCC unroll 4
        for (int i = 0; i < nr; i++)
            #pragma GCC unroll 4
            for (int c = 0; c < 4; c++)
                _mm512_mask_storeu_ps(r[i].acc + d0 + 16 * c, mk[c], a[i][c]);
    }
}

static void at_chunk(const struct cpu_at_row *r, int nr, const float *kt, const float *const *v,
                     int n, float scale, float cap)
{
    switch (nr) {
    case 4: at_tile(r, 4, kt, v, n, scale, cap); break;
    case 3: at_tile(r, 3, kt, v, n, scale, cap); break;
    case 2: at_tile(r, 2, kt, v, n, scale, cap); break;
    default: at_tile(r, 1, kt, v, n, scale, cap); break;
    }
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
    k->kt_pack = kt_pack;
    k->at_chunk = at_chunk;
}
