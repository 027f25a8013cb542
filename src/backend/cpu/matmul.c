/* matmul.c — matmul and get_rows glue: activation quantization, work split, tiling.
 *
 * y (n, M) = x (n, K) * w^T with w (M, K) in its file dtype. Quantized weights first get
 * each x row quantized once into the int8 format the weight type pairs with (kept in the
 * backend's grow-only buffer). Work items are (chunk of w rows) x (block of x rows); the
 * kernel computes every output element with the same operation sequence whatever the
 * item shape, so results do not depend on n or on the thread count (batch invariance).
 */
#include <math.h>
#include <string.h>

#include "backend/cpu/cpu_int.h"
#include "util/log.h"

enum { MM_BX = 64 /* x rows per work item */ };

struct mm_task {
    const struct cpu_be *cb;
    int dt;
    int64_t k, m;
    const void *w;
    size_t w_stride;
    const void *x;
    size_t x_stride;
    int n;
    float *y;
    int64_t cw, n_cw; /* w rows per work item, items along w */
    const struct rp_hdr *rp; /* repacked weights, or NULL */
};

static void mm_chunk(void *arg, int64_t it)
{
    const struct mm_task *t = arg;
    int64_t j0 = (it % t->n_cw) * t->cw, i0 = (it / t->n_cw) * MM_BX;
    int nw = (int)(t->m - j0 < t->cw ? t->m - j0 : t->cw);
    int nx = (int)(t->n - i0 < MM_BX ? t->n - i0 : MM_BX);
    if (t->rp) { /* j0 is a multiple of 16, so of RP_ROWS */
        t->cb->k.mm_rp[t->dt](t->rp, j0, nw, (const char *)t->x + (size_t)i0 * t->x_stride,
                              t->x_stride, nx, t->y + i0 * t->m + j0, t->m);
        return;
    }
    t->cb->k.mm[t->dt](t->dt, t->k, (const char *)t->w + (size_t)j0 * t->w_stride, t->w_stride,
                       nw, (const char *)t->x + (size_t)i0 * t->x_stride, t->x_stride, nx,
                       t->y + i0 * t->m + j0, t->m);
}

struct q_task {
    const struct cpu_kernels *kk;
    int kind;
    const float *x;
    int64_t k;
    void *dst;
    size_t stride;
    int n;
};

static void quant_chunk(void *arg, int64_t i)
{
    const struct q_task *t = arg;
    t->kk->quant_act(t->kind, t->x + i * t->k, (char *)t->dst + (size_t)i * t->stride, t->k);
}

void cpu_matmul(struct be *b, float *y, const float *x, int n, const struct be_tensor *w)
{
    struct cpu_be *cb = cpu_be(b);
    int64_t k = w->ne[0], m = w->ne[1];
    if (n <= 0 || m <= 0)
        return;
    int kind = quant_act_kind(w->dtype);
    const void *xa = x;
    size_t xs = (size_t)k * sizeof(float);
    if (kind != QA_F32) {
        xs = quant_act_row_bytes(kind, k);
        if (cpu_qbuf_reserve(cb, xs * (size_t)n) != 0) {
            for (int64_t i = 0; i < (int64_t)n * m; i++)
                y[i] = NAN;
            return;
        }
        struct q_task q = {&cb->k, kind, x, k, cb->qbuf, xs, n};
        cpu_pool_run(cb->pool, quant_chunk, &q, n);
        xa = cb->qbuf;
    }
    struct mm_task t = {
        .cb = cb, .dt = w->dtype, .k = k, .m = m, .w = w->data,
        .w_stride = dtype_row_bytes(w->dtype, k), .x = xa, .x_stride = xs, .n = n, .y = y,
        .rp = rp_of(w),
    };
    if (t.rp && !cb->k.mm_rp[w->dtype]) { /* repacked by a backend of another level */
        for (int64_t i = 0; i < (int64_t)n * m; i++)
            y[i] = NAN;
        return;
    }
    /* items of >= ~64K multiply-adds (claiming one costs an atomic), yet >= 4 per thread;
     * the split never changes a result */
    int64_t cw = (65536 / k + 15) & ~(int64_t)15;
    int64_t fair = (m / (4 * cb->n_threads)) & ~(int64_t)15;
    cw = cw > fair ? fair : cw;
    t.cw = cw < 16 ? 16 : cw > 256 ? 256 : cw;
    t.n_cw = (m + t.cw - 1) / t.cw;
    cpu_pool_run(cb->pool, mm_chunk, &t, t.n_cw * ((n + MM_BX - 1) / MM_BX));
}

void cpu_get_rows(struct be *b, float *out, const struct be_tensor *w, const int32_t *ids, int n)
{
    (void)b;
    int64_t k = w->ne[0];
    size_t rb = dtype_row_bytes(w->dtype, k);
    const struct rp_hdr *rp = rp_of(w);
    for (int i = 0; i < n; i++) {
        if (ids[i] < 0 || ids[i] >= w->ne[1]) { /* the model layer validates; stay safe */
            log_warn("cpu: get_rows id %d out of range [0, %lld)", ids[i], (long long)w->ne[1]);
            memset(out + i * k, 0, (size_t)k * sizeof(float));
            continue;
        }
        if (rp) { /* the file's blocks rebuilt a few at a time, then decoded as usual */
            enum { CH = 8 };
            _Alignas(64) uint8_t blk[CH * 256]; /* >= CH blocks of any repacked type */
            int64_t be = dtype_block_elems(w->dtype);
            for (int64_t b0 = 0; b0 < k / be; b0 += CH) {
                int64_t nb = k / be - b0 < CH ? k / be - b0 : CH;
                rp_orig_row_part(rp, ids[i], b0, nb, blk);
                quant_dequant_row(w->dtype, blk, out + i * k + b0 * be, nb * be);
            }
            continue;
        }
        quant_dequant_row(w->dtype, (const char *)w->data + (size_t)ids[i] * rb, out + i * k, k);
    }
}
