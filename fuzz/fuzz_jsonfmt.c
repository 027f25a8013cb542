/* fuzz_jsonfmt.c — libFuzzer target for util/jsonfmt (shortest round-trip reals).
 *
 * Input: any bytes, as a NUL-terminated text. Checks: json_shorten_reals never grows the
 * text and never touches anything but number tokens outside strings (the same text once the
 * number tokens are removed); when jansson reads the input as JSON, json_dumps_short of it
 * reads back equal (json_equal: every real the same double) and is no longer than
 * json_dumps. Seeds: fuzz/corpus/fuzz_jsonfmt/.
 */
#include <jansson.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "util/jsonfmt.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void require(int ok)
{
    if (!ok)
        __builtin_trap();
}

/* s without its number tokens outside strings (the scanner's own notion of a token). */
static void strip_numbers(const char *s, char *out)
{
    int in_str = 0;
    while (*s) {
        if (in_str) {
            if (*s == '\\' && s[1])
                *out++ = *s++;
            else if (*s == '"')
                in_str = 0;
            *out++ = *s++;
        } else if (*s == '"') {
            in_str = 1;
            *out++ = *s++;
        } else if (*s == '-' || (*s >= '0' && *s <= '9')) {
            while (*s && strchr("+-0123456789.eE", *s))
                s++;
        } else {
            *out++ = *s++;
        }
    }
    *out = 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    char *s = malloc(size + 1), *orig = malloc(size + 1), *a = malloc(size + 1),
         *b = malloc(size + 1);
    require(s && orig && a && b);
    memcpy(s, data, size);
    s[size] = 0;
    memcpy(orig, s, size + 1);
    json_shorten_reals(s);
    require(strlen(s) <= strlen(orig));
    strip_numbers(orig, a);
    strip_numbers(s, b);
    require(strcmp(a, b) == 0);
    json_t *j = json_loadb((const char *)data, size, JSON_DECODE_ANY, NULL);
    if (j) {
        char *full = json_dumps(j, JSON_ENCODE_ANY | JSON_COMPACT);
        char *sh = json_dumps_short(j, JSON_ENCODE_ANY | JSON_COMPACT);
        require(full && sh && strlen(sh) <= strlen(full));
        json_t *back = json_loads(sh, JSON_DECODE_ANY, NULL);
        require(back && json_equal(j, back));
        json_decref(back);
        free(full);
        free(sh);
        json_decref(j);
    }
    free(s);
    free(orig);
    free(a);
    free(b);
    return 0;
}
