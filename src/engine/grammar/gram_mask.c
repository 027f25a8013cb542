/* gram_mask.c — token masks: which vocabulary ids the matcher's state can take next.
 *
 * Three ways, same answer (tests compare them with stepping each id alone):
 * - a direct walk of the token trie from the state's stack set: a prefix no stack takes
 *   rejects its whole subtree at once, so states that take few tokens (a literal, a number,
 *   whitespace) cost the few nodes they keep alive;
 * - where that walk grows past a budget (a string body, free text take most of the
 *   vocabulary), token tables per stack (gram_mint.h): the ids a stack's top frames take
 *   whatever lies below are OR-ed in, and only the uncertain subtrees are walked with the
 *   real stacks. A table's frames deepen (1, 2, ... 6) until it leaves few uncertain ids;
 *   tables are shared through the vocabulary, keyed by the sub-grammar they depend on up to
 *   HORIZON bytes ahead (ids longer than that are uncertain), so a string body, a number or
 *   a counted repetition far from its bound reuse one table across steps and grammars;
 * - an LRU of whole masks per exact state (a row inside a string repeats its state).
 * End-of-generation ids are allowed exactly where the text is complete.
 */
#include <stdlib.h>
#include <string.h>

#include "engine/grammar/gram_mint.h"

#define KMAX 6

static inline void set_here(const struct gram_vocab *v, uint32_t i, uint32_t *mask)
{
    for (uint32_t k = v->t0[i], e = k + v->here[i]; k < e; k++) {
        uint32_t t = (uint32_t)v->order[k];
        mask[t >> 5] |= 1u << (t & 31);
    }
}

/* Walks the trie nodes [lo, hi) (whole subtrees; m->at[dep[lo] - 1] holds the set before
 * them), setting the bits of the ids the sets take. 0, -1 past budget nodes (budget < 0:
 * none; the bits set so far are right), -2 out of memory. */
static int walk(struct gram_matcher *m, uint32_t lo, uint32_t hi, uint32_t *mask, long budget)
{
    const struct gram_vocab *v = m->v;
    long vis = 0;
    for (uint32_t i = lo; i < hi;) {
        unsigned d = v->dep[i];
        uint32_t s = gm_step(m, m->at[d - 1], v->nb[i]);
        if (m->bad)
            return -2;
        if (!s) {
            i = v->end[i];
            continue;
        }
        m->at[d] = s;
        set_here(v, i, mask);
        i++;
        if (budget >= 0 && ++vis > budget)
            return -1;
    }
    return 0;
}

/* ---- token tables ---------------------------------------------------------------------- */

struct hk {
    uint64_t a, b;
};

static inline uint64_t mix(uint64_t x)
{
    x ^= x >> 30;
    x *= 0xbf58476d1ce4e5b9ull;
    x ^= x >> 27;
    x *= 0x94d049bb133111ebull;
    return x ^ (x >> 31);
}

static inline void emit(struct hk *h, uint64_t x)
{
    h->a = mix(h->a ^ x) + 0x9E3779B97F4A7C15ull;
    h->b = mix(h->b + x * 0xD6E8FEB86659FD93ull) ^ 0x632BE59BD9B4E019ull;
}

static int minlen_init(struct gram_matcher *m)
{
    const struct gram *g = m->g;
    m->minlen = malloc((size_t)g->n_rules + 1);
    if (!m->minlen)
        return CERR_NOMEM;
    memset(m->minlen, HORIZON + 1, (size_t)g->n_rules + 1);
    for (int changed = 1; changed;) {
        changed = 0;
        for (int r = 0; r < g->n_rules; r++)
            for (uint32_t a = 0; a < g->nalt[r]; a++) {
                unsigned n = 0;
                for (uint32_t p = g->alts[g->alt0[r] + a]; g->syms[p].kind != GS_END && n <= HORIZON; p++)
                    n += g->syms[p].kind == GS_TERM ? 1 : m->minlen[g->syms[p].arg];
                if (n > HORIZON + 1)
                    n = HORIZON + 1;
                if (n < m->minlen[r]) {
                    m->minlen[r] = (uint8_t)n;
                    changed = 1;
                }
            }
    }
    return 0;
}

/* The number of (rule, budget) key k in this hash, given on first meeting; -1 out of memory. */
static int64_t canon(struct gram_matcher *m, uint32_t k)
{
    if ((m->n_rq + 1) * 2 > m->rmap_cap) {
        uint32_t nc = m->rmap_cap ? m->rmap_cap * 2 : 256;
        uint32_t *nm = calloc(nc, sizeof *nm), *nn = malloc(nc * sizeof *nn);
        uint32_t *nq = realloc(m->rq, nc * sizeof *nq);
        if (!nm || !nn || !nq) {
            free(nm);
            free(nn);
            if (nq)
                m->rq = nq;
            return -1;
        }
        m->rq = nq;
        for (uint32_t i = 0; i < m->rmap_cap; i++)
            if (m->rmap[i]) {
                uint32_t h = ((m->rmap[i] - 1) * 0x9E3779B1u) & (nc - 1);
                while (nm[h])
                    h = (h + 1) & (nc - 1);
                nm[h] = m->rmap[i];
                nn[h] = m->rnum[i];
            }
        free(m->rmap);
        free(m->rnum);
        m->rmap = nm;
        m->rnum = nn;
        m->rmap_cap = nc;
    }
    uint32_t h = (k * 0x9E3779B1u) & (m->rmap_cap - 1);
    for (; m->rmap[h]; h = (h + 1) & (m->rmap_cap - 1))
        if (m->rmap[h] == k + 1)
            return m->rnum[h];
    m->rmap[h] = k + 1;
    m->rnum[h] = m->n_rq;
    m->rq[m->n_rq] = k;
    return m->n_rq++;
}

/* Hashes the symbols from p to the end of their alternative, read with budget bytes left
 * before the horizon. Returns the budget left at the end (<= 0: cut at the horizon), or
 * INT32_MIN out of memory. */
static int emit_seq(struct gram_matcher *m, struct hk *h, uint32_t p, int budget)
{
    const struct gram *g = m->g;
    for (;; p++) {
        struct gsym s = g->syms[p];
        if (s.kind == GS_END) {
            emit(h, 0);
            return budget;
        }
        if (budget <= 0) {
            emit(h, 3);
            return budget;
        }
        if (s.kind == GS_TERM) {
            const struct gcls *c = &g->cls[s.arg];
            emit(h, 1);
            for (int w = 0; w < 4; w++)
                emit(h, c->w[w]);
            budget--;
            continue;
        }
        int64_t id = canon(m, s.arg << 6 | (uint32_t)budget);
        if (id < 0)
            return INT32_MIN;
        emit(h, 2);
        emit(h, (uint64_t)id);
        budget -= m->minlen[s.arg];
    }
}

/* The key of the table for the top k frames of stack id (exact: the whole stack): a hash of
 * what those frames can still read within HORIZON bytes — the rest of each frame's
 * alternative and the rules reachable from them, each (rule, budget) numbered in the order
 * met, so equal sub-grammars of different grammars hash alike. *cut: the horizon ends
 * inside the k frames (deeper frames would change nothing). */
static int chain_key(struct gram_matcher *m, uint32_t id, int k, int exact, struct hk *h, int *cut)
{
    const struct gram *g = m->g;
    if (!m->minlen && minlen_init(m))
        return CERR_NOMEM;
    h->a = 0x243F6A8885A308D3ull;
    h->b = 0x13198A2E03707344ull;
    m->n_rq = 0;
    uint32_t x = id;
    int budget = HORIZON;
    *cut = 0;
    for (int j = 0; j < k && !*cut; j++) {
        emit(h, 0xF7A3E);
        budget = emit_seq(m, h, m->nd[x].pos, budget);
        if (budget == INT32_MIN)
            return CERR_NOMEM;
        *cut = budget <= 0;
        x = m->nd[x].parent;
    }
    emit(h, *cut ? 0xC07u : exact ? 0xB0770Au : 0x5E47u);
    int rc = 0;
    for (uint32_t q = 0; q < m->n_rq && !rc; q++) {
        uint32_t r = m->rq[q] >> 6;
        int b = (int)(m->rq[q] & 63);
        emit(h, 0xA17u);
        emit(h, g->nalt[r]);
        for (uint32_t a = 0; a < g->nalt[r] && !rc; a++)
            if (emit_seq(m, h, g->alts[g->alt0[r] + a], b) == INT32_MIN)
                rc = CERR_NOMEM;
    }
    for (uint32_t i = 0; i < m->rmap_cap; i++) /* small: sized by the keys met */
        m->rmap[i] = 0;
    return rc;
}

static int push_root(struct gtab *t, size_t *cap, uint32_t i)
{
    if (t->n_unc == *cap) {
        *cap = *cap ? *cap * 2 : 64;
        void *q = realloc(t->unc, *cap * sizeof *t->unc);
        if (!q)
            return 0;
        t->unc = q;
    }
    t->unc[t->n_unc++] = i;
    return 1;
}

/* chain_key through a memo of frame positions (many stacks share their top frames). */
static int chain_key_memo(struct gram_matcher *m, uint32_t id, int k, int exact, struct hk *h, int *cut)
{
    struct keymemo e = {{0}, (uint32_t)k | (exact ? 256u : 0u), 0, 0, 0};
    uint32_t x = id, hh = e.k * 0x9E3779B1u;
    for (int j = 0; j < k; j++) {
        e.pos[j] = m->nd[x].pos;
        hh = (hh ^ e.pos[j]) * 0x85EBCA6Bu;
        hh ^= hh >> 13;
        x = m->nd[x].parent;
    }
    if (m->km_cap) {
        for (uint32_t i = hh & (m->km_cap - 1);; i = (i + 1) & (m->km_cap - 1)) {
            const struct keymemo *q = &m->km[i];
            if (!q->k)
                break;
            if (q->k == e.k && !memcmp(q->pos, e.pos, sizeof e.pos)) {
                h->a = q->a;
                h->b = q->b;
                *cut = q->cut;
                return 0;
            }
        }
    }
    int rc = chain_key(m, id, k, exact, h, cut);
    if (rc)
        return rc;
    if ((m->km_n + 1) * 2 > m->km_cap) {
        uint32_t nc = m->km_cap ? m->km_cap * 2 : 256;
        struct keymemo *nk = calloc(nc, sizeof *nk);
        if (!nk)
            return 0;
        for (uint32_t i = 0; i < m->km_cap; i++)
            if (m->km[i].k) {
                uint32_t g = m->km[i].k * 0x9E3779B1u;
                for (int j = 0; j < (int)(m->km[i].k & 255); j++) {
                    g = (g ^ m->km[i].pos[j]) * 0x85EBCA6Bu;
                    g ^= g >> 13;
                }
                uint32_t t = g & (nc - 1);
                while (nk[t].k)
                    t = (t + 1) & (nc - 1);
                nk[t] = m->km[i];
            }
        free(m->km);
        m->km = nk;
        m->km_cap = nc;
    }
    uint32_t i = hh & (m->km_cap - 1);
    while (m->km[i].k)
        i = (i + 1) & (m->km_cap - 1);
    e.a = h->a;
    e.b = h->b;
    e.cut = *cut;
    m->km[i] = e;
    m->km_n++;
    return 0;
}

/* Classifies every id for the top k frames of stack id (gram_mint.h). NULL: out of memory. */
static struct gtab *build_table(struct gram_matcher *m, uint32_t id, int k, int exact)
{
    const struct gram_vocab *v = m->v;
    size_t words = ((size_t)v->n_vocab + 31) / 32;
    uint32_t pos[KMAX], x = id;
    for (int j = 0; j < k; j++) {
        pos[j] = m->nd[x].pos;
        x = m->nd[x].parent;
    }
    uint32_t b = exact ? 0 : SENT_NODE;
    for (int j = k - 1; j >= 0; j--)
        b = gm_node(m, pos[j], b);
    size_t st = m->n_tmp;
    gm_tmp_add(m, st, b);
    uint32_t s0 = gm_intern_set(m, st);
    struct gtab *t = calloc(1, sizeof *t);
    if (!m->accbuf)
        m->accbuf = malloc(words * sizeof *m->accbuf);
    if (!t || !m->accbuf || m->bad)
        goto oom;
    memset(m->accbuf, 0, words * sizeof *m->accbuf);
    size_t cap = 0;
    m->at[0] = s0;
    m->ctx[0] = 0;
    for (uint32_t i = 0; i < v->n_node;) {
        unsigned d = v->dep[i];
        if (d > HORIZON) { /* past the horizon: up to the real stacks */
            if (!push_root(t, &cap, i))
                goto oom;
            t->unc_tok += v->t0[v->end[i]] - v->t0[i];
            i = v->end[i];
            continue;
        }
        uint32_t ps = m->at[d - 1];
        uint8_t pc = m->ctx[d - 1] | (uint8_t)m->sets[ps].sent;
        uint32_t s = gm_step(m, ps, v->nb[i]);
        if (m->bad)
            goto oom;
        if (!s) {
            if (pc) { /* a branch left the frames before this byte: up to the real stacks */
                if (!push_root(t, &cap, i))
                    goto oom;
                t->unc_tok += v->t0[v->end[i]] - v->t0[i];
            }
            i = v->end[i];
            continue;
        }
        m->at[d] = s;
        m->ctx[d] = pc;
        t->n_acc += v->here[i];
        set_here(v, i, m->accbuf);
        i++;
    }
    if (t->n_acc > words) {
        t->dense = 1;
        t->acc = malloc(words * sizeof *t->acc);
        if (!t->acc)
            goto oom;
        memcpy(t->acc, m->accbuf, words * sizeof *t->acc);
        t->bytes = words * 4;
    } else {
        t->acc = malloc(((size_t)t->n_acc + 1) * sizeof *t->acc);
        if (!t->acc)
            goto oom;
        uint32_t n = 0;
        for (size_t w = 0; w < words; w++)
            for (uint32_t bits = m->accbuf[w]; bits; bits &= bits - 1)
                t->acc[n++] = (uint32_t)(w * 32 + (size_t)__builtin_ctz(bits));
        t->bytes = (size_t)n * 4;
    }
    t->bytes += sizeof *t + (size_t)t->n_unc * 4;
    m->tabs_built++;
    return t;
oom:
    gram_tab_free(t);
    return NULL;
}

static struct gtab *memo_get(struct gram_matcher *m, uint32_t id)
{
    if (m->memo_gen != m->gen) {
        if (m->memo)
            memset(m->memo, 0, m->memo_cap * sizeof *m->memo);
        m->memo_n = 0;
        m->memo_gen = m->gen;
    }
    if (!m->memo_cap)
        return NULL;
    for (uint32_t h = (id * 0x9E3779B1u) & (m->memo_cap - 1);; h = (h + 1) & (m->memo_cap - 1)) {
        if (!m->memo[h].key)
            return NULL;
        if (m->memo[h].key == id + 1)
            return m->memo[h].t;
    }
}

static void memo_put(struct gram_matcher *m, uint32_t id, struct gtab *t)
{
    if ((m->memo_n + 1) * 2 > m->memo_cap) {
        uint32_t nc = m->memo_cap ? m->memo_cap * 2 : 64;
        struct memo *nm = calloc(nc, sizeof *nm);
        if (!nm)
            return; /* a memo miss later only costs time */
        for (uint32_t i = 0; i < m->memo_cap; i++)
            if (m->memo[i].key) {
                uint32_t h = ((m->memo[i].key - 1) * 0x9E3779B1u) & (nc - 1);
                while (nm[h].key)
                    h = (h + 1) & (nc - 1);
                nm[h] = m->memo[i];
            }
        free(m->memo);
        m->memo = nm;
        m->memo_cap = nc;
    }
    uint32_t h = (id * 0x9E3779B1u) & (m->memo_cap - 1);
    while (m->memo[h].key)
        h = (h + 1) & (m->memo_cap - 1);
    m->memo[h].key = id + 1;
    m->memo[h].t = t;
    m->memo_n++;
}

/* The table for stack id: frames deepen until few ids are uncertain. NULL: out of memory. */
static struct gtab *table_for(struct gram_matcher *m, uint32_t id)
{
    struct gtab *t = memo_get(m, id);
    if (t)
        return t;
    int depth = 0;
    for (uint32_t x = id; x; x = m->nd[x].parent)
        depth++;
    for (int k = 1;; k++) {
        int exact = k >= depth;
        struct hk h;
        int cut;
        if (chain_key_memo(m, id, k, exact, &h, &cut))
            return NULL;
        t = gram_vocab_tab_get(m->v, h.a, h.b);
        if (!t) {
            t = build_table(m, id, k, exact);
            if (!t)
                return NULL;
            t->k1 = h.a;
            t->k2 = h.b;
            struct gtab *put = gram_vocab_tab_put(m->v, t);
            if (put) {
                t = put;
            } else {
                t->next_owned = m->owned;
                m->owned = t;
            }
        }
        if (exact || cut || t->unc_tok <= (uint32_t)m->unc_limit || k >= KMAX)
            break;
    }
    memo_put(m, id, t);
    return t;
}

static int cmp_u32(const void *a, const void *b)
{
    uint32_t x = *(const uint32_t *)a, y = *(const uint32_t *)b;
    return x < y ? -1 : x > y;
}

static int add_roots(struct gram_matcher *m, const struct gtab *t)
{
    if (m->n_roots + t->n_unc > m->cap_roots) {
        size_t nc = m->cap_roots ? m->cap_roots * 2 : 256;
        while (nc < m->n_roots + t->n_unc)
            nc *= 2;
        void *q = realloc(m->roots, nc * sizeof *m->roots);
        if (!q)
            return CERR_NOMEM;
        m->roots = q;
        m->cap_roots = nc;
    }
    if (t->n_unc)
        memcpy(m->roots + m->n_roots, t->unc, (size_t)t->n_unc * sizeof *t->unc);
    m->n_roots += t->n_unc;
    return 0;
}

static void or_table(const struct gtab *t, uint32_t *mask, size_t words)
{
    if (t->dense)
        for (size_t w = 0; w < words; w++)
            mask[w] |= t->acc[w];
    else
        for (uint32_t i = 0; i < t->n_acc; i++)
            mask[t->acc[i] >> 5] |= 1u << (t->acc[i] & 31);
}

/* The mask of the current state, stack by stack: a direct walk where it stays small, else
 * the stack's table plus its uncertain subtrees walked with the whole state. */
static int mask_by_stack(struct gram_matcher *m, uint32_t *mask, int tried_whole)
{
    const struct gram_vocab *v = m->v;
    size_t words = ((size_t)v->n_vocab + 31) / 32;
    uint32_t cur = m->cur, n = m->sets[cur].len;
    uint32_t *ids = malloc(((size_t)n + 1) * sizeof *ids);
    if (!ids)
        return CERR_NOMEM;
    memcpy(ids, m->pool + m->sets[cur].off, (size_t)n * sizeof *ids);
    int rc = 0;
    for (uint32_t j = 0; j < n && !rc; j++) {
        uint32_t id = ids[j];
        if (id <= SENT_NODE)
            continue;
        struct gtab *t = memo_get(m, id);
        if (!t && !tried_whole) {
            size_t st = m->n_tmp;
            gm_tmp_add(m, st, id);
            m->at[0] = gm_intern_set(m, st);
            int r = m->bad ? -2 : walk(m, 0, v->n_node, mask, m->walk_budget);
            if (r == 0)
                continue;
            if (r == -2) {
                rc = CERR_NOMEM;
                break;
            }
        }
        if (!t)
            t = table_for(m, id);
        if (!t) {
            rc = CERR_NOMEM;
            break;
        }
        m->tab_masks++;
        or_table(t, mask, words);
        rc = add_roots(m, t);
    }
    free(ids);
    if (rc)
        return rc;
    if (m->n_roots > 1)
        qsort(m->roots, m->n_roots, sizeof *m->roots, cmp_u32);
    uint32_t covered = 0;
    for (size_t i = 0; i < m->n_roots; i++) {
        uint32_t r = m->roots[i];
        if (r < covered)
            continue; /* inside a subtree walked already */
        covered = v->end[r];
        unsigned d = v->dep[r];
        const uint8_t *b = (const uint8_t *)v->data + v->off[v->order[v->t0[r]]];
        uint32_t s = cur;
        for (unsigned j = 0; j + 1 < d && s; j++)
            s = gm_step(m, s, b[j]);
        if (m->bad)
            return CERR_NOMEM;
        if (!s)
            continue;
        m->at[d - 1] = s;
        if (walk(m, r, v->end[r], mask, -1))
            return CERR_NOMEM;
    }
    return 0;
}

static int tables_usable(struct gram_matcher *m)
{
    if (m->tabs_ok < 0) {
        m->tabs_ok = 1;
        for (int r = 0; r < m->g->n_rules; r++)
            if (!m->g->nalt[r])
                m->tabs_ok = 0;
    }
    return m->tabs_ok;
}

static int eog_bits(const struct gram_matcher *m, uint32_t *mask)
{
    const struct gram_vocab *v = m->v;
    if (gram_matcher_complete(m))
        for (int i = 0; i < v->n_vocab; i++)
            if (v->eog[i])
                mask[i >> 5] |= 1u << (i & 31);
    return 0;
}

static int popcount_mask(const uint32_t *mask, size_t words)
{
    int c = 0;
    for (size_t w = 0; w < words; w++) { /* SWAR: no popcnt instruction is assumed */
        uint32_t x = mask[w];
        x = x - ((x >> 1) & 0x55555555u);
        x = (x & 0x33333333u) + ((x >> 2) & 0x33333333u);
        c += (int)((((x + (x >> 4)) & 0x0F0F0F0Fu) * 0x01010101u) >> 24);
    }
    return c;
}

int gram_matcher_mask(struct gram_matcher *m, uint32_t *mask)
{
    const struct gram_vocab *v = m->v;
    size_t words = ((size_t)v->n_vocab + 31) / 32;
    m->masks++;
    m->tick++;
    if (m->over)
        return CERR_LIMIT;
    m->work = 0;
    if (gm_over_caps(m) && gm_rebuild(m))
        return m->over ? CERR_LIMIT : CERR_NOMEM;
    if (m->cache_gen != m->gen) { /* set ids changed meaning */
        for (int i = 0; i < NCACHE; i++)
            m->cache[i].count = -1;
        m->cache_gen = m->gen;
    }
    for (int i = 0; i < NCACHE; i++) {
        struct mcache *c = &m->cache[i];
        if (c->mask && c->count >= 0 && c->set == m->cur) {
            memcpy(mask, c->mask, words * 4);
            c->used = m->tick;
            m->hits++;
            return c->count;
        }
    }
    memset(mask, 0, words * 4);
    eog_bits(m, mask);
    m->bad = 0;
    m->n_roots = 0;
    int rc = 0, use_tabs = tables_usable(m);
    /* a known table for any stack: straight to the tables; else one walk of the whole state */
    int known = 0;
    if (use_tabs) {
        const struct gset *cs = &m->sets[m->cur];
        for (uint32_t j = 0; j < cs->len && !known; j++)
            known = m->pool[cs->off + j] > SENT_NODE && memo_get(m, m->pool[cs->off + j]) != NULL;
    }
    int r = -1;
    if (!known) {
        m->at[0] = m->cur;
        r = walk(m, 0, v->n_node, mask, use_tabs ? m->walk_budget : -1);
    }
    if (r == -2)
        rc = CERR_NOMEM;
    else if (r == -1)
        rc = mask_by_stack(m, mask, !known);
    if (rc || m->bad) {
        m->bad = 0;
        return m->over ? CERR_LIMIT : CERR_NOMEM;
    }
    int count = popcount_mask(mask, words);
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
    if (c->mask) {
        memcpy(c->mask, mask, words * 4);
        c->set = m->cur;
        c->count = count;
        c->used = m->tick;
    }
    return count;
}

int gram_matcher_mask_naive(struct gram_matcher *m, uint32_t *mask)
{
    const struct gram_vocab *v = m->v;
    size_t words = ((size_t)v->n_vocab + 31) / 32;
    if (m->over)
        return CERR_LIMIT;
    m->work = 0; /* the work bound as gram_matcher_mask's */
    if (gm_over_caps(m) && gm_rebuild(m))
        return m->over ? CERR_LIMIT : CERR_NOMEM;
    memset(mask, 0, words * 4);
    eog_bits(m, mask);
    m->bad = 0;
    for (int i = 0; i < v->n_vocab; i++) {
        if (v->len[i] <= 0)
            continue;
        const uint8_t *b = (const uint8_t *)v->data + v->off[i];
        uint32_t s = m->cur;
        for (int j = 0; j < v->len[i] && s; j++)
            s = gm_step(m, s, b[j]);
        if (m->bad) {
            m->bad = 0;
            return m->over ? CERR_LIMIT : CERR_NOMEM;
        }
        if (s)
            mask[i >> 5] |= 1u << (i & 31);
    }
    return popcount_mask(mask, words);
}
