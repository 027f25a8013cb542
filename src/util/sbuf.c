/* sbuf.c — see sbuf.h. */
#include "util/sbuf.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "util/err.h"

static int grow(struct sbuf *b, size_t need)
{
    if (b->len + need + 1 <= b->cap)
        return 0;
    size_t nc = b->cap ? b->cap : 256;
    while (nc < b->len + need + 1)
        nc *= 2;
    char *n = realloc(b->p, nc);
    if (!n)
        return CERR_NOMEM;
    b->p = n;
    b->cap = nc;
    return 0;
}

int sbuf_append(struct sbuf *b, const char *s, size_t n)
{
    if (grow(b, n))
        return CERR_NOMEM;
    if (n)
        memcpy(b->p + b->len, s, n);
    b->len += n;
    b->p[b->len] = 0;
    return 0;
}

int sbuf_puts(struct sbuf *b, const char *s) { return sbuf_append(b, s, strlen(s)); }

int sbuf_printf(struct sbuf *b, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    char tmp[512];
    int n = vsnprintf(tmp, sizeof tmp, fmt, ap);
    va_end(ap);
    if (n < 0)
        return CERR_INVALID;
    if ((size_t)n < sizeof tmp)
        return sbuf_append(b, tmp, (size_t)n);
    if (grow(b, (size_t)n))
        return CERR_NOMEM;
    va_start(ap, fmt);
    vsnprintf(b->p + b->len, (size_t)n + 1, fmt, ap);
    va_end(ap);
    b->len += (size_t)n;
    return 0;
}

void sbuf_free(struct sbuf *b)
{
    free(b->p);
    b->p = NULL;
    b->len = b->cap = 0;
}
