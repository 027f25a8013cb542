/* rp_avx512.c — matmul kernels on repacked Q4_K / Q5_K / Q6_K / Q8_0 / Q5_0 / Q4_0 / Q4_1
 * weights (repack.h), AVX-512 with VNNI and VBMI (installed only when the CPU has both; cpu.c checks;
 * Q6_K's also needs GFNI).
 *
 * One 64-byte vector holds 8 bytes of each of 8 weight rows; int32 lane L = (row L/2, half
 * L%2) takes 4 of them, so vpdpbusd against an 8-byte broadcast of the activation (lanes
 * alternate its two halves) gives 8 rows' partial sums at once, and the activation load
 * serves all 8 rows. Sub-block scales are spread to lanes with one vpermb (zero- or
 * sign-extended through the mask), applied per sub-block in int32 (vpmulld); the offsets
 * (mins, Q6_K's -32) go through the activation's 16-element sums (vpdpwssd). The two
 * halves of a row are added in integers (exact) and each block adds one float term
 * d_w * d_x * sum per row (Q4_K: also -dmin * d_x * sum of mins).
 *
 * Batch invariance: a tile is up to 4 activation rows against one group of 8 weight rows;
 * each (x row, w row) element owns its accumulators and gets the same operation sequence
 * whatever the tile height or the group's position, so results do not depend on n or on
 * the thread split.
 */
#include <immintrin.h>
#include <stdint.h>
#include <string.h>

#include "backend/cpu/cpu_int.h"
#include "backend/cpu/repack.h"

/* Every function here may use AVX-512 VBMI (the file's table is installed only where the CPU
 * has it: cpu.c isa_has_vbmi). gcc takes the pragma, clang the attribute block. */
#if defined(__clang__)
#pragma clang attribute push(__attribute__((target("avx512vbmi"))), apply_to = function)
#else
#pragma GCC target("avx512vbmi")
#endif

#define RP_INLINE static inline __attribute__((always_inline))

enum {
    Q4K_D = 0, Q4K_SC = 32, Q4K_MN = 96, Q4K_Q = 160,
    Q6K_D = 0, Q6K_SC = 16,
};

RP_INLINE __m512i bq(const void *p) /* 8 bytes broadcast */
{
    int64_t v;
    memcpy(&v, p, 8);
    return _mm512_set1_epi64(v);
}

RP_INLINE __m512i iota32(void)
{
    return _mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15);
}

/* Sum of the two halves of each row: 8 int32 (exact). */
RP_INLINE __m256i fold(__m512i v)
{
    return _mm512_cvtepi64_epi32(_mm512_add_epi64(v, _mm512_srli_epi64(v, 32)));
}

RP_INLINE void store_rows(float *y, __m256 v, int nr)
{
    if (nr == RP_ROWS)
        _mm256_storeu_ps(y, v);
    else
        _mm256_mask_storeu_ps(y, (__mmask8)((1u << nr) - 1), v);
}

/* ---- Q4_K and Q5_K (dt): Q5_K adds 16 to the nibbles whose fifth bit is set (one masked
 * byte add per vector, the mask read from the group block) ---- */

RP_INLINE void k45_tile(int dt, int nx, int64_t nb, const uint8_t *g, const uint8_t *x, size_t xs,
                        float *y, int64_t ldy, int nr)
{
    const size_t gb = dt == DT_Q5_K ? 1440 : 1184;
    const __m512i m4 = _mm512_set1_epi8(0x0f), b16 = _mm512_set1_epi8(0x10);
    const __m512i half = _mm512_srli_epi32(iota32(), 1);
    /* sub-block scale of lane L: byte 4L <- sc[s][L/2] */
    /* min pairs for bsums quad q: both int16 halves of lane L <- mn[2q + L%2][L/2] */
    const __m512i mbase = _mm512_add_epi32(half, _mm512_slli_epi32(_mm512_and_si512(iota32(), _mm512_set1_epi32(1)), 3));
    __m512 facc[4];
#pragma GCC unroll 4
    for (int i = 0; i < nx; i++)
        facc[i] = _mm512_setzero_ps();
    for (int64_t b = 0; b < nb; b++, g += gb) {
        const __m512i scv = _mm512_loadu_si512((const void *)(g + Q4K_SC));
        const __m512i mnv = _mm512_loadu_si512((const void *)(g + Q4K_MN));
        __m512i sumi[4], summ[4];
#pragma GCC unroll 4
        for (int i = 0; i < nx; i++)
            sumi[i] = summ[i] = _mm512_setzero_si512();
#pragma GCC unroll 4
        for (int c = 0; c < 4; c++) {
            __m512i alo[4], ahi[4];
#pragma GCC unroll 4
            for (int i = 0; i < nx; i++)
                alo[i] = ahi[i] = _mm512_setzero_si512();
#pragma GCC unroll 4
            for (int j = 0; j < 4; j++) {
                const size_t qo = dt == DT_Q5_K ? rp_q5k_q(c, j) : (size_t)Q4K_Q + (size_t)(c * 4 + j) * 64;
                __m512i w = _mm512_loadu_si512((const void *)(g + qo));
                __m512i lo = _mm512_and_si512(w, m4);
                __m512i hi = _mm512_and_si512(_mm512_srli_epi16(w, 4), m4);
                if (dt == DT_Q5_K) {
                    __mmask64 kl, kh;
                    memcpy(&kl, g + rp_q5k_m(c, j, 0), 8);
                    memcpy(&kh, g + rp_q5k_m(c, j, 1), 8);
                    lo = _mm512_mask_add_epi8(lo, kl, lo, b16);
                    hi = _mm512_mask_add_epi8(hi, kh, hi, b16);
                }
#pragma GCC unroll 4
                for (int i = 0; i < nx; i++) {
                    const struct blk_a8k *xb = (const struct blk_a8k *)(x + (size_t)i * xs) + b;
                    alo[i] = _mm512_dpbusd_epi32(alo[i], lo, bq(xb->q + 64 * c + 8 * j));
                    ahi[i] = _mm512_dpbusd_epi32(ahi[i], hi, bq(xb->q + 64 * c + 32 + 8 * j));
                }
            }
            __m512i s0 = _mm512_maskz_permutexvar_epi8(0x1111111111111111ull,
                                                       _mm512_add_epi32(half, _mm512_set1_epi32(16 * c)), scv);
            __m512i s1 = _mm512_maskz_permutexvar_epi8(0x1111111111111111ull,
                                                       _mm512_add_epi32(half, _mm512_set1_epi32(16 * c + 8)), scv);
#pragma GCC unroll 4
            for (int i = 0; i < nx; i++)
                sumi[i] = _mm512_add_epi32(sumi[i], _mm512_add_epi32(_mm512_mullo_epi32(alo[i], s0),
                                                                     _mm512_mullo_epi32(ahi[i], s1)));
        }
#pragma GCC unroll 4
        for (int q = 0; q < 4; q++) {
            __m512i m = _mm512_add_epi32(mbase, _mm512_set1_epi32(16 * q));
            __m512i mq = _mm512_maskz_permutexvar_epi8(0x5555555555555555ull,
                                                       _mm512_or_si512(m, _mm512_slli_epi32(m, 16)), mnv);
#pragma GCC unroll 4
            for (int i = 0; i < nx; i++) {
                const struct blk_a8k *xb = (const struct blk_a8k *)(x + (size_t)i * xs) + b;
                summ[i] = _mm512_dpwssd_epi32(summ[i], mq, bq(xb->bsums + 4 * q));
            }
        }
        /* d[8] then -dmin[8] (fp16) */
        const __m512 dw = _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)(g + Q4K_D)));
#pragma GCC unroll 4
        for (int i = 0; i < nx; i++) {
            const struct blk_a8k *xb = (const struct blk_a8k *)(x + (size_t)i * xs) + b;
            __m512i v = _mm512_inserti64x4(_mm512_castsi256_si512(fold(sumi[i])), fold(summ[i]), 1);
            facc[i] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(v), _mm512_mul_ps(dw, _mm512_set1_ps(xb->d)),
                                      facc[i]);
        }
    }
#pragma GCC unroll 4
    for (int i = 0; i < nx; i++)
        store_rows(y + i * ldy, _mm256_add_ps(_mm512_castps512_ps256(facc[i]),
                                              _mm512_extractf32x8_ps(facc[i], 1)), nr);
}

RP_INLINE void q4k_tile(int nx, int64_t nb, const uint8_t *g, const uint8_t *x, size_t xs,
                        float *y, int64_t ldy, int nr)
{
    k45_tile(DT_Q4_K, nx, nb, g, x, xs, y, ldy, nr);
}
RP_INLINE void q5k_tile(int nx, int64_t nb, const uint8_t *g, const uint8_t *x, size_t xs,
                        float *y, int64_t ldy, int nr)
{
    k45_tile(DT_Q5_K, nx, nb, g, x, xs, y, ldy, nr);
}

/* ---- Q6_K (needs GFNI too: cpu.c installs it only then) ---- */

/* GF(2) affine matrix (vgf2p8affineqb) that moves bits 2f, 2f+1 of each byte to bits 4, 5 and
 * clears the rest: output bit i takes the input bits set in matrix byte 7 - i. */
static inline int64_t q6k_gfsel(int f)
{
    return (int64_t)((1ull << (2 * f)) << 24 | (1ull << (2 * f + 1)) << 16);
}

#define RP_GFNI __attribute__((target("avx512vbmi,gfni")))

/* vpermb index: int16 m = 2L + h of lane L = 2r + p <- byte 16p + 8h + r of 32 scale bytes
 * (groups 4q..4q+3, 8 rows each), in the high byte */
static const _Alignas(64) uint8_t q6k_sidx[64] = {
    0, 0, 0, 8, 0, 16, 0, 24, 0, 1, 0, 9, 0, 17, 0, 25, 0, 2, 0, 10, 0, 18, 0, 26, 0, 3, 0, 11, 0, 19, 0, 27,
    0, 4, 0, 12, 0, 20, 0, 28, 0, 5, 0, 13, 0, 21, 0, 29, 0, 6, 0, 14, 0, 22, 0, 30, 0, 7, 0, 15, 0, 23, 0, 31};

/* int32 lane L <- the signed byte p[L / 2] */
RP_INLINE __m512i q6k_scale(const uint8_t *p)
{
    __m128i v = _mm_loadl_epi64((const __m128i *)p);
    return _mm512_cvtepi8_epi32(_mm_unpacklo_epi8(v, v));
}

RP_GFNI RP_INLINE void q6k_tile(int nx, int64_t nb, const uint8_t *g, const uint8_t *x, size_t xs,
                        float *y, int64_t ldy, int nr)
{
    const __m512i m4 = _mm512_set1_epi8(0x0f);
    __m256 facc[4];
#pragma GCC unroll 4
    for (int i = 0; i < nx; i++)
        facc[i] = _mm256_setzero_ps();
    for (int64_t b = 0; b < nb; b++, g += 1680) {
#ifdef RP_PF
        for (int l = 0; l < 1680; l += 64)
            _mm_prefetch((const char *)g + RP_PF * 1680 + l, _MM_HINT_T0);
#endif
        __m512i sumi[4];
#pragma GCC unroll 4
        for (int i = 0; i < nx; i++)
            sumi[i] = _mm512_setzero_si512();
#pragma GCC unroll 4
        for (int c = 0; c < 4; c++) {
#pragma GCC unroll 2
            for (int jj = 0; jj < 2; jj++) {
                /* groups of 16: low-nibble elements 4c + jj, high-nibble ones 4c + 2 + jj */
                __m512i alo[4], ahi[4];
#pragma GCC unroll 4
                for (int i = 0; i < nx; i++)
                    alo[i] = ahi[i] = _mm512_setzero_si512();
                __m512i hv = _mm512_loadu_si512((const void *)(g + rp_q6k_h(c, jj)));
#pragma GCC unroll 2
                for (int jo = 0; jo < 2; jo++) {
                    int j = 2 * jj + jo;
                    __m512i w = _mm512_loadu_si512((const void *)(g + rp_q6k_q(c, j)));
                    /* the 2 high bits of the low / high nibble's element (h bits 4jo..4jo+1 /
                     * 4jo+2..4jo+3) moved to bits 4-5, other bits 0 (one GF(2) affine map) */
                    __m512i fl = _mm512_gf2p8affine_epi64_epi8(hv, _mm512_set1_epi64(q6k_gfsel(2 * jo)), 0);
                    __m512i fh = _mm512_gf2p8affine_epi64_epi8(hv, _mm512_set1_epi64(q6k_gfsel(2 * jo + 1)), 0);
                    /* (a & m4) | f in one ternary-logic op */
                    __m512i lo = _mm512_ternarylogic_epi32(w, m4, fl, 0xea);
                    __m512i hi = _mm512_ternarylogic_epi32(_mm512_srli_epi16(w, 4), m4, fh, 0xea);
#pragma GCC unroll 4
                    for (int i = 0; i < nx; i++) {
                        const struct blk_a8k *xb = (const struct blk_a8k *)(x + (size_t)i * xs) + b;
                        alo[i] = _mm512_dpbusd_epi32(alo[i], lo, bq(xb->q + 64 * c + 8 * j));
                        ahi[i] = _mm512_dpbusd_epi32(ahi[i], hi, bq(xb->q + 64 * c + 32 + 8 * j));
                    }
                }
                /* signed scales of lane L = sc[grp][L/2]: the group's 8 bytes doubled, then
                 * sign-extended (no index constants, no cross-vector permute) */
                int glo = 4 * c + jj, ghi = 4 * c + 2 + jj;
                __m512i slo = q6k_scale(g + Q6K_SC + 8 * glo), shi = q6k_scale(g + Q6K_SC + 8 * ghi);
#pragma GCC unroll 4
                for (int i = 0; i < nx; i++)
                    sumi[i] = _mm512_add_epi32(sumi[i], _mm512_add_epi32(_mm512_mullo_epi32(alo[i], slo),
                                                                         _mm512_mullo_epi32(ahi[i], shi)));
            }
        }
        /* -32 offset: sum over groups of sc[grp] * bsums[grp]; lane L takes groups
         * 4q + 2(L%2) and 4q + 2(L%2) + 1 as its int16 pair: one vpermb of the 32 scale bytes
         * of groups 4q..4q+3 into the high bytes (the same index for every q), then an
         * arithmetic shift */
        const __m512i sidx = _mm512_load_si512((const void *)q6k_sidx);
        __m512i summ[4];
#pragma GCC unroll 4
        for (int i = 0; i < nx; i++)
            summ[i] = _mm512_setzero_si512();
#pragma GCC unroll 4
        for (int q = 0; q < 4; q++) {
            __m512i s32 = _mm512_castsi256_si512(_mm256_loadu_si256((const __m256i *)(g + Q6K_SC + 32 * q)));
            __m512i sp = _mm512_srai_epi16(_mm512_maskz_permutexvar_epi8(0xaaaaaaaaaaaaaaaaull, sidx, s32), 8);
#pragma GCC unroll 4
            for (int i = 0; i < nx; i++) {
                const struct blk_a8k *xb = (const struct blk_a8k *)(x + (size_t)i * xs) + b;
                summ[i] = _mm512_dpwssd_epi32(summ[i], sp, bq(xb->bsums + 4 * q));
            }
        }
        const __m256 dw = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(g + Q6K_D)));
#pragma GCC unroll 4
        for (int i = 0; i < nx; i++) {
            const struct blk_a8k *xb = (const struct blk_a8k *)(x + (size_t)i * xs) + b;
            __m256i t = _mm256_sub_epi32(fold(sumi[i]), _mm256_slli_epi32(fold(summ[i]), 5));
            facc[i] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(t), _mm256_mul_ps(dw, _mm256_set1_ps(xb->d)),
                                      facc[i]);
        }
    }
#pragma GCC unroll 4
    for (int i = 0; i < nx; i++)
        store_rows(y + i * ldy, facc[i], nr);
}

/* ---- 32-element blocks: Q8_0, Q5_0, Q4_0 ----
 * Weights are unsigned bytes u = w + o (o = 128, 16, 8); sum (u - o) x = sum u x + o ns1
 * (ns1 = -sum x of the activation block), added in int32 before the float term. */

RP_INLINE void b32_tile(int dt, int nx, int64_t nb, const uint8_t *g, const uint8_t *x,
                        size_t xs, float *y, int64_t ldy, int nr)
{
    const size_t gb = dt == DT_Q8_0 ? 272 : dt == DT_Q5_0 ? 176 : dt == DT_Q4_1 ? 160 : 144;
    const int o = dt == DT_Q8_0 ? 128 : dt == DT_Q5_0 ? 16 : dt == DT_Q4_1 ? 0 : 8;
    const __m512i m4 = _mm512_set1_epi8(0x0f), b16 = _mm512_set1_epi8(0x10);
    __m256 facc[4];
#pragma GCC unroll 4
    for (int i = 0; i < nx; i++)
        facc[i] = _mm256_setzero_ps();
    for (int64_t b = 0; b < nb; b++, g += gb) {
        __m512i w[4];
        if (dt == DT_Q8_0) {
#pragma GCC unroll 4
            for (int j = 0; j < 4; j++)
                w[j] = _mm512_loadu_si512((const void *)(g + 16 + 64 * j));
        } else {
            const uint8_t *q = g + (dt == DT_Q5_0 ? 48 : dt == DT_Q4_1 ? 32 : 16);
#pragma GCC unroll 2
            for (int jj = 0; jj < 2; jj++) {
                __m512i n = _mm512_loadu_si512((const void *)(q + 64 * jj));
                w[jj] = _mm512_and_si512(n, m4);
                w[jj + 2] = _mm512_and_si512(_mm512_srli_epi16(n, 4), m4);
            }
            if (dt == DT_Q5_0)
#pragma GCC unroll 4
                for (int j = 0; j < 4; j++) {
                    __mmask64 k;
                    memcpy(&k, g + 16 + 8 * j, 8);
                    w[j] = _mm512_mask_add_epi8(w[j], k, w[j], b16);
                }
        }
        const __m256 dw = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)g));
#pragma GCC unroll 4
        for (int i = 0; i < nx; i++) {
            const struct blk_a8 *xb = (const struct blk_a8 *)(x + (size_t)i * xs) + b;
            __m512i acc = _mm512_dpbusd_epi32(_mm512_setzero_si512(), w[0], bq(xb->q));
#pragma GCC unroll 3
            for (int j = 1; j < 4; j++)
                acc = _mm512_dpbusd_epi32(acc, w[j], bq(xb->q + 8 * j));
            __m256i t = _mm256_add_epi32(fold(acc), _mm256_set1_epi32(o * xb->ns1));
            facc[i] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(t), _mm256_mul_ps(dw, _mm256_set1_ps(xb->d)),
                                      facc[i]);
            if (dt == DT_Q4_1) /* + m_w * d_x * sum q_x */
                facc[i] = _mm256_fmadd_ps(_mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(g + 16))),
                                          _mm256_set1_ps(xb->ds), facc[i]);
        }
    }
#pragma GCC unroll 4
    for (int i = 0; i < nx; i++)
        store_rows(y + i * ldy, facc[i], nr);
}

RP_INLINE void q8_tile(int nx, int64_t nb, const uint8_t *g, const uint8_t *x, size_t xs,
                       float *y, int64_t ldy, int nr)
{
    b32_tile(DT_Q8_0, nx, nb, g, x, xs, y, ldy, nr);
}
RP_INLINE void q5_tile(int nx, int64_t nb, const uint8_t *g, const uint8_t *x, size_t xs,
                       float *y, int64_t ldy, int nr)
{
    b32_tile(DT_Q5_0, nx, nb, g, x, xs, y, ldy, nr);
}
RP_INLINE void q41_tile(int nx, int64_t nb, const uint8_t *g, const uint8_t *x, size_t xs,
                        float *y, int64_t ldy, int nr)
{
    b32_tile(DT_Q4_1, nx, nb, g, x, xs, y, ldy, nr);
}
RP_INLINE void q40_tile(int nx, int64_t nb, const uint8_t *g, const uint8_t *x, size_t xs,
                        float *y, int64_t ldy, int nr)
{
    b32_tile(DT_Q4_0, nx, nb, g, x, xs, y, ldy, nr);
}

/* ---- entry points: rows [j0, j0 + nw) (j0 a multiple of 8) against nx x rows ---- */

#define RP_MM(attr, name, tile)                                                                    \
    attr static void name(const struct rp_hdr *h, int64_t j0, int nw, const void *x, size_t xs,        \
                     int nx, float *y, int64_t ldy)                                                \
    {                                                                                              \
        int64_t nb = h->k / dtype_block_elems(h->dtype);                                           \
        for (int r0 = 0; r0 < nw; r0 += RP_ROWS) {                                                 \
            const uint8_t *g = rp_data(h) + (size_t)((j0 + r0) / RP_ROWS) * h->gstride;           \
            int nr = nw - r0 < RP_ROWS ? nw - r0 : RP_ROWS;                                        \
            int i = 0;                                                                             \
            for (; i + 4 <= nx; i += 4)                                                            \
                tile(4, nb, g, (const uint8_t *)x + (size_t)i * xs, xs, y + i * ldy + r0, ldy, nr); \
            const uint8_t *xr = (const uint8_t *)x + (size_t)i * xs;                               \
            float *yr = y + i * ldy + r0;                                                          \
            switch (nx - i) {                                                                      \
            case 3: tile(3, nb, g, xr, xs, yr, ldy, nr); break;                                    \
            case 2: tile(2, nb, g, xr, xs, yr, ldy, nr); break;                                    \
            case 1: tile(1, nb, g, xr, xs, yr, ldy, nr); break;                                    \
            default: break;                                                                        \
            }                                                                                      \
        }                                                                                          \
    }

RP_MM(, rp_mm_q4k, q4k_tile)
RP_MM(, rp_mm_q5k, q5k_tile)
RP_MM(RP_GFNI, rp_mm_q6k, q6k_tile)
RP_MM(, rp_mm_q8, q8_tile)
RP_MM(, rp_mm_q5, q5_tile)
RP_MM(, rp_mm_q40, q40_tile)
RP_MM(, rp_mm_q41, q41_tile)

void cpu_kernels_rp512(struct cpu_kernels *k, int gfni)
{
    k->mm_rp[DT_Q4_K] = rp_mm_q4k;
    k->mm_rp[DT_Q5_K] = rp_mm_q5k;
    if (gfni)
        k->mm_rp[DT_Q6_K] = rp_mm_q6k;
    k->mm_rp[DT_Q8_0] = rp_mm_q8;
    k->mm_rp[DT_Q5_0] = rp_mm_q5;
    k->mm_rp[DT_Q4_0] = rp_mm_q40;
    k->mm_rp[DT_Q4_1] = rp_mm_q41;
}

#if defined(__clang__)
#pragma clang attribute pop
#endif
