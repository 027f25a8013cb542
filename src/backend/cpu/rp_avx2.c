/* rp_avx2.c — AVX2 matmul kernels on repacked Q4_K, Q6_K, Q8_0, Q5_0, Q4_0 and Q4_1 weights
 * (repack.h), for CPUs without the AVX-512 kernels of rp_avx512.c (installed at the avx2
 * level and above; rp_avx512.c replaces them where it runs). Described for Q4_K first:
 *
 * A 64-byte vector of the layout is read as two 32-byte halves (rows 0-3, rows 4-7), each
 * holding 8 bytes of 4 rows. vpmaddubsw against an 8-byte broadcast of the activation gives
 * int16 pair sums (a nibble times an int8 twice: |sum| <= 3810, four of them summed stay
 * below 2^15), and vpmaddwd with the sub-block scale spread over the int16 lanes (one
 * vpshufb of the scale bytes) turns them into scaled int32 sums; the mins go through the
 * activation's 16-element sums the same way. int32 lane k of a half = (row 4h + k/2, half
 * k%2), the layout of the AVX-512 kernel, and the float steps are that kernel's (one FMA per
 * block for the sums and one for the mins per row, added at the end), so both levels give
 * the same bits.
 *
 * Batch invariance: a tile is 1 or 2 activation rows against one group of 8 weight rows;
 * each (x row, w row) element owns its accumulators and gets the same operation sequence
 * whatever the tile height.
 */
#include <immintrin.h>
#include <stdint.h>
#include <string.h>

#include "backend/cpu/cpu_int.h"
#include "backend/cpu/repack.h"

#define RP2_INLINE static inline __attribute__((always_inline))

enum {
    Q4K_D = 0,
    Q4K_NDM = 16,
    Q4K_SC = 32,
    Q4K_MN = 96,
    Q4K_Q = 160,
    Q4K_GBLK = 1184,
    Q6K_SC = 16
};

RP2_INLINE __m256i bq2(const void *p) /* 8 bytes broadcast */
{
    int64_t v;
    memcpy(&v, p, 8);
    return _mm256_set1_epi64x(v);
}

RP2_INLINE void store8(float *y, __m256 v, int nr)
{
    if (nr == RP_ROWS) {
        _mm256_storeu_ps(y, v);
        return;
    }
    float t[8];
    _mm256_storeu_ps(t, v);
    memcpy(y, t, sizeof(float) * (size_t)nr);
}

/* vpshufb index: int16 lane m of half h <- scale byte 4h + m/4 (zero-extended) */
RP2_INLINE __m256i sc_idx(int h)
{
    const char a = (char)(4 * h), n = (char)0x80;
    return _mm256_setr_epi8(a, n, a, n, a, n, a, n, (char)(a + 1), n, (char)(a + 1), n,
                            (char)(a + 1), n, (char)(a + 1), n, (char)(a + 2), n, (char)(a + 2), n,
                            (char)(a + 2), n, (char)(a + 2), n, (char)(a + 3), n, (char)(a + 3), n,
                            (char)(a + 3), n, (char)(a + 3), n);
}

/* vpshufb index: both int16 halves of int32 lane k of half h <- min byte 8(k%2) + 4h + k/2
 * of the 16 bytes mn[2q][8], mn[2q + 1][8] */
RP2_INLINE __m256i mn_idx(int h)
{
    const char n = (char)0x80;
    char b[32];
    for (int k = 0; k < 8; k++) {
        char v = (char)(8 * (k % 2) + 4 * h + k / 2);
        b[4 * k] = v, b[4 * k + 1] = n, b[4 * k + 2] = v, b[4 * k + 3] = n;
    }
    __m256i r;
    memcpy(&r, b, 32);
    return r;
}

RP2_INLINE void q4k_tile2(int nx, int64_t nb, const uint8_t *g, const uint8_t *x, size_t xs,
                          float *y, int64_t ldy, int nr)
{
    const __m256i m4 = _mm256_set1_epi8(0x0f);
    const __m256i sia = sc_idx(0), sib = sc_idx(1), mia = mn_idx(0), mib = mn_idx(1);
    __m256 fs[2], fm[2];
#pragma GCC unroll 2
    for (int i = 0; i < nx; i++)
        fs[i] = fm[i] = _mm256_setzero_ps();
    for (int64_t b = 0; b < nb; b++, g += Q4K_GBLK) {
        __m256i sa[2], sb[2];
#pragma GCC unroll 2
        for (int i = 0; i < nx; i++)
            sa[i] = sb[i] = _mm256_setzero_si256();
#pragma GCC unroll 4
        for (int c = 0; c < 4; c++)
#pragma GCC unroll 2
            for (int hb = 0; hb < 2; hb++) { /* low nibbles (sub-block 2c), then high (2c + 1) */
                __m256i aa[2], ab[2];
#pragma GCC unroll 2
                for (int i = 0; i < nx; i++)
                    aa[i] = ab[i] = _mm256_setzero_si256();
#pragma GCC unroll 4
                for (int j = 0; j < 4; j++) {
                    const uint8_t *q = g + Q4K_Q + (c * 4 + j) * 64;
                    __m256i wa = _mm256_loadu_si256((const __m256i *)q);
                    __m256i wb = _mm256_loadu_si256((const __m256i *)(q + 32));
                    if (hb)
                        wa = _mm256_srli_epi16(wa, 4), wb = _mm256_srli_epi16(wb, 4);
                    wa = _mm256_and_si256(wa, m4), wb = _mm256_and_si256(wb, m4);
#pragma GCC unroll 2
                    for (int i = 0; i < nx; i++) {
                        const struct blk_a8k *xb = (const struct blk_a8k *)(x + (size_t)i * xs) + b;
                        __m256i xv = bq2(xb->q + 64 * c + 32 * hb + 8 * j);
                        aa[i] = _mm256_add_epi16(aa[i], _mm256_maddubs_epi16(wa, xv));
                        ab[i] = _mm256_add_epi16(ab[i], _mm256_maddubs_epi16(wb, xv));
                    }
                }
                __m256i sv = bq2(g + Q4K_SC + 8 * (2 * c + hb));
                __m256i sca = _mm256_shuffle_epi8(sv, sia), scb = _mm256_shuffle_epi8(sv, sib);
#pragma GCC unroll 2
                for (int i = 0; i < nx; i++) {
                    sa[i] = _mm256_add_epi32(sa[i], _mm256_madd_epi16(aa[i], sca));
                    sb[i] = _mm256_add_epi32(sb[i], _mm256_madd_epi16(ab[i], scb));
                }
            }
        /* mins: lane (row, e) of quad q takes sub-block 2q + e's min against its two
         * 16-element sums */
        __m256i ma[2], mb[2];
#pragma GCC unroll 2
        for (int i = 0; i < nx; i++)
            ma[i] = mb[i] = _mm256_setzero_si256();
#pragma GCC unroll 4
        for (int q = 0; q < 4; q++) {
            __m256i mv = _mm256_broadcastsi128_si256(
                _mm_loadu_si128((const __m128i *)(g + Q4K_MN + 16 * q)));
            __m256i mqa = _mm256_shuffle_epi8(mv, mia), mqb = _mm256_shuffle_epi8(mv, mib);
#pragma GCC unroll 2
            for (int i = 0; i < nx; i++) {
                const struct blk_a8k *xb = (const struct blk_a8k *)(x + (size_t)i * xs) + b;
                __m256i bs = bq2(xb->bsums + 4 * q);
                ma[i] = _mm256_add_epi32(ma[i], _mm256_madd_epi16(mqa, bs));
                mb[i] = _mm256_add_epi32(mb[i], _mm256_madd_epi16(mqb, bs));
            }
        }
        const __m256 dw = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(g + Q4K_D)));
        const __m256 ndm = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(g + Q4K_NDM)));
#pragma GCC unroll 2
        for (int i = 0; i < nx; i++) {
            const struct blk_a8k *xb = (const struct blk_a8k *)(x + (size_t)i * xs) + b;
            /* the two halves of each row summed (exact), rows back in order 0..7 */
            __m256i s = _mm256_permute4x64_epi64(_mm256_hadd_epi32(sa[i], sb[i]), 0xd8);
            __m256i m = _mm256_permute4x64_epi64(_mm256_hadd_epi32(ma[i], mb[i]), 0xd8);
            __m256 dx = _mm256_set1_ps(xb->d);
            fs[i] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(s), _mm256_mul_ps(dw, dx), fs[i]);
            fm[i] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(m), _mm256_mul_ps(ndm, dx), fm[i]);
        }
    }
#pragma GCC unroll 2
    for (int i = 0; i < nx; i++)
        store8(y + i * ldy, _mm256_add_ps(fs[i], fm[i]), nr);
}

/* ---- Q6_K ----
 * Per 64 elements (c, jj): the high-bit vector h and the nibble vectors q(2jj), q(2jj + 1);
 * a 6-bit value is (nibble) | (its 2 bits of h moved to bits 4-5): 16-bit shifts, then
 * masks that drop what crossed a byte. Group 4c + jj (low nibbles) and 4c + 2 + jj (high)
 * take two vpmaddubsw each (|sum| <= 2 * 16002 < 2^15), then vpmaddwd with the signed group
 * scale spread over the int16 lanes (vpshufb into the high byte, arithmetic shift). */

/* vpshufb index: int16 lane m of half h <- scale byte 4h + m/4, in the high byte */
RP2_INLINE __m256i ssc_idx(int h)
{
    char b[32];
    for (int m = 0; m < 16; m++)
        b[2 * m] = (char)0x80, b[2 * m + 1] = (char)(4 * h + m / 4);
    __m256i r;
    memcpy(&r, b, 32);
    return r;
}

/* vpshufb index for the -32 offset, quad q: int32 lane k = (row 4h + k/2, e = k%2) takes
 * groups 4q + 2e, 4q + 2e + 1 as its int16 pair; the 16 scale bytes of groups 4q + 2e,
 * 4q + 2e + 1 (8 rows each) are in both 128-bit lanes; lanes of the other e get zero */
RP2_INLINE __m256i soff_idx(int h, int e)
{
    char b[32];
    for (int k = 0; k < 8; k++) {
        int r = 4 * h + k / 2, on = k % 2 == e;
        b[4 * k] = (char)0x80, b[4 * k + 1] = on ? (char)r : (char)0x80;
        b[4 * k + 2] = (char)0x80, b[4 * k + 3] = on ? (char)(8 + r) : (char)0x80;
    }
    __m256i v;
    memcpy(&v, b, 32);
    return v;
}

RP2_INLINE void q6k_tile2(int nx, int64_t nb, const uint8_t *g, const uint8_t *x, size_t xs,
                          float *y, int64_t ldy, int nr)
{
    const __m256i m4 = _mm256_set1_epi8(0x0f), m30 = _mm256_set1_epi8(0x30);
    __m256 fs[2];
#pragma GCC unroll 2
    for (int i = 0; i < nx; i++)
        fs[i] = _mm256_setzero_ps();
    for (int64_t b = 0; b < nb; b++, g += 1680) {
        __m256i sa[2], sb[2];
#pragma GCC unroll 2
        for (int i = 0; i < nx; i++)
            sa[i] = sb[i] = _mm256_setzero_si256();
#pragma GCC unroll 4
        for (int c = 0; c < 4; c++)
#pragma GCC unroll 2
            for (int jj = 0; jj < 2; jj++) {
                const uint8_t *hp = g + rp_q6k_h(c, jj);
                __m256i ha = _mm256_loadu_si256((const __m256i *)hp);
                __m256i hb = _mm256_loadu_si256((const __m256i *)(hp + 32));
                __m256i la[2], lb[2], ua[2], ub[2]; /* int16 sums: low / high nibble groups */
#pragma GCC unroll 2
                for (int i = 0; i < nx; i++)
                    la[i] = lb[i] = ua[i] = ub[i] = _mm256_setzero_si256();
#pragma GCC unroll 2
                for (int jo = 0; jo < 2; jo++) {
                    int j = 2 * jj + jo;
                    const uint8_t *q = g + rp_q6k_q(c, j);
                    __m256i wa = _mm256_loadu_si256((const __m256i *)q);
                    __m256i wb = _mm256_loadu_si256((const __m256i *)(q + 32));
                    /* h bits 4jo..4jo+1 (low nibble's element) and 4jo+2..4jo+3 (high) */
                    __m256i hla = jo ? ha : _mm256_slli_epi16(ha, 4),
                            hlb = jo ? hb : _mm256_slli_epi16(hb, 4);
                    __m256i hha = jo ? _mm256_srli_epi16(ha, 2) : _mm256_slli_epi16(ha, 2);
                    __m256i hhb = jo ? _mm256_srli_epi16(hb, 2) : _mm256_slli_epi16(hb, 2);
                    __m256i loa =
                        _mm256_or_si256(_mm256_and_si256(wa, m4), _mm256_and_si256(hla, m30));
                    __m256i lob =
                        _mm256_or_si256(_mm256_and_si256(wb, m4), _mm256_and_si256(hlb, m30));
                    __m256i hia = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(wa, 4), m4),
                                                  _mm256_and_si256(hha, m30));
                    __m256i hib = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(wb, 4), m4),
                                                  _mm256_and_si256(hhb, m30));
#pragma GCC unroll 2
                    for (int i = 0; i < nx; i++) {
                        const struct blk_a8k *xb = (const struct blk_a8k *)(x + (size_t)i * xs) + b;
                        __m256i xl = bq2(xb->q + 64 * c + 8 * j),
                                xh = bq2(xb->q + 64 * c + 32 + 8 * j);
                        la[i] = _mm256_add_epi16(la[i], _mm256_maddubs_epi16(loa, xl));
                        lb[i] = _mm256_add_epi16(lb[i], _mm256_maddubs_epi16(lob, xl));
                        ua[i] = _mm256_add_epi16(ua[i], _mm256_maddubs_epi16(hia, xh));
                        ub[i] = _mm256_add_epi16(ub[i], _mm256_maddubs_epi16(hib, xh));
                    }
                }
                __m256i svl = bq2(g + Q6K_SC + 8 * (4 * c + jj)),
                        svh = bq2(g + Q6K_SC + 8 * (4 * c + 2 + jj));
                const __m256i ia = ssc_idx(0), ib = ssc_idx(1);
                __m256i sla = _mm256_srai_epi16(_mm256_shuffle_epi8(svl, ia), 8);
                __m256i slb = _mm256_srai_epi16(_mm256_shuffle_epi8(svl, ib), 8);
                __m256i sha = _mm256_srai_epi16(_mm256_shuffle_epi8(svh, ia), 8);
                __m256i shb = _mm256_srai_epi16(_mm256_shuffle_epi8(svh, ib), 8);
#pragma GCC unroll 2
                for (int i = 0; i < nx; i++) {
                    sa[i] =
                        _mm256_add_epi32(sa[i], _mm256_add_epi32(_mm256_madd_epi16(la[i], sla),
                                                                 _mm256_madd_epi16(ua[i], sha)));
                    sb[i] =
                        _mm256_add_epi32(sb[i], _mm256_add_epi32(_mm256_madd_epi16(lb[i], slb),
                                                                 _mm256_madd_epi16(ub[i], shb)));
                }
            }
        /* -32 offset: sum over groups of sc[grp] * bsums[grp] */
        __m256i ma[2], mb[2];
#pragma GCC unroll 2
        for (int i = 0; i < nx; i++)
            ma[i] = mb[i] = _mm256_setzero_si256();
#pragma GCC unroll 4
        for (int q = 0; q < 4; q++) {
            __m256i s0 = _mm256_broadcastsi128_si256(
                _mm_loadu_si128((const __m128i *)(g + Q6K_SC + 32 * q)));
            __m256i s1 = _mm256_broadcastsi128_si256(
                _mm_loadu_si128((const __m128i *)(g + Q6K_SC + 32 * q + 16)));
            __m256i pa = _mm256_srai_epi16(_mm256_or_si256(_mm256_shuffle_epi8(s0, soff_idx(0, 0)),
                                                           _mm256_shuffle_epi8(s1, soff_idx(0, 1))),
                                           8);
            __m256i pb = _mm256_srai_epi16(_mm256_or_si256(_mm256_shuffle_epi8(s0, soff_idx(1, 0)),
                                                           _mm256_shuffle_epi8(s1, soff_idx(1, 1))),
                                           8);
#pragma GCC unroll 2
            for (int i = 0; i < nx; i++) {
                const struct blk_a8k *xb = (const struct blk_a8k *)(x + (size_t)i * xs) + b;
                __m256i bs = bq2(xb->bsums + 4 * q);
                ma[i] = _mm256_add_epi32(ma[i], _mm256_madd_epi16(pa, bs));
                mb[i] = _mm256_add_epi32(mb[i], _mm256_madd_epi16(pb, bs));
            }
        }
        const __m256 dw = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)g));
#pragma GCC unroll 2
        for (int i = 0; i < nx; i++) {
            const struct blk_a8k *xb = (const struct blk_a8k *)(x + (size_t)i * xs) + b;
            __m256i s = _mm256_permute4x64_epi64(_mm256_hadd_epi32(sa[i], sb[i]), 0xd8);
            __m256i m = _mm256_permute4x64_epi64(_mm256_hadd_epi32(ma[i], mb[i]), 0xd8);
            __m256i t = _mm256_sub_epi32(s, _mm256_slli_epi32(m, 5));
            fs[i] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(t), _mm256_mul_ps(dw, _mm256_set1_ps(xb->d)),
                                    fs[i]);
        }
    }
#pragma GCC unroll 2
    for (int i = 0; i < nx; i++)
        store8(y + i * ldy, fs[i], nr);
}

/* ---- 32-element blocks: Q8_0, Q5_0, Q4_0 ----
 * Q5_0/Q4_0: unsigned codes u (Q5_0's fifth bit expanded from its row mask bytes), four
 * vpmaddubsw per half summed in int16 (|sum| <= 4 * 7874 < 2^15), one vpmaddwd, then the
 * offset o * ns1 (o = 16, 8) in int32: the integer the AVX-512 kernel makes. Q8_0: the
 * stored u = w + 128 is turned back into w and multiplied with the sign trick (|w| times x
 * carrying w's sign: pairs <= 32512), which is sum w x = sum u x - 128 sum x, the same
 * integer again. Then the same float step per block and row. */

/* 32 bytes: byte 8k + t of half h = 0x10 if bit t of mask byte 4h + k is set, else 0 */
RP2_INLINE __m256i b32_hi5(const uint8_t *mb, int h)
{
    uint32_t v;
    memcpy(&v, mb + 4 * h, 4);
    const __m256i rep = _mm256_setr_epi8(0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 1, 1, 1, 2, 2, 2, 2,
                                         2, 2, 2, 2, 3, 3, 3, 3, 3, 3, 3, 3);
    const __m256i bit = _mm256_set1_epi64x(0x8040201008040201ll);
    __m256i r = _mm256_shuffle_epi8(_mm256_set1_epi32((int)v), rep);
    return _mm256_and_si256(_mm256_cmpeq_epi8(_mm256_and_si256(r, bit), bit),
                            _mm256_set1_epi8(0x10));
}

RP2_INLINE void b32_tile2(int dt, int nx, int64_t nb, const uint8_t *g, const uint8_t *x, size_t xs,
                          float *y, int64_t ldy, int nr)
{
    const size_t gb = dt == DT_Q8_0 ? 272 : dt == DT_Q5_0 ? 176 : dt == DT_Q4_1 ? 160 : 144;
    const int o = dt == DT_Q5_0 ? 16 : dt == DT_Q4_1 ? 0 : 8;
    const __m256i m4 = _mm256_set1_epi8(0x0f), ones = _mm256_set1_epi16(1),
                  x80 = _mm256_set1_epi8((char)0x80);
    __m256 fs[2];
#pragma GCC unroll 2
    for (int i = 0; i < nx; i++)
        fs[i] = _mm256_setzero_ps();
    for (int64_t b = 0; b < nb; b++, g += gb) {
        __m256i w[4][2]; /* element vector j (elements 8j + t), half h */
        if (dt == DT_Q8_0) {
#pragma GCC unroll 4
            for (int j = 0; j < 4; j++)
#pragma GCC unroll 2
                for (int h = 0; h < 2; h++)
                    w[j][h] = _mm256_xor_si256(
                        _mm256_loadu_si256((const __m256i *)(g + 16 + 64 * j + 32 * h)), x80);
        } else {
            const uint8_t *q = g + (dt == DT_Q5_0 ? 48 : dt == DT_Q4_1 ? 32 : 16);
#pragma GCC unroll 2
            for (int jj = 0; jj < 2; jj++)
#pragma GCC unroll 2
                for (int h = 0; h < 2; h++) {
                    __m256i n = _mm256_loadu_si256((const __m256i *)(q + 64 * jj + 32 * h));
                    w[jj][h] = _mm256_and_si256(n, m4);
                    w[jj + 2][h] = _mm256_and_si256(_mm256_srli_epi16(n, 4), m4);
                }
            if (dt == DT_Q5_0)
#pragma GCC unroll 4
                for (int j = 0; j < 4; j++)
#pragma GCC unroll 2
                    for (int h = 0; h < 2; h++)
                        w[j][h] = _mm256_or_si256(w[j][h], b32_hi5(g + 16 + 8 * j, h));
        }
        const __m256 dw = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)g));
#pragma GCC unroll 2
        for (int i = 0; i < nx; i++) {
            const struct blk_a8 *xb = (const struct blk_a8 *)(x + (size_t)i * xs) + b;
            __m256i ta, tb;
            if (dt == DT_Q8_0) {
                ta = tb = _mm256_setzero_si256();
#pragma GCC unroll 4
                for (int j = 0; j < 4; j++) {
                    __m256i xv = bq2(xb->q + 8 * j);
                    ta = _mm256_add_epi32(
                        ta,
                        _mm256_madd_epi16(_mm256_maddubs_epi16(_mm256_sign_epi8(w[j][0], w[j][0]),
                                                               _mm256_sign_epi8(xv, w[j][0])),
                                          ones));
                    tb = _mm256_add_epi32(
                        tb,
                        _mm256_madd_epi16(_mm256_maddubs_epi16(_mm256_sign_epi8(w[j][1], w[j][1]),
                                                               _mm256_sign_epi8(xv, w[j][1])),
                                          ones));
                }
            } else {
                __m256i pa = _mm256_setzero_si256(), pb = _mm256_setzero_si256();
#pragma GCC unroll 4
                for (int j = 0; j < 4; j++) {
                    __m256i xv = bq2(xb->q + 8 * j);
                    pa = _mm256_add_epi16(pa, _mm256_maddubs_epi16(w[j][0], xv));
                    pb = _mm256_add_epi16(pb, _mm256_maddubs_epi16(w[j][1], xv));
                }
                ta = _mm256_madd_epi16(pa, ones), tb = _mm256_madd_epi16(pb, ones);
            }
            __m256i t = _mm256_permute4x64_epi64(_mm256_hadd_epi32(ta, tb), 0xd8);
            if (dt != DT_Q8_0)
                t = _mm256_add_epi32(t, _mm256_set1_epi32(o * xb->ns1));
            fs[i] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(t), _mm256_mul_ps(dw, _mm256_set1_ps(xb->d)),
                                    fs[i]);
            if (dt == DT_Q4_1) /* + m_w * d_x * sum q_x */
                fs[i] = _mm256_fmadd_ps(_mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(g + 16))),
                                        _mm256_set1_ps(xb->ds), fs[i]);
        }
    }
#pragma GCC unroll 2
    for (int i = 0; i < nx; i++)
        store8(y + i * ldy, fs[i], nr);
}

RP2_INLINE void q8_tile2(int nx, int64_t nb, const uint8_t *g, const uint8_t *x, size_t xs,
                         float *y, int64_t ldy, int nr)
{
    b32_tile2(DT_Q8_0, nx, nb, g, x, xs, y, ldy, nr);
}
RP2_INLINE void q5_tile2(int nx, int64_t nb, const uint8_t *g, const uint8_t *x, size_t xs,
                         float *y, int64_t ldy, int nr)
{
    b32_tile2(DT_Q5_0, nx, nb, g, x, xs, y, ldy, nr);
}
RP2_INLINE void q41_tile2(int nx, int64_t nb, const uint8_t *g, const uint8_t *x, size_t xs,
                          float *y, int64_t ldy, int nr)
{
    b32_tile2(DT_Q4_1, nx, nb, g, x, xs, y, ldy, nr);
}
RP2_INLINE void q40_tile2(int nx, int64_t nb, const uint8_t *g, const uint8_t *x, size_t xs,
                          float *y, int64_t ldy, int nr)
{
    b32_tile2(DT_Q4_0, nx, nb, g, x, xs, y, ldy, nr);
}

/* rows [j0, j0 + nw) (j0 a multiple of 8) against nx x rows */
#define RP2_MM(name, tile)                                                                         \
    static void name(const struct rp_hdr *h, int64_t j0, int nw, const void *x, size_t xs, int nx, \
                     float *y, int64_t ldy)                                                        \
    {                                                                                              \
        int64_t nb = h->k / dtype_block_elems(h->dtype);                                           \
        for (int r0 = 0; r0 < nw; r0 += RP_ROWS) {                                                 \
            const uint8_t *g = rp_data(h) + (size_t)((j0 + r0) / RP_ROWS) * h->gstride;            \
            int nr = nw - r0 < RP_ROWS ? nw - r0 : RP_ROWS;                                        \
            int i = 0;                                                                             \
            for (; i + 2 <= nx; i += 2)                                                            \
                tile(2, nb, g, (const uint8_t *)x + (size_t)i * xs, xs, y + i * ldy + r0, ldy,     \
                     nr);                                                                          \
            if (i < nx)                                                                            \
                tile(1, nb, g, (const uint8_t *)x + (size_t)i * xs, xs, y + i * ldy + r0, ldy,     \
                     nr);                                                                          \
        }                                                                                          \
    }

RP2_MM(rp2_mm_q4k, q4k_tile2)
RP2_MM(rp2_mm_q6k, q6k_tile2)
RP2_MM(rp2_mm_q8, q8_tile2)
RP2_MM(rp2_mm_q5, q5_tile2)
RP2_MM(rp2_mm_q40, q40_tile2)
RP2_MM(rp2_mm_q41, q41_tile2)

void cpu_kernels_rp2(struct cpu_kernels *k)
{
    k->mm_rp[DT_Q4_K] = rp2_mm_q4k;
    k->mm_rp[DT_Q6_K] = rp2_mm_q6k;
    k->mm_rp[DT_Q8_0] = rp2_mm_q8;
    k->mm_rp[DT_Q5_0] = rp2_mm_q5;
    k->mm_rp[DT_Q4_0] = rp2_mm_q40;
    k->mm_rp[DT_Q4_1] = rp2_mm_q41;
}
