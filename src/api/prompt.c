/* prompt.c — see prompt.h. */
#include "api/prompt.h"

#include <stdlib.h>
#include <string.h>

#include "api/genhist.h"
#include "api/reasoning.h"
#include "api/toolcall.h"
#include "util/sbuf.h"
#include "util/jsonfmt.h"

int api_chat_render(const struct api_model *m, const json_t *messages, const json_t *tools,
                    const json_t *kwargs, int thinking, char **text, size_t *text_len,
                    struct api_error *err)
{
    *text = NULL;
    if (!m->tmpl)
        return api_fail(err, 400, NULL,
                        "prompt build failed: the model has no chat template (start the server "
                        "with --chat-template FILE, or use /v1/completions)");
    json_t *ctx = json_object();
    if (!ctx)
        return api_fail(err, 500, NULL, "out of memory");
    if (kwargs)
        json_object_update(ctx, (json_t *)kwargs);
    json_object_set(ctx, "messages", (json_t *)messages);
    if (tools)
        json_object_set(ctx, "tools", (json_t *)tools);
    json_object_set_new(ctx, "add_generation_prompt", json_true());
    json_object_set_new(ctx, "bos_token", json_string(m->bos_token ? m->bos_token : ""));
    json_object_set_new(ctx, "eos_token", json_string(m->eos_token ? m->eos_token : ""));
    if (thinking >= 0)
        json_object_set_new(ctx, "enable_thinking", json_boolean(thinking));
    size_t len;
    struct cerr e = {0};
    int rc = tmpl_render(m->tmpl, ctx, NULL, text, &len, &e);
    if (text_len)
        *text_len = len;
    json_decref(ctx);
    if (rc)
        return api_fail(err, 400, NULL, "prompt build failed: %s", e.msg);
    return 0;
}

/* history: splice the exact sampled ids of remembered generations (genhist.h; chat only). */
static int encode(const struct api_model *m, const char *text, size_t len, int flags,
                  struct api_prompt *out, struct api_error *err, int history)
{
    struct cerr e = {0};
    if (history ? genhist_encode(m->tk, text, len, flags, &out->ids, &out->n, &out->n_replayed,
                                 &e)
                : tok_encode(m->tk, text, len, flags, &out->ids, &out->n, &e))
        return api_fail(err, 400, NULL, "prompt build failed: %s", e.msg);
    int32_t bos = tok_bos(m->tk);
    if (out->n >= 2 && bos >= 0 && out->ids[0] == bos && out->ids[1] == bos) {
        memmove(out->ids, out->ids + 1, (size_t)(out->n - 1) * sizeof *out->ids);
        out->n--;
    }
    if (out->n == 0) {
        free(out->ids);
        out->ids = NULL;
        return api_fail(err, 400, NULL, "prompt build failed: the prompt encodes to no tokens");
    }
    return 0;
}

/* The token that opens a call in the template's family when the markup's first tag is one
 * token (<tool_call>, [TOOL_CALLS]), else -1 (a JSON-object call has no such token). */
static int32_t call_open_id(const struct api_model *m)
{
    char *pre = api_forced_call_prefix(m->tc_template_family, NULL);
    int32_t id = -1;
    size_t k = pre && (pre[0] == '<' || pre[0] == '[') ? strcspn(pre, ">]") : 0;
    if (k && pre[k]) {
        pre[k + 1] = 0;
        id = tok_find(m->tk, pre);
    }
    free(pre);
    return id;
}

int api_chat_prompt(const struct api_model *m, const struct oai_req *r, struct api_prompt *out,
                    struct api_error *err)
{
    memset(out, 0, sizeof *out);
    out->ban = -1;
    out->thinking = r->thinking >= 0 ? r->thinking : m->default_thinking;
    const json_t *tools = r->tools;
    if (!tools && r->none_tools && m->keep_tools_on_none) {
        /* tool_choice "none", tools kept: the prompt is the one the other turns render (their
         * cached prefix stays usable); no call is parsed and none can open */
        tools = r->none_tools;
        out->ban = call_open_id(m);
    }
    char *text;
    const json_t *msgs = r->messages;
    json_t *head = NULL;
    const char *prefill = NULL;
    if (r->continue_final) {
        /* render the conversation before the final assistant message with the generation
         * prompt, then write that message's text: the reply continues it */
        size_t n = json_array_size(r->messages);
        head = json_array();
        for (size_t i = 0; head && i + 1 < n; i++)
            json_array_append(head, json_array_get(r->messages, i));
        if (!head)
            return api_fail(err, 500, NULL, "out of memory");
        msgs = head;
        prefill = json_string_value(json_object_get(json_array_get(r->messages, n - 1), "content"));
    }
    size_t tl = 0;
    int rr = api_chat_render(m, msgs, tools, r->template_kwargs, out->thinking, &text, &tl, err);
    json_decref(head);
    if (rr)
        return -1;
    if (prefill && *prefill) {
        size_t a = tl, b = strlen(prefill);
        char *t2 = realloc(text, a + b + 1);
        if (!t2) {
            free(text);
            return api_fail(err, 500, NULL, "out of memory");
        }
        memcpy(t2 + a, prefill, b + 1);
        text = t2;
        tl = a + b;
    }
    if (r->tool_choice && r->tools) {
        /* tool_choice required / a named function: the generation starts inside the call's
         * markup, so the model can only write a call */
        const char *name = r->tool_choice == 2 ? r->tool_name : NULL;
        if (!name && json_array_size(r->tools) == 1) { /* "required" with one tool: that one */
            json_t *t0 = json_array_get(r->tools, 0), *f = json_object_get(t0, "function");
            name = json_string_value(json_object_get(f ? f : t0, "name"));
        }
        out->forced = api_forced_call_prefix(m->tc_template_family, name);
        if (!out->forced) {
            free(text);
            return api_fail(err, 400, "tool_choice",
                            "tool_choice \"required\" or a named function is not supported for "
                            "this model's tool-call format; use \"auto\"");
        }
        size_t a = tl, b = strlen(out->forced);
        char *t2 = realloc(text, a + b + 1);
        if (!t2) {
            free(text);
            return api_fail(err, 500, NULL, "out of memory");
        }
        memcpy(t2 + a, out->forced, b + 1);
        text = t2;
        tl = a + b;
    }
    int rc = encode(m, text, tl, TOK_PARSE_SPECIAL, out, err, 1);
    if (!rc && m->think_open && !out->forced)
        out->start_in_reasoning = reasoning_prompt_open(text, m->think_open);
    out->think_open = m->think_open;
    out->think_close = m->think_close;
    free(text);
    if (rc) {
        free(out->forced);
        out->forced = NULL;
    }
    return rc;
}

int api_chat_ids(const struct api_model *m, const json_t *messages, const json_t *tools,
                 const json_t *kwargs, int thinking, int32_t **ids, int *n,
                 struct api_error *err)
{
    *ids = NULL;
    *n = 0;
    char *text;
    size_t tl = 0;
    if (api_chat_render(m, messages, tools, kwargs, thinking, &text, &tl, err))
        return -1;
    struct api_prompt p = {0};
    int rc = encode(m, text, tl, TOK_PARSE_SPECIAL, &p, err, 1);
    free(text);
    if (!rc) {
        *ids = p.ids;
        *n = p.n;
    }
    return rc;
}

char *api_forced_call_prefix(int family, const char *name)
{
    struct sbuf b = {0};
    json_t *js = name ? json_string(name) : NULL;
    char *q = js ? json_dumps_short(js, JSON_ENCODE_ANY) : NULL; /* the name as a JSON string */
    json_decref(js);
    if (name && !q)
        return NULL;
    int ok = 1;
    switch (family) {
    case TC_HERMES:
    case TC_GENERIC:
        ok = name ? !sbuf_printf(&b, "<tool_call>\n{\"name\": %s, \"arguments\": {", q)
                  : !sbuf_puts(&b, "<tool_call>\n{\"name\": \"");
        break;
    case TC_QWEN3_XML:
        ok = name ? !sbuf_printf(&b, "<tool_call>\n<function=%s>\n", name)
                  : !sbuf_puts(&b, "<tool_call>\n<function=");
        break;
    case TC_LLAMA3:
        ok = name ? !sbuf_printf(&b, "{\"name\": %s, \"parameters\": {", q)
                  : !sbuf_puts(&b, "{\"name\": \"");
        break;
    case TC_MISTRAL:
        ok = name ? !sbuf_printf(&b, "[TOOL_CALLS][{\"name\": %s, \"arguments\": {", q)
                  : !sbuf_puts(&b, "[TOOL_CALLS][{\"name\": \"");
        break;
    default:
        ok = 0;
    }
    free(q);
    if (!ok) {
        sbuf_free(&b);
        return NULL;
    }
    return b.p;
}

int api_completion_prompt(const struct api_model *m, const char *prompt, size_t len,
                          struct api_prompt *out, struct api_error *err)
{
    memset(out, 0, sizeof *out);
    out->thinking = -1;
    out->ban = -1;
    return encode(m, prompt, len, TOK_ADD_SPECIAL, out, err, 0);
}
