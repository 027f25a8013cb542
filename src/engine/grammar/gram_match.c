/* gram_match.c — the per-row matcher and its token masks.
 *
 * State: a set of parse stacks. A stack is a chain of nodes {pos, parent}: pos indexes
 * syms[] (the top's pos is always a terminal; lower nodes hold where to continue after the
 * rule above them ends); stack 0 is the empty stack — the text so far is complete. A byte
 * advances every stack whose top class holds it, then expands rule references until every
 * top is a terminal again (a reference in last position replaces its node: a tail call, so
 * repetition does not deepen the stack).
 * The mask walks the vocabulary in byte order (gram_vocab keeps the ids sorted by their
 * bytes with each one's common prefix with the one before), keeping the stack sets of the
 * current token's prefixes, so a shared prefix is advanced once, and a prefix no stack can
 * take rejects every token under it at once. Masks are cached per state (the exact stack
 * set) in a small LRU: a row inside a string or a number repeats its state.
 */
#include <stdlib.h>
#include <string.h>

#include "engine/grammar/gram_int.h"

/* ---- vocabulary ------------------------------------------------------------------------ */

struct gram_vocab {
    int n_vocab, n_tok, max_len;
    char *data;      /* all bytes */
    size_t *off;     /* (n_vocab) */
    int *len;        /* (n_vocab); < 0 special */
    int32_t *order;  /* (n_tok) ids with bytes, sorted by bytes */
    uint32_t *lcp;   /* (n_tok) common prefix with the previous in order */
    uint8_t *eog;    /* (n_vocab) */
};

static const struct gram_vocab *sort_v;

static int cmp_tok(const void *a, const void *b)
{
    const struct gram_vocab *v = sort_v;
    int32_t x = *(const int32_t *)a, y = *(const int32_t *)b;
    int lx = v->len[x], ly = v->len[y], n = lx < ly ? lx : ly;
    int c = memcmp(v->data + v->off[x], v->data + v->off[y], (size_t)n);
    if (c)
        return c;
    if (lx != ly)
        return lx < ly ? -1 : 1;
    return x < y ? -1 : x > y;
}

int gram_vocab_new(struct gram_vocab **out, int n_vocab, const char *const *bytes,
                   const int *len, const int32_t *eog, int n_eog, struct cerr *e)
{
    *out = NULL;
    struct gram_vocab *v = calloc(1, sizeof *v);
    if (!v)
        return cerr_set(e, CERR_NOMEM, "out of memory");
    v->n_vocab = n_vocab;
    size_t total = 0;
    for (int i = 0; i < n_vocab; i++)
        if (len[i] > 0)
            total += (size_t)len[i];
    v->data = malloc(total + 1);
    v->off = calloc((size_t)n_vocab + 1, sizeof *v->off);
    v->len = calloc((size_t)n_vocab + 1, sizeof *v->len);
    v->order = malloc(((size_t)n_vocab + 1) * sizeof *v->order);
    v->lcp = calloc((size_t)n_vocab + 1, sizeof *v->lcp);
    v->eog = calloc((size_t)n_vocab + 1, 1);
    if (!v->data || !v->off || !v->len || !v->order || !v->lcp || !v->eog) {
        gram_vocab_free(v);
        return cerr_set(e, CERR_NOMEM, "out of memory");
    }
    size_t at = 0;
    for (int i = 0; i < n_vocab; i++) {
        v->len[i] = len[i] > 0 ? len[i] : -1;
        v->off[i] = at;
        if (len[i] > 0) {
            memcpy(v->data + at, bytes[i], (size_t)len[i]);
            at += (size_t)len[i];
            v->order[v->n_tok++] = i;
            if (len[i] > v->max_len)
                v->max_len = len[i];
        }
    }
    for (int i = 0; i < n_eog; i++)
        if (eog[i] >= 0 && eog[i] < n_vocab)
            v->eog[eog[i]] = 1;
    for (int i = 0; i < n_vocab; i++)
        if (v->eog[i])
            v->len[i] = -1; /* an end id never stands for text */
    int k = 0;
    for (int i = 0; i < v->n_tok; i++)
        if (!v->eog[v->order[i]])
            v->order[k++] = v->order[i];
    v->n_tok = k;
    sort_v = v; /* qsort has no context argument; vocabularies are built on one thread */
    qsort(v->order, (size_t)v->n_tok, sizeof *v->order, cmp_tok);
    for (int i = 1; i < v->n_tok; i++) {
        int a = v->order[i - 1], b = v->order[i];
        int n = v->len[a] < v->len[b] ? v->len[a] : v->len[b], l = 0;
        while (l < n && v->data[v->off[a] + (size_t)l] == v->data[v->off[b] + (size_t)l])
            l++;
        v->lcp[i] = (uint32_t)l;
    }
    *out = v;
    return 0;
}

void gram_vocab_free(struct gram_vocab *v)
{
    if (!v)
        return;
    free(v->data);
    free(v->off);
    free(v->len);
    free(v->order);
    free(v->lcp);
    free(v->eog);
    free(v);
}

int gram_vocab_size(const struct gram_vocab *v) { return v->n_vocab; }

/* ---- matcher --------------------------------------------------------------------------- */

struct gnode {
    uint32_t pos, parent;
};

#define NCACHE 32
#define MAX_EXPAND_DEPTH 2000

struct mcache {
    uint64_t h;
    uint32_t *key;
    int key_len;
    uint32_t *mask;
    int count;
    long used;
};

struct gram_matcher {
    struct gram *g;
    const struct gram_vocab *v;
    struct gnode *nd;
    uint32_t n_nd, cap_nd, base_nd; /* nodes [1, base_nd) are the current state's */
    uint32_t *set;                  /* stack ids; set[0..n_cur) is the current state */
    size_t n_set, cap_set;
    int n_cur;
    uint32_t *set_start, *nd_mark; /* (max_len + 2) per depth of the mask walk */
    int bad;                        /* out of memory or expansion too deep */
    struct mcache cache[NCACHE];
    long masks, hits, tick;
    uint32_t *key;
    int key_cap;
};

static uint32_t node(struct gram_matcher *m, uint32_t pos, uint32_t parent)
{
    if (m->n_nd == m->cap_nd) {
        uint32_t nc = m->cap_nd ? m->cap_nd * 2 : 1024;
        void *q = realloc(m->nd, (size_t)nc * sizeof *m->nd);
        if (!q) {
            m->bad = 1;
            return 0;
        }
        m->nd = q;
        m->cap_nd = nc;
    }
    m->nd[m->n_nd].pos = pos;
    m->nd[m->n_nd].parent = parent;
    return m->n_nd++;
}

static int stack_eq(const struct gram_matcher *m, uint32_t a, uint32_t b)
{
    while (a != b) {
        if (!a || !b || m->nd[a].pos != m->nd[b].pos)
            return 0;
        a = m->nd[a].parent;
        b = m->nd[b].parent;
    }
    return 1;
}

static void set_add(struct gram_matcher *m, uint32_t id)
{
    if (m->n_set == m->cap_set) {
        size_t nc = m->cap_set ? m->cap_set * 2 : 1024;
        void *q = realloc(m->set, nc * sizeof *m->set);
        if (!q) {
            m->bad = 1;
            return;
        }
        m->set = q;
        m->cap_set = nc;
    }
    m->set[m->n_set++] = id;
}

/* Adds to the set being built (from index start) every stack with a terminal on top that
 * continuing at pos under parent leads to. */
static void expand(struct gram_matcher *m, size_t start, uint32_t pos, uint32_t parent, int depth)
{
    const struct gram *g = m->g;
    if (depth > MAX_EXPAND_DEPTH || m->bad) {
        m->bad = 1;
        return;
    }
    for (;;) {
        struct gsym s = g->syms[pos];
        if (s.kind == GS_END) {
            if (!parent) {
                for (size_t k = start; k < m->n_set; k++)
                    if (m->set[k] == 0)
                        return;
                set_add(m, 0);
                return;
            }
            pos = m->nd[parent].pos;
            parent = m->nd[parent].parent;
            continue;
        }
        if (s.kind == GS_TERM) {
            for (size_t k = start; k < m->n_set; k++) {
                uint32_t x = m->set[k];
                if (x && m->nd[x].pos == pos && stack_eq(m, m->nd[x].parent, parent))
                    return;
            }
            uint32_t id = node(m, pos, parent);
            if (id)
                set_add(m, id);
            return;
        }
        uint32_t np = g->syms[pos + 1].kind == GS_END ? parent : node(m, pos + 1, parent);
        if (m->bad)
            return;
        uint32_t a0 = g->alt0[s.arg], na = g->nalt[s.arg];
        for (uint32_t a = 0; a < na; a++)
            expand(m, start, g->alts[a0 + a], np, depth + 1);
        return;
    }
}

/* Advances set[s0, s1) over byte b, appending the new set; returns its size. */
static size_t advance(struct gram_matcher *m, size_t s0, size_t s1, unsigned b)
{
    size_t start = m->n_set;
    const struct gram *g = m->g;
    for (size_t k = s0; k < s1; k++) {
        uint32_t id = m->set[k];
        if (!id)
            continue;
        uint32_t pos = m->nd[id].pos;
        if (gcls_has(&g->cls[g->syms[pos].arg], b))
            expand(m, start, pos + 1, m->nd[id].parent, 0);
    }
    return m->n_set - start;
}

int gram_matcher_new(struct gram_matcher **out, struct gram *g, const struct gram_vocab *v,
                     struct cerr *e)
{
    *out = NULL;
    struct gram_matcher *m = calloc(1, sizeof *m);
    if (!m)
        return cerr_set(e, CERR_NOMEM, "out of memory");
    m->g = gram_ref(g);
    m->v = v;
    int ml = v ? v->max_len : 0;
    m->set_start = calloc((size_t)ml + 3, sizeof *m->set_start);
    m->nd_mark = calloc((size_t)ml + 3, sizeof *m->nd_mark);
    node(m, 0, 0); /* node 0 = the empty stack */
    if (!m->set_start || !m->nd_mark || m->bad) {
        gram_matcher_free(m);
        return cerr_set(e, CERR_NOMEM, "out of memory");
    }
    uint32_t r = (uint32_t)g->root;
    for (uint32_t a = 0; a < g->nalt[r]; a++)
        expand(m, 0, g->alts[g->alt0[r] + a], 0, 0);
    if (m->bad) {
        gram_matcher_free(m);
        return cerr_set(e, CERR_LIMIT, "the grammar nests too deeply at its start");
    }
    m->n_cur = (int)m->n_set;
    m->base_nd = m->n_nd;
    *out = m;
    return 0;
}

void gram_matcher_free(struct gram_matcher *m)
{
    if (!m)
        return;
    gram_unref(m->g);
    free(m->nd);
    free(m->set);
    free(m->set_start);
    free(m->nd_mark);
    for (int i = 0; i < NCACHE; i++) {
        free(m->cache[i].key);
        free(m->cache[i].mask);
    }
    free(m->key);
    free(m);
}

/* Copies stack id (and what it sits on) into a compacted node array. */
static uint32_t copy_stack(const struct gnode *old, uint32_t *remap, struct gram_matcher *m, uint32_t id)
{
    if (!id)
        return 0;
    if (remap[id])
        return remap[id];
    uint32_t p = copy_stack(old, remap, m, old[id].parent);
    uint32_t n = node(m, old[id].pos, p);
    remap[id] = n;
    return n;
}

int gram_matcher_accept_bytes(struct gram_matcher *m, const char *s, size_t n)
{
    size_t s0 = 0, s1 = (size_t)m->n_cur;
    m->n_set = s1;
    m->n_nd = m->base_nd;
    m->bad = 0;
    for (size_t i = 0; i < n; i++) {
        size_t c = advance(m, s0, s1, (uint8_t)s[i]);
        if (!c || m->bad) {
            m->n_set = (size_t)m->n_cur;
            m->n_nd = m->base_nd;
            m->bad = 0;
            return CERR_INVALID;
        }
        s0 = s1;
        s1 = m->n_set;
    }
    if (!n)
        return 0;
    /* compact: the new state's stacks into fresh nodes */
    uint32_t n_old = m->n_nd;
    struct gnode *old = m->nd;
    uint32_t *remap = calloc(n_old, sizeof *remap);
    struct gnode *fresh = malloc((size_t)m->cap_nd * sizeof *fresh);
    if (!remap || !fresh) {
        free(remap);
        free(fresh);
        m->n_set = (size_t)m->n_cur;
        m->n_nd = m->base_nd;
        return CERR_NOMEM;
    }
    m->nd = fresh;
    m->n_nd = 1;
    fresh[0] = old[0];
    size_t k = 0;
    for (size_t i = s0; i < s1; i++)
        m->set[k++] = copy_stack(old, remap, m, m->set[i]);
    free(remap);
    free(old);
    m->n_cur = (int)k;
    m->n_set = k;
    m->base_nd = m->n_nd;
    return 0;
}

int gram_matcher_complete(const struct gram_matcher *m)
{
    for (int i = 0; i < m->n_cur; i++)
        if (m->set[i] == 0)
            return 1;
    return 0;
}

int gram_matcher_done(const struct gram_matcher *m)
{
    return m->n_cur == 1 && m->set[0] == 0;
}

int gram_matcher_accept(struct gram_matcher *m, int32_t id)
{
    const struct gram_vocab *v = m->v;
    if (!v || id < 0 || id >= v->n_vocab)
        return CERR_INVALID;
    if (v->eog[id])
        return gram_matcher_complete(m) ? 0 : CERR_INVALID;
    if (v->len[id] <= 0)
        return CERR_INVALID;
    return gram_matcher_accept_bytes(m, v->data + v->off[id], (size_t)v->len[id]);
}

/* the state as a key: each stack's positions top down, 0-terminated */
static int make_key(struct gram_matcher *m, uint64_t *h)
{
    int n = 0;
    for (int i = 0; i < m->n_cur; i++) {
        for (uint32_t x = m->set[i];; x = m->nd[x].parent) {
            if (n + 1 >= m->key_cap) {
                int nc = m->key_cap ? m->key_cap * 2 : 256;
                void *q = realloc(m->key, (size_t)nc * sizeof *m->key);
                if (!q)
                    return -1;
                m->key = q;
                m->key_cap = nc;
            }
            m->key[n++] = x ? m->nd[x].pos : 0;
            if (!x)
                break;
        }
    }
    *h = gram_hash_bytes((const char *)m->key, (size_t)n * sizeof *m->key);
    return n;
}

int gram_matcher_mask(struct gram_matcher *m, uint32_t *mask)
{
    const struct gram_vocab *v = m->v;
    size_t words = ((size_t)v->n_vocab + 31) / 32;
    m->masks++;
    m->tick++;
    uint64_t h = 0;
    int kl = make_key(m, &h);
    for (int i = 0; kl >= 0 && i < NCACHE; i++) {
        struct mcache *c = &m->cache[i];
        if (c->mask && c->h == h && c->key_len == kl && !memcmp(c->key, m->key, (size_t)kl * 4)) {
            memcpy(mask, c->mask, words * 4);
            c->used = m->tick;
            m->hits++;
            return c->count;
        }
    }
    memset(mask, 0, words * 4);
    int count = 0;
    if (gram_matcher_complete(m))
        for (int i = 0; i < v->n_vocab; i++)
            if (v->eog[i]) {
                mask[i >> 5] |= 1u << (i & 31);
                count++;
            }
    m->bad = 0;
    m->n_set = (size_t)m->n_cur;
    m->n_nd = m->base_nd;
    m->set_start[0] = 0;
    m->set_start[1] = (uint32_t)m->n_cur;
    m->nd_mark[1] = m->base_nd;
    uint32_t have = 0;
    for (int k = 0; k < v->n_tok; k++) {
        int32_t t = v->order[k];
        const uint8_t *b = (const uint8_t *)v->data + v->off[t];
        uint32_t L = (uint32_t)v->len[t];
        uint32_t d = v->lcp[k] < have ? v->lcp[k] : have;
        m->n_set = m->set_start[d + 1];
        m->n_nd = m->nd_mark[d + 1];
        int ok = 1;
        while (d < L) {
            size_t c = advance(m, m->set_start[d], m->set_start[d + 1], b[d]);
            m->set_start[d + 2] = (uint32_t)m->n_set;
            m->nd_mark[d + 2] = m->n_nd;
            d++;
            if (!c || m->bad) {
                ok = 0;
                break;
            }
        }
        have = d;
        if (m->bad) {
            m->bad = 0;
            have = 0; /* too deep: this token is out, start the next one afresh */
        }
        if (!ok) {
            while (k + 1 < v->n_tok && v->lcp[k + 1] >= d)
                k++;
            continue;
        }
        mask[t >> 5] |= 1u << (t & 31);
        count++;
    }
    m->n_set = (size_t)m->n_cur;
    m->n_nd = m->base_nd;
    /* cache it (LRU) */
    if (kl >= 0) {
        struct mcache *c = &m->cache[0];
        for (int i = 0; i < NCACHE; i++) {
            if (!m->cache[i].mask) {
                c = &m->cache[i];
                break;
            }
            if (m->cache[i].used < c->used)
                c = &m->cache[i];
        }
        if (!c->mask)
            c->mask = malloc(words * 4);
        uint32_t *nk = realloc(c->key, ((size_t)kl + 1) * sizeof *nk);
        if (nk)
            c->key = nk;
        if (c->mask && nk) {
            memcpy(c->mask, mask, words * 4);
            memcpy(c->key, m->key, (size_t)kl * 4);
            c->key_len = kl;
            c->h = h;
            c->count = count;
            c->used = m->tick;
        } else {
            c->key_len = -1;
        }
    }
    return count;
}

void gram_matcher_stats(const struct gram_matcher *m, long *masks, long *cache_hits)
{
    *masks = m->masks;
    *cache_hits = m->hits;
}

int gram_accepts(const struct gram *g, const char *s, size_t n)
{
    struct gram_matcher *m;
    if (gram_matcher_new(&m, (struct gram *)g, NULL, NULL))
        return 0;
    int ok = gram_matcher_accept_bytes(m, s, n) == 0 && gram_matcher_complete(m);
    gram_matcher_free(m);
    return ok;
}
