/* fuzz_template.c — libFuzzer target for the chat-template lexer, parser and evaluator.
 *
 * The input is a template source. It is parsed with tmpl_parse(); when accepted it is
 * rendered against a fixed conversation (system/user/assistant turns, a tool definition,
 * a tool call with object arguments, a tool result, reasoning, non-ASCII text) with small
 * step and memory bounds, so ASan/UBSan see every path a hostile template can reach and
 * a slow input still ends quickly. Errors are expected; crashes, leaks and hangs are bugs.
 * Seeds: fuzz/corpus/fuzz_template/ (the real templates and the feature snippets).
 */
#include <jansson.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "template/tmpl.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static const char g_ctx[] =
    "{\"messages\": ["
    "{\"role\": \"system\", \"content\": \"You are helpful.\"},"
    "{\"role\": \"user\", \"content\": \"Gr\\u00fc\\u00dfe \\ud83d\\udc4b\\n\\tTabs  \"},"
    "{\"role\": \"assistant\", \"content\": \"\", \"reasoning_content\": \"think\","
    " \"tool_calls\": [{\"id\": \"call12345\", \"type\": \"function\", \"function\":"
    " {\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\", \"n\": 2.5}}}]},"
    "{\"role\": \"tool\", \"tool_call_id\": \"call12345\", \"content\": \"{\\\"t\\\": 21}\"},"
    "{\"role\": \"assistant\", \"content\": \"<think>x</think>It is 21.\"},"
    "{\"role\": \"user\", \"content\": [{\"type\": \"text\", \"text\": \"more\"}]}],"
    " \"tools\": [{\"type\": \"function\", \"function\": {\"name\": \"get_weather\","
    " \"description\": \"Weather.\", \"parameters\": {\"type\": \"object\", \"properties\":"
    " {\"city\": {\"type\": \"string\"}}, \"required\": [\"city\"]}}}],"
    " \"documents\": null, \"add_generation_prompt\": true, \"enable_thinking\": false,"
    " \"bos_token\": \"<s>\", \"eos_token\": \"</s>\", \"n\": 3, \"f\": -1.5, \"big\": 9007199254740993}";

static json_t *g_json;

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (!g_json)
        g_json = json_loads(g_ctx, 0, NULL);
    struct tmpl *t = NULL;
    struct cerr e;
    if (tmpl_parse(&t, (const char *)data, size, &e) != 0)
        return 0;
    struct tmpl_opts o = {.now_unix = 1721952000, .max_steps = 20000, .max_bytes = 4 << 20};
    char *out = NULL;
    size_t len = 0;
    if (tmpl_render(t, g_json, &o, &out, &len, &e) == 0 && len && out[len] != 0)
        abort(); /* the output must be NUL-terminated at len */
    free(out);
    tmpl_free(t);
    return 0;
}
