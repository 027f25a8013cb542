/* prompt.c — see prompt.h. */
#include "api/prompt.h"

#include <stdlib.h>
#include <string.h>

#include "api/reasoning.h"

int api_chat_render(const struct api_model *m, const json_t *messages, const json_t *tools,
                    const json_t *kwargs, int thinking, char **text, struct api_error *err)
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
    json_decref(ctx);
    if (rc)
        return api_fail(err, 400, NULL, "prompt build failed: %s", e.msg);
    return 0;
}

static int encode(const struct api_model *m, const char *text, int flags, struct api_prompt *out,
                  struct api_error *err)
{
    struct cerr e = {0};
    if (tok_encode(m->tk, text, strlen(text), flags, &out->ids, &out->n, &e))
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

int api_chat_prompt(const struct api_model *m, const struct oai_req *r, struct api_prompt *out,
                    struct api_error *err)
{
    memset(out, 0, sizeof *out);
    out->thinking = r->thinking >= 0 ? r->thinking : m->default_thinking;
    char *text;
    if (api_chat_render(m, r->messages, r->tools, r->template_kwargs, out->thinking, &text, err))
        return -1;
    int rc = encode(m, text, TOK_PARSE_SPECIAL, out, err);
    if (!rc && m->think_open)
        out->start_in_reasoning = reasoning_prompt_open(text, m->think_open);
    free(text);
    return rc;
}

int api_completion_prompt(const struct api_model *m, const char *prompt, struct api_prompt *out,
                          struct api_error *err)
{
    memset(out, 0, sizeof *out);
    out->thinking = -1;
    return encode(m, prompt, TOK_ADD_SPECIAL, out, err);
}
