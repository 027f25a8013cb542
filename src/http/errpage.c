/* errpage.c — what evhttp 2.1 does without a hook: error pages and the server registry.
 *
 * evhttp answers oversized (413), malformed (400) and unsupported-method (501, sent as 405) requests
 * itself with an HTML page. This file spots such a status line in a connection's output
 * buffer and, in the same loop turn, before any byte reaches the socket, replaces the
 * response with one whose body comes from the server's error formatter. It also keeps the
 * process-wide registry (event base -> server) that evhttp's hooks need, and the default
 * error body.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <event2/buffer.h>
#include <event2/bufferevent.h>

#include "http/http_int.h"

/* ---------------------------------------------------------------- registry */

/* Servers by event base, for the evhttp hooks (a new connection's first bytes, an error page
 * in an output buffer) whose callback argument cannot carry the server. A handful of
 * entries at most; any thread. */
static pthread_mutex_t g_reg_mu = PTHREAD_MUTEX_INITIALIZER;
static struct http_server *g_reg;

void http_registry_add_(struct http_server *s)
{
    pthread_mutex_lock(&g_reg_mu);
    s->reg_next = g_reg;
    g_reg = s;
    pthread_mutex_unlock(&g_reg_mu);
}

void http_registry_del_(struct http_server *s)
{
    pthread_mutex_lock(&g_reg_mu);
    for (struct http_server **p = &g_reg; *p; p = &(*p)->reg_next) {
        if (*p == s) {
            *p = s->reg_next;
            break;
        }
    }
    pthread_mutex_unlock(&g_reg_mu);
}

struct http_server *http_registry_find_(struct event_base *base)
{
    pthread_mutex_lock(&g_reg_mu);
    struct http_server *s = g_reg;
    while (s && s->base != base)
        s = s->reg_next;
    pthread_mutex_unlock(&g_reg_mu);
    return s;
}

/* ---------------------------------------------------------------- error bodies */

/* JSON-escapes src into a malloc'd string (no quotes around it). */
static char *json_escape(const char *src)
{
    size_t n = strlen(src);
    char *out = malloc(n * 6 + 1);
    if (!out)
        return NULL;
    char *o = out;
    for (const unsigned char *p = (const unsigned char *)src; *p; p++) {
        if (*p == '"' || *p == '\\') {
            *o++ = '\\';
            *o++ = (char)*p;
        } else if (*p < 0x20) {
            o += sprintf(o, "\\u%04x", *p);
        } else {
            *o++ = (char)*p;
        }
    }
    *o = 0;
    return out;
}

/* The body for an error reply: the caller's formatter, else a small OpenAI-like JSON.
 * Returns malloc'd text or NULL when out of memory. */
char *http_error_body_(struct http_server *s, const char *path, int status, const char *msg)
{
    if (s->efmt) {
        char *b = s->efmt(path ? path : "", status, msg ? msg : "", s->efmt_ud);
        if (b)
            return b;
    }
    char *m = json_escape(msg ? msg : "");
    if (!m)
        return NULL;
    size_t n = strlen(m) + 96;
    char *b = malloc(n);
    if (b)
        snprintf(b, n, "{\"error\":{\"message\":\"%s\",\"type\":\"http_error\",\"code\":%d}}", m,
                 status);
    free(m);
    return b;
}

/* evhttp 2.1 answers an oversized (413) or malformed (400) request itself, with an HTML
 * body and no hook. Such a status line is recognisable by evhttp's reason phrase while none
 * of our own replies is being made (s->own_reply). We note where it starts and, before the
 * socket is written (same loop turn), replace that response with one whose body comes from
 * the error formatter. */
static const struct {
    int status;
    const char *line;  /* as evhttp writes it after "HTTP/1.x" */
    const char *phrase;
} g_evhttp_errors[] = {
    {413, " 413 Request Entity Too Large\r\n", "Payload Too Large"},
    {400, " 400 Bad Request\r\n", "Bad Request"},
    /* a method evhttp does not know (QUERY, CONNECT, ...): a wrong method, so 405 as for
     * the known ones no route takes (a 5xx would say the server failed) */
    {405, " 501 Not Implemented\r\n", "Method Not Allowed"},
};

struct fix413 {
    struct bufferevent *bev;  /* referenced until fixed */
    size_t off;
    int kind;                 /* index in g_evhttp_errors */
    struct fix413 *next;
};

/* Copies up to n bytes at offset off of buf into dst without evbuffer_copyout, which
 * refuses buffers whose start is frozen (a socket bufferevent's output always is, outside
 * its own writes). Returns the number of bytes copied. */
static size_t peek_at(struct evbuffer *buf, size_t off, char *dst, size_t n)
{
    struct evbuffer_ptr p;
    struct evbuffer_iovec v[8];
    if (evbuffer_ptr_set(buf, &p, off, EVBUFFER_PTR_SET) != 0)
        return 0;
    int k = evbuffer_peek(buf, (ev_ssize_t)n, &p, v, 8);
    size_t got = 0;
    for (int i = 0; i < k && i < 8 && got < n; i++) {
        size_t m = v[i].iov_len < n - got ? v[i].iov_len : n - got;
        memcpy(dst + got, v[i].iov_base, m);
        got += m;
    }
    return got;
}

/* Output-buffer callback of every connection (arg = its bufferevent): notes an evhttp error
 * page for rewriting and counts 413s. */
void http_errpage_out_cb_(struct evbuffer *buf, const struct evbuffer_cb_info *info, void *arg)
{
    struct bufferevent *bev = arg;
    if (info->n_added < 24 || info->n_deleted)
        return;
    char head[64];
    size_t got = peek_at(buf, info->orig_size, head, 8 + 32);
    if (got < 24 || memcmp(head, "HTTP/1.", 7) != 0)
        return;
    int kind = -1;
    for (int i = 0; i < (int)(sizeof g_evhttp_errors / sizeof g_evhttp_errors[0]); i++) {
        size_t ll = strlen(g_evhttp_errors[i].line);
        if (got >= 8 + ll && memcmp(head + 8, g_evhttp_errors[i].line, ll) == 0)
            kind = i;
    }
    if (kind < 0)
        return;
    struct http_server *s = http_registry_find_(bufferevent_get_base(bev));
    if (!s || s->own_reply)
        return;
    if (g_evhttp_errors[kind].status == 413)
        stat_add(&s->st_413, 1);
    struct fix413 *f = malloc(sizeof *f);
    if (!f)
        return; /* the client gets evhttp's HTML page */
    bufferevent_incref(bev);
    f->bev = bev;
    f->off = info->orig_size;
    f->kind = kind;
    f->next = s->fix_head;
    s->fix_head = f;
    event_active(s->fix_ev, 0, 0);
}

static void fix413_one(struct http_server *s, struct fix413 *f)
{
    struct evbuffer *out = bufferevent_get_output(f->bev);
    size_t len = evbuffer_get_length(out);
    void *cbarg = NULL;
    bufferevent_getcb(f->bev, NULL, NULL, NULL, &cbarg);
    char head[8];
    if (!cbarg || f->off + 8 > len || peek_at(out, f->off, head, 8) != 8)
        return; /* freed by evhttp meanwhile, or already written */
    char msg[160];
    int status = g_evhttp_errors[f->kind].status;
    if (status == 413)
        snprintf(msg, sizeof msg, "request too large (the body limit is %zu bytes)",
                 s->max_body);
    else if (status == 405)
        snprintf(msg, sizeof msg, "method not allowed");
    else
        snprintf(msg, sizeof msg, "malformed HTTP request (request line, headers over %zd "
                                  "bytes, or chunked encoding)", HTTP_MAX_HEADERS);
    /* the route's error shape: the path of the request line this connection last sent */
    int fd = (int)bufferevent_getfd(f->bev);
    const char *path = fd >= 0 && fd < s->cap_fd && s->by_fd[fd] ? s->by_fd[fd]->last_path : "";
    char *body = http_error_body_(s, path, status, msg);
    struct evbuffer *keep = evbuffer_new();
    if (!body || !keep) {
        free(body);
        if (keep)
            evbuffer_free(keep);
        return;
    }
    /* draining needs the start unfrozen; a failed 0-byte drain tells it was frozen */
    int frozen = evbuffer_drain(out, 0) != 0;
    if (frozen)
        evbuffer_unfreeze(out, 1);
    evbuffer_remove_buffer(out, keep, f->off); /* earlier responses not yet sent */
    evbuffer_drain(out, evbuffer_get_length(out));
    evbuffer_add_buffer(out, keep);
    s->own_reply = 1; /* our replacement must not be taken for evhttp's page */
    evbuffer_add_printf(out,
                        "%.8s %d %s\r\nContent-Type: application/json\r\n"
                        "Content-Length: %zu\r\nConnection: close\r\n\r\n%s",
                        head, status, g_evhttp_errors[f->kind].phrase, strlen(body), body);
    s->own_reply = 0;
    if (frozen)
        evbuffer_freeze(out, 1);
    evbuffer_free(keep);
    free(body);
}

/* Runs the noted rewrites (an event activated by the output callback, same loop turn). */
void http_errpage_fix_cb_(evutil_socket_t fd, short what, void *arg)
{
    struct http_server *s = arg;
    while (s->fix_head) {
        struct fix413 *f = s->fix_head;
        s->fix_head = f->next;
        fix413_one(s, f);
        bufferevent_decref(f->bev);
        free(f);
    }
}

/* Drops the rewrites still pending when the server is freed. */
void http_errpage_drop_all_(struct http_server *s)
{
    while (s->fix_head) {
        struct fix413 *f = s->fix_head;
        s->fix_head = f->next;
        bufferevent_decref(f->bev);
        free(f);
    }
}
