/* jsonfmt.c — shortest round-trip reals in JSON text (see jsonfmt.h). */
#include "util/jsonfmt.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* The shortest %.Ng form of v that strtod reads back as v, in jansson's spelling. */
static void shortest(double v, char *out, size_t cap)
{
    for (int p = 1; p <= 17; p++) {
        snprintf(out, cap, "%.*g", p, v);
        if (strtod(out, NULL) == v)
            break;
    }
    char *e = strchr(out, 'e');
    if (e) { /* e+05 -> e5, e-05 -> e-5 */
        char *d = e + 1, *r = d;
        if (*r == '+')
            r++;
        else if (*r == '-')
            *d++ = *r++;
        while (*r == '0' && r[1])
            r++;
        memmove(d, r, strlen(r) + 1);
    }
    if (!strpbrk(out, ".e") && strlen(out) + 3 <= cap)
        strcat(out, ".0");
}

char *json_shorten_reals(char *s)
{
    if (!s)
        return s;
    char *w = s;
    const char *r = s;
    while (*r) {
        if (*r == '"') { /* copy a string literal through */
            *w++ = *r++;
            while (*r && *r != '"') {
                if (*r == '\\' && r[1])
                    *w++ = *r++;
                *w++ = *r++;
            }
            if (*r)
                *w++ = *r++;
            continue;
        }
        if (*r == '-' || (*r >= '0' && *r <= '9')) {
            const char *b = r;
            int real = 0;
            while (*r && strchr("+-0123456789.eE", *r)) {
                real |= *r == '.' || *r == 'e' || *r == 'E';
                r++;
            }
            size_t n = (size_t)(r - b);
            char tok[64], sh[40];
            if (real && n < sizeof tok) {
                memcpy(tok, b, n);
                tok[n] = 0;
                char *end;
                double v = strtod(tok, &end);
                if (*end == 0 && isfinite(v)) {
                    shortest(v, sh, sizeof sh);
                    size_t m = strlen(sh);
                    if (m <= n) {
                        memcpy(w, sh, m);
                        w += m;
                        continue;
                    }
                }
            }
            memmove(w, b, n);
            w += n;
            continue;
        }
        *w++ = *r++;
    }
    *w = 0;
    return s;
}

char *json_dumps_short(const json_t *j, size_t flags)
{
    return json_shorten_reals(json_dumps(j, flags));
}
