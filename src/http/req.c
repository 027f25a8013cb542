/* req.c — one HTTP request as handlers see it: accessors, replies, chunked/SSE streams.
 *
 * struct http_req wraps an evhttp_request but outlives it when needed: evhttp frees its
 * request with the connection, while a handler (or a post from the engine thread) may still
 * hold our wrapper. The wrapper is refcounted; the layer holds one reference until the
 * request ends (reply / stream_end) or on_close has run. Once the client is gone every call
 * here is a safe no-op and http_stream_write returns -1.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>

#include <event2/buffer.h>
#include <event2/bufferevent.h>
#include <event2/keyvalq_struct.h>

#include "http/http_int.h"
#include "util/log.h"

static const char *method_name(enum evhttp_cmd_type t)
{
    switch (t) {
    case EVHTTP_REQ_GET: return "GET";
    case EVHTTP_REQ_POST: return "POST";
    case EVHTTP_REQ_HEAD: return "HEAD";
    case EVHTTP_REQ_PUT: return "PUT";
    case EVHTTP_REQ_DELETE: return "DELETE";
    case EVHTTP_REQ_OPTIONS: return "OPTIONS";
    case EVHTTP_REQ_TRACE: return "TRACE";
    case EVHTTP_REQ_CONNECT: return "CONNECT";
    case EVHTTP_REQ_PATCH: return "PATCH";
    }
    return "UNKNOWN";
}

/* Reason phrases evhttp 2.1 does not know (it would say "Client Error"). */
static const char *reason_phrase(int status)
{
    switch (status) {
    case 401: return "Unauthorized";
    case 404: return "Not Found";
    case 405: return "Method Not Allowed";
    case 408: return "Request Timeout";
    case 409: return "Conflict";
    case 413: return "Payload Too Large";
    case 422: return "Unprocessable Entity";
    case 429: return "Too Many Requests";
    case 499: return "Client Closed Request";
    case 500: return "Internal Server Error";
    case 502: return "Bad Gateway";
    case 503: return "Service Unavailable";
    case 504: return "Gateway Timeout";
    }
    return NULL;
}

/* ---------------------------------------------------------------- lifetime */

static void req_free(struct http_req *r)
{
    struct http_server *s = r->s;
    if (r->prev)
        r->prev->next = r->next;
    else
        s->live = r->next;
    if (r->next)
        r->next->prev = r->prev;
    free(r->path);
    free(r->query);
    free(r->body);
    free(r);
}

/* Builds the wrapper for a freshly parsed request. Returns NULL with e filled:
 * CERR_NOMEM, or CERR_FORMAT for a path we refuse (it decodes to a NUL byte). */
struct http_req *http_req_new_(struct http_server *s, struct evhttp_request *evreq,
                               struct http_conn *conn, struct cerr *e)
{
    struct http_req *r = calloc(1, sizeof *r);
    if (!r) {
        cerr_set(e, CERR_NOMEM, "out of memory");
        return NULL;
    }
    r->s = s;
    r->evreq = evreq;
    r->conn = conn;
    r->method = method_name(evhttp_request_get_command(evreq));
    const struct evhttp_uri *u = evhttp_request_get_evhttp_uri(evreq);
    const char *raw = u ? evhttp_uri_get_path(u) : NULL;
    const char *q = u ? evhttp_uri_get_query(u) : NULL;
    size_t plen = 0;
    r->path = evhttp_uridecode(raw && *raw ? raw : "/", 0, &plen);
    r->query = strdup(q ? q : "");
    struct evbuffer *in = evhttp_request_get_input_buffer(evreq);
    r->body_len = in ? evbuffer_get_length(in) : 0;
    r->body = malloc(r->body_len + 1);
    if (!r->path || !r->query || !r->body) {
        cerr_set(e, CERR_NOMEM, "out of memory");
        goto fail;
    }
    if (strlen(r->path) != plen) {
        cerr_set(e, CERR_FORMAT, "the request path contains an encoded NUL byte");
        goto fail;
    }
    if (r->body_len)
        evbuffer_copyout(in, r->body, r->body_len);
    r->body[r->body_len] = 0;
    r->refs = 1;
    r->layer_ref = 1;
    r->next = s->live;
    if (s->live)
        s->live->prev = r;
    s->live = r;
    return r;
fail:
    free(r->path);
    free(r->query);
    free(r->body);
    free(r);
    return NULL;
}

void http_req_ref(struct http_req *r)
{
    r->refs++;
}

void http_req_unref(struct http_req *r)
{
    if (--r->refs == 0)
        req_free(r);
}

static void drop_layer_ref(struct http_req *r)
{
    if (r->layer_ref) {
        r->layer_ref = 0;
        http_req_unref(r);
    }
}

/* Detaches r from its connection at the end of the request. Returns the evhttp request
 * still to be answered, or NULL when the client is gone. */
static struct evhttp_request *detach(struct http_req *r)
{
    struct evhttp_request *evreq = r->gone ? NULL : r->evreq;
    if (r->conn)
        http_conn_end_request_(r->conn);
    r->conn = NULL;
    r->evreq = NULL;
    return evreq;
}

/* The connection under r was closed (by the client, a timeout, the backpressure cut or
 * server shutdown). Runs from evhttp's close callback; the connection record is gone. */
void http_req_conn_closed_(struct http_req *r)
{
    /* evhttp detaches (req->evcon = NULL) a request the user still owns when the client
     * drops, and leaves it to us to free; otherwise it frees the request itself next. */
    if (r->evreq && !evhttp_request_get_connection(r->evreq))
        evhttp_request_free(r->evreq);
    r->evreq = NULL;
    r->conn = NULL;
    r->gone = 1;
    if (r->ended || !r->on_close || r->close_fired)
        return;
    r->close_fired = 1;
    r->refs++;
    r->on_close(r, r->on_close_ud);
    drop_layer_ref(r);
    http_req_unref(r);
}

void http_req_free_all_(struct http_server *s)
{
    while (s->live)
        req_free(s->live);
}

/* ---------------------------------------------------------------- accessors */

const char *http_req_method(const struct http_req *r)
{
    return r->method;
}

const char *http_req_path(const struct http_req *r)
{
    return r->path;
}

int http_req_peer_loopback(const struct http_req *r)
{
    if (!r->evreq)
        return 0;
    struct evhttp_connection *c = evhttp_request_get_connection(r->evreq);
    if (!c)
        return 0;
    const struct sockaddr *sa = evhttp_connection_get_addr(c);
    if (!sa || sa->sa_family == AF_UNIX)
        return 1;
    if (sa->sa_family == AF_INET)
        return (ntohl(((const struct sockaddr_in *)sa)->sin_addr.s_addr) >> 24) == 127;
    if (sa->sa_family == AF_INET6) {
        const struct in6_addr *a = &((const struct sockaddr_in6 *)sa)->sin6_addr;
        if (IN6_IS_ADDR_LOOPBACK(a))
            return 1;
        return IN6_IS_ADDR_V4MAPPED(a) && a->s6_addr[12] == 127;
    }
    return 0;
}

const char *http_req_query(const struct http_req *r)
{
    return r->query;
}

const char *http_req_header(const struct http_req *r, const char *name)
{
    if (!r->evreq)
        return NULL;
    return evhttp_find_header(evhttp_request_get_input_headers(r->evreq), name);
}

void http_req_headers_each(const struct http_req *r,
                           void (*fn)(const char *name, const char *value, void *ud), void *ud)
{
    if (!r->evreq)
        return;
    struct evkeyvalq *h = evhttp_request_get_input_headers(r->evreq);
    for (struct evkeyval *kv = h->tqh_first; kv; kv = kv->next.tqe_next)
        fn(kv->key, kv->value, ud);
}

const char *http_req_body(const struct http_req *r, size_t *len)
{
    if (len)
        *len = r->body_len;
    return r->body;
}

int http_req_gone(const struct http_req *r)
{
    return r->gone;
}

void http_req_on_close(struct http_req *r, void (*cb)(struct http_req *r, void *ud), void *ud)
{
    r->on_close = cb;
    r->on_close_ud = ud;
}

/* ---------------------------------------------------------------- replies */

void http_add_header(struct http_req *r, const char *name, const char *value)
{
    if (!r->evreq || r->ended || r->streaming)
        return;
    if (evhttp_add_header(evhttp_request_get_output_headers(r->evreq), name, value) != 0)
        log_warn("http: refused response header %s (bad characters)", name);
}

static void default_header(struct evhttp_request *evreq, const char *name, const char *value)
{
    struct evkeyvalq *h = evhttp_request_get_output_headers(evreq);
    if (!evhttp_find_header(h, name))
        evhttp_add_header(h, name, value);
}

void http_reply(struct http_req *r, int status, const char *content_type, const char *body,
                size_t len)
{
    if (r->ended) {
        log_warn("http: reply on an ended request (%s %s) ignored", r->method, r->path);
        return;
    }
    if (r->streaming) {
        log_warn("http: reply after stream_begin (%s %s): ending the stream", r->method,
                 r->path);
        http_stream_end(r);
        return;
    }
    r->ended = 1;
    struct evhttp_request *evreq = detach(r);
    if (evreq) {
        default_header(evreq, "Content-Type", content_type ? content_type : "application/json");
        struct evbuffer *buf = r->s->scratch;
        if (evhttp_request_get_command(evreq) == EVHTTP_REQ_HEAD) {
            /* evhttp 2.1 would send the body after a HEAD reply: give only its length */
            char cl[32];
            snprintf(cl, sizeof cl, "%zu", len);
            default_header(evreq, "Content-Length", cl);
        } else if (len) {
            evbuffer_add(buf, body, len);
        }
        r->s->own_reply = 1;
        evhttp_send_reply(evreq, status, reason_phrase(status), buf);
        r->s->own_reply = 0;
        evbuffer_drain(buf, evbuffer_get_length(buf));
    }
    drop_layer_ref(r);
}

void http_reply_error(struct http_req *r, int status, const char *message)
{
    char *b = http_error_body_(r->s, r->path, status, message);
    if (b) {
        http_reply(r, status, "application/json", b, strlen(b));
        free(b);
    } else {
        http_reply(r, status, "text/plain", message, strlen(message));
    }
}

/* ---------------------------------------------------------------- streams */

void http_stream_begin(struct http_req *r, int status, const char *content_type)
{
    if (r->ended || r->streaming) {
        log_warn("http: stream_begin twice or after the end (%s %s)", r->method, r->path);
        return;
    }
    r->streaming = 1;
    if (!r->evreq || r->gone)
        return;
    const char *ct = content_type ? content_type : "text/event-stream";
    default_header(r->evreq, "Content-Type", ct);
    if (strncmp(ct, "text/event-stream", 17) == 0) {
        default_header(r->evreq, "Cache-Control", "no-cache");
        default_header(r->evreq, "X-Accel-Buffering", "no");
    }
    r->s->own_reply = 1;
    evhttp_send_reply_start(r->evreq, status, reason_phrase(status));
    r->s->own_reply = 0;
}

int http_stream_write(struct http_req *r, const char *data, size_t len)
{
    if (!r->streaming || r->ended || r->gone || !r->evreq || !r->conn)
        return -1;
    if (len == 0)
        return 0;
    struct bufferevent *bev = r->conn->evcon
                                  ? evhttp_connection_get_bufferevent(r->conn->evcon)
                                  : NULL;
    if (!bev)
        return -1;
    if (evbuffer_get_length(bufferevent_get_output(bev)) > HTTP_OUT_CAP) {
        log_warn("http: client of %s %s stopped reading (%zu bytes unsent): closing", r->method,
                 r->path, evbuffer_get_length(bufferevent_get_output(bev)));
        r->gone = 1;
        http_conn_close_soon_(r->conn);
        return -1;
    }
    struct evbuffer *buf = r->s->scratch;
    if (evbuffer_add(buf, data, len) != 0)
        return -1;
    evhttp_send_reply_chunk(r->evreq, buf);
    evbuffer_drain(buf, evbuffer_get_length(buf));
    return 0;
}

void http_stream_end(struct http_req *r)
{
    if (r->ended)
        return;
    if (!r->streaming)
        http_stream_begin(r, 200, NULL);
    r->ended = 1;
    struct evhttp_request *evreq = detach(r);
    if (evreq)
        evhttp_send_reply_end(evreq); /* may free evreq (and, for HTTP/1.0, the connection) */
    drop_layer_ref(r);
}
