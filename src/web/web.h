/* web.h — the browser chat page and status view of `cinfer serve`.
 *
 * Serves a single-page app compiled into the binary (src/web/app plus Debian's marked,
 * DOMPurify, highlight.js and KaTeX, gzip-compressed at build time): GET / (index.html,
 * revalidated by ETag), GET /assets/... (content-hashed names cached as immutable), and
 * 302s from /chat and /status to /#/chat and /#/status. Clients that accept gzip get the
 * stored stream as is; others get it inflated once and kept. Also opens the page in the
 * user's browser. Never fetches anything from the network.
 * Threads: web_install before the server runs; the handlers run on the HTTP loop thread.
 */
#ifndef CINFER_WEB_WEB_H
#define CINFER_WEB_WEB_H

#include <stddef.h>

#include "http/http.h"
#include "util/err.h"

struct web;

/* Registers the page's routes on h (all public: the page itself asks for the API key).
 * Returns 0 and *out (free with web_free after the server is freed), or a negative CERR_*
 * with e filled. */
int web_install(struct web **out, struct http_server *h, struct cerr *e);
void web_free(struct web *w);

/* Total bytes of the embedded (compressed) assets. */
size_t web_assets_bytes(void);

/* 1 when an Accept-Encoding header value accepts gzip (a "gzip" or "*" coding whose q is
 * not 0), else 0. NULL = 0. Pure; exported for tests and the fuzz target. */
int web_accepts_gzip(const char *accept_encoding);

/* 1 when an If-None-Match header value names etag (a list of entity tags, W/ prefixes
 * compared weakly, or "*"), else 0. Pure. */
int web_etag_matches(const char *if_none_match, const char *etag);

/* Writes the page URL for a bind host and port: http://HOST:PORT/#/chat, where a 0.0.0.0,
 * "::" or empty host is shown as localhost and an IPv6 literal gets brackets. Returns the
 * snprintf length (>= n means truncated). */
int web_chat_url(char *buf, size_t n, const char *host, int port);

/* Opens url with xdg-open when it is found on PATH, fire-and-forget (a detached grandchild,
 * its output to /dev/null; nothing waits for the browser). Returns 0 when launched, -1
 * when there is no xdg-open or the fork failed (the caller just prints the URL). The
 * caller decides whether to open at all (a terminal on stdout, no --no-open). */
int web_open_browser(const char *url);

#endif
