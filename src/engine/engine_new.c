/* engine_new.c — see engine.h: the engine's lifecycle (engine_new: the KV pools, the
 * prefix-cache namespace, the workspaces, sampling on the backend, the SSD tier and the
 * speculation state, then the engine thread, eng_main in engine.c; engine_free). */
#include "engine/engine.h"

#include <pthread.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/engine_int.h"
#include "engine/grammar/gram_tok.h"
#include "engine/plan.h"
#include "engine/testhook.h"
#include "kv/kv_pool.h"
#include "kv/kvq_scheme.h"
#include "util/clock.h"
#include "util/log.h"

/* ---- lifecycle -------------------------------------------------------------------- */

/* The prefix-cache namespace: what a block's K/V depend on besides its tokens — the model
 * (file name, architecture, shapes, vocabulary, RoPE), the KV dtype and block size; a
 * request with adapters chains from this root hashed with its set (lora_eng.c). */
static void namespace_root(struct engine *g)
{
    const struct model_hparams *h = &g->m->hp;
    const char *base = strrchr(g->m->path, '/');
    char ns[1024];
    int n =
        snprintf(ns, sizeof ns,
                 "cinfer-kv-v1|model=%s|arch=%s|L=%d|E=%d|H=%d/%d|D=%d|F=%d|V=%d|theta=%.9g/%.9g"
                 "|swa=%d|kv=%d|bs=%d|adapters=none",
                 base ? base + 1 : g->m->path, g->m->arch_name, h->n_layer, h->n_embd, h->n_head,
                 h->n_kv_head, h->head_dim, h->n_ff, h->n_vocab, (double)h->rope_theta,
                 (double)h->rope_theta_local, h->sliding_window, g->c.kv_dtype, g->c.block_size);
    n = n < (int)sizeof ns ? n : (int)sizeof ns - 1;
    n += kvq_ns_append(ns + n, sizeof ns - (size_t)n, g->ldt, h->n_layer, g->c.kv_dtype);
    kv_key_root(g->root, ns, (size_t)(n < (int)sizeof ns ? n : (int)sizeof ns - 1));
}

/* XTC never removes end-of-generation tokens or tokens that write a newline. */
static int build_xtc_exempt(struct engine *g)
{
    int V = g->m->hp.n_vocab, n = 0, cap = 64;
    g->xtc_exempt = malloc((size_t)cap * sizeof(int32_t));
    if (!g->xtc_exempt)
        return -1;
    for (int32_t id = 0; id < V; id++) {
        int hit = eng_is_eog(g, id);
        if (!hit && g->tk && id < tok_vocab_size(g->tk)) {
            char *text = NULL;
            size_t len = 0;
            if (tok_decode(g->tk, &id, 1, 0, &text, &len, NULL) == 0 && text)
                hit = memchr(text, '\n', len) != NULL;
            free(text);
        }
        if (!hit)
            continue;
        if (n == cap) {
            int32_t *x = realloc(g->xtc_exempt, (size_t)(cap *= 2) * sizeof(int32_t));
            if (!x)
                return -1;
            g->xtc_exempt = x;
        }
        g->xtc_exempt[n++] = id;
    }
    g->n_xtc_exempt = n;
    return 0;
}

/* A switch from the environment: set, not empty and not "0". */
static int env_on(const char *name)
{
    const char *v = getenv(name);
    return v && *v && strcmp(v, "0") != 0;
}

/* Candidate sampling when the backend has the op (CINFER_HOST_ARGMAX=1 or
 * CINFER_HOST_SAMPLE=1: never); CINFER_SAMPLE_CAP sets the most candidates per row (1 ..
 * BE_TOPCAND_CAP_MAX, the default): a row with more ids in the span gets a narrower prefix,
 * and a filter that runs past it fetches the row. A step downloads rows x (16 + 8 cap) bytes. */
static int cands_init(struct engine *g, struct cerr *e)
{
    if (!model_can_topcand(g->m) || env_on("CINFER_HOST_ARGMAX") || env_on("CINFER_HOST_SAMPLE"))
        return 0;
    const char *cv = getenv("CINFER_SAMPLE_CAP");
    int cap = cv && *cv ? atoi(cv) : BE_TOPCAND_CAP_MAX;
    if (cap < 1 || cap > BE_TOPCAND_CAP_MAX) {
        log_warn("engine: CINFER_SAMPLE_CAP=%s is outside [1, %d]; using %d", cv,
                 BE_TOPCAND_CAP_MAX, BE_TOPCAND_CAP_MAX);
        cap = BE_TOPCAND_CAP_MAX;
    }
    int rc = model_ws_reserve_cands(g->ws, cap, e);
    if (rc)
        return rc;
    g->cands = malloc((size_t)g->max_out * be_topcand_stride(cap));
    if (!g->cands)
        return cerr_set(e, CERR_NOMEM, "out of memory");
    g->cand_cap = cap;
    return 0;
}

/* Sampling on the backend (its op sample) for the rows it can decide: on a device backend
 * (one that queues steps), unless CINFER_HOST_SAMPLE=1, CINFER_HOST_ARGMAX=1 or
 * CINFER_DEVICE_SAMPLE=0; CINFER_DEVICE_SAMPLE=1 turns it on for any backend with the op
 * (tests: the CPU's op is the host sampler's own math, so the ids are the same). */
static int dev_sample_init(struct engine *g, struct cerr *e)
{
    const char *dv = getenv("CINFER_DEVICE_SAMPLE");
    int want = dv && *dv ? strcmp(dv, "0") != 0 : model_queue_async(g->m);
    if (!want || !model_can_sample(g->m) || !g->can_argmax || env_on("CINFER_HOST_SAMPLE"))
        return 0;
    g->samp = malloc((size_t)model_samp_words_max(g->m, g->c.max_seqs) * sizeof *g->samp);
    if (!g->samp)
        return cerr_set(e, CERR_NOMEM, "out of memory");
    g->dev_sample = 1;
    const char *gd = getenv("CINFER_GRAMMAR_DEVICE"); /* grammar masks applied by the op */
    g->gm_dev = !(gd && !strcmp(gd, "0"));
    return 0;
}

int engine_new(struct engine **out, const struct model *m, const struct tok *t,
               const struct engine_config *c, struct cerr *e)
{
    *out = NULL;
    if (c->n_ctx <= 1 || c->max_seqs <= 0 || c->max_step_tokens <= 0 || c->block_size <= 0 ||
        c->n_blocks <= 0 || c->max_queue <= 0)
        return cerr_set(e, CERR_INVALID, "engine: invalid configuration");
    struct engine *g = calloc(1, sizeof *g);
    if (!g)
        return cerr_set(e, CERR_NOMEM, "out of memory");
    g->m = m;
    g->tk = t;
    g->c = *c;
    g->max_blocks = (c->n_ctx + c->block_size - 1) / c->block_size;
    if ((long)g->max_blocks > c->n_blocks) {
        free(g);
        return cerr_set(e, CERR_INVALID,
                        "engine: the KV pool (%d blocks of %d) cannot hold one context of %d",
                        c->n_blocks, c->block_size, c->n_ctx);
    }
    pthread_mutex_init(&g->mu, NULL);
    pthread_cond_init(&g->cv, NULL);
    pthread_cond_init(&g->flush_cv, NULL);
    int S = c->max_seqs, T = c->max_step_tokens, V = m->hp.n_vocab;
    int kv_dim = m->hp.n_kv_head * m->hp.head_dim;
    g->kv_per_token = engine_kv_token_bytes(m, c);
    int n_swa = 0;
    for (int l = 0; m->hp.sliding_window > 0 && l < m->hp.n_layer; l++)
        n_swa += m->hp.layer_swa[l] != 0;
    int split = n_swa > 0 && n_swa < m->hp.n_layer && !c->no_swa_pool;
    /* per-layer KV dtypes (kv quantization): ldt[0..) global layers, then sliding ones */
    int L = m->hp.n_layer, *gl = malloc((size_t)(2 * L + 1) * sizeof(int));
    g->ldt = malloc((size_t)(L + 1) * sizeof(int));
    if (!gl || !g->ldt) {
        free(gl);
        free(g->ldt);
        free(g);
        return cerr_set(e, CERR_NOMEM, "out of memory");
    }
    int ng = 0, ns = 0;
    for (int l = 0; l < L; l++) {
        g->ldt[l] = c->kv_layer_dtype ? c->kv_layer_dtype[l] : c->kv_dtype;
        if (split && m->hp.layer_swa[l])
            gl[L + ns++] = g->ldt[l];
        else
            gl[ng++] = g->ldt[l];
    }
    int rc = kv_pool_new_layers(&g->kv, m->be, ng, kv_dim, c->block_size, c->n_blocks, c->kv_dtype,
                                gl, c->prompt_cache_blocks, e);
    if (!rc && split) {
        /* sliding layers: running sequences hold about window + one step of positions; the
         * rest of the pool keeps the windows of cached prefixes */
        g->window = m->hp.sliding_window;
        int per_seq = (g->window + c->max_step_tokens) / c->block_size + 3;
        long nb =
            (long)c->max_seqs * per_seq + (c->prompt_cache_blocks > 0 ? c->prompt_cache_blocks : 0);
        if (nb > c->n_blocks)
            nb = c->n_blocks;
        rc = kv_pool_new_layers(&g->kv_swa, m->be, n_swa, kv_dim, c->block_size, (int)nb,
                                c->kv_dtype, gl + L, c->prompt_cache_blocks, e);
    }
    free(gl);
    if (!rc && c->kv_listener) {
        kv_pool_set_listener(g->kv, c->kv_listener, 0);
        if (g->kv_swa)
            kv_pool_set_listener(g->kv_swa, c->kv_listener, 1);
    }
    g->view_k = calloc((size_t)m->hp.n_layer, sizeof(void *));
    g->view_v = calloc((size_t)m->hp.n_layer, sizeof(void *));
    if (!rc && (!g->view_k || !g->view_v))
        rc = cerr_set(e, CERR_NOMEM, "out of memory");
    for (int l = 0, ig = 0, is = 0; !rc && l < m->hp.n_layer; l++) {
        int sw = split && m->hp.layer_swa[l];
        g->view_k[l] = sw ? g->kv_swa->k[is] : g->kv->k[ig];
        g->view_v[l] = sw ? g->kv_swa->v[is++] : g->kv->v[ig++];
    }
    g->view = (struct model_kv_view){.k = g->view_k,
                                     .v = g->view_v,
                                     .kv_dtype = c->kv_dtype,
                                     .block_size = c->block_size,
                                     .layer_dtype = g->ldt};
    namespace_root(g);
    g->max_out = S;
    if (!rc)
        rc = eng_tier_open(g, e);
    if (!rc)
        rc = eng_spec_init(g, e); /* may widen max_out */
    g->max_out += ENG_PLP_ROWS;   /* prompt scoring's rows (promptlp.c) */
    if (g->max_out > T)           /* a logits row is a token of the step */
        g->max_out = T;
    int O = g->max_out;
    if (!rc)
        rc = model_ws_new(&g->ws, m, T, O, S, g->max_blocks, e);
    if (!rc) {
        g->run = calloc((size_t)S, sizeof *g->run);
        g->rows = calloc((size_t)S, sizeof *g->rows);
        g->tokens = malloc((size_t)T * sizeof(int32_t));
        g->pos = malloc((size_t)T * sizeof(int32_t));
        g->seqv = malloc((size_t)T * sizeof(int32_t));
        g->slots = malloc((size_t)T * sizeof(int32_t));
        g->out_idx = malloc((size_t)O * sizeof(int32_t));
        g->am = malloc((size_t)O * sizeof(int32_t));
        g->can_argmax = model_can_argmax(g->m) && !env_on("CINFER_HOST_ARGMAX");
        /* bursts where a queued step runs while the host goes on (a GPU); on a backend
         * that computes it at once (the CPU) a burst would only hold each token back by a
         * step: CINFER_ENGINE_OVERLAP=1 forces them (tests), =0 turns them off */
        const char *ov = getenv("CINFER_ENGINE_OVERLAP");
        g->overlap = ov && !strcmp(ov, "1")   ? 1
                     : ov && !strcmp(ov, "0") ? 0
                                              : model_queue_async(g->m);
        eng_burst_init(g);
        g->tables = malloc((size_t)S * g->max_blocks * sizeof(int32_t));
        g->slots_swa = malloc((size_t)T * sizeof(int32_t));
        g->tables_swa = malloc((size_t)S * g->max_blocks * sizeof(int32_t));
        g->check_seqs_swa = malloc((size_t)S * sizeof *g->check_seqs_swa);
        g->logits = malloc((size_t)O * V * sizeof(float));
        g->check_seqs = malloc((size_t)S * sizeof *g->check_seqs);
        g->lsets = calloc((size_t)S, sizeof *g->lsets);
        if (!g->lsets || !g->run || !g->rows || !g->tokens || !g->pos || !g->seqv || !g->slots ||
            !g->out_idx || !g->am || !g->tables || !g->logits || !g->check_seqs || !g->slots_swa ||
            !g->tables_swa || !g->check_seqs_swa)
            rc = cerr_set(e, CERR_NOMEM, "out of memory");
    }
    if (!rc)
        rc = cands_init(g, e);
    if (!rc)
        rc = dev_sample_init(g, e);
    if (!rc && build_xtc_exempt(g))
        rc = cerr_set(e, CERR_NOMEM, "out of memory");
    if (!rc) {
        g->st.blocks_total = g->st.blocks_free = c->n_blocks;
        eng_spec_stats(g);
        if (pthread_create(&g->th, NULL, eng_main, g))
            rc = cerr_set(e, CERR_NOMEM, "engine: cannot start its thread");
        else
            g->th_started = 1;
    }
    if (rc) {
        engine_free(g);
        return rc;
    }
    *out = g;
    return 0;
}

void engine_free(struct engine *g)
{
    if (!g)
        return;
    if (g->th_started) {
        pthread_mutex_lock(&g->mu);
        g->quit = 1;
        pthread_cond_signal(&g->cv);
        pthread_mutex_unlock(&g->mu);
        pthread_join(g->th, NULL);
    }
    eng_calls_run(g); /* what was posted while it stopped */
    struct ereq *r;
    while ((r = eng_q_pop(&g->in)))
        eng_finish(g, r, ENGINE_FINISH_CANCELLED, -1);
    if (g->cand_rows || g->full_rows || g->dev_rows)
        log_info("engine: %ld rows sampled on the backend, %ld from candidates, %ld fetched "
                 "their logits",
                 g->dev_rows, g->cand_rows, g->full_rows);
    eng_tier_close(g);
    gram_vocab_free(g->gvocab);
    model_ws_free(g->ws);
    spec_free(g->spec);
    eng_burst_deinit(g);
    kv_pool_free(g->kv);
    kv_pool_free(g->kv_swa);
    free(g->view_k);
    free(g->view_v);
    free(g->ldt);
    free(g->slots_swa);
    free(g->tables_swa);
    free(g->check_seqs_swa);
    free(g->run);
    free(g->rows);
    free(g->lsets);
    free(g->tokens);
    free(g->pos);
    free(g->seqv);
    free(g->slots);
    free(g->out_idx);
    free(g->tables);
    free(g->logits);
    free(g->am);
    free(g->cands);
    free(g->samp);
    free(g->cancels);
    free(g->xtc_exempt);
    free(g->check_seqs);
    pthread_mutex_destroy(&g->mu);
    pthread_cond_destroy(&g->cv);
    pthread_cond_destroy(&g->flush_cv);
    free(g);
}
