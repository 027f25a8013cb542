/* serve_anthropic.c — POST /v1/messages and /v1/messages/count_tokens (Anthropic).
 *
 * The body is mapped to an OpenAI chat body (anth_to_chat), parsed with oai_parse (shared
 * validation), past tool-call turns are replayed exactly (replay.h), the prompt is rendered
 * and the generation runs through serve_generate with the Anthropic encoder. Every error
 * is {"type":"error","error":{type,message}}.
 */
#include <jansson.h>
#include <stdlib.h>
#include <string.h>

#include "api/anthropic.h"
#include "api/oai_req.h"
#include "api/replay.h"
#include "api/structured/structured.h"
#include "server/serve.h"
#include "util/jsonfmt.h"

struct anth_ctx {
    struct oai_req rq;
    struct api_prompt pr;
    struct api_structured st; /* output_format / text.format (api/structured) */
};

static void ctx_free(void *p)
{
    struct anth_ctx *c = p;
    if (!c)
        return;
    oai_req_deinit(&c->rq);
    api_structured_deinit(&c->st);
    free(c->pr.ids);
    free(c->pr.forced);
    free(c);
}

static int a_begin(void *enc, struct sbuf *out)
{
    return anth_out_begin(enc, out);
}
static int a_event(void *enc, const struct engine_event *ev, struct sbuf *out)
{
    return anth_out_event(enc, ev, out);
}
static void a_free(void *enc)
{
    anth_out_free(enc);
}

/* serve_gen.after: the next turn's warm-up (serve_warm.c). */
static void a_after(struct serve *sv, void *ctx, void *enc, const struct lora_set *ls)
{
    struct anth_ctx *c = ctx;
    json_t *msg = anth_out_rerendered(enc);
    serve_warm_chat(sv, &c->rq, c->pr.thinking, c->pr.n, msg, ls);
    json_decref(msg);
}

static const struct proto_ops ANTH_OPS = {.begin = a_begin,
                                          .event = a_event,
                                          .error_body = anth_error_body,
                                          .error_frame = anth_error_frame,
                                          .free = a_free};

char *serve_anthropic_error(int status, const char *message)
{
    struct api_error err;
    api_fail(&err, status, NULL, "%s", message);
    return anth_error_body(&err);
}

/* Body -> parsed request with the prompt built. 0, or -1 with err filled. */
static int prepare(struct serve *sv, struct http_req *r, int for_count, struct anth_ctx *c,
                   struct api_error *err)
{
    size_t blen;
    const char *body = http_req_body(r, &blen);
    json_t *chat;
    char warn[256];
    if (anth_to_chat(body, blen, for_count, &chat, warn, sizeof warn, err))
        return -1;
    serve_warning(r, warn);
    char *s = json_dumps_short(chat, JSON_COMPACT);
    json_decref(chat);
    if (!s)
        return api_fail(err, 500, NULL, "out of memory");
    int rc = oai_parse(&c->rq, OAI_CHAT, s, strlen(s), &sv->defaults, sv->m->hp.n_vocab, err);
    free(s);
    if (rc)
        return -1;
    replay_apply(c->rq.messages);
    if (api_chat_prompt(&sv->am, &c->rq, &c->pr, err))
        return -1;
    if (oai_req_ban(&c->rq, c->pr.ban)) /* tools kept under tool_choice none */
        return api_fail(err, 500, NULL, "out of memory");
    return 0;
}

static void h_messages(struct http_req *r, void *ud)
{
    struct serve *sv = ud;
    struct api_error err = {0};
    struct anth_ctx *c = calloc(1, sizeof *c);
    if (!c) {
        api_fail(&err, 500, NULL, "out of memory");
        goto fail;
    }
    if (prepare(sv, r, 0, c, &err))
        goto fail;
    if (serve_structured(sv, r, api_structured_anthropic, &c->rq, &c->pr, &c->st, &err))
        goto fail;
    int max_tokens;
    if (serve_check_context(sv, c->pr.n, c->rq.max_tokens, sv->max_tokens_chat, &max_tokens, &err))
        goto fail;
    struct cerr e = {0};
    struct anth_out *enc = NULL;
    if (anth_out_new(&enc, serve_lora_am(sv, r), &c->rq, &c->pr, sv->tc_family, &e)) {
        api_fail(&err, e.code == CERR_NOMEM ? 500 : 400, "tools", "%s", e.msg);
        goto fail;
    }
    struct serve_gen g = {.stream = c->rq.stream,
                          .ops = &ANTH_OPS,
                          .enc = enc,
                          .q = serve_engine_req(&c->rq, &c->pr, &c->st, max_tokens),
                          .cleanup = ctx_free,
                          .ctx = c,
                          .after = c->st.instruction || c->rq.continue_final ? NULL : a_after};
    if (c->st.degraded)
        http_add_header(r, "Warning", API_STRUCTURED_WARNING);
    serve_generate(sv, r, &g, EP_MESSAGES);
    return;
fail:
    sv->met.requests[EP_MESSAGES]++;
    serve_reply_error(sv, r, &err, anth_error_body);
    ctx_free(c);
}

static void h_count(struct http_req *r, void *ud)
{
    struct serve *sv = ud;
    struct api_error err = {0};
    sv->met.requests[EP_OTHER]++;
    struct anth_ctx *c = calloc(1, sizeof *c);
    if (!c) {
        api_fail(&err, 500, NULL, "out of memory");
        serve_reply_error(sv, r, &err, anth_error_body);
        return;
    }
    if (prepare(sv, r, 1, c, &err)) {
        serve_reply_error(sv, r, &err, anth_error_body);
        ctx_free(c);
        return;
    }
    json_t *j = json_pack("{s:i}", "input_tokens", c->pr.n);
    ctx_free(c);
    serve_reply_json(r, 200, j);
}

int serve_anthropic_install(struct serve *sv)
{
    int rc = http_route(sv->http, "POST", "/v1/messages", 0, h_messages, sv);
    rc |= http_route(sv->http, "POST", "/v1/messages/count_tokens", 0, h_count, sv);
    return rc ? -1 : 0;
}
