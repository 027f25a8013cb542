/* sbuf.h — a growable byte buffer for building responses and SSE frames.
 *
 * Always NUL-terminated when non-empty. Appends return 0 or CERR_NOMEM (the buffer keeps
 * what it had). Owned by one thread; free with sbuf_free().
 */
#ifndef CINFER_UTIL_SBUF_H
#define CINFER_UTIL_SBUF_H

#include <stddef.h>

struct sbuf {
    char *p;
    size_t len, cap;
};

int sbuf_append(struct sbuf *b, const char *s, size_t n);
int sbuf_puts(struct sbuf *b, const char *s);
int sbuf_printf(struct sbuf *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* Empties the buffer, keeping its memory. */
static inline void sbuf_clear(struct sbuf *b)
{
    b->len = 0;
    if (b->p)
        b->p[0] = 0;
}
void sbuf_free(struct sbuf *b);

#endif
