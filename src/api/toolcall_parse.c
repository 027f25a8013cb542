/* toolcall_parse.c — whole-block parsers: the text of one complete markup block in, the
 * calls it holds out (name + arguments JSON object). A block is all or nothing: if any
 * part fails to parse, or names an undeclared tool, no call is reported and the caller
 * shows the block as content. Formats: JSON call objects (Hermes, Llama 3, Mistral arrays,
 * fenced JSON), Qwen3-Coder XML, Mistral name[ARGS]{…}, Python-style calls (Gemma
 * tool_code), Gemma 4's call:name{k:<|"|>v<|"|>} syntax and DeepSeek's
 * <｜tool▁call▁begin｜>…<｜tool▁sep｜>…<｜tool▁call▁end｜> calls.
 */
#include "api/toolcall_int.h"

#include <jansson.h>
#include <stdlib.h>
#include <string.h>

#define NPOS ((size_t)-1)

/* ---- collected calls (reported only when the whole block parsed) ---- */

struct found_call {
    char *name;
    struct tcb args;
};

struct found {
    struct found_call *v;
    int n, cap, oom;
};

static struct tcb *found_add(struct found *f, const char *name, size_t nn)
{
    if (f->n == f->cap) {
        int cap = f->cap ? f->cap * 2 : 4;
        struct found_call *nv = realloc(f->v, (size_t)cap * sizeof *nv);
        if (!nv) {
            f->oom = 1;
            return NULL;
        }
        f->v = nv;
        f->cap = cap;
    }
    char *s = malloc(nn + 1);
    if (!s) {
        f->oom = 1;
        return NULL;
    }
    memcpy(s, name, nn);
    s[nn] = 0;
    f->v[f->n].name = s;
    memset(&f->v[f->n].args, 0, sizeof f->v[f->n].args);
    return &f->v[f->n++].args;
}

/* Reports every call when ok, frees everything; returns the count, 0, or CERR_NOMEM. */
static int found_finish(struct found *f, int ok, tcx_call_fn fn, void *ctx)
{
    int rc = ok && f->n > 0 ? f->n : 0;
    for (int i = 0; i < f->n; i++)
        if (f->v[i].args.oom)
            f->oom = 1;
    if (f->oom)
        rc = CERR_NOMEM;
    for (int i = 0; i < f->n; i++) {
        if (rc > 0) {
            int r = fn(ctx, f->v[i].name, tcb_cstr(&f->v[i].args), f->v[i].args.n);
            if (r < 0)
                rc = r;
        }
        free(f->v[i].name);
        tcb_free(&f->v[i].args);
    }
    free(f->v);
    memset(f, 0, sizeof *f);
    return rc;
}

/* ---- small scanning helpers ---- */

static int is_ws(char c)
{
    return c == ' ' || c == '\n' || c == '\r' || c == '\t';
}

static size_t skip_ws(const char *s, size_t n, size_t i)
{
    while (i < n && is_ws(s[i]))
        i++;
    return i;
}

static int starts(const char *s, size_t n, size_t i, const char *lit)
{
    size_t l = strlen(lit);
    return i <= n && n - i >= l && memcmp(s + i, lit, l) == 0;
}

static const char *find(const char *s, size_t n, size_t i, const char *lit)
{
    if (i > n)
        return NULL;
    return memmem(s + i, n - i, lit, strlen(lit));
}

static int is_ident(char c, int first)
{
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_' ||
           (!first && ((c >= '0' && c <= '9') || c == '.' || c == '-'));
}

/* End (exclusive) of the JSON value starting at or after s[i] (whitespace skipped); NPOS
 * when there is no complete valid value there. */
static size_t json_value_end(const char *s, size_t n, size_t i, int scalar)
{
    struct tcj j;
    tcj_init(&j, scalar);
    for (; i < n; i++) {
        int r = tcj_feed(&j, (unsigned char)s[i]);
        if (r == TCJ_DONE)
            return i + 1;
        if (r == TCJ_ERR)
            return tcj_complete(&j) ? i : NPOS;
    }
    return tcj_complete(&j) ? n : NPOS;
}

/* Decodes the JSON string literal s[0..n) into a malloc'd C string (NULL if not one). */
static char *json_string_dup(const char *s, size_t n, size_t *out_n)
{
    json_t *v = json_loadb(s, n, JSON_DECODE_ANY | JSON_ALLOW_NUL, NULL);
    char *r = NULL;
    if (json_is_string(v)) {
        size_t l = json_string_length(v);
        r = malloc(l + 1);
        if (r) {
            memcpy(r, json_string_value(v), l + 1);
            if (out_n)
                *out_n = l;
        }
    }
    json_decref(v);
    return r;
}

/* In the valid object s[a..b), the value span of top-level member `key`. */
static int obj_member(const char *s, size_t a, size_t b, const char *key, size_t *vs, size_t *ve)
{
    size_t i = skip_ws(s, b, a);
    if (i >= b || s[i] != '{')
        return 0;
    i++;
    size_t kl = strlen(key);
    for (;;) {
        i = skip_ws(s, b, i);
        if (i >= b || s[i] != '"')
            return 0;
        size_t ks = i;
        size_t ke = json_value_end(s, b, ks, 1);
        if (ke == NPOS)
            return 0;
        i = skip_ws(s, b, ke);
        if (i >= b || s[i] != ':')
            return 0;
        size_t v0 = skip_ws(s, b, i + 1);
        size_t v1 = json_value_end(s, b, v0, 1);
        if (v1 == NPOS)
            return 0;
        if (ke - ks == kl + 2 && memcmp(s + ks + 1, key, kl) == 0) {
            *vs = v0;
            *ve = v1;
            return 1;
        }
        i = skip_ws(s, b, v1);
        if (i >= b || s[i] != ',')
            return 0;
        i++;
    }
}

/* ---- JSON call objects ---- */

/* Arguments value s[a..b) (object, JSON-encoded object string, or null) -> out. */
static int put_args_value(struct tcb *out, const char *s, size_t a, size_t b)
{
    if (s[a] == '{') {
        tcj_minify(out, s + a, b - a);
        return 1;
    }
    if (b - a == 4 && memcmp(s + a, "null", 4) == 0) {
        tcb_puts(out, "{}");
        return 1;
    }
    if (s[a] == '"') { /* double-encoded: "{\"city\": \"Paris\"}" */
        size_t dn = 0;
        char *d = json_string_dup(s + a, b - a, &dn);
        if (!d)
            return 0;
        size_t x = skip_ws(d, dn, 0);
        int ok = (x < dn && d[x] == '{' && tcj_valid(d, dn, 0)) || x == dn;
        if (ok && x == dn)
            tcb_puts(out, "{}");
        else if (ok)
            tcj_minify(out, d + x, dn - x);
        free(d);
        return ok;
    }
    return 0;
}

/* One call object s[a..b). */
static int json_call(const struct tc_tools *t, const char *s, size_t a, size_t b, struct found *f)
{
    size_t vs, ve;
    if (obj_member(s, a, b, "function", &vs, &ve) && s[vs] == '{')
        return json_call(t, s, vs, ve, f); /* {"type":"function","function":{…}} */
    if (!obj_member(s, a, b, "name", &vs, &ve) || s[vs] != '"')
        return 0;
    size_t nn = 0;
    char *name = json_string_dup(s + vs, ve - vs, &nn);
    if (!name)
        return 0;
    int ok = nn > 0 && strlen(name) == nn && tct_has(t, name, nn);
    struct tcb *args = ok ? found_add(f, name, nn) : NULL;
    free(name);
    if (!args)
        return 0;
    if (obj_member(s, a, b, "arguments", &vs, &ve) || obj_member(s, a, b, "parameters", &vs, &ve))
        return put_args_value(args, s, vs, ve);
    tcb_puts(args, "{}");
    return 1;
}

int tcx_json_calls(const struct tc_tools *t, const char *s, size_t n, tcx_call_fn fn, void *ctx)
{
    struct found f = {0};
    int ok = 1;
    size_t i = 0;
    while (ok) {
        while (i < n && (is_ws(s[i]) || s[i] == ';' || s[i] == ','))
            i++;
        if (i >= n)
            break;
        size_t e = json_value_end(s, n, i, 0);
        if (e == NPOS) {
            ok = 0;
            break;
        }
        if (s[i] == '{') {
            ok = json_call(t, s, i, e, &f);
        } else { /* array of call objects */
            size_t k = i + 1;
            for (;;) {
                k = skip_ws(s, e, k);
                if (s[k] == ']')
                    break;
                size_t ee = json_value_end(s, e, k, 1);
                if (ee == NPOS || s[k] != '{' || !json_call(t, s, k, ee, &f)) {
                    ok = 0;
                    break;
                }
                k = skip_ws(s, e, ee);
                if (s[k] == ',')
                    k++;
            }
        }
        i = e;
    }
    return found_finish(&f, ok, fn, ctx);
}

/* ---- Qwen3-Coder XML ---- */

void tcx_xml_value(struct tcb *out, int type, const char *v, size_t vn)
{
    if (vn > 0 && v[0] == '\n')
        v++, vn--;
    if (vn > 0 && v[vn - 1] == '\n')
        vn--;
    if (type != TCT_STRING) {
        size_t a = 0, b = vn;
        while (a < b && is_ws(v[a]))
            a++;
        while (b > a && is_ws(v[b - 1]))
            b--;
        if (b > a && tcj_valid(v + a, b - a, 1)) {
            tcj_minify(out, v + a, b - a);
            return;
        }
        if (b - a == 4 && memcmp(v + a, "True", 4) == 0) {
            tcb_puts(out, "true");
            return;
        }
        if (b - a == 5 && memcmp(v + a, "False", 5) == 0) {
            tcb_puts(out, "false");
            return;
        }
    }
    tcj_escape(out, v, vn);
}

int tcx_xml_calls(const struct tc_tools *t, const char *s, size_t n, tcx_call_fn fn, void *ctx)
{
    struct found f = {0};
    int ok = 1, any = 0;
    size_t i = 0;
    while (ok) {
        i = skip_ws(s, n, i);
        if (i >= n)
            break;
        if (!starts(s, n, i, "<function=")) {
            ok = 0;
            break;
        }
        i += 10;
        const char *gt = memchr(s + i, '>', n - i);
        size_t a = i, b = gt ? (size_t)(gt - s) : 0;
        while (gt && a < b && is_ws(s[a]))
            a++;
        while (gt && b > a && is_ws(s[b - 1]))
            b--;
        struct tcb *args = gt && b > a && !memchr(s + a, '\n', b - a) && tct_has(t, s + a, b - a)
                               ? found_add(&f, s + a, b - a)
                               : NULL;
        if (!args) {
            ok = 0;
            break;
        }
        const char *name = f.v[f.n - 1].name;
        i = (size_t)(gt - s) + 1;
        size_t k = skip_ws(s, n, i);
        if (k < n && s[k] == '{') { /* Llama 3.1 custom tools: <function=name>{…}</function> */
            size_t e = json_value_end(s, n, k, 0);
            if (e == NPOS) {
                ok = 0;
                break;
            }
            tcj_minify(args, s + k, e - k);
            i = skip_ws(s, n, e);
            if (!starts(s, n, i, "</function>")) {
                ok = 0;
                break;
            }
            i += 11;
            any = 1;
            continue;
        }
        tcb_putc(args, '{');
        int np = 0;
        for (;;) {
            i = skip_ws(s, n, i);
            if (starts(s, n, i, "</function>")) {
                i += 11;
                break;
            }
            if (!starts(s, n, i, "<parameter=")) {
                ok = 0;
                break;
            }
            i += 11;
            const char *pgt = memchr(s + i, '>', n - i);
            if (!pgt) {
                ok = 0;
                break;
            }
            size_t pa = i, pb = (size_t)(pgt - s);
            while (pa < pb && is_ws(s[pa]))
                pa++;
            while (pb > pa && is_ws(s[pb - 1]))
                pb--;
            if (pb == pa) {
                ok = 0;
                break;
            }
            size_t v0 = (size_t)(pgt - s) + 1;
            /* the value ends at the first </parameter>; a missing one is tolerated before
             * the next parameter or the end of the function (the streaming tracker applies
             * the same rule, so it cannot look further ahead than this either) */
            const char *m = find(s, n, v0, "</parameter>");
            const char *nextp = find(s, n, v0, "<parameter=");
            const char *endf = find(s, n, v0, "</function>");
            int closed = m != NULL;
            if (nextp && (!m || nextp < m))
                m = nextp, closed = 0;
            if (endf && (!m || endf < m))
                m = endf, closed = 0;
            if (!m) {
                ok = 0;
                break;
            }
            size_t v1 = (size_t)(m - s), after = closed ? v1 + 12 : v1;
            if (np++)
                tcb_putc(args, ',');
            tcj_escape(args, s + pa, pb - pa);
            tcb_putc(args, ':');
            tcx_xml_value(args, tct_param_type(t, name, s + pa, pb - pa), s + v0, v1 - v0);
            i = after;
        }
        tcb_putc(args, '}');
        any = 1;
    }
    return found_finish(&f, ok && any, fn, ctx);
}

/* ---- Mistral: [TOOL_CALLS] followed by a JSON array/object, or name[CALL_ID]id[ARGS]{…} */

int tcx_mistral_calls(const struct tc_tools *t, const char *s, size_t n, tcx_call_fn fn,
                      void *ctx)
{
    size_t i = skip_ws(s, n, 0);
    if (i < n && (s[i] == '[' || s[i] == '{'))
        return tcx_json_calls(t, s + i, n - i, fn, ctx);
    size_t a = i;
    while (i < n && is_ident(s[i], i == a))
        i++;
    if (i == a || !tct_has(t, s + a, i - a))
        return 0;
    size_t b = i;
    if (starts(s, n, i, "[CALL_ID]")) {
        i += 9;
        while (i < n && (is_ident(s[i], 0) || (s[i] >= '0' && s[i] <= '9')))
            i++;
    }
    if (!starts(s, n, i, "[ARGS]"))
        return 0;
    i = skip_ws(s, n, i + 6);
    size_t e = json_value_end(s, n, i, 0);
    if (e == NPOS || s[i] != '{' || skip_ws(s, n, e) != n)
        return 0;
    struct found f = {0};
    struct tcb *args = found_add(&f, s + a, b - a);
    if (args)
        tcj_minify(args, s + i, e - i);
    return found_finish(&f, args != NULL, fn, ctx);
}

/* ---- Python-style and Gemma 4 values -> JSON ---- */

struct pyc {
    const char *s;
    size_t n, i;
    int depth;
};

static void put_utf8(struct tcb *b, unsigned cp)
{
    char u[4];
    if (cp < 0x80) {
        u[0] = (char)cp;
        tcb_put(b, u, 1);
    } else if (cp < 0x800) {
        u[0] = (char)(0xc0 | (cp >> 6));
        u[1] = (char)(0x80 | (cp & 63));
        tcb_put(b, u, 2);
    } else {
        if (cp >= 0xd800 && cp < 0xe000)
            cp = 0xfffd;
        u[0] = (char)(0xe0 | (cp >> 12));
        u[1] = (char)(0x80 | ((cp >> 6) & 63));
        u[2] = (char)(0x80 | (cp & 63));
        tcb_put(b, u, 3);
    }
}

static int hexval(char c)
{
    return c >= '0' && c <= '9' ? c - '0'
         : c >= 'a' && c <= 'f' ? c - 'a' + 10
         : c >= 'A' && c <= 'F' ? c - 'A' + 10
                                : -1;
}

#define GQ "<|\"|>" /* Gemma 4's string quote token */

/* A string in '…', "…" (Python escapes) or <|"|>…<|"|> (verbatim) -> JSON string. */
static int py_string(struct pyc *c, struct tcb *out)
{
    struct tcb raw = {0};
    int ok = 0;
    if (starts(c->s, c->n, c->i, GQ)) {
        const char *e = find(c->s, c->n, c->i + 5, GQ);
        if (e) {
            tcj_escape(out, c->s + c->i + 5, (size_t)(e - c->s) - c->i - 5);
            c->i = (size_t)(e - c->s) + 5;
            return 1;
        }
        return 0;
    }
    char q = c->s[c->i++];
    while (c->i < c->n) {
        char ch = c->s[c->i++];
        if (ch == q) {
            ok = 1;
            break;
        }
        if (ch != '\\') {
            tcb_putc(&raw, ch);
            continue;
        }
        if (c->i >= c->n)
            break;
        char e = c->s[c->i++], m = 0;
        switch (e) {
        case 'n': m = '\n'; break;
        case 't': m = '\t'; break;
        case 'r': m = '\r'; break;
        case 'b': m = '\b'; break;
        case 'f': m = '\f'; break;
        case '0': m = 0; break;
        default: m = e; break;
        }
        if (e == 'u' && c->i + 4 <= c->n) {
            int h0 = hexval(c->s[c->i]), h1 = hexval(c->s[c->i + 1]);
            int h2 = hexval(c->s[c->i + 2]), h3 = hexval(c->s[c->i + 3]);
            if (h0 < 0 || h1 < 0 || h2 < 0 || h3 < 0)
                break;
            put_utf8(&raw, (unsigned)(h0 << 12 | h1 << 8 | h2 << 4 | h3));
            c->i += 4;
        } else if (e == 'u') {
            break;
        } else if (e != '\n') { /* backslash-newline is a line continuation */
            tcb_putc(&raw, m); /* \\ \' \" and unknown escapes keep the character */
        }
    }
    if (ok)
        tcj_escape(out, raw.p ? raw.p : "", raw.n);
    ok = ok && !raw.oom;
    tcb_free(&raw);
    return ok;
}

static int py_value(struct pyc *c, struct tcb *out);

static void py_ws(struct pyc *c)
{
    c->i = skip_ws(c->s, c->n, c->i);
}

/* [a, b] / (a, b) lists and {k: v} dicts (keys: strings or bare identifiers). */
static int py_container(struct pyc *c, struct tcb *out)
{
    char open = c->s[c->i++];
    char close = open == '[' ? ']' : open == '(' ? ')' : '}';
    int dict = open == '{', first = 1;
    if (++c->depth > 64)
        return 0;
    tcb_putc(out, dict ? '{' : '[');
    for (;;) {
        py_ws(c);
        if (c->i >= c->n)
            return 0;
        if (c->s[c->i] == close) {
            c->i++;
            break;
        }
        if (!first) {
            if (c->s[c->i] != ',')
                return 0;
            c->i++;
            py_ws(c);
            if (c->i < c->n && c->s[c->i] == close) { /* trailing comma */
                c->i++;
                break;
            }
            tcb_putc(out, ',');
        }
        first = 0;
        if (dict) {
            if (c->i < c->n && is_ident(c->s[c->i], 1)) {
                size_t a = c->i;
                while (c->i < c->n && is_ident(c->s[c->i], 0))
                    c->i++;
                tcj_escape(out, c->s + a, c->i - a);
            } else if (c->i < c->n && (c->s[c->i] == '"' || c->s[c->i] == '\'' ||
                                       starts(c->s, c->n, c->i, GQ))) {
                if (!py_string(c, out))
                    return 0;
            } else {
                return 0;
            }
            py_ws(c);
            if (c->i >= c->n || c->s[c->i] != ':')
                return 0;
            c->i++;
            tcb_putc(out, ':');
        }
        if (!py_value(c, out))
            return 0;
    }
    c->depth--;
    tcb_putc(out, dict ? '}' : ']');
    return 1;
}

static int py_value(struct pyc *c, struct tcb *out)
{
    py_ws(c);
    if (c->i >= c->n)
        return 0;
    char ch = c->s[c->i];
    if (ch == '"' || ch == '\'' || starts(c->s, c->n, c->i, GQ))
        return py_string(c, out);
    if (ch == '[' || ch == '{' || ch == '(')
        return py_container(c, out);
    size_t a = c->i;
    if (ch == '-' || ch == '+' || (ch >= '0' && ch <= '9')) {
        if (ch == '+')
            a++, c->i++;
        c->i++;
        while (c->i < c->n && (strchr("0123456789.eE+-", c->s[c->i]) && c->s[c->i]))
            c->i++;
        if (!tcj_valid(c->s + a, c->i - a, 1))
            return 0;
        tcb_put(out, c->s + a, c->i - a);
        return 1;
    }
    while (c->i < c->n && is_ident(c->s[c->i], c->i == a))
        c->i++;
    size_t l = c->i - a;
    const char *w = c->s + a;
    if ((l == 4 && (!memcmp(w, "True", 4) || !memcmp(w, "true", 4))))
        tcb_puts(out, "true");
    else if (l == 5 && (!memcmp(w, "False", 5) || !memcmp(w, "false", 5)))
        tcb_puts(out, "false");
    else if (l == 4 && (!memcmp(w, "None", 4) || !memcmp(w, "null", 4)))
        tcb_puts(out, "null");
    else
        return 0;
    return 1;
}

/* name(k=v, …) at c->i; appends the call to f. */
static int py_call(const struct tc_tools *t, struct pyc *c, struct found *f)
{
    py_ws(c);
    size_t a = c->i;
    while (c->i < c->n && is_ident(c->s[c->i], c->i == a))
        c->i++;
    size_t b = c->i;
    py_ws(c);
    if (b == a || c->i >= c->n || c->s[c->i] != '(')
        return 0;
    c->i++;
    if (b - a == 5 && memcmp(c->s + a, "print", 5) == 0) { /* print(name(…)) */
        if (!py_call(t, c, f))
            return 0;
        py_ws(c);
        return c->i < c->n && c->s[c->i++] == ')';
    }
    if (!tct_has(t, c->s + a, b - a))
        return 0;
    struct tcb *args = found_add(f, c->s + a, b - a);
    if (!args)
        return 0;
    tcb_putc(args, '{');
    for (int k = 0;; k++) {
        py_ws(c);
        if (c->i < c->n && c->s[c->i] == ')') {
            c->i++;
            break;
        }
        if (k > 0) {
            if (c->i >= c->n || c->s[c->i] != ',')
                return 0;
            c->i++;
            py_ws(c);
            if (c->i < c->n && c->s[c->i] == ')') {
                c->i++;
                break;
            }
            tcb_putc(args, ',');
        }
        size_t ka = c->i;
        while (c->i < c->n && is_ident(c->s[c->i], c->i == ka) && c->s[c->i] != '.')
            c->i++;
        size_t kb = c->i;
        py_ws(c);
        if (kb == ka || c->i >= c->n || c->s[c->i] != '=')
            return 0; /* positional arguments have no name to put in JSON */
        c->i++;
        tcj_escape(args, c->s + ka, kb - ka);
        tcb_putc(args, ':');
        if (!py_value(c, args))
            return 0;
    }
    tcb_putc(args, '}');
    return 1;
}

int tcx_python_calls(const struct tc_tools *t, const char *s, size_t n, tcx_call_fn fn, void *ctx)
{
    struct pyc c = {s, n, 0, 0};
    struct found f = {0};
    int ok = 1, list = 0;
    py_ws(&c);
    if (c.i < n && s[c.i] == '[') {
        list = 1;
        c.i++;
    }
    for (;;) {
        while (c.i < n && (is_ws(s[c.i]) || s[c.i] == ',' || s[c.i] == ';'))
            c.i++;
        if (c.i >= n || (list && s[c.i] == ']'))
            break;
        if (!py_call(t, &c, &f)) {
            ok = 0;
            break;
        }
    }
    if (ok && list) {
        ok = c.i < n && s[c.i] == ']';
        c.i = skip_ws(s, n, c.i + 1);
        ok = ok && c.i >= n;
    }
    return found_finish(&f, ok, fn, ctx);
}

int tcx_gemma4_calls(const struct tc_tools *t, const char *s, size_t n, tcx_call_fn fn, void *ctx)
{
    struct pyc c = {s, n, 0, 0};
    struct found f = {0};
    int ok = 1;
    py_ws(&c);
    if (!starts(s, n, c.i, "call:")) {
        ok = 0;
    } else {
        c.i += 5;
        size_t a = c.i;
        while (c.i < n && is_ident(s[c.i], c.i == a))
            c.i++;
        size_t b = c.i;
        struct tcb *args = NULL;
        if (b > a && c.i < n && s[c.i] == '{' && tct_has(t, s + a, b - a))
            args = found_add(&f, s + a, b - a);
        ok = args && py_container(&c, args) && skip_ws(s, n, c.i) == n;
    }
    return found_finish(&f, ok, fn, ctx);
}

/* ---- DeepSeek: R1 "<｜tool▁call▁begin｜>function<｜tool▁sep｜>NAME\n```json\n{…}\n```<｜tool▁call▁end｜>"
 * and V3.1 "<｜tool▁call▁begin｜>NAME<｜tool▁sep｜>{…}<｜tool▁call▁end｜>", several per block ---- */

#define DS_BEGIN "<\xef\xbd\x9ctool\xe2\x96\x81" "call\xe2\x96\x81" "begin\xef\xbd\x9c>"
#define DS_SEP "<\xef\xbd\x9ctool\xe2\x96\x81" "sep\xef\xbd\x9c>"
#define DS_END "<\xef\xbd\x9ctool\xe2\x96\x81" "call\xe2\x96\x81" "end\xef\xbd\x9c>"

static int ds_call(const struct tc_tools *t, const char *s, size_t a, size_t b, struct found *f)
{
    const char *sep = find(s, b, a, DS_SEP);
    if (!sep)
        return 0;
    size_t x0 = skip_ws(s, b, a), x1 = (size_t)(sep - s);
    size_t y0 = skip_ws(s, b, x1 + strlen(DS_SEP)), y1 = b;
    while (x1 > x0 && is_ws(s[x1 - 1]))
        x1--;
    while (y1 > y0 && is_ws(s[y1 - 1]))
        y1--;
    size_t n0, n1, j0, j1;
    if (y0 < y1 && s[y0] == '{') { /* V3.1: the name before the separator */
        n0 = x0, n1 = x1, j0 = y0, j1 = y1;
    } else { /* R1: type before the separator, then the name line and a fenced JSON */
        const char *nl = memchr(s + y0, '\n', y1 - y0);
        if (!nl)
            return 0;
        n0 = y0;
        n1 = (size_t)(nl - s);
        while (n1 > n0 && is_ws(s[n1 - 1]))
            n1--;
        j0 = skip_ws(s, y1, n1);
        if (starts(s, y1, j0, "```json"))
            j0 += 7;
        else if (starts(s, y1, j0, "```"))
            j0 += 3;
        if (y1 >= j0 + 3 && memcmp(s + y1 - 3, "```", 3) == 0)
            y1 -= 3;
        j1 = y1;
        j0 = skip_ws(s, j1, j0);
        while (j1 > j0 && is_ws(s[j1 - 1]))
            j1--;
    }
    if (n1 <= n0 || j1 <= j0 || memchr(s + n0, '\n', n1 - n0) || !tct_has(t, s + n0, n1 - n0))
        return 0;
    size_t e = json_value_end(s, j1, j0, 1);
    if (e != j1)
        return 0;
    struct tcb *args = found_add(f, s + n0, n1 - n0);
    return args && put_args_value(args, s, j0, j1);
}

int tcx_deepseek_calls(const struct tc_tools *t, const char *s, size_t n, tcx_call_fn fn,
                       void *ctx)
{
    struct found f = {0};
    int ok = 1;
    size_t i = 0;
    for (;;) {
        i = skip_ws(s, n, i);
        if (i >= n)
            break;
        if (!starts(s, n, i, DS_BEGIN)) {
            ok = 0;
            break;
        }
        size_t a = i + strlen(DS_BEGIN);
        const char *e = find(s, n, a, DS_END);
        if (!e || !ds_call(t, s, a, (size_t)(e - s), &f)) {
            ok = 0;
            break;
        }
        i = (size_t)(e - s) + strlen(DS_END);
    }
    return found_finish(&f, ok, fn, ctx);
}

/* ---- repair: Python-style call objects ({'name': 'f', 'arguments': {'a': True},}) ---- */

int tcx_json_calls_doubled(const struct tc_tools *t, const char *s, size_t n, tcx_call_fn fn,
                           void *ctx)
{
    int r = tcx_json_calls(t, s, n, fn, ctx);
    if (r != 0)
        return r;
    size_t i = skip_ws(s, n, 0);
    if (i >= n || s[i] != '{')
        return 0;
    size_t j = skip_ws(s, n, i + 1);
    if (j >= n || s[j] != '{')
        return 0;
    size_t e = json_value_end(s, n, j, 0);
    if (e == NPOS)
        return 0;
    for (size_t k = e; k < n; k++)
        if (!is_ws(s[k]) && s[k] != '}')
            return 0;
    return tcx_json_calls(t, s + j, e - j, fn, ctx);
}

int tcx_json_calls_repair(const struct tc_tools *t, const char *s, size_t n, tcx_call_fn fn,
                          void *ctx)
{
    int r = tcx_json_calls_doubled(t, s, n, fn, ctx);
    if (r != 0)
        return r;
    struct pyc c = {s, n, 0, 0};
    struct tcb js = {0};
    int ok = 1, any = 0;
    for (;;) {
        while (c.i < n && (is_ws(s[c.i]) || s[c.i] == ';' || s[c.i] == ','))
            c.i++;
        if (c.i >= n)
            break;
        if ((s[c.i] != '{' && s[c.i] != '[') || !py_value(&c, &js)) {
            ok = 0;
            break;
        }
        tcb_putc(&js, '\n');
        any = 1;
    }
    if (js.oom)
        r = CERR_NOMEM;
    else if (ok && any)
        r = tcx_json_calls(t, js.p, js.n, fn, ctx);
    tcb_free(&js);
    return r;
}
