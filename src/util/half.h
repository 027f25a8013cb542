/* half.h — IEEE fp16 and bfloat16 <-> fp32 conversions (scalar, exact). */
#ifndef CINFER_UTIL_HALF_H
#define CINFER_UTIL_HALF_H

#include <stdint.h>
#include <string.h>

static inline float half_bits_to_f32(uint32_t u)
{
    float f;
    memcpy(&f, &u, 4);
    return f;
}

static inline uint32_t half_f32_to_bits(float f)
{
    uint32_t u;
    memcpy(&u, &f, 4);
    return u;
}

static inline float half_bf16_to_f32(uint16_t h) { return half_bits_to_f32((uint32_t)h << 16); }

/* Round-to-nearest-even, NaN kept quiet. */
static inline uint16_t half_f32_to_bf16(float f)
{
    uint32_t u = half_f32_to_bits(f);
    if ((u & 0x7fffffffu) > 0x7f800000u)
        return (uint16_t)((u >> 16) | 0x40);
    u += 0x7fffu + ((u >> 16) & 1);
    return (uint16_t)(u >> 16);
}

static inline float half_f16_to_f32(uint16_t h)
{
    uint32_t sign = (uint32_t)(h & 0x8000) << 16;
    uint32_t exp = (h >> 10) & 0x1f, man = h & 0x3ff;
    if (exp == 0) {
        if (man == 0)
            return half_bits_to_f32(sign);
        /* subnormal: value = man * 2^-24 */
        float v = (float)man * (1.0f / 16777216.0f);
        return sign ? -v : v;
    }
    if (exp == 31)
        return half_bits_to_f32(sign | 0x7f800000u | (man << 13));
    return half_bits_to_f32(sign | ((exp + 112) << 23) | (man << 13));
}

static inline uint16_t half_f32_to_f16(float f)
{
    uint32_t x = half_f32_to_bits(f);
    uint32_t sign = (x >> 16) & 0x8000;
    uint32_t ax = x & 0x7fffffffu;
    if (ax >= 0x7f800000u)
        return (uint16_t)(sign | 0x7c00 | (ax > 0x7f800000u ? 0x200 : 0));
    if (ax >= 0x477ff000u) /* rounds to >= 65520: overflow to inf */
        return (uint16_t)(sign | 0x7c00);
    if (ax < 0x38800000u) { /* subnormal or zero in fp16 */
        float a = half_bits_to_f32(ax);
        /* scale so that the fp16 subnormal lsb becomes 1, round-to-nearest-even via rint */
        float s = a * 16777216.0f;
        uint32_t m = (uint32_t)s;
        float r = s - (float)m;
        if (r > 0.5f || (r == 0.5f && (m & 1)))
            m++;
        return (uint16_t)(sign | m);
    }
    uint32_t e = ((ax >> 23) - 112) << 10;
    uint32_t m = (ax >> 13) & 0x3ff;
    uint32_t rest = ax & 0x1fff;
    uint32_t h = e | m;
    if (rest > 0x1000 || (rest == 0x1000 && (h & 1)))
        h++;
    return (uint16_t)(sign | h);
}

#endif
