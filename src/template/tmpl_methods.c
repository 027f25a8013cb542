/* tmpl_methods.c — Python methods templates call on values, and the template globals.
 *
 * str: strip/lstrip/rstrip, split/rsplit, splitlines, startswith/endswith, replace,
 * upper/lower/title/capitalize, find/rfind/count, join, removeprefix/removesuffix and the
 * is* predicates; dict: get/items/keys/values; list: index/count. Mutating methods
 * (append, pop, update, ...) are refused as in jinja2's ImmutableSandboxedEnvironment.
 * Globals: range (sandbox-capped), namespace, dict, raise_exception, strftime_now.
 */
#include <stdio.h>
#include <string.h>
#include <time.h>
#include <utf8proc.h>

#include "template/tmpl_int.h"

static const char *const g_str_methods[] = {
    "strip", "lstrip", "rstrip", "split", "rsplit", "splitlines", "startswith", "endswith",
    "replace", "upper", "lower", "title", "capitalize", "find", "rfind", "count", "join",
    "removeprefix", "removesuffix", "isdigit", "isalpha", "isalnum", "isspace", "isupper",
    "islower", "format", NULL};
static const char *const g_dict_methods[] = {"get", "items", "keys", "values", NULL};
static const char *const g_list_methods[] = {"index", "count", NULL};

static int in_set(const char *const *set, const char *name, size_t n)
{
    for (int i = 0; set[i]; i++)
        if (strlen(set[i]) == n && memcmp(set[i], name, n) == 0)
            return 1;
    return 0;
}

int tmethod_exists(struct tv obj, const char *name, size_t n)
{
    switch (obj.t) {
    case TV_STR:
        return in_set(g_str_methods, name, n);
    case TV_DICT:
        return in_set(g_dict_methods, name, n);
    case TV_LIST:
        return in_set(g_list_methods, name, n);
    default:
        return 0;
    }
}

/* ---- string helpers ---- */

static int in_chars(struct tv chars, int32_t cp)
{
    size_t i = 0;
    int32_t c;
    while (i < chars.u.s.n) {
        i += u8_decode(chars.u.s.p + i, chars.u.s.n - i, &c);
        if (c == cp)
            return 1;
    }
    return 0;
}

struct tv tstr_strip(struct rctx *r, struct tv s, struct tv *chars, int left, int right)
{
    struct tv cs = {0};
    if (chars && chars->t != TV_NONE) {
        if (chars->t != TV_STR)
            tfail(r, CERR_FORMAT, "strip arg must be None or str");
        cs = *chars;
    }
    const char *p = s.u.s.p;
    size_t a = 0, b = s.u.s.n;
    int32_t cp;
    while (left && a < b) {
        size_t k = u8_decode(p + a, b - a, &cp);
        if (chars && cs.t == TV_STR ? !in_chars(cs, cp) : !py_isspace(cp))
            break;
        a += k;
    }
    while (right && b > a) {
        size_t st = b - 1;
        while (st > a && ((unsigned char)p[st] & 0xC0) == 0x80 && b - st < 4)
            st--;
        size_t k = u8_decode(p + st, b - st, &cp);
        if (k != b - st) { /* invalid sequence: treat the last byte alone */
            st = b - 1;
            u8_decode(p + st, 1, &cp);
        }
        if (chars && cs.t == TV_STR ? !in_chars(cs, cp) : !py_isspace(cp))
            break;
        b = st;
    }
    return tv_str(p + a, b - a);
}

struct tv tstr_case(struct rctx *r, struct tv s, int upper)
{
    struct tbuf o = {0};
    tbuf_put(r, &o, "", 0);
    size_t i = 0;
    char enc[8];
    while (i < s.u.s.n) {
        int32_t cp;
        size_t k = u8_decode(s.u.s.p + i, s.u.s.n - i, &cp);
        if (upper && cp == 0xDF) {
            tbuf_put(r, &o, "SS", 2);
        } else if (cp < 0x80) {
            char c = (char)cp;
            if (upper && c >= 'a' && c <= 'z')
                c = (char)(c - 32);
            else if (!upper && c >= 'A' && c <= 'Z')
                c = (char)(c + 32);
            tbuf_putc(r, &o, c);
        } else if (k == 1) {
            tbuf_put(r, &o, s.u.s.p + i, 1); /* invalid byte: keep */
        } else {
            int32_t m = upper ? utf8proc_toupper(cp) : utf8proc_tolower(cp);
            tbuf_put(r, &o, enc, u8_encode(enc, m));
        }
        i += k;
    }
    return tv_str(o.p, o.n);
}

static int str_starts(struct tv s, struct tv pre, int end)
{
    if (pre.u.s.n > s.u.s.n)
        return 0;
    const char *at = end ? s.u.s.p + s.u.s.n - pre.u.s.n : s.u.s.p;
    return memcmp(at, pre.u.s.p, pre.u.s.n) == 0;
}

static struct tv str_split(struct rctx *r, struct tv s, struct tv *sep, int64_t maxsplit, int rev)
{
    struct tv out = tv_list(r, 4);
    const char *p = s.u.s.p;
    size_t n = s.u.s.n;
    if (!sep || sep->t == TV_NONE) {
        /* whitespace split */
        struct tv tmp = tv_list(r, 4);
        size_t i = 0;
        int32_t cp;
        if (!rev) {
            while (i < n) {
                size_t k;
                while (i < n && py_isspace((k = u8_decode(p + i, n - i, &cp), cp)))
                    i += k;
                if (i >= n)
                    break;
                if (maxsplit >= 0 && (int64_t)tmp.u.l->n >= maxsplit) {
                    struct tv rest = tstr_strip(r, tv_str(p + i, n - i), NULL, 0, 1);
                    tlist_push(r, tmp.u.l, rest);
                    break;
                }
                size_t st = i;
                while (i < n && !py_isspace((k = u8_decode(p + i, n - i, &cp), cp)))
                    i += k;
                tlist_push(r, tmp.u.l, tv_str(p + st, i - st));
            }
            return tmp;
        }
        /* rsplit(None, maxsplit): only needed with maxsplit; do it simply */
        struct tv all = str_split(r, s, NULL, -1, 0);
        if (maxsplit < 0 || (int64_t)all.u.l->n <= maxsplit + 1)
            return all;
        size_t keep = all.u.l->n - (size_t)maxsplit;
        struct tv last = all.u.l->v[keep - 1];
        size_t head_end = (size_t)(last.u.s.p + last.u.s.n - p);
        struct tv head = tstr_strip(r, tv_str(p, head_end), NULL, 1, 0);
        tlist_push(r, out.u.l, head);
        for (size_t j = keep; j < all.u.l->n; j++)
            tlist_push(r, out.u.l, all.u.l->v[j]);
        return out;
    }
    if (sep->t != TV_STR)
        tfail(r, CERR_FORMAT, "must be str or None, not %s", tv_typename(*sep));
    if (!sep->u.s.n)
        tfail(r, CERR_FORMAT, "empty separator");
    const char *d = sep->u.s.p;
    size_t dn = sep->u.s.n;
    if (!rev) {
        size_t i = 0;
        int64_t cnt = 0;
        for (;;) {
            const char *hit = (maxsplit < 0 || cnt < maxsplit) ? memmem(p + i, n - i, d, dn) : NULL;
            if (!hit) {
                tlist_push(r, out.u.l, tv_str(p + i, n - i));
                break;
            }
            tlist_push(r, out.u.l, tv_str(p + i, (size_t)(hit - (p + i))));
            i = (size_t)(hit - p) + dn;
            cnt++;
        }
        return out;
    }
    /* rsplit with separator: collect from the right */
    struct tv rv = tv_list(r, 4);
    size_t end = n;
    int64_t cnt = 0;
    for (;;) {
        const char *hit = NULL;
        if ((maxsplit < 0 || cnt < maxsplit) && end >= dn) {
            for (size_t j = end - dn + 1; j-- > 0;)
                if (memcmp(p + j, d, dn) == 0) {
                    hit = p + j;
                    break;
                }
        }
        if (!hit) {
            tlist_push(r, rv.u.l, tv_str(p, end));
            break;
        }
        size_t hs = (size_t)(hit - p);
        tlist_push(r, rv.u.l, tv_str(p + hs + dn, end - hs - dn));
        end = hs;
        cnt++;
    }
    for (size_t j = rv.u.l->n; j > 0; j--)
        tlist_push(r, out.u.l, rv.u.l->v[j - 1]);
    return out;
}

static int64_t cp_index(const char *p, const char *hit)
{
    return (int64_t)u8_len(p, (size_t)(hit - p));
}

static int str_pred(struct tv s, const char *name)
{
    if (!s.u.s.n)
        return 0;
    size_t i = 0;
    int cased = 0, lower = 0, upper = 0;
    while (i < s.u.s.n) {
        int32_t cp;
        i += u8_decode(s.u.s.p + i, s.u.s.n - i, &cp);
        utf8proc_category_t c = utf8proc_category(cp);
        int alpha = c == UTF8PROC_CATEGORY_LU || c == UTF8PROC_CATEGORY_LL ||
                    c == UTF8PROC_CATEGORY_LT || c == UTF8PROC_CATEGORY_LM ||
                    c == UTF8PROC_CATEGORY_LO;
        int digit = c == UTF8PROC_CATEGORY_ND;
        if (c == UTF8PROC_CATEGORY_LU || c == UTF8PROC_CATEGORY_LT)
            upper = 1, cased = 1;
        if (c == UTF8PROC_CATEGORY_LL)
            lower = 1, cased = 1;
        if (!strcmp(name, "isdigit") && !digit)
            return 0;
        if (!strcmp(name, "isalpha") && !alpha)
            return 0;
        if (!strcmp(name, "isalnum") && !alpha && !digit)
            return 0;
        if (!strcmp(name, "isspace") && !py_isspace(cp))
            return 0;
    }
    if (!strcmp(name, "isupper"))
        return cased && upper && !lower;
    if (!strcmp(name, "islower"))
        return cased && lower && !upper;
    return 1;
}

static struct tv str_title(struct rctx *r, struct tv s)
{
    struct tbuf o = {0};
    tbuf_put(r, &o, "", 0);
    size_t i = 0;
    int prev_cased = 0;
    while (i < s.u.s.n) {
        int32_t cp;
        size_t k = u8_decode(s.u.s.p + i, s.u.s.n - i, &cp);
        utf8proc_category_t c = utf8proc_category(cp);
        int cased = c == UTF8PROC_CATEGORY_LU || c == UTF8PROC_CATEGORY_LL || c == UTF8PROC_CATEGORY_LT;
        struct tv ch = tv_str(s.u.s.p + i, k);
        struct tv m = cased ? tstr_case(r, ch, !prev_cased) : ch;
        tbuf_put(r, &o, m.u.s.p, m.u.s.n);
        prev_cased = cased;
        i += k;
    }
    return tv_str(o.p, o.n);
}

static struct tv str_method(struct rctx *r, struct tv s, const char *name, struct tv *args,
                            int nargs, const char **kwn, struct tv *kwv, int nkw)
{
#define A(pos, nm) targ(args, nargs, kwn, kwv, nkw, pos, nm)
    if (!strcmp(name, "strip") || !strcmp(name, "lstrip") || !strcmp(name, "rstrip")) {
        struct tv *ch = A(0, "chars");
        return tstr_strip(r, s, ch, name[0] != 'r', name[0] != 'l');
    }
    if (!strcmp(name, "split") || !strcmp(name, "rsplit")) {
        struct tv *ms = A(1, "maxsplit");
        int64_t m = (ms && (ms->t == TV_INT || ms->t == TV_BOOL)) ? ms->u.i : -1;
        return str_split(r, s, A(0, "sep"), m, name[0] == 'r');
    }
    if (!strcmp(name, "splitlines")) {
        struct tv out = tv_list(r, 4);
        size_t i = 0, st = 0;
        int keep = A(0, "keepends") ? tv_truthy(*A(0, "keepends")) : 0;
        while (i < s.u.s.n) {
            int32_t cp;
            size_t k = u8_decode(s.u.s.p + i, s.u.s.n - i, &cp);
            if (cp == '\r' && i + 1 < s.u.s.n && s.u.s.p[i + 1] == '\n')
                k = 2;
            if (cp == '\n' || cp == '\r' || cp == '\v' || cp == '\f' || cp == 0x1c || cp == 0x1d ||
                cp == 0x1e || cp == 0x85 || cp == 0x2028 || cp == 0x2029) {
                tlist_push(r, out.u.l, tv_str(s.u.s.p + st, i - st + (keep ? k : 0)));
                st = i + k;
            }
            i += k;
        }
        if (st < s.u.s.n)
            tlist_push(r, out.u.l, tv_str(s.u.s.p + st, s.u.s.n - st));
        return out;
    }
    if (!strcmp(name, "startswith") || !strcmp(name, "endswith")) {
        struct tv *pre = A(0, "prefix");
        if (!pre)
            tfail(r, CERR_FORMAT, "%s() takes at least 1 argument", name);
        int end = name[0] == 'e';
        if (pre->t == TV_LIST && (pre->flags & TVF_TUPLE)) {
            for (size_t i = 0; i < pre->u.l->n; i++) {
                if (pre->u.l->v[i].t != TV_STR)
                    tfail(r, CERR_FORMAT, "tuple for %s must only contain str", name);
                if (str_starts(s, pre->u.l->v[i], end))
                    return tv_bool(1);
            }
            return tv_bool(0);
        }
        if (pre->t != TV_STR)
            tfail(r, CERR_FORMAT, "%s first arg must be str or a tuple of str, not %s", name,
                  tv_typename(*pre));
        return tv_bool(str_starts(s, *pre, end));
    }
    if (!strcmp(name, "replace")) {
        if (nargs < 2 || args[0].t != TV_STR || args[1].t != TV_STR)
            tfail(r, CERR_FORMAT, "replace() takes two str arguments");
        struct tv fargs[3] = {args[0], args[1], nargs > 2 ? args[2] : tv_int(-1)};
        return tfilter_apply(r, "replace", s, fargs, 3, NULL, NULL, 0);
    }
    if (!strcmp(name, "upper") || !strcmp(name, "lower"))
        return tstr_case(r, s, name[0] == 'u');
    if (!strcmp(name, "title"))
        return str_title(r, s);
    if (!strcmp(name, "capitalize"))
        return tfilter_apply(r, "capitalize", s, NULL, 0, NULL, NULL, 0);
    if (!strcmp(name, "find") || !strcmp(name, "rfind") || !strcmp(name, "count")) {
        struct tv *sub = A(0, "sub");
        if (!sub || sub->t != TV_STR)
            tfail(r, CERR_FORMAT, "%s() needs a str argument", name);
        if (name[0] == 'c') {
            if (!sub->u.s.n)
                return tv_int((int64_t)u8_len(s.u.s.p, s.u.s.n) + 1);
            int64_t c = 0;
            size_t i = 0;
            const char *h;
            while (i <= s.u.s.n && (h = memmem(s.u.s.p + i, s.u.s.n - i, sub->u.s.p, sub->u.s.n))) {
                c++;
                i = (size_t)(h - s.u.s.p) + sub->u.s.n;
            }
            return tv_int(c);
        }
        const char *best = NULL, *h;
        size_t i = 0;
        while (i <= s.u.s.n && (h = memmem(s.u.s.p + i, s.u.s.n - i, sub->u.s.p, sub->u.s.n))) {
            best = h;
            if (name[0] == 'f')
                break;
            i = (size_t)(h - s.u.s.p) + 1;
        }
        if (!sub->u.s.n)
            return tv_int(name[0] == 'f' ? 0 : (int64_t)u8_len(s.u.s.p, s.u.s.n));
        return tv_int(best ? cp_index(s.u.s.p, best) : -1);
    }
    if (!strcmp(name, "join")) {
        if (nargs < 1)
            tfail(r, CERR_FORMAT, "join() takes exactly one argument");
        struct tlist *l = titer(r, args[0]);
        struct tbuf o = {0};
        tbuf_put(r, &o, "", 0);
        for (size_t i = 0; i < l->n; i++) {
            if (l->v[i].t != TV_STR)
                tfail(r, CERR_FORMAT, "sequence item %zu: expected str instance, %s found", i,
                      tv_typename(l->v[i]));
            if (i)
                tbuf_put(r, &o, s.u.s.p, s.u.s.n);
            tbuf_put(r, &o, l->v[i].u.s.p, l->v[i].u.s.n);
        }
        return tv_str(o.p, o.n);
    }
    if (!strcmp(name, "removeprefix") || !strcmp(name, "removesuffix")) {
        if (nargs < 1 || args[0].t != TV_STR)
            tfail(r, CERR_FORMAT, "%s() needs a str argument", name);
        int end = name[6] == 's';
        if (!str_starts(s, args[0], end))
            return s;
        return end ? tv_str(s.u.s.p, s.u.s.n - args[0].u.s.n)
                   : tv_str(s.u.s.p + args[0].u.s.n, s.u.s.n - args[0].u.s.n);
    }
    if (!strncmp(name, "is", 2))
        return tv_bool(str_pred(s, name));
    if (!strcmp(name, "format")) {
        /* "{}" / "{0}" / "{name}" substitution with str() */
        struct tbuf o = {0};
        tbuf_put(r, &o, "", 0);
        int auto_i = 0;
        for (size_t i = 0; i < s.u.s.n; i++) {
            char c = s.u.s.p[i];
            if (c == '{' && i + 1 < s.u.s.n && s.u.s.p[i + 1] == '{') {
                tbuf_putc(r, &o, '{');
                i++;
            } else if (c == '}' && i + 1 < s.u.s.n && s.u.s.p[i + 1] == '}') {
                tbuf_putc(r, &o, '}');
                i++;
            } else if (c == '{') {
                const char *close = memchr(s.u.s.p + i, '}', s.u.s.n - i);
                if (!close)
                    tfail(r, CERR_FORMAT, "Single '{' encountered in format string");
                size_t fl = (size_t)(close - (s.u.s.p + i + 1));
                const char *f = s.u.s.p + i + 1;
                struct tv val;
                if (fl == 0) {
                    if (auto_i >= nargs)
                        tfail(r, CERR_FORMAT, "Replacement index %d out of range", auto_i);
                    val = args[auto_i++];
                } else if (f[0] >= '0' && f[0] <= '9') {
                    int64_t ix = 0; /* bounded: digits past nargs stop the parse */
                    for (size_t k = 0; k < fl && f[k] >= '0' && f[k] <= '9' && ix <= nargs; k++)
                        ix = ix * 10 + (f[k] - '0');
                    if (ix >= nargs)
                        tfail(r, CERR_FORMAT, "Replacement index out of range for format()");
                    val = args[ix];
                } else {
                    struct tv *kv = NULL;
                    for (int k = 0; k < nkw; k++)
                        if (strlen(kwn[k]) == fl && !memcmp(kwn[k], f, fl))
                            kv = &kwv[k];
                    if (!kv)
                        tfail(r, CERR_FORMAT, "format: missing key '%.*s'", (int)fl, f);
                    val = *kv;
                }
                tv_str_into(r, &o, val);
                i += fl + 1;
            } else {
                tbuf_putc(r, &o, c);
            }
        }
        return tv_str(o.p, o.n);
    }
#undef A
    tfail(r, CERR_FORMAT, "'str' object has no attribute '%s'", name);
}

struct tv tmethod_call(struct rctx *r, struct tv self, const char *name, struct tv *args,
                       int nargs, const char **kwn, struct tv *kwv, int nkw)
{
    if (self.t == TV_STR)
        return str_method(r, self, name, args, nargs, kwn, kwv, nkw);
    if (self.t == TV_DICT) {
        if (!strcmp(name, "get")) {
            if (nargs < 1)
                tfail(r, CERR_FORMAT, "get expected at least 1 argument, got 0");
            struct tv *v = tdict_get(self.u.d, args[0]);
            if (v)
                return *v;
            return nargs > 1 ? args[1] : tv_none();
        }
        if (!strcmp(name, "items")) {
            struct tv it = tfilter_apply(r, "items", self, NULL, 0, NULL, NULL, 0);
            it.flags |= TVF_ITEMS;
            return it;
        }
        if (!strcmp(name, "keys") || !strcmp(name, "values")) {
            struct tv out = tv_list(r, self.u.d->n);
            for (size_t i = 0; i < self.u.d->n; i++)
                tlist_push(r, out.u.l, name[0] == 'k' ? self.u.d->k[i] : self.u.d->v[i]);
            out.flags = name[0] == 'k' ? TVF_KEYS : TVF_VALUES;
            return out;
        }
    }
    if (self.t == TV_LIST && nargs >= 1) {
        int64_t c = 0;
        for (size_t i = 0; i < self.u.l->n; i++) {
            if (tv_eq(self.u.l->v[i], args[0])) {
                if (!strcmp(name, "index"))
                    return tv_int((int64_t)i);
                c++;
            }
        }
        if (!strcmp(name, "count"))
            return tv_int(c);
        tfail(r, CERR_FORMAT, "value is not in list");
    }
    tfail(r, CERR_FORMAT, "'%s' object has no method '%s'", tv_typename(self), name);
}

/* ---- globals ---- */

int tglobal_exists(const char *name)
{
    return !strcmp(name, "range") || !strcmp(name, "namespace") || !strcmp(name, "dict") ||
           !strcmp(name, "raise_exception") || !strcmp(name, "strftime_now");
}

static struct tv make_ns(struct rctx *r, struct tv *args, int nargs, const char **kwn,
                         struct tv *kwv, int nkw, int as_ns)
{
    struct tv d = tv_dict(r, (size_t)nkw);
    if (nargs > 1)
        tfail(r, CERR_FORMAT, "expected at most 1 positional argument");
    if (nargs == 1) {
        if (args[0].t != TV_DICT)
            tfail(r, CERR_FORMAT, "cannot convert '%s' to a dictionary", tv_typename(args[0]));
        for (size_t i = 0; i < args[0].u.d->n; i++)
            tdict_set(r, d.u.d, args[0].u.d->k[i], args[0].u.d->v[i]);
    }
    for (int i = 0; i < nkw; i++)
        tdict_set(r, d.u.d, tv_strz(kwn[i]), kwv[i]);
    if (as_ns)
        d.t = TV_NS;
    return d;
}

struct tv tglobal_call(struct rctx *r, const char *name, struct tv *args, int nargs,
                       const char **kwn, struct tv *kwv, int nkw)
{
    if (!strcmp(name, "raise_exception")) {
        struct tv m = nargs ? tv_to_str(r, args[0]) : tv_str("", 0);
        tfail_raw(r, m.u.s.p, m.u.s.n);
    }
    if (!strcmp(name, "range")) {
        int64_t a = 0, b, st = 1;
        for (int i = 0; i < nargs; i++)
            if (args[i].t != TV_INT && args[i].t != TV_BOOL)
                tfail(r, CERR_FORMAT, "'%s' object cannot be interpreted as an integer",
                      tv_typename(args[i]));
        if (nargs == 1)
            b = args[0].u.i;
        else if (nargs == 2 || nargs == 3) {
            a = args[0].u.i;
            b = args[1].u.i;
            if (nargs == 3)
                st = args[2].u.i;
        } else
            tfail(r, CERR_FORMAT, "range expected 1 to 3 arguments, got %d", nargs);
        if (st == 0)
            tfail(r, CERR_FORMAT, "range() arg 3 must not be zero");
        double cnt = st > 0 ? ((double)b - (double)a) / (double)st : ((double)a - (double)b) / (double)-st;
        if (cnt > TMPL_MAX_RANGE)
            tfail(r, CERR_FORMAT, "Range too big. The sandbox blocks ranges larger than MAX_RANGE (%d).",
                  TMPL_MAX_RANGE);
        struct tv out = tv_list(r, cnt > 0 ? (size_t)cnt + 1 : 0);
        for (int64_t x = a; st > 0 ? x < b : x > b;) {
            tlist_push(r, out.u.l, tv_int(x));
            if (__builtin_add_overflow(x, st, &x))
                break;
        }
        return out;
    }
    if (!strcmp(name, "namespace") || !strcmp(name, "dict"))
        return make_ns(r, args, nargs, kwn, kwv, nkw, name[0] == 'n');
    if (!strcmp(name, "strftime_now")) {
        if (nargs < 1 || args[0].t != TV_STR)
            tfail(r, CERR_FORMAT, "strftime_now needs a format string");
        time_t t = r->now_unix ? (time_t)r->now_unix : time(NULL);
        struct tm tmv;
        gmtime_r(&t, &tmv);
        char fmt[256], out[512];
        size_t fl = args[0].u.s.n < sizeof fmt - 1 ? args[0].u.s.n : sizeof fmt - 1;
        memcpy(fmt, args[0].u.s.p, fl);
        fmt[fl] = 0;
        size_t n = strftime(out, sizeof out, fmt, &tmv);
        return tv_str_copy(r, out, n);
    }
    tfail(r, CERR_UNSUPPORTED, "global '%s' is not supported", name);
}
