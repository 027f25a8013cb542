/* wordpiece.c — BERT-style tokenization: BertNormalizer, WordPiece model and decoder.
 *
 * Semantics of HF tokenizers: the normalizer drops NUL/U+FFFD/control characters, maps
 * whitespace to ' ', pads CJK ideographs with spaces, strips accents (NFD, drop Mn) and
 * lowercases; the model matches the longest vocabulary prefix greedily, continuation
 * pieces carrying the "##" prefix, and a word with an unmatched rest (or longer than
 * max_input_chars_per_word) becomes [UNK]; the decoder joins pieces with spaces, gluing
 * "##" pieces to the previous one. GGUF files store the vocabulary in llama.cpp's
 * "phantom space" spelling (word-initial pieces with U+2581, continuations bare); the
 * loader respells it back, so one code path serves both.
 */
#include <stdlib.h>
#include <string.h>
#include <utf8proc.h>

#include "tokenizer/tok_int.h"
#include "util/err.h"

int tok_is_ws(uint32_t c);

/* Rust's char::is_other() minus Cn: a code point unassigned in the system utf8proc's
 * Unicode version is more likely a newer character (an emoji) than a true hole. */
static int is_other(uint32_t c)
{
    utf8proc_category_t k = utf8proc_category((utf8proc_int32_t)c);
    return k == UTF8PROC_CATEGORY_CC || k == UTF8PROC_CATEGORY_CF || k == UTF8PROC_CATEGORY_CS ||
           k == UTF8PROC_CATEGORY_CO;
}

static int is_cjk(uint32_t c)
{
    return (c >= 0x4E00 && c <= 0x9FFF) || (c >= 0x3400 && c <= 0x4DBF) ||
           (c >= 0x20000 && c <= 0x2A6DF) || (c >= 0x2A700 && c <= 0x2B73F) ||
           (c >= 0x2B740 && c <= 0x2B81F) || (c >= 0x2B920 && c <= 0x2CEAF) ||
           (c >= 0xF900 && c <= 0xFAFF) || (c >= 0x2F800 && c <= 0x2FA1F);
}

int tok_norm_bert(const struct tok_norm *op, const char *in, size_t n, struct tok_buf *out,
                  struct tok_buf *tmp)
{
    int clean = op->left, chinese = op->right, strip = op->first_only, lower = (int)op->alen;
    /* pass 1: clean text + chinese chars, into tmp */
    tmp->n = 0;
    if (tok_buf_reserve(tmp, n * 3 + 8))
        return -1;
    const uint8_t *u = (const uint8_t *)in;
    for (size_t i = 0; i < n;) {
        int l = tok_utf8_len(u + i, n - i);
        if (!l)
            l = 1;
        uint32_t c = tok_utf8_cp(u + i, l);
        i += (size_t)l;
        if (clean) {
            if (c == 0 || c == 0xFFFD || (c != '\t' && c != '\n' && c != '\r' && is_other(c)))
                continue;
            if (c == '\t' || c == '\n' || c == '\r' || tok_is_ws(c))
                c = ' ';
        }
        if (tok_buf_reserve(tmp, 8))
            return -1;
        if (chinese && is_cjk(c)) {
            tmp->p[tmp->n++] = ' ';
            tmp->n += (size_t)tok_utf8_put(c, tmp->p + tmp->n);
            tmp->p[tmp->n++] = ' ';
        } else
            tmp->n += (size_t)tok_utf8_put(c, tmp->p + tmp->n);
    }
    tmp->p[tmp->n] = 0;
    const char *src = tmp->p;
    size_t sn = tmp->n;
    utf8proc_uint8_t *nfd = NULL;
    if (strip) {
        int opt = UTF8PROC_STABLE | UTF8PROC_DECOMPOSE;
        utf8proc_ssize_t r = utf8proc_map((const utf8proc_uint8_t *)src, (utf8proc_ssize_t)sn,
                                          &nfd, (utf8proc_option_t)opt);
        if (r >= 0) {
            src = (const char *)nfd;
            sn = (size_t)r;
        }
    }
    out->n = 0;
    if (tok_buf_reserve(out, sn * 2 + 8)) {
        free(nfd);
        return -1;
    }
    const uint8_t *s = (const uint8_t *)src;
    for (size_t i = 0; i < sn;) {
        int l = tok_utf8_len(s + i, sn - i);
        if (!l)
            l = 1;
        uint32_t c = tok_utf8_cp(s + i, l);
        i += (size_t)l;
        if (strip && utf8proc_category((utf8proc_int32_t)c) == UTF8PROC_CATEGORY_MN)
            continue;
        if (tok_buf_reserve(out, 8)) {
            free(nfd);
            return -1;
        }
        if (lower) {
            if (c == 0x130) {
                out->n += (size_t)tok_utf8_put('i', out->p + out->n);
                c = 0x307;
            } else
                c = (uint32_t)utf8proc_tolower((utf8proc_int32_t)c);
        }
        out->n += (size_t)tok_utf8_put(c, out->p + out->n);
    }
    out->p[out->n] = 0;
    free(nfd);
    return 0;
}

int tok_wordpiece_word(const struct tok *t, struct tok_scratch *sc, const char *w, size_t n,
                       struct cerr *e)
{
    if (n == 0)
        return 0;
    size_t chars = 0;
    for (size_t i = 0; i < n; i++)
        chars += ((uint8_t)w[i] & 0xC0) != 0x80;
    size_t mark = sc->n_ids;
    if (chars <= (size_t)t->wp_max_chars) {
        char stackbuf[256];
        char *key = n + 3 <= sizeof stackbuf ? stackbuf : malloc(n + 3);
        if (!key)
            return cerr_set(e, CERR_NOMEM, "out of memory");
        memcpy(key, "##", 2);
        size_t start = 0;
        int bad = 0;
        while (start < n) {
            size_t end = n;
            int32_t id = -1;
            while (start < end) {
                if (start == 0)
                    id = tok_map_get(&t->vocab, w, (uint32_t)end);
                else {
                    memcpy(key + 2, w + start, end - start);
                    id = tok_map_get(&t->vocab, key, (uint32_t)(end - start + 2));
                }
                if (id >= 0)
                    break;
                do /* drop one character */
                    end--;
                while (end > start && ((uint8_t)w[end] & 0xC0) == 0x80);
            }
            if (id < 0) {
                bad = 1;
                break;
            }
            if (tok_push_id(sc, id)) {
                if (key != stackbuf)
                    free(key);
                return cerr_set(e, CERR_NOMEM, "out of memory");
            }
            start = end;
        }
        if (key != stackbuf)
            free(key);
        if (!bad)
            return 0;
    }
    sc->n_ids = mark;
    if (t->unk_id < 0)
        return cerr_set(e, CERR_FORMAT, "WordPiece word has no match and the model has no unk");
    return tok_push_id(sc, t->unk_id) ? cerr_set(e, CERR_NOMEM, "out of memory") : 0;
}
