/* iso_proxy.c — the supervisor's HTTP/1.1 relay to an engine child over its unix socket.
 *
 * One upstream connection per request (Connection: close), a non-blocking bufferevent on the
 * loop. The request goes out with its method, path, query, end-to-end headers and body; the
 * reply comes back parsed just enough to re-emit it: status line and headers, then a
 * Content-Length body (answered whole), a chunked body (each chunk written on as it arrives,
 * so SSE keeps per-token granularity) or a body up to EOF. Failures:
 *  - the engine refused the connection (dead, restarting): the request is held and retried
 *    once on the next ready engine; so is a bodyless GET/HEAD that got no reply byte;
 *  - the engine died before the reply headers: 502 in the protocol's error shape;
 *  - it died mid-stream: an SSE error event in the protocol's shape, then the stream ends.
 * A client that goes away closes the upstream connection, which cancels the generation in
 * the engine (its own disconnect handling).
 */
#include <ctype.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>

#include <event2/buffer.h>
#include <event2/bufferevent.h>
#include <event2/event.h>

#include "api/anthropic.h"
#include "api/oai_out.h"
#include "api/oai_req.h"
#include "api/responses.h"
#include "server/isolate/iso_int.h"
#include "util/log.h"
#include "util/sbuf.h"

enum { P_WAIT = 0, P_HEAD, P_BODY, P_DONE };
enum { PROTO_OAI = 0, PROTO_ANTH, PROTO_RESP };
#define MAX_HDRS 32
#define MAX_HEAD_BYTES (64 * 1024)

struct pxy {
    struct iso *s;
    struct iso_engine *e;
    struct http_req *r;
    struct bufferevent *bev;
    struct pxy *next; /* e->waiting */
    int phase, proto, retried, connected, got_bytes, counted;
    int status, chunked, sse, head_only;
    long clen; /* -1 = not given */
    long left; /* chunked: > 0 bytes of the chunk left; -1 size line next;
                  -2 the CRLF after a chunk; -3 trailers */
    char ctype[160];
    char *hname[MAX_HDRS], *hval[MAX_HDRS];
    int n_hdrs;
    struct evbuffer *body; /* Content-Length / until-EOF bodies */
};

/* ---- error shapes ---------------------------------------------------------------------- */

static int path_is(const char *path, const char *p)
{
    size_t n = strlen(p);
    return path && !strncmp(path, p, n) && (!path[n] || path[n] == '/' || path[n] == '?');
}

static int proto_of(const char *path)
{
    if (path_is(path, "/v1/messages"))
        return PROTO_ANTH;
    if (path_is(path, "/v1/responses"))
        return PROTO_RESP;
    return PROTO_OAI;
}

char *iso_error_body(const char *path, int status, const char *type, const char *msg)
{
    struct api_error err;
    api_fail(&err, status, NULL, "%s", msg);
    if (type)
        err.type = type;
    if (proto_of(path) == PROTO_ANTH)
        return anth_error_body(&err);
    return oai_error_body(&err);
}

/* ---- lifetime -------------------------------------------------------------------------- */

static void pxy_free(struct pxy *p)
{
    if (p->bev)
        bufferevent_free(p->bev);
    if (p->body)
        evbuffer_free(p->body);
    for (int i = 0; i < p->n_hdrs; i++)
        free(p->hname[i]), free(p->hval[i]);
    if (p->counted)
        p->e->inflight--;
    if (p->r) {
        http_req_on_close(p->r, NULL, NULL);
        http_req_unref(p->r);
    }
    free(p);
}

static void unlink_waiting(struct pxy *p)
{
    struct iso_engine *e = p->e;
    struct pxy **pp = &e->waiting, *prev = NULL;
    for (; *pp; prev = *pp, pp = &(*pp)->next)
        if (*pp == p) {
            *pp = p->next;
            if (e->waiting_tail == p)
                e->waiting_tail = prev;
            return;
        }
}

static void on_gone(struct http_req *r, void *ud)
{
    (void)r;
    struct pxy *p = ud;
    if (p->phase == P_WAIT)
        unlink_waiting(p);
    pxy_free(p); /* closing the upstream cancels the engine's generation */
}

static void reply_error(struct pxy *p, int status, const char *type, const char *msg)
{
    char *b = iso_error_body(http_req_path(p->r), status, type, msg);
    if (b)
        http_reply(p->r, status, NULL, b, strlen(b));
    else
        http_reply_error(p->r, status, msg);
    free(b);
    if (status == 502)
        p->s->failed_502++;
}

/* The engine ended (or broke) the exchange before the reply was whole. */
static void fail_upstream(struct pxy *p, const char *why)
{
    if (p->phase == P_BODY && p->chunked) {
        if (p->sse) {
            struct sbuf sb = {0};
            char msg[320];
            snprintf(msg, sizeof msg, "engine unavailable: %s", why);
            int rc = p->proto == PROTO_ANTH   ? anth_error_frame(&sb, msg)
                     : p->proto == PROTO_RESP ? resp_error_frame(&sb, msg)
                                              : oai_error_frame(&sb, msg);
            if (!rc && sb.len)
                http_stream_write(p->r, sb.p, sb.len);
            sbuf_free(&sb);
        }
        http_stream_end(p->r);
        p->s->failed_502++;
    } else {
        char msg[320];
        snprintf(msg, sizeof msg, "engine unavailable: %s", why);
        reply_error(p, 502, "engine_unavailable", msg);
    }
    pxy_free(p);
}

/* ---- the request out ------------------------------------------------------------------- */

static int hop_by_hop(const char *n)
{
    static const char *const skip[] = {
        "connection", "keep-alive",       "transfer-encoding", "te",
        "upgrade",    "proxy-connection", "content-length",    "host",
        "expect",     "authorization",    "x-api-key",         "trailer"};
    for (size_t i = 0; i < sizeof skip / sizeof skip[0]; i++)
        if (!strcasecmp(n, skip[i]))
            return 1;
    return 0;
}

static void add_hdr(const char *name, const char *value, void *ud)
{
    if (!hop_by_hop(name) && !strpbrk(name, "\r\n") && !strpbrk(value, "\r\n"))
        evbuffer_add_printf(ud, "%s: %s\r\n", name, value);
}

static void add_path(struct evbuffer *out, const char *path)
{
    static const char ok[] = "-._~/!$&'()*+,;=:@";
    for (const unsigned char *c = (const unsigned char *)path; *c; c++)
        if (isalnum(*c) || strchr(ok, *c))
            evbuffer_add(out, c, 1);
        else
            evbuffer_add_printf(out, "%%%02X", *c);
}

static void rd_cb(struct bufferevent *bev, void *ud);
static void ev_cb(struct bufferevent *bev, short what, void *ud);

static void connect_now(struct pxy *p)
{
    struct iso_engine *e = p->e;
    struct sockaddr_un sa = {.sun_family = AF_UNIX};
    snprintf(sa.sun_path, sizeof sa.sun_path, "%s", e->sock);
    p->phase = P_HEAD;
    p->connected = p->got_bytes = 0;
    p->bev = bufferevent_socket_new(p->s->base, -1, BEV_OPT_CLOSE_ON_FREE);
    if (!p->bev) {
        reply_error(p, 500, NULL, "out of memory");
        pxy_free(p);
        return;
    }
    if (!p->counted)
        e->inflight++, p->counted = 1;
    bufferevent_setcb(p->bev, rd_cb, NULL, ev_cb, p);
    struct evbuffer *out = bufferevent_get_output(p->bev);
    const char *m = http_req_method(p->r), *q = http_req_query(p->r);
    size_t blen = 0;
    const char *body = http_req_body(p->r, &blen);
    evbuffer_add_printf(out, "%s ", m);
    add_path(out, http_req_path(p->r));
    if (q && *q)
        evbuffer_add_printf(out, "?%s", q);
    evbuffer_add_printf(out, " HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n");
    http_req_headers_each(p->r, add_hdr, out);
    if (blen || (strcmp(m, "GET") && strcmp(m, "HEAD")))
        evbuffer_add_printf(out, "Content-Length: %zu\r\n", blen);
    evbuffer_add(out, "\r\n", 2);
    if (blen)
        evbuffer_add(out, body, blen);
    bufferevent_enable(p->bev, EV_READ | EV_WRITE);
    if (bufferevent_socket_connect(p->bev, (struct sockaddr *)&sa, sizeof sa) < 0)
        ev_cb(p->bev, BEV_EVENT_ERROR, p); /* no socket file: the engine is not there */
}

static void hold(struct pxy *p)
{
    struct iso_engine *e = p->e;
    p->phase = P_WAIT;
    p->next = NULL;
    if (e->waiting_tail)
        e->waiting_tail->next = p;
    else
        e->waiting = p;
    e->waiting_tail = p;
}

void pxy_start(struct iso *s, struct iso_engine *e, struct http_req *r)
{
    struct pxy *p = calloc(1, sizeof *p);
    if (!p) {
        http_reply_error(r, 500, "out of memory");
        return;
    }
    p->s = s, p->e = e, p->r = r, p->clen = -1;
    p->proto = proto_of(http_req_path(r));
    p->head_only = !strcmp(http_req_method(r), "HEAD");
    http_req_ref(r);
    http_req_on_close(r, on_gone, p);
    s->relayed++;
    e->last_used = iso_now();
    if (e->state == ENG_READY && !e->draining)
        connect_now(p);
    else if (e->state == ENG_BACKOFF) {
        char msg[400];
        snprintf(msg, sizeof msg, "engine unavailable (restarting after repeated failures: %s)",
                 e->reason);
        reply_error(p, 503, "engine_unavailable", msg);
        pxy_free(p);
    } else
        hold(p);
}

void pxy_flush(struct iso *s, struct iso_engine *e)
{
    (void)s;
    struct pxy *p = e->waiting;
    e->waiting = e->waiting_tail = NULL;
    while (p) {
        struct pxy *n = p->next;
        p->next = NULL;
        connect_now(p);
        p = n;
    }
}

void pxy_fail_waiting(struct iso *s, struct iso_engine *e, int status, const char *msg)
{
    (void)s;
    struct pxy *p = e->waiting;
    e->waiting = e->waiting_tail = NULL;
    while (p) {
        struct pxy *n = p->next;
        reply_error(p, status, "engine_unavailable", msg);
        pxy_free(p);
        p = n;
    }
}

/* ---- the reply back -------------------------------------------------------------------- */

static void keep_header(struct pxy *p, char *line)
{
    char *colon = strchr(line, ':');
    if (!colon)
        return;
    *colon = 0;
    char *v = colon + 1;
    while (*v == ' ' || *v == '\t')
        v++;
    size_t n = strlen(v);
    while (n && (v[n - 1] == ' ' || v[n - 1] == '\t'))
        v[--n] = 0;
    if (!strcasecmp(line, "Content-Type"))
        snprintf(p->ctype, sizeof p->ctype, "%s", v);
    else if (!strcasecmp(line, "Content-Length"))
        p->clen = strtol(v, NULL, 10);
    else if (!strcasecmp(line, "Transfer-Encoding"))
        p->chunked = strstr(v, "chunked") != NULL;
    else if (!strcasecmp(line, "Connection") || !strcasecmp(line, "Keep-Alive") ||
             !strcasecmp(line, "Date"))
        ;
    else if (p->n_hdrs < MAX_HDRS) {
        p->hname[p->n_hdrs] = strdup(line);
        p->hval[p->n_hdrs] = strdup(v);
        if (p->hname[p->n_hdrs] && p->hval[p->n_hdrs])
            p->n_hdrs++;
        else
            free(p->hname[p->n_hdrs]), free(p->hval[p->n_hdrs]);
    }
}

/* Headers done: 0 = the reply continues with a body, 1 = it is complete (p freed). */
static int begin_body(struct pxy *p)
{
    p->sse = !strncasecmp(p->ctype, "text/event-stream", 17);
    for (int i = 0; i < p->n_hdrs; i++)
        if (!(p->sse && !strcasecmp(p->hname[i], "Cache-Control")))
            http_add_header(p->r, p->hname[i], p->hval[i]);
    const char *ct = p->ctype[0] ? p->ctype : NULL;
    p->phase = P_BODY;
    if (p->head_only || p->status == 204 || p->status == 304 || p->clen == 0) {
        http_reply(p->r, p->status, ct, "", 0);
        pxy_free(p);
        return 1;
    }
    if (p->chunked) {
        p->left = -1;
        http_stream_begin(p->r, p->status, ct ? ct : "application/octet-stream");
        return 0;
    }
    p->body = evbuffer_new();
    if (!p->body) {
        reply_error(p, 500, NULL, "out of memory");
        pxy_free(p);
        return 1;
    }
    return 0;
}

static void finish_body(struct pxy *p)
{
    if (p->status == 200 && !strcmp(http_req_path(p->r), "/metrics")) {
        size_t en = evbuffer_get_length(p->body); /* the engine's series, labelled with its id */
        char *lab =
            iso_metrics_relabel(en ? (const char *)evbuffer_pullup(p->body, -1) : "", en, p->e->id);
        if (lab) {
            evbuffer_drain(p->body, en);
            evbuffer_add(p->body, lab, strlen(lab));
            free(lab);
        }
        char *m = iso_metrics_text(p->s); /* the supervisor's counters after the engine's */
        if (m)
            evbuffer_add(p->body, m, strlen(m));
        free(m);
    }
    size_t n = evbuffer_get_length(p->body);
    const char *b = n ? (const char *)evbuffer_pullup(p->body, -1) : "";
    http_reply(p->r, p->status, p->ctype[0] ? p->ctype : NULL, b, n);
    pxy_free(p);
}

/* Consumes what the engine sent. Returns 1 when p was freed. */
static int process(struct pxy *p)
{
    struct evbuffer *in = bufferevent_get_input(p->bev);
    if (evbuffer_get_length(in))
        p->got_bytes = 1;
    for (;;) {
        size_t n;
        if (p->phase == P_HEAD) {
            char *line = evbuffer_readln(in, &n, EVBUFFER_EOL_CRLF);
            if (!line) {
                if (evbuffer_get_length(in) > MAX_HEAD_BYTES) {
                    fail_upstream(p, "an oversized reply head");
                    return 1;
                }
                return 0;
            }
            if (!p->status) {
                int st = 0;
                if (sscanf(line, "HTTP/1.%*d %d", &st) != 1 || st < 100 || st > 599) {
                    free(line);
                    fail_upstream(p, "a malformed reply");
                    return 1;
                }
                p->status = st;
            } else if (n == 0) {
                free(line);
                if (p->status < 200) { /* 1xx interim: skip, a real status follows */
                    p->status = 0;
                    continue;
                }
                if (begin_body(p))
                    return 1;
                continue;
            } else
                keep_header(p, line);
            free(line);
            continue;
        }
        if (!p->chunked) {
            if (p->clen < 0) { /* until EOF */
                evbuffer_add_buffer(p->body, in);
                return 0;
            }
            size_t have = evbuffer_get_length(p->body), want = (size_t)p->clen - have;
            evbuffer_remove_buffer(in, p->body, want);
            if (evbuffer_get_length(p->body) >= (size_t)p->clen) {
                finish_body(p);
                return 1;
            }
            return 0;
        }
        if (p->left > 0) {
            size_t avail = evbuffer_get_length(in);
            if (!avail)
                return 0;
            size_t take = avail < (size_t)p->left ? avail : (size_t)p->left;
            int w =
                http_stream_write(p->r, (const char *)evbuffer_pullup(in, (ev_ssize_t)take), take);
            evbuffer_drain(in, take);
            p->left -= (long)take;
            if (!p->left)
                p->left = -2;
            if (w) { /* the client is gone: on_close frees p soon; stop reading */
                bufferevent_disable(p->bev, EV_READ);
                return 0;
            }
            continue;
        }
        char *line = evbuffer_readln(in, &n, EVBUFFER_EOL_CRLF);
        if (!line)
            return 0;
        if (p->left == -1) {
            char *end;
            long sz = strtol(line, &end, 16);
            if (end == line || sz < 0) {
                free(line);
                fail_upstream(p, "a malformed chunk");
                return 1;
            }
            p->left = sz ? sz : -3;
        } else if (p->left == -2) {
            p->left = -1;
        } else if (n == 0) { /* the end of the trailers: the reply is whole */
            free(line);
            http_stream_end(p->r);
            pxy_free(p);
            return 1;
        }
        free(line);
    }
}

static void rd_cb(struct bufferevent *bev, void *ud)
{
    (void)bev;
    process(ud);
}

static void ev_cb(struct bufferevent *bev, short what, void *ud)
{
    (void)bev;
    struct pxy *p = ud;
    if (what & BEV_EVENT_CONNECTED) {
        p->connected = 1;
        return;
    }
    if (!(what & (BEV_EVENT_EOF | BEV_EVENT_ERROR)))
        return;
    if (process(p)) /* what arrived before the end */
        return;
    if (p->phase == P_BODY && !p->chunked && p->clen < 0 && (what & BEV_EVENT_EOF)) {
        finish_body(p); /* a body delimited by the end of the connection */
        return;
    }
    const char *m = http_req_method(p->r);
    int bodyless = !strcmp(m, "GET") || !strcmp(m, "HEAD");
    if (!p->retried && p->phase == P_HEAD && !p->got_bytes && (!p->connected || bodyless)) {
        /* the engine was not there (or died before a GET's reply): once more, on the next
         * ready engine; the supervisor's tick notices a death and respawns */
        log_info("isolate: %s %s: engine %s, retrying once", m, http_req_path(p->r),
                 p->connected ? "closed the connection" : "refused the connection");
        p->retried = 1;
        bufferevent_free(p->bev);
        p->bev = NULL;
        if (p->e->state == ENG_READY)
            p->e->state = ENG_STARTING; /* re-checked by the next tick */
        hold(p);
        return;
    }
    fail_upstream(p, p->connected ? "the engine process ended" : "the engine is not running");
}
