/* tmpl_value.c — the template value type with Python semantics.
 *
 * Constructors, insertion-ordered dicts, truthiness, ==, ordering, and the exact text
 * Python prints: str() of floats (shortest round-trip repr), True/False/None, and repr()
 * of lists, tuples, dicts and strings (quote choice and escapes as CPython does), because
 * templates that print a value must match jinja2 byte for byte. Strings are UTF-8;
 * lengths and indices are in code points, as in Python.
 */
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <utf8proc.h>

#include "template/tmpl_int.h"

/* ---- constructors ---- */

struct tv tv_undef(const char *name)
{
    struct tv v = {.t = TV_UNDEF};
    v.u.s.p = name;
    v.u.s.n = name ? strlen(name) : 0;
    return v;
}

struct tv tv_none(void)
{
    struct tv v = {.t = TV_NONE};
    return v;
}

struct tv tv_bool(int b)
{
    struct tv v = {.t = TV_BOOL};
    v.u.i = b != 0;
    return v;
}

struct tv tv_int(int64_t i)
{
    struct tv v = {.t = TV_INT};
    v.u.i = i;
    return v;
}

struct tv tv_float(double f)
{
    struct tv v = {.t = TV_FLOAT};
    v.u.f = f;
    return v;
}

struct tv tv_str(const char *p, size_t n)
{
    struct tv v = {.t = TV_STR};
    v.u.s.p = p ? p : "";
    v.u.s.n = n;
    return v;
}

struct tv tv_strz(const char *p)
{
    return tv_str(p, strlen(p));
}

struct tv tv_str_copy(struct rctx *r, const char *p, size_t n)
{
    char *b = ralloc(r, n + 1);
    if (n)
        memcpy(b, p, n);
    b[n] = 0;
    return tv_str(b, n);
}

struct tv tv_list(struct rctx *r, size_t cap)
{
    struct tv v = {.t = TV_LIST};
    v.u.l = ralloc(r, sizeof *v.u.l);
    v.u.l->n = 0;
    v.u.l->cap = cap;
    v.u.l->v = cap ? ralloc(r, cap * sizeof(struct tv)) : NULL;
    return v;
}

struct tv tv_dict(struct rctx *r, size_t cap)
{
    struct tv v = {.t = TV_DICT};
    v.u.d = ralloc(r, sizeof *v.u.d);
    v.u.d->n = 0;
    v.u.d->cap = cap;
    v.u.d->k = cap ? ralloc(r, cap * sizeof(struct tv)) : NULL;
    v.u.d->v = cap ? ralloc(r, cap * sizeof(struct tv)) : NULL;
    return v;
}

void tlist_push(struct rctx *r, struct tlist *l, struct tv v)
{
    if (l->n == l->cap) {
        size_t nc = l->cap ? l->cap * 2 : 4;
        struct tv *nv = ralloc(r, nc * sizeof *nv);
        if (l->n)
            memcpy(nv, l->v, l->n * sizeof *nv);
        l->v = nv;
        l->cap = nc;
    }
    l->v[l->n++] = v;
}

struct tv *tdict_get(const struct tdict *d, struct tv k)
{
    for (size_t i = 0; i < d->n; i++)
        if (tv_eq(d->k[i], k))
            return &d->v[i];
    return NULL;
}

struct tv *tdict_gets(const struct tdict *d, const char *k, size_t n)
{
    for (size_t i = 0; i < d->n; i++)
        if (d->k[i].t == TV_STR && d->k[i].u.s.n == n && memcmp(d->k[i].u.s.p, k, n) == 0)
            return &d->v[i];
    return NULL;
}

void tdict_set(struct rctx *r, struct tdict *d, struct tv k, struct tv v)
{
    struct tv *slot = tdict_get(d, k);
    if (slot) {
        *slot = v;
        return;
    }
    if (d->n == d->cap) {
        size_t nc = d->cap ? d->cap * 2 : 4;
        struct tv *nk = ralloc(r, nc * sizeof *nk), *nv = ralloc(r, nc * sizeof *nv);
        if (d->n) {
            memcpy(nk, d->k, d->n * sizeof *nk);
            memcpy(nv, d->v, d->n * sizeof *nv);
        }
        d->k = nk;
        d->v = nv;
        d->cap = nc;
    }
    d->k[d->n] = k;
    d->v[d->n++] = v;
}

/* ---- truth, equality, order ---- */

int tv_truthy(struct tv v)
{
    switch (v.t) {
    case TV_UNDEF:
    case TV_NONE:
        return 0;
    case TV_BOOL:
    case TV_INT:
        return v.u.i != 0;
    case TV_FLOAT:
        return v.u.f != 0.0;
    case TV_STR:
        return v.u.s.n != 0;
    case TV_LIST:
        return v.u.l->n != 0;
    case TV_DICT:
        return v.u.d->n != 0;
    default:
        return 1;
    }
}

int tv_is_num(struct tv v)
{
    return v.t == TV_BOOL || v.t == TV_INT || v.t == TV_FLOAT;
}

double tv_num(struct tv v)
{
    return v.t == TV_FLOAT ? v.u.f : (double)v.u.i;
}

int tv_eq(struct tv a, struct tv b)
{
    if (tv_is_num(a) && tv_is_num(b)) {
        if (a.t != TV_FLOAT && b.t != TV_FLOAT)
            return a.u.i == b.u.i;
        return tv_num(a) == tv_num(b);
    }
    if (a.t != b.t)
        return 0;
    switch (a.t) {
    case TV_UNDEF:
    case TV_NONE:
        return 1;
    case TV_STR:
        return a.u.s.n == b.u.s.n && memcmp(a.u.s.p, b.u.s.p, a.u.s.n) == 0;
    case TV_LIST:
        if ((a.flags & TVF_TUPLE) != (b.flags & TVF_TUPLE) || a.u.l->n != b.u.l->n)
            return 0;
        for (size_t i = 0; i < a.u.l->n; i++)
            if (!tv_eq(a.u.l->v[i], b.u.l->v[i]))
                return 0;
        return 1;
    case TV_DICT:
        if (a.u.d->n != b.u.d->n)
            return 0;
        for (size_t i = 0; i < a.u.d->n; i++) {
            struct tv *o = tdict_get(b.u.d, a.u.d->k[i]);
            if (!o || !tv_eq(a.u.d->v[i], *o))
                return 0;
        }
        return 1;
    default:
        return a.u.d == b.u.d;
    }
}

const char *tv_typename(struct tv v)
{
    switch (v.t) {
    case TV_UNDEF: return "Undefined";
    case TV_NONE: return "NoneType";
    case TV_BOOL: return "bool";
    case TV_INT: return "int";
    case TV_FLOAT: return "float";
    case TV_STR: return "str";
    case TV_LIST: return (v.flags & TVF_TUPLE) ? "tuple" : "list";
    case TV_DICT: return "dict";
    case TV_NS: return "Namespace";
    case TV_MACRO: return "Macro";
    case TV_LOOP: return "LoopContext";
    default: return "builtin_function_or_method";
    }
}

int tv_cmp(struct rctx *r, struct tv a, struct tv b)
{
    if (tv_is_num(a) && tv_is_num(b)) {
        if (a.t != TV_FLOAT && b.t != TV_FLOAT)
            return (a.u.i > b.u.i) - (a.u.i < b.u.i);
        double x = tv_num(a), y = tv_num(b);
        return (x > y) - (x < y);
    }
    if (a.t == TV_STR && b.t == TV_STR) {
        size_t m = a.u.s.n < b.u.s.n ? a.u.s.n : b.u.s.n;
        int c = memcmp(a.u.s.p, b.u.s.p, m);
        if (c)
            return c;
        return (a.u.s.n > b.u.s.n) - (a.u.s.n < b.u.s.n);
    }
    if (a.t == TV_LIST && b.t == TV_LIST && (a.flags & TVF_TUPLE) == (b.flags & TVF_TUPLE)) {
        for (size_t i = 0; i < a.u.l->n && i < b.u.l->n; i++) {
            if (!tv_eq(a.u.l->v[i], b.u.l->v[i]))
                return tv_cmp(r, a.u.l->v[i], b.u.l->v[i]);
        }
        return (a.u.l->n > b.u.l->n) - (a.u.l->n < b.u.l->n);
    }
    tfail(r, CERR_FORMAT, "'<' not supported between instances of '%s' and '%s'", tv_typename(a),
          tv_typename(b));
}

/* ---- buffers ---- */

void tbuf_put(struct rctx *r, struct tbuf *b, const char *p, size_t n)
{
    if (b->n + n + 1 > b->cap) {
        size_t nc = b->cap ? b->cap * 2 : 256;
        while (nc < b->n + n + 1)
            nc *= 2;
        if (nc > r->mem_cap)
            tfail(r, CERR_LIMIT, "template output exceeds %zu bytes", r->mem_cap);
        char *np = ralloc(r, nc);
        if (b->n)
            memcpy(np, b->p, b->n);
        b->p = np;
        b->cap = nc;
    }
    if (n)
        memcpy(b->p + b->n, p, n);
    b->n += n;
    b->p[b->n] = 0;
}

void tbuf_putc(struct rctx *r, struct tbuf *b, char c)
{
    tbuf_put(r, b, &c, 1);
}

void tbuf_puts(struct rctx *r, struct tbuf *b, const char *s)
{
    tbuf_put(r, b, s, strlen(s));
}

/* ---- UTF-8 ---- */

size_t u8_decode(const char *p, size_t n, int32_t *cp)
{
    const unsigned char *s = (const unsigned char *)p;
    if (!n) {
        *cp = 0;
        return 0;
    }
    unsigned c = s[0];
    size_t len = c < 0x80 ? 1 : (c >> 5) == 6 ? 2 : (c >> 4) == 14 ? 3 : (c >> 3) == 30 ? 4 : 0;
    if (!len || len > n) {
        *cp = (int32_t)c; /* invalid byte: treat as one code point */
        return 1;
    }
    int32_t v = len == 1 ? (int32_t)c : len == 2 ? (int32_t)(c & 0x1F) : len == 3 ? (int32_t)(c & 0x0F) : (int32_t)(c & 0x07);
    for (size_t i = 1; i < len; i++) {
        if ((s[i] & 0xC0) != 0x80) {
            *cp = (int32_t)c;
            return 1;
        }
        v = (v << 6) | (s[i] & 0x3F);
    }
    *cp = v;
    return len;
}

size_t u8_encode(char *out, int32_t cp)
{
    unsigned char *o = (unsigned char *)out;
    if (cp < 0x80) {
        o[0] = (unsigned char)cp;
        return 1;
    }
    if (cp < 0x800) {
        o[0] = (unsigned char)(0xC0 | (cp >> 6));
        o[1] = (unsigned char)(0x80 | (cp & 0x3F));
        return 2;
    }
    if (cp < 0x10000) {
        o[0] = (unsigned char)(0xE0 | (cp >> 12));
        o[1] = (unsigned char)(0x80 | ((cp >> 6) & 0x3F));
        o[2] = (unsigned char)(0x80 | (cp & 0x3F));
        return 3;
    }
    o[0] = (unsigned char)(0xF0 | (cp >> 18));
    o[1] = (unsigned char)(0x80 | ((cp >> 12) & 0x3F));
    o[2] = (unsigned char)(0x80 | ((cp >> 6) & 0x3F));
    o[3] = (unsigned char)(0x80 | (cp & 0x3F));
    return 4;
}

size_t u8_len(const char *p, size_t n)
{
    size_t c = 0, i = 0;
    int32_t cp;
    while (i < n) {
        i += u8_decode(p + i, n - i, &cp);
        c++;
    }
    return c;
}

size_t u8_offset(const char *p, size_t n, size_t idx)
{
    size_t i = 0;
    int32_t cp;
    while (idx-- && i < n)
        i += u8_decode(p + i, n - i, &cp);
    return i;
}

int py_isspace(int32_t c)
{
    return c == ' ' || (c >= 9 && c <= 13) || (c >= 0x1c && c <= 0x1f) || c == 0x85 ||
           c == 0xa0 || c == 0x1680 || (c >= 0x2000 && c <= 0x200a) || c == 0x2028 ||
           c == 0x2029 || c == 0x202f || c == 0x205f || c == 0x3000;
}

/* ---- str() and repr() ---- */

void tv_float_repr(char *buf, size_t cap, double f)
{
    if (isnan(f)) {
        snprintf(buf, cap, "nan");
        return;
    }
    if (isinf(f)) {
        snprintf(buf, cap, f < 0 ? "-inf" : "inf");
        return;
    }
    char e[64];
    for (int prec = 1; prec <= 17; prec++) {
        snprintf(e, sizeof e, "%.*e", prec - 1, f);
        if (strtod(e, NULL) == f)
            break;
    }
    /* e = [-]d[.ddd]e[+-]XX -> digits and exponent */
    char digits[32];
    int nd = 0, neg = 0;
    const char *p = e;
    if (*p == '-') {
        neg = 1;
        p++;
    }
    for (; *p && *p != 'e'; p++)
        if (*p >= '0' && *p <= '9' && nd < 31)
            digits[nd++] = *p;
    int ex = atoi(p + 1);
    while (nd > 1 && digits[nd - 1] == '0')
        nd--;
    digits[nd] = 0;
    char out[64];
    size_t o = 0;
    if (neg)
        out[o++] = '-';
    if (ex >= -4 && ex < 16) {
        if (ex < 0) {
            out[o++] = '0';
            out[o++] = '.';
            for (int i = 0; i < -ex - 1; i++)
                out[o++] = '0';
            for (int i = 0; i < nd; i++)
                out[o++] = digits[i];
        } else {
            for (int i = 0; i <= ex; i++)
                out[o++] = i < nd ? digits[i] : '0';
            out[o++] = '.';
            if (nd > ex + 1)
                for (int i = ex + 1; i < nd; i++)
                    out[o++] = digits[i];
            else
                out[o++] = '0';
        }
        out[o] = 0;
    } else {
        out[o++] = digits[0];
        if (nd > 1) {
            out[o++] = '.';
            for (int i = 1; i < nd; i++)
                out[o++] = digits[i];
        }
        snprintf(out + o, sizeof out - o, "e%c%02d", ex < 0 ? '-' : '+', ex < 0 ? -ex : ex);
    }
    snprintf(buf, cap, "%s", out);
}

static int py_isprintable(int32_t cp)
{
    if (cp == ' ')
        return 1;
    if (cp < 0x20 || cp == 0x7f)
        return 0;
    if (cp < 0x7f)
        return 1;
    utf8proc_category_t c = utf8proc_category(cp);
    switch (c) {
    case UTF8PROC_CATEGORY_CC:
    case UTF8PROC_CATEGORY_CF:
    case UTF8PROC_CATEGORY_CS:
    case UTF8PROC_CATEGORY_CO:
    case UTF8PROC_CATEGORY_CN:
    case UTF8PROC_CATEGORY_ZL:
    case UTF8PROC_CATEGORY_ZP:
    case UTF8PROC_CATEGORY_ZS:
        return 0;
    default:
        return 1;
    }
}

static void repr_str(struct rctx *r, struct tbuf *b, const char *p, size_t n)
{
    int has_sq = memchr(p, '\'', n) != NULL, has_dq = memchr(p, '"', n) != NULL;
    char q = (has_sq && !has_dq) ? '"' : '\'';
    tbuf_putc(r, b, q);
    size_t i = 0;
    while (i < n) {
        int32_t cp;
        size_t k = u8_decode(p + i, n - i, &cp);
        char esc[16];
        if (cp == q || cp == '\\') {
            esc[0] = '\\';
            esc[1] = (char)cp;
            tbuf_put(r, b, esc, 2);
        } else if (cp == '\t') {
            tbuf_put(r, b, "\\t", 2);
        } else if (cp == '\n') {
            tbuf_put(r, b, "\\n", 2);
        } else if (cp == '\r') {
            tbuf_put(r, b, "\\r", 2);
        } else if (py_isprintable(cp)) {
            tbuf_put(r, b, p + i, k);
        } else if (cp <= 0xff) {
            snprintf(esc, sizeof esc, "\\x%02x", (unsigned)cp);
            tbuf_puts(r, b, esc);
        } else if (cp <= 0xffff) {
            snprintf(esc, sizeof esc, "\\u%04x", (unsigned)cp);
            tbuf_puts(r, b, esc);
        } else {
            snprintf(esc, sizeof esc, "\\U%08x", (unsigned)cp);
            tbuf_puts(r, b, esc);
        }
        i += k;
    }
    tbuf_putc(r, b, q);
}

void tv_repr_into(struct rctx *r, struct tbuf *b, struct tv v)
{
    if (++r->depth > TMPL_MAX_CALL_DEPTH)
        tfail(r, CERR_LIMIT, "value nested too deeply to print");
    switch (v.t) {
    case TV_STR:
        repr_str(r, b, v.u.s.p, v.u.s.n);
        break;
    case TV_LIST: {
        int tup = v.flags & TVF_TUPLE;
        const char *view = (v.flags & TVF_KEYS) ? "dict_keys(" : (v.flags & TVF_VALUES) ? "dict_values(" : (v.flags & TVF_ITEMS) ? "dict_items(" : NULL;
        if (view)
            tbuf_puts(r, b, view);
        tbuf_putc(r, b, tup ? '(' : '[');
        for (size_t i = 0; i < v.u.l->n; i++) {
            if (i)
                tbuf_put(r, b, ", ", 2);
            tv_repr_into(r, b, v.u.l->v[i]);
        }
        if (tup && v.u.l->n == 1)
            tbuf_putc(r, b, ',');
        tbuf_putc(r, b, tup ? ')' : ']');
        if (view)
            tbuf_putc(r, b, ')');
        break;
    }
    case TV_DICT:
        tbuf_putc(r, b, '{');
        for (size_t i = 0; i < v.u.d->n; i++) {
            if (i)
                tbuf_put(r, b, ", ", 2);
            tv_repr_into(r, b, v.u.d->k[i]);
            tbuf_put(r, b, ": ", 2);
            tv_repr_into(r, b, v.u.d->v[i]);
        }
        tbuf_putc(r, b, '}');
        break;
    default:
        tv_str_into(r, b, v);
    }
    r->depth--;
}

void tv_str_into(struct rctx *r, struct tbuf *b, struct tv v)
{
    char num[64];
    switch (v.t) {
    case TV_UNDEF:
        break;
    case TV_NONE:
        tbuf_put(r, b, "None", 4);
        break;
    case TV_BOOL:
        tbuf_puts(r, b, v.u.i ? "True" : "False");
        break;
    case TV_INT:
        snprintf(num, sizeof num, "%" PRId64, v.u.i);
        tbuf_puts(r, b, num);
        break;
    case TV_FLOAT:
        tv_float_repr(num, sizeof num, v.u.f);
        tbuf_puts(r, b, num);
        break;
    case TV_STR:
        tbuf_put(r, b, v.u.s.p, v.u.s.n);
        break;
    case TV_LIST:
    case TV_DICT:
        tv_repr_into(r, b, v);
        break;
    case TV_NS: {
        struct tv d = {.t = TV_DICT};
        d.u.d = v.u.d;
        tbuf_puts(r, b, "<Namespace ");
        tv_repr_into(r, b, d);
        tbuf_putc(r, b, '>');
        break;
    }
    case TV_MACRO:
        tbuf_puts(r, b, "<Macro '");
        tbuf_puts(r, b, v.u.m->def->kind == N_MACRO ? v.u.m->def->s : "caller");
        tbuf_puts(r, b, "'>");
        break;
    case TV_LOOP:
        tbuf_puts(r, b, "<LoopContext>");
        break;
    default:
        tbuf_puts(r, b, "<built-in function>");
    }
}

struct tv tv_to_str(struct rctx *r, struct tv v)
{
    if (v.t == TV_STR)
        return v;
    if (v.t == TV_UNDEF)
        return tv_str("", 0);
    struct tbuf b = {0};
    tv_str_into(r, &b, v);
    return tv_str(b.p, b.n);
}
