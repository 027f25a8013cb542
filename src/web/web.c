/* web.c — serving the embedded browser page (routes, gzip, ETags, redirects) and opening
 * it in the user's browser. The files themselves are web_assets[] (generated at build
 * time, gzip-compressed); this file only picks one, answers 304 when the client has it,
 * and sends the stored gzip stream or, for a client that does not take gzip, the inflated
 * bytes (inflated on first use and kept until web_free).
 */
#include "web/web.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/wait.h>
#include <unistd.h>
#include <zlib.h>

#include "web/web_assets.h"

struct web {
    unsigned char **plain; /* (web_n_assets) inflated copies, NULL until first needed */
};

/* The page may run only its own files; KaTeX writes inline styles. */
static const char CSP[] = "default-src 'self'; script-src 'self'; style-src 'self' "
                          "'unsafe-inline'; img-src 'self' data:; font-src 'self'; connect-src "
                          "'self'; object-src 'none'; base-uri 'none'; frame-ancestors 'none'";

size_t web_assets_bytes(void)
{
    return (size_t)web_assets_gz_bytes;
}

/* ---- header parsing -------------------------------------------------------------------- */

/* Skips optional whitespace. */
static const char *ows(const char *p)
{
    while (*p == ' ' || *p == '\t')
        p++;
    return p;
}

int web_accepts_gzip(const char *v)
{
    if (!v)
        return 0;
    const char *p = v;
    while (*p) {
        p = ows(p);
        const char *tok = p;
        while (*p && *p != ',' && *p != ';' && *p != ' ' && *p != '\t')
            p++;
        size_t tl = (size_t)(p - tok);
        double q = 1.0;
        /* parameters: only q matters */
        while (*p && *p != ',') {
            p = ows(p);
            if (*p == ';') {
                p = ows(p + 1);
                if ((*p == 'q' || *p == 'Q') && ows(p + 1)[0] == '=') {
                    p = ows(ows(p + 1) + 1);
                    char *end;
                    q = strtod(p, &end);
                    if (end == p)
                        q = 1.0;
                    p = end;
                    continue;
                }
            }
            if (*p && *p != ',')
                p++;
        }
        if (((tl == 4 && !strncasecmp(tok, "gzip", 4)) || (tl == 1 && *tok == '*')) && q > 0)
            return 1;
        if (*p == ',')
            p++;
    }
    return 0;
}

int web_etag_matches(const char *v, const char *etag)
{
    if (!v || !etag)
        return 0;
    if (etag[0] == 'W' && etag[1] == '/')
        etag += 2;
    size_t el = strlen(etag);
    const char *p = v;
    while (*p) {
        p = ows(p);
        if (*p == '*')
            return 1;
        if (p[0] == 'W' && p[1] == '/')
            p += 2;
        const char *t = p;
        if (*p == '"') {
            p++;
            while (*p && *p != '"')
                p++;
            if (*p == '"')
                p++;
        } else {
            while (*p && *p != ',')
                p++;
        }
        if ((size_t)(p - t) == el && !memcmp(t, etag, el))
            return 1;
        while (*p && *p != ',')
            p++;
        if (*p == ',')
            p++;
    }
    return 0;
}

/* ---- serving --------------------------------------------------------------------------- */

static int find_asset(const char *path)
{
    for (int i = 0; i < web_n_assets; i++)
        if (!strcmp(web_assets[i].path, path))
            return i;
    return -1;
}

/* The inflated bytes of asset i (kept in w), or NULL when out of memory / corrupt. */
static const unsigned char *plain_of(struct web *w, int i)
{
    const struct web_asset *a = &web_assets[i];
    if (w->plain[i])
        return w->plain[i];
    unsigned char *b = malloc(a->raw_len ? a->raw_len : 1);
    if (!b)
        return NULL;
    z_stream z = {0};
    if (inflateInit2(&z, 15 + 16) != Z_OK) {
        free(b);
        return NULL;
    }
    z.next_in = (unsigned char *)a->gz;
    z.avail_in = (uInt)a->gz_len;
    z.next_out = b;
    z.avail_out = (uInt)a->raw_len;
    int rc = inflate(&z, Z_FINISH);
    size_t got = a->raw_len - z.avail_out;
    inflateEnd(&z);
    if (rc != Z_STREAM_END || got != a->raw_len) {
        free(b);
        return NULL;
    }
    return w->plain[i] = b;
}

static void send_asset(struct web *w, struct http_req *r, int i)
{
    const struct web_asset *a = &web_assets[i];
    http_add_header(r, "ETag", a->etag);
    http_add_header(r, "Cache-Control",
                    a->immutable ? "public, max-age=31536000, immutable" : "no-cache");
    http_add_header(r, "Vary", "Accept-Encoding");
    http_add_header(r, "X-Content-Type-Options", "nosniff");
    if (!strncmp(a->ctype, "text/html", 9)) {
        http_add_header(r, "Content-Security-Policy", CSP);
        http_add_header(r, "Referrer-Policy", "no-referrer");
    }
    if (web_etag_matches(http_req_header(r, "If-None-Match"), a->etag)) {
        http_reply(r, 304, a->ctype, "", 0);
        return;
    }
    if (web_accepts_gzip(http_req_header(r, "Accept-Encoding"))) {
        http_add_header(r, "Content-Encoding", "gzip");
        http_reply(r, 200, a->ctype, (const char *)a->gz, a->gz_len);
        return;
    }
    const unsigned char *b = plain_of(w, i);
    if (!b) {
        http_reply_error(r, 500, "out of memory");
        return;
    }
    http_reply(r, 200, a->ctype, (const char *)b, a->raw_len);
}

static void h_index(struct http_req *r, void *ud)
{
    int i = find_asset("/index.html");
    if (i < 0) {
        http_reply_error(r, 404, "not found");
        return;
    }
    send_asset(ud, r, i);
}

static void h_asset(struct http_req *r, void *ud)
{
    int i = find_asset(http_req_path(r));
    if (i < 0) {
        http_reply_error(r, 404, "not found");
        return;
    }
    send_asset(ud, r, i);
}

static void h_redirect(struct http_req *r, void *ud)
{
    char loc[64];
    snprintf(loc, sizeof loc, "/#%s", http_req_path(r));
    http_add_header(r, "Location", loc);
    http_add_header(r, "Cache-Control", "no-cache");
    http_reply(r, 302, "text/plain; charset=utf-8", "", 0);
}

int web_install(struct web **out, struct http_server *h, struct cerr *e)
{
    struct web *w = calloc(1, sizeof *w);
    if (w)
        w->plain = calloc((size_t)web_n_assets, sizeof *w->plain);
    if (!w || !w->plain) {
        web_free(w);
        return cerr_set(e, CERR_NOMEM, "out of memory for the web page");
    }
    int rc = http_route(h, "GET", "/", HTTP_ROUTE_PUBLIC, h_index, w);
    rc |= http_route(h, "GET", "/index.html", HTTP_ROUTE_PUBLIC, h_index, w);
    rc |= http_route(h, "GET", "/assets/", HTTP_ROUTE_PREFIX | HTTP_ROUTE_PUBLIC, h_asset, w);
    rc |= http_route(h, "GET", "/chat", HTTP_ROUTE_PUBLIC, h_redirect, w);
    rc |= http_route(h, "GET", "/status", HTTP_ROUTE_PUBLIC, h_redirect, w);
    if (rc) {
        web_free(w);
        return cerr_set(e, CERR_NOMEM, "cannot register the web page's routes");
    }
    *out = w;
    return 0;
}

void web_free(struct web *w)
{
    if (!w)
        return;
    for (int i = 0; w->plain && i < web_n_assets; i++)
        free(w->plain[i]);
    free(w->plain);
    free(w);
}

/* ---- the browser ----------------------------------------------------------------------- */

int web_chat_url(char *buf, size_t n, const char *host, int port)
{
    if (!host || !*host || !strcmp(host, "0.0.0.0") || !strcmp(host, "::"))
        host = "localhost";
    const char *fmt = strchr(host, ':') ? "http://[%s]:%d/#/chat" : "http://%s:%d/#/chat";
    return snprintf(buf, n, fmt, host, port);
}

/* The path of an executable `name` on PATH into buf, or -1. */
static int which(const char *name, char *buf, size_t n)
{
    const char *path = getenv("PATH");
    if (!path)
        return -1;
    while (*path) {
        const char *c = strchr(path, ':');
        size_t dl = c ? (size_t)(c - path) : strlen(path);
        if (dl && (size_t)snprintf(buf, n, "%.*s/%s", (int)dl, path, name) < n &&
            access(buf, X_OK) == 0)
            return 0;
        path += dl + (c ? 1 : 0);
    }
    return -1;
}

int web_open_browser(const char *url)
{
    char exe[PATH_MAX];
    if (which("xdg-open", exe, sizeof exe))
        return -1;
    char *const argv[] = {"xdg-open", (char *)url, NULL};
    pid_t p = fork();
    if (p < 0)
        return -1;
    if (p == 0) {
        /* only async-signal-safe calls from here: the server has threads */
        sigset_t none;
        sigemptyset(&none);
        sigprocmask(SIG_SETMASK, &none, NULL);
        setsid();
        if (fork() != 0)
            _exit(0);
        int fd = open("/dev/null", O_RDWR);
        if (fd >= 0) {
            dup2(fd, 0);
            dup2(fd, 1);
            dup2(fd, 2);
        }
        execv(exe, argv);
        _exit(127);
    }
    while (waitpid(p, NULL, 0) < 0 && errno == EINTR)
        ;
    return 0;
}
