/* anthropic.c — see anthropic.h. Shapes: server-inventory §16.2 and Anthropic's Messages
 * API (content blocks, the streaming event grammar, error types).
 */
#include "api/anthropic.h"
#include "util/jsonfmt.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "api/body.h"

/* ---- request mapping -------------------------------------------------------------------- */

/* Fields copied to the chat body as they are (sampling and the mlx-lm extras; no logit_bias). */
static const char *const PASS[] = {
    "temperature",
    "top_p",
    "top_k",
    "min_p",
    "seed",
    "repetition_penalty",
    "repetition_context_size",
    "presence_penalty",
    "presence_context_size",
    "frequency_penalty",
    "frequency_context_size",
    "xtc_probability",
    "xtc_threshold",
    "chat_template_kwargs",
    "reasoning_effort",
    "logprobs",
    "top_logprobs",
};

/* Text of a block list (text blocks only; other kinds are refused by the caller's rules).
 * what: "system" or "messages[i].content[j] tool_result". */
static int text_blocks(json_t *blocks, const char *what, struct sbuf *b, struct api_error *err)
{
    size_t i;
    json_t *x;
    json_array_foreach(blocks, i, x)
    {
        const char *t = json_string_value(json_object_get(x, "type"));
        if (!json_is_object(x) || !t)
            return api_fail(err, 400, NULL,
                            "%s[%zu]: a content block must be an object with a type", what, i);
        if (!strcmp(t, "image") || !strcmp(t, "document"))
            return api_fail(err, 400, NULL,
                            "%s[%zu]: %s blocks are not supported (this model has no vision)", what,
                            i, t);
        if (strcmp(t, "text"))
            return api_fail(err, 400, NULL, "%s[%zu]: unsupported block type \"%s\"", what, i, t);
        json_t *tx = json_object_get(x, "text");
        if (!json_is_string(tx))
            return api_fail(err, 400, NULL, "%s[%zu].text must be a string", what, i);
        if (b->len && sbuf_puts(b, "\n"))
            return api_fail(err, 500, NULL, "out of memory");
        if (sbuf_append(b, json_string_value(tx), json_string_length(tx)))
            return api_fail(err, 500, NULL, "out of memory");
    }
    return 0;
}

static json_t *sbuf_json(const struct sbuf *b)
{
    return json_stringn_nocheck(b->p ? b->p : "", b->len);
}

/* One Anthropic message -> one or more chat messages appended to chat. */
static int map_message(json_t *m, size_t mi, json_t *chat, struct api_error *err)
{
    if (!json_is_object(m))
        return api_fail(err, 400, "messages", "messages[%zu] must be an object", mi);
    const char *role = json_string_value(json_object_get(m, "role"));
    if (!role || (strcmp(role, "user") && strcmp(role, "assistant")))
        return api_fail(err, 400, "messages",
                        "messages[%zu].role must be \"user\" or \"assistant\"", mi);
    int asst = !strcmp(role, "assistant");
    json_t *c = json_object_get(m, "content");
    if (json_is_string(c)) {
        json_array_append_new(chat, json_pack("{s:s, s:O}", "role", role, "content", c));
        return 0;
    }
    if (!json_is_array(c))
        return api_fail(err, 400, "messages",
                        "messages[%zu].content must be a string or an array of content blocks", mi);
    struct sbuf text = {0};
    json_t *calls = json_array(), *tools = json_array();
    int rc = 0, n_text = 0;
    size_t j;
    json_t *x;
    char what[96];
    json_array_foreach(c, j, x)
    {
        const char *t = json_string_value(json_object_get(x, "type"));
        if (!json_is_object(x) || !t) {
            rc = api_fail(err, 400, "messages",
                          "messages[%zu].content[%zu] must be an object with a type", mi, j);
            break;
        }
        if (!strcmp(t, "text")) {
            json_t *tx = json_object_get(x, "text");
            if (!json_is_string(tx)) {
                rc = api_fail(err, 400, "messages",
                              "messages[%zu].content[%zu].text must be a string", mi, j);
                break;
            }
            if ((text.len && sbuf_puts(&text, "\n")) ||
                sbuf_append(&text, json_string_value(tx), json_string_length(tx))) {
                rc = api_fail(err, 500, NULL, "out of memory");
                break;
            }
            n_text++;
        } else if (!strcmp(t, "image") || !strcmp(t, "document")) {
            rc = api_fail(err, 400, "messages",
                          "messages[%zu].content[%zu]: %s blocks are not supported (this model has "
                          "no vision)",
                          mi, j, t);
            break;
        } else if (!strcmp(t, "thinking") || !strcmp(t, "redacted_thinking")) {
            continue; /* prior-turn thinking is dropped */
        } else if (!strcmp(t, "tool_use") && asst) {
            const char *id = json_string_value(json_object_get(x, "id"));
            const char *name = json_string_value(json_object_get(x, "name"));
            json_t *in = json_object_get(x, "input");
            if (!id || !name) {
                rc = api_fail(err, 400, "messages",
                              "messages[%zu].content[%zu]: tool_use needs id and name", mi, j);
                break;
            }
            char *args = in ? json_dumps_short(in, JSON_COMPACT | JSON_ENCODE_ANY) : NULL;
            json_array_append_new(calls, json_pack("{s:s, s:s, s:{s:s, s:s}}", "id", id, "type",
                                                   "function", "function", "name", name,
                                                   "arguments", args ? args : "{}"));
            free(args);
        } else if (!strcmp(t, "tool_result") && !asst) {
            const char *id = json_string_value(json_object_get(x, "tool_use_id"));
            json_t *rc_ = json_object_get(x, "content");
            if (!id) {
                rc = api_fail(err, 400, "messages",
                              "messages[%zu].content[%zu]: tool_result needs tool_use_id", mi, j);
                break;
            }
            json_t *content;
            if (json_is_array(rc_)) {
                struct sbuf tb = {0};
                snprintf(what, sizeof what, "messages[%zu].content[%zu].content", mi, j);
                if (text_blocks(rc_, what, &tb, err)) {
                    sbuf_free(&tb);
                    rc = -1;
                    break;
                }
                content = sbuf_json(&tb);
                sbuf_free(&tb);
            } else if (json_is_string(rc_))
                content = json_incref(rc_);
            else
                content = json_string("");
            json_array_append_new(tools, json_pack("{s:s, s:s, s:o}", "role", "tool",
                                                   "tool_call_id", id, "content", content));
        } else {
            rc = api_fail(err, 400, "messages",
                          "messages[%zu].content[%zu]: unsupported block type \"%s\" in a%s %s "
                          "message",
                          mi, j, t, asst ? "n" : "", role);
            break;
        }
    }
    if (!rc) {
        json_array_extend(chat, tools);
        if (asst) {
            json_t *am = json_pack("{s:s, s:o}", "role", "assistant", "content", sbuf_json(&text));
            if (json_array_size(calls))
                json_object_set(am, "tool_calls", calls);
            json_array_append_new(chat, am);
        } else if (n_text || !json_array_size(tools))
            json_array_append_new(
                chat, json_pack("{s:s, s:o}", "role", "user", "content", sbuf_json(&text)));
    }
    sbuf_free(&text);
    json_decref(calls);
    json_decref(tools);
    return rc;
}

int anth_to_chat(const char *body, size_t len, int for_count, json_t **out, char *warn,
                 size_t warn_cap, struct api_error *err)
{
    *out = NULL;
    if (warn && warn_cap)
        *warn = 0;
    json_error_t je;
    json_t *b = api_body_load(body, len, &je);
    if (!json_is_object(b)) {
        json_decref(b);
        return api_fail(err, 400, NULL, "invalid JSON body");
    }
    json_t *o = json_object(), *chat = json_array();
    int rc = 0;
    json_t *sys = json_object_get(b, "system");
    if (json_is_string(sys)) {
        if (json_string_length(sys))
            json_array_append_new(chat, json_pack("{s:s, s:O}", "role", "system", "content", sys));
    } else if (json_is_array(sys)) {
        struct sbuf t = {0};
        rc = text_blocks(sys, "system", &t, err);
        if (!rc && t.len)
            json_array_append_new(
                chat, json_pack("{s:s, s:o}", "role", "system", "content", sbuf_json(&t)));
        sbuf_free(&t);
    } else if (sys && !json_is_null(sys))
        rc = api_fail(err, 400, "system", "system must be a string or an array of text blocks");
    json_t *ms = json_object_get(b, "messages");
    if (!rc && (!json_is_array(ms) || !json_array_size(ms)))
        rc = api_fail(err, 400, "messages", "messages: a non-empty array is required");
    size_t i;
    json_t *m;
    if (!rc)
        json_array_foreach(ms, i, m)
        {
            if ((rc = map_message(m, i, chat, err)))
                break;
        }
    /* a final assistant message is a prefill: the reply continues it */
    json_t *lastm = json_array_get(chat, json_array_size(chat) - 1);
    if (!rc && lastm && json_is_string(json_object_get(lastm, "role")) &&
        !strcmp(json_string_value(json_object_get(lastm, "role")), "assistant") &&
        json_is_string(json_object_get(lastm, "content")) && !json_object_get(lastm, "tool_calls"))
        json_object_set_new(o, "continue_final_message", json_true());
    /* tools: client tools only (server tools have no input_schema) */
    json_t *tl = json_object_get(b, "tools");
    if (!rc && tl && !json_is_null(tl)) {
        if (!json_is_array(tl))
            rc = api_fail(err, 400, "tools", "tools must be an array");
        json_t *ft = json_array(), *t;
        json_array_foreach(tl, i, t)
        {
            json_t *name = json_object_get(t, "name"), *sch = json_object_get(t, "input_schema");
            if (rc || !json_is_string(name) || !json_is_object(sch)) {
                const char *ty = json_string_value(json_object_get(t, "type"));
                api_warn(warn, warn_cap, "server tool", ty ? ty : "(untyped)");
                continue;
            }
            /* key order as an OpenAI client sends it: the template dumps the tools */
            json_t *fn = json_pack("{s:O}", "name", name);
            json_t *d = json_object_get(t, "description");
            if (fn && json_is_string(d))
                json_object_set(fn, "description", d);
            if (fn)
                json_object_set(fn, "parameters", sch);
            json_array_append_new(ft, json_pack("{s:s, s:o}", "type", "function", "function", fn));
        }
        if (json_array_size(ft))
            json_object_set(o, "tools", ft);
        json_decref(ft);
    }
    /* as Anthropic checks them: metadata holds only user_id (a string), and service_tier
     * is auto or standard_only; neither changes the output */
    json_t *md = json_object_get(b, "metadata");
    if (!rc && md && !json_is_null(md)) {
        json_t *uid = json_object_get(md, "user_id");
        if (!json_is_object(md) || json_object_size(md) != (uid ? 1u : 0u) ||
            (uid && !json_is_null(uid) && !json_is_string(uid)))
            rc = api_fail(err, 400, "metadata", "metadata: only user_id (a string) is allowed");
    }
    const char *tier = json_string_value(json_object_get(b, "service_tier"));
    json_t *tierv = json_object_get(b, "service_tier");
    if (!rc && tierv && !json_is_null(tierv) &&
        (!tier || (strcmp(tier, "auto") && strcmp(tier, "standard_only"))))
        rc = api_fail(err, 400, "service_tier", "service_tier must be auto or standard_only");
    static const char *const BETA[] = {"context_management", "container", "mcp_servers"};
    for (size_t k = 0; k < sizeof BETA / sizeof *BETA; k++) {
        json_t *v = json_object_get(b, BETA[k]);
        if (v && !json_is_null(v))
            api_warn(warn, warn_cap, "field", BETA[k]);
    }
    json_t *tc = json_object_get(b, "tool_choice");
    const char *tct = json_string_value(json_object_get(tc, "type"));
    json_t *dp = json_object_get(tc, "disable_parallel_tool_use");
    if (!rc && dp && !json_is_null(dp) && !json_is_boolean(dp))
        rc = api_fail(err, 400, "tool_choice",
                      "tool_choice.disable_parallel_tool_use must be a boolean");
    if (!rc && json_is_true(dp))
        json_object_set_new(o, "parallel_tool_calls", json_false());
    if (!rc && tct && !strcmp(tct, "none"))
        json_object_set_new(o, "tool_choice", json_string("none"));
    else if (!rc && tct && !strcmp(tct, "any"))
        json_object_set_new(o, "tool_choice", json_string("required"));
    else if (!rc && tct && !strcmp(tct, "tool") && json_is_string(json_object_get(tc, "name")))
        json_object_set_new(o, "tool_choice",
                            json_pack("{s:s, s:{s:O}}", "type", "function", "function", "name",
                                      json_object_get(tc, "name")));
    for (size_t k = 0; !rc && k < sizeof PASS / sizeof *PASS; k++) {
        json_t *v = json_object_get(b, PASS[k]);
        if (v)
            json_object_set(o, PASS[k], v);
    }
    json_t *mt = json_object_get(b, "max_tokens");
    if (!rc && !for_count && (!mt || json_is_null(mt)))
        rc = api_fail(err, 400, "max_tokens", "max_tokens: Field required");
    else if (!rc && !for_count && (!json_is_integer(mt) || json_integer_value(mt) < 1))
        rc = api_fail(err, 400, "max_tokens", "max_tokens: must be an integer of at least 1");
    if (!rc && mt && !for_count)
        json_object_set(o, "max_tokens", mt);
    json_t *st = json_object_get(b, "stop_sequences");
    if (!rc && st && !json_is_null(st)) {
        if (!json_is_array(st))
            rc = api_fail(err, 400, "stop_sequences", "stop_sequences must be an array of strings");
        else
            json_object_set(o, "stop", st);
    }
    json_t *sm = json_object_get(b, "stream");
    if (!rc && sm && !for_count)
        json_object_set(o, "stream", sm);
    /* extended thinking -> enable_thinking (explicit chat_template_kwargs win) */
    const char *th = json_string_value(json_object_get(json_object_get(b, "thinking"), "type"));
    if (!rc && th && (!strcmp(th, "enabled") || !strcmp(th, "disabled"))) {
        json_t *kw = json_object_get(o, "chat_template_kwargs");
        if (!json_is_object(kw)) {
            kw = json_object();
            json_object_set_new(o, "chat_template_kwargs", kw);
        } else {
            kw = json_deep_copy(kw);
            json_object_set_new(o, "chat_template_kwargs", kw);
        }
        if (!json_object_get(kw, "enable_thinking"))
            json_object_set_new(kw, "enable_thinking", json_boolean(!strcmp(th, "enabled")));
    }
    json_object_set(o, "messages", chat);
    json_decref(chat);
    json_decref(b);
    if (rc) {
        json_decref(o);
        return -1;
    }
    *out = o;
    return 0;
}

/* ---- encoder ------------------------------------------------------------------------------ */

enum { BLK_NONE = 0, BLK_THINK, BLK_TEXT, BLK_TOOL };

struct anth_out {
    int stream, finished;
    char id[64];
    const struct api_model *m;
    struct api_turn turn;
    char *const *stops;
    int n_stops;
    int n_prompt;
    int cur, index;             /* streaming: the open block kind and its index; blocks so far */
    int started;                /* streaming: message_start sent */
    struct sbuf text, thinking; /* non-streaming */
    struct sbuf *out;
    int err;
};

static int sse(struct sbuf *out, const char *event, json_t *obj)
{
    if (!obj)
        return CERR_NOMEM;
    char *s = json_dumps_short(obj, JSON_COMPACT);
    json_decref(obj);
    if (!s)
        return CERR_NOMEM;
    int rc = sbuf_printf(out, "event: %s\ndata: %s\n\n", event, s);
    free(s);
    return rc ? CERR_NOMEM : 0;
}

static void put(struct anth_out *o, const char *event, json_t *obj)
{
    if (sse(o->out, event, obj))
        o->err = CERR_NOMEM;
}

static void close_block(struct anth_out *o)
{
    if (o->cur == BLK_NONE)
        return;
    if (o->cur == BLK_THINK)
        put(o, "content_block_delta",
            json_pack("{s:s, s:i, s:{s:s, s:s}}", "type", "content_block_delta", "index", o->index,
                      "delta", "type", "signature_delta", "signature", ""));
    put(o, "content_block_stop",
        json_pack("{s:s, s:i}", "type", "content_block_stop", "index", o->index));
    o->cur = BLK_NONE;
    o->index++;
}

static void open_block(struct anth_out *o, int kind, json_t *block)
{
    close_block(o);
    o->cur = kind;
    put(o, "content_block_start",
        json_pack("{s:s, s:i, s:o}", "type", "content_block_start", "index", o->index,
                  "content_block", block));
}

static void on_turn(int kind, const struct tc_event *tc, const char *t, size_t n, void *ud)
{
    struct anth_out *o = ud;
    if (!o->stream) {
        if (kind == TURN_REASONING || kind == TURN_CONTENT)
            if (sbuf_append(kind == TURN_REASONING ? &o->thinking : &o->text, t, n))
                o->err = CERR_NOMEM;
        return;
    }
    if (kind == TURN_CONTENT && o->turn.tc && sbuf_append(&o->text, t, n)) /* anth_out_rerendered */
        o->err = CERR_NOMEM;
    switch (kind) {
    case TURN_REASONING:
        if (!n)
            return;
        if (o->cur != BLK_THINK)
            open_block(
                o, BLK_THINK,
                json_pack("{s:s, s:s, s:s}", "type", "thinking", "thinking", "", "signature", ""));
        put(o, "content_block_delta",
            json_pack("{s:s, s:i, s:{s:s, s:o}}", "type", "content_block_delta", "index", o->index,
                      "delta", "type", "thinking_delta", "thinking", api_json_text(t, n)));
        break;
    case TURN_CONTENT:
        if (!n)
            return;
        if (o->cur != BLK_TEXT)
            open_block(o, BLK_TEXT, json_pack("{s:s, s:s}", "type", "text", "text", ""));
        put(o, "content_block_delta",
            json_pack("{s:s, s:i, s:{s:s, s:o}}", "type", "content_block_delta", "index", o->index,
                      "delta", "type", "text_delta", "text", api_json_text(t, n)));
        break;
    case TURN_CALL_BEGIN:
        open_block(o, BLK_TOOL,
                   json_pack("{s:s, s:s, s:s, s:{}}", "type", "tool_use", "id", tc->id, "name",
                             tc->name, "input"));
        break;
    case TURN_CALL_DELTA:
        if (n)
            put(o, "content_block_delta",
                json_pack("{s:s, s:i, s:{s:s, s:o}}", "type", "content_block_delta", "index",
                          o->index, "delta", "type", "input_json_delta", "partial_json",
                          api_json_text(t, n)));
        break;
    case TURN_CALL_END:
        close_block(o);
        break;
    }
}

int anth_out_new(struct anth_out **out, const struct api_model *m, const struct oai_req *r,
                 const struct api_prompt *p, int family, struct cerr *e)
{
    *out = NULL;
    struct anth_out *o = calloc(1, sizeof *o);
    if (!o)
        return cerr_set(e, CERR_NOMEM, "out of memory");
    o->stream = r->stream;
    o->m = m;
    o->stops = r->stops;
    o->n_stops = r->n_stops;
    o->n_prompt = p->n;
    api_new_id(o->id, sizeof o->id, "msg_");
    int rc = api_turn_init(&o->turn, m, p->start_in_reasoning, r->tools ? family : TC_NONE,
                           r->tools, on_turn, o, e);
    if (!rc && r->stream)
        api_turn_stream_args(&o->turn);
    if (!rc && p->forced && r->tools)
        api_turn_prime(&o->turn, p->forced); /* the api_prompt outlives the encoder */
    if (!rc && r->single_call)
        api_turn_max_calls(&o->turn, 1);
    if (rc) {
        free(o);
        return rc;
    }
    *out = o;
    return 0;
}

json_t *anth_out_rerendered(const struct anth_out *o)
{
    if (!o->finished || o->err)
        return NULL;
    int ws_only = 1; /* as done_body: whitespace alone is no text block */
    for (size_t i = 0; i < o->text.len; i++)
        ws_only &= o->text.p[i] == ' ' || o->text.p[i] == '\n' || o->text.p[i] == '\t' ||
                   o->text.p[i] == '\r';
    return api_turn_rerendered(&o->turn, ws_only ? "" : o->text.p, ws_only ? 0 : o->text.len);
}

void anth_out_free(struct anth_out *o)
{
    if (!o)
        return;
    api_turn_deinit(&o->turn);
    sbuf_free(&o->text);
    sbuf_free(&o->thinking);
    free(o);
}

static json_t *usage(const struct engine_event *ev);

int anth_out_begin(struct anth_out *o, struct sbuf *sse_out)
{
    /* message_start waits for the first event: its usage then holds the prefix cache's real
     * accounting (what this request read and wrote), which the engine knows only once the
     * request is admitted */
    o->out = sse_out;
    return 0;
}

/* Streaming: message_start (with the cache counts of ev) and a ping, once. */
static void start(struct anth_out *o, const struct engine_event *ev)
{
    if (o->started)
        return;
    o->started = 1;
    put(o, "message_start",
        json_pack("{s:s, s:{s:s, s:s, s:s, s:[], s:s, s:n, s:n, s:o}}", "type", "message_start",
                  "message", "id", o->id, "type", "message", "role", "assistant", "content",
                  "model", o->m->id, "stop_reason", "stop_sequence", "usage", usage(ev)));
    put(o, "ping", json_pack("{s:s}", "type", "ping"));
}

static const char *stop_reason(const struct anth_out *o, const struct engine_event *ev)
{
    if (api_turn_calls(&o->turn))
        return "tool_use";
    if (ev->finish == ENGINE_FINISH_STOP)
        return "stop_sequence";
    return ev->finish == ENGINE_FINISH_LENGTH ? "max_tokens" : "end_turn";
}

static json_t *usage(const struct engine_event *ev)
{
    /* Anthropic's accounting: the whole prompt = input_tokens + cache_read_input_tokens +
     * cache_creation_input_tokens. The prefix cache reads the cached prefix and writes every
     * prompt token the request computed (input_tokens is then 0); with --prompt-cache 0
     * nothing is written and input_tokens are the prompt's uncached tokens. */
    json_t *u = json_pack("{s:i, s:i, s:i, s:i}", "input_tokens",
                          ev->n_prompt - ev->n_cached - ev->n_cache_write, "output_tokens",
                          ev->n_gen, "cache_read_input_tokens", ev->n_cached,
                          "cache_creation_input_tokens", ev->n_cache_write);
    if (u && ev->spec_on) /* speculative decoding's counts, as in the OpenAI usage */
        json_object_set_new(u, "speculation",
                            json_pack("{s:i, s:i, s:i}", "drafted", ev->spec_drafted, "accepted",
                                      ev->spec_accepted, "target_calls", ev->spec_calls));
    return u;
}

static int done_body(struct anth_out *o, const struct engine_event *ev, struct sbuf *out)
{
    json_t *content = json_array();
    if (o->thinking.len)
        json_array_append_new(content, json_pack("{s:s, s:o, s:s}", "type", "thinking", "thinking",
                                                 api_json_text(o->thinking.p, o->thinking.len),
                                                 "signature", ""));
    int nc = api_turn_calls(&o->turn);
    /* text: when there is some (an empty generation gives one empty text block) */
    int ws_only = 1;
    for (size_t i = 0; i < o->text.len; i++)
        ws_only &= o->text.p[i] == ' ' || o->text.p[i] == '\n' || o->text.p[i] == '\t' ||
                   o->text.p[i] == '\r';
    if (!ws_only || (!nc && !o->thinking.len))
        json_array_append_new(content,
                              json_pack("{s:s, s:o}", "type", "text", "text",
                                        api_json_text(o->text.p ? o->text.p : "", o->text.len)));
    for (int i = 0; i < nc; i++) {
        const char *a = tc_call_args(o->turn.tc, i);
        json_t *in = json_loads(a, 0, NULL);
        if (!json_is_object(in)) {
            json_decref(in);
            in = json_pack("{s:s}", "_raw", a);
        }
        json_array_append_new(content, json_pack("{s:s, s:s, s:s, s:o}", "type", "tool_use", "id",
                                                 tc_call_id(o->turn.tc, i), "name",
                                                 tc_call_name(o->turn.tc, i), "input", in));
    }
    const char *ss = api_stop_string(ev, o->stops, o->n_stops);
    json_t *b = json_pack("{s:s, s:s, s:s, s:o, s:s, s:s, s:o, s:o}", "id", o->id, "type",
                          "message", "role", "assistant", "content", content, "model", o->m->id,
                          "stop_reason", stop_reason(o, ev), "stop_sequence",
                          ss && !api_turn_calls(&o->turn) ? json_string(ss) : json_null(), "usage",
                          usage(ev));
    if (!b)
        return CERR_NOMEM;
    char *s = json_dumps_short(b, JSON_COMPACT);
    json_decref(b);
    int rc = s ? sbuf_puts(out, s) : CERR_NOMEM;
    free(s);
    return rc;
}

int anth_out_event(struct anth_out *o, const struct engine_event *ev, struct sbuf *out)
{
    if (o->finished)
        return 0;
    o->out = out;
    o->err = 0;
    if (ev->type == ENGINE_EV_ERROR) {
        o->finished = 1;
        return o->stream ? anth_error_frame(out, ev->error ? ev->error : "generation failed") : 0;
    }
    if (o->stream)
        start(o, ev);
    if (ev->len && api_turn_push(&o->turn, ev->text, ev->len))
        o->err = CERR_NOMEM;
    if (ev->type != ENGINE_EV_DONE)
        return o->err;
    o->finished = 1;
    if (api_turn_finish(&o->turn))
        o->err = CERR_NOMEM;
    if (o->err)
        return o->err;
    if (!o->stream)
        return done_body(o, ev, out);
    if (o->index == 0 && o->cur == BLK_NONE) /* an empty generation: one empty text block */
        open_block(o, BLK_TEXT, json_pack("{s:s, s:s}", "type", "text", "text", ""));
    close_block(o);
    const char *ss = api_stop_string(ev, o->stops, o->n_stops);
    put(o, "message_delta",
        json_pack("{s:s, s:{s:s, s:o}, s:o}", "type", "message_delta", "delta", "stop_reason",
                  stop_reason(o, ev), "stop_sequence",
                  ss && !api_turn_calls(&o->turn) ? json_string(ss) : json_null(), "usage",
                  usage(ev)));
    put(o, "message_stop", json_pack("{s:s}", "type", "message_stop"));
    return o->err;
}

/* ---- errors ------------------------------------------------------------------------------- */

const char *anth_error_type(int status)
{
    switch (status) {
    case 401:
        return "authentication_error";
    case 403:
        return "permission_error";
    case 404:
        return "not_found_error";
    case 413:
        return "request_too_large";
    case 429:
        return "rate_limit_error";
    case 503:
    case 529:
        return "overloaded_error";
    default:
        return status >= 500 ? "api_error" : "invalid_request_error";
    }
}

char *anth_error_body(const struct api_error *err)
{
    json_t *j = json_pack("{s:s, s:{s:s, s:o}}", "type", "error", "error", "type",
                          anth_error_type(err->status), "message",
                          api_json_text(err->message, strlen(err->message)));
    char *s = j ? json_dumps_short(j, JSON_COMPACT) : NULL;
    json_decref(j);
    return s;
}

int anth_error_frame(struct sbuf *out, const char *message)
{
    return sse(out, "error",
               json_pack("{s:s, s:{s:s, s:o}}", "type", "error", "error", "type", "api_error",
                         "message", api_json_text(message, strlen(message))));
}
