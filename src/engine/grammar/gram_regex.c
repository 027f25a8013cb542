/* gram_regex.c — regular expressions to EBNF text, and the regex and choice front ends.
 *
 * The subset JSON Schema `pattern` and guided_regex use in practice: literals, '.', classes
 * with ranges, negation and \d \w \s (\D \W \S), escapes, groups ((?:...) and named groups
 * too), alternation, * + ? {m} {m,} {m,n} (lazy and possessive suffixes are accepted and
 * mean the same set of strings). The match is whole: ^ at the start and $ at the end are
 * implied. Backreferences, lookaround, \b and inline flags are CERR_UNSUPPORTED. In json
 * mode the result matches the JSON-escaped form of the strings the regex matches.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/grammar/gram_int.h"
#include "util/sbuf.h"

struct rp {
    const char *s;
    size_t n, i;
    int json, depth;
    struct sbuf *o;
    struct cerr *e;
};

struct rset {
    uint32_t (*r)[2];
    int n, cap;
};

static int rfail(struct rp *p, int code, const char *what)
{
    return cerr_set(p->e, code, "regex at offset %zu: %s", p->i, what);
}

static int rs_add(struct rset *s, uint32_t lo, uint32_t hi)
{
    if (s->n == s->cap) {
        int nc = s->cap ? s->cap * 2 : 8;
        void *q = realloc(s->r, (size_t)nc * sizeof *s->r);
        if (!q)
            return CERR_NOMEM;
        s->r = q;
        s->cap = nc;
    }
    s->r[s->n][0] = lo;
    s->r[s->n][1] = hi;
    s->n++;
    return 0;
}

static int cmp_r(const void *a, const void *b)
{
    const uint32_t *x = a, *y = b;
    return x[0] < y[0] ? -1 : x[0] > y[0];
}

static void rs_norm(struct rset *s)
{
    if (!s->n)
        return;
    qsort(s->r, (size_t)s->n, sizeof *s->r, cmp_r);
    int m = 0;
    for (int k = 0; k < s->n; k++) {
        if (m && s->r[k][0] <= s->r[m - 1][1] + 1) {
            if (s->r[k][1] > s->r[m - 1][1])
                s->r[m - 1][1] = s->r[k][1];
        } else {
            s->r[m][0] = s->r[k][0];
            s->r[m][1] = s->r[k][1];
            m++;
        }
    }
    s->n = m;
}

static int rs_complement(struct rset *s)
{
    rs_norm(s);
    struct rset t = {0};
    uint32_t next = 0;
    for (int k = 0; k < s->n; k++) {
        if (s->r[k][0] > next && rs_add(&t, next, s->r[k][0] - 1))
            goto oom;
        next = s->r[k][1] + 1;
    }
    if (next <= 0x10FFFF && rs_add(&t, next, 0x10FFFF))
        goto oom;
    free(s->r);
    *s = t;
    return 0;
oom:
    free(t.r);
    return CERR_NOMEM;
}

static int add_shorthand(struct rset *s, int c)
{
    int rc = 0;
    struct rset t = {0};
    int lc = c | 0x20;
    if (lc == 'd')
        rc = rs_add(&t, '0', '9');
    else if (lc == 'w')
        rc = rs_add(&t, '0', '9') || rs_add(&t, 'A', 'Z') || rs_add(&t, '_', '_') ||
             rs_add(&t, 'a', 'z');
    else
        rc = rs_add(&t, '\t', '\r') || rs_add(&t, ' ', ' ');
    if (!rc && c != lc)
        rc = rs_complement(&t);
    for (int k = 0; !rc && k < t.n; k++)
        rc = rs_add(s, t.r[k][0], t.r[k][1]);
    free(t.r);
    return rc ? CERR_NOMEM : 0;
}

static void put_cp_class(struct sbuf *o, uint32_t c)
{
    if (c < 0x100)
        sbuf_printf(o, "\\x%02X", c);
    else
        sbuf_printf(o, "\\U%08X", c);
}

static void put_lit_bytes(struct sbuf *o, const char *b, size_t n)
{
    sbuf_puts(o, "\"");
    for (size_t i = 0; i < n; i++)
        sbuf_printf(o, "\\x%02X", (uint8_t)b[i]);
    sbuf_puts(o, "\"");
}

/* JSON escape of a char the JSON string cannot hold raw */
static void json_esc(uint32_t c, char *b, size_t *n)
{
    if (c == '"' || c == '\\') {
        b[0] = '\\';
        b[1] = (char)c;
        *n = 2;
    } else if (c == '\n' || c == '\t' || c == '\r' || c == '\b' || c == '\f') {
        b[0] = '\\';
        b[1] = c == '\n' ? 'n' : c == '\t' ? 't' : c == '\r' ? 'r' : c == '\b' ? 'b' : 'f';
        *n = 2;
    } else {
        *n = (size_t)snprintf(b, 8, "\\u%04x", c);
    }
}

/* Writes the set as one EBNF expression (json: the raw-safe part as a class, the rest as
 * escape strings). */
static int emit_set(struct rp *p, struct rset *s)
{
    rs_norm(s);
    struct rset safe = {0};
    uint32_t extra[40];
    int n_extra = 0;
    for (int k = 0; k < s->n; k++) {
        uint32_t lo = s->r[k][0], hi = s->r[k][1];
        if (!p->json) {
            if (rs_add(&safe, lo, hi))
                goto oom;
            continue;
        }
        for (uint32_t c = lo; c <= hi && c < 0x20; c++)
            extra[n_extra++] = c;
        if (lo <= '"' && hi >= '"')
            extra[n_extra++] = '"';
        if (lo <= '\\' && hi >= '\\')
            extra[n_extra++] = '\\';
        /* lo..hi minus controls, '"' and '\\' */
        uint32_t a = lo < 0x20 ? 0x20 : lo;
        uint32_t cuts[2] = {'"', '\\'};
        for (int z = 0; z < 2 && a <= hi; z++) {
            if (cuts[z] < a)
                continue;
            if (cuts[z] > hi)
                break;
            if (cuts[z] > a && rs_add(&safe, a, cuts[z] - 1))
                goto oom;
            a = cuts[z] + 1;
        }
        if (a <= hi && rs_add(&safe, a, hi))
            goto oom;
    }
    if (!safe.n && !n_extra) {
        free(safe.r);
        return rfail(p, CERR_INVALID, "empty character class");
    }
    int alts = (safe.n ? 1 : 0) + n_extra;
    if (alts > 1)
        sbuf_puts(p->o, "(");
    if (safe.n) {
        sbuf_puts(p->o, "[");
        for (int k = 0; k < safe.n; k++) {
            put_cp_class(p->o, safe.r[k][0]);
            if (safe.r[k][1] != safe.r[k][0]) {
                sbuf_puts(p->o, "-");
                put_cp_class(p->o, safe.r[k][1]);
            }
        }
        sbuf_puts(p->o, "]");
    }
    for (int k = 0; k < n_extra; k++) {
        char b[8];
        size_t bn;
        json_esc(extra[k], b, &bn);
        sbuf_puts(p->o, (safe.n || k) ? " | " : "");
        put_lit_bytes(p->o, b, bn);
    }
    if (alts > 1)
        sbuf_puts(p->o, ")");
    free(safe.r);
    return 0;
oom:
    free(safe.r);
    return cerr_set(p->e, CERR_NOMEM, "out of memory");
}

static int rpeek(const struct rp *p) { return p->i < p->n ? (unsigned char)p->s[p->i] : -1; }

static int hexv(int c)
{
    return c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10 : c >= 'A' && c <= 'F' ? c - 'A' + 10 : -1;
}

/* one code point, raw UTF-8 */
static int read_raw(struct rp *p, uint32_t *cp)
{
    unsigned char c = (unsigned char)p->s[p->i];
    int n = c < 0x80 ? 1 : (c & 0xE0) == 0xC0 ? 2 : (c & 0xF0) == 0xE0 ? 3 : (c & 0xF8) == 0xF0 ? 4 : 0;
    if (!n || p->i + (size_t)n > p->n)
        return rfail(p, CERR_FORMAT, "invalid UTF-8");
    uint32_t v = n == 1 ? c : n == 2 ? (c & 0x1Fu) : n == 3 ? (c & 0x0Fu) : (c & 0x07u);
    for (int k = 1; k < n; k++)
        v = (v << 6) | ((unsigned char)p->s[p->i + (size_t)k] & 0x3Fu);
    p->i += (size_t)n;
    *cp = v;
    return 0;
}

/* After a backslash: a single code point (*cp) or a shorthand class (*cls = letter). */
static int read_escape(struct rp *p, uint32_t *cp, int *cls)
{
    *cls = 0;
    int c = rpeek(p);
    if (c < 0)
        return rfail(p, CERR_FORMAT, "unfinished escape");
    p->i++;
    switch (c) {
    case 'd': case 'D': case 'w': case 'W': case 's': case 'S':
        *cls = c;
        return 0;
    case 'n': *cp = '\n'; return 0;
    case 't': *cp = '\t'; return 0;
    case 'r': *cp = '\r'; return 0;
    case 'f': *cp = '\f'; return 0;
    case 'v': *cp = '\v'; return 0;
    case '0': *cp = 0; return 0;
    case 'x': case 'u': {
        int nd = c == 'x' ? 2 : 4;
        uint32_t v = 0;
        if (rpeek(p) == '{') {
            p->i++;
            while (rpeek(p) >= 0 && rpeek(p) != '}') {
                int h = hexv(rpeek(p));
                if (h < 0 || v > 0x10FFFF)
                    return rfail(p, CERR_FORMAT, "bad hex escape");
                v = v * 16 + (uint32_t)h;
                p->i++;
            }
            p->i++;
        } else {
            for (int k = 0; k < nd; k++) {
                int h = hexv(rpeek(p));
                if (h < 0)
                    return rfail(p, CERR_FORMAT, "bad hex escape");
                v = v * 16 + (uint32_t)h;
                p->i++;
            }
        }
        if (v > 0x10FFFF)
            return rfail(p, CERR_FORMAT, "escape beyond U+10FFFF");
        *cp = v;
        return 0;
    }
    default:
        if ((c >= '1' && c <= '9') || c == 'k')
            return rfail(p, CERR_UNSUPPORTED, "backreferences cannot be enforced by a grammar");
        if (c == 'b' || c == 'B' || c == 'A' || c == 'z' || c == 'Z' || c == 'G')
            return rfail(p, CERR_UNSUPPORTED, "anchors and word boundaries inside a pattern are not supported");
        if (c == 'p' || c == 'P')
            return rfail(p, CERR_UNSUPPORTED, "Unicode property classes (\\p) are not supported");
        if ((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z'))
            return rfail(p, CERR_UNSUPPORTED, "unknown escape");
        p->i--;
        return read_raw(p, cp);
    }
}

static int emit_cp(struct rp *p, uint32_t c)
{
    struct rset s = {0};
    if (rs_add(&s, c, c))
        return cerr_set(p->e, CERR_NOMEM, "out of memory");
    int rc;
    if (p->json && (c < 0x20 || c == '"' || c == '\\')) {
        char b[8];
        size_t bn;
        json_esc(c, b, &bn);
        put_lit_bytes(p->o, b, bn);
        rc = 0;
    } else {
        char b[4];
        int n = c < 0x80 ? 1 : c < 0x800 ? 2 : c < 0x10000 ? 3 : 4;
        if (n == 1)
            b[0] = (char)c;
        else if (n == 2) {
            b[0] = (char)(0xC0 | (c >> 6));
            b[1] = (char)(0x80 | (c & 0x3F));
        } else if (n == 3) {
            b[0] = (char)(0xE0 | (c >> 12));
            b[1] = (char)(0x80 | ((c >> 6) & 0x3F));
            b[2] = (char)(0x80 | (c & 0x3F));
        } else {
            b[0] = (char)(0xF0 | (c >> 18));
            b[1] = (char)(0x80 | ((c >> 12) & 0x3F));
            b[2] = (char)(0x80 | ((c >> 6) & 0x3F));
            b[3] = (char)(0x80 | (c & 0x3F));
        }
        put_lit_bytes(p->o, b, (size_t)n);
        rc = 0;
    }
    free(s.r);
    return rc;
}

static int parse_class_re(struct rp *p)
{
    struct rset s = {0};
    int neg = 0, rc = 0, first = 1;
    if (rpeek(p) == '^') {
        neg = 1;
        p->i++;
    }
    while (!rc) {
        int c = rpeek(p);
        if (c < 0) {
            rc = rfail(p, CERR_FORMAT, "unterminated character class");
            break;
        }
        if (c == ']' && !first) {
            p->i++;
            break;
        }
        first = 0;
        uint32_t lo;
        int cls = 0;
        if (c == '[' && p->i + 1 < p->n && p->s[p->i + 1] == ':') {
            rc = rfail(p, CERR_UNSUPPORTED, "POSIX classes ([:alpha:]) are not supported");
            break;
        }
        if (c == '\\') {
            p->i++;
            rc = read_escape(p, &lo, &cls);
        } else {
            rc = read_raw(p, &lo);
        }
        if (rc)
            break;
        if (cls) {
            rc = add_shorthand(&s, cls);
            continue;
        }
        uint32_t hi = lo;
        if (rpeek(p) == '-' && p->i + 1 < p->n && p->s[p->i + 1] != ']') {
            p->i++;
            int c2 = rpeek(p);
            if (c2 == '\\') {
                p->i++;
                rc = read_escape(p, &hi, &cls);
                if (!rc && cls)
                    rc = rfail(p, CERR_FORMAT, "a range cannot end in a class");
            } else {
                rc = read_raw(p, &hi);
            }
            if (!rc && hi < lo)
                rc = rfail(p, CERR_FORMAT, "character range out of order");
        }
        if (!rc && rs_add(&s, lo, hi))
            rc = cerr_set(p->e, CERR_NOMEM, "out of memory");
    }
    if (!rc && neg && rs_complement(&s))
        rc = cerr_set(p->e, CERR_NOMEM, "out of memory");
    if (!rc)
        rc = emit_set(p, &s);
    free(s.r);
    return rc;
}

static int parse_alt_re(struct rp *p);

/* After a group's '(': its (?:, (?P<name>, (?<name> prefix (lookaround and inline flags
 * refused) and the nesting limit. 0, or the rfail code. */
static int group_open(struct rp *p)
{
    if (rpeek(p) == '?') {
        p->i++;
        int d = rpeek(p);
        if (d == ':') {
            p->i++;
        } else if ((d == 'P' && p->i + 1 < p->n && p->s[p->i + 1] == '<') ||
                   (d == '<' && p->i + 1 < p->n && p->s[p->i + 1] != '=' && p->s[p->i + 1] != '!')) {
            while (rpeek(p) >= 0 && rpeek(p) != '>')
                p->i++;
            if (rpeek(p) != '>')
                return rfail(p, CERR_FORMAT, "unterminated group name");
            p->i++;
        } else {
            return rfail(p, CERR_UNSUPPORTED, "lookaround and inline flags are not supported");
        }
    }
    if (++p->depth > 100)
        return rfail(p, CERR_LIMIT, "groups nested too deeply");
    return 0;
}

static int parse_atom(struct rp *p)
{
    int c = rpeek(p);
    if (c == '(') {
        p->i++;
        int go = group_open(p);
        if (go)
            return go;
        sbuf_puts(p->o, "(");
        int rc = parse_alt_re(p);
        p->depth--;
        if (rc)
            return rc;
        if (rpeek(p) != ')')
            return rfail(p, CERR_FORMAT, "expected ')'");
        p->i++;
        sbuf_puts(p->o, ")");
        return 0;
    }
    if (c == '[') {
        p->i++;
        return parse_class_re(p);
    }
    if (c == '.') {
        p->i++;
        struct rset s = {0};
        int rc = rs_add(&s, 0, 9) || rs_add(&s, 11, 0x10FFFF) ? cerr_set(p->e, CERR_NOMEM, "out of memory")
                                                               : emit_set(p, &s);
        free(s.r);
        return rc;
    }
    uint32_t cp;
    int cls = 0, rc;
    if (c == '\\') {
        p->i++;
        rc = read_escape(p, &cp, &cls);
    } else {
        rc = read_raw(p, &cp);
    }
    if (rc)
        return rc;
    if (cls) {
        struct rset s = {0};
        rc = add_shorthand(&s, cls) ? cerr_set(p->e, CERR_NOMEM, "out of memory") : emit_set(p, &s);
        free(s.r);
        return rc;
    }
    return emit_cp(p, cp);
}

static int parse_concat(struct rp *p)
{
    int any = 0;
    while (1) {
        int c = rpeek(p);
        if (c < 0 || c == '|' || c == ')')
            break;
        /* ^ and $ at the ends of the pattern or of a top-level alternative (the match is
         * whole anyway) */
        if (c == '^' && (p->i == 0 || (p->depth == 0 && !any && p->s[p->i - 1] == '|'))) {
            p->i++;
            continue;
        }
        if (c == '$' && (p->i + 1 == p->n || (p->depth == 0 && p->s[p->i + 1] == '|'))) {
            p->i++;
            continue;
        }
        if (c == '^' || c == '$')
            return rfail(p, CERR_UNSUPPORTED, "anchors inside a pattern are not supported");
        if (c == '*' || c == '+' || c == '?' || c == '{')
            return rfail(p, CERR_FORMAT, "a quantifier with nothing to repeat");
        if (any)
            sbuf_puts(p->o, " ");
        any = 1;
        sbuf_puts(p->o, "(");
        int rc = parse_atom(p);
        if (rc)
            return rc;
        sbuf_puts(p->o, ")");
        c = rpeek(p);
        if (c == '*' || c == '+' || c == '?') {
            p->i++;
            sbuf_printf(p->o, "%c", c);
        } else if (c == '{') {
            size_t save = p->i;
            p->i++;
            long mn = 0, mx;
            int nd = 0;
            while (rpeek(p) >= '0' && rpeek(p) <= '9' && mn < 100000) {
                mn = mn * 10 + (rpeek(p) - '0');
                p->i++;
                nd++;
            }
            mx = mn;
            if (rpeek(p) == ',') {
                p->i++;
                mx = -1;
                if (rpeek(p) >= '0' && rpeek(p) <= '9') {
                    mx = 0;
                    while (rpeek(p) >= '0' && rpeek(p) <= '9' && mx < 100000) {
                        mx = mx * 10 + (rpeek(p) - '0');
                        p->i++;
                    }
                }
            }
            if (!nd || rpeek(p) != '}') {
                p->i = save;
                return rfail(p, CERR_FORMAT, "bad {m,n} quantifier");
            }
            p->i++;
            if (mx >= 0)
                sbuf_printf(p->o, "{%ld,%ld}", mn, mx);
            else
                sbuf_printf(p->o, "{%ld,}", mn);
        } else {
            continue;
        }
        if (rpeek(p) == '?' || rpeek(p) == '+')
            p->i++; /* lazy / possessive: the same language */
        c = rpeek(p);
        if (c == '*' || c == '+' || c == '?' || c == '{')
            return rfail(p, CERR_UNSUPPORTED, "a quantifier after a quantifier");
    }
    if (!any)
        sbuf_puts(p->o, "\"\"");
    return 0;
}

static int parse_alt_re(struct rp *p)
{
    while (1) {
        int rc = parse_concat(p);
        if (rc)
            return rc;
        if (rpeek(p) != '|')
            return 0;
        p->i++;
        sbuf_puts(p->o, " | ");
    }
}

/* ---- `$` inside the pattern ----------------------------------------------------------
 * A `$` that is not at the end of the pattern (or of a top-level alternative) asserts the end
 * of the input where it stands. Each piece R of the pattern is then written twice: N(R),
 * R where nothing may end the input (a `$` matches nothing), and E(R), R followed by the end
 * (a `$` matches the empty string); the pattern is E of the whole. E(R1 R2) = N(R1) E(R2),
 * or E(R1) when E(R2) takes the empty string; E(R*) = N(R)* E(R)?; E(R{m,n}) =
 * N(R){m-1,n-1} E(R) (m = 0: optional). Without such a `$`, E = N and the plain writer runs. */
struct piece {
    struct sbuf n, e;
    int n_none, e_none; /* the language is empty */
    int e_null;         /* E takes the empty string */
};

static void pc_free(struct piece *x)
{
    sbuf_free(&x->n);
    sbuf_free(&x->e);
}

static const char *pc_txt(const struct sbuf *b) { return b->p ? b->p : "\"\""; }

static int pparse_alt(struct rp *p, struct piece *out);

/* 1 when the pattern has a `$` other than at its end or before a top-level '|' */
static int has_inner_end(const char *s, size_t n)
{
    int depth = 0, in_cls = 0;
    for (size_t i = 0; i < n; i++) {
        char c = s[i];
        if (c == '\\') {
            i++;
            continue;
        }
        if (in_cls) {
            in_cls = c != ']';
            continue;
        }
        if (c == '[')
            in_cls = 1;
        else if (c == '(')
            depth++;
        else if (c == ')')
            depth--;
        else if (c == '$' && !(i + 1 == n || (depth == 0 && s[i + 1] == '|')))
            return 1;
    }
    return 0;
}

/* one atom as a piece: a group recursively, `$`, or a leaf written by parse_atom */
static int pparse_atom(struct rp *p, struct piece *x)
{
    memset(x, 0, sizeof *x);
    int c = rpeek(p);
    if (c == '$') {
        p->i++;
        x->n_none = 1, x->e_null = 1;
        sbuf_puts(&x->e, "\"\"");
        return 0;
    }
    if (c != '(') {
        struct sbuf *save = p->o;
        p->o = &x->n;
        int rc = parse_atom(p);
        p->o = save;
        if (!rc && x->n.p)
            sbuf_puts(&x->e, x->n.p);
        return rc;
    }
    p->i++;
    int go = group_open(p);
    if (go)
        return go;
    struct piece g;
    int rc = pparse_alt(p, &g);
    p->depth--;
    if (!rc && rpeek(p) != ')')
        rc = rfail(p, CERR_FORMAT, "expected ')'");
    if (!rc) {
        p->i++;
        x->n_none = g.n_none, x->e_none = g.e_none, x->e_null = g.e_null;
        sbuf_printf(&x->n, "(%s)", pc_txt(&g.n));
        sbuf_printf(&x->e, "(%s)", pc_txt(&g.e));
    }
    pc_free(&g);
    return rc;
}

/* a{mn,mx} (mx < 0: unbounded) as a piece */
static void pc_repeat(struct piece *a, long mn, long mx, struct piece *q)
{
    memset(q, 0, sizeof *q);
    const char *n = pc_txt(&a->n), *e = pc_txt(&a->e);
    char r0[48], r1[48];
    if (mx < 0)
        snprintf(r0, sizeof r0, "{%ld,}", mn), snprintf(r1, sizeof r1, "{%ld,}", mn ? mn - 1 : 0);
    else
        snprintf(r0, sizeof r0, "{%ld,%ld}", mn, mx), snprintf(r1, sizeof r1, "{%ld,%ld}", mn ? mn - 1 : 0, mx - 1);
    /* N */
    if (a->n_none) {
        if (mn > 0)
            q->n_none = 1;
        else
            sbuf_puts(&q->n, "\"\"");
    } else {
        sbuf_printf(&q->n, "(%s)%s", n, r0);
    }
    /* E: the last repetition at the end, the others not */
    q->e_null = mn == 0 || a->e_null;
    if (mx == 0) {
        sbuf_puts(&q->e, "\"\"");
        return;
    }
    int lead_ok = !a->n_none || mn <= 1; /* the N copies before the last */
    if (a->e_none || !lead_ok) {
        if (mn == 0)
            sbuf_puts(&q->e, "\"\"");
        else
            q->e_none = 1;
        return;
    }
    if (a->n_none)
        sbuf_printf(&q->e, "(%s)%s", e, mn == 0 ? "?" : "");
    else
        sbuf_printf(&q->e, "((%s)%s (%s))%s", n, r1, e, mn == 0 ? "?" : "");
}

static int pparse_concat(struct rp *p, struct piece *out)
{
    struct piece *v = NULL;
    int k = 0, cap = 0, rc = 0;
    memset(out, 0, sizeof *out);
    while (!rc) {
        int c = rpeek(p);
        if (c < 0 || c == '|' || c == ')')
            break;
        if (c == '^' && (p->i == 0 || (p->depth == 0 && !k && p->s[p->i - 1] == '|'))) {
            p->i++;
            continue;
        }
        if (c == '^') {
            rc = rfail(p, CERR_UNSUPPORTED, "anchors inside a pattern are not supported");
            break;
        }
        if (c == '*' || c == '+' || c == '?' || c == '{') {
            rc = rfail(p, CERR_FORMAT, "a quantifier with nothing to repeat");
            break;
        }
        if (k == cap) {
            cap = cap ? cap * 2 : 8;
            void *q = realloc(v, (size_t)cap * sizeof *v);
            if (!q) {
                rc = cerr_set(p->e, CERR_NOMEM, "out of memory");
                break;
            }
            v = q;
        }
        struct piece a;
        if ((rc = pparse_atom(p, &a))) {
            pc_free(&a);
            break;
        }
        long mn = 1, mx = 1;
        c = rpeek(p);
        if (c == '*' || c == '+' || c == '?') {
            p->i++;
            mn = c == '+', mx = c == '?' ? 1 : -1;
        } else if (c == '{') {
            size_t save = p->i;
            p->i++;
            int nd = 0;
            mn = 0;
            while (rpeek(p) >= '0' && rpeek(p) <= '9' && mn < 100000)
                mn = mn * 10 + (rpeek(p) - '0'), p->i++, nd++;
            mx = mn;
            if (rpeek(p) == ',') {
                p->i++;
                mx = -1;
                if (rpeek(p) >= '0' && rpeek(p) <= '9')
                    for (mx = 0; rpeek(p) >= '0' && rpeek(p) <= '9' && mx < 100000; p->i++)
                        mx = mx * 10 + (rpeek(p) - '0');
            }
            if (!nd || rpeek(p) != '}' || (mx >= 0 && mx < mn)) {
                p->i = save;
                pc_free(&a);
                rc = rfail(p, CERR_FORMAT, "bad {m,n} quantifier");
                break;
            }
            p->i++;
        }
        if (mn != 1 || mx != 1) {
            if (rpeek(p) == '?' || rpeek(p) == '+')
                p->i++; /* lazy / possessive: the same language */
            c = rpeek(p);
            if (c == '*' || c == '+' || c == '?' || c == '{') {
                pc_free(&a);
                rc = rfail(p, CERR_UNSUPPORTED, "a quantifier after a quantifier");
                break;
            }
            struct piece q;
            pc_repeat(&a, mn, mx, &q);
            pc_free(&a);
            a = q;
        }
        v[k++] = a;
    }
    if (!rc) {
        /* N: every piece's N in turn; E: the alternatives N(v0..vj-1) E(vj) while the
         * pieces after j take the empty string at the end */
        out->e_null = 1;
        for (int j = 0; j < k; j++) {
            out->n_none |= v[j].n_none;
            out->e_null &= v[j].e_null;
            sbuf_printf(&out->n, "%s(%s)", j ? " " : "", pc_txt(&v[j].n));
        }
        if (!k)
            sbuf_puts(&out->n, "\"\"");
        int alts = 0;
        for (int j = k - 1; j >= 0; j--) {
            int ok = !v[j].e_none;
            for (int i = 0; i < j && ok; i++)
                ok = !v[i].n_none;
            if (ok) {
                sbuf_puts(&out->e, alts++ ? " | " : "(");
                for (int i = 0; i < j; i++)
                    sbuf_printf(&out->e, "(%s) ", pc_txt(&v[i].n));
                sbuf_printf(&out->e, "(%s)", pc_txt(&v[j].e));
            }
            if (!v[j].e_null)
                break;
        }
        if (!k)
            sbuf_puts(&out->e, "\"\"");
        else if (alts)
            sbuf_puts(&out->e, ")");
        else
            out->e_none = 1;
    }
    for (int j = 0; j < k; j++)
        pc_free(&v[j]);
    free(v);
    return rc;
}

static int pparse_alt(struct rp *p, struct piece *out)
{
    memset(out, 0, sizeof *out);
    out->n_none = out->e_none = 1;
    while (1) {
        struct piece a;
        int rc = pparse_concat(p, &a);
        if (!rc) {
            if (!a.n_none)
                sbuf_printf(&out->n, "%s%s", out->n_none ? "" : " | ", pc_txt(&a.n)), out->n_none = 0;
            if (!a.e_none)
                sbuf_printf(&out->e, "%s%s", out->e_none ? "" : " | ", pc_txt(&a.e)), out->e_none = 0;
            out->e_null |= a.e_null;
        }
        pc_free(&a);
        if (rc) {
            pc_free(out);
            return rc;
        }
        if (rpeek(p) != '|')
            return 0;
        p->i++;
    }
}

int gram_regex_to_ebnf(const char *re, size_t len, int json, struct sbuf *out, struct cerr *e)
{
    struct rp p = {.s = re, .n = len, .json = json, .o = out, .e = e};
    if (has_inner_end(re, len)) {
        struct piece w;
        int rc = pparse_alt(&p, &w);
        if (rc)
            return rc; /* w freed */
        if (p.i < p.n)
            rc = rfail(&p, CERR_FORMAT, "unmatched ')'");
        else if (w.e_none)
            rc = rfail(&p, CERR_INVALID, "the pattern matches nothing ('$' before more text)");
        else
            sbuf_printf(out, "(%s)", pc_txt(&w.e));
        pc_free(&w);
        return rc;
    }
    sbuf_puts(out, "(");
    int rc = parse_alt_re(&p);
    if (!rc && p.i < p.n)
        rc = rfail(&p, CERR_FORMAT, "unmatched ')'");
    sbuf_puts(out, ")");
    return rc;
}

int gram_from_regex(struct gram **out, const char *re, size_t len, struct cerr *e)
{
    *out = NULL;
    struct sbuf b = {0};
    sbuf_puts(&b, "root ::= ");
    int rc = gram_regex_to_ebnf(re, len, 0, &b, e);
    if (!rc)
        rc = b.p ? gram_from_ebnf(out, b.p, b.len, e) : cerr_set(e, CERR_NOMEM, "out of memory");
    if (rc == CERR_INVALID && *out == NULL && e && strstr(e->msg, "left-recursive"))
        cerr_set(e, CERR_UNSUPPORTED, "regex repeats something that can match nothing (like (a*)*)");
    sbuf_free(&b);
    return rc;
}

int gram_from_choice(struct gram **out, const char *const *choices, int n, struct cerr *e)
{
    *out = NULL;
    if (n <= 0)
        return cerr_set(e, CERR_INVALID, "the choice list is empty");
    struct sbuf b = {0};
    sbuf_puts(&b, "root ::= ");
    for (int i = 0; i < n; i++) {
        if (i)
            sbuf_puts(&b, " | ");
        put_lit_bytes(&b, choices[i], strlen(choices[i]));
    }
    int rc = b.p ? gram_from_ebnf(out, b.p, b.len, e) : cerr_set(e, CERR_NOMEM, "out of memory");
    sbuf_free(&b);
    return rc;
}
