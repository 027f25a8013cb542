/* detok.c — incremental detokenizer for streaming output.
 *
 * Keeps a small window of ids: the last emitted chunk's ids as context plus the ids not
 * yet emitted. Each push decodes the window with the full decoder chain and emits what
 * the window adds beyond the context's own decode, once that text does not end in U+FFFD
 * (an incomplete UTF-8 sequence or an unfinished run of byte-fallback pieces). Decoding
 * with context keeps the SentencePiece leading-space rule exactly as the full decode has
 * it. (The scheme of HF tokenizers' DecodeStream.) One stream per thread of output.
 */
#include <stdlib.h>
#include <string.h>

#include "tokenizer/tok_int.h"
#include "util/err.h"

#define STREAM_MAX_PENDING 32 /* force out text held back after this many ids */

struct tok_stream {
    const struct tok *t;
    int flags;
    int32_t *ids;
    int n, cap, ctx; /* window ids[0..n), ids[0..ctx) already emitted */
    struct tok_buf prev; /* decode(ids[0..ctx)) */
    struct tok_buf cur;
};

struct tok_stream *tok_stream_new(const struct tok *t, int flags)
{
    if (!t)
        return NULL;
    struct tok_stream *s = calloc(1, sizeof *s);
    if (!s)
        return NULL;
    s->t = t;
    s->flags = flags & TOK_SKIP_SPECIAL;
    return s;
}

void tok_stream_free(struct tok_stream *s)
{
    if (!s)
        return;
    free(s->ids);
    free(s->prev.p);
    free(s->cur.p);
    free(s);
}

static int ends_with_fffd(const struct tok_buf *b)
{
    return b->n >= 3 && memcmp(b->p + b->n - 3, "\xEF\xBF\xBD", 3) == 0;
}

/* Emits the text the window adds; on success slides the window. */
static int emit(struct tok_stream *s, char *out, size_t cap, size_t *out_len, int force)
{
    struct cerr e;
    int rc = tok_decode_ids(s->t, s->ids, s->n, s->flags, &s->cur, &e);
    if (rc)
        return rc;
    *out_len = 0;
    if (!force && (s->cur.n <= s->prev.n || ends_with_fffd(&s->cur)) &&
        s->n - s->ctx < STREAM_MAX_PENDING)
        return 1; /* hold */
    const char *text;
    size_t tl;
    struct tok_buf alone = {0};
    if (s->cur.n >= s->prev.n && memcmp(s->cur.p, s->prev.p ? s->prev.p : "", s->prev.n) == 0) {
        text = s->cur.p + s->prev.n;
        tl = s->cur.n - s->prev.n;
    } else {
        /* the new ids changed how the context decodes (an invalid byte-fallback run):
         * text already sent cannot be taken back, so send the new ids' own text */
        rc = tok_decode_ids(s->t, s->ids + s->ctx, s->n - s->ctx, s->flags, &alone, &e);
        if (rc) {
            free(alone.p);
            return rc;
        }
        text = alone.p;
        tl = alone.n;
    }
    if (tl > cap) {
        free(alone.p);
        return CERR_LIMIT;
    }
    if (tl)
        memcpy(out, text, tl);
    *out_len = tl;
    free(alone.p);
    /* slide: the ids just emitted become the context */
    memmove(s->ids, s->ids + s->ctx, sizeof(int32_t) * (size_t)(s->n - s->ctx));
    s->n -= s->ctx;
    s->ctx = s->n;
    rc = tok_decode_ids(s->t, s->ids, s->n, s->flags, &s->prev, &e);
    return rc;
}

int tok_stream_push(struct tok_stream *s, int32_t id, char *out, size_t cap, size_t *out_len)
{
    *out_len = 0;
    if (!s)
        return CERR_INVALID;
    if (id < 0 || id >= s->t->n_vocab || !s->t->piece[id])
        return CERR_INVALID;
    if ((s->flags & TOK_SKIP_SPECIAL) && (s->t->attr[id] & TOKA_CONTROL))
        return 0;
    if (s->n == s->cap) {
        int c = s->cap ? s->cap * 2 : 16;
        int32_t *v = realloc(s->ids, sizeof *v * (size_t)c);
        if (!v)
            return CERR_NOMEM;
        s->ids = v;
        s->cap = c;
    }
    s->ids[s->n++] = id;
    int rc = emit(s, out, cap, out_len, 0);
    if (rc == 1)
        return 0;
    if (rc == CERR_LIMIT)
        s->n--; /* not consumed */
    return rc;
}

int tok_stream_flush(struct tok_stream *s, char *out, size_t cap, size_t *out_len)
{
    *out_len = 0;
    if (!s)
        return CERR_INVALID;
    if (s->n == s->ctx) {
        s->n = s->ctx = 0; /* the next push starts a new text */
        s->prev.n = 0;
        return 0;
    }
    int rc = emit(s, out, cap, out_len, 1);
    if (rc == 0) {
        s->n = s->ctx = 0;
        s->prev.n = 0;
    }
    return rc;
}

int tok_stream_prime(struct tok_stream *s, const int32_t *ids, int n)
{
    if (!s || n < 0 || (n > 0 && !ids))
        return CERR_INVALID;
    int k = 0;
    for (int i = n > 8 ? n - 8 : 0; i < n; i++) /* a few ids of context are enough */
        if (ids[i] < 0 || ids[i] >= s->t->n_vocab || !s->t->piece[ids[i]])
            return CERR_INVALID;
    if (n > s->cap) {
        int32_t *v = realloc(s->ids, sizeof *v * (size_t)(n + 16));
        if (!v)
            return CERR_NOMEM;
        s->ids = v;
        s->cap = n + 16;
    }
    for (int i = n > 8 ? n - 8 : 0; i < n; i++) {
        if ((s->flags & TOK_SKIP_SPECIAL) && (s->t->attr[ids[i]] & TOKA_CONTROL))
            continue;
        s->ids[k++] = ids[i];
    }
    s->n = s->ctx = k;
    struct cerr e;
    return tok_decode_ids(s->t, s->ids, s->n, s->flags, &s->prev, &e);
}
