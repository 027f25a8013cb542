/* fuzz_regex.c — libFuzzer target for the regex front end (gram_from_regex) and the
 * JSON-string form the schema compiler uses. Input: a regex, a NUL, a string to match.
 * Must return an error or a grammar; never crash. Seeds: fuzz/corpus/fuzz_regex/. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "engine/grammar/gram.h"
#include "engine/grammar/gram_int.h"
#include "util/sbuf.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    const uint8_t *nul = memchr(data, 0, size);
    size_t rl = nul ? (size_t)(nul - data) : size;
    struct gram *g = NULL;
    struct cerr e = {0};
    if (gram_from_regex(&g, (const char *)data, rl, &e) == 0) {
        if (nul)
            (void)gram_accepts(g, (const char *)nul + 1, size - rl - 1);
        gram_unref(g);
    }
    struct sbuf b = {0};
    (void)gram_regex_to_ebnf((const char *)data, rl, 1, &b, &e);
    sbuf_free(&b);
    return 0;
}
