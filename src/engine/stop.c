/* stop.c — see stop.h.
 *
 * A byte trie of the stops with Aho-Corasick failure links. The automaton's state after the
 * text so far is the longest suffix of that text that is a prefix of some stop, so the held
 * tail is exactly the state's string (depth bytes) and everything before it can be emitted.
 * Each node records the longest stop that is a suffix of its string (its own terminal, else its
 * failure node's), so a match is found in O(1) per byte, amortised.
 */
#include "engine/stop.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

struct node {
    int32_t child, sibling; /* first child, next sibling; 0 = none (the root is never one) */
    int32_t fail;
    int32_t depth;
    int32_t term;  /* index of the stop ending exactly here, -1 = none */
    int32_t match; /* the longest stop that is a suffix of this node's string, -1 = none */
    int32_t mlen;  /* its length */
    unsigned char c;
};

struct stop_matcher {
    struct node *nodes; /* (n_nodes) node 0 = root */
    int32_t n_nodes;
    int32_t state;
    char *held; /* (max stop length) the state's string */
    size_t hn;
    int fired, which;
    /* stop_gate_block: stops from gate_first on are off inside the block */
    int gate_first;       /* INT32_MAX: no gate */
    char *tag[2];         /* the block's open and close tags (malloc'd; tag[0] may be NULL) */
    size_t tag_k;         /* bytes of the awaited tag matched so far */
    int blk;              /* 0 before the block, 1 inside, 2 after */
};

/* The longest prefix of t that is a suffix of t[0..k) followed by c. */
static size_t tag_step(const char *t, size_t k, unsigned char c)
{
    for (;;) {
        if ((unsigned char)t[k] == c)
            return k + 1;
        if (k == 0)
            return 0;
        size_t j = k - 1; /* the longest proper border of t[0..k) */
        while (j > 0 && memcmp(t, t + k - j, j))
            j--;
        k = j;
    }
}

/* Moves the block state over byte c. */
static void blk_step(struct stop_matcher *m, unsigned char c)
{
    if (m->blk == 2 || !m->tag[m->blk])
        return;
    const char *t = m->tag[m->blk];
    m->tag_k = tag_step(t, m->tag_k, c);
    if (!t[m->tag_k]) {
        m->blk++;
        m->tag_k = 0;
    }
}

/* The stop to fire at node u (-1: none): the longest whose gate is open; *mlen its length. */
static int32_t match_at(const struct stop_matcher *m, int32_t u, int32_t *mlen)
{
    const struct node *nu = &m->nodes[u];
    if (nu->match < 0 || m->blk != 1 || nu->match < m->gate_first) {
        *mlen = nu->mlen;
        return nu->match;
    }
    for (int32_t v = u; v; v = m->nodes[v].fail)
        if (m->nodes[v].term >= 0 && m->nodes[v].term < m->gate_first) {
            *mlen = m->nodes[v].depth;
            return m->nodes[v].term;
        }
    return -1;
}

static int32_t child_of(const struct stop_matcher *m, int32_t u, unsigned char c)
{
    for (int32_t v = m->nodes[u].child; v; v = m->nodes[v].sibling)
        if (m->nodes[v].c == c)
            return v;
    return 0;
}

/* The automaton's transition: the longest stop prefix after appending c to u's string. */
static int32_t step(const struct stop_matcher *m, int32_t u, unsigned char c)
{
    for (;;) {
        int32_t v = child_of(m, u, c);
        if (v || u == 0)
            return v;
        u = m->nodes[u].fail;
    }
}

int stop_new(struct stop_matcher **out, const char *const *stops, int n, struct cerr *e)
{
    *out = NULL;
    if (!stops || n < 0)
        n = 0;
    size_t total = 1, maxlen = 1;
    for (int i = 0; i < n; i++) {
        size_t l = stops[i] ? strlen(stops[i]) : 0;
        total += l;
        if (l > maxlen)
            maxlen = l;
    }
    if (total > INT32_MAX / 2)
        return cerr_set(e, CERR_LIMIT, "stop sequences are too long");
    struct stop_matcher *m = calloc(1, sizeof *m);
    int32_t *queue = malloc(total * sizeof *queue);
    if (m) {
        m->nodes = calloc(total, sizeof *m->nodes);
        m->held = malloc(maxlen);
    }
    if (!m || !queue || !m->nodes || !m->held) {
        free(queue);
        stop_free(m);
        return cerr_set(e, CERR_NOMEM, "out of memory");
    }
    m->gate_first = INT32_MAX;
    m->blk = 2;
    m->n_nodes = 1;
    m->nodes[0].term = m->nodes[0].match = -1;
    for (int i = 0; i < n; i++) {
        if (!stops[i] || !stops[i][0])
            continue;
        int32_t u = 0;
        for (const unsigned char *p = (const unsigned char *)stops[i]; *p; p++) {
            int32_t v = child_of(m, u, *p);
            if (!v) {
                v = m->n_nodes++;
                struct node *nv = &m->nodes[v];
                nv->c = *p;
                nv->depth = m->nodes[u].depth + 1;
                nv->term = nv->match = -1;
                nv->sibling = m->nodes[u].child;
                m->nodes[u].child = v;
            }
            u = v;
        }
        if (m->nodes[u].term < 0)
            m->nodes[u].term = i;
    }
    /* breadth first: a node's failure node is shallower, so it is finished first */
    int32_t qh = 0, qt = 0;
    for (int32_t v = m->nodes[0].child; v; v = m->nodes[v].sibling)
        queue[qt++] = v;
    while (qh < qt) {
        int32_t u = queue[qh++];
        struct node *nu = &m->nodes[u];
        if (nu->term >= 0) {
            nu->match = nu->term;
            nu->mlen = nu->depth;
        } else {
            nu->match = m->nodes[nu->fail].match;
            nu->mlen = m->nodes[nu->fail].mlen;
        }
        for (int32_t v = nu->child; v; v = m->nodes[v].sibling) {
            /* the root's children fail to the root; deeper ones to the longest proper
             * suffix of their string that is in the trie */
            m->nodes[v].fail = u == 0 ? 0 : step(m, nu->fail, m->nodes[v].c);
            queue[qt++] = v;
        }
    }
    free(queue);
    *out = m;
    return 0;
}

void stop_free(struct stop_matcher *m)
{
    if (!m)
        return;
    free(m->nodes);
    free(m->held);
    free(m->tag[0]);
    free(m->tag[1]);
    free(m);
}

int stop_gate_block(struct stop_matcher *m, int first, const char *open, const char *close,
                    int inside)
{
    int has_open = open && *open;
    if ((!has_open && !inside) || !close || !*close)
        return 0; /* no block */
    char *o = has_open && !inside ? strdup(open) : NULL, *c = strdup(close);
    if ((has_open && !inside && !o) || !c) {
        free(o);
        free(c);
        return CERR_NOMEM;
    }
    m->tag[0] = o;
    m->tag[1] = c;
    m->tag_k = 0;
    m->blk = inside ? 1 : 0;
    m->gate_first = first < 0 ? 0 : first;
    return 0;
}

static int reserve(char **out, size_t *len, size_t *cap, size_t extra)
{
    if (*cap - *len >= extra && *out)
        return 0;
    size_t want = *cap ? *cap : 64;
    while (want - *len < extra)
        want *= 2;
    char *p = realloc(*out, want);
    if (!p)
        return CERR_NOMEM;
    *out = p;
    *cap = want;
    return 0;
}

/* Appends the first k bytes of held + text (h = held length). */
static void emit(char *dst, const char *held, size_t h, const char *text, size_t k)
{
    if (k <= h) {
        memcpy(dst, held, k);
        return;
    }
    memcpy(dst, held, h);
    memcpy(dst + h, text, k - h);
}

int stop_push(struct stop_matcher *m, const char *text, size_t n, char **out, size_t *len,
              size_t *cap, int *which)
{
    if (m->fired) {
        *which = m->which;
        return 1;
    }
    if (n == 0)
        return 0;
    size_t h = m->hn;
    if (reserve(out, len, cap, h + n + 1))
        return CERR_NOMEM;
    int32_t u = m->state;
    for (size_t i = 0; i < n; i++) {
        u = step(m, u, (unsigned char)text[i]);
        blk_step(m, (unsigned char)text[i]);
        int32_t mlen, hit = match_at(m, u, &mlen);
        if (hit >= 0) {
            size_t start = h + i + 1 - (size_t)mlen; /* in held + text */
            emit(*out + *len, m->held, h, text, start);
            *len += start;
            m->fired = 1;
            m->which = *which = hit;
            m->hn = 0;
            m->state = 0;
            return 1;
        }
    }
    size_t d = (size_t)m->nodes[u].depth, total = h + n, k = total - d;
    emit(*out + *len, m->held, h, text, k);
    *len += k;
    if (d <= n) {
        memcpy(m->held, text + n - d, d);
    } else { /* the new tail still starts inside the old one */
        memmove(m->held, m->held + (h - (d - n)), d - n);
        memcpy(m->held + (d - n), text, n);
    }
    m->hn = d;
    m->state = u;
    return 0;
}

int stop_flush(struct stop_matcher *m, char **out, size_t *len, size_t *cap)
{
    if (m->fired || m->hn == 0)
        return 0;
    if (reserve(out, len, cap, m->hn + 1))
        return CERR_NOMEM;
    memcpy(*out + *len, m->held, m->hn);
    *len += m->hn;
    m->hn = 0;
    m->state = 0;
    return 0;
}

const char *stop_held(const struct stop_matcher *m, size_t *n)
{
    *n = m->hn;
    return m->held;
}
