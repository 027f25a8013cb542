/* test_hscan.c — the request-framing scan behind the early 413 (src/http/hscan.c).
 *
 * Streams of requests fed whole, byte by byte and in every two-piece split must give the
 * same answer: where the oversized request starts, its index, declared length and path;
 * or that the scan gave up (a framing evhttp might read differently). test_http.c checks
 * the server's behaviour built on it.
 */
#include <stdint.h>
#include <string.h>

#include "harness.h"
#include "http/hscan.h"

#define MAXB 1024

struct res {
    int st;
    uint64_t start, cl;
    uint32_t idx;
    char path[128];
};

static struct res feed_split(const char *s, size_t n, size_t cut, int bytewise)
{
    struct hscan h;
    hscan_init(&h);
    if (bytewise) {
        for (size_t i = 0; i < n; i++)
            hscan_feed(&h, s + i, 1, MAXB);
    } else {
        hscan_feed(&h, s, cut, MAXB);
        hscan_feed(&h, s + cut, n - cut, MAXB);
    }
    struct res r = {h.status, h.req_start, h.cl, h.n_req, ""};
    memcpy(r.path, h.path, sizeof r.path);
    if (h.pos != n)
        r.st = 99; /* the position must count every byte fed */
    return r;
}

/* Checks every split of s against the expected outcome. */
static void expect(const char *s, int st, uint64_t start, uint32_t idx, uint64_t cl,
                   const char *path)
{
    size_t n = strlen(s);
    int bad = 0;
    for (size_t cut = 0; cut <= n + 1 && !bad; cut++) {
        struct res r = feed_split(s, n, cut > n ? 0 : cut, cut > n);
        if (r.st != st || (st == HSCAN_BIG && (r.start != start || r.idx != idx || r.cl != cl ||
                                               strcmp(r.path, path) != 0))) {
            fprintf(stderr, "split %zu of \"%s\": status %d start %llu idx %u cl %llu path %s\n",
                    cut, s, r.st, (unsigned long long)r.start, r.idx, (unsigned long long)r.cl,
                    r.path);
            bad = 1;
        }
    }
    CHECK_MSG(!bad, "%s", s);
}

static void test_big(void)
{
    /* alone */
    expect("POST /v1/chat HTTP/1.1\r\nHost: x\r\nContent-Length: 1025\r\n\r\n", HSCAN_BIG, 0, 0,
           1025, "/v1/chat");
    /* at the limit: not big, and its body is skipped */
    expect("POST /a HTTP/1.1\r\nContent-Length: 1024\r\n\r\n", HSCAN_MORE, 0, 0, 0, "");
    /* saturating, mixed case, blanks around the value, Expect, query cut from the path */
    expect("PUT /b?q=1 HTTP/1.1\r\nExpect: 100-continue\r\ncOnTeNt-LeNgTh:\t 99999999999999999999999"
           " \r\n\r\n",
           HSCAN_BIG, 0, 0, UINT64_MAX, "/b");
    /* behind a request with a body (the body holds text that looks like headers) */
    const char *s = "POST /e HTTP/1.1\r\nContent-Length: 30\r\n\r\nGET / HTTP/1.1\r\n\r\n0123456789ab"
                    "PATCH /f HTTP/1.1\r\nContent-Length: 2000\r\n\r\nxyz";
    expect(s, HSCAN_BIG, (uint64_t)(strstr(s, "PATCH") - s), 1, 2000, "/f");
    /* behind body-less requests, LF line ends, a GET with Content-Length: 0 */
    s = "GET /a HTTP/1.1\nHost: x\n\nGET /b HTTP/1.0\nContent-Length: 0\n\n"
        "POST /c HTTP/1.1\nContent-Length: 4096\n\n";
    expect(s, HSCAN_BIG, (uint64_t)(strstr(s, "POST") - s), 2, 4096, "/c");
    /* a header line longer than what is kept is skipped */
    char big[700];
    int k = snprintf(big, sizeof big, "POST /g HTTP/1.1\r\nX-Long: ");
    memset(big + k, 'v', 500);
    snprintf(big + k + 500, sizeof big - (size_t)k - 500, "\r\nContent-Length: 1100\r\n\r\n");
    expect(big, HSCAN_BIG, 0, 0, 1100, "/g");
    /* a declared body over the limit on a method without a body is still over the limit */
    expect("GET /h HTTP/1.1\r\nContent-Length: 5000\r\n\r\n", HSCAN_BIG, 0, 0, 5000, "/h");
}

static void test_more(void)
{
    expect("", HSCAN_MORE, 0, 0, 0, "");
    expect("POST /a HTTP/1.1\r\nContent-Len", HSCAN_MORE, 0, 0, 0, "");
    expect("POST /a HTTP/1.1\r\nContent-Length: 5\r\n\r\nab", HSCAN_MORE, 0, 0, 0, "");
    expect("GET /a HTTP/1.1\r\n\r\nGET /b HTTP/1.1\r\n\r\n", HSCAN_MORE, 0, 0, 0, "");
    /* "Content-Length " (a blank before the colon) is another header to evhttp too */
    expect("GET /a HTTP/1.1\r\nContent-Length : 9999\r\n\r\n", HSCAN_MORE, 0, 0, 0, "");
}

static void test_lost(void)
{
    static const char *const L[] = {
        "POST /a HTTP/1.1\r\nTransfer-Encoding: gzip, chunked\r\n\r\n",
        "POST /a HTTP/1.1\r\nTransfer-Encoding: chunked\r\nContent-Length: 3\r\n\r\n",
        "POST /a HTTP/1.1\r\nTransfer-Encoding: chunked\r\nTransfer-Encoding: chunked\r\n\r\n",
        "GET /a HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n",
        "POST /a HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n3;ext=1\r\nabc\r\n",
        "POST /a HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n3 \r\nabc\r\n",
        "POST /a HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n0\r\nX-Trailer: y\r\n\r\n",
        "POST /a HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n401\r\n", /* over the limit */
        "POST /a HTTP/1.1\r\nTransfer-Encoding: identity\r\nContent-Length: 3\r\n\r\n",
        "GET /a HTTP/1.1\r\nContent-Length: 5\r\n\r\nhello",   /* body on GET: version-dependent */
        "POST /a HTTP/1.1\r\nContent-Length: 5\r\nContent-Length: 5\r\n\r\n",
        "POST /a HTTP/1.1\r\nContent-Length: +5\r\n\r\n",
        "POST /a HTTP/1.1\r\nContent-Length: 5 5\r\n\r\n",
        "POST /a HTTP/1.1\r\nContent-Length:\r\n\r\n",
        "POST /a HTTP/1.1\r\nContent-Length: -1\r\n\r\n",
        "POST /a HTTP/1.1\r\nX: y\r\n folded\r\n\r\n",
        "POST /a HTTP/1.1\r\nno colon here\r\n\r\n",
        "\r\nGET /a HTTP/1.1\r\n\r\n",
        "get /a HTTP/1.1\r\n\r\n",
        "GET/a HTTP/1.1\r\n\r\n",
    };
    for (size_t i = 0; i < sizeof L / sizeof *L; i++)
        expect(L[i], HSCAN_LOST, 0, 0, 0, "");
    /* LOST is final, even when an oversized request follows */
    expect("POST /a HTTP/1.1\r\nTransfer-Encoding: identity\r\n\r\n0\r\n\r\n"
           "POST /b HTTP/1.1\r\nContent-Length: 9999\r\n\r\n",
           HSCAN_LOST, 0, 0, 0, "");
    /* a header block over HSCAN_MAX_HEAD */
    size_t n = (size_t)HSCAN_MAX_HEAD + 100;
    char *s = malloc(n + 64);
    int k = sprintf(s, "GET /a HTTP/1.1\r\n");
    for (size_t i = (size_t)k; i < n; i += 10)
        memcpy(s + i, "X-A: 1234\n", 10);
    s[n] = 0;
    struct hscan h;
    hscan_init(&h);
    CHECK_EQ_INT(hscan_feed(&h, s, strlen(s), MAXB), HSCAN_LOST);
    free(s);
    /* hscan_lose: bytes were missed */
    hscan_init(&h);
    hscan_lose(&h);
    CHECK_EQ_INT(hscan_feed(&h, "POST /a HTTP/1.1\r\nContent-Length: 5000\r\n\r\n", 42, MAXB),
                 HSCAN_LOST);
    CHECK_EQ_INT(h.pos, 42);
}

static void test_chunked(void)
{
    /* behind chunked requests: CRLF and LF, hex in both cases, chunk data that looks like
     * requests and size lines, blank lines between chunks (evhttp skips them) */
    const char *s = "POST /a HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n"
                    "3\r\nabc\r\nA\r\n0\r\n\r\nGET /\r\n\r\n0\r\n\r\n"
                    "PUT /b HTTP/1.1\ntransfer-encoding:  Chunked \n\n1f\n"
                    "0123456789abcdef0123456789ABCDE\n\n\nff\n";
    char buf[1024];
    int k = snprintf(buf, sizeof buf, "%s", s);
    memset(buf + k, 'z', 255);
    k += 255;
    k += snprintf(buf + k, sizeof buf - (size_t)k,
                  "\n0\n\nPOST /c HTTP/1.1\r\nContent-Length: 1025\r\n\r\n");
    expect(buf, HSCAN_BIG, (uint64_t)(strstr(buf, "POST /c") - buf), 2, 1025, "/c");
    /* a chunked body at the limit is fine; in progress it is MORE */
    expect("POST /a HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n200\r\n", HSCAN_MORE, 0, 0,
           0, "");
    char at[1400];
    k = snprintf(at, sizeof at, "POST /a HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n400\r\n");
    memset(at + k, 'q', 1024);
    k += 1024;
    snprintf(at + k, sizeof at - (size_t)k,
             "\r\n0\r\n\r\nPOST /d HTTP/1.1\r\nContent-Length: 2000\r\n\r\n");
    expect(at, HSCAN_BIG, (uint64_t)(strstr(at, "POST /d") - at), 1, 2000, "/d");
}

static void test_final(void)
{
    /* BIG is final: the request it names stays, whatever follows */
    struct hscan h;
    hscan_init(&h);
    const char *a = "POST /x HTTP/1.1\r\nContent-Length: 2048\r\n\r\n";
    CHECK_EQ_INT(hscan_feed(&h, a, strlen(a), MAXB), HSCAN_BIG);
    const char *b = "GET /y HTTP/1.1\r\n\r\nPOST /z HTTP/1.1\r\nContent-Length: 4000\r\n\r\n";
    CHECK_EQ_INT(hscan_feed(&h, b, strlen(b), MAXB), HSCAN_BIG);
    CHECK_EQ_INT(h.cl, 2048);
    CHECK_STR(h.path, "/x");
    CHECK_EQ_INT(h.n_req, 0);
    CHECK_EQ_INT(h.pos, strlen(a) + strlen(b));
    hscan_lose(&h);
    CHECK_EQ_INT(h.status, HSCAN_BIG);
}

int main(void)
{
    RUN(test_big);
    RUN(test_more);
    RUN(test_lost);
    RUN(test_chunked);
    RUN(test_final);
    return harness_done();
}
