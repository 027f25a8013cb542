/* pretok.c — pre-tokenizers: cut normalized text into the words the model encodes.
 *
 * Implements tokenizer.json's Split (regex/string, all five behaviours, invert),
 * ByteLevel (optional prefix space + the GPT-2 regex; the byte mapping itself is implicit
 * because the model works on raw bytes), Metaspace, Digits, Whitespace, WhitespaceSplit,
 * Punctuation, plus TP_SPM (a cut before each U+2581 run, used only when the vocabulary
 * proves it cannot change the result). Regexes run through PCRE2 (JIT) on valid UTF-8.
 */
#include <string.h>

#include "tokenizer/tok_int.h"
#include "util/err.h"

int tok_is_ws(uint32_t c);

/* A piece of a span: [s, e) relative to the buffer, and whether the pattern matched. */
struct ev {
    size_t s, e;
    int m;
};

/* Small growable event list kept in the scratch spans array (orig field = match flag). */
static int ev_push(struct tok_spans *evs, size_t s, size_t e, int m)
{
    return tok_spans_push(evs, s, e - s, (size_t)m);
}

static int match_at(pcre2_code *re, pcre2_match_data *md, const char *subj, size_t n,
                    size_t pos, size_t *ms, size_t *me)
{
    int rc = pcre2_match(re, (PCRE2_SPTR)subj, n, pos, PCRE2_NO_UTF_CHECK, md, NULL);
    if (rc == PCRE2_ERROR_JIT_STACKLIMIT) {
        /* very long runs can exhaust the default JIT stack: fall back to the interpreter */
        rc = pcre2_match(re, (PCRE2_SPTR)subj, n, pos, PCRE2_NO_UTF_CHECK | PCRE2_NO_JIT, md,
                         NULL);
    }
    if (rc < 0)
        return rc == PCRE2_ERROR_NOMATCH ? 0 : rc;
    PCRE2_SIZE *ov = pcre2_get_ovector_pointer(md);
    *ms = ov[0];
    *me = ov[1];
    return 1;
}

/* Finds the matches of op in buf[sp.off, sp.off+sp.len) as a list of events covering the
 * span (HF Pattern::find_matches). */
static int find_events(const struct tok_pre *op, struct tok_scratch *sc, const char *buf,
                       const struct tok_span *sp, struct tok_spans *evs, struct cerr *e)
{
    const char *subj = buf + sp->off;
    size_t n = sp->len, prev = 0, pos = 0;
    evs->n = 0;
    if (n == 0)
        return ev_push(evs, sp->off, sp->off, 0) ? cerr_set(e, CERR_NOMEM, "out of memory") : 0;
    if (op->re) {
        while (pos <= n) {
            size_t ms, me;
            int rc = match_at(op->re, sc->md, subj, n, pos, &ms, &me);
            if (rc < 0)
                return cerr_set(e, CERR_LIMIT, "pre-tokenizer regex failed (pcre2 error %d)", rc);
            if (rc == 0)
                break;
            if (me == ms) { /* empty match: no piece; step one character */
                if (ms >= n)
                    break;
                int l = tok_utf8_len((const uint8_t *)subj + ms, n - ms);
                pos = ms + (size_t)(l ? l : 1);
                continue;
            }
            if (prev != ms && ev_push(evs, sp->off + prev, sp->off + ms, 0))
                return cerr_set(e, CERR_NOMEM, "out of memory");
            if (ev_push(evs, sp->off + ms, sp->off + me, 1))
                return cerr_set(e, CERR_NOMEM, "out of memory");
            prev = pos = me;
        }
    } else if (op->litlen) {
        for (size_t i = 0; i + op->litlen <= n;) {
            if (memcmp(subj + i, op->lit, op->litlen) == 0) {
                if (prev != i && ev_push(evs, sp->off + prev, sp->off + i, 0))
                    return cerr_set(e, CERR_NOMEM, "out of memory");
                if (ev_push(evs, sp->off + i, sp->off + i + op->litlen, 1))
                    return cerr_set(e, CERR_NOMEM, "out of memory");
                i += op->litlen;
                prev = i;
            } else
                i++;
        }
    }
    if (prev != n && ev_push(evs, sp->off + prev, sp->off + n, 0))
        return cerr_set(e, CERR_NOMEM, "out of memory");
    return 0;
}

/* Applies a split behaviour to the events of one span, appending non-empty spans to out
 * (HF NormalizedString::split). */
static int fold_events(struct tok_spans *evs, int behavior, int invert, size_t orig0,
                       size_t off0, struct tok_spans *out)
{
    struct tok_span *v = evs->v;
    size_t n = evs->n;
    if (invert)
        for (size_t i = 0; i < n; i++)
            v[i].orig = !v[i].orig;
    size_t first = out->n;
#define PUSH(s_, e_)                                                                         \
    do {                                                                                     \
        if (tok_spans_push(out, (s_), (e_) - (s_), orig0 + ((s_)-off0)))                     \
            return -1;                                                                       \
    } while (0)
    switch (behavior) {
    case TSB_REMOVED:
        for (size_t i = 0; i < n; i++)
            if (!v[i].orig)
                PUSH(v[i].off, v[i].off + v[i].len);
        break;
    case TSB_ISOLATED:
        for (size_t i = 0; i < n; i++)
            PUSH(v[i].off, v[i].off + v[i].len);
        break;
    case TSB_CONTIGUOUS: {
        int prevm = 0;
        for (size_t i = 0; i < n; i++) {
            int m = (int)v[i].orig;
            if (m == prevm && out->n > first)
                out->v[out->n - 1].len = v[i].off + v[i].len - out->v[out->n - 1].off;
            else
                PUSH(v[i].off, v[i].off + v[i].len);
            prevm = m;
        }
        break;
    }
    case TSB_MERGED_PREV: {
        int prevm = 0;
        for (size_t i = 0; i < n; i++) {
            int m = (int)v[i].orig;
            if (m && !prevm && out->n > first)
                out->v[out->n - 1].len = v[i].off + v[i].len - out->v[out->n - 1].off;
            else
                PUSH(v[i].off, v[i].off + v[i].len);
            prevm = m;
        }
        break;
    }
    case TSB_MERGED_NEXT: {
        /* reverse fold: a match joins the piece after it unless that piece is a match */
        int nextm = 0;
        size_t start_n = out->n;
        for (size_t k = n; k-- > 0;) {
            int m = (int)v[k].orig;
            if (m && !nextm && out->n > start_n) {
                struct tok_span *last = &out->v[out->n - 1];
                last->len += last->off - v[k].off;
                last->off = v[k].off;
                last->orig = orig0 + (v[k].off - off0);
            } else
                PUSH(v[k].off, v[k].off + v[k].len);
            nextm = m;
        }
        /* restore forward order */
        for (size_t i = start_n, j = out->n; i + 1 < j; i++, j--) {
            struct tok_span tmp = out->v[i];
            out->v[i] = out->v[j - 1];
            out->v[j - 1] = tmp;
        }
        break;
    }
    }
#undef PUSH
    /* drop empty pieces */
    size_t w = first;
    for (size_t i = first; i < out->n; i++)
        if (out->v[i].len)
            out->v[w++] = out->v[i];
    out->n = w;
    return 0;
}

static int split_all(const struct tok_pre *op, struct tok_scratch *sc, const char *buf,
                     const struct tok_spans *in, struct tok_spans *out, int behavior, int invert,
                     struct tok_spans *evs, struct cerr *e)
{
    out->n = 0;
    for (size_t i = 0; i < in->n; i++) {
        int rc = find_events(op, sc, buf, &in->v[i], evs, e);
        if (rc)
            return rc;
        if (fold_events(evs, behavior, invert, in->v[i].orig, in->v[i].off, out))
            return cerr_set(e, CERR_NOMEM, "out of memory");
    }
    return 0;
}

/* Rewrites every span of buf into nb (Metaspace replace/prepend, ByteLevel prefix). */
static int rewrite(const struct tok_pre *op, const struct tok_buf *buf, struct tok_buf *nb,
                   struct tok_spans *in, int first_only_at_zero)
{
    nb->n = 0;
    for (size_t i = 0; i < in->n; i++) {
        struct tok_span *sp = &in->v[i];
        const char *s = buf->p + sp->off;
        size_t start = nb->n;
        if (op->type == TP_BYTELEVEL) {
            if (op->add_prefix_space && (sp->len == 0 || s[0] != ' '))
                if (tok_buf_put(nb, " ", 1))
                    return -1;
            if (tok_buf_put(nb, s, sp->len))
                return -1;
        } else { /* Metaspace */
            int starts = sp->len >= op->repl_len && memcmp(s, op->repl, op->repl_len) == 0;
            if (!starts && sp->len && s[0] == ' ')
                starts = 1; /* the space becomes the replacement */
            int pre = 0;
            if (!starts) {
                if (op->prepend_scheme == TPS_ALWAYS)
                    pre = 1;
                else if (op->prepend_scheme == TPS_FIRST && sp->orig == 0)
                    pre = 1;
            }
            (void)first_only_at_zero;
            if (pre && tok_buf_put(nb, op->repl, op->repl_len))
                return -1;
            size_t last = 0;
            for (size_t k = 0; k < sp->len; k++)
                if (s[k] == ' ') {
                    if (tok_buf_put(nb, s + last, k - last) ||
                        tok_buf_put(nb, op->repl, op->repl_len))
                        return -1;
                    last = k + 1;
                }
            if (tok_buf_put(nb, s + last, sp->len - last))
                return -1;
        }
        sp->off = start;
        sp->len = nb->n - start;
    }
    return 0;
}

/* TP_SPM: cut before each U+2581 that follows a character no piece joins to U+2581. */
static int spm_split(const struct tok *t, const char *buf, const struct tok_spans *in,
                     struct tok_spans *out)
{
    out->n = 0;
    for (size_t i = 0; i < in->n; i++) {
        const struct tok_span *sp = &in->v[i];
        const uint8_t *s = (const uint8_t *)buf + sp->off;
        size_t start = 0;
        uint32_t prev = 0x2581;
        for (size_t k = 0; k < sp->len;) {
            int l = tok_utf8_len(s + k, sp->len - k);
            uint32_t cp = l ? tok_utf8_cp(s + k, l) : 0xFFFD;
            if (cp == 0x2581 && prev != 0x2581 && k > start) {
                int cut = 1;
                for (int q = 0; q < t->n_spm_nocut; q++)
                    if (t->spm_nocut[q] == prev)
                        cut = 0;
                if (cut) {
                    if (tok_spans_push(out, sp->off + start, k - start, sp->orig + start))
                        return -1;
                    start = k;
                }
            }
            prev = cp;
            k += l ? (size_t)l : 1;
        }
        if (sp->len > start && tok_spans_push(out, sp->off + start, sp->len - start,
                                              sp->orig + start))
            return -1;
    }
    return 0;
}

int tok_pretokenize(const struct tok *t, struct tok_scratch *sc, struct tok_buf *buf,
                    size_t orig, struct tok_spans *out, struct cerr *e)
{
    struct tok_spans *cur = out, *nxt = &sc->s1, *evs = &sc->s2;
    cur->n = 0;
    if (tok_spans_push(cur, 0, buf->n, orig))
        return cerr_set(e, CERR_NOMEM, "out of memory");
    for (int k = 0; k < t->n_pre; k++) {
        const struct tok_pre *op = &t->pre[k];
        int rc = 0;
        switch (op->type) {
        case TP_SPLIT:
        case TP_DIGITS:
        case TP_WHITESPACE:
        case TP_WSSPLIT:
        case TP_PUNCT:
            rc = split_all(op, sc, buf->p, cur, nxt, op->behavior, op->invert, evs, e);
            break;
        case TP_BYTELEVEL:
            if (op->add_prefix_space) {
                if (rewrite(op, buf, &sc->b, cur, 0))
                    return cerr_set(e, CERR_NOMEM, "out of memory");
                struct tok_buf tb = *buf;
                *buf = sc->b;
                sc->b = tb;
            }
            if (op->use_regex)
                rc = split_all(op, sc, buf->p, cur, nxt, TSB_ISOLATED, 0, evs, e);
            else
                continue;
            break;
        case TP_METASPACE: {
            if (rewrite(op, buf, &sc->b, cur, 1))
                return cerr_set(e, CERR_NOMEM, "out of memory");
            struct tok_buf tb = *buf;
            *buf = sc->b;
            sc->b = tb;
            if (!op->split)
                continue;
            rc = split_all(op, sc, buf->p, cur, nxt, TSB_MERGED_NEXT, 0, evs, e);
            break;
        }
        case TP_SPM:
            if (spm_split(t, buf->p, cur, nxt))
                return cerr_set(e, CERR_NOMEM, "out of memory");
            break;
        default:
            continue;
        }
        if (rc)
            return rc;
        struct tok_spans sw = *cur;
        *cur = *nxt;
        *nxt = sw;
    }
    return 0;
}
