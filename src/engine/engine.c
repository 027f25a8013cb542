/* engine.c — see engine.h. The engine thread's loop: take submissions and cancellations,
 * plan a step and reserve its KV blocks (sched.c: decodes, then prefill chunks, then
 * admissions; preempting the youngest request when the pool is short), run one forward,
 * sample, detokenize, stop-match and publish events. Sampling reads as little as it can back
 * from the backend: the argmax ids when every row is a plain greedy pick, the candidates
 * (op topcand) when a row can sample from them, one row's logits for a row that cannot.
 *
 * A request holds all its tokens (prompt, then generated) and n_past, the number already
 * in the KV cache; a step feeds tokens[n_past ..]. Decode is the case of one token left.
 * A preempted request simply drops its blocks and n_past = 0: recomputing prompt +
 * generated tokens gives the same logits, so its output does not change.
 */
#include "engine/engine.h"

#include <pthread.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/engine_int.h"
#include "engine/grammar/gram_tok.h"
#include "engine/stop.h"
#include "engine/plan.h"
#include "engine/testhook.h"
#include "kv/kv_pool.h"
#include "kv/kvq_scheme.h"
#include "util/clock.h"
#include "util/log.h"

/* ---- config ----------------------------------------------------------------------- */

void engine_config_default(struct engine_config *c, const struct model *m)
{
    memset(c, 0, sizeof *c);
    int train = m->hp.n_ctx_train > 0 ? m->hp.n_ctx_train : 4096;
    c->n_ctx = train < 32768 ? train : 32768;
    c->max_seqs = 8;
    c->max_step_tokens = 2048;
    c->block_size = 16;
    int pool_tok = c->n_ctx > 65536 ? c->n_ctx : 65536;
    c->n_blocks = (pool_tok + c->block_size - 1) / c->block_size;
    c->kv_dtype = DT_F16;
    c->max_queue = 64;
    c->prompt_cache_blocks = c->n_blocks;
}

size_t engine_kv_bytes_per_token(const struct engine *g)
{
    return g->kv_per_token;
}

const struct engine_config *engine_config_of(const struct engine *g)
{
    return &g->c;
}

/* ---- requests --------------------------------------------------------------------- */

static void req_free(struct engine *g, struct ereq *r)
{
    if (!r)
        return;
    if (g->kv)
        kv_seq_release(g->kv, &r->seq);
    if (g->kv_swa)
        kv_seq_release(g->kv_swa, &r->seq_swa);
    sampler_free(r->smp);
    eng_lora_release(g, r);
    spec_req_free(g->spec, r->spec);
    tok_stream_free(r->ts);
    stop_free(r->stop);
    free(r->tokens);
    free(r->out);
    free(r);
}

int eng_is_eog(const struct engine *g, int32_t id)
{
    if (g->tk && tok_is_eog(g->tk, id))
        return 1;
    for (int i = 0; i < g->m->hp.n_eos; i++)
        if (g->m->hp.eos_ids[i] == id)
            return 1;
    for (int i = 0; i < g->c.n_extra_eos; i++)
        if (g->c.extra_eos[i] == id)
            return 1;
    return 0;
}

/* A matcher for the request's grammar on its sampler; the vocabulary's bytes are built
 * once, by the first grammar request (engine/grammar/gram_tok.h). */
static int grammar_attach(struct engine *g, struct sampler *smp, struct gram *gr, const char *prime,
                          const char *trigger, int after, const char *open, struct cerr *e)
{
    int V = g->m->hp.n_vocab, rc = 0;
    pthread_mutex_lock(&g->mu);
    if (!g->gvocab) {
        int32_t *eog = malloc((size_t)V * sizeof *eog);
        int n_eog = 0;
        for (int i = 0; eog && i < V; i++)
            if (eng_is_eog(g, i))
                eog[n_eog++] = i;
        rc = !eog     ? cerr_set(e, CERR_NOMEM, "out of memory")
             : !g->tk ? cerr_set(e, CERR_INVALID, "a grammar needs the model's tokenizer")
                      : gram_vocab_from_tok(&g->gvocab, g->tk, V, eog, n_eog, e);
        free(eog);
    }
    pthread_mutex_unlock(&g->mu);
    struct gram_matcher *gm = NULL;
    if (!rc)
        rc = gram_matcher_new(&gm, gr, g->gvocab, e);
    if (!rc && prime && gram_matcher_accept_bytes(gm, prime, strlen(prime))) {
        gram_matcher_free(gm);
        gm = NULL;
        rc = cerr_set(e, CERR_INVALID, "the grammar does not accept the text the prompt ends with");
    }
    if (!rc && (trigger && open ? sampler_set_grammar_reasoning(smp, gm, open, trigger)
                : trigger       ? sampler_set_grammar_lazy(smp, gm, trigger, after)
                                : sampler_set_grammar(smp, gm)))
        rc = cerr_set(e, CERR_NOMEM, "out of memory");
    return rc;
}

int engine_submit(struct engine *g, const struct engine_req *q, uint64_t *id, struct cerr *e)
{
    int V = g->m->hp.n_vocab;
    if (q->n_ids <= 0)
        return cerr_set(e, CERR_INVALID, "the prompt has no tokens");
    if (q->n_ids >= g->c.n_ctx)
        return cerr_set(e, CERR_LIMIT,
                        "the prompt has %d tokens but the context holds %d; shorten the prompt",
                        q->n_ids, g->c.n_ctx);
    for (int i = 0; i < q->n_ids; i++)
        if (q->ids[i] < 0 || q->ids[i] >= V)
            return cerr_set(e, CERR_INVALID, "token id %d is outside the vocabulary [0, %d)",
                            (int)q->ids[i], V);
    if (q->max_tokens <= 0)
        return cerr_set(e, CERR_INVALID, "max_tokens must be at least 1");
    if (sampler_params_check(&q->sp, V, e))
        return e ? e->code : CERR_INVALID;
    struct ereq *r = calloc(1, sizeof *r);
    if (!r)
        return cerr_set(e, CERR_NOMEM, "out of memory");
    int room = g->c.n_ctx - q->n_ids;
    r->max_tokens = q->max_tokens < room ? q->max_tokens : room;
    r->projected = (size_t)(q->n_ids + r->max_tokens) * g->kv_per_token;
    if (g->c.kv_budget_bytes && r->projected > g->c.kv_budget_bytes) {
        size_t need = r->projected;
        free(r);
        return cerr_set(e, CERR_INVALID,
                        "request needs %zu bytes of KV (prompt %d + max_tokens %d) but the KV "
                        "budget is %zu bytes — shorten the prompt or lower max_tokens",
                        need, q->n_ids, q->max_tokens < room ? q->max_tokens : room,
                        g->c.kv_budget_bytes);
    }
    r->cap = q->n_ids + r->max_tokens + 1;
    r->tokens = malloc((size_t)r->cap * sizeof *r->tokens);
    r->out_cap = 256;
    r->out = malloc(r->out_cap);
    int rc = (!r->tokens || !r->out) ? cerr_set(e, CERR_NOMEM, "out of memory") : 0;
    if (!rc)
        rc = sampler_new(&r->smp, &q->sp, V, e);
    if (!rc && g->tk && !(r->ts = tok_stream_new(g->tk, TOK_SKIP_SPECIAL)))
        rc = cerr_set(e, CERR_NOMEM, "out of memory");
    if (!rc)
        rc = stop_new(&r->stop, q->stops, q->n_stops, e);
    if (!rc && q->n_stops_outside > 0 &&
        stop_gate_block(r->stop, q->n_stops - q->n_stops_outside, q->think_open, q->think_close,
                        q->think_inside))
        rc = cerr_set(e, CERR_NOMEM, "out of memory");
    if (!rc && q->grammar)
        rc = grammar_attach(g, r->smp, q->grammar, q->grammar_prime, q->grammar_trigger,
                            q->grammar_after, q->grammar_open, e);
    if (!rc && g->spec && !(r->spec = spec_req_new(g->spec, &q->sp)))
        rc = cerr_set(e, CERR_NOMEM, "out of memory");
    if (!rc)
        rc = eng_lora_submit(g, r, q, e);
    if (!rc && g->n_xtc_exempt)
        rc = sampler_set_xtc_exempt(r->smp, g->xtc_exempt, g->n_xtc_exempt)
                 ? cerr_set(e, CERR_NOMEM, "out of memory")
                 : 0;
    if (rc) {
        req_free(g, r);
        return rc;
    }
    memcpy(r->tokens, q->ids, (size_t)q->n_ids * sizeof *r->tokens);
    r->n_tokens = r->n_prompt = q->n_ids;
    r->ignore_eos = q->ignore_eos;
    r->want_lp = q->sp.top_logprobs >= 0;
    r->plp = q->prompt_logprobs != 0;
    r->plp_done = 1;
    r->plp_k = q->sp.top_logprobs;
    r->cb = q->cb;
    r->ud = q->ud;
    kv_seq_init(&r->seq);
    kv_seq_init(&r->seq_swa);
    sampler_prime(r->smp, q->ids, q->n_ids);
    if (r->ts)
        tok_stream_prime(r->ts, q->ids, q->n_ids);

    pthread_mutex_lock(&g->mu);
    if (g->quit || g->in.n + g->st.waiting >= g->c.max_queue) {
        int quitting = g->quit;
        pthread_mutex_unlock(&g->mu);
        req_free(g, r);
        return quitting ? cerr_set(e, CERR_LIMIT, "the server is shutting down")
                        : cerr_set(e, CERR_LIMIT, "too many queued requests (%d); retry later",
                                   g->c.max_queue);
    }
    r->id = ++g->next_id;
    *id = r->id;
    eng_q_push(&g->in, r);
    g->st.submitted++;
    pthread_cond_signal(&g->cv);
    pthread_mutex_unlock(&g->mu);
    return 0;
}

void engine_cancel(struct engine *g, uint64_t id)
{
    pthread_mutex_lock(&g->mu);
    if (g->n_cancel == g->cap_cancel) {
        int nc = g->cap_cancel ? 2 * g->cap_cancel : 16;
        uint64_t *n = realloc(g->cancels, (size_t)nc * sizeof *n);
        if (!n) {
            pthread_mutex_unlock(&g->mu);
            return; /* the request finishes normally */
        }
        g->cancels = n;
        g->cap_cancel = nc;
    }
    g->cancels[g->n_cancel++] = id;
    pthread_cond_signal(&g->cv);
    pthread_mutex_unlock(&g->mu);
}

void engine_get_stats(struct engine *g, struct engine_stats *out)
{
    pthread_mutex_lock(&g->mu);
    *out = g->st;
    out->waiting += g->in.n;
    pthread_mutex_unlock(&g->mu);
}

/* ---- events ----------------------------------------------------------------------- */

static void ev_fill_counts(const struct engine *g, const struct ereq *r, struct engine_event *ev)
{
    ev->n_prompt = r->n_prompt;
    ev->n_gen = r->n_gen;
    ev->n_cached = r->n_cached;
    /* the prompt tokens this request computed go into the prefix cache (full blocks as they
     * are computed, the partial last one at the end) unless the cache is off */
    ev->n_cache_write = g->c.prompt_cache_blocks >= 0 ? r->n_prompt - r->n_cached : 0;
    ev->spec_on = r->spec != NULL;
    ev->spec_drafted = r->spec_drafted;
    ev->spec_accepted = r->spec_accepted;
    ev->spec_calls = r->spec_calls;
}

/* Terminal DONE: releases held text, calls back, frees. r must not be in run/wait. */
void eng_finish(struct engine *g, struct ereq *r, int reason, int stop_index)
{
    r->out_len = 0;
    if (reason != ENGINE_FINISH_STOP && reason != ENGINE_FINISH_CANCELLED) {
        char buf[4096];
        size_t bl = 0;
        if (r->ts && tok_stream_flush(r->ts, buf, sizeof buf, &bl) == 0 && bl) {
            int w;
            stop_push(r->stop, buf, bl, &r->out, &r->out_len, &r->out_cap, &w);
        }
        stop_flush(r->stop, &r->out, &r->out_len, &r->out_cap);
    }
    struct engine_event ev = {.type = ENGINE_EV_DONE,
                              .finish = reason,
                              .stop_index = stop_index,
                              .text = r->out,
                              .len = r->out_len};
    ev_fill_counts(g, r, &ev);
    /* everything computed stays cached for the next turn; the blocks are released and the
     * counters updated before the caller hears of the end, so that a client reading /stats
     * right after its response sees them */
    kv_cache_commit_tail(g->kv, &r->seq, r->root, r->tokens, r->n_past);
    kv_seq_release(g->kv, &r->seq);
    if (g->spec && reason != ENGINE_FINISH_CANCELLED)
        spec_req_done(g->spec, r->spec, r->tokens, r->n_prompt, r->n_tokens);
    if (g->kv_swa) {
        kv_cache_commit_tail(g->kv_swa, &r->seq_swa, r->root, r->tokens, r->n_past);
        kv_seq_release(g->kv_swa, &r->seq_swa);
    }
    pthread_mutex_lock(&g->mu);
    g->st.finished++;
    g->st.cancelled += reason == ENGINE_FINISH_CANCELLED;
    g->st.running = g->n_run;
    g->st.blocks_free = kv_pool_available(g->kv);
    if (g->kv_swa)
        g->st.swa_blocks_free = kv_pool_available(g->kv_swa);
    g->st.cache_entries = g->kv->cs.entries;
    g->st.cache_full_blocks = g->kv->cs.full_entries;
    g->st.cache_lru_blocks = g->kv->cs.lru;
    pthread_mutex_unlock(&g->mu);
    r->cb(r->ud, &ev);
    req_free(g, r);
}

void eng_fail(struct engine *g, struct ereq *r, const char *msg) { eng_fail_as(g, r, msg, 0); }

void eng_fail_as(struct engine *g, struct ereq *r, const char *msg, int status)
{
    struct engine_event ev = {.type = ENGINE_EV_ERROR, .error = msg, .error_status = status};
    ev_fill_counts(g, r, &ev);
    kv_seq_release(g->kv, &r->seq);
    if (g->kv_swa)
        kv_seq_release(g->kv_swa, &r->seq_swa);
    pthread_mutex_lock(&g->mu);
    g->st.failed++;
    g->st.running = g->n_run;
    g->st.blocks_free = kv_pool_available(g->kv);
    pthread_mutex_unlock(&g->mu);
    r->cb(r->ud, &ev);
    req_free(g, r);
}

/* Handles a sampled token: append, detokenize, stop-match, publish; may finish r.
 * Returns 1 when r finished (and was freed). */
int eng_on_token(struct engine *g, struct ereq *r, int32_t id, const struct sampler_logprob *lp)
{
    const char *gerr = sampler_grammar_error(r->smp); /* (id was sampled unconstrained) */
    if (gerr) {
        eng_run_remove(g, r);
        eng_fail_as(g, r, gerr, 400); /* the request's grammar, not the server */
        return 1;
    }
    r->tokens[r->n_tokens++] = id;
    r->n_gen++;
    sampler_accept(r->smp, id);
    r->out_len = 0;
    int eog = !r->ignore_eos && eng_is_eog(g, id);
    int fired = 0, which = -1;
    if (!eog && r->ts) {
        char buf[4096];
        size_t bl = 0;
        if (tok_stream_push(r->ts, id, buf, sizeof buf, &bl) == 0 && bl) {
            fired = stop_push(r->stop, buf, bl, &r->out, &r->out_len, &r->out_cap, &which);
            if (fired < 0) {
                eng_run_remove(g, r);
                eng_fail(g, r, "out of memory");
                return 1;
            }
        }
    }
    struct engine_event ev = {.type = ENGINE_EV_DELTA,
                              .token = id,
                              .text = r->out,
                              .len = r->out_len,
                              .lp = r->want_lp ? lp : NULL};
    ev_fill_counts(g, r, &ev);
    r->cb(r->ud, &ev);
    int reason = -1;
    if (fired)
        reason = ENGINE_FINISH_STOP;
    else if (eog)
        reason = ENGINE_FINISH_EOS;
    else if (r->n_gen >= r->max_tokens || r->n_tokens >= g->c.n_ctx)
        reason = ENGINE_FINISH_LENGTH;
    int32_t forced;
    if (reason < 0 && !r->want_lp && !r->spec && sampler_grammar_forced(r->smp, &forced)) {
        sampler_skip(
            r->smp); /* jump-forward: the one id the grammar allows, fed with the next step */
        return eng_on_token(g, r, forced, lp);
    }
    if (reason < 0)
        return 0;
    eng_run_remove(g, r);
    eng_finish(g, r, reason, which);
    return 1;
}

/* ---- the step --------------------------------------------------------------------- */

static int32_t sample_fetched(struct engine *g, struct ereq *r, int out,
                              struct sampler_logprob *lp);

/* Samples output row `out` of a step that downloaded candidates: the header's argmax for a
 * plain greedy row, the candidates when they suffice, else the row's logits fetched from the
 * backend. The choice depends only on the request and on its own row, never on the batch.
 * Returns the id, or -1 when fetching the row failed (r then failed and was freed). */
static int32_t sample_from_cands(struct engine *g, struct ereq *r, int out,
                                 struct sampler_logprob *lp)
{
    const struct be_topcand_hdr *h =
        (const struct be_topcand_hdr *)((const char *)g->cands +
                                        (size_t)out * be_topcand_stride(g->cand_cap));
    if (!r->want_lp && sampler_is_plain_greedy(r->smp)) {
        sampler_skip(r->smp);
        return h->argmax;
    }
    if (sampler_wants_cands(r->smp)) {
        struct sampler_cands c = {.mx = h->mx,
                                  .sum = h->sum,
                                  .argmax = h->argmax,
                                  .nc = h->nc,
                                  .c = (const struct be_topcand_ent *)(h + 1)};
        int32_t id = sampler_sample_cands(r->smp, &c, r->want_lp ? lp : NULL);
        if (id != SAMPLER_NEED_FULL) {
            g->cand_rows++;
            return id;
        }
    }
    return sample_fetched(g, r, out, lp);
}

/* Fills g->samp with the parameters of the op sample for the step's output rows (row s of
 * g->rows is output s when burst, else its out), their ids decided at their sampler's step
 * + ahead. A row the op cannot decide (logprobs, a truncation filter, XTC firing, too much
 * history; sampler_device_row) is marked skip when skip_ok, else the call fails. Returns
 * the words used (*n_dev: rows the op decides), or -1. */
int eng_samp_fill(struct engine *g, int n_rows, int ahead, int burst, int skip_ok, int *n_dev)
{
    int n_out = 0;
    for (int s = 0; s < n_rows; s++)
        n_out += burst || g->rows[s].out >= 0;
    int used = n_out * BE_SAMPLE_ROW_WORDS, cap = model_samp_words_max(g->m, n_out), nd = 0;
    int nw = (g->m->hp.n_vocab + 31) / 32, gm_ok = !burst && g->gm_dev;
    g->n_gm = 0;
    for (int s = 0; s < n_rows; s++) {
        const struct row *w = &g->rows[s];
        int o = burst ? s : w->out;
        if (o < 0)
            continue;
        struct be_sample_row row;
        /* a grammar row's bitset goes after every row's aux words: room kept for it */
        int gm = gm_ok && g->n_gm < BE_SAMPLE_MASK_ROWS && sampler_device_masked(w->r->smp);
        int k = w->r->want_lp ? -1
                              : sampler_device_row(w->r->smp, ahead, w->r->tokens, w->r->n_tokens,
                                                   &row, g->samp + used,
                                                   cap - used - (g->n_gm + gm) * nw, used, gm);
        if (k < 0 && !skip_ok)
            return -1;
        if (k < 0)
            row = (struct be_sample_row){.skip = 1};
        else if (gm)
            g->gm_smp[g->n_gm] = w->r->smp, g->gm_off[g->n_gm++] = o;
        memcpy(g->samp + (size_t)o * BE_SAMPLE_ROW_WORDS, &row, sizeof row);
        used += k > 0 ? k : 0;
        nd += k >= 0;
    }
    g->gm_late = used;
    for (int i = 0; i < g->n_gm; i++, used += nw) { /* gm_off: the row, then its bitset */
        g->samp[(size_t)g->gm_off[i] * BE_SAMPLE_ROW_WORDS +
                offsetof(struct be_sample_row, mask_off) / 4] = used;
        g->gm_off[i] = used;
    }
    if (n_dev)
        *n_dev = nd;
    return used;
}

/* model_batch.samp_fill: the grammar rows' bitsets, written while the forward runs. */
static void samp_masks(void *ctx)
{
    struct engine *g = ctx;
    for (int i = 0; i < g->n_gm; i++)
        sampler_device_mask(g->gm_smp[i], (uint32_t *)(g->samp + g->gm_off[i]));
}

/* Samples output row `out` from its logits fetched from the backend (model_logits_row).
 * Returns the id, or -1 when fetching the row failed (r then failed and was freed). */
static int32_t sample_fetched(struct engine *g, struct ereq *r, int out, struct sampler_logprob *lp)
{
    g->full_rows++;
    float *row = g->logits + (size_t)out * g->m->hp.n_vocab;
    struct cerr e = {0};
    if (model_logits_row(g->m, g->ws, out, row, &e)) {
        log_error("engine: fetching a logit row failed: %s", e.msg);
        eng_run_remove(g, r);
        eng_fail(g, r, e.msg);
        return -1;
    }
    return sampler_sample(r->smp, row, r->want_lp ? lp : NULL);
}

/* The step's block tables, mb wide, from g->rows (and the sliding pool's, when split). */
void eng_fill_tables(struct engine *g, int n_rows, int mb)
{
    for (int s = 0; s < n_rows; s++) {
        const struct kv_seq *q = &g->rows[s].r->seq;
        memcpy(g->tables + (size_t)s * mb, q->blocks, (size_t)q->n_blocks * sizeof(int32_t));
        for (int b = q->n_blocks; b < mb; b++)
            g->tables[(size_t)s * mb + b] = 0;
        if (g->kv_swa) {
            /* released blocks (before the window) read as block 0: never attended to */
            const struct kv_seq *w = &g->rows[s].r->seq_swa;
            for (int b = 0; b < mb; b++)
                g->tables_swa[(size_t)s * mb + b] =
                    b < w->n_blocks && w->blocks[b] >= 0 ? w->blocks[b] : 0;
        }
    }
}

/* The id of output row `out` for r: the backend's argmax (use_am), the candidates
 * (use_tc), else the host logits. Returns -1 when r failed (and was freed). */
int32_t eng_sample_row(struct engine *g, struct ereq *r, int out, int use_am, int use_tc,
                       struct sampler_logprob *lp)
{
    if (use_am) {
        sampler_skip(r->smp);
        return g->am[out];
    }
    if (use_tc)
        return sample_from_cands(g, r, out, lp);
    return sampler_sample(r->smp, g->logits + (size_t)out * g->m->hp.n_vocab,
                          r->want_lp ? lp : NULL);
}

static int run_step(struct engine *g, int n_rows)
{
    int nt = 0, n_out = 0, mb = 1;
    for (int s = 0; s < n_rows; s++) {
        struct row *w = &g->rows[s];
        struct ereq *r = w->r;
        for (int j = 0; j < w->n; j++, nt++) {
            int p = r->n_past + j;
            g->tokens[nt] = r->tokens[p];
            g->pos[nt] = p;
            g->seqv[nt] = s;
            g->slots[nt] = kv_seq_slot(g->kv, &r->seq, p);
            if (g->kv_swa)
                g->slots_swa[nt] = kv_seq_slot(g->kv_swa, &r->seq_swa, p);
        }
        w->plp = -1;
        if (w->k == 0 && eng_plp_row(r)) { /* scoring the prompt: a row for every token */
            w->plp = n_out;
            for (int j = w->n - 1; j >= 0; j--)
                g->out_idx[n_out++] = nt - 1 - j;
            if (r->n_past + w->n == r->n_tokens)
                w->out = n_out - 1;
        } else if (r->n_past + w->n == r->n_tokens + w->k) { /* k + 1 rows for drafts */
            w->out = n_out;
            for (int j = w->k; j >= 0; j--)
                g->out_idx[n_out++] = nt - 1 - j;
        }
        if (r->seq.n_blocks > mb)
            mb = r->seq.n_blocks;
    }
    mb = eng_table_width(g, n_rows, mb);
    eng_fill_tables(g, n_rows, mb);
    /* the decode rows (one token each, or 1 + k with drafts: planned first) run apart from
     * the prompt chunks, so a decode row's bits are those of a decode step
     * (model_batch.n_lead; eng_spec_plan keeps their tokens within model_exact_rows) */
    int lead = 0, lead_tok = 0;
    while (lead < n_rows && (g->rows[lead].n == 1 || g->rows[lead].k > 0))
        lead_tok += g->rows[lead++].n;
    struct model_kv_view view = g->view;
    struct model_batch b = {.n_tok = nt,
                            .tokens = g->tokens,
                            .pos = g->pos,
                            .seq = g->seqv,
                            .slots = g->slots,
                            .n_seq = n_rows,
                            .max_blocks = mb,
                            .block_tables = g->tables,
                            .n_out = n_out,
                            .out_idx = g->out_idx,
                            .n_lead = lead_tok,
                            .slots_swa = g->kv_swa ? g->slots_swa : NULL,
                            .block_tables_swa = g->kv_swa ? g->tables_swa : NULL};
    eng_lora_batch(g, n_rows, &b);
    /* every output row a plain greedy pick: the backend's argmax, no logits copied back;
     * else, when a row can sample from candidates: the candidates of every row (plain greedy
     * rows take the header's argmax, rows that need the logits fetch their own row) */
    int use_am = n_out > 0 && g->can_argmax, use_tc = 0, any_plp = 0;
    for (int s = 0; s < n_rows; s++) {
        const struct row *w = &g->rows[s];
        any_plp |= w->plp >= 0; /* prompt scoring reads its rows whole: logits downloaded */
        if (w->out < 0 || (!w->r->want_lp && sampler_is_plain_greedy(w->r->smp)))
            continue;
        use_am = 0;
        use_tc |= g->cand_cap > 0 && sampler_wants_cands(w->r->smp);
    }
    /* else the rows the backend can decide (greedy with processors, temperature-only
     * sampling) take its op sample, one id each copied back; the others (marked skip, their
     * logits left alone) sample from candidates or fetch their logits, as without it */
    if (any_plp)
        use_am = use_tc = 0;
    int n_dev = 0, any_k = any_plp;
    for (int s = 0; s < n_rows; s++) /* speculation's verify rows sample on the host */
        any_k |= g->rows[s].k > 0;
    int ds_words = !use_am && !any_k && n_out > 0 && g->dev_sample
                       ? eng_samp_fill(g, n_rows, 0, 0, 1, &n_dev)
                       : -1;
    if (n_dev == 0)
        ds_words = -1;
    b.argmax = use_am || ds_words >= 0 ? g->am : NULL;
    if (ds_words >= 0) {
        b.samp = g->samp;
        b.samp_words = ds_words;
        if (g->n_gm) /* grammar bitsets: computed while the layers run */
            b.samp_late = g->gm_late, b.samp_fill = samp_masks, b.samp_ctx = g;
    }
    if (use_tc) {
        b.cands = g->cands;
        b.cand_cap = g->cand_cap;
        b.cand_span = SAMPLER_CAND_SPAN;
    }
    struct cerr e = {0};
    int decode_only = 1; /* speculation measures what a token more costs in such steps */
    for (int s = 0; s < n_rows; s++)
        decode_only &= g->rows[s].r->n_past >= g->rows[s].r->n_prompt;
    double t0 = clock_now_s();
    if (model_forward(g->m, g->ws, &view, &b, g->logits, &e)) {
        log_error("engine: forward failed: %s", e.msg);
        for (int s = 0; s < n_rows; s++) {
            eng_run_remove(g, g->rows[s].r);
            eng_fail(g, g->rows[s].r, e.msg);
        }
        return -1;
    }
    eng_step_timed(g, decode_only, nt, n_rows, t0); /* speculation's costs, step_prof */
    g->steps++;
    eng_test_step_hook(g->steps);
    long n_prompt_fed = 0;
    for (int s = 0; s < n_rows; s++) {
        struct row *w = &g->rows[s];
        struct ereq *r = w->r;
        if (w->k > 0) {
            eng_spec_verify(g, w, use_am, use_tc);
            continue;
        }
        if (w->plp >= 0)
            eng_plp_emit(g, w);
        if (r->n_past < r->n_prompt)
            n_prompt_fed +=
                (r->n_past + w->n < r->n_prompt ? r->n_past + w->n : r->n_prompt) - r->n_past;
        r->n_past += w->n;
        kv_cache_commit(g->kv, &r->seq, r->root, r->tokens, r->n_past);
        if (g->kv_swa) {
            /* register, then let go of what the window no longer reaches */
            kv_cache_commit(g->kv_swa, &r->seq_swa, r->root, r->tokens, r->n_past);
            kv_seq_drop_before(g->kv_swa, &r->seq_swa, r->n_past - g->window + 1);
        }
        if (w->out < 0)
            continue;
        struct sampler_logprob lp;
        int32_t id;
        if (ds_words >= 0 && g->am[w->out] >= 0) { /* the backend's op sample decided it */
            id = g->am[w->out];
            sampler_skip(r->smp);
            g->dev_rows++;
        } else if (ds_words >= 0 && !use_tc) /* a skipped row: its logits stayed on the device */
            id = sample_fetched(g, r, w->out, &lp);
        else
            id = eng_sample_row(g, r, w->out, use_am, use_tc, &lp);
        r->spec_calls++;
        if (id >= 0) /* else the request failed */
            eng_on_token(g, r, id, &lp);
    }
    pthread_mutex_lock(&g->mu);
    g->st.prompt_tokens += n_prompt_fed;
    pthread_mutex_unlock(&g->mu);
    return 0;
}

void *eng_main(void *arg)
{
    struct engine *g = arg;
    struct be *b = g->m->be;
    struct cerr be_e = {0};
    if (b->ops->bind_thread && b->ops->bind_thread(b, &be_e))
        log_error("engine: %s (ops may run on the wrong device)", be_e.msg);
    for (;;) {
        struct queue dead = {0};
        pthread_mutex_lock(&g->mu);
        while (!g->quit && !g->in.n && !g->n_cancel && !g->n_run && !g->wait.n && !g->calls &&
               !g->side_due) {
            if (g->ssd)
                eng_tier_wait(g); /* the SSD tier's idle work, then a (timed) wait */
            else
                pthread_cond_wait(&g->cv, &g->mu);
        }
        int quit = g->quit, side = g->side_due;
        g->side_due = 0;
        eng_take_inputs(g, &dead);
        pthread_mutex_unlock(&g->mu);
        eng_calls_run(g); /* engine_post / engine_call: adapter mounts and frees */
        if (side && !quit)
            eng_side_run(g); /* one embedding forward between steps (side.c) */
        if (g->ssd && !quit)
            eng_tier_busy(g);
        if (quit) {
            while (g->n_run)
                eng_q_push(&dead, g->run[--g->n_run]);
            struct ereq *r;
            while ((r = eng_q_pop(&g->wait)))
                eng_q_push(&dead, r);
        }
        struct ereq *r;
        while ((r = eng_q_pop(&dead))) {
            if (r->cancelled == 2)
                eng_fail(g, r, "the request does not fit in the KV cache pool");
            else
                eng_finish(g, r, ENGINE_FINISH_CANCELLED, -1);
        }
        if (quit) {
            if (g->ssd)
                eng_tier_quit(g);
            break;
        }
        int n = eng_plan_and_reserve(g, &dead);
        while ((r = eng_q_pop(&dead)))
            eng_fail(g, r, "the request does not fit in the KV cache pool");
        long gen_before = 0;
        for (int i = 0; i < n; i++)
            gen_before += g->rows[i].r->n_tokens == g->rows[i].r->n_past + g->rows[i].n;
        int bk = n > 0 ? eng_burst_ok(g, n) : 0;
        if (bk) {
            eng_run_burst(g, n, bk == 2); /* it checks the pool and publishes after each step */
            continue;
        }
        if (n > 0)
            run_step(g, n);
        if (g->c.check_invariants)
            eng_check_pool(g);
        eng_publish_stats(g, n > 0 ? gen_before : 0);
    }
    eng_publish_stats(g, 0);
    return NULL;
}
