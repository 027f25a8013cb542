/* bpe.c — the BPE model: one pre-tokenized word -> ids.
 *
 * Symbols start as single bytes (byte-level vocabularies) or single characters (with byte
 * fallback <0xXX> or unk for characters outside the vocabulary), then the lowest-ranked
 * adjacent pair is merged until none is left, ties going to the leftmost pair — the order
 * of HF tokenizers' BPE::merge_word and of SentencePiece's BPE (ranks there come from
 * piece scores). A binary heap over candidate pairs keeps long words O(n log n).
 */
#include <stdlib.h>
#include <string.h>

#include "tokenizer/tok_int.h"
#include "util/err.h"

struct sym {
    int32_t id;
    int32_t prev, next; /* -1 at the ends; prev == -2 marks a merged-away symbol */
};

struct cand {
    uint64_t key; /* rank << 32 | left position: smaller first */
    int32_t a, b; /* ids the pair had when queued (stale entries are skipped) */
};

static int grow(void **p, size_t *cap, size_t need, size_t elem)
{
    if (need <= *cap)
        return 0;
    size_t c = *cap ? *cap : 64;
    while (c < need)
        c *= 2;
    void *q = realloc(*p, c * elem);
    if (!q)
        return -1;
    *p = q;
    *cap = c;
    return 0;
}

int tok_push_id(struct tok_scratch *sc, int32_t id)
{
    if (sc->n_ids == sc->cap_ids) {
        size_t c = sc->cap_ids ? sc->cap_ids * 2 : 256;
        int32_t *p = realloc(sc->ids, c * sizeof *p);
        if (!p)
            return -1;
        sc->ids = p;
        sc->cap_ids = c;
    }
    sc->ids[sc->n_ids++] = id;
    return 0;
}

static void heap_push(struct cand *h, size_t *n, struct cand c)
{
    size_t i = (*n)++;
    while (i > 0) {
        size_t p = (i - 1) / 2;
        if (h[p].key <= c.key)
            break;
        h[i] = h[p];
        i = p;
    }
    h[i] = c;
}

static struct cand heap_pop(struct cand *h, size_t *n)
{
    struct cand top = h[0], last = h[--(*n)];
    size_t i = 0;
    for (;;) {
        size_t l = 2 * i + 1, r = l + 1, m = i;
        uint64_t mk = last.key;
        if (l < *n && h[l].key < mk) {
            m = l;
            mk = h[l].key;
        }
        if (r < *n && h[r].key < mk)
            m = r;
        if (m == i)
            break;
        h[i] = h[m];
        i = m;
    }
    if (*n)
        h[i] = last;
    return top;
}

static void queue_pair(const struct tok *t, struct sym *s, int32_t i, struct cand *h, size_t *hn)
{
    int32_t j = s[i].next;
    if (j < 0)
        return;
    const struct tok_pair_slot *m = tok_pairmap_get(&t->merges, s[i].id, s[j].id);
    if (!m)
        return;
    heap_push(h, hn, (struct cand){((uint64_t)(uint32_t)m->rank << 32) | (uint32_t)i, s[i].id,
                                   s[j].id});
}

/* Builds the initial symbols of w into sc->sym; returns the count or -1 (no memory). */
static long initial_symbols(const struct tok *t, struct tok_scratch *sc, const char *w, size_t n)
{
    if (grow(&sc->sym, &sc->sym_cap, n * 4 + 4, sizeof(struct sym)))
        return -1;
    struct sym *s = sc->sym;
    long k = 0;
    int prev_unk = 0;
    const uint8_t *u = (const uint8_t *)w;
    for (size_t i = 0; i < n;) {
        int32_t id;
        size_t l;
        if (t->byte_level) {
            l = 1;
            id = t->byte_id[u[i]];
            if (id >= 0) {
                s[k++].id = id;
                prev_unk = 0;
                i += l;
                continue;
            }
        } else {
            if (u[i] < 0x80) {
                l = 1;
                id = t->ascii_id[u[i]];
            } else {
                int cl = tok_utf8_len(u + i, n - i);
                l = cl ? (size_t)cl : 1;
                id = tok_map_get(&t->vocab, w + i, (uint32_t)l);
            }
            if (id >= 0) {
                s[k++].id = id;
                prev_unk = 0;
                i += l;
                continue;
            }
            if (t->byte_fallback) {
                int ok = 1;
                for (size_t b = 0; b < l; b++)
                    if (t->byte_id[u[i + b]] < 0)
                        ok = 0;
                if (ok) {
                    for (size_t b = 0; b < l; b++)
                        s[k++].id = t->byte_id[u[i + b]];
                    prev_unk = 0;
                    i += l;
                    continue;
                }
            }
        }
        /* unknown: unk (fused when asked) or dropped when the model has none */
        if (t->unk_id >= 0 && !(t->fuse_unk && prev_unk)) {
            s[k++].id = t->unk_id;
        }
        prev_unk = t->unk_id >= 0;
        i += l;
    }
    for (long i = 0; i < k; i++) {
        s[i].prev = (int32_t)i - 1;
        s[i].next = i + 1 < k ? (int32_t)i + 1 : -1;
    }
    return k;
}

int tok_bpe_word(const struct tok *t, struct tok_scratch *sc, const char *w, size_t n,
                 struct cerr *e)
{
    if (n == 0)
        return 0;
    if (t->ignore_merges) {
        int32_t id = tok_map_get(&t->vocab, w, (uint32_t)n);
        if (id >= 0)
            return tok_push_id(sc, id) ? cerr_set(e, CERR_NOMEM, "out of memory") : 0;
    }
    long k = initial_symbols(t, sc, w, n);
    if (k < 0)
        return cerr_set(e, CERR_NOMEM, "out of memory");
    struct sym *s = sc->sym;
    if (k >= 2) {
        if (grow(&sc->heap, &sc->heap_cap, (size_t)k * 2 + 8, sizeof(struct cand)))
            return cerr_set(e, CERR_NOMEM, "out of memory");
        struct cand *h = sc->heap;
        size_t hn = 0;
        for (int32_t i = 0; i + 1 < k; i++)
            queue_pair(t, s, i, h, &hn);
        while (hn) {
            struct cand c = heap_pop(h, &hn);
            int32_t i = (int32_t)(uint32_t)c.key;
            if (s[i].prev == -2 || s[i].id != c.a)
                continue;
            int32_t j = s[i].next;
            if (j < 0 || s[j].id != c.b)
                continue;
            const struct tok_pair_slot *m = tok_pairmap_get(&t->merges, c.a, c.b);
            if (!m)
                continue;
            s[i].id = m->id;
            s[i].next = s[j].next;
            if (s[j].next >= 0)
                s[s[j].next].prev = i;
            s[j].prev = -2;
            s[j].id = -1;
            /* the heap holds at most one live entry per adjacent pair plus stale ones;
             * it never needs more than 2 pushes per merge */
            if (hn + 2 > sc->heap_cap) {
                if (grow(&sc->heap, &sc->heap_cap, hn + 2, sizeof(struct cand)))
                    return cerr_set(e, CERR_NOMEM, "out of memory");
                h = sc->heap;
            }
            if (s[i].prev >= 0)
                queue_pair(t, s, s[i].prev, h, &hn);
            queue_pair(t, s, i, h, &hn);
        }
    }
    for (int32_t i = k > 0 ? 0 : -1; i >= 0; i = s[i].next)
        if (tok_push_id(sc, s[i].id))
            return cerr_set(e, CERR_NOMEM, "out of memory");
    return 0;
}
