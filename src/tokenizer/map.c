/* map.c — the tokenizer's two hash tables: string -> id (vocabulary lookups) and
 * (left id, right id) -> (rank, merged id) (BPE merges). Open addressing with linear
 * probing, power-of-two capacity kept under 50% load; built once at load, read-only after.
 */
#include <stdlib.h>
#include <string.h>

#include "tokenizer/tok_int.h"
#include "util/err.h"

uint32_t tok_hash(const char *s, size_t n)
{
    /* FNV-1a over 8-byte words, then a final mix: fast for short token strings. */
    uint64_t h = 0xcbf29ce484222325ull ^ n;
    while (n >= 8) {
        uint64_t w;
        memcpy(&w, s, 8);
        h = (h ^ w) * 0x100000001b3ull;
        h ^= h >> 32;
        s += 8;
        n -= 8;
    }
    uint64_t w = 0;
    memcpy(&w, s, n);
    h = (h ^ w) * 0x9E3779B97F4A7C15ull;
    h ^= h >> 29;
    return (uint32_t)h;
}

static uint32_t cap_for(uint32_t expect)
{
    uint32_t c = 16;
    while (c < expect * 2u + 8u)
        c <<= 1;
    return c;
}

int tok_map_init(struct tok_map *m, uint32_t expect)
{
    uint32_t cap = cap_for(expect);
    m->slots = calloc(cap, sizeof *m->slots);
    m->mask = cap - 1;
    m->n = 0;
    return m->slots ? 0 : CERR_NOMEM;
}

void tok_map_free(struct tok_map *m)
{
    free(m->slots);
    m->slots = NULL;
    m->mask = m->n = 0;
}

static int map_grow(struct tok_map *m)
{
    struct tok_map nm;
    if (tok_map_init(&nm, (m->mask + 1)) != 0)
        return CERR_NOMEM;
    for (uint32_t i = 0; i <= m->mask; i++) {
        struct tok_map_slot *s = &m->slots[i];
        if (!s->key)
            continue;
        uint32_t j = s->hash & nm.mask;
        while (nm.slots[j].key)
            j = (j + 1) & nm.mask;
        nm.slots[j] = *s;
        nm.n++;
    }
    free(m->slots);
    *m = nm;
    return 0;
}

int tok_map_put(struct tok_map *m, const char *key, uint32_t len, int32_t val)
{
    if ((m->n + 1) * 2 > m->mask + 1 && map_grow(m) != 0)
        return CERR_NOMEM;
    uint32_t h = tok_hash(key, len);
    for (uint32_t i = h & m->mask;; i = (i + 1) & m->mask) {
        struct tok_map_slot *s = &m->slots[i];
        if (!s->key) {
            s->key = key ? key : "";
            s->len = len;
            s->hash = h;
            s->val = val;
            m->n++;
            return 0;
        }
        if (s->hash == h && s->len == len && memcmp(s->key, key, len) == 0)
            return 0;
    }
}

int32_t tok_map_get(const struct tok_map *m, const char *key, uint32_t len)
{
    if (!m->slots)
        return -1;
    uint32_t h = tok_hash(key, len);
    for (uint32_t i = h & m->mask;; i = (i + 1) & m->mask) {
        const struct tok_map_slot *s = &m->slots[i];
        if (!s->key)
            return -1;
        if (s->hash == h && s->len == len && memcmp(s->key, key, len) == 0)
            return s->val;
    }
}

int tok_pairmap_init(struct tok_pairmap *m, uint32_t expect)
{
    uint64_t cap = cap_for(expect);
    m->slots = malloc(cap * sizeof *m->slots);
    if (!m->slots)
        return CERR_NOMEM;
    for (uint64_t i = 0; i < cap; i++)
        m->slots[i].key = UINT64_MAX;
    m->mask = cap - 1;
    m->n = 0;
    return 0;
}

void tok_pairmap_free(struct tok_pairmap *m)
{
    free(m->slots);
    m->slots = NULL;
    m->mask = 0;
    m->n = 0;
}

static int pair_grow(struct tok_pairmap *m)
{
    struct tok_pairmap nm;
    if (tok_pairmap_init(&nm, (uint32_t)(m->mask + 1)) != 0)
        return CERR_NOMEM;
    for (uint64_t i = 0; i <= m->mask; i++)
        if (m->slots[i].key != UINT64_MAX)
            tok_pairmap_put(&nm, (int32_t)(m->slots[i].key >> 32), (int32_t)m->slots[i].key,
                            m->slots[i].rank, m->slots[i].id);
    free(m->slots);
    *m = nm;
    return 0;
}

int tok_pairmap_put(struct tok_pairmap *m, int32_t a, int32_t b, int32_t rank, int32_t id)
{
    if (!m->slots && tok_pairmap_init(m, 1024) != 0)
        return CERR_NOMEM;
    if ((uint64_t)(m->n + 1) * 2 > m->mask + 1 && pair_grow(m) != 0)
        return CERR_NOMEM;
    uint64_t key = ((uint64_t)(uint32_t)a << 32) | (uint32_t)b;
    uint64_t h = key * 0x9E3779B97F4A7C15ull;
    h ^= h >> 29;
    for (uint64_t i = h & m->mask;; i = (i + 1) & m->mask) {
        struct tok_pair_slot *s = &m->slots[i];
        if (s->key == UINT64_MAX) {
            s->key = key;
            s->rank = rank;
            s->id = id;
            m->n++;
            return 0;
        }
        if (s->key == key) {
            if (rank < s->rank) {
                s->rank = rank;
                s->id = id;
            }
            return 0;
        }
    }
}
