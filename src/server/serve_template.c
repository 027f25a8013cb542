/* serve_template.c — POST /apply-template: the prompt text a chat body renders to.
 *
 * The body is a chat completions body (messages, tools, chat_template_kwargs,
 * enable_thinking / reasoning_effort; other fields are parsed and checked as
 * /v1/chat/completions does, then ignored). The messages are normalised and past tool-call
 * turns replayed exactly, as for a generation, and rendered with the served model's chat
 * template and add_generation_prompt. Answers {"prompt": TEXT}; nothing runs on the model.
 * Not included: what a request's tool_choice "required"/named function or a final assistant
 * message (continue_final_message) would append after the template's text. Errors use the
 * OpenAI shape (400 "prompt build failed: ..." for a template error).
 */
#include <jansson.h>
#include <stdlib.h>
#include <string.h>

#include "api/oai_out.h"
#include "api/oai_req.h"
#include "api/prompt.h"
#include "api/replay.h"
#include "server/serve.h"
#include "util/jsonfmt.h"

static void h_apply(struct http_req *r, void *ud)
{
    struct serve *sv = ud;
    struct api_error err = {0};
    struct oai_req rq;
    size_t blen;
    const char *body = http_req_body(r, &blen);
    sv->met.requests[EP_OTHER]++;
    if (oai_parse(&rq, OAI_CHAT, body, blen, &sv->defaults, sv->m->hp.n_vocab, &err)) {
        serve_reply_error(sv, r, &err, oai_error_body);
        return;
    }
    replay_apply(rq.messages);
    int thinking = rq.thinking >= 0 ? rq.thinking : sv->am.default_thinking;
    char *text = NULL;
    size_t tl = 0;
    if (api_chat_render(&sv->am, rq.messages, rq.tools, rq.template_kwargs, thinking, &text, &tl,
                        &err)) {
        oai_req_deinit(&rq);
        serve_reply_error(sv, r, &err, oai_error_body);
        return;
    }
    oai_req_deinit(&rq);
    json_t *o = json_pack("{s:o}", "prompt", json_stringn(text, tl)); /* NULs kept */
    free(text);
    char *out = o ? json_dumps_short(o, JSON_COMPACT) : NULL;
    json_decref(o);
    if (!out) {
        http_reply_error(r, 500, "out of memory");
        return;
    }
    http_reply(r, 200, "application/json", out, strlen(out));
    free(out);
}

int serve_template_install(struct serve *sv)
{
    return http_route(sv->http, "POST", "/apply-template", 0, h_apply, sv) ? -1 : 0;
}
