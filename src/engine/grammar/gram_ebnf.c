/* gram_ebnf.c — the GBNF-style EBNF parser (docs/grammar.md), the front end every other
 * form compiles through.
 *
 *   rule     ::= name "::=" alts            (the start rule is `root`)
 *   alts     ::= seq ("|" seq)*
 *   seq      ::= item*                      (a seq ends before the next `name ::=`)
 *   item     ::= primary ("*" | "+" | "?" | "{" m "}" | "{" m ",}" | "{" m "," n "}")?
 *   primary  ::= name | "string" | [class] | [^class] | "." | "(" alts ")"
 * Comments run from '#' to the end of the line. Escapes: \n \r \t \\ \" \] \xHH \uHHHH
 * \UHHHHHHHH, and any other punctuation as itself.
 */
#include <ctype.h>
#include <stdlib.h>
#include <string.h>

#include "engine/grammar/gram_int.h"

struct ep {
    const char *s;
    size_t n, i;
    struct gb *b;
    struct cerr *e;
    int depth;
};

static void line_col(const struct ep *p, size_t at, int *line, int *col)
{
    *line = 1;
    *col = 1;
    for (size_t k = 0; k < at && k < p->n; k++) {
        if (p->s[k] == '\n') {
            (*line)++;
            *col = 1;
        } else {
            (*col)++;
        }
    }
}

static int fail(struct ep *p, const char *what)
{
    int l, c;
    line_col(p, p->i, &l, &c);
    return cerr_set(p->e, CERR_FORMAT, "grammar line %d column %d: %s", l, c, what);
}

static int eof(const struct ep *p) { return p->i >= p->n; }
static int peek(const struct ep *p) { return p->i < p->n ? (unsigned char)p->s[p->i] : -1; }

static void skip_ws(struct ep *p)
{
    while (!eof(p)) {
        int c = peek(p);
        if (c == '#') {
            while (!eof(p) && peek(p) != '\n')
                p->i++;
        } else if (c == ' ' || c == '\t' || c == '\n' || c == '\r') {
            p->i++;
        } else {
            break;
        }
    }
}

static int is_name(int c) { return c >= 0 && (isalnum(c) || c == '_' || c == '-'); }

static size_t name_len(const struct ep *p, size_t at)
{
    size_t k = at;
    while (k < p->n && is_name((unsigned char)p->s[k]))
        k++;
    return k - at;
}

/* at a name followed by ::= (the start of the next rule) */
static int at_rule_head(const struct ep *p)
{
    size_t k = p->i + name_len(p, p->i);
    if (k == p->i)
        return 0;
    while (k < p->n && (p->s[k] == ' ' || p->s[k] == '\t'))
        k++;
    return k + 3 <= p->n && !memcmp(p->s + k, "::=", 3);
}

static int hexval(int c)
{
    if (c >= '0' && c <= '9')
        return c - '0';
    if (c >= 'a' && c <= 'f')
        return c - 'a' + 10;
    if (c >= 'A' && c <= 'F')
        return c - 'A' + 10;
    return -1;
}

/* Reads one code point (decoding UTF-8 or an escape). Returns 0 or an error. */
static int read_cp(struct ep *p, uint32_t *cp)
{
    if (eof(p))
        return fail(p, "unexpected end of the grammar");
    unsigned char c = (unsigned char)p->s[p->i];
    if (c == '\\') {
        p->i++;
        if (eof(p))
            return fail(p, "unfinished escape");
        int x = (unsigned char)p->s[p->i++];
        int nd = x == 'x' ? 2 : x == 'u' ? 4 : x == 'U' ? 8 : 0;
        if (nd) {
            uint32_t v = 0;
            for (int k = 0; k < nd; k++) {
                int h = eof(p) ? -1 : hexval((unsigned char)p->s[p->i]);
                if (h < 0)
                    return fail(p, "bad hex escape");
                v = v * 16 + (uint32_t)h;
                p->i++;
            }
            if (v > 0x10FFFF)
                return fail(p, "escape beyond U+10FFFF");
            *cp = v;
            return 0;
        }
        switch (x) {
        case 'n': *cp = '\n'; return 0;
        case 'r': *cp = '\r'; return 0;
        case 't': *cp = '\t'; return 0;
        case '0': *cp = 0; return 0;
        default:
            if (isalnum(x))
                return fail(p, "unknown escape");
            *cp = (uint32_t)x;
            return 0;
        }
    }
    int n = c < 0x80 ? 1 : (c & 0xE0) == 0xC0 ? 2 : (c & 0xF0) == 0xE0 ? 3 : (c & 0xF8) == 0xF0 ? 4 : 0;
    if (!n || p->i + (size_t)n > p->n)
        return fail(p, "invalid UTF-8");
    uint32_t v = n == 1 ? c : n == 2 ? (c & 0x1Fu) : n == 3 ? (c & 0x0Fu) : (c & 0x07u);
    for (int k = 1; k < n; k++) {
        unsigned char d = (unsigned char)p->s[p->i + (size_t)k];
        if ((d & 0xC0) != 0x80)
            return fail(p, "invalid UTF-8");
        v = (v << 6) | (d & 0x3Fu);
    }
    p->i += (size_t)n;
    *cp = v;
    return 0;
}

static int put_utf8(char *o, uint32_t cp)
{
    if (cp < 0x80) {
        o[0] = (char)cp;
        return 1;
    }
    if (cp < 0x800) {
        o[0] = (char)(0xC0 | (cp >> 6));
        o[1] = (char)(0x80 | (cp & 0x3F));
        return 2;
    }
    if (cp < 0x10000) {
        o[0] = (char)(0xE0 | (cp >> 12));
        o[1] = (char)(0x80 | ((cp >> 6) & 0x3F));
        o[2] = (char)(0x80 | (cp & 0x3F));
        return 3;
    }
    o[0] = (char)(0xF0 | (cp >> 18));
    o[1] = (char)(0x80 | ((cp >> 12) & 0x3F));
    o[2] = (char)(0x80 | ((cp >> 6) & 0x3F));
    o[3] = (char)(0x80 | (cp & 0x3F));
    return 4;
}

static int cmp_u32pair(const void *a, const void *b)
{
    const uint32_t *x = a, *y = b;
    return x[0] < y[0] ? -1 : x[0] > y[0];
}

/* [class] with p->i just past '[' */
static int parse_class(struct ep *p, struct gseq *dst)
{
    int neg = 0;
    if (peek(p) == '^') {
        neg = 1;
        p->i++;
    }
    uint32_t (*rg)[2] = NULL;
    int n = 0, cap = 0, rc = 0;
    while (!rc) {
        if (eof(p)) {
            rc = fail(p, "unterminated character class");
            break;
        }
        if (peek(p) == ']') {
            p->i++;
            break;
        }
        uint32_t lo, hi;
        if ((rc = read_cp(p, &lo)))
            break;
        hi = lo;
        if (peek(p) == '-' && p->i + 1 < p->n && p->s[p->i + 1] != ']') {
            p->i++;
            if ((rc = read_cp(p, &hi)))
                break;
            if (hi < lo) {
                rc = fail(p, "character range out of order");
                break;
            }
        }
        if (n == cap) {
            cap = cap ? cap * 2 : 8;
            void *q = realloc(rg, (size_t)cap * sizeof *rg);
            if (!q) {
                rc = cerr_set(p->e, CERR_NOMEM, "out of memory");
                break;
            }
            rg = q;
        }
        rg[n][0] = lo;
        rg[n][1] = hi;
        n++;
    }
    if (rc) {
        free(rg);
        return rc;
    }
    if (n)
        qsort(rg, (size_t)n, sizeof *rg, cmp_u32pair);
    /* merge, then complement when negated */
    uint32_t *lo = malloc(((size_t)n + 1) * sizeof *lo), *hi = malloc(((size_t)n + 1) * sizeof *hi);
    int m = 0;
    if (!lo || !hi) {
        free(rg);
        free(lo);
        free(hi);
        return cerr_set(p->e, CERR_NOMEM, "out of memory");
    }
    for (int k = 0; k < n; k++) {
        if (m && rg[k][0] <= hi[m - 1] + 1) {
            if (rg[k][1] > hi[m - 1])
                hi[m - 1] = rg[k][1];
        } else {
            lo[m] = rg[k][0];
            hi[m] = rg[k][1];
            m++;
        }
    }
    free(rg);
    if (neg) {
        uint32_t *l2 = malloc(((size_t)m + 1) * sizeof *l2), *h2 = malloc(((size_t)m + 1) * sizeof *h2);
        int m2 = 0;
        uint32_t next = 0;
        if (!l2 || !h2) {
            free(lo); free(hi); free(l2); free(h2);
            return cerr_set(p->e, CERR_NOMEM, "out of memory");
        }
        for (int k = 0; k < m; k++) {
            if (lo[k] > next) {
                l2[m2] = next;
                h2[m2++] = lo[k] - 1;
            }
            next = hi[k] + 1;
        }
        if (next <= 0x10FFFF) {
            l2[m2] = next;
            h2[m2++] = 0x10FFFF;
        }
        free(lo);
        free(hi);
        lo = l2;
        hi = h2;
        m = m2;
    }
    rc = m ? gb_push_ranges(p->b, dst, lo, hi, m) : fail(p, "empty character class");
    free(lo);
    free(hi);
    if (rc == CERR_NOMEM)
        return cerr_set(p->e, CERR_NOMEM, "out of memory");
    return rc;
}

static int parse_alts(struct ep *p, int rule);

static int parse_primary(struct ep *p, struct gseq *dst)
{
    int c = peek(p);
    if (c == '"') {
        p->i++;
        while (1) {
            if (eof(p))
                return fail(p, "unterminated string");
            if (peek(p) == '"') {
                p->i++;
                return 0;
            }
            uint32_t cp;
            char o[4];
            int rc = read_cp(p, &cp);
            if (rc)
                return rc;
            if (gb_push_bytes(p->b, dst, o, (size_t)put_utf8(o, cp)))
                return cerr_set(p->e, CERR_NOMEM, "out of memory");
        }
    }
    if (c == '[') {
        p->i++;
        return parse_class(p, dst);
    }
    if (c == '.') {
        p->i++;
        uint32_t lo = 0, hi = 0x10FFFF;
        return gb_push_ranges(p->b, dst, &lo, &hi, 1) ? cerr_set(p->e, CERR_NOMEM, "out of memory") : 0;
    }
    if (c == '(') {
        p->i++;
        if (++p->depth > 200)
            return fail(p, "groups nested too deeply");
        int r = gb_rule(p->b, NULL, 0);
        if (r < 0)
            return cerr_set(p->e, CERR_NOMEM, "out of memory");
        int rc = parse_alts(p, r);
        p->depth--;
        if (rc)
            return rc;
        skip_ws(p);
        if (peek(p) != ')')
            return fail(p, "expected ')'");
        p->i++;
        return gb_push(dst, GS_RULE, r) ? cerr_set(p->e, CERR_NOMEM, "out of memory") : 0;
    }
    size_t nl = name_len(p, p->i);
    if (!nl)
        return fail(p, "expected a rule name, a \"string\", a [class], '.' or '('");
    int r = gb_rule(p->b, p->s + p->i, nl);
    if (r < 0)
        return cerr_set(p->e, CERR_NOMEM, "out of memory");
    if (!p->b->rules[r].defined && !p->b->rules[r].line)
        line_col(p, p->i, &p->b->rules[r].line, &p->b->rules[r].col);
    p->i += nl;
    return gb_push(dst, GS_RULE, r) ? cerr_set(p->e, CERR_NOMEM, "out of memory") : 0;
}

static int read_int(struct ep *p, int *v)
{
    if (!isdigit(peek(p)))
        return fail(p, "expected a number in {m,n}");
    long x = 0;
    while (isdigit(peek(p))) {
        x = x * 10 + (peek(p) - '0');
        if (x > 1000000)
            return fail(p, "repetition count too large");
        p->i++;
    }
    *v = (int)x;
    return 0;
}

static int parse_item(struct ep *p, struct gseq *dst)
{
    struct gseq item = {0};
    int rc = parse_primary(p, &item);
    if (rc) {
        free(item.v);
        return rc;
    }
    size_t save = p->i;
    while (p->i < p->n && (p->s[p->i] == ' ' || p->s[p->i] == '\t'))
        p->i++;
    int c = peek(p), mn = -1, mx = -1;
    if (c == '*' || c == '+' || c == '?') {
        p->i++;
        mn = c == '+' ? 1 : 0;
        mx = c == '?' ? 1 : -1;
    } else if (c == '{') {
        p->i++;
        if ((rc = read_int(p, &mn)))
            goto out;
        mx = mn;
        if (peek(p) == ',') {
            p->i++;
            mx = -1;
            if (peek(p) != '}' && (rc = read_int(p, &mx)))
                goto out;
        }
        if (peek(p) != '}') {
            rc = fail(p, "expected '}'");
            goto out;
        }
        p->i++;
    } else {
        p->i = save;
    }
    if (mn < 0) {
        for (int k = 0; k < item.n && !rc; k++)
            rc = gb_push(dst, (int)item.v[k].kind, (int)item.v[k].arg);
        if (rc)
            rc = cerr_set(p->e, CERR_NOMEM, "out of memory");
        goto out;
    }
    return gb_push_repeat(p->b, dst, &item, mn, mx, p->e);
out:
    free(item.v);
    return rc;
}

static int parse_seq(struct ep *p, struct gseq *s)
{
    while (1) {
        skip_ws(p);
        int c = peek(p);
        if (c < 0 || c == ')' || c == '|' || at_rule_head(p))
            return 0;
        int rc = parse_item(p, s);
        if (rc)
            return rc;
    }
}

static int parse_alts(struct ep *p, int rule)
{
    while (1) {
        struct gseq s = {0};
        int rc = parse_seq(p, &s);
        if (rc) {
            free(s.v);
            return rc;
        }
        if (gb_add_alt(p->b, rule, &s))
            return cerr_set(p->e, CERR_NOMEM, "out of memory");
        skip_ws(p);
        if (peek(p) != '|')
            return 0;
        p->i++;
    }
}

int gram_from_ebnf(struct gram **out, const char *src, size_t len, struct cerr *e)
{
    *out = NULL;
    struct gb b;
    gb_init(&b);
    struct ep p = {.s = src, .n = len, .b = &b, .e = e};
    int rc = 0;
    skip_ws(&p);
    while (!rc && !eof(&p)) {
        size_t nl = name_len(&p, p.i);
        if (!nl) {
            rc = fail(&p, "expected a rule: name ::= ...");
            break;
        }
        int r = gb_rule(&b, p.s + p.i, nl);
        if (r < 0) {
            rc = cerr_set(e, CERR_NOMEM, "out of memory");
            break;
        }
        if (b.rules[r].defined) {
            rc = fail(&p, "rule defined twice");
            break;
        }
        b.rules[r].defined = 1;
        p.i += nl;
        while (!eof(&p) && (peek(&p) == ' ' || peek(&p) == '\t'))
            p.i++;
        if (p.i + 3 > p.n || memcmp(p.s + p.i, "::=", 3)) {
            rc = fail(&p, "expected '::='");
            break;
        }
        p.i += 3;
        rc = parse_alts(&p, r);
        if (!rc) {
            skip_ws(&p);
            if (!eof(&p) && !at_rule_head(&p))
                rc = fail(&p, peek(&p) == ')' ? "unmatched ')'" : "unexpected text");
        }
    }
    int root = -1;
    for (int i = 0; !rc && i < b.n_rules; i++)
        if (b.rules[i].name && !strcmp(b.rules[i].name, "root"))
            root = i;
    if (!rc && (root < 0 || !b.rules[root].defined))
        rc = cerr_set(e, CERR_INVALID, "the grammar has no 'root' rule");
    if (!rc)
        rc = gb_finish(&b, root, gram_hash_bytes(src, len), out, e);
    gb_deinit(&b);
    return rc;
}
