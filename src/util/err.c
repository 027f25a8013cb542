/* err.c — see err.h. */
#include "util/err.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>

int cerr_set(struct cerr *e, int code, const char *fmt, ...)
{
    if (e) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(e->msg, sizeof e->msg, fmt, ap);
        va_end(ap);
        e->code = code;
    }
    return code;
}

int cerr_prefix(struct cerr *e, const char *fmt, ...)
{
    if (!e)
        return CERR_INVALID;
    char pre[256], old[sizeof e->msg];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(pre, sizeof pre, fmt, ap);
    va_end(ap);
    memcpy(old, e->msg, sizeof old);
    size_t pl = strlen(pre);
    if (pl > sizeof e->msg - 3)
        pl = sizeof e->msg - 3;
    memcpy(e->msg, pre, pl);
    memcpy(e->msg + pl, ": ", 2);
    size_t room = sizeof e->msg - pl - 3, ol = strlen(old);
    if (ol > room)
        ol = room;
    memcpy(e->msg + pl + 2, old, ol);
    e->msg[pl + 2 + ol] = 0;
    return e->code;
}
