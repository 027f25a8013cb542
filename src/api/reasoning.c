/* reasoning.c — see reasoning.h. A three-state scanner (before / inside / after the think
 * block) over a small hold buffer: only an unresolved partial tag (plus, inside the block,
 * the whitespace run before it) is ever held; everything else is emitted at once.
 */
#include "api/reasoning.h"

#include <stdlib.h>
#include <string.h>

enum { MODE_PRE = 0, MODE_IN = 1, MODE_POST = 2 };

struct rsn_splitter {
    char *open, *close;
    size_t open_n, close_n;
    int start_inside;
    int mode;
    int trim;       /* skip whitespace at the start of the next text */
    char *buf;      /* held, unresolved text */
    size_t len, cap;
};

static int is_ws(char c)
{
    return c == ' ' || c == '\n' || c == '\r' || c == '\t';
}

/* Length of the longest proper prefix of tag[0..tn) that ends data[0..n). */
static size_t partial_suffix(const char *d, size_t n, const char *tag, size_t tn)
{
    size_t k = n < tn - 1 ? n : tn - 1;
    for (; k > 0; k--)
        if (memcmp(d + n - k, tag, k) == 0)
            return k;
    return 0;
}

static void emit_if(rsn_emit_fn emit, void *ud, int kind, const char *t, size_t n)
{
    if (n > 0 && emit)
        emit(kind, t, n, ud);
}

int rsn_new(struct rsn_splitter **out, const char *open, const char *close, int start_inside,
            struct cerr *e)
{
    *out = NULL;
    int enabled = open && open[0];
    if (enabled && (!close || !close[0]))
        return cerr_set(e, CERR_INVALID, "reasoning splitter: an open tag needs a close tag");
    struct rsn_splitter *s = calloc(1, sizeof *s);
    if (!s)
        return cerr_set(e, CERR_NOMEM, "reasoning splitter: out of memory");
    if (enabled) {
        s->open = strdup(open);
        s->close = strdup(close);
        if (!s->open || !s->close) {
            rsn_free(s);
            return cerr_set(e, CERR_NOMEM, "reasoning splitter: out of memory");
        }
        s->open_n = strlen(open);
        s->close_n = strlen(close);
    }
    s->start_inside = enabled && start_inside;
    rsn_reset(s);
    *out = s;
    return CERR_OK;
}

void rsn_reset(struct rsn_splitter *s)
{
    s->len = 0;
    if (!s->open) {
        s->mode = MODE_POST;
        s->trim = 0;
    } else if (s->start_inside) {
        s->mode = MODE_IN;
        s->trim = 1;
    } else {
        s->mode = MODE_PRE;
        s->trim = 0;
    }
}

int rsn_inside(const struct rsn_splitter *s)
{
    return s->mode == MODE_IN;
}

void rsn_free(struct rsn_splitter *s)
{
    if (!s)
        return;
    free(s->open);
    free(s->close);
    free(s->buf);
    free(s);
}

/* Emits every resolved segment of buf; keeps the unresolved tail (none when `final`). */
static void process(struct rsn_splitter *s, rsn_emit_fn emit, void *ud, int final)
{
    const char *d = s->buf;
    size_t len = s->len, pos = 0;
    for (;;) {
        if (s->trim) {
            while (pos < len && is_ws(d[pos]))
                pos++;
            if (pos == len)
                break;
            s->trim = 0;
        }
        if (s->mode == MODE_POST) {
            emit_if(emit, ud, RSN_CONTENT, d + pos, len - pos);
            pos = len;
            break;
        }
        int in = s->mode == MODE_IN;
        const char *tag = in ? s->close : s->open;
        size_t tn = in ? s->close_n : s->open_n;
        const char *hit = memmem(d + pos, len - pos, tag, tn);
        if (hit) {
            size_t i = (size_t)(hit - d), end = i;
            if (in)
                while (end > pos && is_ws(d[end - 1]))
                    end--;
            emit_if(emit, ud, in ? RSN_REASONING : RSN_CONTENT, d + pos, end - pos);
            pos = i + tn;
            s->mode = in ? MODE_POST : MODE_IN;
            s->trim = 1;
            continue;
        }
        size_t keep = len - (final ? 0 : partial_suffix(d + pos, len - pos, tag, tn));
        if (in)
            while (keep > pos && is_ws(d[keep - 1]))
                keep--;
        emit_if(emit, ud, in ? RSN_REASONING : RSN_CONTENT, d + pos, keep - pos);
        pos = final ? len : keep;
        break;
    }
    if (pos > 0 && pos < len)
        memmove(s->buf, s->buf + pos, len - pos);
    s->len = len - pos;
}

int rsn_push(struct rsn_splitter *s, const char *text, size_t n, rsn_emit_fn emit, void *ud)
{
    if (n == 0)
        return CERR_OK;
    if (s->mode == MODE_POST && s->len == 0) {
        /* after the block (or disabled): nothing can be held, stream straight through */
        if (s->trim) {
            while (n > 0 && is_ws(*text))
                text++, n--;
            if (n == 0)
                return CERR_OK;
            s->trim = 0;
        }
        emit_if(emit, ud, RSN_CONTENT, text, n);
        return CERR_OK;
    }
    if (s->len + n > s->cap) {
        size_t cap = s->cap ? s->cap : 64;
        while (cap < s->len + n)
            cap *= 2;
        char *nb = realloc(s->buf, cap);
        if (!nb)
            return CERR_NOMEM;
        s->buf = nb;
        s->cap = cap;
    }
    memcpy(s->buf + s->len, text, n);
    s->len += n;
    process(s, emit, ud, 0);
    return CERR_OK;
}

int rsn_flush(struct rsn_splitter *s, rsn_emit_fn emit, void *ud)
{
    if (s->len > 0)
        process(s, emit, ud, 1);
    s->len = 0;
    return CERR_OK;
}

int reasoning_prompt_open(const char *rendered_prompt, const char *open)
{
    if (!rendered_prompt || !open || !open[0])
        return 0;
    size_t n = strlen(rendered_prompt), on = strlen(open);
    while (n > 0 && is_ws(rendered_prompt[n - 1]))
        n--;
    return n >= on && memcmp(rendered_prompt + n - on, open, on) == 0;
}
