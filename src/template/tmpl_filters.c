/* tmpl_filters.c — the jinja2 filters and tests real chat templates call.
 *
 * Each filter takes its input, positional and keyword arguments (names and defaults as in
 * jinja2.filters), and returns a value or fails the render. `tojson` is transformers'
 * override (json.dumps, ensure_ascii=False). Sorting filters are stable and
 * case-insensitive by default, like Jinja. An unknown filter or test is a template error.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "template/tmpl_int.h"

struct tv *targ(struct tv *args, int nargs, const char **kwn, struct tv *kwv, int nkw, int pos,
                const char *name)
{
    for (int i = 0; i < nkw; i++)
        if (!strcmp(kwn[i], name))
            return &kwv[i];
    return pos >= 0 && pos < nargs ? &args[pos] : NULL;
}

static int64_t arg_int(struct rctx *r, struct tv *v, int64_t def)
{
    if (!v)
        return def;
    if (v->t == TV_INT || v->t == TV_BOOL)
        return v->u.i;
    if (v->t == TV_FLOAT)
        return fabs(v->u.f) < 9.2e18 ? (int64_t)v->u.f : (v->u.f > 0 ? INT64_MAX : (v->u.f < 0 ? INT64_MIN : 0));
    tfail(r, CERR_FORMAT, "expected an integer argument, got '%s'", tv_typename(*v));
}

static int arg_bool(struct tv *v, int def)
{
    return v ? tv_truthy(*v) : def;
}

static struct tv need_str(struct rctx *r, struct tv v)
{
    return tv_to_str(r, v);
}

/* ---- helpers ---- */

static struct tv length_of(struct rctx *r, struct tv v)
{
    switch (v.t) {
    case TV_STR:
        return tv_int((int64_t)u8_len(v.u.s.p, v.u.s.n));
    case TV_LIST:
        return tv_int((int64_t)v.u.l->n);
    case TV_DICT:
        return tv_int((int64_t)v.u.d->n);
    case TV_UNDEF:
        return tv_int(0);
    default:
        tfail(r, CERR_FORMAT, "object of type '%s' has no len()", tv_typename(v));
    }
}

/* Jinja's make_attrgetter: "a.b.0" looked up item-first. */
static struct tv attr_path(struct rctx *r, struct tv v, struct tv path)
{
    if (path.t == TV_INT)
        return tget_item(r, v, path);
    struct tv p = need_str(r, path);
    size_t i = 0;
    while (i <= p.u.s.n) {
        size_t j = i;
        while (j < p.u.s.n && p.u.s.p[j] != '.')
            j++;
        int isnum = j > i;
        for (size_t k = i; k < j; k++)
            isnum &= p.u.s.p[k] >= '0' && p.u.s.p[k] <= '9';
        struct tv key = isnum ? tv_int(strtoll(p.u.s.p + i, NULL, 10)) : tv_str_copy(r, p.u.s.p + i, j - i);
        v = tget_item(r, v, key);
        i = j + 1;
    }
    return v;
}

static struct tv lower_if(struct rctx *r, struct tv v, int case_sensitive)
{
    return (!case_sensitive && v.t == TV_STR) ? tstr_case(r, v, 0) : v;
}

/* Stable merge sort of a[0..n) by keys k[0..n). */
static void msort(struct rctx *r, struct tv *a, struct tv *k, size_t n, int rev)
{
    if (n < 2)
        return;
    size_t h = n / 2;
    msort(r, a, k, h, rev);
    msort(r, a + h, k + h, n - h, rev);
    struct tv *ta = ralloc(r, n * sizeof *ta), *tk = ralloc(r, n * sizeof *tk);
    size_t i = 0, j = h, o = 0;
    while (i < h && j < n) {
        int c = tv_cmp(r, k[j], k[i]);
        int take_right = rev ? c > 0 : c < 0;
        if (take_right) {
            ta[o] = a[j];
            tk[o++] = k[j++];
        } else {
            ta[o] = a[i];
            tk[o++] = k[i++];
        }
    }
    while (i < h) {
        ta[o] = a[i];
        tk[o++] = k[i++];
    }
    while (j < n) {
        ta[o] = a[j];
        tk[o++] = k[j++];
    }
    memcpy(a, ta, n * sizeof *a);
    memcpy(k, tk, n * sizeof *k);
}

static struct tv list_copy(struct rctx *r, const struct tlist *l)
{
    struct tv out = tv_list(r, l->n);
    for (size_t i = 0; i < l->n; i++)
        tlist_push(r, out.u.l, l->v[i]);
    return out;
}

static int splitline_at(const char *p, size_t n, size_t i, size_t *len)
{
    int32_t cp;
    size_t k = u8_decode(p + i, n - i, &cp);
    if (cp == '\r' && i + 1 < n && p[i + 1] == '\n') {
        *len = 2;
        return 1;
    }
    *len = k;
    return cp == '\n' || cp == '\r' || cp == '\v' || cp == '\f' || cp == 0x1c || cp == 0x1d ||
           cp == 0x1e || cp == 0x85 || cp == 0x2028 || cp == 0x2029;
}

static struct tv do_indent(struct rctx *r, struct tv s, struct tv *width, int first, int blank)
{
    struct tv ind;
    if (width && width->t == TV_STR)
        ind = *width;
    else {
        int64_t w = arg_int(r, width, 4);
        if (w < 0)
            w = 0;
        if (w > 4096)
            tfail(r, CERR_LIMIT, "indent width too large");
        char *b = ralloc(r, (size_t)w + 1);
        memset(b, ' ', (size_t)w);
        ind = tv_str(b, (size_t)w);
    }
    s = need_str(r, s);
    /* s += "\n"; lines = s.splitlines() */
    struct tbuf src = {0};
    tbuf_put(r, &src, s.u.s.p, s.u.s.n);
    tbuf_putc(r, &src, '\n');
    struct tv lines = tv_list(r, 8);
    size_t i = 0, st = 0, ll;
    while (i < src.n) {
        if (splitline_at(src.p, src.n, i, &ll)) {
            tlist_push(r, lines.u.l, tv_str(src.p + st, i - st));
            i += ll;
            st = i;
        } else {
            i += ll;
        }
    }
    if (st < src.n)
        tlist_push(r, lines.u.l, tv_str(src.p + st, src.n - st));
    struct tbuf o = {0};
    tbuf_put(r, &o, "", 0);
    if (first)
        tbuf_put(r, &o, ind.u.s.p, ind.u.s.n);
    for (size_t k = 0; k < lines.u.l->n; k++) {
        struct tv ln = lines.u.l->v[k];
        if (k) {
            tbuf_putc(r, &o, '\n');
            if (blank || ln.u.s.n)
                tbuf_put(r, &o, ind.u.s.p, ind.u.s.n);
        }
        tbuf_put(r, &o, ln.u.s.p, ln.u.s.n);
    }
    return tv_str(o.p, o.n);
}

static struct tv do_title(struct rctx *r, struct tv s)
{
    struct tbuf o = {0};
    tbuf_put(r, &o, "", 0);
    size_t i = 0;
    int at_start = 1;
    while (i < s.u.s.n) {
        int32_t cp;
        size_t k = u8_decode(s.u.s.p + i, s.u.s.n - i, &cp);
        int sep = py_isspace(cp) || cp == '-' || cp == '(' || cp == '{' || cp == '[' || cp == '<';
        struct tv ch = tv_str(s.u.s.p + i, k);
        if (sep) {
            tbuf_put(r, &o, ch.u.s.p, ch.u.s.n);
            at_start = 1;
        } else {
            struct tv c = tstr_case(r, ch, at_start ? 1 : 0);
            tbuf_put(r, &o, c.u.s.p, c.u.s.n);
            at_start = 0;
        }
        i += k;
    }
    return tv_str(o.p, o.n);
}

static struct tv do_capitalize(struct rctx *r, struct tv s)
{
    if (!s.u.s.n)
        return s;
    int32_t cp;
    size_t k = u8_decode(s.u.s.p, s.u.s.n, &cp);
    struct tv a = tstr_case(r, tv_str(s.u.s.p, k), 1);
    struct tv b = tstr_case(r, tv_str(s.u.s.p + k, s.u.s.n - k), 0);
    struct tbuf o = {0};
    tbuf_put(r, &o, a.u.s.p, a.u.s.n);
    tbuf_put(r, &o, b.u.s.p, b.u.s.n);
    return tv_str(o.p, o.n);
}

static struct tv do_replace(struct rctx *r, struct tv s, struct tv old, struct tv new_,
                            int64_t count)
{
    s = need_str(r, s);
    old = need_str(r, old);
    new_ = need_str(r, new_);
    struct tbuf o = {0};
    tbuf_put(r, &o, "", 0);
    if (!old.u.s.n) { /* Python inserts new between every code point */
        size_t i = 0;
        int64_t done = 0;
        int32_t cp;
        while (1) {
            if (count < 0 || done < count) {
                tbuf_put(r, &o, new_.u.s.p, new_.u.s.n);
                done++;
            }
            if (i >= s.u.s.n)
                break;
            size_t k = u8_decode(s.u.s.p + i, s.u.s.n - i, &cp);
            tbuf_put(r, &o, s.u.s.p + i, k);
            i += k;
        }
        return tv_str(o.p, o.n);
    }
    size_t i = 0;
    int64_t done = 0;
    while (i < s.u.s.n) {
        const char *hit = (count < 0 || done < count)
                              ? memmem(s.u.s.p + i, s.u.s.n - i, old.u.s.p, old.u.s.n)
                              : NULL;
        if (!hit) {
            tbuf_put(r, &o, s.u.s.p + i, s.u.s.n - i);
            break;
        }
        tbuf_put(r, &o, s.u.s.p + i, (size_t)(hit - (s.u.s.p + i)));
        tbuf_put(r, &o, new_.u.s.p, new_.u.s.n);
        i = (size_t)(hit - s.u.s.p) + old.u.s.n;
        done++;
    }
    return tv_str(o.p, o.n);
}

static struct tv do_join(struct rctx *r, struct tv in, struct tv *sep, struct tv *attr)
{
    struct tlist *l = titer(r, in);
    struct tv d = sep ? need_str(r, *sep) : tv_str("", 0);
    struct tbuf o = {0};
    tbuf_put(r, &o, "", 0);
    for (size_t i = 0; i < l->n; i++) {
        if (i)
            tbuf_put(r, &o, d.u.s.p, d.u.s.n);
        struct tv x = attr ? attr_path(r, l->v[i], *attr) : l->v[i];
        tv_str_into(r, &o, x);
    }
    return tv_str(o.p, o.n);
}

static struct tv items_of(struct rctx *r, struct tv d)
{
    if (d.t == TV_UNDEF)
        return tv_list(r, 0);
    if (d.t != TV_DICT && d.t != TV_NS)
        tfail(r, CERR_FORMAT, "can only get item pairs from a mapping.");
    struct tv out = tv_list(r, d.u.d->n);
    for (size_t i = 0; i < d.u.d->n; i++) {
        struct tv pair = tv_list(r, 2);
        pair.flags = TVF_TUPLE;
        tlist_push(r, pair.u.l, d.u.d->k[i]);
        tlist_push(r, pair.u.l, d.u.d->v[i]);
        tlist_push(r, out.u.l, pair);
    }
    return out;
}

static struct tv select_like(struct rctx *r, struct tv in, struct tv *args, int nargs,
                             int use_attr, int keep)
{
    if (!tv_truthy(in)) /* jinja2: `if value: for item in value` */
        return tv_list(r, 0);
    struct tlist *l = titer(r, in);
    struct tv out = tv_list(r, l->n);
    int ti = use_attr ? 1 : 0;
    if (use_attr && nargs < 1)
        tfail(r, CERR_FORMAT, "missing parameter for attribute name");
    for (size_t i = 0; i < l->n; i++) {
        struct tv x = use_attr ? attr_path(r, l->v[i], args[0]) : l->v[i];
        int ok;
        if (nargs > ti) {
            struct tv tn = need_str(r, args[ti]);
            ok = ttest_apply(r, tn.u.s.p, x, args + ti + 1, nargs - ti - 1);
        } else {
            ok = tv_truthy(x);
        }
        if (ok == keep)
            tlist_push(r, out.u.l, l->v[i]);
    }
    return out;
}

static struct tv do_map(struct rctx *r, struct tv in, struct tv *args, int nargs, const char **kwn,
                        struct tv *kwv, int nkw)
{
    if (!tv_truthy(in))
        return tv_list(r, 0);
    struct tlist *l = titer(r, in);
    struct tv out = tv_list(r, l->n);
    struct tv *attr = targ(NULL, 0, kwn, kwv, nkw, -1, "attribute");
    struct tv *def = targ(NULL, 0, kwn, kwv, nkw, -1, "default");
    for (size_t i = 0; i < l->n; i++) {
        struct tv x;
        if (attr) {
            x = attr_path(r, l->v[i], *attr);
            if (x.t == TV_UNDEF && def)
                x = *def;
        } else {
            if (nargs < 1)
                tfail(r, CERR_FORMAT, "map requires a filter argument");
            struct tv fn = need_str(r, args[0]);
            x = tfilter_apply(r, fn.u.s.p, l->v[i], args + 1, nargs - 1, kwn, kwv, nkw);
        }
        tlist_push(r, out.u.l, x);
    }
    return out;
}

static struct tv do_sort(struct rctx *r, struct tv in, int rev, int cs, struct tv *attr)
{
    struct tv out = list_copy(r, titer(r, in));
    size_t n = out.u.l->n;
    struct tv *keys = ralloc(r, (n + 1) * sizeof *keys);
    for (size_t i = 0; i < n; i++)
        keys[i] = lower_if(r, attr ? attr_path(r, out.u.l->v[i], *attr) : out.u.l->v[i], cs);
    msort(r, out.u.l->v, keys, n, rev);
    return out;
}

static struct tv do_dictsort(struct rctx *r, struct tv in, int cs, struct tv *by, int rev)
{
    struct tv items = items_of(r, in);
    int by_value = 0;
    if (by) {
        struct tv b = need_str(r, *by);
        if (!strcmp(b.u.s.p, "value"))
            by_value = 1;
        else if (strcmp(b.u.s.p, "key") != 0)
            tfail(r, CERR_FORMAT, "You can only sort by either \"key\" or \"value\"");
    }
    size_t n = items.u.l->n;
    struct tv *keys = ralloc(r, (n + 1) * sizeof *keys);
    for (size_t i = 0; i < n; i++)
        keys[i] = lower_if(r, items.u.l->v[i].u.l->v[by_value], cs);
    msort(r, items.u.l->v, keys, n, rev);
    return items;
}

static struct tv do_unique(struct rctx *r, struct tv in, int cs, struct tv *attr)
{
    struct tlist *l = titer(r, in);
    struct tv out = tv_list(r, l->n), seen = tv_list(r, l->n);
    for (size_t i = 0; i < l->n; i++) {
        struct tv k = lower_if(r, attr ? attr_path(r, l->v[i], *attr) : l->v[i], cs);
        if ((k.t == TV_LIST && !(k.flags & TVF_TUPLE)) || k.t == TV_DICT)
            tfail(r, CERR_FORMAT, "unhashable type: '%s'", tv_typename(k));
        int dup = 0;
        for (size_t j = 0; j < seen.u.l->n && !dup; j++)
            dup = tv_eq(seen.u.l->v[j], k);
        if (!dup) {
            tlist_push(r, seen.u.l, k);
            tlist_push(r, out.u.l, l->v[i]);
        }
    }
    return out;
}

static struct tv to_int(struct rctx *r, struct tv v, int64_t def)
{
    switch (v.t) {
    case TV_INT:
    case TV_BOOL:
        return tv_int(v.u.i);
    case TV_FLOAT:
        if (isnan(v.u.f) || isinf(v.u.f) || fabs(v.u.f) > 9.2e18)
            return tv_int(def);
        return tv_int((int64_t)v.u.f);
    case TV_STR: {
        struct tv s = tstr_strip(r, v, NULL, 1, 1);
        char buf[128];
        if (!s.u.s.n || s.u.s.n >= sizeof buf)
            return tv_int(def);
        size_t o = 0;
        for (size_t i = 0; i < s.u.s.n; i++)
            if (s.u.s.p[i] != '_')
                buf[o++] = s.u.s.p[i];
        buf[o] = 0;
        char *end;
        long long x = strtoll(buf, &end, 10);
        if (*end == 0)
            return tv_int(x);
        double f = strtod(buf, &end);
        if (*end == 0 && !isnan(f) && !isinf(f) && fabs(f) < 9.2e18)
            return tv_int((int64_t)f);
        return tv_int(def);
    }
    default:
        return tv_int(def);
    }
}

static struct tv to_float(struct rctx *r, struct tv v, double def)
{
    if (tv_is_num(v))
        return tv_float(tv_num(v));
    if (v.t == TV_STR) {
        struct tv s = tstr_strip(r, v, NULL, 1, 1);
        char buf[128];
        if (!s.u.s.n || s.u.s.n >= sizeof buf)
            return tv_float(def);
        memcpy(buf, s.u.s.p, s.u.s.n);
        buf[s.u.s.n] = 0;
        char *end;
        double f = strtod(buf, &end);
        if (*end == 0)
            return tv_float(f);
    }
    return tv_float(def);
}

static struct tv do_round(struct rctx *r, struct tv v, int64_t prec, const char *method)
{
    if (!tv_is_num(v))
        tfail(r, CERR_FORMAT, "round() needs a number, got '%s'", tv_typename(v));
    if (v.t != TV_FLOAT && !strcmp(method, "common"))
        return tv_int(v.u.i);
    double x = tv_num(v), m = pow(10.0, (double)prec);
    double y;
    if (!strcmp(method, "common"))
        y = nearbyint(x * m) / m;
    else if (!strcmp(method, "ceil"))
        y = ceil(x * m) / m;
    else if (!strcmp(method, "floor"))
        y = floor(x * m) / m;
    else
        tfail(r, CERR_FORMAT, "method must be common, ceil or floor");
    return tv_float(y);
}

static struct tv do_escape(struct rctx *r, struct tv s)
{
    s = need_str(r, s);
    struct tbuf o = {0};
    tbuf_put(r, &o, "", 0);
    for (size_t i = 0; i < s.u.s.n; i++) {
        char c = s.u.s.p[i];
        switch (c) {
        case '&': tbuf_puts(r, &o, "&amp;"); break;
        case '<': tbuf_puts(r, &o, "&lt;"); break;
        case '>': tbuf_puts(r, &o, "&gt;"); break;
        case '"': tbuf_puts(r, &o, "&#34;"); break;
        case '\'': tbuf_puts(r, &o, "&#39;"); break;
        default: tbuf_putc(r, &o, c);
        }
    }
    return tv_str(o.p, o.n);
}

static struct tv minmax(struct rctx *r, struct tv in, int want_max, int cs, struct tv *attr)
{
    struct tlist *l = titer(r, in);
    if (!l->n)
        return tv_undef("No aggregated item, sequence was empty.");
    size_t best = 0;
    struct tv bk = lower_if(r, attr ? attr_path(r, l->v[0], *attr) : l->v[0], cs);
    for (size_t i = 1; i < l->n; i++) {
        struct tv k = lower_if(r, attr ? attr_path(r, l->v[i], *attr) : l->v[i], cs);
        int c = tv_cmp(r, k, bk);
        if (want_max ? c > 0 : c < 0) {
            best = i;
            bk = k;
        }
    }
    return l->v[best];
}

static const char *const g_filters[] = {
    "trim", "tojson", "length", "count", "string", "lower", "upper", "title", "capitalize",
    "replace", "join", "first", "last", "list", "map", "select", "reject", "selectattr",
    "rejectattr", "items", "default", "d", "indent", "int", "float", "round", "unique",
    "dictsort", "abs", "safe", "e", "escape", "sort", "reverse", "sum", "min", "max",
    "wordcount", "center", "format", "striptags", "batch", "bool", "forceescape", NULL};

int tfilter_exists(const char *name)
{
    for (int i = 0; g_filters[i]; i++)
        if (!strcmp(g_filters[i], name))
            return 1;
    return 0;
}

struct tv tfilter_apply(struct rctx *r, const char *name, struct tv in, struct tv *args, int nargs,
                        const char **kwn, struct tv *kwv, int nkw)
{
#define A(pos, nm) targ(args, nargs, kwn, kwv, nkw, pos, nm)
    if (!strcmp(name, "default") || !strcmp(name, "d")) {
        struct tv *dv = A(0, "default_value");
        int boolean = arg_bool(A(1, "boolean"), 0);
        if (in.t == TV_UNDEF || (boolean && !tv_truthy(in)))
            return dv ? *dv : tv_str("", 0);
        return in;
    }
    if (!strcmp(name, "length") || !strcmp(name, "count"))
        return length_of(r, in);
    if (!strcmp(name, "list")) {
        if (in.t == TV_LIST && !(in.flags & TVF_TUPLE))
            return list_copy(r, in.u.l);
        return list_copy(r, titer(r, in));
    }
    if (!strcmp(name, "first") || !strcmp(name, "last")) {
        struct tlist *l = titer(r, in);
        if (!l->n)
            return tv_undef(name[0] == 'f' ? "No first item, sequence was empty." : "No last item, sequence was empty.");
        return name[0] == 'f' ? l->v[0] : l->v[l->n - 1];
    }
    if (!strcmp(name, "items"))
        return items_of(r, in);
    if (!strcmp(name, "tojson")) {
        struct tv *ind = A(0, "indent");
        char ibuf[64];
        const char *indent = NULL;
        if (ind && ind->t == TV_STR)
            indent = need_str(r, *ind).u.s.p;
        else if (ind && ind->t != TV_NONE) {
            int64_t w = arg_int(r, ind, 0);
            if (w < 0)
                w = 0;
            if (w > 63)
                w = 63;
            memset(ibuf, ' ', (size_t)w);
            ibuf[w] = 0;
            indent = ibuf;
        }
        struct tv *sep = A(2, "separators");
        const char *isep = NULL, *ksep = NULL;
        if (sep && sep->t == TV_LIST && sep->u.l->n == 2) {
            isep = need_str(r, sep->u.l->v[0]).u.s.p;
            ksep = need_str(r, sep->u.l->v[1]).u.s.p;
        }
        struct tbuf o = {0};
        tbuf_put(r, &o, "", 0);
        tv_tojson(r, &o, in, arg_bool(A(1, "ensure_ascii"), 0), indent, isep, ksep,
                  arg_bool(A(3, "sort_keys"), 0));
        return tv_str(o.p, o.n);
    }
    if (!strcmp(name, "map"))
        return do_map(r, in, args, nargs, kwn, kwv, nkw);
    if (!strcmp(name, "select") || !strcmp(name, "reject"))
        return select_like(r, in, args, nargs, 0, name[0] == 's');
    if (!strcmp(name, "selectattr") || !strcmp(name, "rejectattr"))
        return select_like(r, in, args, nargs, 1, name[0] == 's');
    if (!strcmp(name, "join"))
        return do_join(r, in, A(0, "d"), A(1, "attribute"));
    if (in.t == TV_UNDEF && (!strcmp(name, "int") || !strcmp(name, "float") ||
                             !strcmp(name, "dictsort") || !strcmp(name, "indent") ||
                             !strcmp(name, "round") || !strcmp(name, "abs")))
        tfail(r, CERR_FORMAT, "%s", in.u.s.p && in.u.s.n ? in.u.s.p : "undefined value");
    if (!strcmp(name, "indent") && in.t != TV_STR)
        tfail(r, CERR_FORMAT, "indent needs a string, got '%s'", tv_typename(in));
    if (!strcmp(name, "int")) {
        struct tv *b = A(1, "base");
        if (b && arg_int(r, b, 10) != 10)
            tfail(r, CERR_UNSUPPORTED, "int filter: only base 10 is supported");
        return to_int(r, in, arg_int(r, A(0, "default"), 0));
    }
    if (!strcmp(name, "float")) {
        struct tv *d = A(0, "default");
        return to_float(r, in, d ? tv_num(to_float(r, *d, 0.0)) : 0.0);
    }
    if (!strcmp(name, "bool"))
        return tv_bool(tv_truthy(in));
    if (!strcmp(name, "round")) {
        struct tv *m = A(1, "method");
        return do_round(r, in, arg_int(r, A(0, "precision"), 0), m ? need_str(r, *m).u.s.p : "common");
    }
    if (!strcmp(name, "abs")) {
        if (in.t == TV_FLOAT)
            return tv_float(fabs(in.u.f));
        if (in.t == TV_INT || in.t == TV_BOOL)
            return tv_int(in.u.i < 0 ? (in.u.i == INT64_MIN ? in.u.i : -in.u.i) : in.u.i);
        tfail(r, CERR_FORMAT, "bad operand type for abs(): '%s'", tv_typename(in));
    }
    if (!strcmp(name, "unique"))
        return do_unique(r, in, arg_bool(A(0, "case_sensitive"), 0), A(1, "attribute"));
    if (!strcmp(name, "dictsort"))
        return do_dictsort(r, in, arg_bool(A(0, "case_sensitive"), 0), A(1, "by"),
                           arg_bool(A(2, "reverse"), 0));
    if (!strcmp(name, "sort"))
        return do_sort(r, in, arg_bool(A(0, "reverse"), 0), arg_bool(A(1, "case_sensitive"), 0),
                       A(2, "attribute"));
    if (!strcmp(name, "reverse")) {
        if (in.t == TV_STR) {
            struct tv m1 = tv_int(-1);
            (void)m1;
            struct tlist *cs = titer(r, in);
            struct tbuf o = {0};
            tbuf_put(r, &o, "", 0);
            for (size_t i = cs->n; i > 0; i--)
                tbuf_put(r, &o, cs->v[i - 1].u.s.p, cs->v[i - 1].u.s.n);
            return tv_str(o.p, o.n);
        }
        struct tlist *l = titer(r, in);
        struct tv out = tv_list(r, l->n);
        for (size_t i = l->n; i > 0; i--)
            tlist_push(r, out.u.l, l->v[i - 1]);
        return out;
    }
    if (!strcmp(name, "sum")) {
        struct tv *attr = A(0, "attribute"), *st = A(1, "start");
        struct tv acc = st ? *st : tv_int(0);
        struct tlist *l = titer(r, in);
        for (size_t i = 0; i < l->n; i++) {
            struct tv x = attr ? attr_path(r, l->v[i], *attr) : l->v[i];
            if (!tv_is_num(x) || !tv_is_num(acc))
                tfail(r, CERR_FORMAT, "unsupported operand type(s) for +: '%s' and '%s'",
                      tv_typename(acc), tv_typename(x));
            if (acc.t != TV_FLOAT && x.t != TV_FLOAT) {
                int64_t z;
                if (__builtin_add_overflow(acc.u.i, x.u.i, &z))
                    tfail(r, CERR_LIMIT, "integer overflow");
                acc = tv_int(z);
            } else {
                acc = tv_float(tv_num(acc) + tv_num(x));
            }
        }
        return acc;
    }
    if (!strcmp(name, "min") || !strcmp(name, "max"))
        return minmax(r, in, name[1] == 'a', arg_bool(A(0, "case_sensitive"), 0), A(1, "attribute"));
    if (!strcmp(name, "safe"))
        return in;
    if (!strcmp(name, "batch")) {
        int64_t k = arg_int(r, A(0, "linecount"), 1);
        struct tv *fill = A(1, "fill_with");
        if (k <= 0)
            tfail(r, CERR_FORMAT, "batch size must be positive");
        struct tlist *l = titer(r, in);
        struct tv out = tv_list(r, 0), cur = tv_list(r, 0);
        for (size_t i = 0; i < l->n; i++) {
            tlist_push(r, cur.u.l, l->v[i]);
            if ((int64_t)cur.u.l->n == k) {
                tlist_push(r, out.u.l, cur);
                cur = tv_list(r, 0);
            }
        }
        if (cur.u.l->n) {
            while (fill && (int64_t)cur.u.l->n < k)
                tlist_push(r, cur.u.l, *fill);
            tlist_push(r, out.u.l, cur);
        }
        return out;
    }
    /* string filters (input converted with str()) */
    struct tv s = need_str(r, in);
    if (!strcmp(name, "trim")) {
        struct tv *ch = A(0, "chars");
        return tstr_strip(r, s, (ch && ch->t != TV_NONE) ? ch : NULL, 1, 1);
    }
    if (!strcmp(name, "string"))
        return s;
    if (!strcmp(name, "lower"))
        return tstr_case(r, s, 0);
    if (!strcmp(name, "upper"))
        return tstr_case(r, s, 1);
    if (!strcmp(name, "title"))
        return do_title(r, s);
    if (!strcmp(name, "capitalize"))
        return do_capitalize(r, s);
    if (!strcmp(name, "replace")) {
        struct tv *o = A(0, "old"), *nw = A(1, "new");
        if (!o || !nw)
            tfail(r, CERR_FORMAT, "replace() needs old and new");
        struct tv *c = A(2, "count");
        return do_replace(r, s, *o, *nw, (c && c->t != TV_NONE) ? arg_int(r, c, -1) : -1);
    }
    if (!strcmp(name, "indent"))
        return do_indent(r, s, A(0, "width"), arg_bool(A(1, "first"), 0), arg_bool(A(2, "blank"), 0));
    if (!strcmp(name, "e") || !strcmp(name, "escape") || !strcmp(name, "forceescape"))
        return do_escape(r, s);
    if (!strcmp(name, "wordcount")) {
        int64_t c = 0;
        int in_word = 0;
        for (size_t i = 0; i < s.u.s.n; i++) {
            char ch = s.u.s.p[i];
            int w = (ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z') || (ch >= '0' && ch <= '9') ||
                    ch == '_' || (unsigned char)ch >= 0x80;
            if (w && !in_word)
                c++;
            in_word = w;
        }
        return tv_int(c);
    }
    if (!strcmp(name, "center")) {
        int64_t w = arg_int(r, A(0, "width"), 80);
        int64_t len = (int64_t)u8_len(s.u.s.p, s.u.s.n);
        if (w > 100000)
            tfail(r, CERR_LIMIT, "center width too large");
        if (w <= len)
            return s;
        int64_t pad = w - len, left = pad / 2 + (pad & w & 1);
        struct tbuf o = {0};
        for (int64_t i = 0; i < left; i++)
            tbuf_putc(r, &o, ' ');
        tbuf_put(r, &o, s.u.s.p, s.u.s.n);
        for (int64_t i = 0; i < pad - left; i++)
            tbuf_putc(r, &o, ' ');
        return tv_str(o.p, o.n);
    }
    if (!strcmp(name, "format")) {
        struct tv tup = tv_list(r, (size_t)nargs);
        tup.flags = TVF_TUPLE;
        for (int i = 0; i < nargs; i++)
            tlist_push(r, tup.u.l, args[i]);
        struct tv *fmt_args = &tup;
        (void)fmt_args;
        /* "fmt" % tuple, via the evaluator's % operator semantics */
        struct tbuf o = {0};
        tbuf_put(r, &o, "", 0);
        size_t ai = 0;
        for (size_t i = 0; i < s.u.s.n; i++) {
            if (s.u.s.p[i] != '%' || i + 1 >= s.u.s.n) {
                tbuf_putc(r, &o, s.u.s.p[i]);
                continue;
            }
            char c = s.u.s.p[++i];
            if (c == '%')
                tbuf_putc(r, &o, '%');
            else if (ai < (size_t)nargs && (c == 's' || c == 'd'))
                tv_str_into(r, &o, c == 'd' ? to_int(r, args[ai++], 0) : args[ai++]);
            else
                tfail(r, CERR_FORMAT, "format: unsupported or missing argument for %%%c", c);
        }
        return tv_str(o.p, o.n);
    }
    if (!strcmp(name, "striptags"))
        return s;
#undef A
    static const char *const jinja_only[] = {"attr", "filesizeformat", "groupby", "pprint", "random",
                                             "slice", "truncate", "urlencode", "urlize", "wordwrap",
                                             "xmlattr", NULL};
    for (int i = 0; jinja_only[i]; i++)
        if (!strcmp(jinja_only[i], name))
            tfail(r, CERR_UNSUPPORTED, "filter '%s' is not supported by cinfer's template engine", name);
    tfail(r, CERR_FORMAT, "No filter named '%s'.", name);
}

/* ---- tests ---- */

static const char *const g_tests[] = {
    "defined", "undefined", "none", "string", "number", "integer", "float", "mapping",
    "iterable", "sequence", "boolean", "true", "false", "callable", "eq", "equalto", "==",
    "ne", "!=", "lt", "lessthan", "<", "gt", "greaterthan", ">", "le", "<=", "ge", ">=",
    "in", "odd", "even", "divisibleby", "lower", "upper", "sameas", "escaped", "filter",
    "test", NULL};

int ttest_exists(const char *name)
{
    for (int i = 0; g_tests[i]; i++)
        if (!strcmp(g_tests[i], name))
            return 1;
    return 0;
}

int ttest_apply(struct rctx *r, const char *name, struct tv v, struct tv *args, int nargs)
{
    struct tv a = nargs > 0 ? args[0] : tv_undef(NULL);
    if (!strcmp(name, "defined"))
        return v.t != TV_UNDEF;
    if (!strcmp(name, "undefined"))
        return v.t == TV_UNDEF;
    if (!strcmp(name, "none"))
        return v.t == TV_NONE;
    if (!strcmp(name, "string"))
        return v.t == TV_STR;
    if (!strcmp(name, "number"))
        return tv_is_num(v);
    if (!strcmp(name, "integer"))
        return v.t == TV_INT;
    if (!strcmp(name, "float"))
        return v.t == TV_FLOAT;
    if (!strcmp(name, "boolean"))
        return v.t == TV_BOOL;
    if (!strcmp(name, "true"))
        return v.t == TV_BOOL && v.u.i;
    if (!strcmp(name, "false"))
        return v.t == TV_BOOL && !v.u.i;
    if (!strcmp(name, "mapping"))
        return v.t == TV_DICT;
    if (!strcmp(name, "iterable"))
        return v.t == TV_LIST || v.t == TV_DICT || v.t == TV_STR || v.t == TV_UNDEF;
    if (!strcmp(name, "sequence"))
        return v.t == TV_LIST || v.t == TV_DICT || v.t == TV_STR || v.t == TV_UNDEF;
    if (!strcmp(name, "callable")) /* jinja2's Undefined defines __call__ */
        return v.t == TV_MACRO || v.t == TV_FUNC || v.t == TV_UNDEF;
    if (!strcmp(name, "escaped"))
        return 0;
    if (!strcmp(name, "filter") || !strcmp(name, "test")) {
        if (a.t != TV_STR)
            return 0;
        return name[0] == 'f' ? tfilter_exists(a.u.s.p) : ttest_exists(a.u.s.p);
    }
    if (!strcmp(name, "eq") || !strcmp(name, "equalto") || !strcmp(name, "=="))
        return tv_eq(v, a);
    if (!strcmp(name, "ne") || !strcmp(name, "!="))
        return !tv_eq(v, a);
    if (!strcmp(name, "sameas")) {
        if (v.t != a.t)
            return 0;
        if (v.t == TV_LIST || v.t == TV_DICT || v.t == TV_NS)
            return v.u.d == a.u.d;
        return tv_eq(v, a);
    }
    if (!strcmp(name, "in")) {
        if (a.t == TV_STR) {
            if (v.t != TV_STR)
                tfail(r, CERR_FORMAT, "'in <string>' requires string as left operand");
            return v.u.s.n == 0 || memmem(a.u.s.p, a.u.s.n, v.u.s.p, v.u.s.n) != NULL;
        }
        if (a.t == TV_DICT)
            return tdict_get(a.u.d, v) != NULL;
        struct tlist *l = titer(r, a);
        for (size_t i = 0; i < l->n; i++)
            if (tv_eq(l->v[i], v))
                return 1;
        return 0;
    }
    if ((!strcmp(name, "odd") || !strcmp(name, "even")) && v.t == TV_FLOAT) {
        double m = fmod(v.u.f, 2.0);
        if (m < 0)
            m += 2.0;
        return name[0] == 'o' ? m == 1.0 : m == 0.0;
    }
    if (!strcmp(name, "odd") || !strcmp(name, "even") || !strcmp(name, "divisibleby")) {
        if (v.t != TV_INT && v.t != TV_BOOL)
            tfail(r, CERR_FORMAT, "test '%s' needs an integer, got '%s'", name, tv_typename(v));
        if (name[0] == 'o')
            return (v.u.i & 1) != 0;
        if (name[0] == 'e')
            return (v.u.i & 1) == 0;
        if ((a.t != TV_INT && a.t != TV_BOOL) || a.u.i == 0)
            tfail(r, CERR_FORMAT, "divisibleby needs a non-zero integer");
        return a.u.i == -1 || v.u.i % a.u.i == 0;
    }
    if (!strcmp(name, "lower") || !strcmp(name, "upper")) {
        struct tv s = tv_to_str(r, v);
        struct tv c = tstr_case(r, s, name[0] == 'u');
        int cased = 0;
        for (size_t i = 0; i < s.u.s.n; i++) {
            char ch = s.u.s.p[i];
            cased |= (ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z');
        }
        return cased && c.u.s.n == s.u.s.n && memcmp(c.u.s.p, s.u.s.p, s.u.s.n) == 0;
    }
    if (tv_is_num(v) || v.t == TV_STR || v.t == TV_LIST) {
        int c;
        if (!strcmp(name, "lt") || !strcmp(name, "lessthan") || !strcmp(name, "<")) {
            c = tv_cmp(r, v, a);
            return c < 0;
        }
        if (!strcmp(name, "gt") || !strcmp(name, "greaterthan") || !strcmp(name, ">"))
            return tv_cmp(r, v, a) > 0;
        if (!strcmp(name, "le") || !strcmp(name, "<="))
            return tv_cmp(r, v, a) <= 0;
        if (!strcmp(name, "ge") || !strcmp(name, ">="))
            return tv_cmp(r, v, a) >= 0;
    }
    if (ttest_exists(name))
        tfail(r, CERR_FORMAT, "test '%s' cannot compare '%s'", name, tv_typename(v));
    tfail(r, CERR_FORMAT, "No test named '%s'.", name);
}
