/* quant.c — scalar reference for the GGML block formats: decode, activation quantization,
 * dot products. Written for clarity, not speed: the SIMD files are the fast path and the
 * conformance test checks them against these functions.
 *
 * Every format is decoded to small signed integers plus per-group scales, so a dot product
 * is an exact integer sum per group followed by a few float multiplies per block.
 */
#include "backend/cpu/quant.h"

#include <math.h>
#include <string.h>

#include "util/half.h"

_Static_assert(sizeof(struct blk_q4_0) == 18, "q4_0");
_Static_assert(sizeof(struct blk_q4_1) == 20, "q4_1");
_Static_assert(sizeof(struct blk_q5_0) == 22, "q5_0");
_Static_assert(sizeof(struct blk_q5_1) == 24, "q5_1");
_Static_assert(sizeof(struct blk_q8_0) == 34, "q8_0");
_Static_assert(sizeof(struct blk_q2_k) == 84, "q2_k");
_Static_assert(sizeof(struct blk_q3_k) == 110, "q3_k");
_Static_assert(sizeof(struct blk_q4_k) == 144, "q4_k");
_Static_assert(sizeof(struct blk_q5_k) == 176, "q5_k");
_Static_assert(sizeof(struct blk_q6_k) == 210, "q6_k");
_Static_assert(sizeof(struct blk_a8) == 48, "a8");
_Static_assert(sizeof(struct blk_a8k) == 292, "a8k");

static inline float f16(uint16_t h) { return half_f16_to_f32(h); }

int quant_act_kind(int dt)
{
    switch (dt) {
    case DT_Q4_0: case DT_Q4_1: case DT_Q5_0: case DT_Q5_1: case DT_Q8_0:
        return QA_A8;
    case DT_Q2_K: case DT_Q3_K: case DT_Q4_K: case DT_Q5_K: case DT_Q6_K:
        return QA_A8K;
    default:
        return QA_F32;
    }
}

size_t quant_act_row_bytes(int kind, int64_t k)
{
    switch (kind) {
    case QA_A8: return (size_t)(k / 32) * sizeof(struct blk_a8);
    case QA_A8K: return (size_t)(k / 256) * sizeof(struct blk_a8k);
    default: return (size_t)k * sizeof(float);
    }
}

/* Round half to even (as nearbyintf in the default mode, exact for |v| < 2^22) without a
 * libm call, clamped to [-127, 127]; NaN -> 0 (garbage in, garbage out, but no UB). The
 * product is its own statement so it is never contracted into an FMA. */
static inline int8_t round_i8(float x, float scale)
{
    float t = x * scale;
    float v = (t + 12582912.0f) - 12582912.0f;
    v = v > 127.0f ? 127.0f : (v < -127.0f ? -127.0f : v);
    return v == v ? (int8_t)v : 0;
}

/* The activation formats follow what llama.cpp's x86 code does for the same weights, so
 * outputs track it: 32-blocks (its Q8_0 / Q8_1) use id = 127 / amax, round half to even,
 * and keep d = amax / 127 and d * sum rounded to fp16; 256-blocks (its Q8_K) take the
 * signed value of largest magnitude, iscale = -127 / max, d = 1 / iscale in fp32. */
static void quant_a8(const float *x, struct blk_a8 *y)
{
    float amax = 0.0f;
    for (int i = 0; i < 32; i++) {
        float a = fabsf(x[i]);
        amax = a > amax ? a : amax;
    }
    float d = amax / 127.0f;
    float id = amax != 0.0f ? 127.0f / amax : 0.0f;
    int s = 0;
    for (int i = 0; i < 32; i++) {
        y->q[i] = round_i8(x[i], id);
        s += y->q[i];
    }
    y->d = half_f16_to_f32(half_f32_to_f16(d));
    y->ds = half_f16_to_f32(half_f32_to_f16(d * (float)s));
    y->ns1 = -s;
    y->ns2 = -2 * s;
}

static void quant_a8k(const float *x, struct blk_a8k *y)
{
    float amax = 0.0f, max = 0.0f;
    for (int i = 0; i < 256; i++) {
        float a = fabsf(x[i]);
        if (a > amax)
            amax = a, max = x[i];
    }
    if (amax == 0.0f) {
        memset(y, 0, sizeof *y);
        return;
    }
    float iscale = -127.0f / max;
    for (int i = 0; i < 256; i++)
        y->q[i] = round_i8(x[i], iscale);
    for (int g = 0; g < 16; g++) {
        int s = 0;
        for (int i = 0; i < 16; i++)
            s += y->q[g * 16 + i];
        y->bsums[g] = (int16_t)s;
    }
    y->d = 1.0f / iscale;
}

void quant_act_row(int kind, const float *x, void *dst, int64_t k)
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

/* ---- 32-element blocks ---- */

void quant_unpack32(int dt, const void *blk, int8_t v[32], float *d, float *m)
{
    *m = 0.0f;
    switch (dt) {
    case DT_Q4_0: {
        const struct blk_q4_0 *b = blk;
        *d = f16(b->d);
        for (int j = 0; j < 16; j++) {
            v[j] = (int8_t)((b->qs[j] & 0xf) - 8);
            v[j + 16] = (int8_t)((b->qs[j] >> 4) - 8);
        }
        break;
    }
    case DT_Q4_1: {
        const struct blk_q4_1 *b = blk;
        *d = f16(b->d);
        *m = f16(b->m);
        for (int j = 0; j < 16; j++) {
            v[j] = (int8_t)(b->qs[j] & 0xf);
            v[j + 16] = (int8_t)(b->qs[j] >> 4);
        }
        break;
    }
    case DT_Q5_0:
    case DT_Q5_1: {
        const uint8_t *qh, *qs;
        int off;
        if (dt == DT_Q5_0) {
            const struct blk_q5_0 *b = blk;
            *d = f16(b->d);
            qh = b->qh, qs = b->qs, off = 16;
        } else {
            const struct blk_q5_1 *b = blk;
            *d = f16(b->d);
            *m = f16(b->m);
            qh = b->qh, qs = b->qs, off = 0;
        }
        uint32_t h = (uint32_t)qh[0] | (uint32_t)qh[1] << 8 | (uint32_t)qh[2] << 16 |
                     (uint32_t)qh[3] << 24;
        for (int j = 0; j < 16; j++) {
            int h0 = (h >> j) & 1, h1 = (h >> (j + 16)) & 1;
            v[j] = (int8_t)(((qs[j] & 0xf) | h0 << 4) - off);
            v[j + 16] = (int8_t)(((qs[j] >> 4) | h1 << 4) - off);
        }
        break;
    }
    case DT_Q8_0: {
        const struct blk_q8_0 *b = blk;
        *d = f16(b->d);
        memcpy(v, b->qs, 32);
        break;
    }
    default:
        *d = 0.0f;
        memset(v, 0, 32);
    }
}

/* ---- 256-element K blocks ---- */

/* The 12-byte packing of 8 six-bit scales and 8 six-bit mins used by Q4_K and Q5_K. */
static void k4_scale_min(const uint8_t *q, int j, int16_t *sc, int16_t *mn)
{
    if (j < 4) {
        *sc = q[j] & 63;
        *mn = q[j + 4] & 63;
    } else {
        *sc = (int16_t)((q[j + 4] & 0xf) | ((q[j - 4] >> 6) << 4));
        *mn = (int16_t)((q[j + 4] >> 4) | ((q[j] >> 6) << 4));
    }
}

void quant_unpackk(int dt, const void *blk, int8_t v[256], int16_t sc[16], int16_t mn[16],
                   float *d, float *dmin)
{
    *dmin = 0.0f;
    memset(mn, 0, 16 * sizeof mn[0]);
    switch (dt) {
    case DT_Q2_K: {
        const struct blk_q2_k *b = blk;
        *d = f16(b->d);
        *dmin = f16(b->dmin);
        for (int g = 0; g < 16; g++) {
            sc[g] = b->scales[g] & 0xf;
            mn[g] = b->scales[g] >> 4;
        }
        for (int e = 0; e < 256; e++) {
            int r = e % 128;
            v[e] = (int8_t)((b->qs[e / 128 * 32 + r % 32] >> (2 * (r / 32))) & 3);
        }
        break;
    }
    case DT_Q3_K: {
        const struct blk_q3_k *b = blk;
        *d = f16(b->d);
        /* 16 six-bit scales: low 4 bits in bytes 0..7 (two per byte), high 2 bits in 8..11 */
        for (int g = 0; g < 16; g++) {
            int lo = g < 8 ? b->scales[g] & 0xf : b->scales[g - 8] >> 4;
            int hi = (b->scales[8 + g % 4] >> (2 * (g / 4))) & 3;
            sc[g] = (int16_t)((lo | hi << 4) - 32);
        }
        for (int e = 0; e < 256; e++) {
            int n = e / 128, r = e % 128, j = r / 32, l = r % 32;
            int q = (b->qs[n * 32 + l] >> (2 * j)) & 3;
            int hbit = (b->hmask[l] >> (4 * n + j)) & 1;
            v[e] = (int8_t)(q - (hbit ? 0 : 4));
        }
        break;
    }
    case DT_Q4_K:
    case DT_Q5_K: {
        const uint8_t *scales, *qs, *qh = NULL;
        if (dt == DT_Q4_K) {
            const struct blk_q4_k *b = blk;
            *d = f16(b->d), *dmin = f16(b->dmin);
            scales = b->scales, qs = b->qs;
        } else {
            const struct blk_q5_k *b = blk;
            *d = f16(b->d), *dmin = f16(b->dmin);
            scales = b->scales, qs = b->qs, qh = b->qh;
        }
        for (int s = 0; s < 8; s++) {
            int16_t a, m;
            k4_scale_min(scales, s, &a, &m);
            sc[2 * s] = sc[2 * s + 1] = a;
            mn[2 * s] = mn[2 * s + 1] = m;
        }
        for (int e = 0; e < 256; e++) {
            int c = e / 64, r = e % 64, sb = e / 32;
            uint8_t byte = qs[c * 32 + r % 32];
            int q = r < 32 ? byte & 0xf : byte >> 4;
            if (qh)
                q |= ((qh[r % 32] >> sb) & 1) << 4;
            v[e] = (int8_t)q;
        }
        break;
    }
    case DT_Q6_K: {
        const struct blk_q6_k *b = blk;
        *d = f16(b->d);
        for (int g = 0; g < 16; g++)
            sc[g] = b->scales[g];
        for (int e = 0; e < 256; e++) {
            int n = e / 128, r = e % 128, qq = r / 32, l = r % 32;
            uint8_t lb = b->ql[n * 64 + l + (qq & 1) * 32];
            int lo = qq >= 2 ? lb >> 4 : lb & 0xf;
            int hi = (b->qh[n * 32 + l] >> (2 * qq)) & 3;
            v[e] = (int8_t)((lo | hi << 4) - 32);
        }
        break;
    }
    default:
        *d = 0.0f;
        memset(v, 0, 256);
        memset(sc, 0, 16 * sizeof sc[0]);
    }
}

void quant_dequant_row(int dt, const void *src, float *dst, int64_t k)
{
    switch (dt) {
    case DT_F32:
        memcpy(dst, src, (size_t)k * sizeof(float));
        return;
    case DT_F16: {
        const uint16_t *s = src;
        for (int64_t i = 0; i < k; i++)
            dst[i] = half_f16_to_f32(s[i]);
        return;
    }
    case DT_BF16: {
        const uint16_t *s = src;
        for (int64_t i = 0; i < k; i++)
            dst[i] = half_bf16_to_f32(s[i]);
        return;
    }
    default:
        break;
    }
    int be = dtype_block_elems(dt);
    size_t bb = dtype_block_bytes(dt);
    const uint8_t *p = src;
    for (int64_t b = 0; b < k / be; b++, p += bb, dst += be) {
        if (be == 32) {
            int8_t v[32];
            float d, m;
            quant_unpack32(dt, p, v, &d, &m);
            int has_min = dt == DT_Q4_1 || dt == DT_Q5_1;
            for (int i = 0; i < 32; i++)
                dst[i] = has_min ? (float)v[i] * d + m : (float)v[i] * d;
        } else {
            int8_t v[256];
            int16_t sc[16], mn[16];
            float d, dmin;
            quant_unpackk(dt, p, v, sc, mn, &d, &dmin);
            for (int e = 0; e < 256; e++)
                dst[e] = d * (float)sc[e / 16] * (float)v[e] - dmin * (float)mn[e / 16];
        }
    }
}

/* ---- reference dot products ---- */

static float dot_plain(int dt, int64_t k, const void *w, const float *x)
{
    float sum = 0.0f;
    const uint16_t *h = w;
    const float *f = w;
    for (int64_t i = 0; i < k; i++) {
        float wv = dt == DT_F32 ? f[i] : dt == DT_F16 ? half_f16_to_f32(h[i])
                                                       : half_bf16_to_f32(h[i]);
        sum += wv * x[i];
    }
    return sum;
}

static float dot_32(int dt, int64_t k, const void *w, const struct blk_a8 *x)
{
    const uint8_t *p = w;
    size_t bb = dtype_block_bytes(dt);
    float sum = 0.0f;
    for (int64_t b = 0; b < k / 32; b++, p += bb) {
        int8_t v[32];
        float d, m;
        quant_unpack32(dt, p, v, &d, &m);
        int isum = 0;
        for (int i = 0; i < 32; i++)
            isum += v[i] * x[b].q[i];
        sum += (d * x[b].d) * (float)isum + m * x[b].ds;
    }
    return sum;
}

static float dot_k(int dt, int64_t k, const void *w, const struct blk_a8k *x)
{
    const uint8_t *p = w;
    size_t bb = dtype_block_bytes(dt);
    float sum = 0.0f;
    for (int64_t b = 0; b < k / 256; b++, p += bb) {
        int8_t v[256];
        int16_t sc[16], mn[16];
        float d, dmin;
        quant_unpackk(dt, p, v, sc, mn, &d, &dmin);
        int sumi = 0, summ = 0;
        for (int g = 0; g < 16; g++) {
            int s = 0;
            for (int i = 0; i < 16; i++)
                s += v[g * 16 + i] * x[b].q[g * 16 + i];
            sumi += sc[g] * s;
            summ += mn[g] * x[b].bsums[g];
        }
        sum += x[b].d * d * (float)sumi - x[b].d * dmin * (float)summ;
    }
    return sum;
}

float quant_dot_ref(int dt, int64_t k, const void *w, const void *x)
{
    switch (quant_act_kind(dt)) {
    case QA_A8: return dot_32(dt, k, w, x);
    case QA_A8K: return dot_k(dt, k, w, x);
    default: return dot_plain(dt, k, w, x);
    }
}
