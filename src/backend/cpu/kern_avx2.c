/* kern_avx2.c — AVX2 + FMA kernels (built with -mavx2 -mfma -mf16c; installed only when the
 * CPU reports AVX2 and FMA): float-weight matmul tiles, the quantized tiles of qk_x86.h
 * with maddubs/madd int8 products, and the attention / element-wise vector primitives.
 * Entries not set here keep the scalar reference.
 */
#include <immintrin.h>
#include <math.h>
#include <stdint.h>
#include <string.h>

#include "backend/cpu/cpu_int.h"

static inline __m256i qk_dot4(__m256i acc, __m256i u, __m256i s)
{
    return _mm256_add_epi32(acc, _mm256_madd_epi16(_mm256_maddubs_epi16(u, s), _mm256_set1_epi16(1)));
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

/* ---- activation quantization, bit-identical to quant_act_row() ---- */

/* |x| with NaN lanes as 0 (the scalar max ignores NaN). */
static inline __m256 absnn(__m256 v)
{
    __m256 a = _mm256_andnot_ps(_mm256_set1_ps(-0.0f), v);
    return _mm256_andnot_ps(_mm256_cmp_ps(v, v, _CMP_UNORD_Q), a);
}

/* round-half-even(x * s) clamped to [-127, 127] as int32 lanes, NaN -> 0. */
static inline __m256i round8(__m256 x, __m256 s)
{
    __m256 t = _mm256_mul_ps(x, s);
    __m256 v = _mm256_round_ps(t, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    v = _mm256_min_ps(_mm256_max_ps(v, _mm256_set1_ps(-127.0f)), _mm256_set1_ps(127.0f));
    v = _mm256_andnot_ps(_mm256_cmp_ps(t, t, _CMP_UNORD_Q), v);
    return _mm256_cvtps_epi32(v);
}

/* 32 int32 lanes (4 vectors) -> 32 int8 in order. */
static inline void pack32(int8_t *q, __m256i a, __m256i b, __m256i c, __m256i d)
{
    __m256i ab = _mm256_packs_epi32(a, b), cd = _mm256_packs_epi32(c, d);
    __m256i p = _mm256_packs_epi16(ab, cd);
    p = _mm256_permutevar8x32_epi32(p, _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7));
    _mm256_storeu_si256((__m256i *)q, p);
}

static inline int hsum_i32(__m256i v)
{
    __m128i s = _mm_add_epi32(_mm256_castsi256_si128(v), _mm256_extracti128_si256(v, 1));
    s = _mm_add_epi32(s, _mm_shuffle_epi32(s, _MM_SHUFFLE(1, 0, 3, 2)));
    s = _mm_add_epi32(s, _mm_shuffle_epi32(s, _MM_SHUFFLE(2, 3, 0, 1)));
    return _mm_cvtsi128_si32(s);
}

static inline float hmax_ps(__m256 v)
{
    __m128 m = _mm_max_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    m = _mm_max_ps(m, _mm_movehl_ps(m, m));
    m = _mm_max_ss(m, _mm_movehdup_ps(m));
    return _mm_cvtss_f32(m);
}

static inline float fp16_round(float f)
{
    return _cvtsh_ss(_cvtss_sh(f, _MM_FROUND_TO_NEAREST_INT));
}

static void quant_a8(const float *x, struct blk_a8 *y)
{
    __m256 v[4], m = _mm256_setzero_ps();
    for (int j = 0; j < 4; j++) {
        v[j] = _mm256_loadu_ps(x + 8 * j);
        m = _mm256_max_ps(m, absnn(v[j]));
    }
    float amax = hmax_ps(m);
    float d = amax / 127.0f;
    __m256 id = _mm256_set1_ps(amax != 0.0f ? 127.0f / amax : 0.0f);
    __m256i q[4];
    for (int j = 0; j < 4; j++)
        q[j] = round8(v[j], id);
    pack32(y->q, q[0], q[1], q[2], q[3]);
    int s = hsum_i32(_mm256_add_epi32(_mm256_add_epi32(q[0], q[1]), _mm256_add_epi32(q[2], q[3])));
    y->d = fp16_round(d);
    y->ds = fp16_round(d * (float)s);
    y->ns1 = -s;
    y->ns2 = -2 * s;
}

static void quant_a8k(const float *x, struct blk_a8k *y)
{
    __m256 m = _mm256_setzero_ps();
    for (int j = 0; j < 32; j++)
        m = _mm256_max_ps(m, absnn(_mm256_loadu_ps(x + 8 * j)));
    float amax = hmax_ps(m);
    if (amax == 0.0f) {
        memset(y, 0, sizeof *y);
        return;
    }
    float max = 0.0f;
    for (int i = 0; i < 256; i++) /* the first element of largest magnitude, as the scalar */
        if (fabsf(x[i]) == amax) {
            max = x[i];
            break;
        }
    float iscale = -127.0f / max;
    __m256 sc = _mm256_set1_ps(iscale);
    for (int g = 0; g < 8; g++) { /* 32 elements = groups 2g, 2g+1 */
        __m256i q0 = round8(_mm256_loadu_ps(x + 32 * g), sc);
        __m256i q1 = round8(_mm256_loadu_ps(x + 32 * g + 8), sc);
        __m256i q2 = round8(_mm256_loadu_ps(x + 32 * g + 16), sc);
        __m256i q3 = round8(_mm256_loadu_ps(x + 32 * g + 24), sc);
        pack32(y->q + 32 * g, q0, q1, q2, q3);
        y->bsums[2 * g] = (int16_t)hsum_i32(_mm256_add_epi32(q0, q1));
        y->bsums[2 * g + 1] = (int16_t)hsum_i32(_mm256_add_epi32(q2, q3));
    }
    y->d = 1.0f / iscale;
}

static void quant_act(int kind, const float *x, void *dst, int64_t k)
{
    if (kind == QA_A8) {
        struct blk_a8 *y = dst;
        for (int64_t b = 0; b < k / 32; b++)
            quant_a8(x + b * 32, &y[b]);
    } else if (kind == QA_A8K) {
        struct blk_a8k *y = dst;
        for (int64_t b = 0; b < k / 256; b++)
            quant_a8k(x + b * 256, &y[b]);
    } else {
        memcpy(dst, x, (size_t)k * sizeof(float));
    }
}

/* ---- attention and norm primitives ---- */

/* exp(x): n = round(x log2 e), r = x - n ln 2 (two-part ln 2), a degree-6 polynomial for
 * e^r (Cephes coefficients), times 2^n; x is clamped to 88.3 above and gives 0 below -87.3. */
static inline __m256 exp8(__m256 x)
{
    const __m256 lo = _mm256_set1_ps(-87.3f);
    __m256 under = _mm256_cmp_ps(x, lo, _CMP_LT_OQ);
    x = _mm256_min_ps(_mm256_max_ps(x, lo), _mm256_set1_ps(88.3f));
    __m256 n = _mm256_round_ps(_mm256_mul_ps(x, _mm256_set1_ps(1.44269504088896341f)),
                               _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    __m256 r = _mm256_fnmadd_ps(n, _mm256_set1_ps(0.693359375f), x);
    r = _mm256_fnmadd_ps(n, _mm256_set1_ps(-2.12194440e-4f), r);
    __m256 p = _mm256_set1_ps(1.9875691500e-4f);
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.3981999507e-3f));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(8.3334519073e-3f));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(4.1665795894e-2f));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.6666665459e-1f));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(5.0000001201e-1f));
    p = _mm256_fmadd_ps(p, _mm256_mul_ps(r, r), _mm256_add_ps(r, _mm256_set1_ps(1.0f)));
    __m256i e = _mm256_slli_epi32(_mm256_add_epi32(_mm256_cvtps_epi32(n), _mm256_set1_epi32(127)), 23);
    return _mm256_andnot_ps(under, _mm256_mul_ps(p, _mm256_castsi256_ps(e)));
}

static void exp_shift(float *s, float m, int n)
{
    __m256 vm = _mm256_set1_ps(m);
    int j = 0;
    for (; j + 8 <= n; j += 8)
        _mm256_storeu_ps(s + j, exp8(_mm256_sub_ps(_mm256_loadu_ps(s + j), vm)));
    if (j < n) {
        float t[8] = {0};
        for (int i = j; i < n; i++)
            t[i - j] = s[i] - m;
        _mm256_storeu_ps(t, exp8(_mm256_loadu_ps(t)));
        for (int i = j; i < n; i++)
            s[i] = t[i - j];
    }
}

/* F16C widening: the fw_load8 conversion of the F16 attention kernels. */
static void f16_to_f32(float *dst, const uint16_t *src, int n)
{
    int i = 0;
    for (; i + 8 <= n; i += 8)
        _mm256_storeu_ps(dst + i, _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(src + i))));
    for (; i < n; i++)
        dst[i] = _cvtsh_ss(src[i]);
}

/* F16C conversion; NaN payloads aside, equal to the scalar round-to-nearest-even. */
static void f32_to_f16(uint16_t *dst, const float *src, int n)
{
    int i = 0;
    for (; i + 8 <= n; i += 8)
        _mm_storeu_si128((__m128i *)(dst + i),
                         _mm256_cvtps_ph(_mm256_loadu_ps(src + i), _MM_FROUND_TO_NEAREST_INT));
    for (; i < n; i++)
        dst[i] = _cvtss_sh(src[i], _MM_FROUND_TO_NEAREST_INT);
}

/* act(g) * u for 8 lanes: g * sigmoid(z) = g / (1 + exp(-z)), times u. */
static inline __m256 act8(__m256 g, __m256 u, int act)
{
    __m256 z = g;
    if (act == BE_ACT_GELU_TANH) { /* 0.5 g (1 + tanh(y)) = g sigmoid(2y) */
        __m256 g3 = _mm256_mul_ps(_mm256_mul_ps(g, g), g);
        __m256 inner = _mm256_mul_ps(_mm256_set1_ps(0.7978845608028654f),
                                     _mm256_add_ps(g, _mm256_mul_ps(_mm256_set1_ps(0.044715f), g3)));
        z = _mm256_add_ps(inner, inner);
    }
    __m256 e = exp8(_mm256_sub_ps(_mm256_setzero_ps(), z));
    return _mm256_mul_ps(_mm256_div_ps(g, _mm256_add_ps(_mm256_set1_ps(1.0f), e)), u);
}

static void act_mul(float *y, const float *gate, const float *up, int64_t n, int act)
{
    int64_t i = 0;
    for (; i + 8 <= n; i += 8)
        _mm256_storeu_ps(y + i, act8(_mm256_loadu_ps(gate + i), _mm256_loadu_ps(up + i), act));
    if (i < n) { /* the tail through the same vector code */
        float g[8] = {0}, u[8] = {0}, r[8];
        for (int64_t j = i; j < n; j++)
            g[j - i] = gate[j], u[j - i] = up[j];
        _mm256_storeu_ps(r, act8(_mm256_loadu_ps(g), _mm256_loadu_ps(u), act));
        for (int64_t j = i; j < n; j++)
            y[j] = r[j - i];
    }
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

/* ---- attention chunks (cpu_int.h: kt_pack, at_chunk): one score per lane ---- */

/* 8 x 8 transpose: r[i] becomes column i. */
QK_INLINE void tr8(__m256 r[8])
{
    __m256 t[8], u[8];
#pragma GCC unroll 4
    for (int i = 0; i < 4; i++) {
        t[2 * i] = _mm256_unpacklo_ps(r[2 * i], r[2 * i + 1]);
        t[2 * i + 1] = _mm256_unpackhi_ps(r[2 * i], r[2 * i + 1]);
    }
#pragma GCC unroll 2
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
            __m256 r[8];
#pragma GCC unroll 8
            for (int j = 0; j < 8; j++) {
                if (j0 + j >= np) {
                    r[j] = _mm256_setzero_ps();
                } else if (nd == 8) {
                    r[j] = f16 ? fw_load8(DT_F16, rows[j0 + j], d0) : fw_load8(DT_F32, rows[j0 + j], d0);
                } else {
                    float t[8] = {0};
                    for (int i = 0; i < nd; i++)
                        t[i] = f16 ? fw_get(DT_F16, rows[j0 + j], d0 + i)
                                   : fw_get(DT_F32, rows[j0 + j], d0 + i);
                    r[j] = _mm256_loadu_ps(t);
                }
            }
            tr8(r);
            for (int i = 0; i < nd; i++)
                _mm256_storeu_ps(kt + (d0 + i) * CPU_AT_CH + j0, r[i]);
        }
}

/* Lanes (1 << k) - 1 of 8 as a blend mask, k in 0 .. 8. */
static inline __m256 lanes8(int k)
{
    static const int32_t ones[16] = {-1, -1, -1, -1, -1, -1, -1, -1, 0, 0, 0, 0, 0, 0, 0, 0};
    k = k < 0 ? 0 : k > 8 ? 8 : k;
    return _mm256_castsi256_ps(_mm256_loadu_si256((const __m256i *)(ones + 8 - k)));
}

/* Scores of NR rows (<= 2) over positions 16 h .. 16 h + 15 (two vectors a row). */
QK_INLINE void at_scores(const struct cpu_at_row *r, const int nr, const float *kt, int n, int h,
                         float s[2][CPU_AT_CH])
{
    __m256 ea[2], eb[2], oa[2], ob[2];
#pragma GCC unroll 2
    for (int i = 0; i < nr; i++)
        ea[i] = eb[i] = oa[i] = ob[i] = _mm256_setzero_ps();
    const float *k = kt + 16 * h;
    int d = 0;
    for (; d + 2 <= n; d += 2, k += 2 * CPU_AT_CH) {
        __m256 k0 = _mm256_loadu_ps(k), k1 = _mm256_loadu_ps(k + 8);
        __m256 k2 = _mm256_loadu_ps(k + CPU_AT_CH), k3 = _mm256_loadu_ps(k + CPU_AT_CH + 8);
#pragma GCC unroll 2
        for (int i = 0; i < nr; i++) {
            __m256 qe = _mm256_set1_ps(r[i].q[d]), qo = _mm256_set1_ps(r[i].q[d + 1]);
            ea[i] = _mm256_fmadd_ps(qe, k0, ea[i]);
            eb[i] = _mm256_fmadd_ps(qe, k1, eb[i]);
            oa[i] = _mm256_fmadd_ps(qo, k2, oa[i]);
            ob[i] = _mm256_fmadd_ps(qo, k3, ob[i]);
        }
    }
    if (d < n) {
        __m256 k0 = _mm256_loadu_ps(k), k1 = _mm256_loadu_ps(k + 8);
#pragma GCC unroll 2
        for (int i = 0; i < nr; i++) {
            __m256 qe = _mm256_set1_ps(r[i].q[d]);
            ea[i] = _mm256_fmadd_ps(qe, k0, ea[i]);
            eb[i] = _mm256_fmadd_ps(qe, k1, eb[i]);
        }
    }
#pragma GCC unroll 2
    for (int i = 0; i < nr; i++) {
        _mm256_storeu_ps(s[i] + 16 * h, _mm256_add_ps(ea[i], oa[i]));
        _mm256_storeu_ps(s[i] + 16 * h + 8, _mm256_add_ps(eb[i], ob[i]));
    }
}

/* at_chunk for NR rows (<= 2): scores a half at a time, V rows loaded once for both rows. */
QK_INLINE void at_tile(const struct cpu_at_row *r, const int nr, const float *kt,
                       const float *const *v, int n, float scale, float cap)
{
    float s[2][CPU_AT_CH];
    at_scores(r, nr, kt, n, 0, s);
    at_scores(r, nr, kt, n, 1, s);
    int jmin = CPU_AT_CH;
    const __m256 vs = _mm256_set1_ps(scale);
#pragma GCC unroll 2
    for (int i = 0; i < nr; i++) {
        const struct cpu_at_row *w = &r[i];
        int np = w->np;
        __m256 x[4], mk[4];
#pragma GCC unroll 4
        for (int c = 0; c < 4; c++)
            x[c] = _mm256_mul_ps(_mm256_loadu_ps(s[i] + 8 * c), vs), mk[c] = lanes8(np - 8 * c);
        if (cap > 0.0f) {
#pragma GCC unroll 4
            for (int c = 0; c < 4; c++)
                _mm256_storeu_ps(s[i] + 8 * c, x[c]);
            for (int j = 0; j < np; j++)
                s[i][j] = cap * tanhf(s[i][j] / cap);
#pragma GCC unroll 4
            for (int c = 0; c < 4; c++)
                x[c] = _mm256_loadu_ps(s[i] + 8 * c);
        }
        const __m256 ninf = _mm256_set1_ps(-INFINITY);
        __m256 mv = ninf;
#pragma GCC unroll 4
        for (int c = 0; c < 4; c++)
            mv = _mm256_max_ps(mv, _mm256_blendv_ps(ninf, x[c], mk[c]));
        __m128 m4 = _mm_max_ps(_mm256_castps256_ps128(mv), _mm256_extractf128_ps(mv, 1));
        m4 = _mm_max_ps(m4, _mm_movehl_ps(m4, m4));
        m4 = _mm_max_ss(m4, _mm_shuffle_ps(m4, m4, 1));
        float cm = _mm_cvtss_f32(m4);
        if (cm > *w->m) {
            float f = expf(*w->m - cm);
            *w->l *= f;
            scale_inplace(w->acc, f, n);
            *w->m = cm;
        }
        __m256 vm = _mm256_set1_ps(*w->m), sum = _mm256_setzero_ps();
#pragma GCC unroll 4
        for (int c = 0; c < 4; c++) {
            __m256 p = _mm256_and_ps(exp8(_mm256_sub_ps(x[c], vm)), mk[c]);
            sum = _mm256_add_ps(sum, p);
            _mm256_storeu_ps(s[i] + 8 * c, p);
        }
        *w->l += qk_hsum(sum);
        jmin = np < jmin ? np : jmin;
    }
    for (int d0 = 0; d0 < n; d0 += 32) {
        int nv = n - d0 >= 32 ? 4 : (n - d0) / 8, tail = n - d0 < 32 ? (n - d0) % 8 : 0;
        __m256 a[2][4];
        if (nv == 4) {
#pragma GCC unroll 2
            for (int i = 0; i < nr; i++)
#pragma GCC unroll 4
                for (int c = 0; c < 4; c++)
                    a[i][c] = _mm256_loadu_ps(r[i].acc + d0 + 8 * c);
            for (int j = 0; j < jmin; j++) {
                __m256 vv[4];
#pragma GCC unroll 4
                for (int c = 0; c < 4; c++)
                    vv[c] = _mm256_loadu_ps(v[j] + d0 + 8 * c);
#pragma GCC unroll 2
                for (int i = 0; i < nr; i++) {
                    __m256 pb = _mm256_set1_ps(s[i][j]);
#pragma GCC unroll 4
                    for (int c = 0; c < 4; c++)
                        a[i][c] = _mm256_fmadd_ps(pb, vv[c], a[i][c]);
                }
            }
#pragma GCC unroll 2
            for (int i = 0; i < nr; i++)
                for (int j = jmin; j < r[i].np; j++) {
                    __m256 pb = _mm256_set1_ps(s[i][j]);
#pragma GCC unroll 4
                    for (int c = 0; c < 4; c++)
                        a[i][c] = _mm256_fmadd_ps(pb, _mm256_loadu_ps(v[j] + d0 + 8 * c), a[i][c]);
                }
#pragma GCC unroll 2
            for (int i = 0; i < nr; i++)
#pragma GCC unroll 4
                for (int c = 0; c < 4; c++)
                    _mm256_storeu_ps(r[i].acc + d0 + 8 * c, a[i][c]);
            continue;
        }
        /* the last d < 32 of a row: whole vectors, then single elements (fmaf: the same
         * fused step as a lane) */
        for (int i = 0; i < nr; i++)
            for (int j = 0; j < r[i].np; j++) {
                __m256 pb = _mm256_set1_ps(s[i][j]);
                for (int c = 0; c < nv; c++)
                    _mm256_storeu_ps(r[i].acc + d0 + 8 * c,
                                     _mm256_fmadd_ps(pb, _mm256_loadu_ps(v[j] + d0 + 8 * c),
                                                     _mm256_loadu_ps(r[i].acc + d0 + 8 * c)));
                for (int e = d0 + 8 * nv; e < d0 + 8 * nv + tail; e++)
                    r[i].acc[e] = fmaf(s[i][j], v[j][e], r[i].acc[e]);
            }
    }
}

static void at_chunk(const struct cpu_at_row *r, int nr, const float *kt, const float *const *v,
                     int n, float scale, float cap)
{
    for (int i = 0; i < nr; i += 2) {
        if (nr - i >= 2)
            at_tile(r + i, 2, kt, v, n, scale, cap);
        else
            at_tile(r + i, 1, kt, v, n, scale, cap);
    }
}

void cpu_kernels_avx2(struct cpu_kernels *k)
{
    k->mm[DT_F32] = mm_f32;
    k->mm[DT_F16] = mm_f16;
    k->mm[DT_BF16] = mm_bf16;
    qk_install(k);
    k->exp_shift = exp_shift;
    k->kt_pack = kt_pack;
    k->at_chunk = at_chunk;
    k->f32_to_f16 = f32_to_f16;
    k->f16_to_f32 = f16_to_f32;
    k->act_mul = act_mul;
    k->quant_act = quant_act;
    k->scale_inplace = scale_inplace;
    k->norm_mul = norm_mul;
}
