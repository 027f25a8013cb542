/* qk_x86.h — quantized matmul tiles for x86, shared by kern_avx2.c and kern_avx512.c.
 *
 * Included (once) by a kernel file after it defines three int8 primitives for its ISA:
 *   __m256i qk_dot4(__m256i acc, __m256i u, __m256i s)
 *                                              acc + int32 lanes of sums of 4 u8*s8 products
 *   __m256i qk_dot16(__m256i acc, __m256i u, __m256i s, __m256i sc16)
 *                                              acc + madd(maddubs(u, s), sc16)
 *   __m256i qk_bits(uint32_t bits, int8_t v)   byte k = v if bit k of bits is set, else 0
 * The weights are unpacked to unsigned bytes; offsets (-8, -16, -32, mins) are applied
 * through the activation block sums. A tile is up to 4 x rows against one weight row; each
 * output element owns its accumulators and gets the same operation sequence whatever the
 * tile height, which keeps matmul batch invariant.
 */
#ifndef CINFER_BACKEND_CPU_QK_X86_H
#define CINFER_BACKEND_CPU_QK_X86_H

#include <immintrin.h>
#include <string.h>

#include "backend/cpu/cpu_int.h"

#define QK_INLINE static inline __attribute__((always_inline))

/* Block size in bytes, as a constant the compiler can fold. */
QK_INLINE size_t qk_bb(int dt)
{
    switch (dt) {
    case DT_Q4_0: return sizeof(struct blk_q4_0);
    case DT_Q4_1: return sizeof(struct blk_q4_1);
    case DT_Q5_0: return sizeof(struct blk_q5_0);
    case DT_Q5_1: return sizeof(struct blk_q5_1);
    case DT_Q8_0: return sizeof(struct blk_q8_0);
    case DT_Q2_K: return sizeof(struct blk_q2_k);
    case DT_Q3_K: return sizeof(struct blk_q3_k);
    case DT_Q4_K: return sizeof(struct blk_q4_k);
    case DT_Q5_K: return sizeof(struct blk_q5_k);
    default: return sizeof(struct blk_q6_k);
    }
}

QK_INLINE float qk_hsum(__m256 v)
{
    __m128 lo = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    lo = _mm_add_ps(lo, _mm_movehl_ps(lo, lo));
    lo = _mm_add_ss(lo, _mm_movehdup_ps(lo));
    return _mm_cvtss_f32(lo);
}

QK_INLINE float qk_h2f(const uint8_t *p)
{
    uint16_t h;
    memcpy(&h, p, 2);
    return _cvtsh_ss(h);
}

/* 16 bytes of packed nibbles -> 32 bytes: low nibbles first, then high nibbles. */
QK_INLINE __m256i qk_nibbles(const uint8_t *qs)
{
    __m128i q = _mm_loadu_si128((const __m128i *)qs);
    __m256i v = _mm256_set_m128i(_mm_srli_epi16(q, 4), q);
    return _mm256_and_si256(v, _mm256_set1_epi8(0x0f));
}

/* ---- 32-element blocks: Q4_0, Q4_1, Q5_0, Q5_1, Q8_0 ---- */

/* Unpacks block p: *u = unsigned values (signed for Q8_0), *d = scale, *c = the min of
 * Q4_1/Q5_1 (times the activation block's d*sum); 0 for the others, whose -8/-16 offsets
 * are applied in integers (qk_dot32). */
QK_INLINE void qk_unpack32(int dt, const uint8_t *p, __m256i *u, float *d, float *c)
{
    uint32_t qh;
    switch (dt) {
    case DT_Q4_0:
        *d = qk_h2f(p), *c = 0.0f;
        *u = qk_nibbles(p + 2);
        break;
    case DT_Q4_1:
        *d = qk_h2f(p), *c = qk_h2f(p + 2);
        *u = qk_nibbles(p + 4);
        break;
    case DT_Q5_0:
        *d = qk_h2f(p), *c = 0.0f;
        memcpy(&qh, p + 2, 4);
        *u = _mm256_or_si256(qk_nibbles(p + 6), qk_bits(qh, 0x10));
        break;
    case DT_Q5_1:
        *d = qk_h2f(p), *c = qk_h2f(p + 2);
        memcpy(&qh, p + 4, 4);
        *u = _mm256_or_si256(qk_nibbles(p + 8), qk_bits(qh, 0x10));
        break;
    default: /* DT_Q8_0 */
        *d = qk_h2f(p), *c = 0.0f;
        *u = _mm256_loadu_si256((const __m256i *)(p + 2));
    }
}

/* int32 lanes summing to the block's exact integer dot product (offsets included). */
QK_INLINE __m256i qk_dot32(int dt, __m256i u, const struct blk_a8 *xb)
{
    __m256i xq = _mm256_loadu_si256((const __m256i *)xb->q);
    if (dt == DT_Q8_0) /* signed x signed: |w| times x carrying w's sign */
        return qk_dot4(_mm256_setzero_si256(), _mm256_sign_epi8(u, u), _mm256_sign_epi8(xq, u));
    /* (u - o) . x = u . x - o * sum(x): start each of the 8 lanes at -o/8 * sum(x) */
    if (dt == DT_Q4_0)
        return qk_dot4(_mm256_set1_epi32(xb->ns1), u, xq);
    if (dt == DT_Q5_0)
        return qk_dot4(_mm256_set1_epi32(xb->ns2), u, xq);
    return qk_dot4(_mm256_setzero_si256(), u, xq);
}

/* y[i * ldy] for i < nx: one weight row (nb blocks) against nx activation rows. Two
 * accumulators per element (even / odd blocks) plus a scalar for the block-sum terms. */
QK_INLINE void qk_tile32(int dt, int nx, int64_t nb, const uint8_t *w, const uint8_t *x,
                         size_t xs, float *y, int64_t ldy)
{
    const size_t bb = qk_bb(dt);
    __m256 acc0[4], acc1[4];
    float corr[4];
    #pragma GCC unroll 4
    for (int i = 0; i < nx; i++)
        acc0[i] = acc1[i] = _mm256_setzero_ps(), corr[i] = 0.0f;
    int64_t b = 0;
    for (; b + 1 < nb; b += 2) {
        __m256i u0, u1;
        float d0, d1, c0, c1;
        qk_unpack32(dt, w + (size_t)b * bb, &u0, &d0, &c0);
        qk_unpack32(dt, w + (size_t)(b + 1) * bb, &u1, &d1, &c1);
        /* d_w * d_x as a vector product with a broadcast load: same value, no shuffle */
        const __m256 dw0 = _mm256_set1_ps(d0), dw1 = _mm256_set1_ps(d1);
        #pragma GCC unroll 4
        for (int i = 0; i < nx; i++) {
            const struct blk_a8 *xb = (const struct blk_a8 *)(x + (size_t)i * xs) + b;
            __m256i p0 = qk_dot32(dt, u0, &xb[0]);
            __m256i p1 = qk_dot32(dt, u1, &xb[1]);
            acc0[i] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(p0),
                                      _mm256_mul_ps(dw0, _mm256_broadcast_ss(&xb[0].d)), acc0[i]);
            acc1[i] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(p1),
                                      _mm256_mul_ps(dw1, _mm256_broadcast_ss(&xb[1].d)), acc1[i]);
            if (dt == DT_Q4_1 || dt == DT_Q5_1) {
                corr[i] += c0 * xb[0].ds;
                corr[i] += c1 * xb[1].ds;
            }
        }
    }
    if (b < nb) {
        __m256i u0;
        float d0, c0;
        qk_unpack32(dt, w + (size_t)b * bb, &u0, &d0, &c0);
        #pragma GCC unroll 4
        for (int i = 0; i < nx; i++) {
            const struct blk_a8 *xb = (const struct blk_a8 *)(x + (size_t)i * xs) + b;
            __m256i p0 = qk_dot32(dt, u0, xb);
            acc0[i] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(p0),
                                      _mm256_mul_ps(_mm256_set1_ps(d0), _mm256_broadcast_ss(&xb->d)), acc0[i]);
            if (dt == DT_Q4_1 || dt == DT_Q5_1)
                corr[i] += c0 * xb->ds;
        }
    }
    #pragma GCC unroll 4
    for (int i = 0; i < nx; i++)
        y[i * ldy] = qk_hsum(_mm256_add_ps(acc0[i], acc1[i])) + corr[i];
}

/* ---- 256-element K blocks ---- */

/* Per-block constants of a K block: per-group int8 scales, the int16 per-group offsets
 * that multiply the activation group sums, and the two float coefficients. */
struct qk_kblk {
    __m128i sc8;    /* 16 x int8: scale of group g */
    __m256i off;    /* 16 x int16: coefficient of bsums[g] */
    float d, dm;    /* sumi * d + (bsums . off) * dm  (dm = d for Q3_K/Q6_K) */
};

QK_INLINE void qk_kblk_init(int dt, const uint8_t *p, struct qk_kblk *k)
{
    const __m128i m4 = _mm_set1_epi8(0x0f), m2 = _mm_set1_epi8(3);
    switch (dt) {
    case DT_Q2_K: {
        const struct blk_q2_k *b = (const struct blk_q2_k *)p;
        __m128i s = _mm_loadu_si128((const __m128i *)b->scales);
        k->sc8 = _mm_and_si128(s, m4);
        __m256i mn = _mm256_cvtepu8_epi16(_mm_and_si128(_mm_srli_epi16(s, 4), m4));
        k->off = _mm256_sub_epi16(_mm256_setzero_si256(), mn);
        k->d = _cvtsh_ss(b->d), k->dm = _cvtsh_ss(b->dmin);
        break;
    }
    case DT_Q3_K: {
        const struct blk_q3_k *b = (const struct blk_q3_k *)p;
        __m128i l8 = _mm_loadl_epi64((const __m128i *)b->scales);
        __m128i lo = _mm_unpacklo_epi64(_mm_and_si128(l8, m4),
                                        _mm_and_si128(_mm_srli_epi16(l8, 4), m4));
        uint32_t a;
        memcpy(&a, b->scales + 8, 4);
        __m128i hi = _mm_and_si128(_mm_set_epi32((int)(a >> 6), (int)(a >> 4), (int)(a >> 2), (int)a), m2);
        k->sc8 = _mm_sub_epi8(_mm_or_si128(lo, _mm_slli_epi16(hi, 4)), _mm_set1_epi8(32));
        k->off = _mm256_slli_epi16(_mm256_sub_epi16(_mm256_setzero_si256(), _mm256_cvtepi8_epi16(k->sc8)), 2);
        k->d = k->dm = _cvtsh_ss(b->d);
        break;
    }
    case DT_Q4_K:
    case DT_Q5_K: {
        const struct blk_q4_k *b = (const struct blk_q4_k *)p; /* same header for Q5_K */
        /* 8 six-bit scales and mins from 12 bytes, as 4 dwords: scales 0-3, 4-7, mins 0-3,
         * 4-7 (the 16-byte load stays inside the block) */
        __m128i s = _mm_loadu_si128((const __m128i *)b->scales);
        const __m128i k1 = _mm_set1_epi32(0x3f3f3f3f), k2 = _mm_set1_epi32(0x0f0f0f0f),
                      k3 = _mm_set1_epi32(0x03030303);
        __m128i a = _mm_shuffle_epi32(s, _MM_SHUFFLE(2, 1, 2, 0)); /* u0 u2 u1 u2 */
        __m128i c = _mm_shuffle_epi32(s, _MM_SHUFFLE(1, 1, 0, 0)); /* u0 u0 u1 u1 */
        __m128i t = _mm_and_si128(_mm_srlv_epi32(a, _mm_setr_epi32(0, 0, 0, 4)), k2);
        __m128i h = _mm_slli_epi32(_mm_and_si128(_mm_srli_epi32(c, 6), k3), 4);
        __m128i v = _mm_blend_epi32(_mm_and_si128(a, k1), _mm_or_si128(t, h), 0xa);
        const __m128i dup = _mm_setr_epi8(0, 0, 1, 1, 2, 2, 3, 3, 4, 4, 5, 5, 6, 6, 7, 7);
        k->sc8 = _mm_shuffle_epi8(v, dup);
        __m256i mn = _mm256_cvtepu8_epi16(_mm_shuffle_epi8(_mm_srli_si128(v, 8), dup));
        k->off = _mm256_sub_epi16(_mm256_setzero_si256(), mn);
        k->d = _cvtsh_ss(b->d), k->dm = _cvtsh_ss(b->dmin);
        break;
    }
    default: { /* DT_Q6_K */
        const struct blk_q6_k *b = (const struct blk_q6_k *)p;
        k->sc8 = _mm_loadu_si128((const __m128i *)b->scales);
        k->off = _mm256_slli_epi16(_mm256_sub_epi16(_mm256_setzero_si256(), _mm256_cvtepi8_epi16(k->sc8)), 5);
        k->d = k->dm = _cvtsh_ss(b->d);
    }
    }
}

/* int16 scale vector of 32-element vector v: low 128 bits group 2v, high 128 bits 2v+1. */
QK_INLINE __m256i qk_kscale(const struct qk_kblk *k, int v)
{
    const __m128i sel = _mm_setr_epi8((char)(2 * v), (char)(2 * v), (char)(2 * v), (char)(2 * v),
                                      (char)(2 * v), (char)(2 * v), (char)(2 * v), (char)(2 * v),
                                      (char)(2 * v + 1), (char)(2 * v + 1), (char)(2 * v + 1),
                                      (char)(2 * v + 1), (char)(2 * v + 1), (char)(2 * v + 1),
                                      (char)(2 * v + 1), (char)(2 * v + 1));
    return _mm256_cvtepi8_epi16(_mm_shuffle_epi8(k->sc8, sel));
}

/* Unsigned values of elements [32v, 32v+32) of K block p. */
QK_INLINE __m256i qk_kvec(int dt, const uint8_t *p, int v)
{
    const __m256i m4 = _mm256_set1_epi8(0x0f), m2 = _mm256_set1_epi8(3);
    switch (dt) {
    case DT_Q2_K: {
        const struct blk_q2_k *b = (const struct blk_q2_k *)p;
        __m256i q = _mm256_loadu_si256((const __m256i *)(b->qs + (v / 4) * 32));
        return _mm256_and_si256(_mm256_srli_epi16(q, 2 * (v % 4)), m2);
    }
    case DT_Q3_K: {
        const struct blk_q3_k *b = (const struct blk_q3_k *)p;
        __m256i q = _mm256_loadu_si256((const __m256i *)(b->qs + (v / 4) * 32));
        __m256i lo = _mm256_and_si256(_mm256_srli_epi16(q, 2 * (v % 4)), m2);
        __m256i hm = _mm256_loadu_si256((const __m256i *)b->hmask);
        __m256i hi = _mm256_and_si256(_mm256_srli_epi16(hm, v), _mm256_set1_epi8(1));
        return _mm256_or_si256(lo, _mm256_slli_epi16(hi, 2));
    }
    case DT_Q4_K: {
        const struct blk_q4_k *b = (const struct blk_q4_k *)p;
        __m256i q = _mm256_loadu_si256((const __m256i *)(b->qs + (v / 2) * 32));
        return _mm256_and_si256(v & 1 ? _mm256_srli_epi16(q, 4) : q, m4);
    }
    case DT_Q5_K: {
        const struct blk_q5_k *b = (const struct blk_q5_k *)p;
        __m256i q = _mm256_loadu_si256((const __m256i *)(b->qs + (v / 2) * 32));
        __m256i lo = _mm256_and_si256(v & 1 ? _mm256_srli_epi16(q, 4) : q, m4);
        __m256i hm = _mm256_loadu_si256((const __m256i *)b->qh);
        __m256i hi = _mm256_and_si256(_mm256_srli_epi16(hm, v), _mm256_set1_epi8(1));
        return _mm256_or_si256(lo, _mm256_slli_epi16(hi, 4));
    }
    default: { /* DT_Q6_K: v = 4n + qq */
        const struct blk_q6_k *b = (const struct blk_q6_k *)p;
        int n = v / 4, qq = v % 4;
        __m256i l = _mm256_loadu_si256((const __m256i *)(b->ql + n * 64 + (qq & 1) * 32));
        __m256i h = _mm256_loadu_si256((const __m256i *)(b->qh + n * 32));
        __m256i lo = _mm256_and_si256(qq >= 2 ? _mm256_srli_epi16(l, 4) : l, m4);
        __m256i hi = _mm256_and_si256(_mm256_srli_epi16(h, 2 * qq), m2);
        return _mm256_or_si256(lo, _mm256_slli_epi16(hi, 4));
    }
    }
}

QK_INLINE void qk_tilek(int dt, int nx, int64_t nb, const uint8_t *w, const uint8_t *x,
                        size_t xs, float *y, int64_t ldy)
{
    const size_t bb = qk_bb(dt);
    __m256 acc[4];
    #pragma GCC unroll 4
    for (int i = 0; i < nx; i++)
        acc[i] = _mm256_setzero_ps();
    for (int64_t b = 0; b < nb; b++) {
        const uint8_t *p = w + (size_t)b * bb;
        struct qk_kblk kb;
        qk_kblk_init(dt, p, &kb);
        /* integer partial sums over alternating vectors break the vpdpwssd dependency
         * chain; integer addition is exact, so this changes no result */
        const int np = nx == 1 ? 4 : 2;
        __m256i sp[4][4];
#pragma GCC unroll 4
        for (int a = 0; a < np; a++)
#pragma GCC unroll 4
            for (int i = 0; i < nx; i++)
                sp[a][i] = _mm256_setzero_si256();
#pragma GCC unroll 8
        for (int v = 0; v < 8; v++) {
            __m256i u = qk_kvec(dt, p, v);
            __m256i sc = qk_kscale(&kb, v);
#pragma GCC unroll 4
            for (int i = 0; i < nx; i++) {
                const struct blk_a8k *xb = (const struct blk_a8k *)(x + (size_t)i * xs) + b;
                __m256i xq = _mm256_loadu_si256((const __m256i *)(xb->q + 32 * v));
                sp[v % np][i] = qk_dot16(sp[v % np][i], u, xq, sc);
            }
        }
        __m256i sumi[4];
#pragma GCC unroll 4
        for (int i = 0; i < nx; i++) {
            sumi[i] = _mm256_add_epi32(sp[0][i], sp[1][i]);
            if (np == 4)
                sumi[i] = _mm256_add_epi32(sumi[i], _mm256_add_epi32(sp[2][i], sp[3][i]));
        }
        for (int i = 0; i < nx; i++) {
            const struct blk_a8k *xb = (const struct blk_a8k *)(x + (size_t)i * xs) + b;
            __m256i om = _mm256_madd_epi16(_mm256_loadu_si256((const __m256i *)xb->bsums), kb.off);
            if (dt == DT_Q3_K || dt == DT_Q6_K) { /* same coefficient: fold in exactly */
                acc[i] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(_mm256_add_epi32(sumi[i], om)),
                                         _mm256_set1_ps(kb.d * xb->d), acc[i]);
            } else {
                acc[i] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(sumi[i]), _mm256_set1_ps(kb.d * xb->d), acc[i]);
                acc[i] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(om), _mm256_set1_ps(kb.dm * xb->d), acc[i]);
            }
        }
    }
    #pragma GCC unroll 4
    for (int i = 0; i < nx; i++)
        y[i * ldy] = qk_hsum(acc[i]);
}

/* ---- the cpu_mm_fn entry points ---- */

QK_INLINE void qk_tile(int dt, int nx, int64_t k, const uint8_t *w, const uint8_t *x, size_t xs,
                       float *y, int64_t ldy)
{
    if (dt == DT_Q4_0 || dt == DT_Q4_1 || dt == DT_Q5_0 || dt == DT_Q5_1 || dt == DT_Q8_0)
        qk_tile32(dt, nx, k / 32, w, x, xs, y, ldy);
    else
        qk_tilek(dt, nx, k / 256, w, x, xs, y, ldy);
}

QK_INLINE void qk_mm(int dt, int64_t k, const void *w, size_t ws, int nw, const void *x,
                     size_t xs, int nx, float *y, int64_t ldy)
{
    for (int j = 0; j < nw; j++) {
        const uint8_t *wr = (const uint8_t *)w + (size_t)j * ws;
        int i = 0;
        for (; i + 4 <= nx; i += 4)
            qk_tile(dt, 4, k, wr, (const uint8_t *)x + (size_t)i * xs, xs, y + i * ldy + j, ldy);
        const uint8_t *xr = (const uint8_t *)x + (size_t)i * xs;
        float *yr = y + i * ldy + j;
        switch (nx - i) {
        case 3: qk_tile(dt, 3, k, wr, xr, xs, yr, ldy); break;
        case 2: qk_tile(dt, 2, k, wr, xr, xs, yr, ldy); break;
        case 1: qk_tile(dt, 1, k, wr, xr, xs, yr, ldy); break;
        default: break;
        }
    }
}

static void qk_mm_q4_0(int dt, int64_t k, const void *w, size_t ws, int nw, const void *x,
                       size_t xs, int nx, float *y, int64_t ldy)
{
    (void)dt;
    qk_mm(DT_Q4_0, k, w, ws, nw, x, xs, nx, y, ldy);
}
static void qk_mm_q4_1(int dt, int64_t k, const void *w, size_t ws, int nw, const void *x,
                       size_t xs, int nx, float *y, int64_t ldy)
{
    (void)dt;
    qk_mm(DT_Q4_1, k, w, ws, nw, x, xs, nx, y, ldy);
}
static void qk_mm_q5_0(int dt, int64_t k, const void *w, size_t ws, int nw, const void *x,
                       size_t xs, int nx, float *y, int64_t ldy)
{
    (void)dt;
    qk_mm(DT_Q5_0, k, w, ws, nw, x, xs, nx, y, ldy);
}
static void qk_mm_q5_1(int dt, int64_t k, const void *w, size_t ws, int nw, const void *x,
                       size_t xs, int nx, float *y, int64_t ldy)
{
    (void)dt;
    qk_mm(DT_Q5_1, k, w, ws, nw, x, xs, nx, y, ldy);
}
static void qk_mm_q8_0(int dt, int64_t k, const void *w, size_t ws, int nw, const void *x,
                       size_t xs, int nx, float *y, int64_t ldy)
{
    (void)dt;
    qk_mm(DT_Q8_0, k, w, ws, nw, x, xs, nx, y, ldy);
}
static void qk_mm_q2_k(int dt, int64_t k, const void *w, size_t ws, int nw, const void *x,
                       size_t xs, int nx, float *y, int64_t ldy)
{
    (void)dt;
    qk_mm(DT_Q2_K, k, w, ws, nw, x, xs, nx, y, ldy);
}
static void qk_mm_q3_k(int dt, int64_t k, const void *w, size_t ws, int nw, const void *x,
                       size_t xs, int nx, float *y, int64_t ldy)
{
    (void)dt;
    qk_mm(DT_Q3_K, k, w, ws, nw, x, xs, nx, y, ldy);
}
static void qk_mm_q4_k(int dt, int64_t k, const void *w, size_t ws, int nw, const void *x,
                       size_t xs, int nx, float *y, int64_t ldy)
{
    (void)dt;
    qk_mm(DT_Q4_K, k, w, ws, nw, x, xs, nx, y, ldy);
}
static void qk_mm_q5_k(int dt, int64_t k, const void *w, size_t ws, int nw, const void *x,
                       size_t xs, int nx, float *y, int64_t ldy)
{
    (void)dt;
    qk_mm(DT_Q5_K, k, w, ws, nw, x, xs, nx, y, ldy);
}
static void qk_mm_q6_k(int dt, int64_t k, const void *w, size_t ws, int nw, const void *x,
                       size_t xs, int nx, float *y, int64_t ldy)
{
    (void)dt;
    qk_mm(DT_Q6_K, k, w, ws, nw, x, xs, nx, y, ldy);
}

/* Installs the quantized matmul kernels of this file's ISA. */
static void qk_install(struct cpu_kernels *k)
{
    k->mm[DT_Q4_0] = qk_mm_q4_0;
    k->mm[DT_Q4_1] = qk_mm_q4_1;
    k->mm[DT_Q5_0] = qk_mm_q5_0;
    k->mm[DT_Q5_1] = qk_mm_q5_1;
    k->mm[DT_Q8_0] = qk_mm_q8_0;
    k->mm[DT_Q2_K] = qk_mm_q2_k;
    k->mm[DT_Q3_K] = qk_mm_q3_k;
    k->mm[DT_Q4_K] = qk_mm_q4_k;
    k->mm[DT_Q5_K] = qk_mm_q5_k;
    k->mm[DT_Q6_K] = qk_mm_q6_k;
}

#endif
