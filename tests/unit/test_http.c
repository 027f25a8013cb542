/* test_http.c — the HTTP layer against a raw-socket client.
 *
 * Each test starts a server on an ephemeral port with its loop in a pthread, speaks plain
 * HTTP/1.1 over POSIX sockets, and stops it from the test thread. Covered: routing (exact,
 * prefix, 404, 405), body echo and keep-alive, 413 (Content-Length and chunked), 401 with
 * both key headers, 429 beyond max_conns, SSE from another thread via http_post with bytes
 * arriving before the end, client disconnect (mid-stream and inside an async handler),
 * backpressure cut, header timeout, FIFO posts, stop(), a busy port.
 */
#include <ctype.h>
#include <errno.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#include "harness.h"
#include "http/http.h"

/* ---------------------------------------------------------------- server harness */

struct tsrv {
    struct http_server *s;
    pthread_t th;
    int port;
    int run_rc;
};

static void *loop_main(void *arg)
{
    struct tsrv *t = arg;
    t->run_rc = http_server_run(t->s);
    return NULL;
}

static char *test_efmt(const char *path, int status, const char *message, void *ud)
{
    char *b = malloc(strlen(path) + strlen(message) + 64);
    if (b)
        sprintf(b, "{\"err\":%d,\"msg\":\"%s\",\"path\":\"%s\"}", status, message, path);
    return b;
}

static int srv_new(struct tsrv *t, const struct http_config *c)
{
    struct cerr e = {0};
    memset(t, 0, sizeof *t);
    if (http_server_new(&t->s, c, &e) != 0) {
        fprintf(stderr, "http_server_new: %s\n", e.msg);
        return -1;
    }
    http_set_error_fmt(t->s, test_efmt, NULL);
    t->port = http_server_port(t->s);
    return 0;
}

static void srv_start(struct tsrv *t)
{
    pthread_create(&t->th, NULL, loop_main, t);
}

static void srv_stop(struct tsrv *t)
{
    http_server_stop(t->s);
    pthread_join(t->th, NULL);
    http_server_free(t->s);
    t->s = NULL;
}

static void sleep_ms(int ms)
{
    struct timespec ts = {ms / 1000, (long)(ms % 1000) * 1000000L};
    nanosleep(&ts, NULL);
}

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* Bound of every wait for a condition: generous, so a loaded machine never fails a test
 * (the bound only matters when the condition never comes). */
#define WAIT_MIN_MS 60000

/* Waits until *v >= want (up to max(ms, WAIT_MIN_MS)). Returns 1 when reached. */
static int wait_int(atomic_int *v, int want, int ms)
{
    if (ms < WAIT_MIN_MS)
        ms = WAIT_MIN_MS;
    for (int i = 0; i < ms; i += 5) {
        if (atomic_load(v) >= want)
            return 1;
        sleep_ms(5);
    }
    return atomic_load(v) >= want;
}

/* ---------------------------------------------------------------- raw client */

static int cl_connect(int port)
{
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port)};
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    struct timeval tv = {5, 0};
    setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
    int one = 1;
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    if (connect(fd, (struct sockaddr *)&a, sizeof a) != 0) {
        close(fd);
        return -1;
    }
    return fd;
}

static int cl_send(int fd, const char *p, size_t n)
{
    while (n) {
        ssize_t k = send(fd, p, n, MSG_NOSIGNAL);
        if (k <= 0)
            return -1;
        p += k;
        n -= (size_t)k;
    }
    return 0;
}

static int cl_sends(int fd, const char *s)
{
    return cl_send(fd, s, strlen(s));
}

struct resp {
    int status;
    char head[4096];  /* raw header block, lowercased */
    char *body;
    size_t body_len;
    int closed;       /* saw EOF */
};

/* Incremental reader with its own buffer. */
struct rd {
    int fd;
    char *buf;
    size_t len, cap;
    int eof;
};

static void rd_init(struct rd *r, int fd)
{
    memset(r, 0, sizeof *r);
    r->fd = fd;
}

static void rd_free(struct rd *r)
{
    free(r->buf);
}

/* Reads more bytes; returns bytes read, 0 at EOF, -1 on timeout/error. */
static int rd_more(struct rd *r)
{
    if (r->cap - r->len < 65536) {
        r->cap = r->cap * 2 + 65536;
        r->buf = realloc(r->buf, r->cap + 1);
    }
    ssize_t k = recv(r->fd, r->buf + r->len, r->cap - r->len, 0);
    if (k == 0) {
        r->eof = 1;
        return 0;
    }
    if (k < 0)
        return -1;
    r->len += (size_t)k;
    r->buf[r->len] = 0;
    return (int)k;
}

/* Ensures at least n bytes are buffered. */
static int rd_need(struct rd *r, size_t n)
{
    while (r->len < n)
        if (rd_more(r) <= 0)
            return -1;
    return 0;
}

static void rd_consume(struct rd *r, size_t n)
{
    memmove(r->buf, r->buf + n, r->len - n);
    r->len -= n;
    if (r->buf)
        r->buf[r->len] = 0;
}

/* Finds needle in the buffered bytes, reading more as needed; returns offset or -1. */
static long rd_find(struct rd *r, const char *needle)
{
    size_t nl = strlen(needle);
    for (;;) {
        if (r->len >= nl && r->buf) {
            char *p = memmem(r->buf, r->len, needle, nl);
            if (p)
                return p - r->buf;
        }
        if (rd_more(r) <= 0)
            return -1;
    }
}

static const char *resp_header(const struct resp *p, const char *name)
{
    static char val[512];
    char key[128];
    snprintf(key, sizeof key, "\r\n%s:", name);
    for (char *k = key; *k; k++)
        *k = (char)tolower((unsigned char)*k);
    const char *h = strstr(p->head, key);
    if (!h)
        return NULL;
    h += strlen(key);
    while (*h == ' ')
        h++;
    size_t n = strcspn(h, "\r");
    if (n >= sizeof val)
        n = sizeof val - 1;
    memcpy(val, h, n);
    val[n] = 0;
    return val;
}

/* Reads the status line and headers into p (consuming them). */
static int read_head(struct rd *r, struct resp *p)
{
    memset(p, 0, sizeof *p);
    long e = rd_find(r, "\r\n\r\n");
    if (e < 0)
        return -1;
    size_t n = (size_t)e + 2 < sizeof p->head - 1 ? (size_t)e + 2 : sizeof p->head - 1;
    memcpy(p->head, r->buf, n);
    p->head[n] = 0;
    for (char *c = p->head; *c; c++)
        *c = (char)tolower((unsigned char)*c);
    if (sscanf(r->buf, "HTTP/1.%*d %d", &p->status) != 1)
        return -1;
    rd_consume(r, (size_t)e + 4);
    return 0;
}

/* Reads one chunk of a chunked body: returns its size (0 = last), -1 on error.
 * The data goes to *out (malloc'd, NUL-terminated). */
static long read_chunk(struct rd *r, char **out)
{
    long e = rd_find(r, "\r\n");
    if (e < 0)
        return -1;
    long sz = strtol(r->buf, NULL, 16);
    rd_consume(r, (size_t)e + 2);
    if (rd_need(r, (size_t)sz + 2) != 0)
        return -1;
    if (out) {
        *out = malloc((size_t)sz + 1);
        memcpy(*out, r->buf, (size_t)sz);
        (*out)[sz] = 0;
    }
    rd_consume(r, (size_t)sz + 2);
    return sz;
}

/* Reads a full response (Content-Length, chunked, or until EOF). */
static int read_resp(struct rd *r, struct resp *p)
{
    if (read_head(r, p) != 0)
        return -1;
    const char *te = resp_header(p, "transfer-encoding");
    const char *cl = resp_header(p, "content-length");
    if (te && strstr(te, "chunked")) {
        size_t cap = 1, len = 0;
        char *body = malloc(cap);
        for (;;) {
            char *c = NULL;
            long sz = read_chunk(r, &c);
            if (sz < 0) {
                free(body);
                return -1;
            }
            body = realloc(body, len + (size_t)sz + 1);
            memcpy(body + len, c, (size_t)sz);
            len += (size_t)sz;
            free(c);
            if (sz == 0)
                break;
        }
        body[len] = 0;
        p->body = body;
        p->body_len = len;
        return 0;
    }
    if (cl) {
        size_t n = strtoul(cl, NULL, 10);
        if (rd_need(r, n) != 0)
            return -1;
        p->body = malloc(n + 1);
        memcpy(p->body, r->buf, n);
        p->body[n] = 0;
        p->body_len = n;
        rd_consume(r, n);
        return 0;
    }
    while (rd_more(r) > 0) {
    }
    p->body = malloc(r->len + 1);
    memcpy(p->body, r->buf ? r->buf : "", r->len);
    p->body[r->len] = 0;
    p->body_len = r->len;
    rd_consume(r, r->len);
    p->closed = 1;
    return 0;
}

/* One request on a fresh connection; fills p. Returns 0 on a parsed response. */
static int do_req(int port, const char *raw, struct resp *p)
{
    int fd = cl_connect(port);
    if (fd < 0)
        return -1;
    struct rd r;
    rd_init(&r, fd);
    int rc = cl_sends(fd, raw) == 0 ? read_resp(&r, p) : -1;
    rd_free(&r);
    close(fd);
    return rc;
}

static void resp_free(struct resp *p)
{
    free(p->body);
    p->body = NULL;
}

/* EOF within ms? (reads and discards) */
static int wait_eof(int fd, int ms)
{
    if (ms < WAIT_MIN_MS)
        ms = WAIT_MIN_MS;
    struct timeval tv = {ms / 1000, (ms % 1000) * 1000};
    setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
    char b[4096];
    for (;;) {
        ssize_t k = recv(fd, b, sizeof b, 0);
        if (k == 0)
            return 1;
        if (k < 0)
            return errno == ECONNRESET;
    }
}

/* ---------------------------------------------------------------- handlers */

static atomic_int g_calls;

static void h_text(struct http_req *r, void *ud)
{
    atomic_fetch_add(&g_calls, 1);
    http_reply(r, 200, "text/plain", (const char *)ud, strlen((const char *)ud));
}

static void h_echo_path(struct http_req *r, void *ud)
{
    atomic_fetch_add(&g_calls, 1);
    char b[1024];
    snprintf(b, sizeof b, "%s %s|%s", http_req_method(r), http_req_path(r), http_req_query(r));
    http_add_header(r, "X-Test", "yes");
    http_reply(r, 200, "text/plain", b, strlen(b));
}

static void h_echo_body(struct http_req *r, void *ud)
{
    atomic_fetch_add(&g_calls, 1);
    size_t n;
    const char *b = http_req_body(r, &n);
    http_reply(r, 200, "application/octet-stream", b, n);
}

static void h_own400(struct http_req *r, void *ud)
{
    http_reply_error(r, 400, "mine");
}

static void h_own413(struct http_req *r, void *ud)
{
    atomic_fetch_add(&g_calls, 1);
    http_reply_error(r, 413, "mine");
}

/* ---------------------------------------------------------------- tests */

static void test_routing(void)
{
    struct tsrv t;
    struct http_config c = {.host = "127.0.0.1", .port = 0};
    if (srv_new(&t, &c) != 0) {
        CHECK(0);
        return;
    }
    CHECK(t.port > 0);
    CHECK_EQ_INT(http_route(t.s, "GET", "/exact", 0, h_text, "exact!"), 0);
    CHECK_EQ_INT(http_route(t.s, NULL, "/pre/", HTTP_ROUTE_PREFIX, h_echo_path, NULL), 0);
    CHECK_EQ_INT(http_route(t.s, "POST", "/echo", 0, h_echo_body, NULL), 0);
    CHECK_EQ_INT(http_route(t.s, "PUT", "/echo", 0, h_echo_body, NULL), 0);
    CHECK_EQ_INT(http_route(t.s, "GET", "/bad", 0, h_own400, NULL), 0);
    CHECK(http_route(t.s, "GET", "relative", 0, h_text, "x") != 0);
    srv_start(&t);
    atomic_store(&g_calls, 0);
    struct resp p;

    CHECK_EQ_INT(do_req(t.port, "GET /exact HTTP/1.1\r\nHost: x\r\n\r\n", &p), 0);
    CHECK_EQ_INT(p.status, 200);
    CHECK_STR(p.body, "exact!");
    CHECK_STR(resp_header(&p, "content-type"), "text/plain");
    resp_free(&p);

    /* HEAD on a GET route: headers only (the connection then closes on HTTP/1.0) */
    {
        int fd = cl_connect(t.port);
        struct rd r;
        rd_init(&r, fd);
        cl_sends(fd, "HEAD /exact HTTP/1.0\r\n\r\n");
        CHECK_EQ_INT(read_head(&r, &p), 0);
        CHECK_EQ_INT(p.status, 200);
        CHECK_STR(resp_header(&p, "content-length"), "6");
        while (rd_more(&r) > 0) {
        }
        CHECK_EQ_INT(r.eof, 1);
        CHECK_EQ_INT(r.len, 0); /* no body bytes */
        rd_free(&r);
        close(fd);
    }

    /* TRACE is a method no route takes: 405, as for any other known method */
    CHECK_EQ_INT(do_req(t.port, "TRACE /exact HTTP/1.1\r\nHost: x\r\n\r\n", &p), 0);
    CHECK_EQ_INT(p.status, 405);
    CHECK_MSG(p.body && strstr(p.body, "\"err\":405"), "%s", p.body);
    resp_free(&p);
    /* a method evhttp does not accept (CONNECT, QUERY): 405 too, with the formatter's body */
    CHECK_EQ_INT(do_req(t.port, "CONNECT /exact HTTP/1.1\r\nHost: x\r\n\r\n", &p), 0);
    CHECK_EQ_INT(p.status, 405);
    CHECK_MSG(p.body && strstr(p.body, "\"err\":405"), "%s", p.body);
    resp_free(&p);
    CHECK_EQ_INT(do_req(t.port, "QUERY /exact HTTP/1.1\r\nHost: x\r\n\r\n", &p), 0);
    CHECK_EQ_INT(p.status, 405);
    resp_free(&p);

    CHECK_EQ_INT(do_req(t.port, "GET /exact/more HTTP/1.1\r\nHost: x\r\n\r\n", &p), 0);
    CHECK_EQ_INT(p.status, 404);
    CHECK_STR(p.body, "{\"err\":404,\"msg\":\"not found\",\"path\":\"/exact/more\"}");
    CHECK_STR(resp_header(&p, "content-type"), "application/json");
    resp_free(&p);

    CHECK_EQ_INT(do_req(t.port, "POST /exact HTTP/1.1\r\nHost: x\r\nContent-Length: 0\r\n\r\n",
                        &p), 0);
    CHECK_EQ_INT(p.status, 405);
    CHECK_STR(resp_header(&p, "allow"), "get"); /* the reader lowercases */
    CHECK(p.body && strstr(p.body, "\"err\":405"));
    resp_free(&p);

    CHECK_EQ_INT(do_req(t.port, "GET /echo HTTP/1.1\r\nHost: x\r\n\r\n", &p), 0);
    CHECK_EQ_INT(p.status, 405);
    CHECK_STR(resp_header(&p, "allow"), "post, put");
    resp_free(&p);

    CHECK_EQ_INT(do_req(t.port, "GET /pre/a%20b/%C3%A9?x=1&y=%20 HTTP/1.1\r\nHost: x\r\n\r\n", &p),
                 0);
    CHECK_EQ_INT(p.status, 200);
    CHECK_STR(p.body, "GET /pre/a b/\xc3\xa9|x=1&y=%20");
    CHECK_STR(resp_header(&p, "x-test"), "yes");
    resp_free(&p);

    CHECK_EQ_INT(do_req(t.port, "DELETE /pre/z HTTP/1.1\r\nHost: x\r\n\r\n", &p), 0);
    CHECK_EQ_INT(p.status, 200);
    CHECK_STR(p.body, "DELETE /pre/z|");
    resp_free(&p);

    /* "/pre" without the slash is not under the "/pre/" prefix */
    CHECK_EQ_INT(do_req(t.port, "GET /pre HTTP/1.1\r\nHost: x\r\n\r\n", &p), 0);
    CHECK_EQ_INT(p.status, 404);
    resp_free(&p);

    /* a malformed request line gets evhttp's 400, with the formatter's body */
    CHECK_EQ_INT(do_req(t.port, "GET /exact HTTP/1.1 junk\r\nHost: x\r\n\r\n", &p), 0);
    CHECK_EQ_INT(p.status, 400);
    CHECK_MSG(p.body && strstr(p.body, "\"err\":400,\"msg\":\"malformed"), "%s", p.body);
    resp_free(&p);
    /* a handler's own 400 is left alone */
    CHECK_EQ_INT(do_req(t.port, "GET /bad HTTP/1.1\r\nHost: x\r\n\r\n", &p), 0);
    CHECK_EQ_INT(p.status, 400);
    CHECK_STR(p.body, "{\"err\":400,\"msg\":\"mine\",\"path\":\"/bad\"}");
    resp_free(&p);

    /* an encoded NUL in the path is refused before any handler */
    int before = atomic_load(&g_calls);
    CHECK_EQ_INT(do_req(t.port, "GET /pre/a%00b HTTP/1.1\r\nHost: x\r\n\r\n", &p), 0);
    CHECK_EQ_INT(p.status, 400);
    CHECK_EQ_INT(atomic_load(&g_calls), before);
    resp_free(&p);

    struct http_stats st;
    http_get_stats(t.s, &st);
    CHECK_EQ_INT(st.requests_total, 11);
    srv_stop(&t);
}

static void test_body_keepalive(void)
{
    struct tsrv t;
    struct http_config c = {.host = "127.0.0.1", .port = 0, .max_body = 1 << 20};
    if (srv_new(&t, &c) != 0) {
        CHECK(0);
        return;
    }
    http_route(t.s, "POST", "/echo", 0, h_echo_body, NULL);
    srv_start(&t);
    size_t n = 300000;
    char *body = malloc(n);
    for (size_t i = 0; i < n; i++)
        body[i] = (char)('a' + (i * 7) % 26);
    body[1000] = 0; /* binary-safe */
    int fd = cl_connect(t.port);
    struct rd r;
    rd_init(&r, fd);
    for (int round = 0; round < 3; round++) {
        char head[256];
        snprintf(head, sizeof head,
                 "POST /echo HTTP/1.1\r\nHost: x\r\nContent-Length: %zu\r\n\r\n", n);
        CHECK_EQ_INT(cl_sends(fd, head), 0);
        CHECK_EQ_INT(cl_send(fd, body, n), 0);
        struct resp p;
        CHECK_EQ_INT(read_resp(&r, &p), 0);
        CHECK_EQ_INT(p.status, 200);
        CHECK_EQ_INT(p.body_len, n);
        CHECK(p.body && memcmp(p.body, body, n) == 0);
        resp_free(&p);
    }
    /* chunked upload within the limit */
    CHECK_EQ_INT(cl_sends(fd, "POST /echo HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n"
                              "5\r\nhello\r\n6\r\n world\r\n0\r\n\r\n"), 0);
    struct resp p;
    CHECK_EQ_INT(read_resp(&r, &p), 0);
    CHECK_EQ_INT(p.status, 200);
    CHECK_STR(p.body, "hello world");
    resp_free(&p);
    rd_free(&r);
    close(fd);
    struct http_stats st;
    http_get_stats(t.s, &st);
    CHECK_EQ_INT(st.requests_total, 4);
    free(body);
    srv_stop(&t);
}

static void test_413(void)
{
    struct tsrv t;
    struct http_config c = {.host = "127.0.0.1", .port = 0, .max_body = 1024};
    if (srv_new(&t, &c) != 0) {
        CHECK(0);
        return;
    }
    http_route(t.s, "POST", "/echo", 0, h_echo_body, NULL);
    http_route(t.s, "GET", "/own413", 0, h_own413, NULL);
    srv_start(&t);
    atomic_store(&g_calls, 0);
    int fd2;
    char body[3000];
    memset(body, 'x', sizeof body);
    struct resp p;

    /* exactly at the limit is fine */
    int fd = cl_connect(t.port);
    struct rd r;
    rd_init(&r, fd);
    cl_sends(fd, "POST /echo HTTP/1.1\r\nHost: x\r\nContent-Length: 1024\r\n\r\n");
    cl_send(fd, body, 1024);
    CHECK_EQ_INT(read_resp(&r, &p), 0);
    CHECK_EQ_INT(p.status, 200);
    CHECK_EQ_INT(p.body_len, 1024);
    resp_free(&p);
    rd_free(&r);
    close(fd);

    /* Content-Length over the limit */
    fd = cl_connect(t.port);
    rd_init(&r, fd);
    cl_sends(fd, "POST /echo HTTP/1.1\r\nHost: x\r\nContent-Length: 3000\r\n\r\n");
    cl_send(fd, body, 3000);
    CHECK_EQ_INT(read_resp(&r, &p), 0);
    CHECK_EQ_INT(p.status, 413);
    CHECK_STR(p.body, "{\"err\":413,\"msg\":\"request too large (the body limit is 1024 bytes)\","
                      "\"path\":\"/echo\"}"); /* the request line's path */
    CHECK_STR(resp_header(&p, "content-type"), "application/json");
    resp_free(&p);
    rd_free(&r);
    close(fd);

    /* chunked upload over the limit */
    fd = cl_connect(t.port);
    rd_init(&r, fd);
    cl_sends(fd, "POST /echo HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n");
    for (int i = 0; i < 3; i++) {
        cl_sends(fd, "258\r\n"); /* 600 bytes */
        cl_send(fd, body, 600);
        cl_sends(fd, "\r\n");
    }
    cl_sends(fd, "0\r\n\r\n");
    CHECK_EQ_INT(read_resp(&r, &p), 0);
    CHECK_EQ_INT(p.status, 413);
    CHECK_MSG(p.body && strstr(p.body, "\"err\":413"), "%s|%s", p.head, p.body);
    resp_free(&p);
    rd_free(&r);
    close(fd);

    /* after a kept-alive request, so the 413 is not the first response on the socket */
    fd2 = cl_connect(t.port);
    rd_init(&r, fd2);
    cl_sends(fd2, "POST /echo HTTP/1.1\r\nHost: x\r\nContent-Length: 3\r\n\r\nabc");
    CHECK_EQ_INT(read_resp(&r, &p), 0);
    CHECK_STR(p.body, "abc");
    resp_free(&p);
    cl_sends(fd2, "POST /echo HTTP/1.1\r\nHost: x\r\nContent-Length: 5000\r\n\r\n");
    cl_send(fd2, body, 3000);
    cl_send(fd2, body, 2000);
    CHECK_EQ_INT(read_resp(&r, &p), 0);
    CHECK_EQ_INT(p.status, 413);
    CHECK_MSG(p.body && strstr(p.body, "\"err\":413"), "%s|%s", p.head, p.body);
    resp_free(&p);
    rd_free(&r);
    close(fd2);

    /* a declared body over the limit is answered at once, before any of it is sent: 2^63
     * bytes declared and nothing sent, and Expect: 100-continue (no "100 Continue" first);
     * the client's receive timeout (cl_connect) is the bound: evhttp's lingering close
     * alone would wait for the whole body */
    static const char *const DECL[] = {
        "POST /echo HTTP/1.1\r\nHost: x\r\nContent-Length: 9223372036854775807\r\n\r\n",
        "POST /echo HTTP/1.1\r\nHost: x\r\ncontent-length:99999999999999999999999\r\n\r\n",
        "POST /echo HTTP/1.1\r\nHost: x\r\nExpect: 100-continue\r\nContent-Length: 1025\r\n\r\n",
    };
    for (size_t k = 0; k < sizeof DECL / sizeof *DECL; k++) {
        fd = cl_connect(t.port);
        rd_init(&r, fd);
        cl_sends(fd, DECL[k]);
        CHECK_EQ_INT(read_resp(&r, &p), 0);
        CHECK_EQ_INT(p.status, 413);
        CHECK_STR(p.body, "{\"err\":413,\"msg\":\"request too large (the body limit is 1024 "
                          "bytes)\",\"path\":\"/echo\"}");
        CHECK_STR(resp_header(&p, "connection"), "close");
        resp_free(&p);
        /* what the client still sends is dropped; the server closes when the client does */
        cl_send(fd, body, 1000);
        rd_free(&r);
        close(fd);
    }
    /* within the limit with Expect: 100-continue: evhttp's 100 Continue, then the reply */
    fd = cl_connect(t.port);
    rd_init(&r, fd);
    cl_sends(fd, "POST /echo HTTP/1.1\r\nHost: x\r\nExpect: 100-continue\r\n"
                 "Content-Length: 3\r\n\r\n");
    CHECK_EQ_INT(read_resp(&r, &p), 0);
    CHECK_EQ_INT(p.status, 100);
    resp_free(&p);
    cl_sends(fd, "abc");
    CHECK_EQ_INT(read_resp(&r, &p), 0);
    CHECK_EQ_INT(p.status, 200);
    CHECK_STR(p.body, "abc");
    resp_free(&p);
    rd_free(&r);
    close(fd);

    /* more than 64 KiB of headers */
    {
        size_t hn = 70000;
        char *big = malloc(hn + 128);
        int k = sprintf(big, "GET /own413 HTTP/1.1\r\nHost: x\r\nX-Big: ");
        memset(big + k, 'h', hn);
        strcpy(big + k + hn, "\r\n\r\n");
        CHECK_EQ_INT(do_req(t.port, big, &p), 0);
        CHECK_EQ_INT(p.status, 400); /* evhttp 2.1 calls oversized headers malformed */
        CHECK_MSG(p.body && strstr(p.body, "\"err\":400,\"msg\":\"malformed HTTP request"),
                  "%s", p.body);
        CHECK_STR(resp_header(&p, "content-type"), "application/json");
        resp_free(&p);
        free(big);
    }

    /* our own 413 (from a handler) is left alone */
    CHECK_EQ_INT(do_req(t.port, "GET /own413 HTTP/1.1\r\nHost: x\r\n\r\n", &p), 0);
    CHECK_EQ_INT(p.status, 413);
    CHECK(p.body && strstr(p.body, "\"msg\":\"mine\""));
    resp_free(&p);

    CHECK_EQ_INT(atomic_load(&g_calls), 4); /* in-limit, "abc", "abc" after 100, own413 */
    struct http_stats st;
    http_get_stats(t.s, &st);
    CHECK_EQ_INT(st.rejected_413, 6);
    srv_stop(&t);
}

static void test_401(void)
{
    struct tsrv t;
    struct http_config c = {.host = "127.0.0.1", .port = 0, .api_key = "s3cret"};
    if (srv_new(&t, &c) != 0) {
        CHECK(0);
        return;
    }
    http_route(t.s, "GET", "/priv", 0, h_text, "private");
    http_route(t.s, "GET", "/health", HTTP_ROUTE_PUBLIC, h_text, "ok");
    srv_start(&t);
    struct resp p;
    CHECK_EQ_INT(do_req(t.port, "GET /priv HTTP/1.1\r\nHost: x\r\n\r\n", &p), 0);
    CHECK_EQ_INT(p.status, 401);
    CHECK(p.body && strstr(p.body, "\"err\":401"));
    resp_free(&p);
    CHECK_EQ_INT(do_req(t.port, "GET /priv HTTP/1.1\r\nAuthorization: Bearer s3cre\r\n\r\n", &p),
                 0);
    CHECK_EQ_INT(p.status, 401);
    resp_free(&p);
    CHECK_EQ_INT(do_req(t.port, "GET /priv HTTP/1.1\r\nAuthorization: Bearer s3cretX\r\n\r\n", &p),
                 0);
    CHECK_EQ_INT(p.status, 401);
    resp_free(&p);
    CHECK_EQ_INT(do_req(t.port, "GET /priv HTTP/1.1\r\nAuthorization: Bearer s3cret\r\n\r\n", &p),
                 0);
    CHECK_EQ_INT(p.status, 200);
    CHECK_STR(p.body, "private");
    resp_free(&p);
    CHECK_EQ_INT(do_req(t.port, "GET /priv HTTP/1.1\r\nauthorization: bearer s3cret\r\n\r\n", &p),
                 0);
    CHECK_EQ_INT(p.status, 200);
    resp_free(&p);
    CHECK_EQ_INT(do_req(t.port, "GET /priv HTTP/1.1\r\nX-Api-Key: s3cret\r\n\r\n", &p), 0);
    CHECK_EQ_INT(p.status, 200);
    resp_free(&p);
    CHECK_EQ_INT(do_req(t.port, "GET /priv HTTP/1.1\r\nx-api-key: nope\r\n\r\n", &p), 0);
    CHECK_EQ_INT(p.status, 401);
    resp_free(&p);
    CHECK_EQ_INT(do_req(t.port, "GET /health HTTP/1.1\r\n\r\n", &p), 0);
    CHECK_EQ_INT(p.status, 200);
    CHECK_STR(p.body, "ok");
    resp_free(&p);
    /* unknown paths need the key too (no route probing) */
    CHECK_EQ_INT(do_req(t.port, "GET /nope HTTP/1.1\r\n\r\n", &p), 0);
    CHECK_EQ_INT(p.status, 401);
    resp_free(&p);
    CHECK_EQ_INT(do_req(t.port, "GET /nope HTTP/1.1\r\nx-api-key: s3cret\r\n\r\n", &p), 0);
    CHECK_EQ_INT(p.status, 404);
    resp_free(&p);
    srv_stop(&t);
}

/* ---- async handlers that park requests ---- */

#define MAXHELD 8
static struct http_req *g_held[MAXHELD];
static atomic_int g_nheld;

static void h_hold(struct http_req *r, void *ud)
{
    int i = atomic_fetch_add(&g_nheld, 1);
    if (i < MAXHELD)
        g_held[i] = r;
}

static void post_reply_held(void *ud)
{
    int n = atomic_load(&g_nheld);
    for (int i = 0; i < n && i < MAXHELD; i++) {
        http_reply(g_held[i], 200, "text/plain", "late", 4);
        g_held[i] = NULL;
    }
}

static void test_429(void)
{
    struct tsrv t;
    struct http_config c = {.host = "127.0.0.1", .port = 0, .max_conns = 2};
    if (srv_new(&t, &c) != 0) {
        CHECK(0);
        return;
    }
    http_route(t.s, "GET", "/hold", 0, h_hold, NULL);
    http_route(t.s, "GET", "/now", 0, h_text, "now");
    srv_start(&t);
    atomic_store(&g_nheld, 0);
    int fd[2];
    struct rd r[2];
    for (int i = 0; i < 2; i++) {
        fd[i] = cl_connect(t.port);
        rd_init(&r[i], fd[i]);
        cl_sends(fd[i], "GET /hold HTTP/1.1\r\nHost: x\r\n\r\n");
    }
    CHECK(wait_int(&g_nheld, 2, 3000));
    struct resp p;
    CHECK_EQ_INT(do_req(t.port, "GET /now HTTP/1.1\r\nHost: x\r\n\r\n", &p), 0);
    CHECK_EQ_INT(p.status, 429);
    CHECK_STR(resp_header(&p, "retry-after"), "1");
    CHECK(p.body && strstr(p.body, "\"err\":429"));
    resp_free(&p);
    struct http_stats st;
    http_get_stats(t.s, &st);
    CHECK_EQ_INT(st.rejected_429, 1);
    for (int k = 0; k < 200 && st.conns_open != 2; k++) { /* the 429 conn closes after its reply */
        sleep_ms(5);
        http_get_stats(t.s, &st);
    }
    CHECK_EQ_INT(st.conns_open, 2);

    CHECK_EQ_INT(http_post(t.s, post_reply_held, NULL), 0);
    for (int i = 0; i < 2; i++) {
        CHECK_EQ_INT(read_resp(&r[i], &p), 0);
        CHECK_EQ_INT(p.status, 200);
        CHECK_STR(p.body, "late");
        resp_free(&p);
        rd_free(&r[i]);
        close(fd[i]);
    }
    /* once they are closed, a new connection is admitted */
    int ok = 0;
    for (int k = 0; k < 100 && !ok; k++) {
        if (do_req(t.port, "GET /now HTTP/1.1\r\nHost: x\r\n\r\n", &p) == 0) {
            ok = p.status == 200;
            resp_free(&p);
        }
        if (!ok)
            sleep_ms(10);
    }
    CHECK(ok);
    srv_stop(&t);
}

/* ---- 413 at once for pipelined and split requests ---- */

static struct http_req *g_stream_held;

static void h_stream_hold(struct http_req *r, void *ud)
{
    http_stream_begin(r, 200, NULL);
    http_stream_write(r, "data: a\n\n", 9);
    g_stream_held = r;
    atomic_fetch_add(&g_nheld, 1);
}

static void post_stream_end(void *ud)
{
    http_stream_write(g_stream_held, "data: b\n\n", 9);
    http_stream_end(g_stream_held);
    g_stream_held = NULL;
}

/* A connection with a longer receive bound than cl_connect's: a 413 that waits for the
 * declared body never comes, and that must read as a failed check, not a slow machine. */
static int cl_connect_slow(int port)
{
    int fd = cl_connect(port);
    struct timeval tv = {30, 0};
    if (fd >= 0)
        setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
    return fd;
}

/* Reads the 413 of the oversized request, then the server's close. */
static void expect_413_close(struct rd *r)
{
    struct resp p;
    CHECK_EQ_INT(read_resp(r, &p), 0);
    CHECK_EQ_INT(p.status, 413);
    CHECK_STR(p.body, "{\"err\":413,\"msg\":\"request too large (the body limit is 1024 "
                      "bytes)\",\"path\":\"/echo\"}");
    CHECK_STR(resp_header(&p, "connection"), "close");
    resp_free(&p);
    while (rd_more(r) > 0) {
    }
    CHECK_MSG(r->eof && r->len == 0, "after the 413: eof %d, %zu more bytes: %s", r->eof, r->len,
              r->buf ? r->buf : "");
}

static void test_413_pipelined(void)
{
    struct tsrv t;
    struct http_config c = {.host = "127.0.0.1", .port = 0, .max_body = 1024,
                            .header_timeout_s = 120};
    if (srv_new(&t, &c) != 0) {
        CHECK(0);
        return;
    }
    http_route(t.s, "POST", "/echo", 0, h_echo_body, NULL);
    http_route(t.s, "GET", "/now", 0, h_text, "now");
    http_route(t.s, "GET", "/hold", 0, h_hold, NULL);
    http_route(t.s, "GET", "/sh", 0, h_stream_hold, NULL);
    srv_start(&t);
    atomic_store(&g_calls, 0);
    static const char BIG[] = "POST /echo HTTP/1.1\r\nHost: x\r\n"
                              "Content-Length: 9223372036854775807\r\n\r\n";
    struct resp p;
    struct rd r;

    /* behind a request with a body, in one send; what follows the oversized header (its
     * first body bytes, another request) is never parsed */
    int fd = cl_connect_slow(t.port);
    rd_init(&r, fd);
    char all[512];
    snprintf(all, sizeof all, "POST /echo HTTP/1.1\r\nHost: x\r\nContent-Length: 3\r\n\r\nabc%s"
             "xxxxGET /now HTTP/1.1\r\nHost: x\r\n\r\n", BIG);
    cl_sends(fd, all);
    CHECK_EQ_INT(read_resp(&r, &p), 0);
    CHECK_EQ_INT(p.status, 200);
    CHECK_STR(p.body, "abc");
    resp_free(&p);
    expect_413_close(&r);
    rd_free(&r);
    close(fd);

    /* behind two body-less requests, LF-only line ends */
    fd = cl_connect_slow(t.port);
    rd_init(&r, fd);
    cl_sends(fd, "GET /now HTTP/1.1\nHost: x\n\nGET /now HTTP/1.1\nHost: x\n\n"
                 "POST /echo?x=1 HTTP/1.1\nHost: x\nContent-Length:  5000 \n\n");
    for (int i = 0; i < 2; i++) {
        CHECK_EQ_INT(read_resp(&r, &p), 0);
        CHECK_EQ_INT(p.status, 200);
        CHECK_STR(p.body, "now");
        resp_free(&p);
    }
    expect_413_close(&r);
    rd_free(&r);
    close(fd);

    /* behind a request whose handler answers later: its reply first, then the 413 */
    atomic_store(&g_nheld, 0);
    fd = cl_connect_slow(t.port);
    rd_init(&r, fd);
    snprintf(all, sizeof all, "GET /hold HTTP/1.1\r\nHost: x\r\n\r\n%s", BIG);
    cl_sends(fd, all);
    CHECK(wait_int(&g_nheld, 1, 5000));
    CHECK_EQ_INT(http_post(t.s, post_reply_held, NULL), 0);
    CHECK_EQ_INT(read_resp(&r, &p), 0);
    CHECK_EQ_INT(p.status, 200);
    CHECK_STR(p.body, "late");
    resp_free(&p);
    expect_413_close(&r);
    rd_free(&r);
    close(fd);

    /* sent while a stream is open on the connection: the stream ends first */
    atomic_store(&g_nheld, 0);
    fd = cl_connect_slow(t.port);
    rd_init(&r, fd);
    cl_sends(fd, "GET /sh HTTP/1.1\r\nHost: x\r\n\r\n");
    CHECK(wait_int(&g_nheld, 1, 5000));
    CHECK_EQ_INT(read_head(&r, &p), 0);
    CHECK_EQ_INT(p.status, 200);
    char *ch = NULL;
    CHECK_EQ_INT(read_chunk(&r, &ch), 9);
    free(ch);
    cl_sends(fd, BIG);
    cl_sends(fd, "more body bytes");
    CHECK_EQ_INT(http_post(t.s, post_stream_end, NULL), 0);
    ch = NULL;
    CHECK_EQ_INT(read_chunk(&r, &ch), 9);
    CHECK_STR(ch, "data: b\n\n");
    free(ch);
    CHECK_EQ_INT(read_chunk(&r, NULL), 0);
    expect_413_close(&r);
    rd_free(&r);
    close(fd);

    /* a header block that arrives in pieces (evhttp has consumed its first lines when the
     * last one comes) */
    static const char *const PIECES[] = {"POST /echo HTTP/1.1\r\n", "Host: x\r\nContent-Le",
                                         "ngth: 1025\r\n", "\r", "\n"};
    fd = cl_connect_slow(t.port);
    rd_init(&r, fd);
    for (size_t i = 0; i < sizeof PIECES / sizeof *PIECES; i++) {
        cl_sends(fd, PIECES[i]);
        sleep_ms(30); /* lets the server read each piece alone; any split must work */
    }
    expect_413_close(&r);
    rd_free(&r);
    close(fd);

    /* behind a chunked request (blank lines between chunks, as evhttp allows) */
    fd = cl_connect_slow(t.port);
    rd_init(&r, fd);
    snprintf(all, sizeof all, "POST /echo HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n"
             "\r\n3\r\nabc\r\n\r\nb\r\n0\r\nGET /x\r\n\r\n0\r\n\r\n%s", BIG);
    cl_sends(fd, all);
    CHECK_EQ_INT(read_resp(&r, &p), 0);
    CHECK_EQ_INT(p.status, 200);
    CHECK_STR(p.body, "abc0\r\nGET /x\r\n");
    resp_free(&p);
    expect_413_close(&r);
    rd_free(&r);
    close(fd);

    /* a connection whose framing the scan cannot follow (a chunked request with a trailer
     * first) is left to evhttp: the pipelined request within the limit is still served */
    fd = cl_connect_slow(t.port);
    rd_init(&r, fd);
    cl_sends(fd, "POST /echo HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n"
                 "3\r\nabc\r\n0\r\nX-Trailer: t\r\n\r\n"
                 "POST /echo HTTP/1.1\r\nHost: x\r\nContent-Length: 2\r\n\r\nok");
    CHECK_EQ_INT(read_resp(&r, &p), 0);
    CHECK_STR(p.body, "abc");
    resp_free(&p);
    CHECK_EQ_INT(read_resp(&r, &p), 0);
    CHECK_STR(p.body, "ok");
    resp_free(&p);
    rd_free(&r);
    close(fd);

    CHECK_EQ_INT(atomic_load(&g_calls), 6); /* abc, now x2, chunked x2, ok:
                                               never the GET /now after a 413 */
    struct http_stats st;
    http_get_stats(t.s, &st);
    CHECK_EQ_INT(st.rejected_413, 6);
    srv_stop(&t);
}

/* Random pipelines: sequences of GET and POST requests (CRLF or LF line ends, bodies of
 * 0..1024 bytes, headers in random case and order) in which a request may declare a body over
 * the limit, sent in random pieces. Every request before the oversized one must be answered
 * in order with its own body; the oversized one gets its 413, then the close; nothing after
 * it is answered. A disagreement between the framing scan and evhttp would drop, misorder
 * or cut a valid request here. */
static uint64_t g_rng = 0x9e3779b97f4a7c15ull;
static unsigned rnd(unsigned n)
{
    g_rng ^= g_rng << 13, g_rng ^= g_rng >> 7, g_rng ^= g_rng << 17;
    return (unsigned)(g_rng % n);
}

static void test_413_random(void)
{
    struct tsrv t;
    struct http_config c = {.host = "127.0.0.1", .port = 0, .max_body = 1024,
                            .header_timeout_s = 120};
    if (srv_new(&t, &c) != 0) {
        CHECK(0);
        return;
    }
    http_route(t.s, "POST", "/echo", 0, h_echo_body, NULL);
    http_route(t.s, "GET", "/now", 0, h_text, "now");
    srv_start(&t);
    int bad = 0, n413 = 0;
    for (int conn = 0; conn < 150 && !bad; conn++) {
        char *buf = malloc(16384);
        size_t n = 0;
        char want[6][1100];
        int n_req = 1 + (int)rnd(5), big_at = rnd(3) ? (int)rnd((unsigned)n_req) : -1;
        for (int i = 0; i < n_req; i++) {
            const char *eol = rnd(2) ? "\r\n" : "\n";
            if (i == big_at) {
                static const char *const CL[] = {"1025", "5000", "9223372036854775807",
                                                 "99999999999999999999999"};
                n += (size_t)sprintf(buf + n, "POST /echo HTTP/1.1%sHost: x%s%s: %s%s%s",
                                     eol, eol, rnd(2) ? "Content-Length" : "content-LENGTH",
                                     CL[rnd(4)], eol, eol);
                n += (size_t)sprintf(buf + n, "GET /now HTTP/1.1%s%s", eol, eol); /* unread */
                break;
            }
            if (rnd(3) == 0) {
                n += (size_t)sprintf(buf + n, "GET /now HTTP/1.1%sHost: x%s%s", eol, eol, eol);
                strcpy(want[i], "now");
                continue;
            }
            if (rnd(4) == 0) { /* chunked: 0..3 chunks, sizes in either hex case */
                n += (size_t)sprintf(buf + n, "POST /echo HTTP/1.1%sTransfer-Encoding: %s%s%s",
                                     eol, rnd(2) ? "chunked" : "Chunked", eol, eol);
                int got = 0, nc = (int)rnd(4);
                static const char CA[] = "0\r\nPOST /x\n";
                for (int ch = 0; ch < nc; ch++) {
                    int cs = 1 + (int)rnd(300);
                    n += (size_t)sprintf(buf + n, rnd(2) ? "%x%s" : "%X%s", cs, eol);
                    for (int k = 0; k < cs; k++)
                        buf[n++] = want[i][got++] = CA[rnd(sizeof CA - 1)];
                    n += (size_t)sprintf(buf + n, "%s%s", eol, rnd(4) ? "" : eol);
                }
                want[i][got] = 0;
                n += (size_t)sprintf(buf + n, "0%s%s", eol, eol);
                continue;
            }
            int len = rnd(4) == 0 ? 0 : (int)rnd(1025);
            static const char ALPHA[] = "GET /x HTTP/1.1\r\n\r\nPOST";
            for (int k = 0; k < len; k++) /* a body that looks like requests and lines */
                want[i][k] = ALPHA[rnd(sizeof ALPHA - 1)];
            want[i][len] = 0;
            if (rnd(2))
                n += (size_t)sprintf(buf + n, "POST /echo HTTP/1.1%sContent-Length: %d%sX-A: b%s%s",
                                     eol, len, eol, eol, eol);
            else
                n += (size_t)sprintf(buf + n, "POST /echo HTTP/1.1%sx-a: b%scontent-length:%d%s%s",
                                     eol, eol, len, eol, eol);
            memcpy(buf + n, want[i], (size_t)len);
            n += (size_t)len;
        }
        int fd = cl_connect_slow(t.port);
        struct rd r;
        rd_init(&r, fd);
        for (size_t off = 0; off < n;) { /* random pieces */
            size_t k = 1 + rnd(rnd(4) == 0 ? 400 : 40);
            if (k > n - off)
                k = n - off;
            if (cl_send(fd, buf + off, k) != 0)
                break; /* the server may close once it answered the 413 */
            off += k;
        }
        int answered = big_at < 0 ? n_req : big_at;
        for (int i = 0; i < answered && !bad; i++) {
            struct resp p;
            if (read_resp(&r, &p) != 0 || p.status != 200 || !p.body || strcmp(p.body, want[i])) {
                fprintf(stderr, "conn %d request %d of %d (413 at %d): status %d body %.40s\n",
                        conn, i, n_req, big_at, p.status, p.body ? p.body : "(none)");
                bad = 1;
            }
            resp_free(&p);
        }
        if (!bad && big_at >= 0) {
            struct resp p;
            if (read_resp(&r, &p) != 0 || p.status != 413) {
                fprintf(stderr, "conn %d: no 413 for request %d (status %d)\n", conn, big_at,
                        p.status);
                bad = 1;
            } else {
                n413++;
                while (rd_more(&r) > 0) {
                }
                if (!r.eof || r.len) {
                    fprintf(stderr, "conn %d: %zu bytes after the 413\n", conn, r.len);
                    bad = 1;
                }
            }
            resp_free(&p);
        }
        rd_free(&r);
        close(fd);
        free(buf);
    }
    CHECK(!bad);
    CHECK(n413 > 20);
    struct http_stats st;
    for (int tries = 0; tries < 500; tries++) { /* the counter is the server thread's */
        http_get_stats(t.s, &st);
        if ((int)st.rejected_413 == n413)
            break;
        usleep(10000);
    }
    CHECK_EQ_INT(st.rejected_413, n413);
    srv_stop(&t);
}

/* ---- SSE from a producer thread ---- */

struct sse_state {
    struct http_server *s;
    struct http_req *r;
    int n_events;
    int pause_ms;          /* one long pause in the middle (longer than the header timeout) */
    atomic_int client_saw_first;
    atomic_int closes;
    atomic_int write_fail;
    int next;              /* loop thread only */
    pthread_t th;
};
static struct sse_state g_sse;

static void sse_on_close(struct http_req *r, void *ud)
{
    struct sse_state *st = ud;
    atomic_fetch_add(&st->closes, 1);
}

static void post_sse_event(void *ud)
{
    struct sse_state *st = ud;
    char b[64];
    int n = snprintf(b, sizeof b, "data: {\"i\":%d}\n\n", st->next++);
    if (http_stream_write(st->r, b, (size_t)n) != 0)
        atomic_fetch_add(&st->write_fail, 1);
}

static void post_sse_end(void *ud)
{
    struct sse_state *st = ud;
    http_stream_write(st->r, "data: [DONE]\n\n", 14);
    http_stream_end(st->r);
    st->r = NULL;
}

static void *sse_producer(void *arg)
{
    struct sse_state *st = arg;
    http_post(st->s, post_sse_event, st);
    /* the rest only after the client has seen the first event: proves no buffering */
    wait_int(&st->client_saw_first, 1, 5000);
    for (int i = 1; i < st->n_events; i++) {
        if (i == st->n_events / 2 && st->pause_ms)
            sleep_ms(st->pause_ms);
        http_post(st->s, post_sse_event, st);
    }
    http_post(st->s, post_sse_end, st);
    return NULL;
}

static void h_sse(struct http_req *r, void *ud)
{
    struct sse_state *st = ud;
    st->r = r;
    http_req_on_close(r, sse_on_close, st);
    http_stream_begin(r, 200, NULL);
    pthread_create(&st->th, NULL, sse_producer, st);
}

static void test_sse(void)
{
    struct tsrv t;
    struct http_config c = {.host = "127.0.0.1", .port = 0, .header_timeout_s = 1};
    if (srv_new(&t, &c) != 0) {
        CHECK(0);
        return;
    }
    memset(&g_sse, 0, sizeof g_sse);
    g_sse.s = t.s;
    g_sse.n_events = 200;
    g_sse.pause_ms = 1600;
    http_route(t.s, "GET", "/sse", 0, h_sse, &g_sse);
    srv_start(&t);
    int fd = cl_connect(t.port);
    struct rd r;
    rd_init(&r, fd);
    cl_sends(fd, "GET /sse HTTP/1.1\r\nHost: x\r\n\r\n");
    struct resp p;
    CHECK_EQ_INT(read_head(&r, &p), 0);
    CHECK_EQ_INT(p.status, 200);
    CHECK_STR(resp_header(&p, "content-type"), "text/event-stream");
    CHECK_STR(resp_header(&p, "cache-control"), "no-cache");
    CHECK_STR(resp_header(&p, "transfer-encoding"), "chunked");
    CHECK(resp_header(&p, "content-length") == NULL);
    char *c0 = NULL;
    CHECK_EQ_INT(read_chunk(&r, &c0), (long)strlen("data: {\"i\":0}\n\n"));
    CHECK_STR(c0, "data: {\"i\":0}\n\n");
    free(c0);
    atomic_store(&g_sse.client_saw_first, 1);
    /* the rest, in order, then [DONE], then the last chunk; the mid-stream pause is longer
     * than the header timeout and must not cut the stream */
    size_t cap = 1 << 16, len = 0;
    char *all = malloc(cap);
    for (;;) {
        char *ch = NULL;
        long sz = read_chunk(&r, &ch);
        if (sz <= 0) {
            CHECK_EQ_INT(sz, 0);
            free(ch);
            break;
        }
        if (len + (size_t)sz + 1 > cap)
            all = realloc(all, cap = (len + (size_t)sz + 1) * 2);
        memcpy(all + len, ch, (size_t)sz);
        len += (size_t)sz;
        free(ch);
    }
    all[len] = 0;
    int expect = 1, bad = 0;
    const char *q = all;
    while (expect < g_sse.n_events) {
        char want[64];
        int n = snprintf(want, sizeof want, "data: {\"i\":%d}\n\n", expect);
        if (strncmp(q, want, (size_t)n) != 0) {
            bad = 1;
            break;
        }
        q += n;
        expect++;
    }
    CHECK(!bad);
    CHECK_STR(q, "data: [DONE]\n\n");
    free(all);
    pthread_join(g_sse.th, NULL);
    CHECK_EQ_INT(atomic_load(&g_sse.write_fail), 0);
    CHECK_EQ_INT(atomic_load(&g_sse.closes), 0);
    /* keep-alive: the same connection serves another request after the stream */
    memset(&g_sse, 0, sizeof g_sse);
    g_sse.s = t.s;
    g_sse.n_events = 3;
    atomic_store(&g_sse.client_saw_first, 1);
    cl_sends(fd, "GET /sse HTTP/1.1\r\nHost: x\r\n\r\n");
    CHECK_EQ_INT(read_resp(&r, &p), 0);
    CHECK_EQ_INT(p.status, 200);
    CHECK_STR(p.body, "data: {\"i\":0}\n\ndata: {\"i\":1}\n\ndata: {\"i\":2}\n\ndata: [DONE]\n\n");
    resp_free(&p);
    pthread_join(g_sse.th, NULL);
    rd_free(&r);
    close(fd);
    srv_stop(&t);
}

/* ---- HTTP/1.0 and HEAD ---- */

static void h_sync_stream(struct http_req *r, void *ud)
{
    http_stream_begin(r, 200, NULL);
    http_stream_write(r, "data: a\n\n", 9);
    http_stream_write(r, "data: b\n\n", 9);
    http_stream_end(r);
}

static void test_http10_head(void)
{
    struct tsrv t;
    struct http_config c = {.host = "127.0.0.1", .port = 0};
    if (srv_new(&t, &c) != 0) {
        CHECK(0);
        return;
    }
    http_route(t.s, "GET", "/s", 0, h_sync_stream, NULL);
    http_route(t.s, NULL, "/t", 0, h_text, "hello");
    srv_start(&t);
    struct resp p;
    /* HTTP/1.0: no chunking, the body ends with the connection */
    CHECK_EQ_INT(do_req(t.port, "GET /s HTTP/1.0\r\n\r\n", &p), 0);
    CHECK_EQ_INT(p.status, 200);
    CHECK(resp_header(&p, "transfer-encoding") == NULL);
    CHECK_EQ_INT(p.closed, 1);
    CHECK_STR(p.body, "data: a\n\ndata: b\n\n");
    resp_free(&p);
    /* HEAD: headers only */
    int fd = cl_connect(t.port);
    struct rd r;
    rd_init(&r, fd);
    cl_sends(fd, "HEAD /t HTTP/1.1\r\nHost: x\r\n\r\nGET /t HTTP/1.1\r\nHost: x\r\n\r\n");
    CHECK_EQ_INT(read_head(&r, &p), 0);
    CHECK_EQ_INT(p.status, 200);
    CHECK_STR(resp_header(&p, "content-length"), "5");
    CHECK_EQ_INT(read_resp(&r, &p), 0); /* the pipelined GET follows at once */
    CHECK_EQ_INT(p.status, 200);
    CHECK_STR(p.body, "hello");
    resp_free(&p);
    rd_free(&r);
    close(fd);
    srv_stop(&t);
}

/* ---- disconnects ---- */

struct dc_state {
    struct http_req *r;
    atomic_int closes;
    atomic_int started;
    atomic_int write_rc;  /* result of a write after the close */
    atomic_int done;
};
static struct dc_state g_dc;

static void dc_on_close(struct http_req *r, void *ud)
{
    struct dc_state *st = ud;
    CHECK(r == st->r);
    CHECK(http_req_gone(r));
    atomic_fetch_add(&st->closes, 1);
}

static void h_dc_stream(struct http_req *r, void *ud)
{
    struct dc_state *st = ud;
    st->r = r;
    http_req_ref(r);
    http_req_on_close(r, dc_on_close, st);
    http_stream_begin(r, 200, NULL);
    http_stream_write(r, "data: one\n\n", 11);
    atomic_store(&st->started, 1);
}

static void h_dc_async(struct http_req *r, void *ud)
{
    struct dc_state *st = ud;
    st->r = r;
    http_req_ref(r);
    http_req_on_close(r, dc_on_close, st);
    atomic_store(&st->started, 1);
}

static void post_late_write(void *ud)
{
    struct dc_state *st = ud;
    atomic_store(&st->write_rc, http_stream_write(st->r, "data: two\n\n", 11));
    http_stream_end(st->r);    /* harmless no-op now */
    http_stream_end(st->r);
    http_reply(st->r, 200, NULL, "x", 1);
    http_req_unref(st->r);
    st->r = NULL;
    atomic_store(&st->done, 1);
}

static void post_late_reply(void *ud)
{
    struct dc_state *st = ud;
    http_add_header(st->r, "X-A", "b");
    http_reply(st->r, 200, NULL, "{}", 2);
    http_stream_begin(st->r, 200, NULL);
    atomic_store(&st->write_rc, http_stream_write(st->r, "x", 1));
    http_req_unref(st->r);
    st->r = NULL;
    atomic_store(&st->done, 1);
}

static void test_disconnect(void)
{
    struct tsrv t;
    struct http_config c = {.host = "127.0.0.1", .port = 0};
    if (srv_new(&t, &c) != 0) {
        CHECK(0);
        return;
    }
    http_route(t.s, "GET", "/stream", 0, h_dc_stream, &g_dc);
    http_route(t.s, "GET", "/async", 0, h_dc_async, &g_dc);
    srv_start(&t);

    /* mid-stream */
    memset(&g_dc, 0, sizeof g_dc);
    int fd = cl_connect(t.port);
    struct rd r;
    rd_init(&r, fd);
    cl_sends(fd, "GET /stream HTTP/1.1\r\nHost: x\r\n\r\n");
    struct resp p;
    CHECK_EQ_INT(read_head(&r, &p), 0);
    char *ch = NULL;
    CHECK_EQ_INT(read_chunk(&r, &ch), 11);
    free(ch);
    rd_free(&r);
    close(fd);
    CHECK(wait_int(&g_dc.closes, 1, 3000));
    sleep_ms(50);
    CHECK_EQ_INT(atomic_load(&g_dc.closes), 1);
    http_post(t.s, post_late_write, &g_dc);
    CHECK(wait_int(&g_dc.done, 1, 3000));
    CHECK_EQ_INT(atomic_load(&g_dc.write_rc), -1);
    CHECK_EQ_INT(atomic_load(&g_dc.closes), 1);

    /* inside an async handler, before any byte of the reply */
    memset(&g_dc, 0, sizeof g_dc);
    fd = cl_connect(t.port);
    cl_sends(fd, "GET /async HTTP/1.1\r\nHost: x\r\n\r\n");
    CHECK(wait_int(&g_dc.started, 1, 3000));
    close(fd);
    CHECK(wait_int(&g_dc.closes, 1, 3000));
    http_post(t.s, post_late_reply, &g_dc);
    CHECK(wait_int(&g_dc.done, 1, 3000));
    CHECK_EQ_INT(atomic_load(&g_dc.closes), 1);
    CHECK_EQ_INT(atomic_load(&g_dc.write_rc), -1);

    /* a request still open when the server is freed: on_close runs during free */
    memset(&g_dc, 0, sizeof g_dc);
    fd = cl_connect(t.port);
    cl_sends(fd, "GET /async HTTP/1.1\r\nHost: x\r\n\r\n");
    CHECK(wait_int(&g_dc.started, 1, 3000));
    srv_stop(&t);
    CHECK_EQ_INT(atomic_load(&g_dc.closes), 1);
    CHECK(wait_eof(fd, 2000));
    close(fd);
}

/* ---- backpressure: a client that never reads ---- */

static struct dc_state g_bp;
static atomic_int g_bp_writes;

static void h_flood(struct http_req *r, void *ud)
{
    struct dc_state *st = ud;
    st->r = r;
    http_req_ref(r);
    http_req_on_close(r, dc_on_close, st);
    http_stream_begin(r, 200, "application/octet-stream");
    static char chunk[65536];
    memset(chunk, 'z', sizeof chunk);
    int rc = 0, n = 0;
    for (n = 0; n < 1024 && rc == 0; n++) /* up to 64 MiB */
        rc = http_stream_write(r, chunk, sizeof chunk);
    atomic_store(&g_bp_writes, n);
    atomic_store(&st->write_rc, rc);
    atomic_store(&st->started, 1);
}

static void post_unref(void *ud)
{
    struct dc_state *st = ud;
    CHECK_EQ_INT(http_stream_write(st->r, "x", 1), -1);
    http_stream_end(st->r);
    http_req_unref(st->r);
    atomic_store(&st->done, 1);
}

static void test_backpressure(void)
{
    struct tsrv t;
    struct http_config c = {.host = "127.0.0.1", .port = 0};
    if (srv_new(&t, &c) != 0) {
        CHECK(0);
        return;
    }
    http_route(t.s, "GET", "/flood", 0, h_flood, &g_bp);
    srv_start(&t);
    memset(&g_bp, 0, sizeof g_bp);
    int fd = cl_connect(t.port);
    int small = 4096;
    setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &small, sizeof small);
    cl_sends(fd, "GET /flood HTTP/1.1\r\nHost: x\r\n\r\n");
    CHECK(wait_int(&g_bp.started, 1, 5000));
    CHECK_EQ_INT(atomic_load(&g_bp.write_rc), -1);
    int n = atomic_load(&g_bp_writes);
    CHECK_MSG(n > 100 && n < 200, "writes before the cut: %d", n); /* ~8 MiB / 64 KiB */
    CHECK(wait_int(&g_bp.closes, 1, 3000));
    http_post(t.s, post_unref, &g_bp);
    CHECK(wait_int(&g_bp.done, 1, 3000));
    CHECK_EQ_INT(atomic_load(&g_bp.closes), 1);
    close(fd);
    srv_stop(&t);
}

/* ---- header timeout ---- */

static void test_header_timeout(void)
{
    struct tsrv t;
    struct http_config c = {.host = "127.0.0.1", .port = 0, .header_timeout_s = 1};
    if (srv_new(&t, &c) != 0) {
        CHECK(0);
        return;
    }
    http_route(t.s, "GET", "/x", 0, h_text, "x");
    srv_start(&t);
    int fd = cl_connect(t.port);
    cl_sends(fd, "GET /x HTTP/1.1\r\nHost:");
    double t0 = now_s();
    CHECK(wait_eof(fd, 4000));
    double dt = now_s() - t0;
    CHECK_MSG(dt > 0.5, "dropped after %.2fs", dt); /* not before the 1 s timeout */
    close(fd);
    /* a client that connects and says nothing is dropped too */
    fd = cl_connect(t.port);
    CHECK(wait_eof(fd, 4000));
    close(fd);
    /* a client that drips its headers (never idle for the timeout) is dropped by the
     * deadline from its first byte, not kept forever */
    fd = cl_connect(t.port);
    struct timeval tv = {0, 1000};
    setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
    const char *drip = "GET /x HTTP/1.1\r\nHost: x\r\nX-Slow: ";
    t0 = now_s();
    int dropped = 0;
    /* the header name, then 'a' after 'a' until dropped (bounded: 60 s) */
    for (size_t i = 0; !dropped && now_s() - t0 < 60; i++) {
        if (send(fd, i < strlen(drip) ? drip + i : "a", 1, MSG_NOSIGNAL) != 1)
            dropped = 1;
        sleep_ms(100);
        char b[16];
        ssize_t k = recv(fd, b, sizeof b, 0);
        if (k == 0 || (k < 0 && errno != EAGAIN && errno != EWOULDBLOCK))
            dropped = 1;
    }
    dt = now_s() - t0;
    CHECK_MSG(dropped && dt > 0.5, "drip-fed request: dropped=%d after %.2fs", dropped, dt);
    close(fd);
    /* the same deadline applies to the next request on a kept-alive connection, and a
     * complete request within the deadline is served */
    fd = cl_connect(t.port);
    struct rd r;
    rd_init(&r, fd);
    cl_sends(fd, "GET /x HTTP/1.1\r\nHost: x\r\n\r\n");
    struct resp p;
    CHECK_EQ_INT(read_resp(&r, &p), 0);
    CHECK_EQ_INT(p.status, 200);
    resp_free(&p);
    cl_sends(fd, "GET /x HTTP/1.1\r\n");
    t0 = now_s();
    CHECK(wait_eof(fd, 4000));
    dt = now_s() - t0;
    CHECK_MSG(dt > 0.5, "second request dropped after %.2fs", dt);
    rd_free(&r);
    close(fd);
    srv_stop(&t);
}

/* ---- posts: FIFO from several threads, stop ---- */

#define NPOST 20000
struct post_state {
    struct http_server *s;
    int id;
    int last[4];        /* loop thread: last sequence seen per producer */
    atomic_int count;
    atomic_int order_bad;
};
static struct post_state g_ps;

struct post_item {
    int producer, seq;
};
static struct post_item g_items[4][NPOST];

static void post_fn(void *ud)
{
    struct post_item *it = ud;
    if (it->seq != g_ps.last[it->producer] + 1)
        atomic_fetch_add(&g_ps.order_bad, 1);
    g_ps.last[it->producer] = it->seq;
    atomic_fetch_add(&g_ps.count, 1);
}

static void *poster(void *arg)
{
    int id = (int)(intptr_t)arg;
    for (int i = 0; i < NPOST; i++) {
        g_items[id][i].producer = id;
        g_items[id][i].seq = i;
        if (http_post(g_ps.s, post_fn, &g_items[id][i]) != 0)
            atomic_fetch_add(&g_ps.order_bad, 1000);
    }
    return NULL;
}

static int g_never_called;
static void post_never(void *ud)
{
    g_never_called++;
}

static void test_posts_and_stop(void)
{
    struct tsrv t;
    struct http_config c = {.host = "127.0.0.1", .port = 0};
    if (srv_new(&t, &c) != 0) {
        CHECK(0);
        return;
    }
    memset(&g_ps, 0, sizeof g_ps);
    for (int i = 0; i < 4; i++)
        g_ps.last[i] = -1;
    g_ps.s = t.s;
    srv_start(&t);
    pthread_t th[4];
    for (int i = 0; i < 4; i++)
        pthread_create(&th[i], NULL, poster, (void *)(intptr_t)i);
    for (int i = 0; i < 4; i++)
        pthread_join(th[i], NULL);
    CHECK(wait_int(&g_ps.count, 4 * NPOST, 10000));
    CHECK_EQ_INT(atomic_load(&g_ps.order_bad), 0);
    double t0 = now_s();
    http_server_stop(t.s);
    pthread_join(t.th, NULL);
    CHECK(now_s() - t0 < 30.0); /* stop() does not hang (it drains for at most 2 s) */
    CHECK_EQ_INT(t.run_rc, 0);
    CHECK_EQ_INT(http_post(t.s, post_never, NULL), -1); /* after stop: refused */
    http_server_stop(t.s);                               /* idempotent */
    http_server_free(t.s);
    CHECK_EQ_INT(g_never_called, 0);

    /* stop before run: run returns at once */
    if (srv_new(&t, &c) != 0) {
        CHECK(0);
        return;
    }
    http_server_stop(t.s);
    CHECK_EQ_INT(http_server_run(t.s), 0);
    http_server_free(t.s);
}

/* ---- stop lets written replies leave ---- */

static struct http_server *g_stop_srv;

static void h_big_then_stop(struct http_req *r, void *ud)
{
    size_t n = (size_t)32 << 20; /* more than the kernel's socket buffers hold */
    char *b = malloc(n);
    memset(b, 'q', n);
    http_reply(r, 200, "application/octet-stream", b, n);
    free(b);
    http_server_stop(g_stop_srv);
}

static void test_stop_flushes(void)
{
    struct tsrv t;
    struct http_config c = {.host = "127.0.0.1", .port = 0};
    if (srv_new(&t, &c) != 0) {
        CHECK(0);
        return;
    }
    g_stop_srv = t.s;
    http_route(t.s, "GET", "/big", 0, h_big_then_stop, NULL);
    srv_start(&t);
    int fd = cl_connect(t.port);
    struct rd r;
    rd_init(&r, fd);
    cl_sends(fd, "GET /big HTTP/1.1\r\nHost: x\r\n\r\n");
    sleep_ms(100); /* the reply is written and stop() called while we are not reading */
    struct resp p;
    CHECK_EQ_INT(read_resp(&r, &p), 0);
    CHECK_EQ_INT(p.status, 200);
    CHECK_EQ_INT(p.body_len, (size_t)32 << 20);
    resp_free(&p);
    rd_free(&r);
    close(fd);
    pthread_join(t.th, NULL);
    /* no new connections once stopping */
    CHECK(cl_connect(t.port) < 0);
    http_server_free(t.s);
}

static void test_busy_port(void)
{
    struct tsrv a;
    struct http_config c = {.host = "127.0.0.1", .port = 0};
    if (srv_new(&a, &c) != 0) {
        CHECK(0);
        return;
    }
    struct http_config c2 = {.host = "127.0.0.1", .port = a.port};
    struct http_server *b = NULL;
    struct cerr e = {0};
    CHECK(http_server_new(&b, &c2, &e) < 0);
    CHECK(b == NULL);
    char want[64];
    snprintf(want, sizeof want, "127.0.0.1:%d", a.port);
    CHECK_MSG(strstr(e.msg, want) != NULL, "message: %s", e.msg);
    struct http_config c3 = {.host = "127.0.0.1", .port = 70000};
    CHECK(http_server_new(&b, &c3, &e) < 0);
    http_server_free(a.s);
}

/* ---- chaos: random clients (complete, partial reads, early closes, oversized bodies)
 * against streams and async replies driven by posts from another thread. Run under ASan this
 * is the lifetime test: no crash, no leak, on_close at most once per request. ---- */

struct cjob {
    struct http_req *r;
    int mode;      /* 0 stream, 1 async reply */
    int ticks;
    int closes;
    struct cjob *next;
};
static struct cjob *g_cjobs;        /* loop thread only */
static atomic_int g_chaos_stop, g_chaos_bad;
static struct http_server *g_chaos_srv;

static void cjob_on_close(struct http_req *r, void *ud)
{
    struct cjob *j = ud;
    if (++j->closes > 1)
        atomic_fetch_add(&g_chaos_bad, 1);
}

static void h_chaos(struct http_req *r, void *ud)
{
    struct cjob *j = calloc(1, sizeof *j);
    j->r = r;
    j->mode = (int)(intptr_t)ud;
    http_req_ref(r);
    http_req_on_close(r, cjob_on_close, j);
    if (j->mode == 0)
        http_stream_begin(r, 200, NULL);
    j->next = g_cjobs;
    g_cjobs = j;
}

static void post_tick(void *ud)
{
    for (struct cjob **pj = &g_cjobs; *pj;) {
        struct cjob *j = *pj;
        int done = 0;
        j->ticks++;
        if (j->mode == 0) {
            char b[64];
            int n = snprintf(b, sizeof b, "data: %d\n\n", j->ticks);
            done = http_stream_write(j->r, b, (size_t)n) != 0 || j->ticks >= 20;
            if (done)
                http_stream_end(j->r);
        } else if (j->ticks >= 3 || http_req_gone(j->r)) {
            http_reply(j->r, 200, "text/plain", "async", 5);
            done = 1;
        }
        if (done) {
            *pj = j->next;
            http_req_unref(j->r);
            free(j);
        } else {
            pj = &j->next;
        }
    }
}

static void *chaos_ticker(void *arg)
{
    while (!atomic_load(&g_chaos_stop)) {
        http_post(g_chaos_srv, post_tick, NULL);
        sleep_ms(1);
    }
    return NULL;
}

static void *chaos_client(void *arg)
{
    unsigned seed = (unsigned)(uintptr_t)arg * 2654435761u;
    int port = http_server_port(g_chaos_srv);
    static const char *reqs[] = {
        "GET /x HTTP/1.1\r\nHost: x\r\n\r\n",
        "GET /sse HTTP/1.1\r\nHost: x\r\n\r\n",
        "GET /async HTTP/1.1\r\nHost: x\r\n\r\n",
        "POST /x HTTP/1.1\r\nHost: x\r\nContent-Length: 60000\r\n\r\n",
        "GET /x HTTP/1.1\r\nHost: x\r\n\r\nGET /sse HTTP/1.1\r\nHost: x\r\n\r\n",
        "GET /sse HTTP/1.0\r\n\r\n",
        "garbage\r\n\r\n",
    };
    for (int it = 0; it < 40; it++) {
        seed = seed * 1103515245u + 12345u;
        int fd = cl_connect(port);
        if (fd < 0)
            continue;
        struct timeval tv = {0, 200000};
        setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
        const char *q = reqs[(seed >> 8) % (sizeof reqs / sizeof reqs[0])];
        cl_sends(fd, q);
        if (strncmp(q, "POST", 4) == 0 && (seed >> 12) % 2) {
            static char big[60000];
            cl_send(fd, big, sizeof big);
        }
        int reads = (int)((seed >> 16) % 6); /* 0 = close at once */
        char b[4096];
        for (int k = 0; k < reads; k++)
            if (recv(fd, b, sizeof b, 0) <= 0)
                break;
        close(fd);
    }
    return NULL;
}

static void test_chaos(void)
{
    struct tsrv t;
    struct http_config c = {.host = "127.0.0.1", .port = 0, .max_body = 50000,
                            .max_conns = 4};
    if (srv_new(&t, &c) != 0) {
        CHECK(0);
        return;
    }
    g_chaos_srv = t.s;
    g_cjobs = NULL;
    atomic_store(&g_chaos_stop, 0);
    atomic_store(&g_chaos_bad, 0);
    http_route(t.s, NULL, "/x", 0, h_text, "x");
    http_route(t.s, "GET", "/sse", 0, h_chaos, (void *)0);
    http_route(t.s, "GET", "/async", 0, h_chaos, (void *)1);
    srv_start(&t);
    pthread_t tick, cl[6];
    pthread_create(&tick, NULL, chaos_ticker, NULL);
    for (int i = 0; i < 6; i++)
        pthread_create(&cl[i], NULL, chaos_client, (void *)(uintptr_t)(i + 1));
    for (int i = 0; i < 6; i++)
        pthread_join(cl[i], NULL);
    sleep_ms(300); /* let open jobs finish or notice their clients are gone */
    atomic_store(&g_chaos_stop, 1);
    pthread_join(tick, NULL);
    struct http_stats st;
    http_get_stats(t.s, &st);
    CHECK(st.requests_total > 50);
    srv_stop(&t);
    CHECK_EQ_INT(atomic_load(&g_chaos_bad), 0);
    /* jobs still listed held references the server freed; their records are ours */
    while (g_cjobs) {
        struct cjob *j = g_cjobs;
        g_cjobs = j->next;
        free(j);
    }
}

static void test_unix_socket(void)
{
    char path[108];
    snprintf(path, sizeof path, "/tmp/cinfer_test_http_%d.sock", (int)getpid());
    char host[128];
    snprintf(host, sizeof host, "unix:%s", path);
    struct tsrv t;
    struct http_config c = {.host = host};
    if (srv_new(&t, &c) != 0) {
        CHECK(0);
        return;
    }
    CHECK_EQ_INT(t.port, 0);
    http_route(t.s, "GET", "/x", 0, h_text, "via unix");
    srv_start(&t);
    /* a second server on the same live path is refused */
    struct http_server *b = NULL;
    struct cerr e = {0};
    CHECK(http_server_new(&b, &c, &e) < 0);
    CHECK_MSG(strstr(e.msg, path) != NULL, "message: %s", e.msg);
    int fd = socket(AF_UNIX, SOCK_STREAM, 0);
    struct sockaddr_un a = {.sun_family = AF_UNIX};
    strcpy(a.sun_path, path);
    CHECK_EQ_INT(connect(fd, (struct sockaddr *)&a, sizeof a), 0);
    struct timeval tv = {5, 0};
    setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
    struct rd r;
    rd_init(&r, fd);
    cl_sends(fd, "GET /x HTTP/1.1\r\nHost: x\r\n\r\n");
    struct resp p;
    CHECK_EQ_INT(read_resp(&r, &p), 0);
    CHECK_EQ_INT(p.status, 200);
    CHECK_STR(p.body, "via unix");
    resp_free(&p);
    rd_free(&r);
    close(fd);
    srv_stop(&t);
    CHECK(access(path, F_OK) != 0); /* the socket file is removed */
    /* a stale socket file (nobody listening) is replaced */
    int stale = socket(AF_UNIX, SOCK_STREAM, 0);
    CHECK_EQ_INT(bind(stale, (struct sockaddr *)&a, sizeof a), 0);
    close(stale);
    if (srv_new(&t, &c) == 0)
        http_server_free(t.s);
    else
        CHECK(0);
    /* a regular file is not touched */
    FILE *f = fopen(path, "w");
    if (f)
        fclose(f);
    CHECK(http_server_new(&b, &c, &e) < 0);
    CHECK(access(path, F_OK) == 0);
    unlink(path);
}

int main(void)
{
    RUN(test_routing);
    RUN(test_body_keepalive);
    RUN(test_413);
    RUN(test_413_pipelined);
    RUN(test_413_random);
    RUN(test_401);
    RUN(test_429);
    RUN(test_sse);
    RUN(test_http10_head);
    RUN(test_disconnect);
    RUN(test_backpressure);
    RUN(test_header_timeout);
    RUN(test_posts_and_stop);
    RUN(test_stop_flushes);
    RUN(test_busy_port);
    RUN(test_unix_socket);
    RUN(test_chaos);
    return harness_done();
}
