/* serve_responses.c — POST /v1/responses (OpenAI Responses API).
 *
 * The body is mapped to an OpenAI chat body (resp_to_chat, which splices the stored
 * conversation of previous_response_id from serve_store.c), parsed with oai_parse, past
 * tool-call turns are replayed exactly (replay.h), and the generation runs through
 * serve_generate with the Responses encoder. When the turn is done (non-streaming body or
 * the final stream event) the conversation plus the assistant turn is saved in the store
 * under the response id. Errors use the OpenAI shape.
 */
#include <jansson.h>
#include <stdlib.h>
#include <string.h>

#include "api/oai_out.h"
#include "api/oai_req.h"
#include "api/replay.h"
#include "api/responses.h"
#include "api/structured/structured.h"
#include "server/serve.h"
#include "util/jsonfmt.h"

struct resp_ctx {
    struct resp_req q;
    struct oai_req rq;
    struct api_prompt pr;
    struct api_structured st; /* output_format / text.format (api/structured) */
    int saved;
};

static void ctx_free(void *p)
{
    struct resp_ctx *c = p;
    if (!c)
        return;
    resp_req_deinit(&c->q);
    oai_req_deinit(&c->rq);
    api_structured_deinit(&c->st);
    free(c->pr.ids);
    free(c->pr.forced);
    free(c);
}

/* The encoder handle seen by the job: the encoder plus the context for the store. */
struct resp_enc {
    struct resp_out *o;
    struct resp_ctx *c;
};

static int r_begin(void *enc, struct sbuf *out)
{
    return resp_out_begin(((struct resp_enc *)enc)->o, out);
}

static int r_event(void *enc, const struct engine_event *ev, struct sbuf *out)
{
    struct resp_enc *h = enc;
    int rc = resp_out_event(h->o, ev, out);
    if (!rc && ev->type == ENGINE_EV_DONE && ev->finish != ENGINE_FINISH_CANCELLED &&
        !h->c->saved && !h->c->q.no_store) {
        json_t *m = resp_out_message(h->o);
        if (m) {
            json_array_append_new(h->c->q.convo, m);
            store_put(resp_out_id(h->o), h->c->q.convo, h->c->q.instructions,
                      resp_out_object(h->o));
            h->c->saved = 1;
        }
    }
    return rc;
}

static void r_free(void *enc)
{
    struct resp_enc *h = enc;
    resp_out_free(h->o);
    free(h);
}

/* serve_gen.after: the next turn's warm-up (serve_warm.c). */
static void r_after(struct serve *sv, void *ctx, void *enc, const struct lora_set *ls)
{
    struct resp_ctx *c = ctx;
    json_t *msg = resp_out_rerendered(((struct resp_enc *)enc)->o);
    serve_warm_chat(sv, &c->rq, c->pr.thinking, c->pr.n, msg, ls);
    json_decref(msg);
}

static const struct proto_ops RESP_OPS = {.begin = r_begin,
                                          .event = r_event,
                                          .error_body = oai_error_body,
                                          .error_frame = resp_error_frame,
                                          .free = r_free};

static json_t *lookup(const char *id, void *ud)
{
    (void)ud;
    return store_get(id);
}

static void h_responses(struct http_req *r, void *ud)
{
    struct serve *sv = ud;
    struct api_error err = {0};
    struct resp_ctx *c = calloc(1, sizeof *c);
    if (!c) {
        api_fail(&err, 500, NULL, "out of memory");
        goto fail;
    }
    size_t blen;
    const char *body = http_req_body(r, &blen);
    if (resp_to_chat(body, blen, lookup, NULL, &c->q, &err))
        goto fail;
    serve_warning(r, c->q.warning);
    char *s = json_dumps_short(c->q.chat, JSON_COMPACT);
    if (!s) {
        api_fail(&err, 500, NULL, "out of memory");
        goto fail;
    }
    int rc = oai_parse(&c->rq, OAI_CHAT, s, strlen(s), &sv->defaults, sv->m->hp.n_vocab, &err);
    free(s);
    if (rc)
        goto fail;
    replay_apply(c->rq.messages);
    if (api_chat_prompt(&sv->am, &c->rq, &c->pr, &err))
        goto fail;
    if (oai_req_ban(&c->rq, c->pr.ban)) { /* tools kept under tool_choice none */
        api_fail(&err, 500, NULL, "out of memory");
        goto fail;
    }
    if (serve_structured(sv, r, api_structured_responses, &c->rq, &c->pr, &c->st, &err))
        goto fail;
    int max_tokens;
    if (serve_check_context(sv, c->pr.n, c->rq.max_tokens, sv->max_tokens_chat, &max_tokens, &err))
        goto fail;
    struct cerr e = {0};
    struct resp_enc *h = calloc(1, sizeof *h);
    if (!h) {
        api_fail(&err, 500, NULL, "out of memory");
        goto fail;
    }
    if (resp_out_new(&h->o, serve_lora_am(sv, r), &c->rq, &c->pr, sv->tc_family, c->q.echo, &e)) {
        free(h);
        api_fail(&err, e.code == CERR_NOMEM ? 500 : 400, "tools", "%s", e.msg);
        goto fail;
    }
    h->c = c;
    struct serve_gen g = {.stream = c->rq.stream,
                          .ops = &RESP_OPS,
                          .enc = h,
                          .q = serve_engine_req(&c->rq, &c->pr, &c->st, max_tokens),
                          .cleanup = ctx_free,
                          .ctx = c,
                          .after = c->st.instruction || c->rq.continue_final ? NULL : r_after};
    if (c->st.degraded)
        http_add_header(r, "Warning", API_STRUCTURED_WARNING);
    serve_generate(sv, r, &g, EP_RESPONSES);
    return;
fail:
    sv->met.requests[EP_RESPONSES]++;
    serve_reply_error(sv, r, &err, oai_error_body);
    ctx_free(c);
}

/* GET /v1/responses/{id}: the stored response object; DELETE: forget it. */
static void h_response_id(struct http_req *r, void *ud)
{
    struct serve *sv = ud;
    sv->met.requests[EP_OTHER]++;
    const char *id = http_req_path(r) + strlen("/v1/responses/");
    int del = !strcmp(http_req_method(r), "DELETE");
    json_t *v = del ? NULL : store_get(id);
    json_t *obj = json_object_get(v, "response");
    if (del ? store_del(id) == 0 : obj != NULL) {
        json_t *body = del ? json_pack("{s:s, s:s, s:b}", "id", id, "object", "response",
                                       "deleted", 1)
                           : json_incref(obj);
        json_decref(v);
        serve_reply_json(r, 200, body);
        return;
    }
    json_decref(v);
    struct api_error err;
    api_fail(&err, 404, "response_id", "response '%s' not found (expired, never stored, or deleted)",
             id);
    serve_reply_error(sv, r, &err, oai_error_body);
}

int serve_responses_install(struct serve *sv)
{
    int rc = http_route(sv->http, "POST", "/v1/responses", 0, h_responses, sv);
    rc |= http_route(sv->http, "GET", "/v1/responses/", HTTP_ROUTE_PREFIX, h_response_id, sv);
    rc |= http_route(sv->http, "DELETE", "/v1/responses/", HTTP_ROUTE_PREFIX, h_response_id, sv);
    return rc ? -1 : 0;
}
