/* http.h — the generic HTTP/1.1 server layer (libevent evhttp underneath).
 *
 * One loop thread runs everything: accept, parse, routing, limits (body size, connection
 * count, api key, header timeout), replies and chunked/SSE streams. Other threads talk to
 * the loop only through http_post() and http_server_stop(). Handlers may reply at once or
 * later (async); a request wrapper (struct http_req) survives a client disconnect for as
 * long as the caller holds it, so a late write returns -1 instead of touching freed memory.
 * This layer knows nothing of JSON APIs: error bodies come from a caller-supplied formatter.
 */
#ifndef CINFER_HTTP_HTTP_H
#define CINFER_HTTP_HTTP_H

#include <stddef.h>

#include "util/err.h"

struct http_server;
struct http_req;

struct http_config {
    const char *host; int port;        /* port 0 = ephemeral (tests); host "unix:PATH" listens
                                          on a unix socket at PATH instead (port ignored) */
    size_t max_body;                   /* bytes; larger bodies get 413 before any handler */
    int max_conns;                     /* open connections beyond this get 429 + Retry-After: 1 */
    int header_timeout_s;              /* a client that does not finish sending its request in
                                          this time is dropped (default 30) */
    const char *api_key;               /* NULL = no auth; else require "Authorization: Bearer K"
                                          or "x-api-key: K" on non-public routes -> 401 */
};

typedef void (*http_handler)(struct http_req *r, void *ud);

/* Error body formatter: returns a malloc'd JSON (or other) body for `status` + `message` on
 * `path`, so each route family gets its own error shape. NULL return = built-in body
 * {"error":{"message":...,"type":"http_error","code":status}}. Runs on the loop thread.
 * path is "" for the 413 of an oversized request (refused before its path is kept) and for
 * a 400 on an undecodable path. The reply is always sent as application/json. */
typedef char *(*http_error_fmt)(const char *path, int status, const char *message, void *ud);

struct event_base;
/* The libevent base of the loop, for modules that add their own events on the loop thread
 * (timers, outgoing bufferevents: src/server/isolate). Valid until http_server_free. */
struct event_base *http_server_base(const struct http_server *s);

/* Creates the server: binds host:port and listens (a busy port is a CERR_IO error whose text
 * names host:port). Zero/negative config fields take defaults (host 127.0.0.1, max_body
 * 16 MiB, max_conns 256, header_timeout_s 30). Ignores SIGPIPE process-wide. Config strings
 * are copied. Limits in detail:
 *  - max_body: a larger body (Content-Length or chunked) or more than 64 KiB of headers
 *    gets 413 (body from the error formatter, Connection: close); no handler runs.
 *  - max_conns: a connection counts from its first received byte until it closes; one
 *    arriving while max_conns others are open answers every request with 429,
 *    Retry-After: 1 and Connection: close.
 *  - header_timeout_s: a request must arrive whole (headers and body) within this time of
 *    its first byte, and a connection silent this long between requests is closed. Once a
 *    handler has the request no read timeout applies (long prefill, long streams); a reply
 *    that makes no write progress for 60 s means the client is gone.
 * Returns 0 and *out, or a negative CERR_* with e filled. Call from the thread that will
 * later call http_server_run (or before starting it). */
int http_server_new(struct http_server **out, const struct http_config *c, struct cerr *e);

/* The port actually bound (useful with port 0); 0 on a unix socket. Any thread. */
int http_server_port(const struct http_server *s);

/* Frees the server: closes every connection (on_close callbacks of open requests fire),
 * drops unrun posts, closes the listener, and frees every struct http_req (references
 * still held become invalid). Call after http_server_run returned (or if it never ran);
 * not concurrently with any other call. NULL is a no-op. */
void http_server_free(struct http_server *s);

/* Installs the error-body formatter (replaces the built-in one). Before run. */
void http_set_error_fmt(struct http_server *s, http_error_fmt f, void *ud);

/* A gate runs before routing and before the api-key check, for every request: it returns 1
 * when it answered r itself (e.g. 503 while the server loads or drains), 0 to route r as
 * usual. Runs on the loop thread. */
typedef int (*http_gate)(struct http_req *r, void *ud);
/* Installs (or with NULL removes) the gate. Before run, or on the loop thread once running. */
void http_set_gate(struct http_server *s, http_gate g, void *ud);

enum { HTTP_ROUTE_PREFIX = 1, HTTP_ROUTE_PUBLIC = 2 /* no api-key check */ };

/* Registers a route. method NULL = any method; path is an exact match unless
 * HTTP_ROUTE_PREFIX (then any path starting with it). Routes are tried in registration
 * order; the first whose path and method match wins (a "GET" route also serves HEAD, with
 * headers only). Unmatched path -> 404 via the error formatter with message "not found"; a
 * path that matches only with another method -> 405 (with an Allow header). Strings are
 * copied. Returns 0, or CERR_NOMEM / CERR_INVALID. Before run (loop thread once running). */
int http_route(struct http_server *s, const char *method, const char *path, int flags,
               http_handler h, void *ud);

/* Runs the event loop on the calling thread until http_server_stop. Returns 0, or -1 if
 * the loop failed. */
int http_server_run(struct http_server *s);

/* Asks the loop to exit. Thread-safe (not async-signal-safe). The loop closes the listener,
 * keeps running until the reply bytes already written have left (at most 2 s), then run()
 * returns; requests still open stay open until http_server_free. Posts made after stop
 * return -1 and fn is not called; posts made before still run. Idempotent. */
void http_server_stop(struct http_server *s);

/* Thread-safe: runs fn(ud) on the loop thread soon, in FIFO order across all posters.
 * Never blocks on the loop (only a short mutex) and never loses a post while the server
 * runs. Returns 0, or -1 when the server is stopping/stopped (fn will not run) or out of
 * memory. Posts still queued when run() returns are dropped without calling fn. */
int http_post(struct http_server *s, void (*fn)(void *ud), void *ud);

/* ---- on the loop thread only (inside handlers, posted fns, on_close callbacks) ---- */

const char *http_req_method(const struct http_req *r);   /* "GET", "POST", ... */
const char *http_req_path(const struct http_req *r);     /* decoded path, no query */
const char *http_req_query(const struct http_req *r);    /* raw query or "" */
/* 1 when the client connected from a loopback address (127.0.0.0/8, ::1, a Unix socket). */
int http_req_peer_loopback(const struct http_req *r);
/* Request header value by case-insensitive name, or NULL (also once r ended or is gone). */
const char *http_req_header(const struct http_req *r, const char *name);
/* Calls fn(name, value, ud) for every request header in arrival order (none once r ended
 * or is gone). For relays (src/server/isolate). */
void http_req_headers_each(const struct http_req *r,
                           void (*fn)(const char *name, const char *value, void *ud), void *ud);
/* The request body as a NUL-terminated copy owned by r (valid while r is); *len (if
 * non-NULL) gets its length without the NUL. Never NULL ("" for no body). */
const char *http_req_body(const struct http_req *r, size_t *len);

/* Sends a complete reply (Content-Length) and ends the request. content_type NULL =
 * "application/json". No-op (but still ends r) when the client is gone. */
void http_reply(struct http_req *r, int status, const char *content_type, const char *body,
                size_t len);
/* Sends an error reply whose body comes from the error formatter; ends the request. */
void http_reply_error(struct http_req *r, int status, const char *message);
/* Adds a response header; call before http_reply / http_stream_begin. */
void http_add_header(struct http_req *r, const char *name, const char *value);

/* Streaming (SSE or any chunked body). begin sends the status line and headers now
 * (content_type NULL = "text/event-stream"; for text/event-stream also Cache-Control:
 * no-cache). Each write is queued to the socket at once (no buffering until the end).
 * write returns 0, or -1 when the client is gone or stopped reading (more than 8 MiB
 * unsent): then the connection is closed and on_close runs soon (not inside the write). */
void http_stream_begin(struct http_req *r, int status, const char *content_type);
int http_stream_write(struct http_req *r, const char *data, size_t len);
/* Ends the stream (terminating chunk) and the request. */
void http_stream_end(struct http_req *r);

/* cb runs once if the client disconnects before the request ended; after it runs (or after
 * reply/stream_end), r is invalid, unless the caller holds a reference (http_req_ref).
 * Use it to cancel work. Setting it again replaces the previous cb. Without a cb, a request
 * whose client is gone stays valid until the caller ends it (writes return -1). */
void http_req_on_close(struct http_req *r, void (*cb)(struct http_req *r, void *ud), void *ud);

/* Optional references, for code that may still touch r after on_close ran (e.g. posts from
 * the engine already in flight): while a reference is held, r stays valid; writes return
 * -1 and reply/stream_end are harmless no-ops once the client is gone or the request ended.
 * Every http_req_ref needs one http_req_unref. Loop thread only. */
void http_req_ref(struct http_req *r);
void http_req_unref(struct http_req *r);
/* 1 when the client went away (or the stream was cut for backpressure), else 0. */
int http_req_gone(const struct http_req *r);

/* async handlers: a handler may return without replying; the request stays open until
   http_reply/http_stream_end (called later on the loop thread, e.g. from an http_post fn). */

struct http_stats { long conns_open, requests_total, rejected_429, rejected_413; };
/* Counters since start. Any thread (values may be slightly stale). conns_open counts the
 * connections that sent at least one byte and are still open (429'd ones included);
 * rejected_413 counts the layer's own size refusals, not a handler's 413 replies. */
void http_get_stats(const struct http_server *s, struct http_stats *out);

#endif
