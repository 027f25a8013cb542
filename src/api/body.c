/* body.c — see body.h. */
#include "api/body.h"

#include <math.h>
#include <string.h>

/* Turns integral reals within ±2^53 back into integers, in place. */
static void ints_back(json_t *v, int depth)
{
    if (depth > 256)
        return;
    if (json_is_object(v)) {
        const char *k;
        json_t *x;
        void *tmp;
        json_object_foreach_safe(v, tmp, k, x)
        {
            double d = json_is_real(x) ? json_real_value(x) : NAN;
            if (d == floor(d) && fabs(d) <= 9007199254740992.0)
                json_object_set_new(v, k, json_integer((json_int_t)d));
            else
                ints_back(x, depth + 1);
        }
    } else if (json_is_array(v)) {
        for (size_t i = 0; i < json_array_size(v); i++) {
            json_t *x = json_array_get(v, i);
            double d = json_is_real(x) ? json_real_value(x) : NAN;
            if (d == floor(d) && fabs(d) <= 9007199254740992.0)
                json_array_set_new(v, i, json_integer((json_int_t)d));
            else
                ints_back(x, depth + 1);
        }
    }
}

json_t *api_body_load(const char *body, size_t len, json_error_t *je)
{
    json_t *v = json_loadb(body, len, JSON_DECODE_ANY | JSON_ALLOW_NUL, je);
    if (v || json_error_code(je) != json_error_numeric_overflow)
        return v;
    v = json_loadb(body, len, JSON_DECODE_ANY | JSON_ALLOW_NUL | JSON_DECODE_INT_AS_REAL, je);
    if (v)
        ints_back(v, 0);
    return v;
}
