/* decoder.c — ids -> text through the decoder chain of tokenizer.json.
 *
 * Mirrors HF tokenizers: the token strings (added-token content or vocabulary piece,
 * specials dropped with TOK_SKIP_SPECIAL) go through ByteLevel, Replace, ByteFallback,
 * Fuse, Strip and Metaspace in order, then are concatenated. ByteLevel turns invalid byte
 * runs into U+FFFD per maximal subpart; ByteFallback into one U+FFFD per byte, as upstream.
 * With no decoder the tokens are joined with spaces (upstream behaviour).
 */
#include <stdlib.h>
#include <string.h>

#include "tokenizer/tok_int.h"
#include "util/err.h"

/* A list of strings stored back to back in one buffer. */
struct slist {
    struct tok_buf b;
    size_t *off, *len;
    size_t n, cap;
};

static int sl_push(struct slist *l, const char *s, size_t n)
{
    if (l->n == l->cap) {
        size_t c = l->cap ? l->cap * 2 : 64;
        size_t *o = realloc(l->off, c * sizeof *o);
        if (!o)
            return -1;
        l->off = o;
        size_t *q = realloc(l->len, c * sizeof *q);
        if (!q)
            return -1;
        l->len = q;
        l->cap = c;
    }
    l->off[l->n] = l->b.n;
    l->len[l->n] = n;
    l->n++;
    return tok_buf_put(&l->b, s, n);
}

/* Extends the last string by s[0..n) (it must be the last thing in the buffer). */
static int sl_append(struct slist *l, const char *s, size_t n)
{
    if (tok_buf_put(&l->b, s, n))
        return -1;
    l->len[l->n - 1] += n;
    return 0;
}

static void sl_free(struct slist *l)
{
    free(l->b.p);
    free(l->off);
    free(l->len);
    memset(l, 0, sizeof *l);
}

static void sl_reset(struct slist *l)
{
    l->n = 0;
    l->b.n = 0;
}

#define STR(l, i) ((l)->b.p + (l)->off[i])

static int dec_bytelevel(const struct slist *in, struct slist *out)
{
    struct tok_buf raw = {0};
    int rc = 0;
    for (size_t i = 0; i < in->n && !rc; i++) {
        const uint8_t *s = (const uint8_t *)STR(in, i);
        size_t n = in->len[i], start = raw.n;
        int ok = 1;
        for (size_t k = 0; k < n;) {
            int l = tok_utf8_len(s + k, n - k);
            int b = l ? tok_cp_to_byte(tok_utf8_cp(s + k, l)) : -1;
            if (b < 0) {
                ok = 0;
                break;
            }
            char c = (char)b;
            if (tok_buf_put(&raw, &c, 1)) {
                rc = -1;
                break;
            }
            k += (size_t)l;
        }
        if (!ok) {
            raw.n = start;
            rc = tok_buf_put(&raw, s, n);
        }
    }
    if (!rc) {
        size_t rl = 0;
        int oom = 0;
        char *fixed = tok_utf8_repair(raw.p ? raw.p : "", raw.n, &rl, &oom);
        if (oom)
            rc = -1;
        else if (fixed) {
            rc = sl_push(out, fixed, rl);
            free(fixed);
        } else
            rc = sl_push(out, raw.p ? raw.p : "", raw.n);
    }
    free(raw.p);
    return rc;
}

static int dec_replace(const struct tok_dec *op, const struct slist *in, struct slist *out)
{
    for (size_t i = 0; i < in->n; i++) {
        const char *s = STR(in, i);
        size_t n = in->len[i], last = 0;
        if (sl_push(out, "", 0))
            return -1;
        if (op->alen)
            for (size_t k = 0; k + op->alen <= n;) {
                if (memcmp(s + k, op->a, op->alen) == 0) {
                    if (sl_append(out, s + last, k - last) || sl_append(out, op->b, op->blen))
                        return -1;
                    k += op->alen;
                    last = k;
                } else
                    k++;
            }
        if (sl_append(out, s + last, n - last))
            return -1;
    }
    return 0;
}

static int byte_token(const char *s, size_t n)
{
    if (n != 6 || memcmp(s, "<0x", 3) != 0 || s[5] != '>')
        return -1;
    int v = 0;
    for (int k = 3; k < 5; k++) {
        char c = s[k];
        int d = (c >= '0' && c <= '9') ? c - '0' : (c >= 'A' && c <= 'F') ? c - 'A' + 10
              : (c >= 'a' && c <= 'f') ? c - 'a' + 10 : -1;
        if (d < 0)
            return -1;
        v = v * 16 + d;
    }
    return v;
}

static int flush_bytes(struct tok_buf *pend, struct slist *out)
{
    if (!pend->n)
        return 0;
    size_t rl;
    int oom;
    char *fixed = tok_utf8_repair(pend->p, pend->n, &rl, &oom);
    int rc = 0;
    if (oom)
        rc = -1;
    else if (!fixed)
        rc = sl_push(out, pend->p, pend->n);
    else {
        free(fixed);
        for (size_t k = 0; k < pend->n && !rc; k++)
            rc = sl_push(out, "\xEF\xBF\xBD", 3);
    }
    pend->n = 0;
    return rc;
}

static int dec_bytefallback(const struct slist *in, struct slist *out)
{
    struct tok_buf pend = {0};
    int rc = 0;
    for (size_t i = 0; i < in->n && !rc; i++) {
        int b = byte_token(STR(in, i), in->len[i]);
        if (b >= 0) {
            char c = (char)b;
            rc = tok_buf_put(&pend, &c, 1);
            continue;
        }
        rc = flush_bytes(&pend, out);
        if (!rc)
            rc = sl_push(out, STR(in, i), in->len[i]);
    }
    if (!rc)
        rc = flush_bytes(&pend, out);
    free(pend.p);
    return rc;
}

static int dec_fuse(const struct slist *in, struct slist *out)
{
    if (sl_push(out, "", 0))
        return -1;
    for (size_t i = 0; i < in->n; i++)
        if (sl_append(out, STR(in, i), in->len[i]))
            return -1;
    return 0;
}

static int dec_strip(const struct tok_dec *op, const struct slist *in, struct slist *out)
{
    for (size_t i = 0; i < in->n; i++) {
        const char *s = STR(in, i);
        size_t a = 0, z = in->len[i];
        for (int k = 0; k < op->start && a + op->alen <= z && memcmp(s + a, op->a, op->alen) == 0;
             k++)
            a += op->alen;
        for (int k = 0; k < op->stop && z >= a + op->alen &&
                        memcmp(s + z - op->alen, op->a, op->alen) == 0;
             k++)
            z -= op->alen;
        if (sl_push(out, s + a, z - a))
            return -1;
    }
    return 0;
}

static int dec_metaspace(const struct tok_dec *op, const struct slist *in, struct slist *out)
{
    for (size_t i = 0; i < in->n; i++) {
        const char *s = STR(in, i);
        size_t n = in->len[i], last = 0;
        if (sl_push(out, "", 0))
            return -1;
        for (size_t k = 0; k + op->repl_len <= n;) {
            if (memcmp(s + k, op->repl, op->repl_len) == 0) {
                if (sl_append(out, s + last, k - last))
                    return -1;
                if (!(i == 0 && op->prepend) && sl_append(out, " ", 1))
                    return -1;
                k += op->repl_len;
                last = k;
            } else
                k++;
        }
        if (sl_append(out, s + last, n - last))
            return -1;
    }
    return 0;
}

/* transformers' clean_up_tokenization(): drops the space before . ? ! , and English
 * contractions, in this order, on the whole text. In place (the text only shrinks). */
static void cleanup_spaces(struct tok_buf *b)
{
    static const char *const pat[][2] = {
        {" .", "."},     {" ?", "?"},     {" !", "!"},     {" ,", ","},     {" ' ", "'"},
        {" n't", "n't"}, {" 'm", "'m"},   {" 's", "'s"},   {" 've", "'ve"}, {" 're", "'re"},
    };
    for (size_t k = 0; k < sizeof pat / sizeof pat[0]; k++) {
        size_t pl = strlen(pat[k][0]), rl = strlen(pat[k][1]), w = 0;
        for (size_t i = 0; i < b->n;) {
            if (i + pl <= b->n && memcmp(b->p + i, pat[k][0], pl) == 0) {
                memmove(b->p + w, pat[k][1], rl);
                w += rl;
                i += pl;
            } else
                b->p[w++] = b->p[i++];
        }
        b->n = w;
        b->p[w] = 0;
    }
}

static int dec_wordpiece(const struct tok_dec *op, const struct slist *in, struct slist *out)
{
    static const char *const pat[][2] = {
        {" .", "."},     {" ?", "?"},     {" !", "!"},     {" ,", ","},     {" ' ", "'"},
        {" n't", "n't"}, {" 'm", "'m"},   {" do not", " don't"}, {" 's", "'s"},
        {" 've", "'ve"}, {" 're", "'re"},
    };
    struct tok_buf b = {0};
    for (size_t i = 0; i < in->n; i++) {
        const char *s = STR(in, i);
        size_t n = in->len[i];
        b.n = 0;
        if (i != 0) {
            if (n >= op->alen && memcmp(s, op->a, op->alen) == 0) {
                s += op->alen;
                n -= op->alen;
            } else if (tok_buf_put(&b, " ", 1))
                goto oom;
        }
        if (tok_buf_put(&b, s, n))
            goto oom;
        if (op->start)
            for (size_t k = 0; k < sizeof pat / sizeof pat[0]; k++) {
                size_t pl = strlen(pat[k][0]), rl = strlen(pat[k][1]);
                struct tok_buf r = {0};
                for (size_t q = 0; q < b.n;) {
                    if (q + pl <= b.n && memcmp(b.p + q, pat[k][0], pl) == 0) {
                        if (tok_buf_put(&r, pat[k][1], rl)) {
                            free(r.p);
                            goto oom;
                        }
                        q += pl;
                    } else if (tok_buf_put(&r, b.p + q, 1)) {
                        free(r.p);
                        goto oom;
                    } else
                        q++;
                }
                free(b.p);
                b = r;
                if (!b.p && tok_buf_put(&b, "", 0))
                    goto oom;
            }
        if (sl_push(out, b.p ? b.p : "", b.n))
            goto oom;
    }
    free(b.p);
    return 0;
oom:
    free(b.p);
    return -1;
}

int tok_decode_ids(const struct tok *t, const int32_t *ids, int n, int flags,
                   struct tok_buf *out, struct cerr *e)
{
    struct slist a = {0}, b = {0};
    int rc = 0;
    for (int i = 0; i < n && !rc; i++) {
        int32_t id = ids[i];
        if (id < 0 || id >= t->n_vocab || !t->piece[id]) {
            sl_free(&a);
            return cerr_set(e, CERR_INVALID, "token id %d is out of range (vocabulary has %d)",
                            (int)id, t->n_vocab);
        }
        if ((flags & TOK_SKIP_SPECIAL) && (t->attr[id] & TOKA_CONTROL))
            continue;
        rc = sl_push(&a, t->piece[id], t->piece_len[id]);
    }
    struct slist *cur = &a, *nx = &b;
    for (int k = 0; k < t->n_dec && !rc; k++) {
        const struct tok_dec *op = &t->dec[k];
        sl_reset(nx);
        switch (op->type) {
        case TD_BYTELEVEL: rc = dec_bytelevel(cur, nx); break;
        case TD_REPLACE: rc = dec_replace(op, cur, nx); break;
        case TD_BYTEFALLBACK: rc = dec_bytefallback(cur, nx); break;
        case TD_FUSE: rc = dec_fuse(cur, nx); break;
        case TD_STRIP: rc = dec_strip(op, cur, nx); break;
        case TD_METASPACE: rc = dec_metaspace(op, cur, nx); break;
        case TD_WORDPIECE: rc = dec_wordpiece(op, cur, nx); break;
        default: continue;
        }
        struct slist *sw = cur;
        cur = nx;
        nx = sw;
    }
    out->n = 0;
    for (size_t i = 0; i < cur->n && !rc; i++) {
        if (i && !t->has_decoder)
            rc = tok_buf_put(out, " ", 1);
        if (!rc)
            rc = tok_buf_put(out, STR(cur, i), cur->len[i]);
    }
    if (!rc)
        rc = tok_buf_put(out, "", 0);
    if (!rc && t->cleanup)
        cleanup_spaces(out);
    sl_free(&a);
    sl_free(&b);
    if (rc)
        return cerr_set(e, CERR_NOMEM, "out of memory while decoding");
    if (flags & TOK_RAW_BYTES)
        return 0;
    /* vocabularies from GGUF files may hold invalid UTF-8: never hand it out */
    size_t rl;
    int oom;
    char *fixed = tok_utf8_repair(out->p, out->n, &rl, &oom);
    if (oom)
        return cerr_set(e, CERR_NOMEM, "out of memory while decoding");
    if (fixed) {
        free(out->p);
        out->p = fixed;
        out->n = rl;
        out->cap = rl + 1;
    }
    return 0;
}
