/* hscan.c — request framing of one connection's byte stream (see hscan.h). */
#include "http/hscan.h"

#include <string.h>
#include <strings.h>

/* request line, header lines, a Content-Length body; chunked: a size line, chunk data,
 * the blank line after the last chunk */
enum { ST_FIRST, ST_HEAD, ST_BODY, ST_CSIZE, ST_CDATA, ST_CTRAIL };

void hscan_init(struct hscan *h)
{
    memset(h, 0, sizeof *h);
    h->state = ST_FIRST;
}

void hscan_lose(struct hscan *h)
{
    if (h->status != HSCAN_BIG)
        h->status = HSCAN_LOST;
}

static int lost(struct hscan *h)
{
    h->status = HSCAN_LOST;
    return HSCAN_LOST;
}

/* The next request starts at stream offset at. */
static void next_request(struct hscan *h, uint64_t at)
{
    h->state = ST_FIRST;
    h->req_start = at;
    h->n_req++;
    h->path[0] = 0;
}

/* "METHOD SP path ...": notes whether the method carries a body in evhttp and the path. */
static int request_line(struct hscan *h, const char *l, size_t n)
{
    size_t m = 0;
    while (m < n && m < 16 && l[m] >= 'A' && l[m] <= 'Z')
        m++;
    if (m == 0 || m >= n || l[m] != ' ')
        return lost(h);
    h->body_method = (m == 4 && memcmp(l, "POST", 4) == 0) ||
                     (m == 3 && memcmp(l, "PUT", 3) == 0) ||
                     (m == 5 && memcmp(l, "PATCH", 5) == 0);
    const char *p = l + m + 1;
    size_t k = 0, room = n - m - 1;
    while (k < room && k + 1 < sizeof h->path && p[k] != ' ' && p[k] != '?')
        k++;
    memcpy(h->path, p, k);
    h->path[k] = 0;
    h->has_cl = h->has_te = h->te_chunked = 0;
    h->cl = 0;
    h->state = ST_HEAD;
    return HSCAN_MORE;
}

/* Content-Length's value: optional blanks, digits (saturating), optional blanks. */
static int cl_value(struct hscan *h, const char *v, size_t n)
{
    size_t i = 0;
    while (i < n && (v[i] == ' ' || v[i] == '\t'))
        i++;
    size_t d0 = i;
    uint64_t x = 0;
    for (; i < n && v[i] >= '0' && v[i] <= '9'; i++)
        x = x > (UINT64_MAX - 9) / 10 ? UINT64_MAX : x * 10 + (uint64_t)(v[i] - '0');
    if (i == d0)
        return lost(h);
    while (i < n && (v[i] == ' ' || v[i] == '\t'))
        i++;
    if (i != n || h->has_cl)
        return lost(h);
    h->has_cl = 1;
    h->cl = x;
    return HSCAN_MORE;
}

/* The blank line after the headers (it ends at stream offset end, exclusive). */
static int head_end(struct hscan *h, uint64_t end, uint64_t max_body)
{
    if (h->has_te) { /* evhttp reads "chunked" alone; a length beside it is ambiguous */
        if (!h->te_chunked || h->has_te > 1 || h->has_cl || !h->body_method)
            return lost(h);
        h->cl = 0; /* from here: the chunk sizes so far */
        h->state = ST_CSIZE;
        return HSCAN_MORE;
    }
    if (h->has_cl && h->cl > max_body) {
        h->status = HSCAN_BIG;
        return HSCAN_BIG;
    }
    if (h->has_cl && h->cl > 0 && !h->body_method)
        return lost(h); /* whether evhttp reads it depends on its version */
    if (h->has_cl && h->cl > 0) {
        h->body_left = h->cl;
        h->state = ST_BODY;
    } else {
        next_request(h, end);
    }
    return HSCAN_MORE;
}

/* A line of a chunked body: a chunk size (hex digits only: an extension or anything else is
 * given up on), an empty line (evhttp skips them: the end of the chunk data before it), or
 * after the last chunk the empty line that ends the request (a trailer is given up on). A
 * body over max_body is left to evhttp (its own 413 after reading it). */
static int chunk_line(struct hscan *h, const char *l, size_t n, uint64_t end, uint64_t max_body)
{
    if (h->state == ST_CTRAIL) {
        if (n)
            return lost(h);
        next_request(h, end);
        return HSCAN_MORE;
    }
    if (n == 0)
        return HSCAN_MORE;
    if (n > 15)
        return lost(h);
    uint64_t x = 0;
    for (size_t i = 0; i < n; i++) {
        char c = l[i];
        int d = c >= '0' && c <= '9'   ? c - '0'
                : c >= 'a' && c <= 'f' ? c - 'a' + 10
                : c >= 'A' && c <= 'F' ? c - 'A' + 10
                                       : -1;
        if (d < 0)
            return lost(h);
        x = x * 16 + (uint64_t)d;
    }
    if (x == 0) {
        h->state = ST_CTRAIL;
        return HSCAN_MORE;
    }
    h->cl += x;
    if (h->cl > max_body)
        return lost(h);
    h->body_left = x;
    h->state = ST_CDATA;
    return HSCAN_MORE;
}

/* One whole line (its LF excluded; a CR before it stripped when the line was kept whole). */
static int line_done(struct hscan *h, uint64_t end, uint64_t max_body)
{
    size_t kept = h->line_len < HSCAN_LINE ? h->line_len : HSCAN_LINE;
    int whole = h->line_len <= HSCAN_LINE;
    size_t n = kept;
    if (whole && n > 0 && h->line[n - 1] == '\r')
        n--;
    const char *l = h->line;
    h->line_len = 0;
    if (h->state == ST_FIRST)
        return request_line(h, l, n); /* a long line: its method and path are kept */
    if (h->state == ST_CSIZE || h->state == ST_CTRAIL)
        return whole ? chunk_line(h, l, n, end, max_body) : lost(h);
    if (whole && n == 0)
        return head_end(h, end, max_body);
    if (l[0] == ' ' || l[0] == '\t')
        return lost(h); /* a folded line continues the previous header */
    const char *colon = memchr(l, ':', n);
    if (!colon)
        return whole ? lost(h) : HSCAN_MORE; /* a long name is no header we read */
    size_t name = (size_t)(colon - l);
    if (name == 14 && strncasecmp(l, "content-length", 14) == 0)
        return whole ? cl_value(h, colon + 1, n - name - 1) : lost(h);
    if (name == 17 && strncasecmp(l, "transfer-encoding", 17) == 0) {
        const char *v = colon + 1, *e = l + n;
        while (v < e && (*v == ' ' || *v == '\t'))
            v++;
        while (e > v && (e[-1] == ' ' || e[-1] == '\t'))
            e--;
        h->has_te++;
        h->te_chunked = whole && e - v == 7 && strncasecmp(v, "chunked", 7) == 0;
    }
    return HSCAN_MORE;
}

int hscan_feed(struct hscan *h, const char *p, size_t n, uint64_t max_body)
{
    uint64_t at = h->pos; /* stream offset of p[0] */
    h->pos += n;
    size_t i = 0;
    while (i < n && h->status == HSCAN_MORE) {
        if (h->state == ST_BODY || h->state == ST_CDATA) {
            size_t take = h->body_left < (uint64_t)(n - i) ? (size_t)h->body_left : n - i;
            h->body_left -= take;
            i += take;
            if (h->body_left == 0 && h->state == ST_BODY)
                next_request(h, at + i);
            else if (h->body_left == 0)
                h->state = ST_CSIZE;
            continue;
        }
        const char *lf = memchr(p + i, '\n', n - i);
        size_t seg = lf ? (size_t)(lf - (p + i)) : n - i;
        if (h->line_len < HSCAN_LINE) {
            size_t room = HSCAN_LINE - h->line_len;
            memcpy(h->line + h->line_len, p + i, seg < room ? seg : room);
        }
        h->line_len = h->line_len + seg > HSCAN_LINE + 1 ? HSCAN_LINE + 1 : h->line_len + seg;
        i += seg;
        if ((h->state == ST_FIRST || h->state == ST_HEAD) && at + i - h->req_start > HSCAN_MAX_HEAD)
            return lost(h);
        if (!lf)
            break;
        i++; /* the LF */
        line_done(h, at + i, max_body);
    }
    return h->status;
}
