/* server.c — the HTTP server: listener, connection tracking, limits, routing, post queue.
 *
 * Built on libevent's evhttp. evhttp parses requests and enforces the body cap (its own 413)
 * and the read timeout; this file adds what evhttp 2.1 lacks: a 413 at once for a declared
 * body over the cap (early 413, pipelined requests included), a connection bound (429),
 * api-key checks (401), routing with 404/405 through the caller's error formatter, close
 * detection while a handler holds a request, and a thread-safe FIFO of posted callbacks.
 * It is not a general web server: no TLS, no static files, no HTTP/2.
 */
#include <errno.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <sys/un.h>
#include <unistd.h>

#include <event2/buffer.h>
#include <event2/bufferevent.h>
#include <event2/keyvalq_struct.h>
#include <event2/thread.h>
#include <event2/util.h>

#include "http/http_int.h"
#include "util/log.h"

static pthread_once_t g_once = PTHREAD_ONCE_INIT;
static int g_threads_ok;

static void global_init(void)
{
    signal(SIGPIPE, SIG_IGN);
    g_threads_ok = evthread_use_pthreads() == 0;
}

static char *xstrdup(const char *s)
{
    if (!s)
        return NULL;
    size_t n = strlen(s) + 1;
    char *d = malloc(n);
    if (d)
        memcpy(d, s, n);
    return d;
}

/* ---------------------------------------------------------------- connections */

static void conn_closecb(struct evhttp_connection *evcon, void *arg);

static void set_timeouts(struct http_conn *c, int active)
{
    if (!c->evcon)
        return;
    struct bufferevent *bev = evhttp_connection_get_bufferevent(c->evcon);
    struct timeval hdr = {c->s->header_timeout_s, 0};
    struct timeval stall = {HTTP_WRITE_STALL_S, 0};
    /* While a handler owns the request, reads are idle by design (long prefill, long SSE
     * stream): only a stalled write counts. Between requests the header timeout applies. */
    if (active)
        bufferevent_set_timeouts(bev, NULL, &stall);
    else
        bufferevent_set_timeouts(bev, &hdr, &hdr);
}

/* The client side of a connection whose request is being handled: readable means either
 * EOF/reset (client gone: close now, which runs on_close) or pipelined bytes (stop watching;
 * evhttp notices a later close itself once it writes). */
static void conn_watch_cb(evutil_socket_t fd, short what, void *arg)
{
    struct http_conn *c = arg;
    char b;
    ssize_t n = recv(fd, &b, 1, MSG_PEEK | MSG_DONTWAIT);
    if (n > 0) {
        event_del(c->watch);
        return;
    }
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR))
        return;
    log_debug("http: client on fd %d went away while its request was open", (int)fd);
    if (c->evcon)
        evhttp_connection_free(c->evcon); /* conn_closecb frees c */
}

static void conn_close_cb(evutil_socket_t fd, short what, void *arg)
{
    struct http_conn *c = arg;
    if (c->evcon)
        evhttp_connection_free(c->evcon);
}

/* A request did not arrive completely within header_timeout_s of its first byte. */
static void conn_deadline_cb(evutil_socket_t fd, short what, void *arg)
{
    struct http_conn *c = arg;
    c->deadline_armed = 0;
    if (c->cur || !c->evcon)
        return;
    log_debug("http: fd %d did not send a complete request in %d s: dropped", c->fd,
              c->s->header_timeout_s);
    evhttp_connection_free(c->evcon);
}

static void in_cb(struct evbuffer *buf, const struct evbuffer_cb_info *info, void *arg);
static void out_cb(struct evbuffer *buf, const struct evbuffer_cb_info *info, void *arg);

/* Closes the connection from the next loop turn (never inside a caller's write). */
void http_conn_close_soon_(struct http_conn *c)
{
    if (c && c->close_ev)
        event_active(c->close_ev, 0, 0);
}

/* The request on c ended (reply or stream end): stop close detection, restore timeouts. */
void http_conn_end_request_(struct http_conn *c)
{
    c->cur = NULL;
    if (c->watch)
        event_del(c->watch);
    set_timeouts(c, 0);
}

/* Finds or creates the tracking record of evcon. first_bytes: called from the
 * connection's first input, so its scan sees the whole stream (else the scan gives up).
 * Returns NULL when out of memory. */
static struct http_conn *conn_track(struct http_server *s, struct evhttp_connection *evcon,
                                    int first_bytes)
{
    struct bufferevent *bev = evhttp_connection_get_bufferevent(evcon);
    int fd = bev ? (int)bufferevent_getfd(bev) : -1;
    if (fd < 0)
        return NULL;
    if (fd < s->cap_fd && s->by_fd[fd] && s->by_fd[fd]->evcon == evcon)
        return s->by_fd[fd];
    if (fd >= s->cap_fd) {
        int cap = s->cap_fd ? s->cap_fd : 64;
        while (cap <= fd)
            cap *= 2;
        struct http_conn **nb = realloc(s->by_fd, (size_t)cap * sizeof *nb);
        if (!nb)
            return NULL;
        memset(nb + s->cap_fd, 0, (size_t)(cap - s->cap_fd) * sizeof *nb);
        s->by_fd = nb;
        s->cap_fd = cap;
    }
    struct http_conn *c = calloc(1, sizeof *c);
    if (!c)
        return NULL;
    c->s = s;
    c->evcon = evcon;
    c->fd = fd;
    c->watch = event_new(s->base, fd, EV_READ | EV_PERSIST, conn_watch_cb, c);
    c->close_ev = event_new(s->base, -1, 0, conn_close_cb, c);
    c->deadline = evtimer_new(s->base, conn_deadline_cb, c);
    hscan_init(&c->scan);
    if (!first_bytes)
        hscan_lose(&c->scan);
    struct evbuffer_cb_entry *ie = NULL;
    if (!c->watch || !c->close_ev || !c->deadline ||
        !(ie = evbuffer_add_cb(bufferevent_get_input(bev), in_cb, c)) ||
        evbuffer_add_cb(bufferevent_get_output(bev), out_cb, c) == NULL) {
        if (ie)
            evbuffer_remove_cb_entry(bufferevent_get_input(bev), ie);
        if (c->watch)
            event_free(c->watch);
        if (c->close_ev)
            event_free(c->close_ev);
        if (c->deadline)
            event_free(c->deadline);
        free(c);
        return NULL;
    }
    /* replies and stream events leave as written: Nagle would hold a small SSE event back
     * until the client's delayed ACK (tens of ms per token) */
    int one = 1;
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    c->rejected = s->n_admitted >= s->max_conns;
    if (!c->rejected)
        s->n_admitted++;
    stat_add(&s->st_conns_open, 1);
    s->by_fd[fd] = c;
    evhttp_connection_set_closecb(evcon, conn_closecb, c);
    return c;
}

/* evhttp is about to free evcon: detach the open request (it becomes "gone"), untrack. */
static void conn_closecb(struct evhttp_connection *evcon, void *arg)
{
    struct http_conn *c = arg;
    struct http_server *s = c->s;
    if (c->fd >= 0 && c->fd < s->cap_fd && s->by_fd[c->fd] == c)
        s->by_fd[c->fd] = NULL;
    if (!c->rejected)
        s->n_admitted--;
    stat_add(&s->st_conns_open, -1);
    struct bufferevent *bev = evhttp_connection_get_bufferevent(evcon);
    if (bev) {
        evbuffer_remove_cb(bufferevent_get_input(bev), in_cb, c);
        evbuffer_remove_cb(bufferevent_get_output(bev), out_cb, c);
    }
    c->evcon = NULL;
    event_free(c->watch);
    event_free(c->close_ev);
    event_free(c->deadline);
    c->watch = c->close_ev = c->deadline = NULL;
    struct http_req *r = c->cur;
    c->cur = NULL;
    free(c);
    if (r)
        http_req_conn_closed_(r);
}

/* Input on a tracked connection: the first byte of a request (none open, no deadline
 * running) starts the deadline by which the whole request must have arrived. */
/* When the unread input starts with a request line, notes its path (up to '?' or ' '). */
static void note_path(struct http_conn *c, struct evbuffer *buf)
{
    char head[160];
    ev_ssize_t n = evbuffer_copyout(buf, head, sizeof head - 1);
    if (n <= 0)
        return;
    head[n] = 0;
    const char *sp = memchr(head, ' ', (size_t)n < 10 ? (size_t)n : 10);
    if (!sp || sp == head)
        return;
    for (const char *m = head; m < sp; m++)
        if (*m < 'A' || *m > 'Z')
            return; /* not a method: the middle of a body */
    const char *p = sp + 1;
    size_t k = 0;
    while (p[k] && p[k] != ' ' && p[k] != '?' && k + 1 < sizeof c->last_path)
        k++;
    if (k > 0 && p[0] == '/') {
        memcpy(c->last_path, p, k);
        c->last_path[k] = 0;
    }
}

/* ---------------------------------------------------------------- early 413
 *
 * A request that declares a body over max_body (Content-Length, with or without Expect:
 * 100-continue). evhttp 2.1 with its lingering close answers 413 only once the whole
 * declared body was read and dropped — never, for a client that declares 2^63 bytes and
 * sends nothing or waits for "100 Continue". So every byte a connection receives also
 * goes through its hscan (hscan.h), which says where such a request starts in the stream
 * as soon as its header block is whole. Its 413 is due once every earlier request on the
 * connection (pipelined ones included) has been answered:
 *   - the input from that request on is dropped (evhttp never parses it), now when evhttp
 *     has consumed the earlier requests, else when its consumption reaches the request
 *     (in_cb's drain branch: evhttp hands the earlier request over in that same call);
 *   - the 413 is written straight to the socket (a few hundred bytes) once no request is
 *     open, all earlier ones were dispatched and their replies have left the output
 *     buffer (out_cb runs at that moment), then our FIN; evhttp frees the connection when
 *     the client closes it or the header timeout passes.
 * A connection whose framing hscan cannot follow is left to evhttp's own 413. */

/* Sends the owed 413 when its turn has come (see above). */
static void try_413(struct http_conn *c)
{
    struct http_server *s = c->s;
    struct bufferevent *bev = c->evcon ? evhttp_connection_get_bufferevent(c->evcon) : NULL;
    if (!c->owe_413 || c->cur || c->n_dispatched < c->scan.n_req || !bev ||
        evbuffer_get_length(bufferevent_get_output(bev)) > 0)
        return;
    c->owe_413 = 0;
    char msg[160];
    snprintf(msg, sizeof msg, "request too large (the body limit is %zu bytes)", s->max_body);
    char *body = http_error_body_(s, c->scan.path, 413, msg);
    char *resp = NULL;
    int len = body ? asprintf(&resp,
                              "HTTP/1.1 413 Payload Too Large\r\nContent-Type: application/json\r\n"
                              "Content-Length: %zu\r\nConnection: close\r\n\r\n%s",
                              strlen(body), body)
                   : -1;
    free(body);
    stat_add(&s->st_413, 1); /* before the reply: a client that reads it sees it counted */
    ssize_t w = len > 0 ? send(c->fd, resp, (size_t)len, MSG_NOSIGNAL | MSG_DONTWAIT) : -1;
    free(resp);
    if (w != len) { /* out of memory, or a full socket right after a drain: just close */
        log_warn("http: fd %d: could not send the 413 at once; closing", c->fd);
        http_conn_close_soon_(c);
        return;
    }
    shutdown(c->fd, SHUT_WR);
    log_debug("http: fd %d: request %u declared a %llu-byte body over the %zu-byte limit: "
              "413 before its body", c->fd, c->scan.n_req, (unsigned long long)c->scan.cl,
              s->max_body);
    if (!c->deadline_armed && c->deadline) { /* bounds the wait for the client's close */
        struct timeval tv = {s->header_timeout_s, 0};
        evtimer_add(c->deadline, &tv);
        c->deadline_armed = 1;
    }
}

/* The oversized request is at the front of the input: drop it and all after it. */
static void cut_input(struct http_conn *c, struct evbuffer *buf)
{
    c->cut_pending = 0;
    c->discard = 1; /* first: the drain below calls in_cb again */
    c->owe_413 = 1;
    evbuffer_drain(buf, evbuffer_get_length(buf));
    try_413(c);
}

/* Bytes of the stream that evhttp has taken out of the input buffer so far. */
static uint64_t consumed(struct http_conn *c, struct evbuffer *buf)
{
    return c->scan.pos - evbuffer_get_length(buf);
}

/* Feeds the n bytes just added at the end of buf to the connection's scan. */
static void scan_added(struct http_conn *c, struct evbuffer *buf, size_t n)
{
    size_t len = evbuffer_get_length(buf);
    struct evbuffer_ptr at;
    if (n > len || evbuffer_ptr_set(buf, &at, len - n, EVBUFFER_PTR_SET) != 0) {
        hscan_lose(&c->scan);
        return;
    }
    int st = HSCAN_MORE;
    while (n > 0 && st == HSCAN_MORE) {
        struct evbuffer_iovec v[8];
        int k = evbuffer_peek(buf, (ev_ssize_t)n, &at, v, 8);
        if (k <= 0) {
            hscan_lose(&c->scan);
            return;
        }
        for (int i = 0; i < k && i < 8 && n > 0; i++) {
            size_t m = v[i].iov_len < n ? v[i].iov_len : n;
            st = hscan_feed(&c->scan, v[i].iov_base, m, c->s->max_body);
            n -= m;
            if (evbuffer_ptr_set(buf, &at, m, EVBUFFER_PTR_ADD) != 0 && n > 0) {
                hscan_lose(&c->scan);
                return;
            }
        }
    }
    if (n > 0) /* after BIG or LOST only the position counts */
        c->scan.pos += n;
    if (st != HSCAN_BIG)
        return;
    if (consumed(c, buf) >= c->scan.req_start)
        cut_input(c, buf);
    else
        c->cut_pending = 1;
}

/* Output-buffer callback of a tracked connection: an owed 413 goes out once the replies
 * before it have left. */
static void out_cb(struct evbuffer *buf, const struct evbuffer_cb_info *info, void *arg)
{
    struct http_conn *c = arg;
    if (c->owe_413 && info->n_deleted > 0 && evbuffer_get_length(buf) == 0)
        try_413(c);
}

static void in_cb(struct evbuffer *buf, const struct evbuffer_cb_info *info, void *arg)
{
    struct http_conn *c = arg;
    if (c->discard) { /* a 413 before the body: nothing more is read */
        if (info->n_added > 0)
            evbuffer_drain(buf, evbuffer_get_length(buf));
        return;
    }
    if (info->n_added > 0 && !c->cur)
        note_path(c, buf);
    if (info->n_added > 0)
        scan_added(c, buf, info->n_added);
    else if (c->cut_pending && info->n_deleted > 0 && consumed(c, buf) >= c->scan.req_start)
        cut_input(c, buf);
    if (info->n_added == 0 || c->cur || c->deadline_armed || !c->deadline)
        return;
    struct timeval tv = {c->s->header_timeout_s, 0};
    evtimer_add(c->deadline, &tv);
    c->deadline_armed = 1;
}

/* The first bytes on a fresh connection: evhttp 2.1 tells nobody about new connections,
 * so this is where they start being tracked (closecb, count, deadline). The connection is
 * the bufferevent's callback argument, the server comes from the registry by event base. */
static void in_first_cb(struct evbuffer *buf, const struct evbuffer_cb_info *info, void *arg)
{
    struct bufferevent *bev = arg;
    if (info->n_added == 0)
        return;
    struct http_server *s = http_registry_find_(bufferevent_get_base(bev));
    void *cbarg = NULL;
    bufferevent_getcb(bev, NULL, NULL, NULL, &cbarg);
    struct http_conn *c = s && cbarg ? conn_track(s, cbarg, 1) : NULL;
    if (!c)
        return; /* tracked at dispatch instead */
    /* removing the running entry is safe: evbuffer saved the next one before the call */
    evbuffer_remove_cb(buf, in_first_cb, bev);
    in_cb(buf, info, c);
}

static struct bufferevent *bev_cb(struct event_base *base, void *arg)
{
    struct bufferevent *bev = bufferevent_socket_new(base, -1, BEV_OPT_CLOSE_ON_FREE);
    if (bev) {
        evbuffer_add_cb(bufferevent_get_output(bev), http_errpage_out_cb_, bev);
        evbuffer_add_cb(bufferevent_get_input(bev), in_first_cb, bev);
    }
    return bev;
}

/* ---------------------------------------------------------------- routing */

static int route_path_match(const struct http_route_ent *rt, const char *path)
{
    if (rt->flags & HTTP_ROUTE_PREFIX)
        return strncmp(path, rt->path, rt->path_len) == 0;
    return strcmp(path, rt->path) == 0;
}

/* Constant-time string equality (length leaks, content does not). */
static int key_eq(const char *a, const char *b)
{
    size_t la = strlen(a), lb = strlen(b);
    unsigned char d = la != lb;
    for (size_t i = 0; i < la && i < lb; i++)
        d |= (unsigned char)(a[i] ^ b[i]);
    return d == 0;
}

static int auth_ok(struct http_server *s, struct http_req *r)
{
    if (!s->api_key)
        return 1;
    const char *x = http_req_header(r, "x-api-key");
    if (x && key_eq(x, s->api_key))
        return 1;
    const char *a = http_req_header(r, "Authorization");
    if (a && strncasecmp(a, "Bearer ", 7) == 0) {
        a += 7;
        while (*a == ' ')
            a++;
        if (key_eq(a, s->api_key))
            return 1;
    }
    return 0;
}

static void dispatch(struct http_server *s, struct http_req *r)
{
    const char *path = r->path;
    const struct http_route_ent *hit = NULL;
    int path_seen = 0;
    if (s->gate && s->gate(r, s->gate_ud))
        return;
    for (int i = 0; i < s->n_routes && !hit; i++) {
        const struct http_route_ent *rt = &s->routes[i];
        if (!route_path_match(rt, path))
            continue;
        path_seen = 1;
        /* HEAD is served by a GET route (the reply then carries only the headers) */
        if (!rt->method || strcmp(rt->method, r->method) == 0 ||
            (strcmp(r->method, "HEAD") == 0 && strcmp(rt->method, "GET") == 0))
            hit = rt;
    }
    if (!(hit && (hit->flags & HTTP_ROUTE_PUBLIC)) && !auth_ok(s, r)) {
        http_add_header(r, "WWW-Authenticate", "Bearer");
        http_reply_error(r, 401, "invalid or missing API key");
        return;
    }
    if (hit) {
        hit->h(r, hit->ud);
        return;
    }
    if (!path_seen) {
        http_reply_error(r, 404, "not found");
        return;
    }
    char allow[256] = "";
    size_t n = 0;
    for (int i = 0; i < s->n_routes; i++) {
        const struct http_route_ent *rt = &s->routes[i];
        if (!rt->method || !route_path_match(rt, path) || strstr(allow, rt->method))
            continue;
        int k = snprintf(allow + n, sizeof allow - n, "%s%s", n ? ", " : "", rt->method);
        if (k < 0 || (size_t)k >= sizeof allow - n)
            break;
        n += (size_t)k;
    }
    if (n)
        http_add_header(r, "Allow", allow);
    http_reply_error(r, 405, "method not allowed");
}

/* evhttp's generic callback: every parsed request lands here. */
static void gen_cb(struct evhttp_request *evreq, void *arg)
{
    struct http_server *s = arg;
    struct evhttp_connection *evcon = evhttp_request_get_connection(evreq);
    struct http_conn *c = evcon ? conn_track(s, evcon, 0) : NULL;
    if (!c) {
        evhttp_send_error(evreq, 500, "out of memory");
        return;
    }
    c->n_dispatched++;
    stat_add(&s->st_requests, 1);
    struct cerr e;
    struct http_req *r = http_req_new_(s, evreq, c, &e);
    if (!r) {
        if (e.code == CERR_NOMEM) {
            evhttp_send_error(evreq, 500, "out of memory");
        } else {
            char *b = http_error_body_(s, "", 400, e.msg);
            struct evbuffer *buf = evbuffer_new();
            if (b && buf) {
                evbuffer_add(buf, b, strlen(b));
                evhttp_add_header(evhttp_request_get_output_headers(evreq), "Content-Type",
                                  "application/json");
                s->own_reply = 1;
                evhttp_send_reply(evreq, 400, NULL, buf);
                s->own_reply = 0;
            } else {
                evhttp_send_error(evreq, 400, NULL);
            }
            free(b);
            if (buf)
                evbuffer_free(buf);
        }
        return;
    }
    if (c->deadline_armed) {
        evtimer_del(c->deadline);
        c->deadline_armed = 0;
    }
    c->cur = r;
    event_add(c->watch, NULL);
    set_timeouts(c, 1);
    if (c->rejected) {
        stat_add(&s->st_429, 1);
        http_add_header(r, "Retry-After", "1");
        http_add_header(r, "Connection", "close");
        http_reply_error(r, 429, "too many connections; retry later");
        return;
    }
    dispatch(s, r);
}

/* ---------------------------------------------------------------- posts and stop */

static void stop_now(struct http_server *s);

/* Wakes the loop from any thread: posts and stop go through one eventfd, so that they
 * take their turn with socket events in each epoll round (event_active from a busy
 * producer would keep the loop in its active queue and starve the sockets). */
static void wake(struct http_server *s)
{
    uint64_t one = 1;
    if (write(s->wake_fd, &one, sizeof one) < 0) {
        /* EAGAIN only when the counter is near 2^64: the loop is awake anyway */
    }
}

/* The loop side of the eventfd: runs every post queued so far, in order; then a stop. */
static void post_cb(evutil_socket_t fd, short what, void *arg)
{
    struct http_server *s = arg;
    uint64_t v;
    if (read(s->wake_fd, &v, sizeof v) < 0) {
        /* EAGAIN: nothing new since the last round */
    }
    pthread_mutex_lock(&s->mu);
    struct http_post_node *list = s->q_head;
    s->q_head = s->q_tail = NULL;
    int stop = s->stopping && !s->stop_seen;
    pthread_mutex_unlock(&s->mu);
    struct http_post_node *last = NULL;
    for (struct http_post_node *n = list; n; n = n->next) {
        n->fn(n->ud);
        last = n;
    }
    if (last) {
        pthread_mutex_lock(&s->mu);
        last->next = s->q_free;
        s->q_free = list;
        pthread_mutex_unlock(&s->mu);
    }
    if (stop) {
        s->stop_seen = 1;
        stop_now(s);
    }
}

/* 1 while some connection still has response bytes to send. */
static int output_pending(struct http_server *s)
{
    for (int fd = 0; fd < s->cap_fd; fd++) {
        struct http_conn *c = s->by_fd[fd];
        if (c && c->evcon) {
            struct bufferevent *bev = evhttp_connection_get_bufferevent(c->evcon);
            if (bev && evbuffer_get_length(bufferevent_get_output(bev)))
                return 1;
        }
    }
    return 0;
}

/* While stopping: ends the loop once every reply already written has left (so a stream's
 * last event, written just before stop, reaches its client), or after HTTP_STOP_FLUSH_S. */
static void drain_cb(evutil_socket_t fd, short what, void *arg)
{
    struct http_server *s = arg;
    if (!output_pending(s) || --s->drain_ticks <= 0) {
        event_del(s->drain_ev);
        event_base_loopbreak(s->base);
    }
}

static void stop_now(struct http_server *s)
{
    if (s->bound) { /* no new connections */
        evhttp_del_accept_socket(s->http, s->bound);
        s->bound = NULL;
    }
    struct timeval tv = {0, 5000};
    s->drain_ticks = HTTP_STOP_FLUSH_S * 200;
    event_add(s->drain_ev, &tv);
    drain_cb(-1, 0, s);
}

int http_post(struct http_server *s, void (*fn)(void *ud), void *ud)
{
    if (!s || !fn)
        return -1;
    pthread_mutex_lock(&s->mu);
    if (s->stopping) {
        pthread_mutex_unlock(&s->mu);
        return -1;
    }
    struct http_post_node *n = s->q_free;
    if (n)
        s->q_free = n->next;
    else
        n = malloc(sizeof *n);
    if (!n) {
        pthread_mutex_unlock(&s->mu);
        return -1;
    }
    n->fn = fn;
    n->ud = ud;
    n->next = NULL;
    int was_empty = s->q_head == NULL;
    if (s->q_tail)
        s->q_tail->next = n;
    else
        s->q_head = n;
    s->q_tail = n;
    /* Wake while holding mu so that stop/free cannot run between the check and here. */
    if (was_empty)
        wake(s);
    pthread_mutex_unlock(&s->mu);
    return 0;
}

void http_server_stop(struct http_server *s)
{
    if (!s)
        return;
    pthread_mutex_lock(&s->mu);
    int first = !s->stopping;
    s->stopping = 1;
    if (first)
        wake(s);
    pthread_mutex_unlock(&s->mu);
}

int http_server_run(struct http_server *s)
{
    if (!s)
        return -1;
    pthread_mutex_lock(&s->mu);
    int stopping = s->stopping;
    pthread_mutex_unlock(&s->mu);
    if (stopping)
        return 0;
    int rc = event_base_dispatch(s->base);
    return rc < 0 ? -1 : 0;
}

/* ---------------------------------------------------------------- lifecycle */

/* A listening unix socket at path. A leftover socket file nobody answers on is replaced;
 * a live one or a non-socket file is an error. Returns the fd, or -1 with e filled. */
static int listen_unix(const char *path, struct cerr *e)
{
    struct sockaddr_un a = {.sun_family = AF_UNIX};
    if (!*path || strlen(path) >= sizeof a.sun_path) {
        cerr_set(e, CERR_INVALID, "http: unix socket path '%s' is empty or too long", path);
        return -1;
    }
    strcpy(a.sun_path, path);
    struct stat st;
    if (lstat(path, &st) == 0) {
        if (!S_ISSOCK(st.st_mode)) {
            cerr_set(e, CERR_IO, "http: cannot listen on unix:%s: the file exists and is not "
                     "a socket", path);
            return -1;
        }
        int probe = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
        int live = probe >= 0 && connect(probe, (struct sockaddr *)&a, sizeof a) == 0;
        if (probe >= 0)
            close(probe);
        if (live) {
            cerr_set(e, CERR_IO, "http: cannot listen on unix:%s: a server already answers "
                     "there", path);
            return -1;
        }
        unlink(path);
    }
    int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
    if (fd < 0 || bind(fd, (struct sockaddr *)&a, sizeof a) != 0 || listen(fd, 128) != 0) {
        cerr_set(e, CERR_IO, "http: cannot listen on unix:%s: %s", path, strerror(errno));
        if (fd >= 0)
            close(fd);
        return -1;
    }
    return fd;
}

struct event_base *http_server_base(const struct http_server *s)
{
    return s->base;
}

int http_server_new(struct http_server **out, const struct http_config *c, struct cerr *e)
{
    *out = NULL;
    if (!c)
        return cerr_set(e, CERR_INVALID, "http: no configuration given");
    pthread_once(&g_once, global_init);
    if (!g_threads_ok)
        return cerr_set(e, CERR_UNSUPPORTED, "http: libevent has no pthreads support");
    const char *host = c->host && *c->host ? c->host : "127.0.0.1";
    if (c->port < 0 || c->port > 65535)
        return cerr_set(e, CERR_INVALID, "http: port %d is out of range 0..65535", c->port);

    struct http_server *s = calloc(1, sizeof *s);
    if (!s)
        return cerr_set(e, CERR_NOMEM, "http: out of memory");
    s->wake_fd = -1;
    pthread_mutex_init(&s->mu, NULL);
    s->max_body = c->max_body ? c->max_body : (size_t)16 << 20;
    s->max_conns = c->max_conns > 0 ? c->max_conns : 256;
    s->header_timeout_s = c->header_timeout_s > 0 ? c->header_timeout_s : 30;
    if (c->api_key && *c->api_key && !(s->api_key = xstrdup(c->api_key)))
        goto nomem;
    s->base = event_base_new();
    if (!s->base)
        goto nomem;
    s->http = evhttp_new(s->base);
    s->scratch = evbuffer_new();
    s->wake_fd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
    if (s->wake_fd < 0)
        goto nomem;
    s->post_ev = event_new(s->base, s->wake_fd, EV_READ | EV_PERSIST, post_cb, s);
    s->fix_ev = event_new(s->base, -1, 0, http_errpage_fix_cb_, s);
    s->drain_ev = event_new(s->base, -1, EV_PERSIST, drain_cb, s);
    if (!s->http || !s->scratch || !s->post_ev || !s->fix_ev || !s->drain_ev ||
        event_add(s->post_ev, NULL) != 0)
        goto nomem;
    evhttp_set_allowed_methods(s->http, EVHTTP_REQ_GET | EVHTTP_REQ_POST | EVHTTP_REQ_HEAD |
                                            EVHTTP_REQ_PUT | EVHTTP_REQ_DELETE |
                                            EVHTTP_REQ_OPTIONS | EVHTTP_REQ_PATCH |
                                            EVHTTP_REQ_TRACE);
    evhttp_set_max_body_size(s->http, (ev_ssize_t)s->max_body);
    evhttp_set_max_headers_size(s->http, HTTP_MAX_HEADERS);
    evhttp_set_timeout(s->http, s->header_timeout_s);
    evhttp_set_flags(s->http, EVHTTP_SERVER_LINGERING_CLOSE);
    evhttp_set_default_content_type(s->http, "application/json");
    evhttp_set_gencb(s->http, gen_cb, s);
    evhttp_set_bevcb(s->http, bev_cb, s);

    if (strncmp(host, "unix:", 5) == 0) {
        int fd = listen_unix(host + 5, e);
        if (fd < 0) {
            http_server_free(s);
            return CERR_IO;
        }
        s->bound = evhttp_accept_socket_with_handle(s->http, fd);
        if (!s->bound) {
            close(fd);
            unlink(host + 5);
            http_server_free(s);
            return cerr_set(e, CERR_IO, "http: cannot listen on %s", host);
        }
        if (!(s->unix_path = xstrdup(host + 5)))
            goto nomem;
        http_registry_add_(s);
        log_debug("http: listening on %s", host);
        *out = s;
        return 0;
    }
    s->bound = evhttp_bind_socket_with_handle(s->http, host, (ev_uint16_t)c->port);
    if (!s->bound) {
        int err = EVUTIL_SOCKET_ERROR();
        cerr_set(e, CERR_IO, "http: cannot listen on %s:%d: %s", host, c->port,
                 err ? evutil_socket_error_to_string(err) : "bind failed");
        http_server_free(s);
        return CERR_IO;
    }
    struct sockaddr_storage ss;
    socklen_t sl = sizeof ss;
    evutil_socket_t lfd = evhttp_bound_socket_get_fd(s->bound);
    if (getsockname(lfd, (struct sockaddr *)&ss, &sl) == 0) {
        if (ss.ss_family == AF_INET)
            s->port = ntohs(((struct sockaddr_in *)&ss)->sin_port);
        else if (ss.ss_family == AF_INET6)
            s->port = ntohs(((struct sockaddr_in6 *)&ss)->sin6_port);
    }
    http_registry_add_(s);
    log_debug("http: listening on %s:%d", host, s->port);
    *out = s;
    return 0;
nomem:
    http_server_free(s);
    return cerr_set(e, CERR_NOMEM, "http: out of memory");
}

int http_server_port(const struct http_server *s)
{
    return s ? s->port : -1;
}

void http_set_error_fmt(struct http_server *s, http_error_fmt f, void *ud)
{
    s->efmt = f;
    s->efmt_ud = ud;
}

void http_set_gate(struct http_server *s, http_gate g, void *ud)
{
    s->gate = g;
    s->gate_ud = ud;
}

int http_route(struct http_server *s, const char *method, const char *path, int flags,
               http_handler h, void *ud)
{
    if (!s || !path || !h || path[0] != '/')
        return CERR_INVALID;
    if (s->n_routes == s->cap_routes) {
        int cap = s->cap_routes ? s->cap_routes * 2 : 16;
        struct http_route_ent *nr = realloc(s->routes, (size_t)cap * sizeof *nr);
        if (!nr)
            return CERR_NOMEM;
        s->routes = nr;
        s->cap_routes = cap;
    }
    struct http_route_ent *rt = &s->routes[s->n_routes];
    rt->method = method ? xstrdup(method) : NULL;
    rt->path = xstrdup(path);
    if ((method && !rt->method) || !rt->path) {
        free(rt->method);
        free(rt->path);
        return CERR_NOMEM;
    }
    rt->path_len = strlen(path);
    rt->flags = flags;
    rt->h = h;
    rt->ud = ud;
    s->n_routes++;
    return 0;
}

void http_get_stats(const struct http_server *s, struct http_stats *out)
{
    out->conns_open = __atomic_load_n(&s->st_conns_open, __ATOMIC_RELAXED);
    out->requests_total = __atomic_load_n(&s->st_requests, __ATOMIC_RELAXED);
    out->rejected_429 = __atomic_load_n(&s->st_429, __ATOMIC_RELAXED);
    out->rejected_413 = __atomic_load_n(&s->st_413, __ATOMIC_RELAXED);
}

void http_server_free(struct http_server *s)
{
    if (!s)
        return;
    http_registry_del_(s);
    pthread_mutex_lock(&s->mu);
    s->stopping = 1;
    pthread_mutex_unlock(&s->mu);
    if (s->http)
        evhttp_free(s->http); /* closes every connection: closecbs run, on_close fires */
    http_req_free_all_(s);
    http_errpage_drop_all_(s);
    if (s->fix_ev)
        event_free(s->fix_ev);
    if (s->drain_ev)
        event_free(s->drain_ev);
    if (s->post_ev)
        event_free(s->post_ev);
    if (s->scratch)
        evbuffer_free(s->scratch);
    if (s->base)
        event_base_free(s->base);
    if (s->wake_fd >= 0)
        close(s->wake_fd);
    struct http_post_node *lists[2] = {s->q_head, s->q_free};
    for (int k = 0; k < 2; k++) {
        for (struct http_post_node *n = lists[k], *nx; n; n = nx) {
            nx = n->next;
            free(n);
        }
    }
    for (int i = 0; i < s->n_routes; i++) {
        free(s->routes[i].method);
        free(s->routes[i].path);
    }
    free(s->routes);
    free(s->by_fd);
    free(s->api_key);
    if (s->unix_path) {
        unlink(s->unix_path);
        free(s->unix_path);
    }
    pthread_mutex_destroy(&s->mu);
    free(s);
}
