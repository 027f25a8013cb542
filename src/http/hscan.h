/* hscan.h — request framing of one connection's byte stream, seen beside evhttp.
 *
 * The early 413 (server.c) must know, as soon as a request's header block is whole, where
 * that request starts in the connection's stream and what body length it declares. The
 * input buffer cannot tell: evhttp consumes a request's lines as they arrive (a header
 * block split over reads has lost its first lines by the time it is whole), and a
 * pipelined request waits in the buffer behind earlier ones. hscan follows the stream,
 * fed in pieces of any size, and stops at the first header block whose Content-Length is
 * over the limit (HSCAN_BIG).
 *
 * It mirrors evhttp 2.1's framing only where that is certain: lines end in LF or CRLF; a
 * request is a line "METHOD SP ..." ([A-Z]+), header lines, an empty line, then for POST /
 * PUT / PATCH exactly Content-Length body bytes, or with "Transfer-Encoding: chunked" (and
 * no Content-Length) chunks whose size lines are plain hex, ended by a 0 chunk and an empty
 * line; none for a request that declares no body. Anything else — another transfer coding,
 * chunk extensions or trailers, a chunked body over the limit (evhttp's own 413 after
 * reading it), a body declared on another method, two Content-Length lines or a value that
 * is not plain digits, a folded or colon-less header line, an empty or lowercase request
 * line, a header block over HSCAN_MAX_HEAD bytes — makes it give up (HSCAN_LOST) for the
 * rest of the stream, and the caller leaves that connection to evhttp. Pure: no I/O, no
 * allocation; the caller owns the struct.
 */
#ifndef CINFER_HTTP_HSCAN_H
#define CINFER_HTTP_HSCAN_H

#include <stddef.h>
#include <stdint.h>

#define HSCAN_MAX_HEAD ((uint64_t)64 << 10) /* a larger header block: evhttp's 400 */
#define HSCAN_LINE 128                      /* bytes of a line kept for parsing */

enum hscan_status { HSCAN_LOST = -1, HSCAN_MORE = 0, HSCAN_BIG = 1 };

struct hscan {
    uint64_t pos;        /* bytes fed so far (also after BIG or LOST) */
    uint64_t req_start;  /* stream offset of the current request's first byte */
    uint64_t body_left;  /* body bytes of the current request not yet seen */
    uint64_t cl;         /* Content-Length of the current header block (saturated); in a
                            chunked body, the sum of its chunk sizes so far */
    uint32_t n_req;      /* index of the current request (0 = the connection's first) */
    int status;          /* enum hscan_status; BIG and LOST are final */
    int state;           /* internal: request line, headers or body */
    int has_cl, has_te, te_chunked, body_method; /* has_te: Transfer-Encoding lines */
    size_t line_len;     /* bytes of the current line so far (kept: up to HSCAN_LINE) */
    char line[HSCAN_LINE];
    char path[128];      /* the current request's path (up to '?' or ' '), for errors */
};

/* Starts a scan at the beginning of a connection's stream. */
void hscan_init(struct hscan *h);

/* Gives up on h: every later feed returns HSCAN_LOST (bytes were missed). */
void hscan_lose(struct hscan *h);

/* Feeds the next n bytes of the stream. Returns HSCAN_BIG once a header block declares a
 * Content-Length over max_body — h->req_start, h->n_req, h->cl and h->path then describe
 * that request and stay fixed — HSCAN_LOST once the framing is uncertain, else HSCAN_MORE.
 * BIG and LOST are final: later feeds only advance h->pos. */
int hscan_feed(struct hscan *h, const char *p, size_t n, uint64_t max_body);

#endif
