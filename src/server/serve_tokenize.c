/* serve_tokenize.c — the routes routers and gateways call besides generation:
 *
 * POST /tokenize, POST /detokenize — vLLM's shapes. A body with `messages` is a chat body
 *   (parsed and checked as /v1/chat/completions parses it, its past tool-call turns replayed,
 *   rendered with the chat template and add_generation_prompt, tokenized as a generation's
 *   prompt is); a body with `prompt` (a string, or token ids taken as they are) is a
 *   completion prompt (BOS as the tokenizer adds it). The answer is the ids a generation of
 *   the same body would prefill, so a KV-aware router (vllm-router's kv_aware policy) hashes
 *   the blocks the engine stores and publishes (--kv-events):
 *   {"count", "max_model_len", "tokens", "token_strs"} (token_strs with
 *   "return_token_strs": true, else null). `add_generation_prompt: false` and
 *   `add_special_tokens` other than the route's own rule are refused with a 400 naming the
 *   field (cinfer cannot honour them), never ignored. /detokenize {"tokens": [ids]} answers
 *   {"prompt": TEXT}; an id outside the vocabulary is a 400.
 * GET /server_info, /get_server_info, /model_info, /get_model_info — SGLang's probes, which
 *   sglang-router's gateway reads for the model path, context length and parallel sizes.
 * Errors use the OpenAI shape. Loop thread only; nothing runs on the model.
 */
#include <jansson.h>
#include <stdlib.h>
#include <string.h>

#include "api/oai_out.h"
#include "api/oai_req.h"
#include "api/prompt.h"
#include "api/replay.h"
#include "engine/engine.h"
#include "model/model.h"
#include "server/serve.h"
#include "util/jsonfmt.h"
#include "util/version.h"

static void reply_obj(struct http_req *r, json_t *o)
{
    char *out = o ? json_dumps_short(o, JSON_COMPACT) : NULL;
    json_decref(o);
    if (!out) {
        http_reply_error(r, 500, "out of memory");
        return;
    }
    http_reply(r, 200, "application/json", out, strlen(out));
    free(out);
}

/* A boolean field that must hold `want` when present: 0, or 400 naming it. */
static int need_bool(const json_t *body, const char *key, int want, const char *why,
                     struct api_error *err)
{
    const json_t *v = json_object_get(body, key);
    if (!v || json_is_null(v))
        return 0;
    if (!json_is_boolean(v))
        return api_fail(err, 400, key, "'%s' must be a boolean", key);
    if (json_is_true(v) != want)
        return api_fail(err, 400, key, "'%s': %s", key, why);
    return 0;
}

static json_t *token_strs(const struct serve *sv, const int32_t *ids, int n)
{
    json_t *a = json_array();
    for (int i = 0; a && i < n; i++) {
        const char *p = tok_piece(sv->tk, ids[i]);
        json_array_append_new(a, p ? json_string(p) : json_null());
    }
    return a;
}

static void h_tokenize(struct http_req *r, void *ud)
{
    struct serve *sv = ud;
    struct api_error err = {0};
    size_t blen;
    const char *body = http_req_body(r, &blen);
    sv->met.requests[EP_OTHER]++;
    json_error_t je;
    json_t *root = json_loadb(body, blen, JSON_ALLOW_NUL, &je);
    if (!json_is_object(root)) {
        json_decref(root);
        api_fail(&err, 400, NULL, "the body must be a JSON object with 'prompt' or 'messages'");
        serve_reply_error(sv, r, &err, oai_error_body);
        return;
    }
    int chat = json_object_get(root, "messages") != NULL;
    int want_strs = json_is_true(json_object_get(root, "return_token_strs"));
    int bad = 0;
    if (chat)
        bad = need_bool(root, "add_generation_prompt", 1,
                        "only true is supported (the prompt a generation would prefill)", &err) ||
              need_bool(root, "add_special_tokens", 0,
                        "a chat prompt's special tokens come from its template; only false is "
                        "supported", &err) ||
              need_bool(root, "continue_final_message", 0, "only false is supported", &err);
    else if (!json_object_get(root, "prompt"))
        bad = api_fail(&err, 400, "prompt", "the body needs 'prompt' or 'messages'");
    else
        bad = need_bool(root, "add_special_tokens", 1,
                        "only true is supported (BOS as the tokenizer adds it)", &err);
    json_decref(root);
    if (bad) {
        serve_reply_error(sv, r, &err, oai_error_body);
        return;
    }
    struct oai_req rq;
    if (oai_parse(&rq, chat ? OAI_CHAT : OAI_COMPLETION, body, blen, &sv->defaults,
                  sv->m->hp.n_vocab, &err)) {
        serve_reply_error(sv, r, &err, oai_error_body);
        return;
    }
    struct api_prompt pr;
    memset(&pr, 0, sizeof pr);
    int rc;
    if (chat) {
        replay_apply(rq.messages);
        rc = api_chat_prompt(&sv->am, &rq, &pr, &err);
    } else if (rq.prompt_ids) {
        pr.ids = rq.prompt_ids;
        pr.n = rq.n_prompt_ids;
        rq.prompt_ids = NULL;
        rc = 0;
    } else {
        rc = api_completion_prompt(&sv->am, rq.prompt, rq.prompt_len, &pr, &err);
    }
    oai_req_deinit(&rq);
    if (rc) {
        serve_reply_error(sv, r, &err, oai_error_body);
        return;
    }
    json_t *ids = json_array();
    for (int i = 0; ids && i < pr.n; i++)
        json_array_append_new(ids, json_integer(pr.ids[i]));
    json_t *o = json_pack("{s:i, s:i, s:o, s:o}", "count", pr.n, "max_model_len",
                          engine_config_of(sv->eng)->n_ctx, "tokens", ids, "token_strs",
                          want_strs ? token_strs(sv, pr.ids, pr.n) : json_null());
    free(pr.ids);
    free(pr.forced);
    reply_obj(r, o);
}

static void h_detokenize(struct http_req *r, void *ud)
{
    struct serve *sv = ud;
    struct api_error err = {0};
    size_t blen;
    const char *body = http_req_body(r, &blen);
    sv->met.requests[EP_OTHER]++;
    json_error_t je;
    json_t *root = json_loadb(body, blen, 0, &je);
    const json_t *toks = json_object_get(root, "tokens");
    size_t n = json_array_size(toks);
    int32_t *ids = NULL;
    if (!json_is_array(toks)) {
        api_fail(&err, 400, "tokens", "the body needs 'tokens': an array of token ids");
    } else if (n && !(ids = malloc(n * sizeof *ids))) {
        api_fail(&err, 500, NULL, "out of memory");
    } else {
        for (size_t i = 0; i < n; i++) {
            const json_t *v = json_array_get(toks, i);
            json_int_t id = json_is_integer(v) ? json_integer_value(v) : -1;
            if (id < 0 || id >= sv->m->hp.n_vocab) {
                api_fail(&err, 400, "tokens", "tokens[%zu] is not a token id of this model "
                         "(0..%d)", i, sv->m->hp.n_vocab - 1);
                break;
            }
            ids[i] = (int32_t)id;
        }
    }
    json_decref(root);
    char *text = NULL;
    size_t tl = 0;
    struct cerr ce = {0};
    if (!err.status && tok_decode(sv->tk, ids, (int)n, 0, &text, &tl, &ce))
        api_fail(&err, 500, NULL, "detokenize failed: %s", ce.msg);
    free(ids);
    if (err.status) {
        serve_reply_error(sv, r, &err, oai_error_body);
        return;
    }
    reply_obj(r, json_pack("{s:o}", "prompt", json_stringn(text ? text : "", tl)));
    free(text);
}

static json_t *model_info(const struct serve *sv)
{
    return json_pack("{s:s, s:s, s:s, s:b, s:s, s:i, s:b, s:b, s:n, s:s}", "model_path",
                     sv->o.model, "tokenizer_path", sv->o.model, "served_model_name",
                     sv->model_id, "is_generation", 1, "model_type", sv->m->arch_name,
                     "context_length", engine_config_of(sv->eng)->n_ctx,
                     "has_image_understanding", 0, "has_audio_understanding", 0,
                     "preferred_sampling_params", "weight_version", "default");
}

static void h_model_info(struct http_req *r, void *ud)
{
    struct serve *sv = ud;
    sv->met.requests[EP_OTHER]++;
    reply_obj(r, model_info(sv));
}

static void h_server_info(struct http_req *r, void *ud)
{
    struct serve *sv = ud;
    sv->met.requests[EP_OTHER]++;
    const struct engine_config *c = engine_config_of(sv->eng);
    json_t *o = model_info(sv);
    json_t *more = json_pack("{s:s, s:i, s:i, s:i, s:I, s:i, s:i, s:s, s:[]}", "version",
                             CINFER_VERSION, "tp_size", 1, "pp_size", 1, "dp_size", 1,
                             "max_total_num_tokens", (json_int_t)c->n_blocks * c->block_size,
                             "max_running_requests", sv->o.batch, "page_size", c->block_size,
                             "backend", sv->o.backend ? sv->o.backend : "cpu",
                             "internal_states");
    /* vLLM's /server_info?config_format=json keys, which vllm-router reads for a worker's
     * model identity and KV block size */
    json_t *vc = json_pack("{s:{s:s, s:s, s:i}, s:{s:i, s:b}}", "model_config", "model",
                           sv->model_id, "served_model_name", sv->model_id, "max_model_len",
                           c->n_ctx, "cache_config", "block_size", c->block_size,
                           "enable_prefix_caching", 1);
    if (o && more)
        json_object_update(o, more);
    if (o && vc)
        json_object_set(o, "vllm_config", vc);
    json_decref(vc);
    json_decref(more);
    reply_obj(r, o);
}

int serve_tokenize_install(struct serve *sv)
{
    struct http_server *h = sv->http;
    int rc = http_route(h, "POST", "/tokenize", 0, h_tokenize, sv);
    rc |= http_route(h, "POST", "/detokenize", 0, h_detokenize, sv);
    rc |= http_route(h, "GET", "/server_info", 0, h_server_info, sv);
    rc |= http_route(h, "GET", "/get_server_info", 0, h_server_info, sv);
    rc |= http_route(h, "GET", "/model_info", 0, h_model_info, sv);
    rc |= http_route(h, "GET", "/get_model_info", 0, h_model_info, sv);
    return rc ? -1 : 0;
}
