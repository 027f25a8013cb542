/* spec_draft.c — the two-model proposer (spec.h, kind two-model).
 *
 * The draft model has its own KV pool and prefix-cache namespace (its file, shapes and KV
 * layout, as the engine's root but for the draft) and one sequence per request
 * (spec_req.dseq). A proposal catches the draft up with the request's final tokens
 * (positions [dpast, n), chunked, the prefix cache first for a new request), whose last
 * logits row gives the first draft token, then feeds each draft token to get the next:
 * greedy (argmax) drafts, or draws from q for sampled requests. The rows that draft in a
 * step draft together: one forward holds every row's last tokens, then one forward a draft
 * position holds every row that wants another token (a row far behind first catches up
 * alone, in chunks). After the target's verify the draft's sequence is rolled back to the
 * tokens that became final (the fed drafts that were accepted stay).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend/kvq.h"
#include "engine/sampler.h"
#include "util/clock.h"
#include "engine/spec/spec_int.h"
#include "util/log.h"

#define DRAFT_CHUNK 256 /* tokens per catch-up forward */
#define DRAFT_TAIL 16   /* tokens a row may feed in the batched first forward */

struct spec_draft {
    const struct model *m;
    struct kv_pool *kv;
    struct model_ws *ws;
    struct model_kv_view view;
    uint8_t root[KV_KEY_BYTES];
    int max_blocks, max_rows, max_tok;
    int32_t *tokens, *pos, *seqv, *slots; /* (max_tok) */
    int32_t *tables;                      /* (max_rows, max_blocks) */
    int32_t *out_idx, *am;                /* (max_rows) */
    float *logits;                        /* (max_rows, n_vocab) when ids need the logits */
    int can_argmax;
};

int spec_draft_new(struct spec *s, struct cerr *e)
{
    const struct spec_config *c = &s->c;
    const struct model *m = c->draft;
    if (!m)
        return cerr_set(e, CERR_INVALID, "two-model speculation needs a draft model");
    struct spec_draft *d = calloc(1, sizeof *d);
    if (!d)
        return cerr_set(e, CERR_NOMEM, "out of memory");
    s->dm = d;
    d->m = m;
    int bs = c->block_size > 0 ? c->block_size : 16;
    int n_ctx = c->n_ctx > 0 ? c->n_ctx : 4096;
    d->max_blocks = (n_ctx + bs - 1) / bs + 1;
    d->max_rows = c->max_seqs > 0 ? c->max_seqs : 1;
    if (d->max_rows > SPEC_DRAFT_ROWS)
        d->max_rows = SPEC_DRAFT_ROWS;
    d->max_tok = d->max_rows * DRAFT_TAIL > DRAFT_CHUNK ? d->max_rows * DRAFT_TAIL : DRAFT_CHUNK;
    long want = c->draft_blocks > 0 ? c->draft_blocks : (65536 + bs - 1) / bs;
    if (want < d->max_blocks)
        want = d->max_blocks;
    int kv_dim = m->hp.n_kv_head * m->hp.head_dim;
    int kv_dtype = c->kv_dtype && !kvq_is(c->kv_dtype)
                       ? c->kv_dtype
                       : DT_F16; /* a quantized target keeps an f16 draft */
    int rc =
        kv_pool_new(&d->kv, m->be, m->hp.n_layer, kv_dim, bs, (int)want, kv_dtype, (int)want, e);
    if (!rc)
        rc = model_ws_new(&d->ws, m, d->max_tok, d->max_rows, d->max_rows, d->max_blocks, e);
    if (rc)
        return rc;
    d->view = kv_pool_view(d->kv);
    size_t mt = (size_t)d->max_tok, mr = (size_t)d->max_rows;
    d->tokens = malloc(mt * sizeof *d->tokens);
    d->pos = malloc(mt * sizeof *d->pos);
    d->seqv = malloc(mt * sizeof *d->seqv);
    d->slots = malloc(mt * sizeof *d->slots);
    d->tables = calloc(mr * (size_t)d->max_blocks, sizeof *d->tables);
    d->out_idx = malloc(mr * sizeof *d->out_idx);
    d->am = malloc(mr * sizeof *d->am);
    d->can_argmax = model_can_argmax(m);
    d->logits = malloc(mr * (size_t)m->hp.n_vocab * sizeof *d->logits);
    if (!d->tokens || !d->pos || !d->seqv || !d->slots || !d->tables || !d->out_idx || !d->am ||
        !d->logits)
        return cerr_set(e, CERR_NOMEM, "out of memory");
    const char *base = strrchr(m->path, '/');
    char ns[1024];
    int n =
        snprintf(ns, sizeof ns, "cinfer-draft-kv-v1|model=%s|arch=%s|L=%d|E=%d|V=%d|kv=%d|bs=%d",
                 base ? base + 1 : m->path, m->arch_name, m->hp.n_layer, m->hp.n_embd,
                 m->hp.n_vocab, kv_dtype, bs);
    kv_key_root(d->root, ns, (size_t)(n < (int)sizeof ns ? n : (int)sizeof ns - 1));
    return 0;
}

void spec_draft_free(struct spec *s)
{
    struct spec_draft *d = s->dm;
    if (!d)
        return;
    model_ws_free(d->ws);
    kv_pool_free(d->kv);
    free(d->tokens);
    free(d->pos);
    free(d->seqv);
    free(d->slots);
    free(d->tables);
    free(d->out_idx);
    free(d->am);
    free(d->logits);
    free(d);
    s->dm = NULL;
}

/* One forward over rows i < n: row i feeds toks[i][0..cnt[i]) at positions p0[i].. of
 * q[i]'s sequence; with out, the next token of each row into id[i]: the argmax of its last
 * row, or for a sampled request (spec_req.sampled) a draw from q (spec_q_draw, as draft j[i]
 * at position p0[i] + cnt[i]). Returns 0, or -1 (the pool is full or the forward failed). */
static int step(struct spec *s, int n, struct spec_req *const *q, const int32_t *const *toks,
                const int *cnt, const int *p0, int out, const int *j, int32_t *id)
{
    struct spec_draft *d = s->dm;
    int nt = 0, mb = 1, any_sampled = 0;
    for (int i = 0; i < n; i++) {
        if (p0[i] + cnt[i] > (d->max_blocks - 1) * d->kv->block_size ||
            kv_seq_reserve(d->kv, &q[i]->dseq, p0[i] + cnt[i], NULL))
            return -1;
        q[i]->dlive = 1;
        if (q[i]->dseq.n_blocks > mb)
            mb = q[i]->dseq.n_blocks;
        any_sampled |= q[i]->sampled;
    }
    for (int i = 0; i < n; i++) {
        for (int t = 0; t < cnt[i]; t++, nt++) {
            d->tokens[nt] = toks[i][t];
            d->pos[nt] = p0[i] + t;
            d->seqv[nt] = i;
            d->slots[nt] = kv_seq_slot(d->kv, &q[i]->dseq, p0[i] + t);
        }
        d->out_idx[i] = nt - 1;
        const struct kv_seq *sq = &q[i]->dseq;
        memcpy(d->tables + (size_t)i * mb, sq->blocks, (size_t)sq->n_blocks * sizeof *d->tables);
        for (int b = sq->n_blocks; b < mb; b++)
            d->tables[(size_t)i * mb + b] = 0;
    }
    int use_am = out && d->can_argmax && !any_sampled;
    struct model_batch b = {.n_tok = nt,
                            .tokens = d->tokens,
                            .pos = d->pos,
                            .seq = d->seqv,
                            .slots = d->slots,
                            .n_seq = n,
                            .max_blocks = mb,
                            .block_tables = d->tables,
                            .n_out = out ? n : 0,
                            .out_idx = d->out_idx,
                            .argmax = use_am ? d->am : NULL};
    struct cerr e = {0};
    double t0 = clock_now_s();
    if (model_forward(d->m, d->ws, &d->view, &b, d->logits, &e)) {
        log_error("spec: the draft model's forward failed: %s", e.msg);
        return -1;
    }
    double dt = clock_now_s() - t0;
    if (nt == n) /* one token a row: what a draft forward of n rows costs (spec_draft_cost) */
        spec_draft_time(s, n, dt);
    else if (n == 1) { /* catching up (spec_draft_catchup_cost) */
        spec_lowq(&s->cq, &s->cqc, dt / nt);
    }
    s->draft_calls++;
    if (!out)
        return 0;
    int V = d->m->hp.n_vocab;
    for (int i = 0; i < n; i++) {
        const float *lg = d->logits + (size_t)i * V;
        id[i] = q[i]->sampled
                    ? spec_q_draw(q[i], j[i], lg, V, s->c.draft_temp_scale, p0[i] + cnt[i])
                : use_am ? d->am[i]
                         : sampler_argmax(lg, V);
    }
    return 0;
}

int spec_draft_propose_rows(struct spec *s, int n, struct spec_req *const *q,
                            const int32_t *const *t, const int *nt, const int *max,
                            int32_t *const *out, int *m)
{
    struct spec_draft *d = s->dm;
    struct spec_req *rq[SPEC_DRAFT_ROWS];
    const int32_t *tk[SPEC_DRAFT_ROWS];
    int cnt[SPEC_DRAFT_ROWS], p0[SPEC_DRAFT_ROWS], jj[SPEC_DRAFT_ROWS], at[SPEC_DRAFT_ROWS];
    int32_t id[SPEC_DRAFT_ROWS];
    for (int i = 0; i < n; i++) {
        m[i] = 0;
        q[i]->qn = 0;
    }
    if (!d)
        return 0;
    /* 1. rows far behind catch up alone, in chunks, to DRAFT_TAIL tokens of the end */
    int na = 0;
    for (int i = 0; i < n && na < d->max_rows; i++) {
        if (max[i] <= 0 || nt[i] <= 0)
            continue;
        spec_draft_pending(s, q[i], t[i], nt[i]);
        int ok = 1;
        while (ok && nt[i] - q[i]->dpast > DRAFT_TAIL) {
            int c = nt[i] - q[i]->dpast - DRAFT_TAIL;
            c = c < DRAFT_CHUNK ? c : DRAFT_CHUNK;
            const int32_t *src = t[i] + q[i]->dpast;
            ok = !step(s, 1, &q[i], &src, &c, &q[i]->dpast, 0, NULL, NULL);
            if (ok) {
                q[i]->dpast += c;
                kv_cache_commit(d->kv, &q[i]->dseq, d->root, t[i], q[i]->dpast);
            }
        }
        if (!ok)
            continue;
        at[na] = i;
        rq[na] = q[i];
        tk[na] = t[i] + q[i]->dpast;
        cnt[na] = nt[i] - q[i]->dpast;
        p0[na] = q[i]->dpast;
        jj[na] = 0;
        na++;
    }
    if (na == 0)
        return 0;
    /* 2. one forward: every row's last tokens; their last logits rows are the first drafts */
    if (step(s, na, rq, tk, cnt, p0, 1, jj, id))
        return 0;
    for (int r = 0; r < na; r++) {
        int i = at[r];
        q[i]->dpast = nt[i];
        kv_cache_commit(d->kv, &q[i]->dseq, d->root, t[i], q[i]->dpast);
        q[i]->dfed = 0;
        out[i][m[i]++] = id[r];
    }
    /* 3. one forward a draft position over the rows that want more */
    for (;;) {
        int k = 0;
        for (int r = 0; r < na; r++) {
            int i = at[r];
            if (m[i] >= max[i])
                continue;
            at[k] = i;
            rq[k] = q[i];
            tk[k] = &out[i][m[i] - 1];
            cnt[k] = 1;
            p0[k] = nt[i] + m[i] - 1;
            jj[k] = m[i];
            k++;
        }
        na = k;
        if (na == 0 || step(s, na, rq, tk, cnt, p0, 1, jj, id))
            break;
        for (int r = 0; r < na; r++) {
            int i = at[r];
            q[i]->dfed++;
            out[i][m[i]++] = id[r];
        }
    }
    int total = 0;
    for (int i = 0; i < n; i++) {
        q[i]->qn = q[i]->sampled ? m[i] : 0;
        total += m[i];
    }
    return total;
}

int spec_draft_pending(struct spec *s, struct spec_req *q, const int32_t *t, int n)
{
    struct spec_draft *d = s->dm;
    if (!d || n <= 0)
        return 0;
    if (q->dseq.n_blocks == 0 && q->dpast == 0 && n > 1) {
        struct cerr e = {0};
        int hit = kv_cache_lookup(d->kv, &q->dseq, d->root, t, n, &e);
        q->dpast = hit > 0 ? hit : 0;
        q->dlive = q->dseq.n_blocks > 0;
    }
    if (q->dpast >= n)
        q->dpast = n - 1;
    return n - q->dpast;
}

void spec_draft_time(struct spec *s, int n, double dt)
{
    if (n >= 1 && n <= SPEC_DRAFT_ROWS)
        spec_lowq(&s->dq[n], &s->dqc[n], dt);
}

double spec_draft_cost_rows(const struct spec *s, int n)
{
    if (s->c.draft_cost > 0 || n <= 1 || n > SPEC_DRAFT_ROWS)
        return spec_draft_cost(s) * (n > 1 ? 1 + spec_step_cost(s) * (n - 1) : 1);
    if (s->dqc[n] >= 4 && s->t1 > 0)
        return s->dq[n] / s->t1;
    return spec_draft_cost(s) * (1 + spec_step_cost(s) * (n - 1));
}

double spec_draft_catchup_cost(const struct spec *s)
{
    if (s->cqc >= 2 && s->t1 > 0)
        return s->cq / s->t1;
    return (double)spec_draft_cost(s) * spec_step_cost(s);
}

void spec_draft_rollback(struct spec *s, struct spec_req *q, int n_valid)
{
    struct spec_draft *d = s->dm;
    if (!d || !q)
        return;
    int keep = q->dpast + q->dfed; /* the fed drafts that were accepted are final now */
    if (keep > n_valid)
        keep = n_valid;
    q->dpast = keep;
    q->dfed = 0;
    if (q->dlive)
        kv_seq_trim(d->kv, &q->dseq, keep);
}

void spec_draft_release(struct spec *s, struct spec_req *q)
{
    struct spec_draft *d = s ? s->dm : NULL;
    if (!d || !q || !q->dlive)
        return;
    kv_seq_release(d->kv, &q->dseq);
    q->dlive = 0;
    q->dpast = q->dfed = 0;
}
