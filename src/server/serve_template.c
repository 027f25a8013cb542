/* serve_template.c — POST /apply-template: the prompt text a chat body renders to; and
 * vLLM's tokenizer routes, which evaluation harnesses use as a remote tokenizer
 * (lm-evaluation-harness tokenizer_backend=remote): POST /tokenize {prompt,
 * add_special_tokens (default true)} or {messages, ...a chat body} -> {count, max_model_len,
 * tokens, token_strs: null}; POST /detokenize {tokens} -> {prompt}; GET /tokenizer_info ->
 * {tokenizer_class, bos_token, eos_token, pad_token, chat_template, model_max_length}.
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
    serve_reply_json(r, 200, o);
}

/* ---- the tokenizer routes ------------------------------------------------------------ */

static void bad(struct serve *sv, struct http_req *r, const char *param, const char *msg)
{
    struct api_error err;
    api_fail(&err, 400, param, "%s", msg);
    serve_reply_error(sv, r, &err, oai_error_body);
}

/* A token's text, or null. */
static json_t *tok_text(const struct tok *tk, int32_t id)
{
    const char *p = id >= 0 ? tok_piece(tk, id) : NULL;
    return p ? json_string(p) : json_null();
}

static void h_tokenize(struct http_req *r, void *ud)
{
    struct serve *sv = ud;
    size_t blen;
    const char *body = http_req_body(r, &blen);
    sv->met.requests[EP_OTHER]++;
    json_t *o = json_loadb(body, blen, JSON_ALLOW_NUL, NULL);
    if (!json_is_object(o)) {
        json_decref(o);
        bad(sv, r, NULL, "invalid JSON body");
        return;
    }
    struct api_error err = {0};
    struct api_prompt pr = {0};
    int rc;
    json_t *p = json_object_get(o, "prompt");
    int want_strs = json_is_true(json_object_get(o, "return_token_strs"));
    const char *no = NULL; /* a chat field cinfer cannot honour (400, never ignored) */
    if (json_is_false(json_object_get(o, "add_generation_prompt")))
        no = "add_generation_prompt";
    else if (json_is_true(json_object_get(o, "continue_final_message")))
        no = "continue_final_message";
    if (no && json_object_get(o, "messages")) {
        json_decref(o);
        bad(sv, r, no, !strcmp(no, "add_generation_prompt")
                           ? "add_generation_prompt: only true is supported (the prompt a "
                             "generation prefills)"
                           : "continue_final_message: only false is supported");
        return;
    }
    if (json_object_get(o, "messages")) { /* a chat body: the template's prompt */
        struct oai_req rq;
        rc = oai_parse(&rq, OAI_CHAT, body, blen, &sv->defaults, sv->m->hp.n_vocab, &err);
        if (!rc) {
            replay_apply(rq.messages);
            rc = api_chat_prompt(&sv->am, &rq, &pr, &err);
            oai_req_deinit(&rq);
        }
    } else if (json_is_array(p) && json_array_size(p) > 0) { /* token ids, as they are */
        size_t n = json_array_size(p);
        rc = 0;
        if (!(pr.ids = malloc(n * sizeof *pr.ids)))
            rc = api_fail(&err, 500, NULL, "out of memory");
        for (size_t i = 0; !rc && i < n; i++) {
            json_t *x = json_array_get(p, i);
            if (!json_is_integer(x) || json_integer_value(x) < 0 ||
                json_integer_value(x) >= sv->m->hp.n_vocab)
                rc = api_fail(&err, 400, "prompt", "prompt[%zu] is not a token id of the "
                              "vocabulary [0, %d)", i, sv->m->hp.n_vocab);
            else
                pr.ids[i] = (int32_t)json_integer_value(x);
        }
        pr.n = rc ? 0 : (int)n;
    } else if (json_is_string(p)) {
        json_t *as = json_object_get(o, "add_special_tokens");
        int flags = as && json_is_false(as) ? 0 : TOK_ADD_SPECIAL;
        struct cerr e = {0};
        rc = tok_encode(sv->tk, json_string_value(p), json_string_length(p), flags, &pr.ids,
                        &pr.n, &e);
        if (rc)
            api_fail(&err, 400, "prompt", "%s", e.msg);
    } else {
        json_decref(o);
        bad(sv, r, "prompt", "prompt (a string) or messages is required");
        return;
    }
    json_decref(o);
    if (rc) {
        serve_reply_error(sv, r, &err, oai_error_body);
        free(pr.ids);
        free(pr.forced);
        return;
    }
    json_t *a = json_array();
    for (int i = 0; a && i < pr.n; i++)
        json_array_append_new(a, json_integer(pr.ids[i]));
    json_t *strs = json_null();
    if (want_strs) { /* the vocabulary pieces, as vLLM's convert_ids_to_tokens gives them */
        strs = json_array();
        for (int i = 0; strs && i < pr.n; i++)
            json_array_append_new(strs, tok_text(sv->tk, pr.ids[i]));
    }
    free(pr.ids);
    free(pr.forced);
    serve_reply_json(r, 200, json_pack("{s:i, s:i, s:o, s:o}", "count", pr.n, "max_model_len",
                       engine_config_of(sv->eng)->n_ctx, "tokens", a, "token_strs", strs));
}

static void h_detokenize(struct http_req *r, void *ud)
{
    struct serve *sv = ud;
    size_t blen;
    const char *body = http_req_body(r, &blen);
    sv->met.requests[EP_OTHER]++;
    json_t *o = json_loadb(body, blen, 0, NULL);
    json_t *t = json_object_get(o, "tokens");
    size_t n = json_array_size(t);
    int32_t *ids = malloc((n ? n : 1) * sizeof *ids);
    const char *why = !json_is_array(t) ? "tokens (an array of token ids) is required" : NULL;
    for (size_t i = 0; !why && ids && i < n; i++) {
        json_t *x = json_array_get(t, i);
        if (!json_is_integer(x) || json_integer_value(x) < 0 ||
            json_integer_value(x) >= sv->m->hp.n_vocab)
            why = "tokens must be token ids of the vocabulary";
        else
            ids[i] = (int32_t)json_integer_value(x);
    }
    json_decref(o);
    if (why || !ids) {
        free(ids);
        if (why)
            bad(sv, r, "tokens", why);
        else
            http_reply_error(r, 500, "out of memory");
        return;
    }
    char *text = NULL;
    size_t tl = 0;
    struct cerr e = {0};
    int rc = tok_decode(sv->tk, ids, (int)n, 0, &text, &tl, &e);
    free(ids);
    if (rc) {
        bad(sv, r, "tokens", e.msg);
        return;
    }
    serve_reply_json(r, 200, json_pack("{s:o}", "prompt", api_json_text(text, tl)));
    free(text);
}


static void h_tokenizer_info(struct http_req *r, void *ud)
{
    struct serve *sv = ud;
    sv->met.requests[EP_OTHER]++;
    serve_reply_json(r, 200, json_pack("{s:s, s:o, s:o, s:o, s:o, s:i}", "tokenizer_class", "cinfer", "bos_token",
                       tok_text(sv->tk, tok_bos(sv->tk)), "eos_token",
                       tok_text(sv->tk, tok_eos(sv->tk)), "pad_token", json_null(),
                       "chat_template", sv->tmpl_src ? json_string(sv->tmpl_src) : json_null(),
                       "model_max_length", engine_config_of(sv->eng)->n_ctx));
}

int serve_template_install(struct serve *sv)
{
    int rc = http_route(sv->http, "POST", "/apply-template", 0, h_apply, sv);
    rc |= http_route(sv->http, "POST", "/tokenize", 0, h_tokenize, sv);
    rc |= http_route(sv->http, "POST", "/detokenize", 0, h_detokenize, sv);
    rc |= http_route(sv->http, "GET", "/tokenizer_info", 0, h_tokenizer_info, sv);
    return rc ? -1 : 0;
}
