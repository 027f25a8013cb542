/* utf8.c — UTF-8 helpers, the GPT-2 byte<->unicode table, and small growable buffers.
 *
 * tok_utf8_repair() is the single place invalid input is handled: each maximal invalid
 * subpart becomes U+FFFD (the Unicode "substitution of maximal subparts" practice that
 * Python's bytes.decode("utf-8", "replace") and Rust's from_utf8_lossy follow).
 */
#include <stdlib.h>
#include <string.h>

#include "tokenizer/tok_int.h"

int tok_utf8_len(const uint8_t *s, size_t n)
{
    if (n == 0)
        return 0;
    uint8_t c = s[0];
    if (c < 0x80)
        return 1;
    if (c < 0xC2)
        return 0;
    if (c < 0xE0) {
        return (n >= 2 && (s[1] & 0xC0) == 0x80) ? 2 : 0;
    }
    if (c < 0xF0) {
        if (n < 3 || (s[1] & 0xC0) != 0x80 || (s[2] & 0xC0) != 0x80)
            return 0;
        if (c == 0xE0 && s[1] < 0xA0)
            return 0;
        if (c == 0xED && s[1] >= 0xA0)
            return 0; /* surrogates */
        return 3;
    }
    if (c < 0xF5) {
        if (n < 4 || (s[1] & 0xC0) != 0x80 || (s[2] & 0xC0) != 0x80 || (s[3] & 0xC0) != 0x80)
            return 0;
        if (c == 0xF0 && s[1] < 0x90)
            return 0;
        if (c == 0xF4 && s[1] >= 0x90)
            return 0;
        return 4;
    }
    return 0;
}

/* Length of the maximal invalid subpart at s (>= 1): a lead byte followed by the
 * continuation bytes that could still have formed a valid sequence. */
static size_t invalid_len(const uint8_t *s, size_t n)
{
    uint8_t c = s[0];
    int need;
    uint8_t lo = 0x80, hi = 0xBF;
    if (c >= 0xC2 && c < 0xE0)
        need = 1;
    else if (c >= 0xE0 && c < 0xF0) {
        need = 2;
        if (c == 0xE0)
            lo = 0xA0;
        if (c == 0xED)
            hi = 0x9F;
    } else if (c >= 0xF0 && c < 0xF5) {
        need = 3;
        if (c == 0xF0)
            lo = 0x90;
        if (c == 0xF4)
            hi = 0x8F;
    } else
        return 1;
    size_t i = 1;
    for (int k = 0; k < need && i < n; k++, i++) {
        uint8_t b = s[i];
        if (k == 0 ? (b < lo || b > hi) : ((b & 0xC0) != 0x80))
            break;
    }
    return i;
}

uint32_t tok_utf8_cp(const uint8_t *s, int len)
{
    switch (len) {
    case 1: return s[0];
    case 2: return ((uint32_t)(s[0] & 0x1F) << 6) | (s[1] & 0x3F);
    case 3: return ((uint32_t)(s[0] & 0x0F) << 12) | ((uint32_t)(s[1] & 0x3F) << 6) | (s[2] & 0x3F);
    default:
        return ((uint32_t)(s[0] & 0x07) << 18) | ((uint32_t)(s[1] & 0x3F) << 12) |
               ((uint32_t)(s[2] & 0x3F) << 6) | (s[3] & 0x3F);
    }
}

int tok_utf8_put(uint32_t cp, char *out)
{
    uint8_t *o = (uint8_t *)out;
    if (cp < 0x80) {
        o[0] = (uint8_t)cp;
        return 1;
    }
    if (cp < 0x800) {
        o[0] = (uint8_t)(0xC0 | (cp >> 6));
        o[1] = (uint8_t)(0x80 | (cp & 0x3F));
        return 2;
    }
    if (cp < 0x10000) {
        o[0] = (uint8_t)(0xE0 | (cp >> 12));
        o[1] = (uint8_t)(0x80 | ((cp >> 6) & 0x3F));
        o[2] = (uint8_t)(0x80 | (cp & 0x3F));
        return 3;
    }
    o[0] = (uint8_t)(0xF0 | (cp >> 18));
    o[1] = (uint8_t)(0x80 | ((cp >> 12) & 0x3F));
    o[2] = (uint8_t)(0x80 | ((cp >> 6) & 0x3F));
    o[3] = (uint8_t)(0x80 | (cp & 0x3F));
    return 4;
}

char *tok_utf8_repair(const char *s, size_t n, size_t *out_len, int *oom)
{
    const uint8_t *u = (const uint8_t *)s;
    size_t i = 0;
    *oom = 0;
    while (i < n) {
        if (u[i] < 0x80) {
            i++;
            continue;
        }
        int l = tok_utf8_len(u + i, n - i);
        if (!l)
            break;
        i += (size_t)l;
    }
    if (i == n)
        return NULL;
    /* worst case: every byte becomes 3 bytes */
    char *out = malloc(n * 3 + 1);
    if (!out) {
        *oom = 1;
        return NULL;
    }
    memcpy(out, s, i);
    size_t o = i;
    while (i < n) {
        int l = tok_utf8_len(u + i, n - i);
        if (l) {
            memcpy(out + o, s + i, (size_t)l);
            o += (size_t)l;
            i += (size_t)l;
        } else {
            i += invalid_len(u + i, n - i);
            memcpy(out + o, "\xEF\xBF\xBD", 3);
            o += 3;
        }
    }
    out[o] = 0;
    *out_len = o;
    return out;
}

/* GPT-2's bytes_to_unicode(): printable bytes map to themselves, the other 68 to
 * U+0100.. in byte order. */
static int is_printable_byte(int b)
{
    return (b >= 33 && b <= 126) || (b >= 161 && b <= 172) || (b >= 174 && b <= 255);
}

uint32_t tok_byte_to_cp(uint8_t b)
{
    if (is_printable_byte(b))
        return b;
    uint32_t k = 0;
    for (int i = 0; i < b; i++)
        if (!is_printable_byte(i))
            k++;
    return 256 + k;
}

int tok_cp_to_byte(uint32_t cp)
{
    if (cp < 256)
        return is_printable_byte((int)cp) ? (int)cp : -1;
    if (cp >= 256 + 68)
        return -1;
    uint32_t k = cp - 256;
    for (int i = 0; i < 256; i++)
        if (!is_printable_byte(i) && k-- == 0)
            return i;
    return -1;
}

int tok_buf_reserve(struct tok_buf *b, size_t extra)
{
    if (b->n + extra + 1 <= b->cap)
        return 0;
    size_t cap = b->cap ? b->cap : 256;
    while (cap < b->n + extra + 1)
        cap *= 2;
    char *p = realloc(b->p, cap);
    if (!p)
        return -1;
    b->p = p;
    b->cap = cap;
    return 0;
}

int tok_buf_put(struct tok_buf *b, const void *s, size_t n)
{
    if (tok_buf_reserve(b, n) != 0)
        return -1;
    if (n)
        memcpy(b->p + b->n, s, n);
    b->n += n;
    b->p[b->n] = 0;
    return 0;
}

int tok_spans_push(struct tok_spans *s, size_t off, size_t len, size_t orig)
{
    if (s->n == s->cap) {
        size_t cap = s->cap ? s->cap * 2 : 64;
        struct tok_span *v = realloc(s->v, cap * sizeof *v);
        if (!v)
            return -1;
        s->v = v;
        s->cap = cap;
    }
    s->v[s->n++] = (struct tok_span){off, len, orig};
    return 0;
}
