/* fuzz_web_headers.c — libFuzzer target for src/web's header parsers: Accept-Encoding
 * (web_accepts_gzip) and If-None-Match (web_etag_matches). Input: <header value>
 * [ "\n" <entity tag> ]. Any answer is fine; crashes, reads past the NUL and undefined
 * behaviour are bugs. Seeds: fuzz/corpus/fuzz_web_headers/.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "web/web.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    char *s = malloc(size + 1);
    if (!s)
        return 0;
    memcpy(s, data, size);
    s[size] = 0;
    char *nl = strchr(s, '\n');
    const char *tag = "\"0123456789abcdef\"";
    if (nl) {
        *nl = 0;
        tag = nl + 1;
    }
    (void)web_accepts_gzip(s);
    (void)web_etag_matches(s, tag);
    (void)web_etag_matches(tag, s);
    char url[64];
    (void)web_chat_url(url, sizeof url, s, 8080);
    free(s);
    return 0;
}
