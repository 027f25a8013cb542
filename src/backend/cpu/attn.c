/* attn.c — kv_store and attention over the paged KV cache.
 *
 * Attention is a streaming (online) softmax: positions are visited in chunks of AT_CH in
 * increasing order starting at the window's first position; per chunk the scores are
 * computed, the running max/sum and the output accumulator are rescaled once, then the
 * chunk's V rows are added. No (n_tok, ctx) score matrix exists. Work items are
 * (token, kv head) pairs so each K/V row is read once for all query heads of its group;
 * each query head's arithmetic is the same whatever else is in the batch.
 */
#include <math.h>
#include <string.h>

#include "backend/cpu/cpu_int.h"
#include "util/half.h"
#include "util/log.h"

enum { AT_CH = 32, AT_ACC = 8192 /* floats of accumulator per work item, on the stack */ };

void cpu_kv_store(struct be *b, void *k_cache, void *v_cache, int kv_dtype, const float *k,
                  const float *v, const int32_t *slots, int n_tok, int kv_dim)
{
    (void)b;
    for (int t = 0; t < n_tok; t++) {
        size_t off = (size_t)slots[t] * (size_t)kv_dim;
        const float *kr = k + (int64_t)t * kv_dim, *vr = v + (int64_t)t * kv_dim;
        if (kv_dtype == DT_F16) {
            uint16_t *kc = (uint16_t *)k_cache + off, *vc = (uint16_t *)v_cache + off;
            for (int i = 0; i < kv_dim; i++) {
                kc[i] = half_f32_to_f16(kr[i]);
                vc[i] = half_f32_to_f16(vr[i]);
            }
        } else {
            memcpy((float *)k_cache + off, kr, (size_t)kv_dim * sizeof(float));
            memcpy((float *)v_cache + off, vr, (size_t)kv_dim * sizeof(float));
        }
    }
}

struct at_task {
    const struct cpu_be *cb;
    float *out;
    const float *q;
    const struct be_attn *a;
    int hg; /* query heads handled together (a divisor of the group size) */
};

/* Query heads h0 .. h0+nh of token t, all reading kv head g. */
static void attend(const struct at_task *tk, int t, int g, int h0, int nh)
{
    const struct be_attn *a = tk->a;
    const struct cpu_kernels *kk = &tk->cb->k;
    int hd = a->head_dim, kv_dim = a->n_kv_head * hd;
    int f16 = a->kv_dtype == DT_F16;
    size_t es = f16 ? 2 : 4;
    float acc[AT_ACC];
    float sc[AT_CH * 32];
    float mx[32], l[32];
    const float *qh[32];
    for (int i = 0; i < nh; i++) {
        mx[i] = -INFINITY;
        l[i] = 0.0f;
        qh[i] = tk->q + ((int64_t)t * a->n_head + h0 + i) * hd;
        memset(acc + i * hd, 0, (size_t)hd * sizeof(float));
    }
    int pos = a->pos[t];
    int lo = a->window > 0 && pos - a->window + 1 > 0 ? pos - a->window + 1 : 0;
    const int32_t *bt = a->block_tables + (int64_t)a->seq[t] * a->max_blocks;
    const char *kc = a->k_cache, *vc = a->v_cache;
    const void *kr[AT_CH], *vr[AT_CH];
    for (int p0 = lo; p0 <= pos; p0 += AT_CH) {
        int np = pos + 1 - p0 < AT_CH ? pos + 1 - p0 : AT_CH;
        int blk = p0 / a->block_size, in = p0 % a->block_size; /* walk, no division per row */
        for (int j = 0; j < np; j++) {
            size_t row = (size_t)bt[blk] * (size_t)a->block_size + (size_t)in;
            size_t off = (row * (size_t)kv_dim + (size_t)g * hd) * es;
            kr[j] = kc + off;
            vr[j] = vc + off;
            if (++in == a->block_size)
                in = 0, blk++;
        }
        for (int i = 0; i < nh; i++) {
            float *s = sc + i * AT_CH;
            kk->dots_kv[f16](qh[i], kr, np, hd, s);
            for (int j = 0; j < np; j++) {
                s[j] *= a->scale;
                if (a->softcap > 0.0f)
                    s[j] = a->softcap * tanhf(s[j] / a->softcap);
            }
            float m = mx[i];
            for (int j = 0; j < np; j++)
                m = s[j] > m ? s[j] : m;
            if (m != mx[i]) {
                float f = expf(mx[i] - m);
                l[i] *= f;
                kk->scale_inplace(acc + i * hd, f, hd);
                mx[i] = m;
            }
            kk->exp_shift(s, m, np);
            for (int j = 0; j < np; j++)
                l[i] += s[j];
            kk->axpys_kv[f16](acc + i * hd, s, vr, np, hd);
        }
    }
    for (int i = 0; i < nh; i++) {
        float *o = tk->out + ((int64_t)t * a->n_head + h0 + i) * hd;
        float inv = l[i] > 0.0f ? 1.0f / l[i] : 0.0f;
        for (int d = 0; d < hd; d++)
            o[d] = acc[i * hd + d] * inv;
    }
}

static void at_chunk(void *arg, int64_t it)
{
    const struct at_task *tk = arg;
    const struct be_attn *a = tk->a;
    int group = a->n_head / a->n_kv_head, nsub = group / tk->hg;
    /* kv head slowest: consecutive items (tokens of one step) share the same K/V rows in cache */
    int sub = (int)(it % nsub);
    int64_t tg = it / nsub;
    int t = (int)(tg % a->n_tok), g = (int)(tg / a->n_tok);
    attend(tk, t, g, g * group + sub * tk->hg, tk->hg);
}

void cpu_attention(struct be *b, float *out, const float *q, const struct be_attn *a)
{
    struct cpu_be *cb = cpu_be(b);
    if (a->n_tok <= 0)
        return;
    if (a->head_dim > AT_ACC) { /* no real model comes near; refuse rather than overflow */
        log_error("cpu: attention head_dim %d exceeds %d", a->head_dim, AT_ACC);
        memset(out, 0, (size_t)a->n_tok * (size_t)a->n_head * (size_t)a->head_dim * 4);
        return;
    }
    int group = a->n_head / a->n_kv_head;
    /* largest divisor of the group that fits the stack accumulator and 32 heads */
    int hg = group;
    while (hg > 1 && (hg > 32 || hg * a->head_dim > AT_ACC || group % hg))
        hg--;
    /* decode with few kv heads: split groups further so every thread gets work (each query
     * head's arithmetic is the same either way) */
    while (hg > 1 && (int64_t)a->n_tok * a->n_kv_head * (group / hg) < cb->n_threads) {
        int h2 = hg - 1;
        while (h2 > 1 && group % h2)
            h2--;
        hg = h2;
    }
    struct at_task tk = {.cb = cb, .out = out, .q = q, .a = a, .hg = hg};
    cpu_pool_run(cb->pool, at_chunk, &tk, (int64_t)a->n_tok * a->n_kv_head * (group / hg));
}
