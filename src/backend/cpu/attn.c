/* attn.c — kv_store and attention over the paged KV cache.
 *
 * Attention is a streaming (online) softmax. A token's positions, from its window's first
 * position lo, are cut into segments of AT_SEG positions anchored at lo; each segment is
 * visited in chunks of AT_CH from a fresh state (per chunk the scores are computed, the
 * running max/sum and the output accumulator are rescaled once, then the chunk's V rows are
 * added), and the segments' states are folded in order (at_fold). No (n_tok, ctx) score
 * matrix exists. The arithmetic of a token's output depends only on its own q, pos and
 * context, so it is the same whichever of the two schedules runs it:
 *  - in place: work items are (up to AT_TQ tokens, kv head, subgroup of its query heads),
 *    each K/V row fetched once for all of them, the segments folded as they end;
 *  - split (steps with too few items for the threads, e.g. a long-context decode): work
 *    items are (run of tokens, one segment, kv head, subgroup); each writes its segment's
 *    states to cb->abuf and a second pass folds them per (token, head) in segment order.
 */
#include <math.h>
#include <string.h>

#include "backend/cpu/cpu_int.h"
#include "backend/kvq.h"
#include "util/log.h"

enum {
    AT_CH = 32,     /* positions per online-softmax step */
    AT_SEG = 256,   /* positions per segment (a multiple of AT_CH) */
    AT_ACC = 16384, /* floats of accumulator per work item, on the stack (64 KiB) */
    AT_TQ = 8,      /* most batch tokens per work item */
    AT_HD = 512,    /* most head_dim (chunk buffers of AT_CH rows, thread-local) */
};
#define AT_SPLIT_MAX ((size_t)64 << 20) /* most bytes of partial states of a split step */

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
    /* split steps: entry e = {first token, tokens, segment} (a run of tokens sharing their
     * sequence and lo); token t's segment k state (m, l, acc: head_dim + 2 floats) of head h
     * at part[((segoff[t] + k) * n_head + h) * (head_dim + 2)] */
    const int32_t *ent;
    int n_ent;
    const int32_t *segoff;
    float *part;
};

/* First attended position of token t. */
static int attn_lo(const struct be_attn *a, int t)
{
    int pos = a->pos[t];
    return a->window > 0 && pos - a->window + 1 > 0 ? pos - a->window + 1 : 0;
}

/* Segments of token t's context. */
static int attn_nseg(const struct be_attn *a, int t)
{
    return (a->pos[t] - attn_lo(a, t)) / AT_SEG + 1;
}

/* (tm, tl, ta) <- the state over T's positions and then S's: one fixed sequence of float
 * steps (never inlined, so both schedules run the same code). */
static __attribute__((noinline)) void at_fold(float *tm, float *tl, float *ta, float sm,
                                              float sl, const float *sa, int hd)
{
    float m = sm > *tm ? sm : *tm;
    float ft = expf(*tm - m), fs = expf(sm - m);
    *tl = *tl * ft + sl * fs;
    for (int d = 0; d < hd; d++)
        ta[d] = ta[d] * ft + sa[d] * fs;
    *tm = m;
}

/* o = ac / l (then unrotated for a rotated V side). */
static __attribute__((noinline)) void at_out(float *o, const float *ac, float l, int hd, int rotv)
{
    float inv = l > 0.0f ? 1.0f / l : 0.0f;
    for (int d = 0; d < hd; d++)
        o[d] = ac[d] * inv;
    if (rotv)
        kvq_unrotate(o, hd);
}

/* Query heads h0 .. h0+nh of tokens t0 .. t0+nt (same sequence, same first position lo),
 * all reading kv head g. kseg < 0: every segment, folded, the outputs written; kseg >= 0:
 * that segment only, its states written to the split buffer (tokens whose context ends
 * before it write nothing). The K/V row pointers of a chunk are resolved once and the rows
 * stay in cache while every token of the run uses them; each token's arithmetic is exactly
 * that of a run of one (same segments, same chunks, same per-chunk steps). */
static void attend_run(const struct at_task *tk, int t0, int nt, int g, int h0, int nh, int kseg)
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
    static _Thread_local float qrot[AT_ACC], sacc[AT_ACC];
    float acc[AT_ACC];
    float mx[AT_TQ * 32], l[AT_TQ * 32], smx[AT_TQ * 32], sl[AT_TQ * 32];
    int hi = 0;
    for (int u = 0; u < nt; u++)
        hi = a->pos[t0 + u] > hi ? a->pos[t0 + u] : hi;
    int lo = attn_lo(a, t0), nseg = (hi - lo) / AT_SEG + 1;
    int k0 = kseg < 0 ? 0 : kseg, k1 = kseg < 0 ? nseg : kseg + 1;
    const int32_t *bt = a->block_tables + (int64_t)a->seq[t0] * a->max_blocks;
    const char *kc = a->k_cache, *vc = a->v_cache;
    const void *kr[AT_CH];
    const float *vr[AT_CH];
    /* per chunk: K transposed into kt (a score per lane), V rows as F32 (fp16 rows widened,
     * quantized rows dequantized), once for every (token, head) of the item */
    static _Thread_local float kf[AT_CH * AT_HD], vf[AT_CH * AT_HD], kt[AT_CH * AT_HD];
    if (rotk)
        for (int u = 0; u < nt; u++)
            for (int i = 0; i < nh; i++) {
                float *d = qrot + (u * nh + i) * hd;
                memcpy(d, tk->q + ((int64_t)(t0 + u) * a->n_head + h0 + i) * hd,
                       (size_t)hd * sizeof(float));
                kvq_rotate(d, hd);
            }
    for (int k = k0; k < k1; k++) {
        int s0 = lo + k * AT_SEG, s1 = s0 + AT_SEG - 1 < hi ? s0 + AT_SEG - 1 : hi;
        /* the first segment visited accumulates into the totals, later ones are folded in */
        int into = k == k0;
        float *A = into ? acc : sacc, *M = into ? mx : smx, *L = into ? l : sl;
        for (int u = 0; u < nt * nh; u++) {
            M[u] = -INFINITY;
            L[u] = 0.0f;
            memset(A + u * hd, 0, (size_t)hd * sizeof(float));
        }
        for (int p0 = s0; p0 <= s1; p0 += AT_CH) {
            int nrow = s1 + 1 - p0 < AT_CH ? s1 + 1 - p0 : AT_CH;
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
                    vr[j] = (const float *)(vc + off); /* fp16 rows: widened below */
                }
                if (++in == a->block_size)
                    in = 0, blk++;
            }
            if (f16) /* widened row by row first: the cache is read in order */
                for (int j = 0; j < nrow; j++) {
                    kk->f16_to_f32(kf + j * hd, kr[j], hd);
                    kk->f16_to_f32(vf + j * hd, (const uint16_t *)vr[j], hd);
                    kr[j] = kf + j * hd;
                    vr[j] = vf + j * hd;
                }
            kk->kt_pack(kt, kr, nrow, hd, 0);
            struct cpu_at_row rr[4];
            int nr = 0;
            for (int u = 0; u < nt; u++) {
                int t = t0 + u, np = a->pos[t] + 1 - p0 < AT_CH ? a->pos[t] + 1 - p0 : AT_CH;
                if (np <= 0)
                    continue;
                for (int i = 0; i < nh; i++) {
                    int ui = u * nh + i;
                    rr[nr++] = (struct cpu_at_row){
                        .q = rotk ? qrot + ui * hd : tk->q + ((int64_t)t * a->n_head + h0 + i) * hd,
                        .acc = A + ui * hd, .m = &M[ui], .l = &L[ui], .np = np};
                    if (nr == 4) {
                        kk->at_chunk(rr, nr, kt, vr, hd, a->scale, a->softcap);
                        nr = 0;
                    }
                }
            }
            if (nr)
                kk->at_chunk(rr, nr, kt, vr, hd, a->scale, a->softcap);
        }
        if (!into)
            for (int u = 0; u < nt; u++)
                if (a->pos[t0 + u] >= s0)
                    for (int i = 0; i < nh; i++) {
                        int ui = u * nh + i;
                        at_fold(&mx[ui], &l[ui], acc + ui * hd, smx[ui], sl[ui], sacc + ui * hd, hd);
                    }
    }
    if (kseg >= 0) { /* a split item: this segment's states */
        int s0 = lo + kseg * AT_SEG, ps = hd + 2;
        for (int u = 0; u < nt; u++) {
            int t = t0 + u;
            if (a->pos[t] < s0)
                continue;
            for (int i = 0; i < nh; i++) {
                float *pp = tk->part + ((int64_t)(tk->segoff[t] + kseg) * a->n_head + h0 + i) * ps;
                pp[0] = mx[u * nh + i];
                pp[1] = l[u * nh + i];
                memcpy(pp + 2, acc + (u * nh + i) * hd, (size_t)hd * sizeof(float));
            }
        }
        return;
    }
    for (int u = 0; u < nt; u++)
        for (int i = 0; i < nh; i++)
            at_out(tk->out + ((int64_t)(t0 + u) * a->n_head + h0 + i) * hd,
                   acc + (u * nh + i) * hd, l[u * nh + i], hd, rotv);
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
        attend_run(tk, t, e - t, g, g * group + sub * tk->hg, tk->hg, -1);
        t = e;
    }
}

/* Split item: (entry, kv head, subgroup of hg heads), kv head slowest. */
static void at_split_chunk(void *arg, int64_t it)
{
    const struct at_task *tk = arg;
    const struct be_attn *a = tk->a;
    int group = a->n_head / a->n_kv_head, nsub = group / tk->hg;
    int sub = (int)(it % nsub);
    int64_t rest = it / nsub;
    int e = (int)(rest % tk->n_ent), g = (int)(rest / tk->n_ent);
    const int32_t *en = tk->ent + 3 * e;
    attend_run(tk, en[0], en[1], g, g * group + sub * tk->hg, tk->hg, en[2]);
}

/* Split pass 2, item (token, head): its segment states folded in order, the output. */
static void at_merge_chunk(void *arg, int64_t it)
{
    const struct at_task *tk = arg;
    const struct be_attn *a = tk->a;
    static _Thread_local float ta[AT_ACC];
    int t = (int)(it / a->n_head), h = (int)(it % a->n_head), hd = a->head_dim, ps = hd + 2;
    int nseg = attn_nseg(a, t);
    int64_t step = (int64_t)a->n_head * ps;
    const float *pp = tk->part + ((int64_t)tk->segoff[t] * a->n_head + h) * ps;
    float tm = pp[0], tl = pp[1];
    memcpy(ta, pp + 2, (size_t)hd * sizeof(float));
    for (int k = 1; k < nseg; k++)
        at_fold(&tm, &tl, ta, pp[k * step], pp[k * step + 1], pp + k * step + 2, hd);
    int rotv = kvq_is(a->kv_dtype) && kvq_rot_of(a->kv_dtype, 1);
    at_out(tk->out + ((int64_t)t * a->n_head + h) * hd, ta, tl, hd, rotv);
}

/* Runs the step split by segments when some token has more than one (0), or declines (-1:
 * nothing to split, or the partial states would not fit AT_SPLIT_MAX / memory). hg: heads
 * per item (a divisor of the group with hg * head_dim <= AT_ACC). */
static int at_split(struct cpu_be *cb, float *out, const float *q, const struct be_attn *a, int hg)
{
    int tq = AT_ACC / (hg * a->head_dim);
    tq = tq > AT_TQ ? AT_TQ : tq < 1 ? 1 : tq;
    int64_t n_ent = 0, n_segs = 0;
    int multi = 0;
    for (int t = 0; t < a->n_tok;) { /* count: runs of <= tq tokens sharing seq and lo */
        int e = t + 1, lo = attn_lo(a, t), hi = a->pos[t];
        while (e < a->n_tok && e - t < tq && a->seq[e] == a->seq[t] && attn_lo(a, e) == lo)
            hi = a->pos[e] > hi ? a->pos[e] : hi, e++;
        int ns = (hi - lo) / AT_SEG + 1;
        n_ent += ns;
        multi |= ns > 1;
        t = e;
    }
    for (int t = 0; t < a->n_tok; t++)
        n_segs += attn_nseg(a, t);
    if (!multi)
        return -1;
    size_t pbytes = (size_t)n_segs * (size_t)a->n_head * (size_t)(a->head_dim + 2) * sizeof(float);
    pbytes = (pbytes + 63) & ~(size_t)63;
    size_t need = pbytes + ((size_t)a->n_tok + 3 * (size_t)n_ent) * sizeof(int32_t);
    if (need > AT_SPLIT_MAX || cpu_abuf_reserve(cb, need) != 0)
        return -1;
    float *part = cb->abuf;
    int32_t *segoff = (int32_t *)((char *)cb->abuf + pbytes), *ent = segoff + a->n_tok;
    for (int t = 0, off = 0; t < a->n_tok; t++)
        segoff[t] = off, off += attn_nseg(a, t);
    int64_t ne = 0;
    for (int t = 0; t < a->n_tok;) {
        int e = t + 1, lo = attn_lo(a, t), hi = a->pos[t];
        while (e < a->n_tok && e - t < tq && a->seq[e] == a->seq[t] && attn_lo(a, e) == lo)
            hi = a->pos[e] > hi ? a->pos[e] : hi, e++;
        for (int k = 0; k <= (hi - lo) / AT_SEG; k++, ne++)
            ent[3 * ne] = t, ent[3 * ne + 1] = e - t, ent[3 * ne + 2] = k;
        t = e;
    }
    struct at_task tk = {.cb = cb, .out = out, .q = q, .a = a, .hg = hg, .tq = tq,
                         .ent = ent, .n_ent = (int)n_ent, .segoff = segoff, .part = part};
    int nsub = a->n_head / a->n_kv_head / hg;
    cpu_pool_run(cb->pool, at_split_chunk, &tk, n_ent * a->n_kv_head * nsub);
    cpu_pool_run(cb->pool, at_merge_chunk, &tk, (int64_t)a->n_tok * a->n_head);
    return 0;
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
    if (a->head_dim > AT_HD) { /* no real model comes near; refuse rather than overflow */
        log_error("cpu: attention head_dim %d exceeds %d", a->head_dim, AT_HD);
        memset(out, 0, (size_t)a->n_tok * (size_t)a->n_head * (size_t)a->head_dim * 4);
        return;
    }
    int group = a->n_head / a->n_kv_head;
    /* largest divisor of the group that fits the stack accumulator and 32 heads */
    int hg = group;
    while (hg > 1 && (hg > 32 || hg * a->head_dim > AT_ACC || group % hg))
        hg--;
    /* a step with few work items for the threads (a decode step, a short chunk): split the
     * long contexts by segment when some token has several (same arithmetic either way) */
    if (cb->attn_split && at_items(a, 1, hg) < 4 * (int64_t)cb->n_threads &&
        at_split(cb, out, q, a, hg) == 0)
        return;
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
