/* hfconfig.c — Hugging Face JSON config reader over jansson.
 *
 * Lookups walk a dotted path through nested objects. At each level the remaining path is
 * first tried as a literal key (so a key that itself contains a dot still resolves), then
 * split at the first dot. Files whose integers exceed int64 (tokenizer_config.json's
 * model_max_length = 1e30 written as an integer) are re-parsed after turning just those
 * literals into reals (other integers stay integers for hfcfg_json() users).
 */
#include "format/hfconfig.h"

#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "util/fs.h"

struct hfcfg {
    json_t *root;
    char path[512];
};

/* Copy of text where every integer literal of more than 18 digits outside strings gets a
 * ".0" suffix, so jansson reads it as a real. NULL on allocation failure. */
static char *widen_big_ints(const char *text, size_t len, size_t *out_len)
{
    char *o = malloc(len + len / 19 * 2 + 3);
    if (!o)
        return NULL;
    size_t n = 0, i = 0;
    int in_str = 0;
    while (i < len) {
        char ch = text[i];
        if (in_str) {
            o[n++] = ch;
            if (ch == '\\' && i + 1 < len)
                o[n++] = text[++i];
            else if (ch == '"')
                in_str = 0;
            i++;
            continue;
        }
        if (ch == '"') {
            in_str = 1;
            o[n++] = text[i++];
            continue;
        }
        if ((ch >= '0' && ch <= '9') || ch == '-') {
            size_t j = i + (ch == '-'), digits = 0;
            while (j < len && text[j] >= '0' && text[j] <= '9')
                j++, digits++;
            int frac = j < len && (text[j] == '.' || text[j] == 'e' || text[j] == 'E');
            memcpy(o + n, text + i, j - i);
            n += j - i;
            if (digits > 18 && !frac) {
                o[n++] = '.';
                o[n++] = '0';
            }
            i = j;
            continue;
        }
        o[n++] = text[i++];
    }
    *out_len = n;
    return o;
}

int hfcfg_parse(struct hfcfg **out, const char *text, size_t len, const char *label,
                struct cerr *e)
{
    *out = NULL;
    if (!label)
        label = "(memory)";
    if (!text)
        return cerr_set(e, CERR_INVALID, "%s: no JSON text", label);
    if (len >= 3 && memcmp(text, "\xef\xbb\xbf", 3) == 0) { /* UTF-8 byte-order mark */
        text += 3;
        len -= 3;
    }
    json_error_t je;
    json_t *root = json_loadb(text, len, JSON_DECODE_ANY, &je);
    if (!root && strstr(je.text, "too big")) {
        size_t wl = 0;
        char *w = widen_big_ints(text, len, &wl);
        if (!w)
            return cerr_set(e, CERR_NOMEM, "%s: out of memory", label);
        root = json_loadb(w, wl, JSON_DECODE_ANY, &je);
        free(w);
    }
    if (!root)
        return cerr_set(e, CERR_FORMAT, "%s: invalid JSON at line %d column %d: %s", label,
                        je.line, je.column, je.text);
    if (!json_is_object(root)) {
        json_decref(root);
        return cerr_set(e, CERR_FORMAT, "%s: expected a JSON object at the top level", label);
    }
    struct hfcfg *c = calloc(1, sizeof *c);
    if (!c) {
        json_decref(root);
        return cerr_set(e, CERR_NOMEM, "%s: out of memory", label);
    }
    c->root = root;
    snprintf(c->path, sizeof c->path, "%s", label);
    *out = c;
    return 0;
}

int hfcfg_load(struct hfcfg **out, const char *json_path, struct cerr *e)
{
    *out = NULL;
    char *text = NULL;
    size_t len = 0;
    int rc = fs_read_all(json_path, &text, &len, e);
    if (rc)
        return rc;
    rc = hfcfg_parse(out, text, len, json_path, e);
    free(text);
    return rc;
}

void hfcfg_free(struct hfcfg *c)
{
    if (!c)
        return;
    json_decref(c->root);
    free(c);
}

const void *hfcfg_json(const struct hfcfg *c) { return c->root; }
const char *hfcfg_path(const struct hfcfg *c) { return c->path; }

/* The value at dotted path key, or NULL when absent or null. */
static json_t *lookup(const struct hfcfg *c, const char *key)
{
    json_t *obj = c->root;
    const char *p = key;
    while (obj && json_is_object(obj)) {
        json_t *v = json_object_get(obj, p);
        if (v)
            return json_is_null(v) ? NULL : v;
        const char *dot = strchr(p, '.');
        if (!dot)
            return NULL;
        v = json_object_getn(obj, p, (size_t)(dot - p));
        obj = v;
        p = dot + 1;
    }
    return NULL;
}

static const char *jtype(const json_t *v)
{
    switch (json_typeof(v)) {
    case JSON_OBJECT: return "an object";
    case JSON_ARRAY: return "an array";
    case JSON_STRING: return "a string";
    case JSON_INTEGER: return "an integer";
    case JSON_REAL: return "a number";
    case JSON_TRUE: case JSON_FALSE: return "a boolean";
    default: return "null";
    }
}

static int type_err(const struct hfcfg *c, const char *key, const json_t *v, const char *want,
                    struct cerr *e)
{
    return cerr_set(e, CERR_FORMAT, "%s: \"%s\" is %s, expected %s", c->path, key, jtype(v),
                    want);
}

/* Converts v to int64 when it is an integer or an integral real in range. */
static int as_int(const json_t *v, int64_t *out)
{
    if (json_is_integer(v)) {
        *out = (int64_t)json_integer_value(v);
        return 1;
    }
    if (json_is_real(v)) {
        double d = json_real_value(v);
        if (isfinite(d) && d == floor(d) && d >= -9.2e18 && d <= 9.2e18) {
            *out = (int64_t)d;
            return 1;
        }
    }
    return 0;
}

int hfcfg_int(const struct hfcfg *c, const char *key, int64_t *out, struct cerr *e)
{
    json_t *v = lookup(c, key);
    if (!v)
        return 1;
    if (!as_int(v, out))
        return type_err(c, key, v, "an integer", e);
    return 0;
}

int hfcfg_float(const struct hfcfg *c, const char *key, double *out, struct cerr *e)
{
    json_t *v = lookup(c, key);
    if (!v)
        return 1;
    if (!json_is_number(v))
        return type_err(c, key, v, "a number", e);
    *out = json_number_value(v);
    return 0;
}

int hfcfg_bool(const struct hfcfg *c, const char *key, int *out, struct cerr *e)
{
    json_t *v = lookup(c, key);
    if (!v)
        return 1;
    if (!json_is_boolean(v))
        return type_err(c, key, v, "true or false", e);
    *out = json_is_true(v);
    return 0;
}

int hfcfg_str(const struct hfcfg *c, const char *key, const char **out, struct cerr *e)
{
    json_t *v = lookup(c, key);
    if (!v)
        return 1;
    if (!json_is_string(v))
        return type_err(c, key, v, "a string", e);
    *out = json_string_value(v);
    return 0;
}

int hfcfg_int_list(const struct hfcfg *c, const char *key, int64_t *out, int cap, int *n,
                   struct cerr *e)
{
    *n = 0;
    json_t *v = lookup(c, key);
    if (!v)
        return 1;
    if (!json_is_array(v)) {
        int64_t x;
        if (!as_int(v, &x))
            return type_err(c, key, v, "an integer or a list of integers", e);
        if (cap < 1)
            return cerr_set(e, CERR_LIMIT, "%s: \"%s\": no room for one value", c->path, key);
        out[0] = x;
        *n = 1;
        return 0;
    }
    size_t len = json_array_size(v);
    for (size_t i = 0; i < len; i++) {
        int64_t x;
        json_t *it = json_array_get(v, i);
        if (!as_int(it, &x))
            return cerr_set(e, CERR_FORMAT, "%s: \"%s\"[%zu] is %s, expected an integer", c->path,
                            key, i, jtype(it));
        if ((int)i >= cap)
            return cerr_set(e, CERR_LIMIT, "%s: \"%s\" has %zu entries, more than the %d supported",
                            c->path, key, len, cap);
        out[i] = x;
        *n = (int)i + 1;
    }
    return 0;
}

int hfcfg_str_list(const struct hfcfg *c, const char *key, const char **out, int cap, int *n,
                   struct cerr *e)
{
    *n = 0;
    json_t *v = lookup(c, key);
    if (!v)
        return 1;
    if (json_is_string(v)) {
        if (cap < 1)
            return cerr_set(e, CERR_LIMIT, "%s: \"%s\": no room for one value", c->path, key);
        out[0] = json_string_value(v);
        *n = 1;
        return 0;
    }
    if (!json_is_array(v))
        return type_err(c, key, v, "a string or a list of strings", e);
    size_t len = json_array_size(v);
    for (size_t i = 0; i < len; i++) {
        json_t *it = json_array_get(v, i);
        if (!json_is_string(it))
            return cerr_set(e, CERR_FORMAT, "%s: \"%s\"[%zu] is %s, expected a string", c->path,
                            key, i, jtype(it));
        if ((int)i >= cap)
            return cerr_set(e, CERR_LIMIT, "%s: \"%s\" has %zu entries, more than the %d supported",
                            c->path, key, len, cap);
        out[i] = json_string_value(it);
        *n = (int)i + 1;
    }
    return 0;
}
