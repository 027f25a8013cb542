/* err.h — errors as values.
 *
 * Every fallible function returns 0 on success or a negative CERR_* code, and writes a
 * sentence a user can act on into a caller-provided struct cerr. Never assert on input.
 * Pass NULL for `e` when the caller does not want the text.
 */
#ifndef CINFER_UTIL_ERR_H
#define CINFER_UTIL_ERR_H

#include <stddef.h>

enum {
    CERR_OK = 0,
    CERR_IO = -1,       /* file or socket I/O failed */
    CERR_FORMAT = -2,   /* malformed input data (file, request, template) */
    CERR_NOMEM = -3,    /* allocation failed */
    CERR_INVALID = -4,  /* bad argument or unsupported value */
    CERR_UNSUPPORTED = -5, /* valid but not implemented (an architecture, a dtype) */
    CERR_LIMIT = -6,    /* a bound was hit (recursion, size, context) */
};

struct cerr {
    int code;
    char msg[512];
};

/* Formats msg into e (when e is non-NULL) and returns code, so callers can write
 * `return cerr_set(e, CERR_FORMAT, "%s: bad magic", path);`. */
int cerr_set(struct cerr *e, int code, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

/* Prefixes the existing message with "prefix: " (e.g. a file name). Returns e->code. */
int cerr_prefix(struct cerr *e, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

#endif
