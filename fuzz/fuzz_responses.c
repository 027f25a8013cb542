/* fuzz_responses.c — libFuzzer target for the OpenAI Responses surface (request mapping
 * with previous_response_id splicing, the shared chat parser, exact-turn replay, template
 * rendering, and the encoder with reasoning and tool calls, streaming and not).
 *
 * Input: <body> [ "\n\x00\n" <generation text> ]. The body goes through resp_to_chat with a
 * lookup that knows one stored conversation ("resp_x": a user turn and an assistant turn
 * with a call) and oai_parse; accepted requests are rendered by a small template and the
 * generation text is encoded with tools on, in pieces whose sizes come from the text. The
 * assistant message the store would save is built too. Errors are expected; crashes,
 * leaks and undefined behaviour are bugs. Seeds: fuzz/corpus/fuzz_responses/.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "api/oai_req.h"
#include "api/prompt.h"
#include "api/replay.h"
#include "api/responses.h"
#include "api/toolcall.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static const char g_tmpl[] =
    "{%- if tools %}{{ tools | tojson }}{% endif -%}"
    "{%- for m in messages -%}<|{{ m.role }}|>{{ m.content }}"
    "{%- if m.tool_calls %}{% for c in m.tool_calls %}{{ c.function.name }}"
    "{{ c.function.arguments | tojson }}{% endfor %}{% endif %}\n{%- endfor -%}"
    "{%- if add_generation_prompt %}<|assistant|>{% if enable_thinking %}<think>\n{% endif %}"
    "{% endif %}";

static json_t *lookup(const char *id, void *ud)
{
    (void)ud;
    if (strcmp(id, "resp_x"))
        return NULL;
    return json_loads("{\"messages\":[{\"role\":\"user\",\"content\":\"hi\"},{\"role\":"
                      "\"assistant\",\"content\":\"\",\"tool_calls\":[{\"id\":\"call_1\","
                      "\"type\":\"function\",\"function\":{\"name\":\"f\",\"arguments\":"
                      "\"{}\"}}]}],\"instructions\":\"be brief\"}",
                      0, NULL);
}

static void encode(const struct api_model *m, const struct oai_req *r, json_t *echo, int stream,
                   const char *gen, size_t n)
{
    struct api_prompt p = {.n = 5, .start_in_reasoning = (int)(n & 1)};
    struct oai_req rr = *r;
    rr.stream = stream;
    struct resp_out *o = NULL;
    if (resp_out_new(&o, m, &rr, &p, TC_GENERIC, echo, NULL))
        return;
    struct sbuf out = {0};
    if (stream)
        resp_out_begin(o, &out);
    size_t i = 0;
    while (i < n) {
        size_t k = 1 + (unsigned char)gen[i] % 5;
        if (k > n - i)
            k = n - i;
        struct engine_event ev = {.type = ENGINE_EV_DELTA, .text = gen + i, .len = k};
        resp_out_event(o, &ev, &out);
        i += k;
    }
    struct engine_event done = {
        .type = ENGINE_EV_DONE, .finish = (int)(n % 3), .text = "", .n_prompt = 5, .n_gen = (int)n};
    resp_out_event(o, &done, &out);
    json_decref(resp_out_message(o));
    sbuf_free(&out);
    resp_out_free(o);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    static struct tmpl *t;
    if (!t && tmpl_parse(&t, g_tmpl, strlen(g_tmpl), NULL))
        abort();
    const char *body = (const char *)data, *gen = "";
    size_t blen = size, glen = 0;
    for (size_t i = 0; i + 3 <= size; i++)
        if (data[i] == '\n' && data[i + 1] == 0 && data[i + 2] == '\n') {
            blen = i;
            gen = (const char *)data + i + 3;
            glen = size - i - 3;
            break;
        }
    struct sampler_params d;
    sampler_params_default(&d);
    struct api_model m = {.id = "fuzz",
                          .tmpl = t,
                          .think_open = "<think>",
                          .think_close = "</think>",
                          .default_thinking = -1,
                          .n_ctx = 4096};
    struct resp_req q;
    struct api_error err;
    if (resp_to_chat(body, blen, lookup, NULL, &q, &err))
        return 0;
    char *s = json_dumps(q.chat, JSON_COMPACT);
    struct oai_req r;
    if (s && oai_parse(&r, OAI_CHAT, s, strlen(s), &d, 1000, &err) == 0) {
        replay_apply(r.messages);
        char *text = NULL;
        api_chat_render(&m, r.messages, r.tools, r.template_kwargs, r.thinking, &text, NULL, &err);
        free(text);
        encode(&m, &r, q.echo, 0, gen, glen);
        encode(&m, &r, q.echo, 1, gen, glen);
        oai_req_deinit(&r);
    }
    free(s);
    resp_req_deinit(&q);
    return 0;
}
