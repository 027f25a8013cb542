/* serve_embed.c — POST /v1/embeddings, and `cinfer serve` of an embedding-only model.
 *
 * A BERT-family directory (model/bert.h) is served for embeddings only: the encoder, its
 * tokenizer and the embedding scheduler (engine/embed.h, batching the sequences of
 * concurrent requests into forwards of up to --max-batch-tokens tokens) replace the
 * generative engine; the generation routes answer a clear 400 (they are registered before
 * the generic routes, so they win), and /v1/models, /stats, /metrics describe the encoder.
 * With a generative model loaded, /v1/embeddings answers a 400 that says what to serve.
 * Loop thread, except the scheduler's done callback (its worker thread, or the engine's
 * thread for a decoder), which only posts.
 */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>

#include "api/anthropic.h"
#include "api/embeddings/embeddings.h"
#include "api/oai_out.h"
#include "engine/embed.h"
#include "engine/engine.h"
#include "model/bert.h"
#include "model/model.h"
#include "server/serve.h"
#include "server/serve_embed.h"
#include "tokenizer/tok.h"
#include "util/clock.h"
#include "util/jsonfmt.h"

struct serve_embed {
    struct bert *m;            /* an encoder (embedding-only server), or NULL */
    struct dec_embedder *dec;  /* a decoder (--embeddings) on the engine's model: its forwards
                                  run on the engine thread, between steps (driven queue) */
    struct bert_hparams info;  /* what the API needs: n_embd, max_seq, n_vocab, pooling... */
    struct tok *tk;            /* the encoder's tokenizer (a decoder uses sv->tk) */
    const struct tok *utk;     /* the tokenizer in use */
    struct embedq *q;
    struct emb_specials sp;
    long requests, failed;
    /* calls not yet answered: freed by serve_embed_free when the loop stopped first (a
     * finish posted after http_server_stop never runs) */
    pthread_mutex_t mu;
    struct emb_call *live;
};

struct emb_call;
static void call_free(struct emb_call *c);

int serve_embed_wanted(const char *model) { return bert_is_encoder(model); }

int serve_embed_load(struct serve *sv, struct be *be)
{
    struct cerr e = {0};
    struct serve_embed *x = calloc(1, sizeof *x);
    if (!x) {
        fprintf(stderr, "cinfer serve: out of memory\n");
        return -1;
    }
    sv->emb = x;
    pthread_mutex_init(&x->mu, NULL);
    if (bert_load(&x->m, sv->o.model, be, &e)) {
        fprintf(stderr, "cinfer serve: %s\n", e.msg);
        return -1;
    }
    if (tok_load(&x->tk, sv->o.model, &e)) {
        fprintf(stderr, "cinfer serve: cannot load the tokenizer of %s: %s\n", sv->o.model,
                e.msg);
        return -1;
    }
    if (emb_specials(x->tk, &x->sp)) {
        fprintf(stderr, "cinfer serve: %s: cannot tell the tokenizer's special tokens\n",
                sv->o.model);
        return -1;
    }
    const struct bert_hparams *hp = bert_hparams(x->m);
    x->info = *hp;
    x->utk = x->tk;
    int bt = sv->o.max_batch_tokens > hp->max_seq ? sv->o.max_batch_tokens : hp->max_seq;
    struct embedq_config qc = {.max_batch_tokens = bt, .max_seqs = bt};
    struct embed_model em = {.bert = x->m, .n_embd = hp->n_embd, .max_len = hp->max_seq};
    if (embedq_new(&x->q, &em, &qc, &e)) {
        fprintf(stderr, "cinfer serve: %s\n", e.msg);
        return -1;
    }
    sv->emb_only = 1;
    return 0;
}

void serve_embed_card(struct serve *sv, double t_ready)
{
    const struct bert_hparams *hp = bert_hparams(sv->emb->m);
    static const char *pools[] = {"mean", "CLS", "last token"};
    int port = http_server_port(sv->http);
    printf("\ncinfer · serving %s for embeddings only\n", sv->model_id);
    printf("  API       http://%s:%d/v1/embeddings\n",
           !strcmp(sv->o.host, "0.0.0.0") ? "localhost" : sv->o.host, port);
    printf("  Model     BERT encoder · %d layers · %d dimensions · %s pooling%s · at most %d "
           "tokens per input%s\n",
           hp->n_layer, hp->n_embd, pools[hp->pool], hp->normalize ? " + normalize" : "",
           hp->max_seq, hp->matryoshka ? " · dimensions allowed (Matryoshka)" : "");
    printf("  Batching  up to %d tokens per encoder forward\n",
           sv->o.max_batch_tokens > hp->max_seq ? sv->o.max_batch_tokens : hp->max_seq);
    printf("  Ready     in %.1f s\n", t_ready);
}

void serve_embed_free(struct serve *sv)
{
    struct serve_embed *x = sv->emb;
    if (!x)
        return;
    embedq_free(x->q); /* finishes queued jobs (their posts are dropped once stopped) */
    while (x->live) /* answered never: the loop stopped before their finish ran */
        call_free(x->live);
    pthread_mutex_destroy(&x->mu);
    tok_free(x->tk);
    bert_free(x->m);
    dec_embedder_free(x->dec);
    free(x);
    sv->emb = NULL;
}

int serve_embed_flag(struct serve_opts *o, const char *a, const char *v)
{
    if (strcmp(a, "--embeddings"))
        return 0;
    if (v && !strcmp(v, "last"))
        o->embed_pool = 1;
    else if (v && !strcmp(v, "mean"))
        o->embed_pool = 2;
    else {
        fprintf(stderr, "cinfer serve: --embeddings expects last|mean, got '%s'\n",
                v ? v : "");
        return -1;
    }
    return 1;
}

#define DEC_MAX_LEN 2048 /* longest input of decoder embeddings (its F32 KV is private) */

static void wake_engine(void *ud) { engine_side_wake(ud); }
static int run_on_engine(void *ud) { return embedq_run_once(ud); }

int serve_embed_decoder(struct serve *sv)
{
    if (!sv->o.embed_pool)
        return 0;
    struct cerr e = {0};
    struct serve_embed *x = calloc(1, sizeof *x);
    if (!x) {
        fprintf(stderr, "cinfer serve: out of memory\n");
        return -1;
    }
    sv->emb = x;
    pthread_mutex_init(&x->mu, NULL);
    int pool = sv->o.embed_pool == 1 ? BERT_POOL_LAST : BERT_POOL_MEAN;
    int ctx = sv->m->hp.n_ctx_train > 0 ? sv->m->hp.n_ctx_train : DEC_MAX_LEN;
    int max_len = ctx < DEC_MAX_LEN ? ctx : DEC_MAX_LEN;
    /* the engine's model and backend; its own small workspace and F32 KV, used on the
     * engine thread only (engine_set_side below) */
    if (dec_embedder_new(&x->dec, sv->m, pool, 1, max_len, &e)) {
        fprintf(stderr, "cinfer serve: --embeddings: %s\n", e.msg);
        return -1;
    }
    if (emb_specials(sv->tk, &x->sp)) {
        fprintf(stderr, "cinfer serve: --embeddings: cannot tell the tokenizer's special "
                        "tokens\n");
        return -1;
    }
    x->utk = sv->tk;
    x->info = (struct bert_hparams){.n_embd = sv->m->hp.n_embd, .n_vocab = sv->m->hp.n_vocab,
                                    .max_seq = max_len, .pool = pool, .normalize = 1};
    struct embed_model em = {.dec = x->dec, .n_embd = x->info.n_embd, .max_len = max_len};
    struct embedq_config qc = {.max_batch_tokens = max_len, .max_seqs = 64,
                               .wake = wake_engine, .wake_ud = sv->eng};
    if (embedq_new(&x->q, &em, &qc, &e)) {
        fprintf(stderr, "cinfer serve: --embeddings: %s\n", e.msg);
        return -1;
    }
    engine_set_side(sv->eng, run_on_engine, x->q);
    fprintf(stderr, "cinfer serve: POST /v1/embeddings: %s pooling of the final hidden states "
                    "(%d dimensions, normalized, at most %d tokens per input)\n",
            pool == BERT_POOL_LAST ? "last-token" : "mean", x->info.n_embd, max_len);
    return 0;
}

/* ---- POST /v1/embeddings ------------------------------------------------------------ */

struct emb_call {
    struct emb_call *prev, *next; /* the live calls (serve_embed.live, under mu) */
    struct embed_job j;
    struct emb_req rq;
    struct serve *sv;
    struct http_req *r;
    float *out;
    int dims, renorm;
};

static void call_free(struct emb_call *c)
{
    struct serve_embed *x = c->sv->emb;
    pthread_mutex_lock(&x->mu);
    if (c->prev)
        c->prev->next = c->next;
    else if (x->live == c)
        x->live = c->next;
    if (c->next)
        c->next->prev = c->prev;
    pthread_mutex_unlock(&x->mu);
    emb_req_deinit(&c->rq);
    free(c->out);
    free(c);
}

int serve_embed_pending(struct serve *sv)
{
    struct serve_embed *x = sv->emb;
    if (!x || sv->cancelled_all) /* a shutdown does not wait for them */
        return 0;
    pthread_mutex_lock(&x->mu);
    int n = x->live != NULL;
    pthread_mutex_unlock(&x->mu);
    return n;
}

static void reply_err(struct serve *sv, struct http_req *r, struct api_error *err)
{
    serve_reply_error(sv, r, err, oai_error_body);
}

/* Loop thread: the job is done; answer. */
static void finish(void *ud)
{
    struct emb_call *c = ud;
    struct serve *sv = c->sv;
    if (c->j.cancelled) {
        /* the client went away (on_close): nothing to answer */
    } else if (c->j.status) {
        struct api_error err;
        api_fail(&err, 500, NULL, "embedding failed: %s", c->j.error);
        sv->emb->failed++;
        reply_err(sv, c->r, &err);
    } else {
        const struct bert_hparams *hp = &sv->emb->info;
        char *body = emb_response(&c->rq, c->out, hp->n_embd, c->dims, c->renorm, sv->model_id);
        if (body)
            http_reply(c->r, 200, "application/json", body, strlen(body));
        else
            http_reply_error(c->r, 500, "out of memory");
        free(body);
    }
    http_req_unref(c->r);
    call_free(c);
    if (sv->shutting_down && !sv->jobs && !serve_embed_pending(sv)) /* a drain's last one */
        http_server_stop(sv->http);
}

/* Worker thread: hand the result to the loop (dropped when it is stopping: the server
 * frees the request itself then). */
static void job_done(struct embed_job *j, void *ud)
{
    (void)j;
    struct emb_call *c = ud;
    if (http_post(c->sv->http, finish, c))
        call_free(c);
}

/* Loop thread: the client went away; its inputs not yet computed are dropped (the job still
 * ends through job_done -> finish, which frees it). */
static void on_close(struct http_req *r, void *ud)
{
    (void)r;
    struct emb_call *c = ud;
    c->sv->met.disconnects++;
    embedq_cancel(c->sv->emb->q, &c->j);
}

static void h_embeddings(struct http_req *r, void *ud)
{
    struct serve *sv = ud;
    struct api_error err = {0};
    sv->met.requests[EP_OTHER]++;
    if (!sv->emb) {
        api_fail(&err, 400, "model",
                 "model '%s' is a generative model served without --embeddings: start the "
                 "server with --embeddings last|mean to pool its hidden states, or serve an "
                 "embedding model (a BERT-family directory such as all-MiniLM-L6-v2: "
                 "scripts/fetch_models.sh all-minilm-l6-v2)",
                 sv->model_id);
        err.code = "model_not_supported";
        reply_err(sv, r, &err);
        return;
    }
    struct serve_embed *x = sv->emb;
    const struct bert_hparams *hp = &x->info;
    struct emb_call *c = calloc(1, sizeof *c);
    if (!c) {
        http_reply_error(r, 500, "out of memory");
        return;
    }
    c->sv = sv;
    pthread_mutex_lock(&x->mu);
    c->next = x->live;
    if (x->live)
        x->live->prev = c;
    x->live = c;
    pthread_mutex_unlock(&x->mu);
    size_t blen;
    const char *body = http_req_body(r, &blen);
    if (emb_parse(&c->rq, body, blen, &err))
        goto fail;
    c->dims = hp->n_embd;
    if (c->rq.dimensions && c->rq.dimensions != hp->n_embd) {
        if (!hp->matryoshka) {
            api_fail(&err, 400, "dimensions",
                     "model '%s' does not support dimensions: it was not trained for "
                     "truncation (Matryoshka); omit dimensions or pass %d",
                     sv->model_id, hp->n_embd);
            goto fail;
        }
        if (c->rq.dimensions > hp->n_embd) {
            api_fail(&err, 400, "dimensions", "dimensions must be at most %d for model '%s'",
                     hp->n_embd, sv->model_id);
            goto fail;
        }
        c->dims = c->rq.dimensions;
        c->renorm = hp->normalize;
    }
    if (emb_tokenize(&c->rq, x->utk, &x->sp, hp->n_vocab, hp->max_seq, &err))
        goto fail;
    c->out = calloc((size_t)c->rq.n_in * (size_t)hp->n_embd, sizeof *c->out);
    if (!c->out) {
        api_fail(&err, 500, NULL, "out of memory");
        goto fail;
    }
    c->j = (struct embed_job){.n_seq = c->rq.n_in, .ids = (const int32_t *const *)c->rq.ids,
                              .lens = c->rq.lens, .out = c->out, .done = job_done, .ud = c};
    c->r = r;
    http_req_ref(r);
    if (sv->shutting_down || embedq_submit(x->q, &c->j)) {
        http_req_unref(r);
        api_fail(&err, 503, NULL, "the server is shutting down");
        goto fail;
    }
    x->requests++;
    sv->met.prompt_tokens += c->rq.n_tokens;
    http_req_on_close(r, on_close, c);
    return;
fail:
    reply_err(sv, r, &err);
    call_free(c);
}

/* ---- the routes of an embedding-only server ------------------------------------------ */

static void h_refuse(struct http_req *r, void *ud)
{
    struct serve *sv = ud;
    char msg[512];
    snprintf(msg, sizeof msg,
             "model '%s' is an embedding model: it serves only POST /v1/embeddings and cannot "
             "generate text",
             sv->model_id);
    const char *path = http_req_path(r);
    if (!strncmp(path, "/v1/messages", 12)) {
        sv->met.status_4xx++;
        char *b = serve_anthropic_error(400, msg);
        http_reply(r, 400, "application/json", b ? b : "{}", b ? strlen(b) : 2);
        free(b);
        return;
    }
    struct api_error err;
    api_fail(&err, 400, "model", "%s", msg);
    err.code = "model_not_supported";
    reply_err(sv, r, &err);
}

static json_t *model_entry(struct serve *sv)
{
    const struct bert_hparams *hp = &sv->emb->info;
    return json_pack("{s:s, s:s, s:I, s:s, s:i, s:i, s:[s], s:i, s:b, s:b, s:b}", "id",
                     sv->model_id, "object", "model", "created", (json_int_t)sv->started_unix,
                     "owned_by", "cinfer", "context_window", hp->max_seq, "context_length",
                     hp->max_seq, "capabilities", "embeddings", "embedding_dimensions",
                     hp->n_embd, "chat", 0, "tools", 0, "reasoning", 0);
}

static void h_models(struct http_req *r, void *ud)
{
    struct serve *sv = ud;
    sv->met.requests[EP_OTHER]++;
    const char *path = http_req_path(r);
    const char *want = !strncmp(path, "/v1/models/", 11) ? path + 11 : NULL;
    if (want && *want) {
        if (strcmp(want, sv->model_id)) {
            struct api_error err;
            api_fail(&err, 404, "model", "model '%s' not found; this server serves '%s'", want,
                     sv->model_id);
            err.code = "model_not_found";
            reply_err(sv, r, &err);
            return;
        }
        serve_reply_json(r, 200, model_entry(sv));
        return;
    }
    serve_reply_json(r, 200, json_pack("{s:s, s:[o]}", "object", "list", "data", model_entry(sv)));
}

/* The "embeddings" object of /stats. */
static json_t *emb_counts(struct serve_embed *x)
{
    struct embed_stats st;
    embedq_stats(x->q, &st);
    return json_pack("{s:I, s:I, s:I, s:I, s:I, s:i, s:I, s:I}", "requests",
                     (json_int_t)x->requests, "failed", (json_int_t)x->failed, "inputs",
                     (json_int_t)st.seqs, "tokens", (json_int_t)st.tokens, "forwards",
                     (json_int_t)st.forwards, "max_inputs_in_forward", st.max_seqs_in_forward,
                     "jobs", (json_int_t)st.jobs, "cancelled_inputs",
                     (json_int_t)st.cancelled_seqs);
}

static json_t *stats_json(struct serve *sv)
{
    return json_pack("{s:s, s:s, s:f, s:o}", "model", sv->model_id, "kind", "embeddings",
                     "uptime_s", clock_now_s() - sv->started_s, "embeddings",
                     emb_counts(sv->emb));
}

void serve_embed_stats_json(struct serve *sv, json_t *j)
{
    if (sv->emb && sv->emb->q)
        json_object_set_new(j, "embeddings", emb_counts(sv->emb));
}

static void h_stats(struct http_req *r, void *ud) { serve_reply_json(r, 200, stats_json(ud)); }

static void h_metrics(struct http_req *r, void *ud)
{
    struct serve *sv = ud;
    struct embed_stats st;
    embedq_stats(sv->emb->q, &st);
    char b[1024];
    int n = snprintf(b, sizeof b,
                     "# TYPE cinfer_embedding_requests_total counter\n"
                     "cinfer_embedding_requests_total %ld\n"
                     "# TYPE cinfer_embedding_inputs_total counter\n"
                     "cinfer_embedding_inputs_total %ld\n"
                     "# TYPE cinfer_embedding_tokens_total counter\n"
                     "cinfer_embedding_tokens_total %ld\n"
                     "# TYPE cinfer_embedding_forwards_total counter\n"
                     "cinfer_embedding_forwards_total %ld\n",
                     sv->emb->requests, st.seqs, st.tokens, st.forwards);
    http_reply(r, 200, "text/plain; version=0.0.4", b, (size_t)n);
}

int serve_embed_install(struct serve *sv)
{
    struct http_server *h = sv->http;
    int rc = http_route(h, "POST", "/v1/embeddings", 0, h_embeddings, sv);
    if (!sv->emb_only)
        return rc ? -1 : 0;
    static const char *gen_routes[] = {"/v1/chat/completions", "/v1/completions",
                                       "/v1/messages",         "/v1/messages/count_tokens",
                                       "/v1/responses",        "/apply-template",
                                       "/admin/cache/flush"};
    for (size_t i = 0; i < sizeof gen_routes / sizeof gen_routes[0]; i++)
        rc |= http_route(h, "POST", gen_routes[i], 0, h_refuse, sv);
    rc |= http_route(h, "GET", "/fit", 0, h_refuse, sv);
    rc |= http_route(h, "GET", "/v1/models", 0, h_models, sv);
    rc |= http_route(h, "GET", "/v1/models/", HTTP_ROUTE_PREFIX, h_models, sv);
    rc |= http_route(h, "GET", "/stats", 0, h_stats, sv);
    rc |= http_route(h, "GET", "/metrics", 0, h_metrics, sv);
    return rc ? -1 : 0;
}
