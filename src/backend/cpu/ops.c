/* ops.c — the element-wise and per-row ops: rmsnorm, rope, act_mul, add, add_row, scale,
 * softcap.
 *
 * Formulas follow the PyTorch float32 reference the model layer is tested against:
 * rmsnorm y = w * (x * rsqrt(mean(x^2) + eps)); rope angle = (float)pos * inv_freq[i]
 * with cosf/sinf; gelu_tanh = 0.5x(1 + tanh(sqrt(2/pi)(x + 0.044715x^3))); silu =
 * x / (1 + exp(-x)) in the scalar kernels (SIMD levels: x * sigmoid(z), the same function
 * with a polynomial exp). Per-row results never depend on how many rows are in the call.
 */
#include <math.h>

#include "backend/cpu/cpu_int.h"

enum { EW_CHUNK = 1 << 14 /* elements per work item of the element-wise ops */ };

struct row_task {
    const struct cpu_be *cb;
    float *y;
    const float *x, *w;
    int rows, dim;
    float eps;
};

static void rms_chunk(void *arg, int64_t r)
{
    const struct row_task *t = arg;
    const struct cpu_kernels *k = &t->cb->k;
    const float *x = t->x + r * t->dim;
    float ss = k->sumsq(x, t->dim);
    float s = 1.0f / sqrtf(ss / (float)t->dim + t->eps);
    k->norm_mul(t->y + r * t->dim, x, s, t->w, t->dim);
}

void cpu_rmsnorm(struct be *b, float *y, const float *x, const float *w, int rows, int dim,
                 float eps)
{
    struct cpu_be *cb = cpu_be(b);
    struct row_task t = {cb, y, x, w, rows, dim, eps};
    cpu_pool_run(cb->pool, rms_chunk, &t, rows);
}

struct rope_task {
    float *x;
    const int32_t *pos;
    int n_tok, n_head, head_dim, rot_dim, mode;
    const float *inv_freq;
    float mscale;
};

static void rope_chunk(void *arg, int64_t tok)
{
    const struct rope_task *t = arg;
    int half = t->rot_dim / 2;
    {
        float *xt = t->x + (int64_t)tok * t->n_head * t->head_dim;
        float fp = (float)t->pos[tok];
        for (int i = 0; i < half; i++) {
            float ang = fp * t->inv_freq[i];
            float c = cosf(ang) * t->mscale, s = sinf(ang) * t->mscale;
            int i0 = t->mode == BE_ROPE_NEOX ? i : 2 * i;
            int i1 = t->mode == BE_ROPE_NEOX ? i + half : 2 * i + 1;
            for (int h = 0; h < t->n_head; h++) {
                float *v = xt + (int64_t)h * t->head_dim;
                float x0 = v[i0], x1 = v[i1];
                v[i0] = x0 * c - x1 * s;
                v[i1] = x1 * c + x0 * s;
            }
        }
    }
}

void cpu_rope(struct be *b, float *x, const int32_t *pos, int n_tok, int n_head, int head_dim,
              int rot_dim, int mode, const float *inv_freq, float mscale)
{
    struct cpu_be *cb = cpu_be(b);
    struct rope_task t = {x, pos, n_tok, n_head, head_dim, rot_dim, mode, inv_freq, mscale};
    cpu_pool_run(cb->pool, rope_chunk, &t, n_tok);
}

/* ---- element-wise ---- */

enum ew_kind { EW_SILU, EW_GELU, EW_ADD, EW_SCALE, EW_SOFTCAP };

struct ew_task {
    const struct cpu_kernels *k;
    int kind;
    float *y;
    const float *a, *x;
    float s;
    int64_t n;
};

static void ew_chunk(void *arg, int64_t c)
{
    const struct ew_task *t = arg;
    int64_t i0 = c * EW_CHUNK, i1 = i0 + EW_CHUNK < t->n ? i0 + EW_CHUNK : t->n;
    float *y = t->y;
    const float *a = t->a, *x = t->x;
    switch (t->kind) {
    case EW_SILU:
        t->k->act_mul(y + i0, a + i0, x + i0, i1 - i0, BE_ACT_SILU);
        break;
    case EW_GELU:
        t->k->act_mul(y + i0, a + i0, x + i0, i1 - i0, BE_ACT_GELU_TANH);
        break;
    case EW_ADD:
        for (int64_t i = i0; i < i1; i++)
            y[i] = a[i] + x[i];
        break;
    case EW_SCALE:
        for (int64_t i = i0; i < i1; i++)
            y[i] = x[i] * t->s;
        break;
    case EW_SOFTCAP:
        for (int64_t i = i0; i < i1; i++)
            y[i] = t->s * tanhf(x[i] / t->s);
        break;
    }
}

static void ew_run(struct cpu_be *cb, struct ew_task *t)
{
    if (t->n <= 0)
        return;
    cpu_pool_run(cb->pool, ew_chunk, t, (t->n + EW_CHUNK - 1) / EW_CHUNK);
}

void cpu_act_mul(struct be *b, float *y, const float *gate, const float *up, int64_t n, int act)
{
    struct ew_task t = {&cpu_be(b)->k, act == BE_ACT_GELU_TANH ? EW_GELU : EW_SILU, y, gate, up,
                        0.0f, n};
    ew_run(cpu_be(b), &t);
}

void cpu_add(struct be *b, float *y, const float *a, const float *x, int64_t n)
{
    struct ew_task t = {&cpu_be(b)->k, EW_ADD, y, a, x, 0.0f, n};
    ew_run(cpu_be(b), &t);
}

void cpu_scale(struct be *b, float *y, const float *x, float s, int64_t n)
{
    struct ew_task t = {&cpu_be(b)->k, EW_SCALE, y, NULL, x, s, n};
    ew_run(cpu_be(b), &t);
}

void cpu_softcap(struct be *b, float *y, const float *x, float s, int64_t n)
{
    struct ew_task t = {&cpu_be(b)->k, EW_SOFTCAP, y, NULL, x, s, n};
    ew_run(cpu_be(b), &t);
}

void cpu_add_row(struct be *b, float *y, const float *bias, int rows, int dim)
{
    (void)b;
    for (int r = 0; r < rows; r++) {
        float *yr = y + (int64_t)r * dim;
        for (int i = 0; i < dim; i++)
            yr[i] += bias[i];
    }
}
