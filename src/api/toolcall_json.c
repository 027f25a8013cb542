/* toolcall_json.c — byte buffer and the resumable JSON validator used by the tool-call
 * parsers (toolcall_int.h). The validator is strict RFC 8259 except that raw control bytes
 * inside strings are tolerated (models put real newlines in code arguments); tcj_minify
 * escapes them so what leaves the parser is strict JSON.
 */
#include "api/toolcall_int.h"

#include <stdlib.h>
#include <string.h>

/* ---- growable buffer ---- */

static int tcb_grow(struct tcb *b, size_t need)
{
    if (b->oom)
        return 0;
    if (b->n + need + 1 <= b->cap)
        return 1;
    size_t cap = b->cap ? b->cap : 64;
    while (cap < b->n + need + 1)
        cap *= 2;
    char *np = realloc(b->p, cap);
    if (!np) {
        b->oom = 1;
        return 0;
    }
    b->p = np;
    b->cap = cap;
    return 1;
}

void tcb_put(struct tcb *b, const char *s, size_t n)
{
    if (n == 0 || !tcb_grow(b, n))
        return;
    memcpy(b->p + b->n, s, n);
    b->n += n;
}

void tcb_putc(struct tcb *b, char c)
{
    tcb_put(b, &c, 1);
}

void tcb_puts(struct tcb *b, const char *s)
{
    tcb_put(b, s, strlen(s));
}

const char *tcb_cstr(struct tcb *b)
{
    if (!b->p && !tcb_grow(b, 0))
        return "";
    if (!b->p)
        return "";
    b->p[b->n] = 0;
    return b->p;
}

void tcb_free(struct tcb *b)
{
    free(b->p);
    memset(b, 0, sizeof *b);
}

/* ---- validator ---- */



static int is_ws(unsigned char c)
{
    return c == ' ' || c == '\n' || c == '\r' || c == '\t';
}

static int is_digit(unsigned char c)
{
    return c >= '0' && c <= '9';
}

static int is_hex(unsigned char c)
{
    return is_digit(c) || (c >= 'a' && c <= 'f') || (c >= 'A' && c <= 'F');
}

void tcj_init(struct tcj *j, int scalar_top)
{
    memset(j, 0, sizeof *j);
    j->st = S_VALUE;
    j->scalar_top = (uint8_t)(scalar_top != 0);
}

/* A value just ended (string, number, literal, or a container closed). */
static int value_end(struct tcj *j)
{
    if (j->depth == 0) {
        j->st = S_DONE;
        return TCJ_DONE;
    }
    j->st = S_AFTER;
    return TCJ_MORE;
}

static int number_end_ok(int st)
{
    return st == S_N_ZERO || st == S_N_INT || st == S_N_FRAC || st == S_N_EXPD;
}

int tcj_feed(struct tcj *j, unsigned char c)
{
    switch (j->st) {
    case S_VALUE:
    case S_ARR_FIRST:
        if (is_ws(c))
            return TCJ_MORE;
        if (j->st == S_ARR_FIRST && c == ']') {
            j->depth--;
            return value_end(j);
        }
        if (c == '{' || c == '[') {
            if (j->depth >= TCJ_MAX_DEPTH)
                return TCJ_ERR;
            j->stack[j->depth++] = (char)c;
            j->st = c == '{' ? S_OBJ_FIRST : S_ARR_FIRST;
            j->started = 1;
            return TCJ_MORE;
        }
        if (j->depth == 0 && !j->scalar_top)
            return TCJ_ERR;
        j->started = 1;
        if (c == '"') {
            j->st = S_STR;
            j->key = 0;
            return TCJ_MORE;
        }
        if (c == '-') {
            j->st = S_N_MINUS;
            return TCJ_MORE;
        }
        if (c == '0') {
            j->st = S_N_ZERO;
            return TCJ_MORE;
        }
        if (is_digit(c)) {
            j->st = S_N_INT;
            return TCJ_MORE;
        }
        j->lit = c == 't' ? "true" : c == 'f' ? "false" : c == 'n' ? "null" : NULL;
        if (!j->lit)
            return TCJ_ERR;
        j->lit_i = 1;
        j->st = S_LIT;
        return TCJ_MORE;
    case S_OBJ_FIRST:
    case S_OBJ_KEY:
        if (is_ws(c))
            return TCJ_MORE;
        if (c == '"') {
            j->st = S_STR;
            j->key = 1;
            return TCJ_MORE;
        }
        if (j->st == S_OBJ_FIRST && c == '}') {
            j->depth--;
            return value_end(j);
        }
        return TCJ_ERR;
    case S_COLON:
        if (is_ws(c))
            return TCJ_MORE;
        if (c == ':') {
            j->st = S_VALUE;
            return TCJ_MORE;
        }
        return TCJ_ERR;
    case S_AFTER:
        if (is_ws(c))
            return TCJ_MORE;
        if (c == ',') {
            j->st = j->stack[j->depth - 1] == '{' ? S_OBJ_KEY : S_VALUE;
            return TCJ_MORE;
        }
        if ((c == '}' && j->stack[j->depth - 1] == '{') ||
            (c == ']' && j->stack[j->depth - 1] == '[')) {
            j->depth--;
            return value_end(j);
        }
        return TCJ_ERR;
    case S_STR:
        if (c == '"') {
            if (j->key) {
                j->st = S_COLON;
                return TCJ_MORE;
            }
            return value_end(j);
        }
        if (c == '\\')
            j->st = S_ESC;
        return TCJ_MORE;
    case S_ESC:
        if (c == 'u') {
            j->uhex = 4;
            j->st = S_U;
            return TCJ_MORE;
        }
        if (!strchr("\"\\/bfnrt", c) || c == 0)
            return TCJ_ERR;
        j->st = S_STR;
        return TCJ_MORE;
    case S_U:
        if (!is_hex(c))
            return TCJ_ERR;
        if (--j->uhex == 0)
            j->st = S_STR;
        return TCJ_MORE;
    case S_LIT:
        if (c != (unsigned char)j->lit[j->lit_i])
            return TCJ_ERR;
        if (j->lit[++j->lit_i] == 0)
            return value_end(j);
        return TCJ_MORE;
    case S_N_MINUS:
        if (c == '0')
            j->st = S_N_ZERO;
        else if (is_digit(c))
            j->st = S_N_INT;
        else
            return TCJ_ERR;
        return TCJ_MORE;
    case S_N_DOT:
        if (!is_digit(c))
            return TCJ_ERR;
        j->st = S_N_FRAC;
        return TCJ_MORE;
    case S_N_EXP:
        if (c == '+' || c == '-') {
            j->st = S_N_EXPSIGN;
            return TCJ_MORE;
        }
        /* fall through */
    case S_N_EXPSIGN:
        if (!is_digit(c))
            return TCJ_ERR;
        j->st = S_N_EXPD;
        return TCJ_MORE;
    case S_N_ZERO:
    case S_N_INT:
    case S_N_FRAC:
    case S_N_EXPD:
        if (is_digit(c) && j->st != S_N_ZERO)
            return TCJ_MORE;
        if (c == '.' && (j->st == S_N_ZERO || j->st == S_N_INT)) {
            j->st = S_N_DOT;
            return TCJ_MORE;
        }
        if ((c == 'e' || c == 'E') && j->st != S_N_EXPD) {
            j->st = S_N_EXP;
            return TCJ_MORE;
        }
        if (j->depth == 0)
            return TCJ_ERR; /* a top-level number ends only at end of input */
        j->st = S_AFTER;
        return tcj_feed(j, c);
    default: /* S_DONE: nothing may follow (the caller stops at TCJ_DONE) */
        return TCJ_ERR;
    }
}

int tcj_complete(const struct tcj *j)
{
    return j->st == S_DONE || (j->depth == 0 && j->scalar_top && number_end_ok(j->st));
}

int tcj_valid(const char *s, size_t n, int scalar_top)
{
    struct tcj j;
    tcj_init(&j, scalar_top);
    size_t i = 0;
    for (; i < n; i++) {
        int r = tcj_feed(&j, (unsigned char)s[i]);
        if (r == TCJ_ERR) {
            if (!tcj_complete(&j))
                return 0;
            break; /* a top-level number ended; only whitespace may follow */
        }
        if (r == TCJ_DONE) {
            i++;
            break;
        }
    }
    if (!tcj_complete(&j))
        return 0;
    for (; i < n; i++)
        if (!is_ws((unsigned char)s[i]))
            return 0;
    return 1;
}

static void put_ctrl(struct tcb *out, unsigned char c)
{
    static const char hex[] = "0123456789abcdef";
    char u[6] = {'\\', 'u', '0', '0', hex[c >> 4], hex[c & 15]};
    switch (c) {
    case '\n': tcb_put(out, "\\n", 2); break;
    case '\r': tcb_put(out, "\\r", 2); break;
    case '\t': tcb_put(out, "\\t", 2); break;
    case '\b': tcb_put(out, "\\b", 2); break;
    case '\f': tcb_put(out, "\\f", 2); break;
    default: tcb_put(out, u, 6); break;
    }
}

/* Length of the valid UTF-8 sequence at s[0..n), or 0 when it is not one (overlong,
 * surrogate, above U+10FFFF, truncated). */
static size_t utf8_len(const unsigned char *s, size_t n)
{
    unsigned c = s[0];
    size_t l = c < 0x80 ? 1 : (c >> 5) == 6 ? 2 : (c >> 4) == 14 ? 3 : (c >> 3) == 30 ? 4 : 0;
    if (l == 0 || l > n || (l == 2 && c < 0xc2))
        return 0;
    for (size_t k = 1; k < l; k++)
        if ((s[k] & 0xc0) != 0x80)
            return 0;
    if (l == 3 && ((c == 0xe0 && s[1] < 0xa0) || (c == 0xed && s[1] >= 0xa0)))
        return 0;
    if (l == 4 && ((c == 0xf0 && s[1] < 0x90) || c > 0xf4 || (c == 0xf4 && s[1] >= 0x90)))
        return 0;
    return l;
}

static int hex4(const char *s, size_t n, size_t i, unsigned *out)
{
    if (i + 4 > n)
        return 0;
    unsigned v = 0;
    for (size_t k = 0; k < 4; k++) {
        unsigned char c = (unsigned char)s[i + k];
        if (!is_hex(c))
            return 0;
        v = v * 16 + (unsigned)(c <= '9' ? c - '0' : (c | 0x20) - 'a' + 10);
    }
    *out = v;
    return 1;
}

/* One step of the minifier inside a string at s[i] (not the closing quote): appends the
 * output for one token (a character, an escape, a UTF-8 sequence) and returns its length,
 * or 0 when the token needs bytes beyond n and `final` is 0. */
static size_t str_token(struct tcb *out, const char *s, size_t n, size_t i, int final)
{
    static const char FFFD[] = "\xef\xbf\xbd";
    unsigned char c = (unsigned char)s[i];
    if (c == '\\') {
        if (i + 1 >= n)
            return final ? (tcb_put(out, FFFD, 3), 1) : 0;
        if (s[i + 1] != 'u') {
            tcb_put(out, s + i, 2);
            return 2;
        }
        unsigned hi, lo;
        if (i + 6 > n && !final)
            return 0;
        if (!hex4(s, n, i + 2, &hi)) { /* not from a validated string */
            tcb_put(out, "\\ufffd", 6);
            return 2;
        }
        if (hi >= 0xd800 && hi < 0xdc00) {
            if (i + 12 > n && !final)
                return 0;
            if (i + 12 <= n && s[i + 6] == '\\' && s[i + 7] == 'u' && hex4(s, n, i + 8, &lo) &&
                lo >= 0xdc00 && lo < 0xe000) {
                tcb_put(out, s + i, 12);
                return 12;
            }
        }
        if ((hi >= 0xd800 && hi < 0xe000) || hi == 0) /* jansson refuses these */
            tcb_put(out, "\\ufffd", 6);
        else
            tcb_put(out, s + i, 6);
        return 6;
    }
    if (c < 0x20) {
        if (c == 0)
            tcb_put(out, FFFD, 3);
        else
            put_ctrl(out, c);
        return 1;
    }
    if (c < 0x80) {
        tcb_putc(out, (char)c);
        return 1;
    }
    size_t l = utf8_len((const unsigned char *)s + i, n - i);
    if (l) {
        tcb_put(out, s + i, l);
        return l;
    }
    if (!final && tcj_utf8_tail(s + i, n - i) == n - i)
        return 0; /* may still complete */
    tcb_put(out, FFFD, 3);
    return 1;
}

size_t tcm_feed(struct tcm *m, struct tcb *out, const char *s, size_t n, int final)
{
    size_t i = 0;
    while (i < n) {
        unsigned char c = (unsigned char)s[i];
        if (!m->in_str) {
            if (c == '"')
                m->in_str = 1;
            if (!is_ws(c))
                tcb_putc(out, (char)c);
            i++;
            continue;
        }
        if (c == '"') {
            m->in_str = 0;
            tcb_putc(out, '"');
            i++;
            continue;
        }
        size_t k = str_token(out, s, n, i, final);
        if (k == 0)
            break;
        i += k;
    }
    return i;
}

void tcj_minify(struct tcb *out, const char *s, size_t n)
{
    struct tcm m = {0};
    tcm_feed(&m, out, s, n, 1);
}

size_t tcj_utf8_tail(const char *s, size_t n)
{
    /* look back at most 3 bytes for a lead byte whose sequence runs past n */
    for (size_t k = 1; k <= 3 && k <= n; k++) {
        unsigned char c = (unsigned char)s[n - k];
        if ((c & 0xc0) == 0x80)
            continue; /* continuation byte: keep looking for the lead */
        size_t want = (c >> 5) == 6 ? 2 : (c >> 4) == 14 ? 3 : (c >> 3) == 30 ? 4 : 1;
        return want > k ? k : 0;
    }
    return 0;
}

int tcj_closable(const struct tcj *j)
{
    switch (j->st) {
    case S_OBJ_FIRST:
    case S_ARR_FIRST:
    case S_AFTER:
    case S_N_ZERO:
    case S_N_INT:
    case S_N_FRAC:
    case S_N_EXPD:
    case S_DONE:
        return 1;
    case S_STR:
        return !j->key;
    default:
        return 0;
    }
}

void tcj_close(const struct tcj *j, struct tcb *out)
{
    if (j->st == S_STR)
        tcb_putc(out, '"');
    for (int d = j->depth - 1; d >= 0; d--)
        tcb_putc(out, j->stack[d] == '{' ? '}' : ']');
}

void tcj_escape_body(struct tcb *out, const char *s, size_t n)
{
    size_t run = 0;
    for (size_t i = 0; i < n;) {
        unsigned char c = (unsigned char)s[i];
        size_t l = c < 0x80 ? 1 : utf8_len((const unsigned char *)s + i, n - i);
        if (c == '"' || c == '\\' || c < 0x20 || l == 0) {
            tcb_put(out, s + run, i - run);
            if (l == 0 || c == 0)
                tcb_put(out, "\xef\xbf\xbd", 3);
            else if (c < 0x20)
                put_ctrl(out, c);
            else
                tcb_putc(out, '\\'), tcb_putc(out, (char)c);
            run = ++i;
            continue;
        }
        i += l;
    }
    tcb_put(out, s + run, n - run);
}

void tcj_escape(struct tcb *out, const char *s, size_t n)
{
    tcb_putc(out, '"');
    tcj_escape_body(out, s, n);
    tcb_putc(out, '"');
}

int tcj_name_ok(const char *s, size_t n)
{
    if (n == 0)
        return 0;
    for (size_t i = 0; i < n;) {
        unsigned char c = (unsigned char)s[i];
        size_t l = c < 0x80 ? 1 : utf8_len((const unsigned char *)s + i, n - i);
        if (c < 0x20 || c == 0x7f || l == 0)
            return 0;
        i += l;
    }
    return 1;
}
