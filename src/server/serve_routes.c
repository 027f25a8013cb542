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

static void reply_json(struct http_req *r, int status, json_t *j)
{
    char *s = j ? json_dumps_short(j, JSON_COMPACT) : NULL;
    json_decref(j);
    if (!s) {
        http_reply_error(r, 500, "out of memory");
        return;
    }
    http_reply(r, status, "application/json", s, strlen(s));
    free(s);
}

/* What an OpenAI generation keeps alive until its job ends. */
struct oai_ctx {
    struct oai_req rq;
    struct api_prompt pr;
    struct api_structured st; /* response_format & co. (api/structured) */
};

static void oai_ctx_free(void *p)
{
    struct oai_ctx *c = p;
    if (!c)
        return;
    oai_req_deinit(&c->rq);
    api_structured_deinit(&c->st);
    free(c->pr.ids);
    free(c->pr.forced);
    free(c);
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

static void generate(struct serve *sv, struct http_req *r, int kind)
{
    struct api_error err = {0};
    int ep = kind == OAI_CHAT ? EP_CHAT : EP_COMPLETIONS;
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
    int rc;
    if (kind == OAI_CHAT)
        rc = api_chat_prompt(&sv->am, &c->rq, &c->pr, &err);
    else if (c->rq.prompt_ids) { /* token ids: the prompt as given, nothing added */
        memset(&c->pr, 0, sizeof c->pr);
        c->pr.thinking = -1;
        c->pr.ids = c->rq.prompt_ids;
        c->pr.n = c->rq.n_prompt_ids;
        c->rq.prompt_ids = NULL;
        rc = 0;
    } else
        rc = api_completion_prompt(&sv->am, c->rq.prompt, c->rq.prompt_len, &c->pr, &err);
    if (rc)
        goto fail;
    if (kind == OAI_CHAT && api_structured_tools(sv->am.tc_template_family, c->rq.tools,
                                                 c->rq.tool_choice, c->rq.tool_name,
                                                 c->pr.forced, &c->st, &err))
        goto fail;
    if (api_structured_after_reasoning(&c->st, c->pr.start_in_reasoning, sv->am.think_close, &err))
        goto fail;
    int max_tokens;
    if (serve_check_context(sv, c->pr.n, c->rq.max_tokens,
                            kind == OAI_CHAT ? sv->max_tokens_chat : sv->max_tokens_raw,
                            &max_tokens, &err))
        goto fail;
    struct cerr e = {0};
    struct oai_out *enc = NULL;
    if (oai_out_new(&enc, &sv->am, &c->rq, &c->pr, sv->o.batch > 1 ? "batched" : "serial", &e)) {
        api_fail(&err, 500, NULL, "%s", e.msg);
        goto fail;
    }
    if (oai_out_tools(enc, sv->tc_family, c->rq.tools, &e)) {
        oai_out_free(enc);
        api_fail(&err, e.code == CERR_NOMEM ? 500 : 400, "tools", "%s", e.msg);
        goto fail;
    }
    struct serve_gen g = {.stream = c->rq.stream, .ops = &OAI_OPS, .enc = enc,
                          .q = {.ids = c->pr.ids, .n_ids = c->pr.n, .sp = c->rq.sp,
                                .max_tokens = max_tokens,
                                .stops = (const char *const *)c->rq.stops,
                                .n_stops = c->rq.n_stops, .grammar = c->st.grammar,
                                .grammar_prime = c->st.prime,
                                .grammar_trigger = c->st.trigger,
                                .grammar_after = c->st.trigger_after},
                          .cleanup = oai_ctx_free, .ctx = c};
    if (c->st.degraded)
        http_add_header(r, "Warning", API_STRUCTURED_WARNING);
    serve_generate(sv, r, &g, ep);
    return;
fail:
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
        reply_json(r, 200, json_incref(json_array_get(ad, 0)));
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
        reply_json(r, 200, model_entry(sv));
        return;
    }
    json_t *list = json_pack("{s:s, s:[o]}", "object", "list", "data", model_entry(sv));
    if (list)
        serve_lora_models(sv, json_object_get(list, "data"), NULL);
    reply_json(r, 200, list);
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
    reply_json(r, 200,
               json_pack("{s:s, s:s, s:s, s:[s,s,s,s,s,s,s,s,s,s,s,s,s,s,s]}", "name", "cinfer",
                         "version", CINFER_VERSION, "model", sv->model_id, "endpoints",
                         "POST /v1/chat/completions", "POST /v1/completions", "POST /v1/messages",
                         "POST /v1/messages/count_tokens", "POST /v1/responses",
                         "GET /v1/responses/{id}", "DELETE /v1/responses/{id}",
                         "POST /apply-template", "GET /server_info", "GET /model_info", "GET /v1/models",
                         "GET /v1/models/{id}",
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
