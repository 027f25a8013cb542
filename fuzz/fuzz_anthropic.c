/* fuzz_anthropic.c — libFuzzer target for the Anthropic Messages surface (request mapping,
 * the shared chat parser, exact-turn replay, template rendering, and the encoder with
 * reasoning and tool-call parsing, streaming and not).
 *
 * Input: <body> [ "\n\x00\n" <generation text> ]. The body goes through anth_to_chat (as a
 * messages request and as count_tokens) and oai_parse; accepted requests are rendered by a
 * small template and their generation text is encoded with tools on (the Hermes/generic
 * parser), fed in pieces whose sizes come from the text itself. Each turn's calls land in
 * the replay store, and replay_apply runs on every accepted request, so later inputs hit
 * stored turns too. Errors are expected; crashes, leaks and undefined behaviour are bugs.
 * Seeds: fuzz/corpus/fuzz_anthropic/.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "api/anthropic.h"
#include "api/oai_req.h"
#include "api/prompt.h"
#include "api/replay.h"
#include "api/toolcall.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static const char g_tmpl[] =
    "{%- if tools %}{{ tools | tojson }}{% endif -%}"
    "{%- for m in messages -%}<|{{ m.role }}|>{{ m.content }}"
    "{%- if m.tool_calls %}{% for c in m.tool_calls %}{{ c.function.name }}"
    "{{ c.function.arguments | tojson }}{% endfor %}{% endif %}\n{%- endfor -%}"
    "{%- if add_generation_prompt %}<|assistant|>{% if enable_thinking %}<think>\n{% endif %}"
    "{% endif %}";

static void encode(const struct api_model *m, const struct oai_req *r, int stream, const char *gen,
                   size_t n)
{
    struct api_prompt p = {.n = 7};
    struct oai_req rr = *r;
    rr.stream = stream;
    struct anth_out *o = NULL;
    if (anth_out_new(&o, m, &rr, &p, TC_GENERIC, NULL))
        return;
    struct sbuf out = {0};
    if (stream)
        anth_out_begin(o, &out);
    size_t i = 0;
    while (i < n) {
        size_t k = 1 + (unsigned char)gen[i] % 7;
        if (k > n - i)
            k = n - i;
        struct engine_event ev = {.type = ENGINE_EV_DELTA, .text = gen + i, .len = k};
        anth_out_event(o, &ev, &out);
        i += k;
    }
    struct engine_event done = {.type = ENGINE_EV_DONE,
                                .finish = n % 3 == 0 ? ENGINE_FINISH_STOP : (int)(n % 3),
                                .stop_index = 0,
                                .text = "",
                                .n_prompt = 7,
                                .n_gen = (int)n};
    anth_out_event(o, &done, &out);
    sbuf_free(&out);
    anth_out_free(o);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    static struct tmpl *t;
    if (!t && tmpl_parse(&t, g_tmpl, strlen(g_tmpl), NULL))
        abort();
    const char *body = (const char *)data, *gen = "";
    size_t blen = size, glen = 0;
    const uint8_t *sep = NULL;
    for (size_t i = 0; i + 3 <= size && !sep; i++)
        if (data[i] == '\n' && data[i + 1] == 0 && data[i + 2] == '\n')
            sep = data + i;
    if (sep) {
        blen = (size_t)(sep - data);
        gen = (const char *)sep + 3;
        glen = size - blen - 3;
    }
    struct sampler_params d;
    sampler_params_default(&d);
    struct api_model m = {.id = "fuzz",
                          .tmpl = t,
                          .think_open = "<think>",
                          .think_close = "</think>",
                          .default_thinking = -1,
                          .n_ctx = 4096};
    for (int count = 0; count <= 1; count++) {
        struct api_error err;
        json_t *chat = NULL;
        char warn[256];
        if (anth_to_chat(body, blen, count, &chat, warn, sizeof warn, &err))
            continue;
        char *s = json_dumps(chat, JSON_COMPACT);
        json_decref(chat);
        if (!s)
            continue;
        struct oai_req r;
        int rc = oai_parse(&r, OAI_CHAT, s, strlen(s), &d, 1000, &err);
        free(s);
        if (rc)
            continue;
        replay_apply(r.messages);
        char *text = NULL;
        api_chat_render(&m, r.messages, r.tools, r.template_kwargs, r.thinking, &text, NULL, &err);
        free(text);
        if (!count) {
            encode(&m, &r, 0, gen, glen);
            encode(&m, &r, 1, gen, glen);
        }
        oai_req_deinit(&r);
    }
    free(anth_error_body(&(struct api_error){.status = 400 + (int)(size % 200)}));
    return 0;
}
