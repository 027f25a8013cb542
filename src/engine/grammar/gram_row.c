/* gram_row.c — a sampling row's grammar state (see gram_row.h).
 *
 * The next mask is computed ahead: when a token is accepted, the row is queued to a worker
 * thread that computes the mask of the new state while the engine runs the model's
 * forward; gram_row_mask then only waits for it (usually done). The matcher is touched by
 * one thread at a time: the worker between accept and mask, the sampling thread otherwise
 * (every entry point that reads the matcher waits for the job first). CINFER_GRAMMAR_ASYNC=0
 * computes masks in gram_row_mask instead. */
#include "engine/grammar/gram_row.h"

#include <math.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

struct gram_row {
    struct gram_matcher *m; /* NULL once dropped */
    uint32_t *mask;         /* (n_vocab / 32) */
    int on;
    char *trig, *seen; /* lazy: the trigger; the text so far that may still start it */
    size_t trig_len, n_seen;
    int after;
    char *open; /* optional opening (a reasoning block the model may open itself), or NULL */
    size_t open_len, n_open; /* its length; its bytes the output has matched so far */
    int opt;    /* 1 until the first token decides: the opening, or the constrained answer */
    int job;   /* 0 none, 1 queued, 2 running, 3 done (the mask and count are ready) */
    int count; /* the ready mask's gram_matcher_mask result */
    int over;  /* the matcher passed its work bound (CERR_LIMIT): gram_row_over */
    struct gram_row *next; /* the worker's queue */
};

/* ---- the worker ---------------------------------------------------------------------- */

static pthread_mutex_t w_mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t w_work = PTHREAD_COND_INITIALIZER, w_done = PTHREAD_COND_INITIALIZER;
static struct gram_row *w_head, *w_tail;
static int w_state; /* 0 not started, 1 running, -1 off (CINFER_GRAMMAR_ASYNC=0 or no thread) */

static void *worker(void *arg)
{
    (void)arg;
    pthread_mutex_lock(&w_mu);
    for (;;) {
        while (!w_head)
            pthread_cond_wait(&w_work, &w_mu);
        struct gram_row *r = w_head;
        w_head = r->next;
        if (!w_head)
            w_tail = NULL;
        r->next = NULL;
        r->job = 2;
        pthread_mutex_unlock(&w_mu);
        int c = gram_matcher_mask(r->m, r->mask);
        pthread_mutex_lock(&w_mu);
        r->count = c;
        r->job = 3;
        pthread_cond_broadcast(&w_done);
    }
    return NULL;
}

/* Queues r's next mask; 0 when the worker is off (the caller computes it later). */
static int submit(struct gram_row *r)
{
    pthread_mutex_lock(&w_mu);
    if (!w_state) {
        const char *e = getenv("CINFER_GRAMMAR_ASYNC");
        pthread_t t;
        pthread_attr_t at;
        w_state = -1;
        if (!(e && !strcmp(e, "0")) && !pthread_attr_init(&at)) {
            pthread_attr_setdetachstate(&at, PTHREAD_CREATE_DETACHED);
            if (!pthread_create(&t, &at, worker, NULL))
                w_state = 1;
            pthread_attr_destroy(&at);
        }
    }
    if (w_state < 0) {
        pthread_mutex_unlock(&w_mu);
        return 0;
    }
    r->job = 1;
    r->next = NULL;
    if (w_tail)
        w_tail->next = r;
    else
        w_head = r;
    w_tail = r;
    pthread_cond_signal(&w_work);
    pthread_mutex_unlock(&w_mu);
    return 1;
}

/* Waits for r's job (drop: a queued job is taken off the queue instead). Returns 1 when a
 * finished mask is in r->mask. */
static int settle(struct gram_row *r, int drop)
{
    if (!r->job)
        return 0;
    pthread_mutex_lock(&w_mu);
    if (r->job == 1 && drop) {
        struct gram_row **pp = &w_head, *prev = NULL;
        while (*pp && *pp != r) {
            prev = *pp;
            pp = &(*pp)->next;
        }
        if (*pp) {
            *pp = r->next;
            if (w_tail == r)
                w_tail = prev;
        }
        r->job = 0;
    }
    while (r->job == 1 || r->job == 2)
        pthread_cond_wait(&w_done, &w_mu);
    int ready = r->job == 3;
    r->job = 0;
    pthread_mutex_unlock(&w_mu);
    return ready;
}

int gram_row_new(struct gram_row **out, struct gram_matcher *m, int n_vocab, const char *trigger,
                 int after, const char *open)
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
        if (open && *open) { /* masking from the first token, the opening allowed besides */
            r->open_len = strlen(open);
            if (!(r->open = strdup(open)))
                goto oom;
            r->on = 1;
            r->opt = 1;
            r->after = 1;
        }
    }
    *out = r;
    if (r->on) /* the first mask (the slowest: a fresh state) while the prompt runs */
        submit(r);
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
    settle(r, 1);
    gram_matcher_free(r->m);
    free(r->mask);
    free(r->trig);
    free(r->seen);
    free(r->open);
    free(r);
}

int gram_row_on(const struct gram_row *r) { return r->m && r->on; }

struct gram_matcher *gram_row_matcher(const struct gram_row *r)
{
    settle((struct gram_row *)r, 1); /* the caller may move the matcher: no mask kept */
    return r->m;
}

/* Optional opening: sets the bits of the ids whose bytes go on with the opening's unmatched
 * rest (a prefix of it, or all of it and then reasoning text); returns how many were not
 * set yet. */
static int allow_open(struct gram_row *r)
{
    const struct gram_vocab *v = gram_matcher_vocab(r->m);
    const char *rest = r->open + r->n_open;
    size_t nr = r->open_len - r->n_open;
    int V = gram_vocab_size(v), added = 0;
    for (int32_t id = 0; id < V; id++) {
        int n;
        const char *b = gram_vocab_token(v, id, &n);
        if (n <= 0 || memcmp(b, rest, (size_t)n < nr ? (size_t)n : nr))
            continue;
        uint32_t bit = 1u << (id & 31);
        if (!(r->mask[id / 32] & bit)) {
            r->mask[id / 32] |= bit;
            added++;
        }
    }
    return added;
}

/* This step's mask into r->mask; gram_matcher_mask's count (plus the opening's ids). */
static int ready(struct gram_row *r)
{
    int count;
    if (r->n_open) { /* partway through the opening: only its rest */
        settle(r, 1);
        memset(r->mask, 0, ((size_t)gram_vocab_size(gram_matcher_vocab(r->m)) + 31) / 32 *
                               sizeof *r->mask);
        count = 0;
    } else
        count = settle(r, 0) ? r->count : gram_matcher_mask(r->m, r->mask);
    if (count == CERR_LIMIT)
        r->over = 1;
    if (r->opt && count >= 0)
        count += allow_open(r);
    return count;
}

void gram_row_mask(struct gram_row *r, float *logits, int n_vocab)
{
    if (!gram_row_on(r))
        return;
    int count = ready(r);
    if (count <= 0)
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
static void watch(struct gram_row *r, const char *b, int n)
{
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
    settle(r, 1); /* a mask nobody asked for (a forced or prompt token) */
    int n;
    const char *b = gram_vocab_token(gram_matcher_vocab(r->m), id, &n);
    if (r->opt) { /* the opening, or the first token of the answer */
        size_t nr = r->open_len - r->n_open;
        if (n > 0 && !memcmp(b, r->open + r->n_open, (size_t)n < nr ? (size_t)n : nr)) {
            if ((size_t)n < nr) {
                r->n_open += (size_t)n; /* the next mask: only the opening's rest */
                return;
            }
            r->opt = 0; /* a reasoning block: free until the trigger (its end) */
            r->n_open = 0;
            r->on = 0;
            watch(r, b + nr, n - (int)nr);
            if (r->m && r->on)
                submit(r);
            return;
        }
        if (r->n_open) { /* an unmasked fallback broke the opening: free from here on */
            gram_matcher_free(r->m);
            r->m = NULL;
            return;
        }
        r->opt = 0; /* no reasoning: the constraint from this token on */
    }
    if (r->on) {
        if (gram_matcher_accept(r->m, id) == CERR_LIMIT) /* a refused id (an unmasked */
            r->over = 1;                                 /* fallback) leaves it */
        submit(r);
    } else {
        watch(r, b, n);
        if (r->m && r->on)
            submit(r);
    }
}

int gram_row_forced(struct gram_row *r, int32_t *id)
{
    static int on = -1; /* benign race: every thread computes the same value */
    if (on < 0) {
        const char *e = getenv("CINFER_GRAMMAR_JUMP");
        on = e && !strcmp(e, "1");
    }
    if (!on || !gram_row_on(r) || r->opt) /* the opening is never forced */
        return 0;
    int count = settle(r, 0) ? r->count : gram_matcher_mask(r->m, r->mask);
    r->count = count;
    r->job = 3; /* ready: gram_row_mask takes it, gram_row_accept drops it */
    if (count != 1)
        return 0;
    int nw = (gram_vocab_size(gram_matcher_vocab(r->m)) + 31) / 32;
    for (int w = 0; w < nw; w++)
        if (r->mask[w]) {
            *id = w * 32 + __builtin_ctz(r->mask[w]);
            return 1;
        }
    return 0;
}

int gram_row_over(const struct gram_row *r)
{
    return r && r->over;
}

const uint32_t *gram_row_bits(struct gram_row *r)
{
    if (!gram_row_on(r))
        return NULL;
    int count = ready(r);
    r->count = count;
    r->job = 3; /* ready: gram_row_mask takes it, gram_row_accept drops it */
    return count > 0 ? r->mask : NULL;
}
