/* fuzz_schema.c — libFuzzer target for the JSON Schema compiler. Input: JSON text; when it
 * parses, gram_from_schema must give a grammar or an error (never crash, never loop); the
 * grammar's matcher then takes a few fixed JSON texts. Seeds: fuzz/corpus/fuzz_schema/. */
#include <jansson.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "engine/grammar/gram_schema.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    json_error_t je;
    json_t *s = json_loadb((const char *)data, size, JSON_DECODE_ANY, &je);
    if (!s)
        return 0;
    struct gram *g = NULL;
    struct cerr e = {0};
    char kw[64];
    if (gram_from_schema(&g, s, 0, kw, &e) == 0) {
        static const char *const texts[] = {"{}", "[]", "\"x\"", "1", "null", "{\"a\":1}", "[1,\"b\"]"};
        for (size_t i = 0; i < sizeof texts / sizeof texts[0]; i++)
            (void)gram_accepts(g, texts[i], strlen(texts[i]));
        gram_unref(g);
    }
    json_decref(s);
    return 0;
}
