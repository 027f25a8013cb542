/* serve_routes.c — the OpenAI routes of `cinfer serve` (chat completions, completions,
 * models) and the discovery/observability routes (/health, /v1, /stats, /metrics).
 * Generations go through serve_generate (serve_jobs.c) with the OpenAI encoder.
 */
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "api/oai_out.h"
#include "api/oai_req.h"
#include "api/openai/choices.h"
#include "api/replay.h"
#include "api/structured/structured.h"
#include "api/toolcall.h"
#include "server/serve.h"
#include "util/clock.h"
#include "util/log.h"
#include "util/sbuf.h"
#include "util/version.h"
#include "util/jsonfmt.h"

/* ---- generation routes ---------------------------------------------------------------- */

/* What an OpenAI generation keeps alive until its job ends. */
struct oai_ctx {
    struct oai_req rq;
    struct api_prompt pr;
    struct api_structured st; /* response_format & co. (api/structured) */
    struct api_prompt *more;  /* completions: the prompts after the first (n_prompts - 1) */
    struct engine_req *qs;    /* several choices: one engine request each */
    const struct api_model *am; /* what the encoders echo (serve_lora_am) */
};

static void oai_ctx_free(void *p)
{
    struct oai_ctx *c = p;
    if (!c)
        return;
    for (int i = 0; c->more && i < c->rq.n_prompts - 1; i++)
        free(c->more[i].ids);
    free(c->more);
    free(c->qs);
    oai_req_deinit(&c->rq);
    api_structured_deinit(&c->st);
    free(c->pr.ids);
    free(c->pr.forced);
    free(c);
}

/* serve_gen.after of a chat completion: the next turn's warm-up (serve_warm.c). */
static void oai_after(struct serve *sv, void *ctx, void *enc, const struct lora_set *ls)
{
    struct oai_ctx *c = ctx;
    json_t *msg = oai_out_rerendered(enc);
    serve_warm_chat(sv, &c->rq, c->pr.thinking, c->pr.n, msg, ls);
    json_decref(msg);
}

static int oai_begin(void *enc, struct sbuf *out) { return oai_out_begin(enc, out); }
static int oai_event(void *enc, const struct engine_event *ev, struct sbuf *out)
{
    return oai_out_event(enc, ev, out);
}
static void oai_free(void *enc) { oai_out_free(enc); }

static const struct proto_ops OAI_OPS = {.begin = oai_begin, .event = oai_event,
                                         .error_body = oai_error_body,
                                         .error_frame = oai_error_frame, .free = oai_free};

/* Several choices (n > 1, a prompt array): the group encoder (api/openai/choices.h). */
static int multi_begin(void *enc, struct sbuf *out) { return oai_choices_begin(enc, out); }
static int multi_event_at(void *enc, int i, const struct engine_event *ev, struct sbuf *out)
{
    return oai_choices_event(enc, i, ev, out);
}
static void multi_free(void *enc) { oai_choices_free(enc); }

static const struct proto_ops OAI_MULTI_OPS = {.begin = multi_begin, .event_at = multi_event_at,
                                               .error_body = oai_error_body,
                                               .error_frame = oai_error_frame,
                                               .free = multi_free};

/* The prompt of a completions request: token ids as given (nothing added), or the text
 * tokenized. */
static int completion_prompt(struct serve *sv, const struct oai_prompt *q, struct api_prompt *pr,
                             struct api_error *err)
{
    if (q->ids) {
        memset(pr, 0, sizeof *pr);
        pr->thinking = -1;
        pr->ids = malloc((size_t)q->n_ids * sizeof *pr->ids);
        if (!pr->ids)
            return api_fail(err, 500, NULL, "out of memory");
        memcpy(pr->ids, q->ids, (size_t)q->n_ids * sizeof *pr->ids);
        pr->n = q->n_ids;
        return 0;
    }
    return api_completion_prompt(&sv->am, q->text, q->len, pr, err);
}

/* An encoder for one choice of prompt pr (text: the request's prompt text or NULL). */
static int choice_encoder(struct serve *sv, const struct oai_ctx *c, const struct oai_prompt *q,
                          const struct api_prompt *pr, struct oai_out **out,
                          struct api_error *err)
{
    struct oai_req rq = c->rq; /* shallow: the prompt's echo text */
    if (q) {
        rq.prompt = q->text;
        rq.prompt_len = q->len;
    }
    struct cerr e = {0};
    if (oai_out_new(out, c->am ? c->am : &sv->am, &rq, pr, sv->o.batch > 1 ? "batched" : "serial", &e))
        return api_fail(err, 500, NULL, "%s", e.msg);
    if (oai_out_tools(*out, sv->tc_family, c->rq.tools, &e)) {
        oai_out_free(*out);
        *out = NULL;
        return api_fail(err, e.code == CERR_NOMEM ? 500 : 400, "tools", "%s", e.msg);
    }
    return 0;
}

/* n x prompts choices: one engine request and one encoder each, in a group. On failure
 * err is filled (g untouched). */
static int multi_gen(struct serve *sv, struct oai_ctx *c, const struct engine_req *q0,
                     const int *max_tokens, struct serve_gen *g, struct api_error *err)
{
    int np = c->rq.kind == OAI_COMPLETION && c->rq.n_prompts > 1 ? c->rq.n_prompts : 1;
    int n = c->rq.best_of > c->rq.n ? c->rq.best_of : c->rq.n, total = np * n;
    c->qs = calloc((size_t)total, sizeof *c->qs);
    struct oai_out **outs = calloc((size_t)total, sizeof *outs);
    if (!c->qs || !outs) {
        free(outs);
        return api_fail(err, 500, NULL, "out of memory");
    }
    for (int i = 0; i < total; i++) {
        int p = i / n;
        const struct api_prompt *pr = p ? &c->more[p - 1] : &c->pr;
        const struct oai_prompt *op =
            c->rq.kind == OAI_COMPLETION && c->rq.prompts ? &c->rq.prompts[p] : NULL;
        if (choice_encoder(sv, c, op, pr, &outs[i], err)) {
            for (int k = 0; k < i; k++)
                oai_out_free(outs[k]);
            free(outs);
            return -1;
        }
        c->qs[i] = *q0;
        c->qs[i].ids = pr->ids;
        c->qs[i].n_ids = pr->n;
        c->qs[i].max_tokens = max_tokens[p];
        c->qs[i].sp.seed = q0->sp.seed + (uint64_t)(i % n); /* sample j: seed + j */
        if (n > c->rq.n && c->qs[i].sp.top_logprobs < 0) /* best_of ranks by logprobs */
            c->qs[i].sp.top_logprobs = 0;
    }
    struct oai_choices *grp = NULL;
    if (oai_choices_new(&grp, outs, total, n, c->rq.n, c->rq.kind, c->rq.stream,
                        c->rq.include_usage,
                        sv->am.id, sv->o.batch > 1 ? "batched" : "serial"))
        return api_fail(err, 500, NULL, "out of memory");
    g->ops = &OAI_MULTI_OPS;
    g->enc = grp;
    g->qs = c->qs;
    g->n_q = total;
    g->share_n = n;
    return 0;
}

static void generate(struct serve *sv, struct http_req *r, int kind)
{
    struct api_error err = {0};
    int ep = kind == OAI_CHAT ? EP_CHAT : EP_COMPLETIONS;
    int *mts = NULL; /* max_tokens of each prompt */
    struct oai_ctx *c = calloc(1, sizeof *c);
    if (!c) {
        api_fail(&err, 500, NULL, "out of memory");
        serve_reply_error(sv, r, &err, oai_error_body);
        return;
    }
    size_t blen;
    const char *body = http_req_body(r, &blen);
    if (oai_parse(&c->rq, kind, body, blen, &sv->defaults, sv->m->hp.n_vocab, &err))
        goto fail;
    if (api_structured_oai(c->rq.body, &c->st, &err))
        goto fail;
    if (kind == OAI_CHAT)
        replay_apply(c->rq.messages); /* prefix stability: exact text of past tool-call turns */
    if (kind == OAI_CHAT && api_structured_instruct(c->rq.messages, &c->st))
        goto fail;
    int np = kind == OAI_COMPLETION && c->rq.n_prompts > 1 ? c->rq.n_prompts : 1;
    int rc;
    if (kind == OAI_CHAT)
        rc = api_chat_prompt(&sv->am, &c->rq, &c->pr, &err);
    else
        rc = completion_prompt(sv, &c->rq.prompts[0], &c->pr, &err);
    if (rc)
        goto fail;
    if (kind == OAI_CHAT && oai_req_ban(&c->rq, c->pr.ban)) { /* tools kept under "none" */
        api_fail(&err, 500, NULL, "out of memory");
        goto fail;
    }
    if (np > 1 && !(c->more = calloc((size_t)np - 1, sizeof *c->more))) {
        api_fail(&err, 500, NULL, "out of memory");
        goto fail;
    }
    for (int p = 1; p < np; p++)
        if (completion_prompt(sv, &c->rq.prompts[p], &c->more[p - 1], &err))
            goto fail;
    if (kind == OAI_CHAT && api_structured_tools(sv->am.tc_template_family, c->rq.tools,
                                                 c->rq.tool_choice, c->rq.tool_name,
                                                 c->pr.forced, &c->st, &err))
        goto fail;
    if (api_structured_after_reasoning(&c->st, c->pr.start_in_reasoning, c->pr.thinking,
                                       kind == OAI_CHAT ? sv->am.think_open : NULL,
                                       sv->am.think_close, &err))
        goto fail;
    if (!(mts = calloc((size_t)np, sizeof *mts))) {
        api_fail(&err, 500, NULL, "out of memory");
        goto fail;
    }
    c->am = serve_lora_am(sv, r);
    for (int p = 0; p < np; p++)
        if (serve_check_context(sv, p ? c->more[p - 1].n : c->pr.n, c->rq.max_tokens,
                                kind == OAI_CHAT ? sv->max_tokens_chat : sv->max_tokens_raw,
                                &mts[p], &err))
            goto fail;
    struct engine_req q0 = serve_engine_req(&c->rq, &c->pr, &c->st, mts[0]);
    /* echo with logprobs: the prompt's tokens are scored */
    q0.prompt_logprobs = kind == OAI_COMPLETION && c->rq.echo && c->rq.legacy_logprobs;
    struct serve_gen g = {.stream = c->rq.stream, .ops = &OAI_OPS, .q = q0,
                          .cleanup = oai_ctx_free, .ctx = c};
    if (np * (c->rq.best_of > c->rq.n ? c->rq.best_of : c->rq.n) > 1) {
        if (multi_gen(sv, c, &q0, mts, &g, &err))
            goto fail;
    } else {
        struct oai_out *enc = NULL;
        if (choice_encoder(sv, c, NULL, &c->pr, &enc, &err))
            goto fail;
        g.enc = enc;
        if (kind == OAI_CHAT && !c->st.instruction && !c->rq.continue_final)
            g.after = oai_after;
    }
    free(mts);
    if (c->st.degraded)
        http_add_header(r, "Warning", API_STRUCTURED_WARNING);
    serve_generate(sv, r, &g, ep);
    return;
fail:
    free(mts);
    sv->met.requests[ep]++;
    serve_reply_error(sv, r, &err, oai_error_body);
    oai_ctx_free(c);
}

static void h_chat(struct http_req *r, void *ud) { generate(ud, r, OAI_CHAT); }
static void h_completions(struct http_req *r, void *ud) { generate(ud, r, OAI_COMPLETION); }

/* ---- discovery routes ------------------------------------------------------------------ */

/* A float flag value as the user wrote it (0.3, not 0.30000001192092896). */
static double round6(float f)
{
    char b[32];
    snprintf(b, sizeof b, "%.6g", (double)f);
    return strtod(b, NULL);
}

static json_t *model_entry(struct serve *sv)
{
    json_t *gd = json_pack("{s:f, s:f, s:i}", "temperature", round6(sv->defaults.temperature),
                           "top_p", round6(sv->defaults.top_p), "top_k", sv->defaults.top_k);
    json_t *caps = json_pack("[s]", "completions");
    if (caps && sv->tmpl)
        json_array_append_new(caps, json_string("chat"));
    if (caps && sv->tmpl)
        json_array_append_new(caps, json_string("tools"));
    if (caps && sv->am.think_open)
        json_array_append_new(caps, json_string("reasoning"));
    if (caps && sv->emb) /* --embeddings (serve_embed.c) */
        json_array_append_new(caps, json_string("embeddings"));
    int n_ctx = engine_config_of(sv->eng)->n_ctx;
    return json_pack("{s:s, s:s, s:I, s:s, s:i, s:i, s:o, s:b, s:b, s:b, s:b, s:b, s:o}", "id",
                     sv->model_id, "object", "model", "created", (json_int_t)sv->started_unix,
                     "owned_by", "cinfer", "context_window", n_ctx, "context_length", n_ctx,
                     "capabilities", caps, "reasoning", sv->am.think_open != NULL, "vision", 0,
                     "audio", 0, "chat", sv->tmpl != NULL, "tools", sv->tmpl != NULL,
                     "gen_defaults", gd);
}

static void h_models(struct http_req *r, void *ud)
{
    struct serve *sv = ud;
    sv->met.requests[EP_OTHER]++;
    const char *path = http_req_path(r);
    const char *want = strncmp(path, "/v1/models/", 11) == 0 ? path + 11 : NULL;
    json_t *ad = NULL; /* a mounted adapter's entry */
    if (want && *want && strcmp(want, sv->model_id) && (ad = json_array()) &&
        (serve_lora_models(sv, ad, want), json_array_size(ad) == 1)) {
        serve_reply_json(r, 200, json_incref(json_array_get(ad, 0)));
        json_decref(ad);
        return;
    }
    json_decref(ad);
    if (want && *want) {
        if (strcmp(want, sv->model_id)) {
            struct api_error err;
            api_fail(&err, 404, "model", "model '%s' not found; this server serves '%s'", want,
                     sv->model_id);
            err.code = "model_not_found";
            serve_reply_error(sv, r, &err, oai_error_body);
            return;
        }
        serve_reply_json(r, 200, model_entry(sv));
        return;
    }
    json_t *list = json_pack("{s:s, s:[o]}", "object", "list", "data", model_entry(sv));
    if (list)
        serve_lora_models(sv, json_object_get(list, "data"), NULL);
    serve_reply_json(r, 200, list);
}

static void h_health(struct http_req *r, void *ud)
{
    (void)ud;
    static const char body[] = "{\"status\": \"ok\"}";
    http_reply(r, 200, "application/json", body, sizeof body - 1);
}

static void h_index(struct http_req *r, void *ud)
{
    struct serve *sv = ud;
    serve_reply_json(r, 200,
               json_pack("{s:s, s:s, s:s, s:[s,s,s,s,s,s,s,s,s,s,s,s,s,s,s,s,s,s,s]}", "name",
                         "cinfer", "version", CINFER_VERSION, "model", sv->model_id, "endpoints",
                         "POST /v1/chat/completions", "POST /v1/completions", "POST /v1/messages",
                         "POST /v1/embeddings",
                         "POST /v1/messages/count_tokens", "POST /v1/responses",
                         "GET /v1/responses/{id}", "DELETE /v1/responses/{id}",
                         "POST /apply-template", "POST /tokenize", "POST /detokenize",
                         "GET /tokenizer_info", "GET /server_info", "GET /model_info",
                         "GET /v1/models", "GET /v1/models/{id}",
                         "GET /health", "GET /stats", "GET /metrics"));
}

static void h_stats(struct http_req *r, void *ud)
{
    char *s = serve_stats_json(ud);
    if (!s) {
        http_reply_error(r, 500, "out of memory");
        return;
    }
    http_reply(r, 200, "application/json", s, strlen(s));
    free(s);
}

static void h_metrics(struct http_req *r, void *ud)
{
    char *s = serve_metrics_text(ud);
    if (!s) {
        http_reply_error(r, 500, "out of memory");
        return;
    }
    http_reply(r, 200, "text/plain; version=0.0.4", s, strlen(s));
    free(s);
}

static char *error_fmt(const char *path, int status, const char *message, void *ud)
{
    struct serve *sv = ud;
    struct api_error err;
    api_fail(&err, status, NULL, "%s", message);
    if (status == 429)
        sv->met.rejected_429++;
    else if (status >= 500)
        sv->met.status_5xx++;
    else
        sv->met.status_4xx++;
    if (path && !strncmp(path, "/v1/messages", 12) && (!path[12] || path[12] == '/' || path[12] == '?'))
        return serve_anthropic_error(status, message);
    if (status == 404) {
        /* the reference's exact body */
        return strdup("{\"error\":{\"message\":\"not found\",\"type\":\"not_found_error\","
                      "\"param\":null,\"code\":null}}");
    }
    return oai_error_body(&err);
}

int serve_routes_install(struct serve *sv)
{
    struct http_server *h = sv->http;
    http_set_error_fmt(h, error_fmt, sv);
    int rc = http_route(h, "POST", "/v1/chat/completions", 0, h_chat, sv);
    rc |= http_route(h, "POST", "/v1/completions", 0, h_completions, sv);
    rc |= http_route(h, "GET", "/v1/models", 0, h_models, sv);
    rc |= http_route(h, "GET", "/v1/models/", HTTP_ROUTE_PREFIX, h_models, sv);
    rc |= http_route(h, "GET", "/health", HTTP_ROUTE_PUBLIC, h_health, sv);
    rc |= http_route(h, "GET", "/v1", 0, h_index, sv);
    rc |= http_route(h, "GET", "/stats", 0, h_stats, sv);
    rc |= http_route(h, "GET", "/metrics", 0, h_metrics, sv);
    /* tool calls: the family from the template (Hermes models, small ones above all, also
     * answer with a bare or ```json-fenced call: the generic union covers those, and with
     * declared tools an undeclared name stays content) */
    sv->tc_family = tc_family_detect(sv->tmpl_src, sv->m ? sv->m->arch_name : NULL);
    sv->am.tc_template_family = sv->tc_family; /* what tool_choice forcing writes */
    sv->am.keep_tools_on_none = sv->o.keep_tools_none;
    if (sv->tc_family == TC_HERMES)
        sv->tc_family = TC_GENERIC;
    rc |= serve_anthropic_install(sv);
    rc |= serve_responses_install(sv);
    rc |= serve_fit_install(sv);
    rc |= serve_template_install(sv);
    rc |= serve_info_install(sv);
    rc |= serve_testctl_install(sv);
    rc |= serve_lora_routes(sv);
    return rc ? -1 : 0;
}
