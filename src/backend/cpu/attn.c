/* attn.c — kv_store and attention over the paged KV cache.
 *
 * Attention is a streaming (online) softmax: positions are visited in chunks of AT_CH in
 * increasing order starting at the window's first position; per chunk the scores are
 * computed, the running max/sum and the output accumulator are rescaled once, then the
 * chunk's V rows are added. No (n_tok, ctx) score matrix exists. Work items are
 * (up to AT_TQ tokens, kv head, subgroup of its query heads), so each K/V row is fetched
 * once for all of them; each query head's arithmetic is the same whatever else is in the
 * batch.
 */
#include <math.h>
#include <string.h>

#include "backend/cpu/cpu_int.h"
#include "backend/kvq.h"
#include "util/log.h"

enum {
    AT_CH = 32,     /* positions per online-softmax step */
    AT_ACC = 16384, /* floats of accumulator per work item, on the stack (64 KiB) */
    AT_TQ = 8,      /* most batch tokens per work item */
    AT_CVT = 256,   /* most head_dim whose F16 K/V chunk is widened once per item */
};

struct kv_task {
    const struct cpu_kernels *k;
    void *k_cache, *v_cache;
    int kv_dtype, kv_dim;
    const float *kk, *vv;
    const int32_t *slots;
};

static void kv_chunk(void *arg, int64_t t)
{
    const struct kv_task *s = arg;
    size_t off = (size_t)s->slots[t] * (size_t)s->kv_dim;
    const float *kr = s->kk + t * s->kv_dim, *vr = s->vv + t * s->kv_dim;
    if (kvq_is(s->kv_dtype)) { /* quantized rows (backend/kvq.h) */
        kvq_store_row(s->kv_dtype, 0,
                      (char *)s->k_cache + (size_t)s->slots[t] * kvq_row_bytes(s->kv_dtype, 0, s->kv_dim),
                      kr, s->kv_dim);
        kvq_store_row(s->kv_dtype, 1,
                      (char *)s->v_cache + (size_t)s->slots[t] * kvq_row_bytes(s->kv_dtype, 1, s->kv_dim),
                      vr, s->kv_dim);
    } else if (s->kv_dtype == DT_F16) {
        s->k->f32_to_f16((uint16_t *)s->k_cache + off, kr, s->kv_dim);
        s->k->f32_to_f16((uint16_t *)s->v_cache + off, vr, s->kv_dim);
    } else {
        memcpy((float *)s->k_cache + off, kr, (size_t)s->kv_dim * sizeof(float));
        memcpy((float *)s->v_cache + off, vr, (size_t)s->kv_dim * sizeof(float));
    }
}

void cpu_kv_store(struct be *b, void *k_cache, void *v_cache, int kv_dtype, const float *k,
                  const float *v, const int32_t *slots, int n_tok, int kv_dim)
{
    struct cpu_be *cb = cpu_be(b);
    struct kv_task s = {&cb->k, k_cache, v_cache, kv_dtype, kv_dim, k, v, slots};
    /* one token's rows are small: run them on the caller unless the step is long */
    if ((int64_t)n_tok * kv_dim < 65536) {
        for (int t = 0; t < n_tok; t++)
            kv_chunk(&s, t);
        return;
    }
    cpu_pool_run(cb->pool, kv_chunk, &s, n_tok);
}

struct at_task {
    const struct cpu_be *cb;
    float *out;
    const float *q;
    const struct be_attn *a;
    int hg;      /* query heads handled together (a divisor of the group size) */
    int tq;      /* batch tokens per work item */
    int n_tiles; /* ceil(n_tok / tq) */
};

/* First attended position of token t. */
static int attn_lo(const struct be_attn *a, int t)
{
    int pos = a->pos[t];
    return a->window > 0 && pos - a->window + 1 > 0 ? pos - a->window + 1 : 0;
}

/* Query heads h0 .. h0+nh of tokens t0 .. t0+nt (same sequence, same first position lo),
 * all reading kv head g. The K/V row pointers of a chunk are resolved once and the rows
 * stay in cache while every token of the run uses them; each token's arithmetic is exactly
 * that of a run of one (same chunks, same per-chunk steps). */
static void attend_run(const struct at_task *tk, int t0, int nt, int g, int h0, int nh)
{
    const struct be_attn *a = tk->a;
    const struct cpu_kernels *kk = &tk->cb->k;
    int hd = a->head_dim, kv_dim = a->n_kv_head * hd;
    int f16 = a->kv_dtype == DT_F16;
    size_t es = f16 ? 2 : 4;
    /* quantized KV (backend/kvq.h): each chunk's rows of head g are dequantized into the
     * F32 chunk buffers (never a whole-cache copy); a rotated K side is met by rotating q
     * once (q.k = Hq.Hk), a rotated V side by unrotating the output once */
    int qz = kvq_is(a->kv_dtype);
    size_t rbk = qz ? kvq_row_bytes(a->kv_dtype, 0, kv_dim) : 0,
           rbv = qz ? kvq_row_bytes(a->kv_dtype, 1, kv_dim) : 0;
    int rotk = qz && kvq_rot_of(a->kv_dtype, 0), rotv = qz && kvq_rot_of(a->kv_dtype, 1);
    static _Thread_local float qrot[AT_ACC];
    float acc[AT_ACC];
    float sc[AT_CH];
    float mx[AT_TQ * 32], l[AT_TQ * 32];
    int hi = 0;
    for (int u = 0; u < nt * nh; u++) {
        mx[u] = -INFINITY;
        l[u] = 0.0f;
        memset(acc + u * hd, 0, (size_t)hd * sizeof(float));
    }
    for (int u = 0; u < nt; u++)
        hi = a->pos[t0 + u] > hi ? a->pos[t0 + u] : hi;
    int lo = attn_lo(a, t0);
    const int32_t *bt = a->block_tables + (int64_t)a->seq[t0] * a->max_blocks;
    const char *kc = a->k_cache, *vc = a->v_cache;
    const void *kr[AT_CH], *vr[AT_CH];
    /* F16 rows used by several (token, head) pairs are widened to F32 once per chunk; the
     * F32 kernels on them give the bits the F16 kernels give on the F16 rows */
    int widen = f16 && nt * nh > 1 && hd <= AT_CVT;
    static _Thread_local float kf[AT_CH * AT_CVT], vf[AT_CH * AT_CVT];
    int kv16 = f16 && !widen;
    if (rotk)
        for (int u = 0; u < nt; u++)
            for (int i = 0; i < nh; i++) {
                float *d = qrot + (u * nh + i) * hd;
                memcpy(d, tk->q + ((int64_t)(t0 + u) * a->n_head + h0 + i) * hd,
                       (size_t)hd * sizeof(float));
                kvq_rotate(d, hd);
            }
    for (int p0 = lo; p0 <= hi; p0 += AT_CH) {
        int nrow = hi + 1 - p0 < AT_CH ? hi + 1 - p0 : AT_CH;
        int blk = p0 / a->block_size, in = p0 % a->block_size; /* walk, no division per row */
        for (int j = 0; j < nrow; j++) {
            size_t row = (size_t)bt[blk] * (size_t)a->block_size + (size_t)in;
            if (qz) {
                kvq_load_head(a->kv_dtype, 0, kc + row * rbk, g, kf + j * hd);
                kvq_load_head(a->kv_dtype, 1, vc + row * rbv, g, vf + j * hd);
                kr[j] = kf + j * hd;
                vr[j] = vf + j * hd;
            } else {
                size_t off = (row * (size_t)kv_dim + (size_t)g * hd) * es;
                kr[j] = kc + off;
                vr[j] = vc + off;
            }
            if (++in == a->block_size)
                in = 0, blk++;
        }
        if (widen)
            for (int j = 0; j < nrow; j++) {
                kk->f16_to_f32(kf + j * hd, kr[j], hd);
                kk->f16_to_f32(vf + j * hd, vr[j], hd);
                kr[j] = kf + j * hd;
                vr[j] = vf + j * hd;
            }
        for (int u = 0; u < nt; u++) {
            int t = t0 + u, np = a->pos[t] + 1 - p0 < AT_CH ? a->pos[t] + 1 - p0 : AT_CH;
            if (np <= 0)
                continue;
            for (int i = 0; i < nh; i++) {
                const float *qv = rotk ? qrot + (u * nh + i) * hd
                                       : tk->q + ((int64_t)t * a->n_head + h0 + i) * hd;
                float *ac = acc + (u * nh + i) * hd;
                float *ms = &mx[u * nh + i], *ls = &l[u * nh + i];
                kk->dots_kv[kv16](qv, kr, np, hd, sc);
                for (int j = 0; j < np; j++) {
                    sc[j] *= a->scale;
                    if (a->softcap > 0.0f)
                        sc[j] = a->softcap * tanhf(sc[j] / a->softcap);
                }
                float m = *ms;
                for (int j = 0; j < np; j++)
                    m = sc[j] > m ? sc[j] : m;
                if (m != *ms) {
                    float f = expf(*ms - m);
                    *ls *= f;
                    kk->scale_inplace(ac, f, hd);
                    *ms = m;
                }
                kk->exp_shift(sc, m, np);
                for (int j = 0; j < np; j++)
                    *ls += sc[j];
                kk->axpys_kv[kv16](ac, sc, vr, np, hd);
            }
        }
    }
    for (int u = 0; u < nt; u++)
        for (int i = 0; i < nh; i++) {
            float *o = tk->out + ((int64_t)(t0 + u) * a->n_head + h0 + i) * hd;
            const float *ac = acc + (u * nh + i) * hd;
            float inv = l[u * nh + i] > 0.0f ? 1.0f / l[u * nh + i] : 0.0f;
            for (int d = 0; d < hd; d++)
                o[d] = ac[d] * inv;
            if (rotv)
                kvq_unrotate(o, hd);
        }
}

static void at_chunk(void *arg, int64_t it)
{
    const struct at_task *tk = arg;
    const struct be_attn *a = tk->a;
    int group = a->n_head / a->n_kv_head, nsub = group / tk->hg;
    /* kv head slowest: consecutive items (tokens of one step) share K/V rows in cache */
    int sub = (int)(it % nsub);
    int64_t rest = it / nsub;
    int tile = (int)(rest % tk->n_tiles), g = (int)(rest / tk->n_tiles);
    int t0 = tile * tk->tq, t1 = t0 + tk->tq < a->n_tok ? t0 + tk->tq : a->n_tok;
    /* runs of tokens of one sequence with the same first position share the K/V rows */
    for (int t = t0; t < t1;) {
        int e = t + 1, lo = attn_lo(a, t);
        while (e < t1 && a->seq[e] == a->seq[t] && attn_lo(a, e) == lo)
            e++;
        attend_run(tk, t, e - t, g, g * group + sub * tk->hg, tk->hg);
        t = e;
    }
}

/* Work items for tiles of tq tokens and query-head subgroups of hg heads. */
static int64_t at_items(const struct be_attn *a, int tq, int hg)
{
    return (int64_t)((a->n_tok + tq - 1) / tq) * a->n_kv_head * (a->n_head / a->n_kv_head / hg);
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
    int tq = AT_ACC / (hg * a->head_dim);
    tq = tq > AT_TQ ? AT_TQ : tq < 1 ? 1 : tq;
    /* few tokens: smaller tiles, then split GQA groups, until every thread gets work (each
     * query head's arithmetic is the same either way) */
    while (tq > 1 && at_items(a, tq, hg) < cb->n_threads)
        tq--;
    while (hg > 1 && at_items(a, tq, hg) < cb->n_threads) {
        int h2 = hg - 1;
        while (h2 > 1 && group % h2)
            h2--;
        hg = h2;
    }
    struct at_task tk = {.cb = cb, .out = out, .q = q, .a = a, .hg = hg, .tq = tq,
                         .n_tiles = (a->n_tok + tq - 1) / tq};
    cpu_pool_run(cb->pool, at_chunk, &tk, at_items(a, tq, hg));
}
