/* tmpl_lex.c — template source -> tokens, with Jinja's whitespace rules.
 *
 * Mirrors jinja2's lexer as transformers configures it: newlines normalised to "\n" and
 * one trailing newline dropped; trim_blocks (one "\n" after a block or comment tag is
 * removed); lstrip_blocks (spaces before a block/comment tag at the start of a line are
 * removed, `{%+` opts out); `{%-`/`-%}` strip all whitespace on that side; `{% raw %}`;
 * end tags are ignored while brackets are open (`{{ {'a': {}} }}`).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "template/tmpl_int.h"

struct lexer {
    struct arena *a;
    const char *s;
    size_t n, pos;
    int line;
    struct token *t;
    size_t nt, cap;
    struct cerr *e;
};

static int push(struct lexer *L, struct token tk)
{
    if (L->nt == L->cap) {
        size_t nc = L->cap ? L->cap * 2 : 256;
        struct token *nt = realloc(L->t, nc * sizeof *nt);
        if (!nt)
            return cerr_set(L->e, CERR_NOMEM, "out of memory lexing template");
        L->t = nt;
        L->cap = nc;
    }
    L->t[L->nt++] = tk;
    return 0;
}

static int count_lines(const char *p, size_t n)
{
    int c = 0;
    for (size_t i = 0; i < n; i++)
        c += p[i] == '\n';
    return c;
}

/* Length of the Python-whitespace character at p (0 if not whitespace). */
static size_t ws_at(const char *p, size_t n)
{
    if (!n)
        return 0;
    unsigned char c = (unsigned char)p[0];
    if (c < 0x80)
        return (c == ' ' || (c >= 9 && c <= 13) || (c >= 0x1c && c <= 0x1f)) ? 1 : 0;
    int32_t cp;
    size_t k = u8_decode(p, n, &cp);
    return py_isspace(cp) ? k : 0;
}

static size_t skip_ws(const char *s, size_t n, size_t pos)
{
    size_t k;
    while (pos < n && (k = ws_at(s + pos, n - pos)))
        pos += k;
    return pos;
}

/* Length of text after stripping trailing Python whitespace. */
static size_t rstrip_len(const char *p, size_t n)
{
    for (;;) {
        if (!n)
            return 0;
        size_t b = n - 1;
        while (b > 0 && ((unsigned char)p[b] & 0xC0) == 0x80 && n - b < 4)
            b--;
        if (ws_at(p + b, n - b) == n - b)
            n = b;
        else
            return n;
    }
}

static int emit_data(struct lexer *L, const char *p, size_t n)
{
    if (!n)
        return 0;
    struct token tk = {.type = TK_DATA, .line = L->line, .s = p, .n = n};
    return push(L, tk);
}

static int is_name_start(char c)
{
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_';
}

static int is_name_char(char c)
{
    return is_name_start(c) || (c >= '0' && c <= '9');
}

static int hexval(char c)
{
    if (c >= '0' && c <= '9')
        return c - '0';
    if (c >= 'a' && c <= 'f')
        return c - 'a' + 10;
    if (c >= 'A' && c <= 'F')
        return c - 'A' + 10;
    return -1;
}

/* Decodes a Python string literal body (unicode-escape rules) into the arena. */
static int lex_string(struct lexer *L, char q, struct token *tk)
{
    size_t start = L->pos + 1, i = start;
    while (i < L->n && L->s[i] != q) {
        if (L->s[i] == '\\' && i + 1 < L->n)
            i++;
        i++;
    }
    if (i >= L->n)
        return cerr_set(L->e, CERR_FORMAT, "line %d: unexpected end of string", L->line);
    size_t raw = i - start;
    char *out = arena_alloc(L->a, raw * 4 + 1);
    if (!out)
        return cerr_set(L->e, CERR_NOMEM, "out of memory lexing template");
    size_t o = 0;
    for (size_t k = start; k < i; k++) {
        char c = L->s[k];
        if (c != '\\' || k + 1 >= i) {
            out[o++] = c;
            continue;
        }
        char d = L->s[++k];
        int32_t cp = -1;
        switch (d) {
        case 'n': out[o++] = '\n'; break;
        case 't': out[o++] = '\t'; break;
        case 'r': out[o++] = '\r'; break;
        case '\\': out[o++] = '\\'; break;
        case '\'': out[o++] = '\''; break;
        case '"': out[o++] = '"'; break;
        case 'a': out[o++] = '\a'; break;
        case 'b': out[o++] = '\b'; break;
        case 'f': out[o++] = '\f'; break;
        case 'v': out[o++] = '\v'; break;
        case '\n': break;
        case 'x':
        case 'u':
        case 'U': {
            int nd = d == 'x' ? 2 : d == 'u' ? 4 : 8;
            int32_t v = 0;
            int ok = k + (size_t)nd < i;
            for (int j = 1; ok && j <= nd; j++) {
                int h = hexval(L->s[k + j]);
                if (h < 0)
                    ok = 0;
                else
                    v = v * 16 + h;
            }
            if (!ok || v > 0x10FFFF || v < 0)
                return cerr_set(L->e, CERR_FORMAT, "line %d: bad \\%c escape in string", L->line, d);
            cp = v;
            k += (size_t)nd;
            break;
        }
        default:
            if (d >= '0' && d <= '7') {
                int32_t v = d - '0';
                for (int j = 0; j < 2 && k + 1 < i && L->s[k + 1] >= '0' && L->s[k + 1] <= '7'; j++)
                    v = v * 8 + (L->s[++k] - '0');
                cp = v;
            } else {
                out[o++] = '\\';
                out[o++] = d;
            }
        }
        if (cp >= 0)
            o += u8_encode(out + o, cp);
    }
    out[o] = 0;
    tk->type = TK_STRING;
    tk->s = out;
    tk->n = o;
    L->line += count_lines(L->s + L->pos, i + 1 - L->pos);
    L->pos = i + 1;
    return 0;
}

static int lex_number(struct lexer *L, struct token *tk)
{
    size_t i = L->pos;
    char buf[128];
    size_t b = 0;
    int isf = 0;
    while (i < L->n && ((L->s[i] >= '0' && L->s[i] <= '9') || L->s[i] == '_')) {
        if (L->s[i] != '_' && b < sizeof buf - 1)
            buf[b++] = L->s[i];
        i++;
    }
    if (i + 1 < L->n && L->s[i] == '.' && L->s[i + 1] >= '0' && L->s[i + 1] <= '9') {
        isf = 1;
        buf[b < sizeof buf - 1 ? b++ : b] = '.';
        i++;
        while (i < L->n && ((L->s[i] >= '0' && L->s[i] <= '9') || L->s[i] == '_')) {
            if (L->s[i] != '_' && b < sizeof buf - 1)
                buf[b++] = L->s[i];
            i++;
        }
    }
    if (i < L->n && (L->s[i] == 'e' || L->s[i] == 'E')) {
        size_t j = i + 1;
        if (j < L->n && (L->s[j] == '+' || L->s[j] == '-'))
            j++;
        if (j < L->n && L->s[j] >= '0' && L->s[j] <= '9') {
            isf = 1;
            for (size_t k = i; k < j && b < sizeof buf - 1; k++)
                buf[b++] = L->s[k];
            i = j;
            while (i < L->n && L->s[i] >= '0' && L->s[i] <= '9') {
                if (b < sizeof buf - 1)
                    buf[b++] = L->s[i];
                i++;
            }
        }
    }
    buf[b] = 0;
    if (isf) {
        tk->type = TK_FLOAT;
        tk->f = strtod(buf, NULL);
    } else {
        tk->type = TK_INT;
        unsigned long long v = 0;
        for (size_t k = 0; k < b; k++) {
            if (v > (unsigned long long)INT64_MAX / 10)
                return cerr_set(L->e, CERR_FORMAT, "line %d: integer literal too large", L->line);
            v = v * 10 + (unsigned)(buf[k] - '0');
        }
        if (v > (unsigned long long)INT64_MAX)
            return cerr_set(L->e, CERR_FORMAT, "line %d: integer literal too large", L->line);
        tk->i = (int64_t)v;
    }
    L->pos = i;
    return 0;
}

static const char *const g_ops[] = {"//", "**", "==", "!=", "<=", ">=", "+", "-", "*", "/",
                                    "%", "~", "(", ")", "[", "]", "{", "}", ",", ".", ":",
                                    "|", "=", "<", ">", ";"};

/* Lexes the inside of a tag up to its end marker. kind: 0 var, 1 block. */
static int lex_tag(struct lexer *L, int kind)
{
    int balance = 0;
    for (;;) {
        L->line += count_lines(L->s + L->pos, skip_ws(L->s, L->n, L->pos) - L->pos);
        L->pos = skip_ws(L->s, L->n, L->pos);
        if (L->pos >= L->n)
            return cerr_set(L->e, CERR_FORMAT, "line %d: unexpected end of template, expected '%s'",
                            L->line, kind ? "%}" : "}}");
        const char *p = L->s + L->pos;
        size_t rest = L->n - L->pos;
        const char *endm = kind ? "%}" : "}}";
        if (!balance) {
            int sign = 0;
            size_t k = 0;
            if (rest >= 3 && (p[0] == '-' || p[0] == '+') && memcmp(p + 1, endm, 2) == 0) {
                sign = p[0];
                k = 3;
            } else if (rest >= 2 && memcmp(p, endm, 2) == 0) {
                k = 2;
            }
            if (k && !(sign == '+' && !kind)) {
                struct token tk = {.type = kind ? TK_BLOCK_END : TK_VAR_END, .line = L->line};
                int rc = push(L, tk);
                if (rc)
                    return rc;
                L->pos += k;
                if (sign == '-') {
                    size_t np = skip_ws(L->s, L->n, L->pos);
                    L->line += count_lines(L->s + L->pos, np - L->pos);
                    L->pos = np;
                } else if (kind && sign != '+' && L->pos < L->n && L->s[L->pos] == '\n') {
                    L->pos++;
                    L->line++;
                }
                return 0;
            }
        }
        struct token tk = {.line = L->line};
        if (is_name_start(*p)) {
            size_t k = 1;
            while (k < rest && is_name_char(p[k]))
                k++;
            tk.type = TK_NAME;
            tk.s = arena_strndup(L->a, p, k);
            if (!tk.s)
                return cerr_set(L->e, CERR_NOMEM, "out of memory lexing template");
            tk.n = k;
            L->pos += k;
        } else if (*p >= '0' && *p <= '9') {
            int rc = lex_number(L, &tk);
            if (rc)
                return rc;
        } else if (*p == '\'' || *p == '"') {
            int rc = lex_string(L, *p, &tk);
            if (rc)
                return rc;
        } else {
            size_t k = 0;
            for (size_t j = 0; j < sizeof g_ops / sizeof g_ops[0]; j++) {
                size_t ol = strlen(g_ops[j]);
                if (ol <= rest && memcmp(p, g_ops[j], ol) == 0) {
                    tk.s = g_ops[j];
                    k = ol;
                    break;
                }
            }
            if (!k)
                return cerr_set(L->e, CERR_FORMAT, "line %d: unexpected char '%c'", L->line,
                                (*p >= 32 && *p < 127) ? *p : '?');
            if (*p == '(' || *p == '[' || *p == '{')
                balance++;
            else if ((*p == ')' || *p == ']' || *p == '}') && balance > 0)
                balance--;
            tk.type = TK_OP;
            tk.n = k;
            L->pos += k;
        }
        int rc = push(L, tk);
        if (rc)
            return rc;
    }
}

/* Finds the earliest "{{", "{%" or "{#" at or after pos; returns n if none. */
static size_t find_tag(const char *s, size_t n, size_t pos)
{
    for (size_t i = pos; i + 1 < n; i++) {
        if (s[i] == '{' && (s[i + 1] == '{' || s[i + 1] == '%' || s[i + 1] == '#'))
            return i;
    }
    return n;
}

/* jinja2's raw markers at i (a "{%"): begin = {%[-+]? raw (-%}\s* | %}), no trim_blocks;
 * end = {%[-+]? endraw (+%} | -%}\s* | %}\n?). Returns 1 and *after on a match. */
static int raw_tag_at(const char *s, size_t n, size_t i, int end, size_t *after)
{
    size_t j = i + 2;
    if (j < n && (s[j] == '-' || s[j] == '+'))
        j++;
    j = skip_ws(s, n, j);
    const char *word = end ? "endraw" : "raw";
    size_t wl = strlen(word);
    if (j + wl > n || memcmp(s + j, word, wl) != 0)
        return 0;
    j = skip_ws(s, n, j + wl);
    if (end && j + 3 <= n && s[j] == '+' && s[j + 1] == '%' && s[j + 2] == '}') {
        *after = j + 3;
        return 1;
    }
    if (j + 3 <= n && s[j] == '-' && s[j + 1] == '%' && s[j + 2] == '}') {
        *after = skip_ws(s, n, j + 3);
        return 1;
    }
    if (j + 2 <= n && s[j] == '%' && s[j + 1] == '}') {
        *after = j + 2;
        if (end && *after < n && s[*after] == '\n')
            (*after)++;
        return 1;
    }
    return 0;
}

/* Applies the lstrip / '-' rules to data text before a tag that starts at tag. */
static size_t data_len_before_tag(const char *s, size_t start, size_t tag, int line_starting)
{
    size_t len = tag - start;
    char kind = s[tag + 1];
    char sign = s[tag + 2];
    if (sign == '-')
        return rstrip_len(s + start, len);
    if (sign != '+' && kind != '{') {
        size_t l_pos = len;
        while (l_pos > 0 && s[start + l_pos - 1] != '\n')
            l_pos--;
        if (l_pos > 0 || line_starting) {
            size_t j = start + l_pos, k;
            while (j < tag && (k = ws_at(s + j, tag - j)))
                j += k;
            if (j == tag && l_pos < len)
                return l_pos;
        }
    }
    return len;
}

static int lex_main(struct lexer *L)
{
    const char *s = L->s;
    size_t n = L->n;
    while (L->pos < n) {
        int line_starting = L->pos == 0 || s[L->pos - 1] == '\n';
        size_t tag = find_tag(s, n, L->pos);
        if (tag == n) {
            int rc = emit_data(L, s + L->pos, n - L->pos);
            if (rc)
                return rc;
            L->pos = n;
            break;
        }
        size_t dl = data_len_before_tag(s, L->pos, tag, line_starting);
        int rc = emit_data(L, s + L->pos, dl);
        if (rc)
            return rc;
        L->line += count_lines(s + L->pos, tag - L->pos);
        L->pos = tag + 2;
        char kind = s[tag + 1];
        if (L->pos < n && (s[L->pos] == '-' || s[L->pos] == '+'))
            L->pos++;
        size_t after;
        if (kind == '#') {
            size_t j = L->pos;
            while (j + 1 < n && !(s[j] == '#' && s[j + 1] == '}'))
                j++;
            if (j + 1 >= n)
                return cerr_set(L->e, CERR_FORMAT, "line %d: unclosed comment", L->line);
            int sign = j > L->pos ? s[j - 1] : 0;
            L->line += count_lines(s + L->pos, j - L->pos);
            L->pos = j + 2;
            if (sign == '-') {
                size_t np = skip_ws(s, n, L->pos);
                L->line += count_lines(s + L->pos, np - L->pos);
                L->pos = np;
            } else if (sign != '+' && L->pos < n && s[L->pos] == '\n') {
                L->pos++;
                L->line++;
            }
        } else if (kind == '%' && raw_tag_at(s, n, tag, 0, &after)) {
            /* verbatim until the first {% endraw %} */
            size_t j = after, end_after = 0, end = n;
            for (size_t k = find_tag(s, n, j); k < n; k = find_tag(s, n, k + 1)) {
                if (s[k + 1] == '%' && raw_tag_at(s, n, k, 1, &end_after)) {
                    end = k;
                    break;
                }
            }
            if (end == n)
                return cerr_set(L->e, CERR_FORMAT, "line %d: missing end of raw directive", L->line);
            int ls = j == 0 || s[j - 1] == '\n';
            rc = emit_data(L, s + j, data_len_before_tag(s, j, end, ls));
            if (rc)
                return rc;
            L->line += count_lines(s + tag, end_after - tag);
            L->pos = end_after;
        } else {
            struct token tk = {.type = kind == '{' ? TK_VAR_BEGIN : TK_BLOCK_BEGIN, .line = L->line};
            rc = push(L, tk);
            if (rc)
                return rc;
            rc = lex_tag(L, kind == '%');
            if (rc)
                return rc;
        }
    }
    struct token eof = {.type = TK_EOF, .line = L->line};
    return push(L, eof);
}

int tlex_run(struct arena *a, const char *src, size_t len, struct token **toks, size_t *ntok,
             struct cerr *e)
{
    /* normalise newlines, drop one trailing newline (keep_trailing_newline=False) */
    char *s = arena_alloc(a, len + 1);
    if (!s)
        return cerr_set(e, CERR_NOMEM, "out of memory lexing template");
    size_t n = 0;
    for (size_t i = 0; i < len; i++) {
        if (src[i] == '\r') {
            s[n++] = '\n';
            if (i + 1 < len && src[i + 1] == '\n')
                i++;
        } else {
            s[n++] = src[i];
        }
    }
    if (n && s[n - 1] == '\n')
        n--;
    s[n] = 0;
    struct lexer L = {.a = a, .s = s, .n = n, .line = 1, .e = e};
    int rc = lex_main(&L);
    if (rc) {
        free(L.t);
        return rc;
    }
    struct token *out = arena_alloc(a, L.nt * sizeof *out);
    if (!out) {
        free(L.t);
        return cerr_set(e, CERR_NOMEM, "out of memory lexing template");
    }
    memcpy(out, L.t, L.nt * sizeof *out);
    free(L.t);
    *toks = out;
    *ntok = L.nt;
    return 0;
}
