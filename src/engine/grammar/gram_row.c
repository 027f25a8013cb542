/* gram_row.c — a sampling row's grammar state (see gram_row.h). */
#include "engine/grammar/gram_row.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

struct gram_row {
    struct gram_matcher *m; /* NULL once dropped */
    uint32_t *mask;         /* (n_vocab / 32) */
    int on;
    char *trig, *seen; /* lazy: the trigger; the text so far that may still start it */
    size_t trig_len, n_seen;
    int after;
};

int gram_row_new(struct gram_row **out, struct gram_matcher *m, int n_vocab, const char *trigger,
                 int after)
{
    *out = NULL;
    struct gram_row *r = calloc(1, sizeof *r);
    if (!r || !(r->mask = malloc(((size_t)n_vocab + 31) / 32 * sizeof *r->mask)))
        goto oom;
    r->m = m;
    r->on = 1;
    if (trigger && *trigger) {
        r->trig_len = strlen(trigger);
        r->trig = strdup(trigger);
        r->seen = malloc(r->trig_len + 1024);
        if (!r->trig || !r->seen)
            goto oom;
        r->on = 0;
        r->after = after;
    }
    *out = r;
    return 0;
oom:
    if (r)
        r->m = m;
    else
        gram_matcher_free(m);
    gram_row_free(r);
    return CERR_NOMEM;
}

void gram_row_free(struct gram_row *r)
{
    if (!r)
        return;
    gram_matcher_free(r->m);
    free(r->mask);
    free(r->trig);
    free(r->seen);
    free(r);
}

int gram_row_on(const struct gram_row *r) { return r->m && r->on; }

struct gram_matcher *gram_row_matcher(const struct gram_row *r) { return r->m; }

void gram_row_mask(struct gram_row *r, float *logits, int n_vocab)
{
    if (!gram_row_on(r) || gram_matcher_mask(r->m, r->mask) <= 0)
        return;
    for (int w = 0; w < (n_vocab + 31) / 32; w++) {
        uint32_t k = r->mask[w];
        if (k == 0xFFFFFFFFu)
            continue;
        int end = w * 32 + 32 < n_vocab ? w * 32 + 32 : n_vocab;
        for (int i = w * 32; i < end; i++)
            if (!((k >> (i & 31)) & 1))
                logits[i] = -INFINITY;
    }
}

/* lazy: append the token's bytes, look for the trigger, keep only a possible start */
static void watch(struct gram_row *r, int32_t id)
{
    int n;
    const char *b = gram_vocab_token(gram_matcher_vocab(r->m), id, &n);
    if (n <= 0)
        return;
    if (n > 1000)
        n = 1000;
    memcpy(r->seen + r->n_seen, b, (size_t)n);
    r->n_seen += (size_t)n;
    for (size_t i = 0; i + r->trig_len <= r->n_seen; i++)
        if (!memcmp(r->seen + i, r->trig, r->trig_len)) {
            size_t from = r->after ? i + r->trig_len : i;
            if (gram_matcher_accept_bytes(r->m, r->seen + from, r->n_seen - from) == 0) {
                r->on = 1;
            } else { /* not text the grammar knows: free from here on */
                gram_matcher_free(r->m);
                r->m = NULL;
            }
            r->n_seen = 0;
            return;
        }
    size_t keep = r->trig_len - 1 < r->n_seen ? r->trig_len - 1 : r->n_seen;
    memmove(r->seen, r->seen + r->n_seen - keep, keep);
    r->n_seen = keep;
}

void gram_row_accept(struct gram_row *r, int32_t id)
{
    if (!r->m)
        return;
    if (r->on)
        gram_matcher_accept(r->m, id); /* a refused id (an unmasked fallback) leaves it */
    else
        watch(r, id);
}
