/* kvq.c — quantized KV formats (kvq.h). */
#include "backend/kvq.h"

#include <math.h>
#include <string.h>

#include "backend/dtype.h"
#include "backend/kvq_lm.h"
#include "util/half.h"

static const signed char g_bits[KVF_N] = {32, 16, 2, 4, 5, 8, 2, 3, 4, 5, 8};
static const char *const g_names[KVF_N] = {"f32", "f16", "a2",  "a4",  "a5", "a8",
                                           "lm2", "lm3", "lm4", "lm5", "lm8"};

int kvq_fmt_bits(int fmt) { return fmt >= 0 && fmt < KVF_N ? g_bits[fmt] : 0; }
int kvq_fmt_is_lm(int fmt) { return fmt >= KVF_L2 && fmt <= KVF_L8; }
const char *kvq_fmt_name(int fmt) { return fmt >= 0 && fmt < KVF_N ? g_names[fmt] : "?"; }

int kvq_fmt_affine(int bits)
{
    switch (bits) {
    case 2: return KVF_A2;
    case 4: return KVF_A4;
    case 5: return KVF_A5;
    case 8: return KVF_A8;
    default: return -1;
    }
}

int kvq_fmt_lm(int bits)
{
    switch (bits) {
    case 2: return KVF_L2;
    case 3: return KVF_L3;
    case 4: return KVF_L4;
    case 5: return KVF_L5;
    case 8: return KVF_L8;
    default: return -1;
    }
}

const float *kvq_lm_codebook(int bits, double *mse)
{
    const float *c = NULL;
    double d = 0;
    switch (bits) {
    case 2: c = kvq_lm2, d = KVQ_LM2_MSE; break;
    case 3: c = kvq_lm3, d = KVQ_LM3_MSE; break;
    case 4: c = kvq_lm4, d = KVQ_LM4_MSE; break;
    case 5: c = kvq_lm5, d = KVQ_LM5_MSE; break;
    case 8: c = kvq_lm8, d = KVQ_LM8_MSE; break;
    default: break;
    }
    if (mse)
        *mse = d;
    return c;
}

int kvq_code(int kf, int vf, int rk, int rv, int head_dim, int *code, struct cerr *e)
{
    if (kf < 0 || kf >= KVF_N || vf < 0 || vf >= KVF_N)
        return cerr_set(e, CERR_INVALID, "kv-quant: unknown format");
    rk = rk || kvq_fmt_is_lm(kf);
    rv = rv || kvq_fmt_is_lm(vf);
    if (kf <= KVF_F16 && kf == vf && !rk && !rv) {
        *code = kf == KVF_F16 ? DT_F16 : DT_F32;
        return 0;
    }
    if (head_dim <= 0 || head_dim > KVQ_MAX_HD || head_dim % 8)
        return cerr_set(e, CERR_INVALID,
                        "kv-quant: head_dim %d is not a multiple of 8 up to %d", head_dim,
                        KVQ_MAX_HD);
    if ((rk || rv) && (head_dim & (head_dim - 1)))
        return cerr_set(e, CERR_INVALID,
                        "kv-quant: the Hadamard rotation needs a power-of-two head_dim (%d)",
                        head_dim);
    int gl = head_dim % 32 == 0 ? 2 : head_dim % 16 == 0 ? 1 : 0;
    *code = KVQ_TAG | kf | vf << 4 | (rk ? 1 : 0) << 8 | (rv ? 1 : 0) << 9 | gl << 10 |
            (head_dim / 8) << 12;
    return 0;
}

size_t kvq_group_bytes(int fmt, int g)
{
    int b = kvq_fmt_bits(fmt);
    if (fmt <= KVF_F16)
        return (size_t)g * (size_t)b / 8;
    return (kvq_fmt_is_lm(fmt) ? 2 : 4) + (size_t)g * (size_t)b / 8;
}

size_t kvq_row_bytes(int dt, int which, int kv_dim)
{
    if (!kvq_is(dt))
        return (size_t)kv_dim * (dt == DT_F16 ? 2 : 4);
    int g = kvq_group_of(dt);
    return (size_t)(kv_dim / g) * kvq_group_bytes(kvq_fmt_of(dt, which), g);
}

/* ---- bit packing: 8 codes per b bytes, little-endian ---- */

static void pack(uint8_t *p, int b, const uint8_t *q, int n)
{
    if (b == 8) {
        memcpy(p, q, (size_t)n);
        return;
    }
    if (b == 4) {
        for (int i = 0; i < n; i += 2)
            p[i / 2] = (uint8_t)(q[i] | q[i + 1] << 4);
        return;
    }
    for (int i = 0; i < n; i += 8) {
        uint64_t acc = 0;
        for (int j = 0; j < 8; j++)
            acc |= (uint64_t)q[i + j] << (j * b);
        for (int j = 0; j < b; j++)
            *p++ = (uint8_t)(acc >> (8 * j));
    }
}

static void unpack(const uint8_t *p, int b, uint8_t *q, int n)
{
    if (b == 8) {
        memcpy(q, p, (size_t)n);
        return;
    }
    if (b == 4) {
        for (int i = 0; i < n; i += 2) {
            q[i] = p[i / 2] & 15;
            q[i + 1] = p[i / 2] >> 4;
        }
        return;
    }
    if (b == 3) { /* the default turbo values: 8 codes per 3 bytes, unrolled */
        for (int i = 0; i < n; i += 8, p += 3) {
            uint32_t acc = (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16;
            for (int j = 0; j < 8; j++)
                q[i + j] = (uint8_t)((acc >> (3 * j)) & 7);
        }
        return;
    }
    uint64_t mask = (1u << b) - 1;
    for (int i = 0; i < n; i += 8) {
        uint64_t acc = 0;
        for (int j = 0; j < b; j++)
            acc |= (uint64_t)*p++ << (8 * j);
        for (int j = 0; j < 8; j++)
            q[i + j] = (uint8_t)((acc >> (j * b)) & mask);
    }
}

static uint16_t ld16(const uint8_t *p)
{
    uint16_t v;
    memcpy(&v, p, 2);
    return v;
}

static void st16(uint8_t *p, uint16_t v) { memcpy(p, &v, 2); }

/* ---- groups ---- */

void kvq_quant_group(int fmt, int g, const float *x, void *dst)
{
    uint8_t *p = dst, q[64];
    int b = kvq_fmt_bits(fmt);
    if (fmt == KVF_F32) {
        memcpy(p, x, (size_t)g * 4);
        return;
    }
    if (fmt == KVF_F16) {
        for (int i = 0; i < g; i++)
            st16(p + 2 * i, half_f32_to_f16(x[i]));
        return;
    }
    if (kvq_fmt_is_lm(fmt)) {
        const float *c = kvq_lm_codebook(b, NULL);
        int L = 1 << b;
        double ss = 0;
        for (int i = 0; i < g; i++)
            ss += (double)x[i] * x[i];
        uint16_t sh = half_f32_to_f16((float)sqrt(ss / g));
        float s = half_f16_to_f32(sh);
        float inv = s > 0.0f ? 1.0f / s : 0.0f;
        for (int i = 0; i < g; i++) {
            float u = x[i] * inv;
            /* first level whose upper midpoint is above u (binary search) */
            int lo = 0, hi = L - 1;
            while (lo < hi) {
                int mid = (lo + hi) / 2;
                if (u > 0.5f * (c[mid] + c[mid + 1]))
                    lo = mid + 1;
                else
                    hi = mid;
            }
            q[i] = (uint8_t)lo;
        }
        st16(p, sh);
        pack(p + 2, b, q, g);
        return;
    }
    float mn = x[0], mx = x[0];
    for (int i = 1; i < g; i++) {
        mn = x[i] < mn ? x[i] : mn;
        mx = x[i] > mx ? x[i] : mx;
    }
    int top = (1 << b) - 1;
    uint16_t dh = half_f32_to_f16((mx - mn) / (float)top), mh = half_f32_to_f16(mn);
    float d = half_f16_to_f32(dh), m = half_f16_to_f32(mh);
    float inv = d > 0.0f ? 1.0f / d : 0.0f;
    for (int i = 0; i < g; i++) {
        float v = nearbyintf((x[i] - m) * inv);
        q[i] = (uint8_t)(v < 0.0f ? 0 : v > (float)top ? top : (int)v);
    }
    st16(p, dh);
    st16(p + 2, mh);
    pack(p + 4, b, q, g);
}

void kvq_dequant_group(int fmt, int g, const void *src, float *y)
{
    const uint8_t *p = src;
    uint8_t q[64];
    int b = kvq_fmt_bits(fmt);
    if (fmt == KVF_F32) {
        memcpy(y, p, (size_t)g * 4);
        return;
    }
    if (fmt == KVF_F16) {
        for (int i = 0; i < g; i++)
            y[i] = half_f16_to_f32(ld16(p + 2 * i));
        return;
    }
    if (kvq_fmt_is_lm(fmt)) {
        const float *c = kvq_lm_codebook(b, NULL);
        float s = half_f16_to_f32(ld16(p));
        unpack(p + 2, b, q, g);
        for (int i = 0; i < g; i++)
            y[i] = s * c[q[i]];
        return;
    }
    float d = half_f16_to_f32(ld16(p)), m = half_f16_to_f32(ld16(p + 2));
    const uint8_t *c = p + 4;
    if (b == 8) { /* the common formats read their codes directly (vectorizable loops) */
        for (int i = 0; i < g; i++)
            y[i] = m + d * (float)c[i];
        return;
    }
    if (b == 4) {
        for (int i = 0; i < g / 2; i++) {
            y[2 * i] = m + d * (float)(c[i] & 15);
            y[2 * i + 1] = m + d * (float)(c[i] >> 4);
        }
        return;
    }
    unpack(c, b, q, g);
    for (int i = 0; i < g; i++)
        y[i] = m + d * (float)q[i];
}

/* ---- rotation ---- */

void kvq_fwht(float *x, int n)
{
    for (int h = 1; h < n; h *= 2)
        for (int i = 0; i < n; i += 2 * h)
            for (int j = i; j < i + h; j++) {
                float a = x[j], b = x[j + h];
                x[j] = a + b;
                x[j + h] = a - b;
            }
}

/* The fixed ±1 diagonal: bit i of a splitmix64 stream seeded with a constant. */
static float sign_of(int i)
{
    uint64_t z = 0x9E3779B97F4A7C15ull * (uint64_t)(i / 64 + 1);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    z ^= z >> 31;
    return (z >> (i % 64)) & 1 ? -1.0f : 1.0f;
}

void kvq_rotate(float *x, int n)
{
    for (int i = 0; i < n; i++)
        x[i] *= sign_of(i);
    kvq_fwht(x, n);
    float s = 1.0f / sqrtf((float)n);
    for (int i = 0; i < n; i++)
        x[i] *= s;
}

void kvq_unrotate(float *x, int n)
{
    kvq_fwht(x, n);
    float s = 1.0f / sqrtf((float)n);
    for (int i = 0; i < n; i++)
        x[i] *= s * sign_of(i);
}

/* ---- rows ---- */

void kvq_store_row(int dt, int which, void *dst, const float *src, int kv_dim)
{
    int fmt = kvq_fmt_of(dt, which), rot = kvq_rot_of(dt, which);
    int hd = kvq_head_dim_of(dt), g = kvq_group_of(dt);
    size_t gb = kvq_group_bytes(fmt, g);
    uint8_t *p = dst;
    float tmp[KVQ_MAX_HD];
    for (int h = 0; h < kv_dim / hd; h++) {
        const float *x = src + (size_t)h * hd;
        if (rot) {
            memcpy(tmp, x, (size_t)hd * sizeof(float));
            kvq_rotate(tmp, hd);
            x = tmp;
        }
        for (int i = 0; i < hd; i += g, p += gb)
            kvq_quant_group(fmt, g, x + i, p);
    }
}

/* Groups of 32 (every head_dim that is a multiple of 32): fixed trip counts the compiler
 * vectorizes; the same arithmetic as kvq_dequant_group. */
static void load32_a8(const uint8_t *p, size_t gb, int hd, float *restrict out)
{
    for (int i = 0; i < hd; i += 32, p += gb) {
        float d = half_f16_to_f32(ld16(p)), m = half_f16_to_f32(ld16(p + 2));
        const uint8_t *restrict c = p + 4;
        float *restrict y = out + i;
        for (int j = 0; j < 32; j++)
            y[j] = m + d * (float)c[j];
    }
}

static void load32_a4(const uint8_t *p, size_t gb, int hd, float *restrict out)
{
    for (int i = 0; i < hd; i += 32, p += gb) {
        float d = half_f16_to_f32(ld16(p)), m = half_f16_to_f32(ld16(p + 2));
        const uint8_t *restrict c = p + 4;
        float *restrict y = out + i;
        for (int j = 0; j < 16; j++) {
            y[2 * j] = m + d * (float)(c[j] & 15);
            y[2 * j + 1] = m + d * (float)(c[j] >> 4);
        }
    }
}

static void load32_lm(int b, const uint8_t *p, size_t gb, int hd, float *restrict out)
{
    const float *cb = kvq_lm_codebook(b, NULL);
    uint8_t q[32];
    float t[32];
    int L = 1 << b;
    for (int i = 0; i < hd; i += 32, p += gb) {
        float s = half_f16_to_f32(ld16(p));
        unpack(p + 2, b, q, 32);
        float *restrict y = out + i;
        if (L <= 32) { /* the scaled codebook once per group: the same products */
            for (int k = 0; k < L; k++)
                t[k] = s * cb[k];
            for (int j = 0; j < 32; j++)
                y[j] = t[q[j]];
        } else {
            for (int j = 0; j < 32; j++)
                y[j] = s * cb[q[j]];
        }
    }
}

void kvq_load_head(int dt, int which, const void *src, int h, float *out)
{
    int fmt = kvq_fmt_of(dt, which), hd = kvq_head_dim_of(dt), g = kvq_group_of(dt);
    size_t gb = kvq_group_bytes(fmt, g);
    const uint8_t *p = (const uint8_t *)src + (size_t)h * (size_t)(hd / g) * gb;
    if (g == 32) {
        if (fmt == KVF_A8) {
            load32_a8(p, gb, hd, out);
            return;
        }
        if (fmt == KVF_A4) {
            load32_a4(p, gb, hd, out);
            return;
        }
        if (kvq_fmt_is_lm(fmt)) {
            load32_lm(kvq_fmt_bits(fmt), p, gb, hd, out);
            return;
        }
    }
    for (int i = 0; i < hd; i += g, p += gb)
        kvq_dequant_group(fmt, g, p, out + i);
}
