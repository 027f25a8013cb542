/* lora.c — the CPU op lora: unmerged low-rank adapter deltas, rows grouped by adapter set
 * (backend.h, struct be_lora_grp).
 *
 * Two passes over the pool: (1) t = x a^T * scale for every (row, term), chunked by row and
 * blocks of 4 ranks, into the scratch cb->qbuf (free between matmuls); (2) y += sum_i t_i bt_i,
 * chunked by (group, a slice of M) so a slice of bt stays in cache while every row of its group
 * reads it. Each output element is one chain of multiply-adds in a fixed order (terms in
 * order, j from 0), so a row's bits depend only on its own x row and terms.
 * A call whose groups are all of one row, at least one per thread, runs both passes per
 * group in one pool run (lora_group).
 * Memory: a step with n distinct adapters reads n of them, each matrix a short stream far
 * from the others; the kernels prefetch ahead of their reads, and with one thread a group
 * of one row (the rows of a mixed batch) also prefetches the next group's matrices while it
 * reads its own (pf_term), so the next stream starts in cache.
 */
#include <string.h>

#include "backend/cpu/cpu_int.h"
#include "backend/cpu/lora_kern.h"

enum { LORA_MSLICE = 256 /* outputs per pass-2 chunk */ };

struct lora_task {
    const struct lora_kern *k;
    float *y;
    const float *x;
    int K, M;
    const struct be_lora_grp *g;
    int n_grp;
    int64_t *row0; /* (n_grp + 1) first pass-1 item of each group (rows * grp_slots) */
    int64_t *toff; /* (n_grp) offset of each group's t in tbuf */
    int pf_ahead;  /* 1: a one-row group prefetches the next group's matrices; 0: not */
    float *tbuf;   /* t values: per group, per row, the terms' ranks in order */
    int n_slices;
};

static int grp_rank_sum(const struct be_lora_grp *g)
{
    int s = 0;
    for (int i = 0; i < g->n_terms; i++)
        s += g->t[i].rank;
    return s;
}

enum { LORA_JB = 4 /* ranks per pass-1 item */ };

/* Pass-1 items of one row of g: per term, ceil(rank / LORA_JB). */
static int grp_slots(const struct be_lora_grp *g)
{
    int s = 0;
    for (int i = 0; i < g->n_terms; i++)
        s += (g->t[i].rank + LORA_JB - 1) / LORA_JB;
    return s;
}

/* The matrix a one-row group gi prefetches while it reads term ti's (lora_kern.h's pf): the
 * same term of the next group, when that group has one row too (a group of several rows
 * reads its matrices from cache after the first row) and at least that rank; else NULL.
 * Only with one thread (pf_ahead): with more, the next group's items go to any thread, so
 * the lines could land in another core's cache; each thread then prefetches ahead in the
 * matrix it reads (the 2-thread case is unmeasured: wall times were noise this session). */
static const struct be_lora_term *pf_term(const struct lora_task *t, int gi, int ti, int rank)
{
    const struct be_lora_grp *g = &t->g[gi];
    int gn = gi + 1;
    if (!t->pf_ahead || g->n_rows != 1 || gn >= t->n_grp || t->g[gn].n_rows != 1 ||
        ti >= t->g[gn].n_terms || t->g[gn].t[ti].rank < rank ||
        t->g[gn].t[ti].dtype != g->t[ti].dtype)
        return NULL;
    return &t->g[gn].t[ti];
}

/* Pass 1, item c: group gi, row r, then a block of LORA_JB ranks of one term. */
static void lora_pass1(void *arg, int64_t c)
{
    const struct lora_task *t = arg;
    int gi = 0;
    while (c >= t->row0[gi + 1])
        gi++;
    const struct be_lora_grp *g = &t->g[gi];
    int64_t local = c - t->row0[gi];
    int sb = grp_slots(g);
    int r = (int)(local / sb), s = (int)(local % sb), ti = 0, off = 0;
    while (s >= (g->t[ti].rank + LORA_JB - 1) / LORA_JB) {
        s -= (g->t[ti].rank + LORA_JB - 1) / LORA_JB;
        off += g->t[ti].rank;
        ti++;
    }
    const struct be_lora_term *tm = &g->t[ti];
    const float *x = t->x + (int64_t)g->rows[r] * t->K;
    float *out = t->tbuf + t->toff[gi] + (int64_t)r * grp_rank_sum(g) + off;
    int j1 = (s + 1) * LORA_JB < tm->rank ? (s + 1) * LORA_JB : tm->rank;
    const int d = lora_kern_dt(tm->dtype);
    const size_t es = d ? 2 : 4;
    const struct be_lora_term *pn = pf_term(t, gi, ti, j1);
    for (int j = s * LORA_JB; j < j1; j++) {
        const size_t o = (size_t)j * t->K * es;
        out[j] =
            t->k->dot[d](x, (const char *)tm->a + o, t->K, pn ? (const char *)pn->a + o : NULL) *
            tm->scale;
    }
}

/* Pass 2, item c: group c / n_slices, outputs of slice c % n_slices. */
static void lora_pass2(void *arg, int64_t c)
{
    const struct lora_task *t = arg;
    int gi = (int)(c / t->n_slices);
    int m0 = (int)(c % t->n_slices) * LORA_MSLICE;
    int nm = t->M - m0 < LORA_MSLICE ? t->M - m0 : LORA_MSLICE;
    const struct be_lora_grp *g = &t->g[gi];
    int rs = grp_rank_sum(g);
    float acc[LORA_MSLICE];
    for (int r = 0; r < g->n_rows; r++) {
        const float *tv = t->tbuf + t->toff[gi] + (int64_t)r * rs;
        memset(acc, 0, sizeof acc);
        for (int i = 0; i < g->n_terms; i++) {
            const struct be_lora_term *tm = &g->t[i];
            const int d = lora_kern_dt(tm->dtype);
            const size_t o = (size_t)m0 * (d ? 2 : 4);
            const struct be_lora_term *pn = pf_term(t, gi, i, tm->rank);
            t->k->expand[d](acc, tv, (const char *)tm->bt + o, (size_t)t->M, tm->rank, nm,
                            pn ? (const char *)pn->bt + o : NULL);
            tv += tm->rank;
        }
        float *y = t->y + (int64_t)g->rows[r] * t->M + m0;
        t->k->add(y, acc, nm);
    }
}

/* Both passes of group c, when every group of the call has one row and there are groups
 * enough for every thread (a mixed batch; with one thread also one row alone): one pool run
 * instead of two, each item reading its group's A, then its B^T. The same sums in the same
 * order as the two passes (the same bits). */
static void lora_group(void *arg, int64_t c)
{
    const struct lora_task *t = arg;
    for (int64_t i = t->row0[c]; i < t->row0[c + 1]; i++)
        lora_pass1(arg, i);
    for (int s = 0; s < t->n_slices; s++)
        lora_pass2(arg, c * t->n_slices + s);
}

void cpu_lora(struct be *b, float *y, const float *x, int K, int M, const struct be_lora_grp *g,
              int n_grp)
{
    struct cpu_be *cb = cpu_be(b);
    if (n_grp <= 0 || K <= 0 || M <= 0)
        return;
    int64_t row0[65], toff[64];
    /* groups beyond 64 per call are done 64 at a time (a step rarely holds more sets) */
    for (int base = 0; base < n_grp; base += 64) {
        int ng = n_grp - base < 64 ? n_grp - base : 64;
        const struct be_lora_grp *gg = g + base;
        int64_t items = 0, floats = 0;
        int one_rows = 1;
        for (int i = 0; i < ng; i++) {
            one_rows &= gg[i].n_rows == 1;
            row0[i] = items;
            toff[i] = floats;
            items += (int64_t)gg[i].n_rows * grp_slots(&gg[i]);
            floats += (int64_t)gg[i].n_rows * grp_rank_sum(&gg[i]);
        }
        row0[ng] = items;
        if (items == 0)
            continue;
        struct lora_task t = {.k = cpu_lora_kern(cb->isa),
                              .y = y,
                              .x = x,
                              .K = K,
                              .M = M,
                              .g = gg,
                              .n_grp = ng,
                              .row0 = row0,
                              .toff = toff,
                              .pf_ahead = cpu_pool_size(cb->pool) == 1,
                              .n_slices = (M + LORA_MSLICE - 1) / LORA_MSLICE};
        if (cpu_qbuf_reserve(cb, (size_t)floats * sizeof(float)) != 0) {
            /* no scratch: one row at a time through a stack buffer */
            float one[BE_LORA_MAX_TERMS * 256];
            for (int i = 0; i < ng; i++)
                for (int r = 0; r < gg[i].n_rows; r++) {
                    struct be_lora_grp g1 = gg[i];
                    g1.rows = gg[i].rows + r;
                    g1.n_rows = 1;
                    if (grp_rank_sum(&g1) > (int)(sizeof one / sizeof one[0]))
                        continue; /* model/lora.c caps ranks at 256 */
                    int64_t z0[2] = {0, grp_slots(&g1)}, zo[1] = {0};
                    struct lora_task t1 = t;
                    t1.g = &g1, t1.n_grp = 1, t1.row0 = z0, t1.toff = zo, t1.tbuf = one;
                    for (int64_t c = 0; c < z0[1]; c++)
                        lora_pass1(&t1, c);
                    for (int64_t c = 0; c < t1.n_slices; c++)
                        lora_pass2(&t1, c);
                }
            continue;
        }
        t.tbuf = cb->qbuf;
        if (one_rows && ng >= cpu_pool_size(cb->pool)) {
            cpu_pool_run(cb->pool, lora_group, &t, ng);
            continue;
        }
        cpu_pool_run(cb->pool, lora_pass1, &t, items);
        cpu_pool_run(cb->pool, lora_pass2, &t, (int64_t)ng * t.n_slices);
    }
}
