/* tmpl_ops.c — the template operators with Python semantics.
 *
 * Arithmetic (+ - * / // % ** on ints with overflow checks and on floats exactly as
 * CPython's float_divmod), sequence concatenation and repetition, printf-style
 * `str % args` (flags, width, precision, *, %(key)s), membership (`in`) and comparisons.
 * Every failure is a template error through tfail(); nothing here allocates outside the
 * render arena.
 */
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "template/tmpl_int.h"

static int64_t iadd(struct rctx *r, int64_t x, int64_t y)
{
    int64_t z;
    if (__builtin_add_overflow(x, y, &z))
        tfail(r, CERR_LIMIT, "integer overflow");
    return z;
}

int64_t top_isub(struct rctx *r, int64_t x, int64_t y)
{
    int64_t z;
    if (__builtin_sub_overflow(x, y, &z))
        tfail(r, CERR_LIMIT, "integer overflow");
    return z;
}

static int64_t imul(struct rctx *r, int64_t x, int64_t y)
{
    int64_t z;
    if (__builtin_mul_overflow(x, y, &z))
        tfail(r, CERR_LIMIT, "integer overflow");
    return z;
}

static struct tv repeat(struct rctx *r, struct tv seq, int64_t k)
{
    if (k < 0)
        k = 0;
    if (seq.t == TV_STR) {
        if (seq.u.s.n && (uint64_t)k > r->mem_cap / seq.u.s.n)
            tfail(r, CERR_LIMIT, "string repetition too large");
        struct tbuf b = {0};
        tbuf_put(r, &b, "", 0);
        for (int64_t i = 0; i < k; i++)
            tbuf_put(r, &b, seq.u.s.p, seq.u.s.n);
        return tv_str(b.p ? b.p : "", b.n);
    }
    if (seq.u.l->n && (uint64_t)k > (r->mem_cap / sizeof(struct tv)) / seq.u.l->n)
        tfail(r, CERR_LIMIT, "list repetition too large");
    struct tv out = tv_list(r, seq.u.l->n * (size_t)k);
    out.flags = seq.flags & TVF_TUPLE;
    for (int64_t i = 0; i < k; i++)
        for (size_t j = 0; j < seq.u.l->n; j++)
            tlist_push(r, out.u.l, seq.u.l->v[j]);
    return out;
}

/* Pads/truncates a str() for %s/%r: precision cuts code points, width pads with spaces. */
static void put_padded(struct rctx *r, struct tbuf *b, struct tv sv, int left, long width, long prec)
{
    size_t n = sv.u.s.n;
    if (prec >= 0)
        n = u8_offset(sv.u.s.p, sv.u.s.n, (size_t)prec);
    long cps = (long)u8_len(sv.u.s.p, n);
    if (!left)
        for (long i = cps; i < width; i++)
            tbuf_putc(r, b, ' ');
    tbuf_put(r, b, sv.u.s.p, n);
    if (left)
        for (long i = cps; i < width; i++)
            tbuf_putc(r, b, ' ');
}

/* Python's printf-style `str % args`: %(key)s mapping keys, flags -+ #0, width and
 * precision (numbers or *), conversions s r a d i u f F e E g G x X o c %. */
static struct tv str_format(struct rctx *r, struct tv fmt, struct tv argv)
{
    struct tlist one = {&argv, 1, 1};
    int is_tuple = argv.t == TV_LIST && (argv.flags & TVF_TUPLE);
    const struct tlist *args = is_tuple ? argv.u.l : &one;
    size_t ai = 0;
    int used_mapping = 0;
    struct tbuf b = {0};
    tbuf_put(r, &b, "", 0);
    const char *p = fmt.u.s.p;
    size_t n = fmt.u.s.n;
    for (size_t i = 0; i < n; i++) {
        if (p[i] != '%') {
            tbuf_putc(r, &b, p[i]);
            continue;
        }
        if (++i >= n)
            tfail(r, CERR_FORMAT, "incomplete format");
        struct tv a = {0};
        int have = 0;
        if (p[i] == '(') {
            const char *close = memchr(p + i, ')', n - i);
            if (!close)
                tfail(r, CERR_FORMAT, "incomplete format key");
            if (argv.t != TV_DICT)
                tfail(r, CERR_FORMAT, "format requires a mapping");
            struct tv *v = tdict_gets(argv.u.d, p + i + 1, (size_t)(close - (p + i + 1)));
            if (!v)
                tfail(r, CERR_FORMAT, "format key not found");
            a = *v;
            have = used_mapping = 1;
            i = (size_t)(close - p) + 1;
        }
        char flags[8];
        int nf = 0, left = 0;
        while (i < n && strchr("-+ #0", p[i]) && nf < 6) {
            left |= p[i] == '-';
            flags[nf++] = p[i++];
        }
        flags[nf] = 0;
        long width = -1, prec = -1;
        for (int part = 0; part < 2; part++) {
            long *dst = part ? &prec : &width;
            if (part) {
                if (i >= n || p[i] != '.')
                    break;
                i++;
                prec = 0;
            }
            if (i < n && p[i] == '*') {
                if (ai >= args->n || (args->v[ai].t != TV_INT && args->v[ai].t != TV_BOOL))
                    tfail(r, CERR_FORMAT, "* wants int");
                int64_t sv = args->v[ai++].u.i;
                if (sv < -10000 || sv > 10000)
                    tfail(r, CERR_LIMIT, "format width/precision too large");
                if (!part && sv < 0) { /* a negative * width left-justifies */
                    left = 1;
                    sv = -sv;
                    flags[nf++] = '-';
                    flags[nf] = 0;
                }
                *dst = sv < 0 ? -1 : (long)sv;
                i++;
            } else {
                while (i < n && p[i] >= '0' && p[i] <= '9') {
                    *dst = (*dst < 0 ? 0 : *dst) * 10 + (p[i++] - '0');
                    if (*dst > 10000)
                        tfail(r, CERR_LIMIT, "format width/precision too large");
                }
            }
        }
        while (i < n && (p[i] == 'h' || p[i] == 'l' || p[i] == 'L'))
            i++;
        if (i >= n)
            tfail(r, CERR_FORMAT, "incomplete format");
        char c = p[i];
        if (c == '%') {
            tbuf_putc(r, &b, '%');
            continue;
        }
        if (!have) {
            if (ai >= args->n)
                tfail(r, CERR_FORMAT, "not enough arguments for format string");
            a = args->v[ai++];
        }
        char cf[32], num[512];
        if (c == 's' || c == 'r' || c == 'a') {
            struct tbuf sb = {0};
            tbuf_put(r, &sb, "", 0);
            if (c == 's')
                tv_str_into(r, &sb, a);
            else
                tv_repr_into(r, &sb, a);
            put_padded(r, &b, tv_str(sb.p, sb.n), left, width, prec);
        } else if (strchr("diuxXo", c)) {
            if (!tv_is_num(a) || (a.t == TV_FLOAT && strchr("xXo", c)))
                tfail(r, CERR_FORMAT, "%%%c format: a real number is required, not %s", c, tv_typename(a));
            if (a.t == TV_FLOAT && !(fabs(a.u.f) < 9.2e18))
                tfail(r, CERR_FORMAT, "%%%c format: number out of range", c);
            int64_t iv = a.t == TV_FLOAT ? (int64_t)a.u.f : a.u.i;
            if (strchr("xXo", c)) {
                /* Python: sign, then 0x/0X/0o with '#', then digits of |value| */
                uint64_t mag = iv < 0 ? (uint64_t)(-(iv + 1)) + 1 : (uint64_t)iv;
                char digits[64], pre[8];
                snprintf(digits, sizeof digits, c == 'x' ? "%" PRIx64 : c == 'X' ? "%" PRIX64 : "%" PRIo64, mag);
                size_t np = 0;
                pre[np++] = iv < 0 ? '-' : strchr(flags, '+') ? '+' : strchr(flags, ' ') ? ' ' : 0;
                if (!pre[0])
                    np = 0;
                if (strchr(flags, '#')) {
                    pre[np++] = '0';
                    pre[np++] = c == 'o' ? 'o' : c;
                }
                long nd = (long)strlen(digits), zeros = prec > nd ? prec - nd : 0;
                long total = (long)np + zeros + nd;
                int zero_pad = strchr(flags, '0') && !left && prec < 0;
                if (!left && !zero_pad)
                    for (long k = total; k < width; k++)
                        tbuf_putc(r, &b, ' ');
                tbuf_put(r, &b, pre, np);
                if (zero_pad)
                    for (long k = total; k < width; k++)
                        tbuf_putc(r, &b, '0');
                for (long k = 0; k < zeros; k++)
                    tbuf_putc(r, &b, '0');
                tbuf_puts(r, &b, digits);
                if (left)
                    for (long k = total; k < width; k++)
                        tbuf_putc(r, &b, ' ');
            } else {
                for (char *q = flags; (q = strchr(q, '#')) != NULL;) /* UB in C, ignored by Python */
                    memmove(q, q + 1, strlen(q));
                if (prec < 0) {
                    snprintf(cf, sizeof cf, "%%%s*%s", flags, PRId64);
                    snprintf(num, sizeof num, cf, (int)(width < 0 ? 0 : width), iv);
                } else {
                    snprintf(cf, sizeof cf, "%%%s*.*%s", flags, PRId64);
                    snprintf(num, sizeof num, cf, (int)(width < 0 ? 0 : width), (int)prec, iv);
                }
                tbuf_puts(r, &b, num);
            }
        } else if (strchr("fFeEgG", c)) {
            if (!tv_is_num(a))
                tfail(r, CERR_FORMAT, "must be real number, not %s", tv_typename(a));
            snprintf(cf, sizeof cf, "%%%s*.*%c", flags, c);
            snprintf(num, sizeof num, cf, (int)(width < 0 ? 0 : width), (int)(prec < 0 ? 6 : prec), tv_num(a));
            tbuf_puts(r, &b, num);
        } else if (c == 'c') {
            char enc[8];
            size_t k;
            if ((a.t == TV_INT || a.t == TV_BOOL) && a.u.i >= 0 && a.u.i <= 0x10FFFF)
                k = u8_encode(enc, (int32_t)a.u.i);
            else if (a.t == TV_STR && u8_len(a.u.s.p, a.u.s.n) == 1 && a.u.s.n < sizeof enc)
                memcpy(enc, a.u.s.p, k = a.u.s.n);
            else
                tfail(r, CERR_FORMAT, "%%c requires an int or a single character");
            put_padded(r, &b, tv_str(enc, k), left, width, -1);
        } else {
            tfail(r, CERR_FORMAT, "unsupported format character '%c'", c);
        }
    }
    int mapping_like = argv.t == TV_DICT || argv.t == TV_UNDEF ||
                       (argv.t == TV_LIST && !(argv.flags & TVF_TUPLE));
    if (ai < args->n && !(mapping_like && ai == 0) && !used_mapping)
        tfail(r, CERR_FORMAT, "not all arguments converted during string formatting");
    return tv_str(b.p, b.n);
}

/* CPython's float // and % (Objects/floatobject.c float_divmod). */
static double py_fmod(double x, double y)
{
    double mod = fmod(x, y);
    if (mod != 0.0) {
        if ((y < 0) != (mod < 0))
            mod += y;
    } else {
        mod = copysign(0.0, y);
    }
    return mod;
}

static double py_floordiv(double x, double y)
{
    double mod = fmod(x, y), div = (x - mod) / y;
    if (mod != 0.0 && (y < 0) != (mod < 0))
        div -= 1.0;
    if (div == 0.0)
        return copysign(0.0, x / y);
    double fl = floor(div);
    if (div - fl > 0.5)
        fl += 1.0;
    return fl;
}

struct tv top_binary(struct rctx *r, const char *op, struct tv a, struct tv b)
{
    if (a.t == TV_UNDEF)
        tundef_fail(r, a);
    if (b.t == TV_UNDEF && !(a.t == TV_STR && op[0] == '%'))
        tundef_fail(r, b);
    int num = tv_is_num(a) && tv_is_num(b);
    int ints = num && a.t != TV_FLOAT && b.t != TV_FLOAT;
    int64_t x = a.u.i, y = b.u.i;
    char c = op[0];
    if (c == '+') {
        if (ints)
            return tv_int(iadd(r, x, y));
        if (num)
            return tv_float(tv_num(a) + tv_num(b));
        if (a.t == TV_STR && b.t == TV_STR) {
            struct tbuf o = {0};
            tbuf_put(r, &o, "", 0);
            tbuf_put(r, &o, a.u.s.p, a.u.s.n);
            tbuf_put(r, &o, b.u.s.p, b.u.s.n);
            return tv_str(o.p, o.n);
        }
        if (a.t == TV_LIST && b.t == TV_LIST && (a.flags & TVF_TUPLE) == (b.flags & TVF_TUPLE)) {
            struct tv out = tv_list(r, a.u.l->n + b.u.l->n);
            out.flags = a.flags & TVF_TUPLE;
            for (size_t i = 0; i < a.u.l->n; i++)
                tlist_push(r, out.u.l, a.u.l->v[i]);
            for (size_t i = 0; i < b.u.l->n; i++)
                tlist_push(r, out.u.l, b.u.l->v[i]);
            return out;
        }
    } else if (c == '-' && num) {
        if (ints)
            return tv_int(top_isub(r, x, y));
        return tv_float(tv_num(a) - tv_num(b));
    } else if (c == '*' && op[1] == 0) {
        if (ints)
            return tv_int(imul(r, x, y));
        if (num)
            return tv_float(tv_num(a) * tv_num(b));
        if ((a.t == TV_STR || a.t == TV_LIST) && (b.t == TV_INT || b.t == TV_BOOL))
            return repeat(r, a, b.u.i);
        if ((b.t == TV_STR || b.t == TV_LIST) && (a.t == TV_INT || a.t == TV_BOOL))
            return repeat(r, b, a.u.i);
    } else if (c == '/' && op[1] == 0 && num) {
        if (tv_num(b) == 0.0)
            tfail(r, CERR_FORMAT, "division by zero");
        return tv_float(tv_num(a) / tv_num(b));
    } else if (c == '/' && num) {
        if (tv_num(b) == 0.0)
            tfail(r, CERR_FORMAT, "integer division or modulo by zero");
        if (ints) {
            if (x == INT64_MIN && y == -1)
                tfail(r, CERR_LIMIT, "integer overflow");
            int64_t q = x / y;
            if ((x % y != 0) && ((x < 0) != (y < 0)))
                q--;
            return tv_int(q);
        }
        return tv_float(py_floordiv(tv_num(a), tv_num(b)));
    } else if (c == '%') {
        if (a.t == TV_STR)
            return str_format(r, a, b);
        if (num) {
            if (tv_num(b) == 0.0)
                tfail(r, CERR_FORMAT, "integer division or modulo by zero");
            if (ints) {
                if (y == -1)
                    return tv_int(0);
                int64_t m = x % y;
                if (m != 0 && ((m < 0) != (y < 0)))
                    m += y;
                return tv_int(m);
            }
            return tv_float(py_fmod(tv_num(a), tv_num(b)));
        }
    } else if (c == '*' && num) {
        if (ints && y >= 0) {
            int64_t res = 1, base = x;
            int64_t e = y;
            while (e > 0) {
                if (e & 1)
                    res = imul(r, res, base);
                e >>= 1;
                if (e)
                    base = imul(r, base, base);
            }
            return tv_int(res);
        }
        if (tv_num(a) == 0.0 && tv_num(b) < 0)
            tfail(r, CERR_FORMAT, "0.0 cannot be raised to a negative power");
        if (tv_num(a) < 0 && tv_num(b) != floor(tv_num(b)))
            tfail(r, CERR_UNSUPPORTED, "complex results are not supported");
        double pw = pow(tv_num(a), tv_num(b));
        if (isinf(pw) && !isinf(tv_num(a)) && !isinf(tv_num(b)))
            tfail(r, CERR_FORMAT, "(34, 'Numerical result out of range')");
        return tv_float(pw);
    }
    tfail(r, CERR_FORMAT, "unsupported operand type(s) for %s: '%s' and '%s'", op, tv_typename(a),
          tv_typename(b));
}

static int contains(struct rctx *r, struct tv container, struct tv item)
{
    switch (container.t) {
    case TV_STR:
        if (item.t != TV_STR)
            tfail(r, CERR_FORMAT, "'in <string>' requires string as left operand, not %s",
                  tv_typename(item));
        if (!item.u.s.n)
            return 1;
        return memmem(container.u.s.p, container.u.s.n, item.u.s.p, item.u.s.n) != NULL;
    case TV_LIST:
        for (size_t i = 0; i < container.u.l->n; i++)
            if (tv_eq(container.u.l->v[i], item))
                return 1;
        return 0;
    case TV_DICT:
    case TV_NS:
        if ((item.t == TV_LIST && !(item.flags & TVF_TUPLE)) || item.t == TV_DICT)
            tfail(r, CERR_FORMAT, "unhashable type: '%s'", tv_typename(item));
        return tdict_get(container.u.d, item) != NULL;
    case TV_UNDEF:
        return 0;
    default:
        tfail(r, CERR_FORMAT, "argument of type '%s' is not iterable", tv_typename(container));
    }
}

int top_compare(struct rctx *r, const char *op, struct tv a, struct tv b)
{
    if (!strcmp(op, "=="))
        return tv_eq(a, b);
    if (!strcmp(op, "!="))
        return !tv_eq(a, b);
    if (!strcmp(op, "in"))
        return contains(r, b, a);
    if (!strcmp(op, "notin"))
        return !contains(r, b, a);
    if (a.t == TV_UNDEF)
        tundef_fail(r, a);
    if (b.t == TV_UNDEF)
        tundef_fail(r, b);
    int c = tv_cmp(r, a, b);
    if (op[0] == '<')
        return op[1] ? c <= 0 : c < 0;
    return op[1] ? c >= 0 : c > 0;
}
