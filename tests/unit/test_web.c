/* test_web.c — src/web's pure parts: Accept-Encoding and If-None-Match parsing, the chat URL
 * shown for a bind host, and the embedded asset table (every file's gzip stream inflates to
 * its recorded size, index.html names only files that exist, the assets stay under the
 * issue's 1.5 MB bound). The HTTP behaviour and the page in a real browser: tests/e2e/
 * test_web.py and test_web_browser.py. */
#include "harness.h"

#include <zlib.h>

#include "web/web.h"
#include "web/web_assets.h"

static void test_accept_gzip(void)
{
    CHECK(web_accepts_gzip("gzip"));
    CHECK(web_accepts_gzip("gzip, deflate, br"));
    CHECK(web_accepts_gzip("deflate, GZIP"));
    CHECK(web_accepts_gzip("br;q=1.0, gzip;q=0.8"));
    CHECK(web_accepts_gzip("gzip ; q=0.5"));
    CHECK(web_accepts_gzip("*"));
    CHECK(web_accepts_gzip("identity, *;q=0.1"));
    CHECK(!web_accepts_gzip(NULL));
    CHECK(!web_accepts_gzip(""));
    CHECK(!web_accepts_gzip("identity"));
    CHECK(!web_accepts_gzip("gzip;q=0"));
    CHECK(!web_accepts_gzip("gzip;q=0.000"));
    CHECK(!web_accepts_gzip("x-gzip2, gzipx, br"));
    CHECK(!web_accepts_gzip(",,;;=q"));
    CHECK(!web_accepts_gzip("deflate;q=1, br"));
}

static void test_etag(void)
{
    const char *t = "\"0123abcd\"";
    CHECK(web_etag_matches("\"0123abcd\"", t));
    CHECK(web_etag_matches("W/\"0123abcd\"", t));
    CHECK(web_etag_matches("\"x\", \"0123abcd\"", t));
    CHECK(web_etag_matches("*", t));
    CHECK(!web_etag_matches("\"0123abce\"", t));
    CHECK(!web_etag_matches("\"0123abcd", t));
    CHECK(!web_etag_matches("", t));
    CHECK(!web_etag_matches(NULL, t));
    CHECK(!web_etag_matches("\"0123abcd\"", NULL));
    CHECK(!web_etag_matches("\"", t));
}

static void test_url(void)
{
    char b[128];
    web_chat_url(b, sizeof b, "0.0.0.0", 8080);
    CHECK_STR(b, "http://localhost:8080/#/chat");
    web_chat_url(b, sizeof b, "::", 1);
    CHECK_STR(b, "http://localhost:1/#/chat");
    web_chat_url(b, sizeof b, "127.0.0.1", 2);
    CHECK_STR(b, "http://127.0.0.1:2/#/chat");
    web_chat_url(b, sizeof b, "::1", 3);
    CHECK_STR(b, "http://[::1]:3/#/chat");
    web_chat_url(b, sizeof b, NULL, 4);
    CHECK_STR(b, "http://localhost:4/#/chat");
    CHECK(web_chat_url(b, 8, "example.org", 5) >= 8);
}

static int find(const char *path)
{
    for (int i = 0; i < web_n_assets; i++)
        if (!strcmp(web_assets[i].path, path))
            return i;
    return -1;
}

static void test_assets(void)
{
    CHECK(web_n_assets > 10);
    CHECK_MSG(web_assets_bytes() <= 1500000, "%zu bytes embedded", web_assets_bytes());
    size_t sum = 0;
    for (int i = 0; i < web_n_assets; i++) {
        const struct web_asset *a = &web_assets[i];
        sum += a->gz_len;
        unsigned char *b = malloc(a->raw_len + 1);
        uLongf n = (uLongf)a->raw_len;
        z_stream z = {0};
        CHECK(inflateInit2(&z, 31) == Z_OK);
        z.next_in = (unsigned char *)a->gz;
        z.avail_in = (uInt)a->gz_len;
        z.next_out = b;
        z.avail_out = (uInt)a->raw_len + 1;
        CHECK_MSG(inflate(&z, Z_FINISH) == Z_STREAM_END, "%s", a->path);
        CHECK_EQ_INT(a->raw_len + 1 - z.avail_out, n);
        inflateEnd(&z);
        CHECK(a->etag[0] == '"' && a->etag[strlen(a->etag) - 1] == '"');
        CHECK(a->path[0] == '/' && a->ctype[0]);
        free(b);
    }
    CHECK_EQ_INT(sum, web_assets_bytes());
    int ix = find("/index.html");
    CHECK(ix >= 0);
    if (ix < 0)
        return;
    const struct web_asset *a = &web_assets[ix];
    char *html = calloc(1, a->raw_len + 1);
    uLongf n = (uLongf)a->raw_len;
    z_stream z = {0};
    inflateInit2(&z, 31);
    z.next_in = (unsigned char *)a->gz;
    z.avail_in = (uInt)a->gz_len;
    z.next_out = (unsigned char *)html;
    z.avail_out = (uInt)n;
    inflate(&z, Z_FINISH);
    inflateEnd(&z);
    int refs = 0;
    for (const char *p = html; (p = strstr(p, "\"/assets/")) != NULL; p++) {
        const char *e = strchr(p + 1, '"');
        char path[256];
        snprintf(path, sizeof path, "%.*s", (int)(e - p - 1), p + 1);
        CHECK_MSG(find(path) >= 0, "index.html names %s, which is not embedded", path);
        CHECK_MSG(web_assets[find(path) >= 0 ? find(path) : 0].immutable, "%s", path);
        refs++;
    }
    CHECK(refs >= 9);
    free(html);
}

int main(void)
{
    RUN(test_accept_gzip);
    RUN(test_etag);
    RUN(test_url);
    RUN(test_assets);
    return harness_done();
}
