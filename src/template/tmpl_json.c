/* tmpl_json.c — JSON in (jansson -> template values) and `tojson` out.
 *
 * tojson reproduces transformers' filter, json.dumps(x, ensure_ascii=False, indent=indent,
 * separators=separators, sort_keys=sort_keys): separators ", " and ": " by default ("," when
 * an indent is given), Python float repr, Infinity/NaN, non-string keys converted like
 * json.dumps does, and ensure_ascii's \uXXXX (surrogate pairs) when asked for.
 */
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "template/tmpl_int.h"

struct tv tv_from_json(struct rctx *r, const json_t *j)
{
    if (++r->depth > TMPL_MAX_CALL_DEPTH)
        tfail(r, CERR_LIMIT, "input JSON nested too deeply");
    struct tv v;
    switch (json_typeof(j)) {
    case JSON_OBJECT: {
        v = tv_dict(r, json_object_size(j));
        const char *k;
        json_t *x;
        json_object_foreach((json_t *)j, k, x) {
            tdict_set(r, v.u.d, tv_str(k, strlen(k)), tv_from_json(r, x));
        }
        break;
    }
    case JSON_ARRAY: {
        v = tv_list(r, json_array_size(j));
        size_t i;
        json_t *x;
        json_array_foreach(j, i, x) {
            tlist_push(r, v.u.l, tv_from_json(r, x));
        }
        break;
    }
    case JSON_STRING:
        v = tv_str(json_string_value(j), json_string_length(j));
        break;
    case JSON_INTEGER:
        v = tv_int(json_integer_value(j));
        break;
    case JSON_REAL:
        v = tv_float(json_real_value(j));
        break;
    case JSON_TRUE:
        v = tv_bool(1);
        break;
    case JSON_FALSE:
        v = tv_bool(0);
        break;
    default:
        v = tv_none();
    }
    r->depth--;
    return v;
}

static void json_str(struct rctx *r, struct tbuf *b, const char *p, size_t n, int ascii)
{
    tbuf_putc(r, b, '"');
    size_t i = 0;
    char esc[32];
    while (i < n) {
        int32_t cp;
        size_t k = u8_decode(p + i, n - i, &cp);
        switch (cp) {
        case '"': tbuf_put(r, b, "\\\"", 2); break;
        case '\\': tbuf_put(r, b, "\\\\", 2); break;
        case '\n': tbuf_put(r, b, "\\n", 2); break;
        case '\r': tbuf_put(r, b, "\\r", 2); break;
        case '\t': tbuf_put(r, b, "\\t", 2); break;
        case '\b': tbuf_put(r, b, "\\b", 2); break;
        case '\f': tbuf_put(r, b, "\\f", 2); break;
        default:
            if (cp < 0x20 || (ascii && cp >= 0x7f)) {
                if (cp >= 0x10000) {
                    int32_t v = cp - 0x10000;
                    snprintf(esc, sizeof esc, "\\u%04x\\u%04x", (unsigned)(0xD800 | (v >> 10)),
                             (unsigned)(0xDC00 | (v & 0x3FF)));
                } else {
                    snprintf(esc, sizeof esc, "\\u%04x", (unsigned)cp);
                }
                tbuf_puts(r, b, esc);
            } else {
                tbuf_put(r, b, p + i, k);
            }
        }
        i += k;
    }
    tbuf_putc(r, b, '"');
}

static void newline_indent(struct rctx *r, struct tbuf *b, const char *indent, int level)
{
    tbuf_putc(r, b, '\n');
    for (int i = 0; i < level; i++)
        tbuf_puts(r, b, indent);
}

struct jopts {
    int ascii, sort;
    const char *indent, *isep, *ksep;
};

/* Order of a dict's entries: insertion order, or sorted by key (sort_keys, which like
 * Python fails on keys of mixed, unorderable types). Insertion sort: dicts are small. */
static size_t *key_order(struct rctx *r, const struct tdict *d, int sort)
{
    size_t *ord = ralloc(r, (d->n + 1) * sizeof *ord);
    for (size_t i = 0; i < d->n; i++) {
        size_t j = i;
        while (sort && j > 0 && tv_cmp(r, d->k[ord[j - 1]], d->k[i]) > 0) {
            ord[j] = ord[j - 1];
            j--;
        }
        ord[j] = i;
    }
    return ord;
}

static void dump(struct rctx *r, struct tbuf *b, struct tv v, const struct jopts *o, int level)
{
    int ascii = o->ascii;
    const char *indent = o->indent, *isep = o->isep, *ksep = o->ksep;
    char num[64];
    if (++r->depth > TMPL_MAX_CALL_DEPTH)
        tfail(r, CERR_LIMIT, "value nested too deeply for tojson");
    switch (v.t) {
    case TV_NONE:
        tbuf_puts(r, b, "null");
        break;
    case TV_BOOL:
        tbuf_puts(r, b, v.u.i ? "true" : "false");
        break;
    case TV_INT:
        snprintf(num, sizeof num, "%" PRId64, v.u.i);
        tbuf_puts(r, b, num);
        break;
    case TV_FLOAT:
        if (isnan(v.u.f))
            tbuf_puts(r, b, "NaN");
        else if (isinf(v.u.f))
            tbuf_puts(r, b, v.u.f < 0 ? "-Infinity" : "Infinity");
        else {
            tv_float_repr(num, sizeof num, v.u.f);
            tbuf_puts(r, b, num);
        }
        break;
    case TV_STR:
        json_str(r, b, v.u.s.p, v.u.s.n, ascii);
        break;
    case TV_LIST:
        if (!v.u.l->n) {
            tbuf_puts(r, b, "[]");
            break;
        }
        tbuf_putc(r, b, '[');
        for (size_t i = 0; i < v.u.l->n; i++) {
            if (i)
                tbuf_puts(r, b, isep);
            if (indent)
                newline_indent(r, b, indent, level + 1);
            dump(r, b, v.u.l->v[i], o, level + 1);
        }
        if (indent)
            newline_indent(r, b, indent, level);
        tbuf_putc(r, b, ']');
        break;
    case TV_DICT:
        if (!v.u.d->n) {
            tbuf_puts(r, b, "{}");
            break;
        }
        tbuf_putc(r, b, '{');
        size_t *ord = key_order(r, v.u.d, o->sort);
        for (size_t oi = 0; oi < v.u.d->n; oi++) {
            size_t i = ord[oi];
            struct tv k = v.u.d->k[i];
            if (oi)
                tbuf_puts(r, b, isep);
            if (indent)
                newline_indent(r, b, indent, level + 1);
            if (k.t == TV_STR) {
                json_str(r, b, k.u.s.p, k.u.s.n, ascii);
            } else if (k.t == TV_INT || k.t == TV_FLOAT || k.t == TV_BOOL || k.t == TV_NONE) {
                struct tbuf kb = {0};
                struct jopts ko = {ascii, 0, NULL, isep, ksep};
                dump(r, &kb, k, &ko, 0);
                tbuf_putc(r, b, '"');
                tbuf_put(r, b, kb.p, kb.n);
                tbuf_putc(r, b, '"');
            } else {
                tfail(r, CERR_FORMAT, "keys must be str, int, float, bool or None, not %s",
                      tv_typename(k));
            }
            tbuf_puts(r, b, ksep);
            dump(r, b, v.u.d->v[i], o, level + 1);
        }
        if (indent)
            newline_indent(r, b, indent, level);
        tbuf_putc(r, b, '}');
        break;
    default:
        tfail(r, CERR_FORMAT, "Object of type %s is not JSON serializable", tv_typename(v));
    }
    r->depth--;
}

void tv_tojson(struct rctx *r, struct tbuf *b, struct tv v, int ensure_ascii, const char *indent,
               const char *item_sep, const char *key_sep, int sort_keys)
{
    struct jopts o = {ensure_ascii, sort_keys, indent, item_sep, key_sep};
    if (!o.isep)
        o.isep = indent ? "," : ", ";
    if (!o.ksep)
        o.ksep = ": ";
    dump(r, b, v, &o, 0);
}
