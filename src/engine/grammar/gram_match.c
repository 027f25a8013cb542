/* gram_match.c — the per-row matcher: parse stacks, stack sets and byte steps.
 *
 * State: a set of parse stacks. A stack is a chain of nodes {pos, parent}: pos indexes
 * syms[] (the top's pos is always a terminal; lower nodes hold where to continue after the
 * rule above them ends); stack 0 is the empty stack — the text so far is complete. A byte
 * advances every stack whose top class holds it, then expands rule references until every
 * top is a terminal again (a reference in last position replaces its node: a tail call, so
 * repetition does not deepen the stack). Node 1 is the sentinel: a stack that reaches it
 * has left the frames a token table looks at (gram_mask.c); it takes no byte.
 * The token masks are in gram_mask.c.
 */
#include <stdlib.h>
#include <string.h>

#include "engine/grammar/gram_mint.h"

/* ---- matcher --------------------------------------------------------------------------- */

/* Nodes and stack sets are interned: a node {pos, parent} has one id, so equal stacks are
 * equal ids; a set of stacks (sorted ids) has one id, and each set keeps its transitions
 * (set, byte) -> set as they are computed. Inside a string, a number or a literal the walk
 * over the vocabulary then follows table entries instead of re-expanding rules, and the
 * tables carry over from step to step. When the tables outgrow their cap they are rebuilt
 * from the current state alone. */

#define MAX_EXPAND_DEPTH 2000
#define MAX_NODES (1u << 21)
#define MAX_SETS (1u << 18)
#define MAX_POOL (1u << 24)

static uint32_t hash2(uint32_t a, uint32_t b)
{
    uint64_t x = ((uint64_t)a << 32 | b) * 0x9E3779B97F4A7C15ull;
    return (uint32_t)(x >> 32) ^ (uint32_t)x;
}

static int grow_tab(uint32_t **tab, uint32_t *cap, uint32_t need)
{
    if (need * 2 < *cap)
        return 0;
    uint32_t nc = *cap ? *cap * 2 : 4096;
    while (need * 2 >= nc)
        nc *= 2;
    uint32_t *t = calloc(nc, sizeof *t);
    if (!t)
        return -1;
    free(*tab);
    *tab = t;
    *cap = nc;
    return 1; /* rehash needed */
}

uint32_t gm_node(struct gram_matcher *m, uint32_t pos, uint32_t parent)
{
    if (m->bad)
        return 0;
    int r = grow_tab(&m->nd_tab, &m->nd_tab_cap, m->n_nd + 1);
    if (r < 0) {
        m->bad = 1;
        return 0;
    }
    if (r > 0)
        for (uint32_t i = 1; i < m->n_nd; i++) {
            uint32_t h = hash2(m->nd[i].pos, m->nd[i].parent) & (m->nd_tab_cap - 1);
            while (m->nd_tab[h])
                h = (h + 1) & (m->nd_tab_cap - 1);
            m->nd_tab[h] = i + 1;
        }
    uint32_t h = hash2(pos, parent) & (m->nd_tab_cap - 1);
    while (m->nd_tab[h]) {
        uint32_t id = m->nd_tab[h] - 1;
        if (m->nd[id].pos == pos && m->nd[id].parent == parent)
            return id;
        h = (h + 1) & (m->nd_tab_cap - 1);
    }
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
    m->nd_tab[h] = m->n_nd + 1;
    return m->n_nd++;
}

void gm_tmp_add(struct gram_matcher *m, size_t start, uint32_t id)
{
    m->work += (long)(m->n_tmp - start) + 1;
    if (m->work > m->work_max) {
        m->bad = m->over = 1;
        return;
    }
    for (size_t k = start; k < m->n_tmp; k++)
        if (m->tmp[k] == id)
            return;
    if (m->n_tmp == m->cap_tmp) {
        size_t nc = m->cap_tmp ? m->cap_tmp * 2 : 256;
        void *q = realloc(m->tmp, nc * sizeof *m->tmp);
        if (!q) {
            m->bad = 1;
            return;
        }
        m->tmp = q;
        m->cap_tmp = nc;
    }
    m->tmp[m->n_tmp++] = id;
}

/* Adds to tmp (from start) every stack with a terminal on top that continuing at pos under
 * parent leads to; the empty stack (0) when the text can end there. */
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
            if (parent <= SENT_NODE) { /* the end of the text, or of a table's frames */
                gm_tmp_add(m, start, parent);
                return;
            }
            pos = m->nd[parent].pos;
            parent = m->nd[parent].parent;
            continue;
        }
        if (s.kind == GS_TERM) {
            uint32_t id = gm_node(m, pos, parent);
            if (id)
                gm_tmp_add(m, start, id);
            return;
        }
        uint32_t np = g->syms[pos + 1].kind == GS_END ? parent : gm_node(m, pos + 1, parent);
        if (m->bad)
            return;
        uint32_t a0 = g->alt0[s.arg], na = g->nalt[s.arg];
        for (uint32_t a = 0; a < na; a++)
            expand(m, start, g->alts[a0 + a], np, depth + 1);
        return;
    }
}

static int cmp_u32(const void *a, const void *b)
{
    uint32_t x = *(const uint32_t *)a, y = *(const uint32_t *)b;
    return x < y ? -1 : x > y;
}

/* The set id of tmp[start..n_tmp) (sorted here), interned; the tmp entries are dropped. */
uint32_t gm_intern_set(struct gram_matcher *m, size_t start)
{
    uint32_t *v = m->tmp ? m->tmp + start : NULL;
    uint32_t n = (uint32_t)(m->n_tmp - start);
    if (n > 1)
        qsort(v, n, sizeof *v, cmp_u32);
    uint32_t h = 2166136261u;
    for (uint32_t i = 0; i < n; i++)
        h = hash2(h, v[i]);
    int r = grow_tab(&m->set_tab, &m->set_tab_cap, m->n_sets + 1);
    if (r < 0) {
        m->bad = 1;
        return 0;
    }
    if (r > 0)
        for (uint32_t i = 0; i < m->n_sets; i++) {
            uint32_t k = m->sets[i].h & (m->set_tab_cap - 1);
            while (m->set_tab[k])
                k = (k + 1) & (m->set_tab_cap - 1);
            m->set_tab[k] = i + 1;
        }
    uint32_t k = h & (m->set_tab_cap - 1);
    while (m->set_tab[k]) {
        const struct gset *s = &m->sets[m->set_tab[k] - 1];
        if (s->h == h && s->len == n && (!n || !memcmp(m->pool + s->off, v, (size_t)n * 4))) {
            m->n_tmp = start;
            return m->set_tab[k] - 1;
        }
        k = (k + 1) & (m->set_tab_cap - 1);
    }
    if (m->n_sets == m->cap_sets) {
        uint32_t nc = m->cap_sets ? m->cap_sets * 2 : 256;
        void *q = realloc(m->sets, (size_t)nc * sizeof *m->sets);
        if (!q) {
            m->bad = 1;
            return 0;
        }
        m->sets = q;
        m->cap_sets = nc;
    }
    if (m->n_pool + n > m->cap_pool) {
        size_t nc = m->cap_pool ? m->cap_pool * 2 : 4096;
        while (nc < m->n_pool + n)
            nc *= 2;
        void *q = realloc(m->pool, nc * sizeof *m->pool);
        if (!q) {
            m->bad = 1;
            return 0;
        }
        m->pool = q;
        m->cap_pool = nc;
    }
    if (n)
        memcpy(m->pool + m->n_pool, v, (size_t)n * 4);
    struct gset *s = &m->sets[m->n_sets];
    s->off = (uint32_t)m->n_pool;
    s->len = n;
    s->h = h;
    s->sent = (n > 0 && v[0] == SENT_NODE) || (n > 1 && v[1] == SENT_NODE);
    s->trans = NULL;
    m->n_pool += n;
    m->set_tab[k] = m->n_sets + 1;
    m->n_tmp = start;
    return m->n_sets++;
}

/* The set after byte b from set sid (0 = nothing takes it; set 0 is the empty set). */
uint32_t gm_step_slow(struct gram_matcher *m, uint32_t sid, unsigned b)
{
    struct gset *s = &m->sets[sid];
    if (s->trans && s->trans[b] >= 0)
        return (uint32_t)s->trans[b];
    if (!s->trans) {
        s->trans = malloc(256 * sizeof *s->trans);
        if (!s->trans) {
            m->bad = 1;
            return 0;
        }
        for (int i = 0; i < 256; i++)
            s->trans[i] = -1;
    }
    const struct gram *g = m->g;
    size_t start = m->n_tmp;
    uint32_t off = s->off, len = s->len;
    for (uint32_t k = 0; k < len; k++) {
        uint32_t id = m->pool[off + k];
        if (id <= SENT_NODE)
            continue;
        uint32_t pos = m->nd[id].pos;
        if (gcls_has(&g->cls[g->syms[pos].arg], b))
            expand(m, start, pos + 1, m->nd[id].parent, 0);
    }
    if (m->bad) {
        m->n_tmp = start;
        return 0;
    }
    uint32_t r = m->n_tmp == start ? 0 : gm_intern_set(m, start);
    if (!m->bad)
        m->sets[sid].trans[b] = (int32_t)r; /* sets may have moved */
    return m->bad ? 0 : r;
}

static void tables_free(struct gram_matcher *m)
{
    for (uint32_t i = 0; i < m->n_sets; i++)
        free(m->sets[i].trans);
    free(m->nd);
    free(m->nd_tab);
    free(m->sets);
    free(m->set_tab);
    free(m->pool);
    m->nd = NULL;
    m->nd_tab = m->set_tab = m->pool = NULL;
    m->sets = NULL;
    m->n_nd = m->cap_nd = m->nd_tab_cap = m->n_sets = m->cap_sets = m->set_tab_cap = 0;
    m->n_pool = m->cap_pool = 0;
}

/* Fresh tables: node 0, the empty set 0. */
static int tables_init(struct gram_matcher *m)
{
    m->bad = 0;
    gm_node(m, 0, 0); /* placeholder for id 0 (never looked up: pos 0 is never a stack top) */
    gm_node(m, SENT_POS, 0); /* 1: the sentinel below a token table's frames */
    m->n_tmp = 0;
    gm_intern_set(m, 0); /* set 0: empty */
    m->gen++;
    return m->bad ? CERR_NOMEM : 0;
}

/* Copies stack id of the old tables into the new ones. */
static uint32_t copy_stack(struct gram_matcher *m, const struct gnode *old, uint32_t id)
{
    if (!id)
        return 0;
    uint32_t p = copy_stack(m, old, old[id].parent);
    return gm_node(m, old[id].pos, p);
}

/* Rebuilds the tables from the current state alone (when they outgrow their caps). */
int gm_rebuild(struct gram_matcher *m)
{
    struct gset cs = m->sets[m->cur];
    uint32_t n = cs.len;
    uint32_t *ids = malloc(((size_t)n + 1) * 4);
    struct gnode *old = m->nd;
    if (!ids)
        return CERR_NOMEM;
    memcpy(ids, m->pool + cs.off, (size_t)n * 4);
    m->nd = NULL; /* keep the old nodes while copying */
    uint32_t *old_pool = m->pool;
    m->pool = NULL;
    struct gnode *keep = old;
    tables_free(m);
    free(old_pool);
    int rc = tables_init(m);
    for (uint32_t i = 0; !rc && i < n; i++)
        gm_tmp_add(m, 0, copy_stack(m, keep, ids[i]));
    if (!rc)
        m->cur = gm_intern_set(m, 0);
    free(keep);
    free(ids);
    return rc || m->bad ? CERR_NOMEM : 0;
}

int gram_matcher_new(struct gram_matcher **out, struct gram *g, const struct gram_vocab *v,
                     struct cerr *e)
{
    *out = NULL;
    struct gram_matcher *m = calloc(1, sizeof *m);
    if (!m)
        return cerr_set(e, CERR_NOMEM, "out of memory");
    m->g = gram_ref(g);
    m->v = (struct gram_vocab *)v; /* its table cache is locked inside */
    int ml = v ? v->max_len : 0;
    m->at = calloc((size_t)ml + 3, sizeof *m->at);
    m->ctx = calloc((size_t)ml + 3, 1);
    m->walk_budget = 4096;
    m->work_max = GM_WORK_MAX;
    m->tabs_ok = -1;
    m->unc_limit = 1000;
    if (!m->at || !m->ctx || tables_init(m)) {
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
    m->cur = gm_intern_set(m, 0);
    *out = m;
    return 0;
}

void gram_matcher_free(struct gram_matcher *m)
{
    if (!m)
        return;
    gram_unref(m->g);
    tables_free(m);
    free(m->tmp);
    free(m->at);
    free(m->ctx);
    free(m->memo);
    while (m->owned) {
        struct gtab *t = m->owned;
        m->owned = t->next_owned;
        gram_tab_free(t);
    }
    free(m->rmap);
    free(m->rnum);
    free(m->rq);
    free(m->minlen);
    free(m->km);
    free(m->roots);
    free(m->accbuf);
    for (int i = 0; i < NCACHE; i++)
        free(m->cache[i].mask);
    free(m);
}

int gm_over_caps(const struct gram_matcher *m)
{
    return m->n_nd > MAX_NODES || m->n_sets > MAX_SETS || m->n_pool > MAX_POOL;
}

int gram_matcher_accept_bytes(struct gram_matcher *m, const char *s, size_t n)
{
    if (m->over)
        return CERR_LIMIT;
    m->work = 0;
    if (gm_over_caps(m) && gm_rebuild(m))
        return m->over ? CERR_LIMIT : CERR_NOMEM;
    uint32_t sid = m->cur;
    for (size_t i = 0; i < n && sid; i++)
        sid = gm_step(m, sid, (uint8_t)s[i]);
    if (m->bad) {
        m->bad = 0;
        return m->over ? CERR_LIMIT : CERR_NOMEM;
    }
    if (!sid)
        return CERR_INVALID;
    m->cur = sid;
    return 0;
}

int gram_matcher_complete(const struct gram_matcher *m)
{
    const struct gset *s = &m->sets[m->cur];
    return s->len && m->pool[s->off] == 0; /* sorted: the empty stack first */
}

int gram_matcher_done(const struct gram_matcher *m)
{
    const struct gset *s = &m->sets[m->cur];
    return s->len == 1 && m->pool[s->off] == 0;
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

const struct gram_vocab *gram_matcher_vocab(const struct gram_matcher *m) { return m->v; }

void gram_matcher_tune(struct gram_matcher *m, long walk_budget, long unc_limit)
{
    if (walk_budget >= 0)
        m->walk_budget = walk_budget;
    if (unc_limit >= 0)
        m->unc_limit = unc_limit;
}

void gram_matcher_work_limit(struct gram_matcher *m, long work_max)
{
    if (work_max > 0)
        m->work_max = work_max;
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
