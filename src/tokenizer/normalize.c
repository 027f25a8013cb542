/* normalize.c — the normalizer ops of tokenizer.json (NFC/NFD/NFKC/NFKD through utf8proc,
 * Lowercase, Replace, Prepend, Strip) and SentencePiece's remove_extra_whitespaces.
 *
 * Ops run in order, ping-ponging between two buffers. Input is valid UTF-8 (the caller
 * repaired it). Offsets are not tracked: cinfer never needs them.
 */
#include <stdlib.h>
#include <string.h>
#include <utf8proc.h>

#include "tokenizer/tok_int.h"
#include "util/err.h"

/* Rust char::is_whitespace (Unicode White_Space). */
int tok_is_ws(uint32_t c);
int tok_is_ws(uint32_t c)
{
    return (c >= 9 && c <= 13) || c == 32 || c == 0x85 || c == 0xA0 || c == 0x1680 ||
           (c >= 0x2000 && c <= 0x200A) || c == 0x2028 || c == 0x2029 || c == 0x202F ||
           c == 0x205F || c == 0x3000;
}

static int all_ascii(const char *s, size_t n)
{
    for (size_t i = 0; i < n; i++)
        if ((unsigned char)s[i] >= 0x80)
            return 0;
    return 1;
}

static int norm_unicode(int type, const char *in, size_t n, struct tok_buf *out)
{
    if (all_ascii(in, n))
        return tok_buf_put(out, in, n);
    int opt = UTF8PROC_STABLE;
    switch (type) {
    case TN_NFC: opt |= UTF8PROC_COMPOSE; break;
    case TN_NFD: opt |= UTF8PROC_DECOMPOSE; break;
    case TN_NFKC: opt |= UTF8PROC_COMPOSE | UTF8PROC_COMPAT; break;
    default: opt |= UTF8PROC_DECOMPOSE | UTF8PROC_COMPAT; break;
    }
    utf8proc_uint8_t *dst = NULL;
    utf8proc_ssize_t r = utf8proc_map((const utf8proc_uint8_t *)in, (utf8proc_ssize_t)n, &dst,
                                      (utf8proc_option_t)opt);
    if (r < 0) {
        free(dst);
        /* cannot happen on repaired input; keep the text unchanged rather than fail */
        return tok_buf_put(out, in, n);
    }
    int rc = tok_buf_put(out, dst, (size_t)r);
    free(dst);
    return rc;
}

static int norm_lower(const char *in, size_t n, struct tok_buf *out)
{
    if (tok_buf_reserve(out, n * 2) != 0)
        return -1;
    const uint8_t *u = (const uint8_t *)in;
    for (size_t i = 0; i < n;) {
        if (u[i] < 0x80) {
            char c = (char)u[i];
            if (c >= 'A' && c <= 'Z')
                c = (char)(c + 32);
            out->p[out->n++] = c;
            i++;
            continue;
        }
        int l = tok_utf8_len(u + i, n - i);
        if (!l)
            l = 1;
        uint32_t cp = tok_utf8_cp(u + i, l);
        i += (size_t)l;
        if (tok_buf_reserve(out, 8) != 0)
            return -1;
        if (cp == 0x130) { /* İ lowercases to i + combining dot above */
            out->n += (size_t)tok_utf8_put('i', out->p + out->n);
            out->n += (size_t)tok_utf8_put(0x307, out->p + out->n);
            continue;
        }
        out->n += (size_t)tok_utf8_put((uint32_t)utf8proc_tolower((utf8proc_int32_t)cp),
                                       out->p + out->n);
    }
    out->p[out->n] = 0;
    return 0;
}

static int norm_replace(const struct tok_norm *op, const char *in, size_t n, struct tok_buf *out)
{
    if (op->re) {
        pcre2_match_data *md = pcre2_match_data_create_from_pattern(op->re, NULL);
        if (!md)
            return -1;
        size_t pos = 0, last = 0;
        while (pos <= n) {
            int rc = pcre2_match(op->re, (PCRE2_SPTR)in, n, pos, PCRE2_NO_UTF_CHECK, md, NULL);
            if (rc < 0)
                break;
            PCRE2_SIZE *ov = pcre2_get_ovector_pointer(md);
            if (tok_buf_put(out, in + last, ov[0] - last) || tok_buf_put(out, op->b, op->blen)) {
                pcre2_match_data_free(md);
                return -1;
            }
            last = ov[1];
            if (ov[1] == ov[0]) { /* empty match: step one character */
                if (ov[1] >= n)
                    break;
                int l = tok_utf8_len((const uint8_t *)in + ov[1], n - ov[1]);
                pos = ov[1] + (size_t)(l ? l : 1);
                if (tok_buf_put(out, in + last, pos - last)) {
                    pcre2_match_data_free(md);
                    return -1;
                }
                last = pos;
            } else
                pos = ov[1];
        }
        pcre2_match_data_free(md);
        return tok_buf_put(out, in + last, n - last);
    }
    if (op->alen == 0)
        return tok_buf_put(out, in, n);
    size_t last = 0;
    for (size_t i = 0; i + op->alen <= n;) {
        if (in[i] == op->a[0] && memcmp(in + i, op->a, op->alen) == 0) {
            if (tok_buf_put(out, in + last, i - last) || tok_buf_put(out, op->b, op->blen))
                return -1;
            i += op->alen;
            last = i;
        } else
            i++;
    }
    return tok_buf_put(out, in + last, n - last);
}

static int norm_strip(const struct tok_norm *op, const char *in, size_t n, struct tok_buf *out)
{
    const uint8_t *u = (const uint8_t *)in;
    size_t s = 0, e = n;
    if (op->left)
        while (s < e) {
            int l = tok_utf8_len(u + s, e - s);
            if (!l || !tok_is_ws(tok_utf8_cp(u + s, l)))
                break;
            s += (size_t)l;
        }
    if (op->right)
        while (e > s) {
            size_t k = e - 1;
            while (k > s && (u[k] & 0xC0) == 0x80)
                k--;
            int l = tok_utf8_len(u + k, e - k);
            if (!l || !tok_is_ws(tok_utf8_cp(u + k, l)))
                break;
            e = k;
        }
    return tok_buf_put(out, in + s, e - s);
}

/* SentencePiece remove_extra_whitespaces: drop leading/trailing spaces, squeeze runs. */
static int norm_spm_ws(const char *in, size_t n, struct tok_buf *out)
{
    size_t i = 0;
    while (i < n && in[i] == ' ')
        i++;
    if (tok_buf_reserve(out, n) != 0)
        return -1;
    int pend = 0;
    for (; i < n; i++) {
        if (in[i] == ' ') {
            pend = 1;
            continue;
        }
        if (pend)
            out->p[out->n++] = ' ';
        pend = 0;
        out->p[out->n++] = in[i];
    }
    out->p[out->n] = 0;
    return 0;
}

int tok_normalize(const struct tok *t, const char *in, size_t n, size_t orig, struct tok_buf *out,
                  struct tok_buf *tmp, struct cerr *e)
{
    out->n = 0;
    if (t->n_norm == 0)
        return tok_buf_put(out, in, n) ? cerr_set(e, CERR_NOMEM, "out of memory") : 0;
    /* ops alternate between out and tmp so that the last one writes out */
    struct tok_buf *dst = (t->n_norm & 1) ? out : tmp;
    struct tok_buf *other = (t->n_norm & 1) ? tmp : out;
    const char *src = in;
    size_t sn = n;
    for (int k = 0; k < t->n_norm; k++) {
        const struct tok_norm *op = &t->norm[k];
        dst->n = 0;
        int rc = 0;
        switch (op->type) {
        case TN_NFC: case TN_NFD: case TN_NFKC: case TN_NFKD:
            rc = norm_unicode(op->type, src, sn, dst);
            break;
        case TN_LOWER: rc = norm_lower(src, sn, dst); break;
        case TN_REPLACE: rc = norm_replace(op, src, sn, dst); break;
        case TN_PREPEND:
            rc = (sn && !(op->first_only && orig)) ? (tok_buf_put(dst, op->a, op->alen) || tok_buf_put(dst, src, sn))
                    : tok_buf_put(dst, src, sn);
            break;
        case TN_STRIP: rc = norm_strip(op, src, sn, dst); break;
        case TN_SPM_WS: rc = norm_spm_ws(src, sn, dst); break;
        case TN_BERT: {
            struct tok_buf scratch = {0};
            rc = tok_norm_bert(op, src, sn, dst, &scratch);
            free(scratch.p);
            break;
        }
        default: rc = tok_buf_put(dst, src, sn); break;
        }
        if (rc)
            return cerr_set(e, CERR_NOMEM, "out of memory while normalizing");
        src = dst->p;
        sn = dst->n;
        struct tok_buf *sw = dst;
        dst = other;
        other = sw;
    }
    return 0;
}
