/* http_int.h — internals shared by the .c files of src/http only.
 *
 * Lifetimes: a struct http_conn lives from the first bytes received on an evhttp
 * connection until evhttp's close callback; a struct http_req lives from dispatch until its
 * last reference drops (the layer's own reference goes at reply/stream_end, or when on_close
 * has run). Whichever side goes first clears the other's pointer, so neither dangles.
 * Everything here runs on the loop thread except the post queue (mutex).
 */
#ifndef CINFER_HTTP_HTTP_INT_H
#define CINFER_HTTP_HTTP_INT_H

#include <pthread.h>
#include <stddef.h>

#include <event2/buffer.h>
#include <event2/event.h>
#include <event2/http.h>

#include "http/hscan.h"
#include "http/http.h"

#define HTTP_OUT_CAP ((size_t)8 << 20)  /* unsent bytes per connection before we cut it */
#define HTTP_WRITE_STALL_S 60           /* no write progress this long = client gone */
#define HTTP_MAX_HEADERS ((ssize_t)64 << 10)
#define HTTP_STOP_FLUSH_S 2             /* stop waits this long at most for unsent replies */

struct http_route_ent {
    char *method;       /* NULL = any */
    char *path;
    size_t path_len;
    int flags;
    http_handler h;
    void *ud;
};

struct fix413;

struct http_post_node {
    void (*fn)(void *ud);
    void *ud;
    struct http_post_node *next;
};

struct http_conn {
    struct http_server *s;
    struct evhttp_connection *evcon;  /* NULL once evhttp closed it */
    int fd;
    int rejected;                     /* over max_conns: every request gets 429 */
    struct http_req *cur;             /* the request being handled, or NULL */
    struct event *watch;              /* EOF detection while a handler holds the request */
    struct event *close_ev;           /* deferred close (backpressure cut) */
    struct event *deadline;           /* header_timeout_s from a request's first byte */
    int deadline_armed;
    char last_path[128];              /* path of the latest request line seen on the wire, so
                                         that evhttp's own error pages (413) get the route's
                                         error shape */
    int discard;                      /* a 413 is due or sent before the body (early
                                         413): every further input byte is dropped */
    struct hscan scan;                /* framing of the input stream (early 413) */
    unsigned n_dispatched;            /* requests evhttp handed to us on this connection */
    int cut_pending;                  /* an oversized request waits behind earlier ones */
    int owe_413;                      /* its 413 goes out once those are answered */
};

struct http_req {
    struct http_server *s;
    struct evhttp_request *evreq;  /* NULL once ended or the client is gone */
    struct http_conn *conn;        /* NULL once ended or the client is gone */
    const char *method;            /* static string */
    char *path, *query, *body;
    size_t body_len;
    int refs;
    unsigned gone : 1, ended : 1, streaming : 1, layer_ref : 1, close_fired : 1;
    void (*on_close)(struct http_req *r, void *ud);
    void *on_close_ud;
    struct http_req *prev, *next;  /* server's list of live wrappers */
};

struct http_server {
    struct event_base *base;
    struct evhttp *http;
    struct evhttp_bound_socket *bound;
    int port;
    size_t max_body;
    int max_conns;
    int header_timeout_s;
    char *api_key;
    char *unix_path;            /* listening socket file to remove at free, or NULL */
    http_error_fmt efmt;
    void *efmt_ud;
    http_gate gate;     /* runs before routing (http_set_gate); NULL = none */
    void *gate_ud;

    struct http_route_ent *routes;
    int n_routes, cap_routes;

    struct http_conn **by_fd;   /* tracked connections indexed by socket fd */
    int cap_fd;
    int n_admitted;             /* tracked, not rejected */

    struct http_req *live;      /* every wrapper not yet freed */
    struct evbuffer *scratch;   /* reused for chunk writes */

    /* post queue (any thread) */
    pthread_mutex_t mu;
    struct http_post_node *q_head, *q_tail, *q_free;
    int stopping, stop_seen;
    int wake_fd;                /* eventfd: posts and stop wake the loop through it */
    struct event *post_ev, *drain_ev;
    int drain_ticks;

    struct fix413 *fix_head;    /* evhttp's own 400/413 replies to rewrite (server.c) */
    int own_reply;              /* 1 while req.c/server.c write a status line themselves */
    struct event *fix_ev;
    struct http_server *reg_next;  /* process registry (base -> server), see server.c */

    /* stats: written on the loop thread, read anywhere */
    long st_conns_open, st_requests, st_429, st_413;
};

static inline void stat_add(long *p, long d)
{
    __atomic_fetch_add(p, d, __ATOMIC_RELAXED);
}

/* errpage.c */
void http_registry_add_(struct http_server *s);
void http_registry_del_(struct http_server *s);
struct http_server *http_registry_find_(struct event_base *base);
void http_errpage_out_cb_(struct evbuffer *buf, const struct evbuffer_cb_info *info, void *arg);
void http_errpage_fix_cb_(evutil_socket_t fd, short what, void *arg);
void http_errpage_drop_all_(struct http_server *s);
char *http_error_body_(struct http_server *s, const char *path, int status, const char *msg);

/* req.c */
struct http_req *http_req_new_(struct http_server *s, struct evhttp_request *evreq,
                               struct http_conn *conn, struct cerr *e);
void http_req_conn_closed_(struct http_req *r);
void http_req_free_all_(struct http_server *s);
/* server.c */
void http_conn_end_request_(struct http_conn *c);
void http_conn_close_soon_(struct http_conn *c);

#endif
