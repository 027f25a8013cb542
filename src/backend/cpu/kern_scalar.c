/* kern_scalar.c — the scalar kernel table: the reference every SIMD kernel is checked
 * against, and the fallback on CPUs without AVX2. Plain loops, float accumulation in
 * index order, no FMA contraction (the build is -std=c17, which keeps a*b+c unfused).
 */
#include <math.h>

#include "backend/cpu/cpu_int.h"
#include "util/half.h"

static void mm_ref(int dt, int64_t k, const void *w, size_t w_stride, int nw, const void *x,
                   size_t x_stride, int nx, float *y, int64_t ldy)
{
    for (int i = 0; i < nx; i++)
        for (int j = 0; j < nw; j++)
            y[i * ldy + j] = quant_dot_ref(dt, k, (const char *)w + (size_t)j * w_stride,
                                           (const char *)x + (size_t)i * x_stride);
}

static void exp_shift(float *s, float m, int n)
{
    for (int j = 0; j < n; j++)
        s[j] = expf(s[j] - m);
}

static void kt_pack(float *kt, const void *const *rows, int np, int n, int f16)
{
    for (int d = 0; d < n; d++)
        for (int j = 0; j < CPU_AT_CH; j++)
            kt[d * CPU_AT_CH + j] = j >= np ? 0.0f
                                   : f16   ? half_f16_to_f32(((const uint16_t *)rows[j])[d])
                                           : ((const float *)rows[j])[d];
}

static void at_chunk(const struct cpu_at_row *r, int nr, const float *kt, const float *const *v,
                     int n, float scale, float cap)
{
    for (int i = 0; i < nr; i++) {
        const struct cpu_at_row *w = &r[i];
        float s[CPU_AT_CH], cm = -INFINITY, sum = 0.0f;
        for (int j = 0; j < w->np; j++) {
            float e = 0.0f, o = 0.0f;
            for (int d = 0; d < n; d += 2)
                e += w->q[d] * kt[d * CPU_AT_CH + j];
            for (int d = 1; d < n; d += 2)
                o += w->q[d] * kt[d * CPU_AT_CH + j];
            s[j] = (e + o) * scale;
            if (cap > 0.0f)
                s[j] = cap * tanhf(s[j] / cap);
            cm = s[j] > cm ? s[j] : cm;
        }
        if (cm > *w->m) {
            float f = expf(*w->m - cm);
            *w->l *= f;
            for (int d = 0; d < n; d++)
                w->acc[d] *= f;
            *w->m = cm;
        }
        for (int j = 0; j < w->np; j++) {
            s[j] = expf(s[j] - *w->m);
            sum += s[j];
        }
        *w->l += sum;
        for (int j = 0; j < w->np; j++)
            for (int d = 0; d < n; d++)
                w->acc[d] += s[j] * v[j][d];
    }
}

static inline float silu(float x) { return x / (1.0f + expf(-x)); }

static inline float gelu_tanh(float x)
{
    const float beta = 0.7978845608028654f; /* sqrt(2/pi) */
    const float kappa = 0.044715f;
    float cube = x * x * x;
    float inner = beta * (x + kappa * cube);
    return 0.5f * x * (1.0f + tanhf(inner));
}

static void act_mul(float *y, const float *gate, const float *up, int64_t n, int act)
{
    if (act == BE_ACT_GELU_TANH)
        for (int64_t i = 0; i < n; i++)
            y[i] = gelu_tanh(gate[i]) * up[i];
    else
        for (int64_t i = 0; i < n; i++)
            y[i] = silu(gate[i]) * up[i];
}

static void f16_to_f32(float *dst, const uint16_t *src, int n)
{
    for (int i = 0; i < n; i++)
        dst[i] = half_f16_to_f32(src[i]);
}

static void f32_to_f16(uint16_t *dst, const float *src, int n)
{
    for (int i = 0; i < n; i++)
        dst[i] = half_f32_to_f16(src[i]);
}

static void scale_inplace(float *x, float s, int n)
{
    for (int i = 0; i < n; i++)
        x[i] *= s;
}

static float sumsq(const float *x, int n)
{
    float s = 0.0f;
    for (int i = 0; i < n; i++)
        s += x[i] * x[i];
    return s;
}

static void norm_mul(float *y, const float *x, float s, const float *w, int n)
{
    for (int i = 0; i < n; i++)
        y[i] = (x[i] * s) * w[i];
}

void cpu_kernels_scalar(struct cpu_kernels *k)
{
    for (int dt = 0; dt < DT_COUNT; dt++)
        k->mm[dt] = dtype_is_weight_type(dt) ? mm_ref : NULL;
    k->exp_shift = exp_shift;
    k->kt_pack = kt_pack;
    k->at_chunk = at_chunk;
    k->f32_to_f16 = f32_to_f16;
    k->f16_to_f32 = f16_to_f32;
    k->act_mul = act_mul;
    k->quant_act = quant_act_row;
    k->scale_inplace = scale_inplace;
    k->sumsq = sumsq;
    k->norm_mul = norm_mul;
}
