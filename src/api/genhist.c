/* genhist.c — see genhist.h. The store is a FIFO array of entries scanned with memmem per
 * prompt (at most GENHIST_MAX_ENTRIES searches of the rendered prompt: cheap next to the
 * prefill it saves). */
#include "api/genhist.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>

struct gh_ent {
    char *text;
    size_t n;
    int32_t *ids;
    int n_ids;
    char lead[GENHIST_LEAD]; /* the prompt's end before the generation (the anchor) */
    size_t lead_n;
};

static pthread_mutex_t g_mu = PTHREAD_MUTEX_INITIALIZER;
static struct gh_ent g_ents[GENHIST_MAX_ENTRIES];
static int g_head, g_count; /* ring: oldest at g_head */
static size_t g_bytes;

static size_t ent_bytes(const struct gh_ent *x) { return x->n + (size_t)x->n_ids * 4; }

static void ent_free(struct gh_ent *x)
{
    g_bytes -= ent_bytes(x);
    free(x->text);
    free(x->ids);
    memset(x, 0, sizeof *x);
}

static void drop_oldest(void)
{
    ent_free(&g_ents[g_head]);
    g_head = (g_head + 1) % GENHIST_MAX_ENTRIES;
    g_count--;
}

int genhist_put(const char *text, size_t n, const int32_t *ids, int n_ids, const char *lead,
                size_t lead_n)
{
    if (n < GENHIST_MIN_BYTES || n_ids <= 0 || n + (size_t)n_ids * 4 > GENHIST_MAX_BYTES / 4)
        return -1;
    struct gh_ent x = {.text = malloc(n), .n = n, .ids = malloc((size_t)n_ids * 4),
                       .n_ids = n_ids};
    if (lead_n > GENHIST_LEAD)
        lead += lead_n - GENHIST_LEAD, lead_n = GENHIST_LEAD;
    if (lead_n)
        memcpy(x.lead, lead, lead_n);
    x.lead_n = lead_n;
    if (!x.text || !x.ids) {
        free(x.text);
        free(x.ids);
        return -1;
    }
    memcpy(x.text, text, n);
    memcpy(x.ids, ids, (size_t)n_ids * 4);
    pthread_mutex_lock(&g_mu);
    for (int i = 0; i < g_count; i++) { /* the same text again: the newest ids win */
        struct gh_ent *o = &g_ents[(g_head + i) % GENHIST_MAX_ENTRIES];
        if (o->n == n && !memcmp(o->text, text, n)) {
            g_bytes -= ent_bytes(o);
            free(o->text);
            free(o->ids);
            *o = x;
            g_bytes += ent_bytes(o);
            pthread_mutex_unlock(&g_mu);
            return 0;
        }
    }
    while (g_count && (g_count == GENHIST_MAX_ENTRIES || g_bytes + ent_bytes(&x) > GENHIST_MAX_BYTES))
        drop_oldest();
    g_ents[(g_head + g_count) % GENHIST_MAX_ENTRIES] = x;
    g_count++;
    g_bytes += ent_bytes(&x);
    pthread_mutex_unlock(&g_mu);
    return 0;
}

struct span {
    size_t at, n;
    int32_t *ids; /* a copy */
    int n_ids;
};

/* The remembered spans in text, non-overlapping, in order (longest first where two
 * overlap). Returns the count; *out malloc'd. */
static int find_spans(const char *text, size_t len, struct span **out)
{
    *out = NULL;
    int ns = 0, cap = 0;
    struct span *sp = NULL;
    pthread_mutex_lock(&g_mu);
    for (int i = 0; i < g_count; i++) {
        const struct gh_ent *x = &g_ents[(g_head + i) % GENHIST_MAX_ENTRIES];
        const char *from = text;
        size_t left = len;
        const char *hit;
        while (left >= x->n && (hit = memmem(from, left, x->text, x->n))) {
            size_t at = (size_t)(hit - text);
            /* only right after the prompt end it was generated after */
            int clash = x->lead_n && (at < x->lead_n ||
                                      memcmp(text + at - x->lead_n, x->lead, x->lead_n));
            for (int k = 0; k < ns && !clash; k++)
                if (at < sp[k].at + sp[k].n && sp[k].at < at + x->n) {
                    if (x->n > sp[k].n) { /* the longer one wins */
                        free(sp[k].ids);
                        sp[k] = sp[--ns];
                        k--;
                    } else
                        clash = 1;
                }
            if (!clash) {
                if (ns == cap) {
                    struct span *n2 = realloc(sp, (size_t)(cap = cap ? 2 * cap : 8) * sizeof *n2);
                    if (!n2)
                        break;
                    sp = n2;
                }
                int32_t *c = malloc((size_t)x->n_ids * 4);
                if (!c)
                    break;
                memcpy(c, x->ids, (size_t)x->n_ids * 4);
                sp[ns++] = (struct span){at, x->n, c, x->n_ids};
            }
            from = hit + x->n;
            left = len - (size_t)(from - text);
        }
    }
    pthread_mutex_unlock(&g_mu);
    /* in text order */
    for (int a = 1; a < ns; a++)
        for (int b = a; b > 0 && sp[b].at < sp[b - 1].at; b--) {
            struct span t = sp[b];
            sp[b] = sp[b - 1];
            sp[b - 1] = t;
        }
    *out = sp;
    return ns;
}

static int append(int32_t **ids, int *n, int *cap, const int32_t *src, int k)
{
    if (*n + k > *cap) {
        int nc = *cap ? *cap : 256;
        while (nc < *n + k)
            nc *= 2;
        int32_t *x = realloc(*ids, (size_t)nc * sizeof *x);
        if (!x)
            return -1;
        *ids = x;
        *cap = nc;
    }
    memcpy(*ids + *n, src, (size_t)k * sizeof *src);
    *n += k;
    return 0;
}

int genhist_encode(const struct tok *t, const char *text, size_t len, int flags, int32_t **ids,
                   int *n, int *n_replayed, struct cerr *e)
{
    if (n_replayed)
        *n_replayed = 0;
    struct span *sp;
    int ns = find_spans(text, len, &sp);
    if (!ns) {
        free(sp);
        return tok_encode(t, text, len, flags, ids, n, e);
    }
    int32_t *out = NULL;
    int no = 0, cap = 0, rc = 0, replayed = 0;
    size_t pos = 0;
    for (int k = 0; k <= ns && !rc; k++) {
        size_t end = k < ns ? sp[k].at : len;
        if (end > pos) {
            int32_t *seg = NULL;
            int nseg = 0;
            rc = tok_encode(t, text + pos, end - pos, pos == 0 ? flags : flags & ~TOK_ADD_SPECIAL,
                            &seg, &nseg, e);
            if (!rc && append(&out, &no, &cap, seg, nseg))
                rc = cerr_set(e, CERR_NOMEM, "out of memory");
            free(seg);
        }
        if (!rc && k < ns) {
            if (append(&out, &no, &cap, sp[k].ids, sp[k].n_ids))
                rc = cerr_set(e, CERR_NOMEM, "out of memory");
            replayed += sp[k].n_ids;
            pos = sp[k].at + sp[k].n;
        }
    }
    for (int k = 0; k < ns; k++)
        free(sp[k].ids);
    free(sp);
    if (rc) {
        free(out);
        return rc;
    }
    /* the splice must spell the same text: a tokenizer that adds a dummy prefix to every
     * segment (SentencePiece) or merges across the span's ends would not; then the plain
     * encoding is used */
    char *back = NULL;
    size_t bl = 0;
    int same = tok_decode(t, out, no, 0, &back, &bl, NULL) == 0 && bl == len &&
               !memcmp(back, text, len);
    free(back);
    if (!same) {
        free(out);
        return tok_encode(t, text, len, flags, ids, n, e);
    }
    *ids = out;
    *n = no;
    if (n_replayed)
        *n_replayed = replayed;
    return 0;
}

/* ---- accumulating one generation -------------------------------------------------------- */

static void acc_text(struct genhist_acc *a, const char *text, size_t len)
{
    if (a->oom || !len)
        return;
    if (a->len + len > a->tcap) {
        size_t nc = a->tcap ? a->tcap : 1024;
        while (nc < a->len + len)
            nc *= 2;
        char *x = realloc(a->text, nc);
        if (!x) {
            a->oom = 1;
            return;
        }
        a->text = x;
        a->tcap = nc;
    }
    memcpy(a->text + a->len, text, len);
    a->len += len;
}

void genhist_acc_lead(struct genhist_acc *a, const struct tok *t, const int32_t *prompt, int n)
{
    a->lead_n = 0;
    int k = n < 8 ? n : 8; /* the last few tokens: the generation prompt's markup */
    char *txt = NULL;
    size_t tl = 0;
    if (k > 0 && t && tok_decode(t, prompt + n - k, k, 0, &txt, &tl, NULL) == 0) {
        a->lead_n = tl < GENHIST_LEAD ? tl : GENHIST_LEAD;
        memcpy(a->lead, txt + tl - a->lead_n, a->lead_n);
    }
    free(txt);
}

void genhist_acc_token(struct genhist_acc *a, int32_t id, const char *text, size_t len)
{
    if (a->oom)
        return;
    if (append(&a->ids, &a->n, &a->cap, &id, 1)) {
        a->oom = 1;
        return;
    }
    acc_text(a, text, len);
}

void genhist_acc_end(struct genhist_acc *a, const struct tok *t, const char *text, size_t len,
                     int keep, int drop_last)
{
    acc_text(a, text, len);
    int n = a->n - (drop_last && a->n > 0);
    for (int i = 0; i < n && keep && t; i++)
        keep = !tok_is_special(t, a->ids[i]);
    if (keep && !a->oom && n > 0)
        genhist_put(a->text, a->len, a->ids, n, a->lead, a->lead_n);
    free(a->ids);
    free(a->text);
    memset(a, 0, sizeof *a);
}

void genhist_stats(size_t *entries, size_t *bytes)
{
    pthread_mutex_lock(&g_mu);
    *entries = (size_t)g_count;
    *bytes = g_bytes;
    pthread_mutex_unlock(&g_mu);
}

void genhist_clear(void)
{
    pthread_mutex_lock(&g_mu);
    while (g_count)
        drop_oldest();
    g_head = 0;
    pthread_mutex_unlock(&g_mu);
}
