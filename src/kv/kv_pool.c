/* kv_pool.c — see kv_pool.h. Blocks live in one of three places: referenced by sequences
 * (refcnt > 0), the LRU of unreferenced cached blocks, or the free list. The key table is
 * open addressing with linear probing (backward-shift deletion) over block ids; the key
 * itself lives in the block's meta.
 */
#include "kv/kv_pool.h"

#include <openssl/evp.h>
#include <stdlib.h>
#include <string.h>

#include "backend/kvq.h"
#include "kv/kv_int.h"
#include "util/clock.h"

size_t kv_bytes_per_token(int n_layer, int kv_dim, int kv_dtype)
{
    return (size_t)n_layer * kvq_token_bytes(kv_dtype, kv_dim);
}

size_t kv_layer_block_bytes(const struct kv_pool *p, int l, int which)
{
    return (size_t)p->block_size * kvq_row_bytes(p->ldt[l], which, p->kv_dim);
}

static int kv_dtype_ok(int dt, int kv_dim)
{
    if (dt == DT_F32 || dt == DT_F16)
        return 1;
    return kvq_is(dt) && kvq_head_dim_of(dt) > 0 && kv_dim % kvq_head_dim_of(dt) == 0;
}

int kv_pool_new(struct kv_pool **out, struct be *be, int n_layer, int kv_dim, int block_size,
                int n_blocks, int kv_dtype, int max_cached_blocks, struct cerr *e)
{
    return kv_pool_new_layers(out, be, n_layer, kv_dim, block_size, n_blocks, kv_dtype, NULL,
                              max_cached_blocks, e);
}

int kv_pool_new_layers(struct kv_pool **out, struct be *be, int n_layer, int kv_dim,
                       int block_size, int n_blocks, int kv_dtype, const int *layer_dtype,
                       int max_cached_blocks, struct cerr *e)
{
    *out = NULL;
    int ok = n_layer > 0 && kv_dim > 0 && block_size > 0 && n_blocks > 0 &&
             kv_dtype_ok(kv_dtype, kv_dim);
    for (int l = 0; ok && layer_dtype && l < n_layer; l++)
        ok = kv_dtype_ok(layer_dtype[l], kv_dim);
    if (!ok)
        return cerr_set(e, CERR_INVALID, "invalid KV pool geometry");
    struct kv_pool *p = calloc(1, sizeof *p);
    if (!p)
        return cerr_set(e, CERR_NOMEM, "out of memory");
    if (!(p->ldt = malloc((size_t)n_layer * sizeof *p->ldt))) {
        free(p);
        return cerr_set(e, CERR_NOMEM, "out of memory");
    }
    size_t maxbb = 0;
    for (int l = 0; l < n_layer; l++) {
        p->ldt[l] = layer_dtype ? layer_dtype[l] : kv_dtype;
        for (int w = 0; w < 2; w++) {
            size_t bb = (size_t)block_size * kvq_row_bytes(p->ldt[l], w, kv_dim);
            maxbb = bb > maxbb ? bb : maxbb;
        }
    }
    p->be = be;
    p->n_layer = n_layer;
    p->kv_dim = kv_dim;
    p->block_size = block_size;
    p->n_blocks = n_blocks;
    p->kv_dtype = kv_dtype;
    p->cache_on = max_cached_blocks >= 0;
    p->max_cached_blocks = max_cached_blocks;
    p->lru_head = p->lru_tail = -1;
    uint32_t tsize = 16;
    while (tsize < 2u * (uint32_t)n_blocks)
        tsize *= 2;
    p->table_mask = tsize - 1;
    p->k = calloc((size_t)n_layer, sizeof *p->k);
    p->v = calloc((size_t)n_layer, sizeof *p->v);
    p->free_ids = malloc((size_t)n_blocks * sizeof *p->free_ids);
    p->refcnt = calloc((size_t)n_blocks, sizeof *p->refcnt);
    p->meta = calloc((size_t)n_blocks, sizeof *p->meta);
    p->table = malloc((size_t)tsize * sizeof *p->table);
    p->scratch = malloc(maxbb);
    if (!p->k || !p->v || !p->free_ids || !p->refcnt || !p->meta || !p->table || !p->scratch) {
        kv_pool_free(p);
        return cerr_set(e, CERR_NOMEM, "out of memory");
    }
    memset(p->table, 0xff, (size_t)tsize * sizeof *p->table);
    for (int l = 0; l < n_layer; l++) {
        size_t kb = (size_t)n_blocks * kv_layer_block_bytes(p, l, 0),
               vb = (size_t)n_blocks * kv_layer_block_bytes(p, l, 1);
        p->k[l] = be->ops->alloc(be, kb);
        p->v[l] = be->ops->alloc(be, vb);
        if (!p->k[l] || !p->v[l]) {
            kv_pool_free(p);
            return cerr_set(e, CERR_NOMEM, "out of memory for the KV cache (%zu bytes per layer)",
                            kb + vb);
        }
    }
    for (int i = 0; i < n_blocks; i++)
        p->free_ids[i] = n_blocks - 1 - i;
    p->n_free = n_blocks;
    *out = p;
    return 0;
}

void kv_pool_free(struct kv_pool *p)
{
    if (!p)
        return;
    kv_tier_free_bufs(p); /* first: an upload from them may still be in flight */
    for (int l = 0; p->k && l < p->n_layer; l++) {
        if (p->k[l])
            p->be->ops->free(p->be, p->k[l]);
        if (p->v && p->v[l])
            p->be->ops->free(p->be, p->v[l]);
    }
    free(p->k);
    free(p->v);
    free(p->free_ids);
    free(p->refcnt);
    free(p->meta);
    free(p->table);
    free(p->scratch);
    free(p->ldt);
    free(p);
}

struct model_kv_view kv_pool_view(const struct kv_pool *p)
{
    struct model_kv_view v = {.k = p->k, .v = p->v, .kv_dtype = p->kv_dtype,
                              .block_size = p->block_size, .layer_dtype = p->ldt};
    return v;
}

void kv_pool_set_listener(struct kv_pool *p, const struct kv_listener *l, int group)
{
    if (l)
        p->lis = *l;
    else
        memset(&p->lis, 0, sizeof p->lis);
    p->lis_group = group;
    kv_tier_wire_listener(p);
}

int kv_pool_available(const struct kv_pool *p) { return p->n_free + p->cs.lru; }

void kv_seq_init(struct kv_seq *s) { memset(s, 0, sizeof *s); }

/* ---- key table ------------------------------------------------------------------------ */

static uint32_t home(const struct kv_pool *p, const uint8_t *key)
{
    uint32_t h;
    memcpy(&h, key, sizeof h);
    return h & p->table_mask;
}

static int32_t table_find(const struct kv_pool *p, const uint8_t *key)
{
    for (uint32_t i = home(p, key);; i = (i + 1) & p->table_mask) {
        int32_t id = p->table[i];
        if (id < 0)
            return -1;
        if (!memcmp(p->meta[id].key, key, KV_KEY_BYTES))
            return id;
    }
}

static void table_put(struct kv_pool *p, int32_t id)
{
    uint32_t i = home(p, p->meta[id].key);
    while (p->table[i] >= 0)
        i = (i + 1) & p->table_mask;
    p->table[i] = id;
}

static void table_del(struct kv_pool *p, int32_t id)
{
    uint32_t i = home(p, p->meta[id].key);
    while (p->table[i] != id)
        i = (i + 1) & p->table_mask;
    p->table[i] = -1;
    for (uint32_t j = (i + 1) & p->table_mask; p->table[j] >= 0; j = (j + 1) & p->table_mask) {
        uint32_t h = home(p, p->meta[p->table[j]].key);
        /* move j back to i unless its home lies cyclically in (i, j] */
        int stays = i <= j ? (h > i && h <= j) : (h > i || h <= j);
        if (!stays) {
            p->table[i] = p->table[j];
            p->table[j] = -1;
            i = j;
        }
    }
}

/* ---- LRU -------------------------------------------------------------------------------- */

static void lru_unlink(struct kv_pool *p, int32_t id)
{
    struct kv_bmeta *m = &p->meta[id];
    if (m->prev >= 0)
        p->meta[m->prev].next = m->next;
    else
        p->lru_head = m->next;
    if (m->next >= 0)
        p->meta[m->next].prev = m->prev;
    else
        p->lru_tail = m->prev;
    m->in_lru = 0;
    p->cs.lru--;
}

static void lru_push(struct kv_pool *p, int32_t id)
{
    struct kv_bmeta *m = &p->meta[id];
    m->prev = p->lru_tail;
    m->next = -1;
    if (p->lru_tail >= 0)
        p->meta[p->lru_tail].next = id;
    else
        p->lru_head = id;
    p->lru_tail = id;
    m->in_lru = 1;
    p->cs.lru++;
}

/* Drops the oldest unreferenced cached block to the free list (spilling it to the SSD
 * tier first when it is not there yet). */
void kv_evict_one(struct kv_pool *p)
{
    int32_t id = p->lru_head;
    if (p->ssd && !p->meta[id].on_ssd)
        kv_tier_spill(p, id, 1);
    lru_unlink(p, id);
    table_del(p, id);
    if (p->meta[id].n_tok == p->block_size) {
        p->cs.full_entries--;
        if (p->lis.removed)
            p->lis.removed(p->lis.ud, p->lis_group, p->meta[id].key);
    }
    p->meta[id].n_tok = 0;
    p->meta[id].on_ssd = 0;
    p->cs.entries--;
    p->cs.evictions++;
    p->free_ids[p->n_free++] = id;
}

static void block_unref(struct kv_pool *p, int32_t id)
{
    if (--p->refcnt[id] > 0)
        return;
    if (p->meta[id].n_tok > 0) {
        lru_push(p, id);
        p->meta[id].t_unused = clock_now_s();
        while (p->cs.lru > p->max_cached_blocks)
            kv_evict_one(p);
    } else
        p->free_ids[p->n_free++] = id;
}

static void block_ref(struct kv_pool *p, int32_t id)
{
    if (p->refcnt[id]++ == 0 && p->meta[id].in_lru)
        lru_unlink(p, id);
}

static int seq_push(struct kv_seq *s, int32_t id)
{
    if (s->n_blocks == s->cap) {
        int cap = s->cap ? 2 * s->cap : 16;
        int32_t *nb = realloc(s->blocks, (size_t)cap * sizeof *nb);
        if (!nb)
            return CERR_NOMEM;
        s->blocks = nb;
        s->cap = cap;
    }
    s->blocks[s->n_blocks++] = id;
    return 0;
}

/* ---- sequences -------------------------------------------------------------------------- */

int kv_seq_reserve(struct kv_pool *p, struct kv_seq *s, int n_pos, struct cerr *e)
{
    int need = (n_pos + p->block_size - 1) / p->block_size;
    if (need <= s->n_blocks)
        return 0;
    if (need - s->n_blocks > kv_pool_available(p))
        return cerr_set(e, CERR_LIMIT, "the KV cache is full (%d positions need %d blocks, %d free)",
                        n_pos, need - s->n_blocks, kv_pool_available(p));
    while (s->n_blocks < need) {
        if (p->n_free == 0)
            kv_evict_one(p);
        int32_t id = p->free_ids[p->n_free - 1];
        if (seq_push(s, id))
            return cerr_set(e, CERR_NOMEM, "out of memory");
        p->n_free--;
        p->refcnt[id] = 1;
    }
    return 0;
}

void kv_seq_release(struct kv_pool *p, struct kv_seq *s)
{
    for (int i = 0; i < s->n_blocks; i++)
        if (s->blocks[i] >= 0)
            block_unref(p, s->blocks[i]);
    free(s->blocks);
    kv_seq_init(s);
}

void kv_seq_trim(struct kv_pool *p, struct kv_seq *s, int n_pos)
{
    int keep = (n_pos + p->block_size - 1) / p->block_size;
    if (keep < s->n_hashed)
        keep = s->n_hashed;
    while (s->n_blocks > keep) {
        int32_t id = s->blocks[--s->n_blocks];
        if (id >= 0)
            block_unref(p, id);
    }
}

void kv_seq_drop_before(struct kv_pool *p, struct kv_seq *s, int pos)
{
    for (int i = 0; i < s->n_blocks && (i + 1) * p->block_size <= pos; i++)
        if (s->blocks[i] >= 0) {
            block_unref(p, s->blocks[i]);
            s->blocks[i] = -1;
        }
}

int kv_seq_live_blocks(const struct kv_seq *s)
{
    int n = 0;
    for (int i = 0; i < s->n_blocks; i++)
        n += s->blocks[i] >= 0;
    return n;
}

/* ---- prefix cache ------------------------------------------------------------------------ */

void kv_key_root(uint8_t out[KV_KEY_BYTES], const void *ns, size_t n)
{
    unsigned int len = KV_KEY_BYTES;
    EVP_Digest(ns, n, out, &len, EVP_sha256(), NULL);
}

/* key = SHA-256(parent || n || ids[0..n)). Returns 0, or -1 when the digest failed (then
 * the caller must neither look up nor register anything). */
static int key_block(uint8_t out[KV_KEY_BYTES], const uint8_t parent[KV_KEY_BYTES],
                     const int32_t *ids, int n)
{
    int32_t nn = n;
    unsigned int olen = KV_KEY_BYTES;
    EVP_MD_CTX *c = EVP_MD_CTX_new();
    int ok = c && EVP_DigestInit_ex(c, EVP_sha256(), NULL) &&
             EVP_DigestUpdate(c, parent, KV_KEY_BYTES) && EVP_DigestUpdate(c, &nn, sizeof nn) &&
             EVP_DigestUpdate(c, ids, (size_t)n * sizeof *ids) && EVP_DigestFinal_ex(c, out, &olen);
    EVP_MD_CTX_free(c);
    return ok ? 0 : -1;
}

/* parent: the key before this block in its chain (NULL for the first); ids: its n_tok
 * tokens (for the listener). */
void kv_register_block(struct kv_pool *p, int32_t id, const uint8_t key[KV_KEY_BYTES], int n_tok,
                       const uint8_t *parent, const int32_t *ids)
{
    if (p->meta[id].n_tok > 0 || table_find(p, key) >= 0)
        return; /* already cached (a shared block) or the same content is cached elsewhere */
    memcpy(p->meta[id].key, key, KV_KEY_BYTES);
    p->meta[id].n_tok = n_tok;
    p->meta[id].on_ssd = 0;
    table_put(p, id);
    p->cs.entries++;
    if (n_tok == p->block_size) {
        p->cs.full_entries++;
        if (p->lis.stored)
            p->lis.stored(p->lis.ud, p->lis_group, key, parent, ids, n_tok);
    }
    p->dirty++;
}

static int copy_block(struct kv_pool *p, int32_t dst, int32_t src, struct cerr *e)
{
    for (int l = 0; l < p->n_layer; l++) {
        void *const *bufs[2] = {p->k, p->v};
        for (int kv = 0; kv < 2; kv++) {
            size_t bb = kv_layer_block_bytes(p, l, kv);
            char *base = bufs[kv][l];
            if (p->be->ops->download(p->be, p->scratch, base + (size_t)src * bb, bb, e) ||
                p->be->ops->upload(p->be, base + (size_t)dst * bb, p->scratch, bb, e))
                return e ? e->code : CERR_IO;
        }
    }
    p->cs.cow_copies++;
    return 0;
}

int kv_cache_lookup(struct kv_pool *p, struct kv_seq *s, const uint8_t root[KV_KEY_BYTES],
                    const int32_t *ids, int n, struct cerr *e)
{
    memcpy(s->chain, root, KV_KEY_BYTES);
    s->n_hashed = 0;
    if (!p->cache_on || n <= 1) {
        p->cs.misses += p->cache_on;
        return 0;
    }
    int bs = p->block_size, pos = 0;
    uint8_t key[KV_KEY_BYTES];
    while (pos + bs <= n - 1) {
        if (key_block(key, s->chain, ids + pos, bs))
            break;
        int32_t id = table_find(p, key);
        if (id >= 0 && p->meta[id].n_tok != bs)
            break;
        if (id >= 0)
            block_ref(p, id);
        else if ((id = kv_tier_restore_block(p, key, bs, pos ? s->chain : NULL, ids + pos)) < 0)
            break; /* neither in RAM nor on disk (or the file failed its checks) */
        if (seq_push(s, id)) {
            block_unref(p, id);
            kv_seq_release(p, s);
            return cerr_set(e, CERR_NOMEM, "out of memory");
        }
        memcpy(s->chain, key, KV_KEY_BYTES);
        s->n_hashed++;
        pos += bs;
    }
    int usable = n - 1 - pos;
    for (int k = usable < bs - 1 ? usable : bs - 1; k >= 1; k--) {
        if (key_block(key, s->chain, ids + pos, k))
            break;
        int32_t src = table_find(p, key);
        if (src < 0 && p->ssd && kv_tier_has(p, key, k)) {
            /* on disk only: read it straight into the sequence's own new block */
            if (kv_seq_reserve(p, s, pos + k, NULL))
                break; /* no room: the hit ends with the full blocks */
            if (kv_tier_read_into(p, s->blocks[s->n_blocks - 1], key, k) == 0) {
                pos += k;
                break;
            }
            block_unref(p, s->blocks[--s->n_blocks]); /* give the block back */
            continue;
        }
        if (src < 0 || p->meta[src].n_tok != k)
            continue;
        /* copy-on-write: the new sequence writes its next positions into this block */
        block_ref(p, src); /* keep it from being evicted by the reserve below */
        int rc = kv_seq_reserve(p, s, pos + k, e);
        if (!rc)
            rc = copy_block(p, s->blocks[s->n_blocks - 1], src, e);
        block_unref(p, src);
        if (rc) {
            kv_seq_release(p, s);
            return rc;
        }
        pos += k;
        break;
    }
    if (pos > 0) {
        p->cs.hits++;
        p->cs.hit_tokens += pos;
    } else
        p->cs.misses++;
    return pos;
}

void kv_cache_commit(struct kv_pool *p, struct kv_seq *s, const uint8_t root[KV_KEY_BYTES],
                     const int32_t *ids, int n_computed)
{
    if (!p->cache_on)
        return;
    if (s->n_hashed == 0)
        memcpy(s->chain, root, KV_KEY_BYTES);
    int bs = p->block_size;
    while (s->n_hashed < s->n_blocks && (s->n_hashed + 1) * bs <= n_computed) {
        uint8_t key[KV_KEY_BYTES];
        if (key_block(key, s->chain, ids + s->n_hashed * bs, bs))
            return;
        if (s->blocks[s->n_hashed] >= 0)
            kv_register_block(p, s->blocks[s->n_hashed], key, bs, s->n_hashed ? s->chain : NULL,
                              ids + s->n_hashed * bs);
        memcpy(s->chain, key, KV_KEY_BYTES);
        s->n_hashed++;
    }
}

void kv_cache_commit_tail(struct kv_pool *p, struct kv_seq *s, const uint8_t root[KV_KEY_BYTES],
                          const int32_t *ids, int n_computed)
{
    if (!p->cache_on)
        return;
    kv_cache_commit(p, s, root, ids, n_computed);
    int bs = p->block_size, pos = s->n_hashed * bs, k = n_computed - pos;
    if (k <= 0 || k >= bs || s->n_hashed >= s->n_blocks)
        return;
    uint8_t key[KV_KEY_BYTES];
    if (s->blocks[s->n_hashed] >= 0 && key_block(key, s->chain, ids + pos, k) == 0)
        kv_register_block(p, s->blocks[s->n_hashed], key, k, s->n_hashed ? s->chain : NULL,
                          ids + pos);
}

/* ---- invariants ----------------------------------------------------------------------- */

int kv_pool_check(const struct kv_pool *p, const struct kv_seq *const *seqs, int n_seqs,
                  struct cerr *e)
{
    int N = p->n_blocks, rc = 0;
    int32_t *cnt = calloc((size_t)N, sizeof *cnt);
    uint8_t *seen = calloc((size_t)N, 1);
    if (!cnt || !seen) {
        free(cnt);
        free(seen);
        return cerr_set(e, CERR_NOMEM, "out of memory");
    }
    for (int s = 0; s < n_seqs && !rc; s++)
        for (int i = 0; i < seqs[s]->n_blocks && !rc; i++) {
            int32_t id = seqs[s]->blocks[i];
            if (id == -1)
                continue; /* released (sliding window) */
            if (id < 0 || id >= N)
                rc = cerr_set(e, CERR_FORMAT, "sequence %d holds block id %d outside the pool", s,
                              (int)id);
            else
                cnt[id]++;
        }
    for (int id = 0; id < N && !rc; id++)
        if (cnt[id] != p->refcnt[id])
            rc = cerr_set(e, CERR_FORMAT, "block %d: refcount %d but %d references", id,
                          (int)p->refcnt[id], (int)cnt[id]);
    for (int i = 0; i < p->n_free && !rc; i++) {
        int32_t id = p->free_ids[i];
        if (seen[id]++ || p->refcnt[id] || p->meta[id].n_tok || p->meta[id].in_lru)
            rc = cerr_set(e, CERR_FORMAT, "free block %d is also referenced, cached or listed",
                          (int)id);
    }
    int n_lru = 0;
    for (int32_t id = p->lru_head, prev = -1; id >= 0 && !rc; prev = id, id = p->meta[id].next) {
        if (seen[id]++ || p->refcnt[id] || !p->meta[id].in_lru || !p->meta[id].n_tok ||
            p->meta[id].prev != prev)
            rc = cerr_set(e, CERR_FORMAT, "LRU block %d is inconsistent", (int)id);
        n_lru++;
    }
    if (!rc && n_lru != p->cs.lru)
        rc = cerr_set(e, CERR_FORMAT, "LRU holds %d blocks, counter says %d", n_lru, p->cs.lru);
    int entries = 0;
    for (int id = 0; id < N && !rc; id++) {
        if (!p->refcnt[id] && !seen[id])
            rc = cerr_set(e, CERR_FORMAT, "block %d is lost (unreferenced, not free, not cached)",
                          id);
        if (p->meta[id].n_tok) {
            entries++;
            if (table_find(p, p->meta[id].key) != id)
                rc = cerr_set(e, CERR_FORMAT, "cached block %d is not found by its key", id);
        }
    }
    for (uint32_t i = 0; i <= p->table_mask && !rc; i++)
        if (p->table[i] >= 0 && !p->meta[p->table[i]].n_tok)
            rc = cerr_set(e, CERR_FORMAT, "key table slot %u names uncached block %d", i,
                          (int)p->table[i]);
    if (!rc && entries != p->cs.entries)
        rc = cerr_set(e, CERR_FORMAT, "%d cached blocks, counter says %d", entries, p->cs.entries);
    int full = 0;
    for (int id = 0; id < N && !rc; id++)
        full += p->meta[id].n_tok == p->block_size;
    if (!rc && full != p->cs.full_entries)
        rc = cerr_set(e, CERR_FORMAT, "%d full cached blocks, counter says %d", full,
                      p->cs.full_entries);
    free(cnt);
    free(seen);
    return rc;
}

/* ---- sliding-window layers ------------------------------------------------------------ */

/* A cached full block of p under key: in RAM (referenced now), else restored from the SSD
 * tier (referenced once). -1 when neither. */
static int32_t take_block(struct kv_pool *p, const uint8_t key[KV_KEY_BYTES],
                          const uint8_t *parent, const int32_t *ids)
{
    int32_t id = table_find(p, key);
    if (id >= 0 && p->meta[id].n_tok == p->block_size) {
        block_ref(p, id);
        return id;
    }
    if (id >= 0)
        return -1;
    return kv_tier_restore_block(p, key, p->block_size, parent, ids);
}

/* 1 when p has key's full block in RAM or on its SSD tier. */
static int have_block(struct kv_pool *p, const uint8_t key[KV_KEY_BYTES])
{
    int32_t id = table_find(p, key);
    if (id >= 0)
        return p->meta[id].n_tok == p->block_size;
    return kv_tier_has(p, key, p->block_size);
}

int kv_cache_lookup_swa(struct kv_pool *pg, struct kv_seq *sg, struct kv_pool *ps,
                        struct kv_seq *ss, const uint8_t root[KV_KEY_BYTES], const int32_t *ids,
                        int n, int window, struct cerr *e)
{
    memcpy(sg->chain, root, KV_KEY_BYTES);
    memcpy(ss->chain, root, KV_KEY_BYTES);
    sg->n_hashed = ss->n_hashed = 0;
    if (!pg->cache_on || !ps->cache_on || n <= 1) {
        pg->cs.misses += pg->cache_on;
        return 0;
    }
    int bs = pg->block_size, max_full = (n - 1) / bs;
    uint8_t(*keys)[KV_KEY_BYTES] = malloc((size_t)(max_full + 1) * KV_KEY_BYTES);
    if (!keys)
        return cerr_set(e, CERR_NOMEM, "out of memory");
    /* the global layers' chain: how far do full blocks go (in RAM, or on the SSD tier)? */
    int m = 0;
    const uint8_t *parent = root;
    while (m < max_full) {
        if (key_block(keys[m], parent, ids + m * bs, bs) || !have_block(pg, keys[m]))
            break;
        parent = keys[m];
        m++;
    }
    /* the sliding layers need their window of blocks before the hit point: take the longest
     * prefix whose window is intact (never a hit without it) */
    for (; m > 0; m--) {
        int first = m * bs - window;
        int b0 = first > 0 ? first / bs : 0, ok = 1;
        for (int b = b0; b < m && ok; b++)
            ok = have_block(ps, keys[b]);
        if (ok)
            break;
    }
    int rc = 0, lost = 0;
    if (m > 0) {
        int first = m * bs - window, b0 = first > 0 ? first / bs : 0;
        for (int b = 0; b < m && !rc && !lost; b++) {
            const uint8_t *par = b ? keys[b - 1] : NULL;
            int32_t g = take_block(pg, keys[b], par, ids + b * bs);
            int32_t w = -1;
            if (g >= 0 && b >= b0 && (w = take_block(ps, keys[b], par, ids + b * bs)) < 0) {
                block_unref(pg, g);
                g = -1;
            }
            if (g < 0) { /* a file failed its checks, or no pool block was free: a miss */
                lost = 1;
                break;
            }
            if (seq_push(sg, g)) {
                block_unref(pg, g);
                if (w >= 0)
                    block_unref(ps, w);
                rc = CERR_NOMEM;
            } else if (seq_push(ss, w)) { /* g is in sg: released with it below */
                if (w >= 0)
                    block_unref(ps, w);
                rc = CERR_NOMEM;
            }
        }
        if (rc || lost) {
            kv_seq_release(pg, sg);
            kv_seq_release(ps, ss);
            if (rc) {
                free(keys);
                return cerr_set(e, CERR_NOMEM, "out of memory");
            }
            m = 0;
        }
    }
    if (m > 0) {
        memcpy(sg->chain, keys[m - 1], KV_KEY_BYTES);
        memcpy(ss->chain, keys[m - 1], KV_KEY_BYTES);
        sg->n_hashed = ss->n_hashed = m;
        pg->cs.hits++;
        pg->cs.hit_tokens += (long)m * bs;
    } else
        pg->cs.misses++;
    free(keys);
    return m * bs;
}
