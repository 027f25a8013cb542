/* be_sample.h — the math of the OPTIONAL op sample (backend.h), shared by the host sampler
 * (engine/sampler.c), the CPU backend and the reference the CUDA kernel is tested against.
 *
 * A row is sampled in the sampler's documented order (DESIGN.md §5): logit_bias, then the
 * repetition, presence and frequency penalties over windows of the row's token history,
 * then the row's grammar mask (a bitset of the ids allowed; the others become -inf), then
 * either the argmax (inv_t = 0, or a row whose max is not finite) or a draw at
 * temperature 1/inv_t over the whole vocabulary. The draw is exact integer arithmetic, so
 * every backend and the host sampler give the same id for the same logits and uniform:
 *   w_i = be_fast_exp((x_i - mx) * inv_t)          (float, no contraction)
 *   q_i = (uint64) (w_i * 2^40)                      (truncation; q of the max is 2^40)
 *   r   = floor(u53 * sum_i q_i / 2^53)              (u53: the 53-bit uniform integer)
 *   id  = the first i with q_0 + ... + q_i > r.
 * Integer sums do not depend on their order, so a device may reduce and scan the row in any
 * order; an id whose weight is below 2^-40 of the max's is never drawn.
 */
#ifndef CINFER_BACKEND_BE_SAMPLE_H
#define CINFER_BACKEND_BE_SAMPLE_H

#include <stdint.h>
#include <string.h>

/* Per output row parameters, BE_SAMPLE_ROW_WORDS 32-bit words; rows at the start of the
 * op's params blob, then the aux words the offsets point into (word offsets from the
 * blob's start). */
struct be_sample_row {
    float inv_t;              /* 1 / temperature; 0 = the argmax rule of the op argmax */
    int32_t n_bias, bias_off; /* logit_bias: n_bias (id, float bits) pairs, added in order */
    int32_t n_hist, hist_off; /* the row's token history, oldest first (ids in [0, n)) */
    int32_t use_prev;         /* 1: the history continues with prev[row] (a queued step) */
    int32_t rep_w, pres_w, freq_w; /* windows in tokens over the history; 0 = all; -1 = off */
    float rep, pres, freq;    /* the penalties (used when their window is not -1) */
    uint32_t u_lo, u_hi;      /* the draw's 53-bit uniform integer (u_hi: its top 21 bits) */
    int32_t skip;             /* 1: not sampled by the op: out = -1 and x is not touched */
    int32_t mask_off;         /* 0: no grammar mask; else the word offset of a bitset of
                               * (n + 31) / 32 words: id i is allowed when bit i % 32 of word
                               * i / 32 is set, the others are set to -inf after the penalties */
};
#define BE_SAMPLE_ROW_WORDS 16
/* The most aux words a step's rows may use, per output row on average. */
#define BE_SAMPLE_AUX_PER_ROW 1024
/* The most rows of a step that carry a grammar mask (their bitsets come on top of the aux
 * words: model_samp_words_max). */
#define BE_SAMPLE_MASK_ROWS 64

/* The bits of a float and back. */
static inline uint32_t be_f2u(float f)
{
    uint32_t u;
    memcpy(&u, &f, sizeof u);
    return u;
}
static inline float be_u2f(uint32_t u)
{
    float f;
    memcpy(&f, &u, sizeof f);
    return f;
}

/* e^x in float, about 2 ulp (Cephes' expf scheme: 2^n * e^r with a degree-6 polynomial);
 * 0 for x < -87 (and -inf, NaN). The selects are bit masks, not branches, so that the loops
 * over the vocabulary vectorise under strict IEEE flags (no -ffast-math anywhere). Every
 * operation rounds on its own (C17 without extensions does not contract; the CUDA kernel
 * spells each rounding out). */
static inline float be_fast_exp(float x)
{
#if defined(__clang__)
#pragma STDC FP_CONTRACT OFF /* clang contracts a * b + c by default; gcc's C17 does not */
#endif
    uint32_t ok = -(uint32_t)(x >= -87.0f), big = -(uint32_t)(x > 88.0f);
    uint32_t xb = (be_f2u(x) & ok) | (be_f2u(-87.0f) & ~ok);
    float xc = be_u2f((xb & ~big) | (be_f2u(88.0f) & big));
    float n = (xc * 1.44269504088896341f + 12582912.0f) - 12582912.0f; /* round to nearest */
    float r = xc - n * 0.693359375f;
    r = r - n * -2.12194440e-4f;
    float p = 1.9875691500e-4f;
    p = p * r + 1.3981999507e-3f;
    p = p * r + 8.3334519073e-3f;
    p = p * r + 4.1665795894e-2f;
    p = p * r + 1.6666665459e-1f;
    p = p * r + 5.0000001201e-1f;
    p = p * r * r + r + 1.0f;
    float y = p * be_u2f((uint32_t)((int32_t)n + 127) << 23);
    return be_u2f(be_f2u(y) & ok);
}

/* The draw's fixed-point weight of w in [0, 1]. */
static inline uint64_t be_sample_q(float w) { return (uint64_t)(w * 1099511627776.0f); }

/* floor(a * b / 2^64), exactly. */
static inline uint64_t be_mulhi64(uint64_t a, uint64_t b)
{
    uint64_t al = a & 0xffffffffu, ah = a >> 32, bl = b & 0xffffffffu, bh = b >> 32;
    uint64_t ll = al * bl, lh = al * bh, hl = ah * bl, hh = ah * bh;
    uint64_t mid = (ll >> 32) + (lh & 0xffffffffu) + (hl & 0xffffffffu);
    return hh + (lh >> 32) + (hl >> 32) + (mid >> 32);
}

/* r = floor(u53 * total / 2^53), < total for total > 0. */
static inline uint64_t be_sample_target(uint64_t u53, uint64_t total)
{
    return be_mulhi64(u53 << 11, total);
}

/* The draw over weights w[0..n) (each in [0, 1], at least one 1) with the uniform u53. */
int32_t be_sample_draw(const float *w, int n, uint64_t u53);

/* The reference op sample (backend.h) on host memory: rows of x (rows, n) processed in
 * place, ids to out; prev (rows) may be NULL when no row sets use_prev. */
void be_sample_ref(int32_t *out, float *x, int rows, int n, const void *params,
                   const int32_t *prev);

#endif
