/* gram_vocab.c — the grammar vocabulary: each id's bytes, the token trie the masks walk, and
 * the token tables shared by every matcher over it (gram_mint.h). */
#include <stdlib.h>
#include <string.h>

#include "engine/grammar/gram_mint.h"

#define TAB_CACHE_BYTES ((size_t)64 << 20) /* shared tables past this stay with their matcher */

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

/* The trie from the sorted ids: token k adds the nodes for its bytes past its common prefix
 * with token k-1 (sorted order is preorder). */
static int build_trie(struct gram_vocab *v)
{
    size_t cap = 0;
    for (int k = 0; k < v->n_tok; k++)
        cap += (size_t)v->len[v->order[k]];
    v->nb = malloc(cap + 1);
    v->dep = malloc((cap + 1) * sizeof *v->dep);
    v->end = malloc((cap + 1) * sizeof *v->end);
    v->t0 = malloc((cap + 2) * sizeof *v->t0);
    v->here = calloc(cap + 1, sizeof *v->here);
    uint32_t *path = malloc(((size_t)v->max_len + 2) * sizeof *path);
    if (!v->nb || !v->dep || !v->end || !v->t0 || !v->here || !path) {
        free(path);
        return CERR_NOMEM;
    }
    uint32_t n = 0;
    int open = 0; /* path[0..open) are the nodes of the previous token's bytes */
    for (int k = 0; k < v->n_tok; k++) {
        int32_t t = v->order[k];
        const uint8_t *b = (const uint8_t *)v->data + v->off[t];
        int L = v->len[t], l = 0;
        if (k) {
            int32_t p = v->order[k - 1];
            const uint8_t *pb = (const uint8_t *)v->data + v->off[p];
            int pl = v->len[p] < L ? v->len[p] : L;
            while (l < pl && pb[l] == b[l])
                l++;
        }
        for (int d = l; d < open; d++) /* the previous token's nodes past the prefix end */
            v->end[path[d]] = n;
        for (int d = l; d < L; d++) {
            v->nb[n] = b[d];
            v->dep[n] = (uint16_t)(d + 1);
            v->t0[n] = (uint32_t)k;
            path[d] = n++;
        }
        open = L;
        v->here[path[L - 1]]++;
    }
    for (int d = 0; d < open; d++)
        v->end[path[d]] = n;
    v->t0[n] = (uint32_t)v->n_tok;
    v->n_node = n;
    free(path);
    return 0;
}

int gram_vocab_new(struct gram_vocab **out, int n_vocab, const char *const *bytes,
                   const int *len, const int32_t *eog, int n_eog, struct cerr *e)
{
    *out = NULL;
    struct gram_vocab *v = calloc(1, sizeof *v);
    if (!v)
        return cerr_set(e, CERR_NOMEM, "out of memory");
    pthread_mutex_init(&v->mu, NULL);
    v->n_vocab = n_vocab;
    size_t total = 0;
    for (int i = 0; i < n_vocab; i++)
        if (len[i] > 0)
            total += (size_t)len[i];
    v->data = malloc(total + 1);
    v->off = calloc((size_t)n_vocab + 1, sizeof *v->off);
    v->len = calloc((size_t)n_vocab + 1, sizeof *v->len);
    v->order = malloc(((size_t)n_vocab + 1) * sizeof *v->order);
    v->eog = calloc((size_t)n_vocab + 1, 1);
    if (!v->data || !v->off || !v->len || !v->order || !v->eog) {
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
    if (v->max_len > 60000) {
        gram_vocab_free(v);
        return cerr_set(e, CERR_LIMIT, "a token of %d bytes is too long for the grammar", v->max_len);
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
    if (build_trie(v)) {
        gram_vocab_free(v);
        return cerr_set(e, CERR_NOMEM, "out of memory");
    }
    *out = v;
    return 0;
}

void gram_tab_free(struct gtab *t)
{
    if (!t)
        return;
    free(t->acc);
    free(t->unc);
    free(t);
}

void gram_vocab_free(struct gram_vocab *v)
{
    if (!v)
        return;
    free(v->data);
    free(v->off);
    free(v->len);
    free(v->order);
    free(v->eog);
    free(v->nb);
    free(v->dep);
    free(v->end);
    free(v->t0);
    free(v->here);
    for (size_t i = 0; i < v->cap_tabs; i++)
        gram_tab_free(v->tabs[i]);
    free(v->tabs);
    pthread_mutex_destroy(&v->mu);
    free(v);
}

int gram_vocab_size(const struct gram_vocab *v) { return v->n_vocab; }

const char *gram_vocab_token(const struct gram_vocab *v, int32_t id, int *len)
{
    if (!v || id < 0 || id >= v->n_vocab || v->len[id] <= 0) {
        *len = -1;
        return NULL;
    }
    *len = v->len[id];
    return v->data + v->off[id];
}

static struct gtab *find(const struct gram_vocab *v, uint64_t k1, uint64_t k2)
{
    if (!v->cap_tabs)
        return NULL;
    for (size_t h = (size_t)k1 & (v->cap_tabs - 1);; h = (h + 1) & (v->cap_tabs - 1)) {
        struct gtab *t = v->tabs[h];
        if (!t)
            return NULL;
        if (t->k1 == k1 && t->k2 == k2)
            return t;
    }
}

struct gtab *gram_vocab_tab_get(struct gram_vocab *v, uint64_t k1, uint64_t k2)
{
    pthread_mutex_lock(&v->mu);
    struct gtab *t = find(v, k1, k2);
    pthread_mutex_unlock(&v->mu);
    return t;
}

struct gtab *gram_vocab_tab_put(struct gram_vocab *v, struct gtab *t)
{
    pthread_mutex_lock(&v->mu);
    struct gtab *old = find(v, t->k1, t->k2);
    if (old) {
        pthread_mutex_unlock(&v->mu);
        gram_tab_free(t);
        return old;
    }
    if (v->tab_bytes + t->bytes > TAB_CACHE_BYTES) {
        pthread_mutex_unlock(&v->mu);
        return NULL;
    }
    if ((v->n_tabs + 1) * 2 > v->cap_tabs) {
        size_t nc = v->cap_tabs ? v->cap_tabs * 2 : 256;
        struct gtab **nt = calloc(nc, sizeof *nt);
        if (!nt) {
            pthread_mutex_unlock(&v->mu);
            return NULL;
        }
        for (size_t i = 0; i < v->cap_tabs; i++)
            if (v->tabs[i]) {
                size_t h = (size_t)v->tabs[i]->k1 & (nc - 1);
                while (nt[h])
                    h = (h + 1) & (nc - 1);
                nt[h] = v->tabs[i];
            }
        free(v->tabs);
        v->tabs = nt;
        v->cap_tabs = nc;
    }
    size_t h = (size_t)t->k1 & (v->cap_tabs - 1);
    while (v->tabs[h])
        h = (h + 1) & (v->cap_tabs - 1);
    v->tabs[h] = t;
    v->n_tabs++;
    v->tab_bytes += t->bytes;
    pthread_mutex_unlock(&v->mu);
    return t;
}
