/* responses.c — see responses.h. Shapes: server-inventory §16.3 and the OpenAI Responses
 * API (output items, streaming events with sequence numbers).
 */
#include "api/responses.h"
#include "util/jsonfmt.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "api/body.h"
#include "api/openai/fields.h"
#include <time.h>

/* ---- request mapping -------------------------------------------------------------------- */

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
    "logit_bias",
    "stream",
};

/* The text of a content value: a string or an array of text parts. */
static int item_text(json_t *c, const char *what, struct sbuf *b, struct api_error *err)
{
    if (json_is_string(c))
        return sbuf_append(b, json_string_value(c), json_string_length(c))
                   ? api_fail(err, 500, NULL, "out of memory")
                   : 0;
    if (!json_is_array(c))
        return api_fail(err, 400, "input", "%s.content must be a string or an array of parts",
                        what);
    size_t i;
    json_t *p;
    json_array_foreach(c, i, p)
    {
        const char *t = json_string_value(json_object_get(p, "type"));
        if (!t)
            return api_fail(err, 400, "input", "%s.content[%zu] needs a type", what, i);
        if (!strcmp(t, "input_image") || !strcmp(t, "input_file") || !strcmp(t, "input_audio"))
            return api_fail(err, 400, "input",
                            "%s.content[%zu]: %s is not supported (this model "
                            "has no vision or audio)",
                            what, i, t);
        if (strcmp(t, "input_text") && strcmp(t, "output_text") && strcmp(t, "text") &&
            strcmp(t, "refusal"))
            return api_fail(err, 400, "input", "%s.content[%zu]: unknown part type \"%s\"", what, i,
                            t);
        json_t *tx = json_object_get(p, strcmp(t, "refusal") ? "text" : "refusal");
        if (!json_is_string(tx))
            return api_fail(err, 400, "input", "%s.content[%zu].text must be a string", what, i);
        if (sbuf_append(b, json_string_value(tx), json_string_length(tx)))
            return api_fail(err, 500, NULL, "out of memory");
    }
    return 0;
}

static json_t *sjson(const struct sbuf *b)
{
    return json_stringn_nocheck(b->p ? b->p : "", b->len);
}

/* Appends one input item to convo (system text goes to sys). */
static int map_item(json_t *it, size_t i, json_t *convo, struct sbuf *sys, struct api_error *err)
{
    char what[48];
    snprintf(what, sizeof what, "input[%zu]", i);
    if (!json_is_object(it))
        return api_fail(err, 400, "input", "%s must be an object", what);
    const char *type = json_string_value(json_object_get(it, "type"));
    const char *role = json_string_value(json_object_get(it, "role"));
    if (!type)
        type = role ? "message" : "";
    if (!strcmp(type, "message")) {
        struct sbuf t = {0};
        if (item_text(json_object_get(it, "content"), what, &t, err)) {
            sbuf_free(&t);
            return -1;
        }
        if (role && (!strcmp(role, "system") || !strcmp(role, "developer"))) {
            int bad =
                (sys->len && sbuf_puts(sys, "\n\n")) || sbuf_append(sys, t.p ? t.p : "", t.len);
            sbuf_free(&t);
            return bad ? api_fail(err, 500, NULL, "out of memory") : 0;
        }
        const char *r = role && !strcmp(role, "assistant") ? "assistant" : "user";
        json_array_append_new(convo, json_pack("{s:s, s:o}", "role", r, "content", sjson(&t)));
        sbuf_free(&t);
        return 0;
    }
    int custom = !strcmp(type, "custom_tool_call");
    if (!strcmp(type, "function_call") || custom) {
        const char *id = json_string_value(json_object_get(it, "call_id"));
        const char *name = json_string_value(json_object_get(it, "name"));
        json_t *a = json_object_get(it, "arguments");
        if (!id || !name)
            return api_fail(err, 400, "input", "%s: %s needs call_id and name", what, type);
        json_t *ci = custom ? json_object_get(it, "input") : NULL;
        if (custom && !json_is_string(ci))
            return api_fail(err, 400, "input", "%s: custom_tool_call needs an input string", what);
        json_t *wrapped = custom ? json_pack("{s:O}", "input", ci) : NULL;
        if (custom)
            a = wrapped; /* as the model wrote it: {"input": "..."} */
        char *as = json_is_string(a) || !a ? NULL : json_dumps_short(a, JSON_ENCODE_ANY | JSON_COMPACT);
        json_t *call = json_pack("{s:s, s:s, s:{s:s, s:s}}", "id", id, "type", "function",
                                 "function", "name", name, "arguments",
                                 json_is_string(a) ? json_string_value(a)
                                 : as              ? as
                                                   : "{}");
        json_decref(wrapped); /* a may point to it until here */
        free(as);
        /* consecutive calls (and a call right after assistant text) form one turn */
        json_t *last = json_array_get(convo, json_array_size(convo) - 1);
        const char *lr = json_string_value(json_object_get(last, "role"));
        json_t *tcs;
        if (last && lr && !strcmp(lr, "assistant")) {
            tcs = json_object_get(last, "tool_calls");
            if (!tcs) {
                tcs = json_array();
                json_object_set_new(last, "tool_calls", tcs);
            }
        } else {
            tcs = json_array();
            json_array_append_new(convo, json_pack("{s:s, s:s, s:o}", "role", "assistant",
                                                   "content", "", "tool_calls", tcs));
        }
        json_array_append_new(tcs, call);
        return 0;
    }
    if (!strcmp(type, "function_call_output") || !strcmp(type, "custom_tool_call_output")) {
        const char *id = json_string_value(json_object_get(it, "call_id"));
        json_t *out = json_object_get(it, "output");
        if (!id)
            return api_fail(err, 400, "input", "%s: %s needs call_id", what, type);
        json_t *content;
        if (json_is_string(out))
            content = json_incref(out);
        else {
            char *s = json_dumps_short(out ? out : json_null(), JSON_ENCODE_ANY | JSON_COMPACT);
            content = json_string(s ? s : "");
            free(s);
        }
        json_array_append_new(convo, json_pack("{s:s, s:s, s:o}", "role", "tool", "tool_call_id",
                                               id, "content", content));
        return 0;
    }
    if (!strcmp(type, "reasoning"))
        return 0; /* reasoning items are not replayed */
    return api_fail(err, 400, "input", "%s: unsupported item type \"%s\"", what, type);
}

/* The request fields the response object repeats (Codex and the Agents SDK send them):
 * metadata (16 string pairs at most, keys up to 64 and values up to 512 characters, as
 * OpenAI checks them), prompt_cache_key, safety_identifier, user, truncation ("auto":
 * nothing is dropped here: a request over the context is refused either way), text
 * (format and verbosity) and service_tier (always served as "default"). None of them
 * changes the generation: the prefix cache is found by content, whatever the cache key. */
static int echo_fields(json_t *b, json_t *echo, struct api_error *err)
{
    json_t *md = json_object_get(b, "metadata");
    if (oai_check_metadata(md, err))
        return -1;
    if (json_is_object(md))
        json_object_set(echo, "metadata", md);
    static const char *const STR[] = {"prompt_cache_key", "safety_identifier", "user"};
    for (size_t i = 0; i < sizeof STR / sizeof *STR; i++) {
        json_t *v = json_object_get(b, STR[i]);
        if (!v || json_is_null(v))
            continue;
        if (!json_is_string(v) || (i == 1 && json_string_length(v) > 64))
            return api_fail(err, 400, STR[i], "%s must be a string%s", STR[i],
                            i == 1 ? " of at most 64 characters" : "");
        json_object_set(echo, STR[i], v);
    }
    const char *tr = json_string_value(json_object_get(b, "truncation"));
    json_t *trv = json_object_get(b, "truncation");
    if (trv && !json_is_null(trv) && (!tr || (strcmp(tr, "auto") && strcmp(tr, "disabled"))))
        return api_fail(err, 400, "truncation", "truncation must be \"auto\" or \"disabled\"");
    if (tr)
        json_object_set_new(echo, "truncation", json_string(tr));
    json_t *st = json_object_get(b, "service_tier");
    const char *sts = json_string_value(st);
    if (st && !json_is_null(st) &&
        (!sts || (strcmp(sts, "auto") && strcmp(sts, "default") && strcmp(sts, "flex") &&
                  strcmp(sts, "scale") && strcmp(sts, "priority"))))
        return api_fail(err, 400, "service_tier",
                        "service_tier must be one of auto, default, flex, scale, priority");
    json_object_set_new(echo, "service_tier", json_string("default"));
    json_t *tx = json_object_get(b, "text");
    if (json_is_object(tx)) {
        json_t *fmt = json_object_get(tx, "format");
        json_t *vb = json_object_get(tx, "verbosity");
        const char *vs = json_string_value(vb);
        if (vb && !json_is_null(vb) &&
            (!vs || (strcmp(vs, "low") && strcmp(vs, "medium") && strcmp(vs, "high"))))
            return api_fail(err, 400, "text.verbosity",
                            "text.verbosity must be low, medium or high");
        json_t *t = json_pack("{s:o}", "format",
                              json_is_object(fmt) ? json_incref(fmt)
                                                  : json_pack("{s:s}", "type", "text"));
        if (t && vs)
            json_object_set_new(t, "verbosity", json_string(vs));
        json_object_set_new(echo, "text", t);
    }
    return 0;
}

void resp_req_deinit(struct resp_req *q)
{
    json_decref(q->chat);
    json_decref(q->convo);
    json_decref(q->echo);
    free(q->instructions);
    free(q->prev_id);
    memset(q, 0, sizeof *q);
}

int resp_to_chat(const char *body, size_t len, resp_lookup_fn lookup, void *ud, struct resp_req *q,
                 struct api_error *err)
{
    memset(q, 0, sizeof *q);
    json_error_t je;
    json_t *b = api_body_load(body, len, &je);
    if (!json_is_object(b)) {
        json_decref(b);
        return api_fail(err, 400, NULL, "invalid JSON body");
    }
    int rc = 0;
    struct sbuf sys = {0};
    q->convo = json_array();
    q->chat = json_object();
    q->echo = json_object();
    json_t *prev = json_object_get(b, "previous_response_id");
    json_t *stored = NULL;
    if (json_is_string(prev)) {
        q->prev_id = strdup(json_string_value(prev));
        stored = lookup ? lookup(q->prev_id, ud) : NULL;
        if (!stored)
            rc = api_fail(err, 404, "previous_response_id",
                          "previous_response_id '%s' not found or expired", q->prev_id);
        else
            json_array_extend(q->convo, json_object_get(stored, "messages"));
    } else if (prev && !json_is_null(prev))
        rc = api_fail(err, 400, "previous_response_id", "previous_response_id must be a string");
    if (!rc && !q->convo)
        rc = api_fail(err, 500, NULL, "out of memory");
    /* the stored messages are shared with the store: copy before any change */
    if (!rc && stored) {
        json_t *c = json_deep_copy(q->convo);
        json_decref(q->convo);
        q->convo = c;
    }
    json_t *ins = json_object_get(b, "instructions");
    if (!rc && ins && !json_is_null(ins) && !json_is_string(ins))
        rc = api_fail(err, 400, "instructions", "instructions must be a string");
    const char *ins_s = json_is_string(ins) ? json_string_value(ins)
                        : stored ? json_string_value(json_object_get(stored, "instructions"))
                                 : NULL;
    if (!rc && ins_s && *ins_s && sbuf_puts(&sys, ins_s))
        rc = api_fail(err, 500, NULL, "out of memory");
    json_t *in = json_object_get(b, "input");
    if (!rc) {
        if (json_is_string(in))
            json_array_append_new(q->convo, json_pack("{s:s, s:O}", "role", "user", "content", in));
        else if (json_is_array(in)) {
            size_t i;
            json_t *it;
            json_array_foreach(in, i, it)
            {
                if ((rc = map_item(it, i, q->convo, &sys, err)))
                    break;
            }
        } else
            rc = api_fail(err, 400, "input", "input must be a string or an array of items");
    }
    if (!rc && !json_array_size(q->convo))
        rc = api_fail(err, 400, "input", "input has no message");
    if (!rc && sys.len && !(q->instructions = strndup(sys.p, sys.len)))
        rc = api_fail(err, 500, NULL, "out of memory");
    json_t *msgs = json_array();
    if (!rc && q->instructions)
        json_array_append_new(
            msgs, json_pack("{s:s, s:s}", "role", "system", "content", q->instructions));
    if (!rc) {
        json_array_extend(msgs, q->convo);
        json_object_set_new(q->chat, "messages", msgs);
    } else
        json_decref(msgs);
    for (size_t k = 0; !rc && k < sizeof PASS / sizeof *PASS; k++) {
        json_t *v = json_object_get(b, PASS[k]);
        if (v)
            json_object_set(q->chat, PASS[k], v);
    }
    json_t *mo = json_object_get(b, "max_output_tokens");
    if (!mo || json_is_null(mo))
        mo = json_object_get(b, "max_tokens");
    if (!rc && mo && !json_is_null(mo))
        json_object_set(q->chat, "max_tokens", mo);
    /* flat function tools -> chat tools; built-in tool types are dropped */
    json_t *tl = json_object_get(b, "tools");
    json_t *ft = json_array(), *et = json_array();
    if (!rc && tl && !json_is_null(tl) && !json_is_array(tl))
        rc = api_fail(err, 400, "tools", "tools must be an array");
    size_t i;
    json_t *t;
    if (!rc && json_is_array(tl))
        json_array_foreach(tl, i, t)
        {
            const char *ty = json_string_value(json_object_get(t, "type"));
            json_t *name = json_object_get(t, "name");
            if (ty && !strcmp(ty, "custom") && json_is_string(name)) {
                /* a free-form text tool: to the model, a function of one string `input` */
                json_t *d = json_object_get(t, "description");
                json_t *fn = json_pack(
                    "{s:O, s:s+, s:{s:s, s:{s:{s:s}}, s:[s]}}", "name", name, "description",
                    json_is_string(d) ? json_string_value(d) : "",
                    " (free-form tool: put its whole text input in the string `input`)",
                    "parameters", "type", "object", "properties", "input", "type", "string",
                    "required", "input");
                json_array_append_new(ft, json_pack("{s:s, s:o}", "type", "function", "function",
                                                    fn));
                json_array_append(et, t);
                continue;
            }
            if (!ty || strcmp(ty, "function") || !json_is_string(name)) {
                api_warn(q->warning, sizeof q->warning, "built-in tool", ty ? ty : "(untyped)");
                continue;
            }
            json_t *par = json_object_get(t, "parameters");
            json_t *st = json_object_get(t, "strict");
            /* the keys and their order as an OpenAI chat client sends the same tool (name,
             * description, parameters, strict): the template dumps the tools into the prompt,
             * so a Responses request renders as the chat request an agent SDK sends for it */
            json_t *fn = json_pack("{s:O}", "name", name);
            json_t *d = json_object_get(t, "description");
            if (fn && json_is_string(d))
                json_object_set(fn, "description", d);
            if (fn)
                json_object_set_new(fn, "parameters",
                                    json_is_object(par) ? json_incref(par) : json_object());
            if (fn && json_is_boolean(st))
                json_object_set(fn, "strict", st);
            json_array_append_new(ft, json_pack("{s:s, s:o}", "type", "function", "function", fn));
            json_t *e = json_pack("{s:s, s:O, s:O, s:O}", "type", "function", "name", name,
                                  "parameters", json_is_object(par) ? par : json_null(), "strict",
                                  json_is_boolean(st) ? st : json_null());
            if (e && json_is_string(d))
                json_object_set(e, "description", d);
            json_array_append_new(et, e);
        }
    if (json_array_size(ft))
        json_object_set(q->chat, "tools", ft);
    json_decref(ft);
    json_t *tc = json_object_get(b, "tool_choice");
    if (json_is_string(tc) && !strcmp(json_string_value(tc), "none"))
        json_object_set_new(q->chat, "tool_choice", json_string("none"));
    else if (json_is_string(tc) && !strcmp(json_string_value(tc), "required"))
        json_object_set_new(q->chat, "tool_choice", json_string("required"));
    else if (json_is_object(tc) && json_is_string(json_object_get(tc, "name")))
        /* {"type": "function" | "custom", "name": N}: a custom tool is a function here */
        json_object_set_new(q->chat, "tool_choice",
                            json_pack("{s:s, s:O}", "type", "function", "name",
                                      json_object_get(tc, "name")));
    const char *eff = json_string_value(json_object_get(json_object_get(b, "reasoning"), "effort"));
    if (!rc && eff)
        json_object_set_new(q->chat, "reasoning_effort", json_string(eff));
    json_t *ptc = json_object_get(b, "parallel_tool_calls");
    if (json_is_boolean(ptc)) {
        json_object_set(q->chat, "parallel_tool_calls", ptc);
        json_object_set(q->echo, "parallel_tool_calls", ptc);
    }
    q->no_store = json_is_false(json_object_get(b, "store"));
    json_object_set_new(q->echo, "store", json_boolean(!q->no_store));
    /* echoed in the response object */
    json_object_set_new(q->echo, "tools", et);
    json_object_set_new(q->echo, "tool_choice", tc ? json_incref(tc) : json_string("auto"));
    json_object_set_new(q->echo, "instructions",
                        q->instructions ? json_string(q->instructions) : json_null());
    json_object_set_new(q->echo, "previous_response_id",
                        q->prev_id ? json_string(q->prev_id) : json_null());
    json_object_set_new(q->echo, "max_output_tokens", mo ? json_incref(mo) : json_null());
    json_object_set_new(q->echo, "reasoning", json_pack("{s:s?, s:n}", "effort", eff, "summary"));
    if (!rc)
        rc = echo_fields(b, q->echo, err);
    json_decref(stored);
    sbuf_free(&sys);
    json_decref(b);
    if (rc) {
        resp_req_deinit(q);
        return -1;
    }
    return 0;
}

/* ---- encoder ------------------------------------------------------------------------------ */

enum { IT_NONE = 0, IT_REASON, IT_MSG, IT_CALL };

struct resp_out {
    int stream, finished;
    char id[64];
    long created;
    const struct api_model *m;
    struct api_turn turn;
    json_t *echo;
    float temperature, top_p;
    struct sbuf *out;
    int seq;
    int cur, n_items; /* the open item kind, items so far (output_index of the next) */
    char item_id[64];
    struct sbuf cur_text; /* the open item's text / arguments */
    char call_id[64];
    char *call_name;
    int call_custom;             /* the open call is of a custom (free-form) tool */
    struct sbuf text, reasoning; /* the whole turn */
    json_t *output;              /* finished items */
    int status_incomplete;
    int err;
    json_t *final; /* the response object once done (for GET /v1/responses/{id}) */
};

static void put(struct resp_out *o, const char *type, json_t *obj)
{
    if (!obj) {
        o->err = CERR_NOMEM;
        return;
    }
    json_object_set_new(obj, "type", json_string(type));
    json_object_set_new(obj, "sequence_number", json_integer(o->seq++));
    char *s = json_dumps_short(obj, JSON_COMPACT);
    json_decref(obj);
    if (!s || sbuf_printf(o->out, "event: %s\ndata: %s\n\n", type, s))
        o->err = CERR_NOMEM;
    free(s);
}

static json_t *text_of(const struct sbuf *b)
{
    return api_json_text(b->p ? b->p : "", b->len);
}

static json_t *msg_item(struct resp_out *o, const char *status)
{
    json_t *content = json_array();
    if (!strcmp(status, "completed"))
        json_array_append_new(content, json_pack("{s:s, s:o, s:[], s:[]}", "type", "output_text",
                                                 "text", text_of(&o->cur_text), "annotations",
                                                 "logprobs"));
    return json_pack("{s:s, s:s, s:s, s:s, s:o}", "id", o->item_id, "type", "message", "status",
                     status, "role", "assistant", "content", content);
}

static json_t *reason_item(struct resp_out *o, int done)
{
    json_t *sum = json_array();
    if (done)
        json_array_append_new(
            sum, json_pack("{s:s, s:o}", "type", "summary_text", "text", text_of(&o->cur_text)));
    return json_pack("{s:s, s:s, s:o}", "id", o->item_id, "type", "reasoning", "summary", sum);
}

/* A custom tool's input: the string `input` of the arguments the model wrote (the whole
 * arguments text when they are not such an object). */
static json_t *custom_input(const struct sbuf *args)
{
    json_t *a = json_loadb(args->p ? args->p : "", args->len, JSON_ALLOW_NUL, NULL);
    json_t *in = json_object_get(a, "input");
    json_t *r = json_is_string(in) ? json_incref(in) : sjson(args);
    json_decref(a);
    return r;
}

static json_t *call_item(struct resp_out *o, const char *status)
{
    if (o->call_custom)
        return json_pack("{s:s, s:s, s:s, s:s, s:s, s:o}", "id", o->item_id, "type",
                         "custom_tool_call", "status", status, "call_id", o->call_id, "name",
                         o->call_name ? o->call_name : "", "input",
                         strcmp(status, "completed") ? json_string("") : custom_input(&o->cur_text));
    return json_pack("{s:s, s:s, s:s, s:s, s:s, s:o}", "id", o->item_id, "type", "function_call",
                     "status", status, "call_id", o->call_id, "name",
                     o->call_name ? o->call_name : "", "arguments", text_of(&o->cur_text));
}

static void close_item(struct resp_out *o)
{
    if (o->cur == IT_NONE)
        return;
    int oi = o->n_items;
    json_t *final = NULL;
    if (o->cur == IT_REASON) {
        if (o->stream)
            put(o, "response.reasoning_summary_text.done",
                json_pack("{s:s, s:i, s:i, s:o}", "item_id", o->item_id, "output_index", oi,
                          "summary_index", 0, "text", text_of(&o->cur_text)));
        final = reason_item(o, 1);
    } else if (o->cur == IT_MSG) {
        if (o->stream) {
            put(o, "response.output_text.done",
                json_pack("{s:s, s:i, s:i, s:o, s:[]}", "item_id", o->item_id, "output_index", oi,
                          "content_index", 0, "text", text_of(&o->cur_text), "logprobs"));
            put(o, "response.content_part.done",
                json_pack("{s:s, s:i, s:i, s:{s:s, s:o, s:[], s:[]}}", "item_id", o->item_id,
                          "output_index", oi, "content_index", 0, "part", "type", "output_text",
                          "text", text_of(&o->cur_text), "annotations", "logprobs"));
        }
        final = msg_item(o, "completed");
    } else if (o->call_custom) {
        if (o->stream) { /* the input whole: the arguments' JSON is not the input's text */
            json_t *in = custom_input(&o->cur_text);
            put(o, "response.custom_tool_call_input.delta",
                json_pack("{s:s, s:i, s:O}", "item_id", o->item_id, "output_index", oi, "delta",
                          in));
            put(o, "response.custom_tool_call_input.done",
                json_pack("{s:s, s:i, s:o}", "item_id", o->item_id, "output_index", oi, "input",
                          in));
        }
        final = call_item(o, "completed");
    } else {
        if (o->stream)
            put(o, "response.function_call_arguments.done",
                json_pack("{s:s, s:i, s:o}", "item_id", o->item_id, "output_index", oi, "arguments",
                          text_of(&o->cur_text)));
        final = call_item(o, "completed");
    }
    if (o->stream && final)
        put(o, "response.output_item.done",
            json_pack("{s:i, s:O}", "output_index", oi, "item", final));
    if (!final || json_array_append_new(o->output, final))
        o->err = CERR_NOMEM;
    o->cur = IT_NONE;
    o->n_items++;
    sbuf_clear(&o->cur_text);
    free(o->call_name);
    o->call_name = NULL;
}

static void open_item(struct resp_out *o, int kind, const char *prefix)
{
    close_item(o);
    o->cur = kind;
    api_new_id(o->item_id, sizeof o->item_id, prefix);
    if (!o->stream)
        return;
    int oi = o->n_items;
    json_t *it = kind == IT_REASON ? reason_item(o, 0)
                 : kind == IT_MSG  ? msg_item(o, "in_progress")
                                   : call_item(o, "in_progress");
    put(o, "response.output_item.added", json_pack("{s:i, s:o}", "output_index", oi, "item", it));
    if (kind == IT_MSG)
        put(o, "response.content_part.added",
            json_pack("{s:s, s:i, s:i, s:{s:s, s:s, s:[], s:[]}}", "item_id", o->item_id,
                      "output_index", oi, "content_index", 0, "part", "type", "output_text", "text",
                      "", "annotations", "logprobs"));
}

/* Whether name is a custom (free-form) tool of the request (from the echoed tools). */
static int is_custom(const struct resp_out *o, const char *name)
{
    size_t i;
    json_t *t;
    json_array_foreach(json_object_get(o->echo, "tools"), i, t)
    {
        const char *n = json_string_value(json_object_get(t, "name"));
        const char *ty = json_string_value(json_object_get(t, "type"));
        if (n && ty && !strcmp(ty, "custom") && !strcmp(n, name))
            return 1;
    }
    return 0;
}

static void on_turn(int kind, const struct tc_event *tc, const char *t, size_t n, void *ud)
{
    struct resp_out *o = ud;
    int oi;
    switch (kind) {
    case TURN_REASONING:
    case TURN_CONTENT:
        if (!n)
            return;
        if (sbuf_append(kind == TURN_REASONING ? &o->reasoning : &o->text, t, n))
            o->err = CERR_NOMEM;
        if (kind == TURN_REASONING && o->cur != IT_REASON)
            open_item(o, IT_REASON, "rs_");
        else if (kind == TURN_CONTENT && o->cur != IT_MSG)
            open_item(o, IT_MSG, "msg_");
        if (sbuf_append(&o->cur_text, t, n))
            o->err = CERR_NOMEM;
        oi = o->n_items;
        if (o->stream && kind == TURN_REASONING)
            put(o, "response.reasoning_summary_text.delta",
                json_pack("{s:s, s:i, s:i, s:o}", "item_id", o->item_id, "output_index", oi,
                          "summary_index", 0, "delta", api_json_text(t, n)));
        else if (o->stream)
            put(o, "response.output_text.delta",
                json_pack("{s:s, s:i, s:i, s:o, s:[]}", "item_id", o->item_id, "output_index", oi,
                          "content_index", 0, "delta", api_json_text(t, n), "logprobs"));
        break;
    case TURN_CALL_BEGIN:
        close_item(o);
        snprintf(o->call_id, sizeof o->call_id, "%s", tc->id);
        o->call_name = strdup(tc->name);
        if (!o->call_name)
            o->err = CERR_NOMEM;
        o->call_custom = is_custom(o, tc->name);
        open_item(o, IT_CALL, "fc_");
        break;
    case TURN_CALL_DELTA:
        if (!n)
            return;
        if (sbuf_append(&o->cur_text, t, n))
            o->err = CERR_NOMEM;
        if (o->stream && !o->call_custom)
            put(o, "response.function_call_arguments.delta",
                json_pack("{s:s, s:i, s:o}", "item_id", o->item_id, "output_index", o->n_items,
                          "delta", api_json_text(t, n)));
        break;
    case TURN_CALL_END:
        /* the final arguments (the deltas concatenate to them) */
        sbuf_clear(&o->cur_text);
        if (sbuf_append(&o->cur_text, t, n))
            o->err = CERR_NOMEM;
        close_item(o);
        break;
    }
}

int resp_out_new(struct resp_out **out, const struct api_model *m, const struct oai_req *r,
                 const struct api_prompt *p, int family, json_t *echo, struct cerr *e)
{
    *out = NULL;
    struct resp_out *o = calloc(1, sizeof *o);
    if (!o || !(o->output = json_array())) {
        free(o);
        return cerr_set(e, CERR_NOMEM, "out of memory");
    }
    o->stream = r->stream;
    o->m = m;
    o->created = (long)time(NULL);
    o->echo = json_incref(echo);
    o->temperature = r->sp.temperature;
    o->top_p = r->sp.top_p;
    api_new_id(o->id, sizeof o->id, "resp_");
    int rc = api_turn_init(&o->turn, m, p->start_in_reasoning, r->tools ? family : TC_NONE,
                           r->tools, on_turn, o, e);
    if (!rc && r->stream)
        api_turn_stream_args(&o->turn);
    if (!rc && p->forced && r->tools)
        api_turn_prime(&o->turn, p->forced); /* the api_prompt outlives the encoder */
    if (!rc && r->single_call)
        api_turn_max_calls(&o->turn, 1);
    if (rc) {
        json_decref(o->output);
        json_decref(o->echo);
        free(o);
        return rc;
    }
    *out = o;
    return 0;
}

void resp_out_free(struct resp_out *o)
{
    if (!o)
        return;
    json_decref(o->final);
    api_turn_deinit(&o->turn);
    json_decref(o->echo);
    json_decref(o->output);
    sbuf_free(&o->cur_text);
    sbuf_free(&o->text);
    sbuf_free(&o->reasoning);
    free(o->call_name);
    free(o);
}

const char *resp_out_id(const struct resp_out *o)
{
    return o->id;
}

static double round6(float f)
{
    char b[32];
    snprintf(b, sizeof b, "%.6g", (double)f);
    return strtod(b, NULL);
}

/* The response object; ev NULL: in progress. */
static json_t *response(struct resp_out *o, const struct engine_event *ev)
{
    const char *status = !ev ? "in_progress" : o->status_incomplete ? "incomplete" : "completed";
    json_t *r = json_pack("{s:s, s:s, s:I, s:s, s:s, s:O, s:b, s:b, s:f, s:f, s:s, s:{}, "
                          "s:{s:{s:s}}, s:n}",
                          "id", o->id, "object", "response", "created_at", (json_int_t)o->created,
                          "status", status, "model", o->m->id, "output",
                          ev ? o->output : json_array(), "parallel_tool_calls", 1, "store", 1,
                          "temperature", round6(o->temperature), "top_p", round6(o->top_p),
                          "truncation", "disabled", "metadata", "text", "format", "type", "text",
                          "error");
    if (!r)
        return NULL;
    if (!ev)
        json_decref(json_object_get(r, "output")); /* the fresh array's extra reference */
    json_object_update(r, o->echo);
    json_object_set_new(r, "incomplete_details",
                        ev && o->status_incomplete
                            ? json_pack("{s:s}", "reason", "max_output_tokens")
                            : json_null());
    if (ev) {
        /* reasoning_tokens: a word-count estimate of the reasoning text */
        int words = 0, in = 0;
        for (size_t i = 0; i < o->reasoning.len; i++) {
            int sp =
                o->reasoning.p[i] == ' ' || o->reasoning.p[i] == '\n' || o->reasoning.p[i] == '\t';
            words += !sp && !in;
            in = !sp;
        }
        json_object_set_new(r, "usage",
                            json_pack("{s:i, s:{s:i, s:i}, s:i, s:{s:i}, s:i}", "input_tokens",
                                      ev->n_prompt, "input_tokens_details", "cached_tokens",
                                      ev->n_cached, "cache_write_tokens", ev->n_cache_write,
                                      "output_tokens", ev->n_gen,
                                      "output_tokens_details", "reasoning_tokens",
                                      words < ev->n_gen ? words : ev->n_gen, "total_tokens",
                                      ev->n_prompt + ev->n_gen));
        json_t *u = json_object_get(r, "usage");
        if (u && ev->spec_on) /* speculative decoding's counts, as in the OpenAI usage */
            json_object_set_new(u, "speculation",
                                json_pack("{s:i, s:i, s:i}", "drafted", ev->spec_drafted,
                                          "accepted", ev->spec_accepted, "target_calls",
                                          ev->spec_calls));
    } else
        json_object_set_new(r, "usage", json_null());
    return r;
}

int resp_out_begin(struct resp_out *o, struct sbuf *sse)
{
    o->out = sse;
    o->err = 0;
    json_t *r = response(o, NULL);
    put(o, "response.created", json_pack("{s:O}", "response", r));
    put(o, "response.in_progress", json_pack("{s:o}", "response", r));
    return o->err;
}

int resp_out_event(struct resp_out *o, const struct engine_event *ev, struct sbuf *out)
{
    if (o->finished)
        return 0;
    o->out = out;
    o->err = 0;
    if (ev->type == ENGINE_EV_ERROR) {
        o->finished = 1;
        return o->stream ? resp_error_frame(out, ev->error ? ev->error : "generation failed") : 0;
    }
    if (ev->len && api_turn_push(&o->turn, ev->text, ev->len))
        o->err = CERR_NOMEM;
    if (ev->type != ENGINE_EV_DONE)
        return o->err;
    o->finished = 1;
    if (api_turn_finish(&o->turn))
        o->err = CERR_NOMEM;
    if (o->n_items == 0 && o->cur == IT_NONE) /* an empty generation: one empty message */
        open_item(o, IT_MSG, "msg_");
    close_item(o);
    o->status_incomplete = ev->finish == ENGINE_FINISH_LENGTH && !api_turn_calls(&o->turn);
    if (o->err)
        return o->err;
    json_t *r = response(o, ev);
    if (!r)
        return CERR_NOMEM;
    json_decref(o->final);
    o->final = json_incref(r);
    if (o->stream) {
        put(o, "response.completed", json_pack("{s:o}", "response", r));
        return o->err;
    }
    char *s = json_dumps_short(r, JSON_COMPACT);
    json_decref(r);
    int rc = s ? sbuf_puts(out, s) : CERR_NOMEM;
    free(s);
    return rc;
}

json_t *resp_out_object(const struct resp_out *o) { return o->finished ? o->final : NULL; }

json_t *resp_out_message(const struct resp_out *o)
{
    if (!o->finished)
        return NULL;
    json_t *m = json_pack("{s:s, s:o}", "role", "assistant", "content", text_of(&o->text));
    int n = api_turn_calls(&o->turn);
    if (m && n) {
        json_t *a = json_array();
        for (int i = 0; i < n; i++)
            json_array_append_new(a, json_pack("{s:s, s:s, s:{s:s, s:s}}", "id",
                                               tc_call_id(o->turn.tc, i), "type", "function",
                                               "function", "name", tc_call_name(o->turn.tc, i),
                                               "arguments", tc_call_args(o->turn.tc, i)));
        json_object_set_new(m, "tool_calls", a);
    }
    return m;
}

json_t *resp_out_rerendered(const struct resp_out *o)
{
    if (!o->finished || o->err)
        return NULL;
    return api_turn_rerendered(&o->turn, o->text.p, o->text.len);
}

int resp_error_frame(struct sbuf *out, const char *message)
{
    json_t *j = json_pack("{s:s, s:s, s:o, s:n}", "type", "error", "code", "server_error",
                          "message", api_json_text(message, strlen(message)), "param");
    char *s = j ? json_dumps_short(j, JSON_COMPACT) : NULL;
    json_decref(j);
    int rc = s ? sbuf_printf(out, "event: error\ndata: %s\n\n", s) : CERR_NOMEM;
    free(s);
    return rc ? CERR_NOMEM : 0;
}
