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

static float dot_kv_f32(const float *q, const void *krow, int n)
{
    const float *k = krow;
    float s = 0.0f;
    for (int i = 0; i < n; i++)
        s += q[i] * k[i];
    return s;
}

static float dot_kv_f16(const float *q, const void *krow, int n)
{
    const uint16_t *k = krow;
    float s = 0.0f;
    for (int i = 0; i < n; i++)
        s += q[i] * half_f16_to_f32(k[i]);
    return s;
}

static void axpy_kv_f32(float *acc, float p, const void *vrow, int n)
{
    const float *v = vrow;
    for (int i = 0; i < n; i++)
        acc[i] += p * v[i];
}

static void axpy_kv_f16(float *acc, float p, const void *vrow, int n)
{
    const uint16_t *v = vrow;
    for (int i = 0; i < n; i++)
        acc[i] += p * half_f16_to_f32(v[i]);
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
    k->dot_kv[0] = dot_kv_f32;
    k->dot_kv[1] = dot_kv_f16;
    k->axpy_kv[0] = axpy_kv_f32;
    k->axpy_kv[1] = axpy_kv_f16;
    k->scale_inplace = scale_inplace;
    k->sumsq = sumsq;
    k->norm_mul = norm_mul;
}
