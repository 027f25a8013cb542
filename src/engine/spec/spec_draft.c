/* spec_draft.c — the two-model proposer (spec.h, kind two-model).
 *
 * The draft model has its own KV pool and prefix-cache namespace (its file, shapes and KV
 * layout, as the engine's root but for the draft) and one sequence per request
 * (spec_req.dseq). A proposal catches the draft up with the request's final tokens
 * (positions [dpast, n), chunked, the prefix cache first for a new request), whose last
 * logits row gives the first draft token, then feeds each draft token to get the next:
 * greedy (argmax) drafts, one forward each. After the target's verify the draft's sequence
 * is rolled back to the tokens that became final (the fed drafts that were accepted stay).
 * Rows draft one after another (no draft batching): the engine drafts with this kind only
 * while few rows decode (spec_engine.c), where it pays.
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

struct spec_draft {
    const struct model *m;
    struct kv_pool *kv;
    struct model_ws *ws;
    struct model_kv_view view;
    uint8_t root[KV_KEY_BYTES];
    int max_blocks;
    int32_t tokens[DRAFT_CHUNK], pos[DRAFT_CHUNK], seqv[DRAFT_CHUNK], slots[DRAFT_CHUNK];
    int32_t *tables;
    int32_t out_idx[1], am[1];
    float *logits; /* (n_vocab) when the backend has no argmax */
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
    long want = c->draft_blocks > 0 ? c->draft_blocks : (65536 + bs - 1) / bs;
    if (want < d->max_blocks)
        want = d->max_blocks;
    int kv_dim = m->hp.n_kv_head * m->hp.head_dim;
    int kv_dtype = c->kv_dtype && !kvq_is(c->kv_dtype) ? c->kv_dtype : DT_F16; /* a quantized target keeps an f16 draft */
    int rc =
        kv_pool_new(&d->kv, m->be, m->hp.n_layer, kv_dim, bs, (int)want, kv_dtype, (int)want, e);
    if (!rc)
        rc = model_ws_new(&d->ws, m, DRAFT_CHUNK, 1, 1, d->max_blocks, e);
    if (rc)
        return rc;
    d->view = kv_pool_view(d->kv);
    d->tables = calloc((size_t)d->max_blocks, sizeof *d->tables);
    d->can_argmax = model_can_argmax(m);
    d->logits = malloc((size_t)m->hp.n_vocab * sizeof *d->logits);
    if (!d->tables || !d->logits)
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
    free(d->tables);
    free(d->logits);
    free(d);
    s->dm = NULL;
}

/* One forward of toks[0..n) at positions p0.. of q's sequence; with out = 1 the next draft
 * token into *id: the argmax of the last row, or for a sampled request (spec_req.sampled) a
 * draw from q (spec_q_draw, as draft `j` at position p0 + n). Returns 0, or -1 (the pool is
 * full or the forward failed). */
static int step(struct spec *s, struct spec_req *q, const int32_t *toks, int n, int p0, int out,
                int j, int32_t *id)
{
    struct spec_draft *d = s->dm;
    if (p0 + n > (d->max_blocks - 1) * d->kv->block_size ||
        kv_seq_reserve(d->kv, &q->dseq, p0 + n, NULL))
        return -1;
    q->dlive = 1;
    for (int i = 0; i < n; i++) {
        d->tokens[i] = toks[i];
        d->pos[i] = p0 + i;
        d->seqv[i] = 0;
        d->slots[i] = kv_seq_slot(d->kv, &q->dseq, p0 + i);
    }
    memcpy(d->tables, q->dseq.blocks, (size_t)q->dseq.n_blocks * sizeof *d->tables);
    d->out_idx[0] = n - 1;
    struct model_batch b = {.n_tok = n,
                            .tokens = d->tokens,
                            .pos = d->pos,
                            .seq = d->seqv,
                            .slots = d->slots,
                            .n_seq = 1,
                            .max_blocks = q->dseq.n_blocks,
                            .block_tables = d->tables,
                            .n_out = out,
                            .out_idx = d->out_idx,
                            .argmax = out && d->can_argmax && !q->sampled ? d->am : NULL};
    struct cerr e = {0};
    double t0 = clock_now_s();
    if (model_forward(d->m, d->ws, &d->view, &b, d->logits, &e)) {
        log_error("spec: the draft model's forward failed: %s", e.msg);
        return -1;
    }
    if (n == 1) { /* the draft's cost, as the policy sees it (spec_draft_cost) */
        s->dw = s->dw * 0.98 + 1;
        s->dt = s->dt * 0.98 + (clock_now_s() - t0);
    } else { /* catching up (spec_draft_catchup_cost) */
        s->pw = s->pw * 0.9 + n;
        s->pt = s->pt * 0.9 + (clock_now_s() - t0);
    }
    s->draft_calls++;
    if (out && q->sampled)
        *id = spec_q_draw(q, j, d->logits, d->m->hp.n_vocab, s->c.draft_temp_scale, p0 + n);
    else if (out)
        *id = d->can_argmax ? d->am[0] : sampler_argmax(d->logits, d->m->hp.n_vocab);
    return 0;
}

int spec_draft_propose(struct spec *s, struct spec_req *q, const int32_t *t, int n, int max,
                       int32_t *out)
{
    struct spec_draft *d = s->dm;
    q->qn = 0;
    if (!d || n <= 0 || max <= 0)
        return 0;
    spec_draft_pending(s, q, t, n);
    /* catch up with the final tokens; the last chunk's last row is the first draft */
    int32_t id = -1;
    while (q->dpast < n) {
        int c = n - q->dpast < DRAFT_CHUNK ? n - q->dpast : DRAFT_CHUNK;
        int last = q->dpast + c == n;
        if (step(s, q, t + q->dpast, c, q->dpast, last, 0, &id))
            return 0;
        q->dpast += c;
        kv_cache_commit(d->kv, &q->dseq, d->root, t, q->dpast);
    }
    int m = 0;
    out[m++] = id;
    q->dfed = 0;
    while (m < max) {
        if (step(s, q, &out[m - 1], 1, n + m - 1, 1, m, &id))
            break;
        q->dfed++;
        out[m++] = id;
    }
    q->qn = q->sampled ? m : 0;
    return m;
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

double spec_draft_catchup_cost(const struct spec *s)
{
    if (s->pw >= 64 && s->t1 > 0)
        return s->pt / s->pw / s->t1;
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
