/* kv_pool.c — see kv_pool.h. */
#include "kv/kv_pool.h"

#include <stdlib.h>
#include <string.h>

size_t kv_bytes_per_token(int n_layer, int kv_dim, int kv_dtype)
{
    size_t el = kv_dtype == DT_F16 ? 2 : 4;
    return (size_t)2 * n_layer * kv_dim * el;
}

int kv_pool_new(struct kv_pool **out, struct be *be, int n_layer, int kv_dim, int block_size,
                int n_blocks, int kv_dtype, struct cerr *e)
{
    *out = NULL;
    if (n_layer <= 0 || kv_dim <= 0 || block_size <= 0 || n_blocks <= 0 ||
        (kv_dtype != DT_F32 && kv_dtype != DT_F16))
        return cerr_set(e, CERR_INVALID, "invalid KV pool geometry");
    struct kv_pool *p = calloc(1, sizeof *p);
    if (!p)
        return cerr_set(e, CERR_NOMEM, "out of memory");
    p->be = be;
    p->n_layer = n_layer;
    p->kv_dim = kv_dim;
    p->block_size = block_size;
    p->n_blocks = n_blocks;
    p->kv_dtype = kv_dtype;
    p->k = calloc((size_t)n_layer, sizeof *p->k);
    p->v = calloc((size_t)n_layer, sizeof *p->v);
    p->free_ids = malloc((size_t)n_blocks * sizeof *p->free_ids);
    p->refcnt = calloc((size_t)n_blocks, sizeof *p->refcnt);
    if (!p->k || !p->v || !p->free_ids || !p->refcnt) {
        kv_pool_free(p);
        return cerr_set(e, CERR_NOMEM, "out of memory");
    }
    size_t bytes = (size_t)n_blocks * block_size * kv_dim * (kv_dtype == DT_F16 ? 2 : 4);
    for (int l = 0; l < n_layer; l++) {
        p->k[l] = be->ops->alloc(be, bytes);
        p->v[l] = be->ops->alloc(be, bytes);
        if (!p->k[l] || !p->v[l]) {
            kv_pool_free(p);
            return cerr_set(e, CERR_NOMEM, "out of memory for the KV cache (%zu bytes per layer)",
                            2 * bytes);
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
    free(p);
}

struct model_kv_view kv_pool_view(const struct kv_pool *p)
{
    struct model_kv_view v = {.k = p->k, .v = p->v, .kv_dtype = p->kv_dtype,
                              .block_size = p->block_size};
    return v;
}

void kv_seq_init(struct kv_seq *s) { memset(s, 0, sizeof *s); }

int kv_seq_reserve(struct kv_pool *p, struct kv_seq *s, int n_pos, struct cerr *e)
{
    int need = (n_pos + p->block_size - 1) / p->block_size;
    if (need <= s->n_blocks)
        return 0;
    if (need - s->n_blocks > p->n_free)
        return cerr_set(e, CERR_LIMIT, "the KV cache is full (%d positions need %d blocks, %d free)",
                        n_pos, need - s->n_blocks, p->n_free);
    if (need > s->cap) {
        int cap = s->cap ? s->cap : 16;
        while (cap < need)
            cap *= 2;
        int32_t *nb = realloc(s->blocks, (size_t)cap * sizeof *nb);
        if (!nb)
            return cerr_set(e, CERR_NOMEM, "out of memory");
        s->blocks = nb;
        s->cap = cap;
    }
    while (s->n_blocks < need) {
        int32_t id = p->free_ids[--p->n_free];
        p->refcnt[id] = 1;
        s->blocks[s->n_blocks++] = id;
    }
    return 0;
}

void kv_seq_release(struct kv_pool *p, struct kv_seq *s)
{
    for (int i = 0; i < s->n_blocks; i++) {
        int32_t id = s->blocks[i];
        if (--p->refcnt[id] == 0)
            p->free_ids[p->n_free++] = id;
    }
    free(s->blocks);
    kv_seq_init(s);
}
