/* fuzz_oai_req.c — libFuzzer target for the OpenAI request parser and the response encoder.
 *
 * The input is a request body. It is parsed as a chat request and as a completions request
 * (oai_parse with a vocabulary of 1000 ids); when a chat request is accepted, its messages
 * are rendered through a small real-shaped chat template, and a synthetic generation (text
 * with think tags and invalid UTF-8, logprobs) is encoded streaming and not. Errors are
 * expected; crashes, leaks and undefined behaviour are bugs.
 * Seeds: fuzz/corpus/fuzz_oai_req/.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "api/oai_out.h"
#include "api/oai_req.h"
#include "api/prompt.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static const char g_tmpl[] =
    "{%- if tools %}{{ tools | tojson }}{% endif -%}"
    "{%- for m in messages -%}<|{{ m.role }}|>{{ m.content }}"
    "{%- if m.tool_calls %}{% for c in m.tool_calls %}{{ c.function.name }}"
    "{{ c.function.arguments | tojson }}{% endfor %}{% endif %}\n{%- endfor -%}"
    "{%- if add_generation_prompt %}<|assistant|>{% if enable_thinking %}<think>\n{% endif %}"
    "{% endif %}";

static void encode(const struct api_model *m, const struct oai_req *r, const struct api_prompt *p)
{
    struct oai_out *o = NULL;
    if (oai_out_new(&o, m, r, p, "serial", NULL))
        return;
    struct sbuf out = {0};
    oai_out_begin(o, &out);
    static const char *const pieces[] = {"Hel", "lo <th", "ink>why", "\xff\xfe", "</think>", "\n\nok"};
    for (int i = 0; i < 6; i++) {
        struct sampler_logprob lp = {.id = i, .logprob = -0.5f, .n_top = 2,
                                     .top_id = {i, i + 1}, .top_lp = {-0.5f, -1.0f}};
        struct engine_event ev = {.type = ENGINE_EV_DELTA, .token = i, .text = pieces[i],
                                  .len = strlen(pieces[i]), .lp = &lp};
        oai_out_event(o, &ev, &out);
    }
    struct engine_event done = {.type = ENGINE_EV_DONE, .finish = ENGINE_FINISH_LENGTH,
                                .text = "", .n_prompt = 3, .n_gen = 6};
    oai_out_event(o, &done, &out);
    sbuf_free(&out);
    oai_out_free(o);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    static struct tmpl *t;
    if (!t && tmpl_parse(&t, g_tmpl, strlen(g_tmpl), NULL))
        abort();
    struct sampler_params d;
    sampler_params_default(&d);
    struct api_model m = {.id = "fuzz", .tmpl = t, .think_open = "<think>",
                          .think_close = "</think>", .default_thinking = -1, .n_ctx = 4096};
    for (int kind = OAI_CHAT; kind <= OAI_COMPLETION; kind++) {
        struct oai_req r;
        struct api_error err;
        if (oai_parse(&r, kind, (const char *)data, size, &d, 1000, &err))
            continue;
        struct api_prompt p = {0};
        if (kind == OAI_CHAT) {
            char *text = NULL;
            if (api_chat_render(&m, r.messages, r.tools, r.template_kwargs, r.thinking, &text, NULL,
                                &err) == 0)
                p.start_in_reasoning = strstr(text, "<think>\n") != NULL;
            free(text);
        }
        encode(&m, &r, &p);
        oai_req_deinit(&r);
    }
    return 0;
}
