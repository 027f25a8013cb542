/* lora_fwd.c — a step's rows grouped by adapter set, and one projection's deltas.
 *
 * Rows of one set share one group whatever their sequences, so a set's A and B are read
 * once per projection for all of its rows (the op lora); rows of different sets run in the
 * same call. Groups are found by comparing sets (members and weights), not pointers.
 */
#include "model/lora_fwd.h"

#include <stdlib.h>
#include <string.h>

struct lgrp {
    const struct lora_set *set;
    int off, n; /* rows at d_rows[off .. off + n) */
};

struct lora_plan {
    int max_tok, max_seq;
    struct lgrp *g;   /* (2 * max_seq) */
    int g0[2], ng[2]; /* per range: first group, groups */
    int *tok_grp;     /* (max_tok) scratch */
    const int32_t *d_rows;
};

int lora_plan_new(struct lora_plan **out, int max_tok, int max_seq)
{
    struct lora_plan *p = calloc(1, sizeof *p);
    if (!p)
        return -1;
    p->max_tok = max_tok, p->max_seq = max_seq;
    p->g = calloc((size_t)max_seq * 2 + 2, sizeof *p->g);
    p->tok_grp = calloc((size_t)max_tok, sizeof *p->tok_grp);
    if (!p->g || !p->tok_grp) {
        lora_plan_free(p);
        return -1;
    }
    *out = p;
    return 0;
}

void lora_plan_free(struct lora_plan *p)
{
    if (!p)
        return;
    free(p->g);
    free(p->tok_grp);
    free(p);
}

int lora_plan_build(struct lora_plan *p, const struct model_batch *bt, int lead, int32_t *h_rows)
{
    p->ng[0] = p->ng[1] = 0;
    p->g0[0] = p->g0[1] = 0;
    if (!bt->lora)
        return 0;
    int bounds[3] = {0, lead > 0 ? lead : bt->n_tok, bt->n_tok};
    int nr = lead > 0 ? 2 : 1, ng = 0, total = 0;
    for (int rg = 0; rg < nr; rg++) {
        p->g0[rg] = ng;
        for (int t = bounds[rg]; t < bounds[rg + 1]; t++) {
            const struct lora_set *s = bt->lora[bt->seq[t]];
            p->tok_grp[t] = -1;
            if (!s || s->n == 0)
                continue;
            int gi = p->g0[rg];
            while (gi < ng && !lora_set_eq(p->g[gi].set, s))
                gi++;
            if (gi == ng) {
                p->g[ng].set = s;
                p->g[ng].n = 0;
                ng++;
            }
            p->g[gi].n++;
            p->tok_grp[t] = gi;
        }
        p->ng[rg] = ng - p->g0[rg];
    }
    for (int gi = 0; gi < ng; gi++) {
        p->g[gi].off = total;
        total += p->g[gi].n;
        p->g[gi].n = 0;
    }
    for (int rg = 0; rg < nr; rg++)
        for (int t = bounds[rg]; t < bounds[rg + 1]; t++) {
            int gi = p->tok_grp[t];
            if (gi >= 0)
                h_rows[p->g[gi].off + p->g[gi].n++] = t - bounds[rg];
        }
    return total;
}

void lora_plan_bind(struct lora_plan *p, const int32_t *d_rows)
{
    p->d_rows = d_rows;
}

int lora_plan_any(const struct lora_plan *p, int rg)
{
    return p->ng[rg] > 0;
}

static void call(const struct model *m, float *y, const float *x, const float *norm, float eps,
                 int K, int M, const struct be_lora_grp *g, int n)
{
    if (norm)
        m->be->ops->lora_norm(m->be, y, x, norm, eps, K, M, g, n);
    else
        m->be->ops->lora(m->be, y, x, K, M, g, n);
}

static void apply(const struct lora_plan *p, const struct model *m, int rg, int il, int t,
                  const float *x, const float *norm, float eps, float *y)
{
    if (p->ng[rg] == 0)
        return;
    const struct be_tensor *w;
    const struct model_layer *l = &m->layers[il];
    switch (t) {
    case LORA_Q:
        w = &l->wq;
        break;
    case LORA_K:
        w = &l->wk;
        break;
    case LORA_V:
        w = &l->wv;
        break;
    case LORA_O:
        w = &l->wo;
        break;
    case LORA_GATE:
        w = &l->w_gate;
        break;
    case LORA_UP:
        w = &l->w_up;
        break;
    default:
        w = &l->w_down;
        break;
    }
    struct be_lora_grp g[64];
    int n = 0;
    for (int gi = p->g0[rg]; gi < p->g0[rg] + p->ng[rg]; gi++) {
        const struct lora_set *s = p->g[gi].set;
        struct be_lora_grp *d = &g[n];
        d->rows = p->d_rows + p->g[gi].off;
        d->n_rows = p->g[gi].n;
        d->n_terms = 0;
        for (int k = 0; k < s->n && k < BE_LORA_MAX_TERMS; k++) {
            const struct lora_proj *pj = &s->a[k]->p[il * LORA_NT + t];
            if (!pj->a)
                continue;
            d->t[d->n_terms++] = (struct be_lora_term){
                .a = pj->a, .bt = pj->bt, .rank = pj->rank, .dtype = pj->dtype,
                .scale = pj->scale * s->w[k]};
        }
        if (d->n_terms == 0)
            continue;
        if (++n == 64) {
            call(m, y, x, norm, eps, (int)w->ne[0], (int)w->ne[1], g, n);
            n = 0;
        }
    }
    if (n)
        call(m, y, x, norm, eps, (int)w->ne[0], (int)w->ne[1], g, n);
}

void lora_plan_apply(const struct lora_plan *p, const struct model *m, int rg, int il, int t,
                     const float *x, float *y)
{
    apply(p, m, rg, il, t, x, NULL, 0.0f, y);
}

void lora_plan_apply_norm(const struct lora_plan *p, const struct model *m, int rg, int il,
                          int t, const float *xr, const float *norm, float eps, float *y)
{
    apply(p, m, rg, il, t, xr, norm, eps, y);
}
