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
#include "server/serve.h"
#include "util/jsonfmt.h"

struct resp_ctx {
    struct resp_req q;
    struct oai_req rq;
    struct api_prompt pr;
    int saved;
};

static void ctx_free(void *p)
{
    struct resp_ctx *c = p;
    if (!c)
        return;
    resp_req_deinit(&c->q);
    oai_req_deinit(&c->rq);
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
            store_put(resp_out_id(h->o), h->c->q.convo, h->c->q.instructions);
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
    int max_tokens;
    if (serve_check_context(sv, c->pr.n, c->rq.max_tokens, sv->max_tokens_chat, &max_tokens, &err))
        goto fail;
    struct cerr e = {0};
    struct resp_enc *h = calloc(1, sizeof *h);
    if (!h) {
        api_fail(&err, 500, NULL, "out of memory");
        goto fail;
    }
    if (resp_out_new(&h->o, &sv->am, &c->rq, &c->pr, sv->tc_family, c->q.echo, &e)) {
        free(h);
        api_fail(&err, e.code == CERR_NOMEM ? 500 : 400, "tools", "%s", e.msg);
        goto fail;
    }
    h->c = c;
    struct serve_gen g = {.stream = c->rq.stream,
                          .ops = &RESP_OPS,
                          .enc = h,
                          .q = {.ids = c->pr.ids,
                                .n_ids = c->pr.n,
                                .sp = c->rq.sp,
                                .max_tokens = max_tokens,
                                .stops = (const char *const *)c->rq.stops,
                                .n_stops = c->rq.n_stops},
                          .cleanup = ctx_free,
                          .ctx = c};
    serve_generate(sv, r, &g, EP_RESPONSES);
    return;
fail:
    sv->met.requests[EP_RESPONSES]++;
    serve_reply_error(sv, r, &err, oai_error_body);
    ctx_free(c);
}

int serve_responses_install(struct serve *sv)
{
    return http_route(sv->http, "POST", "/v1/responses", 0, h_responses, sv) ? -1 : 0;
}
